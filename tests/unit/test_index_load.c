/*
 * Unit tests for loading the index from a manifest (index/load.c): a
 * round trip of every kind of row, and damaged manifests (a page naming a
 * missing extent, refcounts that disagree, a page without its layer)
 * refused with a clear error; and the same in the background
 * (kv_index_load_begin/step): a layer wanted before the walk reaches it,
 * or after the walk took part of it, is whole and has every page once,
 * also with threads looking up and listing while the walk runs; new pages
 * made, and pages moved and removed, while it runs.
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

#include <sqlite3.h>

#include "index_fixture.h"
#include "manifest_fixture.h"
#include "load_fixture.h"


/* ---- load from a manifest ---- */

static void test_load_roundtrip(void **state)
{
	struct kv_index *x = *state;
	struct kv_index_stats st;
	struct kv_extent_rec e;
	struct kv_node_info n;
	struct store s;
	uint8_t h[KV_HASH_LEN];

	store_make(&s);
	store_fill(&s);
	assert_int_equal(kv_index_load(x, s.m), 0);
	assert_int_equal(kv_index_lookup(x, KV_ROOT_INO, "qwen", &n), 0);
	assert_int_equal(n.ino, 2);
	assert_int_equal(n.geo.kv_heads, 4);
	assert_int_equal(n.attr.mode, 0750);
	assert_int_equal(kv_index_lookup(x, 2, "05", &n), 0);
	assert_int_equal(n.layer, 5);
	assert_int_equal(kv_index_lookup(x, 3, "p12", &n), 0);
	assert_int_equal(n.ino, 12);
	assert_int_equal(n.state, KV_PAGE_DURABLE);
	assert_int_equal(n.extent_id, 2);
	assert_int_equal(n.ext.segment, 1);
	assert_int_equal(n.ext.offset, 4096);
	hash_of(2, h);
	assert_memory_equal(n.hash, h, KV_HASH_LEN);
	assert_int_equal(kv_index_extent_get(x, 1, &e), 0);
	assert_int_equal(e.refcount, 2);
	kv_index_stats(x, &st);
	assert_int_equal(st.models, 1);
	assert_int_equal(st.layers, 1);
	assert_int_equal(st.pages, 3);
	assert_int_equal(st.page_bytes, 3 * 32768);
	assert_int_equal(st.extents, 2);
	assert_int_equal(st.extent_bytes, 2 * 32768);
	assert_true(kv_index_next_ino(x) > 12);
	assert_true(kv_index_next_extent_id(x) > 2);
	/* Only into an empty index. */
	assert_int_equal(kv_index_load(x, s.m), -EINVAL);
	store_done(&s);
}

static void test_load_missing_extent(void **state)
{
	struct kv_index *x = *state;
	struct store s;

	store_make(&s);
	store_fill(&s);
	store_sql(&s, "INSERT INTO pages VALUES (13, 3, 'lost', 99, 32768, 292, 0, 0, 0, 0, 0, "
		  "kvfs_ident_page(13, 3, 'lost', 99, 32768));");
	assert_int_equal(kv_index_load(x, s.m), KV_ERR_CORRUPT);
	store_done(&s);
}

static void test_load_refcount_mismatch(void **state)
{
	struct kv_index *x = *state;
	struct store s;

	store_make(&s);
	store_fill(&s);
	store_sql(&s, "UPDATE extents SET refcount = 3 WHERE id = 1;");
	assert_int_equal(kv_index_load(x, s.m), KV_ERR_CORRUPT);
	store_done(&s);
}

static void test_load_missing_layer(void **state)
{
	struct kv_index *x = *state;
	struct store s;

	store_make(&s);
	store_fill(&s);
	store_sql(&s, "UPDATE pages SET layer_ino = 44 WHERE ino = 12;");
	assert_int_equal(kv_index_load(x, s.m), KV_ERR_CORRUPT);
	store_done(&s);
}

/* ---- loading in the background ---- */

static void test_lazy_roundtrip(void **state)
{
	struct kv_index *x = *state, *eager;
	struct kv_manifest *lm;
	struct kv_index_loader *l;
	struct kv_index_stats st;
	struct kv_node_info n, e;
	struct kv_extent_rec r;
	struct kv_dirent *d;
	struct store s;
	size_t nd;
	uint8_t h[KV_HASH_LEN];

	store_make(&s);
	store_fill(&s);
	l = lazy_begin(x, &s, &lm);
	/* Models and layers at once; no page yet, and new numbers are above
	 * every row already. */
	kv_index_stats(x, &st);
	assert_int_equal(st.models, 1);
	assert_int_equal(st.layers, 1);
	assert_int_equal(st.pages, 0);
	assert_true(kv_index_next_ino(x) > 12);
	assert_true(kv_index_next_extent_id(x) > 2);
	/* A lookup in the layer loads it first. */
	assert_int_equal(kv_index_lookup(x, 3, "p12", &n), 0);
	assert_int_equal(n.ino, 12);
	assert_int_equal(n.state, KV_PAGE_DURABLE);
	assert_int_equal(n.ext.segment, 1);
	assert_int_equal(n.ext.offset, 4096);
	hash_of(2, h);
	assert_memory_equal(n.hash, h, KV_HASH_LEN);
	assert_int_equal(kv_index_lookup(x, 3, "nope", &n), -ENOENT);
	assert_int_equal(kv_index_readdir(x, 3, &d, &nd), 0);
	assert_int_equal(nd, 3);
	assert_string_equal(d[0].name, "p10");
	assert_string_equal(d[2].name, "p12");
	kv_dirents_free(d, nd);
	kv_index_stats(x, &st);
	assert_int_equal(st.pages, 3);
	/* The walk then takes nothing twice: the refcounts agree. */
	assert_int_equal(lazy_run(l), 0);
	assert_int_equal(kv_index_load_step(l), 0);
	kv_index_stats(x, &st);
	assert_int_equal(st.pages, 3);
	assert_int_equal(st.extents, 2);
	assert_int_equal(kv_index_extent_get(x, 1, &r), 0);
	assert_int_equal(r.refcount, 2);
	lazy_done(l, lm);
	/* The same index as a load at once gives. */
	assert_int_equal(kv_index_new(&eager), 0);
	assert_int_equal(kv_index_load(eager, s.m), 0);
	for (uint64_t ino = 2; ino <= 12; ino++) {
		int a = kv_index_get(x, ino, &n), b = kv_index_get(eager, ino, &e);

		assert_int_equal(a, b);
		if (a)
			continue;
		assert_string_equal(n.name, e.name);
		assert_int_equal(n.parent, e.parent);
		assert_int_equal(n.nchildren, e.nchildren);
		assert_int_equal(n.extent_id, e.extent_id);
		assert_memory_equal(&n.ext, &e.ext, sizeof(n.ext));
	}
	kv_index_free(eager);
	store_done(&s);
}

struct prober {
	pthread_t th;
	struct kv_index *x;
	unsigned seed, nlayers, count;
	atomic_int *bad;
};

/* Look up names all over the layers, and list them, while the walk runs. */
static void *probe(void *arg)
{
	struct prober *p = arg;
	struct kv_node_info n;
	struct kv_dirent *d;
	char name[32];
	size_t nd;

	for (int k = 0; k < 400; k++) {
		unsigned layer = 4 + rand_r(&p->seed) % p->nlayers;
		unsigned i = rand_r(&p->seed) % p->count;

		snprintf(name, sizeof(name), "e%u", i);
		if (kv_index_lookup(p->x, layer, name, &n) != 0 ||
		    n.ino != 100000ull * layer + i)
			atomic_fetch_add(p->bad, 1);
		if (k % 50 == 0) {
			if (kv_index_readdir(p->x, layer, &d, &nd) != 0 || nd != p->count)
				atomic_fetch_add(p->bad, 1);
			else
				kv_dirents_free(d, nd);
		}
	}
	return NULL;
}

static void test_lazy_concurrent(void **state)
{
	struct kv_index *x = *state;
	struct prober pr[4];
	struct kv_manifest *lm;
	struct kv_index_loader *l;
	struct kv_index_stats st;
	struct store s;
	atomic_int bad = 0;

	store_make(&s);
	store_fill(&s);
	store_layers(&s, 6, 3000);
	l = lazy_begin(x, &s, &lm);
	for (unsigned t = 0; t < 4; t++) {
		pr[t] = (struct prober){ .x = x, .seed = t + 1, .nlayers = 6, .count = 3000,
					 .bad = &bad };
		assert_int_equal(pthread_create(&pr[t].th, NULL, probe, &pr[t]), 0);
	}
	assert_int_equal(lazy_run(l), 0);
	for (unsigned t = 0; t < 4; t++)
		pthread_join(pr[t].th, NULL);
	assert_int_equal(atomic_load(&bad), 0);
	kv_index_stats(x, &st);
	assert_int_equal(st.pages, 3 + 6 * 3000);
	assert_int_equal(st.layers, 7);
	lazy_done(l, lm);
	store_done(&s);
}

static void test_lazy_layer_mid_walk(void **state)
{
	struct kv_index *x = *state;
	struct kv_manifest *lm;
	struct kv_index_loader *l;
	struct kv_index_stats st;
	struct kv_node_info n;
	struct kv_dirent *d;
	struct store s;
	size_t nd, i;

	store_make(&s);
	store_fill(&s);
	store_many(&s, 5000);
	l = lazy_begin(x, &s, &lm);
	/* counts, the extents, and one chunk of pages: part of layer 3 */
	for (i = 0; i < 3; i++)
		assert_int_equal(kv_index_load_step(l), 1);
	kv_index_stats(x, &st);
	assert_true(st.pages > 0 && st.pages < 5003);
	/* Wanted now: the rest of the layer, each page once, in order. */
	assert_int_equal(kv_index_lookup(x, 3, "e4999", &n), 0);
	assert_int_equal(n.ino, 5099);
	assert_int_equal(kv_index_readdir(x, 3, &d, &nd), 0);
	assert_int_equal(nd, 5003);
	assert_string_equal(d[0].name, "p10");
	for (i = 3; i < nd; i++)
		assert_int_equal(d[i].ino, 100 + i - 3);
	kv_dirents_free(d, nd);
	assert_int_equal(lazy_run(l), 0);
	kv_index_stats(x, &st);
	assert_int_equal(st.pages, 5003);
	lazy_done(l, lm);
	store_done(&s);
}

/* New pages while the index loads: one into a layer not loaded yet is
 * refused until that layer is in (its name may be taken in a row); dedup
 * offers only extents made since the load began (the load checks the
 * others' refcounts); and the check at the end ignores the new extents. */
static void test_lazy_new_pages(void **state)
{
	struct kv_index *x = *state;
	struct kv_manifest *lm;
	struct kv_index_loader *l;
	struct kv_extent_rec r = { .refcount = 1,
				   .ext = { .segment = 7, .offset = 0, .length = 32768 } },
			     c[4];
	struct kv_node_info n = { .parent = 3, .kind = KV_KIND_PAGE, .state = KV_PAGE_DURABLE,
				  .size = 32768, .attr = { .mode = 0444 } };
	struct kv_index_stats st;
	struct store s;

	store_make(&s);
	store_fill(&s);
	l = lazy_begin(x, &s, &lm);
	r.id = kv_index_next_extent_id(x);
	hash_of(1, r.hash);                  /* the same bytes as extent 1 */
	assert_int_equal(kv_index_extent_put(x, &r), 0);
	assert_int_equal(kv_index_extent_durable(x, r.id), 0);
	n.ino = kv_index_next_ino(x);
	n.extent_id = r.id;
	strcpy(n.name, "new");
	/* into a layer the walk has not reached: the index loads it first */
	assert_int_equal(kv_index_add(x, &n), 0);
	assert_true(kv_index_layer_whole(x, 3));
	strcpy(n.name, "p11");               /* taken by a row: now known */
	n.ino++;
	assert_int_equal(kv_index_add(x, &n), -EEXIST);
	/* Extent 1 is loaded (p10, p11 name it) but not offered yet. */
	assert_int_equal(kv_index_extent_candidates(x, r.hash, 32768, c, 4), 1);
	assert_int_equal(c[0].id, r.id);
	assert_int_equal(lazy_run(l), 0);
	kv_index_stats(x, &st);
	assert_int_equal(st.pages, 4);
	assert_int_equal(kv_index_extent_candidates(x, r.hash, 32768, c, 4), 2);
	lazy_done(l, lm);
	store_done(&s);
}

/* A page moved while the index loads, into another layer: refused until
 * that layer is in; then the walk, whose snapshot still has the page under
 * its old name, does not bring it back there. */
static void test_lazy_move(void **state)
{
	struct kv_layer_rec la = { .ino = 4, .model_ino = 2, .layer = 6, .name = "06",
				   .attr = { .mode = 0750 } };
	struct kv_index *x = *state;
	struct kv_manifest *lm;
	struct kv_index_loader *l;
	struct kv_index_stats st;
	struct kv_node_info n;
	struct store s;

	store_make(&s);
	store_fill(&s);
	assert_int_equal(kv_manifest_begin(s.m), 0);
	assert_int_equal(kv_manifest_put_layer(s.m, &la), 0);
	assert_int_equal(kv_manifest_commit(s.m), 0);
	l = lazy_begin(x, &s, &lm);
	assert_int_equal(kv_index_layer_load(x, 3), 0);
	assert_false(kv_index_layer_whole(x, 4));
	assert_int_equal(kv_index_move(x, 10, 4, "moved", 0, NULL), 0);   /* loads 4 */
	assert_true(kv_index_layer_whole(x, 4));
	assert_int_equal(lazy_run(l), 0);
	assert_int_equal(kv_index_lookup(x, 3, "p10", &n), -ENOENT);
	assert_int_equal(kv_index_lookup(x, 4, "moved", &n), 0);
	assert_int_equal(n.ino, 10);
	kv_index_stats(x, &st);
	assert_int_equal(st.pages, 3);
	lazy_done(l, lm);
	store_done(&s);
}

/* The usual rows, and layer 4 "6" with q13, which shares extent 2 with
 * p12. */
static void store_shared_layer(struct store *s)
{
	store_make(s);
	store_fill(s);
	store_sql(s, "INSERT INTO layers VALUES (4, 2, 6, '6', 488, 0, 0, 0, 0, 0, "
		  "kvfs_ident_layer(4, 2, 6, '6'));"
		  "INSERT INTO pages VALUES (13, 4, 'q13', 2, 32768, 292, 0, 0, 0, 0, 0, "
		  "kvfs_ident_page(13, 4, 'q13', 2, 32768));"
		  "UPDATE extents SET refcount = 2 WHERE id = 2;");
}

static int count_extent(void *arg, const struct kv_extent_rec *r)
{
	(void)r;
	++*(int *)arg;
	return 0;
}

/* Pages removed while the index loads, before the walk reaches the
 * extents: an extent whose last page went is retired, so the walk does not
 * bring it back (nor the check find its count wrong), and the extent walk
 * still shows it until kv_index_retired_drop (the reclaim must mark it),
 * also when its last page goes after the walk. A layer not loaded yet is
 * not removed: it only looks empty. */
static void test_lazy_remove(void **state)
{
	struct kv_index *x = *state;
	struct kv_manifest *lm;
	struct kv_index_loader *l;
	struct kv_index_stats st;
	struct kv_extent_rec r, c[4];
	struct kv_node_info n;
	struct store s;
	uint32_t count;
	int nx = 0;

	store_shared_layer(&s);
	l = lazy_begin(x, &s, &lm);
	/* looks empty until loaded (the index loads it first) */
	assert_int_equal(kv_index_remove(x, 4), -ENOTEMPTY);
	assert_int_equal(kv_index_layer_load(x, 3), 0);
	for (uint64_t ino = 10; ino <= 12; ino++) {
		assert_int_equal(kv_index_get(x, ino, &n), 0);
		assert_int_equal(kv_index_remove(x, ino), 0);
		assert_int_equal(kv_index_extent_ref(x, n.extent_id, -1, &count), 0);
		assert_int_equal(count, ino == 10 || ino == 12 ? 1 : 0);
	}
	/* extent 1 is retired: found by nothing but the extent walk */
	assert_int_equal(kv_index_extent_get(x, 1, &r), -ENOENT);
	assert_int_equal(kv_index_extent_ref(x, 1, +1, &count), -ENOENT);
	hash_of(1, r.hash);
	assert_int_equal(kv_index_extent_candidates(x, r.hash, 32768, c, 4), 0);
	kv_index_stats(x, &st);
	assert_int_equal(st.extents, 1);
	/* The walk, whose snapshot still has extent 1 and its pages, agrees. */
	assert_int_equal(lazy_run(l), 0);
	kv_index_stats(x, &st);
	assert_int_equal(st.pages, 1);
	assert_int_equal(st.extents, 1);
	assert_int_equal(kv_index_extent_get(x, 2, &r), 0);
	assert_int_equal(r.refcount, 1);
	assert_int_equal(kv_index_lookup(x, 3, "p11", &n), -ENOENT);
	assert_int_equal(kv_index_extent_walk(x, count_extent, &nx), 0);
	assert_int_equal(nx, 2);
	assert_int_equal(kv_index_remove(x, 4), -ENOTEMPTY);
	/* The walk is over but the reclaim has not marked the extents yet:
	 * an extent whose last page goes now is retired too. */
	assert_int_equal(kv_index_remove(x, 13), 0);
	assert_int_equal(kv_index_extent_ref(x, 2, -1, &count), 0);
	assert_int_equal(count, 0);
	nx = 0;
	assert_int_equal(kv_index_extent_walk(x, count_extent, &nx), 0);
	assert_int_equal(nx, 2);
	kv_index_retired_drop(x);
	nx = 0;
	assert_int_equal(kv_index_extent_walk(x, count_extent, &nx), 0);
	assert_int_equal(nx, 0);
	lazy_done(l, lm);
	store_done(&s);
}

/* A layer emptied and removed while the index loads: the walk then meets
 * rows naming a layer that is gone, which are old news, not damage. */
static void test_lazy_rmdir(void **state)
{
	struct kv_index *x = *state;
	struct kv_manifest *lm;
	struct kv_index_loader *l;
	struct kv_index_stats st;
	struct kv_node_info n;
	struct store s;
	uint32_t count;

	store_shared_layer(&s);
	l = lazy_begin(x, &s, &lm);
	assert_int_equal(kv_index_layer_load(x, 4), 0);
	assert_int_equal(kv_index_remove(x, 4), -ENOTEMPTY);
	assert_int_equal(kv_index_remove(x, 13), 0);
	assert_int_equal(kv_index_extent_ref(x, 2, -1, &count), 0);
	assert_int_equal(count, 1);
	assert_int_equal(kv_index_remove(x, 4), 0);
	assert_int_equal(lazy_run(l), 0);
	kv_index_stats(x, &st);
	assert_int_equal(st.layers, 1);
	assert_int_equal(st.pages, 3);
	assert_int_equal(kv_index_lookup(x, 3, "p12", &n), 0);
	assert_int_equal(kv_index_get(x, 13, &n), -ENOENT);
	lazy_done(l, lm);
	store_done(&s);
}

/* A page the walk took, in a layer it has not finished: removing or moving
 * it waits for its layer (EAGAIN), whose load would bring it back. */
static int count_page(void *arg, const struct kv_page_brief *p)
{
	(void)p;
	++*(int *)arg;
	return 0;
}

static void test_lazy_remove_mid_walk(void **state)
{
	struct kv_index *x = *state;
	int np = 0;
	struct kv_manifest *lm;
	struct kv_index_loader *l;
	struct kv_index_stats st;
	struct kv_node_info n;
	struct store s;
	uint32_t count;

	store_make(&s);
	store_fill(&s);
	store_many(&s, 5000);
	l = lazy_begin(x, &s, &lm);
	for (int i = 0; i < 3; i++)    /* counts, extents, part of layer 3 */
		assert_int_equal(kv_index_load_step(l), 1);
	assert_int_equal(kv_index_get(x, 10, &n), 0);
	assert_false(kv_index_layer_whole(x, 3));
	/* eviction's walk offers none of them yet */
	assert_int_equal(kv_index_page_walk(x, count_page, &np), 0);
	assert_int_equal(np, 0);
	/* a change in a layer the walk has not made whole loads it first */
	assert_int_equal(kv_index_remove(x, 10), 0);
	assert_true(kv_index_layer_whole(x, 3));
	assert_int_equal(kv_index_extent_ref(x, 1, -1, &count), 0);
	assert_int_equal(count, 1);
	assert_int_equal(lazy_run(l), 0);
	assert_int_equal(kv_index_lookup(x, 3, "p10", &n), -ENOENT);
	kv_index_stats(x, &st);
	assert_int_equal(st.pages, 5002);
	assert_int_equal(kv_index_page_walk(x, count_page, &np), 0);
	assert_true(np >= 5002);   /* the walk may show a page twice */
	lazy_done(l, lm);
	store_done(&s);
}

/* Once the load is over the loader's connection gives its page cache
 * back (the daemon keeps it open until unmount). */
static void test_lazy_cache_shrinks(void **state)
{
	struct kv_index *x = *state;
	struct kv_index_loader *l;
	struct kv_manifest *lm;
	struct store s;
	size_t full;

	store_make(&s);
	store_fill(&s);
	store_layers(&s, 3, 60000);
	l = lazy_begin(x, &s, &lm);
	assert_int_equal(lazy_run(l), 0);
	kv_index_load_end(l);
	assert_int_equal(kv_manifest_quick_check(lm), 0);
	full = kv_manifest_cache_bytes(lm);
	assert_true(full > (8u << 20));     /* 180,000 rows and their index */
	kv_manifest_shrink(lm);
	assert_true(kv_manifest_cache_bytes(lm) <= (4u << 20));
	assert_true(kv_manifest_cache_bytes(lm) < full / 2);
	/* and it still reads */
	assert_int_equal(kv_manifest_quick_check(lm), 0);
	kv_manifest_close(lm);
	store_done(&s);
}

/* The usual rows with sql applied, a loader begun on them. */
static struct kv_index_loader *damaged_begin(struct kv_index *x, struct store *s,
					     const char *sql, struct kv_manifest **lm)
{
	store_make(s);
	store_fill(s);
	store_sql(s, sql);
	return lazy_begin(x, s, lm);
}

static void test_lazy_refcount_mismatch(void **state)
{
	struct kv_index *x = *state;
	struct kv_manifest *lm;
	struct kv_index_loader *l;
	struct kv_node_info n;
	struct store s;

	l = damaged_begin(x, &s, "UPDATE extents SET refcount = 3 WHERE id = 1;", &lm);
	/* Served until the walk can tell, then refused at its end. */
	assert_int_equal(kv_index_lookup(x, 3, "p10", &n), 0);
	assert_int_equal(lazy_run(l), KV_ERR_CORRUPT);
	lazy_done(l, lm);
	store_done(&s);
}

static void test_lazy_missing_extent(void **state)
{
	struct kv_index *x = *state;
	struct kv_manifest *lm;
	struct kv_index_loader *l;
	struct kv_node_info n;
	struct store s;

	store_make(&s);
	store_fill(&s);
	store_layers(&s, 1, 5);   /* layer 4, its pages after the bad row */
	store_sql(&s, "INSERT INTO pages VALUES (13, 3, 'lost', 99, 32768, 292, 0, 0, 0, "
		  "0, 0, kvfs_ident_page(13, 3, 'lost', 99, 32768));");
	l = lazy_begin(x, &s, &lm);
	/* The layer cannot be made whole: its lookups fail, every time (the
	 * second without reading the layer again). */
	assert_int_equal(kv_index_lookup(x, 3, "p10", &n), KV_ERR_CORRUPT);
	assert_int_equal(kv_index_lookup(x, 3, "p10", &n), KV_ERR_CORRUPT);
	assert_int_equal(lazy_run(l), KV_ERR_CORRUPT);
	lazy_done(l, lm);
	/* After the end, a layer the walk did not reach gives EIO, never a
	 * wrong ENOENT. */
	assert_int_equal(kv_index_lookup(x, 4, "e1", &n), -EIO);
	assert_int_equal(kv_index_lookup(x, 3, "p10", &n), KV_ERR_CORRUPT);
	store_done(&s);
}


int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_load_roundtrip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_load_missing_extent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_load_refcount_mismatch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_load_missing_layer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lazy_roundtrip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lazy_layer_mid_walk, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lazy_concurrent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lazy_new_pages, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lazy_move, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lazy_remove, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lazy_remove_mid_walk, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lazy_rmdir, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lazy_cache_shrinks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lazy_refcount_mismatch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lazy_missing_extent, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
