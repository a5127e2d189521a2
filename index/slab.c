/*
 * Size-classed object slabs for the index (slab.h).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
 * space, untouched pages of it never resident), and 400k chunk pointers
 * (3 MiB) at 10^8 pages. */
#define SLAB_CHUNK (256u * 1024)

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

	for (i = 0; i < s->nchunks; i++) {
		UNPOISON(s->chunks[i], SLAB_CHUNK);
		free(s->chunks[i]);
	}
	free(s->chunks);
	memset(s, 0, sizeof(*s));
}

/* A new chunk for class c; false when out of memory. */
static bool chunk_add(struct slab *s, struct slab_class *c)
{
	char *chunk;

	if (s->nchunks == s->chunks_cap) {
		size_t cap = s->chunks_cap ? s->chunks_cap * 2 : 64;
		void **v = realloc(s->chunks, cap * sizeof(*v));

		if (!v)
			return false;
		s->chunks = v;
		s->chunks_cap = cap;
	}
	chunk = malloc(SLAB_CHUNK);
	if (!chunk)
		return false;
	POISON(chunk, SLAB_CHUNK);
	s->chunks[s->nchunks++] = chunk;
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
