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
#include <fcntl.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fs.h"
#include "tools.h"

struct bench {
	const char *dir;
	unsigned long pages;
	uint64_t size;
	unsigned layers;
	char *buf;
};

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
		if (rc == 0)
			report("read (cold)", b, now_s() - t0);
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
