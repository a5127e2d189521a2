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
 * deferred layers name leave RAM (kv_index_extents_trim, trim.c) and come
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
		struct layer_pages *v = kv_array_room(c->v, c->n, &c->cap, sizeof(*v), 64);

		if (!v)
			return -ENOMEM;
		c->v = v;
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
	if (c.n)      /* no layer has a page: c.v is NULL, which qsort may not take */
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
	idx_rows_atime(layer->u.d, r->attr.atime_ns);
	layer->u.d->rows++;
	layer->u.d->row_bytes += r->size;
	layer->u.d->empty_rows += !r->size;
	idx_empty_add(x, !r->size);
	x->st.pages++;
	x->st.page_bytes += r->size;
	x->st.pages_unloaded++;
	return 0;
}

void idx_deferred_loading_locked(struct kv_index *x, struct node *n, struct idx_rows *out)
{
	struct dir_data *d;

	*out = (struct idx_rows){ 0 };
	if (!n || n->kind != KV_KIND_LAYER)
		return;
	d = n->u.d;
	*out = (struct idx_rows){ .rows = d->rows, .bytes = d->row_bytes,
				  .empty = d->empty_rows };
	x->st.pages -= d->rows;
	x->st.page_bytes -= d->row_bytes;
	x->st.pages_unloaded -= d->rows;
	idx_empty_add(x, -(int64_t)d->empty_rows);
	d->rows = d->row_bytes = d->empty_rows = 0;
}

void idx_deferred_back_locked(struct kv_index *x, struct node *n,
			      const struct idx_rows *back)
{
	if (!n || n->kind != KV_KIND_LAYER)
		return;
	/* their access times are not known here: as old as can be, so that
	 * an eviction loads this layer before it takes a page in RAM */
	idx_rows_atime(n->u.d, INT64_MIN);
	n->u.d->rows += back->rows;
	n->u.d->row_bytes += back->bytes;
	n->u.d->empty_rows += back->empty;
	x->st.pages += back->rows;
	x->st.page_bytes += back->bytes;
	x->st.pages_unloaded += back->rows;
	idx_empty_add(x, (int64_t)back->empty);
}

void kv_index_set_page_budget(struct kv_index *x, uint64_t pages)
{
	pthread_rwlock_wrlock(&x->lock);
	x->page_budget = pages;
	pthread_rwlock_unlock(&x->lock);
}

int kv_index_deferred_layer(struct kv_index *x, uint64_t *ino, int64_t *oldest_atime)
{
	struct node *model, *layer, *best = NULL;

	pthread_rwlock_rdlock(&x->lock);
	for (model = x->root->u.d->first; model; model = idx_next(x, model))
		for (layer = model->u.d->first; layer; layer = idx_next(x, layer)) {
			const struct dir_data *d = layer->u.d;

			/* No rows counted: nothing to evict there yet (a layer
			 * the walk has not reached, or one on its way out) */
			if (!d->deferred || !d->unloaded || d->load_err || !d->rows)
				continue;
			if (!best || d->rows_oldest_atime < best->u.d->rows_oldest_atime)
				best = layer;
		}
	if (best) {
		*ino = best->ino;
		*oldest_atime = best->u.d->rows_oldest_atime;
	}
	pthread_rwlock_unlock(&x->lock);
	return best != NULL;
}

int idx_layer_unloaded_locked(struct kv_index *x, uint64_t parent)
{
	const struct node *l;

	if (!atomic_load(&x->layers_unloaded))
		return 0;
	l = idx_node(x, parent);
	/* Loading here would read the manifest under the index's lock: the
	 * caller loads it without (idx_change_retry) and tries again. */
	return l && l->kind == KV_KIND_LAYER && l->u.d->unloaded ? -EAGAIN : 0;
}

bool idx_node_unloaded_locked(const struct kv_index *x, const struct node *n)
{
	if (!atomic_load(&x->layers_unloaded))
		return false;
	if (n->kind == KV_KIND_PAGE)
		n = n->parent;
	return n->kind == KV_KIND_LAYER && n->u.d->unloaded;
}
