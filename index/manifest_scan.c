/*
 * kvfs manifest, read in steps: what a mount needs to answer at once and
 * load the rest in the background (index/load.c). A scan walks one table
 * in key order, a chunk of rows per step, validating each row exactly as
 * kv_manifest_load does; between steps its caller may run other queries
 * on the same connection (a layer wanted now). Every scan of a connection
 * between kv_manifest_read_begin and kv_manifest_read_end sees one
 * snapshot, so rows loaded in different steps agree with each other.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "manifest_i.h"

struct kv_manifest_scan {
	struct mf_load l;
	sqlite3_stmt *st;
	int (*row)(struct mf_load *l, sqlite3_stmt *st);
	char err[512];
};

int kv_manifest_read_begin(struct kv_manifest *m)
{
	int rc;

	if (m->in_txn) {
		kv_log(KV_LOG_ERR, "manifest %s: read snapshot inside an open transaction",
		       m->path);
		return -EINVAL;
	}
	rc = mf_exec(m->db, m->path, "BEGIN", "starting a read");
	if (rc == 0)
		m->in_txn = true;   /* no write begins on this connection now */
	return rc;
}

void kv_manifest_read_end(struct kv_manifest *m)
{
	if (!m->in_txn)
		return;
	mf_exec(m->db, m->path, "COMMIT", "ending a read");
	m->in_txn = false;
}

/* The columns each row function expects (as kv_manifest_load selects them;
 * pages without their extent's length: the index compares sizes). */
#define MODELS_SQL "SELECT ino, name, " ATTR_COLS ", layers, kv_heads, head_dim, " \
	"page_tokens, dtype, ident FROM models ORDER BY ino"
#define LAYERS_SQL "SELECT ino, model_ino, layer, name, " ATTR_COLS ", ident " \
	"FROM layers ORDER BY ino"
#define EXTENTS_SQL "SELECT id, stripe, segment, \"offset\", length, hash, refcount " \
	"FROM extents"
#define PAGES_SQL "SELECT ino, layer_ino, name, extent_id, size, " ATTR_COLS \
	", NULL, ident FROM pages"
/* One layer's pages, each with its extent's row joined (the empty pages'
 * extent 0 is not): a layer left in the manifest comes back with extents
 * that left RAM, read with their pages in one statement and one snapshot
 * rather than by a query per page (no slower, measured: the load's time
 * is in the row checks and the index's inserts). Column 11 is then the
 * extent's length, which mf_row_page compares with the page's size. */
#define LAYER_PAGES_SQL "SELECT p.ino, p.layer_ino, p.name, p.extent_id, p.size, " \
	"p.mode, p.uid, p.gid, p.ctime_ns, p.mtime_ns, p.atime_ns, e.length, p.ident, " \
	"e.id, e.stripe, e.segment, e.\"offset\", e.length, e.hash, e.refcount " \
	"FROM pages AS p LEFT JOIN extents AS e ON e.id = p.extent_id AND " \
	"p.extent_id != 0 WHERE p.ino IN (SELECT ino FROM pages WHERE layer_ino = ?1) " \
	"ORDER BY p.ino"

int kv_manifest_scan_open(struct kv_manifest *m, enum kv_scan_table t, uint64_t key,
			  const struct kv_manifest_visitor *v, void *arg,
			  struct kv_manifest_scan **out)
{
	struct kv_manifest_scan *s = calloc(1, sizeof(*s));
	const char *sql;
	int rc;

	*out = NULL;
	if (!s)
		return -ENOMEM;
	s->l = (struct mf_load){ .m = m, .v = v, .arg = arg, .err = s->err,
				 .errlen = sizeof(s->err) };
	switch (t) {
	case KV_SCAN_MODELS:
		sql = MODELS_SQL;
		s->row = mf_row_model;
		break;
	case KV_SCAN_LAYERS:
		sql = LAYERS_SQL;
		s->row = mf_row_layer;
		break;
	case KV_SCAN_EXTENTS:
		sql = EXTENTS_SQL " ORDER BY id";
		s->row = mf_row_extent;
		break;
	case KV_SCAN_PAGES:
		/* One layer's rows, in the order they were made (by inode).
		 * Its inodes come from the (layer_ino, name) index alone, then
		 * each row by inode in ascending order: SQLite walks the sorted
		 * list of inodes, so the table is read front to back and no
		 * sort of whole rows follows. "WHERE layer_ino = ?1 ORDER BY
		 * ino" read the rows in name order, a seek per row across the
		 * table, then sorted them: the query took twice as long on a
		 * layer whose pages are interleaved with other layers'
		 * (docs/benchmarks/scale.md, "The loader's memory given back,
		 * and one layer read by inode"). */
		sql = key ? LAYER_PAGES_SQL : PAGES_SQL " ORDER BY ino";
		s->row = key ? mf_row_page_extent : mf_row_page;
		break;
	default:
		free(s);
		return -EINVAL;
	}
	if (key > INT64_MAX) {
		free(s);
		return -EINVAL;
	}
	rc = mf_load_limits(&s->l);
	if (rc == KV_ERR_CORRUPT)
		kv_log(KV_LOG_ERR, "manifest %s is damaged: %s", m->path, s->err);
	if (rc) {
		free(s);
		return rc;
	}
	rc = sqlite3_prepare_v2(m->db, sql, -1, &s->st, NULL);
	if (rc != SQLITE_OK) {
		rc = mf_db_fail(m->db, m->path, rc, "preparing \"%s\"", sql);
		free(s);
		return rc;
	}
	if (key && t == KV_SCAN_PAGES)
		sqlite3_bind_int64(s->st, 1, (int64_t)key);
	*out = s;
	return 0;
}

int kv_manifest_scan_step(struct kv_manifest_scan *s, unsigned max)
{
	struct kv_manifest *m = s->l.m;
	unsigned n;
	int rc;

	if (!s->st)
		return 0;
	for (n = 0; n < max; n++) {
		rc = sqlite3_step(s->st);
		if (rc == SQLITE_DONE) {
			sqlite3_finalize(s->st);
			s->st = NULL;
			return 0;
		}
		if (rc != SQLITE_ROW)
			return mf_db_fail(m->db, m->path, rc, "reading \"%s\"",
					  sqlite3_sql(s->st));
		rc = s->row(&s->l, s->st);
		if (rc == KV_ERR_CORRUPT && s->err[0])
			kv_log(KV_LOG_ERR, "manifest %s is damaged: %s", m->path, s->err);
		if (rc)
			return rc;
	}
	return 1;
}

void kv_manifest_scan_close(struct kv_manifest_scan *s)
{
	if (!s)
		return;
	sqlite3_finalize(s->st);
	free(s);
}

/* Every row of one scan, to its end. */
static int scan_all(struct kv_manifest *m, enum kv_scan_table t, uint64_t key,
		    const struct kv_manifest_visitor *v, void *arg)
{
	struct kv_manifest_scan *s;
	int rc = kv_manifest_scan_open(m, t, key, v, arg, &s);

	if (rc)
		return rc;
	while ((rc = kv_manifest_scan_step(s, 4096)) > 0)
		;
	kv_manifest_scan_close(s);
	return rc;
}

int kv_manifest_load_tree(struct kv_manifest *m, const struct kv_manifest_visitor *v,
			  void *arg)
{
	int rc = scan_all(m, KV_SCAN_MODELS, 0, v, arg);

	return rc ? rc : scan_all(m, KV_SCAN_LAYERS, 0, v, arg);
}

int kv_manifest_load_counts(struct kv_manifest *m, const struct kv_manifest_visitor *v,
			    void *arg)
{
	char err[128] = "";
	struct mf_load l = { .m = m, .v = v, .arg = arg, .err = err,
			     .errlen = sizeof(err) };

	return v && v->counts ? mf_load_counts(&l) : 0;
}

/* See manifest_i.h. Shared by the offline check (check.c) and the load. */
int mf_each_row(struct kv_manifest *m, const char *sql,
		int (*fn)(sqlite3_stmt *st, void *a), void *a)
{
	sqlite3_stmt *st;
	int rc;

	rc = sqlite3_prepare_v2(m->db, sql, -1, &st, NULL);
	if (rc != SQLITE_OK)
		return mf_db_fail(m->db, m->path, rc, "preparing \"%s\"", sql);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		rc = fn(st, a);
		if (rc)
			goto out;
	}
	rc = rc == SQLITE_DONE ? 0 : mf_db_fail(m->db, m->path, rc, "reading \"%s\"", sql);
out:
	sqlite3_finalize(st);
	return rc;
}

struct layer_pages_arg {
	int (*fn)(void *arg, uint64_t layer_ino, uint64_t pages);
	void *arg;
};

static int layer_pages_row(sqlite3_stmt *st, void *a)
{
	struct layer_pages_arg *lp = a;
	int64_t ino = sqlite3_column_int64(st, 0), n = sqlite3_column_int64(st, 1);

	if (ino <= 0 || n <= 0)
		return 0;     /* the walk judges such rows, and says what is wrong */
	return lp->fn(lp->arg, (uint64_t)ino, (uint64_t)n);
}

int kv_manifest_layer_pages(struct kv_manifest *m,
			    int (*fn)(void *arg, uint64_t layer_ino, uint64_t pages),
			    void *arg)
{
	struct layer_pages_arg lp = { fn, arg };

	return mf_each_row(m, "SELECT layer_ino, count(*) FROM pages GROUP BY layer_ino",
			   layer_pages_row, &lp);
}

int kv_manifest_max_ids(struct kv_manifest *m, uint64_t *ino, uint64_t *extent)
{
	sqlite3_stmt *st;
	int64_t i, e;
	int rc;

	/* max() of an INTEGER PRIMARY KEY reads one b-tree edge, not the table. */
	rc = mf_query_row(m->db, m->path, "SELECT max(coalesce((SELECT max(ino) FROM "
			  "models), 0), coalesce((SELECT max(ino) FROM layers), 0), "
			  "coalesce((SELECT max(ino) FROM pages), 0)), coalesce((SELECT "
			  "max(id) FROM extents), 0)", NULL, &st);
	if (rc < 0)
		return rc;
	if (rc == 0)
		return -EIO;
	i = sqlite3_column_int64(st, 0);
	e = sqlite3_column_int64(st, 1);
	sqlite3_finalize(st);
	*ino = i > 0 ? (uint64_t)i : 0;
	*extent = e > 0 ? (uint64_t)e : 0;
	return 0;
}

int kv_manifest_page_layer(struct kv_manifest *m, uint64_t ino, uint64_t *layer_ino)
{
	sqlite3_stmt *st;
	int rc;

	*layer_ino = 0;
	if (ino > INT64_MAX)
		return -ENOENT;
	rc = sqlite3_prepare_v2(m->db, "SELECT layer_ino FROM pages WHERE ino = ?1", -1, &st,
				NULL);
	if (rc != SQLITE_OK)
		return mf_db_fail(m->db, m->path, rc, "preparing a page's layer");
	sqlite3_bind_int64(st, 1, (int64_t)ino);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_INTEGER &&
	    sqlite3_column_int64(st, 0) > 0) {
		*layer_ino = (uint64_t)sqlite3_column_int64(st, 0);
		rc = 0;
	} else if (rc == SQLITE_ROW || rc == SQLITE_DONE) {
		rc = -ENOENT;
	} else {
		rc = mf_db_fail(m->db, m->path, rc, "reading the layer of page %" PRIu64, ino);
	}
	sqlite3_finalize(st);
	return rc;
}
