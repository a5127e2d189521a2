/*
 * libkvfs: the client side of the kvfs fast path (libkvfs.h). It owns the
 * bookkeeping an engine should not have to repeat: shared memory that is
 * safe to hand to the daemon, the layout of descriptors and names in a
 * batch's control area, and a small pool of threads that turns the blocking
 * KVFS_IOC_READ and KVFS_IOC_WRITE into submit/wait.
 *
 * Locking: one mutex per client protects its region list, the work queue,
 * the worker pool and every batch's submission state. Batch descriptors
 * live in shared memory and are owned by whoever owns the batch (the caller,
 * or a worker between submit and completion); the mutex never covers them.
 * The ioctls themselves run with no lock held, so reads from several
 * threads (or several workers) reach the daemon in parallel.
 *
 * Lifetimes nest: a batch must be freed before its region is destroyed, and
 * a region holds a client. kvfs_region_destroy refuses (-EBUSY) while a
 * batch of the region is submitted and not yet waited for; kvfs_client_close
 * first lets every queued read finish, then frees what is left.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libkvfs.h"

/* Async reads in flight at once per client. Each one is a thread blocked in
 * the daemon, which batches its own I/O, so a few suffice to overlap calls. */
#define KVFS_WORKERS_MAX 4

enum batch_state {
	BATCH_IDLE,       /* owned by the caller */
	BATCH_QUEUED,     /* submitted: waiting for or running on a worker */
	BATCH_DONE,       /* finished: result kept for kvfs_batch_wait */
};

struct kvfs_client {
	int fd;                        /* the model directory */
	pthread_mutex_t lock;
	struct kvfs_region *regions;   /* open regions, for close */
	struct kvfs_batch *queue_head; /* submitted, not yet picked up */
	struct kvfs_batch *queue_tail;
	unsigned queued;
	pthread_cond_t work_cv;        /* queue non-empty, or stopping */
	pthread_t workers[KVFS_WORKERS_MAX];
	unsigned nworkers;
	unsigned idle;                 /* workers waiting on work_cv */
	bool stopping;
};

struct kvfs_region {
	struct kvfs_client *c;
	struct kvfs_region *prev, *next;   /* c->regions, under c->lock */
	int fd;                            /* our own descriptor of the memory */
	void *base;
	size_t size;
	uint64_t id;
	unsigned pending;                  /* batches submitted and not yet
	                                    * waited for, under c->lock */
};

struct kvfs_batch {
	struct kvfs_region *r;
	struct kvfs_page_desc *desc;   /* region bytes at ctl_off */
	char *names;                   /* max * KVFS_NAME_MAX bytes after desc */
	uint64_t ctl_off;
	unsigned max;
	unsigned count;
	/* Submission state, under r->c->lock. state is also read without the
	 * lock (atomically) to refuse changes to a batch a worker owns. */
	int state;
	struct kvfs_batch *next_queued;
	pthread_cond_t done_cv;
	struct kvfs_batch_arg arg;     /* what the worker issues, and its outs */
	unsigned long cmd;             /* ... with this command */
	int rc;                        /* the worker's result */
};

static int batch_state(const struct kvfs_batch *b)
{
	return __atomic_load_n(&b->state, __ATOMIC_ACQUIRE);
}

static void batch_set_state(struct kvfs_batch *b, int state)
{
	__atomic_store_n(&b->state, state, __ATOMIC_RELEASE);
}

/* ioctl as 0/-errno. A read interrupted by a signal is safe to repeat:
 * reads and lookups are idempotent. A write is not (a repeat would find
 * its own pages and say EEXIST), so an interrupted write is reported as
 * -EINTR and the caller looks its pages up. */
static int kvfs_ioctl(int fd, unsigned long cmd, void *arg)
{
	int rc;

	do
		rc = ioctl(fd, cmd, arg);
	while (rc < 0 && errno == EINTR && cmd != KVFS_IOC_WRITE);
	return rc < 0 ? -errno : 0;
}

/* ---- clients ---- */

/*
 * Unregistering region 0 is harmless and tells a kvfs model directory (which
 * knows the command and answers "no such region") from everything else.
 * EPROTO means kvfs, but one speaking another ABI version: say so.
 */
static int client_handshake(int fd)
{
	struct kvfs_region_arg a = { .abi = KVFS_ABI_VERSION, .region_id = 0 };
	int rc = kvfs_ioctl(fd, KVFS_IOC_REGION_UNREGISTER, &a);

	if (rc == 0 || rc == -ENOENT)
		return 0;
	if (rc == -EPROTO || rc == -ENOMEM)
		return rc;
	return -ENOTTY;
}

int kvfs_client_open(const char *model_dir, struct kvfs_client **out)
{
	struct kvfs_client *c;
	int rc;

	if (!model_dir || !out)
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->fd = open(model_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (c->fd < 0) {
		rc = -errno;
		goto err_free;
	}
	rc = client_handshake(c->fd);
	if (rc)
		goto err_close;
	rc = -pthread_mutex_init(&c->lock, NULL);
	if (rc)
		goto err_close;
	rc = -pthread_cond_init(&c->work_cv, NULL);
	if (rc)
		goto err_mutex;
	*out = c;
	return 0;

err_mutex:
	pthread_mutex_destroy(&c->lock);
err_close:
	close(c->fd);
err_free:
	free(c);
	return rc;
}

static void region_unlink(struct kvfs_region *r);
static void region_release(struct kvfs_region *r);

/* Workers finish everything already queued before they exit, so no waiter
 * is left blocked on a batch nobody will run. */
static void client_stop_workers(struct kvfs_client *c)
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

void kvfs_client_close(struct kvfs_client *c)
{
	if (!c)
		return;
	client_stop_workers(c);
	/* No worker is left, so nothing is in flight and no lock is needed. */
	while (c->regions) {
		struct kvfs_region *r = c->regions;

		region_unlink(r);
		region_release(r);
	}
	pthread_cond_destroy(&c->work_cv);
	pthread_mutex_destroy(&c->lock);
	close(c->fd);
	free(c);
}

int kvfs_client_fd(const struct kvfs_client *c)
{
	return c ? c->fd : -EINVAL;
}

/* ---- regions ---- */

/*
 * Map and register memory behind fd (which the region now owns). The
 * mapping is populated up front so the first read into it does not pay for
 * page faults, neither here nor in the daemon's copy of the pages.
 */
static int region_attach(struct kvfs_client *c, int fd, size_t size,
			 struct kvfs_region **out)
{
	struct kvfs_region_arg a = { .abi = KVFS_ABI_VERSION, .fd = fd,
				     .length = size };
	struct kvfs_region *r;
	int rc;

	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->base = mmap(NULL, size, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_POPULATE, fd, 0);
	if (r->base == MAP_FAILED) {
		rc = -errno;
		goto err_free;
	}
	rc = kvfs_ioctl(c->fd, KVFS_IOC_REGION_REGISTER, &a);
	if (rc)
		goto err_unmap;
	r->c = c;
	r->fd = fd;
	r->size = size;
	r->id = a.region_id;
	pthread_mutex_lock(&c->lock);
	r->next = c->regions;
	if (c->regions)
		c->regions->prev = r;
	c->regions = r;
	pthread_mutex_unlock(&c->lock);
	*out = r;
	return 0;

err_unmap:
	munmap(r->base, size);
err_free:
	free(r);
	return rc;
}

int kvfs_region_create(struct kvfs_client *c, size_t size,
		       struct kvfs_region **out)
{
	int fd, rc;

	if (!c || !out || size == 0)
		return -EINVAL;
	fd = memfd_create("kvfs-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0) {
		rc = -errno;
		goto err_close;
	}
	/* A region that shrinks under a mapping faults (SIGBUS) in whoever
	 * touches the lost pages, the daemon included: forbid it for good. */
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		rc = -errno;
		goto err_close;
	}
	rc = region_attach(c, fd, size, out);
	if (rc)
		goto err_close;
	return 0;

err_close:
	close(fd);
	return rc;
}

int kvfs_region_register_fd(struct kvfs_client *c, int fd, size_t size,
			    struct kvfs_region **out)
{
	struct stat st;
	int dfd, rc;

	if (!c || !out || fd < 0)
		return -EINVAL;
	dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (dfd < 0)
		return -errno;
	if (fstat(dfd, &st) < 0) {
		rc = -errno;
		goto err_close;
	}
	/* Mapping past the end of the file would fault on first touch. */
	rc = -EINVAL;
	if (!S_ISREG(st.st_mode) || st.st_size <= 0)
		goto err_close;
	if (size == 0)
		size = (size_t)st.st_size;
	rc = -ERANGE;
	if ((uint64_t)size > (uint64_t)st.st_size)
		goto err_close;
	rc = region_attach(c, dfd, size, out);
	if (rc)
		goto err_close;
	return 0;

err_close:
	close(dfd);
	return rc;
}

static void region_unlink(struct kvfs_region *r)
{
	struct kvfs_client *c = r->c;

	if (r->prev)
		r->prev->next = r->next;
	else
		c->regions = r->next;
	if (r->next)
		r->next->prev = r->prev;
}

/* Unregister (best effort: the daemon may be gone, or may have dropped the
 * region already), unmap, close and free a region no longer listed. */
static void region_release(struct kvfs_region *r)
{
	struct kvfs_region_arg a = { .abi = KVFS_ABI_VERSION, .region_id = r->id };

	(void)kvfs_ioctl(r->c->fd, KVFS_IOC_REGION_UNREGISTER, &a);
	munmap(r->base, r->size);
	close(r->fd);
	free(r);
}

int kvfs_region_destroy(struct kvfs_region *r)
{
	struct kvfs_client *c;

	if (!r)
		return -EINVAL;
	c = r->c;
	/* A submitted batch refers to its region until kvfs_batch_wait
	 * collects it. Checked and unlinked in one hold of the lock, so no
	 * submission slips in between. */
	pthread_mutex_lock(&c->lock);
	if (r->pending) {
		pthread_mutex_unlock(&c->lock);
		return -EBUSY;
	}
	region_unlink(r);
	pthread_mutex_unlock(&c->lock);
	region_release(r);
	return 0;
}

void *kvfs_region_base(const struct kvfs_region *r)
{
	return r ? r->base : NULL;
}

size_t kvfs_region_size(const struct kvfs_region *r)
{
	return r ? r->size : 0;
}

uint64_t kvfs_region_id(const struct kvfs_region *r)
{
	return r ? r->id : 0;
}

/* ---- batches ---- */

size_t kvfs_batch_ctl_bytes(unsigned max_pages)
{
	return (size_t)max_pages * (sizeof(struct kvfs_page_desc) + KVFS_NAME_MAX);
}

int kvfs_batch_new(struct kvfs_region *r, uint64_t ctl_off, unsigned max_pages,
		   struct kvfs_batch **out)
{
	struct kvfs_batch *b;
	size_t ctl;
	int rc;

	if (!r || !out || ctl_off % 8 || max_pages == 0 || max_pages > KVFS_BATCH_MAX)
		return -EINVAL;
	ctl = kvfs_batch_ctl_bytes(max_pages);
	if (ctl_off > r->size || ctl > r->size - ctl_off)
		return -ERANGE;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	rc = -pthread_cond_init(&b->done_cv, NULL);
	if (rc) {
		free(b);
		return rc;
	}
	b->r = r;
	b->ctl_off = ctl_off;
	b->max = max_pages;
	b->desc = (struct kvfs_page_desc *)((char *)r->base + ctl_off);
	b->names = (char *)(b->desc + max_pages);
	*out = b;
	return 0;
}

void kvfs_batch_free(struct kvfs_batch *b)
{
	if (!b)
		return;
	/* A worker may still be writing the result, and the region counts
	 * the submission until it is collected: wait for both. */
	if (batch_state(b) != BATCH_IDLE)
		(void)kvfs_batch_wait(b, NULL);
	pthread_cond_destroy(&b->done_cv);
	free(b);
}

/* Harmless even while a read is in flight: the worker issues the count it
 * was given at submit, and adding is refused until kvfs_batch_wait. */
void kvfs_batch_reset(struct kvfs_batch *b)
{
	if (b)
		b->count = 0;
}

unsigned kvfs_batch_count(const struct kvfs_batch *b)
{
	return b ? b->count : 0;
}

/* The same rules the daemon applies, so a bad name fails at add time with
 * the caller's context instead of as one page's status later. */
static int check_name(const char *name, size_t *len)
{
	size_t n;

	if (!name)
		return -EINVAL;
	n = strnlen(name, KVFS_NAME_MAX + 1);
	if (n > KVFS_NAME_MAX)
		return -ENAMETOOLONG;
	if (n == 0 || memchr(name, '/', n) || !strcmp(name, ".") || !strcmp(name, ".."))
		return -EINVAL;
	*len = n;
	return 0;
}

/* Slot for the next descriptor, zeroed: reserved fields must be 0, and
 * outputs left from an earlier use of the control area must not show. */
static int batch_next(struct kvfs_batch *b, struct kvfs_page_desc **d)
{
	if (batch_state(b) != BATCH_IDLE)
		return -EBUSY;
	if (b->count >= b->max)
		return -ENOSPC;
	*d = &b->desc[b->count];
	memset(*d, 0, sizeof(**d));
	return 0;
}

int kvfs_batch_add(struct kvfs_batch *b, uint32_t layer, const char *name,
		   uint64_t dst_off, uint64_t dst_len)
{
	struct kvfs_page_desc *d;
	char *slot;
	size_t len;
	int rc;

	if (!b)
		return -EINVAL;
	rc = check_name(name, &len);
	if (rc)
		return rc;
	rc = batch_next(b, &d);
	if (rc)
		return rc;
	slot = b->names + (size_t)b->count * KVFS_NAME_MAX;
	memcpy(slot, name, len);
	d->name_off = (uint64_t)(slot - (char *)b->r->base);
	d->name_len = (uint32_t)len;
	d->layer = layer;
	d->dst_off = dst_off;
	d->dst_len = dst_len;
	return (int)b->count++;
}

int kvfs_batch_add_handle(struct kvfs_batch *b, uint64_t handle,
			  uint64_t dst_off, uint64_t dst_len)
{
	struct kvfs_page_desc *d;
	int rc;

	if (!b || handle == 0)
		return -EINVAL;
	rc = batch_next(b, &d);
	if (rc)
		return rc;
	d->handle = handle;
	d->dst_off = dst_off;
	d->dst_len = dst_len;
	return (int)b->count++;
}

int kvfs_batch_set_dst(struct kvfs_batch *b, unsigned i, uint64_t dst_off,
		       uint64_t dst_len)
{
	if (!b || i >= b->count)
		return -EINVAL;
	if (batch_state(b) != BATCH_IDLE)
		return -EBUSY;
	b->desc[i].dst_off = dst_off;
	b->desc[i].dst_len = dst_len;
	return 0;
}

static void batch_arg(const struct kvfs_batch *b, unsigned group,
		      unsigned flags, struct kvfs_batch_arg *a)
{
	memset(a, 0, sizeof(*a));
	a->abi = KVFS_ABI_VERSION;
	a->flags = flags;
	a->region_id = b->r->id;
	a->desc_off = b->ctl_off;
	a->count = b->count;
	a->group = group;
}

static void batch_result(const struct kvfs_batch_arg *a,
			 struct kvfs_batch_result *res)
{
	if (!res)
		return;
	res->done = a->done;
	res->failed = a->failed;
	res->bytes = a->bytes;
}

static int batch_call(struct kvfs_batch *b, unsigned long cmd, unsigned group,
		      unsigned flags, struct kvfs_batch_result *res)
{
	struct kvfs_batch_arg a;
	int rc;

	if (!b)
		return -EINVAL;
	if (batch_state(b) != BATCH_IDLE)
		return -EBUSY;
	batch_arg(b, group, flags, &a);
	rc = kvfs_ioctl(b->r->c->fd, cmd, &a);
	if (rc == 0)
		batch_result(&a, res);
	return rc;
}

int kvfs_batch_read(struct kvfs_batch *b, struct kvfs_batch_result *res)
{
	return batch_call(b, KVFS_IOC_READ, 0, 0, res);
}

int kvfs_batch_lookup(struct kvfs_batch *b, unsigned group,
		      struct kvfs_batch_result *res)
{
	return batch_call(b, KVFS_IOC_LOOKUP, group, 0, res);
}

int kvfs_batch_prefetch(struct kvfs_batch *b, struct kvfs_batch_result *res)
{
	return batch_call(b, KVFS_IOC_PREFETCH, 0, 0, res);
}

/* Flags the daemon would refuse for the whole call are refused here, with
 * the caller's context. */
static int write_flags_ok(unsigned flags)
{
	return !(flags & ~(KVFS_WRITE_DURABLE | KVFS_WRITE_REPLACE));
}

int kvfs_batch_write(struct kvfs_batch *b, unsigned flags,
		     struct kvfs_batch_result *res)
{
	if (!write_flags_ok(flags))
		return -EINVAL;
	return batch_call(b, KVFS_IOC_WRITE, 0, flags, res);
}

int kvfs_write_pages(struct kvfs_region *r, uint64_t ctl_off,
		     struct kvfs_write_page *pages, unsigned n, unsigned flags,
		     struct kvfs_batch_result *res)
{
	struct kvfs_batch *b;
	int rc;

	if (!pages || n == 0 || !write_flags_ok(flags))
		return -EINVAL;
	rc = kvfs_batch_new(r, ctl_off, n, &b);
	if (rc)
		return rc;
	for (unsigned i = 0; i < n; i++) {
		pages[i].status = 0;
		pages[i].handle = 0;
	}
	for (unsigned i = 0; i < n && rc >= 0; i++) {
		rc = kvfs_batch_add(b, pages[i].layer, pages[i].name, pages[i].src_off,
				    pages[i].len);
		if (rc < 0)
			pages[i].status = rc;   /* a bad name: nothing was sent */
	}
	if (rc >= 0)
		rc = kvfs_batch_write(b, flags, res);
	for (unsigned i = 0; i < n && rc == 0; i++) {
		pages[i].status = b->desc[i].status;
		pages[i].handle = b->desc[i].handle;
	}
	kvfs_batch_free(b);
	return rc < 0 ? rc : 0;
}

/* ---- asynchronous reads ---- */

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
		b->rc = kvfs_ioctl(c->fd, b->cmd, &b->arg);
		pthread_mutex_lock(&c->lock);
		batch_set_state(b, BATCH_DONE);
		pthread_cond_broadcast(&b->done_cv);
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
	batch_arg(b, 0, flags, &b->arg);
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
	if (!write_flags_ok(flags))
		return -EINVAL;
	return batch_submit(b, KVFS_IOC_WRITE, flags);
}

int kvfs_batch_wait(struct kvfs_batch *b, struct kvfs_batch_result *res)
{
	struct kvfs_client *c;
	int rc;

	if (!b)
		return -EINVAL;
	c = b->r->c;
	pthread_mutex_lock(&c->lock);
	if (b->state == BATCH_IDLE) {
		rc = -EINVAL;   /* nothing submitted */
		goto out;
	}
	while (b->state != BATCH_DONE)
		pthread_cond_wait(&b->done_cv, &c->lock);
	rc = b->rc;
	if (rc == 0)
		batch_result(&b->arg, res);
	b->r->pending--;
	batch_set_state(b, BATCH_IDLE);
out:
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* ---- per-descriptor results ---- */

int kvfs_batch_status(const struct kvfs_batch *b, unsigned i, uint64_t *bytes)
{
	if (!b || i >= b->count)
		return -EINVAL;
	if (batch_state(b) == BATCH_QUEUED)
		return -EBUSY;
	if (bytes)
		*bytes = b->desc[i].bytes;
	return b->desc[i].status;
}

uint64_t kvfs_batch_handle(const struct kvfs_batch *b, unsigned i)
{
	if (!b || i >= b->count || batch_state(b) == BATCH_QUEUED)
		return 0;
	return b->desc[i].handle;
}

const struct kvfs_page_desc *kvfs_batch_desc(const struct kvfs_batch *b,
					     unsigned i)
{
	if (!b || i >= b->count)
		return NULL;
	return &b->desc[i];
}
