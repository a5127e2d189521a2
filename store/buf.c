/*
 * Payload buffers: KV_ALIGN-aligned memory for page bytes, reused instead
 * of asked from the kernel for every page. kv_buf_get hands out a buffer
 * whose bytes are undefined (the caller overwrites them: a copy, a read),
 * kv_buf_put takes it back; what a buffer costs in RAM is known exactly
 * (kv_buf_footprint), so the RAM tier can charge it.
 *
 * Two kinds, chosen by the rounded size alone (so get and put agree):
 *
 *   - small (up to KV_BUF_SLAB_MAX): slots of one size carved from 2 MiB
 *     mmap'd slabs, one class per 4 KiB multiple. No per-buffer header and
 *     no alignment slack: a 4 KiB page costs 4 KiB, where posix_memalign
 *     costs about 8 (the aligned chunk plus the fragment in front of it).
 *     Free slots are kept warm up to KV_BUF_IDLE_MAX bytes over all
 *     classes; past that a freed slot is given back with MADV_DONTNEED and
 *     kept, not resident, for reuse. Slabs are never unmapped.
 *   - large: one anonymous mmap each (exactly the rounded size, no
 *     header), up to KV_BUF_IDLE_MAX bytes of freed ones kept for reuse
 *     (same size only), the rest unmapped.
 *
 * So the memory resident outside live buffers is at most 2 * KV_BUF_IDLE_MAX
 * (or twice what kv_buf_set_idle_max set) plus 8 bytes of bookkeeping per
 * slot ever made. The daemon sets it to its write-back budget: a write
 * flood cycles that many bytes of buffers, and with only 32 MiB kept warm
 * most of them came back cold (MADV_DONTNEED'd, or unmapped), so each
 * reuse paid a page fault and a page of zeroing per 4 KiB again, the cost
 * the pool exists to avoid (measured: benchmarks/writes.md, issue 19).
 * A fresh mmap costs a page fault and a page of zeroing per 4 KiB on
 * first touch (17% of a write's time at 1 MiB per page in issue 21): a
 * reused buffer costs none.
 *
 * One mutex protects everything here; nothing is done under it but list
 * operations (mmap of a new slab aside).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "store.h"

#define SLAB_BYTES (2u << 20)
#define SLAB_CLASSES (KV_BUF_SLAB_MAX / KV_ALIGN)
#define LARGE_CLASSES 16

struct ptrvec {
	void **v;
	size_t n, cap;
};

struct slab_class {
	struct ptrvec warm;        /* free, resident */
	struct ptrvec cold;        /* free, given back (MADV_DONTNEED) */
	uint8_t *bump, *end;       /* unused part of the newest slab */
	size_t slots;              /* ever carved: both vectors can hold them all */
};

struct large_class {
	size_t size;               /* 0: unused */
	struct ptrvec warm;
};

static struct {
	pthread_mutex_t lock;
	struct slab_class slab[SLAB_CLASSES];
	struct large_class large[LARGE_CLASSES];
	uint64_t idle_small, idle_large;   /* warm free bytes of each kind */
	uint64_t idle_max;                 /* ... kept at most (0: the default) */
	struct kv_buf_stats st;
} pool = { .lock = PTHREAD_MUTEX_INITIALIZER };

static uint64_t idle_max(void)
{
	return pool.idle_max ? pool.idle_max : KV_BUF_IDLE_MAX;
}

void kv_buf_set_idle_max(uint64_t bytes)
{
	pthread_mutex_lock(&pool.lock);
	pool.idle_max = bytes > KV_BUF_IDLE_MAX ? bytes : KV_BUF_IDLE_MAX;
	pthread_mutex_unlock(&pool.lock);
}

static size_t round_size(size_t len)
{
	size_t size = (len + KV_ALIGN - 1) & ~(size_t)(KV_ALIGN - 1);

	return size ? size : KV_ALIGN;
}

uint64_t kv_buf_footprint(size_t len)
{
	size_t size = round_size(len);

	/* a small slot also costs room for its pointer in both free lists */
	return size <= KV_BUF_SLAB_MAX ? size + 2 * sizeof(void *) : size;
}

static int vec_push(struct ptrvec *pv, void *p)
{
	if (pv->n == pv->cap) {
		void **v = kv_array_room(pv->v, pv->n, &pv->cap, sizeof(*v), 64);

		if (!v)
			return -ENOMEM;
		pv->v = v;
	}
	pv->v[pv->n++] = p;
	return 0;
}

static int vec_reserve(struct ptrvec *pv, size_t want)
{
	void **v;

	if (pv->cap >= want)
		return 0;
	v = realloc(pv->v, want * sizeof(*v));
	if (!v)
		return -ENOMEM;
	pv->v = v;
	pv->cap = want;
	return 0;
}

static void *map(size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

static void *slab_get(size_t size, bool *reused)
{
	struct slab_class *c = &pool.slab[size / KV_ALIGN - 1];
	void *p;

	*reused = true;
	if (c->warm.n) {
		pool.idle_small -= size;
		return c->warm.v[--c->warm.n];
	}
	if (c->cold.n)
		return c->cold.v[--c->cold.n];   /* faults in on first touch */
	*reused = false;
	if ((size_t)(c->end - c->bump) < size) {
		size_t more = SLAB_BYTES / size;
		uint8_t *s = map(SLAB_BYTES);

		/* Room for every slot in either free list is made now, so
		 * kv_buf_put never fails for want of memory. */
		if (!s || vec_reserve(&c->warm, c->slots + more) < 0 ||
		    vec_reserve(&c->cold, c->slots + more) < 0) {
			if (s)
				munmap(s, SLAB_BYTES);
			return NULL;
		}
		/* the old slab's tail (less than one slot) is left unused */
		c->bump = s;
		c->end = s + more * size;
		c->slots += more;
		pool.st.slab_bytes += SLAB_BYTES;
	}
	p = c->bump;
	c->bump += size;
	return p;
}

static void slab_put(void *p, size_t size)
{
	struct slab_class *c = &pool.slab[size / KV_ALIGN - 1];

	if (pool.idle_small + size <= idle_max()) {
		pool.idle_small += size;
		c->warm.v[c->warm.n++] = p;
		return;
	}
	madvise(p, size, MADV_DONTNEED);
	c->cold.v[c->cold.n++] = p;
}

static struct large_class *large_find(size_t size)
{
	for (unsigned i = 0; i < LARGE_CLASSES; i++)
		if (pool.large[i].size == size)
			return &pool.large[i];
	return NULL;
}

static void *large_get(size_t size)
{
	struct large_class *c = large_find(size);

	if (c && c->warm.n) {
		pool.idle_large -= size;
		return c->warm.v[--c->warm.n];
	}
	return NULL;
}

/* Keep a freed large buffer if there is room (and a class for its size). */
static bool large_keep(void *p, size_t size)
{
	struct large_class *c = large_find(size);

	if (pool.idle_large + size > idle_max())
		return false;
	for (unsigned i = 0; !c && i < LARGE_CLASSES; i++)
		if (pool.large[i].warm.n == 0)
			c = &pool.large[i];    /* a size nobody kept lately */
	if (!c || vec_push(&c->warm, p) < 0)
		return false;
	c->size = size;
	pool.idle_large += size;
	return true;
}

void *kv_buf_get(size_t len)
{
	size_t size = round_size(len);
	bool reused = false;
	void *p;

	pthread_mutex_lock(&pool.lock);
	if (size <= KV_BUF_SLAB_MAX) {
		p = slab_get(size, &reused);
	} else {
		p = large_get(size);
		reused = p != NULL;
	}
	pool.st.gets++;
	pool.st.reused += reused;
	pthread_mutex_unlock(&pool.lock);
	if (!p && size > KV_BUF_SLAB_MAX)
		p = map(size);
	return p;
}

void kv_buf_put(void *p, size_t len)
{
	size_t size = round_size(len);
	bool kept = true;

	if (!p)
		return;
	pthread_mutex_lock(&pool.lock);
	if (size <= KV_BUF_SLAB_MAX)
		slab_put(p, size);
	else
		kept = large_keep(p, size);
	pthread_mutex_unlock(&pool.lock);
	if (!kept)
		munmap(p, size);
}

/* One warm buffer beyond keep bytes of its kind, taken off its list (the
 * pool lock held); NULL when there is none. */
static void *trim_take(uint64_t keep, size_t *size, bool *small)
{
	unsigned i;

	if (pool.idle_small > keep) {
		for (i = 0; i < SLAB_CLASSES; i++) {
			struct slab_class *c = &pool.slab[i];

			if (c->warm.n) {
				*size = (size_t)(i + 1) * KV_ALIGN;
				*small = true;
				pool.idle_small -= *size;
				return c->warm.v[--c->warm.n];
			}
		}
	}
	if (pool.idle_large > keep) {
		for (i = 0; i < LARGE_CLASSES; i++) {
			struct large_class *c = &pool.large[i];

			if (c->warm.n) {
				*size = c->size;
				*small = false;
				pool.idle_large -= *size;
				return c->warm.v[--c->warm.n];
			}
		}
	}
	return NULL;
}

uint64_t kv_buf_trim(void)
{
	uint64_t given = 0;
	size_t size;
	bool small;
	void *p;

	/* One buffer per hold of the lock: the kernel calls run outside it,
	 * so a writer that comes back meanwhile never waits behind them. */
	for (;;) {
		pthread_mutex_lock(&pool.lock);
		p = trim_take(KV_BUF_IDLE_MAX, &size, &small);
		pthread_mutex_unlock(&pool.lock);
		if (!p)
			break;
		given += size;
		if (!small) {
			munmap(p, size);
			continue;
		}
		madvise(p, size, MADV_DONTNEED);
		/* Room for every slot was reserved in cold when its slab
		 * was mapped (slab_get): this push cannot fail. */
		pthread_mutex_lock(&pool.lock);
		struct ptrvec *cold = &pool.slab[size / KV_ALIGN - 1].cold;
		cold->v[cold->n++] = p;
		pthread_mutex_unlock(&pool.lock);
	}
	return given;
}

void kv_buf_stats(struct kv_buf_stats *st)
{
	pthread_mutex_lock(&pool.lock);
	*st = pool.st;
	st->idle_small = pool.idle_small;
	st->idle_large = pool.idle_large;
	pthread_mutex_unlock(&pool.lock);
}
