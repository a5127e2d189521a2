/*
 * `kvfs gc STORE|MOUNT --older-than DUR | --target-size SIZE`: evict pages
 * nobody holds open, least recently used first (shared and pinned pages
 * last), the same way a full store in cache mode does. On a mount it asks
 * the daemon (KVFS_IOC_GC on the mount root); on an unmounted store it
 * opens the store itself. Exit: 0 done, 1 failed, 2 usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fs.h"
#include "store.h"
#include "kvfs_ioctl.h"
#include "tools.h"

#define GC_USAGE "usage: kvfs gc STORE|MOUNT (--older-than DUR | --target-size SIZE)\n" \
	"  --older-than DUR   evict every page not read for DUR (e.g. 90s, 30m, 12h, 7d)\n" \
	"  --target-size SIZE evict until the store uses at most SIZE (e.g. 500G)\n"

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

static int gc_mount(const char *mnt, struct kvfs_gc_arg *a)
{
	int fd = open(mnt, O_RDONLY | O_DIRECTORY), rc = 0;

	if (fd < 0)
		return -errno;
	if (ioctl(fd, KVFS_IOC_GC, a) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

static int gc_store(const char *store, struct kvfs_gc_arg *a)
{
	struct kvfs_opts o;
	struct kvfs *fs;
	int rc;

	kvfs_opts_default(&o);
	o.ram_cache = 0;
	rc = kvfs_open(store, &o, &fs);
	if (rc < 0)
		return rc;
	rc = kvfs_gc(fs, a);
	kvfs_close(fs);    /* commits the deletes, frees their space */
	return rc;
}

static int gc_run(const char *path, struct kvfs_gc_arg *a)
{
	int rc;

	if (is_store(path)) {
		kv_log_set_level(KV_LOG_WARN);
		rc = gc_store(path, a);
		if (rc == -EBUSY)
			fprintf(stderr, "kvfs gc: %s is mounted: run kvfs gc on its mount point\n", path);
		return rc;
	}
	rc = gc_mount(path, a);
	if (rc == -ENOTTY)
		fprintf(stderr, "kvfs gc: %s is neither a store (no kvfs.db) nor the root of a kvfs mount\n", path);
	else if (rc == -EPERM)
		fprintf(stderr, "kvfs gc: %s: only root may evict pages\n", path);
	return rc;
}

int kvfs_cmd_gc(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "older-than", required_argument, NULL, 'o' },
		{ "target-size", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct kvfs_gc_arg a = { .abi = KVFS_ABI_VERSION };
	int64_t age = 0;
	int c, rc;

	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'o':
			if (parse_duration(optarg, &age) < 0) {
				fprintf(stderr, "kvfs gc: bad duration \"%s\" (use e.g. 90s, 30m, 12h, 7d)\n", optarg);
				return 2;
			}
			a.flags |= KVFS_GC_OLDER;
			break;
		case 't':
			if (kvfs_parse_size(optarg, &a.target_bytes) < 0) {
				fprintf(stderr, "kvfs gc: bad size \"%s\" (use e.g. 64M, 1G, 2T)\n", optarg);
				return 2;
			}
			a.flags |= KVFS_GC_TARGET;
			break;
		case 'h':
			printf(GC_USAGE);
			return 0;
		default:
			return 2;
		}
	}
	if (optind + 1 != argc || (a.flags != KVFS_GC_OLDER && a.flags != KVFS_GC_TARGET)) {
		fprintf(stderr, GC_USAGE);
		return 2;
	}
	if (a.flags == KVFS_GC_OLDER) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		a.older_than_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec - age;
	}
	rc = gc_run(argv[optind], &a);
	if (rc < 0) {
		fprintf(stderr, "kvfs gc: %s: %s\n", argv[optind], kv_strerror(rc));
		return 1;
	}
	printf("kvfs gc: evicted %" PRIu64 " pages; %" PRIu64 " -> %" PRIu64 " bytes used\n",
	       a.pages, a.used_before, a.used_after);
	return 0;
}
