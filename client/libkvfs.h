/*
 * libkvfs: the client side of the kvfs fast path, for engines.
 *
 *   struct kvfs_client *c;   kvfs_client_open("/mnt/kvfs/llama-8b", &c);
 *   struct kvfs_region *r;   kvfs_region_create(c, 1 << 30, &r);
 *   struct kvfs_batch *b;    kvfs_batch_new(r, ctl_off, 4096, &b);
 *   for each page: kvfs_batch_add(b, layer, name, dst_off, dst_len);
 *   kvfs_batch_read(b, &res);            (or kvfs_batch_submit + _wait)
 *   kvfs_batch_status(b, i, &bytes);     page i is at base + dst_off
 *
 * Writing is the mirror image: put page i's bytes at base + src_off, then
 *   kvfs_batch_add(b, layer, name, src_off, len) for each page;
 *   kvfs_batch_write(b, KVFS_WRITE_DURABLE, &res);   (or _submit_write + _wait)
 * or in one call, kvfs_write_pages(r, ctl_off, pages, n, flags, &res).
 *
 * A client is one open model directory of a mounted kvfs. A region is shared
 * memory (a sealed memfd, or a /dev/shm file the caller supplies) mapped both
 * here and in the daemon: page bytes land in it directly. A batch keeps its
 * descriptors and names in a control area of the region that the caller sets
 * aside (kvfs_batch_ctl_bytes tells how large); destinations are other
 * ranges of the same region.
 *
 * Thread safety: a client and its regions may be used from any number of
 * threads; a batch belongs to one thread at a time. Every function returns
 * 0 or -errno (see kvfs_ioctl.h for what each errno means).
 */
#ifndef LIBKVFS_H
#define LIBKVFS_H

#include <stddef.h>
#include <stdint.h>

#include "kvfs_ioctl.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kvfs_client;
struct kvfs_region;
struct kvfs_batch;

/* ---- clients ---- */
/* Open a model directory of a mounted kvfs (MOUNT/model). -ENOTTY if it is
 * not one (the daemon refuses the ABI handshake), -ENOENT if missing. */
int kvfs_client_open(const char *model_dir, struct kvfs_client **out);
/* Unregisters and unmaps every region still open, then closes. */
void kvfs_client_close(struct kvfs_client *c);
/* The model directory's file descriptor (for raw ioctls). */
int kvfs_client_fd(const struct kvfs_client *c);

/* ---- regions ---- */
/* Create size bytes of shared memory (memfd, sealed against shrinking),
 * map it, pre-fault it and register it with the daemon. */
int kvfs_region_create(struct kvfs_client *c, size_t size,
		       struct kvfs_region **out);
/* Register memory the caller already has (a /dev/shm file opened O_RDWR,
 * or a memfd): size bytes from offset 0 (0 = the whole file). The fd is
 * duplicated; the caller keeps its own. The mapping is populated here, which
 * allocates any holes in the caller's process (the daemon refuses memory
 * the caller has not allocated). */
int kvfs_region_register_fd(struct kvfs_client *c, int fd, size_t size,
			    struct kvfs_region **out);
/* Unregister, unmap and free. */
int kvfs_region_destroy(struct kvfs_region *r);
void *kvfs_region_base(const struct kvfs_region *r);
size_t kvfs_region_size(const struct kvfs_region *r);
uint64_t kvfs_region_id(const struct kvfs_region *r);

/* ---- batches ---- */
/* Control-area bytes a batch of up to max_pages descriptors needs
 * (descriptors plus KVFS_NAME_MAX bytes of name per page). */
size_t kvfs_batch_ctl_bytes(unsigned max_pages);
/* A batch whose control area is region bytes [ctl_off, ctl_off +
 * kvfs_batch_ctl_bytes(max_pages)). -ERANGE if that is not inside the
 * region, -EINVAL if ctl_off is not 8-aligned or max_pages is 0 or over
 * KVFS_BATCH_MAX. */
int kvfs_batch_new(struct kvfs_region *r, uint64_t ctl_off, unsigned max_pages,
		   struct kvfs_batch **out);
void kvfs_batch_free(struct kvfs_batch *b);
/* Forget every descriptor (the control area is reused). */
void kvfs_batch_reset(struct kvfs_batch *b);
unsigned kvfs_batch_count(const struct kvfs_batch *b);

/* Append a page by layer and name (read: into region bytes [dst_off,
 * dst_off + dst_len); write: the page is region bytes [dst_off, dst_off +
 * dst_len), dst_len its size; lookup: pass 0, 0). Returns its index, or
 * -ENOSPC when the batch is full, -ENAMETOOLONG / -EINVAL for a bad name. */
int kvfs_batch_add(struct kvfs_batch *b, uint32_t layer, const char *name,
		   uint64_t dst_off, uint64_t dst_len);
/* Append a page by handle (from a lookup). */
int kvfs_batch_add_handle(struct kvfs_batch *b, uint64_t handle,
			  uint64_t dst_off, uint64_t dst_len);
/* Point descriptor i at a new destination (reuse a lookup batch for a read). */
int kvfs_batch_set_dst(struct kvfs_batch *b, unsigned i, uint64_t dst_off,
		       uint64_t dst_len);

struct kvfs_batch_result {
	uint32_t done;    /* read: pages delivered; write: pages stored;
	                   * lookup: hit length in blocks */
	uint32_t failed;  /* descriptors with a nonzero status */
	uint64_t bytes;   /* payload bytes */
};

/* Read every page of the batch; waits. The call fails only as a whole
 * (e.g. -ENOENT for an unregistered region); check each page's status. */
int kvfs_batch_read(struct kvfs_batch *b, struct kvfs_batch_result *res);
/* Look every page up without reading it; group = descriptors per block
 * (0 or 1: each descriptor is a block). Fills handles and sizes. */
int kvfs_batch_lookup(struct kvfs_batch *b, unsigned group,
		      struct kvfs_batch_result *res);
/* Warm the daemon's RAM tier with every page of the batch (add pages with
 * dst 0, 0, by name or handle) and return at once: the daemon loads them
 * in the background, so a READ soon after is served from memory. A hint:
 * res->done counts pages queued or already in RAM; a page the tier cannot
 * hold is skipped, not failed. -ENOTTY from a daemon that predates it. */
int kvfs_batch_prefetch(struct kvfs_batch *b, struct kvfs_batch_result *res);
/*
 * Store every page of the batch as a new page (KVFS_IOC_WRITE): descriptor
 * i's source range is its bytes. flags: KVFS_WRITE_DURABLE returns once
 * every page is durable (else once every page is visible), and
 * KVFS_WRITE_REPLACE replaces pages of the same name (else -EEXIST for
 * each). res->done = pages stored; each page's status is 0 or -errno and,
 * on 0, kvfs_batch_handle gives its handle. The region's source bytes may
 * be reused as soon as this returns (the daemon copied them). -ENOTTY from
 * a daemon that predates batch writes; -EINTR if a signal interrupted the
 * call (not retried: some pages may be stored, look them up).
 */
int kvfs_batch_write(struct kvfs_batch *b, unsigned flags,
		     struct kvfs_batch_result *res);

/* One page of kvfs_write_pages: in: layer, name, its bytes at region
 * bytes [src_off, src_off + len); out: status (0 or -errno) and handle. */
struct kvfs_write_page {
	uint32_t layer;
	const char *name;
	uint64_t src_off;
	uint64_t len;
	int status;
	uint64_t handle;
};

/* Write n pages in one call, synchronously, using region bytes [ctl_off,
 * ctl_off + kvfs_batch_ctl_bytes(n)) as the control area (8-aligned, not
 * overlapping any source). 0 once the call was made (check every page's
 * status), or -errno for the whole call: a bad name in pages[i] fails it
 * before anything is sent (-EINVAL / -ENAMETOOLONG, pages[i].status says
 * which). */
int kvfs_write_pages(struct kvfs_region *r, uint64_t ctl_off,
		     struct kvfs_write_page *pages, unsigned n, unsigned flags,
		     struct kvfs_batch_result *res);

/* Asynchronous read or write: start now (returns at once), collect with
 * kvfs_batch_wait. At most one submission per batch at a time (-EBUSY). */
int kvfs_batch_submit(struct kvfs_batch *b);
int kvfs_batch_submit_write(struct kvfs_batch *b, unsigned flags);
int kvfs_batch_wait(struct kvfs_batch *b, struct kvfs_batch_result *res);

/* Per-descriptor results, valid after a read, lookup or write has completed. */
int kvfs_batch_status(const struct kvfs_batch *b, unsigned i, uint64_t *bytes);
uint64_t kvfs_batch_handle(const struct kvfs_batch *b, unsigned i);
const struct kvfs_page_desc *kvfs_batch_desc(const struct kvfs_batch *b,
					     unsigned i);

#ifdef __cplusplus
}
#endif

#endif
