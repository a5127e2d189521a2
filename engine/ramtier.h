/*
 * The RAM tier (engine/ramtier.c) and its loader for PREFETCH
 * (engine/prefetch.c). Internal to the engine; included by kvfs_i.h.
 */
#ifndef KVFS_RAMTIER_H
#define KVFS_RAMTIER_H

#include <stdbool.h>
#include <stdint.h>

#include "store.h"

struct kvfs;
struct kvfs_data;

/* ---- RAM tier (engine/ramtier.c) ---- */
struct kvfs_ram_stats {
	uint64_t budget;              /* bytes; 0: the tier is off */
	uint64_t pages, bytes;        /* resident payloads and their bytes */
	uint64_t protected_pages;     /* ... of them pinned (evicted last) */
	uint64_t hits, misses;        /* lookups by both read paths */
	uint64_t promotions;          /* payloads read from the SSD and kept */
	uint64_t kept_written;        /* payloads kept when their write became durable */
	uint64_t prefetched;          /* payloads loaded by PREFETCH */
	uint64_t prefetch_used;       /* ... of them read at least once afterwards */
	uint64_t prefetch_dropped;    /* PREFETCH pages not loaded (queue full, error) */
	uint64_t evictions;           /* payloads dropped for the budget */
};
void kvfs_ram_stats(struct kvfs *fs, struct kvfs_ram_stats *out);
/* How a payload came to the tier (for the counters). */
enum kvfs_ram_origin { KVFS_RAM_READ, KVFS_RAM_WRITTEN, KVFS_RAM_PREFETCH };
int kvfs_ram_init(struct kvfs *fs, uint64_t budget);
void kvfs_ram_fini(struct kvfs *fs);
/* The payload of extent id if resident (a reference; counts a hit or a
 * miss), else NULL. Only verified payloads are ever put. */
struct kvfs_data *kvfs_ram_get(struct kvfs *fs, uint64_t id);
bool kvfs_ram_has(struct kvfs *fs, uint64_t id);   /* no counting */
/* Worth a copy into the tier? True on extent id's second miss in a while
 * (ids are remembered lossily): a single pass over pages the engine
 * already holds copies nothing. */
bool kvfs_ram_admit(struct kvfs *fs, uint64_t id);
/* Keep payload d (verified, immutable from now on) of extent id; takes its
 * own reference. protect: pinned, evicted last. */
void kvfs_ram_put(struct kvfs *fs, uint64_t id, struct kvfs_data *d,
		  bool protect, enum kvfs_ram_origin origin);
/* The same for a page uid's PREFETCH loaded: unread, it counts in uid's
 * half of the budget, and past that uid's own oldest unread ones go. */
void kvfs_ram_put_prefetched(struct kvfs *fs, uint64_t id, struct kvfs_data *d,
			     bool protect, uint32_t uid);
/* uid queues bytes of PREFETCH pages: false past half the budget queued
 * for it (then the page is not queued). Given back when the loader is
 * done with them, kept or not. */
bool kvfs_ram_prefetch_reserve(struct kvfs *fs, uint32_t uid, uint64_t bytes);
void kvfs_ram_prefetch_unreserve(struct kvfs *fs, uint32_t uid, uint64_t bytes);
/* Move a resident payload to the protected list or back (pinning). */
void kvfs_ram_protect(struct kvfs *fs, uint64_t id, bool protect);
/* Extent id is gone: drop its payload. */
void kvfs_ram_drop(struct kvfs *fs, uint64_t id);
void kvfs_ram_prefetch_dropped(struct kvfs *fs, uint64_t pages);

/* ---- RAM tier loader (engine/prefetch.c) ---- */
struct kvfs_prefetch_page {
	uint64_t extent_id;
	struct kv_extent ext;
	uint8_t hash[KV_HASH_LEN];
	uint64_t size;
	bool protect;
	uint32_t uid;                 /* whose PREFETCH */
};
int kvfs_prefetch_start(struct kvfs *fs);
void kvfs_prefetch_stop(struct kvfs *fs);
/* Queue a durable page for loading into the RAM tier; false if it was not
 * queued (no tier, the queue already holds the tier's budget, or half of
 * it for pg->uid). */
bool kvfs_prefetch_queue(struct kvfs *fs, const struct kvfs_prefetch_page *pg);

#endif
