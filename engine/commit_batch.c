/*
 * The committer's batches: taking ops off the queue, making their payloads
 * durable (rule 2 of engine/commit.c), and applying them to the manifest in one
 * transaction, with the times of the directories they changed.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "commit_i.h"

static bool ino_failed(struct kvfs_commit *c, uint64_t ino)
{
	size_t i;

	for (i = 0; i < c->nfailed; i++)
		if (c->failed_inos[i] == ino)
			return true;
	return false;
}

static void remember_failed(struct kvfs_commit *c, uint64_t ino)
{
	uint64_t *n = realloc(c->failed_inos, (c->nfailed + 1) * sizeof(*n));

	if (!n) {
		kv_log(KV_LOG_ERR, "out of memory recording withdrawn page %llu",
		       (unsigned long long)ino);
		return;
	}
	c->failed_inos = n;
	c->failed_inos[c->nfailed++] = ino;
}

/* The error a failed write of extent id left, or 0. */
static int ext_failed(struct kvfs_commit *c, uint64_t id)
{
	size_t i;

	for (i = 0; i < c->nfailed_exts; i++)
		if (c->failed_exts[i].id == id)
			return c->failed_exts[i].err;
	return 0;
}

static void remember_failed_ext(struct kvfs_commit *c, uint64_t id, int err)
{
	struct failed_ext *n = realloc(c->failed_exts, (c->nfailed_exts + 1) * sizeof(*n));

	if (!n) {
		/* Its sharers then commit rows naming unwritten bytes: a read
		 * of them fails its checksum (EIO), never returns garbage. */
		kv_log(KV_LOG_ERR, "out of memory recording failed extent %llu; pages "
		       "sharing it are not withdrawn", (unsigned long long)id);
		return;
	}
	c->failed_exts = n;
	c->failed_exts[c->nfailed_exts++] = (struct failed_ext){ .id = id, .err = err };
}

/* A page row as the manifest stores it. */
static void node_to_rec_page(const struct kv_node_info *n, struct kv_page_rec *r)
{
	memset(r, 0, sizeof(*r));
	r->ino = n->ino;
	r->layer_ino = n->parent;
	memcpy(r->name, n->name, sizeof(r->name));
	r->extent_id = n->extent_id;
	r->size = n->size;
	r->attr = n->attr;
}

uint64_t kvfs_commit_op_bytes(const struct op *o)
{
	return o->payload ? o->payload->cap : 0;
}

/* Take up to max ops off the queue, keeping their order and never splitting
 * an atomic pair (the delete of a page a rename replaces, and the move).
 * Also at most max_bytes of payloads (unless one atomic change is larger):
 * a page's dirty charge comes back only when its batch is durable, so
 * smaller batches give the write-back budget back steadily. */
struct op *kvfs_commit_take_batch(struct kvfs_commit *c, unsigned max,
			     uint64_t max_bytes)
{
	struct op *first = c->head, *last = first;
	uint64_t bytes = kvfs_commit_op_bytes(first);
	unsigned n = 1;

	while (last->next && ((n < max &&
			       bytes + kvfs_commit_op_bytes(last->next) <= max_bytes) ||
			      last->with_next)) {
		last = last->next;
		bytes += kvfs_commit_op_bytes(last);
		n++;
	}
	c->queued_ops -= n;
	c->queued_bytes -= bytes;
	c->head = last->next;
	if (!c->head)
		c->tail = &c->head;
	last->next = NULL;
	return first;
}

/* Wait for the payload writes of the batch, then fdatasync their segments. */
void kvfs_commit_make_payloads_durable(struct kvfs *fs, struct op *batch)
{
	struct kvfs_commit *c = fs->commit;
	struct kv_extent *exts = NULL;
	struct op *o;
	unsigned n = 0, cap = 0;
	int rc;

	pthread_mutex_lock(&c->lock);
	for (o = batch; o; o = o->next)
		while (o->has_write && !o->written)
			pthread_cond_wait(&c->io_cv, &c->lock);
	pthread_mutex_unlock(&c->lock);
	for (o = batch; o; o = o->next) {
		if (!o->has_write || o->io.res < 0)
			continue;
		if (n == cap) {
			struct kv_extent *ne;

			cap = cap ? cap * 2 : 64;
			ne = realloc(exts, cap * sizeof(*ne));
			if (!ne) {
				rc = -ENOMEM;
				goto fail_all;
			}
			exts = ne;
		}
		exts[n++] = o->io.ext;
	}
	if (n == 0)
		goto out;
	rc = kv_store_sync(fs->store, exts, n);
	if (rc == 0)
		goto out;
fail_all:
	kv_log(KV_LOG_ERR, "syncing %u page payloads failed: %s", n, kv_strerror(rc));
	for (o = batch; o; o = o->next)
		if (o->has_write && o->io.res == 0)
			o->io.res = rc;
out:
	free(exts);
}

/* A quarter of the write-back budget per transaction: writers waiting on
 * the budget get it back in steps, not all at once. */
static uint64_t commit_bytes_max(const struct kvfs *fs)
{
	uint64_t b = fs->dirty.budget / 4;

	return b ? b : 1;
}

/* An atomic pair is queued under ns_lock in two steps: never the first
 * half without the second. While the committer commits, only a full
 * batch: a smaller one grows meanwhile into the next group commit, as
 * behind one thread. */
bool kvfs_commit_batch_due(struct kvfs *fs, struct kvfs_commit *c)
{
	if (c->ready || !c->head)
		return false;
	if (c->stop)
		return true;
	if (c->pair_open)
		return false;
	return !c->committing || c->queued_ops >= fs->opts.commit_batch ||
	       c->queued_bytes >= commit_bytes_max(fs);
}

/*
 * The syncer (rule 7 of engine/commit.c): takes the next batch off the
 * queue (kvfs_commit_batch_due), makes its payloads durable while the committer
 * commits the one before, and hands it over. One batch waits synced at
 * most.
 */
void *kvfs_commit_syncer(void *arg)
{
	struct kvfs *fs = arg;
	struct kvfs_commit *c = fs->commit;
	struct op *batch;

	pthread_setname_np(pthread_self(), "kvfs-sync");
	for (;;) {
		pthread_mutex_lock(&c->lock);
		while (!kvfs_commit_batch_due(fs, c) && !(c->stop && !c->head && !c->ready))
			pthread_cond_wait(&c->work_cv, &c->lock);
		if (!c->head)
			break;
		batch = kvfs_commit_take_batch(c, fs->opts.commit_batch, commit_bytes_max(fs));
		pthread_mutex_unlock(&c->lock);
		kvfs_commit_make_payloads_durable(fs, batch);
		pthread_mutex_lock(&c->lock);
		c->ready = batch;
		pthread_cond_signal(&c->ready_cv);
		pthread_mutex_unlock(&c->lock);
	}
	/* Stopping, and everything queued was handed over. */
	c->sync_done = true;
	pthread_cond_signal(&c->ready_cv);
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

static int put_dir_row(struct kv_manifest *m, const struct kv_node_info *n)
{
	if (n->kind == KV_KIND_ROOT)
		return kv_manifest_set_root_attr(m, &n->attr);
	if (n->kind == KV_KIND_MODEL) {
		struct kv_model_rec r = { .ino = n->ino, .attr = n->attr, .geo = n->geo };

		memcpy(r.name, n->name, sizeof(r.name));
		return kv_manifest_put_model(m, &r);
	}
	struct kv_layer_rec r = { .ino = n->ino, .model_ino = n->parent,
				  .layer = n->layer, .attr = n->attr };

	memcpy(r.name, n->name, sizeof(r.name));
	return kv_manifest_put_layer(m, &r);
}

static int apply_op(struct kvfs *fs, struct op *o)
{
	struct kv_manifest *m = fs->man;
	struct kv_page_rec pr;
	int rc;

	switch (o->kind) {
	case KVFS_OP_PUT_PAGE:
		if (o->shares) {
			rc = kv_manifest_ref_extent(m, o->node.extent_id, +1);
			if (rc < 0)
				return rc;
		} else if (o->has_write) {
			struct kv_extent_rec er = {
				.id = o->node.extent_id, .ext = o->node.ext,
				.refcount = 1,
			};

			memcpy(er.hash, o->node.hash, KV_HASH_LEN);
			rc = kv_manifest_put_extent(m, &er);
			if (rc < 0)
				return rc;
		}
		node_to_rec_page(&o->node, &pr);
		return kv_manifest_put_page(m, &pr);
	case KVFS_OP_DEL_PAGE:
		rc = kv_manifest_del_page(m, o->node.ino);
		if (rc == 0 && o->drop_extent)
			rc = kv_manifest_del_extent(m, o->node.extent_id);
		else if (rc == 0 && o->unref_extent)
			rc = kv_manifest_ref_extent(m, o->node.extent_id, -1);
		return rc;
	case KVFS_OP_PUT_MODEL:
	case KVFS_OP_PUT_LAYER:
		return put_dir_row(m, &o->node);
	case KVFS_OP_DEL_MODEL:
		return kv_manifest_del_model(m, o->node.ino);
	case KVFS_OP_DEL_LAYER:
		return kv_manifest_del_layer(m, o->node.ino);
	}
	return -EINVAL;
}

int kvfs_commit_op_error(const struct op *o)
{
	if (o->has_write && o->io.res < 0)
		return o->io.res;
	return o->err;
}

bool kvfs_commit_op_skipped(struct kvfs_commit *c, struct op *o)
{
	bool page = o->kind == KVFS_OP_PUT_PAGE || o->kind == KVFS_OP_DEL_PAGE;

	return kvfs_commit_op_error(o) < 0 || (page && ino_failed(c, o->node.ino));
}

/*
 * Pages whose payload never became durable are withdrawn before anything
 * else in the batch is applied, so a later change to them in the same
 * batch (a rename, a touch) is skipped rather than naming a missing row.
 * So are the pages that share a pending extent whose write failed: they
 * come after its writer in queue order (dedup shares only what is
 * queued), in this batch or a later one, and failed_exts outlives the
 * batch.
 */
static void note_failures(struct kvfs_commit *c, struct op *batch)
{
	struct op *o;

	for (o = batch; o; o = o->next) {
		if (o->shares_pending && !o->err)
			o->err = ext_failed(c, o->node.extent_id);
		if (kvfs_commit_op_error(o) == 0 || ino_failed(c, o->node.ino))
			continue;
		remember_failed(c, o->node.ino);
		if (o->has_write)
			remember_failed_ext(c, o->node.extent_id, o->io.res);
	}
}

/* A statement refused by a constraint is undone alone (SQLite's ABORT), the
 * transaction goes on: one inconsistent change must not block every later
 * one. I/O-type errors abort the whole batch, which is retried. */
static bool error_is_permanent(int rc)
{
	return rc == -EEXIST || rc == -EINVAL || rc == -ENOTEMPTY || rc == -ENOENT;
}

static int u64_cmp(const void *pa, const void *pb)
{
	uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;

	return a < b ? -1 : a > b;
}

static int persist_dir(struct kvfs *fs, uint64_t ino)
{
	struct kv_node_info d;
	int rc;

	if (kv_index_get(fs->idx, ino, &d) < 0 ||
	    (d.kind != KV_KIND_MODEL && d.kind != KV_KIND_LAYER))
		return 0;
	rc = put_dir_row(fs->man, &d);
	if (rc < 0 && !error_is_permanent(rc)) {
		kv_log(KV_LOG_ERR, "manifest: times of directory %s: %s", d.name,
		       kv_strerror(rc));
		return rc;
	}
	return 0;
}

/*
 * Directory times change with every create, unlink and rename in them
 * (kvfs_dir_changed, in the index). Rather than queue a row per change,
 * each batch writes, once, the current times of every model or layer
 * directory its ops changed: the row follows the ops that changed it, in
 * the same transaction. A directory gone from the index (rmdir queued) is
 * skipped: its row is being deleted. Once each, however many directories
 * a batch touches: the first version remembered 16 and wrote the row
 * again for every op in any other (a batch over 32 layers wrote a layer
 * row for half its ops).
 */
static int persist_dir_times(struct kvfs *fs, struct op *batch)
{
	size_t n = 0, k = 0;
	uint64_t *dirs;
	struct op *o;
	int rc = 0;

	for (o = batch; o; o = o->next)
		n++;
	dirs = malloc(n * sizeof(*dirs));
	for (o = batch; o && rc == 0; o = o->next) {
		if (o->kind == KVFS_OP_PUT_MODEL || o->kind == KVFS_OP_DEL_MODEL)
			continue;     /* the root's times live in memory only */
		if (dirs)
			dirs[k++] = o->node.parent;
		else
			rc = persist_dir(fs, o->node.parent);   /* no memory: each op's */
	}
	if (!dirs)
		return rc;
	qsort(dirs, k, sizeof(*dirs), u64_cmp);
	for (size_t i = 0; rc == 0 && i < k; i++)
		if (i == 0 || dirs[i] != dirs[i - 1])
			rc = persist_dir(fs, dirs[i]);
	free(dirs);
	return rc;
}

/*
 * The KV event records of the applied changes are numbered on from the
 * last one published, and the last number commits with them (meta
 * event_seq): the next mount continues from it, and a record is never
 * numbered twice, whatever crash comes. Only the committer publishes, so
 * the numbers are known before the commit.
 */
static int persist_event_seq(struct kvfs *fs, struct op *batch)
{
	uint64_t n = 0;
	struct op *o;

	for (o = batch; o; o = o->next)
		if (o->ev_ok)
			n += kvfs_event_count(o->ev);
	if (!n)
		return 0;
	return kv_manifest_set_event_seq(fs->man, kvfs_events_last_seq(fs) + n);
}

int kvfs_commit_apply_batch(struct kvfs *fs, struct op *batch, uint64_t *dropped)
{
	struct op *o;
	int rc;

	note_failures(fs->commit, batch);
	rc = kv_manifest_begin(fs->man);
	if (rc < 0)
		return rc;
	for (o = batch; o; o = o->next) {
		o->ev_ok = false;     /* a retried batch counts afresh */
		if (kvfs_commit_op_skipped(fs->commit, o))
			continue;
		rc = apply_op(fs, o);
		if (rc == -ENOENT && o->kind != KVFS_OP_PUT_PAGE) {
			kv_log(KV_LOG_WARN, "manifest: %s had no row to delete",
			       o->node.name);
			o->ev_ok = true;     /* gone from the namespace all the same */
			continue;
		}
		if (rc < 0 && error_is_permanent(rc)) {
			kv_log(KV_LOG_ERR, "manifest: change to %s (inode %llu) refused: %s; "
			       "it is not durable and will not survive a restart",
			       o->node.name, (unsigned long long)o->node.ino, kv_strerror(rc));
			/* Its layer's rows lack it: the layer stays in RAM (a
			 * reload would undo the change before the restart). */
			if (fs->idx)
				kv_index_layer_queued(fs->idx, &o->node, UINT64_MAX);
			*dropped = o->seq;
			continue;
		}
		if (rc < 0) {
			kv_log(KV_LOG_ERR, "manifest: applying change to %s: %s",
			       o->node.name, kv_strerror(rc));
			kv_manifest_rollback(fs->man);
			return rc;
		}
		o->ev_ok = true;
	}
	rc = persist_dir_times(fs, batch);
	if (rc == 0)
		rc = persist_event_seq(fs, batch);
	if (rc == 0)
		rc = kv_manifest_commit(fs->man);
	if (rc < 0)
		kv_manifest_rollback(fs->man);
	return rc;
}

