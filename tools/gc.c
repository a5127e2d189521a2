/*
 * `kvfs gc STORE|MOUNT --older-than DUR | --target-size SIZE`: evict pages
 * nobody holds open, least recently used first (pinned pages last, a
 * shared page's names together), the same way a full store in cache mode does. On a mount it asks
 * the daemon (KVFS_IOC_GC on the mount root); on an unmounted store it
 * opens the store itself. Exit: 0 done, 1 failed, 2 usage.
 *
 * The eviction is one call, so on a mount its status line comes from
 * watching the mount from a second thread while the call runs: statfs's
 * used blocks and inode count fall as pages go (the numbers in the summary
 * are the call's own). On an unmounted store there is nothing to watch:
 * only the final line.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "store.h"
#include "kvfs_ioctl.h"
#include "progress.h"
#include "tools.h"

#define GC_USAGE \
	"usage: kvfs gc STORE|MOUNT (--older-than DUR | --target-size SIZE) [--json]\n" \
	"               [--progress | --quiet]\n" \
	"  Evicts pages nobody holds open, least recently used first (shared and\n" \
	"  pinned pages last); on a mount through the daemon (root only).\n" \
	"  --older-than DUR   evict every page not read for DUR (e.g. 90s, 30m, 12h, 7d)\n" \
	"  --target-size SIZE evict until the store uses at most SIZE (e.g. 500G)\n" \
	"  --json             print the summary as one JSON object on stdout: pages\n" \
	"                     evicted, bytes freed, usage before and after\n" \
	"  --progress         show the status line on stderr even when it is not a\n" \
	"                     terminal (on a mount: bytes freed or pages evicted so far)\n" \
	"  -q, --quiet        never show it (default: shown when stderr is a terminal)\n" \
	"  exit: 0 done, 1 failed, 2 usage\n"

struct gc_opts {
	const char *path;
	bool json;
	enum progress_mode pm;
	int64_t age_ns;             /* --older-than, as given */
};

/* Watching a mount while the eviction call runs (see the top). */
struct gc_watch {
	const char *mnt;
	bool target;                /* bytes toward the target, else pages */
	struct progress *pr;
	uint64_t used0, nodes0;
	pthread_t th;
	atomic_bool stop;
};

/* "90", "90s", "30m", "12h", "7d" -> nanoseconds; -EINVAL if malformed. */
static int parse_duration(const char *s, int64_t *ns)
{
	static const struct { char unit; int64_t secs; } units[] = {
		{ 's', 1 }, { 'm', 60 }, { 'h', 3600 }, { 'd', 86400 }, { 'w', 604800 },
	};
	char *end;
	double v = strtod(s, &end);
	int64_t mul = 1;

	if (end == s || v < 0)
		return -EINVAL;
	if (*end) {
		mul = 0;
		for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
			if (*end == units[i].unit && end[1] == '\0')
				mul = units[i].secs;
		if (!mul)
			return -EINVAL;
	}
	if (v * (double)mul > 1e9 * 86400 * 365 * 100)
		return -EINVAL;
	*ns = (int64_t)(v * (double)mul * 1e9);
	return 0;
}

static bool is_store(const char *path)
{
	char db[4096];
	struct stat st;

	snprintf(db, sizeof(db), "%s/kvfs.db", path);
	return stat(db, &st) == 0 && S_ISREG(st.st_mode);
}

/* Used bytes and inodes (models + layers + pages + 1) of a mount. */
static int mount_usage(const char *mnt, uint64_t *used, uint64_t *nodes)
{
	struct statvfs sv;

	if (statvfs(mnt, &sv) < 0)
		return -errno;
	*used = (uint64_t)(sv.f_blocks - sv.f_bfree) * sv.f_frsize;
	*nodes = (uint64_t)(sv.f_files - sv.f_ffree);
	return 0;
}

static void *watch_main(void *arg)
{
	struct gc_watch *w = arg;
	uint64_t used = 0, nodes = 0;

	while (!atomic_load(&w->stop)) {
		usleep(100000);
		if (mount_usage(w->mnt, &used, &nodes) < 0)
			continue;
		if (w->target)
			progress_set(w->pr, w->used0 > used ? w->used0 - used : 0);
		else
			progress_set(w->pr, w->nodes0 > nodes ? w->nodes0 - nodes : 0);
	}
	return NULL;
}

/* Start the status line (and on a mount its watcher); NULL pr: none. */
static void watch_start(struct gc_watch *w, const struct gc_opts *o,
			const struct kvfs_gc_arg *a, bool mounted)
{
	uint64_t total = 0;

	memset(w, 0, sizeof(*w));
	w->mnt = o->path;
	w->target = a->flags == KVFS_GC_TARGET;
	if (!progress_wanted(o->pm))
		return;
	if (mounted && mount_usage(w->mnt, &w->used0, &w->nodes0) == 0 && w->target)
		total = w->used0 > a->target_bytes ? w->used0 - a->target_bytes : 0;
	w->pr = progress_start(o->pm, w->target ? "gc: freed" : "gc: evicted", total,
			       w->target ? PROGRESS_BYTES : "pages");
	if (w->pr && mounted && pthread_create(&w->th, NULL, watch_main, w) != 0)
		w->mnt = NULL;
	else if (!mounted)
		w->mnt = NULL;
}

/* The final line says what the call did, not what was watched. */
static void watch_stop(struct gc_watch *w, const struct kvfs_gc_arg *a, int rc)
{
	if (!w->pr)
		return;
	if (w->mnt) {
		atomic_store(&w->stop, true);
		pthread_join(w->th, NULL);
	}
	if (rc < 0) {
		progress_cancel(w->pr);
		return;
	}
	if (w->target) {
		progress_set_total(w->pr, a->used_before > a->used_after
					  ? a->used_before - a->used_after : 0);
		progress_set(w->pr, a->used_before > a->used_after
				    ? a->used_before - a->used_after : 0);
	} else {
		progress_set(w->pr, a->pages);
	}
	progress_finish(w->pr);
}

static int gc_mount(const struct gc_opts *o, struct kvfs_gc_arg *a)
{
	int fd = open(o->path, O_RDONLY | O_DIRECTORY), rc = 0;
	struct gc_watch w;

	if (fd < 0)
		return -errno;
	watch_start(&w, o, a, true);
	if (ioctl(fd, KVFS_IOC_GC, a) < 0)
		rc = -errno;
	watch_stop(&w, a, rc);
	close(fd);
	return rc;
}

static int gc_store(const struct gc_opts *o, struct kvfs_gc_arg *a)
{
	struct kvfs_opts ko;
	struct gc_watch w;
	struct kvfs *fs;
	int rc;

	kvfs_opts_default(&ko);
	ko.offline = true;    /* no RAM tier, no loader or evictor thread */
	rc = kvfs_open(o->path, &ko, &fs);
	if (rc < 0)
		return rc;
	watch_start(&w, o, a, false);
	rc = kvfs_gc(fs, a);
	kvfs_close(fs);    /* commits the deletes, frees their space */
	watch_stop(&w, a, rc);
	return rc;
}

static int gc_run(const struct gc_opts *o, struct kvfs_gc_arg *a, bool *mounted)
{
	int rc;

	*mounted = !is_store(o->path);
	if (!*mounted) {
		kv_log_set_level(KV_LOG_WARN);
		rc = gc_store(o, a);
		if (rc == -EBUSY)
			fprintf(stderr, "kvfs gc: %s is mounted: run kvfs gc on its mount point "
				"instead (no need to unmount)\n", o->path);
		return rc;
	}
	rc = gc_mount(o, a);
	if (rc == -ENOTTY)
		fprintf(stderr, "kvfs gc: %s is neither a store (no kvfs.db) nor the root of a kvfs mount\n",
			o->path);
	else if (rc == -EPERM)
		fprintf(stderr, "kvfs gc: %s: only root may evict pages\n", o->path);
	return rc;
}

/* One JSON object, also when the call failed (then with "error"). */
static void json_summary(const struct gc_opts *o, const struct kvfs_gc_arg *a, bool mounted,
			 double secs, int rc)
{
	printf("{\"path\": ");
	kvfs_json_str(stdout, o->path);
	printf(", \"mounted\": %s, ", mounted ? "true" : "false");
	if (a->flags == KVFS_GC_OLDER)
		printf("\"older_than_s\": %.3f", (double)o->age_ns / 1e9);
	else
		printf("\"target_bytes\": %" PRIu64, a->target_bytes);
	if (rc < 0) {
		printf(", \"error\": ");
		kvfs_json_str(stdout, kv_strerror(rc));
		printf(", \"exit\": 1}\n");
		return;
	}
	printf(", \"pages_evicted\": %" PRIu64 ", \"bytes_freed\": %" PRIu64
	       ", \"used_before\": %" PRIu64 ", \"used_after\": %" PRIu64
	       ", \"secs\": %.3f, \"exit\": 0}\n", a->pages,
	       a->used_before > a->used_after ? a->used_before - a->used_after : 0,
	       a->used_before, a->used_after, secs);
}

static double mono_secs(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int parse_args(struct gc_opts *o, struct kvfs_gc_arg *a, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "older-than", required_argument, NULL, 'o' },
		{ "target-size", required_argument, NULL, 't' },
		{ "json", no_argument, NULL, 'j' },
		{ "progress", no_argument, NULL, 'P' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "qh", lo, NULL)) != -1) {
		switch (c) {
		case 'o':
			if (parse_duration(optarg, &o->age_ns) < 0) {
				fprintf(stderr, "kvfs gc: bad duration \"%s\" (use e.g. 90s, 30m, 12h, 7d)\n", optarg);
				return -1;
			}
			a->flags |= KVFS_GC_OLDER;
			break;
		case 't':
			if (kvfs_parse_size(optarg, &a->target_bytes) < 0) {
				fprintf(stderr, "kvfs gc: bad size \"%s\" (use e.g. 64M, 1G, 2T)\n", optarg);
				return -1;
			}
			a->flags |= KVFS_GC_TARGET;
			break;
		case 'j': o->json = true; break;
		case 'P': o->pm = PROGRESS_ON; break;
		case 'q': o->pm = PROGRESS_OFF; break;
		case 'h':
			printf(GC_USAGE);
			return 1;
		default:
			return -1;
		}
	}
	if (optind + 1 != argc || (a->flags != KVFS_GC_OLDER && a->flags != KVFS_GC_TARGET)) {
		fprintf(stderr, GC_USAGE);
		return -1;
	}
	o->path = argv[optind];
	return 0;
}

int kvfs_cmd_gc(int argc, char **argv)
{
	struct kvfs_gc_arg a = { .abi = KVFS_ABI_VERSION };
	struct gc_opts o = { 0 };
	bool mounted;
	double t0;
	int rc;

	rc = parse_args(&o, &a, argc, argv);
	if (rc)
		return rc > 0 ? 0 : 2;
	if (a.flags == KVFS_GC_OLDER) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		a.older_than_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec - o.age_ns;
	}
	t0 = mono_secs();
	rc = gc_run(&o, &a, &mounted);
	if (o.json)
		json_summary(&o, &a, mounted, mono_secs() - t0, rc);
	if (rc < 0) {
		if (rc != -EBUSY || mounted)   /* a mounted store: gc_run said what to do */
			fprintf(stderr, "kvfs gc: %s: %s\n", o.path, kv_strerror(rc));
		return 1;
	}
	if (!o.json)
		printf("kvfs gc: evicted %" PRIu64 " pages; %" PRIu64 " -> %" PRIu64
		       " bytes used\n", a.pages, a.used_before, a.used_after);
	return 0;
}
