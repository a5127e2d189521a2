/*
 * The data side of a fast-path READ: pages resolved by fastpath.c are read
 * from their extents by the store's io_uring, O_DIRECT, straight into the
 * engine's region when the destination is 4 KiB aligned and holds the
 * whole footprint, else through a bounce buffer. Pages go to
 * kv_store_read_many in chunks; it keeps the store's queue depth of them on
 * the device from this thread, with no hand-off to the I/O thread, and each
 * page is verified as soon as it lands while the next are still in flight.
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

#define CHUNK_PAGES 1024
#define CHUNK_BOUNCE_MAX (64ull << 20)   /* bounce bytes per chunk */

/* Pages handed to the store in one kv_store_read_many call. */
struct chunk {
	struct fp_batch *b;
	struct kv_io io[CHUNK_PAGES];
	struct fp_page *pg[CHUNK_PAGES];
	void *bounce[CHUNK_PAGES];
	unsigned n;
};

/* Can this page's footprint land in its destination directly? */
static bool direct_ok(const struct fp_batch *b, const struct fp_page *p)
{
	const struct kvfs_page_desc *d = &b->d[p->idx];

	return ((uintptr_t)(b->r->base + d->dst_off)) % KV_ALIGN == 0 &&
	       d->dst_len >= kv_extent_footprint(&p->ext);
}

/* Fill c with the next disk pages from *next. */
static void chunk_fill(struct chunk *c, struct fp_page *pages, uint32_t n,
		       uint32_t *next)
{
	struct fp_batch *b = c->b;
	uint64_t bounced = 0;

	c->n = 0;
	while (*next < n && c->n < CHUNK_PAGES && bounced < CHUNK_BOUNCE_MAX) {
		struct fp_page *p = &pages[(*next)++];
		struct kv_io *io = &c->io[c->n];
		uint64_t fp = kv_extent_footprint(&p->ext);

		if (p->src != FP_DISK)
			continue;
		memset(io, 0, sizeof(*io));
		io->op = KV_IO_READ;
		io->ext = p->ext;
		c->bounce[c->n] = NULL;
		if (direct_ok(b, p)) {
			io->buf = b->r->base + b->d[p->idx].dst_off;
		} else {
			c->bounce[c->n] = kv_buf_alloc(fp);
			if (!c->bounce[c->n]) {
				b->status[p->idx] = -ENOMEM;
				continue;
			}
			io->buf = c->bounce[c->n];
			bounced += fp;
		}
		c->pg[c->n++] = p;
	}
}

/* A page failed: no byte of it may remain where the engine looks. */
static void fail_page(struct fp_batch *b, const struct fp_page *p, int32_t err)
{
	const struct kvfs_page_desc *d = &b->d[p->idx];
	uint64_t fp = kv_extent_footprint(&p->ext);

	b->status[p->idx] = err;
	kvfs_region_zero(b->r, d->dst_off, d->dst_len < fp ? d->dst_len : fp);
}

/*
 * A page read straight into the region did not match. Either the disk is
 * bad, or the engine replaced the memory under the region (hole punch,
 * shrink and regrow) so that a registered buffer still points at the old
 * pages. Drop the registrations and read once more through a private
 * buffer: only a second mismatch is corruption.
 */
static int32_t reread_page(struct fp_batch *b, const struct fp_page *p)
{
	void *buf;
	int rc;

	kv_store_fixed_forget(b->r->id);
	rc = kv_store_read_verified(b->fs->store, &p->ext, p->hash, &buf);
	if (rc == KV_ERR_CHECKSUM)
		atomic_fetch_add(&b->fs->st.checksum_failures, 1);
	if (rc < 0)
		return rc == KV_ERR_CHECKSUM || rc == -EIO ? -EIO : rc;
	kv_log(KV_LOG_WARN, "fast path: page inode %" PRIu64 " read fine a second time: region %016" PRIx64 "'s memory changed under its registration",
	       p->ino, b->r->id);
	rc = kvfs_region_store(b->r, b->d[p->idx].dst_off, buf, p->size);
	free(buf);
	return rc;
}

/* Verify one completed read and deliver it; the page's final status. */
static int32_t finish_page(struct fp_batch *b, struct chunk *c, unsigned k)
{
	struct fp_page *p = c->pg[k];
	const struct kvfs_page_desc *d = &b->d[p->idx];
	uint8_t h[KV_HASH_LEN];
	int rc = c->io[k].res;

	if (rc < 0) {
		kv_log(rc == -EFAULT ? KV_LOG_WARN : KV_LOG_ERR, "fast path: page inode %" PRIu64 " (segment %u of stripe %u, offset %" PRIu64 "): read failed: %s",
		       p->ino, p->ext.segment, p->ext.stripe, p->ext.offset,
		       kv_strerror(rc));
		return rc == -EFAULT ? -EFAULT : -EIO;
	}
	if (c->bounce[k]) {
		kv_hash128(c->bounce[k], p->size, h);
		if (memcmp(h, p->hash, KV_HASH_LEN) == 0) {
			b->out_flags[p->idx] |= KVFS_DESC_BOUNCED;
			atomic_fetch_add(&b->fs->st.fast_bounced, 1);
			return kvfs_region_store(b->r, d->dst_off, c->bounce[k], p->size);
		}
	} else {
		rc = kvfs_region_hash(b->r, d->dst_off, p->size, h);
		if (rc < 0)
			return rc;
		if (memcmp(h, p->hash, KV_HASH_LEN) == 0)
			return 0;
		return reread_page(b, p);
	}
	atomic_fetch_add(&b->fs->st.checksum_failures, 1);
	kv_log(KV_LOG_ERR, "fast path: page inode %" PRIu64 ": checksum mismatch (segment %u of stripe %u, offset %" PRIu64 ", %" PRIu64 " bytes); destination zeroed",
	       p->ino, p->ext.segment, p->ext.stripe, p->ext.offset, p->size);
	return -EIO;
}

/* Runs as each read completes, while later ones are still on the device. */
static void page_done(void *arg, struct kv_io *io)
{
	struct chunk *c = arg;
	unsigned k = (unsigned)(io - c->io);
	int32_t rc = finish_page(c->b, c, k);

	if (rc < 0)
		fail_page(c->b, c->pg[k], rc);
	else
		c->b->a.bytes += c->pg[k]->size;
	free(c->bounce[k]);
	c->bounce[k] = NULL;
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
	struct chunk *c = malloc(sizeof(*c));
	/* The region is registered with the thread's ring once, so reads into
	 * it skip per-read page pinning; the id names this mapping only. */
	struct kv_fixed_buf fb = { b->r->base, b->r->len, b->r->id };
	uint32_t next = 0;

	copy_ram_pages(b, pages, n);
	if (!c) {
		for (uint32_t i = 0; i < n; i++)
			if (pages[i].src == FP_DISK)
				b->status[pages[i].idx] = -ENOMEM;
		return;
	}
	c->b = b;
	do {
		chunk_fill(c, pages, n, &next);
		if (c->n)
			kv_store_read_many(b->fs->store, c->io, c->n, &fb, page_done, c);
	} while (next < n);
	free(c);
}
