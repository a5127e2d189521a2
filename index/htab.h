/*
 * Open-addressing hash set of objects for the in-memory index: linear
 * probing, power-of-two capacity kept at most 3/4 full, backward-shift
 * deletion (no tombstones but while growing, below, so lookups never slow
 * down after many removes).
 * Beside each slot is a one-byte tag (7 bits of the hash, high bit
 * set; 0 = empty): a probe scans the dense tag array and dereferences an
 * element only when its tag matches, so a miss in a long probe run costs one
 * or two cache lines instead of one cache miss per element passed.
 *
 * Growth is incremental. Rehashing every element at once held the index's
 * write lock for 2 s per table at 6.3M elements (four tables grow together
 * at that size: an 8 s stall of every writer), and it grows with the table.
 * So a full table gets new arrays of twice the size, and each later insert
 * moves a few slots of the old arrays across, until none is left. While it
 * lasts, an element is in exactly one of the two; a lookup probes the new
 * arrays, then the old ones. A removal from the old arrays leaves a
 * tombstone (tag HTAB_TOMB) there, so the old probe runs stay unbroken.
 * Shrinking (htab_shrink) is the same move into smaller arrays.
 *
 * A slot holds a 32-bit handle, not a pointer: the element's offset from
 * the table's base in 8-byte units. Every element of the index's tables
 * comes from its slab, one reserved span of 32 GiB (slab.h), so a handle
 * reaches all of them, and four tables of 4-byte slots at 0.375-0.75 load
 * take about 27 bytes per page less than of 8-byte pointers. The API
 * still speaks in element pointers; elements must be 8-byte aligned and
 * lie within 32 GiB above the base.
 *
 * Elements are hashed by the table's hash function, which is called when
 * elements move (growth, deletion). Lookups are written by the caller:
 *
 *	struct htab_probe p;
 *	htab_probe_start(t, h, &p);
 *	while ((e = htab_probe_next(t, &p)))
 *		if (matches(e)) return e;
 *
 * Not thread-safe; the index's rwlock protects it. Lookups only read, so
 * they may run under its read lock. Private to index/.
 */
#ifndef KV_HTAB_H
#define KV_HTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HTAB_TOMB 0x01u             /* old arrays: removed while growing */

struct htab {
	uint32_t *slot;                   /* handles: see htab_elem */
	uint8_t *tag;                     /* 0 = empty slot */
	char *base;                       /* what handles count from */
	size_t mask;                      /* capacity - 1 */
	size_t n;                         /* elements, in both arrays */
	uint64_t (*hash)(const void *e);
	/* growing: the arrays before, drained from slot 0 up */
	uint32_t *old_slot;               /* NULL: not growing */
	uint8_t *old_tag;
	size_t old_mask;
	size_t moved;                     /* old slots [0, moved) are empty */
	uint64_t gen;                     /* +1 when growth starts or ends, +2
					   * for a rehash of all (htab_walk) */
};

/* Elements lie in [base, base + 32 GiB), 8-byte aligned. */
int htab_init(struct htab *t, uint64_t (*hash)(const void *e), void *base);
void htab_fini(struct htab *t);
/* Room now for `more` inserts that cannot fail. Room for a few starts
 * growing (the inserts move the rest); room for more than the doubled
 * arrays hold (a bulk load, whose count is known) grows all at once, to
 * size. 0 or -ENOMEM. */
int htab_reserve(struct htab *t, size_t more);
/* Fault in the arrays' pages now, for a table filled later where page
 * faults would cost (under a lock): a fresh mapping faults on first touch,
 * one page at a time, and inserts touch every page within a few thousand. */
void htab_populate(struct htab *t);
/* Start shrinking a table that holds few elements for its size (a
 * quarter of its slots or fewer would do); true if it started. The
 * elements move as in growth: htab_drain moves them, up to `slots` old
 * slots per call, and says whether old arrays are left (growth's too). */
bool htab_shrink(struct htab *t);
bool htab_drain(struct htab *t, size_t slots);
/* Insert e (duplicates allowed: this is also a multimap). 0 or -ENOMEM. */
int htab_insert(struct htab *t, void *e);
/* Remove the slot holding exactly e; false if e is not in the table. */
bool htab_remove(struct htab *t, const void *e);
/* Put new where old was; both must hash alike. false if old is absent. */
bool htab_replace(struct htab *t, const void *old, void *new_e);
/* Every element: htab_at(t, i) for i in [0, htab_span(t)), NULL where a
 * slot is empty. */
size_t htab_span(const struct htab *t);
void *htab_at(const struct htab *t, size_t i);

/*
 * A walk in steps, for a caller that holds the table's lock for one step
 * at a time (a walk of millions of elements under one hold stalls every
 * writer): htab_walk_resume after each taking of the lock, then
 * htab_walk_next until it gives NULL (the end) or the step is over.
 * Between steps elements move: a removal shifts later ones back, growth
 * moves the old arrays across, a bulk reserve rehashes all. The walk backs
 * up to the start of the probe run it stood in, walks the old arrays
 * before the current ones, and starts over when it cannot tell where it
 * stands (several changes of arrays between two steps). So every element
 * present from the start of the walk to its end is handed out at least
 * once; some twice; one inserted meanwhile maybe not at all.
 */
struct htab_walk {
	uint64_t gen;                     /* t->gen at the last step */
	size_t pos;                       /* next slot of the arrays walked */
	bool old;                         /* walking the old arrays */
	bool started;
};
static inline void htab_walk_init(struct htab_walk *w)
{
	*w = (struct htab_walk){ 0 };
}
void htab_walk_resume(const struct htab *t, struct htab_walk *w);
void *htab_walk_next(const struct htab *t, struct htab_walk *w);

#define HTAB_SPAN (1ull << 35)      /* what 32-bit handles of 8 bytes reach */

static inline uint32_t htab_handle(const struct htab *t, const void *e)
{
	return (uint32_t)((uint64_t)((const char *)e - t->base) >> 3);
}

static inline void *htab_elem(const struct htab *t, uint32_t h)
{
	return t->base + ((uint64_t)h << 3);
}

/* A 64-bit finaliser (MurmurHash3 fmix64): spreads integer keys. */
static inline uint64_t htab_mix64(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ull;
	k ^= k >> 33;
	return k;
}

/* The tag of hash h: multiplied so that a 32-bit h fills it too. */
static inline uint8_t htab_tag(uint64_t h)
{
	return (uint8_t)(((h * 0x9e3779b97f4a7c15ull) >> 57) | 0x80);
}

struct htab_probe {
	uint64_t h;
	size_t i;
	size_t left;                      /* old arrays: slots still to look at */
	uint8_t want;
	bool in_old;
};

static inline void htab_probe_start(const struct htab *t, uint64_t h, struct htab_probe *p)
{
	p->h = h;
	p->i = h & t->mask;
	p->want = htab_tag(h);
	p->in_old = false;
	p->left = 0;
}

/* Where the old arrays' probe for h starts: its home slot, or the first
 * slot not drained yet if the home is drained (the run from the home went
 * on through slots that were all full, and only a drained one is empty). */
static inline size_t htab_old_start(const struct htab *t, size_t i)
{
	return i < t->moved ? t->moved : i;
}

/* Next element after the probe's place whose tag matches its hash; NULL at
 * the end of its runs. */
static inline void *htab_probe_next(const struct htab *t, struct htab_probe *p)
{
	uint8_t tg;
	size_t j;

	if (!p->in_old) {
		for (j = p->i; (tg = t->tag[j]); j = (j + 1) & t->mask) {
			if (tg == p->want) {
				p->i = (j + 1) & t->mask;
				return htab_elem(t, t->slot[j]);
			}
		}
		if (!t->old_slot)
			return NULL;
		p->in_old = true;
		p->i = htab_old_start(t, p->h & t->old_mask);
		p->left = t->old_mask + 1 - t->moved;
	}
	for (j = p->i; p->left && (tg = t->old_tag[j]); p->left--) {
		size_t at = j;

		j = htab_old_start(t, (j + 1) & t->old_mask);
		if (tg == p->want) {
			p->i = j;
			p->left--;
			return htab_elem(t, t->old_slot[at]);
		}
	}
	p->left = 0;
	return NULL;
}

#endif
