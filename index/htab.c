/*
 * Open-addressing hash set of 32-bit handles used by the in-memory index (see
 * htab.h): growth by doubling at 3/4 load, done a few slots per insert,
 * one-byte tags beside the slots, and backward-shift deletion, which moves
 * later members of a probe run back into the hole so that a probe can
 * always stop at the first empty slot.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "htab.h"

#define HTAB_MIN_CAP 64u
/* Old slots moved per insert while growing. The new arrays (2C slots for
 * an old capacity C) fill from 3/8 to 3/4 in 3C/4 inserts; at 8 slots per
 * insert the old arrays are empty after C/8, a sixth of that. */
#define DRAIN_STEP 8u

/*
 * Arrays of this many bytes or more are mapped straight from the kernel:
 * from malloc they would sit in the arena of the thread that grew the
 * table, pinning it, and glibc's dynamic threshold puts allocations up to
 * 32 MiB there once a larger one was freed (slab.c says what pinning costs).
 */
#define MAP_MIN_BYTES (1u << 20)

static size_t arrays_bytes(size_t cap)
{
	return cap * (sizeof(uint32_t) + 1);
}

/* Slots and tags in one allocation, zeroed. */
static int arrays_new(size_t cap, uint32_t **slot, uint8_t **tag)
{
	size_t bytes = arrays_bytes(cap);
	uint32_t *s;

	if (cap > SIZE_MAX / (sizeof(*s) + 1))
		return -ENOMEM;
	if (bytes >= MAP_MIN_BYTES) {
		s = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (s == MAP_FAILED)
			return -ENOMEM;
	} else if (!(s = calloc(1, bytes))) {
		return -ENOMEM;
	}
	*slot = s;
	*tag = (uint8_t *)(s + cap);
	return 0;
}

/* Give back what arrays_new(mask + 1) made (slot may be NULL). */
static void arrays_free(uint32_t *slot, size_t mask)
{
	size_t bytes = arrays_bytes(mask + 1);

	if (!slot)
		return;
	if (bytes >= MAP_MIN_BYTES)
		munmap(slot, bytes);
	else
		free(slot);
}

void htab_populate(struct htab *t)
{
	volatile uint8_t *p = (volatile uint8_t *)t->slot;
	size_t bytes = arrays_bytes(t->mask + 1);

	/* Zeros over zeros: each page of the mapping faults in here. */
	for (size_t off = 0; bytes >= MAP_MIN_BYTES && off < bytes; off += 4096)
		p[off] = 0;
}

int htab_init(struct htab *t, uint64_t (*hash)(const void *e), void *base)
{
	int rc = arrays_new(HTAB_MIN_CAP, &t->slot, &t->tag);

	if (rc < 0)
		return rc;
	t->mask = HTAB_MIN_CAP - 1;
	t->n = 0;
	t->hash = hash;
	t->base = base;
	t->old_slot = NULL;
	t->old_tag = NULL;
	t->old_mask = 0;
	t->moved = 0;
	t->gen = 0;
	return 0;
}

void htab_fini(struct htab *t)
{
	arrays_free(t->slot, t->mask);
	arrays_free(t->old_slot, t->old_mask);
	t->slot = t->old_slot = NULL;
	t->tag = t->old_tag = NULL;
	t->mask = t->old_mask = 0;
	t->n = t->moved = 0;
}

static void place(uint32_t *slot, uint8_t *tag, size_t mask, uint32_t e, uint64_t h)
{
	size_t i;

	for (i = h & mask; tag[i]; i = (i + 1) & mask)
		;
	slot[i] = e;
	tag[i] = htab_tag(h);
}

/* Move up to `step` old slots across; drop the old arrays once empty. */
static void drain(struct htab *t, size_t step)
{
	size_t end;

	if (!t->old_slot)
		return;
	end = t->moved + step;
	if (end > t->old_mask + 1 || end < t->moved)
		end = t->old_mask + 1;
	for (; t->moved < end; t->moved++) {
		size_t j = t->moved;

		if (t->old_tag[j] & 0x80)
			place(t->slot, t->tag, t->mask, t->old_slot[j],
			      t->hash(htab_elem(t, t->old_slot[j])));
		t->old_slot[j] = 0;
		t->old_tag[j] = 0;
	}
	if (t->moved > t->old_mask) {
		t->gen++;
		arrays_free(t->old_slot, t->old_mask);
		t->old_slot = NULL;
		t->old_tag = NULL;
		t->old_mask = 0;
		t->moved = 0;
	}
}

/* Everything into new arrays of cap slots, now (no growth may be under
 * way: the caller drained it). */
static int rehash(struct htab *t, size_t cap)
{
	uint8_t *tag;
	uint32_t *slot;
	size_t i;
	int rc;

	rc = arrays_new(cap, &slot, &tag);
	if (rc < 0)
		return rc;
	for (i = 0; i <= t->mask; i++)
		if (t->tag[i])
			place(slot, tag, cap - 1, t->slot[i], t->hash(htab_elem(t, t->slot[i])));
	arrays_free(t->slot, t->mask);
	t->slot = slot;
	t->tag = tag;
	t->mask = cap - 1;
	t->gen += 2;     /* two changes: a walk cannot follow a rehash */
	return 0;
}

/* Start moving into new arrays of cap slots: the current arrays become
 * the old ones, drained by the inserts that follow (and htab_drain). */
static int move_start(struct htab *t, size_t cap)
{
	uint8_t *tag;
	uint32_t *slot;
	int rc;

	rc = arrays_new(cap, &slot, &tag);
	if (rc < 0)
		return rc;
	t->old_slot = t->slot;
	t->old_tag = t->tag;
	t->old_mask = t->mask;
	t->moved = 0;
	t->gen++;
	t->slot = slot;
	t->tag = tag;
	t->mask = cap - 1;
	return 0;
}

static int grow(struct htab *t)
{
	size_t cap = (t->mask + 1) * 2;

	return cap < t->mask + 1 ? -ENOMEM : move_start(t, cap);
}

/*
 * Shrinking is growth the other way: the current arrays become the old
 * ones, new arrays of the smallest capacity that holds the elements at
 * most 3/8 full (they may double before the table grows again) take their
 * place, and drains move the elements across. Only once they would hold
 * a quarter of the slots or fewer: removals after a peak (layers going
 * back to the manifest) leave the arrays at the peak's size otherwise,
 * and a table that swings about one size never shrinks and grows back.
 */
bool htab_shrink(struct htab *t)
{
	size_t cap = HTAB_MIN_CAP;

	if (t->old_slot)
		return false;
	while (cap / 8 * 3 < t->n)
		cap *= 2;
	return cap <= (t->mask + 1) / 4 && move_start(t, cap) == 0;
}

bool htab_drain(struct htab *t, size_t slots)
{
	drain(t, slots);
	return t->old_slot != NULL;
}

static bool full(const struct htab *t, size_t want)
{
	/* Keep load <= 3/4: linear probing degrades quickly above that. */
	return want > (t->mask + 1) / 4 * 3;
}

int htab_reserve(struct htab *t, size_t more)
{
	size_t want = t->n + more;
	size_t cap = (t->mask + 1) * 2;

	if (want < t->n)
		return -ENOMEM;
	if (!full(t, want))
		return 0;
	/* Full while still growing: only if inserts came faster than
	 * DRAIN_STEP allows, which they cannot. Finish that first. */
	drain(t, SIZE_MAX);
	/* A few more (every insert of the index): start growing; the
	 * inserts that follow move the rest across, and need no memory. */
	if (cap > t->mask + 1 && want <= cap / 4 * 3)
		return grow(t);
	/* Many at once (a bulk load, whose count is known): all now, to size. */
	cap = t->mask + 1;
	while (want > cap / 4 * 3) {
		if (cap > SIZE_MAX / 2)
			return -ENOMEM;
		cap *= 2;
	}
	return rehash(t, cap);
}

int htab_insert(struct htab *t, void *e)
{
	int rc = htab_reserve(t, 1);

	if (rc < 0)
		return rc;
	drain(t, DRAIN_STEP);
	place(t->slot, t->tag, t->mask, htab_handle(t, e), t->hash(e));
	t->n++;
	return 0;
}

static size_t find_slot(const struct htab *t, const void *e, uint64_t h)
{
	uint8_t want = htab_tag(h);
	uint32_t eh = htab_handle(t, e);
	size_t i;

	for (i = h & t->mask; t->tag[i]; i = (i + 1) & t->mask)
		if (t->tag[i] == want && t->slot[i] == eh)
			return i;
	return SIZE_MAX;
}

/* The old arrays' slot holding e, or SIZE_MAX (see htab_probe_next). */
static size_t find_old_slot(const struct htab *t, const void *e, uint64_t h)
{
	uint8_t want = htab_tag(h);
	uint32_t eh = htab_handle(t, e);
	size_t left = t->old_mask + 1 - t->moved;
	size_t i = htab_old_start(t, h & t->old_mask);

	for (; left && t->old_tag[i]; left--, i = htab_old_start(t, (i + 1) & t->old_mask))
		if (t->old_tag[i] == want && t->old_slot[i] == eh)
			return i;
	return SIZE_MAX;
}

/* True if home slot k lies cyclically in (i, j]: the element at j may not
 * move back to i without becoming unreachable from k. */
static bool stays(size_t i, size_t j, size_t k)
{
	if (i <= j)
		return i < k && k <= j;
	return i < k || k <= j;
}

bool htab_remove(struct htab *t, const void *e)
{
	uint64_t h = t->hash(e);
	size_t i = find_slot(t, e, h), j;

	if (i == SIZE_MAX) {
		if (!t->old_slot || (i = find_old_slot(t, e, h)) == SIZE_MAX)
			return false;
		/* A tombstone: shifting old slots back could move one into the
		 * drained part, where it would never be moved across. */
		t->old_slot[i] = 0;
		t->old_tag[i] = HTAB_TOMB;
		t->n--;
		return true;
	}
	t->n--;
	for (;;) {
		t->slot[i] = 0;
		t->tag[i] = 0;
		for (j = (i + 1) & t->mask;; j = (j + 1) & t->mask) {
			if (!t->tag[j])
				return true;
			if (!stays(i, j, t->hash(htab_elem(t, t->slot[j])) & t->mask))
				break;
		}
		t->slot[i] = t->slot[j];
		t->tag[i] = t->tag[j];
		i = j;
	}
}

bool htab_replace(struct htab *t, const void *old, void *new_e)
{
	uint64_t h = t->hash(old);
	size_t i = find_slot(t, old, h);

	if (i != SIZE_MAX) {
		t->slot[i] = htab_handle(t, new_e);
		return true;
	}
	if (!t->old_slot || (i = find_old_slot(t, old, h)) == SIZE_MAX)
		return false;
	t->old_slot[i] = htab_handle(t, new_e);
	return true;
}

size_t htab_span(const struct htab *t)
{
	return t->mask + 1 + (t->old_slot ? t->old_mask + 1 : 0);
}

void *htab_at(const struct htab *t, size_t i)
{
	if (i <= t->mask)
		return t->tag[i] ? htab_elem(t, t->slot[i]) : NULL;
	i -= t->mask + 1;
	return t->old_tag[i] & 0x80 ? htab_elem(t, t->old_slot[i]) : NULL;
}

void htab_walk_resume(const struct htab *t, struct htab_walk *w)
{
	const uint8_t *tag;

	if (!w->started || t->gen != w->gen) {
		if (w->started && t->gen == w->gen + 1 && !w->old && t->old_slot) {
			w->old = true;     /* growth began: ours are the old arrays */
		} else if (w->started && t->gen == w->gen + 1 && w->old && !t->old_slot) {
			w->old = false;    /* growth ended: all is in the current */
			w->pos = 0;
		} else if (w->started && t->gen == w->gen + 1 && !w->old && !t->old_slot) {
			/* growth ended while we walked the arrays it moved into,
			 * after its old ones: what moved since, we saw there */
		} else {
			w->old = t->old_slot != NULL;   /* first step, or lost */
			w->pos = 0;
		}
		w->started = true;
		w->gen = t->gen;
	}
	/* A removal shifts elements back within their run, never across an
	 * empty slot: start this step at the start of the run stepped into.
	 * (The old arrays take tombstones instead; the same back-up is
	 * harmless there.) */
	tag = w->old ? t->old_tag : t->tag;
	while (w->pos > 0 && tag[w->pos - 1])
		w->pos--;
}

void *htab_walk_next(const struct htab *t, struct htab_walk *w)
{
	for (;;) {
		size_t i = w->pos;

		if (w->old) {
			if (i > t->old_mask) {
				w->old = false;    /* then the current arrays, all */
				w->pos = 0;
				continue;
			}
			w->pos++;
			if (t->old_tag[i] & 0x80)
				return htab_elem(t, t->old_slot[i]);
			continue;
		}
		if (i > t->mask)
			return NULL;
		w->pos++;
		if (t->tag[i])
			return htab_elem(t, t->slot[i]);
	}
}
