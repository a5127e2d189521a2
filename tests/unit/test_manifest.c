/*
 * Unit tests for index/manifest.c and index/geometry.c: creating and
 * reopening a manifest, identity and version checks, group-commit puts and
 * deletes, validation of rows on load, kv_manifest_check, and the geometry
 * helpers. Damaged manifests are made by editing kvfs.db with raw SQL.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "manifest.h"

/* ---- fixtures ---- */

static char logbuf[16384];

static void capture(enum kv_log_level lvl, const char *line)
{
	size_t used = strlen(logbuf);

	(void)lvl;
	snprintf(logbuf + used, sizeof(logbuf) - used, "%s\n", line);
}

static bool logged(const char *s)
{
	return strstr(logbuf, s) != NULL;
}

static int rm_entry(const char *p, const struct stat *sb, int type, struct FTW *f)
{
	(void)sb;
	(void)type;
	(void)f;
	return remove(p);
}

struct fx {
	char dir[64];
	char db[128];
	struct kv_store_meta *meta;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	strcpy(f->dir, "/tmp/kvfs-test-manifest-XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->db, sizeof(f->db), "%s/%s", f->dir, KV_MANIFEST_FILE);
	f->meta = calloc(1, sizeof(*f->meta));
	if (!f->meta)
		return -1;
	strcpy(f->meta->uuid, "0123abcd-89ab-4def-8123-456789abcdef");
	f->meta->segment_size = 1ull << 30;
	f->meta->capacity = 10ull << 30;
	f->meta->created_ns = 1234567890123456789ll;
	f->meta->nstripes = 2;
	strcpy(f->meta->stripes[0], "/srv/ssd0/kv");
	strcpy(f->meta->stripes[1], "/srv/ssd1/kv");
	logbuf[0] = '\0';
	kv_log_set_sink(capture);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	nftw(f->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(f->meta);
	free(f);
	kv_log_set_sink(NULL);
	return 0;
}

/* Edit kvfs.db behind the manifest's back (foreign keys off, as any tool). */
static void raw_sql(const struct fx *f, const char *sql)
{
	sqlite3 *db;
	char *err = NULL;

	assert_int_equal(sqlite3_open(f->db, &db), SQLITE_OK);
	assert_int_equal(kv_manifest_register_sql(db), SQLITE_OK);
	if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK)
		fail_msg("raw sql '%s': %s", sql, err);
	sqlite3_close(db);
}

static struct kv_manifest *create_open(const struct fx *f)
{
	struct kv_manifest *m = NULL;

	assert_int_equal(kv_manifest_create(f->dir, f->meta), 0);
	assert_int_equal(kv_manifest_open(f->dir, &m), 0);
	assert_non_null(m);
	return m;
}

static struct kv_obj_attr attr(uint32_t mode)
{
	return (struct kv_obj_attr){ .mode = mode, .uid = 1000, .gid = 100,
				     .ctime_ns = 11, .mtime_ns = 22, .atime_ns = -33 };
}

static struct kv_model_rec model(uint64_t ino, const char *name)
{
	struct kv_model_rec r = { .ino = ino, .attr = attr(0755) };

	snprintf(r.name, sizeof(r.name), "%s", name);
	return r;
}

static struct kv_layer_rec layer(uint64_t ino, uint64_t model_ino, uint32_t num)
{
	struct kv_layer_rec r = { .ino = ino, .model_ino = model_ino, .layer = num,
				  .attr = attr(0755) };

	snprintf(r.name, sizeof(r.name), "%02u", num);
	return r;
}

static struct kv_extent_rec extent(uint64_t id, uint32_t stripe, uint64_t offset,
				   uint64_t length, uint32_t refcount)
{
	struct kv_extent_rec r = { .id = id, .refcount = refcount,
				   .ext = { .stripe = stripe, .segment = 3,
					    .offset = offset, .length = length } };
	unsigned i;

	for (i = 0; i < KV_HASH_LEN; i++)
		r.hash[i] = (uint8_t)(id * 16 + i);
	return r;
}

static struct kv_page_rec page(uint64_t ino, uint64_t layer_ino, const char *name,
			       uint64_t extent_id, uint64_t size)
{
	struct kv_page_rec r = { .ino = ino, .layer_ino = layer_ino,
				 .extent_id = extent_id, .size = size, .attr = attr(0444) };

	snprintf(r.name, sizeof(r.name), "%s", name);
	return r;
}

/* One model, one layer, two extents, three pages (two share extent 2). */
static void fill(struct kv_manifest *m)
{
	struct kv_model_rec mo = model(2, "llama3-8b");
	struct kv_layer_rec la = layer(3, 2, 0);
	struct kv_extent_rec e1 = extent(1, 0, 0, 65536, 1);
	struct kv_extent_rec e2 = extent(2, 1, 8192, 5000, 2);
	struct kv_page_rec p1 = page(10, 3, "3fa9c2e1", 1, 65536);
	struct kv_page_rec p2 = page(11, 3, "aa", 2, 5000);
	struct kv_page_rec p3 = page(12, 3, "bb", 2, 5000);

	mo.geo = (struct kv_geometry){ .layers = 32, .kv_heads = 8, .head_dim = 128,
				       .page_tokens = 16, .dtype = "bf16" };
	assert_int_equal(kv_manifest_begin(m), 0);
	assert_int_equal(kv_manifest_put_model(m, &mo), 0);
	assert_int_equal(kv_manifest_put_layer(m, &la), 0);
	assert_int_equal(kv_manifest_put_extent(m, &e1), 0);
	assert_int_equal(kv_manifest_put_extent(m, &e2), 0);
	assert_int_equal(kv_manifest_put_page(m, &p1), 0);
	assert_int_equal(kv_manifest_put_page(m, &p2), 0);
	assert_int_equal(kv_manifest_put_page(m, &p3), 0);
	assert_int_equal(kv_manifest_commit(m), 0);
}

/* A visitor that records what it saw, in order. */
struct seen {
	char order[64];
	size_t n;
	struct kv_model_rec model;
	struct kv_layer_rec layer;
	struct kv_extent_rec extents[4];
	struct kv_page_rec pages[4];
	size_t nmodels, nlayers, nextents, npages;
};

static void seen_push(struct seen *s, char c)
{
	if (s->n + 1 < sizeof(s->order))
		s->order[s->n++] = c;
}

static int v_model(void *arg, const struct kv_model_rec *r)
{
	struct seen *s = arg;

	seen_push(s, 'm');
	s->model = *r;
	s->nmodels++;
	return 0;
}

static int v_layer(void *arg, const struct kv_layer_rec *r)
{
	struct seen *s = arg;

	seen_push(s, 'l');
	s->layer = *r;
	s->nlayers++;
	return 0;
}

static int v_extent(void *arg, const struct kv_extent_rec *r)
{
	struct seen *s = arg;

	seen_push(s, 'e');
	if (s->nextents < 4)
		s->extents[s->nextents] = *r;
	s->nextents++;
	return 0;
}

static int v_page(void *arg, const struct kv_page_rec *r)
{
	struct seen *s = arg;

	seen_push(s, 'p');
	if (s->npages < 4)
		s->pages[s->npages] = *r;
	s->npages++;
	return 0;
}

static const struct kv_manifest_visitor visitor = {
	.model = v_model, .layer = v_layer, .extent = v_extent, .page = v_page,
};

/* ---- create / open ---- */

static void test_create_reopen_meta(void **state)
{
	struct fx *f = *state;
	struct kv_store_meta *got = calloc(1, sizeof(*got));
	struct kv_manifest *m = create_open(f);

	assert_non_null(got);
	kv_manifest_close(m);
	assert_int_equal(kv_manifest_open(f->dir, &m), 0);
	assert_int_equal(kv_manifest_meta(m, got), 0);
	assert_string_equal(got->uuid, f->meta->uuid);
	assert_int_equal(got->segment_size, f->meta->segment_size);
	assert_int_equal(got->capacity, f->meta->capacity);
	assert_int_equal(got->created_ns, f->meta->created_ns);
	assert_int_equal(got->nstripes, 2);
	assert_string_equal(got->stripes[0], "/srv/ssd0/kv");
	assert_string_equal(got->stripes[1], "/srv/ssd1/kv");
	kv_manifest_close(m);
	free(got);
}

/* Each mount is counted durably; the count survives a reopen. */
static void test_mount_generation(void **state)
{
	struct fx *f = *state;
	struct kv_manifest *m = create_open(f);
	char msg[256];
	uint32_t gen = 0;

	assert_int_equal(kv_manifest_bump_mount(m, &gen), 0);
	assert_int_equal(gen, 1);
	assert_int_equal(kv_manifest_bump_mount(m, &gen), 0);
	assert_int_equal(gen, 2);
	kv_manifest_close(m);
	assert_int_equal(kv_manifest_open(f->dir, &m), 0);
	assert_int_equal(kv_manifest_bump_mount(m, &gen), 0);
	assert_int_equal(gen, 3);
	assert_int_equal(kv_manifest_begin(m), 0);
	assert_int_equal(kv_manifest_bump_mount(m, &gen), -EINVAL);
	kv_manifest_rollback(m);
	assert_int_equal(kv_manifest_check(m, msg, sizeof(msg)), 0);
	kv_manifest_close(m);
}

static void test_create_twice(void **state)
{
	struct fx *f = *state;
	struct kv_manifest *m = NULL;

	assert_int_equal(kv_manifest_create(f->dir, f->meta), 0);
	assert_int_equal(kv_manifest_create(f->dir, f->meta), -EEXIST);
	/* The refused second create must not have damaged the first. */
	assert_int_equal(kv_manifest_open(f->dir, &m), 0);
	kv_manifest_close(m);
}

static void test_create_bad_meta(void **state)
{
	struct fx *f = *state;

	f->meta->nstripes = 0;
	assert_int_equal(kv_manifest_create(f->dir, f->meta), -EINVAL);
	f->meta->nstripes = 1;
	f->meta->segment_size = 1000;   /* not 4 KiB aligned */
	assert_int_equal(kv_manifest_create(f->dir, f->meta), -EINVAL);
	assert_int_equal(access(f->db, F_OK), -1);
}

static void test_open_missing(void **state)
{
	struct fx *f = *state;
	struct kv_manifest *m = (void *)1;

	assert_int_equal(kv_manifest_open(f->dir, &m), -ENOENT);
	assert_null(m);
}

static void test_schema_newer(void **state)
{
	struct fx *f = *state;
	struct kv_manifest *m = create_open(f);

	kv_manifest_close(m);
	raw_sql(f, "UPDATE meta SET value = 3 WHERE key = 'schema_version';");
	logbuf[0] = '\0';
	assert_int_equal(kv_manifest_open(f->dir, &m), KV_ERR_SCHEMA);
	assert_true(logged("has schema version 3; this kvfs supports up to 2: upgrade kvfs"));

	/* user_version alone being newer is refused too. */
	raw_sql(f, "UPDATE meta SET value = 2 WHERE key = 'schema_version';"
		   "PRAGMA user_version = 7;");
	assert_int_equal(kv_manifest_open(f->dir, &m), KV_ERR_SCHEMA);
	assert_true(logged("schema version 7"));
}

static void test_garbage_file(void **state)
{
	struct fx *f = *state;
	struct kv_manifest *m = NULL;
	char junk[8192];
	int fd;

	memset(junk, 'x', sizeof(junk));
	memcpy(junk, "this is not a database", 22);
	fd = open(f->db, O_WRONLY | O_CREAT | O_EXCL, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	close(fd);
	assert_int_equal(kv_manifest_open(f->dir, &m), KV_ERR_CORRUPT);
	assert_null(m);
}

static void test_not_kvfs(void **state)
{
	struct fx *f = *state;
	struct kv_manifest *m = NULL;

	raw_sql(f, "CREATE TABLE notes (x);");
	assert_int_equal(kv_manifest_open(f->dir, &m), KV_ERR_NOTSTORE);
	raw_sql(f, "CREATE TABLE meta (key TEXT PRIMARY KEY, value NOT NULL);"
		   "INSERT INTO meta VALUES ('format', 'other');");
	assert_int_equal(kv_manifest_open(f->dir, &m), KV_ERR_NOTSTORE);
	assert_null(m);
}

/* ---- puts, deletes, transactions ---- */

static void test_roundtrip(void **state)
{
	struct fx *f = *state;
	struct kv_manifest *m = create_open(f);
	struct seen s = { 0 };

	fill(m);
	kv_manifest_close(m);
	assert_int_equal(kv_manifest_open(f->dir, &m), 0);
	assert_int_equal(kv_manifest_load(m, &visitor, &s), 0);
	assert_string_equal(s.order, "mleeppp");
	assert_int_equal(s.model.ino, 2);
	assert_string_equal(s.model.name, "llama3-8b");
	assert_int_equal(s.model.attr.mode, 0755);
	assert_int_equal(s.model.attr.uid, 1000);
	assert_int_equal(s.model.attr.atime_ns, -33);
	assert_int_equal(s.model.geo.page_tokens, 16);
	assert_string_equal(s.model.geo.dtype, "bf16");
	assert_int_equal(s.layer.model_ino, 2);
	assert_string_equal(s.layer.name, "00");
	assert_int_equal(s.extents[1].id, 2);
	assert_int_equal(s.extents[1].ext.stripe, 1);
	assert_int_equal(s.extents[1].ext.segment, 3);
	assert_int_equal(s.extents[1].ext.offset, 8192);
	assert_int_equal(s.extents[1].ext.length, 5000);
	assert_int_equal(s.extents[1].refcount, 2);
	assert_int_equal(s.extents[1].hash[15], 2 * 16 + 15);
	assert_string_equal(s.pages[0].name, "3fa9c2e1");
	assert_int_equal(s.pages[2].extent_id, 2);
	assert_int_equal(s.pages[2].size, 5000);
	assert_int_equal(s.pages[2].attr.mode, 0444);

	/* Unlink one sharer, then the other with its extent, in one batch. */
	struct kv_extent_rec e2 = extent(2, 1, 8192, 5000, 1);

	assert_int_equal(kv_manifest_begin(m), 0);
	assert_int_equal(kv_manifest_del_page(m, 11), 0);
	assert_int_equal(kv_manifest_put_extent(m, &e2), 0);
	assert_int_equal(kv_manifest_del_page(m, 12), 0);
	assert_int_equal(kv_manifest_del_extent(m, 2), 0);
	assert_int_equal(kv_manifest_commit(m), 0);
	memset(&s, 0, sizeof(s));
	assert_int_equal(kv_manifest_load(m, &visitor, &s), 0);
	assert_string_equal(s.order, "mlep");

	char msg[256];

	assert_int_equal(kv_manifest_check(m, msg, sizeof(msg)), 0);
	kv_manifest_close(m);
}

/* Dedup changes refcounts in place; never to 0 (the row goes instead). */
static void test_ref_extent(void **state)
{
	struct fx *f = *state;
	struct kv_manifest *m = create_open(f);
	struct seen s = { 0 };
	char msg[256];

	fill(m);     /* extent 2 has refcount 2 */
	assert_int_equal(kv_manifest_ref_extent(m, 2, +1), 0);
	assert_int_equal(kv_manifest_check(m, msg, sizeof(msg)), KV_ERR_CORRUPT);
	assert_int_equal(kv_manifest_ref_extent(m, 2, -1), 0);
	assert_int_equal(kv_manifest_check(m, msg, sizeof(msg)), 0);
	assert_int_equal(kv_manifest_ref_extent(m, 2, -2), -ENOENT);
	assert_int_equal(kv_manifest_ref_extent(m, 77, +1), -ENOENT);
	assert_int_equal(kv_manifest_ref_extent(m, 2, 0), -EINVAL);

	/* One sharer leaves, in a transaction: the other still counts. */
	assert_int_equal(kv_manifest_begin(m), 0);
	assert_int_equal(kv_manifest_del_page(m, 11), 0);
	assert_int_equal(kv_manifest_ref_extent(m, 2, -1), 0);
	assert_int_equal(kv_manifest_commit(m), 0);
	assert_int_equal(kv_manifest_load(m, &visitor, &s), 0);
	assert_int_equal(s.extents[1].refcount, 1);
	assert_int_equal(kv_manifest_check(m, msg, sizeof(msg)), 0);
	kv_manifest_close(m);
}

static void test_upsert_updates(void **state)
{
	struct fx *f = *state;
	struct kv_manifest *m = create_open(f);
	struct kv_model_rec mo = model(2, "a");
	struct seen s = { 0 };

	assert_int_equal(kv_manifest_put_model(m, &mo), 0);   /* autocommit */
	strcpy(mo.name, "b");
	mo.attr.mode = 0700;
	assert_int_equal(kv_manifest_put_model(m, &mo), 0);
	assert_int_equal(kv_manifest_load(m, &visitor, &s), 0);
	assert_int_equal(s.nmodels, 1);
	assert_string_equal(s.model.name, "b");
	assert_int_equal(s.model.attr.mode, 0700);
	kv_manifest_close(m);
}

static void test_rollback(void **state)
{
	struct fx *f = *state;
	struct kv_manifest *m = create_open(f);
	struct kv_model_rec mo = model(2, "gone");
	struct seen s = { 0 };

	assert_int_equal(kv_manifest_begin(m), 0);
	assert_int_equal(kv_manifest_begin(m), -EINVAL);
	assert_int_equal(kv_manifest_put_model(m, &mo), 0);
	kv_manifest_rollback(m);
	kv_manifest_rollback(m);   /* harmless twice */
	assert_int_equal(kv_manifest_commit(m), -EINVAL);
	assert_int_equal(kv_manifest_load(m, &visitor, &s), 0);
	assert_int_equal(s.n, 0);
	kv_manifest_close(m);
}

/* The fault seam: a failed commit rolls back (nothing of the transaction
 * is visible), a failed row change changes nothing, COUNT repeats, and
 * everything works again afterwards. */
static void test_fault_seam(void **state)
{
	struct fx *f = *state;
	struct kv_manifest *m = create_open(f);
	struct kv_model_rec a = model(2, "a"), b = model(3, "b"), c = model(4, "c");
	struct seen s = { 0 };

	kv_manifest_fault_arm(m, KV_MF_FAULT_COMMIT, 1, -EIO, 2);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(kv_manifest_begin(m), 0);
		assert_int_equal(kv_manifest_put_model(m, &a), 0);   /* not a commit */
		assert_int_equal(kv_manifest_commit(m), -EIO);
	}
	assert_int_equal(kv_manifest_load(m, &visitor, &s), 0);
	assert_int_equal(s.n, 0);
	kv_manifest_fault_arm(m, KV_MF_FAULT_WRITE, 2, -ENOSPC, 0);
	assert_int_equal(kv_manifest_begin(m), 0);
	assert_int_equal(kv_manifest_put_model(m, &a), 0);
	assert_int_equal(kv_manifest_put_model(m, &b), -ENOSPC);
	assert_int_equal(kv_manifest_put_model(m, &c), 0);        /* fired once */
	assert_int_equal(kv_manifest_commit(m), 0);
	memset(&s, 0, sizeof(s));
	assert_int_equal(kv_manifest_load(m, &visitor, &s), 0);
	assert_int_equal(s.n, 2);                                 /* a and c */
	kv_manifest_fault_arm(m, KV_MF_FAULT_COMMIT, 1, -EIO, 0);
	kv_manifest_fault_arm(m, 0, 0, 0, 0);                     /* disarmed */
	assert_int_equal(kv_manifest_put_model(m, &b), 0);
	kv_manifest_close(m);
}

static void test_unique_conflicts(void **state)
{
	struct fx *f = *state;
	struct kv_manifest *m = create_open(f);
	struct kv_model_rec mo = model(20, "llama3-8b");
	struct kv_layer_rec la = layer(21, 2, 0);
	struct kv_layer_rec la1 = layer(22, 2, 1);
	struct kv_page_rec pg = page(30, 3, "aa", 1, 65536);
	struct seen s = { 0 };

	fill(m);
	assert_int_equal(kv_manifest_put_model(m, &mo), -EEXIST);      /* name */
	assert_int_equal(kv_manifest_put_layer(m, &la), -EEXIST);      /* (model, layer) */
	strcpy(la1.name, "1");
	assert_int_equal(kv_manifest_put_layer(m, &la1), 0);
	la1.ino = 23;
	strcpy(la1.name, "01");
	assert_int_equal(kv_manifest_put_layer(m, &la1), -EEXIST);     /* same number */
	assert_int_equal(kv_manifest_put_page(m, &pg), -EEXIST);       /* (layer, name) */
	/* The refused page must not have displaced the one holding the name. */
	assert_int_equal(kv_manifest_load(m, &visitor, &s), 0);
	assert_int_equal(s.npages, 3);
	assert_int_equal(s.pages[1].ino, 11);
	kv_manifest_close(m);
}

static void test_references(void **state)
{
	struct fx *f = *state;
	struct kv_manifest *m = create_open(f);
	struct kv_page_rec orphan = page(40, 99, "x", 1, 65536);
	struct kv_layer_rec misnamed = layer(41, 2, 5);

	fill(m);
	assert_int_equal(kv_manifest_put_page(m, &orphan), -EINVAL);   /* no layer 99 */
	assert_int_equal(kv_manifest_del_extent(m, 2), -ENOTEMPTY);    /* pages use it */
	assert_int_equal(kv_manifest_del_layer(m, 3), -ENOTEMPTY);
	assert_int_equal(kv_manifest_del_page(m, 999), -ENOENT);
	assert_int_equal(kv_manifest_del_model(m, 999), -ENOENT);
	strcpy(misnamed.name, "6");
	assert_int_equal(kv_manifest_put_layer(m, &misnamed), -EINVAL);
	strcpy(misnamed.name, "a/b");
	assert_int_equal(kv_manifest_put_layer(m, &misnamed), -EINVAL);
	kv_manifest_close(m);
}

/* ---- load validation ---- */

static void test_load_bad_hash(void **state)
{
	struct fx *f = *state;
	struct kv_manifest *m = create_open(f);
	struct seen s = { 0 };

	fill(m);
	kv_manifest_close(m);
	raw_sql(f, "UPDATE extents SET hash = zeroblob(15) WHERE id = 2;");
	assert_int_equal(kv_manifest_open(f->dir, &m), 0);
	logbuf[0] = '\0';
	assert_int_equal(kv_manifest_load(m, &visitor, &s), KV_ERR_CORRUPT);
	assert_true(logged("table extents, id 2: column hash"));
	kv_manifest_close(m);
}

static void test_load_negative_size(void **state)
{
	struct fx *f = *state;
	struct kv_manifest *m = create_open(f);
	struct seen s = { 0 };

	fill(m);
	kv_manifest_close(m);
	raw_sql(f, "UPDATE pages SET size = -1 WHERE ino = 12;");
	assert_int_equal(kv_manifest_open(f->dir, &m), 0);
	logbuf[0] = '\0';
	assert_int_equal(kv_manifest_load(m, &visitor, &s), KV_ERR_CORRUPT);
	assert_true(logged("table pages, ino 12: column size"));
	assert_int_equal(s.npages, 2);   /* the walk stopped at the bad row */
	kv_manifest_close(m);
}

static void test_load_bad_rows(void **state)
{
	static const char *const edits[] = {
		"UPDATE extents SET \"offset\" = 100 WHERE id = 1;",
		"UPDATE extents SET refcount = 0 WHERE id = 1;",
		"UPDATE extents SET stripe = 7 WHERE id = 1;",
		"UPDATE pages SET size = 4096 WHERE ino = 10;",
		"UPDATE pages SET name = '' WHERE ino = 10;",
		"UPDATE pages SET name = 'a/b' WHERE ino = 10;",
		"UPDATE pages SET name = printf('%.300c', 'x') WHERE ino = 10;",
		"UPDATE pages SET mode = 'rw' WHERE ino = 10;",
		"UPDATE layers SET name = '07' WHERE ino = 3;",
		"UPDATE models SET head_dim = 0 WHERE ino = 2;",
	};
	struct fx *f = *state;
	struct kv_manifest *m;
	size_t i;

	for (i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
		struct seen s = { 0 };

		unlink(f->db);
		m = create_open(f);
		fill(m);
		kv_manifest_close(m);
		raw_sql(f, edits[i]);
		assert_int_equal(kv_manifest_open(f->dir, &m), 0);
		if (kv_manifest_load(m, &visitor, &s) != KV_ERR_CORRUPT)
			fail_msg("load accepted: %s", edits[i]);
		kv_manifest_close(m);
	}
}

/* ---- check ---- */

static void test_check(void **state)
{
	struct fx *f = *state;
	struct kv_manifest *m = create_open(f);
	char msg[512];

	fill(m);
	assert_int_equal(kv_manifest_check(m, msg, sizeof(msg)), 0);
	kv_manifest_close(m);

	raw_sql(f, "UPDATE extents SET refcount = 3 WHERE id = 2;");
	assert_int_equal(kv_manifest_open(f->dir, &m), 0);
	assert_int_equal(kv_manifest_check(m, msg, sizeof(msg)), KV_ERR_CORRUPT);
	assert_non_null(strstr(msg, "id 2: refcount 3 but 2 pages"));
	kv_manifest_close(m);

	/* Extent 3 starts inside extent 1's 64 KiB (same stripe and segment). */
	raw_sql(f, "UPDATE extents SET refcount = 2 WHERE id = 2;"
		   "INSERT INTO extents VALUES (3, 0, 3, 61440, 4096, zeroblob(16), 1);"
		   "INSERT INTO pages VALUES (13, 3, 'cc', 3, 4096, 292, 0, 0, 0, 0, 0, "
		   "kvfs_ident_page(13, 3, 'cc', 3, 4096));");
	assert_int_equal(kv_manifest_open(f->dir, &m), 0);
	assert_int_equal(kv_manifest_check(m, msg, sizeof(msg)), KV_ERR_CORRUPT);
	assert_non_null(strstr(msg, "extents 1 and 3 overlap"));
	kv_manifest_close(m);

	/* A page naming an extent that does not exist. */
	raw_sql(f, "DELETE FROM pages WHERE ino = 13; DELETE FROM extents WHERE id = 3;"
		   "INSERT INTO pages VALUES (14, 3, 'dd', 77, 4096, 292, 0, 0, 0, 0, 0, "
		   "kvfs_ident_page(14, 3, 'dd', 77, 4096));");
	assert_int_equal(kv_manifest_open(f->dir, &m), 0);
	assert_int_equal(kv_manifest_check(m, msg, sizeof(msg)), KV_ERR_CORRUPT);
	assert_non_null(strstr(msg, "pages"));
	assert_non_null(strstr(msg, "missing"));
	kv_manifest_close(m);
}

/* Two daemons on one store hand out the same inode numbers: fsck renumbers. */
static void count_report(void *arg, const char *line)
{
	(void)line;
	++*(int *)arg;
}

static void test_renumber(void **state)
{
	struct fx *f = *state;
	struct kv_manifest *m = create_open(f);
	struct seen s = { .n = 0 };
	char msg[512];
	int lines = 0;

	fill(m);
	kv_manifest_close(m);
	/* Page 12 takes the layer's number 3 (and a valid identity for it);
	 * a second layer takes page 10's. */
	raw_sql(f, "PRAGMA foreign_keys = OFF;"
		   "UPDATE pages SET ino = 3 WHERE ino = 12;"
		   "UPDATE pages SET ident = kvfs_ident_page(ino, layer_ino, name, extent_id, "
		   "size) WHERE ino = 3;"
		   "INSERT INTO layers VALUES (10, 2, 1, '01', 493, 0, 0, 0, 0, 0, "
		   "kvfs_ident_layer(10, 2, 1, '01'));");
	assert_int_equal(kv_manifest_open(f->dir, &m), 0);
	assert_int_equal(kv_manifest_check(m, msg, sizeof(msg)), KV_ERR_CORRUPT);
	assert_non_null(strstr(msg, "is held by 2 rows"));
	assert_int_equal(kv_manifest_check_inodes(m, false, count_report, &lines), 2);
	assert_int_equal(lines, 2);
	lines = 0;
	assert_int_equal(kv_manifest_check_inodes(m, true, count_report, &lines), 2);
	assert_int_equal(lines, 2);
	assert_int_equal(kv_manifest_check(m, msg, sizeof(msg)), 0);
	assert_int_equal(kv_manifest_check_inodes(m, false, count_report, &lines), 0);
	assert_int_equal(kv_manifest_load(m, &visitor, &s), 0);
	/* All pages and layers are kept; pages yield their numbers to layers. */
	assert_int_equal(s.npages, 3);
	assert_int_equal(s.nlayers, 2);
	for (size_t i = 0; i < s.npages; i++) {
		assert_int_equal(s.pages[i].layer_ino, 3);
		assert_true(s.pages[i].ino != 3 && s.pages[i].ino != 10);
	}
	kv_manifest_close(m);
}

/* ---- geometry ---- */

static void test_geometry(void **state)
{
	struct kv_geometry g = { .layers = 32, .kv_heads = 8, .head_dim = 128,
				 .page_tokens = 16, .dtype = "f16" };
	struct kv_geometry zero = { 0 };

	(void)state;
	logbuf[0] = '\0';
	kv_log_set_sink(capture);
	assert_int_equal(kv_dtype_size("f16"), 2);
	assert_int_equal(kv_dtype_size("bf16"), 2);
	assert_int_equal(kv_dtype_size("fp16"), 2);
	assert_int_equal(kv_dtype_size("f32"), 4);
	assert_int_equal(kv_dtype_size("fp8_e4m3"), 1);
	assert_int_equal(kv_dtype_size("int8"), 1);
	assert_int_equal(kv_dtype_size("f64"), 8);
	assert_int_equal(kv_dtype_size("f17"), 0);
	assert_int_equal(kv_dtype_size(""), 0);

	assert_int_equal(kv_geometry_page_bytes(&g), 2 * 16 * 8 * 128 * 2);
	assert_int_equal(kv_geometry_check(&g), 0);
	assert_int_equal(kv_geometry_page_bytes(&zero), 0);
	assert_int_equal(kv_geometry_check(&zero), 0);

	g.head_dim = 0;
	assert_int_equal(kv_geometry_page_bytes(&g), 0);
	assert_int_equal(kv_geometry_check(&g), -EINVAL);
	assert_true(logged("head_dim"));
	g.head_dim = 128;
	g.layers = 0;
	assert_int_equal(kv_geometry_check(&g), -EINVAL);
	g.layers = 32;
	strcpy(g.dtype, "q4");
	assert_int_equal(kv_geometry_check(&g), -EINVAL);
	assert_true(logged("unknown dtype 'q4'"));
	strcpy(g.dtype, "f32");
	g.page_tokens = 1u << 20;   /* 2 * 1M * 8 * 128 * 4 = 8 GiB */
	assert_int_equal(kv_geometry_check(&g), -EINVAL);
	g.page_tokens = g.kv_heads = g.head_dim = UINT32_MAX;
	assert_int_equal(kv_geometry_page_bytes(&g), 0);   /* overflow */
	assert_int_equal(kv_geometry_check(&g), -EINVAL);
	kv_log_set_sink(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_create_reopen_meta, setup, teardown),
		cmocka_unit_test_setup_teardown(test_mount_generation, setup, teardown),
		cmocka_unit_test_setup_teardown(test_create_twice, setup, teardown),
		cmocka_unit_test_setup_teardown(test_create_bad_meta, setup, teardown),
		cmocka_unit_test_setup_teardown(test_open_missing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_schema_newer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_renumber, setup, teardown),
		cmocka_unit_test_setup_teardown(test_garbage_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_not_kvfs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_roundtrip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ref_extent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_upsert_updates, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rollback, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fault_seam, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unique_conflicts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_references, setup, teardown),
		cmocka_unit_test_setup_teardown(test_load_bad_hash, setup, teardown),
		cmocka_unit_test_setup_teardown(test_load_negative_size, setup, teardown),
		cmocka_unit_test_setup_teardown(test_load_bad_rows, setup, teardown),
		cmocka_unit_test_setup_teardown(test_check, setup, teardown),
		cmocka_unit_test(test_geometry),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
