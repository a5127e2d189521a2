/*
 * Row identity checks: a 64-bit XXH3 over the columns that say *which*
 * object a row is (its inode, its parent, its name, and for a page the
 * extent and size it names), stored in the row's own `ident` column.
 *
 * Why: a payload's checksum proves its bytes are the bytes once written, not
 * that they belong to the name a row gives them. A row damaged in one field
 * (a name, a parent, an extent id) would otherwise serve one page's verified
 * bytes under another page's name, which for chained KV keys is wrong KV
 * handed to an engine. The load refuses any row whose ident does not match,
 * so such damage is refused at mount and reported by fsck. Attributes (mode,
 * owner, times) are not identity and are left out: changing them is normal.
 *
 * The encoding is fixed little-endian with a table tag and the name length,
 * so no two different rows of any table hash the same input.
 */
#include <string.h>

#include <xxhash.h>

#include "manifest_i.h"

struct ident_buf {
	uint8_t b[8 * 8 + KV_NAME_MAX + KV_DTYPE_MAX + 8];
	size_t n;
};

static void put64(struct ident_buf *ib, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		ib->b[ib->n++] = (uint8_t)(v >> (8 * i));
}

static void put_str(struct ident_buf *ib, const char *s, size_t max)
{
	size_t len = strnlen(s, max);

	put64(ib, len);
	memcpy(ib->b + ib->n, s, len);
	ib->n += len;
}

static int64_t finish(const struct ident_buf *ib)
{
	return (int64_t)XXH3_64bits(ib->b, ib->n);
}

int64_t mf_ident_model(uint64_t ino, const char *name, const struct kv_geometry *g)
{
	struct ident_buf ib = { .n = 0 };

	put64(&ib, 'M');
	put64(&ib, ino);
	put_str(&ib, name, KV_NAME_MAX);
	put64(&ib, g->layers);
	put64(&ib, g->kv_heads);
	put64(&ib, g->head_dim);
	put64(&ib, g->page_tokens);
	put_str(&ib, g->dtype, KV_DTYPE_MAX);
	return finish(&ib);
}

int64_t mf_ident_layer(uint64_t ino, uint64_t model_ino, uint32_t layer, const char *name)
{
	struct ident_buf ib = { .n = 0 };

	put64(&ib, 'L');
	put64(&ib, ino);
	put64(&ib, model_ino);
	put64(&ib, layer);
	put_str(&ib, name, KV_NAME_MAX);
	return finish(&ib);
}

int64_t mf_ident_page(uint64_t ino, uint64_t layer_ino, const char *name,
		      uint64_t extent_id, uint64_t size)
{
	struct ident_buf ib = { .n = 0 };

	put64(&ib, 'P');
	put64(&ib, ino);
	put64(&ib, layer_ino);
	put64(&ib, extent_id);
	put64(&ib, size);
	put_str(&ib, name, KV_NAME_MAX);
	return finish(&ib);
}

/* ---- the same functions in SQL, for the schema upgrade ---- */

static void sql_ident_model(sqlite3_context *cx, int argc, sqlite3_value **v)
{
	struct kv_geometry g;
	const char *name = (const char *)sqlite3_value_text(v[1]);
	const char *dtype = (const char *)sqlite3_value_text(v[6]);

	(void)argc;
	memset(&g, 0, sizeof(g));
	g.layers = (uint32_t)sqlite3_value_int64(v[2]);
	g.kv_heads = (uint32_t)sqlite3_value_int64(v[3]);
	g.head_dim = (uint32_t)sqlite3_value_int64(v[4]);
	g.page_tokens = (uint32_t)sqlite3_value_int64(v[5]);
	strncpy(g.dtype, dtype ? dtype : "", KV_DTYPE_MAX);
	sqlite3_result_int64(cx, mf_ident_model((uint64_t)sqlite3_value_int64(v[0]),
						name ? name : "", &g));
}

static void sql_ident_layer(sqlite3_context *cx, int argc, sqlite3_value **v)
{
	const char *name = (const char *)sqlite3_value_text(v[3]);

	(void)argc;
	sqlite3_result_int64(cx, mf_ident_layer((uint64_t)sqlite3_value_int64(v[0]),
						(uint64_t)sqlite3_value_int64(v[1]),
						(uint32_t)sqlite3_value_int64(v[2]),
						name ? name : ""));
}

static void sql_ident_page(sqlite3_context *cx, int argc, sqlite3_value **v)
{
	const char *name = (const char *)sqlite3_value_text(v[2]);

	(void)argc;
	sqlite3_result_int64(cx, mf_ident_page((uint64_t)sqlite3_value_int64(v[0]),
					       (uint64_t)sqlite3_value_int64(v[1]),
					       name ? name : "",
					       (uint64_t)sqlite3_value_int64(v[3]),
					       (uint64_t)sqlite3_value_int64(v[4])));
}

int mf_ident_register(sqlite3 *db)
{
	const int fl = SQLITE_UTF8 | SQLITE_DETERMINISTIC;
	int rc;

	rc = sqlite3_create_function(db, "kvfs_ident_model", 7, fl, NULL,
				     sql_ident_model, NULL, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_create_function(db, "kvfs_ident_layer", 4, fl, NULL,
					     sql_ident_layer, NULL, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_create_function(db, "kvfs_ident_page", 5, fl, NULL,
					     sql_ident_page, NULL, NULL);
	return rc;
}

int kv_manifest_register_sql(struct sqlite3 *db)
{
	return mf_ident_register(db);
}
