/*
 * Unit tests of the extent store (store/), part one: stripe markers, the
 * allocator (alignment, round-robin, free-list reuse, segment unlinking,
 * capacity, headroom), buffered mode, hashing and error codes (recovery:
 * test_store_reclaim.c). Every test works in its own directory; see
 * store_fixture.h.
 */
#include <sys/statvfs.h>

#include "store_fixture.h"

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

	/* segments the index cannot place extents in (index_i.h, struct xent) */
	t.o.segment_size = KV_SEGMENT_SIZE_MAX + KV_ALIGN;
	assert_int_equal(kv_store_open(&t.o, &s), -EINVAL);
	t.o.segment_size = KV_SEGMENT_SIZE_MAX;
	assert_int_equal(kv_store_open(&t.o, &s), 0);
	kv_store_close(s);
	t.o.segment_size = MIB;

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

/* A stripe without its marker: refused, unless opened degraded; then its
 * extents are accepted unchecked, reclaim leaves its files alone, reads
 * give EIO, nothing is allocated there and a free touches nothing. */
static void test_degraded_open(void **state)
{
	struct kv_extent on0, on1, f;
	struct kv_stripe_state ss;
	struct stat before, after;
	struct kv_io io = { .op = KV_IO_READ };
	struct kv_store *s;
	struct tstore t;

	tstore_init(&t, "degraded", 2, MIB);
	s = tstore_open(&t);
	write_one(s, 4096, 1, &on0);
	write_one(s, 8192, 2, &on1);
	assert_int_equal(on1.stripe, 1);
	kv_store_close(s);
	before = seg_stat(&t, 1, on1.segment);
	tstore_marker_away(&t, 1, true);

	t.o.create = false;
	assert_int_equal(kv_store_open(&t.o, &s), KV_ERR_NOTSTORE);
	t.o.degraded = true;
	assert_int_equal(kv_store_open(&t.o, &s), 0);
	assert_int_equal(kv_store_mark_used(s, &on0), 0);
	assert_int_equal(kv_store_mark_used(s, &on1), 0);
	assert_int_equal(kv_store_reclaim(s, NULL), 0);
	assert_int_equal(kv_store_stripe_state(s, 1, &ss), 0);
	assert_int_equal(ss.health, KV_STRIPE_MISSING);
	assert_int_equal(ss.error, KV_ERR_NOTSTORE);
	for (unsigned i = 0; i < 4; i++) {
		assert_int_equal(kv_extent_alloc(s, 4096, &f), 0);
		assert_int_equal(f.stripe, 0);
	}
	check_one(s, &on0, 1);
	io.ext = on1;
	io.buf = kv_buf_alloc(8192);
	assert_int_equal(kv_store_io(s, &io, 1), -EIO);
	free(io.buf);
	assert_int_equal(kv_extent_free(s, &on1), 0);
	kv_store_close(s);
	after = seg_stat(&t, 1, on1.segment);
	assert_int_equal(before.st_size, after.st_size);
	assert_int_equal(before.st_blocks, after.st_blocks);

	/* back with its marker: the extent is there as it was */
	tstore_marker_away(&t, 1, false);
	t.o.degraded = false;
	assert_int_equal(kv_store_open(&t.o, &s), 0);
	assert_int_equal(kv_store_mark_used(s, &on0), 0);
	assert_int_equal(kv_store_mark_used(s, &on1), 0);
	assert_int_equal(kv_store_reclaim(s, NULL), 0);
	check_one(s, &on1, 2);
	kv_store_close(s);

	/* no stripe at all: still refused */
	t.o.degraded = true;
	t.o.uuid = "another-store";
	assert_int_equal(kv_store_open(&t.o, &s), -ENOENT);
	assert_null(s);
}

/* Headroom on the manifest's filesystem (store/headroom.c): stripes on it
 * refuse what would leave less free, count their free space less the
 * headroom, and near it take an extent's blocks as it is handed out. */
static void test_headroom(void **state)
{
	struct kv_store_usage u;
	struct statvfs vfs;
	struct kv_extent e;
	struct kv_store *s;
	struct stat sb, here;
	struct tstore t;
	uint64_t avail, fp;

	tstore_init(&t, "headroom", 2, 16 * MIB);
	s = tstore_open(&t);
	assert_int_equal(statvfs(root, &vfs), 0);
	avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;

	/* more than the disk has: nothing is handed out, nothing counted free */
	assert_int_equal(kv_store_set_headroom(s, root, avail + 1024 * MIB, 0), 2);
	assert_int_equal(kv_store_headroom(s), avail + 1024 * MIB);
	kv_log_set_level(KV_LOG_WARN);     /* the refusal is a warning */
	capture_start();
	assert_int_equal(kv_extent_alloc(s, 4096, &e), -ENOSPC);
	capture_stop();
	kv_log_set_level(KV_LOG_ERR);
	assert_non_null(strstr(log_buf, "headroom of the manifest's filesystem"));
	kv_store_usage(s, &u);
	assert_int_equal(u.avail, 0);

	/* room enough, far from it: a sparse extent, as without headroom. Half
	 * the disk, so that what other processes free meanwhile cannot make
	 * the count look like more than the disk had (1 MiB did, once). */
	assert_int_equal(kv_store_set_headroom(s, root, avail / 2, 0), 2);
	assert_int_equal(kv_extent_alloc(s, 200000, &e), 0);
	fp = kv_extent_footprint(&e);
	assert_true((uint64_t)seg_stat(&t, e.stripe, e.segment).st_blocks * 512 < fp);
	kv_store_usage(s, &u);
	assert_true(u.avail > 0 && u.avail < avail);
	assert_int_equal(kv_extent_free(s, &e), 0);

	/* within the lag of it: the blocks are taken before any write */
	assert_int_equal(kv_store_set_headroom(s, root, MIB, avail), 2);
	assert_int_equal(kv_extent_alloc(s, 200000, &e), 0);
	sb = seg_stat(&t, e.stripe, e.segment);
	assert_true((uint64_t)sb.st_size >= e.offset + fp);
	assert_true((uint64_t)sb.st_blocks * 512 >= fp);
	assert_int_equal(kv_extent_free(s, &e), 0);
	assert_true((uint64_t)seg_stat(&t, e.stripe, e.segment).st_blocks * 512 < fp);

	/* a directory on another filesystem (if /dev/shm is one): no stripe
	 * keeps headroom, whatever the amount */
	assert_int_equal(stat(t.dirs[0], &here), 0);
	if (stat("/dev/shm", &sb) == 0 && sb.st_dev != here.st_dev) {
		assert_int_equal(kv_store_set_headroom(s, "/dev/shm", avail + 1024 * MIB, 0), 0);
		assert_int_equal(kv_store_headroom(s), 0);
		assert_int_equal(kv_extent_alloc(s, 4096, &e), 0);
		assert_int_equal(kv_extent_free(s, &e), 0);
	}
	kv_store_close(s);
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
		cmocka_unit_test(test_stray_files_ignored),
		cmocka_unit_test(test_buffered_mode),
		cmocka_unit_test(test_hash_and_errors),
		cmocka_unit_test(test_degraded_open),
		cmocka_unit_test(test_headroom),
	};

	return cmocka_run_group_tests_name("store", tests, group_setup,
					   group_teardown);
}
