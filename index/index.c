/*
 * kvfs in-memory index: the namespace (root -> model dirs -> layer dirs ->
 * page files) and the extent table that the daemon serves every lookup,
 * getattr and readdir from, filled from the manifest at mount and then kept
 * in step with it by the daemon. Nodes live in two open-addressing tables
 * (by inode; by parent inode + name) and each directory keeps an intrusive
 * doubly linked list of its children, so add, remove, rename and lookup are
 * O(1) and readdir is O(children). Extents live in a table by id plus a
 * multimap by (hash, length) for dedup. One writer-preferring rwlock guards
 * everything; callers only ever get copies out.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "index_i.h"
#include "kvname.h"

/* ---- hashing and lookup ---- */

uint64_t idx_node_ino_hash(const void *e)
{
	return htab_mix64(((const struct node *)e)->ino);
}

static uint32_t name_hash(uint64_t parent, const char *name, size_t len);

/* Computed again where the table needs it (growth, removal), not kept in
 * the node: 4 bytes less per page, and a node is in the table only while
 * it has a parent. */
uint64_t idx_node_name_hash(const void *e)
{
	const struct node *n = e;
	char name[KV_NAME_MAX + 1];
	size_t len = idx_node_name(n, name);

	return name_hash(n->parent->ino, name, len);
}

static uint32_t name_hash(uint64_t parent, const char *name, size_t len)
{
	return (uint32_t)XXH3_64bits_withSeed(name, len, parent);
}

static struct node *ino_find(const struct kv_index *x, uint64_t ino)
{
	struct htab_probe p;
	struct node *n;

	htab_probe_start(&x->by_ino, htab_mix64(ino), &p);
	while ((n = htab_probe_next(&x->by_ino, &p)))
		if (n->ino == ino)
			return n;
	return NULL;
}

struct node *idx_node(const struct kv_index *x, uint64_t ino)
{
	return ino_find(x, ino);
}

static struct node *name_find(const struct kv_index *x, uint64_t parent,
			      const char *name, size_t len, uint32_t h)
{
	struct htab_probe p;
	struct node *n;

	htab_probe_start(&x->by_name, h, &p);
	while ((n = htab_probe_next(&x->by_name, &p)))
		if (n->parent->ino == parent && idx_node_name_eq(n, name, len))
			return n;
	return NULL;
}

/* ---- nodes ---- */

static enum kv_kind parent_kind(enum kv_kind k)
{
	switch (k) {
	case KV_KIND_MODEL:
		return KV_KIND_ROOT;
	case KV_KIND_LAYER:
		return KV_KIND_MODEL;
	default:
		return KV_KIND_LAYER;
	}
}

static bool is_dir(const struct node *n)
{
	return n->kind != KV_KIND_PAGE;
}

static void set_attr(struct node *n, const struct kv_obj_attr *a)
{
	n->mode = (uint16_t)(a->mode & 07777);
	n->uid = a->uid;
	n->gid = a->gid;
	n->ctime_ns = a->ctime_ns;
	n->mtime_ns = a->mtime_ns;
	__atomic_store_n(&n->atime_ns, a->atime_ns, __ATOMIC_RELAXED);
}

/* A page naming extent id must find it in the table: its location and
 * checksum are read from there. */
static int data_ok(const struct kv_index *x, const struct kv_node_info *in)
{
	return in->extent_id == KV_EXTENT_EMPTY || idx_xent_find(x, in->extent_id)
		? 0 : -ENOENT;
}

/* A page's location and checksum, from its extent record. An empty page
 * (sealed with no bytes) names extent 0 and has the checksum of nothing;
 * one being written has none yet. */
static void page_data_fill(const struct kv_index *x, const struct node *n,
			   struct kv_node_info *o)
{
	const struct xent *e;

	if (n->u.p.extent_id == KV_EXTENT_EMPTY) {
		if (n->state != KV_PAGE_WRITING)
			kv_hash128(NULL, 0, o->hash);
		return;
	}
	e = idx_xent_find(x, n->u.p.extent_id);
	if (e) {       /* kv_index_add and _update refuse a page without it */
		o->ext = idx_xent_ext(e);
		memcpy(o->hash, e->hash, KV_HASH_LEN);
	}
}

static void snapshot(const struct kv_index *x, const struct node *n,
		     struct kv_node_info *o)
{
	memset(o, 0, sizeof(*o));
	o->ino = n->ino;
	o->parent = n->parent ? n->parent->ino : 0;
	o->kind = (enum kv_kind)n->kind;
	idx_node_name(n, o->name);
	o->attr.mode = n->mode;
	o->attr.uid = n->uid;
	o->attr.gid = n->gid;
	o->attr.ctime_ns = n->ctime_ns;
	o->attr.mtime_ns = n->mtime_ns;
	o->attr.atime_ns = __atomic_load_n(&n->atime_ns, __ATOMIC_RELAXED);
	if (n->kind == KV_KIND_PAGE) {
		o->state = (enum kv_page_state)n->state;
		o->size = n->u.p.size;
		o->extent_id = n->u.p.extent_id;
		page_data_fill(x, n, o);
		return;
	}
	/* rows: pages of a layer still in the manifest (residency.c) */
	o->nchildren = n->u.d->nchildren + n->u.d->rows;
	o->layer = n->u.d->layer;
	if (n->u.d->geo)
		o->geo = *n->u.d->geo;
}

void idx_dir_data_free(struct node *n)
{
	if (is_dir(n) && n->u.d) {
		free(n->u.d->geo);
		free(n->u.d);
	}
}

void idx_node_free(struct kv_index *x, struct node *n)
{
	idx_dir_data_free(n);
	slab_free(&x->slab, n, idx_node_bytes(idx_node_name_stored(n)));
}

static struct node *node_new(struct kv_index *x, const struct kv_node_info *in, size_t len)
{
	struct node *n = slab_alloc(&x->slab, idx_node_bytes(idx_name_stored(in->name, len)));

	if (!n)
		return NULL;
	memset(n, 0, offsetof(struct node, name));
	n->prev = n->next = IDX_NIL;
	n->ino = in->ino;
	n->kind = (uint8_t)in->kind;
	set_attr(n, &in->attr);
	idx_node_name_set(n, in->name, len);
	if (in->kind == KV_KIND_PAGE) {
		n->state = (uint8_t)in->state;
		n->u.p.size = in->size;
		n->u.p.extent_id = in->extent_id;
		return n;
	}
	n->u.d = calloc(1, sizeof(*n->u.d));
	if (n->u.d && in->kind == KV_KIND_MODEL) {
		n->u.d->geo = malloc(sizeof(*n->u.d->geo));
		if (n->u.d->geo)
			*n->u.d->geo = in->geo;
	}
	if (!n->u.d || (in->kind == KV_KIND_MODEL && !n->u.d->geo)) {
		idx_node_free(x, n);
		return NULL;
	}
	n->u.d->layer = in->layer;
	return n;
}

static void child_link(struct kv_index *x, struct node *dir, struct node *n)
{
	struct dir_data *d = dir->u.d;

	if (n->kind == KV_KIND_PAGE) {
		idx_trim_note(x, n->u.p.extent_id);
		d->writing += n->state == KV_PAGE_WRITING;
	}
	n->parent = dir;
	n->next = IDX_NIL;
	n->prev = idx_link(x, d->last);
	if (d->last)
		d->last->next = idx_link(x, n);
	else
		d->first = n;
	d->last = n;
	d->nchildren++;
}

static void child_unlink(struct kv_index *x, struct node *n)
{
	struct dir_data *d = n->parent->u.d;
	struct node *prev = idx_prev(x, n), *next = idx_next(x, n);

	if (prev)
		prev->next = n->next;
	else
		d->first = next;
	if (next)
		next->prev = n->prev;
	else
		d->last = prev;
	n->prev = n->next = IDX_NIL;
	d->nchildren--;
	if (n->kind == KV_KIND_PAGE)
		d->writing -= n->state == KV_PAGE_WRITING;
}

static void account(struct kv_index *x, const struct node *n, int sign)
{
	uint64_t d = (uint64_t)(int64_t)sign;   /* +1 or wraps to -1 */

	switch (n->kind) {
	case KV_KIND_MODEL:
		x->st.models += d;
		break;
	case KV_KIND_LAYER:
		x->st.layers += d;
		break;
	case KV_KIND_PAGE:
		x->st.pages += d;
		x->st.page_bytes += d * n->u.p.size;
		if (!n->u.p.size)
			idx_empty_add(x, sign);
		break;
	}
}

/*
 * A model may not hold two layer dirs for one layer number ("1" and "01").
 * The other names of a number are its zero paddings: past a few layers,
 * probing the name table for each width is cheaper than a walk of the
 * model's layers, which made a mkdir cost O(layers) under the lock.
 */
#define LAYER_WALK_MAX 64

static const struct node *layer_of(const struct kv_index *x, const struct node *model,
				   uint32_t num, const struct node *skip1, const struct node *skip2)
{
	char name[KV_NAME_MAX + 1];
	const struct node *c;
	int digits;

	if (model->u.d->nchildren <= LAYER_WALK_MAX) {
		for (c = model->u.d->first; c; c = idx_next(x, c))
			if (c != skip1 && c != skip2 && c->u.d->layer == num)
				return c;
		return NULL;
	}
	digits = snprintf(name, sizeof(name), "%" PRIu32, num);
	memmove(name + KV_NAME_MAX - digits, name, (size_t)digits + 1);
	memset(name, '0', KV_NAME_MAX - digits);
	for (size_t len = (size_t)digits; len <= KV_NAME_MAX; len++) {
		const char *padded = name + KV_NAME_MAX - len;

		c = name_find(x, model->ino, padded, len, name_hash(model->ino, padded, len));
		if (c && c != skip1 && c != skip2)
			return c;
	}
	return NULL;
}

static bool layer_taken(const struct kv_index *x, const struct node *model, uint32_t num,
			const struct node *skip1, const struct node *skip2)
{
	return layer_of(x, model, num, skip1, skip2) != NULL;
}

int kv_index_layer_find(struct kv_index *x, uint64_t model, uint32_t num,
			struct kv_node_info *out)
{
	const struct node *m, *l;
	int rc = -ENOENT;

	pthread_rwlock_rdlock(&x->lock);
	m = ino_find(x, model);
	if (m && m->kind != KV_KIND_MODEL) {
		rc = -ENOTDIR;
	} else if (m && (l = layer_of(x, m, num, NULL, NULL))) {
		snapshot(x, l, out);
		rc = 0;
	}
	pthread_rwlock_unlock(&x->lock);
	return rc;
}

static void node_drop(struct kv_index *x, struct node *n)
{
	htab_remove(&x->by_ino, n);
	htab_remove(&x->by_name, n);
	child_unlink(x, n);
	account(x, n, -1);
	idx_node_free(x, n);
}

void idx_node_unload_locked(struct kv_index *x, struct node *n)
{
	struct dir_data *d = n->parent->u.d;

	idx_rows_atime(d, __atomic_load_n(&n->atime_ns, __ATOMIC_RELAXED));
	d->rows++;
	d->row_bytes += n->u.p.size;
	d->empty_rows += !n->u.p.size;   /* still counted in x->empty_pages */
	x->st.pages_unloaded++;
	htab_remove(&x->by_ino, n);
	htab_remove(&x->by_name, n);
	child_unlink(x, n);
	idx_node_free(x, n);
}

/* Checks of kv_index_add that need no table lookups. */
static int add_args_ok(const struct kv_node_info *in, size_t len)
{
	int rc;

	if (in->kind != KV_KIND_MODEL && in->kind != KV_KIND_LAYER &&
	    in->kind != KV_KIND_PAGE)
		return -EINVAL;
	if (in->ino == 0)
		return -EINVAL;
	rc = kv_name_check_len(in->name, len);
	if (rc < 0)
		return rc;
	if (in->kind == KV_KIND_PAGE && (unsigned)in->state > KV_PAGE_DURABLE)
		return -EINVAL;
	if (in->kind == KV_KIND_MODEL && !memchr(in->geo.dtype, '\0', sizeof(in->geo.dtype)))
		return -EINVAL;
	return 0;
}

int idx_add_locked(struct kv_index *x, const struct kv_node_info *in)
{
	size_t len = strnlen(in->name, sizeof(in->name));
	struct node *parent, *n;
	uint32_t h, num;
	int rc;

	rc = add_args_ok(in, len);
	if (rc < 0)
		return rc;
	parent = ino_find(x, in->parent);
	if (!parent)
		return -ENOENT;
	if (parent->kind != parent_kind(in->kind))
		return -ENOTDIR;
	if (in->kind == KV_KIND_PAGE && (rc = data_ok(x, in)) < 0)
		return rc;
	/* next_ino is above every inode added: no probe for a new one */
	if (in->ino < x->next_ino && ino_find(x, in->ino))
		return -EEXIST;
	h = name_hash(parent->ino, in->name, len);
	if (name_find(x, parent->ino, in->name, len, h))
		return -EEXIST;
	if (in->kind == KV_KIND_LAYER) {
		if (kv_layer_name_parse(in->name, &num) < 0 || num != in->layer)
			return -EINVAL;
		if (layer_taken(x, parent, num, NULL, NULL))
			return -EEXIST;
	}
	/* Reserve first so that nothing below can fail half-way. */
	if ((rc = htab_reserve(&x->by_ino, 1)) || (rc = htab_reserve(&x->by_name, 1)))
		return rc;
	n = node_new(x, in, len);
	if (!n)
		return -ENOMEM;
	child_link(x, parent, n);     /* first: the name table hashes the parent */
	htab_insert(&x->by_ino, n);
	htab_insert(&x->by_name, n);
	account(x, n, +1);
	if (n->ino >= x->next_ino)
		x->next_ino = n->ino + 1;
	return 0;
}

/* ---- public: lifetime ---- */

uint64_t kv_index_next_ino(struct kv_index *x)
{
	uint64_t v;

	pthread_rwlock_wrlock(&x->lock);
	v = x->next_ino++;
	pthread_rwlock_unlock(&x->lock);
	return v;
}

/* ---- public: namespace ---- */

int kv_index_add(struct kv_index *x, const struct kv_node_info *n)
{
	int rc, tries = 0;

	do {
		pthread_rwlock_wrlock(&x->lock);
		rc = n->kind == KV_KIND_PAGE ? idx_layer_unloaded_locked(x, n->parent) : 0;
		if (rc == 0)
			rc = idx_add_locked(x, n);
		pthread_rwlock_unlock(&x->lock);
	} while (rc == -EAGAIN && (rc = idx_change_retry(x, rc, 0, n->parent, &tries)) == 0);
	return rc;
}

/* A page not in RAM may be in a layer that went back to the manifest
 * (unload.c): the kernel still holds its inode. */
int kv_index_get(struct kv_index *x, uint64_t ino, struct kv_node_info *out)
{
	struct node *n;
	int rc;

	for (int tries = 0;; tries++) {
		pthread_rwlock_rdlock(&x->lock);
		n = ino_find(x, ino);
		if (n) {
			if (n->kind == KV_KIND_PAGE)
				idx_layer_used(x, n->parent);
			snapshot(x, n, out);
		}
		pthread_rwlock_unlock(&x->lock);
		if (n)
			return 0;
		if (tries || (rc = idx_reload_by_ino(x, ino)) <= 0)
			return tries ? -ENOENT : rc < 0 ? rc : -ENOENT;
	}
}

int kv_index_lookup(struct kv_index *x, uint64_t parent, const char *name,
		    struct kv_node_info *out)
{
	size_t len = strnlen(name, KV_NAME_MAX + 1);
	uint32_t h;
	struct node *n, *p;
	int rc;

	if (len > KV_NAME_MAX)
		return -ENAMETOOLONG;
	h = name_hash(parent, name, len);
	/* Loaded, then looked up under the lock: a layer may go back to the
	 * manifest in between (unload.c), and a name missing from a layer
	 * not loaded is no answer. */
	for (int tries = 0;; tries++) {
		bool again = false;

		if ((rc = idx_layer_ready(x, parent)) < 0)
			return rc;
		if (x->ready_gap)
			x->ready_gap(x->ready_gap_arg, parent);
		pthread_rwlock_rdlock(&x->lock);
		n = name_find(x, parent, name, len, h);
		if (n) {
			idx_layer_used(x, n->parent);
			snapshot(x, n, out);
		} else if ((p = ino_find(x, parent)) && p->kind == KV_KIND_LAYER) {
			idx_layer_used(x, p);
			again = p->u.d->unloaded;
		}
		pthread_rwlock_unlock(&x->lock);
		if (!again)
			return n ? 0 : -ENOENT;
		if (tries == 2)
			return -EAGAIN;     /* it keeps going back: never a wrong ENOENT */
	}
}

#define KV_UPD_ALL (KV_UPD_ATTR | KV_UPD_SIZE | KV_UPD_STATE | KV_UPD_DATA | \
		    KV_UPD_GEO | KV_UPD_ATIME)
#define KV_UPD_PAGE (KV_UPD_SIZE | KV_UPD_STATE | KV_UPD_DATA)

/*
 * atime alone changes on every read: do it under the read lock. A page's
 * first touch since the last kv_index_touched_walk lists its inode, so the
 * access-time flush visits the pages read, not every page. The time is
 * stored before the flag is tested, and the walk clears the flag before it
 * reads the time: a touch the walk misses finds the flag clear and lists
 * the page again.
 */
static int touch_atime(struct kv_index *x, uint64_t ino, int64_t atime_ns)
{
	struct node *n;
	int rc = -ENOENT;

	pthread_rwlock_rdlock(&x->lock);
	n = ino_find(x, ino);
	if (n) {
		__atomic_store_n(&n->atime_ns, atime_ns, __ATOMIC_SEQ_CST);
		/* Not listed for want of room: the flag stays set (clearing
		 * it here could hide a later touch the next walk has not
		 * read), and the next walk visits every page, clearing each
		 * flag before it reads the time. */
		if (n->kind == KV_KIND_PAGE &&
		    !(__atomic_fetch_or(&n->flags, NODE_ATIME_LISTED, __ATOMIC_SEQ_CST) &
		      NODE_ATIME_LISTED))
			idx_touched_add(x, ino);
		rc = 0;
	}
	pthread_rwlock_unlock(&x->lock);
	return rc;
}

static int update_ok(const struct kv_index *x, const struct node *n,
		     const struct kv_node_info *in, unsigned f)
{
	if ((f & KV_UPD_PAGE) && n->kind != KV_KIND_PAGE)
		return -EISDIR;
	if ((f & KV_UPD_DATA) && data_ok(x, in) < 0)
		return -ENOENT;
	if ((f & KV_UPD_STATE) && (unsigned)in->state > KV_PAGE_DURABLE)
		return -EINVAL;
	if ((f & KV_UPD_GEO) && (n->kind != KV_KIND_MODEL ||
				 !memchr(in->geo.dtype, '\0', sizeof(in->geo.dtype))))
		return -EINVAL;
	return 0;
}

static void update_apply(struct kv_index *x, struct node *n,
			 const struct kv_node_info *in, unsigned f)
{
	if (f & KV_UPD_ATTR)
		set_attr(n, &in->attr);
	if (f & KV_UPD_ATIME)
		__atomic_store_n(&n->atime_ns, in->attr.atime_ns, __ATOMIC_RELAXED);
	if (f & KV_UPD_SIZE) {
		x->st.page_bytes += in->size - n->u.p.size;
		idx_empty_add(x, (int64_t)!in->size - !n->u.p.size);
		n->u.p.size = in->size;
	}
	if (f & KV_UPD_STATE) {
		n->parent->u.d->writing += (uint64_t)(in->state == KV_PAGE_WRITING) -
					   (n->state == KV_PAGE_WRITING);
		n->state = (uint8_t)in->state;
	}
	if (f & KV_UPD_DATA) {
		n->u.p.extent_id = in->extent_id;
		idx_trim_note(x, in->extent_id);
	}
	if (f & KV_UPD_GEO)
		*n->u.d->geo = in->geo;
}

int kv_index_update(struct kv_index *x, uint64_t ino,
		    const struct kv_node_info *in, unsigned fields)
{
	struct node *n;
	int rc, tries = 0;

	if (fields & ~(unsigned)KV_UPD_ALL)
		return -EINVAL;
	if (fields == KV_UPD_ATIME)
		return touch_atime(x, ino, in->attr.atime_ns);
	/* A page's row changes: the layer reloaded before that change is
	 * committed would bring the row back as it was. */
	do {
		pthread_rwlock_wrlock(&x->lock);
		n = ino_find(x, ino);
		rc = n ? update_ok(x, n, in, fields) : -ENOENT;
		if (rc == 0 && n->kind == KV_KIND_PAGE && idx_node_unloaded_locked(x, n))
			rc = -EAGAIN;
		if (rc == 0)
			update_apply(x, n, in, fields);
		pthread_rwlock_unlock(&x->lock);
	} while ((rc == -EAGAIN || rc == -ENOENT) &&
		 (rc = idx_change_retry(x, rc, ino, 0, &tries)) == 0);
	return rc;
}

int kv_index_page_durable(struct kv_index *x, uint64_t ino, uint64_t extent_id)
{
	struct node *n;
	int rc = -ENOENT;

	pthread_rwlock_wrlock(&x->lock);
	n = ino_find(x, ino);
	if (n && n->kind == KV_KIND_PAGE && n->u.p.extent_id == extent_id) {
		n->parent->u.d->writing -= n->state == KV_PAGE_WRITING;
		n->state = KV_PAGE_DURABLE;
		rc = 0;
	}
	pthread_rwlock_unlock(&x->lock);
	return rc;
}

int kv_index_remove(struct kv_index *x, uint64_t ino)
{
	struct node *n;
	int rc, tries = 0;

	do {
		rc = -ENOENT;
		pthread_rwlock_wrlock(&x->lock);
		n = ino_find(x, ino);
		if (n == x->root)
			rc = -EBUSY;
		else if (n && (rc = idx_removable_locked(x, n)) == 0)
			node_drop(x, n);
		pthread_rwlock_unlock(&x->lock);
	} while ((rc == -EAGAIN || rc == -ENOENT) &&
		 (rc = idx_change_retry(x, rc, ino, 0, &tries)) == 0);
	return rc;
}

/* rename(2) rules for moving n onto old, the node holding the target name. */
static int replace_ok(const struct node *n, const struct node *old, int replace)
{
	if (!replace)
		return -EEXIST;
	if (!is_dir(n))
		return is_dir(old) ? -EISDIR : 0;
	if (!is_dir(old))
		return -ENOTDIR;
	return old->u.d->nchildren ? -ENOTEMPTY : 0;
}

/*
 * Move n's header into nn, the allocation for a name of another length, and
 * repoint everything that refers to n by address. n is already out of the
 * name table and its parent's list; its children point up at it.
 */
static struct node *node_regrow(struct kv_index *x, struct node *n, struct node *nn)
{
	struct node *c;

	memcpy(nn, n, offsetof(struct node, name));
	htab_replace(&x->by_ino, n, nn);
	if (is_dir(nn))
		for (c = nn->u.d->first; c; c = idx_next(x, c))
			c->parent = nn;
	slab_free(&x->slab, n, idx_node_bytes(idx_node_name_stored(n)));
	return nn;
}

struct move {
	struct node *n, *dir, *old;
	const char *name;
	size_t len;
	uint32_t h;
	uint32_t layer;
};

/* Everything kv_index_move may refuse, decided before anything changes. */
static int move_check(struct kv_index *x, struct move *mv, uint64_t ino,
		      uint64_t new_parent, int replace)
{
	int rc;

	rc = kv_name_check_len(mv->name, mv->len);
	if (rc < 0)
		return rc;
	mv->n = ino_find(x, ino);
	mv->dir = ino_find(x, new_parent);
	if (!mv->n || !mv->dir)
		return -ENOENT;
	if (mv->n == x->root)
		return -EBUSY;
	if (!is_dir(mv->dir))
		return -ENOTDIR;
	/* The tree has fixed levels: a page may only live in a layer dir... */
	if (mv->dir->kind != parent_kind(mv->n->kind))
		return -EINVAL;
	mv->h = name_hash(mv->dir->ino, mv->name, mv->len);
	mv->old = name_find(x, mv->dir->ino, mv->name, mv->len, mv->h);
	if (mv->old == mv->n)
		return 0;
	if (mv->n->kind == KV_KIND_LAYER) {
		if (kv_layer_name_parse(mv->name, &mv->layer) < 0)
			return -EINVAL;
		if (layer_taken(x, mv->dir, mv->layer, mv->n, mv->old))
			return -EEXIST;
	}
	/* A page in a layer not loaded yet would come back with its layer's
	 * load (a layer moves whole: its rows name it by inode). */
	if (mv->n->kind == KV_KIND_PAGE && idx_node_unloaded_locked(x, mv->n))
		return -EAGAIN;
	if (!mv->old)
		return 0;
	rc = replace_ok(mv->n, mv->old, replace);
	return rc ? rc : idx_removable_locked(x, mv->old);
}

static int move_locked(struct kv_index *x, uint64_t ino, uint64_t new_parent,
		       const char *name, int replace, uint64_t *replaced)
{
	struct move mv = { .name = name, .len = strnlen(name, KV_NAME_MAX + 1) };
	struct node *n, *nn = NULL;
	size_t stored;
	int rc;

	rc = move_check(x, &mv, ino, new_parent, replace);
	if (rc < 0 || mv.old == mv.n)
		return rc;
	/* Another length, another allocation: a node's slab size always
	 * follows from its name (idx_node_free). */
	stored = idx_name_stored(name, mv.len);
	if (stored != idx_node_name_stored(mv.n)) {
		nn = slab_alloc(&x->slab, idx_node_bytes(stored));
		if (!nn)
			return -ENOMEM;
	}
	if (mv.old) {
		*replaced = mv.old->ino;
		node_drop(x, mv.old);
	}
	n = mv.n;
	htab_remove(&x->by_name, n);
	child_unlink(x, n);
	if (nn)
		n = node_regrow(x, n, nn);
	idx_node_name_set(n, name, mv.len);
	if (n->kind == KV_KIND_LAYER)
		n->u.d->layer = mv.layer;
	child_link(x, mv.dir, n);
	/* Cannot fail: the table holds no more entries than before the move. */
	htab_insert(&x->by_name, n);
	return 0;
}

int kv_index_move(struct kv_index *x, uint64_t ino, uint64_t new_parent,
		  const char *new_name, int replace, uint64_t *replaced)
{
	uint64_t dummy, *out = replaced ? replaced : &dummy;
	int rc, tries = 0;

	do {
		*out = 0;
		pthread_rwlock_wrlock(&x->lock);
		rc = idx_layer_unloaded_locked(x, new_parent);   /* only pages go there */
		if (rc == 0)
			rc = move_locked(x, ino, new_parent, new_name, replace, out);
		pthread_rwlock_unlock(&x->lock);
	} while ((rc == -EAGAIN || rc == -ENOENT) &&
		 (rc = idx_change_retry(x, rc, ino, new_parent, &tries)) == 0);
	return rc;
}
