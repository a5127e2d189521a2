/*
 * `kvfs bench`: the concurrency case, many engines at once.
 *
 * A server runs several engine processes (ranks), each with several
 * streams that issue fast-path batches on their own. For each size, E
 * engine processes of S threads each (E x S streams) run for T seconds,
 * four ways, R times, in rotating order:
 *
 *   fast-read   each stream loops KVFS_IOC_READ batches of B pages (its own
 *               share of the read case's pages, wrapping around) into a
 *               region of its own, through a client its process opened
 *   raw-read    the same batches with the raw reader (io_uring O_DIRECT on
 *               the same extents), one ring of depth Q per stream: the same
 *               streams and the same total depth, without the daemon
 *   fast-write  each stream loops KVFS_IOC_WRITE batches of new pages (about
 *               4 MiB per call, visible on return) into layer t of WMODEL,
 *               t its thread number; durable after the phase, untimed
 *   raw-write   O_DIRECT writes of the same batches at depth Q per stream,
 *               into a preallocated file of its own on the store's
 *               filesystem
 *
 * Meanwhile two threads of the bench itself probe the mount: one stat()s a
 * name the kernel has never seen every 5 ms, one lists a 1,000-page layer
 * every 100 ms. Their p50/p99 show whether metadata stays responsive
 * whatever the engines do; under the raw phases, where the daemon is idle
 * and only the disk is busy, they are the control.
 *
 * Aggregate GB/s: the bytes of every call issued between go and stop, over
 * the time from go until the last of them returned. A call is never cut in
 * two (a 1024-page batch can take seconds under load); the tail, when
 * fewer streams still run, is alike for both methods.
 */
#include <dirent.h>

#include "bench.h"

const char *const conc_op_name[CO_COUNT] = { "read", "write" };

enum conc_phase { CP_FAST_READ, CP_RAW_READ, CP_FAST_WRITE, CP_RAW_WRITE, CP_COUNT };

static const char *const phase_name[CP_COUNT] = {
	"fast-read", "raw-read", "fast-write", "raw-write",
};

#define CONC_SLOT_BYTES (32u << 20)   /* a read stream's destinations, at most */
#define CONC_LAT_MAX 512              /* call latencies kept per stream and run */
#define READY_SECS 120.0              /* engines' setup, at most */
#define DRAIN_SECS 120.0              /* calls in flight at stop, at most */
#define RAMP_SECS 0.2                 /* from go to the probes, at most */
#define CONC_RUN0 (1u << 16)          /* writer runs: clear of other cases' */

static bool fast_phase(enum conc_phase p)
{
	return p == CP_FAST_READ || p == CP_FAST_WRITE;
}

static bool write_phase(enum conc_phase p)
{
	return p == CP_FAST_WRITE || p == CP_RAW_WRITE;
}

static bool phase_on(const struct bench_opts *o, enum conc_phase p)
{
	return o->conc_ops & 1u << (write_phase(p) ? CO_WRITE : CO_READ);
}

/* What the engines and the bench share: MAP_SHARED, set up before fork. */
struct conc_shm {
	atomic_uint ready, failed;
	atomic_bool go, stop;
	double engine_cpu[ENGINES_MAX];
	struct conc_str {
		uint64_t bytes;
		unsigned long calls;
		double t_end;
		unsigned long ram, bounced;
		unsigned nlat;
		double lat[CONC_LAT_MAX];
	} str[CONC_STREAMS_MAX];
};

struct conc_run {
	double gbps, secs, daemon_cpu, engine_cpu, p50, p99;   /* CPU: s/GB */
	unsigned long calls;
};

struct conc {
	struct size_run *s;
	unsigned streams;           /* E x S */
	unsigned batch;             /* pages per read call */
	unsigned wrun;              /* next writer run */
	struct conc_shm *shm;
	struct conc_run runs[CP_COUNT][REPEAT_MAX];
	struct samples stat[CP_COUNT], list[CP_COUNT];   /* seconds, all runs */
};

/* ---- an engine's stream ---- */

struct stream {
	struct conc *c;
	unsigned e, t, g;           /* engine, thread, stream number */
	enum conc_phase ph;
	pthread_t th;
	struct size_run r;          /* the size's run, with slots of its own */
	unsigned long *pg, pos;     /* the call's pages; next index into order */
	struct page_writers ws;     /* fast-write: w[0] */
	struct raw_writer rw;       /* raw-write */
	unsigned long seq;
	int err;
};

static int stream_setup(struct stream *st)
{
	struct conc *c = st->c;
	const struct size_run *s = c->s;
	char name[64];
	int rc = 0;

	st->r = *s;
	st->r.batch = c->batch;
	st->r.region = NULL;
	st->r.kb = NULL;
	st->r.buf = NULL;
	st->r.own_buf = false;
	memset(&st->r.raw, 0, sizeof(st->r.raw));
	st->pos = (unsigned long)((uint64_t)st->g * s->pages / c->streams);
	switch (st->ph) {
	case CP_FAST_READ:
		return fast_setup(&st->r);
	case CP_RAW_READ:
		/* the extents, found once by the bench (raw_setup), are shared */
		st->r.raw.pages = s->raw.pages;
		st->r.raw.fds = s->raw.fds;
		st->r.raw.nsegs = s->raw.nsegs;
		st->r.raw.got = calloc(c->batch, sizeof(*st->r.raw.got));
		rc = st->r.raw.got ? slots_alloc(&st->r) : -ENOMEM;
		if (rc < 0)
			bench_err("conc: out of memory for a raw stream's %u slots", c->batch);
		return rc < 0 ? rc : raw_ring_setup(&st->r);
	case CP_FAST_WRITE:
		st->ws.s = s;
		st->ws.how = W_FAST;
		st->ws.n = 1;
		st->ws.run = c->wrun + st->e;   /* names unique across engines */
		st->ws.w[0] = (struct page_writer){ .ws = &st->ws, .idx = st->t };
		return writer_setup(&st->ws.w[0], s);
	default:
		snprintf(name, sizeof(name), "conc-raw-%u", st->g);
		return raw_writer_open(&st->rw, s, name,
				       (uint64_t)fast_write_batch(s) * s->stride);
	}
}

static void stream_teardown(struct stream *st)
{
	switch (st->ph) {
	case CP_FAST_READ:
		fast_teardown(&st->r);
		break;
	case CP_RAW_READ:
		if (st->r.raw.ring_ok)
			io_uring_queue_exit(&st->r.raw.ring);
		free(st->r.raw.got);
		slots_free(&st->r);
		break;
	case CP_FAST_WRITE:
		writer_teardown(&st->ws.w[0]);
		break;
	default:
		raw_writer_close(&st->rw);
	}
}

/* One call: a batch read or written; *bytes its payload. */
static int stream_call(struct stream *st, uint64_t *bytes)
{
	const struct size_run *s = st->c->s;
	unsigned i, n = write_phase(st->ph) ? fast_write_batch(s) : st->c->batch;
	int rc;

	*bytes = (uint64_t)n * s->size;
	if (st->ph == CP_FAST_WRITE) {
		rc = fast_write(&st->ws.w[0], st->seq, n);
		st->seq += n;
		return rc;
	}
	if (st->ph == CP_RAW_WRITE)
		return raw_writer_loop(&st->rw, n);
	for (i = 0; i < n; i++)
		st->pg[i] = s->order[(st->pos + i) % s->pages];
	st->pos += n;
	return read_batch(&st->r, st->ph == CP_FAST_READ ? M_FAST : M_RAW, st->pg, n);
}

static void *stream_main(void *arg)
{
	struct stream *st = arg;
	struct conc_shm *shm = st->c->shm;
	struct conc_str *out = &shm->str[st->g];
	uint64_t bytes;
	double t0, d;

	st->pg = calloc(st->c->batch, sizeof(*st->pg));
	st->err = st->pg ? stream_setup(st) : -ENOMEM;
	/* One untimed call maps the region into the daemon, as an engine's
	 * first request would. */
	if (st->err == 0)
		st->err = stream_call(st, &bytes);
	if (st->err < 0) {
		atomic_fetch_add(&shm->failed, 1);
		atomic_store(&shm->stop, true);
	}
	atomic_fetch_add(&shm->ready, 1);
	while (!atomic_load(&shm->go) && !atomic_load(&shm->stop) && !interrupted)
		usleep(500);
	while (st->err == 0 && !atomic_load(&shm->stop) && !interrupted) {
		t0 = now_s();
		st->err = stream_call(st, &bytes);
		if (st->err < 0) {
			atomic_fetch_add(&shm->failed, 1);
			atomic_store(&shm->stop, true);
			break;
		}
		d = now_s() - t0;
		out->bytes += bytes;
		if (out->nlat < CONC_LAT_MAX)
			out->lat[out->nlat++] = d;
		out->calls++;
	}
	out->t_end = now_s();
	out->ram = st->r.ram;
	out->bounced = st->r.bounced;
	stream_teardown(st);
	free(st->pg);
	return NULL;
}

/* An engine process: a client of its own (regions belong to the process
 * that registered them) and S streams. Never returns. */
static void engine_main(struct conc *c, unsigned e, enum conc_phase ph)
{
	struct bench *b = c->s->b;
	unsigned t, n = b->o->streams, started = 0;
	struct conc_shm *shm = c->shm;
	struct stream *st = calloc(n, sizeof(*st));
	struct kvfs_client *cl = NULL;
	double cpu0 = self_cpu();
	int rc = st ? 0 : -ENOMEM;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* The bench's own clients are its own: this process never closes them. */
	if (rc == 0 && fast_phase(ph)) {
		rc = kvfs_client_open(ph == CP_FAST_READ ? b->model : b->wmodel, &cl);
		if (rc < 0)
			bench_err("conc: engine %u: kvfs_client_open: %s", e, strerror(-rc));
		b->client = b->wclient = cl;
	}
	for (t = 0; rc == 0 && t < n; t++) {
		st[t] = (struct stream){ .c = c, .e = e, .t = t, .g = e * n + t, .ph = ph,
					 .rw.fd = -1 };
		rc = -pthread_create(&st[t].th, NULL, stream_main, &st[t]);
		if (rc < 0)
			bench_err("conc: engine %u: thread %u: %s", e, t, strerror(-rc));
		else
			started++;
	}
	if (rc < 0) {   /* the bench waits for every stream to be ready */
		atomic_fetch_add(&shm->failed, 1);
		atomic_fetch_add(&shm->ready, n - started);
		atomic_store(&shm->stop, true);
	}
	while (!atomic_load(&shm->go) && !atomic_load(&shm->stop) && !interrupted)
		usleep(500);
	cpu0 = self_cpu();
	for (t = 0; t < started; t++) {
		pthread_join(st[t].th, NULL);
		rc = rc ? rc : st[t].err;
	}
	shm->engine_cpu[e] = self_cpu() - cpu0;
	if (cl)
		kvfs_client_close(cl);
	_exit(rc < 0 ? 1 : 0);
}

/* ---- a phase ---- */

/* Wait for the engines (pids[e] 0: none, or reaped); SIGKILL what is left
 * at the deadline. By pid: the daemon is a child of ours too. */
static int engines_wait(pid_t *pids, unsigned n, double deadline)
{
	unsigned e, left;
	bool killed = false;
	int st, rc = 0;

	for (;;) {
		for (e = 0, left = 0; e < n; e++) {
			if (pids[e] <= 0)
				continue;
			if (waitpid(pids[e], &st, WNOHANG) != pids[e]) {
				left++;
				continue;
			}
			pids[e] = 0;
			if (!WIFEXITED(st) && !killed)
				bench_err("conc: engine %u killed by signal %d", e, WTERMSIG(st));
			if ((!WIFEXITED(st) || WEXITSTATUS(st)) && rc == 0)
				rc = -EIO;
		}
		if (!left)
			return rc;
		if (now_s() > deadline && !killed) {
			bench_err("conc: %u engine%s still running %.0f s after stop: the "
				  "mount stalled; killing them", left, left > 1 ? "s" : "",
				  DRAIN_SECS);
			for (e = 0; e < n; e++)
				if (pids[e] > 0)
					kill(pids[e], SIGKILL);
			killed = true;
			rc = -ETIMEDOUT;
		}
		usleep(10000);
	}
}

/* Until every stream is set up, an engine died, or READY_SECS. */
static int engines_ready(struct conc *c, pid_t *pids, unsigned n)
{
	double end = now_s() + READY_SECS;
	unsigned e;
	int st;

	while (atomic_load(&c->shm->ready) < c->streams) {
		for (e = 0; e < n; e++)
			if (pids[e] > 0 && waitpid(pids[e], &st, WNOHANG) == pids[e]) {
				pids[e] = 0;
				bench_err("conc: engine %u exited during setup", e);
				return -EIO;
			}
		if (now_s() > end) {
			bench_err("conc: engines not ready after %.0f s", READY_SECS);
			return -ETIMEDOUT;
		}
		if (interrupted)
			return check_interrupt();
		usleep(2000);
	}
	return atomic_load(&c->shm->failed) ? -EIO : 0;
}

static void phase_collect(struct conc *c, double t_go, double d0, double d1,
			  struct conc_run *out)
{
	struct conc_shm *shm = c->shm;
	unsigned g, e, i;
	unsigned long n = 0, ram = 0, bounced = 0;
	double bytes = 0, t_end = t_go, cpu = 0, *lat;

	lat = malloc((size_t)c->streams * CONC_LAT_MAX * sizeof(*lat));
	for (g = 0; g < c->streams; g++) {
		bytes += (double)shm->str[g].bytes;
		out->calls += shm->str[g].calls;
		if (shm->str[g].t_end > t_end)
			t_end = shm->str[g].t_end;
		ram += shm->str[g].ram;
		bounced += shm->str[g].bounced;
		for (i = 0; lat && i < shm->str[g].nlat; i++)
			lat[n++] = shm->str[g].lat[i];
	}
	for (e = 0; e < c->s->b->o->engines; e++)
		cpu += shm->engine_cpu[e];
	out->secs = t_end - t_go;
	out->gbps = bytes / out->secs / 1e9;
	out->daemon_cpu = bytes > 0 ? (d1 - d0) / (bytes / 1e9) : 0;
	out->engine_cpu = bytes > 0 ? cpu / (bytes / 1e9) : 0;
	out->p50 = n ? percentile(lat, n, 0.50) * 1e3 : 0;
	out->p99 = n ? percentile(lat, n, 0.99) * 1e3 : 0;
	free(lat);
	if (ram || bounced)
		bench_err("warning: conc: fast path served %lu page reads from RAM and "
			  "copied %lu through a bounce buffer", ram, bounced);
}

/* fsync of the layers the fast writers wrote: the next phase starts with
 * no write-behind left in the daemon. */
static int writes_sync(const struct conc *c)
{
	struct page_writers ws = { .s = c->s, .n = c->s->b->o->streams };

	return writers_sync(&ws);
}

static int run_phase(struct conc *c, enum conc_phase ph, unsigned r)
{
	const struct bench_opts *o = c->s->b->o;
	pid_t pids[ENGINES_MAX] = { 0 };
	double t_go = 0, d0 = 0, d1 = 0, end;
	unsigned e;
	int rc, rc2;

	rc = probe_phase(c->s->b, o->conc_secs);
	if (rc < 0)
		return rc;
	memset(c->shm, 0, sizeof(*c->shm));
	fflush(stdout);
	fflush(stderr);
	for (e = 0; rc == 0 && e < o->engines; e++) {
		pids[e] = fork();
		if (pids[e] == 0)
			engine_main(c, e, ph);
		if (pids[e] < 0) {
			rc = -errno;
			pids[e] = 0;
			bench_err("conc: fork: %s", strerror(-rc));
		}
	}
	if (rc == 0)
		rc = engines_ready(c, pids, o->engines);
	if (rc == 0)
		rc = daemon_cpu(c->s->b, &d0);
	if (rc < 0)
		atomic_store(&c->shm->stop, true);
	t_go = now_s();
	atomic_store(&c->shm->go, true);
	end = t_go + o->conc_secs;
	/* The probes start once every stream has had time to issue its first
	 * call: they measure the mount under load, not before it. */
	while (rc == 0 && now_s() < t_go + o->conc_secs / 10 && now_s() < t_go + RAMP_SECS)
		usleep(1000);
	if (rc == 0)
		rc = probe_start(&c->shm->stop, &c->stat[ph], &c->list[ph]);
	while (rc == 0 && !atomic_load(&c->shm->stop) && now_s() < end && !interrupted)
		usleep(10000);
	atomic_store(&c->shm->stop, true);
	rc2 = engines_wait(pids, o->engines, now_s() + DRAIN_SECS);
	rc = rc ? rc : rc2;
	rc2 = probe_join(now_s() + DRAIN_SECS);
	rc = rc ? rc : rc2;
	if (rc == 0 && atomic_load(&c->shm->failed))
		rc = -EIO;
	if (rc == 0)
		rc = check_interrupt();
	if (rc == 0)
		rc = daemon_cpu(c->s->b, &d1);
	if (rc == 0)
		phase_collect(c, t_go, d0, d1, &c->runs[ph][r]);
	if (rc == 0 && ph == CP_FAST_WRITE)
		rc = writes_sync(c);
	if (ph == CP_FAST_WRITE)
		c->wrun += o->engines;
	return rc;
}

/* ---- report ---- */

struct conc_row {
	double gbps, daemon_cpu, engine_cpu, p50, p99;
	unsigned long calls;
};

static void conc_row(const struct conc *c, enum conc_phase ph, struct conc_row *row)
{
	unsigned i, n = c->s->b->o->repeat;
	double g[REPEAT_MAX], d[REPEAT_MAX], e[REPEAT_MAX], p[REPEAT_MAX], q[REPEAT_MAX];

	row->calls = 0;
	for (i = 0; i < n; i++) {
		g[i] = c->runs[ph][i].gbps;
		d[i] = c->runs[ph][i].daemon_cpu;
		e[i] = c->runs[ph][i].engine_cpu;
		p[i] = c->runs[ph][i].p50;
		q[i] = c->runs[ph][i].p99;
		row->calls += c->runs[ph][i].calls;
	}
	row->gbps = median(g, n);
	row->daemon_cpu = median(d, n);
	row->engine_cpu = median(e, n);
	row->p50 = median(p, n);
	row->p99 = median(q, n);
}

/* Fast over raw, per run, then the median (one run's phases are adjacent). */
static double conc_ratio(const struct conc *c, enum conc_phase fast, enum conc_phase raw)
{
	unsigned i, n = c->s->b->o->repeat;
	double v[REPEAT_MAX];

	for (i = 0; i < n; i++)
		v[i] = c->runs[fast][i].gbps / c->runs[raw][i].gbps;
	return median(v, n);
}

static void conc_json(struct conc *c, enum conc_phase ph, const struct conc_row *row)
{
	const struct bench_opts *o = c->s->b->o;
	double s50, s99, l50, l99;
	unsigned i;

	samples_pct_ms(&c->stat[ph], &s50, &s99);
	samples_pct_ms(&c->list[ph], &l50, &l99);
	printf("{\"event\":\"conc\",\"size\":%llu,\"phase\":\"%s\",\"op\":\"%s\","
	       "\"method\":\"%s\",\"engines\":%u,\"streams\":%u,\"pages_per_call\":%u,"
	       "\"qd\":%u,\"secs\":%.2f,\"repeats\":%u,\"gbps\":%.4f,\"calls\":%lu,"
	       "\"call_p50_ms\":%.3f,\"call_p99_ms\":%.3f,\"daemon_cpu_s_per_gb\":%.4f,"
	       "\"engine_cpu_s_per_gb\":%.4f,\"stat_p50_ms\":%.3f,\"stat_p99_ms\":%.3f,"
	       "\"stats\":%lu,\"readdir_p50_ms\":%.3f,\"readdir_p99_ms\":%.3f,"
	       "\"readdirs\":%lu,\"readdir_entries\":%u,\"runs_gbps\":[",
	       (unsigned long long)c->s->size, phase_name[ph],
	       write_phase(ph) ? "write" : "read", fast_phase(ph) ? "fast" : "raw",
	       o->engines, o->streams, write_phase(ph) ? fast_write_batch(c->s) : c->batch,
	       o->qd, o->conc_secs, o->repeat, row->gbps, row->calls, row->p50, row->p99,
	       row->daemon_cpu, row->engine_cpu, s50, s99, c->stat[ph].n, l50, l99,
	       c->list[ph].n, LIST_PAGES);
	for (i = 0; i < o->repeat; i++)
		printf("%s%.4f", i ? "," : "", c->runs[ph][i].gbps);
	printf("]}\n");
}

static void conc_report(struct conc *c)
{
	const struct bench_opts *o = c->s->b->o;
	double s50, s99, l50, l99;
	struct conc_row row;
	unsigned p;

	if (!o->json)
		printf("  phase         GB/s  calls  call p50/p99 ms  daemon s/GB  engines s/GB"
		       "  stat p50/p99 ms (n)   ls p50/p99 ms (n)\n");
	for (p = 0; p < CP_COUNT; p++) {
		if (!phase_on(o, p))
			continue;
		conc_row(c, p, &row);
		if (o->json) {
			conc_json(c, p, &row);
			continue;
		}
		samples_pct_ms(&c->stat[p], &s50, &s99);
		samples_pct_ms(&c->list[p], &l50, &l99);
		printf("  %-10s %7.3f %6lu %7.1f/%-7.1f %12.3f %13.3f  %7.2f/%-7.2f (%lu) "
		       "%7.1f/%-7.1f (%lu)\n", phase_name[p], row.gbps, row.calls, row.p50,
		       row.p99, row.daemon_cpu, row.engine_cpu, s50, s99, c->stat[p].n,
		       l50, l99, c->list[p].n);
	}
	if (o->json) {
		printf("{\"event\":\"conc_ratio\",\"size\":%llu", (unsigned long long)c->s->size);
		if (phase_on(o, CP_FAST_READ))
			printf(",\"read_fast_raw\":%.3f", conc_ratio(c, CP_FAST_READ, CP_RAW_READ));
		if (phase_on(o, CP_FAST_WRITE))
			printf(",\"write_fast_raw\":%.3f",
			       conc_ratio(c, CP_FAST_WRITE, CP_RAW_WRITE));
		printf("}\n");
		return;
	}
	printf("  fast/raw:");
	if (phase_on(o, CP_FAST_READ))
		printf(" read %.2f  ", conc_ratio(c, CP_FAST_READ, CP_RAW_READ));
	if (phase_on(o, CP_FAST_WRITE))
		printf(" write %.2f  ", conc_ratio(c, CP_FAST_WRITE, CP_RAW_WRITE));
	printf("(aggregate throughput, median of per-run ratios)\n");
}

/* ---- the case ---- */

unsigned conc_case_steps(const struct bench_opts *o)
{
	unsigned p, n = 0;

	for (p = 0; p < CP_COUNT; p++)
		n += phase_on(o, p);
	return o->repeat * n;
}

/* Pages per read call: the read case's batch, at most CONC_SLOT_BYTES of
 * destinations per stream (E x S of them are mapped at once) and at most
 * the pages there are. */
static unsigned conc_batch(const struct size_run *s)
{
	uint64_t n = s->batch;

	if (n * s->stride > CONC_SLOT_BYTES)
		n = CONC_SLOT_BYTES / s->stride;
	if (n > s->pages)
		n = s->pages;
	return n ? (unsigned)n : 1;
}

static void conc_intro(const struct conc *c)
{
	const struct bench_opts *o = c->s->b->o;
	char label[32];

	size_label(c->s->size, label, sizeof(label));
	printf("\nconc %s: %u engine process%s x %u stream%s for %.1f s per phase, %u run%s;",
	       label, o->engines, o->engines > 1 ? "es" : "", o->streams,
	       o->streams > 1 ? "s" : "", o->conc_secs, o->repeat, o->repeat > 1 ? "s" : "");
	if (o->conc_ops & 1u << CO_READ)
		printf(" reads of %u pages per call", c->batch);
	if (o->conc_ops & 1u << CO_WRITE)
		printf("%s writes of %u new pages per call",
		       o->conc_ops & 1u << CO_READ ? "," : "", fast_write_batch(c->s));
	printf("\n(raw: one ring of qd %u per stream); meanwhile a stat of a name the kernel "
	       "has never seen\nevery %.0f ms and an ls of a %u-page layer every %.0f ms\n",
	       o->qd, STAT_GAP * 1e3, LIST_PAGES, LIST_GAP * 1e3);
}

int conc_case(struct size_run *s)
{
	const struct bench_opts *o = s->b->o;
	struct conc *c = calloc(1, sizeof(*c));
	static unsigned wrun = CONC_RUN0;
	char label[32];
	unsigned r, k, p;
	void *m = MAP_FAILED;
	int rc = 0;

	if (c)
		m = mmap(NULL, sizeof(*c->shm), PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (!c || m == MAP_FAILED) {
		bench_err("conc: out of memory");
		free(c);
		return -ENOMEM;
	}
	c->shm = m;
	c->s = s;
	c->streams = o->engines * o->streams;
	c->batch = conc_batch(s);
	c->wrun = wrun;
	size_label(s->size, label, sizeof(label));
	bench_progress_clear();
	if (!o->json)
		conc_intro(c);
	fflush(stdout);
	for (r = 0; rc == 0 && r < o->repeat; r++)
		for (k = 0; rc == 0 && k < CP_COUNT; k++) {
			p = (r + k) % CP_COUNT;
			if (!phase_on(o, p))
				continue;
			bench_step("%s conc, %s, run %u/%u", label, phase_name[p], r + 1,
				   o->repeat);
			rc = run_phase(c, p, r);
			bench_step_done();
		}
	wrun = c->wrun;
	bench_progress_clear();
	if (rc == 0)
		conc_report(c);
	fflush(stdout);
	if (rc == -ETIMEDOUT)
		return rc;   /* a probe or engine may still be stuck using c: leave it */
	for (p = 0; p < CP_COUNT; p++) {
		free(c->stat[p].v);
		free(c->list[p].v);
	}
	munmap(c->shm, sizeof(*c->shm));
	free(c);
	return rc;
}
