/*
 * How many directories one uid owns (engine/dirshare.c): a uid other than
 * root owns at most -o dir_share models and layer directories together.
 * All under ns_lock.
 */
#ifndef KVFS_DIRSHARE_H
#define KVFS_DIRSHARE_H

#include <stdint.h>

struct kvfs;

/* Count the directories in the index, each for its owner (at open, once
 * the index holds every directory). 0 or -ENOMEM. */
int kvfs_dir_share_count(struct kvfs *fs);
void kvfs_dir_share_free(struct kvfs *fs);
/* A directory for uid: -EDQUOT (logged) when it owns dir_share already. */
int kvfs_dir_share_take(struct kvfs *fs, uint32_t uid);
/* One of uid's directories is gone, or was given to another owner. */
void kvfs_dir_share_give(struct kvfs *fs, uint32_t uid);
void kvfs_dir_share_move(struct kvfs *fs, uint32_t from, uint32_t to);

#endif
