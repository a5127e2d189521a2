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

static size_t class_size(size_t size)
{
	return (size + 7) & ~(size_t)7;
}

int slab_init_span(struct slab *s, size_t span_bytes)
{
	void *span;

	memset(s, 0, sizeof(*s));
	if (span_bytes < SLAB_REGION || span_bytes > SLAB_SPAN || span_bytes % SLAB_REGION)
		return -EINVAL;
	s->chunk_cls = calloc(span_bytes / SLAB_CHUNK, 1);
	if (!s->chunk_cls)
		return -ENOMEM;
	span = mmap(NULL, span_bytes, PROT_NONE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (span == MAP_FAILED) {
		free(s->chunk_cls);
		s->chunk_cls = NULL;
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
	free(s->chunk_cls);
	if (s->base) {
		UNPOISON(s->base, (size_t)s->nregions * SLAB_REGION);
		munmap(s->base, s->span);
	}
	memset(s, 0, sizeof(*s));
}

/* A new chunk for class c; false when out of memory. */
static bool chunk_add(struct slab *s, struct slab_class *c)
{
	char *chunk;

	if (s->region_left < SLAB_CHUNK) {
		chunk = s->base + (size_t)s->nregions * SLAB_REGION;
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
		if (mprotect(chunk, SLAB_REGION, PROT_READ | PROT_WRITE) < 0)
			return false;
		POISON(chunk, SLAB_REGION);
		s->nregions++;
		s->region_cur = chunk;
		s->region_left = SLAB_REGION;
	}
	chunk = s->region_cur;
	s->region_cur += SLAB_CHUNK;
	s->region_left -= SLAB_CHUNK;
	s->chunk_cls[s->nchunks++] = (uint8_t)(c - s->cls);
	/* The old chunk's tail (smaller than one object) is left unused. */
	c->cur = chunk;
	c->left = SLAB_CHUNK;
	return true;
}

void *slab_alloc(struct slab *s, size_t size)
{
	size_t sz = class_size(size);
	struct slab_class *c;
	void *p;

	if (size == 0 || size > SLAB_MAX)
		return NULL;
	c = &s->cls[sz / 8 - 1];
	if (c->free) {
		p = c->free;
		UNPOISON(p, sz);
		memcpy(&c->free, p, sizeof(void *));
	} else {
		if (c->left < sz && !chunk_add(s, c))
			return NULL;
		p = c->cur;
		UNPOISON(p, sz);
		c->cur += sz;
		c->left -= sz;
	}
	s->live += sz;
	return p;
}

void slab_free(struct slab *s, void *p, size_t size)
{
	size_t sz = class_size(size);
	struct slab_class *c;

	if (!p)
		return;
	c = &s->cls[sz / 8 - 1];
	memcpy(p, &c->free, sizeof(void *));
	c->free = p;
	s->live -= sz;
	POISON(p, sz);
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
	*size = k < s->nchunks ? ((size_t)s->chunk_cls[k] + 1) * 8 : 8;
	*n = k < s->nchunks ? SLAB_CHUNK / *size : 0;
	return s->base + k * SLAB_CHUNK;
}
