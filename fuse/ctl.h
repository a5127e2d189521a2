/*
 * Private to the FUSE edge (fuse/ops.c, fuse/ctl.c): what the namespace
 * operations and the kvfs_ops table need of the control directory
 * MOUNT/.kvfs (fuse/ctl.c). Its inode numbers and kvfs_ino_virtual are in
 * fuse/ops.h, which fuse/xattr.c shares.
 */
#ifndef KVFS_CTL_H
#define KVFS_CTL_H

#include "ops.h"

/* fuse/ctl.c: the control directory */
extern const bool kvfs_ctl_listed;   /* listed by readdir of the root? */
bool is_ctl_name(fuse_ino_t parent, const char *name);
bool ctl_reserved(fuse_ino_t parent, const char *name);
int ctl_stat(uint64_t ino, struct stat *st);
int ctl_entry(uint64_t ino, struct fuse_entry_param *e);
void ctl_lookup(fuse_req_t req, fuse_ino_t parent, const char *name);

/* fuse/ctl.c: file operations, the control files' or the pages' */
void op_create(fuse_req_t req, fuse_ino_t parent, const char *name,
	       mode_t mode, struct fuse_file_info *fi);
void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
	     struct fuse_file_info *fi);
void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
	      off_t off, struct fuse_file_info *fi);
void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
	      struct fuse_file_info *fi);
void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
		  struct fuse_file_info *fi);
void op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
	      struct fuse_file_info *fi, unsigned flags, const void *in_buf,
	      size_t in_bufsz, size_t out_bufsz);
void op_poll(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi,
	     struct fuse_pollhandle *ph);

/* fuse/ops.c */
void ts_from_ns(struct timespec *ts, int64_t ns);

#endif
