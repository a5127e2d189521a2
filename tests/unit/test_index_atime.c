/*
 * Unit tests for the access-time flush's list of pages read
 * (kv_index_touched_walk, index/listing.c): each page read is visited once
 * with its latest time, the walk falls back to every page when the list is
 * full or a walk failed, and readers racing a flusher lose no touch.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "index_fixture.h"
#include "index_i.h"   /* touched_max, to fill the list of pages read */

struct seen_pages {
	uint64_t ino[8];
	int64_t atime[8];
	size_t n, total;
	int fail;                 /* returned by every call */
};

static int see_page(void *arg, const struct kv_page_brief *p)
{
	struct seen_pages *s = arg;

	if (s->n < 8) {
		s->ino[s->n] = p->ino;
		s->atime[s->n++] = p->atime_ns;
	}
	s->total++;
	return s->fail;
}

static void touch(struct kv_index *x, uint64_t ino, int64_t t)
{
	struct kv_node_info n = { .attr.atime_ns = t };

	assert_int_equal(kv_index_update(x, ino, &n, KV_UPD_ATIME), 0);
}

static void durable(struct kv_index *x, uint64_t ino)
{
	assert_int_equal(kv_index_page_durable(x, ino, ino), 0);
}

static size_t walk_touched(struct kv_index *x, bool all, struct seen_pages *s)
{
	memset(s, 0, sizeof(*s));
	assert_int_equal(kv_index_touched_walk(x, all, see_page, s), 0);
	return s->total;
}

/* The flush visits the pages read since the last walk, each once with its
 * latest time, not every page; a page still being written waits. */
static void test_touched_walk_visits_pages_read(void **state)
{
	struct kv_index *x = *state;
	struct seen_pages s;
	uint64_t i;

	small_tree(x);
	for (i = 100; i < 2100; i++) {
		char name[16];

		snprintf(name, sizeof(name), "p%" PRIu64, i);
		assert_int_equal(add_page(x, i, 3, name, 10), 0);
		durable(x, i);
	}
	assert_int_equal(walk_touched(x, false, &s), 0);
	touch(x, 500, 1000);
	touch(x, 700, 2000);
	touch(x, 500, 3000);
	touch(x, 3, 4000);          /* a layer: not a page */
	touch(x, 10, 5000);         /* still sealed, not durable */
	assert_int_equal(walk_touched(x, false, &s), 2);
	assert_true((s.ino[0] == 500 && s.atime[0] == 3000 && s.ino[1] == 700 &&
		     s.atime[1] == 2000) ||
		    (s.ino[1] == 500 && s.atime[1] == 3000 && s.ino[0] == 700 &&
		     s.atime[0] == 2000));
	/* Listed once, walked once: nothing until the next read. */
	assert_int_equal(walk_touched(x, false, &s), 0);
	touch(x, 700, 6000);
	assert_int_equal(walk_touched(x, false, &s), 1);
	assert_int_equal(s.atime[0], 6000);
	/* The sealed page stayed listed; durable, it is visited. */
	durable(x, 10);
	assert_int_equal(walk_touched(x, false, &s), 1);
	assert_int_equal(s.ino[0], 10);
	assert_int_equal(s.atime[0], 5000);
	/* Gone before the walk: skipped. */
	touch(x, 900, 7000);
	assert_int_equal(kv_index_remove(x, 900), 0);
	assert_int_equal(walk_touched(x, false, &s), 0);
	/* all: every page. */
	assert_int_equal(walk_touched(x, true, &s), 2000 - 1 + 2);
}

/* A full list, or a walk its caller stopped, makes the next walk visit
 * every page once; after that only the pages read again. */
static void test_touched_walk_falls_back_to_every_page(void **state)
{
	struct kv_index *x = *state;
	struct seen_pages s;

	small_tree(x);
	durable(x, 10);
	durable(x, 11);
	x->touched_max = 1;
	touch(x, 10, 100);
	touch(x, 11, 200);          /* no room */
	assert_int_equal(walk_touched(x, false, &s), 3);   /* 10 twice, 11 */
	assert_int_equal(walk_touched(x, false, &s), 0);
	touch(x, 11, 300);          /* listed again */
	assert_int_equal(walk_touched(x, false, &s), 1);
	assert_int_equal(s.atime[0], 300);

	touch(x, 10, 400);
	memset(&s, 0, sizeof(s));
	s.fail = -EIO;
	assert_int_equal(kv_index_touched_walk(x, false, see_page, &s), -EIO);
	assert_int_equal(walk_touched(x, false, &s), 2);
	touch(x, 10, 500);
	assert_int_equal(walk_touched(x, false, &s), 1);
}

/* ---- racing readers ---- */

/* Readers touch pages while a flusher walks the list: after a last walk,
 * the time each page was last flushed with is its time in the index (no
 * touch fell between the flag and the list). */
enum { TOUCH_PAGES = 512, TOUCHERS = 3 };

struct touch_race {
	struct kv_index *x;
	atomic_bool stop;
	int64_t flushed[TOUCH_PAGES];
	atomic_ulong touches;
};

static void *toucher(void *arg)
{
	struct touch_race *r = arg;
	unsigned seed = (unsigned)(uintptr_t)&seed;
	int64_t t = 0;

	while (!atomic_load(&r->stop) || atomic_load(&r->touches) < 20000) {
		struct kv_node_info n = { .attr.atime_ns = ++t };

		if (kv_index_update(r->x, 1000 + rand_r(&seed) % TOUCH_PAGES, &n,
				    KV_UPD_ATIME) == 0)
			atomic_fetch_add(&r->touches, 1);
	}
	return NULL;
}

static int note_flushed(void *arg, const struct kv_page_brief *p)
{
	struct touch_race *r = arg;

	r->flushed[p->ino - 1000] = p->atime_ns;
	return 0;
}

static void touch_race(struct kv_index *x, size_t touched_max)
{
	struct touch_race r = { .x = x };
	pthread_t th[TOUCHERS];
	struct kv_node_info n;
	char name[32];
	unsigned i, walks;

	assert_int_equal(add_model(r.x, 2, "m"), 0);
	assert_int_equal(add_layer(r.x, 3, 2, 0), 0);
	for (i = 0; i < TOUCH_PAGES; i++) {
		snprintf(name, sizeof(name), "t%u", i);
		assert_int_equal(add_page(r.x, 1000 + i, 3, name, 10), 0);
		durable(r.x, 1000 + i);
	}
	x->touched_max = touched_max;
	for (i = 0; i < TOUCHERS; i++)
		assert_int_equal(pthread_create(&th[i], NULL, toucher, &r), 0);
	for (walks = 0; walks < 200 || atomic_load(&r.touches) < 20000; walks++)
		assert_int_equal(kv_index_touched_walk(r.x, false, note_flushed, &r), 0);
	atomic_store(&r.stop, true);
	for (i = 0; i < TOUCHERS; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(kv_index_touched_walk(r.x, false, note_flushed, &r), 0);
	for (i = 0; i < TOUCH_PAGES; i++) {
		assert_int_equal(kv_index_get(r.x, 1000 + i, &n), 0);
		assert_int_equal(r.flushed[i], n.attr.atime_ns);
	}
}

static void test_touched_walk_loses_no_touch_under_race(void **state)
{
	touch_race(*state, IDX_TOUCHED_MAX);
}

/* The same with a list of 16: most walks fall back to every page. */
static void test_touched_walk_loses_no_touch_when_full(void **state)
{
	touch_race(*state, 16);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_touched_walk_visits_pages_read, setup, teardown),
		cmocka_unit_test_setup_teardown(test_touched_walk_falls_back_to_every_page, setup, teardown),
		cmocka_unit_test_setup_teardown(test_touched_walk_loses_no_touch_under_race, setup, teardown),
		cmocka_unit_test_setup_teardown(test_touched_walk_loses_no_touch_when_full, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
