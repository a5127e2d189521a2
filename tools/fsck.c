/*
 * `kvfs fsck STORE [--verify-data] [--repair | -n] [--json]`: the offline
 * store checker, modelled on e2fsck.
 *
 * It takes the store lock the daemon takes (so neither can run while the
 * other does), then checks, in order: the SQLite database (integrity, foreign
 * keys, schema version), the stripes (directory and marker), every extent
 * row's values and that it lies inside its segment file, overlaps between
 * extents, page -> extent references and refcounts, space allocated in
 * segment files that no extent covers, and with --verify-data every
 * extent's XXH3-128. Each problem is one line; a summary ends the run.
 *
 * --repair changes only what can be fixed without losing a good page. This
 * is a cache, so a page whose bytes cannot be trusted (its extent missing,
 * outside its segment, failing its checksum) is deleted: a miss beats wrong
 * bytes. Order follows docs/format.md rule 4 ("free after forget"): one
 * manifest transaction (delete pages, fix refcounts, delete extents no page
 * uses) commits first; only then is space no committed row names punched. A
 * crash between the two leaves orphaned space, which the next fsck or mount
 * reclaims. Problems that cannot be fixed safely (overlapping extents, a
 * missing stripe, foreign keys other than page -> extent) are left alone.
 *
 * Exit status as e2fsck: 0 clean, 1 errors corrected, 4 errors left
 * uncorrected (1|4 = 5: some of each), 8 operational error, 16 usage.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "manifest.h"
#include "store.h"
#include "tools.h"

#define EXIT_OK 0
#define EXIT_FIXED 1
#define EXIT_LEFT 4
#define EXIT_OPERATIONAL 8
#define EXIT_USAGE 16

#define MARKER_NAME "kvfs-stripe"

static const char fsck_usage[] =
	"usage: kvfs fsck STORE [--verify-data] [--repair | -n] [--json]\n"
	"  check a store that is not mounted (see docs/fsck.md)\n"
	"  --verify-data  also read every extent and check its XXH3-128\n"
	"  --repair       fix what can be fixed (pages with unreadable data are deleted)\n"
	"  -n             read-only (the default)\n"
	"  --json         print the summary as one JSON object on stdout\n"
	"  exit: 0 clean, 1 errors corrected, 4 errors left, 8 operational error, 16 usage\n";

struct seg {
	uint32_t stripe, num;
	uint64_t size;
	int fd;              /* read-only, opened on first use */
};

struct ext {
	struct kv_check_extent r;
	int32_t seg;         /* index into segs, -1 if its file is missing or
	                      * its values are unusable */
	uint32_t pages;      /* page rows naming it */
	uint32_t kept;       /* of those, rows repair keeps */
	bool bad;            /* bytes untrustworthy: repair deletes its pages */
	bool deleted;        /* repair deleted its row */
	char *why;           /* why bad, for the lost-page lines */
};

struct page {
	uint64_t ino, extent_id;
	int64_t size;
	char *path;
	struct ext *e;       /* NULL: dangling */
	bool lost;           /* repair deletes it */
	const char *why;
};

struct fsck {
	const char *store;
	bool repair, verify, json, tty;
	FILE *out;                   /* problem lines */
	struct kv_manifest *m;
	struct kv_store_meta *meta;
	bool *stripe_ok;             /* per stripe: directory and marker fine */
	struct ext *ext;             /* by id */
	size_t next, ext_cap;
	struct page *pg;             /* by ino */
	size_t npg, pg_cap;
	struct seg *seg;             /* by (stripe, num) */
	size_t nseg, seg_cap;
	struct ext **byloc;          /* extents with a segment, by (seg, offset) */
	size_t nloc;
	unsigned problems, fixable, fixed;
	uint64_t lost_pages, orphan_bytes, punched_bytes, verified, verified_bytes;
	int lock_fd;
	int shown_pct;               /* progress bar: last percentage drawn */
};

__attribute__((format(printf, 3, 4)))
static void problem(struct fsck *f, bool fixable, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(f->out, fmt, ap);
	va_end(ap);
	fputc('\n', f->out);
	f->problems++;
	if (fixable)
		f->fixable++;
}

static void report_line(void *arg, const char *line)
{
	struct fsck *f = arg;

	problem(f, false, "%s", line);
}

/* ---- lock and open ---- */

/* As the daemon (fs/core.c lock_store): an flock on STORE/kvfs.lock, which
 * a running daemon holds for as long as it serves the store. */
static int lock_store(struct fsck *f)
{
	char path[4096 + 16], pid[32] = "";
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/kvfs.lock", f->store);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0 && (errno == EROFS || errno == EACCES) && !f->repair)
		fd = open(path, O_RDONLY | O_CLOEXEC);   /* -n on a read-only store */
	if (fd < 0) {
		fprintf(stderr, "kvfs fsck: cannot open %s: %s\n", path, strerror(errno));
		return -errno;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int err = errno;

		n = pread(fd, pid, sizeof(pid) - 1, 0);
		pid[n > 0 ? n : 0] = '\0';
		pid[strcspn(pid, "\n")] = '\0';
		if (err == EWOULDBLOCK)
			fprintf(stderr, "kvfs fsck: store %s is in use (mounted by kvfs pid %s); "
				"unmount it first: fsck works on stores nobody serves\n",
				f->store, pid[0] ? pid : "unknown");
		else
			fprintf(stderr, "kvfs fsck: cannot lock %s: %s\n", path, strerror(err));
		close(fd);
		return -err;
	}
	/* So a `kvfs mount` refused meanwhile names us (best effort). */
	n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	if (ftruncate(fd, 0) == 0 && pwrite(fd, pid, (size_t)n, 0) != n)
		fprintf(stderr, "kvfs fsck: warning: cannot record our pid in %s\n", path);
	f->lock_fd = fd;
	return 0;
}

static int open_store(struct fsck *f)
{
	char path[4096 + 16];
	struct stat sb;
	int rc;

	if (stat(f->store, &sb) < 0) {
		fprintf(stderr, "kvfs fsck: cannot open store %s: %s\n", f->store,
			strerror(errno));
		return -errno;
	}
	if (!S_ISDIR(sb.st_mode)) {
		fprintf(stderr, "kvfs fsck: %s is not a directory (not a kvfs store)\n", f->store);
		return -ENOTDIR;
	}
	snprintf(path, sizeof(path), "%s/%s", f->store, KV_MANIFEST_FILE);
	if (access(path, F_OK) < 0) {
		fprintf(stderr, "kvfs fsck: %s is not a kvfs store (no %s: %s)\n", f->store,
			KV_MANIFEST_FILE, strerror(errno));
		return -ENOENT;
	}
	rc = lock_store(f);
	if (rc < 0)
		return rc;
	rc = kv_manifest_open(f->store, &f->m);
	if (rc < 0)
		fprintf(stderr, "kvfs fsck: cannot open the manifest of %s: %s\n", f->store,
			kv_strerror(rc));
	return rc;
}

/* ---- rows ---- */

static int add_extent(void *arg, const struct kv_check_extent *r)
{
	struct fsck *f = arg;

	if (f->next == f->ext_cap) {
		size_t cap = f->ext_cap ? 2 * f->ext_cap : 1024;
		struct ext *n = realloc(f->ext, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		f->ext = n;
		f->ext_cap = cap;
	}
	memset(&f->ext[f->next], 0, sizeof(f->ext[0]));
	f->ext[f->next].r = *r;
	f->ext[f->next].seg = -1;
	f->next++;
	return 0;
}

static int add_page(void *arg, const struct kv_check_page *r)
{
	struct fsck *f = arg;
	struct page *p;

	if (f->npg == f->pg_cap) {
		size_t cap = f->pg_cap ? 2 * f->pg_cap : 1024;
		struct page *n = realloc(f->pg, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		f->pg = n;
		f->pg_cap = cap;
	}
	p = &f->pg[f->npg];
	memset(p, 0, sizeof(*p));
	p->ino = r->ino;
	p->extent_id = r->extent_id;
	p->size = r->size;
	p->path = strdup(r->path);
	if (!p->path)
		return -ENOMEM;
	f->npg++;
	return 0;
}

static int read_rows(struct fsck *f)
{
	int rc;

	rc = kv_manifest_walk_extents(f->m, add_extent, f);
	if (rc == 0)
		rc = kv_manifest_walk_pages(f->m, add_page, f);
	if (rc < 0)
		fprintf(stderr, "kvfs fsck: cannot read the manifest rows: %s\n", kv_strerror(rc));
	return rc;
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
		size_t cap = f->seg_cap ? 2 * f->seg_cap : 64;
		struct seg *n = realloc(f->seg, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		f->seg = n;
		f->seg_cap = cap;
	}
	f->seg[f->nseg++] = (struct seg){ .stripe = stripe, .num = num, .size = size, .fd = -1 };
	return 0;
}

/* The store's own spelling only (store/segment.c): seg-%08u. */
static bool parse_seg_name(const char *name, uint32_t *num)
{
	char canon[32];
	unsigned long v;
	char *end;

	if (strncmp(name, "seg-", 4) != 0 || name[4] < '0' || name[4] > '9')
		return false;
	errno = 0;
	v = strtoul(name + 4, &end, 10);
	if (errno || *end || v > UINT32_MAX)
		return false;
	snprintf(canon, sizeof(canon), "seg-%08lu", v);
	if (strcmp(canon, name) != 0)
		return false;
	*num = (uint32_t)v;
	return true;
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

		if (!parse_seg_name(de->d_name, &num))
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

static int scan_stripes(struct fsck *f)
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

static void seg_path(struct fsck *f, uint32_t stripe, uint32_t num, char *out, size_t len)
{
	snprintf(out, len, "%s/seg-%08" PRIu32, f->meta->stripes[stripe], num);
}

/* ---- extents: values and place ---- */

__attribute__((format(printf, 3, 4)))
static void extent_bad(struct fsck *f, struct ext *e, const char *fmt, ...)
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
	seg_path(f, stripe, num, path, sizeof(path));
	s = find_seg(f, stripe, num);
	if (s < 0) {
		extent_bad(f, e, "segment file %s is missing", path);
		return;
	}
	e->seg = s;
	if (end > f->seg[s].size)
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

static int check_extents(struct fsck *f)
{
	f->byloc = calloc(f->next ? f->next : 1, sizeof(*f->byloc));
	if (!f->byloc)
		return -ENOMEM;
	for (size_t i = 0; i < f->next; i++) {
		struct ext *e = &f->ext[i];

		if (!extent_values_ok(f, e))
			continue;
		check_extent_place(f, e);
		if (e->seg >= 0)
			f->byloc[f->nloc++] = e;
	}
	qsort(f->byloc, f->nloc, sizeof(*f->byloc), loc_cmp);
	return 0;
}

static uint64_t ext_end(const struct ext *e)
{
	struct kv_extent x = { .length = (uint64_t)e->r.length };

	return (uint64_t)e->r.offset + kv_extent_footprint(&x);
}

/*
 * By footprint, as the store frees whole blocks. Not repaired: which of two
 * overlapping extents holds the right bytes is not knowable here (with
 * --verify-data a failing one is already marked bad and goes).
 */
static void check_overlaps(struct fsck *f)
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

static void check_page_refs(struct fsck *f)
{
	for (size_t i = 0; i < f->npg; i++) {
		struct page *p = &f->pg[i];

		p->e = find_extent(f, p->extent_id);
		if (!p->e) {
			problem(f, true, "page %s (ino %" PRIu64 "): dangling row: extent %" PRIu64
				" does not exist", p->path, p->ino, p->extent_id);
			p->lost = true;
			p->why = "its extent row does not exist";
			continue;
		}
		p->e->pages++;
		if (p->size != p->e->r.length) {
			problem(f, true, "page %s (ino %" PRIu64 "): size %" PRId64 " differs from "
				"extent %" PRIu64 " length %" PRId64, p->path, p->ino, p->size,
				p->extent_id, p->e->r.length);
			p->lost = true;
			p->why = "its size differs from its extent's length";
		}
	}
}

static void check_refcounts(struct fsck *f)
{
	for (size_t i = 0; i < f->next; i++) {
		struct ext *e = &f->ext[i];

		if (e->pages == 0)
			problem(f, true, "extent %" PRIu64 " (stripe %" PRId64 " segment %" PRId64
				" offset %" PRId64 "): leaked extent: no page refers to it",
				e->r.id, e->r.stripe, e->r.segment, e->r.offset);
		else if (e->r.refcount != (int64_t)e->pages)
			problem(f, true, "extent %" PRIu64 ": refcount %" PRId64 " but %" PRIu32
				" page(s) refer to it", e->r.id, e->r.refcount, e->pages);
	}
}

/* ---- orphaned space ---- */

struct orphan_scan {
	uint64_t bytes;
	unsigned ranges;
	int err;
};

/*
 * Count (and with punch, free) [lo, hi), which no extent covers. Widened to
 * whole 4 KiB blocks: extent footprints are block-aligned, so this never
 * reaches into one, and a block a truncation cut in two (data ending
 * mid-block at EOF) is only freed if punched whole.
 */
static void orphan_range(int fd, bool punch, uint64_t lo, uint64_t hi, struct orphan_scan *o)
{
	lo &= ~(uint64_t)(KV_ALIGN - 1);
	hi = (hi + KV_ALIGN - 1) & ~(uint64_t)(KV_ALIGN - 1);
	if (hi <= lo)
		return;
	o->bytes += hi - lo;
	o->ranges++;
	if (punch && !o->err &&
	    fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)lo,
		      (off_t)(hi - lo)) < 0)
		o->err = -errno;
}

/*
 * Data ranges (SEEK_DATA/SEEK_HOLE) of segment s minus the footprints of its
 * extents (byloc[first..last), sorted by offset; with punch only those repair
 * kept). A filesystem without hole support reports the whole file as data:
 * punched gaps then show up as orphaned space, which punching cannot shrink.
 */
static int scan_seg_orphans(struct fsck *f, int fd, uint64_t size, size_t first,
			    size_t last, bool punch, struct orphan_scan *o)
{
	size_t i = first;
	off_t off = 0;

	while ((uint64_t)off < size) {
		off_t d = lseek(fd, off, SEEK_DATA), h;
		uint64_t pos;

		if (d < 0)
			return errno == ENXIO ? 0 : -errno;
		h = lseek(fd, d, SEEK_HOLE);
		if (h < 0)
			return -errno;
		for (pos = (uint64_t)d; pos < (uint64_t)h;) {
			while (i < last && (f->byloc[i]->deleted || ext_end(f->byloc[i]) <= pos))
				i++;
			if (i == last || (uint64_t)f->byloc[i]->r.offset >= (uint64_t)h) {
				orphan_range(fd, punch, pos, (uint64_t)h, o);
				break;
			}
			orphan_range(fd, punch, pos, (uint64_t)f->byloc[i]->r.offset, o);
			if (ext_end(f->byloc[i]) > pos)
				pos = ext_end(f->byloc[i]);
			i++;
		}
		off = h;
	}
	return 0;
}

static int orphans_in_seg(struct fsck *f, size_t s, size_t first, size_t last, bool punch)
{
	struct orphan_scan o = { 0 };
	char path[4096 + 32];
	int fd, rc;

	seg_path(f, f->seg[s].stripe, f->seg[s].num, path, sizeof(path));
	fd = open(path, (punch ? O_RDWR : O_RDONLY) | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "kvfs fsck: cannot open %s: %s\n", path, strerror(errno));
		return -errno;
	}
	rc = scan_seg_orphans(f, fd, f->seg[s].size, first, last, punch, &o);
	if (rc == 0 && punch && !o.err && o.bytes && fsync(fd) < 0)
		o.err = -errno;
	close(fd);
	if (rc < 0) {
		fprintf(stderr, "kvfs fsck: %s: cannot map its data: %s\n", path, strerror(-rc));
		return rc;
	}
	if (punch) {
		if (o.err)
			fprintf(stderr, "kvfs fsck: %s: punching orphaned space failed: %s\n", path,
				strerror(-o.err));
		f->punched_bytes += o.err ? 0 : o.bytes;
		return o.err;
	}
	if (o.bytes && first == last)
		problem(f, true, "segment file %s: no extent uses it, but it holds %" PRIu64
			" bytes of data (orphaned space)", path, o.bytes);
	else if (o.bytes)
		problem(f, true, "segment file %s: %" PRIu64 " bytes in %u range(s) hold data "
			"no extent covers (orphaned space)", path, o.bytes, o.ranges);
	f->orphan_bytes += o.bytes;
	return 0;
}

/* Walk every segment file with the extents inside it (byloc is grouped by
 * segment, in segment order). */
static int scan_orphans(struct fsck *f, bool punch)
{
	size_t j = 0;
	int rc, err = 0;

	for (size_t s = 0; s < f->nseg; s++) {
		size_t first = j;

		while (j < f->nloc && f->byloc[j]->seg == (int32_t)s)
			j++;
		rc = orphans_in_seg(f, s, first, j, punch);
		if (rc < 0 && !err)
			err = rc;
	}
	return err;
}

/* ---- data ---- */

static void progress(struct fsck *f, size_t done, size_t total)
{
	int pct = total ? (int)(done * 100 / total) : 100, bar = pct / 4;

	if (!f->tty || pct == f->shown_pct)
		return;
	f->shown_pct = pct;
	fprintf(stderr, "\rverifying data [%.*s%*s] %3d%% (%zu/%zu extents)",
		bar, "#########################", 25 - bar, "", pct, done, total);
	if (done == total)
		fputc('\n', stderr);
	fflush(stderr);
}

static int seg_fd(struct fsck *f, struct seg *s)
{
	char path[4096 + 32];

	if (s->fd >= 0)
		return s->fd;
	seg_path(f, s->stripe, s->num, path, sizeof(path));
	s->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (s->fd < 0)
		fprintf(stderr, "kvfs fsck: cannot open %s: %s\n", path, strerror(errno));
	return s->fd < 0 ? -errno : s->fd;
}

/* Read the whole footprint (the extent is inside its file: checked). */
static int read_extent(struct fsck *f, struct ext *e, uint8_t *buf, uint64_t len)
{
	int fd = seg_fd(f, &f->seg[e->seg]);
	uint64_t got = 0;

	if (fd < 0)
		return fd;
	while (got < len) {
		ssize_t n = pread(fd, buf + got, len - got, (off_t)((uint64_t)e->r.offset + got));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ENODATA;
		got += (uint64_t)n;
	}
	return 0;
}

static int verify_extent(struct fsck *f, struct ext *e, uint8_t *buf)
{
	uint8_t h[KV_HASH_LEN];
	char got[2 * KV_HASH_LEN + 1], want[2 * KV_HASH_LEN + 1];
	int rc;

	rc = read_extent(f, e, buf, ext_end(e) - (uint64_t)e->r.offset);
	if (rc == -ENODATA) {
		extent_bad(f, e, "short read: fewer than %" PRId64 " bytes", e->r.length);
		return 0;
	}
	if (rc < 0) {
		extent_bad(f, e, "read error: %s", strerror(-rc));
		return 0;
	}
	kv_hash128(buf, (size_t)e->r.length, h);
	if (memcmp(h, e->r.hash, KV_HASH_LEN) != 0) {
		kv_hash_hex(h, got);
		kv_hash_hex(e->r.hash, want);
		extent_bad(f, e, "checksum mismatch: the data hashes to xxh3-128:%s, the "
			   "manifest says xxh3-128:%s", got, want);
	}
	f->verified++;
	f->verified_bytes += (uint64_t)e->r.length;
	return 0;
}

static int verify_data(struct fsck *f)
{
	size_t total = 0, done = 0;
	uint64_t max = KV_ALIGN;
	uint8_t *buf;

	for (size_t i = 0; i < f->nloc; i++) {
		const struct ext *e = f->byloc[i];

		total += !e->bad;
		if (ext_end(e) - (uint64_t)e->r.offset > max)
			max = ext_end(e) - (uint64_t)e->r.offset;
	}
	buf = malloc(max);
	if (!buf) {
		fprintf(stderr, "kvfs fsck: no memory for a %" PRIu64 "-byte read buffer\n", max);
		return -ENOMEM;
	}
	progress(f, 0, total);
	/* In file order, so the disk reads sequentially. */
	for (size_t i = 0; i < f->nloc; i++) {
		if (f->byloc[i]->bad)
			continue;
		verify_extent(f, f->byloc[i], buf);
		progress(f, ++done, total);
	}
	free(buf);
	return 0;
}

/* ---- repair ---- */

static void plan_repair(struct fsck *f)
{
	for (size_t i = 0; i < f->npg; i++) {
		struct page *p = &f->pg[i];

		if (p->e && p->e->bad && !p->lost) {
			p->lost = true;
			p->why = p->e->why ? p->e->why : "its extent is damaged";
		}
		if (p->e && !p->lost)
			p->e->kept++;
	}
}

/* One transaction: pages first (children before parents), then extents. */
static int repair_manifest(struct fsck *f)
{
	int rc;

	if ((rc = kv_manifest_begin(f->m)))
		return rc;
	for (size_t i = 0; i < f->npg && !rc; i++)
		if (f->pg[i].lost)
			rc = kv_manifest_del_page(f->m, f->pg[i].ino);
	for (size_t i = 0; i < f->next && !rc; i++) {
		struct ext *e = &f->ext[i];

		if (e->kept == 0) {
			rc = kv_manifest_del_extent(f->m, e->r.id);
			e->deleted = rc == 0;
		} else if (e->r.refcount != (int64_t)e->kept) {
			rc = kv_manifest_set_refcount(f->m, e->r.id, e->kept);
		}
	}
	if (rc) {
		kv_manifest_rollback(f->m);
		for (size_t i = 0; i < f->next; i++)
			f->ext[i].deleted = false;
		return rc;
	}
	return kv_manifest_commit(f->m);
}

static int repair(struct fsck *f)
{
	int rc;

	plan_repair(f);
	rc = repair_manifest(f);
	if (rc < 0) {
		fprintf(stderr, "kvfs fsck: repair: the manifest transaction failed (%s); "
			"nothing was changed\n", kv_strerror(rc));
		return rc;
	}
	for (size_t i = 0; i < f->npg; i++) {
		if (!f->pg[i].lost)
			continue;
		fprintf(f->out, "repair: deleted page %s (ino %" PRIu64 "): %s\n",
			f->pg[i].path, f->pg[i].ino, f->pg[i].why);
		f->lost_pages++;
	}
	/* Rows are durable: what they no longer name can go (rule 4). */
	rc = scan_orphans(f, true);
	if (rc < 0) {
		fprintf(stderr, "kvfs fsck: repair: the manifest is fixed, but some orphaned "
			"space could not be punched; the next mount reclaims it\n");
		return rc;
	}
	return 0;
}

/* After all else (or after repair): what the daemon's load would say. */
static void final_check(struct fsck *f, const char *when)
{
	char msg[768];
	int rc = kv_manifest_check(f->m, msg, sizeof(msg));

	if (rc == KV_ERR_CORRUPT)
		problem(f, false, "manifest %s: %s", when, msg);
	else if (rc < 0)
		fprintf(stderr, "kvfs fsck: the manifest check could not run: %s\n", msg);
}

/* ---- driver ---- */

static int run_checks(struct fsck *f)
{
	int rc;

	rc = kv_manifest_check_db(f->m, report_line, f);
	if (rc < 0)
		return rc;
	f->meta = malloc(sizeof(*f->meta));
	if (!f->meta)
		return -ENOMEM;
	rc = kv_manifest_meta(f->m, f->meta);
	if (rc == KV_ERR_CORRUPT) {
		/* kv_manifest_meta logged why; without stripes nothing else can run */
		problem(f, false, "manifest: meta or stripes are damaged (see above); "
			"the extents were not checked");
		return 0;
	}
	if (rc < 0 || (rc = read_rows(f)) < 0 || (rc = scan_stripes(f)) < 0 ||
	    (rc = check_extents(f)) < 0)
		return rc;
	check_overlaps(f);
	check_page_refs(f);
	check_refcounts(f);
	if ((rc = scan_orphans(f, false)) < 0)
		return rc;
	if (f->verify && (rc = verify_data(f)) < 0)
		return rc;
	if (f->problems == 0)
		final_check(f, "check");
	return 0;
}

static void json_str(FILE *o, const char *s)
{
	fputc('"', o);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(o, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			fprintf(o, "\\u%04x", *s);
		else
			fputc(*s, o);
	}
	fputc('"', o);
}

static void summary(struct fsck *f, int status)
{
	unsigned left = f->problems - f->fixed;

	if (f->json) {
		printf("{\"store\": ");
		json_str(stdout, f->store);
		printf(", \"pages\": %zu, \"extents\": %zu, \"segments\": %zu, \"problems\": %u, "
		       "\"corrected\": %u, \"uncorrected\": %u, \"lost_pages\": %" PRIu64
		       ", \"orphaned_bytes\": %" PRIu64 ", \"punched_bytes\": %" PRIu64
		       ", \"verified_extents\": %" PRIu64 ", \"verified_bytes\": %" PRIu64
		       ", \"exit\": %d}\n", f->npg, f->next, f->nseg, f->problems, f->fixed,
		       left, f->lost_pages, f->orphan_bytes, f->punched_bytes, f->verified,
		       f->verified_bytes, status);
		return;
	}
	printf("kvfs fsck: %s: %zu pages, %zu extents, %zu segment files", f->store, f->npg,
	       f->next, f->nseg);
	if (f->verify)
		printf(", data of %" PRIu64 " extents (%" PRIu64 " bytes) verified", f->verified,
		       f->verified_bytes);
	printf("\n");
	if (f->problems == 0)
		printf("kvfs fsck: %s: clean\n", f->store);
	else if (f->repair)
		printf("kvfs fsck: %s: %u problem(s): %u corrected, %u left uncorrected; "
		       "%" PRIu64 " page(s) deleted, %" PRIu64 " bytes punched\n", f->store,
		       f->problems, f->fixed, left, f->lost_pages, f->punched_bytes);
	else
		printf("kvfs fsck: %s: %u problem(s) left uncorrected (--repair would fix %u)\n",
		       f->store, f->problems, f->fixable);
}

static int fsck_run(struct fsck *f)
{
	int rc;

	rc = open_store(f);
	if (rc == KV_ERR_CORRUPT) {
		problem(f, false, "manifest: %s/%s is damaged beyond opening", f->store,
			KV_MANIFEST_FILE);
		return EXIT_LEFT;
	}
	if (rc < 0)
		return EXIT_OPERATIONAL;
	rc = run_checks(f);
	if (rc < 0) {
		fprintf(stderr, "kvfs fsck: %s: the check could not complete: %s\n", f->store,
			kv_strerror(rc));
		return EXIT_OPERATIONAL;
	}
	if (f->repair && f->fixable) {
		if (repair(f) < 0)
			return EXIT_OPERATIONAL | EXIT_LEFT;
		f->fixed = f->fixable;
		if (f->problems == f->fixed)
			final_check(f, "after repair");
	}
	return (f->fixed ? EXIT_FIXED : 0) | (f->problems > f->fixed ? EXIT_LEFT : 0);
}

static void fsck_free(struct fsck *f)
{
	for (size_t i = 0; i < f->npg; i++)
		free(f->pg[i].path);
	for (size_t i = 0; i < f->next; i++)
		free(f->ext[i].why);
	for (size_t i = 0; i < f->nseg; i++)
		if (f->seg[i].fd >= 0)
			close(f->seg[i].fd);
	free(f->pg);
	free(f->ext);
	free(f->seg);
	free(f->byloc);
	free(f->stripe_ok);
	free(f->meta);
	if (f->m)
		kv_manifest_close(f->m);
	if (f->lock_fd >= 0)
		close(f->lock_fd);   /* drops the flock */
}

static int parse_args(struct fsck *f, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "verify-data", no_argument, NULL, 'v' },
		{ "repair", no_argument, NULL, 'r' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	bool ro = false;
	int c;

	while ((c = getopt_long(argc, argv, "nh", lo, NULL)) != -1) {
		switch (c) {
		case 'v': f->verify = true; break;
		case 'r': f->repair = true; break;
		case 'j': f->json = true; break;
		case 'n': ro = true; break;
		case 'h':
			fputs(fsck_usage, stdout);
			return 1;
		default:
			fputs(fsck_usage, stderr);
			return -1;
		}
	}
	if (ro && f->repair) {
		fprintf(stderr, "kvfs fsck: -n (read-only) and --repair exclude each other\n");
		return -1;
	}
	if (optind + 1 != argc) {
		fprintf(stderr, "kvfs fsck: %s\n%s", optind == argc ? "no STORE given" :
			"more than one STORE given", fsck_usage);
		return -1;
	}
	f->store = argv[optind];
	return 0;
}

int kvfs_cmd_fsck(int argc, char **argv)
{
	struct fsck f = { .lock_fd = -1, .shown_pct = -1 };
	int rc;

	rc = parse_args(&f, argc, argv);
	if (rc)
		return rc > 0 ? EXIT_OK : EXIT_USAGE;
	f.out = f.json ? stderr : stdout;
	f.tty = isatty(STDERR_FILENO);
	/* Our own lines say what is wrong; the library's warnings would repeat it. */
	kv_log_set_level(KV_LOG_ERR);
	rc = fsck_run(&f);
	if (rc != EXIT_OPERATIONAL)
		summary(&f, rc);
	fsck_free(&f);
	return rc;
}
