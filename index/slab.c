/*
 * Size-classed object slabs for the index (slab.h).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "slab.h"
#include "store.h"     /* kv_log */

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n)   ASAN_POISON_MEMORY_REGION(p, n)
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define POISON(p, n)   ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* 256 KiB: at most one partly used chunk per class (a few MiB of address
 * space, untouched pages of it never resident). */
#define SLAB_CHUNK (256u * 1024)
/*
 * Chunks are cut from 16 MiB regions of one span reserved at slab_init,
 * never from malloc. A malloc'd chunk lands in the arena of whichever
 * thread added a page, between the short-lived objects of that thread's
 * requests; there it pins the heap, so that the arena cannot shrink when
 * those are freed: a 300K-page write flood left 390 MB of free arena
 * memory resident behind 150 MB in use (docs/benchmarks/scale.md). One
 * span also lets the hash tables name an object by a 32-bit offset
 * (htab.h): the span is what such an offset reaches, 32 GiB, and is
 * reserved without access (no RAM, no commit charge); each region becomes
 * writable when the first chunk is cut from it.
 */
#define SLAB_REGION (16u << 20)
_Static_assert(SLAB_REGION % SLAB_CHUNK == 0, "a region holds whole chunks");

/* A chunk's state. On its class's partial list exactly while it has freed
 * objects (and is in use): an allocation finds one in O(1), and a free
 * that empties a chunk takes it off in O(1). */
struct slab_chunk {
	void *free;               /* freed objects, linked through their first word */
	uint32_t live;            /* objects handed out */
	uint32_t prev, next;      /* partial list (index + 1; 0: none); next also
	                           * links the chunks given back */
	uint8_t cls;              /* class index */
	bool in_use;              /* cut, not given back */
};

static size_t class_size(size_t size)
{
	return (size + 7) & ~(size_t)7;
}

static uint32_t chunk_of(const struct slab *s, const void *p)
{
	return (uint32_t)(((const char *)p - s->base) / SLAB_CHUNK);
}

static char *chunk_at(const struct slab *s, uint32_t k)
{
	return s->base + (size_t)k * SLAB_CHUNK;
}

int slab_init_span(struct slab *s, size_t span_bytes)
{
	void *span;

	memset(s, 0, sizeof(*s));
	if (span_bytes < SLAB_REGION || span_bytes > SLAB_SPAN || span_bytes % SLAB_REGION)
		return -EINVAL;
	/* 24 bytes per 256 KiB of span: 3 MiB for the whole 32 GiB, of
	 * which only the pages of chunks cut are ever touched. */
	s->chunks = calloc(span_bytes / SLAB_CHUNK, sizeof(*s->chunks));
	if (!s->chunks)
		return -ENOMEM;
	span = mmap(NULL, span_bytes, PROT_NONE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (span == MAP_FAILED) {
		free(s->chunks);
		s->chunks = NULL;
		return -errno;
	}
	s->base = span;
	s->span = span_bytes;
	return 0;
}

int slab_init(struct slab *s)
{
	return slab_init_span(s, SLAB_SPAN);
}

void slab_fini(struct slab *s)
{
	free(s->chunks);
	if (s->base) {
		UNPOISON(s->base, (size_t)s->nregions * SLAB_REGION);
		munmap(s->base, s->span);
	}
	memset(s, 0, sizeof(*s));
}

static void partial_add(struct slab *s, struct slab_class *c, uint32_t k)
{
	struct slab_chunk *m = &s->chunks[k];

	m->prev = 0;
	m->next = c->partial;
	if (c->partial)
		s->chunks[c->partial - 1].prev = k + 1;
	c->partial = k + 1;
}

static void partial_remove(struct slab *s, struct slab_class *c, uint32_t k)
{
	struct slab_chunk *m = &s->chunks[k];

	if (m->prev)
		s->chunks[m->prev - 1].next = m->next;
	else
		c->partial = m->next;
	if (m->next)
		s->chunks[m->next - 1].prev = m->prev;
	m->prev = m->next = 0;
}

/*
 * Chunk k holds nothing: its memory goes back to the system, and the
 * chunk waits to be cut again. If madvise fails the memory stays
 * resident, and is reused all the same.
 */
static void chunk_give_back(struct slab *s, struct slab_class *c, uint32_t k)
{
	struct slab_chunk *m = &s->chunks[k];

	if (m->free)
		partial_remove(s, c, k);
	POISON(chunk_at(s, k), SLAB_CHUNK);
	(void)madvise(chunk_at(s, k), SLAB_CHUNK, MADV_DONTNEED);
	*m = (struct slab_chunk){ .next = s->empty };
	s->empty = k + 1;
	s->nempty++;
}

/* A chunk of fresh space: one given back, or the next of the newest
 * region (mapping a new region when it is used up). */
static bool chunk_cut(struct slab *s, uint32_t *k)
{
	char *region;

	if (s->empty) {
		*k = s->empty - 1;
		s->empty = s->chunks[*k].next;
		s->nempty--;
		return true;
	}
	if (s->region_left < SLAB_CHUNK) {
		region = s->base + (size_t)s->nregions * SLAB_REGION;
		if ((size_t)(s->nregions + 1) * SLAB_REGION > s->span) {
			if (!s->span_full)
				kv_log(KV_LOG_ERR, "index: the %llu MiB of address space "
				       "for its page records or for its extent records "
				       "is full (32 GiB each: about 350 million pages "
				       "with 16-character names, 700 million extents); "
				       "no more pages can be added",
				       (unsigned long long)(s->span >> 20));
			s->span_full = true;
			return false;
		}
		if (mprotect(region, SLAB_REGION, PROT_READ | PROT_WRITE) < 0)
			return false;
		POISON(region, SLAB_REGION);
		s->nregions++;
		s->region_cur = region;
		s->region_left = SLAB_REGION;
	}
	*k = chunk_of(s, s->region_cur);
	s->region_cur += SLAB_CHUNK;
	s->region_left -= SLAB_CHUNK;
	s->nchunks++;
	return true;
}

/* A new chunk for class c to cut from; false when out of memory. The old
 * one's tail (smaller than one object) is left unused, and the old one
 * goes back if everything cut from it was freed meanwhile. */
static bool chunk_add(struct slab *s, struct slab_class *c)
{
	uint32_t k, old = c->bump;

	if (!chunk_cut(s, &k))
		return false;
	s->chunks[k] = (struct slab_chunk){ .cls = (uint8_t)(c - s->cls), .in_use = true };
	c->bump = k + 1;
	c->cur = chunk_at(s, k);
	c->left = SLAB_CHUNK;
	if (old && s->chunks[old - 1].live == 0)
		chunk_give_back(s, c, old - 1);
	return true;
}

void *slab_alloc(struct slab *s, size_t size)
{
	size_t sz = class_size(size);
	struct slab_class *c;
	struct slab_chunk *m;
	uint32_t k;
	void *p;

	if (size == 0 || size > SLAB_MAX)
		return NULL;
	c = &s->cls[sz / 8 - 1];
	if (c->partial) {
		k = c->partial - 1;
		m = &s->chunks[k];
		p = m->free;
		UNPOISON(p, sz);
		memcpy(&m->free, p, sizeof(void *));
		if (!m->free)
			partial_remove(s, c, k);
	} else {
		if (c->left < sz && !chunk_add(s, c))
			return NULL;
		p = c->cur;
		UNPOISON(p, sz);
		c->cur += sz;
		c->left -= sz;
		m = &s->chunks[c->bump - 1];
	}
	m->live++;
	s->live += sz;
	return p;
}

void slab_free(struct slab *s, void *p, size_t size)
{
	size_t sz = class_size(size);
	struct slab_class *c;
	struct slab_chunk *m;
	uint32_t k;

	if (!p)
		return;
	c = &s->cls[sz / 8 - 1];
	k = chunk_of(s, p);
	m = &s->chunks[k];
	s->live -= sz;
	if (--m->live == 0 && c->bump != k + 1) {
		chunk_give_back(s, c, k);
		return;
	}
	if (!m->free)
		partial_add(s, c, k);
	memcpy(p, &m->free, sizeof(void *));
	m->free = p;
	POISON(p, sz);
}

size_t slab_resident(const struct slab *s)
{
	return (s->nchunks - s->nempty) * SLAB_CHUNK;
}

size_t slab_chunks(const struct slab *s)
{
	return s->nchunks;
}

/* Chunks are cut one after another from regions that follow each other,
 * and a region holds a whole number of them (chunk_add): chunk k starts at
 * base + k * SLAB_CHUNK, and holds objects of one class from its start. */
char *slab_chunk_places(const struct slab *s, size_t k, size_t *size, size_t *n)
{
	bool in_use = k < s->nchunks && s->chunks[k].in_use;

	*size = in_use ? ((size_t)s->chunks[k].cls + 1) * 8 : 8;
	*n = in_use ? SLAB_CHUNK / *size : 0;
	return s->base + k * SLAB_CHUNK;
}
