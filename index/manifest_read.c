/*
 * kvfs manifest, read side: the store's meta and stripes, the validated
 * walk over every row that the daemon loads its index from, and the full
 * consistency check fsck runs. Every value read from kvfs.db is range-checked
 * here before anyone sees it: a bad row is KV_ERR_CORRUPT naming table, key
 * and column, never an assert or a silently wrong index. The schema is
 * described at the top of manifest.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "kvname.h"
#include "manifest_i.h"

/* ---- row validation (load and check) ---- */

struct row {
	sqlite3_stmt *st;
	const char *bad;      /* first column that failed, NULL if all fine */
	char why[160];
};

__attribute__((format(printf, 3, 4)))
static void col_bad(struct row *r, int col, const char *fmt, ...)
{
	va_list ap;

	if (r->bad)
		return;
	r->bad = sqlite3_column_name(r->st, col);
	va_start(ap, fmt);
	vsnprintf(r->why, sizeof(r->why), fmt, ap);
	va_end(ap);
}

static int64_t col_int(struct row *r, int col, int64_t lo, int64_t hi)
{
	int64_t v;
	sqlite3_value *cv;

	if (r->bad)
		return lo;
	/* One column call, then the value's: each sqlite3_column_* call costs
	 * its own checks and error bookkeeping, a third of a row's decoding
	 * when called twice per column. The value is "unprotected", which
	 * makes no difference on a connection opened SQLITE_OPEN_NOMUTEX (all
	 * of ours) and used by one thread at a time. */
	cv = sqlite3_column_value(r->st, col);
	if (sqlite3_value_type(cv) != SQLITE_INTEGER) {
		col_bad(r, col, "is not an integer");
		return lo;
	}
	v = sqlite3_value_int64(cv);
	if (v < lo || v > hi) {
		col_bad(r, col, "= %" PRId64 " is outside %" PRId64 "..%" PRId64, v, lo, hi);
		return lo;
	}
	return v;
}

static void col_text(struct row *r, int col, char *out, size_t outlen, bool nonempty)
{
	const char *s;
	size_t n;
	sqlite3_value *cv;

	out[0] = '\0';
	if (r->bad)
		return;
	cv = sqlite3_column_value(r->st, col);
	if (sqlite3_value_type(cv) != SQLITE_TEXT) {
		col_bad(r, col, "is not text");
		return;
	}
	s = (const char *)sqlite3_value_text(cv);
	n = (size_t)sqlite3_value_bytes(cv);
	if (!s || n >= outlen)
		col_bad(r, col, "is longer than %zu bytes", outlen - 1);
	else if (strlen(s) != n)
		col_bad(r, col, "contains a NUL byte");
	else if (nonempty && n == 0)
		col_bad(r, col, "is empty");
	else
		memcpy(out, s, n + 1);
}

static void col_name(struct row *r, int col, char out[KV_NAME_MAX + 1])
{
	col_text(r, col, out, KV_NAME_MAX + 1, true);
	if (!r->bad && kv_name_check(out) < 0)
		col_bad(r, col, "'%s' is not a valid name", out);
}

static void col_hash(struct row *r, int col, uint8_t out[KV_HASH_LEN])
{
	sqlite3_value *cv;

	if (r->bad)
		return;
	cv = sqlite3_column_value(r->st, col);
	if (sqlite3_value_type(cv) != SQLITE_BLOB || sqlite3_value_bytes(cv) != KV_HASH_LEN) {
		col_bad(r, col, "is not a %u-byte blob", KV_HASH_LEN);
		return;
	}
	memcpy(out, sqlite3_value_blob(cv), KV_HASH_LEN);
}

/* Six columns from col on: mode, uid, gid, ctime_ns, mtime_ns, atime_ns. */
static void col_attr(struct row *r, int col, struct kv_obj_attr *a)
{
	a->mode = (uint32_t)col_int(r, col, 0, 07777);
	a->uid = (uint32_t)col_int(r, col + 1, 0, UINT32_MAX);
	a->gid = (uint32_t)col_int(r, col + 2, 0, UINT32_MAX);
	a->ctime_ns = col_int(r, col + 3, INT64_MIN, INT64_MAX);
	a->mtime_ns = col_int(r, col + 4, INT64_MIN, INT64_MAX);
	a->atime_ns = col_int(r, col + 5, INT64_MIN, INT64_MAX);
}

/* The row's key is in column kcol (0 but where a join puts a second
 * table's columns after the first's). */
static int bad_row_at(struct mf_load *l, const char *table, const char *key, int kcol,
		      const struct row *r)
{
	return mf_corrupt(l->err, l->errlen, "table %s, %s %lld: column %s %s", table,
		       key, sqlite3_column_int64(r->st, kcol), r->bad, r->why);
}

static int bad_row(struct mf_load *l, const char *table, const char *key,
		   const struct row *r)
{
	return bad_row_at(l, table, key, 0, r);
}

int mf_row_model(struct mf_load *l, sqlite3_stmt *st)
{
	struct row r = { .st = st };
	struct kv_model_rec rec;

	memset(&rec, 0, sizeof(rec));
	rec.ino = (uint64_t)col_int(&r, 0, 1, INT64_MAX);
	col_name(&r, 1, rec.name);
	col_attr(&r, 2, &rec.attr);
	rec.geo.layers = (uint32_t)col_int(&r, 8, 0, UINT32_MAX);
	rec.geo.kv_heads = (uint32_t)col_int(&r, 9, 0, UINT32_MAX);
	rec.geo.head_dim = (uint32_t)col_int(&r, 10, 0, UINT32_MAX);
	rec.geo.page_tokens = (uint32_t)col_int(&r, 11, 0, UINT32_MAX);
	col_text(&r, 12, rec.geo.dtype, sizeof(rec.geo.dtype), false);
	if (!r.bad && kv_geometry_check(&rec.geo) < 0)
		col_bad(&r, 8, "and the other geometry columns are inconsistent");
	if (!r.bad && sqlite3_column_int64(st, 13) != mf_ident_model(rec.ino, rec.name, &rec.geo))
		col_bad(&r, 13, "does not match the row: its name, inode or geometry "
			"changed outside kvfs");
	if (r.bad)
		return bad_row(l, "models", "ino", &r);
	return l->v && l->v->model ? l->v->model(l->arg, &rec) : 0;
}

int mf_row_layer(struct mf_load *l, sqlite3_stmt *st)
{
	struct row r = { .st = st };
	struct kv_layer_rec rec;
	uint32_t num;

	memset(&rec, 0, sizeof(rec));
	rec.ino = (uint64_t)col_int(&r, 0, 1, INT64_MAX);
	rec.model_ino = (uint64_t)col_int(&r, 1, 1, INT64_MAX);
	rec.layer = (uint32_t)col_int(&r, 2, 0, UINT32_MAX);
	col_name(&r, 3, rec.name);
	col_attr(&r, 4, &rec.attr);
	if (!r.bad && (kv_layer_name_parse(rec.name, &num) < 0 || num != rec.layer))
		col_bad(&r, 3, "'%s' does not spell layer %" PRIu32, rec.name, rec.layer);
	if (!r.bad && sqlite3_column_int64(st, 10) !=
		      mf_ident_layer(rec.ino, rec.model_ino, rec.layer, rec.name))
		col_bad(&r, 10, "does not match the row: its name, number, model or "
			"inode changed outside kvfs");
	if (r.bad)
		return bad_row(l, "layers", "ino", &r);
	return l->v && l->v->layer ? l->v->layer(l->arg, &rec) : 0;
}

/* An extent row's seven columns from column c on. */
static int row_extent_at(struct mf_load *l, sqlite3_stmt *st, int c)
{
	struct row r = { .st = st };
	struct kv_extent_rec rec;

	memset(&rec, 0, sizeof(rec));
	if (sqlite3_column_type(st, c) == SQLITE_INTEGER &&
	    sqlite3_column_int64(st, c) == KV_EXTENT_EMPTY) {
		/* The empty pages' extent: no place, no bytes. */
		if (sqlite3_column_int64(st, c + 4) != 0)
			col_bad(&r, c + 4, "of extent 0 (empty pages) is not 0");
		rec.refcount = (uint32_t)col_int(&r, c + 6, 0, UINT32_MAX);
		if (r.bad)
			return bad_row_at(l, "extents", "id", c, &r);
		return l->v && l->v->extent ? l->v->extent(l->arg, &rec) : 0;
	}
	rec.id = (uint64_t)col_int(&r, c, 1, INT64_MAX);
	rec.ext.stripe = (uint32_t)col_int(&r, c + 1, 0, l->nstripes - 1);
	rec.ext.segment = (uint32_t)col_int(&r, c + 2, 0, UINT32_MAX);
	rec.ext.offset = (uint64_t)col_int(&r, c + 3, 0, l->segment_size - 1);
	rec.ext.length = (uint64_t)col_int(&r, c + 4, 1, l->segment_size);
	col_hash(&r, c + 5, rec.hash);
	rec.refcount = (uint32_t)col_int(&r, c + 6, 1, UINT32_MAX);
	if (!r.bad && rec.ext.offset % KV_ALIGN)
		col_bad(&r, c + 3, "= %" PRIu64 " is not %u-aligned", rec.ext.offset, KV_ALIGN);
	if (!r.bad && rec.ext.offset + kv_extent_footprint(&rec.ext) >
		      (uint64_t)l->segment_size)
		col_bad(&r, c + 4, "= %" PRIu64 " runs past the segment size %" PRId64,
			rec.ext.length, l->segment_size);
	if (r.bad)
		return bad_row_at(l, "extents", "id", c, &r);
	return l->v && l->v->extent ? l->v->extent(l->arg, &rec) : 0;
}

int mf_row_extent(struct mf_load *l, sqlite3_stmt *st)
{
	return row_extent_at(l, st, 0);
}

/* A page row's columns into rec, checked: 0, or KV_ERR_CORRUPT. */
static int page_decode(struct mf_load *l, sqlite3_stmt *st, struct kv_page_rec *rec)
{
	struct row r = { .st = st };

	memset(rec, 0, sizeof(*rec));
	rec->ino = (uint64_t)col_int(&r, 0, 1, INT64_MAX);
	rec->layer_ino = (uint64_t)col_int(&r, 1, 1, INT64_MAX);
	col_name(&r, 2, rec->name);
	rec->extent_id = (uint64_t)col_int(&r, 3, 0, INT64_MAX);
	rec->size = (uint64_t)col_int(&r, 4, 0, INT64_MAX);
	if (!r.bad && (rec->extent_id == KV_EXTENT_EMPTY) != (rec->size == 0))
		col_bad(&r, 3, "= %" PRIu64 " for a page of %" PRIu64 " bytes (extent 0 "
			"is for empty pages only)", rec->extent_id, rec->size);
	col_attr(&r, 5, &rec->attr);
	/* Column 11 is the extent's length, NULL when the extent is missing:
	 * that is a reference problem the visitor reports, not a range one. */
	if (!r.bad && sqlite3_column_type(st, 11) != SQLITE_NULL &&
	    (uint64_t)sqlite3_column_int64(st, 11) != rec->size)
		col_bad(&r, 4, "= %" PRIu64 " differs from extent %" PRIu64
			" length %lld", rec->size, rec->extent_id,
			sqlite3_column_int64(st, 11));
	if (!r.bad && sqlite3_column_int64(st, 12) !=
		      mf_ident_page(rec->ino, rec->layer_ino, rec->name, rec->extent_id, rec->size))
		col_bad(&r, 12, "does not match the row: its name, layer, extent, size "
			"or inode changed outside kvfs");
	if (r.bad)
		return bad_row(l, "pages", "ino", &r);
	return 0;
}

int mf_row_page(struct mf_load *l, sqlite3_stmt *st)
{
	struct kv_page_rec rec;
	int rc = page_decode(l, st, &rec);

	if (rc)
		return rc;
	return l->v && l->v->page ? l->v->page(l->arg, &rec) : 0;
}

/* The page is checked first: its extent goes to v only with a page that
 * will follow it. */
int mf_row_page_extent(struct mf_load *l, sqlite3_stmt *st)
{
	struct kv_page_rec rec;
	int rc = page_decode(l, st, &rec);

	if (rc == 0 && sqlite3_column_type(st, 13) != SQLITE_NULL)
		rc = row_extent_at(l, st, 13);
	if (rc)
		return rc;
	return l->v && l->v->page ? l->v->page(l->arg, &rec) : 0;
}

static int load_table(struct mf_load *l, const char *table, const char *sql,
		      int (*fn)(struct mf_load *l, sqlite3_stmt *st))
{
	sqlite3 *db = l->m->db;
	struct check_table *sums = NULL;
	sqlite3_stmt *st;
	int rc;

	rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
	if (rc != SQLITE_OK)
		return mf_db_fail(db, l->m->path, rc, "preparing \"%s\"", sql);
	if (l->sums)
		sums = mf_sums_bind(l->sums, table, st);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		rc = fn(l, st);
		if (rc)
			goto out;
		if (sums)
			mf_sums_row(sums, st);
	}
	rc = rc == SQLITE_DONE ? 0 : mf_db_fail(db, l->m->path, rc, "reading \"%s\"", sql);
	if (rc == 0 && sums)
		mf_sums_done(sums);
out:
	sqlite3_finalize(st);
	return rc;
}

int mf_load_limits(struct mf_load *l)
{
	struct kv_manifest *m = l->m;
	sqlite3_stmt *st;
	int rc;

	rc = mf_meta_int(m->db, m->path, "segment_size", KV_ALIGN, INT64_MAX,
		      &l->segment_size, l->err, l->errlen);
	if (rc < 0)
		return rc;
	rc = mf_query_row(m->db, m->path, "SELECT count(*) FROM stripes", NULL, &st);
	if (rc <= 0)
		return rc;
	l->nstripes = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return 0;
}

/* Rows to come (models, layers and pages are nodes), for visitor->counts. */
int mf_load_counts(struct mf_load *l)
{
	struct kv_manifest *m = l->m;
	sqlite3_stmt *st;
	int64_t nodes, extents;
	int rc;

	rc = mf_query_row(m->db, m->path, "SELECT (SELECT count(*) FROM models) + "
			  "(SELECT count(*) FROM layers) + (SELECT count(*) FROM pages), "
			  "(SELECT count(*) FROM extents)", NULL, &st);
	if (rc <= 0)
		return rc;
	nodes = sqlite3_column_int64(st, 0);
	extents = sqlite3_column_int64(st, 1);
	sqlite3_finalize(st);
	return l->v->counts(l->arg, nodes > 0 ? (uint64_t)nodes : 0,
			    extents > 0 ? (uint64_t)extents : 0);
}

static int load_rows(struct kv_manifest *m, const struct kv_manifest_visitor *v,
		     void *arg, enum kv_check_part part, struct kv_check_sums *sums,
		     char *err, size_t errlen)
{
	/* The pass of pages alone reads models and layers too (a page's
	 * layer is its visitor's to find), but leaves their sums to the
	 * other pass, which runs at the same time. */
	struct mf_load l = { .m = m, .v = v, .arg = arg, .err = err, .errlen = errlen,
			     .sums = part == KV_CHECK_PAGES ? NULL : sums };
	int rc;

	rc = mf_load_limits(&l);
	if (rc == 0 && v && v->counts)
		rc = mf_load_counts(&l);
	if (rc)
		return rc;
	rc = load_table(&l, "models", "SELECT ino, name, " ATTR_COLS ", layers, kv_heads, "
			"head_dim, page_tokens, dtype, ident FROM models ORDER BY ino", mf_row_model);
	if (rc)
		return rc;
	rc = load_table(&l, "layers", "SELECT ino, model_ino, layer, name, " ATTR_COLS
			", ident FROM layers ORDER BY ino", mf_row_layer);
	if (rc)
		return rc;
	/* NOT INDEXED: the rows come from the table's own b-tree, which is
	 * what the index sums' table side must read (and the plan anyway). */
	if (part != KV_CHECK_PAGES)
		rc = load_table(&l, "extents", "SELECT id, stripe, segment, \"offset\", "
				"length, hash, refcount FROM extents NOT INDEXED ORDER BY id",
				mf_row_extent);
	if (rc || part == KV_CHECK_BUT_PAGES)
		return rc;
	l.sums = sums;
	if (v && v->sizes_checked)
		return load_table(&l, "pages", "SELECT ino, layer_ino, name, extent_id, "
				  "size, mode, uid, gid, ctime_ns, mtime_ns, atime_ns, NULL, "
				  "ident FROM pages NOT INDEXED ORDER BY ino", mf_row_page);
	return load_table(&l, NULL, "SELECT p.ino, p.layer_ino, p.name, p.extent_id, "
			  "p.size, p.mode, p.uid, p.gid, p.ctime_ns, p.mtime_ns, "
			  "p.atime_ns, e.length, p.ident FROM pages AS p LEFT JOIN extents AS e "
			  "ON e.id = p.extent_id ORDER BY p.ino", mf_row_page);
}

/* A relative stripe path (a stripe inside the store) is relative to the
 * directory holding the manifest: callers only ever see absolute paths. */
static int resolve_stripe(const char *db_path, char *path, size_t len)
{
	const char *slash = strrchr(db_path, '/');
	int dlen = slash ? (int)(slash - db_path) : 0;
	char cwd[PATH_MAX] = "", tmp[2 * PATH_MAX];

	if (path[0] == '/')
		return 0;
	if (db_path[0] != '/' && !getcwd(cwd, sizeof(cwd)))
		return -errno;
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s%s%.*s/%s", cwd, cwd[0] && dlen ? "/" : "",
			     dlen, db_path, path) >= len)
		return -ENAMETOOLONG;
	strcpy(path, tmp);
	return 0;
}

static int read_stripes(struct kv_manifest *m, struct kv_store_meta *out,
			char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc;

	rc = sqlite3_prepare_v2(m->db, "SELECT id, path FROM stripes ORDER BY id",
				-1, &st, NULL);
	if (rc != SQLITE_OK)
		return mf_db_fail(m->db, m->path, rc, "reading stripes");
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct row r = { .st = st };

		col_int(&r, 0, out->nstripes, out->nstripes);
		if (out->nstripes == KV_MAX_STRIPES)
			col_bad(&r, 0, "is beyond the %u-stripe limit", KV_MAX_STRIPES);
		col_text(&r, 1, out->stripes[out->nstripes], sizeof(out->stripes[0]), true);
		if (!r.bad && resolve_stripe(m->path, out->stripes[out->nstripes],
					     sizeof(out->stripes[0])) < 0)
			col_bad(&r, 1, "is too long once resolved against %s", m->path);
		if (r.bad) {
			rc = mf_corrupt(err, errlen, "table stripes, id %lld: column %s %s "
				     "(ids must run 0..n-1)", sqlite3_column_int64(st, 0),
				     r.bad, r.why);
			goto out;
		}
		out->nstripes++;
	}
	if (rc != SQLITE_DONE)
		rc = mf_db_fail(m->db, m->path, rc, "reading stripes");
	else if (out->nstripes == 0)
		rc = mf_corrupt(err, errlen, "table stripes is empty");
	else
		rc = 0;
out:
	sqlite3_finalize(st);
	return rc;
}

static int read_meta(struct kv_manifest *m, struct kv_store_meta *out,
		     char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int64_t seg, cap, created;
	size_t n;
	int rc;

	memset(out, 0, sizeof(*out));
	if ((rc = mf_meta_int(m->db, m->path, "segment_size", KV_ALIGN, INT64_MAX, &seg,
			   err, errlen)) ||
	    (rc = mf_meta_int(m->db, m->path, "capacity", 0, INT64_MAX, &cap, err, errlen)) ||
	    (rc = mf_meta_int(m->db, m->path, "created_ns", INT64_MIN, INT64_MAX, &created,
			   err, errlen)))
		return rc;
	if (seg % KV_ALIGN)
		return mf_corrupt(err, errlen, "meta: segment_size %" PRId64 " is not %u-aligned",
			       seg, KV_ALIGN);
	rc = mf_query_row(m->db, m->path, "SELECT value FROM meta WHERE key = 'uuid'", NULL, &st);
	if (rc < 0)
		return rc;
	if (rc == 0)
		return mf_corrupt(err, errlen, "meta: uuid is missing");
	n = (size_t)sqlite3_column_bytes(st, 0);
	if (sqlite3_column_type(st, 0) != SQLITE_TEXT || n == 0 || n >= sizeof(out->uuid))
		rc = mf_corrupt(err, errlen, "meta: uuid is not a text of 1..%zu bytes",
			     sizeof(out->uuid) - 1);
	else
		memcpy(out->uuid, sqlite3_column_text(st, 0), n);
	sqlite3_finalize(st);
	if (rc < 0)
		return rc;
	out->segment_size = (uint64_t)seg;
	out->capacity = (uint64_t)cap;
	out->created_ns = created;
	return read_stripes(m, out, err, errlen);
}

int kv_manifest_meta(struct kv_manifest *m, struct kv_store_meta *out)
{
	char err[512] = "";
	int rc = read_meta(m, out, err, sizeof(err));

	if (rc == KV_ERR_CORRUPT)
		kv_log(KV_LOG_ERR, "manifest %s is damaged: %s", m->path, err);
	return rc;
}

/* ---- load and check ---- */

/* Run fn inside a read transaction (one snapshot) unless one is open. */
static int with_snapshot(struct kv_manifest *m, int (*fn)(struct kv_manifest *m, void *a),
			 void *a)
{
	bool own = !m->in_txn;
	int rc;

	if (own && (rc = mf_exec(m->db, m->path, "BEGIN", "starting a read")))
		return rc;
	rc = fn(m, a);
	if (own)
		mf_exec(m->db, m->path, rc ? "ROLLBACK" : "COMMIT", "ending a read");
	return rc;
}

struct load_args {
	const struct kv_manifest_visitor *v;
	void *arg;
	char err[512];
};

static int load_fn(struct kv_manifest *m, void *a)
{
	struct load_args *la = a;

	return load_rows(m, la->v, la->arg, KV_CHECK_ALL, NULL, la->err, sizeof(la->err));
}

int kv_manifest_load(struct kv_manifest *m, const struct kv_manifest_visitor *v,
		     void *arg)
{
	struct load_args la = { .v = v, .arg = arg };
	int rc = with_snapshot(m, load_fn, &la);

	if (rc == KV_ERR_CORRUPT && la.err[0])
		kv_log(KV_LOG_ERR, "manifest %s is damaged: %s", m->path, la.err);
	return rc;
}

struct check_args {
	char *msg;
	size_t len;
	struct kv_manifest_visitor v;   /* check_rows_fn's */
	void *arg;
	enum kv_check_part part;
	struct kv_check_sums *sums;
};

static int check_integrity(struct kv_manifest *m, struct check_args *c)
{
	sqlite3_stmt *st;
	const char *s;
	int rc;

	rc = mf_query_row(m->db, m->path, "PRAGMA integrity_check", NULL, &st);
	if (rc <= 0)
		return rc < 0 ? rc : -EIO;
	s = (const char *)sqlite3_column_text(st, 0);
	if (!s || strcmp(s, "ok") != 0)
		rc = mf_corrupt(c->msg, c->len, "integrity_check: %s", s ? s : "?");
	else
		rc = 0;
	sqlite3_finalize(st);
	return rc;
}

static int check_refs(struct kv_manifest *m, struct check_args *c)
{
	sqlite3_stmt *st;
	int rc;

	rc = mf_query_row(m->db, m->path, "PRAGMA foreign_key_check", NULL, &st);
	if (rc < 0)
		return rc;
	if (rc == 1) {
		rc = mf_corrupt(c->msg, c->len, "table %s, row %lld refers to a missing %s row",
			     mf_col_str(st, 0), sqlite3_column_int64(st, 1), mf_col_str(st, 2));
		sqlite3_finalize(st);
		return rc;
	}
	rc = mf_query_row(m->db, m->path, "SELECT p.ino, p.extent_id FROM pages AS p WHERE "
		       "NOT EXISTS (SELECT 1 FROM extents AS e WHERE e.id = p.extent_id) "
		       "LIMIT 1", NULL, &st);
	if (rc < 0)
		return rc;
	if (rc == 1) {
		rc = mf_corrupt(c->msg, c->len, "table pages, ino %lld: extent %lld is missing",
			     sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1));
		sqlite3_finalize(st);
		return rc;
	}
	rc = mf_query_row(m->db, m->path, "SELECT e.id, e.refcount, (SELECT count(*) FROM "
		       "pages AS p WHERE p.extent_id = e.id) AS n FROM extents AS e "
		       "WHERE e.refcount IS NOT n LIMIT 1", NULL, &st);
	if (rc < 0)
		return rc;
	if (rc == 1) {
		rc = mf_corrupt(c->msg, c->len, "table extents, id %lld: refcount %lld but %lld "
			     "pages refer to it", sqlite3_column_int64(st, 0),
			     sqlite3_column_int64(st, 1), sqlite3_column_int64(st, 2));
		sqlite3_finalize(st);
	}
	return rc;
}

/*
 * Models, layers and pages share one inode space with the root (inode 1):
 * the load refuses two rows of different tables with one number (each
 * table's primary key only keeps its own rows apart), so the check must too.
 */
static int check_inodes(struct kv_manifest *m, struct check_args *c)
{
	sqlite3_stmt *st;
	int rc;

	rc = mf_query_row(m->db, m->path, "SELECT ino, count(*) FROM (SELECT ino FROM "
		       "models UNION ALL SELECT ino FROM layers UNION ALL SELECT ino FROM "
		       "pages) GROUP BY ino HAVING count(*) > 1 OR ino = 1 LIMIT 1", NULL, &st);
	if (rc <= 0)
		return rc;
	rc = mf_corrupt(c->msg, c->len, "inode %lld is held by %lld rows of models, layers "
		     "and pages%s", sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1),
		     sqlite3_column_int64(st, 0) == 1 ? " (and is the root's)" : "");
	sqlite3_finalize(st);
	return rc;
}

/*
 * Overlap within one segment, by footprint (the store frees whole 4 KiB
 * blocks, so sharing one would punch a hole in the neighbour). Sorted by
 * offset, an extent overlaps an earlier one iff it starts before the
 * furthest end seen so far in its segment.
 */
static int check_overlaps(struct kv_manifest *m, struct check_args *c)
{
	static const char sql[] = "SELECT id, stripe, segment, \"offset\", length FROM "
				  "extents ORDER BY stripe, segment, \"offset\", id";
	int64_t stripe = -1, seg = -1, end = 0, end_id = 0;
	sqlite3_stmt *st;
	int rc;

	rc = sqlite3_prepare_v2(m->db, sql, -1, &st, NULL);
	if (rc != SQLITE_OK)
		return mf_db_fail(m->db, m->path, rc, "preparing the overlap check");
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t id = sqlite3_column_int64(st, 0);
		int64_t s = sqlite3_column_int64(st, 1), g = sqlite3_column_int64(st, 2);
		struct kv_extent e = { .offset = (uint64_t)sqlite3_column_int64(st, 3),
				       .length = (uint64_t)sqlite3_column_int64(st, 4) };
		int64_t e_end = (int64_t)(e.offset + kv_extent_footprint(&e));

		if (s != stripe || g != seg) {
			stripe = s;
			seg = g;
			end = 0;
		} else if ((int64_t)e.offset < end) {
			rc = mf_corrupt(c->msg, c->len, "table extents: extents %lld and %lld "
				     "overlap in stripe %lld segment %lld", (long long)end_id,
				     (long long)id, (long long)s, (long long)g);
			goto out;
		}
		if (e_end > end) {
			end = e_end;
			end_id = id;
		}
	}
	rc = rc == SQLITE_DONE ? 0 : mf_db_fail(m->db, m->path, rc, "checking overlaps");
out:
	sqlite3_finalize(st);
	return rc;
}

static int check_fn(struct kv_manifest *m, void *a)
{
	struct check_args *c = a;
	struct kv_store_meta *meta;
	int rc;

	rc = check_integrity(m, c);
	if (rc)
		return rc;
	meta = malloc(sizeof(*meta));
	if (!meta)
		return -ENOMEM;
	rc = read_meta(m, meta, c->msg, c->len);
	free(meta);
	if (rc)
		return rc;
	/* Value ranges of every row, as the daemon's load would see them. */
	rc = load_rows(m, NULL, NULL, KV_CHECK_ALL, NULL, c->msg, c->len);
	if (rc)
		return rc;
	rc = check_refs(m, c);
	if (rc)
		return rc;
	rc = check_inodes(m, c);
	if (rc)
		return rc;
	return check_overlaps(m, c);
}

/* Only the values: read_meta and load_rows of check_fn, handing the rows
 * to the caller's visitor, which checks the page sizes itself. */
static int check_rows_fn(struct kv_manifest *m, void *a)
{
	struct check_args *c = a;
	struct kv_store_meta *meta = malloc(sizeof(*meta));
	int rc;

	if (!meta)
		return -ENOMEM;
	rc = read_meta(m, meta, c->msg, c->len);
	free(meta);
	return rc ? rc : load_rows(m, &c->v, c->arg, c->part, c->sums, c->msg, c->len);
}

/* fn in one snapshot; KV_ERR_CORRUPT logged, any other failure into msg. */
static int run_check(struct kv_manifest *m, int (*fn)(struct kv_manifest *m, void *a),
		     struct check_args *c)
{
	int rc;

	if (c->msg && c->len)
		c->msg[0] = '\0';
	rc = with_snapshot(m, fn, c);
	if (rc == KV_ERR_CORRUPT)
		kv_log(KV_LOG_WARN, "manifest %s: check: %s", m->path, c->msg ? c->msg : "damaged");
	else if (rc < 0 && c->msg && c->len)
		snprintf(c->msg, c->len, "check could not run: %s", kv_strerror(rc));
	return rc;
}

int kv_manifest_check_rows(struct kv_manifest *m, const struct kv_manifest_visitor *v,
			   void *arg, enum kv_check_part part, struct kv_check_sums *sums,
			   char *msg, size_t msglen)
{
	struct check_args c = { .msg = msg, .len = msglen, .arg = arg, .part = part,
				.sums = sums };

	if (v)
		c.v = *v;
	c.v.sizes_checked = true;
	return run_check(m, check_rows_fn, &c);
}

int kv_manifest_check(struct kv_manifest *m, char *msg, size_t msglen)
{
	struct check_args c = { .msg = msg, .len = msglen };

	return run_check(m, check_fn, &c);
}
