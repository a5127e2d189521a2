/*
 * Layers going back to the manifest once the load is over, so that the
 * page budget (kv_index_set_page_budget) bounds the pages in RAM for the
 * life of the mount, not only at its start: a layer loaded on demand
 * (residency.c) stayed in RAM until the unmount, and a store read all
 * over grew to the whole index again.
 *
 * A layer goes back whole, as the walk leaves one (a missing name must be
 * a true ENOENT), and only when its rows say all its pages do:
 *
 *   - every manifest change queued for it has committed: the caller
 *     passes its commit order (kv_index_layer_queued, when it queues; the
 *     seq committed, to kv_index_unload_begin), and begins under the lock
 *     it makes and queues its changes under, so that none is half made;
 *   - none of its pages is being written (no row yet: dir_data.writing);
 *   - it has not been used for a while (the unload clock: the caller's
 *     ticks), so that a caller that loaded it before taking its own locks
 *     finds it still there in all but a stall of that long.
 *
 * kv_index_unload_begin marks it not loaded; kv_index_unload_finish then
 * takes its pages out a step at a time, holding the loader's mutex, so
 * that a lookup, listing or change in it meanwhile waits and loads it
 * again (load.c): the pages are the rows. Whatever happened in between,
 * the index stays one the load could have made:
 *
 *   - a lookup or listing that finds the layer not loaded under the lock
 *     loads it and looks again (index.c, listing.c);
 *   - a change to it (add, remove, move, a page's row updated) is refused
 *     under the lock and tries again once the layer is back
 *     (idx_change_retry): a change applied to a page about to leave would
 *     be lost with it, or come back as it was with the row;
 *   - a page asked for by inode alone (the kernel holds inodes) that is
 *     not in RAM is looked for in the manifest, and its layer loaded
 *     (idx_reload_by_ino);
 *   - a page whose access time is yet to be saved stays (the flush
 *     writes it), and with it the layer stays marked not loaded: its
 *     next use loads the others around it, as after a load that failed,
 *     and once the flush has saved the times it is offered again (after
 *     the layers still loaded).
 *
 * Its extents' records stay: kv_index_extents_trim takes out those only
 * pages out of RAM name.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "index_i.h"
#include "load_i.h"

/* Pages per hold of the write lock: each costs about 2 µs (its two table
 * slots, its name hashed again for the name table, and a cache miss or
 * more), so 4,096 held it 7-11 ms at 10M pages; 1,024: 1.8 ms at the median
 * of 100 layers, 2.4 at the 90th percentile, 5.5 at most. */
#define UNLOAD_STEP 1024u
#define TABLE_DRAIN_STEP 65536u   /* old slots moved per hold (1 tag byte each) */
#define CHANGE_TRIES 3

void kv_index_layer_queued(struct kv_index *x, const struct kv_node_info *n, uint64_t seq)
{
	uint64_t ino = n->kind == KV_KIND_PAGE ? n->parent :
		       n->kind == KV_KIND_LAYER ? n->ino : 0;
	struct node *l;

	if (!ino)
		return;
	pthread_rwlock_rdlock(&x->lock);
	l = idx_node(x, ino);
	if (l && l->kind == KV_KIND_LAYER) {
		uint64_t *q = &l->u.d->queued_seq, old = __atomic_load_n(q, __ATOMIC_RELAXED);

		/* only up: UINT64_MAX (a change the manifest refused) stays */
		while (old < seq && !__atomic_compare_exchange_n(q, &old, seq, true,
								  __ATOMIC_RELAXED,
								  __ATOMIC_RELAXED))
			;
	}
	pthread_rwlock_unlock(&x->lock);
}

void kv_index_unload_tick(struct kv_index *x)
{
	__atomic_fetch_add(&x->use_tick, 1, __ATOMIC_RELAXED);
}

/* The load is over and the reclaim has marked every extent: from here
 * on layers load only on demand (lock held). */
static bool settled(const struct kv_index *x)
{
	return x->loader && !x->frozen_below && !x->retire_below && !x->nretired;
}

/* May layer n go back now (lock held)? */
static bool layer_idle(const struct kv_index *x, const struct node *n, unsigned idle,
		       uint64_t committed)
{
	const struct dir_data *d = n->u.d;
	uint64_t now = __atomic_load_n(&x->use_tick, __ATOMIC_RELAXED);

	/* One that went back with pages left in RAM (their access times were
	 * still to be saved) is tried again: those may go now. */
	return !d->writing && !d->load_err && d->nchildren &&
	       now - __atomic_load_n(&d->used, __ATOMIC_RELAXED) >= idle &&
	       __atomic_load_n(&d->queued_seq, __ATOMIC_RELAXED) <= committed;
}

/* Layers still loaded before those sent back with pages left (which go
 * only once their access times are saved); then the least recently used. */
static bool colder(const struct node *a, const struct node *b)
{
	if (a->u.d->unloaded != b->u.d->unloaded)
		return !a->u.d->unloaded;
	return __atomic_load_n(&a->u.d->used, __ATOMIC_RELAXED) <
	       __atomic_load_n(&b->u.d->used, __ATOMIC_RELAXED);
}

int kv_index_unload_pick(struct kv_index *x, unsigned idle, uint64_t committed,
			 uint64_t *ino)
{
	struct node *model, *layer, *best = NULL;
	uint64_t in_ram;

	pthread_rwlock_rdlock(&x->lock);
	in_ram = x->st.pages - x->st.pages_unloaded;
	if (x->page_budget && in_ram > x->page_budget && settled(x))
		for (model = x->root->u.d->first; model; model = idx_next(x, model))
			for (layer = model->u.d->first; layer; layer = idx_next(x, layer))
				if (layer_idle(x, layer, idle, committed) &&
				    (!best || colder(layer, best)))
					best = layer;
	if (best)
		*ino = best->ino;
	pthread_rwlock_unlock(&x->lock);
	return best != NULL;
}

int kv_index_unload_begin(struct kv_index *x, uint64_t ino, uint64_t committed,
			  unsigned idle)
{
	struct node *n;
	int rc = 0;

	pthread_rwlock_wrlock(&x->lock);
	n = idx_node(x, ino);
	if (!n || n->kind != KV_KIND_LAYER)
		rc = -ENOENT;
	else if (!settled(x) || !layer_idle(x, n, idle, committed))
		rc = -EBUSY;
	if (rc == 0 && !n->u.d->unloaded) {
		n->u.d->unloaded = true;
		n->u.d->deferred = true;     /* as the walk leaves one */
		atomic_fetch_add_explicit(&x->layers_unloaded, 1, memory_order_release);
	}
	pthread_rwlock_unlock(&x->lock);
	return rc;
}

/* Up to UNLOAD_STEP pages of layer ino from *at (NULL: its first) out of
 * RAM; *at: where the next step goes on (NULL: done). false if the layer
 * is loaded again, or gone (write lock held). */
static bool unload_step(struct kv_index *x, uint64_t ino, struct node **at, bool first,
			uint64_t *pages)
{
	struct node *l = idx_node(x, ino), *c, *next;

	if (!l || l->kind != KV_KIND_LAYER || !l->u.d->unloaded)
		return false;
	/* Its list cannot change between steps: every change in a layer not
	 * loaded waits for its load, which waits for the loader's mutex. */
	c = first ? l->u.d->first : *at;
	for (unsigned k = 0; c && k < UNLOAD_STEP; k++, c = next) {
		next = idx_next(x, c);
		/* its row may be committed and its durable mark still to come */
		if (c->state == KV_PAGE_WRITING ||
		    (__atomic_load_n(&c->flags, __ATOMIC_RELAXED) & NODE_ATIME_LISTED))
			continue;
		idx_node_unload_locked(x, c);
		(*pages)++;
	}
	*at = c;
	return c != NULL;
}

/*
 * The node tables keep the size of the most nodes ever in RAM: once they
 * hold a small share of it, they move into smaller arrays (htab_shrink),
 * TABLE_DRAIN_STEP old slots of each per hold of the write lock.
 */
static void tables_shrink(struct kv_index *x)
{
	bool more;

	pthread_rwlock_wrlock(&x->lock);
	more = htab_shrink(&x->by_ino);
	more |= htab_shrink(&x->by_name);
	pthread_rwlock_unlock(&x->lock);
	while (more) {
		pthread_rwlock_wrlock(&x->lock);
		more = htab_drain(&x->by_ino, TABLE_DRAIN_STEP);
		more |= htab_drain(&x->by_name, TABLE_DRAIN_STEP);
		pthread_rwlock_unlock(&x->lock);
	}
}

int kv_index_unload_finish(struct kv_index *x, uint64_t ino, uint64_t *pages)
{
	struct kv_index_loader *l = x->loader;
	struct node *at = NULL;
	bool more = true;

	*pages = 0;
	if (!l)
		return -EINVAL;
	pthread_mutex_lock(&l->mu);
	if (l->closed) {
		struct node *n;

		/* Nothing could load it again: it stays. */
		pthread_rwlock_wrlock(&x->lock);
		n = idx_node(x, ino);
		if (n && n->kind == KV_KIND_LAYER && n->u.d->unloaded && !n->u.d->rows) {
			n->u.d->unloaded = false;
			atomic_fetch_sub_explicit(&x->layers_unloaded, 1, memory_order_release);
		}
		pthread_rwlock_unlock(&x->lock);
		pthread_mutex_unlock(&l->mu);
		return -ESHUTDOWN;
	}
	for (bool first = true; more; first = false) {
		pthread_rwlock_wrlock(&x->lock);
		more = unload_step(x, ino, &at, first, pages);
		pthread_rwlock_unlock(&x->lock);
	}
	pthread_mutex_unlock(&l->mu);
	tables_shrink(x);
	return 0;
}

/* The layer node ino is in, or ino itself for a layer (0: neither). */
static uint64_t layer_of(struct kv_index *x, uint64_t ino)
{
	struct node *n;
	uint64_t layer = 0;

	pthread_rwlock_rdlock(&x->lock);
	n = idx_node(x, ino);
	if (n && n->kind == KV_KIND_PAGE)
		layer = n->parent->ino;
	else if (n && n->kind == KV_KIND_LAYER)
		layer = n->ino;
	pthread_rwlock_unlock(&x->lock);
	return layer;
}

int idx_change_retry(struct kv_index *x, int rc, uint64_t ino, uint64_t dir, int *tries)
{
	static struct kv_log_limit limit;
	uint64_t layer;
	int err;

	if ((*tries)++ >= CHANGE_TRIES) {
		if (rc == -EAGAIN)
			KV_LOG_LIMITED(&limit, KV_LOG_ERR, "index: a change to inode %" PRIu64
				       " found its layer out of RAM %d times over (EAGAIN)",
				       ino, CHANGE_TRIES);
		return rc;
	}
	if (rc == -ENOENT) {
		err = ino ? idx_reload_by_ino(x, ino) : 0;
		return err < 0 ? err : err ? 0 : rc;
	}
	if (ino && (layer = layer_of(x, ino)) && (err = idx_layer_ready(x, layer)) < 0)
		return err;
	if (dir && (err = idx_layer_ready(x, dir)) < 0)
		return err;
	return 0;
}

int idx_reload_by_ino(struct kv_index *x, uint64_t ino)
{
	struct kv_index_loader *l = x->loader;
	uint64_t layer = 0;
	int rc = -ENOENT;

	if (!l || !atomic_load_explicit(&x->layers_unloaded, memory_order_acquire) ||
	    ino <= KV_ROOT_INO)
		return 0;
	pthread_mutex_lock(&l->mu);
	/* During the walk no layer has gone back: one not loaded yet holds
	 * no inode anyone was given. */
	if (l->phase == PHASE_DONE && !l->closed)
		rc = kv_manifest_page_layer(l->m, ino, &layer);
	pthread_mutex_unlock(&l->mu);
	if (rc == -ENOENT || (rc == 0 && kv_index_layer_whole(x, layer)))
		return 0;
	if (rc == 0)
		rc = idx_layer_ready(x, layer);
	return rc < 0 ? rc : 1;
}
