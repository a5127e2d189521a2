/*
 * Batched reads on the caller's thread (kv_store_read_many). The fast path
 * reads hundreds of pages per call and then waits for all of them; handing
 * them to the I/O thread costs a wake-up per window and leaves the caller
 * idle while the device works. Here the caller drives its own ring like a
 * raw io_uring reader: fill to the queue depth, wait for one completion,
 * hand each finished read to the caller's callback (checksums run while the
 * rest are in flight), refill. Every read on the device is reported to the
 * scheduler (sched.c) so that the I/O thread holds background writes back
 * while a batch runs.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "store_i.h"

#define IO_CHUNK_MAX (1u << 30)
#define FIXED_SLOTS 4                  /* registered buffers per thread */
#define FIXED_MAX (1ull << 30)         /* the kernel's limit per buffer */

/*
 * Registered buffers pin the caller's pages in the kernel until the slot is
 * cleared. Every ring is on a global list so that kv_store_fixed_forget can
 * clear a dying region's slots at once in every thread's ring; a slot the
 * owning thread is reading into right now is only marked stale, and the
 * owner clears it when its batch ends.
 */
struct many_ring {
	struct io_uring ring;
	unsigned entries;
	bool sparse;                       /* a buffer table exists */
	pthread_mutex_t lock;              /* the slot fields below */
	uint64_t slot_key[FIXED_SLOTS];    /* 0: empty */
	uint64_t slot_used[FIXED_SLOTS];   /* LRU clock */
	bool slot_stale[FIXED_SLOTS];      /* forgotten while in use */
	uint64_t clock;
	uint64_t busy_key;                 /* fb key of the running batch, 0 */
	struct many_ring *prev, *next;     /* rings_lock */
};

static pthread_mutex_t rings_lock = PTHREAD_MUTEX_INITIALIZER;
static struct many_ring *rings;

static pthread_key_t many_key;
static pthread_once_t many_once = PTHREAD_ONCE_INIT;
static bool many_key_ok;

static void many_ring_free(void *p)
{
	struct many_ring *m = p;

	pthread_mutex_lock(&rings_lock);
	if (m->prev)
		m->prev->next = m->next;
	else
		rings = m->next;
	if (m->next)
		m->next->prev = m->prev;
	pthread_mutex_unlock(&rings_lock);
	io_uring_queue_exit(&m->ring);   /* drops its registrations too */
	pthread_mutex_destroy(&m->lock);
	free(m);
}

static void many_key_create(void)
{
	many_key_ok = pthread_key_create(&many_key, many_ring_free) == 0;
}

static void ring_publish(struct many_ring *m)
{
	pthread_mutex_lock(&rings_lock);
	m->prev = NULL;
	m->next = rings;
	if (rings)
		rings->prev = m;
	rings = m;
	pthread_mutex_unlock(&rings_lock);
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
	m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	if (io_uring_queue_init(qd, &m->ring, 0) < 0) {
		free(m);
		return NULL;
	}
	m->entries = m->ring.sq.ring_entries;
	pthread_mutex_init(&m->lock, NULL);
	m->sparse = io_uring_register_buffers_sparse(&m->ring, FIXED_SLOTS) == 0;
	ring_publish(m);
	if (pthread_setspecific(many_key, m) != 0) {
		many_ring_free(m);
		return NULL;
	}
	return m;
}

/* m->lock held. */
static void slot_clear(struct many_ring *m, unsigned i)
{
	struct iovec none = { NULL, 0 };
	__u64 tag = 0;

	/* An empty iovec unregisters the slot (and unpins its pages); the
	 * kernel keeps the old buffer alive for reads still in flight. */
	io_uring_register_buffers_update_tag(&m->ring, i, &none, &tag, 1);
	m->slot_key[i] = 0;
	m->slot_stale[i] = false;
}

void kv_store_fixed_forget(uint64_t key)
{
	pthread_mutex_lock(&rings_lock);
	for (struct many_ring *m = rings; m; m = m->next) {
		pthread_mutex_lock(&m->lock);
		for (unsigned i = 0; i < FIXED_SLOTS; i++) {
			if (m->slot_key[i] != key)
				continue;
			if (m->busy_key == key)
				m->slot_stale[i] = true;   /* its batch clears it */
			else
				slot_clear(m, i);
		}
		pthread_mutex_unlock(&m->lock);
	}
	pthread_mutex_unlock(&rings_lock);
}

/* The running batch is over: clear what was forgotten during it. */
static void batch_end(struct many_ring *m)
{
	pthread_mutex_lock(&m->lock);
	m->busy_key = 0;
	for (unsigned i = 0; i < FIXED_SLOTS; i++)
		if (m->slot_stale[i])
			slot_clear(m, i);
	pthread_mutex_unlock(&m->lock);
}

/* Is every page of fb in memory now (mincore)? */
static bool all_resident(const struct kv_fixed_buf *fb)
{
	size_t psz = (size_t)sysconf(_SC_PAGESIZE);
	uintptr_t lo = (uintptr_t)fb->base / psz * psz;
	size_t pages = ((uintptr_t)fb->base + fb->len - lo + psz - 1) / psz;
	unsigned char *vec = malloc(pages);
	bool all = vec && mincore((void *)lo, pages * psz, vec) == 0;

	for (size_t i = 0; all && i < pages; i++)
		all = vec[i] & 1;
	free(vec);
	return all;
}

/* m->lock held: the slot holding fb, registering it if needed; -1: none. */
static int fixed_slot_locked(struct many_ring *m, const struct kv_fixed_buf *fb)
{
	struct iovec iov;
	unsigned i, lru = 0;
	__u64 tag = 0;

	m->clock++;
	for (i = 0; i < FIXED_SLOTS; i++) {
		if (m->slot_key[i] == fb->key && !m->slot_stale[i]) {
			m->slot_used[i] = m->clock;
			return (int)i;
		}
		if (m->slot_used[i] < m->slot_used[lru])
			lru = i;
	}
	/* Registering pins every page of the buffer, faulting in any the owner
	 * punched out since: that would allocate its memory on our account.
	 * Only a buffer wholly in memory is registered; else plain reads,
	 * which touch only what the batch reads into. */
	if (!all_resident(fb))
		return -1;
	iov = (struct iovec){ fb->base, fb->len };
	m->slot_stale[lru] = false;
	if (io_uring_register_buffers_update_tag(&m->ring, lru, &iov, &tag, 1) < 0) {
		m->slot_key[lru] = 0;
		return -1;     /* e.g. RLIMIT_MEMLOCK: plain reads still work */
	}
	m->slot_key[lru] = fb->key;
	m->slot_used[lru] = m->clock;
	return (int)lru;
}

/* Start a batch reading into fb: its slot, or -1 for plain reads. */
static int batch_begin(struct many_ring *m, const struct kv_fixed_buf *fb)
{
	int slot;

	if (!fb || !m->sparse || fb->key == 0 || fb->len == 0 || fb->len > FIXED_MAX)
		return -1;
	pthread_mutex_lock(&m->lock);
	slot = fixed_slot_locked(m, fb);
	m->busy_key = slot >= 0 ? fb->key : 0;
	pthread_mutex_unlock(&m->lock);
	return slot;
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
		if (!seg && s->stripes[io->ext.stripe].missing)
			kv_log(KV_LOG_ERR, "%s/seg-%08" PRIu32 ": %s for read "
			       "at offset %" PRIu64, s->stripes[io->ext.stripe].path,
			       io->ext.segment,
			       stripe_no_segment_why(&s->stripes[io->ext.stripe]),
			       io->ext.offset);
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

	/* A slot forgotten mid-batch (its memory was replaced) is not used
	 * again; the flag is written under m->lock, a stale read only costs
	 * one more private re-read. */
	if (mm->slot >= 0 && !__atomic_load_n(&mm->m->slot_stale[mm->slot], __ATOMIC_RELAXED) &&
	    buf >= (char *)fb->base &&
	    (uint64_t)(buf - (char *)fb->base) + n <= fb->len)
		io_uring_prep_read_fixed(sqe, seg_of(io)->fd, buf, n,
					 io->ext.offset + io->done_bytes, mm->slot);
	else
		io_uring_prep_read(sqe, seg_of(io)->fd, buf, n,
				   io->ext.offset + io->done_bytes);
	io_uring_sqe_set_data(sqe, io);
	mm->inflight++;
	sched_read_start(&mm->s->eng.sched);
}

static void complete(struct many *mm, struct kv_io *io, int res)
{
	uint64_t total = kv_extent_footprint(&io->ext);
	uint64_t rem = total - io->done_bytes;
	unsigned asked = rem > IO_CHUNK_MAX ? IO_CHUNK_MAX : (unsigned)rem;

	mm->inflight--;
	sched_read_end(&mm->s->eng.sched);
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
		sched_read_end(&mm->s->eng.sched);
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
	mm.slot = batch_begin(mm.m, fb);
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
			break;
		}
	}
	batch_end(mm.m);
}
