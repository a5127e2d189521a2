/*
 * Unit tests for the page budget of the background load (index/residency.c,
 * kv_index_set_page_budget): the layers beyond it stay in the manifest,
 * counted but not loaded; the refcount check at the end of the walk still
 * covers their rows; a layer loaded on demand in the middle of the walk
 * counts each page once; after the walk those layers still load on demand,
 * until the loader is closed (then EIO, never ENOENT); the records of
 * extents only those layers name leave RAM after the reclaim, and come
 * back with their layer; a layer whose load fails keeps counting its
 * pages; the loader reads rows holding no index lock.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

#include "index_fixture.h"
#include "manifest_fixture.h"
#include "load_fixture.h"

static void expect_unloaded(struct kv_index *x, uint64_t pages, uint64_t pages_unloaded,
			    uint64_t layers_unloaded)
{
	struct kv_index_stats st;

	kv_index_stats(x, &st);
	assert_int_equal(st.pages, pages);
	assert_int_equal(st.pages_unloaded, pages_unloaded);
	assert_int_equal(st.layers_unloaded, layers_unloaded);
}

/* Pages of size 0, loaded or left in the manifest: the capacity charges
 * each a block (kvfs_store_usage), so the count must follow every path. */
static void expect_empty(struct kv_index *x, uint64_t empty)
{
	struct kv_index_stats st;

	kv_index_stats(x, &st);
	assert_int_equal(st.empty_pages, empty);
	assert_int_equal(kv_index_empty_pages(x), empty);
}

/* The store of store_fill, with `layers` more layers of `pages` empty
 * pages each (store_layers), walked whole with a page budget. */
static struct kv_index_loader *budget_walk(struct kv_index *x, struct store *s,
					   struct kv_manifest **lm, unsigned layers,
					   unsigned pages, uint64_t budget)
{
	struct kv_index_loader *l;

	store_make(s);
	store_fill(s);
	store_layers(s, layers, pages);
	kv_index_set_page_budget(x, budget);
	l = lazy_begin(x, s, lm);
	assert_int_equal(lazy_run(l), 0);
	return l;
}

/*
 * Layer 3 holds the three pages with extents (store_fill), layers 4..6
 * fifty empty pages each; every layer has the same mtime, so the newer
 * (higher inode) goes first: 6 and 5 fill the budget of 100, and 4 and 3
 * stay in the manifest. The extents' refcounts are all in layer 3's rows:
 * the check at the end of the walk passes only if the walk counted them.
 */
static void test_budget_defers_layers(void **state)
{
	struct kv_index *x = *state;
	struct kv_index_loader *l;
	struct kv_manifest *lm;
	struct kv_extent_rec r;
	struct kv_node_info n;
	struct kv_dirent *d;
	struct store s;
	uint64_t ino;
	int64_t oldest;
	size_t nd;

	l = budget_walk(x, &s, &lm, 3, 50, 100);
	expect_unloaded(x, 153, 53, 2);
	expect_empty(x, 150);   /* the layers of empty pages, loaded or not */
	assert_false(kv_index_layer_whole(x, 3));
	assert_false(kv_index_layer_whole(x, 4));
	assert_true(kv_index_layer_whole(x, 5));
	assert_true(kv_index_layer_whole(x, 6));
	/* A layer left in the manifest counts its rows as children. */
	assert_int_equal(kv_index_get(x, 4, &n), 0);
	assert_int_equal(n.nchildren, 50);
	/* An inode no row has is not looked for in vain (a page's of a layer
	 * left in the manifest loads it: test_index_unload.c). */
	assert_int_equal(kv_index_get(x, 999999, &n), -ENOENT);
	/* For eviction, the layer holding the least recently used page (all
	 * equal here: the first). */
	assert_int_equal(kv_index_deferred_layer(x, &ino, &oldest), 1);
	assert_int_equal(ino, 3);
	/* After the walk, outside its snapshot: a lookup loads the layer. */
	kv_index_load_end(l);
	assert_int_equal(kv_index_lookup(x, 3, "p11", &n), 0);
	assert_int_equal(n.ino, 11);
	assert_int_equal(n.extent_id, 1);
	assert_int_equal(kv_index_lookup(x, 3, "nope", &n), -ENOENT);
	assert_int_equal(kv_index_readdir(x, 3, &d, &nd), 0);
	assert_int_equal(nd, 3);
	kv_dirents_free(d, nd);
	assert_int_equal(kv_index_extent_get(x, 1, &r), 0);
	assert_int_equal(r.refcount, 2);
	expect_unloaded(x, 153, 50, 1);
	expect_empty(x, 150);
	assert_int_equal(kv_index_get(x, 3, &n), 0);
	assert_int_equal(n.nchildren, 3);
	assert_int_equal(kv_index_deferred_layer(x, &ino, &oldest), 1);
	assert_int_equal(ino, 4);
	/* Closed: a layer still in the manifest gives EIO, never ENOENT. */
	kv_index_load_close(l);
	assert_int_equal(kv_index_lookup(x, 4, "e1", &n), -EIO);
	assert_int_equal(kv_index_layer_load(x, 4), -EIO);
	kv_manifest_close(lm);
	store_done(&s);
}

/* A refcount that disagrees with rows the budget leaves in the manifest
 * is still found at the end of the walk. */
static void test_budget_refcount_mismatch(void **state)
{
	struct kv_index *x = *state;
	struct kv_index_loader *l;
	struct kv_manifest *lm;
	struct store s;

	store_make(&s);
	store_fill(&s);
	store_layers(&s, 1, 50);
	store_sql(&s, "UPDATE extents SET refcount = 3 WHERE id = 1;");
	kv_index_set_page_budget(x, 50);
	l = lazy_begin(x, &s, &lm);
	assert_int_equal(lazy_run(l), KV_ERR_CORRUPT);
	assert_false(kv_index_layer_whole(x, 3));   /* it was left out */
	lazy_done(l, lm);
	store_done(&s);
}

/*
 * Layer 3 (p10..p12, 5000 empty pages, then p9000 with extent 3) is left
 * in the manifest; layer 4 fits. After one step of the walk, a lookup
 * loads layer 3: the pages whose rows the walk passed (p10..p12) must not
 * be counted again, the ones after it (p9000) must be; the check at the
 * end of the walk fails otherwise.
 */
static void test_budget_layer_mid_walk(void **state)
{
	struct kv_index *x = *state;
	struct kv_index_loader *l;
	struct kv_index_stats st;
	struct kv_manifest *lm;
	struct kv_node_info n;
	struct kv_dirent *d;
	struct store s;
	size_t nd;

	store_make(&s);
	store_fill(&s);
	store_extent_page(&s, 3, 9000, 3, "p9000");
	store_many(&s, 5000);
	store_layers(&s, 1, 10);
	kv_index_set_page_budget(x, 10);
	l = lazy_begin(x, &s, &lm);
	/* counts, the extents, and one step of pages (8 chunks of 512 rows):
	 * part of layer 3 */
	for (int i = 0; i < 3; i++)
		assert_int_equal(kv_index_load_step(l), 1);
	kv_index_stats(x, &st);
	assert_true(st.pages_unloaded >= 3 && st.pages_unloaded < 5004);
	assert_int_equal(kv_index_lookup(x, 3, "p10", &n), 0);
	assert_int_equal(kv_index_lookup(x, 3, "p9000", &n), 0);
	assert_int_equal(n.extent_id, 3);
	assert_int_equal(kv_index_readdir(x, 3, &d, &nd), 0);
	assert_int_equal(nd, 5004);
	kv_dirents_free(d, nd);
	assert_int_equal(lazy_run(l), 0);
	expect_unloaded(x, 5014, 0, 0);
	lazy_done(l, lm);
	store_done(&s);
}

/* A budget that holds everything leaves nothing out. */
static void test_budget_large_enough(void **state)
{
	struct kv_index *x = *state;
	struct kv_index_loader *l;
	struct kv_manifest *lm;
	struct store s;

	l = budget_walk(x, &s, &lm, 2, 20, 43);
	expect_unloaded(x, 43, 0, 0);
	lazy_done(l, lm);
	store_done(&s);
}

/*
 * Layer 3 (extents 1 and 2) is left in the manifest, layer 4 (extent 3) is
 * loaded. After the reclaim, extents 1 and 2 leave RAM, except one whose
 * count changed since it was read (the manifest's row may lag); they come
 * back, with the manifest's counts, when layer 3 loads; the stats count
 * every extent throughout.
 */
static void test_budget_extents_trim(void **state)
{
	struct kv_index *x = *state;
	struct kv_index_loader *l;
	struct kv_index_stats st;
	struct kv_manifest *lm;
	struct kv_extent_rec r;
	struct kv_node_info n;
	struct store s;
	uint64_t dropped;

	store_make(&s);
	store_fill(&s);
	store_layers(&s, 1, 10);
	store_extent_page(&s, 3, 500000, 4, "x");
	kv_index_set_page_budget(x, 11);
	l = lazy_begin(x, &s, &lm);
	assert_int_equal(lazy_run(l), 0);
	kv_index_load_end(l);
	assert_false(kv_index_layer_whole(x, 3));
	/* Not before the reclaim has marked every extent. */
	assert_int_equal(kv_index_extents_trim(x, &dropped), 0);
	assert_int_equal(dropped, 0);
	kv_index_retired_drop(x);
	/* Extent 2's count moved (and back): its row may not say so yet. */
	assert_int_equal(kv_index_extent_ref(x, 2, +1, NULL), 0);
	assert_int_equal(kv_index_extent_ref(x, 2, -1, NULL), 0);
	assert_int_equal(kv_index_extents_trim(x, &dropped), 0);
	assert_int_equal(dropped, 1);
	assert_int_equal(kv_index_extent_get(x, 1, &r), -ENOENT);
	assert_int_equal(kv_index_extent_get(x, 2, &r), 0);
	assert_int_equal(kv_index_extent_get(x, 3, &r), 0);   /* layer 4's page */
	kv_index_stats(x, &st);
	assert_int_equal(st.extents, 3);
	assert_int_equal(st.extents_unloaded, 1);
	assert_int_equal(st.extent_bytes, 3 * 32768);
	/* Once is enough. */
	assert_int_equal(kv_index_extents_trim(x, &dropped), 0);
	assert_int_equal(dropped, 0);
	/* Layer 3 loads: its pages' extent comes back from the manifest. */
	assert_int_equal(kv_index_lookup(x, 3, "p10", &n), 0);
	assert_int_equal(n.extent_id, 1);
	assert_int_equal(n.ext.length, 32768);
	assert_int_equal(kv_index_extent_get(x, 1, &r), 0);
	assert_int_equal(r.refcount, 2);
	kv_index_stats(x, &st);
	assert_int_equal(st.extents, 3);
	assert_int_equal(st.extents_unloaded, 0);
	assert_int_equal(st.extent_bytes, 3 * 32768);
	/* and is freed as any other when its pages go */
	assert_int_equal(kv_index_lookup(x, 3, "p11", &n), 0);
	assert_int_equal(kv_index_remove(x, 10), 0);
	assert_int_equal(kv_index_extent_ref(x, 1, -1, NULL), 0);
	assert_int_equal(kv_index_remove(x, 11), 0);
	assert_int_equal(kv_index_extent_ref(x, 1, -1, NULL), 0);
	assert_int_equal(kv_index_extent_get(x, 1, &r), -ENOENT);
	kv_index_stats(x, &st);
	assert_int_equal(st.extents, 2);
	kv_index_load_close(l);
	kv_manifest_close(lm);
	store_done(&s);
}

/* A layer whose load fails half way (a row damaged since the mount) keeps
 * counting every page: those it brought in as pages, the others as rows
 * still in the manifest (they dropped out of the stats before). */
static void failed_load_counts(struct kv_index *x, unsigned pages, unsigned bad)
{
	struct kv_index_loader *l;
	struct kv_manifest *lm;
	struct kv_node_info n;
	struct store s;
	char sql[128];
	uint64_t all = 3 + 3 * (uint64_t)pages;

	l = budget_walk(x, &s, &lm, 3, pages, 2 * pages);
	kv_index_load_end(l);
	expect_unloaded(x, all, 3 + pages, 2);
	expect_empty(x, 3 * (uint64_t)pages);
	/* layer 4's rows are inodes 400000.., read in that order: one is
	 * damaged, and the rows before it are put */
	snprintf(sql, sizeof(sql), "UPDATE pages SET ident = 0 WHERE ino = %u", 400000 + bad);
	store_sql(&s, sql);
	assert_int_equal(kv_index_lookup(x, 4, "e7", &n), KV_ERR_CORRUPT);
	expect_unloaded(x, all, 3 + pages - bad, 2);
	assert_int_equal(kv_index_get(x, 4, &n), 0);
	assert_int_equal(n.nchildren, pages);
	/* the error stays: not tried again */
	assert_int_equal(kv_index_lookup(x, 4, "e1", &n), KV_ERR_CORRUPT);
	expect_unloaded(x, all, 3 + pages - bad, 2);
	expect_empty(x, 3 * (uint64_t)pages);   /* brought in or put back */
	kv_index_load_close(l);
	kv_manifest_close(lm);
	store_done(&s);
}

/* In the first chunk: the 26th of 50 rows. */
static void test_budget_failed_load_counts(void **state)
{
	failed_load_counts(*state, 50, 25);
}

/* In the third chunk (of 512 rows), read ahead while the second is put
 * (load.c, read_put): the 1,501st of 2,000 rows. */
static void test_budget_failed_load_read_ahead(void **state)
{
	failed_load_counts(*state, 2000, 1500);
}

/*
 * The loader reads the manifest holding none of the index's locks: a
 * lookup elsewhere goes on while it reads (it used to wait behind every
 * chunk read under the write lock, 100-180 ms a chunk at 1M pages). An
 * SQLite progress handler, put on every connection, asks a second thread
 * for a lookup while the loader's connection runs its statements, and
 * waits up to 10 s for the answer; the lookup takes the read lock, so it
 * cannot answer while the loader holds the write lock.
 */
static struct probe {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct kv_index *x;
	bool armed, asked, quit;
	unsigned probes, blocked;
	/* a layer being loaded: how many pages it says it holds (least
	 * seen), and rmdir's answer, meanwhile */
	uint64_t layer, least_children;
	int removal;
} pr = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static void *probe_thread(void *arg)
{
	struct kv_node_info n;

	(void)arg;
	pthread_mutex_lock(&pr.mu);
	for (;;) {
		while (!pr.asked && !pr.quit)
			pthread_cond_wait(&pr.cv, &pr.mu);
		if (pr.asked) {
			pthread_mutex_unlock(&pr.mu);
			(void)kv_index_get(pr.x, 6, &n);     /* a layer loaded by the walk */
			if (pr.layer) {
				int rc = kv_index_remove(pr.x, pr.layer);

				if (rc != -ENOTEMPTY)
					pr.removal = rc;
				if (kv_index_get(pr.x, pr.layer, &n) == 0 &&
				    n.nchildren < pr.least_children)
					pr.least_children = n.nchildren;
			}
			pthread_mutex_lock(&pr.mu);
			pr.asked = false;
			pthread_cond_broadcast(&pr.cv);
		} else {
			break;
		}
	}
	pthread_mutex_unlock(&pr.mu);
	return NULL;
}

static int probe_progress(void *arg)
{
	struct timespec until;
	int rc = 0;

	(void)arg;
	pthread_mutex_lock(&pr.mu);
	if (pr.armed && !pr.asked) {
		pr.asked = true;
		pthread_cond_broadcast(&pr.cv);
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 10;
		while (pr.asked && rc != ETIMEDOUT)
			rc = pthread_cond_timedwait(&pr.cv, &pr.mu, &until);
		pr.probes++;
		if (pr.asked) {         /* waiting for the lock: once is enough */
			pr.blocked++;
			pr.armed = false;
		}
	}
	pthread_mutex_unlock(&pr.mu);
	return 0;
}

static int probe_connect(sqlite3 *db, char **err, const struct sqlite3_api_routines *api)
{
	(void)err;
	(void)api;
	sqlite3_progress_handler(db, 20, probe_progress, NULL);
	return SQLITE_OK;
}

static void probe_arm(bool on)
{
	pthread_mutex_lock(&pr.mu);
	pr.armed = on;
	pthread_mutex_unlock(&pr.mu);
}

static void test_reads_hold_no_lock(void **state)
{
	struct kv_index *x = *state;
	struct kv_index_loader *l;
	struct kv_manifest *lm;
	struct kv_node_info n;
	struct store s;
	pthread_t th;

	store_make(&s);
	store_fill(&s);
	store_layers(&s, 3, 50);
	kv_index_set_page_budget(x, 100);
	pr.x = x;
	assert_int_equal(pthread_create(&th, NULL, probe_thread, NULL), 0);
	assert_int_equal(sqlite3_auto_extension((void (*)(void))probe_connect), SQLITE_OK);
	l = lazy_begin(x, &s, &lm);       /* its connection gets the handler */
	/* The walk: its scans of extents and pages. */
	probe_arm(true);
	assert_int_equal(lazy_run(l), 0);
	probe_arm(false);
	assert_true(pr.probes > 10);
	assert_int_equal(pr.blocked, 0);
	/* A layer left in the manifest, loaded after the walk: meanwhile it
	 * holds its 50 pages, rows or nodes, and rmdir says ENOTEMPTY (a
	 * count that read 0 between the two let rmdir answer EAGAIN). */
	kv_index_load_end(l);
	pr.probes = 0;
	pr.layer = 4;
	pr.least_children = UINT64_MAX;
	pr.removal = -ENOTEMPTY;
	probe_arm(true);
	assert_int_equal(kv_index_lookup(x, 4, "e7", &n), 0);
	probe_arm(false);
	assert_true(pr.probes > 10);
	assert_int_equal(pr.blocked, 0);
	assert_int_equal(pr.least_children, 50);
	assert_int_equal(pr.removal, -ENOTEMPTY);
	pthread_mutex_lock(&pr.mu);
	pr.quit = true;
	pthread_cond_broadcast(&pr.cv);
	pthread_mutex_unlock(&pr.mu);
	pthread_join(th, NULL);
	sqlite3_reset_auto_extension();
	kv_index_load_close(l);
	kv_manifest_close(lm);
	store_done(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_budget_defers_layers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_budget_refcount_mismatch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_budget_layer_mid_walk, setup, teardown),
		cmocka_unit_test_setup_teardown(test_budget_large_enough, setup, teardown),
		cmocka_unit_test_setup_teardown(test_budget_extents_trim, setup, teardown),
		cmocka_unit_test_setup_teardown(test_budget_failed_load_counts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_budget_failed_load_read_ahead, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reads_hold_no_lock, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
