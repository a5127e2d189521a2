/*
 * The fast path's public header, for the front end that receives the
 * ioctls (fuse/ops.c's KVFS_IOC_* entry): the calls of the batch ABI
 * (client/kvfs_ioctl.h, docs/abi.md) and the regions they use, run on the
 * fast path's own executor threads over the engine. Nothing here knows
 * FUSE: the front end says who is asking and how to answer through
 * struct kvfs_fast_front.
 */
#ifndef KVFS_FAST_H
#define KVFS_FAST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct kvfs;

/* Who is asking, as the kernel reported it. */
struct kvfs_caller {
	uid_t uid;
	gid_t gid;
	pid_t tid;     /* FUSE reports the calling thread */
};

/* How the front end's requests are asked about and answered. Any thread
 * may call these, once per request for reply. */
struct kvfs_fast_front {
	/* The caller's supplementary groups, at most max: a count or -errno. */
	int (*groups)(void *req, int max, gid_t *out);
	/* The caller gave up (killed, or a signal) while the call waited. */
	bool (*interrupted)(void *req);
	/* The answer: -errno, or 0 with len bytes at out for the caller. */
	void (*reply)(void *req, int err, const void *out, size_t len);
};

/* One call as the front end hands it in. */
struct kvfs_fast_req {
	const struct kvfs_fast_front *front;
	void *req;                  /* the front end's own request */
	struct kvfs_caller who;
};

/*
 * A KVFS_IOC_* call on inode ino with its argument (in_len bytes at in;
 * out_len: what the caller can take back). Replies through r->front,
 * from this thread (region calls, refusals) or later from an executor
 * thread (batches, GC): the caller's thread goes back to serving others
 * at once. ENOTTY for an inode that does not speak the ABI.
 */
void kvfs_fast_call(struct kvfs *fs, const struct kvfs_fast_req *r, uint64_t ino,
		    unsigned cmd, const void *in, size_t in_len, size_t out_len);

/* The region table and its reaper, and the executor: start before the
 * front end receives calls, stop after it stopped. 0 or -errno. */
int kvfs_fast_start(struct kvfs *fs);
void kvfs_fast_stop(struct kvfs *fs);

#endif
