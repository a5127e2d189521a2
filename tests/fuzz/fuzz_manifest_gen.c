/*
 * Standalone driver of the manifest-loader fuzz target (fuzz_manifest.c),
 * built by gcc: it makes a valid manifest in-process with the manifest API
 * (two models, three layers, five extents, six pages, one extent shared),
 * once as mkfs leaves it (4 KiB pages, WAL) and once vacuumed to 512-byte
 * pages, then runs N corruptions of them with a fixed seed:
 *   - SQL edits made with sqlite3 directly (out-of-range values, bad names,
 *     dangling and duplicate rows, inode collisions, broken meta, dropped
 *     tables), each with what the mount must say: refuse, accept, or accept
 *     while the check reports overlapping extents;
 *   - byte flips (biased to the 100-byte header), truncation, whole-page
 *     overwrites and appended garbage, alone or on top of an SQL edit.
 * Then it replays the committed corpus. Usage:
 *   fuzz_manifest_random [ITERATIONS [CORPUS_DIR...]]
 *   fuzz_manifest_random --seeds DIR   (write seed inputs for libFuzzer)
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "fuzz_common.h"
#include "fuzz_manifest.h"
#include "manifest.h"

#define SEGMENT (1u << 20)

struct image {
	uint8_t *buf;
	size_t len;
};

static char gen_dir[280], gen_db[300];

/* ---- the valid manifest ---- */

static const struct kv_obj_attr attr = { 0644, 1000, 1000, 1, 2, 3 };

static void put_all(struct kv_manifest *m)
{
	static const struct { uint64_t ino, model; uint32_t layer; const char *name; } layers[] = {
		{ 10, 2, 0, "0" }, { 11, 2, 1, "01" }, { 12, 3, 7, "7" },
	};
	static const struct { uint32_t stripe, seg; uint64_t off, len; uint32_t ref; } ext[] = {
		{ 0, 0, 0, 4096, 2 }, { 0, 0, 4096, 4096, 1 }, { 1, 0, 0, 4096, 1 },
		{ 1, 1, 8192, 5000, 1 }, { 0, 1, SEGMENT - 8192, 5000, 1 },
	};
	static const struct { uint64_t ino, layer; const char *name; uint64_t ext; } pages[] = {
		{ 100, 10, "p0", 1 }, { 101, 10, "p1", 2 }, { 102, 11, "p0", 1 },
		{ 103, 11, "x.y", 3 }, { 104, 12, "blob", 4 }, { 105, 12, "\xc3\xbcn", 5 },
	};
	struct kv_model_rec mr = { .ino = 2, .name = "llama", .attr = attr,
				   .geo = { 2, 1, 64, 16, "f16" } };
	int rc = kv_manifest_begin(m);

	rc = rc ? rc : kv_manifest_put_model(m, &mr);
	mr = (struct kv_model_rec){ .ino = 3, .name = "raw", .attr = attr };
	rc = rc ? rc : kv_manifest_put_model(m, &mr);
	for (size_t i = 0; i < 3 && !rc; i++) {
		struct kv_layer_rec r = { .ino = layers[i].ino, .model_ino = layers[i].model,
					  .layer = layers[i].layer, .attr = attr };

		strcpy(r.name, layers[i].name);
		rc = kv_manifest_put_layer(m, &r);
	}
	for (size_t i = 0; i < 5 && !rc; i++) {
		struct kv_extent_rec r = { .id = i + 1, .refcount = ext[i].ref,
			.ext = { .stripe = ext[i].stripe, .segment = ext[i].seg,
				 .offset = ext[i].off, .length = ext[i].len } };

		memset(r.hash, (int)i + 1, sizeof(r.hash));
		rc = kv_manifest_put_extent(m, &r);
	}
	for (size_t i = 0; i < 6 && !rc; i++) {
		struct kv_page_rec r = { .ino = pages[i].ino, .layer_ino = pages[i].layer,
					 .extent_id = pages[i].ext, .attr = attr,
					 .size = ext[pages[i].ext - 1].len };

		strcpy(r.name, pages[i].name);
		rc = kv_manifest_put_page(m, &r);
	}
	rc = rc ? rc : kv_manifest_commit(m);
	require(rc == 0, "building the base manifest");
}

static void read_image(struct image *im)
{
	require(read_whole(gen_db, &im->buf, &im->len) == 0, "reading the base manifest");
}

static void write_image(const struct image *im)
{
	FILE *f = fopen(gen_db, "wb");

	require(f && fwrite(im->buf, 1, im->len, f) == im->len && fclose(f) == 0,
		"writing a manifest image");
}

static void clear_gen(void)
{
	static const char *const sfx[] = { "", "-wal", "-shm", "-journal" };
	char p[320];

	for (size_t i = 0; i < 4; i++) {
		snprintf(p, sizeof(p), "%s%s", gen_db, sfx[i]);
		unlink(p);
	}
}

static void make_bases(struct image *wal4k, struct image *small)
{
	struct kv_store_meta *meta = calloc(1, sizeof(*meta));
	struct kv_manifest *m;
	sqlite3 *db;

	require(meta != NULL, "malloc");
	strcpy(meta->uuid, "0123abcd-89ab-4def-8123-456789abcdef");
	meta->segment_size = SEGMENT;
	meta->capacity = 64 * SEGMENT;
	meta->created_ns = 1;
	meta->nstripes = 2;
	strcpy(meta->stripes[0], "/srv/ssd0/kv");
	strcpy(meta->stripes[1], "/srv/ssd1/kv");
	clear_gen();
	require(kv_manifest_create(gen_dir, meta) == 0, "mkfs");
	require(kv_manifest_open(gen_dir, &m) == 0, "opening the new manifest");
	put_all(m);
	kv_manifest_close(m);
	free(meta);
	read_image(wal4k);
	/* Small pages make a small file: more of each mutation hits a structure. */
	require(sqlite3_open(gen_db, &db) == SQLITE_OK &&
		sqlite3_exec(db, "PRAGMA journal_mode = DELETE; PRAGMA page_size = 512; VACUUM",
			     NULL, NULL, NULL) == SQLITE_OK, "vacuuming to 512-byte pages");
	sqlite3_close(db);
	read_image(small);
	clear_gen();
}

/* ---- SQL-level corruptions ---- */

enum expect {
	ANY,       /* whatever happens, the target's own properties hold */
	REFUSE,    /* open, meta or load fails, and the check does not pass */
	ACCEPT,    /* everything succeeds */
	OVERLAP,   /* the mount accepts it, the check reports an overlap */
};

static const struct { enum expect exp; const char *sql; } edits[] = {
	{ REFUSE, "UPDATE pages SET name = 'a/b' WHERE ino = 101" },
	{ REFUSE, "UPDATE pages SET name = '' WHERE ino = 101" },
	{ REFUSE, "UPDATE pages SET name = '..' WHERE ino = 101" },
	{ REFUSE, "UPDATE pages SET name = CAST(x'610062' AS TEXT) WHERE ino = 101" },
	{ REFUSE, "UPDATE pages SET name = printf('%.256c', 'n') WHERE ino = 101" },
	{ REFUSE, "UPDATE pages SET name = x'6162' WHERE ino = 101" },
	{ REFUSE, "UPDATE layers SET name = 'x' WHERE ino = 11" },
	{ REFUSE, "UPDATE layers SET name = '2' WHERE ino = 11" },
	{ REFUSE, "UPDATE layers SET name = '+1' WHERE ino = 11" },
	{ REFUSE, "UPDATE layers SET layer = 4294967296, name = '4294967296' WHERE ino = 11" },
	{ REFUSE, "UPDATE layers SET layer = -1 WHERE ino = 11" },
	{ REFUSE, "UPDATE layers SET name = '0', layer = 0 WHERE ino = 11" },
	{ REFUSE, "UPDATE extents SET \"offset\" = 100 WHERE id = 2" },
	{ REFUSE, "UPDATE extents SET \"offset\" = 1048576 WHERE id = 2" },
	{ REFUSE, "UPDATE extents SET \"offset\" = -4096 WHERE id = 2" },
	{ REFUSE, "UPDATE extents SET length = 0 WHERE id = 2" },
	{ REFUSE, "UPDATE extents SET length = 8192 WHERE id = 5" },
	{ REFUSE, "UPDATE extents SET length = 9223372036854775807 WHERE id = 2" },
	{ REFUSE, "UPDATE extents SET stripe = 2 WHERE id = 2" },
	{ REFUSE, "UPDATE extents SET stripe = -1 WHERE id = 2" },
	{ REFUSE, "UPDATE extents SET segment = 4294967296 WHERE id = 2" },
	{ REFUSE, "UPDATE extents SET hash = x'00' WHERE id = 2" },
	{ REFUSE, "UPDATE extents SET hash = 'sixteen chars ok' WHERE id = 2" },
	{ REFUSE, "UPDATE extents SET refcount = 0 WHERE id = 2" },
	{ REFUSE, "UPDATE extents SET refcount = 1 WHERE id = 1" },
	{ REFUSE, "UPDATE extents SET refcount = 3 WHERE id = 1" },
	{ REFUSE, "UPDATE extents SET refcount = 4294967296 WHERE id = 1" },
	{ REFUSE, "UPDATE extents SET id = 0 WHERE id = 2; UPDATE pages SET extent_id = 0 WHERE ino = 101" },
	{ REFUSE, "UPDATE pages SET size = 4095 WHERE ino = 101" },
	{ REFUSE, "UPDATE pages SET size = -1 WHERE ino = 101" },
	{ REFUSE, "UPDATE pages SET extent_id = 99 WHERE ino = 101" },
	{ REFUSE, "UPDATE pages SET layer_ino = 99 WHERE ino = 101" },
	{ REFUSE, "UPDATE pages SET layer_ino = 2 WHERE ino = 101" },
	{ REFUSE, "UPDATE layers SET model_ino = 10 WHERE ino = 12" },
	{ REFUSE, "INSERT INTO pages SELECT 200, layer_ino, 'dup', extent_id, size, mode, uid, "
		  "gid, ctime_ns, mtime_ns, atime_ns, kvfs_ident_page(200, layer_ino, 'dup', "
		  "extent_id, size) FROM pages WHERE ino = 101" },
	/* Identity: one field of a row changed outside kvfs, its ident not. */
	{ REFUSE, "UPDATE pages SET name = 'zz' WHERE ino = 101" },
	{ REFUSE, "UPDATE pages SET name = 'x\xc3\xbc' WHERE ino = 101" },
	{ REFUSE, "UPDATE pages SET name = printf('%.255c', 'n') WHERE ino = 101" },
	{ REFUSE, "UPDATE pages SET name = '...' WHERE ino = 101" },
	{ REFUSE, "UPDATE layers SET name = '0001' WHERE ino = 11" },
	{ REFUSE, "UPDATE layers SET layer = 4294967295, name = '4294967295' WHERE ino = 12" },
	{ REFUSE, "UPDATE pages SET ino = 9223372036854775807 WHERE ino = 105" },
	{ REFUSE, "UPDATE models SET dtype = 'BF16' WHERE ino = 2" },
	{ REFUSE, "UPDATE models SET name = 'other' WHERE ino = 3" },
	{ REFUSE, "UPDATE pages SET ident = ident + 1 WHERE ino = 101" },
	{ REFUSE, "UPDATE pages SET ino = 2 WHERE ino = 101" },
	{ REFUSE, "UPDATE pages SET ino = 1 WHERE ino = 101" },
	{ REFUSE, "UPDATE pages SET ino = 12 WHERE ino = 105" },
	{ REFUSE, "UPDATE layers SET ino = 3 WHERE ino = 12; "
		  "UPDATE pages SET layer_ino = 3 WHERE layer_ino = 12" },
	{ REFUSE, "UPDATE models SET ino = 1 WHERE ino = 3; "
		  "UPDATE layers SET model_ino = 1 WHERE model_ino = 3" },
	{ REFUSE, "UPDATE models SET ino = -5 WHERE ino = 3; "
		  "UPDATE layers SET model_ino = -5 WHERE model_ino = 3" },
	{ REFUSE, "UPDATE pages SET mode = 33188 WHERE ino = 101" },
	{ REFUSE, "UPDATE pages SET uid = -1 WHERE ino = 101" },
	{ REFUSE, "UPDATE pages SET gid = 4294967296 WHERE ino = 101" },
	{ REFUSE, "UPDATE pages SET ctime_ns = 'soon' WHERE ino = 101" },
	{ REFUSE, "UPDATE pages SET atime_ns = 1.5 WHERE ino = 101" },
	{ REFUSE, "UPDATE pages SET mtime_ns = NULL WHERE ino = 101" },
	{ REFUSE, "UPDATE models SET dtype = 'bf17' WHERE ino = 2" },
	{ REFUSE, "UPDATE models SET dtype = printf('%.16c', 'f') WHERE ino = 2" },
	{ REFUSE, "UPDATE models SET layers = 0 WHERE ino = 2" },
	{ REFUSE, "UPDATE models SET kv_heads = 1000000, head_dim = 1000000 WHERE ino = 2" },
	{ REFUSE, "UPDATE models SET page_tokens = 4294967296 WHERE ino = 2" },
	{ REFUSE, "UPDATE models SET dtype = 'f16' WHERE ino = 3" },
	{ REFUSE, "UPDATE models SET name = 'a/b' WHERE ino = 3" },
	{ REFUSE, "UPDATE models SET name = '.' WHERE ino = 3" },
	{ REFUSE, "UPDATE meta SET value = 0 WHERE key = 'segment_size'" },
	{ REFUSE, "UPDATE meta SET value = 4097 WHERE key = 'segment_size'" },
	{ REFUSE, "UPDATE meta SET value = 'big' WHERE key = 'segment_size'" },
	{ REFUSE, "UPDATE meta SET value = 4096 WHERE key = 'segment_size'" },
	{ REFUSE, "UPDATE meta SET value = -1 WHERE key = 'capacity'" },
	{ REFUSE, "DELETE FROM meta WHERE key = 'created_ns'" },
	{ REFUSE, "DELETE FROM meta WHERE key = 'uuid'" },
	{ REFUSE, "UPDATE meta SET value = '' WHERE key = 'uuid'" },
	{ REFUSE, "UPDATE meta SET value = printf('%.40c', 'u') WHERE key = 'uuid'" },
	{ REFUSE, "UPDATE meta SET value = x'0102' WHERE key = 'uuid'" },
	{ REFUSE, "UPDATE meta SET value = 'xfs' WHERE key = 'format'" },
	{ REFUSE, "UPDATE meta SET value = 3 WHERE key = 'schema_version'" },
	{ REFUSE, "UPDATE meta SET value = 0 WHERE key = 'schema_version'; PRAGMA user_version = 0" },
	{ REFUSE, "UPDATE meta SET value = 'one' WHERE key = 'schema_version'" },
	{ REFUSE, "PRAGMA user_version = 9" },
	{ REFUSE, "DELETE FROM stripes WHERE id = 1" },
	{ REFUSE, "DELETE FROM stripes" },
	{ REFUSE, "UPDATE stripes SET id = 5 WHERE id = 1" },
	{ REFUSE, "UPDATE stripes SET path = '' WHERE id = 0" },
	{ REFUSE, "UPDATE stripes SET path = printf('%.4096c', 's') WHERE id = 0" },
	{ REFUSE, "DROP TABLE pages" },
	{ REFUSE, "DROP TABLE meta" },
	{ REFUSE, "ALTER TABLE extents RENAME COLUMN length TO len" },
	{ REFUSE, "DELETE FROM pages WHERE ino = 103" },
	{ REFUSE, "DELETE FROM extents WHERE id = 3" },
	{ REFUSE, "DELETE FROM layers WHERE ino = 12" },
	{ REFUSE, "DELETE FROM models WHERE ino = 3" },
	/* The same edits with the ident recomputed are valid rows. */
#define PAGE_IDENT "ident = kvfs_ident_page(ino, layer_ino, name, extent_id, size)"
	{ ACCEPT, "UPDATE pages SET name = 'x\xc3\xbc' WHERE ino = 101; "
		  "UPDATE pages SET " PAGE_IDENT " WHERE ino = 101" },
	{ ACCEPT, "UPDATE pages SET name = printf('%.255c', 'n') WHERE ino = 101; "
		  "UPDATE pages SET " PAGE_IDENT " WHERE ino = 101" },
	{ ACCEPT, "UPDATE pages SET name = '...' WHERE ino = 101; "
		  "UPDATE pages SET " PAGE_IDENT " WHERE ino = 101" },
	{ ACCEPT, "UPDATE layers SET name = '0001' WHERE ino = 11; UPDATE layers SET "
		  "ident = kvfs_ident_layer(ino, model_ino, layer, name) WHERE ino = 11" },
	{ ACCEPT, "UPDATE pages SET ino = 9223372036854775807 WHERE ino = 105; UPDATE pages "
		  "SET " PAGE_IDENT " WHERE ino = 9223372036854775807" },
	{ ACCEPT, "UPDATE pages SET ctime_ns = -9223372036854775808 WHERE ino = 101" },
	{ ACCEPT, "UPDATE models SET dtype = 'BF16' WHERE ino = 2; UPDATE models SET "
		  "ident = kvfs_ident_model(ino, name, layers, kv_heads, head_dim, page_tokens, "
		  "dtype) WHERE ino = 2" },
	{ ACCEPT, "DELETE FROM pages WHERE ino = 102; UPDATE extents SET refcount = 1 WHERE id = 1" },
	{ ACCEPT, "UPDATE extents SET segment = 4294967295 WHERE id = 2" },
	{ ACCEPT, "UPDATE meta SET value = 9223372036854775807 WHERE key = 'capacity'" },
	{ ACCEPT, "ALTER TABLE pages ADD COLUMN extra" },
	{ ACCEPT, "CREATE TABLE junk (x); INSERT INTO junk VALUES (1)" },
	{ ACCEPT, "PRAGMA journal_mode = DELETE" },
	{ ACCEPT, "VACUUM" },
	{ OVERLAP, "UPDATE extents SET \"offset\" = 0 WHERE id = 2" },
	{ OVERLAP, "UPDATE extents SET stripe = 0, segment = 1, \"offset\" = 1036288 WHERE id = 4" },
	{ ANY, "UPDATE sqlite_master SET sql = 'CREATE TABLE pages (ino)' WHERE name = 'pages'" },
	{ ANY, "PRAGMA writable_schema = ON; DELETE FROM sqlite_master WHERE name = 'pages_extent'" },
	{ ANY, "PRAGMA writable_schema = ON; UPDATE sqlite_master SET rootpage = 2 "
	       "WHERE name = 'extents'" },
	{ ANY, "DROP INDEX extents_hash" },
	{ ANY, "PRAGMA foreign_keys = ON; DELETE FROM models" },
};
#define NEDITS (sizeof(edits) / sizeof(edits[0]))

/* Apply edit e to im in place; false if SQLite refused it (then im is as it was). */
static bool apply_edit(struct image *im, size_t e)
{
	sqlite3 *db;
	bool ok;

	clear_gen();
	write_image(im);
	require(sqlite3_open(gen_db, &db) == SQLITE_OK &&
		kv_manifest_register_sql(db) == SQLITE_OK, "opening an image to edit");
	ok = sqlite3_exec(db, edits[e].sql, NULL, NULL, NULL) == SQLITE_OK;
	sqlite3_close(db);
	if (ok) {
		free(im->buf);
		read_image(im);
	}
	clear_gen();
	return ok;
}

static void check_expect(enum expect exp, const struct fuzz_manifest_result *r, size_t e)
{
	bool refused = r->open != 0 || r->meta != 0 || r->load != 0;

	if (exp == ANY)
		return;
	if ((exp == REFUSE && (!refused || r->check == 0)) ||
	    (exp == ACCEPT && (refused || r->walk != 0 || r->check != 0)) ||
	    (exp == OVERLAP && (refused || r->walk != 0 || r->check != KV_ERR_CORRUPT))) {
		fprintf(stderr, "edit \"%s\": open %d meta %d load %d walk %d check %d\n",
			edits[e].sql, r->open, r->meta, r->load, r->walk, r->check);
		require(0, exp == REFUSE ? "a corrupt manifest was not refused" :
			   "a valid manifest edit was refused");
	}
}

/* ---- byte-level corruptions ---- */

static size_t db_page_size(const struct image *im)
{
	size_t ps;

	if (im->len < 100)
		return 512;
	ps = (size_t)im->buf[16] << 8 | im->buf[17];
	return ps == 1 ? 65536 : ps >= 512 && ps <= 32768 ? ps : 512;
}

static void overwrite_page(struct image *im)
{
	size_t ps = db_page_size(im), npages = im->len / ps, dst, src;

	if (npages < 2)
		return;
	dst = rnd() % npages;
	src = rnd() % npages;
	switch (rnd() % 3) {
	case 0: memmove(im->buf + dst * ps, im->buf + src * ps, ps); break;
	case 1: memset(im->buf + dst * ps, 0, ps); break;
	default:
		for (size_t i = 0; i < ps; i += 8)
			im->buf[dst * ps + i] = (uint8_t)rnd();
	}
}

static void mutate_bytes(struct image *im)
{
	static const uint8_t edge[] = { 0, 1, 0x7f, 0x80, 0xff };
	unsigned flips = 1 + rnd() % 8;

	for (unsigned i = 0; i < flips && im->len; i++) {
		size_t at = rnd() % 4 == 0 ? rnd() % (im->len < 100 ? im->len : 100)
					   : rnd() % im->len;

		im->buf[at] = rnd() % 2 ? (uint8_t)rnd() : edge[rnd() % 5];
	}
	if (rnd() % 6 == 0)
		overwrite_page(im);
	if (rnd() % 6 == 0 && im->len)
		im->len = rnd() % 2 ? rnd() % im->len
				    : im->len / db_page_size(im) * db_page_size(im) / 2;
	if (rnd() % 10 == 0) {
		size_t extra = 1 + rnd() % 1024;
		uint8_t *b = realloc(im->buf, im->len + extra);

		require(b != NULL, "realloc");
		im->buf = b;
		for (size_t i = 0; i < extra; i++)
			b[im->len + i] = (uint8_t)rnd();
		im->len += extra;
	}
}

/* ---- driver ---- */

static void copy_image(struct image *dst, const struct image *src)
{
	dst->buf = malloc(src->len ? src->len : 1);
	require(dst->buf != NULL, "malloc");
	memcpy(dst->buf, src->buf, src->len);
	dst->len = src->len;
}

static void check_base(const struct image *im)
{
	struct fuzz_manifest_result r;
	unsigned long before = fuzz_manifest_stats.pages_loaded;

	fuzz_manifest_run(im->buf, im->len, &r);
	require(r.open == 0 && r.meta == 0 && r.load == 0 && r.walk == 0 && r.check == 0,
		"the base manifest is valid");
	require(fuzz_manifest_stats.pages_loaded - before == 6, "the base has six pages");
}

static unsigned long refused_edits;

static void one_iteration(const struct image *base)
{
	struct fuzz_manifest_result r;
	struct image im;
	size_t e = rnd() % NEDITS;
	bool edited = false, bytes = false;

	copy_image(&im, base);
	if (rnd() % 3)
		edited = apply_edit(&im, e);
	if (!edited || rnd() % 3 == 0) {
		mutate_bytes(&im);
		bytes = true;
	}
	fuzz_manifest_run(im.buf, im.len, &r);
	if (edited && !bytes) {
		check_expect(edits[e].exp, &r, e);
		refused_edits += edits[e].exp == REFUSE;
	}
	free(im.buf);
}

static int write_seeds(const char *dir, const struct image *bases)
{
	char path[4096];

	mkdir(dir, 0755);
	for (size_t i = 0; i < 2 + NEDITS; i++) {
		struct image im;
		FILE *f;

		copy_image(&im, &bases[i < 2 ? i : 1]);
		if (i >= 2 && !apply_edit(&im, i - 2)) {
			free(im.buf);
			continue;
		}
		snprintf(path, sizeof(path), "%s/%s%03zu", dir, i < 2 ? "base" : "edit", i);
		f = fopen(path, "wb");
		if (!f || fwrite(im.buf, 1, im.len, f) != im.len || fclose(f) != 0) {
			perror(path);
			return 1;
		}
		free(im.buf);
	}
	printf("fuzz_manifest: seeds written to %s\n", dir);
	return 0;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb; (void)flag; (void)ftw;
	return remove(path);
}

int main(int argc, char **argv)
{
	struct image bases[2];
	unsigned long iters = argc > 1 ? strtoul(argv[1], NULL, 10) : 600;
	long replayed = 0;
	int rc = 0;

	snprintf(gen_dir, sizeof(gen_dir), "%s/gen", fuzz_manifest_dir());
	snprintf(gen_db, sizeof(gen_db), "%s/%s", gen_dir, KV_MANIFEST_FILE);
	require(mkdir(gen_dir, 0755) == 0, "mkdir gen");
	make_bases(&bases[0], &bases[1]);
	check_base(&bases[0]);
	check_base(&bases[1]);
	if (argc > 2 && strcmp(argv[1], "--seeds") == 0) {
		rc = write_seeds(argv[2], bases);
		iters = 0;
		argc = 0;
	}
	for (unsigned long i = 0; i < iters; i++)
		one_iteration(&bases[rnd() % 2]);
	for (int a = 2; a < argc; a++) {
		long n = replay_dir(argv[a]);

		if (n < 0)
			return 1;
		replayed += n;
	}
	printf("fuzz_manifest: %lu runs (%ld corpus files): %lu opened, %lu loaded, %lu "
	       "passed the check, %lu deliberate corruptions refused; all properties held\n",
	       fuzz_manifest_stats.runs, replayed, fuzz_manifest_stats.opened,
	       fuzz_manifest_stats.loaded, fuzz_manifest_stats.checked_clean, refused_edits);
	/* the manifest and journal the last iteration left, then the dir:
	 * every run would otherwise leave one behind on /dev/shm */
	nftw(gen_dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
	free(bases[0].buf);
	free(bases[1].buf);
	/* Mutations that never get past open, or never fail, prove nothing. */
	if (iters && (fuzz_manifest_stats.opened < iters / 4 ||
		      fuzz_manifest_stats.loaded < iters / 20 || refused_edits < iters / 10))
		return 1;
	return rc;
}
