/*
 * Namespace changes written once, for every front end: each happens under
 * kvfs.ns_lock in two steps that must stay together, the in-memory index
 * change (visibility) and the queued manifest change (durability, in the
 * same order). Directories (models under the root, layers under models)
 * start here; the other changes are still written in fuse/ops.c, page.c
 * and capacity.c (docs/modules.md, "What is not done yet").
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvfs_i.h"

/* Layer directories are named by their number ("0".."99999", any padding);
 * two names for the same number would be two directories for one layer. */
static int check_layer_name(struct kvfs *fs, const struct kv_node_info *model,
			    const char *name, uint32_t *layer)
{
	struct kv_dirent *d;
	size_t n, i, len = strlen(name);
	char *end;
	unsigned long v;
	int rc;

	if (len == 0 || len > 5 || strspn(name, "0123456789") != len) {
		kv_log(KV_LOG_INFO, "layer directory name \"%s\" refused: use the layer number (e.g. 00, 31)", name);
		return -EINVAL;
	}
	v = strtoul(name, &end, 10);
	if (model->geo.layers && v >= model->geo.layers) {
		kv_log(KV_LOG_INFO, "layer %lu refused: model %s has %u layers",
		       v, model->name, model->geo.layers);
		return -EINVAL;
	}
	rc = kv_index_readdir(fs->idx, model->ino, &d, &n);
	if (rc < 0)
		return rc;
	for (i = 0; i < n && rc == 0; i++) {
		struct kv_node_info s;

		if (kv_index_get(fs->idx, d[i].ino, &s) == 0 &&
		    s.layer == v && strcmp(d[i].name, name) != 0)
			rc = -EEXIST;
	}
	kv_dirents_free(d, n);
	*layer = (uint32_t)v;
	return rc;
}

static int mkdir_locked(struct kvfs *fs, uint64_t parent, const char *name,
			uint32_t mode, uint32_t uid, uint32_t gid,
			struct kv_node_info *n)
{
	struct kv_node_info p;
	int rc;

	rc = kv_index_get(fs->idx, parent, &p);
	if (rc < 0)
		return rc;
	memset(n, 0, sizeof(*n));
	if (p.kind == KV_KIND_ROOT) {
		n->kind = KV_KIND_MODEL;
		if (!strncmp(name, ".kvfs", 5))
			return -EPERM;   /* reserved for the control directory */
	} else if (p.kind == KV_KIND_MODEL) {
		n->kind = KV_KIND_LAYER;
		rc = check_layer_name(fs, &p, name, &n->layer);
		if (rc < 0)
			return rc;
	} else {
		return p.kind == KV_KIND_PAGE ? -ENOTDIR : -EPERM;
	}
	n->ino = kv_index_next_ino(fs->idx);
	n->parent = parent;
	strcpy(n->name, name);
	n->attr.mode = mode & 07777;
	n->attr.uid = uid;
	n->attr.gid = gid;
	n->attr.atime_ns = n->attr.mtime_ns = n->attr.ctime_ns = kvfs_now_ns();
	rc = kv_index_add(fs->idx, n);
	if (rc == 0) {
		kvfs_commit_put_dir(fs, n);
		kvfs_dir_changed(fs, parent);
	}
	return rc;
}

int kvfs_ns_mkdir(struct kvfs *fs, uint64_t parent, const char *name,
		  uint32_t mode, uint32_t uid, uint32_t gid, struct kv_node_info *out)
{
	int rc;

	pthread_mutex_lock(&fs->ns_lock);
	rc = mkdir_locked(fs, parent, name, mode, uid, gid, out);
	pthread_mutex_unlock(&fs->ns_lock);
	return rc;
}
