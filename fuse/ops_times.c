/*
 * Setting a node's times from a setattr (fuse/ops.c): FUSE's timespecs to the
 * int64 nanoseconds kvfs stores, refusing what does not fit.
 */
#include <errno.h>
#include <stdint.h>

#include "ops.h"

/* Times are int64 nanoseconds (1677..2262): -EOVERFLOW for one outside
 * that range, which would otherwise wrap into another date. */
static int ns_from_ts(const struct timespec *ts, int64_t *ns)
{
	int64_t sec = ts->tv_sec, nsec = ts->tv_nsec, s;

	if (sec < 0 && nsec > 0) {      /* so the smallest times fit too */
		sec++;
		nsec -= 1000000000;
	}
	if (__builtin_mul_overflow(sec, 1000000000, &s) ||
	    __builtin_add_overflow(s, nsec, ns))
		return -EOVERFLOW;
	return 0;
}

/* Both times, checked before anything of the node changes. */
int kvfs_check_times(const struct stat *a, int valid, fuse_ino_t ino)
{
	int64_t ns;

	if (((valid & FUSE_SET_ATTR_ATIME) && ns_from_ts(&a->st_atim, &ns)) ||
	    ((valid & FUSE_SET_ATTR_MTIME) && ns_from_ts(&a->st_mtim, &ns))) {
		kv_log(KV_LOG_DEBUG, "setattr of inode %llu: a time outside "
		       "1677..2262 (int64 ns) refused with EOVERFLOW",
		       (unsigned long long)ino);
		return -EOVERFLOW;
	}
	return 0;
}

/* After check_times: the conversions cannot fail. */
void kvfs_set_times(struct kv_node_info *n, const struct stat *a, int valid)
{
	int64_t now = kvfs_now_ns();

	if (valid & FUSE_SET_ATTR_ATIME)
		ns_from_ts(&a->st_atim, &n->attr.atime_ns);
	if (valid & FUSE_SET_ATTR_ATIME_NOW)
		n->attr.atime_ns = now;
	if (valid & FUSE_SET_ATTR_MTIME)
		ns_from_ts(&a->st_mtim, &n->attr.mtime_ns);
	if (valid & FUSE_SET_ATTR_MTIME_NOW)
		n->attr.mtime_ns = now;
	n->attr.ctime_ns = now;
}

