/*
 * `kvfs bench`: the four readers of a batch: the fast path through
 * libkvfs, open/read/close (the FUSE mount and plain files), and the raw
 * io_uring O_DIRECT baseline on the same extents.
 */
#include "bench.h"

/* ---- (a) fast path ---- */

int fast_setup(struct size_run *s)
{
	uint64_t ctl = kvfs_batch_ctl_bytes(s->batch);
	size_t size;
	int rc;

	s->dst0 = (ctl + BLOCK - 1) / BLOCK * BLOCK;
	size = s->dst0 + (size_t)s->batch * s->stride;
	rc = kvfs_region_create(s->b->client, size, &s->region);
	if (rc < 0) {
		bench_err("kvfs_region_create(%zu bytes): %s", size, strerror(-rc));
		return rc;
	}
	s->rbase = kvfs_region_base(s->region);
	/* Fresh page faults are slow on a VM that hands free memory back to
	 * the host: touch every byte now, not inside the timed reads. */
	memset(s->rbase + s->dst0, 0, (size_t)s->batch * s->stride);
	rc = kvfs_batch_new(s->region, 0, s->batch, &s->kb);
	if (rc < 0)
		bench_err("kvfs_batch_new(%u pages): %s", s->batch, strerror(-rc));
	return rc;
}

static int fast_status(struct size_run *s, const unsigned long *pg, unsigned i)
{
	const struct kvfs_page_desc *d = kvfs_batch_desc(s->kb, i);
	uint64_t bytes = 0;
	char name[64];
	int st = kvfs_batch_status(s->kb, i, &bytes);

	if (st == 0 && bytes == s->size) {
		s->ram += !!(d->out_flags & KVFS_DESC_RAM);
		s->bounced += !!(d->out_flags & KVFS_DESC_BOUNCED);
		return check_page(s, "fast", s->rbase + s->dst0 + i * s->stride, pg[i]);
	}
	page_name(s, pg[i], name, sizeof(name));
	if (st != 0)
		bench_err("fast: layer %u page %s: status %d (%s)", page_layer(s, pg[i]),
			  name, st, strerror(-st));
	else
		bench_err("fast: layer %u page %s: %llu bytes, want %llu", page_layer(s, pg[i]),
			  name, (unsigned long long)bytes, (unsigned long long)s->size);
	return st ? st : -EILSEQ;
}

int fast_batch(struct size_run *s, const unsigned long *pg, unsigned n)
{
	struct kvfs_batch_result res;
	char name[64];
	unsigned i;
	int rc;

	kvfs_batch_reset(s->kb);
	for (i = 0; i < n; i++) {
		page_name(s, pg[i], name, sizeof(name));
		rc = kvfs_batch_add(s->kb, page_layer(s, pg[i]), name,
				    s->dst0 + i * s->stride, s->stride);
		if (rc < 0) {
			bench_err("kvfs_batch_add(%s): %s", name, strerror(-rc));
			return rc;
		}
	}
	rc = kvfs_batch_read(s->kb, &res);
	if (rc < 0) {
		bench_err("fast: kvfs_batch_read of %u pages: %s", n, strerror(-rc));
		return rc;
	}
	for (i = 0; i < n; i++) {
		rc = fast_status(s, pg, i);
		if (rc < 0)
			return rc;
	}
	if (res.done != n || res.failed || res.bytes != n * s->size) {
		bench_err("fast: batch of %u pages reports done %u failed %u bytes %llu",
			  n, res.done, res.failed, (unsigned long long)res.bytes);
		return -EPROTO;
	}
	return 0;
}

void fast_teardown(struct size_run *s)
{
	if (s->kb)
		kvfs_batch_free(s->kb);
	if (s->region)
		kvfs_region_destroy(s->region);
	s->kb = NULL;
	s->region = NULL;
}

/* ---- (b) FUSE and (d) one file per page: open, read, close ---- */

int file_batch(struct size_run *s, const char *method, const char *root,
		      const unsigned long *pg, unsigned n)
{
	char path[PATH_MAX + 96], *dst;
	unsigned i;
	int fd, rc;

	for (i = 0; i < n; i++) {
		page_path(s, root, pg[i], path, sizeof(path));
		dst = s->buf + i * s->stride;
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			bench_err("%s: open %s: %s", method, path, strerror(errno));
			return -errno;
		}
		rc = read_full(fd, dst, s->size);
		close(fd);
		if (rc < 0) {
			bench_err("%s: read %s: %s", method, path, strerror(-rc));
			return rc;
		}
		rc = check_page(s, method, dst, pg[i]);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* ---- (c) raw io_uring O_DIRECT on the extents ---- */

static int raw_segment(struct size_run *s, const char *page, unsigned stripe,
		       unsigned segno, unsigned *idx)
{
	struct raw_ctx *r = &s->raw;
	char seg[PATH_MAX];
	ssize_t n;
	unsigned k;
	void *p;

	for (k = 0; k < r->nsegs; k++)
		if (r->segs[k].stripe == stripe && r->segs[k].segno == segno) {
			*idx = k;
			return 0;
		}
	n = getxattr(page, "user.kvfs.segment", seg, sizeof(seg) - 1);
	if (n < 0) {
		bench_err("raw: getxattr %s user.kvfs.segment: %s", page, strerror(errno));
		return -errno;
	}
	seg[n] = '\0';
	p = realloc(r->segs, (k + 1) * sizeof(*r->segs));
	if (!p)
		return -ENOMEM;
	r->segs = p;
	p = realloc(r->fds, (k + 1) * sizeof(*r->fds));
	if (!p)
		return -ENOMEM;
	r->fds = p;
	r->fds[k] = open(seg, O_RDONLY | O_DIRECT | O_CLOEXEC);
	if (r->fds[k] < 0) {
		bench_err("raw: open %s: %s", seg, strerror(errno));
		return -errno;
	}
	r->segs[k] = (struct raw_seg){ stripe, segno };
	r->nsegs++;
	*idx = k;
	return 0;
}

/* Where page p lies: user.kvfs.extent, and user.kvfs.segment once per
 * segment (a getxattr is a FUSE round trip). */
static int raw_locate(struct size_run *s, unsigned long p)
{
	char path[PATH_MAX + 96], ext[256];
	unsigned long long off, len;
	unsigned stripe, segno;
	ssize_t n;

	page_path(s, s->b->model, p, path, sizeof(path));
	n = getxattr(path, "user.kvfs.extent", ext, sizeof(ext) - 1);
	if (n < 0) {
		bench_err("raw: getxattr %s user.kvfs.extent: %s", path, strerror(errno));
		return -errno;
	}
	ext[n] = '\0';
	if (sscanf(ext, "stripe=%u segment=%u offset=%llu length=%llu",
		   &stripe, &segno, &off, &len) != 4 || len != s->size || off % BLOCK) {
		bench_err("raw: %s: unexpected extent \"%s\"", path, ext);
		return -EINVAL;
	}
	s->raw.pages[p].off = off;
	return raw_segment(s, path, stripe, segno, &s->raw.pages[p].seg);
}

/* A ring as deep as the daemon's, with the buffer and the segment files
 * registered: the cheapest way to issue these reads, so the baseline is
 * what the device gives, not what a slower submitter gets. */
int raw_setup(struct size_run *s)
{
	struct raw_ctx *r = &s->raw;
	unsigned long p;
	int rc = 0;

	r->pages = calloc(s->pages, sizeof(*r->pages));
	r->got = calloc(s->batch, sizeof(*r->got));
	if (!r->pages || !r->got) {
		bench_err("raw: out of memory for %lu extents", s->pages);
		return -ENOMEM;
	}
	for (p = 0; rc == 0 && p < s->pages; p++)
		rc = raw_locate(s, p);
	return rc < 0 ? rc : raw_ring_setup(s);
}

/* The ring over s->buf, once the extents are known (raw_setup; the conc
 * case's streams each have their own ring over extents found once). */
int raw_ring_setup(struct size_run *s)
{
	struct raw_ctx *r = &s->raw;
	struct iovec iov = { s->buf, s->buflen };
	int rc;

	rc = io_uring_queue_init(s->b->o->qd, &r->ring, 0);
	if (rc < 0) {
		bench_err("raw: io_uring_queue_init(%u): %s", s->b->o->qd, strerror(-rc));
		return rc;
	}
	r->ring_ok = true;
	r->fixed_files = io_uring_register_files(&r->ring, r->fds, r->nsegs) == 0;
	r->fixed_buf = s->buflen <= (1u << 30) &&
		       io_uring_register_buffers(&r->ring, &iov, 1) == 0;
	return 0;
}

static int raw_queue(struct size_run *s, unsigned i, unsigned long p)
{
	struct raw_ctx *r = &s->raw;
	struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
	const struct raw_page *rp = &r->pages[p];
	char *dst = s->buf + i * s->stride + r->got[i];
	unsigned len = (unsigned)(s->stride - r->got[i]);
	uint64_t off = rp->off + r->got[i];
	int fd = r->fixed_files ? (int)rp->seg : r->fds[rp->seg];

	if (!sqe)
		return -EBUSY;   /* never: at most qd reads are in flight */
	if (r->fixed_buf)
		io_uring_prep_read_fixed(sqe, fd, dst, len, off, 0);
	else
		io_uring_prep_read(sqe, fd, dst, len, off);
	if (r->fixed_files)
		sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data64(sqe, i);
	return 0;
}

/* One completion: 1 if slot i is complete, 0 if requeued, or -errno. */
static int raw_complete(struct size_run *s, const unsigned long *pg, unsigned i, int res)
{
	struct raw_ctx *r = &s->raw;

	if (res == -EAGAIN || res == -EINTR)
		return raw_queue(s, i, pg[i]);
	if (res <= 0)
		return res < 0 ? res : -ENODATA;
	r->got[i] += (unsigned)res;
	if (r->got[i] >= s->stride)
		return 1;
	return raw_queue(s, i, pg[i]);   /* short read: the rest */
}

int raw_batch(struct size_run *s, const unsigned long *pg, unsigned n)
{
	struct raw_ctx *r = &s->raw;
	struct io_uring_cqe *cqe;
	unsigned next = 0, inflight = 0, i;
	int rc = 0, c;

	while (inflight > 0 || (rc == 0 && next < n)) {
		while (rc == 0 && inflight < s->b->o->qd && next < n) {
			r->got[next] = 0;
			rc = raw_queue(s, next, pg[next]);
			next++;
			inflight++;
		}
		c = io_uring_submit_and_wait(&r->ring, 1);
		if (c < 0 && c != -EINTR) {
			bench_err("raw: io_uring_submit_and_wait: %s", strerror(-c));
			return c;   /* the ring is unusable; nothing more completes */
		}
		while (io_uring_peek_cqe(&r->ring, &cqe) == 0) {
			i = (unsigned)io_uring_cqe_get_data64(cqe);
			c = raw_complete(s, pg, i, cqe->res);
			io_uring_cqe_seen(&r->ring, cqe);
			if (c < 0 && rc == 0) {
				bench_err("raw: read of page %lu: %s", pg[i], strerror(-c));
				rc = c;
			}
			if (c != 0)   /* done or failed: the slot is free */
				inflight--;
		}
	}
	for (i = 0; rc == 0 && i < n; i++)
		rc = check_page(s, "raw", s->buf + i * s->stride, pg[i]);
	return rc;
}

void raw_teardown(struct size_run *s)
{
	struct raw_ctx *r = &s->raw;

	if (r->ring_ok)
		io_uring_queue_exit(&r->ring);
	while (r->nsegs)
		close(r->fds[--r->nsegs]);
	free(r->fds);
	free(r->segs);
	free(r->pages);
	free(r->got);
	memset(r, 0, sizeof(*r));
}

