/*
 * Unit tests of write heads (store/heads.c): on tmpfs consecutive
 * allocations take several segment files in turn, so their writes are not
 * serialised on one file's inode lock; on a disk stripe they pack the
 * lowest segment. Frees are reused, and a store written with heads opens again
 * with every extent where the manifest says it is.
 */
#include <sys/resource.h>
#include <sys/vfs.h>
#include <linux/magic.h>

#include "store_fixture.h"

static bool fs_is_memory(const char *path)
{
	struct statfs sf;

	return statfs(path, &sf) == 0 &&
	       (sf.f_type == TMPFS_MAGIC || sf.f_type == RAMFS_MAGIC);
}

/* Point the group's root at tmpfs (memory) or at a disk directory. */
static bool root_in(bool memory)
{
	static const char *const disk[] = { "/var/tmp", "/tmp", "." };

	if (memory) {
		if (!fs_is_memory("/dev/shm"))
			return false;
		strcpy(root, "/dev/shm/kvfs-test-heads-XXXXXX");
		return mkdtemp(root) != NULL;
	}
	for (unsigned i = 0; i < sizeof(disk) / sizeof(disk[0]); i++) {
		if (fs_is_memory(disk[i]))
			continue;
		snprintf(root, sizeof(root), "%s/kvfs-test-heads-XXXXXX", disk[i]);
		if (mkdtemp(root))
			return true;
	}
	root[0] = '\0';
	return false;
}

static void need_root(bool memory)
{
	/* The defaults under test, whatever the caller's shell exported. */
	unsetenv("KVFS_WRITE_HEADS");
	if (!root_in(memory)) {
		print_message("no %s directory here\n", memory ? "tmpfs" : "disk");
		skip();
	}
	kv_log_set_level(KV_LOG_ERR);
}

static int rm_root(void **state)
{
	if (root[0])
		nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	root[0] = '\0';
	return 0;
}

/* n extents of len bytes; each extent's segment into segs. */
static void write_n(struct kv_store *s, unsigned n, uint64_t len,
		    struct kv_extent *e, uint32_t *segs)
{
	for (unsigned i = 0; i < n; i++) {
		write_one(s, len, i + 1, &e[i]);
		segs[i] = e[i].segment;
	}
}

static void tmpfs_takes_four_segments_in_turn(void **state)
{
	struct kv_extent e[8];
	uint32_t segs[8];
	struct kv_store *s;
	struct tstore t;

	need_root(true);
	tstore_init(&t, "mem", 1, 4 * MIB);
	s = tstore_open(&t);
	write_n(s, 8, 65536, e, segs);
	for (unsigned i = 0; i < 8; i++)
		assert_int_equal(segs[i], i % 4);   /* 0 1 2 3 0 1 2 3 */
	for (unsigned i = 0; i < 8; i++)
		check_one(s, &e[i], i + 1);
	kv_store_close(s);
}

/* A disk stripe packs its lowest segment. Buffered writes (no_direct)
 * lock the file too, but every head would add an fdatasync per commit
 * there: a buffered disk store keeps one head as well. */
static void disk_packs_one_segment(bool no_direct)
{
	struct kv_extent e[8];
	uint32_t segs[8];
	struct kv_store *s;
	struct tstore t;

	need_root(false);
	tstore_init(&t, no_direct ? "buffered" : "disk", 1, 4 * MIB);
	t.o.no_direct = no_direct;
	s = tstore_open(&t);
	write_n(s, 8, 65536, e, segs);
	for (unsigned i = 0; i < 8; i++)
		assert_int_equal(segs[i], 0);
	kv_store_close(s);
}

static void disk_with_o_direct_packs_one_segment(void **state)
{
	disk_packs_one_segment(false);
}

static void buffered_disk_store_keeps_one_head(void **state)
{
	disk_packs_one_segment(true);
}

static void env_sets_the_number(void **state)
{
	struct kv_extent e[6];
	uint32_t segs[6];
	struct kv_store *s;
	struct tstore t;

	need_root(true);
	tstore_init(&t, "env2", 1, 4 * MIB);
	setenv("KVFS_WRITE_HEADS", "2", 1);
	s = tstore_open(&t);
	unsetenv("KVFS_WRITE_HEADS");
	write_n(s, 6, 65536, e, segs);
	for (unsigned i = 0; i < 6; i++)
		assert_int_equal(segs[i], i % 2);
	kv_store_close(s);

	/* Not a number in range: said, and the default (4 on tmpfs). */
	tstore_init(&t, "envbad", 1, 4 * MIB);
	setenv("KVFS_WRITE_HEADS", "99", 1);
	kv_log_set_level(KV_LOG_WARN);
	capture_start();
	s = tstore_open(&t);
	capture_stop();
	unsetenv("KVFS_WRITE_HEADS");
	assert_non_null(strstr(log_buf, "KVFS_WRITE_HEADS=99"));
	write_n(s, 4, 65536, e, segs);
	assert_int_equal(segs[3], 3);
	kv_store_close(s);
}

/* Segments that fill up make room for new heads; a freed range is taken
 * again once four segments have room; and after a reopen with every live
 * extent marked, each reads back and the store allocates again. */
static void full_heads_are_replaced_and_frees_reused(void **state)
{
	struct kv_extent e[32], again;
	uint32_t segs[32];
	struct kv_store *s;
	struct tstore t;
	bool reused = false;
	unsigned n = 0;

	need_root(true);
	tstore_init(&t, "fill", 1, 1 * MIB);
	s = tstore_open(&t);
	/* Four extents fill a segment. Twelve take segments 0-3 in turn;
	 * the thirteenth fills segment 0, and from then on a segment that
	 * fills is replaced by a new head at the next allocation. */
	write_n(s, 17, 256 * 1024, e, segs);
	for (unsigned i = 0; i < 13; i++)
		assert_int_equal(segs[i], i % 4);
	assert_int_equal(segs[13], 4);
	assert_int_equal(kv_extent_free(s, &e[5]), 0);   /* segment 1 */
	/* The hole is among the lowest heads with room: taken again within
	 * a few turns. */
	for (n = 17; n < 32 && !reused; n++) {
		write_one(s, 256 * 1024, n + 1, &e[n]);
		reused = e[n].segment == e[5].segment && e[n].offset == e[5].offset;
	}
	assert_true(reused);
	assert_true(n <= 17 + 8);
	kv_store_close(s);

	t.o.create = false;
	assert_int_equal(kv_store_open(&t.o, &s), 0);
	for (unsigned i = 0; i < n; i++)
		if (i != 5)
			assert_int_equal(kv_store_mark_used(s, &e[i]), 0);
	assert_int_equal(kv_store_reclaim(s, NULL), 0);
	for (unsigned i = 0; i < n; i++)
		if (i != 5)
			check_one(s, &e[i], i + 1);
	assert_int_equal(kv_extent_alloc(s, 4096, &again), 0);
	kv_store_close(s);
}

static unsigned count_lines(const char *what)
{
	unsigned n = 0;

	for (const char *p = log_buf; (p = strstr(p, what)); p++)
		n++;
	return n;
}

/* A new head that cannot be made (no file descriptors left) leaves the
 * allocation to the heads there are, said once, and is not tried again
 * at every allocation. */
static void no_new_head_falls_back_once(void **state)
{
	struct kv_extent e[6];
	struct rlimit saved, low;
	struct kv_store *s;
	struct tstore t;
	int probe;

	need_root(true);
	tstore_init(&t, "nofd", 1, 4 * MIB);
	s = tstore_open(&t);
	write_one(s, 65536, 1, &e[0]);       /* segment 0: the only head */
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &saved), 0);
	probe = open("/dev/null", O_RDONLY | O_CLOEXEC);
	assert_true(probe >= 0);
	close(probe);                         /* the lowest free descriptor */
	low = saved;
	low.rlim_cur = (rlim_t)probe;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	capture_start();
	for (unsigned i = 1; i < 6; i++)
		assert_int_equal(kv_extent_alloc(s, 65536, &e[i]), 0);
	capture_stop();
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &saved), 0);
	for (unsigned i = 1; i < 6; i++)
		assert_int_equal(e[i].segment, 0);
	assert_int_equal(count_lines("cannot open segment"), 1);
	kv_store_close(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(tmpfs_takes_four_segments_in_turn, rm_root),
		cmocka_unit_test_teardown(disk_with_o_direct_packs_one_segment, rm_root),
		cmocka_unit_test_teardown(buffered_disk_store_keeps_one_head, rm_root),
		cmocka_unit_test_teardown(env_sets_the_number, rm_root),
		cmocka_unit_test_teardown(full_heads_are_replaced_and_frees_reused, rm_root),
		cmocka_unit_test_teardown(no_new_head_falls_back_once, rm_root),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
