/*
 * Extent store lifecycle, allocator and recovery. kv_store_open() opens the
 * stripe directories (segment.c) and starts the I/O thread (uring.c);
 * kv_store_mark_used() and kv_store_reclaim() rebuild the allocator from the
 * extents the manifest says are committed; kv_extent_alloc() and
 * kv_extent_free() then hand out and take back 4 KiB aligned ranges of
 * segment files, round-robin over the stripes.
 *
 * NOTES ON THE DESIGN
 *
 * The store never decides what is committed: the manifest (index/) does, and
 * the store only has to make sure that whatever the manifest says is
 * committed is really on disk, and that everything else is given back.
 *
 * Crash-safety rules:
 *
 *   1. An extent's bytes are written and made durable (kv_store_sync, one
 *      fdatasync per segment file) before any manifest row naming the extent
 *      commits. Writes always send the whole footprint, so the file is at
 *      least offset+footprint long once the data is durable.
 *
 *   2. A new segment file's directory entry is fsync'ed (segment_create)
 *      before any extent in it is handed out, so a durable manifest row never
 *      names a file whose creation a crash could undo. Stripe markers are
 *      written to a temporary name, fsync'ed, renamed and the directory
 *      fsync'ed: a crash leaves no marker or a whole one.
 *
 *   3. A range is reused only after the caller has durably removed every
 *      manifest reference to it: kv_extent_free is called after that
 *      transaction commits. Were it called earlier, a crash could resurrect a
 *      row pointing at another page's bytes; the checksum would still turn
 *      that into EIO, never into wrong data (rule 5).
 *
 *   4. At open nothing on disk is trusted except the manifest's list of
 *      extents. Every byte not covered by a marked extent is either written
 *      but never committed, or freed with its punch lost in a crash;
 *      kv_store_reclaim punches it, truncates tails and unlinks empty
 *      segments. Reclaim is idempotent: a crash in it is repaired by the next.
 *      A stripe left out of a degraded open is the exception: what is on
 *      it is unknown, so it is neither checked nor reclaimed, and its
 *      marked extents are taken on trust until it is back.
 *      Segment files made after the open are the other exception: the
 *      allocator has handed out every range in them, so until reclaim it
 *      allocates there only (a mount takes new pages while its manifest is
 *      still being read), and reclaim leaves them alone.
 *
 *   5. Data from disk is validated, never asserted: a marked extent that is
 *      misaligned, beyond its segment size, in a missing or short file, or
 *      overlapping another is KV_ERR_CORRUPT; a payload whose XXH3-128 does
 *      not match is KV_ERR_CHECKSUM and none of its bytes are handed out.
 *
 *   6. kv_extent_free punches the range while the caller still owns it and
 *      only then puts it on the free list, so the punch can never destroy the
 *      bytes of a later allocation of the same range.
 *
 * Extent lifecycle (one row per state; "via" is the function that enters it):
 *
 *   state      | meaning                                | via
 *   -----------+----------------------------------------+-----------------------
 *   free       | in a segment free list, or above a     | kv_store_reclaim,
 *              | segment's bump pointer                 | kv_extent_free
 *   allocated  | handed to one caller; bytes undefined  | kv_extent_alloc
 *   written    | bytes in the file (maybe only cached)  | kv_store_io[_async]
 *              |                                        | with KV_IO_WRITE
 *   synced     | bytes durable                          | kv_store_sync
 *   committed  | a durable manifest row names it        | the manifest caller;
 *              |                                        | at open, re-declared
 *              |                                        | by kv_store_mark_used
 *   freed      | blocks punched, range free again;      | kv_extent_free
 *   (punched)  | segment unlinked when it empties       |
 *
 *   A crash in any state before committed loses the extent: it is not
 *   marked at the next open and kv_store_reclaim returns its space. A crash
 *   after committed keeps it.
 *
 * Placement: consecutive allocations go to successive stripes. Within a
 * stripe the lowest-numbered segment with room wins, first from its free list
 * (first fit) and then above its bump pointer; when none has room the next
 * segment number is created and becomes the tail. Packing low segments first
 * lets high ones drain and be unlinked. A segment left with no live extents
 * is unlinked, except the tail, which is truncated to zero and reused. Where
 * a file takes one write at a time (tmpfs, ramfs), allocations take the
 * lowest few segments with room in turn instead (heads.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "store_i.h"

#define ENOSPC_BACKOFF_NS 1000000000ull  /* skip a full stripe this long */
#define UUID_MAX 255

uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void *kv_buf_alloc(size_t len)
{
	size_t size = (len + KV_ALIGN - 1) & ~(size_t)(KV_ALIGN - 1);
	void *p;

	if (size == 0)
		size = KV_ALIGN;
	if (posix_memalign(&p, KV_ALIGN, size))
		return NULL;
	memset(p, 0, size);
	return p;
}

/* ---- lifecycle ---- */

static bool uuid_valid(const char *uuid)
{
	size_t n = uuid ? strlen(uuid) : 0;

	if (n == 0 || n > UUID_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (uuid[i] <= ' ' || uuid[i] == 0x7f)
			return false;
	return true;
}

static int opts_check(const struct kv_store_opts *o, uint64_t segsize)
{
	if (o->nstripes == 0 || o->nstripes > KV_MAX_STRIPES || !o->stripes) {
		kv_log(KV_LOG_ERR, "store: %u stripes given, need 1 to %u",
		       o->nstripes, KV_MAX_STRIPES);
		return -EINVAL;
	}
	for (unsigned i = 0; i < o->nstripes; i++) {
		if (!o->stripes[i] || !o->stripes[i][0]) {
			kv_log(KV_LOG_ERR, "store: stripe %u has no path", i);
			return -EINVAL;
		}
	}
	if (!uuid_valid(o->uuid)) {
		kv_log(KV_LOG_ERR, "store: uuid must be 1-%d printable characters "
		       "without spaces", UUID_MAX);
		return -EINVAL;
	}
	if (segsize < KV_SEGMENT_SIZE_MIN || segsize > KV_SEGMENT_SIZE_MAX ||
	    segsize % KV_ALIGN) {
		kv_log(KV_LOG_ERR, "store: segment size %" PRIu64 " must be a "
		       "multiple of %u, at least %llu and at most %llu (the index records "
		       "offsets in a segment below 16 TiB and pages below 1 TiB)", segsize,
		       KV_ALIGN, KV_SEGMENT_SIZE_MIN, KV_SEGMENT_SIZE_MAX);
		return -EINVAL;
	}
	return 0;
}

/* Degraded open: stripe i could not be opened (rc); go on without it. */
static int stripe_leave_out(struct kv_store *s, unsigned i, int rc)
{
	struct stripe *st = &s->stripes[i];

	if (st->dirfd >= 0)
		close(st->dirfd);
	st->dirfd = -1;
	st->missing = true;
	st->open_error = rc;
	kv_log(KV_LOG_WARN, "store: stripe %u (%s) is missing (%s); opening "
	       "degraded without it: its pages give EIO, nothing is written "
	       "or reclaimed there", i, st->path ? st->path : "?",
	       kv_strerror(rc));
	return 0;
}

static int present_stripes(const struct kv_store *s)
{
	for (unsigned i = 0; i < s->nstripes; i++)
		if (!s->stripes[i].missing)
			return 0;
	kv_log(KV_LOG_ERR, "store: none of the %u stripes could be opened",
	       s->nstripes);
	return -ENOENT;
}

int kv_store_open(const struct kv_store_opts *o, struct kv_store **out)
{
	uint64_t segsize;
	struct kv_store *s;
	int rc;

	*out = NULL;
	segsize = o->segment_size ? o->segment_size : KV_SEGMENT_SIZE_DEFAULT;
	rc = opts_check(o, segsize);
	if (rc)
		return rc;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->stripes = calloc(o->nstripes, sizeof(s->stripes[0]));
	if (!s->stripes) {
		free(s);
		return -ENOMEM;
	}
	pthread_mutex_init(&s->lock, NULL);
	s->nstripes = o->nstripes;
	s->segment_size = segsize;
	s->capacity = o->capacity;
	s->direct = !o->no_direct;
	s->pa.ahead = o->prealloc & ~(uint64_t)(KV_ALIGN - 1);
	for (unsigned i = 0; i < s->nstripes; i++)
		s->stripes[i].dirfd = -1;

	for (unsigned i = 0; i < s->nstripes; i++) {
		rc = stripe_open(s, i, o->stripes[i], o->uuid, o->create);
		if (rc && o->degraded && !o->create && rc != -ENOMEM)
			rc = stripe_leave_out(s, i, rc);
		if (rc)
			goto fail;
	}
	rc = present_stripes(s);
	for (unsigned i = 0; i < s->nstripes && !rc; i++)
		if (!s->stripes[i].missing)
			rc = stripe_scan(s, &s->stripes[i]);
	if (rc)
		goto fail;
	rc = engine_start(s, o->queue_depth ? o->queue_depth : 64);
	if (rc)
		goto fail;
	kv_log(KV_LOG_INFO, "store: %u stripe%s, %" PRIu64 "-byte segments, "
	       "%s I/O, queue depth %u", s->nstripes, s->nstripes > 1 ? "s" : "",
	       s->segment_size, s->direct ? "direct" : "buffered", s->eng.qd);
	*out = s;
	return 0;

fail:
	kv_store_close(s);
	return rc;
}

void kv_store_close(struct kv_store *s)
{
	if (!s)
		return;
	engine_stop(s);
	prealloc_stop(s);    /* no I/O in flight: give the tails back */
	for (unsigned i = 0; i < s->nstripes; i++)
		stripe_close(&s->stripes[i]);
	free(s->stripes);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

const char *kv_store_stripe_path(struct kv_store *s, unsigned i)
{
	return i < s->nstripes ? s->stripes[i].path : NULL;
}

uint64_t kv_store_segment_size(struct kv_store *s)
{
	return s->segment_size;
}

/* ---- allocator ---- */

/* Called from the I/O thread when a write hit ENOSPC/EDQUOT on this stripe. */
void stripe_mark_full(struct kv_store *s, uint32_t stripe)
{
	if (stripe < s->nstripes)
		atomic_store(&s->stripes[stripe].full_until,
			     now_ns() + ENOSPC_BACKOFF_NS);
}

/* One log line per second at most: a full cache fails every allocation. */
static void log_enospc(struct kv_store *s, const char *why, uint64_t fp)
{
	uint64_t now = now_ns();

	if (s->enospc_logged && now - s->enospc_logged < 1000000000ull)
		return;
	s->enospc_logged = now;
	if (s->capacity)
		kv_log(KV_LOG_WARN, "store: no space for a %" PRIu64 "-byte "
		       "extent: %s (%" PRIu64 " of %" PRIu64 " bytes used)", fp,
		       why, s->used, s->capacity);
	else
		kv_log(KV_LOG_WARN, "store: no space for a %" PRIu64 "-byte "
		       "extent: %s (%" PRIu64 " bytes used)", fp, why, s->used);
}

bool segment_has_room(const struct kv_store *s, const struct segment *seg,
		      uint64_t fp)
{
	/* Before reclaim only a segment made since the open is known: what
	 * lies in the others, and where their live data ends, is not. */
	if (!s->reclaimed && !seg->fresh)
		return false;
	return seg->largest_free >= fp || s->segment_size - seg->bump >= fp;
}

/* Take fp bytes from seg, which has room: first fit from its free list,
 * else above its bump pointer (a new segment's bump is 0). */
static uint64_t segment_take(struct kv_store *s, struct segment *seg, uint64_t fp)
{
	uint64_t off, had;

	if (seg->largest_free >= fp) {
		had = rangevec_take(&seg->freel, fp, &off);
		if (had == seg->largest_free)
			seg->largest_free = rangevec_largest(&seg->freel);
		return off;
	}
	off = seg->bump;
	prealloc_moved(s, seg, seg->bump + fp, seg->prealloc_end);
	return off;
}

static int stripe_alloc(struct kv_store *s, struct stripe *st, uint64_t fp,
			struct kv_extent *e)
{
	struct segment *seg = NULL;
	int rc;

	if (st->heads > 1) {
		rc = heads_pick(s, st, fp, &seg);
		if (rc)
			return rc;
	} else {
		for (size_t i = 0; i < st->nsegs && !seg; i++)
			if (segment_has_room(s, st->segs[i], fp))
				seg = st->segs[i];
		if (!seg && (rc = segment_create(s, st, &seg)))
			return rc;
	}
	e->offset = segment_take(s, seg, fp);
	seg->live++;
	e->stripe = seg->stripe;
	e->segment = seg->num;
	return 0;
}

/* Take the new extent's blocks now, near the headroom (headroom.c); if
 * the disk has none, the extent goes back and the stripe counts as full
 * for a second. */
static int claim_blocks(struct kv_store *s, struct kv_extent *e)
{
	int rc = stripe_claim_blocks(s, e);

	if (rc == 0)
		return 0;
	kv_extent_free(s, e);
	if (rc == -ENOSPC || rc == -EDQUOT) {
		stripe_mark_full(s, e->stripe);
		pthread_mutex_lock(&s->lock);
		log_enospc(s, "the manifest's filesystem is full", kv_extent_footprint(e));
		pthread_mutex_unlock(&s->lock);
		return -ENOSPC;
	}
	if (stripe_error_is_device(rc))
		stripe_write_failed(s, e->stripe, rc);
	return rc;
}

int kv_extent_alloc(struct kv_store *s, uint64_t length, struct kv_extent *out)
{
	struct kv_extent e = { .length = length };
	uint64_t fp = kv_extent_footprint(&e), now = 0, until;
	unsigned out_of_rotation = 0, short_of_headroom = 0;
	bool near = false;
	int rc = -ENOSPC;

	if (length == 0)
		return -EINVAL;
	if (length > s->segment_size) {
		kv_log(KV_LOG_ERR, "store: extent of %" PRIu64 " bytes is larger "
		       "than the segment size %" PRIu64, length,
		       s->segment_size);
		return -EFBIG;
	}
	pthread_mutex_lock(&s->lock);
	prealloc_make_room(s, fp);   /* used + preallocated stay in the budget */
	if (s->capacity && s->used + s->found + fp > s->capacity) {
		log_enospc(s, "capacity budget reached", fp);
		goto out;
	}
	for (unsigned k = 0; k < s->nstripes; k++) {
		unsigned i = (s->rr + k) % s->nstripes;
		struct stripe *st = &s->stripes[i];

		if (!stripe_in_rotation(st)) {
			out_of_rotation++;
			continue;
		}
		until = atomic_load(&st->full_until);
		if (until && (now ? now : (now = now_ns())) < until)
			continue;
		if (stripe_short_of_headroom(s, st, fp, &near) ||
		    (near && prealloc_trim_stripe(s, st) &&
		     stripe_short_of_headroom(s, st, fp, &near))) {
			short_of_headroom++;    /* the manifest's room (headroom.c) */
			continue;
		}
		rc = stripe_alloc(s, st, fp, &e);
		if (rc == -ENOSPC || rc == -EDQUOT) {
			stripe_mark_full(s, i);
			continue;
		}
		if (rc && stripe_error_is_device(rc)) {
			/* a new segment file could not be made there */
			stripe_write_failed(s, i, rc);
			out_of_rotation += !stripe_in_rotation(st);
			continue;
		}
		if (rc)
			goto out;
		s->rr = (i + 1) % s->nstripes;
		break;
	}
	if (rc && out_of_rotation == s->nstripes) {
		stripe_log_none_usable(s);
		rc = -EIO;
		goto out;
	}
	if (rc == -ENOSPC || rc == -EDQUOT) {
		log_enospc(s, short_of_headroom ? "every stripe is full or keeps the "
			   "headroom of the manifest's filesystem" : "every stripe is full", fp);
		rc = -ENOSPC;
		goto out;
	}
	if (rc)
		goto out;
	s->used += fp;
	s->extents++;
	*out = e;
out:
	pthread_mutex_unlock(&s->lock);
	return rc == 0 && near ? claim_blocks(s, out) : rc;
}

/* Find the live extent e names; -EINVAL (a caller bug) if there is none. */
static int extent_lookup(struct kv_store *s, const struct kv_extent *e,
			 struct segment **out)
{
	uint64_t fp = kv_extent_footprint(e);
	struct segment *seg = NULL;
	const char *why = NULL;

	if (e->stripe >= s->nstripes)
		why = "no such stripe";
	else if (!(seg = segment_find(&s->stripes[e->stripe], e->segment)))
		why = "no such segment";
	else if (e->length == 0 || e->length > s->segment_size ||
		 e->offset % KV_ALIGN)
		why = "misaligned, empty or too long";
	else if (e->offset + fp > seg->bump || seg->live == 0 ||
		 rangevec_overlaps(&seg->freel, e->offset, fp))
		why = "not allocated (double free?)";
	if (why) {
		kv_log(KV_LOG_ERR, "store: extent stripe %" PRIu32 " segment %"
		       PRIu32 " offset %" PRIu64 " length %" PRIu64 ": %s",
		       e->stripe, e->segment, e->offset, e->length, why);
		return -EINVAL;
	}
	*out = seg;
	return 0;
}

/*
 * Return blocks to the filesystem. Best effort: if the filesystem cannot
 * punch, the range is still reused by the allocator, and the next reclaim
 * retries for ranges that are free then.
 */
int segment_punch(struct stripe *st, struct segment *seg, uint64_t off,
		  uint64_t len)
{
	static atomic_bool warned;
	int rc;

	do {
		rc = fallocate(seg->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			       (off_t)off, (off_t)len);
	} while (rc < 0 && errno == EINTR);
	if (rc == 0)
		return 0;
	rc = -errno;
	if (rc != -EOPNOTSUPP || !atomic_exchange(&warned, true))
		kv_log(KV_LOG_WARN, "%s/seg-%08" PRIu32 ": cannot punch %" PRIu64
		       "+%" PRIu64 ": %s; space stays allocated", st->path,
		       seg->num, off, len, kv_strerror(rc));
	return rc;
}

/* A segment lost its last extent: give the whole file back. */
static void segment_drained(struct kv_store *s, struct stripe *st,
			    struct segment *seg)
{
	prealloc_forget(s, seg);   /* the truncate or unlink takes the tail */
	atomic_store(&seg->known_size, 0);   /* memread.c: shrinks only here */
	if (seg != st->segs[st->nsegs - 1]) {
		segment_unlink(st, seg);
		return;
	}
	/* The tail is where the next bump allocation goes: keep the fd. */
	if (ftruncate(seg->fd, 0) < 0)
		kv_log(KV_LOG_WARN, "%s/seg-%08" PRIu32 ": cannot truncate empty "
		       "segment: %s", st->path, seg->num, kv_strerror(-errno));
	rangevec_release(&seg->freel);
	seg->largest_free = 0;
	prealloc_moved(s, seg, 0, 0);
}

int kv_extent_free(struct kv_store *s, const struct kv_extent *e)
{
	uint64_t fp = kv_extent_footprint(e), span;
	struct segment *seg;
	struct stripe *st;
	int rc;

	pthread_mutex_lock(&s->lock);
	if (e->stripe < s->nstripes && s->stripes[e->stripe].missing) {
		/* Nothing to punch here: the reclaim of the next mount with
		 * the stripe back returns the range, as for any unmarked one.
		 * Before this reclaim its mark may be still to come. */
		if (!s->reclaimed) {
			s->missing_early.bytes += fp;
			s->missing_early.extents++;
		} else {
			s->used -= fp <= s->used ? fp : s->used;
			s->extents -= s->extents > 0;
		}
		pthread_mutex_unlock(&s->lock);
		return 0;
	}
	if (!s->reclaimed && e->stripe < s->nstripes &&
	    (seg = segment_find(&s->stripes[e->stripe], e->segment)) && !seg->fresh) {
		/* Found at open, not yet reclaimed: the allocator does not know
		 * this segment's ranges yet. Reclaim returns it (reclaim.c). */
		rc = early_free_locked(s, seg, e);
		pthread_mutex_unlock(&s->lock);
		return rc;
	}
	rc = extent_lookup(s, e, &seg);
	if (rc) {
		pthread_mutex_unlock(&s->lock);
		return rc;
	}
	st = &s->stripes[e->stripe];
	atomic_fetch_add(&seg->refs, 1);  /* keep the fd across the punch */
	pthread_mutex_unlock(&s->lock);

	segment_punch(st, seg, e->offset, fp);  /* rule 6: before the range is free */

	pthread_mutex_lock(&s->lock);
	rc = rangevec_insert_free(&seg->freel, e->offset, fp);
	if (rc == -EEXIST) {
		kv_log(KV_LOG_ERR, "store: extent stripe %" PRIu32 " segment %"
		       PRIu32 " offset %" PRIu64 " freed twice", e->stripe,
		       e->segment, e->offset);
		rc = -EINVAL;
	}
	if (rc)
		goto out;
	span = rangevec_span(&seg->freel, e->offset);
	if (span > seg->largest_free)
		seg->largest_free = span;
	seg->live--;
	s->used -= fp;
	s->extents--;
	atomic_store(&st->full_until, 0);
	if (seg->live == 0)
		segment_drained(s, st, seg);
out:
	pthread_mutex_unlock(&s->lock);
	segment_unref(seg);
	return rc;
}

/* ---- usage and verified reads ---- */

void kv_store_usage(struct kv_store *s, struct kv_store_usage *u)
{
	uint64_t fs_total = 0, fs_avail = 0, room;
	struct statvfs vfs;

	memset(u, 0, sizeof(*u));
	u->nstripes = s->nstripes;
	pthread_mutex_lock(&s->lock);
	u->used = s->used + s->found;
	u->prealloc = s->pa.bytes + s->pa.inflight;
	u->extents = s->extents;
	for (unsigned i = 0; i < s->nstripes; i++)
		u->segments += s->stripes[i].nsegs;
	pthread_mutex_unlock(&s->lock);

	for (unsigned i = 0; i < s->nstripes; i++) {
		bool seen = false;

		/* stripes sharing one filesystem must not count it twice */
		for (unsigned j = 0; j < i && !seen; j++)
			seen = s->stripes[j].dev == s->stripes[i].dev;
		if (seen || fstatvfs(s->stripes[i].dirfd, &vfs) < 0)
			continue;
		fs_total += (uint64_t)vfs.f_blocks * vfs.f_frsize;
		fs_avail += stripe_avail_less_headroom(s, &s->stripes[i],
						       (uint64_t)vfs.f_bavail * vfs.f_frsize);
	}
	fs_avail += u->prealloc;    /* blocks the filesystem counts as taken */
	u->capacity = s->capacity ? s->capacity : fs_total;
	room = u->capacity > u->used ? u->capacity - u->used : 0;
	u->avail = room < fs_avail ? room : fs_avail;
}
