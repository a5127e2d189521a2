/*
 * kvfs manifest, offline check side: every SQLite index against its table
 * (for `kvfs fsck`, see check.c).
 *
 * PRAGMA quick_check proves every b-tree page readable and well formed, but
 * not what integrity_check adds: that each index holds exactly one entry per
 * row of its table, with that row's values, and that a UNIQUE index holds
 * no key twice. integrity_check proves it with one index seek per row and
 * index (O(N log N), random reads: 40+ µs a page at 1M pages). Here it is
 * proved in O(N) with sequential scans instead:
 *
 *   - one scan of the table (NOT INDEXED) sums a 64-bit hash of (indexed
 *     values, rowid) per row, for each of its indexes at once;
 *   - one scan of each index alone (INDEXED BY, covering: the table is not
 *     read) sums the same hash over its entries, in key order, where equal
 *     neighbours are a UNIQUE violation.
 *
 * Equal counts and equal sums mean equal multisets of entries, but for a
 * collision of a 64-bit sum (2^-64 per damaged index). Which entry differs
 * is not named (integrity_check names it): the fix is the same either way,
 * rebuild or REINDEX.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>
#include <xxhash.h>

#include "manifest_i.h"

#define IDX_MAX 8              /* indexes on one table (the schema has ≤ 2) */
#define IDX_COLS 8             /* columns in one index (the schema has ≤ 2) */
#define SQL_MAX 1024

struct idx {
	char name[128];
	bool unique;
	int ncol;
	int col[IDX_COLS];         /* positions in the table scan's column list */
	char cols[SQL_MAX / 2];    /* "a, b" as SQL */
	uint64_t rows, sum;        /* from the table */
};

/* Hash of one row's values at the given columns of st, then the rowid:
 * each value as its type and 8 bytes (a text or blob by its own hash). */
static uint64_t entry_hash(sqlite3_stmt *st, const int *col, int ncol, int64_t rowid)
{
	uint8_t buf[IDX_COLS * 9 + 8];
	size_t n = 0;

	for (int i = 0; i < ncol; i++) {
		int c = col[i], t = sqlite3_column_type(st, c);
		uint64_t v = 0;
		double d;

		switch (t) {
		case SQLITE_INTEGER:
			v = (uint64_t)sqlite3_column_int64(st, c);
			break;
		case SQLITE_FLOAT:
			d = sqlite3_column_double(st, c);
			memcpy(&v, &d, sizeof(v));
			break;
		case SQLITE_NULL:
			break;
		default: {
			const void *p = t == SQLITE_TEXT ? (const void *)sqlite3_column_text(st, c)
							 : sqlite3_column_blob(st, c);
			int len = sqlite3_column_bytes(st, c);

			v = XXH3_64bits(p, p ? (size_t)len : 0);
		}
		}
		buf[n++] = (uint8_t)t;
		memcpy(buf + n, &v, sizeof(v));
		n += sizeof(v);
	}
	memcpy(buf + n, &rowid, sizeof(rowid));
	n += sizeof(rowid);
	return XXH3_64bits(buf, n);
}

/* Do columns [0, n) of a and b hold equal keys (NULLs never equal, as
 * SQLite's UNIQUE has it)? b is the previous row, kept as values. */
static bool same_key(sqlite3_stmt *st, sqlite3_value **prev, int n)
{
	for (int i = 0; i < n; i++) {
		sqlite3_value *a = sqlite3_column_value(st, i), *b = prev[i];
		int t = sqlite3_value_type(a);

		if (!b || t == SQLITE_NULL || t != sqlite3_value_type(b))
			return false;
		if (t == SQLITE_INTEGER) {
			if (sqlite3_value_int64(a) != sqlite3_value_int64(b))
				return false;
		} else if (t == SQLITE_FLOAT) {
			if (sqlite3_value_double(a) != sqlite3_value_double(b))
				return false;
		} else {
			int la = sqlite3_value_bytes(a), lb = sqlite3_value_bytes(b);
			const void *pa = t == SQLITE_TEXT ? (const void *)sqlite3_value_text(a)
							  : sqlite3_value_blob(a);
			const void *pb = t == SQLITE_TEXT ? (const void *)sqlite3_value_text(b)
							  : sqlite3_value_blob(b);

			if (la != lb || (la && memcmp(pa, pb, (size_t)la) != 0))
				return false;
		}
	}
	return true;
}

static int prepare(struct kv_manifest *m, const char *sql, sqlite3_stmt **st)
{
	int rc = sqlite3_prepare_v2(m->db, sql, -1, st, NULL);

	return rc == SQLITE_OK ? 0 : mf_db_fail(m->db, m->path, rc, "preparing \"%s\"", sql);
}

/* The indexes of table and their columns; the table scan's column list
 * (rowid first) into tcols. */
static int list_indexes(struct kv_manifest *m, const char *table, struct idx *ix, int *nix,
			char *tcols, size_t tlen)
{
	char sql[SQL_MAX], names[IDX_MAX * IDX_COLS][64];
	sqlite3_stmt *st, *ci;
	int rc, nnames = 0;

	*nix = 0;
	snprintf(tcols, tlen, "rowid");
	snprintf(sql, sizeof(sql), "SELECT name, \"unique\" FROM pragma_index_list('%s')", table);
	if ((rc = prepare(m, sql, &st)))
		return rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW && *nix < IDX_MAX) {
		struct idx *x = &ix[*nix];

		memset(x, 0, sizeof(*x));
		snprintf(x->name, sizeof(x->name), "%s", mf_col_str(st, 0));
		x->unique = sqlite3_column_int(st, 1) != 0;
		snprintf(sql, sizeof(sql), "SELECT name FROM pragma_index_info('%s') ORDER BY seqno",
			 x->name);
		if ((rc = prepare(m, sql, &ci)))
			break;
		while ((rc = sqlite3_step(ci)) == SQLITE_ROW && x->ncol < IDX_COLS) {
			const char *c = mf_col_str(ci, 0);
			int k;

			for (k = 0; k < nnames && strcmp(names[k], c) != 0; k++)
				;
			if (k == nnames) {
				snprintf(names[nnames++], sizeof(names[0]), "%s", c);
				snprintf(tcols + strlen(tcols), tlen - strlen(tcols), ", \"%s\"", c);
			}
			x->col[x->ncol++] = k + 1;   /* after the rowid */
			snprintf(x->cols + strlen(x->cols), sizeof(x->cols) - strlen(x->cols),
				 "%s\"%s\"", x->ncol > 1 ? ", " : "", c);
		}
		sqlite3_finalize(ci);
		if (rc != SQLITE_DONE) {
			rc = mf_db_fail(m->db, m->path, rc, "reading the columns of index %s", x->name);
			break;
		}
		/* An expression index names no column: nothing here to compare. */
		if (x->ncol > 0)
			(*nix)++;
		rc = SQLITE_ROW;
	}
	if (rc == SQLITE_DONE || rc == SQLITE_ROW)
		rc = 0;
	else if (rc > 0)
		rc = mf_db_fail(m->db, m->path, rc, "listing the indexes of %s", table);
	sqlite3_finalize(st);
	return rc;
}

/* One scan of the table: count and sum for every index at once. */
static int scan_table(struct kv_manifest *m, const char *table, const char *tcols,
		      struct idx *ix, int nix)
{
	char sql[SQL_MAX];
	sqlite3_stmt *st;
	int rc;

	snprintf(sql, sizeof(sql), "SELECT %s FROM \"%s\" NOT INDEXED", tcols, table);
	if ((rc = prepare(m, sql, &st)))
		return rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t rowid = sqlite3_column_int64(st, 0);

		for (int i = 0; i < nix; i++) {
			ix[i].rows++;
			ix[i].sum += entry_hash(st, ix[i].col, ix[i].ncol, rowid);
		}
	}
	rc = rc == SQLITE_DONE ? 0 : mf_db_fail(m->db, m->path, rc, "scanning table %s", table);
	sqlite3_finalize(st);
	return rc;
}

/* One scan of the index alone; reports what differs. Returns problems found. */
static int scan_index(struct kv_manifest *m, const char *table, struct idx *x,
		      kv_check_report_fn *report, void *arg)
{
	char sql[SQL_MAX], line[512];
	sqlite3_value *prev[IDX_COLS] = { 0 };
	int col[IDX_COLS], rc, problems = 0;
	uint64_t n = 0, sum = 0, dups = 0;
	sqlite3_stmt *st;

	snprintf(sql, sizeof(sql), "SELECT %s, rowid FROM \"%s\" INDEXED BY \"%s\" ORDER BY %s",
		 x->cols, table, x->name, x->cols);
	if ((rc = prepare(m, sql, &st)))
		return rc;
	for (int i = 0; i < x->ncol; i++)
		col[i] = i;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		n++;
		sum += entry_hash(st, col, x->ncol, sqlite3_column_int64(st, x->ncol));
		if (!x->unique)
			continue;
		if (same_key(st, prev, x->ncol))
			dups++;
		for (int i = 0; i < x->ncol; i++) {
			sqlite3_value_free(prev[i]);
			prev[i] = sqlite3_value_dup(sqlite3_column_value(st, i));
			if (!prev[i]) {
				rc = -ENOMEM;
				goto out;
			}
		}
	}
	rc = rc == SQLITE_DONE ? 0 : mf_db_fail(m->db, m->path, rc, "scanning index %s", x->name);
	if (rc)
		goto out;
	if (n != x->rows || sum != x->sum) {
		snprintf(line, sizeof(line), "manifest: integrity: index %s does not match table "
			 "%s (%" PRIu64 " entries for %" PRIu64 " rows%s): queries through it "
			 "would miss or invent rows; `kvfs fsck --rebuild` makes the manifest "
			 "anew", x->name, table, n, x->rows,
			 n == x->rows ? ", some of them with other values" : "");
		report(arg, line);
		problems++;
	}
	if (dups) {
		snprintf(line, sizeof(line), "manifest: integrity: UNIQUE index %s of table %s "
			 "holds %" PRIu64 " key(s) twice", x->name, table, dups);
		report(arg, line);
		problems++;
	}
out:
	for (int i = 0; i < x->ncol; i++)
		sqlite3_value_free(prev[i]);
	sqlite3_finalize(st);
	return rc < 0 ? rc : problems;
}

int mf_check_indexes(struct kv_manifest *m, kv_check_report_fn *report, void *arg)
{
	static const char *const tables[] = { "meta", "stripes", "models", "layers",
					      "extents", "pages" };
	char tcols[SQL_MAX];
	struct idx *ix = calloc(IDX_MAX, sizeof(*ix));
	int rc = 0, problems = 0, nix;

	if (!ix)
		return -ENOMEM;
	for (size_t t = 0; rc >= 0 && t < sizeof(tables) / sizeof(tables[0]); t++) {
		rc = list_indexes(m, tables[t], ix, &nix, tcols, sizeof(tcols));
		if (rc == 0 && nix)
			rc = scan_table(m, tables[t], tcols, ix, nix);
		for (int i = 0; rc >= 0 && i < nix; i++) {
			rc = scan_index(m, tables[t], &ix[i], report, arg);
			if (rc > 0)
				problems += rc;
		}
	}
	free(ix);
	return rc < 0 ? rc : problems;
}
