/*
 * `kvfs bench`: cold reads of KV pages four ways, on one disk, in one run.
 *
 * The command builds everything it measures: a fresh store in DIR/store,
 * its own daemon (`kvfs mount -f`, a child, so its CPU time can be read from
 * /proc), a model "bench" with L layer directories, and for each page size
 * N pages written through the mount plus the same pages as plain files in
 * DIR/files (one file per page, as LMCache's local-disk backend keeps
 * them). Once every size is written and the disk has been left alone for a
 * few seconds, it reads every page back, with the page cache dropped before
 * each pass, in per-layer batches of B pages shuffled within each batch,
 * into the same pre-touched memory for every method:
 *
 *   fast   one KVFS_IOC_READ per batch through libkvfs, into a shared region
 *   fuse   open/read/close of each page through the mount
 *   raw    io_uring O_DIRECT reads of the very same extents from the segment
 *          files (found through the user.kvfs.extent/segment xattrs), qd Q:
 *          what the device gives, the ceiling for the fast path
 *   files  open/read/close of each plain file, buffered
 *
 * The methods run interleaved, R times; the report gives medians, batch
 * latency percentiles over all runs, CPU seconds per GB read (the daemon's,
 * from /proc/PID/stat, and the reader's own, from getrusage) and the fast
 * path's throughput relative to the other three. Every page is checked: a
 * stamp in each 4 KiB block names the page, so a misplaced or stale block
 * stops the run with an error, as does any failed status.
 *
 * Functions return 0 or -errno. The one that detects a failure prints it
 * with its context; callers only pass the code up.
 */
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

static const char *const method_name[M_COUNT] = { "fast", "fuse", "raw", "files" };

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

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

static void bench_err(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);   /* keep the report and the error in order */
	fputs("kvfs bench: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int check_interrupt(void)
{
	if (!interrupted)
		return 0;
	bench_err("interrupted");
	return -EINTR;
}

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void size_label(uint64_t size, char *out, size_t len)
{
	if (size >= (1u << 20) && size % (1u << 20) == 0)
		snprintf(out, len, "%lluM", (unsigned long long)(size >> 20));
	else if (size % 1024 == 0)
		snprintf(out, len, "%lluK", (unsigned long long)(size >> 10));
	else
		snprintf(out, len, "%llu", (unsigned long long)size);
}

/* ---- pages: names, places, stamps ---- */

static unsigned page_layer(const struct size_run *s, unsigned long p)
{
	return (unsigned)(p % s->b->o->layers);
}

static void page_name(const struct size_run *s, unsigned long p, char *out, size_t len)
{
	snprintf(out, len, "%llu-%06lx", (unsigned long long)s->size, p);
}

static void page_path(const struct size_run *s, const char *root, unsigned long p,
		      char *out, size_t len)
{
	char name[64];

	page_name(s, p, name, sizeof(name));
	snprintf(out, len, "%s/%02u/%s", root, page_layer(s, p), name);
}

/* Each 4 KiB block starts with the page's identity and the block's offset,
 * so a block from another page, another offset or another size shows. */
static void stamp_page(char *page, uint64_t size, unsigned long p)
{
	uint64_t off, w[2];

	for (off = 0; off < size; off += BLOCK) {
		w[0] = size << 32 | p;
		w[1] = STAMP_MAGIC ^ off;
		memcpy(page + off, w, sizeof(w));
	}
}

static int check_page(const struct size_run *s, const char *method, const char *page,
		      unsigned long p)
{
	uint64_t off, w[2];
	char name[64];

	for (off = 0; off < s->size; off += BLOCK) {
		memcpy(w, page + off, sizeof(w));
		if (w[0] != (s->size << 32 | p) || w[1] != (STAMP_MAGIC ^ off))
			break;
	}
	if (off >= s->size)
		return 0;
	page_name(s, p, name, sizeof(name));
	bench_err("%s: layer %u page %s: wrong bytes at offset %llu (stamp %016llx %016llx)",
		  method, page_layer(s, p), name, (unsigned long long)off,
		  (unsigned long long)w[0], (unsigned long long)w[1]);
	return -EILSEQ;
}

/* ---- small I/O helpers (silent: callers report) ---- */

static int read_full(int fd, char *buf, size_t len)
{
	size_t done = 0;
	ssize_t n;

	while (done < len) {
		n = read(fd, buf + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ENODATA;   /* the page is shorter than it should be */
		done += (size_t)n;
	}
	return 0;
}

static int write_full(int fd, const char *buf, size_t len)
{
	size_t done = 0;
	ssize_t n;

	while (done < len) {
		n = write(fd, buf + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		done += (size_t)n;
	}
	return 0;
}

static int make_dir(const char *path)
{
	if (mkdir(path, 0755) < 0) {
		bench_err("mkdir %s: %s", path, strerror(errno));
		return -errno;
	}
	return 0;
}

/* ---- child processes: mkfs, the daemon, fusermount3 ---- */

/* Start argv (prog is a path, or a name looked up in PATH) with stdout and
 * stderr going to out_fd (unless -1). A daemon gets its own process group,
 * so that ^C reaches only us and we unmount in order, and SIGTERM should we
 * die first, so that it never outlives us holding the mount. */
static pid_t spawn(const char *prog, char *const argv[], int out_fd, bool daemon)
{
	pid_t pid = fork();

	if (pid != 0)
		return pid;
	if (out_fd >= 0) {
		dup2(out_fd, STDOUT_FILENO);
		dup2(out_fd, STDERR_FILENO);
	}
	if (daemon) {
		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGTERM);
	}
	if (strchr(prog, '/'))
		execv(prog, argv);
	else
		execvp(prog, argv);
	_exit(127);
}

static int wait_exit(pid_t pid)
{
	int st;

	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	return 128 + WTERMSIG(st);
}

static void log_tail(const struct bench *b)
{
	char line[1024];
	long pos;
	FILE *f = fopen(b->log, "r");

	if (!f)
		return;
	fseek(f, 0, SEEK_END);
	pos = ftell(f);
	fseek(f, pos > 4096 ? pos - 4096 : 0, SEEK_SET);
	if (pos > 4096 && !fgets(line, sizeof(line), f))   /* skip a partial line */
		pos = 0;
	fprintf(stderr, "--- %s (tail) ---\n", b->log);
	while (fgets(line, sizeof(line), f))
		fputs(line, stderr);
	fclose(f);
}

/* Error lines the daemon logged: a run that provoked any is not clean. */
static int log_errors(const struct bench *b)
{
	char line[1024];
	unsigned n = 0;
	FILE *f = fopen(b->log, "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "]: error: ") && n++ < 10)
			fprintf(stderr, "%s%s", n == 1 ? "--- daemon errors ---\n" : "", line);
	fclose(f);
	if (n)
		bench_err("the daemon logged %u error%s%s%s", n, n > 1 ? "s" : "",
			  b->o->keep ? ": " : "", b->o->keep ? b->log : "");
	return n ? -EIO : 0;
}

static int open_log(const struct bench *b)
{
	int fd = open(b->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

	if (fd < 0)
		bench_err("%s: %s", b->log, strerror(errno));
	return fd < 0 ? -errno : fd;
}

/* `kvfs mkfs STORE`, as a user would run it. */
static int run_mkfs(struct bench *b)
{
	char *argv[] = { "kvfs", "mkfs", b->store, NULL };
	int fd = open_log(b), st;
	pid_t pid;

	if (fd < 0)
		return fd;
	pid = spawn("/proc/self/exe", argv, fd, false);
	close(fd);
	if (pid < 0) {
		bench_err("fork: %s", strerror(errno));
		return -errno;
	}
	b->made_store = true;
	st = wait_exit(pid);
	if (st == 0)
		return 0;
	bench_err("kvfs mkfs %s failed (status %d)", b->store, st);
	log_tail(b);
	return -EIO;
}

static bool is_mounted(const struct bench *b)
{
	struct statfs sf;
	struct stat st;

	return statfs(b->mnt, &sf) == 0 && (unsigned long)sf.f_type == FUSE_SUPER_MAGIC &&
	       stat(b->mnt, &st) == 0 && st.st_ino == 1;
}

/* Start `kvfs mount STORE MNT -f` and wait until the mount is there. */
static int start_daemon(struct bench *b)
{
	char *argv[] = { "kvfs", "mount", b->store, b->mnt, "-f", NULL };
	int fd = open_log(b), i, st;

	if (fd < 0)
		return fd;
	b->daemon = spawn("/proc/self/exe", argv, fd, true);
	close(fd);
	if (b->daemon < 0) {
		b->daemon = 0;
		bench_err("fork: %s", strerror(errno));
		return -errno;
	}
	for (i = 0; i < 200; i++) {
		if (waitpid(b->daemon, &st, WNOHANG) == b->daemon) {
			b->daemon = 0;
			bench_err("the daemon exited before mounting (status %d)",
				  WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
			log_tail(b);
			return -EIO;
		}
		if (is_mounted(b)) {
			b->mounted = true;
			return 0;
		}
		usleep(50000);
	}
	bench_err("%s was not mounted within 10 s", b->mnt);
	log_tail(b);
	return -ETIMEDOUT;
}

/* Its complaints (busy, while a reader closes) go to the log, not the report. */
static int fusermount(const struct bench *b, bool lazy)
{
	char *argv[] = { "fusermount3", "-u", (char *)b->mnt, NULL, NULL };
	int fd = open_log(b), rc;
	pid_t pid;

	if (lazy) {
		argv[2] = "-z";
		argv[3] = (char *)b->mnt;
	}
	pid = spawn("fusermount3", argv, fd, false);
	rc = pid < 0 ? -errno : wait_exit(pid);
	if (fd >= 0)
		close(fd);
	return rc;
}

/* Wait up to secs for the daemon; 1 if it exited (status in *st). */
static int reap_daemon(struct bench *b, double secs, int *st)
{
	double end = now_s() + secs;
	int w;

	do {
		if (waitpid(b->daemon, &w, WNOHANG) == b->daemon) {
			*st = WIFEXITED(w) ? WEXITSTATUS(w) : 128 + WTERMSIG(w);
			b->daemon = 0;
			return 1;
		}
		usleep(20000);
	} while (now_s() < end);
	return 0;
}

/* Unmount and wait for the daemon, which commits everything pending before
 * it exits. A busy mount is retried (a reader may be closing), then
 * detached; a daemon that does not exit is terminated. */
static int stop_daemon(struct bench *b)
{
	int i, st = 0, rc = 0;

	if (b->mounted) {
		for (i = 0; i < 20 && fusermount(b, false) != 0; i++)
			usleep(100000);
		if (i == 20 && fusermount(b, true) != 0) {
			bench_err("cannot unmount %s", b->mnt);
			log_tail(b);
			rc = -EBUSY;
		}
		b->mounted = is_mounted(b);
	}
	if (!b->daemon)
		return rc;
	if (!reap_daemon(b, 60, &st)) {
		bench_err("the daemon (pid %d) did not exit after unmounting; terminating it",
			  (int)b->daemon);
		kill(b->daemon, SIGTERM);
		if (!reap_daemon(b, 10, &st)) {
			kill(b->daemon, SIGKILL);
			reap_daemon(b, 10, &st);
		}
		rc = -ETIMEDOUT;
	}
	if (st > 128) {
		bench_err("the daemon was killed by signal %d", st - 128);
		log_tail(b);
		rc = rc ? rc : -EIO;
	} else if (st != 0) {
		bench_err("the daemon exited with status %d", st);
		log_tail(b);
		rc = rc ? rc : -EIO;
	}
	return rc;
}

/* The daemon's CPU time so far (all its threads, io_uring workers too). */
static int daemon_cpu(const struct bench *b, double *secs)
{
	unsigned long ut, st;
	char path[64], buf[1024], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)b->daemon);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		bench_err("%s: %s (did the daemon die?)", path, strerror(errno));
		return -errno;
	}
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	/* The command name may hold spaces and parentheses: fields start
	 * after the last ')'; utime and stime are fields 14 and 15. */
	p = strrchr(buf, ')');
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
			 &ut, &st) != 2) {
		bench_err("%s: cannot parse", path);
		return -EINVAL;
	}
	*secs = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
	return 0;
}

static double self_cpu(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* Make the next read cold: write back dirty pages, then drop the page,
 * dentry and inode caches (the mount's too, so FUSE pays its lookups). */
static void drop_caches(struct bench *b)
{
	int fd;

	sync();
	if (!b->cold)
		return;
	fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, "3\n", 2) != 2) {
		bench_err("warning: cannot drop caches (%s; need root): reads are warm",
			  strerror(errno));
		b->cold = false;
	}
	if (fd >= 0)
		close(fd);
}

/* ---- workspace ---- */

static int setup_dirs(struct bench *b)
{
	const char *d = b->o->dir;
	int rc;

	if (!d) {
		strcpy(b->dir, "/var/tmp/kvfs-bench.XXXXXX");
		if (!mkdtemp(b->dir)) {
			bench_err("mkdtemp %s: %s", b->dir, strerror(errno));
			return -errno;
		}
		b->made_dir = true;
	} else {
		if (strlen(d) >= sizeof(b->dir)) {
			bench_err("%s: path too long", d);
			return -ENAMETOOLONG;
		}
		strcpy(b->dir, d);
		if (mkdir(b->dir, 0755) == 0)
			b->made_dir = true;
		else if (errno != EEXIST) {
			bench_err("mkdir %s: %s", b->dir, strerror(errno));
			return -errno;
		}
	}
	snprintf(b->store, sizeof(b->store), "%s/store", b->dir);
	snprintf(b->mnt, sizeof(b->mnt), "%s/mnt", b->dir);
	snprintf(b->model, sizeof(b->model), "%s/" MODEL, b->mnt);
	snprintf(b->files, sizeof(b->files), "%s/files", b->dir);
	snprintf(b->log, sizeof(b->log), "%s/daemon.log", b->dir);
	if (access(b->store, F_OK) == 0 || access(b->files, F_OK) == 0 ||
	    access(b->mnt, F_OK) == 0 || access(b->log, F_OK) == 0) {
		bench_err("%s already holds store/, mnt/, files/ or daemon.log "
			  "(an earlier run?): use another --dir", b->dir);
		return -EEXIST;
	}
	b->made_log = true;   /* from here on, daemon.log is ours */
	rc = make_dir(b->mnt);
	if (rc < 0)
		return rc;
	b->made_mnt = true;
	rc = make_dir(b->files);
	if (rc < 0)
		return rc;
	b->made_files = true;
	return 0;
}

/* The model and its layers on the mount, and the same layers for the plain
 * files. The model has no geometry: every page size fits in it. */
static int make_layers(struct bench *b)
{
	char path[PATH_MAX + 32];
	unsigned l;
	int rc = make_dir(b->model);

	for (l = 0; rc == 0 && l < b->o->layers; l++) {
		snprintf(path, sizeof(path), "%s/%02u", b->model, l);
		rc = make_dir(path);
		snprintf(path, sizeof(path), "%s/%02u", b->files, l);
		if (rc == 0)
			rc = make_dir(path);
	}
	return rc;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if ((flag == FTW_DP ? rmdir(path) : unlink(path)) < 0)
		bench_err("warning: cannot remove %s: %s", path, strerror(errno));
	return 0;
}

static void rm_tree(const char *path)
{
	if (access(path, F_OK) == 0)
		nftw(path, rm_entry, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

static void cleanup_dirs(struct bench *b)
{
	if (b->o->keep) {
		fprintf(stderr, "kvfs bench: kept %s\n", b->dir);
		return;
	}
	if (b->made_files)
		rm_tree(b->files);
	if (b->made_store)
		rm_tree(b->store);
	if (b->made_mnt && !b->mounted)
		rmdir(b->mnt);
	if (b->made_log)
		unlink(b->log);
	if (b->made_dir)
		rmdir(b->dir);
}

/* ---- writing the pages ---- */

static int write_page(const struct size_run *s, const char *root, unsigned long p)
{
	char path[PATH_MAX + 96];
	int fd, rc;

	page_path(s, root, p, path, sizeof(path));
	stamp_page(s->data, s->size, p);
	fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
	if (fd < 0) {
		bench_err("create %s: %s", path, strerror(errno));
		return -errno;
	}
	rc = write_full(fd, s->data, s->size);
	/* kvfs seals the page on close, and reports a failed seal there */
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc < 0)
		bench_err("write %s: %s", path, strerror(-rc));
	return rc;
}

/* fsync of a kvfs layer directory waits for the group commit of the pages
 * in it; a plain filesystem needs syncfs for the file data first. */
static int sync_layers(const struct bench *b, const char *root, bool plain)
{
	char path[PATH_MAX + 16];
	unsigned l;
	int fd, rc = 0;

	for (l = 0; rc == 0 && l < b->o->layers; l++) {
		snprintf(path, sizeof(path), "%s/%02u", root, l);
		fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			rc = -errno;
		else if ((plain && l == 0 && syncfs(fd) < 0) || fsync(fd) < 0)
			rc = -errno;
		if (fd >= 0)
			close(fd);
		if (rc < 0)
			bench_err("sync %s: %s", path, strerror(-rc));
	}
	return rc;
}

static void report_write(const struct size_run *s, const char *target, double secs)
{
	double bytes = (double)s->pages * (double)s->size;
	char label[32];

	size_label(s->size, label, sizeof(label));
	if (s->b->o->json)
		printf("{\"event\":\"write\",\"size\":%llu,\"target\":\"%s\",\"pages\":%lu,"
		       "\"secs\":%.4f,\"gbps\":%.4f,\"pages_per_s\":%.1f}\n",
		       (unsigned long long)s->size, target, s->pages, secs,
		       bytes / secs / 1e9, (double)s->pages / secs);
	else
		printf("  %-5s %-6s %8lu %8.3f %10.0f %8.2f\n", label, target, s->pages,
		       bytes / secs / 1e9, (double)s->pages / secs, secs);
	fflush(stdout);
}

static int write_all(struct size_run *s, const char *root, bool plain, const char *target)
{
	double t0 = now_s();
	unsigned long p;
	int rc = 0;

	for (p = 0; rc == 0 && p < s->pages; p++) {
		rc = check_interrupt();
		if (rc == 0)
			rc = write_page(s, root, p);
	}
	if (rc == 0)
		rc = sync_layers(s->b, root, plain);
	if (rc == 0)
		report_write(s, target, now_s() - t0);
	return rc;
}

/* ---- batches ---- */

/* Pages of layer 0, then layer 1, ..., in chunks of B: the batches an
 * engine loading a prefix layer by layer would issue. */
static int make_spans(struct size_run *s)
{
	unsigned layers = s->b->o->layers, l;
	unsigned long per_layer, i, k = 0, p;

	per_layer = (s->pages + layers - 1) / layers;
	s->nspans = layers * ((per_layer + s->batch - 1) / s->batch);
	s->spans = calloc(s->nspans, sizeof(*s->spans));
	s->order = malloc(s->pages * sizeof(*s->order));
	if (!s->spans || !s->order)
		return -ENOMEM;
	s->nspans = 0;
	for (l = 0; l < layers; l++) {
		for (i = 0, p = l; p < s->pages; i++, p += layers) {
			if (i % s->batch == 0)
				s->spans[s->nspans++].first = k;
			s->spans[s->nspans - 1].n++;
			s->order[k++] = p;
		}
	}
	return 0;
}

static void shuffle_spans(struct size_run *s, uint64_t *seed)
{
	unsigned long k, i, j, t, *v;

	for (k = 0; k < s->nspans; k++) {
		v = s->order + s->spans[k].first;
		for (i = s->spans[k].n - 1; i > 0; i--) {
			j = xorshift(seed) % (i + 1);
			t = v[i]; v[i] = v[j]; v[j] = t;
		}
	}
}

/* ---- (a) fast path ---- */

static int fast_setup(struct size_run *s)
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

static int fast_batch(struct size_run *s, const unsigned long *pg, unsigned n)
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

static void fast_teardown(struct size_run *s)
{
	if (s->kb)
		kvfs_batch_free(s->kb);
	if (s->region)
		kvfs_region_destroy(s->region);
	s->kb = NULL;
	s->region = NULL;
}

/* ---- (b) FUSE and (d) one file per page: open, read, close ---- */

static int file_batch(struct size_run *s, const char *method, const char *root,
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
static int raw_setup(struct size_run *s)
{
	struct raw_ctx *r = &s->raw;
	struct iovec iov = { s->buf, s->buflen };
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
	if (rc < 0)
		return rc;
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

static int raw_batch(struct size_run *s, const unsigned long *pg, unsigned n)
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

static void raw_teardown(struct size_run *s)
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

/* ---- measuring ---- */

static int read_batch(struct size_run *s, enum method m, const unsigned long *pg, unsigned n)
{
	switch (m) {
	case M_FAST:
		return fast_batch(s, pg, n);
	case M_FUSE:
		return file_batch(s, "fuse", s->b->model, pg, n);
	case M_RAW:
		return raw_batch(s, pg, n);
	default:
		return file_batch(s, "files", s->b->files, pg, n);
	}
}

/* Read every page once with method m, cold, batch by batch. */
static int run_method(struct size_run *s, enum method m, struct sample *out)
{
	double t0, tb, d0, d1, c0;
	unsigned long k;
	int rc;

	drop_caches(s->b);
	rc = daemon_cpu(s->b, &d0);
	if (rc < 0)
		return rc;
	c0 = self_cpu();
	t0 = now_s();
	for (k = 0; k < s->nspans; k++) {
		rc = check_interrupt();
		tb = now_s();
		if (rc == 0)
			rc = read_batch(s, m, s->order + s->spans[k].first, s->spans[k].n);
		if (rc < 0)
			return rc;
		s->lat[m][s->nlat[m]++] = now_s() - tb;
	}
	out->secs = now_s() - t0;
	out->reader_cpu = self_cpu() - c0;
	rc = daemon_cpu(s->b, &d1);
	out->daemon_cpu = d1 - d0;
	return rc;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Nearest-rank percentile; sorts v. */
static double percentile(double *v, unsigned long n, double q)
{
	unsigned long k;

	qsort(v, n, sizeof(*v), cmp_double);
	k = (unsigned long)(q * (double)n);
	if ((double)k < q * (double)n)
		k++;
	return v[k ? k - 1 : 0];
}

static double median(double *v, unsigned n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct summary {
	double gbps, pps, p50, p99, dcpu, rcpu;   /* CPU: seconds per GB */
};

static void summarize(struct size_run *s, enum method m, struct summary *out)
{
	unsigned r, nr = s->b->o->repeat;
	double gb = (double)s->pages * (double)s->size / 1e9;
	double g[REPEAT_MAX], d[REPEAT_MAX], c[REPEAT_MAX];

	for (r = 0; r < nr; r++) {
		g[r] = gb / s->runs[m][r].secs;
		d[r] = s->runs[m][r].daemon_cpu / gb;
		c[r] = s->runs[m][r].reader_cpu / gb;
	}
	out->gbps = median(g, nr);
	out->pps = out->gbps * 1e9 / (double)s->size;
	out->dcpu = median(d, nr);
	out->rcpu = median(c, nr);
	out->p50 = percentile(s->lat[m], s->nlat[m], 0.50) * 1e3;
	out->p99 = percentile(s->lat[m], s->nlat[m], 0.99) * 1e3;
}

/* Fast path throughput over method m's, per run, then the median: the
 * methods of one run saw the same machine state. */
static double ratio(const struct size_run *s, enum method m)
{
	unsigned r, nr = s->b->o->repeat;
	double v[REPEAT_MAX];

	for (r = 0; r < nr; r++)
		v[r] = s->runs[m][r].secs / s->runs[M_FAST][r].secs;
	return median(v, nr);
}

static void report_reads(struct size_run *s)
{
	const struct bench_opts *o = s->b->o;
	static const enum method vs[] = { M_RAW, M_FILES, M_FUSE };
	struct summary sm;
	char label[32];
	unsigned m, r;

	size_label(s->size, label, sizeof(label));
	if (!o->json)
		printf("  read   %8s %10s %9s %9s %12s %12s\n", "GB/s", "pages/s",
		       "p50 ms", "p99 ms", "daemon s/GB", "reader s/GB");
	for (m = 0; m < M_COUNT; m++) {
		if (!(o->methods & 1u << m))
			continue;
		summarize(s, m, &sm);
		if (!o->json) {
			printf("  %-6s %8.3f %10.0f %9.2f %9.2f %12.3f %12.3f\n",
			       method_name[m], sm.gbps, sm.pps, sm.p50, sm.p99, sm.dcpu, sm.rcpu);
			continue;
		}
		printf("{\"event\":\"read\",\"size\":%llu,\"method\":\"%s\",\"pages\":%lu,"
		       "\"layers\":%u,\"batch\":%u,\"batches\":%lu,\"qd\":%u,\"repeats\":%u,"
		       "\"cold\":%s,\"gbps\":%.4f,\"pages_per_s\":%.1f,\"batch_p50_ms\":%.3f,"
		       "\"batch_p99_ms\":%.3f,\"daemon_cpu_s_per_gb\":%.4f,"
		       "\"reader_cpu_s_per_gb\":%.4f,\"runs_secs\":[",
		       (unsigned long long)s->size, method_name[m], s->pages, o->layers,
		       s->batch, s->nspans, o->qd, o->repeat, s->b->cold ? "true" : "false",
		       sm.gbps, sm.pps, sm.p50, sm.p99, sm.dcpu, sm.rcpu);
		for (r = 0; r < o->repeat; r++)
			printf("%s%.4f", r ? "," : "", s->runs[m][r].secs);
		printf("]");
		if (m == M_FAST)
			printf(",\"ram_pages\":%lu,\"bounced_pages\":%lu", s->ram, s->bounced);
		if (m == M_RAW)
			printf(",\"fixed_buffers\":%s,\"fixed_files\":%s",
			       s->raw.fixed_buf ? "true" : "false",
			       s->raw.fixed_files ? "true" : "false");
		printf("}\n");
	}
	if (o->methods & 1u << M_FAST) {
		if (o->json) {
			printf("{\"event\":\"ratio\",\"size\":%llu", (unsigned long long)s->size);
			for (m = 0; m < sizeof(vs) / sizeof(vs[0]); m++)
				if (o->methods & 1u << vs[m])
					printf(",\"fast_%s\":%.3f", method_name[vs[m]],
					       ratio(s, vs[m]));
			printf("}\n");
		} else {
			printf("  ");
			for (m = 0; m < sizeof(vs) / sizeof(vs[0]); m++)
				if (o->methods & 1u << vs[m])
					printf("fast/%s %.2f   ", method_name[vs[m]],
					       ratio(s, vs[m]));
			printf("(throughput, median of per-run ratios)\n");
		}
	}
	if (s->ram || s->bounced)
		bench_err("warning: %s: fast path served %lu page reads from RAM and "
			  "copied %lu through a bounce buffer", label, s->ram, s->bounced);
	fflush(stdout);
}

/* ---- one page size ---- */

/*
 * Where the other methods put the pages: the fast path's own destination
 * slots when it runs, else shared memory of the same kind. On this kind of
 * VM the speed of O_DIRECT reads into a buffer depends on the buffer: two
 * buffers allocated alike differed by 1.3-1.6x, steadily over every run,
 * and which one was faster changed between invocations (how the host backs
 * the guest's memory, presumably). One set of pages for all methods keeps
 * that out of the comparison.
 */
static int slots_alloc(struct size_run *s)
{
	int fd;
	void *p = MAP_FAILED;

	s->buflen = (size_t)s->batch * s->stride;
	if (s->region) {
		s->buf = s->rbase + s->dst0;
		return 0;
	}
	fd = memfd_create("kvfs-bench", MFD_CLOEXEC);
	if (fd >= 0 && ftruncate(fd, (off_t)s->buflen) == 0)
		p = mmap(NULL, s->buflen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (fd >= 0)
		close(fd);
	if (p == MAP_FAILED)
		return -ENOMEM;
	s->buf = p;
	s->own_buf = true;
	memset(s->buf, 0, s->buflen);   /* pre-touched, as the region is */
	return 0;
}

static void slots_free(struct size_run *s)
{
	if (s->own_buf)
		munmap(s->buf, s->buflen);
	s->buf = NULL;
	s->own_buf = false;
}

static int size_setup(struct size_run *s)
{
	const struct bench_opts *o = s->b->o;
	uint64_t seed = 0x9E3779B97F4A7C15ull ^ s->size, i;
	unsigned m;

	s->stride = (s->size + BLOCK - 1) / BLOCK * BLOCK;
	s->pages = o->pages ? o->pages : (unsigned long)(o->bytes / s->size);
	if (s->pages < o->layers)
		s->pages = o->layers;
	s->batch = o->batch ? o->batch
			    : (unsigned)((s->pages + o->layers - 1) / o->layers);
	if (s->batch > KVFS_BATCH_MAX)
		s->batch = KVFS_BATCH_MAX;
	s->data = malloc(s->size);
	if (!s->data)
		return -ENOMEM;
	for (i = 0; i + 8 <= s->size; i += 8) {
		uint64_t v = xorshift(&seed);

		memcpy(s->data + i, &v, 8);
	}
	if (make_spans(s) < 0)
		return -ENOMEM;
	for (m = 0; m < M_COUNT; m++) {
		s->lat[m] = calloc(s->nspans * o->repeat, sizeof(double));
		if (!s->lat[m])
			return -ENOMEM;
	}
	return 0;
}

static void size_teardown(struct size_run *s)
{
	unsigned m;

	for (m = 0; m < M_COUNT; m++)
		free(s->lat[m]);
	free(s->order);
	free(s->spans);
	free(s->data);
}

/* Write one size's pages through the mount and, for the files method, as
 * plain files; both durable before the clock stops. */
static int size_write(struct size_run *s)
{
	int rc = write_all(s, s->b->model, false, "kvfs");

	if (rc == 0 && s->b->o->methods & 1u << M_FILES)
		rc = write_all(s, s->b->files, true, "files");
	return rc;
}

/* Read one size's pages back with every method, interleaved, and report. */
static int size_read(struct size_run *s)
{
	const struct bench_opts *o = s->b->o;
	uint64_t seed = 42 + s->size;
	char label[32];
	unsigned r, k, m;
	int rc = 0;

	size_label(s->size, label, sizeof(label));
	if (!o->json)
		printf("\n%s pages: %lu (%.1f MiB) in %u layers, batches of up to %u pages\n",
		       label, s->pages, (double)s->pages * (double)s->size / (1 << 20),
		       o->layers, s->batch);
	if (o->methods & 1u << M_FAST) {
		rc = fast_setup(s);
		/* One untimed batch maps the region into the daemon's page
		 * tables, as an engine's first request would. */
		if (rc == 0)
			rc = fast_batch(s, s->order + s->spans[0].first, s->spans[0].n);
	}
	if (rc == 0) {
		rc = slots_alloc(s);
		if (rc < 0)
			bench_err("out of memory for %u slots of %llu bytes", s->batch,
				  (unsigned long long)s->stride);
	}
	if (rc == 0 && o->methods & 1u << M_RAW)
		rc = raw_setup(s);
	for (r = 0; rc == 0 && r < o->repeat; r++) {
		shuffle_spans(s, &seed);
		/* A different method goes first in each run, so none always
		 * follows the same one. */
		for (k = 0; rc == 0 && k < M_COUNT; k++) {
			m = (r + k) % M_COUNT;
			if (o->methods & 1u << m)
				rc = run_method(s, m, &s->runs[m][r]);
		}
	}
	if (rc == 0)
		report_reads(s);
	raw_teardown(s);   /* unregisters the slots before the region goes */
	slots_free(s);
	fast_teardown(s);
	return rc;
}

/* Every size is written before any is read, then the disk is left alone
 * for a while: on this kind of VM, pages read within seconds of being
 * written came back up to ~1.5x faster than the same pages later (the
 * host still holds them), which would favour whichever method reads
 * first. */
static int bench_sizes(struct bench *b)
{
	const struct bench_opts *o = b->o;
	struct size_run *runs[SIZES_MAX] = { NULL };
	unsigned i, n = o->nsizes;
	int rc = 0;

	if (!o->json)
		printf("\nwrites (open, write, close; then fsync of the layer directories)\n"
		       "  size  to        pages     GB/s    pages/s     secs\n");
	for (i = 0; rc == 0 && i < n; i++) {
		runs[i] = calloc(1, sizeof(*runs[i]));
		if (!runs[i]) {
			rc = -ENOMEM;
			break;
		}
		runs[i]->b = b;
		runs[i]->size = o->sizes[i];
		rc = size_setup(runs[i]);
		if (rc == -ENOMEM)
			bench_err("out of memory for %llu-byte pages",
				  (unsigned long long)o->sizes[i]);
		if (rc == 0)
			rc = size_write(runs[i]);
	}
	if (rc == 0 && o->settle) {
		if (!o->json)
			printf("(waiting %u s before reading: pages read right after being "
			       "written come back faster on this kind of VM)\n", o->settle);
		fflush(stdout);
		for (i = 0; rc == 0 && i < o->settle * 10; i++) {
			rc = check_interrupt();
			usleep(100000);
		}
	}
	for (i = 0; rc == 0 && i < n; i++)
		rc = size_read(runs[i]);
	for (i = 0; i < n; i++) {
		if (runs[i])
			size_teardown(runs[i]);
		free(runs[i]);
	}
	return rc;
}

/* ---- the whole run ---- */

static void print_header(const struct bench *b)
{
	const struct bench_opts *o = b->o;
	char label[32];
	unsigned i;

	if (o->json) {
		printf("{\"event\":\"config\",\"dir\":\"%s\",\"sizes\":[", b->dir);
		for (i = 0; i < o->nsizes; i++)
			printf("%s%llu", i ? "," : "", (unsigned long long)o->sizes[i]);
		printf("],\"layers\":%u,\"qd\":%u,\"batch\":%u,\"repeats\":%u,\"settle_s\":%u,"
		       "\"cold\":%s}\n", o->layers, o->qd, o->batch, o->repeat, o->settle,
		       b->cold ? "true" : "false");
		return;
	}
	printf("kvfs bench in %s: %u layers, raw qd %u, %u run%s per method (median), "
	       "caches dropped before each read: %s\n", b->dir, o->layers, o->qd, o->repeat,
	       o->repeat > 1 ? "s" : "", b->cold ? "yes" : "NO (not root)");
	printf("sizes:");
	for (i = 0; i < o->nsizes; i++) {
		size_label(o->sizes[i], label, sizeof(label));
		printf(" %s", label);
	}
	printf("; methods: fast = libkvfs batch ioctl, fuse = open/read/close on the mount,\n"
	       "raw = io_uring O_DIRECT on the same extents, files = one buffered file per page\n");
}

static int bench_run(struct bench *b)
{
	int rc2, rc = setup_dirs(b);

	if (access("/proc/sys/vm/drop_caches", W_OK) < 0) {
		bench_err("warning: cannot drop caches (need root): reads are warm");
		b->cold = false;
	}
	if (rc == 0)
		rc = run_mkfs(b);
	if (rc == 0)
		rc = start_daemon(b);
	if (rc == 0)
		rc = make_layers(b);
	if (rc == 0 && b->o->methods & 1u << M_FAST) {
		rc = kvfs_client_open(b->model, &b->client);
		if (rc < 0)
			bench_err("kvfs_client_open %s: %s", b->model, strerror(-rc));
	}
	if (rc == 0) {
		print_header(b);
		fflush(stdout);
	}
	if (rc == 0)
		rc = bench_sizes(b);
	if (b->client)
		kvfs_client_close(b->client);
	b->client = NULL;
	if (b->daemon) {
		rc2 = stop_daemon(b);
		rc = rc ? rc : rc2;
	}
	rc2 = log_errors(b);
	rc = rc ? rc : rc2;
	if (rc == 0 && !b->o->json)
		printf("\n");
	cleanup_dirs(b);
	return rc;
}

/* ---- options ---- */

static const char bench_usage[] =
	"usage: kvfs bench [--dir DIR] [--sizes 16K,64K,256K,1M] [--pages N | --bytes TOTAL]\n"
	"                  [--layers L] [--qd Q] [--batch B] [--repeat R] [--settle S]\n"
	"                  [--methods fast,fuse,raw,files] [--quick] [--keep] [--json]\n"
	"  Makes a store, mounts it, writes each size's pages through the mount and as\n"
	"  one plain file per page, then reads them all back cold, per layer in batches\n"
	"  of B pages, four ways: fast (libkvfs batch ioctl), fuse (open/read/close on\n"
	"  the mount), raw (io_uring O_DIRECT on the same extents at queue depth Q) and\n"
	"  files (one buffered file per page). Run as root so caches can be dropped.\n"
	"  --dir DIR      workspace (default /var/tmp/kvfs-bench.XXXXXX), removed at\n"
	"                 the end unless --keep; must be on the disk to measure\n"
	"  --pages N      pages per size (default: --bytes / size)\n"
	"  --bytes TOTAL  bytes per size (default 512M)\n"
	"  --layers L     layer directories (default 32)\n"
	"  --qd Q         raw baseline queue depth, as the daemon's (default 64)\n"
	"  --batch B      pages per batch (default: all of a layer's pages)\n"
	"  --repeat R     runs of each method, interleaved (default 3)\n"
	"  --settle S     seconds to wait after writing, before reading (default 10)\n"
	"  --quick        64 pages per size, 4 layers, 1 run, no wait (a smoke test)\n";

static int parse_sizes(struct bench_opts *o, const char *arg)
{
	char *dup = strdup(arg), *save = NULL, *t;
	int rc = dup ? 0 : -ENOMEM;

	o->nsizes = 0;
	for (t = dup ? strtok_r(dup, ",", &save) : NULL; t && rc == 0;
	     t = strtok_r(NULL, ",", &save)) {
		if (o->nsizes == SIZES_MAX || kvfs_parse_size(t, &o->sizes[o->nsizes]) < 0 ||
		    o->sizes[o->nsizes] < BLOCK || o->sizes[o->nsizes] % BLOCK ||
		    o->sizes[o->nsizes] > (1ull << 30))
			rc = -EINVAL;
		else
			o->nsizes++;
	}
	free(dup);
	return rc == 0 && o->nsizes ? 0 : -EINVAL;
}

static int parse_methods(struct bench_opts *o, const char *arg)
{
	char *dup = strdup(arg), *save = NULL, *t;
	unsigned m;

	if (!dup)
		return -ENOMEM;
	o->methods = 0;
	for (t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		for (m = 0; m < M_COUNT && strcmp(t, method_name[m]); m++)
			;
		if (m == M_COUNT) {
			free(dup);
			return -EINVAL;
		}
		o->methods |= 1u << m;
	}
	free(dup);
	return o->methods ? 0 : -EINVAL;
}

static int parse_uint(const char *s, unsigned long min, unsigned long max, unsigned long *out)
{
	char *end;

	errno = 0;
	*out = strtoul(s, &end, 10);
	return errno || end == s || *end || *out < min || *out > max ? -EINVAL : 0;
}

/* Options given explicitly win over --quick, wherever they appear. */
static int parse_opts(int argc, char **argv, struct bench_opts *o)
{
	static const struct option lo[] = {
		{ "dir", required_argument, NULL, 'D' },
		{ "sizes", required_argument, NULL, 's' },
		{ "pages", required_argument, NULL, 'n' },
		{ "bytes", required_argument, NULL, 'B' },
		{ "layers", required_argument, NULL, 'l' },
		{ "qd", required_argument, NULL, 'q' },
		{ "batch", required_argument, NULL, 'b' },
		{ "repeat", required_argument, NULL, 'r' },
		{ "settle", required_argument, NULL, 'S' },
		{ "methods", required_argument, NULL, 'm' },
		{ "quick", no_argument, NULL, 'Q' },
		{ "keep", no_argument, NULL, 'k' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	bool quick = false, set_layers = false, set_repeat = false, set_settle = false;
	unsigned long v;
	int c, rc = 0;

	while (rc == 0 && (c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'D': o->dir = optarg; break;
		case 's': rc = parse_sizes(o, optarg); break;
		case 'n': rc = parse_uint(optarg, 1, UINT32_MAX, &o->pages); break;
		case 'B':
			rc = kvfs_parse_size(optarg, &o->bytes);
			o->pages = 0;
			break;
		case 'l':
			rc = parse_uint(optarg, 1, 1000, &v);
			o->layers = (unsigned)v;
			set_layers = true;
			break;
		case 'q':
			rc = parse_uint(optarg, 1, 4096, &v);
			o->qd = (unsigned)v;
			break;
		case 'b':
			rc = parse_uint(optarg, 1, KVFS_BATCH_MAX, &v);
			o->batch = (unsigned)v;
			break;
		case 'r':
			rc = parse_uint(optarg, 1, REPEAT_MAX, &v);
			o->repeat = (unsigned)v;
			set_repeat = true;
			break;
		case 'S':
			rc = parse_uint(optarg, 0, 3600, &v);
			o->settle = (unsigned)v;
			set_settle = true;
			break;
		case 'm': rc = parse_methods(o, optarg); break;
		case 'Q': quick = true; break;
		case 'k': o->keep = true; break;
		case 'j': o->json = true; break;
		case 'h': return 1;
		default: return -EINVAL;
		}
		if (rc < 0)
			fprintf(stderr, "kvfs bench: bad value \"%s\"\n", optarg);
	}
	if (rc == 0 && optind != argc)
		rc = -EINVAL;
	if (rc == 0 && quick) {
		if (!o->pages)
			o->pages = 64;
		if (!set_layers)
			o->layers = 4;
		if (!set_repeat)
			o->repeat = 1;
		if (!set_settle)
			o->settle = 0;
	}
	return rc;
}

int kvfs_cmd_bench(int argc, char **argv)
{
	struct bench_opts o = {
		.sizes = { 16 << 10, 64 << 10, 256 << 10, 1 << 20 }, .nsizes = 4,
		.bytes = 512ull << 20, .layers = 32, .qd = 64, .repeat = 3, .settle = 10,
		.methods = (1u << M_COUNT) - 1,
	};
	struct bench b = { .o = &o, .cold = true };
	struct sigaction sa = { .sa_handler = on_signal };
	int rc = parse_opts(argc, argv, &o);

	if (rc != 0) {
		fputs(bench_usage, rc > 0 ? stdout : stderr);
		return rc > 0 ? 0 : 2;
	}
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGPIPE, &sa, NULL);   /* `| head`: stop, but clean up first */
	rc = bench_run(&b);
	return rc < 0 ? 1 : 0;
}
