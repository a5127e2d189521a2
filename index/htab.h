/*
 * Open-addressing hash set of pointers for the in-memory index: linear
 * probing, power-of-two capacity kept at most 3/4 full, backward-shift
 * deletion (no tombstones, so lookups never slow down after many removes).
 * Beside each pointer slot is a one-byte tag (7 bits of the hash, high bit
 * set; 0 = empty): a probe scans the dense tag array and dereferences an
 * element only when its tag matches, so a miss in a long probe run costs one
 * or two cache lines instead of one cache miss per element passed.
 *
 * Elements are hashed by the table's hash function, which is called when
 * elements move (growth, deletion). Lookups are written by the caller:
 *
 *	size_t i = h & t->mask;
 *	while ((e = htab_next(t, h, &i)))
 *		if (matches(e)) return e;
 *
 * Not thread-safe; the index's rwlock protects it. Private to index/.
 */
#ifndef KV_HTAB_H
#define KV_HTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct htab {
	void **slot;
	uint8_t *tag;                     /* 0 = empty slot */
	size_t mask;                      /* capacity - 1 */
	size_t n;                         /* elements */
	uint64_t (*hash)(const void *e);
};

int htab_init(struct htab *t, uint64_t (*hash)(const void *e));
void htab_fini(struct htab *t);
/* Grow now so that the next `more` inserts cannot fail. 0 or -ENOMEM. */
int htab_reserve(struct htab *t, size_t more);
/* Insert e (duplicates allowed: this is also a multimap). 0 or -ENOMEM. */
int htab_insert(struct htab *t, void *e);
/* Remove the slot holding exactly e; false if e is not in the table. */
bool htab_remove(struct htab *t, const void *e);
/* Put new where old was; both must hash alike. false if old is absent. */
bool htab_replace(struct htab *t, const void *old, void *new_e);

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

/*
 * Next element at or after slot *i whose tag matches h, advancing *i past
 * it; NULL at the end of the probe run. Start with *i = h & t->mask.
 */
static inline void *htab_next(const struct htab *t, uint64_t h, size_t *i)
{
	uint8_t want = htab_tag(h), tg;
	size_t j;

	for (j = *i; (tg = t->tag[j]); j = (j + 1) & t->mask) {
		if (tg == want) {
			*i = (j + 1) & t->mask;
			return t->slot[j];
		}
	}
	*i = j;
	return NULL;
}

#endif
