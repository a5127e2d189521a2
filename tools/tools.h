/* Subcommands of the kvfs command (tools/). Each returns an exit status. */
#ifndef KVFS_TOOLS_H
#define KVFS_TOOLS_H

int kvfs_cmd_model(int argc, char **argv);
int kvfs_cmd_stat(int argc, char **argv);
int kvfs_cmd_bench_files(int argc, char **argv);
int kvfs_cmd_bench(int argc, char **argv);
int kvfs_cmd_gc(int argc, char **argv);
int kvfs_cmd_fsck(int argc, char **argv);
int kvfs_cmd_umount(int argc, char **argv);

#endif
