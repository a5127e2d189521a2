/*
 * Dedup inside a commit window (engine/dedup.c), on a real engine, no
 * mount: identical pages sealed before the first of them is durable share
 * its extent (one write), and when that write or its sync fails, every
 * page sharing it is withdrawn with it: gone from the namespace, counted
 * lost, EIO to the wait, charges and space given back, no row after a
 * reopen. Faults go through the engine's own seam (kvfs_fault_set).
 */
#include "engine_fixture.h"

#define PAGE (64 * 1024ull)

static int setup_dedup(void **state)
{
	struct efix *f;

	if (efix_setup(state) < 0)
		return -1;
	f = *state;
	f->opts.dedup = true;
	f->opts.fault_injection = true;
	return 0;
}

/* Publish name with seed's bytes, one page of budget charged to it. */
static void publish_charged(struct efix *f, const char *name, unsigned seed)
{
	assert_int_equal(kvfs_dirty_take(f->fs, PAGE, 0), 0);
	assert_int_equal(efix_publish_charged(f, f->layer, name, PAGE, seed, PAGE, NULL), 0);
}

static uint64_t extent_of(struct efix *f, const char *name)
{
	struct kv_node_info n;

	assert_int_equal(efix_lookup(f, name, &n), 0);
	return n.extent_id;
}

/* Three identical pages and another in one commit group (a fast-path
 * chunk): one extent written for the three, one for the other, and the
 * manifest agrees after a reopen (its refcounts are checked at load). */
static void identical_pages_of_one_window_share_one_write(void **state)
{
	struct efix *f = *state;
	uint64_t used, written;

	efix_open(f);
	efix_layer(f);
	assert_int_equal(efix_sync(f), 0);
	used = efix_used(f);
	written = atomic_load(&f->fs->st.bytes_written);

	kvfs_commit_group_begin(f->fs);
	assert_int_equal(efix_publish(f, "p0", PAGE, 7, NULL), 0);
	assert_int_equal(efix_publish(f, "p1", PAGE, 7, NULL), 0);
	assert_int_equal(efix_publish(f, "p2", PAGE, 7, NULL), 0);
	assert_int_equal(efix_publish(f, "other", PAGE, 8, NULL), 0);
	kvfs_commit_group_end(f->fs);
	assert_int_equal(efix_sync(f), 0);

	assert_int_equal(extent_of(f, "p1"), extent_of(f, "p0"));
	assert_int_equal(extent_of(f, "p2"), extent_of(f, "p0"));
	assert_true(extent_of(f, "other") != extent_of(f, "p0"));
	assert_int_equal(atomic_load(&f->fs->st.pages_deduped), 2);
	assert_int_equal(atomic_load(&f->fs->st.bytes_written) - written, 2 * PAGE);
	assert_int_equal(efix_used(f), used + 2 * PAGE);

	efix_reopen(f);
	assert_int_equal(extent_of(f, "p2"), extent_of(f, "p0"));
	efix_assert_page(f, "p0", PAGE, 7);
	efix_assert_page(f, "p1", PAGE, 7);
	efix_assert_page(f, "p2", PAGE, 7);
	efix_assert_page(f, "other", PAGE, 8);
	assert_int_equal(efix_close(f), 0);
}

/* q0 is written, q1 and q2 share its pending extent; spec fails its
 * write or its sync. All three are withdrawn; a later identical page is
 * written anew and kept. */
static void sharers_withdrawn_with(struct efix *f, const char *spec)
{
	uint64_t mark, used, lost;
	struct kv_node_info n;

	efix_open_with_page(f, "keep", PAGE, 1);
	used = efix_used(f);
	lost = atomic_load(&f->fs->st.pages_lost);

	efix_fault(f, spec);
	mark = kvfs_commit_mark(f->fs);
	kvfs_commit_group_begin(f->fs);     /* one window: nothing commits yet */
	publish_charged(f, "q0", 9);
	publish_charged(f, "q1", 9);
	publish_charged(f, "q2", 9);
	kvfs_commit_group_end(f->fs);
	assert_int_equal(kvfs_commit_wait_all(f->fs, mark), -EIO);

	assert_int_equal(efix_lookup(f, "q0", &n), -ENOENT);
	assert_int_equal(efix_lookup(f, "q1", &n), -ENOENT);
	assert_int_equal(efix_lookup(f, "q2", &n), -ENOENT);
	assert_int_equal(atomic_load(&f->fs->st.pages_lost), lost + 3);
	assert_int_equal(atomic_load(&f->fs->st.pages_deduped), 0);
	assert_int_equal(f->fs->dirty.filling + f->fs->dirty.draining, 0);
	assert_int_equal(efix_used(f), used);

	mark = kvfs_commit_mark(f->fs);      /* the fault fired once */
	assert_int_equal(efix_publish(f, "after", PAGE, 9, NULL), 0);
	assert_int_equal(kvfs_commit_wait_all(f->fs, mark), 0);
	assert_int_equal(efix_used(f), used + PAGE);

	efix_reopen(f);
	assert_int_equal(efix_lookup(f, "q0", &n), -ENOENT);
	assert_int_equal(efix_lookup(f, "q1", &n), -ENOENT);
	assert_int_equal(efix_lookup(f, "q2", &n), -ENOENT);
	efix_assert_page(f, "keep", PAGE, 1);
	efix_assert_page(f, "after", PAGE, 9);
	assert_int_equal(efix_close(f), 0);
}

static void failed_write_withdraws_every_sharer(void **state)
{
	sharers_withdrawn_with(*state, "store write 1 EIO");
}

static void failed_sync_withdraws_every_sharer(void **state)
{
	sharers_withdrawn_with(*state, "store fsync 1 EIO");
}

/*
 * The sharer's row is in a later batch than the writer's (one op a
 * batch): the writer's transaction fails once, so its withdrawal waits
 * for the retry 1 s later, and the identical page sealed meanwhile
 * shares its pending extent. The writer's failure reaches it all the
 * same: both withdrawn, the space given back once.
 */
static void sharer_in_a_later_batch_is_withdrawn_too(void **state)
{
	struct efix *f = *state;
	uint64_t mark, used, lost;
	struct kv_node_info n;

	f->opts.commit_batch = 1;
	efix_open(f);
	efix_layer(f);
	assert_int_equal(efix_sync(f), 0);
	used = efix_used(f);
	lost = atomic_load(&f->fs->st.pages_lost);

	efix_fault(f, "store write 1 EIO");
	efix_fault(f, "manifest commit 1 EIO");
	mark = kvfs_commit_mark(f->fs);
	publish_charged(f, "w", 3);
	publish_charged(f, "s", 3);
	assert_int_equal(efix_lookup(f, "s", &n), 0);
	assert_int_equal(n.extent_id, extent_of(f, "w"));   /* shared, pending */
	assert_int_equal(kvfs_commit_wait_all(f->fs, mark), -EIO);
	/* the retry, then s's batch: its space is freed last */
	for (int i = 0; i < 1000 && (efix_lookup(f, "s", &n) == 0 || efix_used(f) != used);
	     i++)
		efix_sleep_ms(10);

	assert_int_equal(efix_lookup(f, "w", &n), -ENOENT);
	assert_int_equal(efix_lookup(f, "s", &n), -ENOENT);
	assert_int_equal(atomic_load(&f->fs->st.pages_lost), lost + 2);
	assert_int_equal(efix_used(f), used);
	assert_int_equal(f->fs->dirty.filling + f->fs->dirty.draining, 0);

	efix_reopen(f);
	assert_int_equal(efix_lookup(f, "w", &n), -ENOENT);
	assert_int_equal(efix_lookup(f, "s", &n), -ENOENT);
	assert_int_equal(efix_close(f), 0);
}

/* A payload's extent takes at most one name per 4 KiB block of it, so
 * that every page costs a block of the capacity, shared or not: three
 * pages of 8 KiB, two share, the third is written anew (and a fourth
 * shares the third's); two of one byte are two extents. Within a commit
 * window and against durable twins. */
static void three_of_8k(struct efix *f, char tag, unsigned seed, bool window)
{
	char name[3][4];

	if (window)
		kvfs_commit_group_begin(f->fs);
	for (unsigned i = 0; i < 3; i++) {
		snprintf(name[i], sizeof(name[i]), "%c%u", tag, i);
		assert_int_equal(efix_publish(f, name[i], 8192, seed, NULL), 0);
		if (!window)
			assert_int_equal(efix_sync(f), 0);
	}
	if (window)
		kvfs_commit_group_end(f->fs);
	assert_int_equal(efix_sync(f), 0);
	assert_int_equal(extent_of(f, name[1]), extent_of(f, name[0]));
	assert_true(extent_of(f, name[2]) != extent_of(f, name[0]));
}

static void names_of_one_payload_at_most_one_per_block(void **state)
{
	struct efix *f = *state;

	efix_open(f);
	efix_layer(f);
	three_of_8k(f, 'w', 3, true);
	three_of_8k(f, 'd', 4, false);
	/* the next one shares the copy that has room, not the full one */
	assert_int_equal(efix_publish(f, "d3", 8192, 4, NULL), 0);
	assert_int_equal(efix_sync(f), 0);
	assert_int_equal(extent_of(f, "d3"), extent_of(f, "d2"));
	assert_int_equal(efix_publish(f, "b0", 1, 5, NULL), 0);
	assert_int_equal(efix_sync(f), 0);
	assert_int_equal(efix_publish(f, "b1", 1, 5, NULL), 0);
	assert_int_equal(efix_sync(f), 0);
	assert_true(extent_of(f, "b1") != extent_of(f, "b0"));
	efix_reopen(f);
	efix_assert_page(f, "w2", 8192, 3);
	efix_assert_page(f, "d2", 8192, 4);
	efix_assert_page(f, "b1", 1, 5);
	assert_int_equal(efix_close(f), 0);
}

/* Each test on a fresh store of its own, dedup and fault seams on. */
#define DEDUP_TEST(fn) cmocka_unit_test_setup_teardown(fn, setup_dedup, efix_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		DEDUP_TEST(identical_pages_of_one_window_share_one_write),
		DEDUP_TEST(failed_write_withdraws_every_sharer),
		DEDUP_TEST(failed_sync_withdraws_every_sharer),
		DEDUP_TEST(sharer_in_a_later_batch_is_withdrawn_too),
		DEDUP_TEST(names_of_one_payload_at_most_one_per_block),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
