/*
 * `kvfs fsck` checks (see fsck.c): the manifest rows read into memory, the
 * stripes (directory and marker) and their segment files, every extent
 * row's values and place inside its segment file, overlaps between
 * extents, and page -> extent references and refcounts.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsck.h"

#define MARKER_NAME "kvfs-stripe"

/* ---- rows ---- */

static int add_extent(void *arg, const struct kv_check_extent *r)
{
	struct fsck *f = arg;

	if (f->next == f->ext_cap) {
		struct ext *n = kv_array_room(f->ext, f->next, &f->ext_cap, sizeof(*n), 1024);

		if (!n)
			return -ENOMEM;
		f->ext = n;
	}
	memset(&f->ext[f->next], 0, sizeof(f->ext[0]));
	f->ext[f->next].r = *r;
	f->ext[f->next].seg = -1;
	f->next++;
	progress_add(f->pr, 1);
	return 0;
}

/* A page row into f->pg; no progress counted (the page pass runs on a
 * thread of its own, and the status line is the main thread's). */
static int add_page_row(struct fsck *f, const struct kv_check_page *r)
{
	struct page *p;

	if (f->npg == f->pg_cap) {
		struct page *n = kv_array_room(f->pg, f->npg, &f->pg_cap, sizeof(*n), 1024);

		if (!n)
			return -ENOMEM;
		f->pg = n;
	}
	p = &f->pg[f->npg];
	memset(p, 0, sizeof(*p));
	p->ino = r->ino;
	p->extent_id = r->extent_id;
	p->size = r->size;
	p->ident_ok = r->ident_ok;
	if (!r->layer_ok)
		problem(f, false, "manifest: table pages, row %" PRIu64 ": refers to a layers "
			"row that does not exist (foreign key)", r->ino);
	f->npg++;
	return 0;
}

static int add_page(void *arg, const struct kv_check_page *r)
{
	struct fsck *f = arg;
	int rc = add_page_row(f, r);

	if (rc == 0)
		progress_add(f->pr, 1);
	return rc;
}

/*
 * One pass first: the rows as the mount's load judges them (every value in
 * range, the identity checks), handed here as they come. On a sound
 * manifest that both reads the rows and proves their values, so the final
 * check has nothing left to do (f->rows_ok). A row that pass refuses, or a
 * page whose layer is missing, ends it: the raw walks then read every row
 * as it is, for the checks to judge and report one by one.
 */
/* struct layers (fsck.h): a growing, ascending list of layer inodes (the
 * rows come by inode). */
static int layers_add(struct layers *l, uint64_t ino)
{
	if (l->n == l->cap) {
		uint64_t *n = kv_array_room(l->ino, l->n, &l->cap, sizeof(*n), 64);

		if (!n)
			return -ENOMEM;
		l->ino = n;
	}
	l->ino[l->n++] = ino;
	return 0;
}

static bool layers_have(const struct layers *l, uint64_t ino)
{
	size_t lo = 0, hi = l->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (l->ino[mid] == ino)
			return true;
		if (l->ino[mid] < ino)
			lo = mid + 1;
		else
			hi = mid;
	}
	return false;
}

static int fast_layer(void *arg, const struct kv_layer_rec *r)
{
	return layers_add(&((struct fsck *)arg)->layers, r->ino);
}

static int fast_extent(void *arg, const struct kv_extent_rec *r)
{
	struct kv_check_extent e = {
		.id = r->id, .stripe = r->ext.stripe, .segment = r->ext.segment,
		.offset = (int64_t)r->ext.offset, .length = (int64_t)r->ext.length,
		.refcount = r->refcount, .ints_ok = true, .hash_ok = true,
	};

	memcpy(e.hash, r->hash, KV_HASH_LEN);
	return add_extent(arg, &e);
}

#define FAST_STOP 1   /* not an error: the raw walks take over */

/* A page row the pass judged sound, whose layer must be in l. */
static int fast_page(struct fsck *f, const struct layers *l, const struct kv_page_rec *r)
{
	struct kv_check_page p = {
		.ino = r->ino, .extent_id = r->extent_id, .size = (int64_t)r->size,
		.ident_ok = true, .layer_ok = true,
	};

	if (!layers_have(l, r->layer_ino))
		return FAST_STOP;
	return add_page_row(f, &p);
}

static int fast_page_here(void *arg, const struct kv_page_rec *r)
{
	struct fsck *f = arg;
	int rc = fast_page(f, &f->layers, r);

	if (rc == 0)
		progress_add(f->pr, 1);
	return rc;
}

/*
 * The pages, the larger half of the rows, on a connection and a thread of
 * their own while this thread reads the extents. With quick_check and the
 * index scans on two more threads, the row pass was the longest of them
 * (1.6 s of CPU at 1M pages against 0.7 s each): on more than two cores it
 * alone set fsck's time. The pass reads layers too, into a list of its own
 * (the other pass fills f->layers meanwhile).
 */
struct page_pass {
	struct fsck *f;
	struct kv_manifest *m;
	struct layers layers;
	pthread_t th;
	int rc;
	char msg[768];
};

static int pass_layer(void *arg, const struct kv_layer_rec *r)
{
	return layers_add(&((struct page_pass *)arg)->layers, r->ino);
}

static int pass_page(void *arg, const struct kv_page_rec *r)
{
	struct page_pass *pp = arg;

	return fast_page(pp->f, &pp->layers, r);
}

static void *page_pass_run(void *arg)
{
	static const struct kv_manifest_visitor v = { .layer = pass_layer, .page = pass_page };
	struct page_pass *pp = arg;

	pp->rc = kv_manifest_check_rows(pp->m, &v, pp, KV_CHECK_PAGES, pp->f->sums, pp->msg,
					sizeof(pp->msg));
	return NULL;
}

/* Start it; false (nothing started) where a second connection or thread
 * cannot be had: then one pass reads everything. */
static bool page_pass_start(struct fsck *f, struct page_pass *pp)
{
	pp->f = f;
	if (kv_manifest_open(f->store, &pp->m) < 0)
		return false;
	(void)kv_manifest_scan_cache(pp->m);
	if (pthread_create(&pp->th, NULL, page_pass_run, pp) != 0) {
		kv_manifest_close(pp->m);
		pp->m = NULL;
		return false;
	}
	return true;
}

static int page_pass_end(struct fsck *f, struct page_pass *pp)
{
	pthread_join(pp->th, NULL);
	kv_manifest_close(pp->m);
	free(pp->layers.ino);
	progress_add(f->pr, f->npg);
	return pp->rc;
}

/* Where the fast pass must give way to the raw walks. */
static bool fast_refused(int rc)
{
	return rc == KV_ERR_CORRUPT || rc == FAST_STOP;
}

int read_rows(struct fsck *f)
{
	static const struct kv_manifest_visitor v = {
		.layer = fast_layer, .extent = fast_extent, .page = fast_page_here,
	};
	struct page_pass pp = { 0 };
	char msg[768];
	bool apart;
	int rc, rc2;

	/* the manifest does not say how many rows there are: no total */
	phase_start(f, "fsck: manifest rows", 0, "rows");
	apart = page_pass_start(f, &pp);
	rc = kv_manifest_check_rows(f->m, &v, f, apart ? KV_CHECK_BUT_PAGES : KV_CHECK_ALL,
				    f->sums, msg, sizeof(msg));
	if (apart) {
		rc2 = page_pass_end(f, &pp);
		/* an error that stops fsck outranks a refusal, which outranks 0 */
		if (rc == 0 || (fast_refused(rc) && rc2 != 0 && !fast_refused(rc2)))
			rc = rc2;
	}
	f->rows_ok = rc == 0;
	if (fast_refused(rc)) {
		f->next = f->npg = 0;
		rc = kv_manifest_walk_extents(f->m, add_extent, f);
		if (rc == 0)
			rc = kv_manifest_walk_pages(f->m, add_page, f);
	}
	phase_end(f);
	if (rc < 0)
		fprintf(stderr, "kvfs fsck: cannot read the manifest rows: %s\n", kv_strerror(rc));
	return rc;
}

/* Rows carry no names (a million strdups); a page named in a line gets its
 * path from the manifest then, before any repair deletes its row. */
const char *fsck_page_path(struct fsck *f, struct page *p)
{
	char path[3 * (KV_NAME_MAX + 1) + 8];

	if (p->path)
		return p->path;
	if (kv_manifest_page_path(f->m, p->ino, path, sizeof(path)) < 0)
		return "?/?/?";
	p->path = strdup(path);
	return p->path ? p->path : "?/?/?";
}

static struct ext *find_extent(struct fsck *f, uint64_t id)
{
	size_t lo = 0, hi = f->next;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (f->ext[mid].r.id == id)
			return &f->ext[mid];
		if (f->ext[mid].r.id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* ---- stripes and segment files ---- */

static int check_marker(struct fsck *f, unsigned i)
{
	const char *dir = f->meta->stripes[i];
	char path[4096 + 16], want[128], got[128];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, MARKER_NAME);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		problem(f, false, "stripe %u (%s): cannot open its marker %s: %s; its extents "
			"are not checked (is the disk mounted?)", i, dir, MARKER_NAME,
			strerror(errno));
		return -1;
	}
	n = read(fd, got, sizeof(got) - 1);
	close(fd);
	got[n > 0 ? n : 0] = '\0';
	snprintf(want, sizeof(want), "kvfs-stripe 1\nuuid %s\nindex %u\n", f->meta->uuid, i);
	if (strcmp(got, want) != 0) {
		problem(f, false, "stripe %u (%s): marker does not name store %s index %u: "
			"a foreign or swapped disk; its extents are not checked", i, dir,
			f->meta->uuid, i);
		return -1;
	}
	return 0;
}

static int add_seg(struct fsck *f, uint32_t stripe, uint32_t num, uint64_t size)
{
	if (f->nseg == f->seg_cap) {
		struct seg *n = kv_array_room(f->seg, f->nseg, &f->seg_cap, sizeof(*n), 64);

		if (!n)
			return -ENOMEM;
		f->seg = n;
	}
	f->seg[f->nseg++] = (struct seg){ .stripe = stripe, .num = num, .size = size, .fd = -1 };
	return 0;
}

static int scan_stripe(struct fsck *f, unsigned i)
{
	const char *dir = f->meta->stripes[i];
	struct dirent *de;
	DIR *d;
	int rc = 0;

	d = opendir(dir);
	if (!d) {
		problem(f, false, "stripe %u (%s): cannot open the directory: %s; its extents "
			"are not checked (is the disk mounted?)", i, dir, strerror(errno));
		return 0;
	}
	if (check_marker(f, i) < 0)
		goto out;
	while (rc == 0 && (de = readdir(d))) {
		struct stat sb;
		uint32_t num;

		if (!kv_segment_parse(de->d_name, &num))
			continue;
		if (fstatat(dirfd(d), de->d_name, &sb, 0) < 0) {
			rc = -errno;
			fprintf(stderr, "kvfs fsck: %s/%s: stat: %s\n", dir, de->d_name,
				strerror(errno));
		} else if (S_ISREG(sb.st_mode)) {
			rc = add_seg(f, i, num, (uint64_t)sb.st_size);
		}
	}
	f->stripe_ok[i] = rc == 0;
out:
	closedir(d);
	return rc;
}

static int seg_cmp(const void *a, const void *b)
{
	const struct seg *x = a, *y = b;

	if (x->stripe != y->stripe)
		return x->stripe < y->stripe ? -1 : 1;
	return x->num < y->num ? -1 : x->num > y->num;
}

int scan_stripes(struct fsck *f)
{
	int rc;

	f->stripe_ok = calloc(f->meta->nstripes, sizeof(bool));
	if (!f->stripe_ok)
		return -ENOMEM;
	for (unsigned i = 0; i < f->meta->nstripes; i++)
		if ((rc = scan_stripe(f, i)) < 0)
			return rc;
	qsort(f->seg, f->nseg, sizeof(*f->seg), seg_cmp);
	return 0;
}

static int32_t find_seg(struct fsck *f, uint32_t stripe, uint32_t num)
{
	struct seg key = { .stripe = stripe, .num = num };
	struct seg *s = bsearch(&key, f->seg, f->nseg, sizeof(key), seg_cmp);

	return s ? (int32_t)(s - f->seg) : -1;
}

void seg_path(struct fsck *f, uint32_t stripe, uint32_t num, char *out, size_t len)
{
	kv_segment_path(f->meta->stripes[stripe], num, out, len);
}

/* ---- extents: values and place ---- */

__attribute__((format(printf, 3, 4)))
void extent_bad(struct fsck *f, struct ext *e, const char *fmt, ...)
{
	char why[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	problem(f, true, "extent %" PRIu64 " (stripe %" PRId64 " segment %" PRId64
		" offset %" PRId64 " length %" PRId64 "): %s", e->r.id, e->r.stripe,
		e->r.segment, e->r.offset, e->r.length, why);
	if (!e->bad) {
		e->bad = true;
		e->why = strdup(why);
	}
}

/* Values the store cannot even address. */
static bool extent_values_ok(struct fsck *f, struct ext *e)
{
	const struct kv_check_extent *r = &e->r;
	int64_t seg = (int64_t)f->meta->segment_size;
	struct kv_extent x = { .length = r->length > 0 ? (uint64_t)r->length : 0 };

	if (!r->ints_ok)
		extent_bad(f, e, "a column is not an integer");
	else if (r->stripe < 0 || r->stripe >= (int64_t)f->meta->nstripes)
		extent_bad(f, e, "stripe %" PRId64 " does not exist (%u stripes)", r->stripe,
			   f->meta->nstripes);
	else if (r->segment < 0 || r->segment > UINT32_MAX)
		extent_bad(f, e, "segment number out of range");
	else if (r->offset < 0 || r->offset % KV_ALIGN)
		extent_bad(f, e, "offset is not %u-aligned", KV_ALIGN);
	else if (r->length <= 0 || r->length > seg)
		extent_bad(f, e, "length is outside 1..%" PRId64, seg);
	else if ((uint64_t)r->offset + kv_extent_footprint(&x) > (uint64_t)seg)
		extent_bad(f, e, "runs past the segment size %" PRId64, seg);
	else if (!r->hash_ok)
		extent_bad(f, e, "hash is not a %u-byte blob", KV_HASH_LEN);
	return !e->bad;
}

static void check_extent_place(struct fsck *f, struct ext *e)
{
	struct kv_extent x = { .length = (uint64_t)e->r.length };
	uint64_t end = (uint64_t)e->r.offset + kv_extent_footprint(&x);
	uint32_t stripe = (uint32_t)e->r.stripe, num = (uint32_t)e->r.segment;
	char path[4096 + 32];
	int32_t s;

	if (!f->stripe_ok[stripe])
		return;   /* reported once for the stripe; never delete a whole disk */
	s = find_seg(f, stripe, num);
	if (s >= 0)
		e->seg = s;
	if (s >= 0 && end <= f->seg[s].size)
		return;
	seg_path(f, stripe, num, path, sizeof(path));   /* for the line only */
	if (s < 0)
		extent_bad(f, e, "segment file %s is missing", path);
	else
		extent_bad(f, e, "truncated segment: the extent ends at %" PRIu64 " but %s is "
			   "%" PRIu64 " bytes", end, path, f->seg[s].size);
}

static int loc_cmp(const void *a, const void *b)
{
	const struct ext *x = *(struct ext *const *)a, *y = *(struct ext *const *)b;

	if (x->seg != y->seg)
		return x->seg < y->seg ? -1 : 1;
	if (x->r.offset != y->r.offset)
		return x->r.offset < y->r.offset ? -1 : 1;
	return x->r.id < y->r.id ? -1 : x->r.id > y->r.id;
}

int check_extents(struct fsck *f)
{
	f->byloc = calloc(f->next ? f->next : 1, sizeof(*f->byloc));
	if (!f->byloc)
		return -ENOMEM;
	phase_start(f, "fsck: extents", f->next, "extents");
	for (size_t i = 0; i < f->next; i++) {
		struct ext *e = &f->ext[i];

		progress_set(f->pr, i + 1);
		if (e->r.id == KV_EXTENT_EMPTY) {
			/* Empty pages' extent: no place to check. */
			if (e->r.length != 0)
				extent_bad(f, e, "the empty pages' extent has a length");
			continue;
		}
		if (!extent_values_ok(f, e))
			continue;
		check_extent_place(f, e);
		if (e->seg >= 0)
			f->byloc[f->nloc++] = e;
	}
	phase_end(f);
	qsort(f->byloc, f->nloc, sizeof(*f->byloc), loc_cmp);
	return 0;
}

uint64_t ext_end(const struct ext *e)
{
	struct kv_extent x = { .length = (uint64_t)e->r.length };

	return (uint64_t)e->r.offset + kv_extent_footprint(&x);
}

/*
 * By footprint, as the store frees whole blocks. Not repaired: which of two
 * overlapping extents holds the right bytes is not knowable here (with
 * --verify-data a failing one is already marked bad and goes).
 */
void check_overlaps(struct fsck *f)
{
	const struct ext *far = NULL;   /* furthest-reaching so far in this segment */

	for (size_t i = 0; i < f->nloc; i++) {
		const struct ext *e = f->byloc[i];

		if (far && far->seg == e->seg && (uint64_t)e->r.offset < ext_end(far)) {
			problem(f, false, "extents %" PRIu64 " and %" PRIu64 " overlap in stripe %"
				PRId64 " segment %" PRId64 " (offsets %" PRId64 " and %" PRId64 ")",
				far->r.id, e->r.id, e->r.stripe, e->r.segment, far->r.offset,
				e->r.offset);
		}
		if (!far || far->seg != e->seg || ext_end(e) > ext_end(far))
			far = e;
	}
}

/* ---- references ---- */

void check_page_refs(struct fsck *f)
{
	for (size_t i = 0; i < f->npg; i++) {
		struct page *p = &f->pg[i];

		p->e = find_extent(f, p->extent_id);
		if (!p->ident_ok) {
			/* Its checksum would pass: the bytes are some page's. */
			problem(f, true, "page %s (ino %" PRIu64 "): its identity check fails "
				"(name, layer, extent or size changed outside kvfs): its bytes "
				"may be another page's", fsck_page_path(f, p), p->ino);
			p->lost = true;
			p->why = "its row's identity check fails";
		}
		if (!p->e) {
			problem(f, true, "page %s (ino %" PRIu64 "): dangling row: extent %" PRIu64
				" does not exist", fsck_page_path(f, p), p->ino, p->extent_id);
			p->lost = true;
			p->why = "its extent row does not exist";
			continue;
		}
		p->e->pages++;
		if (p->size != p->e->r.length) {
			problem(f, true, "page %s (ino %" PRIu64 "): size %" PRId64 " differs from "
				"extent %" PRIu64 " length %" PRId64, fsck_page_path(f, p), p->ino,
				p->size, p->extent_id, p->e->r.length);
			p->lost = true;
			p->why = "its size differs from its extent's length";
		}
	}
}

void check_refcounts(struct fsck *f)
{
	for (size_t i = 0; i < f->next; i++) {
		struct ext *e = &f->ext[i];

		if (e->pages == 0 && e->r.id == KV_EXTENT_EMPTY && e->r.refcount == 0)
			continue;     /* no empty page left: the row stays */
		if (e->pages == 0)
			problem(f, true, "extent %" PRIu64 " (stripe %" PRId64 " segment %" PRId64
				" offset %" PRId64 "): leaked extent: no page refers to it",
				e->r.id, e->r.stripe, e->r.segment, e->r.offset);
		else if (e->r.refcount != (int64_t)e->pages)
			problem(f, true, "extent %" PRIu64 ": refcount %" PRId64 " but %" PRIu32
				" page(s) refer to it", e->r.id, e->r.refcount, e->pages);
	}
}
