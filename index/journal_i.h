/*
 * Private to index/journal*.c: the journal's frame format (journal.c says
 * what it is for and how it is laid out) and the helpers its writer and its
 * reader (journal_replay.c) share.
 */
#ifndef KV_JOURNAL_I_H
#define KV_JOURNAL_I_H

#include "manifest_i.h"

#define MFJ_MAGIC 0x314a564bu     /* "KVJ1" little-endian */
#define MFJ_HEAD 32u
#define MFJ_MAX_BODY (256u << 20) /* a larger length is damage, not a frame */
#define MFJ_END_FRAME (MFJ_HEAD + 8u) /* a SNAPSHOT_END frame: head + count */

enum mfj_kind {
	MFJ_HEADER = 1,       /* store meta: uuid, sizes, stripes as recorded */
	MFJ_SNAPSHOT = 2,     /* rows of the manifest as of seq */
	MFJ_SNAPSHOT_END = 3, /* u64 record count of the snapshot */
	MFJ_BATCH = 4,        /* one committed transaction */
};

void mfj_put_u64(struct mf_journal *j, uint64_t v);
void mfj_put_name(struct mf_journal *j, const char *s, size_t max);
void mfj_le64(uint8_t *p, uint64_t v);
uint64_t mfj_get64(const uint8_t *p);
uint64_t mfj_frame_check(const uint8_t *head, const uint8_t *body, size_t len);
void mfj_frame_head(uint8_t head[MFJ_HEAD], uint32_t kind, uint64_t seq,
		    const uint8_t *body, size_t len);
int mfj_pwrite_all(int fd, const char *path, const void *buf, size_t len, uint64_t off);
/* Append one frame at *off (advanced past it). */
int mfj_write_frame(int fd, const char *path, uint64_t *off, uint32_t kind,
		    uint64_t seq, const uint8_t *body, size_t len);

/* meta.journal_seq: the last journaled batch the manifest committed. */
uint64_t mfj_manifest_seq(struct kv_manifest *m);
/*
 * meta.journal_at: where in the journal file the frame of batch
 * journal_seq starts (or, right after a rewrite, the snapshot's end
 * frame), and where its batches begin, "LAST BATCHES". Recorded in the
 * committing transaction (or after a rewrite), so that recovery at mount
 * can check that frame and read what follows it, instead of every frame of
 * the file. 0 or -errno (logged).
 */
int mfj_record_place(struct kv_manifest *m, uint64_t last, uint64_t batches);

/* journal_snapshot.c: a snapshot written to a file of its own, synced. */
struct mfj_snapshot {
	int fd;                /* open on it, for appends */
	uint64_t end;          /* just past its end frame */
	uint64_t seq;          /* the batch it stands for */
	uint64_t records;
};
int mfj_snapshot_write(struct kv_manifest *src, uint64_t seq, const char *tmp,
		       const _Atomic bool *cancel, struct mfj_snapshot *out);
int mfj_snapshot_install(struct kv_manifest *m, const char *tmp, struct mfj_snapshot *o,
			 uint64_t end, uint64_t seq, uint64_t last_at);

/* journal_compact.c: stop a compaction in the background, if one runs
 * (its file is removed); the committer's thread, outside a transaction. */
void mfj_compact_stop(struct kv_manifest *m);

#endif
