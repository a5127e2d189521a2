/*
 * libkvfs asynchronous calls (libkvfs.h: kvfs_batch_submit, _wait): a
 * small pool of worker threads per client turns the blocking KVFS_IOC_READ
 * and KVFS_IOC_WRITE into submit/wait, so an engine can overlap calls
 * without threads of its own. Kept apart from the batch layout because it
 * is the only part of libkvfs with threads and a queue; the state of a
 * submitted batch (idle -> queued -> done -> idle) changes only here.
 * Completion is reported three ways over the same state: kvfs_batch_wait
 * blocks on the batch's condition variable, kvfs_batch_poll looks, and the
 * client's eventfd counts completions for engines that select or epoll.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "libkvfs_i.h"


/* Workers finish everything already queued before they exit, so no waiter
 * is left blocked on a batch nobody will run. */
void kvfs_i_workers_stop(struct kvfs_client *c)
{
	unsigned i;

	pthread_mutex_lock(&c->lock);
	c->stopping = true;
	pthread_cond_broadcast(&c->work_cv);
	pthread_mutex_unlock(&c->lock);
	for (i = 0; i < c->nworkers; i++)
		pthread_join(c->workers[i], NULL);
	c->nworkers = 0;
}

/* ---- asynchronous calls ---- */

static struct kvfs_batch *queue_pop(struct kvfs_client *c)
{
	struct kvfs_batch *b = c->queue_head;

	c->queue_head = b->next_queued;
	if (!c->queue_head)
		c->queue_tail = NULL;
	b->next_queued = NULL;
	c->queued--;
	return b;
}

static void queue_push(struct kvfs_client *c, struct kvfs_batch *b)
{
	b->next_queued = NULL;
	if (c->queue_tail)
		c->queue_tail->next_queued = b;
	else
		c->queue_head = b;
	c->queue_tail = b;
	c->queued++;
}

/* Undo queue_push of the last batch (its worker could not be started). */
static void queue_drop_tail(struct kvfs_client *c, struct kvfs_batch *b)
{
	struct kvfs_batch **p = &c->queue_head, *prev = NULL;

	while (*p != b) {
		prev = *p;
		p = &(*p)->next_queued;
	}
	*p = b->next_queued;
	if (c->queue_tail == b)
		c->queue_tail = prev;
	c->queued--;
}

/*
 * The daemon refuses a call with EAGAIN, having done nothing, while 256 of
 * the uid's calls wait. A submitted call is retried here after a short,
 * growing sleep: the daemon asked for exactly that, and it keeps -EAGAIN
 * meaning "still in flight" for kvfs_batch_poll.
 */
static int worker_call(struct kvfs_client *c, struct kvfs_batch *b)
{
	struct timespec delay = { 0, 50 * 1000 };
	int rc;

	while ((rc = kvfs_i_ioctl(c->fd, b->cmd, &b->arg)) == -EAGAIN) {
		nanosleep(&delay, NULL);
		if (delay.tv_nsec < 10 * 1000 * 1000)
			delay.tv_nsec *= 2;
	}
	return rc;
}

/* A completion is published in this order: state, then the eventfd. A
 * consumer that drains the eventfd and then polls every batch therefore
 * either sees this batch done or finds the eventfd readable again. */
static void batch_complete(struct kvfs_client *c, struct kvfs_batch *b)
{
	uint64_t one = 1;

	batch_set_state(b, BATCH_DONE);
	pthread_cond_broadcast(&b->done_cv);
	/* Only a counter at 2^64 - 2 would refuse: not reachable. */
	(void)!write(c->efd, &one, sizeof(one));
}

static void *worker_main(void *arg)
{
	struct kvfs_client *c = arg;
	struct kvfs_batch *b;

	pthread_mutex_lock(&c->lock);
	for (;;) {
		while (!c->queue_head && !c->stopping) {
			c->idle++;
			pthread_cond_wait(&c->work_cv, &c->lock);
			c->idle--;
		}
		if (!c->queue_head)
			break;
		b = queue_pop(c);
		pthread_mutex_unlock(&c->lock);
		b->rc = worker_call(c, b);
		pthread_mutex_lock(&c->lock);
		batch_complete(c, b);
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/*
 * Start one more worker if the queue outgrew the idle ones. Workers block
 * every signal: the application's handlers belong on its own threads, and a
 * handler run here would only interrupt an ioctl. Called with c->lock held.
 */
static int worker_spawn(struct kvfs_client *c)
{
	sigset_t all, old;
	int rc;

	if (c->queued <= c->idle || c->nworkers >= KVFS_WORKERS_MAX)
		return 0;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&c->workers[c->nworkers], NULL, worker_main, c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc)
		return -rc;
	c->nworkers++;
	return 0;
}

static int batch_submit(struct kvfs_batch *b, unsigned long cmd, unsigned flags)
{
	struct kvfs_client *c;
	int rc;

	if (!b)
		return -EINVAL;
	c = b->r->c;
	pthread_mutex_lock(&c->lock);
	if (b->state != BATCH_IDLE) {
		rc = -EBUSY;
		goto out;
	}
	if (c->stopping) {
		rc = -ESHUTDOWN;
		goto out;
	}
	kvfs_i_batch_arg(b, cmd, 0, flags, &b->arg);
	b->cmd = cmd;
	queue_push(c, b);
	rc = worker_spawn(c);
	/* Without any worker nobody would run it; with some, it just waits. */
	if (rc && c->nworkers == 0) {
		queue_drop_tail(c, b);
		goto out;
	}
	rc = 0;
	b->r->pending++;
	b->gen++;
	batch_set_state(b, BATCH_QUEUED);
	pthread_cond_signal(&c->work_cv);
out:
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int kvfs_batch_submit(struct kvfs_batch *b)
{
	return batch_submit(b, KVFS_IOC_READ, 0);
}

int kvfs_batch_submit_write(struct kvfs_batch *b, unsigned flags)
{
	if (!kvfs_i_write_flags_ok(flags))
		return -EINVAL;
	return batch_submit(b, KVFS_IOC_WRITE, flags);
}

/* Hand a done batch's result to the caller and the batch back to its
 * owner (c->lock held). */
static int batch_collect(struct kvfs_batch *b, struct kvfs_batch_result *res)
{
	int rc = b->rc;

	if (rc == 0)
		kvfs_i_batch_result(&b->arg, res);
	b->r->pending--;
	batch_set_state(b, BATCH_IDLE);
	return rc;
}

int kvfs_batch_wait(struct kvfs_batch *b, struct kvfs_batch_result *res)
{
	struct kvfs_client *c;
	unsigned gen;
	int rc = -EINVAL;   /* nothing submitted, or collected by another thread */

	if (!b)
		return -EINVAL;
	c = b->r->c;
	pthread_mutex_lock(&c->lock);
	gen = b->gen;
	/* A kvfs_batch_poll on another thread may collect this submission
	 * (and the owner submit again) while we sleep: stop at either. */
	while (b->state == BATCH_QUEUED && b->gen == gen)
		pthread_cond_wait(&b->done_cv, &c->lock);
	if (b->state == BATCH_DONE && b->gen == gen)
		rc = batch_collect(b, res);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int kvfs_batch_poll(struct kvfs_batch *b, struct kvfs_batch_result *res)
{
	struct kvfs_client *c;
	int rc;

	if (!b)
		return -EINVAL;
	c = b->r->c;
	pthread_mutex_lock(&c->lock);
	switch (b->state) {
	case BATCH_QUEUED:
		rc = -EAGAIN;
		break;
	case BATCH_DONE:
		rc = batch_collect(b, res);
		break;
	default:
		rc = -EINVAL;   /* nothing submitted, or already collected */
		break;
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

