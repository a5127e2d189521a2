/*
 * Helpers shared by the index unit tests (test_index.c, test_index_load.c):
 * an empty index per test, nodes with fixed attributes, a small tree, and
 * deterministic extent hashes. Each test file uses a subset.
 */
#ifndef KVFS_TEST_INDEX_FIXTURE_H
#define KVFS_TEST_INDEX_FIXTURE_H

#include <stdio.h>
#include <string.h>

#include "index.h"

#if defined(__GNUC__)
#define FIXTURE_FN static __attribute__((unused))
#else
#define FIXTURE_FN static
#endif

FIXTURE_FN void quiet(enum kv_log_level lvl, const char *line)
{
	(void)lvl;
	(void)line;
}

FIXTURE_FN int setup(void **state)
{
	struct kv_index *x;

	if (kv_index_new(&x) < 0)
		return -1;
	kv_log_set_sink(quiet);
	*state = x;
	return 0;
}

FIXTURE_FN int teardown(void **state)
{
	kv_index_free(*state);
	kv_log_set_sink(NULL);
	return 0;
}

FIXTURE_FN struct kv_node_info info(enum kv_kind kind, uint64_t ino, uint64_t parent,
				const char *name)
{
	struct kv_node_info n = { .ino = ino, .parent = parent, .kind = kind,
				  .attr = { .mode = 0755, .uid = 7, .gid = 8,
					    .ctime_ns = 100, .mtime_ns = 200, .atime_ns = 300 } };

	snprintf(n.name, sizeof(n.name), "%s", name);
	return n;
}

FIXTURE_FN int add_model(struct kv_index *x, uint64_t ino, const char *name)
{
	struct kv_node_info n = info(KV_KIND_MODEL, ino, KV_ROOT_INO, name);

	return kv_index_add(x, &n);
}

FIXTURE_FN int add_layer(struct kv_index *x, uint64_t ino, uint64_t model, uint32_t num)
{
	struct kv_node_info n = info(KV_KIND_LAYER, ino, model, "");

	snprintf(n.name, sizeof(n.name), "%02u", num);
	n.layer = num;
	return kv_index_add(x, &n);
}

FIXTURE_FN int add_page(struct kv_index *x, uint64_t ino, uint64_t layer,
		    const char *name, uint64_t size)
{
	struct kv_node_info n = info(KV_KIND_PAGE, ino, layer, name);

	n.attr.mode = 0444;
	n.size = size;
	n.state = KV_PAGE_SEALED;
	n.extent_id = ino;
	n.ext = (struct kv_extent){ .stripe = 1, .segment = 2, .offset = 4096 * ino,
				    .length = size };
	n.hash[0] = (uint8_t)ino;
	/* A page's location and checksum are its extent's: put it first. */
	struct kv_extent_rec r = { .id = ino, .ext = n.ext, .refcount = 1 };
	memcpy(r.hash, n.hash, KV_HASH_LEN);
	int rc = kv_index_extent_put(x, &r);
	return rc < 0 ? rc : kv_index_add(x, &n);
}

/* model 2 "m", layer 3 "00", pages 10 "a" (100 B), 11 "b" (200 B). */
FIXTURE_FN void small_tree(struct kv_index *x)
{
	assert_int_equal(add_model(x, 2, "m"), 0);
	assert_int_equal(add_layer(x, 3, 2, 0), 0);
	assert_int_equal(add_page(x, 10, 3, "a", 100), 0);
	assert_int_equal(add_page(x, 11, 3, "b", 200), 0);
}

FIXTURE_FN void hash_of(uint64_t v, uint8_t h[KV_HASH_LEN])
{
	unsigned i;

	for (i = 0; i < KV_HASH_LEN; i++)
		h[i] = (uint8_t)(v >> (8 * (i % 8))) ^ (uint8_t)i;
}

#endif
