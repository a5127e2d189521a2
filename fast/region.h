/*
 * Shared-memory regions of the fast path: memory an engine owns and hands to
 * the daemon so page bytes can land in it directly (kvfs_ioctl.h).
 *
 * The daemon usually runs as root, so it must not become a confused deputy:
 * a region is only memory the caller could already write (its own fd of a
 * tmpfs/memfd file, opened read-write, owned by its uid, already allocated
 * by the caller), and only the
 * registering process (uid and thread group) may use or drop it. When that
 * process exits, a reaper thread (pidfd) drops its regions.
 *
 * The engine may shrink its file at any time; a CPU access of the mapping
 * past the new end would raise SIGBUS in the daemon. All CPU accesses go
 * through the guarded helpers below: a fault replaces the mapping with
 * anonymous memory (as Wayland compositors do for client buffers), marks
 * the region broken and the access reports -EFAULT. io_uring reads into a
 * shrunk mapping fail with -EFAULT on their own.
 */
#ifndef KVFS_REGION_H
#define KVFS_REGION_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "fast.h"
#include "kvfs_ioctl.h"
#include "store.h"

struct kvfs;
struct kvfs_regions;

struct kvfs_region {
	uint64_t id;
	uid_t uid;
	pid_t tgid;
	int pidfd;
	uint8_t *base;
	uint64_t len;
	/* private to region.c */
	dev_t dev;                    /* the file, for counting memory per file */
	ino_t ino;
	uint64_t file_off;            /* where the region starts in it */
	int refs;                     /* under the registry lock */
	atomic_int broken;            /* set by the SIGBUS guard */
	struct kv_guard guard;        /* base, len, broken */
	struct kvfs_region *next;
};


int kvfs_regions_start(struct kvfs_regions **out);
/* Drop every region and stop the reaper. */
void kvfs_regions_stop(struct kvfs_regions *rs);

int kvfs_region_register(struct kvfs_regions *rs, const struct kvfs_caller *c,
			 struct kvfs_region_arg *a);
int kvfs_region_unregister(struct kvfs_regions *rs, const struct kvfs_caller *c,
			   uint64_t id);
/* Take a reference to the caller's region: -ENOENT, -EPERM, -EFAULT (broken). */
int kvfs_region_get(struct kvfs_regions *rs, const struct kvfs_caller *c,
		    uint64_t id, struct kvfs_region **out);
void kvfs_region_put(struct kvfs_regions *rs, struct kvfs_region *r);

/* Guarded CPU access to [off, off + len) (the caller checked the range).
 * 0, or -EFAULT once the region is broken. */
int kvfs_region_load(struct kvfs_region *r, uint64_t off, void *dst, size_t len);
int kvfs_region_store(struct kvfs_region *r, uint64_t off, const void *src,
		      size_t len);
int kvfs_region_zero(struct kvfs_region *r, uint64_t off, size_t len);
int kvfs_region_hash(struct kvfs_region *r, uint64_t off, size_t len,
		     uint8_t out[KV_HASH_LEN]);
/* kvfs_region_load, hashing the bytes as they are copied (one pass). */
int kvfs_region_load_hashed(struct kvfs_region *r, uint64_t off, void *dst, size_t len,
			    uint8_t out[KV_HASH_LEN]);
/* kvfs_region_store from an extent mapped by kv_store_map_extent (hold),
 * hashing the bytes as they are copied (kv_store_copy_mapped): -EFAULT if
 * the region broke, -EIO if the segment did. */
int kvfs_region_store_mapped(struct kvfs_region *r, uint64_t off, void *hold,
			     const void *src, size_t len, uint8_t out[KV_HASH_LEN]);

/*
 * Which of the region's pages are in memory now (mincore of the daemon's
 * mapping, which for a shared tmpfs mapping reports the file's pages). The
 * daemon never faults in a page the engine punched out or never allocated:
 * that memory would be allocated by, and charged to, the daemon. A call
 * checks the ranges it will touch before touching them; what the engine
 * punches while the call runs is its own race.
 */
struct kvfs_residency {
	uint64_t lo, hi;          /* page-aligned span of the region */
	unsigned char *vec;       /* one byte a page, bit 0: resident */
};
/* Map the pages of [lo, hi): 0, -ENOMEM or -errno of mincore. */
int kvfs_region_residency(struct kvfs_region *r, uint64_t lo, uint64_t hi,
			  struct kvfs_residency *m);
/* Is every page of [off, off + len) resident (inside m's span)? */
bool kvfs_residency_has(const struct kvfs_residency *m, uint64_t off, uint64_t len);
void kvfs_residency_free(struct kvfs_residency *m);

#endif
