/*
 * The engine's public header, for the front ends (fuse/, fast/) and the
 * `kvfs` command's tools. kvfs_open() brings a store up (manifest, extent
 * store, in-memory index, recovery of uncommitted space) without mounting
 * it; the FUSE daemon (fuse/mount.h) serves it, offline tools use it
 * directly.
 */
#ifndef KVFS_ENGINE_H
#define KVFS_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kvfs;

struct kvfs_opts {
	uint64_t max_page;        /* largest page of a model without geometry */
	double entry_timeout;     /* seconds the kernel may cache names/attrs of sealed pages */
	unsigned commit_batch;    /* most operations per manifest transaction */
	uint64_t dirty_budget;    /* bytes of not-yet-durable payloads in RAM */
	bool no_direct;           /* buffered segment I/O (tmpfs stripes) */
	bool dedup;               /* share extents of identical payloads */
	uint64_t ram_cache;       /* RAM tier budget, bytes; 0: no RAM tier */
	uint64_t read_hold;       /* page bytes one uid's open files keep loaded */
	unsigned open_share;      /* % of the capacity one uid's open files may
	                           * hold against eviction (100: no limit) */
	uint64_t dir_share;       /* directories one uid but root may own (0: any) */
	uint64_t capacity;        /* physical byte budget; 0: the store's (mkfs) */
	bool authoritative;       /* a full store refuses writes (ENOSPC) instead
	                           * of evicting least recently used pages */
	unsigned evict_high;      /* % of capacity that starts eviction */
	unsigned evict_low;       /* % of capacity eviction brings usage down to */
	bool fault_injection;     /* tests: root may arm faults (user.kvfs.fault) */
	bool degraded;            /* mount without stripes that cannot be opened
	                           * (their pages give EIO); else refuse */
	unsigned events_ring;     /* KV event records MOUNT/.kvfs/events keeps */
	bool background_load;     /* answer at once: load the pages in the
	                           * background; changes wait for it (a mount) */
	uint64_t index_pages;     /* most pages the background load brings
	                           * into RAM, 0: all; layers beyond it stay in
	                           * the manifest until used */
	bool offline;             /* a tool, not a mount: no RAM tier, no loader
	                           * thread, no evictor thread (the tool evicts
	                           * itself if it wants: kvfs_gc) */
};

#define KVFS_MAX_PAGE_DEFAULT (64ull << 20)
#define KVFS_ENTRY_TIMEOUT_DEFAULT 3600.0
#define KVFS_COMMIT_BATCH_DEFAULT 4096u
#define KVFS_DIRTY_BUDGET_DEFAULT (256ull << 20)
#define KVFS_RAM_CACHE_DEFAULT (512ull << 20)
/* Page bytes one uid's open page files keep loaded between reads; past it
 * a read loads the page for itself (engine/pagefile.c). */
#define KVFS_READ_HOLD_DEFAULT (256ull << 20)
/* Percent of the capacity one uid's open page files may keep from being
 * evicted; past it, open fails with EMFILE (engine/openshare.c). */
#define KVFS_OPEN_SHARE_DEFAULT 25u
#define KVFS_DIR_SHARE_DEFAULT 200000u
#define KVFS_EVICT_HIGH_DEFAULT 95u
#define KVFS_EVICT_LOW_DEFAULT 90u
#define KVFS_EVENTS_RING_DEFAULT 16384u
#define KVFS_EVENTS_RING_MAX (1u << 24)

void kvfs_opts_default(struct kvfs_opts *o);

/* The smallest capacity mkfs and -o capacity accept: a few pages of any
 * size, and what a segment needs at least (KV_SEGMENT_SIZE_MIN). */
#define KVFS_CAPACITY_MIN (1ull << 20)

struct kvfs_mkfs_opts {
	unsigned nstripes;
	const char *const *stripes;  /* NULL/0: one stripe, STORE/stripe0 */
	uint64_t segment_size;       /* 0: default 1 GiB */
	uint64_t capacity;           /* 0: 95% of the stripes' free space now */
	uint64_t *capacity_made;     /* (may be NULL) gets the capacity set */
};

/* Create a new store in store_dir (created if missing, must hold no store;
 * it and its manifest are made private to the owner: 0700, 0600). */
int kvfs_mkfs(const char *store_dir, const struct kvfs_mkfs_opts *o);

/*
 * Take the store: an flock on the STORE directory itself (which no `rm` of
 * a file inside can undo) and one on STORE/kvfs.lock, which holds our pid
 * for the message others get. A daemon (or fsck) holds both for as long as
 * it uses the store; the kernel drops them however the process ends.
 * read_only_ok: settle for a read-only open of the file (a read-only
 * store). -EBUSY if someone holds either (holder gets their pid, or
 * "unknown"), else -errno.
 */
struct kvfs_store_lock {
	int dir_fd;
	int file_fd;
	bool keep_contents;     /* unlock leaves the file's text ("lost N") */
};
#define KVFS_STORE_LOCK_NONE ((struct kvfs_store_lock){ -1, -1, false })
int kvfs_lock_store(const char *dir, bool read_only_ok, struct kvfs_store_lock *lk,
		    char *holder, size_t holder_len);
/* Release it: the pid is cleared first, so the file never names a daemon
 * that exited cleanly (after a kill the next locker overwrites it). */
void kvfs_unlock_store(struct kvfs_store_lock *lk);

/* Open a store: load the manifest, reclaim uncommitted space, start threads. */
int kvfs_open(const char *store_dir, const struct kvfs_opts *o, struct kvfs **out);
/* A mountpoint (existing) that is the store directory or a stripe's (fs:
 * those of an open store; NULL: the store directory only), or lies inside
 * one, would hide the store from itself: -EINVAL with a log line. */
int kvfs_mountpoint_outside(const char *mnt, const char *store_dir,
			    struct kvfs *fs);
/* Commit everything pending, stop threads, close. */
/* Commit what is queued and close. Returns the number of queued changes
 * that could not be committed (the manifest kept failing at unmount), 0
 * normally; a non-zero count is also left in STORE/kvfs.lock as
 * "lost N", for `kvfs umount` to report. */
uint64_t kvfs_close(struct kvfs *fs);

/* `kvfs gc` on an open store (offline) or through the daemon (KVFS_IOC_GC):
 * check the request (exactly one of KVFS_GC_OLDER / KVFS_GC_TARGET, see
 * kvfs_ioctl.h), evict, fill the outputs. 0, -EINVAL, -EPROTO. */
struct kvfs_gc_arg;
int kvfs_gc(struct kvfs *fs, struct kvfs_gc_arg *a);

/* Parse "65536", "64K", "1G", "1.5T" (binary units). -EINVAL if malformed. */
int kvfs_parse_size(const char *s, uint64_t *out);

#endif
