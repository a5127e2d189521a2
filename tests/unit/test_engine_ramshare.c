/*
 * One uid's PREFETCH pages in the RAM tier (engine/ramtier.c), on the
 * tier alone: a uid looping over large prefetches may hold at most half
 * the budget in unread prefetched pages and half of it queued, so another
 * uid's unread prefetches stay until its engine reads them. Once read, a
 * page is an ordinary entry.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "kvfs_i.h"

#define BUDGET (1u << 20)
#define PAGE (64u << 10)

static struct kvfs *tier_new(void)
{
	struct kvfs *fs = calloc(1, sizeof(*fs));

	assert_non_null(fs);
	assert_int_equal(kvfs_ram_init(fs, BUDGET), 0);
	return fs;
}

static void put(struct kvfs *fs, uint64_t id, uint32_t uid)
{
	struct kvfs_data *d = kvfs_data_new(PAGE);

	assert_non_null(d);
	memset(d->bytes, (int)id, PAGE);
	d->size = PAGE;
	kvfs_ram_put_prefetched(fs, id, d, false, uid);
	kvfs_data_put(d);
}

/* uid 1 prefetches 4 pages, then uid 2 60 (four times the budget): uid
 * 1's stay, uid 2 keeps its newest, at most half the budget of them. */
static void a_looping_uid_evicts_its_own_unread_prefetches(void **state)
{
	struct kvfs *fs = tier_new();
	struct kvfs_ram_stats st;
	unsigned kept = 0;

	(void)state;
	for (uint64_t id = 1; id <= 4; id++)
		put(fs, id, 1);
	for (uint64_t id = 100; id < 160; id++)
		put(fs, id, 2);
	for (uint64_t id = 1; id <= 4; id++)
		assert_true(kvfs_ram_has(fs, id));
	for (uint64_t id = 100; id < 160; id++)
		kept += kvfs_ram_has(fs, id);
	assert_true(kvfs_ram_has(fs, 159));
	assert_true(kept >= 4 && kept * PAGE <= BUDGET / 2);
	kvfs_ram_stats(fs, &st);
	assert_true(st.bytes <= BUDGET);
	assert_int_equal(st.prefetched, 64);

	/* Read, uid 1's pages are ordinary: uid 2's next ones may push
	 * them out by recency, and uid 1 may prefetch again. */
	for (uint64_t id = 1; id <= 4; id++)
		kvfs_data_put(kvfs_ram_get(fs, id));
	kvfs_ram_stats(fs, &st);
	assert_int_equal(st.prefetch_used, 4);
	for (uint64_t id = 200; id < 230; id++)
		put(fs, id, 3);
	for (uint64_t id = 300; id < 330; id++)
		put(fs, id, 2);
	assert_false(kvfs_ram_has(fs, 1));
	assert_true(kvfs_ram_has(fs, 229));     /* uid 3's newest unread */
	assert_true(kvfs_ram_has(fs, 329));
	kvfs_ram_fini(fs);
	free(fs);
}

/* uid 2 prefetches and at once reads each page (a RAM hit: it costs no
 * device time), four times the budget over: those become ordinary
 * entries, which all go before uid 1's unread prefetches. With three
 * uids past the budget in unread pages, the one holding most loses its
 * oldest first. */
static void reading_its_own_prefetches_pushes_out_no_one_elses(void **state)
{
	struct kvfs *fs = tier_new();
	unsigned kept2 = 0, kept3 = 0;

	(void)state;
	for (uint64_t id = 1; id <= 4; id++)
		put(fs, id, 1);
	for (uint64_t id = 100; id < 160; id++) {
		put(fs, id, 2);
		kvfs_data_put(kvfs_ram_get(fs, id));
	}
	for (uint64_t id = 1; id <= 4; id++)
		assert_true(kvfs_ram_has(fs, id));
	assert_true(kvfs_ram_has(fs, 159));

	for (uint64_t id = 200; id < 206; id++)        /* uid 2: 6 unread */
		put(fs, id, 2);
	for (uint64_t id = 300; id < 306; id++)        /* uid 3: 6 unread */
		put(fs, id, 3);
	for (uint64_t id = 1; id <= 4; id++)           /* uid 1 had fewest */
		assert_true(kvfs_ram_has(fs, id));
	for (uint64_t id = 200; id < 206; id++)
		kept2 += kvfs_ram_has(fs, id);
	for (uint64_t id = 300; id < 306; id++)
		kept3 += kvfs_ram_has(fs, id);
	assert_true(kvfs_ram_has(fs, 305) && kvfs_ram_has(fs, 205));
	assert_true(kept2 < 6);                        /* its oldest went */
	assert_true(kept2 + 1 >= kept3 && kept3 + 1 >= kept2);
	kvfs_ram_fini(fs);
	free(fs);
}

/* An unread prefetch left for 10 s goes before anything else: no uid
 * keeps half the tier by never reading what it prefetched. */
static void unread_prefetches_age_out(void **state)
{
	struct kvfs *fs = tier_new();
	struct kvfs_data *d = kvfs_data_new(PAGE);
	struct timespec ten = { .tv_sec = 10, .tv_nsec = 200000000 };

	(void)state;
	d->size = PAGE;
	for (uint64_t id = 1; id <= 4; id++)
		put(fs, id, 1);
	for (uint64_t id = 100; id < 120; id++)          /* read pages fill the rest */
		kvfs_ram_put(fs, id, d, false, KVFS_RAM_READ);
	assert_true(kvfs_ram_has(fs, 1) && kvfs_ram_has(fs, 119));
	nanosleep(&ten, NULL);
	kvfs_ram_put(fs, 200, d, false, KVFS_RAM_READ);
	assert_false(kvfs_ram_has(fs, 1));                /* stale: first out */
	assert_true(kvfs_ram_has(fs, 2) && kvfs_ram_has(fs, 200));
	kvfs_data_put(d);
	kvfs_ram_fini(fs);
	free(fs);
}

/* Half the budget queued per uid; the loader gives it back. */
static void a_uid_queues_at_most_half_the_budget(void **state)
{
	struct kvfs *fs = tier_new();

	(void)state;
	assert_true(kvfs_ram_prefetch_reserve(fs, 2, BUDGET / 2));
	assert_false(kvfs_ram_prefetch_reserve(fs, 2, 1));
	assert_true(kvfs_ram_prefetch_reserve(fs, 1, BUDGET / 2));
	kvfs_ram_prefetch_unreserve(fs, 2, PAGE);
	assert_true(kvfs_ram_prefetch_reserve(fs, 2, PAGE));
	assert_false(kvfs_ram_prefetch_reserve(fs, 2, PAGE));
	kvfs_ram_prefetch_unreserve(fs, 2, BUDGET / 2);
	kvfs_ram_prefetch_unreserve(fs, 1, BUDGET / 2);
	kvfs_ram_fini(fs);
	free(fs);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_looping_uid_evicts_its_own_unread_prefetches),
		cmocka_unit_test(reading_its_own_prefetches_pushes_out_no_one_elses),
		cmocka_unit_test(unread_prefetches_age_out),
		cmocka_unit_test(a_uid_queues_at_most_half_the_budget),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
