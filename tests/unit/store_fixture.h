/*
 * Shared fixture of the store unit tests (test_store.c: layout, allocator,
 * recovery; test_store_io.c: I/O, checksums, faults, concurrency): one
 * mkdtemp() root per program made by the group setup and removed by the
 * group teardown, a captured log, and helpers that open a store in its own
 * directory and write or check patterned extents.
 */
#ifndef KV_TEST_STORE_FIXTURE_H
#define KV_TEST_STORE_FIXTURE_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "store.h"

#define UUID "2f1c0c7e-8a51-4d57-9d0e-0d5a3b6f7c11"
#define MIB (1024ull * 1024)

static char root[64];

/* ---- fixtures and helpers ---- */

static inline int rm_entry(const char *path, const struct stat *sb, int flag,
		    struct FTW *ftw)
{
	return remove(path);
}

static inline int group_setup(void **state)
{
	/* These tests expect one segment filled before the next, as on a
	 * disk; on a tmpfs /tmp a stripe would have write heads. */
	setenv("KVFS_WRITE_HEADS", "1", 1);
	strcpy(root, "/tmp/kvfs-test-store-XXXXXX");
	if (!mkdtemp(root))
		return -1;
	kv_log_set_level(KV_LOG_ERR);
	return 0;
}

static inline int group_teardown(void **state)
{
	return nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Captured log lines, for tests that check what was said. */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_buf[8192];

static inline void capture_sink(enum kv_log_level lvl, const char *line)
{
	pthread_mutex_lock(&log_mu);
	size_t n = strlen(log_buf);
	snprintf(log_buf + n, sizeof(log_buf) - n, "%s\n", line);
	pthread_mutex_unlock(&log_mu);
}

static inline void capture_start(void)
{
	log_buf[0] = '\0';
	kv_log_set_sink(capture_sink);
}

static inline void capture_stop(void)
{
	kv_log_set_sink(NULL);
}

struct tstore {
	char dirs[KV_MAX_STRIPES][256];
	const char *paths[KV_MAX_STRIPES];
	struct kv_store_opts o;
};

static inline void tstore_init(struct tstore *t, const char *name, unsigned n,
			uint64_t segsize)
{
	memset(t, 0, sizeof(*t));
	for (unsigned i = 0; i < n; i++) {
		snprintf(t->dirs[i], sizeof(t->dirs[i]), "%s/%s/s%u", root,
			 name, i);
		t->paths[i] = t->dirs[i];
	}
	t->o.nstripes = n;
	t->o.stripes = t->paths;
	t->o.uuid = UUID;
	t->o.segment_size = segsize;
	t->o.create = true;
}

/* Open and make the allocator usable (fresh store: nothing to mark). */
static inline struct kv_store *tstore_open(struct tstore *t)
{
	struct kv_store *s = NULL;

	assert_int_equal(kv_store_open(&t->o, &s), 0);
	assert_non_null(s);
	assert_int_equal(kv_store_reclaim(s, NULL), 0);
	return s;
}

/* Stripe i loses its marker (moved beside its directory), as a disk that
 * is not there; with away false it is put back. */
static inline void tstore_marker_away(struct tstore *t, unsigned i, bool away)
{
	char marker[300], moved[300];

	snprintf(marker, sizeof(marker), "%s/kvfs-stripe", t->dirs[i]);
	snprintf(moved, sizeof(moved), "%s/../marker-away", t->dirs[i]);
	assert_int_equal(away ? rename(marker, moved) : rename(moved, marker), 0);
}

static inline void seg_path(struct tstore *t, unsigned stripe, uint32_t seg,
		     char *out, size_t size)
{
	snprintf(out, size, "%s/seg-%08u", t->dirs[stripe], seg);
}

static inline struct stat seg_stat(struct tstore *t, unsigned stripe, uint32_t seg)
{
	char p[300];
	struct stat sb;

	seg_path(t, stripe, seg, p, sizeof(p));
	assert_int_equal(stat(p, &sb), 0);
	return sb;
}

static inline bool seg_exists(struct tstore *t, unsigned stripe, uint32_t seg)
{
	char p[300];

	seg_path(t, stripe, seg, p, sizeof(p));
	return access(p, F_OK) == 0;
}

static inline void fill_pattern(void *buf, uint64_t len, uint32_t seed)
{
	uint8_t *b = buf;

	for (uint64_t i = 0; i < len; i++)
		b[i] = (uint8_t)((i * 2654435761u + seed * 40503u) >> 7);
}

/* Allocate, fill with a pattern and write one extent. */
static inline void write_one(struct kv_store *s, uint64_t len, uint32_t seed,
		      struct kv_extent *e)
{
	struct kv_io io = { .op = KV_IO_WRITE };

	assert_int_equal(kv_extent_alloc(s, len, e), 0);
	io.ext = *e;
	io.buf = kv_buf_alloc(len);
	assert_non_null(io.buf);
	fill_pattern(io.buf, len, seed);
	assert_int_equal(kv_store_io(s, &io, 1), 0);
	assert_int_equal(io.res, 0);
	free(io.buf);
}

static inline void check_one(struct kv_store *s, const struct kv_extent *e,
		      uint32_t seed)
{
	struct kv_io io = { .op = KV_IO_READ, .ext = *e };
	void *want = kv_buf_alloc(e->length);

	io.buf = kv_buf_alloc(e->length);
	assert_non_null(io.buf);
	fill_pattern(want, e->length, seed);
	assert_int_equal(kv_store_io(s, &io, 1), 0);
	assert_memory_equal(io.buf, want, e->length);
	free(io.buf);
	free(want);
}

#endif
