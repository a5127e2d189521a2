/*
 * Private to index/: the background loader's state, shared by load.c
 * (the walk and a layer's load) and unload.c (a layer back to the
 * manifest, which takes the loader's mutex so that no load of it runs
 * meanwhile).
 */
#ifndef KV_LOAD_I_H
#define KV_LOAD_I_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "index_i.h"

enum load_phase { PHASE_COUNTS, PHASE_EXTENTS, PHASE_PAGES, PHASE_DONE };

struct kv_index_loader {
	struct kv_index *x;
	struct kv_manifest *m;
	pthread_mutex_t mu;               /* use of m; phase and scan */
	pthread_cond_t cv;                /* nobody wants a layer any more */
	atomic_uint wanted;               /* callers waiting for a layer */
	enum load_phase phase;
	struct kv_manifest_scan *scan;    /* the background's walk */
	struct kv_read_buf *buf;          /* rows read (the scans' buffer) */
	struct kv_read_buf *put;          /* rows being put (read_put) */
	struct idx_read_ahead *ra;        /* reads meanwhile; NULL: no thread */
	uint64_t nodes, extents;          /* rows counted (PHASE_COUNTS) */
	/* The walk's last page row: a layer loaded on demand counts the
	 * pages of rows after it (the walk counted the rows before it). */
	uint64_t walk_ino;
	bool in_layer_load;               /* rows come from a layer's load */
	uint64_t rows_to_pages;           /* that layer, until its first put */
	/* Its rows taken out of the stats then, and its pages put since: a
	 * load that fails puts back the rows it did not bring in. */
	struct idx_rows taken, brought;
	bool ended;                       /* kv_index_load_end ran */
	bool closed;                      /* kv_index_load_close ran */
	/* Layers with a row (inode below ino_below) removed while the walk
	 * still reads rows, sorted (the index's write lock): their rows are
	 * old news, where a page naming no layer is damage. */
	uint64_t *gone;
	size_t ngone, gone_cap;
	uint64_t ino_below;
};

#endif
