/*
 * The write-back budget: how much page payload may sit in RAM waiting for
 * its disk write and manifest commit. Sealed pages are visible at once and
 * durable later; without a bound a writer faster than the device would grow
 * the daemon without limit.
 *
 * Charges are taken where payload memory is filled (FUSE write(), the
 * fast-path write's copy-in) and given back when the page is durable (the
 * committer), withdrawn or discarded. A charge blocks while the budget is
 * full and something is draining; it never fails. If nothing is draining,
 * the whole budget is held by pages still being written, whose writers may
 * be the very threads waiting here: the charge goes through and is counted
 * as an overrun instead of deadlocking. Budgets larger than (concurrent
 * writers x page size) never overrun.
 *
 * Lock order: ns_lock before dirty.lock; take() is never called with
 * ns_lock held, so it can sleep.
 */
#include "kvfs_i.h"

void kvfs_dirty_init(struct kvfs *fs, uint64_t budget)
{
	struct kvfs_dirty *d = &fs->dirty;

	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->cv, NULL);
	d->budget = budget;
}

void kvfs_dirty_fini(struct kvfs *fs)
{
	struct kvfs_dirty *d = &fs->dirty;

	if (d->filling || d->draining)
		kv_log(KV_LOG_WARN, "write-back budget: %llu bytes still charged at close",
		       (unsigned long long)(d->filling + d->draining));
	pthread_cond_destroy(&d->cv);
	pthread_mutex_destroy(&d->lock);
}

static void note_peak(struct kvfs_dirty *d)
{
	if (d->filling + d->draining > d->peak)
		d->peak = d->filling + d->draining;
}

void kvfs_dirty_take(struct kvfs *fs, uint64_t bytes)
{
	struct kvfs_dirty *d = &fs->dirty;
	bool waited = false;

	if (bytes == 0)
		return;
	pthread_mutex_lock(&d->lock);
	while (d->filling + d->draining + bytes > d->budget && d->draining) {
		waited = true;
		pthread_cond_wait(&d->cv, &d->lock);
	}
	if (waited)
		d->waits++;
	if (d->filling + d->draining + bytes > d->budget) {
		if (d->overruns++ == 0)
			kv_log(KV_LOG_WARN, "write-back budget of %llu bytes exceeded by pages "
			       "still being written; raise -o dirty=SIZE above writers x page size",
			       (unsigned long long)d->budget);
	}
	d->filling += bytes;
	note_peak(d);
	pthread_mutex_unlock(&d->lock);
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
	if (sealed)
		d->draining -= bytes;
	else
		d->filling -= bytes;
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->lock);
}

void kvfs_dirty_give_live(struct kvfs *fs, struct kvfs_live *l)
{
	kvfs_dirty_give(fs, l->dirty, l->dirty_sealed);
	l->dirty = 0;
	l->dirty_sealed = false;
}
