/*
 * Unit tests for recovery's short way through the journal
 * (index/journal_replay.c, parse_from_record): a reopen reads the journal
 * from where the manifest recorded its last batch (meta.journal_at), not
 * the whole file; batches after it are still replayed; a record that does
 * not match the file falls back to reading it all.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "manifest.h"
#include "manifest_fixture.h"

struct store {
	char dir[64];
	char db[128];
	char journal[128];
};

static void quiet(enum kv_log_level lvl, const char *line)
{
	(void)lvl;
	(void)line;
}

static void store_make(struct store *s)
{
	kv_log_set_sink(quiet);
	strcpy(s->dir, "/tmp/kvfs-test-journal-XXXXXX");
	mfx_create(s->dir, s->db, sizeof(s->db));
	snprintf(s->journal, sizeof(s->journal), "%s/%s", s->dir, KV_JOURNAL_FILE);
}

static void store_done(struct store *s)
{
	mfx_remove(s->dir);
	kv_log_set_sink(NULL);
}

/* Open and recover, as a mount does; the caller closes. */
static struct kv_manifest *reopen(struct store *s, struct kv_recover_stats *st)
{
	struct kv_manifest *m;

	assert_int_equal(kv_manifest_open(s->dir, &m), 0);
	assert_int_equal(kv_manifest_recover(m, st), 0);
	return m;
}

/* Models "m0".. committed one transaction (one journal batch) each. */
static void add_models(struct kv_manifest *m, unsigned from, unsigned n)
{
	for (unsigned i = from; i < from + n; i++) {
		struct kv_model_rec r = { .ino = 100 + i, .attr = { .mode = 0755 } };

		snprintf(r.name, sizeof(r.name), "m%u", i);
		assert_int_equal(kv_manifest_begin(m), 0);
		assert_int_equal(kv_manifest_put_model(m, &r), 0);
		assert_int_equal(kv_manifest_commit(m), 0);
	}
}

/* A new store whose manifest committed models m0..m(n-1), closed. */
static void store_with_models(struct store *s, unsigned n)
{
	struct kv_recover_stats st;
	struct kv_manifest *m;

	store_make(s);
	m = reopen(s, &st);
	add_models(m, 0, n);
	kv_manifest_close(m);
}

static void sql(struct store *s, const char *q, char *out, size_t len)
{
	sqlite3_stmt *st;
	sqlite3 *db;

	assert_int_equal(sqlite3_open(s->db, &db), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, q, -1, &st, NULL), SQLITE_OK);
	if (sqlite3_step(st) == SQLITE_ROW && out)
		snprintf(out, len, "%s", (const char *)sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
	sqlite3_close(db);
}

/* Flip a byte inside the journal's first snapshot frame (after the header
 * frame: its length is at 16, its body after 32 bytes). */
static void damage_snapshot(struct store *s)
{
	unsigned char head[32], b;
	uint64_t len = 0, off;
	int fd = open(s->journal, O_RDWR);

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, head, 32, 0), 32);
	for (int i = 7; i >= 0; i--)
		len = len << 8 | head[16 + i];
	off = 32 + len + 32 + 4;       /* 4 bytes into the next frame's body */
	assert_int_equal(pread(fd, &b, 1, (off_t)off), 1);
	b ^= 0x5a;
	assert_int_equal(pwrite(fd, &b, 1, (off_t)off), 1);
	close(fd);
}

static void test_short_read(void **state)
{
	struct kv_recover_stats st;
	struct kv_manifest *m;
	struct store s;

	(void)state;
	store_with_models(&s, 5);
	/* The snapshot's frames are not read: damage there goes unseen. */
	damage_snapshot(&s);
	m = reopen(&s, &st);
	assert_false(st.rewritten);
	assert_int_equal(st.batches, 0);
	add_models(m, 5, 2);            /* appended after the recorded place */
	kv_manifest_close(m);
	/* Without the record, the whole file is read: the damage ends the
	 * snapshot there, and the journal is written anew. */
	sql(&s, "DELETE FROM meta WHERE key = 'journal_at'", NULL, 0);
	m = reopen(&s, &st);
	assert_true(st.rewritten);
	kv_manifest_close(m);
	/* The rewrite recorded its place: the next reopen is short again. */
	m = reopen(&s, &st);
	assert_false(st.rewritten);
	kv_manifest_close(m);
	store_done(&s);
}

static void test_short_replay(void **state)
{
	struct kv_recover_stats st;
	struct kv_manifest *m;
	char at[64], seq[32], q[160];
	struct store s;

	(void)state;
	store_with_models(&s, 3);
	sql(&s, "SELECT value FROM meta WHERE key = 'journal_at'", at, sizeof(at));
	sql(&s, "SELECT value FROM meta WHERE key = 'journal_seq'", seq, sizeof(seq));
	m = reopen(&s, &st);
	add_models(m, 3, 1);
	kv_manifest_close(m);
	/* As if the last commit never reached the manifest (kvfs.db-wal lost):
	 * its batch, after the recorded one, is applied from the journal. */
	snprintf(q, sizeof(q), "UPDATE meta SET value = '%s' WHERE key = 'journal_at'", at);
	sql(&s, q, NULL, 0);
	snprintf(q, sizeof(q), "UPDATE meta SET value = %s WHERE key = 'journal_seq'", seq);
	sql(&s, q, NULL, 0);
	sql(&s, "DELETE FROM models WHERE name = 'm3'", NULL, 0);
	m = reopen(&s, &st);
	assert_false(st.rewritten);
	assert_int_equal(st.batches, 1);
	assert_int_equal(st.changes, 1);
	kv_manifest_close(m);
	sql(&s, "SELECT count(*) FROM models WHERE name = 'm3'", seq, sizeof(seq));
	assert_string_equal(seq, "1");
	/* The replay recorded its place too. */
	m = reopen(&s, &st);
	assert_false(st.rewritten);
	assert_int_equal(st.batches, 0);
	kv_manifest_close(m);
	store_done(&s);
}

static void test_record_elsewhere(void **state)
{
	struct kv_recover_stats st;
	struct kv_manifest *m;
	struct store s;

	(void)state;
	store_with_models(&s, 3);
	/* A record pointing anywhere but a frame of batch journal_seq (a
	 * copied journal, a hand edit) is not trusted: the file is read. */
	sql(&s, "UPDATE meta SET value = '40 40' WHERE key = 'journal_at'", NULL, 0);
	m = reopen(&s, &st);
	assert_false(st.rewritten);
	assert_int_equal(st.batches, 0);
	add_models(m, 3, 1);
	kv_manifest_close(m);
	sql(&s, "UPDATE meta SET value = '999999999 1' WHERE key = 'journal_at'", NULL, 0);
	m = reopen(&s, &st);
	assert_int_equal(st.batches, 0);
	kv_manifest_close(m);
	store_done(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_short_read),
		cmocka_unit_test(test_short_replay),
		cmocka_unit_test(test_record_elsewhere),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
