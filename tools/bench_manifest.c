/*
 * kvfs-bench-manifest DIR [PAGES]: what the manifest's safety costs, on a
 * synthetic store of PAGES rows (default 1000000) made under DIR (which it
 * creates and removes): group commits with and without the journal, the
 * load a mount does (every row validated, identity checks included), the
 * hashing part of those checks alone, a journal rewrite (compaction), and a
 * rebuild of kvfs.db from the journal. Results go to stdout, one line each;
 * docs/benchmarks/metadata.md records them. Not installed.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "manifest.h"

#define BATCH 4096u

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, int rc)
{
	fprintf(stderr, "kvfs-bench-manifest: %s: %s\n", what, kv_strerror(rc));
	exit(1);
}

static void make_store(const char *dir)
{
	struct kv_store_meta *meta = calloc(1, sizeof(*meta));
	int rc;

	if (!meta || mkdir(dir, 0700) < 0)
		die("creating the directory", meta ? -errno : -ENOMEM);
	strcpy(meta->uuid, "00000000-1111-4222-8333-444444444444");
	meta->segment_size = 1ull << 30;
	meta->nstripes = 1;
	strcpy(meta->stripes[0], "stripe0");
	rc = kv_manifest_create(dir, meta);
	if (rc < 0)
		die("kv_manifest_create", rc);
	free(meta);
}

/* PAGES pages of 4 KiB in one layer, BATCH row pairs per transaction. */
static double fill(const char *dir, uint64_t pages, bool journal)
{
	struct kv_model_rec mo = { .ino = 2, .name = "model", .attr = { .mode = 0755 } };
	struct kv_layer_rec la = { .ino = 3, .model_ino = 2, .name = "00",
				   .attr = { .mode = 0755 } };
	struct kv_manifest *m;
	double t0;
	int rc;

	if ((rc = kv_manifest_open(dir, &m)) < 0)
		die("kv_manifest_open", rc);
	if (journal && (rc = kv_manifest_recover(m, NULL)) < 0)
		die("kv_manifest_recover", rc);
	t0 = now_s();
	if ((rc = kv_manifest_begin(m)) || (rc = kv_manifest_put_model(m, &mo)) ||
	    (rc = kv_manifest_put_layer(m, &la)))
		die("putting the model", rc);
	for (uint64_t i = 1; i <= pages; i++) {
		struct kv_extent_rec e = { .id = i, .refcount = 1,
			.ext = { .offset = (i - 1) * 4096 % (1ull << 30),
				 .segment = (uint32_t)((i - 1) * 4096 >> 30), .length = 4096 } };
		struct kv_page_rec p = { .ino = 10 + i, .layer_ino = 3, .extent_id = i,
					 .size = 4096, .attr = { .mode = 0444 } };

		memcpy(e.hash, &i, sizeof(i));
		snprintf(p.name, sizeof(p.name), "%016" PRIx64 "%016" PRIx64, (uint64_t)(i * 0x9E3779B97F4A7C15ull), i);
		if ((rc = kv_manifest_put_extent(m, &e)) || (rc = kv_manifest_put_page(m, &p)))
			die("putting a page", rc);
		if (i % BATCH == 0 && ((rc = kv_manifest_commit(m)) || (rc = kv_manifest_begin(m))))
			die("committing", rc);
	}
	if ((rc = kv_manifest_commit(m)))
		die("committing", rc);
	t0 = now_s() - t0;
	kv_manifest_close(m);
	return t0;
}

static int count_row(void *arg, const struct kv_page_rec *r)
{
	(void)r;
	++*(uint64_t *)arg;
	return 0;
}

static uint64_t file_size(const char *dir, const char *name)
{
	char p[4200];
	struct stat sb;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return stat(p, &sb) == 0 ? (uint64_t)sb.st_size : 0;
}

int main(int argc, char **argv)
{
	static const struct kv_manifest_visitor v = { .page = count_row };
	uint64_t pages = argc > 2 ? strtoull(argv[2], NULL, 10) : 1000000, seen = 0, h = 0;
	char dir[4200], nojdir[4224], cmd[9000];
	struct kv_rebuild_stats rs;
	struct kv_manifest *m;
	double t, t_nj, t_j;
	int rc;

	if (argc < 2 || pages == 0) {
		fprintf(stderr, "usage: kvfs-bench-manifest DIR [PAGES]\n");
		return 2;
	}
	kv_log_set_level(KV_LOG_WARN);
	snprintf(dir, sizeof(dir), "%s/bench-manifest.%d", argv[1], (int)getpid());
	snprintf(nojdir, sizeof(nojdir), "%s.nojournal", dir);
	make_store(nojdir);
	t_nj = fill(nojdir, pages, false);
	make_store(dir);
	t_j = fill(dir, pages, true);
	printf("pages %" PRIu64 ", %u per transaction\n", pages, BATCH);
	printf("commit without journal  %.3f s  (%.0f pages/s)\n", t_nj, pages / t_nj);
	printf("commit with journal     %.3f s  (%.0f pages/s, %.2fx the time)\n", t_j,
	       pages / t_j, t_j / t_nj);

	if ((rc = kv_manifest_open(dir, &m)) < 0)
		die("kv_manifest_open", rc);
	t = now_s();
	if ((rc = kv_manifest_load(m, &v, &seen)) < 0)
		die("kv_manifest_load", rc);
	printf("load (mount's validation) %.3f s for %" PRIu64 " pages\n", now_s() - t, seen);
	t = now_s();
	if ((rc = kv_manifest_quick_check(m)) < 0)
		die("kv_manifest_quick_check", rc);
	printf("quick_check             %.3f s\n", now_s() - t);
	t = now_s();
	for (uint64_t i = 0; i < pages; i++) {
		uint8_t b[72];

		memset(b, (int)i, sizeof(b));
		memcpy(b, &i, sizeof(i));
		h ^= XXH3_64bits(b, sizeof(b));
	}
	printf("identity hashes alone   %.3f s  (checksum %016" PRIx64 ")\n", now_s() - t, h);
	t = now_s();
	if ((rc = kv_manifest_journal_rewrite(m)) < 0)
		die("kv_manifest_journal_rewrite", rc);
	printf("journal rewrite         %.3f s  (%" PRIu64 " bytes; kvfs.db %" PRIu64 " bytes)\n",
	       now_s() - t, file_size(dir, KV_JOURNAL_FILE), file_size(dir, KV_MANIFEST_FILE));
	kv_manifest_close(m);
	t = now_s();
	if ((rc = kv_manifest_rebuild(dir, &rs)) < 0)
		die("kv_manifest_rebuild", rc);
	printf("rebuild from journal    %.3f s\n", now_s() - t);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", dir, nojdir);
	return system(cmd) == 0 ? 0 : 1;
}
