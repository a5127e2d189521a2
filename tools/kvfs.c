/*
 * The `kvfs` command: one binary, one subcommand per task. Each subcommand
 * parses its own arguments and returns an exit status (0 ok, 1 failed,
 * 2 usage error).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "mount.h"
#include "store.h"
#include "tools.h"

static void usage(FILE *f)
{
	fprintf(f,
		"kvfs %s: an SSD-backed KV-cache store for LLM inference, mounted as files\n"
		"\n"
		"usage: kvfs COMMAND [ARGS]\n"
		"  mkfs STORE [--stripe DIR]... [--segment-size SIZE] [--capacity SIZE]\n"
		"                                 create a store (manifest in STORE, data in the stripes)\n"
		"  mount STORE MOUNTPOINT [-f] [-d] [-q] [-o opt,...]\n"
		"                                 serve a store as a filesystem\n"
		"  umount [--force | --escalate | --lazy] [--wait SECS] [--store STORE] MOUNTPOINT\n"
		"                                 unmount and wait for the daemon to commit and exit;\n"
		"                                 --force recovers from a hung or dead daemon\n"
		"  model create MOUNT/NAME --layers N --kv-heads N --head-dim N --dtype T --page-tokens N\n"
		"  model list MOUNT               models, their geometry and page counts\n"
		"  model drop MOUNT/NAME [--yes]  remove a model and all its pages\n"
		"  stat MOUNT [--json]            tiers, capacity, evictions, dedup, write-back, latency\n"
		"                                 (from MOUNT/.kvfs; docs/metrics.md)\n"
		"  bench [--dir DIR] [--sizes 16K,64K,256K,1M] [--pages N | --bytes TOTAL] [--quick] ...\n"
		"                                 own store and daemon; cold reads four ways: fast path,\n"
		"                                 FUSE, raw io_uring on the extents, one file per page\n"
		"  bench-files DIR [--pages N] [--size SIZE] [--layers N]\n"
		"                                 write, then cold-read N page files under DIR\n"
		"  bench-mount [--dir DIR] [--pages N,N,...] [--repeat R]\n"
		"                                 time bringing up stores of N 4 KiB pages in one segment\n"
		"  fsck STORE [--verify-data] [--repair | --rebuild | -n] [--json] [--progress | -q]\n"
		"                                 check (and repair) a store that is not mounted\n"
		"  gc STORE|MOUNT (--older-than DUR | --target-size SIZE) [--json] [--progress | -q]\n"
		"                                 evict least recently used pages nobody holds open\n"
		"  import SRC MOUNT/MODEL [--replace] [--json] [--progress | -q] ...\n"
		"                                 bulk-load page files (a `cp -r` of a model) via batch writes\n"
		"  version\n"
		"\n"
		"Long commands (bench, fsck, gc, import) show progress on a terminal only.\n"
		"Run `kvfs COMMAND --help` for a command's options; man kvfs for all of them.\n",
		KVFS_VERSION);
}

#define MKFS_USAGE \
	"usage: kvfs mkfs STORE [--stripe DIR]... [--segment-size SIZE] [--capacity SIZE]\n" \
	"  Creates a store: its manifest (kvfs.db), lock and log in STORE (made if\n" \
	"  missing; must not hold a store), page data in segment files on the stripes.\n" \
	"  --stripe DIR         a directory for segment files, once per SSD; pages\n" \
	"                       are placed round-robin (default: STORE/stripe0)\n" \
	"  --segment-size SIZE  largest segment file; a page must fit in one\n" \
	"                       (default 1G, at least 1M, at most 512G)\n" \
	"  --capacity SIZE      budget on the bytes the store occupies (default: 95%\n" \
	"                       of the stripes' free space now; -o capacity may\n" \
	"                       override it for a mount)\n" \
	"  SIZE takes K, M, G, T suffixes (powers of 1024).\n"

static int cmd_mkfs(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "stripe", required_argument, NULL, 's' },
		{ "segment-size", required_argument, NULL, 'g' },
		{ "capacity", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *stripes[KV_MAX_STRIPES];
	uint64_t capacity = 0;
	struct kvfs_mkfs_opts o = { .stripes = stripes, .capacity_made = &capacity };
	int c, rc;

	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 's':
			if (o.nstripes == KV_MAX_STRIPES) {
				fprintf(stderr, "kvfs mkfs: at most %u stripes\n", KV_MAX_STRIPES);
				return 2;
			}
			stripes[o.nstripes++] = optarg;
			break;
		case 'g':
			if (kvfs_parse_size(optarg, &o.segment_size) < 0)
				goto bad;
			break;
		case 'c':
			if (kvfs_parse_size(optarg, &o.capacity) < 0)
				goto bad;
			break;
		case 'h':
			fputs(MKFS_USAGE, stdout);
			return 0;
		default:
			return 2;
		}
	}
	if (optind + 1 != argc) {
		fputs(MKFS_USAGE, stderr);
		return 2;
	}
	kv_log_set_level(KV_LOG_WARN);   /* the summary below says what was made */
	rc = kvfs_mkfs(argv[optind], &o);
	if (rc < 0) {
		fprintf(stderr, "kvfs mkfs: %s: %s\n", argv[optind], kv_strerror(rc));
		return 1;
	}
	printf("kvfs: created store %s with %u stripe(s), capacity %.*f GiB%s\n", argv[optind],
	       o.nstripes ? o.nstripes : 1, capacity < (10ull << 30) ? 3 : 1,
	       (double)capacity / (1 << 30),
	       o.capacity ? "" : " (95% of the stripes' free space; set it with --capacity)");
	return 0;
bad:
	fprintf(stderr, "kvfs mkfs: bad size \"%s\" (use e.g. 64M, 1G, 2T)\n", optarg);
	return 2;
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : NULL;
	const char *self = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];

	/* Installed as mount(8)'s and umount(8)'s helpers too (links). */
	if (!strcmp(self, "mount.fuse.kvfs") || !strcmp(self, "mount.kvfs"))
		return kvfs_mount_helper_main(argc, argv);
	if (!strcmp(self, "umount.fuse.kvfs") || !strcmp(self, "umount.kvfs"))
		return kvfs_umount_helper_main(argc, argv);

	if (!cmd || !strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
		usage(cmd ? stdout : stderr);
		return cmd ? 0 : 2;
	}
	if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
		printf("kvfs %s\n", KVFS_VERSION);
		return 0;
	}
	if (!strcmp(cmd, "mkfs"))
		return cmd_mkfs(argc - 1, argv + 1);
	if (!strcmp(cmd, "mount"))
		return kvfs_mount_main(argc - 1, argv + 1);
	if (!strcmp(cmd, "umount"))
		return kvfs_cmd_umount(argc - 1, argv + 1);
	if (!strcmp(cmd, "model"))
		return kvfs_cmd_model(argc - 1, argv + 1);
	if (!strcmp(cmd, "stat"))
		return kvfs_cmd_stat(argc - 1, argv + 1);
	if (!strcmp(cmd, "gc"))
		return kvfs_cmd_gc(argc - 1, argv + 1);
	if (!strcmp(cmd, "bench"))
		return kvfs_cmd_bench(argc - 1, argv + 1);
	if (!strcmp(cmd, "fsck"))
		return kvfs_cmd_fsck(argc - 1, argv + 1);
	if (!strcmp(cmd, "bench-files"))
		return kvfs_cmd_bench_files(argc - 1, argv + 1);
	if (!strcmp(cmd, "bench-mount"))
		return kvfs_cmd_bench_mount(argc - 1, argv + 1);
	if (!strcmp(cmd, "import"))
		return kvfs_cmd_import(argc - 1, argv + 1);
	fprintf(stderr, "kvfs: unknown command \"%s\"\n\n", cmd);
	usage(stderr);
	return 2;
}
