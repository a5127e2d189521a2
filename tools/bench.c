/*
 * `kvfs bench`: cold reads of KV pages four ways, on one disk, in one run.
 *
 * The command builds everything it measures: a fresh store in DIR/store,
 * its own daemon (`kvfs mount -f`, a child, so its CPU time can be read from
 * /proc), a model "bench" with L layer directories, and for each page size
 * N pages written through the mount plus the same pages as plain files in
 * DIR/files (one file per page, as LMCache's local-disk backend keeps
 * them). Once every size is written and the disk has been left alone for a
 * few seconds, it reads every page back, with the page cache dropped before
 * each pass, in per-layer batches of B pages shuffled within each batch,
 * into the same pre-touched memory for every method:
 *
 *   fast   one KVFS_IOC_READ per batch through libkvfs, into a shared region
 *   fuse   open/read/close of each page through the mount
 *   raw    io_uring O_DIRECT reads of the very same extents from the segment
 *          files (found through the user.kvfs.extent/segment xattrs), qd Q:
 *          what the device gives, the ceiling for the fast path
 *   files  open/read/close of each plain file, buffered
 *
 * The methods run interleaved, R times; the report gives medians, batch
 * latency percentiles over all runs, CPU seconds per GB read (the daemon's,
 * from /proc/PID/stat, and the reader's own, from getrusage) and the fast
 * path's throughput relative to the other three. Every page is checked: a
 * stamp in each 4 KiB block names the page, so a misplaced or stale block
 * stops the run with an error, as does any failed status.
 *
 * Functions return 0 or -errno. The one that detects a failure prints it
 * with its context; callers only pass the code up.
 */
#include "bench.h"

const char *const method_name[M_COUNT] = { "fast", "fuse", "raw", "files" };
const char *const case_name[C_COUNT] = { "read", "write", "mixed", "conc", "meta" };

volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

void bench_err(const char *fmt, ...)
{
	va_list ap;

	bench_progress_clear();   /* keeps the report and the error in order */
	fputs("kvfs bench: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int check_interrupt(void)
{
	if (!interrupted)
		return 0;
	bench_err("interrupted");
	return -EINTR;
}

uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

void size_label(uint64_t size, char *out, size_t len)
{
	if (size >= (1u << 20) && size % (1u << 20) == 0)
		snprintf(out, len, "%lluM", (unsigned long long)(size >> 20));
	else if (size % 1024 == 0)
		snprintf(out, len, "%lluK", (unsigned long long)(size >> 10));
	else
		snprintf(out, len, "%llu", (unsigned long long)size);
}

/* ---- pages: names, places, stamps ---- */

unsigned page_layer(const struct size_run *s, unsigned long p)
{
	return (unsigned)(p % s->b->o->layers);
}

void page_name(const struct size_run *s, unsigned long p, char *out, size_t len)
{
	snprintf(out, len, "%llu-%06lx", (unsigned long long)s->size, p);
}

void page_path(const struct size_run *s, const char *root, unsigned long p,
		      char *out, size_t len)
{
	char name[64];

	page_name(s, p, name, sizeof(name));
	snprintf(out, len, "%s/%02u/%s", root, page_layer(s, p), name);
}

/* Each 4 KiB block starts with the page's identity and the block's offset,
 * so a block from another page, another offset or another size shows. */
void stamp_page(char *page, uint64_t size, unsigned long p)
{
	uint64_t off, w[2];

	for (off = 0; off < size; off += BLOCK) {
		w[0] = size << 32 | p;
		w[1] = STAMP_MAGIC ^ off;
		memcpy(page + off, w, sizeof(w));
	}
}

int check_page(const struct size_run *s, const char *method, const char *page,
		      unsigned long p)
{
	uint64_t off, w[2];
	char name[64];

	for (off = 0; off < s->size; off += BLOCK) {
		memcpy(w, page + off, sizeof(w));
		if (w[0] != (s->size << 32 | p) || w[1] != (STAMP_MAGIC ^ off))
			break;
	}
	if (off >= s->size)
		return 0;
	page_name(s, p, name, sizeof(name));
	bench_err("%s: layer %u page %s: wrong bytes at offset %llu (stamp %016llx %016llx)",
		  method, page_layer(s, p), name, (unsigned long long)off,
		  (unsigned long long)w[0], (unsigned long long)w[1]);
	return -EILSEQ;
}

/* ---- writing the pages ---- */

static int write_page(const struct size_run *s, const char *root, unsigned long p)
{
	char path[PATH_MAX + 96];
	int fd, rc;

	page_path(s, root, p, path, sizeof(path));
	stamp_page(s->data, s->size, p);
	fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
	if (fd < 0) {
		bench_err("create %s: %s", path, strerror(errno));
		return -errno;
	}
	rc = write_full(fd, s->data, s->size);
	/* kvfs seals the page on close, and reports a failed seal there */
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc < 0)
		bench_err("write %s: %s", path, strerror(-rc));
	return rc;
}

/* fsync of a kvfs layer directory waits for the group commit of the pages
 * in it; a plain filesystem needs syncfs for the file data first. */
static int sync_layers(const struct bench *b, const char *root, bool plain)
{
	char path[PATH_MAX + 16];
	unsigned l;
	int fd, rc = 0;

	for (l = 0; rc == 0 && l < b->o->layers; l++) {
		snprintf(path, sizeof(path), "%s/%02u", root, l);
		fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			rc = -errno;
		else if ((plain && l == 0 && syncfs(fd) < 0) || fsync(fd) < 0)
			rc = -errno;
		if (fd >= 0)
			close(fd);
		if (rc < 0)
			bench_err("sync %s: %s", path, strerror(-rc));
	}
	return rc;
}

static void report_write(const struct size_run *s, const char *target, double secs)
{
	double bytes = (double)s->pages * (double)s->size;
	char label[32];

	size_label(s->size, label, sizeof(label));
	bench_progress_clear();
	if (s->b->o->json)
		printf("{\"event\":\"write\",\"size\":%llu,\"target\":\"%s\",\"pages\":%lu,"
		       "\"secs\":%.4f,\"gbps\":%.4f,\"pages_per_s\":%.1f}\n",
		       (unsigned long long)s->size, target, s->pages, secs,
		       bytes / secs / 1e9, (double)s->pages / secs);
	else
		printf("  %-5s %-6s %8lu %8.3f %10.0f %8.2f\n", label, target, s->pages,
		       bytes / secs / 1e9, (double)s->pages / secs, secs);
	fflush(stdout);
}

static int write_all(struct size_run *s, const char *root, bool plain, const char *target)
{
	double t0 = now_s();
	unsigned long p;
	char label[32];
	int rc = 0;

	size_label(s->size, label, sizeof(label));
	bench_step("%s pages, writing to %s", label, target);
	for (p = 0; rc == 0 && p < s->pages; p++) {
		rc = check_interrupt();
		if (rc == 0)
			rc = write_page(s, root, p);
	}
	if (rc == 0)
		rc = sync_layers(s->b, root, plain);
	if (rc == 0)
		report_write(s, target, now_s() - t0);
	bench_step_done();
	return rc;
}

/* ---- batches ---- */

/* Pages of layer 0, then layer 1, ..., in chunks of B: the batches an
 * engine loading a prefix layer by layer would issue. */
static int make_spans(struct size_run *s)
{
	unsigned layers = s->b->o->layers, l;
	unsigned long per_layer, i, k = 0, p;

	per_layer = (s->pages + layers - 1) / layers;
	s->nspans = layers * ((per_layer + s->batch - 1) / s->batch);
	s->spans = calloc(s->nspans, sizeof(*s->spans));
	s->order = malloc(s->pages * sizeof(*s->order));
	if (!s->spans || !s->order)
		return -ENOMEM;
	s->nspans = 0;
	for (l = 0; l < layers; l++) {
		for (i = 0, p = l; p < s->pages; i++, p += layers) {
			if (i % s->batch == 0)
				s->spans[s->nspans++].first = k;
			s->spans[s->nspans - 1].n++;
			s->order[k++] = p;
		}
	}
	return 0;
}

static void shuffle_spans(struct size_run *s, uint64_t *seed)
{
	unsigned long k, i, j, t, *v;

	for (k = 0; k < s->nspans; k++) {
		v = s->order + s->spans[k].first;
		for (i = s->spans[k].n - 1; i > 0; i--) {
			j = xorshift(seed) % (i + 1);
			t = v[i]; v[i] = v[j]; v[j] = t;
		}
	}
}

/* ---- measuring ---- */

int read_batch(struct size_run *s, enum method m, const unsigned long *pg, unsigned n)
{
	switch (m) {
	case M_FAST:
		return fast_batch(s, pg, n);
	case M_FUSE:
		return file_batch(s, "fuse", s->b->model, pg, n);
	case M_RAW:
		return raw_batch(s, pg, n);
	default:
		return file_batch(s, "files", s->b->files, pg, n);
	}
}

/* Read every page once with method m, cold, batch by batch. */
static int run_method(struct size_run *s, enum method m, struct sample *out)
{
	double t0, tb, d0, d1, c0;
	unsigned long k;
	int rc;

	drop_caches(s->b);
	rc = daemon_cpu(s->b, &d0);
	if (rc < 0)
		return rc;
	c0 = self_cpu();
	t0 = now_s();
	for (k = 0; k < s->nspans; k++) {
		rc = check_interrupt();
		tb = now_s();
		if (rc == 0)
			rc = read_batch(s, m, s->order + s->spans[k].first, s->spans[k].n);
		if (rc < 0)
			return rc;
		s->lat[m][s->nlat[m]++] = now_s() - tb;
	}
	out->secs = now_s() - t0;
	out->reader_cpu = self_cpu() - c0;
	rc = daemon_cpu(s->b, &d1);
	out->daemon_cpu = d1 - d0;
	return rc;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Nearest-rank percentile; sorts v. */
double percentile(double *v, unsigned long n, double q)
{
	unsigned long k;

	qsort(v, n, sizeof(*v), cmp_double);
	k = (unsigned long)(q * (double)n);
	if ((double)k < q * (double)n)
		k++;
	return v[k ? k - 1 : 0];
}

double median(double *v, unsigned n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct summary {
	double gbps, pps, p50, p99, dcpu, rcpu;   /* CPU: seconds per GB */
};

static void summarize(struct size_run *s, enum method m, struct summary *out)
{
	unsigned r, nr = s->b->o->repeat;
	double gb = (double)s->pages * (double)s->size / 1e9;
	double g[REPEAT_MAX], d[REPEAT_MAX], c[REPEAT_MAX];

	for (r = 0; r < nr; r++) {
		g[r] = gb / s->runs[m][r].secs;
		d[r] = s->runs[m][r].daemon_cpu / gb;
		c[r] = s->runs[m][r].reader_cpu / gb;
	}
	out->gbps = median(g, nr);
	out->pps = out->gbps * 1e9 / (double)s->size;
	out->dcpu = median(d, nr);
	out->rcpu = median(c, nr);
	out->p50 = percentile(s->lat[m], s->nlat[m], 0.50) * 1e3;
	out->p99 = percentile(s->lat[m], s->nlat[m], 0.99) * 1e3;
}

/* Fast path throughput over method m's, per run, then the median: the
 * methods of one run saw the same machine state. */
static double ratio(const struct size_run *s, enum method m)
{
	unsigned r, nr = s->b->o->repeat;
	double v[REPEAT_MAX];

	for (r = 0; r < nr; r++)
		v[r] = s->runs[m][r].secs / s->runs[M_FAST][r].secs;
	return median(v, nr);
}

static void report_reads(struct size_run *s)
{
	const struct bench_opts *o = s->b->o;
	static const enum method vs[] = { M_RAW, M_FILES, M_FUSE };
	struct summary sm;
	char label[32];
	unsigned m, r;

	size_label(s->size, label, sizeof(label));
	bench_progress_clear();
	if (!o->json)
		printf("  read   %8s %10s %9s %9s %12s %12s\n", "GB/s", "pages/s",
		       "p50 ms", "p99 ms", "daemon s/GB", "reader s/GB");
	for (m = 0; m < M_COUNT; m++) {
		if (!(o->methods & 1u << m))
			continue;
		summarize(s, m, &sm);
		if (!o->json) {
			printf("  %-6s %8.3f %10.0f %9.2f %9.2f %12.3f %12.3f\n",
			       method_name[m], sm.gbps, sm.pps, sm.p50, sm.p99, sm.dcpu, sm.rcpu);
			continue;
		}
		printf("{\"event\":\"read\",\"size\":%llu,\"method\":\"%s\",\"pages\":%lu,"
		       "\"layers\":%u,\"batch\":%u,\"batches\":%lu,\"qd\":%u,\"repeats\":%u,"
		       "\"cold\":%s,\"gbps\":%.4f,\"pages_per_s\":%.1f,\"batch_p50_ms\":%.3f,"
		       "\"batch_p99_ms\":%.3f,\"daemon_cpu_s_per_gb\":%.4f,"
		       "\"reader_cpu_s_per_gb\":%.4f,\"runs_secs\":[",
		       (unsigned long long)s->size, method_name[m], s->pages, o->layers,
		       s->batch, s->nspans, o->qd, o->repeat, s->b->cold ? "true" : "false",
		       sm.gbps, sm.pps, sm.p50, sm.p99, sm.dcpu, sm.rcpu);
		for (r = 0; r < o->repeat; r++)
			printf("%s%.4f", r ? "," : "", s->runs[m][r].secs);
		printf("]");
		if (m == M_FAST)
			printf(",\"ram_pages\":%lu,\"bounced_pages\":%lu", s->ram, s->bounced);
		if (m == M_RAW)
			printf(",\"fixed_buffers\":%s,\"fixed_files\":%s",
			       s->raw.fixed_buf ? "true" : "false",
			       s->raw.fixed_files ? "true" : "false");
		printf("}\n");
	}
	if (o->methods & 1u << M_FAST) {
		if (o->json) {
			printf("{\"event\":\"ratio\",\"size\":%llu", (unsigned long long)s->size);
			for (m = 0; m < sizeof(vs) / sizeof(vs[0]); m++)
				if (o->methods & 1u << vs[m])
					printf(",\"fast_%s\":%.3f", method_name[vs[m]],
					       ratio(s, vs[m]));
			printf("}\n");
		} else {
			printf("  ");
			for (m = 0; m < sizeof(vs) / sizeof(vs[0]); m++)
				if (o->methods & 1u << vs[m])
					printf("fast/%s %.2f   ", method_name[vs[m]],
					       ratio(s, vs[m]));
			printf("(throughput, median of per-run ratios)\n");
		}
	}
	if (s->ram || s->bounced)
		bench_err("warning: %s: fast path served %lu page reads from RAM and "
			  "copied %lu through a bounce buffer", label, s->ram, s->bounced);
	fflush(stdout);
}

/* ---- one page size ---- */

/*
 * Where the other methods put the pages: the fast path's own destination
 * slots when it runs, else shared memory of the same kind. On this kind of
 * VM the speed of O_DIRECT reads into a buffer depends on the buffer: two
 * buffers allocated alike differed by 1.3-1.6x, steadily over every run,
 * and which one was faster changed between invocations (how the host backs
 * the guest's memory, presumably). One set of pages for all methods keeps
 * that out of the comparison.
 */
int slots_alloc(struct size_run *s)
{
	int fd;
	void *p = MAP_FAILED;

	s->buflen = (size_t)s->batch * s->stride;
	if (s->region) {
		s->buf = s->rbase + s->dst0;
		return 0;
	}
	fd = memfd_create("kvfs-bench", MFD_CLOEXEC);
	if (fd >= 0 && ftruncate(fd, (off_t)s->buflen) == 0)
		p = mmap(NULL, s->buflen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (fd >= 0)
		close(fd);
	if (p == MAP_FAILED)
		return -ENOMEM;
	s->buf = p;
	s->own_buf = true;
	memset(s->buf, 0, s->buflen);   /* pre-touched, as the region is */
	return 0;
}

void slots_free(struct size_run *s)
{
	if (s->own_buf)
		munmap(s->buf, s->buflen);
	s->buf = NULL;
	s->own_buf = false;
}

static int size_setup(struct size_run *s)
{
	const struct bench_opts *o = s->b->o;
	uint64_t seed = 0x9E3779B97F4A7C15ull ^ s->size, i;
	unsigned m;

	s->stride = (s->size + BLOCK - 1) / BLOCK * BLOCK;
	s->pages = o->pages ? o->pages : (unsigned long)(o->bytes / s->size);
	if (s->pages < o->layers)
		s->pages = o->layers;
	s->batch = o->batch ? o->batch
			    : (unsigned)((s->pages + o->layers - 1) / o->layers);
	if (s->batch > KVFS_BATCH_MAX)
		s->batch = KVFS_BATCH_MAX;
	s->data = malloc(s->size);
	if (!s->data)
		return -ENOMEM;
	for (i = 0; i + 8 <= s->size; i += 8) {
		uint64_t v = xorshift(&seed);

		memcpy(s->data + i, &v, 8);
	}
	if (make_spans(s) < 0)
		return -ENOMEM;
	for (m = 0; m < M_COUNT; m++) {
		s->lat[m] = calloc(s->nspans * o->repeat, sizeof(double));
		if (!s->lat[m])
			return -ENOMEM;
	}
	return 0;
}

static void size_teardown(struct size_run *s)
{
	unsigned m;

	for (m = 0; m < M_COUNT; m++)
		free(s->lat[m]);
	free(s->order);
	free(s->spans);
	free(s->data);
}

/* Write one size's pages through the mount and, for the files method, as
 * plain files; both durable before the clock stops. */
static int size_write(struct size_run *s)
{
	int rc = write_all(s, s->b->model, false, "kvfs");

	if (rc == 0 && s->b->o->methods & 1u << M_FILES)
		rc = write_all(s, s->b->files, true, "files");
	return rc;
}

/* Does the run read with method m? The read case uses --methods; the mixed
 * and conc cases read with the fast path and the raw reader. */
static bool reads_with(const struct bench_opts *o, enum method m)
{
	return (o->cases & 1u << C_READ && o->methods & 1u << m) ||
	       (o->cases & (1u << C_MIXED | 1u << C_CONC) && (m == M_FAST || m == M_RAW));
}

/* The read case: every method, interleaved, R times; then the report. */
static int read_case(struct size_run *s, uint64_t *seed)
{
	const struct bench_opts *o = s->b->o;
	char label[32];
	unsigned r, k, m;
	int rc = 0;

	size_label(s->size, label, sizeof(label));
	bench_progress_clear();
	if (!o->json)
		printf("\n%s pages: %lu (%.1f MiB) in %u layers, batches of up to %u pages\n",
		       label, s->pages, (double)s->pages * (double)s->size / (1 << 20),
		       o->layers, s->batch);
	for (r = 0; rc == 0 && r < o->repeat; r++) {
		shuffle_spans(s, seed);
		/* A different method goes first in each run, so none always
		 * follows the same one. */
		for (k = 0; rc == 0 && k < M_COUNT; k++) {
			m = (r + k) % M_COUNT;
			if (!(o->methods & 1u << m))
				continue;
			bench_step("%s read, %s, run %u/%u", label, method_name[m], r + 1,
				   o->repeat);
			rc = run_method(s, m, &s->runs[m][r]);
			bench_step_done();
		}
	}
	if (rc == 0)
		report_reads(s);
	return rc;
}

/* Read one size's pages back: the read case, the mixed case, then the
 * conc case, with the readers set up once for all. */
static int size_read(struct size_run *s)
{
	const struct bench_opts *o = s->b->o;
	uint64_t seed = 42 + s->size;
	int rc = 0;

	if (reads_with(o, M_FAST)) {
		rc = fast_setup(s);
		/* One untimed batch maps the region into the daemon's page
		 * tables, as an engine's first request would. */
		if (rc == 0)
			rc = fast_batch(s, s->order + s->spans[0].first, s->spans[0].n);
	}
	if (rc == 0) {
		rc = slots_alloc(s);
		if (rc < 0)
			bench_err("out of memory for %u slots of %llu bytes", s->batch,
				  (unsigned long long)s->stride);
	}
	if (rc == 0 && reads_with(o, M_RAW))
		rc = raw_setup(s);
	if (rc == 0 && o->cases & 1u << C_READ)
		rc = read_case(s, &seed);
	else
		shuffle_spans(s, &seed);
	if (rc == 0 && o->cases & 1u << C_MIXED)
		rc = mixed_case(s);
	if (rc == 0 && o->cases & 1u << C_CONC)
		rc = conc_case(s);
	raw_teardown(s);   /* unregisters the slots before the region goes */
	slots_free(s);
	fast_teardown(s);
	return rc;
}

/* Every size is written before any is read (the write case too, which
 * writes pages of its own), then the disk is left alone for a while: on
 * this kind of VM, pages read within seconds of being written came back up
 * to ~1.5x faster than the same pages later (the host still holds them),
 * which would favour whichever method reads first. */
static int bench_sizes(struct bench *b)
{
	const struct bench_opts *o = b->o;
	struct size_run *runs[SIZES_MAX] = { NULL };
	unsigned i, n = o->nsizes;
	bool reads = o->cases & (1u << C_READ | 1u << C_MIXED | 1u << C_CONC);
	int rc = 0;

	if (!o->json && reads)
		printf("\nwrites (open, write, close; then fsync of the layer directories)\n"
		       "  size  to        pages     GB/s    pages/s     secs\n");
	for (i = 0; rc == 0 && i < n; i++) {
		runs[i] = calloc(1, sizeof(*runs[i]));
		if (!runs[i]) {
			rc = -ENOMEM;
			break;
		}
		runs[i]->b = b;
		runs[i]->size = o->sizes[i];
		rc = size_setup(runs[i]);
		if (rc == -ENOMEM)
			bench_err("out of memory for %llu-byte pages",
				  (unsigned long long)o->sizes[i]);
		if (rc == 0 && reads)
			rc = size_write(runs[i]);
	}
	for (i = 0; rc == 0 && o->cases & 1u << C_WRITE && i < n; i++)
		rc = write_case(runs[i]);
	if (rc == 0 && reads && o->settle) {
		bench_progress_clear();
		if (!o->json)
			printf("(waiting %u s before reading: pages read right after being "
			       "written come back faster on this kind of VM)\n", o->settle);
		fflush(stdout);
		bench_step("waiting %u s before reading", o->settle);
		for (i = 0; rc == 0 && i < o->settle * 10; i++) {
			rc = check_interrupt();
			usleep(100000);
		}
	}
	for (i = 0; rc == 0 && reads && i < n; i++)
		rc = size_read(runs[i]);
	for (i = 0; i < n; i++) {
		if (runs[i])
			size_teardown(runs[i]);
		free(runs[i]);
	}
	return rc;
}

/* ---- the whole run ---- */

static int bench_run(struct bench *b)
{
	int rc2, rc = setup_dirs(b);

	if (access("/proc/sys/vm/drop_caches", W_OK) < 0) {
		bench_err("warning: cannot drop caches (need root): reads are warm");
		b->cold = false;
	}
	if (rc == 0)
		rc = run_mkfs(b);
	if (rc == 0)
		rc = start_daemon(b);
	if (rc == 0)
		rc = make_layers(b);
	if (rc == 0 && b->o->cases & (1u << C_WRITE | 1u << C_MIXED | 1u << C_CONC)) {
		rc = make_write_layers(b);
		if (rc == 0) {
			rc = kvfs_client_open(b->wmodel, &b->wclient);
			if (rc < 0)
				bench_err("kvfs_client_open %s: %s", b->wmodel, strerror(-rc));
		}
	}
	if (rc == 0 && reads_with(b->o, M_FAST)) {
		rc = kvfs_client_open(b->model, &b->client);
		if (rc < 0)
			bench_err("kvfs_client_open %s: %s", b->model, strerror(-rc));
	}
	if (rc == 0 && b->o->cases & 1u << C_CONC)
		rc = probe_prepare(b);
	if (rc == 0) {
		print_header(b);
		fflush(stdout);
		bench_progress_start(b->o);
	}
	if (rc == 0 && b->o->cases & ~(1u << C_META))
		rc = bench_sizes(b);
	probe_finish();
	if (b->client)
		kvfs_client_close(b->client);
	if (b->wclient)
		kvfs_client_close(b->wclient);
	b->client = NULL;
	b->wclient = NULL;
	/* last: it remounts, which no open client may hold up */
	if (rc == 0 && b->o->cases & 1u << C_META)
		rc = meta_case(b);
	bench_progress_end(rc == 0);
	if (b->daemon) {
		rc2 = stop_daemon(b);
		rc = rc ? rc : rc2;
	}
	rc2 = log_errors(b);
	rc = rc ? rc : rc2;
	if (rc == 0 && !b->o->json)
		printf("\n");
	cleanup_dirs(b);
	return rc;
}

int kvfs_cmd_bench(int argc, char **argv)
{
	struct bench_opts o = {
		.sizes = { 16 << 10, 64 << 10, 256 << 10, 1 << 20 }, .nsizes = 4,
		.bytes = 512ull << 20, .layers = 32, .qd = 64, .repeat = 3, .settle = 10,
		.methods = (1u << M_COUNT) - 1,
		.cases = 1u << C_READ | 1u << C_WRITE | 1u << C_MIXED,
		.writers = 4, .mix_writers = 1, .mix_secs = 2,
		.engines = 4, .streams = 2, .conc_secs = 3, .conc_ops = (1u << CO_COUNT) - 1,
		.meta_pages = 1000000, .meta_size = 4096, .meta_layer_pages = 100000,
		.meta_threads = 4, .meta_batch = 65536,
		.meta_name_digits = 16,
	};
	struct bench b = { .o = &o, .cold = true };
	struct sigaction sa = { .sa_handler = on_signal };
	int rc = parse_opts(argc, argv, &o);

	if (rc != 0) {
		fputs(bench_usage, rc > 0 ? stdout : stderr);
		return rc > 0 ? 0 : 2;
	}
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGPIPE, &sa, NULL);   /* `| head`: stop, but clean up first */
	rc = bench_run(&b);
	return rc < 0 ? 1 : 0;
}
