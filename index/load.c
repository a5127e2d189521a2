/*
 * Filling an empty index from the manifest at mount, validating every
 * reference on the way: a page's layer and extent must exist and every
 * extent's refcount must equal the pages naming it (KV_ERR_CORRUPT if not).
 */
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "index_i.h"
#include "load_i.h"

/* ---- loading from the manifest ---- */

/* Turn an add failure for a manifest row into KV_ERR_CORRUPT, logged. */
static int load_fail(int rc, const char *what, uint64_t key, const char *name,
		     uint64_t parent)
{
	const char *why;

	switch (rc) {
	case -ENOMEM:
		return rc;
	case -EEXIST:
		why = "its inode, name or layer number is already taken";
		break;
	case -ENOENT:
		why = "its parent is missing";
		break;
	case -ENOTDIR:
		why = "its parent is of the wrong kind";
		break;
	default:
		why = kv_strerror(rc);
		break;
	}
	kv_log(KV_LOG_ERR, "manifest: %s %" PRIu64 " '%s' (parent %" PRIu64 "): %s",
	       what, key, name, parent, why);
	return KV_ERR_CORRUPT;
}

static int load_model(void *arg, const struct kv_model_rec *r)
{
	struct kv_node_info n = { .ino = r->ino, .parent = KV_ROOT_INO,
				  .kind = KV_KIND_MODEL, .attr = r->attr, .geo = r->geo };
	int rc;

	memcpy(n.name, r->name, sizeof(n.name));
	rc = idx_add_locked(arg, &n);
	return rc ? load_fail(rc, "model", r->ino, r->name, KV_ROOT_INO) : 0;
}

static int load_layer(void *arg, const struct kv_layer_rec *r)
{
	struct kv_node_info n = { .ino = r->ino, .parent = r->model_ino,
				  .kind = KV_KIND_LAYER, .attr = r->attr, .layer = r->layer };
	int rc;

	memcpy(n.name, r->name, sizeof(n.name));
	rc = idx_add_locked(arg, &n);
	return rc ? load_fail(rc, "layer", r->ino, r->name, r->model_ino) : 0;
}

static int load_extent(void *arg, const struct kv_extent_rec *r)
{
	struct xent *e;
	int rc;

	if (r->id == KV_EXTENT_EMPTY) {
		/* Empty pages need no extent in the index (nothing to place,
		 * read or free): the row only keeps the foreign key whole. */
		if (r->ext.length == 0)
			return 0;
		kv_log(KV_LOG_ERR, "manifest: extent 0 (empty pages) has length %" PRIu64,
		       r->ext.length);
		return KV_ERR_CORRUPT;
	}
	rc = idx_xent_put_locked(arg, r, &e);
	if (rc == 0)
		e->durable = true;
	if (rc == -ENOMEM)
		return rc;
	if (rc < 0) {
		kv_log(KV_LOG_ERR, "manifest: extent %" PRIu64 ": invalid (%s)", r->id,
		       kv_strerror(rc));
		return KV_ERR_CORRUPT;
	}
	return 0;
}

/* count: add the page to its extent's count of referring pages (unless
 * the walk counted its row already, or the load is over). */
static int load_page_counted(struct kv_index *x, const struct kv_page_rec *r, bool count)
{
	struct kv_node_info n = { .ino = r->ino, .parent = r->layer_ino,
				  .kind = KV_KIND_PAGE, .attr = r->attr,
				  .state = KV_PAGE_DURABLE, .size = r->size,
				  .extent_id = r->extent_id };
	struct xent *e = idx_xent_find(x, r->extent_id);
	int rc;

	if (r->extent_id == KV_EXTENT_EMPTY && r->size == 0) {
		kv_hash128(NULL, 0, n.hash);
		memcpy(n.name, r->name, sizeof(n.name));
		rc = idx_add_locked(x, &n);
		return rc ? load_fail(rc, "page", r->ino, r->name, r->layer_ino) : 0;
	}
	rc = idx_row_extent_check(r, e);
	if (rc)
		return rc;
	n.ext = idx_xent_ext(e);
	memcpy(n.hash, e->hash, KV_HASH_LEN);
	memcpy(n.name, r->name, sizeof(n.name));
	rc = idx_add_locked(x, &n);
	if (rc)
		return load_fail(rc, "page", r->ino, r->name, r->layer_ino);
	if (count)
		e->seen++;
	return 0;
}

static int load_page(void *arg, const struct kv_page_rec *r)
{
	return load_page_counted(arg, r, true);
}

/* Every extent's refcount must equal the pages found referring to it.
 * reset (write lock held): zero the counts for the index's later use. */
static int load_verify(struct kv_index *x, bool reset)
{
	struct xent *e;
	size_t i;
	int rc = 0;

	for (i = 0; i < htab_span(&x->ext_by_id); i++) {
		e = htab_at(&x->ext_by_id, i);
		if (!e || (x->frozen_below && e->id >= x->frozen_below))
			continue;    /* made since the load began: no row to check */
		if (rc == 0 && e->seen != e->refcount) {
			kv_log(KV_LOG_ERR, "manifest: extent %" PRIu64 " has refcount %" PRIu32
			       " but %" PRIu32 " pages refer to it", e->id, e->refcount, e->seen);
			rc = KV_ERR_CORRUPT;
		}
		if (reset)
			e->seen = 0;
	}
	return rc;
}

/* Size the tables once for what the manifest holds: growing them row by
 * row rehashes every entry about twice over. */
static int load_counts(void *arg, uint64_t nodes, uint64_t extents)
{
	struct kv_index *x = arg;
	int rc;

	if ((rc = htab_reserve(&x->by_ino, nodes)) ||
	    (rc = htab_reserve(&x->by_name, nodes)) ||
	    (rc = htab_reserve(&x->ext_by_id, extents)) ||
	    (rc = htab_reserve(&x->ext_by_key, extents)))
		return rc;
	return 0;
}

int kv_index_load(struct kv_index *x, struct kv_manifest *m)
{
	static const struct kv_manifest_visitor v = {
		.counts = load_counts, .model = load_model, .layer = load_layer,
		.extent = load_extent, .page = load_page, .sizes_checked = true,
	};
	int rc;

	pthread_rwlock_wrlock(&x->lock);
	if (x->by_ino.n != 1 || x->ext_by_id.n != 0) {
		kv_log(KV_LOG_ERR, "index: load into an index that is not empty");
		rc = -EINVAL;
		goto out;
	}
	/* Holding the write lock across the whole load: nobody can use a
	 * half-loaded index, and each row costs no lock round trip. */
	rc = kv_manifest_load(m, &v, x);
	if (rc == 0)
		rc = load_verify(x, true);
out:
	pthread_rwlock_unlock(&x->lock);
	return rc;
}

/* ---- loading in the background ---- */

/*
 * Rows are put in chunks under the write lock, read before it is taken
 * (read_put): a lookup waits at most one chunk's puts (a few ms) behind the
 * loader. One mutex lets one reader at a time use the loader's connection:
 * the background, or a call that needs a layer now. Loading a layer never
 * takes a row twice: a page whose inode is present was loaded already (by
 * that layer's own load, or by the background walk, which goes in inode
 * order).
 */
#define PUT_CHUNK 512u                    /* rows: about 5 ms of the lock */
#define WALK_CHUNKS 8u                    /* per step of the walk: mu held ~40 ms */

void idx_loader_free(struct kv_index_loader *l)
{
	if (!l)
		return;
	kv_manifest_scan_close(l->scan);
	idx_read_ahead_free(l->ra);
	idx_read_buf_free(l->buf);
	idx_read_buf_free(l->put);
	free(l->gone);
	pthread_mutex_destroy(&l->mu);
	pthread_cond_destroy(&l->cv);
	free(l);
}

static int lazy_model(void *arg, const struct kv_model_rec *r)
{
	return load_model(((struct kv_index_loader *)arg)->x, r);
}

/* A layer's pages stay in the manifest until someone needs them. */
static int lazy_layer_rec(void *arg, const struct kv_layer_rec *r)
{
	struct kv_index_loader *l = arg;
	struct node *n;
	int rc;

	rc = load_layer(l->x, r);
	if (rc)
		return rc;
	n = idx_node(l->x, r->ino);
	n->u.d->unloaded = true;
	atomic_fetch_add_explicit(&l->x->layers_unloaded, 1, memory_order_relaxed);
	return 0;
}

/* An extent a layer's load already took is not put again: its count of
 * referring pages (seen) must survive. */
static int lazy_extent(struct kv_index_loader *l, const struct kv_extent_rec *r)
{
	struct xent *e;
	int rc;

	if (r->id != KV_EXTENT_EMPTY && idx_xent_find(l->x, r->id))
		return 0;
	rc = load_extent(l->x, r);
	/* read back for a layer left in the manifest: counted already */
	if (rc == 0 && l->x->extents_trimmed && (e = idx_xent_find(l->x, r->id)))
		idx_extent_reread_locked(l->x, e);
	return rc;
}

/* The first position in l->gone not below ino (ngone: none). */
static size_t gone_find(const struct kv_index_loader *l, uint64_t ino)
{
	size_t lo = 0, hi = l->ngone;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (l->gone[mid] < ino)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < l->ngone && l->gone[lo] == ino ? lo : l->ngone;
}

static int lazy_page(struct kv_index_loader *l, const struct kv_page_rec *r)
{
	struct node *layer = idx_node(l->x, r->layer_ino), *n;
	bool count;

	if (!l->in_layer_load)
		l->walk_ino = r->ino;
	/* A layer loaded whole has every row of it in already, or moved
	 * elsewhere since (a rename while loading): this row is old news. So
	 * is a row of a layer removed since (whole, then emptied). */
	if (layer && layer->kind == KV_KIND_LAYER && !layer->u.d->unloaded)
		return 0;
	if (!layer && gone_find(l, r->layer_ino) < l->ngone)
		return 0;
	n = idx_node(l->x, r->ino);
	if (n && n->kind == KV_KIND_PAGE && n->parent->ino == r->layer_ino)
		return 0;    /* taken by the walk, or by a load of its layer that failed */
	/* The budget leaves this layer in the manifest: check and count. */
	if (!l->in_layer_load && layer && layer->kind == KV_KIND_LAYER && layer->u.d->deferred)
		return idx_deferred_row_locked(l->x, layer, r);
	/* The walk counts every row it passes; a layer's load, the rows the
	 * walk has not passed yet (after the walk: none, the check is over). */
	count = !l->in_layer_load || l->phase < PHASE_PAGES ||
		(l->phase == PHASE_PAGES && r->ino > l->walk_ino);
	return load_page_counted(l->x, r, count);
}

static int lazy_counts(void *arg, uint64_t nodes, uint64_t extents)
{
	struct kv_index_loader *l = arg;

	l->nodes = nodes;
	l->extents = extents;
	return 0;
}

/* Models, layers and counts; extent and page rows come through a buffer
 * (idx_read_v), and read_put hands them to lazy_extent and lazy_page. */
static const struct kv_manifest_visitor lazy_v = {
	.model = lazy_model, .layer = lazy_layer_rec, .counts = lazy_counts,
};

/*
 * Rows are read a chunk at a time without the index's lock, into l->buf,
 * then put under the write lock: the lock is held for the index's part
 * alone, not for SQLite's reads (two thirds of a layer's load, and a disk
 * read each where the manifest is not cached; a lookup elsewhere waited
 * 78-156 ms behind a chunk read under the lock, 4-14 ms now at 1M pages:
 * docs/decisions/scale.md). Reading first changes nothing, since only
 * the holder of l->mu reads or puts: the walk reads its snapshot, the same
 * rows whenever it reads them; a layer's load reads rows that nothing
 * changes while the layer is not loaded, and extent rows that nothing
 * changes while they are out of RAM (no page in RAM names them:
 * residency.c). An extent's row read while its record is in RAM may be
 * older than the record by the time it is put: the put uses the record
 * (lazy_extent), and should the trim have taken the record out in
 * between, the row is still right, since the trim takes only records
 * whose count never changed since they were read (trim.c, row_says_all:
 * `moved`); a page put before the trim's swap names its extent, which
 * the trim then keeps (idx_trim_note in child_link).
 */

/* A page's extent, offered with its row in a layer's load: put where the
 * index may lack it (a layer wanted before the walk read the extents, or
 * one whose extents left RAM after the load); otherwise the index holds
 * every extent a row may name, and a missing one is damage load_page
 * reports. */
static int layer_extent(struct kv_index_loader *l, const struct kv_extent_rec *r)
{
	if (l->phase > PHASE_EXTENTS && !l->x->extents_trimmed)
		return 0;
	return lazy_extent(l, r);
}

/* The rows of b into the index (write lock taken here): 0, or the first
 * put's error. */
static int put_chunk(struct kv_index_loader *l, const struct kv_read_buf *b)
{
	const struct kv_extent_rec *e;
	const struct kv_page_rec *p;
	uint64_t pages0, bytes0, empty0;
	int put = 0;

	pthread_rwlock_wrlock(&l->x->lock);
	/* A layer's rows leave its count (and the stats') with the first of
	 * its pages, in one hold of the lock: a count that read 0 meanwhile
	 * would let rmdir take a layer with pages for empty. */
	if (l->rows_to_pages) {
		idx_deferred_loading_locked(l->x, idx_node(l->x, l->rows_to_pages), &l->taken);
		l->rows_to_pages = 0;
	}
	/* only the puts below change the counts while the lock is held */
	pages0 = l->x->st.pages;
	bytes0 = l->x->st.page_bytes;
	empty0 = atomic_load_explicit(&l->x->empty_pages, memory_order_relaxed);
	for (unsigned i = 0; put == 0 && idx_read_row(b, i, &e, &p); i++) {
		if (e)
			put = l->in_layer_load ? layer_extent(l, e) : lazy_extent(l, e);
		if (put == 0 && p)
			put = lazy_page(l, p);
	}
	l->brought.rows += l->x->st.pages - pages0;
	l->brought.bytes += l->x->st.page_bytes - bytes0;
	l->brought.empty += atomic_load_explicit(&l->x->empty_pages, memory_order_relaxed) - empty0;
	pthread_rwlock_unlock(&l->x->lock);
	return put;
}

/*
 * Up to max chunks of scan s (opened with idx_read_v and l->buf), each
 * read while the one before it is put: by l->ra, on a thread of its own
 * (a layer's load, 0.8 s per 100,000 rows, is about as much reading as
 * putting). The read is waited for before anything else can use the
 * connection, and the last chunk read is put before this returns, so the
 * walk holds no rows between its steps. yield: stop early when a caller
 * wants a layer (the walk). 1 if rows remain, 0 at the end, or an error.
 */
static int read_put(struct kv_index_loader *l, struct kv_manifest_scan *s, unsigned max,
		    bool yield)
{
	int rc = idx_read_chunk(l->buf, s, PUT_CHUNK), next = 0, put;
	bool ahead;

	for (unsigned i = 1;; i++) {
		idx_read_buf_swap(l->buf, l->put);
		ahead = rc == 1 && i < max && !(yield && atomic_load(&l->wanted));
		if (ahead && l->ra)
			idx_read_ahead_ask(l->ra, s, l->buf);
		put = put_chunk(l, l->put);
		if (ahead && l->ra)
			next = idx_read_ahead_wait(l->ra);   /* before anything else reads */
		else if (ahead && !put)
			next = idx_read_chunk(l->buf, s, PUT_CHUNK);
		/* the rows put came before the one the read stopped at */
		if (put || !ahead)
			return put ? put : rc;
		rc = next;
	}
}

/* Layer ino's rows into the index, a chunk at a time. */
static int layer_rows_load(struct kv_index_loader *l, uint64_t ino)
{
	struct kv_manifest_scan *s;
	int rc;

	/* before anything can fail: layer_load_now reads them then */
	l->taken = l->brought = (struct idx_rows){ 0 };
	rc = kv_manifest_scan_open(l->m, KV_SCAN_PAGES, ino, &idx_read_v, l->buf, &s);
	if (rc)
		return rc;
	l->in_layer_load = true;
	l->rows_to_pages = ino;
	while ((rc = read_put(l, s, UINT_MAX, false)) == 1)
		;
	l->in_layer_load = false;
	kv_manifest_scan_close(s);
	return rc;
}

/* Mark a layer whole (write lock held). */
static void layer_loaded_locked(struct kv_index *x, struct node *n)
{
	/* used now: not sent back before whoever wanted it has looked (a
	 * layer of 1M pages takes seconds to load) */
	idx_layer_used(x, n);
	if (n && n->kind == KV_KIND_LAYER && n->u.d->unloaded) {
		n->u.d->unloaded = false;
		atomic_fetch_sub_explicit(&x->layers_unloaded, 1, memory_order_release);
	}
}

static int load_prepare(struct kv_index_loader *l);

/* Layer ino's pages, read lock taken here: 0 if they are all in (or ino
 * is no layer), 1 if they must be loaded, or the error their last load
 * gave (not tried again: a lookup in a damaged layer must not rescan it,
 * nor hold the walk back, every time; a load that ran out of memory
 * leaves no error, and is tried again). */
static int layer_state(struct kv_index *x, uint64_t ino)
{
	struct node *n;
	int rc = 0;

	pthread_rwlock_rdlock(&x->lock);
	n = idx_node(x, ino);
	idx_layer_used(x, n);      /* before it loads: not sent back meanwhile */
	if (n && n->kind == KV_KIND_LAYER && n->u.d->unloaded)
		rc = n->u.d->load_err ? n->u.d->load_err : 1;
	pthread_rwlock_unlock(&x->lock);
	return rc;
}

static int layer_load_now(struct kv_index_loader *l, uint64_t ino)
{
	static struct kv_log_limit limit;
	struct kv_index *x = l->x;
	struct node *n;
	int rc;

	if (l->phase == PHASE_COUNTS && (rc = load_prepare(l)) < 0)
		return rc;
	/* After the walk, outside its snapshot: the rows of a layer not
	 * loaded cannot have changed since (residency.c). */
	rc = layer_rows_load(l, ino);
	pthread_rwlock_wrlock(&x->lock);
	n = idx_node(x, ino);
	if (rc && l->taken.rows > l->brought.rows) {
		struct idx_rows back = {
			.rows = l->taken.rows - l->brought.rows,
			.bytes = l->taken.bytes > l->brought.bytes ? l->taken.bytes - l->brought.bytes : 0,
			.empty = l->taken.empty > l->brought.empty ? l->taken.empty - l->brought.empty : 0,
		};
		idx_deferred_back_locked(x, n, &back);
	}
	if (rc == 0)
		layer_loaded_locked(x, n);
	else if (n && rc != -ENOMEM)   /* out of memory: the next use tries again */
		n->u.d->load_err = rc;
	pthread_rwlock_unlock(&x->lock);
	if (rc)
		KV_LOG_LIMITED(&limit, KV_LOG_ERR, "index: cannot load the pages of layer %"
			       PRIu64 " from the manifest: %s; %s", ino, kv_strerror(rc),
			       rc == -ENOMEM ? "the next lookup or listing in it tries again"
			       : "its lookups and listing fail (EIO)");
	return rc;
}

bool kv_index_layer_whole(struct kv_index *x, uint64_t ino)
{
	return !atomic_load_explicit(&x->layers_unloaded, memory_order_acquire) ||
	       layer_state(x, ino) == 0;
}

int idx_layer_ready(struct kv_index *x, uint64_t ino)
{
	struct kv_index_loader *l;
	int rc;

	if (!atomic_load_explicit(&x->layers_unloaded, memory_order_acquire))
		return 0;
	if ((rc = layer_state(x, ino)) <= 0)
		return rc;
	l = x->loader;
	/* Ahead of the walk: it waits while anyone wants a layer (a mutex
	 * alone would let it take mu back chunk after chunk). */
	atomic_fetch_add(&l->wanted, 1);
	pthread_mutex_lock(&l->mu);
	rc = layer_state(x, ino);     /* loaded (or failed) while we waited? */
	if (rc == 1 && (l->closed || (l->ended && l->phase != PHASE_DONE))) {
		static struct kv_log_limit limit;

		/* closing, or the walk stopped before this layer: its pages
		 * cannot be known any more */
		rc = -EIO;
		KV_LOG_LIMITED(&limit, KV_LOG_ERR, "index: the pages of layer %" PRIu64
			       " cannot be loaded: the background load has stopped", ino);
	} else if (rc == 1) {
		rc = layer_load_now(l, ino);
	}
	if (atomic_fetch_sub(&l->wanted, 1) == 1)
		pthread_cond_broadcast(&l->cv);
	pthread_mutex_unlock(&l->mu);
	return rc;
}

int kv_index_layer_load(struct kv_index *x, uint64_t ino)
{
	return idx_layer_ready(x, ino);
}

int idx_removable_locked(struct kv_index *x, const struct node *n)
{
	struct kv_index_loader *l = x->loader;
	uint64_t *v;
	size_t i;

	/* A layer holding pages, loaded or still in the manifest, is not
	 * empty whatever its load would add: no need to wait for it. */
	if (n->kind != KV_KIND_PAGE && (n->u.d->nchildren || n->u.d->rows))
		return -ENOTEMPTY;
	if (idx_node_unloaded_locked(x, n))
		return -EAGAIN;
	/* frozen_below: the walk may still read rows (load_finish ends it);
	 * a layer made since the mount has none */
	if (n->kind != KV_KIND_LAYER || !l || !x->frozen_below || n->ino >= l->ino_below)
		return 0;
	if (!(v = kv_array_room(l->gone, l->ngone, &l->gone_cap, sizeof(*v), 16)))
		return -ENOMEM;
	l->gone = v;
	for (i = l->ngone; i > 0 && l->gone[i - 1] > n->ino; i--)
		l->gone[i] = l->gone[i - 1];
	l->gone[i] = n->ino;
	l->ngone++;
	return 0;
}

int kv_index_load_begin(struct kv_index *x, struct kv_manifest *m,
			struct kv_index_loader **out)
{
	struct kv_index_loader *l = calloc(1, sizeof(*l));
	uint64_t max_ino = 0, max_ext = 0;
	int rc;

	*out = NULL;
	if (!l)
		return -ENOMEM;
	l->buf = idx_read_buf_new(PUT_CHUNK);
	l->put = idx_read_buf_new(PUT_CHUNK);
	if (!l->buf || !l->put) {
		idx_read_buf_free(l->buf);
		idx_read_buf_free(l->put);
		free(l);
		return -ENOMEM;
	}
	/* Without it, each chunk is read after the last one is put. */
	if ((rc = idx_read_ahead_new(&l->ra)) < 0)
		kv_log(KV_LOG_WARN, "index: no thread to read the manifest ahead (%s): "
		       "the load reads and puts in turn", kv_strerror(rc));
	l->x = x;
	l->m = m;
	pthread_mutex_init(&l->mu, NULL);
	pthread_cond_init(&l->cv, NULL);
	pthread_rwlock_wrlock(&x->lock);
	if (x->by_ino.n != 1 || x->ext_by_id.n != 0 || x->loader) {
		kv_log(KV_LOG_ERR, "index: load into an index that is not empty");
		rc = -EINVAL;
		goto out;
	}
	rc = kv_manifest_read_begin(m);
	if (rc == 0)
		rc = kv_manifest_load_tree(m, &lazy_v, l);
	if (rc == 0)
		rc = kv_manifest_max_ids(m, &max_ino, &max_ext);
	if (rc == 0) {
		/* Inodes and extent ids handed out now stay above every row. */
		if (max_ino >= x->next_ino)
			x->next_ino = max_ino + 1;
		if (max_ext >= x->next_ext)
			x->next_ext = max_ext + 1;
		x->frozen_below = x->retire_below = x->next_ext;
		l->ino_below = x->next_ino;
		x->loader = l;
	}
out:
	pthread_rwlock_unlock(&x->lock);
	if (rc) {
		kv_manifest_read_end(m);
		idx_loader_free(l);
		return rc;
	}
	*out = l;
	return 0;
}

/* The walk is over: every layer is whole, and every refcount is checked. */
static int load_finish(struct kv_index_loader *l)
{
	struct kv_index *x = l->x;
	struct node *model, *layer;
	int rc;

	/* Through the tree: a pass over every node would hold the write
	 * lock, and every lookup, for a while at 10^8 pages. */
	pthread_rwlock_wrlock(&x->lock);
	for (model = x->root->u.d->first; model; model = idx_next(x, model))
		for (layer = model->u.d->first; layer; layer = idx_next(x, layer))
			if (!layer->u.d->deferred)
				layer_loaded_locked(x, layer);
	pthread_rwlock_unlock(&x->lock);
	/* Nothing changes the counts now (no layer is loaded any more, and
	 * the new pages share no extent below frozen_below): lookups and new
	 * pages may go on meanwhile. */
	pthread_rwlock_rdlock(&x->lock);
	rc = load_verify(x, false);
	pthread_rwlock_unlock(&x->lock);
	if (rc == 0) {
		pthread_rwlock_wrlock(&x->lock);
		x->frozen_below = 0;     /* every extent may be shared now */
		pthread_rwlock_unlock(&x->lock);
	}
	return rc;
}

/* The walk goes on to table t: 1 (rows to come), or why it cannot. */
static int walk_next(struct kv_index_loader *l, enum kv_scan_table t,
		     enum load_phase next)
{
	int rc = kv_manifest_scan_open(l->m, t, 0, &idx_read_v, l->buf, &l->scan);

	if (rc)
		return rc;
	l->phase = next;
	return 1;
}

/*
 * The first step, whoever takes mu first (the walk, or a layer wanted
 * before it started): read the file through, since a layer's rows lie all
 * over it and reading them at random from a cold disk takes several times
 * as long; size the tables; start the walk. 1, or why it cannot start.
 */
static int load_prepare(struct kv_index_loader *l)
{
	struct kv_index *x = l->x;
	int rc;

	uint64_t deferred = 0;

	kv_manifest_prefetch(l->m);
	/* Counting reads an index of every table: not under the lock. */
	rc = kv_manifest_load_counts(l->m, &lazy_v, l);
	if (rc == 0)
		rc = idx_defer_layers(x, l->m, &deferred);
	if (rc == 0) {
		pthread_rwlock_wrlock(&x->lock);
		rc = load_counts(x, l->nodes - (deferred < l->nodes ? deferred : l->nodes),
				 l->extents);
		pthread_rwlock_unlock(&x->lock);
	}
	return rc ? rc : walk_next(l, KV_SCAN_EXTENTS, PHASE_EXTENTS);
}

int kv_index_load_step(struct kv_index_loader *l)
{
	int rc = 1;

	pthread_mutex_lock(&l->mu);
	while (atomic_load(&l->wanted))
		pthread_cond_wait(&l->cv, &l->mu);
	switch (l->phase) {
	case PHASE_COUNTS:
		rc = load_prepare(l);
		break;
	case PHASE_EXTENTS:
	case PHASE_PAGES:
		rc = read_put(l, l->scan, WALK_CHUNKS, true);
		if (rc != 0)
			break;
		kv_manifest_scan_close(l->scan);
		l->scan = NULL;
		if (l->phase == PHASE_EXTENTS) {
			rc = walk_next(l, KV_SCAN_PAGES, PHASE_PAGES);
			break;
		}
		rc = load_finish(l);
		if (rc == 0)
			l->phase = PHASE_DONE;
		break;
	case PHASE_DONE:
		rc = 0;
		break;
	}
	pthread_mutex_unlock(&l->mu);
	return rc;
}

void kv_index_load_end(struct kv_index_loader *l)
{
	if (!l)
		return;
	pthread_mutex_lock(&l->mu);
	kv_manifest_scan_close(l->scan);
	l->scan = NULL;
	kv_manifest_read_end(l->m);
	l->ended = true;
	pthread_mutex_unlock(&l->mu);
}

int kv_index_loader_use(struct kv_index_loader *l,
			int (*fn)(struct kv_manifest *m, void *arg), void *arg)
{
	int rc;

	pthread_mutex_lock(&l->mu);
	rc = fn(l->m, arg);
	pthread_mutex_unlock(&l->mu);
	return rc;
}

void kv_index_load_close(struct kv_index_loader *l)
{
	if (!l)
		return;
	kv_index_load_end(l);
	pthread_mutex_lock(&l->mu);
	l->closed = true;
	pthread_mutex_unlock(&l->mu);
}
