/*
 * `kvfs mount`: check the mountpoint, bring the store up, mount it with the
 * low-level libfuse API and serve it on a multi-threaded loop. Without -f the
 * daemon detaches, but only after the store is open and the mount is in
 * place, so every startup error reaches the terminal and the exit status.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "events_file.h"
#include "mount.h"
#include "fast.h"
#include "notifier.h"
#include "ops.h"

struct mount_cfg {
	const char *store;
	const char *mnt;
	bool foreground;
	bool debug;
	bool quiet;
	char log_path[PATH_MAX];
	char fuse_opts[4096];
	struct kvfs_opts opts;
};

/* While a detaching daemon starts, its lines go to the log file too (the
 * startup lines belong in the log), and only warnings and errors to the
 * terminal. Once detached, stderr is the log and this is -1. Never closed:
 * a thread may still be writing to it as it is switched off. */
static int startup_log_fd = -1;

/* SIGHUP asks a detached daemon to reopen its log (logrotate's postrotate
 * convention); the next line does it. libfuse would unmount on SIGHUP. */
static volatile sig_atomic_t log_reopen;
static char detached_log_path[PATH_MAX];

static void on_sighup(int sig)
{
	(void)sig;
	log_reopen = 1;
}

static void reopen_log(void)
{
	int fd;

	log_reopen = 0;
	if (!detached_log_path[0])
		return;
	fd = open(detached_log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (fd < 0)
		return;   /* keep writing to the old one */
	dup2(fd, STDERR_FILENO);
	close(fd);
}

/* Daemon log lines carry a UTC timestamp and the pid: the log outlives the
 * terminal and is read after the fact. One write(2) per line keeps lines
 * from different threads whole. */
static void daemon_log_sink(enum kv_log_level lvl, const char *line)
{
	static const char *const names[] = { "error", "warning", "info", "debug" };
	struct timespec ts;
	struct tm tm;
	char buf[4096];
	int n;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ kvfs[%d]: %s: %s\n",
		     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
		     tm.tm_sec, ts.tv_nsec / 1000000, (int)getpid(), names[lvl], line);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(buf)) {
		n = sizeof(buf) - 1;
		buf[n - 1] = '\n';
	}
	int tee = __atomic_load_n(&startup_log_fd, __ATOMIC_ACQUIRE);

	if (log_reopen)
		reopen_log();

	if (tee >= 0 && (write(tee, buf, (size_t)n) < 0 || lvl > KV_LOG_WARN))
		return;
	if (write(STDERR_FILENO, buf, (size_t)n) < 0)
		return;   /* nowhere left to report it */
}

static void mount_usage(FILE *f)
{
	fprintf(f,
		"usage: kvfs mount STORE MOUNTPOINT [-f] [-d] [-q] [-o opt[,opt...]]\n"
		"  Serves STORE at MOUNTPOINT; without -f the daemon detaches once the\n"
		"  store is open and the mount in place. Also: mount -t fuse.kvfs.\n"
		"  -f                 stay in the foreground, log to stderr (systemd:\n"
		"                     tells NOTIFY_SOCKET READY=1 once mounted)\n"
		"  -d                 debug log (implies -f)\n"
		"  -q                 do not print the \"mounted\" line\n"
		"  -o max_page=SIZE   largest page of a model without geometry\n"
		"                     (default 64M, at most the store's segment size)\n"
		"  -o entry_timeout=S seconds the kernel caches sealed pages' names/attrs (default 3600)\n"
		"  -o commit_batch=N  most changes per manifest transaction (default 4096)\n"
		"  -o events_ring=N   KV event records .kvfs/events keeps (default 16384)\n"
		"  -o no_direct       buffered segment I/O (stripes on tmpfs)\n"
		"  -o dirty=SIZE      RAM for pages sealed but not yet durable; writers\n"
		"                     wait when it is full (default 256M)\n"
		"  -o nodedup         never share extents between identical pages\n"
		"  -o ram_cache=SIZE  RAM tier for hot pages (default 512M, 0 = off)\n"
		"  -o read_hold=SIZE  page bytes one uid's open page files keep loaded\n"
		"                     between reads (default 256M)\n"
		"  -o capacity=SIZE   physical byte budget (default: the one set at mkfs)\n"
		"  -o authoritative   a full store refuses writes (ENOSPC) instead of\n"
		"                     evicting least recently used pages\n"
		"  -o evict_high=PCT  usage (%% of capacity) that starts eviction (default 95)\n"
		"  -o evict_low=PCT   usage eviction brings it down to (default 90)\n"
		"  -o open_share=PCT  most of the capacity one uid's page files (open,\n"
		"                     or being written) keep from eviction in cache\n"
		"                     mode (root: no limit); past it open and create\n"
		"                     fail with EMFILE, writes with EDQUOT (default\n"
		"                     25, 100 = no limit)\n"
		"  -o dir_share=N     most directories (models and layers) one uid\n"
		"                     other than root may own; past it mkdir fails\n"
		"                     with EDQUOT (default 200000, 0 = no limit)\n"
		"  -o index_pages=N   most pages the index keeps in RAM (a plain number;\n"
		"                     default 0: all); layers beyond it, the least\n"
		"                     recently changed, stay in the manifest until\n"
		"                     used; after the load, layers unused for 5 s go\n"
		"                     back while more than N pages are in RAM\n"
		"  -o eager_load      load the whole index (and check the manifest)\n"
		"                     before the mount answers; by default it answers\n"
		"                     at once and loads in the background: until then\n"
		"                     a lookup, listing or change first loads the\n"
		"                     layers it touches. With it, index_pages is ignored\n"
		"  -o degraded        mount even if a stripe's directory or marker is\n"
		"                     missing: its pages give EIO, nothing is written,\n"
		"                     reclaimed or deleted there (docs/operators.md)\n"
		"  -o log=PATH        daemon log when detached (default STORE/kvfs.log)\n"
		"  -o fault_injection tests: let root make I/O fail on purpose\n"
		"                     (setfattr -n user.kvfs.fault; docs/testing.md)\n"
		"  other -o options go to FUSE (allow_other, ro, ...), except those only\n"
		"  mount(8) and systemd read (noauto, nofail, x-*, uhelper=, ...): ignored\n");
}

/* Options for mount(8), fstab and systemd only, never for the filesystem:
 * ignored, so an fstab line's options also work with kvfs mount -o. */
static bool userspace_only(const char *opt)
{
	static const char *const names[] = {
		"defaults", "auto", "noauto", "user", "users", "nouser", "owner",
		"group", "nofail", "_netdev", "loop",
		/* FUSE keeps no atime: the kernel flags would be refused */
		"atime", "relatime", "strictatime", NULL,
	};
	static const char *const prefixes[] = {
		"x-", "comment=", "helper=", "uhelper=", NULL,
	};

	for (int i = 0; names[i]; i++)
		if (!strcmp(opt, names[i]))
			return true;
	for (int i = 0; prefixes[i]; i++)
		if (!strncmp(opt, prefixes[i], strlen(prefixes[i])))
			return true;
	return false;
}

/* Returns 1 if opt was a kvfs option, 0 if it belongs to FUSE, <0 if bad. */
static int kvfs_option(struct mount_cfg *c, const char *opt)
{
	const char *v = strchr(opt, '=');
	uint64_t size;
	char *end;

	if (userspace_only(opt))
		return 1;
	if (!strcmp(opt, "no_direct")) {
		c->opts.no_direct = true;
		return 1;
	}
	if (!strcmp(opt, "nodedup")) {
		c->opts.dedup = false;
		return 1;
	}
	if (!strcmp(opt, "fault_injection")) {
		c->opts.fault_injection = true;
		return 1;
	}
	if (!strcmp(opt, "eager_load")) {
		c->opts.background_load = false;
		return 1;
	}
	if (!strcmp(opt, "degraded")) {
		c->opts.degraded = true;
		return 1;
	}
	if (!strcmp(opt, "authoritative")) {
		c->opts.authoritative = true;
		return 1;
	}
	if (!v)
		return 0;
	v++;
	if (!strncmp(opt, "max_page=", 9)) {
		if (kvfs_parse_size(v, &size) < 0 || size == 0)
			return -EINVAL;
		c->opts.max_page = size;
		return 1;
	}
	if (!strncmp(opt, "dirty=", 6)) {
		if (kvfs_parse_size(v, &size) < 0 || size < KV_ALIGN)
			return -EINVAL;
		c->opts.dirty_budget = size;
		return 1;
	}
	if (!strncmp(opt, "ram_cache=", 10))
		return kvfs_parse_size(v, &c->opts.ram_cache) < 0 ? -EINVAL : 1;
	if (!strncmp(opt, "read_hold=", 10))
		return kvfs_parse_size(v, &c->opts.read_hold) < 0 ? -EINVAL : 1;
	if (!strncmp(opt, "capacity=", 9)) {
		if (kvfs_parse_size(v, &size) < 0 || size < KVFS_CAPACITY_MIN)
			return -EINVAL;
		c->opts.capacity = size;
		return 1;
	}
	if (!strncmp(opt, "evict_high=", 11) || !strncmp(opt, "evict_low=", 10) ||
	    !strncmp(opt, "open_share=", 11)) {
		unsigned long pct = strtoul(v, &end, 10);

		if (*end || pct < 1 || pct > 100)
			return -EINVAL;
		if (!strncmp(opt, "open_share=", 11))
			c->opts.open_share = (unsigned)pct;
		else if (!strncmp(opt, "evict_high=", 11))
			c->opts.evict_high = (unsigned)pct;
		else
			c->opts.evict_low = (unsigned)pct;
		return 1;
	}
	if (!strncmp(opt, "entry_timeout=", 14)) {
		c->opts.entry_timeout = strtod(v, &end);
		return *end || c->opts.entry_timeout < 0 ? -EINVAL : 1;
	}
	if (!strncmp(opt, "events_ring=", 12)) {
		unsigned long n = strtoul(v, &end, 10);

		c->opts.events_ring = (unsigned)n;
		return *end || !*v || n == 0 || n > KVFS_EVENTS_RING_MAX ? -EINVAL : 1;
	}
	if (!strncmp(opt, "dir_share=", 10)) {
		errno = 0;
		c->opts.dir_share = strtoull(v, &end, 10);
		return *end || !*v || *v == '-' || errno ? -EINVAL : 1;
	}
	if (!strncmp(opt, "index_pages=", 12)) {
		errno = 0;
		c->opts.index_pages = strtoull(v, &end, 10);
		return *end || !*v || *v == '-' || errno ? -EINVAL : 1;
	}
	if (!strncmp(opt, "commit_batch=", 13)) {
		c->opts.commit_batch = (unsigned)strtoul(v, &end, 10);
		return *end || c->opts.commit_batch == 0 ? -EINVAL : 1;
	}
	if (!strncmp(opt, "log=", 4)) {
		snprintf(c->log_path, sizeof(c->log_path), "%s", v);
		return 1;
	}
	return 0;
}

/* What a refused value must be, for the options with a bound. */
static const char *option_rule(const char *opt)
{
	if (!strncmp(opt, "capacity=", 9))
		return "a size of at least 1M, e.g. 800G";
	if (!strncmp(opt, "dirty=", 6))
		return "a size of at least 4K, e.g. 256M";
	if (!strncmp(opt, "ram_cache=", 10) || !strncmp(opt, "max_page=", 9))
		return "a size such as 512M (ram_cache=0: off)";
	if (!strncmp(opt, "read_hold=", 10))
		return "a size such as 256M (0: every read loads its page)";
	if (!strncmp(opt, "evict_high=", 11) || !strncmp(opt, "evict_low=", 10) ||
	    !strncmp(opt, "open_share=", 11))
		return "a percentage, 1 to 100";
	if (!strncmp(opt, "dir_share=", 10) || !strncmp(opt, "index_pages=", 12))
		return "a plain number (0: no limit)";
	return "see kvfs mount --help";
}

static int add_options(struct mount_cfg *c, const char *list)
{
	char *dup = strdup(list), *save = NULL, *opt;
	int rc = 0;

	if (!dup)
		return -ENOMEM;
	for (opt = strtok_r(dup, ",", &save); opt && rc >= 0; opt = strtok_r(NULL, ",", &save)) {
		rc = kvfs_option(c, opt);
		if (rc < 0)
			fprintf(stderr, "kvfs mount: bad option value: %s (%s)\n", opt,
				option_rule(opt));
		else if (rc == 0)
			snprintf(c->fuse_opts + strlen(c->fuse_opts),
				 sizeof(c->fuse_opts) - strlen(c->fuse_opts), ",%s", opt);
	}
	free(dup);
	return rc < 0 ? rc : 0;
}

/* parse_args: a bad option, named on stderr already (no usage dump). */
#define OPTION_REPORTED (-EDOM)

static int parse_args(struct mount_cfg *c, int argc, char **argv)
{
	int i, npos = 0;

	memset(c, 0, sizeof(*c));
	kvfs_opts_default(&c->opts);
	c->opts.background_load = true;   /* -o eager_load: not */
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-f")) {
			c->foreground = true;
		} else if (!strcmp(argv[i], "-q")) {
			c->quiet = true;
		} else if (!strcmp(argv[i], "-d")) {
			c->debug = c->foreground = true;
		} else if (!strcmp(argv[i], "-o") && i + 1 < argc) {
			if (add_options(c, argv[++i]) < 0)
				return OPTION_REPORTED;
		} else if (!strncmp(argv[i], "-o", 2) && argv[i][2]) {
			if (add_options(c, argv[i] + 2) < 0)
				return OPTION_REPORTED;
		} else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			mount_usage(stdout);
			exit(0);
		} else if (argv[i][0] == '-') {
			fprintf(stderr, "kvfs mount: unknown flag %s\n", argv[i]);
			return -EINVAL;
		} else if (npos == 0) {
			c->store = argv[i];
			npos++;
		} else if (npos == 1) {
			c->mnt = argv[i];
			npos++;
		} else {
			return -EINVAL;
		}
	}
	if (npos != 2)
		return -EINVAL;
	if (c->opts.evict_low >= c->opts.evict_high) {
		fprintf(stderr, "kvfs mount: evict_low (%u%%) must be below evict_high (%u%%)\n",
			c->opts.evict_low, c->opts.evict_high);
		return OPTION_REPORTED;
	}
	if (!c->log_path[0])
		snprintf(c->log_path, sizeof(c->log_path), "%s/kvfs.log", c->store);
	return 0;
}

/*
 * Something already mounted at mnt: say what, and for a kvfs mount whose
 * daemon is gone (ENOTCONN) or does not answer, how to recover. The probe
 * runs in a child with a deadline: a hung daemon would block us too.
 */
static int explain_busy_mountpoint(const char *mnt, const struct kvfs_mount_info *m)
{
	int rc = kvfs_mount_probe(mnt, 2000);

	if (rc == -ENOTCONN)
		fprintf(stderr,
			"kvfs mount: %s is a stale FUSE mount: its daemon is gone "
			"(killed or crashed).\n"
			"  Clear it with:  kvfs umount %s   (or: fusermount3 -u -z %s)\n"
			"  then mount again; every committed page is still in the store.\n",
			mnt, mnt, mnt);
	else if (rc == -ETIMEDOUT)
		fprintf(stderr,
			"kvfs mount: %s is a hung FUSE mount (%s): its daemon does not "
			"answer within 2 s (stopped, stuck or overloaded).\n"
			"  Recover with:  kvfs umount --force %s\n"
			"  (aborts the connection, ends the daemon, detaches the mount); "
			"then mount again.\n", mnt, m->source, mnt);
	else
		fprintf(stderr, "kvfs mount: %s is already a mount point (%s, %s); "
			"unmount it first (kvfs umount %s)\n", mnt, m->fstype, m->source, mnt);
	return rc == -ENOTCONN || rc == -ETIMEDOUT ? rc : -EBUSY;
}

/* A mountpoint must be an existing directory that nothing is mounted on. */
static int check_mountpoint(const char *mnt)
{
	struct kvfs_mount_info m;
	struct stat st, parent;
	char up[PATH_MAX];

	if (kvfs_mount_find(mnt, &m) == 0)
		return explain_busy_mountpoint(mnt, &m);
	if (stat(mnt, &st) < 0) {
		fprintf(stderr, "kvfs mount: mountpoint %s: %s\n", mnt, strerror(errno));
		return -errno;
	}
	if (!S_ISDIR(st.st_mode)) {
		fprintf(stderr, "kvfs mount: mountpoint %s is not a directory\n", mnt);
		return -ENOTDIR;
	}
	snprintf(up, sizeof(up), "%s/..", mnt);
	if (stat(up, &parent) == 0 && (parent.st_dev != st.st_dev || parent.st_ino == st.st_ino)) {
		fprintf(stderr,
			"kvfs mount: %s is already a mount point; unmount it first "
			"(fusermount3 -u %s)\n", mnt, mnt);
		return -EBUSY;
	}
	return 0;
}

/* Before anything else looks in it (the log lives there): the store must
 * be a directory that exists, and the message must say so. */
static int check_store(const char *store)
{
	struct stat st;

	if (stat(store, &st) < 0) {
		int err = errno;

		fprintf(stderr, "kvfs mount: cannot open store %s: %s%s\n", store, strerror(err),
			err == ENOENT ? " (make one with kvfs mkfs, or check the path)" : "");
		return -err;
	}
	if (!S_ISDIR(st.st_mode)) {
		fprintf(stderr, "kvfs mount: store %s is not a directory\n", store);
		return -ENOTDIR;
	}
	return 0;
}

static struct fuse_session *session_new(struct mount_cfg *c, struct kvfs *fs)
{
	char abs[PATH_MAX], base[PATH_MAX + sizeof(c->fuse_opts) + 128];
	char *argv[5];
	int argc = 0;
	struct fuse_args args;
	struct fuse_session *se;

	if (!realpath(c->store, abs))
		snprintf(abs, sizeof(abs), "%s", c->store);
	/* default_permissions: the kernel enforces mode bits, as for any fs. */
	snprintf(base, sizeof(base), "default_permissions,max_read=1048576,fsname=kvfs:%s,subtype=kvfs%s",
		 abs, c->fuse_opts);
	argv[argc++] = "kvfs";
	argv[argc++] = "-o";
	argv[argc++] = base;
	if (c->debug)
		argv[argc++] = "-d";
	argv[argc] = NULL;
	args = (struct fuse_args)FUSE_ARGS_INIT(argc, argv);
	se = fuse_session_new(&args, &kvfs_ops, sizeof(kvfs_ops), fs);
	fuse_opt_free_args(&args);   /* parsing may have copied them */
	return se;
}

static int serve(struct fuse_session *se)
{
	struct fuse_loop_config *lc = fuse_loop_cfg_create();
	int rc;

	if (!lc)
		return -ENOMEM;
	fuse_loop_cfg_set_max_threads(lc, 16);
	rc = fuse_session_loop_mt(se, lc);
	fuse_loop_cfg_destroy(lc);
	return rc;
}

/* Detached: log to the log file, tell the waiting parent we are up. */
static int open_startup_log(struct mount_cfg *c)
{
	int log = open(c->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);

	if (log < 0) {
		fprintf(stderr, "kvfs mount: cannot open log %s: %s\n", c->log_path,
			strerror(errno));
		return -errno;
	}
	__atomic_store_n(&startup_log_fd, log, __ATOMIC_RELEASE);
	return 0;
}

static int detach_io(struct mount_cfg *c, int status_fd)
{
	int null = open("/dev/null", O_RDWR);
	int log = __atomic_load_n(&startup_log_fd, __ATOMIC_ACQUIRE);
	char ok = 0;

	if (null < 0) {
		fprintf(stderr, "kvfs mount: /dev/null: %s\n", strerror(errno));
		return -errno;
	}
	if (!c->quiet)
		fprintf(stderr, "kvfs: mounted %s at %s (daemon pid %d, log %s)\n",
			c->store, c->mnt, (int)getpid(), c->log_path);
	dup2(null, STDIN_FILENO);
	dup2(null, STDOUT_FILENO);
	dup2(log, STDERR_FILENO);
	snprintf(detached_log_path, sizeof(detached_log_path), "%s", c->log_path);
	__atomic_store_n(&startup_log_fd, -1, __ATOMIC_RELEASE);
	close(null);
	if (write(status_fd, &ok, 1) != 1)
		return -EIO;
	close(status_fd);
	return 0;
}

/*
 * systemd's readiness protocol (sd_notify(3)) without libsystemd: one
 * datagram to $NOTIFY_SOCKET. A Type=notify unit then counts as started
 * only once the mount is in place. Best effort: a unit without it works.
 */
static void sd_notify_state(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t len;
	int fd;

	if (!path || (path[0] != '/' && path[0] != '@') ||
	    (len = strlen(path)) >= sizeof(sa.sun_path))
		return;
	memcpy(sa.sun_path, path, len);
	if (sa.sun_path[0] == '@')
		sa.sun_path[0] = '\0';   /* an abstract socket */
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	if (sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa,
		   (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len)) < 0)
		kv_log(KV_LOG_WARN, "sd_notify to %s: %s", path, strerror(errno));
	close(fd);
}

static int set_sighup(void)
{
	struct sigaction sa = { .sa_handler = on_sighup };

	sigemptyset(&sa.sa_mask);
	return sigaction(SIGHUP, &sa, NULL);
}

/* One descriptor per segment file: a big store needs more than the usual
 * soft limit of 1024, and the hard limit is ours to take. */
static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= rl.rlim_max)
		return;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
		kv_log(KV_LOG_DEBUG, "open files limit raised to %llu",
		       (unsigned long long)rl.rlim_cur);
}

/* What the engine tells this front end (kvfs_i.h, struct kvfs_hooks). */
static uint64_t hook_name_gone(void *ctx, uint64_t parent, const char *name)
{
	(void)ctx;
	return kvfs_notifier_forget(parent, name);
}

static int hook_names_sent(void *ctx, uint64_t ticket, unsigned timeout_ms)
{
	(void)ctx;
	return kvfs_notifier_wait(ticket, timeout_ms);
}

static void hook_events_ready(void *ctx)
{
	kvfs_events_file_wake(ctx);
}

static struct kvfs_hooks fuse_hooks = {
	.name_gone = hook_name_gone,
	.names_sent = hook_names_sent,
	.events_ready = hook_events_ready,
};

static int run_daemon(struct mount_cfg *c, int status_fd)
{
	struct fuse_session *se = NULL;
	struct kvfs *fs = NULL;
	uint64_t lost;
	int rc;

	if (c->debug)
		kv_log_set_level(KV_LOG_DEBUG);
	/* ps, top and kvfs umount know the daemon as "kvfs", whichever name
	 * (mount.fuse.kvfs) started it. */
	prctl(PR_SET_NAME, "kvfs", 0, 0, 0);
	kv_log_set_sink(daemon_log_sink);
	if (status_fd >= 0 && open_startup_log(c) < 0)
		return 1;
	raise_nofile();
	rc = kvfs_open(c->store, &c->opts, &fs);
	if (rc < 0) {
		fprintf(stderr, "kvfs mount: cannot open store %s: %s\n", c->store, kv_strerror(rc));
		return 1;
	}
	if (kvfs_mountpoint_outside(c->mnt, c->store, fs) < 0)
		goto out;
	rc = kvfs_fast_start(fs);
	if (rc < 0) {
		fprintf(stderr, "kvfs mount: cannot start the fast path: %s\n", kv_strerror(rc));
		goto out;
	}
	se = session_new(c, fs);
	if (!se) {
		fprintf(stderr, "kvfs mount: bad mount options\n");
		goto out;
	}
	if (fuse_set_signal_handlers(se) < 0 || set_sighup() < 0 ||
	    fuse_session_mount(se, c->mnt) < 0) {
		fprintf(stderr, "kvfs mount: cannot mount at %s\n", c->mnt);
		goto out;
	}
	if (status_fd >= 0 && detach_io(c, status_fd) < 0) {
		fuse_session_unmount(se);
		goto out;
	}
	kv_log(KV_LOG_INFO, "serving %s at %s", c->store, c->mnt);
	if (c->foreground)
		sd_notify_state("READY=1\nSTATUS=serving");
	/* Fast-path writes and the evictor replace and remove pages behind
	 * the kernel's back: the notifier makes it drop their cached names.
	 * Fast-path calls run on the executor, never on a FUSE worker; without
	 * it (no threads) they run inline, as a degraded mode. */
	kvfs_notifier_start(se);
	fuse_hooks.ctx = fs;
	kvfs_set_hooks(fs, &fuse_hooks);
	rc = serve(se);   /* < 0: error; > 0: the signal that ended it */
	/* The background load gives up at its next step. */
	kvfs_load_cancel(fs);
	/* Readers parked on .kvfs/events get end of file while the session
	 * can still answer them. */
	kvfs_events_shutdown(fs);
	if (c->foreground)
		sd_notify_state("STOPPING=1\nSTATUS=committing and unmounting");
	/* Calls already queued finish and reply while the session's fd is
	 * open; then the evictor, then the notifier, which both feed it. */
	kvfs_fast_stop(fs);
	kvfs_cap_stop(fs);
	kvfs_notifier_stop();
	fuse_session_unmount(se);
	kvfs_set_hooks(fs, NULL);
	lost = kvfs_close(fs);   /* commits everything still queued */
	fs = NULL;
	if (rc > 0)
		kv_log(KV_LOG_INFO, "signal %d: unmounted %s after committing everything", rc, c->mnt);
	else
		kv_log(rc < 0 ? KV_LOG_ERR : KV_LOG_INFO, "unmounted %s%s", c->mnt,
		       rc < 0 ? " after a FUSE session error" : "");
	fuse_remove_signal_handlers(se);
	fuse_session_destroy(se);
	return rc < 0 || lost ? 1 : 0;
out:
	if (se) {
		fuse_remove_signal_handlers(se);
		fuse_session_destroy(se);
	}
	if (fs)
		kvfs_fast_stop(fs);
	kvfs_close(fs);
	return 1;
}

/* Fork before any thread exists; the parent waits for "mounted" or failure. */
static int run_detached(struct mount_cfg *c)
{
	int pfd[2];
	pid_t pid;
	char st;

	if (pipe2(pfd, O_CLOEXEC) < 0)
		return 1;
	pid = fork();
	if (pid < 0) {
		perror("kvfs mount: fork");
		return 1;
	}
	if (pid == 0) {
		close(pfd[0]);
		setsid();
		_exit(run_daemon(c, pfd[1]));
	}
	close(pfd[1]);
	if (read(pfd[0], &st, 1) != 1)
		return 1;   /* the child printed why */
	return 0;
}

int kvfs_mount_main(int argc, char **argv)
{
	struct mount_cfg c;
	int rc;

	rc = parse_args(&c, argc, argv);
	if (rc < 0) {
		if (rc != OPTION_REPORTED)
			mount_usage(stderr);
		return 2;
	}
	if (check_store(c.store) < 0 || check_mountpoint(c.mnt) < 0 ||
	    kvfs_mountpoint_outside(c.mnt, c.store, NULL) < 0)
		return 1;
	if (c.foreground)
		return run_daemon(&c, -1);
	return run_detached(&c);
}
