/*
 * Fuzz target for the manifest loader: the input is a whole STORE/kvfs.db,
 * opened as the daemon opens a store (engine/core.c: kv_manifest_open,
 * kv_manifest_meta, kv_index_load into a fresh index), then walked with a
 * visitor that checks every row it is handed, then checked as fsck does
 * (kv_manifest_check). Any return code is fine; these are not:
 *   - a crash, a sanitizer report, a leak (libFuzzer's LSan), a hang;
 *   - a file descriptor left open after kv_manifest_close;
 *   - meta that kv_manifest_meta accepts but is out of range;
 *   - a row handed to a visitor with a value index/ promises to refuse (a
 *     bad name, a layer name that does not spell its number, an extent
 *     unaligned or past its segment or stripe, a zero refcount...);
 *   - an index that loaded but is not a well-formed three-level tree of
 *     valid names whose pages match their extents;
 *   - kv_manifest_check calling clean a manifest the mount refuses.
 * Built as a libFuzzer target (clang) and, with KVFS_FUZZ_STANDALONE, as a
 * driver that corrupts a valid manifest built in-process (fuzz_manifest_gen.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "fuzz_manifest.h"
#include "index.h"
#include "kvname.h"

static char store_dir[256];
static char db_path[300];
struct fuzz_manifest_stats fuzz_manifest_stats;

static void quiet(enum kv_log_level lvl, const char *line)
{
	(void)lvl;
	(void)line;
}

static void remove_dir(void)
{
	fuzz_manifest_clear();
	rmdir(store_dir);
}

/* A private store directory on tmpfs when there is one: fsync is free. */
const char *fuzz_manifest_dir(void)
{
	const char *base = getenv("KVFS_FUZZ_TMP");

	if (store_dir[0])
		return store_dir;
	kv_log_set_sink(getenv("KVFS_FUZZ_LOG") ? NULL : quiet);
	if (!base)
		base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(store_dir, sizeof(store_dir), "%s/kvfs-fuzz-manifest-XXXXXX", base);
	if (!mkdtemp(store_dir)) {
		perror(store_dir);
		abort();
	}
	snprintf(db_path, sizeof(db_path), "%s/%s", store_dir, KV_MANIFEST_FILE);
	atexit(remove_dir);
	return store_dir;
}

/* The db and what SQLite may leave beside it (WAL, shared memory, journal). */
void fuzz_manifest_clear(void)
{
	static const char *const sfx[] = { "", "-wal", "-shm", "-journal" };
	char p[320];

	for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++) {
		snprintf(p, sizeof(p), "%s%s", db_path, sfx[i]);
		unlink(p);
	}
}

/* The lowest free descriptor: a leak raises it. */
static int lowest_free_fd(void)
{
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

	require(fd >= 0, "open /dev/null");
	close(fd);
	return fd;
}

static void check_meta(const struct kv_store_meta *m)
{
	require(memchr(m->uuid, '\0', sizeof(m->uuid)) && m->uuid[0], "uuid 1..36 bytes");
	require(m->segment_size >= KV_ALIGN && m->segment_size % KV_ALIGN == 0 &&
		m->segment_size <= INT64_MAX, "segment size");
	require(m->capacity <= INT64_MAX, "capacity");
	require(m->nstripes >= 1 && m->nstripes <= KV_MAX_STRIPES, "stripe count");
	for (unsigned i = 0; i < m->nstripes; i++)
		require(memchr(m->stripes[i], '\0', sizeof(m->stripes[i])) && m->stripes[i][0],
			"stripe path");
}

/* ---- every row a visitor sees must be in range ---- */

struct rows {
	const struct kv_store_meta *meta;   /* NULL if kv_manifest_meta refused */
	unsigned long n;
};

static void check_attr(const struct kv_obj_attr *a)
{
	require(a->mode <= 07777, "mode has type bits");
}

static int row_model(void *arg, const struct kv_model_rec *r)
{
	((struct rows *)arg)->n++;
	require(r->ino >= 1 && r->ino <= INT64_MAX, "model ino");
	require(kv_name_check(r->name) == 0, "model name");
	require(kv_geometry_check(&r->geo) == 0, "model geometry");
	check_attr(&r->attr);
	return 0;
}

static int row_layer(void *arg, const struct kv_layer_rec *r)
{
	uint32_t num;

	((struct rows *)arg)->n++;
	require(r->ino >= 1 && r->model_ino >= 1, "layer ino");
	require(kv_name_check(r->name) == 0, "layer name");
	require(kv_layer_name_parse(r->name, &num) == 0 && num == r->layer,
		"layer name spells its number");
	check_attr(&r->attr);
	return 0;
}

static void check_extent(const struct kv_store_meta *meta, const struct kv_extent *e)
{
	require(e->length >= 1 && e->offset % KV_ALIGN == 0, "extent length, alignment");
	if (!meta)
		return;
	require(e->stripe < meta->nstripes, "extent stripe");
	require(e->offset + kv_extent_footprint(e) <= meta->segment_size,
		"extent past its segment");
}

static int row_extent(void *arg, const struct kv_extent_rec *r)
{
	struct rows *rows = arg;

	rows->n++;
	require(r->id >= 1 && r->id <= INT64_MAX, "extent id");
	require(r->refcount >= 1, "extent refcount");
	check_extent(rows->meta, &r->ext);
	return 0;
}

static int row_page(void *arg, const struct kv_page_rec *r)
{
	((struct rows *)arg)->n++;
	require(r->ino >= 1 && r->layer_ino >= 1 && r->extent_id >= 1, "page keys");
	require(kv_name_check(r->name) == 0, "page name");
	require(r->size <= INT64_MAX, "page size");
	check_attr(&r->attr);
	return 0;
}

/* ---- a loaded index must be a well-formed tree ---- */

struct tree {
	struct kv_index *x;
	const struct kv_store_meta *meta;
	uint64_t models, layers, pages;
};

static void check_node(struct tree *t, const struct kv_dirent *d, enum kv_kind want,
		       uint64_t parent)
{
	struct kv_node_info n;
	uint32_t num;

	require(d->kind == want, "child of the wrong kind");
	require(kv_index_get(t->x, d->ino, &n) == 0, "listed node exists");
	require(n.parent == parent && n.kind == want, "node's parent and kind");
	require(kv_name_check(n.name) == 0 && strcmp(n.name, d->name) == 0, "node name");
	require(n.attr.mode <= 07777, "node mode");
	if (want == KV_KIND_LAYER)
		require(kv_layer_name_parse(n.name, &num) == 0 && num == n.layer,
			"layer node number");
	if (want != KV_KIND_PAGE)
		return;
	require(n.state == KV_PAGE_DURABLE && n.extent_id != 0, "loaded page state");
	require(n.size == n.ext.length, "page size == extent length");
	check_extent(t->meta, &n.ext);
}

static void walk(struct tree *t, uint64_t dir, enum kv_kind want, int depth)
{
	struct kv_dirent *d;
	size_t n;

	require(kv_index_readdir(t->x, dir, &d, &n) == 0, "readdir of a directory");
	for (size_t i = 0; i < n; i++) {
		check_node(t, &d[i], want, dir);
		if (want == KV_KIND_MODEL)
			t->models++;
		else if (want == KV_KIND_LAYER)
			t->layers++;
		else
			t->pages++;
		if (depth < 2)
			walk(t, d[i].ino, want + 1, depth + 1);
	}
	kv_dirents_free(d, n);
}

static void check_tree(struct kv_index *x, const struct kv_store_meta *meta)
{
	struct tree t = { .x = x, .meta = meta };
	struct kv_index_stats st;

	walk(&t, KV_ROOT_INO, KV_KIND_MODEL, 0);
	kv_index_stats(x, &st);
	require(st.models == t.models && st.layers == t.layers && st.pages == t.pages,
		"every node is reachable from the root");
	fuzz_manifest_stats.pages_loaded += t.pages;
}

/* ---- one input ---- */

static int load_index(struct kv_manifest *m, const struct kv_store_meta *meta)
{
	struct kv_index *x;
	int rc;

	if (kv_index_new(&x) < 0)
		return -ENOMEM;
	rc = kv_index_load(x, m);
	if (rc == 0)
		check_tree(x, meta);
	kv_index_free(x);
	return rc;
}

static void run(struct fuzz_manifest_result *res)
{
	static const struct kv_manifest_visitor v = {
		row_model, row_layer, row_extent, row_page, NULL, false,
	};
	struct kv_store_meta *meta = malloc(sizeof(*meta));
	struct rows rows = { 0 };
	struct kv_manifest *m;
	char msg[512];

	require(meta != NULL, "malloc");
	res->open = kv_manifest_open(store_dir, &m);
	if (res->open < 0) {
		require(m == NULL, "failed open leaves no handle");
		free(meta);
		return;
	}
	res->meta = kv_manifest_meta(m, meta);
	if (res->meta == 0) {
		check_meta(meta);
		rows.meta = meta;
	}
	res->load = load_index(m, res->meta == 0 ? meta : NULL);
	res->walk = kv_manifest_load(m, &v, &rows);
	res->check = kv_manifest_check(m, msg, sizeof(msg));
	require(res->check <= 0, "check returns 0 or an error");
	/* fsck must never pass what the mount refuses. */
	if (res->check == 0 && (res->meta || res->load || res->walk))
		fprintf(stderr, "meta %d load %d walk %d, check 0\n", res->meta, res->load,
			res->walk);
	if (res->check == 0)
		require(res->meta == 0 && res->load == 0 && res->walk == 0,
			"kv_manifest_check passes a manifest the mount refuses");
	kv_manifest_close(m);
	free(meta);
}

void fuzz_manifest_run(const uint8_t *data, size_t size, struct fuzz_manifest_result *res)
{
	int fd, fd0;

	fuzz_manifest_dir();
	fuzz_manifest_clear();
	fd = open(db_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	require(fd >= 0, "create kvfs.db");
	require(write(fd, data, size) == (ssize_t)size, "write kvfs.db");
	close(fd);
	memset(res, 0, sizeof(*res));
	res->open = res->meta = res->load = res->walk = res->check = 1;
	fd0 = lowest_free_fd();
	run(res);
	require(lowest_free_fd() == fd0, "a file descriptor leaked");
	fuzz_manifest_clear();
	fuzz_manifest_stats.runs++;
	fuzz_manifest_stats.opened += res->open == 0;
	fuzz_manifest_stats.loaded += res->load == 0;
	fuzz_manifest_stats.checked_clean += res->check == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_manifest_result res;

	fuzz_manifest_run(data, size, &res);
	return 0;
}
