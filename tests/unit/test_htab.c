/*
 * Unit tests for the index's hash set (index/htab.c): incremental growth.
 * A full table gets arrays twice the size and moves the old ones across a
 * few slots per insert; while that lasts every element must stay findable
 * exactly once, through lookups, removals (tombstones in the old arrays),
 * replacements and the whole-table walk, and no insert may move the whole
 * table at once.
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
	assert_int_equal(htab_init(&t, el_hash), 0);
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
	assert_int_equal(htab_init(&t, el_hash), 0);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_growth_is_incremental),
		cmocka_unit_test(test_random_against_record),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
