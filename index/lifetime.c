/*
 * The in-memory index made and freed: its slab, tables, root and lock
 * (the namespace itself: index.c).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "index_i.h"

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int make_root(struct kv_index *x)
{
	struct node *r = slab_alloc(&x->slab, idx_node_bytes(1));

	if (!r)
		return -ENOMEM;
	memset(r, 0, idx_node_bytes(1));
	r->prev = r->next = IDX_NIL;
	r->kind = KV_KIND_ROOT;
	r->u.d = calloc(1, sizeof(*r->u.d));
	if (!r->u.d) {
		idx_node_free(x, r);
		return -ENOMEM;
	}
	r->ino = KV_ROOT_INO;
	r->kind = KV_KIND_ROOT;
	r->mode = 0755;
	r->ctime_ns = r->mtime_ns = r->atime_ns = now_ns();
	if (htab_insert(&x->by_ino, r) < 0) {
		idx_node_free(x, r);
		return -ENOMEM;
	}
	x->root = r;
	return 0;
}

static int init_lock(pthread_rwlock_t *lock)
{
	pthread_rwlockattr_t a;
	int rc;

	/* Lookups come from many FUSE threads at once; glibc's default (reader
	 * preference) would let them starve the committer and unlink forever. */
	if ((rc = pthread_rwlockattr_init(&a)))
		return -rc;
	pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	rc = pthread_rwlock_init(lock, &a);
	pthread_rwlockattr_destroy(&a);
	return -rc;
}

int kv_index_new(struct kv_index **out)
{
	struct kv_index *x = calloc(1, sizeof(*x));
	int rc = -ENOMEM;

	*out = NULL;
	if (!x)
		return -ENOMEM;
	rc = slab_init(&x->slab);
	if (rc < 0) {
		kv_log(KV_LOG_ERR, "index: cannot reserve %llu GiB of address space for "
		       "its records: %s", (unsigned long long)(SLAB_SPAN >> 30),
		       kv_strerror(rc));
		free(x);
		return rc;
	}
	rc = -ENOMEM;
	/* every element of the tables comes from the slab (htab.h) */
	if (htab_init(&x->by_ino, idx_node_ino_hash, x->slab.base) ||
	    htab_init(&x->by_name, idx_node_name_hash, x->slab.base) ||
	    (rc = idx_extents_init(x)) < 0)
		goto fail_tables;
	rc = make_root(x);
	if (rc < 0)
		goto fail_tables;
	rc = init_lock(&x->lock);
	if (rc < 0)
		goto fail_root;
	pthread_mutex_init(&x->touched_lock, NULL);
	x->touched_max = IDX_TOUCHED_MAX;
	x->next_ino = KV_ROOT_INO + 1;
	x->next_ext = 1;
	*out = x;
	return 0;
fail_root:
	idx_node_free(x, x->root);
fail_tables:
	htab_fini(&x->by_ino);
	htab_fini(&x->by_name);
	idx_extents_fini(x);
	slab_fini(&x->slab);
	free(x);
	return rc;
}

void kv_index_free(struct kv_index *x)
{
	struct node *model, *layer;

	if (!x)
		return;
	idx_loader_free(x->loader);
	/* Only directories own memory outside the slab, and they are all in
	 * the tree: no pass over every page. */
	for (model = x->root->u.d->first; model; model = idx_next(x, model)) {
		for (layer = model->u.d->first; layer; layer = idx_next(x, layer))
			idx_dir_data_free(layer);
		idx_dir_data_free(model);
	}
	idx_dir_data_free(x->root);
	slab_fini(&x->slab);
	htab_fini(&x->by_ino);
	htab_fini(&x->by_name);
	idx_extents_fini(x);
	pthread_rwlock_destroy(&x->lock);
	pthread_mutex_destroy(&x->touched_lock);
	free(x->touched);
	free(x->retired);
	free(x);
}
