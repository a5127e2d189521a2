/*
 * `kvfs bench`: its usage text and command-line options.
 */
#include "bench.h"

/* ---- options ---- */

const char bench_usage[] =
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
int parse_opts(int argc, char **argv, struct bench_opts *o)
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
