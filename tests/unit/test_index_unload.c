/*
 * Unit tests for layers going back to the manifest after the load
 * (index/unload.c): only a layer unused, with every change queued for it
 * committed and no page being written, goes, and only over the page
 * budget; once gone, a lookup, a listing, a change, or a page asked for by
 * inode alone brings it back whole; a page whose access time is still to
 * be saved stays; the extents only its pages named can leave RAM after
 * it; lookups racing the unload never miss a page that is there.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "index_i.h"   /* ready_gap: between a layer made ready and the lock */
#include "index_fixture.h"
#include "manifest_fixture.h"
#include "load_fixture.h"

#define IDLE 3
#define ALL UINT64_MAX        /* every change committed */

/* store_fill (layer 3: pages 10-12 with extents 1 and 2) and layers 4..6
 * of 50 empty pages each, loaded whole in the background and settled (the
 * reclaim's end: kv_index_retired_drop), then a budget of `budget`. */
static struct kv_index_loader *settled_store(struct kv_index *x, struct store *s,
					     struct kv_manifest **lm, uint64_t budget)
{
	struct kv_index_loader *l;

	store_make(s);
	store_fill(s);
	store_layers(s, 3, 50);
	l = lazy_begin(x, s, lm);
	assert_int_equal(lazy_run(l), 0);
	kv_index_load_end(l);
	kv_index_retired_drop(x);
	kv_index_set_page_budget(x, budget);
	return l;
}

static void ticks(struct kv_index *x, unsigned n)
{
	while (n--)
		kv_index_unload_tick(x);
}

/* Layer ino back to the manifest: *pages of its pages left. */
static void unload(struct kv_index *x, uint64_t ino, uint64_t *pages)
{
	assert_int_equal(kv_index_unload_begin(x, ino, ALL, 0), 0);
	assert_int_equal(kv_index_unload_finish(x, ino, pages), 0);
	assert_false(kv_index_layer_whole(x, ino));
}

static void expect_stats(struct kv_index *x, uint64_t pages, uint64_t pages_unloaded,
			 uint64_t layers_unloaded)
{
	struct kv_index_stats st;

	kv_index_stats(x, &st);
	assert_int_equal(st.pages, pages);
	assert_int_equal(st.pages_unloaded, pages_unloaded);
	assert_int_equal(st.layers_unloaded, layers_unloaded);
}

static void done(struct kv_index_loader *l, struct kv_manifest *lm, struct store *s)
{
	kv_index_load_close(l);
	kv_manifest_close(lm);
	store_done(s);
}

/* The least recently used layer over the budget goes; each way back
 * brings it whole, with the same pages and counts. */
static void test_unload_and_back(void **state)
{
	struct kv_index *x = *state;
	struct kv_index_loader *l;
	struct kv_manifest *lm;
	struct kv_node_info n;
	struct kv_dirent *d;
	struct store s;
	uint64_t ino, pages;
	size_t nd;

	l = settled_store(x, &s, &lm, 200);
	expect_stats(x, 153, 0, 0);
	ticks(x, IDLE);
	assert_int_equal(kv_index_unload_pick(x, IDLE, ALL, &ino), 0);   /* within budget */
	kv_index_set_page_budget(x, 120);
	/* layers 4 and 5 were used since: 3 and 6 are older; 3 came first */
	assert_int_equal(kv_index_lookup(x, 4, "e1", &n), 0);
	assert_int_equal(kv_index_readdir(x, 5, &d, &nd), 0);
	kv_dirents_free(d, nd);
	assert_int_equal(kv_index_unload_pick(x, IDLE, ALL, &ino), 1);
	assert_int_equal(ino, 3);
	assert_int_equal(kv_index_unload_begin(x, 4, ALL, IDLE), -EBUSY);  /* just used */
	assert_int_equal(kv_index_unload_begin(x, 3, ALL, IDLE), 0);
	/* marked already, its pages still in RAM: again (counted once) */
	assert_int_equal(kv_index_unload_begin(x, 3, ALL, IDLE), 0);
	assert_int_equal(kv_index_unload_finish(x, 3, &pages), 0);
	assert_int_equal(pages, 3);
	expect_stats(x, 153, 3, 1);
	/* the layer's row counts its pages still */
	assert_int_equal(kv_index_get(x, 3, &n), 0);
	assert_int_equal(n.nchildren, 3);
	/* a lookup brings it back */
	assert_int_equal(kv_index_lookup(x, 3, "p11", &n), 0);
	assert_int_equal(n.ino, 11);
	assert_int_equal(n.extent_id, 1);
	assert_int_equal(n.state, KV_PAGE_DURABLE);
	assert_true(kv_index_layer_whole(x, 3));
	expect_stats(x, 153, 0, 0);
	/* a listing */
	unload(x, 6, &pages);
	assert_int_equal(pages, 50);
	expect_stats(x, 153, 50, 1);
	assert_int_equal(kv_index_empty_pages(x), 150);   /* its 50 still counted */
	assert_int_equal(kv_index_readdir(x, 6, &d, &nd), 0);
	assert_int_equal(nd, 50);
	kv_dirents_free(d, nd);
	assert_int_equal(kv_index_empty_pages(x), 150);   /* not twice */
	assert_true(kv_index_layer_whole(x, 6));
	/* an inode alone (the kernel holds inodes): through the manifest */
	unload(x, 3, &pages);
	assert_int_equal(kv_index_get(x, 12, &n), 0);
	assert_int_equal(n.parent, 3);
	assert_int_equal(n.extent_id, 2);
	assert_true(kv_index_layer_whole(x, 3));
	assert_int_equal(kv_index_get(x, 999999, &n), -ENOENT);   /* no row: no load */
	expect_stats(x, 153, 0, 0);
	/* after the loader is closed nothing goes (nothing could come back) */
	kv_index_load_close(l);
	assert_int_equal(kv_index_unload_begin(x, 6, ALL, 0), 0);
	assert_int_equal(kv_index_unload_finish(x, 6, &pages), -ESHUTDOWN);
	assert_true(kv_index_layer_whole(x, 6));
	expect_stats(x, 153, 0, 0);
	kv_manifest_close(lm);
	store_done(&s);
}

/* The node tables shrink once layers going back leave them mostly empty,
 * and every node left, and every one loaded again, is found. */
static void test_unload_shrinks_tables(void **state)
{
	struct kv_index *x = *state;
	struct kv_index_loader *l;
	struct kv_manifest *lm;
	struct kv_node_info n;
	struct store s;
	uint64_t pages;
	size_t peak;

	store_make(&s);
	store_fill(&s);
	store_layers(&s, 3, 2000);
	l = lazy_begin(x, &s, &lm);
	assert_int_equal(lazy_run(l), 0);
	kv_index_load_end(l);
	kv_index_retired_drop(x);
	kv_index_set_page_budget(x, 1);
	peak = x->by_ino.mask + 1;
	assert_true(peak >= 8192);                     /* 6,000 pages and more */
	for (uint64_t ino = 4; ino <= 6; ino++) {
		unload(x, ino, &pages);
		assert_int_equal(pages, 2000);
	}
	assert_true(x->by_ino.mask + 1 <= peak / 4);
	assert_true(x->by_name.mask + 1 <= peak / 4);
	assert_null(x->by_ino.old_slot);               /* moved across already */
	assert_null(x->by_name.old_slot);
	assert_int_equal(kv_index_lookup(x, 3, "p11", &n), 0);   /* stayed */
	assert_int_equal(n.ino, 11);
	/* back again, all of them */
	for (unsigned i = 0; i < 2000; i += 7) {
		char name[16];

		snprintf(name, sizeof(name), "e%u", i);
		assert_int_equal(kv_index_lookup(x, 5, name, &n), 0);
		assert_int_equal(n.ino, 100000 * 5 + i);
		assert_int_equal(kv_index_get(x, 100000 * 5 + i, &n), 0);
	}
	expect_stats(x, 6003, 4000, 2);
	done(l, lm, &s);
}

/* What keeps a layer in RAM. */
static void test_unload_refused(void **state)
{
	struct kv_index *x = *state;
	struct kv_index_loader *l;
	struct kv_manifest *lm;
	struct kv_node_info n, w;
	struct store s;
	uint64_t ino, pages;

	/* before the reclaim's end (retired extents may still be marked) */
	store_make(&s);
	store_fill(&s);
	l = lazy_begin(x, &s, &lm);
	assert_int_equal(lazy_run(l), 0);
	kv_index_set_page_budget(x, 1);
	ticks(x, IDLE);
	assert_int_equal(kv_index_unload_pick(x, IDLE, ALL, &ino), 0);
	assert_int_equal(kv_index_unload_begin(x, 3, ALL, 0), -EBUSY);
	kv_index_retired_drop(x);
	assert_int_equal(kv_index_unload_pick(x, IDLE, ALL, &ino), 1);
	assert_int_equal(ino, 3);
	/* a change queued for it (seq 7) and not committed yet */
	assert_int_equal(kv_index_get(x, 10, &n), 0);
	kv_index_layer_queued(x, &n, 7);
	assert_int_equal(kv_index_unload_pick(x, IDLE, 6, &ino), 0);
	assert_int_equal(kv_index_unload_begin(x, 3, 6, 0), -EBUSY);
	/* a page being written (no row yet) */
	w = info(KV_KIND_PAGE, kv_index_next_ino(x), 3, "w");
	w.state = KV_PAGE_WRITING;
	assert_int_equal(kv_index_add(x, &w), 0);
	assert_int_equal(kv_index_unload_begin(x, 3, 7, 0), -EBUSY);
	w.state = KV_PAGE_SEALED;
	assert_int_equal(kv_index_update(x, w.ino, &w, KV_UPD_STATE), 0);
	kv_index_layer_queued(x, &w, 8);
	assert_int_equal(kv_index_unload_begin(x, 3, 7, 0), -EBUSY);
	/* committed (its durable mark may come later: the row is there) */
	assert_int_equal(kv_index_remove(x, w.ino), 0);
	kv_index_layer_queued(x, &w, 9);
	assert_int_equal(kv_index_unload_begin(x, 3, 9, 0), 0);
	assert_int_equal(kv_index_unload_finish(x, 3, &pages), 0);
	assert_int_equal(pages, 3);
	/* an unknown inode or no layer */
	assert_int_equal(kv_index_unload_begin(x, 4242, ALL, 0), -ENOENT);
	assert_int_equal(kv_index_unload_begin(x, 10, ALL, 0), -ENOENT);
	done(l, lm, &s);
}

/* Changes in a layer that went back load it first: none is lost, none
 * fails for want of the caller loading it. */
static void test_unload_changes(void **state)
{
	struct kv_index *x = *state;
	struct kv_index_loader *l;
	struct kv_manifest *lm;
	struct kv_node_info n, p;
	struct store s;
	uint64_t pages, replaced;

	l = settled_store(x, &s, &lm, 1);
	/* add */
	unload(x, 4, &pages);
	p = info(KV_KIND_PAGE, kv_index_next_ino(x), 4, "e1");
	p.state = KV_PAGE_WRITING;
	assert_int_equal(kv_index_add(x, &p), -EEXIST);   /* its row's name */
	assert_true(kv_index_layer_whole(x, 4));
	snprintf(p.name, sizeof(p.name), "new");
	assert_int_equal(kv_index_add(x, &p), 0);
	assert_int_equal(kv_index_remove(x, p.ino), 0);
	/* remove by inode */
	unload(x, 4, &pages);
	assert_int_equal(pages, 50);
	assert_int_equal(kv_index_remove(x, 400007), 0);
	assert_int_equal(kv_index_lookup(x, 4, "e7", &n), -ENOENT);
	assert_int_equal(kv_index_get(x, 4, &n), 0);
	assert_int_equal(n.nchildren, 49);
	/* a page's row updated (chmod) */
	unload(x, 5, &pages);
	n = info(KV_KIND_PAGE, 500003, 5, "e3");
	n.attr.mode = 0400;
	assert_int_equal(kv_index_update(x, 500003, &n, KV_UPD_ATTR), 0);
	assert_true(kv_index_layer_whole(x, 5));
	assert_int_equal(kv_index_lookup(x, 5, "e3", &n), 0);
	assert_int_equal(n.attr.mode, 0400);
	/* moved out of one gone back into another gone back */
	unload(x, 5, &pages);
	unload(x, 6, &pages);
	assert_int_equal(kv_index_move(x, 500004, 6, "e9", 1, &replaced), 0);
	assert_int_equal(replaced, 600009);
	assert_true(kv_index_layer_whole(x, 5));
	assert_true(kv_index_layer_whole(x, 6));
	assert_int_equal(kv_index_lookup(x, 6, "e9", &n), 0);
	assert_int_equal(n.ino, 500004);
	/* the layer itself: not empty, whatever is in RAM */
	unload(x, 6, &pages);
	assert_int_equal(kv_index_remove(x, 6), -ENOTEMPTY);
	expect_stats(x, 153 - 1 - 1, 50, 1);
	done(l, lm, &s);
}

static int count_touched(void *arg, const struct kv_page_brief *p)
{
	(void)p;
	(*(int *)arg)++;
	return 0;
}

/* A page whose access time is yet to be saved stays in RAM; the layer is
 * still marked gone, and its next use loads the others around it. Once
 * the time is saved (the flush's walk), the page may go too. */
static void test_unload_keeps_touched(void **state)
{
	struct kv_index *x = *state;
	struct kv_index_loader *l;
	struct kv_manifest *lm;
	struct kv_node_info n;
	struct kv_dirent *d;
	struct store s;
	uint64_t pages, ino;
	int touched = 0;
	size_t nd;

	l = settled_store(x, &s, &lm, 1);
	n.attr.atime_ns = 12345;
	assert_int_equal(kv_index_update(x, 11, &n, KV_UPD_ATIME), 0);
	unload(x, 3, &pages);
	assert_int_equal(pages, 2);
	expect_stats(x, 153, 2, 1);
	assert_int_equal(kv_index_get(x, 11, &n), 0);
	assert_int_equal(n.attr.atime_ns, 12345);
	assert_false(kv_index_layer_whole(x, 3));
	/* the flush walks it: then the layer is offered again, and the page
	 * goes (the layer counted gone once) */
	assert_int_equal(kv_index_touched_walk(x, false, count_touched, &touched), 0);
	assert_int_equal(touched, 1);
	ticks(x, IDLE);
	for (uint64_t lay = 4; lay <= 6; lay++)   /* the loaded ones (else first) in use */
		assert_int_equal(kv_index_lookup(x, lay, "e0", &n), 0);
	assert_int_equal(kv_index_unload_pick(x, IDLE, ALL, &ino), 1);
	assert_int_equal(ino, 3);
	assert_int_equal(kv_index_unload_begin(x, 3, ALL, IDLE), 0);
	assert_int_equal(kv_index_unload_finish(x, 3, &pages), 0);
	assert_int_equal(pages, 1);
	expect_stats(x, 153, 3, 1);
	assert_int_equal(kv_index_readdir(x, 3, &d, &nd), 0);
	assert_int_equal(nd, 3);
	kv_dirents_free(d, nd);
	expect_stats(x, 153, 0, 0);
	done(l, lm, &s);
}

/* After a layer went back, the extents only its pages named can leave
 * RAM too, and come back with it. */
static void test_unload_then_trim(void **state)
{
	struct kv_index *x = *state;
	struct kv_index_loader *l;
	struct kv_manifest *lm;
	struct kv_extent_rec r;
	struct kv_node_info n;
	struct store s;
	uint64_t pages, dropped;

	l = settled_store(x, &s, &lm, 1);
	assert_int_equal(kv_index_extents_trim(x, &dropped), 0);
	assert_int_equal(dropped, 0);        /* no layer out of RAM yet */
	unload(x, 3, &pages);
	assert_int_equal(kv_index_extents_trim(x, &dropped), 0);
	assert_int_equal(dropped, 2);
	assert_int_equal(kv_index_extent_get(x, 1, &r), -ENOENT);
	assert_int_equal(kv_index_lookup(x, 3, "p10", &n), 0);
	assert_int_equal(n.ext.length, 32768);
	assert_int_equal(kv_index_extent_get(x, 1, &r), 0);
	assert_int_equal(r.refcount, 2);
	done(l, lm, &s);
}

/* The layer goes back just after a lookup or listing made it ready, and
 * before it looks (as the daemon's unloader may, in all but a stall of
 * seconds): the lookup does not answer from a layer not loaded. */
static void gap_unload(void *arg, uint64_t layer)
{
	struct kv_index *x = arg;
	uint64_t pages;

	x->ready_gap = NULL;        /* once */
	assert_int_equal(kv_index_unload_begin(x, layer, ALL, 0), 0);
	assert_int_equal(kv_index_unload_finish(x, layer, &pages), 0);
	assert_int_equal(pages, 50);
}

static void test_unload_between(void **state)
{
	struct kv_index *x = *state;
	struct kv_index_loader *l;
	struct kv_manifest *lm;
	struct kv_node_info n;
	struct kv_dirent *d;
	struct store s;
	size_t nd;

	l = settled_store(x, &s, &lm, 1);
	x->ready_gap = gap_unload;
	x->ready_gap_arg = x;
	assert_int_equal(kv_index_lookup(x, 5, "e3", &n), 0);
	assert_int_equal(n.ino, 500003);
	assert_null(x->ready_gap);
	x->ready_gap = gap_unload;
	assert_int_equal(kv_index_readdir(x, 6, &d, &nd), 0);
	assert_int_equal(nd, 50);
	kv_dirents_free(d, nd);
	assert_null(x->ready_gap);
	expect_stats(x, 153, 0, 0);
	done(l, lm, &s);
}

/* Lookups, listings and gets of a layer going back and coming back over
 * and over never miss one of its pages. */
struct race {
	struct kv_index *x;
	atomic_bool stop;
	atomic_uint rounds;
	atomic_int err;           /* asserted by the main thread */
};

static void *unloader(void *arg)
{
	struct race *r = arg;
	uint64_t pages;

	/* As the daemon's, in quick ticks: a layer used in the last two
	 * stays (else each lookup could find it gone every time it looks) */
	while (!atomic_load(&r->stop)) {
		kv_index_unload_tick(r->x);
		if (kv_index_unload_begin(r->x, 4, ALL, 2) == 0) {
			if (kv_index_unload_finish(r->x, 4, &pages) < 0)
				atomic_store(&r->err, -1);
			atomic_fetch_add(&r->rounds, 1);
		}
		usleep(200);
	}
	return NULL;
}

static void test_unload_race(void **state)
{
	struct kv_index *x = *state;
	struct race r = { .x = x };
	struct kv_index_loader *l;
	struct kv_manifest *lm;
	struct kv_node_info n;
	struct kv_dirent *d;
	struct store s;
	pthread_t th;
	char name[16];
	size_t nd;

	l = settled_store(x, &s, &lm, 1);
	assert_int_equal(pthread_create(&th, NULL, unloader, &r), 0);
	for (unsigned i = 0; i < 3000 || atomic_load(&r.rounds) < 20; i++) {
		snprintf(name, sizeof(name), "e%u", i % 50);
		assert_int_equal(kv_index_lookup(x, 4, name, &n), 0);
		assert_int_equal(kv_index_get(x, 400000 + (i * 7) % 50, &n), 0);
		if (i % 16 == 0) {
			assert_int_equal(kv_index_readdir(x, 4, &d, &nd), 0);
			assert_int_equal(nd, 50);
			kv_dirents_free(d, nd);
		}
		if (i % 8 == 7)
			usleep(600);      /* unused for three ticks: it may go */
		assert_true(i < 100000);
	}
	atomic_store(&r.stop, true);
	pthread_join(th, NULL);
	assert_int_equal(atomic_load(&r.err), 0);
	assert_int_equal(kv_index_readdir(x, 4, &d, &nd), 0);
	assert_int_equal(nd, 50);
	kv_dirents_free(d, nd);
	expect_stats(x, 153, 0, 0);
	done(l, lm, &s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_unload_shrinks_tables, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unload_and_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unload_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unload_changes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unload_keeps_touched, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unload_then_trim, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unload_between, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unload_race, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
