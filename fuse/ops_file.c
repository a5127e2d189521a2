/*
 * FUSE file operations on pages: what the kernel asks, handed to the
 * engine's page files (engine/pagefile.c: create, write, seal on the last
 * close or fsync, open and read), and their replies. Sealed pages are
 * served with keep_cache, so repeated reads come from the kernel's page
 * cache.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "ops.h"

static struct kvfs_file *get_file(struct fuse_file_info *fi)
{
	return (struct kvfs_file *)(uintptr_t)fi->fh;
}

void kvfs_op_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		    mode_t mode, struct fuse_file_info *fi)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct kvfs *fs = req_fs(req);
	struct fuse_entry_param e;
	struct kv_node_info n;
	struct kvfs_file *f;
	int rc;

	rc = kvfs_file_create(fs, parent, name, mode, ctx->uid, ctx->gid, &f, &n);
	if (rc < 0)
		return kvfs_reply_err(req, rc);
	fi->fh = (uintptr_t)f;
	/* The creator's writes go straight to us, not through the page cache:
	 * the kernel then skips file_remove_privs, which otherwise asks us for
	 * security.capability (GETXATTR) before a write(2) to an inode not
	 * marked S_NOSEC (measured: one per write(2) while a page's attributes
	 * timed out at once as it was written).
	 * A page has no capabilities to remove; set-id bits keep the cached
	 * path, which clears them as POSIX wants. */
	fi->direct_io = !(mode & (S_ISUID | S_ISGID));
	kvfs_fill_entry(fs, &n, &e);
	/* If the caller was interrupted the kernel never sends RELEASE: undo
	 * the create here or the page would stay "being written" forever. */
	if (fuse_reply_create(req, &e, fi) != 0)
		kvfs_file_release(fs, f);
}

void kvfs_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvfs *fs = req_fs(req);
	struct kvfs_file *f;
	int rc = kvfs_file_open(fs, ino, fi->flags, fuse_req_ctx(req)->uid, &f);

	if (rc < 0)
		return kvfs_reply_err(req, rc);
	fi->fh = (uintptr_t)f;
	fi->keep_cache = 1;      /* sealed: the kernel's cached bytes stay valid */
	fi->noflush = 1;
	if (fuse_reply_open(req, fi) != 0)
		kvfs_file_release(fs, f);   /* interrupted: no RELEASE will come */
}

void kvfs_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		  struct fuse_file_info *fi)
{
	struct kvfs_data *hold;
	const void *bytes;
	size_t len;
	int rc;

	(void)ino;
	rc = kvfs_file_read(req_fs(req), get_file(fi), (uint64_t)off, size, &hold,
			    &bytes, &len);
	if (rc < 0)
		return kvfs_reply_err(req, rc);
	fuse_reply_buf(req, bytes, len);
	kvfs_data_put(hold);     /* after the reply: the kernel has the bytes */
}

void kvfs_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
		   off_t off, struct fuse_file_info *fi)
{
	int rc;

	(void)ino;
	/* root stands for CAP_FSETID: the request does not carry capabilities */
	rc = kvfs_file_write(req_fs(req), get_file(fi), buf, size, (uint64_t)off,
			     fuse_req_ctx(req)->uid == 0);
	if (rc < 0)
		return kvfs_reply_err(req, rc);
	fuse_reply_write(req, size);
}

void kvfs_op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	kvfs_reply_err(req, kvfs_file_flush(req_fs(req), get_file(fi)));
}

void kvfs_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	kvfs_file_release(req_fs(req), get_file(fi));
	fuse_reply_err(req, 0);
}

void kvfs_op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
		   struct fuse_file_info *fi)
{
	(void)ino; (void)datasync;
	kvfs_reply_err(req, kvfs_file_fsync(req_fs(req), get_file(fi)));
}

/*
 * fallocate(2) mode 0 grows a page being written to off + len, as an
 * ftruncate up does (its zeros are charged as written bytes, and past
 * the page size it is refused and dooms the page alike); a range inside
 * the page changes nothing. The other modes are EOPNOTSUPP: a page is
 * never sparse, and space is charged as bytes arrive, so there is
 * nothing to keep aside (KEEP_SIZE) or punch. The kernel sends it only
 * for a descriptor open for writing, which only a page's writer holds.
 */
void kvfs_op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
		       struct fuse_file_info *fi)
{
	struct kvfs *fs = req_fs(req);
	struct kvfs_attr_change c = { .valid = KVFS_ATTR_SIZE };
	struct kv_node_info n;
	int rc;

	(void)fi;
	if (mode != 0)
		return kvfs_reply_err(req, -EOPNOTSUPP);
	if (off < 0 || len <= 0 || off > INT64_MAX - len)
		return kvfs_reply_err(req, -EINVAL);
	rc = kvfs_node_get(fs, ino, &n);
	if (rc == 0 && n.kind != KV_KIND_PAGE)
		rc = -ENODEV;
	if (rc == 0 && n.state != KV_PAGE_WRITING)
		rc = -EPERM;
	if (rc < 0 || (uint64_t)(off + len) <= n.size)
		return kvfs_reply_err(req, rc);
	c.size = (uint64_t)(off + len);
	c.caller = fuse_req_ctx(req)->uid;
	kvfs_reply_err(req, kvfs_ns_setattr(fs, ino, &c, &n));
}
