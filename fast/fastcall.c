/*
 * The fast path's entry (fast.h): KVFS_IOC_* arrive here on a FUSE worker,
 * which only decodes the call and hands it to the executor (executor.h);
 * the call runs on a kvfs-fast thread and replies from there, through the
 * front end's kvfs_fast_front. So no call,
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
	struct kvfs_fast_req r;
	uint64_t ino;
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
static void refuse(struct kvfs *fs, const struct kvfs_fast_req *r, unsigned cmd, int rc)
{
	atomic_fetch_add(&fs->st.fast_refused, 1);
	if (rc == -ENOENT)
		kv_log(KV_LOG_DEBUG, "fast path: %s from pid %d (uid %u) refused: %s",
		       cmd_name(cmd), (int)r->who.tid, (unsigned)r->who.uid, kv_strerror(rc));
	else
		KV_LOG_LIMITED(&refusal_log, KV_LOG_WARN,
			       "fast path: %s from pid %d (uid %u) refused: %s", cmd_name(cmd),
			       (int)r->who.tid, (unsigned)r->who.uid, kv_strerror(rc));
	r->front->reply(r->req, rc, NULL, 0);
}

static void reply(const struct kvfs_fast_req *r, const void *out, size_t len,
		  size_t out_len)
{
	r->front->reply(r->req, 0, out, out_len < len ? out_len : len);
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
		return refuse(c->fs, &c->r, KVFS_IOC_GC, rc);
	reply(&c->r, &c->u.g, sizeof(c->u.g), c->out_bufsz);
}

/* On a kvfs-fast thread: run the call, reply, free it. */
static void run_call(struct kvfs_exec_job *job)
{
	struct fast_call *c = (struct fast_call *)job;
	int64_t t0 = kvfs_now_ns();
	int rc;

	/* The caller gave up (killed, or a signal) while the call waited:
	 * nobody will read the result, so do not spend a thread on it. */
	if (c->r.front->interrupted(c->r.req)) {
		c->r.front->reply(c->r.req, -EINTR, NULL, 0);
		free(c);
		return;
	}
	if (c->cmd == KVFS_IOC_GC) {
		run_gc(c);
		free(c);
		return;
	}
	if (c->cmd == KVFS_IOC_READ)
		rc = fp_read(c->fs, &c->r, c->ino, &c->u.b);
	else if (c->cmd == KVFS_IOC_LOOKUP)
		rc = fp_lookup(c->fs, &c->r, c->ino, &c->u.b);
	else if (c->cmd == KVFS_IOC_WRITE)
		rc = kvfs_fast_write(c->fs, &c->r, c->ino, &c->u.b);
	else
		rc = fp_prefetch(c->fs, &c->r, c->ino, &c->u.b);
	record_latency(c->fs, c->cmd, kvfs_now_ns() - t0);
	if (rc < 0)
		refuse(c->fs, &c->r, c->cmd, rc);
	else
		reply(&c->r, &c->u.b, sizeof(c->u.b), c->out_bufsz);
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
	c->job.uid = c->r.who.uid;
	c->job.mem = c->cmd == KVFS_IOC_GC ? CALL_FIXED_BYTES : call_bytes(c->cmd, &c->u.b);
	if (!fs->exec)
		return run_call(&c->job);
	rc = kvfs_exec_submit(fs->exec, &c->job);
	if (rc < 0) {
		refuse(fs, &c->r, c->cmd, rc == -ESHUTDOWN ? -ENOTCONN : rc);
		free(c);
	}
}

static void region_call(struct kvfs *fs, const struct kvfs_fast_req *r, unsigned cmd,
			const void *in, size_t out_len)
{
	struct kvfs_region_arg a;
	int rc;

	memcpy(&a, in, sizeof(a));
	rc = fp_region(fs, r, cmd, &a);
	if (rc < 0)
		return refuse(fs, r, cmd, rc);
	reply(r, &a, sizeof(a), out_len);
}

void kvfs_fast_call(struct kvfs *fs, const struct kvfs_fast_req *r, uint64_t ino,
		    unsigned cmd, const void *in, size_t in_len, size_t out_len)
{
	struct kv_node_info n;
	struct fast_call *c;

	if (ino == KV_ROOT_INO && cmd == KVFS_IOC_GC) {
		if (in_len != sizeof(c->u.g))
			return refuse(fs, r, cmd, -EINVAL);
		if (r->who.uid != 0)
			return refuse(fs, r, cmd, -EPERM);
	} else {
		/* Only model directories speak this ABI; the size is part of cmd. */
		if (kv_index_get(fs->idx, ino, &n) < 0 || n.kind != KV_KIND_MODEL)
			return r->front->reply(r->req, -ENOTTY, NULL, 0);
		switch (cmd) {
		case KVFS_IOC_REGION_REGISTER:
		case KVFS_IOC_REGION_UNREGISTER:
			if (in_len != sizeof(struct kvfs_region_arg))
				return refuse(fs, r, cmd, -EINVAL);
			return region_call(fs, r, cmd, in, out_len);
		case KVFS_IOC_READ:
		case KVFS_IOC_LOOKUP:
		case KVFS_IOC_WRITE:
		case KVFS_IOC_PREFETCH:
			if (in_len != sizeof(c->u.b))
				return refuse(fs, r, cmd, -EINVAL);
			break;
		default:
			return r->front->reply(r->req, -ENOTTY, NULL, 0);
		}
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return refuse(fs, r, cmd, -ENOMEM);
	*c = (struct fast_call){ .fs = fs, .r = *r, .ino = ino, .cmd = cmd,
				 .out_bufsz = out_len };
	memcpy(&c->u, in, in_len);
	submit(fs, c);
}

/* The region reaper first: the executor's calls use regions. */
int kvfs_fast_start(struct kvfs *fs)
{
	struct kvfs_exec_limits l;
	int rc = kvfs_regions_start(&fs->regions);

	if (rc < 0)
		return rc;
	kvfs_exec_default_limits(&l);
	rc = kvfs_exec_start(&l, &fs->exec);
	if (rc < 0)    /* calls then run on the front end's thread, as before */
		kv_log(KV_LOG_WARN, "fast path: no executor threads (%s): calls run on "
		       "FUSE workers", kv_strerror(rc));
	return 0;
}

void kvfs_fast_stop(struct kvfs *fs)
{
	kvfs_exec_stop(fs->exec);
	fs->exec = NULL;
	kvfs_regions_stop(fs->regions);
	fs->regions = NULL;
}
