/*
 * `kvfs fsck` space, data and repair (see fsck.c): space allocated in
 * segment files that no extent covers (orphaned space; punched by repair),
 * with --verify-data every extent's XXH3-128 (with a status line on a
 * terminal), and --repair: one manifest transaction, then the punching
 * (docs/format.md rule 4, "free after forget").
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fsck.h"

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
int scan_orphans(struct fsck *f, bool punch)
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
		progress_add(f->pr, 1);
	}
	return err;
}

/* ---- data ---- */

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

int verify_data(struct fsck *f)
{
	uint64_t total = 0, done = 0, max = KV_ALIGN;
	uint8_t *buf;

	for (size_t i = 0; i < f->nloc; i++) {
		const struct ext *e = f->byloc[i];

		total += e->bad ? 0 : (uint64_t)e->r.length;
		if (ext_end(e) - (uint64_t)e->r.offset > max)
			max = ext_end(e) - (uint64_t)e->r.offset;
	}
	buf = malloc(max);
	if (!buf) {
		fprintf(stderr, "kvfs fsck: no memory for a %" PRIu64 "-byte read buffer\n", max);
		return -ENOMEM;
	}
	/* in bytes: extents of a store differ in size (pages of many models) */
	phase_start(f, "fsck: verifying data", total, PROGRESS_BYTES);
	/* In file order, so the disk reads sequentially. */
	for (size_t i = 0; i < f->nloc; i++) {
		if (f->byloc[i]->bad)
			continue;
		verify_extent(f, f->byloc[i], buf);
		done += (uint64_t)f->byloc[i]->r.length;
		progress_set(f->pr, done);
	}
	phase_end(f);
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
		if (p->lost)
			fsck_page_path(f, p);   /* now: the repair deletes its row */
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

int repair(struct fsck *f)
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
		fsck_say(f, "repair: deleted page %s (ino %" PRIu64 "): %s",
			 fsck_page_path(f, &f->pg[i]), f->pg[i].ino, f->pg[i].why);
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
