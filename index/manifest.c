/*
 * kvfs manifest: the authoritative page table of a store, kept in SQLite
 * (STORE/kvfs.db, WAL mode, synchronous=FULL, foreign keys on). mkfs creates
 * it (kv_manifest_create); the daemon opens it once, loads every row into the
 * in-memory index (kv_manifest_load) and from then on only writes: its
 * committer thread groups many put/del calls into one transaction, after the
 * extents those rows name are durable. Nothing on the read path queries
 * SQLite. Every statement the committer runs is prepared once at open. This
 * file is the write side (create, open, transactions, puts, deletes);
 * manifest_read.c validates what is read back (meta, load, check).
 *
 * Schema version 2 (PRAGMA user_version and meta.schema_version both hold it;
 * the larger of the two is what open compares with KV_SCHEMA_VERSION;
 * version 1 is upgraded at open: it lacked the ident columns):
 *
 *   meta(key TEXT PRIMARY KEY, value NOT NULL)
 *       format = 'kvfs', schema_version, uuid (text, 36 chars),
 *       segment_size, capacity (0 = no budget), created_ns,
 *       journal_seq (the last journaled batch committed: journal.c),
 *       event_seq (the last MOUNT/.kvfs/events record committed; absent
 *       until the first: engine/events.c),
 *       root_attr (the mount root's "MODE UID GID", mode in octal; absent
 *       until a chmod or chown of it)
 *   stripes(id INTEGER PRIMARY KEY, path TEXT NOT NULL)
 *       id = stripe index, 0..n-1 without gaps
 *   models(ino INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,
 *          mode, uid, gid, ctime_ns, mtime_ns, atime_ns,
 *          layers, kv_heads, head_dim, page_tokens, dtype, ident)
 *       geometry all 0 and dtype '' = not set
 *   layers(ino INTEGER PRIMARY KEY, model_ino INTEGER NOT NULL
 *          REFERENCES models(ino), layer INTEGER NOT NULL, name TEXT NOT NULL,
 *          mode, uid, gid, ctime_ns, mtime_ns, atime_ns, ident,
 *          UNIQUE(model_ino, layer), UNIQUE(model_ino, name))
 *       name = layer in decimal, leading zeros allowed
 *   extents(id INTEGER PRIMARY KEY, stripe, segment, "offset", length,
 *           hash BLOB NOT NULL, refcount INTEGER NOT NULL)
 *       INDEX extents_hash(hash); hash = XXH3-128, 16 bytes big-endian;
 *       offset 4096-aligned; refcount = pages referring to it (>= 1)
 *   pages(ino INTEGER PRIMARY KEY, layer_ino INTEGER NOT NULL
 *         REFERENCES layers(ino), name TEXT NOT NULL, extent_id INTEGER NOT
 *         NULL REFERENCES extents(id), size, mode, uid, gid, ctime_ns,
 *         mtime_ns, atime_ns, ident, UNIQUE(layer_ino, name))
 *       INDEX pages_extent(extent_id): deleting an extent checks for pages
 *       still using it, and fsck counts references, without a table scan.
 *       size == the extent's length.
 *   ident (models, layers, pages): XXH3-64 of the row's identity (ident.c);
 *       a row whose ident does not match is refused at load.
 *
 * Every column is NOT NULL and every integer is stored as an SQLite integer
 * (inode numbers and ids 1..2^63-1, modes are permission bits only).
 * Foreign keys are immediate, so within one transaction parents are put
 * before children and children deleted before parents; a page that replaces
 * another under the same name is put after the other is deleted.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "kvname.h"
#include "manifest_i.h"

#define BUSY_TIMEOUT_MS 5000
#define CACHE_KIB 65536          /* SQLite page cache, per connection */
#define SCAN_CACHE_KIB 4096      /* the same, for a connection that scans in order */

#define ATTR_DEF \
	"mode INTEGER NOT NULL, uid INTEGER NOT NULL, gid INTEGER NOT NULL, " \
	"ctime_ns INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, atime_ns INTEGER NOT NULL"

static const char schema_sql[] =
	"CREATE TABLE meta (key TEXT PRIMARY KEY, value NOT NULL);"
	"CREATE TABLE stripes (id INTEGER PRIMARY KEY, path TEXT NOT NULL);"
	"CREATE TABLE models (ino INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, "
	ATTR_DEF ", layers INTEGER NOT NULL, kv_heads INTEGER NOT NULL, "
	"head_dim INTEGER NOT NULL, page_tokens INTEGER NOT NULL, dtype TEXT NOT NULL, "
	"ident INTEGER NOT NULL DEFAULT 0);"
	"CREATE TABLE layers (ino INTEGER PRIMARY KEY, "
	"model_ino INTEGER NOT NULL REFERENCES models(ino), "
	"layer INTEGER NOT NULL, name TEXT NOT NULL, " ATTR_DEF ", "
	"ident INTEGER NOT NULL DEFAULT 0, "
	"UNIQUE (model_ino, layer), UNIQUE (model_ino, name));"
	"CREATE TABLE extents (id INTEGER PRIMARY KEY, stripe INTEGER NOT NULL, "
	"segment INTEGER NOT NULL, \"offset\" INTEGER NOT NULL, "
	"length INTEGER NOT NULL, hash BLOB NOT NULL, refcount INTEGER NOT NULL);"
	"CREATE INDEX extents_hash ON extents (hash);"
	"CREATE TABLE pages (ino INTEGER PRIMARY KEY, "
	"layer_ino INTEGER NOT NULL REFERENCES layers(ino), name TEXT NOT NULL, "
	"extent_id INTEGER NOT NULL REFERENCES extents(id), "
	"size INTEGER NOT NULL, " ATTR_DEF ", ident INTEGER NOT NULL DEFAULT 0, "
	"UNIQUE (layer_ino, name));"
	"CREATE INDEX pages_extent ON pages (extent_id);"
	"PRAGMA user_version = " STR(KV_SCHEMA_VERSION) ";";

#define ATTR_SET \
	"mode = excluded.mode, uid = excluded.uid, gid = excluded.gid, " \
	"ctime_ns = excluded.ctime_ns, mtime_ns = excluded.mtime_ns, " \
	"atime_ns = excluded.atime_ns"

/*
 * Upserts by primary key, never INSERT OR REPLACE: REPLACE would silently
 * delete whatever row holds a UNIQUE name, and with it the fact that two
 * objects claimed one name. ON CONFLICT(ino) leaves UNIQUE conflicts as errors.
 */
static const char *const stmt_sql[ST_COUNT] = {
	[ST_BEGIN] = "BEGIN IMMEDIATE",
	[ST_COMMIT] = "COMMIT",
	[ST_ROLLBACK] = "ROLLBACK",
	[ST_PUT_MODEL] =
		"INSERT INTO models (ino, name, " ATTR_COLS ", layers, kv_heads, "
		"head_dim, page_tokens, dtype, ident) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, "
		"?8, ?9, ?10, ?11, ?12, ?13, ?14) ON CONFLICT (ino) DO UPDATE SET "
		"name = excluded.name, " ATTR_SET ", layers = excluded.layers, "
		"kv_heads = excluded.kv_heads, head_dim = excluded.head_dim, "
		"page_tokens = excluded.page_tokens, dtype = excluded.dtype, "
		"ident = excluded.ident",
	[ST_PUT_LAYER] =
		"INSERT INTO layers (ino, model_ino, layer, name, " ATTR_COLS ", ident) "
		"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) "
		"ON CONFLICT (ino) DO UPDATE SET model_ino = excluded.model_ino, "
		"layer = excluded.layer, name = excluded.name, " ATTR_SET ", "
		"ident = excluded.ident",
	[ST_PUT_EXTENT] =
		"INSERT INTO extents (id, stripe, segment, \"offset\", length, hash, "
		"refcount) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) "
		"ON CONFLICT (id) DO UPDATE SET stripe = excluded.stripe, "
		"segment = excluded.segment, \"offset\" = excluded.\"offset\", "
		"length = excluded.length, hash = excluded.hash, "
		"refcount = excluded.refcount",
	[ST_PUT_PAGE] =
		"INSERT INTO pages (ino, layer_ino, name, extent_id, size, " ATTR_COLS
		", ident) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) "
		"ON CONFLICT (ino) DO UPDATE SET layer_ino = excluded.layer_ino, "
		"name = excluded.name, extent_id = excluded.extent_id, "
		"size = excluded.size, " ATTR_SET ", ident = excluded.ident",
	[ST_DEL_MODEL] = "DELETE FROM models WHERE ino = ?1",
	[ST_DEL_LAYER] = "DELETE FROM layers WHERE ino = ?1",
	[ST_DEL_EXTENT] = "DELETE FROM extents WHERE id = ?1",
	[ST_DEL_PAGE] = "DELETE FROM pages WHERE ino = ?1",
	/* Never to 0: the row goes with its last page (del_extent). */
	[ST_REF_EXTENT] = "UPDATE extents SET refcount = refcount + ?2 WHERE id = ?1 "
		"AND refcount + ?2 BETWEEN (CASE WHEN ?1 = 0 THEN 0 ELSE 1 END) AND 4294967295",
	/* Only forward: a late flush never undoes a newer row's time. */
	[ST_TOUCH_PAGE] = "UPDATE pages SET atime_ns = ?2 WHERE ino = ?1 AND atime_ns < ?2",
	[ST_SET_JOURNAL_SEQ] = "INSERT OR REPLACE INTO meta (key, value) VALUES ('journal_seq', ?1)",
	[ST_SET_EVENT_SEQ] = "INSERT OR REPLACE INTO meta (key, value) VALUES ('event_seq', ?1)",
	[ST_SET_ROOT_ATTR] = "INSERT OR REPLACE INTO meta (key, value) VALUES ('root_attr', ?1)",
	[ST_SET_JOURNAL_AT] = "INSERT OR REPLACE INTO meta (key, value) VALUES ('journal_at', ?1)",
};

/* ---- errors ---- */

static int map_sqlite(sqlite3 *db, int rc, bool deleting)
{
	int sys;

	switch (rc & 0xff) {
	case SQLITE_FULL:
		return -ENOSPC;
	case SQLITE_IOERR:
		if (rc == SQLITE_IOERR_NOMEM)
			return -ENOMEM;
		sys = db ? sqlite3_system_errno(db) : 0;
		if (sys == ENOSPC || sys == EDQUOT || sys == EROFS || sys == EACCES)
			return -sys;
		return -EIO;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return -EBUSY;
	case SQLITE_NOMEM:
		return -ENOMEM;
	case SQLITE_CORRUPT:
	case SQLITE_NOTADB:
		return KV_ERR_CORRUPT;
	case SQLITE_READONLY:
		return -EROFS;
	case SQLITE_PERM:
	case SQLITE_AUTH:
		return -EACCES;
	case SQLITE_CANTOPEN:
		sys = db ? sqlite3_system_errno(db) : 0;
		return sys > 0 ? -sys : -EIO;
	case SQLITE_CONSTRAINT:
		if (rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY)
			return -EEXIST;
		/* Deleting a row that others still refer to. */
		if (rc == SQLITE_CONSTRAINT_FOREIGNKEY && deleting)
			return -ENOTEMPTY;
		return -EINVAL;
	case SQLITE_TOOBIG:
	case SQLITE_RANGE:
	case SQLITE_MISMATCH:
		return -EINVAL;
	default:
		return -EIO;
	}
}

int mf_vfail(sqlite3 *db, const char *path, int rc, bool deleting,
		 const char *fmt, va_list ap)
{
	char what[512];

	vsnprintf(what, sizeof(what), fmt, ap);
	kv_log(KV_LOG_ERR, "manifest %s: %s: %s (sqlite error %d)", path, what,
	       db ? sqlite3_errmsg(db) : sqlite3_errstr(rc), rc);
	return map_sqlite(db, rc, deleting);
}

int mf_db_fail(sqlite3 *db, const char *path, int rc, const char *fmt, ...)
{
	va_list ap;
	int ret;

	va_start(ap, fmt);
	ret = mf_vfail(db, path, rc, false, fmt, ap);
	va_end(ap);
	return ret;
}

int mf_corrupt(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return KV_ERR_CORRUPT;
}

/* ---- small query helpers (declared in manifest_i.h) ---- */

int mf_exec(sqlite3 *db, const char *path, const char *sql, const char *what)
{
	int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);

	if (rc != SQLITE_OK)
		return mf_db_fail(db, path, sqlite3_extended_errcode(db), "%s", what);
	return 0;
}

int mf_query_row(sqlite3 *db, const char *path, const char *sql,
		 const char *param, sqlite3_stmt **out)
{
	sqlite3_stmt *st = NULL;
	int rc;

	*out = NULL;
	rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
	if (rc != SQLITE_OK)
		return mf_db_fail(db, path, rc, "preparing \"%s\"", sql);
	if (param)
		sqlite3_bind_text(st, 1, param, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*out = st;
		return 1;
	}
	if (rc == SQLITE_DONE)
		rc = 0;
	else
		rc = mf_db_fail(db, path, rc, "running \"%s\"", sql);
	sqlite3_finalize(st);
	return rc;
}

const char *mf_col_str(sqlite3_stmt *st, int col)
{
	const char *s = (const char *)sqlite3_column_text(st, col);

	return s ? s : "NULL";
}

int mf_meta_int(sqlite3 *db, const char *path, const char *key, int64_t lo,
		int64_t hi, int64_t *out, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int64_t v;
	int rc;

	rc = mf_query_row(db, path, "SELECT value FROM meta WHERE key = ?1", key, &st);
	if (rc < 0)
		return rc;
	if (rc == 0)
		return mf_corrupt(err, errlen, "meta: %s is missing", key);
	v = sqlite3_column_int64(st, 0);
	if (sqlite3_column_type(st, 0) != SQLITE_INTEGER || v < lo || v > hi)
		rc = mf_corrupt(err, errlen, "meta: %s = '%s' is not an integer in %"
				PRId64 "..%" PRId64, key, mf_col_str(st, 0), lo, hi);
	else
		rc = 0;
	*out = v;
	sqlite3_finalize(st);
	return rc;
}

/* ---- create / open / close ---- */

/* dir/name, malloc'ed; NULL when out of memory. */
static char *kv_path_join(const char *dir, const char *name)
{
	char *p;

	return asprintf(&p, "%s/%s", dir, name) < 0 ? NULL : p;
}

static void remove_sidecars(const char *path)
{
	static const char *const sfx[] = { "-wal", "-shm", "-journal" };
	char p[4096 + 16];
	size_t i;

	for (i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++) {
		snprintf(p, sizeof(p), "%s%s", path, sfx[i]);
		if (unlink(p) == 0)
			kv_log(KV_LOG_WARN, "manifest: removed stale %s", p);
	}
}

static int fsync_path(const char *path, int flags)
{
	int fd = open(path, flags | O_CLOEXEC);
	int rc = 0;

	if (fd < 0 || fsync(fd) < 0) {
		rc = -errno;
		kv_log(KV_LOG_ERR, "manifest: fsync %s: %s", path, strerror(errno));
	}
	if (fd >= 0)
		close(fd);
	return rc;
}

static int create_tables(sqlite3 *db, const char *path, const struct kv_store_meta *meta)
{
	int rc;

	if ((rc = mf_exec(db, path, "PRAGMA journal_mode = WAL", "enabling WAL")) ||
	    (rc = mf_exec(db, path, "PRAGMA synchronous = FULL", "setting synchronous")) ||
	    (rc = mf_exec(db, path, "BEGIN IMMEDIATE", "starting creation")))
		return rc;
	if ((rc = mf_exec(db, path, schema_sql, "creating the schema")) ||
	    (rc = mf_write_meta(db, path, meta)) ||
	    (rc = mf_exec(db, path, "COMMIT", "committing the new manifest")))
		mf_exec(db, path, "ROLLBACK", "rolling back creation");
	return rc;
}

/*
 * SQLite keeps malloc statistics by default, under one process-wide mutex
 * taken on every allocation: fsck's three reader threads then spent 7 % of
 * their time on it, partly waiting for each other. Nothing here reads the
 * statistics (sqlite3_memory_used), so they are switched off once, before
 * the library initialises (sqlite3_config is refused after that; then the
 * default stays, which is only slower).
 */
static void sqlite_setup_once(void)
{
	(void)sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

static void sqlite_setup(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, sqlite_setup_once);
}

int kv_manifest_create_bare(const char *store_dir, const struct kv_store_meta *meta)
{
	sqlite3 *db = NULL;
	char *path = NULL;
	bool made = false;
	int fd, rc;

	rc = mf_meta_validate(meta);
	if (rc < 0)
		return rc;
	if (asprintf(&path, "%s/%s", store_dir, KV_MANIFEST_FILE) < 0)
		return -ENOMEM;
	/* O_EXCL: two mkfs runs racing must not both think they created it. */
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = -errno;
		kv_log(KV_LOG_ERR, "manifest %s: cannot create: %s", path, strerror(errno));
		goto out;
	}
	close(fd);
	made = true;
	/* A WAL left by an earlier, deleted manifest would be replayed into
	 * this empty file. */
	remove_sidecars(path);
	sqlite_setup();
	rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		rc = mf_db_fail(db, path, rc, "opening the new manifest");
		goto out;
	}
	sqlite3_extended_result_codes(db, 1);
	rc = create_tables(db, path, meta);
	if (rc < 0)
		goto out;
	/* Closing the last connection checkpoints the WAL into kvfs.db. */
	rc = sqlite3_close(db);
	db = NULL;
	if (rc != SQLITE_OK) {
		rc = mf_db_fail(NULL, path, rc, "closing the new manifest");
		goto out;
	}
	rc = fsync_path(path, O_RDONLY);
	if (rc == 0)
		rc = fsync_path(store_dir, O_RDONLY | O_DIRECTORY);
out:
	if (db)
		sqlite3_close(db);
	if (rc < 0 && made) {
		unlink(path);
		remove_sidecars(path);
	}
	free(path);
	return rc;
}

/* KV_ERR_NOTSTORE / KV_ERR_SCHEMA / KV_ERR_CORRUPT before anything is written. */
static int check_identity(struct kv_manifest *m, int64_t *version)
{
	sqlite3_stmt *st;
	char err[512] = "";
	int64_t ver, uver;
	int rc;

	rc = mf_query_row(m->db, m->path, "SELECT 1 FROM sqlite_master WHERE type = 'table' "
		       "AND name = 'meta'", NULL, &st);
	if (rc < 0)
		return rc;
	sqlite3_finalize(st);
	if (rc == 0) {
		kv_log(KV_LOG_ERR, "manifest %s is not a kvfs manifest (no meta table)", m->path);
		return KV_ERR_NOTSTORE;
	}
	rc = mf_query_row(m->db, m->path, "SELECT value FROM meta WHERE key = 'format'", NULL, &st);
	if (rc < 0)
		return rc;
	if (rc == 0 || sqlite3_column_type(st, 0) != SQLITE_TEXT ||
	    strcmp(mf_col_str(st, 0), "kvfs") != 0) {
		sqlite3_finalize(st);
		kv_log(KV_LOG_ERR, "manifest %s is not a kvfs manifest (meta format is not 'kvfs')",
		       m->path);
		return KV_ERR_NOTSTORE;
	}
	sqlite3_finalize(st);
	rc = mf_meta_int(m->db, m->path, "schema_version", INT64_MIN, INT64_MAX, &ver,
		      err, sizeof(err));
	if (rc < 0) {
		if (rc == KV_ERR_CORRUPT)
			kv_log(KV_LOG_ERR, "manifest %s is damaged: %s", m->path, err);
		return rc;
	}
	rc = mf_query_row(m->db, m->path, "PRAGMA user_version", NULL, &st);
	if (rc <= 0)
		return rc < 0 ? rc : -EIO;
	uver = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	if (uver > ver)
		ver = uver;
	if (ver > KV_SCHEMA_VERSION) {
		kv_log(KV_LOG_ERR, "manifest %s has schema version %" PRId64 "; this kvfs "
		       "supports up to %d: upgrade kvfs", m->path, ver, KV_SCHEMA_VERSION);
		return KV_ERR_SCHEMA;
	}
	if (ver < 1) {
		kv_log(KV_LOG_ERR, "manifest %s is damaged: schema version %" PRId64,
		       m->path, ver);
		return KV_ERR_CORRUPT;
	}
	*version = ver;
	return 0;
}

/*
 * Version 1 -> 2: every model, layer and page row gets its identity check,
 * computed from the row as it stands (damage done before the upgrade cannot
 * be told from intent). One transaction: a crash leaves version 1.
 */
static int upgrade(struct kv_manifest *m, int64_t version)
{
	static const char sql[] =
		"ALTER TABLE models ADD COLUMN ident INTEGER NOT NULL DEFAULT 0;"
		"ALTER TABLE layers ADD COLUMN ident INTEGER NOT NULL DEFAULT 0;"
		"ALTER TABLE pages ADD COLUMN ident INTEGER NOT NULL DEFAULT 0;"
		"UPDATE models SET ident = kvfs_ident_model(ino, name, layers, kv_heads, "
		"head_dim, page_tokens, dtype);"
		"UPDATE layers SET ident = kvfs_ident_layer(ino, model_ino, layer, name);"
		"UPDATE pages SET ident = kvfs_ident_page(ino, layer_ino, name, extent_id, size);"
		"UPDATE meta SET value = 2 WHERE key = 'schema_version';"
		"PRAGMA user_version = 2;";
	int rc;

	if (version == KV_SCHEMA_VERSION)
		return 0;
	rc = mf_exec(m->db, m->path, "BEGIN IMMEDIATE", "starting the schema upgrade");
	if (rc < 0)
		return rc;
	rc = mf_exec(m->db, m->path, sql, "upgrading the schema to version 2");
	if (rc == 0)
		rc = mf_exec(m->db, m->path, "COMMIT", "committing the schema upgrade");
	if (rc < 0) {
		mf_exec(m->db, m->path, "ROLLBACK", "rolling back the schema upgrade");
		return rc == -EIO || rc == -EINVAL ? KV_ERR_CORRUPT : rc;
	}
	kv_log(KV_LOG_INFO, "manifest %s: upgraded from schema version %" PRId64
	       " to %d (row identity checks)", m->path, version, KV_SCHEMA_VERSION);
	return 0;
}

static int configure(struct kv_manifest *m)
{
	sqlite3_stmt *st;
	int rc;

	rc = mf_query_row(m->db, m->path, "PRAGMA journal_mode = WAL", NULL, &st);
	if (rc < 0)
		return rc;
	if (rc == 1) {
		const char *mode = (const char *)sqlite3_column_text(st, 0);

		/* Some filesystems cannot host WAL (no shared mmap); the rollback
		 * journal with synchronous=FULL is just as durable, only slower. */
		if (!mode || strcmp(mode, "wal") != 0)
			kv_log(KV_LOG_WARN, "manifest %s: WAL unavailable, using journal "
			       "mode %s", m->path, mode ? mode : "?");
		sqlite3_finalize(st);
	}
	/* Page names and hashes are random keys: a batch of inserts touches
	 * index pages all over the file, and the 2 MiB default cache thrashes. */
	if ((rc = mf_exec(m->db, m->path, "PRAGMA cache_size = -" STR(CACHE_KIB),
			   "sizing the page cache")) ||
	    (rc = mf_exec(m->db, m->path, "PRAGMA synchronous = FULL", "setting synchronous")) ||
	    (rc = mf_exec(m->db, m->path, "PRAGMA foreign_keys = ON", "enabling foreign keys")))
		return rc;
	return 0;
}

static int prepare_all(struct kv_manifest *m)
{
	int i, rc;

	for (i = 0; i < ST_COUNT; i++) {
		rc = sqlite3_prepare_v3(m->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
					&m->st[i], NULL);
		if (rc == SQLITE_OK)
			continue;
		/* A table or column missing from a version-1 schema. */
		if (rc == SQLITE_ERROR) {
			kv_log(KV_LOG_ERR, "manifest %s is damaged: its tables do not match "
			       "schema version %d: %s", m->path, KV_SCHEMA_VERSION,
			       sqlite3_errmsg(m->db));
			return KV_ERR_CORRUPT;
		}
		return mf_db_fail(m->db, m->path, rc, "preparing \"%s\"", stmt_sql[i]);
	}
	return 0;
}

int kv_manifest_open(const char *store_dir, struct kv_manifest **out)
{
	struct kv_manifest *m;
	int64_t version = 0;
	struct stat sb;
	int rc;

	*out = NULL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	pthread_mutex_init(&m->fault_lock, NULL);
	mf_journal_init(&m->j);
	m->store_dir = strdup(store_dir);
	m->path = kv_path_join(store_dir, KV_MANIFEST_FILE);
	m->j.path = kv_path_join(store_dir, KV_JOURNAL_FILE);
	kv_manifest_journal_tune(m, 0);
	if (!m->store_dir || !m->path || !m->j.path) {
		rc = -ENOMEM;
		goto fail;
	}
	if (stat(m->path, &sb) < 0) {
		rc = -errno;
		kv_log(KV_LOG_ERR, "manifest %s: %s", m->path, strerror(errno));
		goto fail;
	}
	if (!S_ISREG(sb.st_mode)) {
		kv_log(KV_LOG_ERR, "manifest %s is not a regular file", m->path);
		rc = KV_ERR_NOTSTORE;
		goto fail;
	}
	sqlite_setup();
	rc = sqlite3_open_v2(m->path, &m->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
			     NULL);
	if (rc != SQLITE_OK) {
		rc = mf_db_fail(m->db, m->path, rc, "opening");
		goto fail;
	}
	sqlite3_extended_result_codes(m->db, 1);
	sqlite3_busy_timeout(m->db, BUSY_TIMEOUT_MS);
	/* Identity and version first: nothing may be written (not even the
	 * switch to WAL) into a file we do not understand. */
	if ((rc = check_identity(m, &version)) || (rc = configure(m)) ||
	    (rc = mf_ident_register(m->db) == SQLITE_OK ? 0 : -ENOMEM) ||
	    (rc = upgrade(m, version)) || (rc = prepare_all(m)))
		goto fail;
	*out = m;
	return 0;
fail:
	kv_manifest_close(m);
	return rc;
}

/*
 * A store written by the daemon interleaves the pages of every table and
 * index in kvfs.db (they grow together), so a walk in key order reads the
 * file at random: at 1M pages a cold load spent most of its time waiting on
 * 4 KiB reads. One sequential read of each file first puts it in the page
 * cache at the disk's streaming speed. Best effort: a file that cannot be
 * read here is read (and its error reported) by whoever needs it; one larger
 * than a quarter of RAM would not stay cached, so it is left alone.
 */
#define PREFETCH_CHUNK (4u << 20)

static void prefetch_file(const char *path, uint64_t limit)
{
	struct stat sb;
	char *buf;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		if (errno != ENOENT)
			kv_log(KV_LOG_DEBUG, "prefetch %s: open: %s", path, strerror(errno));
		return;
	}
	if (fstat(fd, &sb) < 0 || (uint64_t)sb.st_size > limit ||
	    !(buf = malloc(PREFETCH_CHUNK))) {
		kv_log(KV_LOG_DEBUG, "prefetch %s: skipped (larger than a quarter of RAM, "
		       "or out of memory)", path);
		close(fd);
		return;
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	while (read(fd, buf, PREFETCH_CHUNK) > 0)
		;
	posix_fadvise(fd, 0, 0, POSIX_FADV_NORMAL);
	free(buf);
	close(fd);
}

void kv_manifest_prefetch(struct kv_manifest *m)
{
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	uint64_t limit = pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize / 4 : 0;
	size_t n = strlen(m->path);
	char *wal = malloc(n + 5);

	prefetch_file(m->path, limit);
	if (wal) {
		memcpy(wal, m->path, n);
		memcpy(wal + n, "-wal", 5);
		prefetch_file(wal, limit);
		free(wal);
	}
	/* Not the journal: recovery reads it from its last committed batch
	 * on (journal_replay.c), and at 10M pages it is 2 GB. */
}

int kv_manifest_scan_cache(struct kv_manifest *m)
{
	return mf_exec(m->db, m->path, "PRAGMA cache_size = -" STR(SCAN_CACHE_KIB),
		       "sizing the page cache for scans");
}

void kv_manifest_shrink(struct kv_manifest *m)
{
	/* A smaller cache_size frees the unused pages above it at once;
	 * release_memory frees the rest that nothing holds. */
	(void)kv_manifest_scan_cache(m);
	sqlite3_db_release_memory(m->db);
}

size_t kv_manifest_cache_bytes(struct kv_manifest *m)
{
	int cur = 0, high = 0;

	if (sqlite3_db_status(m->db, SQLITE_DBSTATUS_CACHE_USED, &cur, &high, 0) != SQLITE_OK)
		return 0;
	return cur > 0 ? (size_t)cur : 0;
}

void kv_manifest_close(struct kv_manifest *m)
{
	int i;

	if (!m)
		return;
	if (m->in_txn) {
		kv_log(KV_LOG_WARN, "manifest %s: closed inside a transaction; rolled back",
		       m->path);
		kv_manifest_rollback(m);
	}
	mf_journal_compact_close(m);
	for (i = 0; i < ST_COUNT; i++)
		sqlite3_finalize(m->st[i]);
	if (m->db && sqlite3_close(m->db) != SQLITE_OK)
		kv_log(KV_LOG_ERR, "manifest %s: close: %s", m->path, sqlite3_errmsg(m->db));
	pthread_mutex_destroy(&m->fault_lock);
	mf_journal_fini(&m->j);
	free(m->store_dir);
	free(m->path);
	free(m);
}

int kv_manifest_create(const char *store_dir, const struct kv_store_meta *meta)
{
	struct kv_manifest *m;
	int rc = kv_manifest_create_bare(store_dir, meta);

	if (rc < 0)
		return rc;
	rc = kv_manifest_open(store_dir, &m);
	if (rc == 0) {
		rc = kv_manifest_journal_rewrite(m);
		kv_manifest_close(m);
	}
	return rc;
}
