/*
 * The namespace: models, layers and page names. Every change here happens
 * under kvfs.ns_lock in two steps that must stay together: change the
 * in-memory index (visibility), then queue the manifest change (durability,
 * in the same order: commit.c note 1). Each function takes ns_lock itself
 * and refuses every change with EIO once the manifest is damaged
 * (kvfs_changes_damaged). Permission checks are the front end's (the
 * kernel's default_permissions for FUSE); names are checked here.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvfs_i.h"
#include "dirshare.h"
#include "pagecharge.h"

/* Lines about requests any user may repeat at will (a bad layer name, a
 * geometry that cannot fit, a rename refused, an owner unpinning). */
static struct kv_log_limit user_refusals;

int kvfs_check_name(const char *name)
{
	size_t len = strlen(name);

	if (len > KV_NAME_MAX)
		return -ENAMETOOLONG;
	if (len == 0 || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
		return -EINVAL;
	return 0;
}

void kvfs_ns_node_init(struct kvfs *fs, struct kv_node_info *n, const struct kv_node_info *p,
		       const char *name, uint32_t mode, uint32_t uid, uint32_t gid)
{
	/* A setgid directory hands its group down, and its setgid bit to
	 * subdirectories, as on ext4: users sharing a model through a group
	 * keep it group-owned whoever creates the layers and pages. */
	if (p->attr.mode & S_ISGID) {
		/* A page's own setgid bit, in a group its creator is not in
		 * (as far as we know: the request carries only the primary
		 * gid), is dropped, as Linux does without CAP_FSETID. */
		if (n->kind != KV_KIND_PAGE)
			mode |= S_ISGID;
		else if (uid != 0 && gid != p->attr.gid)
			mode &= ~(uint32_t)S_ISGID;
		gid = p->attr.gid;
	}
	n->ino = kv_index_next_ino(fs->idx);
	n->parent = p->ino;
	strcpy(n->name, name);
	n->attr.mode = mode;
	n->attr.uid = uid;
	n->attr.gid = gid;
	n->attr.atime_ns = n->attr.mtime_ns = n->attr.ctime_ns = kvfs_now_ns();
}

/* ev (may be NULL): KV event records of the change, taken. */
static void queue_change(struct kvfs *fs, const struct kv_node_info *n,
			 struct kvfs_event *ev)
{
	if (n->kind == KV_KIND_MODEL || n->kind == KV_KIND_LAYER || n->kind == KV_KIND_ROOT)
		kvfs_commit_put_dir(fs, n);
	else if (n->kind == KV_KIND_PAGE && n->state != KV_PAGE_WRITING)
		return kvfs_commit_put_page(fs, n, ev);
	kvfs_event_free(ev);
}

/* ---- attributes ---- */

/*
 * Pins are root's (or the daemon's user's). A pinned page is evicted after every unpinned one and
 * kept longest in the RAM tier, so a user who pinned its own pages (the
 * owner may chmod them) would push everyone else's out first: more than
 * its share of the store. A new pin asked by anyone else is dropped from a
 * chmod, silently as the kernel drops a set-group-ID bit a non-member asks
 * for (so `cp -a` of a pinned page still works, unpinned), and refused
 * with EPERM from user.kvfs.pinned. Keeping or removing a pin is anyone's
 * whom the kernel lets change the mode.
 */
static bool pin_refused(const struct kv_node_info *n, uint32_t old_mode, uint32_t caller)
{
	static struct kv_log_limit log;

	/* root, or the daemon's own user (a mount not run as root) */
	if (caller == 0 || caller == geteuid() || !(n->attr.mode & S_ISVTX) ||
	    old_mode & S_ISVTX)
		return false;
	KV_LOG_LIMITED(&log, KV_LOG_INFO, "page %s (inode %llu): a pin asked by uid %u "
		       "refused: only root pins pages", n->name, (unsigned long long)n->ino,
		       caller);
	return true;
}

/* A sealed page's content is immutable (no truncate), its metadata is
 * not: mode, owner and times change as on any file. */
static int do_setattr(struct kvfs *fs, uint64_t ino, const struct kvfs_attr_change *c,
		      struct kv_node_info *n)
{
	int64_t now = kvfs_now_ns();
	uint32_t old_mode, old_uid;
	bool page;
	int rc;

	/* An unlinked page still open is changed through its descriptors
	 * (fchmod, futimens, ftruncate) as on ext4: in its live entry only. */
	rc = kvfs_node_get_locked(fs, ino, n);
	if (rc < 0)
		return rc;
	page = n->kind == KV_KIND_PAGE;
	if (c->valid & KVFS_ATTR_SIZE) {
		if (!page)
			return -EISDIR;
		if (n->state != KV_PAGE_WRITING)
			return -EPERM;
		rc = kvfs_page_truncate(fs, ino, c->size);
		/* Refused: as for a refused write, the writer asked for a page
		 * this size and did not get it, so it is never stored. Not for
		 * ENOSPC in cache mode, where a write would have waited for
		 * the evictor: this one did not, and the next write still may. */
		if (rc < 0 && rc != -EPERM && (rc != -ENOSPC || fs->opts.authoritative))
			kvfs_page_doom_locked(fs, ino, rc);
		if (rc < 0)
			return rc;
		n->size = c->size;
		/* A truncate is a change of the bytes: mtime too, unless the
		 * caller sets it (the kernel does not always send it). */
		if (!(c->valid & (KVFS_ATTR_MTIME | KVFS_ATTR_MTIME_NOW)))
			n->attr.mtime_ns = now;
	}
	old_mode = n->attr.mode;
	old_uid = n->attr.uid;
	if (c->valid & KVFS_ATTR_MODE) {
		n->attr.mode = c->mode & 07777;
		if (page && pin_refused(n, old_mode, c->caller))
			n->attr.mode &= ~(uint32_t)S_ISVTX;
	}
	if (c->valid & KVFS_ATTR_UID)
		n->attr.uid = c->uid;
	if (c->valid & KVFS_ATTR_GID)
		n->attr.gid = c->gid;
	if (c->valid & KVFS_ATTR_ATIME)
		n->attr.atime_ns = c->atime_ns;
	if (c->valid & KVFS_ATTR_ATIME_NOW)
		n->attr.atime_ns = now;
	if (c->valid & KVFS_ATTR_MTIME)
		n->attr.mtime_ns = c->mtime_ns;
	if (c->valid & KVFS_ATTR_MTIME_NOW)
		n->attr.mtime_ns = now;
	n->attr.ctime_ns = now;
	rc = kvfs_node_put_locked(fs, ino, n, KV_UPD_ATTR);
	if (rc != 0)
		return rc < 0 ? rc : 0;   /* unlinked: no row to change */
	queue_change(fs, n, NULL);
	if (!page && n->kind != KV_KIND_ROOT)   /* chown moves it between shares */
		kvfs_dir_share_move(fs, old_uid, n->attr.uid);
	/* The sticky bit is the pin (user.kvfs.pinned): chmod +t pins. */
	if (page && n->state != KV_PAGE_WRITING && (old_mode ^ n->attr.mode) & S_ISVTX)
		kvfs_ram_protect(fs, n->extent_id, kvfs_pinned(n->attr.mode));
	return 0;
}

int kvfs_ns_setattr(struct kvfs *fs, uint64_t ino, const struct kvfs_attr_change *c,
		    struct kv_node_info *out)
{
	/* Even while the index loads: the node is loaded (the kernel found
	 * it by a lookup), and only a page still being written takes a size
	 * (sealed pages are EPERM), which no row names yet. */
	int rc = kvfs_changes_damaged(fs);
	uint64_t charge = 0;
	uint32_t uid = 0;

	/* A page grown by ftruncate holds its zeros in RAM like written
	 * bytes: the same budget and share (it could hold 64 MiB each). */
	if (rc == 0 && c->valid & KVFS_ATTR_SIZE &&
	    (rc = kvfs_page_charge_growth(fs, ino, c->size, &charge, &uid)) < 0)
		return kvfs_page_doom(fs, ino, rc);   /* as a refused write */
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&fs->ns_lock);
	rc = do_setattr(fs, ino, c, out);
	kvfs_page_charge_settle(fs, ino, uid, charge, rc == 0);
	pthread_mutex_unlock(&fs->ns_lock);
	return rc;
}

/* ---- directories ---- */

/* Layer directories are named by their number ("0".."99999"); two names
 * for the same number would be two directories for one layer. The other
 * names are found by lookups (kv_index_layer_find): a check that read the
 * whole model dir cost each mkdir a walk of every layer under ns_lock, and
 * a uid owning a model made 50,000 layers in 290 s, 12 ms per mkdir by the
 * end, while every other namespace change waited. */
static int check_layer_name(struct kvfs *fs, const struct kv_node_info *model,
			    const char *name, uint32_t *layer)
{
	size_t len = strlen(name);
	struct kv_node_info other;
	unsigned long v;
	int rc;

	if (len == 0 || len > KVFS_LAYER_DIGITS || strspn(name, "0123456789") != len) {
		KV_LOG_LIMITED(&user_refusals, KV_LOG_INFO, "layer directory name \"%s\" refused: "
			       "use the layer number (e.g. 00, 31)", name);
		return -EINVAL;
	}
	v = strtoul(name, NULL, 10);
	if (model->geo.layers && v >= model->geo.layers) {
		KV_LOG_LIMITED(&user_refusals, KV_LOG_INFO, "layer %lu refused: model %s has %u layers",
			       v, model->name, model->geo.layers);
		return -EINVAL;
	}
	*layer = (uint32_t)v;
	rc = kv_index_layer_find(fs->idx, model->ino, *layer, &other);
	return rc == 0 ? -EEXIST : rc == -ENOENT ? 0 : rc;
}

static int do_mkdir(struct kvfs *fs, uint64_t parent, const char *name, uint32_t mode,
		    uint32_t uid, uint32_t gid, struct kv_node_info *n)
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
	kvfs_ns_node_init(fs, n, &p, name, mode & 07777, uid, gid);
	rc = kvfs_dir_share_take(fs, n->attr.uid);
	if (rc < 0)
		return rc;
	rc = kv_index_add(fs->idx, n);
	if (rc < 0) {
		kvfs_dir_share_give(fs, n->attr.uid);
		return rc;
	}
	kvfs_commit_put_dir(fs, n);
	kvfs_dir_changed(fs, parent);
	return 0;
}

int kvfs_ns_mkdir(struct kvfs *fs, uint64_t parent, const char *name, uint32_t mode,
		  uint32_t uid, uint32_t gid, struct kv_node_info *out)
{
	int rc = kvfs_check_name(name);

	/* Even while the index loads: models and layers are whole from the
	 * start, and a new one has no pages the walk could meet. */
	if (rc == 0)
		rc = kvfs_changes_damaged(fs);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&fs->ns_lock);
	rc = do_mkdir(fs, parent, name, mode, uid, gid, out);
	pthread_mutex_unlock(&fs->ns_lock);
	return rc;
}

static int do_rmdir(struct kvfs *fs, uint64_t parent, const char *name)
{
	struct kv_node_info n;
	int rc = kv_index_lookup(fs->idx, parent, name, &n);

	if (rc < 0)
		return rc;
	if (n.kind == KV_KIND_PAGE)
		return -ENOTDIR;
	rc = kv_index_remove(fs->idx, n.ino);
	if (rc == 0) {
		kvfs_commit_del_dir(fs, &n);
		kvfs_dir_changed(fs, parent);
		kvfs_dir_share_give(fs, n.attr.uid);
	}
	return rc;
}

/*
 * A removal's layer is loaded first, before ns_lock (it is I/O), if the
 * background load has not reached it or left it in the manifest
 * (-o index_pages): a layer not loaded looks empty, and a page removed from
 * it would come back with its rows (the index refuses both with EAGAIN).
 * Both loads return at once when every layer is in.
 */
static int load_for_removal(struct kvfs *fs, uint64_t dir, const char *name)
{
	struct kv_node_info n;

	if (!name)
		return kv_index_layer_load(fs->idx, dir);
	if (kv_index_lookup(fs->idx, dir, name, &n) < 0 || n.kind != KV_KIND_LAYER)
		return 0;    /* nothing there, or no layer: the change says so */
	/* Pages in it (its rows count): ENOTEMPTY needs no load. A caller
	 * trying rmdir on every layer must not bring them all into RAM. */
	if (n.nchildren)
		return 0;
	return kv_index_layer_load(fs->idx, n.ino);
}

int kvfs_ns_rmdir(struct kvfs *fs, uint64_t parent, const char *name)
{
	int rc = kvfs_changes_damaged(fs);

	if (rc == 0)
		rc = load_for_removal(fs, parent, name);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&fs->ns_lock);
	rc = do_rmdir(fs, parent, name);
	pthread_mutex_unlock(&fs->ns_lock);
	return rc;
}

static int do_unlink(struct kvfs *fs, uint64_t parent, const char *name)
{
	struct kv_node_info n;
	int rc = kv_index_lookup(fs->idx, parent, name, &n);

	if (rc < 0)
		return rc;
	if (n.kind != KV_KIND_PAGE)
		return -EISDIR;
	return kvfs_page_forget(fs, &n, false, KVFS_EV_REMOVED);
}

int kvfs_ns_unlink(struct kvfs *fs, uint64_t parent, const char *name)
{
	int rc = kvfs_changes_damaged(fs);

	if (rc == 0)
		rc = load_for_removal(fs, parent, NULL);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&fs->ns_lock);
	rc = do_unlink(fs, parent, name);
	pthread_mutex_unlock(&fs->ns_lock);
	return rc;
}

/* ---- model geometry, pins (user.kvfs.* xattrs) ---- */

/*
 * A geometry may be set while the model holds no pages, or pages that
 * all have its page size (a page still being written: at most that): a
 * `cp -a` or `tar x` of a model sets the model's attributes after copying
 * its pages, and refusing then left the copy without its geometry. The
 * check walks the pages under ns_lock, so only up to GEO_CHECK_PAGES of
 * them (a few ms): a model's owner repeating it must not stall the mount.
 */
#define GEO_CHECK_PAGES 262144u

static int model_has_pages(struct kvfs *fs, uint64_t model, const struct kv_geometry *g)
{
	uint64_t bytes = g ? kv_geometry_page_bytes(g) : 0, pages = 0;
	struct kv_dirent *d;
	size_t n, i;
	int rc = kv_index_readdir(fs->idx, model, &d, &n);

	if (rc < 0)
		return rc;
	for (i = 0; rc == 0 && i < n; i++) {
		struct kv_node_info l;

		if (kv_index_get(fs->idx, d[i].ino, &l) < 0)
			continue;
		if (!kv_index_layer_whole(fs->idx, l.ino))
			rc = -EAGAIN;   /* its pages are not counted yet (loading) */
		else if (g && g->layers && l.layer >= g->layers)
			rc = -EINVAL;
		/* A layer left in the manifest counts its rows as children
		 * (-o index_pages): it holds pages, loaded or not. */
		else if (l.nchildren && (!bytes || (pages += l.nchildren) > GEO_CHECK_PAGES))
			rc = -ENOTEMPTY;
		else if (l.nchildren && (rc = kv_index_layer_sizes(fs->idx, l.ino, bytes)) == -EAGAIN)
			rc = -ENOTEMPTY;   /* some only in the manifest: not checked */
	}
	kv_dirents_free(d, n);
	return rc;
}

static int set_geometry(struct kvfs *fs, uint64_t ino, const struct kv_geometry *g)
{
	struct kv_node_info n;
	int rc = kv_index_get(fs->idx, ino, &n);

	if (rc < 0)
		return rc;
	if (n.kind != KV_KIND_MODEL)
		return -ENOTSUP;
	if (kv_geometry_page_bytes(g) > fs->meta.segment_size) {
		KV_LOG_LIMITED(&user_refusals, KV_LOG_INFO, "geometry of model %s refused: pages "
			       "of %llu bytes do not fit in this store's %llu-byte segments",
			       n.name, (unsigned long long)kv_geometry_page_bytes(g),
			       (unsigned long long)fs->meta.segment_size);
		return -EFBIG;
	}
	rc = model_has_pages(fs, ino, g);
	if (rc < 0) {
		kv_log(rc == -EAGAIN ? KV_LOG_WARN : KV_LOG_ERR, "geometry of model %s "
		       "not changed: %s", n.name, rc == -ENOTEMPTY ? "it already holds pages "
		       "not all of the new page size (or more than can be checked, or some "
		       "left in the manifest)"
		       : rc == -EAGAIN ? "the index is still loading its layers' pages; retry "
		       "once .kvfs/stats says namespace.loading 0"
		       : "it has layer directories beyond the new layer count");
		return rc;
	}
	n.geo = *g;
	n.attr.ctime_ns = kvfs_now_ns();
	rc = kv_index_update(fs->idx, ino, &n, KV_UPD_GEO | KV_UPD_ATTR);
	if (rc == 0)
		kvfs_commit_put_dir(fs, &n);
	return rc;
}

/*
 * Pin or unpin a sealed page: evicted last for capacity, kept longest in
 * the RAM tier. Stored as the sticky bit of the page's mode, which the
 * manifest keeps anyway (ns_lock held).
 */
static int set_pinned(struct kvfs *fs, uint64_t ino, bool pin, uint32_t caller)
{
	struct kv_node_info n;
	int rc = kv_index_get(fs->idx, ino, &n);

	if (rc < 0)
		return rc;
	if (n.kind != KV_KIND_PAGE)
		return -EPERM;
	if (n.state == KV_PAGE_WRITING)
		return -EBUSY;     /* sealing sets the mode; pin it after close */
	if (!!(n.attr.mode & S_ISVTX) == pin)
		return 0;
	if (pin) {
		uint32_t old_mode = n.attr.mode;

		n.attr.mode |= S_ISVTX;
		if (pin_refused(&n, old_mode, caller))
			return -EPERM;
	}
	n.attr.mode = pin ? n.attr.mode | S_ISVTX : n.attr.mode & ~(uint32_t)S_ISVTX;
	n.attr.ctime_ns = kvfs_now_ns();
	rc = kv_index_update(fs->idx, ino, &n, KV_UPD_ATTR);
	if (rc < 0)
		return rc;
	kvfs_commit_put_page(fs, &n, NULL);
	kvfs_ram_protect(fs, n.extent_id, kvfs_pinned(n.attr.mode));
	KV_LOG_LIMITED(&user_refusals, KV_LOG_INFO, "page %s (inode %llu) %s", n.name,
		       (unsigned long long)ino, pin ? "pinned" : "unpinned");
	return 0;
}

int kvfs_ns_set_geometry(struct kvfs *fs, uint64_t ino, const struct kv_geometry *g)
{
	/* Even while the index loads (a model just made): model_has_pages
	 * refuses a model whose layers are not all loaded yet. */
	int rc = kvfs_changes_damaged(fs);

	if (rc < 0)
		return rc;
	pthread_mutex_lock(&fs->ns_lock);
	rc = set_geometry(fs, ino, g);
	pthread_mutex_unlock(&fs->ns_lock);
	return rc;
}

int kvfs_ns_set_pinned(struct kvfs *fs, uint64_t ino, bool pin, uint32_t caller)
{
	int rc = kvfs_changes_damaged(fs);   /* a mode bit: even while loading */

	if (rc < 0)
		return rc;
	pthread_mutex_lock(&fs->ns_lock);
	rc = set_pinned(fs, ino, pin, caller);
	pthread_mutex_unlock(&fs->ns_lock);
	return rc;
}

/* ---- rename ---- */

/* May node n live under directory np? */
static int check_move(struct kvfs *fs, const struct kv_node_info *n,
		      const struct kv_node_info *np)
{
	uint64_t limit;
	bool exact;
	int rc;

	switch (n->kind) {
	case KV_KIND_PAGE:
		if (np->kind != KV_KIND_LAYER)
			return np->kind == KV_KIND_PAGE ? -ENOTDIR : -EPERM;
		rc = kvfs_page_limit(fs, np->ino, &limit, &exact);
		if (rc < 0)
			return rc;
		/* EXDEV, not EINVAL (which mv reports as "a subdirectory of
		 * itself"): the page cannot live there as it is, and a tool
		 * that falls back to copying gets the size error on its own
		 * write or close, with the source left in place. */
		if (n->state != KV_PAGE_WRITING && exact && n->size != limit) {
			KV_LOG_LIMITED(&user_refusals, KV_LOG_INFO, "rename of page %s refused: %llu "
				       "bytes, the geometry of the target model needs %llu", n->name,
				       (unsigned long long)n->size, (unsigned long long)limit);
			return -EXDEV;
		}
		return 0;
	case KV_KIND_LAYER:
		/* A layer directory's name is its layer number: renaming it
		 * would silently relabel every page in it. */
		KV_LOG_LIMITED(&user_refusals, KV_LOG_INFO, "rename of layer directory %s refused",
			       n->name);
		return -EPERM;
	case KV_KIND_MODEL:
		return np->kind == KV_KIND_ROOT ? 0 : -EPERM;
	default:
		return -EBUSY;
	}
}

/* The replaced target leaves the namespace first, as rename(2) requires. */
static int drop_target(struct kvfs *fs, const struct kv_node_info *n,
		       const struct kv_node_info *d, bool replace)
{
	int rc;

	if (!replace)
		return -EEXIST;
	if (n->kind == KV_KIND_PAGE && d->kind != KV_KIND_PAGE)
		return -EISDIR;
	if (n->kind != KV_KIND_PAGE && d->kind == KV_KIND_PAGE)
		return -ENOTDIR;
	if (d->kind == KV_KIND_PAGE)   /* its delete commits with the move */
		return kvfs_page_forget(fs, d, n->state != KV_PAGE_WRITING,
					KVFS_EV_NONE);   /* the move says replaced */
	if (d->nchildren)
		return -ENOTEMPTY;
	rc = kv_index_remove(fs->idx, d->ino);
	if (rc == 0) {
		kvfs_commit_del_dir(fs, d);
		kvfs_dir_share_give(fs, d->attr.uid);
	}
	return rc;
}

static int do_rename(struct kvfs *fs, uint64_t parent, const char *name,
		     uint64_t newparent, const char *newname, bool replace)
{
	struct kv_node_info n, np, d;
	struct kvfs_event *ev = NULL;
	bool over_sealed = false;
	uint64_t replaced;
	int rc;

	rc = kv_index_lookup(fs->idx, parent, name, &n);
	if (rc == 0)
		rc = kv_index_get(fs->idx, newparent, &np);
	if (rc == 0)
		rc = check_move(fs, &n, &np);
	if (rc < 0)
		return rc;
	rc = kv_index_lookup(fs->idx, newparent, newname, &d);
	if (rc == 0) {
		if (d.ino == n.ino)
			return 0;
		rc = drop_target(fs, &n, &d, replace);
		if (rc < 0)
			return rc;
		over_sealed = d.kind == KV_KIND_PAGE && d.state != KV_PAGE_WRITING;
	}
	/* A sealed page leaves its name (removed) and takes the new one
	 * (stored, or replaced over a sealed page); a page still being
	 * written was never announced: its seal will be, under the new name. */
	if (n.kind == KV_KIND_PAGE && n.state != KV_PAGE_WRITING)
		ev = kvfs_event_capture(fs, KVFS_EV_REMOVED, &n);
	rc = kv_index_move(fs->idx, n.ino, newparent, newname, 0, &replaced);
	if (rc < 0) {
		kvfs_event_free(ev);
		return rc;
	}
	if (kv_index_get(fs->idx, n.ino, &n) == 0) {
		n.attr.ctime_ns = kvfs_now_ns();
		kv_index_update(fs->idx, n.ino, &n, KV_UPD_ATTR);
		if (ev)
			ev->next = kvfs_event_capture(fs, over_sealed ? KVFS_EV_REPLACED
						      : KVFS_EV_STORED, &n);
		queue_change(fs, &n, ev);
	} else {
		kvfs_event_free(ev);
	}
	kvfs_dir_changed(fs, newparent);
	if (parent != newparent) {
		struct kv_node_info old;

		kvfs_dir_changed(fs, parent);
		/* The committer persists the times of the directories its ops
		 * name; the one the page left is named by none. */
		if (kv_index_get(fs->idx, parent, &old) == 0)
			queue_change(fs, &old, NULL);
	}
	return 0;
}

int kvfs_ns_rename(struct kvfs *fs, uint64_t parent, const char *name,
		   uint64_t newparent, const char *newname, bool replace)
{
	int rc = kvfs_check_name(newname);

	/* Both layers (and a layer that moves, or that the move would
	 * replace) are loaded first: the page leaves one, and a page it
	 * replaces leaves the other (load_for_removal). */
	if (rc == 0)
		rc = kvfs_changes_damaged(fs);
	if (rc == 0)
		rc = load_for_removal(fs, parent, NULL);
	if (rc == 0)
		rc = load_for_removal(fs, parent, name);
	if (rc == 0)
		rc = load_for_removal(fs, newparent, NULL);
	if (rc == 0 && replace)
		rc = load_for_removal(fs, newparent, newname);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&fs->ns_lock);
	rc = do_rename(fs, parent, name, newparent, newname, replace);
	pthread_mutex_unlock(&fs->ns_lock);
	return rc;
}
