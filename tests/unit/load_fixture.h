/*
 * Manifests for the index's load tests (test_index_load.c,
 * test_index_residency.c): a store of its own under /tmp, filled through
 * the manifest's API or in SQL, and a background load on a second
 * connection, as the daemon's loader has. Include after cmocka.h,
 * index_fixture.h and manifest_fixture.h.
 */
#ifndef KVFS_TEST_LOAD_FIXTURE_H
#define KVFS_TEST_LOAD_FIXTURE_H

#include <sqlite3.h>

struct store {
	char dir[64];
	char db[128];
	struct kv_manifest *m;
};

FIXTURE_FN void store_make(struct store *s)
{
	strcpy(s->dir, "/tmp/kvfs-test-index-XXXXXX");
	mfx_create(s->dir, s->db, sizeof(s->db));
	assert_int_equal(kv_manifest_open(s->dir, &s->m), 0);
}

FIXTURE_FN void store_done(struct store *s)
{
	kv_manifest_close(s->m);
	mfx_remove(s->dir);
}

FIXTURE_FN void store_sql(struct store *s, const char *sql)
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
FIXTURE_FN void store_fill(struct store *s)
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

/* Extent id (32 KiB, in segment id - 1) and one page `name` (inode ino)
 * in layer layer_ino naming it, committed through the manifest's API. */
FIXTURE_FN void store_extent_page(struct store *s, uint64_t id, uint64_t ino,
			      uint64_t layer_ino, const char *name)
{
	struct kv_extent_rec e = { .id = id, .refcount = 1,
				   .ext = { .segment = (uint32_t)id - 1, .offset = 0,
					    .length = 32768 } };
	struct kv_page_rec p = { .ino = ino, .layer_ino = layer_ino, .extent_id = id,
				 .size = 32768, .attr = { .mode = 0444 } };

	snprintf(p.name, sizeof(p.name), "%s", name);
	hash_of(id, e.hash);
	assert_int_equal(kv_manifest_begin(s->m), 0);
	assert_int_equal(kv_manifest_put_extent(s->m, &e), 0);
	assert_int_equal(kv_manifest_put_page(s->m, &p), 0);
	assert_int_equal(kv_manifest_commit(s->m), 0);
}

/* A second connection, as the daemon's loader has. */
FIXTURE_FN struct kv_index_loader *lazy_begin(struct kv_index *x, struct store *s,
					  struct kv_manifest **lm)
{
	struct kv_index_loader *l;

	assert_int_equal(kv_manifest_open(s->dir, lm), 0);
	assert_int_equal(kv_index_load_begin(x, *lm, &l), 0);
	return l;
}

FIXTURE_FN void lazy_done(struct kv_index_loader *l, struct kv_manifest *lm)
{
	kv_index_load_end(l);
	kv_manifest_close(lm);
}

FIXTURE_FN int lazy_run(struct kv_index_loader *l)
{
	int rc, steps = 0;

	while ((rc = kv_index_load_step(l)) == 1)
		assert_true(++steps < 100000);
	return rc;
}

/* Layer 3 gets `count` empty pages "e0".. (inodes 100..), made in SQL. */
FIXTURE_FN void store_many(struct store *s, unsigned count)
{
	char sql[512];

	snprintf(sql, sizeof(sql), "WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL "
		 "SELECT i + 1 FROM c WHERE i + 1 < %u) INSERT INTO pages SELECT "
		 "100 + i, 3, 'e' || i, 0, 0, 292, 0, 0, 0, 0, 0, "
		 "kvfs_ident_page(100 + i, 3, 'e' || i, 0, 0) FROM c;", count);
	store_sql(s, sql);
}

/* Layers 4..(3 + n) "11".. of model 2, each with `count` empty pages
 * "e0".. (inodes from 100000 * layer). */
FIXTURE_FN void store_layers(struct store *s, unsigned n, unsigned count)
{
	char sql[1024];

	for (unsigned i = 1; i <= n; i++) {
		snprintf(sql, sizeof(sql), "INSERT INTO layers VALUES (%u, 2, %u, '%u', 488, "
			 "0, 0, 0, 0, 0, kvfs_ident_layer(%u, 2, %u, '%u'));"
			 "WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c "
			 "WHERE i + 1 < %u) INSERT INTO pages SELECT %u + i, %u, 'e' || i, "
			 "0, 0, 292, 0, 0, 0, 0, 0, kvfs_ident_page(%u + i, %u, 'e' || i, 0, 0) "
			 "FROM c;", 3 + i, 10 + i, 10 + i, 3 + i, 10 + i, 10 + i, count,
			 100000 * (3 + i), 3 + i, 100000 * (3 + i), 3 + i);
		store_sql(s, sql);
	}
}

#endif
