/*
 * Unit tests of the fast path's executor (fast/executor.c), built without
 * FUSE: jobs run and stop drains them; uids are served in turn, so one
 * uid's backlog does not delay another's call; a uid's thread share, its
 * memory share and the global memory bound hold; a full uid queue
 * refuses with -EAGAIN; with two uids running, or one and a FUSE caller
 * of another, threads' nice weighs each uid as about one thread.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>

#include "executor.h"

/* A job that records when it ran and can be held until released. */
struct tjob {
	struct kvfs_exec_job job;
	int id;
	atomic_bool *gate;          /* spin until true (NULL: run at once) */
	atomic_int *order;          /* next position to take */
	int ran_at;                 /* its position */
	atomic_int *running, *peak; /* concurrency seen */
	pid_t tid;                  /* the thread that ran it */
	int nice_at_end;            /* its nice when released */
};

static void tjob_run(struct kvfs_exec_job *j)
{
	struct tjob *t = (struct tjob *)j;
	int now, p;

	t->tid = gettid();   /* before the count: the test reads it after */
	now = atomic_fetch_add(t->running, 1) + 1;

	while ((p = atomic_load(t->peak)) < now && !atomic_compare_exchange_weak(t->peak, &p, now))
		;
	while (t->gate && !atomic_load(t->gate))
		usleep(200);
	t->nice_at_end = getpriority(PRIO_PROCESS, (id_t)gettid());
	t->ran_at = atomic_fetch_add(t->order, 1);
	atomic_fetch_sub(t->running, 1);
}

static struct kvfs_exec_limits limits(unsigned threads, unsigned uid_threads)
{
	struct kvfs_exec_limits l;

	kvfs_exec_default_limits(&l);
	l.threads = threads;
	l.uid_threads = uid_threads;
	return l;
}

static void init_job(struct tjob *t, int id, uint32_t uid, uint64_t mem, atomic_bool *gate,
		     atomic_int *order, atomic_int *running, atomic_int *peak)
{
	*t = (struct tjob){ .job = { .run = tjob_run, .uid = uid, .mem = mem }, .id = id,
			    .gate = gate, .order = order, .running = running, .peak = peak,
			    .ran_at = -1 };
}

static void wait_running(atomic_int *running, int n)
{
	for (int i = 0; i < 5000 && atomic_load(running) < n; i++)
		usleep(1000);
	assert_int_equal(atomic_load(running), n);
}

static void test_runs_and_drains(void **state)
{
	struct kvfs_exec_limits l = limits(4, 4);
	struct kvfs_exec *ex;
	atomic_int order = 0, running = 0, peak = 0;
	struct tjob jobs[100];

	(void)state;
	assert_int_equal(kvfs_exec_start(&l, &ex), 0);
	for (int i = 0; i < 100; i++) {
		init_job(&jobs[i], i, (uint32_t)(i % 3), 1, NULL, &order, &running, &peak);
		assert_int_equal(kvfs_exec_submit(ex, &jobs[i].job), 0);
	}
	kvfs_exec_stop(ex);      /* runs what is queued */
	for (int i = 0; i < 100; i++)
		assert_true(jobs[i].ran_at >= 0);
	assert_int_equal(atomic_load(&order), 100);
	assert_true(atomic_load(&peak) <= 4);
}

/* uid 1 fills every thread and queues 50 more; uid 2's one call runs
 * as soon as a thread frees, before uid 1's backlog. */
static void test_uids_in_turn(void **state)
{
	struct kvfs_exec_limits l = limits(2, 2);
	struct kvfs_exec *ex;
	atomic_int order = 0, running = 0, peak = 0;
	atomic_bool gate = false;
	struct tjob a[52], b;

	(void)state;
	assert_int_equal(kvfs_exec_start(&l, &ex), 0);
	for (int i = 0; i < 52; i++) {
		init_job(&a[i], i, 1, 1, i < 2 ? &gate : NULL, &order, &running, &peak);
		assert_int_equal(kvfs_exec_submit(ex, &a[i].job), 0);
		if (i == 1)
			wait_running(&running, 2);
	}
	init_job(&b, 99, 2, 1, NULL, &order, &running, &peak);
	assert_int_equal(kvfs_exec_submit(ex, &b.job), 0);
	atomic_store(&gate, true);
	kvfs_exec_stop(ex);
	/* a[0], a[1] first (held), then b within the next two */
	assert_true(b.ran_at <= 3);
	assert_true(a[51].ran_at > b.ran_at);
}

/* One uid never takes more than uid_threads, even with idle threads. */
static void test_uid_thread_share(void **state)
{
	struct kvfs_exec_limits l = limits(6, 2);
	struct kvfs_exec *ex;
	atomic_int order = 0, running = 0, peak = 0;
	atomic_bool gate = false;
	struct tjob a[6];

	(void)state;
	assert_int_equal(kvfs_exec_start(&l, &ex), 0);
	for (int i = 0; i < 6; i++) {
		init_job(&a[i], i, 7, 1, &gate, &order, &running, &peak);
		assert_int_equal(kvfs_exec_submit(ex, &a[i].job), 0);
	}
	wait_running(&running, 2);
	usleep(20000);
	assert_int_equal(atomic_load(&running), 2);
	atomic_store(&gate, true);
	kvfs_exec_stop(ex);
	assert_int_equal(atomic_load(&peak), 2);
}

/* Memory: a uid's calls together stay under uid_mem (one may run alone,
 * whatever its size); all calls together under mem. */
static void test_memory_admission(void **state)
{
	struct kvfs_exec_limits l = limits(8, 8);
	struct kvfs_exec *ex;
	atomic_int order = 0, running = 0, peak = 0;
	atomic_bool gate = false;
	struct tjob big[3], other[3];
	struct kvfs_exec_stats st;

	(void)state;
	l.uid_mem = 100;
	l.mem = 250;
	assert_int_equal(kvfs_exec_start(&l, &ex), 0);
	for (int i = 0; i < 3; i++) {       /* 300 > uid_mem: one at a time */
		init_job(&big[i], i, 1, 300, &gate, &order, &running, &peak);
		assert_int_equal(kvfs_exec_submit(ex, &big[i].job), 0);
	}
	wait_running(&running, 1);
	usleep(20000);
	kvfs_exec_stats(ex, &st);
	assert_int_equal(st.running, 1);
	assert_int_equal(st.mem_running, 300);
	/* Another uid's small calls wait too: 300 already runs, over mem. */
	for (int i = 0; i < 3; i++) {
		init_job(&other[i], 10 + i, 2, 40, &gate, &order, &running, &peak);
		assert_int_equal(kvfs_exec_submit(ex, &other[i].job), 0);
	}
	usleep(20000);
	assert_int_equal(atomic_load(&running), 1);
	atomic_store(&gate, true);
	kvfs_exec_stop(ex);
	assert_int_equal(atomic_load(&peak) <= 3, 1);
	for (int i = 0; i < 3; i++)
		assert_true(big[i].ran_at >= 0 && other[i].ran_at >= 0);
}

static void test_queue_full(void **state)
{
	struct kvfs_exec_limits l = limits(1, 1);
	struct kvfs_exec *ex;
	atomic_int order = 0, running = 0, peak = 0;
	atomic_bool gate = false;
	struct tjob held, q[4], more, other;
	struct kvfs_exec_stats st;

	(void)state;
	l.uid_queue = 4;
	assert_int_equal(kvfs_exec_start(&l, &ex), 0);
	init_job(&held, 0, 5, 1, &gate, &order, &running, &peak);
	assert_int_equal(kvfs_exec_submit(ex, &held.job), 0);
	wait_running(&running, 1);
	for (int i = 0; i < 4; i++) {
		init_job(&q[i], 1 + i, 5, 1, NULL, &order, &running, &peak);
		assert_int_equal(kvfs_exec_submit(ex, &q[i].job), 0);
	}
	init_job(&more, 9, 5, 1, NULL, &order, &running, &peak);
	assert_int_equal(kvfs_exec_submit(ex, &more.job), -EAGAIN);
	init_job(&other, 10, 6, 1, NULL, &order, &running, &peak);
	assert_int_equal(kvfs_exec_submit(ex, &other.job), 0);   /* its own queue */
	kvfs_exec_stats(ex, &st);
	assert_int_equal(st.refused, 1);
	assert_int_equal(st.queued, 5);
	atomic_store(&gate, true);
	kvfs_exec_stop(ex);
	assert_int_equal(more.ran_at, -1);
	assert_true(other.ran_at >= 0);
}

static int nice_of(pid_t tid)
{
	return getpriority(PRIO_PROCESS, (id_t)tid);
}

/* An executor of 8 threads that weighs uids (else the test is skipped),
 * running uid 1's four calls a[], held by gate; *base: the daemon's nice. */
static struct kvfs_exec *start_weighing(struct tjob a[4], atomic_bool *gate, atomic_int *order,
					atomic_int *running, atomic_int *peak, int *base)
{
	struct kvfs_exec_limits l = limits(8, 8);
	struct kvfs_exec_stats st;
	struct kvfs_exec *ex;

	assert_int_equal(kvfs_exec_start(&l, &ex), 0);
	kvfs_exec_stats(ex, &st);
	if (!st.uid_weighting) {
		kvfs_exec_stop(ex);
		skip();    /* not root nor CAP_SYS_NICE: logged at start */
	}
	*base = nice_of(gettid());
	for (int i = 0; i < 4; i++) {
		init_job(&a[i], i, 1, 1, gate, order, running, peak);
		assert_int_equal(kvfs_exec_submit(ex, &a[i].job), 0);
	}
	wait_running(running, 4);
	return ex;
}

/* Turns share the threads; nice shares the CPU. Alone, uid 1's four
 * calls run at the base nice. With uid 2's call running too, uid 1's
 * threads sit 6 steps up (4 x 1.25^-6 = 1.05 threads' weight) and uid
 * 2's at the base. Once uid 2 is gone, uid 1's running calls and its
 * next one run at the base again. */
static void test_uids_weighed_by_nice(void **state)
{
	struct kvfs_exec *ex;
	atomic_int order = 0, running = 0, peak = 0;
	atomic_bool gate = false, gate_b = false;
	struct tjob a[4], b, c;
	struct kvfs_exec_stats st;
	int base, want;

	(void)state;
	ex = start_weighing(a, &gate, &order, &running, &peak, &base);
	want = base + 6 > 19 ? 19 : base + 6;
	for (int i = 0; i < 4; i++)
		assert_int_equal(nice_of(a[i].tid), base);
	init_job(&b, 10, 2, 1, &gate_b, &order, &running, &peak);
	assert_int_equal(kvfs_exec_submit(ex, &b.job), 0);
	wait_running(&running, 5);
	for (int i = 0; i < 4; i++)
		assert_int_equal(nice_of(a[i].tid), want);
	assert_int_equal(nice_of(b.tid), base);
	atomic_store(&gate_b, true);
	do {               /* until the executor has counted b out */
		usleep(1000);
		kvfs_exec_stats(ex, &st);
	} while (st.running > 4);
	for (int i = 0; i < 4; i++)   /* a lone uid's running calls go back */
		assert_int_equal(nice_of(a[i].tid), base);
	init_job(&c, 20, 1, 1, NULL, &order, &running, &peak);
	assert_int_equal(kvfs_exec_submit(ex, &c.job), 0);
	for (int i = 0; i < 5000 && atomic_load(&order) < 2; i++)
		usleep(1000);
	assert_int_equal(atomic_load(&order), 2);   /* b and c ran */
	assert_int_equal(c.nice_at_end, base);
	assert_int_equal(b.nice_at_end, base);
	atomic_store(&gate, true);
	kvfs_exec_stop(ex);
	for (int i = 0; i < 4; i++)
		assert_int_equal(a[i].nice_at_end, base);
}

/* A FUSE caller of another uid counts as a second uid: uid 1's four lone
 * calls go 6 steps up when uid 2 makes a request (not when uid 1 does),
 * and come back to the base once a call starts more than a second after
 * uid 2's last request. */
static void test_fuse_callers_weigh(void **state)
{
	struct kvfs_exec *ex;
	atomic_int order = 0, running = 0, peak = 0;
	atomic_bool gate = false;
	struct tjob a[4], d;
	int base, want;

	(void)state;
	ex = start_weighing(a, &gate, &order, &running, &peak, &base);
	want = base + 6 > 19 ? 19 : base + 6;
	kvfs_exec_note_caller(ex, 1);
	for (int i = 0; i < 4; i++)
		assert_int_equal(nice_of(a[i].tid), base);
	kvfs_exec_note_caller(ex, 2);
	for (int i = 0; i < 4; i++)
		assert_int_equal(nice_of(a[i].tid), want);
	kvfs_exec_note_caller(NULL, 2);          /* no executor: nothing */
	usleep(1100 * 1000);
	init_job(&d, 30, 1, 1, NULL, &order, &running, &peak);
	assert_int_equal(kvfs_exec_submit(ex, &d.job), 0);
	for (int i = 0; i < 5000 && atomic_load(&order) < 1; i++)
		usleep(1000);
	assert_int_equal(atomic_load(&order), 1);
	assert_int_equal(d.nice_at_end, base);
	for (int i = 0; i < 4; i++)
		assert_int_equal(nice_of(a[i].tid), base);
	atomic_store(&gate, true);
	kvfs_exec_stop(ex);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_runs_and_drains),
		cmocka_unit_test(test_uids_in_turn),
		cmocka_unit_test(test_uid_thread_share),
		cmocka_unit_test(test_memory_admission),
		cmocka_unit_test(test_queue_full),
		cmocka_unit_test(test_uids_weighed_by_nice),
		cmocka_unit_test(test_fuse_callers_weigh),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
