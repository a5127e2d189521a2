/*
 * The FUSE edge: low-level operation handlers. Each converts the core's
 * 0/-errno (or KV_ERR_*) results into fuse_reply_* calls; nothing below
 * this layer includes a FUSE header.
 */
#ifndef KVFS_OPS_H
#define KVFS_OPS_H

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include "executor.h"
#include "geometry_text.h"
#include "kvfs_i.h"

extern const struct fuse_lowlevel_ops kvfs_ops;

/*
 * The control directory MOUNT/.kvfs and its read-only files (fuse/ctl.c):
 * inode numbers at the top of the range, which the index's counter never
 * reaches, so they cannot collide with a page and are never looked up in
 * the index.
 */
#define KVFS_CTL_NAME ".kvfs"
#define KVFS_INO_CTL (UINT64_MAX - 15)
#define KVFS_INO_STATS (KVFS_INO_CTL + 1)
#define KVFS_INO_METRICS (KVFS_INO_CTL + 2)
#define KVFS_INO_EVENTS (KVFS_INO_CTL + 3)
static inline bool kvfs_ino_virtual(uint64_t ino)
{
	return ino >= KVFS_INO_CTL;
}

/* Once per FUSE worker thread: a short time slice (ops.c). */
extern __thread bool kvfs_worker_sliced;
void kvfs_worker_short_slice(void);

/* The mount of a request, which every operation asks for first: so this
 * is also where the fast path's executor hears of the FUSE callers it
 * must not crowd out (kvfs_exec_note_caller; pid 0: the kernel's own),
 * and where a worker takes its short slice. */
static inline struct kvfs *req_fs(fuse_req_t req)
{
	struct kvfs *fs = fuse_req_userdata(req);
	const struct fuse_ctx *ctx = fuse_req_ctx(req);

	if (!kvfs_worker_sliced)
		kvfs_worker_short_slice();
	if (ctx->pid)
		kvfs_exec_note_caller(fs->exec, ctx->uid);
	return fs;
}

/* Reply with a core return code converted to errno. */
void kvfs_reply_err(fuse_req_t req, int rc);
void kvfs_fill_stat(struct kvfs *fs, const struct kv_node_info *n, struct stat *st);
void kvfs_fill_entry(struct kvfs *fs, const struct kv_node_info *n,
		     struct fuse_entry_param *e);


/* fuse/ops_file.c */
void kvfs_op_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		    mode_t mode, struct fuse_file_info *fi);
void kvfs_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void kvfs_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		  struct fuse_file_info *fi);
void kvfs_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
		   off_t off, struct fuse_file_info *fi);
void kvfs_op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void kvfs_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void kvfs_op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
		   struct fuse_file_info *fi);
void kvfs_op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
		       struct fuse_file_info *fi);

/* fuse/fast_front.c: KVFS_IOC_* handed to the fast path (fast/fast.h) */
void kvfs_op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
		   struct fuse_file_info *fi, unsigned flags, const void *in_buf,
		   size_t in_bufsz, size_t out_bufsz);

/* fuse/xattr.c */
void kvfs_op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size);
void kvfs_op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size);
void kvfs_op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
		      const char *value, size_t size, int flags);
void kvfs_op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name);
/* kvfs_geometry_parse / kvfs_geometry_format: engine/geometry_text.c */

/* ops_times.c: a setattr's arguments as the engine takes them; -EOVERFLOW
 * for a time outside int64 nanoseconds (nothing changed). */
int kvfs_attr_change_from(const struct stat *a, int valid, fuse_ino_t ino,
			  struct kvfs_attr_change *c);

#endif
