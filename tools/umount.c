/*
 * `kvfs umount [--force] [--wait SECS] MOUNTPOINT`: unmount a kvfs mount and
 * wait for its daemon to commit and exit, or recover one whose daemon died
 * or hangs.
 *
 *   live daemon      unmount; the daemon commits everything and exits; we
 *                    wait for it (so a script can mount again at once)
 *   dead daemon      (ENOTCONN) detach the stale mount
 *   hung daemon      refused without --force. --force aborts the FUSE
 *                    connection (fusectl), so every blocked request fails
 *                    with ECONNABORTED, detaches the mount, gives the daemon
 *                    --wait seconds to exit and then SIGKILLs it. Nothing
 *                    durable is lost: what was acknowledged is in the
 *                    manifest, and the next mount reclaims the rest.
 *
 * A daemon killed while it was telling the kernel to forget a name can also
 * hang in its exit, waiting for a directory lock a request holds; aborting
 * the connection is what frees it (docs/usage.md, "Recovering a mount").
 * --escalate is for service managers: a plain unmount that turns into
 * --force when the daemon does not answer or does not exit in time.
 * --store guards scripted use: act only if MOUNTPOINT serves that store
 * (a unit whose start failed must not unmount another store's mount).
 * Exit: 0 unmounted, 1 failed, 2 usage, 32 busy (files open in it: as
 * umount(8)).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mount.h"
#include "tools.h"

#define UMOUNT_USAGE \
	"usage: kvfs umount [--force | --escalate | --lazy] [--wait SECS] [--store STORE]\n" \
	"                   MOUNTPOINT\n" \
	"  Unmounts and waits until the daemon has committed everything and\n" \
	"  released the store; a stale mount (daemon gone) is detached.\n" \
	"  --force        the daemon hangs: abort its connection, detach, end it\n" \
	"  --escalate     unmount normally, but go on as --force if the daemon\n" \
	"                 does not answer, or has not exited after --wait seconds\n" \
	"                 (for service managers: ExecStop)\n" \
	"  --lazy         detach now and do not wait; the daemon exits once the\n" \
	"                 last open file is closed (umount -l)\n" \
	"  --wait SECS    how long to wait for the daemon to exit (default 60)\n" \
	"  --store STORE  act only if MOUNTPOINT serves STORE\n" \
	"  exit: 0 unmounted, 1 failed (or not a kvfs mount of STORE), 2 usage\n"

struct umount_ctx {
	const char *mnt;
	struct kvfs_mount_info m;
	const char *store; /* from the mount's source, "kvfs:STORE" */
	pid_t daemon;      /* from STORE/kvfs.lock, 0 if unknown or gone */
	const char *only_store; /* --store */
	bool force, escalate, lazy;
	int wait_s;
};

/* The pid in STORE/kvfs.lock, if it is still a kvfs process. */
static pid_t daemon_pid(const char *store)
{
	char path[KVFS_PATH_MAX + 32], buf[64] = "";
	FILE *f;
	long pid;

	if (snprintf(path, sizeof(path), "%s/kvfs.lock", store) >= (int)sizeof(path) ||
	    !(f = fopen(path, "re")))
		return 0;
	pid = fgets(buf, sizeof(buf), f) ? strtol(buf, NULL, 10) : 0;
	fclose(f);
	if (pid <= 0)
		return 0;
	snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
	if (!(f = fopen(path, "re")))
		return 0;
	buf[0] = '\0';
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = '\0';
	fclose(f);
	return strncmp(buf, "kvfs", 4) ? 0 : (pid_t)pid;
}

/* Whether some process still holds the store (the flock on the STORE
 * directory, kvfs_lock_store): the daemon's lock outlives it only as long
 * as its last thread, which is what matters (a daemon whose main thread is
 * a zombie can still hold the store). */
static bool store_locked(const char *store)
{
	bool held;
	int fd;

	fd = open(store, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return false;
	held = flock(fd, LOCK_EX | LOCK_NB) < 0 && errno == EWOULDBLOCK;
	close(fd);      /* (releases it if we got it) */
	return held;
}

#define UMOUNT_BUSY 32

static bool wait_unlocked_ms(const char *store, int ms)
{
	struct timespec tick = { 0, 50 * 1000 * 1000 };

	for (int i = 0; i < ms / 50; i++) {
		if (!store_locked(store))
			return true;
		nanosleep(&tick, NULL);
	}
	return !store_locked(store);
}

/* Is process pid stopped (SIGSTOP, a debugger)? Then it cannot exit. */
static bool process_stopped(pid_t pid)
{
	char path[64], buf[512], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	p = strrchr(buf, ')');     /* the state follows the command name */
	return p && (p[2] == 'T' || p[2] == 't');
}

/* Wait up to secs for the store's lock to go; after the first second, say
 * what we wait for (a daemon that never exits must not look like a hang
 * of ours). */
static bool wait_unlocked(const char *store, pid_t daemon, int secs, bool will_kill)
{
	int first = secs < 1 ? secs * 1000 : 1000;

	if (wait_unlocked_ms(store, first) || secs <= 1)
		return !store_locked(store);
	fprintf(stderr, "kvfs umount: waiting up to %d more s for daemon pid %d to commit "
		"and release %s%s%s\n", secs - 1, (int)daemon, store,
		daemon && process_stopped(daemon) ? "; it is stopped (SIGSTOP) and cannot exit "
		"until continued" : "", will_kill ? "; then it is killed" : "");
	return wait_unlocked_ms(store, (secs - 1) * 1000);
}

/* Unprivileged users go through the setuid helper, as fusermount3 would. */
static int detach(const char *mnt, bool lazy)
{
	if (geteuid() == 0)
		return umount2(mnt, lazy ? MNT_DETACH : 0) < 0 ? -errno : 0;
	pid_t pid = fork();
	int st;

	if (pid < 0)
		return -errno;
	if (pid == 0) {
		execlp("fusermount3", "fusermount3", lazy ? "-uz" : "-u", mnt, (char *)NULL);
		_exit(127);
	}
	if (waitpid(pid, &st, 0) < 0)
		return -errno;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EBUSY;
}

/* A daemon that could not commit everything leaves "lost N" in its lock
 * file (kvfs_close): the unmount then did not keep what was acknowledged. */
static int daemon_lost(const struct umount_ctx *u)
{
	char path[KVFS_PATH_MAX + 32], buf[64] = "";
	unsigned long long n = 0;
	ssize_t got;
	int fd;

	if (snprintf(path, sizeof(path), "%s/kvfs.lock", u->store) >= (int)sizeof(path))
		return 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	got = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[got > 0 ? got : 0] = '\0';
	if (sscanf(buf, "lost %llu", &n) != 1 || n == 0)
		return 0;
	fprintf(stderr, "kvfs umount: the daemon of %s exited without committing %llu "
		"change(s) to the manifest: they are lost (see %s/kvfs.log, then run `kvfs "
		"fsck %s`)\n", u->mnt, n, u->store, u->store);
	return -EIO;
}

/* After the mount is gone: the daemon commits and exits (releasing the
 * store), or is ended. */
static int reap_daemon(struct umount_ctx *u, bool kill_if_stuck)
{
	if (wait_unlocked(u->store, u->daemon, u->wait_s, kill_if_stuck && u->daemon))
		return daemon_lost(u);
	if (!kill_if_stuck || !u->daemon) {
		fprintf(stderr, "kvfs umount: %s is unmounted but its daemon (pid %d) still "
			"holds %s after %d s%s\n", u->mnt, (int)u->daemon, u->store, u->wait_s,
			kill_if_stuck ? "" : "; it may still be committing");
		return -ETIMEDOUT;
	}
	fprintf(stderr, "kvfs umount: daemon pid %d did not exit within %d s; killing it\n",
		(int)u->daemon, u->wait_s);
	kill(u->daemon, SIGKILL);
	if (wait_unlocked_ms(u->store, 10000))
		return 0;
	fprintf(stderr, "kvfs umount: daemon pid %d survives SIGKILL (blocked in the "
		"kernel); %s stays locked until it ends\n", (int)u->daemon, u->store);
	return -ETIMEDOUT;
}

static int force_umount(struct umount_ctx *u)
{
	int rc = kvfs_fuse_abort(&u->m);

	if (rc < 0)
		fprintf(stderr, "kvfs umount: cannot abort the FUSE connection of %s "
			"(/sys/fs/fuse/connections/%u/abort): %s%s\n", u->mnt, u->m.minor,
			strerror(-rc), rc == -EPERM || rc == -EACCES ? " (needs root)" : "");
	else
		printf("kvfs umount: aborted the FUSE connection of %s: requests in flight "
		       "fail with ECONNABORTED\n", u->mnt);
	if ((rc = detach(u->mnt, true)) < 0) {
		fprintf(stderr, "kvfs umount: cannot detach %s: %s\n", u->mnt, strerror(-rc));
		return 1;
	}
	return reap_daemon(u, true) < 0 ? 1 : 0;
}

static int plain_umount(struct umount_ctx *u)
{
	int probe = kvfs_mount_probe(u->mnt, 2000), rc;

	if (probe == -ETIMEDOUT && u->escalate) {
		fprintf(stderr, "kvfs umount: the daemon of %s (pid %d) does not answer "
			"within 2 s; forcing\n", u->mnt, (int)u->daemon);
		return force_umount(u);
	}
	if (probe == -ETIMEDOUT) {
		fprintf(stderr, "kvfs umount: the daemon of %s (pid %d) does not answer within "
			"2 s; to recover: kvfs umount --force %s\n", u->mnt, (int)u->daemon, u->mnt);
		return 1;
	}
	/* A dead daemon serves nothing: detaching loses nothing. */
	rc = detach(u->mnt, probe == -ENOTCONN || u->lazy);
	if (rc == -EBUSY) {
		fprintf(stderr, "kvfs umount: %s is busy (files open or a working directory "
			"in it); close them, or detach it lazily: kvfs umount --lazy %s\n", u->mnt, u->mnt);
		return UMOUNT_BUSY;
	}
	if (rc < 0) {
		fprintf(stderr, "kvfs umount: %s: %s\n", u->mnt, strerror(-rc));
		return 1;
	}
	if (probe == -ENOTCONN)
		printf("kvfs umount: %s was stale (its daemon was gone): detached\n", u->mnt);
	if (u->lazy)
		return 0;
	return reap_daemon(u, u->escalate) < 0 ? 1 : 0;
}

/* Whether the store path given names the store a mount serves (its source
 * is the realpath the daemon saw at mount time). */
static bool same_store(const char *given, const char *served)
{
	char abs[PATH_MAX];

	if (realpath(given, abs))
		return !strcmp(abs, served);
	return !strcmp(given, served);
}

static int parse_umount_args(struct umount_ctx *u, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "force", no_argument, NULL, 'f' },
		{ "wait", required_argument, NULL, 'w' },
		{ "escalate", no_argument, NULL, 'e' },
		{ "lazy", no_argument, NULL, 'l' },
		{ "store", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char *end;
	int c;

	memset(u, 0, sizeof(*u));
	u->wait_s = 60;
	while ((c = getopt_long(argc, argv, "fw:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'f': u->force = true; break;
		case 'e': u->escalate = true; break;
		case 'l': u->lazy = true; break;
		case 's': u->only_store = optarg; break;
		case 'w':
			u->wait_s = (int)strtol(optarg, &end, 10);
			if (*end || u->wait_s < 0 || u->wait_s > 3600)
				return -EINVAL;
			break;
		case 'h': fputs(UMOUNT_USAGE, stdout); exit(0);
		default: return -EINVAL;
		}
	}
	if (optind != argc - 1 || u->force + u->escalate + u->lazy > 1)
		return -EINVAL;
	u->mnt = argv[optind];
	return 0;
}

int kvfs_cmd_umount(int argc, char **argv)
{
	struct umount_ctx u;

	if (parse_umount_args(&u, argc, argv) < 0) {
		fputs(UMOUNT_USAGE, stderr);
		return 2;
	}
	if (kvfs_mount_find(u.mnt, &u.m) < 0) {
		fprintf(stderr, "kvfs umount: nothing is mounted at %s\n", u.mnt);
		return 1;
	}
	if (!kvfs_mount_is_kvfs(&u.m)) {
		fprintf(stderr, "kvfs umount: %s is a %s mount of %s, not kvfs\n", u.mnt,
			u.m.fstype, u.m.source);
		return 1;
	}
	/* (a kvfs mount made by another tool may name no store: then we
	 * cannot watch its daemon, only unmount) */
	u.store = strncmp(u.m.source, "kvfs:", 5) ? "/nonexistent" : u.m.source + 5;
	if (u.only_store && !same_store(u.only_store, u.store)) {
		fprintf(stderr, "kvfs umount: %s serves %s, not %s: left alone\n", u.mnt,
			u.store, u.only_store);
		return 1;
	}
	u.daemon = daemon_pid(u.store);
	return u.force ? force_umount(&u) : plain_umount(&u);
}
