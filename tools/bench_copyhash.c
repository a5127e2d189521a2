/*
 * kvfs-bench-copyhash DIR [MiB]: what one thread pays per byte to read a
 * page from a file in memory (DIR on tmpfs) and verify it: an O_DIRECT
 * pread, the same then kv_hash128 (the kernel's copy and a second pass),
 * memcpy out of a mapping, and kv_copy_hash128 out of a mapping (one pass:
 * store/copyhash.c). GB/s for pages of 16 KiB to 1 MiB, three rounds each
 * over a file of MiB (default 512).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "store.h"

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	size_t n = (argc > 2 ? strtoull(argv[2], NULL, 10) : 512) << 20;
	char path[4096];
	uint8_t h[KV_HASH_LEN], *buf, *map;
	int fd, dfd;

	if (argc < 2) {
		fprintf(stderr, "usage: kvfs-bench-copyhash DIR [MiB]\n");
		return 2;
	}
	snprintf(path, sizeof(path), "%s/kvfs-bench-copyhash.%d", argv[1], (int)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
	buf = kv_buf_alloc(n);
	if (fd < 0 || !buf) {
		fprintf(stderr, "kvfs-bench-copyhash: %s: %s\n", path, strerror(errno));
		return 1;
	}
	for (size_t i = 0; i < n; i += 8)
		*(uint64_t *)(buf + i) = i * 0x9E3779B97F4A7C15ull;
	if (pwrite(fd, buf, n, 0) != (ssize_t)n || (dfd = open(path, O_RDONLY | O_DIRECT)) < 0 ||
	    (map = mmap(NULL, n, PROT_READ, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		fprintf(stderr, "kvfs-bench-copyhash: %s: %s\n", path, strerror(errno));
		unlink(path);
		return 1;
	}
	unlink(path);
	printf("page      pread  pread+hash  mmap-memcpy  mmap-copy+hash   (GB/s, one thread)\n");
	for (size_t ps = 16384; ps <= (1u << 20); ps *= 4) {
		double t[4];

		for (int m = 0; m < 4; m++) {
			double t0 = now();

			for (int r = 0; r < 3; r++)
				for (size_t o = 0; o + ps <= n; o += ps) {
					if (m == 0 || m == 1) {
						if (pread(dfd, buf + o, ps, (off_t)o) != (ssize_t)ps)
							return 1;
						if (m == 1)
							kv_hash128(buf + o, ps, h);
					} else if (m == 2) {
						memcpy(buf + o, map + o, ps);
					} else {
						kv_copy_hash128(buf + o, map + o, ps, h);
					}
				}
			t[m] = 3.0 * (double)n / (now() - t0) / 1e9;
		}
		printf("%4zu KiB  %5.2f  %10.2f  %11.2f  %14.2f\n", ps >> 10, t[0], t[1], t[2], t[3]);
	}
	return 0;
}
