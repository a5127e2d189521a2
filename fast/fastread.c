/*
 * The data side of a fast-path READ: pages resolved by fastpath.c are read
 * from their extents by the store's io_uring, O_DIRECT, straight into the
 * engine's region when the destination is 4 KiB aligned and holds the
 * whole footprint, else through a bounce buffer. Pages go to
 * kv_store_read_many in chunks; it keeps the store's queue depth of them on
 * the device from this thread, with no hand-off to the I/O thread, and each
 * page is verified as soon as it lands while the next are still in flight.
 *
 * On a stripe in memory (tmpfs) there is nothing for a device to do: the
 * page is copied out of the segment's mapping into the region and hashed
 * in the same pass (kv_store_map_extent, kvfs_region_store_mapped), by this
 * thread and the verifier, instead of a kernel copy and then a hash.
 *
 * Every page is checked against its XXH3-128 before its status says 0; a
 * page that fails has its destination zeroed, so the engine never finds
 * wrong bytes where a page should be, whatever it does with the status.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fastpath.h"

#define CHUNK_PAGES 1024
#define HELPER_MIN_PAGES 16     /* fewer: a thread costs more than it saves */
/* ... unless the pages are copied here (mapped): then the copy is the work,
 * and two pages of 1 MiB are worth a second thread */
#define HELPER_MIN_MAPPED_BYTES (2ull << 20)
#define CHUNK_BOUNCE_MAX (64ull << 20)   /* bounce bytes per chunk */

/*
 * Pages handed to the store in one kv_store_read_many call. Checking a page
 * (hashing it) on the thread that drives the ring delays refilling it, and
 * pages of a batch tend to land together; so with a spare CPU a second
 * thread verifies landed pages while this one keeps the device busy. The
 * queue has one producer (the ring's callback) and two consumers.
 */
struct chunk {
	struct fp_batch *b;
	/* Pages read by the store: [0, nio); pages copied from a mapping:
	 * [CHUNK_PAGES - nmap, CHUNK_PAGES), their source in src. */
	struct kv_io io[CHUNK_PAGES];
	struct fp_page *pg[CHUNK_PAGES];
	void *bounce[CHUNK_PAGES];
	const void *src[CHUNK_PAGES];
	void *hold[CHUNK_PAGES];
	unsigned nio, nmap;
	uint64_t mapped_bytes;
	/* landed pages waiting to be verified */
	unsigned q[CHUNK_PAGES];
	_Atomic unsigned produced, taken;
	_Atomic bool helper_asleep, done;
	_Atomic uint64_t bytes;          /* delivered by either thread */
	bool helper;                     /* a verifier thread runs */
	pthread_mutex_t lock;
	pthread_cond_t cv;
};

/* Can this page's footprint land in its destination directly? */
static bool direct_ok(const struct fp_batch *b, const struct fp_page *p)
{
	const struct kvfs_page_desc *d = &b->d[p->idx];

	return ((uintptr_t)(b->dr->base + d->dst_off)) % KV_ALIGN == 0 &&
	       d->dst_len >= kv_extent_footprint(&p->ext);
}

static void fail_page(struct fp_batch *b, const struct fp_page *p, int32_t err);

/* Fill c with the next disk pages from *next. */
static void chunk_fill(struct chunk *c, struct fp_page *pages, uint32_t n,
		       uint32_t *next)
{
	struct fp_batch *b = c->b;
	uint64_t bounced = 0;

	c->nio = c->nmap = 0;
	c->mapped_bytes = 0;
	while (*next < n && c->nio + c->nmap < CHUNK_PAGES && bounced < CHUNK_BOUNCE_MAX) {
		struct fp_page *p = &pages[(*next)++];
		struct kv_io *io = &c->io[c->nio];
		uint64_t fp = kv_extent_footprint(&p->ext);
		unsigned k = CHUNK_PAGES - 1 - c->nmap;
		int rc;

		if (p->src != FP_DISK)
			continue;
		rc = kv_store_map_extent(b->fs->store, &p->ext, &c->src[k], &c->hold[k]);
		if (rc == 0) {
			c->bounce[k] = NULL;
			c->io[k].res = 0;
			c->pg[k] = p;
			c->nmap++;
			c->mapped_bytes += p->size;
			continue;
		}
		if (rc != -EOPNOTSUPP) {
			fail_page(b, p, rc == -ENOMEM ? rc : -EIO);
			continue;
		}
		memset(io, 0, sizeof(*io));
		io->op = KV_IO_READ;
		io->ext = p->ext;
		c->src[c->nio] = NULL;
		c->hold[c->nio] = NULL;
		c->bounce[c->nio] = NULL;
		if (direct_ok(b, p)) {
			io->buf = b->dr->base + b->d[p->idx].dst_off;
		} else {
			c->bounce[c->nio] = kv_buf_get(fp);   /* the read fills it */
			if (!c->bounce[c->nio]) {
				b->status[p->idx] = -ENOMEM;
				continue;
			}
			io->buf = c->bounce[c->nio];
			bounced += fp;
		}
		c->pg[c->nio++] = p;
	}
}

/* A page failed: no byte of it may remain where the engine looks. */
static void fail_page(struct fp_batch *b, const struct fp_page *p, int32_t err)
{
	const struct kvfs_page_desc *d = &b->d[p->idx];
	uint64_t fp = kv_extent_footprint(&p->ext);

	b->status[p->idx] = err;
	kvfs_region_zero(b->dr, d->dst_off, d->dst_len < fp ? d->dst_len : fp);
}

/* What an engine's memory can trigger (a region changed or shrunk under a
 * read) and device errors, which come in bursts: both rate-limited. */
static struct kv_log_limit engine_log, device_log;

/* Why a page is read a second time, through a private buffer. */
enum reread_why {
	REREAD_REGISTRATION,   /* read into the region: its registration may be stale */
	REREAD_COPY,           /* copied from a mapping: the engine may have written
	                        * the destination while it was hashed */
	REREAD_SEGMENT,        /* the segment's mapping broke (file cut short) */
};

/*
 * A page did not match. Either the disk (or the segment) is bad, or the
 * engine changed its region under the read: replaced the memory under a
 * registration (hole punch, shrink and regrow), so that a registered buffer
 * still points at the old pages, or wrote the destination while the copy
 * out of a mapping was hashed. Read once more through a private buffer,
 * which the engine cannot touch: only a second mismatch is corruption.
 */
static int32_t reread_page(struct fp_batch *b, const struct fp_page *p, enum reread_why why)
{
	static const char *const said[] = {
		[REREAD_REGISTRATION] = "the region's memory changed under its registration",
		[REREAD_COPY] = "the engine wrote the region while the page was copied into it",
		[REREAD_SEGMENT] = "its segment's mapping broke (the segment file was cut short)",
	};
	void *buf;
	int rc;

	if (why == REREAD_REGISTRATION)
		kv_store_fixed_forget(b->dr->id);
	rc = kv_store_read_verified(b->fs->store, &p->ext, p->hash, &buf);
	if (rc == KV_ERR_CHECKSUM)
		atomic_fetch_add(&b->fs->st.checksum_failures, 1);
	if (rc < 0)
		return rc == KV_ERR_CHECKSUM || rc == -EIO ? -EIO : rc;
	KV_LOG_LIMITED(why == REREAD_SEGMENT ? &device_log : &engine_log, KV_LOG_WARN,
		       "fast path: page inode %" PRIu64 " read fine a second time (region %016"
		       PRIx64 "): %s", p->ino, b->dr->id, said[why]);
	rc = kvfs_region_store(b->dr, b->d[p->idx].dst_off, buf, p->size);
	kv_buf_put(buf, kv_extent_footprint(&p->ext));
	return rc;
}

/* Verify one completed read and deliver it; the page's final status. */
static int32_t finish_page(struct fp_batch *b, struct chunk *c, unsigned k)
{
	struct fp_page *p = c->pg[k];
	const struct kvfs_page_desc *d = &b->d[p->idx];
	uint8_t h[KV_HASH_LEN];
	int rc = c->io[k].res;

	if (c->src[k]) {
		rc = kvfs_region_store_mapped(b->dr, d->dst_off, c->hold[k], c->src[k],
					      p->size, h);
		if (rc == -EIO) {       /* the segment broke, not the page */
			kv_store_unmap_extent(c->hold[k]);
			c->hold[k] = NULL;
			c->src[k] = NULL;
			return reread_page(b, p, REREAD_SEGMENT);
		}
		if (rc < 0)
			return rc;
		if (memcmp(h, p->hash, KV_HASH_LEN) == 0)
			return 0;
		/* The last 64 bytes (and all of a short page) are hashed from
		 * the destination, which the engine may write meanwhile. */
		return reread_page(b, p, REREAD_COPY);
	}
	if (rc < 0) {
		KV_LOG_LIMITED(rc == -EFAULT ? &engine_log : &device_log,
			       rc == -EFAULT ? KV_LOG_WARN : KV_LOG_ERR, "fast path: page inode %" PRIu64 " (segment %u of stripe %u, offset %" PRIu64 "): read failed: %s",
			       p->ino, p->ext.segment, p->ext.stripe, p->ext.offset,
			       kv_strerror(rc));
		return rc == -EFAULT ? -EFAULT : -EIO;
	}
	if (c->bounce[k]) {
		kv_hash128(c->bounce[k], p->size, h);
		if (memcmp(h, p->hash, KV_HASH_LEN) == 0) {
			b->out_flags[p->idx] |= KVFS_DESC_BOUNCED;
			atomic_fetch_add(&b->fs->st.fast_bounced, 1);
			return kvfs_region_store(b->dr, d->dst_off, c->bounce[k], p->size);
		}
	} else {
		rc = kvfs_region_hash(b->dr, d->dst_off, p->size, h);
		if (rc < 0)
			return rc;
		if (memcmp(h, p->hash, KV_HASH_LEN) == 0)
			return 0;
		return reread_page(b, p, REREAD_REGISTRATION);
	}
	atomic_fetch_add(&b->fs->st.checksum_failures, 1);
	kv_log(KV_LOG_ERR, "fast path: page inode %" PRIu64 ": checksum mismatch (segment %u of stripe %u, offset %" PRIu64 ", %" PRIu64 " bytes); destination zeroed",
	       p->ino, p->ext.segment, p->ext.stripe, p->ext.offset, p->size);
	return -EIO;
}

/* A buffer for a copy that fills it: only the padding is zeroed. */
static void *copy_buf(uint64_t fp, uint64_t size)
{
	void *p;

	p = kv_buf_get(fp);
	if (p)
		memset((uint8_t *)p + size, 0, fp - size);
	return p;
}

/*
 * Keep a verified page in the RAM tier, on its second miss (kvfs_ram_admit:
 * the engine holds this copy already, only a page read again is worth
 * keeping). A bounced page's buffer is handed over as it is; a page read
 * straight into the region is copied out (the engine owns that memory and
 * may change it the moment the call returns).
 */
static void promote(struct chunk *c, unsigned k)
{
	struct fp_batch *b = c->b;
	struct fp_page *p = c->pg[k];
	uint64_t fp = kv_extent_footprint(&p->ext);
	struct kvfs_data *d;

	if (!kvfs_ram_admit(b->fs, p->extent_id))
		return;
	d = calloc(1, sizeof(*d));
	if (!d)
		return;
	if (c->bounce[k]) {
		d->bytes = c->bounce[k];
		c->bounce[k] = NULL;
	} else if (c->src[k]) {
		/* From the segment, which nobody writes: the engine's copy may
		 * have changed already. Hashed as it is copied, all the same. */
		uint8_t h[KV_HASH_LEN];

		d->bytes = copy_buf(fp, p->size);
		if (!d->bytes ||
		    kv_store_copy_mapped(c->hold[k], d->bytes, c->src[k], p->size, h) < 0 ||
		    memcmp(h, p->hash, KV_HASH_LEN)) {
			kv_buf_put(d->bytes, fp);
			free(d);
			return;
		}
	} else {
		/* The engine can write its region at any time, also between
		 * the verification and this copy: check the copy itself, or
		 * every reader of the tier could get the engine's bytes. */
		uint8_t h[KV_HASH_LEN];

		d->bytes = copy_buf(fp, p->size);
		if (!d->bytes ||
		    kvfs_region_load(b->dr, b->d[p->idx].dst_off, d->bytes, p->size) < 0 ||
		    (kv_hash128(d->bytes, p->size, h), memcmp(h, p->hash, KV_HASH_LEN))) {
			kv_buf_put(d->bytes, fp);
			free(d);
			return;
		}
	}
	d->size = p->size;
	d->cap = fp;
	atomic_init(&d->refs, 1);
	kvfs_ram_put(b->fs, p->extent_id, d,
		     kvfs_pinned(p->mode), KVFS_RAM_READ);
	kvfs_data_put(d);
}

/* Runs as each read completes, while later ones are still on the device. */
static void verify(struct chunk *c, unsigned k)
{
	int32_t rc = finish_page(c->b, c, k);

	if (rc < 0) {
		fail_page(c->b, c->pg[k], rc);
	} else {
		atomic_fetch_add(&c->bytes, c->pg[k]->size);
		atomic_fetch_add(&c->b->fs->st.pages_read_disk, 1);
		promote(c, k);
	}
	kv_buf_put(c->bounce[k], kv_extent_footprint(&c->pg[k]->ext));
	c->bounce[k] = NULL;
	kv_store_unmap_extent(c->hold[k]);
	c->hold[k] = NULL;
	c->src[k] = NULL;
}

/* Verify one queued page if there is one; false if the queue is empty. */
static bool verify_next(struct chunk *c)
{
	unsigned t = atomic_load(&c->taken);

	while (t < atomic_load(&c->produced))
		if (atomic_compare_exchange_weak(&c->taken, &t, t + 1)) {
			verify(c, c->q[t]);
			return true;
		}
	return false;
}

static void *verifier_main(void *arg)
{
	struct chunk *c = arg;

	for (;;) {
		if (verify_next(c))
			continue;
		pthread_mutex_lock(&c->lock);
		atomic_store(&c->helper_asleep, true);
		while (atomic_load(&c->taken) >= atomic_load(&c->produced) &&
		       !atomic_load(&c->done))
			pthread_cond_wait(&c->cv, &c->lock);
		atomic_store(&c->helper_asleep, false);
		pthread_mutex_unlock(&c->lock);
		if (atomic_load(&c->done) &&
		    atomic_load(&c->taken) >= atomic_load(&c->produced))
			return NULL;
	}
}

static void wake_helper(struct chunk *c)
{
	if (!atomic_load(&c->helper_asleep))
		return;
	pthread_mutex_lock(&c->lock);
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->lock);
}

/* Page k is ready (a read landed on the ring thread, or its bytes are
 * mapped): queue it, or verify it here. */
static void page_ready(struct chunk *c, unsigned k)
{
	if (!c->helper) {
		verify(c, k);
		return;
	}
	c->q[atomic_load(&c->produced)] = k;
	atomic_fetch_add(&c->produced, 1);
	wake_helper(c);
}

static void page_done(void *arg, struct kv_io *io)
{
	struct chunk *c = arg;

	page_ready(c, (unsigned)(io - c->io));
}

/* Read c's pages; with a spare CPU and enough pages, verify in parallel. */
static void chunk_read(struct chunk *c, const struct kv_fixed_buf *fb)
{
	static long ncpu;
	pthread_t helper;

	if (!ncpu)
		ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	atomic_store(&c->produced, 0);
	atomic_store(&c->taken, 0);
	atomic_store(&c->done, false);
	atomic_store(&c->helper_asleep, false);
	atomic_store(&c->bytes, 0);
	c->helper = ncpu > 1 &&
		    (c->nio + c->nmap >= HELPER_MIN_PAGES ||
		     (c->nmap >= 2 && c->mapped_bytes >= HELPER_MIN_MAPPED_BYTES)) &&
		    pthread_create(&helper, NULL, verifier_main, c) == 0;
	for (unsigned i = 0; i < c->nmap; i++)
		page_ready(c, CHUNK_PAGES - 1 - i);
	if (c->nio)
		kv_store_read_many(c->b->fs->store, c->io, c->nio, fb, page_done, c);
	if (c->helper) {
		while (verify_next(c))
			;
		pthread_mutex_lock(&c->lock);
		atomic_store(&c->done, true);
		pthread_cond_signal(&c->cv);
		pthread_mutex_unlock(&c->lock);
		pthread_join(helper, NULL);
	}
	c->b->a.bytes += atomic_load(&c->bytes);
}

/* Pages in RAM (sealed with the commit pending, or in the RAM tier) are
 * copied from there. */
static void copy_ram_pages(struct fp_batch *b, struct fp_page *pages, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		struct fp_page *p = &pages[i];
		int rc;

		if (p->src != FP_RAM && p->src != FP_CACHE)
			continue;
		rc = kvfs_region_store(b->dr, b->d[p->idx].dst_off, p->ram->bytes, p->size);
		kvfs_data_put(p->ram);
		p->ram = NULL;
		if (rc < 0) {
			b->status[p->idx] = rc;
			continue;
		}
		b->out_flags[p->idx] |= p->src == FP_RAM ? KVFS_DESC_RAM : KVFS_DESC_CACHED;
		b->a.bytes += p->size;
		atomic_fetch_add(&b->fs->st.bytes_read_ram, p->size);
	}
}

void kvfs_fast_read_pages(struct fp_batch *b, struct fp_page *pages, uint32_t n)
{
	struct chunk *c = malloc(sizeof(*c));
	/* The region is registered with the thread's ring once, so reads into
	 * it skip per-read page pinning; the id names this mapping only. */
	struct kv_fixed_buf fb = { b->dr->base, b->dr->len, b->dr->id };
	uint32_t next = 0;

	copy_ram_pages(b, pages, n);
	if (!c) {
		for (uint32_t i = 0; i < n; i++)
			if (pages[i].src == FP_DISK)
				b->status[pages[i].idx] = -ENOMEM;
		return;
	}
	c->b = b;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cv, NULL);
	do {
		chunk_fill(c, pages, n, &next);
		if (c->nio + c->nmap)
			chunk_read(c, &fb);
	} while (next < n);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->cv);
	free(c);
}
