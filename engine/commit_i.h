/*
 * Private to the committer (engine/commit.c: the queue and the committer
 * thread; engine/commit_batch.c: the syncer thread, which takes a batch off
 * the queue and makes its payloads durable, and applying a batch to the
 * manifest in one transaction).
 */
#ifndef KVFS_COMMIT_I_H
#define KVFS_COMMIT_I_H

#include "kvfs_i.h"

struct failed_ext {
	uint64_t id;
	int err;
};

struct op {
	enum kvfs_op_kind kind;
	uint64_t seq;
	struct kv_node_info node;     /* snapshot when queued */
	bool drop_extent;             /* DEL_PAGE: last reference to the extent */
	bool unref_extent;            /* DEL_PAGE: others still share the extent */
	bool with_next;               /* commit in the same transaction as the next op */
	bool free_extent;             /* after_commit: punch node.ext once unlocked */
	struct kvfs_event *ev;        /* KV event records it makes once durable */
	kvfs_on_durable_fn *on_durable; /* the queuer's: what durability means to it */
	bool ev_ok;                   /* applied in the transaction: publish ev */
	/* new pages only */
	bool new_page;                /* sealed page: its first row */
	bool shares;                  /* ... naming an existing extent (dedup) */
	bool shares_pending;          /* ... one an earlier op writes (commit window) */
	int err;                      /* shares_pending: that write failed (committer) */
	struct kvfs_data *payload;
	struct kv_io io;
	bool has_write;
	bool written;                 /* under commit.lock */
	struct kvfs_commit *c;
	struct op *next;
};

struct kvfs_commit {
	pthread_t thread;             /* the committer: transactions */
	pthread_t sync_thread;        /* the syncer: payloads made durable */
	pthread_mutex_t lock;
	pthread_cond_t work_cv;       /* (syncer) ops queued, ready taken, or stop */
	pthread_cond_t ready_cv;      /* (committer) a batch is ready, or sync_done */
	pthread_cond_t io_cv;         /* a payload write completed */
	pthread_cond_t done_cv;       /* committed_seq or fail_seq advanced */
	struct op *head, **tail;
	struct op *ready;             /* a batch synced, not yet taken to commit */
	uint64_t queued_ops;          /* ops on the queue (head) ... */
	uint64_t queued_bytes;        /* ... and their payload bytes */
	bool committing;              /* the committer is applying a batch */
	uint64_t next_seq;            /* seq of the next queued op */
	uint64_t committed_seq;       /* every op <= this is durable (or failed) */
	uint64_t fail_seq;            /* newest op that could not be made durable */
	uint64_t *failed_inos;        /* withdrawn pages: later ops on them are skipped */
	size_t nfailed;
	struct failed_ext *failed_exts; /* extents whose write failed: their sharers too */
	size_t nfailed_exts;
	bool pair_open;               /* last queued op waits for its partner */
	unsigned groups;              /* open kvfs_commit_group_begin calls */
	int64_t atime_flushed_ns;     /* committer thread only: last idle work */
	_Atomic(kvfs_idle_fn *) idle_work;
	bool stop;
	bool sync_done;               /* the syncer stopped: nothing more comes */
	bool running, sync_running;
	_Atomic int last_err;         /* the last transaction's error, 0 once one commits */
};

/* Payload bytes an op holds (what batches are bounded by). */
uint64_t kvfs_commit_op_bytes(const struct op *o);
/* Take up to max ops (and about max_bytes of payload) off the queue, in
 * order, never splitting an atomic pair (commit.lock held). */
struct op *kvfs_commit_take_batch(struct kvfs_commit *c, unsigned max,
				  uint64_t max_bytes);
/* May the syncer take a batch now (commit.lock held)? Queuers wake it
 * only then: a wake-up per page queued while it must wait costs CPU the
 * writers need. */
bool kvfs_commit_batch_due(struct kvfs *fs, struct kvfs_commit *c);
/* The syncer thread (arg: struct kvfs): batches off the queue, their
 * payloads made durable, handed to the committer through ready. */
void *kvfs_commit_syncer(void *arg);
/* Wait for the batch's payload writes, then fdatasync their segments. */
void kvfs_commit_make_payloads_durable(struct kvfs *fs, struct op *batch);
/* A page op whose payload or page failed: nothing of it is applied. */
bool kvfs_commit_op_skipped(struct kvfs_commit *c, struct op *o);
/* A new page's failure: its payload write's, or the write's of the pending
 * extent it shares (once its batch was applied); else 0. */
int kvfs_commit_op_error(const struct op *o);
/* Apply the batch in one transaction; *dropped gets the seq of an op a
 * constraint refused. 0, or the error that rolled the transaction back. */
int kvfs_commit_apply_batch(struct kvfs *fs, struct op *batch, uint64_t *dropped);

#endif
