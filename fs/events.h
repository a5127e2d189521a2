/*
 * The FUSE side of MOUNT/.kvfs/events (fs/events.c), for fs/ctl.c, which
 * routes the file's operations here. The core's side (capture, publish)
 * is in kvfs_i.h.
 */
#ifndef KVFS_EVENTS_H
#define KVFS_EVENTS_H

#include "ops.h"

/* O_RDONLY only (else EACCES); a new cursor at the oldest record kept. */
void kvfs_events_open(fuse_req_t req, struct fuse_file_info *fi);
/* Replies at once when the reader has records (or the daemon is stopping:
 * EOF); otherwise parks req and returns, leaving the FUSE worker free. */
void kvfs_events_read(fuse_req_t req, size_t size, struct fuse_file_info *fi);
void kvfs_events_poll(fuse_req_t req, struct fuse_file_info *fi,
		      struct fuse_pollhandle *ph);
void kvfs_events_release(fuse_req_t req, struct fuse_file_info *fi);

#endif
