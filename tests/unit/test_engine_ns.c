/*
 * The namespace module (engine/namespace.c) on a real engine, no mount:
 * kvfs_ns_mkdir makes models under the root and layers under models,
 * with the rules fuse/ops.c's mkdir relies on (reserved names, layer
 * numbers, one directory a number, the model's layer count, what may
 * hold a directory), changes the index and the parent at once, and queues
 * the rows: the directories are there after kvfs_close and kvfs_open.
 * unlink, rename, rmdir, setattr, pins and geometry change the index at
 * once and survive a reopen; a damaged manifest refuses every one (EIO).
 */
#include <sys/stat.h>

#include "engine_fixture.h"

static int mk(struct efix *f, uint64_t parent, const char *name, struct kv_node_info *n)
{
	return kvfs_ns_mkdir(f->fs, parent, name, 040750, 1234, 5678, n);
}

/* A model: kind, parent, mode bits only, owner, the root's times. */
static void mkdir_makes_a_model_under_the_root(void **state)
{
	struct efix *f = *state;
	struct kv_node_info n, root0, root1, again;
	int64_t before;

	efix_open(f);
	assert_int_equal(kv_index_get(f->fs->idx, KV_ROOT_INO, &root0), 0);
	before = kvfs_now_ns();
	assert_int_equal(mk(f, KV_ROOT_INO, "llama", &n), 0);
	assert_int_equal(n.kind, KV_KIND_MODEL);
	assert_int_equal(n.parent, KV_ROOT_INO);
	assert_string_equal(n.name, "llama");
	assert_int_equal(n.attr.mode, 0750);
	assert_int_equal(n.attr.uid, 1234);
	assert_int_equal(n.attr.gid, 5678);
	assert_true(n.attr.ctime_ns >= before && n.attr.mtime_ns == n.attr.ctime_ns);
	assert_int_equal(kv_index_lookup(f->fs->idx, KV_ROOT_INO, "llama", &again), 0);
	assert_int_equal(again.ino, n.ino);
	assert_int_equal(kv_index_get(f->fs->idx, KV_ROOT_INO, &root1), 0);
	assert_true(root1.attr.mtime_ns >= before);
	assert_int_equal(root1.nchildren, root0.nchildren + 1);

	assert_int_equal(mk(f, KV_ROOT_INO, "llama", &n), -EEXIST);
	assert_int_equal(mk(f, KV_ROOT_INO, ".kvfs", &n), -EPERM);
	assert_int_equal(mk(f, KV_ROOT_INO, ".kvfsx", &n), -EPERM);
	assert_int_equal(mk(f, 999999, "x", &n), -ENOENT);
	assert_int_equal(efix_close(f), 0);
}

/* Layers are named by their number: any padding, five digits at most,
 * one directory a number, below the model's layer count when it has a
 * geometry. Nothing goes under a layer or a page. */
static void mkdir_layer_rules(void **state)
{
	struct efix *f = *state;
	struct kv_node_info m, n, upd;

	efix_open(f);
	assert_int_equal(mk(f, KV_ROOT_INO, "m", &m), 0);
	assert_int_equal(mk(f, m.ino, "00", &n), 0);
	assert_int_equal(n.kind, KV_KIND_LAYER);
	assert_int_equal(n.layer, 0);
	assert_int_equal(mk(f, m.ino, "0", &n), -EEXIST);      /* layer 0 again */
	assert_int_equal(mk(f, m.ino, "00", &n), -EEXIST);
	assert_int_equal(mk(f, m.ino, "031", &n), 0);
	assert_int_equal(n.layer, 31);
	assert_int_equal(mk(f, m.ino, "abc", &n), -EINVAL);
	assert_int_equal(mk(f, m.ino, "1a", &n), -EINVAL);
	assert_int_equal(mk(f, m.ino, "123456", &n), -EINVAL);
	assert_int_equal(mk(f, m.ino, "99999", &n), 0);

	f->model = m.ino;
	assert_int_equal(kv_index_lookup(f->fs->idx, m.ino, "00", &n), 0);
	f->layer = n.ino;
	assert_int_equal(mk(f, f->layer, "x", &n), -EPERM);    /* under a layer */
	assert_int_equal(efix_publish(f, "page", 4096, 1, &n), 0);
	assert_int_equal(mk(f, n.ino, "x", &n), -ENOTDIR);     /* under a page */

	/* a model of 32 layers takes layers 0..31 only */
	assert_int_equal(mk(f, KV_ROOT_INO, "g", &m), 0);
	upd = m;
	upd.geo.layers = 32;
	assert_int_equal(kv_index_update(f->fs->idx, m.ino, &upd, KV_UPD_GEO), 0);
	assert_int_equal(mk(f, m.ino, "31", &n), 0);
	assert_int_equal(mk(f, m.ino, "32", &n), -EINVAL);
	assert_int_equal(efix_close(f), 0);
}

/* The rows were queued with the index changes: after a close and an open
 * the model and its layers are there, with their numbers and owners. */
static void directories_are_durable(void **state)
{
	struct efix *f = *state;
	struct kv_node_info m, l, n;

	efix_open(f);
	assert_int_equal(mk(f, KV_ROOT_INO, "m", &m), 0);
	assert_int_equal(mk(f, m.ino, "00", &l), 0);
	assert_int_equal(mk(f, m.ino, "7", &n), 0);
	assert_int_equal(efix_close(f), 0);

	efix_open(f);
	assert_int_equal(kv_index_lookup(f->fs->idx, KV_ROOT_INO, "m", &n), 0);
	assert_int_equal(n.ino, m.ino);
	assert_int_equal(n.kind, KV_KIND_MODEL);
	assert_int_equal(n.attr.uid, 1234);
	assert_int_equal(n.attr.mode, 0750);
	assert_int_equal(kv_index_lookup(f->fs->idx, m.ino, "00", &n), 0);
	assert_int_equal(n.ino, l.ino);
	assert_int_equal(n.layer, 0);
	assert_int_equal(kv_index_lookup(f->fs->idx, m.ino, "7", &n), 0);
	assert_int_equal(n.layer, 7);
	assert_int_equal(n.attr.gid, 5678);
	assert_int_equal(mk(f, m.ino, "07", &n), -EEXIST);     /* still layer 7 */
	assert_int_equal(efix_close(f), 0);
}

/* Pages created in 40 layers (more than a batch once remembered): every
 * layer's times, changed by the creates, are in the manifest after a
 * reopen. */
static void times_of_many_directories_are_durable(void **state)
{
	enum { L = 40 };
	struct efix *f = *state;
	struct kv_node_info m, l[L], n;
	int64_t mtime[L];
	char name[8];

	efix_open(f);
	assert_int_equal(mk(f, KV_ROOT_INO, "m", &m), 0);
	for (int i = 0; i < L; i++) {
		snprintf(name, sizeof(name), "%02d", i);
		assert_int_equal(mk(f, m.ino, name, &l[i]), 0);
	}
	assert_int_equal(efix_sync(f), 0);
	efix_sleep_ms(5);             /* the creates' times differ from the mkdirs' */
	for (int i = 0; i < L; i++)
		assert_int_equal(efix_publish_charged(f, l[i].ino, "p", 4096, (unsigned)i, 0,
						      NULL), 0);
	assert_int_equal(efix_sync(f), 0);
	for (int i = 0; i < L; i++) {
		assert_int_equal(kv_index_get(f->fs->idx, l[i].ino, &n), 0);
		assert_true(n.attr.mtime_ns > l[i].attr.mtime_ns);
		mtime[i] = n.attr.mtime_ns;
	}
	efix_reopen(f);
	for (int i = 0; i < L; i++) {
		assert_int_equal(kv_index_get(f->fs->idx, l[i].ino, &n), 0);
		assert_int_equal(n.attr.mtime_ns, mtime[i]);
	}
	assert_int_equal(efix_close(f), 0);
}

/* unlink and rename (replace, NOREPLACE, across layers), rmdir: the index
 * at once, the manifest after a reopen. */
static void unlink_rename_rmdir(void **state)
{
	struct efix *f = *state;
	struct kv_node_info a, b, l2, n;
	uint64_t l1;

	efix_open(f);
	efix_layer(f);
	l1 = f->layer;
	assert_int_equal(mk(f, f->model, "01", &l2), 0);
	assert_int_equal(efix_publish(f, "a", 4096, 1, &a), 0);
	assert_int_equal(efix_publish(f, "b", 4096, 2, &b), 0);
	assert_int_equal(efix_publish(f, "c", 4096, 3, &n), 0);
	assert_int_equal(kvfs_ns_unlink(f->fs, l1, "c"), 0);
	assert_int_equal(kvfs_ns_unlink(f->fs, l1, "c"), -ENOENT);
	assert_int_equal(kvfs_ns_unlink(f->fs, f->model, "00"), -EISDIR);
	/* NOREPLACE keeps both; replace leaves one page, a's, under b */
	assert_int_equal(kvfs_ns_rename(f->fs, l1, "a", l1, "b", false), -EEXIST);
	assert_int_equal(kvfs_ns_rename(f->fs, l1, "a", l1, "b", true), 0);
	assert_int_equal(efix_lookup(f, "a", &n), -ENOENT);
	assert_int_equal(efix_lookup(f, "b", &n), 0);
	assert_int_equal(n.ino, a.ino);
	/* across layers; layers keep their names; names are checked */
	assert_int_equal(kvfs_ns_rename(f->fs, l1, "b", l2.ino, "moved", true), 0);
	assert_int_equal(kvfs_ns_rename(f->fs, f->model, "01", f->model, "02", true), -EPERM);
	assert_int_equal(kvfs_ns_rename(f->fs, l2.ino, "moved", l1, "x/y", true), -EINVAL);
	assert_int_equal(kvfs_ns_rmdir(f->fs, f->model, "01"), -ENOTEMPTY);
	assert_int_equal(kvfs_ns_rmdir(f->fs, l2.ino, "moved"), -ENOTDIR);
	assert_int_equal(kvfs_ns_rename(f->fs, KV_ROOT_INO, "m", KV_ROOT_INO, "m2", true), 0);
	efix_sync(f);
	assert_int_equal(efix_close(f), 0);

	efix_open(f);
	assert_int_equal(kv_index_lookup(f->fs->idx, KV_ROOT_INO, "m", &n), -ENOENT);
	assert_int_equal(kv_index_lookup(f->fs->idx, KV_ROOT_INO, "m2", &n), 0);
	assert_int_equal(kv_index_lookup(f->fs->idx, n.ino, "01", &n), 0);
	assert_int_equal(kv_index_lookup(f->fs->idx, n.ino, "moved", &n), 0);
	assert_int_equal(n.ino, a.ino);
	assert_int_equal(n.state, KV_PAGE_DURABLE);
	assert_int_equal(kv_index_lookup(f->fs->idx, l1, "b", &n), -ENOENT);
	assert_int_equal(efix_close(f), 0);
}

/* Pins are root's: a chmod +t by another uid keeps the page unpinned (the
 * bit dropped, the rest of the mode taken), user.kvfs.pinned from it is
 * EPERM; root's pin stays through the owner's chmod, and the owner may
 * unpin. */
static void only_root_pins(void **state)
{
	struct efix *f = *state;
	struct kvfs_attr_change c = { .valid = KVFS_ATTR_MODE, .mode = 0640 | S_ISVTX,
				      .caller = 65534 };
	struct kv_node_info p, n;

	efix_open(f);
	efix_layer(f);
	assert_int_equal(efix_publish(f, "p", 4096, 1, &p), 0);
	assert_int_equal(kvfs_ns_setattr(f->fs, p.ino, &c, &n), 0);
	assert_int_equal(n.attr.mode, 0640);
	assert_false(kvfs_pinned(n.attr.mode));
	assert_int_equal(kvfs_ns_set_pinned(f->fs, p.ino, true, 65534), -EPERM);
	assert_int_equal((efix_lookup(f, "p", &n), n.attr.mode), 0640);
	assert_int_equal(kvfs_ns_set_pinned(f->fs, p.ino, true, 0), 0);
	c.mode = 0600 | S_ISVTX;          /* the owner's chmod keeps root's pin */
	assert_int_equal(kvfs_ns_setattr(f->fs, p.ino, &c, &n), 0);
	assert_int_equal(n.attr.mode, 0600 | S_ISVTX);
	assert_int_equal(kvfs_ns_set_pinned(f->fs, p.ino, false, 65534), 0);
	assert_int_equal((efix_lookup(f, "p", &n), n.attr.mode), 0600);
	c = (struct kvfs_attr_change){ .valid = KVFS_ATTR_MODE, .mode = 0644 | S_ISVTX };
	assert_int_equal(kvfs_ns_setattr(f->fs, p.ino, &c, &n), 0);   /* root: pins */
	assert_int_equal(n.attr.mode, 0644 | S_ISVTX);
	assert_int_equal(efix_close(f), 0);
}

/* setattr, pins and geometry: what each may change, kept across a reopen. */
static void attributes_pins_geometry(void **state)
{
	struct efix *f = *state;
	struct kvfs_attr_change c = { .valid = KVFS_ATTR_MODE | KVFS_ATTR_UID |
				      KVFS_ATTR_MTIME, .mode = 0640, .uid = 42,
				      .mtime_ns = 1000000007 };
	struct kv_geometry g = { .layers = 4, .kv_heads = 8, .head_dim = 128,
				 .dtype = "bf16", .page_tokens = 16 };
	struct kv_node_info p, n;

	efix_open(f);
	efix_layer(f);
	assert_int_equal(efix_publish(f, "p", 4096, 1, &p), 0);
	assert_int_equal(kvfs_ns_setattr(f->fs, p.ino, &c, &n), 0);
	assert_int_equal(n.attr.mode, 0640);
	assert_int_equal(n.attr.uid, 42);
	assert_int_equal(n.attr.mtime_ns, 1000000007);
	c = (struct kvfs_attr_change){ .valid = KVFS_ATTR_SIZE, .size = 1 };
	assert_int_equal(kvfs_ns_setattr(f->fs, p.ino, &c, &n), -EPERM);   /* sealed */
	assert_int_equal(kvfs_ns_setattr(f->fs, f->layer, &c, &n), -EISDIR);
	assert_int_equal(kvfs_ns_set_pinned(f->fs, p.ino, true, 0), 0);
	assert_int_equal(kvfs_ns_set_pinned(f->fs, f->layer, true, 0), -EPERM);
	assert_true(kvfs_pinned((efix_lookup(f, "p", &n), n.attr.mode)));
	assert_int_equal(kvfs_ns_set_geometry(f->fs, f->model, &g), -ENOTEMPTY);
	assert_int_equal(kvfs_ns_set_geometry(f->fs, f->layer, &g), -ENOTSUP);
	/* Pages that all have its page size (1 x 1 x 128 bf16 x 8 tokens,
	 * K and V: 4096 bytes) take a geometry, as a cp -a of a model sets
	 * it after the pages; one page of another size does not. */
	{
		struct kv_geometry fits = { .layers = 4, .kv_heads = 1, .head_dim = 128,
					    .dtype = "bf16", .page_tokens = 8 };
		struct kv_node_info m;

		assert_int_equal(kv_index_get(f->fs->idx, f->model, &m), 0);
		assert_int_equal(kvfs_ns_set_geometry(f->fs, f->model, &fits), 0);
		assert_int_equal(efix_publish(f, "q", 4096, 2, &n), 0);
		fits.page_tokens = 16;      /* 8192 bytes: p and q are not */
		assert_int_equal(kvfs_ns_set_geometry(f->fs, f->model, &fits), -ENOTEMPTY);
		fits.layers = 1;
		fits.page_tokens = 8;
		assert_int_equal(kvfs_ns_set_geometry(f->fs, f->model, &fits), 0);
		assert_int_equal(kv_index_get(f->fs->idx, f->model, &m), 0);
		assert_int_equal(m.geo.layers, 1);
	}
	assert_int_equal(mk(f, KV_ROOT_INO, "g", &n), 0);
	assert_int_equal(kvfs_ns_set_geometry(f->fs, n.ino, &g), 0);
	efix_sync(f);
	efix_reopen(f);
	assert_int_equal(efix_lookup(f, "p", &n), 0);
	assert_int_equal(n.attr.mode, 0640 | S_ISVTX);
	assert_int_equal(n.attr.uid, 42);
	assert_int_equal(n.attr.mtime_ns, 1000000007);
	assert_int_equal(kv_index_lookup(f->fs->idx, KV_ROOT_INO, "g", &n), 0);
	assert_int_equal(n.geo.layers, 4);
	assert_int_equal(n.geo.page_tokens, 16);
	assert_int_equal(efix_close(f), 0);
}

/* Once the manifest is known damaged, no change is acknowledged. */
static void damaged_manifest_refuses_changes(void **state)
{
	struct efix *f = *state;
	struct kvfs_attr_change c = { .valid = KVFS_ATTR_MODE, .mode = 0600 };
	struct kv_node_info p, n;

	efix_open(f);
	efix_layer(f);
	assert_int_equal(efix_publish(f, "p", 4096, 1, &p), 0);
	kvfs_manifest_damaged(f->fs, KV_ERR_CORRUPT);
	assert_int_equal(mk(f, KV_ROOT_INO, "x", &n), -EIO);
	assert_int_equal(kvfs_ns_unlink(f->fs, f->layer, "p"), -EIO);
	assert_int_equal(kvfs_ns_rename(f->fs, f->layer, "p", f->layer, "q", true), -EIO);
	assert_int_equal(kvfs_ns_rmdir(f->fs, f->model, "00"), -EIO);
	assert_int_equal(kvfs_ns_setattr(f->fs, p.ino, &c, &n), -EIO);
	assert_int_equal(kvfs_ns_set_pinned(f->fs, p.ino, true, 0), -EIO);
	assert_int_equal(efix_lookup(f, "p", &n), 0);
	assert_int_equal(n.attr.mode, 0444);
	efix_close(f);
}

/* The live-page table grows with its entries (a write flood of small pages
 * keeps 65,536 live at the default budget), and every entry stays found
 * across each rehash. */
static void live_table_grows_and_finds_every_entry(void **state)
{
	struct efix *f = *state;
	enum { N = 40000 };
	struct kvfs_live **l = calloc(N, sizeof(*l));
	size_t first;

	assert_non_null(l);
	efix_open(f);
	pthread_mutex_lock(&f->fs->ns_lock);
	first = f->fs->live_buckets;
	for (uint64_t i = 0; i < N; i++) {
		l[i] = kvfs_live_get(f->fs, 1000000 + i * 7);
		assert_non_null(l[i]);
		assert_ptr_equal(kvfs_live_get(f->fs, 1000000 + i * 7), l[i]);
	}
	assert_true(f->fs->live_buckets >= N / 2);
	assert_true(f->fs->live_buckets > first);
	assert_int_equal(f->fs->nlive, N);
	for (uint64_t i = 0; i < N; i++)
		assert_ptr_equal(kvfs_live_find(f->fs, 1000000 + i * 7), l[i]);
	assert_null(kvfs_live_find(f->fs, 1000000 + 1));
	for (uint64_t i = 0; i < N; i += 2)
		kvfs_live_maybe_drop(f->fs, l[i]);
	assert_int_equal(f->fs->nlive, N / 2);
	for (uint64_t i = 0; i < N; i++)
		if (i % 2)
			assert_ptr_equal(kvfs_live_find(f->fs, 1000000 + i * 7), l[i]);
		else
			assert_null(kvfs_live_find(f->fs, 1000000 + i * 7));
	for (uint64_t i = 1; i < N; i += 2)
		kvfs_live_maybe_drop(f->fs, l[i]);
	assert_int_equal(f->fs->nlive, 0);
	pthread_mutex_unlock(&f->fs->ns_lock);
	free(l);
	assert_int_equal(efix_close(f), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(live_table_grows_and_finds_every_entry,
						efix_setup, efix_teardown),
		cmocka_unit_test_setup_teardown(mkdir_makes_a_model_under_the_root,
						efix_setup, efix_teardown),
		cmocka_unit_test_setup_teardown(mkdir_layer_rules, efix_setup, efix_teardown),
		cmocka_unit_test_setup_teardown(directories_are_durable,
						efix_setup, efix_teardown),
		cmocka_unit_test_setup_teardown(times_of_many_directories_are_durable,
						efix_setup, efix_teardown),
		cmocka_unit_test_setup_teardown(unlink_rename_rmdir, efix_setup, efix_teardown),
		cmocka_unit_test_setup_teardown(only_root_pins, efix_setup, efix_teardown),
		cmocka_unit_test_setup_teardown(attributes_pins_geometry,
						efix_setup, efix_teardown),
		cmocka_unit_test_setup_teardown(damaged_manifest_refuses_changes,
						efix_setup, efix_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
