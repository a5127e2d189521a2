/*
 * Unit tests of the extent store (store/): stripe markers, the allocator
 * (alignment, round-robin, free-list reuse, segment unlinking, capacity),
 * batched io_uring I/O, checksum verification, recovery (mark_used +
 * reclaim), fault injection and concurrent submitters. Every test works in
 * its own directory under one mkdtemp() root made by the group setup and
 * removed by the group teardown; nothing depends on another test's files.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
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

static int rm_entry(const char *path, const struct stat *sb, int flag,
		    struct FTW *ftw)
{
	return remove(path);
}

static int group_setup(void **state)
{
	strcpy(root, "/tmp/kvfs-test-store-XXXXXX");
	if (!mkdtemp(root))
		return -1;
	kv_log_set_level(KV_LOG_ERR);
	return 0;
}

static int group_teardown(void **state)
{
	return nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Captured log lines, for tests that check what was said. */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_buf[8192];

static void capture_sink(enum kv_log_level lvl, const char *line)
{
	pthread_mutex_lock(&log_mu);
	size_t n = strlen(log_buf);
	snprintf(log_buf + n, sizeof(log_buf) - n, "%s\n", line);
	pthread_mutex_unlock(&log_mu);
}

static void capture_start(void)
{
	log_buf[0] = '\0';
	kv_log_set_sink(capture_sink);
}

static void capture_stop(void)
{
	kv_log_set_sink(NULL);
}

struct tstore {
	char dirs[KV_MAX_STRIPES][256];
	const char *paths[KV_MAX_STRIPES];
	struct kv_store_opts o;
};

static void tstore_init(struct tstore *t, const char *name, unsigned n,
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
static struct kv_store *tstore_open(struct tstore *t)
{
	struct kv_store *s = NULL;

	assert_int_equal(kv_store_open(&t->o, &s), 0);
	assert_non_null(s);
	assert_int_equal(kv_store_reclaim(s, NULL), 0);
	return s;
}

static void seg_path(struct tstore *t, unsigned stripe, uint32_t seg,
		     char *out, size_t size)
{
	snprintf(out, size, "%s/seg-%08u", t->dirs[stripe], seg);
}

static struct stat seg_stat(struct tstore *t, unsigned stripe, uint32_t seg)
{
	char p[300];
	struct stat sb;

	seg_path(t, stripe, seg, p, sizeof(p));
	assert_int_equal(stat(p, &sb), 0);
	return sb;
}

static bool seg_exists(struct tstore *t, unsigned stripe, uint32_t seg)
{
	char p[300];

	seg_path(t, stripe, seg, p, sizeof(p));
	return access(p, F_OK) == 0;
}

static void fill_pattern(void *buf, uint64_t len, uint32_t seed)
{
	uint8_t *b = buf;

	for (uint64_t i = 0; i < len; i++)
		b[i] = (uint8_t)((i * 2654435761u + seed * 40503u) >> 7);
}

/* Allocate, fill with a pattern and write one extent. */
static void write_one(struct kv_store *s, uint64_t len, uint32_t seed,
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

static void check_one(struct kv_store *s, const struct kv_extent *e,
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

/* ---- markers ---- */

static void test_markers(void **state)
{
	struct kv_store *s = NULL;
	struct tstore t;
	char p[300], text[256];
	int fd;
	ssize_t n;

	tstore_init(&t, "markers", 2, MIB);
	assert_int_equal(kv_store_open(&t.o, &s), 0);
	kv_store_close(s);

	snprintf(p, sizeof(p), "%s/kvfs-stripe", t.dirs[1]);
	fd = open(p, O_RDONLY);
	assert_true(fd >= 0);
	n = read(fd, text, sizeof(text) - 1);
	close(fd);
	assert_true(n > 0);
	text[n] = '\0';
	assert_string_equal(text, "kvfs-stripe 1\nuuid " UUID "\nindex 1\n");

	/* reopen without create */
	t.o.create = false;
	assert_int_equal(kv_store_open(&t.o, &s), 0);
	kv_store_close(s);

	/* another store's uuid */
	capture_start();
	t.o.uuid = "some-other-store";
	assert_int_equal(kv_store_open(&t.o, &s), KV_ERR_MISMATCH);
	assert_null(s);
	assert_non_null(strstr(log_buf, t.dirs[0]));
	t.o.uuid = UUID;

	/* stripes given in the wrong order */
	t.paths[0] = t.dirs[1];
	t.paths[1] = t.dirs[0];
	assert_int_equal(kv_store_open(&t.o, &s), KV_ERR_MISMATCH);
	t.paths[0] = t.dirs[0];
	t.paths[1] = t.dirs[1];

	/* same directory twice */
	t.paths[1] = t.dirs[0];
	assert_int_equal(kv_store_open(&t.o, &s), -EINVAL);
	t.paths[1] = t.dirs[1];

	/* missing marker */
	assert_int_equal(unlink(p), 0);
	log_buf[0] = '\0';
	assert_int_equal(kv_store_open(&t.o, &s), KV_ERR_NOTSTORE);
	assert_non_null(strstr(log_buf, t.dirs[1]));

	/* a directory that does not exist */
	t.paths[1] = "/nonexistent/kvfs/stripe";
	assert_int_equal(kv_store_open(&t.o, &s), -ENOENT);
	capture_stop();

	/* create restores a missing marker */
	t.paths[1] = t.dirs[1];
	t.o.create = true;
	assert_int_equal(kv_store_open(&t.o, &s), 0);
	kv_store_close(s);
	assert_int_equal(access(p, F_OK), 0);
}

/* ---- allocator ---- */

static void test_alloc_alignment(void **state)
{
	static const uint64_t lens[] = { 1, 100, 4095, 4096, 4097, 65536,
					 100000, 8191, 12288 };
	struct kv_extent e[9];
	struct kv_store *s;
	struct tstore t;

	tstore_init(&t, "align", 1, MIB);
	s = tstore_open(&t);
	for (unsigned i = 0; i < 9; i++) {
		assert_int_equal(kv_extent_alloc(s, lens[i], &e[i]), 0);
		assert_int_equal(e[i].offset % KV_ALIGN, 0);
		assert_int_equal(e[i].length, lens[i]);
		assert_int_equal(kv_extent_footprint(&e[i]) % KV_ALIGN, 0);
		assert_true(kv_extent_footprint(&e[i]) >= lens[i]);
		assert_true(kv_extent_footprint(&e[i]) < lens[i] + KV_ALIGN);
		/* bump allocation: packed one after another */
		if (i > 0)
			assert_int_equal(e[i].offset, e[i - 1].offset +
					 kv_extent_footprint(&e[i - 1]));
	}
	assert_int_equal(kv_extent_footprint(&e[0]), 4096);
	assert_int_equal(kv_extent_footprint(&e[3]), 4096);
	assert_int_equal(kv_extent_footprint(&e[4]), 8192);
	assert_int_equal(kv_extent_footprint(&e[6]), 102400);
	assert_int_equal(kv_extent_alloc(s, 0, &e[0]), -EINVAL);
	kv_store_close(s);
}

static void test_round_robin(void **state)
{
	struct kv_store_usage u;
	struct kv_extent e;
	struct kv_store *s;
	struct tstore t;

	tstore_init(&t, "rr", 3, MIB);
	s = tstore_open(&t);
	for (unsigned i = 0; i < 12; i++) {
		assert_int_equal(kv_extent_alloc(s, 5000, &e), 0);
		assert_int_equal(e.stripe, i % 3);
		assert_int_equal(e.offset, (i / 3) * 8192);
	}
	kv_store_usage(s, &u);
	assert_int_equal(u.nstripes, 3);
	assert_int_equal(u.extents, 12);
	assert_int_equal(u.used, 12 * 8192);
	assert_int_equal(u.segments, 3);
	assert_true(u.capacity > 0);
	assert_true(u.avail <= u.capacity - u.used);
	assert_string_equal(kv_store_stripe_path(s, 2), t.dirs[2]);
	assert_null(kv_store_stripe_path(s, 3));
	assert_int_equal(kv_store_segment_size(s), MIB);
	kv_store_close(s);
}

static void test_efbig(void **state)
{
	struct kv_extent e;
	struct kv_store *s;
	struct tstore t;

	tstore_init(&t, "efbig", 1, MIB);
	s = tstore_open(&t);
	capture_start();
	assert_int_equal(kv_extent_alloc(s, MIB + 1, &e), -EFBIG);
	capture_stop();
	assert_int_equal(kv_extent_alloc(s, MIB, &e), 0);
	assert_int_equal(e.offset, 0);
	/* the whole segment is taken: the next extent opens segment 1 */
	assert_int_equal(kv_extent_alloc(s, 1, &e), 0);
	assert_int_equal(e.segment, 1);
	kv_store_close(s);
}

static void test_capacity(void **state)
{
	struct kv_extent e[4];
	struct kv_store_usage u;
	struct kv_store *s;
	struct tstore t;

	tstore_init(&t, "capacity", 2, MIB);
	t.o.capacity = 3 * 4096;
	s = tstore_open(&t);
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(kv_extent_alloc(s, 4096, &e[i]), 0);
	assert_int_equal(kv_extent_alloc(s, 1, &e[3]), -ENOSPC);
	kv_store_usage(s, &u);
	assert_int_equal(u.capacity, 3 * 4096);
	assert_int_equal(u.used, 3 * 4096);
	assert_int_equal(u.avail, 0);
	assert_int_equal(kv_extent_free(s, &e[1]), 0);
	assert_int_equal(kv_extent_alloc(s, 4096, &e[3]), 0);
	assert_int_equal(kv_extent_alloc(s, 4096, &e[1]), -ENOSPC);
	kv_store_close(s);
}

static void test_free_punches_and_reuses(void **state)
{
	struct kv_extent a, b, c;
	struct stat before, after;
	struct kv_store *s;
	struct tstore t;

	tstore_init(&t, "punch", 1, 16 * MIB);
	s = tstore_open(&t);
	write_one(s, 256 * 1024, 1, &a);
	write_one(s, 256 * 1024, 2, &b);
	assert_int_equal(kv_store_sync(s, (struct kv_extent[]){ a, b }, 2), 0);
	before = seg_stat(&t, 0, 0);
	assert_int_equal(kv_extent_free(s, &a), 0);
	after = seg_stat(&t, 0, 0);
	assert_true(after.st_blocks * 512 <= before.st_blocks * 512 -
		    256 * 1024);
	assert_int_equal(after.st_size, before.st_size);  /* KEEP_SIZE */
	/* a double free is refused, not silently accepted */
	capture_start();
	assert_int_equal(kv_extent_free(s, &a), -EINVAL);
	capture_stop();

	/* first fit reuses the hole before growing the file */
	assert_int_equal(kv_extent_alloc(s, 100000, &c), 0);
	assert_int_equal(c.segment, a.segment);
	assert_int_equal(c.offset, a.offset);
	check_one(s, &b, 2);
	kv_store_close(s);
}

static void test_free_unlinks_segment(void **state)
{
	struct kv_extent a, b, c, d;
	struct kv_store_usage u;
	struct kv_store *s;
	struct tstore t;

	tstore_init(&t, "unlink", 1, MIB);
	s = tstore_open(&t);
	write_one(s, 400 * 1024, 1, &a);
	write_one(s, 400 * 1024, 2, &b);
	write_one(s, 400 * 1024, 3, &c);  /* does not fit: segment 1 */
	assert_int_equal(a.segment, 0);
	assert_int_equal(b.segment, 0);
	assert_int_equal(c.segment, 1);
	assert_true(seg_exists(&t, 0, 0));

	assert_int_equal(kv_extent_free(s, &a), 0);
	assert_true(seg_exists(&t, 0, 0));
	assert_int_equal(kv_extent_free(s, &b), 0);
	assert_false(seg_exists(&t, 0, 0));
	kv_store_usage(s, &u);
	assert_int_equal(u.segments, 1);
	/* syncing an extent of the removed segment is not an error */
	assert_int_equal(kv_store_sync(s, &a, 1), 0);

	/* the tail segment is truncated, not unlinked, and reused from 0 */
	assert_int_equal(kv_extent_free(s, &c), 0);
	assert_true(seg_exists(&t, 0, 1));
	assert_int_equal(seg_stat(&t, 0, 1).st_size, 0);
	assert_int_equal(kv_extent_alloc(s, 4096, &d), 0);
	assert_int_equal(d.segment, 1);
	assert_int_equal(d.offset, 0);
	kv_store_close(s);
}

/* ---- I/O ---- */

struct async_done {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int calls;
};

static void on_done(void *arg)
{
	struct async_done *d = arg;

	pthread_mutex_lock(&d->mu);
	d->calls++;
	pthread_cond_signal(&d->cv);
	pthread_mutex_unlock(&d->mu);
}

static void test_batch_io(void **state)
{
	enum { N = 200 };
	struct kv_io *w = calloc(N, sizeof(*w)), *r = calloc(N, sizeof(*r));
	struct async_done d = { PTHREAD_MUTEX_INITIALIZER,
				PTHREAD_COND_INITIALIZER, 0 };
	struct kv_extent ext[N];
	struct kv_store *s;
	struct tstore t;

	tstore_init(&t, "batch", 3, 4 * MIB);
	t.o.queue_depth = 16;  /* fewer slots than ios: exercises the queue */
	s = tstore_open(&t);
	for (unsigned i = 0; i < N; i++) {
		uint64_t len = 1 + (i * 7919u) % (200 * 1024);

		assert_int_equal(kv_extent_alloc(s, len, &w[i].ext), 0);
		w[i].op = KV_IO_WRITE;
		w[i].buf = kv_buf_alloc(len);
		w[i].res = 12345;
		fill_pattern(w[i].buf, len, i);
		ext[i] = w[i].ext;
		r[i].op = KV_IO_READ;
		r[i].ext = w[i].ext;
		r[i].buf = kv_buf_alloc(len);
	}
	assert_int_equal(kv_store_io(s, w, N), 0);
	for (unsigned i = 0; i < N; i++)
		assert_int_equal(w[i].res, 0);
	assert_int_equal(kv_store_sync(s, ext, N), 0);

	assert_int_equal(kv_store_io_async(s, r, N, on_done, &d), 0);
	pthread_mutex_lock(&d.mu);
	while (d.calls == 0)
		pthread_cond_wait(&d.cv, &d.mu);
	pthread_mutex_unlock(&d.mu);
	assert_int_equal(d.calls, 1);
	for (unsigned i = 0; i < N; i++) {
		assert_int_equal(r[i].res, 0);
		assert_memory_equal(r[i].buf, w[i].buf, r[i].ext.length);
		free(w[i].buf);
		free(r[i].buf);
	}
	/* malformed requests queue nothing */
	struct kv_io bad = { .op = KV_IO_READ, .ext = ext[0] };
	bad.buf = (char *)kv_buf_alloc(8192) + 1;
	capture_start();
	assert_int_equal(kv_store_io(s, &bad, 1), -EINVAL);
	capture_stop();
	free((char *)bad.buf - 1);
	assert_int_equal(kv_store_io_async(s, r, 0, on_done, &d), -EINVAL);
	free(w);
	free(r);
	kv_store_close(s);
}

static void test_read_verified(void **state)
{
	uint8_t hash[KV_HASH_LEN];
	struct kv_extent e;
	struct kv_store *s;
	struct tstore t;
	char p[300], hex[2 * KV_HASH_LEN + 1], expect[200];
	void *buf, *out = (void *)1;
	uint64_t len = 70000;
	int fd;

	tstore_init(&t, "verify", 2, MIB);
	s = tstore_open(&t);
	buf = kv_buf_alloc(len);
	write_one(s, len, 7, &e);
	fill_pattern(buf, len, 7);
	kv_hash128(buf, len, hash);

	assert_int_equal(kv_store_read_verified(s, &e, hash, &out), 0);
	assert_non_null(out);
	assert_int_equal((uintptr_t)out % KV_ALIGN, 0);
	assert_memory_equal(out, buf, len);
	free(out);

	/* flip one byte on disk behind the store's back */
	seg_path(&t, e.stripe, e.segment, p, sizeof(p));
	fd = open(p, O_WRONLY);
	assert_true(fd >= 0);
	uint8_t flipped = ((uint8_t *)buf)[1234] ^ 0x40;
	assert_int_equal(pwrite(fd, &flipped, 1, (off_t)(e.offset + 1234)), 1);
	assert_int_equal(fsync(fd), 0);
	close(fd);

	capture_start();
	out = (void *)1;
	assert_int_equal(kv_store_read_verified(s, &e, hash, &out),
			 KV_ERR_CHECKSUM);
	capture_stop();
	assert_null(out);
	kv_hash_hex(hash, hex);
	snprintf(expect, sizeof(expect), "checksum mismatch on stripe %u "
		 "segment %u offset %llu length %llu: expected %s got ",
		 e.stripe, e.segment, (unsigned long long)e.offset,
		 (unsigned long long)len, hex);
	assert_non_null(strstr(log_buf, expect));
	free(buf);
	kv_store_close(s);
}

/* ---- recovery ---- */

static void test_recovery_reclaim(void **state)
{
	struct kv_extent a, b, c, x, d, n;
	struct kv_reclaim_stats st;
	struct stat before, after;
	struct kv_store *s;
	struct tstore t;
	uint64_t len = 64 * 1024;

	tstore_init(&t, "recover", 1, MIB);
	s = tstore_open(&t);
	write_one(s, len, 1, &a);
	write_one(s, len, 2, &b);
	write_one(s, len, 3, &c);
	write_one(s, len, 4, &x);            /* tail garbage after c */
	write_one(s, 800 * 1024, 5, &d);     /* segment 1, never committed */
	assert_int_equal(d.segment, 1);
	assert_int_equal(kv_store_sync(s, (struct kv_extent[]){ a, b, c, x, d },
				       5), 0);
	kv_store_close(s);

	before = seg_stat(&t, 0, 0);
	t.o.create = false;
	assert_int_equal(kv_store_open(&t.o, &s), 0);
	capture_start();
	assert_int_equal(kv_extent_alloc(s, 4096, &n), -EAGAIN);
	capture_stop();
	assert_int_equal(kv_store_mark_used(s, &c), 0);  /* any order */
	assert_int_equal(kv_store_mark_used(s, &a), 0);
	assert_int_equal(kv_store_reclaim(s, &st), 0);
	assert_int_equal(st.segments_removed, 1);
	assert_true(st.bytes_reclaimed >= 2 * len + 800 * 1024);

	assert_false(seg_exists(&t, 0, 1));
	after = seg_stat(&t, 0, 0);
	assert_int_equal(after.st_size, c.offset + len);
	assert_true((uint64_t)after.st_blocks * 512 <=
		    (uint64_t)before.st_blocks * 512 - 2 * len);

	check_one(s, &a, 1);
	check_one(s, &c, 3);
	/* b's punched range is allocatable again */
	assert_int_equal(kv_extent_alloc(s, len, &n), 0);
	assert_int_equal(n.segment, 0);
	assert_int_equal(n.offset, b.offset);
	capture_start();
	assert_int_equal(kv_store_mark_used(s, &a), -EINVAL);  /* too late */
	assert_int_equal(kv_store_reclaim(s, NULL), -EINVAL);
	capture_stop();
	kv_store_close(s);
}

static void test_mark_used_corrupt(void **state)
{
	struct kv_extent a, b, bad;
	struct kv_store *s;
	struct tstore t;

	tstore_init(&t, "corrupt", 2, MIB);
	s = tstore_open(&t);
	write_one(s, 64 * 1024, 1, &a);
	write_one(s, 64 * 1024, 2, &b);
	assert_int_equal(a.stripe, 0);
	kv_store_close(s);

	t.o.create = false;
	assert_int_equal(kv_store_open(&t.o, &s), 0);
	capture_start();
	assert_int_equal(kv_store_mark_used(s, &a), 0);
	/* overlapping the marked extent */
	bad = a;
	bad.offset = a.offset + 4096;
	bad.length = 4096;
	assert_int_equal(kv_store_mark_used(s, &bad), KV_ERR_CORRUPT);
	assert_non_null(strstr(log_buf, "overlaps"));
	assert_int_equal(kv_store_mark_used(s, &a), KV_ERR_CORRUPT);
	/* beyond the segment size */
	bad = a;
	bad.offset = MIB;
	assert_int_equal(kv_store_mark_used(s, &bad), KV_ERR_CORRUPT);
	bad.offset = UINT64_MAX - 4095;
	assert_int_equal(kv_store_mark_used(s, &bad), KV_ERR_CORRUPT);
	/* past the end of the file */
	bad = a;
	bad.offset = 512 * 1024;
	assert_int_equal(kv_store_mark_used(s, &bad), KV_ERR_CORRUPT);
	/* misaligned, empty, missing segment, missing stripe */
	bad = a;
	bad.offset = 100;
	assert_int_equal(kv_store_mark_used(s, &bad), KV_ERR_CORRUPT);
	bad = a;
	bad.length = 0;
	assert_int_equal(kv_store_mark_used(s, &bad), KV_ERR_CORRUPT);
	bad = a;
	bad.segment = 7;
	assert_int_equal(kv_store_mark_used(s, &bad), KV_ERR_CORRUPT);
	bad = a;
	bad.stripe = 2;
	assert_int_equal(kv_store_mark_used(s, &bad), KV_ERR_CORRUPT);
	capture_stop();
	/* the good one still counts */
	assert_int_equal(kv_store_mark_used(s, &b), 0);
	assert_int_equal(kv_store_reclaim(s, NULL), 0);
	check_one(s, &a, 1);
	check_one(s, &b, 2);
	kv_store_close(s);
}

static void test_stray_files_ignored(void **state)
{
	struct kv_reclaim_stats st;
	struct kv_store *s;
	struct tstore t;
	char p[300];
	int fd;

	tstore_init(&t, "stray", 1, MIB);
	s = tstore_open(&t);
	kv_store_close(s);
	snprintf(p, sizeof(p), "%s/notes.txt", t.dirs[0]);
	fd = open(p, O_WRONLY | O_CREAT, 0644);
	assert_true(fd >= 0);
	close(fd);
	t.o.create = false;
	capture_start();
	kv_log_set_level(KV_LOG_WARN);
	assert_int_equal(kv_store_open(&t.o, &s), 0);
	kv_log_set_level(KV_LOG_ERR);
	capture_stop();
	assert_non_null(strstr(log_buf, "notes.txt"));
	assert_int_equal(kv_store_reclaim(s, &st), 0);
	assert_int_equal(st.segments_removed, 0);
	assert_int_equal(access(p, F_OK), 0);  /* not ours: left alone */
	kv_store_close(s);
}

/* ---- fault injection ---- */

static void test_fault_eio(void **state)
{
	struct kv_io io = { .op = KV_IO_WRITE };
	struct kv_extent e, f;
	struct kv_store *s;
	struct tstore t;

	tstore_init(&t, "fault-eio", 2, MIB);
	s = tstore_open(&t);
	assert_int_equal(kv_extent_alloc(s, 8192, &e), 0);
	io.ext = e;
	io.buf = kv_buf_alloc(8192);
	fill_pattern(io.buf, 8192, 9);

	capture_start();
	kv_store_fault_arm(s, 1u << KV_IO_WRITE, 1, -EIO);
	assert_int_equal(kv_store_io(s, &io, 1), -EIO);
	assert_int_equal(io.res, -EIO);
	/* the fault fired once; the next write goes through */
	assert_int_equal(kv_store_io(s, &io, 1), 0);
	assert_int_equal(io.res, 0);
	check_one(s, &e, 9);

	/* the 2nd read from now fails, the others do not */
	struct kv_io r[3];
	for (unsigned i = 0; i < 3; i++) {
		r[i] = (struct kv_io){ .op = KV_IO_READ, .ext = e };
		r[i].buf = kv_buf_alloc(8192);
	}
	kv_store_fault_arm(s, 1u << KV_IO_READ, 2, -EIO);
	for (unsigned i = 0; i < 3; i++)
		kv_store_io(s, &r[i], 1);
	assert_int_equal(r[0].res, 0);
	assert_int_equal(r[1].res, -EIO);
	assert_int_equal(r[2].res, 0);

	/* an fsync failure reaches the syncer */
	write_one(s, 4096, 1, &f);
	kv_store_fault_arm(s, KV_FAULT_FSYNC, 1, -EIO);
	assert_int_equal(kv_store_sync(s, (struct kv_extent[]){ e, f }, 2),
			 -EIO);
	assert_int_equal(kv_store_sync(s, (struct kv_extent[]){ e, f }, 2), 0);

	/* disarm */
	kv_store_fault_arm(s, 1u << KV_IO_WRITE, 1, -EIO);
	kv_store_fault_arm(s, 0, 0, 0);
	assert_int_equal(kv_store_io(s, &io, 1), 0);
	capture_stop();
	for (unsigned i = 0; i < 3; i++)
		free(r[i].buf);
	free(io.buf);
	kv_store_close(s);
}

static void test_fault_short(void **state)
{
	struct kv_io io = { .op = KV_IO_WRITE };
	struct kv_extent e;
	struct kv_store *s;
	struct tstore t;
	uint64_t len = 300 * 1024 + 17;

	tstore_init(&t, "fault-short", 1, MIB);
	s = tstore_open(&t);
	assert_int_equal(kv_extent_alloc(s, len, &e), 0);
	io.ext = e;
	io.buf = kv_buf_alloc(len);
	fill_pattern(io.buf, len, 11);
	capture_start();
	kv_log_set_level(KV_LOG_DEBUG);
	/* half the footprint is reported written; the rest is retried */
	kv_store_fault_arm(s, 1u << KV_IO_WRITE, 1, 0);
	assert_int_equal(kv_store_io(s, &io, 1), 0);
	assert_non_null(strstr(log_buf, "short write at offset 0 (155648 of "
			       "311296 bytes)"));
	/* -EAGAIN is requeued, not reported */
	kv_store_fault_arm(s, 1u << KV_IO_WRITE, 1, -EAGAIN);
	assert_int_equal(kv_store_io(s, &io, 1), 0);
	free(io.buf);

	log_buf[0] = '\0';
	kv_store_fault_arm(s, 1u << KV_IO_READ, 1, 0);
	check_one(s, &e, 11);
	assert_non_null(strstr(log_buf, "short read"));
	kv_store_fault_arm(s, 1u << KV_IO_READ, 1, -EINTR);
	check_one(s, &e, 11);
	kv_log_set_level(KV_LOG_ERR);
	capture_stop();
	kv_store_close(s);
}

/* A stripe whose filesystem said ENOSPC is skipped until something frees. */
static void test_stripe_full(void **state)
{
	struct kv_io io = { .op = KV_IO_WRITE };
	struct kv_extent e, other, f;
	struct kv_store *s;
	struct tstore t;

	tstore_init(&t, "stripe-full", 2, MIB);
	s = tstore_open(&t);
	write_one(s, 4096, 1, &other);          /* stripe 0 */
	assert_int_equal(kv_extent_alloc(s, 4096, &e), 0);
	assert_int_equal(e.stripe, 1);
	io.ext = e;
	io.buf = kv_buf_alloc(4096);
	capture_start();
	kv_store_fault_arm(s, 1u << KV_IO_WRITE, 1, -ENOSPC);
	assert_int_equal(kv_store_io(s, &io, 1), -ENOSPC);
	capture_stop();
	assert_non_null(strstr(log_buf, t.dirs[1]));
	for (unsigned i = 0; i < 4; i++) {
		assert_int_equal(kv_extent_alloc(s, 4096, &f), 0);
		assert_int_equal(f.stripe, 0);
	}
	/* space freed on stripe 1: it takes allocations again */
	assert_int_equal(kv_extent_free(s, &e), 0);
	assert_int_equal(kv_extent_alloc(s, 4096, &f), 0);
	assert_int_equal(kv_extent_alloc(s, 4096, &e), 0);
	assert_int_not_equal(f.stripe, e.stripe);
	free(io.buf);
	kv_store_close(s);
}

/* ---- concurrency ---- */

struct worker {
	struct kv_store *s;
	unsigned id;
	unsigned errors;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	for (unsigned it = 0; it < 150; it++) {
		struct kv_io io[4];
		void *check = kv_buf_alloc(64 * 1024);

		for (unsigned i = 0; i < 4; i++) {
			uint64_t len = 4096 + (w->id * 1000 + it * 37 + i) % 60000;

			io[i] = (struct kv_io){ .op = KV_IO_WRITE };
			if (kv_extent_alloc(w->s, len, &io[i].ext))
				w->errors++;
			io[i].buf = kv_buf_alloc(len);
			fill_pattern(io[i].buf, len, w->id * 100000 + it * 4 + i);
		}
		if (kv_store_io(w->s, io, 4))
			w->errors++;
		for (unsigned i = 0; i < 4; i++) {
			struct kv_io r = { .op = KV_IO_READ, .ext = io[i].ext,
					   .buf = check };

			if (kv_store_io(w->s, &r, 1) ||
			    memcmp(check, io[i].buf, io[i].ext.length))
				w->errors++;
			if (kv_extent_free(w->s, &io[i].ext))
				w->errors++;
			free(io[i].buf);
		}
		free(check);
	}
	return NULL;
}

static void test_concurrent_io(void **state)
{
	struct worker w[4];
	pthread_t th[4];
	struct kv_store_usage u;
	struct kv_store *s;
	struct tstore t;

	tstore_init(&t, "concurrent", 3, 2 * MIB);
	s = tstore_open(&t);
	for (unsigned i = 0; i < 4; i++) {
		w[i] = (struct worker){ .s = s, .id = i };
		assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]),
				 0);
	}
	for (unsigned i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(w[i].errors, 0);
	}
	kv_store_usage(s, &u);
	assert_int_equal(u.extents, 0);
	assert_int_equal(u.used, 0);
	kv_store_close(s);
}

static void test_buffered_mode(void **state)
{
	struct kv_extent e;
	struct kv_store *s;
	struct tstore t;

	tstore_init(&t, "buffered", 1, MIB);
	t.o.no_direct = true;
	s = tstore_open(&t);
	write_one(s, 12345, 3, &e);
	check_one(s, &e, 3);
	kv_store_close(s);
}

/* ---- hash, errors, log ---- */

static void test_hash_and_errors(void **state)
{
	uint8_t h[KV_HASH_LEN];
	char hex[2 * KV_HASH_LEN + 1];

	/* values printed by `xxhsum -H2` */
	kv_hash128("abc", 3, h);
	kv_hash_hex(h, hex);
	assert_string_equal(hex, "06b05ab6733a618578af5f94892f3950");
	kv_hash128("", 0, h);
	kv_hash_hex(h, hex);
	assert_string_equal(hex, "99aa06d3014798d86001c324468d497f");

	assert_int_equal(kv_errno(KV_ERR_CHECKSUM), EIO);
	assert_int_equal(kv_errno(KV_ERR_CORRUPT), EIO);
	assert_int_equal(kv_errno(KV_ERR_SCHEMA), EPROTONOSUPPORT);
	assert_int_equal(kv_errno(KV_ERR_NOTSTORE), EINVAL);
	assert_int_equal(kv_errno(KV_ERR_MISMATCH), EINVAL);
	assert_int_equal(kv_errno(-ENOSPC), ENOSPC);
	assert_int_equal(kv_errno(0), 0);
	assert_string_equal(kv_strerror(-ENOENT), strerror(ENOENT));
	assert_string_equal(kv_strerror(KV_ERR_CHECKSUM),
			    "payload checksum mismatch");
	assert_non_null(kv_strerror(KV_ERR_BASE - 99));
	assert_non_null(kv_strerror(-99999));

	capture_start();
	kv_log_set_level(KV_LOG_WARN);
	kv_log(KV_LOG_INFO, "hidden %d", 1);
	kv_log(KV_LOG_WARN, "shown %d", 2);
	kv_log_set_level(KV_LOG_ERR);
	capture_stop();
	assert_string_equal(log_buf, "shown 2\n");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_markers),
		cmocka_unit_test(test_alloc_alignment),
		cmocka_unit_test(test_round_robin),
		cmocka_unit_test(test_efbig),
		cmocka_unit_test(test_capacity),
		cmocka_unit_test(test_free_punches_and_reuses),
		cmocka_unit_test(test_free_unlinks_segment),
		cmocka_unit_test(test_batch_io),
		cmocka_unit_test(test_read_verified),
		cmocka_unit_test(test_recovery_reclaim),
		cmocka_unit_test(test_mark_used_corrupt),
		cmocka_unit_test(test_stray_files_ignored),
		cmocka_unit_test(test_fault_eio),
		cmocka_unit_test(test_fault_short),
		cmocka_unit_test(test_stripe_full),
		cmocka_unit_test(test_concurrent_io),
		cmocka_unit_test(test_buffered_mode),
		cmocka_unit_test(test_hash_and_errors),
	};

	return cmocka_run_group_tests_name("store", tests, group_setup,
					   group_teardown);
}
