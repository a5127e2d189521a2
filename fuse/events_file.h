/*
 * MOUNT/.kvfs/events as a FUSE file (fuse/events_file.c), for fuse/ctl.c,
 * which routes the file's operations here. The records, the ring and the
 * readers' cursors are the engine's (engine/events.c, kvfs_i.h).
 */
#ifndef KVFS_EVENTS_FILE_H
#define KVFS_EVENTS_FILE_H

#include "ops.h"

/* O_RDONLY only (else EACCES); a new cursor at the oldest record kept. */
void kvfs_events_open(fuse_req_t req, struct fuse_file_info *fi);
/* Replies at once when the reader has records (or the daemon is stopping:
 * EOF); otherwise parks req and returns, leaving the FUSE worker free. */
void kvfs_events_read(fuse_req_t req, size_t size, struct fuse_file_info *fi);
void kvfs_events_poll(fuse_req_t req, struct fuse_file_info *fi,
		      struct fuse_pollhandle *ph);
void kvfs_events_release(fuse_req_t req, struct fuse_file_info *fi);
/* The engine's events_ready hook: answer parked reads that now have
 * something (or end them: the stream closed), wake polls. */
void kvfs_events_file_wake(struct kvfs *fs);

#endif
