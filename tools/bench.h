/*
 * Private to `kvfs bench` (tools/bench*.c): the run's state, page naming
 * and stamps, the child processes and workspace (bench_env.c), and the four
 * readers (bench_read.c). See bench.c for what the benchmark does.
 */
#ifndef KVFS_BENCH_H
#define KVFS_BENCH_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <liburing.h>

#include "fs.h"
#include "libkvfs.h"
#include "tools.h"


#define FUSE_SUPER_MAGIC 0x65735546
#define BLOCK 4096u
#define SIZES_MAX 16
#define REPEAT_MAX 99
#define MODEL "bench"
#define STAMP_MAGIC 0x6b7666732d62656eull   /* "kvfs-ben" */

enum method { M_FAST, M_FUSE, M_RAW, M_FILES, M_COUNT };

extern const char *const method_name[M_COUNT];

struct bench_opts {
	const char *dir;            /* workspace; NULL: a new /var/tmp/kvfs-bench.XXXXXX */
	uint64_t sizes[SIZES_MAX];
	unsigned nsizes;
	unsigned long pages;        /* per size; 0: bytes / size */
	uint64_t bytes;             /* per size, when pages is 0 */
	unsigned layers;
	unsigned qd;                /* raw baseline; the daemon's own depth */
	unsigned batch;             /* pages per batch; 0: a layer's pages */
	unsigned repeat;
	unsigned settle;            /* seconds between the writes and the reads */
	unsigned methods;           /* bit per enum method */
	bool json, keep;
};

/* The run's environment: workspace, daemon, mount, client. */
struct bench {
	const struct bench_opts *o;
	char dir[PATH_MAX - 64];
	char store[PATH_MAX], mnt[PATH_MAX], files[PATH_MAX];
	char model[PATH_MAX + 8];     /* mnt/bench */
	char log[PATH_MAX];
	bool made_dir;              /* remove dir itself at the end */
	bool made_store, made_mnt, made_files, made_log;
	pid_t daemon;               /* 0: none running */
	bool mounted;
	bool cold;                  /* drop_caches works */
	struct kvfs_client *client;
};

/* Where a page's bytes lie, for the raw baseline. */
struct raw_page {
	unsigned seg;               /* index into raw_ctx.fds */
	uint64_t off;
};

struct raw_seg {
	unsigned stripe, segno;
};

struct raw_ctx {
	struct raw_page *pages;
	struct raw_seg *segs;
	int *fds;
	unsigned nsegs;
	struct io_uring ring;
	bool ring_ok, fixed_files, fixed_buf;
	uint64_t *got;              /* bytes read so far, per batch slot */
};

/* One measured run of one method. */
struct sample {
	double secs;
	double daemon_cpu;          /* CPU seconds */
	double reader_cpu;
};

struct batch_span {
	unsigned long first;        /* index into order[] */
	unsigned n;
};

/* Everything for one page size. Page p lives in layer p % L; the pages of
 * a layer are read in batches of at most B. */
struct size_run {
	struct bench *b;
	uint64_t size, stride;      /* stride: size rounded up to 4 KiB */
	unsigned long pages;
	unsigned batch;             /* B */
	unsigned long *order;       /* pages grouped by batch, shuffled within */
	struct batch_span *spans;
	unsigned long nspans;
	char *data;                 /* page contents for writing */
	char *buf;                  /* B slots, for fuse, raw and files */
	size_t buflen;
	bool own_buf;               /* buf is not the region's */
	struct kvfs_region *region;
	struct kvfs_batch *kb;
	char *rbase;                /* region base */
	uint64_t dst0;              /* region offset of slot 0 */
	unsigned long ram, bounced; /* fast-path pages not read from disk / copied */
	struct raw_ctx raw;
	struct sample runs[M_COUNT][REPEAT_MAX];
	double *lat[M_COUNT];       /* batch seconds, all runs */
	unsigned long nlat[M_COUNT];
};

extern volatile sig_atomic_t interrupted;

/* bench.c */
void bench_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
double now_s(void);
uint64_t xorshift(uint64_t *s);
unsigned page_layer(const struct size_run *s, unsigned long p);
void page_name(const struct size_run *s, unsigned long p, char *out, size_t len);
void page_path(const struct size_run *s, const char *root, unsigned long p,
	char *out, size_t len);
int check_page(const struct size_run *s, const char *method, const char *page,
	unsigned long p);
int read_full(int fd, char *buf, size_t len);
int make_dir(const char *path);

/* bench_opts.c: usage; options (0, 1 for --help, -EINVAL) */
extern const char bench_usage[];
int parse_opts(int argc, char **argv, struct bench_opts *o);

/* bench_env.c */
int log_errors(const struct bench *b);
int run_mkfs(struct bench *b);
int start_daemon(struct bench *b);
int stop_daemon(struct bench *b);
int daemon_cpu(const struct bench *b, double *secs);
double self_cpu(void);
void drop_caches(struct bench *b);
int setup_dirs(struct bench *b);
int make_layers(struct bench *b);
void cleanup_dirs(struct bench *b);

/* bench_read.c */
int fast_setup(struct size_run *s);
int fast_batch(struct size_run *s, const unsigned long *pg, unsigned n);
void fast_teardown(struct size_run *s);
int file_batch(struct size_run *s, const char *method, const char *root,
	const unsigned long *pg, unsigned n);
int raw_setup(struct size_run *s);
int raw_batch(struct size_run *s, const unsigned long *pg, unsigned n);
void raw_teardown(struct size_run *s);

#endif
