/*
 * `kvfs bench`: its usage text and command-line options.
 */
#include "bench.h"

/* ---- options ---- */

const char bench_usage[] =
	"usage: kvfs bench [--dir DIR] [--sizes 16K,64K,256K,1M] [--pages N | --bytes TOTAL]\n"
	"                  [--layers L] [--qd Q] [--batch B] [--repeat R] [--settle S]\n"
	"                  [--cases read,write,mixed,conc,meta] [--methods fast,fuse,raw,files]\n"
	"                  [--writers W] [--mix-writers M] [--mix-secs T]\n"
	"                  [--engines E] [--streams S] [--conc-secs T] [--conc-ops read,write]\n"
	"                  [--meta-pages N] [--meta-size SIZE] [--meta-layer-pages P]\n"
	"                  [--meta-threads T] [--meta-batch K] [--meta-name-digits D]\n"
	"                  [--meta-index-pages I]\n"
	"                  [--quick] [--keep] [--json] [--progress | --quiet]\n"
	"  Makes a store, mounts it and measures, for each page size, these cases:\n"
	"  read   writes the pages through the mount and as one plain file per page,\n"
	"         then reads them all back cold, per layer in batches of B pages, four\n"
	"         ways: fast (libkvfs batch ioctl), fuse (open/read/close on the mount),\n"
	"         raw (io_uring O_DIRECT on the same extents at queue depth Q) and files\n"
	"         (one buffered file per page)\n"
	"  write  new pages from W threads, through the mount (open/write/close) and\n"
	"         in fast-path batches (libkvfs batch write): visible when every call\n"
	"         returned, durable after fsync; against the store's I/O thread alone\n"
	"         and a raw baseline: io_uring O_DIRECT writes of the same bytes at\n"
	"         queue depth Q into a preallocated file on the same filesystem\n"
	"  mixed  batched reads for T seconds alone, then under a write stream: fast\n"
	"         path under M fast-path writers and under M FUSE writers, the store's\n"
	"         own reader under writes fed to its I/O thread (read-first, and fifo),\n"
	"         the raw reader under a raw O_DIRECT writer: read GB/s kept and the\n"
	"         write rate achieved\n"
	"  conc   E engine processes of S threads each loop fast-path batches (reads\n"
	"         of B pages; writes of new pages) for T seconds, against the raw\n"
	"         reader and writer with the same streams (qd Q each), while the\n"
	"         bench stat()s names the kernel has never seen and lists a\n"
	"         1,000-page layer: aggregate GB/s, and metadata latency under load\n"
	"  meta   (after the others) N small pages in one model through fast-path\n"
	"         batch writes, named like an engine's block hashes, P per layer;\n"
	"         then the daemon's RAM per page (RSS after minus before, VmHWM;\n"
	"         again 3 s later, idle; again after a remount), the time a cold\n"
	"         remount takes to answer, to answer a first LOOKUP and to store a\n"
	"         new page durably, a cold ls of a P-page layer, prefix LOOKUP\n"
	"         keys/s (K descriptors per call, T threads) and `kvfs fsck`\n"
	"         pages/s (no --verify-data) on the unmounted store\n"
	"  The daemon's I/O scheduler follows KVFS_SCHED (fifo: no read priority).\n"
	"  Run as root so caches can be dropped.\n"
	"  --dir DIR      workspace (default /var/tmp/kvfs-bench.XXXXXX), removed at\n"
	"                 the end unless --keep; must be on the disk to measure\n"
	"  --pages N      pages per size (default: --bytes / size)\n"
	"  --bytes TOTAL  bytes per size (default 512M)\n"
	"  --layers L     layer directories (default 32)\n"
	"  --qd Q         raw baseline queue depth, as the daemon's (default 64)\n"
	"  --batch B      pages per batch (default: all of a layer's pages)\n"
	"  --repeat R     runs of each method, interleaved (default 3)\n"
	"  --settle S     seconds to wait after writing, before reading (default 10)\n"
	"  --cases LIST   which cases (default read,write,mixed; conc only if named)\n"
	"  --methods LIST readers of the read case (default fast,fuse,raw,files)\n"
	"  --writers W    writer threads of the write case (default 4)\n"
	"  --mix-writers M  writer threads of the mixed case (default 1)\n"
	"  --mix-secs T   seconds of each mixed-case read phase (default 2)\n"
	"  --engines E    conc case: engine processes (default 4, at most 64)\n"
	"  --streams S    conc case: streams (threads) per engine (default 2, at\n"
	"                 most 64; E x S at most 256)\n"
	"  --conc-secs T  conc case: seconds of each phase (default 3)\n"
	"  --conc-ops LIST  conc case: read, write or both (default read,write)\n"
	"  --meta-pages N meta case: pages to create (default 1M, --quick 4K; K = 10^3,\n"
	"                 M = 10^6, e.g. 10M; 4 KiB pages take ~4.2 GB of disk per 1M)\n"
	"  --meta-size SIZE  meta case: bytes per page (default 4K, 64 to 1M)\n"
	"  --meta-layer-pages P  meta case: pages per layer, the listed layer's size\n"
	"                 (default 100K; layers = N / P rounded up, at most 100,000)\n"
	"  --meta-threads T  meta case: writer and LOOKUP threads (default 4, at most 64)\n"
	"  --meta-batch K meta case: descriptors per LOOKUP call (default 65536),\n"
	"                 rounded down to whole blocks (a multiple of the layers)\n"
	"  --meta-name-digits D  meta case: hex digits of a page name: 16 (default),\n"
	"                 32, 48 or 64 (SGLang's keys)\n"
	"  --meta-index-pages I  meta case: remount with -o index_pages=I (the most\n"
	"                 pages the background load brings into RAM; default: no\n"
	"                 budget, every page)\n"
	"  --quick        64 pages per size, 4 layers, 1 run, no wait, 0.5 s mixed\n"
	"                 and conc phases (a smoke test)\n"
	"  --keep         leave the workspace (store, log, files) in place\n"
	"  --json         one JSON object per line on stdout (an \"event\" each:\n"
	"                 config, write, read, ratio, write_case, mixed, conc,\n"
	"                 conc_ratio, meta); errors and the status line go to stderr\n"
	"  --progress     show the status line (step under way, steps done, ETA) on\n"
	"                 stderr even when it is not a terminal\n"
	"  -q, --quiet    never show it (default: shown when stderr is a terminal)\n"
	"Environment: KVFS_BENCH_DAEMON=PATH runs PATH (another build's kvfs) as\n"
	"the daemon, to compare two builds in one run window. KVFS_BENCH_STRIPES=N\n"
	"makes the store with N stripe directories inside the workspace (one file\n"
	"system): N segment files written at once instead of one.\n";

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

/* A comma-separated list of names from names[0..n) as a bit set. */
static int parse_list(const char *arg, const char *const *names, unsigned n,
		      unsigned *out)
{
	char *dup = strdup(arg), *save = NULL, *t;
	unsigned m;

	if (!dup)
		return -ENOMEM;
	*out = 0;
	for (t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		for (m = 0; m < n && strcmp(t, names[m]); m++)
			;
		if (m == n) {
			free(dup);
			return -EINVAL;
		}
		*out |= 1u << m;
	}
	free(dup);
	return *out ? 0 : -EINVAL;
}

static int parse_secs(const char *s, double min, double max, double *out)
{
	char *end;

	errno = 0;
	*out = strtod(s, &end);
	return errno || end == s || *end || !(*out >= min && *out <= max) ? -EINVAL : 0;
}

static int parse_uint(const char *s, unsigned long min, unsigned long max, unsigned long *out)
{
	char *end;

	errno = 0;
	*out = strtoul(s, &end, 10);
	return errno || end == s || *end || *out < min || *out > max ? -EINVAL : 0;
}

/* The conc case's options, together: each one alone is checked as it is
 * parsed. */
static int check_conc_opts(const struct bench_opts *o, bool given)
{
	if (given && !(o->cases & 1u << C_CONC)) {
		fprintf(stderr, "kvfs bench: --engines, --streams, --conc-secs and --conc-ops "
			"belong to the conc case: add --cases conc\n");
		return -EINVAL;
	}
	if (o->engines * o->streams > CONC_STREAMS_MAX) {
		fprintf(stderr, "kvfs bench: --engines %u x --streams %u is %u streams; "
			"at most %u\n", o->engines, o->streams, o->engines * o->streams,
			CONC_STREAMS_MAX);
		return -EINVAL;
	}
	return 0;
}

/* The meta case's options, together. */
static int check_meta_opts(const struct bench_opts *o, bool given)
{
	uint64_t layers = (o->meta_pages + o->meta_layer_pages - 1) / o->meta_layer_pages;

	if (given && !(o->cases & 1u << C_META)) {
		fprintf(stderr, "kvfs bench: --meta-pages, --meta-size, --meta-layer-pages, "
			"--meta-threads, --meta-batch, --meta-name-digits and --meta-index-pages "
			"belong to the "
			"meta case: add --cases meta\n");
		return -EINVAL;
	}
	/* layer numbers are 5 digits (docs/abi.md) */
	if (layers > 100000) {
		fprintf(stderr, "kvfs bench: --meta-pages %llu / --meta-layer-pages %u is "
			"%llu layers; at most 100000\n", (unsigned long long)o->meta_pages,
			o->meta_layer_pages, (unsigned long long)layers);
		return -EINVAL;
	}
	return 0;
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
		{ "qd", required_argument, NULL, 'd' },
		{ "batch", required_argument, NULL, 'b' },
		{ "repeat", required_argument, NULL, 'r' },
		{ "settle", required_argument, NULL, 'S' },
		{ "methods", required_argument, NULL, 'm' },
		{ "cases", required_argument, NULL, 'c' },
		{ "writers", required_argument, NULL, 'w' },
		{ "mix-writers", required_argument, NULL, 'W' },
		{ "mix-secs", required_argument, NULL, 'T' },
		{ "engines", required_argument, NULL, 'E' },
		{ "streams", required_argument, NULL, 'N' },
		{ "conc-secs", required_argument, NULL, 'C' },
		{ "conc-ops", required_argument, NULL, 'O' },
		{ "meta-pages", required_argument, NULL, 'M' },
		{ "meta-size", required_argument, NULL, 'Z' },
		{ "meta-layer-pages", required_argument, NULL, 'L' },
		{ "meta-threads", required_argument, NULL, 'H' },
		{ "meta-batch", required_argument, NULL, 'K' },
		{ "meta-name-digits", required_argument, NULL, 'G' },
		{ "meta-index-pages", required_argument, NULL, 'I' },
		{ "quick", no_argument, NULL, 'Q' },
		{ "keep", no_argument, NULL, 'k' },
		{ "json", no_argument, NULL, 'j' },
		{ "progress", no_argument, NULL, 'P' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	bool quick = false, set_layers = false, set_repeat = false, set_settle = false;
	bool set_mix = false, set_conc = false, set_csecs = false;
	bool set_meta = false, set_mpages = false;
	uint64_t u;
	unsigned long v;
	int c, li = 0, rc = 0;

	while (rc == 0 && (c = getopt_long(argc, argv, "hq", lo, &li)) != -1) {
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
		case 'd':
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
		case 'm': rc = parse_list(optarg, method_name, M_COUNT, &o->methods); break;
		case 'c': rc = parse_list(optarg, case_name, C_COUNT, &o->cases); break;
		case 'w':
			rc = parse_uint(optarg, 1, WRITERS_MAX, &v);
			o->writers = (unsigned)v;
			break;
		case 'W':
			rc = parse_uint(optarg, 1, WRITERS_MAX, &v);
			o->mix_writers = (unsigned)v;
			break;
		case 'T':
			rc = parse_secs(optarg, 0.1, 3600, &o->mix_secs);
			set_mix = true;
			break;
		case 'E':
			rc = parse_uint(optarg, 1, ENGINES_MAX, &v);
			o->engines = (unsigned)v;
			set_conc = true;
			break;
		case 'N':
			rc = parse_uint(optarg, 1, STREAMS_MAX, &v);
			o->streams = (unsigned)v;
			set_conc = true;
			break;
		case 'C':
			rc = parse_secs(optarg, 0.1, 3600, &o->conc_secs);
			set_conc = set_csecs = true;
			break;
		case 'O':
			rc = parse_list(optarg, conc_op_name, CO_COUNT, &o->conc_ops);
			set_conc = true;
			break;
		case 'M':
			rc = bench_parse_count(optarg, &o->meta_pages);
			if (rc == 0 && o->meta_pages > 1000000000ull)
				rc = -EINVAL;
			set_meta = set_mpages = true;
			break;
		case 'Z':
			rc = kvfs_parse_size(optarg, &u);
			if (rc == 0 && (u < 64 || u > (1u << 20)))
				rc = -EINVAL;
			o->meta_size = u;
			set_meta = true;
			break;
		case 'L':
			rc = bench_parse_count(optarg, &u);
			if (rc == 0 && u > KVFS_BATCH_MAX)
				rc = -EINVAL;
			o->meta_layer_pages = (unsigned)u;
			set_meta = true;
			break;
		case 'H':
			rc = parse_uint(optarg, 1, WRITERS_MAX, &v);
			o->meta_threads = (unsigned)v;
			set_meta = true;
			break;
		case 'K':
			rc = parse_uint(optarg, 1, KVFS_BATCH_MAX, &v);
			o->meta_batch = (unsigned)v;
			set_meta = true;
			break;
		case 'G':
			rc = parse_uint(optarg, 16, 64, &v);
			if (rc == 0 && v % 16)
				rc = -EINVAL;
			o->meta_name_digits = (unsigned)v;
			set_meta = true;
			break;
		case 'I':
			rc = bench_parse_count(optarg, &u);
			o->meta_index_pages = u;
			set_meta = true;
			break;
		case 'Q': quick = true; break;
		case 'k': o->keep = true; break;
		case 'j': o->json = true; break;
		case 'P': o->pm = PROGRESS_ON; break;
		case 'q': o->pm = PROGRESS_OFF; break;
		case 'h': return 1;
		default: return -EINVAL;
		}
		if (rc < 0)
			fprintf(stderr, "kvfs bench: --%s: bad value \"%s\"%s\n", lo[li].name,
				optarg, c == 'E' ? " (1 to " STR(ENGINES_MAX) " engines)"
				: c == 'N' ? " (1 to " STR(STREAMS_MAX) " streams per engine)"
				: c == 'C' ? " (0.1 to 3600 seconds)"
				: c == 'O' ? " (read, write or read,write)"
				: c == 'M' ? " (1 to 1000M pages; K = 10^3, M = 10^6)"
				: c == 'Z' ? " (64 bytes to 1M)"
				: c == 'L' ? " (1 to 1048576 pages; K = 10^3, M = 10^6)"
				: c == 'H' ? " (1 to " STR(WRITERS_MAX) " threads)"
				: c == 'K' ? " (1 to 1048576 descriptors)"
				: c == 'G' ? " (16, 32, 48 or 64)" : "");
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
		if (!set_mix)
			o->mix_secs = 0.5;
		if (!set_csecs)
			o->conc_secs = 0.5;
		if (!set_mpages)
			o->meta_pages = 4096;
	}
	if (rc == 0)
		rc = check_conc_opts(o, set_conc);
	if (rc == 0)
		rc = check_meta_opts(o, set_meta);
	return rc;
}

/* ---- the report's header ---- */

/* The daemon's I/O scheduler, as it reads KVFS_SCHED from our environment. */
static const char *sched_mode(void)
{
	const char *e = getenv("KVFS_SCHED");

	return e && *e ? e : "read-first";
}

static void print_cases(const struct bench_opts *o, bool json)
{
	unsigned c, k = 0;

	for (c = 0; c < C_COUNT; c++)
		if (o->cases & 1u << c)
			printf(json ? "%s\"%s\"" : "%s%s", k++ ? "," : "", case_name[c]);
}

void print_header(const struct bench *b)
{
	const struct bench_opts *o = b->o;
	char label[32];
	unsigned i;

	if (o->json) {
		printf("{\"event\":\"config\",\"dir\":\"%s\",\"sizes\":[", b->dir);
		for (i = 0; i < o->nsizes; i++)
			printf("%s%llu", i ? "," : "", (unsigned long long)o->sizes[i]);
		printf("],\"cases\":[");
		print_cases(o, true);
		printf("],\"layers\":%u,\"qd\":%u,\"batch\":%u,\"repeats\":%u,\"settle_s\":%u,"
		       "\"cold\":%s,\"writers\":%u,\"mix_writers\":%u,\"mix_secs\":%.2f,"
		       "\"engines\":%u,\"streams\":%u,\"conc_secs\":%.2f,"
		       "\"meta_pages\":%llu,\"meta_size\":%llu,\"meta_layer_pages\":%u,"
		       "\"meta_threads\":%u,\"meta_batch\":%u,\"meta_name_digits\":%u,"
		       "\"meta_index_pages\":%llu,\"sched\":\"%s\"}\n", o->layers, o->qd, o->batch, o->repeat, o->settle,
		       b->cold ? "true" : "false", o->writers, o->mix_writers, o->mix_secs,
		       o->engines, o->streams, o->conc_secs,
		       (unsigned long long)o->meta_pages, (unsigned long long)o->meta_size,
		       o->meta_layer_pages, o->meta_threads, o->meta_batch, o->meta_name_digits,
		       (unsigned long long)o->meta_index_pages, sched_mode());
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
	printf("; cases: ");
	print_cases(o, false);
	printf("; daemon I/O scheduler: %s\n", sched_mode());
	printf("methods: fast = libkvfs batch ioctl, fuse = open/read/close on the mount,\n"
	       "raw = io_uring O_DIRECT on the same extents, files = one buffered file per page\n");
}
