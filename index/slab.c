/*
 * Size-classed object slabs for the index (slab.h).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "slab.h"

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
 * Chunks are cut from regions mapped straight from the kernel, never from
 * malloc. A malloc'd chunk lands in the arena of whichever thread added a
 * page, between the short-lived objects of that thread's requests; there it
 * pins the heap, so that the arena cannot shrink when those are freed: a
 * 300K-page write flood left 390 MB of free arena memory resident behind
 * 150 MB in use (docs/benchmarks/scale.md). 16 MiB regions keep the count
 * of mappings low (a thousand at 10^8 pages; the kernel allows 65530).
 */
#define SLAB_REGION (16u << 20)

static size_t class_size(size_t size)
{
	return (size + 7) & ~(size_t)7;
}

void slab_init(struct slab *s)
{
	memset(s, 0, sizeof(*s));
}

void slab_fini(struct slab *s)
{
	size_t i;

	for (i = 0; i < s->nregions; i++) {
		UNPOISON(s->regions[i], SLAB_REGION);
		munmap(s->regions[i], SLAB_REGION);
	}
	free(s->regions);
	memset(s, 0, sizeof(*s));
}

/* A new chunk for class c; false when out of memory. */
static bool chunk_add(struct slab *s, struct slab_class *c)
{
	char *chunk;

	if (s->region_left < SLAB_CHUNK) {
		if (s->nregions == s->regions_cap) {
			size_t cap = s->regions_cap ? s->regions_cap * 2 : 16;
			void **v = realloc(s->regions, cap * sizeof(*v));

			if (!v)
				return false;
			s->regions = v;
			s->regions_cap = cap;
		}
		/* untouched pages of it cost no RAM */
		chunk = mmap(NULL, SLAB_REGION, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (chunk == MAP_FAILED)
			return false;
		POISON(chunk, SLAB_REGION);
		s->regions[s->nregions++] = chunk;
		s->region_cur = chunk;
		s->region_left = SLAB_REGION;
	}
	chunk = s->region_cur;
	s->region_cur += SLAB_CHUNK;
	s->region_left -= SLAB_CHUNK;
	s->nchunks++;
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
