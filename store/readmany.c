/*
 * Batched reads on the caller's thread (kv_store_read_many). The fast path
 * reads hundreds of pages per call and then waits for all of them; handing
 * them to the I/O thread costs a wake-up per window and leaves the caller
 * idle while the device works. Here the caller drives its own ring like a
 * raw io_uring reader: fill to the queue depth, wait for one completion,
 * hand each finished read to the caller's callback (checksums run while the
 * rest are in flight), refill.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "store_i.h"

#define IO_CHUNK_MAX (1u << 30)
#define FIXED_SLOTS 4                  /* registered buffers per thread */
#define FIXED_MAX (1ull << 30)         /* the kernel's limit per buffer */
#define FORGOTTEN_RING 64

struct many_ring {
	struct io_uring ring;
	unsigned entries;
	bool sparse;                       /* a buffer table exists */
	uint64_t slot_key[FIXED_SLOTS];    /* 0: empty */
	uint64_t slot_used[FIXED_SLOTS];   /* LRU clock */
	uint64_t clock;
	uint64_t forgotten_seen;           /* forget_gen at the last sweep */
};

/* Keys of memory about to be unmapped: each thread drops their
 * registrations (and so the kernel's pins) at its next batch. */
static pthread_mutex_t forget_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t forgotten[FORGOTTEN_RING];
static _Atomic uint64_t forget_gen;

static pthread_key_t many_key;
static pthread_once_t many_once = PTHREAD_ONCE_INIT;
static bool many_key_ok;

static void many_ring_free(void *p)
{
	struct many_ring *m = p;

	io_uring_queue_exit(&m->ring);
	free(m);
}

static void many_key_create(void)
{
	many_key_ok = pthread_key_create(&many_key, many_ring_free) == 0;
}

/* This thread's batch ring with at least qd entries; NULL if none. */
static struct many_ring *many_ring(unsigned qd)
{
	struct many_ring *m;

	pthread_once(&many_once, many_key_create);
	if (!many_key_ok || store_under_valgrind())
		return NULL;
	m = pthread_getspecific(many_key);
	if (m && m->entries >= qd)
		return m;
	if (m) {
		pthread_setspecific(many_key, NULL);
		many_ring_free(m);
	}
	m = malloc(sizeof(*m));
	if (!m)
		return NULL;
	if (io_uring_queue_init(qd, &m->ring, 0) < 0) {
		free(m);
		return NULL;
	}
	m->entries = m->ring.sq.ring_entries;
	memset(m->slot_key, 0, sizeof(m->slot_key));
	memset(m->slot_used, 0, sizeof(m->slot_used));
	m->clock = 0;
	m->forgotten_seen = atomic_load(&forget_gen);
	m->sparse = io_uring_register_buffers_sparse(&m->ring, FIXED_SLOTS) == 0;
	if (pthread_setspecific(many_key, m) != 0) {
		many_ring_free(m);
		return NULL;
	}
	return m;
}

void kv_store_fixed_forget(uint64_t key)
{
	pthread_mutex_lock(&forget_lock);
	forgotten[atomic_load(&forget_gen) % FORGOTTEN_RING] = key;
	atomic_fetch_add(&forget_gen, 1);
	pthread_mutex_unlock(&forget_lock);
}

static void slot_clear(struct many_ring *m, unsigned i)
{
	struct iovec none = { NULL, 0 };
	__u64 tag = 0;

	/* An empty iovec unregisters the slot (and unpins its pages). */
	io_uring_register_buffers_update_tag(&m->ring, i, &none, &tag, 1);
	m->slot_key[i] = 0;
}

/* Drop registrations of memory forgotten since this thread last looked. */
static void sweep_forgotten(struct many_ring *m)
{
	uint64_t gen = atomic_load(&forget_gen);

	if (gen == m->forgotten_seen)
		return;
	pthread_mutex_lock(&forget_lock);
	if (gen - m->forgotten_seen > FORGOTTEN_RING) {
		/* Fell behind: whatever we hold may be gone. */
		for (unsigned i = 0; i < FIXED_SLOTS; i++)
			if (m->slot_key[i])
				slot_clear(m, i);
	} else {
		for (uint64_t g = m->forgotten_seen; g < gen; g++)
			for (unsigned i = 0; i < FIXED_SLOTS; i++)
				if (m->slot_key[i] && m->slot_key[i] == forgotten[g % FORGOTTEN_RING])
					slot_clear(m, i);
	}
	pthread_mutex_unlock(&forget_lock);
	m->forgotten_seen = gen;
}

/* The buffer-table slot holding fb, registering it if needed; -1: none. */
static int fixed_slot(struct many_ring *m, const struct kv_fixed_buf *fb)
{
	struct iovec iov;
	unsigned i, lru = 0;
	__u64 tag = 0;

	if (!fb || !m->sparse || fb->key == 0 || fb->len == 0 || fb->len > FIXED_MAX)
		return -1;
	m->clock++;
	for (i = 0; i < FIXED_SLOTS; i++) {
		if (m->slot_key[i] == fb->key) {
			m->slot_used[i] = m->clock;
			return (int)i;
		}
		if (m->slot_used[i] < m->slot_used[lru])
			lru = i;
	}
	iov = (struct iovec){ fb->base, fb->len };
	if (io_uring_register_buffers_update_tag(&m->ring, lru, &iov, &tag, 1) < 0) {
		m->slot_key[lru] = 0;
		return -1;     /* e.g. RLIMIT_MEMLOCK: plain reads still work */
	}
	m->slot_key[lru] = fb->key;
	m->slot_used[lru] = m->clock;
	return (int)lru;
}

struct many {
	int slot;                /* fixed buffer for reads inside fb, or -1 */
	const struct kv_fixed_buf *fb;
	struct kv_store *s;
	struct many_ring *m;
	void (*each)(void *arg, struct kv_io *io);
	void *arg;
	struct kv_io *retry;     /* short or interrupted reads to resubmit */
	unsigned inflight;
};

static struct segment *seg_of(const struct kv_io *io)
{
	return io->group;
}

static void finish(struct many *mm, struct kv_io *io, int res)
{
	const struct kv_extent *e = &io->ext;

	io->res = res;
	/* EFAULT: the caller's memory went away (an engine shrank its
	 * region), not the device: the caller reports it. */
	if (res < 0)
		kv_log(res == -EFAULT ? KV_LOG_WARN : KV_LOG_ERR, "%s/seg-%08" PRIu32 ": read of %" PRIu64
		       " bytes at offset %" PRIu64 " failed: %s",
		       mm->s->stripes[e->stripe].path, e->segment,
		       kv_extent_footprint(e), e->offset, kv_strerror(res));
	if (seg_of(io))
		segment_unref(seg_of(io));
	io->group = NULL;
	mm->each(mm->arg, io);
}

/* Check and pin io's segment; a failed io completes at once. */
static bool start(struct many *mm, struct kv_io *io)
{
	struct kv_store *s = mm->s;
	struct segment *seg = NULL;
	int rc = store_io_check(s, io);

	io->group = NULL;
	io->done_bytes = 0;
	if (rc == 0 && io->op != KV_IO_READ)
		rc = -EINVAL;
	if (rc == 0) {
		pthread_mutex_lock(&s->lock);
		seg = segment_find(&s->stripes[io->ext.stripe], io->ext.segment);
		if (seg)
			atomic_fetch_add(&seg->refs, 1);
		pthread_mutex_unlock(&s->lock);
		rc = seg ? 0 : -EIO;   /* freed under us: the caller's bug, not silent */
	}
	if (rc < 0) {
		finish(mm, io, rc);
		return false;
	}
	io->group = seg;
	return true;
}

/* Queue what is left of io; the ring has room (inflight < entries). */
static void prep(struct many *mm, struct kv_io *io)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&mm->m->ring);
	uint64_t rem = kv_extent_footprint(&io->ext) - io->done_bytes;
	unsigned n = rem > IO_CHUNK_MAX ? IO_CHUNK_MAX : (unsigned)rem;
	char *buf = (char *)io->buf + io->done_bytes;
	const struct kv_fixed_buf *fb = mm->fb;

	if (mm->slot >= 0 && buf >= (char *)fb->base &&
	    (uint64_t)(buf - (char *)fb->base) + n <= fb->len)
		io_uring_prep_read_fixed(sqe, seg_of(io)->fd, buf, n,
					 io->ext.offset + io->done_bytes, mm->slot);
	else
		io_uring_prep_read(sqe, seg_of(io)->fd, buf, n,
				   io->ext.offset + io->done_bytes);
	io_uring_sqe_set_data(sqe, io);
	mm->inflight++;
}

static void complete(struct many *mm, struct kv_io *io, int res)
{
	uint64_t total = kv_extent_footprint(&io->ext);
	uint64_t rem = total - io->done_bytes;
	unsigned asked = rem > IO_CHUNK_MAX ? IO_CHUNK_MAX : (unsigned)rem;

	mm->inflight--;
	res = store_fault_apply(&mm->s->eng, 1u << KV_IO_READ, res, asked);
	if (res == -EAGAIN || res == -EINTR) {
		io->next = mm->retry;
		mm->retry = io;
		return;
	}
	if (res == 0)
		res = -EIO;     /* end of file inside an extent */
	if (res < 0) {
		finish(mm, io, res);
		return;
	}
	io->done_bytes += (unsigned)res;
	if (io->done_bytes < total) {
		io->next = mm->retry;
		mm->retry = io;
		return;
	}
	finish(mm, io, 0);
}

static int reap(struct many *mm)
{
	struct io_uring_cqe *cqe;
	unsigned head, count = 0;
	int rc;

	do
		rc = io_uring_submit_and_wait(&mm->m->ring, 1);
	while (rc == -EINTR);
	if (rc < 0)
		return rc;
	io_uring_for_each_cqe(&mm->m->ring, head, cqe) {
		complete(mm, io_uring_cqe_get_data(cqe), cqe->res);
		count++;
	}
	io_uring_cq_advance(&mm->m->ring, count);
	return 0;
}

/* Without a ring of our own: the I/O thread's queue, then the callbacks. */
static void read_many_queued(struct kv_store *s, struct kv_io *ios, unsigned n,
			     void (*each)(void *arg, struct kv_io *io), void *arg)
{
	int rc = kv_store_io(s, ios, n);

	for (unsigned i = 0; i < n; i++) {
		if (rc == -EINVAL || rc == -ENOMEM || rc == -ESHUTDOWN)
			ios[i].res = rc;   /* nothing was queued */
		each(arg, &ios[i]);
	}
}

/*
 * The ring failed to submit or wait (nothing this store expects): let what
 * is on the device land before returning, since the caller frees the
 * buffers, then fail what never went out.
 */
static void drain(struct many *mm, struct kv_io *ios, unsigned n,
		  unsigned next, int err)
{
	struct io_uring_cqe *cqe;

	kv_log(KV_LOG_ERR, "store: batch read ring failed: %s", kv_strerror(err));
	while (mm->inflight) {
		/* Prepared requests the failed call did not submit still count
		 * as in flight: they must go out to complete. */
		int rc = io_uring_submit_and_wait(&mm->m->ring, 1);

		if (rc >= 0)
			rc = io_uring_wait_cqe(&mm->m->ring, &cqe);
		if (rc < 0) {
			usleep(1000);    /* out of resources: let the kernel recover */
			continue;
		}
		mm->inflight--;
		finish(mm, io_uring_cqe_get_data(cqe), cqe->res < 0 ? cqe->res : err);
		io_uring_cqe_seen(&mm->m->ring, cqe);
	}
	while (mm->retry) {
		struct kv_io *io = mm->retry;

		mm->retry = io->next;
		finish(mm, io, err);
	}
	while (next < n)
		finish(mm, &ios[next++], err);
}

void kv_store_read_many(struct kv_store *s, struct kv_io *ios, unsigned n,
			const struct kv_fixed_buf *fb,
			void (*each)(void *arg, struct kv_io *io), void *arg)
{
	struct many mm = { .s = s, .each = each, .arg = arg, .fb = fb, .slot = -1 };
	unsigned next = 0;
	int rc;

	mm.m = n ? many_ring(s->eng.qd) : NULL;
	if (!mm.m) {
		if (n)
			read_many_queued(s, ios, n, each, arg);
		return;
	}
	if (mm.m->sparse)
		sweep_forgotten(mm.m);
	mm.slot = fixed_slot(mm.m, fb);
	while (next < n || mm.inflight || mm.retry) {
		while (mm.retry && mm.inflight < mm.m->entries) {
			struct kv_io *io = mm.retry;

			mm.retry = io->next;
			prep(&mm, io);
		}
		while (next < n && mm.inflight < mm.m->entries) {
			struct kv_io *io = &ios[next++];

			if (start(&mm, io))
				prep(&mm, io);
		}
		if (!mm.inflight)
			continue;
		rc = reap(&mm);
		if (rc < 0) {
			drain(&mm, ios, n, next, rc);
			return;
		}
	}
}
