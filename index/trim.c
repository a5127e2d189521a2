/*
 * The records of extents that only layers left in the manifest name leave
 * RAM once the mount's reclaim has marked them (kv_index_extents_trim; the
 * page budget: residency.c).
 *
 * Extent records have a slab of their own, so the survivors are copied
 * into new tables over a new slab, and the old slab is unmapped whole:
 * records freed inside it would stay resident. At 10M pages that copy is
 * a pass over 10M records and every page in RAM, 1.6 s (docs/benchmarks/
 * scale.md); under the write lock every lookup of the mount waited for it.
 *
 * So the copy runs in steps under the read lock, and the write lock is
 * held only for the swap at the end. Whatever changes in between is noted
 * by the code that changes it (idx_trim_note, under the write lock): an
 * extent put, counted, made durable or dropped, and a page in RAM that
 * names an extent (linked into a layer: added, loaded, moved; or given
 * another extent). Each noted extent is copied again from the old tables,
 * or left out if it is gone from them: most in steps before the swap, the
 * last few at it. Why that is enough:
 *
 *   - a record that did not change between its copy and the swap is
 *     copied right, and one that changed is noted;
 *   - an extent a page in RAM names at the swap is in the new tables:
 *     either the first pass found that page, or the page came (or named
 *     the extent) after the noting began;
 *   - both passes walk objects by their place in a slab, which does not
 *     move, not by a hash slot, which moves as its table grows or loses
 *     entries, nor by a layer's list of pages, which a rename reorders (a
 *     walk that went on from the page it stopped at skipped those after
 *     it, when that page was renamed in between: found in review).
 *
 * Noted extents stay whatever they are (it takes no pass over the pages to
 * know whether a page still names them): a few more records in RAM.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "index_i.h"

/* One hold of the read lock: one slab chunk (256 KiB: 5,461 extent
 * records, or about 2,300 page nodes), or this many noted extents: well
 * under a millisecond each. */
#define TRIM_NOTES_STEP 4096
/* Noted extents beyond this many (32 MiB): the trim gives up for this
 * mount. */
#define TRIM_NOTES_MAX (1u << 22)

#define SWAP(a, b) do { __typeof__(a) t_ = (a); (a) = (b); (b) = t_; } while (0)

struct trim {
	struct kv_index *x;
	struct htab by_id, by_key;   /* the survivors' tables, over ns */
	struct slab ns;
	struct timespec t0;
	double held_ms;              /* the longest hold of either lock */
};

void idx_trim_note_slow(struct kv_index *x, uint64_t id)
{
	uint64_t *v;
	size_t cap;

	/* The same as the last note, not copied again yet: once is enough. */
	if (x->trim_lost || (x->ntrim_notes > x->trim_caught &&
			     x->trim_notes[x->ntrim_notes - 1] == id))
		return;
	if (x->ntrim_notes == x->trim_notes_cap) {
		cap = x->trim_notes_cap ? 2 * x->trim_notes_cap : 1024;
		if (cap > TRIM_NOTES_MAX) {
			x->trim_lost = -EAGAIN;     /* the trim gives up: nothing lost */
			return;
		}
		v = realloc(x->trim_notes, cap * sizeof(*v));
		if (!v) {
			x->trim_lost = -ENOMEM;
			return;
		}
		x->trim_notes = v;
		x->trim_notes_cap = cap;
	}
	x->trim_notes[x->ntrim_notes++] = id;
}

static double ms_since(const struct timespec *a)
{
	struct timespec b;

	clock_gettime(CLOCK_MONOTONIC, &b);
	return (double)(b.tv_sec - a->tv_sec) * 1e3 + (double)(b.tv_nsec - a->tv_nsec) / 1e6;
}

static void hold(struct trim *t, bool write, struct timespec *since)
{
	if (write)
		pthread_rwlock_wrlock(&t->x->lock);
	else
		pthread_rwlock_rdlock(&t->x->lock);
	clock_gettime(CLOCK_MONOTONIC, since);
}

static void release(struct trim *t, const struct timespec *since)
{
	double ms = ms_since(since);

	pthread_rwlock_unlock(&t->x->lock);
	if (ms > t->held_ms)
		t->held_ms = ms;
}

/* Between two holds: where other threads change the index. */
static void gap(struct trim *t, bool before_swap)
{
	if (t->x->trim_gap)
		t->x->trim_gap(t->x->trim_gap_arg, before_swap);
}

/* Copy e (the index's record, a lock held) unless copied already. */
static int copy_one(struct trim *t, const struct xent *e)
{
	struct xent *c;

	if (idx_xent_find_in(&t->by_id, e->id))
		return 0;
	if (htab_reserve(&t->by_id, 1) || htab_reserve(&t->by_key, 1) ||
	    !(c = slab_alloc(&t->ns, sizeof(*c))))
		return -ENOMEM;
	*c = *e;
	htab_insert(&t->by_id, c);
	if (!c->retired)        /* a retired one is out of the key table */
		htab_insert(&t->by_key, c);
	return 0;
}

static void uncopy(struct trim *t, uint64_t id)
{
	struct xent *c = idx_xent_find_in(&t->by_id, id);

	if (!c)
		return;
	htab_remove(&t->by_id, c);
	if (!c->retired)
		htab_remove(&t->by_key, c);
	slab_free(&t->ns, c, sizeof(*c));
}

/*
 * Both passes walk a slab by address, one chunk per hold of the read lock
 * (the page nodes' slab, then the extent records'). A place holds a live
 * object if the index finds that object by its key there; a freed place's
 * first word is its free list's link, which finds nothing or another.
 */
typedef int (*place_fn)(struct trim *t, const void *place, size_t size);

static int walk_slab(struct trim *t, const struct slab *sl, place_fn fn)
{
	struct timespec since;
	size_t k = 0, n, size;
	const char *places;
	bool more = true;
	int rc = 0;

	while (more && rc == 0) {
		hold(t, false, &since);
		more = k < slab_chunks(sl);
		if (more) {
			places = slab_chunk_places(sl, k++, &size, &n);
			for (size_t j = 0; rc == 0 && j < n; j++)
				if (slab_place_readable(places + j * size, size))
					rc = fn(t, places + j * size, size);
		}
		release(t, &since);
		gap(t, false);
	}
	return rc;
}

/* Pass 1: the extent of every page in RAM. A node never moves in its
 * slab, so a page renamed, moved or relinked between two steps is still
 * where the walk finds it (or, given a new node for a longer name, it
 * came after the noting began, and was noted). */
static int copy_page_extent(struct trim *t, const void *place, size_t size)
{
	const struct node *n = place;
	const struct xent *e;

	if (size < offsetof(struct node, name) || idx_node(t->x, n->ino) != n ||
	    n->kind != KV_KIND_PAGE || n->u.p.extent_id == KV_EXTENT_EMPTY)
		return 0;
	e = idx_xent_find(t->x, n->u.p.extent_id);
	return e ? copy_one(t, e) : 0;
}

/* Whether e may leave RAM if no page in RAM names it: the manifest's row
 * says what the record says (committed, its count unchanged since it was
 * read or put: a change still queued for the committer would make a later
 * read of the row wrong). */
static bool row_says_all(const struct xent *e)
{
	return !e->moved && e->durable && !e->retired;
}

/* Pass 2: every record the manifest's row cannot stand for. */
static int copy_unsaid(struct trim *t, const void *place, size_t size)
{
	const struct xent *e = place;

	if (size != sizeof(*e) || row_says_all(e) || idx_xent_find(t->x, e->id) != e)
		return 0;
	return copy_one(t, e);
}

/* The noted extents from x->trim_caught up to end, copied again from
 * the index's tables, or taken out where these no longer hold them (a
 * lock held; trim_caught is only the trim's, and notes are only made
 * under the write lock). */
static int catch_up(struct trim *t, size_t end)
{
	struct kv_index *x = t->x;
	const struct xent *e;
	int rc = 0;

	for (; rc == 0 && x->trim_caught < end; x->trim_caught++) {
		uncopy(t, x->trim_notes[x->trim_caught]);
		if ((e = idx_xent_find(x, x->trim_notes[x->trim_caught])))
			rc = copy_one(t, e);
	}
	return rc;
}

/* Before the swap, under the read lock in steps: the notes made so far,
 * until fewer than a step's are left for the swap. Notes made faster
 * than this copies them end the trim at TRIM_NOTES_MAX (trim_lost). */
static int catch_up_steps(struct trim *t)
{
	struct kv_index *x = t->x;
	struct timespec since;
	bool more = true;
	int rc = 0;

	while (more && rc == 0) {
		hold(t, false, &since);
		more = !x->trim_lost && x->ntrim_notes - x->trim_caught > TRIM_NOTES_STEP;
		if (more)
			rc = catch_up(t, x->trim_caught + TRIM_NOTES_STEP);
		release(t, &since);
		gap(t, false);
	}
	return rc;
}

/* The swap (write lock held): the rest of the noted extents copied
 * again, then the new tables take the old ones' place; *gone: the records
 * left out. */
static int swap_in(struct trim *t, uint64_t *gone)
{
	struct kv_index *x = t->x;
	int rc;

	*gone = 0;
	if (x->trim_lost)
		return x->trim_lost;
	if (x->nretired || x->retire_below)
		return -EAGAIN;
	rc = catch_up(t, x->ntrim_notes);
	if (rc < 0 || x->ext_by_id.n <= t->by_id.n)
		return rc;
	*gone = x->ext_by_id.n - t->by_id.n;
	SWAP(x->ext_by_id, t->by_id);
	SWAP(x->ext_by_key, t->by_key);
	SWAP(x->xslab, t->ns);
	x->st.extents -= *gone;
	x->st.extents_unloaded += *gone;
	x->extents_trimmed = true;
	return 0;
}

static void noting_end(struct kv_index *x)
{
	x->trim_noting = false;
	x->trim_lost = 0;
	free(x->trim_notes);
	x->trim_notes = NULL;
	x->ntrim_notes = x->trim_notes_cap = x->trim_caught = 0;
}

/* Whether a trim is due: only once the reclaim has marked every extent
 * (no retired one left), only if some layer stays out, one at a time
 * (after the load, and after layers went back to the manifest: unload.c).
 * If so, the noting begins (write lock held). */
static bool trim_begin(struct kv_index *x, size_t *pages)
{
	if (x->trim_noting || x->nretired || x->retire_below ||
	    !atomic_load_explicit(&x->layers_unloaded, memory_order_relaxed))
		return false;
	x->trim_noting = true;
	*pages = x->by_ino.n;
	return true;
}

int kv_index_extents_trim(struct kv_index *x, uint64_t *dropped)
{
	struct trim t = { .x = x };
	struct timespec since;
	uint64_t gone = 0, kept;
	size_t pages = 0;
	int rc;

	*dropped = 0;
	clock_gettime(CLOCK_MONOTONIC, &t.t0);
	pthread_rwlock_wrlock(&x->lock);
	if (!trim_begin(x, &pages)) {
		pthread_rwlock_unlock(&x->lock);
		return 0;
	}
	pthread_rwlock_unlock(&x->lock);
	/* sized at once for about as many as pages in RAM: growing record by
	 * record rehashes every survivor about twice */
	rc = slab_init(&t.ns);
	if (rc == 0) {
		rc = -ENOMEM;
		if (!htab_init(&t.by_id, x->ext_by_id.hash, t.ns.base) &&
		    !htab_init(&t.by_key, x->ext_by_key.hash, t.ns.base) &&
		    !htab_reserve(&t.by_id, pages) && !htab_reserve(&t.by_key, pages))
			rc = 0;
	}
	/* Faulting 20 MB of fresh table in at 10M pages took the first step
	 * 15 ms under the lock. */
	if (rc == 0) {
		htab_populate(&t.by_id);
		htab_populate(&t.by_key);
		rc = walk_slab(&t, &x->slab, copy_page_extent);
	}
	if (rc == 0)
		rc = walk_slab(&t, &x->xslab, copy_unsaid);
	if (rc == 0)
		rc = catch_up_steps(&t);
	gap(&t, true);
	hold(&t, true, &since);
	if (rc == 0)
		rc = swap_in(&t, &gone);
	noting_end(x);
	kept = x->ext_by_id.n;
	release(&t, &since);
	/* The old ones after a swap, else the unused new ones: unmapping
	 * takes a while, not under the lock. */
	htab_fini(&t.by_id);
	htab_fini(&t.by_key);
	slab_fini(&t.ns);
	if (gone || rc)
		kv_log(rc ? KV_LOG_WARN : KV_LOG_INFO, "index: %" PRIu64 " extents named only by "
		       "layers left in the manifest %s (%" PRIu64 " stay) in %.0f ms, holding the "
		       "index's lock at most %.1f ms at a time%s%s", gone,
		       rc ? "could not leave RAM" : "left RAM", kept, ms_since(&t.t0),
		       t.held_ms, rc ? ": " : "", rc == -EAGAIN ? "the index changed too "
		       "much while they were copied; they stay until the next mount" :
		       rc ? kv_strerror(rc) : "");
	*dropped = gone;
	return rc;
}

void idx_extent_reread_locked(struct kv_index *x, const struct xent *e)
{
	struct kv_extent ext = idx_xent_ext(e);

	/* Counted already, as an extent out of RAM: put counted it again. */
	x->st.extents_unloaded--;
	x->st.extent_bytes -= kv_extent_footprint(&ext);
}
