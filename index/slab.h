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
 * its name). A freed object goes on its chunk's free list; an allocation
 * takes a freed object of its class first (from a chunk that has one),
 * and only then cuts new space.
 *
 * A chunk whose every object was freed goes back to the system at once
 * (madvise): a layer that went back to the manifest (index/unload.c)
 * empties the chunks its load filled, and they would otherwise stay
 * resident until the unmount, at the high-water mark. Such a chunk is
 * cut again, for any class, before new space is.
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
	uint32_t partial;         /* first chunk with freed objects (index + 1; 0: none) */
	uint32_t bump;            /* the chunk cur is in (index + 1; 0: none) */
	char *cur;                /* unused space of the class's newest chunk */
	size_t left;              /* bytes at cur */
};

struct slab_chunk;            /* slab.c: a chunk's class, count and free list */

struct slab {
	struct slab_class cls[SLAB_MAX / 8];
	char *base;               /* the reserved span */
	size_t span;              /* its bytes: SLAB_SPAN but in tests */
	unsigned nregions;        /* regions of it in use, from base up */
	bool span_full;           /* said so in the log already */
	char *region_cur;         /* the newest region's uncut part */
	size_t region_left;
	size_t nchunks;           /* chunks cut so far */
	struct slab_chunk *chunks;    /* of span / chunk: each one cut */
	uint32_t empty;           /* chunks given back, to cut again (index + 1) */
	size_t nempty;            /* how many */
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
/* Give p back; size must be what it was allocated with. The last object
 * of a chunk gives the chunk's memory back to the system. */
void slab_free(struct slab *s, void *p, size_t size);
/* Bytes of chunks in use (cut and not given back): what is resident, at
 * most, besides the regions' uncut tails. */
size_t slab_resident(const struct slab *s);

/*
 * Every object of a slab by address: chunk k of slab_chunks(s) holds *n
 * places of *size bytes (its class's) from the address returned. A place
 * may hold an object handed out, a freed one or nothing yet, and the
 * caller tells which (the index looks the object up by its key); a chunk
 * given back has no places. Objects never move, so a walk in steps with
 * the lock released between them sees every object that lived
 * throughout. Lock as for slab_alloc, shared.
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
