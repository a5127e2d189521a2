/*
 * kvfs manifest, offline check side (for `kvfs fsck`, never the daemon).
 *
 * kv_manifest_load stops at the first bad row: right for a mount, which must
 * refuse, but fsck wants to see every problem and repair what it can. So the
 * walks here hand out raw values (possibly out of range, a hash of the wrong
 * length, a page whose layer is gone) and leave judging them to the caller;
 * only SQLite-level problems (quick_check, index against table, the layers'
 * foreign key, meta identity) are judged here, because they need the database handle. The
 * repair helper sets a refcount to an absolute value, which the committer
 * never needs (it only moves counts by a delta that can never reach 0).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "manifest_i.h"

#define INTEGRITY_MAX_LINES 100   /* integrity_check stops after this many */

static void reportf(kv_check_report_fn *report, void *arg, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void reportf(kv_check_report_fn *report, void *arg, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	report(arg, line);
}

struct db_check {
	kv_check_report_fn *report;
	void *arg;
	int problems;
};

static int integrity_row(sqlite3_stmt *st, void *a)
{
	struct db_check *c = a;
	const char *s = mf_col_str(st, 0);

	if (strcmp(s, "ok") == 0)
		return 0;
	reportf(c->report, c->arg, "manifest: quick_check: %s", s);
	c->problems++;
	return 0;
}

/*
 * Pages naming a missing extent are left out: the caller reports them as
 * dangling rows (with the page's path) and can repair them; every other
 * missing parent (a layer's model, a page's layer) is reported here.
 */
static int fk_row(sqlite3_stmt *st, void *a)
{
	struct db_check *c = a;
	const char *table = mf_col_str(st, 0), *parent = mf_col_str(st, 2);

	if (strcmp(table, "pages") == 0 && strcmp(parent, "extents") == 0)
		return 0;
	reportf(c->report, c->arg, "manifest: table %s, row %lld: refers to a %s row that "
		"does not exist (foreign key)", table, sqlite3_column_int64(st, 1), parent);
	c->problems++;
	return 0;
}

/* A model or layer row whose identity check fails: every page under it
 * would be served under a name it was not written with. Not repaired in
 * place: the journal holds the row as it was (fsck --rebuild). */
static int ident_row(sqlite3_stmt *st, void *a)
{
	struct db_check *c = a;

	reportf(c->report, c->arg, "manifest: %s %lld '%s': its identity check fails "
		"(name, number, parent or inode changed outside kvfs); `kvfs fsck "
		"--rebuild` restores it from the journal", mf_col_str(st, 0),
		sqlite3_column_int64(st, 1), mf_col_str(st, 2));
	c->problems++;
	return 0;
}

/* format, schema_version and user_version: what open accepted, spelled out. */
static int check_versions(struct kv_manifest *m, struct db_check *c)
{
	sqlite3_stmt *st;
	int64_t ver = -1, uver = -1;
	int rc;

	rc = mf_query_row(m->db, m->path, "SELECT value FROM meta WHERE key = 'schema_version'",
			  NULL, &st);
	if (rc < 0)
		return rc;
	if (rc == 1) {
		if (sqlite3_column_type(st, 0) == SQLITE_INTEGER)
			ver = sqlite3_column_int64(st, 0);
		sqlite3_finalize(st);
	}
	rc = mf_query_row(m->db, m->path, "PRAGMA user_version", NULL, &st);
	if (rc < 0)
		return rc;
	if (rc == 1) {
		uver = sqlite3_column_int64(st, 0);
		sqlite3_finalize(st);
	}
	if (ver != KV_SCHEMA_VERSION || uver != KV_SCHEMA_VERSION) {
		reportf(c->report, c->arg, "manifest: meta schema_version %" PRId64 " and "
			"user_version %" PRId64 " should both be %d", ver, uver,
			KV_SCHEMA_VERSION);
		c->problems++;
	}
	return 0;
}

int kv_manifest_check_btrees(struct kv_manifest *m, kv_check_report_fn *report, void *arg)
{
	struct db_check c = { .report = report, .arg = arg };
	int rc = mf_each_row(m, "PRAGMA quick_check(" STR(INTEGRITY_MAX_LINES) ")",
			  integrity_row, &c);

	return rc ? rc : c.problems;
}

int kv_manifest_check_index_sums(struct kv_manifest *m, kv_check_report_fn *report,
				 void *arg)
{
	return mf_check_indexes(m, report, arg);
}

int kv_manifest_check_refs(struct kv_manifest *m, kv_check_report_fn *report, void *arg)
{
	struct db_check c = { .report = report, .arg = arg };
	int rc;

	/* Only the layers' foreign key here: a page's layer and extent are
	 * checked by the page walk (kv_manifest_walk_pages), without a b-tree
	 * seek per page. */
	rc = mf_each_row(m, "PRAGMA foreign_key_check(layers)", fk_row, &c);
	if (rc)
		return rc;
	rc = check_versions(m, &c);
	if (rc == 0)
		rc = mf_each_row(m, "SELECT 'model', ino, name FROM models WHERE ident IS NOT "
			      "kvfs_ident_model(ino, name, layers, kv_heads, head_dim, "
			      "page_tokens, dtype) UNION ALL SELECT 'layer', ino, name FROM "
			      "layers WHERE ident IS NOT kvfs_ident_layer(ino, model_ino, "
			      "layer, name)", ident_row, &c);
	return rc ? rc : c.problems;
}

int kv_manifest_check_db(struct kv_manifest *m, kv_check_report_fn *report, void *arg)
{
	int problems, rc;

	/* quick_check and the index scans together prove what integrity_check
	 * does, in O(N) (check_idx.c). Indexes on damaged b-tree pages are not
	 * scanned: the damage is reported, and a scan would only stop at it. */
	problems = kv_manifest_check_btrees(m, report, arg);
	if (problems < 0)
		return problems;
	if (problems == 0) {
		rc = kv_manifest_check_index_sums(m, report, arg);
		if (rc < 0)
			return rc;
		problems += rc;
	}
	rc = kv_manifest_check_refs(m, report, arg);
	return rc < 0 ? rc : problems + rc;
}

/* ---- raw walks ---- */

struct walk {
	int (*extent)(void *arg, const struct kv_check_extent *e);
	int (*page)(void *arg, const struct kv_check_page *p);
	void *arg;
};

static int extent_row(sqlite3_stmt *st, void *a)
{
	struct walk *w = a;
	struct kv_check_extent e;

	memset(&e, 0, sizeof(e));
	e.id = sqlite3_column_int64(st, 0);
	e.stripe = sqlite3_column_int64(st, 1);
	e.segment = sqlite3_column_int64(st, 2);
	e.offset = sqlite3_column_int64(st, 3);
	e.length = sqlite3_column_int64(st, 4);
	e.refcount = sqlite3_column_int64(st, 6);
	/* A text or real in an integer column reads as some number: say so. */
	e.ints_ok = true;
	for (int col = 0; col <= 6; col++)
		if (col != 5 && sqlite3_column_type(st, col) != SQLITE_INTEGER)
			e.ints_ok = false;
	e.hash_ok = sqlite3_column_type(st, 5) == SQLITE_BLOB &&
		    sqlite3_column_bytes(st, 5) == KV_HASH_LEN;
	if (e.hash_ok)
		memcpy(e.hash, sqlite3_column_blob(st, 5), KV_HASH_LEN);
	return w->extent(w->arg, &e);
}

int kv_manifest_walk_extents(struct kv_manifest *m,
			     int (*fn)(void *arg, const struct kv_check_extent *e),
			     void *arg)
{
	struct walk w = { .extent = fn, .arg = arg };

	return mf_each_row(m, "SELECT id, stripe, segment, \"offset\", length, hash, refcount "
			"FROM extents ORDER BY id", extent_row, &w);
}

/* A growing list of inode numbers, one per row (the first column). */
struct inos {
	int64_t *ino;
	size_t n, cap;
};

static int ino_row(sqlite3_stmt *st, void *a)
{
	struct inos *d = a;

	if (d->n == d->cap) {
		int64_t *ni = kv_array_room(d->ino, d->n, &d->cap, sizeof(*ni), 16);

		if (!ni)
			return -ENOMEM;
		d->ino = ni;
	}
	d->ino[d->n++] = sqlite3_column_int64(st, 0);
	return 0;
}

struct page_walk {
	struct walk w;
	struct inos layers;          /* every layer's inode, ascending */
};

static bool has_layer(const struct page_walk *pw, int64_t ino)
{
	size_t lo = 0, hi = pw->layers.n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (pw->layers.ino[mid] == ino)
			return true;
		if (pw->layers.ino[mid] < ino)
			lo = mid + 1;
		else
			hi = mid;
	}
	return false;
}

static int page_row(sqlite3_stmt *st, void *a)
{
	struct page_walk *pw = a;
	struct kv_check_page p;
	int64_t layer = sqlite3_column_int64(st, 4);

	memset(&p, 0, sizeof(p));
	p.ino = sqlite3_column_int64(st, 0);
	p.extent_id = sqlite3_column_int64(st, 1);
	p.size = sqlite3_column_int64(st, 2);
	p.ident_ok = sqlite3_column_int64(st, 5) ==
		     mf_ident_page(p.ino, (uint64_t)layer, mf_col_str(st, 3), p.extent_id,
				   (uint64_t)p.size);
	p.layer_ok = sqlite3_column_type(st, 4) == SQLITE_INTEGER && has_layer(pw, layer);
	return pw->w.page(pw->w.arg, &p);
}

/*
 * The layers' inodes are read first (a few rows), so that the pages are one
 * sequential scan with no join: a join costs a b-tree seek per page.
 */
int kv_manifest_walk_pages(struct kv_manifest *m,
			   int (*fn)(void *arg, const struct kv_check_page *p),
			   void *arg)
{
	struct page_walk pw = { .w = { .page = fn, .arg = arg } };
	int rc;

	rc = mf_each_row(m, "SELECT ino FROM layers ORDER BY ino", ino_row, &pw.layers);
	if (rc == 0)
		rc = mf_each_row(m, "SELECT ino, extent_id, size, name, layer_ino, ident "
			      "FROM pages ORDER BY ino", page_row, &pw);
	free(pw.layers.ino);
	return rc;
}

int kv_manifest_page_path(struct kv_manifest *m, uint64_t ino, char *out, size_t len)
{
	sqlite3_stmt *st;
	int rc;

	snprintf(out, len, "?/?/?");
	rc = sqlite3_prepare_v2(m->db, "SELECT p.name, l.name, mo.name FROM pages AS p "
				"LEFT JOIN layers AS l ON l.ino = p.layer_ino LEFT JOIN models "
				"AS mo ON mo.ino = l.model_ino WHERE p.ino = ?1", -1, &st, NULL);
	if (rc != SQLITE_OK)
		return mf_db_fail(m->db, m->path, rc, "preparing a page's path");
	sqlite3_bind_int64(st, 1, (int64_t)ino);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		/* Missing parents print as "?": the path is for a human to
		 * recognise the page; the missing row is reported on its own. */
		snprintf(out, len, "%s/%s/%s",
			 sqlite3_column_type(st, 2) == SQLITE_NULL ? "?" : mf_col_str(st, 2),
			 sqlite3_column_type(st, 1) == SQLITE_NULL ? "?" : mf_col_str(st, 1),
			 mf_col_str(st, 0));
		rc = 0;
	} else {
		rc = rc == SQLITE_DONE ? -ENOENT :
		     mf_db_fail(m->db, m->path, rc, "reading the path of page %" PRIu64, ino);
	}
	sqlite3_finalize(st);
	return rc;
}

/* ---- repair ---- */

int kv_manifest_set_refcount(struct kv_manifest *m, uint64_t id, uint32_t count)
{
	sqlite3_stmt *st;
	int rc;

	if (count == 0 || id == 0 || id > INT64_MAX) {
		kv_log(KV_LOG_ERR, "manifest %s: refcount %" PRIu32 " for extent %" PRIu64
		       " is invalid (an extent no page uses is deleted instead)",
		       m->path, count, id);
		return -EINVAL;
	}
	rc = sqlite3_prepare_v2(m->db, "UPDATE extents SET refcount = ?2 WHERE id = ?1",
				-1, &st, NULL);
	if (rc != SQLITE_OK)
		return mf_db_fail(m->db, m->path, rc, "preparing a refcount update");
	sqlite3_bind_int64(st, 1, (int64_t)id);
	sqlite3_bind_int64(st, 2, count);
	rc = sqlite3_step(st);
	if (rc != SQLITE_DONE)
		rc = mf_db_fail(m->db, m->path, rc, "setting the refcount of extent %" PRIu64, id);
	else if (sqlite3_changes(m->db) == 0)
		rc = -ENOENT;
	else
		rc = 0;
	sqlite3_finalize(st);
	return rc;
}

/* ---- inode numbers held twice ---- */

/* Give the row(s) of one table holding ino a new number, its children and
 * identity checks following. */
static int renumber(struct kv_manifest *m, const char *table, int64_t ino, int64_t fresh)
{
	static const char *const sql[][2] = {
		{ "models", "UPDATE models SET ino = ?2 WHERE ino = ?1;"
			    "UPDATE layers SET model_ino = ?2 WHERE model_ino = ?1;"
			    "UPDATE models SET ident = kvfs_ident_model(ino, name, layers, "
			    "kv_heads, head_dim, page_tokens, dtype) WHERE ino = ?2;"
			    "UPDATE layers SET ident = kvfs_ident_layer(ino, model_ino, layer, "
			    "name) WHERE model_ino = ?2" },
		{ "layers", "UPDATE layers SET ino = ?2 WHERE ino = ?1;"
			    "UPDATE pages SET layer_ino = ?2 WHERE layer_ino = ?1;"
			    "UPDATE layers SET ident = kvfs_ident_layer(ino, model_ino, layer, "
			    "name) WHERE ino = ?2;"
			    "UPDATE pages SET ident = kvfs_ident_page(ino, layer_ino, name, "
			    "extent_id, size) WHERE layer_ino = ?2" },
		{ "pages", "UPDATE pages SET ino = ?2 WHERE ino = ?1;"
			   "UPDATE pages SET ident = kvfs_ident_page(ino, layer_ino, name, "
			   "extent_id, size) WHERE ino = ?2" },
	};
	const char *tail;
	size_t t;
	int rc = 0;

	for (t = 0; t < 3 && strcmp(sql[t][0], table) != 0; t++)
		;
	for (const char *s = sql[t][1]; rc == 0 && *s; s = tail) {
		sqlite3_stmt *st;

		rc = sqlite3_prepare_v2(m->db, s, -1, &st, &tail);
		if (rc != SQLITE_OK)
			return mf_db_fail(m->db, m->path, rc, "preparing a renumbering");
		sqlite3_bind_int64(st, 1, ino);
		sqlite3_bind_int64(st, 2, fresh);
		rc = sqlite3_step(st);
		rc = rc == SQLITE_DONE ? 0 : mf_db_fail(m->db, m->path, rc, "renumbering %s "
							"inode %" PRId64, table, ino);
		sqlite3_finalize(st);
	}
	return rc;
}

static int has_row(struct kv_manifest *m, const char *table, int64_t ino)
{
	char sql[96];
	sqlite3_stmt *st;
	int rc;

	snprintf(sql, sizeof(sql), "SELECT 1 FROM %s WHERE ino = %" PRId64, table, ino);
	rc = mf_query_row(m->db, m->path, sql, NULL, &st);
	if (rc == 1)
		sqlite3_finalize(st);
	return rc;
}

int kv_manifest_check_inodes(struct kv_manifest *m, bool fix,
			     kv_check_report_fn *report, void *arg)
{
	static const char *const tables[] = { "models", "layers", "pages" };
	struct inos d = { 0 };
	sqlite3_stmt *st;
	int64_t next = 0;
	int rc;

	/* Each table's primary key keeps its own rows apart, so a number held
	 * twice is held by rows of two tables: look up each model's and
	 * layer's in the other tables (a few seeks) rather than group every
	 * page's (a sort of them all). */
	rc = mf_each_row(m, "SELECT ino FROM models AS x WHERE ino = 1 OR EXISTS (SELECT 1 "
		      "FROM layers AS y WHERE y.ino = x.ino) OR EXISTS (SELECT 1 FROM pages "
		      "AS y WHERE y.ino = x.ino) UNION SELECT ino FROM layers AS x WHERE ino "
		      "= 1 OR EXISTS (SELECT 1 FROM pages AS y WHERE y.ino = x.ino) UNION "
		      "SELECT ino FROM pages WHERE ino = 1", ino_row, &d);
	if (rc == 0 && fix && d.n) {
		rc = mf_query_row(m->db, m->path, "SELECT max(ino) FROM (SELECT ino FROM models "
				  "UNION ALL SELECT ino FROM layers UNION ALL SELECT ino FROM "
				  "pages)", NULL, &st);
		if (rc == 1) {
			next = sqlite3_column_int64(st, 0);
			sqlite3_finalize(st);
		}
		/* Children are moved before their renumbered parent is checked. */
		rc = rc < 0 ? rc : mf_exec(m->db, m->path, "BEGIN IMMEDIATE; PRAGMA "
					   "defer_foreign_keys = ON", "starting a renumbering");
	}
	for (size_t i = 0; rc == 0 && i < d.n; i++) {
		bool kept = d.ino[i] == 1;     /* the root's: every row holding it moves */

		for (size_t t = 0; rc == 0 && t < 3; t++) {
			int held = has_row(m, tables[t], d.ino[i]);

			if (held <= 0) {
				rc = held;
				continue;
			}
			if (!kept) {
				kept = true;
				continue;
			}
			reportf(report, arg, "manifest: inode %" PRId64 " is also held by a row "
				"of %s (two daemons on one store?)%s", d.ino[i], tables[t],
				fix ? "; renumbered" : "; --repair gives it a new number");
			if (fix)
				rc = renumber(m, tables[t], d.ino[i], ++next);
		}
	}
	if (fix && d.n)
		rc = mf_exec(m->db, m->path, rc == 0 ? "COMMIT" : "ROLLBACK",
			     "ending the renumbering") ?: rc;
	free(d.ino);
	return rc < 0 ? rc : (int)d.n;
}

int kv_manifest_quick_check(struct kv_manifest *m)
{
	sqlite3_stmt *st;
	int rc, bad = 0;

	rc = sqlite3_prepare_v2(m->db, "PRAGMA quick_check(20)", -1, &st, NULL);
	if (rc != SQLITE_OK)
		return mf_db_fail(m->db, m->path, rc, "preparing quick_check");
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *s = mf_col_str(st, 0);

		if (strcmp(s, "ok") == 0)
			continue;
		kv_log(KV_LOG_ERR, "manifest %s is damaged: quick_check: %s", m->path, s);
		bad++;
	}
	rc = rc == SQLITE_DONE ? 0 : mf_db_fail(m->db, m->path, rc, "running quick_check");
	sqlite3_finalize(st);
	return rc < 0 ? rc : bad ? KV_ERR_CORRUPT : 0;
}
