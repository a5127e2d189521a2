/*
 * The store lock (kvfs_lock_store in fs.h): one daemon, or one fsck, per
 * store.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "engine.h"
#include "store.h"

/*
 * One daemon per store: two would allocate the same extents and interleave
 * manifest transactions. The lock is an flock on the store directory: a
 * lock file alone can be deleted (`rm STORE/kvfs.lock`) and a second daemon
 * would then lock a new one. STORE/kvfs.lock is still flocked and holds the
 * owner's pid, for the error message and for older kvfs versions that only
 * take the file. The kernel releases both however the daemon ends, so a
 * killed daemon never leaves a stale lock behind.
 */
void kvfs_unlock_store(struct kvfs_store_lock *lk)
{
	if (lk->file_fd >= 0) {
		if (!lk->keep_contents && ftruncate(lk->file_fd, 0) < 0 &&
		    errno != EINVAL && errno != EBADF)
			kv_log(KV_LOG_DEBUG, "clearing the pid in the store lock: %s",
			       strerror(errno));
		close(lk->file_fd);      /* drops the flock */
	}
	if (lk->dir_fd >= 0)
		close(lk->dir_fd);
	*lk = KVFS_STORE_LOCK_NONE;
}

static void read_holder(const char *path, char *holder, size_t holder_len)
{
	char pid[32] = "";
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? pread(fd, pid, sizeof(pid) - 1, 0) : -1;

	if (fd >= 0)
		close(fd);
	pid[n > 0 ? n : 0] = '\0';
	pid[strcspn(pid, "\n")] = '\0';
	snprintf(holder, holder_len, "%s", pid[0] ? pid : "unknown");
}

int kvfs_lock_store(const char *dir, bool read_only_ok, struct kvfs_store_lock *lk,
		    char *holder, size_t holder_len)
{
	char path[PATH_MAX], pid[32] = "";
	ssize_t n;
	int err;

	*lk = KVFS_STORE_LOCK_NONE;
	snprintf(path, sizeof(path), "%s/kvfs.lock", dir);
	lk->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (lk->dir_fd < 0)
		return -errno;
	if (flock(lk->dir_fd, LOCK_EX | LOCK_NB) < 0) {
		err = errno;
		read_holder(path, holder, holder_len);
		kvfs_unlock_store(lk);
		return err == EWOULDBLOCK ? -EBUSY : -err;
	}
	lk->file_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (lk->file_fd < 0 && read_only_ok && (errno == EROFS || errno == EACCES))
		lk->file_fd = open(path, O_RDONLY | O_CLOEXEC);
	if (lk->file_fd < 0) {
		err = errno;
		kvfs_unlock_store(lk);
		return -err;
	}
	if (flock(lk->file_fd, LOCK_EX | LOCK_NB) < 0) {
		err = errno;
		read_holder(path, holder, holder_len);
		close(lk->file_fd);
		lk->file_fd = -1;
		kvfs_unlock_store(lk);
		return err == EWOULDBLOCK ? -EBUSY : -err;
	}
	/* So whoever is refused meanwhile can name us (best effort). */
	n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	if (ftruncate(lk->file_fd, 0) < 0 || pwrite(lk->file_fd, pid, (size_t)n, 0) != n)
		kv_log(KV_LOG_WARN, "cannot record pid %d in %s", (int)getpid(), path);
	return 0;
}

