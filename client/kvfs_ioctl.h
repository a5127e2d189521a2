/*
 * kvfs fast-path ABI: the ioctls an engine issues on a kvfs mount, and the
 * descriptors it places in shared memory. Stable, versioned, and the only
 * header an engine needs to talk to the daemon without libkvfs.
 *
 * Every ioctl is issued on a file descriptor of a MODEL DIRECTORY of a
 * mounted kvfs (open(MOUNT/model, O_RDONLY | O_DIRECTORY)); on any other
 * kind of file it fails with ENOTTY. Layers in descriptors are numbers of
 * that model's layer directories; handles are that model's pages.
 *
 * Flow:
 *   1. Create shared memory (memfd_create, or a file under /dev/shm) that the
 *      caller owns, opened read-write, and register it:
 *      KVFS_IOC_REGION_REGISTER maps it in the daemon and returns a region id.
 *      Only the registering process (same uid and same thread group) can use
 *      the id; it is unregistered by KVFS_IOC_REGION_UNREGISTER or when that
 *      process exits.
 *   2. Place an array of struct kvfs_page_desc (and the page names they
 *      point at) in the region.
 *   3. KVFS_IOC_LOOKUP fills each descriptor's handle, size and status
 *      without reading data and reports the prefix hit length.
 *      KVFS_IOC_READ reads each page into its destination range of the
 *      region (io_uring, O_DIRECT where the destination allows it) and
 *      verifies its checksum; each descriptor gets its own status.
 *      KVFS_IOC_WRITE stores each descriptor's source range of the region
 *      as a new page (layer + name), copied into the daemon, checksummed,
 *      written by io_uring O_DIRECT and published through the manifest;
 *      KVFS_WRITE_DURABLE makes it return only once every page is durable.
 *
 *      KVFS_IOC_PREFETCH names pages (handle, or layer + name; dst_off and
 *      dst_len 0) the engine will read soon, e.g. the next layers while it
 *      computes this one: it returns at once, and the daemon loads them
 *      into its RAM tier (-o ram_cache) in the background, so the READ
 *      that follows is served from memory (out_flags KVFS_DESC_CACHED).
 *      Status 0 means queued or already in RAM (then KVFS_DESC_CACHED or
 *      KVFS_DESC_RAM is set); done counts them. Pages that do not fit in
 *      the tier's budget are not loaded (counted, never an error): a
 *      prefetch is a hint.
 * Compatibility: KVFS_IOC_WRITE and KVFS_IOC_PREFETCH are new command
 * numbers within ABI version 1. A daemon that predates one answers ENOTTY
 * (as for any unknown command) and has done nothing. KVFS_REGION_AT_OFFSET
 * and KVFS_BATCH_DATA_REGION are new flags whose fields were reserved: a
 * daemon that predates them refuses the call with EINVAL (unknown flag,
 * nonzero reserved field) and has done nothing.
 *
 * Every call but the region calls runs on the daemon's own threads, never
 * on the FUSE threads that serve stat(2), readdir and read(2): engines
 * cannot stall the mount. Per uid, at most 256 calls wait at once (more:
 * EAGAIN, try again) and the running calls hold at most 512 MiB of daemon
 * memory (64 KiB plus about 80 bytes per descriptor for a lookup or
 * prefetch, 200 for a read, 416 for a write; a larger call runs alone).
 *
 * Whole-call errors (ioctl returns -1 and sets errno):
 *   ENOTTY   not a model directory of kvfs, or unknown command
 *   EPROTO   abi != KVFS_ABI_VERSION
 *   EINVAL   unknown flags, nonzero reserved fields, count 0, descriptor
 *            array misaligned (desc_off % 8), group != 0 on a read, a
 *            write or a prefetch, or on a lookup a group > 1 that does not
 *            divide count
 *   E2BIG    count > KVFS_BATCH_MAX
 *   ERANGE   the descriptor array does not lie inside the region
 *   ENOENT   no region with this id
 *   EPERM    the region belongs to another process or uid
 *   EFAULT   the descriptor array's memory is not populated (punched or
 *            never touched: touch it and call again), or the region's
 *            memory became inaccessible under a copy (the file was
 *            shrunk): the region then stays unusable, unregister it. (A
 *            WRITE may have stored some pages before that: look them up.)
 *   EAGAIN   the caller's uid has 256 calls waiting already: call again
 *   ENOTCONN the daemon is shutting down
 *   EINVAL   (also) KVFS_BATCH_DATA_REGION naming region_id itself
 * Per-descriptor status (kvfs_page_desc.status, 0 or -errno):
 *   -ENOENT        no such layer or page (or a handle that no longer exists)
 *   -EBUSY         the page is still being written
 *   -EACCES        open(2) of the page for reading would be refused
 *   -ENAMETOOLONG  name_len > KVFS_NAME_MAX;  -EINVAL: empty name, '/',
 *                  "." or "..", a name and handle both missing, reserved != 0
 *   -ERANGE        name or destination not inside the region
 *   -EINVAL        destination overlaps another descriptor's destination,
 *                  the descriptor array, or a name (reads only)
 *   -ENOBUFS       dst_len smaller than the page (bytes = the page size)
 *   -EIO           the device failed, or the stored checksum did not match
 *                  (the destination range is then zeroed: no wrong bytes)
 *   -EFAULT        the destination (or name) memory is not populated
 *                  (punched, or never touched), or was not accessible
 * Per-descriptor status of a WRITE (KVFS_IOC_WRITE):
 *   -EEXIST        a page of that name exists (and no KVFS_WRITE_REPLACE)
 *   -EBUSY         (replace) that page is still being written through FUSE
 *   -ENOENT        no such layer directory
 *   -EACCES        open(O_CREAT) in that layer would be refused (search on
 *                  the root, model and layer, write on the layer)
 *   -EPERM         replacing another user's page in a sticky layer directory
 *   -EINVAL        handle != 0, reserved != 0, an empty, '/', NUL, "." or
 *                  ".." name, an empty source, a size other than the model
 *                  geometry's page size, a source overlapping the
 *                  descriptor array, two descriptors naming the same page
 *                  (both fail)
 *   -EFBIG         larger than max_page in a model without geometry
 *   -ENAMETOOLONG  name_len > KVFS_NAME_MAX
 *   -ERANGE        name or source not inside the region
 *   -ENOSPC        the store is full
 *   -ENOMEM        the daemon could not hold the page's copy
 *   -EFAULT        the source memory was not accessible
 *   -EIO           (durable batches) a page of the batch could not be made
 *                  durable; every page of the batch reported 0 so far gets it
 */
#ifndef KVFS_IOCTL_H
#define KVFS_IOCTL_H

#include <stdint.h>
#include <sys/ioctl.h>

#define KVFS_ABI_VERSION 1u
#define KVFS_NAME_MAX 255u           /* longest page name, bytes */
#define KVFS_BATCH_MAX (1u << 20)    /* most descriptors per call */
#define KVFS_REGIONS_PER_PROCESS 64u

/* KVFS_IOC_REGION_REGISTER / _UNREGISTER argument. */
struct kvfs_region_arg {
	uint32_t abi;         /* KVFS_ABI_VERSION */
	uint32_t flags;       /* register: 0 or KVFS_REGION_AT_OFFSET */
	int32_t fd;           /* register: the caller's fd of the memory */
	uint32_t reserved0;   /* 0 */
	uint64_t length;      /* register: bytes to map, from offset (which is
	                       * 0 unless KVFS_REGION_AT_OFFSET); 0 = to the
	                       * end of the file; out: the mapped length */
	uint64_t region_id;   /* register: out; unregister: in */
	union {
		uint64_t reserved[2]; /* 0 */
		struct {
			uint64_t offset;  /* KVFS_REGION_AT_OFFSET: where the region
			                   * starts in the file, a multiple of the
			                   * page size (4096); region offsets count
			                   * from there */
			uint64_t reserved1; /* 0 */
		};
	};
};

/* kvfs_region_arg.flags (register) */
#define KVFS_REGION_AT_OFFSET (1u << 0)  /* map [offset, offset + length) of
                                          * the file, not [0, length): an
                                          * engine's host pool is one file
                                          * that several ranks map parts of */

/*
 * One page of a batch, in the region. Inputs are never modified by the
 * daemon; outputs are written back when the call returns.
 *
 * dst_off/dst_len are the destination of a READ but the SOURCE of a WRITE:
 * the page's bytes are region bytes [dst_off, dst_off + dst_len), and
 * dst_len is the page's size. (The names stay as they are: renaming a
 * field would break sources written against version 1.)
 */
struct kvfs_page_desc {
	uint64_t handle;      /* in (read): page handle from LOOKUP, or 0 to use
	                       * layer + name; in (write): 0;
	                       * out (lookup, write): the handle, 0 if absent/failed */
	uint64_t name_off;    /* in: region offset of the name (no NUL needed) */
	uint32_t name_len;    /* in: bytes */
	uint32_t layer;       /* in: layer number in this model */
	uint64_t dst_off;     /* in (read): region offset of the destination;
	                       * in (write): region offset of the page's bytes */
	uint64_t dst_len;     /* in (read): destination bytes (>= page size;
	                       * bytes beyond the page, up to the next 4 KiB
	                       * boundary, may be overwritten with zeros);
	                       * in (write): the page's size in bytes */
	int32_t status;       /* out: 0 or -errno */
	uint32_t out_flags;   /* out: KVFS_DESC_* */
	uint64_t bytes;       /* out: page size in bytes */
	uint64_t reserved;    /* in: 0 */
};

/* out_flags */
#define KVFS_DESC_RAM     (1u << 0)   /* served from RAM (not yet on disk) */
#define KVFS_DESC_BOUNCED (1u << 1)   /* destination not O_DIRECT-usable: copied */
#define KVFS_DESC_CACHED  (1u << 2)   /* served from the daemon's RAM tier */

/* KVFS_IOC_WRITE flags (kvfs_batch_arg.flags; LOOKUP and PREFETCH take 0,
 * READ takes only KVFS_BATCH_DATA_REGION) */
#define KVFS_WRITE_DURABLE (1u << 0)  /* return once every page is durable
                                       * (data synced, manifest row committed);
                                       * without it: once every page is visible */
#define KVFS_WRITE_REPLACE (1u << 1)  /* replace a page of the same name
                                       * (atomically, as rename(2)); without
                                       * it such a descriptor fails -EEXIST */

/* KVFS_IOC_READ and KVFS_IOC_WRITE flags (kvfs_batch_arg.flags) */
#define KVFS_BATCH_DATA_REGION (1u << 8) /* destinations (read) or sources
                                          * (write) lie in the region
                                          * data_region_id, not in region_id,
                                          * which holds the descriptors and
                                          * names: an engine's host pool has
                                          * no room of its own for them.
                                          * Both regions must be the
                                          * caller's. */

/* KVFS_IOC_READ / KVFS_IOC_LOOKUP / KVFS_IOC_WRITE argument. */
struct kvfs_batch_arg {
	uint32_t abi;         /* KVFS_ABI_VERSION */
	uint32_t flags;       /* lookup, prefetch: 0; read: KVFS_BATCH_DATA_REGION
	                       * or 0; write: KVFS_WRITE_*, KVFS_BATCH_DATA_REGION */
	uint64_t region_id;
	uint64_t desc_off;    /* region offset of the descriptor array, 8-aligned */
	uint32_t count;       /* descriptors, 1..KVFS_BATCH_MAX */
	uint32_t group;       /* lookup: descriptors per block (e.g. one per
	                       * layer); 0 or 1 = every descriptor is a block.
	                       * read, write: 0 */
	uint32_t done;        /* out: read, write: descriptors with status 0;
	                       * lookup: leading blocks whose descriptors all
	                       * exist (the prefix hit length, in blocks) */
	uint32_t failed;      /* out: descriptors with status != 0 */
	uint64_t bytes;       /* out: payload bytes delivered (read), found
	                       * (lookup) or stored (write) */
	union {
		uint64_t reserved[2]; /* 0 */
		struct {
			uint64_t data_region_id; /* KVFS_BATCH_DATA_REGION: the
			                          * region dst_off/dst_len name */
			uint64_t reserved1;      /* 0 */
		};
	};
};

#define KVFS_IOC_MAGIC 0xCF
#define KVFS_IOC_REGION_REGISTER   _IOWR(KVFS_IOC_MAGIC, 1, struct kvfs_region_arg)
#define KVFS_IOC_REGION_UNREGISTER _IOW(KVFS_IOC_MAGIC, 2, struct kvfs_region_arg)
#define KVFS_IOC_READ              _IOWR(KVFS_IOC_MAGIC, 3, struct kvfs_batch_arg)
#define KVFS_IOC_LOOKUP            _IOWR(KVFS_IOC_MAGIC, 4, struct kvfs_batch_arg)
#define KVFS_IOC_WRITE             _IOWR(KVFS_IOC_MAGIC, 5, struct kvfs_batch_arg)
#define KVFS_IOC_PREFETCH          _IOWR(KVFS_IOC_MAGIC, 6, struct kvfs_batch_arg)
#define KVFS_IOC_GC                _IOWR(KVFS_IOC_MAGIC, 7, struct kvfs_gc_arg)

/*
 * KVFS_IOC_GC, issued on the MOUNT ROOT (open(MOUNT, O_RDONLY |
 * O_DIRECTORY)) by root only (EPERM otherwise): evict pages nobody holds
 * open, least recently used first, pinned pages last, as cache
 * mode does when the store is full. Returns once their space is free.
 * `kvfs gc MOUNT` issues it. Whole-call errors: EPROTO (abi), EINVAL
 * (flags, reserved, neither or both of KVFS_GC_OLDER / KVFS_GC_TARGET),
 * EPERM, ENOTTY (not the root of a kvfs mount).
 */
#define KVFS_GC_OLDER  (1u << 0)   /* every page last read before older_than_ns */
#define KVFS_GC_TARGET (1u << 1)   /* until physical usage <= target_bytes */
struct kvfs_gc_arg {
	uint32_t abi;           /* KVFS_ABI_VERSION */
	uint32_t flags;         /* one of KVFS_GC_* */
	int64_t older_than_ns;  /* in: CLOCK_REALTIME nanoseconds */
	uint64_t target_bytes;  /* in */
	uint64_t pages;         /* out: pages evicted */
	uint64_t used_before;   /* out: physical bytes before */
	uint64_t used_after;    /* out: ... and after */
	uint64_t reserved[2];   /* 0 */
};

/* The layout is part of the ABI: any change is a new KVFS_ABI_VERSION. */
#ifdef __cplusplus
static_assert(sizeof(struct kvfs_region_arg) == 48, "kvfs_region_arg size");
static_assert(sizeof(struct kvfs_page_desc) == 64, "kvfs_page_desc size");
static_assert(sizeof(struct kvfs_batch_arg) == 64, "kvfs_batch_arg size");
static_assert(sizeof(struct kvfs_gc_arg) == 64, "kvfs_gc_arg size");
#else
_Static_assert(sizeof(struct kvfs_region_arg) == 48, "kvfs_region_arg size");
_Static_assert(sizeof(struct kvfs_page_desc) == 64, "kvfs_page_desc size");
_Static_assert(sizeof(struct kvfs_batch_arg) == 64, "kvfs_batch_arg size");
_Static_assert(sizeof(struct kvfs_gc_arg) == 64, "kvfs_gc_arg size");
#endif

#endif
