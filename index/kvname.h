/*
 * Name rules shared by the manifest (validating rows it writes and loads)
 * and the in-memory index (validating nodes it adds), so that anything one
 * accepts the other accepts too. Private to index/.
 */
#ifndef KV_NAME_H
#define KV_NAME_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "manifest.h"

/*
 * 0 if name[0..len) is a valid model, layer or page name: 1..KV_NAME_MAX
 * bytes, no '/' or NUL, not "." or "..". -ENAMETOOLONG or -EINVAL otherwise.
 */
static inline int kv_name_check_len(const char *name, size_t len)
{
	if (len == 0)
		return -EINVAL;
	if (len > KV_NAME_MAX)
		return -ENAMETOOLONG;
	if (memchr(name, '/', len) || memchr(name, '\0', len))
		return -EINVAL;
	if (name[0] == '.' && (len == 1 || (len == 2 && name[1] == '.')))
		return -EINVAL;
	return 0;
}

/* Same for a NUL-terminated name held in a char[KV_NAME_MAX + 1] field. */
static inline int kv_name_check(const char *name)
{
	return kv_name_check_len(name, strnlen(name, KV_NAME_MAX + 1));
}

/*
 * A layer directory's name is its layer number in decimal, leading zeros
 * allowed ("00", "7", "031"). -EINVAL for anything else or a value above
 * UINT32_MAX.
 */
static inline int kv_layer_name_parse(const char *name, uint32_t *out)
{
	uint64_t v = 0;
	const char *p;

	if (!*name)
		return -EINVAL;
	for (p = name; *p; p++) {
		if (*p < '0' || *p > '9')
			return -EINVAL;
		v = v * 10 + (uint64_t)(*p - '0');
		if (v > UINT32_MAX)
			return -EINVAL;
	}
	*out = (uint32_t)v;
	return 0;
}

#endif
