/*
 * The RAM tier: hot page payloads kept in daemon memory under a byte
 * budget (-o ram_cache=SIZE), consulted by both read paths before the SSD.
 *
 * Entries are keyed by extent id, not by page: pages that share an extent
 * (dedup) share one entry, and an id is never reused within a mount, so an
 * entry can never describe other bytes than its id's. Payloads are the
 * daemon's refcounted kvfs_data, verified against their checksum before
 * they get here; a FUSE hit hands the very buffer to the file handle, no
 * copy.
 *
 * Two LRU lists: ordinary payloads, and protected (pinned) ones, which are
 * evicted only when nothing else is left. Between them, payloads PREFETCH
 * loaded that nobody has read yet wait in their uid's own list (below). Pages shared by several
 * names are ordinary: their one entry is kept by a read of any name, so a
 * prefix many requests use stays by recency alone, and protecting sharing
 * would let anyone keep pages resident past everyone else's by storing
 * them twice. One mutex: every operation is a hash probe and a few pointer
 * moves.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvfs_i.h"

struct ram_ent {
	uint64_t id;
	struct kvfs_data *d;
	uint64_t bytes;            /* charged to the budget: ent_bytes() */
	bool protect;
	bool prefetched;           /* loaded by PREFETCH and not read since */
	uint32_t pf_uid;           /* prefetched: whose PREFETCH loaded it */
	int64_t pf_ns;             /* ... and when */
	struct ram_ent *prev, *next;   /* its list, most recent first: its
	                                * class's LRU, or (prefetched) its
	                                * uid's unread ones */
	struct ram_ent *hnext;
};

struct lru {
	struct ram_ent *head, *tail;
};

/* One uid's PREFETCH pages: queued bytes, and unread payloads resident. */
struct pf_owner {
	uint32_t uid;
	uint64_t queued, unread;
	struct lru unread_list;        /* its tail is the oldest */
};

#define GHOSTS 65536               /* extent ids remembered by kvfs_ram_admit */
/* An engine prefetches the next layer while it computes this one, and
 * reads it within a second or so: an unread prefetch older than this is
 * the first to go, so that no uid keeps half the tier by never reading. */
#define PREFETCH_UNREAD_NS (10ll * 1000000000)

struct kvfs_ram {
	pthread_mutex_t lock;
	uint64_t budget, bytes;
	_Atomic uint64_t *ghost;       /* ids missed once, direct-mapped, lossy */
	struct ram_ent **tab;
	size_t mask, n, nprotect;
	struct lru lru[2];             /* [0] ordinary, [1] protected */
	struct kvfs_uidtab owners;     /* pf_owner of uids with PREFETCH pages
	                                * queued or unread */
	struct kvfs_ram_stats st;
};

#define MIN_BUCKETS 1024

int kvfs_ram_init(struct kvfs *fs, uint64_t budget)
{
	struct kvfs_ram *r = calloc(1, sizeof(*r));

	if (!r)
		return -ENOMEM;
	r->tab = calloc(MIN_BUCKETS, sizeof(*r->tab));
	if (!r->tab) {
		free(r);
		return -ENOMEM;
	}
	r->mask = MIN_BUCKETS - 1;
	r->budget = budget;
	r->owners = KVFS_UIDTAB(struct pf_owner);
	r->ghost = budget ? calloc(GHOSTS, sizeof(*r->ghost)) : NULL;
	if (budget && !r->ghost) {
		free(r->tab);
		free(r);
		return -ENOMEM;
	}
	pthread_mutex_init(&r->lock, NULL);
	fs->ram = r;
	return 0;
}

void kvfs_ram_fini(struct kvfs *fs)
{
	struct kvfs_ram *r = fs->ram;
	struct ram_ent *e, *next;

	if (!r)
		return;
	for (int c = 0; c < 2; c++)
		for (e = r->lru[c].head; e; e = next) {
			next = e->next;
			kvfs_data_put(e->d);
			free(e);
		}
	for (size_t i = 0; i < r->owners.n; i++)
		for (e = ((struct pf_owner *)r->owners.v)[i].unread_list.head; e; e = next) {
			next = e->next;
			kvfs_data_put(e->d);
			free(e);
		}
	pthread_mutex_destroy(&r->lock);
	kvfs_uidtab_free(&r->owners);
	free(r->ghost);
	free(r->tab);
	free(r);
	fs->ram = NULL;
}

static size_t slot_of(const struct kvfs_ram *r, uint64_t id)
{
	return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 20) & r->mask;
}

static struct ram_ent **find_slot(struct kvfs_ram *r, uint64_t id)
{
	struct ram_ent **pp = &r->tab[slot_of(r, id)];

	while (*pp && (*pp)->id != id)
		pp = &(*pp)->hnext;
	return pp;
}

/* Double the table when it is fuller than one entry per bucket. */
static void maybe_grow(struct kvfs_ram *r)
{
	size_t nb = (r->mask + 1) * 2;
	struct ram_ent **t, *e, *next;
	size_t old = r->mask + 1;

	if (r->n <= old)
		return;
	t = calloc(nb, sizeof(*t));
	if (!t)
		return;    /* longer chains, still correct */
	struct ram_ent **ot = r->tab;
	r->tab = t;
	r->mask = nb - 1;
	for (size_t i = 0; i < old; i++)
		for (e = ot[i]; e; e = next) {
			next = e->hnext;
			e->hnext = r->tab[slot_of(r, e->id)];
			r->tab[slot_of(r, e->id)] = e;
		}
	free(ot);
}

static void lru_unlink(struct lru *l, struct ram_ent *e)
{
	if (e->prev)
		e->prev->next = e->next;
	else
		l->head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		l->tail = e->prev;
	e->prev = e->next = NULL;
}

static void lru_push(struct lru *l, struct ram_ent *e)
{
	e->prev = NULL;
	e->next = l->head;
	if (l->head)
		l->head->prev = e;
	else
		l->tail = e;
	l->head = e;
}

/* ---- one uid's prefetches ----
 *
 * PREFETCH loads pages nobody has read yet. One uid looping over large
 * prefetches used to fill the loader's queue and push every other uid's
 * unread prefetched pages out of the tier before their engines read them
 * (0 of 64 served). Now one uid may have at most half the budget queued,
 * and at most half the budget resident unread: past it, its own oldest
 * unread page makes room for its next, and one left unread for 10 s goes
 * before anything else. Unread prefetches are in no LRU:
 * every ordinary payload goes before any of them, so a uid reading its
 * own prefetches at once (making them ordinary) cannot push another's
 * unread ones out either; when only they are left, the uid holding most
 * loses its oldest. Once read, a page is an ordinary one, kept by
 * recency like any other. */

static struct pf_owner *owner_of(struct kvfs_ram *r, uint32_t uid, bool add)
{
	return kvfs_uidtab_get(&r->owners, uid, add);
}

static void owner_maybe_drop(struct kvfs_ram *r, struct pf_owner *o)
{
	if (!o->queued && !o->unread)
		kvfs_uidtab_remove(&r->owners, o);
}

/* e was read, or leaves: no longer its uid's unread prefetch. */
static void pf_forget(struct kvfs_ram *r, struct ram_ent *e)
{
	struct pf_owner *o;

	if (!e->prefetched)
		return;
	e->prefetched = false;
	o = owner_of(r, e->pf_uid, false);
	if (!o)
		return;
	lru_unlink(&o->unread_list, e);
	o->unread -= e->bytes;
	owner_maybe_drop(r, o);
}

bool kvfs_ram_prefetch_reserve(struct kvfs *fs, uint32_t uid, uint64_t bytes)
{
	struct kvfs_ram *r = fs->ram;
	struct pf_owner *o;
	bool ok;

	if (!r || !r->budget)
		return false;
	pthread_mutex_lock(&r->lock);
	o = owner_of(r, uid, true);
	ok = o && o->queued + bytes <= r->budget / 2;
	if (ok)
		o->queued += bytes;
	else if (o)
		owner_maybe_drop(r, o);
	pthread_mutex_unlock(&r->lock);
	return ok;
}

void kvfs_ram_prefetch_unreserve(struct kvfs *fs, uint32_t uid, uint64_t bytes)
{
	struct kvfs_ram *r = fs->ram;
	struct pf_owner *o;

	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	o = owner_of(r, uid, false);
	if (o) {
		o->queued -= bytes;
		owner_maybe_drop(r, o);
	}
	pthread_mutex_unlock(&r->lock);
}

/* Unhash and unlink e; the caller puts its payload (outside the lock is
 * not needed: kvfs_data_put only frees memory). */
static void remove_ent(struct kvfs_ram *r, struct ram_ent *e)
{
	struct ram_ent **pp = find_slot(r, e->id);

	if (*pp == e)
		*pp = e->hnext;
	if (e->prefetched)
		pf_forget(r, e);
	else
		lru_unlink(&r->lru[e->protect], e);
	r->n--;
	r->nprotect -= e->protect;
	r->bytes -= e->bytes;
	kvfs_data_put(e->d);
	free(e);
}

/*
 * What keeping d costs in RAM, all of it: the buffer as the allocator holds
 * it (kv_buf_footprint: a 4 KiB page is 4 KiB and a few pointers, where a
 * posix_memalign'd one was about 8 KiB), the payload's struct, this entry
 * and its share of the hash table (at most two buckets per entry). So the
 * tier's memory is its budget, not 2-2.7 times it (issue 21).
 */
static uint64_t ent_bytes(const struct kvfs_data *d)
{
	return kvfs_data_footprint(d) + sizeof(struct ram_ent) + 16 +
	       2 * sizeof(struct ram_ent *);
}

/* The oldest unread prefetch of the uid with the most of them; with
 * stale_ns, only one loaded before it (any uid's). */
static struct ram_ent *unread_victim(struct kvfs_ram *r, int64_t stale_ns)
{
	struct pf_owner *o = r->owners.v, *best = NULL;

	for (size_t i = 0; i < r->owners.n; i++) {
		struct ram_ent *oldest = o[i].unread_list.tail;

		if (!oldest)
			continue;
		if (stale_ns && oldest->pf_ns < stale_ns)
			return oldest;
		if (!best || o[i].unread > best->unread)
			best = &o[i];
	}
	return best && !stale_ns ? best->unread_list.tail : NULL;
}

/* Evict until need more bytes fit: unread prefetches nobody read within
 * PREFETCH_UNREAD_NS first, then least recently used ordinary payloads,
 * then the other unread prefetches (the largest holder's oldest), pinned
 * ones last. */
static void make_room(struct kvfs_ram *r, uint64_t need)
{
	int64_t stale_ns = r->bytes + need > r->budget && r->owners.n ?
			   kvfs_now_ns() - PREFETCH_UNREAD_NS : 0;

	while (r->bytes + need > r->budget) {
		struct ram_ent *e = stale_ns ? unread_victim(r, stale_ns) : NULL;

		if (!e)
			e = r->lru[0].tail;
		if (!e)
			e = unread_victim(r, 0);
		if (!e)
			e = r->lru[1].tail;
		if (!e)
			return;
		remove_ent(r, e);
		r->st.evictions++;
	}
}

/* uid's next unread prefetch of need bytes: past half the budget, its
 * own oldest unread ones go first. */
static void make_room_for_prefetch(struct kvfs_ram *r, uint32_t uid, uint64_t need)
{
	struct pf_owner *o;

	/* (looked up each time: a removal may drop o from the table) */
	while ((o = owner_of(r, uid, false)) && o->unread_list.tail &&
	       o->unread + need > r->budget / 2) {
		remove_ent(r, o->unread_list.tail);
		r->st.evictions++;
	}
}

/* e (in no list yet) is uid's newest unread prefetch; false if there is
 * no memory to count it. */
static bool pf_track(struct kvfs_ram *r, struct ram_ent *e, uint32_t uid)
{
	struct pf_owner *o = owner_of(r, uid, true);

	if (!o)
		return false;
	e->prefetched = true;
	e->pf_uid = uid;
	e->pf_ns = kvfs_now_ns();
	lru_push(&o->unread_list, e);
	o->unread += e->bytes;
	return true;
}

struct kvfs_data *kvfs_ram_get(struct kvfs *fs, uint64_t id)
{
	struct kvfs_ram *r = fs->ram;
	struct kvfs_data *d = NULL;
	struct ram_ent *e;

	if (!r || !r->budget)
		return NULL;
	pthread_mutex_lock(&r->lock);
	e = *find_slot(r, id);
	if (e) {
		if (e->prefetched) {       /* read at last: an ordinary entry */
			pf_forget(r, e);
			r->st.prefetch_used++;
		} else {
			lru_unlink(&r->lru[e->protect], e);
		}
		lru_push(&r->lru[e->protect], e);
		d = kvfs_data_get(e->d);
		r->st.hits++;
	} else {
		r->st.misses++;
	}
	pthread_mutex_unlock(&r->lock);
	return d;
}

bool kvfs_ram_admit(struct kvfs *fs, uint64_t id)
{
	struct kvfs_ram *r = fs->ram;
	_Atomic uint64_t *g;

	if (!r || !r->budget)
		return false;
	g = &r->ghost[(id * 0x9E3779B97F4A7C15ull) >> 48];
	if (atomic_load_explicit(g, memory_order_relaxed) == id)
		return true;
	atomic_store_explicit(g, id, memory_order_relaxed);
	return false;
}

bool kvfs_ram_has(struct kvfs *fs, uint64_t id)
{
	struct kvfs_ram *r = fs->ram;
	bool has;

	if (!r || !r->budget)
		return false;
	pthread_mutex_lock(&r->lock);
	has = *find_slot(r, id) != NULL;
	pthread_mutex_unlock(&r->lock);
	return has;
}

static void count_origin(struct kvfs_ram *r, enum kvfs_ram_origin origin)
{
	if (origin == KVFS_RAM_READ)
		r->st.promotions++;
	else if (origin == KVFS_RAM_WRITTEN)
		r->st.kept_written++;
	else
		r->st.prefetched++;
}

static void put(struct kvfs *fs, uint64_t id, struct kvfs_data *d, bool protect,
		enum kvfs_ram_origin origin, uint32_t uid)
{
	struct kvfs_ram *r = fs->ram;
	struct ram_ent *e, **pp;

	/* One payload may take at most half the budget: a tier that holds a
	 * single page thrashes on every other read. */
	if (!r || !r->budget || ent_bytes(d) > r->budget / 2)
		return;
	pthread_mutex_lock(&r->lock);
	pp = find_slot(r, id);
	if (*pp) {              /* raced with another reader: keep the first */
		pthread_mutex_unlock(&r->lock);
		return;
	}
	e = calloc(1, sizeof(*e));
	if (!e) {
		pthread_mutex_unlock(&r->lock);
		return;
	}
	if (origin == KVFS_RAM_PREFETCH)
		make_room_for_prefetch(r, uid, ent_bytes(d));
	make_room(r, ent_bytes(d));
	pp = find_slot(r, id);   /* eviction may have moved chains */
	e->id = id;
	e->d = kvfs_data_get(d);
	e->bytes = ent_bytes(d);
	e->protect = protect;
	e->hnext = *pp;
	*pp = e;
	r->n++;
	r->nprotect += protect;
	r->bytes += e->bytes;
	count_origin(r, origin);
	/* A pinned page stays with the pinned; no memory for the uid's
	 * record: an ordinary entry. */
	if (origin != KVFS_RAM_PREFETCH || protect || !pf_track(r, e, uid))
		lru_push(&r->lru[e->protect], e);
	maybe_grow(r);
	pthread_mutex_unlock(&r->lock);
}

void kvfs_ram_put(struct kvfs *fs, uint64_t id, struct kvfs_data *d,
		  bool protect, enum kvfs_ram_origin origin)
{
	put(fs, id, d, protect, origin, 0);
}

void kvfs_ram_put_prefetched(struct kvfs *fs, uint64_t id, struct kvfs_data *d,
			     bool protect, uint32_t uid)
{
	put(fs, id, d, protect, KVFS_RAM_PREFETCH, uid);
}

void kvfs_ram_protect(struct kvfs *fs, uint64_t id, bool protect)
{
	struct kvfs_ram *r = fs->ram;
	struct ram_ent *e;

	if (!r || !r->budget)
		return;
	pthread_mutex_lock(&r->lock);
	e = *find_slot(r, id);
	if (e && e->protect != protect) {
		if (e->prefetched)
			pf_forget(r, e);     /* pinned or unpinned: an ordinary entry */
		else
			lru_unlink(&r->lru[e->protect], e);
		if (protect)
			r->nprotect++;
		else
			r->nprotect--;
		e->protect = protect;
		lru_push(&r->lru[e->protect], e);
	}
	pthread_mutex_unlock(&r->lock);
}

void kvfs_ram_drop(struct kvfs *fs, uint64_t id)
{
	struct kvfs_ram *r = fs->ram;
	struct ram_ent *e;

	if (!r || !r->budget)
		return;
	pthread_mutex_lock(&r->lock);
	e = *find_slot(r, id);
	if (e)
		remove_ent(r, e);
	pthread_mutex_unlock(&r->lock);
}

void kvfs_ram_prefetch_dropped(struct kvfs *fs, uint64_t pages)
{
	struct kvfs_ram *r = fs->ram;

	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	r->st.prefetch_dropped += pages;
	pthread_mutex_unlock(&r->lock);
}

void kvfs_ram_stats(struct kvfs *fs, struct kvfs_ram_stats *out)
{
	struct kvfs_ram *r = fs->ram;

	memset(out, 0, sizeof(*out));
	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	*out = r->st;
	out->budget = r->budget;
	out->pages = r->n;
	out->bytes = r->bytes;
	out->protected_pages = r->nprotect;
	pthread_mutex_unlock(&r->lock);
}
