/*
 * Segment preallocation: each stripe's newest segment is kept fallocate'd
 * (mode 0: the file grows) up to kv_store_opts.prealloc bytes ahead of its
 * write pointer, by a thread of its own, so payload writes land inside the
 * file instead of extending it.
 *
 * Why: ext4 takes the inode lock exclusively for an O_DIRECT write that
 * extends a file (and io_uring hands such writes to one worker per file),
 * so appending writes go one at a time: 0.38-0.44 GB/s against 1.4-1.7
 * GB/s into allocated space on this project's test VM. On tmpfs an
 * appending write allocates its pages inside the write and is serialised
 * the same way. KEEP_SIZE would not help: a write past i_size is
 * "extending" whatever blocks lie there.
 *
 * Why a thread: fallocate on tmpfs zeroes every page it allocates (tens of
 * milliseconds for 64 MiB), and allocations run under the daemon's
 * namespace lock. The allocator never waits for preallocation; a write
 * that outruns it extends the file as before.
 *
 * Accounting (docs/format.md, "Preallocation"): preallocated bytes stay
 * within the budget. used + preallocated never exceeds the capacity:
 * the thread takes at most half the room left, and an allocation that
 * would pass the capacity first gives tails back (ftruncate to the write
 * pointer). They are the store's own room, so kv_store_usage counts them
 * as available, and its `prealloc` field says how much there is. On a
 * stripe that keeps the manifest's headroom the thread stays clear of it,
 * and an allocation near it gives that stripe's tails back first. At close
 * every tail is given back; after a crash the mount's reclaim truncates
 * each segment after its last committed extent, preallocation included.
 *
 * Locking: everything here runs under kv_store.lock, which the thread
 * drops only around fallocate. While it is dropped the segment is busy
 * (pa_busy); nobody else truncates a busy segment: whoever would sets
 * pa_trim and the thread gives the tail back when its call returns.
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

#define STEP_MIN (1ull << 20)       /* smaller steps are not worth a call */
#define BACKOFF_NS 1000000000ull    /* after ENOSPC: wait before trying again */

uint64_t kv_store_prealloc_env(void)
{
	const char *env = getenv("KVFS_PREALLOC");
	unsigned long long v;
	char *end;

	if (!env || !*env)
		return KV_PREALLOC_DEFAULT;
	if (!strcmp(env, "off"))
		return 0;
	errno = 0;
	v = strtoull(env, &end, 10);
	if (errno || end == env)
		goto bad;
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	}
	if (*end)
		goto bad;
	return (uint64_t)v & ~(uint64_t)(KV_ALIGN - 1);
bad:
	kv_log(KV_LOG_WARN, "KVFS_PREALLOC=%s is not a size (like 64M, or 0/off); "
	       "using the default", env);
	return KV_PREALLOC_DEFAULT;
}

static uint64_t ahead(const struct segment *seg)
{
	return seg->prealloc_end > seg->bump ? seg->prealloc_end - seg->bump : 0;
}

static bool is_tail(const struct kv_store *s, const struct segment *seg)
{
	const struct stripe *st = &s->stripes[seg->stripe];

	return st->nsegs && st->segs[st->nsegs - 1] == seg;
}

static bool wants_more(const struct kv_store *s, const struct segment *seg)
{
	return is_tail(s, seg) && !seg->pa_busy &&
	       ahead(seg) < s->pa.ahead / 2 &&
	       (seg->bump > seg->prealloc_end ? seg->bump : seg->prealloc_end) <
	       s->segment_size;
}

void prealloc_moved(struct kv_store *s, struct segment *seg, uint64_t bump,
		    uint64_t end)
{
	struct stripe *st = &s->stripes[seg->stripe];
	uint64_t before = ahead(seg);

	seg->bump = bump;
	seg->prealloc_end = end;
	s->pa.bytes = s->pa.bytes - before + ahead(seg);
	st->pa_bytes = st->pa_bytes - before + ahead(seg);
	if (s->pa.started && !s->pa.kicked && wants_more(s, seg)) {
		s->pa.kicked = true;
		pthread_cond_signal(&s->pa.cv);
	}
}

/* Give seg's preallocated tail back: truncate the file to its write
 * pointer. Lock held, seg not busy. Everything below the write pointer is
 * an extent handed out, so nothing written is cut. 0 or -errno. */
static int trim(struct kv_store *s, struct segment *seg)
{
	struct stat sb;
	int rc = 0;

	if (fstat(seg->fd, &sb) == 0 && (uint64_t)sb.st_size > seg->bump &&
	    ftruncate(seg->fd, (off_t)seg->bump) < 0)
		rc = -errno;
	if (rc) {
		kv_log(KV_LOG_ERR, "%s/seg-%08" PRIu32 ": cannot give back %" PRIu64
		       " preallocated bytes: %s; they stay counted",
		       s->stripes[seg->stripe].path, seg->num, ahead(seg),
		       kv_strerror(rc));
		return rc;
	}
	s->pa.trims += ahead(seg) > 0;
	prealloc_moved(s, seg, seg->bump, seg->bump);
	return 0;
}

/* Give back (or mark for giving back) every tail of one stripe. */
static bool trim_stripe(struct kv_store *s, struct stripe *st)
{
	bool any = false;

	for (size_t i = 0; i < st->nsegs; i++) {
		struct segment *seg = st->segs[i];

		if (seg->pa_busy)
			seg->pa_trim = true;
		else if (ahead(seg) && trim(s, seg) == 0)
			any = true;
	}
	return any;
}

bool prealloc_trim_stripe(struct kv_store *s, struct stripe *st)
{
	return st->pa_bytes && trim_stripe(s, st);
}

void prealloc_make_room(struct kv_store *s, uint64_t fp)
{
	while (s->capacity && s->used + fp <= s->capacity &&
	       s->used + s->pa.bytes + s->pa.inflight + fp > s->capacity) {
		bool any = false;

		for (unsigned i = 0; i < s->nstripes && !any; i++)
			if (s->stripes[i].pa_bytes)
				any = trim_stripe(s, &s->stripes[i]);
		if (any)
			continue;
		if (!s->pa.inflight)
			break;        /* a tail could not be given back (logged) */
		s->pa.busy->pa_trim = true;
		pthread_cond_wait(&s->pa.done_cv, &s->lock);
	}
}

void prealloc_forget(struct kv_store *s, struct segment *seg)
{
	if (seg->pa_busy)
		seg->pa_trim = true;
	prealloc_moved(s, seg, seg->bump, 0);
}

/* Bytes the thread may take now on st: half the room left under the
 * capacity and on the stripe's filesystem, so that preallocation never
 * decides alone what is full. On the manifest's filesystem it keeps
 * clear of twice the headroom and the write-back lag: the daemon's
 * reserve file (8 MiB) is made again only with the headroom free beside
 * it, and preallocation must not be what delays it. */
static uint64_t room(struct kv_store *s, const struct stripe *st)
{
	uint64_t held = s->used + s->pa.bytes, r = UINT64_MAX, avail, keep;
	struct statvfs vfs;

	if (s->capacity)
		r = s->capacity > held ? s->capacity - held : 0;
	if (fstatvfs(st->dirfd, &vfs) == 0) {
		avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
		keep = st->keeps_headroom ? 2 * (atomic_load(&s->headroom) +
						 atomic_load(&s->headroom_lag)) : 0;
		avail = avail > keep ? avail - keep : 0;
		if (avail < r)
			r = avail;
	}
	return r / 2;
}

/* The next range to preallocate, or NULL. */
static struct segment *pick(struct kv_store *s, uint64_t *off, uint64_t *len)
{
	uint64_t now = 0;

	for (unsigned k = 0; k < s->nstripes; k++) {
		unsigned i = (s->pa.rr + k) % s->nstripes;
		struct stripe *st = &s->stripes[i];
		struct segment *seg;
		uint64_t start, end, n;

		if (!st->nsegs || st->pa_off || !stripe_in_rotation(st))
			continue;
		if (st->pa_until && (now ? now : (now = now_ns())) < st->pa_until)
			continue;
		seg = st->segs[st->nsegs - 1];
		if (!wants_more(s, seg))
			continue;
		start = seg->bump > seg->prealloc_end ? seg->bump : seg->prealloc_end;
		end = seg->bump + s->pa.ahead;
		if (end > s->segment_size)
			end = s->segment_size;
		n = end - start;
		if (n > room(s, st))
			n = room(s, st) & ~(uint64_t)(KV_ALIGN - 1);
		if (n == 0 || (n < STEP_MIN && start + n < s->segment_size))
			continue;
		s->pa.rr = (i + 1) % s->nstripes;
		*off = start;
		*len = n;
		return seg;
	}
	return NULL;
}

static void failed(struct kv_store *s, struct segment *seg, uint64_t off,
		   uint64_t len, int rc)
{
	struct stripe *st = &s->stripes[seg->stripe];

	if (rc == -EOPNOTSUPP) {
		st->pa_off = true;
		kv_log(KV_LOG_WARN, "store: %s cannot preallocate segments; writes "
		       "there extend their files (slower on ext4)", st->path);
	} else if (rc == -ENOSPC || rc == -EDQUOT) {
		st->pa_until = now_ns() + BACKOFF_NS;
		kv_log(KV_LOG_DEBUG, "store: %s full while preallocating %" PRIu64
		       " bytes; trying again later", st->path, len);
	} else {
		st->pa_until = now_ns() + BACKOFF_NS;
		kv_log(KV_LOG_ERR, "store: %s/seg-%08" PRIu32 ": preallocating %"
		       PRIu64 "+%" PRIu64 ": %s", st->path, seg->num, off, len,
		       kv_strerror(rc));
	}
}

static void *prealloc_main(void *arg)
{
	struct kv_store *s = arg;

	pthread_setname_np(pthread_self(), "kvfs-prealloc");
	pthread_mutex_lock(&s->lock);
	while (!s->pa.kicked && !s->pa.stop)   /* the first allocation */
		pthread_cond_wait(&s->pa.cv, &s->lock);
	while (!s->pa.stop) {
		uint64_t off, len;
		struct segment *seg = pick(s, &off, &len);
		int rc;

		if (!seg) {
			s->pa.kicked = false;
			while (!s->pa.kicked && !s->pa.stop)
				pthread_cond_wait(&s->pa.cv, &s->lock);
			continue;
		}
		seg->pa_busy = true;
		seg->pa_trim = false;
		s->pa.busy = seg;
		s->pa.inflight = len;
		atomic_fetch_add(&seg->refs, 1);   /* the fd, while unlocked */
		pthread_mutex_unlock(&s->lock);
		do {
			rc = fallocate(seg->fd, 0, (off_t)off, (off_t)len);
		} while (rc < 0 && errno == EINTR);
		rc = rc < 0 ? -errno : 0;
		pthread_mutex_lock(&s->lock);
		seg->pa_busy = false;
		s->pa.busy = NULL;
		s->pa.inflight = 0;
		if (rc == 0 && !seg->pa_trim) {
			s->pa.calls++;
			prealloc_moved(s, seg, seg->bump, off + len > seg->prealloc_end ?
				       off + len : seg->prealloc_end);
		} else {
			if (rc)
				failed(s, seg, off, len, rc);
			/* a failed call may have taken some blocks; a segment
			 * drained or unlinked meanwhile wants none */
			trim(s, seg);
		}
		seg->pa_trim = false;
		pthread_cond_broadcast(&s->pa.done_cv);
		segment_unref(seg);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

int prealloc_start(struct kv_store *s)
{
	int rc;

	if (!s->pa.ahead)
		return 0;
	pthread_cond_init(&s->pa.cv, NULL);
	pthread_cond_init(&s->pa.done_cv, NULL);
	rc = -pthread_create(&s->pa.thread, NULL, prealloc_main, s);
	if (rc) {
		kv_log(KV_LOG_ERR, "store: cannot start the preallocation thread: %s; "
		       "segments are not preallocated", kv_strerror(rc));
		return rc;
	}
	/* Not woken now: the first allocation does it, after the caller has
	 * set the headroom (kv_store_set_headroom) it must stay clear of. */
	pthread_mutex_lock(&s->lock);
	s->pa.started = true;
	pthread_mutex_unlock(&s->lock);
	kv_log(KV_LOG_INFO, "store: segments preallocated up to %" PRIu64
	       " bytes ahead of each stripe's writes", s->pa.ahead);
	return 0;
}

void prealloc_stop(struct kv_store *s)
{
	if (!s->pa.started)
		return;
	pthread_mutex_lock(&s->lock);
	s->pa.stop = true;
	pthread_cond_signal(&s->pa.cv);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->pa.thread, NULL);
	pthread_mutex_lock(&s->lock);
	s->pa.started = false;
	for (unsigned i = 0; i < s->nstripes; i++)
		if (s->stripes[i].pa_bytes)
			trim_stripe(s, &s->stripes[i]);
	kv_log(KV_LOG_INFO, "store: %" PRIu64 " preallocation calls, %" PRIu64
	       " tails given back before close", s->pa.calls, s->pa.trims);
	pthread_mutex_unlock(&s->lock);
	pthread_cond_destroy(&s->pa.cv);
	pthread_cond_destroy(&s->pa.done_cv);
}
