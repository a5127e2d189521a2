/*
 * Unit tests for recovery's short way through the journal
 * (index/journal_replay.c, parse_from_record): a reopen reads the journal
 * from where the manifest recorded its last batch (meta.journal_at), not
 * the whole file; batches after it are still replayed; a record that does
 * not match the file falls back to reading it all. And compaction in the
 * background (index/journal_compact.c): commits go on while the snapshot is
 * written, the batches committed meanwhile are carried over, a failed or
 * stopped compaction leaves the old journal whole.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <inttypes.h>
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
	char tmp[160];             /* a compaction's file */
	char gate[128];            /* compactions wait while it exists */
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
	snprintf(s->tmp, sizeof(s->tmp), "%s.tmp", s->journal);
	snprintf(s->gate, sizeof(s->gate), "%s/gate", s->dir);
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

/* ---- compaction in the background ---- */

static ino_t inode_of(const char *path)
{
	struct stat sb;

	assert_int_equal(stat(path, &sb), 0);
	return sb.st_ino;
}

static bool exists(const char *path)
{
	return access(path, F_OK) == 0;
}

/* A store whose journal is compacted as soon as it is 4 times its
 * snapshot, with compactions held at the gate file while it exists. */
static struct kv_manifest *compacting_store(struct store *s)
{
	struct kv_recover_stats st;
	struct kv_manifest *m;
	int fd;

	store_make(s);
	fd = open(s->gate, O_CREAT | O_WRONLY, 0600);
	assert_true(fd >= 0);
	close(fd);
	setenv("KVFS_TEST_COMPACT_GATE", s->gate, 1);
	m = reopen(s, &st);
	kv_manifest_journal_tune(m, 1);
	return m;
}

/* Commit models from *next on until a compaction is running. */
static void grow_until_compacting(struct kv_manifest *m, unsigned *next)
{
	struct kv_journal_info ji;

	for (unsigned i = 0; i < 10000; i++) {
		add_models(m, (*next)++, 1);
		kv_manifest_journal_info(m, &ji);
		if (ji.compacting)
			return;
	}
	fail_msg("no compaction started");
}

/* Commit one model at a time until n compactions were put in place; the
 * number of commits it took. */
static unsigned commit_until_compacted(struct kv_manifest *m, unsigned *next, uint64_t n)
{
	struct kv_journal_info ji;

	for (unsigned i = 0; i < 1000; i++) {
		add_models(m, (*next)++, 1);
		kv_manifest_journal_info(m, &ji);
		if (ji.compactions >= n)
			return i + 1;
		usleep(10000);
	}
	fail_msg("compaction %" PRIu64 " was not put in place in 10 s", n);
	return 0;
}

static void expect_models(struct store *s, unsigned n)
{
	char q[64], got[32], want[32];

	snprintf(q, sizeof(q), "SELECT count(*) FROM models");
	sql(s, q, got, sizeof(got));
	snprintf(want, sizeof(want), "%u", n);
	assert_string_equal(got, want);
}

/* Closed store: its journal, read whole (no recorded place), holds
 * everything: recovery does not rewrite it, and models m0..m(n-1) exist. */
static void expect_whole_journal(struct store *s, unsigned n)
{
	struct kv_recover_stats st;
	struct kv_manifest *m;

	sql(s, "DELETE FROM meta WHERE key = 'journal_at'", NULL, 0);
	m = reopen(s, &st);
	assert_false(st.rewritten);
	assert_int_equal(st.batches, 0);
	kv_manifest_close(m);
	expect_models(s, n);
	unsetenv("KVFS_TEST_COMPACT_GATE");
	store_done(s);
}

static void test_compact_background(void **state)
{
	struct kv_recover_stats st;
	struct kv_rebuild_stats rs;
	struct kv_journal_info ji;
	struct kv_manifest *m;
	unsigned next = 0, waited;
	uint64_t before;            /* bytes of batches after the snapshot */
	uint64_t batch = 0, prev;   /* the largest batch's bytes */
	struct store s;
	ino_t ino;

	(void)state;
	m = compacting_store(&s);
	ino = inode_of(s.journal);
	grow_until_compacting(m, &next);
	/* The commit that started it returned before the snapshot was
	 * written, and the ones after it commit while it is held. */
	kv_manifest_journal_info(m, &ji);
	for (int i = 0; i < 20; i++) {
		prev = ji.size;
		add_models(m, next++, 1);
		kv_manifest_journal_info(m, &ji);
		assert_true(ji.compacting);
		assert_int_equal(ji.compactions, 0);
		if (ji.size - prev > batch)
			batch = ji.size - prev;
	}
	assert_true(inode_of(s.journal) == ino);
	before = ji.size - ji.snapshot_end;
	unlink(s.gate);
	waited = commit_until_compacted(m, &next, 1);
	/* A new snapshot, followed by only the batches committed since it
	 * began: the 20 above and the ones that waited for it, one more to
	 * spare. Not "fewer bytes than before": a slow run (TSan) commits
	 * more batches while it waits than there were before. Model names
	 * grow by a digit at most meanwhile: 16 bytes a batch to spare. */
	kv_manifest_journal_info(m, &ji);
	assert_true(ji.size - ji.snapshot_end <= (21 + waited) * (batch + 16));
	assert_true(ji.size - ji.snapshot_end < before + waited * (batch + 16));
	assert_true(inode_of(s.journal) != ino);
	assert_false(exists(s.tmp));
	add_models(m, next++, 3);
	next += 2;
	kv_manifest_close(m);
	expect_models(&s, next);
	/* The short way, from the recorded place in the new file. */
	m = reopen(&s, &st);
	assert_false(st.rewritten);
	assert_int_equal(st.batches, 0);
	kv_manifest_close(m);
	/* The journal alone makes the same manifest; read whole, it is a
	 * snapshot, then the carried batches in order. */
	assert_int_equal(kv_manifest_rebuild(s.dir, &rs), 0);
	expect_whole_journal(&s, next);
}

static void test_compact_stopped(void **state)
{
	struct kv_manifest *m;
	unsigned next = 0;
	struct store s;
	ino_t ino;

	(void)state;
	m = compacting_store(&s);
	ino = inode_of(s.journal);
	grow_until_compacting(m, &next);
	add_models(m, next++, 1);
	/* Closed while it runs: it is stopped, its file removed, the old
	 * journal kept whole. */
	kv_manifest_close(m);
	assert_false(exists(s.tmp));
	assert_true(inode_of(s.journal) == ino);
	unlink(s.gate);
	expect_whole_journal(&s, next);
}

static void test_compact_fails(void **state)
{
	struct kv_journal_info ji = { 0 };
	struct kv_manifest *m;
	unsigned next = 0;
	struct store s;
	ino_t ino;

	(void)state;
	m = compacting_store(&s);
	/* Its file cannot be created: a directory stands in its place. */
	assert_int_equal(mkdir(s.tmp, 0700), 0);
	ino = inode_of(s.journal);
	grow_until_compacting(m, &next);
	unlink(s.gate);
	for (int i = 0; i < 1000; i++) {
		add_models(m, next++, 1);
		kv_manifest_journal_info(m, &ji);
		if (!ji.compacting)
			break;
		usleep(10000);
	}
	/* It failed; commits did not, and the old journal stays. */
	assert_false(ji.compacting);
	assert_int_equal(ji.compactions, 0);
	assert_true(inode_of(s.journal) == ino);
	assert_int_equal(rmdir(s.tmp), 0);
	/* It is tried again once the journal has grown some more. */
	commit_until_compacted(m, &next, 1);
	assert_true(inode_of(s.journal) != ino);
	kv_manifest_close(m);
	expect_whole_journal(&s, next);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_short_read),
		cmocka_unit_test(test_short_replay),
		cmocka_unit_test(test_record_elsewhere),
		cmocka_unit_test(test_compact_background),
		cmocka_unit_test(test_compact_stopped),
		cmocka_unit_test(test_compact_fails),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
