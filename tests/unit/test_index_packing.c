/*
 * Unit tests for the index's packed records (docs/decisions/scale.md):
 * page names in hex two digits to a byte (index/node_name.c), extent
 * locations (struct xent) and sibling links by slab handle.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "index_fixture.h"
#include "index_i.h"   /* struct node, to test the name coding directly */

/*
 * Names starting with lowercase hex digits are kept two digits to a byte
 * (index/node_name.c). Every form must come back exactly as given, and a
 * name differing in one byte (case, a digit, a shorter or longer run) must
 * not match it.
 */
static void test_hex_names(void **state)
{
	static const char *const names[] = {
		"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		"3f0c9a3f0c9a3f0c9a3f0c9a3f0c9a3f0c9a3f0c9a3f0c9a3f0c9a3f0c9a3f0c_g0",
		"abcde_x", "abcd", "abc", "ab", "ABCD", "aBcD", "0000", "00000",
		"ffff\x01\xff", "deadbeefg", "e", "g0123456",
	};
	static const char *const misses[] = {
		"0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
		"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdee",
		"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde",
		"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0",
		"3f0c9a3f0c9a3f0c9a3f0c9a3f0c9a3f0c9a3f0c9a3f0c9a3f0c9a3f0c9a3f0c_g1",
		"3f0c9a3f0c9a3f0c9a3f0c9a3f0c9a3f0c9a3f0c9a3f0c9a3f0c9a3f0c9a3f0c",
		"abcde_", "abcde_xy", "abcdf_x", "abcdE_x", "abcd0", "abc0", "Abcd",
		"000", "000000", "0000 ", "ffff\x01", "deadbeef", "deadbeefG",
	};
	char name[KV_NAME_MAX + 1];
	struct kv_dirent *d;
	struct kv_node_info n;
	struct kv_index *x = *state;
	size_t i, j, count;

	assert_int_equal(add_model(x, 2, "m"), 0);
	assert_int_equal(add_layer(x, 3, 2, 0), 0);
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		assert_int_equal(add_page(x, 100 + i, 3, names[i], 1 + i), 0);
	/* the longest: 254 digits are packed (the count's limit), then one */
	memset(name, 'c', KV_NAME_MAX);
	name[KV_NAME_MAX] = '\0';
	assert_int_equal(add_page(x, 99, 3, name, 1), 0);
	assert_int_equal(kv_index_lookup(x, 3, name, &n), 0);
	assert_int_equal(n.ino, 99);
	assert_string_equal(n.name, name);
	name[KV_NAME_MAX - 1] = '\0';
	assert_int_equal(kv_index_lookup(x, 3, name, &n), -ENOENT);

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		assert_int_equal(kv_index_lookup(x, 3, names[i], &n), 0);
		assert_int_equal(n.ino, 100 + i);
		assert_string_equal(n.name, names[i]);
		assert_int_equal(kv_index_get(x, 100 + i, &n), 0);
		assert_string_equal(n.name, names[i]);
		n = info(KV_KIND_PAGE, 200 + i, 3, names[i]);   /* empty: no extent */
		assert_int_equal(kv_index_add(x, &n), -EEXIST);
	}
	for (i = 0; i < sizeof(misses) / sizeof(misses[0]); i++)
		assert_int_equal(kv_index_lookup(x, 3, misses[i], &n), -ENOENT);

	assert_int_equal(kv_index_readdir(x, 3, &d, &count), 0);
	assert_int_equal(count, sizeof(names) / sizeof(names[0]) + 1);
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		for (j = 0; j < count && d[j].ino != 100 + i; j++)
			;
		assert_true(j < count);
		assert_string_equal(d[j].name, names[i]);
	}
	kv_dirents_free(d, count);

	/* Renames between packed and plain forms, of the same length and not:
	 * the node moves to an allocation of its new size. */
	assert_int_equal(kv_index_move(x, 100, 3, "ZZZZ", 0, NULL), 0);
	assert_int_equal(kv_index_lookup(x, 3, names[0], &n), -ENOENT);
	assert_int_equal(kv_index_move(x, 109, 3, names[0], 0, NULL), 0);
	assert_int_equal(kv_index_lookup(x, 3, names[0], &n), 0);
	assert_int_equal(n.ino, 109);
	assert_int_equal(kv_index_lookup(x, 3, "00000", &n), -ENOENT);
	assert_int_equal(kv_index_move(x, 100, 3, "00000", 0, NULL), 0);
	assert_int_equal(kv_index_lookup(x, 3, "00000", &n), 0);
	assert_int_equal(n.ino, 100);
	assert_string_equal(n.name, "00000");
	assert_int_equal(kv_index_lookup(x, 3, "ZZZZ", &n), -ENOENT);
}

/* The name coding itself, where a lookup cannot reach: equality is only
 * asked of names whose hashes match, so a wrong byte compare would hide
 * behind the hash in test_hex_names. */
static void test_hex_name_coding(void **state)
{
	static const struct { const char *name, *other; size_t stored; } c[] = {
		{ "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		  "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdee", 34 },
		{ "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		  "1123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", 34 },
		{ "0123456789abcdef", "0123456789abcdeF", 10 },
		{ "0123456789abcdef", "0123456789abcde", 10 },
		{ "0123456789abcdef_g0", "0123456789abcdef_g1", 13 },
		{ "0123456789abcdef_g0", "0123456789abcdef_g", 13 },
		{ "abcde_x", "abcde_y", 7 },
		{ "abcd", "abce", 4 },
		{ "abc", "abd", 4 },
		{ "ABCD", "abcd", 5 },
		{ "abcd", "ABCD", 4 },
	};
	char out[KV_NAME_MAX + 1];
	size_t i, len;

	(void)state;
	for (i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		len = strlen(c[i].name);
		assert_int_equal(idx_name_stored(c[i].name, len), c[i].stored);
		struct node *n = calloc(1, idx_node_bytes(c[i].stored));

		assert_non_null(n);
		idx_node_name_set(n, c[i].name, len);
		assert_int_equal(idx_node_name_stored(n), c[i].stored);
		assert_int_equal(idx_node_name_len(n), len);
		assert_int_equal(idx_node_name(n, out), len);
		assert_string_equal(out, c[i].name);
		assert_true(idx_node_name_eq(n, c[i].name, len));
		assert_false(idx_node_name_eq(n, c[i].other, strlen(c[i].other)));
		/* a prefix of the name given with its full length is no match */
		assert_false(idx_node_name_eq(n, c[i].name, len - 1));
		free(n);
	}
}

/* readdir shows exactly the inodes in want[], in that order. */
static void expect_children(struct kv_index *x, uint64_t dir, const uint64_t *want, size_t n)
{
	struct kv_node_info info_dir;
	struct kv_dirent *d;
	size_t got, i;

	assert_int_equal(kv_index_readdir(x, dir, &d, &got), 0);
	assert_int_equal(got, n);
	for (i = 0; i < n; i++)
		assert_int_equal(d[i].ino, want[i]);
	kv_dirents_free(d, got);
	assert_int_equal(kv_index_get(x, dir, &info_dir), 0);
	assert_int_equal(info_dir.nchildren, n);
}

/* A directory's children are linked by slab handles (index_i.h,
 * idx_next): removing the head, the tail and the middle, and moving a
 * node to an allocation of another size, keep the order and the count. */
static void test_child_list(void **state)
{
	struct kv_index *x = *state;
	uint64_t i;

	assert_int_equal(add_model(x, 2, "m"), 0);
	assert_int_equal(add_layer(x, 3, 2, 0), 0);
	assert_int_equal(add_layer(x, 4, 2, 1), 0);
	for (i = 10; i < 16; i++) {
		char name[8];

		snprintf(name, sizeof(name), "p%" PRIu64, i);
		assert_int_equal(add_page(x, i, 3, name, 10), 0);
	}
	expect_children(x, 3, (uint64_t[]){ 10, 11, 12, 13, 14, 15 }, 6);
	assert_int_equal(kv_index_remove(x, 10), 0);          /* head */
	expect_children(x, 3, (uint64_t[]){ 11, 12, 13, 14, 15 }, 5);
	assert_int_equal(kv_index_remove(x, 15), 0);          /* tail */
	expect_children(x, 3, (uint64_t[]){ 11, 12, 13, 14 }, 4);
	assert_int_equal(kv_index_remove(x, 12), 0);          /* middle */
	expect_children(x, 3, (uint64_t[]){ 11, 13, 14 }, 3);
	/* a rename to a longer name regrows the node; it goes to the end */
	assert_int_equal(kv_index_move(x, 13, 3, "a-much-longer-name-than-before", 0, NULL), 0);
	expect_children(x, 3, (uint64_t[]){ 11, 14, 13 }, 3);
	/* across layers, head then tail, and back */
	assert_int_equal(kv_index_move(x, 11, 4, "p11", 0, NULL), 0);
	assert_int_equal(kv_index_move(x, 13, 4, "p13", 0, NULL), 0);
	expect_children(x, 3, (uint64_t[]){ 14 }, 1);
	expect_children(x, 4, (uint64_t[]){ 11, 13 }, 2);
	assert_int_equal(kv_index_remove(x, 14), 0);
	expect_children(x, 3, NULL, 0);
	assert_int_equal(kv_index_move(x, 13, 3, "p13", 0, NULL), 0);
	expect_children(x, 3, (uint64_t[]){ 13 }, 1);
	expect_children(x, 4, (uint64_t[]){ 11 }, 1);
	/* the layers themselves, and a model with both */
	expect_children(x, 2, (uint64_t[]){ 3, 4 }, 2);
	assert_int_equal(kv_index_remove(x, 11), 0);
	assert_int_equal(kv_index_remove(x, 4), 0);
	expect_children(x, 2, (uint64_t[]){ 3 }, 1);
}

/* The extent record packs its location (index_i.h, struct xent): the
 * edges of what it holds come back exactly, and one past them is refused,
 * never kept truncated. */
static void test_extent_packing(void **state)
{
	struct kv_index *x = *state;
	const uint64_t far = (uint64_t)UINT32_MAX * KV_ALIGN, longest = (1ull << 40) - 1;
	struct kv_extent_rec r = { .id = 9, .refcount = 2,
				   .ext = { .stripe = KV_MAX_STRIPES - 1, .segment = UINT32_MAX,
					    .offset = far, .length = longest } }, got, bad;
	struct kv_index_stats st;

	hash_of(9, r.hash);
	assert_int_equal(kv_index_extent_put(x, &r), 0);
	assert_int_equal(kv_index_extent_get(x, 9, &got), 0);
	assert_int_equal(got.ext.stripe, KV_MAX_STRIPES - 1);
	assert_int_equal(got.ext.segment, UINT32_MAX);
	assert_int_equal(got.ext.offset, far);
	assert_int_equal(got.ext.length, longest);
	assert_int_equal(got.refcount, 2);
	kv_index_stats(x, &st);
	assert_int_equal(st.extent_bytes, (longest + KV_ALIGN - 1) / KV_ALIGN * KV_ALIGN);
	/* moved: the footprint follows */
	r.ext = (struct kv_extent){ .stripe = 0, .segment = 1, .offset = 4096, .length = 1 };
	assert_int_equal(kv_index_extent_put(x, &r), 0);
	assert_int_equal(kv_index_extent_get(x, 9, &got), 0);
	assert_int_equal(got.ext.offset, 4096);
	assert_int_equal(got.ext.length, 1);
	kv_index_stats(x, &st);
	assert_int_equal(st.extent_bytes, KV_ALIGN);

	bad = r;
	bad.id = 10;
	bad.ext.stripe = KV_MAX_STRIPES;
	assert_int_equal(kv_index_extent_put(x, &bad), -EOVERFLOW);
	bad.ext.stripe = 0;
	bad.ext.offset = far + KV_ALIGN;
	assert_int_equal(kv_index_extent_put(x, &bad), -EOVERFLOW);
	bad.ext.offset = 0;
	bad.ext.length = longest + 1;
	assert_int_equal(kv_index_extent_put(x, &bad), -EOVERFLOW);
	assert_int_equal(kv_index_extent_get(x, 10, &got), -ENOENT);
	/* an existing extent moved beyond the range keeps its old place */
	r.ext.length = longest + 1;
	assert_int_equal(kv_index_extent_put(x, &r), -EOVERFLOW);
	assert_int_equal(kv_index_extent_get(x, 9, &got), 0);
	assert_int_equal(got.ext.length, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_hex_names, setup, teardown),
		cmocka_unit_test(test_hex_name_coding),
		cmocka_unit_test_setup_teardown(test_child_list, setup, teardown),
		cmocka_unit_test_setup_teardown(test_extent_packing, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
