/*
 * Page files: create and write a page (buffered in RAM), seal it on the
 * last close or on fsync, open and read sealed pages. What a front end
 * (fuse/ops_file.c) calls for its file operations; struct kvfs_file is its
 * open-file handle.
 *
 * A page has one writer, the process that created it. Until it is sealed no
 * one else may open it (EBUSY); a reader arriving just after the writer's
 * close, before the front end's asynchronous release has reached us, waits
 * briefly for the seal instead of failing. Sealed pages are immutable
 * (EPERM on open for writing).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvfs_i.h"
#include "openshare.h"
#include "pagecharge.h"

#define SEAL_WAIT_MS 2000
/* Waiting readers hold front-end threads (FUSE workers) or fast-path
 * threads; leave enough free to run the release they are waiting for (the
 * daemon runs up to 16 FUSE workers). One uid holds at most
 * SEAL_WAITERS_PER_UID of the slots, so that a writer keeping a duplicate
 * descriptor open and opening its page from many threads cannot park half
 * the FUSE workers or make every other reader fail at once. */
#define SEAL_WAITERS_MAX 8
#define SEAL_WAITERS_PER_UID 2

/* An open page. */
struct kvfs_file {
	uint64_t ino;
	uint32_t uid;               /* who opened it */
	bool writer;
	bool sealed;                /* writer: sealed by fsync */
	pthread_mutex_t lock;
	struct kvfs_data *data;     /* reader: verified payload, kept from its first read */
	uint64_t held;              /* data's bytes counted for uid (read_hold) */
	uint64_t pinned;            /* page bytes held against eviction (open_share) */
};

/* Lines about pages refused for what their writer did: any user can make
 * them at will, so they are rate-limited (device errors are not). */
static struct kv_log_limit refused_log;

_Static_assert(SEAL_WAITERS_MAX == sizeof(((struct kvfs *)0)->seal_waiters) /
	       sizeof(((struct kvfs *)0)->seal_waiters[0]), "fs->seal_waiters");

static struct kvfs_file *file_new(uint64_t ino, bool writer)
{
	struct kvfs_file *fh = calloc(1, sizeof(*fh));

	if (!fh)
		return NULL;
	fh->ino = ino;
	fh->writer = writer;
	pthread_mutex_init(&fh->lock, NULL);
	return fh;
}

static void file_free(struct kvfs_file *fh)
{
	kvfs_data_put(fh->data);
	pthread_mutex_destroy(&fh->lock);
	free(fh);
}

/* Bytes of pages uid is still writing, which count in its open_share
 * (engine/openshare.c); not looked up where no share applies (root). */
static uint64_t writing_bytes(struct kvfs *fs, uint32_t uid)
{
	return kvfs_open_share_bytes(fs, uid) ? kvfs_dirty_uid_filling(fs, uid) : 0;
}

/* ---- create ---- */

#define SPACE_RETRIES 300   /* eviction runs a create or write waits through (~30 s) */

static int do_create(struct kvfs *fs, uint64_t parent, const char *name, uint32_t mode,
		     uint32_t uid, uint32_t gid, struct kv_node_info *n)
{
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
	n->kind = KV_KIND_PAGE;
	/* Set-id bits as asked (a write clears them, kvfs_file_write); the
	 * sticky bit is the pin (docs/usage.md), set by chmod or the xattr,
	 * not by a create mode. */
	kvfs_ns_node_init(fs, n, &p, name, mode & (07777 & ~(uint32_t)S_ISVTX), uid, gid);
	n->state = KV_PAGE_WRITING;
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
	l->writer_uid = uid;
	l->share_writer = kvfs_open_share_writer_locked(fs, uid);
	kvfs_dir_changed(fs, parent);
	return 0;
}

int kvfs_file_create(struct kvfs *fs, uint64_t parent, const char *name, uint32_t mode,
		     uint32_t uid, uint32_t gid, struct kvfs_file **out,
		     struct kv_node_info *n)
{
	struct kvfs_file *f;
	int rc = kvfs_check_name(name);

	/* Even while the index loads: a new page touches nothing the load
	 * checks, once its layer is in (the name may be taken there). */
	if (rc == 0)
		rc = kvfs_changes_damaged(fs);
	if (rc == 0)
		rc = kv_index_layer_load(fs->idx, parent);   /* I/O: before ns_lock */
	if (rc < 0)
		return rc;
	f = file_new(0, true);
	if (!f)
		return -ENOMEM;
	f->uid = uid;
	/* The new page's name is charged a block (kvfs_store_usage): in
	 * cache mode a full store makes room for it as for a write. */
	for (int tries = 0;; tries++) {
		int space = tries ? kvfs_space_wait_run(fs, KV_ALIGN)
				  : kvfs_space_wait(fs, KV_ALIGN);
		bool again = space == 0 && tries < SPACE_RETRIES;

		pthread_mutex_lock(&fs->ns_lock);
		rc = kvfs_open_share_full(fs, uid, writing_bytes(fs, uid), name);
		if (rc == 0)
			rc = kvfs_page_name_room(fs, again);
		if (rc == 0)
			rc = do_create(fs, parent, name, mode, uid, gid, n);
		pthread_mutex_unlock(&fs->ns_lock);
		if (rc != -ENOSPC || !again)
			break;
	}
	if (rc < 0) {
		file_free(f);
		return rc;
	}
	f->ino = n->ino;
	*out = f;
	return 0;
}

/* ---- what open readers keep (engine/openshare.c) ---- */

/* May f keep d for its next reads? */
static bool hold_take(struct kvfs *fs, struct kvfs_file *f, const struct kvfs_data *d)
{
	if (!d->size)
		return true;      /* an empty page keeps nothing */
	if (!kvfs_read_hold_take(fs, f->uid, d->size, f->ino))
		return false;
	f->held = d->size;
	return true;
}

static void hold_give(struct kvfs *fs, struct kvfs_file *f)
{
	if (f->held)
		kvfs_read_hold_give(fs, f->uid, f->held);
	f->held = 0;
}

/* ---- open ---- */

/* A waiter's slot for uid, or -1 when none is free to it (ns_lock held). */
static int seal_slot_take(struct kvfs *fs, uint32_t uid)
{
	int free_slot = -1;
	unsigned mine = 0;

	for (int i = 0; i < SEAL_WAITERS_MAX; i++) {
		if (!fs->seal_waiters[i].used)
			free_slot = free_slot < 0 ? i : free_slot;
		else if (fs->seal_waiters[i].uid == uid)
			mine++;
	}
	if (free_slot < 0 || mine >= SEAL_WAITERS_PER_UID)
		return -1;
	fs->seal_waiters[free_slot].used = true;
	fs->seal_waiters[free_slot].uid = uid;
	return free_slot;
}

/* Wait (ns_lock held) for a page whose writer already closed to be sealed:
 * the kernel sends the release that seals it after close(2) returns. At
 * most until SEAL_WAIT_MS after that close, whoever waits and however
 * often (a writer holding a duplicate never seals; one call naming its
 * page many times must not wait each time), and until deadline_ns. */
static void wait_for_seal(struct kvfs *fs, uint64_t ino, uint32_t uid, int64_t deadline_ns)
{
	struct kvfs_live *l = kvfs_live_find(fs, ino);
	struct timespec until;
	int64_t end;
	int slot;

	if (!l || !l->writing || !l->flushed_ns)
		return;
	end = l->flushed_ns + SEAL_WAIT_MS * 1000000ll;
	end = end < deadline_ns ? end : deadline_ns;
	if (end <= kvfs_now_ns())
		return;
	slot = seal_slot_take(fs, uid);
	if (slot < 0)
		return;
	until = (struct timespec){ .tv_sec = end / 1000000000, .tv_nsec = end % 1000000000 };
	while (l && l->writing && l->flushed_ns) {
		if (pthread_cond_timedwait(&fs->seal_cv, &fs->ns_lock, &until) == ETIMEDOUT)
			break;
		l = kvfs_live_find(fs, ino);
	}
	fs->seal_waiters[slot].used = false;
}

/* wait_for_seal, then *n as it is now: 0 sealed, -EBUSY still being
 * written, or the index's error (unlinked meanwhile). ns_lock held. */
static int await_seal_locked(struct kvfs *fs, uint32_t uid, struct kv_node_info *n,
			     int64_t deadline_ns)
{
	int rc;

	wait_for_seal(fs, n->ino, uid, deadline_ns);
	rc = kv_index_get(fs->idx, n->ino, n);
	if (rc < 0)
		return rc;
	return n->state == KV_PAGE_WRITING ? -EBUSY : 0;
}

int kvfs_page_await_seal(struct kvfs *fs, uint32_t uid, struct kv_node_info *n,
			 int64_t *deadline_ns)
{
	int rc;

	if (!*deadline_ns)
		*deadline_ns = kvfs_now_ns() + SEAL_WAIT_MS * 1000000ll;
	pthread_mutex_lock(&fs->ns_lock);
	rc = await_seal_locked(fs, uid, n, *deadline_ns);
	pthread_mutex_unlock(&fs->ns_lock);
	return rc;
}

static int do_open(struct kvfs *fs, struct kvfs_file *f, int flags)
{
	struct kv_node_info n;
	struct kvfs_live *l;
	uint64_t pinned;
	int rc;

	rc = kv_index_get(fs->idx, f->ino, &n);
	if (rc < 0)
		return rc;     /* an unlinked page cannot be opened again */
	if (n.kind != KV_KIND_PAGE)
		return -EISDIR;
	if ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC)) {
		kv_log(KV_LOG_DEBUG, "open of page %s for writing refused: %s", n.name,
		       n.state == KV_PAGE_WRITING ? "being written" : "sealed pages are immutable");
		return n.state == KV_PAGE_WRITING ? -EBUSY : -EPERM;
	}
	if (n.state == KV_PAGE_WRITING && (rc = await_seal_locked(fs, f->uid, &n, INT64_MAX)) < 0)
		return rc;
	/* Held open, the page cannot be evicted: counted in the uid's share,
	 * an empty one at the block its name is charged (kvfs_store_usage). */
	rc = kvfs_open_share_take(fs, f->uid, n.extent_id ? kv_extent_footprint(&n.ext) : KV_ALIGN,
				  writing_bytes(fs, f->uid), n.name, &pinned);
	if (rc < 0)
		return rc;
	l = kvfs_live_get(fs, f->ino);
	if (!l) {
		kvfs_open_share_give_locked(fs, f->uid, pinned);
		return -ENOMEM;
	}
	f->pinned = pinned;
	l->opens++;
	/* Reads may be served from the kernel's cache and never reach us:
	 * an open is the access the eviction order sees. */
	kvfs_page_touch(fs, &n);
	return 0;
}

int kvfs_file_open(struct kvfs *fs, uint64_t ino, int flags, uint32_t uid,
		   struct kvfs_file **out)
{
	struct kvfs_file *f = file_new(ino, false);
	struct kv_node_info warm;
	int rc;

	if (!f)
		return -ENOMEM;
	f->uid = uid;
	/* The kernel opens inodes it cached: one whose layer went back to the
	 * manifest (index/unload.c) is loaded here, not under ns_lock. */
	(void)kv_index_get(fs->idx, ino, &warm);
	pthread_mutex_lock(&fs->ns_lock);
	rc = do_open(fs, f, flags);
	pthread_mutex_unlock(&fs->ns_lock);
	if (rc < 0) {
		file_free(f);
		return rc;
	}
	*out = f;
	return 0;
}

/* ---- read ---- */

/* The writer may read back what it wrote so far: copied out under the
 * lock, since a concurrent write may reallocate the buffer. */
static int read_own_write(struct kvfs *fs, struct kvfs_file *f, uint64_t off,
			  size_t size, struct kvfs_data **out, size_t *len)
{
	struct kvfs_data *copy = NULL;
	struct kvfs_live *l;
	size_t n = 0;

	pthread_mutex_lock(&fs->ns_lock);
	l = kvfs_live_find(fs, f->ino);
	if (l && l->writing && l->write_err) {     /* doomed: its bytes are gone */
		pthread_mutex_unlock(&fs->ns_lock);
		return l->write_err;
	}
	if (l && l->wbuf && off < l->wbuf->size) {
		n = l->wbuf->size - off < size ? l->wbuf->size - off : size;
		copy = kvfs_data_new(n);
		if (copy) {
			memcpy(copy->bytes, l->wbuf->bytes + off, n);
			copy->size = n;
		}
	}
	pthread_mutex_unlock(&fs->ns_lock);
	if (n && !copy)
		return -ENOMEM;
	*out = copy;
	*len = n;
	return 0;
}

int kvfs_file_read(struct kvfs *fs, struct kvfs_file *f, uint64_t off, size_t size,
		   struct kvfs_data **hold, const void **bytes, size_t *len)
{
	struct kvfs_data *d;
	int rc = 0;

	*hold = NULL;
	*bytes = NULL;
	*len = 0;
	if (f->writer && !f->sealed) {
		rc = read_own_write(fs, f, off, size, hold, len);
		if (rc == 0 && *hold)
			*bytes = (*hold)->bytes;
		return rc;
	}
	pthread_mutex_lock(&f->lock);
	d = f->data;
	if (!d && (rc = kvfs_page_load(fs, f->ino, &d)) == 0 && hold_take(fs, f, d))
		f->data = d;
	/* The front end may finish this read, and the client close the file
	 * and release it, before the caller is done with the bytes: keep
	 * them alive until it puts hold (a page not kept: this reference). */
	if (rc == 0 && d == f->data)
		d = kvfs_data_get(d);
	pthread_mutex_unlock(&f->lock);
	if (rc < 0)
		return rc;
	if (off >= d->size)
		size = 0;
	else if (d->size - off < size)
		size = d->size - off;
	*hold = d;
	*bytes = size ? d->bytes + off : NULL;
	*len = size;
	return 0;
}

/* ---- write ---- */

/* Validate a write (ns_lock held) and return the writer's buffer. */
static int write_target(struct kvfs *fs, struct kvfs_file *fh, uint64_t end,
			bool may_retry, struct kvfs_data **out,
			struct kv_node_info *n)
{
	struct kvfs_live *l = kvfs_live_find(fs, fh->ino);
	uint64_t limit;
	bool exact;
	int rc;

	if (fh->sealed || !l || !l->writing || !l->wbuf)
		return -EPERM;
	if (l->write_err)
		return l->write_err;   /* doomed since write_possible looked */
	rc = kvfs_node_get_locked(fs, fh->ino, n);
	if (rc == 0)
		rc = kvfs_page_limit(fs, n->parent, &limit, &exact);
	if (rc < 0)
		return rc;
	if (end > limit) {
		KV_LOG_LIMITED(&refused_log, KV_LOG_ERR, "page %s: write up to byte %llu refused: %s is %llu bytes; "
		       "the page will not be stored", n->name, (unsigned long long)end,
		       exact ? "the model geometry's page size" : "the page size limit (-o max_page)",
		       (unsigned long long)limit);
		rc = -EFBIG;
	}
	if (rc == 0)
		rc = kvfs_page_reserve(fs, l, end, may_retry);
	if (rc == -ENOSPC && may_retry)
		return -EAGAIN;     /* the evictor may make room: not refused yet */
	/* Grow under the lock: the writer's own reads copy from this buffer. */
	if (rc == 0)
		rc = kvfs_data_reserve(l->wbuf, end);
	if (rc < 0) {
		/* A page missing a refused write is a truncated page: it must
		 * never be sealed, whatever the writer does next. */
		kvfs_page_doom_locked(fs, fh->ino, rc);
		return rc;
	}
	l->flushed_ns = 0;
	*out = l->wbuf;
	return 0;
}

/* Could a write up to byte end ever be accepted? Checked before any
 * charge or wait (takes ns_lock). -EFBIG past the page size limit or the
 * whole capacity of the store, -EPERM on a page that is not being written;
 * a refused write also dooms the page (write_err), as in write_target. */
static int write_possible(struct kvfs *fs, struct kvfs_file *fh, uint64_t end)
{
	uint64_t limit, cap = fs->meta.capacity;
	struct kv_node_info n;
	struct kvfs_live *l;
	bool exact;
	int rc;

	pthread_mutex_lock(&fs->ns_lock);
	l = kvfs_live_find(fs, fh->ino);
	rc = fh->sealed || !l || !l->writing || !l->wbuf ? -EPERM : 0;
	if (rc == 0 && l->write_err)
		rc = l->write_err;   /* doomed: later bytes would be thrown away too */
	if (rc == 0)
		rc = kvfs_node_get_locked(fs, fh->ino, &n);
	if (rc == 0)
		rc = kvfs_page_limit(fs, n.parent, &limit, &exact);
	if (rc == 0 && (end > limit || (cap && end > cap))) {
		KV_LOG_LIMITED(&refused_log, KV_LOG_ERR, "page %s: write up to byte %llu refused at once: %s is %llu bytes; "
		       "the page will not be stored", n.name, (unsigned long long)end,
		       end > limit ? (exact ? "the model geometry's page size"
				      : "the page size limit (-o max_page)")
		       : "the store's whole capacity",
		       (unsigned long long)(end > limit ? limit : cap));
		rc = -EFBIG;
		kvfs_page_doom_locked(fs, fh->ino, rc);
	}
	pthread_mutex_unlock(&fs->ns_lock);
	return rc;
}

int kvfs_file_write(struct kvfs *fs, struct kvfs_file *fh, const void *buf, size_t size,
		    uint64_t off, bool keep_setid)
{
	uint64_t end = off + size;
	struct kvfs_data *d = NULL;
	struct kv_node_info n;
	uint64_t charge, held;
	uint32_t uid;
	int rc, space;

	/* A write that can never succeed fails before it costs anything: it
	 * must not wait for write-back room or make the evictor empty the
	 * store for bytes that will be refused anyway. */
	rc = kvfs_changes_damaged(fs);    /* only new pages are written */
	if (rc == 0)
		rc = write_possible(fs, fh, end);
	if (rc < 0)
		return rc;
	charge = kvfs_page_charge_for(fs, fh->ino, end, &held, &uid);
	rc = kvfs_dirty_take_uid(fs, uid, charge, held);   /* may block: write-back is full */
	if (rc < 0)
		return kvfs_page_doom(fs, fh->ino, rc);
	/* May block while the evictor makes room (cache mode); others may
	 * take that room first, so the check under the lock can send us back
	 * to wait, until the evictor has nothing left to give. */
	for (int tries = 0;; tries++) {
		space = tries ? kvfs_space_wait_run(fs, charge) : kvfs_space_wait(fs, charge);
		pthread_mutex_lock(&fs->ns_lock);
		rc = write_target(fs, fh, end, space == 0 && tries < SPACE_RETRIES,
				  &d, &n);
		if (rc == 0)
			kvfs_page_charge_add(fs, fh->ino, uid, charge);
		pthread_mutex_unlock(&fs->ns_lock);
		if (rc != -EAGAIN)
			break;
	}
	if (rc < 0) {
		kvfs_page_charge_give(fs, uid, charge);
		return rc;
	}
	/* The kernel serialises writes, truncates and the final release of one
	 * inode (async direct I/O, which would not, is off: fuse/ops.c
	 * op_init), and the buffer only moves under ns_lock (above), so the bytes
	 * are ours to fill without holding it; so is size, which only this
	 * writer changes. Bytes past size are undefined (kvfs_data): a hole
	 * the write leaves before off must read as zeros. */
	if (off > d->size)
		memset(d->bytes + d->size, 0, off - d->size);
	memcpy(d->bytes + off, buf, size);
	pthread_mutex_lock(&fs->ns_lock);
	if (end > d->size)
		d->size = end;
	if (kvfs_node_get_locked(fs, fh->ino, &n) == 0) {
		n.size = d->size;
		n.attr.mtime_ns = n.attr.ctime_ns = kvfs_now_ns();   /* as ext4 */
		/* The kernel clears them itself only on its cached path; the
		 * creator's direct writes (fuse/ops_file.c) come here. setgid
		 * without group execute is not a set-id bit (Linux keeps it). */
		if (!keep_setid && (n.attr.mode & S_ISUID ||
				    (n.attr.mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP))) {
			n.attr.mode &= ~(uint32_t)S_ISUID;
			if (n.attr.mode & S_IXGRP)
				n.attr.mode &= ~(uint32_t)S_ISGID;
		}
		kvfs_node_put_locked(fs, fh->ino, &n, KV_UPD_SIZE | KV_UPD_ATTR);
	}
	pthread_mutex_unlock(&fs->ns_lock);
	return 0;
}

/* ---- close, release, fsync ---- */

/* A close of a descriptor: the writer's last one reports a page of the
 * wrong size or one a refused write truncated. */
int kvfs_file_flush(struct kvfs *fs, struct kvfs_file *fh)
{
	struct kvfs_live *l;
	struct kv_node_info n;
	uint64_t limit = 0;
	bool exact = false;
	int rc = 0;

	if (!fh->writer)
		return 0;
	pthread_mutex_lock(&fs->ns_lock);
	l = kvfs_live_find(fs, fh->ino);
	if (l && l->writing && l->wbuf && l->write_err) {
		l->flushed_ns = kvfs_now_ns();
		rc = l->write_err;     /* close() tells the writer the page is lost */
	} else if (l && l->writing && l->wbuf) {
		l->flushed_ns = kvfs_now_ns();
		/* The close that ends a page of the wrong size reports it; a
		 * close before any byte was written (shell redirection) does not. */
		if (kv_index_get(fs->idx, fh->ino, &n) == 0 &&
		    kvfs_page_limit(fs, n.parent, &limit, &exact) == 0 &&
		    exact && l->wbuf->size && l->wbuf->size != limit) {
			KV_LOG_LIMITED(&refused_log, KV_LOG_ERR, "page %s: %llu bytes, but the model geometry makes a page %llu bytes; it will not be stored",
			       n.name, (unsigned long long)l->wbuf->size,
			       (unsigned long long)limit);
			rc = -EINVAL;
		}
	}
	pthread_mutex_unlock(&fs->ns_lock);
	return rc;
}

/* The last close of the writer: seal, or discard what cannot be a page. */
static void release_writer(struct kvfs *fs, struct kvfs_live *l,
			   const struct kvfs_seal_plan *plan)
{
	int rc;

	if (l->writing && !l->unlinked && l->write_err) {
		KV_LOG_LIMITED(&refused_log, KV_LOG_WARN, "page inode %llu discarded at close: a write to it failed (%s)",
		       (unsigned long long)l->ino, kv_strerror(l->write_err));
		kv_index_remove(fs->idx, l->ino);
	} else if (l->writing && !l->unlinked) {
		rc = kvfs_page_seal(fs, l, plan);
		if (rc < 0) {
			if (rc != -ENODATA && rc != -EINVAL)   /* those were reported */
				atomic_fetch_add(&fs->st.pages_lost, 1);
			if (rc == -ENODATA || rc == -EINVAL || rc == -EFBIG || rc == -EDQUOT ||
			    rc == -ENOSPC)
				KV_LOG_LIMITED(&refused_log, rc == -ENODATA ? KV_LOG_WARN : KV_LOG_ERR,
					       "page inode %llu discarded at close: %s",
					       (unsigned long long)l->ino, kv_strerror(rc));
			else
				kv_log(KV_LOG_ERR, "page inode %llu discarded at close: %s",
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
		kvfs_live_writer_done(fs, l);
		pthread_cond_broadcast(&fs->seal_cv);
	}
}

/*
 * Hash the payload a writer is about to seal and look for a twin extent,
 * before ns_lock is taken for the seal: dedup may read the disk. False if
 * there is nothing to seal. The kernel sends no write to this inode while
 * its writer is being released or fsync'ed, so the bytes stay as probed.
 */
static bool plan_seal(struct kvfs *fs, struct kvfs_file *fh, struct kvfs_seal_plan *p)
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

void kvfs_file_release(struct kvfs *fs, struct kvfs_file *fh)
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
	kvfs_open_share_give_locked(fs, fh->uid, fh->pinned);
	pthread_mutex_unlock(&fs->ns_lock);
	if (planned)
		kvfs_seal_plan_clear(&plan);
	hold_give(fs, fh);
	file_free(fh);
}

int kvfs_file_fsync(struct kvfs *fs, struct kvfs_file *fh)
{
	uint64_t mark = kvfs_commit_mark(fs);   /* before our seal is queued */
	struct kvfs_seal_plan plan;
	bool planned = plan_seal(fs, fh, &plan);
	struct kvfs_live *l;
	int rc = 0;

	if (fh->writer && !fh->sealed) {
		/* fsync is the writer's commit point: the page is sealed now and
		 * later writes through this descriptor fail with EPERM. */
		pthread_mutex_lock(&fs->ns_lock);
		l = kvfs_live_find(fs, fh->ino);
		if (l && l->writing && l->write_err)
			rc = l->write_err;      /* a truncated page is never sealed */
		else if (l && l->writing && !l->unlinked && l->wbuf && l->wbuf->size) {
			/* (nothing written yet: nothing to make durable) */
			uint64_t footprint = (l->wbuf->size + KV_ALIGN - 1) & ~(uint64_t)(KV_ALIGN - 1);

			rc = kvfs_page_seal(fs, l, planned ? &plan : NULL);
			if (rc == 0) {
				fh->sealed = true;
				/* Sealed and still held by this descriptor: never
				 * evicted until it closes, like a reader's page. */
				fh->pinned = kvfs_open_share_add_locked(fs, fh->uid, footprint);
			}
		}
		pthread_mutex_unlock(&fs->ns_lock);
	}
	if (planned)
		kvfs_seal_plan_clear(&plan);
	if (rc == 0)
		rc = kvfs_commit_wait_all(fs, mark);
	return rc;
}
