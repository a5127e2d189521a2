/*
 * The fast path's internals shared by its two files: fastpath.c (ioctl
 * dispatch, region calls, name resolution, permissions, lookups) and
 * fastread.c (the batched O_DIRECT read pipeline).
 */
#ifndef KVFS_FASTPATH_H
#define KVFS_FASTPATH_H

#include "kvfs_i.h"
#include "region.h"

/* How a resolved page is served. */
enum fp_source { FP_FAIL, FP_DISK, FP_RAM };

struct fp_page {
	uint32_t idx;              /* descriptor index */
	uint64_t ino;
	enum fp_source src;
	uint64_t size;
	struct kv_extent ext;
	uint8_t hash[KV_HASH_LEN];
	struct kvfs_data *ram;     /* FP_RAM: a reference */
};

struct fp_batch {
	struct kvfs *fs;
	struct kvfs_caller who;
	struct kvfs_region *r;
	struct kvfs_batch_arg a;
	struct kvfs_page_desc *d;  /* private copy of the descriptors */
	int32_t *status;
	uint32_t *out_flags;
};

/* Read every page that resolved (status 0) into the region; sets status,
 * out_flags and a->done/failed/bytes. */
void kvfs_fast_read_pages(struct fp_batch *b, struct fp_page *pages, uint32_t n);

#endif
