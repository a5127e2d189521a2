/*
 * Reading the journal back (journal.c says what it is): kv_manifest_recover
 * applies at open whatever committed batches the manifest lacks, and
 * attaches the journal for appends; kv_manifest_journal_rewrite compacts it
 * into a snapshot of the manifest; kv_manifest_rebuild makes a new manifest
 * from the journal alone.
 *
 * Applying is idempotent where it can be (puts are upserts by key, a delete
 * of a missing row is skipped) and refcounts are recounted from the pages
 * afterwards, so a batch that was journaled, failed to commit and was
 * retried (and so appears twice) replays to the same rows.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "journal_i.h"


struct frame {
	uint32_t kind;
	uint64_t seq;
	const uint8_t *body;
	size_t len;
};

/* A parsed journal: its valid prefix, as frames. */
struct jfile {
	uint8_t *data;
	size_t size, valid;
	struct frame *fr;
	size_t n;
	size_t first_batch;        /* index of the first BATCH frame */
	bool header, snapshot;     /* a header, and a complete snapshot */
	uint64_t snap_seq, last_seq;
};

static void jfile_free(struct jfile *f)
{
	if (f->data)
		munmap(f->data, f->size);
	free(f->fr);
	memset(f, 0, sizeof(*f));
}

/* Mapped, not read: a journal grows to 4 times its snapshot before it is
 * compacted, and recovery only walks it once. */
static int read_whole(const char *path, struct jfile *f)
{
	struct stat sb;
	int fd, rc = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &sb) < 0) {
		rc = -errno;
		goto out;
	}
	f->size = (size_t)sb.st_size;
	if (f->size == 0)
		goto out;
	f->data = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (f->data == MAP_FAILED) {
		rc = -errno;
		f->data = NULL;
		kv_log(KV_LOG_ERR, "journal %s: cannot map it: %s", path, strerror(-rc));
	}
out:
	close(fd);
	return rc;
}

static bool add_frame(struct jfile *f, const struct frame *fr)
{
	if ((f->n & (f->n - 1)) == 0 || f->n == 0) {
		struct frame *nf = realloc(f->fr, (f->n ? f->n * 2 : 16) * sizeof(*nf));

		if (!nf)
			return false;
		f->fr = nf;
	}
	f->fr[f->n++] = *fr;
	return true;
}

/* The frame at off of the mapped file, if it is whole and its checksum
 * holds; false for a torn, damaged or absent one. */
static bool frame_at(const struct jfile *f, size_t off, struct frame *fr)
{
	const uint8_t *h;

	if (off > f->size || f->size - off < MFJ_HEAD)
		return false;
	h = f->data + off;
	fr->kind = (uint32_t)(mfj_get64(h) >> 32);
	fr->seq = mfj_get64(h + 8);
	fr->len = mfj_get64(h + 16);
	if ((uint32_t)mfj_get64(h) != MFJ_MAGIC || fr->len > MFJ_MAX_BODY ||
	    fr->len > f->size - off - MFJ_HEAD)
		return false;
	fr->body = h + MFJ_HEAD;
	return mfj_frame_check(h, fr->body, fr->len) == mfj_get64(h + 24);
}

/* Where frame i of f starts in the file. */
static uint64_t frame_start(const struct jfile *f, size_t i)
{
	return (uint64_t)(f->fr[i].body - f->data) - MFJ_HEAD;
}

/* Frames in order: HEADER, SNAPSHOT..., SNAPSHOT_END, BATCH seq+1, +2, ...
 * The first frame that is torn, damaged or out of order ends the journal. */
static int parse(const char *path, struct jfile *f)
{
	size_t off = 0;
	struct frame fr;
	int rc = read_whole(path, f);

	if (rc < 0)
		return rc;
	while (frame_at(f, off, &fr)) {
		bool ok;

		switch (fr.kind) {
		case MFJ_HEADER:
			ok = f->n == 0;
			break;
		case MFJ_SNAPSHOT:
			ok = f->header && !f->snapshot &&
			     (f->n == 1 || f->fr[f->n - 1].seq == fr.seq);
			break;
		case MFJ_SNAPSHOT_END:
			ok = f->header && !f->snapshot &&
			     (f->n == 1 || f->fr[f->n - 1].seq == fr.seq);
			break;
		case MFJ_BATCH:
			ok = f->snapshot && fr.seq == f->last_seq + 1;
			break;
		default:
			ok = false;
		}
		if (!ok || !add_frame(f, &fr))
			break;
		if (fr.kind == MFJ_HEADER)
			f->header = true;
		if (fr.kind == MFJ_SNAPSHOT_END) {
			f->snapshot = true;
			f->snap_seq = f->last_seq = fr.seq;
			f->first_batch = f->n;
		}
		if (fr.kind == MFJ_BATCH)
			f->last_seq = fr.seq;
		off += MFJ_HEAD + fr.len;
	}
	f->valid = off;
	return 0;
}

/* Where the batches begin in the file: as recorded (the short way), or
 * after the snapshot's end frame. */
static uint64_t batches_begin(const struct kv_manifest *m, const struct jfile *f)
{
	if (m->j.snapshot_end)
		return m->j.snapshot_end;
	return f->first_batch < f->n ? frame_start(f, f->first_batch) : f->valid;
}

/* meta.journal_at, if the manifest has one that parses. */
static bool recorded_place(struct kv_manifest *m, uint64_t *last, uint64_t *batches)
{
	unsigned long long a = 0, b = 0;
	sqlite3_stmt *st;
	bool ok = false;

	if (mf_query_row(m->db, m->path, "SELECT value FROM meta WHERE key = 'journal_at'",
			 NULL, &st) == 1) {
		ok = sscanf(mf_col_str(st, 0), "%llu %llu", &a, &b) == 2;
		sqlite3_finalize(st);
	}
	*last = a;
	*batches = b;
	return ok;
}

/*
 * The short way, where the manifest recorded where its last batch lies
 * (meta.journal_at): check the header and that frame (batch mseq, or the
 * snapshot's end frame right after a rewrite), then read only what follows
 * it. parse() reads and checks every frame: the whole snapshot and up to
 * three times as much in batches, 2 GB at 10M pages, at every mount. The
 * frames before are checked when someone needs them (fsck --rebuild).
 * false: the record does not match this file (an older manifest, a
 * rewrite not recorded yet, a copied journal): parse it all.
 */
static bool parse_from_record(struct kv_manifest *m, uint64_t mseq, struct jfile *f)
{
	uint64_t last = 0, batches = 0, off;
	struct frame fr;

	if (!recorded_place(m, &last, &batches) || read_whole(m->j.path, f) < 0)
		return false;
	if (!frame_at(f, 0, &fr) || fr.kind != MFJ_HEADER || !add_frame(f, &fr))
		goto whole;
	f->header = true;
	if (last > f->size || !frame_at(f, last, &fr) || fr.seq != mseq)
		goto whole;
	if (fr.kind == MFJ_SNAPSHOT_END ? last + MFJ_HEAD + fr.len != batches :
	    fr.kind != MFJ_BATCH || last < batches)
		goto whole;
	if (!add_frame(f, &fr))
		goto whole;
	/* As parse() would leave it, with everything up to batch mseq
	 * standing for the snapshot: replay starts after it. */
	f->snapshot = true;
	f->snap_seq = f->last_seq = mseq;
	f->first_batch = f->n;
	off = last + MFJ_HEAD + fr.len;
	while (frame_at(f, off, &fr) && fr.kind == MFJ_BATCH &&
	       fr.seq == f->last_seq + 1 && add_frame(f, &fr)) {
		f->last_seq = fr.seq;
		off += MFJ_HEAD + fr.len;
	}
	f->valid = off;
	m->j.snapshot_end = batches;
	return true;
whole:
	jfile_free(f);
	return false;
}

/* ---- decoding and applying records ---- */

struct reader {
	const uint8_t *p, *end;
	bool bad;
};

static uint64_t get_u64(struct reader *r)
{
	uint64_t v;

	if (r->bad || r->end - r->p < 8) {
		r->bad = true;
		return 0;
	}
	v = mfj_get64(r->p);
	r->p += 8;
	return v;
}

static void get_name(struct reader *r, char *out, size_t max)
{
	size_t n;

	if (r->bad || r->end - r->p < 2) {
		r->bad = true;
		return;
	}
	n = r->p[0] | (size_t)r->p[1] << 8;
	r->p += 2;
	if (n > max || (size_t)(r->end - r->p) < n) {
		r->bad = true;
		return;
	}
	memcpy(out, r->p, n);
	out[n] = '\0';
	r->p += n;
}

static void get_attr(struct reader *r, struct kv_obj_attr *a)
{
	a->mode = (uint32_t)get_u64(r);
	a->uid = (uint32_t)get_u64(r);
	a->gid = (uint32_t)get_u64(r);
	a->ctime_ns = (int64_t)get_u64(r);
	a->mtime_ns = (int64_t)get_u64(r);
	a->atime_ns = (int64_t)get_u64(r);
}

static int apply_record(struct kv_manifest *m, struct reader *r)
{
	uint8_t kind = *r->p++;

	switch (kind) {
	case MF_REC_MODEL: {
		struct kv_model_rec rec = { .ino = get_u64(r) };

		get_attr(r, &rec.attr);
		rec.geo.layers = (uint32_t)get_u64(r);
		rec.geo.kv_heads = (uint32_t)get_u64(r);
		rec.geo.head_dim = (uint32_t)get_u64(r);
		rec.geo.page_tokens = (uint32_t)get_u64(r);
		get_name(r, rec.geo.dtype, KV_DTYPE_MAX);
		get_name(r, rec.name, KV_NAME_MAX);
		return r->bad ? KV_ERR_CORRUPT : kv_manifest_put_model(m, &rec);
	}
	case MF_REC_LAYER: {
		struct kv_layer_rec rec = { .ino = get_u64(r) };

		rec.model_ino = get_u64(r);
		rec.layer = (uint32_t)get_u64(r);
		get_attr(r, &rec.attr);
		get_name(r, rec.name, KV_NAME_MAX);
		return r->bad ? KV_ERR_CORRUPT : kv_manifest_put_layer(m, &rec);
	}
	case MF_REC_EXTENT: {
		struct kv_extent_rec rec = { .id = get_u64(r) };

		rec.ext.stripe = (uint32_t)get_u64(r);
		rec.ext.segment = (uint32_t)get_u64(r);
		rec.ext.offset = get_u64(r);
		rec.ext.length = get_u64(r);
		if (!r->bad && r->end - r->p >= KV_HASH_LEN) {
			memcpy(rec.hash, r->p, KV_HASH_LEN);
			r->p += KV_HASH_LEN;
		} else {
			r->bad = true;
		}
		rec.refcount = (uint32_t)get_u64(r);
		if (r->bad)
			return KV_ERR_CORRUPT;
		/* The empty pages' extent has no place; its row is made by its
		 * first reference, and the recount sets its count. */
		if (rec.id == KV_EXTENT_EMPTY)
			return kv_manifest_ref_extent(m, KV_EXTENT_EMPTY, +1);
		rec.refcount = rec.refcount ? rec.refcount : 1;
		return kv_manifest_put_extent(m, &rec);
	}
	case MF_REC_PAGE: {
		struct kv_page_rec rec = { .ino = get_u64(r) };

		rec.layer_ino = get_u64(r);
		rec.extent_id = get_u64(r);
		rec.size = get_u64(r);
		get_attr(r, &rec.attr);
		get_name(r, rec.name, KV_NAME_MAX);
		return r->bad ? KV_ERR_CORRUPT : kv_manifest_put_page(m, &rec);
	}
	case MF_REC_DEL_MODEL:
	case MF_REC_DEL_LAYER:
	case MF_REC_DEL_EXTENT:
	case MF_REC_DEL_PAGE: {
		uint64_t key = get_u64(r);

		if (r->bad)
			return KV_ERR_CORRUPT;
		return kind == MF_REC_DEL_MODEL ? kv_manifest_del_model(m, key) :
		       kind == MF_REC_DEL_LAYER ? kv_manifest_del_layer(m, key) :
		       kind == MF_REC_DEL_EXTENT ? kv_manifest_del_extent(m, key) :
		       kv_manifest_del_page(m, key);
	}
	case MF_REC_REF_EXTENT: {
		uint64_t id = get_u64(r);
		int64_t delta = (int64_t)get_u64(r);

		if (r->bad || delta < -1000000 || delta > 1000000)
			return KV_ERR_CORRUPT;
		return kv_manifest_ref_extent(m, id, (int)delta);
	}
	}
	r->bad = true;
	return KV_ERR_CORRUPT;
}

/* Changes a replay skips rather than stops at: the same refusals the
 * committer skips (a row already there, a delete of a row already gone). */
static bool skippable(int rc)
{
	return rc == -EEXIST || rc == -EINVAL || rc == -ENOENT || rc == -ENOTEMPTY;
}

struct replay_stats {
	uint64_t applied, skipped;
};

static int apply_body(struct kv_manifest *m, const struct frame *fr, struct replay_stats *rs)
{
	struct reader r = { .p = fr->body, .end = fr->body + fr->len };

	while (r.p < r.end) {
		int rc = apply_record(m, &r);

		if (r.bad) {
			kv_log(KV_LOG_ERR, "journal %s: batch %" PRIu64 " holds a record that "
			       "cannot be decoded", m->j.path, fr->seq);
			return KV_ERR_CORRUPT;
		}
		if (rc < 0 && !skippable(rc))
			return rc;
		if (rc < 0)
			rs->skipped++;
		else
			rs->applied++;
	}
	return 0;
}

/* Refcounts from the pages themselves; extents no page names go (their
 * space is reclaimed at mount). The empty pages' row stays. */
static int recount(struct kv_manifest *m)
{
	int rc = mf_exec(m->db, m->path,
			 "UPDATE extents SET refcount = (SELECT count(*) FROM pages "
			 "WHERE pages.extent_id = extents.id)", "recounting references");

	if (rc == 0)
		rc = mf_exec(m->db, m->path, "DELETE FROM extents WHERE refcount = 0 "
			     "AND id != 0", "dropping unreferenced extents");
	return rc;
}

static int set_seq(struct kv_manifest *m, uint64_t seq)
{
	sqlite3_stmt *st = m->st[ST_SET_JOURNAL_SEQ];
	int rc;

	sqlite3_bind_int64(st, 1, (int64_t)seq);
	rc = sqlite3_step(st);
	sqlite3_reset(st);
	return rc == SQLITE_DONE ? 0 : mf_db_fail(m->db, m->path, rc, "recording journal_seq");
}

/* Apply frames [from, to) of f in one transaction, recount, record seq. */
static int replay(struct kv_manifest *m, const struct jfile *f, size_t from, size_t to,
		  uint64_t seq, struct replay_stats *rs)
{
	size_t i;
	int rc;

	m->j.replaying = true;
	rc = kv_manifest_begin(m);
	for (i = from; rc == 0 && i < to; i++)
		if (f->fr[i].kind == MFJ_SNAPSHOT || f->fr[i].kind == MFJ_BATCH)
			rc = apply_body(m, &f->fr[i], rs);
	if (rc == 0)
		rc = recount(m);
	if (rc == 0)
		rc = set_seq(m, seq);
	if (rc == 0 && to > from &&
	    (f->fr[to - 1].kind == MFJ_BATCH || f->fr[to - 1].kind == MFJ_SNAPSHOT_END))
		rc = mfj_record_place(m, frame_start(f, to - 1), batches_begin(m, f));
	if (rc == 0)
		rc = kv_manifest_commit(m);
	else
		kv_manifest_rollback(m);
	m->j.replaying = false;
	return rc;
}

/* ---- the header ---- */

static int decode_header(const struct frame *fr, struct kv_store_meta *meta)
{
	struct reader r = { .p = fr->body, .end = fr->body + fr->len };
	uint64_t i, n;

	memset(meta, 0, sizeof(*meta));
	meta->segment_size = get_u64(&r);
	meta->capacity = get_u64(&r);
	meta->created_ns = (int64_t)get_u64(&r);
	get_name(&r, meta->uuid, sizeof(meta->uuid) - 1);
	n = get_u64(&r);
	if (n == 0 || n > KV_MAX_STRIPES)
		return KV_ERR_CORRUPT;
	for (i = 0; i < n && !r.bad; i++)
		get_name(&r, meta->stripes[i], sizeof(meta->stripes[i]) - 1);
	meta->nstripes = (unsigned)n;
	return r.bad ? KV_ERR_CORRUPT : 0;
}

uint64_t mfj_manifest_seq(struct kv_manifest *m)
{
	sqlite3_stmt *st;
	uint64_t v = 0;

	if (mf_query_row(m->db, m->path, "SELECT value FROM meta WHERE key = 'journal_seq'",
			 NULL, &st) == 1) {
		if (sqlite3_column_type(st, 0) == SQLITE_INTEGER &&
		    sqlite3_column_int64(st, 0) > 0)
			v = (uint64_t)sqlite3_column_int64(st, 0);
		sqlite3_finalize(st);
	}
	return v;
}

/* ---- recovery at open ---- */

static int attach(struct kv_manifest *m, const struct jfile *f)
{
	int fd = open(m->j.path, O_RDWR | O_CLOEXEC);

	if (fd < 0) {
		kv_log(KV_LOG_ERR, "journal %s: cannot open: %s", m->j.path, strerror(errno));
		return -errno;
	}
	if (f->valid < f->size) {
		/* A torn last frame after a crash, or damage: the next append
		 * overwrites it anyway; cut it so the file says what it holds. */
		kv_log(f->size - f->valid > (1u << 20) ? KV_LOG_WARN : KV_LOG_INFO,
		       "journal %s: %zu bytes after batch %" PRIu64 " are torn or "
		       "damaged; dropped", m->j.path, f->size - f->valid, f->last_seq);
		if (ftruncate(fd, (off_t)f->valid) < 0)
			kv_log(KV_LOG_WARN, "journal %s: truncating: %s", m->j.path,
			       strerror(errno));
	}
	if (m->j.fd >= 0)
		close(m->j.fd);
	m->j.fd = fd;
	m->j.end = f->valid;
	m->j.seq = f->last_seq;
	m->j.snapshot_end = batches_begin(m, f);
	return 0;
}

static int uuid_of(struct kv_manifest *m, char uuid[37])
{
	sqlite3_stmt *st;
	int rc = mf_query_row(m->db, m->path, "SELECT value FROM meta WHERE key = 'uuid'",
			      NULL, &st);

	if (rc <= 0)
		return rc < 0 ? rc : KV_ERR_CORRUPT;
	snprintf(uuid, 37, "%s", mf_col_str(st, 0));
	sqlite3_finalize(st);
	return 0;
}

/* Does f belong to this manifest's store? */
static bool same_store(struct kv_manifest *m, const struct jfile *f)
{
	struct kv_store_meta *meta;
	char uuid[37];
	bool same;

	if (!f->header || uuid_of(m, uuid) < 0)
		return false;
	meta = malloc(sizeof(*meta));
	if (!meta)
		return false;
	same = decode_header(&f->fr[0], meta) == 0 && strcmp(meta->uuid, uuid) == 0;
	free(meta);
	return same;
}

int kv_manifest_recover(struct kv_manifest *m, struct kv_recover_stats *st)
{
	struct kv_recover_stats dummy;
	struct replay_stats rs = { 0, 0 };
	struct jfile f = { 0 };
	uint64_t mseq = mfj_manifest_seq(m);
	int rc;

	st = st ? st : &dummy;
	memset(st, 0, sizeof(*st));
	mfj_compact_stop(m);   /* attach() below replaces the file it copies from */
	rc = parse_from_record(m, mseq, &f) ? 0 : parse(m->j.path, &f);
	if (rc == -ENOENT) {
		kv_log(KV_LOG_INFO, "journal %s: none yet; writing one from the manifest",
		       m->j.path);
		st->rewritten = true;
		return kv_manifest_journal_rewrite(m);
	}
	if (rc < 0)
		goto out;
	if (!same_store(m, &f) || !f.snapshot) {
		kv_log(KV_LOG_WARN, "journal %s: %s; writing a new one from the manifest",
		       m->j.path, !f.header ? "no valid header" : !f.snapshot ?
		       "its snapshot is incomplete" : "it belongs to another store");
		st->rewritten = true;
		rc = kv_manifest_journal_rewrite(m);
		goto out;
	}
	if (f.snap_seq > mseq) {
		kv_log(KV_LOG_ERR, "manifest %s is older than its journal's snapshot "
		       "(journal_seq %" PRIu64 " < %" PRIu64 "): was kvfs.db restored from "
		       "an old copy? Run `kvfs fsck --rebuild %s` to rebuild it from the "
		       "journal", m->path, mseq, f.snap_seq, m->store_dir);
		rc = KV_ERR_CORRUPT;
		goto out;
	}
	if (f.last_seq < mseq) {
		kv_log(KV_LOG_WARN, "journal %s ends at batch %" PRIu64 " but the manifest "
		       "has committed %" PRIu64 ": the journal lost its tail; writing a new "
		       "one from the manifest", m->j.path, f.last_seq, mseq);
		st->rewritten = true;
		rc = kv_manifest_journal_rewrite(m);
		goto out;
	}
	if (f.last_seq > mseq) {
		size_t from = f.first_batch + (size_t)(mseq - f.snap_seq);

		st->batches = f.last_seq - mseq;
		rc = replay(m, &f, from, f.n, f.last_seq, &rs);
		if (rc < 0) {
			kv_log(KV_LOG_ERR, "journal %s: applying batches %" PRIu64 "..%" PRIu64
			       " failed: %s", m->j.path, mseq + 1, f.last_seq, kv_strerror(rc));
			goto out;
		}
		st->changes = rs.applied;
		st->skipped = rs.skipped;
		if (st->batches > 1)
			kv_log(KV_LOG_ERR, "MANIFEST WAS BEHIND ITS JOURNAL: %s had committed "
			       "only up to batch %" PRIu64 " of %" PRIu64 " (kvfs.db-wal deleted "
			       "after a crash, or kvfs.db restored from an older copy?); applied "
			       "the %" PRIu64 " missing batches (%" PRIu64 " changes) from %s, so "
			       "nothing acknowledged was lost", m->path, mseq, f.last_seq,
			       st->batches, rs.applied, m->j.path);
		else
			kv_log(KV_LOG_INFO, "journal %s: applied batch %" PRIu64 " (%" PRIu64
			       " changes), journaled before a crash and not yet committed",
			       m->j.path, f.last_seq, rs.applied);
	}
	rc = attach(m, &f);
	if (rc == 0)
		mf_journal_maybe_rewrite(m);
out:
	jfile_free(&f);
	return rc;
}

int kv_manifest_journal_behind(struct kv_manifest *m, uint64_t *batches,
			       const char **damaged)
{
	struct jfile f = { 0 };
	uint64_t mseq = mfj_manifest_seq(m);
	int rc = parse(m->j.path, &f);

	*batches = 0;
	*damaged = NULL;
	if (rc == 0 && same_store(m, &f) && f.snapshot && f.last_seq > mseq &&
	    f.snap_seq <= mseq)
		*batches = f.last_seq - mseq;
	/* Read whole, it must reach the manifest's batch: else a frame
	 * before it is damaged (recovery's short way does not read them). */
	if (rc == 0 && !same_store(m, &f))
		*damaged = "its header is damaged or names another store";
	else if (rc == 0 && !f.snapshot)
		*damaged = "its snapshot is damaged or incomplete";
	else if (rc == 0 && f.last_seq < mseq)
		*damaged = "a frame before the manifest's last committed batch is damaged";
	jfile_free(&f);
	return rc;
}

/* ---- rebuilding the manifest from the journal alone ---- */

static int set_aside(const char *store_dir, char *aside, size_t len)
{
	static const char *const sfx[] = { "", "-wal", "-shm" };
	char from[4200], to[4200];
	size_t i;

	snprintf(aside, len, "%s/%s.damaged-%lld", store_dir, KV_MANIFEST_FILE,
		 (long long)time(NULL));
	for (i = 0; i < 3; i++) {
		snprintf(from, sizeof(from), "%s/%s%s", store_dir, KV_MANIFEST_FILE, sfx[i]);
		snprintf(to, sizeof(to), "%s%s", aside, sfx[i]);
		if (rename(from, to) < 0 && errno != ENOENT) {
			kv_log(KV_LOG_ERR, "rebuild: cannot move %s aside: %s", from,
			       strerror(errno));
			return -errno;
		}
	}
	return 0;
}

bool kv_manifest_has_journal(const char *store_dir)
{
	char path[4096 + 32];

	snprintf(path, sizeof(path), "%s/%s", store_dir, KV_JOURNAL_FILE);
	return access(path, F_OK) == 0;
}

int kv_manifest_rebuild(const char *store_dir, struct kv_rebuild_stats *st)
{
	struct kv_store_meta *meta = NULL;
	struct kv_manifest *m = NULL;
	struct replay_stats rs = { 0, 0 };
	struct jfile f = { 0 };
	char *jpath = NULL;
	int rc;

	memset(st, 0, sizeof(*st));
	if (asprintf(&jpath, "%s/%s", store_dir, KV_JOURNAL_FILE) < 0)
		return -ENOMEM;
	rc = parse(jpath, &f);
	if (rc < 0) {
		kv_log(KV_LOG_ERR, "rebuild: cannot read the journal %s: %s", jpath,
		       kv_strerror(rc));
		goto out;
	}
	meta = calloc(1, sizeof(*meta));
	rc = !meta ? -ENOMEM : !f.header || !f.snapshot ? KV_ERR_CORRUPT :
	     decode_header(&f.fr[0], meta);
	if (rc < 0) {
		kv_log(KV_LOG_ERR, "rebuild: the journal %s has no valid header and "
		       "snapshot: nothing to rebuild from", jpath);
		goto out;
	}
	rc = set_aside(store_dir, st->aside, sizeof(st->aside));
	if (rc == 0)
		rc = kv_manifest_create_bare(store_dir, meta);
	if (rc == 0)
		rc = kv_manifest_open(store_dir, &m);
	if (rc == 0)
		rc = replay(m, &f, 1, f.n, f.last_seq, &rs);
	if (rc < 0) {
		kv_log(KV_LOG_ERR, "rebuild of %s/%s from %s failed: %s", store_dir,
		       KV_MANIFEST_FILE, jpath, kv_strerror(rc));
		goto out;
	}
	st->batches = f.last_seq - f.snap_seq;
	st->changes = rs.applied;
	st->skipped = rs.skipped;
	st->dropped_bytes = f.size - f.valid;
	/* The journal now describes exactly the rebuilt manifest. */
	rc = kv_manifest_journal_rewrite(m);
out:
	kv_manifest_close(m);
	jfile_free(&f);
	free(meta);
	free(jpath);
	return rc;
}
