/*
 * Private to index/manifest*.c: the manifest handle, its cached statements,
 * and the SQLite helpers shared by the write side (manifest.c: create, open,
 * transactions, puts and deletes) and the read side (manifest_read.c: meta,
 * validated load, check).
 */
#ifndef KV_MANIFEST_I_H
#define KV_MANIFEST_I_H

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
	ST_COUNT
};

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
};

/* Log an SQLite failure with what was being done; return it as -errno. */
int mf_db_fail(sqlite3 *db, const char *path, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Describe a corrupt row or meta value into err (the caller logs it);
 * returns KV_ERR_CORRUPT. */
int mf_corrupt(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Run sql without results; log and return -errno on failure. */
int mf_exec(sqlite3 *db, const char *path, const char *sql, const char *what);
/*
 * Prepare sql, bind param (if any) to ?1 and step once. 1: *out is on the
 * first row (finalize it); 0: no row; <0: error, logged.
 */
int mf_query_row(sqlite3 *db, const char *path, const char *sql,
		 const char *param, sqlite3_stmt **out);
/* Column text for a log line, never NULL. */
const char *mf_col_str(sqlite3_stmt *st, int col);
/* meta[key] as an integer in [lo, hi]; KV_ERR_CORRUPT (described in err)
 * if absent or not. */
int mf_meta_int(sqlite3 *db, const char *path, const char *key, int64_t lo,
		int64_t hi, int64_t *out, char *err, size_t errlen);

/* meta.c: validate meta before mkfs writes it (-EINVAL with a log line),
 * and write it with the stripes (inside mkfs's transaction). */
int mf_meta_validate(const struct kv_store_meta *meta);
int mf_write_meta(sqlite3 *db, const char *path, const struct kv_store_meta *meta);

#endif
