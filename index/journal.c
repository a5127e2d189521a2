/*
 * The store's journal, STORE/kvfs.journal: the manifest's changes as an
 * append-only log, so that the store survives the loss of kvfs.db (deleted,
 * truncated, damaged) or of its WAL (deleted after a crash, which silently
 * rewinds SQLite to its last checkpoint).
 *
 * Each kv_manifest_commit that changed rows first appends one *batch* frame
 * holding those changes and fdatasyncs it, then records the batch's seq in
 * meta.journal_seq inside the SQLite transaction, then commits. So at any
 * moment the journal holds every committed change, in order, and at most one
 * batch the manifest has not committed (whose payloads were already synced:
 * rule 1 comes before the commit). kv_manifest_recover applies to the
 * manifest whatever batches it lacks (journal_replay.c); kv_manifest_rebuild
 * makes a new manifest from the journal alone.
 *
 * File: frames, each
 *     u32 magic "KVJ1" | u32 kind | u64 seq | u64 body length |
 *     u64 XXH3-64 of (the 24 bytes before it + body) | body
 * kinds: HEADER (store meta, first), SNAPSHOT (rows, seq = the manifest's
 * journal_seq when it was written; one or more frames), SNAPSHOT_END (the
 * record count), BATCH (one committed transaction; seqs consecutive after the
 * snapshot). A torn or damaged frame ends the journal: what follows is
 * ignored, and the next append overwrites it. Records in a body: u8 kind,
 * then fixed little-endian fields, names as u16 length + bytes.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY  /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "journal_i.h"

void mf_journal_init(struct mf_journal *j)
{
	memset(j, 0, sizeof(*j));
	j->fd = -1;
}

void mf_journal_fini(struct mf_journal *j)
{
	if (j->fd >= 0)
		close(j->fd);
	free(j->path);
	free(j->buf);
	mf_journal_init(j);
}

/* ---- encoding ---- */

static uint8_t *reserve(struct mf_journal *j, size_t n)
{
	if (j->nomem)
		return NULL;
	if (j->len + n > j->cap) {
		size_t cap = j->cap ? j->cap * 2 : 4096;
		uint8_t *nb;

		while (cap < j->len + n)
			cap *= 2;
		nb = realloc(j->buf, cap);
		if (!nb) {
			kv_log(KV_LOG_ERR, "journal: out of memory recording a change; "
			       "the transaction will fail and be retried");
			j->nomem = true;
			return NULL;
		}
		j->buf = nb;
		j->cap = cap;
	}
	j->len += n;
	return j->buf + j->len - n;
}

static void put_u8(struct mf_journal *j, uint8_t v)
{
	uint8_t *p = reserve(j, 1);

	if (p)
		*p = v;
}

void mfj_put_u64(struct mf_journal *j, uint64_t v)
{
	uint8_t *p = reserve(j, 8);

	if (p)
		mfj_le64(p, v);
}

static void put_bytes(struct mf_journal *j, const void *b, size_t n)
{
	uint8_t *p = reserve(j, n);

	if (p && n)
		memcpy(p, b, n);
}

void mfj_put_name(struct mf_journal *j, const char *s, size_t max)
{
	size_t n = strnlen(s, max);

	put_u8(j, (uint8_t)(n & 0xff));
	put_u8(j, (uint8_t)(n >> 8));
	put_bytes(j, s, n);
}

static void put_attr(struct mf_journal *j, const struct kv_obj_attr *a)
{
	mfj_put_u64(j, a->mode);
	mfj_put_u64(j, a->uid);
	mfj_put_u64(j, a->gid);
	mfj_put_u64(j, (uint64_t)a->ctime_ns);
	mfj_put_u64(j, (uint64_t)a->mtime_ns);
	mfj_put_u64(j, (uint64_t)a->atime_ns);
}

static bool recording(const struct mf_journal *j)
{
	return j->fd >= 0 && !j->replaying;
}

void mf_journal_model(struct mf_journal *j, const struct kv_model_rec *r)
{
	if (!recording(j) && !j->snapshotting)
		return;
	put_u8(j, MF_REC_MODEL);
	mfj_put_u64(j, r->ino);
	put_attr(j, &r->attr);
	mfj_put_u64(j, r->geo.layers);
	mfj_put_u64(j, r->geo.kv_heads);
	mfj_put_u64(j, r->geo.head_dim);
	mfj_put_u64(j, r->geo.page_tokens);
	mfj_put_name(j, r->geo.dtype, KV_DTYPE_MAX);
	mfj_put_name(j, r->name, KV_NAME_MAX);
}

void mf_journal_layer(struct mf_journal *j, const struct kv_layer_rec *r)
{
	if (!recording(j) && !j->snapshotting)
		return;
	put_u8(j, MF_REC_LAYER);
	mfj_put_u64(j, r->ino);
	mfj_put_u64(j, r->model_ino);
	mfj_put_u64(j, r->layer);
	put_attr(j, &r->attr);
	mfj_put_name(j, r->name, KV_NAME_MAX);
}

void mf_journal_extent(struct mf_journal *j, const struct kv_extent_rec *r)
{
	if (!recording(j) && !j->snapshotting)
		return;
	put_u8(j, MF_REC_EXTENT);
	mfj_put_u64(j, r->id);
	mfj_put_u64(j, r->ext.stripe);
	mfj_put_u64(j, r->ext.segment);
	mfj_put_u64(j, r->ext.offset);
	mfj_put_u64(j, r->ext.length);
	put_bytes(j, r->hash, KV_HASH_LEN);
	mfj_put_u64(j, r->refcount);
}

void mf_journal_page(struct mf_journal *j, const struct kv_page_rec *r)
{
	if (!recording(j) && !j->snapshotting)
		return;
	put_u8(j, MF_REC_PAGE);
	mfj_put_u64(j, r->ino);
	mfj_put_u64(j, r->layer_ino);
	mfj_put_u64(j, r->extent_id);
	mfj_put_u64(j, r->size);
	put_attr(j, &r->attr);
	mfj_put_name(j, r->name, KV_NAME_MAX);
}

void mf_journal_del(struct mf_journal *j, enum mf_rec_kind kind, uint64_t key)
{
	if (!recording(j))
		return;
	put_u8(j, (uint8_t)kind);
	mfj_put_u64(j, key);
}

void mf_journal_ref(struct mf_journal *j, uint64_t id, int delta)
{
	if (!recording(j))
		return;
	put_u8(j, MF_REC_REF_EXTENT);
	mfj_put_u64(j, id);
	mfj_put_u64(j, (uint64_t)(int64_t)delta);
}

void mf_journal_discard(struct mf_journal *j)
{
	j->len = 0;
	j->nomem = false;
}

/* ---- frames ---- */

void mfj_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

uint64_t mfj_get64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

uint64_t mfj_frame_check(const uint8_t *head, const uint8_t *body, size_t len)
{
	XXH3_state_t st;

	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, head, 24);
	XXH3_64bits_update(&st, body, len);
	return XXH3_64bits_digest(&st);
}

void mfj_frame_head(uint8_t head[MFJ_HEAD], uint32_t kind, uint64_t seq,
		    const uint8_t *body, size_t len)
{
	for (int i = 0; i < 4; i++) {
		head[i] = (uint8_t)(MFJ_MAGIC >> (8 * i));
		head[4 + i] = (uint8_t)(kind >> (8 * i));
	}
	mfj_le64(head + 8, seq);
	mfj_le64(head + 16, len);
	mfj_le64(head + 24, mfj_frame_check(head, body, len));
}

int mfj_pwrite_all(int fd, const char *path, const void *buf, size_t len, uint64_t off)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int rc = n < 0 ? -errno : -EIO;

			kv_log(KV_LOG_ERR, "journal %s: writing %zu bytes at %" PRIu64 ": %s",
			       path, len, off, strerror(-rc));
			return rc;
		}
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

int mfj_write_frame(int fd, const char *path, uint64_t *off, uint32_t kind,
		    uint64_t seq, const uint8_t *body, size_t len)
{
	uint8_t head[MFJ_HEAD];
	int rc;

	mfj_frame_head(head, kind, seq, body, len);
	rc = mfj_pwrite_all(fd, path, head, sizeof(head), *off);
	if (rc == 0)
		rc = mfj_pwrite_all(fd, path, body, len, *off + sizeof(head));
	if (rc == 0)
		*off += sizeof(head) + len;
	return rc;
}

int mf_journal_write_batch(struct kv_manifest *m, uint64_t *seq)
{
	struct mf_journal *j = &m->j;
	uint64_t off = j->end;
	int rc;

	*seq = 0;
	if (j->fd < 0 || j->len == 0)
		return 0;
	if (j->nomem)
		return -ENOMEM;
	rc = mfj_write_frame(j->fd, j->path, &off, MFJ_BATCH, j->seq + 1, j->buf, j->len);
	if (rc == 0 && fdatasync(j->fd) < 0) {
		rc = -errno;
		kv_log(KV_LOG_ERR, "journal %s: fdatasync: %s", j->path, strerror(errno));
	}
	if (rc < 0)
		return rc;
	/* Until the transaction commits, the frame may be overwritten by its
	 * retry: end and seq move only in mf_journal_batch_done. */
	j->pending_end = off;
	*seq = j->seq + 1;
	return 0;
}

void mf_journal_batch_done(struct mf_journal *j, uint64_t seq)
{
	if (seq == 0)
		return;
	j->seq = seq;
	j->last_at = j->end;
	j->end = j->pending_end;
	mf_journal_discard(j);
}

int mfj_record_place(struct kv_manifest *m, uint64_t last, uint64_t batches)
{
	sqlite3_stmt *st = m->st[ST_SET_JOURNAL_AT];
	char v[48];
	int rc;

	snprintf(v, sizeof(v), "%" PRIu64 " %" PRIu64, last, batches);
	sqlite3_bind_text(st, 1, v, -1, SQLITE_TRANSIENT);
	rc = sqlite3_step(st);
	sqlite3_reset(st);
	return rc == SQLITE_DONE ? 0 : mf_db_fail(m->db, m->path, rc,
						  "recording where the journal's last batch is");
}
