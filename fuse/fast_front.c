/*
 * The fast path as FUSE sees it: KVFS_IOC_* arrive as FUSE ioctls on
 * model directories (and GC on the root), and fast/ answers them through
 * this file's kvfs_fast_front, which is all of FUSE it ever touches. The
 * reply may come from any thread (libfuse allows it): fast/ answers
 * batches from its executor, so no call holds this FUSE worker.
 */
#include "fast.h"
#include "ops.h"

static int req_groups(void *req, int max, gid_t *out)
{
	return fuse_req_getgroups(req, max, out);
}

static bool req_interrupted(void *req)
{
	return fuse_req_interrupted(req) != 0;
}

static void req_reply(void *req, int err, const void *out, size_t len)
{
	if (err)
		kvfs_reply_err(req, err);
	else
		fuse_reply_ioctl(req, 0, out, len);
}

static const struct kvfs_fast_front fuse_front = {
	.groups = req_groups,
	.interrupted = req_interrupted,
	.reply = req_reply,
};

void kvfs_op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
		   struct fuse_file_info *fi, unsigned flags, const void *in_buf,
		   size_t in_bufsz, size_t out_bufsz)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct kvfs_fast_req r = {
		.front = &fuse_front, .req = req,
		.who = { .uid = ctx->uid, .gid = ctx->gid, .tid = ctx->pid },
	};

	(void)arg; (void)fi; (void)flags;
	kvfs_fast_call(req_fs(req), &r, ino, cmd, in_buf, in_bufsz, out_bufsz);
}
