/*
 * The engine's common ground, which every engine module may call: payload
 * buffers shared by reference, the clock, directory times, the front
 * end's hooks, and the manifest-damaged switch. It calls no other engine
 * module. The live-page table is live.c; opening and closing a store,
 * which starts and stops every module, is open.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kvfs_i.h"

int64_t kvfs_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- payload buffers ---- */

struct kvfs_data *kvfs_data_new(uint64_t cap)
{
	struct kvfs_data *d = calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	cap = (cap + KV_ALIGN - 1) & ~(uint64_t)(KV_ALIGN - 1);
	if (cap == 0)
		cap = KV_ALIGN;
	d->bytes = kv_buf_get(cap);   /* not zeroed: see kvfs_data in kvfs_i.h */
	if (!d->bytes) {
		free(d);
		return NULL;
	}
	d->cap = cap;
	atomic_init(&d->refs, 1);
	return d;
}

struct kvfs_data *kvfs_data_get(struct kvfs_data *d)
{
	atomic_fetch_add(&d->refs, 1);
	return d;
}

void kvfs_data_put(struct kvfs_data *d)
{
	if (d && atomic_fetch_sub(&d->refs, 1) == 1) {
		kv_buf_put(d->bytes, d->cap);
		free(d);
	}
}

uint64_t kvfs_data_footprint(const struct kvfs_data *d)
{
	/* the struct and malloc's header for it */
	return kv_buf_footprint(d->cap) + sizeof(*d) + 16;
}

int kvfs_data_reserve(struct kvfs_data *d, uint64_t need)
{
	uint64_t cap = d->cap;
	uint8_t *nb;

	if (need <= cap)
		return 0;
	while (cap < need)
		cap *= 2;
	nb = kv_buf_get(cap);   /* past d->size: undefined, as before */
	if (!nb)
		return -ENOMEM;
	memcpy(nb, d->bytes, d->size);
	kv_buf_put(d->bytes, d->cap);
	d->bytes = nb;
	d->cap = cap;
	return 0;
}

void kvfs_dir_changed(struct kvfs *fs, uint64_t ino)
{
	struct kv_node_info d;

	if (kv_index_get(fs->idx, ino, &d) < 0 || d.kind == KV_KIND_PAGE)
		return;
	d.attr.mtime_ns = d.attr.ctime_ns = kvfs_now_ns();
	kv_index_update(fs->idx, ino, &d, KV_UPD_ATTR);
}

void kvfs_space_refused(struct kvfs *fs)
{
	atomic_fetch_add(&fs->st.space_refused, 1);
}

void kvfs_set_hooks(struct kvfs *fs, const struct kvfs_hooks *h)
{
	atomic_store(&fs->hooks, h);
}

uint64_t kvfs_hook_name_gone(struct kvfs *fs, uint64_t parent, const char *name)
{
	const struct kvfs_hooks *h = atomic_load(&fs->hooks);

	return h && h->name_gone ? h->name_gone(h->ctx, parent, name) : 0;
}

int kvfs_hook_names_sent(struct kvfs *fs, uint64_t ticket, unsigned timeout_ms)
{
	const struct kvfs_hooks *h = atomic_load(&fs->hooks);

	return h && h->names_sent ? h->names_sent(h->ctx, ticket, timeout_ms) : 0;
}

void kvfs_manifest_damaged(struct kvfs *fs, int err)
{
	int none = 0;

	if (atomic_compare_exchange_strong(&fs->manifest_err, &none, err))
		kv_log(KV_LOG_ERR, "the manifest of %s is damaged (%s): refusing every change "
		       "from now on (EIO); unmount, then run `kvfs fsck --rebuild %s`",
		       fs->store_dir, kv_strerror(err), fs->store_dir);
}

int kvfs_changes_damaged(struct kvfs *fs)
{
	int64_t now, last;
	int rc = kvfs_load_result(fs);

	if (rc < 0 && !atomic_load(&fs->manifest_err)) {
		/* Not damage (that is logged below): the load stopped. */
		return rc == -ECANCELED ? -ESHUTDOWN : -EIO;
	}
	if (!atomic_load_explicit(&fs->manifest_err, memory_order_relaxed))
		return 0;
	now = kvfs_now_ns();
	last = atomic_load(&fs->refused_log_ns);
	if (now - last > 60 * 1000000000ll &&
	    atomic_compare_exchange_strong(&fs->refused_log_ns, &last, now))
		kv_log(KV_LOG_ERR, "refusing a change to %s: its manifest is damaged "
		       "(see above)", fs->store_dir);
	return -EIO;
}

