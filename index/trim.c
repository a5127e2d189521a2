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
 * another extent). At the swap each noted extent is copied again from the
 * old tables, or left out if it is gone from them. Why that is enough:
 *
 *   - a record that did not change between its copy and the swap is
 *     copied right, and one that changed is noted;
 *   - an extent a page in RAM names at the swap is in the new tables:
 *     either that page was in its layer when the first pass went through
 *     it, or it came there (or named the extent) after the noting began;
 *   - the walk over the records goes by their place in the slab, which
 *     does not move, not by their slot in a hash table, which moves as
 *     the table grows or loses entries.
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

/* One hold of the read lock: this many pages of a layer, or this many
 * slab chunks of extent records (5,461 records each): well under a
 * millisecond either way. */
#define TRIM_PAGES_STEP 4096
#define TRIM_CHUNKS_STEP 1
/* Noted extents beyond this many (32 MiB), or a layer that keeps changing
 * under the walk: the trim gives up for this mount. */
#define TRIM_NOTES_MAX (1u << 22)
#define TRIM_RESTARTS_MAX 16

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

	if (x->trim_lost)
		return;
	if (x->ntrim_notes == x->trim_notes_cap) {
		cap = x->trim_notes_cap ? 2 * x->trim_notes_cap : 1024;
		v = cap <= TRIM_NOTES_MAX ? realloc(x->trim_notes, cap * sizeof(*v)) : NULL;
		if (!v) {
			x->trim_lost = true;     /* the trim gives up: nothing lost */
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

/* The inodes of every layer (read lock held). */
static int layer_inos(struct kv_index *x, uint64_t **out, size_t *n)
{
	size_t cap = 0;
	uint64_t *v = NULL, *nv;

	*n = 0;
	for (struct node *m = x->root->u.d->first; m; m = idx_next(x, m))
		for (struct node *l = m->u.d->first; l; l = idx_next(x, l)) {
			if (*n == cap) {
				cap = cap ? 2 * cap : 64;
				nv = realloc(v, cap * sizeof(*v));
				if (!nv) {
					free(v);
					return -ENOMEM;
				}
				v = nv;
			}
			v[(*n)++] = l->ino;
		}
	*out = v;
	return 0;
}

/*
 * Pass 1: the extents of layer ino's pages in RAM, in steps. Between two
 * steps the page after which the next one starts may have gone or moved:
 * the layer is then gone through again from its first page (pages copied
 * already cost a probe each). A layer gone or turned into something else
 * meanwhile has nothing left to copy. Every layer's pages are gone
 * through, loaded or not: one whose load is under way has some already.
 */
static int copy_layer(struct trim *t, uint64_t ino)
{
	struct kv_index *x = t->x;
	struct timespec since;
	uint64_t after = 0;
	struct node *layer, *n;
	unsigned restarts = 0, k;
	int rc = 0;

	for (;;) {
		hold(t, false, &since);
		layer = idx_node(x, ino);
		if (!layer || layer->kind != KV_KIND_LAYER) {
			release(t, &since);
			return 0;
		}
		n = after ? idx_node(x, after) : NULL;
		if (after && (!n || n->parent != layer)) {
			if (++restarts > TRIM_RESTARTS_MAX)
				rc = -EAGAIN;
			n = NULL;
		}
		n = n ? idx_next(x, n) : layer->u.d->first;
		for (k = 0; rc == 0 && n && k < TRIM_PAGES_STEP; n = idx_next(x, n), k++) {
			const struct xent *e = n->kind == KV_KIND_PAGE &&
				n->u.p.extent_id != KV_EXTENT_EMPTY ?
				idx_xent_find(x, n->u.p.extent_id) : NULL;

			if (e)
				rc = copy_one(t, e);
			after = n->ino;
		}
		release(t, &since);
		if (rc < 0 || !n)
			return rc;
		gap(t, false);
	}
}

/* Whether e may leave RAM if no page in RAM names it: the manifest's row
 * says what the record says (committed, its count unchanged since it was
 * read or put: a change still queued for the committer would make a later
 * read of the row wrong). */
static bool row_says_all(const struct xent *e)
{
	return !e->moved && e->durable && !e->retired;
}

/* Pass 2: every record the manifest's row cannot stand for, by its place
 * in the extent slab, in steps. A place holds a live record if the table
 * finds that record by its id there. */
static int copy_unsaid(struct trim *t)
{
	struct kv_index *x = t->x;
	struct timespec since;
	size_t k = 0, n, j;
	const char *places;
	int rc = 0;

	for (bool more = true; more && rc == 0;) {
		hold(t, false, &since);
		for (size_t end = k + TRIM_CHUNKS_STEP; rc == 0 && k < end; k++) {
			more = k < slab_chunks(&x->xslab);
			if (!more)
				break;
			places = slab_chunk_places(&x->xslab, k, sizeof(struct xent), &n);
			for (j = 0; rc == 0 && j < n; j++) {
				const struct xent *e = (const void *)(places + j * sizeof(*e));

				if (slab_place_readable(e, sizeof(*e)) && !row_says_all(e) &&
				    idx_xent_find(x, e->id) == e)
					rc = copy_one(t, e);
			}
		}
		release(t, &since);
		gap(t, false);
	}
	return rc;
}

/* The swap (write lock held): the noted extents copied again, then the
 * new tables take the old ones' place; *gone: the records left out. */
static int swap_in(struct trim *t, uint64_t *gone)
{
	struct kv_index *x = t->x;
	const struct xent *e;
	int rc = 0;

	*gone = 0;
	if (x->trim_lost)
		return -ENOMEM;
	if (x->nretired || x->retire_below)
		return -EAGAIN;
	for (size_t i = 0; rc == 0 && i < x->ntrim_notes; i++) {
		uncopy(t, x->trim_notes[i]);
		if ((e = idx_xent_find(x, x->trim_notes[i])))
			rc = copy_one(t, e);
	}
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
	x->trim_noting = x->trim_lost = false;
	free(x->trim_notes);
	x->trim_notes = NULL;
	x->ntrim_notes = x->trim_notes_cap = 0;
}

/* Whether a trim is due: only once the reclaim has marked every extent
 * (no retired one left), only if some layer stays out, only once. If so,
 * the noting begins (write lock held). */
static bool trim_begin(struct kv_index *x, size_t *pages)
{
	if (x->extents_trimmed || x->trim_noting || x->nretired || x->retire_below ||
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
	uint64_t *layers = NULL, gone = 0, kept;
	size_t nlayers = 0, pages = 0;
	int rc;

	*dropped = 0;
	clock_gettime(CLOCK_MONOTONIC, &t.t0);
	pthread_rwlock_wrlock(&x->lock);
	if (!trim_begin(x, &pages)) {
		pthread_rwlock_unlock(&x->lock);
		return 0;
	}
	rc = layer_inos(x, &layers, &nlayers);
	pthread_rwlock_unlock(&x->lock);
	/* sized at once for about as many as pages in RAM: growing record by
	 * record rehashes every survivor about twice */
	if (rc == 0 && (rc = slab_init(&t.ns)) == 0) {
		rc = -ENOMEM;
		if (!htab_init(&t.by_id, x->ext_by_id.hash, t.ns.base) &&
		    !htab_init(&t.by_key, x->ext_by_key.hash, t.ns.base) &&
		    !htab_reserve(&t.by_id, pages) && !htab_reserve(&t.by_key, pages))
			rc = 0;
	}
	for (size_t i = 0; rc == 0 && i < nlayers; i++)
		rc = copy_layer(&t, layers[i]);
	free(layers);
	if (rc == 0)
		rc = copy_unsaid(&t);
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
		       rc ? "could not leave RAM" : "left RAM", kept,
		       ms_since(&t.t0), t.held_ms, rc ? ": " : "", rc ? kv_strerror(rc) : "");
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
