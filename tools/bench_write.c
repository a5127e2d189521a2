/*
 * `kvfs bench`: the writers and the write case.
 *
 * Page writers: W threads, each creating new pages in its own layer
 * directory of the model WMODEL, for a quota of pages or until told to
 * stop, either through the mount (open, write, close per page) or in
 * fast-path batches (one KVFS_IOC_WRITE, libkvfs kvfs_batch_write, per
 * ~4 MiB of pages, from a region of the thread's own).
 * Every 4 KiB block of every page names the page, so no two pages are
 * alike and kvfs has to store each one.
 *
 * Raw writer: io_uring O_DIRECT writes of page-sized blocks at queue depth
 * Q into one file preallocated with fallocate on the store's filesystem,
 * with its source buffer registered: the device's write baseline, for a
 * number of pages (then fdatasync) or as a stream until told to stop.
 *
 * The write case: for each size, the read case's page count written R times
 * each way, interleaved: through the daemon (fuse and fast) "visible" when
 * every close or batch returned and "durable" when an fsync of every layer
 * directory returned (that waits for the group commit, which follows the
 * data's fdatasync); store (a store the bench opens itself, bench_store.c:
 * the I/O thread's writes, no daemon, no reads) and raw are "visible" when
 * every write completed and "durable" after kv_store_sync / fdatasync.
 */
#include "bench.h"

/* ---- page writers: FUSE and fast path ---- */

const char *const wmethod_name[W_COUNT] = { "fuse", "fast" };

static atomic_uint writer_runs;

int make_write_layers(struct bench *b)
{
	unsigned n = b->o->writers > b->o->mix_writers ? b->o->writers : b->o->mix_writers;

	/* each conc stream writes into the layer of its thread number */
	if (b->o->cases & 1u << C_CONC && b->o->conc_ops & 1u << CO_WRITE && b->o->streams > n)
		n = b->o->streams;
	char path[PATH_MAX + 32];
	unsigned l;
	int rc = make_dir(b->wmodel);

	for (l = 0; rc == 0 && l < n; l++) {
		snprintf(path, sizeof(path), "%s/%02u", b->wmodel, l);
		rc = make_dir(path);
	}
	return rc;
}

/* Page id in every 4 KiB block: writer pages never match each other or
 * the read case's pages (a different magic), so kvfs stores every one
 * (nothing is deduplicated). */
static void stamp_wpage(char *page, uint64_t size, uint64_t id)
{
	uint64_t off, w[2];

	for (off = 0; off < size; off += BLOCK) {
		w[0] = id;
		w[1] = ~STAMP_MAGIC ^ off;
		memcpy(page + off, w, sizeof(w));
	}
}

static uint64_t wpage_id(const struct page_writer *w, unsigned long seq)
{
	return (uint64_t)w->ws->run << 40 | (uint64_t)w->idx << 32 | seq;
}

static void wpage_name(const struct page_writer *w, unsigned long seq, char *out,
		       size_t len)
{
	snprintf(out, len, "w%u-%llu-%06lx", w->ws->run,
		 (unsigned long long)w->ws->s->size, seq);
}

/* One page through the mount: open, write, close. */
static int fuse_write(struct page_writer *w, unsigned long seq)
{
	const struct size_run *s = w->ws->s;
	char path[PATH_MAX + 96], name[64];
	int fd, rc;

	wpage_name(w, seq, name, sizeof(name));
	snprintf(path, sizeof(path), "%s/%02u/%s", s->b->wmodel, w->idx, name);
	stamp_wpage(w->buf, s->size, wpage_id(w, seq));
	fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = -errno;
		bench_err("writer: create %s: %s", path, strerror(-rc));
		return rc;
	}
	rc = write_full(fd, w->buf, s->size);
	/* kvfs seals the page on close and reports a failed seal there */
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc < 0)
		bench_err("writer: write %s: %s", path, strerror(-rc));
	return rc;
}

/* Pages seq.. seq+n-1 in one KVFS_IOC_WRITE from the writer's region
 * (visible on return; durability is the caller's fsync). */
int fast_write(struct page_writer *w, unsigned long seq, unsigned n)
{
	const struct size_run *s = w->ws->s;
	struct kvfs_batch_result res;
	char *base = kvfs_region_base(w->region), name[64];
	unsigned i;
	int rc, st;

	kvfs_batch_reset(w->kb);
	for (i = 0; i < n; i++) {
		stamp_wpage(base + w->src0 + i * s->stride, s->size, wpage_id(w, seq + i));
		wpage_name(w, seq + i, name, sizeof(name));
		rc = kvfs_batch_add(w->kb, w->idx, name, w->src0 + i * s->stride, s->size);
		if (rc < 0) {
			bench_err("fast writer: kvfs_batch_add(%s): %s", name, strerror(-rc));
			return rc;
		}
	}
	rc = kvfs_batch_write(w->kb, 0, &res);
	if (rc < 0) {
		bench_err("fast writer: kvfs_batch_write of %u pages: %s", n, strerror(-rc));
		return rc;
	}
	for (i = 0; i < n; i++) {
		st = kvfs_batch_status(w->kb, i, NULL);
		if (st != 0) {
			wpage_name(w, seq + i, name, sizeof(name));
			bench_err("fast writer: page %s: %s", name, strerror(-st));
			return st;
		}
	}
	if (res.done != n) {
		bench_err("fast writer: batch of %u pages stored %u", n, res.done);
		return -EPROTO;
	}
	return 0;
}

/*
 * Pages per fast-path write call: about 4 MiB (an engine stores a
 * request's new blocks of a layer at a time), at most the read batch.
 * Small enough that a mixed-case read phase sees many calls complete.
 */
unsigned fast_write_batch(const struct size_run *s)
{
	uint64_t n = FAST_WRITE_BYTES / s->stride;

	if (n > s->batch)
		n = s->batch;
	return n ? (unsigned)n : 1;
}

static unsigned long writer_quota(const struct page_writers *ws, unsigned idx)
{
	return ws->quota / ws->n + (idx < ws->quota % ws->n);
}

static void *writer_main(void *arg)
{
	struct page_writer *w = arg;
	struct page_writers *ws = w->ws;
	unsigned long seq = 0, quota = ws->quota ? writer_quota(ws, w->idx) : ULONG_MAX;
	unsigned n = 1;
	int rc, none = 0;

	while (seq < quota && !atomic_load(&ws->stop) && !interrupted) {
		if (ws->how == W_FAST) {
			unsigned b = fast_write_batch(ws->s);

			n = quota - seq < b ? (unsigned)(quota - seq) : b;
			rc = fast_write(w, seq, n);
		} else {
			rc = fuse_write(w, seq);
		}
		if (rc < 0) {
			atomic_compare_exchange_strong(&ws->err, &none, rc);
			atomic_store(&ws->stop, true);
			break;
		}
		seq += n;
		atomic_fetch_add(&ws->pages, n);
	}
	return NULL;
}

/* A fast writer's region: a control area, then a batch of page slots
 * holding the page bytes (stamped per page before each batch). */
static int fast_writer_setup(struct page_writer *w, const struct size_run *s)
{
	unsigned i, nb = fast_write_batch(s);
	uint64_t ctl = kvfs_batch_ctl_bytes(nb);
	size_t size;
	char *base;
	int rc;

	w->src0 = (ctl + BLOCK - 1) / BLOCK * BLOCK;
	size = w->src0 + (size_t)nb * s->stride;
	rc = kvfs_region_create(s->b->wclient, size, &w->region);
	if (rc < 0) {
		bench_err("fast writer: kvfs_region_create(%zu bytes): %s", size, strerror(-rc));
		return rc;
	}
	base = kvfs_region_base(w->region);
	for (i = 0; i < nb; i++)
		memcpy(base + w->src0 + i * s->stride, s->data, s->size);
	rc = kvfs_batch_new(w->region, 0, nb, &w->kb);
	if (rc < 0)
		bench_err("fast writer: kvfs_batch_new(%u pages): %s", nb, strerror(-rc));
	return rc;
}

void writer_teardown(struct page_writer *w)
{
	if (w->kb)
		kvfs_batch_free(w->kb);
	if (w->region)
		kvfs_region_destroy(w->region);
	free(w->buf);
	w->kb = NULL;
	w->region = NULL;
	w->buf = NULL;
}

int writer_setup(struct page_writer *w, const struct size_run *s)
{
	if (w->ws->how == W_FAST)
		return fast_writer_setup(w, s);
	w->buf = malloc(s->size);
	if (!w->buf) {
		bench_err("out of memory for a writer's page of %llu bytes",
			  (unsigned long long)s->size);
		return -ENOMEM;
	}
	memcpy(w->buf, s->data, s->size);
	return 0;
}

/*
 * Start n threads writing new pages of s's size, how (through the mount or
 * in fast-path batches of fast_write_batch pages); quota pages in all
 * (0: until ws->stop). Thread idx writes into layer directory idx of WMODEL.
 */
int writers_start(struct page_writers *ws, const struct size_run *s, enum wmethod how,
		  unsigned n, unsigned long quota)
{
	unsigned i;
	int rc = 0;

	memset(ws, 0, sizeof(*ws));
	ws->s = s;
	ws->how = how;
	ws->n = n;
	ws->quota = quota;
	ws->run = atomic_fetch_add(&writer_runs, 1);
	for (i = 0; rc == 0 && i < n; i++) {
		ws->w[i] = (struct page_writer){ .ws = ws, .idx = i };
		rc = writer_setup(&ws->w[i], s);
		if (rc == 0)
			rc = -pthread_create(&ws->w[i].th, NULL, writer_main, &ws->w[i]);
		if (rc < 0) {
			if (rc != -ENOMEM)
				bench_err("cannot start writer thread %u: %s", i, strerror(-rc));
			writer_teardown(&ws->w[i]);
			break;
		}
		ws->started++;
	}
	if (rc < 0) {
		atomic_store(&ws->stop, true);
		writers_join(ws);
	}
	return rc;
}

/* Wait for every writer (set ws->stop first to end a stream); the first
 * error any of them met. */
int writers_join(struct page_writers *ws)
{
	unsigned i;

	for (i = 0; i < ws->started; i++) {
		pthread_join(ws->w[i].th, NULL);
		writer_teardown(&ws->w[i]);
	}
	ws->started = 0;
	if (interrupted)
		return check_interrupt();
	return atomic_load(&ws->err);
}

/* fsync of each writer's layer directory: on kvfs it returns once every
 * page queued before it is durable (data synced, manifest committed). */
int writers_sync(const struct page_writers *ws)
{
	char path[PATH_MAX + 32];
	unsigned l;
	int fd, rc = 0;

	for (l = 0; rc == 0 && l < ws->n; l++) {
		snprintf(path, sizeof(path), "%s/%02u", ws->s->b->wmodel, l);
		fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0 || fsync(fd) < 0) {
			rc = -errno;
			bench_err("sync %s: %s", path, strerror(-rc));
		}
		if (fd >= 0)
			close(fd);
	}
	return rc;
}

/* ---- raw O_DIRECT writer ---- */

/* Create and preallocate DIR/name (file_bytes, a multiple of the stride). */
int raw_writer_open(struct raw_writer *w, const struct size_run *s, const char *name,
		    uint64_t file_bytes)
{
	struct iovec iov;
	int rc;

	memset(w, 0, sizeof(*w));
	w->fd = -1;
	w->stride = s->stride;
	w->file_bytes = file_bytes / s->stride * s->stride;
	w->qd = s->b->o->qd;
	snprintf(w->path, sizeof(w->path), "%s/%s", s->b->dir, name);
	w->fd = open(w->path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0644);
	if (w->fd < 0) {
		rc = -errno;
		bench_err("raw writer: create %s: %s", w->path, strerror(-rc));
		return rc;
	}
	if (fallocate(w->fd, 0, 0, (off_t)w->file_bytes) < 0) {
		rc = -errno;
		bench_err("raw writer: fallocate %s (%llu bytes): %s", w->path,
			  (unsigned long long)w->file_bytes, strerror(-rc));
		return rc;
	}
	w->buf = aligned_alloc(BLOCK, w->stride);
	if (!w->buf)
		return -ENOMEM;
	memset(w->buf, 0, w->stride);
	memcpy(w->buf, s->data, s->size);
	stamp_wpage(w->buf, s->size, ~0ull);
	rc = io_uring_queue_init(w->qd, &w->ring, 0);
	if (rc < 0) {
		bench_err("raw writer: io_uring_queue_init(%u): %s", w->qd, strerror(-rc));
		return rc;
	}
	w->ring_ok = true;
	iov = (struct iovec){ w->buf, w->stride };
	w->fixed = io_uring_register_buffers(&w->ring, &iov, 1) == 0;
	return 0;
}

static void raw_writer_queue(struct raw_writer *w, uint64_t off)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);

	/* never NULL: at most qd writes are in flight in a ring of qd */
	if (w->fixed)
		io_uring_prep_write_fixed(sqe, w->fd, w->buf, (unsigned)w->stride, off, 0);
	else
		io_uring_prep_write(sqe, w->fd, w->buf, (unsigned)w->stride, off);
	io_uring_sqe_set_data64(sqe, off);
}

/* One completion: 1 if the write is done, 0 if requeued, or -errno. */
static int raw_writer_complete(struct raw_writer *w, uint64_t off, int res)
{
	if (res == -EAGAIN || res == -EINTR) {
		raw_writer_queue(w, off);
		return 0;
	}
	if (res < 0 || (uint64_t)res != w->stride) {
		bench_err("raw writer: write of %llu bytes at %llu in %s: %s",
			  (unsigned long long)w->stride, (unsigned long long)off, w->path,
			  res < 0 ? strerror(-res) : "short write");
		return res < 0 ? res : -EIO;
	}
	atomic_fetch_add_explicit(&w->bytes, w->stride, memory_order_relaxed);
	return 1;
}

/* Write n pages (0: until w->stop) at successive page offsets, wrapping
 * around the file, qd at a time. */
int raw_writer_loop(struct raw_writer *w, unsigned long n)
{
	unsigned long slots = w->file_bytes / w->stride, next = 0;
	struct io_uring_cqe *cqe;
	unsigned inflight = 0;
	int rc = 0, c;

	for (;;) {
		bool more = rc == 0 && !interrupted &&
			    (n ? next < n : !atomic_load(&w->stop));

		while (more && inflight < w->qd && (!n || next < n)) {
			raw_writer_queue(w, (next++ % slots) * w->stride);
			inflight++;
		}
		if (!inflight)
			break;
		c = io_uring_submit_and_wait(&w->ring, 1);
		if (c < 0 && c != -EINTR) {
			bench_err("raw writer: io_uring_submit_and_wait: %s", strerror(-c));
			return c;   /* the ring is unusable; nothing more completes */
		}
		while (io_uring_peek_cqe(&w->ring, &cqe) == 0) {
			c = raw_writer_complete(w, io_uring_cqe_get_data64(cqe), cqe->res);
			io_uring_cqe_seen(&w->ring, cqe);
			if (c < 0 && rc == 0)
				rc = c;
			if (c != 0)
				inflight--;
		}
	}
	return rc ? rc : check_interrupt();
}

static void *raw_writer_main(void *arg)
{
	struct raw_writer *w = arg;

	w->err = raw_writer_loop(w, 0);
	return NULL;
}

int raw_writer_stream_start(struct raw_writer *w)
{
	int rc;

	atomic_store(&w->stop, false);
	w->err = 0;
	rc = -pthread_create(&w->th, NULL, raw_writer_main, w);
	if (rc < 0)
		bench_err("cannot start the raw writer thread: %s", strerror(-rc));
	w->running = rc == 0;
	return rc;
}

/* Stop the stream, then fdatasync so that what follows starts quiet. */
int raw_writer_stream_stop(struct raw_writer *w)
{
	if (!w->running)
		return 0;
	atomic_store(&w->stop, true);
	pthread_join(w->th, NULL);
	w->running = false;
	if (w->err == 0 && fdatasync(w->fd) < 0) {
		w->err = -errno;
		bench_err("raw writer: fdatasync %s: %s", w->path, strerror(errno));
	}
	return w->err;
}

void raw_writer_close(struct raw_writer *w)
{
	raw_writer_stream_stop(w);
	if (w->ring_ok)
		io_uring_queue_exit(&w->ring);
	if (w->fd >= 0) {
		close(w->fd);
		unlink(w->path);
	}
	free(w->buf);
	memset(w, 0, sizeof(*w));
	w->fd = -1;
}

/* ---- the write case ---- */

enum { WK_FUSE, WK_FAST, WK_STORE, WK_RAW, WK_COUNT };
static const char *const wk_name[WK_COUNT] = { "fuse", "fast", "store", "raw" };

struct wsample {
	double visible, durable;    /* seconds */
	double daemon_cpu;          /* daemon CPU seconds, until durable (fuse, fast) */
};

/* Through the daemon: W threads, FUSE or fast-path batches. */
static int write_kvfs(struct size_run *s, enum wmethod how, struct wsample *out)
{
	struct page_writers ws;
	double t0;
	int rc;

	double c0 = 0, c1 = 0;

	sync();    /* start from a quiet disk */
	rc = daemon_cpu(s->b, &c0);
	t0 = now_s();
	if (rc == 0)
		rc = writers_start(&ws, s, how, s->b->o->writers, s->pages);
	if (rc == 0)
		rc = writers_join(&ws);
	out->visible = now_s() - t0;
	if (rc == 0)
		rc = writers_sync(&ws);
	out->durable = now_s() - t0;
	if (rc == 0)
		rc = daemon_cpu(s->b, &c1);
	out->daemon_cpu = c1 - c0;
	return rc;
}

static int write_store(struct size_run *s, struct wsample *out)
{
	struct store_mix m;
	double t0;
	int rc = store_mix_open(&m, s, "store-write", false, true);

	sync();
	t0 = now_s();
	if (rc == 0)
		rc = store_mix_write_all(&m);
	out->visible = now_s() - t0;
	if (rc == 0) {
		rc = kv_store_sync(m.st, m.wext, (unsigned)m.nwext);
		if (rc < 0)
			bench_err("store %s: kv_store_sync: %s", m.dir, kv_strerror(rc));
	}
	out->durable = now_s() - t0;
	store_mix_close(&m);
	return rc;
}

static int write_raw(struct size_run *s, struct wsample *out)
{
	struct raw_writer w;
	double t0;
	int rc = raw_writer_open(&w, s, "raw-write", s->pages * s->stride);

	sync();
	t0 = now_s();
	if (rc == 0)
		rc = raw_writer_loop(&w, s->pages);
	out->visible = now_s() - t0;
	if (rc == 0 && fdatasync(w.fd) < 0) {
		rc = -errno;
		bench_err("raw writer: fdatasync %s: %s", w.path, strerror(errno));
	}
	out->durable = now_s() - t0;
	raw_writer_close(&w);
	return rc;
}

static int write_one(struct size_run *s, unsigned k, struct wsample *out)
{
	*out = (struct wsample){ 0 };
	switch (k) {
	case WK_FUSE:
		return write_kvfs(s, W_FUSE, out);
	case WK_FAST:
		return write_kvfs(s, W_FAST, out);
	case WK_STORE:
		return write_store(s, out);
	default:
		return write_raw(s, out);
	}
}

struct wsummary {
	double vis, dur;            /* GB/s, medians */
	double vis_raw, dur_raw;    /* over raw, median of per-run ratios */
	double daemon_s_per_gb;     /* median; 0 for store and raw */
};

static void write_summarize(const struct size_run *s, struct wsample r[WK_COUNT][REPEAT_MAX],
			    unsigned k, struct wsummary *out)
{
	double gb = (double)s->pages * (double)s->size / 1e9, v[REPEAT_MAX], d[REPEAT_MAX];
	unsigned i, n = s->b->o->repeat;

	for (i = 0; i < n; i++) {
		v[i] = gb / r[k][i].visible;
		d[i] = gb / r[k][i].durable;
	}
	out->vis = median(v, n);
	out->dur = median(d, n);
	for (i = 0; i < n; i++)
		v[i] = r[k][i].daemon_cpu / gb;
	out->daemon_s_per_gb = median(v, n);
	for (i = 0; i < n; i++) {
		v[i] = r[WK_RAW][i].visible / r[k][i].visible;
		d[i] = r[WK_RAW][i].durable / r[k][i].durable;
	}
	out->vis_raw = median(v, n);
	out->dur_raw = median(d, n);
}

static void write_json(const struct size_run *s, struct wsample r[WK_COUNT][REPEAT_MAX],
		       unsigned k, const struct wsummary *w)
{
	const struct bench_opts *o = s->b->o;
	unsigned i;

	printf("{\"event\":\"write_case\",\"size\":%llu,\"method\":\"%s\",\"pages\":%lu,"
	       "\"writers\":%u,\"qd\":%u,\"repeats\":%u,\"visible_gbps\":%.4f,"
	       "\"visible_pages_per_s\":%.1f,\"durable_gbps\":%.4f,"
	       "\"durable_pages_per_s\":%.1f,\"visible_over_raw\":%.3f,"
	       "\"durable_over_raw\":%.3f,\"daemon_cpu_s_per_gb\":%.4f,\"runs_visible_secs\":[",
	       (unsigned long long)s->size, wk_name[k], s->pages,
	       k <= WK_FAST ? o->writers : 1, k <= WK_FAST ? 0 : o->qd, o->repeat, w->vis,
	       w->vis * 1e9 / (double)s->size, w->dur, w->dur * 1e9 / (double)s->size,
	       w->vis_raw, w->dur_raw, w->daemon_s_per_gb);
	for (i = 0; i < o->repeat; i++)
		printf("%s%.4f", i ? "," : "", r[k][i].visible);
	printf("],\"runs_durable_secs\":[");
	for (i = 0; i < o->repeat; i++)
		printf("%s%.4f", i ? "," : "", r[k][i].durable);
	printf("]}\n");
}

static void write_report(const struct size_run *s, struct wsample r[WK_COUNT][REPEAT_MAX])
{
	struct wsummary w;
	unsigned k;

	if (!s->b->o->json)
		printf("  write   visible GB/s    pages/s   durable GB/s    pages/s   "
		       "/raw visible  durable  daemon s/GB\n");
	for (k = 0; k < WK_COUNT; k++) {
		write_summarize(s, r, k, &w);
		if (s->b->o->json) {
			write_json(s, r, k, &w);
			continue;
		}
		printf("  %-6s %13.3f %10.0f %14.3f %10.0f", wk_name[k], w.vis,
		       w.vis * 1e9 / (double)s->size, w.dur, w.dur * 1e9 / (double)s->size);
		if (k != WK_RAW)
			printf(" %14.2f %8.2f", w.vis_raw, w.dur_raw);
		if (k <= WK_FAST)
			printf(" %12.3f", w.daemon_s_per_gb);
		printf("\n");
	}
	if (!s->b->o->json)
		printf("  (GB/s: medians; /raw: median of per-run ratios)\n");
}

unsigned write_case_steps(const struct bench_opts *o)
{
	return o->repeat * WK_COUNT;
}

/* Each way R times, a different one first in each run. */
int write_case(struct size_run *s)
{
	const struct bench_opts *o = s->b->o;
	struct wsample r[WK_COUNT][REPEAT_MAX];
	char label[32];
	unsigned i, k;
	int rc = 0;

	size_label(s->size, label, sizeof(label));
	bench_progress_clear();
	if (!o->json) {
		printf("\nwrite %s: %lu new pages (%.1f MiB) per run. fuse: %u thread%s "
		       "(open, write, close); fast: %u thread%s\n(KVFS_IOC_WRITE, %u pages "
		       "per call); durable: fsync of the layer directories. store: the\n"
		       "bench's own store's I/O thread, qd %u, then kv_store_sync. raw: "
		       "io_uring O_DIRECT, qd %u,\ninto a preallocated file, then fdatasync\n",
		       label, s->pages, (double)s->pages * (double)s->size / (1 << 20),
		       o->writers, o->writers > 1 ? "s" : "", o->writers,
		       o->writers > 1 ? "s" : "", fast_write_batch(s), o->qd, o->qd);
		fflush(stdout);
	}
	for (i = 0; rc == 0 && i < o->repeat; i++)
		for (k = 0; rc == 0 && k < WK_COUNT; k++) {
			unsigned w = (i + k) % WK_COUNT;

			bench_step("%s write, %s, run %u/%u", label, wk_name[w], i + 1, o->repeat);
			rc = write_one(s, w, &r[w][i]);
			bench_step_done();
		}
	bench_progress_clear();
	if (rc == 0)
		write_report(s, r);
	fflush(stdout);
	return rc;
}
