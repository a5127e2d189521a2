/*
 * `kvfs stat MOUNT [--json]`: what a mounted kvfs is doing, from the
 * daemon's own control files. The summary is read from MOUNT/.kvfs/metrics
 * (Prometheus text: one "name{labels} value" per line, simple to parse);
 * --json prints MOUNT/.kvfs/stats as it is. Names: docs/metrics.md.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>

#include "tools.h"

#define FUSE_SUPER_MAGIC 0x65735546
#define LAT_BUCKET "kvfs_fastpath_latency_seconds_bucket{op=\""
#define MAX_BUCKETS 64

static const char stat_usage[] =
	"usage: kvfs stat MOUNT [--json]\n"
	"  a summary of the tiers, capacity, evictions, dedup, write-back and\n"
	"  latency of a mounted kvfs; --json prints MOUNT/.kvfs/stats as it is\n"
	"  (every name: docs/metrics.md)\n";

struct sample {
	char *key;         /* "name" or "name{labels}", as in the file */
	double v;
};

struct hist {
	const char *op;
	double le[MAX_BUCKETS];
	double cum[MAX_BUCKETS];
	unsigned n;
};

struct metrics {
	struct sample *s;
	size_t n, cap;
	struct hist lat[4];
};

/* ---- reading ---- */

/* Open MOUNT/.kvfs/<name>, saying clearly when MOUNT is not a kvfs mount. */
static FILE *open_ctl(const char *mnt, const char *name)
{
	struct statfs sf;
	char path[4096];
	FILE *f;

	if (statfs(mnt, &sf) < 0) {
		fprintf(stderr, "kvfs stat: %s: %s\n", mnt, strerror(errno));
		return NULL;
	}
	snprintf(path, sizeof(path), "%s/.kvfs/%s", mnt, name);
	f = (unsigned long)sf.f_type == FUSE_SUPER_MAGIC ? fopen(path, "r") : NULL;
	if (!f)
		fprintf(stderr, "kvfs stat: %s is not the root of a kvfs mount (no %s)\n",
			mnt, path);
	return f;
}

static int add_sample(struct metrics *m, const char *key, double v)
{
	if (m->n == m->cap) {
		size_t cap = m->cap ? 2 * m->cap : 128;
		struct sample *s = realloc(m->s, cap * sizeof(*s));

		if (!s)
			return -ENOMEM;
		m->s = s;
		m->cap = cap;
	}
	m->s[m->n].key = strdup(key);
	if (!m->s[m->n].key)
		return -ENOMEM;
	m->s[m->n++].v = v;
	return 0;
}

/* A latency bucket line: kept per op, in file order (bounds ascending). */
static void add_bucket(struct metrics *m, const char *key, double v)
{
	const char *op = key + strlen(LAT_BUCKET), *le = strstr(key, "le=\"");
	unsigned i;

	if (!le)
		return;
	for (i = 0; i < 4; i++) {
		struct hist *h = &m->lat[i];

		if (strncmp(op, h->op, strlen(h->op)) || op[strlen(h->op)] != '"' ||
		    h->n == MAX_BUCKETS)
			continue;
		h->le[h->n] = strncmp(le + 4, "+Inf", 4) ? strtod(le + 4, NULL) : -1;
		h->cum[h->n++] = v;
	}
}

static int parse_line(struct metrics *m, char *line)
{
	char *sp = strrchr(line, ' '), *end;
	double v;

	if (line[0] == '#' || !sp)
		return 0;
	*sp = '\0';
	v = strtod(sp + 1, &end);
	if (end == sp + 1)
		return 0;
	if (!strncmp(line, LAT_BUCKET, strlen(LAT_BUCKET)))
		add_bucket(m, line, v);
	return add_sample(m, line, v);
}

static int read_metrics(FILE *f, struct metrics *m)
{
	static const char *const ops[4] = { "read", "write", "lookup", "prefetch" };
	char line[1024];
	unsigned i;
	int rc = 0;

	for (i = 0; i < 4; i++)
		m->lat[i].op = ops[i];
	while (rc == 0 && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		rc = parse_line(m, line);
	}
	return rc;
}

static void free_metrics(struct metrics *m)
{
	size_t i;

	for (i = 0; i < m->n; i++)
		free(m->s[i].key);
	free(m->s);
}

/* The value of a sample ("kvfs_hits_total{tier=\"ram\"}"), 0 if absent
 * (a daemon older than this tool). */
static double val(const struct metrics *m, const char *key)
{
	size_t i;

	for (i = 0; i < m->n; i++)
		if (!strcmp(m->s[i].key, key))
			return m->s[i].v;
	return 0;
}

/* ---- printing ---- */

static const char *human(double b, char out[32])
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	unsigned u = 0;

	while (b >= 1024 && u < 5) {
		b /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(out, 32, "%.0f B", b);
	else
		snprintf(out, 32, "%.1f %s", b, unit[u]);
	return out;
}

static double pct(double num, double den)
{
	return den > 0 ? 100.0 * num / den : 0.0;
}

/* The q-quantile: the upper bound of the bucket it falls in; -1 if none. */
static double quantile(const struct hist *h, double q)
{
	double count = h->n ? h->cum[h->n - 1] : 0;
	unsigned i;

	if (count <= 0)
		return -1;
	for (i = 0; i < h->n; i++)
		if (h->cum[i] >= q * count)
			return h->le[i] >= 0 ? h->le[i] : (i ? h->le[i - 1] : 0);
	return -1;
}

static const char *dur(double s, char out[32])
{
	if (s < 0)
		snprintf(out, 32, "-");
	else if (s < 1e-3)
		snprintf(out, 32, "%.0fus", s * 1e6);
	else if (s < 1)
		snprintf(out, 32, "%.1fms", s * 1e3);
	else
		snprintf(out, 32, "%.2fs", s);
	return out;
}

static void print_ssd(const struct metrics *m)
{
	double used = val(m, "kvfs_ssd_physical_bytes");
	double cap = val(m, "kvfs_ssd_capacity_bytes");
	double avail = val(m, "kvfs_ssd_available_bytes");
	double empty = val(m, "kvfs_ssd_empty_pages");
	char a[32], b[32], c[32];

	printf("ssd        %.0f pages, %s logical, %s on disk in %.0f extents\n",
	       val(m, "kvfs_tier_pages{tier=\"ssd\"}"),
	       human(val(m, "kvfs_tier_bytes{tier=\"ssd\"}"), a), human(used, b),
	       val(m, "kvfs_ssd_extents"));
	if (empty > 0)        /* the capacity charges each a 4 KiB block */
		printf("           %.0f empty pages, charged %s\n", empty, human(empty * 4096, a));
	used += empty * 4096;
	if (cap > 0)
		printf("           capacity %s of %s used (%.1f%%), mode %s\n", human(used, a),
		       human(cap, b), pct(used, cap),
		       val(m, "kvfs_ssd_authoritative") ? "authoritative" : "cache");
	else
		printf("           capacity: no budget, %s used, %s free (%.1f%%), mode %s\n",
		       human(used, a), human(avail, b), pct(used, used + avail),
		       val(m, "kvfs_ssd_authoritative") ? "authoritative" : "cache");
	printf("           hits %.0f, evictions %.0f (%.0f shared, %s freed, %.0f runs), "
	       "space waits %.0f, ENOSPC %.0f\n",
	       val(m, "kvfs_hits_total{tier=\"ssd\"}"), val(m, "kvfs_evictions_total{tier=\"ssd\"}"),
	       val(m, "kvfs_ssd_evicted_shared_total"), human(val(m, "kvfs_ssd_evicted_bytes_total"), c),
	       val(m, "kvfs_ssd_eviction_runs_total"), val(m, "kvfs_ssd_space_waits_total"),
	       val(m, "kvfs_ssd_enospc_total"));
	if (val(m, "kvfs_ssd_stripes{state=\"failed\"}") > 0 ||
	    val(m, "kvfs_ssd_stripes{state=\"missing\"}") > 0)
		printf("           STRIPES: %.0f ok, %.0f failed (out of allocation), %.0f missing "
		       "(degraded mount); the daemon log names them\n",
		       val(m, "kvfs_ssd_stripes{state=\"ok\"}"),
		       val(m, "kvfs_ssd_stripes{state=\"failed\"}"),
		       val(m, "kvfs_ssd_stripes{state=\"missing\"}"));
}

static void print_ram(const struct metrics *m)
{
	double hits = val(m, "kvfs_hits_total{tier=\"ram\"}"), miss = val(m, "kvfs_ram_misses_total");
	double budget = val(m, "kvfs_ram_budget_bytes"), bytes = val(m, "kvfs_tier_bytes{tier=\"ram\"}");
	double pf = val(m, "kvfs_ram_prefetched_total");
	char a[32], b[32];

	if (budget > 0)
		printf("ram        %.0f pages, %s of %s budget (%.1f%%), %.0f protected\n",
		       val(m, "kvfs_tier_pages{tier=\"ram\"}"), human(bytes, a), human(budget, b),
		       pct(bytes, budget), val(m, "kvfs_ram_protected_pages"));
	else
		printf("ram        tier off (%.0f pages, %s)\n",
		       val(m, "kvfs_tier_pages{tier=\"ram\"}"), human(bytes, a));
	printf("           hits %.0f, misses %.0f (hit rate %.1f%%), promotions %.0f, "
	       "kept after write %.0f, evictions %.0f\n", hits, miss, pct(hits, hits + miss),
	       val(m, "kvfs_ram_promotions_total"), val(m, "kvfs_ram_kept_written_total"),
	       val(m, "kvfs_evictions_total{tier=\"ram\"}"));
	printf("           prefetched %.0f (%.1f%% used), dropped %.0f\n", pf,
	       pct(val(m, "kvfs_ram_prefetch_used_total"), pf),
	       val(m, "kvfs_ram_prefetch_dropped_total"));
}

static void print_io(const struct metrics *m)
{
	char a[32], b[32], c[32], d[32];

	printf("reads      fuse: %s from ssd, %s from ram; fast path: %s in %.0f pages, "
	       "%.0f batches, %.0f bounced\n",
	       human(val(m, "kvfs_read_bytes_total{path=\"fuse\",tier=\"ssd\"}"), a),
	       human(val(m, "kvfs_read_bytes_total{path=\"fuse\",tier=\"ram\"}"), b),
	       human(val(m, "kvfs_read_bytes_total{path=\"fast\",tier=\"any\"}"), c),
	       val(m, "kvfs_fast_read_pages_total"), val(m, "kvfs_fast_read_batches_total"),
	       val(m, "kvfs_fast_read_bounced_pages_total"));
	printf("writes     accepted: fuse %s, fast %s; written to ssd %s; "
	       "write amplification %.2f\n",
	       human(val(m, "kvfs_accepted_bytes_total{path=\"fuse\"}"), a),
	       human(val(m, "kvfs_accepted_bytes_total{path=\"fast\"}"), b),
	       human(val(m, "kvfs_ssd_written_bytes_total{path=\"writeback\"}"), c),
	       val(m, "kvfs_write_amplification_ratio"));
	printf("dedup      %.0f pages share an extent, %s saved, %.0f mismatches\n",
	       val(m, "kvfs_dedup_pages_total"), human(val(m, "kvfs_dedup_saved_bytes_total"), a),
	       val(m, "kvfs_dedup_mismatches_total"));
	printf("write-back %s dirty of %s budget (peak %s), waits %.0f, overruns %.0f\n",
	       human(val(m, "kvfs_writeback_dirty_bytes"), a),
	       human(val(m, "kvfs_writeback_budget_bytes"), b),
	       human(val(m, "kvfs_writeback_peak_bytes"), d),
	       val(m, "kvfs_writeback_waits_total"), val(m, "kvfs_writeback_overruns_total"));
	printf("pages      %.0f sealed, %.0f lost, %.0f checksum failures, %.0f commits; "
	       "%.0f models, %.0f layers\n",
	       val(m, "kvfs_pages_sealed_total"), val(m, "kvfs_pages_lost_total"),
	       val(m, "kvfs_checksum_failures_total"), val(m, "kvfs_commits_total"),
	       val(m, "kvfs_models"), val(m, "kvfs_layers"));
}

static void print_latency(const struct metrics *m)
{
	char a[32], b[32];
	unsigned i;

	printf("latency   ");
	for (i = 0; i < 4; i++) {
		const struct hist *h = &m->lat[i];

		printf(" %s p50 %s p99 %s (%.0f)%s", h->op, dur(quantile(h, 0.5), a),
		       dur(quantile(h, 0.99), b), h->n ? h->cum[h->n - 1] : 0,
		       i < 3 ? ";" : "\n");
	}
}

static int copy_out(FILE *f)
{
	char buf[65536];
	size_t n;

	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		if (fwrite(buf, 1, n, stdout) != n)
			return 1;
	return ferror(f) ? 1 : 0;
}

static int summary(const char *mnt)
{
	struct metrics m = { 0 };
	FILE *f = open_ctl(mnt, "metrics");
	int rc;

	if (!f)
		return 1;
	rc = read_metrics(f, &m);
	fclose(f);
	if (rc < 0 || m.n == 0) {
		fprintf(stderr, "kvfs stat: %s/.kvfs/metrics: %s\n", mnt,
			rc < 0 ? strerror(-rc) : "no metrics in it");
		free_metrics(&m);
		return 1;
	}
	printf("kvfs %s\n", mnt);
	if (val(&m, "kvfs_index_loading") > 0)
		printf("index      loading in the background (%.1f s so far): changes "
		       "are taken, eviction chooses among layers already loaded\n",
		       val(&m, "kvfs_index_load_milliseconds") / 1000);
	print_ssd(&m);
	print_ram(&m);
	print_io(&m);
	print_latency(&m);
	free_metrics(&m);
	return 0;
}

int kvfs_cmd_stat(int argc, char **argv)
{
	const char *mnt = NULL;
	bool json = false;
	FILE *f;
	int i, rc;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(stat_usage, stdout);
			return 0;
		}
		if (!strcmp(argv[i], "--json"))
			json = true;
		else if (argv[i][0] != '-' && !mnt)
			mnt = argv[i];
		else {
			fputs(stat_usage, stderr);
			return 2;
		}
	}
	if (!mnt) {
		fputs(stat_usage, stderr);
		return 2;
	}
	if (!json)
		return summary(mnt);
	f = open_ctl(mnt, "stats");
	if (!f)
		return 1;
	rc = copy_out(f);
	fclose(f);
	return rc;
}
