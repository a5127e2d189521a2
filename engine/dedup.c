/*
 * Content dedup: a sealed page whose bytes already lie in an extent shares
 * that extent (refcount + 1) instead of being written again. Shared system
 * prompts make identical KV pages over and over.
 *
 * XXH3-128 finds candidates (same hash, same length), but it is not
 * collision-resistant against someone who crafts pages, so a candidate is
 * only shared after its bytes were compared. The compare runs before the
 * seal takes ns_lock: the plan made here is a hint the seal re-checks (the
 * candidate may have been dropped meanwhile; its refcount going up under
 * ns_lock is what makes the sharing real).
 *
 * Candidates are durable extents (read back verified from the disk) and
 * extents still being written in this commit window (the pending table:
 * compared with the payload in RAM their write was made from), so a batch
 * of identical pages writes one copy. A page sharing a pending extent
 * depends on its write: if that write or its sync fails, the committer
 * withdraws every page sharing it too (engine/commit_batch.c,
 * note_failures), and the extent's space is given back once the last of
 * them is gone (engine/page.c, withdraw).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kvfs_i.h"

#define CANDIDATES_MAX 4
/* 512 KiB of heads (touched as used): a 256 MiB write-back budget of
 * 4 KiB pages is 65536 pending extents, so most buckets of a lookup are
 * empty, which a seal sees without taking ns_lock. */
#define PENDING_BUCKETS 65536u

/* An extent written in this commit window, not durable yet (ns_lock). */
struct pending_ext {
	struct kv_extent_rec rec;     /* id, ext (length = payload size), hash */
	struct kvfs_data *d;          /* the payload its write was made from */
	struct pending_ext *next;
};

/* Changed under ns_lock; a head is read without it only to see that a
 * bucket is empty. */
struct kvfs_pending {
	_Atomic(struct pending_ext *) bucket[PENDING_BUCKETS];
};

static unsigned pending_slot(const uint8_t hash[KV_HASH_LEN], uint64_t size)
{
	uint64_t h;

	memcpy(&h, hash, sizeof(h));
	return (unsigned)((h ^ size) % PENDING_BUCKETS);
}

void kvfs_dedup_pending_add(struct kvfs *fs, const struct kv_node_info *n,
			    struct kvfs_data *d)
{
	struct pending_ext *p;
	unsigned slot;

	if (!fs->pending)
		return;      /* dedup is off */
	p = calloc(1, sizeof(*p));
	if (!p) {
		kv_log(KV_LOG_DEBUG, "dedup: no memory to offer page %s for sharing "
		       "before it is durable", n->name);
		return;
	}
	p->rec = (struct kv_extent_rec){ .id = n->extent_id, .ext = n->ext };
	memcpy(p->rec.hash, n->hash, KV_HASH_LEN);
	p->d = kvfs_data_get(d);
	slot = pending_slot(n->hash, n->ext.length);
	p->next = atomic_load_explicit(&fs->pending->bucket[slot], memory_order_relaxed);
	atomic_store_explicit(&fs->pending->bucket[slot], p, memory_order_relaxed);
}

void kvfs_dedup_pending_drop(struct kvfs *fs, const struct kv_node_info *n)
{
	_Atomic(struct pending_ext *) *head;
	struct pending_ext *p, *prev = NULL;

	if (!fs->pending)
		return;
	head = &fs->pending->bucket[pending_slot(n->hash, n->ext.length)];
	for (p = atomic_load_explicit(head, memory_order_relaxed); p; prev = p, p = p->next)
		if (p->rec.id == n->extent_id)
			break;
	if (!p)
		return;
	if (prev)
		prev->next = p->next;
	else
		atomic_store_explicit(head, p->next, memory_order_relaxed);
	kvfs_data_put(p->d);
	free(p);
}

bool kvfs_dedup_pending_has(struct kvfs *fs, const struct kv_extent_rec *e)
{
	_Atomic(struct pending_ext *) *head;
	struct pending_ext *p;

	if (!fs->pending)
		return false;
	head = &fs->pending->bucket[pending_slot(e->hash, e->ext.length)];
	for (p = atomic_load_explicit(head, memory_order_relaxed); p; p = p->next)
		if (p->rec.id == e->id)
			return true;
	return false;
}

int kvfs_dedup_init(struct kvfs *fs)
{
	if (!fs->opts.dedup)
		return 0;
	fs->pending = calloc(1, sizeof(*fs->pending));
	if (!fs->pending) {
		kv_log(KV_LOG_ERR, "dedup: no memory for the table of extents being "
		       "written (%zu bytes)", sizeof(*fs->pending));
		return -ENOMEM;
	}
	return 0;
}

void kvfs_dedup_fini(struct kvfs *fs)
{
	struct pending_ext *p;

	if (!fs->pending)
		return;
	for (unsigned i = 0; i < PENDING_BUCKETS; i++) {
		while ((p = atomic_load_explicit(&fs->pending->bucket[i],
						 memory_order_relaxed))) {
			atomic_store_explicit(&fs->pending->bucket[i], p->next,
					      memory_order_relaxed);
			kvfs_data_put(p->d);
			free(p);
		}
	}
	free(fs->pending);
	fs->pending = NULL;
}

/* Pending extents with this hash and size, with a reference to each one's
 * payload (ns_lock taken here, unless the bucket is empty: never call it
 * holding ns_lock). */
static int pending_candidates(struct kvfs *fs, const struct kvfs_seal_plan *p,
			      struct pending_ext *out, int max)
{
	_Atomic(struct pending_ext *) *head;
	struct pending_ext *e;
	int n = 0;

	if (!fs->pending)
		return 0;
	head = &fs->pending->bucket[pending_slot(p->hash, p->size)];
	if (!atomic_load_explicit(head, memory_order_relaxed))
		return 0;   /* a page added meanwhile is one this seal may miss */
	pthread_mutex_lock(&fs->ns_lock);
	for (e = atomic_load_explicit(head, memory_order_relaxed); e && n < max; e = e->next)
			if (e->rec.ext.length == p->size &&
			    memcmp(e->rec.hash, p->hash, KV_HASH_LEN) == 0) {
				out[n] = *e;
				kvfs_data_get(out[n++].d);
			}
	pthread_mutex_unlock(&fs->ns_lock);
	return n;
}

static void note_mismatch(struct kvfs *fs, uint64_t id, uint64_t size)
{
	atomic_fetch_add(&fs->st.dedup_mismatches, 1);
	kv_log(KV_LOG_INFO, "dedup: extent %" PRIu64 " has the same XXH3-128 and "
	       "length (%" PRIu64 " bytes) but other bytes; not shared", id, size);
}

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
	if (!same)
		note_mismatch(fs, c->id, d->size);
	return same;
}

/* A twin among the extents of this commit window, compared in RAM. */
static void pending_twin(struct kvfs *fs, const struct kvfs_data *d,
			 struct kvfs_seal_plan *p)
{
	struct pending_ext c[CANDIDATES_MAX];
	int i, n = pending_candidates(fs, p, c, CANDIDATES_MAX);

	for (i = 0; i < n; i++) {
		if (!p->share.id && memcmp(c[i].d->bytes, d->bytes, d->size) == 0) {
			p->share = c[i].rec;
			p->pending = true;
		} else if (!p->share.id) {
			note_mismatch(fs, c[i].rec.id, d->size);
		}
		kvfs_data_put(c[i].d);
	}
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
		/* full (take_twin would refuse it): not worth reading */
		if (c[i].refcount >= kvfs_share_names_max(&c[i].ext))
			continue;
		if (same_bytes(fs, &c[i], d)) {
			p->share = c[i];
			return;
		}
	}
	pending_twin(fs, d, p);
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
