/*
 * Writing the journal anew as a snapshot of the manifest (journal.c says
 * what the journal is): at mkfs, when recovery finds it missing, damaged or
 * behind, after an fsck repair; and, in the background (journal_compact.c),
 * when it has grown well past its last snapshot. Written to
 * kvfs.journal.tmp, synced, renamed over the old one.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "journal_i.h"

#define SNAPSHOT_FRAME (4u << 20)   /* snapshot rows per frame, in bytes */

static int encode_header(struct kv_manifest *m, struct mf_journal *b)
{
	struct kv_store_meta *meta = calloc(1, sizeof(*meta));
	sqlite3_stmt *st = NULL;
	int rc;

	if (!meta)
		return -ENOMEM;
	rc = kv_manifest_meta(m, meta);
	if (rc < 0)
		goto out;
	b->snapshotting = true;
	mfj_put_u64(b, meta->segment_size);
	mfj_put_u64(b, meta->capacity);
	mfj_put_u64(b, (uint64_t)meta->created_ns);
	mfj_put_name(b, meta->uuid, sizeof(meta->uuid) - 1);
	/* The stripes as recorded (relative inside the store), not as
	 * resolved: a rebuilt copy of a store must use its own stripes. */
	rc = sqlite3_prepare_v2(m->db, "SELECT path FROM stripes ORDER BY id", -1, &st, NULL);
	if (rc != SQLITE_OK) {
		rc = mf_db_fail(m->db, m->path, rc, "reading stripes");
		goto out;
	}
	mfj_put_u64(b, meta->nstripes);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW)
		mfj_put_name(b, mf_col_str(st, 0), 4095);
	rc = rc == SQLITE_DONE ? 0 : mf_db_fail(m->db, m->path, rc, "reading stripes");
	if (rc == 0 && b->nomem)
		rc = -ENOMEM;
out:
	sqlite3_finalize(st);
	free(meta);
	return rc;
}

struct snap {
	struct kv_manifest *m;
	struct mf_journal b;       /* encoder (snapshotting) */
	int fd;
	const char *path;
	uint64_t off, seq, records;
	uint64_t flushed;            /* written back up to here */
	const _Atomic bool *cancel;  /* a compaction being stopped */
};

/*
 * Write back what the frames so far put in the page cache, one frame
 * behind: a snapshot of 270 MB left to the final fdatasync sat dirty in
 * the page cache, and that fdatasync then held the disk long enough to
 * stall the committer's own syncs by seconds. Best effort: the final
 * fdatasync is what makes it durable.
 */
static void snap_writeback(struct snap *s)
{
	uint64_t from = s->flushed;

	sync_file_range(s->fd, (off_t)from, (off_t)(s->off - from), SYNC_FILE_RANGE_WRITE);
	if (from >= SNAPSHOT_FRAME)
		sync_file_range(s->fd, 0, (off_t)from, SYNC_FILE_RANGE_WAIT_BEFORE |
				SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
	s->flushed = s->off;
}

static int snap_flush(struct snap *s, bool force)
{
	int rc;

	if (s->b.nomem)
		return -ENOMEM;
	if (s->cancel && *s->cancel)
		return -ECANCELED;
	if (s->b.len == 0 || (!force && s->b.len < SNAPSHOT_FRAME))
		return 0;
	rc = mfj_write_frame(s->fd, s->path, &s->off, MFJ_SNAPSHOT, s->seq, s->b.buf, s->b.len);
	mf_journal_discard(&s->b);
	if (rc == 0)
		snap_writeback(s);
	return rc;
}

static int snap_model(void *a, const struct kv_model_rec *r)
{
	struct snap *s = a;

	mf_journal_model(&s->b, r);
	s->records++;
	return snap_flush(s, false);
}

static int snap_layer(void *a, const struct kv_layer_rec *r)
{
	struct snap *s = a;

	mf_journal_layer(&s->b, r);
	s->records++;
	return snap_flush(s, false);
}

static int snap_extent(void *a, const struct kv_extent_rec *r)
{
	struct snap *s = a;

	mf_journal_extent(&s->b, r);
	s->records++;
	return snap_flush(s, false);
}

static int snap_page(void *a, const struct kv_page_rec *r)
{
	struct snap *s = a;

	mf_journal_page(&s->b, r);
	s->records++;
	return snap_flush(s, false);
}

static int fsync_dir_of(const char *path)
{
	char *dir = strdup(path), *slash;
	int fd, rc = 0;

	if (!dir)
		return -ENOMEM;
	slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	fd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fsync(fd) < 0)
		rc = -errno;
	if (fd >= 0)
		close(fd);
	free(dir);
	return rc;
}

/*
 * Write a snapshot of what src reads (inside one read transaction: the
 * caller's, or one of its own), as of batch seq, into a new file at tmp:
 * header, rows, end frame, fdatasync'ed. src may be a second connection
 * read on another thread (journal_compact.c): nothing here touches the
 * journal being appended to. *cancel (may be NULL) stops it between frames
 * with -ECANCELED. On failure tmp is removed.
 */
int mfj_snapshot_write(struct kv_manifest *src, uint64_t seq, const char *tmp,
		       const _Atomic bool *cancel, struct mfj_snapshot *out)
{
	static const struct kv_manifest_visitor v = {
		.model = snap_model, .layer = snap_layer, .extent = snap_extent,
		.page = snap_page,
	};
	struct snap s = { .m = src, .fd = -1, .seq = seq, .cancel = cancel };
	uint8_t count[8];
	int rc;

	mf_journal_init(&s.b);
	s.path = tmp;
	s.fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (s.fd < 0) {
		rc = -errno;
		kv_log(KV_LOG_ERR, "journal %s: cannot create: %s", tmp, strerror(errno));
		goto out;
	}
	rc = encode_header(src, &s.b);
	if (rc == 0)
		rc = mfj_write_frame(s.fd, tmp, &s.off, MFJ_HEADER, 0, s.b.buf, s.b.len);
	mf_journal_discard(&s.b);
	if (rc == 0)
		rc = kv_manifest_load(src, &v, &s);
	if (rc == 0)
		rc = snap_flush(&s, true);
	mfj_le64(count, s.records);
	if (rc == 0)
		rc = mfj_write_frame(s.fd, tmp, &s.off, MFJ_SNAPSHOT_END, s.seq, count, 8);
	if (rc == 0 && fdatasync(s.fd) < 0) {
		rc = -errno;
		kv_log(KV_LOG_ERR, "journal %s: fdatasync: %s", tmp, strerror(errno));
	}
	if (rc < 0) {
		if (s.fd >= 0) {
			close(s.fd);
			unlink(tmp);
		}
		goto out;
	}
	out->fd = s.fd;
	out->end = s.off;
	out->seq = s.seq;
	out->records = s.records;
out:
	mf_journal_fini(&s.b);
	return rc;
}

/*
 * Put a written snapshot (and whatever the caller appended to it) in place
 * of the journal: rename over it, sync the directory, append from now on
 * to the new file, whose valid bytes end at end and whose batch seq last
 * starts at last_at. Consumes o->fd. On failure the old journal stays
 * (the caller removes tmp).
 */
int mfj_snapshot_install(struct kv_manifest *m, const char *tmp, struct mfj_snapshot *o,
			 uint64_t end, uint64_t seq, uint64_t last_at)
{
	int rc = 0;

	if (rename(tmp, m->j.path) < 0) {
		rc = -errno;
		kv_log(KV_LOG_ERR, "journal %s: putting the rewritten one in place failed: "
		       "%s; the old one stays", m->j.path, kv_strerror(rc));
		close(o->fd);
		o->fd = -1;
		return rc;
	}
	/* The name is the new file's now: appends must go there even if the
	 * rename is not durable yet (the old file would take them to an
	 * unlinked inode). */
	rc = fsync_dir_of(m->j.path);
	if (rc < 0)
		kv_log(KV_LOG_ERR, "journal %s: syncing its directory after the rewrite: %s; "
		       "a crash now may bring back the journal before it", m->j.path,
		       kv_strerror(rc));
	if (m->j.fd >= 0)
		close(m->j.fd);
	m->j.fd = o->fd;
	o->fd = -1;
	m->j.end = end;
	m->j.snapshot_end = o->end;
	m->j.seq = seq;
	m->j.last_at = last_at;
	/* Mounts read from the last batch on (best effort: without the
	 * record they read the whole new journal once). */
	mfj_record_place(m, last_at, o->end);
	return 0;
}

int kv_manifest_journal_rewrite(struct kv_manifest *m)
{
	struct mfj_snapshot o;
	char *tmp = NULL;
	int rc;

	if (m->in_txn)
		return -EINVAL;
	/* Done here and now, so one in the background would be stale. */
	mfj_compact_stop(m);
	if (asprintf(&tmp, "%s/%s.tmp", m->store_dir, KV_JOURNAL_FILE) < 0)
		return -ENOMEM;
	rc = mfj_snapshot_write(m, mfj_manifest_seq(m), tmp, NULL, &o);
	if (rc == 0) {
		rc = mfj_snapshot_install(m, tmp, &o, o.end, o.seq, o.end - MFJ_END_FRAME);
		if (rc == 0)
			kv_log(KV_LOG_DEBUG, "journal %s: rewritten as a snapshot of %" PRIu64
			       " rows (%" PRIu64 " bytes)", m->j.path, o.records, o.end);
	}
	if (rc < 0) {
		kv_log(KV_LOG_ERR, "journal %s: rewriting it failed: %s; the old one stays",
		       m->j.path, kv_strerror(rc));
		unlink(tmp);
	}
	free(tmp);
	return rc;
}
