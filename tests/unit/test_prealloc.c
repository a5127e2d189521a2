/*
 * Unit tests of segment preallocation (store/prealloc.c): segments are
 * fallocate'd ahead of the write pointer; what is preallocated stays within
 * the capacity on disk and counts as the store's room; close gives it back;
 * after a crash the reclaim at open returns it with everything else no
 * extent names.
 */
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include "store_fixture.h"

/* Wait (at most 10 s) until the thread has preallocated at least min bytes
 * and is idle (two equal readings 20 ms apart). */
static uint64_t settle(struct kv_store *s, uint64_t min)
{
	struct kv_store_usage u, v;

	for (int i = 0; i < 500; i++) {
		kv_store_usage(s, &u);
		nanosleep(&(struct timespec){ .tv_nsec = 20000000 }, NULL);
		kv_store_usage(s, &v);
		if (v.prealloc >= min && v.prealloc == u.prealloc)
			return v.prealloc;
	}
	return v.prealloc;
}

/* Bytes allocated on disk to every segment file of the store's stripes. */
static uint64_t disk_bytes(struct tstore *t)
{
	uint64_t sum = 0;

	for (unsigned i = 0; i < t->o.nstripes; i++)
		for (uint32_t n = 0; n < 64; n++)
			if (seg_exists(t, i, n))
				sum += (uint64_t)seg_stat(t, i, n).st_blocks * 512;
	return sum;
}

static void test_ahead_of_writes(void **state)
{
	struct tstore t;
	struct kv_extent e[4];
	struct kv_store *s;
	struct kv_store_usage u;
	uint64_t pa;

	tstore_init(&t, "ahead", 1, 64 * MIB);
	t.o.prealloc = 8 * MIB;
	s = tstore_open(&t);
	write_one(s, 64 << 10, 1, &e[0]);
	pa = settle(s, 4 * MIB);
	assert_true(pa >= 4 * MIB && pa <= 8 * MIB);
	/* the file is that long already, and its blocks are taken */
	assert_true((uint64_t)seg_stat(&t, 0, 0).st_size >= e[0].offset + (64 << 10) + pa);
	assert_true(disk_bytes(&t) >= (64 << 10) + pa);
	/* later extents land inside it, and read back */
	for (unsigned i = 1; i < 4; i++)
		write_one(s, 100000, 10 + i, &e[i]);
	for (unsigned i = 1; i < 4; i++)
		check_one(s, &e[i], 10 + i);
	check_one(s, &e[0], 1);
	kv_store_usage(s, &u);
	assert_int_equal(u.used, (64 << 10) + 3 * 102400);
	assert_true(u.prealloc > 0);
	kv_store_close(s);
	/* close gives the tail back: the file ends at the last extent */
	assert_int_equal(seg_stat(&t, 0, 0).st_size, 64 * 1024 + 3 * 102400);
	assert_true(disk_bytes(&t) <= (64 << 10) + 3 * 102400);
}

/* A budget of 16 MiB on two stripes, 64 MiB asked ahead: the disk never
 * holds more than the budget, and the store still fills to the byte.
 * st_blocks also counts ext4's extent-tree blocks (one 4 KiB block per
 * file once its extents no longer fit in the inode: the written and
 * unwritten parts of a preallocated file are separate extents), which is
 * the filesystem's metadata, not data: allowed, one per segment file. */
#define META (2 * 4096ull)
static void test_within_capacity(void **state)
{
	const uint64_t cap = 16 * MIB, len = 256 << 10;
	struct tstore t;
	struct kv_extent e[80];
	struct kv_store *s;
	struct kv_store_usage u;
	unsigned n = 0;
	int rc;

	tstore_init(&t, "cap", 2, 64 * MIB);
	t.o.prealloc = 64 * MIB;
	t.o.capacity = cap;
	s = tstore_open(&t);
	for (;;) {
		struct kv_io io = { .op = KV_IO_WRITE };

		rc = kv_extent_alloc(s, len, &e[n]);
		if (rc)
			break;
		io.ext = e[n];
		io.buf = kv_buf_alloc(len);
		fill_pattern(io.buf, len, n);
		assert_int_equal(kv_store_io(s, &io, 1), 0);
		free(io.buf);
		n++;
		if (n % 8 == 1)
			settle(s, 0);
		kv_store_usage(s, &u);
		assert_true(u.used + u.prealloc <= cap);
		assert_int_equal(u.avail, cap - u.used);  /* preallocated is room */
		assert_true(disk_bytes(&t) <= cap + META);
		assert_true(n < 80);
	}
	assert_int_equal(rc, -ENOSPC);
	assert_int_equal(n, cap / len);   /* nothing refused early */
	kv_store_usage(s, &u);
	assert_int_equal(u.used, cap);
	assert_int_equal(u.prealloc, 0);
	/* freeing makes room, which the thread may preallocate again */
	for (unsigned i = 0; i < n; i += 2)
		assert_int_equal(kv_extent_free(s, &e[i]), 0);
	settle(s, 0);
	kv_store_usage(s, &u);
	assert_true(u.used + u.prealloc <= cap);
	assert_true(disk_bytes(&t) <= cap + META);
	for (unsigned i = 1; i < n; i += 2)
		check_one(s, &e[i], i);
	kv_store_close(s);
}

/* A process that dies with preallocated tails (kill -9): the next open
 * keeps the committed extents and gives back everything else. */
static void test_crash_reclaim(void **state)
{
	struct kv_extent e[8];
	struct kv_reclaim_stats rs;
	struct kv_store_usage u;
	struct kv_store *s;
	struct tstore t;
	int fds[2], status;
	pid_t pid;

	tstore_init(&t, "crash", 1, 64 * MIB);
	t.o.prealloc = 16 * MIB;
	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		uint64_t pa;

		s = tstore_open(&t);
		for (unsigned i = 0; i < 8; i++)
			write_one(s, 200000, 100 + i, &e[i]);
		if (kv_store_sync(s, e, 8))
			_exit(2);
		pa = settle(s, 8 * MIB);
		if (write(fds[1], e, sizeof(e)) != sizeof(e) ||
		    write(fds[1], &pa, sizeof(pa)) != sizeof(pa))
			_exit(3);
		kill(getpid(), SIGKILL);
		_exit(4);
	}
	close(fds[1]);
	uint64_t pa = 0;

	assert_int_equal(read(fds[0], e, sizeof(e)), sizeof(e));
	assert_int_equal(read(fds[0], &pa, sizeof(pa)), sizeof(pa));
	close(fds[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	assert_true(pa >= 8 * MIB);
	/* the tail is still on disk after the "crash" */
	assert_true(disk_bytes(&t) >= 8 * 200704 + pa);

	/* "committed": the first five; the rest were never named by a row */
	t.o.create = false;
	t.o.prealloc = 0;
	assert_int_equal(kv_store_open(&t.o, &s), 0);
	for (unsigned i = 0; i < 5; i++)
		assert_int_equal(kv_store_mark_used(s, &e[i]), 0);
	assert_int_equal(kv_store_reclaim(s, &rs), 0);
	assert_true(rs.bytes_reclaimed >= pa + 3 * 200704);
	kv_store_usage(s, &u);
	assert_int_equal(u.used, 5 * 200704);
	assert_int_equal(u.prealloc, 0);
	assert_int_equal(seg_stat(&t, 0, 0).st_size, 5 * 200704);
	assert_int_equal(disk_bytes(&t), 5 * 200704);
	for (unsigned i = 0; i < 5; i++)
		check_one(s, &e[i], 100 + i);
	kv_store_close(s);
}

/* The knob the daemon and kvfs bench read. */
static void test_env(void **state)
{
	setenv("KVFS_PREALLOC", "0", 1);
	assert_int_equal(kv_store_prealloc_env(), 0);
	setenv("KVFS_PREALLOC", "off", 1);
	assert_int_equal(kv_store_prealloc_env(), 0);
	setenv("KVFS_PREALLOC", "16M", 1);
	assert_int_equal(kv_store_prealloc_env(), 16 * MIB);
	setenv("KVFS_PREALLOC", "sixteen", 1);
	assert_int_equal(kv_store_prealloc_env(), KV_PREALLOC_DEFAULT);
	unsetenv("KVFS_PREALLOC");
	assert_int_equal(kv_store_prealloc_env(), KV_PREALLOC_DEFAULT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ahead_of_writes),
		cmocka_unit_test(test_within_capacity),
		cmocka_unit_test(test_crash_reclaim),
		cmocka_unit_test(test_env),
	};
	char probe[] = "/tmp/kvfs-prealloc-probe-XXXXXX";
	int fd = mkstemp(probe), rc;

	/* the tests measure blocks fallocate takes: a filesystem without it
	 * (some overlays) cannot show any */
	if (fd < 0) {
		printf("SKIP: cannot create a file in /tmp\n");
		return 77;
	}
	rc = fallocate(fd, 0, 0, 1 << 20);
	close(fd);
	unlink(probe);
	if (rc < 0) {
		printf("SKIP: /tmp cannot fallocate (%s)\n", strerror(errno));
		return 77;
	}
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
