/*
 * Fast-path batch validation. Everything here is arithmetic on numbers an
 * engine (or an attacker sharing the uid) controls, so every sum is checked
 * for overflow and every range is compared with the region's length before
 * the daemon derives an address from it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "batch_check.h"

/* [off, off + len) lies inside a region of region_len bytes. */
static bool range_ok(uint64_t off, uint64_t len, uint64_t region_len)
{
	return off <= region_len && len <= region_len - off;
}

#define WRITE_FLAGS (KVFS_WRITE_DURABLE | KVFS_WRITE_REPLACE)

int kvfs_batch_check_arg(const struct kvfs_batch_arg *a, uint64_t region_len,
			 enum kvfs_batch_kind kind)
{
	uint32_t flags_ok = kind == KVFS_BATCH_WRITE ? WRITE_FLAGS | KVFS_BATCH_DATA_REGION :
			    kind == KVFS_BATCH_READ ? KVFS_BATCH_DATA_REGION : 0;
	bool data_region = a->flags & KVFS_BATCH_DATA_REGION;

	if (a->abi != KVFS_ABI_VERSION)
		return -EPROTO;
	if ((a->flags & ~flags_ok) || a->reserved1 || !a->data_region_id != !data_region)
		return -EINVAL;
	if (a->count == 0 || a->desc_off % 8)
		return -EINVAL;
	if (a->count > KVFS_BATCH_MAX)
		return -E2BIG;
	if (kind != KVFS_BATCH_LOOKUP && a->group != 0)
		return -EINVAL;
	if (kind == KVFS_BATCH_LOOKUP && a->group > 1 && a->count % a->group)
		return -EINVAL;
	/* count <= 2^20 and a descriptor is 64 bytes: the product fits. */
	if (!range_ok(a->desc_off, (uint64_t)a->count * sizeof(struct kvfs_page_desc),
		      region_len))
		return -ERANGE;
	return 0;
}

static int32_t check_name(const struct kvfs_page_desc *d, uint64_t region_len)
{
	if (d->name_len == 0)
		return -EINVAL;
	if (d->name_len > KVFS_NAME_MAX)
		return -ENAMETOOLONG;
	if (!range_ok(d->name_off, d->name_len, region_len))
		return -ERANGE;
	return 0;
}

static int32_t check_read(const struct kvfs_page_desc *d, uint64_t region_len,
			  uint64_t data_len)
{
	int32_t rc = d->handle == 0 ? check_name(d, region_len) : 0;

	if (rc)
		return rc;
	if (!range_ok(d->dst_off, d->dst_len, data_len))
		return -ERANGE;
	if (d->dst_len == 0)
		return -ENOBUFS;
	return 0;
}

/* A prefetch names a page (handle or name) and nothing else. */
static int32_t check_prefetch(const struct kvfs_page_desc *d, uint64_t region_len)
{
	if (d->dst_off || d->dst_len)
		return -EINVAL;
	return d->handle == 0 ? check_name(d, region_len) : 0;
}

/*
 * A write's source is only read by the daemon, so overlaps with other
 * sources or names are harmless. One over the descriptor array is refused
 * all the same: the page would hold descriptor bytes that the call itself
 * rewrites, which is an engine bug better reported than stored.
 */
static int32_t check_write(const struct kvfs_page_desc *d, uint64_t region_len,
			   uint64_t data_len, const struct kvfs_batch_arg *a)
{
	bool same_region = !(a->flags & KVFS_BATCH_DATA_REGION);
	uint64_t arr_end = a->desc_off + (uint64_t)a->count * sizeof(*d);
	int32_t rc;

	if (d->handle)
		return -EINVAL;      /* a write makes a new page: no handle yet */
	rc = check_name(d, region_len);
	if (rc)
		return rc;
	if (!range_ok(d->dst_off, d->dst_len, data_len))
		return -ERANGE;
	if (d->dst_len == 0)
		return -EINVAL;      /* empty pages are not stored */
	if (same_region && d->dst_off < arr_end && a->desc_off < d->dst_off + d->dst_len)
		return -EINVAL;
	return 0;
}

static int32_t check_one(const struct kvfs_batch_arg *a,
			 const struct kvfs_page_desc *d, uint64_t region_len,
			 uint64_t data_len, enum kvfs_batch_kind kind)
{
	if (d->reserved)
		return -EINVAL;
	switch (kind) {
	case KVFS_BATCH_READ:
		return check_read(d, region_len, data_len);
	case KVFS_BATCH_WRITE:
		return check_write(d, region_len, data_len, a);
	case KVFS_BATCH_PREFETCH:
		return check_prefetch(d, region_len);
	default:
		return check_name(d, region_len);
	}
}

/* A byte range of the region the batch uses; owner -1 is the descriptor array. */
struct span {
	uint64_t start, end;
	long owner;
	bool written;   /* a destination (else read by the daemon) */
};

static int span_cmp(const void *pa, const void *pb)
{
	const struct span *a = pa, *b = pb;

	if (a->start != b->start)
		return a->start < b->start ? -1 : 1;
	return a->owner < b->owner ? -1 : a->owner > b->owner;
}

/*
 * Sweep the spans in address order. Destinations already accepted never
 * overlap each other, so at most one of them covers any point: remembering
 * the one reaching furthest is enough to find the owner of a collision.
 */
static long fail_overlaps(struct span *s, size_t n, int32_t *status)
{
	uint64_t dst_end = 0, ro_end = 0;
	long dst_owner = -1, failed = 0;

	qsort(s, n, sizeof(*s), span_cmp);
	for (size_t i = 0; i < n; i++) {
		if (s[i].written) {
			if (status[s[i].owner])
				continue;
			if (dst_end > s[i].start || ro_end > s[i].start) {
				status[s[i].owner] = -EINVAL;
				failed++;
				continue;
			}
			dst_end = s[i].end;
			dst_owner = s[i].owner;
		} else {
			if (dst_end > s[i].start && dst_owner >= 0 &&
			    status[dst_owner] == 0) {
				status[dst_owner] = -EINVAL;
				failed++;
			}
			if (s[i].end > ro_end)
				ro_end = s[i].end;
		}
	}
	return failed;
}

long kvfs_batch_check_descs(const struct kvfs_batch_arg *a,
			    const struct kvfs_page_desc *d, uint64_t region_len,
			    uint64_t data_len, enum kvfs_batch_kind kind, int32_t *status)
{
	bool same_region = !(a->flags & KVFS_BATCH_DATA_REGION);
	struct span *s;
	size_t n = 0;
	long failed = 0;

	for (uint32_t i = 0; i < a->count; i++) {
		status[i] = check_one(a, &d[i], region_len, same_region ? region_len : data_len,
				      kind);
		failed += status[i] != 0;
	}
	/* Lookups and writes store only inside the descriptors. */
	if (kind != KVFS_BATCH_READ)
		return failed;

	s = malloc(((size_t)a->count * 2 + 1) * sizeof(*s));
	if (!s)
		return -ENOMEM;
	/* Destinations in a region of their own overlap only each other. */
	if (same_region)
		s[n++] = (struct span){ a->desc_off,
			a->desc_off + (uint64_t)a->count * sizeof(*d), -1, false };
	for (uint32_t i = 0; i < a->count; i++) {
		if (status[i])
			continue;
		s[n++] = (struct span){ d[i].dst_off, d[i].dst_off + d[i].dst_len, i, true };
		if (same_region && d[i].handle == 0)
			s[n++] = (struct span){ d[i].name_off,
				d[i].name_off + d[i].name_len, i, false };
	}
	failed += fail_overlaps(s, n, status);
	free(s);
	return failed;
}

/* ---- duplicate names in a write ---- */

struct dup_key {
	uint32_t layer, len;
	const char *name;
	uint32_t idx;
};

static int dup_cmp(const void *pa, const void *pb)
{
	const struct dup_key *a = pa, *b = pb;
	int c;

	if (a->layer != b->layer)
		return a->layer < b->layer ? -1 : 1;
	if (a->len != b->len)
		return a->len < b->len ? -1 : 1;
	c = memcmp(a->name, b->name, a->len);
	if (c)
		return c;
	return a->idx < b->idx ? -1 : a->idx > b->idx;
}

static bool dup_same(const struct dup_key *a, const struct dup_key *b)
{
	return a->layer == b->layer && a->len == b->len &&
	       memcmp(a->name, b->name, a->len) == 0;
}

long kvfs_batch_check_dups(uint32_t count, const struct kvfs_page_desc *d,
			   const char *const *names, int32_t *status)
{
	struct dup_key *k;
	size_t n = 0;
	long failed = 0;

	k = malloc(((size_t)count + 1) * sizeof(*k));
	if (!k)
		return -ENOMEM;
	for (uint32_t i = 0; i < count; i++)
		if (status[i] == 0)
			k[n++] = (struct dup_key){ d[i].layer, d[i].name_len, names[i], i };
	qsort(k, n, sizeof(*k), dup_cmp);
	/* Equal keys are adjacent: fail every member of a run longer than one. */
	for (size_t i = 0; i < n; i++) {
		bool dup = (i > 0 && dup_same(&k[i], &k[i - 1])) ||
			   (i + 1 < n && dup_same(&k[i], &k[i + 1]));

		if (dup) {
			status[k[i].idx] = -EINVAL;
			failed++;
		}
	}
	free(k);
	return failed;
}
