/*
 * Small objects without malloc's overhead, for the index's page nodes and
 * extent records: tens of millions of them at 10^8 pages.
 *
 * malloc gives each object an 8-byte header and rounds it to 16 bytes: a
 * page node with a 16-character name (105 bytes) takes 128, an extent
 * record (56) takes 64. Here objects are cut from 256 KiB chunks (of
 * mapped 16 MiB regions, outside malloc's arenas: slab.c says why) by size
 * class (8-byte steps, so 8-byte alignment), with no header: the caller
 * gives the size back on free (the index knows it: a node's follows from
 * its name). A freed object goes on its class's free list, and the next
 * allocation of that class takes it.
 *
 * Regions go back to the system only at slab_fini: a store that shrank
 * keeps its high-water mark for the next growth, as a malloc heap would
 * (whose freed small chunks are rarely returned either).
 *
 * Not thread-safe: the index's write lock protects it. Under
 * AddressSanitizer free objects and unused chunk space are poisoned, so a
 * use after free is still caught. Private to index/.
 */
#ifndef KV_SLAB_H
#define KV_SLAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SLAB_MAX 512u             /* largest object */

struct slab_class {
	void *free;               /* freed objects, linked through their first word */
	char *cur;                /* unused space of the class's newest chunk */
	size_t left;              /* bytes at cur */
};

struct slab {
	struct slab_class cls[SLAB_MAX / 8];
	char *base;               /* the reserved span */
	size_t span;              /* its bytes: SLAB_SPAN but in tests */
	unsigned nregions;        /* regions of it in use, from base up */
	bool span_full;           /* said so in the log already */
	char *region_cur;         /* the newest region's uncut part */
	size_t region_left;
	size_t nchunks;           /* chunks cut so far */
	uint8_t *chunk_cls;       /* the class each was cut for (of span / chunk) */
	size_t live;              /* bytes in objects handed out and not freed */
};

/* Every object of a slab lies in [base, base + SLAB_SPAN): 32 GiB, what a
 * 32-bit count of 8-byte units reaches (htab.h). */
#define SLAB_SPAN (1ull << 35)

/* Reserve the span (no RAM yet). 0 or -errno. */
int slab_init(struct slab *s);
/* The same with a smaller span (a multiple of 16 MiB), for a test of a
 * full one; -EINVAL for a size out of range. */
int slab_init_span(struct slab *s, size_t span_bytes);
/* Free every chunk (objects still out become invalid). */
void slab_fini(struct slab *s);
/* An object of size bytes (1..SLAB_MAX), 8-byte aligned, contents
 * undefined; NULL when out of memory or for a size out of range. */
void *slab_alloc(struct slab *s, size_t size);
/* Give p back; size must be what it was allocated with. */
void slab_free(struct slab *s, void *p, size_t size);

/*
 * Every object of a slab by address: chunk k of slab_chunks(s) holds *n
 * places of *size bytes (its class's) from the address returned. A place
 * may hold an object handed out, a freed one or nothing yet, and the
 * caller tells which (the index looks the object up by its key). Objects
 * never move, so a walk in steps with the lock released between them sees
 * every object that lived throughout. Lock as for slab_alloc, shared.
 */
size_t slab_chunks(const struct slab *s);
char *slab_chunk_places(const struct slab *s, size_t k, size_t *size, size_t *n);
/* Whether the place at p may be read: false for one free or never handed
 * out under AddressSanitizer (poisoned); true otherwise. Inline: the trim
 * asks it of every place (index/trim.c). */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
static inline bool slab_place_readable(const void *p, size_t size)
{
	return !__asan_region_is_poisoned((void *)p, size);
}
#else
static inline bool slab_place_readable(const void *p, size_t size)
{
	(void)p;
	(void)size;
	return true;
}
#endif

#endif
