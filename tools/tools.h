/* Subcommands of the kvfs command (tools/). Each returns an exit status. */
#ifndef KVFS_TOOLS_H
#define KVFS_TOOLS_H

#include <stdio.h>

int kvfs_cmd_model(int argc, char **argv);
int kvfs_cmd_stat(int argc, char **argv);
int kvfs_cmd_bench_files(int argc, char **argv);
int kvfs_cmd_bench(int argc, char **argv);
int kvfs_cmd_bench_mount(int argc, char **argv);
int kvfs_cmd_gc(int argc, char **argv);
int kvfs_cmd_fsck(int argc, char **argv);
int kvfs_cmd_umount(int argc, char **argv);
int kvfs_cmd_import(int argc, char **argv);
/* mount(8)/umount(8) helpers: the kvfs binary run as mount.fuse.kvfs or
 * umount.fuse.kvfs (tools/mount_helper.c). */
int kvfs_mount_helper_main(int argc, char **argv);
int kvfs_umount_helper_main(int argc, char **argv);

/* s as a JSON string literal on f (tools/json.c). */
void kvfs_json_str(FILE *f, const char *s);
/* s with control bytes as \xNN and '\' as "\\", malloc'd (NULL: no
 * memory): names come from clients, and a raw escape sequence in one must
 * not reach an operator's terminal. */
char *kvfs_text_escape(const char *s);

#endif
