/*
 * The committer (engine/commit.c) on a real engine, no mount: a published
 * page becomes durable and is there after kvfs_close and kvfs_open; a
 * wait covers everything queued before it, in queue order, across many
 * transactions; a page whose payload write fails is withdrawn and its
 * waiters get EIO; a failed manifest transaction is retried until the
 * changes are durable; with the syncer a batch ahead of the committer, a
 * failed data sync of one batch withdraws its pages only, while the batch
 * before it commits. Faults go through the engine's own seam
 * (kvfs_fault_set, opts.fault_injection), as user.kvfs.fault does.
 */
#include "engine_fixture.h"
#include "commit_i.h"      /* the syncer's hand-over, to see the pipeline */

#define PAGE (64 * 1024ull)

/* Sealed and visible at once, durable after the wait, the same after a
 * close and an open: the row, the extent, the bytes. */
static void published_page_is_durable_after_reopen(void **state)
{
	struct efix *f = *state;
	struct kv_node_info n, after;

	efix_open(f);
	efix_layer(f);
	assert_int_equal(efix_publish(f, "p0", 100000, 3, &n), 0);
	assert_true(n.state == KV_PAGE_SEALED);
	assert_int_equal(efix_lookup(f, "p0", &after), 0);   /* visible */
	assert_int_equal(after.ino, n.ino);
	assert_int_equal(efix_sync(f), 0);
	assert_int_equal(efix_lookup(f, "p0", &after), 0);
	assert_int_equal(after.state, KV_PAGE_DURABLE);
	assert_int_equal(atomic_load(&f->fs->st.pages_sealed), 1);
	assert_int_equal(atomic_load(&f->fs->st.bytes_written), 100000);
	efix_assert_page(f, "p0", 100000, 3);

	efix_reopen(f);
	assert_int_equal(efix_lookup(f, "p0", &after), 0);
	assert_int_equal(after.ino, n.ino);
	assert_int_equal(after.state, KV_PAGE_DURABLE);
	assert_int_equal(after.extent_id, n.extent_id);
	assert_memory_equal(after.hash, n.hash, KV_HASH_LEN);
	efix_assert_page(f, "p0", 100000, 3);
	assert_int_equal(efix_close(f), 0);
}

/* One operation a transaction (commit_batch 1): forty pages, a second
 * layer, a page in it, a page unlinked and its name published again. A
 * wait taken after them returns once all are durable; the reopened store
 * shows the last state of every name, so the rows went in queue order. */
static void wait_covers_everything_queued_before_it(void **state)
{
	struct efix *f = *state;
	struct kv_node_info l1, n;
	uint64_t commits, mark;
	char name[16];

	f->opts.commit_batch = 1;
	efix_open(f);
	efix_layer(f);
	mark = kvfs_commit_mark(f->fs);
	commits = atomic_load(&f->fs->st.commits);
	for (int i = 0; i < 40; i++) {
		snprintf(name, sizeof(name), "p%d", i);
		assert_int_equal(efix_publish(f, name, 4096 + i, (unsigned)i, NULL), 0);
	}
	assert_int_equal(kvfs_ns_mkdir(f->fs, f->model, "01", 0750, getuid(), getgid(),
				       &l1), 0);
	assert_int_equal(efix_publish_charged(f, l1.ino, "q", 5000, 77, 0, NULL), 0);
	assert_int_equal(efix_unlink(f, "p7"), 0);
	assert_int_equal(efix_publish(f, "p7", 9000, 99, NULL), 0);   /* a new p7 */
	assert_int_equal(kvfs_commit_wait_all(f->fs, mark), 0);
	assert_true(kvfs_commit_mark(f->fs) > mark);
	assert_true(atomic_load(&f->fs->st.commits) - commits >= 40);
	for (int i = 0; i < 40; i++) {
		snprintf(name, sizeof(name), "p%d", i);
		assert_int_equal(efix_lookup(f, name, &n), 0);
		assert_int_equal(n.state, KV_PAGE_DURABLE);
	}
	assert_int_equal(kv_index_lookup(f->fs->idx, l1.ino, "q", &n), 0);
	assert_int_equal(n.state, KV_PAGE_DURABLE);

	efix_reopen(f);
	for (int i = 0; i < 40; i++) {
		snprintf(name, sizeof(name), "p%d", i);
		if (i == 7)
			efix_assert_page(f, name, 9000, 99);
		else
			efix_assert_page(f, name, 4096 + i, (unsigned)i);
	}
	assert_int_equal(kv_index_lookup(f->fs->idx, f->model, "01", &l1), 0);
	assert_int_equal(l1.attr.mode, 0750);
	assert_int_equal(kv_index_lookup(f->fs->idx, l1.ino, "q", &n), 0);
	assert_int_equal(n.size, 5000);
	assert_int_equal(efix_close(f), 0);
}

/* The payload write fails: the page is withdrawn (gone from the namespace,
 * counted lost, its dirty charge and its space given back), the wait that
 * covered it gets EIO, and the next page is unaffected. */
static void failed_write_withdraws_the_page(void **state)
{
	struct efix *f = *state;
	struct kv_node_info n;
	uint64_t mark, base, used_good;

	f->opts.fault_injection = true;
	efix_open_with_page(f, "good", PAGE, 1);
	used_good = efix_used(f);
	base = atomic_load(&f->fs->st.pages_lost);

	efix_fault(f, "store write 1 EIO");
	mark = kvfs_commit_mark(f->fs);
	assert_int_equal(kvfs_dirty_take(f->fs, PAGE, 0), 0);
	assert_int_equal(efix_publish_charged(f, f->layer, "bad", PAGE, 2, PAGE, &n), 0);
	assert_int_equal(kvfs_commit_wait_all(f->fs, mark), -EIO);
	assert_int_equal(efix_lookup(f, "bad", &n), -ENOENT);
	assert_int_equal(atomic_load(&f->fs->st.pages_lost), base + 1);
	assert_int_equal(f->fs->dirty.filling + f->fs->dirty.draining, 0);
	assert_int_equal(efix_used(f), used_good);

	mark = kvfs_commit_mark(f->fs);      /* the fault fired once: writes work */
	assert_int_equal(efix_publish(f, "next", PAGE, 4, NULL), 0);
	assert_int_equal(kvfs_commit_wait_all(f->fs, mark), 0);
	assert_int_equal(efix_lookup(f, "next", &n), 0);
	assert_int_equal(n.state, KV_PAGE_DURABLE);

	efix_reopen(f);
	assert_int_equal(efix_lookup(f, "bad", &n), -ENOENT);
	efix_assert_page(f, "good", PAGE, 1);
	efix_assert_page(f, "next", PAGE, 4);
	assert_int_equal(efix_close(f), 0);
}

/* A manifest transaction fails: its waiters hear EIO at once, the
 * committer says so (kvfs_commit_failing) and retries the same changes,
 * which become durable without anyone queueing them again. */
static void failed_transaction_is_retried(void **state)
{
	struct efix *f = *state;
	struct kv_node_info n;
	uint64_t mark;
	bool saw_failing = false;

	f->opts.fault_injection = true;
	efix_open(f);
	efix_layer(f);
	assert_int_equal(efix_sync(f), 0);

	efix_fault(f, "manifest commit 1 EIO");
	mark = kvfs_commit_mark(f->fs);
	assert_int_equal(efix_publish(f, "p", PAGE, 5, NULL), 0);
	assert_int_equal(kvfs_commit_wait_all(f->fs, mark), -EIO);
	/* the retry comes 1 s later: the failure is visible meanwhile */
	saw_failing = kvfs_commit_failing(f->fs) == -EIO;
	assert_int_equal(efix_lookup(f, "p", &n), 0);    /* still there, */
	assert_int_equal(n.state, KV_PAGE_SEALED);       /* not durable yet */
	/* Waits still hear of the failure while the failed changes are not
	 * committed (conservative, as fsync); the retry makes them durable,
	 * bounded: 10 s. */
	for (int i = 0; i < 1000 && n.state != KV_PAGE_DURABLE; i++) {
		efix_sleep_ms(10);
		assert_int_equal(efix_lookup(f, "p", &n), 0);
	}
	assert_int_equal(n.state, KV_PAGE_DURABLE);
	assert_int_equal(efix_sync(f), 0);       /* a wait from now on: all well */
	assert_int_equal(kvfs_commit_failing(f->fs), 0);
	assert_true(saw_failing);

	efix_reopen(f);
	efix_assert_page(f, "p", PAGE, 5);
	assert_int_equal(efix_close(f), 0);
}

/* Publish pages prefix0..prefix3 (4 KiB, seeds seed..seed+3) as one commit
 * group, as a fast-path write's chunk; each charged one page of budget. */
static void publish_chunk(struct efix *f, char prefix, unsigned seed)
{
	char name[8];

	assert_int_equal(kvfs_dirty_take(f->fs, 4 * 4096, 0), 0);
	kvfs_commit_group_begin(f->fs);
	for (unsigned i = 0; i < 4; i++) {
		snprintf(name, sizeof(name), "%c%u", prefix, i);
		assert_int_equal(efix_publish_charged(f, f->layer, name, 4096, seed + i,
						      4096, NULL), 0);
	}
	kvfs_commit_group_end(f->fs);
}

/* Chunk B is synced and handed over while chunk A's transaction is not
 * done: B's first op waits in ready, every op of it marked failed, and
 * committed_seq is still below A's last op. 0, or -1 after 900 ms (the
 * committer retries A 1 s after its failure). */
static int b_synced_while_a_commits(struct efix *f, uint64_t a_last)
{
	struct kvfs_commit *c = f->fs->commit;
	int found = -1;

	for (int i = 0; i < 900 && found < 0; i++) {
		pthread_mutex_lock(&c->lock);
		if (c->ready && c->ready->seq == a_last + 1 &&
		    c->committed_seq < a_last) {
			found = 0;
			for (struct op *o = c->ready; o; o = o->next)
				if (!o->has_write || o->io.res != -EIO)
					found = -2;
		}
		pthread_mutex_unlock(&c->lock);
		if (found == -1)
			efix_sleep_ms(1);
	}
	return found;
}

/*
 * The pipeline keeps rule 2 per batch: chunk A's transaction fails once
 * (retried 1 s later) and chunk B's data sync fails. The syncer syncs B
 * while A is still uncommitted (the pipeline is real), B's pages are
 * withdrawn (no row, EIO to the wait, charges and space given back), and
 * A's pages commit and survive a reopen.
 */
static void failed_sync_of_next_batch_withdraws_only_it(void **state)
{
	struct efix *f = *state;
	struct kv_node_info n;
	uint64_t mark, a_last, lost, used;
	char name[8];

	f->opts.fault_injection = true;
	f->opts.commit_batch = 4;       /* a chunk is a batch */
	efix_open(f);
	efix_layer(f);
	assert_int_equal(efix_sync(f), 0);
	used = efix_used(f);
	lost = atomic_load(&f->fs->st.pages_lost);

	efix_fault(f, "manifest commit 1 EIO");  /* A's transaction */
	efix_fault(f, "store fsync 2 EIO");      /* B's data sync; A's is the first */
	mark = kvfs_commit_mark(f->fs);
	pthread_mutex_lock(&f->fs->commit->lock);
	a_last = f->fs->commit->next_seq + 3;
	pthread_mutex_unlock(&f->fs->commit->lock);
	publish_chunk(f, 'a', 10);
	publish_chunk(f, 'b', 20);
	assert_int_equal(b_synced_while_a_commits(f, a_last), 0);
	assert_int_equal(efix_lookup(f, "a0", &n), 0);
	assert_int_equal(n.state, KV_PAGE_SEALED);      /* A not durable yet */

	assert_int_equal(kvfs_commit_wait_all(f->fs, mark), -EIO);
	/* A's retry, then B (its space is freed before its batch ends) */
	for (int i = 0; i < 1000 && kvfs_commit_mark(f->fs) < a_last + 4; i++)
		efix_sleep_ms(10);
	assert_true(kvfs_commit_mark(f->fs) >= a_last + 4);
	for (unsigned i = 0; i < 4; i++) {
		snprintf(name, sizeof(name), "a%u", i);
		assert_int_equal(efix_lookup(f, name, &n), 0);
		assert_int_equal(n.state, KV_PAGE_DURABLE);
		snprintf(name, sizeof(name), "b%u", i);
		assert_int_equal(efix_lookup(f, name, &n), -ENOENT);
	}
	assert_int_equal(atomic_load(&f->fs->st.pages_lost), lost + 4);
	assert_int_equal(f->fs->dirty.filling + f->fs->dirty.draining, 0);
	assert_int_equal(efix_used(f), used + 4 * 4096);

	efix_reopen(f);
	for (unsigned i = 0; i < 4; i++) {
		snprintf(name, sizeof(name), "a%u", i);
		efix_assert_page(f, name, 4096, 10 + i);
		snprintf(name, sizeof(name), "b%u", i);
		assert_int_equal(efix_lookup(f, name, &n), -ENOENT);
	}
	assert_int_equal(efix_close(f), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(published_page_is_durable_after_reopen,
						efix_setup, efix_teardown),
		cmocka_unit_test_setup_teardown(wait_covers_everything_queued_before_it,
						efix_setup, efix_teardown),
		cmocka_unit_test_setup_teardown(failed_write_withdraws_the_page,
						efix_setup, efix_teardown),
		cmocka_unit_test_setup_teardown(failed_transaction_is_retried,
						efix_setup, efix_teardown),
		cmocka_unit_test_setup_teardown(failed_sync_of_next_batch_withdraws_only_it,
						efix_setup, efix_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
