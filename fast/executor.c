/*
 * The fast path's executor (executor.h): per-uid FIFO queues served in
 * turn by a fixed set of threads, with admission by thread share and by
 * estimated memory.
 *
 * The uids with work form a small array; a cursor walks it so that each
 * thread that frees up looks at the next uid first. A uid at its thread or
 * memory share is skipped (its calls wait, they are not refused); a call
 * that would overrun the global memory bound makes the threads wait for
 * running calls rather than skip past it, so a large call is never starved
 * by a stream of small ones.
 *
 * Turns share the threads, not the CPU: the OS shares that between running
 * threads, so a uid with 12 calls running would get 12 shares against
 * another uid's one. While more than one uid has calls running, each
 * thread's nice is set from its uid's running count k (about log1.25 k
 * above the daemon's own: CFS weighs each step 1.25x), so every uid's
 * running calls weigh about one thread at the daemon's nice. A lone uid
 * runs at the daemon's nice. Raising a nice is immediate (the newcomer's
 * call gets its share now); lowering waits for the thread's next call,
 * which saves two syscalls per call of a uid that comes and goes, unless
 * only one uid is left running: its calls go back to the base at once.
 *
 * The FUSE front end's callers count too: while one uid alone has calls
 * running, a FUSE request of another uid (kvfs_exec_note_caller) counts
 * as a second uid for OTHER_CALLER_NS, so a lone uid's dozen threads weigh
 * as one against the FUSE threads serving everyone else (an abuse pass
 * measured root's stat p99 at 17.5 ms, 0.2 ms alone, under 12 threads of
 * one uid's LOOKUPs). A request checks two atomics; the lock is taken at
 * most twice per OTHER_CALLER_NS while another uid keeps calling.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "executor.h"
#include "store.h"

#define NO_UID UINT32_MAX
#define OTHER_CALLER_NS 1000000000ll   /* a FUSE caller counts this long */

struct uid_queue {
	uint32_t uid;
	struct kvfs_exec_job *head, *tail;
	unsigned queued, running;
	uint64_t mem;                 /* of its running jobs */
};

/* One executor thread: its kernel id, so that another thread may set its
 * nice, and whose call it runs. */
struct exec_thread {
	struct kvfs_exec *ex;
	pthread_t pt;
	pid_t tid;                    /* 0 until the thread has started */
	int nice;                     /* as last set */
	bool busy;
	uint32_t uid;                 /* of its call, while busy */
};

struct kvfs_exec {
	struct kvfs_exec_limits lim;
	pthread_mutex_t lock;
	pthread_cond_t work;          /* a job was queued or one finished */
	struct uid_queue *uq;         /* uids with queued or running jobs */
	size_t nuq, cap_uq, cursor;
	unsigned queued, running;
	uint64_t mem;                 /* of every running job */
	bool stopping;
	uint64_t submitted, refused, completed;
	struct exec_thread *threads;
	unsigned nthreads;
	bool weigh;                   /* threads' nice may go down again */
	int base_nice;                /* the daemon's */
	_Atomic uint32_t lone_uid;    /* the one uid running calls, or NO_UID */
	_Atomic int64_t other_seen_ns; /* a FUSE caller of another uid, last */
};

void kvfs_exec_default_limits(struct kvfs_exec_limits *l)
{
	*l = (struct kvfs_exec_limits){
		.threads = 16, .uid_threads = 12, .uid_queue = 256,
		.uid_mem = 512ull << 20, .mem = 1ull << 30,
	};
}

static struct uid_queue *queue_of(struct kvfs_exec *ex, uint32_t uid, bool add)
{
	struct uid_queue *grown;

	for (size_t i = 0; i < ex->nuq; i++)
		if (ex->uq[i].uid == uid)
			return &ex->uq[i];
	if (!add)
		return NULL;
	if (!(grown = kv_array_room(ex->uq, ex->nuq, &ex->cap_uq, sizeof(*grown), 8)))
		return NULL;
	ex->uq = grown;
	ex->uq[ex->nuq] = (struct uid_queue){ .uid = uid };
	return &ex->uq[ex->nuq++];
}

/* A uid with nothing queued or running leaves the array. */
static void maybe_drop(struct kvfs_exec *ex, struct uid_queue *q)
{
	size_t i = (size_t)(q - ex->uq);

	if (q->queued || q->running)
		return;
	ex->uq[i] = ex->uq[--ex->nuq];
	if (ex->cursor >= ex->nuq)
		ex->cursor = 0;
}

static bool uid_admits(const struct kvfs_exec *ex, const struct uid_queue *q)
{
	return q->head && q->running < ex->lim.uid_threads &&
	       (q->running == 0 || q->mem + q->head->mem <= ex->lim.uid_mem);
}

/* The next job in turn, taken off its queue and counted as running; NULL
 * if nothing may start now. */
static struct kvfs_exec_job *take(struct kvfs_exec *ex, struct uid_queue **qout)
{
	for (size_t k = 0; k < ex->nuq; k++) {
		size_t i = (ex->cursor + k) % ex->nuq;
		struct uid_queue *q = &ex->uq[i];
		struct kvfs_exec_job *job;

		if (!uid_admits(ex, q))
			continue;
		job = q->head;
		if (ex->running && ex->mem + job->mem > ex->lim.mem)
			return NULL;   /* wait for memory, do not skip past it */
		q->head = job->next;
		if (!q->head)
			q->tail = NULL;
		q->queued--;
		q->running++;
		q->mem += job->mem;
		ex->queued--;
		ex->running++;
		ex->mem += job->mem;
		ex->cursor = (i + 1) % ex->nuq;
		*qout = q;
		return job;
	}
	return NULL;
}

/* CFS weighs nice n+1 at 1/1.25 of nice n: k threads that each sit
 * log1.25 k above the base weigh about one thread at the base. Rounded
 * to the nearest step (1.118 is 1.25^0.5). */
static int nice_offset(unsigned k)
{
	double w = 1.118;
	int n = 0;

	while (w < k && n < 19) {
		w *= 1.25;
		n++;
	}
	return n;
}

static int64_t coarse_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* Uids running calls, a FUSE caller of another uid counted as one more;
 * sets lone_uid for kvfs_exec_note_caller. */
static unsigned uids_running(struct kvfs_exec *ex)
{
	uint32_t lone = NO_UID;
	unsigned uids = 0;

	for (size_t i = 0; i < ex->nuq; i++)
		if (ex->uq[i].running > 0) {
			uids++;
			lone = ex->uq[i].uid;
		}
	atomic_store_explicit(&ex->lone_uid, uids == 1 ? lone : NO_UID,
			      memory_order_relaxed);
	if (uids == 1 && coarse_now_ns() - atomic_load_explicit(&ex->other_seen_ns,
				memory_order_relaxed) < OTHER_CALLER_NS)
		uids = 2;
	return uids;
}

/* After a call started (self: its thread) or ended (NULL): give each busy
 * thread the nice its uid's share asks for. While several uids run, only
 * self is lowered (see the top of this file); once one is left, all. */
static void weigh_locked(struct kvfs_exec *ex, struct exec_thread *self)
{
	unsigned uids;

	if (!ex->weigh)
		return;
	uids = uids_running(ex);
	for (unsigned i = 0; i < ex->nthreads; i++) {
		struct exec_thread *t = &ex->threads[i];
		struct uid_queue *q;
		int want = ex->base_nice;

		if (!t->busy || !t->tid)
			continue;
		if (uids > 1 && (q = queue_of(ex, t->uid, false)))
			want += nice_offset(q->running);
		if (want > 19)
			want = 19;
		if (want == t->nice || (uids > 1 && t != self && want < t->nice))
			continue;
		/* EPERM or ESRCH here would mean the probe at start lied or
		 * the thread is gone: the nice stays, nothing else depends on it. */
		if (setpriority(PRIO_PROCESS, (id_t)t->tid, want) == 0)
			t->nice = want;
	}
}

static void *worker(void *arg)
{
	struct exec_thread *self = arg;
	struct kvfs_exec *ex = self->ex;
	struct kvfs_exec_job *job;
	struct uid_queue *q;
	uint32_t uid;
	uint64_t mem;

	pthread_setname_np(pthread_self(), "kvfs-fast");
	pthread_mutex_lock(&ex->lock);
	self->tid = gettid();
	self->nice = ex->base_nice;
	for (;;) {
		job = take(ex, &q);
		if (!job) {
			if (ex->stopping && ex->queued == 0)
				break;
			pthread_cond_wait(&ex->work, &ex->lock);
			continue;
		}
		uid = job->uid;
		mem = job->mem;
		self->busy = true;
		self->uid = uid;
		weigh_locked(ex, self);
		pthread_mutex_unlock(&ex->lock);
		job->run(job);         /* may free job */
		pthread_mutex_lock(&ex->lock);
		self->busy = false;
		q = queue_of(ex, uid, false);  /* the array may have moved */
		q->running--;
		q->mem -= mem;
		ex->running--;
		ex->mem -= mem;
		ex->completed++;
		maybe_drop(ex, q);
		weigh_locked(ex, NULL);
		pthread_cond_broadcast(&ex->work);
	}
	pthread_mutex_unlock(&ex->lock);
	return NULL;
}

int kvfs_exec_submit(struct kvfs_exec *ex, struct kvfs_exec_job *job)
{
	struct uid_queue *q = NULL;
	int rc = 0;

	job->next = NULL;
	pthread_mutex_lock(&ex->lock);
	if (ex->stopping) {
		rc = -ESHUTDOWN;
	} else if (!(q = queue_of(ex, job->uid, true))) {
		rc = -ENOMEM;
	} else if (q->queued >= ex->lim.uid_queue) {
		rc = -EAGAIN;
	} else {
		if (q->tail)
			q->tail->next = job;
		else
			q->head = job;
		q->tail = job;
		q->queued++;
		ex->queued++;
		ex->submitted++;
		pthread_cond_signal(&ex->work);
	}
	if (rc < 0) {
		ex->refused++;
		if (q)
			maybe_drop(ex, q);
	}
	pthread_mutex_unlock(&ex->lock);
	return rc;
}

/* Whether a thread of this process may lower its nice back to the
 * base once raised: root, CAP_SYS_NICE or an RLIMIT_NICE that allows it.
 * Asked of a thread of its own, which then ends, so nobody keeps the
 * raised nice if the answer is no. */
static void *probe_nice(void *arg)
{
	int base = *(int *)arg;
	bool ok = base < 19 && setpriority(PRIO_PROCESS, (id_t)gettid(), base + 1) == 0 &&
		  setpriority(PRIO_PROCESS, (id_t)gettid(), base) == 0;

	return ok ? arg : NULL;
}

static void probe_weighing(struct kvfs_exec *ex)
{
	pthread_t t;
	void *ok = NULL;

	errno = 0;
	ex->base_nice = getpriority(PRIO_PROCESS, (id_t)gettid());
	if (errno)
		ex->base_nice = 0;
	if (pthread_create(&t, NULL, probe_nice, &ex->base_nice) == 0)
		pthread_join(t, &ok);
	ex->weigh = ok != NULL;
	if (!ex->weigh && ex->base_nice < 19)
		kv_log(KV_LOG_WARN, "fast path: an executor thread cannot lower its nice "
		       "again (no CAP_SYS_NICE, RLIMIT_NICE too low): uids get turns on the "
		       "executor's threads, but their CPU is not weighted per uid");
}

int kvfs_exec_start(const struct kvfs_exec_limits *l, struct kvfs_exec **out)
{
	struct kvfs_exec *ex;
	int rc;

	*out = NULL;
	if (!l->threads || !l->uid_threads || !l->uid_queue || !l->uid_mem || !l->mem)
		return -EINVAL;
	ex = calloc(1, sizeof(*ex));
	if (!ex)
		return -ENOMEM;
	ex->lim = *l;
	ex->threads = calloc(l->threads, sizeof(*ex->threads));
	if (!ex->threads) {
		free(ex);
		return -ENOMEM;
	}
	pthread_mutex_init(&ex->lock, NULL);
	pthread_cond_init(&ex->work, NULL);
	atomic_init(&ex->lone_uid, NO_UID);
	atomic_init(&ex->other_seen_ns, INT64_MIN / 2);
	probe_weighing(ex);
	for (; ex->nthreads < l->threads; ex->nthreads++) {
		struct exec_thread *t = &ex->threads[ex->nthreads];

		t->ex = ex;
		rc = pthread_create(&t->pt, NULL, worker, t);
		if (rc) {
			kv_log(KV_LOG_ERR, "fast path: cannot start executor thread %u of %u: %s",
			       ex->nthreads + 1, l->threads, strerror(rc));
			kvfs_exec_stop(ex);
			return -rc;
		}
	}
	*out = ex;
	return 0;
}

void kvfs_exec_stop(struct kvfs_exec *ex)
{
	if (!ex)
		return;
	pthread_mutex_lock(&ex->lock);
	ex->stopping = true;
	pthread_cond_broadcast(&ex->work);
	pthread_mutex_unlock(&ex->lock);
	for (unsigned i = 0; i < ex->nthreads; i++)
		pthread_join(ex->threads[i].pt, NULL);
	pthread_cond_destroy(&ex->work);
	pthread_mutex_destroy(&ex->lock);
	free(ex->threads);
	free(ex->uq);
	free(ex);
}

void kvfs_exec_note_caller(struct kvfs_exec *ex, uint32_t uid)
{
	uint32_t lone;
	int64_t now;

	if (!ex || !ex->weigh)
		return;
	lone = atomic_load_explicit(&ex->lone_uid, memory_order_relaxed);
	if (lone == NO_UID || lone == uid)
		return;
	now = coarse_now_ns();
	if (now - atomic_load_explicit(&ex->other_seen_ns, memory_order_relaxed) <
	    OTHER_CALLER_NS / 2)
		return;
	pthread_mutex_lock(&ex->lock);
	atomic_store_explicit(&ex->other_seen_ns, now, memory_order_relaxed);
	weigh_locked(ex, NULL);      /* raises the lone uid's running calls */
	pthread_mutex_unlock(&ex->lock);
}

void kvfs_exec_stats(struct kvfs_exec *ex, struct kvfs_exec_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (!ex)
		return;
	pthread_mutex_lock(&ex->lock);
	st->submitted = ex->submitted;
	st->refused = ex->refused;
	st->completed = ex->completed;
	st->running = ex->running;
	st->queued = ex->queued;
	st->mem_running = ex->mem;
	st->uid_weighting = ex->weigh;
	pthread_mutex_unlock(&ex->lock);
}
