/*
 * Room for the manifest on its own filesystem. The store directory holds
 * kvfs.db (and its WAL), kvfs.journal and the log; when a stripe shares
 * that filesystem, a full disk would leave SQLite no room: every fsync
 * fails, deletes cannot commit (so nothing can be freed), and the store
 * does not open again. Two defences:
 *
 *  1. Headroom: the store refuses extents on such a stripe once the
 *     filesystem's free space would drop below HEADROOM_MIN plus twice the
 *     manifest's size (store/headroom.c). Twice: the journal grows to four
 *     times its snapshot before it is compacted, and compaction writes a
 *     new snapshot beside the old one; both are smaller than kvfs.db, whose
 *     rows they hold. Re-measured at most once a second by the committer.
 *  2. A reserve file, STORE/kvfs.reserve (RESERVE_BYTES, preallocated),
 *     for when something else fills the disk anyway. A commit that fails
 *     with ENOSPC gives it up and is retried at once, so deletes commit
 *     and their space comes back; a mount that finds the disk full gives
 *     it up before opening the manifest. It is made again once the disk
 *     has the headroom and the reserve free.
 *
 * The reserve's state is the committer's (and the opening thread's before
 * the committer starts): no lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "kvfs_i.h"

#define HEADROOM_MIN (16ull << 20)   /* WAL, one batch, the log, slack */
#define RESERVE_BYTES (8ull << 20)   /* enough for many batches of deletes */
#define RESERVE_FILE "kvfs.reserve"
#define MEASURE_NS 1000000000ll      /* re-measure the manifest this often */

static void reserve_path(const char *dir, char *out, size_t n)
{
	snprintf(out, n, "%s/%s", dir, RESERVE_FILE);
}

static uint64_t dir_avail(const char *dir)
{
	struct statvfs vfs;

	if (statvfs(dir, &vfs) < 0)
		return UINT64_MAX;
	return (uint64_t)vfs.f_bavail * vfs.f_frsize;
}

static uint64_t file_size(const char *dir, const char *name)
{
	char path[PATH_MAX];
	struct stat sb;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return stat(path, &sb) == 0 ? (uint64_t)sb.st_blocks * 512 : 0;
}

/* Give the reserve's blocks back; true if it held any. */
static bool reserve_drop(const char *dir)
{
	char path[PATH_MAX];
	struct stat sb;
	int rc;

	reserve_path(dir, path, sizeof(path));
	if (stat(path, &sb) < 0 || sb.st_blocks == 0)
		return false;
	rc = truncate(path, 0) < 0 ? -errno : 0;
	if (rc < 0) {
		kv_log(KV_LOG_ERR, "cannot give up the reserve %s: %s", path, kv_strerror(rc));
		return false;
	}
	return true;
}

void kvfs_reserve_before_open(const char *dir)
{
	uint64_t avail = dir_avail(dir);

	if (avail >= RESERVE_BYTES || !reserve_drop(dir))
		return;
	kv_log(KV_LOG_WARN, "the filesystem of %s has only %" PRIu64 " bytes free: gave up "
	       "the %llu-byte reserve %s/%s so that the manifest can open; free space "
	       "there (rm or kvfs gc)", dir, avail, RESERVE_BYTES, dir,
	       RESERVE_FILE);
}

/* Preallocate the reserve; false (and no partial file) if there is no room. */
static bool reserve_make(struct kvfs *fs)
{
	char path[PATH_MAX];
	int fd, rc;

	reserve_path(fs->store_dir, path, sizeof(path));
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		kv_log(KV_LOG_WARN, "cannot create the reserve %s: %s", path,
		       kv_strerror(-errno));
		return false;
	}
	do {
		rc = fallocate(fd, 0, 0, (off_t)RESERVE_BYTES);
	} while (rc < 0 && errno == EINTR);
	rc = rc < 0 ? -errno : 0;
	/* Durable, or a crash could take it away just when it is needed. */
	if (rc == 0 && fdatasync(fd) < 0)
		rc = -errno;
	if (rc < 0 && ftruncate(fd, 0) < 0)
		kv_log(KV_LOG_WARN, "%s: cannot truncate a partial reserve: %s", path,
		       kv_strerror(-errno));
	close(fd);
	if (rc == -EOPNOTSUPP) {
		kv_log(KV_LOG_WARN, "%s cannot preallocate %s: no reserve for deletes "
		       "on a full disk", fs->store_dir, RESERVE_FILE);
		fs->room.no_reserve = true;
	} else if (rc < 0 && rc != -ENOSPC && rc != -EDQUOT) {
		kv_log(KV_LOG_WARN, "cannot preallocate the reserve %s: %s", path,
		       kv_strerror(rc));
	}
	return rc == 0;
}

/* Headroom from the manifest's size now; set in the store if it changed. */
static void measure(struct kvfs *fs)
{
	uint64_t h = HEADROOM_MIN + 2 * file_size(fs->store_dir, KV_MANIFEST_FILE);

	fs->room.measured_ns = kvfs_now_ns();
	if (h == fs->room.headroom)
		return;
	fs->room.headroom = h;
	if (fs->room.shared)
		kv_store_set_headroom(fs->store, fs->store_dir, h, fs->dirty.budget);
}

int kvfs_room_start(struct kvfs *fs)
{
	uint64_t h = HEADROOM_MIN + 2 * file_size(fs->store_dir, KV_MANIFEST_FILE);
	int n = kv_store_set_headroom(fs->store, fs->store_dir, h, fs->dirty.budget);

	if (n < 0)
		return n;
	if (n == 0)
		kv_store_set_headroom(fs->store, fs->store_dir, 0, 0);
	fs->room.shared = n > 0;
	/* kept apart from the store's too: the reserve is made again only
	 * with this much free beside it, or it would be given up again at
	 * the next commit */
	fs->room.headroom = h;
	fs->room.measured_ns = kvfs_now_ns();
	if (n > 0)
		kv_log(KV_LOG_INFO, "%d stripe%s share%s the filesystem of %s: keeping %"
		       PRIu64 " bytes free there for the manifest", n, n > 1 ? "s" : "",
		       n > 1 ? "" : "s", fs->store_dir, h);
	/* A reserve left from before is kept as it is; one given up is made
	 * again only where it leaves the headroom. */
	if (file_size(fs->store_dir, RESERVE_FILE) >= RESERVE_BYTES)
		fs->room.reserve_held = true;
	else if (dir_avail(fs->store_dir) >= fs->room.headroom + RESERVE_BYTES)
		fs->room.reserve_held = reserve_make(fs);
	if (!fs->room.reserve_held && !fs->room.no_reserve)
		kv_log(KV_LOG_WARN, "no room for the %llu-byte reserve %s/%s yet: deletes "
		       "may not commit if the disk fills; made once there is room",
		       RESERVE_BYTES, fs->store_dir, RESERVE_FILE);
	return 0;
}

void kvfs_room_tick(struct kvfs *fs)
{
	if (kvfs_now_ns() - fs->room.measured_ns < MEASURE_NS)
		return;
	measure(fs);
	if (fs->room.reserve_held || fs->room.no_reserve ||
	    dir_avail(fs->store_dir) < fs->room.headroom + RESERVE_BYTES)
		return;
	if ((fs->room.reserve_held = reserve_make(fs)))
		kv_log(KV_LOG_INFO, "the reserve %s/%s is back: the manifest's filesystem "
		       "has room again", fs->store_dir, RESERVE_FILE);
}

bool kvfs_room_release(struct kvfs *fs)
{
	if (!fs->room.reserve_held)
		return false;
	fs->room.reserve_held = false;
	if (!reserve_drop(fs->store_dir))
		return false;
	/* The disk was full a moment ago: look again only a MEASURE_NS from
	 * now, not at the tick right after the retried commit (the reserve
	 * would come back into the room that commit just needed). */
	fs->room.measured_ns = kvfs_now_ns();
	kv_log(KV_LOG_WARN, "the filesystem of %s is full: gave up the %llu-byte reserve "
	       "%s so that deletes can commit%s; free space there (rm, kvfs gc)",
	       fs->store_dir, RESERVE_BYTES, RESERVE_FILE, fs->room.shared ?
	       "; new pages are refused until the headroom is back" : "");
	return true;
}
