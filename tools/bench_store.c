/*
 * `kvfs bench`: a store opened in the bench process, for the mixed case.
 *
 * Through the mount, a write stream is only as fast as FUSE takes pages in
 * (on a small VM ~0.1-0.5 GB/s, CPU bound), and the readers lose more to
 * the writers' CPU than to the device. To measure what the store's I/O
 * scheduler does about the device, the bench also opens a store of its
 * own (no daemon, no FUSE): the read set is written to its extents, read in
 * the same batches with kv_store_read_many into the same registered slots
 * as the fast path, and a writer thread keeps the I/O thread fed with page
 * writes (2 x qd outstanding, over a pool of extents it overwrites), as a
 * daemon fed by a fast ingest path would be. Two such stores run side by
 * side: one read-first, one opened with KVFS_SCHED=fifo.
 *
 * The write case uses the same writer on a fresh store with no reads: the
 * read case's page count of new extents, 2 x qd writes outstanding, then
 * kv_store_sync: what the I/O thread writes when reads leave it the
 * whole queue depth.
 */
#include "bench.h"

#define STORE_UUID "6b766673-6265-6e63-682d-73746f726521"
#define WPOOL_MAX (256ull << 20)   /* bytes the write stream cycles over */
#define FIXED_KEY 0x6b7666732d6d6978ull

/* kv_store_open with KVFS_SCHED set for it alone: the caller's knobs
 * (write-ops=...), then the mode (the last one given wins). The bench has
 * no other threads now that read the environment. */
static int open_store(struct store_mix *m, unsigned qd)
{
	char stripe[PATH_MAX + 40], env[256], *old = getenv("KVFS_SCHED");
	const char *paths[1] = { stripe };
	struct kv_store_opts so = {
		.nstripes = 1, .stripes = paths, .uuid = STORE_UUID,
		.segment_size = KV_SEGMENT_SIZE_DEFAULT, .queue_depth = qd,
		.create = true, .prealloc = kv_store_prealloc_env(),   /* as the daemon */
	};
	int rc;

	old = old ? strdup(old) : NULL;
	snprintf(stripe, sizeof(stripe), "%s/s0", m->dir);
	snprintf(env, sizeof(env), "%s%s%s", old ? old : "", old ? "," : "",
		 m->fifo ? "fifo" : "read-first");
	setenv("KVFS_SCHED", env, 1);
	rc = kv_store_open(&so, &m->st);
	if (old)
		setenv("KVFS_SCHED", old, 1);
	else
		unsetenv("KVFS_SCHED");
	free(old);
	if (rc == 0) {
		rc = kv_store_reclaim(m->st, NULL);
		if (rc < 0)
			kv_store_close(m->st);
	}
	if (rc < 0) {
		m->st = NULL;
		bench_err("store %s: %s", m->dir, kv_strerror(rc));
	}
	return rc;
}

/* n extents of s's size; written with page p's stamp when stamp. */
static int alloc_write(struct store_mix *m, const struct size_run *s,
		       struct kv_extent *ext, unsigned long n, bool stamp)
{
	enum { CHUNK = 64 };
	struct kv_io io[CHUNK];
	unsigned long p, i, k;
	char *buf = aligned_alloc(BLOCK, CHUNK * s->stride);
	int rc = buf ? 0 : -ENOMEM;

	for (p = 0; rc == 0 && p < n; p += k) {
		for (k = 0; rc == 0 && k < CHUNK && p + k < n; k++) {
			i = p + k;
			rc = kv_extent_alloc(m->st, s->size, &ext[i]);
			memcpy(buf + k * s->stride, s->data, s->size);
			memset(buf + k * s->stride + s->size, 0, s->stride - s->size);
			if (stamp)
				stamp_page(buf + k * s->stride, s->size, i);
			io[k] = (struct kv_io){ .op = KV_IO_WRITE, .ext = ext[i],
						.buf = buf + k * s->stride };
		}
		if (rc == 0)
			rc = kv_store_io(m->st, io, (unsigned)k);
	}
	if (rc == 0)
		rc = kv_store_sync(m->st, ext, (unsigned)n);
	if (rc < 0)
		bench_err("store %s: writing %lu pages: %s", m->dir, n, kv_strerror(rc));
	free(buf);
	return rc;
}

/*
 * DIR/name: a fresh store. For the mixed case (!fresh) with the read set
 * and a pool of written extents for the stream to overwrite; for the write
 * case (fresh) with the read case's page count of extents allocated but
 * not written, for store_mix_write_all.
 */
int store_mix_open(struct store_mix *m, const struct size_run *s, const char *name,
		   bool fifo, bool fresh)
{
	unsigned qd = s->b->o->qd;
	uint64_t pool = s->pages * s->stride < WPOOL_MAX ? s->pages * s->stride : WPOOL_MAX;
	unsigned long i;
	int rc;

	memset(m, 0, sizeof(*m));
	m->fifo = fifo;
	pthread_mutex_init(&m->mu, NULL);
	pthread_cond_init(&m->cv, NULL);
	snprintf(m->dir, sizeof(m->dir), "%s/%s", s->b->dir, name);
	kv_log_set_level(KV_LOG_WARN);   /* the store's info lines are not the report */
	rc = make_dir(m->dir);
	if (rc == 0)
		rc = open_store(m, qd);
	if (rc < 0)
		return rc;
	m->nwext = fresh ? s->pages : pool / s->stride;
	m->nslots = 2 * qd < STORE_WSLOTS_MAX ? 2 * qd : STORE_WSLOTS_MAX;
	m->ext = calloc(fresh ? 1 : s->pages, sizeof(*m->ext));
	m->ios = calloc(s->batch, sizeof(*m->ios));
	m->wext = calloc(m->nwext, sizeof(*m->wext));
	m->slots = calloc(m->nslots, sizeof(*m->slots));
	m->free_slots = calloc(m->nslots, sizeof(*m->free_slots));
	m->wbuf = aligned_alloc(BLOCK, s->stride);
	if (!m->ext || !m->ios || !m->wext || !m->slots || !m->free_slots || !m->wbuf)
		return -ENOMEM;
	memset(m->wbuf, 0, s->stride);
	memcpy(m->wbuf, s->data, s->size);
	if (fresh) {
		for (i = 0; rc == 0 && i < m->nwext; i++)
			rc = kv_extent_alloc(m->st, s->size, &m->wext[i]);
		if (rc < 0)
			bench_err("store %s: allocating %lu extents: %s", m->dir,
				  m->nwext, kv_strerror(rc));
		return rc;
	}
	rc = alloc_write(m, s, m->ext, s->pages, true);
	if (rc == 0)
		rc = alloc_write(m, s, m->wext, m->nwext, false);
	return rc;
}

static void on_read(void *arg, struct kv_io *io)
{
	struct store_mix *m = arg;

	m->errors += io->res != 0;
}

/* One batch through kv_store_read_many into the fast path's slots. */
int store_mix_batch(struct size_run *s, struct store_mix *m, const unsigned long *pg,
		    unsigned n)
{
	struct kv_fixed_buf fb = { s->buf, s->buflen, FIXED_KEY };
	unsigned i;
	int rc = 0;

	for (i = 0; i < n; i++)
		m->ios[i] = (struct kv_io){ .op = KV_IO_READ, .ext = m->ext[pg[i]],
					    .buf = s->buf + i * s->stride };
	m->errors = 0;
	kv_store_read_many(m->st, m->ios, n, &fb, on_read, m);
	for (i = 0; rc == 0 && i < n; i++) {
		if (m->ios[i].res) {
			bench_err("store: read of page %lu: %s", pg[i],
				  kv_strerror(m->ios[i].res));
			rc = -EIO;
		} else {
			rc = check_page(s, "store", s->buf + i * s->stride, pg[i]);
		}
	}
	return rc;
}

/* ---- the write stream ---- */

/* On the store's I/O thread: give the slot back. */
static void on_written(void *arg)
{
	struct store_wslot *w = arg;
	struct store_mix *m = w->m;

	pthread_mutex_lock(&m->mu);
	if (w->io.res == 0)
		atomic_fetch_add_explicit(&m->bytes, kv_extent_footprint(&w->io.ext),
					  memory_order_relaxed);
	else if (m->err == 0)
		m->err = w->io.res;
	m->free_slots[m->nfree++] = (unsigned)(w - m->slots);
	pthread_cond_signal(&m->cv);
	pthread_mutex_unlock(&m->mu);
}

/* Keep every slot's write queued or in flight until stopped (or quota
 * writes were queued); then wait for all of them. */
static void *writer_main(void *arg)
{
	struct store_mix *m = arg;
	struct store_wslot *w;
	int rc;

	pthread_mutex_lock(&m->mu);
	for (;;) {
		while (!m->nfree && !atomic_load(&m->stop))
			pthread_cond_wait(&m->cv, &m->mu);
		if (atomic_load(&m->stop) || m->err || interrupted ||
		    (m->quota && m->wnext == m->quota))
			break;
		w = &m->slots[m->free_slots[--m->nfree]];
		pthread_mutex_unlock(&m->mu);
		w->m = m;
		w->io = (struct kv_io){ .op = KV_IO_WRITE, .buf = m->wbuf,
					.ext = m->wext[m->wnext++ % m->nwext] };
		rc = kv_store_io_async(m->st, &w->io, 1, on_written, w);
		pthread_mutex_lock(&m->mu);
		if (rc < 0) {
			m->err = m->err ? m->err : rc;
			m->free_slots[m->nfree++] = (unsigned)(w - m->slots);
			break;
		}
	}
	while (m->nfree < m->nslots)
		pthread_cond_wait(&m->cv, &m->mu);
	pthread_mutex_unlock(&m->mu);
	return NULL;
}

static void stream_init(struct store_mix *m)
{
	atomic_store(&m->stop, false);
	m->err = 0;
	m->nfree = m->nslots;
	for (unsigned i = 0; i < m->nslots; i++)
		m->free_slots[i] = i;
}

/* Write every extent of a fresh store once, on this thread. */
int store_mix_write_all(struct store_mix *m)
{
	stream_init(m);
	m->quota = m->nwext;
	m->wnext = 0;
	writer_main(m);
	if (m->err)
		bench_err("store %s: a write failed: %s", m->dir, kv_strerror(m->err));
	return m->err ? -EIO : check_interrupt();
}

int store_mix_stream_start(struct store_mix *m)
{
	int rc;

	stream_init(m);
	m->quota = 0;
	rc = -pthread_create(&m->th, NULL, writer_main, m);
	if (rc < 0)
		bench_err("cannot start the store writer thread: %s", strerror(-rc));
	m->running = rc == 0;
	return rc;
}

/* Stop the stream; every write it queued has completed on return. */
int store_mix_stream_stop(struct store_mix *m)
{
	if (!m->running)
		return 0;
	pthread_mutex_lock(&m->mu);
	atomic_store(&m->stop, true);
	pthread_cond_signal(&m->cv);
	pthread_mutex_unlock(&m->mu);
	pthread_join(m->th, NULL);
	m->running = false;
	if (m->err)
		bench_err("store %s: a write of the stream failed: %s", m->dir,
			  kv_strerror(m->err));
	return m->err ? -EIO : check_interrupt();
}

void store_mix_close(struct store_mix *m)
{
	store_mix_stream_stop(m);
	if (m->st) {
		kv_store_fixed_forget(FIXED_KEY);
		kv_store_close(m->st);
	}
	if (m->dir[0]) {
		rm_tree(m->dir);
		pthread_cond_destroy(&m->cv);
		pthread_mutex_destroy(&m->mu);
	}
	free(m->ext);
	free(m->ios);
	free(m->wext);
	free(m->slots);
	free(m->free_slots);
	free(m->wbuf);
	memset(m, 0, sizeof(*m));
}
