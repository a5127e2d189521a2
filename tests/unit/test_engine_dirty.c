/*
 * The write-back budget (engine/dirty.c) on a real engine, no mount:
 * charges move filling -> draining -> given back; a charge that does not
 * fit waits until a page drains or a filling page is given back; a writer
 * that holds every filling byte is let through rather than deadlocked;
 * and many more writers than budget pages, each page published through
 * the real committer, never take the budget past its size.
 */
#include "engine_fixture.h"

#define PAGE (64 * 1024ull)
#define BUDGET (4 * PAGE)

static struct kvfs *open_budget(struct efix *f)
{
	f->opts.dirty_budget = BUDGET;
	return efix_open(f);
}

/* filling + draining, read under the budget's lock. */
static uint64_t charged(struct kvfs *fs, uint64_t *filling, uint64_t *draining)
{
	uint64_t sum;

	pthread_mutex_lock(&fs->dirty.lock);
	*filling = fs->dirty.filling;
	*draining = fs->dirty.draining;
	sum = *filling + *draining;
	pthread_mutex_unlock(&fs->dirty.lock);
	return sum;
}

/* take, sealed and give move bytes between filling and draining exactly;
 * the peak remembers the largest sum; nothing waited, nothing overran. */
static void take_seal_give_accounting(void **state)
{
	struct efix *f = *state;
	struct kvfs *fs = open_budget(f);
	uint64_t fl, dr;
	int64_t before;

	assert_int_equal(kvfs_dirty_take(fs, 0, 0), 0);        /* nothing to charge */
	assert_int_equal(charged(fs, &fl, &dr), 0);
	assert_int_equal(kvfs_dirty_take(fs, PAGE, 0), 0);
	assert_int_equal(kvfs_dirty_take(fs, 2 * PAGE, PAGE), 0);
	assert_int_equal(charged(fs, &fl, &dr), 3 * PAGE);
	assert_int_equal(fl, 3 * PAGE);
	assert_int_equal(dr, 0);
	kvfs_dirty_sealed(fs, PAGE);
	assert_int_equal(charged(fs, &fl, &dr), 3 * PAGE);
	assert_int_equal(fl, 2 * PAGE);
	assert_int_equal(dr, PAGE);
	before = kvfs_now_ns();
	kvfs_dirty_give(fs, PAGE, true);                        /* durable */
	assert_true(fs->dirty.drained_ns >= before);
	kvfs_dirty_give(fs, PAGE, false);                       /* withdrawn unsealed */
	assert_int_equal(charged(fs, &fl, &dr), PAGE);
	assert_int_equal(fl, PAGE);
	assert_int_equal(dr, 0);
	kvfs_dirty_give(fs, PAGE, false);
	assert_int_equal(charged(fs, &fl, &dr), 0);
	assert_int_equal(fs->dirty.peak, 3 * PAGE);
	assert_int_equal(fs->dirty.waits, 0);
	assert_int_equal(fs->dirty.overruns, 0);
	assert_int_equal(fs->dirty.refused, 0);
	assert_int_equal(efix_close(f), 0);
}

struct taker {
	struct kvfs *fs;
	uint64_t bytes, held;
	uint32_t fast_uid;        /* kvfs_dirty_fast_take of this uid, if not 0 */
	uint32_t file_uid;        /* kvfs_dirty_take_uid of this uid, if not 0 */
	atomic_bool done;
	int rc;
};

static void *take_thread(void *arg)
{
	struct taker *t = arg;

	if (t->fast_uid)
		t->rc = kvfs_dirty_fast_take(t->fs, t->fast_uid, t->bytes);
	else if (t->file_uid)
		t->rc = kvfs_dirty_take_uid(t->fs, t->file_uid, t->bytes, t->held);
	else
		t->rc = kvfs_dirty_take(t->fs, t->bytes, t->held);
	atomic_store(&t->done, true);
	return NULL;
}

static bool wait_done(struct taker *t, long ms)
{
	for (long i = 0; i < ms / 10 && !atomic_load(&t->done); i++)
		efix_sleep_ms(10);
	return atomic_load(&t->done);
}

/* A full budget makes a fifth page wait, whether the budget is held by
 * pages draining or by pages other writers are still filling; the charge
 * goes through once one is given back, and never over the budget. */
static void full_budget_waits_for_a_give(void **state)
{
	struct efix *f = *state;
	struct kvfs *fs = open_budget(f);
	struct taker t = { .fs = fs, .bytes = PAGE };
	pthread_t th;
	uint64_t fl, dr;

	for (int round = 0; round < 2; round++) {
		bool drain = round == 0;

		assert_int_equal(kvfs_dirty_take(fs, BUDGET, 0), 0);
		if (drain)
			kvfs_dirty_sealed(fs, BUDGET);
		atomic_store(&t.done, false);
		t.rc = 1;
		assert_int_equal(pthread_create(&th, NULL, take_thread, &t), 0);
		efix_sleep_ms(300);
		assert_false(atomic_load(&t.done));     /* it waits */
		assert_int_equal(charged(fs, &fl, &dr), BUDGET);
		kvfs_dirty_give(fs, PAGE, drain);       /* one page durable / withdrawn */
		assert_true(wait_done(&t, 5000));
		pthread_join(th, NULL);
		assert_int_equal(t.rc, 0);
		assert_int_equal(charged(fs, &fl, &dr), BUDGET);
		assert_int_equal(fl, drain ? PAGE : BUDGET);
		kvfs_dirty_give(fs, BUDGET - PAGE, drain);
		kvfs_dirty_give(fs, PAGE, false);
		assert_int_equal(charged(fs, &fl, &dr), 0);
	}
	assert_int_equal(fs->dirty.waits, 2);
	assert_int_equal(fs->dirty.overruns, 0);
	assert_int_equal(fs->dirty.peak, BUDGET);
	assert_int_equal(efix_close(f), 0);
}

/* A writer that holds every filling byte (its page so far, a batch's staged
 * pages) would wait for itself: its charge goes through at once, counted
 * as an overrun. Two holders: the first waits for the second, and the
 * second, seeing every filling byte held by waiters, goes through. */
static void holders_are_not_deadlocked(void **state)
{
	struct efix *f = *state;
	struct kvfs *fs = open_budget(f);
	struct taker t = { .fs = fs, .bytes = PAGE, .held = 2 * PAGE };
	pthread_t th;
	uint64_t fl, dr;

	assert_int_equal(kvfs_dirty_take(fs, BUDGET, 0), 0);
	assert_int_equal(kvfs_dirty_take(fs, PAGE, BUDGET), 0);   /* no wait */
	assert_int_equal(fs->dirty.waits, 0);
	assert_int_equal(fs->dirty.overruns, 1);
	assert_int_equal(charged(fs, &fl, &dr), BUDGET + PAGE);
	kvfs_dirty_give(fs, BUDGET + PAGE, false);

	/* two writers of two pages each fill the budget */
	assert_int_equal(kvfs_dirty_take(fs, 2 * PAGE, 0), 0);
	assert_int_equal(kvfs_dirty_take(fs, 2 * PAGE, 0), 0);
	assert_int_equal(pthread_create(&th, NULL, take_thread, &t), 0);
	efix_sleep_ms(300);
	assert_false(atomic_load(&t.done));     /* the other holder may give back */
	assert_int_equal(kvfs_dirty_take(fs, PAGE, 2 * PAGE), 0);  /* ... but waits too */
	assert_int_equal(fs->dirty.overruns, 2);
	assert_int_equal(charged(fs, &fl, &dr), BUDGET + PAGE);
	kvfs_dirty_sealed(fs, 3 * PAGE);        /* it seals its pages ... */
	assert_false(atomic_load(&t.done));
	kvfs_dirty_give(fs, 3 * PAGE, true);    /* ... which become durable */
	assert_true(wait_done(&t, 5000));
	pthread_join(th, NULL);
	assert_int_equal(t.rc, 0);
	assert_int_equal(fs->dirty.overruns, 2);
	assert_int_equal(charged(fs, &fl, &dr), 3 * PAGE);
	kvfs_dirty_give(fs, 3 * PAGE, false);
	assert_int_equal(efix_close(f), 0);
}

/* A writer whose charge does not fit waits as long as pages keep being
 * given back, however long that takes: the 2 s stall that lets a charge
 * through is 2 s with nothing given back (a holder blocked elsewhere),
 * not 2 s of waiting. Here another writer keeps one page cycling (filled,
 * sealed, durable, taken again) for 3 s while a two-page charge waits. */
static void waiting_while_pages_drain_is_no_stall(void **state)
{
	struct efix *f = *state;
	struct kvfs *fs = open_budget(f);
	struct taker t = { .fs = fs, .bytes = 2 * PAGE };
	pthread_t th;
	uint64_t fl, dr;

	assert_int_equal(kvfs_dirty_take(fs, BUDGET, 0), 0);
	assert_int_equal(pthread_create(&th, NULL, take_thread, &t), 0);
	for (int i = 0; i < 15; i++) {
		efix_sleep_ms(200);
		assert_false(atomic_load(&t.done));
		kvfs_dirty_sealed(fs, PAGE);
		kvfs_dirty_give(fs, PAGE, true);
		assert_int_equal(kvfs_dirty_take(fs, PAGE, 0), 0);   /* 3 pages + 1 fit */
	}
	assert_false(atomic_load(&t.done));
	assert_int_equal(fs->dirty.overruns, 0);
	kvfs_dirty_give(fs, 2 * PAGE, false);   /* two pages withdrawn: it fits */
	assert_true(wait_done(&t, 5000));
	pthread_join(th, NULL);
	assert_int_equal(t.rc, 0);
	assert_int_equal(charged(fs, &fl, &dr), BUDGET);
	assert_int_equal(fs->dirty.overruns, 0);
	assert_int_equal(fs->dirty.peak, BUDGET);
	kvfs_dirty_give(fs, BUDGET, false);
	assert_int_equal(efix_close(f), 0);
}

/* A holder blocked elsewhere (one thread with a page open, writing another)
 * is not seen waiting: once nothing was given back for 2 s, one waiting
 * charge goes through as an overrun, and only one: the next waits for a
 * stall of its own, or for room. */
static void a_stall_lets_one_charge_through(void **state)
{
	struct efix *f = *state;
	struct kvfs *fs = open_budget(f);
	struct taker t[2] = { { .fs = fs, .bytes = PAGE }, { .fs = fs, .bytes = PAGE } };
	pthread_t th[2];
	uint64_t fl, dr;

	assert_int_equal(kvfs_dirty_take(fs, BUDGET, 0), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&th[i], NULL, take_thread, &t[i]), 0);
	efix_sleep_ms(1500);
	assert_false(atomic_load(&t[0].done) || atomic_load(&t[1].done));
	efix_sleep_ms(1500);       /* 3 s: one stall passed, not two */
	assert_int_equal(atomic_load(&t[0].done) + atomic_load(&t[1].done), 1);
	assert_int_equal(fs->dirty.overruns, 1);
	assert_int_equal(charged(fs, &fl, &dr), BUDGET + PAGE);
	kvfs_dirty_give(fs, 2 * PAGE, false);   /* the holder gives its pages back */
	for (int i = 0; i < 2; i++) {
		assert_true(wait_done(&t[i], 5000));
		pthread_join(th[i], NULL);
		assert_int_equal(t[i].rc, 0);
	}
	assert_int_equal(fs->dirty.overruns, 1);
	assert_int_equal(charged(fs, &fl, &dr), BUDGET);
	kvfs_dirty_give(fs, BUDGET, false);
	assert_int_equal(efix_close(f), 0);
}

/* Pages drain but none becomes durable (every manifest commit fails): a
 * charge waiting for them is refused with EIO after 20 s, nothing
 * charged, counted; once the manifest commits again the same charge is
 * taken. */
static void no_durable_page_for_20s_refuses_with_eio(void **state)
{
	struct efix *f = *state;
	const char *spec = "manifest commit 1 EIO 1000";
	int64_t start;
	uint64_t fl, dr;

	f->opts.fault_injection = true;
	open_budget(f);
	efix_layer(f);
	assert_int_equal(efix_sync(f), 0);
	assert_int_equal(kvfs_fault_set(f->fs, spec, strlen(spec)), 0);
	assert_int_equal(kvfs_dirty_take(f->fs, BUDGET, 0), 0);
	assert_int_equal(efix_publish_charged(f, f->layer, "p", BUDGET, 1, BUDGET, NULL), 0);
	start = kvfs_now_ns();
	assert_int_equal(kvfs_dirty_take(f->fs, PAGE, 0), -EIO);
	assert_true(kvfs_now_ns() - start >= 19 * 1000000000ll);
	assert_int_equal(f->fs->dirty.refused, 1);
	assert_int_equal(charged(f->fs, &fl, &dr), BUDGET);    /* nothing more */
	assert_int_equal(dr, BUDGET);
	assert_int_equal(kvfs_fault_set(f->fs, "off", 3), 0);
	assert_int_equal(kvfs_dirty_take(f->fs, PAGE, 0), 0); /* after the retry */
	assert_int_equal(charged(f->fs, &fl, &dr), PAGE);
	kvfs_dirty_give(f->fs, PAGE, false);
	assert_int_equal(efix_close(f), 0);
}

/* ---- many writers, few budget pages ---- */

#define WRITERS 16
#define WRITER_PAGES 6

struct flood {
	struct efix *f;
	atomic_int next_writer;
	atomic_int errors;
	atomic_uint_fast64_t sampled_max;
	atomic_bool stop;
};

/* One writer: take a page's charge (a single write of the whole page),
 * fill it for a while, publish it; the committer gives the charge back
 * once the page is durable. */
static void *flood_writer(void *arg)
{
	struct flood *fl = arg;
	int w = atomic_fetch_add(&fl->next_writer, 1);
	char name[32];

	for (int i = 0; i < WRITER_PAGES; i++) {
		int rc = kvfs_dirty_take(fl->f->fs, PAGE, 0);

		if (rc == 0) {
			efix_sleep_ms(100 + (w * 7 + i * 3) % 60);   /* copying the bytes in */
			snprintf(name, sizeof(name), "w%d-%d", w, i);
			rc = efix_publish_charged(fl->f, fl->f->layer, name, PAGE,
						  (unsigned)(w * 31 + i), PAGE, NULL);
			if (rc < 0)
				kvfs_dirty_give(fl->f->fs, PAGE, false);
		}
		if (rc < 0)
			atomic_fetch_add(&fl->errors, 1);
	}
	return NULL;
}

static void *flood_sampler(void *arg)
{
	struct flood *fl = arg;
	uint64_t a, b, sum;

	while (!atomic_load(&fl->stop)) {
		sum = charged(fl->f->fs, &a, &b);
		if (sum > atomic_load(&fl->sampled_max))
			atomic_store(&fl->sampled_max, sum);
		efix_sleep_ms(1);
	}
	return NULL;
}

/* 16 writers on a budget of 4 pages: each waits before it takes the page
 * that would overrun; the peak stays within the budget, no charge goes
 * through as an overrun, and every page is there and durable. */
static void sixteen_writers_on_four_pages(void **state)
{
	struct efix *f = *state;
	struct flood fl = { .f = f };
	pthread_t w[WRITERS], sampler;
	struct kv_node_info n;
	char name[32];
	uint64_t a, b;

	open_budget(f);
	efix_layer(f);
	assert_int_equal(pthread_create(&sampler, NULL, flood_sampler, &fl), 0);
	for (int i = 0; i < WRITERS; i++)
		assert_int_equal(pthread_create(&w[i], NULL, flood_writer, &fl), 0);
	for (int i = 0; i < WRITERS; i++)
		pthread_join(w[i], NULL);
	atomic_store(&fl.stop, true);
	pthread_join(sampler, NULL);
	assert_int_equal(efix_sync(f), 0);
	print_message("write-back: budget %llu, peak %llu, sampled max %llu, %llu waits, "
		      "%llu overruns\n", BUDGET, (unsigned long long)f->fs->dirty.peak,
		      (unsigned long long)atomic_load(&fl.sampled_max),
		      (unsigned long long)f->fs->dirty.waits,
		      (unsigned long long)f->fs->dirty.overruns);
	assert_int_equal(atomic_load(&fl.errors), 0);
	assert_true(f->fs->dirty.waits > 0);
	assert_true(f->fs->dirty.peak <= BUDGET);
	assert_true(atomic_load(&fl.sampled_max) <= BUDGET);
	assert_int_equal(f->fs->dirty.overruns, 0);
	assert_int_equal(charged(f->fs, &a, &b), 0);
	for (int i = 0; i < WRITERS; i++)
		for (int j = 0; j < WRITER_PAGES; j++) {
			snprintf(name, sizeof(name), "w%d-%d", i, j);
			assert_int_equal(efix_lookup(f, name, &n), 0);
			assert_int_equal(n.state, KV_PAGE_DURABLE);
		}
	assert_int_equal(efix_close(f), 0);
}

/* One uid's fast-path pages hold at most half the budget until they are
 * durable: its next chunk waits for its own pages, while root and
 * another uid go on at once; a chunk larger than the share passes when
 * the uid holds nothing. (12 calls of one uid once held the whole budget,
 * and root's 4 KiB writes waited up to 1 s.) */
static void a_uids_fast_pages_hold_half_the_budget(void **state)
{
	struct efix *f = *state;
	struct kvfs *fs = open_budget(f);
	struct taker t = { .fs = fs, .fast_uid = 1000, .bytes = PAGE };
	pthread_t th;

	assert_int_equal(kvfs_dirty_fast_share(fs), BUDGET / 2);
	assert_int_equal(kvfs_dirty_fast_take(fs, 1000, 2 * PAGE), 0);
	assert_int_equal(pthread_create(&th, NULL, take_thread, &t), 0);
	efix_sleep_ms(300);
	assert_false(atomic_load(&t.done));                      /* it waits */
	assert_int_equal(kvfs_dirty_fast_take(fs, 0, BUDGET), 0);       /* root */
	assert_int_equal(kvfs_dirty_fast_take(fs, 2000, 2 * PAGE), 0);  /* another uid */
	kvfs_dirty_fast_done(fs, 1000, PAGE);                    /* one page durable */
	assert_true(wait_done(&t, 5000));
	pthread_join(th, NULL);
	assert_int_equal(t.rc, 0);
	kvfs_dirty_fast_done(fs, 1000, 2 * PAGE);
	kvfs_dirty_fast_done(fs, 2000, 2 * PAGE);
	assert_int_equal(kvfs_dirty_fast_take(fs, 3000, 3 * PAGE), 0);  /* alone: passes */
	kvfs_dirty_fast_done(fs, 3000, 3 * PAGE);
	pthread_mutex_lock(&fs->dirty.lock);
	assert_int_equal(fs->dirty.uids.n, 0);                   /* nothing left counted */
	pthread_mutex_unlock(&fs->dirty.lock);
	assert_int_equal(efix_close(f), 0);
}

/* A uid's sealed page files count in its share until durable, one share
 * with its fast-path pages: its next page file and its next fast-path
 * chunk wait for them to drain (not for a close: nothing is refused),
 * while root and another uid go on. (Sealed page files drained outside
 * any share: one uid writing faster than the disk through both paths
 * held a 4 MiB budget, and root's 4 KiB writes waited, p99 35-58 ms.) */
static void a_uids_sealed_pages_count_until_durable(void **state)
{
	struct efix *f = *state;
	struct kvfs *fs = open_budget(f);
	struct kvfs_live l = { .dirty = 2 * PAGE, .dirty_uid = true, .writer_uid = 1000 };
	struct taker file = { .fs = fs, .file_uid = 1000, .bytes = PAGE };
	struct taker fast = { .fs = fs, .fast_uid = 1000, .bytes = PAGE };
	pthread_t th[2];
	uint64_t fl, dr;

	assert_int_equal(kvfs_dirty_take_uid(fs, 1000, 2 * PAGE, 0), 0);
	kvfs_dirty_sealed_live(fs, &l);
	assert_int_equal(kvfs_dirty_uid_filling(fs, 1000), 0);   /* no longer written */
	assert_int_equal(pthread_create(&th[0], NULL, take_thread, &file), 0);
	assert_int_equal(pthread_create(&th[1], NULL, take_thread, &fast), 0);
	efix_sleep_ms(300);
	assert_false(atomic_load(&file.done));
	assert_false(atomic_load(&fast.done));
	assert_int_equal(kvfs_dirty_take_uid(fs, 0, PAGE, 0), 0);      /* root */
	assert_int_equal(kvfs_dirty_take_uid(fs, 2000, PAGE, 0), 0);   /* another uid */
	kvfs_dirty_give_live(fs, &l);                            /* durable */
	assert_true(wait_done(&file, 5000));
	assert_true(wait_done(&fast, 5000));
	pthread_join(th[0], NULL);
	pthread_join(th[1], NULL);
	assert_int_equal(file.rc, 0);
	assert_int_equal(fast.rc, 0);
	assert_int_equal(fs->dirty.uid_refused, 0);
	for (uint32_t uid = 0; uid <= 2000; uid += 1000) {
		kvfs_dirty_uid_done(fs, uid, PAGE);
		kvfs_dirty_give(fs, PAGE, false);
	}
	kvfs_dirty_fast_done(fs, 1000, PAGE);
	assert_int_equal(charged(fs, &fl, &dr), 0);
	pthread_mutex_lock(&fs->dirty.lock);
	assert_int_equal(fs->dirty.uids.n, 0);                   /* nothing left counted */
	pthread_mutex_unlock(&fs->dirty.lock);
	assert_int_equal(efix_close(f), 0);
}

/* A uid's one page past its share (a page of any size may be written
 * alone) counts only up to the share: root and another uid get the other
 * half at once, without a wait or an overrun, and a charge past that
 * waits as before. (A uid's page of twice the budget, held open, made
 * every root write wait for the 2 s stall rule, one after another.) */
static void a_page_past_the_share_holds_only_the_share(void **state)
{
	struct efix *f = *state;
	struct kvfs *fs = open_budget(f);
	struct taker t = { .fs = fs, .bytes = PAGE };
	pthread_t th;
	uint64_t fl, dr;

	assert_int_equal(kvfs_dirty_take_uid(fs, 1000, 2 * BUDGET, 0), 0);   /* alone */
	assert_int_equal(kvfs_dirty_take(fs, PAGE, 0), 0);                   /* root */
	assert_int_equal(kvfs_dirty_take_uid(fs, 2000, PAGE, 0), 0);         /* another */
	assert_int_equal(fs->dirty.waits, 0);
	assert_int_equal(fs->dirty.overruns, 0);
	assert_int_equal(pthread_create(&th, NULL, take_thread, &t), 0);      /* root again */
	efix_sleep_ms(300);
	assert_false(atomic_load(&t.done));             /* the budget's other half is full */
	kvfs_dirty_uid_done(fs, 2000, PAGE);
	kvfs_dirty_give(fs, PAGE, false);
	assert_true(wait_done(&t, 5000));
	pthread_join(th, NULL);
	assert_int_equal(t.rc, 0);
	kvfs_dirty_uid_done(fs, 1000, 2 * BUDGET);
	kvfs_dirty_give(fs, 2 * BUDGET + 2 * PAGE, false);
	assert_int_equal(charged(fs, &fl, &dr), 0);
	pthread_mutex_lock(&fs->dirty.lock);
	assert_int_equal(fs->dirty.over, 0);
	assert_int_equal(fs->dirty.uids.n, 0);
	pthread_mutex_unlock(&fs->dirty.lock);
	assert_int_equal(efix_close(f), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(take_seal_give_accounting, efix_setup, efix_teardown),
		cmocka_unit_test_setup_teardown(full_budget_waits_for_a_give, efix_setup,
						efix_teardown),
		cmocka_unit_test_setup_teardown(holders_are_not_deadlocked, efix_setup,
						efix_teardown),
		cmocka_unit_test_setup_teardown(waiting_while_pages_drain_is_no_stall, efix_setup,
						efix_teardown),
		cmocka_unit_test_setup_teardown(a_stall_lets_one_charge_through, efix_setup,
						efix_teardown),
		cmocka_unit_test_setup_teardown(no_durable_page_for_20s_refuses_with_eio,
						efix_setup, efix_teardown),
		cmocka_unit_test_setup_teardown(a_uids_fast_pages_hold_half_the_budget, efix_setup,
						efix_teardown),
		cmocka_unit_test_setup_teardown(a_uids_sealed_pages_count_until_durable,
						efix_setup, efix_teardown),
		cmocka_unit_test_setup_teardown(a_page_past_the_share_holds_only_the_share,
						efix_setup, efix_teardown),
		cmocka_unit_test_setup_teardown(sixteen_writers_on_four_pages, efix_setup,
						efix_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
