/*
 * Filling an empty index from the manifest at mount, validating every
 * reference on the way: a page's layer and extent must exist and every
 * extent's refcount must equal the pages naming it (KV_ERR_CORRUPT if not).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "index_i.h"

/* ---- loading from the manifest ---- */

/* Turn an add failure for a manifest row into KV_ERR_CORRUPT, logged. */
static int load_fail(int rc, const char *what, uint64_t key, const char *name,
		     uint64_t parent)
{
	const char *why;

	switch (rc) {
	case -ENOMEM:
		return rc;
	case -EEXIST:
		why = "its inode, name or layer number is already taken";
		break;
	case -ENOENT:
		why = "its parent is missing";
		break;
	case -ENOTDIR:
		why = "its parent is of the wrong kind";
		break;
	default:
		why = kv_strerror(rc);
		break;
	}
	kv_log(KV_LOG_ERR, "manifest: %s %" PRIu64 " '%s' (parent %" PRIu64 "): %s",
	       what, key, name, parent, why);
	return KV_ERR_CORRUPT;
}

static int load_model(void *arg, const struct kv_model_rec *r)
{
	struct kv_node_info n = { .ino = r->ino, .parent = KV_ROOT_INO,
				  .kind = KV_KIND_MODEL, .attr = r->attr, .geo = r->geo };
	int rc;

	memcpy(n.name, r->name, sizeof(n.name));
	rc = idx_add_locked(arg, &n);
	return rc ? load_fail(rc, "model", r->ino, r->name, KV_ROOT_INO) : 0;
}

static int load_layer(void *arg, const struct kv_layer_rec *r)
{
	struct kv_node_info n = { .ino = r->ino, .parent = r->model_ino,
				  .kind = KV_KIND_LAYER, .attr = r->attr, .layer = r->layer };
	int rc;

	memcpy(n.name, r->name, sizeof(n.name));
	rc = idx_add_locked(arg, &n);
	return rc ? load_fail(rc, "layer", r->ino, r->name, r->model_ino) : 0;
}

static int load_extent(void *arg, const struct kv_extent_rec *r)
{
	struct xent *e;
	int rc;

	if (r->id == KV_EXTENT_EMPTY) {
		/* Empty pages need no extent in the index (nothing to place,
		 * read or free): the row only keeps the foreign key whole. */
		if (r->ext.length == 0)
			return 0;
		kv_log(KV_LOG_ERR, "manifest: extent 0 (empty pages) has length %" PRIu64,
		       r->ext.length);
		return KV_ERR_CORRUPT;
	}
	rc = idx_xent_put_locked(arg, r, &e);
	if (rc == 0)
		e->durable = true;
	if (rc == -ENOMEM)
		return rc;
	if (rc < 0) {
		kv_log(KV_LOG_ERR, "manifest: extent %" PRIu64 ": invalid (%s)", r->id,
		       kv_strerror(rc));
		return KV_ERR_CORRUPT;
	}
	return 0;
}

static int load_page(void *arg, const struct kv_page_rec *r)
{
	struct kv_index *x = arg;
	struct kv_node_info n = { .ino = r->ino, .parent = r->layer_ino,
				  .kind = KV_KIND_PAGE, .attr = r->attr,
				  .state = KV_PAGE_DURABLE, .size = r->size,
				  .extent_id = r->extent_id };
	struct xent *e = idx_xent_find(x, r->extent_id);
	int rc;

	if (r->extent_id == KV_EXTENT_EMPTY && r->size == 0) {
		kv_hash128(NULL, 0, n.hash);
		memcpy(n.name, r->name, sizeof(n.name));
		rc = idx_add_locked(x, &n);
		return rc ? load_fail(rc, "page", r->ino, r->name, r->layer_ino) : 0;
	}
	if (!e || e->ext.length != r->size) {
		kv_log(KV_LOG_ERR, "manifest: page %" PRIu64 " '%s': extent %" PRIu64 " %s",
		       r->ino, r->name, r->extent_id,
		       e ? "has a different length than the page" : "is missing");
		return KV_ERR_CORRUPT;
	}
	n.ext = e->ext;
	memcpy(n.hash, e->hash, KV_HASH_LEN);
	memcpy(n.name, r->name, sizeof(n.name));
	rc = idx_add_locked(x, &n);
	if (rc)
		return load_fail(rc, "page", r->ino, r->name, r->layer_ino);
	e->seen++;
	return 0;
}

/* Every extent's refcount must equal the pages found referring to it. */
static int load_verify(struct kv_index *x)
{
	struct xent *e;
	size_t i;
	int rc = 0;

	for (i = 0; i <= x->ext_by_id.mask; i++) {
		e = x->ext_by_id.slot[i];
		if (!e)
			continue;
		if (rc == 0 && e->seen != e->refcount) {
			kv_log(KV_LOG_ERR, "manifest: extent %" PRIu64 " has refcount %" PRIu32
			       " but %" PRIu32 " pages refer to it", e->id, e->refcount, e->seen);
			rc = KV_ERR_CORRUPT;
		}
		e->seen = 0;
	}
	return rc;
}

/* Size the tables once for what the manifest holds: growing them row by
 * row rehashes every entry about twice over. */
static int load_counts(void *arg, uint64_t nodes, uint64_t extents)
{
	struct kv_index *x = arg;
	int rc;

	if ((rc = htab_reserve(&x->by_ino, nodes)) ||
	    (rc = htab_reserve(&x->by_name, nodes)) ||
	    (rc = htab_reserve(&x->ext_by_id, extents)) ||
	    (rc = htab_reserve(&x->ext_by_key, extents)))
		return rc;
	return 0;
}

int kv_index_load(struct kv_index *x, struct kv_manifest *m)
{
	static const struct kv_manifest_visitor v = {
		.counts = load_counts, .model = load_model, .layer = load_layer,
		.extent = load_extent, .page = load_page, .sizes_checked = true,
	};
	int rc;

	pthread_rwlock_wrlock(&x->lock);
	if (x->by_ino.n != 1 || x->ext_by_id.n != 0) {
		kv_log(KV_LOG_ERR, "index: load into an index that is not empty");
		rc = -EINVAL;
		goto out;
	}
	/* Holding the write lock across the whole load: nobody can use a
	 * half-loaded index, and each row costs no lock round trip. */
	rc = kv_manifest_load(m, &v, x);
	if (rc == 0)
		rc = load_verify(x);
out:
	pthread_rwlock_unlock(&x->lock);
	return rc;
}
