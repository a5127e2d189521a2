/*
 * The fast path (kvfs_ioctl.h): ioctls on a model directory that register
 * shared memory, look pages up by the batch, and read them by the batch
 * straight into that memory. This file is the FUSE edge and the control
 * side: decoding and validating a call on a private copy of its
 * descriptors, resolving layers, names and handles against the index with
 * the permission checks open(2) would make, and writing per-descriptor
 * results back. The data side is fastread.c.
 *
 * A batch never holds ns_lock or the index lock while it waits for I/O;
 * extents it resolved stay valid through a pin (pin.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "batch_check.h"
#include "fastpath.h"
#include "kvname.h"
#include "ops.h"

#define GROUPS_MAX 64

struct layer_ent {
	uint32_t layer;
	uint64_t ino;
	bool search;          /* the caller may look names up in it */
};

struct resolver {
	struct fp_batch *b;
	fuse_req_t req;
	bool dirs_ok;         /* search permission on the root and the model */
	uint64_t model;
	struct layer_ent *layers;
	size_t nlayers;
	int ngroups;          /* supplementary groups, -1 until needed */
	gid_t groups[GROUPS_MAX];
};

/* ---- permissions: what the kernel's default_permissions checks ---- */

static bool in_group(struct resolver *rv, gid_t g)
{
	if (g == rv->b->who.gid)
		return true;
	if (rv->ngroups < 0) {
		int n = fuse_req_getgroups(rv->req, GROUPS_MAX, rv->groups);

		rv->ngroups = n < 0 ? 0 : n > GROUPS_MAX ? GROUPS_MAX : n;
	}
	for (int i = 0; i < rv->ngroups; i++)
		if (rv->groups[i] == g)
			return true;
	return false;
}

/* mask: 4 read, 1 search. Root may read anything and search any directory. */
static bool may(struct resolver *rv, const struct kv_obj_attr *at, unsigned mask)
{
	unsigned bits;

	if (rv->b->who.uid == 0)
		return true;
	if (at->uid == rv->b->who.uid)
		bits = at->mode >> 6;
	else if (in_group(rv, at->gid))
		bits = at->mode >> 3;
	else
		bits = at->mode;
	return (bits & mask) == mask;
}

/* ---- layers of the model ---- */

static int layer_cmp(const void *pa, const void *pb)
{
	const struct layer_ent *a = pa, *b = pb;

	return a->layer < b->layer ? -1 : a->layer > b->layer;
}

static int load_layers(struct resolver *rv)
{
	struct kv_dirent *de;
	struct kv_node_info n;
	size_t nde, i;
	int rc = kv_index_readdir(rv->b->fs->idx, rv->model, &de, &nde);

	if (rc < 0)
		return rc;
	rv->layers = calloc(nde ? nde : 1, sizeof(*rv->layers));
	if (!rv->layers) {
		kv_dirents_free(de, nde);
		return -ENOMEM;
	}
	for (i = 0; i < nde; i++) {
		if (kv_index_get(rv->b->fs->idx, de[i].ino, &n) < 0 || n.kind != KV_KIND_LAYER)
			continue;    /* removed since the snapshot */
		rv->layers[rv->nlayers++] = (struct layer_ent){
			.layer = n.layer, .ino = n.ino, .search = may(rv, &n.attr, 1) };
	}
	kv_dirents_free(de, nde);
	qsort(rv->layers, rv->nlayers, sizeof(*rv->layers), layer_cmp);
	return 0;
}

static const struct layer_ent *layer_by_num(struct resolver *rv, uint32_t layer)
{
	struct layer_ent key = { .layer = layer };

	return bsearch(&key, rv->layers, rv->nlayers, sizeof(key), layer_cmp);
}

static const struct layer_ent *layer_by_ino(struct resolver *rv, uint64_t ino)
{
	for (size_t i = 0; i < rv->nlayers; i++)
		if (rv->layers[i].ino == ino)
			return &rv->layers[i];
	return NULL;
}

static int resolver_init(struct resolver *rv, struct fp_batch *b, fuse_req_t req,
			 uint64_t model)
{
	struct kv_node_info root, m;
	int rc;

	memset(rv, 0, sizeof(*rv));
	rv->b = b;
	rv->req = req;
	rv->model = model;
	rv->ngroups = -1;
	rc = kv_index_get(b->fs->idx, KV_ROOT_INO, &root);
	if (rc == 0)
		rc = kv_index_get(b->fs->idx, model, &m);
	if (rc < 0)
		return rc;
	rv->dirs_ok = may(rv, &root.attr, 1) && may(rv, &m.attr, 1);
	return load_layers(rv);
}

/* ---- handles ----
 *
 * A handle is the page's inode number under this mount's count: inode
 * numbers are only unique within a mount (the newest can be reissued after
 * a restart), and a handle must never name a different page.
 */
#define HANDLE_INO_BITS 40
#define HANDLE_INO_MASK ((1ull << HANDLE_INO_BITS) - 1)

static uint64_t handle_of(const struct kvfs *fs, uint64_t ino)
{
	return (uint64_t)(fs->mount_gen & 0xffffff) << HANDLE_INO_BITS | ino;
}

/* The inode a handle names, or 0 if it is from another mount. */
static uint64_t handle_ino(const struct kvfs *fs, uint64_t handle)
{
	if (handle >> HANDLE_INO_BITS != (fs->mount_gen & 0xffffff))
		return 0;
	return handle & HANDLE_INO_MASK;
}

/* ---- one descriptor ---- */

static int32_t resolve_name(struct resolver *rv, const struct kvfs_page_desc *d,
			    const struct layer_ent **le, struct kv_node_info *n)
{
	char name[KVFS_NAME_MAX + 1];
	int rc;

	*le = layer_by_num(rv, d->layer);
	if (!*le)
		return -ENOENT;
	rc = kvfs_region_load(rv->b->r, d->name_off, name, d->name_len);
	if (rc < 0)
		return rc;
	name[d->name_len] = '\0';
	rc = kv_name_check_len(name, d->name_len);
	if (rc < 0)
		return rc;
	if (!(*le)->search)
		return -EACCES;
	return kv_index_lookup(rv->b->fs->idx, (*le)->ino, name, n);
}

static int32_t resolve_handle(struct resolver *rv, uint64_t handle,
			      const struct layer_ent **le, struct kv_node_info *n)
{
	uint64_t ino = handle_ino(rv->b->fs, handle);

	if (!ino || kv_index_get(rv->b->fs->idx, ino, n) < 0 || n->kind != KV_KIND_PAGE)
		return -ENOENT;
	*le = layer_by_ino(rv, n->parent);
	if (!*le)
		return -ENOENT;   /* another model's page */
	return (*le)->search ? 0 : -EACCES;
}

/* Find descriptor i's page as open(2) (read) or stat(2) (lookup) would. */
static int32_t resolve(struct resolver *rv, uint32_t i, bool is_read,
		       struct kv_node_info *n)
{
	const struct kvfs_page_desc *d = &rv->b->d[i];
	const struct layer_ent *le;
	int32_t rc;

	if (!rv->dirs_ok)
		return -EACCES;
	if (is_read && d->handle)
		rc = resolve_handle(rv, d->handle, &le, n);
	else
		rc = resolve_name(rv, d, &le, n);
	if (rc < 0)
		return rc;
	if (is_read && !may(rv, &n->attr, 4))
		return -EACCES;
	if (n->state == KV_PAGE_WRITING)
		return -EBUSY;
	if (is_read && d->dst_len < n->size)
		return -ENOBUFS;
	return 0;
}

/* ---- calls ---- */

static void caller_of(fuse_req_t req, struct kvfs_caller *c)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);

	c->uid = ctx->uid;
	c->gid = ctx->gid;
	c->tid = ctx->pid;
}

static void batch_free(struct fp_batch *b)
{
	if (b->r)
		kvfs_region_put(b->fs->regions, b->r);
	free(b->d);
	free(b->status);
	free(b->out_flags);
}

/* Decode and validate a READ or LOOKUP call into b. */
static int batch_begin(struct fp_batch *b, struct kvfs *fs, fuse_req_t req,
		       const struct kvfs_batch_arg *a, bool is_read)
{
	size_t bytes;
	long bad;
	int rc;

	memset(b, 0, sizeof(*b));
	b->fs = fs;
	b->a = *a;
	b->a.done = b->a.failed = 0;
	b->a.bytes = 0;
	caller_of(req, &b->who);
	if (a->abi != KVFS_ABI_VERSION)
		return -EPROTO;
	rc = kvfs_region_get(fs->regions, &b->who, a->region_id, &b->r);
	if (rc == 0)
		rc = kvfs_batch_check_arg(a, b->r->len, is_read);
	if (rc < 0)
		return rc;
	bytes = (size_t)a->count * sizeof(*b->d);
	b->d = malloc(bytes);
	b->status = calloc(a->count, sizeof(*b->status));
	b->out_flags = calloc(a->count, sizeof(*b->out_flags));
	if (!b->d || !b->status || !b->out_flags)
		return -ENOMEM;
	/* Validate and use a private copy: the engine can rewrite the
	 * region at any moment. */
	rc = kvfs_region_load(b->r, a->desc_off, b->d, bytes);
	if (rc < 0)
		return rc;
	for (uint32_t i = 0; i < a->count; i++)
		b->d[i].bytes = 0;     /* an output: ignore what the engine left */
	bad = kvfs_batch_check_descs(a, b->d, b->r->len, is_read, b->status);
	return bad < 0 ? (int)bad : 0;
}

/* Write each descriptor's outputs back into the region. */
static int batch_finish(struct fp_batch *b, bool with_handles)
{
	struct out {
		int32_t status;
		uint32_t out_flags;
		uint64_t bytes;
	} o;
	uint64_t base;
	int rc = 0;

	_Static_assert(offsetof(struct kvfs_page_desc, out_flags) ==
		       offsetof(struct kvfs_page_desc, status) + 4, "desc layout");
	_Static_assert(offsetof(struct kvfs_page_desc, bytes) ==
		       offsetof(struct kvfs_page_desc, status) + 8, "desc layout");
	b->a.done = b->a.failed = 0;
	for (uint32_t i = 0; i < b->a.count && rc == 0; i++) {
		base = b->a.desc_off + (uint64_t)i * sizeof(*b->d);
		o = (struct out){ b->status[i], b->out_flags[i],
				  b->status[i] && b->status[i] != -ENOBUFS ? 0 : b->d[i].bytes };
		b->a.failed += b->status[i] != 0;
		rc = kvfs_region_store(b->r, base + offsetof(struct kvfs_page_desc, status),
				       &o, sizeof(o));
		if (rc == 0 && with_handles)
			rc = kvfs_region_store(b->r, base, &b->d[i].handle,
					       sizeof(b->d[i].handle));
	}
	return rc;
}

static int do_lookup(struct kvfs *fs, fuse_req_t req, uint64_t model,
		     struct kvfs_batch_arg *a)
{
	struct fp_batch b;
	struct resolver rv = { 0 };
	struct kv_node_info n;
	uint32_t group, hit = 0;
	bool prefix = true;
	int rc;

	rc = batch_begin(&b, fs, req, a, false);
	if (rc == 0)
		rc = resolver_init(&rv, &b, req, model);
	for (uint32_t i = 0; rc == 0 && i < a->count; i++) {
		if (b.status[i] == 0)
			b.status[i] = resolve(&rv, i, false, &n);
		if (b.status[i] == 0 && n.ino > HANDLE_INO_MASK)
			b.status[i] = -EOVERFLOW;    /* 2^40 inodes in one mount */
		b.d[i].handle = b.status[i] ? 0 : handle_of(fs, n.ino);
		b.d[i].bytes = b.status[i] ? 0 : n.size;
		b.a.bytes += b.d[i].bytes;
	}
	if (rc == 0)
		rc = batch_finish(&b, true);
	/* The hit length: leading blocks whose every descriptor exists. */
	group = a->group > 1 ? a->group : 1;
	for (uint32_t blk = 0; rc == 0 && prefix && blk < a->count / group; blk++) {
		for (uint32_t j = 0; j < group && prefix; j++)
			prefix = b.status[blk * group + j] == 0;
		hit += prefix;
	}
	b.a.done = hit;
	if (rc == 0)
		*a = b.a;
	free(rv.layers);
	batch_free(&b);
	return rc;
}

/* Decide where each page comes from: disk, or the RAM copy of a page
 * sealed but not yet durable (its extent may still be unwritten). */
static void plan_page(struct kvfs *fs, const struct kv_node_info *n,
		      struct fp_page *p)
{
	struct kvfs_live *l;
	struct kv_node_info now;

	p->src = FP_DISK;
	p->ino = n->ino;
	p->size = n->size;
	p->ext = n->ext;
	memcpy(p->hash, n->hash, KV_HASH_LEN);
	if (n->state == KV_PAGE_DURABLE)
		return;
	pthread_mutex_lock(&fs->ns_lock);
	l = kvfs_live_find(fs, n->ino);
	if (l && l->ram) {
		p->src = FP_RAM;
		p->ram = kvfs_data_get(l->ram);
	} else if (kv_index_get(fs->idx, n->ino, &now) == 0 &&
		   now.state == KV_PAGE_DURABLE) {
		p->ext = now.ext;
	} else {
		p->src = FP_FAIL;   /* gone meanwhile */
	}
	pthread_mutex_unlock(&fs->ns_lock);
}

static int do_read(struct kvfs *fs, fuse_req_t req, uint64_t model,
		   struct kvfs_batch_arg *a)
{
	struct fp_batch b;
	struct resolver rv = { 0 };
	struct kv_node_info n = { .kind = KV_KIND_ROOT };
	struct fp_page *pages = NULL;
	struct kvfs_pin pin;
	uint32_t np = 0;
	int rc;

	rc = batch_begin(&b, fs, req, a, true);
	if (rc == 0)
		rc = resolver_init(&rv, &b, req, model);
	if (rc == 0) {
		pages = calloc(a->count, sizeof(*pages));
		rc = pages ? 0 : -ENOMEM;
	}
	if (rc == 0) {
		/* Pin before resolving: what we resolve cannot be freed
		 * until we are done reading it. */
		kvfs_pin_begin(fs, &pin);
		for (uint32_t i = 0; i < a->count; i++) {
			n.kind = KV_KIND_ROOT;
			if (b.status[i] == 0)
				b.status[i] = resolve(&rv, i, true, &n);
			if (b.status[i] == -ENOBUFS && n.kind == KV_KIND_PAGE)
				b.d[i].bytes = n.size;    /* tell the engine what fits */
			if (b.status[i])
				continue;
			pages[np].idx = i;
			plan_page(fs, &n, &pages[np]);
			if (pages[np].src == FP_FAIL) {
				b.status[i] = -ENOENT;
				continue;
			}
			b.d[i].bytes = n.size;
			np++;
		}
		kvfs_fast_read_pages(&b, pages, np);
		kvfs_pin_end(fs, &pin);
		rc = batch_finish(&b, false);
		b.a.done = b.a.count - b.a.failed;
	}
	if (rc == 0) {
		*a = b.a;
		atomic_fetch_add(&fs->st.fast_batches, 1);
		atomic_fetch_add(&fs->st.fast_pages, a->done);
		atomic_fetch_add(&fs->st.bytes_read_fast, a->bytes);
	}
	free(pages);
	free(rv.layers);
	batch_free(&b);
	return rc;
}

static int do_region(struct kvfs *fs, fuse_req_t req, unsigned cmd,
		     struct kvfs_region_arg *a)
{
	struct kvfs_caller who;

	caller_of(req, &who);
	if (cmd == KVFS_IOC_REGION_REGISTER)
		return kvfs_region_register(fs->regions, &who, a);
	if (a->abi != KVFS_ABI_VERSION)
		return -EPROTO;
	return kvfs_region_unregister(fs->regions, &who, a->region_id);
}

static const char *cmd_name(unsigned cmd)
{
	switch (cmd) {
	case KVFS_IOC_REGION_REGISTER: return "REGION_REGISTER";
	case KVFS_IOC_REGION_UNREGISTER: return "REGION_UNREGISTER";
	case KVFS_IOC_READ: return "READ";
	case KVFS_IOC_LOOKUP: return "LOOKUP";
	}
	return "unknown";
}

/* A refused call is logged once, saying which call, who and why; an
 * unknown region id is routine (clients probe with it) and stays quiet. */
static void log_refusal(fuse_req_t req, unsigned cmd, int rc)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);

	kv_log(rc == -ENOENT ? KV_LOG_DEBUG : KV_LOG_WARN,
	       "fast path: %s from pid %d (uid %u) refused: %s", cmd_name(cmd),
	       (int)ctx->pid, (unsigned)ctx->uid, kv_strerror(rc));
}

void kvfs_op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
		   struct fuse_file_info *fi, unsigned flags, const void *in_buf,
		   size_t in_bufsz, size_t out_bufsz)
{
	struct kvfs *fs = req_fs(req);
	struct kv_node_info n;
	union {
		struct kvfs_region_arg r;
		struct kvfs_batch_arg b;
	} u;
	size_t sz;
	int rc;

	(void)arg; (void)fi; (void)flags;
	/* Only model directories speak this ABI; the size is part of cmd. */
	if (kv_index_get(fs->idx, ino, &n) < 0 || n.kind != KV_KIND_MODEL)
		return kvfs_reply_err(req, -ENOTTY);
	switch (cmd) {
	case KVFS_IOC_REGION_REGISTER:
	case KVFS_IOC_REGION_UNREGISTER:
		sz = sizeof(u.r);
		break;
	case KVFS_IOC_READ:
	case KVFS_IOC_LOOKUP:
		sz = sizeof(u.b);
		break;
	default:
		return kvfs_reply_err(req, -ENOTTY);
	}
	if (in_bufsz != sz)
		return kvfs_reply_err(req, -EINVAL);
	memcpy(&u, in_buf, sz);
	if (cmd == KVFS_IOC_READ)
		rc = do_read(fs, req, ino, &u.b);
	else if (cmd == KVFS_IOC_LOOKUP)
		rc = do_lookup(fs, req, ino, &u.b);
	else
		rc = do_region(fs, req, cmd, &u.r);
	if (rc < 0) {
		log_refusal(req, cmd, rc);
		return kvfs_reply_err(req, rc);
	}
	fuse_reply_ioctl(req, 0, &u, out_bufsz < sz ? out_bufsz : sz);
}
