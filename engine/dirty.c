/*
 * The write-back budget: how much page payload may sit in RAM waiting for
 * its disk write and manifest commit. Sealed pages are visible at once and
 * durable later; without a bound a writer faster than the device would grow
 * the daemon without limit.
 *
 * Charges are taken where payload memory is filled (FUSE write(), the
 * fast-path write's copy-in) and given back when the page is durable (the
 * committer), withdrawn or discarded. A charge that does not fit waits, and
 * never fails: the budget is exact whatever the number of writers. Pages
 * being filled are finished by their writers, so waiting for them is safe,
 * unless those writers are the very ones waiting here (a page written in
 * several write() calls, a batch staging its pages): when every filling
 * byte is held by a waiter and nothing drains, one charge goes through as
 * an overrun instead of deadlocking; to one of those holders, never to a
 * writer that holds nothing, whose charge would free no one. A holder
 * blocked outside (one thread with two pages open, writing the second)
 * cannot be seen: when nothing was given back for DIRTY_STALL_NS since
 * the charge came, it goes through too, one charge a stall. A writer that
 * merely waits long while others' pages drain (many more writers than
 * budget pages) is no stall: it keeps waiting.
 *
 * Waiting for pages that drain ends too: when none became durable for
 * DIRTY_GIVEUP_NS (the manifest cannot commit: its disk is full or
 * failing), the charge is refused with ENOSPC or EIO and a log line,
 * rather than leave the writer blocked in write(2) for as long as that
 * lasts.
 *
 * Each uid other than root holds at most half of it: its page files from
 * their first write until durable, and its fast-path pages from their
 * copy until durable. Past that share a writer waits for the uid's pages
 * that drain, which needs no writer; for pages its writers still hold,
 * it waits briefly and is then refused (EDQUOT), since those may never
 * be closed.
 *
 * Lock order: ns_lock before dirty.lock; take() is never called with
 * ns_lock held, so it can sleep.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "kvfs_i.h"
#include "openshare.h"

struct kvfs_dirty_uid {      /* a uid with pages in the budget */
	uint32_t uid;
	unsigned waiters;    /* writers waiting for its pages being written */
	uint64_t waiting_held; /* ... and the bytes their pages hold */
	unsigned drain_waiters; /* writers waiting for its pages to drain */
	uint64_t filling;    /* its page files being written, charged or about to be */
	uint64_t sealed;     /* its page files sealed, until durable */
	uint64_t fast;       /* fast-path pages' bytes, from their copy until durable */
	uint64_t over;       /* of these, past its share (kvfs_dirty.over) */
};

void kvfs_dirty_init(struct kvfs *fs, uint64_t budget)
{
	struct kvfs_dirty *d = &fs->dirty;

	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->cv, NULL);
	d->budget = budget;
	d->uids = KVFS_UIDTAB(struct kvfs_dirty_uid);
}

void kvfs_dirty_fini(struct kvfs *fs)
{
	struct kvfs_dirty *d = &fs->dirty;

	if (d->filling || d->draining)
		kv_log(KV_LOG_WARN, "write-back budget: %llu bytes still charged at close",
		       (unsigned long long)(d->filling + d->draining));
	kvfs_uidtab_free(&d->uids);
	pthread_cond_destroy(&d->cv);
	pthread_mutex_destroy(&d->lock);
}

/* Would bytes more pass the budget? Every charge counts, but a uid's bytes
 * past its share (the one page or chunk of any size it may write alone,
 * already noted in over when its charge comes here) only up to the share.
 * Counted whole, one uid's page of twice the budget held open made every
 * other writer, root too, wait for the 2 s stall rule, one after another. */
static bool over_budget(const struct kvfs_dirty *d, uint64_t bytes)
{
	return d->filling + d->draining + bytes > d->budget + d->over;
}

static void note_peak(struct kvfs_dirty *d)
{
	if (d->filling + d->draining > d->peak)
		d->peak = d->filling + d->draining;
}

#define DIRTY_STALL_NS (2ll * 1000000000)   /* nothing given back for this long */
#define DIRTY_GIVEUP_NS (20ll * 1000000000)   /* nothing durable for this long */

/* Nothing drained since long before: the committer cannot make pages
 * durable. The error says why if the manifest's commits fail (d.lock). */
static int give_up(struct kvfs *fs, uint64_t bytes, int64_t since)
{
	struct kvfs_dirty *d = &fs->dirty;
	int err = kvfs_commit_failing(fs), rc = err == -ENOSPC ? -ENOSPC : -EIO;
	int64_t now = kvfs_now_ns();

	d->refused++;
	if (now - d->refused_log_ns >= 10 * 1000000000ll) {
		d->refused_log_ns = now;
		kv_log(KV_LOG_ERR, "write-back: no page became durable for %lld s (%llu bytes "
		       "wait for the disk and the manifest%s%s); refusing a write of %llu "
		       "bytes with %s", (long long)((now - since) / 1000000000),
		       (unsigned long long)d->draining, err ? ", whose commits fail: " : "",
		       err ? kv_strerror(err) : "", (unsigned long long)bytes,
		       rc == -ENOSPC ? "ENOSPC" : "EIO");
	}
	return rc;
}

/* Would this charge wait for itself? Every filling byte is held by writers
 * waiting here, this one among them, and nothing drains: nobody who could
 * give bytes back is free. A writer holding nothing (held 0) is never
 * what the others wait for, so letting it through frees no one: it waits
 * like anyone else, unless nothing at all is charged (a charge larger
 * than the budget). */
static bool waits_for_itself(const struct kvfs_dirty *d, uint64_t held)
{
	return !d->draining && d->waiting_held + held >= d->filling &&
	       (held || !d->filling);
}

int kvfs_dirty_take(struct kvfs *fs, uint64_t bytes, uint64_t held)
{
	struct kvfs_dirty *d = &fs->dirty;
	int64_t now = kvfs_now_ns(), since = now, still = now, wait;
	bool waited = false;
	struct timespec until;
	int rc;

	if (bytes == 0)
		return 0;
	pthread_mutex_lock(&d->lock);
	if (d->drained_ns > since)
		since = d->drained_ns;
	while (over_budget(d, bytes)) {
		if (waits_for_itself(d, held))
			break;
		/* A stall: nothing was given back for DIRTY_STALL_NS since this
		 * charge came (a holder blocked elsewhere). One charge goes
		 * through a stall; the next waits for one of its own. */
		if (d->moved_ns > still)
			still = d->moved_ns;
		now = kvfs_now_ns();
		if (!d->draining && now - still >= DIRTY_STALL_NS) {
			d->moved_ns = now;
			break;
		}
		waited = true;
		d->waiting_held += held;
		if (held || waits_for_itself(d, 0))   /* others may now see */
			pthread_cond_broadcast(&d->cv);   /* that everyone waits */
		wait = d->draining ? DIRTY_STALL_NS : still + DIRTY_STALL_NS - now;
		until = kvfs_after_ns(wait);
		pthread_cond_timedwait(&d->cv, &d->lock, &until);
		d->waiting_held -= held;
		if (d->draining) {       /* waiting for pages to drain, not forever */
			if (d->drained_ns > since)
				since = d->drained_ns;
			if (kvfs_now_ns() - since >= DIRTY_GIVEUP_NS) {
				d->waits += waited;
				rc = give_up(fs, bytes, since);
				pthread_mutex_unlock(&d->lock);
				return rc;
			}
		}
	}
	if (waited)
		d->waits++;
	if (over_budget(d, bytes)) {
		if (d->overruns++ == 0)
			kv_log(KV_LOG_WARN, "write-back budget of %llu bytes exceeded by pages "
			       "still being written; raise -o dirty=SIZE above writers x page size",
			       (unsigned long long)d->budget);
	}
	d->filling += bytes;
	note_peak(d);
	pthread_mutex_unlock(&d->lock);
	return 0;
}

/* ---- each uid's share of the pages being written ---- */

#define DIRTY_UID_SHARE 2      /* a uid fills at most budget / this */
#define DIRTY_UID_WAITERS 4    /* writers of one uid waiting for its own pages */

static struct kvfs_dirty_uid *uid_entry(struct kvfs_dirty *d, uint32_t uid, bool add)
{
	return kvfs_uidtab_get(&d->uids, uid, add);
}

static uint64_t less(uint64_t have, uint64_t bytes)
{
	return have - (bytes < have ? bytes : have);
}

/* Its pages that wait only for the disk: sealed page files, fast-path pages. */
static uint64_t uid_pending(const struct kvfs_dirty_uid *u)
{
	return u->sealed + u->fast;
}

/* u's counts changed (d.lock): what of them is past its share, which the
 * budget does not hold against other writers (over_budget()). Only a uid's
 * one page or chunk let past its share alone gets there (past_share). */
static void uid_note_over(struct kvfs_dirty *d, struct kvfs_dirty_uid *u)
{
	uint64_t mine = u->filling + uid_pending(u), share = d->budget / DIRTY_UID_SHARE;
	uint64_t over = u->uid && mine > share ? mine - share : 0;

	d->over = d->over - u->over + over;
	u->over = over;
}

/* u's counts went down (d.lock): u is dropped once nothing of it is
 * counted and no one waits on it; waiters look again. */
static void uid_drop_idle(struct kvfs_dirty *d, struct kvfs_dirty_uid *u)
{
	uid_note_over(d, u);
	if (!u->filling && !uid_pending(u) && !u->waiters && !u->drain_waiters)
		kvfs_uidtab_remove(&d->uids, u);
	pthread_cond_broadcast(&d->cv);
}

static void uid_forget_locked(struct kvfs_dirty *d, uint32_t uid, uint64_t bytes)
{
	struct kvfs_dirty_uid *u = uid_entry(d, uid, false);

	if (!u)
		return;
	u->filling = less(u->filling, bytes);
	uid_drop_idle(d, u);
}

/* Past its share: the uid holds pages being written besides the caller's
 * own (held), and this charge would take it over budget / SHARE. Root is
 * trusted with the whole budget, as before. A page being written cannot
 * be evicted either, so in cache mode the uid's share of the capacity
 * (-o open_share, engine/openshare.c) bounds them too, together with the
 * pages its open files hold (open_held), with no exception for one page:
 * else one uid writing pages and keeping them open held a small store
 * full. */
static bool past_share(struct kvfs *fs, const struct kvfs_dirty_uid *u, uint64_t bytes,
		       uint64_t held, uint64_t open_held)
{
	uint64_t cap_share = kvfs_open_share_bytes(fs, u->uid);

	if (u->uid == 0)
		return false;
	if (cap_share && open_held + u->filling + bytes > cap_share)
		return true;
	return u->filling > held && u->filling + bytes > fs->dirty.budget / DIRTY_UID_SHARE;
}

/* Past its share only with the pages it has sealed or published counted:
 * those drain without any writer, so the charge waits for them, however
 * many of its writers do (as for the whole budget), and never fails but
 * as the budget does when nothing drains at all. Without this a uid whose
 * writes outrun the disk held the whole budget with its sealed pages, and
 * root's 4 KiB writes waited behind them (p99 41-61 ms at -o dirty=4M). */
static bool past_share_draining(const struct kvfs *fs, const struct kvfs_dirty_uid *u,
				uint64_t bytes, uint64_t held)
{
	uint64_t mine = u->filling + uid_pending(u);

	if (u->uid == 0)
		return false;
	return mine > held && mine + bytes > fs->dirty.budget / DIRTY_UID_SHARE;
}

/* Wait for some of the budget to drain, or give up after DIRTY_GIVEUP_NS
 * without a page made durable (d.lock; 0 or the refusal). Time in which
 * nothing drains because pages are still being copied is no stall. */
static int wait_drain(struct kvfs *fs, uint64_t bytes, int64_t *since)
{
	struct kvfs_dirty *d = &fs->dirty;
	struct timespec until;

	if (d->drained_ns > *since)
		*since = d->drained_ns;
	if (!d->draining)
		*since = kvfs_now_ns();
	if (kvfs_now_ns() - *since >= DIRTY_GIVEUP_NS)
		return give_up(fs, bytes, *since);
	until = kvfs_after_ns(DIRTY_STALL_NS);
	pthread_cond_timedwait(&d->cv, &d->lock, &until);
	return 0;
}

/* wait_drain as a waiter of *u, which stays in the table meanwhile but
 * may move (d.lock); a refusal drops it if nothing else keeps it. */
static int uid_wait_drain(struct kvfs *fs, struct kvfs_dirty_uid **u, uint64_t bytes,
			  int64_t *since)
{
	struct kvfs_dirty *d = &fs->dirty;
	uint32_t uid = (*u)->uid;
	int rc;

	(*u)->drain_waiters++;
	rc = wait_drain(fs, bytes, since);
	*u = uid_entry(d, uid, false);
	(*u)->drain_waiters--;
	if (rc < 0)
		uid_drop_idle(d, *u);
	return rc;
}

static int refuse_uid(struct kvfs *fs, const struct kvfs_dirty_uid *u, uint64_t bytes)
{
	struct kvfs_dirty *d = &fs->dirty;

	d->uid_refused++;
	KV_LOG_LIMITED(&d->uid_log, KV_LOG_WARN, "write-back: uid %u holds %llu bytes in pages "
		       "it is still writing, its share (half the budget, -o dirty=%llu; at most "
		       "-o open_share of the capacity, %llu): refusing a write of %llu bytes with "
		       "EDQUOT until it closes some (%llu refused so far)",
		       u->uid, (unsigned long long)u->filling, (unsigned long long)d->budget,
		       (unsigned long long)kvfs_open_share_bytes(fs, u->uid),
		       (unsigned long long)bytes, (unsigned long long)d->uid_refused);
	return -EDQUOT;
}

int kvfs_dirty_take_uid(struct kvfs *fs, uint32_t uid, uint64_t bytes, uint64_t held)
{
	struct kvfs_dirty *d = &fs->dirty;
	struct kvfs_dirty_uid *u;
	struct timespec until = { 0 };
	int64_t since = kvfs_now_ns();
	uint64_t cap_share, open_held;
	int rc;

	if (bytes == 0)
		return 0;
	/* ns_lock cannot be taken inside dirty.lock: read before (a close
	 * meanwhile only makes this cautious). */
	cap_share = kvfs_open_share_bytes(fs, uid);
	open_held = cap_share ? kvfs_open_share_held(fs, uid) : 0;
	pthread_mutex_lock(&d->lock);
	u = uid_entry(d, uid, true);
	if (!u) {
		pthread_mutex_unlock(&d->lock);
		return -ENOMEM;
	}
	for (;;) {
		if (!past_share(fs, u, bytes, held, open_held)) {
			if (!past_share_draining(fs, u, bytes, held))
				break;
			rc = uid_wait_drain(fs, &u, bytes, &since);
			if (rc < 0) {
				pthread_mutex_unlock(&d->lock);
				return rc;
			}
			continue;
		}
		/* Waiting holds a FUSE thread: a few writers of a uid may wait
		 * for its other pages to be sealed, briefly; the rest are
		 * refused at once. Every page of the uid is held by a writer
		 * waiting here, this one too: none will be sealed while they
		 * wait. Refusing this one dooms its page, whose bytes then
		 * leave the share (pagefile.c), and the others go on. */
		if (u->waiters >= DIRTY_UID_WAITERS || u->waiting_held + held >= u->filling ||
		    (cap_share && open_held + held + bytes > cap_share)) {
			/* (the last: past its share even once its other pages
			 * are sealed, since its open files hold the rest) */
			rc = refuse_uid(fs, u, bytes);
			uid_drop_idle(d, u);
			pthread_mutex_unlock(&d->lock);
			return rc;
		}
		if (!until.tv_sec)   /* 2 s from its first wait for a seal */
			until = kvfs_after_ns(DIRTY_STALL_NS);
		u->waiters++;
		u->waiting_held += held;
		rc = pthread_cond_timedwait(&d->cv, &d->lock, &until);
		u = uid_entry(d, uid, false);   /* the array may have moved */
		u->waiters--;
		u->waiting_held -= held;
		if (rc == ETIMEDOUT && past_share(fs, u, bytes, held, open_held)) {
			rc = refuse_uid(fs, u, bytes);
			uid_drop_idle(d, u);
			pthread_mutex_unlock(&d->lock);
			return rc;
		}
	}
	u->filling += bytes;   /* now: other writers of the uid see it */
	uid_note_over(d, u);
	pthread_mutex_unlock(&d->lock);
	rc = kvfs_dirty_take(fs, bytes, held);
	if (rc < 0)
		kvfs_dirty_uid_done(fs, uid, bytes);
	return rc;
}

uint64_t kvfs_dirty_uid_filling(struct kvfs *fs, uint32_t uid)
{
	struct kvfs_dirty_uid *u;
	uint64_t filling;

	pthread_mutex_lock(&fs->dirty.lock);
	u = uid_entry(&fs->dirty, uid, false);
	filling = u ? u->filling : 0;
	pthread_mutex_unlock(&fs->dirty.lock);
	return filling;
}

void kvfs_dirty_uid_done(struct kvfs *fs, uint32_t uid, uint64_t bytes)
{
	struct kvfs_dirty *d = &fs->dirty;

	if (bytes == 0)
		return;
	pthread_mutex_lock(&d->lock);
	uid_forget_locked(d, uid, bytes);
	pthread_mutex_unlock(&d->lock);
}

/*
 * The fast path's share. A batch write copies a chunk of up to half the
 * budget before it publishes it, and its pages then drain at the disk's
 * speed: one uid's concurrent calls held the whole budget, and root's
 * 4 KiB writes waited up to 1 s (p50 41 ms, 0.5 ms under the same uid's
 * FUSE writes). So a uid's fast-path pages count until they are durable,
 * not only while they are copied: they can only wait for the disk, never
 * for a writer, so waiting for them cannot deadlock, and no call waits
 * holding part of a chunk. One share with its page files, half the
 * budget: a uid writing by both paths once held all of a small one.
 */
uint64_t kvfs_dirty_fast_share(const struct kvfs *fs)
{
	return fs->dirty.budget / DIRTY_UID_SHARE;
}

int kvfs_dirty_fast_take(struct kvfs *fs, uint32_t uid, uint64_t bytes)
{
	struct kvfs_dirty *d = &fs->dirty;
	uint64_t share = kvfs_dirty_fast_share(fs);
	int64_t since = kvfs_now_ns();
	struct kvfs_dirty_uid *u;
	int rc;

	if (uid == 0 || bytes == 0)
		return 0;
	pthread_mutex_lock(&d->lock);
	/* Its page files count too, one share for both paths; but only the
	 * pages that drain are waited for, never those its writers hold. */
	while ((u = uid_entry(d, uid, true)) && uid_pending(u) &&
	       u->filling + uid_pending(u) + bytes > share) {
		rc = uid_wait_drain(fs, &u, bytes, &since);
		if (rc < 0) {
			pthread_mutex_unlock(&d->lock);
			return rc;
		}
	}
	if (u) {
		u->fast += bytes;
		uid_note_over(d, u);
	}
	pthread_mutex_unlock(&d->lock);
	return u ? 0 : -ENOMEM;
}

void kvfs_dirty_fast_done(struct kvfs *fs, uint32_t uid, uint64_t bytes)
{
	struct kvfs_dirty *d = &fs->dirty;
	struct kvfs_dirty_uid *u;

	if (uid == 0 || bytes == 0)
		return;
	pthread_mutex_lock(&d->lock);
	u = uid_entry(d, uid, false);
	if (u) {
		u->fast = less(u->fast, bytes);
		uid_drop_idle(d, u);
	}
	pthread_mutex_unlock(&d->lock);
}

/* l's charge leaves its writer's share: from its pages being written, or
 * from its sealed ones (d.lock). */
static void uid_release_locked(struct kvfs_dirty *d, const struct kvfs_live *l)
{
	struct kvfs_dirty_uid *u;

	if (!l->dirty_sealed) {
		uid_forget_locked(d, l->writer_uid, l->dirty);
		return;
	}
	u = uid_entry(d, l->writer_uid, false);
	if (u) {
		u->sealed = less(u->sealed, l->dirty);
		uid_drop_idle(d, u);
	}
}

void kvfs_dirty_uid_release_live(struct kvfs *fs, struct kvfs_live *l)
{
	if (!l->dirty_uid)
		return;
	pthread_mutex_lock(&fs->dirty.lock);
	uid_release_locked(&fs->dirty, l);
	pthread_mutex_unlock(&fs->dirty.lock);
	l->dirty_uid = false;
}

/* The charge drains now, and stays in its writer's share until durable:
 * the uid waits for its own sealed pages, not everyone for them. */
void kvfs_dirty_sealed_live(struct kvfs *fs, struct kvfs_live *l)
{
	struct kvfs_dirty *d = &fs->dirty;
	struct kvfs_dirty_uid *u;

	if (l->dirty_sealed)
		return;
	pthread_mutex_lock(&d->lock);
	u = l->dirty_uid ? uid_entry(d, l->writer_uid, false) : NULL;
	if (u) {
		u->filling = less(u->filling, l->dirty);
		u->sealed += l->dirty;
	} else {
		l->dirty_uid = false;
	}
	d->filling -= l->dirty;
	d->draining += l->dirty;
	pthread_mutex_unlock(&d->lock);
	l->dirty_sealed = true;
}

void kvfs_dirty_sealed(struct kvfs *fs, uint64_t bytes)
{
	struct kvfs_dirty *d = &fs->dirty;

	pthread_mutex_lock(&d->lock);
	d->filling -= bytes;
	d->draining += bytes;
	pthread_mutex_unlock(&d->lock);
}

void kvfs_dirty_give(struct kvfs *fs, uint64_t bytes, bool sealed)
{
	struct kvfs_dirty *d = &fs->dirty;

	if (bytes == 0)
		return;
	pthread_mutex_lock(&d->lock);
	d->moved_ns = kvfs_now_ns();
	if (sealed) {
		d->draining -= bytes;
		d->drained_ns = d->moved_ns;
	} else
		d->filling -= bytes;
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->lock);
}

void kvfs_dirty_give_live(struct kvfs *fs, struct kvfs_live *l)
{
	/* The budget first: a call the share's release wakes must find the
	 * budget's room too, or it stages past the budget by a page. */
	kvfs_dirty_give(fs, l->dirty, l->dirty_sealed);
	kvfs_dirty_uid_release_live(fs, l);
	if (l->dirty_fast)
		kvfs_dirty_fast_done(fs, l->writer_uid, l->dirty);
	l->dirty_fast = false;
	l->dirty = 0;
	l->dirty_sealed = false;
}
