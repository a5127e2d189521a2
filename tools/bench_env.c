/*
 * `kvfs bench`: its child processes (mkfs, the daemon, fusermount3), the
 * daemon's CPU time and log, dropping caches, the workspace, and small
 * I/O helpers.
 */
#include "bench.h"

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
int log_errors(const struct bench *b)
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

#define BENCH_STRIPES_MAX 16

/* `kvfs mkfs STORE`, as a user would run it. KVFS_BENCH_STRIPES=N gives
 * the store N stripe directories inside STORE (one file system): how much
 * writing N segment files at once gains over one, whose writes the
 * kernel serialises on its inode lock. */
int run_mkfs(struct bench *b)
{
	char *argv[4 + 2 * BENCH_STRIPES_MAX] = { "kvfs", "mkfs", b->store };
	char dirs[BENCH_STRIPES_MAX][PATH_MAX];
	const char *env = getenv("KVFS_BENCH_STRIPES");
	int fd, st, argc = 3;
	char *end = NULL;
	long n = env && *env ? strtol(env, &end, 10) : 1;
	pid_t pid;

	if ((end && (end == env || *end)) || n < 1 || n > BENCH_STRIPES_MAX) {
		bench_err("KVFS_BENCH_STRIPES=%s: give 1 to %d", env, BENCH_STRIPES_MAX);
		return -EINVAL;
	}
	for (long i = 0; n > 1 && i < n; i++) {
		if ((size_t)snprintf(dirs[i], sizeof(dirs[i]), "%s/stripe%ld", b->store, i) >=
		    sizeof(dirs[i])) {
			bench_err("%s: path too long for its stripe directories", b->store);
			return -ENAMETOOLONG;
		}
		argv[argc++] = "--stripe";
		argv[argc++] = dirs[i];
	}
	argv[argc] = NULL;
	fd = open_log(b);
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
int start_daemon(struct bench *b)
{
	return start_daemon_wait(b, 10, 0.05);
}

/* The same, waiting up to timeout_s and looking every poll_s: the meta
 * case times a mount of millions of pages, which loads them first. */
int start_daemon_wait(struct bench *b, double timeout_s, double poll_s)
{
	/* Cold reads are the point: the RAM tier would turn them into copies. */
	char opts[64];
	char *argv[] = { "kvfs", "mount", b->store, b->mnt, "-f", "-o", opts, NULL };
	double end = now_s() + timeout_s;
	int fd = open_log(b), st;

	if (fd < 0)
		return fd;
	/* -o index_pages only where the meta case asks: the other cases
	 * start before there are pages to leave out */
	if (b->o->meta_index_pages)
		snprintf(opts, sizeof(opts), "ram_cache=0,index_pages=%llu",
			 (unsigned long long)b->o->meta_index_pages);
	else
		snprintf(opts, sizeof(opts), "ram_cache=0");
	/* KVFS_BENCH_DAEMON: another build's kvfs serves the mount, so two
	 * daemons are compared by one bench, on the same files, in one run
	 * window (docs/benchmarks/metadata.md). */
	const char *exe = getenv("KVFS_BENCH_DAEMON");

	b->daemon = spawn(exe && *exe ? exe : "/proc/self/exe", argv, fd, true);
	close(fd);
	if (b->daemon < 0) {
		b->daemon = 0;
		bench_err("fork: %s", strerror(errno));
		return -errno;
	}
	do {
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
		usleep((useconds_t)(poll_s * 1e6));
	} while (now_s() < end);
	bench_err("%s was not mounted within %.0f s", b->mnt, timeout_s);
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

/* Run `kvfs ARGV...` (argv[0] is "kvfs") to the end, its stdout into out
 * (up to len - 1 bytes, NUL-terminated), its stderr into the log. Returns
 * its exit status (128 + signal if killed), or -errno if it did not run. */
int run_tool(const struct bench *b, char *const argv[], char *out, size_t len)
{
	int p[2], fd = open_log(b), st;
	size_t got = 0;
	ssize_t n;
	pid_t pid;

	if (fd < 0)
		return fd;
	if (pipe2(p, O_CLOEXEC) < 0) {
		st = -errno;
		close(fd);
		bench_err("pipe: %s", strerror(-st));
		return st;
	}
	pid = fork();
	if (pid == 0) {
		dup2(p[1], STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	st = pid < 0 ? -errno : 0;
	close(p[1]);
	close(fd);
	/* Read to the end before waiting: a full pipe would block the child. */
	while (pid > 0 && (n = read(p[0], out + got, len - 1 - got)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		got += (size_t)n;
		if (got == len - 1) {   /* keep draining; the rest is not needed */
			char sink[4096];

			while ((n = read(p[0], sink, sizeof(sink))) > 0 || (n < 0 && errno == EINTR))
				;
			break;
		}
	}
	out[got] = '\0';
	close(p[0]);
	if (pid < 0) {
		bench_err("fork: %s", strerror(-st));
		return st;
	}
	return wait_exit(pid);
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
int stop_daemon(struct bench *b)
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
int daemon_cpu(const struct bench *b, double *secs)
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

/* Two "key: value" lines of /proc/DAEMON/file, in *v1 and *v2: bytes
 * where the line says kB (as /proc/PID/status does). -ENOTSUP if either
 * is missing. */
int daemon_proc_pair(const struct bench *b, const char *file, const char *k1,
		     const char *k2, uint64_t *v1, uint64_t *v2)
{
	char path[64], line[256], unit[8];
	unsigned long long v;
	size_t n1 = strlen(k1), n2 = strlen(k2);
	int found = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)b->daemon, file);
	f = fopen(path, "re");
	if (!f) {
		bench_err("%s: %s (did the daemon die?)", path, strerror(errno));
		return -errno;
	}
	while (fgets(line, sizeof(line), f)) {
		bool one = !strncmp(line, k1, n1) && line[n1] == ':';

		if ((!one && (strncmp(line, k2, n2) || line[n2] != ':')) ||
		    sscanf(line + (one ? n1 : n2) + 1, "%llu %7s", &v, unit) < 1)
			continue;
		if (strstr(line, " kB"))
			v <<= 10;
		*(one ? v1 : v2) = v;
		found |= one ? 1 : 2;
	}
	fclose(f);
	return found == 3 ? 0 : -ENOTSUP;
}

/* Bytes the daemon has read from and written to the block layer so far
 * (/proc/PID/io; io_uring workers are its threads, so they count too). */
int daemon_io(const struct bench *b, uint64_t *read_bytes, uint64_t *write_bytes)
{
	int rc = daemon_proc_pair(b, "io", "read_bytes", "write_bytes", read_bytes,
				  write_bytes);

	if (rc == -ENOTSUP)
		bench_err("/proc/%d/io: no read_bytes/write_bytes (kernel without I/O "
			  "accounting?)", (int)b->daemon);
	return rc;
}

double self_cpu(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* Make the next read cold: write back dirty pages, then drop the page,
 * dentry and inode caches (the mount's too, so FUSE pays its lookups). */
void drop_caches(struct bench *b)
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

int setup_dirs(struct bench *b)
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
	snprintf(b->wmodel, sizeof(b->wmodel), "%s/" WMODEL, b->mnt);
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
int make_layers(struct bench *b)
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

void rm_tree(const char *path)
{
	if (access(path, F_OK) == 0)
		nftw(path, rm_entry, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

void cleanup_dirs(struct bench *b)
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

/* ---- small I/O helpers (silent: callers report) ---- */

int read_full(int fd, char *buf, size_t len)
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

int write_full(int fd, const char *buf, size_t len)
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

int make_dir(const char *path)
{
	if (mkdir(path, 0755) < 0) {
		bench_err("mkdir %s: %s", path, strerror(errno));
		return -errno;
	}
	return 0;
}
