/*
 * FUSE file operations on pages: create and write a page (buffered in RAM),
 * seal it on the last close or on fsync, open and read sealed pages.
 *
 * A page has one writer, the process that created it. Until it is sealed no
 * one else may open it (EBUSY); a reader arriving just after the writer's
 * close, before the kernel's asynchronous RELEASE has reached us, waits
 * briefly for the seal instead of failing. Sealed pages are immutable
 * (EPERM on open for writing) and are served with keep_cache, so repeated
 * reads come from the kernel's page cache.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops.h"

#define SEAL_WAIT_MS 2000
/* Waiting readers hold FUSE worker threads; leave enough free to run the
 * RELEASE they are waiting for (the daemon runs up to 16). */
#define SEAL_WAITERS_MAX 8

static unsigned seal_waiters;   /* under ns_lock */

static struct kvfs_fh *fh_new(uint64_t ino, bool writer)
{
	struct kvfs_fh *fh = calloc(1, sizeof(*fh));

	if (!fh)
		return NULL;
	fh->ino = ino;
	fh->writer = writer;
	pthread_mutex_init(&fh->lock, NULL);
	return fh;
}

static void fh_free(struct kvfs_fh *fh)
{
	kvfs_data_put(fh->data);
	pthread_mutex_destroy(&fh->lock);
	free(fh);
}

static void fh_release(struct kvfs *fs, struct kvfs_fh *fh);

static struct kvfs_fh *get_fh(struct fuse_file_info *fi)
{
	return (struct kvfs_fh *)(uintptr_t)fi->fh;
}

/* ---- create ---- */

static int do_create(struct kvfs *fs, fuse_req_t req, fuse_ino_t parent,
		     const char *name, mode_t mode, struct kv_node_info *n)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct kv_node_info p;
	struct kvfs_live *l;
	int rc;

	rc = kv_index_get(fs->idx, parent, &p);
	if (rc < 0)
		return rc;
	if (p.kind != KV_KIND_LAYER) {
		kv_log(KV_LOG_DEBUG, "create %s refused: pages live in layer directories", name);
		return p.kind == KV_KIND_PAGE ? -ENOTDIR : -EPERM;
	}
	memset(n, 0, sizeof(*n));
	n->ino = kv_index_next_ino(fs->idx);
	n->parent = parent;
	n->kind = KV_KIND_PAGE;
	n->state = KV_PAGE_WRITING;
	strcpy(n->name, name);
	n->attr.mode = mode & 0777;
	n->attr.uid = ctx->uid;
	n->attr.gid = ctx->gid;
	n->attr.atime_ns = n->attr.mtime_ns = n->attr.ctime_ns = kvfs_now_ns();
	l = kvfs_live_get(fs, n->ino);
	if (!l)
		return -ENOMEM;
	l->wbuf = kvfs_data_new(64 << 10);
	if (!l->wbuf) {
		kvfs_live_maybe_drop(fs, l);
		return -ENOMEM;
	}
	rc = kv_index_add(fs->idx, n);
	if (rc < 0) {
		kvfs_data_put(l->wbuf);
		l->wbuf = NULL;
		kvfs_live_maybe_drop(fs, l);
		return rc;
	}
	l->opens = 1;
	l->writing = true;
	kvfs_dir_changed(fs, parent);
	return 0;
}

void kvfs_op_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		    mode_t mode, struct fuse_file_info *fi)
{
	struct kvfs *fs = req_fs(req);
	struct fuse_entry_param e;
	struct kv_node_info n;
	struct kvfs_fh *fh;
	int rc = kvfs_check_name(name);

	if (rc == 0)
		rc = kvfs_changes_refused(fs);
	if (rc < 0)
		return kvfs_reply_err(req, rc);
	fh = fh_new(0, true);
	if (!fh)
		return kvfs_reply_err(req, -ENOMEM);
	pthread_mutex_lock(&fs->ns_lock);
	rc = do_create(fs, req, parent, name, mode, &n);
	pthread_mutex_unlock(&fs->ns_lock);
	if (rc < 0) {
		fh_free(fh);
		return kvfs_reply_err(req, rc);
	}
	fh->ino = n.ino;
	fi->fh = (uintptr_t)fh;
	/* The creator's writes go straight to us, not through the page cache:
	 * the kernel then skips file_remove_privs, which otherwise asks us for
	 * security.capability (GETXATTR) before every write(2) (the page's
	 * attributes time out at once while it is written, clearing S_NOSEC).
	 * A page has no capabilities to remove; set-id bits keep the cached
	 * path, which clears them as POSIX wants. */
	fi->direct_io = !(mode & (S_ISUID | S_ISGID));
	kvfs_fill_entry(fs, &n, &e);
	/* If the caller was interrupted the kernel never sends RELEASE: undo
	 * the create here or the page would stay "being written" forever. */
	if (fuse_reply_create(req, &e, fi) != 0)
		fh_release(fs, fh);
}

/* ---- open ---- */

/* Wait (ns_lock held) for a page whose writer already closed to be sealed. */
static void wait_for_seal(struct kvfs *fs, uint64_t ino)
{
	struct kvfs_live *l = kvfs_live_find(fs, ino);
	struct timespec until;

	if (seal_waiters >= SEAL_WAITERS_MAX)
		return;
	seal_waiters++;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += SEAL_WAIT_MS / 1000;
	while (l && l->writing && l->flushed) {
		if (pthread_cond_timedwait(&fs->seal_cv, &fs->ns_lock, &until) == ETIMEDOUT)
			break;
		l = kvfs_live_find(fs, ino);
	}
	seal_waiters--;
}

static int do_open(struct kvfs *fs, uint64_t ino, int flags)
{
	struct kv_node_info n;
	struct kvfs_live *l;
	int rc;

	rc = kv_index_get(fs->idx, ino, &n);
	if (rc < 0)
		return rc;     /* an unlinked page cannot be opened again */
	if (n.kind != KV_KIND_PAGE)
		return -EISDIR;
	if ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC)) {
		kv_log(KV_LOG_DEBUG, "open of page %s for writing refused: %s", n.name,
		       n.state == KV_PAGE_WRITING ? "being written" : "sealed pages are immutable");
		return n.state == KV_PAGE_WRITING ? -EBUSY : -EPERM;
	}
	if (n.state == KV_PAGE_WRITING) {
		wait_for_seal(fs, ino);
		rc = kv_index_get(fs->idx, ino, &n);
		if (rc < 0)
			return rc;
		if (n.state == KV_PAGE_WRITING)
			return -EBUSY;
	}
	l = kvfs_live_get(fs, ino);
	if (!l)
		return -ENOMEM;
	l->opens++;
	/* Reads may be served from the kernel's cache and never reach us:
	 * an open is the access the eviction order sees. */
	kvfs_page_touch(fs, &n);
	return 0;
}

void kvfs_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvfs *fs = req_fs(req);
	struct kvfs_fh *fh = fh_new(ino, false);
	int rc;

	if (!fh)
		return kvfs_reply_err(req, -ENOMEM);
	pthread_mutex_lock(&fs->ns_lock);
	rc = do_open(fs, ino, fi->flags);
	pthread_mutex_unlock(&fs->ns_lock);
	if (rc < 0) {
		fh_free(fh);
		return kvfs_reply_err(req, rc);
	}
	fi->fh = (uintptr_t)fh;
	fi->keep_cache = 1;      /* sealed: the kernel's cached bytes stay valid */
	fi->noflush = 1;
	if (fuse_reply_open(req, fi) != 0)
		fh_release(fs, fh);   /* interrupted: no RELEASE will come */
}

/* ---- read ---- */

/* The writer may read back what it wrote so far: copy it out under the
 * lock, since a concurrent write may reallocate the buffer. */
static void read_own_write(struct kvfs *fs, fuse_req_t req, struct kvfs_fh *fh,
			   size_t size, off_t off)
{
	struct kvfs_live *l;
	char *tmp = NULL;
	size_t n = 0;

	pthread_mutex_lock(&fs->ns_lock);
	l = kvfs_live_find(fs, fh->ino);
	if (l && l->wbuf && (uint64_t)off < l->wbuf->size) {
		n = l->wbuf->size - (uint64_t)off < size ? l->wbuf->size - (uint64_t)off : size;
		tmp = malloc(n);
		if (tmp)
			memcpy(tmp, l->wbuf->bytes + off, n);
	}
	pthread_mutex_unlock(&fs->ns_lock);
	if (n && !tmp)
		return kvfs_reply_err(req, -ENOMEM);
	fuse_reply_buf(req, tmp, n);
	free(tmp);
}

void kvfs_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		  struct fuse_file_info *fi)
{
	struct kvfs *fs = req_fs(req);
	struct kvfs_fh *fh = get_fh(fi);
	struct kvfs_data *d;
	int rc = 0;

	(void)ino;
	if (fh->writer && !fh->sealed)
		return read_own_write(fs, req, fh, size, off);
	pthread_mutex_lock(&fh->lock);
	if (!fh->data)
		rc = kvfs_page_load(fs, fh->ino, &fh->data);
	/* The kernel can complete this read, let the client close the file
	 * and deliver RELEASE before fuse_reply_buf returns here: keep the
	 * bytes alive until it has. */
	d = rc < 0 ? NULL : kvfs_data_get(fh->data);
	pthread_mutex_unlock(&fh->lock);
	if (rc < 0)
		return kvfs_reply_err(req, rc);
	if ((uint64_t)off >= d->size)
		size = 0;
	else if (d->size - (uint64_t)off < size)
		size = d->size - (uint64_t)off;
	fuse_reply_buf(req, size ? (const char *)d->bytes + off : NULL, size);
	kvfs_data_put(d);
}

/* ---- write ---- */

#define SPACE_RETRIES 300   /* eviction runs a write waits through (~30 s) */

/* Refuse growth the store could not hold once sealed (ENOSPC now beats a
 * page lost after close). quiet: the caller will wait and retry, so this
 * is not a refusal yet (no log line, not counted). */
static int check_space(struct kvfs *fs, struct kvfs_live *l, uint64_t new_size,
		       bool quiet)
{
	uint64_t need = (new_size + KV_ALIGN - 1) & ~(uint64_t)(KV_ALIGN - 1);
	struct kv_store_usage u;
	uint64_t grow;

	if (need <= l->reserved)
		return 0;
	grow = need - l->reserved;
	kv_store_usage(fs->store, &u);
	if (u.avail < fs->reserved_bytes + grow) {
		if (quiet)
			return -ENOSPC;
		kvfs_space_refused(fs);
		kv_log(KV_LOG_ERR, "store full: %llu bytes available, %llu pending, page needs %llu more",
		       (unsigned long long)u.avail, (unsigned long long)fs->reserved_bytes,
		       (unsigned long long)grow);
		return -ENOSPC;
	}
	fs->reserved_bytes += grow;
	l->reserved = need;
	return 0;
}

/* Validate a write (ns_lock held) and return the writer's buffer. */
static int write_target(struct kvfs *fs, struct kvfs_fh *fh, uint64_t end,
			bool may_retry, struct kvfs_data **out,
			struct kv_node_info *n)
{
	struct kvfs_live *l = kvfs_live_find(fs, fh->ino);
	uint64_t limit;
	bool exact;
	int rc;

	if (fh->sealed || !l || !l->writing || !l->wbuf)
		return -EPERM;
	rc = kvfs_node_get_locked(fs, fh->ino, n);
	if (rc == 0)
		rc = kvfs_page_limit(fs, n->parent, &limit, &exact);
	if (rc < 0)
		return rc;
	if (end > limit) {
		kv_log(KV_LOG_ERR, "page %s: write up to byte %llu refused: %s is %llu bytes; "
		       "the page will not be stored", n->name, (unsigned long long)end,
		       exact ? "the model geometry's page size" : "the page size limit (-o max_page)",
		       (unsigned long long)limit);
		rc = -EFBIG;
	}
	if (rc == 0)
		rc = check_space(fs, l, end, may_retry);
	if (rc == -ENOSPC && may_retry)
		return -EAGAIN;     /* the evictor may make room: not refused yet */
	/* Grow under the lock: the writer's own reads copy from this buffer. */
	if (rc == 0)
		rc = kvfs_data_reserve(l->wbuf, end);
	if (rc < 0) {
		/* A page missing a refused write is a truncated page: it must
		 * never be sealed, whatever the writer does next. */
		l->write_err = rc;
		return rc;
	}
	l->flushed = false;
	*out = l->wbuf;
	return 0;
}

/* Could a write up to byte end ever be accepted? Checked before any
 * charge or wait (takes ns_lock). -EFBIG past the page size limit or the
 * whole capacity of the store, -EPERM on a page that is not being written;
 * a refused write also dooms the page (write_err), as in write_target. */
static int write_possible(struct kvfs *fs, struct kvfs_fh *fh, uint64_t end)
{
	uint64_t limit, cap = fs->meta.capacity;
	struct kv_node_info n;
	struct kvfs_live *l;
	bool exact;
	int rc;

	pthread_mutex_lock(&fs->ns_lock);
	l = kvfs_live_find(fs, fh->ino);
	rc = fh->sealed || !l || !l->writing || !l->wbuf ? -EPERM : 0;
	if (rc == 0)
		rc = kvfs_node_get_locked(fs, fh->ino, &n);
	if (rc == 0)
		rc = kvfs_page_limit(fs, n.parent, &limit, &exact);
	if (rc == 0 && (end > limit || (cap && end > cap))) {
		kv_log(KV_LOG_ERR, "page %s: write up to byte %llu refused at once: %s is %llu bytes; "
		       "the page will not be stored", n.name, (unsigned long long)end,
		       end > limit ? (exact ? "the model geometry's page size"
				      : "the page size limit (-o max_page)")
		       : "the store's whole capacity",
		       (unsigned long long)(end > limit ? limit : cap));
		rc = -EFBIG;
		l->write_err = rc;
	}
	pthread_mutex_unlock(&fs->ns_lock);
	return rc;
}

/* Dirty bytes a write up to end adds to the page (its buffer only grows).
 * The kernel serialises writes to one inode, so the charge read here is
 * still the page's when dirty_charge_add runs. */
static uint64_t dirty_charge_for(struct kvfs *fs, uint64_t ino, uint64_t end,
				 uint64_t *have)
{
	uint64_t need = (end + KV_ALIGN - 1) & ~(uint64_t)(KV_ALIGN - 1);
	struct kvfs_live *l;

	pthread_mutex_lock(&fs->ns_lock);
	l = kvfs_live_find(fs, ino);
	*have = l ? l->dirty : 0;
	pthread_mutex_unlock(&fs->ns_lock);
	return need > *have ? need - *have : 0;
}

static void dirty_charge_add(struct kvfs *fs, uint64_t ino, uint64_t charge)
{
	struct kvfs_live *l = kvfs_live_find(fs, ino);

	if (l)
		l->dirty += charge;
	else
		kvfs_dirty_give(fs, charge, false);
}

void kvfs_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
		   off_t off, struct fuse_file_info *fi)
{
	struct kvfs *fs = req_fs(req);
	struct kvfs_fh *fh = get_fh(fi);
	uint64_t end = (uint64_t)off + size;
	struct kvfs_data *d = NULL;
	struct kv_node_info n;
	uint64_t charge, held;
	int rc, space;

	(void)ino;
	/* A write that can never succeed fails before it costs anything: it
	 * must not wait for write-back room or make the evictor empty the
	 * store for bytes that will be refused anyway. */
	rc = kvfs_changes_refused(fs);
	if (rc == 0)
		rc = write_possible(fs, fh, end);
	if (rc < 0)
		return kvfs_reply_err(req, rc);
	charge = dirty_charge_for(fs, fh->ino, end, &held);
	rc = kvfs_dirty_take(fs, charge, held);   /* may block: write-back is full */
	if (rc < 0)
		return kvfs_reply_err(req, rc);
	/* May block while the evictor makes room (cache mode); others may
	 * take that room first, so the check under the lock can send us back
	 * to wait, until the evictor has nothing left to give. */
	for (int tries = 0;; tries++) {
		space = tries ? kvfs_space_wait_run(fs, charge) : kvfs_space_wait(fs, charge);
		pthread_mutex_lock(&fs->ns_lock);
		rc = write_target(fs, fh, end, space == 0 && tries < SPACE_RETRIES,
				  &d, &n);
		if (rc == 0)
			dirty_charge_add(fs, fh->ino, charge);
		pthread_mutex_unlock(&fs->ns_lock);
		if (rc != -EAGAIN)
			break;
	}
	if (rc < 0) {
		kvfs_dirty_give(fs, charge, false);
		return kvfs_reply_err(req, rc);
	}
	/* The kernel serialises writes, truncates and the final release of one
	 * inode, and the buffer only moves under ns_lock (above), so the bytes
	 * are ours to fill without holding it; so is size, which only this
	 * writer changes. Bytes past size are undefined (kvfs_data): a hole
	 * the write leaves before off must read as zeros. */
	if ((uint64_t)off > d->size)
		memset(d->bytes + d->size, 0, (uint64_t)off - d->size);
	memcpy(d->bytes + off, buf, size);
	pthread_mutex_lock(&fs->ns_lock);
	if (end > d->size)
		d->size = end;
	if (kv_index_get(fs->idx, fh->ino, &n) == 0) {
		n.size = d->size;
		n.attr.mtime_ns = kvfs_now_ns();
		kv_index_update(fs->idx, fh->ino, &n, KV_UPD_SIZE | KV_UPD_ATTR);
	}
	pthread_mutex_unlock(&fs->ns_lock);
	fuse_reply_write(req, size);
}

int kvfs_page_truncate(struct kvfs *fs, uint64_t ino, uint64_t size)
{
	struct kvfs_live *l = kvfs_live_find(fs, ino);
	struct kv_node_info n;
	uint64_t limit;
	bool exact;
	int rc;

	if (!l || !l->writing || !l->wbuf)
		return -EPERM;
	rc = kvfs_node_get_locked(fs, ino, &n);
	if (rc == 0)
		rc = kvfs_page_limit(fs, n.parent, &limit, &exact);
	if (rc < 0)
		return rc;
	if (size > limit)
		return -EFBIG;
	rc = check_space(fs, l, size, false);
	if (rc == 0)
		rc = kvfs_data_reserve(l->wbuf, size);
	if (rc < 0)
		return rc;
	if (size > l->wbuf->size)    /* what it grows by reads as zeros */
		memset(l->wbuf->bytes + l->wbuf->size, 0, size - l->wbuf->size);
	l->wbuf->size = size;
	n.size = size;
	return l->unlinked ? 0 : kv_index_update(fs->idx, ino, &n, KV_UPD_SIZE);
}

/* ---- close, release, fsync ---- */

void kvfs_op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvfs *fs = req_fs(req);
	struct kvfs_fh *fh = get_fh(fi);
	struct kvfs_live *l;
	struct kv_node_info n;
	uint64_t limit = 0;
	bool exact = false;
	int rc = 0;

	(void)ino;
	if (!fh->writer)
		return kvfs_reply_err(req, 0);
	pthread_mutex_lock(&fs->ns_lock);
	l = kvfs_live_find(fs, fh->ino);
	if (l && l->writing && l->wbuf && l->write_err) {
		l->flushed = true;
		rc = l->write_err;     /* close() tells the writer the page is lost */
	} else if (l && l->writing && l->wbuf) {
		l->flushed = true;
		/* The close that ends a page of the wrong size reports it; a
		 * close before any byte was written (shell redirection) does not. */
		if (kv_index_get(fs->idx, fh->ino, &n) == 0 &&
		    kvfs_page_limit(fs, n.parent, &limit, &exact) == 0 &&
		    exact && l->wbuf->size && l->wbuf->size != limit) {
			kv_log(KV_LOG_ERR, "page %s: %llu bytes, but the model geometry makes a page %llu bytes; it will not be stored",
			       n.name, (unsigned long long)l->wbuf->size,
			       (unsigned long long)limit);
			rc = -EINVAL;
		}
	}
	pthread_mutex_unlock(&fs->ns_lock);
	kvfs_reply_err(req, rc);
}

/* The last close of the writer: seal, or discard what cannot be a page. */
static void release_writer(struct kvfs *fs, struct kvfs_live *l,
			   const struct kvfs_seal_plan *plan)
{
	int rc;

	if (l->writing && !l->unlinked && l->write_err) {
		kv_log(KV_LOG_WARN, "page inode %llu discarded at close: a write to it failed (%s)",
		       (unsigned long long)l->ino, kv_strerror(l->write_err));
		kv_index_remove(fs->idx, l->ino);
	} else if (l->writing && !l->unlinked) {
		rc = kvfs_page_seal(fs, l, plan);
		if (rc < 0) {
			if (rc != -ENODATA && rc != -EINVAL)   /* those were reported */
				atomic_fetch_add(&fs->st.pages_lost, 1);
			kv_log(rc == -ENODATA ? KV_LOG_WARN : KV_LOG_ERR,
			       "page inode %llu discarded at close: %s",
			       (unsigned long long)l->ino, kv_strerror(rc));
			kv_index_remove(fs->idx, l->ino);
		}
	}
	if (l->writing) {
		kvfs_page_unreserve(fs, l);
		kvfs_dirty_give_live(fs, l);   /* discarded: nothing to write back */
		kvfs_data_put(l->wbuf);
		l->wbuf = NULL;
		l->writing = false;
		pthread_cond_broadcast(&fs->seal_cv);
	}
}

/*
 * Hash the payload a writer is about to seal and look for a twin extent,
 * before ns_lock is taken for the seal: dedup may read the disk. False if
 * there is nothing to seal. The kernel sends no write to this inode while
 * its writer is being released or fsync'ed, so the bytes stay as probed.
 */
static bool plan_seal(struct kvfs *fs, struct kvfs_fh *fh, struct kvfs_seal_plan *p)
{
	struct kvfs_data *d = NULL;
	struct kvfs_live *l;

	if (!fh->writer || fh->sealed)
		return false;
	pthread_mutex_lock(&fs->ns_lock);
	l = kvfs_live_find(fs, fh->ino);
	if (l && l->writing && !l->unlinked && !l->write_err && l->wbuf &&
	    l->wbuf->size)
		d = kvfs_data_get(l->wbuf);
	pthread_mutex_unlock(&fs->ns_lock);
	if (!d)
		return false;
	kvfs_seal_plan_make(fs, d, p);
	return true;
}

static void fh_release(struct kvfs *fs, struct kvfs_fh *fh)
{
	struct kvfs_seal_plan plan;
	bool planned = plan_seal(fs, fh, &plan);
	struct kvfs_live *l;

	pthread_mutex_lock(&fs->ns_lock);
	l = kvfs_live_find(fs, fh->ino);
	if (l) {
		if (fh->writer)
			release_writer(fs, l, planned ? &plan : NULL);
		if (l->opens)
			l->opens--;
		kvfs_live_maybe_drop(fs, l);
	}
	pthread_mutex_unlock(&fs->ns_lock);
	if (planned)
		kvfs_seal_plan_clear(&plan);
	fh_free(fh);
}

void kvfs_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	fh_release(req_fs(req), get_fh(fi));
	fuse_reply_err(req, 0);
}

void kvfs_op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
		   struct fuse_file_info *fi)
{
	struct kvfs *fs = req_fs(req);
	struct kvfs_fh *fh = get_fh(fi);
	uint64_t mark = kvfs_commit_mark(fs);   /* before our seal is queued */
	struct kvfs_seal_plan plan;
	bool planned = plan_seal(fs, fh, &plan);
	struct kvfs_live *l;
	int rc = 0;

	(void)ino; (void)datasync;
	if (fh->writer && !fh->sealed) {
		/* fsync is the writer's commit point: the page is sealed now and
		 * later writes through this descriptor fail with EPERM. */
		pthread_mutex_lock(&fs->ns_lock);
		l = kvfs_live_find(fs, fh->ino);
		if (l && l->writing && l->write_err)
			rc = l->write_err;      /* a truncated page is never sealed */
		else if (l && l->writing && !l->unlinked && l->wbuf && l->wbuf->size) {
			/* (nothing written yet: nothing to make durable) */
			rc = kvfs_page_seal(fs, l, planned ? &plan : NULL);
			if (rc == 0)
				fh->sealed = true;
		}
		pthread_mutex_unlock(&fs->ns_lock);
	}
	if (planned)
		kvfs_seal_plan_clear(&plan);
	if (rc == 0)
		rc = kvfs_commit_wait_all(fs, mark);
	kvfs_reply_err(req, rc);
}
