/*
 * The engine stands alone: this program links every object of engine/
 * (link_whole) with store/ and index/ only, no fast/, no fuse/, no libfuse,
 * so any call from the engine up into a front end fails to link. It then
 * opens stores the way offline tools and the daemon do and checks which
 * threads each way starts (by their names, /proc/self/task/N/comm).
 */
#include <dirent.h>

#include "engine_fixture.h"
#include "kvfs_ioctl.h"

/* How many of this process's threads are named name (prefix "": how
 * many are not named kvfs-*, the main thread included). */
static int count_threads(const char *name, bool unnamed)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	char path[300], comm[32];
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d))) {
		FILE *fp;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		fp = fopen(path, "r");
		if (!fp)
			continue;     /* the thread just ended */
		if (fgets(comm, sizeof(comm), fp)) {
			comm[strcspn(comm, "\n")] = '\0';
			n += unnamed ? strncmp(comm, "kvfs-", 5) != 0 : !strcmp(comm, name);
		}
		fclose(fp);
	}
	closedir(d);
	return n;
}

static int threads_named(const char *name)
{
	return count_threads(name, false);
}

/* A new thread names itself when it first runs: wait (at most 5 s) until
 * the threads without a kvfs-* name are those there were before the open
 * (the main thread, and a sanitizer's own: TSan runs one). */
static void threads_settle(int unnamed_before)
{
	for (int i = 0; i < 500 && count_threads("", true) > unnamed_before; i++)
		usleep(10000);
	assert_int_equal(count_threads("", true), unnamed_before);
}

/* Open the fixture's store as a tool (offline) or as the daemon does. */
static struct kvfs *open_store(struct efix *f, bool offline)
{
	int unnamed = count_threads("", true);

	kvfs_opts_default(&f->opts);
	f->opts.offline = offline;
	efix_open(f);
	threads_settle(unnamed);
	return f->fs;
}

/* A tool (kvfs gc): the committer, no evictor, no RAM tier loader, no
 * segment preallocation; never the fast path's threads, which only fast/
 * starts. */
static void offline_open_starts_only_the_committer(void **state)
{
	open_store(*state, true);
	assert_int_equal(threads_named("kvfs-commit"), 1);
	assert_int_equal(threads_named("kvfs-evict"), 0);
	assert_int_equal(threads_named("kvfs-prefetch"), 0);
	assert_int_equal(threads_named("kvfs-prealloc"), 0);
	assert_int_equal(threads_named("kvfs-reaper"), 0);
	assert_int_equal(threads_named("kvfs-fast"), 0);
	assert_int_equal(efix_close(*state), 0);
	assert_int_equal(threads_named("kvfs-commit"), 0);
}

/* What the daemon opens: the cache-mode evictor and the loader as well,
 * and still nothing of the fast path's. */
static void serving_open_starts_the_engine_threads(void **state)
{
	open_store(*state, false);
	assert_int_equal(threads_named("kvfs-commit"), 1);
	assert_int_equal(threads_named("kvfs-evict"), 1);
	assert_int_equal(threads_named("kvfs-prefetch"), 1);
	/* segment preallocation, unless KVFS_PREALLOC turns it off */
	assert_int_equal(threads_named("kvfs-prealloc"), kv_store_prealloc_env() ? 1 : 0);
	assert_int_equal(threads_named("kvfs-reaper"), 0);
	assert_int_equal(threads_named("kvfs-fast"), 0);
	assert_int_equal(efix_close(*state), 0);
	assert_int_equal(threads_named("kvfs-evict") + threads_named("kvfs-prefetch") +
			 threads_named("kvfs-commit"), 0);
}

/* Offline gc on an empty store evicts nothing and succeeds without the
 * evictor thread or any front end's hooks. */
static void offline_gc_runs_without_hooks(void **state)
{
	struct kvfs *fs = open_store(*state, true);
	struct kvfs_gc_arg a = { .abi = KVFS_ABI_VERSION, .flags = KVFS_GC_TARGET,
				 .target_bytes = 0 };

	assert_int_equal(kvfs_gc(fs, &a), 0);
	assert_int_equal(a.pages, 0);
	assert_true(a.used_after <= a.used_before);
	assert_int_equal(efix_close(*state), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(offline_open_starts_only_the_committer,
						efix_setup, efix_teardown),
		cmocka_unit_test_setup_teardown(serving_open_starts_the_engine_threads,
						efix_setup, efix_teardown),
		cmocka_unit_test_setup_teardown(offline_gc_runs_without_hooks,
						efix_setup, efix_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
