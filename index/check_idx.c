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
 *
 * The table side of extents and pages, the two large tables, needs no scan
 * of its own in fsck: its row pass (kv_manifest_check_rows) reads every row
 * of both anyway, and sums them as it goes (kv_check_sums_row). That was a
 * quarter of fsck's CPU time at 1M pages. The index side scans run on a
 * connection of their own meanwhile, and kv_check_sums_compare scans only
 * the tables the row pass did not sum in full.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>
#include <xxhash.h>

#include "htab.h"
#include "manifest_i.h"

#define IDX_MAX 8              /* indexes on one table (the schema has ≤ 2) */
#define IDX_COLS 8             /* columns in one index (the schema has ≤ 2) */
#define SQL_MAX 1024

struct idx {
	char name[128];
	bool unique;
	int ncol;
	int col[IDX_COLS];         /* positions in the table scan's column list */
	char colname[IDX_COLS][64];
	char cols[SQL_MAX / 2];    /* "a, b" as SQL */
	uint64_t rows, sum;        /* from the table */
	uint64_t n, isum, dups;    /* from the index */
	bool scanned;              /* n, isum and dups are its scan's */
};

static const char *const tables[] = { "meta", "stripes", "models", "layers", "extents",
				      "pages" };
#define NTABLES (sizeof(tables) / sizeof(tables[0]))

struct check_table {
	const char *name;
	int nix;
	struct idx ix[IDX_MAX];
	char tcols[SQL_MAX];       /* the table scan's column list, rowid first */
	bool summed;               /* rows and sum of every index are the table's, whole */
	int row_col[IDX_MAX][IDX_COLS];   /* bound: positions in the row pass's columns */
};

struct kv_check_sums {
	struct check_table t[NTABLES];
};

/* A value as its type and 8 bytes (a text or blob by its XXH3). */
static uint64_t value_word(sqlite3_value *v, int t)
{
	uint64_t w = 0;
	double d;

	switch (t) {
	case SQLITE_INTEGER:
		return (uint64_t)sqlite3_value_int64(v);
	case SQLITE_FLOAT:
		d = sqlite3_value_double(v);
		memcpy(&w, &d, sizeof(w));
		return w;
	case SQLITE_NULL:
		return 0;
	default: {
		const void *p = t == SQLITE_TEXT ? (const void *)sqlite3_value_text(v)
						 : sqlite3_value_blob(v);
		int len = sqlite3_value_bytes(v);

		return XXH3_64bits(p, p ? (size_t)len : 0);
	}
	}
}

/*
 * Hash of one entry: its values (cv[0..ncol), each fetched once from the
 * statement) and then its rowid, chained through htab_mix64 (fmix64) with
 * each value's type. Values are read through sqlite3_value_*, not
 * sqlite3_column_*: each column call repeats the statement's checks and
 * error bookkeeping, and a text column was asked three times (type, bytes,
 * text). A second XXH3 over a buffer of the words cost as much again as
 * the chain.
 */
static uint64_t entry_hash(sqlite3_value *const *cv, int ncol, int64_t rowid)
{
	uint64_t h = 0x9e3779b97f4a7c15ull;

	for (int i = 0; i < ncol; i++) {
		int t = sqlite3_value_type(cv[i]);

		h = htab_mix64(h ^ value_word(cv[i], t)) + (uint64_t)t * 0x9e3779b97f4a7c15ull;
	}
	return htab_mix64(h ^ (uint64_t)rowid);
}

/* The values of st at columns col[0..ncol) into cv. */
static void row_values(sqlite3_stmt *st, const int *col, int ncol, sqlite3_value **cv)
{
	for (int i = 0; i < ncol; i++)
		cv[i] = sqlite3_column_value(st, col[i]);
}

/*
 * The previous entry's key in a UNIQUE index scan, kept as plain values in
 * buffers reused from row to row: a copy with sqlite3_value_dup was a malloc
 * and a free per row and column, half the time of the scan.
 */
struct key_val {
	int type;                     /* SQLITE_*, 0: no previous entry */
	int64_t i;
	double d;
	void *buf;                    /* text or blob bytes */
	size_t len, cap;
};

/* Are the values cv[0..n) equal to prev (NULLs never equal, as SQLite's
 * UNIQUE has it)? */
static bool same_key(sqlite3_value *const *cv, const struct key_val *prev, int n)
{
	for (int i = 0; i < n; i++) {
		int t = sqlite3_value_type(cv[i]);
		const void *p;
		size_t len;

		if (t == SQLITE_NULL || t != prev[i].type)
			return false;
		if (t == SQLITE_INTEGER) {
			if (sqlite3_value_int64(cv[i]) != prev[i].i)
				return false;
			continue;
		}
		if (t == SQLITE_FLOAT) {
			if (sqlite3_value_double(cv[i]) != prev[i].d)
				return false;
			continue;
		}
		p = t == SQLITE_TEXT ? (const void *)sqlite3_value_text(cv[i])
				     : sqlite3_value_blob(cv[i]);
		len = (size_t)sqlite3_value_bytes(cv[i]);
		if (len != prev[i].len || (len && memcmp(p, prev[i].buf, len) != 0))
			return false;
	}
	return true;
}

/* Keep the values cv[0..n) as the previous key. 0 or -ENOMEM. */
static int keep_key(sqlite3_value *const *cv, struct key_val *prev, int n)
{
	for (int i = 0; i < n; i++) {
		struct key_val *k = &prev[i];
		const void *p;

		k->type = sqlite3_value_type(cv[i]);
		if (k->type == SQLITE_INTEGER)
			k->i = sqlite3_value_int64(cv[i]);
		else if (k->type == SQLITE_FLOAT)
			k->d = sqlite3_value_double(cv[i]);
		if (k->type != SQLITE_TEXT && k->type != SQLITE_BLOB)
			continue;
		p = k->type == SQLITE_TEXT ? (const void *)sqlite3_value_text(cv[i])
					   : sqlite3_value_blob(cv[i]);
		k->len = (size_t)sqlite3_value_bytes(cv[i]);
		if (k->len > k->cap) {
			void *nb = realloc(k->buf, k->len);

			if (!nb)
				return -ENOMEM;
			k->buf = nb;
			k->cap = k->len;
		}
		if (k->len)
			memcpy(k->buf, p, k->len);
	}
	return 0;
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
			snprintf(x->colname[x->ncol], sizeof(x->colname[0]), "%s", c);
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
		sqlite3_value *cv[IDX_COLS];

		for (int i = 0; i < nix; i++) {
			row_values(st, ix[i].col, ix[i].ncol, cv);
			ix[i].rows++;
			ix[i].sum += entry_hash(cv, ix[i].ncol, rowid);
		}
	}
	rc = rc == SQLITE_DONE ? 0 : mf_db_fail(m->db, m->path, rc, "scanning table %s", table);
	sqlite3_finalize(st);
	return rc;
}

/* One scan of the index alone: its count and sum, and its keys held twice
 * if it is UNIQUE, into x. */
static int scan_index(struct kv_manifest *m, const char *table, struct idx *x)
{
	char sql[2 * SQL_MAX];     /* the column list twice, and the names */
	struct key_val prev[IDX_COLS] = { 0 };
	sqlite3_value *cv[IDX_COLS + 1];
	int col[IDX_COLS + 1], rc;
	sqlite3_stmt *st;

	x->n = x->isum = x->dups = 0;
	snprintf(sql, sizeof(sql), "SELECT %s, rowid FROM \"%s\" INDEXED BY \"%s\" ORDER BY %s",
		 x->cols, table, x->name, x->cols);
	if ((rc = prepare(m, sql, &st)))
		return rc;
	for (int i = 0; i <= x->ncol; i++)
		col[i] = i;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		row_values(st, col, x->ncol + 1, cv);   /* the key, then the rowid */
		x->n++;
		x->isum += entry_hash(cv, x->ncol, sqlite3_value_int64(cv[x->ncol]));
		if (!x->unique)
			continue;
		if (same_key(cv, prev, x->ncol))
			x->dups++;
		if ((rc = keep_key(cv, prev, x->ncol)))
			goto out;
	}
	rc = rc == SQLITE_DONE ? 0 : mf_db_fail(m->db, m->path, rc, "scanning index %s", x->name);
	x->scanned = rc == 0;
out:
	for (int i = 0; i < x->ncol; i++)
		free(prev[i].buf);
	sqlite3_finalize(st);
	return rc;
}

/* Lines for what differs between x and its table; how many. */
static int compare_index(const char *table, const struct idx *x,
			 kv_check_report_fn *report, void *arg)
{
	char line[512];
	int problems = 0;

	if (x->n != x->rows || x->isum != x->sum) {
		snprintf(line, sizeof(line), "manifest: integrity: index %s does not match table "
			 "%s (%" PRIu64 " entries for %" PRIu64 " rows%s): queries through it "
			 "would miss or invent rows; `kvfs fsck --rebuild` makes the manifest "
			 "anew", x->name, table, x->n, x->rows,
			 x->n == x->rows ? ", some of them with other values" : "");
		report(arg, line);
		problems++;
	}
	if (x->dups) {
		snprintf(line, sizeof(line), "manifest: integrity: UNIQUE index %s of table %s "
			 "holds %" PRIu64 " key(s) twice", x->name, table, x->dups);
		report(arg, line);
		problems++;
	}
	return problems;
}

int kv_check_sums_new(struct kv_manifest *m, struct kv_check_sums **out)
{
	struct kv_check_sums *s = calloc(1, sizeof(*s));
	int rc = 0;

	*out = NULL;
	if (!s)
		return -ENOMEM;
	for (size_t t = 0; rc == 0 && t < NTABLES; t++) {
		s->t[t].name = tables[t];
		rc = list_indexes(m, tables[t], s->t[t].ix, &s->t[t].nix, s->t[t].tcols,
				  sizeof(s->t[t].tcols));
	}
	if (rc) {
		free(s);
		return rc;
	}
	*out = s;
	return 0;
}

void kv_check_sums_free(struct kv_check_sums *s)
{
	free(s);
}

int kv_check_sums_scan_indexes(struct kv_manifest *m, struct kv_check_sums *s)
{
	int rc = 0;

	for (size_t t = 0; rc == 0 && t < NTABLES; t++)
		for (int i = 0; rc == 0 && i < s->t[t].nix; i++)
			rc = scan_index(m, s->t[t].name, &s->t[t].ix[i]);
	return rc;
}

struct check_table *mf_sums_bind(struct kv_check_sums *s, const char *table,
				 sqlite3_stmt *st)
{
	struct check_table *ct = NULL;
	int ncols = sqlite3_column_count(st);

	for (size_t t = 0; table && t < NTABLES; t++)
		if (strcmp(s->t[t].name, table) == 0)
			ct = &s->t[t];
	if (!ct)
		return NULL;
	ct->summed = false;
	for (int i = 0; i < ct->nix; i++) {
		struct idx *x = &ct->ix[i];

		x->rows = x->sum = 0;
		for (int c = 0; c < x->ncol; c++) {
			int k;

			for (k = 1; k < ncols; k++)
				if (sqlite3_column_name(st, k) &&
				    strcmp(sqlite3_column_name(st, k), x->colname[c]) == 0)
					break;
			if (k == ncols)
				return NULL;   /* not read by this pass: the table is scanned */
			ct->row_col[i][c] = k;
		}
	}
	return ct;
}

void mf_sums_row(struct check_table *ct, sqlite3_stmt *st)
{
	int64_t rowid = sqlite3_column_int64(st, 0);
	sqlite3_value *cv[IDX_COLS];

	for (int i = 0; i < ct->nix; i++) {
		row_values(st, ct->row_col[i], ct->ix[i].ncol, cv);
		ct->ix[i].rows++;
		ct->ix[i].sum += entry_hash(cv, ct->ix[i].ncol, rowid);
	}
}

void mf_sums_done(struct check_table *ct)
{
	ct->summed = true;
}

int kv_check_sums_compare(struct kv_manifest *m, struct kv_check_sums *s,
			  kv_check_report_fn *report, void *arg)
{
	int rc = 0, problems = 0;

	for (size_t t = 0; rc >= 0 && t < NTABLES; t++) {
		struct check_table *ct = &s->t[t];

		if (ct->nix == 0)
			continue;
		if (!ct->summed) {
			for (int i = 0; i < ct->nix; i++)
				ct->ix[i].rows = ct->ix[i].sum = 0;
			rc = scan_table(m, ct->name, ct->tcols, ct->ix, ct->nix);
			if (rc < 0)
				break;
			ct->summed = true;
		}
		for (int i = 0; i < ct->nix; i++) {
			if (!ct->ix[i].scanned) {
				rc = scan_index(m, ct->name, &ct->ix[i]);
				if (rc < 0)
					break;
			}
			problems += compare_index(ct->name, &ct->ix[i], report, arg);
		}
	}
	return rc < 0 ? rc : problems;
}

int mf_check_indexes(struct kv_manifest *m, kv_check_report_fn *report, void *arg)
{
	struct kv_check_sums *s;
	int rc = kv_check_sums_new(m, &s);

	if (rc)
		return rc;
	rc = kv_check_sums_compare(m, s, report, arg);   /* scans both sides */
	kv_check_sums_free(s);
	return rc;
}
