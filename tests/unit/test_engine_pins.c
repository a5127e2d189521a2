/*
 * Extent pins (engine/pin.c) on a real engine, no mount: an extent
 * released while fast-path batches run is freed only once every batch
 * that began before the release has ended, in release order, and a batch
 * begun after a release never holds it back; the committer's frees of
 * deleted pages go through the same deferral.
 */
#include "engine_fixture.h"

#define EXT (64 * 1024ull)
#define EXT2 (128 * 1024ull)

/* Extents of different sizes, so that the bytes in use tell which of
 * them are still allocated. */
static struct kv_extent alloc_extent(struct efix *f, uint64_t bytes)
{
	struct kv_extent e;

	assert_int_equal(kv_extent_alloc(f->fs->store, bytes, &e), 0);
	assert_int_equal(kv_extent_footprint(&e), bytes);
	return e;
}

/* No batch running: a release frees at once. */
static void release_without_pins_frees_at_once(void **state)
{
	struct efix *f = *state;
	struct kv_extent e;
	uint64_t base;

	efix_open(f);
	base = efix_used(f);
	e = alloc_extent(f, EXT);
	assert_true(efix_used(f) > base);
	assert_int_equal(kvfs_extent_release(f->fs, &e), 0);
	assert_int_equal(efix_used(f), base);
	/* A pin that began and ended leaves nothing behind either. */
	{
		struct kvfs_pin p;

		kvfs_pin_begin(f->fs, &p);
		kvfs_pin_end(f->fs, &p);
	}
	e = alloc_extent(f, EXT);
	assert_int_equal(kvfs_extent_release(f->fs, &e), 0);
	assert_int_equal(efix_used(f), base);
	assert_null(f->fs->pins.head);
	assert_int_equal(efix_close(f), 0);
}

/* p[0] begins, e1 (EXT bytes) is released, p[1] begins, e2 (EXT2) is
 * released, p[2] begins: three running batches, two deferred frees. */
static void interleave(struct efix *f, struct kvfs_pin p[3])
{
	struct kv_extent e1 = alloc_extent(f, EXT), e2 = alloc_extent(f, EXT2);

	kvfs_pin_begin(f->fs, &p[0]);
	assert_int_equal(kvfs_extent_release(f->fs, &e1), 0);
	kvfs_pin_begin(f->fs, &p[1]);
	assert_int_equal(kvfs_extent_release(f->fs, &e2), 0);
	kvfs_pin_begin(f->fs, &p[2]);
	assert_true(p[0].seq < p[1].seq && p[1].seq < p[2].seq);
}

/* Ending p[2] and p[1] first frees nothing: p[0], older than both
 * releases, runs on; ending it then frees both. In the other order each
 * end frees exactly the releases no running batch is older than: p[0]'s
 * end frees e1 (p[1] began after it) but not e2 (released while p[1]
 * ran), p[1]'s end frees e2. */
static void release_waits_for_older_pins_in_order(void **state)
{
	struct efix *f = *state;
	struct kvfs_pin p[3];
	uint64_t base;

	efix_open(f);
	base = efix_used(f);

	/* newest batches end first: nothing is freed until the oldest ends */
	interleave(f, p);
	assert_int_equal(efix_used(f), base + EXT + EXT2);
	kvfs_pin_end(f->fs, &p[2]);
	kvfs_pin_end(f->fs, &p[1]);
	assert_int_equal(efix_used(f), base + EXT + EXT2);
	kvfs_pin_end(f->fs, &p[0]);
	assert_int_equal(efix_used(f), base);

	/* oldest first: each end frees exactly the releases before the next
	 * running batch began */
	interleave(f, p);
	kvfs_pin_end(f->fs, &p[0]);      /* p[1] began after e1's release */
	assert_int_equal(efix_used(f), base + EXT2);   /* e2 is left */
	kvfs_pin_end(f->fs, &p[1]);      /* e2 was released while p[1] ran */
	assert_int_equal(efix_used(f), base);
	kvfs_pin_end(f->fs, &p[2]);
	assert_null(f->fs->pins.head);
	assert_null(f->fs->pins.tail);
	assert_int_equal(efix_close(f), 0);
}

/* A batch that begins after a release and runs on and on does not hold it:
 * the free happens when the batches older than the release end. */
static void newer_pins_do_not_hold_a_release(void **state)
{
	struct efix *f = *state;
	struct kvfs_pin old, young;
	struct kv_extent e;
	uint64_t base;

	efix_open(f);
	base = efix_used(f);
	e = alloc_extent(f, EXT);
	kvfs_pin_begin(f->fs, &old);
	assert_int_equal(kvfs_extent_release(f->fs, &e), 0);
	kvfs_pin_begin(f->fs, &young);
	assert_int_equal(efix_used(f), base + EXT);
	kvfs_pin_end(f->fs, &old);
	assert_int_equal(efix_used(f), base);
	/* a release while only young runs waits for young */
	e = alloc_extent(f, EXT);
	assert_int_equal(kvfs_extent_release(f->fs, &e), 0);
	assert_int_equal(efix_used(f), base + EXT);
	kvfs_pin_end(f->fs, &young);
	assert_int_equal(efix_used(f), base);
	assert_int_equal(efix_close(f), 0);
}

/* The committer frees a deleted page's extent through the pins: while a
 * batch that began before the delete runs, the page's space stays
 * allocated after the delete is durable; it goes when the batch ends. */
static void deleted_page_extent_waits_for_a_running_batch(void **state)
{
	struct efix *f = *state;
	struct kv_node_info n;
	struct kvfs_pin p;
	uint64_t base, page_bytes;

	efix_open(f);
	efix_layer(f);
	base = efix_used(f);
	assert_int_equal(efix_publish(f, "p0", 100000, 1, &n), 0);
	assert_int_equal(efix_sync(f), 0);
	page_bytes = efix_used(f) - base;
	assert_true(page_bytes >= 100000);
	kvfs_pin_begin(f->fs, &p);
	assert_int_equal(efix_unlink(f, "p0"), 0);
	assert_int_equal(efix_lookup(f, "p0", &n), -ENOENT);
	assert_int_equal(efix_sync(f), 0);          /* the delete is durable */
	assert_int_equal(efix_used(f), base + page_bytes);
	kvfs_pin_end(f->fs, &p);
	assert_int_equal(efix_used(f), base);
	assert_int_equal(efix_close(f), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(release_without_pins_frees_at_once,
						efix_setup, efix_teardown),
		cmocka_unit_test_setup_teardown(release_waits_for_older_pins_in_order,
						efix_setup, efix_teardown),
		cmocka_unit_test_setup_teardown(newer_pins_do_not_hold_a_release,
						efix_setup, efix_teardown),
		cmocka_unit_test_setup_teardown(deleted_page_extent_waits_for_a_running_batch,
						efix_setup, efix_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
