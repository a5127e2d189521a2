/*
 * Recovery at open: kv_store_mark_used() declares the extents the manifest
 * names, kv_store_reclaim() returns every other byte of the segment files
 * found at open and builds the allocator from what remains (store.c, rule
 * 4). Segment files made since the open are left alone: the allocator has
 * known all of them from the start.
 *
 * An extent freed before reclaim, in a segment found at open, is recorded
 * here (early_free_locked) rather than returned: the allocator does not
 * know that segment's ranges yet. Whether its caller then marks it or not,
 * reclaim returns it: an early free cancels the equal mark. That lets a
 * mount remove pages while its index still loads (the caller marks every
 * extent its manifest held at open, removed or not, until the removal is
 * durable) without a free racing the reclaim: freed before, the range is
 * returned by the reclaim; freed after, it was marked, so it is a plain
 * free of a live range. On a stripe missing from a degraded open nothing
 * is punched either way; only the counts its marks add are taken off.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store_i.h"
static int mark_invalid(const struct kv_extent *e, const char *why)
{
	kv_log(KV_LOG_ERR, "manifest extent stripe %" PRIu32 " segment %" PRIu32
	       " offset %" PRIu64 " length %" PRIu64 ": %s", e->stripe,
	       e->segment, e->offset, e->length, why);
	return KV_ERR_CORRUPT;
}

int kv_store_mark_used(struct kv_store *s, const struct kv_extent *e)
{
	uint64_t fp = kv_extent_footprint(e);
	struct segment *seg;
	int rc = 0;

	pthread_mutex_lock(&s->lock);
	if (s->reclaimed) {
		kv_log(KV_LOG_ERR, "store: kv_store_mark_used after reclaim");
		rc = -EINVAL;
	} else if (e->stripe >= s->nstripes) {
		rc = mark_invalid(e, "no such stripe");
	} else if (s->stripes[e->stripe].missing) {
		/* Unchecked and kept: the stripe is not here to check against,
		 * and its pages must still be there when it comes back. */
		s->used += fp;
		s->extents++;
	} else if (e->length == 0 || e->offset % KV_ALIGN) {
		rc = mark_invalid(e, "empty or misaligned");
	} else if (e->length > s->segment_size ||
		   e->offset > s->segment_size - fp) {
		rc = mark_invalid(e, "beyond the segment size");
	} else if (!(seg = segment_find(&s->stripes[e->stripe], e->segment))) {
		rc = mark_invalid(e, "segment file missing");
	} else if (seg->fresh) {
		/* allocated since the open: counted live already */
	} else if (seg->file_size < e->offset + fp) {
		rc = mark_invalid(e, "segment file too short");
	} else {
		/* overlaps are found by kv_store_reclaim, after one sort */
		rc = rangevec_push(&seg->marks, e->offset, fp);
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

static uint64_t allocated_bytes(int fd)
{
	struct stat sb;

	return fstat(fd, &sb) == 0 ? (uint64_t)sb.st_blocks * 512 : 0;
}

/* Punch the gaps between marked extents, truncate after the last one. */
static int segment_reclaim(struct kv_store *s, struct stripe *st,
			   struct segment *seg, struct kv_reclaim_stats *stats)
{
	uint64_t before = allocated_bytes(seg->fd), after, pos = 0;
	int rc;

	for (size_t i = 0; i < seg->marks.n; i++) {
		const struct range *m = &seg->marks.v[i];

		if (m->off > pos) {
			rc = segment_punch(st, seg, pos, m->off - pos);
			if (rc && rc != -EOPNOTSUPP)
				return rc;
			rc = rangevec_push(&seg->freel, pos, m->off - pos);
			if (rc)
				return rc;
		}
		pos = m->off + m->len;
		s->used += m->len;
	}
	if (seg->file_size > pos && ftruncate(seg->fd, (off_t)pos) < 0) {
		rc = -errno;
		kv_log(KV_LOG_ERR, "%s/seg-%08" PRIu32 ": cannot truncate to %"
		       PRIu64 ": %s", st->path, seg->num, pos, kv_strerror(rc));
		return rc;
	}
	seg->live = seg->marks.n;
	s->extents += seg->marks.n;
	seg->bump = pos;
	seg->largest_free = rangevec_largest(&seg->freel);
	rangevec_release(&seg->marks);
	after = allocated_bytes(seg->fd);
	if (before > after)
		stats->bytes_reclaimed += before - after;
	return 0;
}

static int stripe_reclaim(struct kv_store *s, struct stripe *st,
			  struct kv_reclaim_stats *stats)
{
	size_t i = 0;
	int rc;

	while (i < st->nsegs) {
		struct segment *seg = st->segs[i];

		if (seg->fresh) {   /* made since the open: nothing in it is unknown */
			i++;
			continue;
		}
		if (seg->marks.n > 0) {
			rc = segment_reclaim(s, st, seg, stats);
			if (rc)
				return rc;
			i++;
			continue;
		}
		uint64_t bytes = allocated_bytes(seg->fd);

		rc = segment_unlink(st, seg);  /* drops it from segs[] */
		if (rc)
			return rc;
		stats->segments_removed++;
		stats->bytes_reclaimed += bytes;
	}
	return 0;
}

int early_free_locked(struct kv_store *s, struct segment *seg,
		      const struct kv_extent *e)
{
	uint64_t fp = kv_extent_footprint(e);
	int rc = rangevec_push(&seg->early, e->offset, fp);

	/* The budget counts the files found at open as used until reclaim:
	 * this much less now, so that eviction while the index loads sees the
	 * room it made (the blocks go back to the disk at the reclaim). */
	if (rc == 0)
		s->found -= fp <= s->found ? fp : s->found;
	if (rc)
		kv_log(KV_LOG_ERR, "store: extent stripe %" PRIu32 " segment %" PRIu32
		       " offset %" PRIu64 " freed before reclaim cannot be remembered (%s): "
		       "it stays allocated until the next mount", e->stripe, e->segment,
		       e->offset, kv_strerror(rc));
	return rc;
}

/*
 * Drop every mark an early free cancels (both lists sorted: one merge). A
 * mark is cancelled only by a free of exactly its range; an early free
 * that matches no mark needs nothing (unmarked, the range is returned).
 */
static void marks_cancel_early(struct segment *seg)
{
	struct rangevec *m = &seg->marks, *f = &seg->early;
	size_t i, j = 0, k = 0;

	if (f->n == 0)
		return;
	rangevec_sort_check(f);   /* sorts; a range freed twice is one free */
	for (i = 0; i < m->n; i++) {
		while (j < f->n && f->v[j].off < m->v[i].off)
			j++;
		if (j < f->n && f->v[j].off == m->v[i].off && f->v[j].len == m->v[i].len)
			continue;
		m->v[k++] = m->v[i];
	}
	m->n = k;
	rangevec_release(f);
}

/*
 * Sort every segment's marks and refuse two that overlap, before anything
 * is punched: a manifest that claims one byte twice changes nothing. Then
 * drop the marks that early frees cancel.
 */
static int marks_check(struct kv_store *s)
{
	for (unsigned i = 0; i < s->nstripes; i++) {
		const struct stripe *st = &s->stripes[i];

		for (size_t j = 0; j < st->nsegs; j++) {
			struct rangevec *m = &st->segs[j]->marks;
			size_t k = rangevec_sort_check(m);

			if (k == 0) {
				marks_cancel_early(st->segs[j]);
				continue;
			}
			kv_log(KV_LOG_ERR, "manifest extents on stripe %u segment %"
			       PRIu32 " at offset %" PRIu64 " (%" PRIu64 " bytes on "
			       "disk) and offset %" PRIu64 " (%" PRIu64 " bytes) overlap",
			       i, st->segs[j]->num, m->v[k - 1].off, m->v[k - 1].len,
			       m->v[k].off, m->v[k].len);
			return KV_ERR_CORRUPT;
		}
	}
	return 0;
}

int kv_store_reclaim(struct kv_store *s, struct kv_reclaim_stats *out)
{
	struct kv_reclaim_stats stats = { 0 };
	int rc = 0;

	pthread_mutex_lock(&s->lock);
	if (s->reclaimed) {
		kv_log(KV_LOG_ERR, "store: kv_store_reclaim called twice");
		rc = -EINVAL;
		goto out;
	}
	rc = marks_check(s);
	for (unsigned i = 0; i < s->nstripes && !rc; i++)
		rc = stripe_reclaim(s, &s->stripes[i], &stats);
	if (rc)
		goto out;
	for (unsigned i = 0; i < s->nstripes; i++)
		for (size_t j = 0; j < s->stripes[i].nsegs; j++)
			s->stripes[i].segs[j]->fresh = false;
	s->found = 0;            /* what is live there is in used now */
	s->used -= s->missing_early.bytes <= s->used ? s->missing_early.bytes : s->used;
	s->extents -= s->missing_early.extents <= s->extents ? s->missing_early.extents
							       : s->extents;
	s->reclaimed = true;
	kv_log(KV_LOG_INFO, "store: %" PRIu64 " extents (%" PRIu64 " bytes) "
	       "live; reclaimed %" PRIu64 " bytes, removed %" PRIu64
	       " empty segments", s->extents, s->used, stats.bytes_reclaimed,
	       stats.segments_removed);
out:
	pthread_mutex_unlock(&s->lock);
	if (rc == 0)
		prealloc_start(s);   /* without it writes only extend files */
	if (out)
		*out = stats;
	return rc;
}

