/*
 * Unit tests for the index's hash set (index/htab.c): incremental growth.
 * A full table gets arrays twice the size and moves the old ones across a
 * few slots per insert; while that lasts every element must stay findable
 * exactly once, through lookups, removals (tombstones in the old arrays),
 * replacements and the whole-table walk, and no insert may move the whole
 * table at once. A table left with few elements shrinks the same way.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "htab.h"

struct el {
	uint64_t key;
	unsigned in;          /* times the table holds it (0 or 1) */
};

/* A poor hash on purpose: long probe runs, wrap-around, collisions. */
static uint64_t el_hash(const void *e)
{
	return ((const struct el *)e)->key * 7;
}

static struct el *find(const struct htab *t, uint64_t key)
{
	struct htab_probe p;
	struct el *e, *hit = NULL;
	int seen = 0;

	htab_probe_start(t, key * 7, &p);
	while ((e = htab_probe_next(t, &p)))
		if (e->key == key) {
			hit = e;
			seen++;
		}
	assert_true(seen <= 1);
	return hit;
}

/* Everything the walk sees, each once, and nothing else. */
static void check_all(const struct htab *t, struct el *els, size_t n)
{
	size_t count = 0;
	unsigned *walked = calloc(n, sizeof(*walked));

	assert_non_null(walked);
	for (size_t i = 0; i < htab_span(t); i++) {
		struct el *e = htab_at(t, i);

		if (e) {
			walked[e - els]++;
			count++;
		}
	}
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(walked[i], els[i].in);
		assert_true(find(t, els[i].key) == (els[i].in ? &els[i] : NULL));
	}
	assert_int_equal(count, t->n);
	free(walked);
}

static void test_growth_is_incremental(void **state)
{
	struct htab t;
	size_t n = 6144, i;            /* 3/4 of 8192 */
	struct el *els = calloc(4 * n, sizeof(*els));

	(void)state;
	assert_non_null(els);
	assert_int_equal(htab_init(&t, el_hash, els), 0);
	for (i = 0; i < 4 * n; i++)
		els[i].key = i + 1;
	for (i = 0; i < n; i++) {
		assert_int_equal(htab_insert(&t, &els[i]), 0);
		els[i].in = 1;
	}
	/* Full: making room for one more (as the index does before each
	 * insert) starts growing, and the insert moves only a few old slots
	 * across. */
	assert_null(t.old_slot);
	assert_int_equal(t.mask + 1, 8192);
	assert_int_equal(htab_reserve(&t, 1), 0);
	assert_non_null(t.old_slot);
	assert_int_equal(t.moved, 0);
	assert_int_equal(htab_insert(&t, &els[n]), 0);
	els[n].in = 1;
	assert_non_null(t.old_slot);
	assert_int_equal(t.mask + 1, 16384);
	assert_true(t.moved <= 8);
	check_all(&t, els, n + 1);
	/* Removals and replacements while both arrays hold elements. */
	for (i = 0; i < n; i += 3) {
		assert_true(htab_remove(&t, &els[i]));
		els[i].in = 0;
		assert_false(htab_remove(&t, &els[i]));
	}
	assert_non_null(t.old_slot);
	check_all(&t, els, n + 1);
	/* Inserts drain it; it ends before the new arrays fill. */
	for (i = n + 1; t.old_slot; i++) {
		assert_true(i < 2 * n);
		assert_int_equal(htab_insert(&t, &els[i]), 0);
		els[i].in = 1;
		if (i % 97 == 0)
			check_all(&t, els, i + 1);
	}
	check_all(&t, els, i);
	htab_fini(&t);
	free(els);
}

/* Random inserts and removals through several growths, against a record
 * of what should be there. */
static void test_random_against_record(void **state)
{
	enum { N = 40000 };
	struct el *els = calloc(N, sizeof(*els));
	struct htab t;
	unsigned seed = 12345;
	size_t grew = 0;

	(void)state;
	assert_non_null(els);
	/* The elements at the top of the span a handle reaches: handles
	 * with the high bit set must come back to the same element. */
	assert_int_equal(htab_init(&t, el_hash, (void *)((uintptr_t)els - (HTAB_SPAN -
						 N * sizeof(*els)))), 0);
	assert_true(htab_handle(&t, &els[N - 1]) == UINT32_MAX - 1);
	for (size_t i = 0; i < N; i++)
		els[i].key = i + 1;
	for (int op = 0; op < 200000; op++) {
		size_t k = (size_t)rand_r(&seed) % N;
		bool growing = t.old_slot != NULL;

		if (els[k].in) {
			if (rand_r(&seed) % 3 == 0) {
				assert_true(htab_remove(&t, &els[k]));
				els[k].in = 0;
			} else {
				assert_true(find(&t, els[k].key) == &els[k]);
			}
		} else {
			assert_null(find(&t, els[k].key));
			assert_int_equal(htab_reserve(&t, 1 + op % 2), 0);
			assert_int_equal(htab_insert(&t, &els[k]), 0);
			els[k].in = 1;
		}
		grew += !growing && t.old_slot != NULL;
		if (op % 20011 == 0 || (growing && op % 211 == 0))
			check_all(&t, els, N);
	}
	check_all(&t, els, N);
	assert_true(grew >= 5);
	/* A bulk reserve finishes any growth at once. */
	assert_int_equal(htab_reserve(&t, 100000), 0);
	assert_null(t.old_slot);
	check_all(&t, els, N);
	htab_fini(&t);
	free(els);
}

/*
 * A walk in steps while the table changes between them: random inserts
 * and removals (backward shifts), growths started and finished, and now
 * and then a bulk reserve (a rehash of all). Every element in the table
 * from the walk's start to its end must be handed out at least once.
 * Run many walks of different step sizes from different seeds.
 */
/* Runs of 8 keys on one home: removals shift long runs back. */
static uint64_t el_hash_runs(const void *e)
{
	return ((const struct el *)e)->key / 8 * 8;
}

static void walk_under_changes(unsigned seed, size_t step, size_t changes_per_step)
{
	enum { N = 30000 };
	struct el *els = calloc(N, sizeof(*els));
	unsigned char *was = calloc(N, 1), *seen = calloc(N, 1);
	struct htab_walk w;
	struct htab t;
	bool more = true;

	assert_non_null(els);
	assert_non_null(was);
	assert_non_null(seen);
	assert_int_equal(htab_init(&t, el_hash_runs, els), 0);
	for (size_t i = 0; i < N; i++)
		els[i].key = i + 1;
	for (size_t i = 0; i < N; i += 1 + seed % 2) {   /* some growing */
		assert_int_equal(htab_reserve(&t, 1), 0);
		assert_int_equal(htab_insert(&t, &els[i]), 0);
		els[i].in = 1;
	}
	for (size_t i = 0; i < N; i++)
		was[i] = (unsigned char)els[i].in;   /* there at the start */
	htab_walk_init(&w);
	while (more) {
		htab_walk_resume(&t, &w);
		for (size_t k = 0; k < step; k++) {
			struct el *e = htab_walk_next(&t, &w);

			if (!e) {
				more = false;
				break;
			}
			assert_int_equal(e->in, 1);      /* never a removed one */
			seen[e - els] = 1;
		}
		for (size_t c = 0; more && c < changes_per_step; c++) {
			size_t k = (size_t)rand_r(&seed) % N;

			if (rand_r(&seed) % 5000 == 0) {
				assert_int_equal(htab_reserve(&t, t.n * 2), 0);   /* rehash */
			} else if (els[k].in) {
				assert_true(htab_remove(&t, &els[k]));
				els[k].in = 0;
				was[k] = 0;          /* not there to the end */
			} else {
				assert_int_equal(htab_reserve(&t, 1), 0);
				assert_int_equal(htab_insert(&t, &els[k]), 0);
				els[k].in = 1;
			}
		}
	}
	for (size_t i = 0; i < N; i++)
		if (was[i])
			assert_true(seen[i]);
	htab_fini(&t);
	free(els);
	free(was);
	free(seen);
}

/* Spread keys: an element's place in the new arrays says nothing of its
 * place in the old ones. */
static uint64_t el_hash_mixed(const void *e)
{
	return htab_mix64(((const struct el *)e)->key);
}

/* n elements keyed 1..n, not in t, and t empty over them. */
static struct el *els_for(struct htab *t, size_t n, uint64_t (*hash)(const void *e))
{
	struct el *els = calloc(n, sizeof(*els));

	assert_non_null(els);
	assert_int_equal(htab_init(t, hash, els), 0);
	for (size_t i = 0; i < n; i++)
		els[i].key = i + 1;
	return els;
}

/* A new walk's first `count` elements into seen[nseen] (cleared first). */
static void walk_first(const struct htab *t, struct htab_walk *w, struct el *els,
		       unsigned char *seen, size_t nseen, size_t count)
{
	struct el *e;

	memset(seen, 0, nseen);
	htab_walk_init(w);
	htab_walk_resume(t, w);
	for (size_t k = 0; k < count; k++) {
		assert_non_null(e = htab_walk_next(t, w));
		seen[e - els] = 1;
	}
}

/* The rest of the walk, after changes; els[0, n) must all have been seen. */
static void walk_rest_sees_all(const struct htab *t, struct htab_walk *w, struct el *els,
			       unsigned char *seen, size_t n)
{
	struct el *e;

	htab_walk_resume(t, w);
	while ((e = htab_walk_next(t, w)))
		seen[e - els] = 1;
	for (size_t k = 0; k < n; k++)
		assert_true(seen[k]);
}

/* A walk that stands in the old arrays when the growth ends, and one that
 * stands in the current arrays when growth begins. */
static void test_walk_across_growth(void **state)
{
	enum { N = 6144 };             /* 3/4 of 8192 */
	unsigned char *seen = calloc(4 * N, 1);
	struct htab_walk w;
	struct htab t;
	struct el *els = els_for(&t, 4 * N, el_hash_mixed);
	size_t i;

	(void)state;
	assert_non_null(seen);
	for (i = 0; i < N; i++)
		assert_int_equal(htab_insert(&t, &els[i]), 0);
	assert_int_equal(htab_reserve(&t, 1), 0);   /* growth begins */
	assert_non_null(t.old_slot);
	walk_first(&t, &w, els, seen, 4 * N, 100);
	for (i = N; t.old_slot; i++)                /* ... and ends */
		assert_int_equal(htab_insert(&t, &els[i]), 0);
	walk_rest_sees_all(&t, &w, els, seen, N);

	/* Now from the current arrays, into a growth. */
	walk_first(&t, &w, els, seen, 4 * N, 1000);
	for (; !t.old_slot; i++) {
		assert_true(i < 4 * N);
		assert_int_equal(htab_reserve(&t, 1), 0);
		assert_int_equal(htab_insert(&t, &els[i]), 0);
	}
	walk_rest_sees_all(&t, &w, els, seen, N);
	htab_fini(&t);
	free(els);
	free(seen);
}

static void test_walk_in_steps(void **state)
{
	(void)state;
	for (unsigned seed = 1; seed <= 12; seed++) {
		walk_under_changes(seed, 1 + seed * 37, 5 + seed % 4 * 20);
		walk_under_changes(seed * 101, 4096, 2000);
	}
}

/* Few elements left after many: the arrays shrink, by the moves growth
 * makes; lookups, the walk, removals and inserts work throughout, and a
 * table that would not drop to a quarter of its slots keeps them. */
static void test_shrink(void **state)
{
	enum { N = 20000, KEEP = 100, MORE = 1000 };
	unsigned char *seen = calloc(N + MORE, 1);
	struct htab_walk w;
	struct htab t;
	struct el *els = els_for(&t, N + MORE, el_hash);
	size_t i;

	(void)state;
	assert_non_null(seen);
	for (i = 0; i < N; i++) {
		assert_int_equal(htab_insert(&t, &els[i]), 0);
		els[i].in = 1;
	}
	while (htab_drain(&t, 4096))
		;
	assert_int_equal(t.mask + 1, 32768);
	assert_false(htab_shrink(&t));              /* 20000 of 32768 */
	for (i = KEEP; i < N; i++) {
		assert_true(htab_remove(&t, &els[i]));
		els[i].in = 0;
	}
	walk_first(&t, &w, els, seen, N + MORE, KEEP / 2);  /* across the shrink */
	assert_true(htab_shrink(&t));
	assert_int_equal(t.mask + 1, 512);          /* 100 at most 3/8 full */
	assert_non_null(t.old_slot);
	assert_false(htab_shrink(&t));              /* one move at a time */
	check_all(&t, els, N);
	while (htab_drain(&t, 1000))
		check_all(&t, els, N);
	check_all(&t, els, N);
	walk_rest_sees_all(&t, &w, els, seen, KEEP);
	assert_false(htab_shrink(&t));              /* 100 of 512: stays */

	/* Grown again, then shrinking while removals and inserts come. */
	for (i = N; i < N + MORE; i++) {
		assert_int_equal(htab_insert(&t, &els[i]), 0);
		els[i].in = 1;
	}
	while (htab_drain(&t, 4096))
		;
	assert_int_equal(t.mask + 1, 2048);
	for (i = N; i < N + MORE; i++) {
		assert_true(htab_remove(&t, &els[i]));
		els[i].in = 0;
	}
	assert_true(htab_shrink(&t));
	htab_drain(&t, 300);
	for (i = 0; i < 10; i++) {                  /* old and new arrays */
		assert_true(htab_remove(&t, &els[i]));
		els[i].in = 0;
	}
	check_all(&t, els, N + MORE);
	for (i = N; i < N + 400; i++) {             /* fills it: growth again */
		assert_int_equal(htab_insert(&t, &els[i]), 0);
		els[i].in = 1;
		if (i % 50 == 0)
			check_all(&t, els, N + MORE);
	}
	check_all(&t, els, N + MORE);
	assert_int_equal(t.n, KEEP - 10 + 400);
	htab_fini(&t);
	free(els);
	free(seen);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_growth_is_incremental),
		cmocka_unit_test(test_random_against_record),
		cmocka_unit_test(test_walk_in_steps),
		cmocka_unit_test(test_walk_across_growth),
		cmocka_unit_test(test_shrink),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
