/*
 * What is mounted where, and whether its daemon answers: the pieces `kvfs
 * mount` (refusing a busy, stale or hung mountpoint) and `kvfs umount`
 * (recovering from a dead or hung daemon) share.
 *
 * Nothing here touches the mountpoint's own inode until it has to: a stat
 * of a FUSE mount whose daemon hangs blocks, so the mount table is read from
 * /proc/self/mountinfo and the one call that must reach the daemon (statfs)
 * runs in a child that is killed when it does not answer in time.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mount.h"

#define FUSECTL_DIR "/sys/fs/fuse/connections"
#define FUSECTL_MAGIC 0x65735543

/* "/a/b/../c/" relative to the cwd -> "/a/c", without looking at the path
 * (realpath would stat it, and a hung mount's stat blocks). */
int kvfs_path_absolute(const char *path, char *out, size_t len)
{
	char buf[PATH_MAX * 2], *save = NULL, *tok;
	size_t n = 0;

	if (path[0] == '/')
		snprintf(buf, sizeof(buf), "%s", path);
	else if (!getcwd(buf, PATH_MAX))
		return -errno;
	else
		snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "/%s", path);
	if (len < 2)
		return -ENAMETOOLONG;
	out[0] = '\0';
	for (tok = strtok_r(buf, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
		if (!strcmp(tok, "."))
			continue;
		if (!strcmp(tok, "..")) {
			char *slash = strrchr(out, '/');
			n = slash ? (size_t)(slash - out) : 0;
			out[n] = '\0';
			continue;
		}
		if (n + 1 + strlen(tok) + 1 > len)
			return -ENAMETOOLONG;
		n += (size_t)sprintf(out + n, "/%s", tok);
	}
	if (!n)
		strcpy(out, "/");
	return 0;
}

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape(char *s)
{
	char *w = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*w++ = (char)((s[1] - '0') << 6 | (s[2] - '0') << 3 | (s[3] - '0'));
			s += 3;
		} else {
			*w++ = *s;
		}
	}
	*w = '\0';
}

/* One mountinfo line: "id parent maj:min root mountpoint opts [tags] - type source sopts". */
static bool parse_mountinfo(char *line, struct kvfs_mount_info *m)
{
	char mp[PATH_MAX], type[64], src[PATH_MAX];
	char *dash = strstr(line, " - ");

	if (!dash || sscanf(line, "%*u %*u %u:%u %*s %4095s", &m->major, &m->minor, mp) != 3 ||
	    sscanf(dash + 3, "%63s %4095s", type, src) != 2)
		return false;
	unescape(mp);
	unescape(src);
	snprintf(m->mountpoint, sizeof(m->mountpoint), "%s", mp);
	snprintf(m->fstype, sizeof(m->fstype), "%s", type);
	snprintf(m->source, sizeof(m->source), "%s", src);
	return true;
}

int kvfs_mount_find(const char *mnt, struct kvfs_mount_info *out)
{
	struct kvfs_mount_info m;
	char abs[PATH_MAX], *line = NULL;
	size_t cap = 0;
	int rc = kvfs_path_absolute(mnt, abs, sizeof(abs)), found = -ENOENT;
	FILE *f;

	if (rc < 0)
		return rc;
	f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return -errno;
	/* The last match is the one on top (mounts stack in table order). */
	while (getline(&line, &cap, f) > 0)
		if (parse_mountinfo(line, &m) && !strcmp(m.mountpoint, abs)) {
			*out = m;
			found = 0;
		}
	free(line);
	fclose(f);
	return found;
}

bool kvfs_mount_is_kvfs(const struct kvfs_mount_info *m)
{
	return !strcmp(m->fstype, "fuse.kvfs") ||
	       (!strncmp(m->fstype, "fuse", 4) && !strncmp(m->source, "kvfs:", 5));
}

/* Wait for child pid up to timeout_ms; its exit status, or -ETIMEDOUT. */
static int wait_child(pid_t pid, int timeout_ms)
{
	struct timespec tick = { 0, 10 * 1000 * 1000 };
	int st;

	for (int waited = 0; waited <= timeout_ms; waited += 10) {
		pid_t r = waitpid(pid, &st, WNOHANG);

		if (r == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 255;
		if (r < 0 && errno != EINTR)
			return -errno;
		nanosleep(&tick, NULL);
	}
	return -ETIMEDOUT;
}

int kvfs_mount_probe(const char *mnt, int timeout_ms)
{
	pid_t pid = fork();
	int rc;

	if (pid < 0)
		return -errno;
	if (pid == 0) {
		struct statvfs sv;
		_exit(statvfs(mnt, &sv) == 0 ? 0 : errno & 0xff);
	}
	rc = wait_child(pid, timeout_ms);
	if (rc == -ETIMEDOUT) {
		/* A FUSE request waits killably: SIGKILL ends the child. */
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return -ETIMEDOUT;
	}
	return rc <= 0 ? rc : -rc;
}

/* fusectl is where the kernel lets root abort a connection; systemd mounts
 * it, minimal systems may not. */
static int fusectl_ready(void)
{
	struct statfs sf;

	if (statfs(FUSECTL_DIR, &sf) == 0 && sf.f_type == FUSECTL_MAGIC)
		return 0;
	if (mount("fusectl", FUSECTL_DIR, "fusectl", 0, NULL) < 0)
		return -errno;
	return 0;
}

int kvfs_fuse_abort(const struct kvfs_mount_info *m)
{
	char path[128];
	int fd, rc;

	if (m->major != 0)   /* fuseblk: a block device, not ours */
		return -EINVAL;
	if ((rc = fusectl_ready()) < 0)
		return rc;
	/* The connection is named by the superblock's device number. */
	snprintf(path, sizeof(path), FUSECTL_DIR "/%u/abort", m->minor);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	rc = write(fd, "1", 1) == 1 ? 0 : -errno;
	close(fd);
	return rc;
}
