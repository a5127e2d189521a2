/*
 * Unit tests for index/index.c: the namespace (add, lookup, get, update,
 * remove, rename rules, readdir snapshots), the extent table (dedup lookup,
 * refcounts), incremental stats, scale and lookups racing with a writer.
 * Loading from a manifest is in test_index_load.c, the access-time flush's
 * list of pages read in test_index_atime.c.
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

/* ---- namespace ---- */

static void test_root(void **state)
{
	struct kv_index *x = *state;
	struct kv_node_info n;
	uint64_t a, b;

	assert_int_equal(kv_index_get(x, KV_ROOT_INO, &n), 0);
	assert_int_equal(n.kind, KV_KIND_ROOT);
	assert_int_equal(n.parent, 0);
	assert_int_equal(n.attr.mode, 0755);
	assert_int_equal(n.nchildren, 0);
	a = kv_index_next_ino(x);
	b = kv_index_next_ino(x);
	assert_true(a > KV_ROOT_INO);
	assert_true(b > a);
	assert_int_equal(kv_index_remove(x, KV_ROOT_INO), -EBUSY);
	assert_int_equal(kv_index_get(x, 999, &n), -ENOENT);
}

static void test_add_lookup_get(void **state)
{
	struct kv_index *x = *state;
	struct kv_node_info n;

	small_tree(x);
	assert_int_equal(kv_index_lookup(x, KV_ROOT_INO, "m", &n), 0);
	assert_int_equal(n.ino, 2);
	assert_int_equal(n.kind, KV_KIND_MODEL);
	assert_int_equal(n.nchildren, 1);
	assert_int_equal(kv_index_lookup(x, 2, "00", &n), 0);
	assert_int_equal(n.ino, 3);
	assert_int_equal(n.layer, 0);
	assert_int_equal(n.nchildren, 2);
	assert_int_equal(kv_index_lookup(x, 3, "b", &n), 0);
	assert_int_equal(n.ino, 11);
	assert_int_equal(kv_index_get(x, 11, &n), 0);
	assert_string_equal(n.name, "b");
	assert_int_equal(n.parent, 3);
	assert_int_equal(n.kind, KV_KIND_PAGE);
	assert_int_equal(n.state, KV_PAGE_SEALED);
	assert_int_equal(n.size, 200);
	assert_int_equal(n.extent_id, 11);
	assert_int_equal(n.ext.offset, 4096 * 11);
	assert_int_equal(n.hash[0], 11);
	assert_int_equal(n.attr.mode, 0444);
	assert_int_equal(n.attr.uid, 7);
	assert_int_equal(n.attr.atime_ns, 300);
	assert_int_equal(kv_index_lookup(x, 3, "c", &n), -ENOENT);
	assert_int_equal(kv_index_lookup(x, 2, "a", &n), -ENOENT);

	assert_int_equal(add_page(x, 11, 3, "c", 1), -EEXIST);   /* inode taken */
	assert_int_equal(add_page(x, 12, 3, "a", 1), -EEXIST);   /* name taken */
	assert_int_equal(add_page(x, 1000, 3, "big", 1), 0);
	assert_true(kv_index_next_ino(x) > 1000);
}

static void test_names(void **state)
{
	struct kv_index *x = *state;
	char longname[KV_NAME_MAX + 2];
	struct kv_node_info n;

	small_tree(x);
	assert_int_equal(add_page(x, 20, 3, "", 1), -EINVAL);
	assert_int_equal(add_page(x, 20, 3, ".", 1), -EINVAL);
	assert_int_equal(add_page(x, 20, 3, "..", 1), -EINVAL);
	assert_int_equal(add_page(x, 20, 3, "a/b", 1), -EINVAL);
	assert_int_equal(add_page(x, 20, 3, "...", 1), 0);
	assert_int_equal(add_page(x, 21, 3, ".hidden", 1), 0);

	memset(longname, 'k', KV_NAME_MAX);
	longname[KV_NAME_MAX] = '\0';
	assert_int_equal(add_page(x, 22, 3, longname, 1), 0);
	assert_int_equal(kv_index_lookup(x, 3, longname, &n), 0);
	n = info(KV_KIND_PAGE, 23, 3, "");
	memset(n.name, 'k', sizeof(n.name));   /* 256 bytes, no terminator */
	assert_int_equal(kv_index_add(x, &n), -ENAMETOOLONG);
	memset(longname, 'k', KV_NAME_MAX + 1);
	longname[KV_NAME_MAX + 1] = '\0';
	assert_int_equal(kv_index_lookup(x, 3, longname, &n), -ENAMETOOLONG);

	/* Layer dirs are named by their number. */
	n = info(KV_KIND_LAYER, 30, 2, "x");
	assert_int_equal(kv_index_add(x, &n), -EINVAL);
	n = info(KV_KIND_LAYER, 30, 2, "1");
	n.layer = 2;
	assert_int_equal(kv_index_add(x, &n), -EINVAL);
	n.layer = 1;
	assert_int_equal(kv_index_add(x, &n), 0);
	n = info(KV_KIND_LAYER, 31, 2, "01");
	n.layer = 1;
	assert_int_equal(kv_index_add(x, &n), -EEXIST);
}

static void test_kinds(void **state)
{
	struct kv_index *x = *state;
	struct kv_node_info n;

	small_tree(x);
	assert_int_equal(add_page(x, 20, KV_ROOT_INO, "p", 1), -ENOTDIR);
	assert_int_equal(add_page(x, 20, 2, "p", 1), -ENOTDIR);
	assert_int_equal(add_page(x, 20, 10, "p", 1), -ENOTDIR);
	assert_int_equal(add_layer(x, 20, KV_ROOT_INO, 5), -ENOTDIR);
	assert_int_equal(add_layer(x, 20, 3, 5), -ENOTDIR);
	n = info(KV_KIND_MODEL, 20, 2, "m2");
	assert_int_equal(kv_index_add(x, &n), -ENOTDIR);
	assert_int_equal(add_page(x, 20, 77, "p", 1), -ENOENT);
	n = info(KV_KIND_ROOT, 20, KV_ROOT_INO, "r");
	assert_int_equal(kv_index_add(x, &n), -EINVAL);
	assert_int_equal(add_model(x, 0, "zero"), -EINVAL);
	assert_int_equal(add_model(x, KV_ROOT_INO, "one"), -EEXIST);
	assert_int_equal(kv_index_get(x, 20, &n), -ENOENT);
}

static void test_readdir(void **state)
{
	struct kv_index *x = *state;
	struct kv_dirent *d;
	size_t n;

	small_tree(x);
	assert_int_equal(add_page(x, 12, 3, "c", 300), 0);
	assert_int_equal(kv_index_readdir(x, 3, &d, &n), 0);
	assert_int_equal(n, 3);
	assert_string_equal(d[0].name, "a");
	assert_int_equal(d[0].ino, 10);
	assert_string_equal(d[1].name, "b");
	assert_string_equal(d[2].name, "c");
	assert_int_equal(d[2].kind, KV_KIND_PAGE);
	/* A snapshot: later changes do not touch it. */
	assert_int_equal(kv_index_remove(x, 11), 0);
	assert_string_equal(d[1].name, "b");
	kv_dirents_free(d, n);

	assert_int_equal(kv_index_readdir(x, 3, &d, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(d[1].name, "c");
	kv_dirents_free(d, n);
	assert_int_equal(kv_index_readdir(x, KV_ROOT_INO, &d, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(d[0].kind, KV_KIND_MODEL);
	kv_dirents_free(d, n);
	assert_int_equal(add_layer(x, 4, 2, 1), 0);
	assert_int_equal(kv_index_readdir(x, 4, &d, &n), 0);
	assert_int_equal(n, 0);
	kv_dirents_free(d, n);
	assert_int_equal(kv_index_readdir(x, 10, &d, &n), -ENOTDIR);
	assert_int_equal(kv_index_readdir(x, 99, &d, &n), -ENOENT);
}

static void test_remove(void **state)
{
	struct kv_index *x = *state;
	struct kv_index_stats st;
	struct kv_node_info n;

	small_tree(x);
	assert_int_equal(kv_index_remove(x, 3), -ENOTEMPTY);
	assert_int_equal(kv_index_remove(x, 2), -ENOTEMPTY);
	assert_int_equal(kv_index_remove(x, 10), 0);
	assert_int_equal(kv_index_remove(x, 10), -ENOENT);
	assert_int_equal(kv_index_lookup(x, 3, "a", &n), -ENOENT);
	assert_int_equal(kv_index_get(x, 3, &n), 0);
	assert_int_equal(n.nchildren, 1);
	kv_index_stats(x, &st);
	assert_int_equal(st.pages, 1);
	assert_int_equal(st.page_bytes, 200);
	assert_int_equal(kv_index_remove(x, 11), 0);
	assert_int_equal(kv_index_remove(x, 3), 0);
	assert_int_equal(kv_index_remove(x, 2), 0);
	kv_index_stats(x, &st);
	assert_int_equal(st.models + st.layers + st.pages + st.page_bytes, 0);
	/* The name is free again. */
	assert_int_equal(add_model(x, 2, "m"), 0);
}

static void test_move_pages(void **state)
{
	struct kv_index *x = *state;
	struct kv_index_stats st;
	struct kv_node_info n;
	uint64_t rep = 77;

	small_tree(x);
	assert_int_equal(add_layer(x, 4, 2, 1), 0);
	/* Plain rename in place. */
	assert_int_equal(kv_index_move(x, 10, 3, "a2", 0, &rep), 0);
	assert_int_equal(rep, 0);
	assert_int_equal(kv_index_lookup(x, 3, "a", &n), -ENOENT);
	assert_int_equal(kv_index_lookup(x, 3, "a2", &n), 0);
	assert_int_equal(n.ino, 10);
	/* Onto itself: nothing happens. */
	assert_int_equal(kv_index_move(x, 10, 3, "a2", 0, &rep), 0);
	assert_int_equal(rep, 0);
	/* Onto an existing page. */
	assert_int_equal(kv_index_move(x, 10, 3, "b", 0, &rep), -EEXIST);
	assert_int_equal(kv_index_move(x, 10, 3, "b", 1, &rep), 0);
	assert_int_equal(rep, 11);
	assert_int_equal(kv_index_get(x, 11, &n), -ENOENT);
	assert_int_equal(kv_index_lookup(x, 3, "b", &n), 0);
	assert_int_equal(n.ino, 10);
	assert_int_equal(n.size, 100);
	kv_index_stats(x, &st);
	assert_int_equal(st.pages, 1);
	assert_int_equal(st.page_bytes, 100);
	/* Across layers, with a longer name (the node is reallocated). */
	assert_int_equal(kv_index_move(x, 10, 4, "a-much-longer-name-than-before", 0, NULL), 0);
	assert_int_equal(kv_index_get(x, 10, &n), 0);
	assert_int_equal(n.parent, 4);
	assert_string_equal(n.name, "a-much-longer-name-than-before");
	assert_int_equal(n.hash[0], 10);
	assert_int_equal(kv_index_get(x, 3, &n), 0);
	assert_int_equal(n.nchildren, 0);
	assert_int_equal(kv_index_get(x, 4, &n), 0);
	assert_int_equal(n.nchildren, 1);
	/* Kinds must still fit. */
	assert_int_equal(kv_index_move(x, 10, 2, "p", 0, &rep), -EINVAL);
	assert_int_equal(kv_index_move(x, 10, KV_ROOT_INO, "p", 0, &rep), -EINVAL);
	assert_int_equal(kv_index_move(x, 10, 10, "p", 0, &rep), -ENOTDIR);
	assert_int_equal(kv_index_move(x, 10, 99, "p", 0, &rep), -ENOENT);
	assert_int_equal(kv_index_move(x, 99, 3, "p", 0, &rep), -ENOENT);
	assert_int_equal(kv_index_move(x, 10, 3, "a/b", 0, &rep), -EINVAL);
	assert_int_equal(kv_index_move(x, KV_ROOT_INO, 3, "r", 0, &rep), -EBUSY);
	kv_index_stats(x, &st);
	assert_int_equal(st.pages, 1);
	assert_int_equal(st.layers, 2);
}

/* A node's allocation follows its name's length: renames through every
 * length, up and down, with pages added and removed in between (so freed
 * nodes are handed out again), keep every page whole. */
static void test_renames_of_every_length(void **state)
{
	struct kv_index *x = *state;
	char name[KV_NAME_MAX + 1], prev[KV_NAME_MAX + 1] = "a";
	struct kv_node_info n;
	size_t len, i;

	small_tree(x);
	for (i = 0; i < 2 * KV_NAME_MAX; i++) {
		len = i < KV_NAME_MAX ? i + 1 : 2 * KV_NAME_MAX - i;
		memset(name, 'a' + (int)(i % 26), len);
		name[len] = '\0';
		if (!strcmp(name, prev))
			continue;
		assert_int_equal(kv_index_move(x, 10, 3, name, 0, NULL), 0);
		assert_int_equal(kv_index_lookup(x, 3, prev, &n), -ENOENT);
		assert_int_equal(kv_index_lookup(x, 3, name, &n), 0);
		assert_int_equal(n.ino, 10);
		assert_int_equal(n.size, 100);
		assert_int_equal(add_page(x, 1000 + i, 3, "churn", 7), 0);
		assert_int_equal(kv_index_remove(x, 1000 + i), 0);
		assert_int_equal(kv_index_get(x, 11, &n), 0);
		assert_string_equal(n.name, "b");
		assert_int_equal(n.size, 200);
		memcpy(prev, name, len + 1);
	}
	/* The layer, parent of both, renamed longer and back: its pages
	 * follow it. */
	assert_int_equal(kv_index_move(x, 3, 2, "0000000", 0, NULL), 0);
	assert_int_equal(kv_index_lookup(x, 3, "b", &n), 0);
	assert_int_equal(n.parent, 3);
	assert_int_equal(kv_index_move(x, 3, 2, "0", 0, NULL), 0);
	assert_int_equal(kv_index_lookup(x, 3, prev, &n), 0);
	assert_int_equal(n.ino, 10);
}

/* Past a few layers the index finds a number's other names by probing
 * each zero padding (any length up to KV_NAME_MAX) rather than walking
 * the model: the same answers as the walk, for adds and moves. */
static void test_layer_numbers_past_a_walk(void **state)
{
	struct kv_index *x = *state;
	struct kv_node_info n;
	uint64_t rep;

	small_tree(x);                             /* model 2, layer "00" */
	assert_int_equal(kv_index_layer_find(x, 2, 0, &n), 0);   /* by a walk */
	assert_int_equal(n.ino, 3);
	assert_int_equal(kv_index_layer_find(x, 2, 1, &n), -ENOENT);
	assert_int_equal(kv_index_layer_find(x, 3, 0, &n), -ENOTDIR);
	assert_int_equal(kv_index_layer_find(x, 999, 0, &n), -ENOENT);
	for (uint32_t i = 1; i < 100; i++)
		assert_int_equal(add_layer(x, 100 + i, 2, i), 0);   /* "01".."99" */
	n = info(KV_KIND_LAYER, 300, 2, "0000000000042");
	n.layer = 42;
	assert_int_equal(kv_index_add(x, &n), -EEXIST);
	n = info(KV_KIND_LAYER, 300, 2, "0000000000100");
	n.layer = 100;
	assert_int_equal(kv_index_add(x, &n), 0);
	n = info(KV_KIND_LAYER, 301, 2, "100");
	n.layer = 100;
	assert_int_equal(kv_index_add(x, &n), -EEXIST);      /* only at width 13 */
	n = info(KV_KIND_LAYER, 301, 2, "7");
	n.layer = 7;
	assert_int_equal(kv_index_add(x, &n), -EEXIST);      /* "07" */
	n = info(KV_KIND_LAYER, 301, 2, "101");
	n.layer = 101;
	assert_int_equal(kv_index_add(x, &n), 0);
	/* A layer may take another padding of its own number, not another's. */
	assert_int_equal(kv_index_move(x, 105, 2, "005", 0, &rep), 0);
	assert_int_equal(kv_index_move(x, 106, 2, "0005", 0, &rep), -EEXIST);
	assert_int_equal(kv_index_move(x, 106, 2, "0000000000042", 1, &rep), -EEXIST);
	assert_int_equal(kv_index_move(x, 300, 2, "100", 0, &rep), 0);
	assert_int_equal(kv_index_get(x, 300, &n), 0);
	assert_int_equal(n.layer, 100);
	/* By number, past the walk: under any padding. */
	assert_int_equal(kv_index_layer_find(x, 2, 5, &n), 0);
	assert_int_equal(n.ino, 105);
	assert_string_equal(n.name, "005");
	assert_int_equal(kv_index_layer_find(x, 2, 100, &n), 0);
	assert_int_equal(n.ino, 300);
	assert_int_equal(kv_index_move(x, 300, 2, "0000000000100", 0, &rep), 0);
	assert_int_equal(kv_index_layer_find(x, 2, 100, &n), 0);
	assert_int_equal(n.ino, 300);
	assert_int_equal(kv_index_layer_find(x, 2, 555, &n), -ENOENT);
}

static void test_move_dirs(void **state)
{
	struct kv_index *x = *state;
	struct kv_node_info n;
	struct kv_dirent *d;
	uint64_t rep;
	size_t cnt;

	small_tree(x);
	assert_int_equal(add_layer(x, 4, 2, 1), 0);
	assert_int_equal(add_layer(x, 5, 2, 2), 0);
	assert_int_equal(add_page(x, 12, 4, "x", 1), 0);
	/* Onto a non-empty dir, an empty one, and without replace. */
	assert_int_equal(kv_index_move(x, 5, 2, "01", 1, &rep), -ENOTEMPTY);
	assert_int_equal(kv_index_move(x, 4, 2, "02", 0, &rep), -EEXIST);
	assert_int_equal(kv_index_move(x, 4, 2, "02", 1, &rep), 0);
	assert_int_equal(rep, 5);
	assert_int_equal(kv_index_get(x, 4, &n), 0);
	assert_int_equal(n.layer, 2);           /* the number follows the name */
	assert_int_equal(kv_index_move(x, 4, 2, "nope", 0, &rep), -EINVAL);
	assert_int_equal(kv_index_move(x, 4, 2, "000", 0, &rep), -EEXIST);  /* layer 0 */
	assert_int_equal(kv_index_move(x, 4, KV_ROOT_INO, "02", 0, &rep), -EINVAL);

	/* A layer with children gets a longer name: children must follow. */
	assert_int_equal(kv_index_move(x, 3, 2, "0000000000007", 0, &rep), 0);
	assert_int_equal(kv_index_get(x, 10, &n), 0);
	assert_int_equal(n.parent, 3);
	assert_int_equal(kv_index_lookup(x, 3, "b", &n), 0);
	assert_int_equal(kv_index_get(x, 3, &n), 0);
	assert_string_equal(n.name, "0000000000007");
	assert_int_equal(n.layer, 7);
	assert_int_equal(n.nchildren, 2);
	assert_int_equal(kv_index_readdir(x, 3, &d, &cnt), 0);
	assert_int_equal(cnt, 2);
	kv_dirents_free(d, cnt);
	/* Models: rename, and replace an empty model. */
	assert_int_equal(add_model(x, 6, "empty"), 0);
	assert_int_equal(kv_index_move(x, 2, KV_ROOT_INO, "empty", 1, &rep), 0);
	assert_int_equal(rep, 6);
	assert_int_equal(kv_index_lookup(x, KV_ROOT_INO, "empty", &n), 0);
	assert_int_equal(n.ino, 2);
	/* Tear down through the moved nodes' links. */
	assert_int_equal(kv_index_remove(x, 10), 0);
	assert_int_equal(kv_index_remove(x, 11), 0);
	assert_int_equal(kv_index_remove(x, 3), 0);
	assert_int_equal(kv_index_remove(x, 12), 0);
	assert_int_equal(kv_index_remove(x, 4), 0);
	assert_int_equal(kv_index_remove(x, 2), 0);
	assert_int_equal(kv_index_get(x, KV_ROOT_INO, &n), 0);
	assert_int_equal(n.nchildren, 0);
}

/* A page's location and checksum are its extent record's: a page naming
 * a missing extent is refused, a moved extent moves its pages, and an
 * empty page has the checksum of nothing. */
static void test_page_data_from_extent(void **state)
{
	struct kv_index *x = *state;
	struct kv_node_info n = info(KV_KIND_PAGE, 20, 3, "c"), got;
	struct kv_extent_rec r = { .id = 77, .refcount = 2,
				   .ext = { .stripe = 0, .segment = 5, .offset = 8192,
					    .length = 300 } };
	uint8_t empty[KV_HASH_LEN];

	small_tree(x);
	n.state = KV_PAGE_SEALED;
	n.size = 300;
	n.extent_id = 77;
	assert_int_equal(kv_index_add(x, &n), -ENOENT);
	assert_int_equal(kv_index_get(x, 20, &got), -ENOENT);
	hash_of(77, r.hash);
	assert_int_equal(kv_index_extent_put(x, &r), 0);
	assert_int_equal(kv_index_add(x, &n), 0);
	n.ino = 21;
	strcpy(n.name, "d");
	assert_int_equal(kv_index_add(x, &n), 0);   /* a second sharer */
	assert_int_equal(kv_index_lookup(x, 3, "d", &got), 0);
	assert_int_equal(got.ext.segment, 5);
	assert_int_equal(got.ext.offset, 8192);
	assert_memory_equal(got.hash, r.hash, KV_HASH_LEN);
	r.ext.offset = 16384;                        /* the record is replaced */
	assert_int_equal(kv_index_extent_put(x, &r), 0);
	assert_int_equal(kv_index_get(x, 20, &got), 0);
	assert_int_equal(got.ext.offset, 16384);
	/* empty, sealed: extent 0 and the checksum of no bytes */
	n = info(KV_KIND_PAGE, 22, 3, "e");
	n.state = KV_PAGE_DURABLE;
	assert_int_equal(kv_index_add(x, &n), 0);
	assert_int_equal(kv_index_get(x, 22, &got), 0);
	kv_hash128(NULL, 0, empty);
	assert_memory_equal(got.hash, empty, KV_HASH_LEN);
	assert_int_equal(got.ext.length, 0);
}

/* The committer's mark: only a page that still names the durable extent. */
static void test_page_durable(void **state)
{
	struct kv_index *x = *state;
	struct kv_node_info n;

	small_tree(x);                    /* pages 10 and 11, SEALED, extents 10, 11 */
	assert_int_equal(kv_index_page_durable(x, 10, 11), -ENOENT);
	assert_int_equal(kv_index_get(x, 10, &n), 0);
	assert_int_equal(n.state, KV_PAGE_SEALED);
	assert_int_equal(kv_index_page_durable(x, 10, 10), 0);
	assert_int_equal(kv_index_get(x, 10, &n), 0);
	assert_int_equal(n.state, KV_PAGE_DURABLE);
	assert_int_equal(kv_index_get(x, 11, &n), 0);
	assert_int_equal(n.state, KV_PAGE_SEALED);
	assert_int_equal(kv_index_page_durable(x, 999, 10), -ENOENT);
	assert_int_equal(kv_index_page_durable(x, 3, 0), -ENOENT);   /* a layer */
}

/* Pages of size 0 are counted as they come, grow, shrink and go: the
 * capacity charges each a block (kvfs_store_usage). */
static void test_empty_pages_counted(void **state)
{
	struct kv_index *x = *state;
	struct kv_node_info n = info(KV_KIND_PAGE, 20, 3, "new"), u = { 0 };

	small_tree(x);
	assert_int_equal(kv_index_empty_pages(x), 0);
	n.attr.mode = 0644;
	n.state = KV_PAGE_WRITING;
	assert_int_equal(kv_index_add(x, &n), 0);
	assert_int_equal(kv_index_empty_pages(x), 1);
	u.size = 50;
	assert_int_equal(kv_index_update(x, 20, &u, KV_UPD_SIZE), 0);
	assert_int_equal(kv_index_empty_pages(x), 0);
	assert_int_equal(kv_index_update(x, 20, &u, KV_UPD_SIZE), 0);   /* no change */
	assert_int_equal(kv_index_empty_pages(x), 0);
	u.size = 0;
	assert_int_equal(kv_index_update(x, 20, &u, KV_UPD_SIZE), 0);
	assert_int_equal(kv_index_empty_pages(x), 1);
	assert_int_equal(kv_index_remove(x, 20), 0);
	assert_int_equal(kv_index_empty_pages(x), 0);
	assert_int_equal(kv_index_remove(x, 10), 0);     /* 100 bytes: was not counted */
	assert_int_equal(kv_index_empty_pages(x), 0);
}

static void test_update(void **state)
{
	struct kv_index *x = *state;
	struct kv_index_stats st;
	struct kv_node_info n, u;

	small_tree(x);
	memset(&u, 0, sizeof(u));
	u.attr = (struct kv_obj_attr){ .mode = 0100644, .uid = 1, .gid = 2,
				       .ctime_ns = 5, .mtime_ns = 6, .atime_ns = 7 };
	u.size = 4096;
	u.state = KV_PAGE_DURABLE;
	u.extent_id = 55;
	u.ext.length = 4096;
	u.hash[15] = 0xee;
	/* Data naming an extent the table lacks is refused, nothing changed. */
	assert_int_equal(kv_index_update(x, 10, &u, KV_UPD_ATTR | KV_UPD_SIZE |
					 KV_UPD_STATE | KV_UPD_DATA), -ENOENT);
	assert_int_equal(kv_index_get(x, 10, &n), 0);
	assert_int_equal(n.extent_id, 10);
	assert_int_equal(n.size, 100);
	struct kv_extent_rec r = { .id = 55, .ext = u.ext, .refcount = 1 };
	memcpy(r.hash, u.hash, KV_HASH_LEN);
	assert_int_equal(kv_index_extent_put(x, &r), 0);
	assert_int_equal(kv_index_update(x, 10, &u, KV_UPD_ATTR | KV_UPD_SIZE |
					 KV_UPD_STATE | KV_UPD_DATA), 0);
	assert_int_equal(kv_index_get(x, 10, &n), 0);
	assert_int_equal(n.attr.mode, 0644);    /* type bits dropped */
	assert_int_equal(n.attr.mtime_ns, 6);
	assert_int_equal(n.size, 4096);
	assert_int_equal(n.state, KV_PAGE_DURABLE);
	assert_int_equal(n.extent_id, 55);
	assert_int_equal(n.hash[15], 0xee);
	kv_index_stats(x, &st);
	assert_int_equal(st.page_bytes, 4096 + 200);

	u.attr.atime_ns = 999;
	u.attr.mtime_ns = 1;
	assert_int_equal(kv_index_update(x, 10, &u, KV_UPD_ATIME), 0);
	assert_int_equal(kv_index_get(x, 10, &n), 0);
	assert_int_equal(n.attr.atime_ns, 999);
	assert_int_equal(n.attr.mtime_ns, 6);

	u.geo = (struct kv_geometry){ .layers = 1, .kv_heads = 1, .head_dim = 1,
				      .page_tokens = 1, .dtype = "f32" };
	assert_int_equal(kv_index_update(x, 2, &u, KV_UPD_GEO), 0);
	assert_int_equal(kv_index_get(x, 2, &n), 0);
	assert_string_equal(n.geo.dtype, "f32");
	assert_int_equal(kv_index_update(x, 10, &u, KV_UPD_GEO), -EINVAL);
	assert_int_equal(kv_index_update(x, 3, &u, KV_UPD_SIZE), -EISDIR);
	assert_int_equal(kv_index_update(x, 10, &u, 1u << 20), -EINVAL);
	assert_int_equal(kv_index_update(x, 99, &u, KV_UPD_ATTR), -ENOENT);
	assert_int_equal(kv_index_update(x, 99, &u, KV_UPD_ATIME), -ENOENT);
}

/* ---- extents ---- */

static void test_extents(void **state)
{
	struct kv_index *x = *state;
	struct kv_extent_rec r = { .id = 5, .refcount = 1,
				   .ext = { .stripe = 1, .segment = 2, .offset = 8192,
					    .length = 5000 } };
	struct kv_extent_rec twin, got;
	struct kv_index_stats st;
	uint32_t count = 0;
	uint8_t other[KV_HASH_LEN];

	hash_of(42, r.hash);
	hash_of(43, other);
	assert_int_equal(kv_index_extent_put(x, &r), 0);
	twin = r;           /* same content, another place: a dedup twin */
	twin.id = 6;
	twin.ext.offset = 16384;
	assert_int_equal(kv_index_extent_put(x, &twin), 0);
	assert_true(kv_index_next_extent_id(x) > 6);
	/* Not offered for sharing before their rows are durable. */
	assert_int_equal(kv_index_extent_candidates(x, r.hash, 5000, &got, 1), 0);
	assert_int_equal(kv_index_extent_durable(x, 5), 0);
	assert_int_equal(kv_index_extent_durable(x, 6), 0);
	assert_int_equal(kv_index_extent_durable(x, 77), -ENOENT);
	kv_index_stats(x, &st);
	assert_int_equal(st.extents, 2);
	assert_int_equal(st.extent_bytes, 2 * 8192);   /* footprints */

	assert_int_equal(kv_index_extent_get(x, 5, &got), 0);
	assert_int_equal(got.ext.offset, 8192);
	assert_memory_equal(got.hash, r.hash, KV_HASH_LEN);
	{
		struct kv_extent_rec two[2];

		assert_int_equal(kv_index_extent_candidates(x, r.hash, 5000, two, 2), 2);
		assert_true(two[0].id + two[1].id == 11);
		assert_int_equal(kv_index_extent_candidates(x, r.hash, 5000, two, 1), 1);
	}
	assert_int_equal(kv_index_extent_candidates(x, r.hash, 5001, &got, 1), 0);
	assert_int_equal(kv_index_extent_candidates(x, other, 5000, &got, 1), 0);

	assert_int_equal(kv_index_extent_ref(x, 5, +1, &count), 0);
	assert_int_equal(count, 2);
	assert_int_equal(kv_index_extent_ref(x, 5, -3, &count), -EINVAL);
	assert_int_equal(kv_index_extent_ref(x, 5, -2, &count), 0);
	assert_int_equal(count, 0);
	assert_int_equal(kv_index_extent_get(x, 5, &got), -ENOENT);
	assert_int_equal(kv_index_extent_ref(x, 5, -1, &count), -ENOENT);
	/* The twin is still found by content. */
	assert_int_equal(kv_index_extent_candidates(x, r.hash, 5000, &got, 1), 1);
	assert_int_equal(got.id, 6);
	kv_index_stats(x, &st);
	assert_int_equal(st.extents, 1);
	assert_int_equal(st.extent_bytes, 8192);

	/* Put on an existing id replaces it, also in the content map. */
	memcpy(twin.hash, other, KV_HASH_LEN);
	twin.ext.length = 100;
	assert_int_equal(kv_index_extent_put(x, &twin), 0);
	assert_int_equal(kv_index_extent_candidates(x, r.hash, 5000, &got, 1), 0);
	assert_int_equal(kv_index_extent_candidates(x, other, 100, &got, 1), 1);
	kv_index_stats(x, &st);
	assert_int_equal(st.extent_bytes, 4096);

	r.id = 0;
	assert_int_equal(kv_index_extent_put(x, &r), -EINVAL);
	r.id = 9;
	r.ext.offset = 100;
	assert_int_equal(kv_index_extent_put(x, &r), -EINVAL);
}

static int count_extent(void *arg, const struct kv_extent_rec *r)
{
	uint64_t *sum = arg;

	*sum += r->id;
	return r->id == 1000 ? 7 : 0;
}

static void test_extent_walk(void **state)
{
	struct kv_index *x = *state;
	struct kv_extent_rec r = { .refcount = 1, .ext = { .length = 1 } };
	uint64_t sum = 0, i;

	for (i = 1; i <= 500; i++) {
		r.id = i;
		r.ext.offset = i * 4096;
		hash_of(i, r.hash);
		assert_int_equal(kv_index_extent_put(x, &r), 0);
	}
	assert_int_equal(kv_index_extent_walk(x, count_extent, &sum), 0);
	assert_int_equal(sum, 500 * 501 / 2);
	r.id = 1000;
	assert_int_equal(kv_index_extent_put(x, &r), 0);
	sum = 0;
	assert_int_equal(kv_index_extent_walk(x, count_extent, &sum), 7);
}

/* ---- scale ---- */

static void test_many(void **state)
{
	enum { N = 100000, LAYERS = 10 };
	struct kv_index *x = *state;
	struct kv_index_stats st;
	struct kv_node_info n;
	char name[40];
	uint64_t i;

	assert_int_equal(add_model(x, 2, "m"), 0);
	for (i = 0; i < LAYERS; i++)
		assert_int_equal(add_layer(x, 3 + i, 2, (uint32_t)i), 0);
	for (i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "%016" PRIx64 "%016" PRIx64, i * 2654435761u, i);
		if (add_page(x, 100 + i, 3 + i % LAYERS, name, 1 + i % 7) != 0)
			fail_msg("add %" PRIu64 " failed", i);
	}
	for (i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "%016" PRIx64 "%016" PRIx64, i * 2654435761u, i);
		if (kv_index_lookup(x, 3 + i % LAYERS, name, &n) != 0 || n.ino != 100 + i)
			fail_msg("lookup %" PRIu64 " failed", i);
		if (kv_index_get(x, 100 + i, &n) != 0 || n.size != 1 + i % 7)
			fail_msg("get %" PRIu64 " failed", i);
	}
	kv_index_stats(x, &st);
	assert_int_equal(st.pages, N);
	/* Remove every other page; the rest must stay reachable. */
	for (i = 0; i < N; i += 2)
		assert_int_equal(kv_index_remove(x, 100 + i), 0);
	for (i = 0; i < N; i++) {
		int want = i % 2 ? 0 : -ENOENT;

		snprintf(name, sizeof(name), "%016" PRIx64 "%016" PRIx64, i * 2654435761u, i);
		if (kv_index_lookup(x, 3 + i % LAYERS, name, &n) != want ||
		    kv_index_get(x, 100 + i, &n) != want)
			fail_msg("after removals, page %" PRIu64 " is wrong", i);
	}
	/* Layer 3 held only even pages, layer 4 only odd ones. */
	assert_int_equal(kv_index_get(x, 3, &n), 0);
	assert_int_equal(n.nchildren, 0);
	assert_int_equal(kv_index_get(x, 4, &n), 0);
	assert_int_equal(n.nchildren, N / LAYERS);
}

/* ---- concurrency ---- */

enum { STABLE = 2000, CHURN = 500, ROUNDS = 20 };

struct race {
	struct kv_index *x;
	atomic_bool stop;
	atomic_ulong errors;
	atomic_ulong lookups;
};

static void *reader(void *arg)
{
	struct race *r = arg;
	struct kv_node_info n;
	struct kv_dirent *d;
	unsigned seed = (unsigned)(uintptr_t)&n;
	char name[32];
	size_t cnt;
	int rc;

	while (!atomic_load(&r->stop)) {
		unsigned i = (unsigned)rand_r(&seed) % STABLE;
		unsigned c = (unsigned)rand_r(&seed) % CHURN;

		snprintf(name, sizeof(name), "s%u", i);
		if (kv_index_lookup(r->x, 3, name, &n) != 0 || n.ino != 1000 + i ||
		    strcmp(n.name, name) != 0)
			atomic_fetch_add(&r->errors, 1);
		snprintf(name, sizeof(name), "c%u", c);
		rc = kv_index_lookup(r->x, 4, name, &n);
		if (rc != -ENOENT && (rc != 0 || n.ino != 100000 + c))
			atomic_fetch_add(&r->errors, 1);
		if (i == 0) {
			if (kv_index_readdir(r->x, 4, &d, &cnt) != 0 || cnt > CHURN)
				atomic_fetch_add(&r->errors, 1);
			else
				kv_dirents_free(d, cnt);
		}
		atomic_fetch_add(&r->lookups, 1);
	}
	return NULL;
}

static void test_concurrent(void **state)
{
	struct race r = { .x = *state };
	pthread_t th[4];
	struct kv_index_stats st;
	char name[32];
	unsigned i, round;

	assert_int_equal(add_model(r.x, 2, "m"), 0);
	assert_int_equal(add_layer(r.x, 3, 2, 0), 0);
	assert_int_equal(add_layer(r.x, 4, 2, 1), 0);
	for (i = 0; i < STABLE; i++) {
		snprintf(name, sizeof(name), "s%u", i);
		assert_int_equal(add_page(r.x, 1000 + i, 3, name, 10), 0);
	}
	for (i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&th[i], NULL, reader, &r), 0);
	/* Churn until the readers have really raced with it (under valgrind the
	 * writer may otherwise finish before a reader is ever scheduled). */
	for (round = 0; round < ROUNDS || atomic_load(&r.lookups) < 1000; round++) {
		for (i = 0; i < CHURN; i++) {
			snprintf(name, sizeof(name), "c%u", i);
			assert_int_equal(add_page(r.x, 100000 + i, 4, name, 1), 0);
		}
		for (i = 0; i < CHURN; i++)
			assert_int_equal(kv_index_remove(r.x, 100000 + i), 0);
	}
	atomic_store(&r.stop, true);
	for (i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(atomic_load(&r.errors), 0);
	assert_true(atomic_load(&r.lookups) > 0);
	kv_index_stats(r.x, &st);
	assert_int_equal(st.pages, STABLE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_root, setup, teardown),
		cmocka_unit_test_setup_teardown(test_add_lookup_get, setup, teardown),
		cmocka_unit_test_setup_teardown(test_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_empty_pages_counted, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kinds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_readdir, setup, teardown),
		cmocka_unit_test_setup_teardown(test_remove, setup, teardown),
		cmocka_unit_test_setup_teardown(test_move_pages, setup, teardown),
		cmocka_unit_test_setup_teardown(test_move_dirs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_layer_numbers_past_a_walk, setup, teardown),
		cmocka_unit_test_setup_teardown(test_renames_of_every_length, setup, teardown),
		cmocka_unit_test_setup_teardown(test_page_data_from_extent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_page_durable, setup, teardown),
		cmocka_unit_test_setup_teardown(test_update, setup, teardown),
		cmocka_unit_test_setup_teardown(test_extents, setup, teardown),
		cmocka_unit_test_setup_teardown(test_extent_walk, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many, setup, teardown),
		cmocka_unit_test_setup_teardown(test_concurrent, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
