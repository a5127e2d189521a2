/*
 * The engine's internal header, shared by its files and by the two front
 * ends built on it (fast/, fuse/): struct kvfs ties the store (bytes), the
 * manifest (durable page table) and the in-memory index (what is served)
 * together into one filesystem. Nothing here knows FUSE; what the engine
 * must tell a front end goes through struct kvfs_hooks. docs/modules.md
 * maps the modules and which way each calls.
 *
 * LOCK ORDER (the one place it is written; every mutex of engine/, fast/
 * and fuse/), outermost first:
 *   kvfs.ns_lock   every namespace change (create, seal, rename, unlink,
 *                  mkdir, rmdir, setxattr), the live-page table, dedup's
 *                  table of extents being written, and the order in which
 *                  manifest operations are queued. Held only
 *                  for in-memory work: never across I/O or a reply to a
 *                  request.
 *   commit.lock    the committer's queue and the synced batch the syncer
 *                  hands it (taken inside ns_lock when queuing).
 *   index loader   (index/load.c) one reader of the background load's
 *                  manifest connection: the walk, or a layer a lookup
 *                  wants first, or a layer going back to the manifest
 *                  (index/unload.c); taken inside kv_index_lookup/readdir
 *                  and kv_index_layer_load before the rwlock, which it
 *                  takes per chunk of rows. The layer of a new page, of a
 *                  page removed or moved, and a layer removed, are loaded
 *                  before ns_lock is taken (it is I/O); kv_index_add,
 *                  _remove, _move and _update load it themselves only if
 *                  it went back to the manifest in between, which takes
 *                  it being unused for seconds (then under ns_lock). The
 *                  unloader (engine/unload.c) takes ns_lock, then
 *                  commit.lock (kvfs_commit_mark), then the rwlock to mark
 *                  a layer gone, and the index loader without ns_lock to
 *                  take its pages out.
 *   index rwlock   inside kv_index_*; lookups take only this.
 *   index touched  (index/listing.c) the list of pages reads set an access
 *                  time on; taken inside the rwlock (a read lock) or alone.
 *   fh.lock        (fuse/ops_file.c) a reader's lazily loaded payload.
 *   cap.lock       (engine/capacity.c) the evictor's state and LRU victims.
 *   evf.lock       (fuse/events_file.c) parked reads and poll handles of
 *                  MOUNT/.kvfs/events; the engine's events lock inside it.
 *
 * Leaves: nothing else is taken while one is held, so they may be taken
 * inside anything above.
 *   dirty.lock     (engine/dirty.c) the write-back budget
 *   pins.lock      (engine/pin.c) running batches and deferred frees
 *   ram tier lock  (engine/ramtier.c), prefetch queue lock (engine/prefetch.c)
 *   events lock    (engine/events.c) the KV event ring and readers' cursors
 *   executor lock  (fast/executor.c) its per-uid queues; jobs run outside it
 *   read pipeline  (fast/fastread.c) a READ's producer/verifier handoff
 *   regions lock   (fast/region.c) the region table; logging happens after it
 *   notifier lock  (fuse/notifier.c) its FIFO of names; they are sent outside it
 *   load.lock      (engine/loading.c) whether the background load is done;
 *                  taken alone
 *   log limiter    (store/log.c) KV_LOG_LIMITED's windows
 *   store and index locks below (store/, index/): taken only inside their
 *                  own calls
 *
 * Waits that cross threads, and why none closes a cycle: a FUSE worker
 * never waits for an executor job or the notifier (it queues and returns);
 * the notifier waits in the kernel for a directory lock, whose holder waits
 * only for a FUSE worker; an executor job may wait for the notifier (a
 * REPLACE write, at most 5 s, through the names_sent hook), for the
 * committer and for the write-back budget, none of which waits for an
 * executor job while it holds the notifier up. The committer's two
 * threads (engine/commit.c, rule 7) wait for each other on commit.lock's
 * condition variables only, never holding another lock: the syncer waits
 * for queued work, for the payload writes and syncs of the store's I/O
 * thread, and for the committer to take the batch it synced; the
 * committer waits for that batch. The committer waits for
 * pins (extent frees), which batches drop when their reads end, whatever
 * else happens. The committer also calls the events_ready hook, which
 * answers reads parked on MOUNT/.kvfs/events and sends their poll
 * notifications: neither waits in the kernel (unlike the notifier's
 * invalidations), so it never waits for a FUSE worker. No change waits
 * for the background load, and the loader's thread waits for nothing but
 * the manifest and the index's locks, so FUSE workers stay free.
 */
#ifndef KVFS_I_H
#define KVFS_I_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "index.h"
#include "manifest.h"
#include "store.h"
#include "engine.h"
#include "loading.h"
#include "capacity.h"
#include "ramtier.h"
#include "uidtab.h"

/*
 * A page payload in RAM, shared by reference between the writer, the
 * committer and readers until the page is durable. bytes comes from
 * kv_buf_get(cap) and goes back with kv_buf_put(bytes, cap). Bytes past
 * size are undefined (buffers are reused, not zeroed): whoever grows size
 * over bytes it does not write zeroes them (holes read as zeros), and a
 * write of the footprint zeroes its padding first (kvfs_page_seal).
 */
struct kvfs_data {
	atomic_int refs;
	uint64_t size;    /* payload bytes */
	uint64_t cap;     /* allocated bytes, KV_ALIGN multiple */
	uint8_t *bytes;   /* KV_ALIGN aligned */
	/* XXH3-128 of the size bytes, when whoever filled them computed it
	 * in the same pass (a fast-path write's copy out of the region):
	 * sealing then need not read them again. Set only once the bytes are
	 * final. */
	bool hashed;
	uint8_t hash[KV_HASH_LEN];
};

/* size 0, cap bytes (rounded up to KV_ALIGN) of undefined content */
struct kvfs_data *kvfs_data_new(uint64_t cap);
struct kvfs_data *kvfs_data_get(struct kvfs_data *d);
void kvfs_data_put(struct kvfs_data *d);
/* Grow to hold at least need bytes (keeps the first size bytes). */
int kvfs_data_reserve(struct kvfs_data *d, uint64_t need);
/* RAM a payload holds while it is kept: buffer and bookkeeping. */
uint64_t kvfs_data_footprint(const struct kvfs_data *d);

/*
 * Runtime state of a page the kernel has open, or whose payload is in RAM
 * waiting for the committer. Lives in kvfs.live (under ns_lock) and is freed
 * when nothing needs it any more (kvfs_live_maybe_drop).
 */
struct kvfs_live {
	uint64_t ino;
	unsigned opens;             /* open file handles */
	bool writing;               /* a writer handle exists and has not sealed */
	int64_t flushed_ns;         /* writer closed a descriptor since its last write, then; 0: not */
	bool unlinked;              /* gone from the namespace; info is the last copy */
	bool free_on_close;         /* extent to be freed at the last close */
	int write_err;              /* a write was refused: never seal this page */
	uint64_t reserved;          /* space held for wbuf against the capacity */
	uint64_t dirty;             /* bytes charged to the dirty budget */
	bool dirty_sealed;          /* ... and they are draining (sealed) */
	bool dirty_uid;             /* ... and, until given back, count towards
	                             * the share of writer_uid (kvfs_dirty_take_uid) */
	uint32_t writer_uid;        /* who created it (a page file) */
	bool dirty_fast;            /* dirty counts, until given back, towards
	                             * writer_uid's fast-path share (kvfs_dirty_fast_take) */
	bool share_writer;          /* counted as writing in its open_share */
	struct kvfs_data *wbuf;     /* being written (WRITING) */
	struct kvfs_data *ram;      /* sealed payload not yet durable */
	struct kv_node_info info;   /* valid when unlinked */
	struct kvfs_live *hnext;
};

/*
 * What the engine tells the front end that serves it (the FUSE daemon
 * fills these; offline tools leave them NULL and nothing is told). Called
 * from engine threads (the evictor, the committer, under ns_lock when it
 * withdraws a page) and from fast-path calls; none may block on a request
 * nor take an engine lock.
 */
struct kvfs_hooks {
	void *ctx;
	/* A name a client may have cached is gone (evicted, replaced by a
	 * fast-path write, or withdrawn after its write failed): queue
	 * telling it. Never blocks. A ticket for
	 * names_sent, 0 if nothing was queued. */
	uint64_t (*name_gone)(void *ctx, uint64_t parent, const char *name);
	/* Wait until every name up to ticket was told, at most timeout_ms: 0
	 * or -ETIMEDOUT. Only from threads no request waits for. */
	int (*names_sent)(void *ctx, uint64_t ticket, unsigned timeout_ms);
	/* KV event records were published, or the stream closed. */
	void (*events_ready)(void *ctx);
};
/* Install h (kept by reference: it must outlive the engine), or NULL. */
void kvfs_set_hooks(struct kvfs *fs, const struct kvfs_hooks *h);
uint64_t kvfs_hook_name_gone(struct kvfs *fs, uint64_t parent, const char *name);
int kvfs_hook_names_sent(struct kvfs *fs, uint64_t ticket, unsigned timeout_ms);

struct kvfs_commit;
struct kvfs_ram;
struct kvfs_prefetch;
struct kvfs_cap;
struct kvfs_regions;
struct kvfs_events;

/* Extent pins of fast-path batches (engine/pin.c). */
struct kvfs_pin {
	uint64_t seq;
	struct kvfs_pin *prev, *next;
};
struct kvfs_deferred;
struct kvfs_pins {
	pthread_mutex_t lock;
	uint64_t seq;                    /* last batch begun */
	struct kvfs_pin *head, *tail;    /* running batches, oldest first */
	struct kvfs_deferred *dhead, *dtail;  /* frees waiting for them */
};

/* Latency histogram: bucket i counts calls that took < 2^i microseconds
 * (the last bucket: everything slower). Lock-free, engine/hist.c. */
#define KVFS_HIST_BUCKETS 24
struct kvfs_hist {
	atomic_uint_fast64_t bucket[KVFS_HIST_BUCKETS];
	atomic_uint_fast64_t count;
	atomic_uint_fast64_t sum_ns;
};
void kvfs_hist_record(struct kvfs_hist *h, uint64_t ns);
/* Upper bound of bucket i in seconds (+Inf for the last: returns 0). */
double kvfs_hist_bound(unsigned i);

struct kvfs_stats {
	atomic_uint_fast64_t pages_sealed;
	atomic_uint_fast64_t pages_lost;        /* write/sync failed after close */
	atomic_uint_fast64_t commits;
	atomic_uint_fast64_t bytes_written;
	atomic_uint_fast64_t bytes_read_disk;
	atomic_uint_fast64_t bytes_read_ram;
	atomic_uint_fast64_t checksum_failures;
	atomic_uint_fast64_t fast_batches;      /* fast-path READ calls */
	atomic_uint_fast64_t fast_pages;        /* pages delivered by them */
	atomic_uint_fast64_t bytes_read_fast;
	atomic_uint_fast64_t fast_bounced;      /* pages copied through a bounce buffer */
	atomic_uint_fast64_t fast_write_batches; /* fast-path WRITE calls */
	atomic_uint_fast64_t fast_pages_written;
	atomic_uint_fast64_t pages_deduped;     /* sealed pages that share an extent */
	atomic_uint_fast64_t bytes_deduped;     /* payload bytes not written again */
	atomic_uint_fast64_t dedup_mismatches;  /* same hash and length, other bytes */
	atomic_uint_fast64_t bytes_accepted_fuse; /* payload sealed from FUSE writes */
	atomic_uint_fast64_t bytes_accepted_fast; /* payload published by fast-path writes */
	atomic_uint_fast64_t ssd_bytes_written;   /* extent footprints written (padding too) */
	atomic_uint_fast64_t pages_read_disk;     /* pages served to readers from the device */
	atomic_uint_fast64_t fast_refused;        /* fast-path calls refused as a whole */
	atomic_uint_fast64_t space_refused;       /* writes refused for space (ENOSPC) */
	struct kvfs_hist lat_read;      /* fast-path READ calls */
	struct kvfs_hist lat_write;     /* fast-path WRITE calls */
	struct kvfs_hist lat_lookup;    /* fast-path LOOKUP calls */
	struct kvfs_hist lat_prefetch;  /* fast-path PREFETCH calls (queueing only) */
};

/* Write-back memory: payloads in RAM that are not durable yet (engine/dirty.c). */
struct kvfs_dirty {
	pthread_mutex_t lock;
	pthread_cond_t cv;
	uint64_t budget;
	uint64_t filling;    /* charged by pages still being written */
	uint64_t draining;   /* charged by sealed pages the committer will retire */
	uint64_t waiting_held; /* filling bytes held by writers waiting in take */
	uint64_t over;       /* uids' bytes past their share: not in others' way */
	uint64_t peak;       /* largest filling + draining seen */
	uint64_t waits;      /* times a writer blocked on the budget */
	uint64_t overruns;   /* charges let through with nothing draining */
	uint64_t refused;    /* charges refused: nothing became durable for long */
	int64_t drained_ns;  /* when sealed bytes were last given back */
	int64_t moved_ns;    /* ... any bytes, or a charge let through a stall */
	int64_t refused_log_ns;
	struct kvfs_uidtab uids;  /* kvfs_dirty_uid (dirty.c) of uids with pages */
	uint64_t uid_refused;    /* charges refused: past the uid's share (EDQUOT) */
	struct kv_log_limit uid_log;
};

/* Room for the manifest on its filesystem (engine/headroom.c): the
 * committer's, and the opening thread's before the committer starts. */
struct kvfs_room {
	uint64_t headroom;            /* bytes kept free there */
	int64_t measured_ns;          /* when the manifest's size was last looked at */
	bool shared;                  /* a stripe is on that filesystem */
	bool reserve_held;            /* STORE/kvfs.reserve holds its blocks */
	bool no_reserve;              /* the filesystem cannot preallocate one */
};

struct kvfs {
	char *store_dir;
	struct kvfs_store_lock lock;  /* STORE and STORE/kvfs.lock, flock'ed while open */
	_Atomic int manifest_err;     /* the manifest is damaged: changes are refused */
	_Atomic uint64_t lost_changes;  /* queued changes never committed (unmount gave up) */
	_Atomic int64_t refused_log_ns; /* last "changes refused" log line */
	struct kvfs_opts opts;
	struct kv_store_meta meta;
	struct kv_store *store;
	struct kv_manifest *man;
	char fault_spec[128];       /* last armed user.kvfs.fault (ns_lock) */
	struct kv_index *idx;
	struct kvfs_commit *commit;

	pthread_mutex_t ns_lock;
	pthread_cond_t seal_cv;       /* a page changed state (ns_lock) */
	struct {                      /* readers waiting for a seal (pagefile.c) */
		bool used;
		uint32_t uid;
	} seal_waiters[8];            /* SEAL_WAITERS_MAX, under ns_lock */
	struct kvfs_live **live;      /* hash by ino (ns_lock) */
	size_t live_buckets, nlive;
	uint64_t reserved_bytes;      /* space held by pages being written (ns_lock) */
	struct kvfs_uidtab uid_opens;  /* what each uid's open files take (ns_lock,
	                                * engine/openshare.c) */
	struct kvfs_uidtab uid_dirs;   /* directories each uid owns (engine/dirshare.c) */

	uint32_t mount_gen;           /* this mount's count (fast-path handles) */
	struct kvfs_pins pins;
	struct kvfs_regions *regions;  /* fast-path shared memory */
	struct kvfs_dirty dirty;
	struct kvfs_ram *ram;          /* RAM tier (engine/ramtier.c) */
	struct kvfs_prefetch *prefetch; /* its loader thread (engine/prefetch.c) */
	struct kvfs_cap *cap;          /* capacity and eviction (engine/capacity.c) */
	struct kvfs_exec *exec;        /* runs fast-path calls (fast/executor.c); NULL offline */
	struct kvfs_room room;         /* the manifest's headroom (engine/headroom.c) */
	struct kvfs_events *events;    /* the KV event ring (engine/events.c) */
	struct kvfs_load load;         /* background index load (engine/loading.c) */
	struct kvfs_pending *pending;  /* dedup: extents being written (ns_lock) */
	_Atomic(const struct kvfs_hooks *) hooks;  /* the front end's (may be NULL) */

	struct kvfs_stats st;
};

/* ---- KV events (engine/events.c) ---- */
enum kvfs_event_type {
	KVFS_EV_NONE,
	KVFS_EV_STORED,      /* a new page under a name that had none */
	KVFS_EV_REMOVED,     /* unlinked, or renamed away from this name */
	KVFS_EV_EVICTED,     /* removed by the capacity evictor or kvfs gc */
	KVFS_EV_REPLACED,    /* a new page took the name of an existing one */
};
/* A change's record, captured when it is queued; a change may carry two
 * (a rename: removed, then stored or replaced), linked by next. */
struct kvfs_event {
	enum kvfs_event_type type;
	uint64_t size;
	int64_t time_ns;             /* when the change was made */
	char model[KV_NAME_MAX + 1];
	char layer[KV_NAME_MAX + 1];
	char name[KV_NAME_MAX + 1];
	struct kvfs_event *next;
};
/* Record a change to page n, whose layer (n->parent) is still in the
 * index: ns_lock held. Never fails (waits out a lack of memory). */
struct kvfs_event *kvfs_event_capture(struct kvfs *fs, enum kvfs_event_type type,
				      const struct kv_node_info *n);
void kvfs_event_free(struct kvfs_event *chain);
size_t kvfs_event_count(const struct kvfs_event *chain);
/* A ring of ring records (at least 1); the first record gets last_seq + 1. */
int kvfs_events_init(struct kvfs *fs, uint64_t last_seq, size_t ring);
void kvfs_events_fini(struct kvfs *fs);
/* The committer's thread only, once the changes are durable: number the
 * records (in order) and append them; takes the chain. */
void kvfs_events_publish(struct kvfs *fs, struct kvfs_event *chain);
/* The newest record's seq (what meta event_seq holds once committed). */
uint64_t kvfs_events_last_seq(struct kvfs *fs);
/* The stream ends: readers get what is left, then end of file (the
 * daemon is stopping); the front end's events_ready hook is told. */
void kvfs_events_shutdown(struct kvfs *fs);
/* A reader: its own cursor, from the oldest record kept (NULL: no memory). */
struct kvfs_events_reader;
struct kvfs_events_reader *kvfs_events_reader_new(struct kvfs *fs);
void kvfs_events_reader_free(struct kvfs *fs, struct kvfs_events_reader *r);
/* Has r something to take (records, an overflow, the end of the stream)? */
bool kvfs_events_ready(struct kvfs *fs, const struct kvfs_events_reader *r);
/* Copy up to size bytes of r's records into buf, advancing its cursor:
 * whole records while they fit; a record longer than size goes in part
 * and the rest comes next. 0 when there is nothing; *eof then tells the
 * stream ended. Never blocks. */
size_t kvfs_events_take(struct kvfs *fs, struct kvfs_events_reader *r, char *buf,
			size_t size, bool *eof);
struct kvfs_events_stats {
	uint64_t last_seq;      /* newest record */
	uint64_t retained;      /* records in the ring */
	uint64_t readers;       /* opens of the file */
	uint64_t missed;        /* records readers lost to overflow */
	uint64_t overflows;     /* overflow records delivered */
};
void kvfs_events_stats(struct kvfs *fs, struct kvfs_events_stats *out);

/* ---- live pages (caller holds ns_lock) ---- */
struct kvfs_live *kvfs_live_find(struct kvfs *fs, uint64_t ino);
struct kvfs_live *kvfs_live_get(struct kvfs *fs, uint64_t ino); /* find or create */
/* Free the entry if it is idle; frees a pending extent when unlinked. */
void kvfs_live_maybe_drop(struct kvfs *fs, struct kvfs_live *l);
/* Its writer sealed or discarded it (ns_lock held): out of the writer's
 * open_share count of pages being written. */
void kvfs_live_writer_done(struct kvfs *fs, struct kvfs_live *l);

/* Node snapshot by inode, including unlinked-but-open pages. */
int kvfs_node_get(struct kvfs *fs, uint64_t ino, struct kv_node_info *out);
int kvfs_node_get_locked(struct kvfs *fs, uint64_t ino, struct kv_node_info *out);
/* Store n as ino's node: in the index, or for an unlinked-but-open page in
 * its live entry, which no row names (1 then, else 0 or -errno; ns_lock). */
int kvfs_node_put_locked(struct kvfs *fs, uint64_t ino, const struct kv_node_info *n,
			 unsigned upd);
/* A namespace change in directory ino: its mtime and ctime become now (in
 * the index; the committer persists them with the batch, engine/commit.c).
 * ns_lock held. */
void kvfs_dir_changed(struct kvfs *fs, uint64_t ino);

/* ---- the namespace (engine/namespace.c) ----
 * Models, layers and names. Each call takes ns_lock itself, changes the
 * index, then queues the manifest change (their order is the order clients
 * see), and returns EIO once the manifest is damaged. Permissions are the
 * front end's to check. */
/* 0, -ENAMETOOLONG, or -EINVAL (empty, '/', "." or ".."). */
int kvfs_check_name(const char *name);
/* A new node's inode, parent p, name, mode, owner and times (now), its
 * kind set before (a setgid p gives its gid, and to a directory its
 * setgid bit); the caller adds it (ns_lock held). */
void kvfs_ns_node_init(struct kvfs *fs, struct kv_node_info *n, const struct kv_node_info *p,
		       const char *name, uint32_t mode, uint32_t uid, uint32_t gid);
/* A layer directory's name is its number in decimal, zero-padded to at
 * most this many digits ("7", "07", "00007"). */
#define KVFS_LAYER_DIGITS 5
#define KVFS_LAYER_NUMBERS 100000u     /* 10^KVFS_LAYER_DIGITS */
/* A model under the root, or a layer (named by its number) under a model. */
int kvfs_ns_mkdir(struct kvfs *fs, uint64_t parent, const char *name, uint32_t mode,
		  uint32_t uid, uint32_t gid, struct kv_node_info *out);
int kvfs_ns_rmdir(struct kvfs *fs, uint64_t parent, const char *name);
int kvfs_ns_unlink(struct kvfs *fs, uint64_t parent, const char *name);
/* rename(2); replace false: -EEXIST rather than replacing (NOREPLACE). */
int kvfs_ns_rename(struct kvfs *fs, uint64_t parent, const char *name,
		   uint64_t newparent, const char *newname, bool replace);
/* An attribute change: the fields named in valid. */
enum {
	KVFS_ATTR_MODE = 1 << 0,
	KVFS_ATTR_UID = 1 << 1,
	KVFS_ATTR_GID = 1 << 2,
	KVFS_ATTR_SIZE = 1 << 3,       /* a page being written only (else EPERM) */
	KVFS_ATTR_ATIME = 1 << 4,      /* to atime_ns */
	KVFS_ATTR_MTIME = 1 << 5,      /* to mtime_ns */
	KVFS_ATTR_ATIME_NOW = 1 << 6,
	KVFS_ATTR_MTIME_NOW = 1 << 7,
};
struct kvfs_attr_change {
	unsigned valid;
	uint32_t mode, uid, gid, caller;   /* caller: the asking uid (pins are root's) */
	uint64_t size;
	int64_t atime_ns, mtime_ns;
};
/* setattr: ctime becomes now; out gets the node as changed. */
int kvfs_ns_setattr(struct kvfs *fs, uint64_t ino, const struct kvfs_attr_change *c,
		    struct kv_node_info *out);
/* A model's geometry (all zero: none), only while it holds no pages
 * (-ENOTEMPTY) and no layer beyond the new count (-EINVAL); -EFBIG for
 * pages larger than a segment; -ENOTSUP on anything but a model. */
int kvfs_ns_set_geometry(struct kvfs *fs, uint64_t ino, const struct kv_geometry *g);
/* Pin (or unpin) a sealed page: evicted last, kept longest in the RAM
 * tier (the sticky bit of its mode). -EPERM on a directory or for a pin
 * asked by anyone but root (caller), -EBUSY while it is being written. */
int kvfs_ns_set_pinned(struct kvfs *fs, uint64_t ino, bool pin, uint32_t caller);

/* ---- page files (engine/pagefile.c) ----
 * A page written and read as a file: the FUSE front end's create, open,
 * read, write, flush, release and fsync. Each takes ns_lock itself (never
 * call them holding it). */
struct kvfs_file;
/* A new page being written in layer directory parent, with its writer's
 * handle. -EPERM outside a layer, -EEXIST, EIO on a damaged manifest. */
int kvfs_file_create(struct kvfs *fs, uint64_t parent, const char *name, uint32_t mode,
		     uint32_t uid, uint32_t gid, struct kvfs_file **out,
		     struct kv_node_info *n);
/* Open a sealed page for reading (open(2) flags) for uid: -EPERM for
 * writing a sealed page, -EBUSY while another is writing it (after waiting
 * up to 2 s for a writer that already closed, if a slot is free to uid). */
int kvfs_file_open(struct kvfs *fs, uint64_t ino, int flags, uint32_t uid,
		   struct kvfs_file **out);
/* The same wait for a fast-path call of uid: 0 and *n refreshed once the
 * page is sealed, -EBUSY if it is still being written, -ENOENT if gone.
 * *deadline_ns (0: set now) bounds every wait of one call together. */
int kvfs_page_await_seal(struct kvfs *fs, uint32_t uid, struct kv_node_info *n,
			 int64_t *deadline_ns);
/* Up to size bytes at off: *bytes, *len, kept alive by *hold (may be NULL
 * when len is 0) until the caller puts it. A reader's page is loaded and
 * verified on its first read (EIO for damaged bytes); the writer reads
 * back what it wrote so far. */
int kvfs_file_read(struct kvfs *fs, struct kvfs_file *f, uint64_t off, size_t size,
		   struct kvfs_data **hold, const void **bytes, size_t *len);
/* The writer's bytes at off; may wait for write-back room and eviction.
 * -EFBIG past the page size, -ENOSPC, -EDQUOT, -EPERM once sealed. A
 * refused write dooms the page: it is never sealed. Unless keep_setid
 * (a caller with CAP_FSETID), the write clears set-id bits as write(2)
 * does on any Linux filesystem. */
int kvfs_file_write(struct kvfs *fs, struct kvfs_file *f, const void *buf, size_t size,
		    uint64_t off, bool keep_setid);
int kvfs_file_flush(struct kvfs *fs, struct kvfs_file *f);
/* The last close: seal the writer's page (or discard what cannot be one),
 * and free f. */
void kvfs_file_release(struct kvfs *fs, struct kvfs_file *f);
/* Seal the writer's page now and wait until it and everything queued
 * before is durable. */
int kvfs_file_fsync(struct kvfs *fs, struct kvfs_file *f);

/* ---- dedup (engine/dedup.c) ---- */
/* What sealing a payload will do, worked out before ns_lock is taken: its
 * checksum, and a durable extent holding the very same bytes, if any. */
struct kvfs_seal_plan {
	struct kvfs_data *d;          /* the payload planned for (a reference) */
	uint64_t size;
	uint8_t hash[KV_HASH_LEN];
	struct kv_extent_rec share;   /* id 0: no twin, write a new extent */
	bool pending;                 /* share is still being written (this
	                               * commit window): its failure withdraws us */
};
/* Hash d and look for a twin (reads and compares bytes; never under
 * ns_lock). Takes over the caller's reference to d. */
/* The most names one extent may take: one per 4 KiB block of its payload,
 * so that every page costs at least a block of the capacity. */
static inline uint64_t kvfs_share_names_max(const struct kv_extent *e)
{
	return kv_extent_footprint(e) / KV_ALIGN;
}
void kvfs_seal_plan_make(struct kvfs *fs, struct kvfs_data *d,
			 struct kvfs_seal_plan *p);
void kvfs_seal_plan_clear(struct kvfs_seal_plan *p);
/* Is plan p still about payload d as it is now? */
bool kvfs_seal_plan_fits(const struct kvfs_seal_plan *p, const struct kvfs_data *d);
/* The pending table (ns_lock held): page n's new extent, written from d
 * (a reference is kept), may be shared until its write is durable or
 * failed (drop). Nothing happens with dedup off, or without memory (then
 * it is shared once durable). */
void kvfs_dedup_pending_add(struct kvfs *fs, const struct kv_node_info *n,
			    struct kvfs_data *d);
void kvfs_dedup_pending_drop(struct kvfs *fs, const struct kv_node_info *n);
/* Is extent e still being written, and its write not failed? */
bool kvfs_dedup_pending_has(struct kvfs *fs, const struct kv_extent_rec *e);
/* At open (a table only with opts.dedup; -ENOMEM) and at close. */
int kvfs_dedup_init(struct kvfs *fs);
void kvfs_dedup_fini(struct kvfs *fs);

/* ---- pages (engine/page.c) ---- */
/* Seal the page being written through l: hash, share a twin extent or
 * allocate and submit the write, queue the manifest row. plan (may be NULL)
 * is used if it still fits l's payload. Caller holds ns_lock. */
int kvfs_page_seal(struct kvfs *fs, struct kvfs_live *l,
		   const struct kvfs_seal_plan *plan);
/* Detach a page from the namespace (unlink or replaced by rename); frees its
 * extent once the manifest forgot it and no one holds it open. why: the KV
 * event its removal makes once durable (KVFS_EV_NONE when the change that
 * follows, with_next, tells it: a replacement). ns_lock held. */
int kvfs_page_forget(struct kvfs *fs, const struct kv_node_info *n, bool with_next,
		     enum kvfs_event_type why);
/* Payload size allowed for pages under layer dir `parent` (geometry or max). */
int kvfs_page_limit(struct kvfs *fs, uint64_t parent, uint64_t *limit,
		    bool *exact);
/* kv_store_usage with each page of size 0 charged KV_ALIGN (page.c);
 * returns the number of those pages it charged. */
uint64_t kvfs_store_usage(struct kvfs *fs, struct kv_store_usage *u);
/* Room for one more page of size 0, the block its name is charged
 * (ns_lock held): 0 or -ENOSPC (logged and counted unless quiet). */
int kvfs_page_name_room(struct kvfs *fs, bool quiet);
/* Give back the space a page being written held (ns_lock held). */
void kvfs_page_unreserve(struct kvfs *fs, struct kvfs_live *l);
/* Hold space for a page being written through l to grow to new_size
 * bytes (ns_lock held): 0, or -ENOSPC (quiet: not counted or logged, the
 * caller will wait for eviction and try again). */
int kvfs_page_reserve(struct kvfs *fs, struct kvfs_live *l, uint64_t new_size,
		      bool quiet);
/* Truncate or extend a page being written to size bytes (what it grows by
 * reads as zeros); ns_lock held. -EPERM when it is not being written,
 * -EFBIG past its page limit, -ENOSPC. */
int kvfs_page_truncate(struct kvfs *fs, uint64_t ino, uint64_t size);
/* Read a sealed page's whole payload, verified (write-back copy, RAM tier
 * or disk; a disk read is kept in the RAM tier). */
int kvfs_page_load(struct kvfs *fs, uint64_t ino, struct kvfs_data **out);
/* A page with this mode is pinned (root's sticky bit): kept longest by the
 * RAM tier and evicted last for capacity. Sharing an extent protects
 * nothing: the tier keys by extent, so a read of any name keeps it. */
static inline bool kvfs_pinned(uint32_t mode) { return (mode & S_ISVTX) != 0; }
/* A page was read: note its access time for LRU eviction (cheap; the
 * manifest learns it lazily, engine/capacity.c). */
void kvfs_page_touch(struct kvfs *fs, const struct kv_node_info *n);

/*
 * Publish a page whose payload the daemon owns (the fast-path write): a new
 * page named name in layer directory layer_ino, sealed at once (checksum,
 * dedup, extent, write-behind, manifest row queued) and visible when this
 * returns. d->size bytes; d's dirty charge of `charged` bytes (see
 * kvfs_dirty_take; with as much of attr->uid's fast-path share, see
 * kvfs_dirty_fast_take) moves to the page and is given back when it is
 * durable.
 * An existing page of that name: -EEXIST, unless replace (then it is
 * replaced atomically, as by rename(2)). -EISDIR/-EINVAL for a name that
 * is a directory or not a valid page name, -EINVAL for a size the model
 * geometry does not allow, -ENOSPC. On error nothing changed and the
 * charge is still the caller's. Takes ns_lock itself (the dedup probe
 * reads the disk before): never call it holding ns_lock. out (may be NULL)
 * gets the new page's node.
 */
int kvfs_page_publish(struct kvfs *fs, uint64_t layer_ino, const char *name,
		      const struct kv_obj_attr *attr, struct kvfs_data *d,
		      uint64_t charged, bool replace, struct kv_node_info *out);

/* ---- dirty budget (engine/dirty.c) ---- */
void kvfs_dirty_init(struct kvfs *fs, uint64_t budget);
void kvfs_dirty_fini(struct kvfs *fs);
/* Charge bytes of write-back memory about to be filled; held: what the
 * caller already holds for pages it has not sealed (its page so far, a
 * batch's staged pages). Blocks until the charge fits; lets it through
 * over the budget (an overrun, counted) only when waiting could not end:
 * every byte being filled is held by writers waiting here, this one among
 * them (held > 0), or nothing was given back for 2 s since the charge came
 * (a holder that waits elsewhere, e.g. one thread writing two pages at
 * once; one charge a stall). 0, or -ENOSPC/-EIO (logged, nothing charged)
 * when sealed pages wait but none became durable for 20 s: the manifest
 * cannot commit. Never call it holding ns_lock. */
int kvfs_dirty_take(struct kvfs *fs, uint64_t bytes, uint64_t held);
/*
 * kvfs_dirty_take for a page file's writer of uid: a uid other than root
 * holds at most half the budget in its pages, page files from their first
 * write and fast-path pages from their copy, until durable (one page of
 * any size alone). Past it, a writer waits while the uid's sealed and
 * published pages drain (-ENOSPC/-EIO as kvfs_dirty_take when nothing
 * does), and up to 2 s for its pages being written to be sealed, at most
 * 4 writers of a uid at once (each holds a FUSE thread); otherwise
 * -EDQUOT, logged. The charge then belongs to the uid until
 * kvfs_dirty_uid_done (unsealed) or the page's kvfs_dirty_give_live.
 */
int kvfs_dirty_take_uid(struct kvfs *fs, uint32_t uid, uint64_t bytes, uint64_t held);
/* bytes charged through kvfs_dirty_take_uid were sealed or given back. */
void kvfs_dirty_uid_done(struct kvfs *fs, uint32_t uid, uint64_t bytes);
/*
 * Before a fast-path write of uid stages a chunk of bytes (all of the
 * chunk at once, holding none of its uid's share meanwhile): a uid other
 * than root holds at most kvfs_dirty_fast_share (half the budget) in
 * fast-path pages, from their copy until durable, with its page files
 * (kvfs_dirty_take_uid). Waits while its own pages drain; a chunk larger than the
 * share goes through when the uid holds nothing. 0, or -ENOSPC/-EIO as
 * kvfs_dirty_take when nothing drains for long. The bytes are then the
 * uid's until kvfs_dirty_fast_done (a page that took them gives them back
 * when durable: kvfs_live.dirty_fast).
 */
int kvfs_dirty_fast_take(struct kvfs *fs, uint32_t uid, uint64_t bytes);
uint64_t kvfs_dirty_fast_share(const struct kvfs *fs);
void kvfs_dirty_fast_done(struct kvfs *fs, uint32_t uid, uint64_t bytes);
/* Bytes uid holds in pages it is still writing (a leaf lock: any order). */
uint64_t kvfs_dirty_uid_filling(struct kvfs *fs, uint32_t uid);
/* bytes already charged now belong to a sealed page (filling -> draining). */
void kvfs_dirty_sealed(struct kvfs *fs, uint64_t bytes);
/* l's charge now drains (its page was sealed): kvfs_dirty_sealed; it
 * stays in its writer uid's share until given back. */
void kvfs_dirty_sealed_live(struct kvfs *fs, struct kvfs_live *l);
/* l's charge leaves its writer uid's share (doomed or gone). */
void kvfs_dirty_uid_release_live(struct kvfs *fs, struct kvfs_live *l);
/* Give a charge back (the page is durable, withdrawn or discarded). */
void kvfs_dirty_give(struct kvfs *fs, uint64_t bytes, bool sealed);
/* Give back what live page l holds (any lock order: takes only dirty.lock). */
void kvfs_dirty_give_live(struct kvfs *fs, struct kvfs_live *l);

/* ---- committer (engine/commit.c) ---- */
enum kvfs_op_kind {
	KVFS_OP_PUT_PAGE,     /* row for a page (new, renamed, attrs) */
	KVFS_OP_DEL_PAGE,
	KVFS_OP_PUT_MODEL,
	KVFS_OP_DEL_MODEL,
	KVFS_OP_PUT_LAYER,
	KVFS_OP_DEL_LAYER,
};

int kvfs_commit_start(struct kvfs *fs);
/* Commit everything queued, then stop the thread. */
void kvfs_commit_stop(struct kvfs *fs);
/*
 * What became of a queued page operation, told to the on_durable callback
 * its queuer gave: on the committer's thread, under ns_lock, after the
 * transaction holding its row committed, or once its payload write failed
 * (err < 0: nothing of it was applied, and no row will ever name it). The
 * committer knows nothing of what a page is to its users (the live table,
 * the RAM tier, the write-back budget): the callback does that work.
 */
struct kvfs_durable {
	const struct kv_node_info *node;  /* as queued */
	int err;                          /* 0, or the payload write's error (of
	                                   * the extent it shares, if pending) */
	bool wrote;                       /* its payload was written (not shared) */
	bool free_extent;                 /* out: punch node->ext once ns_lock is
	                                   * dropped (deferred behind running pins) */
};
typedef void kvfs_on_durable_fn(struct kvfs *fs, struct kvfs_durable *d);

/* Queue a namespace row change (ns_lock held, so queue order = namespace
 * order). ev (may be NULL; taken): records published once it committed. */
void kvfs_commit_put_page(struct kvfs *fs, const struct kv_node_info *n,
			  struct kvfs_event *ev);
/* with_next: the next queued op belongs to the same atomic change (a rename
 * replacing this page) and must commit in the same transaction. drop_extent:
 * it was the extent's last page; unref: other pages still share the extent
 * (dedup), so its refcount goes down by one. */
void kvfs_commit_del_page(struct kvfs *fs, const struct kv_node_info *n,
			  bool drop_extent, bool unref, bool with_next,
			  enum kvfs_event_type ev, kvfs_on_durable_fn *on_durable);
void kvfs_commit_put_dir(struct kvfs *fs, const struct kv_node_info *n);
void kvfs_commit_del_dir(struct kvfs *fs, const struct kv_node_info *n);
/* Where a sealed page's payload goes (dedup, engine/dedup.c). */
enum kvfs_share {
	KVFS_SHARE_NONE,      /* a new extent: written */
	KVFS_SHARE_DURABLE,   /* an existing durable extent: nothing written */
	KVFS_SHARE_PENDING,   /* an extent queued for writing by an earlier page:
	                       * nothing written; withdrawn if that write fails */
};
/* Queue a newly sealed page: submits the write of payload to n->ext now,
 * the row follows once the data is synced. Takes a reference on payload.
 * share other than NONE: n->ext is an existing extent, nothing is
 * written, the row adds a reference to it. ev: KVFS_EV_STORED or
 * KVFS_EV_REPLACED. on_durable (may be NULL): told when it is durable or
 * withdrawn. -ENOMEM: nothing was queued. */
int kvfs_commit_new_page(struct kvfs *fs, const struct kv_node_info *n,
			 struct kvfs_data *payload, enum kvfs_share share,
			 enum kvfs_event_type ev, kvfs_on_durable_fn *on_durable);
/* Work the committer does when it is idle (at most every 30 s, and between
 * batches when it is busy for long), on its thread, which owns the
 * manifest connection: capacity's access-time flush. One; NULL: none. */
typedef void kvfs_idle_fn(struct kvfs *fs);
void kvfs_commit_set_idle_work(struct kvfs *fs, kvfs_idle_fn *fn);
/* The last queued op promised a partner (with_next) that will not come. */
void kvfs_commit_pair_abandon(struct kvfs *fs);
/* Everything queued between begin and end commits in one transaction (a
 * fast-path write's chunk of pages). Never wait for the committer (the
 * write-back budget, a commit mark) in between: it waits for the end.
 * Nests; end takes ns_lock, so call both without it. */
void kvfs_commit_group_begin(struct kvfs *fs);
void kvfs_commit_group_end(struct kvfs *fs);
/* A point to wait from: take it before queueing what the caller will wait for. */
uint64_t kvfs_commit_mark(struct kvfs *fs);
/* Wait until every operation queued before this call is durable. 0, or -EIO
 * if one queued after mark could not be made durable, or if nothing at all
 * was committed for 60 s (the committer is stuck on its disk; logged). */
int kvfs_commit_wait_all(struct kvfs *fs, uint64_t mark);
/* The error of the last manifest transaction if it failed (the committer
 * is retrying it), else 0. */
int kvfs_commit_failing(struct kvfs *fs);

/* ---- fast-path pins (engine/pin.c) ---- */
void kvfs_pins_init(struct kvfs_pins *p);
/* Free whatever is still deferred (no batch may be running). */
void kvfs_pins_fini(struct kvfs *fs);
/* A batch is about to resolve names to extents and read them. */
void kvfs_pin_begin(struct kvfs *fs, struct kvfs_pin *pin);
void kvfs_pin_end(struct kvfs *fs, struct kvfs_pin *pin);
/* Free an extent no manifest row refers to any more, once no batch that
 * may have resolved it is running. Returns kv_extent_free's result, or 0
 * when deferred (-ENOMEM: not deferred; the space leaks until remount). */
int kvfs_extent_release(struct kvfs *fs, const struct kv_extent *e);

/* ---- the manifest's filesystem (engine/headroom.c) ---- */
/* Before the manifest opens: if the store directory's filesystem is full,
 * give up the reserve (logged) so that SQLite has room to open. */
void kvfs_reserve_before_open(const char *dir);
/* The store is open: keep headroom on the manifest's filesystem where a
 * stripe shares it, make the reserve if there is room. 0 or -errno. */
int kvfs_room_start(struct kvfs *fs);
/* Committer, after a commit: re-measure the headroom (at most once a
 * second) and make the reserve again once there is room for it. */
void kvfs_room_tick(struct kvfs *fs);
/* Committer, a commit failed with ENOSPC: give up the reserve (logged).
 * True if it held space, so that a retry at once may succeed. */
bool kvfs_room_release(struct kvfs *fs);

/* ---- helpers ---- */
int64_t kvfs_now_ns(void);
/* CLOCK_REALTIME ns from now, for pthread_cond_timedwait (inline: files
 * on every level of engine/ use it, tests/unit/layering.py). */
static inline struct timespec kvfs_after_ns(int64_t ns)
{
	struct timespec t;

	clock_gettime(CLOCK_REALTIME, &t);
	ns += t.tv_nsec;
	t.tv_sec += ns / 1000000000;
	t.tv_nsec = ns % 1000000000;
	return t;
}
/*
 * Once the committer has found the manifest damaged (KV_ERR_CORRUPT), no
 * change can become durable: every namespace change and write is refused
 * with EIO (logged at most once a minute) rather than acknowledged and then
 * lost. kvfs_manifest_damaged records it.
 *
 * kvfs_changes_damaged is that check (0 or a -errno); nothing waits for
 * the background load (engine/loading.c): new pages, removals, renames and
 * eviction go ahead once the layers they touch are loaded.
 */
void kvfs_manifest_damaged(struct kvfs *fs, int err);
int kvfs_changes_damaged(struct kvfs *fs);

/* engine/open.c: rebuild the allocator from the index's extents and give
 * back what no row names (reclaim); once per open, with the index whole. */
int kvfs_recover_space(struct kvfs *fs);

/* engine/unload.c: with a page budget (-o index_pages), on the loader's
 * thread once the load is over and until the unmount: layers unused for a
 * few seconds go back to the manifest while more pages than the budget
 * are in RAM (index/unload.c). */
void kvfs_unload_loop(struct kvfs *fs);

/* engine/fault.c: user.kvfs.fault on the root (-o fault_injection only).
 * set: arm the store's or the manifest's fault seam from a spec (-EPERM
 * without the option, -EINVAL for a bad spec, logged); get: the last spec
 * armed, or -ENODATA without the option. */
int kvfs_fault_set(struct kvfs *fs, const char *value, size_t size);
int kvfs_fault_get(struct kvfs *fs, char *out, size_t len);

#endif
