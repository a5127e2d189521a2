/*
 * The manifest's write side: transactions, puts and deletes, and fault
 * injection. Every change goes through a statement prepared once at open
 * (manifest.c); the committer thread is the only caller while a store is
 * mounted. Each change that succeeds is also recorded for the store's
 * journal (journal.c), which kv_manifest_commit makes durable before the
 * SQLite transaction commits.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <sqlite3.h>

#include "kvname.h"
#include "journal_i.h"
#include "manifest_i.h"

__attribute__((format(printf, 2, 3)))
static int bad_arg(const struct kv_manifest *m, const char *fmt, ...)
{
	char what[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	kv_log(KV_LOG_ERR, "manifest %s: refusing to store %s", m->path, what);
	return -EINVAL;
}
/* ---- fault injection ---- */

void kv_manifest_fault_arm(struct kv_manifest *m, unsigned what, unsigned nth,
			   int err, unsigned count)
{
	pthread_mutex_lock(&m->fault_lock);
	m->fault_what = what;
	m->fault_err = err < 0 ? err : -EIO;
	m->fault_count = count ? count : 1;
	atomic_store(&m->fault_nth, nth);
	pthread_mutex_unlock(&m->fault_lock);
}

/* The error an armed fault gives this operation of kind what, or 0. One
 * atomic load when disarmed: this runs for every row change. */
static int fault_fire(struct kv_manifest *m, unsigned what, const char *doing)
{
	int err = 0;

	if (!atomic_load_explicit(&m->fault_nth, memory_order_relaxed))
		return 0;
	pthread_mutex_lock(&m->fault_lock);
	if (m->fault_nth && (m->fault_what & what) && --m->fault_nth == 0) {
		err = m->fault_err;
		if (--m->fault_count > 0)
			m->fault_nth = 1;       /* the next one fails too */
	}
	pthread_mutex_unlock(&m->fault_lock);
	if (err)
		kv_log(KV_LOG_ERR, "manifest %s: %s: %s (injected fault)", m->path, doing,
		       kv_strerror(err));
	return err;
}

/* ---- transactions ---- */

/* Step a cached statement to completion, then make it reusable. */
__attribute__((format(printf, 4, 5)))
static int run(struct kv_manifest *m, enum stmt s, bool deleting, const char *fmt, ...)
{
	sqlite3_stmt *st = m->st[s];
	va_list ap;
	int rc;

	if (s >= ST_PUT_MODEL && s < ST_SET_JOURNAL_SEQ && (rc = fault_fire(m, KV_MF_FAULT_WRITE, "changing a row")))
		return rc;
	rc = sqlite3_step(st);
	if (rc == SQLITE_DONE) {
		rc = 0;
	} else {
		va_start(ap, fmt);
		rc = mf_vfail(m->db, m->path, rc, deleting, fmt, ap);
		va_end(ap);
	}
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	return rc;
}

/*
 * After some errors (SQLITE_FULL, IOERR, NOMEM) SQLite rolls the whole
 * transaction back by itself. The next put would then autocommit on its own,
 * making half a batch durable: refuse instead.
 */
static int txn_alive(struct kv_manifest *m)
{
	if (m->in_txn && sqlite3_get_autocommit(m->db)) {
		kv_log(KV_LOG_ERR, "manifest %s: the transaction was already rolled back "
		       "after an earlier error", m->path);
		return -EIO;
	}
	return 0;
}

int kv_manifest_begin(struct kv_manifest *m)
{
	int rc;

	if (m->in_txn) {
		kv_log(KV_LOG_ERR, "manifest %s: begin inside an open transaction", m->path);
		return -EINVAL;
	}
	mf_journal_discard(&m->j);
	rc = run(m, ST_BEGIN, false, "beginning a transaction");
	if (rc == 0)
		m->in_txn = true;
	return rc;
}

/* Bookkeeping, not a row change: no fault fires for it (fault counts stay
 * those of the rows), and the journal does not carry it. */
int kv_manifest_set_event_seq(struct kv_manifest *m, uint64_t seq)
{
	if (!m->in_txn || seq > INT64_MAX)
		return -EINVAL;
	sqlite3_bind_int64(m->st[ST_SET_EVENT_SEQ], 1, (int64_t)seq);
	return run(m, ST_SET_EVENT_SEQ, false, "recording event seq %" PRIu64, seq);
}

int kv_manifest_set_root_attr(struct kv_manifest *m, const struct kv_obj_attr *a)
{
	char v[48];

	if (!m->in_txn)
		return -EINVAL;
	snprintf(v, sizeof(v), "%o %" PRIu32 " %" PRIu32, a->mode & 07777, a->uid, a->gid);
	sqlite3_bind_text(m->st[ST_SET_ROOT_ATTR], 1, v, -1, SQLITE_TRANSIENT);
	return run(m, ST_SET_ROOT_ATTR, false, "recording the root's mode and owner");
}

/*
 * The journal first: the batch is durable in kvfs.journal, and its seq is
 * in the transaction, before SQLite commits. A crash in between leaves one
 * batch that kv_manifest_recover applies; a failed commit leaves a frame
 * that its retry overwrites.
 */
int kv_manifest_commit(struct kv_manifest *m)
{
	uint64_t seq = 0;
	int rc;

	if (!m->in_txn) {
		kv_log(KV_LOG_ERR, "manifest %s: commit without a transaction", m->path);
		return -EINVAL;
	}
	rc = txn_alive(m);
	if (rc == 0)
		rc = fault_fire(m, KV_MF_FAULT_COMMIT, "committing");
	if (rc == 0)
		rc = mf_journal_write_batch(m, &seq);
	if (rc == 0 && seq) {
		sqlite3_bind_int64(m->st[ST_SET_JOURNAL_SEQ], 1, (int64_t)seq);
		rc = run(m, ST_SET_JOURNAL_SEQ, false, "recording journal batch %" PRIu64, seq);
		/* Its frame starts at the journal's end before this batch. */
		if (rc == 0)
			rc = mfj_record_place(m, m->j.end, m->j.snapshot_end);
	}
	if (rc == 0)
		rc = run(m, ST_COMMIT, false, "committing");
	if (rc < 0) {
		kv_manifest_rollback(m);
		m->in_txn = false;
		return rc;
	}
	m->in_txn = false;
	mf_journal_batch_done(&m->j, seq);
	mf_journal_discard(&m->j);
	mf_journal_maybe_rewrite(m);
	return 0;
}

void kv_manifest_rollback(struct kv_manifest *m)
{
	mf_journal_discard(&m->j);
	if (!m->in_txn)
		return;
	m->in_txn = false;
	if (!sqlite3_get_autocommit(m->db))
		run(m, ST_ROLLBACK, false, "rolling back");
}

/* ---- puts and deletes ---- */

static bool id_ok(uint64_t v)
{
	return v >= 1 && v <= INT64_MAX;
}

static void bind_attr(sqlite3_stmt *st, int col, const struct kv_obj_attr *a)
{
	/* Type bits are implied by the table; only permissions are stored. */
	sqlite3_bind_int64(st, col, a->mode & 07777);
	sqlite3_bind_int64(st, col + 1, a->uid);
	sqlite3_bind_int64(st, col + 2, a->gid);
	sqlite3_bind_int64(st, col + 3, a->ctime_ns);
	sqlite3_bind_int64(st, col + 4, a->mtime_ns);
	sqlite3_bind_int64(st, col + 5, a->atime_ns);
}

/*
 * Binding a fixed-index parameter to a prepared statement cannot fail except
 * for out-of-memory on a text, which leaves the parameter NULL: every column
 * is NOT NULL, so the step then fails and is reported. Hence unchecked binds.
 */

int kv_manifest_put_model(struct kv_manifest *m, const struct kv_model_rec *r)
{
	sqlite3_stmt *st = m->st[ST_PUT_MODEL];
	int rc;

	if ((rc = txn_alive(m)))
		return rc;
	if (!id_ok(r->ino) || kv_name_check(r->name) < 0)
		return bad_arg(m, "model %" PRIu64 " '%.*s': bad inode or name", r->ino,
			       (int)KV_NAME_MAX, r->name);
	if (kv_geometry_check(&r->geo) < 0)
		return bad_arg(m, "model %" PRIu64 " '%s': bad geometry", r->ino, r->name);
	sqlite3_bind_int64(st, 1, (int64_t)r->ino);
	sqlite3_bind_text(st, 2, r->name, -1, SQLITE_STATIC);
	bind_attr(st, 3, &r->attr);
	sqlite3_bind_int64(st, 9, r->geo.layers);
	sqlite3_bind_int64(st, 10, r->geo.kv_heads);
	sqlite3_bind_int64(st, 11, r->geo.head_dim);
	sqlite3_bind_int64(st, 12, r->geo.page_tokens);
	sqlite3_bind_text(st, 13, r->geo.dtype, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 14, mf_ident_model(r->ino, r->name, &r->geo));
	rc = run(m, ST_PUT_MODEL, false, "put model %" PRIu64 " '%s'", r->ino, r->name);
	if (rc == 0)
		mf_journal_model(&m->j, r);
	return rc;
}

int kv_manifest_put_layer(struct kv_manifest *m, const struct kv_layer_rec *r)
{
	sqlite3_stmt *st = m->st[ST_PUT_LAYER];
	uint32_t num;
	int rc;

	if ((rc = txn_alive(m)))
		return rc;
	if (!id_ok(r->ino) || !id_ok(r->model_ino) || kv_name_check(r->name) < 0 ||
	    kv_layer_name_parse(r->name, &num) < 0 || num != r->layer)
		return bad_arg(m, "layer %" PRIu64 " '%.*s' (layer %" PRIu32 ") of model %"
			       PRIu64 ": bad inode, or name not the layer number",
			       r->ino, (int)KV_NAME_MAX, r->name, r->layer, r->model_ino);
	sqlite3_bind_int64(st, 1, (int64_t)r->ino);
	sqlite3_bind_int64(st, 2, (int64_t)r->model_ino);
	sqlite3_bind_int64(st, 3, r->layer);
	sqlite3_bind_text(st, 4, r->name, -1, SQLITE_STATIC);
	bind_attr(st, 5, &r->attr);
	sqlite3_bind_int64(st, 11, mf_ident_layer(r->ino, r->model_ino, r->layer, r->name));
	rc = run(m, ST_PUT_LAYER, false, "put layer %" PRIu64 " '%s' of model %" PRIu64,
		 r->ino, r->name, r->model_ino);
	if (rc == 0)
		mf_journal_layer(&m->j, r);
	return rc;
}

int kv_manifest_put_extent(struct kv_manifest *m, const struct kv_extent_rec *r)
{
	sqlite3_stmt *st = m->st[ST_PUT_EXTENT];
	const struct kv_extent *e = &r->ext;
	int rc;

	if ((rc = txn_alive(m)))
		return rc;
	if (!id_ok(r->id) || e->stripe >= KV_MAX_STRIPES || e->offset % KV_ALIGN ||
	    e->length == 0 || e->offset > INT64_MAX || e->length > INT64_MAX ||
	    r->refcount == 0)
		return bad_arg(m, "extent %" PRIu64 " (stripe %" PRIu32 " segment %" PRIu32
			       " offset %" PRIu64 " length %" PRIu64 " refcount %" PRIu32 ")",
			       r->id, e->stripe, e->segment, e->offset, e->length, r->refcount);
	sqlite3_bind_int64(st, 1, (int64_t)r->id);
	sqlite3_bind_int64(st, 2, e->stripe);
	sqlite3_bind_int64(st, 3, e->segment);
	sqlite3_bind_int64(st, 4, (int64_t)e->offset);
	sqlite3_bind_int64(st, 5, (int64_t)e->length);
	sqlite3_bind_blob(st, 6, r->hash, KV_HASH_LEN, SQLITE_STATIC);
	sqlite3_bind_int64(st, 7, r->refcount);
	rc = run(m, ST_PUT_EXTENT, false, "put extent %" PRIu64, r->id);
	if (rc == 0)
		mf_journal_extent(&m->j, r);
	return rc;
}

int kv_manifest_put_page(struct kv_manifest *m, const struct kv_page_rec *r)
{
	sqlite3_stmt *st = m->st[ST_PUT_PAGE];
	int rc;

	if ((rc = txn_alive(m)))
		return rc;
	if (!id_ok(r->ino) || !id_ok(r->layer_ino) ||
	    (r->extent_id == KV_EXTENT_EMPTY ? r->size != 0 : !id_ok(r->extent_id)) ||
	    r->size > INT64_MAX || kv_name_check(r->name) < 0)
		return bad_arg(m, "page %" PRIu64 " '%.*s' in layer %" PRIu64 " (extent %"
			       PRIu64 ", size %" PRIu64 ")", r->ino, (int)KV_NAME_MAX,
			       r->name, r->layer_ino, r->extent_id, r->size);
	sqlite3_bind_int64(st, 1, (int64_t)r->ino);
	sqlite3_bind_int64(st, 2, (int64_t)r->layer_ino);
	sqlite3_bind_text(st, 3, r->name, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 4, (int64_t)r->extent_id);
	sqlite3_bind_int64(st, 5, (int64_t)r->size);
	bind_attr(st, 6, &r->attr);
	sqlite3_bind_int64(st, 12, mf_ident_page(r->ino, r->layer_ino, r->name,
						 r->extent_id, r->size));
	rc = run(m, ST_PUT_PAGE, false, "put page %" PRIu64 " '%s' in layer %" PRIu64,
		 r->ino, r->name, r->layer_ino);
	if (rc == 0)
		mf_journal_page(&m->j, r);
	return rc;
}

static int del_row(struct kv_manifest *m, enum stmt s, enum mf_rec_kind kind,
		   const char *what, uint64_t key)
{
	int rc;

	if ((rc = txn_alive(m)))
		return rc;
	if (!id_ok(key))
		return -ENOENT;
	sqlite3_bind_int64(m->st[s], 1, (int64_t)key);
	rc = run(m, s, true, "delete %s %" PRIu64, what, key);
	if (rc == 0 && sqlite3_changes(m->db) == 0)
		rc = -ENOENT;
	if (rc == 0)
		mf_journal_del(&m->j, kind, key);
	return rc;
}

int kv_manifest_del_model(struct kv_manifest *m, uint64_t ino)
{
	return del_row(m, ST_DEL_MODEL, MF_REC_DEL_MODEL, "model", ino);
}

int kv_manifest_del_layer(struct kv_manifest *m, uint64_t ino)
{
	return del_row(m, ST_DEL_LAYER, MF_REC_DEL_LAYER, "layer", ino);
}

int kv_manifest_del_extent(struct kv_manifest *m, uint64_t id)
{
	return del_row(m, ST_DEL_EXTENT, MF_REC_DEL_EXTENT, "extent", id);
}

int kv_manifest_del_page(struct kv_manifest *m, uint64_t ino)
{
	return del_row(m, ST_DEL_PAGE, MF_REC_DEL_PAGE, "page", ino);
}


/* The row of KV_EXTENT_EMPTY, made on first use (stores made before empty
 * pages existed have none). */
static int empty_extent_row(struct kv_manifest *m)
{
	uint8_t hash[KV_HASH_LEN];
	sqlite3_stmt *st;
	int rc;

	kv_hash128(NULL, 0, hash);
	rc = sqlite3_prepare_v2(m->db, "INSERT OR IGNORE INTO extents (id, stripe, segment, "
				"\"offset\", length, hash, refcount) VALUES (0, 0, 0, 0, 0, ?1, 0)",
				-1, &st, NULL);
	if (rc != SQLITE_OK)
		return mf_db_fail(m->db, m->path, rc, "preparing the empty pages' extent row");
	sqlite3_bind_blob(st, 1, hash, KV_HASH_LEN, SQLITE_STATIC);
	rc = sqlite3_step(st);
	rc = rc == SQLITE_DONE ? 0 : mf_db_fail(m->db, m->path, rc, "adding the empty pages' extent row");
	sqlite3_finalize(st);
	return rc;
}

int kv_manifest_ref_extent(struct kv_manifest *m, uint64_t id, int delta)
{
	sqlite3_stmt *st = m->st[ST_REF_EXTENT];
	int rc;

	if ((rc = txn_alive(m)))
		return rc;
	if ((!id_ok(id) && id != KV_EXTENT_EMPTY) || delta == 0)
		return bad_arg(m, "refcount change %+d of extent %" PRIu64, delta, id);
	if (id == KV_EXTENT_EMPTY && delta > 0 && (rc = empty_extent_row(m)))
		return rc;
	sqlite3_bind_int64(st, 1, (int64_t)id);
	sqlite3_bind_int64(st, 2, delta);
	rc = run(m, ST_REF_EXTENT, false, "refcount %+d of extent %" PRIu64, delta, id);
	if (rc == 0 && sqlite3_changes(m->db) == 0) {
		kv_log(KV_LOG_ERR, "manifest %s: extent %" PRIu64 " is missing or its "
		       "refcount cannot change by %+d", m->path, id, delta);
		rc = -ENOENT;
	}
	if (rc == 0)
		mf_journal_ref(&m->j, id, delta);
	return rc;
}

int kv_manifest_touch_page(struct kv_manifest *m, uint64_t ino, int64_t atime_ns)
{
	sqlite3_stmt *st = m->st[ST_TOUCH_PAGE];
	int rc;

	if ((rc = txn_alive(m)))
		return rc;
	if (!id_ok(ino))
		return bad_arg(m, "access time of page %" PRIu64, ino);
	sqlite3_bind_int64(st, 1, (int64_t)ino);
	sqlite3_bind_int64(st, 2, atime_ns);
	return run(m, ST_TOUCH_PAGE, false, "access time of page %" PRIu64, ino);
}
