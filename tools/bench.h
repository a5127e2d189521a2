/*
 * Private to `kvfs bench` (tools/bench*.c): the run's state, page naming
 * and stamps, the child processes and workspace (bench_env.c), the four
 * readers (bench_read.c), the writers and the write case (bench_write.c),
 * the mixed case (bench_mixed.c), the concurrency case (bench_conc.c) and
 * the metadata case (bench_meta.c).
 * See bench.c for what the benchmark does.
 */
#ifndef KVFS_BENCH_H
#define KVFS_BENCH_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
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

#include "engine.h"
#include "libkvfs.h"
#include "progress.h"
#include "store.h"
#include "tools.h"


#define STR_(x) #x
#define STR(x) STR_(x)
#define FUSE_SUPER_MAGIC 0x65735546
#define BLOCK 4096u
#define SIZES_MAX 16
#define REPEAT_MAX 99
#define MODEL "bench"
#define WMODEL "benchw"       /* where the write, mixed and conc cases write */
#define PMODEL "benchp"       /* the conc case's metadata probes */
#define WRITERS_MAX 64
#define ENGINES_MAX 64        /* conc case: engine processes */
#define STREAMS_MAX 64        /* conc case: streams per engine, <= WRITERS_MAX */
#define CONC_STREAMS_MAX 256  /* conc case: streams in all */
#define FAST_WRITE_BYTES (4u << 20)   /* per fast-path write call */
#define STAMP_MAGIC 0x6b7666732d62656eull   /* "kvfs-ben" */

enum method { M_FAST, M_FUSE, M_RAW, M_FILES, M_COUNT };

extern const char *const method_name[M_COUNT];

/* What a run measures (--cases): cold batched reads (the methods above),
 * writes (kvfs against a raw writer), reads under a write stream, many
 * engine processes at once with the mount's metadata latency, and
 * metadata at scale (a store of millions of small pages). */
enum bench_case { C_READ, C_WRITE, C_MIXED, C_CONC, C_META, C_COUNT };

/* What the conc case's streams do (--conc-ops). */
enum conc_op { CO_READ, CO_WRITE, CO_COUNT };

extern const char *const conc_op_name[CO_COUNT];

extern const char *const case_name[C_COUNT];

/* How the write and mixed cases put pages into kvfs: open/write/close on
 * the mount, or fast-path batch writes (KVFS_IOC_WRITE through libkvfs). */
enum wmethod { W_FUSE, W_FAST, W_COUNT };

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
	unsigned cases;             /* bit per enum bench_case */
	unsigned writers;           /* write case: writer threads */
	unsigned mix_writers;       /* mixed case: FUSE writer threads */
	double mix_secs;            /* mixed case: seconds per read phase */
	unsigned engines, streams;  /* conc case: processes, threads in each */
	double conc_secs;           /* conc case: seconds per phase */
	unsigned conc_ops;          /* conc case: bit per enum conc_op */
	uint64_t meta_pages;        /* meta case: pages to create */
	uint64_t meta_size;         /* meta case: bytes per page */
	unsigned meta_layer_pages;  /* meta case: pages per layer (the listed one) */
	unsigned meta_threads;      /* meta case: writer and LOOKUP threads */
	unsigned meta_batch;        /* meta case: descriptors per LOOKUP call */
	unsigned meta_name_digits;  /* meta case: hex digits of a page name */
	uint64_t meta_index_pages;  /* meta case: -o index_pages of the remount */
	bool json, keep;
	enum progress_mode pm;      /* --progress, --quiet, or on a terminal */
};

/* The run's environment: workspace, daemon, mount, client. */
struct bench {
	const struct bench_opts *o;
	char dir[PATH_MAX - 64];
	char store[PATH_MAX], mnt[PATH_MAX], files[PATH_MAX];
	char model[PATH_MAX + 8];     /* mnt/bench */
	char wmodel[PATH_MAX + 8];    /* mnt/benchw */
	char log[PATH_MAX];
	bool made_dir;              /* remove dir itself at the end */
	bool made_store, made_mnt, made_files, made_log;
	pid_t daemon;               /* 0: none running */
	bool mounted;
	bool cold;                  /* drop_caches works */
	struct kvfs_client *client;
	struct kvfs_client *wclient;  /* WMODEL, for fast-path writes */
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

/* New pages written by a set of threads, each into its own layer
 * directory of WMODEL, through the mount or in fast-path batches, until a
 * quota of pages or until stopped. */
struct page_writers {
	const struct size_run *s;
	enum wmethod how;
	unsigned n;                 /* threads */
	unsigned long quota;        /* pages in all; 0: until stop */
	unsigned run;               /* names are unique per run */
	atomic_bool stop;
	atomic_ulong pages;         /* stored so far (closed, or batch done) */
	atomic_int err;
	unsigned started;
	struct page_writer {
		struct page_writers *ws;
		unsigned idx;
		pthread_t th;
		char *buf;              /* fuse: one page */
		struct kvfs_region *region;   /* fast: ctl area, then B pages */
		struct kvfs_batch *kb;
		uint64_t src0;          /* region offset of page slot 0 */
	} w[WRITERS_MAX];
};

/* io_uring O_DIRECT writes of page-sized blocks into one preallocated file
 * on the store's filesystem: the device's write baseline. */
struct raw_writer {
	char path[PATH_MAX + 32];
	int fd;
	struct io_uring ring;
	bool ring_ok, fixed;
	char *buf;                  /* one page of stamped bytes, the source */
	uint64_t stride, file_bytes;
	unsigned qd;
	pthread_t th;               /* the streaming writer (mixed case) */
	bool running;
	atomic_bool stop;
	_Atomic uint64_t bytes;     /* completed so far */
	int err;
};

extern volatile sig_atomic_t interrupted;

/*
 * A store the bench opens itself (no daemon, no FUSE), to measure the I/O
 * scheduler alone: the read set written to its own extents, read with
 * kv_store_read_many as the fast path does, under a stream of writes
 * handed to the store's I/O thread as the daemon hands it sealed pages.
 */
#define STORE_WSLOTS_MAX 8192
struct store_mix {
	struct kv_store *st;
	char dir[PATH_MAX + 32];
	bool fifo;                  /* opened with KVFS_SCHED=fifo */
	struct kv_extent *ext;      /* page p of the read set */
	struct kv_io *ios;          /* one batch */
	unsigned errors;            /* read callbacks with res != 0 */
	/* the write stream */
	struct kv_extent *wext;     /* extents it overwrites, round robin */
	unsigned long nwext, wnext;
	unsigned long quota;        /* writes to queue in all; 0: until stop */
	char *wbuf;
	struct store_wslot {
		struct store_mix *m;
		struct kv_io io;
	} *slots;
	unsigned nslots, *free_slots, nfree;
	pthread_t th;
	bool running;
	atomic_bool stop;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	_Atomic uint64_t bytes;     /* written so far */
	int err;
};

/* bench.c */
void bench_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
double now_s(void);
int check_interrupt(void);
void size_label(uint64_t size, char *out, size_t len);
double median(double *v, unsigned n);
double percentile(double *v, unsigned long n, double q);
int slots_alloc(struct size_run *s);
void slots_free(struct size_run *s);
int write_full(int fd, const char *buf, size_t len);
int read_batch(struct size_run *s, enum method m, const unsigned long *pg, unsigned n);
uint64_t xorshift(uint64_t *s);
unsigned page_layer(const struct size_run *s, unsigned long p);
void page_name(const struct size_run *s, unsigned long p, char *out, size_t len);
void page_path(const struct size_run *s, const char *root, unsigned long p,
	char *out, size_t len);
void stamp_page(char *page, uint64_t size, unsigned long p);
int check_page(const struct size_run *s, const char *method, const char *page,
	unsigned long p);
int read_full(int fd, char *buf, size_t len);
int make_dir(const char *path);

/* bench_progress.c: the status line; clear it before printing a report */
void bench_progress_start(const struct bench_opts *o);
void bench_step(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void bench_step_done(void);
void bench_progress_clear(void);
void bench_progress_end(bool ok);

/* bench_opts.c: usage; options (0, 1 for --help, -EINVAL) */
extern const char bench_usage[];
int parse_opts(int argc, char **argv, struct bench_opts *o);
void print_header(const struct bench *b);

/* bench_env.c */
int log_errors(const struct bench *b);
int run_mkfs(struct bench *b);
int start_daemon(struct bench *b);
int stop_daemon(struct bench *b);
int daemon_cpu(const struct bench *b, double *secs);
int daemon_io(const struct bench *b, uint64_t *read_bytes, uint64_t *write_bytes);
int daemon_proc_pair(const struct bench *b, const char *file, const char *k1,
	const char *k2, uint64_t *v1, uint64_t *v2);
double self_cpu(void);
void drop_caches(struct bench *b);
int start_daemon_wait(struct bench *b, double timeout_s, double poll_s);
int run_tool(const struct bench *b, char *const argv[], char *out, size_t len);
int setup_dirs(struct bench *b);
int make_layers(struct bench *b);
void cleanup_dirs(struct bench *b);
void rm_tree(const char *path);

/* bench_read.c */
int fast_setup(struct size_run *s);
int fast_batch(struct size_run *s, const unsigned long *pg, unsigned n);
void fast_teardown(struct size_run *s);
int file_batch(struct size_run *s, const char *method, const char *root,
	const unsigned long *pg, unsigned n);
int raw_setup(struct size_run *s);
int raw_ring_setup(struct size_run *s);
int raw_batch(struct size_run *s, const unsigned long *pg, unsigned n);
void raw_teardown(struct size_run *s);

/* bench_write.c */
extern const char *const wmethod_name[W_COUNT];
int writers_start(struct page_writers *ws, const struct size_run *s, enum wmethod how,
	unsigned n, unsigned long quota);
int writers_join(struct page_writers *ws);
int writers_sync(const struct page_writers *ws);
int writer_setup(struct page_writer *w, const struct size_run *s);
void writer_teardown(struct page_writer *w);
int fast_write(struct page_writer *w, unsigned long seq, unsigned n);
unsigned fast_write_batch(const struct size_run *s);
int raw_writer_open(struct raw_writer *w, const struct size_run *s, const char *name,
	uint64_t file_bytes);
int raw_writer_loop(struct raw_writer *w, unsigned long n);
int raw_writer_stream_start(struct raw_writer *w);
int raw_writer_stream_stop(struct raw_writer *w);
void raw_writer_close(struct raw_writer *w);
int write_case(struct size_run *s);
unsigned write_case_steps(const struct bench_opts *o);
int make_write_layers(struct bench *b);

/* bench_store.c */
int store_mix_open(struct store_mix *m, const struct size_run *s, const char *name,
	bool fifo, bool fresh);
int store_mix_write_all(struct store_mix *m);
int store_mix_batch(struct size_run *s, struct store_mix *m, const unsigned long *pg,
	unsigned n);
int store_mix_stream_start(struct store_mix *m);
int store_mix_stream_stop(struct store_mix *m);
void store_mix_close(struct store_mix *m);

/* bench_mixed.c */
int mixed_case(struct size_run *s);
unsigned mixed_case_steps(const struct bench_opts *o);

/* bench_conc.c */
int conc_case(struct size_run *s);
unsigned conc_case_steps(const struct bench_opts *o);

/* bench_meta.c */
#define META_STEPS 5          /* create, remount, ls, lookup, fsck */
int meta_case(struct bench *b);

/* bench_mount.c: a count with an optional K (10^3) or M (10^6) suffix */
int bench_parse_count(const char *s, uint64_t *out);

/* bench_probe.c: the conc case's metadata probes */
#define LIST_PAGES 1000       /* pages in the listed layer */
#define STAT_GAP 0.005        /* seconds between stats */
#define LIST_GAP 0.1          /* seconds between listings */
struct samples {
	double *v;
	unsigned long n, cap;
};
int probe_prepare(struct bench *b);
void probe_finish(void);
int probe_phase(struct bench *b, double secs);
int probe_start(const atomic_bool *stop, struct samples *stat, struct samples *list);
int probe_join(double deadline);
void samples_pct_ms(struct samples *sm, double *p50, double *p99);
int list_layer(const char *dir, unsigned long *n);

#endif
