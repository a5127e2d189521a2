/*
 * The data side of a fast-path READ: pages resolved by fastpath.c are read
 * from their extents by the store's io_uring, O_DIRECT, straight into the
 * engine's region when the destination is 4 KiB aligned and holds the
 * whole footprint, else through a bounce buffer. Reads go out in windows of
 * up to WIN_IOS pages, two windows in flight, so the device always has the
 * next window queued while this thread verifies the previous one.
 *
 * Every page is checked against its XXH3-128 before its status says 0; a
 * page that fails has its destination zeroed, so the engine never finds
 * wrong bytes where a page should be, whatever it does with the status.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "fastpath.h"

#define WIN_IOS 64
#define WIN_BOUNCE_MAX (64ull << 20)   /* bounce bytes per window */

struct window {
	struct kvfs_io_wait {
		pthread_mutex_t lock;
		pthread_cond_t cv;
		bool done;
	} wait;
	struct kv_io io[WIN_IOS];
	struct fp_page *pg[WIN_IOS];
	void *bounce[WIN_IOS];
	unsigned n;
	int submit_rc;
};

static void window_done(void *arg)
{
	struct window *w = arg;

	pthread_mutex_lock(&w->wait.lock);
	w->wait.done = true;
	pthread_cond_signal(&w->wait.cv);
	pthread_mutex_unlock(&w->wait.lock);
}

static void window_wait(struct window *w)
{
	pthread_mutex_lock(&w->wait.lock);
	while (!w->wait.done)
		pthread_cond_wait(&w->wait.cv, &w->wait.lock);
	pthread_mutex_unlock(&w->wait.lock);
}

/* Can this page's footprint land in its destination directly? */
static bool direct_ok(const struct fp_batch *b, const struct fp_page *p)
{
	const struct kvfs_page_desc *d = &b->d[p->idx];

	return ((uintptr_t)(b->r->base + d->dst_off)) % KV_ALIGN == 0 &&
	       d->dst_len >= kv_extent_footprint(&p->ext);
}

/* Fill w with the next disk pages from *next and submit it. */
static void window_submit(struct fp_batch *b, struct window *w,
			  struct fp_page *pages, uint32_t n, uint32_t *next)
{
	uint64_t bounced = 0;

	w->n = 0;
	w->submit_rc = 0;
	w->wait.done = false;
	while (*next < n && w->n < WIN_IOS && bounced < WIN_BOUNCE_MAX) {
		struct fp_page *p = &pages[(*next)++];
		struct kv_io *io = &w->io[w->n];
		uint64_t fp = kv_extent_footprint(&p->ext);

		if (p->src != FP_DISK)
			continue;
		memset(io, 0, sizeof(*io));
		io->op = KV_IO_READ;
		io->ext = p->ext;
		w->bounce[w->n] = NULL;
		if (direct_ok(b, p)) {
			io->buf = b->r->base + b->d[p->idx].dst_off;
		} else {
			w->bounce[w->n] = kv_buf_alloc(fp);
			if (!w->bounce[w->n]) {
				b->status[p->idx] = -ENOMEM;
				continue;
			}
			io->buf = w->bounce[w->n];
			bounced += fp;
		}
		w->pg[w->n++] = p;
	}
	if (w->n == 0) {
		w->wait.done = true;
		return;
	}
	w->submit_rc = kv_store_io_async(b->fs->store, w->io, w->n, window_done, w);
	if (w->submit_rc < 0)
		w->wait.done = true;
}

/* A page failed: no byte of it may remain where the engine looks. */
static void fail_page(struct fp_batch *b, const struct fp_page *p, int32_t err)
{
	const struct kvfs_page_desc *d = &b->d[p->idx];
	uint64_t fp = kv_extent_footprint(&p->ext);

	b->status[p->idx] = err;
	kvfs_region_zero(b->r, d->dst_off, d->dst_len < fp ? d->dst_len : fp);
}

/* Verify one completed read and deliver it; the page's final status. */
static int32_t finish_page(struct fp_batch *b, struct window *w, unsigned k)
{
	struct fp_page *p = w->pg[k];
	const struct kvfs_page_desc *d = &b->d[p->idx];
	uint8_t h[KV_HASH_LEN];
	int rc = w->submit_rc ? w->submit_rc : w->io[k].res;

	if (rc < 0) {
		kv_log(KV_LOG_ERR, "fast path: page inode %" PRIu64 " (segment %u of stripe %u, offset %" PRIu64 "): read failed: %s",
		       p->ino, p->ext.segment, p->ext.stripe, p->ext.offset,
		       kv_strerror(rc));
		return rc == -EFAULT ? -EFAULT : -EIO;
	}
	if (w->bounce[k]) {
		kv_hash128(w->bounce[k], p->size, h);
		if (memcmp(h, p->hash, KV_HASH_LEN) == 0) {
			b->out_flags[p->idx] |= KVFS_DESC_BOUNCED;
			atomic_fetch_add(&b->fs->st.fast_bounced, 1);
			return kvfs_region_store(b->r, d->dst_off, w->bounce[k], p->size);
		}
	} else {
		rc = kvfs_region_hash(b->r, d->dst_off, p->size, h);
		if (rc < 0)
			return rc;
		if (memcmp(h, p->hash, KV_HASH_LEN) == 0)
			return 0;
	}
	atomic_fetch_add(&b->fs->st.checksum_failures, 1);
	kv_log(KV_LOG_ERR, "fast path: page inode %" PRIu64 ": checksum mismatch (segment %u of stripe %u, offset %" PRIu64 ", %" PRIu64 " bytes); destination zeroed",
	       p->ino, p->ext.segment, p->ext.stripe, p->ext.offset, p->size);
	return -EIO;
}

static void window_finish(struct fp_batch *b, struct window *w)
{
	for (unsigned k = 0; k < w->n; k++) {
		int32_t rc = finish_page(b, w, k);

		if (rc < 0)
			fail_page(b, w->pg[k], rc);
		else
			b->a.bytes += w->pg[k]->size;
		free(w->bounce[k]);
		w->bounce[k] = NULL;
	}
	w->n = 0;
}

/* Pages still in RAM (sealed, commit pending) are copied from there. */
static void copy_ram_pages(struct fp_batch *b, struct fp_page *pages, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		struct fp_page *p = &pages[i];
		int rc;

		if (p->src != FP_RAM)
			continue;
		rc = kvfs_region_store(b->r, b->d[p->idx].dst_off, p->ram->bytes, p->size);
		kvfs_data_put(p->ram);
		p->ram = NULL;
		if (rc < 0) {
			b->status[p->idx] = rc;
			continue;
		}
		b->out_flags[p->idx] |= KVFS_DESC_RAM;
		b->a.bytes += p->size;
		atomic_fetch_add(&b->fs->st.bytes_read_ram, p->size);
	}
}

void kvfs_fast_read_pages(struct fp_batch *b, struct fp_page *pages, uint32_t n)
{
	struct window *w = calloc(2, sizeof(*w));
	uint32_t next = 0;
	unsigned cur = 0;

	copy_ram_pages(b, pages, n);
	if (!w) {
		for (uint32_t i = 0; i < n; i++)
			if (pages[i].src == FP_DISK)
				b->status[pages[i].idx] = -ENOMEM;
		return;
	}
	for (int k = 0; k < 2; k++) {
		pthread_mutex_init(&w[k].wait.lock, NULL);
		pthread_cond_init(&w[k].wait.cv, NULL);
		window_submit(b, &w[k], pages, n, &next);
	}
	while (w[0].n || w[1].n) {
		window_wait(&w[cur]);
		window_finish(b, &w[cur]);
		window_submit(b, &w[cur], pages, n, &next);
		cur ^= 1;
	}
	for (int k = 0; k < 2; k++) {
		pthread_mutex_destroy(&w[k].wait.lock);
		pthread_cond_destroy(&w[k].wait.cv);
	}
	free(w);
}
