/*
 * `kvfs bench-files DIR`: the page-file workload an engine without the
 * batch ioctl would run. Writes N pages as files DIR/bench/<layer>/<key>
 * (open, write, close), makes them durable (fsync of each layer directory:
 * on kvfs that waits for the group commit, on a plain filesystem it is
 * preceded by syncfs), drops the page cache, and reads every page back
 * (open, read, close) in a shuffled order, checking each page's stamp.
 * Run it on a kvfs mount and on a plain directory of the same disk to
 * compare kvfs with one-file-per-page storage.
 */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <liburing.h>

#include "engine.h"
#include "tools.h"

struct bench {
	const char *dir;
	unsigned long pages;
	uint64_t size;
	unsigned layers;
	char *buf;
};

/* Where a page lives inside the store, for the raw-device baseline. */
struct raw_page {
	int fd;             /* segment file, O_DIRECT */
	uint64_t off, len;  /* extent offset and footprint */
};

#define FUSE_SUPER_MAGIC 0x65735546
#define RAW_SEGS_MAX 4096

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void page_path(const struct bench *b, unsigned long i, char *out, size_t len)
{
	snprintf(out, len, "%s/bench/%02lu/%016lx", b->dir, i % b->layers,
		 (unsigned long)(i * 0x9E3779B97F4A7C15ull));
}

static int make_dirs(const struct bench *b)
{
	char path[4096];
	unsigned l;

	snprintf(path, sizeof(path), "%s/bench", b->dir);
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		return -errno;
	for (l = 0; l < b->layers; l++) {
		snprintf(path, sizeof(path), "%s/bench/%02u", b->dir, l);
		if (mkdir(path, 0755) < 0 && errno != EEXIST)
			return -errno;
	}
	return 0;
}

static int write_page(const struct bench *b, unsigned long i)
{
	char path[4096];
	ssize_t n;
	int fd;

	page_path(b, i, path, sizeof(path));
	memcpy(b->buf, &i, sizeof(i));   /* stamp: which page this is */
	fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0644);
	if (fd < 0)
		return -errno;
	n = write(fd, b->buf, b->size);
	if (close(fd) < 0 || n != (ssize_t)b->size)
		return n < 0 ? -errno : -EIO;
	return 0;
}

static int sync_all(const struct bench *b)
{
	char path[4096];
	unsigned l;
	int fd;

	for (l = 0; l < b->layers; l++) {
		snprintf(path, sizeof(path), "%s/bench/%02u", b->dir, l);
		fd = open(path, O_RDONLY | O_DIRECTORY);
		if (fd < 0)
			return -errno;
		if (l == 0)
			syncfs(fd);
		if (fsync(fd) < 0) {
			close(fd);
			return -errno;
		}
		close(fd);
	}
	return 0;
}

static int read_page(const struct bench *b, unsigned long i, char *buf)
{
	char path[4096];
	unsigned long stamp;
	ssize_t n;
	int fd;

	page_path(b, i, path, sizeof(path));
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, b->size);
	close(fd);
	if (n != (ssize_t)b->size)
		return n < 0 ? -errno : -EIO;
	memcpy(&stamp, buf, sizeof(stamp));
	return stamp == i ? 0 : -EILSEQ;
}

/* Fill raw[i] from the page's user.kvfs.extent / user.kvfs.segment xattrs. */
static int raw_locate(const struct bench *b, unsigned long i, struct raw_page *r,
		      char (*segs)[4096], int *fds, unsigned *nsegs)
{
	char path[4096], ext[256], seg[4096];
	unsigned long long off, len;
	unsigned stripe, segno, k;
	ssize_t n;

	page_path(b, i, path, sizeof(path));
	n = getxattr(path, "user.kvfs.extent", ext, sizeof(ext) - 1);
	if (n < 0)
		return -errno;
	ext[n] = '\0';
	if (sscanf(ext, "stripe=%u segment=%u offset=%llu length=%llu",
		   &stripe, &segno, &off, &len) != 4)
		return -EINVAL;
	n = getxattr(path, "user.kvfs.segment", seg, sizeof(seg) - 1);
	if (n < 0)
		return -errno;
	seg[n] = '\0';
	for (k = 0; k < *nsegs && strcmp(segs[k], seg); k++)
		;
	if (k == *nsegs) {
		if (k == RAW_SEGS_MAX)
			return -E2BIG;
		fds[k] = open(seg, O_RDONLY | O_DIRECT | O_CLOEXEC);
		if (fds[k] < 0)
			return -errno;
		strcpy(segs[k], seg);
		(*nsegs)++;
	}
	r->fd = fds[k];
	r->off = off;
	r->len = (len + 4095) & ~4095ull;
	return 0;
}

/* Read every page's extent straight from the segment files with io_uring,
 * O_DIRECT, qd reads in flight, in the given order: what the device does
 * for the same bytes (the fio-style baseline). Slot k of the buffer area
 * belongs to the read whose user_data is k. */
static int raw_read(const struct raw_page *raw, const unsigned long *order,
		    unsigned long n, unsigned qd, double *secs)
{
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	unsigned long next = 0, done = 0;
	uint64_t maxlen = 4096, slot;
	char *bufs;
	double t0;
	int rc;

	for (next = 0; next < n; next++)
		if (raw[next].len > maxlen)
			maxlen = raw[next].len;
	next = 0;
	if (posix_memalign((void **)&bufs, 4096, maxlen * qd))
		return -ENOMEM;
	memset(bufs, 0, maxlen * qd);   /* fault the buffers in before timing */
	rc = io_uring_queue_init(qd, &ring, 0);
	if (rc < 0) {
		free(bufs);
		return rc;
	}
	t0 = now_s();
	for (slot = 0; slot < qd && next < n; slot++, next++) {
		const struct raw_page *r = &raw[order[next]];
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

		io_uring_prep_read(sqe, r->fd, bufs + slot * maxlen, (unsigned)r->len, r->off);
		io_uring_sqe_set_data64(sqe, slot);
	}
	while (rc >= 0 && done < n) {
		rc = io_uring_submit_and_wait(&ring, 1);
		if (rc < 0)
			break;
		rc = io_uring_wait_cqe(&ring, &cqe);
		if (rc < 0)
			break;
		slot = io_uring_cqe_get_data64(cqe);
		if (cqe->res < 0)
			rc = cqe->res;
		io_uring_cqe_seen(&ring, cqe);
		done++;
		if (rc >= 0 && next < n) {   /* refill the slot just freed */
			const struct raw_page *r = &raw[order[next++]];
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

			io_uring_prep_read(sqe, r->fd, bufs + slot * maxlen, (unsigned)r->len, r->off);
			io_uring_sqe_set_data64(sqe, slot);
		}
	}
	*secs = now_s() - t0;
	io_uring_queue_exit(&ring);
	free(bufs);
	return rc < 0 ? rc : 0;
}

static void drop_caches(void)
{
	int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);

	sync();
	if (fd < 0 || write(fd, "3\n", 2) != 2)
		fprintf(stderr, "kvfs bench-files: cannot drop caches (need root); read is warm\n");
	if (fd >= 0)
		close(fd);
}

static void shuffle(unsigned long *v, unsigned long n)
{
	unsigned long i, j, t;

	for (i = n - 1; i > 0; i--) {
		j = (unsigned long)rand() % (i + 1);
		t = v[i]; v[i] = v[j]; v[j] = t;
	}
}

static void report(const char *phase, const struct bench *b, double secs)
{
	double bytes = (double)b->pages * (double)b->size;

	printf("%-14s %8lu pages  %7.3f s  %8.3f GB/s  %10.0f pages/s\n", phase,
	       b->pages, secs, bytes / secs / 1e9, (double)b->pages / secs);
}

/* Pages on a kvfs mount say where they live; elsewhere there is no extent. */
static bool on_kvfs(const struct bench *b)
{
	char path[4096];
	struct statfs sf;

	page_path(b, 0, path, sizeof(path));
	return statfs(b->dir, &sf) == 0 && (unsigned long)sf.f_type == FUSE_SUPER_MAGIC &&
	       getxattr(path, "user.kvfs.extent", NULL, 0) > 0;
}

/* On a kvfs mount: read the same extents raw, at queue depth 1 (what one
 * reader of page files gets at best) and 32 (the device ceiling), in the
 * same order, and print kvfs's read rate as a share of each. */
static int raw_baseline(const struct bench *b, const unsigned long *order,
			double kvfs_secs)
{
	static char segs[RAW_SEGS_MAX][4096];
	static int fds[RAW_SEGS_MAX];
	static const unsigned qds[] = { 1, 32 };
	struct raw_page *raw = calloc(b->pages, sizeof(*raw));
	unsigned nsegs = 0, q;
	unsigned long i;
	double secs;
	char label[32];
	int rc = raw ? 0 : -ENOMEM;

	for (i = 0; rc == 0 && i < b->pages; i++)
		rc = raw_locate(b, i, &raw[i], segs, fds, &nsegs);
	for (q = 0; rc == 0 && q < sizeof(qds) / sizeof(qds[0]); q++) {
		drop_caches();
		rc = raw_read(raw, order, b->pages, qds[q], &secs);
		if (rc < 0)
			break;
		snprintf(label, sizeof(label), "raw qd%u", qds[q]);
		report(label, b, secs);
		printf("  kvfs read / raw qd%-2u = %.2f\n", qds[q], secs / kvfs_secs);
	}
	while (nsegs)
		close(fds[--nsegs]);
	free(raw);
	if (rc < 0)
		fprintf(stderr, "kvfs bench-files: raw baseline: %s\n", strerror(-rc));
	return rc;
}

static int run(struct bench *b)
{
	unsigned long i, *order = malloc(b->pages * sizeof(*order));
	char *rbuf = malloc(b->size);
	double t0, t1, t2;
	int rc = make_dirs(b);

	if (!order || !rbuf)
		rc = -ENOMEM;
	for (i = 0; rc == 0 && i < b->pages; i++)
		order[i] = i;
	t0 = now_s();
	for (i = 0; rc == 0 && i < b->pages; i++)
		rc = write_page(b, i);
	t1 = now_s();
	if (rc == 0)
		rc = sync_all(b);
	t2 = now_s();
	if (rc == 0) {
		report("write+close", b, t1 - t0);
		report("write+durable", b, t2 - t0);
		drop_caches();
		shuffle(order, b->pages);
		t0 = now_s();
		for (i = 0; rc == 0 && i < b->pages; i++)
			rc = read_page(b, order[i], rbuf);
		t1 = now_s() - t0;
		if (rc == 0)
			report("read (cold)", b, t1);
		if (rc == 0 && on_kvfs(b))
			rc = raw_baseline(b, order, t1);
	}
	if (rc < 0)
		fprintf(stderr, "kvfs bench-files: page %lu: %s\n", i, strerror(-rc));
	free(order);
	free(rbuf);
	return rc < 0 ? 1 : 0;
}

static const char bench_usage[] =
	"usage: kvfs bench-files DIR [--pages N] [--size SIZE] [--layers N]\n"
	"  DIR is a kvfs mount root (pages go to model \"bench\") or a plain directory;\n"
	"  DIR/bench must not exist, and is left behind (rm -r DIR/bench)\n";

int kvfs_cmd_bench_files(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "pages", required_argument, NULL, 'n' },
		{ "size", required_argument, NULL, 's' },
		{ "layers", required_argument, NULL, 'l' },
		{ NULL, 0, NULL, 0 },
	};
	struct bench b = { .pages = 10000, .size = 64 << 10, .layers = 8 };
	char probe[4096];
	int c, rc;
	uint64_t i;

	if (argc == 2 && !strcmp(argv[1], "--help")) {
		printf("%s", bench_usage);
		return 0;
	}
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		if (c == 'n')
			b.pages = strtoul(optarg, NULL, 10);
		else if (c == 's' && kvfs_parse_size(optarg, &b.size) == 0)
			continue;
		else if (c == 'l')
			b.layers = (unsigned)strtoul(optarg, NULL, 10);
		else
			goto usage;
	}
	if (optind + 1 != argc || !b.pages || b.size < 8 || !b.layers || b.layers > 100)
		goto usage;
	b.dir = argv[optind];
	snprintf(probe, sizeof(probe), "%s/bench", b.dir);
	if (access(probe, F_OK) == 0) {
		fprintf(stderr, "kvfs bench-files: %s exists (an earlier run?); remove it first: rm -r %s\n",
			probe, probe);
		return 1;
	}
	b.buf = malloc(b.size);
	if (!b.buf)
		return 1;
	srand(42);
	for (i = 0; i < b.size; i++)
		b.buf[i] = (char)rand();
	printf("bench-files %s: %lu pages of %llu bytes in %u layer directories\n",
	       b.dir, b.pages, (unsigned long long)b.size, b.layers);
	rc = run(&b);
	free(b.buf);
	return rc;
usage:
	fputs(bench_usage, stderr);
	return 2;
}
