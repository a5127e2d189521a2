/*
 * `kvfs bench`: the mixed case, reads while pages are being written.
 *
 * An engine restores prefixes (batched reads it waits for) while it keeps
 * writing new pages (write-behind nobody waits for). On an SSD the two
 * together lose far more than their sum unless reads go first. For each
 * size, five reader/writer pairs, each read for T seconds alone and for T
 * seconds under its write stream, R times, pairs in rotating order:
 *
 *   fast+fast    fast-path batches over the read case's pages, while M
 *                threads write new pages (another model) in fast-path
 *                batches: an engine restoring while it stores
 *   fast+fuse    the same, the M writers going through the mount
 *   store        a store opened by the bench (bench_store.c): the same
 *                batches with kv_store_read_many, while a thread keeps the
 *                store's I/O thread fed with page writes: the scheduler
 *                alone, without FUSE's CPU cost
 *   store-fifo   the same with the scheduler off (KVFS_SCHED=fifo)
 *   raw+raw      the raw reader on the read case's extents, while a raw
 *                io_uring O_DIRECT writer (qd Q) streams page-sized writes
 *                into a preallocated file: what naive mixing does
 *
 * "kept" is read GB/s under writes over read GB/s alone, per run, median.
 * The write rate during the read phase shows that writes keep their share:
 * pages stored (through the daemon: visible) or written per second, and
 * for the daemon's pairs its own block-layer writes. The daemon's scheduler
 * follows the KVFS_SCHED the bench was started with.
 */
#include "bench.h"

enum pair { PR_FAST, PR_FUSE, PR_STORE, PR_FIFO, PR_RAW, PR_COUNT };

static const char *const pair_name[PR_COUNT] = {
	"fast+fast", "fast+fuse", "store", "store-fifo", "raw+raw",
};

/* Reads and writes go through the daemon. */
static bool via_daemon(enum pair p)
{
	return p == PR_FAST || p == PR_FUSE;
}

struct mix_sample {
	double read_gbps;
	double write_gbps;          /* pages stored (daemon) or written */
	double dev_write_gbps;      /* the daemon's block-layer writes */
};

struct mix {
	struct size_run *s;
	unsigned long pos;          /* next span: phases go on where the last ended */
	struct page_writers pw;
	struct raw_writer rw;
	struct store_mix st[2];     /* read-first, fifo */
	struct mix_sample alone[PR_COUNT][REPEAT_MAX], mixed[PR_COUNT][REPEAT_MAX];
};

/* ---- readers and writers of each pair ---- */

static int pair_batch(struct mix *x, enum pair p, const struct batch_span *sp)
{
	struct size_run *s = x->s;
	const unsigned long *pg = s->order + sp->first;

	switch (p) {
	case PR_FAST:
	case PR_FUSE:
		return read_batch(s, M_FAST, pg, sp->n);
	case PR_RAW:
		return read_batch(s, M_RAW, pg, sp->n);
	default:
		return store_mix_batch(s, &x->st[p == PR_FIFO], pg, sp->n);
	}
}

static int writer_start(struct mix *x, enum pair p)
{
	switch (p) {
	case PR_FAST:
	case PR_FUSE:
		return writers_start(&x->pw, x->s, p == PR_FAST ? W_FAST : W_FUSE,
				     x->s->b->o->mix_writers, 0);
	case PR_RAW:
		return raw_writer_stream_start(&x->rw);
	default:
		return store_mix_stream_start(&x->st[p == PR_FIFO]);
	}
}

/* Bytes the pair's writer has written so far. */
static uint64_t writer_bytes(struct mix *x, enum pair p)
{
	switch (p) {
	case PR_FAST:
	case PR_FUSE:
		return atomic_load(&x->pw.pages) * x->s->size;
	case PR_RAW:
		return atomic_load(&x->rw.bytes);
	default:
		return atomic_load(&x->st[p == PR_FIFO].bytes);
	}
}

/* Stop the stream and let what it left behind drain (through the daemon:
 * until every page is durable), so the next phase starts on a quiet disk. */
static int writer_stop(struct mix *x, enum pair p)
{
	int rc;

	switch (p) {
	case PR_FAST:
	case PR_FUSE:
		atomic_store(&x->pw.stop, true);
		rc = writers_join(&x->pw);
		return rc ? rc : writers_sync(&x->pw);
	case PR_RAW:
		return raw_writer_stream_stop(&x->rw);
	default:
		return store_mix_stream_stop(&x->st[p == PR_FIFO]);
	}
}

/* ---- phases ---- */

/* The pair's batches, cycling over the spans, for at least secs. */
static int read_for(struct mix *x, enum pair p, double secs, double *gbps)
{
	struct size_run *s = x->s;
	double bytes = 0, t0 = now_s(), el;
	const struct batch_span *sp;
	int rc = 0;

	do {
		sp = &s->spans[x->pos++ % s->nspans];
		rc = check_interrupt();
		if (rc == 0)
			rc = pair_batch(x, p, sp);
		bytes += (double)sp->n * (double)s->size;
		el = now_s() - t0;
	} while (rc == 0 && el < secs);
	*gbps = bytes / el / 1e9;
	return rc;
}

/* Let a write stream reach the device before the clock starts. */
static int warm_up(const struct bench_opts *o)
{
	double end = now_s() + (o->mix_secs / 4 < 0.5 ? o->mix_secs / 4 : 0.5);

	while (now_s() < end && !interrupted)
		usleep(10000);
	return check_interrupt();
}

static int phase_mixed(struct mix *x, enum pair p, struct mix_sample *out)
{
	const struct bench_opts *o = x->s->b->o;
	uint64_t w0, w1, d0 = 0, d1 = 0, r;
	double t0, el;
	int rc, rc2;

	rc = writer_start(x, p);
	if (rc < 0)
		return rc;
	rc = warm_up(o);
	if (rc == 0 && via_daemon(p))
		rc = daemon_io(x->s->b, &r, &d0);
	w0 = writer_bytes(x, p);
	t0 = now_s();
	if (rc == 0)
		rc = read_for(x, p, o->mix_secs, &out->read_gbps);
	el = now_s() - t0;
	w1 = writer_bytes(x, p);
	if (rc == 0 && via_daemon(p))
		rc = daemon_io(x->s->b, &r, &d1);
	rc2 = writer_stop(x, p);
	out->write_gbps = (double)(w1 - w0) / el / 1e9;
	out->dev_write_gbps = via_daemon(p) ? (double)(d1 - d0) / el / 1e9 : out->write_gbps;
	return rc ? rc : rc2;
}

/* One pair, alone and mixed (which first alternates between runs). */
static int run_pair(struct mix *x, enum pair p, unsigned r)
{
	const struct bench_opts *o = x->s->b->o;
	int rc;

	if (r % 2)
		rc = phase_mixed(x, p, &x->mixed[p][r]);
	else
		rc = read_for(x, p, o->mix_secs, &x->alone[p][r].read_gbps);
	if (rc < 0)
		return rc;
	if (r % 2)
		return read_for(x, p, o->mix_secs, &x->alone[p][r].read_gbps);
	return phase_mixed(x, p, &x->mixed[p][r]);
}

/* ---- report ---- */

struct mix_row {
	double alone, mixed, kept, write_gbps, dev_gbps;
};

static void mix_row(const struct mix *x, enum pair p, struct mix_row *row)
{
	unsigned i, n = x->s->b->o->repeat;
	double a[REPEAT_MAX], m[REPEAT_MAX], k[REPEAT_MAX], w[REPEAT_MAX], d[REPEAT_MAX];

	for (i = 0; i < n; i++) {
		a[i] = x->alone[p][i].read_gbps;
		m[i] = x->mixed[p][i].read_gbps;
		k[i] = m[i] / a[i];
		w[i] = x->mixed[p][i].write_gbps;
		d[i] = x->mixed[p][i].dev_write_gbps;
	}
	row->alone = median(a, n);
	row->mixed = median(m, n);
	row->kept = median(k, n);
	row->write_gbps = median(w, n);
	row->dev_gbps = median(d, n);
}

static const char *pair_sched(enum pair p)
{
	const char *e = getenv("KVFS_SCHED");

	if (p == PR_RAW)
		return "none";
	if (p == PR_FIFO)
		return "fifo";
	if (p == PR_STORE)
		return "read-first";
	return e && *e ? e : "read-first";
}

static void mix_json(const struct mix *x, enum pair p, const struct mix_row *row)
{
	const struct size_run *s = x->s;
	const struct bench_opts *o = s->b->o;
	unsigned i;

	printf("{\"event\":\"mixed\",\"size\":%llu,\"pair\":\"%s\",\"sched\":\"%s\","
	       "\"writers\":%u,\"qd\":%u,\"secs\":%.2f,\"repeats\":%u,"
	       "\"alone_gbps\":%.4f,\"mixed_gbps\":%.4f,\"kept\":%.3f,"
	       "\"write_gbps\":%.4f,\"write_pages_per_s\":%.1f,\"device_write_gbps\":%.4f,"
	       "\"runs_alone_gbps\":[", (unsigned long long)s->size, pair_name[p],
	       pair_sched(p), via_daemon(p) ? o->mix_writers : 1, o->qd, o->mix_secs,
	       o->repeat, row->alone, row->mixed, row->kept, row->write_gbps,
	       row->write_gbps * 1e9 / (double)s->size, row->dev_gbps);
	for (i = 0; i < o->repeat; i++)
		printf("%s%.4f", i ? "," : "", x->alone[p][i].read_gbps);
	printf("],\"runs_mixed_gbps\":[");
	for (i = 0; i < o->repeat; i++)
		printf("%s%.4f", i ? "," : "", x->mixed[p][i].read_gbps);
	printf("]}\n");
}

static void mix_report(const struct mix *x)
{
	const struct size_run *s = x->s;
	struct mix_row row;
	unsigned p;

	if (!s->b->o->json)
		printf("  reads+writes  sched        alone GB/s  mixed GB/s   kept  "
		       "writes GB/s  pages/s  daemon disk GB/s\n");
	for (p = 0; p < PR_COUNT; p++) {
		mix_row(x, p, &row);
		if (s->b->o->json) {
			mix_json(x, p, &row);
			continue;
		}
		printf("  %-12s  %-11s %11.3f %11.3f %6.2f %12.3f %8.0f", pair_name[p],
		       pair_sched(p), row.alone, row.mixed, row.kept, row.write_gbps,
		       row.write_gbps * 1e9 / (double)s->size);
		if (via_daemon(p))
			printf(" %12.3f", row.dev_gbps);
		printf("\n");
	}
	if (!s->b->o->json)
		printf("  (kept: mixed/alone, median of per-run ratios)\n");
}

/* ---- the case ---- */

static int mix_setup(struct mix *x)
{
	struct size_run *s = x->s;
	uint64_t file = s->pages * s->stride;
	int rc;

	/* The raw writer's file: as large as the pages read, at most 1 GiB. */
	rc = raw_writer_open(&x->rw, s, "raw-mixed", file < (1ull << 30) ? file : 1ull << 30);
	if (rc == 0)
		rc = store_mix_open(&x->st[0], s, "store-first", false, false);
	if (rc == 0)
		rc = store_mix_open(&x->st[1], s, "store-fifo", true, false);
	return rc;
}

unsigned mixed_case_steps(const struct bench_opts *o)
{
	return o->repeat * PR_COUNT;
}

int mixed_case(struct size_run *s)
{
	const struct bench_opts *o = s->b->o;
	struct mix *x = calloc(1, sizeof(*x));
	char label[32];
	unsigned r, k;
	int rc;

	if (!x)
		return -ENOMEM;
	x->s = s;
	x->rw.fd = -1;
	size_label(s->size, label, sizeof(label));
	bench_progress_clear();
	if (!o->json) {
		printf("\nmixed %s: reads of %lu pages for %.1f s alone and under writes "
		       "of new %s pages: fast+fast:\n%u fast-path writer%s (%u pages per "
		       "call); fast+fuse: %u FUSE writer%s; store: the bench's own store,\n"
		       "writes fed to its I/O thread; raw: io_uring O_DIRECT writer, qd %u, "
		       "into a preallocated file\n", label, s->pages, o->mix_secs, label,
		       o->mix_writers, o->mix_writers > 1 ? "s" : "", fast_write_batch(s),
		       o->mix_writers,
		       o->mix_writers > 1 ? "s" : "", o->qd);
		fflush(stdout);
	}
	rc = mix_setup(x);
	for (r = 0; rc == 0 && r < o->repeat; r++)
		for (k = 0; rc == 0 && k < PR_COUNT; k++) {
			bench_step("%s mixed, %s, run %u/%u", label,
				   pair_name[(r + k) % PR_COUNT], r + 1, o->repeat);
			rc = run_pair(x, (enum pair)((r + k) % PR_COUNT), r);
			bench_step_done();
		}
	bench_progress_clear();
	if (rc == 0)
		mix_report(x);
	store_mix_close(&x->st[1]);
	store_mix_close(&x->st[0]);
	raw_writer_close(&x->rw);
	free(x);
	fflush(stdout);
	return rc;
}
