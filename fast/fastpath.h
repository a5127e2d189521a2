/*
 * The fast path's internals shared by its files: fastpath.c (ioctl
 * dispatch, region calls, name resolution, permissions, lookups),
 * fastread.c (the batched O_DIRECT read pipeline) and fastwrite.c (the
 * batch write).
 */
#ifndef KVFS_FASTPATH_H
#define KVFS_FASTPATH_H

#include "batch_check.h"
#include "fast.h"
#include "kvfs_i.h"
#include "region.h"

/* How a resolved page is served. */
enum fp_source {
	FP_FAIL,
	FP_DISK,
	FP_RAM,      /* the write-back copy: sealed, not yet durable */
	FP_CACHE,    /* the RAM tier's copy of a durable page */
};

struct fp_page {
	uint32_t idx;              /* descriptor index */
	uint64_t ino;
	enum fp_source src;
	uint64_t size;
	struct kv_extent ext;
	uint8_t hash[KV_HASH_LEN];
	uint64_t extent_id;
	uint32_t mode;             /* S_ISVTX: pinned (for the RAM tier) */
	struct kvfs_data *ram;     /* FP_RAM, FP_CACHE: a reference */
};

struct fp_batch {
	struct kvfs *fs;
	struct kvfs_caller who;
	struct kvfs_region *r;     /* descriptors and names */
	struct kvfs_region *dr;    /* destinations or sources: r, or the
	                            * KVFS_BATCH_DATA_REGION (a reference) */
	struct kvfs_batch_arg a;
	struct kvfs_page_desc *d;  /* private copy of the descriptors */
	int32_t *status;
	uint32_t *out_flags;
};

/* Read every page that resolved (status 0) into the region; sets status,
 * out_flags and a->done/failed/bytes. */
void kvfs_fast_read_pages(struct fp_batch *b, struct fp_page *pages, uint32_t n);

/* Decode and validate a call into b: a private copy of the descriptors,
 * each with its shape checked (status). 0 or a whole-call -errno; b must
 * be freed with fp_batch_free either way. */
int fp_batch_begin(struct fp_batch *b, struct kvfs *fs, const struct kvfs_fast_req *req,
		   const struct kvfs_batch_arg *a, enum kvfs_batch_kind kind);
/* Write status, out_flags, bytes (and handles) back into the region; counts
 * failed descriptors into b->a.failed. 0 or -EFAULT. */
int fp_batch_finish(struct fp_batch *b, bool with_handles);
void fp_batch_free(struct fp_batch *b);

/* A layer directory of the model, with what the caller may do in it. */
struct fp_layer {
	uint32_t layer;
	bool used, found;     /* a slot of the resolver's table; found: such a layer exists */
	uint64_t ino;
	bool search;          /* the caller may look names up in it */
	bool create;          /* ... and create or replace pages in it (w+x) */
	struct kv_obj_attr attr;
};

/* Resolves descriptors against one model for one caller, with the
 * permission checks the kernel's default_permissions would make. */
struct fp_resolver {
	struct fp_batch *b;
	const struct kvfs_fast_req *req;
	bool dirs_ok;         /* search permission on the root and the model */
	uint64_t model;
	struct fp_layer *layers;  /* layers looked up so far, by number (fastpath.c) */
	size_t nlayers, cap;
	struct fp_layer *last;    /* the one looked up last */
	int ngroups;          /* supplementary groups, -1 until needed */
	int64_t seal_deadline_ns;  /* the call's waits for seals end by then */
	gid_t groups[64];
};

int fp_resolver_init(struct fp_resolver *rv, struct fp_batch *b, const struct kvfs_fast_req *req,
		     uint64_t model);
void fp_resolver_free(struct fp_resolver *rv);
/* The model's layer number layer: 0, -ENOENT, or -errno. *out stays valid
 * until the next lookup. */
int fp_layer_by_num(struct fp_resolver *rv, uint32_t layer, const struct fp_layer **out);
/* mask: 4 read, 2 write, 1 search (bits may be combined). */
bool fp_may(struct fp_resolver *rv, const struct kv_obj_attr *at, unsigned mask);

/* A page's handle: its inode number under this mount's count; 0 if the
 * inode does not fit. */
uint64_t fp_handle_of(const struct kvfs *fs, uint64_t ino);

/* The calls (fastpath.c): 0 or a whole-call -errno; *a gets the outputs. */
int fp_lookup(struct kvfs *fs, const struct kvfs_fast_req *req, uint64_t model, struct kvfs_batch_arg *a);
int fp_read(struct kvfs *fs, const struct kvfs_fast_req *req, uint64_t model, struct kvfs_batch_arg *a);
int fp_prefetch(struct kvfs *fs, const struct kvfs_fast_req *req, uint64_t model, struct kvfs_batch_arg *a);
int fp_region(struct kvfs *fs, const struct kvfs_fast_req *req, unsigned cmd, struct kvfs_region_arg *a);

/* KVFS_IOC_WRITE (fastwrite.c): 0 or a whole-call -errno; *a gets the outs. */
int kvfs_fast_write(struct kvfs *fs, const struct kvfs_fast_req *req, uint64_t model,
		    struct kvfs_batch_arg *a);

#endif
