/*
 * Extended attributes: read-only "user.kvfs.*" facts about pages (checksum,
 * extent location, refcount, state) and layers, and model geometry, which
 * is the one attribute that can be set (user.kvfs.geometry, on a model
 * directory whose pages all have its page size, or none: engine/namespace.c).
 * The root has "user.kvfs.stats": the
 * daemon's counters, one "name value" per line.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "metrics.h"
#include "notifier.h"
#include "ops.h"

#define XA_PREFIX "user.kvfs."
#define XA_GEOMETRY XA_PREFIX "geometry"

static const char *const page_xattrs[] = {
	XA_PREFIX "state", XA_PREFIX "checksum", XA_PREFIX "extent",
	XA_PREFIX "segment", XA_PREFIX "refcount", XA_PREFIX "pinned", NULL,
};
static const char *const model_xattrs[] = {
	XA_GEOMETRY, XA_PREFIX "layers", XA_PREFIX "kv_heads", XA_PREFIX "head_dim",
	XA_PREFIX "dtype", XA_PREFIX "page_tokens", XA_PREFIX "page_bytes", NULL,
};
static const char *const layer_xattrs[] = { XA_PREFIX "layer", NULL };
static const char *const root_xattrs[] = { XA_PREFIX "stats", XA_PREFIX "fault", NULL };

/* The daemon's counters: the same snapshot as MOUNT/.kvfs (fuse/metrics.c). */
static int stats_format(struct kvfs *fs, char *out, size_t len)
{
	struct kvfs_metrics m;

	kvfs_metrics_snapshot(fs, &m);
	return kvfs_metrics_lines(&m, out, len);
}

static bool geometry_set(const struct kv_geometry *g)
{
	return g->layers || g->kv_heads || g->head_dim || g->page_tokens;
}

static int page_xattr(struct kvfs *fs, const struct kv_node_info *n,
		      const char *key, char *out, size_t len)
{
	static const char *const states[] = { "writing", "sealed", "durable" };
	struct kv_extent_rec er;

	if (!strcmp(key, "state"))
		return snprintf(out, len, "%s", states[n->state]);
	if (n->state == KV_PAGE_WRITING)
		return -ENODATA;
	if (!strcmp(key, "checksum")) {
		char hex[2 * KV_HASH_LEN + 1];

		kv_hash_hex(n->hash, hex);
		return snprintf(out, len, "xxh3-128:%s", hex);
	}
	if (!strcmp(key, "extent"))
		return snprintf(out, len, "stripe=%u segment=%u offset=%" PRIu64 " length=%" PRIu64,
				n->ext.stripe, n->ext.segment, n->ext.offset, n->ext.length);
	if (!strcmp(key, "segment"))     /* for tools that read extents raw */
		return kv_segment_path(kv_store_stripe_path(fs->store, n->ext.stripe),
				       n->ext.segment, out, len);
	if (!strcmp(key, "pinned"))
		return snprintf(out, len, "%d", (n->attr.mode & S_ISVTX) ? 1 : 0);
	if (!strcmp(key, "refcount")) {
		if (kv_index_extent_get(fs->idx, n->extent_id, &er) < 0)
			return snprintf(out, len, "0");   /* unlinked, still open */
		return snprintf(out, len, "%u", er.refcount);
	}
	return -ENODATA;
}

static int model_xattr(const struct kv_node_info *n, const char *key,
		       char *out, size_t len)
{
	const struct kv_geometry *g = &n->geo;

	if (!geometry_set(g))
		return -ENODATA;
	if (!strcmp(key, "geometry"))
		return kvfs_geometry_format(g, out, len);
	if (!strcmp(key, "layers"))
		return snprintf(out, len, "%u", g->layers);
	if (!strcmp(key, "kv_heads"))
		return snprintf(out, len, "%u", g->kv_heads);
	if (!strcmp(key, "head_dim"))
		return snprintf(out, len, "%u", g->head_dim);
	if (!strcmp(key, "dtype"))
		return snprintf(out, len, "%s", g->dtype);
	if (!strcmp(key, "page_tokens"))
		return snprintf(out, len, "%u", g->page_tokens);
	if (!strcmp(key, "page_bytes"))
		return snprintf(out, len, "%" PRIu64, kv_geometry_page_bytes(g));
	return -ENODATA;
}

/* Value of xattr name on n into out; its length, or -ENODATA. */
static int xattr_value(struct kvfs *fs, const struct kv_node_info *n,
		       const char *name, char *out, size_t len)
{
	const char *key = name + strlen(XA_PREFIX);

	if (strncmp(name, XA_PREFIX, strlen(XA_PREFIX)))
		return -ENODATA;
	switch (n->kind) {
	case KV_KIND_PAGE:
		return page_xattr(fs, n, key, out, len);
	case KV_KIND_MODEL:
		return model_xattr(n, key, out, len);
	case KV_KIND_LAYER:
		if (!strcmp(key, "layer"))
			return snprintf(out, len, "%u", n->layer);
		return -ENODATA;
	case KV_KIND_ROOT:
		if (!strcmp(key, "stats"))
			return stats_format(fs, out, len);
		if (!strcmp(key, "fault"))
			return kvfs_fault_get(fs, out, len);
		return -ENODATA;
	default:
		return -ENODATA;
	}
}

static void reply_value(fuse_req_t req, const char *v, size_t len, size_t size)
{
	if (size == 0)
		fuse_reply_xattr(req, len);
	else if (size < len)
		kvfs_reply_err(req, -ERANGE);
	else
		fuse_reply_buf(req, v, len);
}

void kvfs_op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct kvfs *fs = req_fs(req);
	struct kv_node_info n;
	char v[4096 + 64];
	int rc;

	if (kvfs_ino_virtual(ino))     /* the control directory has none */
		return kvfs_reply_err(req, -ENODATA);
	rc = kvfs_node_get(fs, ino, &n);
	if (rc == 0)
		rc = xattr_value(fs, &n, name, v, sizeof(v));
	if (rc >= (int)sizeof(v))
		rc = -ERANGE;    /* never reply past what was formatted */
	if (rc < 0)
		return kvfs_reply_err(req, rc);
	reply_value(req, v, (size_t)rc, size);
}

void kvfs_op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct kvfs *fs = req_fs(req);
	const char *const *names = NULL;
	struct kv_node_info n;
	char list[512], v[4096 + 64];
	size_t len = 0;
	int rc;

	if (kvfs_ino_virtual(ino))
		return reply_value(req, list, 0, size);
	rc = kvfs_node_get(fs, ino, &n);
	if (rc < 0)
		return kvfs_reply_err(req, rc);
	if (n.kind == KV_KIND_PAGE)
		names = page_xattrs;
	else if (n.kind == KV_KIND_MODEL)
		names = model_xattrs;
	else if (n.kind == KV_KIND_LAYER)
		names = layer_xattrs;
	else if (n.kind == KV_KIND_ROOT)
		names = root_xattrs;
	for (; names && *names; names++) {
		if (xattr_value(fs, &n, *names, v, sizeof(v)) < 0)
			continue;   /* list only what getxattr would return */
		memcpy(list + len, *names, strlen(*names) + 1);
		len += strlen(*names) + 1;
	}
	reply_value(req, list, len, size);
}

static int parse_pin(const char *value, size_t size, bool *pin)
{
	while (size && (value[size - 1] == '\n' || value[size - 1] == '\0'))
		size--;
	if (size != 1 || (value[0] != '0' && value[0] != '1'))
		return -EINVAL;
	*pin = value[0] == '1';
	return 0;
}

static void setxattr_pinned(fuse_req_t req, fuse_ino_t ino, const char *value,
			    size_t size)
{
	struct kvfs *fs = req_fs(req);
	bool pin;
	int rc = parse_pin(value, size, &pin);

	if (rc < 0) {
		static struct kv_log_limit log;   /* any user, at will */

		KV_LOG_LIMITED(&log, KV_LOG_INFO, "user.kvfs.pinned \"%.*s\" refused: use 1 or 0",
			       (int)(size > 20 ? 20 : size), value);
		return kvfs_reply_err(req, rc);
	}
	rc = kvfs_ns_set_pinned(fs, ino, pin, fuse_req_ctx(req)->uid);
	if (rc == 0)   /* the pin is the mode's sticky bit: ls -l shows it now */
		(void)kvfs_notifier_attrs_now(ino);
	kvfs_reply_err(req, rc);
}

/* Only root, only on the mount root, only with -o fault_injection. */
static void setxattr_fault(fuse_req_t req, fuse_ino_t ino, const char *value,
			   size_t size)
{
	if (ino != FUSE_ROOT_ID || fuse_req_ctx(req)->uid != 0)
		return kvfs_reply_err(req, -EPERM);
	kvfs_reply_err(req, kvfs_fault_set(req_fs(req), value, size));
}

void kvfs_op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
		      const char *value, size_t size, int flags)
{
	struct kvfs *fs = req_fs(req);
	struct kv_geometry g;
	int rc;

	(void)flags;
	if (kvfs_ino_virtual(ino))
		return kvfs_reply_err(req, -EPERM);
	if (!strcmp(name, XA_PREFIX "pinned"))
		return setxattr_pinned(req, ino, value, size);
	if (!strcmp(name, XA_PREFIX "fault"))
		return setxattr_fault(req, ino, value, size);
	if (strcmp(name, XA_GEOMETRY))
		return kvfs_reply_err(req, strncmp(name, XA_PREFIX, strlen(XA_PREFIX))
				      ? -ENOTSUP : -EPERM);
	rc = kvfs_geometry_parse(value, size, &g);
	if (rc < 0) {
		static struct kv_log_limit log;   /* any model owner, at will */

		KV_LOG_LIMITED(&log, KV_LOG_INFO, "geometry \"%.*s\" refused: expected layers=N "
			       "kv_heads=N head_dim=N dtype=bf16 page_tokens=N",
			       (int)(size > 200 ? 200 : size), value);
		return kvfs_reply_err(req, rc);
	}
	kvfs_reply_err(req, kvfs_ns_set_geometry(fs, ino, &g));
}

void kvfs_op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	struct kvfs *fs = req_fs(req);
	struct kv_geometry none = { 0 };

	if (kvfs_ino_virtual(ino))
		return kvfs_reply_err(req, -EPERM);
	if (!strcmp(name, XA_PREFIX "pinned"))
		return setxattr_pinned(req, ino, "0", 1);
	if (strcmp(name, XA_GEOMETRY))
		return kvfs_reply_err(req, strncmp(name, XA_PREFIX, strlen(XA_PREFIX))
				      ? -ENODATA : -EPERM);
	kvfs_reply_err(req, kvfs_ns_set_geometry(fs, ino, &none));
}
