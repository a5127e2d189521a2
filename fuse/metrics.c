/*
 * Metrics: one snapshot of the daemon's numbers, formatted as JSON
 * (MOUNT/.kvfs/stats), Prometheus text exposition 0.0.4
 * (MOUNT/.kvfs/metrics) and "name value" lines (the user.kvfs.stats xattr).
 *
 * One table (defs[]) names every value in both JSON and Prometheus, so the
 * two files cannot drift apart; docs/metrics.md lists the same names and
 * the mount test compares the documentation with the output.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "executor.h"
#include "metrics.h"
#include "notifier.h"

/* ---- snapshot ---- */

static void set_u(struct kvfs_metrics *m, enum kvfs_mv i, uint64_t u)
{
	m->v[i].real = false;
	m->v[i].u = u;
}

/* A ratio that is 0 rather than NaN while its denominator is. */
static void set_ratio(struct kvfs_metrics *m, enum kvfs_mv i, uint64_t num, uint64_t den)
{
	m->v[i].real = true;
	m->v[i].d = den ? (double)num / (double)den : 0.0;
}

static void snap_ram(struct kvfs *fs, struct kvfs_metrics *m)
{
	struct kvfs_ram_stats r;

	kvfs_ram_stats(fs, &r);
	set_u(m, MV_RAM_BUDGET, r.budget);
	set_u(m, MV_RAM_PAGES, r.pages);
	set_u(m, MV_RAM_BYTES, r.bytes);
	set_u(m, MV_RAM_PROTECTED, r.protected_pages);
	set_u(m, MV_RAM_HITS, r.hits);
	set_u(m, MV_RAM_MISSES, r.misses);
	set_ratio(m, MV_RAM_HIT_RATIO, r.hits, r.hits + r.misses);
	set_u(m, MV_RAM_PROMOTIONS, r.promotions);
	set_u(m, MV_RAM_KEPT_WRITTEN, r.kept_written);
	set_u(m, MV_RAM_PREFETCHED, r.prefetched);
	set_u(m, MV_RAM_PREFETCH_USED, r.prefetch_used);
	set_ratio(m, MV_RAM_PREFETCH_USED_RATIO, r.prefetch_used, r.prefetched);
	set_u(m, MV_RAM_PREFETCH_DROPPED, r.prefetch_dropped);
	set_u(m, MV_RAM_EVICTIONS, r.evictions);
	/* Pages served to readers (either path) from the device. */
	set_u(m, MV_SSD_HITS, atomic_load(&fs->st.pages_read_disk));
}

/* How many stripes are in each state, and their failed writes. */
static void snap_stripes(struct kvfs *fs, struct kvfs_metrics *m, unsigned n)
{
	uint64_t count[3] = { 0 }, errors = 0;
	struct kv_stripe_state ss;

	for (unsigned i = 0; i < n; i++) {
		if (kv_store_stripe_state(fs->store, i, &ss) < 0)
			continue;
		count[ss.health]++;
		errors += ss.write_errors;
	}
	set_u(m, MV_SSD_STRIPES_OK, count[KV_STRIPE_OK]);
	set_u(m, MV_SSD_STRIPES_FAILED, count[KV_STRIPE_FAILED]);
	set_u(m, MV_SSD_STRIPES_MISSING, count[KV_STRIPE_MISSING]);
	set_u(m, MV_SSD_WRITE_ERRORS, errors);
}

static void snap_ssd(struct kvfs *fs, struct kvfs_metrics *m)
{
	struct kvfs_cap_stats c;
	struct kv_store_usage u;
	struct kv_index_stats is;
	uint64_t empty;

	kvfs_cap_stats(fs, &c);
	/* One sweep of the store: its usage with each empty page charged a
	 * block gives the room left; less those blocks, the bytes on disk. */
	empty = kvfs_store_usage(fs, &u);
	kv_index_stats(fs->idx, &is);
	set_u(m, MV_SSD_PAGES, is.pages);
	set_u(m, MV_SSD_LOGICAL, is.page_bytes);
	set_u(m, MV_SSD_PHYSICAL, u.used - empty * KV_ALIGN);
	set_u(m, MV_SSD_EXTENTS, u.extents);
	set_u(m, MV_SSD_SEGMENTS, u.segments);
	set_u(m, MV_SSD_CAPACITY, c.capacity);
	set_u(m, MV_SSD_AVAIL, u.avail);
	set_u(m, MV_SSD_PREALLOC, u.prealloc);
	set_u(m, MV_SSD_EMPTY_PAGES, empty);
	set_u(m, MV_SSD_RESERVED, c.reserved);
	set_u(m, MV_SSD_HIGH, c.high);
	set_u(m, MV_SSD_LOW, c.low);
	set_u(m, MV_SSD_AUTHORITATIVE, c.authoritative);
	set_u(m, MV_SSD_EVICTIONS, c.evictions);
	set_u(m, MV_SSD_EVICTED_SHARED, c.evicted_shared);
	set_u(m, MV_SSD_EVICTED_BYTES, c.evicted_bytes);
	set_u(m, MV_SSD_EVICTION_RUNS, c.eviction_runs);
	set_u(m, MV_SSD_SPACE_WAITS, c.space_waits);
	snap_stripes(fs, m, u.nstripes);
	set_u(m, MV_SSD_ENOSPC, c.enospc);
	set_u(m, MV_MODELS, is.models);
	set_u(m, MV_LAYERS, is.layers);
	set_u(m, MV_INDEX_LOADING, kvfs_loading(fs));
	set_u(m, MV_INDEX_LOAD_MS, kvfs_load_ms(fs));
	set_u(m, MV_LAYERS_UNLOADED, is.layers_unloaded);
	set_u(m, MV_PAGES_UNLOADED, is.pages_unloaded);
}

#define ST(f) atomic_load_explicit(&fs->st.f, memory_order_relaxed)

static void snap_counters(struct kvfs *fs, struct kvfs_metrics *m)
{
	uint64_t fuse = ST(bytes_accepted_fuse), fast = ST(bytes_accepted_fast);
	uint64_t ssd = ST(ssd_bytes_written);

	set_u(m, MV_READ_FUSE_DISK, ST(bytes_read_disk));
	set_u(m, MV_READ_FUSE_RAM, ST(bytes_read_ram));
	set_u(m, MV_READ_FAST_BYTES, ST(bytes_read_fast));
	set_u(m, MV_FAST_BATCHES, ST(fast_batches));
	set_u(m, MV_FAST_PAGES, ST(fast_pages));
	set_u(m, MV_FAST_BOUNCED, ST(fast_bounced));
	set_u(m, MV_ACCEPTED_FUSE, fuse);
	set_u(m, MV_ACCEPTED_FAST, fast);
	set_u(m, MV_SSD_WRITTEN, ssd);
	set_ratio(m, MV_WRITE_AMP, ssd, fuse + fast);
	set_u(m, MV_FAST_WRITE_BATCHES, ST(fast_write_batches));
	set_u(m, MV_FAST_PAGES_WRITTEN, ST(fast_pages_written));
	set_u(m, MV_DEDUP_PAGES, ST(pages_deduped));
	set_u(m, MV_DEDUP_BYTES, ST(bytes_deduped));
	set_u(m, MV_DEDUP_MISMATCHES, ST(dedup_mismatches));
	set_u(m, MV_CHECKSUM_FAILURES, ST(checksum_failures));
	set_u(m, MV_PAGES_SEALED, ST(pages_sealed));
	set_u(m, MV_PAGES_LOST, ST(pages_lost));
	set_u(m, MV_COMMITS, ST(commits));
	m->bytes_written = ST(bytes_written);
}

static void snap_dirty(struct kvfs *fs, struct kvfs_metrics *m)
{
	struct kvfs_dirty *d = &fs->dirty;

	pthread_mutex_lock(&d->lock);
	set_u(m, MV_WB_BUDGET, d->budget);
	set_u(m, MV_WB_DIRTY, d->filling + d->draining);
	set_u(m, MV_WB_FILLING, d->filling);
	set_u(m, MV_WB_DRAINING, d->draining);
	set_u(m, MV_WB_PEAK, d->peak);
	set_u(m, MV_WB_WAITS, d->waits);
	set_u(m, MV_WB_OVERRUNS, d->overruns);
	set_u(m, MV_WB_UID_REFUSED, d->uid_refused);
	pthread_mutex_unlock(&d->lock);
}

static void snap_sched(struct kvfs *fs, struct kvfs_metrics *m)
{
	struct kv_sched_stats s;

	kv_store_sched_stats(fs->store, &s);
	set_u(m, MV_SCHED_FIFO, s.fifo);
	set_u(m, MV_SCHED_READS_INFLIGHT, s.reads_inflight);
	set_u(m, MV_SCHED_WRITES_INFLIGHT, s.writes_inflight);
	set_u(m, MV_SCHED_WRITE_BYTES_INFLIGHT, s.write_bytes_inflight);
	set_u(m, MV_SCHED_WRITES_PEAK, s.writes_peak);
	set_u(m, MV_SCHED_WRITES_PEAK_READING, s.writes_peak_reading);
	set_u(m, MV_SCHED_WRITE_SHARE, s.write_ops_share);
	set_u(m, MV_SCHED_READS_ISSUED, s.reads_issued);
	set_u(m, MV_SCHED_WRITES_ISSUED, s.writes_issued);
	set_u(m, MV_SCHED_HELD_BACK, s.write_throttled_events);
}

/* Buckets are read one by one while others record: count is taken as
 * their sum so a histogram is always self-consistent (+Inf == _count). */
static void snap_hist(const struct kvfs_hist *h, struct kvfs_hist_snap *s)
{
	unsigned i;

	s->count = 0;
	for (i = 0; i < KVFS_HIST_BUCKETS; i++) {
		s->bucket[i] = atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
		s->count += s->bucket[i];
	}
	s->sum_ns = atomic_load_explicit(&h->sum_ns, memory_order_relaxed);
}

static void snap_fast(struct kvfs *fs, struct kvfs_metrics *m)
{
	struct kvfs_exec_stats e;
	struct kvfs_notifier_stats n;

	kvfs_exec_stats(fs->exec, &e);
	kvfs_notifier_stats(&n);
	set_u(m, MV_FAST_REFUSED, ST(fast_refused));
	set_u(m, MV_FAST_QUEUED, e.queued);
	set_u(m, MV_FAST_RUNNING, e.running);
	set_u(m, MV_FAST_MEM, e.mem_running);
	set_u(m, MV_FAST_UID_WEIGHTING, e.uid_weighting);
	set_u(m, MV_NOTIFY_PENDING, n.pending);
	set_u(m, MV_NOTIFY_DROPPED, n.dropped);
}

static void snap_events(struct kvfs *fs, struct kvfs_metrics *m)
{
	struct kvfs_events_stats e;

	kvfs_events_stats(fs, &e);
	set_u(m, MV_EV_LAST_SEQ, e.last_seq);
	set_u(m, MV_EV_RETAINED, e.retained);
	set_u(m, MV_EV_READERS, e.readers);
	set_u(m, MV_EV_MISSED, e.missed);
	set_u(m, MV_EV_OVERFLOWS, e.overflows);
}

void kvfs_metrics_snapshot(struct kvfs *fs, struct kvfs_metrics *m)
{
	memset(m, 0, sizeof(*m));
	snap_ram(fs, m);
	snap_ssd(fs, m);
	snap_counters(fs, m);
	snap_dirty(fs, m);
	snap_sched(fs, m);
	snap_fast(fs, m);
	snap_events(fs, m);
	snap_hist(&fs->st.lat_read, &m->lat[KVFS_LAT_READ]);
	snap_hist(&fs->st.lat_write, &m->lat[KVFS_LAT_WRITE]);
	snap_hist(&fs->st.lat_lookup, &m->lat[KVFS_LAT_LOOKUP]);
	snap_hist(&fs->st.lat_prefetch, &m->lat[KVFS_LAT_PREFETCH]);
}

/* ---- the names ---- */

enum mkind { MK_COUNTER, MK_GAUGE };

struct mdef {
	enum kvfs_mv v;
	const char *sect;      /* JSON object it belongs to */
	const char *key;       /* its key there */
	const char *fam;       /* Prometheus family */
	const char *labels;    /* label pairs, or NULL */
	enum mkind kind;
	const char *help;      /* the family's: taken from its first entry */
};

#define C MK_COUNTER
#define G MK_GAUGE
static const struct mdef defs[] = {
	{ MV_RAM_BUDGET, "ram", "budget_bytes", "kvfs_ram_budget_bytes", NULL, G,
	  "RAM tier budget (0: the tier is off)" },
	{ MV_RAM_PAGES, "ram", "pages", "kvfs_tier_pages", "tier=\"ram\"", G,
	  "Pages held by a tier (ram: resident payloads; ssd: pages in the namespace)" },
	{ MV_SSD_PAGES, "ssd", "pages", "kvfs_tier_pages", "tier=\"ssd\"", G, NULL },
	{ MV_RAM_BYTES, "ram", "bytes", "kvfs_tier_bytes", "tier=\"ram\"", G,
	  "Logical payload bytes held by a tier" },
	{ MV_SSD_LOGICAL, "ssd", "logical_bytes", "kvfs_tier_bytes", "tier=\"ssd\"", G, NULL },
	{ MV_RAM_PROTECTED, "ram", "protected_pages", "kvfs_ram_protected_pages", NULL, G,
	  "Resident pages that are pinned (evicted last)" },
	{ MV_RAM_HITS, "ram", "hits", "kvfs_hits_total", "tier=\"ram\"", C,
	  "Pages served to readers by a tier (ssd: read from the device)" },
	{ MV_SSD_HITS, "ssd", "hits", "kvfs_hits_total", "tier=\"ssd\"", C, NULL },
	{ MV_RAM_MISSES, "ram", "misses", "kvfs_ram_misses_total", NULL, C,
	  "Page lookups that missed the RAM tier" },
	{ MV_RAM_HIT_RATIO, "ram", "hit_ratio", "kvfs_ram_hit_ratio", NULL, G,
	  "RAM hits / (hits + misses) since mount, 0 without lookups" },
	{ MV_RAM_PROMOTIONS, "ram", "promotions", "kvfs_ram_promotions_total", NULL, C,
	  "Payloads read from the SSD and kept in RAM" },
	{ MV_RAM_KEPT_WRITTEN, "ram", "kept_written", "kvfs_ram_kept_written_total", NULL, C,
	  "Payloads kept in RAM when their write became durable" },
	{ MV_RAM_PREFETCHED, "ram", "prefetched", "kvfs_ram_prefetched_total", NULL, C,
	  "Payloads loaded into RAM by fast-path PREFETCH" },
	{ MV_RAM_PREFETCH_USED, "ram", "prefetch_used", "kvfs_ram_prefetch_used_total", NULL, C,
	  "Prefetched payloads read at least once afterwards" },
	{ MV_RAM_PREFETCH_USED_RATIO, "ram", "prefetch_used_ratio",
	  "kvfs_ram_prefetch_used_ratio", NULL, G,
	  "prefetch_used / prefetched since mount, 0 before any prefetch" },
	{ MV_RAM_PREFETCH_DROPPED, "ram", "prefetch_dropped",
	  "kvfs_ram_prefetch_dropped_total", NULL, C,
	  "PREFETCH pages not loaded (queue full, error)" },
	{ MV_RAM_EVICTIONS, "ram", "evictions", "kvfs_evictions_total", "tier=\"ram\"", C,
	  "Pages evicted from a tier (ram: for the RAM budget; ssd: for the capacity)" },
	{ MV_SSD_EVICTIONS, "ssd", "evictions", "kvfs_evictions_total", "tier=\"ssd\"", C, NULL },
	{ MV_SSD_PHYSICAL, "ssd", "physical_bytes", "kvfs_ssd_physical_bytes", NULL, G,
	  "Bytes the store's extents occupy on the SSD (footprints, each shared extent once)" },
	{ MV_SSD_EMPTY_PAGES, "ssd", "empty_pages", "kvfs_ssd_empty_pages", NULL, G,
	  "Pages of size 0 (including pages created and not yet written): no extent, each charged one 4 KiB block of the capacity" },
	{ MV_SSD_PREALLOC, "ssd", "prealloc_bytes", "kvfs_ssd_prealloc_bytes", NULL, G,
	  "Bytes fallocate'd ahead of the writes, not yet used (within the capacity)" },
	{ MV_SSD_EXTENTS, "ssd", "extents", "kvfs_ssd_extents", NULL, G,
	  "Live extents" },
	{ MV_SSD_SEGMENTS, "ssd", "segments", "kvfs_ssd_segments", NULL, G,
	  "Segment files" },
	{ MV_SSD_CAPACITY, "ssd", "capacity_bytes", "kvfs_ssd_capacity_bytes", NULL, G,
	  "Capacity budget of the store (0: none, the stripes' free space)" },
	{ MV_SSD_AVAIL, "ssd", "available_bytes", "kvfs_ssd_available_bytes", NULL, G,
	  "Bytes that may still be allocated (less the blocks empty pages are charged)" },
	{ MV_SSD_RESERVED, "ssd", "reserved_bytes", "kvfs_ssd_reserved_bytes", NULL, G,
	  "Bytes held for pages being written" },
	{ MV_SSD_HIGH, "ssd", "high_watermark_bytes", "kvfs_ssd_high_watermark_bytes", NULL, G,
	  "Eviction starts above this usage: extents, bytes reserved for pages being written, 4 KiB per empty page (0: no eviction)" },
	{ MV_SSD_LOW, "ssd", "low_watermark_bytes", "kvfs_ssd_low_watermark_bytes", NULL, G,
	  "Eviction stops below this usage" },
	{ MV_SSD_AUTHORITATIVE, "ssd", "authoritative", "kvfs_ssd_authoritative", NULL, G,
	  "1: authoritative mode (ENOSPC when full), 0: cache mode (evicts)" },
	{ MV_SSD_EVICTED_SHARED, "ssd", "evicted_shared", "kvfs_ssd_evicted_shared_total", NULL, C,
	  "Evicted pages that were shared (each name counts) or pinned" },
	{ MV_SSD_EVICTED_BYTES, "ssd", "evicted_bytes", "kvfs_ssd_evicted_bytes_total", NULL, C,
	  "Physical bytes freed by eviction" },
	{ MV_SSD_EVICTION_RUNS, "ssd", "eviction_runs", "kvfs_ssd_eviction_runs_total", NULL, C,
	  "Eviction passes" },
	{ MV_SSD_SPACE_WAITS, "ssd", "space_waits", "kvfs_ssd_space_waits_total", NULL, C,
	  "Writers that waited for eviction to free space" },
	{ MV_SSD_ENOSPC, "ssd", "enospc", "kvfs_ssd_enospc_total", NULL, C,
	  "Writes refused with ENOSPC" },
	{ MV_SSD_STRIPES_OK, "ssd", "stripes_ok", "kvfs_ssd_stripes", "state=\"ok\"", G,
	  "Stripes by state (ok; failed: taken out of allocation after failed writes; "
	  "missing: left out of a -o degraded mount)" },
	{ MV_SSD_STRIPES_FAILED, "ssd", "stripes_failed", "kvfs_ssd_stripes", "state=\"failed\"",
	  G, NULL },
	{ MV_SSD_STRIPES_MISSING, "ssd", "stripes_missing", "kvfs_ssd_stripes",
	  "state=\"missing\"", G, NULL },
	{ MV_SSD_WRITE_ERRORS, "ssd", "write_errors", "kvfs_ssd_write_errors_total", NULL, C,
	  "Extent writes and fdatasyncs that failed with a device error (EIO, EROFS, ...)" },
	{ MV_MODELS, "namespace", "models", "kvfs_models", NULL, G, "Model directories" },
	{ MV_LAYERS, "namespace", "layers", "kvfs_layers", NULL, G, "Layer directories" },
	{ MV_INDEX_LOADING, "namespace", "loading", "kvfs_index_loading", NULL, G,
	  "1 while the mount still loads its index in the background (every change is taken; eviction chooses among layers already loaded)" },
	{ MV_INDEX_LOAD_MS, "namespace", "load_ms", "kvfs_index_load_milliseconds", NULL, G,
	  "How long the background load took (so far, while loading; frozen once it ended, also by a failure; 0 with -o eager_load)" },
	{ MV_LAYERS_UNLOADED, "namespace", "layers_unloaded", "kvfs_index_layers_unloaded", NULL, G,
	  "Layers whose pages are not in the daemon's RAM: not reached yet by the background load, or left in the manifest until used (-o index_pages)" },
	{ MV_PAGES_UNLOADED, "namespace", "pages_unloaded", "kvfs_index_pages_unloaded", NULL, G,
	  "Pages counted in ssd.pages whose layer -o index_pages left in the manifest until used" },
	{ MV_READ_FUSE_DISK, "reads", "fuse_bytes_disk", "kvfs_read_bytes_total",
	  "path=\"fuse\",tier=\"ssd\"", C,
	  "Payload bytes read (fuse: by source tier; fast: fast-path READ, any source)" },
	{ MV_READ_FUSE_RAM, "reads", "fuse_bytes_ram", "kvfs_read_bytes_total",
	  "path=\"fuse\",tier=\"ram\"", C, NULL },
	{ MV_READ_FAST_BYTES, "reads", "fast_bytes", "kvfs_read_bytes_total",
	  "path=\"fast\",tier=\"any\"", C, NULL },
	{ MV_FAST_BATCHES, "reads", "fast_batches", "kvfs_fast_read_batches_total", NULL, C,
	  "Fast-path READ calls" },
	{ MV_FAST_PAGES, "reads", "fast_pages", "kvfs_fast_read_pages_total", NULL, C,
	  "Pages delivered by fast-path READ calls" },
	{ MV_FAST_BOUNCED, "reads", "fast_bounced", "kvfs_fast_read_bounced_pages_total", NULL, C,
	  "Fast-path pages copied through a bounce buffer" },
	{ MV_ACCEPTED_FUSE, "writes", "bytes_accepted_fuse", "kvfs_accepted_bytes_total",
	  "path=\"fuse\"", C, "Payload bytes of pages sealed, by write path" },
	{ MV_ACCEPTED_FAST, "writes", "bytes_accepted_fast", "kvfs_accepted_bytes_total",
	  "path=\"fast\"", C, NULL },
	{ MV_SSD_WRITTEN, "writes", "ssd_bytes_written", "kvfs_ssd_written_bytes_total",
	  "path=\"writeback\"", C, "Extent bytes written to the SSD by write-back (padding included)" },
	{ MV_WRITE_AMP, "writes", "write_amplification", "kvfs_write_amplification_ratio", NULL, G,
	  "ssd_bytes_written / accepted bytes (both paths) since mount, 0 before any" },
	{ MV_FAST_WRITE_BATCHES, "writes", "fast_batches", "kvfs_fast_write_batches_total", NULL, C,
	  "Fast-path WRITE calls" },
	{ MV_FAST_PAGES_WRITTEN, "writes", "fast_pages", "kvfs_fast_write_pages_total", NULL, C,
	  "Pages published by fast-path WRITE calls" },
	{ MV_DEDUP_PAGES, "dedup", "pages_deduped", "kvfs_dedup_pages_total", NULL, C,
	  "Sealed pages that share an existing extent" },
	{ MV_DEDUP_BYTES, "dedup", "bytes_saved", "kvfs_dedup_saved_bytes_total", NULL, C,
	  "Payload bytes not written again thanks to dedup" },
	{ MV_DEDUP_MISMATCHES, "dedup", "mismatches", "kvfs_dedup_mismatches_total", NULL, C,
	  "Candidates with the same hash and length but other bytes" },
	{ MV_CHECKSUM_FAILURES, "pages", "checksum_failures", "kvfs_checksum_failures_total",
	  NULL, C, "Reads whose payload failed its checksum" },
	{ MV_PAGES_SEALED, "pages", "sealed", "kvfs_pages_sealed_total", NULL, C,
	  "Pages sealed (both write paths)" },
	{ MV_PAGES_LOST, "pages", "lost", "kvfs_pages_lost_total", NULL, C,
	  "Sealed pages lost because their write or sync failed" },
	{ MV_COMMITS, "pages", "commits", "kvfs_commits_total", NULL, C,
	  "Manifest transactions committed" },
	{ MV_WB_BUDGET, "writeback", "budget_bytes", "kvfs_writeback_budget_bytes", NULL, G,
	  "Write-back (dirty) memory budget" },
	{ MV_WB_DIRTY, "writeback", "dirty_bytes", "kvfs_writeback_dirty_bytes", NULL, G,
	  "Bytes not yet durable (filling + draining)" },
	{ MV_WB_FILLING, "writeback", "filling_bytes", "kvfs_writeback_filling_bytes", NULL, G,
	  "Dirty bytes of pages still being written" },
	{ MV_WB_DRAINING, "writeback", "draining_bytes", "kvfs_writeback_draining_bytes", NULL, G,
	  "Dirty bytes of sealed pages the committer will retire" },
	{ MV_WB_PEAK, "writeback", "peak_bytes", "kvfs_writeback_peak_bytes", NULL, G,
	  "Largest dirty_bytes seen since mount" },
	{ MV_WB_WAITS, "writeback", "waits", "kvfs_writeback_waits_total", NULL, C,
	  "Times a writer blocked on the write-back budget" },
	{ MV_WB_OVERRUNS, "writeback", "overruns", "kvfs_writeback_overruns_total", NULL, C,
	  "Charges let through with nothing draining" },
	{ MV_WB_UID_REFUSED, "writeback", "uid_refused", "kvfs_writeback_uid_refused_total",
	  NULL, C, "Page-file writes refused (EDQUOT): their uid held half the budget in pages being written" },
	{ MV_SCHED_FIFO, "sched", "fifo", "kvfs_sched_fifo", NULL, G,
	  "1: the I/O scheduler is off (KVFS_SCHED=fifo)" },
	{ MV_SCHED_READS_INFLIGHT, "sched", "reads_inflight", "kvfs_sched_reads_inflight", NULL, G,
	  "Reads in flight now, every ring" },
	{ MV_SCHED_WRITES_INFLIGHT, "sched", "writes_inflight", "kvfs_sched_writes_inflight",
	  NULL, G, "Writes in flight now on the I/O thread" },
	{ MV_SCHED_WRITE_BYTES_INFLIGHT, "sched", "write_bytes_inflight",
	  "kvfs_sched_write_inflight_bytes", NULL, G, "Bytes of the writes in flight now" },
	{ MV_SCHED_WRITES_PEAK, "sched", "writes_peak", "kvfs_sched_writes_peak", NULL, G,
	  "Most writes ever in flight at once" },
	{ MV_SCHED_WRITES_PEAK_READING, "sched", "writes_peak_while_reading",
	  "kvfs_sched_writes_peak_while_reading", NULL, G,
	  "Most writes in flight at once while reads were active" },
	{ MV_SCHED_WRITE_SHARE, "sched", "write_share", "kvfs_sched_write_share", NULL, G,
	  "Writes allowed in flight while reads are active" },
	{ MV_SCHED_READS_ISSUED, "sched", "reads_issued", "kvfs_sched_reads_issued_total", NULL, C,
	  "Read submissions since mount, every ring" },
	{ MV_SCHED_WRITES_ISSUED, "sched", "writes_issued", "kvfs_sched_writes_issued_total",
	  NULL, C, "Write submissions since mount" },
	{ MV_SCHED_HELD_BACK, "sched", "writes_held_back", "kvfs_sched_writes_held_back_total",
	  NULL, C, "Times queued writes were held back for reads" },
	{ MV_FAST_REFUSED, "fastpath", "refused", "kvfs_fast_refused_total", NULL, C,
	  "Fast-path calls refused as a whole (bad arguments, limits, permissions)" },
	{ MV_FAST_QUEUED, "fastpath", "queued", "kvfs_fast_calls_queued", NULL, G,
	  "Fast-path calls waiting for an executor thread" },
	{ MV_FAST_RUNNING, "fastpath", "running", "kvfs_fast_calls_running", NULL, G,
	  "Fast-path calls running on executor threads" },
	{ MV_FAST_MEM, "fastpath", "memory_bytes", "kvfs_fast_calls_memory_bytes", NULL, G,
	  "Estimated daemon memory held by the running calls" },
	{ MV_FAST_UID_WEIGHTING, "fastpath", "uid_weighting", "kvfs_fast_uid_weighting", NULL, G,
	  "1 if executor threads' nice weighs each uid's running calls as one thread" },
	{ MV_NOTIFY_PENDING, "fastpath", "notify_pending", "kvfs_kernel_notify_pending", NULL, G,
	  "Replaced or evicted names queued for the kernel to forget" },
	{ MV_NOTIFY_DROPPED, "fastpath", "notify_dropped", "kvfs_kernel_notify_dropped_total",
	  NULL, C, "Names the kernel was not told to forget (queue full)" },
	{ MV_EV_LAST_SEQ, "events", "last_seq", "kvfs_events_last_seq", NULL, G,
	  "Sequence number of the newest KV event record (continues across mounts)" },
	{ MV_EV_RETAINED, "events", "retained", "kvfs_events_retained", NULL, G,
	  "KV event records kept for readers (at most -o events_ring)" },
	{ MV_EV_READERS, "events", "readers", "kvfs_events_readers", NULL, G,
	  "Opens of .kvfs/events" },
	{ MV_EV_MISSED, "events", "missed", "kvfs_events_missed_total", NULL, C,
	  "KV event records readers lost because they fell out of the ring" },
	{ MV_EV_OVERFLOWS, "events", "overflows", "kvfs_events_overflows_total", NULL, C,
	  "Overflow records delivered to readers" },
};
#undef C
#undef G
#define NDEFS (sizeof(defs) / sizeof(defs[0]))

static const char *const sections[] = {
	"ram", "ssd", "namespace", "reads", "writes", "dedup", "pages",
	"writeback", "sched", "fastpath", "events", NULL,
};
static const char *const lat_names[KVFS_LAT_COUNT] = {
	"read", "write", "lookup", "prefetch",
};
#define LAT_FAMILY "kvfs_fastpath_latency_seconds"

/* ---- a growing string ---- */

struct sbuf {
	char *p;
	size_t len, cap;
	int err;
};

__attribute__((format(printf, 2, 3)))
static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->err)
		return;
	for (;;) {
		size_t room = b->cap - b->len;
		char *np;

		va_start(ap, fmt);
		n = vsnprintf(b->p ? b->p + b->len : NULL, room, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->err = -EINVAL;
			return;
		}
		if ((size_t)n < room) {
			b->len += (size_t)n;
			return;
		}
		np = realloc(b->p, b->cap * 2 + (size_t)n + 1);
		if (!np) {
			b->err = -ENOMEM;
			return;
		}
		b->p = np;
		b->cap = b->cap * 2 + (size_t)n + 1;
	}
}

static int sb_finish(struct sbuf *b, char **out, size_t *len)
{
	if (!b->err && !b->p)
		sb_printf(b, "%s", "");
	if (b->err) {
		free(b->p);
		return b->err;
	}
	*out = b->p;
	*len = b->len;
	return 0;
}

static void sb_value(struct sbuf *b, const struct kvfs_mval *v)
{
	if (v->real)
		sb_printf(b, "%.6g", v->d);
	else
		sb_printf(b, "%llu", (unsigned long long)v->u);
}

/* ---- histograms ---- */

/* The q-quantile's estimate: the upper bound of the bucket it falls in
 * (for the open last bucket, its lower bound). 0 without samples. */
static double hist_quantile(const struct kvfs_hist_snap *h, double q)
{
	uint64_t want, seen = 0;
	unsigned i;

	if (!h->count)
		return 0;
	want = (uint64_t)(q * (double)h->count + 0.999999);
	if (want == 0)
		want = 1;
	for (i = 0; i < KVFS_HIST_BUCKETS - 1; i++) {
		seen += h->bucket[i];
		if (seen >= want)
			return kvfs_hist_bound(i);
	}
	return kvfs_hist_bound(KVFS_HIST_BUCKETS - 2);
}

static void json_hist(struct sbuf *b, const char *name, const struct kvfs_hist_snap *h)
{
	uint64_t cum = 0;
	unsigned i;

	sb_printf(b, "    \"%s\": {\"count\": %llu, \"sum_seconds\": %.9g, "
		  "\"p50_seconds\": %.6g, \"p99_seconds\": %.6g, \"buckets\": [",
		  name, (unsigned long long)h->count, (double)h->sum_ns / 1e9,
		  hist_quantile(h, 0.5), hist_quantile(h, 0.99));
	for (i = 0; i < KVFS_HIST_BUCKETS; i++) {
		cum += h->bucket[i];
		if (i < KVFS_HIST_BUCKETS - 1)
			sb_printf(b, "{\"le\": %.9g, \"count\": %llu}, ", kvfs_hist_bound(i),
				  (unsigned long long)cum);
		else
			sb_printf(b, "{\"le\": \"+Inf\", \"count\": %llu}", (unsigned long long)cum);
	}
	sb_printf(b, "]}");
}

static void prom_hist(struct sbuf *b, const char *op, const struct kvfs_hist_snap *h)
{
	uint64_t cum = 0;
	unsigned i;

	for (i = 0; i < KVFS_HIST_BUCKETS; i++) {
		cum += h->bucket[i];
		if (i < KVFS_HIST_BUCKETS - 1)
			sb_printf(b, LAT_FAMILY "_bucket{op=\"%s\",le=\"%.9g\"} %llu\n", op,
				  kvfs_hist_bound(i), (unsigned long long)cum);
		else
			sb_printf(b, LAT_FAMILY "_bucket{op=\"%s\",le=\"+Inf\"} %llu\n", op,
				  (unsigned long long)cum);
	}
	sb_printf(b, LAT_FAMILY "_sum{op=\"%s\"} %.9g\n", op, (double)h->sum_ns / 1e9);
	sb_printf(b, LAT_FAMILY "_count{op=\"%s\"} %llu\n", op, (unsigned long long)h->count);
}

/* ---- JSON ---- */

static void json_section(struct sbuf *b, const struct kvfs_metrics *m, const char *sect)
{
	const char *sep = "";
	size_t i;

	sb_printf(b, "  \"%s\": {", sect);
	if (!strcmp(sect, "ssd")) {     /* the mode, spelled out */
		sb_printf(b, "\n    \"mode\": \"%s\"",
			  m->v[MV_SSD_AUTHORITATIVE].u ? "authoritative" : "cache");
		sep = ",";
	}
	for (i = 0; i < NDEFS; i++) {
		if (strcmp(defs[i].sect, sect))
			continue;
		sb_printf(b, "%s\n    \"%s\": ", sep, defs[i].key);
		sb_value(b, &m->v[defs[i].v]);
		sep = ",";
	}
	sb_printf(b, "\n  },\n");
}

int kvfs_metrics_json(const struct kvfs_metrics *m, char **out, size_t *len)
{
	struct sbuf b = { 0 };
	unsigned i;

	sb_printf(&b, "{\n");
	for (i = 0; sections[i]; i++)
		json_section(&b, m, sections[i]);
	sb_printf(&b, "  \"latency\": {\n");
	for (i = 0; i < KVFS_LAT_COUNT; i++) {
		json_hist(&b, lat_names[i], &m->lat[i]);
		sb_printf(&b, "%s\n", i + 1 < KVFS_LAT_COUNT ? "," : "");
	}
	sb_printf(&b, "  }\n}\n");
	return sb_finish(&b, out, len);
}

/* ---- Prometheus text format 0.0.4 ---- */

static bool family_seen_before(size_t i)
{
	size_t j;

	for (j = 0; j < i; j++)
		if (!strcmp(defs[j].fam, defs[i].fam))
			return true;
	return false;
}

/* A family's HELP, TYPE and every sample of it, wherever they sit in defs. */
static void prom_family(struct sbuf *b, const struct kvfs_metrics *m, size_t first)
{
	const struct mdef *f = &defs[first];
	size_t i;

	sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", f->fam, f->help, f->fam,
		  f->kind == MK_COUNTER ? "counter" : "gauge");
	for (i = first; i < NDEFS; i++) {
		if (strcmp(defs[i].fam, f->fam))
			continue;
		if (defs[i].labels)
			sb_printf(b, "%s{%s} ", f->fam, defs[i].labels);
		else
			sb_printf(b, "%s ", f->fam);
		sb_value(b, &m->v[defs[i].v]);
		sb_printf(b, "\n");
	}
}

int kvfs_metrics_prom(const struct kvfs_metrics *m, char **out, size_t *len)
{
	struct sbuf b = { 0 };
	size_t i;

	for (i = 0; i < NDEFS; i++)
		if (!family_seen_before(i))
			prom_family(&b, m, i);
	sb_printf(&b, "# HELP " LAT_FAMILY " Fast-path call latency by operation "
		  "(prefetch: queueing only)\n# TYPE " LAT_FAMILY " histogram\n");
	for (i = 0; i < KVFS_LAT_COUNT; i++)
		prom_hist(&b, lat_names[i], &m->lat[i]);
	return sb_finish(&b, out, len);
}

/* ---- user.kvfs.stats ---- */

#define MU(i) ((unsigned long long)m->v[i].u)

/* The historical key names and order: tests and scripts parse them. */
int kvfs_metrics_lines(const struct kvfs_metrics *m, char *out, size_t len)
{
	return snprintf(out, len,
		"pages_sealed %llu\npages_lost %llu\ncommits %llu\nbytes_written %llu\n"
		"bytes_read_disk %llu\nbytes_read_ram %llu\nchecksum_failures %llu\n"
		"fast_batches %llu\nfast_pages %llu\nbytes_read_fast %llu\n"
		"fast_bounced %llu\nfast_write_batches %llu\nfast_pages_written %llu\n"
		"pages_deduplicated %llu\nbytes_saved_by_dedup %llu\ndedup_mismatches %llu\n"
		"dirty_budget %llu\ndirty_bytes %llu\ndirty_filling %llu\n"
		"dirty_draining %llu\ndirty_peak %llu\ndirty_waits %llu\ndirty_overruns %llu\n"
		"sched_fifo %llu\nsched_reads_inflight %llu\nsched_writes_inflight %llu\n"
		"sched_writes_peak_while_reading %llu\nsched_write_share %llu\n"
		"sched_reads_issued %llu\nsched_writes_issued %llu\n"
		"sched_writes_held_back %llu\n",
		MU(MV_PAGES_SEALED), MU(MV_PAGES_LOST), MU(MV_COMMITS),
		(unsigned long long)m->bytes_written, MU(MV_READ_FUSE_DISK),
		MU(MV_READ_FUSE_RAM), MU(MV_CHECKSUM_FAILURES), MU(MV_FAST_BATCHES),
		MU(MV_FAST_PAGES), MU(MV_READ_FAST_BYTES), MU(MV_FAST_BOUNCED),
		MU(MV_FAST_WRITE_BATCHES), MU(MV_FAST_PAGES_WRITTEN), MU(MV_DEDUP_PAGES),
		MU(MV_DEDUP_BYTES), MU(MV_DEDUP_MISMATCHES), MU(MV_WB_BUDGET),
		MU(MV_WB_DIRTY), MU(MV_WB_FILLING), MU(MV_WB_DRAINING), MU(MV_WB_PEAK),
		MU(MV_WB_WAITS), MU(MV_WB_OVERRUNS), MU(MV_SCHED_FIFO),
		MU(MV_SCHED_READS_INFLIGHT), MU(MV_SCHED_WRITES_INFLIGHT),
		MU(MV_SCHED_WRITES_PEAK_READING), MU(MV_SCHED_WRITE_SHARE),
		MU(MV_SCHED_READS_ISSUED), MU(MV_SCHED_WRITES_ISSUED),
		MU(MV_SCHED_HELD_BACK));
}
