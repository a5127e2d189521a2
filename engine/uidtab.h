/*
 * A small table of per-uid records (a few uids are active at once, so a
 * linear search beats hashing): what one uid holds of a shared resource.
 * Each record type starts with `uint32_t uid`; the caller's lock guards
 * the table. Records move when one is removed or the table grows: look a
 * uid up again rather than keeping a pointer across either.
 */
#ifndef KVFS_UIDTAB_H
#define KVFS_UIDTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"

struct kvfs_uidtab {
	void *v;
	size_t n, cap;
	size_t size;                  /* bytes per record */
};

#define KVFS_UIDTAB(type) ((struct kvfs_uidtab){ .size = sizeof(type) })

/* uid's record, or NULL; with add, a zeroed new one (NULL: no memory). */
static inline void *kvfs_uidtab_get(struct kvfs_uidtab *t, uint32_t uid, bool add)
{
	char *rec = t->v, *grown;

	for (size_t i = 0; i < t->n; i++, rec += t->size)
		if (*(const uint32_t *)(const void *)rec == uid)
			return rec;
	if (!add || !(grown = kv_array_room(t->v, t->n, &t->cap, t->size, 4)))
		return NULL;
	t->v = grown;
	rec = grown + t->n++ * t->size;
	memset(rec, 0, t->size);
	memcpy(rec, &uid, sizeof(uid));
	return rec;
}

/* Remove rec (one of t's): the last record takes its place. */
static inline void kvfs_uidtab_remove(struct kvfs_uidtab *t, void *rec)
{
	char *last = (char *)t->v + --t->n * t->size;

	if ((char *)rec != last)
		memcpy(rec, last, t->size);
}

static inline void kvfs_uidtab_free(struct kvfs_uidtab *t)
{
	free(t->v);
	t->v = NULL;
	t->n = t->cap = 0;
}

#endif
