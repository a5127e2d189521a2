/*
 * FUSE namespace operations: lookup, attributes, directories (models and
 * layers), unlink, rename, readdir(plus), statfs, and the operations kvfs
 * refuses. The changes themselves are the engine's (engine/namespace.c:
 * index, then manifest, under ns_lock); this file decodes requests and
 * replies. The control directory MOUNT/.kvfs and the file operations are
 * in fuse/ctl.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ctl.h"
#include "ops.h"

#define WORKER_SLICE_NS 100000ull

__thread bool kvfs_worker_sliced;

/*
 * FUSE workers answer requests someone waits on. Executor threads run
 * long calls, and at nice +11 they weigh little, but a worker that wakes
 * still waited out their time slices: up to 16 ms on 2 vCPUs behind one
 * uid's 12 LOOKUP calls, so root's stat, read and ls went 5-10x slower
 * (docs/benchmarks/engines.md). A short slice (sched_setattr's
 * sched_runtime for a fair thread, Linux 6.12 and later) lets the
 * scheduler run a waking worker at once; a kernel without it refuses
 * (EINVAL: logged at debug) or ignores it, and nothing else changes.
 */
void kvfs_worker_short_slice(void)
{
	struct {
		uint32_t size, policy;
		uint64_t flags;
		int32_t nice;
		uint32_t priority;
		uint64_t runtime, deadline, period;
	} attr = { .size = 48, .policy = 0 /* SCHED_OTHER */,
		   .nice = getpriority(PRIO_PROCESS, 0), .runtime = WORKER_SLICE_NS };

	kvfs_worker_sliced = true;
	if (syscall(SYS_sched_setattr, 0, &attr, 0) != 0)
		kv_log(KV_LOG_DEBUG, "FUSE worker: no short time slice: %s", strerror(errno));
}

void kvfs_reply_err(fuse_req_t req, int rc)
{
	fuse_reply_err(req, rc < 0 ? kv_errno(rc) : rc);
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

/*
 * Sealed pages never change: the kernel may cache their names, attributes
 * and data for as long as it likes. A page being written changes size and
 * times, but only by writes through this kernel, and each of those drops
 * the size, times and blocks it has cached (fuse_write_update_attr), so
 * the next stat asks us; mode and owner change only by a SETATTR whose
 * reply it caches. A second, as for directories, is safe. Zero made the
 * permission check of every open(O_CREAT) ask GETATTR once more: one round
 * trip of the seven a page written through FUSE cost.
 */
static double attr_timeout(struct kvfs *fs, const struct kv_node_info *n)
{
	if (n->kind != KV_KIND_PAGE || n->state == KV_PAGE_WRITING)
		return 1.0;
	return fs->opts.entry_timeout;
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
	/* One request at a time per page: with async direct I/O the kernel
	 * splits one large AIO O_DIRECT write into WRITE requests it sends
	 * together, and a page's writer (engine/pagefile.c) copies into its
	 * buffer outside ns_lock, trusting the kernel to serialise writes to
	 * an inode: two at once could grow (move) or doom (free) the buffer
	 * under the other's copy. */
	conn->want &= ~FUSE_CAP_ASYNC_DIO;
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

/* Attribute changes (engine/namespace.c), under the kernel's permission
 * checks (default_permissions). */
static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *a, int valid,
		       struct fuse_file_info *fi)
{
	struct kvfs *fs = req_fs(req);
	struct kvfs_attr_change c;
	struct kv_node_info n;
	struct stat st;
	int rc;

	(void)fi;
	if (kvfs_ino_virtual(ino))
		return kvfs_reply_err(req, -EPERM);
	rc = kvfs_attr_change_from(a, valid, ino, &c);
	c.caller = fuse_req_ctx(req)->uid;
	if (rc == 0)
		rc = kvfs_ns_setattr(fs, ino, &c, &n);
	if (rc < 0)
		return kvfs_reply_err(req, rc);
	kvfs_fill_stat(fs, &n, &st);
	fuse_reply_attr(req, &st, attr_timeout(fs, &n));
}

/* ---- directories, unlink, rename (engine/namespace.c) ---- */

/* The control directory's names (.kvfs), which the engine does not know,
 * are refused here; the engine checks names and the manifest's health. */
static int reserved(fuse_ino_t parent, const char *name)
{
	return ctl_reserved(parent, name) ? -EPERM : 0;
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct kvfs *fs = req_fs(req);
	struct fuse_entry_param e;
	struct kv_node_info n;
	int rc = reserved(parent, name);

	if (rc == 0)
		rc = kvfs_ns_mkdir(fs, parent, name, mode, ctx->uid, ctx->gid, &n);
	if (rc < 0)
		return kvfs_reply_err(req, rc);
	kvfs_fill_entry(fs, &n, &e);
	fuse_reply_entry(req, &e);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct kvfs *fs = req_fs(req);
	int rc = reserved(parent, name);

	kvfs_reply_err(req, rc < 0 ? rc : kvfs_ns_rmdir(fs, parent, name));
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct kvfs *fs = req_fs(req);
	int rc = reserved(parent, name);

	kvfs_reply_err(req, rc < 0 ? rc : kvfs_ns_unlink(fs, parent, name));
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		      fuse_ino_t newparent, const char *newname, unsigned int flags)
{
	struct kvfs *fs = req_fs(req);
	int rc;

	if (flags & ~RENAME_NOREPLACE)
		return kvfs_reply_err(req, -EINVAL);   /* RENAME_EXCHANGE, WHITEOUT */
	rc = reserved(newparent, newname);
	if (rc == 0)
		rc = reserved(parent, name);
	if (rc == 0)
		rc = kvfs_ns_rename(fs, parent, name, newparent, newname,
				    !(flags & RENAME_NOREPLACE));
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
	kvfs_store_usage(fs, &u);
	kv_index_stats(fs->idx, &is);
	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = KV_ALIGN;
	sv.f_frsize = KV_ALIGN;
	/* df's Used must be the store's own bytes: with a budget, Size is the
	 * budget; without one, Size is what the store holds plus what it
	 * could still take (other files on the disk are not ours). */
	sv.f_blocks = (fs->meta.capacity ? fs->meta.capacity : u.used + u.avail) / KV_ALIGN;
	/* used may pass a budget: a smaller -o capacity, or empty pages
	 * charged a block each in a store made before that charge */
	sv.f_bfree = fs->meta.capacity ? (u.used < fs->meta.capacity ?
					  fs->meta.capacity - u.used : 0) / KV_ALIGN
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
	.fallocate = op_fallocate,
	.getxattr = kvfs_op_getxattr,
	.listxattr = kvfs_op_listxattr,
	.setxattr = kvfs_op_setxattr,
	.removexattr = kvfs_op_removexattr,
	.ioctl = op_ioctl,
	.poll = op_poll,
};
