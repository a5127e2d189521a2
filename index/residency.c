/*
 * Which layers the background load leaves in the manifest.
 *
 * A page in the index costs about 170 bytes of RAM (docs/operators.md), so
 * a store of 10^8 pages would need 17 GB to be loaded whole. With a page
 * budget (kv_index_set_page_budget, the mount's -o index_pages), the walk
 * loads layers whole, the most recently changed first, while their pages
 * fit; the other layers are "deferred": they stay in the manifest, looking
 * like the layers the walk has not reached yet, and are loaded the first
 * time a lookup, listing, change or eviction needs them (load.c). A layer
 * is the unit because the index answers for a layer only once it holds all
 * of its pages (a missing name must be a true ENOENT).
 *
 * The walk still reads a deferred layer's rows: each is checked against
 * its extent and counted in the extent's pages, so the refcount check at
 * the end of the load covers the whole manifest, and in the stats, so that
 * statfs and the metrics count every page. Extents stay in RAM through
 * the load, for the reclaim after it to mark them all; then those only
 * deferred layers name leave RAM (kv_index_extents_trim, below) and come
 * back with their layer's load.
 *
 * Nothing changes a deferred layer's rows while it is deferred (a change
 * in a layer not loaded waits for its load: load.c), so the layer can be
 * read after the walk's snapshot is gone and still agree with the index.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "index_i.h"

struct layer_pages {
	uint64_t ino, pages;
	int64_t mtime_ns;
};

struct counts {
	struct layer_pages *v;
	size_t n, cap;
};

static int count_layer(void *arg, uint64_t ino, uint64_t pages)
{
	struct counts *c = arg;

	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 64;
		struct layer_pages *v = realloc(c->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		c->v = v;
		c->cap = cap;
	}
	c->v[c->n++] = (struct layer_pages){ .ino = ino, .pages = pages };
	return 0;
}

/* Most recently changed first; then the newer layer (higher inode). */
static int newest_first(const void *pa, const void *pb)
{
	const struct layer_pages *a = pa, *b = pb;

	if (a->mtime_ns != b->mtime_ns)
		return a->mtime_ns > b->mtime_ns ? -1 : 1;
	return a->ino > b->ino ? -1 : a->ino < b->ino;
}

int idx_defer_layers(struct kv_index *x, struct kv_manifest *m, uint64_t *deferred)
{
	struct counts c = { 0 };
	uint64_t loaded = 0, budget, layers = 0;
	struct node *n;
	size_t i;
	int rc;

	*deferred = 0;
	pthread_rwlock_rdlock(&x->lock);
	budget = x->page_budget;
	pthread_rwlock_unlock(&x->lock);
	if (!budget)
		return 0;
	/* Read from an index of the pages table: not under the lock. */
	rc = kv_manifest_layer_pages(m, count_layer, &c);
	if (rc < 0) {
		free(c.v);
		return rc;
	}
	pthread_rwlock_wrlock(&x->lock);
	for (i = 0; i < c.n; i++) {
		n = idx_node(x, c.v[i].ino);
		c.v[i].mtime_ns = n ? n->mtime_ns : INT64_MIN;
	}
	qsort(c.v, c.n, sizeof(*c.v), newest_first);
	for (i = 0; i < c.n; i++) {
		n = idx_node(x, c.v[i].ino);
		/* A row naming no layer: the walk reports it. A layer loaded
		 * already (wanted before the walk began) stays loaded. */
		if (!n || n->kind != KV_KIND_LAYER || !n->u.d->unloaded)
			continue;
		if (loaded + c.v[i].pages <= budget) {
			loaded += c.v[i].pages;
			continue;
		}
		n->u.d->deferred = true;
		*deferred += c.v[i].pages;
		layers++;
	}
	pthread_rwlock_unlock(&x->lock);
	free(c.v);
	if (layers)
		kv_log(KV_LOG_INFO, "index: %" PRIu64 " layers of %" PRIu64 " pages stay in the "
		       "manifest until used: the walk loads %" PRIu64 " pages (index_pages=%"
		       PRIu64 ")", layers, *deferred, loaded, budget);
	return 0;
}

int idx_row_extent_check(const struct kv_page_rec *r, const struct xent *e)
{
	if (e && !e->retired && idx_xent_length(e) == r->size)
		return 0;
	kv_log(KV_LOG_ERR, "manifest: page %" PRIu64 " '%s': extent %" PRIu64 " %s",
	       r->ino, r->name, r->extent_id,
	       !e ? "is missing" : e->retired ? "has no pages left by its refcount "
	       "(the pages it counted were removed since the mount)"
	       : "has a different length than the page");
	return KV_ERR_CORRUPT;
}

int idx_deferred_row_locked(struct kv_index *x, struct node *layer,
			    const struct kv_page_rec *r)
{
	struct xent *e;
	int rc;

	if (r->extent_id != KV_EXTENT_EMPTY || r->size != 0) {
		e = idx_xent_find(x, r->extent_id);
		rc = idx_row_extent_check(r, e);
		if (rc)
			return rc;
		e->seen++;
	}
	layer->u.d->rows++;
	layer->u.d->row_bytes += r->size;
	x->st.pages++;
	x->st.page_bytes += r->size;
	x->st.pages_unloaded++;
	return 0;
}

void idx_deferred_loading_locked(struct kv_index *x, struct node *n, uint64_t *rows,
				 uint64_t *bytes)
{
	struct dir_data *d;

	*rows = *bytes = 0;
	if (!n || n->kind != KV_KIND_LAYER)
		return;
	d = n->u.d;
	*rows = d->rows;
	*bytes = d->row_bytes;
	x->st.pages -= d->rows;
	x->st.page_bytes -= d->row_bytes;
	x->st.pages_unloaded -= d->rows;
	d->rows = d->row_bytes = 0;
}

void idx_deferred_back_locked(struct kv_index *x, struct node *n, uint64_t rows,
			      uint64_t bytes)
{
	if (!n || n->kind != KV_KIND_LAYER)
		return;
	n->u.d->rows += rows;
	n->u.d->row_bytes += bytes;
	x->st.pages += rows;
	x->st.page_bytes += bytes;
	x->st.pages_unloaded += rows;
}

void kv_index_set_page_budget(struct kv_index *x, uint64_t pages)
{
	pthread_rwlock_wrlock(&x->lock);
	x->page_budget = pages;
	pthread_rwlock_unlock(&x->lock);
}

int kv_index_deferred_layer(struct kv_index *x, uint64_t *ino)
{
	struct node *model, *layer, *best = NULL;

	pthread_rwlock_rdlock(&x->lock);
	for (model = x->root->u.d->first; model; model = idx_next(x, model))
		for (layer = model->u.d->first; layer; layer = idx_next(x, layer)) {
			const struct dir_data *d = layer->u.d;

			if (!d->deferred || !d->unloaded || d->load_err)
				continue;
			if (!best || layer->mtime_ns < best->mtime_ns)
				best = layer;
		}
	if (best)
		*ino = best->ino;
	pthread_rwlock_unlock(&x->lock);
	return best != NULL;
}

/* ---- extents of the layers left out ---- */

static void keep_clear(struct kv_index *x)
{
	struct xent *e;

	for (size_t i = 0; i < htab_span(&x->ext_by_id); i++)
		if ((e = htab_at(&x->ext_by_id, i)))
			e->keep = 0;
}

/* Whether e may leave RAM: no page in RAM names it, and the manifest's
 * row says what the record says (committed, its count unchanged since it
 * was read or put: a change still queued for the committer would make a
 * later read of the row wrong). */
static bool may_leave(const struct xent *e)
{
	return !e->keep && !e->moved && e->durable && !e->retired;
}

#define SWAP(a, b) do { __typeof__(a) t_ = (a); (a) = (b); (b) = t_; } while (0)

static double ms_between(const struct timespec *a, const struct timespec *b)
{
	return (double)(b->tv_sec - a->tv_sec) * 1e3 + (double)(b->tv_nsec - a->tv_nsec) / 1e6;
}

/* One pass: the survivors into new tables over a new slab (ns); the
 * others counted in *gone. -ENOMEM if a copy fails (nothing changed). */
static int copy_survivors(struct kv_index *x, struct htab *by_id, struct htab *by_key,
			  struct slab *ns, uint64_t *kept, uint64_t *gone)
{
	struct xent *e, *c;

	for (size_t i = 0; i < htab_span(&x->ext_by_id); i++) {
		e = htab_at(&x->ext_by_id, i);
		if (!e)
			continue;
		if (may_leave(e)) {
			(*gone)++;
			continue;
		}
		if (htab_reserve(by_id, 1) || htab_reserve(by_key, 1) ||
		    !(c = slab_alloc(ns, sizeof(*c))))
			return -ENOMEM;
		*c = *e;
		c->keep = 0;
		htab_insert(by_id, c);
		if (!c->retired)        /* a retired one is out of the key table */
			htab_insert(by_key, c);
		(*kept)++;
	}
	return 0;
}

int kv_index_extents_trim(struct kv_index *x, uint64_t *dropped)
{
	struct htab by_id = { 0 }, by_key = { 0 };
	struct slab ns = { 0 };
	uint64_t kept = 0, gone = 0;
	struct timespec t0, tu, t1;
	struct xent *e;
	struct node *n;
	int rc = 0;

	*dropped = 0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pthread_rwlock_wrlock(&x->lock);
	/* Only once the reclaim has marked every extent (no retired list
	 * left), and only if some layer stays out. */
	if (x->extents_trimmed || x->nretired || x->retire_below ||
	    !atomic_load_explicit(&x->layers_unloaded, memory_order_relaxed))
		goto out;
	for (size_t i = 0; i < htab_span(&x->by_ino); i++) {
		n = htab_at(&x->by_ino, i);
		if (n && n->kind == KV_KIND_PAGE && n->u.p.extent_id &&
		    (e = idx_xent_find(x, n->u.p.extent_id)))
			e->keep = 1;
	}
	/* The survivors move to a slab of their own, and the old one goes
	 * back to the system whole: freed records inside it would not. */
	rc = slab_init(&ns);
	if (rc == 0) {
		rc = -ENOMEM;
		/* sized at once for about as many as pages in RAM: growing
		 * row by row rehashes every survivor about twice */
		if (!htab_init(&by_id, x->ext_by_id.hash, ns.base) &&
		    !htab_init(&by_key, x->ext_by_key.hash, ns.base) &&
		    !htab_reserve(&by_id, x->by_ino.n) && !htab_reserve(&by_key, x->by_ino.n))
			rc = copy_survivors(x, &by_id, &by_key, &ns, &kept, &gone);
	}
	if (rc < 0 || !gone) {
		keep_clear(x);
		goto out;
	}
	/* swap: the locals hold the old tables and slab from here */
	SWAP(x->ext_by_id, by_id);
	SWAP(x->ext_by_key, by_key);
	SWAP(x->xslab, ns);
	x->st.extents -= gone;
	x->st.extents_unloaded += gone;
	x->extents_trimmed = true;
	*dropped = gone;
out:
	pthread_rwlock_unlock(&x->lock);
	clock_gettime(CLOCK_MONOTONIC, &tu);
	/* The old ones after a swap, else the unused new ones: unmapping
	 * takes a while, not under the lock. */
	htab_fini(&by_id);
	htab_fini(&by_key);
	slab_fini(&ns);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (gone || rc)
		kv_log(rc ? KV_LOG_WARN : KV_LOG_INFO, "index: %" PRIu64 " extents named only by "
		       "layers left in the manifest %s (%" PRIu64 " stay) in %.0f ms, %.0f of "
		       "them holding the index's lock%s%s", gone,
		       rc ? "could not leave RAM" : "left RAM", kept, ms_between(&t0, &t1),
		       ms_between(&t0, &tu), rc ? ": " : "", rc ? kv_strerror(rc) : "");
	return rc;
}

void idx_extent_reread_locked(struct kv_index *x, const struct xent *e)
{
	struct kv_extent ext = idx_xent_ext(e);

	/* Counted already, as an extent out of RAM: put counted it again. */
	x->st.extents_unloaded--;
	x->st.extent_bytes -= kv_extent_footprint(&ext);
}
