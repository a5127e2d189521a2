/*
 * Private to index/manifest*.c: the manifest handle, its cached statements,
 * and the SQLite helpers shared by the write side (manifest.c: create, open,
 * transactions, puts and deletes) and the read side (manifest_read.c: meta,
 * validated load, check).
 */
#ifndef KV_MANIFEST_I_H
#define KV_MANIFEST_I_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <pthread.h>
#include <sqlite3.h>

#include "manifest.h"

#define STR_(x) #x
#define STR(x) STR_(x)
#define ATTR_COLS "mode, uid, gid, ctime_ns, mtime_ns, atime_ns"

/* Statements the committer runs, prepared once at open. */
enum stmt {
	ST_BEGIN, ST_COMMIT, ST_ROLLBACK,
	ST_PUT_MODEL, ST_PUT_LAYER, ST_PUT_EXTENT, ST_PUT_PAGE,
	ST_DEL_MODEL, ST_DEL_LAYER, ST_DEL_EXTENT, ST_DEL_PAGE, ST_REF_EXTENT, ST_TOUCH_PAGE,
	ST_SET_JOURNAL_SEQ, ST_SET_EVENT_SEQ, ST_SET_ROOT_ATTR, ST_SET_JOURNAL_AT,
	ST_COUNT
};

/*
 * The store's journal (journal.c), STORE/kvfs.journal: every committed row
 * change, appended and fdatasync'ed before the SQLite transaction commits.
 * Attached by kv_manifest_recover; until then (and while replaying) changes
 * are not recorded.
 */
struct mf_journal {
	int fd;                /* -1: not attached */
	char *path;
	uint64_t end;          /* append offset: end of the last good frame */
	uint64_t seq;          /* seq of the last batch written (or the snapshot) */
	uint64_t snapshot_end; /* size right after the last rewrite */
	uint64_t last_at;      /* where the frame of batch seq starts */
	uint8_t *buf;          /* records of the open transaction */
	size_t len, cap;
	bool nomem;            /* a record could not be buffered: commit fails */
	bool replaying;        /* applying records: do not record them again */
	bool snapshotting;     /* a rewrite's buffer: records rows regardless */
	uint64_t pending_end;  /* end of the written, not yet committed batch */
};

struct mfj_compactor;

struct kv_manifest {
	sqlite3 *db;
	char *path;            /* STORE/kvfs.db, for log lines */
	bool in_txn;           /* between kv_manifest_begin and commit/rollback */
	sqlite3_stmt *st[ST_COUNT];
	/* fault injection (kv_manifest_fault_arm) */
	_Atomic unsigned fault_nth;    /* 0: disarmed */
	unsigned fault_what, fault_count;
	int fault_err;
	pthread_mutex_t fault_lock;
	struct mf_journal j;
	char *store_dir;
	/* compacting the journal in the background (journal_compact.c) */
	struct mfj_compactor *compact;   /* NULL: none running */
	uint64_t compact_min;            /* never compact a smaller journal */
	uint64_t compact_retry_at;       /* after a failure: not before this size */
	uint64_t compactions;            /* put in place since open */
};

/* Log an SQLite failure (va_list form of mf_db_fail; deleting maps a
 * foreign-key refusal to -ENOTEMPTY). */
int mf_vfail(sqlite3 *db, const char *path, int rc, bool deleting,
	     const char *fmt, va_list ap);
/* Log an SQLite failure with what was being done; return it as -errno. */
int mf_db_fail(sqlite3 *db, const char *path, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Describe a corrupt row or meta value into err (the caller logs it);
 * returns KV_ERR_CORRUPT. */
int mf_corrupt(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Run sql without results; log and return -errno on failure. */
int mf_exec(sqlite3 *db, const char *path, const char *sql, const char *what);
/* Step through sql's rows calling fn for each; fn's non-zero ends the
 * walk and is returned (manifest_scan.c). */
int mf_each_row(struct kv_manifest *m, const char *sql,
		int (*fn)(sqlite3_stmt *st, void *a), void *a);
/*
 * Prepare sql, bind param (if any) to ?1 and step once. 1: *out is on the
 * first row (finalize it); 0: no row; <0: error, logged.
 */
int mf_query_row(sqlite3 *db, const char *path, const char *sql,
		 const char *param, sqlite3_stmt **out);
/* Column text for a log line, never NULL. */
const char *mf_col_str(sqlite3_stmt *st, int col);
/* Every index of the schema's tables against its table, by sequential
 * scans (check_idx.c): a report line per index that differs; returns the
 * number of lines, or -errno. */
int mf_check_indexes(struct kv_manifest *m, kv_check_report_fn *report, void *arg);
/* The row pass's half of the table side (kv_check_sums): bind the pass's
 * statement over table (its column 0 the rowid; NULL when there is nothing
 * to sum, or the statement lacks an indexed column: then the table is
 * scanned by kv_check_sums_compare), add each row read, and mark the table
 * whole once the statement ran to its end. */
struct check_table;
struct check_table *mf_sums_bind(struct kv_check_sums *s, const char *table,
				 sqlite3_stmt *st);
void mf_sums_row(struct check_table *ct, sqlite3_stmt *st);
void mf_sums_done(struct check_table *ct);
/* meta[key] as an integer in [lo, hi]; KV_ERR_CORRUPT (described in err)
 * if absent or not. */
int mf_meta_int(sqlite3 *db, const char *path, const char *key, int64_t lo,
		int64_t hi, int64_t *out, char *err, size_t errlen);

/* manifest_read.c: one walk's state, and each table's row validation: a
 * row read by a statement whose columns are those kv_manifest_load selects
 * is range-checked (KV_ERR_CORRUPT described in err) and handed to v. */
struct mf_load {
	struct kv_manifest *m;
	const struct kv_manifest_visitor *v;
	void *arg;
	int64_t nstripes;
	int64_t segment_size;
	char *err;
	size_t errlen;
	struct kv_check_sums *sums;   /* fsck's row pass: index sums of the table side */
};
int mf_load_limits(struct mf_load *l);   /* nstripes, segment_size */
int mf_load_counts(struct mf_load *l);   /* rows to come, to v->counts */
int mf_row_model(struct mf_load *l, sqlite3_stmt *st);
int mf_row_layer(struct mf_load *l, sqlite3_stmt *st);
int mf_row_extent(struct mf_load *l, sqlite3_stmt *st);
int mf_row_page(struct mf_load *l, sqlite3_stmt *st);
/* A page row with its extent's seven columns after it (from column 13;
 * NULL where the page names none): the extent to v first, then the page. */
int mf_row_page_extent(struct mf_load *l, sqlite3_stmt *st);

/* meta.c: validate meta before mkfs writes it (-EINVAL with a log line),
 * and write it with the stripes (inside mkfs's transaction). */
int mf_meta_validate(const struct kv_store_meta *meta);
int mf_write_meta(sqlite3 *db, const char *path, const struct kv_store_meta *meta);

/* ident.c: the identity check of a row (see there), and the same functions
 * registered in SQL (kvfs_ident_model/layer/page) for the schema upgrade. */
int64_t mf_ident_model(uint64_t ino, const char *name, const struct kv_geometry *g);
int64_t mf_ident_layer(uint64_t ino, uint64_t model_ino, uint32_t layer, const char *name);
int64_t mf_ident_page(uint64_t ino, uint64_t layer_ino, const char *name,
		      uint64_t extent_id, uint64_t size);
int mf_ident_register(sqlite3 *db);

/* journal.c: recording the changes of the open transaction, and writing
 * them as one batch (durable) before the transaction commits. */
enum mf_rec_kind {
	MF_REC_MODEL = 1, MF_REC_LAYER, MF_REC_EXTENT, MF_REC_PAGE,
	MF_REC_DEL_MODEL, MF_REC_DEL_LAYER, MF_REC_DEL_EXTENT, MF_REC_DEL_PAGE,
	MF_REC_REF_EXTENT,
};
void mf_journal_init(struct mf_journal *j);
void mf_journal_fini(struct mf_journal *j);
void mf_journal_model(struct mf_journal *j, const struct kv_model_rec *r);
void mf_journal_layer(struct mf_journal *j, const struct kv_layer_rec *r);
void mf_journal_extent(struct mf_journal *j, const struct kv_extent_rec *r);
void mf_journal_page(struct mf_journal *j, const struct kv_page_rec *r);
void mf_journal_del(struct mf_journal *j, enum mf_rec_kind kind, uint64_t key);
void mf_journal_ref(struct mf_journal *j, uint64_t id, int delta);
/* Forget the open transaction's records (rollback). */
void mf_journal_discard(struct mf_journal *j);
/* Write the records as batch j->seq + 1 and fdatasync; *seq gets its number
 * (0: nothing to write). The transaction then records *seq in meta. */
int mf_journal_write_batch(struct kv_manifest *m, uint64_t *seq);
/* The batch committed: advance past it. */
void mf_journal_batch_done(struct mf_journal *j, uint64_t seq);
/* After a commit: start compacting a journal grown well past its snapshot,
 * in the background, or put a finished compaction in place
 * (journal_compact.c). */
void mf_journal_maybe_rewrite(struct kv_manifest *m);
/* At close: put a finished compaction in place, stop a running one. */
void mf_journal_compact_close(struct kv_manifest *m);

#endif
