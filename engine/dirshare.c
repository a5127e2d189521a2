/*
 * Directories per uid. A model or layer directory costs no capacity but
 * about 360 bytes of daemon RAM and 100 of manifest, so a uid allowed to
 * make models (a mount root made 1777) made 116,000 in 30 s and could go
 * on until the daemon ran out of memory. A uid other than root now owns
 * at most -o dir_share of them (models and layers together): enough for
 * two models of 100,000 layers, the most one model may have. Counted at
 * open from the index, then kept by mkdir, rmdir, a rename over an empty
 * directory, and chown. Root's are not counted: it is trusted, as with
 * the write-back budget and open_share.
 */
#include <errno.h>

#include "dirshare.h"
#include "kvfs_i.h"

struct uid_dirs {
	uint32_t uid;
	uint64_t dirs;
};

static struct uid_dirs *entry(struct kvfs *fs, uint32_t uid, bool add)
{
	if (!fs->uid_dirs.size)
		fs->uid_dirs = KVFS_UIDTAB(struct uid_dirs);
	return kvfs_uidtab_get(&fs->uid_dirs, uid, add);
}

static void drop_one(struct kvfs *fs, uint32_t uid)
{
	struct uid_dirs *e = uid ? entry(fs, uid, false) : NULL;

	if (e && --e->dirs == 0)
		kvfs_uidtab_remove(&fs->uid_dirs, e);
}

/* Counting without the limit: what the store holds is what it holds. */
static int add_one(struct kvfs *fs, uint32_t uid)
{
	struct uid_dirs *e;

	if (uid == 0)
		return 0;
	e = entry(fs, uid, true);
	if (!e)
		return -ENOMEM;
	e->dirs++;
	return 0;
}

static int count_children(struct kvfs *fs, uint64_t dir, bool models)
{
	struct kv_dirent *d = NULL;
	struct kv_node_info n;
	size_t nd = 0;
	int rc = kv_index_readdir(fs->idx, dir, &d, &nd);

	for (size_t i = 0; rc == 0 && i < nd; i++) {
		if (d[i].kind == KV_KIND_PAGE || kv_index_get(fs->idx, d[i].ino, &n) < 0)
			continue;
		rc = add_one(fs, n.attr.uid);
		if (rc == 0 && models)
			rc = count_children(fs, d[i].ino, false);
	}
	kv_dirents_free(d, nd);
	return rc;
}

int kvfs_dir_share_count(struct kvfs *fs)
{
	int rc;

	pthread_mutex_lock(&fs->ns_lock);
	rc = count_children(fs, KV_ROOT_INO, true);
	pthread_mutex_unlock(&fs->ns_lock);
	return rc;
}

void kvfs_dir_share_free(struct kvfs *fs)
{
	kvfs_uidtab_free(&fs->uid_dirs);
}

int kvfs_dir_share_take(struct kvfs *fs, uint32_t uid)
{
	static struct kv_log_limit log;    /* any uid that may mkdir, at will */
	struct uid_dirs *e = uid ? entry(fs, uid, false) : NULL;

	if (e && fs->opts.dir_share && e->dirs >= fs->opts.dir_share) {
		KV_LOG_LIMITED(&log, KV_LOG_WARN, "mkdir by uid %u refused (EDQUOT): it owns "
			       "%llu directories, its share (-o dir_share=%llu)", uid,
			       (unsigned long long)e->dirs,
			       (unsigned long long)fs->opts.dir_share);
		return -EDQUOT;
	}
	return add_one(fs, uid);
}

void kvfs_dir_share_give(struct kvfs *fs, uint32_t uid)
{
	drop_one(fs, uid);
}

void kvfs_dir_share_move(struct kvfs *fs, uint32_t from, uint32_t to)
{
	if (from == to)
		return;
	drop_one(fs, from);
	(void)add_one(fs, to);   /* no memory: the new owner is counted short */
}
