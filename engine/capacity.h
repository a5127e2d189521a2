/*
 * Capacity and eviction (engine/capacity.c, engine/victims.c): the
 * store's physical byte budget, the evictor, `kvfs gc`, and the choice of
 * victims. Internal to the engine; included by kvfs_i.h.
 */
#ifndef KVFS_CAPACITY_H
#define KVFS_CAPACITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kvfs;

struct kvfs_cap_stats {
	uint64_t capacity;            /* physical byte budget; 0: none */
	uint64_t high, low;           /* eviction watermarks, bytes */
	bool authoritative;           /* ENOSPC instead of eviction */
	uint64_t used;                /* physical bytes held by extents */
	uint64_t reserved;            /* held for pages being written */
	uint64_t evictions;           /* pages evicted */
	uint64_t evicted_shared;      /* ... of them shared (each name) or pinned */
	uint64_t evicted_bytes;       /* physical bytes those evictions freed */
	uint64_t eviction_runs;
	uint64_t space_waits;         /* writers that waited for eviction */
	uint64_t enospc;              /* writes refused for space */
};
void kvfs_cap_stats(struct kvfs *fs, struct kvfs_cap_stats *out);
/* Set up the budget from the store's meta and the mount options, and start
 * the evictor in cache mode. -EINVAL for watermarks that make no sense. */
int kvfs_cap_start(struct kvfs *fs);
void kvfs_cap_stop(struct kvfs *fs);    /* before the committer stops */
void kvfs_cap_free(struct kvfs *fs);    /* after it stopped */
/*
 * A writer is about to need `bytes` more. In cache mode past the high
 * watermark, wake the evictor; if the bytes would not fit under the
 * capacity, wait for it to make room. -ENOSPC if they still do not fit
 * and nothing is left to evict (every page held open, none draining), or
 * after 30 s; 0 otherwise (then a check under ns_lock still decides: the
 * room may be taken meanwhile, so callers retry). Never call with ns_lock
 * held.
 */
int kvfs_space_wait(struct kvfs *fs, uint64_t bytes);
/* A check under ns_lock found no room after kvfs_space_wait said there
 * was: wait for one more eviction run. 0: worth another try; -ENOSPC: not
 * cache mode, or nothing is left to evict. */
int kvfs_space_wait_run(struct kvfs *fs, uint64_t bytes);
void kvfs_space_refused(struct kvfs *fs);   /* count a write refused for space (core.c) */
/*
 * Evict durable pages nobody holds open, least recently used first
 * (pinned last; a shared extent's names together, as
 * kvfs_victims_collect): until usage is at most target bytes, or, with
 * older_than_ns, every such page last read before that time (target is
 * then ignored). *pages (may be NULL) gets how many went. Waits until their
 * space is free. 0, or the error of a commit of their deletes (logged):
 * those pages are gone from the namespace but not yet durably deleted, and
 * nothing more is evicted. Never call with ns_lock held.
 */
int kvfs_evict(struct kvfs *fs, uint64_t target, int64_t older_than_ns,
	       uint64_t *pages);

/* ---- choosing victims (engine/victims.c) ---- */
struct kvfs_victim {
	uint64_t ino;
	uint64_t extent_id;
	int64_t atime_ns;             /* a shared extent's: its newest name's */
	uint32_t refs;                /* names of its extent */
	bool protect;                 /* pinned, or shared beyond the victims */
	bool shared;
};

/* Which pages a pass may take. */
struct kvfs_victim_rule {
	bool bounded;                 /* only pages last used before before_ns */
	int64_t before_ns;
	bool plain;                   /* no pinned page, no share only partly here */
};

struct kvfs_victims {
	struct kvfs_victim_rule rule;
	struct kvfs_victim *v;
	size_t n, cap;
	int commit_rc;                /* the deletes of a batch did not commit */
	/* The shared extent whose names were last looked at together
	 * (kvfs_victim_run_still), and whether they could all go. */
	uint64_t group_id;
	bool group_ok;
};

/*
 * Durable pages the rule allows into vs, least recently used first,
 * pinned ones last. The names of a shared extent go together, at the time
 * of the one used last, when every one of them is a victim; a shared
 * extent with a name elsewhere (open, pinned, in a layer left in the
 * manifest) cannot be freed here and goes last too. Empty pages free
 * their name's charge (kvfs_store_usage). A degraded mount's pages on a
 * missing stripe are left out.
 * Sharing is looked up after the walk, which runs under the index's lock.
 * 0 or -ENOMEM (vs->v is then NULL); the caller frees vs->v.
 */
int kvfs_victims_collect(struct kvfs *fs, const struct kvfs_victim_rule *rule,
			 struct kvfs_victims *vs);
/* Whether page n may go now under vs's rule (ns_lock held): durable,
 * nobody holds it, and used before the bound if any. */
bool kvfs_victim_still(struct kvfs *fs, const struct kvfs_victims *vs,
		       const struct kv_node_info *n);
/* The same for victim v (page n, one of vs->v) and, when its extent is
 * shared, for every other name of it among the victims that still names
 * it: one name that must stay keeps them all, since evicting the rest
 * would free nothing. The names are looked at together once, at the first
 * of them: each of the others is then looked at alone. */
bool kvfs_victim_run_still(struct kvfs *fs, struct kvfs_victims *vs,
			   const struct kvfs_victim *v, const struct kv_node_info *n);

#endif
