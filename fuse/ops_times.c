/*
 * A setattr's arguments (fuse/ops.c) as the engine takes them: FUSE's
 * flags to KVFS_ATTR_*, its timespecs to the int64 nanoseconds kvfs
 * stores, refusing what does not fit.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

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

/* A setattr's fields as the engine takes them; times checked before
 * anything of the node changes. */
int kvfs_attr_change_from(const struct stat *a, int valid, fuse_ino_t ino,
			  struct kvfs_attr_change *c)
{
	memset(c, 0, sizeof(*c));
	if (((valid & FUSE_SET_ATTR_ATIME) && ns_from_ts(&a->st_atim, &c->atime_ns)) ||
	    ((valid & FUSE_SET_ATTR_MTIME) && ns_from_ts(&a->st_mtim, &c->mtime_ns))) {
		kv_log(KV_LOG_DEBUG, "setattr of inode %llu: a time outside "
		       "1677..2262 (int64 ns) refused with EOVERFLOW",
		       (unsigned long long)ino);
		return -EOVERFLOW;
	}
	c->mode = a->st_mode;
	c->uid = a->st_uid;
	c->gid = a->st_gid;
	c->size = (uint64_t)a->st_size;
	c->valid = (valid & FUSE_SET_ATTR_MODE ? KVFS_ATTR_MODE : 0) |
		   (valid & FUSE_SET_ATTR_UID ? KVFS_ATTR_UID : 0) |
		   (valid & FUSE_SET_ATTR_GID ? KVFS_ATTR_GID : 0) |
		   (valid & FUSE_SET_ATTR_SIZE ? KVFS_ATTR_SIZE : 0) |
		   (valid & FUSE_SET_ATTR_ATIME ? KVFS_ATTR_ATIME : 0) |
		   (valid & FUSE_SET_ATTR_MTIME ? KVFS_ATTR_MTIME : 0) |
		   (valid & FUSE_SET_ATTR_ATIME_NOW ? KVFS_ATTR_ATIME_NOW : 0) |
		   (valid & FUSE_SET_ATTR_MTIME_NOW ? KVFS_ATTR_MTIME_NOW : 0);
	return 0;
}
