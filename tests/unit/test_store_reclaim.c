/*
 * Unit tests of the extent store (store/): recovery at open. Marked
 * extents are kept and everything else is punched, truncated or unlinked;
 * bad or overlapping marks are refused before anything changes; extents
 * freed before reclaim are returned by it. Every test works in its own
 * directory; see store_fixture.h.
 */
#include "store_fixture.h"

/* ---- recovery ---- */

static void test_recovery_reclaim(void **state)
{
	struct kv_extent a, b, c, x, d, n, e, f, g;
	struct kv_store_usage u;
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
	/* Before reclaim (a mount whose manifest is still being read): new
	 * extents go to a segment made now, above both found at open, and
	 * the budget counts the found files as used. */
	kv_store_usage(s, &u);
	assert_true(u.used >= (uint64_t)before.st_size + 800 * 1024);
	write_one(s, len, 6, &e);
	assert_int_equal(e.segment, 2);
	assert_int_equal(e.offset, 0);
	write_one(s, len, 7, &f);
	assert_int_equal(f.segment, 2);
	assert_int_equal(f.offset, len);
	assert_int_equal(kv_store_sync(s, (struct kv_extent[]){ e, f }, 2), 0);
	assert_int_equal(kv_extent_free(s, &f), 0);  /* a failed write's: reused */
	write_one(s, len, 8, &g);
	assert_int_equal(g.segment, 2);
	assert_int_equal(g.offset, f.offset);
	/* b, found at open and no longer named: left for reclaim */
	assert_int_equal(kv_extent_free(s, &b), 0);
	assert_int_equal(kv_store_mark_used(s, &c), 0);  /* any order */
	assert_int_equal(kv_store_mark_used(s, &e), 0);  /* made since: ignored */
	assert_int_equal(kv_store_mark_used(s, &a), 0);
	assert_int_equal(kv_store_reclaim(s, &st), 0);
	assert_int_equal(st.segments_removed, 1);
	assert_true(st.bytes_reclaimed >= 2 * len + 800 * 1024);

	assert_false(seg_exists(&t, 0, 1));
	assert_true(seg_exists(&t, 0, 2));
	after = seg_stat(&t, 0, 0);
	assert_int_equal(after.st_size, c.offset + len);
	assert_true((uint64_t)after.st_blocks * 512 <=
		    (uint64_t)before.st_blocks * 512 - 2 * len);

	check_one(s, &a, 1);
	check_one(s, &c, 3);
	check_one(s, &e, 6);
	check_one(s, &g, 8);
	kv_store_usage(s, &u);
	assert_int_equal(u.extents, 4);
	assert_int_equal(u.used, 4 * len);
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

/*
 * Pages removed while the index still loads (engine/loading.c): their
 * extents are freed before reclaim, and the caller still marks them (its
 * manifest held them at open). Reclaim must return them anyway, keep the
 * others, and a free after reclaim of an extent marked then is a plain
 * free. Fails where an early free is ignored and its mark kept.
 */
static void test_recovery_early_free(void **state)
{
	struct kv_extent a, b, c, d, n;
	struct kv_store_usage u;
	uint64_t used0;
	struct kv_reclaim_stats st;
	struct kv_store *s;
	struct tstore t;
	uint64_t len = 64 * 1024;

	tstore_init(&t, "early", 1, MIB);
	s = tstore_open(&t);
	write_one(s, len, 1, &a);
	write_one(s, len, 2, &b);
	write_one(s, len, 3, &c);
	write_one(s, len, 4, &d);
	assert_int_equal(kv_store_sync(s, (struct kv_extent[]){ a, b, c, d }, 4), 0);
	kv_store_close(s);

	t.o.create = false;
	assert_int_equal(kv_store_open(&t.o, &s), 0);
	kv_store_usage(s, &u);
	used0 = u.used;
	assert_int_equal(kv_extent_free(s, &d), 0);      /* before the marks */
	kv_store_usage(s, &u);                           /* counts at once */
	assert_int_equal(u.used, used0 - len);
	assert_int_equal(kv_store_mark_used(s, &a), 0);
	assert_int_equal(kv_store_mark_used(s, &b), 0);
	assert_int_equal(kv_store_mark_used(s, &c), 0);
	assert_int_equal(kv_store_mark_used(s, &d), 0);
	assert_int_equal(kv_extent_free(s, &b), 0);      /* after its mark */
	assert_int_equal(kv_store_reclaim(s, &st), 0);
	assert_true(st.bytes_reclaimed >= 2 * len);
	kv_store_usage(s, &u);
	assert_int_equal(u.extents, 2);
	assert_int_equal(u.used, 2 * len);
	assert_int_equal(seg_stat(&t, 0, 0).st_size, c.offset + len);  /* d's tail */
	check_one(s, &a, 1);
	check_one(s, &c, 3);
	/* b's range is free again, and c, marked, is freed the plain way */
	assert_int_equal(kv_extent_alloc(s, len, &n), 0);
	assert_int_equal(n.segment, 0);
	assert_int_equal(n.offset, b.offset);
	assert_int_equal(kv_extent_free(s, &c), 0);
	kv_store_usage(s, &u);
	assert_int_equal(u.extents, 2);
	check_one(s, &a, 1);
	kv_store_close(s);
}

/*
 * A degraded open: an extent on the missing stripe freed before its mark
 * and the reclaim. Nothing is punched there; the counts must end as if it
 * had never been marked (they once kept its mark for the whole mount).
 */
static void test_recovery_early_free_missing(void **state)
{
	struct kv_extent on0, on1;
	struct kv_store_usage u;
	struct kv_store *s;
	struct tstore t;

	tstore_init(&t, "early-missing", 2, MIB);
	s = tstore_open(&t);
	write_one(s, 4096, 1, &on0);
	write_one(s, 8192, 2, &on1);
	assert_int_equal(on1.stripe, 1);
	kv_store_close(s);
	tstore_marker_away(&t, 1, true);
	t.o.create = false;
	t.o.degraded = true;
	assert_int_equal(kv_store_open(&t.o, &s), 0);
	assert_int_equal(kv_extent_free(s, &on1), 0);
	assert_int_equal(kv_store_mark_used(s, &on0), 0);
	assert_int_equal(kv_store_mark_used(s, &on1), 0);
	assert_int_equal(kv_store_reclaim(s, NULL), 0);
	kv_store_usage(s, &u);
	assert_int_equal(u.extents, 1);
	assert_int_equal(u.used, kv_extent_footprint(&on0));
	check_one(s, &on0, 1);
	kv_store_close(s);
	tstore_marker_away(&t, 1, false);
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

/* A store whose only segment file is size bytes long (sparse): extents can
 * be marked anywhere in it without writing them first. */
static struct kv_store *open_sparse(struct tstore *t, const char *name,
				    uint64_t segsize, uint64_t size)
{
	struct kv_store *s;
	char p[300];
	int fd;

	tstore_init(t, name, 1, segsize);
	s = tstore_open(t);
	kv_store_close(s);
	seg_path(t, 0, 0, p, sizeof(p));
	fd = open(p, O_RDWR | O_CREAT, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)size), 0);
	close(fd);
	t->o.create = false;
	assert_int_equal(kv_store_open(&t->o, &s), 0);
	return s;
}

/* Shuffled offsets of the 4 KiB blocks 0..n-1 (a fixed LCG: repeatable). */
static uint32_t *shuffled_blocks(uint32_t n)
{
	uint32_t *v = malloc(n * sizeof(*v));
	uint64_t x = 12345;

	assert_non_null(v);
	for (uint32_t i = 0; i < n; i++)
		v[i] = i;
	for (uint32_t i = n - 1; i > 0; i--) {
		uint32_t j, t;

		x = x * 6364136223846793005ull + 1442695040888963407ull;
		j = (uint32_t)((x >> 33) % (i + 1));
		t = v[i];
		v[i] = v[j];
		v[j] = t;
	}
	return v;
}

/*
 * Marks arrive in any order (the index walks hash slots): thousands of
 * them shuffled give the same allocator as in order. Every third block is
 * left unmarked, so reclaim must find each gap between sorted neighbours.
 */
static void test_mark_out_of_order(void **state)
{
	enum { N = 30000 };
	uint32_t *blk = shuffled_blocks(N);
	struct kv_reclaim_stats st;
	struct kv_store_usage u;
	struct kv_extent e, n;
	struct kv_store *s;
	struct tstore t;
	uint64_t marked = 0;

	s = open_sparse(&t, "unsorted", 256 * MIB, (uint64_t)N * 4096);
	for (uint32_t i = 0; i < N; i++) {
		if (blk[i] % 3 == 1)
			continue;
		/* some payloads end mid-block: the footprint is what counts */
		e = (struct kv_extent){ .stripe = 0, .segment = 0,
					.offset = (uint64_t)blk[i] * 4096,
					.length = 4096 - (blk[i] % 2) * 100 };
		assert_int_equal(kv_store_mark_used(s, &e), 0);
		marked++;
	}
	assert_int_equal(kv_store_reclaim(s, &st), 0);
	assert_int_equal(st.segments_removed, 0);
	kv_store_usage(s, &u);
	assert_int_equal(u.extents, marked);
	assert_int_equal(u.used, marked * 4096);
	/* the free list holds exactly the unmarked blocks, lowest first */
	for (uint32_t b = 1; b < N; b += 3) {
		assert_int_equal(kv_extent_alloc(s, 4096, &n), 0);
		assert_int_equal(n.segment, 0);
		assert_int_equal(n.offset, (uint64_t)b * 4096);
	}
	/* then the bump pointer, after the last marked block */
	assert_int_equal(kv_extent_alloc(s, 4096, &n), 0);
	assert_int_equal(n.offset, (uint64_t)N * 4096);
	kv_store_close(s);
	free(blk);
}

/* Offsets far apart (keys of 23 bits: three radix passes), shuffled. */
static void test_mark_far_apart(void **state)
{
	enum { N = 2000 };
	const uint64_t stride = 16 * MIB + 4096;
	uint32_t *blk = shuffled_blocks(N);
	struct kv_store_usage u;
	struct kv_extent e, n;
	struct kv_store *s;
	struct tstore t;

	s = open_sparse(&t, "far", 32 * 1024 * MIB, N * stride);
	for (uint32_t i = 0; i < N; i++) {
		e = (struct kv_extent){ .offset = blk[i] * stride, .length = 4096 };
		assert_int_equal(kv_store_mark_used(s, &e), 0);
	}
	e = (struct kv_extent){ .offset = 1000 * stride + 4096, .length = 4096 };
	assert_int_equal(kv_store_mark_used(s, &e), 0);   /* touches, no overlap */
	assert_int_equal(kv_store_reclaim(s, NULL), 0);
	kv_store_usage(s, &u);
	assert_int_equal(u.extents, N + 1);
	/* first fit: the gap right after the extent at 0 */
	assert_int_equal(kv_extent_alloc(s, 4096, &n), 0);
	assert_int_equal(n.offset, 4096);
	kv_store_close(s);
	free(blk);
}

/*
 * Overlaps are found after the sort, wherever the two marks came in the
 * sequence: reclaim refuses them with KV_ERR_CORRUPT and a line naming
 * both, changes nothing on disk, and leaves the allocator unusable; the
 * next open with the right marks recovers everything.
 */
static void test_mark_overlap_refused(void **state)
{
	enum { N = 5000 };
	static const struct { uint64_t off, len; } dup[] = {
		{ 0, 4096 },                 /* the first block again */
		{ 2500 * 4096 + 4096, 1 },   /* inside a 2-block extent's tail */
		{ (N - 1) * 4096ull, 8192 }, /* the last block, running past it */
	};
	uint32_t *blk = shuffled_blocks(N);
	struct kv_extent e;
	struct kv_store *s;
	struct tstore t;
	struct stat before, after;

	for (unsigned d = 0; d < 3; d++) {
		char name[32];

		snprintf(name, sizeof(name), "overlap%u", d);
		s = open_sparse(&t, name, 256 * MIB, (uint64_t)(N + 1) * 4096);
		before = seg_stat(&t, 0, 0);
		for (uint32_t i = 0; i < N; i++) {
			if (blk[i] == 2501)
				continue;   /* covered by block 2500's extent */
			e = (struct kv_extent){ .offset = (uint64_t)blk[i] * 4096,
						.length = blk[i] == 2500 ? 8192 : 4096 };
			assert_int_equal(kv_store_mark_used(s, &e), 0);
			if (i == N / 2 + d) {   /* the overlapping one, mid-stream */
				e = (struct kv_extent){ .offset = dup[d].off,
							.length = dup[d].len };
				assert_int_equal(kv_store_mark_used(s, &e), 0);
			}
		}
		capture_start();
		assert_int_equal(kv_store_reclaim(s, NULL), KV_ERR_CORRUPT);
		assert_non_null(strstr(log_buf, "overlap"));
		capture_stop();
		after = seg_stat(&t, 0, 0);
		assert_int_equal(after.st_size, before.st_size);  /* nothing truncated */
		kv_store_close(s);
		assert_true(seg_exists(&t, 0, 0));
	}
	free(blk);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_recovery_reclaim),
		cmocka_unit_test(test_recovery_early_free),
		cmocka_unit_test(test_recovery_early_free_missing),
		cmocka_unit_test(test_mark_used_corrupt),
		cmocka_unit_test(test_mark_out_of_order),
		cmocka_unit_test(test_mark_far_apart),
		cmocka_unit_test(test_mark_overlap_refused),
	};

	return cmocka_run_group_tests_name("store_reclaim", tests, group_setup,
					   group_teardown);
}
