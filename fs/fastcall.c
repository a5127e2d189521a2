/*
 * The fast path's entry: KVFS_IOC_* arrive here on a FUSE worker, which
 * only decodes the call and hands it to the executor (executor.h); the
 * call runs on a kvfs-fast thread and replies from there. So no call,
 * however long or however many, holds one of the FUSE workers that
 * LOOKUP, GETATTR, READDIR and FUSE reads need: a client waiting for a
 * directory lock that a notification holds can always be answered.
 *
 * Region calls are short (a mapping, a few syscalls) and stay on the
 * worker; every batch call and GC goes to the executor.
 *
 * Refusals are counted (kvfs_fast_refused_total) and logged at most
 * KV_LOG_LIMIT_BURST lines per window, with the number suppressed: a
 * caller that loops on a bad call cannot fill the log's filesystem, which
 * is the manifest's.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "executor.h"
#include "fastpath.h"

/* Daemon bytes a call holds per descriptor while it runs (the private
 * copy, status and flags, plus what each kind keeps per page): the
 * executor's memory admission. Writes count the longest name, which
 * their arena may copy for each descriptor. */
#define CALL_FIXED_BYTES (64u << 10)
#define DESC_BYTES_LOOKUP 80u
#define DESC_BYTES_READ 200u
#define DESC_BYTES_WRITE (160u + KVFS_NAME_MAX + 1u)

struct fast_call {
	struct kvfs_exec_job job;
	struct kvfs *fs;
	fuse_req_t req;
	fuse_ino_t ino;
	unsigned cmd;
	size_t out_bufsz;
	union {
		struct kvfs_batch_arg b;
		struct kvfs_gc_arg g;
	} u;
};

static struct kv_log_limit refusal_log;

static const char *cmd_name(unsigned cmd)
{
	switch (cmd) {
	case KVFS_IOC_REGION_REGISTER: return "REGION_REGISTER";
	case KVFS_IOC_REGION_UNREGISTER: return "REGION_UNREGISTER";
	case KVFS_IOC_READ: return "READ";
	case KVFS_IOC_LOOKUP: return "LOOKUP";
	case KVFS_IOC_WRITE: return "WRITE";
	case KVFS_IOC_PREFETCH: return "PREFETCH";
	case KVFS_IOC_GC: return "GC";
	}
	return "unknown";
}

/* A refused call is counted and logged (rate-limited), saying which call,
 * who and why; an unknown region id is routine (clients probe with it)
 * and stays at debug level. */
static void refuse(struct kvfs *fs, fuse_req_t req, unsigned cmd, int rc)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);

	atomic_fetch_add(&fs->st.fast_refused, 1);
	if (rc == -ENOENT)
		kv_log(KV_LOG_DEBUG, "fast path: %s from pid %d (uid %u) refused: %s",
		       cmd_name(cmd), (int)ctx->pid, (unsigned)ctx->uid, kv_strerror(rc));
	else
		KV_LOG_LIMITED(&refusal_log, KV_LOG_WARN,
			       "fast path: %s from pid %d (uid %u) refused: %s", cmd_name(cmd),
			       (int)ctx->pid, (unsigned)ctx->uid, kv_strerror(rc));
	kvfs_reply_err(req, rc);
}

static void record_latency(struct kvfs *fs, unsigned cmd, int64_t ns)
{
	struct kvfs_hist *h = NULL;

	if (cmd == KVFS_IOC_READ)
		h = &fs->st.lat_read;
	else if (cmd == KVFS_IOC_WRITE)
		h = &fs->st.lat_write;
	else if (cmd == KVFS_IOC_LOOKUP)
		h = &fs->st.lat_lookup;
	else if (cmd == KVFS_IOC_PREFETCH)
		h = &fs->st.lat_prefetch;
	if (h)
		kvfs_hist_record(h, ns > 0 ? (uint64_t)ns : 0);
}

/* KVFS_IOC_GC on the mount root: root only, it removes others' pages. */
static void run_gc(struct fast_call *c)
{
	int rc = kvfs_gc(c->fs, &c->u.g);

	if (rc < 0)
		return refuse(c->fs, c->req, KVFS_IOC_GC, rc);
	fuse_reply_ioctl(c->req, 0, &c->u.g,
			 c->out_bufsz < sizeof(c->u.g) ? c->out_bufsz : sizeof(c->u.g));
}

/* On a kvfs-fast thread: run the call, reply, free it. */
static void run_call(struct kvfs_exec_job *job)
{
	struct fast_call *c = (struct fast_call *)job;
	int64_t t0 = kvfs_now_ns();
	int rc;

	/* The caller gave up (killed, or a signal) while the call waited:
	 * nobody will read the result, so do not spend a thread on it. */
	if (fuse_req_interrupted(c->req)) {
		kvfs_reply_err(c->req, -EINTR);
		free(c);
		return;
	}
	if (c->cmd == KVFS_IOC_GC) {
		run_gc(c);
		free(c);
		return;
	}
	if (c->cmd == KVFS_IOC_READ)
		rc = fp_read(c->fs, c->req, c->ino, &c->u.b);
	else if (c->cmd == KVFS_IOC_LOOKUP)
		rc = fp_lookup(c->fs, c->req, c->ino, &c->u.b);
	else if (c->cmd == KVFS_IOC_WRITE)
		rc = kvfs_fast_write(c->fs, c->req, c->ino, &c->u.b);
	else
		rc = fp_prefetch(c->fs, c->req, c->ino, &c->u.b);
	record_latency(c->fs, c->cmd, kvfs_now_ns() - t0);
	if (rc < 0)
		refuse(c->fs, c->req, c->cmd, rc);
	else
		fuse_reply_ioctl(c->req, 0, &c->u.b,
				 c->out_bufsz < sizeof(c->u.b) ? c->out_bufsz : sizeof(c->u.b));
	free(c);
}

static uint64_t call_bytes(unsigned cmd, const struct kvfs_batch_arg *a)
{
	uint64_t per = cmd == KVFS_IOC_WRITE ? DESC_BYTES_WRITE :
		       cmd == KVFS_IOC_READ ? DESC_BYTES_READ : DESC_BYTES_LOOKUP;

	return CALL_FIXED_BYTES + per * a->count;
}

/* Hand a decoded call to the executor; without one (it could not start)
 * run it here, as before. */
static void submit(struct kvfs *fs, struct fast_call *c)
{
	int rc;

	c->job.run = run_call;
	c->job.uid = fuse_req_ctx(c->req)->uid;
	c->job.mem = c->cmd == KVFS_IOC_GC ? CALL_FIXED_BYTES : call_bytes(c->cmd, &c->u.b);
	if (!fs->exec)
		return run_call(&c->job);
	rc = kvfs_exec_submit(fs->exec, &c->job);
	if (rc < 0) {
		refuse(fs, c->req, c->cmd, rc == -ESHUTDOWN ? -ENOTCONN : rc);
		free(c);
	}
}

static void region_call(struct kvfs *fs, fuse_req_t req, unsigned cmd,
			const void *in_buf, size_t out_bufsz)
{
	struct kvfs_region_arg a;
	int rc;

	memcpy(&a, in_buf, sizeof(a));
	rc = fp_region(fs, req, cmd, &a);
	if (rc < 0)
		return refuse(fs, req, cmd, rc);
	fuse_reply_ioctl(req, 0, &a, out_bufsz < sizeof(a) ? out_bufsz : sizeof(a));
}

void kvfs_op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
		   struct fuse_file_info *fi, unsigned flags, const void *in_buf,
		   size_t in_bufsz, size_t out_bufsz)
{
	struct kvfs *fs = req_fs(req);
	struct kv_node_info n;
	struct fast_call *c;

	(void)arg; (void)fi; (void)flags;
	if (ino == KV_ROOT_INO && cmd == KVFS_IOC_GC) {
		if (in_bufsz != sizeof(c->u.g))
			return refuse(fs, req, cmd, -EINVAL);
		if (fuse_req_ctx(req)->uid != 0)
			return refuse(fs, req, cmd, -EPERM);
	} else {
		/* Only model directories speak this ABI; the size is part of cmd. */
		if (kv_index_get(fs->idx, ino, &n) < 0 || n.kind != KV_KIND_MODEL)
			return kvfs_reply_err(req, -ENOTTY);
		switch (cmd) {
		case KVFS_IOC_REGION_REGISTER:
		case KVFS_IOC_REGION_UNREGISTER:
			if (in_bufsz != sizeof(struct kvfs_region_arg))
				return refuse(fs, req, cmd, -EINVAL);
			return region_call(fs, req, cmd, in_buf, out_bufsz);
		case KVFS_IOC_READ:
		case KVFS_IOC_LOOKUP:
		case KVFS_IOC_WRITE:
		case KVFS_IOC_PREFETCH:
			if (in_bufsz != sizeof(c->u.b))
				return refuse(fs, req, cmd, -EINVAL);
			break;
		default:
			return kvfs_reply_err(req, -ENOTTY);
		}
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return refuse(fs, req, cmd, -ENOMEM);
	*c = (struct fast_call){ .fs = fs, .req = req, .ino = ino, .cmd = cmd,
				 .out_bufsz = out_bufsz };
	memcpy(&c->u, in_buf, in_bufsz);
	submit(fs, c);
}

int kvfs_fastcall_start(struct kvfs *fs)
{
	struct kvfs_exec_limits l;

	kvfs_exec_default_limits(&l);
	return kvfs_exec_start(&l, &fs->exec);
}

void kvfs_fastcall_stop(struct kvfs *fs)
{
	kvfs_exec_stop(fs->exec);
	fs->exec = NULL;
}
