/*
 * The committer: group commit of namespace changes to the manifest, in the
 * order they became visible in memory.
 *
 * NOTES ON THE DESIGN
 *  1. Every namespace change is applied to the in-memory index first (that is
 *     what makes it visible) and queued here under kvfs.ns_lock, so the queue
 *     order is the order clients observed.
 *  2. A new page's payload write is submitted when the page is sealed; its
 *     manifest rows (extent, page) are written only after that write has
 *     completed and its segment was fdatasync'ed (kv_store_sync). Data, then
 *     the row: a crash can lose a sealed page that no fsync waited for, but
 *     never leaves a row pointing at unwritten bytes.
 *  3. The committer applies up to opts.commit_batch queued operations (as
 *     the syncer took them, rule 7) in one SQLite transaction
 *     (synchronous=FULL): that is what makes small pages cheap (see
 *     measurements: 7k commits/s vs 160k rows/s at 10k rows per
 *     transaction).
 *  4. An extent whose last page was deleted is freed (punched) only after the
 *     transaction deleting its rows committed, and only once no one holds
 *     the page open; before that it is still what a committed row or an
 *     open reader points at.
 *  5. fsync() waits for everything queued before it (kvfs_commit_wait_all):
 *     visibility of durability comes after durability.
 *  6. If a payload write or sync fails, that page is withdrawn (removed from
 *     the namespace, counted, logged, and reported to fsync waiters as EIO);
 *     no row for it is ever written. If a transaction fails, it is rolled
 *     back, waiters are told (EIO), and the batch is retried: nothing is lost
 *     while the daemon runs.
 *  7. Two threads, a pipeline of one batch: the syncer (commit_batch.c)
 *     takes batch N+1 off the queue, waits for its payload writes and
 *     fdatasyncs them while the committer applies batch N to the manifest,
 *     so the device never idles waiting for SQLite and its journal. It
 *     does so once a full batch is queued; with less, it waits for N to
 *     commit, as one thread did, so that batches (and the device flushes
 *     each one costs: data, journal, WAL) do not multiply. Rule 2
 *     holds per batch: the committer only ever takes a batch the syncer
 *     handed over synced (or with its failed pages marked, rule 6), and
 *     batches commit in queue order. A failed transaction is retried in
 *     place, never put back on the queue, where the syncer may already
 *     have taken what came after it.
 */
#include <errno.h>
#include <malloc.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "commit_i.h"

#define ATIME_FLUSH_SECS 30  /* access times reach the manifest this often */
#define STOP_RETRIES 5   /* transaction attempts at unmount before giving up */
#define COMMIT_STALL_SECS 60  /* a waiter gives up after this long with no commit */
/* Memory a burst of changes freed goes back to the kernel once the
 * committer has been idle this long after at least TRIM_MIN_CHANGES. */
#define TRIM_IDLE_SECS 2
#define TRIM_MIN_CHANGES 4096u

/* ---- queueing (ns_lock held by the caller) ---- */

static struct op *op_new(enum kvfs_op_kind kind, const struct kv_node_info *n)
{
	struct op *o = calloc(1, sizeof(*o));

	if (!o)
		return NULL;
	o->kind = kind;
	o->node = *n;
	return o;
}

/* The last queued op, or NULL (commit.lock held). */
static struct op *queue_tail(struct kvfs_commit *c)
{
	if (!c->head)
		return NULL;
	return (struct op *)((char *)c->tail - offsetof(struct op, next));
}

/* Put o at the queue's tail (commit.lock held). Its layer stays in RAM
 * until o is committed (index/unload.c): a layer reloaded from rows that
 * lack a change would lose it. */
static void append_locked(struct kvfs *fs, struct kvfs_commit *c, struct op *o)
{
	o->seq = c->next_seq++;
	if (fs->idx)
		kv_index_layer_queued(fs->idx, &o->node, o->seq);
	o->with_next |= c->groups > 0;
	*c->tail = o;
	c->tail = &o->next;
	c->pair_open = o->with_next;
	c->queued_ops++;
	c->queued_bytes += kvfs_commit_op_bytes(o);
}

static void enqueue(struct kvfs *fs, struct op *o)
{
	struct kvfs_commit *c = fs->commit;

	pthread_mutex_lock(&c->lock);
	append_locked(fs, c, o);
	if (kvfs_commit_batch_due(fs, c))
		pthread_cond_signal(&c->work_cv);
	pthread_mutex_unlock(&c->lock);
}

void kvfs_commit_group_begin(struct kvfs *fs)
{
	struct kvfs_commit *c = fs->commit;

	pthread_mutex_lock(&c->lock);
	c->groups++;
	pthread_mutex_unlock(&c->lock);
}

/* Under ns_lock no atomic pair is half queued (both halves are queued in
 * one ns_lock hold), so the tail's with_next is the group's to clear. */
void kvfs_commit_group_end(struct kvfs *fs)
{
	struct kvfs_commit *c = fs->commit;
	struct op *o;

	pthread_mutex_lock(&fs->ns_lock);
	pthread_mutex_lock(&c->lock);
	if (--c->groups == 0) {
		if ((o = queue_tail(c)))
			o->with_next = false;
		c->pair_open = false;
		pthread_cond_signal(&c->work_cv);
	}
	pthread_mutex_unlock(&c->lock);
	pthread_mutex_unlock(&fs->ns_lock);
}

/* Queueing a metadata op can only fail on OOM; losing the row would make the
 * manifest disagree with what clients saw, so retry rather than drop it. */
static struct op *op_new_retry(enum kvfs_op_kind kind, const struct kv_node_info *n)
{
	struct op *o;

	while (!(o = op_new(kind, n))) {
		kv_log(KV_LOG_WARN, "out of memory queueing a manifest change; retrying");
		usleep(10000);
	}
	return o;
}

void kvfs_commit_put_page(struct kvfs *fs, const struct kv_node_info *n,
			  struct kvfs_event *ev)
{
	struct op *o = op_new_retry(KVFS_OP_PUT_PAGE, n);

	o->ev = ev;
	enqueue(fs, o);
}

void kvfs_commit_del_page(struct kvfs *fs, const struct kv_node_info *n,
			  bool drop_extent, bool unref, bool with_next,
			  enum kvfs_event_type ev, kvfs_on_durable_fn *on_durable)
{
	struct op *o = op_new_retry(KVFS_OP_DEL_PAGE, n);

	o->on_durable = on_durable;
	if (ev != KVFS_EV_NONE)
		o->ev = kvfs_event_capture(fs, ev, n);
	o->drop_extent = drop_extent;
	o->unref_extent = unref;
	o->with_next = with_next;
	enqueue(fs, o);
}

void kvfs_commit_put_dir(struct kvfs *fs, const struct kv_node_info *n)
{
	/* The root's mode and owner go with the models' rows (their parent:
	 * no directory times to persist either). */
	enqueue(fs, op_new_retry(n->kind == KV_KIND_LAYER ? KVFS_OP_PUT_LAYER
					: KVFS_OP_PUT_MODEL, n));
}

void kvfs_commit_del_dir(struct kvfs *fs, const struct kv_node_info *n)
{
	enqueue(fs, op_new_retry(n->kind == KV_KIND_MODEL ? KVFS_OP_DEL_MODEL
					: KVFS_OP_DEL_LAYER, n));
}

/* Runs on the store's I/O thread: it only flags the op and wakes the committer. */
static void on_written_op(void *arg)
{
	struct op *o = arg;

	pthread_mutex_lock(&o->c->lock);
	o->written = true;
	pthread_cond_broadcast(&o->c->io_cv);
	pthread_mutex_unlock(&o->c->lock);
}

void kvfs_commit_pair_abandon(struct kvfs *fs)
{
	struct kvfs_commit *c = fs->commit;
	struct op *o;

	pthread_mutex_lock(&c->lock);
	if (c->groups == 0) {     /* else the group's end closes it */
		if ((o = queue_tail(c)))
			o->with_next = false;
		c->pair_open = false;
		pthread_cond_signal(&c->work_cv);
	}
	pthread_mutex_unlock(&c->lock);
}

int kvfs_commit_new_page(struct kvfs *fs, const struct kv_node_info *n,
			 struct kvfs_data *payload, enum kvfs_share share,
			 enum kvfs_event_type ev, kvfs_on_durable_fn *on_durable)
{
	struct kvfs_commit *c = fs->commit;
	struct op *o = op_new(KVFS_OP_PUT_PAGE, n);
	int rc;

	if (!o)
		return -ENOMEM;
	o->on_durable = on_durable;
	o->ev = kvfs_event_capture(fs, ev, n);
	o->new_page = true;
	o->payload = kvfs_data_get(payload);
	if (share != KVFS_SHARE_NONE) {
		/* The bytes are durable already, or an earlier op writes them
		 * (its row commits first: queue order): only the row is ours. */
		o->shares = true;
		o->shares_pending = share == KVFS_SHARE_PENDING;
		enqueue(fs, o);
		return 0;
	}
	o->has_write = true;
	o->c = c;
	o->io.op = KV_IO_WRITE;
	o->io.ext = n->ext;
	o->io.buf = payload->bytes;
	/* Seq and queue position are taken before the write can complete, so
	 * the committer always finds the op it must wait for. */
	pthread_mutex_lock(&c->lock);
	append_locked(fs, c, o);
	pthread_mutex_unlock(&c->lock);
	rc = kv_store_io_async(fs->store, &o->io, 1, on_written_op, o);
	if (rc < 0) {
		/* Nothing was queued: complete it as a failed write so the
		 * committer withdraws the page the normal way. */
		o->io.res = rc;
		on_written_op(o);
	}
	pthread_mutex_lock(&c->lock);
	if (kvfs_commit_batch_due(fs, c))
		pthread_cond_signal(&c->work_cv);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

/* ---- the committer thread ---- */

/* Punching holes is disk I/O: done after ns_lock is released, so namespace
 * operations never wait behind a bulk delete. */
static void free_extents(struct kvfs *fs, struct op *batch)
{
	struct op *o;
	int rc;

	for (o = batch; o; o = o->next) {
		if (!o->free_extent)
			continue;
		rc = kvfs_extent_release(fs, &o->node.ext);
		if (rc < 0)
			kv_log(KV_LOG_ERR, "freeing extent of page %s (inode %llu): %s",
			       o->node.name, (unsigned long long)o->node.ino,
			       kv_strerror(rc));
	}
}

/* A skipped delete that dropped the last reference to a withdrawn page's
 * extent (the page was forgotten before its write failed): no row names
 * the extent, and its on_durable frees it (withdraw leaves that to it). */
static bool frees_withdrawn(const struct op *o)
{
	return o->kind == KVFS_OP_DEL_PAGE && o->drop_extent;
}

static void after_commit(struct kvfs *fs, struct op *batch)
{
	struct kvfs_commit *c = fs->commit;
	struct op *o;

	pthread_mutex_lock(&fs->ns_lock);
	for (o = batch; o; o = o->next) {
		struct kvfs_durable d = { .node = &o->node, .wrote = o->has_write };
		int err = kvfs_commit_op_error(o);
		bool failed = err < 0;

		if (failed) {
			/* Rule 6: the page is withdrawn, its row never written. */
			kv_log(KV_LOG_ERR, "page %s (inode %llu) lost: writing %s payload "
			       "failed: %s", o->node.name, (unsigned long long)o->node.ino,
			       o->has_write ? "its" : "the identical page's it shares",
			       kv_strerror(err));
			atomic_fetch_add(&fs->st.pages_lost, 1);
			d.err = err;
		} else if (kvfs_commit_op_skipped(c, o) && !frees_withdrawn(o)) {
			continue;
		} else if (o->has_write) {
			/* Its row is committed: now the extent may be shared. */
			kv_index_extent_durable(fs->idx, o->node.extent_id);
		}
		if (o->on_durable) {
			o->on_durable(fs, &d);
			o->free_extent = d.free_extent;
		} else if (failed && o->has_write) {
			o->free_extent = true;    /* nobody else knows of its bytes */
		}
	}
	pthread_cond_broadcast(&fs->seal_cv);
	pthread_mutex_unlock(&fs->ns_lock);
	free_extents(fs, batch);
}

/* The batch committed: its changes' KV event records go out, in queue
 * order, numbered as the transaction recorded (kvfs_commit_apply_batch).
 * After ns_lock: publishing answers readers' parked reads. */
static void publish_events(struct kvfs *fs, struct op *batch)
{
	struct kvfs_event *chain = NULL, **tail = &chain;
	struct op *o;

	for (o = batch; o; o = o->next) {
		if (!o->ev || !o->ev_ok)
			continue;
		*tail = o->ev;
		while (*tail)
			tail = &(*tail)->next;
		o->ev = NULL;
	}
	kvfs_events_publish(fs, chain);
}

static void finish_batch(struct kvfs *fs, struct op *batch, uint64_t failed)
{
	struct kvfs_commit *c = fs->commit;
	uint64_t last = 0;
	unsigned n = 0;
	struct op *o;

	while (batch) {
		o = batch;
		batch = o->next;
		last = o->seq;
		if (o->has_write) {
			if (o->io.res < 0)
				failed = o->seq;
			else {
				atomic_fetch_add(&fs->st.bytes_written, o->node.size);
				atomic_fetch_add(&fs->st.ssd_bytes_written,
						 kv_extent_footprint(&o->node.ext));
			}
		}
		if (o->err < 0)
			failed = o->seq;
		else if (o->shares && o->node.extent_id != KV_EXTENT_EMPTY) {
			atomic_fetch_add(&fs->st.pages_deduped, 1);
			atomic_fetch_add(&fs->st.bytes_deduped, o->node.size);
		}
		kvfs_data_put(o->payload);
		kvfs_event_free(o->ev);     /* not published: not applied */
		free(o);
		n++;
	}
	atomic_fetch_add(&fs->st.commits, 1);
	pthread_mutex_lock(&c->lock);
	c->committed_seq = last;
	if (failed)
		c->fail_seq = failed;
	pthread_cond_broadcast(&c->done_cv);
	pthread_mutex_unlock(&c->lock);
	kv_log(KV_LOG_DEBUG, "committed %u manifest changes", n);
}

static void fail_waiters(struct kvfs_commit *c, struct op *batch)
{
	struct op *last = batch;

	while (last->next)
		last = last->next;
	pthread_mutex_lock(&c->lock);
	c->fail_seq = last->seq;
	pthread_cond_broadcast(&c->done_cv);
	pthread_mutex_unlock(&c->lock);
}

static void idle_work(struct kvfs *fs)
{
	kvfs_idle_fn *fn = atomic_load(&fs->commit->idle_work);

	if (fn)
		fn(fs);
	fs->commit->atime_flushed_ns = kvfs_now_ns();
}

void kvfs_commit_set_idle_work(struct kvfs *fs, kvfs_idle_fn *fn)
{
	atomic_store(&fs->commit->idle_work, fn);
}

/*
 * A burst of changes is over: give back what it freed. Each page written
 * leaves short-lived objects in the malloc arena of the thread that took
 * it (about 2 KB and six allocations a page on the fast path, freed here
 * after the commit), and glibc returns an arena's free memory only from
 * its top: after a 300K-page flood, 390 MB of free arena memory stayed
 * resident. The write buffers a flood kept warm (up to the write-back
 * budget) are only RSS once it is over too. malloc_trim walks every arena
 * under its lock, so it runs only when the writers have been quiet for
 * TRIM_IDLE_SECS, not between batches.
 */
static void trim_memory(void)
{
	uint64_t bufs = kv_buf_trim();
	int heap = malloc_trim(0);

	kv_log(KV_LOG_DEBUG, "idle: gave back %llu bytes of write buffers%s",
	       (unsigned long long)bufs, heap ? " and free malloc memory" : "");
}

/* The next batch the syncer made durable (rule 7), waiting at most secs
 * for one. NULL when it timed out, or when the syncer has stopped (*done)
 * and nothing is left. */
static struct op *next_synced(struct kvfs_commit *c, int secs, bool *done)
{
	struct timespec ts;
	struct op *batch;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += secs;
	pthread_mutex_lock(&c->lock);
	while (!c->ready && !c->sync_done)
		if (pthread_cond_timedwait(&c->ready_cv, &c->lock, &ts) == ETIMEDOUT)
			break;
	batch = c->ready;
	c->ready = NULL;
	c->committing = batch != NULL;
	*done = c->sync_done && !batch;
	if (batch)      /* the syncer may take the next batch now */
		pthread_cond_signal(&c->work_cv);
	pthread_mutex_unlock(&c->lock);
	return batch;
}

/* The committer is done with its batch: the syncer need not wait for a
 * full batch any more (kvfs_commit_syncer). */
static void committed(struct kvfs_commit *c)
{
	pthread_mutex_lock(&c->lock);
	c->committing = false;
	pthread_cond_signal(&c->work_cv);
	pthread_mutex_unlock(&c->lock);
}

/* Another failed attempt: time to give up? Only while unmounting, after
 * STOP_RETRIES of them (*failures counts them across batches). */
static bool failed_too_often(struct kvfs_commit *c, unsigned *failures)
{
	bool stop;

	pthread_mutex_lock(&c->lock);
	stop = c->stop;
	pthread_mutex_unlock(&c->lock);
	return stop && ++*failures >= STOP_RETRIES;
}

/* Unmounting: do not hang forever on a manifest that keeps failing. What
 * was not committed is lost at restart (its space is reclaimed then);
 * fsync never claimed otherwise. */
static void give_up(struct kvfs *fs, struct op *batch, unsigned failures)
{
	uint64_t n = 1;
	struct op *last;

	for (last = batch; last->next; last = last->next)
		n++;
	kv_log(KV_LOG_ERR, "giving up at unmount after %u failed attempts: "
	       "%llu manifest changes were not committed", failures,
	       (unsigned long long)n);
	atomic_fetch_add(&fs->lost_changes, n);
	finish_batch(fs, batch, last->seq);
}

/*
 * Apply a synced batch until it commits. A failed transaction is retried
 * with the same batch, in place: never put back on the queue, where the
 * syncer has already taken the changes queued after it (rule 7). *failures
 * counts attempts that failed while unmounting, across batches.
 */
static void commit_synced(struct kvfs *fs, struct op *batch, unsigned *failures)
{
	struct kvfs_commit *c = fs->commit;
	uint64_t dropped;
	int rc;

	for (;;) {
		dropped = 0;
		rc = kvfs_commit_apply_batch(fs, batch, &dropped);
		if (rc == 0)
			break;
		if (failed_too_often(c, failures))
			return give_up(fs, batch, *failures);
		/* The reserve's room is the manifest's now: retry at once,
		 * nobody needs to hear of this failure. */
		if (rc == -ENOSPC && kvfs_room_release(fs))
			continue;
		kv_log(KV_LOG_ERR, "manifest transaction failed (%s); retrying in 1 s",
		       kv_strerror(rc));
		atomic_store(&c->last_err, rc);
		if (rc == KV_ERR_CORRUPT)
			kvfs_manifest_damaged(fs, rc);
		fail_waiters(c, batch);
		sleep(1);
	}
	*failures = 0;
	atomic_store(&c->last_err, 0);
	after_commit(fs, batch);
	publish_events(fs, batch);
	finish_batch(fs, batch, dropped);
}

static void *committer(void *arg)
{
	struct kvfs *fs = arg;
	struct kvfs_commit *c = fs->commit;
	uint64_t trimmed_seq = 0;      /* committed_seq at the last trim */
	unsigned failures = 0;
	struct op *batch;
	bool trim_due, done;

	pthread_setname_np(pthread_self(), "kvfs-commit");
	for (;;) {
		/* committed_seq is this thread's to write: no lock to read it */
		trim_due = c->committed_seq - trimmed_seq >= TRIM_MIN_CHANGES;
		batch = next_synced(c, trim_due ? TRIM_IDLE_SECS : ATIME_FLUSH_SECS, &done);
		if (!batch && trim_due && !done) {
			trim_memory();
			trimmed_seq = c->committed_seq;
			continue;
		}
		if (!batch) {
			/* Idle: the access times readers left in the index. */
			idle_work(fs);
			kvfs_room_tick(fs);
			if (done)
				break;
			continue;
		}
		commit_synced(fs, batch, &failures);
		committed(c);
		kvfs_room_tick(fs);
		/* Busy for long: flush between batches all the same. */
		if (kvfs_now_ns() - c->atime_flushed_ns > ATIME_FLUSH_SECS * 1000000000ll)
			idle_work(fs);
	}
	return NULL;
}

/* Ask both threads to stop once everything queued is committed, and
 * wait for them (the syncer ends first: the committer ends after it). */
static void stop_threads(struct kvfs_commit *c)
{
	pthread_mutex_lock(&c->lock);
	c->stop = true;
	pthread_cond_signal(&c->work_cv);
	pthread_mutex_unlock(&c->lock);
	if (c->sync_running)
		pthread_join(c->sync_thread, NULL);
	if (c->running)
		pthread_join(c->thread, NULL);
	c->sync_running = c->running = false;
}

static void commit_free(struct kvfs_commit *c)
{
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->work_cv);
	pthread_cond_destroy(&c->ready_cv);
	pthread_cond_destroy(&c->io_cv);
	pthread_cond_destroy(&c->done_cv);
	free(c->failed_inos);
	free(c->failed_exts);
	free(c);
}

int kvfs_commit_start(struct kvfs *fs)
{
	struct kvfs_commit *c = calloc(1, sizeof(*c));
	int rc;

	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->work_cv, NULL);
	pthread_cond_init(&c->ready_cv, NULL);
	pthread_cond_init(&c->io_cv, NULL);
	pthread_cond_init(&c->done_cv, NULL);
	c->tail = &c->head;
	c->next_seq = 1;
	fs->commit = c;
	rc = -pthread_create(&c->sync_thread, NULL, kvfs_commit_syncer, fs);
	if (rc == 0) {
		c->sync_running = true;
		rc = -pthread_create(&c->thread, NULL, committer, fs);
	}
	if (rc < 0) {
		kv_log(KV_LOG_ERR, "starting the committer's threads: %s", kv_strerror(rc));
		stop_threads(c);
		fs->commit = NULL;
		commit_free(c);
		return rc;
	}
	c->running = true;
	return 0;
}

void kvfs_commit_stop(struct kvfs *fs)
{
	struct kvfs_commit *c = fs->commit;

	if (!c)
		return;
	stop_threads(c);
	commit_free(c);
	fs->commit = NULL;
}

uint64_t kvfs_commit_mark(struct kvfs *fs)
{
	struct kvfs_commit *c = fs->commit;
	uint64_t m;

	pthread_mutex_lock(&c->lock);
	m = c->committed_seq;
	pthread_mutex_unlock(&c->lock);
	return m;
}

int kvfs_commit_wait_all(struct kvfs *fs, uint64_t start)
{
	struct kvfs_commit *c = fs->commit;
	uint64_t target, seen;
	struct timespec until;
	int rc = 0;

	pthread_mutex_lock(&c->lock);
	target = c->next_seq - 1;
	/* A failed transaction ends the wait at once (fail_seq); a committer
	 * that makes no progress at all (its disk hangs in a write or a
	 * sync) must not hold the caller forever either. */
	seen = c->committed_seq;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += COMMIT_STALL_SECS;
	while (c->committed_seq < target && c->fail_seq <= start) {
		if (pthread_cond_timedwait(&c->done_cv, &c->lock, &until) != ETIMEDOUT)
			continue;
		if (c->committed_seq == seen) {
			kv_log(KV_LOG_ERR, "waiting for the manifest: nothing was committed "
			       "for %d s (the committer waits for a disk write or sync); "
			       "giving up with EIO", COMMIT_STALL_SECS);
			rc = -EIO;
			break;
		}
		seen = c->committed_seq;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += COMMIT_STALL_SECS;
	}
	/* Conservative: any failure among the ops this caller waited for is
	 * reported, as fsync reports write-back errors on Linux. */
	if (c->fail_seq > start)
		rc = -EIO;
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int kvfs_commit_failing(struct kvfs *fs)
{
	return fs->commit ? atomic_load(&fs->commit->last_err) : 0;
}
