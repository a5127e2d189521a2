/*
 * Shared fixture of the engine unit tests (test_engine_*.c): the engine's
 * real code, linked alone (link_whole engine_lib, no fuse), on a store
 * made with kvfs_mkfs in its own /var/tmp directory (not /tmp: segments
 * are opened with O_DIRECT) and opened with kvfs_open, as offline tools
 * do. Helpers make a model and a layer through the namespace module and
 * publish pages as the fast-path write does.
 */
#ifndef KV_TEST_ENGINE_FIXTURE_H
#define KV_TEST_ENGINE_FIXTURE_H

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvfs_i.h"

#define MIB (1024ull * 1024)

struct efix {
	char dir[64];
	char store[128];
	struct kvfs_opts opts;
	struct kvfs *fs;
	uint64_t model, layer;     /* "m" and "m/00" once efix_layer ran */
};

/* A new store of capacity bytes (segments of 16 MiB) in its own directory. */
static inline int efix_setup_cap(void **state, uint64_t capacity)
{
	struct efix *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	/* Placement as on a disk (one segment filled at a time), whatever
	 * file system /var/tmp is: some tests count segments. */
	setenv("KVFS_WRITE_HEADS", "1", 1);
	strcpy(f->dir, "/var/tmp/kvfs-test-engine-XXXXXX");
	if (!mkdtemp(f->dir)) {
		free(f);
		return -1;
	}
	snprintf(f->store, sizeof(f->store), "%s/store", f->dir);
	if (kvfs_mkfs(f->store, &(struct kvfs_mkfs_opts){ .capacity = capacity,
							  .segment_size = 16 * MIB }) < 0) {
		free(f);
		return -1;
	}
	kvfs_opts_default(&f->opts);
	f->opts.offline = true;     /* no evictor or loader thread unless asked */
	f->opts.dedup = false;      /* every page gets its own extent */
	*state = f;
	return 0;
}

static inline int efix_setup(void **state)
{
	return efix_setup_cap(state, 64 * MIB);
}

static inline int efix_teardown(void **state)
{
	struct efix *f = *state;
	char cmd[128];

	if (f->fs)
		kvfs_close(f->fs);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
	if (system(cmd) != 0)
		return -1;
	free(f);
	return 0;
}

/* Open the store with f->opts (tests set them first). */
static inline struct kvfs *efix_open(struct efix *f)
{
	assert_null(f->fs);
	assert_int_equal(kvfs_open(f->store, &f->opts, &f->fs), 0);
	assert_non_null(f->fs);
	return f->fs;
}

/* Close it: the count of changes lost (0 when everything committed). */
static inline uint64_t efix_close(struct efix *f)
{
	uint64_t lost = kvfs_close(f->fs);

	f->fs = NULL;
	return lost;
}

/* Reopen the store and find m/00 by name again. */
static inline void efix_reopen(struct efix *f)
{
	struct kv_node_info n;

	assert_int_equal(efix_close(f), 0);
	efix_open(f);
	assert_int_equal(kv_index_lookup(f->fs->idx, KV_ROOT_INO, "m", &n), 0);
	assert_int_equal(n.kind, KV_KIND_MODEL);
	f->model = n.ino;
	assert_int_equal(kv_index_lookup(f->fs->idx, f->model, "00", &n), 0);
	assert_int_equal(n.kind, KV_KIND_LAYER);
	f->layer = n.ino;
}

/* Model "m" and its layer "00" (once a store). */
static inline void efix_layer(struct efix *f)
{
	struct kv_node_info n;

	assert_int_equal(kvfs_ns_mkdir(f->fs, KV_ROOT_INO, "m", 0755, getuid(), getgid(),
				       &n), 0);
	assert_int_equal(n.kind, KV_KIND_MODEL);
	f->model = n.ino;
	assert_int_equal(kvfs_ns_mkdir(f->fs, f->model, "00", 0755, getuid(), getgid(),
				       &n), 0);
	assert_int_equal(n.kind, KV_KIND_LAYER);
	f->layer = n.ino;
}

/* A payload of size bytes, byte i = seed + i * 7 (mod 256). */
static inline struct kvfs_data *efix_payload(uint64_t size, unsigned seed)
{
	struct kvfs_data *d = kvfs_data_new(size ? size : 1);

	assert_non_null(d);
	d->size = size;
	for (uint64_t i = 0; i < size; i++)
		d->bytes[i] = (uint8_t)(seed + i * 7);
	return d;
}

static inline bool efix_payload_is(const struct kvfs_data *d, uint64_t size,
				   unsigned seed)
{
	if (d->size != size)
		return false;
	for (uint64_t i = 0; i < size; i++)
		if (d->bytes[i] != (uint8_t)(seed + i * 7))
			return false;
	return true;
}

/* Publish page name in layer with charged bytes of dirty budget (the
 * caller's until this returns 0). The engine's result. */
static inline int efix_publish_charged(struct efix *f, uint64_t layer, const char *name,
				       uint64_t size, unsigned seed, uint64_t charged,
				       struct kv_node_info *out)
{
	struct kv_obj_attr a = { .mode = 0444, .uid = getuid(), .gid = getgid() };
	struct kvfs_data *d = efix_payload(size, seed);
	int rc;

	a.atime_ns = a.mtime_ns = a.ctime_ns = kvfs_now_ns();
	rc = kvfs_page_publish(f->fs, layer, name, &a, d, charged, false, out);
	kvfs_data_put(d);
	return rc;
}

static inline int efix_publish(struct efix *f, const char *name, uint64_t size,
			       unsigned seed, struct kv_node_info *out)
{
	return efix_publish_charged(f, f->layer, name, size, seed, 0, out);
}

/* Page name of f's layer holds the payload of (size, seed), read back
 * (RAM copy, RAM tier or the disk, verified). */
static inline void efix_assert_page(struct efix *f, const char *name, uint64_t size,
				    unsigned seed)
{
	struct kv_node_info n;
	struct kvfs_data *d;

	assert_int_equal(kv_index_lookup(f->fs->idx, f->layer, name, &n), 0);
	assert_int_equal(n.size, size);
	assert_int_equal(kvfs_page_load(f->fs, n.ino, &d), 0);
	assert_true(efix_payload_is(d, size, seed));
	kvfs_data_put(d);
}

/* Arm a fault seam as user.kvfs.fault does (needs opts.fault_injection). */
static inline void efix_fault(struct efix *f, const char *spec)
{
	assert_int_equal(kvfs_fault_set(f->fs, spec, strlen(spec)), 0);
}

/* Everything queued so far is durable: kvfs_commit_wait_all's result. */
static inline int efix_sync(struct efix *f)
{
	return kvfs_commit_wait_all(f->fs, kvfs_commit_mark(f->fs));
}

/* Open the store, make m/00 and a durable page name of (size, seed) in it. */
static inline void efix_open_with_page(struct efix *f, const char *name, uint64_t size,
				       unsigned seed)
{
	efix_open(f);
	efix_layer(f);
	assert_int_equal(efix_publish(f, name, size, seed, NULL), 0);
	assert_int_equal(efix_sync(f), 0);
}

/* Page name of the layer, looked up in the index: 0 or -errno. */
static inline int efix_lookup(struct efix *f, const char *name, struct kv_node_info *out)
{
	return kv_index_lookup(f->fs->idx, f->layer, name, out);
}

/* Unlink page name of the layer (kvfs_ns_unlink): 0 or -errno. */
static inline int efix_unlink(struct efix *f, const char *name)
{
	return kvfs_ns_unlink(f->fs, f->layer, name);
}

static inline uint64_t efix_used(struct efix *f)
{
	struct kv_store_usage u;

	kv_store_usage(f->fs->store, &u);
	return u.used;
}

static inline void efix_sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

#endif
