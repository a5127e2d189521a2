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
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "executor.h"
#include "store.h"

struct uid_queue {
	uint32_t uid;
	struct kvfs_exec_job *head, *tail;
	unsigned queued, running;
	uint64_t mem;                 /* of its running jobs */
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
	pthread_t *threads;
	unsigned nthreads;
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
	if (ex->nuq == ex->cap_uq) {
		size_t cap = ex->cap_uq ? ex->cap_uq * 2 : 8;

		grown = realloc(ex->uq, cap * sizeof(*grown));
		if (!grown)
			return NULL;
		ex->uq = grown;
		ex->cap_uq = cap;
	}
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

static void *worker(void *arg)
{
	struct kvfs_exec *ex = arg;
	struct kvfs_exec_job *job;
	struct uid_queue *q;
	uint32_t uid;
	uint64_t mem;

	pthread_setname_np(pthread_self(), "kvfs-fast");
	pthread_mutex_lock(&ex->lock);
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
		pthread_mutex_unlock(&ex->lock);
		job->run(job);         /* may free job */
		pthread_mutex_lock(&ex->lock);
		q = queue_of(ex, uid, false);  /* the array may have moved */
		q->running--;
		q->mem -= mem;
		ex->running--;
		ex->mem -= mem;
		ex->completed++;
		maybe_drop(ex, q);
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
	for (; ex->nthreads < l->threads; ex->nthreads++) {
		rc = pthread_create(&ex->threads[ex->nthreads], NULL, worker, ex);
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
		pthread_join(ex->threads[i], NULL);
	pthread_cond_destroy(&ex->work);
	pthread_mutex_destroy(&ex->lock);
	free(ex->threads);
	free(ex->uq);
	free(ex);
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
	pthread_mutex_unlock(&ex->lock);
}
