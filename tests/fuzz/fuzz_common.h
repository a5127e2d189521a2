/*
 * Shared by the fuzz targets' standalone drivers (built by gcc with
 * KVFS_FUZZ_STANDALONE): a property check that aborts (which libFuzzer and
 * the suite both report), a fixed-seed generator so a suite run is
 * reproducible, and a replay of committed corpus files (regressions for
 * bugs the fuzzers found) through the same entry point libFuzzer calls.
 */
#ifndef KVFS_FUZZ_COMMON_H
#define KVFS_FUZZ_COMMON_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define require(ok, what) fuzz_require((ok), (what), __FILE__, __LINE__)

static inline void fuzz_require(int ok, const char *what, const char *file, int line)
{
	if (!ok) {
		fprintf(stderr, "%s:%d: property violated: %s\n", file, line, what);
		abort();
	}
}

#ifdef KVFS_FUZZ_STANDALONE
static uint64_t fuzz_rng = 0x9e3779b97f4a7c15ull;

static inline uint64_t rnd(void)
{
	fuzz_rng ^= fuzz_rng << 13;
	fuzz_rng ^= fuzz_rng >> 7;
	fuzz_rng ^= fuzz_rng << 17;
	return fuzz_rng;
}

static inline int read_whole(const char *path, uint8_t **buf, size_t *len)
{
	FILE *f = fopen(path, "rb");
	long n;

	if (!f)
		return -1;
	if (fseek(f, 0, SEEK_END) < 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) < 0) {
		fclose(f);
		return -1;
	}
	*buf = malloc((size_t)n + 1);
	*len = (size_t)n;
	if (!*buf || fread(*buf, 1, (size_t)n, f) != (size_t)n) {
		free(*buf);
		fclose(f);
		return -1;
	}
	fclose(f);
	return 0;
}

/* Feed every regular file of dir to the target; how many, -1 on error. */
static inline long replay_dir(const char *dir)
{
	struct dirent *de;
	DIR *d = opendir(dir);
	long n = 0;

	if (!d) {
		perror(dir);
		return -1;
	}
	while ((de = readdir(d))) {
		char path[4096];
		uint8_t *buf;
		size_t len;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (read_whole(path, &buf, &len) < 0) {
			perror(path);
			closedir(d);
			return -1;
		}
		LLVMFuzzerTestOneInput(buf, len);
		free(buf);
		n++;
	}
	closedir(d);
	return n;
}
#endif

#endif
