/*
 * Compacting the journal in the background. A journal grown to 4 times its
 * last snapshot (and at least compact_min) is written anew as a snapshot,
 * as journal_snapshot.c does, but on a thread of its own that reads a
 * second connection to the manifest: at 4M pages that write took longer
 * than the 20 s writers wait for durability, and it ran on the committer,
 * so every writer got EIO while it ran.
 *
 * The committer starts it between two commits (no transaction open), so
 * the second connection's read is pinned at exactly batch seq, the last one
 * committed, and the batches after it begin at the journal's end, from.
 * The committer goes on appending batches to the old file. At the first
 * commit after the snapshot is written, the committer copies what it
 * appended meanwhile, old[from, end), after the snapshot's end frame,
 * fdatasyncs, and renames the new file over the old one: the only part
 * that waits on the committer, and it is proportional to what was written
 * during the compaction, not to the manifest.
 *
 * Crash safety is the synchronous rewrite's: the new file is complete and
 * synced before the rename; before it, the old journal holds everything; a
 * kvfs.journal.tmp left by a crash is overwritten by the next compaction.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "journal_i.h"

#define COMPACT_MIN (64ull << 20)   /* never compact a journal smaller than this */
#define COPY_CHUNK (1u << 20)

struct mfj_compactor {
	pthread_t thread;
	struct kv_manifest *src;    /* second connection, read pinned at seq */
	char *tmp;                  /* STORE/kvfs.journal.tmp */
	uint64_t seq;               /* the last batch committed when it began */
	uint64_t from;              /* where the batches after seq begin (old file) */
	uint64_t started_ns;
	char *gate;                 /* KVFS_TEST_COMPACT_GATE: held while it exists */
	struct mfj_snapshot out;    /* the worker's result, read after the join */
	int rc;
	_Atomic bool cancel;
	_Atomic bool done;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* End the second connection's read and close it (either thread: the
 * worker when it is done, the committer for one that never started). */
static void src_close(struct mfj_compactor *c)
{
	if (!c->src)
		return;
	if (c->src->in_txn)
		mf_exec(c->src->db, c->src->path, "ROLLBACK", "ending a journal compaction's read");
	c->src->in_txn = false;
	kv_manifest_close(c->src);
	c->src = NULL;
}

static void *compact_main(void *a)
{
	struct mfj_compactor *c = a;

	pthread_setname_np(pthread_self(), "kvfs-compact");
	/* Behind the committer and the writers for the CPU: on a busy 2-vCPU
	 * machine, at the same priority, commits got a fraction of a core
	 * while it ran, and writers waited seconds for durability. It only
	 * has to finish before the journal grows much further. */
	setpriority(PRIO_PROCESS, (id_t)gettid(), 10);
	while (c->gate && !c->cancel && access(c->gate, F_OK) == 0)
		usleep(10000);
	c->rc = mfj_snapshot_write(c->src, c->seq, c->tmp, &c->cancel, &c->out);
	src_close(c);
	atomic_store(&c->done, true);
	return NULL;
}

static void compactor_free(struct mfj_compactor *c)
{
	src_close(c);
	if (c->out.fd >= 0)
		close(c->out.fd);
	free(c->tmp);
	free(c->gate);
	free(c);
}

/* Pin a read of the manifest at the last committed batch, on a connection
 * of its own, and hand it to a new thread. */
static int compact_start(struct kv_manifest *m)
{
	struct mfj_compactor *c = calloc(1, sizeof(*c));
	const char *gate = getenv("KVFS_TEST_COMPACT_GATE");
	uint64_t seq;
	int rc;

	if (!c)
		return -ENOMEM;
	c->out.fd = -1;
	c->seq = m->j.seq;
	c->from = m->j.end;
	c->started_ns = now_ns();
	if (gate && !(c->gate = strdup(gate))) {
		rc = -ENOMEM;
		goto fail;
	}
	if (asprintf(&c->tmp, "%s/%s.tmp", m->store_dir, KV_JOURNAL_FILE) < 0) {
		c->tmp = NULL;
		rc = -ENOMEM;
		goto fail;
	}
	rc = kv_manifest_open(m->store_dir, &c->src);
	if (rc < 0) {
		c->src = NULL;
		goto fail;
	}
	rc = mf_exec(c->src->db, c->src->path, "BEGIN", "starting a read");
	if (rc < 0)
		goto fail;
	c->src->in_txn = true;
	seq = mfj_manifest_seq(c->src);   /* the first read pins the snapshot */
	if (seq != c->seq) {
		kv_log(KV_LOG_ERR, "journal %s: the manifest reads batch %" PRIu64 " but the "
		       "journal's last is %" PRIu64 "; not compacting", m->j.path, seq, c->seq);
		rc = -EIO;
		goto fail;
	}
	rc = -pthread_create(&c->thread, NULL, compact_main, c);
	if (rc < 0)
		goto fail;
	m->compact = c;
	kv_log(KV_LOG_INFO, "journal %s: %" PRIu64 " bytes, %" PRIu64 " of them since its "
	       "last snapshot: compacting it in the background", m->j.path, m->j.end,
	       m->j.end - m->j.snapshot_end);
	return 0;
fail:
	compactor_free(c);
	return rc;
}

static int copy_range(struct kv_manifest *m, struct mfj_compactor *c, uint64_t n)
{
	uint8_t *buf = malloc(COPY_CHUNK);
	uint64_t done = 0;
	int rc = buf ? 0 : -ENOMEM;

	while (rc == 0 && done < n) {
		size_t len = n - done < COPY_CHUNK ? (size_t)(n - done) : COPY_CHUNK;
		ssize_t got = pread(m->j.fd, buf, len, (off_t)(c->from + done));

		if (got <= 0) {
			rc = got < 0 ? -errno : -EIO;
			kv_log(KV_LOG_ERR, "journal %s: reading batches to carry over: %s",
			       m->j.path, got < 0 ? strerror(errno) : "short file");
			break;
		}
		rc = mfj_pwrite_all(c->out.fd, c->tmp, buf, (size_t)got, c->out.end + done);
		done += (uint64_t)got;
	}
	if (rc == 0 && fdatasync(c->out.fd) < 0) {
		rc = -errno;
		kv_log(KV_LOG_ERR, "journal %s: fdatasync: %s", c->tmp, strerror(errno));
	}
	free(buf);
	return rc;
}

/* The snapshot is written: append the batches committed since it began
 * and put the new file in place. */
static int compact_install(struct kv_manifest *m, struct mfj_compactor *c)
{
	uint64_t n = m->j.end - c->from;
	uint64_t last_at = m->j.seq > c->seq ? m->j.last_at - c->from + c->out.end :
		c->out.end - MFJ_END_FRAME;
	int rc = copy_range(m, c, n);

	if (rc == 0)
		rc = mfj_snapshot_install(m, c->tmp, &c->out, c->out.end + n, m->j.seq, last_at);
	return rc;
}

/* Join the worker; install its snapshot if asked and it wrote one. */
static void compact_end(struct kv_manifest *m, bool install)
{
	struct mfj_compactor *c = m->compact;
	uint64_t old = m->j.end, batches;
	int rc;

	m->compact = NULL;
	pthread_join(c->thread, NULL);
	rc = !install ? -ECANCELED : c->rc ? c->rc : compact_install(m, c);
	batches = m->j.seq - c->seq;
	if (rc == 0) {
		m->compactions++;
		m->compact_retry_at = 0;
		kv_log(KV_LOG_INFO, "journal %s: compacted from %" PRIu64 " to %" PRIu64
		       " bytes in %.1f s (a snapshot of %" PRIu64 " rows, and %" PRIu64
		       " batches committed meanwhile)", m->j.path, old, m->j.end,
		       (double)(now_ns() - c->started_ns) / 1e9, c->out.records, batches);
	} else {
		unlink(c->tmp);
		/* Not at every commit from now on: after it grew some more. */
		m->compact_retry_at = m->j.end + m->compact_min;
		if (rc != -ECANCELED)
			kv_log(KV_LOG_ERR, "journal %s: compacting it failed: %s; the old one "
			       "stays, and is compacted again at %" PRIu64 " bytes", m->j.path,
			       kv_strerror(rc), m->compact_retry_at);
	}
	compactor_free(c);
}

void mf_journal_maybe_rewrite(struct kv_manifest *m)
{
	int rc;

	if (m->compact) {
		if (atomic_load(&m->compact->done))
			compact_end(m, true);
		return;
	}
	if (m->j.fd < 0 || m->in_txn || m->j.end < m->compact_min ||
	    m->j.end < m->j.snapshot_end * 4 || m->j.end < m->compact_retry_at)
		return;
	rc = compact_start(m);
	if (rc < 0) {
		m->compact_retry_at = m->j.end + m->compact_min;
		kv_log(KV_LOG_ERR, "journal %s: cannot start compacting it: %s; trying again "
		       "at %" PRIu64 " bytes", m->j.path, kv_strerror(rc), m->compact_retry_at);
	}
}

void mfj_compact_stop(struct kv_manifest *m)
{
	if (!m->compact)
		return;
	atomic_store(&m->compact->cancel, true);
	compact_end(m, false);
}

void mf_journal_compact_close(struct kv_manifest *m)
{
	/* Work already done is kept; a compaction still running is not waited
	 * for (it would be at 4 times the snapshot again next time). */
	if (m->compact && atomic_load(&m->compact->done))
		compact_end(m, true);
	else
		mfj_compact_stop(m);
}

void kv_manifest_journal_tune(struct kv_manifest *m, uint64_t compact_min)
{
	m->compact_min = compact_min ? compact_min : COMPACT_MIN;
}

void kv_manifest_journal_info(const struct kv_manifest *m, struct kv_journal_info *out)
{
	out->size = m->j.fd >= 0 ? m->j.end : 0;
	out->snapshot_end = m->j.snapshot_end;
	out->compactions = m->compactions;
	out->compacting = m->compact != NULL;
}
