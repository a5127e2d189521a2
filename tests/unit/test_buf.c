/*
 * Unit tests of the payload buffer pool (store/buf.c): buffers are aligned
 * and reused, small ones cost their size in RSS (no alignment slack), freed
 * ones stay resident only up to KV_BUF_IDLE_MAX, and threads never share a
 * buffer. Tests run in order in one process: the pool is process-wide.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "store.h"

#define MIB (1024ull * 1024)

/* Sanitizers keep shadow memory for what the test touches: RSS then says
 * nothing about the pool, so its bounds are checked only without them. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RSS_CHECKED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define RSS_CHECKED 0
#endif
#endif
#ifndef RSS_CHECKED
#define RSS_CHECKED 1
#endif

static uint64_t rss_bytes(void)
{
	unsigned long size, resident;
	FILE *f = fopen("/proc/self/statm", "r");

	assert_non_null(f);
	assert_int_equal(fscanf(f, "%lu %lu", &size, &resident), 2);
	fclose(f);
	return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

static void test_sizes_and_reuse(void **state)
{
	struct kv_buf_stats a, b;
	uint8_t *p, *q;

	(void)state;
	assert_int_equal(kv_buf_footprint(1), KV_ALIGN + 2 * sizeof(void *));
	assert_int_equal(kv_buf_footprint(KV_ALIGN), KV_ALIGN + 2 * sizeof(void *));
	assert_int_equal(kv_buf_footprint(MIB), MIB);
	assert_int_equal(kv_buf_footprint(MIB + 1), MIB + KV_ALIGN);

	kv_buf_stats(&a);
	p = kv_buf_get(5000);               /* an 8 KiB slot */
	assert_non_null(p);
	assert_int_equal((uintptr_t)p % KV_ALIGN, 0);
	memset(p, 0xab, 8192);              /* all of the rounded size is ours */
	kv_buf_put(p, 8192);                /* any len of the same size */
	q = kv_buf_get(8000);
	assert_ptr_equal(q, p);             /* the warm one, bytes undefined */
	kv_buf_put(q, 5000);

	p = kv_buf_get(MIB);
	assert_non_null(p);
	assert_int_equal((uintptr_t)p % KV_ALIGN, 0);
	memset(p, 0xcd, MIB);
	kv_buf_put(p, MIB);
	q = kv_buf_get(MIB);
	assert_ptr_equal(q, p);
	kv_buf_put(q, MIB);
	kv_buf_put(NULL, MIB);
	kv_buf_stats(&b);
	assert_int_equal(b.gets - a.gets, 4);
	assert_int_equal(b.reused - a.reused, 2);
}

/*
 * 64 MiB of 4 KiB payloads cost 64 MiB (posix_memalign made it about 128),
 * and once they are all given back no more than KV_BUF_IDLE_MAX of them
 * stays resident; those given back cold read as zeros and are usable again.
 */
static void test_small_rss_bounded(void **state)
{
	enum { N = (64 * MIB) / KV_ALIGN };
	uint8_t **v = calloc(N, sizeof(*v));
	struct kv_buf_stats st;
	uint64_t base, full, after;
	unsigned zeros = 0;

	(void)state;
	assert_non_null(v);
	base = rss_bytes();
	for (unsigned i = 0; i < N; i++) {
		v[i] = kv_buf_get(KV_ALIGN);
		assert_non_null(v[i]);
		memset(v[i], 0x5a, KV_ALIGN);
	}
	full = rss_bytes();
	if (RSS_CHECKED)
		assert_true(full - base <= 64 * MIB + 4 * MIB);
	for (unsigned i = 0; i < N; i++)
		kv_buf_put(v[i], KV_ALIGN);
	after = rss_bytes();
	kv_buf_stats(&st);
	assert_true(st.idle_small <= KV_BUF_IDLE_MAX);
	if (RSS_CHECKED)
		assert_true(after <= full - (64 * MIB - KV_BUF_IDLE_MAX) + 4 * MIB);
	for (unsigned i = 0; i < N; i++) {
		v[i] = kv_buf_get(KV_ALIGN);
		assert_non_null(v[i]);
		zeros += v[i][0] == 0 && v[i][KV_ALIGN - 1] == 0;
		v[i][0] = 1;
	}
	/* the cold ones: everything past the idle budget */
	assert_true(zeros >= N - KV_BUF_IDLE_MAX / KV_ALIGN);
	for (unsigned i = 0; i < N; i++)
		kv_buf_put(v[i], KV_ALIGN);
	free(v);
}

static void test_large_idle_bounded(void **state)
{
	enum { N = 48 };
	uint8_t *v[N];
	struct kv_buf_stats st;

	(void)state;
	for (unsigned i = 0; i < N; i++) {
		v[i] = kv_buf_get(MIB);
		assert_non_null(v[i]);
		v[i][MIB - 1] = 7;
	}
	for (unsigned i = 0; i < N; i++)
		kv_buf_put(v[i], MIB);
	kv_buf_stats(&st);
	assert_true(st.idle_large <= KV_BUF_IDLE_MAX);
	assert_true(st.idle_large >= KV_BUF_IDLE_MAX - MIB);
	/* other sizes still get buffers once the kept ones are taken */
	v[0] = kv_buf_get(3 * MIB);
	assert_non_null(v[0]);
	v[0][3 * MIB - 1] = 1;
	kv_buf_put(v[0], 3 * MIB);
}

struct worker {
	unsigned id;
	unsigned bad;
};

/* Each thread stamps every buffer it holds and checks the stamp before
 * giving it back: a buffer handed to two holders at once would show. */
static void *churn(void *arg)
{
	struct worker *w = arg;
	static const size_t sizes[] = { 4096, 12288, 65536, 65537, 1 << 20 };
	uint8_t *held[8] = { 0 };
	size_t len[8] = { 0 };

	for (unsigned i = 0; i < 20000; i++) {
		unsigned k = i % 8;

		if (held[k]) {
			if (held[k][0] != w->id || held[k][len[k] - 1] != w->id)
				w->bad++;
			kv_buf_put(held[k], len[k]);
		}
		len[k] = sizes[(i * 7 + w->id) % 5];
		held[k] = kv_buf_get(len[k]);
		if (!held[k]) {
			w->bad++;
			continue;
		}
		held[k][0] = held[k][len[k] - 1] = (uint8_t)w->id;
	}
	for (unsigned k = 0; k < 8; k++)
		kv_buf_put(held[k], len[k]);
	return NULL;
}

static void test_threads(void **state)
{
	pthread_t t[4];
	struct worker w[4];

	(void)state;
	for (unsigned i = 0; i < 4; i++) {
		w[i] = (struct worker){ .id = i + 1 };
		assert_int_equal(pthread_create(&t[i], NULL, churn, &w[i]), 0);
	}
	for (unsigned i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(w[i].bad, 0);
	}
}

/* Cycle n buffers of len bytes (get all, mark, put all, get all again):
 * how many came back warm, still holding their mark (not faulted in and
 * zeroed anew). */
static unsigned cycle_warm(unsigned n, size_t len)
{
	uint8_t **v = calloc(n, sizeof(*v));
	unsigned warm = 0;

	assert_non_null(v);
	for (unsigned i = 0; i < n; i++) {
		v[i] = kv_buf_get(len);
		assert_non_null(v[i]);
		memset(v[i], 0xa5, len);
	}
	for (unsigned i = 0; i < n; i++)
		kv_buf_put(v[i], len);
	for (unsigned i = 0; i < n; i++) {
		v[i] = kv_buf_get(len);
		assert_non_null(v[i]);
		warm += v[i][0] == 0xa5 && v[i][len - 1] == 0xa5;
	}
	for (unsigned i = 0; i < n; i++)
		kv_buf_put(v[i], len);
	free(v);
	return warm;
}

/*
 * A write flood cycles the daemon's whole write-back budget of buffers
 * (256 MiB by default). With 32 MiB kept warm, the rest came back cold:
 * a page fault and a zeroed page per 4 KiB on every reuse (issue 21's
 * clear_page_erms). Raised to the budget, all of them stay warm. Runs
 * last: it changes the process-wide pool.
 */
static void test_idle_max_raised(void **state)
{
	(void)state;
	/* 96 MiB of 64 KiB and of 1 MiB buffers, the default bound: at most
	 * 32 MiB of each come back warm */
	assert_true(cycle_warm(1536, 64 << 10) <= KV_BUF_IDLE_MAX / (64 << 10));
	assert_true(cycle_warm(96, MIB) <= KV_BUF_IDLE_MAX / MIB);
	kv_buf_set_idle_max(128 * MIB);
	assert_int_equal(cycle_warm(1536, 64 << 10), 1536);
	assert_int_equal(cycle_warm(96, MIB), 96);
	/* never below the default */
	kv_buf_set_idle_max(0);
	assert_true(cycle_warm(256, 64 << 10) == 256);
}

/*
 * Once a flood is over, kv_buf_trim gives back every idle buffer beyond
 * KV_BUF_IDLE_MAX of each kind: small ones are MADV_DONTNEED'd (and kept
 * for reuse), large ones unmapped. What it says it gave back leaves the
 * idle counts and RSS; a second trim finds nothing; the pool still serves.
 * Runs last, after test_idle_max_raised: it changes the process-wide pool.
 */
static void test_trim_after_flood(void **state)
{
	struct kv_buf_stats a, b;
	uint64_t rss0, rss1, given;

	(void)state;
	kv_buf_set_idle_max(128 * MIB);
	assert_int_equal(cycle_warm(1536, 64 << 10), 1536);   /* 96 MiB */
	assert_int_equal(cycle_warm(96, MIB), 96);
	kv_buf_stats(&a);
	assert_true(a.idle_small >= 96 * MIB);
	assert_true(a.idle_large >= 96 * MIB);
	rss0 = rss_bytes();
	given = kv_buf_trim();
	rss1 = rss_bytes();
	kv_buf_stats(&b);
	assert_true(b.idle_small <= KV_BUF_IDLE_MAX && b.idle_small > KV_BUF_IDLE_MAX - (64 << 10));
	assert_true(b.idle_large <= KV_BUF_IDLE_MAX && b.idle_large > KV_BUF_IDLE_MAX - MIB);
	assert_int_equal(given, (a.idle_small - b.idle_small) + (a.idle_large - b.idle_large));
	assert_true(given >= 128 * MIB);
	if (RSS_CHECKED)
		assert_true(rss0 - rss1 >= given - 8 * MIB);
	assert_int_equal(kv_buf_trim(), 0);
	/* the pool still serves: the trimmed small slots come back zeroed */
	assert_true(cycle_warm(1536, 64 << 10) >= KV_BUF_IDLE_MAX / (64 << 10));
	assert_true(cycle_warm(96, MIB) >= KV_BUF_IDLE_MAX / MIB);
	kv_buf_set_idle_max(0);
}

/* kv_array_room (array.c): the first size, doubling, the array kept
 * below its capacity, and a size that would overflow refused with nothing
 * changed. */
static void test_array_room(void **state)
{
	uint64_t *v = NULL, *kept;
	size_t cap = 0, n;

	(void)state;
	for (n = 0; n < 100; n++) {
		v = kv_array_room(v, n, &cap, sizeof(*v), 16);
		assert_non_null(v);
		v[n] = n;
	}
	assert_int_equal(cap, 128);            /* 16, 32, 64, 128 */
	for (n = 0; n < 100; n++)
		assert_int_equal(v[n], n);
	assert_ptr_equal(kv_array_room(v, 100, &cap, sizeof(*v), 16), v);
	assert_int_equal(cap, 128);
	kept = v;
	cap = SIZE_MAX / 2 + 1;
	assert_null(kv_array_room(v, cap, &cap, sizeof(*v), 16));
	assert_int_equal(cap, SIZE_MAX / 2 + 1);
	cap = SIZE_MAX / 8;                     /* doubles, but not in bytes */
	assert_null(kv_array_room(v, cap, &cap, sizeof(*v), 16));
	assert_int_equal(cap, SIZE_MAX / 8);
	free(kept);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sizes_and_reuse),
		cmocka_unit_test(test_small_rss_bounded),
		cmocka_unit_test(test_large_idle_bounded),
		cmocka_unit_test(test_threads),
		cmocka_unit_test(test_idle_max_raised),
		cmocka_unit_test(test_trim_after_flood),
		cmocka_unit_test(test_array_room),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
