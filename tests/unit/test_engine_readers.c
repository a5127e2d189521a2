/*
 * Page files opened for reading (engine/pagefile.c), on a real engine, no
 * mount: a reader's first read loads and verifies the whole page and its
 * handle keeps it for the next reads, up to opts.read_hold bytes per uid;
 * past that each read loads the page again (served right, no memory
 * kept), other uids have shares of their own, and a release gives its
 * bytes back. No RAM tier here, so every load is a device read.
 *
 * And in cache mode one uid's open files hold at most opts.open_share
 * percent of the capacity against eviction: past it, open is EMFILE.
 */
#include <fcntl.h>

#include "engine_fixture.h"

#define SIZE 65536ull

static int setup_readers(void **state)
{
	int rc = efix_setup(state);
	struct efix *f = *state;

	if (rc == 0) {
		f->opts.ram_cache = 0;
		f->opts.read_hold = 2 * SIZE;
	}
	return rc;
}

static uint64_t disk_reads(struct efix *f)
{
	return atomic_load(&f->fs->st.pages_read_disk);
}

/* Read all of f's page and check its bytes (payload seed). */
static void read_whole(struct efix *f, struct kvfs_file *fh, unsigned seed)
{
	struct kvfs_data *want = efix_payload(SIZE, seed), *hold;
	const void *bytes;
	size_t len;

	assert_int_equal(kvfs_file_read(f->fs, fh, 0, SIZE, &hold, &bytes, &len), 0);
	assert_int_equal(len, SIZE);
	assert_memory_equal(bytes, want->bytes, SIZE);
	kvfs_data_put(hold);
	kvfs_data_put(want);
}

static struct kvfs_file *open_page(struct efix *f, const char *name, uint32_t uid)
{
	struct kvfs_file *fh;
	struct kv_node_info n;

	assert_int_equal(efix_lookup(f, name, &n), 0);
	assert_int_equal(kvfs_file_open(f->fs, n.ino, O_RDONLY, uid, &fh), 0);
	return fh;
}

/* Open the store with pages p0.. of SIZE bytes (payload seed i) in m/00. */
static void open_with_pages(struct efix *f, unsigned count)
{
	efix_open(f);
	efix_layer(f);
	for (unsigned i = 0; i < count; i++) {
		char name[8];

		snprintf(name, sizeof(name), "p%u", i);
		assert_int_equal(efix_publish(f, name, SIZE, i, NULL), 0);
	}
}

/* uid 42 opens three pages with room to keep two: the first two are read
 * from the device once, the third at every read; uid 43's own share keeps
 * its copy of the third; once 42 closes one, its third is kept too. */
static void open_readers_keep_at_most_their_share(void **state)
{
	struct efix *f = *state;
	struct kvfs_file *a[3], *b;
	uint64_t base;

	open_with_pages(f, 3);
	assert_int_equal(efix_sync(f), 0);
	a[0] = open_page(f, "p0", 42);
	a[1] = open_page(f, "p1", 42);
	a[2] = open_page(f, "p2", 42);
	base = disk_reads(f);
	for (unsigned round = 0; round < 3; round++)
		for (unsigned i = 0; i < 3; i++)
			read_whole(f, a[i], i);
	assert_int_equal(disk_reads(f) - base, 2 + 3);   /* p2 each time */

	b = open_page(f, "p2", 43);
	read_whole(f, b, 2);
	read_whole(f, b, 2);
	assert_int_equal(disk_reads(f) - base, 2 + 3 + 1);

	kvfs_file_release(f->fs, a[0]);
	read_whole(f, a[2], 2);                          /* loaded, now kept */
	read_whole(f, a[2], 2);
	read_whole(f, a[1], 1);
	assert_int_equal(disk_reads(f) - base, 2 + 3 + 1 + 1);
	kvfs_file_release(f->fs, a[1]);
	kvfs_file_release(f->fs, a[2]);
	kvfs_file_release(f->fs, b);
	assert_int_equal(f->fs->uid_opens.n, 0);          /* every share given back */
	assert_int_equal(efix_close(f), 0);
}

static int setup_share(void **state)
{
	int rc = efix_setup(state);
	struct efix *f = *state;

	if (rc == 0) {
		f->opts.ram_cache = 0;
		f->opts.capacity = 50u << 20;  /* 1%: 512 KiB, 8 pages */
		f->opts.open_share = 1;
	}
	return rc;
}

/* uid 42 opens 8 pages of 64 KiB (one of them twice: each open counts)
 * and then no more, EMFILE, while uid 43 has its own share; uid 44 may
 * open one page larger than a share, then no other; a close gives
 * room back, an empty page counts the block its name is charged (4 KiB:
 * 16 of them fill the share beside 7 pages), and authoritative mode, which
 * never evicts, has no limit. */
static void open_files_hold_at_most_their_share(void **state)
{
	struct efix *f = *state;
	struct kvfs_file *a[8], *b, *e[16], *late, *all[9], *huge;
	struct kv_node_info n;

	open_with_pages(f, 9);
	assert_int_equal(efix_publish(f, "empty", 0, 0, NULL), 0);
	assert_int_equal(efix_publish(f, "huge", 16 * SIZE, 9, NULL), 0);
	assert_int_equal(efix_sync(f), 0);
	for (unsigned i = 0; i < 8; i++) {
		char name[8];

		snprintf(name, sizeof(name), "p%u", i == 7 ? 0 : i);
		a[i] = open_page(f, name, 42);
	}
	assert_int_equal(efix_lookup(f, "p8", &n), 0);
	assert_int_equal(kvfs_file_open(f->fs, n.ino, O_RDONLY, 42, &late), -EMFILE);
	assert_int_equal(kvfs_file_create(f->fs, f->layer, "new", 0644, 42, 42, &late, &n),
			 -EMFILE);                        /* a page it would hold too */
	for (unsigned i = 0; i < 9; i++) {              /* root: no limit */
		char name[8];

		snprintf(name, sizeof(name), "p%u", i);
		all[i] = open_page(f, name, 0);
	}
	for (unsigned i = 0; i < 9; i++)
		kvfs_file_release(f->fs, all[i]);
	assert_int_equal(efix_lookup(f, "p8", &n), 0);
	b = open_page(f, "p8", 43);
	read_whole(f, b, 8);
	huge = open_page(f, "huge", 44);        /* larger than a share: one is fine */
	assert_int_equal(kvfs_file_open(f->fs, n.ino, O_RDONLY, 44, &late), -EMFILE);
	kvfs_file_release(f->fs, huge);
	kvfs_file_release(f->fs, a[7]);
	for (unsigned i = 0; i < 16; i++)
		e[i] = open_page(f, "empty", 42);
	assert_int_equal(efix_lookup(f, "empty", &n), 0);
	assert_int_equal(kvfs_file_open(f->fs, n.ino, O_RDONLY, 42, &late), -EMFILE);
	for (unsigned i = 0; i < 16; i++)
		kvfs_file_release(f->fs, e[i]);
	late = open_page(f, "p8", 42);
	read_whole(f, late, 8);
	read_whole(f, a[0], 0);                          /* the twin still reads */
	kvfs_file_release(f->fs, late);
	for (unsigned i = 0; i < 7; i++)
		kvfs_file_release(f->fs, a[i]);
	kvfs_file_release(f->fs, b);
	assert_int_equal(f->fs->uid_opens.n, 0);
	assert_int_equal(efix_close(f), 0);

	f->opts.authoritative = true;
	efix_open(f);
	for (unsigned i = 0; i < 9; i++) {
		char name[8];

		snprintf(name, sizeof(name), "p%u", i);
		all[i] = open_page(f, name, 42);
	}
	for (unsigned i = 0; i < 9; i++)
		kvfs_file_release(f->fs, all[i]);
	assert_int_equal(efix_close(f), 0);
}

/* A writer's descriptor that fsync sealed keeps its page from eviction
 * until it closes: counted like an open, so uid 45 writing and fsyncing
 * 8 pages of 64 KiB (its share) and keeping them open cannot create a
 * ninth; closing one gives the room back. */
static void fsynced_writers_count_in_the_share(void **state)
{
	struct efix *f = *state;
	struct kvfs_data *bytes = efix_payload(SIZE, 7);
	struct kvfs_file *w[9];
	struct kv_node_info n;

	efix_open(f);
	efix_layer(f);
	for (unsigned i = 0; i < 8; i++) {
		char name[8];

		snprintf(name, sizeof(name), "w%u", i);
		assert_int_equal(kvfs_file_create(f->fs, f->layer, name, 0644, 45, 45, &w[i], &n), 0);
		bytes->bytes[0] = (uint8_t)i;           /* no two alike (dedup) */
		assert_int_equal(kvfs_file_write(f->fs, w[i], bytes->bytes, SIZE, 0, false), 0);
		assert_int_equal(kvfs_file_fsync(f->fs, w[i]), 0);
	}
	assert_int_equal(kvfs_file_create(f->fs, f->layer, "w8", 0644, 45, 45, &w[8], &n),
			 -EMFILE);
	kvfs_file_release(f->fs, w[0]);
	assert_int_equal(kvfs_file_create(f->fs, f->layer, "w8", 0644, 45, 45, &w[8], &n), 0);
	for (unsigned i = 1; i < 9; i++)
		kvfs_file_release(f->fs, w[i]);
	assert_int_equal(f->fs->uid_opens.n, 0);
	kvfs_data_put(bytes);
	assert_int_equal(efix_close(f), 0);
}

/* Pages being written count in the share too, beside the fsync'd ones a
 * uid keeps open: uid 46 creates two pages while it holds nothing, fills
 * and fsyncs the first to its share and cannot write the second; uid 47
 * cannot write one page larger than its share (no one-page exception). */
static void pages_being_written_count_in_the_share(void **state)
{
	struct efix *f = *state;
	struct kvfs_data *bytes = efix_payload(9 * SIZE, 3);
	struct kvfs_file *w0, *w1, *big;
	struct kv_node_info n;

	efix_open(f);
	efix_layer(f);
	assert_int_equal(kvfs_file_create(f->fs, f->layer, "w0", 0644, 46, 46, &w0, &n), 0);
	assert_int_equal(kvfs_file_create(f->fs, f->layer, "w1", 0644, 46, 46, &w1, &n), 0);
	assert_int_equal(kvfs_file_write(f->fs, w0, bytes->bytes, 8 * SIZE, 0, false), 0);
	assert_int_equal(kvfs_file_fsync(f->fs, w0), 0);
	assert_int_equal(kvfs_file_write(f->fs, w1, bytes->bytes, SIZE, 0, false), -EDQUOT);
	assert_int_equal(kvfs_file_create(f->fs, f->layer, "big", 0644, 47, 47, &big, &n), 0);
	assert_int_equal(kvfs_file_write(f->fs, big, bytes->bytes, 9 * SIZE, 0, false),
			 -EDQUOT);
	kvfs_file_release(f->fs, w0);
	kvfs_file_release(f->fs, w1);
	kvfs_file_release(f->fs, big);
	kvfs_data_put(bytes);
	assert_int_equal(efix_close(f), 0);
}

/* A page being written holds at least the block its name is charged,
 * written to or not (it cannot be evicted): uid 48 creating pages and
 * keeping them open, empty, fills its share of 8 pages of 64 KiB after 128
 * (EMFILE for the next); one sealed at its close gives its block back. */
static void empty_pages_being_written_count_in_the_share(void **state)
{
	struct efix *f = *state;
	struct kvfs_file *w[129];
	struct kv_node_info n;
	char name[8];

	efix_open(f);
	efix_layer(f);
	for (unsigned i = 0; i < 128; i++) {
		snprintf(name, sizeof(name), "e%u", i);
		assert_int_equal(kvfs_file_create(f->fs, f->layer, name, 0644, 48, 48, &w[i], &n), 0);
	}
	assert_int_equal(kvfs_file_create(f->fs, f->layer, "e128", 0644, 48, 48, &w[128], &n),
			 -EMFILE);
	kvfs_file_release(f->fs, w[0]);          /* sealed empty, closed: its block back */
	assert_int_equal(kvfs_file_create(f->fs, f->layer, "e128", 0644, 48, 48, &w[128], &n), 0);
	for (unsigned i = 1; i < 129; i++)
		kvfs_file_release(f->fs, w[i]);
	assert_int_equal(f->fs->uid_opens.n, 0);
	assert_int_equal(efix_close(f), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(open_readers_keep_at_most_their_share,
						setup_readers, efix_teardown),
		cmocka_unit_test_setup_teardown(open_files_hold_at_most_their_share,
						setup_share, efix_teardown),
		cmocka_unit_test_setup_teardown(fsynced_writers_count_in_the_share,
						setup_share, efix_teardown),
		cmocka_unit_test_setup_teardown(pages_being_written_count_in_the_share,
						setup_share, efix_teardown),
		cmocka_unit_test_setup_teardown(empty_pages_being_written_count_in_the_share,
						setup_share, efix_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
