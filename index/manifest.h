/*
 * kvfs manifest: the authoritative page table, in SQLite (WAL mode).
 *
 * STORE/kvfs.db holds the store's identity and configuration (meta,
 * stripes), the namespace (models with optional geometry, layers, pages) and
 * the extents pages point at (location, XXH3-128 of the payload, refcount).
 * A row exists only for data that was already written and fdatasync'ed: the
 * caller orders "extent data durable -> manifest transaction". Many changes
 * share one transaction (group commit): kv_manifest_begin(), any number of
 * put/del calls, kv_manifest_commit().
 *
 * Identifiers (inode numbers, extent ids) are chosen by the caller; the
 * manifest stores them. Nothing on the read path queries SQLite: the whole
 * manifest is loaded once at mount into the in-memory index (index.h).
 *
 * A kv_manifest is not thread-safe: one thread (the committer) owns it.
 * Functions return 0 or -errno / KV_ERR_* (store.h) and log what failed.
 *
 * Foreign keys are checked at each statement, so within a transaction put
 * parents before children (model, layer, extent, then page) and delete
 * children before parents; when a page replaces another under the same name,
 * delete the old row first. Errors of put/del: -EEXIST for a name (or layer
 * number) another row holds, -EINVAL for invalid values or a parent row that
 * does not exist, -ENOTEMPTY for deleting a row others still refer to,
 * -ENOSPC / -EIO / -EBUSY from the disk or a lock. After any error the
 * transaction is still open (only that statement was undone) unless SQLite
 * gave it up (disk full, I/O error): then every later put/del and the commit
 * return -EIO; either way the caller rolls back.
 */
#ifndef KV_MANIFEST_H
#define KV_MANIFEST_H

#include <stdint.h>
#include "store.h"

#define KV_MANIFEST_FILE "kvfs.db"
#define KV_JOURNAL_FILE "kvfs.journal"
#define KV_SCHEMA_VERSION 2
#define KV_NAME_MAX 255u          /* bytes in one model, layer or page name */
#define KV_DTYPE_MAX 15u

struct kv_manifest;

/* Store identity and configuration, written once by mkfs. ~256 KiB (the
 * stripe paths): allocate it, do not put it on a thread's stack. */
struct kv_store_meta {
	char uuid[37];
	uint64_t segment_size;
	uint64_t capacity;          /* 0 = no budget */
	int64_t created_ns;
	unsigned nstripes;
	char stripes[KV_MAX_STRIPES][4096];  /* absolute paths */
};

/* Optional model geometry; all-zero means "not set" (any page size). */
struct kv_geometry {
	uint32_t layers;
	uint32_t kv_heads;
	uint32_t head_dim;
	uint32_t page_tokens;
	char dtype[KV_DTYPE_MAX + 1];  /* "f16", "bf16", "f32", "f8", "i8" */
};

/* Attributes common to every persisted namespace object. */
struct kv_obj_attr {
	uint32_t mode;      /* permission bits only (type is implied by table) */
	uint32_t uid, gid;
	int64_t ctime_ns, mtime_ns, atime_ns;
};

struct kv_model_rec {
	uint64_t ino;
	char name[KV_NAME_MAX + 1];
	struct kv_obj_attr attr;
	struct kv_geometry geo;
};

struct kv_layer_rec {
	uint64_t ino;
	uint64_t model_ino;
	uint32_t layer;     /* numeric value of name */
	char name[KV_NAME_MAX + 1];
	struct kv_obj_attr attr;
};

/*
 * The extent of every empty page: no bytes and no place on any stripe. Its
 * row (id 0, length 0) is made by the first reference to it and its
 * refcount counts the empty pages; it may drop to 0, and the row stays.
 */
#define KV_EXTENT_EMPTY 0

struct kv_extent_rec {
	uint64_t id;
	struct kv_extent ext;
	uint8_t hash[KV_HASH_LEN];
	uint32_t refcount;  /* pages referring to it */
};

struct kv_page_rec {
	uint64_t ino;
	uint64_t layer_ino;
	char name[KV_NAME_MAX + 1];
	uint64_t extent_id;
	uint64_t size;      /* payload bytes (== extent length) */
	struct kv_obj_attr attr;
};

/*
 * Create STORE/kvfs.db with the current schema and meta, then fsync it and
 * STORE. -EEXIST if a manifest is already there; -EINVAL (logged) for meta
 * without a uuid, with 0 or more than KV_MAX_STRIPES stripes, an empty
 * stripe path, or a segment size that is 0 or not KV_ALIGN-aligned.
 * created_ns 0 means now. Nothing is left behind on failure.
 */
int kv_manifest_create(const char *store_dir, const struct kv_store_meta *meta);
/* Register the SQL functions kvfs_ident_model(ino, name, layers, kv_heads,
 * head_dim, page_tokens, dtype), kvfs_ident_layer(ino, model_ino, layer,
 * name) and kvfs_ident_page(ino, layer_ino, name, extent_id, size) in a
 * connection: they compute the ident column a row must hold (for tools and
 * tests that edit rows by hand). SQLITE_OK or an SQLite error code. */
struct sqlite3;
int kv_manifest_register_sql(struct sqlite3 *db);
/* The same without the journal (kv_manifest_rebuild writes its own). */
int kv_manifest_create_bare(const char *store_dir, const struct kv_store_meta *meta);

/*
 * Open an existing manifest: WAL, synchronous=FULL, foreign keys on. The
 * schema version is checked: newer than KV_SCHEMA_VERSION gives KV_ERR_SCHEMA
 * with a log line naming both versions; a file that is not a kvfs manifest
 * gives KV_ERR_NOTSTORE; a damaged database KV_ERR_CORRUPT. -ENOENT if absent.
 */
int kv_manifest_open(const char *store_dir, struct kv_manifest **out);
/*
 * Read kvfs.db, its WAL and kvfs.journal once, sequentially, into the page
 * cache, for a caller about to walk all of them (mount, fsck). Best effort:
 * never fails; files larger than a quarter of RAM are skipped.
 */
void kv_manifest_prefetch(struct kv_manifest *m);
/* A small page cache (4 MiB) for a connection that reads whole tables in
 * order (fsck's): the 64 MiB one that random inserts need only costs page
 * faults there, a tenth of fsck's time with four such connections. */
int kv_manifest_scan_cache(struct kv_manifest *m);
/* A connection done with its heavy reads (the index loader's, once the
 * load is over) keeps only the small cache: what its page cache held goes
 * back to malloc now, not at unmount. */
void kv_manifest_shrink(struct kv_manifest *m);
/* Bytes this connection's page cache holds now. */
size_t kv_manifest_cache_bytes(struct kv_manifest *m);
void kv_manifest_close(struct kv_manifest *m);

/*
 * Fault injection (tests; the daemon's -o fault_injection): make the nth
 * operation from now (1 = next) of the kinds in what fail with err (-EIO,
 * -ENOSPC, ...) instead of reaching SQLite, and the count - 1 that follow
 * too (count 0 means 1). KV_MF_FAULT_COMMIT: kv_manifest_commit, which then
 * rolls back as after a real failure; KV_MF_FAULT_WRITE: a row change (put,
 * del, ref, touch), which changes nothing. Each is logged as the real error
 * would be. nth = 0 disarms. Thread-safe.
 */
#define KV_MF_FAULT_COMMIT (1u << 0)
#define KV_MF_FAULT_WRITE  (1u << 1)
void kv_manifest_fault_arm(struct kv_manifest *m, unsigned what, unsigned nth,
			   int err, unsigned count);

/*
 * The journal, STORE/kvfs.journal (index/journal.c): every committed change,
 * appended and synced before its transaction commits, so the manifest can be
 * rolled forward (a deleted kvfs.db-wal) or rebuilt (a lost kvfs.db).
 *
 * kv_manifest_recover, once the store lock is held: applies the batches the
 * journal holds and the manifest lacks (one after an ordinary crash; more
 * means the manifest lost commits, logged as an error), drops a torn tail,
 * writes a new journal where it is missing, damaged or behind, and attaches
 * it: from then on every commit is journaled first. KV_ERR_CORRUPT (logged,
 * naming `kvfs fsck --rebuild`) when the manifest is older than the
 * journal's snapshot.
 */
struct kv_recover_stats {
	uint64_t batches;   /* journaled batches applied to the manifest */
	uint64_t changes;   /* row changes in them */
	uint64_t skipped;   /* changes already there or refused */
	bool rewritten;     /* the journal was (re)written from the manifest */
};
int kv_manifest_recover(struct kv_manifest *m, struct kv_recover_stats *st);
/* Batches the journal holds beyond the manifest, and in *damaged (NULL if
 * none) what is wrong with it read whole: then it could not rebuild the
 * manifest (recovery at mount reads from the last committed batch on and
 * does not see it). Read-only; for fsck. */
int kv_manifest_journal_behind(struct kv_manifest *m, uint64_t *batches,
			       const char **damaged);
/* Rewrite the journal as a snapshot of the manifest (after an offline
 * repair changed rows, or to compact it). Outside a transaction. */
int kv_manifest_journal_rewrite(struct kv_manifest *m);

/* The journal as its committer sees it (call on the committing thread). */
struct kv_journal_info {
	uint64_t size;           /* bytes of valid frames */
	uint64_t snapshot_end;   /* of which the last snapshot's */
	uint64_t compactions;    /* compactions put in place since open */
	bool compacting;         /* one is running in the background */
};
void kv_manifest_journal_info(const struct kv_manifest *m, struct kv_journal_info *out);
/*
 * After a commit, a journal of at least compact_min bytes (0: the default,
 * 64 MiB) and 4 times its last snapshot is compacted in the background
 * (journal_compact.c); the commit after it is written puts it in place.
 */
void kv_manifest_journal_tune(struct kv_manifest *m, uint64_t compact_min);
/*
 * Make a new STORE/kvfs.db from STORE/kvfs.journal alone: the old kvfs.db
 * (and its -wal, -shm), if any, are moved aside to st->aside; the rows are
 * the journal's snapshot plus every batch after it, refcounts recounted.
 * Whether the extents still hold their bytes is for the caller (fsck) to
 * verify. Needs the store lock.
 */
struct kv_rebuild_stats {
	char aside[4200];        /* where the old manifest went ("" if none) */
	uint64_t batches, changes, skipped;
	uint64_t dropped_bytes;  /* torn or damaged journal tail */
};
int kv_manifest_rebuild(const char *store_dir, struct kv_rebuild_stats *st);
/* Whether STORE/kvfs.journal exists (something to rebuild from). */
bool kv_manifest_has_journal(const char *store_dir);

/* Read the meta and stripes back; KV_ERR_CORRUPT (logged) if invalid. */
int kv_manifest_meta(struct kv_manifest *m, struct kv_store_meta *out);

/* Count a mount (meta mount_generation + 1, durable) and return the new
 * count, 1.. UINT32_MAX - 1. Outside a transaction. */
int kv_manifest_bump_mount(struct kv_manifest *m, uint32_t *gen);

/*
 * The sequence number of the last event record (MOUNT/.kvfs/events) whose
 * change committed: meta event_seq. get: 0 when it was never set, or
 * KV_ERR_CORRUPT (logged) for a value that is not a non-negative integer.
 * set: inside a transaction (it commits with the changes it counts); the
 * journal does not carry it, so a manifest rebuilt or rolled forward from
 * the journal has the value of its last SQLite commit. -EINVAL outside a
 * transaction.
 */
int kv_manifest_event_seq(struct kv_manifest *m, uint64_t *seq);
int kv_manifest_set_event_seq(struct kv_manifest *m, uint64_t seq);

/*
 * The mount root's mode, uid and gid (meta root_attr; its times stay in
 * memory). get: 0 and *found false when it was never set (the root is then
 * 0755 root), KV_ERR_CORRUPT (logged) for a value that does not parse.
 * set: inside a transaction; like event_seq the journal does not carry
 * it, so a manifest rebuilt from the journal alone has the default root.
 */
int kv_manifest_root_attr(struct kv_manifest *m, struct kv_obj_attr *out, bool *found);
int kv_manifest_set_root_attr(struct kv_manifest *m, const struct kv_obj_attr *a);

/*
 * Group commit. begin/commit/rollback bracket any number of put/del calls
 * (a put/del outside them commits on its own). begin inside a transaction or
 * commit outside one is -EINVAL. commit is durable when it returns 0; when it
 * fails the transaction has been rolled back. rollback outside a transaction
 * does nothing.
 */
int kv_manifest_begin(struct kv_manifest *m);
int kv_manifest_commit(struct kv_manifest *m);
void kv_manifest_rollback(struct kv_manifest *m);

/* Insert or update by primary key (ino / id); never replaces another row
 * that holds the same name (that is -EEXIST). */
int kv_manifest_put_model(struct kv_manifest *m, const struct kv_model_rec *r);
int kv_manifest_put_layer(struct kv_manifest *m, const struct kv_layer_rec *r);
int kv_manifest_put_extent(struct kv_manifest *m, const struct kv_extent_rec *r);
int kv_manifest_put_page(struct kv_manifest *m, const struct kv_page_rec *r);
/* Delete by primary key; -ENOENT if there was no such row. */
int kv_manifest_del_model(struct kv_manifest *m, uint64_t ino);
int kv_manifest_del_layer(struct kv_manifest *m, uint64_t ino);
int kv_manifest_del_extent(struct kv_manifest *m, uint64_t id);
int kv_manifest_del_page(struct kv_manifest *m, uint64_t ino);
/* Change an extent's refcount by delta (a page starts or stops sharing it:
 * dedup). -ENOENT if there is no such extent or the count would leave
 * 1..UINT32_MAX: the last reference goes with kv_manifest_del_extent. */
int kv_manifest_ref_extent(struct kv_manifest *m, uint64_t id, int delta);
/* Record a page's access time, if later than the stored one (within a
 * transaction). A page without a row (deleted, or not yet committed) is
 * left alone: that is not an error. */
int kv_manifest_touch_page(struct kv_manifest *m, uint64_t ino, int64_t atime_ns);

/*
 * Visit every row: all models, then all layers, then all extents, then all
 * pages (so parents always come first). A callback returning non-zero stops
 * the walk and that value is returned; a NULL callback skips its rows. Rows
 * whose values are out of range (negative sizes, names too long, hash of the
 * wrong length, unaligned offsets, extents past their segment or stripe,
 * page size != extent length, refcount 0...) give KV_ERR_CORRUPT with a log
 * line naming the table, key and column. Whether references resolve (a
 * page's extent, a layer's model) is the visitor's to check. counts (may
 * be NULL) is told first how many rows follow, so tables can be sized once.
 */
struct kv_manifest_visitor {
	int (*model)(void *arg, const struct kv_model_rec *r);
	int (*layer)(void *arg, const struct kv_layer_rec *r);
	int (*extent)(void *arg, const struct kv_extent_rec *r);
	int (*page)(void *arg, const struct kv_page_rec *r);
	int (*counts)(void *arg, uint64_t nodes, uint64_t extents);
	/* The visitor compares every page's size with its extent's length
	 * itself (the index does, from the extents it was given): the walk
	 * then leaves that check out, which saves a b-tree seek per page. */
	bool sizes_checked;
};
int kv_manifest_load(struct kv_manifest *m, const struct kv_manifest_visitor *v,
		     void *arg);

/*
 * Reading in steps (manifest_scan.c), for a mount that answers before its
 * index is whole: models and layers at once, the rest a chunk at a time in
 * the background, and one layer's pages whenever someone needs them first.
 * Rows are validated and handed to a visitor as kv_manifest_load does
 * (pages as with sizes_checked). All reads of a connection between
 * kv_manifest_read_begin and kv_manifest_read_end see one snapshot; such a
 * connection writes nothing meanwhile (kv_manifest_begin gives -EINVAL).
 */
enum kv_scan_table { KV_SCAN_MODELS, KV_SCAN_LAYERS, KV_SCAN_EXTENTS, KV_SCAN_PAGES };
struct kv_manifest_scan;
int kv_manifest_read_begin(struct kv_manifest *m);
void kv_manifest_read_end(struct kv_manifest *m);
/* key: for KV_SCAN_PAGES a layer inode (0 = every page); ignored
 * otherwise. Rows come in key order (a layer's pages in inode order). One
 * layer's scan hands each page's extent row (where it has one) to
 * v->extent just before the page. */
int kv_manifest_scan_open(struct kv_manifest *m, enum kv_scan_table t, uint64_t key,
			  const struct kv_manifest_visitor *v, void *arg,
			  struct kv_manifest_scan **out);
/* Hand up to max more rows to the visitor: 1 if rows remain, 0 at the end,
 * the visitor's non-zero return, KV_ERR_CORRUPT or -errno (logged). */
int kv_manifest_scan_step(struct kv_manifest_scan *s, unsigned max);
void kv_manifest_scan_close(struct kv_manifest_scan *s);   /* NULL: no-op */
/* Models, then layers, to v. */
int kv_manifest_load_tree(struct kv_manifest *m, const struct kv_manifest_visitor *v,
			  void *arg);
/* The row counts, to v->counts (counting pages reads an index: not at once). */
int kv_manifest_load_counts(struct kv_manifest *m, const struct kv_manifest_visitor *v,
			    void *arg);
/* fn(arg, layer_ino, pages) for every layer with pages, by inode, from the
 * (layer_ino, name) index alone; fn's non-zero ends it and is returned. */
int kv_manifest_layer_pages(struct kv_manifest *m,
			    int (*fn)(void *arg, uint64_t layer_ino, uint64_t pages),
			    void *arg);
/* The largest inode and extent id of any row (0 if none). */
int kv_manifest_max_ids(struct kv_manifest *m, uint64_t *ino, uint64_t *extent);
/* The layer of page ino's row: 0 and *layer_ino, -ENOENT if no row has
 * it, or the database's error. */
int kv_manifest_page_layer(struct kv_manifest *m, uint64_t ino, uint64_t *layer_ino);

/*
 * PRAGMA integrity_check, meta, every row's values (as kv_manifest_load),
 * foreign keys, pages whose extent is missing, refcounts that disagree with
 * the pages referring to the extent, and extents overlapping in a segment.
 * 0 if clean, KV_ERR_CORRUPT with the first problem in msg otherwise; another
 * error if the check could not run. Reads everything: for fsck, not mount.
 */
int kv_manifest_check(struct kv_manifest *m, char *msg, size_t msglen);
/* The part of kv_manifest_check that `kvfs fsck` does not do itself: meta
 * and every row's values as kv_manifest_load judges them, but for a page's
 * size against its extent's length, which is v's to check (v may be NULL;
 * its sizes_checked is implied). One sequential scan per table, handing
 * each row to v as kv_manifest_load does. With sums (may be NULL), the
 * scans also sum the table side of every index (kv_check_sums below). */
struct kv_check_sums;
/* part: every table, or the work split for two connections at once (all
 * but pages; or models, layers and pages, summing pages only). */
enum kv_check_part { KV_CHECK_ALL, KV_CHECK_BUT_PAGES, KV_CHECK_PAGES };
int kv_manifest_check_rows(struct kv_manifest *m, const struct kv_manifest_visitor *v,
			   void *arg, enum kv_check_part part, struct kv_check_sums *sums,
			   char *msg, size_t msglen);

/*
 * Offline checking for `kvfs fsck` (check.c). Unlike kv_manifest_load these
 * never stop at a bad row: they hand out raw values, which may be out of
 * range, and the caller judges and reports every problem.
 */
typedef void kv_check_report_fn(void *arg, const char *line);
/* PRAGMA quick_check, every index against its table (what integrity_check
 * adds to quick_check, by sequential scans), the layers' foreign key (a
 * page's layer is the page walk's layer_ok, its extent the caller's to
 * look up), the identity checks of models and layers, and the schema
 * version rows. Each problem is one report() line; returns how many, or
 * -errno. */
int kv_manifest_check_db(struct kv_manifest *m, kv_check_report_fn *report, void *arg);
/* Its three parts, for a caller that runs them on connections of their
 * own at once: PRAGMA quick_check; the index scans (meaningful only where
 * quick_check found nothing: on a damaged b-tree page they stop, or differ,
 * because of it); and the foreign key, identity and version checks. */
int kv_manifest_check_btrees(struct kv_manifest *m, kv_check_report_fn *report, void *arg);
int kv_manifest_check_index_sums(struct kv_manifest *m, kv_check_report_fn *report,
				 void *arg);
int kv_manifest_check_refs(struct kv_manifest *m, kv_check_report_fn *report, void *arg);
/*
 * kv_manifest_check_index_sums in halves, for fsck, whose row pass reads
 * every row anyway: new lists every table's indexes; scan_indexes scans
 * each index alone (on a connection of its own, while the rows are read
 * on another); the row pass sums the table side as it reads
 * (kv_manifest_check_rows with sums); compare scans the tables the pass
 * did not read to the end, and reports each index that differs from its
 * table, or holds a UNIQUE key twice: the number of lines, or -errno.
 * The index scans and the row pass may run at once on two threads (they
 * fill different fields); compare runs after both have returned.
 */
int kv_check_sums_new(struct kv_manifest *m, struct kv_check_sums **out);
void kv_check_sums_free(struct kv_check_sums *s);   /* NULL: no-op */
int kv_check_sums_scan_indexes(struct kv_manifest *m, struct kv_check_sums *s);
int kv_check_sums_compare(struct kv_manifest *m, struct kv_check_sums *s,
			  kv_check_report_fn *report, void *arg);

struct kv_check_extent {
	uint64_t id;
	int64_t stripe, segment, offset, length, refcount;  /* raw column values */
	bool ints_ok;        /* every integer column holds an integer */
	bool hash_ok;        /* hash is a KV_HASH_LEN-byte blob (then in hash) */
	uint8_t hash[KV_HASH_LEN];
};
struct kv_check_page {
	uint64_t ino;
	uint64_t extent_id;
	int64_t size;
	bool ident_ok;       /* the row's identity check matches */
	bool layer_ok;       /* its layer row exists (the foreign key) */
};
/* Every extent row by id, every page row by ino; fn's non-zero stops the
 * walk and is returned. */
int kv_manifest_walk_extents(struct kv_manifest *m,
			     int (*fn)(void *arg, const struct kv_check_extent *e),
			     void *arg);
int kv_manifest_walk_pages(struct kv_manifest *m,
			   int (*fn)(void *arg, const struct kv_check_page *p),
			   void *arg);
/* "model/layer/name" of page ino into out, "?" for a missing parent (for
 * the lines naming a page; the walk carries no names). -ENOENT if no row. */
int kv_manifest_page_path(struct kv_manifest *m, uint64_t ino, char *out, size_t len);
/* PRAGMA quick_check: every b-tree page of the database readable and well
 * formed (not the index-to-table agreement integrity_check also proves).
 * 0, or KV_ERR_CORRUPT with a log line per problem. The mount runs it: a
 * damaged index page would otherwise fail only later, on some commit. */
int kv_manifest_quick_check(struct kv_manifest *m);

/*
 * Inode numbers held by more than one row of models, layers and pages
 * (which share one number space; two daemons on one store make these), or
 * by a row at all for the root's (1). Each extra holder is one report()
 * line; with fix, in one transaction, every row but the first (models, then
 * layers, then pages) gets a number above all others, its children follow
 * and identity checks are recomputed. Returns how many inodes, or -errno.
 */
int kv_manifest_check_inodes(struct kv_manifest *m, bool fix,
			     kv_check_report_fn *report, void *arg);
/* Repair: set extent id's refcount to count (>= 1). -ENOENT if no such row. */
int kv_manifest_set_refcount(struct kv_manifest *m, uint64_t id, uint32_t count);

/* Bytes of one element for a dtype name (case-insensitive: f16 fp16 bf16 2,
 * f32 fp32 4, f64 fp64 8, f8 fp8 fp8_e4m3 fp8_e5m2 i8 int8 u8 1), 0 if unknown. */
unsigned kv_dtype_size(const char *dtype);
/* Payload bytes of one page under geo (K and V):
 * 2 * page_tokens * kv_heads * head_dim * dtype size; 0 if geometry is unset,
 * the dtype unknown or the product overflows. */
uint64_t kv_geometry_page_bytes(const struct kv_geometry *geo);
/* Validate geometry: all unset (zero, dtype "") is fine; otherwise layers,
 * kv_heads, head_dim, page_tokens > 0, a known dtype and a page of at most
 * 1 GiB. -EINVAL with a log line naming the field otherwise. */
int kv_geometry_check(const struct kv_geometry *geo);

#endif
