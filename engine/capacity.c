/*
 * Capacity: the store's physical byte budget (mkfs --capacity, or
 * -o capacity) is never exceeded; the store's allocator refuses past it.
 *
 * Cache mode (the default) keeps writes flowing: once usage (extents plus
 * space held for pages being written) passes the high watermark, the
 * evictor thread removes least recently used pages that nobody holds open
 * (pinned pages last; a shared extent's names together, by the newest,
 * engine/victims.c) until usage is below the low watermark.
 * A writer that needs more room than is left waits for it, and gets
 * ENOSPC only when nothing is left to evict. Authoritative mode never
 * evicts: a full store refuses writes with ENOSPC.
 *
 * An eviction is an unlink the daemon makes on its own: the page leaves
 * the namespace and the kernel's name cache, its row is deleted through
 * the committer like any other, and its extent is freed once the delete
 * is durable and no reader or fast-path batch holds it. Access times
 * order the victims; they live in the index and reach the manifest
 * lazily (atime_flush, the committer's idle work every ATIME_FLUSH_SECS and
 * at unmount), so LRU order survives a restart without a write per read.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvfs_i.h"
#include "kvfs_ioctl.h"

#define EVICT_BATCH 256            /* pages forgotten per ns_lock hold */
#define EVICT_SCAN 4096            /* victims looked at per ns_lock hold */
#define SPACE_WAIT_NS (30ll * 1000000000)  /* longest a writer waits for room */
#define RUN_WAIT_MS 100            /* then it looks again */
#define RETRY_MS 20                /* evictor's next look while pages drain */
#define FULL_STUCK_RUNS 3   /* stuck runs (RETRY_MS apart) that mean full */
#define IDLE_CHECK_MS 1000  /* an idle evictor looks at usage this often, */
#define IDLE_CHECK_MAX_MS 64000   /* backing off to this while nothing can go */

struct kvfs_cap {
	pthread_mutex_t lock;          /* inside ns_lock, never around it */
	pthread_cond_t work_cv;        /* the evictor has work (or stop) */
	pthread_cond_t room_cv;        /* an eviction run ended */
	pthread_t thread;
	bool running, stop, wanted;
	uint64_t runs_started, runs_done;   /* the evictor's runs, one at a time */
	bool idle_run;                 /* the next run is the idle look's */
	long idle_ms;                  /* the idle evictor's next look */
	unsigned stuck_runs;           /* runs in a row that found nothing to evict
	                                * and left nothing draining */
	uint64_t need;                 /* most bytes a waiting writer needs */
	int64_t atime_flushed_ns;      /* pages touched before this are in the manifest */
	bool atime_walk_all;           /* a flush failed: the next visits every page */
	struct kvfs_cap_stats st;
};

/* ---- usage ---- */

static uint64_t usage_now(struct kvfs *fs, uint64_t *used)
{
	struct kv_store_usage u;
	uint64_t reserved;

	kvfs_store_usage(fs, &u);
	pthread_mutex_lock(&fs->ns_lock);
	reserved = fs->reserved_bytes;
	pthread_mutex_unlock(&fs->ns_lock);
	if (used)
		*used = u.used;
	return u.used + reserved;
}

static bool evicting(const struct kvfs *fs)
{
	return fs->cap && fs->cap->st.capacity && !fs->cap->st.authoritative;
}

/* ---- evicting ---- */

struct evicted {
	uint64_t parent;
	bool protect;
	char name[KV_NAME_MAX + 1];
};

/*
 * The debug line for an eviction. Written before the page is forgotten, so
 * that a crash can never commit an eviction the log does not show (the
 * crash loop tells evicted pages from lost ones by it); a page whose forget
 * then fails says so.
 */
static void log_eviction(const struct kv_node_info *n, bool protect)
{
	kv_log(KV_LOG_DEBUG, "evicted page %s (inode %" PRIu64 ", layer dir %" PRIu64
	       ", %" PRIu64 " bytes, %s, last read %" PRId64 " s ago)", n->name, n->ino,
	       n->parent, n->size, protect ? "shared or pinned" : "unshared",
	       (kvfs_now_ns() - n->attr.atime_ns) / 1000000000);
}

/* Forget one victim (ns_lock held); adds the bytes its extent will free. */
static bool evict_one(struct kvfs *fs, struct kvfs_victims *vs,
		      const struct kvfs_victim *v, struct evicted *out, uint64_t *freed)
{
	struct kv_extent_rec er;
	struct kv_node_info n;
	uint64_t frees = 0;
	int rc;

	if (kv_index_get(fs->idx, v->ino, &n) < 0 || !kvfs_victim_run_still(fs, vs, v, &n))
		return false;
	if (n.extent_id == KV_EXTENT_EMPTY)
		frees = KV_ALIGN;     /* its name's charge (kvfs_store_usage) */
	else if (kv_index_extent_get(fs->idx, n.extent_id, &er) == 0 && er.refcount == 1)
		frees = kv_extent_footprint(&n.ext);
	log_eviction(&n, v->protect || v->shared);
	if ((rc = kvfs_page_forget(fs, &n, false, KVFS_EV_EVICTED)) < 0) {
		kv_log(KV_LOG_WARN, "eviction of page %s (inode %" PRIu64 ") failed, it stays: %s",
		       n.name, n.ino, kv_strerror(rc));
		return false;
	}
	*freed += frees;
	*out = (struct evicted){ .parent = n.parent, .protect = v->protect || v->shared };
	memcpy(out->name, n.name, sizeof(out->name));
	return true;
}

/*
 * Tell the kernel to forget evicted names. The front end sends them from
 * its own thread (fuse/notifier.h): the notification takes the directory's lock in
 * the kernel, which a request (a create in that directory) may hold while
 * it waits for a FUSE thread, and every FUSE thread may be a writer waiting
 * for this evictor to make room. The name goes at once from our index, so
 * until the kernel forgets it a lookup it still caches ends in ENOENT from
 * us: nothing wrong is served.
 */
static void forget_later(struct kvfs *fs, const struct evicted *gone, size_t n)
{
	for (size_t i = 0; i < n; i++)
		kvfs_hook_name_gone(fs, gone[i].parent, gone[i].name);
}

/*
 * Evict from vs (from *next on) until about want bytes will be freed, at
 * most EVICT_BATCH pages and EVICT_SCAN victims looked at per ns_lock
 * hold; wait for the deletes to commit, so the space is really back (or
 * deferred behind a fast-path batch still reading it). *freed gets the
 * bytes the evicted extents free. False if no page went.
 */
static bool evict_some(struct kvfs *fs, struct kvfs_victims *vs, size_t *next,
		       uint64_t want, uint64_t *freed)
{
	struct evicted *gone = malloc(EVICT_BATCH * sizeof(*gone));
	struct kvfs_cap *c = fs->cap;
	uint64_t nshared = 0, mark;
	size_t ngone = 0, scanned = 0;
	int rc;

	*freed = 0;
	if (!gone)
		return false;
	mark = kvfs_commit_mark(fs);
	pthread_mutex_lock(&fs->ns_lock);
	while (*next < vs->n && ngone < EVICT_BATCH && scanned++ < EVICT_SCAN &&
	       *freed < want) {
		const struct kvfs_victim *v = &vs->v[(*next)++];

		if (evict_one(fs, vs, v, &gone[ngone], freed))
			nshared += gone[ngone++].protect;
	}
	pthread_mutex_unlock(&fs->ns_lock);
	pthread_mutex_lock(&c->lock);
	c->st.evictions += ngone;
	c->st.evicted_shared += nshared;
	c->st.evicted_bytes += *freed;
	pthread_mutex_unlock(&c->lock);
	forget_later(fs, gone, ngone);
	free(gone);
	/* Not durable, not freed: the caller must not report the space as
	 * back (gc once said so while every commit failed). */
	if (ngone && (rc = kvfs_commit_wait_all(fs, mark)) < 0 && !vs->commit_rc)
		vs->commit_rc = rc;
	return ngone > 0;
}

/* Stop early at unmount: the rest is the next mount's work. */
static bool cap_stopping(struct kvfs_cap *c)
{
	bool stop;

	pthread_mutex_lock(&c->lock);
	stop = c->stop;
	pthread_mutex_unlock(&c->lock);
	return stop;
}

/* One pass: the victims under the rule, evicted until *want bytes were
 * handed over (taken off *want; a sweep: UINT64_MAX, all of them). As
 * kvfs_evict. */
static int evict_run(struct kvfs *fs, uint64_t *want, const struct kvfs_victim_rule *rule,
		     uint64_t *pages_out)
{
	struct kvfs_cap *c = fs->cap;
	struct kvfs_victims vs;
	uint64_t before, freed, pages = 0, ev0;
	size_t next = 0;
	int rc;

	if (pages_out)
		*pages_out = 0;
	if (!*want)
		return 0;

	/* Even while the index loads: victims come from layers loaded whole
	 * (kv_index_page_walk), and what they free counts at once
	 * (store/reclaim.c), so eviction stops at its target. */
	if ((rc = kvfs_changes_damaged(fs)) < 0)
		return rc;
	rc = kvfs_victims_collect(fs, rule, &vs);
	if (rc < 0)
		return rc;
	before = usage_now(fs, NULL);
	pthread_mutex_lock(&c->lock);
	ev0 = c->st.evictions;
	pthread_mutex_unlock(&c->lock);
	while (next < vs.n && *want && !cap_stopping(c) && !vs.commit_rc) {
		if (evict_some(fs, &vs, &next, *want, &freed))
			*want -= freed < *want ? freed : *want;
	}
	free(vs.v);
	if (vs.commit_rc)
		kv_log(KV_LOG_ERR, "eviction stopped: the deletes of evicted pages did not "
		       "commit (%s); their space comes back once the manifest commits",
		       kv_strerror(vs.commit_rc));
	pthread_mutex_lock(&c->lock);
	c->st.eviction_runs++;
	pages = c->st.evictions - ev0;
	pthread_mutex_unlock(&c->lock);
	if (pages_out)
		*pages_out = pages;
	kv_log(KV_LOG_DEBUG, "eviction run: %" PRIu64 " pages, usage %" PRIu64 " -> %"
	       PRIu64 " bytes (%" PRIu64 " still to free)", pages, before,
	       usage_now(fs, NULL), *want);
	return vs.commit_rc;
}

/* Bytes to free to bring usage down to target. Frees may be deferred
 * behind running fast-path batches: the passes count what they handed
 * over instead of measuring usage again, or a busy reader would make each
 * pass evict the same amount once more. */
static uint64_t to_free(struct kvfs *fs, uint64_t target)
{
	uint64_t now = usage_now(fs, NULL);

	return now > target ? now - target : 0;
}

int kvfs_evict(struct kvfs *fs, uint64_t target, int64_t older_than_ns,
	       uint64_t *pages_out)
{
	struct kvfs_victim_rule rule = { .bounded = older_than_ns != 0,
					 .before_ns = older_than_ns };
	uint64_t want = older_than_ns ? UINT64_MAX : to_free(fs, target);

	return evict_run(fs, &want, &rule, pages_out);
}

/* Load layer ino, left in the manifest (-o index_pages), so that eviction
 * chooses among its pages too (evict_lru). False if it could not. */
static bool load_deferred(struct kvfs *fs, uint64_t ino)
{
	static struct kv_log_limit limit;
	int rc;

	rc = kv_index_layer_load(fs->idx, ino);
	if (rc < 0)
		KV_LOG_LIMITED(&limit, KV_LOG_WARN, "eviction: cannot load layer %" PRIu64
			       " from the manifest to evict from it: %s", ino, kv_strerror(rc));
	return rc == 0;
}

#define LRU_WALKS_PER_RUN 3    /* passes over the pages in RAM; the next run goes on */
#define LRU_LOADS_PER_WALK 16  /* layers loaded between two passes */

/*
 * Layers left in the manifest into RAM for eviction, the one holding the
 * oldest page first (ino), until they hold about want bytes: each pass
 * walks every page in RAM, so a pass per layer would cost too much. The
 * number loaded, or -1 if the first could not be.
 */
static int load_for_eviction(struct kvfs *fs, uint64_t ino, uint64_t want)
{
	struct kv_index_stats st;
	struct kv_node_info n;
	uint64_t avg, got = 0;
	int64_t oldest;
	int loads = 0;

	kv_index_stats(fs->idx, &st);
	avg = st.pages ? (st.page_bytes + st.empty_pages * KV_ALIGN) / st.pages : 0;
	do {
		if (kv_index_get(fs->idx, ino, &n) == 0)
			got += n.nchildren * (avg ? avg : 1);
		if (!load_deferred(fs, ino))
			return loads ? loads : -1;
		loads++;
	} while (got < want && loads < LRU_LOADS_PER_WALK &&
		 kv_index_deferred_layer(fs->idx, &ino, &oldest) > 0);
	return loads;
}

/*
 * Evict down to target, least recently used first, across the layers left
 * in the manifest (-o index_pages) too (docs/decisions/scale.md). The
 * index keeps each such layer's oldest access time: a page in RAM goes
 * only if used before every page of those layers (pinned ones, and shared
 * ones with a name among them, not at all while they remain), and when that is not enough, the layers
 * holding the oldest are loaded and the choice made again. A layer that
 * cannot be loaded does not stop eviction: the pages in RAM go as before.
 * *loaded (may be NULL): whether a layer came in.
 */
static int evict_lru(struct kvfs *fs, uint64_t target, uint64_t max_walks,
		     uint64_t *pages, bool *loaded)
{
	static const struct kvfs_victim_rule any;
	uint64_t ino, n, want = to_free(fs, target);
	int64_t oldest = 0;
	bool deferred;
	int rc = 0;

	*pages = 0;
	if (loaded)
		*loaded = false;
	for (uint64_t walks = 1; want; walks++) {
		struct kvfs_victim_rule rule = { .bounded = true, .plain = true };

		deferred = kv_index_deferred_layer(fs->idx, &ino, &oldest) > 0;
		rule.before_ns = oldest;
		if (!deferred || oldest != INT64_MIN) {   /* INT64_MIN: nothing in RAM is older */
			rc = evict_run(fs, &want, deferred ? &rule : &any, &n);
			*pages += n;
		}
		if (rc < 0 || !deferred || !want || walks >= max_walks)
			break;
		if (load_for_eviction(fs, ino, want) < 0) {
			rc = evict_run(fs, &want, &any, &n);
			*pages += n;
			break;
		}
		if (loaded)
			*loaded = true;
	}
	return rc;
}

int kvfs_gc(struct kvfs *fs, struct kvfs_gc_arg *a)
{
	uint32_t mode = a->flags & (KVFS_GC_OLDER | KVFS_GC_TARGET);
	struct kv_index_stats st;
	uint64_t pages = 0;
	int rc;

	if (a->abi != KVFS_ABI_VERSION)
		return -EPROTO;
	if ((a->flags & ~mode) || a->reserved[0] || a->reserved[1] ||
	    (mode != KVFS_GC_OLDER && mode != KVFS_GC_TARGET) ||
	    (mode == KVFS_GC_OLDER && a->older_than_ns <= 0))
		return -EINVAL;
	if ((rc = kvfs_changes_damaged(fs)) < 0)
		return rc;
	usage_now(fs, &a->used_before);
	/* Layers left in the manifest (-o index_pages): an age sweep loads
	 * each that holds a page old enough, a target as many as it takes. At
	 * most as many loads as there are layers: one that went back to the
	 * manifest since (index/unload.c) would be offered again. */
	kv_index_stats(fs->idx, &st);
	if (mode == KVFS_GC_TARGET)
		rc = evict_lru(fs, a->target_bytes, st.layers + 1, &pages, NULL);
	for (uint64_t loads = 0, n, ino; mode == KVFS_GC_OLDER; loads++) {
		int64_t oldest;

		rc = kvfs_evict(fs, 0, a->older_than_ns, &n);
		pages += n;
		if (rc < 0 || loads > st.layers ||
		    kv_index_deferred_layer(fs->idx, &ino, &oldest) <= 0 ||
		    oldest >= a->older_than_ns || !load_deferred(fs, ino))
			break;
	}
	usage_now(fs, &a->used_after);
	a->pages = pages;
	kv_log(rc < 0 ? KV_LOG_ERR : KV_LOG_INFO, "gc: %" PRIu64 " pages evicted, %" PRIu64
	       " -> %" PRIu64 " bytes used%s%s", pages, a->used_before, a->used_after,
	       rc < 0 ? "; failed, their deletes are not durable: " : "",
	       rc < 0 ? kv_strerror(rc) : "");
	return rc;
}

static bool writeback_pending(struct kvfs *fs);

/* ms from now, for pthread_cond_timedwait (CLOCK_REALTIME). */
static struct timespec deadline_ms(long ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += ms * 1000000l;
	ts.tv_sec += ts.tv_nsec / 1000000000l;
	ts.tv_nsec %= 1000000000l;
	return ts;
}

/* Sleep ms on work_cv (cap.lock held); stop or a new request ends it. */
static void pause_locked(struct kvfs_cap *c, long ms)
{
	struct timespec ts;

	ts = deadline_ms(ms);
	pthread_cond_timedwait(&c->work_cv, &c->lock, &ts);
}

/* Sleep ms whatever writers signal meanwhile (unless stopping). */
static void sleep_locked(struct kvfs_cap *c, long ms)
{
	struct timespec ts = deadline_ms(ms);

	while (!c->stop && pthread_cond_timedwait(&c->work_cv, &c->lock, &ts) != ETIMEDOUT)
		;
}


/*
 * Writers wake the evictor when their room would pass the high watermark,
 * but each looks before it takes the room: writers that look together
 * can all fit and still pass it, none of them asking. A mount may also
 * start above it (a lower -o evict_high, a smaller -o capacity). So an
 * idle evictor also wakes every IDLE_CHECK_MS and runs if usage is above
 * the mark (cap.lock held; usage takes ns_lock, which comes first). A run
 * walks every page: while runs find nothing to evict (pages held open, a
 * missing stripe's), the looks back off to IDLE_CHECK_MAX_MS.
 */
static void idle_wait_locked(struct kvfs *fs, struct kvfs_cap *c)
{
	bool above;

	pause_locked(c, c->idle_ms);
	if (c->wanted || c->stop)
		return;
	pthread_mutex_unlock(&c->lock);
	above = usage_now(fs, NULL) > c->st.high;
	pthread_mutex_lock(&c->lock);
	if (above && !c->wanted) {
		c->wanted = true;
		c->idle_run = true;
	}
}

/*
 * After a run (cap.lock held): the stuck count, which only runs a writer
 * asked for move (an idle run that found nothing must not make the next
 * writer's first stuck run look like the last of FULL_STUCK_RUNS), and
 * the idle looks' interval, back to IDLE_CHECK_MS only when pages went or
 * usage is below the mark: a run that merely loaded a layer left in the
 * manifest evicted nothing, and the unloader sends such layers back, so
 * counting loads as progress would keep an idle evictor loading them
 * every second while nothing can go (a degraded mount's missing stripe).
 */
static void run_ended_locked(struct kvfs_cap *c, bool idle, uint64_t pages, bool above,
			     bool more, bool draining)
{
	bool stuck = pages == 0 && above && !more;

	if (!idle)
		c->stuck_runs = stuck && !draining ? c->stuck_runs + 1 : 0;
	else if (!stuck)
		c->stuck_runs = 0;
	if (pages || !above)
		c->idle_ms = IDLE_CHECK_MS;
	else
		c->idle_ms = c->idle_ms * 2 > IDLE_CHECK_MAX_MS ? IDLE_CHECK_MAX_MS :
			     c->idle_ms * 2;
}

static void *evictor(void *arg)
{
	struct kvfs *fs = arg;
	struct kvfs_cap *c = fs->cap;
	uint64_t pages, need, target, now, just_need;
	bool above, retry, draining, more, idle;

	pthread_setname_np(pthread_self(), "kvfs-evict");
	pthread_mutex_lock(&c->lock);
	for (;;) {
		while (!c->wanted && !c->stop)
			idle_wait_locked(fs, c);
		if (c->stop)
			break;
		c->wanted = false;
		idle = c->idle_run;        /* no writer asked for this one */
		c->idle_run = false;
		c->runs_started++;
		/* Below the low mark by what waiting writers need: a page
		 * larger than the slack must find room too. */
		need = c->need;
		c->need = 0;
		target = c->st.low > need ? c->st.low - need : 0;
		pthread_mutex_unlock(&c->lock);
		pages = 0;
		now = usage_now(fs, NULL);
		/* While the index loads, only loaded layers' pages may go: the
		 * ones in use, and maybe too few to reach the low mark. Free
		 * what waiting writers need, no more, or each run would take
		 * every page they hold, new ones too, as soon as it could. */
		just_need = now > need ? now - need : 0;
		if (kvfs_loading(fs) && just_need > target)
			target = just_need;
		more = false;
		if (now > target)
			evict_lru(fs, target, LRU_WALKS_PER_RUN, &pages, &more);
		above = usage_now(fs, NULL) > target;   /* takes ns_lock: not under c->lock */
		draining = writeback_pending(fs);
		/* An idle run goes on to the next layer left in the manifest
		 * only while layers give pages: see run_ended_locked. */
		retry = above && (draining || (more && (pages || !idle)));
		pthread_mutex_lock(&c->lock);
		/* Stuck: nothing could go, and we are still above the mark.
		 * (Usage alone would lie: frees wait behind fast-path reads.) */
		run_ended_locked(c, idle, pages, above, more, draining);
		c->runs_done++;
		pthread_cond_broadcast(&c->room_cv);
		/* Stuck with nothing draining: pages being written now (their
		 * writers between write and seal) may drain soon, so the next
		 * run waits a little; FULL_STUCK_RUNS such runs mean full. */
		if (c->stuck_runs && !c->stop)
			sleep_locked(c, RETRY_MS);
		/* Still above, with pages draining that will be evictable once
		 * durable: look again shortly, whether or not a writer asks. */
		if (retry && !c->stop) {
			pause_locked(c, RETRY_MS);
			c->idle_run = idle && !c->wanted;   /* a writer may have asked */
			c->wanted = true;
		}
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* ---- admission ---- */

/* Pages still in write-back become evictable once durable: while any
 * are draining, a run that found nothing to evict is not the end. */
static bool writeback_pending(struct kvfs *fs)
{
	bool pending;

	pthread_mutex_lock(&fs->dirty.lock);
	pending = fs->dirty.draining > 0;
	pthread_mutex_unlock(&fs->dirty.lock);
	return pending;
}

/* A writer wants a run (cap.lock held): the next run is not an idle one. */
static void writer_asks_locked(struct kvfs_cap *c)
{
	c->wanted = true;
	c->idle_run = false;
	pthread_cond_signal(&c->work_cv);
}

/*
 * Kick the evictor and wait, RUN_WAIT_MS at most, for the end of a run
 * that starts after this call (cap.lock held). True if the store is
 * really full: FULL_STUCK_RUNS runs in a row, this one the last, freed
 * nothing and left nothing draining through write-back, and nothing was
 * draining before this one began (a page that becomes durable meanwhile is
 * evictable next time: a run that began earlier proves nothing). One such
 * run is not enough: the space may be held by pages between their last
 * write and their seal, which drain a moment later (seen in the crash loop
 * with four writers on a 16 MiB store).
 */
static bool full_after_run(struct kvfs_cap *c, uint64_t bytes, bool pending)
{
	uint64_t after = c->runs_started;
	struct timespec ts;

	if (bytes > c->need)
		c->need = bytes;
	writer_asks_locked(c);
	ts = deadline_ms(RUN_WAIT_MS);
	while (c->runs_done <= after && !c->stop)
		if (pthread_cond_timedwait(&c->room_cv, &c->lock, &ts) == ETIMEDOUT)
			return false;
	return c->stop || (c->stuck_runs >= FULL_STUCK_RUNS && !pending);
}

int kvfs_space_wait(struct kvfs *fs, uint64_t bytes)
{
	struct kvfs_cap *c = fs->cap;
	int64_t deadline = kvfs_now_ns() + SPACE_WAIT_NS;
	bool waited = false, full, pending;
	uint64_t use;

	if (!evicting(fs))
		return 0;
	if (bytes > c->st.capacity) {
		/* No eviction can make room: refuse before evicting anything. */
		kvfs_space_refused(fs);
		return -ENOSPC;
	}
	for (;;) {
		use = usage_now(fs, NULL);
		if (use + bytes <= c->st.high)
			return 0;
		pending = writeback_pending(fs);
		pthread_mutex_lock(&c->lock);
		if (use + bytes <= c->st.capacity) {
			/* Fits: eviction runs behind the writer. */
			writer_asks_locked(c);
			pthread_mutex_unlock(&c->lock);
			return 0;
		}
		if (!waited)
			c->st.space_waits++;
		waited = true;
		full = full_after_run(c, bytes, pending);
		pthread_mutex_unlock(&c->lock);
		if (full || kvfs_now_ns() > deadline)
			return -ENOSPC;
	}
}

int kvfs_space_wait_run(struct kvfs *fs, uint64_t bytes)
{
	struct kvfs_cap *c = fs->cap;
	bool full, pending;

	if (!evicting(fs))
		return -ENOSPC;
	pending = writeback_pending(fs);
	pthread_mutex_lock(&c->lock);
	full = full_after_run(c, bytes, pending);
	pthread_mutex_unlock(&c->lock);
	return full ? -ENOSPC : 0;
}

/* ---- lazy access times ---- */

struct touched {
	int64_t since;
	struct { uint64_t ino; int64_t atime; } *v;
	size_t n, cap;
};

static int collect_touched(void *arg, const struct kv_page_brief *p)
{
	struct touched *t = arg;
	void *v;

	if (p->state != KV_PAGE_DURABLE || p->atime_ns < t->since)
		return 0;
	if (!(v = kv_array_room(t->v, t->n, &t->cap, sizeof(*t->v), 256)))
		return -ENOMEM;
	t->v = v;
	t->v[t->n].ino = p->ino;
	t->v[t->n++].atime = p->atime_ns;
	return 0;
}

static int write_touched(struct kvfs *fs, const struct touched *t)
{
	int rc = kv_manifest_begin(fs->man);

	for (size_t i = 0; rc == 0 && i < t->n; i++)
		rc = kv_manifest_touch_page(fs->man, t->v[i].ino, t->v[i].atime);
	if (rc == 0)
		rc = kv_manifest_commit(fs->man);
	else
		kv_manifest_rollback(fs->man);
	return rc;
}

/*
 * A flush visits the pages read since the last one (kv_index_touched_walk),
 * not every page (71 ms per 1M pages, 7 s at 10^8, on the committer's
 * thread): a store only written to, or idle, finds the list empty and pays
 * nothing every ATIME_FLUSH_SECS. The index forgets the pages it handed
 * out: after a failure to write them, the next flush visits every page.
 */
static void atime_flush(struct kvfs *fs)
{
	struct kvfs_cap *c = fs->cap;
	struct touched t = { 0 };
	int64_t start = kvfs_now_ns();
	int rc;

	if (!c)
		return;
	t.since = c->atime_flushed_ns;
	rc = kv_index_touched_walk(fs->idx, c->atime_walk_all, collect_touched, &t);
	if (rc == 0 && t.n)
		rc = write_touched(fs, &t);
	c->atime_walk_all = rc != 0;
	if (rc == 0)
		c->atime_flushed_ns = start;
	else
		kv_log(KV_LOG_WARN, "access times of %zu pages not saved (%s); "
		       "retrying later", t.n, kv_strerror(rc));
	free(t.v);
}

/* ---- setup ---- */

static int cap_limits(struct kvfs *fs, struct kvfs_cap *c)
{
	const struct kvfs_opts *o = &fs->opts;

	if (o->evict_low >= o->evict_high || o->evict_high > 100) {
		kv_log(KV_LOG_ERR, "evict_low (%u%%) must be below evict_high (%u%%), "
		       "at most 100%%", o->evict_low, o->evict_high);
		return -EINVAL;
	}
	c->st.capacity = fs->meta.capacity;
	c->st.high = c->st.capacity / 100 * o->evict_high;
	c->st.low = c->st.capacity / 100 * o->evict_low;
	c->st.authoritative = o->authoritative;
	return 0;
}

int kvfs_cap_start(struct kvfs *fs)
{
	struct kvfs_cap *c = calloc(1, sizeof(*c));
	int rc;

	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->work_cv, NULL);
	pthread_cond_init(&c->room_cv, NULL);
	c->atime_flushed_ns = kvfs_now_ns();   /* the manifest has all before */
	c->idle_ms = IDLE_CHECK_MS;
	fs->cap = c;
	/* The committer's thread owns the manifest connection: it writes the
	 * access times when it has nothing else to do. */
	kvfs_commit_set_idle_work(fs, atime_flush);
	rc = cap_limits(fs, c);
	if (rc == 0 && evicting(fs) && !fs->opts.offline) {
		/* Set before the thread exists, never while it runs: it
		 * reads the flags beside this one under cap.lock. */
		c->running = true;
		rc = -pthread_create(&c->thread, NULL, evictor, fs);
		if (rc < 0)
			c->running = false;
	}
	return rc;
}

void kvfs_cap_stop(struct kvfs *fs)
{
	struct kvfs_cap *c = fs->cap;

	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	c->stop = true;
	pthread_cond_broadcast(&c->work_cv);
	pthread_cond_broadcast(&c->room_cv);
	pthread_mutex_unlock(&c->lock);
	if (c->running) {
		pthread_join(c->thread, NULL);
		c->running = false;
	}
}

void kvfs_cap_free(struct kvfs *fs)
{
	struct kvfs_cap *c = fs->cap;

	if (!c)
		return;
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->work_cv);
	pthread_cond_destroy(&c->room_cv);
	free(c);
	fs->cap = NULL;
}

void kvfs_cap_stats(struct kvfs *fs, struct kvfs_cap_stats *out)
{
	struct kvfs_cap *c = fs->cap;
	uint64_t used;

	memset(out, 0, sizeof(*out));
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	*out = c->st;
	pthread_mutex_unlock(&c->lock);
	out->enospc = atomic_load(&fs->st.space_refused);
	out->reserved = usage_now(fs, &used) - used;
	out->used = used;
}
