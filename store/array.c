/*
 * Arrays that grow by doubling (store.h): a dozen tables across the
 * daemon and its tools grow one element at a time. One copy of the rule,
 * with the size checked for overflow before it is multiplied.
 */
#include <stdint.h>
#include <stdlib.h>

#include "store.h"

void *kv_array_room(void *v, size_t n, size_t *cap, size_t elem, size_t first)
{
	size_t want;
	void *grown;

	if (n < *cap)
		return v;
	want = *cap ? *cap * 2 : first ? first : 1;
	if (*cap > SIZE_MAX / 2 || want > SIZE_MAX / (elem ? elem : 1))
		return NULL;
	grown = realloc(v, want * elem);
	if (grown)
		*cap = want;
	return grown;
}
