/*
 * Fault injection (tests) at the one seam every extent I/O passes: the
 * I/O thread hands each completion's result to store_fault_apply() before
 * acting on it, so an armed fault looks exactly like a device error (or a
 * short transfer) to the rest of the store, the stripe health included.
 * Armed with kv_store_fault_arm*(); state lives in struct engine under
 * qlock.
 */
#include <errno.h>

#include "store_i.h"

/* Apply an armed fault to one completion; returns the result to use. */
int store_fault_apply(struct engine *g, unsigned opbit, int res,
		       unsigned asked)
{
	unsigned short_len;

	if (!atomic_load_explicit(&g->fault_nth, memory_order_relaxed))
		return res;
	pthread_mutex_lock(&g->qlock);
	if (g->fault_nth && (g->fault_mask & opbit) &&
	    atomic_fetch_sub(&g->fault_nth, 1) == 1) {
		if (g->fault_count > 1) {      /* the next one fails too */
			g->fault_count--;
			atomic_store(&g->fault_nth, 1);
		}
		if (g->fault_err) {
			res = g->fault_err;
		} else if (res > 1 && opbit != KV_FAULT_FSYNC) {
			/* keep it sector aligned so O_DIRECT can retry it */
			short_len = (asked / 2) & ~511u;
			if (short_len == 0)
				short_len = (unsigned)res / 2;
			if (short_len < (unsigned)res)
				res = (int)short_len;
		}
	}
	pthread_mutex_unlock(&g->qlock);
	return res;
}

void kv_store_fault_arm(struct kv_store *s, unsigned op_mask, unsigned nth,
			int err)
{
	kv_store_fault_arm_count(s, op_mask, nth, err, 1);
}

void kv_store_fault_arm_count(struct kv_store *s, unsigned op_mask, unsigned nth,
			      int err, unsigned count)
{
	struct engine *g = &s->eng;

	pthread_mutex_lock(&g->qlock);
	g->fault_mask = op_mask;
	g->fault_err = err;
	g->fault_count = count ? count : 1;
	atomic_store(&g->fault_nth, nth);
	pthread_mutex_unlock(&g->qlock);
}
