/*
 * The store's I/O engine: one io_uring driven by one I/O thread. Callers on
 * any thread append batches of kv_io to a read queue or a write queue (and
 * fsync requests to a third) under a mutex and kick an eventfd on which the
 * I/O thread always keeps a read posted, so the thread only ever sleeps in
 * io_uring_wait_cqe (with a timeout while it holds writes back). The thread
 * fills free submission slots from the fsync, read and write queues, never
 * keeping more than queue_depth operations in flight. Writes go as the
 * read-priority scheduler (sched.c) allows: their minimum share first, then
 * reads, then more writes only while no reader on any ring is active. Short
 * transfers and -EAGAIN/-EINTR are requeued until the whole footprint has
 * moved; the completion callback of a batch runs on this thread once every
 * I/O in it has a result. Fault injection for tests is applied here, to
 * completions.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "store_i.h"

#define QD_MAX 4096u
#define IO_CHUNK_MAX (1u << 30)  /* one SQE moves at most this many bytes */

/* user_data tags: kv_io and fsync_req pointers are 8-aligned */
#define TAG_MASK 7ull
#define TAG_IO 0ull
#define TAG_EVENTFD 1ull
#define TAG_FSYNC 2ull

/* One kv_store_io_async call. */
struct io_group {
	unsigned pending;        /* ios without a result yet; I/O thread only */
	void (*done)(void *arg);
	void *arg;
	struct kv_io *ios;
	struct segment *segs[];  /* pinned segment per io; NULL: failed early */
};

struct waiter {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	unsigned pending;
	int err;
};

struct fsync_req {
	struct fsync_req *next;
	struct segment *seg;
	struct waiter *w;
};

/* ---- waiting ---- */

static void waiter_init(struct waiter *w, unsigned pending)
{
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	w->pending = pending;
	w->err = 0;
}

/* Last touch of w by the signalling side: the waiter may free it at once. */
static void waiter_post(struct waiter *w, int err)
{
	pthread_mutex_lock(&w->mu);
	if (err && !w->err)
		w->err = err;
	if (--w->pending == 0)
		pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

static void waiter_wait(struct waiter *w)
{
	pthread_mutex_lock(&w->mu);
	while (w->pending)
		pthread_cond_wait(&w->cv, &w->mu);
	pthread_mutex_unlock(&w->mu);
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->mu);
}

static void waiter_done(void *arg)
{
	waiter_post(arg, 0);
}

/* ---- queues ---- */

static void list_push(struct kv_io **head, struct kv_io **tail,
		      struct kv_io *io)
{
	io->next = NULL;
	if (*tail)
		(*tail)->next = io;
	else
		*head = io;
	*tail = io;
}

static struct kv_io *list_pop(struct kv_io **head, struct kv_io **tail)
{
	struct kv_io *io = *head;

	if (io) {
		*head = io->next;
		if (!*head)
			*tail = NULL;
		io->next = NULL;
	}
	return io;
}

static void list_splice(struct kv_io **head, struct kv_io **tail,
			struct kv_io *h, struct kv_io *t)
{
	if (!h)
		return;
	if (*tail)
		(*tail)->next = h;
	else
		*head = h;
	*tail = t;
}

/* Wake the I/O thread if it may be asleep. Called with qlock held. */
static bool kick_needed(struct engine *g)
{
	bool kick = g->wake_armed;

	g->wake_armed = false;
	return kick;
}

static void kick(struct engine *g)
{
	/* the counter cannot overflow in practice; the thread reads it to 0 */
	if (eventfd_write(g->efd, 1) < 0)
		kv_log(KV_LOG_ERR, "store: cannot wake the I/O thread: %s",
		       kv_strerror(-errno));
}

/* ---- the I/O thread ---- */

static struct segment *io_segment(const struct kv_io *io)
{
	const struct io_group *gr = io->group;

	return gr->segs[io - gr->ios];
}

static void post_eventfd_read(struct engine *g)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&g->ring);

	if (!sqe)
		return;  /* retried at the top of the next loop */
	io_uring_prep_read(sqe, g->efd, &g->efd_val, sizeof(g->efd_val), 0);
	io_uring_sqe_set_data64(sqe, TAG_EVENTFD);
	g->efd_posted = true;
}

/* Bytes the next SQE for io moves (what is left, at most IO_CHUNK_MAX). */
static unsigned io_chunk(const struct kv_io *io)
{
	uint64_t rem = kv_extent_footprint(&io->ext) - io->done_bytes;

	return rem > IO_CHUNK_MAX ? IO_CHUNK_MAX : (unsigned)rem;
}

static void prep_io(struct engine *g, struct io_uring_sqe *sqe,
		    struct kv_io *io, bool reading)
{
	unsigned n = io_chunk(io);
	char *buf = (char *)io->buf + io->done_bytes;
	uint64_t off = io->ext.offset + io->done_bytes;
	int fd = io_segment(io)->fd;

	if (io->op == KV_IO_READ) {
		io_uring_prep_read(sqe, fd, buf, n, off);
		sched_read_start(&g->sched);
	} else {
		io_uring_prep_write(sqe, fd, buf, n, off);
		sched_write_start(&g->sched, n, reading);
	}
	io_uring_sqe_set_data(sqe, io);
	g->inflight++;
}

static void prep_fsync(struct engine *g, struct io_uring_sqe *sqe,
		       struct fsync_req *r)
{
	io_uring_prep_fsync(sqe, r->seg->fd, IORING_FSYNC_DATASYNC);
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)r | TAG_FSYNC);
	g->inflight++;
}

/*
 * Where the next kv_io comes from: retries (already late); writes within
 * their minimum share (so that a steady read queue cannot starve them);
 * reads; then writes beyond the share only while no reader is active, up
 * to the write byte bound. With KVFS_SCHED=fifo: retries, reads, writes,
 * as far as the queue depth goes. false: nothing may go now (*held: queued
 * writes were kept back for readers).
 */
static bool pick_queue(struct engine *g, bool reading, bool *held,
		       struct kv_io ***head, struct kv_io ***tail)
{
	const struct sched *sc = &g->sched;
	uint64_t chunk = g->wq_head ? io_chunk(g->wq_head) : 0;
	bool share = g->wq_head && !sc->fifo && sched_write_in_share(sc, chunk);

	if (g->retry_head) {
		*head = &g->retry_head;
		*tail = &g->retry_tail;
	} else if (share) {
		*head = &g->wq_head;
		*tail = &g->wq_tail;
	} else if (g->rq_head) {
		*head = &g->rq_head;
		*tail = &g->rq_tail;
	} else if (g->wq_head && (sc->fifo || !reading) &&
		   sched_write_in_depth(sc, chunk)) {
		*head = &g->wq_head;
		*tail = &g->wq_tail;
	} else {
		/* at the byte bound a write completion is all there is to wait for */
		*held = g->wq_head && reading && !sc->fifo;
		return false;
	}
	return true;
}

/*
 * Move queued work into free SQEs: retries first (they are already late),
 * then fsyncs (a commit waits on them, never held back), then kv_ios in
 * pick_queue's order. I/Os that failed before being queued (no segment)
 * need no SQE; they go to *failed, to be completed once qlock is dropped.
 * qlock held.
 */
static void fill(struct engine *g, struct kv_io **failed)
{
	/* reads waiting in our own queue count too: they go out first */
	bool reading = g->rq_head || sched_reads_active(&g->sched, now_ns());
	bool held = false;
	struct io_uring_sqe *sqe;
	struct kv_io **head, **tail, *io;

	g->sched.held = false;
	while (g->inflight < g->qd) {
		if (!g->retry_head && g->fq) {
			struct fsync_req *r = g->fq;

			if (!(sqe = io_uring_get_sqe(&g->ring)))
				return;
			g->fq = r->next;
			prep_fsync(g, sqe, r);
			continue;
		}
		if (!pick_queue(g, reading, &held, &head, &tail))
			break;
		if (!io_segment(*head)) {
			io = list_pop(head, tail);
			io->next = *failed;
			*failed = io;
			continue;
		}
		if (!(sqe = io_uring_get_sqe(&g->ring)))
			return;
		prep_io(g, sqe, list_pop(head, tail), reading);
	}
	if (held)
		sched_held(&g->sched);
}

static void io_complete(struct kv_io *io)
{
	struct io_group *gr = io->group;
	struct segment *seg = io_segment(io);

	if (seg)
		segment_unref(seg);
	if (--gr->pending == 0) {
		void (*done)(void *) = gr->done;
		void *arg = gr->arg;

		free(gr);
		done(arg);
	}
}

static void io_fail(struct kv_store *s, struct kv_io *io, int err)
{
	const struct kv_extent *e = &io->ext;

	io->res = err;
	kv_log(KV_LOG_ERR, "%s/seg-%08" PRIu32 ": %s of %" PRIu64 " bytes at "
	       "offset %" PRIu64 " failed: %s", s->stripes[e->stripe].path,
	       e->segment, io->op == KV_IO_READ ? "read" : "write",
	       kv_extent_footprint(e), e->offset, kv_strerror(err));
	if (io->op == KV_IO_WRITE)
		stripe_write_failed(s, e->stripe, err);
	io_complete(io);
}

static void handle_io(struct kv_store *s, struct kv_io *io, int res)
{
	struct engine *g = &s->eng;
	unsigned asked = io_chunk(io);

	g->inflight--;
	if (io->op == KV_IO_READ)
		sched_read_end(&g->sched);
	else
		sched_write_end(&g->sched, asked);
	res = store_fault_apply(g, 1u << io->op, res, asked);
	if (res == -EAGAIN || res == -EINTR) {
		list_push(&g->retry_head, &g->retry_tail, io);
		return;
	}
	if (res < 0) {
		io_fail(s, io, res);
		return;
	}
	if (res == 0) {
		/* end of file inside an extent: would requeue forever */
		io_fail(s, io, -EIO);
		return;
	}
	io->done_bytes += (unsigned)res;
	if (io->done_bytes < kv_extent_footprint(&io->ext)) {
		kv_log(KV_LOG_DEBUG, "%s/seg-%08" PRIu32 ": short %s at offset %"
		       PRIu64 " (%d of %u bytes), retrying the rest",
		       s->stripes[io->ext.stripe].path, io->ext.segment,
		       io->op == KV_IO_READ ? "read" : "write",
		       io->ext.offset, res, asked);
		list_push(&g->retry_head, &g->retry_tail, io);
		return;
	}
	if (io->op == KV_IO_WRITE)
		stripe_write_ok(s, io->ext.stripe);
	io->res = 0;
	io_complete(io);
}

static void handle_fsync(struct kv_store *s, struct fsync_req *r, int res)
{
	struct engine *g = &s->eng;
	struct segment *seg = r->seg;

	g->inflight--;
	res = store_fault_apply(g, KV_FAULT_FSYNC, res, 0);
	if (res == -EAGAIN || res == -EINTR) {
		pthread_mutex_lock(&g->qlock);
		r->next = g->fq;
		g->fq = r;
		pthread_mutex_unlock(&g->qlock);
		return;
	}
	if (res < 0) {
		kv_log(KV_LOG_ERR, "%s/seg-%08" PRIu32 ": fdatasync failed: %s",
		       s->stripes[seg->stripe].path, seg->num,
		       kv_strerror(res));
		stripe_write_failed(s, seg->stripe, res);
	}
	segment_unref(seg);
	waiter_post(r->w, res < 0 ? res : 0);
}

static void handle_cqe(struct kv_store *s, uint64_t data, int res)
{
	struct engine *g = &s->eng;

	switch (data & TAG_MASK) {
	case TAG_IO:
		handle_io(s, (struct kv_io *)(uintptr_t)data, res);
		break;
	case TAG_FSYNC:
		handle_fsync(s, (struct fsync_req *)(uintptr_t)(data & ~TAG_MASK),
			     res);
		break;
	case TAG_EVENTFD:
		/* the read reset the counter; re-arm before sleeping again */
		g->efd_posted = false;
		post_eventfd_read(g);
		break;
	}
}

/*
 * Valgrind before 3.21 keeps its global lock while a thread sits in
 * io_uring_enter, so an I/O thread asleep there freezes the whole process.
 * Under valgrind the thread instead sleeps in read(2) on an eventfd the
 * kernel signals for every completion; production never takes this path.
 */
bool store_under_valgrind(void)
{
	const char *p = getenv("LD_PRELOAD");

	return p && strstr(p, "vgpreload");
}

static int wait_cqe_valgrind(struct engine *g)
{
	uint64_t v;

	while (io_uring_cq_ready(&g->ring) == 0)
		if (read(g->cq_efd, &v, sizeof(v)) < 0 && errno != EINTR)
			return -errno;
	return 0;
}

/*
 * Sleep until a completion. While writes are held back, only until the
 * scheduler must look again (reads may have gone idle): a write completion
 * would wake the thread too, but a slow one would leave the device half
 * idle in the meantime. 0, or -ETIME when that time came first.
 */
static int wait_cqe(struct engine *g)
{
	struct __kernel_timespec ts;
	struct io_uring_cqe *cqe;

	if (g->cq_efd >= 0)
		return wait_cqe_valgrind(g);
	if (!g->sched.held)
		return io_uring_wait_cqe(&g->ring, &cqe);
	if (!sched_hold_timeout(&g->sched, &ts))
		return -ETIME;
	return io_uring_wait_cqe_timeout(&g->ring, &cqe, &ts);
}

static void reap(struct kv_store *s)
{
	struct engine *g = &s->eng;
	struct io_uring_cqe *cqe;
	unsigned head, count = 0;
	int rc;

	do
		rc = wait_cqe(g);
	while (rc == -EINTR);
	if (rc == -ETIME)
		return;     /* time to look at the queues again */
	if (rc < 0) {
		kv_log(KV_LOG_ERR, "store: io_uring_wait_cqe: %s",
		       kv_strerror(rc));
		return;
	}
	io_uring_for_each_cqe(&g->ring, head, cqe) {
		handle_cqe(s, cqe->user_data, cqe->res);
		count++;
	}
	io_uring_cq_advance(&g->ring, count);
}

static bool queues_empty(const struct engine *g)
{
	return !g->retry_head && !g->fq && !g->rq_head && !g->wq_head;
}

static void *io_thread(void *arg)
{
	struct kv_store *s = arg;
	struct engine *g = &s->eng;
	struct kv_io *failed, *next;
	bool finished;
	int rc;

	for (;;) {
		if (!g->efd_posted)
			post_eventfd_read(g);
		failed = NULL;
		pthread_mutex_lock(&g->qlock);
		fill(g, &failed);
		finished = g->stopping && g->inflight == 0 && queues_empty(g);
		g->wake_armed = true;
		pthread_mutex_unlock(&g->qlock);
		for (; failed; failed = next) {
			next = failed->next;
			io_complete(failed);
		}
		if (finished)
			break;
		rc = io_uring_submit(&g->ring);
		if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)
			kv_log(KV_LOG_ERR, "store: io_uring_submit: %s",
			       kv_strerror(rc));
		reap(s);
	}
	return NULL;
}

int engine_start(struct kv_store *s, unsigned qd)
{
	struct engine *g = &s->eng;
	sigset_t all, old;
	int rc;

	g->qd = qd > QD_MAX ? QD_MAX : qd;
	sched_init(&g->sched, g->qd);
	g->efd = eventfd(0, EFD_CLOEXEC);
	if (g->efd < 0) {
		rc = -errno;
		kv_log(KV_LOG_ERR, "store: eventfd: %s", kv_strerror(rc));
		return rc;
	}
	/* +1: the eventfd read is always in flight besides qd operations */
	rc = io_uring_queue_init(g->qd + 1, &g->ring, 0);
	if (rc < 0) {
		kv_log(KV_LOG_ERR, "store: io_uring_queue_init(%u): %s",
		       g->qd + 1, kv_strerror(rc));
		goto fail_efd;
	}
	g->cq_efd = -1;
	if (store_under_valgrind()) {
		g->cq_efd = eventfd(0, EFD_CLOEXEC);
		rc = g->cq_efd < 0 ? -errno :
			io_uring_register_eventfd(&g->ring, g->cq_efd);
		if (rc < 0) {
			kv_log(KV_LOG_ERR, "store: completion eventfd: %s",
			       kv_strerror(rc));
			goto fail_cq_efd;
		}
	}
	pthread_mutex_init(&g->qlock, NULL);
	/* signals belong to the daemon's threads, never to the I/O thread */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = -pthread_create(&g->thread, NULL, io_thread, s);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc) {
		kv_log(KV_LOG_ERR, "store: cannot start the I/O thread: %s",
		       kv_strerror(rc));
		goto fail_ring;
	}
	pthread_setname_np(g->thread, "kvfs-io");
	g->started = true;
	return 0;

fail_ring:
	pthread_mutex_destroy(&g->qlock);
fail_cq_efd:
	if (g->cq_efd >= 0)
		close(g->cq_efd);
	io_uring_queue_exit(&g->ring);
fail_efd:
	close(g->efd);
	return rc;
}

/* Refuse new work, let everything queued and in flight finish, join. */
void engine_stop(struct kv_store *s)
{
	struct engine *g = &s->eng;

	if (!g->started)
		return;
	pthread_mutex_lock(&g->qlock);
	g->stopping = true;
	pthread_mutex_unlock(&g->qlock);
	kick(g);
	pthread_join(g->thread, NULL);
	sched_log(&g->sched);
	io_uring_queue_exit(&g->ring);
	close(g->efd);
	if (g->cq_efd >= 0)
		close(g->cq_efd);
	pthread_mutex_destroy(&g->qlock);
	g->started = false;
}

/* ---- submission ---- */

int store_io_check(const struct kv_store *s, const struct kv_io *io)
{
	const struct kv_extent *e = &io->ext;
	const char *why = NULL;

	if (io->op != KV_IO_READ && io->op != KV_IO_WRITE)
		why = "bad op";
	else if (e->stripe >= s->nstripes)
		why = "no such stripe";
	else if (e->length == 0 || e->length > s->segment_size ||
		 e->offset % KV_ALIGN ||
		 e->offset > s->segment_size - kv_extent_footprint(e))
		why = "extent misaligned or outside the segment";
	else if (!io->buf || (uintptr_t)io->buf % KV_ALIGN)
		why = "buffer not KV_ALIGN aligned";
	if (!why)
		return 0;
	kv_log(KV_LOG_ERR, "store: I/O on stripe %" PRIu32 " segment %" PRIu32
	       " offset %" PRIu64 " length %" PRIu64 " refused: %s", e->stripe,
	       e->segment, e->offset, e->length, why);
	return -EINVAL;
}

/* Pin the segment of every io; an io whose segment is gone fails with EIO. */
static void pin_segments(struct kv_store *s, struct io_group *gr, unsigned n)
{
	pthread_mutex_lock(&s->lock);
	for (unsigned i = 0; i < n; i++) {
		struct kv_io *io = &gr->ios[i];
		struct segment *seg;

		seg = segment_find(&s->stripes[io->ext.stripe], io->ext.segment);
		if (seg)
			atomic_fetch_add(&seg->refs, 1);
		else
			kv_log(KV_LOG_ERR, "%s/seg-%08" PRIu32 ": %s for I/O "
			       "at offset %" PRIu64,
			       s->stripes[io->ext.stripe].path, io->ext.segment,
			       stripe_no_segment_why(&s->stripes[io->ext.stripe]),
			       io->ext.offset);
		gr->segs[i] = seg;
		io->res = seg ? 0 : -EIO;
		io->done_bytes = 0;
		io->group = gr;
	}
	pthread_mutex_unlock(&s->lock);
}

int kv_store_io_async(struct kv_store *s, struct kv_io *ios, unsigned n,
		      void (*done)(void *arg), void *arg)
{
	struct kv_io *rh = NULL, *rt = NULL, *wh = NULL, *wt = NULL;
	struct engine *g = &s->eng;
	struct io_group *gr;
	bool wake;
	int rc;

	if (n == 0 || !ios || !done)
		return -EINVAL;
	for (unsigned i = 0; i < n; i++) {
		rc = store_io_check(s, &ios[i]);
		if (rc)
			return rc;
	}
	gr = malloc(sizeof(*gr) + n * sizeof(gr->segs[0]));
	if (!gr)
		return -ENOMEM;
	*gr = (struct io_group){ .pending = n, .done = done, .arg = arg,
				 .ios = ios };
	pin_segments(s, gr, n);
	for (unsigned i = 0; i < n; i++) {
		if (ios[i].op == KV_IO_READ)
			list_push(&rh, &rt, &ios[i]);
		else
			list_push(&wh, &wt, &ios[i]);
	}

	pthread_mutex_lock(&g->qlock);
	if (g->stopping) {
		pthread_mutex_unlock(&g->qlock);
		for (unsigned i = 0; i < n; i++)
			if (gr->segs[i])
				segment_unref(gr->segs[i]);
		free(gr);
		return -ESHUTDOWN;
	}
	list_splice(&g->rq_head, &g->rq_tail, rh, rt);
	list_splice(&g->wq_head, &g->wq_tail, wh, wt);
	wake = kick_needed(g);
	pthread_mutex_unlock(&g->qlock);
	if (wake)
		kick(g);
	return 0;
}

int kv_store_io(struct kv_store *s, struct kv_io *ios, unsigned n)
{
	struct waiter w;
	int rc;

	if (n == 0)
		return 0;
	waiter_init(&w, 1);
	rc = kv_store_io_async(s, ios, n, waiter_done, &w);
	if (rc) {
		w.pending = 0;
		waiter_wait(&w);
		return rc;
	}
	waiter_wait(&w);
	for (unsigned i = 0; i < n; i++)
		if (ios[i].res)
			return ios[i].res;
	return 0;
}

struct seg_key {
	uint32_t stripe;
	uint32_t segment;
};

static int seg_key_cmp(const void *a, const void *b)
{
	const struct seg_key *x = a, *y = b;

	if (x->stripe != y->stripe)
		return x->stripe < y->stripe ? -1 : 1;
	return x->segment < y->segment ? -1 : x->segment > y->segment;
}

/* Distinct live segments of e[0..n), pinned, as fsync requests. */
static int sync_collect(struct kv_store *s, const struct kv_extent *e,
			unsigned n, struct fsync_req *reqs, unsigned *count)
{
	struct seg_key *keys = malloc(n * sizeof(*keys));
	unsigned m = 0;

	if (!keys)
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++) {
		if (e[i].stripe >= s->nstripes) {
			kv_log(KV_LOG_ERR, "store: sync of stripe %" PRIu32
			       ": no such stripe", e[i].stripe);
			free(keys);
			return -EINVAL;
		}
		keys[i] = (struct seg_key){ e[i].stripe, e[i].segment };
	}
	qsort(keys, n, sizeof(*keys), seg_key_cmp);
	pthread_mutex_lock(&s->lock);
	for (unsigned i = 0; i < n; i++) {
		struct segment *seg;

		if (i > 0 && !seg_key_cmp(&keys[i], &keys[i - 1]))
			continue;
		/* gone: every extent in it was freed, nothing to make durable */
		seg = segment_find(&s->stripes[keys[i].stripe], keys[i].segment);
		if (!seg)
			continue;
		atomic_fetch_add(&seg->refs, 1);
		reqs[m++] = (struct fsync_req){ .seg = seg };
	}
	pthread_mutex_unlock(&s->lock);
	free(keys);
	*count = m;
	return 0;
}

int kv_store_sync(struct kv_store *s, const struct kv_extent *e, unsigned n)
{
	struct engine *g = &s->eng;
	struct fsync_req *reqs;
	struct waiter w;
	unsigned m = 0;
	bool wake;
	int rc;

	if (n == 0)
		return 0;
	reqs = calloc(n, sizeof(*reqs));
	if (!reqs)
		return -ENOMEM;
	rc = sync_collect(s, e, n, reqs, &m);
	if (rc || m == 0)
		goto out;
	waiter_init(&w, m);
	pthread_mutex_lock(&g->qlock);
	if (g->stopping) {
		pthread_mutex_unlock(&g->qlock);
		for (unsigned i = 0; i < m; i++)
			segment_unref(reqs[i].seg);
		w.pending = 0;
		waiter_wait(&w);
		rc = -ESHUTDOWN;
		goto out;
	}
	for (unsigned i = 0; i < m; i++) {
		reqs[i].w = &w;
		reqs[i].next = g->fq;
		g->fq = &reqs[i];
	}
	wake = kick_needed(g);
	pthread_mutex_unlock(&g->qlock);
	if (wake)
		kick(g);
	waiter_wait(&w);
	rc = w.err;
out:
	free(reqs);
	return rc;
}
