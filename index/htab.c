/*
 * Open-addressing pointer hash set used by the in-memory index (see
 * htab.h): growth by doubling at 3/4 load, one-byte tags beside the slots,
 * and backward-shift deletion, which moves later members of a probe run back
 * into the hole so that a probe can always stop at the first empty slot.
 */
#include <errno.h>
#include <stdlib.h>

#include "htab.h"

#define HTAB_MIN_CAP 64u

/* Slots and tags in one allocation. */
static int arrays_new(size_t cap, void ***slot, uint8_t **tag)
{
	void **s;

	if (cap > SIZE_MAX / (sizeof(*s) + 1))
		return -ENOMEM;
	s = calloc(1, cap * (sizeof(*s) + 1));
	if (!s)
		return -ENOMEM;
	*slot = s;
	*tag = (uint8_t *)(s + cap);
	return 0;
}

int htab_init(struct htab *t, uint64_t (*hash)(const void *e))
{
	int rc = arrays_new(HTAB_MIN_CAP, &t->slot, &t->tag);

	if (rc < 0)
		return rc;
	t->mask = HTAB_MIN_CAP - 1;
	t->n = 0;
	t->hash = hash;
	return 0;
}

void htab_fini(struct htab *t)
{
	free(t->slot);
	t->slot = NULL;
	t->tag = NULL;
	t->mask = 0;
	t->n = 0;
}

static void place(void **slot, uint8_t *tag, size_t mask, void *e, uint64_t h)
{
	size_t i;

	for (i = h & mask; tag[i]; i = (i + 1) & mask)
		;
	slot[i] = e;
	tag[i] = htab_tag(h);
}

static int rehash(struct htab *t, size_t cap)
{
	uint8_t *tag;
	void **slot;
	size_t i;
	int rc;

	rc = arrays_new(cap, &slot, &tag);
	if (rc < 0)
		return rc;
	for (i = 0; i <= t->mask; i++)
		if (t->tag[i])
			place(slot, tag, cap - 1, t->slot[i], t->hash(t->slot[i]));
	free(t->slot);
	t->slot = slot;
	t->tag = tag;
	t->mask = cap - 1;
	return 0;
}

int htab_reserve(struct htab *t, size_t more)
{
	size_t cap = t->mask + 1;
	size_t want = t->n + more;

	if (want < t->n)
		return -ENOMEM;
	/* Keep load <= 3/4: linear probing degrades quickly above that. */
	while (want > cap / 4 * 3) {
		if (cap > SIZE_MAX / 2)
			return -ENOMEM;
		cap *= 2;
	}
	if (cap == t->mask + 1)
		return 0;
	return rehash(t, cap);
}

int htab_insert(struct htab *t, void *e)
{
	int rc = htab_reserve(t, 1);

	if (rc < 0)
		return rc;
	place(t->slot, t->tag, t->mask, e, t->hash(e));
	t->n++;
	return 0;
}

static size_t find_slot(const struct htab *t, const void *e)
{
	uint64_t h = t->hash(e);
	uint8_t want = htab_tag(h);
	size_t i;

	for (i = h & t->mask; t->tag[i]; i = (i + 1) & t->mask)
		if (t->tag[i] == want && t->slot[i] == e)
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
	size_t i = find_slot(t, e), j;

	if (i == SIZE_MAX)
		return false;
	t->n--;
	for (;;) {
		t->slot[i] = NULL;
		t->tag[i] = 0;
		for (j = (i + 1) & t->mask;; j = (j + 1) & t->mask) {
			if (!t->tag[j])
				return true;
			if (!stays(i, j, t->hash(t->slot[j]) & t->mask))
				break;
		}
		t->slot[i] = t->slot[j];
		t->tag[i] = t->tag[j];
		i = j;
	}
}

bool htab_replace(struct htab *t, const void *old, void *new_e)
{
	size_t i = find_slot(t, old);

	if (i == SIZE_MAX)
		return false;
	t->slot[i] = new_e;
	return true;
}
