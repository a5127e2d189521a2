/*
 * `kvfs bench-mount`: how long bringing a store up takes as its page count
 * grows. For each count N it makes a store whose N pages of 4 KiB all lie
 * in one segment file, then times kvfs_open() (what `kvfs mount` runs
 * before it serves: manifest load, in-memory index, marking every extent,
 * reclaim) and kvfs_close(), R times each.
 *
 * The store is built directly, not by writing pages: mkfs, one sparse
 * segment file of N * 4 KiB, and one manifest transaction with a model,
 * N / 4096 layers, N extents (distinct hashes) and N pages. Mounting never
 * reads payloads, so their bytes (holes, zeros) do not matter here; a
 * store built this way fails `kvfs fsck --verify-data`, nothing else.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "engine.h"
#include "index.h"
#include "manifest.h"
#include "store.h"
#include "tools.h"

#define PAGE 4096u
#define PAGES_PER_LAYER 4096u
#define COUNTS_MAX 16
#define OPENS_MAX 32

#define BENCH_MOUNT_USAGE \
	"usage: kvfs bench-mount [--dir DIR] [--pages N,N,...] [--repeat R] [--keep] [--json]\n" \
	"  For each N, builds a store of N pages of 4 KiB in one segment file (the\n" \
	"  manifest written directly, the segment sparse) and times bringing it up\n" \
	"  as `kvfs mount` does (kvfs_open: manifest, index, recovery) and closing it.\n" \
	"  --dir DIR      workspace (default /var/tmp/kvfs-bench-mount.XXXXXX), removed\n" \
	"                 at the end unless --keep\n" \
	"  --pages LIST   page counts (default 50K,100K,200K,1M; K = 1000, M = 10^6)\n" \
	"  --repeat R     opens per count; the median is reported (default 3)\n" \
	"  --json         one JSON object per count on stdout\n"

struct mopts {
	const char *dir;
	uint64_t counts[COUNTS_MAX];
	unsigned ncounts;
	unsigned repeat;
	bool keep, json;
};

int bench_parse_count(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || v == 0)
		return -EINVAL;
	if (*end == 'K' || *end == 'k')
		v *= 1000, end++;
	else if (*end == 'M' || *end == 'm')
		v *= 1000000, end++;
	if (*end || v > (1ull << 32))
		return -EINVAL;
	*out = v;
	return 0;
}

static int parse_counts(char *list, struct mopts *o)
{
	char *save = NULL;

	o->ncounts = 0;
	for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (o->ncounts == COUNTS_MAX || bench_parse_count(t, &o->counts[o->ncounts]) < 0)
			return -EINVAL;
		o->ncounts++;
	}
	return o->ncounts ? 0 : -EINVAL;
}

static int mopts_parse(int argc, char **argv, struct mopts *o)
{
	static const struct option lo[] = {
		{ "dir", required_argument, NULL, 'd' },
		{ "pages", required_argument, NULL, 'p' },
		{ "repeat", required_argument, NULL, 'r' },
		{ "keep", no_argument, NULL, 'k' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static const uint64_t defaults[] = { 50000, 100000, 200000, 1000000 };
	int c;

	*o = (struct mopts){ .repeat = 3, .ncounts = 4 };
	memcpy(o->counts, defaults, sizeof(defaults));
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'd':
			o->dir = optarg;
			break;
		case 'p':
			if (parse_counts(optarg, o) < 0)
				goto usage;
			break;
		case 'r':
			o->repeat = (unsigned)atoi(optarg);
			if (o->repeat < 1 || o->repeat > OPENS_MAX)
				goto usage;
			break;
		case 'k':
			o->keep = true;
			break;
		case 'j':
			o->json = true;
			break;
		case 'h':
			fputs(BENCH_MOUNT_USAGE, stdout);
			exit(0);
		default:
			goto usage;
		}
	}
	if (optind == argc)
		return 0;
usage:
	fputs(BENCH_MOUNT_USAGE, stderr);
	return -EINVAL;
}

/* The one segment file, sparse: N footprints back to back. */
static int make_segment(const char *store, uint64_t n)
{
	char path[PATH_MAX + 64];
	int fd, rc = 0;

	snprintf(path, sizeof(path), "%s/stripe0/seg-00000000", store);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)(n * PAGE)) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

static int put_rows(struct kv_manifest *m, uint64_t n)
{
	const struct kv_obj_attr dir = { 0755, 0, 0, 1, 1, 1 };
	const struct kv_obj_attr file = { 0444, 0, 0, 1, 1, 1 };
	struct kv_model_rec mr = { .ino = 2, .name = "bench", .attr = dir };
	uint64_t layers = (n + PAGES_PER_LAYER - 1) / PAGES_PER_LAYER;
	uint64_t first_page = 3 + layers;
	int rc;

	rc = kv_manifest_begin(m);
	if (!rc)
		rc = kv_manifest_put_model(m, &mr);
	for (uint64_t l = 0; l < layers && !rc; l++) {
		struct kv_layer_rec r = { .ino = 3 + l, .model_ino = 2,
					  .layer = (uint32_t)l, .attr = dir };

		snprintf(r.name, sizeof(r.name), "%" PRIu64, l);
		rc = kv_manifest_put_layer(m, &r);
	}
	for (uint64_t i = 0; i < n && !rc; i++) {
		struct kv_extent_rec e = { .id = i + 1, .refcount = 1,
			.ext = { .offset = i * PAGE, .length = PAGE } };
		struct kv_page_rec p = { .ino = first_page + i,
					 .layer_ino = 3 + i / PAGES_PER_LAYER,
					 .extent_id = i + 1, .size = PAGE, .attr = file };

		/* distinct, as dedup would leave them */
		kv_hash128(&i, sizeof(i), e.hash);
		snprintf(p.name, sizeof(p.name), "p%06" PRIu64, i % PAGES_PER_LAYER);
		rc = kv_manifest_put_extent(m, &e);
		if (!rc)
			rc = kv_manifest_put_page(m, &p);
	}
	if (!rc)
		return kv_manifest_commit(m);
	kv_manifest_rollback(m);
	return rc;
}

static int build_store(const char *store, uint64_t n)
{
	uint64_t seg = (n * PAGE + (1ull << 30) - 1) & ~((1ull << 30) - 1);
	struct kvfs_mkfs_opts mo = { .segment_size = seg, .capacity = 2 * seg };
	struct kv_manifest *m;
	int rc;

	rc = kvfs_mkfs(store, &mo);
	if (rc < 0)
		return rc;
	rc = make_segment(store, n);
	if (rc < 0)
		return rc;
	rc = kv_manifest_open(store, &m);
	if (rc < 0)
		return rc;
	rc = put_rows(m, n);
	kv_manifest_close(m);
	return rc;
}

struct result {
	uint64_t pages;
	double build_s, open_s, close_s;
	double open_min, open_max;
};

static int measure(const char *store, unsigned repeat, struct result *r)
{
	double open_s[OPENS_MAX], close_s[OPENS_MAX];
	struct kvfs_opts ko;
	struct kvfs *fs;
	int rc;

	kvfs_opts_default(&ko);
	for (unsigned i = 0; i < repeat; i++) {
		double t0 = now_s(), t1;

		rc = kvfs_open(store, &ko, &fs);
		if (rc < 0)
			return rc;
		t1 = now_s();
		kvfs_close(fs);
		open_s[i] = t1 - t0;
		close_s[i] = now_s() - t1;
	}
	r->open_min = r->open_max = open_s[0];
	for (unsigned i = 1; i < repeat; i++) {
		r->open_min = open_s[i] < r->open_min ? open_s[i] : r->open_min;
		r->open_max = open_s[i] > r->open_max ? open_s[i] : r->open_max;
	}
	r->open_s = median(open_s, repeat);
	r->close_s = median(close_s, repeat);
	return 0;
}

static void report(const struct mopts *o, const struct result *r,
		   const struct result *first)
{
	double per_page_us = r->open_s / (double)r->pages * 1e6;

	if (o->json) {
		printf("{\"event\": \"mount\", \"pages\": %" PRIu64 ", \"build_s\": %.3f, "
		       "\"open_s\": %.4f, \"open_min_s\": %.4f, \"open_max_s\": %.4f, "
		       "\"close_s\": %.4f, \"open_us_per_page\": %.3f}\n", r->pages,
		       r->build_s, r->open_s, r->open_min, r->open_max, r->close_s,
		       per_page_us);
		return;
	}
	printf("%9" PRIu64 " %9.2f %9.3f %9.3f %9.3f %9.3f %10.3f %8.2f\n",
	       r->pages, r->build_s, r->open_s, r->open_min, r->open_max,
	       r->close_s, per_page_us,
	       (r->open_s / (double)r->pages) / (first->open_s / (double)first->pages));
	fflush(stdout);
}

int kvfs_cmd_bench_mount(int argc, char **argv)
{
	char work[PATH_MAX], store[PATH_MAX + 32];
	struct result first = { 0 };
	struct mopts o;
	int rc = 0;

	if (mopts_parse(argc, argv, &o) < 0)
		return 2;
	kv_log_set_level(KV_LOG_WARN);
	snprintf(work, sizeof(work), "%s", o.dir ? o.dir : "/var/tmp/kvfs-bench-mount.XXXXXX");
	if (o.dir ? mkdir(work, 0755) < 0 && errno != EEXIST : !mkdtemp(work)) {
		fprintf(stderr, "kvfs bench-mount: %s: %s\n", work, strerror(errno));
		return 1;
	}
	if (!o.json)
		printf("kvfs bench-mount in %s: 4 KiB pages, one segment, %u opens per "
		       "count (median, min, max)\n"
		       "    pages   build s    open s      min      max   close s  us/page  "
		       "x first\n", work, o.repeat);
	for (unsigned i = 0; i < o.ncounts && !rc; i++) {
		struct result r = { .pages = o.counts[i] };
		double t0 = now_s();

		snprintf(store, sizeof(store), "%s/n%" PRIu64, work, r.pages);
		rc = build_store(store, r.pages);
		r.build_s = now_s() - t0;
		if (rc == 0)
			rc = measure(store, o.repeat, &r);
		if (rc < 0) {
			fprintf(stderr, "kvfs bench-mount: %" PRIu64 " pages in %s: %s\n",
				r.pages, store, kv_strerror(rc));
			break;
		}
		if (i == 0)
			first = r;
		report(&o, &r, &first);
		if (!o.keep)
			rm_tree(store);
	}
	if (!o.keep && !o.dir)
		rm_tree(work);
	return rc < 0 ? 1 : 0;
}
