/*
 * A page file's charges to the write-back budget (engine/dirty.c): what a
 * write or an ftruncate up adds to the page, in whose share, and where
 * the charge goes once the change is made (kept by the page) or not
 * (given back). Shared by the writer (pagefile.c) and setattr
 * (namespace.c), which call each other no other way.
 */
#include "kvfs_i.h"
#include "pagecharge.h"

/* Dirty bytes a write up to end adds to the page (its buffer only grows),
 * and whose share they count in: its creator's. The kernel serialises
 * writes to one inode, so the charge read here is still the page's when
 * kvfs_page_charge_add runs. */
static uint64_t charge_to(uint64_t end, uint64_t have)
{
	uint64_t need = (end + KV_ALIGN - 1) & ~(uint64_t)(KV_ALIGN - 1);

	return need > have ? need - have : 0;
}

uint64_t kvfs_page_charge_for(struct kvfs *fs, uint64_t ino, uint64_t end,
			      uint64_t *have, uint32_t *uid)
{
	struct kvfs_live *l;

	pthread_mutex_lock(&fs->ns_lock);
	l = kvfs_live_find(fs, ino);
	*have = l ? l->dirty : 0;
	*uid = l ? l->writer_uid : 0;
	pthread_mutex_unlock(&fs->ns_lock);
	return charge_to(end, *have);
}

void kvfs_page_charge_give(struct kvfs *fs, uint32_t uid, uint64_t charge)
{
	kvfs_dirty_uid_done(fs, uid, charge);
	kvfs_dirty_give(fs, charge, false);
}

void kvfs_page_charge_add(struct kvfs *fs, uint64_t ino, uint32_t uid, uint64_t charge)
{
	struct kvfs_live *l = kvfs_live_find(fs, ino);

	if (l) {
		l->dirty += charge;
		l->dirty_uid = true;
	} else {
		kvfs_page_charge_give(fs, uid, charge);
	}
}

int kvfs_page_charge_growth(struct kvfs *fs, uint64_t ino, uint64_t end, uint64_t *charge,
			    uint32_t *uid)
{
	uint64_t held = 0, limit = 0;
	struct kv_node_info n;
	struct kvfs_live *l;
	bool exact;

	/* Only a page being written can grow, and only up to its limit:
	 * the truncate refuses the rest, and must not wait for room first. */
	*charge = 0;
	pthread_mutex_lock(&fs->ns_lock);
	l = kvfs_live_find(fs, ino);
	if (l && l->writing && l->wbuf && !l->write_err &&    /* doomed: no charge */
	    kvfs_node_get_locked(fs, ino, &n) == 0 &&
	    kvfs_page_limit(fs, n.parent, &limit, &exact) == 0 && end <= limit) {
		held = l->dirty;
		*uid = l->writer_uid;
		*charge = charge_to(end, held);
	}
	pthread_mutex_unlock(&fs->ns_lock);
	return *charge ? kvfs_dirty_take_uid(fs, *uid, *charge, held) : 0;
}

void kvfs_page_charge_settle(struct kvfs *fs, uint64_t ino, uint32_t uid, uint64_t charge,
			     bool grown)
{
	if (!charge)
		return;
	if (grown)
		kvfs_page_charge_add(fs, ino, uid, charge);
	else
		kvfs_page_charge_give(fs, uid, charge);
}

/*
 * A page with a refused write or growth will never be stored: its bytes
 * leave RAM, the write-back budget and its uid's share now, not at its
 * close. Its share alone was given back before, and its bytes stayed
 * charged to the budget, in no one's share, for as long as the writer
 * kept the file open: one uid dooming 64 MiB pages one after another
 * grew the daemon 64 MiB a 2 s stall, past any share, and every root
 * write waited the 2 s (abuse pass). Without memory for an empty buffer
 * the bytes stay, charged, until the close.
 */
void kvfs_page_doom_locked(struct kvfs *fs, uint64_t ino, int rc)
{
	struct kvfs_live *l = kvfs_live_find(fs, ino);
	struct kvfs_data *empty;

	if (!l || !l->writing || !l->wbuf)
		return;
	if (!l->write_err)
		l->write_err = rc;
	empty = kvfs_data_new(0);
	if (!empty) {
		kvfs_dirty_uid_release_live(fs, l);   /* the uid's other pages go on */
		return;
	}
	kvfs_data_put(l->wbuf);
	l->wbuf = empty;
	kvfs_page_unreserve(fs, l);
	kvfs_dirty_give_live(fs, l);
}

int kvfs_page_doom(struct kvfs *fs, uint64_t ino, int rc)
{
	pthread_mutex_lock(&fs->ns_lock);
	kvfs_page_doom_locked(fs, ino, rc);
	pthread_mutex_unlock(&fs->ns_lock);
	return rc;
}
