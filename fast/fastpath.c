/*
 * The fast path (kvfs_ioctl.h): ioctls on a model directory that register
 * shared memory, look pages up by the batch, read them by the batch
 * straight into that memory, and write them by the batch from it. This
 * file is the FUSE edge and the control side: decoding and validating a
 * call on a private copy of its descriptors, resolving layers, names and
 * handles against the index with the permission checks open(2) would make,
 * and writing per-descriptor results back. The data sides are fastread.c
 * and fastwrite.c.
 *
 * A batch never holds ns_lock or the index lock while it waits for I/O;
 * extents it resolved stay valid through a pin (pin.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "fastpath.h"
#include "kvname.h"

#define GROUPS_MAX 64
_Static_assert(GROUPS_MAX == sizeof(((struct fp_resolver *)0)->groups) / sizeof(gid_t),
	       "groups array");

/* ---- permissions: what the kernel's default_permissions checks ---- */

static bool in_group(struct fp_resolver *rv, gid_t g)
{
	if (g == rv->b->who.gid)
		return true;
	if (rv->ngroups < 0) {
		int n = rv->req->front->groups(rv->req->req, GROUPS_MAX, rv->groups);

		rv->ngroups = n < 0 ? 0 : n > GROUPS_MAX ? GROUPS_MAX : n;
	}
	for (int i = 0; i < rv->ngroups; i++)
		if (rv->groups[i] == g)
			return true;
	return false;
}

/* Root may read and write anything and search any directory (as
 * CAP_DAC_OVERRIDE lets it under default_permissions). */
bool fp_may(struct fp_resolver *rv, const struct kv_obj_attr *at, unsigned mask)
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

/* ---- layers of the model ----
 *
 * Found as descriptors name them (kv_index_layer_find), and kept for the
 * call in a small table by number (misses too). A snapshot of every layer
 * at each call cost a LOOKUP of one page 14 ms in a model a uid had given
 * 76,000 layer directories, against 0.2 ms in one of 32.
 */

static struct fp_layer *layer_slot(struct fp_resolver *rv, uint32_t layer)
{
	/* Fibonacci hashing: the top bits, so that numbers alike in their
	 * low bits (j << 11) still spread. */
	size_t mask = rv->cap - 1;
	size_t i = (size_t)(((uint64_t)layer * 0x9E3779B97F4A7C15ull) >>
			    (64 - __builtin_ctzll(rv->cap)));

	while (rv->layers[i].used && rv->layers[i].layer != layer)
		i = (i + 1) & mask;
	return &rv->layers[i];
}

static int layers_grow(struct fp_resolver *rv)
{
	struct fp_layer *old = rv->layers;
	size_t ocap = rv->cap, cap = ocap ? ocap * 2 : 16;

	rv->layers = calloc(cap, sizeof(*rv->layers));
	if (!rv->layers) {
		rv->layers = old;
		return -ENOMEM;
	}
	rv->cap = cap;
	for (size_t i = 0; i < ocap; i++)
		if (old[i].used)
			*layer_slot(rv, old[i].layer) = old[i];
	free(old);
	rv->last = NULL;
	return 0;
}

int fp_layer_by_num(struct fp_resolver *rv, uint32_t layer, const struct fp_layer **out)
{
	struct kv_node_info n;
	struct fp_layer *s;
	int rc;

	s = rv->last;
	if (!(s && s->layer == layer) && rv->cap)
		s = layer_slot(rv, layer);
	if (!s || !s->used) {
		if ((rv->nlayers + 1) * 4 > rv->cap * 3 && (rc = layers_grow(rv)) < 0)
			return rc;
		rc = kv_index_layer_find(rv->b->fs->idx, rv->model, layer, &n);
		if (rc < 0 && rc != -ENOENT)
			return -kv_errno(rc);
		/* A miss past five digits is not kept: mkdir makes no such
		 * layer, and a call naming 2^20 of them must not grow the
		 * table with them (only a manifest written elsewhere may
		 * hold one, and that one is kept). */
		if (rc == -ENOENT && layer >= KVFS_LAYER_NUMBERS)
			return -ENOENT;
		s = layer_slot(rv, layer);
		*s = (struct fp_layer){ .layer = layer, .used = true, .found = rc == 0 };
		if (s->found) {
			s->ino = n.ino;
			s->attr = n.attr;
			s->search = fp_may(rv, &n.attr, 1);
			s->create = fp_may(rv, &n.attr, 3);
		}
		rv->nlayers++;
	}
	rv->last = s;
	*out = s;
	return s->found ? 0 : -ENOENT;
}

/* The layer of a page found by its handle: -ENOENT if it is another
 * model's. */
static int layer_by_ino(struct fp_resolver *rv, uint64_t ino, const struct fp_layer **out)
{
	struct kv_node_info n;
	int rc;

	if (rv->last && rv->last->found && rv->last->ino == ino) {
		*out = rv->last;
		return 0;
	}
	if (kv_index_get(rv->b->fs->idx, ino, &n) < 0 || n.kind != KV_KIND_LAYER ||
	    n.parent != rv->model)
		return -ENOENT;
	rc = fp_layer_by_num(rv, n.layer, out);
	return rc == 0 && (*out)->ino != ino ? -ENOENT : rc;
}

int fp_resolver_init(struct fp_resolver *rv, struct fp_batch *b, const struct kvfs_fast_req *req,
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
	rv->dirs_ok = fp_may(rv, &root.attr, 1) && fp_may(rv, &m.attr, 1);
	return 0;
}

void fp_resolver_free(struct fp_resolver *rv)
{
	free(rv->layers);
	rv->layers = NULL;
	rv->last = NULL;
	rv->nlayers = rv->cap = 0;
}

/* ---- handles ----
 *
 * A handle is the page's inode number under this mount's count: inode
 * numbers are only unique within a mount (the newest can be reissued after
 * a restart), and a handle must never name a different page.
 */
#define HANDLE_INO_BITS 40
#define HANDLE_INO_MASK ((1ull << HANDLE_INO_BITS) - 1)

uint64_t fp_handle_of(const struct kvfs *fs, uint64_t ino)
{
	if (ino > HANDLE_INO_MASK)
		return 0;    /* 2^40 inodes in one mount */
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

static int32_t resolve_name(struct fp_resolver *rv, const struct kvfs_page_desc *d,
			    const struct fp_layer **le, struct kv_node_info *n)
{
	char name[KVFS_NAME_MAX + 1];
	int rc;

	rc = fp_layer_by_num(rv, d->layer, le);
	if (rc < 0)
		return rc;
	rc = kvfs_region_load(rv->b->r, d->name_off, name, d->name_len);
	if (rc < 0)
		return rc;
	name[d->name_len] = '\0';
	rc = kv_name_check_len(name, d->name_len);
	if (rc < 0)
		return rc;
	if (!(*le)->search)
		return -EACCES;
	rc = kv_index_lookup(rv->b->fs->idx, (*le)->ino, name, n);
	/* A layer that cannot be loaded gives KV_ERR_*: callers get errnos. */
	return rc < 0 ? -kv_errno(rc) : rc;
}

static int32_t resolve_handle(struct fp_resolver *rv, uint64_t handle,
			      const struct fp_layer **le, struct kv_node_info *n)
{
	uint64_t ino = handle_ino(rv->b->fs, handle);
	int rc;

	if (!ino || kv_index_get(rv->b->fs->idx, ino, n) < 0 || n->kind != KV_KIND_PAGE)
		return -ENOENT;
	rc = layer_by_ino(rv, n->parent, le);
	if (rc < 0)
		return rc;     /* ENOENT: another model's page */
	return (*le)->search ? 0 : -EACCES;
}

/* What a descriptor is resolved for. */
enum fp_use { FP_USE_LOOKUP, FP_USE_READ, FP_USE_PREFETCH };

/* Find descriptor i's page as open(2) (read, prefetch) or stat(2)
 * (lookup) would. */
static int32_t resolve(struct fp_resolver *rv, uint32_t i, enum fp_use use,
		       struct kv_node_info *n)
{
	const struct kvfs_page_desc *d = &rv->b->d[i];
	const struct fp_layer *le;
	int32_t rc;

	if (!rv->dirs_ok)
		return -EACCES;
	if (use != FP_USE_LOOKUP && d->handle)
		rc = resolve_handle(rv, d->handle, &le, n);
	else
		rc = resolve_name(rv, d, &le, n);
	if (rc < 0)
		return rc;
	if (use != FP_USE_LOOKUP && !fp_may(rv, &n->attr, 4))
		return -EACCES;
	if (n->state == KV_PAGE_WRITING) {
		/* A page is sealed by its writer's last close, but the kernel
		 * sends the release that seals it after close(2) returns: a
		 * reader right behind the close waits for it, as an open does. */
		rc = kvfs_page_await_seal(rv->b->fs, rv->b->who.uid, n, &rv->seal_deadline_ns);
		if (rc < 0)
			return rc;
		if (use != FP_USE_LOOKUP && !fp_may(rv, &n->attr, 4))
			return -EACCES;   /* sealing set the mode it was created with */
	}
	if (use == FP_USE_READ && d->dst_len < n->size)
		return -ENOBUFS;
	return 0;
}

/* ---- calls ---- */

/* ---- memory the daemon must not fault in (region.h) ---- */

static int check_resident(struct kvfs_region *r, uint64_t off, uint64_t len)
{
	struct kvfs_residency m;
	int rc = kvfs_region_residency(r, off, off + len, &m);
	bool ok = rc == 0 && kvfs_residency_has(&m, off, len);

	kvfs_residency_free(&m);
	return rc < 0 ? rc : ok ? 0 : -EFAULT;
}

/* The ranges a descriptor makes the daemon touch: its name (unless a
 * handle names the page), in r, and its destination or source, in dr. */
static void desc_ranges(const struct kvfs_page_desc *d, enum kvfs_batch_kind kind,
			uint64_t r[2][2])
{
	bool name = kind == KVFS_BATCH_LOOKUP || kind == KVFS_BATCH_WRITE || !d->handle;
	bool data = kind == KVFS_BATCH_READ || kind == KVFS_BATCH_WRITE;

	r[0][0] = name ? d->name_off : 0;
	r[0][1] = name ? d->name_len : 0;
	r[1][0] = data ? d->dst_off : 0;
	r[1][1] = data ? d->dst_len : 0;
}

/* Map the residency of the span that the ranges in mask (bit 0 names,
 * bit 1 data) of every live descriptor cover in region reg. */
static int span_residency(struct fp_batch *b, enum kvfs_batch_kind kind, unsigned mask,
			  struct kvfs_region *reg, struct kvfs_residency *m)
{
	uint64_t lo = UINT64_MAX, hi = 0, r[2][2];

	for (uint32_t i = 0; i < b->a.count; i++) {
		if (b->status[i])
			continue;
		desc_ranges(&b->d[i], kind, r);
		for (int k = 0; k < 2; k++) {
			if (!(mask & 1u << k) || !r[k][1])
				continue;
			lo = r[k][0] < lo ? r[k][0] : lo;
			hi = r[k][0] + r[k][1] > hi ? r[k][0] + r[k][1] : hi;
		}
	}
	return kvfs_region_residency(reg, hi > lo ? lo : 0, hi > lo ? hi : 0, m);
}

/* Descriptors whose memory the engine punched out or never allocated get
 * -EFAULT before anything touches it: one mincore per region (names and
 * data share one when they share the region). */
static int refuse_unpopulated(struct fp_batch *b, enum kvfs_batch_kind kind)
{
	bool one = b->dr == b->r;
	struct kvfs_residency names, data;
	const struct kvfs_residency *dm = one ? &names : &data;
	uint64_t r[2][2];
	int rc = span_residency(b, kind, one ? 3 : 1, b->r, &names);

	if (rc < 0)
		return rc;
	if (!one && (rc = span_residency(b, kind, 2, b->dr, &data)) < 0) {
		kvfs_residency_free(&names);
		return rc;
	}
	for (uint32_t i = 0; i < b->a.count; i++) {
		if (b->status[i])
			continue;
		desc_ranges(&b->d[i], kind, r);
		if (!kvfs_residency_has(&names, r[0][0], r[0][1]) ||
		    !kvfs_residency_has(dm, r[1][0], r[1][1]))
			b->status[i] = -EFAULT;
	}
	kvfs_residency_free(&names);
	if (!one)
		kvfs_residency_free(&data);
	return 0;
}

void fp_batch_free(struct fp_batch *b)
{
	if (b->dr && b->dr != b->r)
		kvfs_region_put(b->fs->regions, b->dr);
	if (b->r)
		kvfs_region_put(b->fs->regions, b->r);
	free(b->d);
	free(b->status);
	free(b->out_flags);
}

int fp_batch_begin(struct fp_batch *b, struct kvfs *fs, const struct kvfs_fast_req *req,
		   const struct kvfs_batch_arg *a, enum kvfs_batch_kind kind)
{
	size_t bytes;
	long bad;
	int rc;

	memset(b, 0, sizeof(*b));
	b->fs = fs;
	b->a = *a;
	b->a.done = b->a.failed = 0;
	b->a.bytes = 0;
	b->who = req->who;
	if (a->abi != KVFS_ABI_VERSION)
		return -EPROTO;
	rc = kvfs_region_get(fs->regions, &b->who, a->region_id, &b->r);
	if (rc == 0)
		rc = kvfs_batch_check_arg(a, b->r->len, kind);
	if (rc < 0)
		return rc;
	b->dr = b->r;
	if (a->flags & KVFS_BATCH_DATA_REGION) {
		/* One region named twice would escape the overlap checks
		 * between destinations, descriptors and names. */
		if (a->data_region_id == a->region_id)
			return -EINVAL;
		b->dr = NULL;
		rc = kvfs_region_get(fs->regions, &b->who, a->data_region_id, &b->dr);
		if (rc < 0)
			return rc;
	}
	bytes = (size_t)a->count * sizeof(*b->d);
	rc = check_resident(b->r, a->desc_off, bytes);
	if (rc < 0)
		return rc;
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
	bad = kvfs_batch_check_descs(a, b->d, b->r->len, b->dr->len, kind, b->status);
	if (bad < 0)
		return (int)bad;
	return refuse_unpopulated(b, kind);
}

/* Write each descriptor's outputs back into the region. */
int fp_batch_finish(struct fp_batch *b, bool with_handles)
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

int fp_lookup(struct kvfs *fs, const struct kvfs_fast_req *req, uint64_t model,
		     struct kvfs_batch_arg *a)
{
	struct fp_batch b;
	struct fp_resolver rv = { 0 };
	struct kv_node_info n;
	uint32_t group, hit = 0;
	bool prefix = true;
	int rc;

	rc = fp_batch_begin(&b, fs, req, a, KVFS_BATCH_LOOKUP);
	if (rc == 0)
		rc = fp_resolver_init(&rv, &b, req, model);
	for (uint32_t i = 0; rc == 0 && i < a->count; i++) {
		if (b.status[i] == 0)
			b.status[i] = resolve(&rv, i, FP_USE_LOOKUP, &n);
		if (b.status[i] == 0 && !fp_handle_of(fs, n.ino))
			b.status[i] = -EOVERFLOW;    /* 2^40 inodes in one mount */
		b.d[i].handle = b.status[i] ? 0 : fp_handle_of(fs, n.ino);
		b.d[i].bytes = b.status[i] ? 0 : n.size;
		b.a.bytes += b.d[i].bytes;
	}
	if (rc == 0)
		rc = fp_batch_finish(&b, true);
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
	fp_resolver_free(&rv);
	fp_batch_free(&b);
	return rc;
}

/* Decide where each page comes from: the RAM copy of a page sealed but
 * not yet durable (its extent may still be unwritten), the RAM tier, or
 * the disk. */
static void plan_page(struct kvfs *fs, const struct kv_node_info *n,
		      struct fp_page *p)
{
	struct kvfs_live *l;
	struct kv_node_info now = *n;

	p->src = FP_DISK;
	p->ino = n->ino;
	p->size = n->size;
	if (n->state != KV_PAGE_DURABLE) {
		pthread_mutex_lock(&fs->ns_lock);
		l = kvfs_live_find(fs, n->ino);
		if (l && l->ram) {
			p->src = FP_RAM;
			p->ram = kvfs_data_get(l->ram);
		} else if (kv_index_get(fs->idx, n->ino, &now) < 0 ||
			   now.state != KV_PAGE_DURABLE) {
			p->src = FP_FAIL;   /* gone meanwhile */
		}
		pthread_mutex_unlock(&fs->ns_lock);
		if (p->src != FP_DISK)
			return;
	}
	p->ext = now.ext;
	p->extent_id = now.extent_id;
	memcpy(p->hash, now.hash, KV_HASH_LEN);
	kvfs_page_touch(fs, &now);
	p->mode = now.attr.mode;
	if (now.extent_id == KV_EXTENT_EMPTY) {    /* no bytes to read */
		p->ram = kvfs_data_new(0);
		p->src = p->ram ? FP_CACHE : FP_FAIL;
		return;
	}
	p->ram = kvfs_ram_get(fs, now.extent_id);
	if (p->ram)
		p->src = FP_CACHE;
}

int fp_read(struct kvfs *fs, const struct kvfs_fast_req *req, uint64_t model,
		   struct kvfs_batch_arg *a)
{
	struct fp_batch b;
	struct fp_resolver rv = { 0 };
	struct kv_node_info n = { .kind = KV_KIND_ROOT };
	struct fp_page *pages = NULL;
	struct kvfs_pin pin;
	uint32_t np = 0;
	int rc;

	rc = fp_batch_begin(&b, fs, req, a, KVFS_BATCH_READ);
	if (rc == 0)
		rc = fp_resolver_init(&rv, &b, req, model);
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
				b.status[i] = resolve(&rv, i, FP_USE_READ, &n);
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
		rc = fp_batch_finish(&b, false);
		b.a.done = b.a.count - b.a.failed;
	}
	if (rc == 0) {
		*a = b.a;
		atomic_fetch_add(&fs->st.fast_batches, 1);
		atomic_fetch_add(&fs->st.fast_pages, a->done);
		atomic_fetch_add(&fs->st.bytes_read_fast, a->bytes);
	}
	free(pages);
	fp_resolver_free(&rv);
	fp_batch_free(&b);
	return rc;
}

/* Queue one resolved page for the RAM tier; out_flags says if it is in
 * RAM already. A page that does not fit is counted, not failed. */
static void prefetch_page(struct kvfs *fs, const struct kv_node_info *n, uint32_t uid,
			  uint32_t *out_flags)
{
	struct kvfs_prefetch_page pg = { .extent_id = n->extent_id, .ext = n->ext,
					 .size = n->size, .uid = uid };
	struct kvfs_live *l;
	bool in_ram = false;

	if (n->state != KV_PAGE_DURABLE) {
		pthread_mutex_lock(&fs->ns_lock);
		l = kvfs_live_find(fs, n->ino);
		in_ram = l && l->ram;
		pthread_mutex_unlock(&fs->ns_lock);
		if (in_ram)
			*out_flags |= KVFS_DESC_RAM;
		/* else: its commit finished meanwhile; the index has its extent */
	}
	if (in_ram)
		return;
	kvfs_page_touch(fs, n);
	if (kvfs_ram_has(fs, n->extent_id)) {
		*out_flags |= KVFS_DESC_CACHED;
		return;
	}
	memcpy(pg.hash, n->hash, KV_HASH_LEN);
	pg.protect = kvfs_pinned(n->attr.mode);
	if (!kvfs_prefetch_queue(fs, &pg))
		kvfs_ram_prefetch_dropped(fs, 1);
}

int fp_prefetch(struct kvfs *fs, const struct kvfs_fast_req *req, uint64_t model,
		       struct kvfs_batch_arg *a)
{
	struct fp_batch b;
	struct fp_resolver rv = { 0 };
	struct kv_node_info n;
	int rc;

	rc = fp_batch_begin(&b, fs, req, a, KVFS_BATCH_PREFETCH);
	if (rc == 0)
		rc = fp_resolver_init(&rv, &b, req, model);
	for (uint32_t i = 0; rc == 0 && i < a->count; i++) {
		if (b.status[i] == 0)
			b.status[i] = resolve(&rv, i, FP_USE_PREFETCH, &n);
		if (b.status[i])
			continue;
		/* Re-read under the index: the page may have become durable
		 * since it was resolved. */
		if (n.state != KV_PAGE_DURABLE)
			kv_index_get(fs->idx, n.ino, &n);
		prefetch_page(fs, &n, b.who.uid, &b.out_flags[i]);
		b.d[i].bytes = n.size;
		b.a.bytes += n.size;
	}
	if (rc == 0)
		rc = fp_batch_finish(&b, false);
	if (rc == 0) {
		b.a.done = b.a.count - b.a.failed;
		*a = b.a;
	}
	fp_resolver_free(&rv);
	fp_batch_free(&b);
	return rc;
}

int fp_region(struct kvfs *fs, const struct kvfs_fast_req *req, unsigned cmd,
		     struct kvfs_region_arg *a)
{
	if (cmd == KVFS_IOC_REGION_REGISTER)
		return kvfs_region_register(fs->regions, &req->who, a);
	if (a->abi != KVFS_ABI_VERSION)
		return -EPROTO;
	return kvfs_region_unregister(fs->regions, &req->who, a->region_id);
}

