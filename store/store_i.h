/*
 * Private internals of the extent store, shared by store.c (lifecycle,
 * allocator), reclaim.c (recovery), segment.c (stripe directories, segment
 * files, range lists), uring.c (the I/O thread), health.c (stripes out of allocation)
 * and fault.c (test fault injection). Nothing outside store/ includes this.
 *
 * Locking: kv_store.lock protects the allocator (every field of struct
 * stripe and struct segment not marked otherwise, kv_store.used/extents/rr/
 * reclaimed/direct). engine.qlock protects the submission queues and the
 * fault-injection state. Never hold both: lock is always released before
 * qlock is taken. The I/O thread never takes lock; what it needs from the
 * allocator (fd, stripe fullness) is reached through pinned segments and
 * atomics. The scheduler's read-activity fields (struct sched) are atomics
 * any thread may update without a lock.
 */
#ifndef KV_STORE_I_H
#define KV_STORE_I_H

#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "store.h"

#define MARKER_NAME "kvfs-stripe"
#define MARKER_TMP_NAME "kvfs-stripe.tmp"
#define SEG_NAME_MAX 32

/* A sorted array of disjoint byte ranges (segment.marks: unsorted until
 * kv_store_reclaim sorts and checks it). */
struct range {
	uint64_t off;
	uint64_t len;
};

struct rangevec {
	struct range *v;
	size_t n;
	size_t cap;
};

struct segment {
	uint32_t stripe;
	uint32_t num;
	int fd;
	/*
	 * One reference for the stripe table plus one per queued I/O or fsync:
	 * the fd stays open (and cannot be reused for another file) while the
	 * ring may still use it, even after kv_extent_free unlinked the file.
	 */
	atomic_uint refs;
	uint64_t bump;          /* end of the address space handed out */
	uint64_t live;          /* extents allocated (or marked) and not freed */
	uint64_t largest_free;  /* longest range in freel, cached for alloc */
	uint64_t file_size;     /* size found at open; recovery validation */
	struct rangevec freel;  /* punched ranges below bump, coalesced */
	struct rangevec marks;  /* recovery only: extents marked used, in the
	                         * order marked until reclaim sorts them */
	struct rangevec early;  /* recovery only: extents freed before reclaim,
	                         * in the order freed (reclaim.c) */
	/* prealloc.c: the file is fallocate'd up to here; bump..prealloc_end
	 * is preallocated and unused (0: nothing preallocated) */
	uint64_t prealloc_end;
	/* memread.c: in-memory stripes only. The read-only mapping (made on
	 * first read, unmapped with the segment) and the file size known to
	 * hold every extent read so far */
	_Atomic(uint8_t *) map;
	uint64_t map_len;
	_Atomic uint64_t known_size;
	atomic_int map_broken;  /* the file was cut short under the mapping */
	struct kv_guard guard;  /* map, map_len, map_broken */
	bool pa_busy;           /* the preallocator works on it, unlocked */
	bool fresh;             /* made after open, before kv_store_reclaim: the
	                         * allocator knows all of it, reclaim skips it */
	bool pa_trim;           /* ... and must give its tail back after */
};

struct stripe {
	char *path;
	int dirfd;
	dev_t dev;
	ino_t ino;
	struct segment **segs;  /* sorted by num; segs[nsegs - 1] is the tail */
	size_t nsegs;
	size_t cap;
	uint64_t next_num;      /* numbers only grow: never reuse a name */
	/* CLOCK_MONOTONIC ns before which alloc skips this stripe (ENOSPC) */
	_Atomic uint64_t full_until;
	/* health.c. missing and open_error are set at open, read-only after */
	bool missing;           /* degraded open: left out, never opened */
	int open_error;         /* why it is missing */
	_Atomic int failed;     /* 0, or the -errno that took it out of alloc */
	atomic_uint fail_run;   /* writes failed in a row */
	_Atomic uint64_t write_errors;  /* failed writes and fdatasyncs */
	bool in_memory;         /* tmpfs or ramfs: reads copy from a mapping */
	/* heads.c: segments written at once (1: lowest with room first) */
	unsigned heads;
	unsigned head_next;     /* the candidate the next allocation takes */
	uint64_t heads_retry;   /* CLOCK_MONOTONIC ns: no new head before */
	/* headroom.c: on the manifest's filesystem, so it keeps headroom */
	atomic_bool keeps_headroom;
	/* prealloc.c */
	uint64_t pa_bytes;      /* preallocated, unused, in this stripe's segments */
	bool pa_off;            /* its filesystem cannot fallocate */
	uint64_t pa_until;      /* CLOCK_MONOTONIC ns: no preallocation before */
};

struct fsync_req;

/*
 * Read-priority scheduling (sched.c). Set at engine start: the knobs.
 * Atomics: reads in flight on any ring and when the last one ended (any
 * thread); the I/O thread's writes in flight and the counters (written by
 * the I/O thread only, atomics so kv_store_sched_stats may read them).
 */
struct sched {
	bool fifo;                  /* KVFS_SCHED=fifo: writes never held */
	unsigned write_ops;         /* writes in flight while reads are active */
	uint64_t write_bytes;       /* ... and their bytes (at least one write) */
	uint64_t write_max;         /* write bytes in flight with reads idle */
	uint64_t idle_ns;           /* reads stay active this long after the last */
	atomic_uint reads_inflight;
	_Atomic uint64_t last_read_ns;
	_Atomic uint64_t reads_issued;
	atomic_uint writes_inflight;
	_Atomic uint64_t write_bytes_inflight;
	atomic_uint writes_peak, writes_peak_reading;
	_Atomic uint64_t writes_issued, throttled;
	bool held;                  /* I/O thread: the last fill held writes back */
};

struct engine {
	struct io_uring ring;
	pthread_t thread;
	bool started;
	int efd;                /* eventfd the I/O thread keeps a read posted on */
	int cq_efd;             /* valgrind only: CQ notifications, else -1 */
	uint64_t efd_val;       /* target of that read */
	unsigned qd;

	pthread_mutex_t qlock;
	struct kv_io *rq_head, *rq_tail;    /* reads: served first */
	struct kv_io *wq_head, *wq_tail;    /* writes */
	struct fsync_req *fq;               /* fsyncs */
	bool wake_armed;        /* I/O thread may block: kick the eventfd */
	bool stopping;
	/* fault injection */
	unsigned fault_mask;
	_Atomic unsigned fault_nth;  /* read unlocked by the I/O thread */
	int fault_err;
	unsigned fault_count;        /* this many in a row from the nth */

	/* I/O thread only */
	bool efd_posted;
	struct kv_io *retry_head, *retry_tail;
	unsigned inflight;

	struct sched sched;
};

struct kv_store {
	pthread_mutex_t lock;
	struct stripe *stripes;
	unsigned nstripes;
	uint64_t segment_size;
	uint64_t capacity;
	bool direct;            /* open segments with O_DIRECT */
	bool reclaimed;         /* allocator built; mark_used no longer allowed */
	uint64_t found;         /* bytes allocated to the segment files found at
	                         * open, less early frees: counted as used until
	                         * reclaim (then 0) */
	unsigned rr;            /* next stripe for alloc */
	uint64_t used;          /* footprint bytes of live extents */
	uint64_t extents;       /* live extents */
	struct {                /* freed on a missing stripe before reclaim: its
	                         * marks count them, reclaim takes them off */
		uint64_t bytes, extents;
	} missing_early;
	uint64_t enospc_logged; /* CLOCK_MONOTONIC ns of the last ENOSPC log */
	uint64_t noalloc_logged; /* ... of the last "no stripe left" log */
	_Atomic uint64_t headroom;  /* bytes kept free for the manifest (headroom.c) */
	_Atomic uint64_t headroom_lag;  /* ... allocated bytes not yet written, at most */
	struct {                /* prealloc.c; under lock */
		uint64_t ahead;     /* kv_store_opts.prealloc (0: off) */
		uint64_t bytes;     /* preallocated and unused, every stripe */
		uint64_t inflight;  /* being preallocated now (one call) */
		struct segment *busy;   /* ... in this segment */
		uint64_t calls, trims;
		unsigned rr;
		bool started, stop;
		bool kicked;        /* a tail may want more: the thread looks */
		pthread_t thread;
		pthread_cond_t cv;      /* work for the thread, or stop */
		pthread_cond_t done_cv; /* its call returned */
	} pa;
	struct engine eng;
};

/* ---- segment.c ---- */
int stripe_open(struct kv_store *s, unsigned idx, const char *path,
		const char *uuid, bool create);
int stripe_scan(struct kv_store *s, struct stripe *st);
void stripe_close(struct stripe *st);
int segment_create(struct kv_store *s, struct stripe *st,
		   struct segment **out);
struct segment *segment_find(const struct stripe *st, uint32_t num);
int segment_unlink(struct stripe *st, struct segment *seg);
void segment_unref(struct segment *seg);
/* store.c: can seg hold fp more bytes (free list or above its bump)? */
bool segment_has_room(const struct kv_store *s, const struct segment *seg,
		      uint64_t fp);
/* heads.c */
#define KV_WRITE_HEADS_MAX 16
unsigned store_write_heads(int dirfd);
/* The segment an allocation of fp bytes takes on a stripe with heads > 1:
 * one with room, or a new one (segment_create's error if none). */
int heads_pick(struct kv_store *s, struct stripe *st, uint64_t fp,
	       struct segment **out);
/* memread.c */
bool store_dir_in_memory(int dirfd);
void segment_unmap(struct segment *seg);
void segment_name(uint32_t num, char out[SEG_NAME_MAX]);

int rangevec_push(struct rangevec *rv, uint64_t off, uint64_t len);
int rangevec_insert_free(struct rangevec *rv, uint64_t off, uint64_t len);
size_t rangevec_sort_check(struct rangevec *rv);
bool rangevec_overlaps(const struct rangevec *rv, uint64_t off, uint64_t len);
uint64_t rangevec_take(struct rangevec *rv, uint64_t len, uint64_t *off);
uint64_t rangevec_span(const struct rangevec *rv, uint64_t off);
uint64_t rangevec_largest(const struct rangevec *rv);
void rangevec_release(struct rangevec *rv);

/* ---- store.c ---- */
/* Return blocks to the filesystem, best effort: 0 or -errno (logged). */
int segment_punch(struct stripe *st, struct segment *seg, uint64_t off,
		  uint64_t len);

/* ---- reclaim.c ---- */
/* Remember extent e, in seg (found at open), as freed before reclaim:
 * reclaim returns it even if it is marked. 0 or -ENOMEM (logged). */
int early_free_locked(struct kv_store *s, struct segment *seg,
		      const struct kv_extent *e);

/* ---- headroom.c ---- */
/* Would an extent of fp bytes leave the stripe's filesystem less free
 * space than the headroom? Only for stripes that keep it. *near: so close
 * to it that the extent's blocks must be taken at once (claim them). */
bool stripe_short_of_headroom(struct kv_store *s, const struct stripe *st,
			      uint64_t fp, bool *near);
/* avail (the stripe's filesystem's free bytes) less the headroom it keeps. */
uint64_t stripe_avail_less_headroom(const struct kv_store *s,
				    const struct stripe *st, uint64_t avail);
/* Preallocate a new extent's blocks where headroom is kept: 0, -ENOSPC
 * when the disk is full, another -errno with a log line. No lock held. */
int stripe_claim_blocks(struct kv_store *s, const struct kv_extent *e);

/* ---- prealloc.c (all under kv_store.lock but start/stop) ---- */
/* Start the preallocation thread (after reclaim); 0 or -errno (logged:
 * the store works without it). */
int prealloc_start(struct kv_store *s);
/* Stop it and give every preallocated tail back (close). */
void prealloc_stop(struct kv_store *s);
/* Set seg's write pointer and preallocated end, keeping the counts, and
 * wake the thread if the tail needs more. */
void prealloc_moved(struct kv_store *s, struct segment *seg, uint64_t bump,
		    uint64_t end);
/* seg is being truncated to nothing or unlinked: its tail counts no more. */
void prealloc_forget(struct kv_store *s, struct segment *seg);
/* Before an allocation of fp bytes: give tails back until used,
 * preallocated and fp fit in the capacity (may wait for the thread). */
void prealloc_make_room(struct kv_store *s, uint64_t fp);
/* Give back the stripe's tails (near its headroom); true if any went. */
bool prealloc_trim_stripe(struct kv_store *s, struct stripe *st);

/* ---- uring.c ---- */
int engine_start(struct kv_store *s, unsigned qd);
void engine_stop(struct kv_store *s);
/* 0, or -EINVAL with a log line for an io the store cannot issue. */
int store_io_check(const struct kv_store *s, const struct kv_io *io);
/* Running under valgrind, whose lock io_uring_enter would hold forever. */
bool store_under_valgrind(void);

/* ---- fault.c ---- */
/* The result an armed fault turns res into (see kv_store_fault_arm). */
int store_fault_apply(struct engine *g, unsigned opbit, int res, unsigned asked);

/* ---- sched.c ---- */
/* Knobs from KVFS_SCHED (see sched.c), logged once. */
void sched_init(struct sched *sc, unsigned qd);
/* Every ring calls these around each read SQE it has on the device. */
void sched_read_start(struct sched *sc);
void sched_read_end(struct sched *sc);
/* A read in flight, or one ended less than idle_ns before now. */
bool sched_reads_active(const struct sched *sc, uint64_t now);
/* I/O thread: would a write of bytes stay within the minimum share? */
bool sched_write_in_share(const struct sched *sc, uint64_t bytes);
/* ... within what may be in flight with reads idle (always, for fifo)? */
bool sched_write_in_depth(const struct sched *sc, uint64_t bytes);
void sched_write_start(struct sched *sc, uint64_t bytes, bool reading);
void sched_write_end(struct sched *sc, uint64_t bytes);
/* I/O thread: queued writes were held back in this fill. */
void sched_held(struct sched *sc);
/* I/O thread, writes held: how long to sleep at most; false: look now. */
bool sched_hold_timeout(const struct sched *sc, struct __kernel_timespec *ts);
/* One log line with the counters (at close). */
void sched_log(const struct sched *sc);

/* ---- direct.c ---- */
/* Read one io synchronously on the calling thread's own ring (falls back to
 * the I/O thread's queue). 0 or -errno, also left in io->res. */
int store_read_sync(struct kv_store *s, struct kv_io *io);

/* ---- health.c ---- */
/* An error that says the device or its filesystem is failing (EIO, EROFS,
 * ENXIO, ENODEV, EUCLEAN), not that it is full or the request was bad. */
bool stripe_error_is_device(int err);
/* Neither missing nor taken out after failed writes. */
bool stripe_in_rotation(const struct stripe *st);
/* Any thread: a write (or fdatasync) on this stripe succeeded / failed
 * with err. ENOSPC/EDQUOT mark it full for a while; device errors take it
 * out of allocation (EROFS at once, others after a few in a row). */
void stripe_write_ok(struct kv_store *s, uint32_t stripe);
void stripe_write_failed(struct kv_store *s, uint32_t stripe, int err);
/* Why a segment is not in the stripe's table, for a log line. */
const char *stripe_no_segment_why(const struct stripe *st);
/* Under kv_store.lock: every stripe is out; rate-limited log line. */
void stripe_log_none_usable(struct kv_store *s);

/* ---- store.c ---- */
uint64_t now_ns(void);
void stripe_mark_full(struct kv_store *s, uint32_t stripe);

#endif
