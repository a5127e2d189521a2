/*
 * FUSE namespace operations: lookup, attributes, directories (models and
 * layers), unlink, rename, readdir(plus), statfs, and the operations kvfs
 * refuses. Every namespace change happens under kvfs.ns_lock in two steps
 * that must stay together: change the in-memory index (visibility), queue
 * the manifest change (durability, in the same order). The control
 * directory MOUNT/.kvfs and the file operations are in fuse/ctl.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "ctl.h"
#include "ops.h"

void kvfs_reply_err(fuse_req_t req, int rc)
{
	fuse_reply_err(req, rc < 0 ? kv_errno(rc) : rc);
}

int kvfs_check_name(const char *name)
{
	size_t len = strlen(name);

	if (len > KV_NAME_MAX)
		return -ENAMETOOLONG;
	if (len == 0 || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
		return -EINVAL;
	return 0;
}

void ts_from_ns(struct timespec *ts, int64_t ns)
{
	ts->tv_sec = ns / 1000000000;
	ts->tv_nsec = ns % 1000000000;
	if (ts->tv_nsec < 0) {   /* before 1970: tv_nsec is never negative */
		ts->tv_sec--;
		ts->tv_nsec += 1000000000;
	}
}

void kvfs_fill_stat(struct kvfs *fs, const struct kv_node_info *n, struct stat *st)
{
	(void)fs;
	memset(st, 0, sizeof(*st));
	st->st_ino = n->ino;
	st->st_uid = n->attr.uid;
	st->st_gid = n->attr.gid;
	ts_from_ns(&st->st_atim, n->attr.atime_ns);
	ts_from_ns(&st->st_mtim, n->attr.mtime_ns);
	ts_from_ns(&st->st_ctim, n->attr.ctime_ns);
	if (n->kind == KV_KIND_PAGE) {
		st->st_mode = S_IFREG | (n->attr.mode & 07777);
		st->st_nlink = 1;
		st->st_size = (off_t)n->size;
		/* du reports what the page occupies on the SSD. */
		st->st_blocks = (blkcnt_t)(n->extent_id ? kv_extent_footprint(&n->ext)
					   : (n->size + KV_ALIGN - 1) / KV_ALIGN * KV_ALIGN) / 512;
		st->st_blksize = 1 << 20;   /* tools copy a page in one call */
	} else {
		st->st_mode = S_IFDIR | (n->attr.mode & 07777);
		st->st_nlink = 2 + (n->kind == KV_KIND_LAYER ? 0 : n->nchildren);
		if (n->kind == KV_KIND_ROOT && kvfs_ctl_listed)
			st->st_nlink++;    /* .kvfs */
		st->st_size = 4096;
		st->st_blocks = 8;
		st->st_blksize = 4096;
	}
}

/* Sealed pages never change: the kernel may cache their names, attributes
 * and data for as long as it likes. Pages being written change size. */
static double attr_timeout(struct kvfs *fs, const struct kv_node_info *n)
{
	if (n->kind != KV_KIND_PAGE)
		return 1.0;
	return n->state == KV_PAGE_WRITING ? 0.0 : fs->opts.entry_timeout;
}

void kvfs_fill_entry(struct kvfs *fs, const struct kv_node_info *n,
		     struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = n->ino;
	e->generation = 1;
	e->attr_timeout = attr_timeout(fs, n);
	e->entry_timeout = n->kind == KV_KIND_PAGE && n->state == KV_PAGE_WRITING
		? 0.0 : fs->opts.entry_timeout;
	kvfs_fill_stat(fs, n, &e->attr);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	(void)userdata;
	/* Pages are written through the daemon so they can be sealed on close;
	 * a kernel write-back cache would hold bytes we never saw. */
	conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
	if (conn->capable & FUSE_CAP_READDIRPLUS)
		conn->want |= FUSE_CAP_READDIRPLUS;
	/* The fast path's ioctls are issued on model directories. */
	if (conn->capable & FUSE_CAP_IOCTL_DIR)
		conn->want |= FUSE_CAP_IOCTL_DIR;
	conn->max_write = 1 << 20;
	conn->max_read = 1 << 20;
	if (conn->max_readahead > 1 << 20)
		conn->max_readahead = 1 << 20;
	conn->max_background = 64;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct kvfs *fs = req_fs(req);
	struct fuse_entry_param e;
	struct kv_node_info n;
	int rc = kvfs_check_name(name);

	if (rc == 0 && (is_ctl_name(parent, name) || kvfs_ino_virtual(parent)))
		return ctl_lookup(req, parent, name);
	if (rc == 0)
		rc = kv_index_lookup(fs->idx, parent, name, &n);
	if (rc < 0)
		return kvfs_reply_err(req, rc);
	kvfs_fill_entry(fs, &n, &e);
	fuse_reply_entry(req, &e);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvfs *fs = req_fs(req);
	struct kv_node_info n;
	struct stat st;
	bool unlinked;
	int rc;

	(void)fi;
	if (kvfs_ino_virtual(ino)) {
		rc = ctl_stat(ino, &st);
		if (rc < 0)
			return kvfs_reply_err(req, rc);
		return (void)fuse_reply_attr(req, &st, 0.0);
	}
	rc = kv_index_get(fs->idx, ino, &n);
	unlinked = rc == -ENOENT;
	if (unlinked)     /* perhaps unlinked but still open */
		rc = kvfs_node_get(fs, ino, &n);
	if (rc < 0)
		return kvfs_reply_err(req, rc);
	kvfs_fill_stat(fs, &n, &st);
	if (unlinked)
		st.st_nlink = 0;
	fuse_reply_attr(req, &st, unlinked ? 0.0 : attr_timeout(fs, &n));
}

/* ev (may be NULL): KV event records of the change, taken. */
static void queue_change(struct kvfs *fs, const struct kv_node_info *n,
			 struct kvfs_event *ev)
{
	if (n->kind == KV_KIND_MODEL || n->kind == KV_KIND_LAYER)
		kvfs_commit_put_dir(fs, n);
	else if (n->kind == KV_KIND_PAGE && n->state != KV_PAGE_WRITING)
		return kvfs_commit_put_page(fs, n, ev);
	kvfs_event_free(ev);
}

static void queue_attr_change(struct kvfs *fs, const struct kv_node_info *n)
{
	queue_change(fs, n, NULL);
}

/* Attribute changes. A sealed page's content is immutable (no truncate),
 * its metadata is not: mode, owner and times change as on any file, under
 * the kernel's permission checks (default_permissions). */
static int do_setattr(struct kvfs *fs, fuse_ino_t ino, const struct stat *a,
		      int valid, struct kv_node_info *n)
{
	uint32_t old_mode;
	bool page;
	int rc;

	rc = kvfs_check_times(a, valid, ino);
	if (rc == 0)
		rc = kv_index_get(fs->idx, ino, n);
	if (rc < 0)
		return rc;
	page = n->kind == KV_KIND_PAGE;
	if (valid & FUSE_SET_ATTR_SIZE) {
		if (!page)
			return -EISDIR;
		if (n->state != KV_PAGE_WRITING)
			return -EPERM;
		rc = kvfs_page_truncate(fs, ino, (uint64_t)a->st_size);
		if (rc < 0)
			return rc;
		n->size = (uint64_t)a->st_size;
	}
	old_mode = n->attr.mode;
	if (valid & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
		if (valid & FUSE_SET_ATTR_MODE)
			n->attr.mode = a->st_mode & 07777;
		if (valid & FUSE_SET_ATTR_UID)
			n->attr.uid = a->st_uid;
		if (valid & FUSE_SET_ATTR_GID)
			n->attr.gid = a->st_gid;
	}
	kvfs_set_times(n, a, valid);
	rc = kv_index_update(fs->idx, ino, n, KV_UPD_ATTR);
	if (rc < 0)
		return rc;
	queue_attr_change(fs, n);
	/* The sticky bit is the pin (user.kvfs.pinned): chmod +t pins. */
	if (page && n->state != KV_PAGE_WRITING && (old_mode ^ n->attr.mode) & S_ISVTX)
		kvfs_ram_protect(fs, n->extent_id,
				 kvfs_extent_protected(fs, n->extent_id, n->attr.mode));
	return 0;
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *a, int valid,
		       struct fuse_file_info *fi)
{
	struct kvfs *fs = req_fs(req);
	struct kv_node_info n;
	struct stat st;
	int rc;

	(void)fi;
	if (kvfs_ino_virtual(ino))
		return kvfs_reply_err(req, -EPERM);
	if ((rc = kvfs_changes_refused(fs)) < 0)
		return kvfs_reply_err(req, rc);
	pthread_mutex_lock(&fs->ns_lock);
	rc = do_setattr(fs, ino, a, valid, &n);
	pthread_mutex_unlock(&fs->ns_lock);
	if (rc < 0)
		return kvfs_reply_err(req, rc);
	kvfs_fill_stat(fs, &n, &st);
	fuse_reply_attr(req, &st, attr_timeout(fs, &n));
}

/* ---- directories ---- */

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	struct kvfs *fs = req_fs(req);
	struct fuse_entry_param e;
	struct kv_node_info n;
	int rc = kvfs_check_name(name);

	if (rc == 0)
		rc = kvfs_changes_refused(fs);
	if (rc == 0 && ctl_reserved(parent, name))
		rc = -EPERM;
	if (rc == 0) {
		const struct fuse_ctx *ctx = fuse_req_ctx(req);

		rc = kvfs_ns_mkdir(fs, parent, name, mode, ctx->uid, ctx->gid, &n);
	}
	if (rc < 0)
		return kvfs_reply_err(req, rc);
	kvfs_fill_entry(fs, &n, &e);
	fuse_reply_entry(req, &e);
}

static int do_rmdir(struct kvfs *fs, fuse_ino_t parent, const char *name)
{
	struct kv_node_info n;
	int rc = kv_index_lookup(fs->idx, parent, name, &n);

	if (rc < 0)
		return rc;
	if (n.kind == KV_KIND_PAGE)
		return -ENOTDIR;
	rc = kv_index_remove(fs->idx, n.ino);
	if (rc == 0) {
		kvfs_commit_del_dir(fs, &n);
		kvfs_dir_changed(fs, parent);
	}
	return rc;
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct kvfs *fs = req_fs(req);
	int rc;

	if ((rc = kvfs_changes_refused(fs)) < 0)
		return kvfs_reply_err(req, rc);
	if (ctl_reserved(parent, name))
		return kvfs_reply_err(req, -EPERM);
	pthread_mutex_lock(&fs->ns_lock);
	rc = do_rmdir(fs, parent, name);
	pthread_mutex_unlock(&fs->ns_lock);
	kvfs_reply_err(req, rc);
}

static int do_unlink(struct kvfs *fs, fuse_ino_t parent, const char *name)
{
	struct kv_node_info n;
	int rc = kv_index_lookup(fs->idx, parent, name, &n);

	if (rc < 0)
		return rc;
	if (n.kind != KV_KIND_PAGE)
		return -EISDIR;
	return kvfs_page_forget(fs, &n, false, KVFS_EV_REMOVED);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct kvfs *fs = req_fs(req);
	int rc;

	if ((rc = kvfs_changes_refused(fs)) < 0)
		return kvfs_reply_err(req, rc);
	if (ctl_reserved(parent, name))
		return kvfs_reply_err(req, -EPERM);
	pthread_mutex_lock(&fs->ns_lock);
	rc = do_unlink(fs, parent, name);
	pthread_mutex_unlock(&fs->ns_lock);
	kvfs_reply_err(req, rc);
}

/* ---- rename ---- */

/* May node n live under directory np as newname? */
static int check_move(struct kvfs *fs, const struct kv_node_info *n,
		      const struct kv_node_info *np)
{
	uint64_t limit;
	bool exact;
	int rc;

	switch (n->kind) {
	case KV_KIND_PAGE:
		if (np->kind != KV_KIND_LAYER)
			return np->kind == KV_KIND_PAGE ? -ENOTDIR : -EPERM;
		rc = kvfs_page_limit(fs, np->ino, &limit, &exact);
		if (rc < 0)
			return rc;
		/* EXDEV, not EINVAL (which mv reports as "a subdirectory of
		 * itself"): the page cannot live there as it is, and a tool
		 * that falls back to copying gets the size error on its own
		 * write or close, with the source left in place. */
		if (n->state != KV_PAGE_WRITING && exact && n->size != limit) {
			kv_log(KV_LOG_ERR, "rename of page %s refused: %llu bytes, the geometry of the target model needs %llu",
			       n->name, (unsigned long long)n->size, (unsigned long long)limit);
			return -EXDEV;
		}
		return 0;
	case KV_KIND_LAYER:
		/* A layer directory's name is its layer number: renaming it
		 * would silently relabel every page in it. */
		kv_log(KV_LOG_INFO, "rename of layer directory %s refused", n->name);
		return -EPERM;
	case KV_KIND_MODEL:
		return np->kind == KV_KIND_ROOT ? 0 : -EPERM;
	default:
		return -EBUSY;
	}
}

/* The replaced target leaves the namespace first, as rename(2) requires. */
static int drop_target(struct kvfs *fs, const struct kv_node_info *n,
		       const struct kv_node_info *d, bool replace)
{
	int rc;

	if (!replace)
		return -EEXIST;
	if (n->kind == KV_KIND_PAGE && d->kind != KV_KIND_PAGE)
		return -EISDIR;
	if (n->kind != KV_KIND_PAGE && d->kind == KV_KIND_PAGE)
		return -ENOTDIR;
	if (d->kind == KV_KIND_PAGE)   /* its delete commits with the move */
		return kvfs_page_forget(fs, d, n->state != KV_PAGE_WRITING,
					KVFS_EV_NONE);   /* the move says replaced */
	if (d->nchildren)
		return -ENOTEMPTY;
	rc = kv_index_remove(fs->idx, d->ino);
	if (rc == 0)
		kvfs_commit_del_dir(fs, d);
	return rc;
}

static int do_rename(struct kvfs *fs, fuse_ino_t parent, const char *name,
		     fuse_ino_t newparent, const char *newname, bool replace)
{
	struct kv_node_info n, np, d;
	struct kvfs_event *ev = NULL;
	bool over_sealed = false;
	uint64_t replaced;
	int rc;

	rc = kv_index_lookup(fs->idx, parent, name, &n);
	if (rc == 0)
		rc = kv_index_get(fs->idx, newparent, &np);
	if (rc == 0)
		rc = check_move(fs, &n, &np);
	if (rc < 0)
		return rc;
	rc = kv_index_lookup(fs->idx, newparent, newname, &d);
	if (rc == 0) {
		if (d.ino == n.ino)
			return 0;
		rc = drop_target(fs, &n, &d, replace);
		if (rc < 0)
			return rc;
		over_sealed = d.kind == KV_KIND_PAGE && d.state != KV_PAGE_WRITING;
	}
	/* A sealed page leaves its name (removed) and takes the new one
	 * (stored, or replaced over a sealed page); a page still being
	 * written was never announced: its seal will be, under the new name. */
	if (n.kind == KV_KIND_PAGE && n.state != KV_PAGE_WRITING)
		ev = kvfs_event_capture(fs, KVFS_EV_REMOVED, &n);
	rc = kv_index_move(fs->idx, n.ino, newparent, newname, 0, &replaced);
	if (rc < 0) {
		kvfs_event_free(ev);
		return rc;
	}
	if (kv_index_get(fs->idx, n.ino, &n) == 0) {
		n.attr.ctime_ns = kvfs_now_ns();
		kv_index_update(fs->idx, n.ino, &n, KV_UPD_ATTR);
		if (ev)
			ev->next = kvfs_event_capture(fs, over_sealed ? KVFS_EV_REPLACED
						      : KVFS_EV_STORED, &n);
		queue_change(fs, &n, ev);
	} else {
		kvfs_event_free(ev);
	}
	kvfs_dir_changed(fs, newparent);
	if (parent != newparent) {
		struct kv_node_info old;

		kvfs_dir_changed(fs, parent);
		/* The committer persists the times of the directories its ops
		 * name; the one the page left is named by none. */
		if (kv_index_get(fs->idx, parent, &old) == 0)
			queue_attr_change(fs, &old);
	}
	return 0;
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		      fuse_ino_t newparent, const char *newname, unsigned int flags)
{
	struct kvfs *fs = req_fs(req);
	int rc = kvfs_check_name(newname);

	if (flags & ~RENAME_NOREPLACE)
		return kvfs_reply_err(req, -EINVAL);   /* RENAME_EXCHANGE, WHITEOUT */
	if (rc == 0)
		rc = kvfs_changes_refused(fs);
	if (rc == 0 && (ctl_reserved(parent, name) || ctl_reserved(newparent, newname)))
		rc = -EPERM;
	if (rc == 0) {
		pthread_mutex_lock(&fs->ns_lock);
		rc = do_rename(fs, parent, name, newparent, newname,
			       !(flags & RENAME_NOREPLACE));
		pthread_mutex_unlock(&fs->ns_lock);
	}
	kvfs_reply_err(req, rc);
}

/* ---- readdir ---- */

/* A directory entry the index does not hold (the control directory). */
struct vent {
	const char *name;
	uint64_t ino;
	enum kv_kind kind;
};

static const struct vent root_vents[] = {
	{ KVFS_CTL_NAME, KVFS_INO_CTL, KV_KIND_MODEL },
};
static const struct vent ctl_vents[] = {
	{ "stats", KVFS_INO_STATS, KV_KIND_PAGE },
	{ "metrics", KVFS_INO_METRICS, KV_KIND_PAGE },
	{ "events", KVFS_INO_EVENTS, KV_KIND_PAGE },
};

struct dirh {
	const struct vent *virt;    /* listed first, after "." and ".." */
	size_t nvirt;
	struct kv_dirent *ents;
	size_t n;
};

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvfs *fs = req_fs(req);
	struct dirh *h = calloc(1, sizeof(*h));
	int rc = 0;

	if (!h)
		return kvfs_reply_err(req, -ENOMEM);
	if (ino == KVFS_INO_CTL) {
		h->virt = ctl_vents;
		h->nvirt = sizeof(ctl_vents) / sizeof(ctl_vents[0]);
	} else if (kvfs_ino_virtual(ino)) {
		rc = -ENOTDIR;
	} else {
		if (ino == FUSE_ROOT_ID && kvfs_ctl_listed) {
			h->virt = root_vents;
			h->nvirt = sizeof(root_vents) / sizeof(root_vents[0]);
		}
		/* A snapshot keeps offsets stable while pages come and go. */
		rc = kv_index_readdir(fs->idx, ino, &h->ents, &h->n);
	}
	if (rc < 0) {
		free(h);
		return kvfs_reply_err(req, rc);
	}
	fi->fh = (uintptr_t)h;
	fi->cache_readdir = 0;
	fuse_reply_open(req, fi);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct dirh *h = (struct dirh *)(uintptr_t)fi->fh;

	(void)ino;
	kv_dirents_free(h->ents, h->n);
	free(h);
	fuse_reply_err(req, 0);
}

/* The entry readdirplus returns for ino: 0, or skip it (gone since opendir). */
static int plus_entry(struct kvfs *fs, const char *name, uint64_t ino,
		      struct fuse_entry_param *e)
{
	struct kv_node_info n;

	memset(e, 0, sizeof(*e));
	if (!strcmp(name, ".") || !strcmp(name, "..")) {
		e->attr.st_ino = ino;
		e->attr.st_mode = S_IFDIR;
		return 0;
	}
	if (kvfs_ino_virtual(ino))
		return ctl_entry(ino, e);
	if (kv_index_get(fs->idx, ino, &n) < 0)
		return -ENOENT;
	kvfs_fill_entry(fs, &n, e);
	return 0;
}

/* Offsets: 1 = after ".", 2 = after "..", then one per virtual entry, then
 * one per index entry. */
static size_t add_dirent(fuse_req_t req, struct kvfs *fs, char *p, size_t room,
			 const char *name, uint64_t ino, enum kv_kind kind,
			 off_t next, bool plus)
{
	struct fuse_entry_param e;

	if (!plus) {
		struct stat st = { .st_ino = ino,
				   .st_mode = kind == KV_KIND_PAGE ? S_IFREG : S_IFDIR };

		return fuse_add_direntry(req, p, room, name, &st, next);
	}
	if (plus_entry(fs, name, ino, &e) < 0)
		return 0;
	return fuse_add_direntry_plus(req, p, room, name, &e, next);
}

static void dirh_entry(const struct dirh *h, fuse_ino_t ino, off_t off,
		       const char **name, uint64_t *eino, enum kv_kind *kind)
{
	size_t i = (size_t)off;

	if (i < 2) {
		*name = i == 0 ? "." : "..";
		*eino = ino;
		*kind = KV_KIND_MODEL;
	} else if (i - 2 < h->nvirt) {
		*name = h->virt[i - 2].name;
		*eino = h->virt[i - 2].ino;
		*kind = h->virt[i - 2].kind;
	} else {
		i -= 2 + h->nvirt;
		*name = h->ents[i].name;
		*eino = h->ents[i].ino;
		*kind = h->ents[i].kind;
	}
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi, bool plus)
{
	struct kvfs *fs = req_fs(req);
	struct dirh *h = (struct dirh *)(uintptr_t)fi->fh;
	char *buf = malloc(size), *p = buf;
	size_t room = size, len;
	off_t end = (off_t)(h->n + h->nvirt + 2);

	if (!buf)
		return kvfs_reply_err(req, -ENOMEM);
	for (; off < end; off++) {
		const char *name;
		uint64_t eino;
		enum kv_kind kind;

		dirh_entry(h, ino, off, &name, &eino, &kind);
		len = add_dirent(req, fs, p, room, name, eino, kind, off + 1, plus);
		if (len > room)
			break;
		if (len == 0 && plus)
			continue;
		p += len;
		room -= len;
	}
	fuse_reply_buf(req, buf, size - room);
	free(buf);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, false);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			   struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, true);
}

static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync,
			struct fuse_file_info *fi)
{
	(void)ino; (void)datasync; (void)fi;
	struct kvfs *fs = req_fs(req);

	kvfs_reply_err(req, kvfs_commit_wait_all(fs, kvfs_commit_mark(fs)));
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct kvfs *fs = req_fs(req);
	struct kv_store_usage u;
	struct kv_index_stats is;
	struct statvfs sv;

	(void)ino;
	kv_store_usage(fs->store, &u);
	kv_index_stats(fs->idx, &is);
	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = KV_ALIGN;
	sv.f_frsize = KV_ALIGN;
	/* df's Used must be the store's own bytes: with a budget, Size is the
	 * budget; without one, Size is what the store holds plus what it
	 * could still take (other files on the disk are not ours). */
	sv.f_blocks = (fs->meta.capacity ? fs->meta.capacity : u.used + u.avail) / KV_ALIGN;
	sv.f_bfree = fs->meta.capacity ? (fs->meta.capacity - u.used) / KV_ALIGN
				       : u.avail / KV_ALIGN;
	sv.f_bavail = u.avail / KV_ALIGN;
	sv.f_files = is.models + is.layers + is.pages + 1 + sv.f_bavail;
	sv.f_ffree = sv.f_bavail;    /* one page per free block, at most */
	sv.f_favail = sv.f_bavail;
	sv.f_namemax = KV_NAME_MAX;
	fuse_reply_statfs(req, &sv);
}

/* kvfs has no symlinks, device nodes or hard links: say so plainly. */
static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
		       const char *name)
{
	(void)link; (void)parent; (void)name;
	kvfs_reply_err(req, -EPERM);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode, dev_t rdev)
{
	(void)parent; (void)name; (void)mode; (void)rdev;
	kvfs_reply_err(req, -EPERM);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
		    const char *newname)
{
	(void)ino; (void)newparent; (void)newname;
	kvfs_reply_err(req, -EPERM);
}

const struct fuse_lowlevel_ops kvfs_ops = {
	.init = op_init,
	.lookup = op_lookup,
	.getattr = op_getattr,
	.setattr = op_setattr,
	.mkdir = op_mkdir,
	.rmdir = op_rmdir,
	.unlink = op_unlink,
	.rename = op_rename,
	.symlink = op_symlink,
	.mknod = op_mknod,
	.link = op_link,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.readdirplus = op_readdirplus,
	.releasedir = op_releasedir,
	.fsyncdir = op_fsyncdir,
	.statfs = op_statfs,
	.create = op_create,
	.open = op_open,
	.read = op_read,
	.write = op_write,
	.flush = op_flush,
	.release = op_release,
	.fsync = op_fsync,
	.getxattr = kvfs_op_getxattr,
	.listxattr = kvfs_op_listxattr,
	.setxattr = kvfs_op_setxattr,
	.removexattr = kvfs_op_removexattr,
	.ioctl = op_ioctl,
	.poll = op_poll,
};
