/*
 * A page file's charges to the write-back budget (engine/pagecharge.c),
 * for the writer (pagefile.c) and setattr (namespace.c).
 */
#ifndef KVFS_PAGECHARGE_H
#define KVFS_PAGECHARGE_H

#include <stdbool.h>
#include <stdint.h>

struct kvfs;

/* Bytes a write up to end adds to page ino's charge (0 if none), what it
 * holds already (*have) and whose share it counts in (*uid, its
 * creator). Takes ns_lock. */
uint64_t kvfs_page_charge_for(struct kvfs *fs, uint64_t ino, uint64_t end,
			      uint64_t *have, uint32_t *uid);
/* The change was made (ns_lock held): the page keeps the charge, or it
 * is given back if the page is gone. */
void kvfs_page_charge_add(struct kvfs *fs, uint64_t ino, uint32_t uid, uint64_t charge);
/* The change was not made: the charge goes back, to the budget and the
 * uid's share. */
void kvfs_page_charge_give(struct kvfs *fs, uint32_t uid, uint64_t charge);
/* A page being written grows to end other than by write (ftruncate up):
 * its growth is charged as a write's (kvfs_dirty_take_uid: may wait,
 * -EDQUOT, ...) before ns_lock; nothing for a page not being written or
 * past its limit (the truncate refuses those). Then, under ns_lock,
 * settled: kept by the page if it grew, given back if not. */
int kvfs_page_charge_growth(struct kvfs *fs, uint64_t ino, uint64_t end, uint64_t *charge,
			    uint32_t *uid);
void kvfs_page_charge_settle(struct kvfs *fs, uint64_t ino, uint32_t uid, uint64_t charge,
			     bool grown);
/* A page being written whose write or growth was refused (a size past
 * its limit, no write-back room: EDQUOT, or ENOSPC/EIO when nothing
 * drains) is never sealed, whatever its writer does next: later writes,
 * truncates, reads and its close get rc, and its bytes leave RAM, the
 * budget and the uid's share now. kvfs_page_doom takes ns_lock and
 * returns rc; the _locked form is for callers holding it. */
int kvfs_page_doom(struct kvfs *fs, uint64_t ino, int rc);
void kvfs_page_doom_locked(struct kvfs *fs, uint64_t ino, int rc);

#endif
