/*
 * Synchronous reads on the caller's own ring (store_read_sync, used by
 * kv_store_read_verified for FUSE reads).
 *
 * A reader that blocks for its result anyway (a FUSE read of one page) gains
 * nothing from the I/O thread and pays two thread hand-offs for it, which on
 * a small VM cost more than the device read itself. Such reads go through a
 * small ring owned by the calling thread: one io_uring_enter submits and
 * waits. They report themselves to the scheduler (sched.c), so the I/O
 * thread holds background writes back while they run.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "store_i.h"

#define IO_CHUNK_MAX (1u << 30)  /* one SQE moves at most this many bytes */
#define DIRECT_RING_ENTRIES 4

static pthread_key_t direct_key;
static pthread_once_t direct_once = PTHREAD_ONCE_INIT;
static bool direct_key_ok;

static void direct_ring_free(void *p)
{
	io_uring_queue_exit(p);
	free(p);
}

static void direct_key_create(void)
{
	direct_key_ok = pthread_key_create(&direct_key, direct_ring_free) == 0;
}

/* This thread's ring, created on first use; NULL if none can be had. */
static struct io_uring *direct_ring(void)
{
	struct io_uring *r;

	pthread_once(&direct_once, direct_key_create);
	if (!direct_key_ok || store_under_valgrind())
		return NULL;
	r = pthread_getspecific(direct_key);
	if (r)
		return r;
	r = malloc(sizeof(*r));
	if (!r)
		return NULL;
	if (io_uring_queue_init(DIRECT_RING_ENTRIES, r, 0) < 0) {
		free(r);
		return NULL;
	}
	if (pthread_setspecific(direct_key, r) != 0) {
		direct_ring_free(r);
		return NULL;
	}
	return r;
}

/* One read attempt of what is left of io; the result as a CQE res. */
static int direct_once_io(struct kv_store *s, struct io_uring *r, int fd,
			  struct kv_io *io)
{
	uint64_t rem = kv_extent_footprint(&io->ext) - io->done_bytes;
	unsigned n = rem > IO_CHUNK_MAX ? IO_CHUNK_MAX : (unsigned)rem;
	struct io_uring_sqe *sqe = io_uring_get_sqe(r);
	struct io_uring_cqe *cqe;
	int rc;

	if (!sqe)
		return -EBUSY;
	io_uring_prep_read(sqe, fd, (char *)io->buf + io->done_bytes, n,
			   io->ext.offset + io->done_bytes);
	sched_read_start(&s->eng.sched);
	do
		rc = io_uring_submit_and_wait(r, 1);
	while (rc == -EINTR);
	if (rc >= 0)
		rc = io_uring_wait_cqe(r, &cqe);
	/* landed, or never will: either way it no longer holds writes back */
	sched_read_end(&s->eng.sched);
	if (rc < 0)
		return rc;
	rc = store_fault_apply(&s->eng, 1u << KV_IO_READ, cqe->res, n);
	io_uring_cqe_seen(r, cqe);
	return rc;
}

/* Read io (KV_IO_READ) on the calling thread. -ENOSYS: no ring, use the queue. */
static int read_direct(struct kv_store *s, struct kv_io *io)
{
	struct io_uring *r = direct_ring();
	struct segment *seg;
	uint64_t total = kv_extent_footprint(&io->ext);
	int rc = 0, res;

	if (!r)
		return -ENOSYS;
	rc = store_io_check(s, io);
	if (rc)
		return rc;
	pthread_mutex_lock(&s->lock);
	seg = segment_find(&s->stripes[io->ext.stripe], io->ext.segment);
	if (seg)
		atomic_fetch_add(&seg->refs, 1);
	pthread_mutex_unlock(&s->lock);
	io->done_bytes = 0;
	if (!seg) {
		kv_log(KV_LOG_ERR, "%s/seg-%08" PRIu32 ": %s for read at offset "
		       "%" PRIu64, s->stripes[io->ext.stripe].path,
		       io->ext.segment,
		       stripe_no_segment_why(&s->stripes[io->ext.stripe]),
		       io->ext.offset);
		return io->res = -EIO;
	}
	while (io->done_bytes < total) {
		res = direct_once_io(s, r, seg->fd, io);
		if (res == -EAGAIN || res == -EINTR)
			continue;
		if (res == 0)
			res = -EIO;    /* end of file inside an extent: file too short */
		if (res < 0) {
			kv_log(KV_LOG_ERR, "%s/seg-%08" PRIu32 ": read of %" PRIu64
			       " bytes at offset %" PRIu64 " failed: %s",
			       s->stripes[io->ext.stripe].path, io->ext.segment,
			       total, io->ext.offset, kv_strerror(res));
			rc = res;
			break;
		}
		io->done_bytes += (uint64_t)res;
	}
	segment_unref(seg);
	return io->res = rc;
}

int store_read_sync(struct kv_store *s, struct kv_io *io)
{
	int rc = read_direct(s, io);

	if (rc == -ENOSYS)
		rc = kv_store_io(s, io, 1);
	return rc;
}
