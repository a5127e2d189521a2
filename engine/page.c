/*
 * Page lifecycle in the daemon: the size a page may have, sealing a page
 * that was written (checksum, extent, write-behind, manifest row), loading a
 * sealed page's payload for readers (RAM copy while the commit is pending,
 * else a checksum-verified read from disk), and forgetting an unlinked or
 * replaced page without freeing bytes someone still reads.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kvfs_i.h"
#include "kvname.h"

/* ---- what durability means to a page (the committer's on_durable) ---- */

/*
 * A page whose payload never became durable: withdraw it from the
 * namespace (commit.c rule 6). Its extent's space goes back with the last
 * reference to it: this page's, or, for a page forgotten before the
 * failure, its skipped delete's (commit.c, frees_withdrawn), or the last
 * page's that shared the extent while it was being written (dedup).
 */
static void withdraw(struct kvfs *fs, struct kvfs_durable *d)
{
	const struct kv_node_info *n = d->node;
	struct kv_node_info cur;
	struct kvfs_live *l;
	uint32_t count = 1;
	bool last = false;
	int rc;

	if (kv_index_get(fs->idx, n->ino, &cur) == 0 && cur.extent_id == n->extent_id) {
		rc = kv_index_remove(fs->idx, n->ino);
		if (rc < 0) {
			/* Its layer was loaded when it was added and a loaded
			 * layer stays so: not expected. The page stays listed
			 * until the next mount, which finds no row for it. */
			kv_log(KV_LOG_ERR, "page %s (inode %llu): withdrawing it after its "
			       "failed write: %s; it stays listed until the next mount",
			       n->name, (unsigned long long)n->ino, kv_strerror(rc));
		} else {
			/* A lookup between the seal and now may have cached it
			 * as sealed, for the entry timeout; under the name it
			 * has now (a rename since the seal queued its own op,
			 * so n holds the old one). */
			kvfs_hook_name_gone(fs, cur.parent, cur.name);
			kvfs_dir_changed(fs, cur.parent);
		}
		last = kv_index_extent_ref(fs->idx, n->extent_id, -1, &count) == 0 &&
		       count == 0;
	}
	l = kvfs_live_find(fs, n->ino);
	if (l)
		kvfs_dirty_give_live(fs, l);
	if (l && l->opens) {
		/* A reader still holds it: the bytes are freed at its last close. */
		l->unlinked = true;
		l->info = *n;
		l->free_on_close |= last;
		kvfs_data_put(l->ram);
		l->ram = NULL;
		return;
	}
	if (l) {
		kvfs_data_put(l->ram);
		l->ram = NULL;
		kvfs_live_maybe_drop(fs, l);
	}
	d->free_extent = last;
}

/* A new page's row is durable: drop its RAM copy, mark it durable, give
 * back its write-back charge. */
static void page_durable(struct kvfs *fs, struct kvfs_durable *d)
{
	const struct kv_node_info *n = d->node;
	struct kvfs_live *l;

	if (d->wrote)     /* written or failed: no longer offered in RAM */
		kvfs_dedup_pending_drop(fs, n);
	if (d->err < 0)
		return withdraw(fs, d);
	/* (gone, or replaced by a newer page: nothing of ours to mark) */
	kv_index_page_durable(fs->idx, n->ino, n->extent_id);
	l = kvfs_live_find(fs, n->ino);
	if (l) {
		/* Just written, likely read soon (a shared prefix's next
		 * request): the payload moves to the RAM tier, no copy. */
		if (d->wrote && l->ram && !l->unlinked)
			kvfs_ram_put(fs, n->extent_id, l->ram, false, KVFS_RAM_WRITTEN);
		kvfs_data_put(l->ram);
		l->ram = NULL;
		kvfs_dirty_give_live(fs, l);
		kvfs_live_maybe_drop(fs, l);
	}
}

/* The rows naming the extent are deleted: it may be reused once no reader
 * holds the page. */
static void extent_unreferenced(struct kvfs *fs, struct kvfs_durable *d)
{
	struct kvfs_live *l = kvfs_live_find(fs, d->node->ino);

	if (l && (l->opens || l->ram)) {
		l->free_on_close = true;
		return;
	}
	d->free_extent = true;
}

int kvfs_page_limit(struct kvfs *fs, uint64_t parent, uint64_t *limit, bool *exact)
{
	struct kv_node_info layer, model;
	uint64_t bytes;
	int rc;

	rc = kv_index_get(fs->idx, parent, &layer);
	if (rc < 0)
		return rc;
	rc = kv_index_get(fs->idx, layer.parent, &model);
	if (rc < 0)
		return rc;
	bytes = kv_geometry_page_bytes(&model.geo);
	*exact = bytes != 0;
	*limit = bytes ? bytes : fs->opts.max_page;
	return 0;
}

/* The size rules a sealed page obeys: exactly the geometry's page size
 * where the model has one (which forbids empty pages), else at most the
 * page size limit. */
static int check_seal_size(struct kvfs *fs, const struct kv_node_info *n,
			   uint64_t size)
{
	static struct kv_log_limit refused_log;   /* any user can make these */
	uint64_t limit;
	bool exact;
	int rc;

	rc = kvfs_page_limit(fs, n->parent, &limit, &exact);
	if (rc < 0)
		return rc;
	if (size == 0 && exact) {
		KV_LOG_LIMITED(&refused_log, KV_LOG_WARN, "page %s: empty page not stored (the model geometry makes "
		       "a page %llu bytes)", n->name, (unsigned long long)limit);
		return -ENODATA;
	}
	if ((exact && size != limit) || size > limit) {
		KV_LOG_LIMITED(&refused_log, KV_LOG_ERR, "page %s: %llu bytes, but %s %llu bytes", n->name,
		       (unsigned long long)size,
		       exact ? "the model geometry makes a page" : "the page size limit is",
		       (unsigned long long)limit);
		return exact ? -EINVAL : -EFBIG;
	}
	return 0;
}

/*
 * A page of size 0 has no extent, yet its name costs a manifest row and
 * index RAM: charged KV_ALIGN of the capacity, as the smallest extent is,
 * one flood of empty files could otherwise grow both without bound while
 * the capacity showed nothing (and eviction, counting bytes, never took
 * them). Every use of the capacity goes through here.
 */
static uint64_t usage_less(struct kvfs *fs, struct kv_store_usage *u, uint64_t own)
{
	uint64_t empty = kv_index_empty_pages(fs->idx);
	uint64_t names = (empty > own ? empty - own : 0) * KV_ALIGN;

	kv_store_usage(fs->store, u);
	u->used += names;
	u->avail -= names < u->avail ? names : u->avail;
	return empty;
}

uint64_t kvfs_store_usage(struct kvfs *fs, struct kv_store_usage *u)
{
	return usage_less(fs, u, 0);
}

/* Space held for pages being written through FUSE is theirs: a page
 * published without a reservation of its own may not take it, or their
 * close would find the store full and lose them (ns_lock held). A page
 * of size 0 needs the block its name is charged. */
static int room_for(struct kvfs *fs, uint64_t size)
{
	struct kv_extent e = { .length = size ? size : 1 };
	struct kv_store_usage u;

	kvfs_store_usage(fs, &u);
	return u.avail >= fs->reserved_bytes + kv_extent_footprint(&e) ? 0 : -ENOSPC;
}

int kvfs_page_name_room(struct kvfs *fs, bool quiet)
{
	static struct kv_log_limit limit;
	int rc = room_for(fs, 0);

	if (rc < 0 && !quiet) {
		kvfs_space_refused(fs);
		KV_LOG_LIMITED(&limit, KV_LOG_ERR, "store full: no room for the 4096-byte "
			       "block a new page's name is charged; the create gets ENOSPC");
	}
	return rc;
}

/*
 * Where a sealed payload lives: the twin extent the plan found, if it is
 * still there (its refcount going up under ns_lock is what makes the
 * sharing real), or a new extent. Sets n's extent, hash and size.
 * respect_reserved: leave the space held for FUSE writers alone (room_for).
 * lone_id: the extent of a page this one replaces. Its delete (refcount
 * - 1) is queued before the new row (+ 1), and the manifest's count may
 * never pass through 0, so that extent is shared only if some third page
 * holds it too; otherwise the payload is written anew.
 */
static enum kvfs_share take_twin(struct kvfs *fs, const struct kvfs_data *d,
				 const struct kvfs_seal_plan *plan, uint64_t lone_id,
				 struct kv_node_info *n)
{
	uint32_t count;

	if (!kvfs_seal_plan_fits(plan, d) || !plan->share.id)
		return KVFS_SHARE_NONE;
	/* A pending twin whose write is durable now, or failed, is no
	 * longer in the table: write a copy (the next page shares it). */
	if (plan->pending && !kvfs_dedup_pending_has(fs, &plan->share))
		return KVFS_SHARE_NONE;
	/* At most one name per block of the payload: every page costs at
	 * least a block of the capacity (kvfs_store_usage), also when dedup
	 * stores it once; 107,000 names of one byte had cost 4 KiB. The page
	 * this one replaces still holds its reference here. */
	if (kv_index_extent_ref(fs->idx, plan->share.id, +1, &count) < 0)
		return KVFS_SHARE_NONE;
	if ((count - (plan->share.id == lone_id) > kvfs_share_names_max(&plan->share.ext) ||
	     (plan->share.id == lone_id && count < 3)) &&
	    kv_index_extent_ref(fs->idx, plan->share.id, -1, NULL) == 0)
		return KVFS_SHARE_NONE;
	n->extent_id = plan->share.id;
	n->ext = plan->share.ext;
	memcpy(n->hash, plan->share.hash, KV_HASH_LEN);
	n->size = d->size;
	return plan->pending ? KVFS_SHARE_PENDING : KVFS_SHARE_DURABLE;
}

static int place_payload(struct kvfs *fs, struct kvfs_data *d,
			 const struct kvfs_seal_plan *plan, uint64_t lone_id,
			 bool respect_reserved, struct kv_node_info *n,
			 enum kvfs_share *share)
{
	static struct kv_log_limit nospace_log;   /* a full store: every writer */
	struct kv_extent_rec er;
	int rc;

	if (d->size == 0) {
		/* Nothing to place: every empty page names KV_EXTENT_EMPTY, as
		 * a share of an extent that is always durable. */
		*share = KVFS_SHARE_DURABLE;
		n->extent_id = KV_EXTENT_EMPTY;
		memset(&n->ext, 0, sizeof(n->ext));
		kv_hash128(NULL, 0, n->hash);
		n->size = 0;
		return 0;
	}
	*share = take_twin(fs, d, plan, lone_id, n);
	if (*share != KVFS_SHARE_NONE)
		return 0;
	rc = respect_reserved ? room_for(fs, d->size) : 0;
	if (rc == 0)
		rc = kv_extent_alloc(fs->store, d->size, &n->ext);
	if (rc == -ENOSPC)
		kvfs_space_refused(fs);
	if (rc < 0) {
		/* A fast-path write (respect_reserved) waits for eviction and
		 * tries again, and its caller gets the final status: not an
		 * error yet. */
		if (rc == -ENOSPC && respect_reserved)
			kv_log(KV_LOG_DEBUG, "page %s: no space for %llu bytes: %s", n->name,
			       (unsigned long long)d->size, kv_strerror(rc));
		else if (rc == -ENOSPC)
			KV_LOG_LIMITED(&nospace_log, KV_LOG_ERR, "page %s: no space for %llu bytes: %s",
				       n->name, (unsigned long long)d->size, kv_strerror(rc));
		else
			kv_log(KV_LOG_ERR, "page %s: no space for %llu bytes: %s", n->name,
			       (unsigned long long)d->size, kv_strerror(rc));
		return rc;
	}
	if (kvfs_seal_plan_fits(plan, d))
		memcpy(n->hash, plan->hash, KV_HASH_LEN);
	else
		kv_hash128(d->bytes, d->size, n->hash);
	/* The write sends the whole footprint: the padding must be zeros, not
	 * whatever a truncate left behind. */
	memset(d->bytes + d->size, 0, kv_extent_footprint(&n->ext) - d->size);
	n->extent_id = kv_index_next_extent_id(fs->idx);
	n->size = d->size;
	er = (struct kv_extent_rec){ .id = n->extent_id, .ext = n->ext, .refcount = 1 };
	memcpy(er.hash, n->hash, KV_HASH_LEN);
	rc = kv_index_extent_put(fs->idx, &er);
	if (rc < 0)
		kv_extent_free(fs->store, &n->ext);
	else
		kvfs_dedup_pending_add(fs, n, d);
	return rc;
}

/* Undo place_payload (the row was never queued; ns_lock still held since,
 * so no page shares a new extent yet). */
static void unplace_payload(struct kvfs *fs, const struct kv_node_info *n,
			    enum kvfs_share share)
{
	uint32_t count = 1;

	if (n->extent_id == KV_EXTENT_EMPTY)
		return;
	kv_index_extent_ref(fs->idx, n->extent_id, -1, &count);
	if (share == KVFS_SHARE_NONE)
		kvfs_dedup_pending_drop(fs, n);
	if (share == KVFS_SHARE_NONE && count == 0)
		kv_extent_free(fs->store, &n->ext);
}

int kvfs_page_seal(struct kvfs *fs, struct kvfs_live *l,
		   const struct kvfs_seal_plan *plan)
{
	struct kvfs_data *d = l->wbuf;
	enum kvfs_share shared;
	struct kv_node_info n;
	int rc;

	rc = kv_index_get(fs->idx, l->ino, &n);
	if (rc == 0)
		rc = check_seal_size(fs, &n, d->size);
	if (rc == 0)
		rc = place_payload(fs, d, plan, 0, false, &n, &shared);
	if (rc < 0)
		return rc;
	/* The seal changes the page's status, not its content or the mode
	 * and times the writer gave it (cp -p, tar x and rsync -a set them
	 * before the close that seals): the bytes are immutable from now on
	 * whatever the mode says (open for writing gets EPERM), and mtime
	 * stays the time of the last write or of the writer's futimens. */
	n.attr.ctime_ns = kvfs_now_ns();
	rc = kvfs_commit_new_page(fs, &n, d, shared, KVFS_EV_STORED, page_durable);
	if (rc < 0) {
		unplace_payload(fs, &n, shared);
		return rc;
	}
	n.state = KV_PAGE_SEALED;
	kv_index_update(fs->idx, l->ino, &n,
			KV_UPD_ATTR | KV_UPD_SIZE | KV_UPD_STATE | KV_UPD_DATA);
	kvfs_page_unreserve(fs, l);   /* the extent now holds the space */
	l->ram = d;          /* readers are served from RAM until durable */
	l->wbuf = NULL;
	l->writing = false;
	kvfs_live_writer_done(fs, l);
	kvfs_dirty_sealed_live(fs, l);
	atomic_fetch_add(&fs->st.pages_sealed, 1);
	atomic_fetch_add(&fs->st.bytes_accepted_fuse, n.size);
	pthread_cond_broadcast(&fs->seal_cv);
	return 0;
}

void kvfs_page_unreserve(struct kvfs *fs, struct kvfs_live *l)
{
	fs->reserved_bytes -= l->reserved;
	l->reserved = 0;
}

static struct kv_log_limit full_log;

/* Refuse growth the store could not hold once sealed (ENOSPC now beats a
 * page lost after close). quiet: the caller will wait and retry, so this
 * is not a refusal yet (no log line, not counted). */
int kvfs_page_reserve(struct kvfs *fs, struct kvfs_live *l, uint64_t new_size,
		      bool quiet)
{
	uint64_t need = (new_size + KV_ALIGN - 1) & ~(uint64_t)(KV_ALIGN - 1);
	struct kv_store_usage u;
	uint64_t grow;

	if (need <= l->reserved)
		return 0;
	grow = need - l->reserved;
	/* A page still empty in the index is charged a block already: its
	 * first bytes take that block over, or a page of up to 4 KiB would
	 * need two (the create's and the write's) in a full store. */
	usage_less(fs, &u, l->wbuf && !l->wbuf->size && !l->unlinked);
	if (u.avail < fs->reserved_bytes + grow) {
		if (quiet)
			return -ENOSPC;
		kvfs_space_refused(fs);
		/* every writer of a full store comes here: rate-limited */
		KV_LOG_LIMITED(&full_log, KV_LOG_ERR, "store full: %llu bytes available, %llu "
			       "pending, page needs %llu more; the write gets ENOSPC",
			       (unsigned long long)u.avail, (unsigned long long)fs->reserved_bytes,
			       (unsigned long long)grow);
		return -ENOSPC;
	}
	fs->reserved_bytes += grow;
	l->reserved = need;
	return 0;
}

int kvfs_page_truncate(struct kvfs *fs, uint64_t ino, uint64_t size)
{
	static struct kv_log_limit truncate_log;
	struct kvfs_live *l = kvfs_live_find(fs, ino);
	struct kv_node_info n;
	uint64_t limit;
	bool exact;
	int rc;

	if (!l || !l->writing || !l->wbuf)
		return -EPERM;
	if (l->write_err)
		return l->write_err;   /* doomed: nothing of it will be stored */
	rc = kvfs_node_get_locked(fs, ino, &n);
	if (rc == 0)
		rc = kvfs_page_limit(fs, n.parent, &limit, &exact);
	if (rc < 0)
		return rc;
	if (size > limit) {
		KV_LOG_LIMITED(&truncate_log, KV_LOG_ERR, "page %s: truncate to %llu bytes refused: "
			       "%s is %llu bytes; the page will not be stored", n.name,
			       (unsigned long long)size, exact ? "the model geometry's page size"
			       : "the page size limit (-o max_page)", (unsigned long long)limit);
		rc = -EFBIG;
	}
	if (rc == 0)
		rc = kvfs_page_reserve(fs, l, size, false);
	if (rc == 0)
		rc = kvfs_data_reserve(l->wbuf, size);
	if (rc < 0)
		return rc;     /* the caller dooms the page (kvfs_page_doom_locked) */
	if (size > l->wbuf->size)    /* what it grows by reads as zeros */
		memset(l->wbuf->bytes + l->wbuf->size, 0, size - l->wbuf->size);
	l->wbuf->size = size;
	n.size = size;
	rc = kvfs_node_put_locked(fs, ino, &n, KV_UPD_SIZE);
	return rc < 0 ? rc : 0;
}

int kvfs_page_forget(struct kvfs *fs, const struct kv_node_info *n, bool with_next,
		     enum kvfs_event_type why)
{
	struct kvfs_live *l = kvfs_live_find(fs, n->ino);
	uint32_t count = 0;
	int rc;

	rc = kv_index_remove(fs->idx, n->ino);
	if (rc < 0)
		return rc;
	kvfs_dir_changed(fs, n->parent);
	if (l) {
		l->unlinked = true;
		l->info = *n;
	}
	if (n->state == KV_PAGE_WRITING)
		return 0;      /* no row and no extent yet; release discards it */
	if (n->extent_id == KV_EXTENT_EMPTY) {
		kvfs_commit_del_page(fs, n, false, true, with_next, why, NULL);
		return 0;
	}
	rc = kv_index_extent_ref(fs->idx, n->extent_id, -1, &count);
	if (rc < 0)
		kv_log(KV_LOG_ERR, "page %s: extent %llu missing from the index",
		       n->name, (unsigned long long)n->extent_id);
	else if (count == 0)
		kvfs_ram_drop(fs, n->extent_id);
	kvfs_commit_del_page(fs, n, rc == 0 && count == 0, rc == 0 && count > 0,
			     with_next, why, rc == 0 && count == 0 ? extent_unreferenced : NULL);
	return 0;
}

/* Access times order eviction; one store per second per page is plenty
 * and keeps readers of a hot page from bouncing its cache line. */
#define TOUCH_GRANULE_NS 1000000000ll

void kvfs_page_touch(struct kvfs *fs, const struct kv_node_info *n)
{
	struct kv_node_info upd;
	int64_t now = kvfs_now_ns();

	if (now - n->attr.atime_ns < TOUCH_GRANULE_NS)
		return;
	upd.attr.atime_ns = now;
	kv_index_update(fs->idx, n->ino, &upd, KV_UPD_ATIME);
}

/* Read a durable page from the SSD, verified, and keep it in the RAM tier. */
static int load_from_disk(struct kvfs *fs, const struct kv_node_info *n,
			  struct kvfs_data **out)
{
	struct kvfs_data *d;
	void *buf;
	int rc;

	rc = kv_store_read_verified(fs->store, &n->ext, n->hash, &buf);
	if (rc == KV_ERR_CHECKSUM)
		atomic_fetch_add(&fs->st.checksum_failures, 1);
	if (rc < 0) {
		kv_log(KV_LOG_ERR, "page %s (inode %llu): read failed: %s",
		       n->name, (unsigned long long)n->ino, kv_strerror(rc));
		return rc;
	}
	d = calloc(1, sizeof(*d));
	if (!d) {
		kv_buf_put(buf, kv_extent_footprint(&n->ext));
		return -ENOMEM;
	}
	d->bytes = buf;
	d->size = n->size;
	d->cap = kv_extent_footprint(&n->ext);
	atomic_init(&d->refs, 1);
	atomic_fetch_add(&fs->st.bytes_read_disk, n->size);
	atomic_fetch_add(&fs->st.pages_read_disk, 1);
	kvfs_ram_put(fs, n->extent_id, d,
		     kvfs_pinned(n->attr.mode), KVFS_RAM_READ);
	*out = d;
	return 0;
}

int kvfs_page_load(struct kvfs *fs, uint64_t ino, struct kvfs_data **out)
{
	struct kv_node_info n;
	struct kvfs_live *l;
	int rc;

	/* A page whose layer went back to the manifest is loaded now, not
	 * under ns_lock (index/unload.c). */
	(void)kv_index_get(fs->idx, ino, &n);
	/* Decide RAM or disk under ns_lock: sealing sets the RAM copy and the
	 * extent together, and the copy is dropped only once the extent is
	 * durable, so a page never appears with an extent not yet written. */
	pthread_mutex_lock(&fs->ns_lock);
	l = kvfs_live_find(fs, ino);
	if (l && l->ram) {
		*out = kvfs_data_get(l->ram);
		pthread_mutex_unlock(&fs->ns_lock);
		atomic_fetch_add(&fs->st.bytes_read_ram, (*out)->size);
		return 0;
	}
	if (l && l->unlinked) {
		n = l->info;
		rc = 0;
	} else {
		rc = kv_index_get(fs->idx, ino, &n);
	}
	pthread_mutex_unlock(&fs->ns_lock);
	if (rc < 0)
		return rc;
	if (n.state == KV_PAGE_WRITING)
		return -EBUSY;
	kvfs_page_touch(fs, &n);
	if (n.extent_id == KV_EXTENT_EMPTY)
		return (*out = kvfs_data_new(0)) ? 0 : -ENOMEM;
	*out = kvfs_ram_get(fs, n.extent_id);
	if (*out) {
		atomic_fetch_add(&fs->st.bytes_read_ram, n.size);
		return 0;
	}
	return load_from_disk(fs, &n, out);
}

/* ---- publishing a page the daemon already holds (fast-path write) ---- */

/* May (layer_ino, name) become a new page? *old gets a page it replaces. */
static int publish_target(struct kvfs *fs, uint64_t layer_ino, const char *name,
			  bool replace, struct kv_node_info *old, bool *has_old,
			  struct kv_obj_attr *attr)
{
	struct kv_node_info layer;
	int rc;

	*has_old = false;
	rc = kv_index_get(fs->idx, layer_ino, &layer);
	if (rc < 0)
		return rc;
	if (layer.kind != KV_KIND_LAYER)
		return -ENOTDIR;
	if (layer.attr.mode & S_ISGID)   /* as a page file's (kvfs_ns_node_init) */
		attr->gid = layer.attr.gid;
	rc = kv_index_lookup(fs->idx, layer_ino, name, old);
	if (rc == -ENOENT)
		return 0;
	if (rc < 0)
		return rc;
	if (old->kind != KV_KIND_PAGE)
		return -EISDIR;
	if (!replace)
		return -EEXIST;
	if (old->state == KV_PAGE_WRITING)
		return -EBUSY;    /* its writer still owns the name */
	*has_old = true;
	return 0;
}

/* The new page is in the index: queue its row, hand it the payload and the
 * dirty charge. Only ENOMEM can fail here. */
static int publish_commit(struct kvfs *fs, struct kvfs_live *l,
			  const struct kv_node_info *n, struct kvfs_data *d,
			  uint64_t charged, enum kvfs_share shared, bool replaces)
{
	int rc = kvfs_commit_new_page(fs, n, d, shared,
				      replaces ? KVFS_EV_REPLACED : KVFS_EV_STORED,
				      page_durable);

	if (rc < 0)
		return rc;
	l->ram = kvfs_data_get(d);
	l->dirty = charged;
	l->dirty_sealed = true;
	/* The fast path took the charge in its caller's share too
	 * (kvfs_dirty_fast_take): it is the page's until durable. */
	l->writer_uid = n->attr.uid;
	l->dirty_fast = charged != 0;
	kvfs_dirty_sealed(fs, charged);
	atomic_fetch_add(&fs->st.pages_sealed, 1);
	atomic_fetch_add(&fs->st.bytes_accepted_fast, n->size);
	return 0;
}

static int publish_locked(struct kvfs *fs, struct kv_node_info *n,
			  struct kvfs_data *d, uint64_t charged, bool replace,
			  const struct kvfs_seal_plan *plan)
{
	struct kv_node_info old;
	struct kvfs_live *l;
	enum kvfs_share shared;
	bool has_old;
	int rc;

	rc = publish_target(fs, n->parent, n->name, replace, &old, &has_old, &n->attr);
	if (rc == 0)
		rc = check_seal_size(fs, n, d->size);
	if (rc == 0)
		rc = place_payload(fs, d, plan, has_old ? old.extent_id : 0, true, n, &shared);
	if (rc < 0)
		return rc;
	n->ino = kv_index_next_ino(fs->idx);
	l = kvfs_live_get(fs, n->ino);
	if (!l) {
		unplace_payload(fs, n, shared);
		return -ENOMEM;
	}
	if (has_old)   /* its delete commits with the new row, as a rename */
		kvfs_page_forget(fs, &old, true, KVFS_EV_NONE);
	rc = kv_index_add(fs->idx, n);
	if (rc == 0) {
		rc = publish_commit(fs, l, n, d, charged, shared, has_old);
		if (rc < 0)
			kv_index_remove(fs->idx, n->ino);
	}
	if (rc < 0) {
		if (has_old) {
			kvfs_commit_pair_abandon(fs);
			kv_log(KV_LOG_ERR, "page %s: replacing it failed (%s) after the "
			       "old page was removed", n->name, kv_strerror(rc));
		}
		unplace_payload(fs, n, shared);
		kvfs_live_maybe_drop(fs, l);
		return rc;
	}
	kvfs_dir_changed(fs, n->parent);
	pthread_cond_broadcast(&fs->seal_cv);
	return 0;
}

int kvfs_page_publish(struct kvfs *fs, uint64_t layer_ino, const char *name,
		      const struct kv_obj_attr *attr, struct kvfs_data *d,
		      uint64_t charged, bool replace, struct kv_node_info *out)
{
	struct kvfs_seal_plan plan;
	struct kv_node_info n;
	int rc = kv_name_check(name);

	if (rc < 0)
		return rc;
	memset(&n, 0, sizeof(n));
	n.parent = layer_ino;
	n.kind = KV_KIND_PAGE;
	n.state = KV_PAGE_SEALED;
	strcpy(n.name, name);
	n.attr = *attr;
	n.attr.mode &= 0444;   /* sealed pages are immutable */
	/* Before ns_lock: a layer the background load has not reached is
	 * read from the manifest now (never under ns_lock: it is I/O). */
	rc = kv_index_layer_load(fs->idx, layer_ino);
	if (rc < 0)
		return rc;
	kvfs_seal_plan_make(fs, kvfs_data_get(d), &plan);
	pthread_mutex_lock(&fs->ns_lock);
	rc = publish_locked(fs, &n, d, charged, replace, &plan);
	pthread_mutex_unlock(&fs->ns_lock);
	kvfs_seal_plan_clear(&plan);
	if (rc == 0 && out)
		*out = n;
	return rc;
}
