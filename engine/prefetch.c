/*
 * The RAM tier's loader: pages an engine named with KVFS_IOC_PREFETCH are
 * read here, on a thread of their own, while the engine computes. Each
 * batch of queued pages goes to the device together (kv_store_read_many,
 * which counts as reads for the scheduler), every payload is verified
 * against its checksum, and only then kept in the tier.
 *
 * The queue holds at most the tier's budget in bytes, and half of it for
 * one uid (engine/ramtier.c): more could not stay resident anyway, so the
 * excess is dropped at once and counted.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvfs_i.h"

#define LOAD_BATCH 64

struct pf_item {
	struct kvfs_prefetch_page pg;
	struct pf_item *next;
};

struct kvfs_prefetch {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cv;
	struct pf_item *head, **tail;
	uint64_t queued_bytes;
	bool stop, running;
};

struct pf_load {
	struct kvfs *fs;
	struct kv_io io[LOAD_BATCH];
	struct kvfs_prefetch_page *pg[LOAD_BATCH];
	unsigned dropped;
};

/* Keep one landed page if it is what was named: a page freed since then
 * fails here (its extent left the index, or holds other bytes now). */
static int keep_page(struct kvfs *fs, const struct kvfs_prefetch_page *p,
		     void *buf, int res)
{
	struct kv_extent_rec er;
	uint8_t h[KV_HASH_LEN];
	struct kvfs_data *d;

	if (res < 0)
		return res;
	if (kv_index_extent_get(fs->idx, p->extent_id, &er) < 0)
		return -ENOENT;
	kv_hash128(buf, p->size, h);
	if (memcmp(h, p->hash, KV_HASH_LEN)) {
		atomic_fetch_add(&fs->st.checksum_failures, 1);
		kv_log(KV_LOG_ERR, "prefetch: extent %llu (segment %u of stripe %u, offset %llu): checksum mismatch; not kept",
		       (unsigned long long)p->extent_id, p->ext.segment,
		       p->ext.stripe, (unsigned long long)p->ext.offset);
		return -EIO;
	}
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->bytes = buf;
	d->size = p->size;
	d->cap = kv_extent_footprint(&p->ext);
	atomic_init(&d->refs, 1);
	kvfs_ram_put_prefetched(fs, p->extent_id, d, p->protect, p->uid);
	kvfs_data_put(d);
	return 0;
}

/* A read landed (on this thread): verify it while the others fly. */
static void landed(void *arg, struct kv_io *io)
{
	struct pf_load *l = arg;
	unsigned k = (unsigned)(io - l->io);

	if (keep_page(l->fs, l->pg[k], io->buf, io->res) < 0) {
		kv_buf_put(io->buf, kv_extent_footprint(&io->ext));
		l->dropped++;
	}
}

/* Read, verify and keep up to LOAD_BATCH pages. */
static void load_batch(struct kvfs *fs, struct pf_item **items, unsigned n)
{
	struct pf_load *l = calloc(1, sizeof(*l));
	unsigned k = 0;

	if (!l) {
		kvfs_ram_prefetch_dropped(fs, n);
		return;
	}
	l->fs = fs;
	for (unsigned i = 0; i < n; i++) {
		struct kvfs_prefetch_page *p = &items[i]->pg;

		if (kvfs_ram_has(fs, p->extent_id))
			continue;    /* loaded meanwhile */
		l->io[k].op = KV_IO_READ;
		l->io[k].ext = p->ext;
		l->io[k].buf = kv_buf_get(kv_extent_footprint(&p->ext));
		l->pg[k] = p;
		if (l->io[k].buf)
			k++;
		else
			l->dropped++;
	}
	if (k)
		kv_store_read_many(fs->store, l->io, k, NULL, landed, l);
	if (l->dropped)
		kvfs_ram_prefetch_dropped(fs, l->dropped);
	free(l);
}

static void *loader(void *arg)
{
	struct kvfs *fs = arg;
	struct kvfs_prefetch *q = fs->prefetch;
	struct pf_item *items[LOAD_BATCH];
	unsigned n;

	pthread_setname_np(pthread_self(), "kvfs-prefetch");
	for (;;) {
		pthread_mutex_lock(&q->lock);
		while (!q->head && !q->stop)
			pthread_cond_wait(&q->cv, &q->lock);
		if (q->stop) {
			pthread_mutex_unlock(&q->lock);
			return NULL;
		}
		for (n = 0; n < LOAD_BATCH && q->head; n++) {
			items[n] = q->head;
			q->head = q->head->next;
			q->queued_bytes -= items[n]->pg.size;
		}
		if (!q->head)
			q->tail = &q->head;
		pthread_mutex_unlock(&q->lock);
		load_batch(fs, items, n);
		for (unsigned i = 0; i < n; i++) {
			kvfs_ram_prefetch_unreserve(fs, items[i]->pg.uid, items[i]->pg.size);
			free(items[i]);
		}
	}
}

int kvfs_prefetch_start(struct kvfs *fs)
{
	struct kvfs_prefetch *q = calloc(1, sizeof(*q));
	int rc;

	if (!q)
		return -ENOMEM;
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->cv, NULL);
	q->tail = &q->head;
	fs->prefetch = q;
	rc = -pthread_create(&q->thread, NULL, loader, fs);
	if (rc < 0) {
		kv_log(KV_LOG_ERR, "prefetch: cannot start the loader thread: %s",
		       kv_strerror(rc));
		return rc;
	}
	q->running = true;
	return 0;
}

void kvfs_prefetch_stop(struct kvfs *fs)
{
	struct kvfs_prefetch *q = fs->prefetch;
	struct pf_item *it;

	if (!q)
		return;
	if (q->running) {
		pthread_mutex_lock(&q->lock);
		q->stop = true;
		pthread_cond_signal(&q->cv);
		pthread_mutex_unlock(&q->lock);
		pthread_join(q->thread, NULL);
	}
	while ((it = q->head)) {
		q->head = it->next;
		kvfs_ram_prefetch_unreserve(fs, it->pg.uid, it->pg.size);
		free(it);
	}
	pthread_mutex_destroy(&q->lock);
	pthread_cond_destroy(&q->cv);
	free(q);
	fs->prefetch = NULL;
}

bool kvfs_prefetch_queue(struct kvfs *fs, const struct kvfs_prefetch_page *pg)
{
	struct kvfs_prefetch *q = fs->prefetch;
	struct pf_item *it;

	if (!q || !fs->opts.ram_cache)
		return false;
	if (!kvfs_ram_prefetch_reserve(fs, pg->uid, pg->size))
		return false;
	pthread_mutex_lock(&q->lock);
	if (q->queued_bytes + pg->size > fs->opts.ram_cache ||
	    !(it = malloc(sizeof(*it)))) {
		pthread_mutex_unlock(&q->lock);
		kvfs_ram_prefetch_unreserve(fs, pg->uid, pg->size);
		return false;
	}
	it->pg = *pg;
	it->next = NULL;
	*q->tail = it;
	q->tail = &it->next;
	q->queued_bytes += pg->size;
	pthread_cond_signal(&q->cv);
	pthread_mutex_unlock(&q->lock);
	return true;
}
