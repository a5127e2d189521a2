/*
 * Unit tests of reads from stripes in memory (store/memread.c): on tmpfs an
 * extent is served from the segment's mapping and verified in the same
 * pass; on a disk, or with KVFS_MAPPED_READS=off, the caller is sent to the
 * ring (-EOPNOTSUPP). A flipped byte is a checksum error, a segment cut
 * short behind the store's back is -EIO (never SIGBUS), and concurrent
 * readers of a segment share one mapping.
 */
#include <sys/vfs.h>
#include <linux/magic.h>

#include "store_fixture.h"

static bool shm_ok;

static int memread_setup(void **state)
{
	struct statfs sf;

	shm_ok = statfs("/dev/shm", &sf) == 0 && sf.f_type == TMPFS_MAGIC;
	strcpy(root, shm_ok ? "/dev/shm/kvfs-test-memread-XXXXXX"
			    : "/tmp/kvfs-test-memread-XXXXXX");
	if (!mkdtemp(root))
		return -1;
	kv_log_set_level(KV_LOG_ERR);
	return 0;
}

static void need_shm(void)
{
	if (!shm_ok) {
		print_message("/dev/shm is not tmpfs here: nothing to map\n");
		skip();
	}
}

/* A store of one stripe on tmpfs with one extent of len pattern bytes:
 * its expected bytes in *want and their hash. */
static struct kv_store *one_extent(struct tstore *t, const char *name, uint64_t len,
				   uint32_t seed, struct kv_extent *e, void **want,
				   uint8_t hash[KV_HASH_LEN])
{
	struct kv_store *s;

	tstore_init(t, name, 1, 4 * MIB);
	s = tstore_open(t);
	write_one(s, len, seed, e);
	*want = kv_buf_alloc(len);
	fill_pattern(*want, len, seed);
	kv_hash128(*want, len, hash);
	return s;
}

static void mapped_bytes_and_verified_read(void **state)
{
	uint8_t hash[KV_HASH_LEN];
	struct kv_extent e;
	struct kv_store *s;
	struct tstore t;
	const void *bytes;
	void *hold, *want, *out;
	uint64_t len = 70000;

	need_shm();
	s = one_extent(&t, "map", len, 3, &e, &want, hash);

	assert_int_equal(kv_store_map_extent(s, &e, &bytes, &hold), 0);
	assert_non_null(hold);
	assert_memory_equal(bytes, want, len);
	kv_store_unmap_extent(hold);

	assert_int_equal(kv_store_read_verified(s, &e, hash, &out), 0);
	assert_memory_equal(out, want, len);
	for (uint64_t i = len; i < kv_extent_footprint(&e); i++)
		assert_int_equal(((uint8_t *)out)[i], 0);   /* padding zeroed */
	kv_buf_put(out, kv_extent_footprint(&e));
	free(want);
	kv_store_close(s);
}

static void disk_or_switched_off_goes_to_the_ring(void **state)
{
	struct kv_extent e;
	struct kv_store *s;
	struct tstore t;
	char dir[] = "/var/tmp/kvfs-test-memread-XXXXXX";
	const void *bytes;
	void *hold;

	need_shm();
	tstore_init(&t, "off", 1, 4 * MIB);
	setenv("KVFS_MAPPED_READS", "off", 1);
	s = tstore_open(&t);
	unsetenv("KVFS_MAPPED_READS");
	write_one(s, 8192, 4, &e);
	assert_int_equal(kv_store_map_extent(s, &e, &bytes, &hold), -EOPNOTSUPP);
	assert_null(hold);
	check_one(s, &e, 4);
	kv_store_close(s);

	assert_non_null(mkdtemp(dir));
	memset(&t, 0, sizeof(t));
	snprintf(t.dirs[0], sizeof(t.dirs[0]), "%s/s0", dir);
	t.paths[0] = t.dirs[0];
	t.o = (struct kv_store_opts){ .nstripes = 1, .stripes = t.paths, .uuid = UUID,
				      .segment_size = 4 * MIB, .create = true };
	s = tstore_open(&t);
	write_one(s, 8192, 5, &e);
	assert_int_equal(kv_store_map_extent(s, &e, &bytes, &hold), -EOPNOTSUPP);
	kv_store_close(s);
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void flipped_byte_is_a_checksum_error(void **state)
{
	uint8_t hash[KV_HASH_LEN], flipped;
	struct kv_extent e;
	struct kv_store *s;
	struct tstore t;
	char p[300];
	void *want, *out = (void *)1;
	uint64_t len = 65536;
	int fd;

	need_shm();
	s = one_extent(&t, "flip", len, 6, &e, &want, hash);
	seg_path(&t, e.stripe, e.segment, p, sizeof(p));
	fd = open(p, O_WRONLY);
	assert_true(fd >= 0);
	flipped = ((uint8_t *)want)[40000] ^ 1;
	assert_int_equal(pwrite(fd, &flipped, 1, (off_t)(e.offset + 40000)), 1);
	close(fd);
	capture_start();
	assert_int_equal(kv_store_read_verified(s, &e, hash, &out), KV_ERR_CHECKSUM);
	capture_stop();
	assert_null(out);
	assert_non_null(strstr(log_buf, "checksum mismatch on stripe 0"));
	free(want);
	kv_store_close(s);
}

static void segment_cut_short_is_eio_not_sigbus(void **state)
{
	uint8_t hash[KV_HASH_LEN] = { 0 }, got[KV_HASH_LEN];
	struct kv_extent a, b;
	struct kv_store *s;
	struct tstore t;
	char p[300];
	const void *bytes;
	void *hold, *out, *buf = kv_buf_alloc(8192);

	need_shm();
	tstore_init(&t, "cut", 1, 4 * MIB);
	/* One segment written at a time (heads.c), so that a and b share
	 * a file and cutting it loses b alone. */
	setenv("KVFS_WRITE_HEADS", "1", 1);
	s = tstore_open(&t);
	unsetenv("KVFS_WRITE_HEADS");
	write_one(s, 8192, 7, &a);
	write_one(s, 8192, 8, &b);
	assert_int_equal(a.segment, b.segment);
	assert_true(b.offset > a.offset);
	assert_int_equal(kv_store_map_extent(s, &a, &bytes, &hold), 0);
	kv_store_unmap_extent(hold);
	seg_path(&t, b.stripe, b.segment, p, sizeof(p));
	assert_int_equal(truncate(p, (off_t)b.offset), 0);   /* b is gone */

	/* The store saw a longer file: it maps b, and the guarded copy
	 * finds the hole instead of dying of SIGBUS. */
	capture_start();
	assert_int_equal(kv_store_map_extent(s, &b, &bytes, &hold), 0);
	assert_int_equal(kv_store_copy_mapped(hold, buf, bytes, b.length, got), -EIO);
	kv_store_unmap_extent(hold);
	capture_stop();
	assert_non_null(strstr(log_buf, "cut short behind the store's back"));
	/* From now on the segment is read through the ring: b is a short
	 * read there (EIO), a still reads right. */
	assert_int_equal(kv_store_map_extent(s, &a, &bytes, &hold), -EOPNOTSUPP);
	assert_int_equal(kv_store_read_verified(s, &b, hash, &out), -EIO);
	check_one(s, &a, 7);

	kv_store_close(s);
	free(buf);
}

struct mapper {
	struct kv_store *s;
	struct kv_extent e;
	const void *bytes;
};

static void *map_main(void *arg)
{
	struct mapper *m = arg;
	void *hold;

	if (kv_store_map_extent(m->s, &m->e, &m->bytes, &hold) == 0)
		kv_store_unmap_extent(hold);
	return NULL;
}

static void readers_share_one_mapping(void **state)
{
	struct mapper m[8];
	pthread_t th[8];
	struct kv_extent e;
	struct kv_store *s;
	struct tstore t;

	need_shm();
	tstore_init(&t, "race", 1, 4 * MIB);
	s = tstore_open(&t);
	write_one(s, 4096, 9, &e);
	for (int i = 0; i < 8; i++) {
		m[i] = (struct mapper){ s, e, NULL };
		assert_int_equal(pthread_create(&th[i], NULL, map_main, &m[i]), 0);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		assert_non_null(m[i].bytes);
		assert_ptr_equal(m[i].bytes, m[0].bytes);
	}
	kv_store_close(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(mapped_bytes_and_verified_read),
		cmocka_unit_test(disk_or_switched_off_goes_to_the_ring),
		cmocka_unit_test(flipped_byte_is_a_checksum_error),
		cmocka_unit_test(segment_cut_short_is_eio_not_sigbus),
		cmocka_unit_test(readers_share_one_mapping),
	};

	return cmocka_run_group_tests(tests, memread_setup, group_teardown);
}
