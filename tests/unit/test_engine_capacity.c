/*
 * Space accounting (engine/capacity.c) on a real engine, no mount: what
 * kvfs_cap_stats reports as used and reserved after pages are published,
 * evicted and the store reopened; kvfs_evict's least recently used order
 * and target; kvfs_gc's checks, target and age sweeps; space held for
 * pages being written counting as usage and being left to them; a full
 * authoritative store refusing pages until one is deleted; an idle
 * evictor above the high mark looking less often while it finds nothing;
 * a page stored under two names evicted by the newer, both names at once.
 */
#include <fcntl.h>

#include "engine_fixture.h"
#include "kvfs_ioctl.h"

#define SIZE 100000ull
#define NPAGES 10

static uint64_t footprint(uint64_t size)
{
	struct kv_extent e = { .length = size };

	return kv_extent_footprint(&e);
}

static struct kvfs_cap_stats stats(struct efix *f)
{
	struct kvfs_cap_stats s;

	kvfs_cap_stats(f->fs, &s);
	return s;
}

/* Pages p0..p9 of SIZE bytes, last read 100 s ago and one second apart
 * (p0 the oldest), all durable. */
static int64_t publish_aged(struct efix *f)
{
	int64_t t0 = kvfs_now_ns() - 100 * 1000000000ll;
	char name[16];

	for (int i = 0; i < NPAGES; i++) {
		struct kv_obj_attr a = { .mode = 0444, .uid = getuid(), .gid = getgid() };
		struct kvfs_data *d = efix_payload(SIZE, (unsigned)i);

		a.ctime_ns = a.mtime_ns = kvfs_now_ns();
		a.atime_ns = t0 + i * 1000000000ll;
		snprintf(name, sizeof(name), "p%d", i);
		assert_int_equal(kvfs_page_publish(f->fs, f->layer, name, &a, d, 0, false,
						   NULL), 0);
		kvfs_data_put(d);
	}
	assert_int_equal(efix_sync(f), 0);
	return t0;
}

/* Which of p0..p9 are there, as a bit mask. */
static unsigned present(struct efix *f)
{
	struct kv_node_info n;
	unsigned mask = 0;
	char name[16];

	for (int i = 0; i < NPAGES; i++) {
		snprintf(name, sizeof(name), "p%d", i);
		if (efix_lookup(f, name, &n) == 0)
			mask |= 1u << i;
	}
	return mask;
}

static void touch(struct efix *f, const char *name)
{
	struct kv_node_info n;

	assert_int_equal(efix_lookup(f, name, &n), 0);
	kvfs_page_touch(f->fs, &n);
}

/* used follows the extents of published pages; an eviction down to a
 * target takes the least recently used pages (p0 and p1 were just read,
 * so they stay), frees exactly their space, counts them, and the deletes
 * are durable: the reopened store has the same pages and usage. */
static void usage_follows_publish_and_evict(void **state)
{
	struct efix *f = *state;
	uint64_t fp = footprint(SIZE), pages = 0;
	struct kvfs_cap_stats s;

	efix_open(f);
	efix_layer(f);
	s = stats(f);
	assert_int_equal(s.capacity, 64 * MIB);
	assert_int_equal(s.high, 64 * MIB / 100 * KVFS_EVICT_HIGH_DEFAULT);
	assert_int_equal(s.low, 64 * MIB / 100 * KVFS_EVICT_LOW_DEFAULT);
	assert_false(s.authoritative);
	assert_int_equal(s.used, 0);
	assert_int_equal(s.reserved, 0);

	publish_aged(f);
	assert_int_equal(stats(f).used, NPAGES * fp);
	touch(f, "p0");
	touch(f, "p1");
	assert_int_equal(kvfs_evict(f->fs, 4 * fp, 0, &pages), 0);
	assert_int_equal(pages, 6);
	s = stats(f);
	assert_int_equal(s.used, 4 * fp);
	assert_int_equal(s.evictions, 6);
	assert_int_equal(s.evicted_bytes, 6 * fp);
	assert_int_equal(s.eviction_runs, 1);
	assert_int_equal(present(f), 0x303);       /* p0 p1 p8 p9 */

	efix_reopen(f);
	assert_int_equal(present(f), 0x303);
	assert_int_equal(stats(f).used, 4 * fp);
	assert_int_equal(efix_close(f), 0);
}

/* Access times set by reads reach the manifest (the flush at close) and
 * survive a reopen; the pages not read keep theirs. Then a store not read
 * since: its flush has nothing to write, and the times stay as they were. */
static void touched_times_survive_a_reopen(void **state)
{
	struct efix *f = *state;
	struct kv_node_info n;
	int64_t t0, before;

	efix_open(f);
	efix_layer(f);
	t0 = publish_aged(f);
	before = kvfs_now_ns();
	touch(f, "p3");
	efix_reopen(f);
	assert_int_equal(efix_lookup(f, "p3", &n), 0);
	assert_true(n.attr.atime_ns >= before);
	assert_int_equal(efix_lookup(f, "p4", &n), 0);
	assert_int_equal(n.attr.atime_ns, t0 + 4 * 1000000000ll);
	efix_reopen(f);
	assert_int_equal(efix_lookup(f, "p3", &n), 0);
	assert_true(n.attr.atime_ns >= before);
	assert_int_equal(efix_lookup(f, "p5", &n), 0);
	assert_int_equal(n.attr.atime_ns, t0 + 5 * 1000000000ll);
	assert_int_equal(efix_close(f), 0);
}

/* kvfs gc: refuses a wrong ABI and malformed requests (evicting nothing);
 * an age sweep takes exactly the pages last read before the cutoff; a
 * target takes the oldest of the rest until usage is within it, and one
 * above usage takes nothing. */
static void gc_checks_target_and_age(void **state)
{
	struct efix *f = *state;
	uint64_t fp = footprint(SIZE);
	struct kvfs_gc_arg a;
	int64_t t0;

	efix_open(f);
	efix_layer(f);
	t0 = publish_aged(f);

	a = (struct kvfs_gc_arg){ .abi = KVFS_ABI_VERSION + 1, .flags = KVFS_GC_TARGET };
	assert_int_equal(kvfs_gc(f->fs, &a), -EPROTO);
	a = (struct kvfs_gc_arg){ .abi = KVFS_ABI_VERSION,
				  .flags = KVFS_GC_TARGET | KVFS_GC_OLDER,
				  .older_than_ns = t0 + 5 };
	assert_int_equal(kvfs_gc(f->fs, &a), -EINVAL);
	a = (struct kvfs_gc_arg){ .abi = KVFS_ABI_VERSION };
	assert_int_equal(kvfs_gc(f->fs, &a), -EINVAL);
	a = (struct kvfs_gc_arg){ .abi = KVFS_ABI_VERSION, .flags = KVFS_GC_OLDER };
	assert_int_equal(kvfs_gc(f->fs, &a), -EINVAL);
	a = (struct kvfs_gc_arg){ .abi = KVFS_ABI_VERSION, .flags = KVFS_GC_TARGET,
				  .reserved = { 1, 0 } };
	assert_int_equal(kvfs_gc(f->fs, &a), -EINVAL);
	assert_int_equal(present(f), (1u << NPAGES) - 1);
	assert_int_equal(stats(f).used, NPAGES * fp);

	a = (struct kvfs_gc_arg){ .abi = KVFS_ABI_VERSION, .flags = KVFS_GC_OLDER,
				  .older_than_ns = t0 + 4 * 1000000000ll + 1 };
	assert_int_equal(kvfs_gc(f->fs, &a), 0);
	assert_int_equal(a.pages, 5);                 /* p0..p4 */
	assert_int_equal(a.used_before, NPAGES * fp);
	assert_int_equal(a.used_after, 5 * fp);
	assert_int_equal(present(f), 0x3e0);

	a = (struct kvfs_gc_arg){ .abi = KVFS_ABI_VERSION, .flags = KVFS_GC_TARGET,
				  .target_bytes = 2 * fp };
	assert_int_equal(kvfs_gc(f->fs, &a), 0);
	assert_int_equal(a.pages, 3);                 /* p5..p7, the oldest left */
	assert_int_equal(a.used_after, 2 * fp);
	assert_int_equal(present(f), 0x300);

	a = (struct kvfs_gc_arg){ .abi = KVFS_ABI_VERSION, .flags = KVFS_GC_TARGET,
				  .target_bytes = 3 * fp };
	assert_int_equal(kvfs_gc(f->fs, &a), 0);
	assert_int_equal(a.pages, 0);
	assert_int_equal(a.used_before, a.used_after);
	assert_int_equal(stats(f).evictions, 8);
	assert_int_equal(efix_close(f), 0);
}

static void publish_at(struct efix *f, const char *name, unsigned seed, int64_t atime_ns)
{
	struct kv_obj_attr a = { .mode = 0444, .uid = getuid(), .gid = getgid() };
	struct kvfs_data *d = efix_payload(SIZE, seed);

	a.ctime_ns = a.mtime_ns = kvfs_now_ns();
	a.atime_ns = atime_ns;
	assert_int_equal(kvfs_page_publish(f->fs, f->layer, name, &a, d, 0, false, NULL), 0);
	kvfs_data_put(d);
}

static uint64_t extent_of(struct efix *f, const char *name)
{
	struct kv_node_info n;

	assert_int_equal(efix_lookup(f, name, &n), 0);
	return n.extent_id;
}

static int setup_dedup(void **state)
{
	int rc = efix_setup(state);

	((struct efix *)*state)->opts.dedup = true;
	return rc;
}

/* A page stored under two names (dedup shares one extent) is evicted by
 * the newest of them, both names at once: s0 and s0b, both older than
 * every other page, go first, together with p0 and p1; h0 and h0b stay,
 * because h0b was just read. Shared pages once went after every other
 * page, so a user storing each page twice kept all of them (p0..p2 went). */
static void shared_pages_go_by_their_newest_name(void **state)
{
	struct efix *f = *state;
	uint64_t fp = footprint(SIZE), pages = 0;
	struct kvfs_live *held;
	struct kv_node_info n;
	int64_t t0;

	efix_open(f);
	efix_layer(f);
	t0 = publish_aged(f);
	publish_at(f, "s0", 100, t0 - 50 * 1000000000ll);
	publish_at(f, "h0", 101, t0 - 50 * 1000000000ll);
	assert_int_equal(efix_sync(f), 0);
	publish_at(f, "s0b", 100, t0 - 40 * 1000000000ll);
	publish_at(f, "h0b", 101, t0 - 40 * 1000000000ll);
	assert_int_equal(efix_sync(f), 0);
	assert_int_equal(extent_of(f, "s0b"), extent_of(f, "s0"));
	assert_int_equal(extent_of(f, "h0b"), extent_of(f, "h0"));
	touch(f, "h0b");
	assert_int_equal(stats(f).used, (NPAGES + 2) * fp);

	assert_int_equal(kvfs_evict(f->fs, (NPAGES - 1) * fp, 0, &pages), 0);
	assert_int_equal(present(f), 0x3fc);       /* p2..p9 */
	assert_int_equal(efix_lookup(f, "s0", &n), -ENOENT);
	assert_int_equal(efix_lookup(f, "s0b", &n), -ENOENT);
	assert_int_equal(efix_lookup(f, "h0", &n), 0);
	assert_int_equal(efix_lookup(f, "h0b", &n), 0);
	assert_int_equal(pages, 4);
	assert_int_equal(stats(f).used, (NPAGES - 1) * fp);
	assert_int_equal(stats(f).evicted_shared, 2);

	efix_reopen(f);
	assert_int_equal(present(f), 0x3fc);
	efix_assert_page(f, "h0", SIZE, 101);

	/* A name held open keeps its twin too: evicting the twin alone
	 * would free nothing. p2 and p3 go instead. */
	publish_at(f, "t0", 102, t0 - 60 * 1000000000ll);
	assert_int_equal(efix_sync(f), 0);
	publish_at(f, "t0b", 102, t0 - 60 * 1000000000ll);
	assert_int_equal(efix_sync(f), 0);
	assert_int_equal(extent_of(f, "t0b"), extent_of(f, "t0"));
	assert_int_equal(efix_lookup(f, "t0", &n), 0);
	pthread_mutex_lock(&f->fs->ns_lock);        /* held open, not read */
	held = kvfs_live_get(f->fs, n.ino);
	held->opens++;
	pthread_mutex_unlock(&f->fs->ns_lock);
	assert_int_equal(kvfs_evict(f->fs, (NPAGES - 2) * fp, 0, &pages), 0);
	assert_int_equal(efix_lookup(f, "t0b", &n), 0);
	assert_int_equal(present(f), 0x3f0);       /* p4..p9 */
	pthread_mutex_lock(&f->fs->ns_lock);
	held->opens--;
	kvfs_live_maybe_drop(f->fs, held);
	pthread_mutex_unlock(&f->fs->ns_lock);
	assert_int_equal(efix_close(f), 0);
}

/* Hold bytes for a page being written, as a FUSE writer does (ns_lock). */
static struct kvfs_live *reserve(struct efix *f, uint64_t bytes)
{
	struct kvfs_live *l;

	pthread_mutex_lock(&f->fs->ns_lock);
	l = kvfs_live_get(f->fs, kv_index_next_ino(f->fs->idx));
	assert_non_null(l);
	l->reserved = bytes;
	f->fs->reserved_bytes += bytes;
	pthread_mutex_unlock(&f->fs->ns_lock);
	return l;
}

static void unreserve(struct efix *f, struct kvfs_live *l)
{
	pthread_mutex_lock(&f->fs->ns_lock);
	kvfs_page_unreserve(f->fs, l);
	kvfs_live_maybe_drop(f->fs, l);
	pthread_mutex_unlock(&f->fs->ns_lock);
}

/* Space held for pages being written is reported as reserved, counts as
 * usage for eviction, and a published page may not take it. */
static void reserved_space_counts_and_is_kept(void **state)
{
	struct efix *f = *state;
	uint64_t fp = footprint(SIZE), pages = 0;
	struct kv_store_usage u;
	struct kv_node_info n;
	struct kvfs_live *l;

	efix_open(f);
	efix_layer(f);
	publish_aged(f);
	l = reserve(f, 3 * fp);
	assert_int_equal(stats(f).reserved, 3 * fp);
	assert_int_equal(stats(f).used, NPAGES * fp);
	/* usage is 13 pages' worth: down to 11 takes two pages */
	assert_int_equal(kvfs_evict(f->fs, (NPAGES + 1) * fp, 0, &pages), 0);
	assert_int_equal(pages, 2);
	assert_int_equal(present(f), 0x3fc);
	assert_int_equal(stats(f).used, (NPAGES - 2) * fp);
	unreserve(f, l);
	assert_int_equal(stats(f).reserved, 0);

	/* hold all that is left: a page published now finds no room */
	kv_store_usage(f->fs->store, &u);
	l = reserve(f, u.avail - fp / 2);
	assert_int_equal(efix_publish(f, "big", SIZE, 1, NULL), -ENOSPC);
	assert_int_equal(efix_lookup(f, "big", &n), -ENOENT);
	assert_int_equal(stats(f).used, (NPAGES - 2) * fp);
	unreserve(f, l);
	assert_int_equal(efix_publish(f, "big", SIZE, 1, NULL), 0);
	assert_int_equal(efix_sync(f), 0);
	assert_int_equal(stats(f).used, (NPAGES - 1) * fp);
	assert_int_equal(efix_close(f), 0);
}

static int setup_small(void **state)
{
	return efix_setup_cap(state, 4 * MIB);
}

/* An authoritative store of 4 MiB takes four 1 MiB pages, refuses the
 * fifth with ENOSPC, never reports more used than capacity,
 * and takes a page again once one was deleted and its delete durable. */
static void authoritative_store_refuses_when_full(void **state)
{
	struct efix *f = *state;
	uint64_t fp = footprint(MIB);
	struct kvfs_cap_stats s;
	char name[16];
	int i, rc = 0;

	f->opts.authoritative = true;
	efix_open(f);
	efix_layer(f);
	for (i = 0; i < 8; i++) {
		snprintf(name, sizeof(name), "p%d", i);
		rc = efix_publish(f, name, MIB, (unsigned)i, NULL);
		if (rc < 0)
			break;
	}
	assert_int_equal(rc, -ENOSPC);
	assert_int_equal(i, 4);               /* exactly the capacity */
	assert_int_equal(efix_sync(f), 0);
	s = stats(f);
	assert_true(s.authoritative);
	assert_int_equal(s.capacity, 4 * MIB);
	assert_int_equal(s.used, 4 * fp);
	assert_true(s.used <= s.capacity);
	snprintf(name, sizeof(name), "p%d", i);
	assert_int_equal(efix_publish(f, name, MIB, 9, NULL), -ENOSPC);
	assert_int_equal(efix_unlink(f, "p0"), 0);
	assert_int_equal(efix_sync(f), 0);
	assert_int_equal(stats(f).used, 3 * fp);
	assert_int_equal(efix_publish(f, name, MIB, 9, NULL), 0);
	assert_int_equal(efix_sync(f), 0);
	assert_int_equal(stats(f).used, 4 * fp);
	assert_int_equal(efix_close(f), 0);
}

/* An empty page is charged one block: in an authoritative store of 4 MiB
 * with one block left, a create takes it (a second gets ENOSPC), and the
 * page's first bytes take that block over rather than needing another. */
static void an_empty_page_takes_the_last_block(void **state)
{
	struct efix *f = *state;
	struct kvfs_file *fh, *more;
	struct kv_node_info n;

	f->opts.authoritative = true;
	efix_open(f);
	efix_layer(f);
	for (unsigned i = 0; i < 3; i++) {
		char name[16];

		snprintf(name, sizeof(name), "p%u", i);
		assert_int_equal(efix_publish(f, name, MIB, i, NULL), 0);
	}
	assert_int_equal(efix_publish(f, "q", MIB - KV_ALIGN, 7, NULL), 0);
	assert_int_equal(efix_sync(f), 0);
	assert_int_equal(stats(f).used, 4 * MIB - KV_ALIGN);
	assert_int_equal(kvfs_file_create(f->fs, f->layer, "new", 0644, getuid(), getgid(),
					  &fh, &n), 0);
	assert_int_equal(stats(f).used, 4 * MIB);           /* its name's block */
	assert_int_equal(kvfs_file_create(f->fs, f->layer, "more", 0644, getuid(), getgid(),
					  &more, &n), -ENOSPC);
	assert_int_equal(kvfs_file_write(f->fs, fh, "x", 1, 0, false), 0);
	kvfs_file_release(f->fs, fh);
	assert_int_equal(efix_sync(f), 0);
	assert_int_equal(efix_lookup(f, "new", &n), 0);
	assert_int_equal(n.size, 1);
	assert_int_equal(stats(f).used, 4 * MIB);
	assert_int_equal(efix_close(f), 0);
}

/* Above the high mark with every page held open: the idle evictor looks
 * (a run, finding nothing) and then looks less and less often, and takes
 * nothing held open. Its looks come 1, 2, 4 s apart: 3 runs in 7.5 s,
 * where one a second would make 7. Its fruitless runs do not count
 * towards a writer's ENOSPC. */
static void idle_evictor_backs_off(void **state)
{
	struct efix *f = *state;
	struct kvfs_file *open_files[3];
	struct kv_node_info n;
	uint64_t runs;
	char name[16];

	efix_open(f);
	efix_layer(f);
	for (int i = 0; i < 3; i++) {
		snprintf(name, sizeof(name), "p%d", i);
		assert_int_equal(efix_publish(f, name, MIB, (unsigned)i, NULL), 0);
	}
	assert_int_equal(efix_sync(f), 0);
	assert_int_equal(efix_close(f), 0);
	f->opts.offline = false;       /* the evictor runs */
	f->opts.evict_high = 50;       /* 3 MiB of 4 is above it */
	f->opts.evict_low = 40;
	efix_reopen(f);
	for (int i = 0; i < 3; i++) {  /* well within its first second */
		snprintf(name, sizeof(name), "p%d", i);
		assert_int_equal(efix_lookup(f, name, &n), 0);
		assert_int_equal(kvfs_file_open(f->fs, n.ino, O_RDONLY, 0, &open_files[i]), 0);
	}
	efix_sleep_ms(7500);
	runs = stats(f).eviction_runs;
	assert_true(runs >= 2);        /* it looked without being asked: 1, 3, 7 s */
	assert_true(runs <= 4);
	assert_int_equal(stats(f).evictions, 0);
	/* Those idle runs found nothing, but no writer asked for them: a
	 * writer is refused only after FULL_STUCK_RUNS (3) runs of its own. */
	assert_int_equal(kvfs_space_wait_run(f->fs, MIB), 0);
	assert_int_equal(kvfs_space_wait_run(f->fs, MIB), 0);
	assert_int_equal(kvfs_space_wait_run(f->fs, MIB), -ENOSPC);
	for (int i = 0; i < 3; i++)
		kvfs_file_release(f->fs, open_files[i]);
	assert_int_equal(efix_close(f), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(usage_follows_publish_and_evict,
						efix_setup, efix_teardown),
		cmocka_unit_test_setup_teardown(touched_times_survive_a_reopen,
						efix_setup, efix_teardown),
		cmocka_unit_test_setup_teardown(gc_checks_target_and_age,
						efix_setup, efix_teardown),
		cmocka_unit_test_setup_teardown(shared_pages_go_by_their_newest_name,
						setup_dedup, efix_teardown),
		cmocka_unit_test_setup_teardown(reserved_space_counts_and_is_kept,
						efix_setup, efix_teardown),
		cmocka_unit_test_setup_teardown(authoritative_store_refuses_when_full,
						setup_small, efix_teardown),
		cmocka_unit_test_setup_teardown(an_empty_page_takes_the_last_block,
						setup_small, efix_teardown),
		cmocka_unit_test_setup_teardown(idle_evictor_backs_off,
						setup_small, efix_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
