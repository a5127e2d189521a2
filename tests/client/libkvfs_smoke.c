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
 * again at the end.
 *
 * usage: libkvfs_smoke MODEL_DIR LAYER_DIR   (run by tests/python/test_kvfs.py)
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
	static char want[WPAGES][WSIZE], got[WSIZE + 1];
	char *mem;
	int rc;

	dst = (dst + 4095) / 4096 * 4096;
	rc = kvfs_region_create(client, dst + WPAGES * wstride, &r);
	CHECK(rc == 0, "region_create: %s", strerror(-rc));
	mem = kvfs_region_base(r);
	for (unsigned i = 0; i < WPAGES; i++) {
		for (unsigned j = 0; j < WSIZE; j++)
			want[i][j] = (char)(i * 31 + j * 7 + (j >> 8));
		memcpy(mem + i * wstride, want[i], WSIZE);
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
		CHECK(read_file(path, got, sizeof(got)) == WSIZE && !memcmp(got, want[i], WSIZE),
		      "read(2) of %s differs from what was written", path);
		CHECK(kvfs_batch_add(b, layer, names[i], dst + i * wstride, wstride) >= 0, "add");
	}
	CHECK(kvfs_batch_read(b, &res) == 0 && res.done == WPAGES, "read back: %u", res.done);
	for (unsigned i = 0; i < WPAGES; i++)
		CHECK(!memcmp(mem + dst + i * wstride, want[i], WSIZE), "fast read of %s", names[i]);
	kvfs_batch_free(b);
	CHECK(kvfs_region_destroy(r) == 0, "destroy");
	for (unsigned i = 0; i < WPAGES; i++) {
		snprintf(path, sizeof(path), "%s/%s/%s", model, layer_dir, names[i]);
		CHECK(unlink(path) == 0, "unlink %s: %s", path, strerror(errno));
	}
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
	load_layer(argv[1], argv[2]);
	layer = (unsigned)strtoul(argv[2], NULL, 10);
	rc = kvfs_client_open(argv[1], &client);
	CHECK(rc == 0, "client_open %s: %s", argv[1], strerror(-rc));
	rc = kvfs_region_create(client, slice_off(THREADS), &region);
	CHECK(rc == 0, "region_create: %s", strerror(-rc));
	check_refusals(argv[1]);
	check_destroy_pending();
	check_writes(argv[1], argv[2]);
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
