/*
 * What one uid's open page files may take (engine/openshare.c): loaded
 * bytes kept between reads (-o read_hold) and page bytes held against
 * eviction (-o open_share). For the page files (pagefile.c).
 */
#ifndef KVFS_OPENSHARE_H
#define KVFS_OPENSHARE_H

#include <stdbool.h>
#include <stdint.h>

struct kvfs;

/* May a file uid opened keep bytes loaded for its next reads? Counted
 * for uid if so. Takes ns_lock. */
bool kvfs_read_hold_take(struct kvfs *fs, uint32_t uid, uint64_t bytes, uint64_t ino);
void kvfs_read_hold_give(struct kvfs *fs, uint32_t uid, uint64_t bytes);
/* A file uid opens on a page of bytes physical bytes (ns_lock held): it
 * holds them against eviction, counted for uid. -EMFILE (logged, rate
 * limited) past the uid's share of the capacity in cache mode. */
int kvfs_open_share_take(struct kvfs *fs, uint32_t uid, uint64_t bytes, const char *name);
void kvfs_open_share_give_locked(struct kvfs *fs, uint32_t uid, uint64_t bytes);

#endif
