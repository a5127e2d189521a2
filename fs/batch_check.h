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

/*
 * The call as a whole: 0, or -EPROTO (abi), -EINVAL (flags, reserved,
 * count 0, desc_off misaligned, group wrong for the kind of call), -E2BIG
 * (count), -ERANGE (descriptor array not inside region_len bytes).
 */
int kvfs_batch_check_arg(const struct kvfs_batch_arg *a, uint64_t region_len,
			 bool is_read);

/*
 * Each descriptor's shape: status[i] = 0 or the -errno it fails with
 * (reserved fields, name length and range, destination range, and for
 * reads destinations that overlap each other, the descriptor array or a
 * name the daemon still has to read). Names' bytes are checked later, when
 * they are copied. Needs kvfs_batch_check_arg to have passed. Returns the
 * number of failed descriptors, or -ENOMEM.
 */
long kvfs_batch_check_descs(const struct kvfs_batch_arg *a,
			    const struct kvfs_page_desc *d, uint64_t region_len,
			    bool is_read, int32_t *status);

#endif
