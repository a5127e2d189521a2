/* Capacity and eviction (in progress). */
#include <string.h>
#include "kvfs_i.h"

void kvfs_cap_stats(struct kvfs *fs, struct kvfs_cap_stats *out)
{
	struct kv_store_usage u;

	memset(out, 0, sizeof(*out));
	kv_store_usage(fs->store, &u);
	out->capacity = fs->meta.capacity;
	out->used = u.used;
	out->authoritative = true;
}
