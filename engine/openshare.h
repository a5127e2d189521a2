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

void kvfs_open_share_init(struct kvfs *fs);
/* Bytes uid's open files may hold against eviction (cache mode,
 * -o open_share of the capacity); 0: no limit (root, authoritative mode,
 * no capacity). Pages uid is writing count against it too (dirty.c). */
uint64_t kvfs_open_share_bytes(const struct kvfs *fs, uint32_t uid);
/* Bytes uid's open files hold now (takes ns_lock). */
uint64_t kvfs_open_share_held(struct kvfs *fs, uint32_t uid);

/* May a file uid opened keep bytes loaded for its next reads? Counted
 * for uid if so. Takes ns_lock. */
bool kvfs_read_hold_take(struct kvfs *fs, uint32_t uid, uint64_t bytes, uint64_t ino);
void kvfs_read_hold_give(struct kvfs *fs, uint32_t uid, uint64_t bytes);
/* A file uid opens on a page of bytes physical bytes (ns_lock held): it
 * holds them against eviction, counted for uid. -EMFILE (logged, rate
 * limited) past the uid's share of the capacity in cache mode; a uid
 * holding nothing may open one page of any size; root has no limit.
 * writing: the bytes of pages uid is still writing (kvfs_dirty_uid_filling),
 * which count in the share too. *counted: the bytes counted for uid, to
 * give back at close. */
int kvfs_open_share_take(struct kvfs *fs, uint32_t uid, uint64_t bytes, uint64_t writing,
			 const char *name, uint64_t *counted);
/* A page a writer's descriptor keeps after fsync sealed it (ns_lock held):
 * never refused (the page is written); returns the bytes counted. */
uint64_t kvfs_open_share_add_locked(struct kvfs *fs, uint32_t uid, uint64_t bytes);
/* Before uid creates page name (ns_lock held): -EMFILE (logged) if its
 * open files already hold its whole share, since a page it writes and
 * fsyncs is then held too; writing as for kvfs_open_share_take. */
int kvfs_open_share_full(struct kvfs *fs, uint32_t uid, uint64_t writing, const char *name);
void kvfs_open_share_give_locked(struct kvfs *fs, uint32_t uid, uint64_t bytes);
/* uid created a page it now writes (ns_lock held): until it is sealed or
 * discarded, the page holds at least one KV_ALIGN block of uid's share
 * (an empty page is charged that, and a page being written is never
 * evicted). True if counted: then call ..._done_locked once, at the end. */
bool kvfs_open_share_writer_locked(struct kvfs *fs, uint32_t uid);
void kvfs_open_share_writer_done_locked(struct kvfs *fs, uint32_t uid);

#endif
