/*
 * Fast-path batch validation. Everything here is arithmetic on numbers an
 * engine (or an attacker sharing the uid) controls, so every sum is checked
 * for overflow and every range is compared with the region's length before
 * the daemon derives an address from it.
 */
#include <errno.h>
#include <stdlib.h>

#include "batch_check.h"

/* [off, off + len) lies inside a region of region_len bytes. */
static bool range_ok(uint64_t off, uint64_t len, uint64_t region_len)
{
	return off <= region_len && len <= region_len - off;
}

int kvfs_batch_check_arg(const struct kvfs_batch_arg *a, uint64_t region_len,
			 bool is_read)
{
	if (a->abi != KVFS_ABI_VERSION)
		return -EPROTO;
	if (a->flags || a->reserved[0] || a->reserved[1])
		return -EINVAL;
	if (a->count == 0 || a->desc_off % 8)
		return -EINVAL;
	if (a->count > KVFS_BATCH_MAX)
		return -E2BIG;
	if (is_read && a->group != 0)
		return -EINVAL;
	if (!is_read && a->group > 1 && a->count % a->group)
		return -EINVAL;
	/* count <= 2^20 and a descriptor is 64 bytes: the product fits. */
	if (!range_ok(a->desc_off, (uint64_t)a->count * sizeof(struct kvfs_page_desc),
		      region_len))
		return -ERANGE;
	return 0;
}

static int32_t check_one(const struct kvfs_page_desc *d, uint64_t region_len,
			 bool is_read)
{
	bool by_name = !is_read || d->handle == 0;

	if (d->reserved)
		return -EINVAL;
	if (by_name) {
		if (d->name_len == 0)
			return -EINVAL;
		if (d->name_len > KVFS_NAME_MAX)
			return -ENAMETOOLONG;
		if (!range_ok(d->name_off, d->name_len, region_len))
			return -ERANGE;
	}
	if (is_read) {
		if (!range_ok(d->dst_off, d->dst_len, region_len))
			return -ERANGE;
		if (d->dst_len == 0)
			return -ENOBUFS;
	}
	return 0;
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
			    bool is_read, int32_t *status)
{
	struct span *s;
	size_t n = 0;
	long failed = 0;

	for (uint32_t i = 0; i < a->count; i++) {
		status[i] = check_one(&d[i], region_len, is_read);
		failed += status[i] != 0;
	}
	if (!is_read)
		return failed;   /* lookups write only inside the descriptors */

	s = malloc(((size_t)a->count * 2 + 1) * sizeof(*s));
	if (!s)
		return -ENOMEM;
	s[n++] = (struct span){ a->desc_off,
		a->desc_off + (uint64_t)a->count * sizeof(*d), -1, false };
	for (uint32_t i = 0; i < a->count; i++) {
		if (status[i])
			continue;
		s[n++] = (struct span){ d[i].dst_off, d[i].dst_off + d[i].dst_len, i, true };
		if (d[i].handle == 0)
			s[n++] = (struct span){ d[i].name_off,
				d[i].name_off + d[i].name_len, i, false };
	}
	failed += fail_overlaps(s, n, status);
	free(s);
	return failed;
}
