/*
 * libkvfs used from C the way an engine would, against a mounted model:
 * several threads share one client and one region, each reading every page
 * of a layer by name, by handle, synchronously and with submit/wait, and
 * checking the bytes against what read(2) of the page file returns. Also
 * the library's own refusals (handshake, control-area bounds, destroying a
 * region with a pending read) and that closing a client with a read still
 * queued returns. Then the batch write: pages stored with kvfs_write_pages
 * and kvfs_batch_submit_write read back bit-exact through read(2) and
 * kvfs_batch_read, EEXIST without KVFS_WRITE_REPLACE; they are removed
 * again at the end. Then what engines with a host pool need: pages
 * written from and read into a data region registered at an offset of a
 * file (the bytes land at the right file offsets, and nothing else of the
 * file changes), and completion by kvfs_batch_poll and the client's event
 * fd (-EAGAIN while the call runs, readable once it completes), with one
 * thread dispatching several batches by the event fd. Every wait has a
 * timeout, and an alarm ends the program: a bug fails, never hangs.
 *
 * usage: libkvfs_smoke MODEL_DIR LAYER_DIR   (run by tests/python/test_kvfs.py)
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libkvfs.h"

#define THREADS 4
#define ROUNDS 50
#define PAGES_MAX 64

struct page {
	char name[KVFS_NAME_MAX + 1];
	char *data;
	size_t len;
};

static struct page pages[PAGES_MAX];
static unsigned npages;
static size_t stride;            /* destination bytes per page, 4 KiB multiple */
static unsigned layer;
static struct kvfs_client *client;
static struct kvfs_region *region;

#define CHECK(cond, ...) do { \
	if (!(cond)) { \
		fprintf(stderr, "libkvfs_smoke: %s:%d: ", __FILE__, __LINE__); \
		fprintf(stderr, __VA_ARGS__); \
		fputc('\n', stderr); \
		exit(1); \
	} \
} while (0)

static void load_page(const char *dir, const char *name)
{
	struct page *p = &pages[npages++];
	char path[4096 + KVFS_NAME_MAX + 2];
	struct stat st;
	ssize_t n;
	size_t got = 0;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	snprintf(p->name, sizeof(p->name), "%s", name);
	fd = open(path, O_RDONLY);
	CHECK(fd >= 0 && fstat(fd, &st) == 0, "open %s: %s", path, strerror(errno));
	p->len = (size_t)st.st_size;
	p->data = malloc(p->len);
	CHECK(p->data, "out of memory");
	while (got < p->len && (n = read(fd, p->data + got, p->len - got)) > 0)
		got += (size_t)n;
	CHECK(got == p->len, "short read of %s", path);
	close(fd);
	if ((p->len + 4095) / 4096 * 4096 > stride)
		stride = (p->len + 4095) / 4096 * 4096;
}

static void load_layer(const char *model, const char *layer_dir)
{
	char dir[4096];
	struct dirent *de;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/%s", model, layer_dir);
	d = opendir(dir);
	CHECK(d, "opendir %s: %s", dir, strerror(errno));
	while ((de = readdir(d)) && npages < PAGES_MAX)
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			load_page(dir, de->d_name);
	closedir(d);
	CHECK(npages > 0, "no pages in %s", dir);
}

/* Thread k's slice of the region: npages destinations, then a control area. */
static uint64_t slice_off(unsigned k)
{
	size_t slice = npages * stride + kvfs_batch_ctl_bytes(npages);

	return (uint64_t)k * ((slice + 4095) / 4096 * 4096);
}

static void check_pages(struct kvfs_batch *b, uint64_t base, unsigned k,
			unsigned round)
{
	const char *mem = kvfs_region_base(region);
	uint64_t bytes;

	for (unsigned i = 0; i < npages; i++) {
		int st = kvfs_batch_status(b, i, &bytes);

		CHECK(st == 0 && bytes == pages[i].len,
		      "thread %u round %u page %s: status %d, %llu bytes", k, round,
		      pages[i].name, st, (unsigned long long)bytes);
		CHECK(!memcmp(mem + base + i * stride, pages[i].data, pages[i].len),
		      "thread %u round %u page %s: bytes differ from read(2)", k,
		      round, pages[i].name);
	}
}

static void one_round(struct kvfs_batch *b, uint64_t base, unsigned k,
		      unsigned round)
{
	struct kvfs_batch_result res;
	int rc;

	memset((char *)kvfs_region_base(region) + base, 0, npages * stride);
	kvfs_batch_reset(b);
	for (unsigned i = 0; i < npages; i++) {
		rc = kvfs_batch_add(b, layer, pages[i].name, base + i * stride, stride);
		CHECK(rc == (int)i, "add %s: %d", pages[i].name, rc);
	}
	switch (round % 3) {
	case 0:
		rc = kvfs_batch_read(b, &res);
		break;
	case 1:
		rc = kvfs_batch_submit(b);
		CHECK(rc == 0, "submit: %s", strerror(-rc));
		CHECK(kvfs_batch_submit(b) == -EBUSY, "second submit not refused");
		rc = kvfs_batch_wait(b, &res);
		break;
	default:
		/* Look up, then read the same descriptors by their handles. */
		rc = kvfs_batch_lookup(b, 0, &res);
		CHECK(rc == 0 && res.done == npages, "lookup: rc %d, hit %u of %u",
		      rc, res.done, npages);
		for (unsigned i = 0; i < npages; i++)
			CHECK(kvfs_batch_handle(b, i) != 0, "page %s has no handle",
			      pages[i].name);
		rc = kvfs_batch_read(b, &res);
		break;
	}
	CHECK(rc == 0, "thread %u round %u: read: %s", k, round, strerror(-rc));
	CHECK(res.done == npages && res.failed == 0,
	      "thread %u round %u: %u done, %u failed", k, round, res.done, res.failed);
	check_pages(b, base, k, round);
}

static void *reader(void *arg)
{
	unsigned k = (unsigned)(uintptr_t)arg;
	uint64_t base = slice_off(k);
	struct kvfs_batch *b;
	int rc;

	rc = kvfs_batch_new(region, base + npages * stride, npages, &b);
	CHECK(rc == 0, "batch_new: %s", strerror(-rc));
	for (unsigned round = 0; round < ROUNDS; round++)
		one_round(b, base, k, round);
	kvfs_batch_free(b);
	return NULL;
}

static void check_refusals(const char *model)
{
	char path[4096];
	struct kvfs_client *c;
	struct kvfs_batch *b;
	size_t size = kvfs_region_size(region);

	CHECK(kvfs_client_open("/", &c) == -ENOTTY, "/ accepted as a model");
	snprintf(path, sizeof(path), "%s/no-such-model", model);
	CHECK(kvfs_client_open(path, &c) == -ENOENT, "missing model not ENOENT");
	CHECK(kvfs_batch_new(region, 4, 1, &b) == -EINVAL, "misaligned ctl_off");
	CHECK(kvfs_batch_new(region, 0, 0, &b) == -EINVAL, "max_pages 0");
	CHECK(kvfs_batch_new(region, 0, KVFS_BATCH_MAX + 1, &b) == -EINVAL, "max_pages too big");
	CHECK(kvfs_batch_new(region, size - 8, 1, &b) == -ERANGE, "ctl area past the end");
	CHECK(kvfs_batch_new(region, size + 8, 1, &b) == -ERANGE, "ctl area outside");
}

/* A region with a submitted, uncollected read cannot go away under it. */
static void check_destroy_pending(void)
{
	struct kvfs_region *r;
	struct kvfs_batch *b;
	struct kvfs_batch_result res;
	int rc;

	rc = kvfs_region_create(client, stride + kvfs_batch_ctl_bytes(1), &r);
	CHECK(rc == 0, "region_create: %s", strerror(-rc));
	CHECK(kvfs_batch_new(r, stride, 1, &b) == 0, "batch_new");
	CHECK(kvfs_batch_add(b, layer, pages[0].name, 0, stride) == 0, "add");
	CHECK(kvfs_batch_wait(b, &res) == -EINVAL, "wait without submit");
	CHECK(kvfs_batch_submit(b) == 0, "submit");
	CHECK(kvfs_region_destroy(r) == -EBUSY, "destroyed with a pending read");
	CHECK(kvfs_batch_wait(b, &res) == 0 && res.done == 1, "wait");
	kvfs_batch_free(b);
	CHECK(kvfs_region_destroy(r) == 0, "destroy after wait");
}

/* Read a page file whole with read(2); returns its length. */
static size_t read_file(const char *path, char *buf, size_t cap)
{
	size_t got = 0;
	ssize_t n;
	int fd = open(path, O_RDONLY);

	CHECK(fd >= 0, "open %s: %s", path, strerror(errno));
	while (got < cap && (n = read(fd, buf + got, cap - got)) > 0)
		got += (size_t)n;
	close(fd);
	return got;
}

#define WPAGES 8
#define WSIZE 12345

static char want_w[WPAGES][WSIZE];   /* the pages written, by index */

/* The batch write, both ways, then each page back by both read paths. */
static void check_writes(const char *model, const char *layer_dir)
{
	struct kvfs_write_page wp[WPAGES];
	struct kvfs_batch_result res;
	struct kvfs_region *r;
	struct kvfs_batch *b;
	char names[WPAGES][32], path[4096 + 64];
	size_t wstride = (WSIZE + 4095) / 4096 * 4096;
	uint64_t ctl = WPAGES * wstride, dst = ctl + kvfs_batch_ctl_bytes(WPAGES);
	static char got[WSIZE + 1];
	char *mem;
	int rc;

	dst = (dst + 4095) / 4096 * 4096;
	rc = kvfs_region_create(client, dst + WPAGES * wstride, &r);
	CHECK(rc == 0, "region_create: %s", strerror(-rc));
	mem = kvfs_region_base(r);
	for (unsigned i = 0; i < WPAGES; i++) {
		for (unsigned j = 0; j < WSIZE; j++)
			want_w[i][j] = (char)(i * 31 + j * 7 + (j >> 8));
		memcpy(mem + i * wstride, want_w[i], WSIZE);
		snprintf(names[i], sizeof(names[i]), "smoke-w%u", i);
		wp[i] = (struct kvfs_write_page){ .layer = layer, .name = names[i],
						  .src_off = i * wstride, .len = WSIZE };
	}
	/* Half by the helper, durable; half by a batch, submitted. */
	rc = kvfs_write_pages(r, ctl, wp, WPAGES / 2, KVFS_WRITE_DURABLE | KVFS_WRITE_REPLACE, &res);
	CHECK(rc == 0 && res.done == WPAGES / 2, "write_pages: rc %d done %u", rc, res.done);
	for (unsigned i = 0; i < WPAGES / 2; i++)
		CHECK(wp[i].status == 0 && wp[i].handle, "page %s: status %d", names[i], wp[i].status);
	rc = kvfs_write_pages(r, ctl, wp, 1, 0, &res);
	CHECK(rc == 0 && wp[0].status == -EEXIST && res.failed == 1,
	      "rewrite without REPLACE: rc %d status %d", rc, wp[0].status);
	CHECK(kvfs_write_pages(r, ctl, wp, 1, 1u << 7, &res) == -EINVAL, "unknown flag accepted");
	CHECK(kvfs_batch_new(r, ctl, WPAGES, &b) == 0, "batch_new");
	for (unsigned i = WPAGES / 2; i < WPAGES; i++)
		CHECK(kvfs_batch_add(b, layer, names[i], i * wstride, WSIZE) >= 0, "add");
	CHECK(kvfs_batch_submit_write(b, KVFS_WRITE_REPLACE) == 0, "submit_write");
	rc = kvfs_batch_wait(b, &res);
	CHECK(rc == 0 && res.done == WPAGES / 2 && res.failed == 0,
	      "submitted write: rc %d done %u failed %u", rc, res.done, res.failed);
	memset(mem, 0, WPAGES * wstride);   /* once waited for, the daemon has its copy */
	/* Every page by read(2) and by the fast path. */
	kvfs_batch_reset(b);
	for (unsigned i = 0; i < WPAGES; i++) {
		snprintf(path, sizeof(path), "%s/%s/%s", model, layer_dir, names[i]);
		CHECK(read_file(path, got, sizeof(got)) == WSIZE && !memcmp(got, want_w[i], WSIZE),
		      "read(2) of %s differs from what was written", path);
		CHECK(kvfs_batch_add(b, layer, names[i], dst + i * wstride, wstride) >= 0, "add");
	}
	CHECK(kvfs_batch_read(b, &res) == 0 && res.done == WPAGES, "read back: %u", res.done);
	for (unsigned i = 0; i < WPAGES; i++)
		CHECK(!memcmp(mem + dst + i * wstride, want_w[i], WSIZE), "fast read of %s", names[i]);
	kvfs_batch_free(b);
	CHECK(kvfs_region_destroy(r) == 0, "destroy");
	for (unsigned i = 0; i < WPAGES; i++) {
		snprintf(path, sizeof(path), "%s/%s/%s", model, layer_dir, names[i]);
		CHECK(unlink(path) == 0, "unlink %s: %s", path, strerror(errno));
	}
}

#define POOL_SIZE (4u << 20)
#define POOL_OFF (1u << 20)     /* the data region: [1 MiB, 3 MiB) of the pool */
#define POOL_FILL 0x5A

/* An engine's host pool: a memfd whose every byte is allocated (the daemon
 * refuses memory with holes) and set to POOL_FILL. */
static void pool_fill(int fd)
{
	static char buf[POOL_SIZE];

	memset(buf, POOL_FILL, sizeof(buf));
	CHECK(pwrite(fd, buf, sizeof(buf), 0) == (ssize_t)sizeof(buf), "pool pwrite: %s",
	      strerror(errno));
}

/*
 * The pool after a read into it: page i at file offset dst[i], the rest of
 * the file as it was. Bytes past a page up to its next 4 KiB boundary may
 * be zeroed (kvfs_ioctl.h), so only those may be either.
 */
static void pool_check(int fd, const uint64_t *dst, unsigned n, const char *what)
{
	static char got[POOL_SIZE];
	unsigned order[WPAGES];
	uint64_t pos = 0;

	CHECK(n <= WPAGES, "pool_check of %u pages", n);
	CHECK(pread(fd, got, sizeof(got), 0) == (ssize_t)sizeof(got), "pool pread");
	/* By file offset, so the bytes between pages are walked once. */
	for (unsigned i = 0; i < n; i++) {
		unsigned j = i;

		for (; j > 0 && dst[order[j - 1]] > dst[i]; j--)
			order[j] = order[j - 1];
		order[j] = i;
	}
	for (unsigned k = 0; k < n; k++) {
		unsigned i = order[k];
		uint64_t end = dst[i] + (WSIZE + 4095) / 4096 * 4096;

		CHECK(!memcmp(got + dst[i], want_w[i], WSIZE),
		      "%s: page %u not at file offset %llu", what, i, (unsigned long long)dst[i]);
		for (; pos < dst[i]; pos++)
			CHECK(got[pos] == POOL_FILL, "%s: file byte %llu changed", what,
			      (unsigned long long)pos);
		for (pos = dst[i] + WSIZE; pos < end; pos++)
			CHECK(got[pos] == POOL_FILL || got[pos] == 0, "%s: tail byte %llu",
			      what, (unsigned long long)pos);
	}
	for (; pos < sizeof(got); pos++)
		CHECK(got[pos] == POOL_FILL, "%s: file byte %llu changed", what,
		      (unsigned long long)pos);
}

/* The refusals around data regions and regions at an offset. */
static void check_data_region_refusals(const char *model, int pool,
				       struct kvfs_batch *b, struct kvfs_region *d)
{
	struct kvfs_client *c2;
	struct kvfs_region *r2;

	CHECK(kvfs_region_register_fd_at(client, pool, 100, 4096, &r2) == -EINVAL,
	      "unaligned offset accepted");
	CHECK(kvfs_region_register_fd_at(client, pool, POOL_SIZE, 0, &r2) == -ERANGE,
	      "offset at the end accepted");
	CHECK(kvfs_region_register_fd_at(client, pool, 3u << 20, 2u << 20, &r2) == -ERANGE,
	      "range past the end accepted");
	CHECK(kvfs_client_open(model, &c2) == 0, "second client");
	CHECK(kvfs_region_create(c2, 1 << 20, &r2) == 0, "region of the second client");
	CHECK(kvfs_batch_set_data_region(b, r2) == -EXDEV, "another client's region accepted");
	CHECK(kvfs_batch_data_region(b) == d, "a refused data region replaced the old one");
	kvfs_client_close(c2);
	CHECK(kvfs_region_destroy(d) == -EBUSY, "data region destroyed under its batch");
}

/* Pages to and from a host pool registered at an offset, and two halves of
 * one pool registered by "two ranks" of one process. */
static void check_data_region(const char *model, const char *layer_dir)
{
	struct kvfs_batch_result res;
	struct kvfs_region *ctl, *d, *half[2];
	struct kvfs_batch *b;
	char names[WPAGES][32], path[4096 + 64];
	uint64_t src[WPAGES], dst[WPAGES], fdst[WPAGES];
	size_t wstride = (WSIZE + 4095) / 4096 * 4096;
	char *mem;
	int pool, rc;

	pool = memfd_create("kvfs-smoke-pool", MFD_CLOEXEC);
	CHECK(pool >= 0, "memfd_create: %s", strerror(errno));
	pool_fill(pool);
	rc = kvfs_region_register_fd_at(client, pool, POOL_OFF, 2u << 20, &d);
	CHECK(rc == 0, "register_fd_at: %s", strerror(-rc));
	CHECK(kvfs_region_offset(d) == POOL_OFF && kvfs_region_size(d) == 2u << 20,
	      "region at offset: offset %llu size %zu",
	      (unsigned long long)kvfs_region_offset(d), kvfs_region_size(d));
	mem = kvfs_region_base(d);
	/* Only the control area lives here: too small for any page, so a call
	 * that lost the data region fails (ERANGE) instead of passing. */
	rc = kvfs_region_create(client, kvfs_batch_ctl_bytes(WPAGES), &ctl);
	CHECK(rc == 0, "region_create: %s", strerror(-rc));
	CHECK(kvfs_batch_new(ctl, 0, WPAGES, &b) == 0, "batch_new");
	CHECK(kvfs_batch_set_data_region(b, d) == 0 && kvfs_batch_data_region(b) == d,
	      "set_data_region");
	check_data_region_refusals(model, pool, b, d);

	/* Write: the sources are pool bytes, placed through the file. */
	for (unsigned i = 0; i < WPAGES; i++) {
		src[i] = 8192 + i * wstride;
		CHECK(pwrite(pool, want_w[i], WSIZE, (off_t)(POOL_OFF + src[i])) == WSIZE, "pwrite");
		CHECK(!memcmp(mem + src[i], want_w[i], WSIZE),
		      "region offset %llu is not file offset %llu",
		      (unsigned long long)src[i], (unsigned long long)(POOL_OFF + src[i]));
		snprintf(names[i], sizeof(names[i]), "smoke-dr%u", i);
		CHECK(kvfs_batch_add(b, layer, names[i], src[i], WSIZE) == (int)i, "add");
	}
	rc = kvfs_batch_write(b, KVFS_WRITE_REPLACE, &res);
	CHECK(rc == 0 && res.done == WPAGES && res.failed == 0,
	      "write from a data region: rc %d done %u failed %u (status 0: %d)", rc,
	      res.done, res.failed, kvfs_batch_status(b, 0, NULL));
	for (unsigned i = 0; i < WPAGES; i++) {
		static char got[WSIZE + 1];

		snprintf(path, sizeof(path), "%s/%s/%s", model, layer_dir, names[i]);
		CHECK(read_file(path, got, sizeof(got)) == WSIZE && !memcmp(got, want_w[i], WSIZE),
		      "%s differs from its source in the data region", path);
	}

	/* Read, synchronously, then submitted: into the pool, nowhere else. */
	for (int round = 0; round < 2; round++) {
		pool_fill(pool);
		kvfs_batch_reset(b);
		for (unsigned i = 0; i < WPAGES; i++) {
			dst[i] = (1u << 20) - 3 * 4096 + (uint64_t)(WPAGES - 1 - i) * wstride;
			fdst[i] = POOL_OFF + dst[i];
			CHECK(kvfs_batch_add(b, layer, names[i], dst[i], wstride) == (int)i, "add");
		}
		if (round == 0) {
			rc = kvfs_batch_read(b, &res);
		} else {
			CHECK(kvfs_batch_submit(b) == 0, "submit");
			CHECK(kvfs_batch_set_data_region(b, NULL) == -EBUSY,
			      "data region changed while submitted");
			rc = kvfs_batch_wait(b, &res);
		}
		CHECK(rc == 0 && res.done == WPAGES, "read into a data region (round %d): rc %d done %u",
		      round, rc, res.done);
		pool_check(pool, fdst, WPAGES, round ? "submitted read" : "read");
	}

	/* Two ranks' halves of one pool: each registers its own part. */
	pool_fill(pool);
	rc = kvfs_region_register_fd_at(client, pool, 0, POOL_SIZE / 2, &half[0]);
	CHECK(rc == 0, "first half: %s", strerror(-rc));
	rc = kvfs_region_register_fd_at(client, pool, POOL_SIZE / 2, 0, &half[1]);
	CHECK(rc == 0 && kvfs_region_size(half[1]) == POOL_SIZE / 2, "second half: %s",
	      strerror(-rc));
	for (unsigned h = 0; h < 2; h++) {
		kvfs_batch_reset(b);
		CHECK(kvfs_batch_set_data_region(b, half[h]) == 0, "set_data_region");
		CHECK(kvfs_batch_add(b, layer, names[h], 4096, wstride) == 0, "add");
		rc = kvfs_batch_read(b, &res);
		CHECK(rc == 0 && res.done == 1, "read into half %u: rc %d done %u", h, rc, res.done);
	}
	fdst[0] = 4096;
	fdst[1] = POOL_SIZE / 2 + 4096;
	pool_check(pool, fdst, 2, "halves");

	CHECK(kvfs_batch_set_data_region(b, NULL) == 0, "clear the data region");
	kvfs_batch_free(b);
	CHECK(kvfs_region_destroy(d) == 0 && kvfs_region_destroy(half[0]) == 0 &&
	      kvfs_region_destroy(half[1]) == 0 && kvfs_region_destroy(ctl) == 0, "destroy");
	close(pool);
	for (unsigned i = 0; i < WPAGES; i++) {
		snprintf(path, sizeof(path), "%s/%s/%s", model, layer_dir, names[i]);
		CHECK(unlink(path) == 0, "unlink %s: %s", path, strerror(errno));
	}
}

#define POLL_PAGES 1024
#define POLL_TIMEOUT_MS 10000

static bool event_readable(int timeout_ms)
{
	struct pollfd pfd = { .fd = kvfs_client_event_fd(client), .events = POLLIN };
	int n = poll(&pfd, 1, timeout_ms);

	CHECK(n >= 0, "poll: %s", strerror(errno));
	return n == 1 && (pfd.revents & POLLIN);
}

/* Room for one batch of up to POLL_PAGES: pages, then its control area. */
static uint64_t poll_slot(void)
{
	return POLL_PAGES * stride + (kvfs_batch_ctl_bytes(POLL_PAGES) + 4095) / 4096 * 4096;
}

/* Batch k of a region: n (<= POLL_PAGES) pages of the layer, cycling. */
static void fill_batch(struct kvfs_region *r, unsigned k, unsigned n, struct kvfs_batch **b)
{
	uint64_t base = k * poll_slot();

	CHECK(kvfs_batch_new(r, base + n * stride, n, b) == 0, "batch_new");
	for (unsigned i = 0; i < n; i++)
		CHECK(kvfs_batch_add(*b, layer, pages[i % npages].name, base + i * stride,
				     stride) == (int)i, "add");
}

static void check_batch_bytes(struct kvfs_region *r, struct kvfs_batch *b, unsigned n)
{
	const char *mem = kvfs_region_base(r);

	for (unsigned i = 0; i < n; i += 1 + n / 64) {
		const struct kvfs_page_desc *dd = kvfs_batch_desc(b, i);

		CHECK(dd->status == 0 && !memcmp(mem + dd->dst_off, pages[i % npages].data,
						 pages[i % npages].len),
		      "page %u of a polled batch: status %d or bytes differ", i, dd->status);
	}
}

static int waiter_rc;

static void *waiter(void *arg)
{
	struct kvfs_batch_result res;

	waiter_rc = kvfs_batch_wait(arg, &res);
	return NULL;
}

/* kvfs_batch_poll and the event fd: in flight, done, collected. */
static void check_poll(void)
{
	struct kvfs_batch_result res;
	struct kvfs_region *r;
	struct kvfs_batch *b[4];
	unsigned left, loops;
	int rc;

	rc = kvfs_region_create(client, 4 * poll_slot(), &r);
	CHECK(rc == 0, "region_create: %s", strerror(-rc));
	fill_batch(r, 0, POLL_PAGES, &b[0]);
	CHECK(kvfs_batch_poll(b[0], &res) == -EINVAL, "poll of a batch never submitted");
	CHECK(kvfs_client_event_drain(client) >= 0, "drain");
	CHECK(!event_readable(0), "event fd readable with nothing in flight");

	/* A 1024-page read takes milliseconds; these checks take microseconds. */
	CHECK(kvfs_batch_submit(b[0]) == 0, "submit");
	CHECK(!event_readable(0), "event fd readable right after submitting");
	rc = kvfs_batch_poll(b[0], &res);
	CHECK(rc == -EAGAIN, "poll right after submitting %u pages: %d, not -EAGAIN",
	      POLL_PAGES, rc);
	CHECK(kvfs_batch_set_dst(b[0], 0, 0, stride) == -EBUSY, "changed while in flight");
	CHECK(event_readable(POLL_TIMEOUT_MS), "event fd not readable %d ms after submitting",
	      POLL_TIMEOUT_MS);
	rc = kvfs_batch_poll(b[0], &res);
	CHECK(rc == 0 && res.done == POLL_PAGES && res.failed == 0,
	      "poll after the event: rc %d done %u failed %u", rc, res.done, res.failed);
	check_batch_bytes(r, b[0], POLL_PAGES);
	CHECK(kvfs_batch_poll(b[0], &res) == -EINVAL, "collected twice");
	CHECK(kvfs_client_event_drain(client) == 1, "one completion, one count");
	CHECK(!event_readable(0), "event fd still readable after draining");

	/* One thread dispatches four batches by the event fd: drain, then poll
	 * each, so no completion is missed whatever order they finish in. */
	for (unsigned k = 1; k < 4; k++)
		fill_batch(r, k, npages * (k + 1), &b[k]);
	for (unsigned k = 0; k < 4; k++)
		CHECK(kvfs_batch_submit(b[k]) == 0, "submit %u", k);
	for (left = 0xF, loops = 0; left && loops < 1000; loops++) {
		CHECK(event_readable(POLL_TIMEOUT_MS), "no event within %d ms, batches left %#x",
		      POLL_TIMEOUT_MS, left);
		CHECK(kvfs_client_event_drain(client) >= 0, "drain");
		for (unsigned k = 0; k < 4; k++) {
			if (!(left & (1u << k)))
				continue;
			rc = kvfs_batch_poll(b[k], &res);
			if (rc == -EAGAIN)
				continue;
			CHECK(rc == 0 && res.failed == 0, "batch %u: rc %d failed %u", k, rc, res.failed);
			check_batch_bytes(r, b[k], kvfs_batch_count(b[k]));
			left &= ~(1u << k);
		}
	}
	CHECK(!left, "batches %#x never completed", left);

	/* Wait on one thread, poll on another: one collects, neither hangs. */
	for (unsigned round = 0; round < 20; round++) {
		pthread_t t;

		CHECK(kvfs_batch_submit(b[1]) == 0, "submit");
		CHECK(pthread_create(&t, NULL, waiter, b[1]) == 0, "pthread_create");
		for (loops = 0; (rc = kvfs_batch_poll(b[1], &res)) == -EAGAIN && loops < 100000; loops++)
			usleep(100);
		pthread_join(t, NULL);
		CHECK((rc == 0 && waiter_rc == -EINVAL) || (rc == -EINVAL && waiter_rc == 0),
		      "round %u: poll %d, wait %d: not exactly one collector", round, rc, waiter_rc);
	}
	for (unsigned k = 0; k < 4; k++)
		kvfs_batch_free(b[k]);
	CHECK(kvfs_region_destroy(r) == 0, "destroy");
}

int main(int argc, char **argv)
{
	pthread_t t[THREADS];
	struct kvfs_batch *b;
	int rc;

	if (argc != 3) {
		fprintf(stderr, "usage: libkvfs_smoke MODEL_DIR LAYER_DIR\n");
		return 2;
	}
	alarm(100);   /* a hang (a lost wakeup, a deadlock) fails the test */
	load_layer(argv[1], argv[2]);
	layer = (unsigned)strtoul(argv[2], NULL, 10);
	rc = kvfs_client_open(argv[1], &client);
	CHECK(rc == 0, "client_open %s: %s", argv[1], strerror(-rc));
	rc = kvfs_region_create(client, slice_off(THREADS), &region);
	CHECK(rc == 0, "region_create: %s", strerror(-rc));
	check_refusals(argv[1]);
	check_destroy_pending();
	check_writes(argv[1], argv[2]);
	check_data_region(argv[1], argv[2]);
	check_poll();
	for (unsigned k = 0; k < THREADS; k++)
		CHECK(pthread_create(&t[k], NULL, reader, (void *)(uintptr_t)k) == 0,
		      "pthread_create");
	for (unsigned k = 0; k < THREADS; k++)
		pthread_join(t[k], NULL);

	/* Close with a read still queued: it runs to completion first. */
	CHECK(kvfs_batch_new(region, npages * stride, npages, &b) == 0, "batch_new");
	for (unsigned i = 0; i < npages; i++)
		kvfs_batch_add(b, layer, pages[i].name, i * stride, stride);
	CHECK(kvfs_batch_submit(b) == 0, "submit");
	kvfs_batch_free(b);   /* waits for it */
	CHECK(kvfs_batch_new(region, npages * stride, npages, &b) == 0, "batch_new");
	kvfs_batch_add(b, layer, pages[0].name, 0, stride);
	CHECK(kvfs_batch_submit(b) == 0, "submit");
	kvfs_client_close(client);   /* drains the queue */
	/* b went with its region: deliberately not freed. */
	printf("libkvfs_smoke: %u pages x %u threads x %u rounds ok\n", npages,
	       THREADS, ROUNDS);
	return 0;
}
