/*
 * Content dedup: a sealed page whose bytes already lie in a durable extent
 * shares that extent (refcount + 1) instead of being written again. Shared
 * system prompts make identical KV pages over and over.
 *
 * XXH3-128 finds candidates (same hash, same length), but it is not
 * collision-resistant against someone who crafts pages, so a candidate is
 * only shared after its bytes were read back (verified) and compared. The
 * read and compare run before the seal takes ns_lock: the plan made here is
 * a hint the seal re-checks (the candidate may have been dropped meanwhile;
 * its refcount going up under ns_lock is what makes the sharing real).
 *
 * Only durable extents are candidates: a pending one may still fail its
 * write and be withdrawn, and sharing it would withdraw its sharers too.
 * Pages sealed in the same commit window as an identical one are therefore
 * written twice; the next identical page shares.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kvfs_i.h"

#define CANDIDATES_MAX 4

/* Read candidate c (verified) and compare it with payload d. The pin keeps
 * the extent from being freed and reused while it is read. */
static bool same_bytes(struct kvfs *fs, const struct kv_extent_rec *c,
		       const struct kvfs_data *d)
{
	struct kvfs_pin pin;
	void *buf = NULL;
	bool same;
	int rc;

	kvfs_pin_begin(fs, &pin);
	rc = kv_store_read_verified(fs->store, &c->ext, c->hash, &buf);
	kvfs_pin_end(fs, &pin);
	if (rc < 0)
		return false;   /* logged by the store; write a fresh copy */
	same = memcmp(buf, d->bytes, d->size) == 0;
	kv_buf_put(buf, kv_extent_footprint(&c->ext));
	if (!same) {
		atomic_fetch_add(&fs->st.dedup_mismatches, 1);
		kv_log(KV_LOG_INFO, "dedup: extent %" PRIu64 " has the same XXH3-128 and "
		       "length (%" PRIu64 " bytes) but other bytes; not shared",
		       c->id, d->size);
	}
	return same;
}

void kvfs_seal_plan_make(struct kvfs *fs, struct kvfs_data *d,
			 struct kvfs_seal_plan *p)
{
	struct kv_extent_rec c[CANDIDATES_MAX];
	int i, n;

	memset(p, 0, sizeof(*p));
	p->d = d;
	p->size = d->size;
	if (d->hashed)
		memcpy(p->hash, d->hash, KV_HASH_LEN);
	else
		kv_hash128(d->bytes, d->size, p->hash);
	if (!fs->opts.dedup)
		return;
	n = kv_index_extent_candidates(fs->idx, p->hash, d->size, c, CANDIDATES_MAX);
	for (i = 0; i < n; i++) {
		if (same_bytes(fs, &c[i], d)) {
			p->share = c[i];
			return;
		}
	}
}

void kvfs_seal_plan_clear(struct kvfs_seal_plan *p)
{
	kvfs_data_put(p->d);
	memset(p, 0, sizeof(*p));
}

bool kvfs_seal_plan_fits(const struct kvfs_seal_plan *p, const struct kvfs_data *d)
{
	return p && p->d == d && p->size == d->size;
}
