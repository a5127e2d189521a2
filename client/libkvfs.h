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
 * memory (a sealed memfd, or a /dev/shm file the caller supplies, whole or
 * a page-aligned part of it) mapped both here and in the daemon: page bytes
 * land in it directly. A batch keeps its descriptors and names in a control
 * area of the region that the caller sets aside (kvfs_batch_ctl_bytes tells
 * how large); destinations are other ranges of the same region, or of a
 * data region (kvfs_batch_set_data_region): an engine's host pool, with no
 * room to spare, registered as a region of its own.
 *
 * An engine's scheduler loop need never block: kvfs_batch_submit returns at
 * once, kvfs_batch_poll tells whether the call is done, and the client's
 * event fd (kvfs_client_event_fd) turns readable when a submitted call
 * completes, for select, poll, epoll or an asyncio loop.
 *
 * Thread safety: a client and its regions may be used from any number of
 * threads; a batch belongs to one thread at a time (kvfs_batch_poll and
 * kvfs_batch_wait excepted: any thread may collect a submitted batch, once).
 * Every function returns 0 or -errno (see kvfs_ioctl.h for what each errno
 * means).
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
 * not one (the daemon refuses the ABI handshake), -ENOTDIR if it is a file
 * (a page), -ENOENT if missing. */
int kvfs_client_open(const char *model_dir, struct kvfs_client **out);
/* Unregisters and unmaps every region still open, then closes. */
void kvfs_client_close(struct kvfs_client *c);
/* The model directory's file descriptor (for raw ioctls). */
int kvfs_client_fd(const struct kvfs_client *c);

/*
 * The client's completion event fd: an eventfd (non-blocking, close-on-exec,
 * owned by the client: do not close it) to which every submitted call that
 * completes adds 1, after its batch is done. It polls readable (POLLIN)
 * while that count is nonzero: level-triggered with select, poll and
 * default epoll, one edge per completion with EPOLLET. Nothing clears it
 * but a read: drain it with kvfs_client_event_drain (or read(2) of 8 bytes),
 * THEN call kvfs_batch_poll on every batch in flight. In that order no
 * completion is missed: one that lands after the drain makes the fd
 * readable again. The count is a hint, not a list: a batch collected by
 * kvfs_batch_wait counted too, so a wakeup may find nothing new. One
 * consumer per client: a thread that drains takes the wakeup of every
 * batch of the client, so if several threads each poll only their own
 * batches, use one client each. Synchronous calls never touch it.
 */
int kvfs_client_event_fd(const struct kvfs_client *c);
/* Read and reset the event fd's count without blocking: the completions
 * counted since the last drain (0 if none), or -errno. */
int kvfs_client_event_drain(struct kvfs_client *c);

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
/*
 * Register part of such a file: bytes [offset, offset + size) (size 0 = to
 * the end of the file). Region offsets count from there: region offset 0
 * is file offset `offset`, and kvfs_region_base maps it. Tensor-parallel
 * ranks each register their part of one host pool; the daemon counts the
 * file's memory once per uid, however many regions map it. Only this range
 * is populated here, but the daemon requires the file to hold at least
 * offset + size allocated bytes (touch or fallocate the whole pool before
 * registering a part of it). -EINVAL: offset not a multiple of the page
 * size (4096), fd not a regular file or empty; -ERANGE: offset at or past
 * the end of the file, or offset + size past it. Offset 0 is the same call
 * as kvfs_region_register_fd; a nonzero offset gets -EINVAL from a daemon
 * that predates KVFS_REGION_AT_OFFSET.
 */
int kvfs_region_register_fd_at(struct kvfs_client *c, int fd, uint64_t offset,
			       size_t size, struct kvfs_region **out);
/* Unregister, unmap and free. -EBUSY (nothing done) while a batch of the
 * region is submitted and not yet collected, or while a batch uses it as
 * its data region (kvfs_batch_set_data_region(b, NULL) or free the batch). */
int kvfs_region_destroy(struct kvfs_region *r);
void *kvfs_region_base(const struct kvfs_region *r);
size_t kvfs_region_size(const struct kvfs_region *r);
uint64_t kvfs_region_id(const struct kvfs_region *r);
/* Where the region starts in its file (0 unless registered at an offset). */
uint64_t kvfs_region_offset(const struct kvfs_region *r);

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
/*
 * Make reads and writes of the batch move page bytes to and from region
 * data (its destinations, or a write's sources, are then offsets in data),
 * while its descriptors and names stay in the batch's own region: an
 * engine's host pool has no room for them. NULL (or the batch's own
 * region) goes back to the default. Applies to every descriptor, old and
 * new, from the next call on; lookups and prefetches do not use it. data
 * cannot be destroyed while a batch uses it (-EBUSY). -EXDEV: data belongs
 * to another client; -EBUSY: the batch is submitted. A daemon that predates
 * KVFS_BATCH_DATA_REGION fails such calls with -EINVAL.
 */
int kvfs_batch_set_data_region(struct kvfs_batch *b, struct kvfs_region *data);
/* The region dst offsets refer to: the data region, or the batch's own. */
struct kvfs_region *kvfs_batch_data_region(const struct kvfs_batch *b);

struct kvfs_batch_result {
	uint32_t done;    /* read: pages delivered; write: pages stored;
	                   * lookup: hit length in blocks */
	uint32_t failed;  /* descriptors with a nonzero status */
	uint64_t bytes;   /* payload bytes */
};

/* Read every page of the batch; waits. The call fails only as a whole
 * (e.g. -ENOENT for an unregistered region); check each page's status.
 * Every synchronous call may get -EAGAIN (nothing done) while 256 of the
 * uid's calls wait in the daemon: try again later, or submit instead. */
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

/*
 * Asynchronous read or write: start now (returns at once), collect with
 * kvfs_batch_wait or kvfs_batch_poll. At most one submission per batch at
 * a time (-EBUSY); -ESHUTDOWN once kvfs_client_close has begun. Until it is
 * collected the batch may not be changed (-EBUSY), and a write's source
 * bytes must stay as they are. A call the daemon refuses with EAGAIN (too
 * many waiting) is retried by libkvfs, so collecting never reports it.
 */
int kvfs_batch_submit(struct kvfs_batch *b);
int kvfs_batch_submit_write(struct kvfs_batch *b, unsigned flags);
/* Block until the submitted call completes, then collect it: the call's
 * result (0, res filled, or its whole-call -errno). -EINVAL if nothing was
 * submitted, or another thread collected it first. */
int kvfs_batch_wait(struct kvfs_batch *b, struct kvfs_batch_result *res);
/*
 * Never blocks. Completed: collect it, exactly as kvfs_batch_wait would
 * (0 with res filled, or the call's -errno). -EAGAIN: still in flight.
 * -EINVAL: nothing submitted, or already collected (by this or another
 * thread: of several threads polling one batch, one gets the result).
 * (A call the daemon refused as a whole may itself return -EINVAL; either
 * way, any return but -EAGAIN means the batch is no longer submitted.)
 * Safe from any thread, for any batch of any client.
 */
int kvfs_batch_poll(struct kvfs_batch *b, struct kvfs_batch_result *res);

/* Per-descriptor results, valid after a read, lookup or write has completed. */
int kvfs_batch_status(const struct kvfs_batch *b, unsigned i, uint64_t *bytes);
uint64_t kvfs_batch_handle(const struct kvfs_batch *b, unsigned i);
const struct kvfs_page_desc *kvfs_batch_desc(const struct kvfs_batch *b,
					     unsigned i);

#ifdef __cplusplus
}
#endif

#endif
