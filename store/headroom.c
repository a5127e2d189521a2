/*
 * Headroom on the manifest's filesystem. The manifest (kvfs.db and its
 * WAL), its journal and the daemon's log live in the store directory; a
 * stripe on the same filesystem would otherwise take it to its last byte,
 * after which no transaction commits: fsync fails, deletes cannot free
 * anything and the store does not even open. So an allocation on such a
 * stripe is refused (ENOSPC, as for a full disk) once the filesystem's
 * free space would drop below the headroom the caller set, and
 * kv_store_usage counts that filesystem's free space less the headroom, so
 * writers are refused before they fill a page rather than at its seal.
 *
 * Free space lags behind allocation: a segment file is sparse, and an
 * extent takes blocks only when its write lands, which may be up to `lag`
 * bytes (the caller's write-back budget) later. Once the filesystem is
 * that close to the headroom, extents on such a stripe are fallocate'd as
 * they are handed out: the blocks are taken at once, statvfs sees them,
 * and a disk that is full behind kvfs's back fails the allocation
 * (ENOSPC) instead of the page's write (a page lost after its close).
 * Further away it would only cost a system call per page, made under the
 * caller's locks. Stripes on other filesystems are left as they were:
 * their writes cannot starve the manifest.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "store_i.h"

int kv_store_set_headroom(struct kv_store *s, const char *dir, uint64_t bytes,
			  uint64_t lag)
{
	struct stat sb;
	unsigned n = 0;

	if (stat(dir, &sb) < 0) {
		int rc = -errno;

		kv_log(KV_LOG_ERR, "store: cannot stat %s to keep headroom there: %s",
		       dir, kv_strerror(rc));
		return rc;
	}
	pthread_mutex_lock(&s->lock);
	for (unsigned i = 0; i < s->nstripes; i++) {
		struct stripe *st = &s->stripes[i];

		st->keeps_headroom = !st->missing && st->dev == sb.st_dev;
		n += st->keeps_headroom;
	}
	pthread_mutex_unlock(&s->lock);
	atomic_store(&s->headroom_lag, lag);
	atomic_store(&s->headroom, n ? bytes : 0);
	return (int)n;
}

uint64_t kv_store_headroom(struct kv_store *s)
{
	return atomic_load(&s->headroom);
}

/* Free bytes of the stripe's filesystem, or UINT64_MAX if unknown. */
static uint64_t fs_avail(const struct stripe *st)
{
	struct statvfs vfs;

	if (fstatvfs(st->dirfd, &vfs) < 0)
		return UINT64_MAX;
	return (uint64_t)vfs.f_bavail * vfs.f_frsize;
}

uint64_t stripe_avail_less_headroom(const struct kv_store *s,
				    const struct stripe *st, uint64_t avail)
{
	uint64_t h = atomic_load(&s->headroom);

	if (!st->keeps_headroom)
		return avail;
	return avail > h ? avail - h : 0;
}

bool stripe_short_of_headroom(struct kv_store *s, const struct stripe *st,
			      uint64_t fp, bool *near)
{
	uint64_t h = atomic_load(&s->headroom), avail;

	*near = false;
	if (!st->keeps_headroom || !h)
		return false;
	avail = fs_avail(st);
	if (avail == UINT64_MAX)
		return false;
	*near = avail < h + atomic_load(&s->headroom_lag) + fp;
	return avail < h + fp;
}

int stripe_claim_blocks(struct kv_store *s, const struct kv_extent *e)
{
	static atomic_bool unsupported;
	struct stripe *st = &s->stripes[e->stripe];
	uint64_t fp = kv_extent_footprint(e);
	struct segment *seg;
	int rc = 0;

	if (!st->keeps_headroom || !atomic_load(&s->headroom) ||
	    atomic_load(&unsupported))
		return 0;
	pthread_mutex_lock(&s->lock);
	seg = segment_find(st, e->segment);
	if (seg)
		atomic_fetch_add(&seg->refs, 1);   /* keep the fd unlocked */
	pthread_mutex_unlock(&s->lock);
	if (!seg)
		return 0;
	/* Mode 0 (the file grows to cover the extent): a crash before the
	 * write leaves an uncommitted range that reclaim punches, as for any
	 * write that never committed. */
	do {
		rc = fallocate(seg->fd, 0, (off_t)e->offset, (off_t)fp);
	} while (rc < 0 && errno == EINTR);
	rc = rc < 0 ? -errno : 0;
	segment_unref(seg);
	if (rc == -EOPNOTSUPP) {
		/* The filesystem cannot preallocate: headroom is then only
		 * as good as statvfs, which counts blocks once written. */
		if (!atomic_exchange(&unsupported, true))
			kv_log(KV_LOG_WARN, "store: %s cannot preallocate extents; the "
			       "headroom on the manifest's filesystem is kept less "
			       "exactly", st->path);
		return 0;
	}
	if (rc < 0 && rc != -ENOSPC && rc != -EDQUOT)
		kv_log(KV_LOG_ERR, "store: %s/seg-%08" PRIu32 ": preallocating %"
		       PRIu64 "+%" PRIu64 ": %s", st->path, e->segment, e->offset,
		       fp, kv_strerror(rc));
	return rc;
}
