/*
 * Stripe health: which stripes the allocator may still use. A stripe whose
 * device fails writes (EIO, EROFS, ...) would otherwise stay in the
 * round-robin and fail every Nth new page for as long as the store is
 * mounted; here it is taken out of allocation once, with one log line,
 * while its committed extents are still read (a read-only filesystem or a
 * disk with bad sectors usually still returns most of what it holds). A
 * stripe the store was opened without (kv_store_opts.degraded) is missing:
 * never allocated to, never reclaimed, its reads give EIO. Neither state
 * ends before the store is closed: a disk that failed once is not trusted
 * again until an operator has looked at it and mounted again.
 *
 * The I/O thread reports every write and fdatasync result here; the
 * allocator (store.c, under kv_store.lock) asks stripe_in_rotation(). Only
 * atomics: the I/O thread never takes kv_store.lock.
 */
#include <errno.h>
#include <inttypes.h>

#include "store_i.h"

/* Consecutive failed writes that take a stripe out of allocation. One
 * failure may be a single bad sector the drive then remaps; a dying device
 * fails every write in flight, so three in a row come at once. EROFS is
 * final at once: the filesystem went read-only and stays so until it is
 * mounted again. */
#define STRIPE_FAIL_RUN 3u

bool stripe_error_is_device(int err)
{
	switch (-err) {
	case EIO:
	case EROFS:
	case ENXIO:
	case ENODEV:
#ifdef EUCLEAN
	case EUCLEAN:   /* the filesystem found itself corrupted */
#endif
		return true;
	default:
		return false;
	}
}

bool stripe_in_rotation(const struct stripe *st)
{
	return !st->missing && atomic_load(&st->failed) == 0;
}

void stripe_write_ok(struct kv_store *s, uint32_t stripe)
{
	/* load first: a store on every write would bounce the cache line */
	if (stripe < s->nstripes &&
	    atomic_load_explicit(&s->stripes[stripe].fail_run, memory_order_relaxed))
		atomic_store(&s->stripes[stripe].fail_run, 0);
}

void stripe_write_failed(struct kv_store *s, uint32_t stripe, int err)
{
	struct stripe *st;
	unsigned run;
	int none = 0;

	if (stripe >= s->nstripes)
		return;
	if (err == -ENOSPC || err == -EDQUOT) {
		stripe_mark_full(s, stripe);   /* transient: frees make room */
		return;
	}
	if (!stripe_error_is_device(err))
		return;
	st = &s->stripes[stripe];
	atomic_fetch_add(&st->write_errors, 1);
	run = atomic_fetch_add(&st->fail_run, 1) + 1;
	if (err != -EROFS && run < STRIPE_FAIL_RUN)
		return;
	if (!atomic_compare_exchange_strong(&st->failed, &none, err))
		return;   /* out already: said so once */
	kv_log(KV_LOG_ERR, "store: stripe %" PRIu32 " (%s) taken out of "
	       "allocation: %u write%s in a row failed, the last with %s; its "
	       "pages are still read, new pages go to the other stripes until "
	       "the store is mounted again (see docs/operators.md, failing "
	       "disks)", stripe, st->path, run, run == 1 ? "" : "s",
	       kv_strerror(err));
}

int kv_store_stripe_state(struct kv_store *s, unsigned i,
			  struct kv_stripe_state *out)
{
	const struct stripe *st;

	if (i >= s->nstripes)
		return -EINVAL;
	st = &s->stripes[i];
	out->error = atomic_load(&st->failed);
	out->health = st->missing ? KV_STRIPE_MISSING :
		      out->error ? KV_STRIPE_FAILED : KV_STRIPE_OK;
	if (st->missing)
		out->error = st->open_error;
	out->write_errors = atomic_load(&st->write_errors);
	return 0;
}

const char *stripe_no_segment_why(const struct stripe *st)
{
	return st->missing ? "stripe missing (store opened degraded)" :
	       "segment file missing";
}

/* Under kv_store.lock (alloc): at most one line a second, as for ENOSPC. */
void stripe_log_none_usable(struct kv_store *s)
{
	uint64_t now = now_ns();

	if (s->noalloc_logged && now - s->noalloc_logged < 1000000000ull)
		return;
	s->noalloc_logged = now;
	kv_log(KV_LOG_ERR, "store: no stripe left to allocate on: every stripe "
	       "has failed writes or is missing; new pages fail with EIO");
}
