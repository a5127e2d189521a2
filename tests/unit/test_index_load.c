/*
 * Unit tests for loading the index from a manifest (index/load.c): a
 * round trip of every kind of row, and damaged manifests (a page naming a
 * missing extent, refcounts that disagree, a page without its layer)
 * refused with a clear error.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "index_fixture.h"


/* ---- load from a manifest ---- */

struct store {
	char dir[64];
	char db[128];
	struct kv_manifest *m;
};

static int rm_entry(const char *p, const struct stat *sb, int type, struct FTW *f)
{
	(void)sb;
	(void)type;
	(void)f;
	return remove(p);
}

static void store_make(struct store *s)
{
	struct kv_store_meta *meta = calloc(1, sizeof(*meta));

	assert_non_null(meta);
	strcpy(s->dir, "/tmp/kvfs-test-index-XXXXXX");
	assert_non_null(mkdtemp(s->dir));
	snprintf(s->db, sizeof(s->db), "%s/%s", s->dir, KV_MANIFEST_FILE);
	strcpy(meta->uuid, "0123abcd-89ab-4def-8123-456789abcdef");
	meta->segment_size = 1ull << 30;
	meta->nstripes = 1;
	strcpy(meta->stripes[0], "/srv/ssd0");
	assert_int_equal(kv_manifest_create(s->dir, meta), 0);
	free(meta);
	assert_int_equal(kv_manifest_open(s->dir, &s->m), 0);
}

static void store_done(struct store *s)
{
	kv_manifest_close(s->m);
	nftw(s->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void store_sql(struct store *s, const char *sql)
{
	sqlite3 *db;

	kv_manifest_close(s->m);
	assert_int_equal(sqlite3_open(s->db, &db), SQLITE_OK);
	assert_int_equal(kv_manifest_register_sql(db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	assert_int_equal(kv_manifest_open(s->dir, &s->m), 0);
}

/* model 2, layer 3 "05", extents 1 (two pages) and 2, pages 10, 11, 12. */
static void store_fill(struct store *s)
{
	struct kv_model_rec mo = { .ino = 2, .name = "qwen", .attr = { .mode = 0750 },
				   .geo = { .layers = 28, .kv_heads = 4, .head_dim = 128,
					    .page_tokens = 16, .dtype = "f16" } };
	struct kv_layer_rec la = { .ino = 3, .model_ino = 2, .layer = 5, .name = "05",
				   .attr = { .mode = 0750 } };
	struct kv_extent_rec e1 = { .id = 1, .refcount = 2,
				    .ext = { .segment = 0, .offset = 0, .length = 32768 } };
	struct kv_extent_rec e2 = { .id = 2, .refcount = 1,
				    .ext = { .segment = 1, .offset = 4096, .length = 32768 } };
	struct kv_page_rec p = { .layer_ino = 3, .size = 32768, .attr = { .mode = 0444 } };
	struct kv_manifest *m = s->m;

	hash_of(1, e1.hash);
	hash_of(2, e2.hash);
	assert_int_equal(kv_manifest_begin(m), 0);
	assert_int_equal(kv_manifest_put_model(m, &mo), 0);
	assert_int_equal(kv_manifest_put_layer(m, &la), 0);
	assert_int_equal(kv_manifest_put_extent(m, &e1), 0);
	assert_int_equal(kv_manifest_put_extent(m, &e2), 0);
	p.ino = 10, p.extent_id = 1, strcpy(p.name, "p10");
	assert_int_equal(kv_manifest_put_page(m, &p), 0);
	p.ino = 11, p.extent_id = 1, strcpy(p.name, "p11");
	assert_int_equal(kv_manifest_put_page(m, &p), 0);
	p.ino = 12, p.extent_id = 2, strcpy(p.name, "p12");
	assert_int_equal(kv_manifest_put_page(m, &p), 0);
	assert_int_equal(kv_manifest_commit(m), 0);
}

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


int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_load_roundtrip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_load_missing_extent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_load_refcount_mismatch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_load_missing_layer, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
