/*
 * KVFS_IOC_WRITE: the batch write of the fast path (kvfs_ioctl.h). Each
 * descriptor names a new page (layer + name) and its bytes, a source range
 * of the engine's region. The daemon:
 *
 *   1. validates the call on a private copy of the descriptors (fastpath.c,
 *      batch_check.c), copies the names and refuses a page named twice;
 *   2. resolves every page before touching any data: the layer exists, the
 *      caller may create in it as open(O_CREAT) would (search on the root,
 *      model and layer, write on the layer), the size fits the model, and
 *      the name is free (or KVFS_WRITE_REPLACE);
 *   3. in chunks bounded by the write-back budget: charges the budget,
 *      copies each page's bytes out of the region into an aligned buffer
 *      of its own (guarded against SIGBUS), then publishes the chunk's pages
 *      back to back (kvfs_page_publish: checksum, extent, io_uring O_DIRECT
 *      write of that buffer, manifest row queued), so group commit finds
 *      them queued together;
 *   4. with KVFS_WRITE_DURABLE, waits until the committer has made all of
 *      them durable (data fdatasync'ed, rows committed).
 *
 * Why copy instead of writing straight from the region
 * (docs/decisions/data-path.md): a page is visible before it is durable and is served from daemon-owned
 * RAM meanwhile; the engine may reuse its region as soon as the ioctl
 * returns; and a checksum taken over memory the engine can still change
 * could describe bytes that never reach the disk.
 *
 * Each page becomes visible when it is published, not all at once; a page
 * that fails fails only itself. No lock is held while a page is copied or
 * while the budget is waited for.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fastpath.h"
#include "kvname.h"

/* A chunk never charges more than this share of the write-back budget, so
 * one batch cannot starve FUSE writers. */
#define SPACE_RETRIES 300      /* eviction runs a page waits through (~30 s) */
#define CHUNK_BUDGET_SHARE 2
/* Per-descriptor log lines per batch; a batch can hold 2^20 descriptors. */
#define LOG_DESCS_MAX 8
/* How long a REPLACE waits for the kernel to drop the replaced names. */
#define FORGET_WAIT_MS 5000u

struct wpage {
	uint32_t idx;              /* descriptor index */
	uint64_t layer_ino;
	const char *name;          /* NUL-terminated, in the batch's arena */
	uint64_t size;
	struct kvfs_data *data;    /* staged copy of the bytes */
	uint64_t charged;          /* dirty-budget bytes it holds */
	uint64_t shared;           /* ... of its caller's fast-path share */
	bool unlogged;             /* refused for space, not logged: retry_full */
};

struct wbatch {
	struct fp_batch b;
	struct fp_resolver rv;
	char *arena;               /* every accepted name, NUL-terminated */
	const char **names;        /* per descriptor, into arena (or NULL) */
	struct wpage *pages;       /* the resolved ones, in descriptor order */
	uint32_t np;
	bool replace, durable;
	bool limit_known, exact;   /* the model's page size rule */
	uint64_t limit;
	struct kv_obj_attr attr;   /* of every new page */
	uint32_t published;
	uint32_t logged, unlogged; /* per-descriptor failure lines */
	bool region_lost;          /* a copy faulted: the region is gone */
	uint64_t staged;           /* dirty bytes charged to staged pages */
};

static struct kv_log_limit desc_log, batch_log;

/* Per-descriptor failures are the engine's business and can be many: one
 * debug line each. Failures of the daemon itself are warnings. */
static void log_desc(struct wbatch *w, uint32_t i, const char *what, int32_t st)
{
	bool ours = st == -ENOSPC || st == -ENOMEM || st == -EIO || st == -EFAULT;

	if (w->logged >= LOG_DESCS_MAX) {
		w->unlogged++;
		return;
	}
	w->logged++;
	/* Warnings across batches are rate-limited too: every batch of a
	 * full store would otherwise add its lines. */
	if (ours)
		KV_LOG_LIMITED(&desc_log, KV_LOG_WARN,
			       "fast path: WRITE from pid %d: descriptor %u (layer %u, %s): %s: %s",
			       (int)w->b.who.tid, i, w->b.d[i].layer,
			       w->names && w->names[i] ? w->names[i] : "?", what, kv_strerror(st));
	else
		kv_log(KV_LOG_DEBUG,
		       "fast path: WRITE from pid %d: descriptor %u (layer %u, %s): %s: %s",
		       (int)w->b.who.tid, i, w->b.d[i].layer,
		       w->names && w->names[i] ? w->names[i] : "?", what, kv_strerror(st));
}

static void fail_desc(struct wbatch *w, uint32_t i, const char *what, int32_t st)
{
	w->b.status[i] = st;
	log_desc(w, i, what, st);
}

/* ---- names ---- */

/* Copy every accepted descriptor's name into one arena and check its bytes
 * (NUL, '/', "." and ".."), then refuse names given twice. */
static int load_names(struct wbatch *w)
{
	struct fp_batch *b = &w->b;
	size_t total = 0, off = 0;
	long dups;
	int rc;

	w->names = calloc(b->a.count, sizeof(*w->names));
	if (!w->names)
		return -ENOMEM;
	for (uint32_t i = 0; i < b->a.count; i++)
		if (b->status[i] == 0)
			total += (size_t)b->d[i].name_len + 1;
	w->arena = malloc(total ? total : 1);
	if (!w->arena)
		return -ENOMEM;
	for (uint32_t i = 0; i < b->a.count; i++) {
		char *name = w->arena + off;

		if (b->status[i])
			continue;
		rc = kvfs_region_load(b->r, b->d[i].name_off, name, b->d[i].name_len);
		if (rc < 0)
			return rc;      /* the region broke: the whole call fails */
		name[b->d[i].name_len] = '\0';
		off += (size_t)b->d[i].name_len + 1;
		w->names[i] = name;
		rc = kv_name_check_len(name, b->d[i].name_len);
		if (rc < 0)
			fail_desc(w, i, "bad page name", rc);
	}
	dups = kvfs_batch_check_dups(b->a.count, b->d, w->names, b->status);
	if (dups < 0)
		return (int)dups;
	if (dups > 0)
		kv_log(KV_LOG_DEBUG, "fast path: WRITE from pid %d: %ld descriptors name "
		       "a page another descriptor of the batch names too", (int)b->who.tid, dups);
	return 0;
}

/* ---- resolving: nothing is copied or stored yet ---- */

/* The size rule is the model's (kvfs_page_limit looks it up through any of
 * its layers), so it is found once per batch. */
static int32_t check_size(struct wbatch *w, const struct fp_layer *le, uint64_t size)
{
	int rc;

	if (!w->limit_known) {
		rc = kvfs_page_limit(w->b.fs, le->ino, &w->limit, &w->exact);
		if (rc < 0)
			return rc;
		w->limit_known = true;
	}
	/* As a FUSE write would say: EINVAL against the geometry, EFBIG
	 * past max_page in a model without one. */
	if (w->exact && size != w->limit)
		return -EINVAL;
	if (size > w->limit)
		return -EFBIG;
	return 0;
}

/* Replacing a page in a sticky directory: only its owner, the directory's
 * owner or root, as the kernel's may_delete() says for rename(2). */
static bool sticky_denies(struct wbatch *w, const struct fp_layer *le,
			  const struct kv_node_info *old)
{
	uid_t uid = w->b.who.uid;

	return (le->attr.mode & S_ISVTX) && uid != 0 && uid != old->attr.uid &&
	       uid != le->attr.uid;
}

static int32_t resolve(struct wbatch *w, uint32_t i, struct wpage *p)
{
	const struct kvfs_page_desc *d = &w->b.d[i];
	const struct fp_layer *le;
	struct kv_node_info old;
	int32_t rc;

	if (!w->rv.dirs_ok)
		return -EACCES;
	rc = fp_layer_by_num(&w->rv, d->layer, &le);
	if (rc < 0)
		return rc;
	if (!le->search || !le->create)
		return -EACCES;
	rc = check_size(w, le, d->dst_len);
	if (rc < 0)
		return rc;
	/* An early answer only: kvfs_page_publish decides under ns_lock. */
	if (kv_index_lookup(w->b.fs->idx, le->ino, w->names[i], &old) == 0) {
		if (!w->replace)
			return -EEXIST;
		if (old.kind != KV_KIND_PAGE)
			return -EISDIR;
		if (sticky_denies(w, le, &old))
			return -EPERM;
		/* Its writer's last close seals it, by a release the kernel
		 * sends after close(2) returns: wait for it, as a reader does. */
		if (old.state == KV_PAGE_WRITING &&
		    kvfs_page_await_seal(w->b.fs, w->b.who.uid, &old,
					 &w->rv.seal_deadline_ns) == -EBUSY)
			return -EBUSY;
	}
	*p = (struct wpage){ .idx = i, .layer_ino = le->ino, .name = w->names[i],
			     .size = d->dst_len };
	return 0;
}

static int resolve_all(struct wbatch *w)
{
	struct fp_batch *b = &w->b;

	w->pages = calloc(b->a.count, sizeof(*w->pages));
	if (!w->pages)
		return -ENOMEM;
	for (uint32_t i = 0; i < b->a.count; i++) {
		int32_t rc;

		if (b->status[i])
			continue;
		rc = resolve(w, i, &w->pages[w->np]);
		if (rc < 0)
			fail_desc(w, i, "refused", rc);
		else
			w->np++;
	}
	return 0;
}

/* ---- staging and publishing ---- */

static void unstage(struct wbatch *w, struct wpage *p)
{
	w->staged -= p->charged;
	kvfs_dirty_give(w->b.fs, p->charged, false);
	kvfs_dirty_fast_done(w->b.fs, w->b.who.uid, p->shared);
	p->shared = 0;
	kvfs_data_put(p->data);
	p->data = NULL;
	p->charged = 0;
}

static uint64_t footprint(const struct wpage *p)
{
	return (p->size + KV_ALIGN - 1) & ~(uint64_t)(KV_ALIGN - 1);
}

/* Charge the budget (may sleep: no lock held) and copy the page's bytes
 * out of the region into a buffer of the daemon's own: a reused one, not
 * zeroed (the copy overwrites the payload; place_payload zeroes the
 * padding the O_DIRECT write of the footprint sends). The caller's share
 * for it is already taken (p->shared); on failure it goes back. */
static int32_t stage(struct wbatch *w, struct wpage *p)
{
	uint64_t cap = footprint(p);
	int rc;

	rc = kvfs_dirty_take(w->b.fs, cap, w->staged);
	if (rc < 0) {
		kvfs_dirty_fast_done(w->b.fs, w->b.who.uid, p->shared);
		p->shared = 0;
		return rc;    /* nothing charged */
	}
	p->charged = cap;
	w->staged += cap;
	p->data = kvfs_data_new(cap);
	if (!p->data) {
		unstage(w, p);
		return -ENOMEM;
	}
	/* Copied and hashed in one pass: the seal uses this hash, of the
	 * bytes as copied, whatever the engine does to its region meanwhile. */
	rc = kvfs_region_load_hashed(w->b.dr, w->b.d[p->idx].dst_off, p->data->bytes,
				     p->size, p->data->hash);
	if (rc < 0) {
		unstage(w, p);
		return rc;
	}
	p->data->size = p->size;
	p->data->hashed = true;
	return 0;
}

/* Hand a staged page to the page layer. On success the charge belongs to
 * the page, which took references of its own to the buffer; on failure
 * both are still ours to give back. */
static void publish(struct wbatch *w, struct wpage *p)
{
	struct kvfs *fs = w->b.fs;
	struct kv_node_info n;
	int rc;

	rc = kvfs_page_publish(fs, p->layer_ino, p->name, &w->attr, p->data,
			       p->charged, w->replace, &n);
	if (rc < 0) {
		unstage(w, p);
		/* In cache mode retry_full tries a page refused for space
		 * again: only its last refusal is worth a warning. */
		if (rc == -ENOSPC && !fs->opts.authoritative) {
			w->b.status[p->idx] = rc;
			p->unlogged = true;
		} else
			fail_desc(w, p->idx, "not published", rc);
		return;
	}
	kvfs_data_put(p->data);
	p->data = NULL;
	w->staged -= p->charged;    /* the page holds it now, share included */
	p->charged = p->shared = 0;
	w->b.d[p->idx].handle = fp_handle_of(fs, n.ino);
	w->b.d[p->idx].bytes = p->size;
	w->published++;
}

/* The caller's fast-path share for pages [p, end) at once (it holds none
 * while it waits: kvfs_dirty_fast_take). */
static int32_t share_take(struct wbatch *w, struct wpage *p, struct wpage *end)
{
	uint64_t bytes = 0;
	int rc;

	for (struct wpage *q = p; q < end; q++)
		bytes += footprint(q);
	rc = kvfs_dirty_fast_take(w->b.fs, w->b.who.uid, bytes);
	if (rc < 0)
		return rc;
	for (; p < end; p++)
		p->shared = footprint(p);
	return 0;
}

/*
 * In cache mode a page refused for space lost its room to another writer
 * between the wait and the publish: wait for the evictor and try again,
 * one page per commit group, until it has nothing left to give.
 */
static void retry_full(struct wbatch *w, uint32_t first, uint32_t end)
{
	struct kvfs *fs = w->b.fs;

	for (uint32_t k = first; k < end; k++) {
		struct wpage *p = &w->pages[k];

		for (int tries = 0; tries < SPACE_RETRIES &&
		     w->b.status[p->idx] == -ENOSPC && !w->region_lost; tries++) {
			if (kvfs_space_wait_run(fs, p->size) < 0)
				break;
			w->b.status[p->idx] = share_take(w, p, p + 1);
			if (w->b.status[p->idx] == 0)
				w->b.status[p->idx] = stage(w, p);
			if (w->b.status[p->idx] < 0)
				break;
			kvfs_commit_group_begin(fs);
			publish(w, p);
			kvfs_commit_group_end(fs);
		}
		/* Its refusal for space was not logged: the last status is. */
		if (p->unlogged && w->b.status[p->idx] < 0)
			log_desc(w, p->idx, "not published", w->b.status[p->idx]);
		p->unlogged = false;
	}
}

/*
 * The kernel may still hold a replaced name as the old page's inode. Told
 * only after the chunk's commit group ended: the invalidation can wait in
 * the kernel for the layer directory's lock, and whoever holds it (an
 * fsync of the directory) may be waiting for the committer, which waits
 * for the group. The notifier sends it; the call waits for that (bounded)
 * so that open(2) after the call returns finds the new page. Waiting is
 * safe on an executor thread, which no request waits for; on a FUSE
 * worker (no executor) it is not, and the call does not wait.
 */
static void forget_replaced(struct wbatch *w, uint32_t first, uint32_t end)
{
	static struct kv_log_limit slow_log;
	uint64_t ticket = 0, t;

	if (!w->replace)
		return;
	for (uint32_t k = first; k < end; k++) {
		if (w->b.status[w->pages[k].idx] == 0 && w->b.d[w->pages[k].idx].handle) {
			t = kvfs_hook_name_gone(w->b.fs, w->pages[k].layer_ino,
						 w->pages[k].name);
			ticket = t > ticket ? t : ticket;
		}
	}
	if (ticket && w->b.fs->exec && 
	    kvfs_hook_names_sent(w->b.fs, ticket, FORGET_WAIT_MS) < 0)
		KV_LOG_LIMITED(&slow_log, KV_LOG_WARN,
			       "fast path: WRITE from pid %d: the kernel has not dropped "
			       "replaced names after %u ms; they may resolve to the old "
			       "pages (ENOENT) for a while", (int)w->b.who.tid, FORGET_WAIT_MS);
}

/* Bytes one chunk may stage: a share of the budget, at least one page.
 * A uid other than root holds at most kvfs_dirty_fast_share in fast-path
 * pages until they are durable: its chunks are half of that, so that one
 * call copies its next chunk while the last drains. */
static uint64_t chunk_bytes(struct kvfs *fs, uint32_t uid)
{
	uint64_t budget = uid ? kvfs_dirty_fast_share(fs) / 2
			      : fs->dirty.budget / CHUNK_BUDGET_SHARE;

	return budget ? budget : 1;
}

/*
 * Copy a chunk of pages, then publish them one after the other inside a
 * commit group: the chunk's manifest changes commit in one transaction. A
 * chunk is at most commit_batch pages and half the write-back budget, so a
 * batch larger than that takes one transaction per chunk.
 */
static void write_pages(struct wbatch *w)
{
	struct kvfs *fs = w->b.fs;
	uint64_t max_bytes = chunk_bytes(fs, w->b.who.uid);
	unsigned max_pages = fs->opts.commit_batch ? fs->opts.commit_batch : 1;
	uint32_t first = 0;

	while (first < w->np) {
		uint64_t bytes = 0;
		uint32_t end = first;
		int32_t shared;

		for (; end < w->np && end - first < max_pages; end++) {
			if (end > first && bytes + w->pages[end].size > max_bytes)
				break;
			bytes += footprint(&w->pages[end]);
		}
		shared = w->region_lost ? 0 : share_take(w, &w->pages[first], &w->pages[end]);
		bytes = 0;
		for (uint32_t k = first; k < end; k++) {
			struct wpage *p = &w->pages[k];
			int32_t rc;

			/* Once the region faulted every copy would: the call
			 * fails with EFAULT as a whole (fp_batch_finish). */
			rc = w->region_lost ? -EFAULT : shared < 0 ? shared : stage(w, p);
			if (rc < 0 && p->shared) {      /* not staged: its share goes back */
				kvfs_dirty_fast_done(fs, w->b.who.uid, p->shared);
				p->shared = 0;
			}
			if (rc == -EFAULT && !w->region_lost) {
				w->region_lost = true;
				fail_desc(w, p->idx, "source not copied", rc);
			} else if (rc < 0) {
				w->b.status[p->idx] = rc;
				if (rc != -EFAULT)
					log_desc(w, p->idx, "source not copied", rc);
			} else {
				bytes += p->charged;
			}
		}
		/* Staging may wait for the committer (budget), and so may
		 * room from the evictor; publishing does not, so the chunk's
		 * rows can be held for one commit. */
		kvfs_space_wait(fs, bytes);
		kvfs_commit_group_begin(fs);
		for (uint32_t k = first; k < end; k++)
			if (w->pages[k].data)
				publish(w, &w->pages[k]);
		kvfs_commit_group_end(fs);
		retry_full(w, first, end);
		forget_replaced(w, first, end);
		first = end;
	}
}

/* A durable batch whose wait saw a failure: every page reported 0 so far
 * may be among those lost, so none of them claims durability. */
static void fail_undurable(struct wbatch *w)
{
	for (uint32_t k = 0; k < w->np; k++) {
		uint32_t i = w->pages[k].idx;

		if (w->b.status[i] == 0) {
			w->b.status[i] = -EIO;
			w->b.d[i].handle = 0;
		}
	}
	kv_log(KV_LOG_WARN, "fast path: WRITE from pid %d: a page could not be made "
	       "durable; all %u pages of the batch report EIO", (int)w->b.who.tid,
	       w->published);
}

static void init_attr(struct wbatch *w)
{
	int64_t now = kvfs_now_ns();

	/* Sealed pages are read-only for everyone, whatever the umask. */
	w->attr = (struct kv_obj_attr){ .mode = 0444, .uid = w->b.who.uid,
					.gid = w->b.who.gid, .atime_ns = now,
					.mtime_ns = now, .ctime_ns = now };
}

static void wbatch_free(struct wbatch *w)
{
	for (uint32_t k = 0; k < w->np; k++)
		if (w->pages[k].data)
			unstage(w, &w->pages[k]);
	free(w->pages);
	free(w->names);
	free(w->arena);
	fp_resolver_free(&w->rv);
	fp_batch_free(&w->b);
}

int kvfs_fast_write(struct kvfs *fs, const struct kvfs_fast_req *req, uint64_t model,
		    struct kvfs_batch_arg *a)
{
	struct wbatch w = { 0 };
	uint64_t mark = 0;
	int rc;

	w.replace = a->flags & KVFS_WRITE_REPLACE;
	w.durable = a->flags & KVFS_WRITE_DURABLE;
	/* Even while the index loads: each page's layer is loaded before it
	 * is published, and a page replaced moves the refcount the load
	 * checks with it (index: kv_index_extent_ref). */
	rc = kvfs_changes_damaged(fs);
	if (rc < 0)
		return rc;
	rc = fp_batch_begin(&w.b, fs, req, a, KVFS_BATCH_WRITE);
	if (rc == 0)
		rc = fp_resolver_init(&w.rv, &w.b, req, model);
	if (rc == 0)
		rc = load_names(&w);
	if (rc == 0)
		rc = resolve_all(&w);
	if (rc == 0) {
		init_attr(&w);
		/* Before the first page is queued: the wait covers all of them. */
		if (w.durable)
			mark = kvfs_commit_mark(fs);
		write_pages(&w);
		if (w.durable && w.published && kvfs_commit_wait_all(fs, mark) == -EIO)
			fail_undurable(&w);
		for (uint32_t i = 0; i < a->count; i++) {
			if (w.b.status[i])
				w.b.d[i].handle = 0;     /* not the engine's input back */
			else
				w.b.a.bytes += w.b.d[i].bytes;
		}
		rc = fp_batch_finish(&w.b, true);
		w.b.a.done = w.b.a.count - w.b.a.failed;
	}
	if (rc == 0) {
		*a = w.b.a;
		atomic_fetch_add(&fs->st.fast_write_batches, 1);
		atomic_fetch_add(&fs->st.fast_pages_written, a->done);
	} else if (w.published) {
		KV_LOG_LIMITED(&batch_log, KV_LOG_WARN, "fast path: WRITE from pid %d failed "
			       "after %u pages were stored: %s", (int)w.b.who.tid, w.published,
			       kv_strerror(rc));
	}
	if (w.unlogged)
		kv_log(KV_LOG_DEBUG, "fast path: WRITE from pid %d: %u more descriptors "
		       "failed (not logged one by one)", (int)w.b.who.tid, w.unlogged);
	wbatch_free(&w);
	return rc;
}
