/*
 * `kvfs bench`: the conc case's metadata probes. While the engines run,
 * two threads of the bench itself use the mount as a person or a tool
 * would: one stat()s a name the kernel has never seen every STAT_GAP, one
 * lists a LIST_PAGES-page layer every LIST_GAP, each timing every call.
 *
 * They work in a model of their own, PMODEL: layer 00 holds the pages to
 * list, layer 01 gets new stat names before each phase. Both are written
 * through the fast path from a client and region of the bench's own.
 */
#include <dirent.h>

#include "bench.h"

#define PROBE_BATCH 256               /* probe pages per write call */

static struct {
	struct kvfs_client *client;
	struct kvfs_region *region;
	struct kvfs_batch *kb;
	char dir[PATH_MAX + 16];      /* MNT/PMODEL */
	unsigned run;                 /* stat names: 01/p<run>-<k>, k < nstat */
	unsigned long nstat;
	const atomic_bool *stop;
	struct samples *stat, *list;
	struct prober {
		pthread_t th;
		bool started;
		int err;
	} pr[2];
} probes;

/* n 4 KiB pages prefix-<k> (k < n) in layer l, through the fast path, so
 * that the kernel never sees their names (see stat_main). */
static int probe_pages(unsigned l, const char *prefix, unsigned long n)
{
	char *base = kvfs_region_base(probes.region), name[64] = "";
	uint64_t src0 = (kvfs_batch_ctl_bytes(PROBE_BATCH) + BLOCK - 1) / BLOCK * BLOCK;
	struct kvfs_batch_result res;
	unsigned long k, i;
	int rc = 0;

	for (k = 0; rc == 0 && k < n; k += PROBE_BATCH) {
		kvfs_batch_reset(probes.kb);
		for (i = k; rc >= 0 && i < n && i < k + PROBE_BATCH; i++) {
			snprintf(name, sizeof(name), "%s-%06lx", prefix, i);
			memcpy(base + src0 + (i - k) * BLOCK, name, sizeof(name));
			rc = kvfs_batch_add(probes.kb, l, name, src0 + (i - k) * BLOCK, BLOCK);
		}
		if (rc >= 0)
			rc = kvfs_batch_write(probes.kb, 0, &res);
		if (rc >= 0 && (res.done != i - k || res.failed))
			rc = -EPROTO;
		if (rc < 0)
			bench_err("conc: writing probe pages %s-* into %s/%02u: %s", prefix,
				  probes.dir, l, strerror(-rc));
	}
	return rc < 0 ? rc : 0;
}

/* PMODEL, its two layers, and the pages to list. */
int probe_prepare(struct bench *b)
{
	uint64_t size = (kvfs_batch_ctl_bytes(PROBE_BATCH) + BLOCK - 1) / BLOCK * BLOCK +
			(uint64_t)PROBE_BATCH * BLOCK;
	char path[PATH_MAX + 32];
	int rc;

	snprintf(probes.dir, sizeof(probes.dir), "%s/" PMODEL, b->mnt);
	rc = make_dir(probes.dir);
	snprintf(path, sizeof(path), "%s/00", probes.dir);
	if (rc == 0)
		rc = make_dir(path);
	snprintf(path, sizeof(path), "%s/01", probes.dir);
	if (rc == 0)
		rc = make_dir(path);
	if (rc == 0) {
		rc = kvfs_client_open(probes.dir, &probes.client);
		if (rc < 0)
			bench_err("kvfs_client_open %s: %s", probes.dir, strerror(-rc));
	}
	if (rc == 0) {
		rc = kvfs_region_create(probes.client, size, &probes.region);
		if (rc < 0)
			bench_err("conc: kvfs_region_create(%llu bytes): %s",
				  (unsigned long long)size, strerror(-rc));
	}
	if (rc == 0) {
		rc = kvfs_batch_new(probes.region, 0, PROBE_BATCH, &probes.kb);
		if (rc < 0)
			bench_err("conc: kvfs_batch_new: %s", strerror(-rc));
	}
	return rc == 0 ? probe_pages(0, "l", LIST_PAGES) : rc;
}

void probe_finish(void)
{
	if (probes.kb)
		kvfs_batch_free(probes.kb);
	if (probes.region)
		kvfs_region_destroy(probes.region);
	if (probes.client)
		kvfs_client_close(probes.client);
	memset(&probes, 0, sizeof(probes));
}

/* Before a phase of secs: new stat names, enough for one every STAT_GAP;
 * the caches dropped; the two layers looked up again, so that each timed
 * stat is the LOOKUP of the name alone. */
int probe_phase(struct bench *b, double secs)
{
	char prefix[32], path[PATH_MAX + 32];
	struct stat st;
	unsigned l;
	int rc;

	probes.run++;
	probes.nstat = (unsigned long)(secs / STAT_GAP) + 16;
	snprintf(prefix, sizeof(prefix), "p%u", probes.run);
	rc = probe_pages(1, prefix, probes.nstat);
	if (rc < 0)
		return rc;
	drop_caches(b);
	for (l = 0; l < 2; l++) {
		snprintf(path, sizeof(path), "%s/%02u", probes.dir, l);
		if (stat(path, &st) < 0) {
			bench_err("conc: stat %s: %s", path, strerror(errno));
			return -errno;
		}
	}
	return 0;
}

/* ---- the probe threads ---- */

static int sample_add(struct samples *sm, double v)
{
	double *p;

	if (sm->n == sm->cap) {
		p = realloc(sm->v, (sm->cap ? sm->cap * 2 : 256) * sizeof(*p));
		if (!p)
			return -ENOMEM;
		sm->v = p;
		sm->cap = sm->cap ? sm->cap * 2 : 256;
	}
	sm->v[sm->n++] = v;
	return 0;
}

static bool stopped(void)
{
	return atomic_load(probes.stop) || interrupted;
}

/* Record the call that began at t0, then sleep until *next + gap (a slow
 * call is followed by the next at once), or until told to stop. */
static int sample_next(struct samples *sm, double t0, double *next, double gap)
{
	double d;
	int rc = sample_add(sm, now_s() - t0);

	*next += gap;
	while (rc == 0 && !stopped() && (d = *next - now_s()) > 0)
		usleep(d > 0.01 ? 10000 : (useconds_t)(d * 1e6) + 1);
	return rc;
}

/*
 * stat() of a page written through the fast path just before the phase.
 * The kernel learns a name only from a LOOKUP, a create through the mount
 * or a READDIRPLUS; a KVFS_IOC_WRITE is none of these, and nothing else
 * reads layer 01. So each name misses the dcache and its stat is exactly
 * one LOOKUP round trip to the daemon (the reply carries the attributes,
 * cached for entry_timeout: no GETATTR follows). Each name is used once.
 * A name that exists measures what an engine's stat of a page pays, and
 * does not depend on how the daemon answers or caches a miss; dropping
 * caches, the other way to forget names, needs root.
 */
static void *stat_main(void *arg)
{
	struct prober *pr = arg;
	double next = now_s(), t0;
	char path[PATH_MAX + 64];
	struct stat st;
	unsigned long k;

	for (k = 0; k < probes.nstat && !stopped(); k++) {
		snprintf(path, sizeof(path), "%s/01/p%u-%06lx", probes.dir, probes.run, k);
		t0 = now_s();
		if (stat(path, &st) < 0) {
			pr->err = -errno;
			bench_err("conc: stat %s: %s", path, strerror(errno));
			break;
		}
		pr->err = sample_next(probes.stat, t0, &next, STAT_GAP);
		if (pr->err < 0)
			break;
	}
	return NULL;
}

/* What `ls` does: open the layer and read every entry (READDIRPLUS, never
 * cached: the daemon does not set cache_readdir). */
int list_layer(const char *dir, unsigned long *n)
{
	struct dirent *de;
	DIR *d = opendir(dir);

	*n = 0;
	if (!d)
		return -errno;
	errno = 0;
	while ((de = readdir(d)))
		*n += de->d_name[0] != '.';
	closedir(d);
	return errno ? -errno : 0;
}

static void *list_main(void *arg)
{
	struct prober *pr = arg;
	double next = now_s(), t0;
	char dir[PATH_MAX + 32];
	unsigned long n;

	snprintf(dir, sizeof(dir), "%s/00", probes.dir);
	while (!stopped()) {
		t0 = now_s();
		pr->err = list_layer(dir, &n);
		if (pr->err == 0 && n != LIST_PAGES)
			pr->err = -EILSEQ;
		if (pr->err < 0) {
			bench_err("conc: listing %s: %s (%lu entries, want %u)", dir,
				  strerror(-pr->err), n, LIST_PAGES);
			break;
		}
		pr->err = sample_next(probes.list, t0, &next, LIST_GAP);
		if (pr->err < 0)
			break;
	}
	return NULL;
}

/* Both probes, until *stop; seconds per call appended to stat and list. */
int probe_start(const atomic_bool *stop, struct samples *stat, struct samples *list)
{
	void *(*fn[2])(void *) = { stat_main, list_main };
	unsigned i;
	int rc = 0;

	probes.stop = stop;
	probes.stat = stat;
	probes.list = list;
	for (i = 0; rc == 0 && i < 2; i++) {
		probes.pr[i] = (struct prober){ .err = 0 };
		rc = -pthread_create(&probes.pr[i].th, NULL, fn[i], &probes.pr[i]);
		probes.pr[i].started = rc == 0;
		if (rc < 0)
			bench_err("conc: cannot start a probe thread: %s", strerror(-rc));
	}
	return rc;
}

/* Join the probes once *stop is set. One stuck in the mount past the
 * deadline is left behind (detached) rather than waited for forever: the
 * run fails anyway. */
int probe_join(double deadline)
{
	struct prober *pr = probes.pr;
	struct timespec ts;
	double t;
	unsigned i;
	int rc = 0;

	for (i = 0; i < 2; i++) {
		if (!pr[i].started)
			continue;
		pr[i].started = false;
		clock_gettime(CLOCK_REALTIME, &ts);
		t = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9 + (deadline - now_s());
		ts.tv_sec = (time_t)t;
		ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
		if (pthread_timedjoin_np(pr[i].th, NULL, &ts) != 0) {
			bench_err("conc: a metadata probe is stuck in the mount");
			pthread_detach(pr[i].th);
			rc = -ETIMEDOUT;
		} else if (pr[i].err < 0 && rc == 0) {
			rc = pr[i].err;
		}
	}
	return rc;
}

/* p50 and p99 in ms (sorts the samples). */
void samples_pct_ms(struct samples *sm, double *p50, double *p99)
{
	*p50 = sm->n ? percentile(sm->v, sm->n, 0.50) * 1e3 : 0;
	*p99 = sm->n ? percentile(sm->v, sm->n, 0.99) * 1e3 : 0;
}
