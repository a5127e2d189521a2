/*
 * Unit tests for the trim of extent records after the load (index/trim.c,
 * kv_index_extents_trim): it copies the survivors in steps under the read
 * lock and swaps them in under the write lock, so what other threads
 * change between its steps must be in the tables it swaps in: extents put,
 * counted or dropped, pages added, moved or loaded with their layer.
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
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "index_fixture.h"
#include "manifest_fixture.h"
#include "load_fixture.h"
#include "index_i.h"   /* trim_gap: a step between the trim's holds of the lock */

/* The store s walked with a page budget, its snapshot ended and the
 * reclaim's marking done (kv_index_retired_drop): a trim may run. */
static struct kv_index_loader *walk_reclaimed(struct kv_index *x, struct store *s,
					      struct kv_manifest **lm, uint64_t budget)
{
	struct kv_index_loader *l;

	kv_index_set_page_budget(x, budget);
	l = lazy_begin(x, s, lm);
	assert_int_equal(lazy_run(l), 0);
	kv_index_load_end(l);
	kv_index_retired_drop(x);
	return l;
}

/* What test_trim_follows_changes does between the trim's last step of
 * copying and its swap, once. */
static void trim_gap_changes(void *arg, bool before_swap)
{
	struct kv_index *x = arg;
	struct kv_extent_rec r7 = { .id = 7, .refcount = 1,
				    .ext = { .segment = 6, .offset = 0, .length = 32768 } };
	struct kv_node_info n;

	if (!before_swap)
		return;
	x->trim_gap = NULL;
	/* A rename to a name of another length gives the page a new node,
	 * which may lie where the first pass has been already: linking it
	 * notes its extent (child_link), whatever path the node came by. */
	assert_int_equal(kv_index_move(x, 590000, 5, "x-with-a-longer-name", 0, NULL), 0);
	assert_true(x->ntrim_notes > x->trim_caught);
	assert_int_equal(x->trim_notes[x->ntrim_notes - 1], 3);
	/* Layer 3 loads: its pages name extents 1 and 2, which the copy
	 * left out (only a layer in the manifest named them then). */
	assert_int_equal(kv_index_lookup(x, 3, "p10", &n), 0);
	/* Extent 3, copied, is counted once more; extent 6, copied (its row
	 * not committed), goes; extent 7 comes. */
	assert_int_equal(kv_index_extent_ref(x, 3, +1, NULL), 0);
	assert_int_equal(kv_index_extent_ref(x, 6, -1, NULL), 0);
	hash_of(7, r7.hash);
	assert_int_equal(kv_index_extent_put(x, &r7), 0);
}

/*
 * The trim copies the surviving extent records outside the write lock and
 * swaps them in at the end (index/trim.c): what changed in between is in
 * the tables it swaps in. Layer 5 (extent 3) is loaded; layers 4 (extent
 * 4) and 3 (extents 1 and 2) stay in the manifest. Without the changes
 * noted, layer 3's extents are missing after the swap, extent 3 keeps its
 * old count, extent 6 comes back and extent 7 is lost.
 */
static void test_trim_follows_changes(void **state)
{
	struct kv_index *x = *state;
	struct kv_extent_rec r6 = { .id = 6, .refcount = 1,
				    .ext = { .segment = 5, .offset = 0, .length = 32768 } };
	struct kv_index_loader *l;
	struct kv_index_stats st;
	struct kv_manifest *lm;
	struct kv_extent_rec r;
	struct kv_node_info n;
	struct store s;
	uint64_t dropped;

	store_make(&s);
	store_fill(&s);
	store_layers(&s, 2, 10);
	store_extent_page(&s, 3, 590000, 5, "x");
	store_extent_page(&s, 4, 490000, 4, "y");
	l = walk_reclaimed(x, &s, &lm, 11);
	assert_true(kv_index_layer_whole(x, 5));
	assert_false(kv_index_layer_whole(x, 4));
	assert_false(kv_index_layer_whole(x, 3));
	hash_of(6, r6.hash);
	assert_int_equal(kv_index_extent_put(x, &r6), 0);
	x->trim_gap = trim_gap_changes;
	x->trim_gap_arg = x;
	assert_int_equal(kv_index_extents_trim(x, &dropped), 0);
	assert_null(x->trim_gap);        /* the changes were made */
	assert_int_equal(dropped, 1);
	assert_int_equal(kv_index_extent_get(x, 4, &r), -ENOENT);   /* out of RAM */
	assert_int_equal(kv_index_extent_get(x, 1, &r), 0);
	assert_int_equal(r.refcount, 2);
	assert_int_equal(kv_index_extent_get(x, 2, &r), 0);
	assert_int_equal(kv_index_extent_get(x, 3, &r), 0);
	assert_int_equal(r.refcount, 2);
	assert_int_equal(kv_index_extent_get(x, 6, &r), -ENOENT);
	assert_int_equal(kv_index_extent_get(x, 7, &r), 0);
	assert_int_equal(kv_index_lookup(x, 3, "p11", &n), 0);
	assert_int_equal(n.ext.length, 32768);
	kv_index_stats(x, &st);       /* extents: in RAM or not (1, 2, 3, 4, 7) */
	assert_int_equal(st.extents, 5);
	assert_int_equal(st.extents_unloaded, 1);
	/* Layer 4 loads: extent 4 comes back from the manifest. */
	assert_int_equal(kv_index_lookup(x, 4, "y", &n), 0);
	assert_int_equal(n.ext.length, 32768);
	kv_index_stats(x, &st);
	assert_int_equal(st.extents, 5);
	assert_int_equal(st.extents_unloaded, 0);
	kv_index_load_close(l);
	kv_manifest_close(lm);
	store_done(&s);
}

#define NEW_EXTENTS 10000

/* At the trim's first step between two holds: every empty page of layer 3
 * gets another name of the same length in the same layer, which links it
 * again at the end of the layer's list of pages; and more extents come
 * than the trim copies again in one step before its swap. */
static void trim_gap_renames(void *arg, bool before_swap)
{
	struct kv_extent_rec r = { .refcount = 1, .ext = { .segment = 9, .length = 4096 } };
	struct kv_index *x = arg;
	char name[32];

	(void)before_swap;
	x->trim_gap = NULL;
	for (unsigned i = 0; i < 5000; i++) {
		snprintf(name, sizeof(name), "f%u", i);
		assert_int_equal(kv_index_move(x, 100 + i, 3, name, 0, NULL), 0);
	}
	for (unsigned i = 0; i < NEW_EXTENTS; i++) {
		r.id = 700000 + i;
		r.ext.offset = 4096 * i;
		hash_of(r.id, r.hash);
		assert_int_equal(kv_index_extent_put(x, &r), 0);
		/* committed: only the notes keep it (no page in RAM names it) */
		assert_int_equal(kv_index_extent_durable(x, r.id), 0);
	}
}

/* The trim goes through the pages in RAM in steps: pages moved between two
 * steps, here renamed within their layer (which reorders its list), still
 * have their extents copied, and the extents that came meanwhile are all
 * in the tables swapped in (most copied before the swap, in steps). Without, a walk that goes on from the page
 * it stopped at skips p10..p12 and p9000, listed after the empty pages,
 * and their extents left RAM with layer 4's. */
static void test_trim_steps_pages_moved(void **state)
{
	struct kv_index *x = *state;
	struct kv_index_loader *l;
	struct kv_manifest *lm;
	struct kv_extent_rec r;
	struct store s;
	uint64_t dropped;

	store_make(&s);
	store_fill(&s);
	store_extent_page(&s, 3, 9000, 3, "p9000");
	store_many(&s, 5000);
	store_layers(&s, 1, 6000);
	store_extent_page(&s, 4, 490000, 4, "y");
	l = walk_reclaimed(x, &s, &lm, 5004);
	assert_true(kv_index_layer_whole(x, 3));
	assert_false(kv_index_layer_whole(x, 4));
	x->trim_gap = trim_gap_renames;
	x->trim_gap_arg = x;
	assert_int_equal(kv_index_extents_trim(x, &dropped), 0);
	assert_null(x->trim_gap);
	assert_int_equal(dropped, 1);
	assert_int_equal(kv_index_extent_get(x, 4, &r), -ENOENT);
	for (uint64_t id = 1; id <= 3; id++)
		assert_int_equal(kv_index_extent_get(x, id, &r), 0);
	for (uint64_t id = 700000; id < 700000 + NEW_EXTENTS; id++)
		assert_int_equal(kv_index_extent_get(x, id, &r), 0);
	kv_index_load_close(l);
	kv_manifest_close(lm);
	store_done(&s);
}

/*
 * Layers 4..7 of LAYER_PAGES pages, each page with an extent of its own
 * (id: layer * 10000 + i; inode: layer * 100000 + 50000 + i; name "xI"),
 * committed through the manifest's API.
 */
#define LAYER_PAGES 1500

static void store_extent_layers(struct store *s)
{
	struct kv_extent_rec e = { .refcount = 1, .ext = { .length = 4096 } };
	struct kv_page_rec p = { .size = 4096, .attr = { .mode = 0444 } };

	store_layers(s, 4, 1);
	assert_int_equal(kv_manifest_begin(s->m), 0);
	for (uint64_t l = 4; l <= 7; l++)
		for (uint64_t i = 0; i < LAYER_PAGES; i++) {
			e.id = p.extent_id = l * 10000 + i;
			e.ext.segment = (uint32_t)l;
			e.ext.offset = 4096 * i;
			hash_of(e.id, e.hash);
			p.ino = l * 100000 + 50000 + i;
			p.layer_ino = l;
			snprintf(p.name, sizeof(p.name), "x%" PRIu64, i);
			assert_int_equal(kv_manifest_put_extent(s->m, &e), 0);
			assert_int_equal(kv_manifest_put_page(s->m, &p), 0);
		}
	assert_int_equal(kv_manifest_commit(s->m), 0);
}

struct churn {
	struct kv_index *x;
	atomic_bool stop, trimming, loaded;
	unsigned ops;
	_Atomic int failed_line;      /* of the first failed CHECK, or 0 */
};

static void trim_gap_slow(void *arg, bool before_swap)
{
	struct churn *c = arg;

	atomic_store(&c->trimming, true);
	usleep(2000);       /* room for the other threads' changes */
	while (before_swap && !atomic_load(&c->loaded))
		usleep(100);
}

/* A thread's failed check: its line, for the test's thread to assert on
 * (cmocka's checks may fail only there). */
#define CHECK(c, expr) do { if (!(expr) && !(c)->failed_line) (c)->failed_line = __LINE__; } while (0)

/* New pages with extents of their own in layer 7, and every other one
 * removed again with its extent; counts of layer 6's extents moved up
 * and back; pages of layer 6 moved to layer 7 and back. */
static void *churn_main(void *arg)
{
	struct churn *c = arg;
	struct kv_index *x = c->x;
	char name[32];
	uint64_t k = 0, ino, id;

	while (!atomic_load(&c->stop) && !c->failed_line) {
		ino = 9000000 + k;
		snprintf(name, sizeof(name), "n%" PRIu64, k);
		CHECK(c, add_page(x, ino, 7, name, 4096) == 0);
		if (k % 2) {
			CHECK(c, kv_index_remove(x, ino - 1) == 0);
			CHECK(c, kv_index_extent_ref(x, ino - 1, -1, NULL) == 0);
		}
		id = 60000 + k % LAYER_PAGES;
		CHECK(c, kv_index_extent_ref(x, id, +1, NULL) == 0);
		CHECK(c, kv_index_extent_ref(x, id, -1, NULL) == 0);
		ino = 6 * 100000 + 50000 + k % LAYER_PAGES;
		snprintf(name, sizeof(name), "x%" PRIu64, k % LAYER_PAGES);
		CHECK(c, kv_index_move(x, ino, 7, "moved", 0, NULL) == 0);
		CHECK(c, kv_index_move(x, ino, 6, name, 0, NULL) == 0);
		k++;
	}
	c->ops = (unsigned)k;
	return NULL;
}

/* Once the trim is under way: layer 5 loads. */
static void *loader_main(void *arg)
{
	struct churn *c = arg;
	struct kv_node_info n;

	while (!atomic_load(&c->trimming))
		usleep(100);
	CHECK(c, kv_index_lookup(c->x, 5, "x7", &n) == 0);
	atomic_store(&c->loaded, true);
	return NULL;
}

/* Every page of layer `layer` (4..7) in RAM names an extent the index has, whose
 * count is 1 (each page here has one of its own). Returns the pages. */
static unsigned expect_extents(struct kv_index *x, uint64_t layer)
{
	struct kv_extent_rec r;
	struct kv_node_info n;
	struct kv_dirent *d;
	unsigned with = 0;
	size_t nd;

	assert_int_equal(kv_index_readdir(x, layer, &d, &nd), 0);
	for (size_t i = 0; i < nd; i++) {
		assert_int_equal(kv_index_get(x, d[i].ino, &n), 0);
		if (n.extent_id == KV_EXTENT_EMPTY)
			continue;
		assert_int_equal(kv_index_extent_get(x, n.extent_id, &r), 0);
		assert_int_equal(r.refcount, 1);
		assert_int_equal(n.ext.length, 4096);
		with++;
	}
	kv_dirents_free(d, nd);
	return with;
}

/*
 * The trim under real concurrency: while it copies (slowed down between
 * its steps), one thread adds and removes pages and extents, moves counts
 * and moves pages between layers, and another loads a layer that was in
 * the manifest. After it: every page in RAM finds its extent with the
 * right count, the layer left in the manifest reads its extents back, and
 * the stats add up.
 */
static void test_trim_under_changes(void **state)
{
	struct kv_index *x = *state;
	struct churn c = { .x = x };
	struct kv_index_loader *l;
	struct kv_index_stats st;
	struct kv_manifest *lm;
	struct kv_node_info n;
	pthread_t churner, loader;
	struct store s;
	uint64_t dropped;
	unsigned pages = 0;

	store_make(&s);
	store_fill(&s);
	store_extent_layers(&s);
	/* 7 and 6 (1,501 pages each) and 3 fit; 5 and 4 stay out */
	l = walk_reclaimed(x, &s, &lm, 2 * (LAYER_PAGES + 1) + 3);
	assert_false(kv_index_layer_whole(x, 4));
	assert_false(kv_index_layer_whole(x, 5));
	x->trim_gap = trim_gap_slow;
	x->trim_gap_arg = &c;
	assert_int_equal(pthread_create(&churner, NULL, churn_main, &c), 0);
	assert_int_equal(pthread_create(&loader, NULL, loader_main, &c), 0);
	assert_int_equal(kv_index_extents_trim(x, &dropped), 0);
	atomic_store(&c.stop, true);
	atomic_store(&c.trimming, true);
	pthread_join(churner, NULL);
	pthread_join(loader, NULL);
	x->trim_gap = NULL;
	assert_int_equal(c.failed_line, 0);
	/* layer 4's extents left; layer 5's stayed or came back with it */
	assert_int_equal(dropped, LAYER_PAGES);
	assert_true(c.ops > 0);
	for (uint64_t layer = 5; layer <= 7; layer++)
		pages += expect_extents(x, layer);
	assert_int_equal(pages, 3 * LAYER_PAGES + (c.ops + 1) / 2);
	kv_index_stats(x, &st);
	assert_int_equal(st.extents_unloaded, LAYER_PAGES);
	/* Layer 4 loads: its extents come back from the manifest. */
	assert_int_equal(kv_index_lookup(x, 4, "x0", &n), 0);
	assert_int_equal(expect_extents(x, 4), LAYER_PAGES);
	kv_index_stats(x, &st);
	assert_int_equal(st.extents_unloaded, 0);
	assert_int_equal(st.extents, 2 + 4 * LAYER_PAGES + (c.ops + 1) / 2);
	kv_index_load_close(l);
	kv_manifest_close(lm);
	store_done(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_trim_follows_changes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_trim_steps_pages_moved, setup, teardown),
		cmocka_unit_test_setup_teardown(test_trim_under_changes, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
