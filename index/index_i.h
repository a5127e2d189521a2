/*
 * Private to index/: the node and extent records of the in-memory index and
 * the helpers its files share (index.c: namespace; listing.c: readdir and
 * whole-index walks; extent.c: extent table; load.c: filling it from the
 * manifest). Every function here expects the
 * caller to hold kv_index.lock as its name says (_locked: for writing).
 */
#ifndef KV_INDEX_I_H
#define KV_INDEX_I_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "htab.h"
#include "slab.h"
#include "index.h"

struct node;

/* A page's extent location and checksum are its extent record's
 * (ext_by_id), not copied here: 40 bytes less per page. */
struct page_data {
	uint64_t size;
	uint64_t extent_id;          /* 0: being written, or empty */
};

/* Directories are few: their fields live apart, so that pages stay small. */
struct dir_data {
	struct node *first, *last;   /* children, oldest first */
	uint64_t nchildren;
	struct kv_geometry *geo;     /* models only */
	uint32_t layer;              /* layers only */
	bool unloaded;               /* layers: pages still only in the manifest (load.c) */
	bool deferred;               /* layers: the walk leaves them there (residency.c) */
	int load_err;                /* layers: why loading its pages failed (load.c) */
	/* Layers: rows the walk passed while the layer stays in the
	 * manifest, counted in the index's stats as pages (residency.c). */
	uint64_t rows, row_bytes, empty_rows;   /* empty: of size 0 */
	/* ... and the oldest access time among those rows (any value while
	 * rows is 0), so that eviction loads the layer whose pages are the
	 * least recently used first (kv_index_deferred_layer). */
	int64_t rows_oldest_atime;
	/* Layers (unload.c): children being written (KV_PAGE_WRITING: no
	 * row yet; write lock); the caller's seq of the last manifest change
	 * queued for the layer or its pages (kv_index_layer_queued) and the
	 * unload clock's tick when it was last used (both __atomic). */
	uint64_t writing;
	uint64_t queued_seq;
	uint64_t used;
};

/*
 * 77 bytes + name on LP64, cut from the index's slab (slab.h) in 8-byte
 * steps: 88 bytes with a 16-hex-digit name (packed: node_name.c), where
 * malloc took 128 for the plain name and 8-byte sibling links. Millions
 * of these exist, so fields are packed by hand: the 8-byte fields first, the
 * small ones after them, the name straight after those (no padding between);
 * attr is not a struct kv_obj_attr, which carries 4 bytes of padding and a
 * 32-bit mode where permission bits need 12. The name table's hash is
 * computed again from parent and name when the table needs it, not kept.
 * Siblings are linked by 32-bit handles into the slab (idx_next, idx_prev):
 * the parent stays a pointer, because the name table's hash function,
 * which sees only the node, reads the parent's inode through it.
 */
struct node {
	uint64_t ino;
	struct node *parent;          /* NULL for the root */
	int64_t ctime_ns, mtime_ns;
	int64_t atime_ns;             /* __atomic: KV_UPD_ATIME runs under the read lock */
	union {
		struct page_data p;
		struct dir_data *d;   /* the root, models and layers */
	} u;
	uint32_t uid, gid;
	uint32_t prev, next;          /* siblings in parent's child list: handles, IDX_NIL */
	uint16_t mode;                /* permission bits */
	uint8_t kind;                 /* enum kv_kind */
	uint8_t state;                /* enum kv_page_state, pages */
	uint8_t flags;                /* NODE_ATIME_LISTED, NODE_NAME_HEX; __atomic */
	char name[];                  /* read it through node_name.c */
};

_Static_assert(sizeof(void *) != 8 || offsetof(struct node, name) == 77,
	       "a page node should stay at 77 bytes + name");

/* No sibling. A node's handle is never this: a node (78 bytes at least)
 * cannot start in the span's last 8 bytes. */
#define IDX_NIL UINT32_MAX
_Static_assert(offsetof(struct node, name) + 1 > 8, "IDX_NIL must not name a node");

/* The page's inode is in kv_index.touched: its access time moved since
 * the last kv_index_touched_walk. Set and cleared under the read lock
 * (atomically), by touch_atime and the walk. */
#define NODE_ATIME_LISTED 0x01u
/* Its name starts with hex digits kept two to a byte (node_name.c). Set
 * and cleared under the write lock, atomically beside the flag above. */
#define NODE_NAME_HEX 0x02u

/* Bytes of a node whose name takes `stored` bytes (idx_name_stored): its
 * slab size. */
static inline size_t idx_node_bytes(size_t stored)
{
	return offsetof(struct node, name) + stored;
}

/* A node's name (node_name.c): hex digits are packed two to a byte. */
/* Bytes name[0..len) takes in a node, with its terminator. */
size_t idx_name_stored(const char *name, size_t len);
/* Store name[0..len) in n, whose allocation has idx_name_stored(name, len)
 * bytes of name (write lock). */
void idx_node_name_set(struct node *n, const char *name, size_t len);
/* Bytes n's name takes (its allocation is idx_node_bytes of it). */
size_t idx_node_name_stored(const struct node *n);
/* Length of n's name. */
size_t idx_node_name_len(const struct node *n);
/* n's name into out (KV_NAME_MAX + 1 bytes), NUL-terminated; its length. */
size_t idx_node_name(const struct node *n, char *out);
/* Whether n's name is name[0..len). */
bool idx_node_name_eq(const struct node *n, const char *name, size_t len);

/*
 * 48 bytes, from the slab (malloc took 64 for the 56 it was). The location
 * is packed: a struct kv_extent is 24 bytes, but the offset is a multiple
 * of KV_ALIGN within a segment file (32 bits of blocks reach 16 TiB), the
 * length fits 40 bits (1 TiB) and a stripe number 8 (KV_MAX_STRIPES is
 * 64). idx_xent_put_locked refuses what does not fit; read the location
 * with idx_xent_ext and idx_xent_length.
 */
struct xent {
	uint64_t id;
	uint8_t hash[KV_HASH_LEN];
	uint32_t refcount;
	uint32_t seen : 31;           /* kv_index_load: pages found referring to it */
	uint32_t durable : 1;         /* its row is committed: dedup may share it */
	uint32_t segment;
	uint32_t offset_blocks;       /* offset / KV_ALIGN */
	uint32_t length_lo;           /* length: low 32 bits */
	uint8_t length_hi;            /* length: bits 32..39 */
	uint8_t stripe;
	/* Its last page went while the index loaded (extent.c): out of the
	 * key table and every lookup, kept by id until the mount's reclaim
	 * has marked it (kv_index_retired_drop). */
	uint8_t retired : 1;
	/* its count changed since it was put: the manifest's may lag */
	uint8_t moved : 1;
};

_Static_assert(sizeof(void *) != 8 || sizeof(struct xent) == 48,
	       "an extent record should stay at 48 bytes");
_Static_assert(KV_MAX_STRIPES <= 256, "a stripe number must fit struct xent");

static inline uint64_t idx_xent_length(const struct xent *e)
{
	return (uint64_t)e->length_hi << 32 | e->length_lo;
}

static inline struct kv_extent idx_xent_ext(const struct xent *e)
{
	return (struct kv_extent){ .stripe = e->stripe, .segment = e->segment,
				   .offset = (uint64_t)e->offset_blocks * KV_ALIGN,
				   .length = idx_xent_length(e) };
}

struct kv_index_loader;

struct kv_index {
	pthread_rwlock_t lock;
	struct htab by_ino;           /* struct node *, all nodes */
	struct htab by_name;          /* struct node *, all but the root */
	struct htab ext_by_id;        /* struct xent * */
	struct htab ext_by_key;       /* struct xent *, by (hash, length), multimap */
	struct node *root;
	struct slab slab;             /* nodes (write lock) */
	struct slab xslab;            /* extent records: apart, so that a trim
	                               * can give them back (residency.c) */
	uint64_t next_ino;            /* above every inode added or handed out */
	uint64_t next_ext;            /* above every extent id put or handed out */
	struct kv_index_stats st;
	/* Loading in the background (load.c): set before anyone else uses the
	 * index; layers_unloaded only falls, and at 0 the loader is never read. */
	struct kv_index_loader *loader;
	_Atomic uint64_t layers_unloaded;
	/* Pages of size 0, in RAM or in layers left in the manifest: each is
	 * charged KV_ALIGN of the capacity (kv_index_empty_pages), so that
	 * names alone cannot fill the manifest and RAM unbounded. Changed
	 * under the write lock, read without it. */
	_Atomic uint64_t empty_pages;
	/* Most pages the background walk brings into RAM (0: all); the
	 * layers beyond it stay in the manifest until used (residency.c),
	 * and layers unused go back to it when more are in RAM (unload.c). */
	uint64_t page_budget;
	/* The unload clock: kv_index_unload_tick moves it on (__atomic). */
	uint64_t use_tick;
	/* Tests only: called by a lookup, listing or get between making its
	 * layer ready and taking the lock (where a layer may go back). */
	void (*ready_gap)(void *arg, uint64_t layer);
	void *ready_gap_arg;
	/* kv_index_extents_trim ran: an extent missing from ext_by_id may be
	 * a deferred layer's, to be read from the manifest (load.c). */
	bool extents_trimmed;
	/* While the trim copies outside the write lock (trim.c): the ids of
	 * extents changed, added, removed or newly named by a page in RAM
	 * meanwhile, for it to copy again; trim_lost: one could not be
	 * listed (-ENOMEM, or -EAGAIN past the most it lists). */
	bool trim_noting;
	int trim_lost;
	uint64_t *trim_notes;
	size_t ntrim_notes, trim_notes_cap;
	size_t trim_caught;               /* notes copied again so far */
	/* Tests only: called between the trim's holds of the lock, the last
	 * time (before_swap) after every step of the copy. */
	void (*trim_gap)(void *arg, bool before_swap);
	void *trim_gap_arg;
	/* While loading in the background (0 otherwise): extents with an id
	 * below it were in the manifest when the load began, and its check
	 * compares their refcounts with the pages it finds. New pages may come
	 * meanwhile, but none shares such an extent (extent.c). */
	uint64_t frozen_below;
	/* Until the reclaim after the load has marked every extent
	 * (kv_index_retired_drop; 0 otherwise): extents with an id below it
	 * were in the manifest when the load began, and one whose count
	 * reaches 0 is retired, not dropped (extent.c). It outlives
	 * frozen_below: removals go on between the walk and the reclaim. */
	uint64_t retire_below;
	struct xent **retired;
	size_t nretired, retired_cap;
	/* Pages whose access time a read moved (touch_atime), each once,
	 * for kv_index_touched_walk; beyond touched_max, only overflow. */
	pthread_mutex_t touched_lock;     /* a leaf: taken under x->lock */
	uint64_t *touched;
	size_t ntouched, touched_cap, touched_max;
	bool touched_overflow;            /* some were not listed: walk all */
};

/* The most inodes kv_index.touched lists (8 MiB) before the next
 * kv_index_touched_walk walks every page instead. */
#define IDX_TOUCHED_MAX (1u << 20)

/* A node's siblings, and the handle that links to a node (read lock). */
static inline struct node *idx_link_node(const struct kv_index *x, uint32_t h)
{
	return h == IDX_NIL ? NULL : (struct node *)htab_elem(&x->by_ino, h);
}

static inline struct node *idx_next(const struct kv_index *x, const struct node *n)
{
	return idx_link_node(x, n->next);
}

static inline struct node *idx_prev(const struct kv_index *x, const struct node *n)
{
	return idx_link_node(x, n->prev);
}

static inline uint32_t idx_link(const struct kv_index *x, const struct node *n)
{
	return n ? htab_handle(&x->by_ino, n) : IDX_NIL;
}


/* The extent tables and their slab, empty (extent.c); 0 or -errno. */
int idx_extents_init(struct kv_index *x);
void idx_extents_fini(struct kv_index *x);
/* Hash of an extent's (checksum, length) key, for ext_by_key. */
uint64_t idx_key_hash(const uint8_t hash[KV_HASH_LEN], uint64_t length);
struct xent *idx_xent_find(const struct kv_index *x, uint64_t id);
/* The same in a table of extent records other than the index's own. */
struct xent *idx_xent_find_in(const struct htab *by_id, uint64_t id);
/* Extent id changed, or a page in RAM names it now (write lock): the
 * trim, if one is copying, must copy it again (trim.c). */
void idx_trim_note_slow(struct kv_index *x, uint64_t id);
static inline void idx_trim_note(struct kv_index *x, uint64_t id)
{
	if (x->trim_noting && id != KV_EXTENT_EMPTY)
		idx_trim_note_slow(x, id);
}
/* Insert or update an extent record. */
int idx_xent_put_locked(struct kv_index *x, const struct kv_extent_rec *r,
			struct xent **out);   /* out (may be NULL): its entry */
/* The node of ino, or NULL (read lock at least). */
struct node *idx_node(const struct kv_index *x, uint64_t ino);
/* Make layer ino's pages present before a call that needs them all (a
 * lookup or listing in it); 0 at once if they are, or if ino is no layer.
 * Call without the lock. load.c. */
int idx_layer_ready(struct kv_index *x, uint64_t ino);
/* -EAGAIN if parent is a layer whose pages are not all in RAM (the
 * background load has not read them yet, or they went back to the
 * manifest), so that a page name may be taken by a row not in RAM; 0
 * otherwise (write lock held). residency.c. */
int idx_layer_unloaded_locked(struct kv_index *x, uint64_t parent);
/* Whether n is a layer whose pages are not all loaded, or a page in one:
 * removing or moving it then is -EAGAIN (kv_index_layer_load its layer
 * first), since the layer's load would bring the page back from the
 * manifest's snapshot, and an unloaded layer looks empty. */
bool idx_node_unloaded_locked(const struct kv_index *x, const struct node *n);
/* May n go (write lock)? -EAGAIN as above, -ENOTEMPTY for a directory with
 * children, -ENOMEM; a layer that may go while the walk still reads rows
 * is noted, so that its rows are known for old news, not damage. */
int idx_removable_locked(struct kv_index *x, const struct node *n);
/* Free a loader kv_index_load_end did not (the index is being freed). */
void idx_loader_free(struct kv_index_loader *l);
/* List ino for kv_index_touched_walk (touched_lock taken here); false if
 * the list is full or cannot grow: the next walk visits every page. */
bool idx_touched_add(struct kv_index *x, uint64_t ino);
/* What a walk shows of page n (read lock at least). listing.c. */
void idx_page_brief(const struct node *n, struct kv_page_brief *b);
/* Choose the layers the background walk leaves in the manifest, so that
 * the pages it loads stay within x->page_budget (m in the loader's
 * snapshot; the lock is taken here); *deferred: their pages. residency.c. */
int idx_defer_layers(struct kv_index *x, struct kv_manifest *m, uint64_t *deferred);
/* A row of a deferred layer the walk passes: checked as a page's row is,
 * counted in its extent's pages and in the stats, not loaded (write lock).
 * residency.c. */
int idx_deferred_row_locked(struct kv_index *x, struct node *layer,
			    const struct kv_page_rec *r);
/* A page row's extent e (found by its extent_id; may be NULL) is one the
 * page can name: KV_ERR_CORRUPT, logged, if not. residency.c. */
int idx_row_extent_check(const struct kv_page_rec *r, const struct xent *e);
/* Extent e was read back from the manifest (it had left RAM with
 * kv_index_extents_trim) and put: keep the stats' counts whole. */
void idx_extent_reread_locked(struct kv_index *x, const struct xent *e);
/* Rows read without the index's lock, to put under it (load_read.c):
 * a scan opened with idx_read_v and a buffer of `rows` rows hands them
 * over; idx_read_chunk steps it once (at most max rows; what
 * kv_manifest_scan_step returns), and idx_read_row gives row i of those
 * read, false past the last: its extent and page, each NULL if the row
 * had none. Free the buffer with free(). */
struct kv_read_buf;
extern const struct kv_manifest_visitor idx_read_v;
struct kv_read_buf *idx_read_buf_new(unsigned rows);
void idx_read_buf_free(struct kv_read_buf *b);
/* Exchange the rows of a and b (a scan stays bound to its buffer). */
void idx_read_buf_swap(struct kv_read_buf *a, struct kv_read_buf *b);
/* A thread reading one chunk (idx_read_chunk) at a time, when asked
 * (load_read.c): the caller puts the previous chunk meanwhile, and waits
 * for it before it uses the scan's connection again. */
struct idx_read_ahead;
int idx_read_ahead_new(struct idx_read_ahead **out);
void idx_read_ahead_free(struct idx_read_ahead *ra);
void idx_read_ahead_ask(struct idx_read_ahead *ra, struct kv_manifest_scan *s,
			struct kv_read_buf *b);
int idx_read_ahead_wait(struct idx_read_ahead *ra);
int idx_read_chunk(struct kv_read_buf *b, struct kv_manifest_scan *s, unsigned max);
bool idx_read_row(const struct kv_read_buf *b, unsigned i, const struct kv_extent_rec **ext,
		  const struct kv_page_rec **page);
/* Layer n loads now: its rows leave the stats' count of rows kept in the
 * manifest, since its pages, as they come in, count themselves; *rows and
 * *bytes: what left. A load that failed puts back, as rows still in the
 * manifest, those it did not bring in (back): the stats keep counting
 * every page. residency.c. */
struct idx_rows {
	uint64_t rows, bytes, empty;
};
void idx_deferred_loading_locked(struct kv_index *x, struct node *n, struct idx_rows *out);
/* A row of layer d left in the manifest, last used at atime. */
static inline void idx_rows_atime(struct dir_data *d, int64_t atime)
{
	if (!d->rows || atime < d->rows_oldest_atime)
		d->rows_oldest_atime = atime;
}
void idx_deferred_back_locked(struct kv_index *x, struct node *n,
			      const struct idx_rows *back);
/* Pages of size 0 came (+) or went (-) (write lock held). */
static inline void idx_empty_add(struct kv_index *x, int64_t d)
{
	atomic_fetch_add_explicit(&x->empty_pages, (uint64_t)d, memory_order_relaxed);
}
/* The tables' hash functions, and a node's memory given back (index.c;
 * lifetime.c makes and frees the index with them). */
uint64_t idx_node_ino_hash(const void *e);
uint64_t idx_node_name_hash(const void *e);
void idx_dir_data_free(struct node *n);
void idx_node_free(struct kv_index *x, struct node *n);
/* Layer n (a layer node; pages name theirs as parent) was used now: the
 * unload clock's tick into it, under the read lock (unload.c). Written
 * only when it moved, so that lookups do not bounce its cache line. */
static inline void idx_layer_used(struct kv_index *x, struct node *n)
{
	uint64_t t = __atomic_load_n(&x->use_tick, __ATOMIC_RELAXED);

	if (n && n->kind == KV_KIND_LAYER && __atomic_load_n(&n->u.d->used, __ATOMIC_RELAXED) != t)
		__atomic_store_n(&n->u.d->used, t, __ATOMIC_RELAXED);
}
/* Page n leaves RAM for its layer's rows (write lock; unload.c): counted
 * as one of them, as a row the walk left in the manifest is. index.c. */
void idx_node_unload_locked(struct kv_index *x, struct node *n);
/* A change refused with rc (-EAGAIN: a layer it needs is not loaded;
 * -ENOENT: node ino was not found) tries again: 0 once a layer it needs
 * was loaded (that of node ino, or dir; or found for ino in the manifest),
 * else rc or the load's error. Callers load layers before their own
 * locks; this is for one that went back to the manifest in between, so
 * *tries bounds it. Call without the lock. unload.c. */
int idx_change_retry(struct kv_index *x, int rc, uint64_t ino, uint64_t dir, int *tries);
/* Page ino is not in RAM: if its row names a layer that went back to
 * the manifest, that layer is loaded. 1 if it was (look again), 0 if
 * there is nothing to load, or the load's error. Call without the lock.
 * unload.c. */
int idx_reload_by_ino(struct kv_index *x, uint64_t ino);
/* Add a node after validating it (kv_index_add without the lock). */
int idx_add_locked(struct kv_index *x, const struct kv_node_info *in);

#endif
