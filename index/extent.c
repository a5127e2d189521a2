/*
 * The index's extent table: extents by id, and a multimap by (XXH3-128,
 * length) that dedup uses to find candidates. Only extents whose manifest
 * row is committed (durable) are offered for sharing. Refcounts count the pages
 * naming an extent; the table forgets an extent when its count reaches 0
 * (while the index loads, it retires it instead: xent_retire).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "index_i.h"

uint64_t idx_key_hash(const uint8_t hash[KV_HASH_LEN], uint64_t length)
{
	uint64_t a, b;

	/* XXH3-128 output is already uniform; mixing guards the table against
	 * a hash that happens to repeat in its first 8 bytes. */
	memcpy(&a, hash, sizeof(a));
	memcpy(&b, hash + sizeof(a), sizeof(b));
	return htab_mix64(a ^ htab_mix64(b ^ length));
}

struct xent *idx_xent_find_in(const struct htab *by_id, uint64_t id)
{
	struct htab_probe p;
	struct xent *e;

	htab_probe_start(by_id, htab_mix64(id), &p);
	while ((e = htab_probe_next(by_id, &p)))
		if (e->id == id)
			return e;
	return NULL;
}

struct xent *idx_xent_find(const struct kv_index *x, uint64_t id)
{
	return idx_xent_find_in(&x->ext_by_id, id);
}

/* ---- the tables ---- */

static uint64_t xent_id_hash(const void *e)
{
	return htab_mix64(((const struct xent *)e)->id);
}

static uint64_t xent_key_hash(const void *e)
{
	const struct xent *x = e;

	return idx_key_hash(x->hash, idx_xent_length(x));
}

int idx_extents_init(struct kv_index *x)
{
	int rc = slab_init(&x->xslab);

	if (rc < 0) {
		kv_log(KV_LOG_ERR, "index: cannot reserve %llu GiB of address space for its "
		       "extent records: %s", (unsigned long long)(SLAB_SPAN >> 30),
		       kv_strerror(rc));
		return rc;
	}
	/* every element of these tables comes from xslab (htab.h) */
	if (htab_init(&x->ext_by_id, xent_id_hash, x->xslab.base) ||
	    htab_init(&x->ext_by_key, xent_key_hash, x->xslab.base))
		return -ENOMEM;
	return 0;
}

void idx_extents_fini(struct kv_index *x)
{
	htab_fini(&x->ext_by_id);
	htab_fini(&x->ext_by_key);
	slab_fini(&x->xslab);
}

/* ---- extents ---- */

static void xent_fill(const struct xent *e, struct kv_extent_rec *out)
{
	out->id = e->id;
	out->ext = idx_xent_ext(e);
	memcpy(out->hash, e->hash, KV_HASH_LEN);
	out->refcount = e->refcount;
}

/* e leaves the key table and the counts (dropped or retired). */
static void xent_uncount(struct kv_index *x, struct xent *e)
{
	struct kv_extent ext = idx_xent_ext(e);

	htab_remove(&x->ext_by_key, e);
	x->st.extents--;
	x->st.extent_bytes -= kv_extent_footprint(&ext);
}

static void xent_drop(struct kv_index *x, struct xent *e)
{
	xent_uncount(x, e);
	htab_remove(&x->ext_by_id, e);
	slab_free(&x->xslab, e, sizeof(*e));
}

/* r's location fits a struct xent (checked by xent_fits). */
static void xent_set(struct kv_index *x, struct xent *e, const struct kv_extent_rec *r)
{
	struct kv_extent old = idx_xent_ext(e);

	x->st.extent_bytes -= kv_extent_footprint(&old);
	e->stripe = (uint8_t)r->ext.stripe;
	e->segment = r->ext.segment;
	e->offset_blocks = (uint32_t)(r->ext.offset / KV_ALIGN);
	e->length_lo = (uint32_t)r->ext.length;
	e->length_hi = (uint8_t)(r->ext.length >> 32);
	memcpy(e->hash, r->hash, KV_HASH_LEN);
	e->refcount = r->refcount;
	x->st.extent_bytes += kv_extent_footprint(&r->ext);
}

/* Whether r's location fits the packed record (struct xent): no store
 * makes one that does not (a segment file of 16 TiB, a page of 1 TiB, a
 * stripe beyond KV_MAX_STRIPES), but a refusal must be an error, never a
 * wrong place. */
static int xent_fits(const struct kv_extent_rec *r)
{
	if (r->ext.stripe >= KV_MAX_STRIPES || r->ext.offset / KV_ALIGN > UINT32_MAX ||
	    r->ext.length >> 40) {
		kv_log(KV_LOG_ERR, "index: extent %" PRIu64 " (stripe %" PRIu32 ", offset %"
		       PRIu64 ", length %" PRIu64 ") is beyond what the index records: "
		       "at most %u stripes, offsets below 16 TiB, lengths below 1 TiB",
		       r->id, r->ext.stripe, r->ext.offset, r->ext.length, KV_MAX_STRIPES);
		return -EOVERFLOW;
	}
	return 0;
}

int idx_xent_put_locked(struct kv_index *x, const struct kv_extent_rec *r,
			struct xent **out)
{
	struct xent *e;
	int rc;

	if (r->id == 0 || r->ext.length == 0 || r->ext.offset % KV_ALIGN ||
	    r->refcount == 0)
		return -EINVAL;
	if ((rc = xent_fits(r)) < 0)
		return rc;
	idx_trim_note(x, r->id);
	/* next_ext is above every id put: a new one needs no probe (a
	 * mount loads ids in ascending order, so every one is new). */
	e = r->id < x->next_ext ? idx_xent_find(x, r->id) : NULL;
	if (e) {
		/* Out of the key table while its key changes; re-adding cannot
		 * grow the table. */
		htab_remove(&x->ext_by_key, e);
		xent_set(x, e, r);
		e->moved = true;
		htab_insert(&x->ext_by_key, e);
		goto done;
	}
	if ((rc = htab_reserve(&x->ext_by_id, 1)) || (rc = htab_reserve(&x->ext_by_key, 1)))
		return rc;
	e = slab_alloc(&x->xslab, sizeof(*e));
	if (!e)
		return -ENOMEM;
	memset(e, 0, sizeof(*e));
	e->id = r->id;
	xent_set(x, e, r);
	htab_insert(&x->ext_by_id, e);
	htab_insert(&x->ext_by_key, e);
	x->st.extents++;
	if (e->id >= x->next_ext)
		x->next_ext = e->id + 1;
done:
	if (out)
		*out = e;
	return 0;
}

uint64_t kv_index_next_extent_id(struct kv_index *x)
{
	uint64_t v;

	pthread_rwlock_wrlock(&x->lock);
	v = x->next_ext++;
	pthread_rwlock_unlock(&x->lock);
	return v;
}

int kv_index_extent_put(struct kv_index *x, const struct kv_extent_rec *r)
{
	int rc;

	pthread_rwlock_wrlock(&x->lock);
	rc = idx_xent_put_locked(x, r, NULL);
	pthread_rwlock_unlock(&x->lock);
	return rc;
}

int kv_index_extent_get(struct kv_index *x, uint64_t id, struct kv_extent_rec *out)
{
	struct xent *e;
	int rc = -ENOENT;

	pthread_rwlock_rdlock(&x->lock);
	e = idx_xent_find(x, id);
	if (e && !e->retired) {
		xent_fill(e, out);
		rc = 0;
	}
	pthread_rwlock_unlock(&x->lock);
	return rc;
}

int kv_index_extent_candidates(struct kv_index *x, const uint8_t hash[KV_HASH_LEN],
			       uint64_t length, struct kv_extent_rec *out, int max)
{
	uint64_t h = idx_key_hash(hash, length);
	struct htab_probe p;
	struct xent *e;
	int n = 0;

	pthread_rwlock_rdlock(&x->lock);
	htab_probe_start(&x->ext_by_key, h, &p);
	while (n < max && (e = htab_probe_next(&x->ext_by_key, &p)))
		if (e->durable && idx_xent_length(e) == length && e->id >= x->frozen_below &&
		    memcmp(e->hash, hash, KV_HASH_LEN) == 0)
			xent_fill(e, &out[n++]);
	pthread_rwlock_unlock(&x->lock);
	return n;
}

int kv_index_extent_durable(struct kv_index *x, uint64_t id)
{
	struct xent *e;

	pthread_rwlock_wrlock(&x->lock);
	e = idx_xent_find(x, id);
	if (e && e->retired)
		e = NULL;
	if (e) {
		e->durable = true;
		idx_trim_note(x, id);
	}
	pthread_rwlock_unlock(&x->lock);
	return e ? 0 : -ENOENT;
}

/*
 * The last page of an extent the manifest held at the mount went before
 * the reclaim. Dropped, the extent would come back from the load's
 * snapshot (its extents walk) as live, and its range would not be marked
 * at the reclaim, which may run before the removal is durable and the
 * extent freed. So it stays in ext_by_id, found by the load and the
 * extent walk alone, until kv_index_retired_drop. Without memory to list
 * it, it stays until the index is freed: 48 bytes, never a wrong answer.
 */
static void xent_retire(struct kv_index *x, struct xent *e)
{
	size_t cap = x->retired_cap ? 2 * x->retired_cap : 64;
	struct xent **v;

	xent_uncount(x, e);
	e->refcount = 0;
	e->retired = 1;
	if (x->nretired == x->retired_cap) {
		v = realloc(x->retired, cap * sizeof(*v));
		if (!v) {
			kv_log(KV_LOG_WARN, "index: no memory to list extent %" PRIu64
			       " as retired: its record stays until unmount", e->id);
			return;
		}
		x->retired = v;
		x->retired_cap = cap;
	}
	x->retired[x->nretired++] = e;
}

void kv_index_retired_drop(struct kv_index *x)
{
	pthread_rwlock_wrlock(&x->lock);
	for (size_t i = 0; i < x->nretired; i++) {
		htab_remove(&x->ext_by_id, x->retired[i]);
		slab_free(&x->xslab, x->retired[i], sizeof(struct xent));
	}
	free(x->retired);
	x->retired = NULL;
	x->nretired = x->retired_cap = 0;
	x->retire_below = 0;     /* marked: from now on an extent goes at 0 */
	pthread_rwlock_unlock(&x->lock);
}

static int ref_locked(struct kv_index *x, uint64_t id, int delta, uint32_t *count)
{
	struct xent *e = idx_xent_find(x, id);
	int64_t v;

	if (!e || e->retired)
		return -ENOENT;
	idx_trim_note(x, id);
	v = (int64_t)e->refcount + delta;
	if (v < 0 || v > UINT32_MAX) {
		kv_log(KV_LOG_ERR, "index: extent %" PRIu64 " refcount %" PRIu32
		       " %+d is out of range", id, e->refcount, delta);
		return v < 0 ? -EINVAL : -EOVERFLOW;
	}
	/* The load's check compares the manifest's count with the pages it
	 * finds: a page that goes (or comes) moves both. */
	if (id < x->frozen_below)
		e->seen = (uint32_t)((int64_t)e->seen + delta) & 0x7fffffffu;
	e->moved = true;
	if (v == 0 && id < x->retire_below)
		xent_retire(x, e);
	else if (v == 0)
		xent_drop(x, e);
	else
		e->refcount = (uint32_t)v;
	if (count)
		*count = (uint32_t)v;
	return 0;
}

int kv_index_extent_ref(struct kv_index *x, uint64_t id, int delta, uint32_t *count)
{
	int rc;

	pthread_rwlock_wrlock(&x->lock);
	rc = ref_locked(x, id, delta, count);
	pthread_rwlock_unlock(&x->lock);
	return rc;
}

int kv_index_extent_walk(struct kv_index *x,
			 int (*fn)(void *arg, const struct kv_extent_rec *r),
			 void *arg)
{
	struct kv_extent_rec rec;
	struct xent *e;
	size_t i;
	int rc = 0;

	pthread_rwlock_rdlock(&x->lock);
	for (i = 0; i < htab_span(&x->ext_by_id) && rc == 0; i++) {
		e = htab_at(&x->ext_by_id, i);
		if (e) {
			xent_fill(e, &rec);
			rc = fn(arg, &rec);
		}
	}
	pthread_rwlock_unlock(&x->lock);
	return rc;
}

