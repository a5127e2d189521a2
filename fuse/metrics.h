/*
 * Observability (fuse/metrics.c): one snapshot of every counter, gauge and
 * latency histogram of a mounted kvfs, and the formats it is read in:
 * MOUNT/.kvfs/stats (JSON), MOUNT/.kvfs/metrics (Prometheus text 0.0.4)
 * and the root xattr user.kvfs.stats ("name value" lines). All three are
 * made from the same snapshot so they can never disagree within one read.
 * docs/metrics.md documents every name; tests/mount/metrics.sh checks that
 * the documentation and the output list the same families.
 */
#ifndef KVFS_METRICS_H
#define KVFS_METRICS_H

#include <stddef.h>

#include "kvfs_i.h"

/* Values a snapshot holds, by index (see the table in metrics.c). */
enum kvfs_mv {
	/* RAM tier */
	MV_RAM_BUDGET, MV_RAM_PAGES, MV_RAM_BYTES, MV_RAM_PROTECTED,
	MV_RAM_HITS, MV_RAM_MISSES, MV_RAM_HIT_RATIO, MV_RAM_PROMOTIONS,
	MV_RAM_KEPT_WRITTEN, MV_RAM_PREFETCHED, MV_RAM_PREFETCH_USED,
	MV_RAM_PREFETCH_USED_RATIO, MV_RAM_PREFETCH_DROPPED, MV_RAM_EVICTIONS,
	/* SSD tier */
	MV_SSD_PAGES, MV_SSD_LOGICAL, MV_SSD_PHYSICAL, MV_SSD_EXTENTS,
	MV_SSD_SEGMENTS, MV_SSD_CAPACITY, MV_SSD_AVAIL, MV_SSD_RESERVED,
	MV_SSD_HIGH, MV_SSD_LOW, MV_SSD_AUTHORITATIVE, MV_SSD_EVICTIONS,
	MV_SSD_EVICTED_SHARED, MV_SSD_EVICTED_BYTES, MV_SSD_EVICTION_RUNS,
	MV_SSD_SPACE_WAITS, MV_SSD_ENOSPC, MV_SSD_HITS,
	MV_SSD_STRIPES_OK, MV_SSD_STRIPES_FAILED, MV_SSD_STRIPES_MISSING,
	MV_SSD_WRITE_ERRORS, MV_SSD_PREALLOC, MV_SSD_EMPTY_PAGES,
	/* namespace */
	MV_MODELS, MV_LAYERS, MV_INDEX_LOADING, MV_INDEX_LOAD_MS,
	MV_LAYERS_UNLOADED, MV_PAGES_UNLOADED,
	/* reads */
	MV_READ_FUSE_DISK, MV_READ_FUSE_RAM, MV_READ_FAST_BYTES,
	MV_FAST_BATCHES, MV_FAST_PAGES, MV_FAST_BOUNCED,
	/* writes */
	MV_ACCEPTED_FUSE, MV_ACCEPTED_FAST, MV_SSD_WRITTEN, MV_WRITE_AMP,
	MV_FAST_WRITE_BATCHES, MV_FAST_PAGES_WRITTEN,
	/* dedup, integrity, pages */
	MV_DEDUP_PAGES, MV_DEDUP_BYTES, MV_DEDUP_MISMATCHES,
	MV_CHECKSUM_FAILURES, MV_PAGES_SEALED, MV_PAGES_LOST, MV_COMMITS,
	/* write-back */
	MV_WB_BUDGET, MV_WB_DIRTY, MV_WB_FILLING, MV_WB_DRAINING, MV_WB_PEAK,
	MV_WB_WAITS, MV_WB_OVERRUNS, MV_WB_UID_REFUSED,
	/* I/O scheduler */
	MV_SCHED_FIFO, MV_SCHED_READS_INFLIGHT, MV_SCHED_WRITES_INFLIGHT,
	MV_SCHED_WRITE_BYTES_INFLIGHT, MV_SCHED_WRITES_PEAK,
	MV_SCHED_WRITES_PEAK_READING, MV_SCHED_WRITE_SHARE,
	MV_SCHED_READS_ISSUED, MV_SCHED_WRITES_ISSUED, MV_SCHED_HELD_BACK,
	/* fast-path calls and the kernel-cache notifier */
	MV_FAST_REFUSED, MV_FAST_QUEUED, MV_FAST_RUNNING, MV_FAST_MEM, MV_FAST_UID_WEIGHTING,
	MV_NOTIFY_PENDING, MV_NOTIFY_DROPPED,
	/* KV events */
	MV_EV_LAST_SEQ, MV_EV_RETAINED, MV_EV_READERS, MV_EV_MISSED, MV_EV_OVERFLOWS,
	MV_COUNT
};

struct kvfs_mval {
	bool real;          /* a ratio: d holds it; otherwise u */
	uint64_t u;
	double d;
};

/* The fast-path latency histograms, in this order. */
enum { KVFS_LAT_READ, KVFS_LAT_WRITE, KVFS_LAT_LOOKUP, KVFS_LAT_PREFETCH,
       KVFS_LAT_COUNT };

struct kvfs_hist_snap {
	uint64_t bucket[KVFS_HIST_BUCKETS];   /* per bucket, not cumulative */
	uint64_t count;
	uint64_t sum_ns;
};

struct kvfs_metrics {
	struct kvfs_mval v[MV_COUNT];
	struct kvfs_hist_snap lat[KVFS_LAT_COUNT];
	/* user.kvfs.stats only: the legacy counter of that name */
	uint64_t bytes_written;
};

/* Take a snapshot (never holds ns_lock; safe from any FUSE thread). */
void kvfs_metrics_snapshot(struct kvfs *fs, struct kvfs_metrics *m);

/* Format a snapshot into a malloc'd, NUL-terminated buffer: 0 or -ENOMEM.
 * *len excludes the NUL. */
int kvfs_metrics_json(const struct kvfs_metrics *m, char **out, size_t *len);
int kvfs_metrics_prom(const struct kvfs_metrics *m, char **out, size_t *len);

/* The user.kvfs.stats "name value" lines into out (snprintf semantics). */
int kvfs_metrics_lines(const struct kvfs_metrics *m, char *out, size_t len);

#endif
