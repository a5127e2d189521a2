/*
 * kvfs extent store: the bytes of every page.
 *
 * A store is a set of stripes (one directory per SSD). Each stripe holds
 * aggregate segment files (seg-00000000, seg-00000001, ...) of a fixed
 * maximum size. A page payload lives in one extent: (stripe, segment, offset,
 * length), with offset and on-disk footprint 4 KiB aligned so the same bytes
 * can be read with O_DIRECT. Extents are placed round-robin across stripes so
 * a batch of consecutive pages fans out over all devices.
 *
 * All extent I/O goes through one io_uring owned by the store and driven by
 * an I/O thread; callers on any thread hand it batches (kv_store_io,
 * kv_store_io_async); callers that wait for their reads anyway read on
 * their own thread's ring (kv_store_read_many, kv_store_read_verified).
 * Reads go first: while any reader is active the I/O thread keeps queued
 * writes to a small guaranteed share of the device (kv_store_sched_stats).
 *
 * The store knows nothing about names, SQLite or FUSE. What is committed is
 * decided by the manifest (index/); at open the caller marks every committed
 * extent with kv_store_mark_used() and then calls kv_store_reclaim(), which
 * returns all other space (written but never committed) to the filesystem.
 * Allocation need not wait for that: until reclaim it takes only segment
 * files made since the open, whose every range the allocator knows, so a
 * mount can accept new pages while its manifest is still being read.
 *
 * Every function returns 0 or -errno unless stated otherwise, and logs a line
 * saying what failed and why through kv_log().
 */
#ifndef KV_STORE_H
#define KV_STORE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KV_ALIGN 4096u            /* extent offset/footprint alignment (O_DIRECT) */
#define KV_MAX_STRIPES 64u
#define KV_HASH_LEN 16u           /* XXH3-128 */
#define KV_SEGMENT_SIZE_DEFAULT (1ull << 30)
#define KV_SEGMENT_SIZE_MIN (1ull << 20)
/* The index packs an extent's offset and length (index/index_i.h, struct
 * xent): lengths below 1 TiB, offsets below 16 TiB. */
#define KV_SEGMENT_SIZE_MAX (1ull << 39)

/* Project-specific error codes, below the errno range (LMDB style). */
#define KV_ERR_BASE      (-30700)
#define KV_ERR_CORRUPT   (KV_ERR_BASE - 1)  /* on-disk data failed validation */
#define KV_ERR_SCHEMA    (KV_ERR_BASE - 2)  /* manifest schema newer than this build */
#define KV_ERR_NOTSTORE  (KV_ERR_BASE - 3)  /* directory is not a kvfs store/stripe */
#define KV_ERR_MISMATCH  (KV_ERR_BASE - 4)  /* stripe belongs to another store */
#define KV_ERR_CHECKSUM  (KV_ERR_BASE - 5)  /* payload checksum mismatch */

/* Message for a 0/-errno/KV_ERR_* code. Never NULL. */
const char *kv_strerror(int rc);
/* Map a KV_ERR_* code to the errno a syscall edge should report (EIO, ...). */
int kv_errno(int rc);

/* ---- logging (shared by every module) ---- */
enum kv_log_level { KV_LOG_ERR, KV_LOG_WARN, KV_LOG_INFO, KV_LOG_DEBUG };
void kv_log(enum kv_log_level lvl, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void kv_log_set_level(enum kv_log_level lvl);
/*
 * Redirect log lines (default: stderr with "kvfs: level: " prefix). The sink
 * gets the message without prefix or newline, may be called from any thread
 * (the store's I/O thread included) and must be thread-safe. NULL restores
 * the default. The initial level is INFO, or KVFS_LOG=error|warning|info|debug.
 */
void kv_log_set_sink(void (*sink)(enum kv_log_level, const char *line));

/*
 * Rate-limited lines, for whatever a caller can trigger at will (a refused
 * call, a full queue): at most KV_LOG_LIMIT_BURST lines per
 * KV_LOG_LIMIT_WINDOW_S seconds per limiter; the first line let through
 * after a quiet spell says how many were suppressed. A limiter is a static
 * or embedded struct, zero-initialised.
 */
#define KV_LOG_LIMIT_BURST 10u
#define KV_LOG_LIMIT_WINDOW_S 5
struct kv_log_limit {
	int64_t window_start_ns;
	uint32_t lines;
	uint64_t suppressed;
};
/* May a line go out now? *suppressed: lines dropped since the last one. */
bool kv_log_limit_take(struct kv_log_limit *l, uint64_t *suppressed);
#define KV_LOG_LIMITED(limit, lvl, ...)                                          \
	do {                                                                     \
		uint64_t kv_sup_;                                                \
		if (kv_log_limit_take((limit), &kv_sup_)) {                      \
			if (kv_sup_)                                             \
				kv_log((lvl), "suppressed %llu similar lines",   \
				       (unsigned long long)kv_sup_);             \
			kv_log((lvl), __VA_ARGS__);                              \
		}                                                                \
	} while (0)

/*
 * SIGBUS guards (sigbus.c), for memory mapped from a file whose size
 * someone else controls (an engine's region, a segment file cut short):
 * between kv_guard_begin and kv_guard_end, a SIGBUS inside [base, base +
 * len) replaces that whole mapping with anonymous memory and sets *broken;
 * kv_guard_end then says -EFAULT. A SIGBUS elsewhere still stops the
 * process. kv_guard_install sets the handler up (again, if another
 * replaced it), when a guarded mapping is made; guards nest
 * up to KV_GUARDS_PER_THREAD deep (a copy from one mapping into another).
 * begin: 0, -EFAULT (already broken), -EDEADLK (nested too deep).
 */
#define KV_GUARDS_PER_THREAD 2u
struct kv_guard {
	void *base;
	size_t len;
	atomic_int *broken;
};
void kv_guard_install(void);
int kv_guard_begin(const struct kv_guard *g);
int kv_guard_end(const struct kv_guard *g);

/*
 * Growing arrays (array.c): room for element n of an array of elem-byte
 * elements holding *cap. Below *cap, v itself; at it, v reallocated to
 * twice *cap (first when empty) and *cap updated. NULL where memory or
 * size_t runs out: v and *cap unchanged, still the caller's.
 */
void *kv_array_room(void *v, size_t n, size_t *cap, size_t elem, size_t first);

/* ---- extents ---- */
struct kv_extent {
	uint32_t stripe;   /* index into the stripe list */
	uint32_t segment;  /* segment number within the stripe */
	uint64_t offset;   /* byte offset in the segment, KV_ALIGN aligned */
	uint64_t length;   /* payload bytes (> 0) */
};

/* Bytes an extent occupies on disk: length rounded up to KV_ALIGN. */
static inline uint64_t kv_extent_footprint(const struct kv_extent *e)
{
	return (e->length + KV_ALIGN - 1) & ~(uint64_t)(KV_ALIGN - 1);
}

/* XXH3-128 of buf; out is big-endian canonical form (as xxhsum prints). */
void kv_hash128(const void *buf, size_t len, uint8_t out[KV_HASH_LEN]);
/* Test hook: from now on every payload's "hash" is a function of its length
 * alone, so any two payloads of one length collide. Lets tests prove that
 * nothing trusts the hash alone (dedup compares bytes). Never in production:
 * checksums then detect no corruption. */
void kv_hash_test_collide(bool on);
bool kv_hash_test_colliding(void);
/* memcpy(dst, src, len) and kv_hash128 of the bytes, in one pass over them
 * where the CPU allows (copyhash.c): what a copy out of memory-backed
 * storage costs, instead of a copy and then a hash. */
void kv_copy_hash128(void *dst, const void *src, size_t len, uint8_t out[KV_HASH_LEN]);
/* Lower-case hex of a hash into out (2*KV_HASH_LEN+1 bytes). */
void kv_hash_hex(const uint8_t h[KV_HASH_LEN], char *out);

/* ---- store lifecycle ---- */
struct kv_store;

struct kv_store_opts {
	unsigned nstripes;
	const char *const *stripes;  /* directory per stripe, in index order */
	const char *uuid;            /* store identity written to stripe markers */
	uint64_t segment_size;       /* max segment file size; multiple of KV_ALIGN */
	uint64_t capacity;           /* physical byte budget; 0 = no budget */
	unsigned queue_depth;        /* io_uring entries in flight; 0 = default (64) */
	bool create;                 /* mkfs: create dirs and stripe markers */
	bool no_direct;              /* never use O_DIRECT (tmpfs) */
	bool degraded;               /* open without stripes that cannot be
	                              * opened (see kv_store_open) */
	uint64_t prealloc;           /* keep each stripe's newest segment
	                              * fallocate'd this many bytes ahead of its
	                              * writes, within the capacity (see
	                              * kv_store_usage); 0: never */
};

/* Default for kv_store_opts.prealloc: appending O_DIRECT writes are
 * serialised by ext4, writes into allocated space are not. */
#define KV_PREALLOC_DEFAULT (64ull << 20)
/* KVFS_PREALLOC from the environment (a size like 64M; 0 or off: none),
 * else KV_PREALLOC_DEFAULT; a bad value is logged and ignored. */
uint64_t kv_store_prealloc_env(void);

/*
 * Open (or with o->create, initialise) the stripes. Each stripe directory
 * carries a marker file "kvfs-stripe" naming the store uuid and the stripe
 * index; a missing marker gives KV_ERR_NOTSTORE, a different uuid or index
 * KV_ERR_MISMATCH. With o->degraded such a stripe (or one whose directory
 * cannot be opened) is left out instead, with a warning, and the store
 * opens with the others: the missing stripe's extents are accepted by
 * kv_store_mark_used unchecked, left alone by kv_store_reclaim, read as
 * -EIO (with a log line), freed without touching anything, and nothing is
 * allocated there. The open still fails if no stripe opens. Starts the
 * I/O thread. Until kv_store_reclaim() has run (with zero or more
 * kv_store_mark_used() calls before it) the allocator uses new segment
 * files only. Falls back to buffered I/O with a warning where O_DIRECT is
 * refused (EINVAL, e.g. tmpfs).
 */
int kv_store_open(const struct kv_store_opts *o, struct kv_store **out);
/* Stop the I/O thread (after in-flight I/O completes) and close all files. */
void kv_store_close(struct kv_store *s);

/*
 * Recovery, step 1: declare one committed extent, in any order. Returns
 * KV_ERR_CORRUPT (and a log line) if it is empty or misaligned, lies outside
 * its segment size, in a stripe that does not exist, or in a segment file
 * that is missing or too short; -ENOMEM; -EINVAL once kv_store_reclaim has
 * run. Two marked extents that overlap are refused by kv_store_reclaim,
 * which sorts each segment's marks once (O(n log n) for n marks). An extent
 * in a segment made since the open (allocated before reclaim) is accepted
 * and ignored: it is live already.
 */
int kv_store_mark_used(struct kv_store *s, const struct kv_extent *e);

struct kv_reclaim_stats {
	uint64_t segments_removed;   /* segment files with no committed extent */
	uint64_t bytes_reclaimed;    /* disk space returned: allocated blocks freed
	                              * by punching gaps, truncating tails and
	                              * removing segments (st_blocks, so space
	                              * already punched is not counted again) */
};
/*
 * Recovery, step 2: every byte of every segment not covered by a marked
 * extent (less those kv_extent_free returned since the open) is returned
 * to the filesystem (punched, tail truncated, empty
 * segments unlinked), and the allocator is built from what remains. Runs
 * once (-EINVAL the second time); st may be NULL. KV_ERR_CORRUPT (and a log
 * line naming both) if two marked extents overlap: then nothing has been
 * punched, truncated or unlinked yet. Segments made since the open are
 * left as they are. On error the allocator keeps to those: close the
 * store.
 */
int kv_store_reclaim(struct kv_store *s, struct kv_reclaim_stats *st);

/*
 * Allocate an extent for a payload of length bytes (> 0) on the next stripe
 * in round-robin order (skipping stripes that are full: a write there failed
 * with ENOSPC/EDQUOT less than a second ago and nothing was freed there
 * since; and stripes out of allocation: missing, or failed, see
 * kv_store_stripe_state). -EIO when every stripe is out of allocation;
 * -ENOSPC when the capacity budget or every stripe is exhausted;
 * -EFBIG if length exceeds the segment size; -EINVAL for length 0.
 * Before kv_store_reclaim() it allocates in segment files made since the
 * open only (making one as needed), and the capacity budget counts the
 * blocks allocated to every segment file found at open as used, less what
 * kv_extent_free returned there since. Thread-safe.
 */
int kv_extent_alloc(struct kv_store *s, uint64_t length, struct kv_extent *out);
/*
 * Return an extent: its blocks are punched out of the segment file
 * (FALLOC_FL_PUNCH_HOLE) and the range becomes allocatable again; a segment
 * left with no extents is unlinked (the stripe's newest segment is truncated
 * to 0 instead). The caller guarantees that no committed manifest row refers
 * to it any more (the removing transaction is durable) and that no I/O on it
 * is in flight. -EINVAL (and a log line) for an extent that is not allocated,
 * e.g. a double free. A failed punch is only logged: the range is still
 * reused, and the next reclaim punches whatever is free then. Before
 * kv_store_reclaim(), an extent in a segment found at open is only
 * remembered (0, or -ENOMEM: it stays allocated until the next mount):
 * that reclaim returns it, marked or not, so a caller may mark every
 * extent its manifest held at open, freed since or not. Thread-safe.
 */
int kv_extent_free(struct kv_store *s, const struct kv_extent *e);

/* ---- I/O ---- */
enum kv_io_op { KV_IO_READ, KV_IO_WRITE };

struct kv_io {
	enum kv_io_op op;
	struct kv_extent ext;
	void *buf;   /* KV_ALIGN-aligned, kv_extent_footprint(&ext) bytes; a write
	              * sends the whole footprint (pad with zeros) */
	int res;     /* out: 0 or -errno (short transfers are retried inside) */
	/* private to the store */
	uint64_t done_bytes;
	struct kv_io *next;
	void *group;
};

/*
 * Submit n I/Os and call done(arg) once all have completed (each io->res
 * set). done runs on the store's I/O thread, possibly before this call
 * returns: it must not block or call back into the store. The ios array and
 * the buffers must stay valid until then. Returns 0 if queued, -errno if
 * nothing was queued: -EINVAL for n == 0 or a malformed io (bad stripe,
 * misaligned offset or buffer, extent beyond the segment size), -ENOMEM,
 * -ESHUTDOWN once kv_store_close has begun. An io whose segment file no
 * longer exists completes with res -EIO. Thread-safe.
 */
int kv_store_io_async(struct kv_store *s, struct kv_io *ios, unsigned n,
		      void (*done)(void *arg), void *arg);
/*
 * Submit n I/Os and wait. 0 if all succeeded, else the first failing res (or
 * kv_store_io_async's error). n == 0 returns 0. Never call it from a done
 * callback (the I/O thread would wait on itself).
 */
int kv_store_io(struct kv_store *s, struct kv_io *ios, unsigned n);

/*
 * Read n extents on the calling thread, without the I/O thread: a ring
 * owned by this thread keeps up to the store's queue depth of them on the
 * device, and each(arg, io) runs here as each one completes (io->res set:
 * 0 or -errno, short reads already retried), so the caller can check one
 * page while the next are still being read. For a caller that waits for a
 * whole batch anyway (the fast path) this is what a raw io_uring reader
 * does, with no hand-off per batch. Every io gets its each() call, even
 * malformed ones (-EINVAL). Returns once all have completed. Falls back to
 * the I/O thread's queue where no ring can be had. Thread-safe; while
 * these reads run the I/O thread holds queued writes to their minimum share.
 */
struct kv_fixed_buf {
	void *base;
	uint64_t len;
	uint64_t key;    /* names this mapping; never reused for another one */
};
void kv_store_read_many(struct kv_store *s, struct kv_io *ios, unsigned n,
			const struct kv_fixed_buf *fb,
			void (*each)(void *arg, struct kv_io *io), void *arg);
/*
 * fb (may be NULL): memory most ios read into. The thread's ring registers
 * it with the kernel once (pinned, like io_uring fixed buffers) and reads
 * into it without pinning pages per read: measured ~15% of the fast path's
 * throughput on 64 KiB pages. Registrations are kept per thread for a few
 * keys, least recently used first out; call kv_store_fixed_forget(key)
 * before the memory is unmapped so no ring keeps it pinned for long.
 */
void kv_store_fixed_forget(uint64_t key);

/*
 * Make the data of these extents durable: one fdatasync per distinct segment
 * file, issued in parallel through the ring. Waits. A segment already
 * removed (all its extents freed) is skipped. Returns the first fdatasync
 * error, -EINVAL for a stripe that does not exist, -ESHUTDOWN when closing.
 */
int kv_store_sync(struct kv_store *s, const struct kv_extent *e, unsigned n);

/*
 * Read one extent into a buffer from kv_buf_get (give it back with
 * kv_buf_put(*out, kv_extent_footprint(e))) and verify it against hash.
 * KV_ERR_CHECKSUM (with a log line naming the extent) if it does not
 * match: no byte of a bad payload is handed out.
 * The read runs on the calling thread's own small ring (one io_uring_enter,
 * no hand-off to the I/O thread), since the caller waits for it anyway.
 */
int kv_store_read_verified(struct kv_store *s, const struct kv_extent *e,
			   const uint8_t hash[KV_HASH_LEN], void **out);

/*
 * An extent's bytes in place, for a caller that copies them out itself:
 * only on a stripe whose file system is memory (tmpfs, ramfs), where a
 * copy that hashes as it goes (kv_copy_hash128) is one pass over the bytes
 * and a read plus a hash are two (memread.c). -EOPNOTSUPP on any other
 * stripe: read it with kv_store_read_many. *bytes stays valid, read-only,
 * until kv_store_unmap_extent(*hold); the caller keeps the extent from
 * being freed meanwhile, as for any read.
 */
int kv_store_map_extent(struct kv_store *s, const struct kv_extent *e,
			const void **bytes, void **hold);
/* kv_copy_hash128 from a mapped extent, guarded: -EIO if the segment file
 * turned out shorter than the mapping (cut short behind the store's back:
 * the copy is void, and later reads of the segment go through the ring). */
int kv_store_copy_mapped(void *hold, void *dst, const void *src, size_t len,
			 uint8_t out[KV_HASH_LEN]);
void kv_store_unmap_extent(void *hold);

/* Allocate a zeroed KV_ALIGN-aligned buffer of at least len bytes, NULL on
 * OOM. Release it with free(). For tests and cold paths: payloads use
 * kv_buf_get. */
void *kv_buf_alloc(size_t len);

/*
 * Payload buffers (buf.c). kv_buf_get: a KV_ALIGN-aligned buffer of len
 * bytes rounded up to KV_ALIGN (at least KV_ALIGN), whose bytes are
 * undefined (a reused buffer holds an earlier payload, a fresh one zeros):
 * the caller overwrites every byte it uses and zeroes any padding a write
 * sends. NULL on OOM. kv_buf_put(p, len) gives it back, with the same len
 * (or any len rounding to the same size); p may be NULL. Never free() one.
 * kv_buf_footprint(len): the RAM such a buffer occupies while it is held,
 * bookkeeping included. Freed buffers stay resident up to KV_BUF_IDLE_MAX
 * bytes for those of at most KV_BUF_SLAB_MAX bytes and as much again for
 * larger ones; the rest is returned to the kernel. Thread-safe.
 */
#define KV_BUF_SLAB_MAX (64u << 10)
#define KV_BUF_IDLE_MAX (32ull << 20)
/* Keep up to bytes (at least KV_BUF_IDLE_MAX) of each kind idle instead:
 * a writer's budget of buffers in flight, reused warm. Thread-safe. */
void kv_buf_set_idle_max(uint64_t bytes);
/* The writers have gone quiet: give back idle buffers beyond
 * KV_BUF_IDLE_MAX of each kind (a raised idle max keeps a write flood's
 * buffers warm; afterwards they are only RSS). Returns the bytes given
 * back. Thread-safe; the next flood faults them in again. */
uint64_t kv_buf_trim(void);
void *kv_buf_get(size_t len);
void kv_buf_put(void *p, size_t len);
uint64_t kv_buf_footprint(size_t len);

struct kv_buf_stats {
	uint64_t gets;          /* kv_buf_get calls */
	uint64_t reused;        /* ... served by a buffer freed before */
	uint64_t slab_bytes;    /* mapped for small buffers, ever (never unmapped) */
	uint64_t idle_small;    /* freed small buffers kept resident */
	uint64_t idle_large;    /* freed large buffers kept */
};
void kv_buf_stats(struct kv_buf_stats *st);

struct kv_store_usage {
	uint64_t capacity;        /* budget, or total bytes of the stripe filesystems */
	uint64_t used;            /* footprint bytes of live extents */
	uint64_t avail;           /* what may still be allocated (preallocated
	                           * space included: it is the store's room) */
	uint64_t prealloc;        /* bytes fallocate'd ahead of the writes and
	                           * not yet used; used + prealloc <= capacity */
	uint64_t extents;
	uint64_t segments;
	unsigned nstripes;
};
void kv_store_usage(struct kv_store *s, struct kv_store_usage *u);

/*
 * Keep at least bytes free on the filesystem holding dir (the store
 * directory: manifest, journal, log). Stripes on that filesystem then
 * refuse an allocation (ENOSPC) that would leave less, count their free
 * space less bytes in kv_store_usage, and, once within lag bytes of the
 * headroom (lag: the most bytes allocated but not yet written, e.g. a
 * write-back budget), preallocate each extent as it is handed out, so
 * free space does not lag behind. Call again to change the amounts;
 * bytes 0 turns it off. Returns how many stripes share that filesystem,
 * or -errno (dir cannot be stat'ed; logged). Thread-safe.
 */
int kv_store_set_headroom(struct kv_store *s, const char *dir, uint64_t bytes,
			  uint64_t lag);
/* The headroom in force (0: none, or no stripe shares the filesystem). */
uint64_t kv_store_headroom(struct kv_store *s);

/*
 * Stripe health. A stripe is taken out of allocation (FAILED) when its
 * writes or fdatasyncs fail with a device error: EROFS at once, EIO, ENXIO,
 * ENODEV or EUCLEAN after 3 in a row (a success in between starts the
 * count again); ENOSPC/EDQUOT only make it "full" for a second. One log
 * line says so. Its extents are still read and freed. MISSING: left out at
 * a degraded open. Both last until the store is closed. -EINVAL for i out
 * of range. Thread-safe.
 */
enum kv_stripe_health { KV_STRIPE_OK, KV_STRIPE_FAILED, KV_STRIPE_MISSING };
struct kv_stripe_state {
	enum kv_stripe_health health;
	int error;               /* FAILED: the -errno that took it out;
	                          * MISSING: why it could not be opened */
	uint64_t write_errors;   /* failed writes and fdatasyncs since open */
};
int kv_store_stripe_state(struct kv_store *s, unsigned i,
			  struct kv_stripe_state *out);

/* Segment files are STRIPE/seg-%08u. Is name one (the canonical spelling
 * only), and which? */
bool kv_segment_parse(const char *name, uint32_t *num);
/* STRIPE_DIR/seg-NNNNNNNN into out; snprintf's result. */
int kv_segment_path(const char *stripe_dir, uint32_t num, char *out, size_t len);

/* Path of stripe i's directory (valid while the store is open). */
const char *kv_store_stripe_path(struct kv_store *s, unsigned i);
uint64_t kv_store_segment_size(struct kv_store *s);

/*
 * Read-priority scheduling. Reads on every ring (the I/O thread's, each
 * thread's kv_store_read_many and kv_store_read_verified rings) count as
 * active while in flight and for idle_us after the last one ends; while
 * they are, the I/O thread keeps at most write_ops_share writes and
 * write_bytes_share bytes of writes in flight (always at least one write,
 * so writes never starve), and these go before reads queued on the I/O
 * thread. With reads idle, writes use the whole queue depth, up to
 * write_bytes_max bytes in flight. fsyncs are never held back. KVFS_SCHED,
 * read at open, tunes it for benchmarks: "fifo" turns it off (writes at
 * the whole depth, reads first only among requests queued on the I/O
 * thread); "write-ops=N,write-kb=N,write-max-kb=N,idle-us=N".
 */
struct kv_sched_stats {
	bool fifo;                     /* KVFS_SCHED=fifo: writes never held */
	unsigned write_ops_share;      /* writes in flight while reads are active */
	uint64_t write_bytes_share;    /* ... and their bytes */
	uint64_t write_bytes_max;      /* write bytes in flight, reads idle */
	uint64_t idle_us;
	unsigned reads_inflight;       /* now, on every ring */
	unsigned writes_inflight;      /* now, on the I/O thread */
	uint64_t write_bytes_inflight;
	unsigned writes_peak;          /* most writes ever in flight at once */
	unsigned writes_peak_reading;  /* most in flight, counting writes issued
	                                * while reads were active */
	uint64_t reads_issued;         /* read submissions, every ring, since open */
	uint64_t writes_issued;        /* write submissions since open */
	uint64_t write_throttled_events; /* times queued writes were held back */
};
/* A snapshot of the scheduler's state and counters. Thread-safe. */
void kv_store_sched_stats(struct kv_store *s, struct kv_sched_stats *st);

/*
 * Fault injection (tests): make the nth I/O completion from now (1 = next)
 * whose op is in op_mask (1<<KV_IO_READ | 1<<KV_IO_WRITE | KV_FAULT_FSYNC)
 * complete with err (-EIO, -ENOSPC...) instead of its real result; err == 0
 * instead makes it a short transfer of half the remaining bytes, which the
 * store must retry transparently. nth = 0 disarms. Thread-safe.
 */
#define KV_FAULT_FSYNC (1u << 2)
void kv_store_fault_arm(struct kv_store *s, unsigned op_mask, unsigned nth,
			int err);
/* The same, failing count matching operations in a row from the nth
 * (count 0 means 1): a persistent fault rather than a transient one. */
void kv_store_fault_arm_count(struct kv_store *s, unsigned op_mask, unsigned nth,
			      int err, unsigned count);

#endif
