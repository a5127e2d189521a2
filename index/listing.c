/*
 * Reading the index whole or a directory at a time: readdir's snapshot of
 * a directory's children, the counters, and the walk over every page
 * (eviction, atime persistence). All under the read lock.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "index_i.h"

/* Entries and names in one allocation: kv_dirents_free is one free(). */
static struct kv_dirent *dirents_copy(const struct kv_index *x, const struct node *dir,
				      size_t *count)
{
	const struct node *c;
	struct kv_dirent *d;
	size_t n = dir->u.d->nchildren, bytes = n * sizeof(*d), i = 0;
	char *names;

	for (c = dir->u.d->first; c; c = idx_next(x, c))
		bytes += idx_node_name_len(c) + 1;
	d = malloc(bytes);
	if (!d)
		return NULL;
	names = (char *)(d + n);
	for (c = dir->u.d->first; c; c = idx_next(x, c), i++) {
		d[i].ino = c->ino;
		d[i].kind = (enum kv_kind)c->kind;
		d[i].name = names;
		names += idx_node_name(c, names) + 1;
	}
	*count = n;
	return d;
}

int kv_index_readdir(struct kv_index *x, uint64_t dir, struct kv_dirent **out,
		     size_t *n)
{
	struct node *d;
	int rc = 0;

	*out = NULL;
	*n = 0;
	/* Loaded, then listed under the lock: a layer may go back to the
	 * manifest in between (unload.c). */
	for (int tries = 0;; tries++) {
		bool again = false;

		if ((rc = idx_layer_ready(x, dir)) < 0)
			return rc;
		if (x->ready_gap)
			x->ready_gap(x->ready_gap_arg, dir);
		pthread_rwlock_rdlock(&x->lock);
		d = idx_node(x, dir);
		if (!d)
			rc = -ENOENT;
		else if (d->kind == KV_KIND_PAGE)
			rc = -ENOTDIR;
		else if (d->kind == KV_KIND_LAYER && d->u.d->unloaded) {
			again = tries < 2;
			rc = -EAGAIN;   /* it keeps going back: never a partial listing */
		}
		else if (d->u.d->nchildren && !(*out = dirents_copy(x, d, n)))
			rc = -ENOMEM;
		idx_layer_used(x, d);
		pthread_rwlock_unlock(&x->lock);
		if (!again)
			return rc;
	}
}

void kv_dirents_free(struct kv_dirent *d, size_t n)
{
	(void)n;
	free(d);
}

void kv_index_stats(struct kv_index *x, struct kv_index_stats *st)
{
	pthread_rwlock_rdlock(&x->lock);
	*st = x->st;
	st->layers_unloaded = atomic_load_explicit(&x->layers_unloaded, memory_order_relaxed);
	st->extents += st->extents_unloaded;     /* every extent, in RAM or not */
	st->empty_pages = kv_index_empty_pages(x);
	pthread_rwlock_unlock(&x->lock);
}

uint64_t kv_index_empty_pages(struct kv_index *x)
{
	return atomic_load_explicit(&x->empty_pages, memory_order_relaxed);
}

/*
 * In steps of WALK_STEP pages, the read lock taken for each: at 1M pages
 * one hold took 79 ms (a cache miss per page), so at 10^8 a writer would
 * wait seconds for every access-time flush (every 30 s) and eviction pass.
 */
#define WALK_STEP 4096u

void idx_page_brief(const struct node *n, struct kv_page_brief *b)
{
	*b = (struct kv_page_brief){
		.ino = n->ino, .parent = n->parent->ino,
		.extent_id = n->u.p.extent_id, .size = n->u.p.size,
		.atime_ns = __atomic_load_n(&n->atime_ns, __ATOMIC_SEQ_CST),
		.mode = n->mode, .state = (enum kv_page_state)n->state,
	};
}

/* clear_listed: clear each page's NODE_ATIME_LISTED before reading its
 * time (kv_index_touched_walk visiting every page); otherwise pages in a
 * layer the background load has not made whole are left out (they cannot
 * be removed yet: kv_index_remove). */
static int page_walk(struct kv_index *x, bool clear_listed,
		     int (*fn)(void *arg, const struct kv_page_brief *p), void *arg)
{
	struct kv_page_brief b;
	struct htab_walk w;
	struct node *n;
	bool more = true;
	int rc = 0;

	htab_walk_init(&w);
	while (more && rc == 0) {
		unsigned pages = 0;

		pthread_rwlock_rdlock(&x->lock);
		htab_walk_resume(&x->by_ino, &w);
		while (rc == 0 && pages < WALK_STEP) {
			n = htab_walk_next(&x->by_ino, &w);
			if (!n) {
				more = false;
				break;
			}
			if (n->kind != KV_KIND_PAGE)
				continue;
			pages++;
			if (!clear_listed && idx_node_unloaded_locked(x, n))
				continue;
			if (clear_listed)
				__atomic_fetch_and(&n->flags, (uint8_t)~NODE_ATIME_LISTED,
						   __ATOMIC_SEQ_CST);
			idx_page_brief(n, &b);
			rc = fn(arg, &b);
		}
		pthread_rwlock_unlock(&x->lock);
	}
	return rc;
}

int kv_index_layer_sizes(struct kv_index *x, uint64_t layer, uint64_t size)
{
	const struct node *l, *c;
	int rc = 0;

	pthread_rwlock_rdlock(&x->lock);
	l = idx_node(x, layer);
	if (!l || l->kind != KV_KIND_LAYER)
		rc = -ENOENT;
	else if (l->u.d->unloaded || l->u.d->rows)
		rc = -EAGAIN;       /* some pages are only in the manifest */
	for (c = rc ? NULL : l->u.d->first; c && rc == 0; c = idx_next(x, c))
		if (c->state == KV_PAGE_WRITING ? c->u.p.size > size : c->u.p.size != size)
			rc = -ENOTEMPTY;
	pthread_rwlock_unlock(&x->lock);
	return rc;
}

int kv_index_page_walk(struct kv_index *x,
		       int (*fn)(void *arg, const struct kv_page_brief *p),
		       void *arg)
{
	return page_walk(x, false, fn, arg);
}

bool idx_touched_add(struct kv_index *x, uint64_t ino)
{
	bool listed = false;

	pthread_mutex_lock(&x->touched_lock);
	if (!x->touched_overflow && x->ntouched == x->touched_cap &&
	    x->touched_cap < x->touched_max) {
		size_t cap = x->touched_cap ? x->touched_cap * 2 : 1024;
		uint64_t *v;

		if (cap > x->touched_max)
			cap = x->touched_max;
		v = realloc(x->touched, cap * sizeof(*v));
		if (v) {
			x->touched = v;
			x->touched_cap = cap;
		}
	}
	if (!x->touched_overflow && x->ntouched < x->touched_cap) {
		x->touched[x->ntouched++] = ino;
		listed = true;
	} else {
		x->touched_overflow = true;
	}
	pthread_mutex_unlock(&x->touched_lock);
	return listed;
}

/* Take the list of touched pages (and whether it overflowed). */
static uint64_t *touched_take(struct kv_index *x, size_t *n, bool *overflow)
{
	uint64_t *v;

	pthread_mutex_lock(&x->touched_lock);
	v = x->touched;
	*n = x->ntouched;
	*overflow = x->touched_overflow;
	x->touched = NULL;
	x->ntouched = x->touched_cap = 0;
	x->touched_overflow = false;
	pthread_mutex_unlock(&x->touched_lock);
	return v;
}

int kv_index_touched_walk(struct kv_index *x, bool all,
			  int (*fn)(void *arg, const struct kv_page_brief *p),
			  void *arg)
{
	struct kv_page_brief b;
	bool overflow;
	size_t n, i = 0;
	uint64_t *ino = touched_take(x, &n, &overflow);
	int rc = 0;

	while (i < n) {
		size_t end = n - i > WALK_STEP ? i + WALK_STEP : n;

		pthread_rwlock_rdlock(&x->lock);
		for (; i < end; i++) {
			struct node *p = idx_node(x, ino[i]);

			if (!p || p->kind != KV_KIND_PAGE)
				continue;          /* gone since */
			if (p->state != KV_PAGE_DURABLE) {
				/* no row to update yet: next time (no room:
				 * the next walk visits every page) */
				idx_touched_add(x, p->ino);
				continue;
			}
			/* before the time is read (touch_atime) */
			__atomic_fetch_and(&p->flags, (uint8_t)~NODE_ATIME_LISTED,
					   __ATOMIC_SEQ_CST);
			idx_page_brief(p, &b);
			if (rc == 0)
				rc = fn(arg, &b);
			/* after a failure only flags are cleared: the
			 * next walk visits every page instead */
		}
		pthread_rwlock_unlock(&x->lock);
	}
	free(ino);
	if (rc == 0 && (all || overflow))
		rc = page_walk(x, true, fn, arg);
	if (rc) {
		pthread_mutex_lock(&x->touched_lock);
		x->touched_overflow = true;
		pthread_mutex_unlock(&x->touched_lock);
	}
	return rc;
}
