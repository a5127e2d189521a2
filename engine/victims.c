/*
 * Which pages eviction takes, and in which order (capacity.h): a walk of
 * every durable page in the index, then sharing and stripes looked up
 * outside the walk's lock, then a sort.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kvfs_i.h"

static int collect_one(void *arg, const struct kv_page_brief *p)
{
	struct kvfs_victims *vs = arg;
	struct kvfs_victim *nv;

	if (p->state != KV_PAGE_DURABLE)
		return 0;     /* still in write-back: not ours to drop */
	if (vs->rule.bounded && p->atime_ns >= vs->rule.before_ns)
		return 0;
	if (vs->rule.plain && p->mode & S_ISVTX)
		return 0;
	if (!(nv = kv_array_room(vs->v, vs->n, &vs->cap, sizeof(*nv), 1024)))
		return -ENOMEM;
	vs->v = nv;
	vs->v[vs->n++] = (struct kvfs_victim){ .ino = p->ino, .extent_id = p->extent_id,
					  .atime_ns = p->atime_ns,
					  .protect = (p->mode & S_ISVTX) != 0 };
	return 0;
}

/* Least recently used first, protected last; the names of one extent
 * side by side, so that evicting them in turn frees it with the last. */
static int victim_cmp(const void *pa, const void *pb)
{
	const struct kvfs_victim *a = pa, *b = pb;

	if (a->protect != b->protect)
		return a->protect ? 1 : -1;
	if (a->atime_ns != b->atime_ns)
		return a->atime_ns < b->atime_ns ? -1 : 1;
	if (a->extent_id != b->extent_id)
		return a->extent_id < b->extent_id ? -1 : 1;
	return a->ino < b->ino ? -1 : a->ino > b->ino;
}

static int victim_extent_cmp(const void *pa, const void *pb)
{
	const struct kvfs_victim *a = pa, *b = pb;

	if (a->extent_id != b->extent_id)
		return a->extent_id < b->extent_id ? -1 : 1;
	return a->ino < b->ino ? -1 : a->ino > b->ino;
}

/*
 * A shared extent is freed only with its last name. Ordering its names
 * one by one (each at its own time) would free nothing until the newest
 * went; putting them all last, as this once did, let anyone keep pages
 * past everyone else's by storing each under two names. So an extent
 * whose every name is here goes as one unit at its newest name's time;
 * one with a name elsewhere (open, pinned, newer than the bound, in a
 * layer left in the manifest) is protected, or left out of a plain pass.
 */
static void group_shared(struct kvfs_victims *vs)
{
	size_t i = 0, k = 0, j;

	if (vs->n > 1)     /* none: vs->v may be NULL, which qsort must not get */
		qsort(vs->v, vs->n, sizeof(*vs->v), victim_extent_cmp);
	while (i < vs->n) {
		uint64_t id = vs->v[i].extent_id;
		uint32_t refs = vs->v[i].refs;
		bool shared = vs->v[i].shared, pinned = vs->v[i].protect;
		int64_t newest = vs->v[i].atime_ns;

		for (j = i + 1; j < vs->n && vs->v[j].extent_id == id; j++) {
			newest = vs->v[j].atime_ns > newest ? vs->v[j].atime_ns : newest;
			pinned |= vs->v[j].protect;
		}
		if (!shared || (j - i == refs && !pinned)) {
			for (; i < j; i++) {
				vs->v[i].atime_ns = shared ? newest : vs->v[i].atime_ns;
				vs->v[k++] = vs->v[i];
			}
			continue;
		}
		for (; i < j; i++) {
			vs->v[i].protect = true;
			if (!vs->rule.plain)
				vs->v[k++] = vs->v[i];
		}
	}
	vs->n = k;
}

static int victim_ino_cmp(const void *pa, const void *pb)
{
	const struct kvfs_victim *a = pa, *b = pb;

	return a->ino < b->ino ? -1 : a->ino > b->ino;
}

/* The walk may show a page twice (kv_index_page_walk): keep one. */
static void drop_twice_seen(struct kvfs_victims *vs)
{
	size_t k = 0;

	if (vs->n < 2)
		return;
	qsort(vs->v, vs->n, sizeof(*vs->v), victim_ino_cmp);
	for (size_t i = 0; i < vs->n; i++)
		if (k == 0 || vs->v[k - 1].ino != vs->v[i].ino)
			vs->v[k++] = vs->v[i];
	vs->n = k;
}

static bool missing_stripe(struct kvfs *fs, uint32_t stripe)
{
	struct kv_stripe_state ss;

	return fs->opts.degraded && kv_store_stripe_state(fs->store, stripe, &ss) == 0 &&
	       ss.health == KV_STRIPE_MISSING;
}

int kvfs_victims_collect(struct kvfs *fs, const struct kvfs_victim_rule *rule,
			 struct kvfs_victims *vs)
{
	struct kv_extent_rec er;
	size_t k = 0;
	int rc;

	memset(vs, 0, sizeof(*vs));
	vs->rule = *rule;
	rc = kv_index_page_walk(fs->idx, collect_one, vs);
	if (rc < 0) {
		free(vs->v);
		vs->v = NULL;
		return rc;
	}
	drop_twice_seen(vs);
	for (size_t i = 0; i < vs->n; i++) {
		bool have = kv_index_extent_get(fs->idx, vs->v[i].extent_id, &er) == 0;

		/* a degraded mount keeps the missing stripe's pages for when
		 * it is back: evicting them would free nothing here anyway */
		if (have && missing_stripe(fs, er.ext.stripe))
			continue;
		vs->v[i].refs = have ? er.refcount : 1;
		vs->v[i].shared = vs->v[i].refs > 1;
		vs->v[k++] = vs->v[i];
	}
	vs->n = k;
	group_shared(vs);
	if (vs->n)
		qsort(vs->v, vs->n, sizeof(*vs->v), victim_cmp);
	return 0;
}


/*
 * Looking at every name of the extent for each of them cost N^2: 107,000
 * names of one 1-byte payload went at 100 a second, and a writer waiting
 * for that room got ENOSPC after 40 s. Once the group was seen whole,
 * each later name is looked at alone: one opened meanwhile stays, and
 * with it every name after it (the ones already gone were evictable
 * when seen).
 */
bool kvfs_victim_run_still(struct kvfs *fs, struct kvfs_victims *vs,
			   const struct kvfs_victim *v, const struct kv_node_info *n)
{
	const struct kvfs_victim *first = v, *end = v + 1;
	struct kv_node_info o;

	if (!kvfs_victim_still(fs, vs, n)) {
		if (v->shared && vs->group_id == v->extent_id)
			vs->group_ok = false;   /* it stays: so do the others */
		return false;
	}
	if (!v->shared || v->protect)
		return true;      /* alone, or a share that goes last anyway */
	if (vs->group_id == v->extent_id)
		return vs->group_ok;
	vs->group_id = v->extent_id;
	vs->group_ok = false;
	/* the names of one extent sit side by side (victim_cmp) */
	while (first > vs->v && first[-1].extent_id == v->extent_id)
		first--;
	while (end < vs->v + vs->n && end->extent_id == v->extent_id)
		end++;
	for (const struct kvfs_victim *w = first; w < end; w++) {
		/* gone (evicted just before) or renamed over: not a holder */
		if (w == v || kv_index_get(fs->idx, w->ino, &o) < 0 ||
		    o.kind != KV_KIND_PAGE || o.extent_id != v->extent_id)
			continue;
		if (!kvfs_victim_still(fs, vs, &o))
			return false;
	}
	vs->group_ok = true;
	return true;
}

bool kvfs_victim_still(struct kvfs *fs, const struct kvfs_victims *vs,
		       const struct kv_node_info *n)
{
	struct kvfs_live *l;

	if (n->kind != KV_KIND_PAGE || n->state != KV_PAGE_DURABLE)
		return false;
	/* read since it was collected: it may be newer than the bound now */
	if (vs->rule.bounded && n->attr.atime_ns >= vs->rule.before_ns)
		return false;
	l = kvfs_live_find(fs, n->ino);
	return !l || (!l->opens && !l->writing && !l->ram);
}
