/*
 * The control directory MOUNT/.kvfs (its inodes in fuse/ops.h): its
 * attributes and lookups for the namespace operations (fuse/ops.c), its
 * read-only snapshot files, and the file operations kvfs_ops names, which
 * route the control directory's inodes here (the event stream on to
 * engine/events.c) and every other to the pages (fuse/ops_file.c,
 * fast/fastpath.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"
#include "events_file.h"
#include "metrics.h"
#include "ops.h"

/*
 * Is MOUNT/.kvfs listed by readdir of the root? No: like ZFS's .zfs
 * (snapdir=hidden) and Lustre's .lustre it is reached by name only, so
 * find, du, rsync, cp -a and engines that take every root entry for a
 * model never see it (`find MOUNT -type f` counts pages). Set true to list
 * it (then `ls -a MOUNT` shows it and find descends into it).
 */
const bool kvfs_ctl_listed = false;

/* ---- the control directory: MOUNT/.kvfs ---- */

/*
 * Read-only files made by the daemon, like /proc: each open() formats a
 * fresh snapshot into its handle and reads serve that snapshot, so one
 * reader sees consistent numbers however many read() calls it takes.
 * direct_io keeps the kernel from caching the bytes or trusting st_size
 * (0, as in /proc). Nothing here touches the index.
 */
struct ctl_file {
	const char *name;
	uint64_t ino;
	int (*format)(const struct kvfs_metrics *m, char **out, size_t *len);
};

static const struct ctl_file ctl_files[] = {
	{ "stats", KVFS_INO_STATS, kvfs_metrics_json },
	{ "metrics", KVFS_INO_METRICS, kvfs_metrics_prom },
};
#define NCTL_FILES (sizeof(ctl_files) / sizeof(ctl_files[0]))

/* What opening a control file holds: the bytes of its snapshot. */
struct ctl_fh {
	char *buf;
	size_t len;
};

static const struct ctl_file *ctl_file_by_ino(uint64_t ino)
{
	size_t i;

	for (i = 0; i < NCTL_FILES; i++)
		if (ctl_files[i].ino == ino)
			return &ctl_files[i];
	return NULL;
}

/* Is name, in directory parent, the control directory itself? */
bool is_ctl_name(fuse_ino_t parent, const char *name)
{
	return parent == FUSE_ROOT_ID && !strcmp(name, KVFS_CTL_NAME);
}

/* A name nothing may create or move to: .kvfs and anything under it. */
bool ctl_reserved(fuse_ino_t parent, const char *name)
{
	return kvfs_ino_virtual(parent) ||
	       (parent == FUSE_ROOT_ID && !strncmp(name, KVFS_CTL_NAME, 5));
}

int ctl_stat(uint64_t ino, struct stat *st)
{
	int64_t now = kvfs_now_ns();

	if (ino != KVFS_INO_CTL && ino != KVFS_INO_EVENTS && !ctl_file_by_ino(ino))
		return -ENOENT;
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_uid = getuid();
	st->st_gid = getgid();
	ts_from_ns(&st->st_atim, now);
	ts_from_ns(&st->st_mtim, now);
	ts_from_ns(&st->st_ctim, now);
	/* No blocks: du and df must count only pages. */
	if (ino == KVFS_INO_CTL) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
		st->st_blksize = 4096;
	} else if (ino == KVFS_INO_EVENTS) {
		/* It names every page stored or removed, whatever the modes
		 * of their directories hide from others: the owner's only. */
		st->st_mode = S_IFREG | 0400;
		st->st_nlink = 1;
		st->st_blksize = 4096;
	} else {
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		st->st_blksize = 1 << 20;
	}
	return 0;
}

int ctl_entry(uint64_t ino, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = ino;
	e->generation = 1;
	/* The numbers change all the time: never cache the attributes. */
	e->attr_timeout = 0.0;
	e->entry_timeout = 1.0;
	return ctl_stat(ino, &e->attr);
}

/* Lookup in the control directory, or of it in the root. */
void ctl_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	uint64_t ino = 0;
	size_t i;

	if (parent == FUSE_ROOT_ID)
		ino = KVFS_INO_CTL;
	else if (parent == KVFS_INO_CTL && !strcmp(name, "events"))
		ino = KVFS_INO_EVENTS;
	else if (parent == KVFS_INO_CTL)
		for (i = 0; i < NCTL_FILES; i++)
			if (!strcmp(name, ctl_files[i].name))
				ino = ctl_files[i].ino;
	if (!ino)
		return kvfs_reply_err(req, parent == KVFS_INO_CTL ? -ENOENT : -ENOTDIR);
	ctl_entry(ino, &e);
	fuse_reply_entry(req, &e);
}

static int ctl_snapshot(struct kvfs *fs, const struct ctl_file *f, struct ctl_fh *h)
{
	struct kvfs_metrics *m = malloc(sizeof(*m));
	int rc;

	if (!m)
		return -ENOMEM;
	kvfs_metrics_snapshot(fs, m);
	rc = f->format(m, &h->buf, &h->len);
	free(m);
	return rc;
}

static void ctl_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	const struct ctl_file *f = ctl_file_by_ino(ino);
	struct ctl_fh *h;
	int rc;

	if (!f)
		return kvfs_reply_err(req, -EISDIR);
	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC))
		return kvfs_reply_err(req, -EACCES);
	h = calloc(1, sizeof(*h));
	if (!h)
		return kvfs_reply_err(req, -ENOMEM);
	rc = ctl_snapshot(req_fs(req), f, h);
	if (rc < 0) {
		free(h);
		return kvfs_reply_err(req, rc);
	}
	fi->fh = (uintptr_t)h;
	fi->direct_io = 1;
	fi->keep_cache = 0;
	if (fuse_reply_open(req, fi) != 0) {    /* interrupted: no RELEASE */
		free(h->buf);
		free(h);
	}
}

static void ctl_read(fuse_req_t req, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct ctl_fh *h = (struct ctl_fh *)(uintptr_t)fi->fh;

	if (off < 0 || (uint64_t)off >= h->len)
		return (void)fuse_reply_buf(req, NULL, 0);
	if (h->len - (size_t)off < size)
		size = h->len - (size_t)off;
	/* The kernel may complete this read, let the reader close and
	 * deliver RELEASE (which frees h) before fuse_reply_buf returns:
	 * reply from a copy of our own. */
	char *copy = size ? malloc(size) : NULL;

	if (size && !copy)
		return (void)kvfs_reply_err(req, -ENOMEM);
	if (size)
		memcpy(copy, h->buf + off, size);
	fuse_reply_buf(req, copy, size);
	free(copy);
}

static void ctl_release(fuse_req_t req, struct fuse_file_info *fi)
{
	struct ctl_fh *h = (struct ctl_fh *)(uintptr_t)fi->fh;

	if (h) {
		free(h->buf);
		free(h);
	}
	fuse_reply_err(req, 0);
}

/* ---- file operations: the control files, or the pages (fuse/ops_file.c) ---- */

void op_create(fuse_req_t req, fuse_ino_t parent, const char *name,
	       mode_t mode, struct fuse_file_info *fi)
{
	if (ctl_reserved(parent, name))
		return kvfs_reply_err(req, -EPERM);
	kvfs_op_create(req, parent, name, mode, fi);
}

void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (ino == KVFS_INO_EVENTS)
		return kvfs_events_open(req, fi);
	if (kvfs_ino_virtual(ino))
		return ctl_open(req, ino, fi);
	kvfs_op_open(req, ino, fi);
}

void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
	     struct fuse_file_info *fi)
{
	if (ino == KVFS_INO_EVENTS)
		return kvfs_events_read(req, size, fi);
	if (kvfs_ino_virtual(ino))
		return ctl_read(req, size, off, fi);
	kvfs_op_read(req, ino, size, off, fi);
}

void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
	      off_t off, struct fuse_file_info *fi)
{
	if (kvfs_ino_virtual(ino))    /* opened read-only: cannot happen */
		return kvfs_reply_err(req, -EBADF);
	kvfs_op_write(req, ino, buf, size, off, fi);
}

void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (kvfs_ino_virtual(ino))
		return kvfs_reply_err(req, 0);
	kvfs_op_flush(req, ino, fi);
}

void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (ino == KVFS_INO_EVENTS)
		return kvfs_events_release(req, fi);
	if (kvfs_ino_virtual(ino))
		return ctl_release(req, fi);
	kvfs_op_release(req, ino, fi);
}

void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
	      struct fuse_file_info *fi)
{
	if (kvfs_ino_virtual(ino))
		return kvfs_reply_err(req, 0);
	kvfs_op_fsync(req, ino, datasync, fi);
}

void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
		  struct fuse_file_info *fi)
{
	if (kvfs_ino_virtual(ino))    /* opened read-only: cannot happen */
		return kvfs_reply_err(req, -EBADF);
	kvfs_op_fallocate(req, ino, mode, off, len, fi);
}

/* The fast path speaks only on model directories; never on .kvfs. */
void op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
	      struct fuse_file_info *fi, unsigned flags, const void *in_buf,
	      size_t in_bufsz, size_t out_bufsz)
{
	if (kvfs_ino_virtual(ino))
		return kvfs_reply_err(req, -ENOTTY);
	kvfs_op_ioctl(req, ino, cmd, arg, fi, flags, in_buf, in_bufsz, out_bufsz);
}

/*
 * Only the event stream waits for something. Every other file is always
 * ready, as on a local file system: an error here (ENOSYS) would make the
 * kernel stop asking for the whole mount, the events file included.
 */
void op_poll(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi,
	     struct fuse_pollhandle *ph)
{
	if (ino == KVFS_INO_EVENTS)
		return kvfs_events_poll(req, fi, ph);
	if (ph)
		fuse_pollhandle_destroy(ph);
	fuse_reply_poll(req, POLLIN | POLLRDNORM | POLLOUT | POLLWRNORM);
}
