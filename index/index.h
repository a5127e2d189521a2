/*
 * kvfs in-memory index: the namespace and extent table the daemon serves
 * from, loaded from the manifest at mount and kept in step with it.
 *
 * Nodes form a three-level tree under the root (inode 1): model directories,
 * layer directories, page files. Every node is reachable by inode number and
 * by (parent inode, name); directories list their children for readdir.
 * Extents are kept in their own table (by id, and by hash for dedup) with a
 * refcount; a page names its extent by id, and a snapshot of the page reads
 * the extent's location and hash from there (one more probe per lookup,
 * 40 bytes less per page than a copy in every page).
 *
 * Lookups return snapshot copies (struct kv_node_info), never pointers into
 * the index, so a caller never holds anything a concurrent writer can free.
 * Every function is thread-safe (one internal rwlock); sequences of calls
 * that must be atomic together are serialised by the caller.
 *
 * Memory: a page costs one node (88 bytes + its name + malloc overhead) plus
 * two hash slots (~9 bytes each at the tables' load); an extent 56 bytes
 * (64 with malloc's) plus two slots. Measured: docs/benchmarks/metadata.md.
 *
 * Rules the index enforces (and the manifest too, so both accept the same):
 * names are 1..KV_NAME_MAX bytes without '/', and not "." or ".."; a layer
 * directory's name is its layer number in decimal (leading zeros allowed)
 * and one model cannot hold two directories for one number; attr.mode keeps
 * permission bits only (type bits are dropped).
 */
#ifndef KV_INDEX_H
#define KV_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "manifest.h"

#define KV_ROOT_INO 1ull

enum kv_kind { KV_KIND_ROOT, KV_KIND_MODEL, KV_KIND_LAYER, KV_KIND_PAGE };

enum kv_page_state {
	KV_PAGE_WRITING,  /* created, being written; no extent yet */
	KV_PAGE_SEALED,   /* immutable and visible; commit to the manifest pending */
	KV_PAGE_DURABLE,  /* its manifest row is committed */
};

struct kv_node_info {
	uint64_t ino;
	uint64_t parent;          /* 0 for the root */
	enum kv_kind kind;
	char name[KV_NAME_MAX + 1];
	struct kv_obj_attr attr;
	uint64_t nchildren;       /* directories */
	struct kv_geometry geo;   /* models */
	uint32_t layer;           /* layers */
	/* pages */
	enum kv_page_state state;
	uint64_t size;
	uint64_t extent_id;       /* 0 while WRITING */
	struct kv_extent ext;
	uint8_t hash[KV_HASH_LEN];
};

struct kv_dirent {
	uint64_t ino;
	enum kv_kind kind;
	char *name;
};

struct kv_index;

int kv_index_new(struct kv_index **out);   /* contains only the root */
void kv_index_free(struct kv_index *x);

/* A fresh inode number / extent id, larger than any added so far. */
uint64_t kv_index_next_ino(struct kv_index *x);
uint64_t kv_index_next_extent_id(struct kv_index *x);

/*
 * Add a node described by n (ino, parent, kind, name and the kind's fields;
 * nchildren is ignored). -EEXIST if the name or inode (or, for a layer, the
 * layer number) is taken, -ENOENT if the parent does not exist, -ENOTDIR if
 * the parent cannot hold this kind (models go under the root, layers under
 * models, pages under layers), -ENAMETOOLONG for a name over KV_NAME_MAX,
 * -EINVAL for an empty name, ".", "..", one with '/', a layer whose name does
 * not spell n->layer, ino 0 or kind KV_KIND_ROOT; -ENOENT too for a page
 * naming an extent (extent_id, not 0) the table lacks: put it first. A
 * page's ext and hash are ignored (they are its extent's). A page into a
 * layer whose pages are not all in RAM (the background load has not loaded
 * it, or it went back to the manifest) loads that layer first, since the
 * name may be taken there: the caller should kv_index_layer_load it before
 * taking its own locks (it is I/O), and this loads it only if it went back
 * in between; -EAGAIN if it kept going back, or the load's error.
 */
int kv_index_add(struct kv_index *x, const struct kv_node_info *n);

/* Snapshot of a node by inode / by (parent, name). -ENOENT if absent,
 * -ENAMETOOLONG for a name over KV_NAME_MAX. The root's name is "". A
 * page not in RAM is looked for in its layer (loaded first; by inode, the
 * manifest names the layer once the load is over): -EAGAIN if the layer
 * kept going back to the manifest, or the load's error. */
int kv_index_get(struct kv_index *x, uint64_t ino, struct kv_node_info *out);
int kv_index_lookup(struct kv_index *x, uint64_t parent, const char *name,
		    struct kv_node_info *out);
/* Layer number num of a model, under whichever of its names ("7", "007"):
 * a few lookups, however many layers the model has. 0, -ENOENT, or
 * -ENOTDIR if model is not a model. */
int kv_index_layer_find(struct kv_index *x, uint64_t model, uint32_t num,
			struct kv_node_info *out);

/* Which fields kv_index_update copies from n. */
enum {
	KV_UPD_ATTR  = 1u << 0,   /* attr (mode, uid, gid, times) */
	KV_UPD_SIZE  = 1u << 1,
	KV_UPD_STATE = 1u << 2,
	KV_UPD_DATA  = 1u << 3,   /* extent_id (ext, hash: its extent's) */
	KV_UPD_GEO   = 1u << 4,
	KV_UPD_ATIME = 1u << 5,   /* attr.atime_ns only */
};
/*
 * Copy the selected fields of n into node ino (DATA: extent_id, which must
 * name an extent in the table, else -ENOENT). -ENOENT if absent, -EISDIR
 * for SIZE/STATE/DATA on a directory, -EINVAL for GEO on anything but a
 * model or for unknown bits; nothing is changed on error. KV_UPD_ATIME alone
 * takes only the read lock (cheap enough for every read). Anything else on
 * a page whose layer went back to the manifest loads the layer first (as
 * kv_index_add): a change made to a page leaving RAM would be lost.
 */
int kv_index_update(struct kv_index *x, uint64_t ino,
		    const struct kv_node_info *n, unsigned fields);

/*
 * Mark page ino KV_PAGE_DURABLE if it still names extent_id (the row the
 * committer made durable is still its data): 0, or -ENOENT (nothing
 * changed) if it is gone or names another extent now. The committer's
 * per-page call: no snapshot copied in or out.
 */
int kv_index_page_durable(struct kv_index *x, uint64_t ino, uint64_t extent_id);

/*
 * Remove a node. -ENOTEMPTY for a directory with children (in RAM or
 * still in the manifest), -EBUSY for the root. A page in a layer not all
 * in RAM loads it first (as kv_index_add), since the layer's load would
 * bring the page back. A page's extent refcount is the caller's to drop
 * (kv_index_extent_ref).
 */
int kv_index_remove(struct kv_index *x, uint64_t ino);

/*
 * Move ino to (new_parent, new_name). If that name is taken by another
 * node: without replace, -EEXIST; with replace, the other node is removed
 * and its inode returned in *replaced, following rename(2): a page may
 * replace a page (a directory there gives -EISDIR), a directory may replace
 * an empty directory (-ENOTEMPTY otherwise, -ENOTDIR if a page is there).
 * The replaced page's extent refcount is the caller's to drop. *replaced
 * (may be NULL) is 0 when nothing was replaced. Moving onto itself succeeds
 * and does nothing. The node must fit its new parent like kv_index_add:
 * -ENOTDIR if new_parent is a page, -EINVAL if it is a directory of the
 * wrong level; -EBUSY for the root. A moved layer takes the number its new
 * name spells (-EINVAL if none, -EEXIST if the model has it already).
 * Out of or into a layer not all in RAM: it is loaded first (as
 * kv_index_add).
 */
int kv_index_move(struct kv_index *x, uint64_t ino, uint64_t new_parent,
		  const char *new_name, int replace, uint64_t *replaced);

/*
 * Snapshot the children of a directory, oldest first: *out is an array of *n
 * entries whose names live in the same allocation; free it with
 * kv_dirents_free (never free the names). *out is NULL when *n is 0.
 * -ENOTDIR for a page, -ENOENT if dir does not exist.
 */
int kv_index_readdir(struct kv_index *x, uint64_t dir, struct kv_dirent **out,
		     size_t *n);
void kv_dirents_free(struct kv_dirent *d, size_t n);

/* ---- extents ---- */
/* Insert or replace extent r->id. -EINVAL for id 0, length 0, an offset not
 * KV_ALIGN-aligned or refcount 0. A new extent is not durable (not offered
 * as a dedup candidate) until kv_index_extent_durable; loaded ones are. */
int kv_index_extent_put(struct kv_index *x, const struct kv_extent_rec *r);
int kv_index_extent_get(struct kv_index *x, uint64_t id, struct kv_extent_rec *out);
/* Dedup candidates: up to max durable extents with this hash and payload
 * length, into out; returns how many. Equal hashes are not equal bytes:
 * the caller compares. While the index loads in the background, only
 * extents made since the load began: the load checks the others'
 * refcounts against the manifest. */
int kv_index_extent_candidates(struct kv_index *x, const uint8_t hash[KV_HASH_LEN],
			       uint64_t length, struct kv_extent_rec *out, int max);
/* The extent's payload and manifest row are durable: it may be shared. */
int kv_index_extent_durable(struct kv_index *x, uint64_t id);
/*
 * Add delta to an extent's refcount and return the new count in *count
 * (may be NULL). When it reaches 0 the extent is dropped from the table (the
 * caller frees its space once the manifest no longer refers to it). -ENOENT
 * if absent; -EINVAL (logged, nothing changed) if the count would go below 0.
 * From kv_index_load_begin until kv_index_retired_drop, an extent the
 * manifest held when the load began is retired at 0 instead: no call
 * finds it, but kv_index_extent_walk still shows it (with refcount 0).
 */
int kv_index_extent_ref(struct kv_index *x, uint64_t id, int delta,
			uint32_t *count);

struct kv_index_stats {
	uint64_t models, layers, pages;
	uint64_t page_bytes;       /* sum of page sizes (logical) */
	uint64_t extents;
	uint64_t extent_bytes;     /* sum of extent footprints (physical) */
	/* Of pages: those counted while their layer stays in the manifest
	 * (kv_index_set_page_budget); layers whose pages are not loaded; of
	 * extents: those whose records left RAM (kv_index_extents_trim). */
	uint64_t pages_unloaded, layers_unloaded, extents_unloaded;
	uint64_t empty_pages;      /* of pages: those of size 0 */
};
void kv_index_stats(struct kv_index *x, struct kv_index_stats *st);
/* Pages of size 0, loaded or not, without the lock: the store charges each
 * one block of its capacity (a name alone costs manifest rows and RAM). */
uint64_t kv_index_empty_pages(struct kv_index *x);

/*
 * Visit every extent, in no particular order (for recovery:
 * kv_store_mark_used), retired ones too (refcount 0): their removal may
 * not be durable yet when the store's reclaim runs. Stops on non-zero and
 * returns it. fn runs under the index's read lock: it must not call back
 * into the index.
 */
int kv_index_extent_walk(struct kv_index *x,
			 int (*fn)(void *arg, const struct kv_extent_rec *r),
			 void *arg);
/* Forget the retired extents (see kv_index_extent_ref), once the reclaim
 * has marked them (their space comes back through kv_extent_free), and
 * retire none from now on. */
void kv_index_retired_drop(struct kv_index *x);

/* What kv_index_page_walk shows of a page. */
struct kv_page_brief {
	uint64_t ino;
	uint64_t parent;
	uint64_t extent_id;
	uint64_t size;
	int64_t atime_ns;
	uint32_t mode;            /* permission bits (S_ISVTX: pinned) */
	enum kv_page_state state;
};
/*
 * Visit every page, in no particular order (eviction picks its victims),
 * but those in a layer the background load has not made whole (they
 * cannot be removed yet: kv_index_remove). Stops on non-zero and
 * returns it. fn runs under the index's read lock: it must not call back
 * into the index. The lock is taken for a few thousand pages at a time,
 * so the index changes during a walk: every page there from its start to
 * its end is visited, some of them twice; one added meanwhile may be
 * missed.
 */
int kv_index_page_walk(struct kv_index *x,
		       int (*fn)(void *arg, const struct kv_page_brief *p),
		       void *arg);

/*
 * Visit the pages whose access time a read moved (KV_UPD_ATIME alone)
 * since the last call, each at least once, with their current times: the
 * access-time flush's work is the pages read, not every page. It visits
 * every page, as kv_index_page_walk, when all is set (the caller lost what
 * an earlier walk gave it), when more pages were read than the list holds
 * (about 1M), or after an earlier walk stopped on fn's non-zero, which it
 * returns. Pages changed otherwise (new, written, set by utimensat) are not
 * listed: their rows are written by the change itself. A listed page not
 * yet durable stays listed for the next walk. Locking as in
 * kv_index_page_walk.
 */
int kv_index_touched_walk(struct kv_index *x, bool all,
			  int (*fn)(void *arg, const struct kv_page_brief *p),
			  void *arg);

/*
 * Fill an empty index from the manifest: models, layers, extents, pages
 * (pages come up KV_PAGE_DURABLE). A row that refers to a missing parent or
 * extent, or a refcount that disagrees with the pages referring to the
 * extent, gives KV_ERR_CORRUPT with a log line naming the row. -EINVAL if
 * the index is not empty. On failure the index is partly filled: free it.
 * The write lock is held throughout.
 */
int kv_index_load(struct kv_index *x, struct kv_manifest *m);

/*
 * Loading in the background, for a mount that answers at once.
 * kv_index_load_begin fills an empty index with the models and layers (and
 * numbers new inodes and extent ids above every row); the pages and extents
 * follow through kv_index_load_step, a chunk of rows per call, while the
 * index serves. A lookup or listing in a layer whose pages are not all in
 * yet loads that layer first, so every answer is the one a whole index
 * gives. The loader reads m (a connection of its own, which it holds in one
 * read snapshot) until kv_index_load_end; the caller closes m after that.
 *
 * Until kv_index_load_step has returned 0, the refcount check at the end
 * counts the pages the walk finds: new pages share no extent the manifest
 * held (kv_index_extent_candidates), and a page removed or moved must be in
 * a layer loaded whole (kv_index_remove, kv_index_move load it first).
 * A page reached by inode alone (kv_index_get) is found once the walk is
 * over through the manifest, which names its layer (a layer that went
 * back to the manifest: index/unload.c); during the walk, inodes come from
 * lookups and listings, which load their layer.
 */
struct kv_index_loader;
/* Whether ino's pages are all in the index: false only for a layer still
 * waiting for the background load (its nchildren is not known yet). */
bool kv_index_layer_whole(struct kv_index *x, uint64_t ino);
/* Whether every page of layer `layer` is size bytes (a page still being
 * written: at most that): 0, -ENOTEMPTY if one is not, -EAGAIN if some
 * are only in the manifest (not loaded yet, or gone back), -ENOENT. One
 * walk of the layer's pages under the read lock. */
int kv_index_layer_sizes(struct kv_index *x, uint64_t layer, uint64_t size);
/* Load layer ino's pages now if the background load has not yet: 0 once
 * they are in (or ino is no layer), or the error their load gave. Call
 * holding none of the caller's locks: it may read the manifest. */
int kv_index_layer_load(struct kv_index *x, uint64_t ino);
int kv_index_load_begin(struct kv_index *x, struct kv_manifest *m,
			struct kv_index_loader **out);
/*
 * The most pages the background walk loads (0, the default: all); call
 * before kv_index_load_begin. The walk loads layers whole, the most
 * recently changed first, while their pages fit; the rest stay in the
 * manifest, after the walk too, and load as the layers the walk has not
 * reached do: when a lookup, listing or change needs them, or
 * kv_index_layer_load. Their rows are still checked and counted by the
 * walk. kv_index_load (all at once) loads everything.
 */
void kv_index_set_page_budget(struct kv_index *x, uint64_t pages);
/*
 * After the load and the reclaim: the records of extents that only pages
 * of layers left in the manifest name leave RAM (their layer's load reads
 * them back with its pages), when the manifest's row says what the record
 * says (committed, its count unchanged since). Nothing to do without such
 * layers. Copies the survivors in steps under the read lock, each well
 * under a millisecond, and holds the write lock only to swap them in
 * (index/trim.c). *dropped: how many left. 0, or -ENOMEM (no memory for
 * the copy or for noting the changes made meanwhile) or -EAGAIN (more
 * than 4 million changes noted meanwhile): nothing changed.
 */
int kv_index_extents_trim(struct kv_index *x, uint64_t *dropped);
/* The layer left in the manifest (by the budget, or gone back) whose
 * pages include the least recently used, for an eviction: 1, *ino and
 * that page's access time (INT64_MIN where it is not known: load it
 * first), or 0 if none (layers with no rows counted yet are left out).
 * Pages in RAM used since that time are newer than some page of the
 * layer. */
int kv_index_deferred_layer(struct kv_index *x, uint64_t *ino, int64_t *oldest_atime);
/*
 * Layers back to the manifest, so that the page budget bounds the pages
 * in RAM after the load too (index/unload.c): a layer whose pages are all
 * committed, none being written, and unused for `idle` ticks of the
 * caller's clock goes whole, and its next use loads it again, as one the
 * walk left there. Changes keep working meanwhile: a lookup, listing or
 * change in a layer gone back loads it first, and a page asked for by
 * inode alone is found through the manifest. Its extents' records stay
 * until kv_index_extents_trim.
 *
 * kv_index_layer_queued: the caller queued a manifest change for node n
 * (its layer: a page's parent, or a layer itself) as number seq of its
 * commit order, under the lock it makes and queues its changes under (the
 * number only grows: UINT64_MAX keeps the layer in RAM for the mount, for
 * a change the manifest refused).
 * kv_index_unload_tick moves the clock on by one. kv_index_unload_pick:
 * 1 and *ino, the least recently used layer that may go (as below), when
 * more pages are in RAM than the budget; else 0. kv_index_unload_begin marks layer
 * ino not loaded, if it may go and every change queued for it is in
 * committed (the caller's seq up to which all is committed): 0, -EBUSY
 * (not now) or -ENOENT. Call holding the caller's lock for changes (no
 * change half made), then kv_index_unload_finish without it: the pages
 * leave RAM a step at a time, *pages of them (a page whose access time is
 * to be saved stays). 0, or -ESHUTDOWN after kv_index_load_close (the
 * layer stays).
 */
void kv_index_layer_queued(struct kv_index *x, const struct kv_node_info *n, uint64_t seq);
void kv_index_unload_tick(struct kv_index *x);
int kv_index_unload_pick(struct kv_index *x, unsigned idle, uint64_t committed,
			 uint64_t *ino);
int kv_index_unload_begin(struct kv_index *x, uint64_t ino, uint64_t committed,
			  unsigned idle);
int kv_index_unload_finish(struct kv_index *x, uint64_t ino, uint64_t *pages);
/* One chunk: 1 while rows remain, 0 once every row is in and every
 * refcount agrees, KV_ERR_CORRUPT (logged, naming the row) or -errno. */
int kv_index_load_step(struct kv_index_loader *l);
/* Stop reading m in the walk's snapshot, at any time, also while lookups
 * run. If the walk was over (kv_index_load_step returned 0), layers it left
 * in the manifest still load on demand, each in a read of its own, until
 * kv_index_load_close; otherwise a layer not loaded by then gives -EIO
 * from then on (never a wrong -ENOENT). */
void kv_index_load_end(struct kv_index_loader *l);
/* Run fn on m while no layer loads through it (a connection is used by
 * one thread at a time, and layers the budget left out load on demand
 * after kv_index_load_end): fn's result. */
int kv_index_loader_use(struct kv_index_loader *l,
			int (*fn)(struct kv_manifest *m, void *arg), void *arg);
/* No layer loads any more (-EIO): before m is closed. The index frees the
 * loader; the caller closes m after this. */
void kv_index_load_close(struct kv_index_loader *l);

#endif
