/*
 * The live-page table: runtime state of pages the kernel has open or whose
 * payload is in RAM waiting for the committer (struct kvfs_live, under
 * ns_lock), and node snapshots that include unlinked pages still open.
 * Dropping an entry gives back its write-back charge and frees an extent
 * the manifest already forgot.
 */
#include <errno.h>
#include <stdlib.h>

#include "kvfs_i.h"
#include "openshare.h"

static size_t live_slot(struct kvfs *fs, uint64_t ino)
{
	return (size_t)((ino * 0x9E3779B97F4A7C15ull) >> 17) % fs->live_buckets;
}

struct kvfs_live *kvfs_live_find(struct kvfs *fs, uint64_t ino)
{
	struct kvfs_live *l = fs->live[live_slot(fs, ino)];

	while (l && l->ino != ino)
		l = l->hnext;
	return l;
}

/*
 * The table doubles once it holds two entries a bucket. A write flood of
 * small pages keeps the whole write-back budget live (65,536 pages of
 * 4 KiB at 256 MiB): with the first 4,096 buckets a lookup walked 16
 * entries, and kvfs_live_find was 7 % of the daemon's CPU while creating
 * 4 KiB pages. A rehash runs under ns_lock, at most once per doubling; a
 * failed allocation only leaves the chains longer. It never shrinks: its
 * peak is a pointer per two pages that were live at once.
 */
static void live_grow(struct kvfs *fs)
{
	size_t ob = fs->live_buckets, nb = ob * 2;
	struct kvfs_live **old = fs->live, **nt = calloc(nb, sizeof(*nt));

	if (!nt)
		return;
	fs->live = nt;
	fs->live_buckets = nb;
	for (size_t i = 0; i < ob; i++) {
		struct kvfs_live *l;

		while ((l = old[i])) {
			size_t slot = live_slot(fs, l->ino);

			old[i] = l->hnext;
			l->hnext = nt[slot];
			nt[slot] = l;
		}
	}
	free(old);
}

struct kvfs_live *kvfs_live_get(struct kvfs *fs, uint64_t ino)
{
	struct kvfs_live *l = kvfs_live_find(fs, ino);
	size_t slot;

	if (l)
		return l;
	l = calloc(1, sizeof(*l));
	if (!l)
		return NULL;
	l->ino = ino;
	slot = live_slot(fs, ino);
	l->hnext = fs->live[slot];
	fs->live[slot] = l;
	if (++fs->nlive > 2 * fs->live_buckets)
		live_grow(fs);
	return l;
}

static void live_unhash(struct kvfs *fs, struct kvfs_live *l)
{
	struct kvfs_live **pp = &fs->live[live_slot(fs, l->ino)];

	while (*pp && *pp != l)
		pp = &(*pp)->hnext;
	if (*pp) {
		*pp = l->hnext;
		fs->nlive--;
	}
}

void kvfs_live_maybe_drop(struct kvfs *fs, struct kvfs_live *l)
{
	int rc;

	if (l->opens || l->writing || l->wbuf || l->ram)
		return;
	kvfs_dirty_give_live(fs, l);   /* nothing left to write back */
	if (l->free_on_close) {
		/* The manifest already forgot this page (see kvfs_page_forget);
		 * the last reader is gone, so the bytes may be reused now. */
		rc = kvfs_extent_release(fs, &l->info.ext);
		if (rc < 0)
			kv_log(KV_LOG_ERR, "freeing extent of unlinked page %s: %s",
			       l->info.name, kv_strerror(rc));
	}
	live_unhash(fs, l);
	free(l);
}

int kvfs_node_get_locked(struct kvfs *fs, uint64_t ino, struct kv_node_info *out)
{
	struct kvfs_live *l;
	int rc = kv_index_get(fs->idx, ino, out);

	if (rc != -ENOENT)
		return rc;
	l = kvfs_live_find(fs, ino);
	if (l && l->unlinked) {
		*out = l->info;
		return 0;
	}
	return rc;
}

int kvfs_node_put_locked(struct kvfs *fs, uint64_t ino, const struct kv_node_info *n,
			 unsigned upd)
{
	struct kvfs_live *l = kvfs_live_find(fs, ino);

	if (l && l->unlinked) {   /* its descriptors still see it: fstat, fchmod */
		l->info = *n;
		return 1;
	}
	return kv_index_update(fs->idx, ino, n, upd);
}

int kvfs_node_get(struct kvfs *fs, uint64_t ino, struct kv_node_info *out)
{
	int rc = kv_index_get(fs->idx, ino, out);

	if (rc != -ENOENT)
		return rc;
	pthread_mutex_lock(&fs->ns_lock);
	rc = kvfs_node_get_locked(fs, ino, out);
	pthread_mutex_unlock(&fs->ns_lock);
	return rc;
}

void kvfs_live_writer_done(struct kvfs *fs, struct kvfs_live *l)
{
	if (l->share_writer)
		kvfs_open_share_writer_done_locked(fs, l->writer_uid);
	l->share_writer = false;
}
