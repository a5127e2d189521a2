/*
 * Validation of fast-path batches (kvfs_ioctl.h), kept free of FUSE, the
 * index and the store so that it can be unit-tested and fuzzed on its own.
 * The daemon runs it on a private copy of the descriptors, so what it
 * validated is what it uses even if the engine rewrites the region
 * meanwhile.
 */
#ifndef KVFS_BATCH_CHECK_H
#define KVFS_BATCH_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "kvfs_ioctl.h"

/* Which call a batch is for: the same descriptors mean different things. */
enum kvfs_batch_kind {
	KVFS_BATCH_LOOKUP,
	KVFS_BATCH_READ,
	KVFS_BATCH_WRITE,
	KVFS_BATCH_PREFETCH,
};

/*
 * The call as a whole: 0, or -EPROTO (abi), -EINVAL (flags unknown for
 * the kind of call, reserved, data_region_id without KVFS_BATCH_DATA_REGION
 * or the flag without an id, count 0, desc_off misaligned, group wrong for
 * the kind of call), -E2BIG (count), -ERANGE (descriptor array not inside
 * region_len bytes).
 */
int kvfs_batch_check_arg(const struct kvfs_batch_arg *a, uint64_t region_len,
			 enum kvfs_batch_kind kind);

/*
 * Each descriptor's shape: status[i] = 0 or the -errno it fails with
 * (reserved fields, name length and range; for reads the destination range
 * and destinations that overlap each other, the descriptor array or a name
 * the daemon still has to read; for writes handle != 0, the source range,
 * an empty source and a source overlapping the descriptor array). Sources
 * of a write may overlap each other and names: the daemon only reads them.
 * With KVFS_BATCH_DATA_REGION destinations and sources are checked
 * against data_len (the data region's length) and overlap only each
 * other; without it data_len is ignored. Names' bytes are checked later,
 * when they are copied. Needs
 * kvfs_batch_check_arg to have passed. Returns the number of failed
 * descriptors, or -ENOMEM.
 */
long kvfs_batch_check_descs(const struct kvfs_batch_arg *a,
			    const struct kvfs_page_desc *d, uint64_t region_len,
			    uint64_t data_len, enum kvfs_batch_kind kind, int32_t *status);

/*
 * A write batch naming one page twice is ambiguous (which bytes win?):
 * every descriptor whose (layer, name) another one with status 0 also
 * names fails with -EINVAL, all of them, so nothing ambiguous is stored.
 * names[i] holds d[i].name_len bytes (the daemon's copy); descriptors with
 * a nonzero status are ignored. Returns the number newly failed, or -ENOMEM.
 */
long kvfs_batch_check_dups(uint32_t count, const struct kvfs_page_desc *d,
			   const char *const *names, int32_t *status);

#endif
