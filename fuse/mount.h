/*
 * The FUSE daemon and the mount helpers, for the `kvfs` command: mount,
 * umount, and finding the daemon behind a mountpoint.
 */
#ifndef KVFS_MOUNT_H
#define KVFS_MOUNT_H

#include <stdbool.h>
#include <stddef.h>

#include "engine.h"

/*
 * The mount table and the daemon behind a mountpoint (fuse/mounts.c), read
 * without touching the mountpoint itself (a hung daemon blocks a stat).
 */
#define KVFS_PATH_MAX 4096
struct kvfs_mount_info {
	char mountpoint[KVFS_PATH_MAX];
	char fstype[64];               /* "fuse.kvfs" */
	char source[KVFS_PATH_MAX];    /* "kvfs:/path/to/store" */
	unsigned major, minor;         /* the superblock's device number */
};
/* path made absolute from the cwd, "." and ".." resolved lexically. */
int kvfs_path_absolute(const char *path, char *out, size_t len);
/* The topmost mount at mnt: 0, or -ENOENT if nothing is mounted there. */
int kvfs_mount_find(const char *mnt, struct kvfs_mount_info *out);
bool kvfs_mount_is_kvfs(const struct kvfs_mount_info *m);
/* statfs of mnt from a child given timeout_ms to answer: 0, -ENOTCONN (its
 * FUSE daemon is gone), -ETIMEDOUT (it does not answer), or -errno. */
int kvfs_mount_probe(const char *mnt, int timeout_ms);
/* Abort m's FUSE connection through fusectl (mounted if needed; root):
 * every request in flight or to come fails, the daemon's reads of
 * /dev/fuse end. 0 or -errno. */
int kvfs_fuse_abort(const struct kvfs_mount_info *m);

/* `kvfs mount STORE MOUNTPOINT [-f] [-o opt,...]`; returns an exit status. */
int kvfs_mount_main(int argc, char **argv);

#endif
