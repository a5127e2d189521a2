/*
 * `kvfs import SRC MOUNT/MODEL`: load a tree of page files (SRC/<layer>/<page>,
 * as `cp -r MOUNT/MODEL /backup/` leaves it) into a model of a mounted kvfs,
 * for restoring a backup or moving a model between stores.
 *
 * Pages go in through the fast path: each file is read straight into a
 * shared region and a layer's pages are stored with one KVFS_IOC_WRITE per
 * chunk of --batch bytes (libkvfs kvfs_batch_write), never through
 * open/write/close. The import is durable when the command returns: one
 * fsync of the model directory at the end waits for every page's commit
 * (--sync-batches makes each batch durable before the next instead, so an
 * interrupted import keeps every batch that returned).
 *
 * The model must exist with a geometry (`kvfs model create`): it fixes the
 * page size, and a file of any other size is reported and skipped. A page
 * that already exists is compared with the file (read back through the
 * fast path): identical ones are counted as skipped, so an import can be
 * run again after an interruption; different ones are errors unless
 * --replace, which overwrites them. Every problem is one line on stderr
 * naming the file, and the import goes on with the rest.
 *
 * An import that stops early (the mount went away, SIGINT or SIGTERM)
 * says how many files it never reached: every file is counted once, as
 * imported, skipped, failed or not reached.
 *
 * Exit: 0 every page imported (or already there), 1 some failed, were not
 * reached, or the import could not run, 2 usage.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "libkvfs.h"
#include "progress.h"
#include "tools.h"

#define IMPORT_USAGE \
	"usage: kvfs import [--replace] [--batch SIZE] [--sync-batches] [--json]\n" \
	"                   [--progress | --quiet] SRC MOUNT/MODEL\n" \
	"  Stores the page files of SRC (layer directories 00, 01, ... holding one\n" \
	"  file per page, as `cp -r MOUNT/MODEL DIR` makes) in MOUNT/MODEL through\n" \
	"  fast-path batch writes; durable when it returns. MODEL must exist\n" \
	"  (kvfs model create): its geometry fixes the page size.\n" \
	"  --replace       overwrite pages that exist (default: an existing page with\n" \
	"                  the same bytes is skipped, one with other bytes is an error)\n" \
	"  --batch SIZE    bytes of pages per write call, within one layer (default 32M)\n" \
	"  --sync-batches  make each batch durable before the next (default: once, at\n" \
	"                  the end)\n" \
	"  --json          print the summary as one JSON object on stdout\n" \
	"  --progress      show the status line on stderr even when it is not a terminal\n" \
	"  -q, --quiet     never show it (default: shown when stderr is a terminal)\n" \
	"  exit: 0 all pages imported or already there, 1 some failed, 2 usage\n"

#define ALIGN 4096u
#define ERRORS_KEPT 100   /* per-page errors listed in --json */

struct import_opts {
	const char *src, *model;
	uint64_t batch_bytes;
	bool replace, sync_batches, json;
	enum progress_mode pm;
};

struct src_layer {
	uint32_t num;
	char *dir;                  /* SRC/<name> */
	char **files;               /* page names, sorted */
	size_t nfiles;
};

struct import {
	const struct import_opts *o;
	uint64_t page_bytes, stride;
	struct src_layer *layers;
	size_t nlayers;
	uint64_t total;             /* page files found */
	struct kvfs_client *c;
	struct kvfs_region *r;
	struct kvfs_batch *wb, *rb; /* writes; reading existing pages back */
	char *base;
	uint64_t src0, cmp0;        /* region offsets of the page slots */
	unsigned slots;
	const char **slot_name;     /* the batch's pages, by descriptor */
	struct progress *pr;
	uint64_t done;              /* files dealt with, for the status line */
	uint64_t imported, skipped, failed, bytes, batches;
	bool durable;               /* the final fsync (or every batch's) returned */
	struct { char *path, *why; } errs[ERRORS_KEPT];
	unsigned nerrs;
};

static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
	stop_signal = sig;
}

/* Files neither imported, skipped nor failed: the import stopped first. */
static uint64_t not_reached(const struct import *im)
{
	uint64_t seen = im->imported + im->skipped + im->failed;

	return im->total > seen ? im->total - seen : 0;
}

static double now_secs(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One file (or directory entry) that could not be imported. */
__attribute__((format(printf, 3, 4)))
static void page_error(struct import *im, const char *path, const char *fmt, ...)
{
	char why[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	progress_clear(im->pr);
	fprintf(stderr, "kvfs import: %s: %s\n", path, why);
	im->failed++;
	if (im->nerrs < ERRORS_KEPT) {
		im->errs[im->nerrs].path = strdup(path);
		im->errs[im->nerrs].why = strdup(why);
		im->nerrs++;
	}
}

/* ---- the model ---- */

/* The model must exist and have a geometry: it alone says which file
 * sizes are pages. */
static int model_page_bytes(const struct import_opts *o, uint64_t *out)
{
	char buf[64], *end;
	struct stat st;
	ssize_t n;
	int err;

	err = stat(o->model, &st) < 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
	if (err) {
		fprintf(stderr, "kvfs import: %s: %s; create the model first with `kvfs model "
			"create %s --layers N --kv-heads N --head-dim N --dtype T --page-tokens N`"
			" (its geometry fixes the page size)\n", o->model, strerror(err), o->model);
		return -err;
	}
	n = getxattr(o->model, "user.kvfs.page_bytes", buf, sizeof(buf) - 1);
	if (n < 0 && errno == ENODATA) {
		fprintf(stderr, "kvfs import: %s has no geometry, so no page size to check the "
			"files against; give it one (kvfs model create, or setfattr -n "
			"user.kvfs.geometry) before importing\n", o->model);
		return -ENODATA;
	}
	if (n < 0) {
		fprintf(stderr, "kvfs import: %s is not a model directory of a kvfs mount (%s)\n",
			o->model, strerror(errno));
		return -errno;
	}
	buf[n] = '\0';
	*out = strtoull(buf, &end, 10);
	if (*end || *out == 0) {
		fprintf(stderr, "kvfs import: %s: bad page size \"%s\"\n", o->model, buf);
		return -EINVAL;
	}
	return 0;
}

/* ---- the source tree ---- */

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_layer(const void *a, const void *b)
{
	const struct src_layer *x = a, *y = b;

	return x->num < y->num ? -1 : x->num > y->num;
}

/* "00", "7", "031" -> 31; anything else is not a layer directory. */
static bool layer_number(const char *name, uint32_t *num)
{
	unsigned long v = 0;
	const char *s;

	for (s = name; *s; s++) {
		if (*s < '0' || *s > '9' || v > UINT32_MAX / 10)
			return false;
		v = v * 10 + (unsigned long)(*s - '0');
	}
	if (s == name || v > UINT32_MAX)
		return false;
	*num = (uint32_t)v;
	return true;
}

/* The page files of one layer directory; anything but a regular file
 * (or a symlink to one) is reported. */
static int scan_layer(struct import *im, struct src_layer *l)
{
	char path[PATH_MAX + 256];
	size_t cap = 0;
	struct dirent *e;
	struct stat st;
	DIR *d = opendir(l->dir);

	if (!d) {
		page_error(im, l->dir, "cannot read the layer directory: %s", strerror(errno));
		return 0;
	}
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(path, sizeof(path), "%s/%s", l->dir, e->d_name);
		if (stat(path, &st) < 0 || !S_ISREG(st.st_mode)) {
			page_error(im, path, "not a page file (a layer holds only regular files)");
			continue;
		}
		if (l->nfiles == cap) {
			char **n = realloc(l->files, (cap = cap ? 2 * cap : 256) * sizeof(*n));

			if (!n)
				goto nomem;
			l->files = n;
		}
		if (!(l->files[l->nfiles] = strdup(e->d_name)))
			goto nomem;
		l->nfiles++;
	}
	closedir(d);
	qsort(l->files, l->nfiles, sizeof(*l->files), cmp_name);
	im->total += l->nfiles;
	return 0;
nomem:
	closedir(d);
	return -ENOMEM;
}

static int add_layer(struct import *im, uint32_t num, const char *name, size_t *cap)
{
	struct src_layer *l;

	if (im->nlayers == *cap) {
		l = realloc(im->layers, (*cap = *cap ? 2 * *cap : 64) * sizeof(*l));
		if (!l)
			return -ENOMEM;
		im->layers = l;
	}
	l = &im->layers[im->nlayers];
	memset(l, 0, sizeof(*l));
	l->num = num;
	if (asprintf(&l->dir, "%s/%s", im->o->src, name) < 0)
		return -ENOMEM;
	im->nlayers++;
	return 0;
}

/* SRC's layer directories, by number, each with its page files. */
static int scan_src(struct import *im)
{
	char path[PATH_MAX + 256];
	size_t cap = 0, i;
	struct dirent *e;
	struct stat st;
	uint32_t num;
	DIR *d = opendir(im->o->src);
	int rc = 0;

	if (!d) {
		fprintf(stderr, "kvfs import: cannot read %s: %s\n", im->o->src, strerror(errno));
		return -errno;
	}
	while (rc == 0 && (e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(path, sizeof(path), "%s/%s", im->o->src, e->d_name);
		if (!layer_number(e->d_name, &num) || stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
			page_error(im, path, "not a layer directory (SRC holds directories named by "
				   "layer number: 00, 01, ...)");
		else
			rc = add_layer(im, num, e->d_name, &cap);
	}
	closedir(d);
	qsort(im->layers, im->nlayers, sizeof(*im->layers), cmp_layer);
	for (i = 0; rc == 0 && i < im->nlayers; i++) {
		/* "1" and "01" would be one layer: its pages twice */
		if (i && im->layers[i].num == im->layers[i - 1].num)
			page_error(im, im->layers[i].dir, "layer %u again (also %s): skipped",
				   im->layers[i].num, im->layers[i - 1].dir);
		else
			rc = scan_layer(im, &im->layers[i]);
	}
	if (rc == -ENOMEM)
		fprintf(stderr, "kvfs import: out of memory listing %s\n", im->o->src);
	return rc;
}

/* ---- the region: control areas, then a slot per page, twice ---- */

static int region_setup(struct import *im)
{
	uint64_t want = im->o->batch_bytes / im->stride, most = 1, ctl;
	size_t i, size;
	int rc;

	for (i = 0; i < im->nlayers; i++)
		if (im->layers[i].nfiles > most)
			most = im->layers[i].nfiles;
	if (want > most)
		want = most;
	if (want > KVFS_BATCH_MAX)
		want = KVFS_BATCH_MAX;
	im->slots = want ? (unsigned)want : 1;
	ctl = (kvfs_batch_ctl_bytes(im->slots) + 7) / 8 * 8;
	im->src0 = (2 * ctl + ALIGN - 1) / ALIGN * ALIGN;
	im->cmp0 = im->src0 + (uint64_t)im->slots * im->stride;
	size = im->cmp0 + (uint64_t)im->slots * im->stride;
	im->slot_name = calloc(im->slots, sizeof(*im->slot_name));
	if (!im->slot_name)
		return -ENOMEM;
	rc = kvfs_region_create(im->c, size, &im->r);
	if (rc == 0)
		rc = kvfs_batch_new(im->r, 0, im->slots, &im->wb);
	if (rc == 0)
		rc = kvfs_batch_new(im->r, ctl, im->slots, &im->rb);
	if (rc < 0) {
		fprintf(stderr, "kvfs import: cannot set up %zu bytes of shared memory with the "
			"daemon: %s\n", size, strerror(-rc));
		return rc;
	}
	im->base = kvfs_region_base(im->r);
	return 0;
}

/* ---- one batch ---- */

static const char *errno_why(int err)
{
	switch (err) {
	case -ENOENT: return "the model has no such layer (see its geometry: kvfs model list)";
	case -EACCES: return "no write permission on the layer";
	case -EINVAL: return "refused: a size the geometry does not allow, or a bad name";
	case -ENOSPC: return "the store is full";
	default: return strerror(-err);
	}
}

static void batch_path(const struct import *im, const struct src_layer *l, unsigned i,
		       char *out, size_t len)
{
	snprintf(out, len, "%s/%s", l->dir, im->slot_name[i]);
}

/*
 * Pages that were already there: read them back into the second set of
 * slots and compare. Same bytes is what a second run of an interrupted
 * import finds; other bytes would be lost by going on, so say so.
 */
static void compare_existing(struct import *im, const struct src_layer *l,
			     const unsigned *idx, unsigned n)
{
	struct kvfs_batch_result res;
	char path[PATH_MAX + 256];
	uint64_t got;
	unsigned k;
	int rc, st;

	kvfs_batch_reset(im->rb);
	for (k = 0; k < n; k++)
		kvfs_batch_add(im->rb, l->num, im->slot_name[idx[k]],
			       im->cmp0 + (uint64_t)k * im->stride, im->stride);
	rc = kvfs_batch_read(im->rb, &res);
	for (k = 0; k < n; k++) {
		const char *mine = im->base + im->src0 + (uint64_t)idx[k] * im->stride;
		const char *theirs = im->base + im->cmp0 + (uint64_t)k * im->stride;

		batch_path(im, l, idx[k], path, sizeof(path));
		st = rc < 0 ? rc : kvfs_batch_status(im->rb, k, &got);
		if (st < 0)
			page_error(im, path, "exists, and reading it back to compare failed: %s",
				   strerror(-st));
		else if (got != im->page_bytes || memcmp(mine, theirs, im->page_bytes))
			page_error(im, path, "a page of that name exists with other bytes "
				   "(--replace overwrites it)");
		else
			im->skipped++;
	}
}

static int flush_batch(struct import *im, const struct src_layer *l)
{
	unsigned n = kvfs_batch_count(im->wb), i, nexist = 0, *exist;
	unsigned flags = (im->o->replace ? KVFS_WRITE_REPLACE : 0) |
			 (im->o->sync_batches ? KVFS_WRITE_DURABLE : 0);
	struct kvfs_batch_result res;
	char path[PATH_MAX + 256];
	int rc, st;

	if (n == 0)
		return 0;
	rc = kvfs_batch_write(im->wb, flags, &res);
	if (rc < 0) {
		progress_clear(im->pr);
		fprintf(stderr, "kvfs import: batch write of %u pages of layer %u into %s failed: "
			"%s%s\n", n, l->num, im->o->model, strerror(-rc), rc == -ENOTTY ?
			" (a daemon older than batch writes: upgrade it)" : "");
		return rc;
	}
	im->batches++;
	exist = calloc(n, sizeof(*exist));
	if (!exist)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		st = kvfs_batch_status(im->wb, i, NULL);
		if (st == 0) {
			im->imported++;
			im->bytes += im->page_bytes;
		} else if (st == -EEXIST && !im->o->replace) {
			exist[nexist++] = i;
		} else {
			batch_path(im, l, i, path, sizeof(path));
			page_error(im, path, "%s", errno_why(st));
		}
	}
	if (nexist)
		compare_existing(im, l, exist, nexist);
	free(exist);
	im->done += n;
	progress_set(im->pr, im->done);
	kvfs_batch_reset(im->wb);
	return 0;
}

/* Read one file into the next slot and add it to the batch. */
static void add_file(struct import *im, const struct src_layer *l, const char *name)
{
	unsigned slot = kvfs_batch_count(im->wb);
	char path[PATH_MAX + 256], *dst = im->base + im->src0 + (uint64_t)slot * im->stride;
	struct stat st;
	uint64_t got = 0;
	ssize_t n = 0;
	int fd, rc;

	snprintf(path, sizeof(path), "%s/%s", l->dir, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0) {
		page_error(im, path, "cannot open: %s", strerror(errno));
		goto out;
	}
	if ((uint64_t)st.st_size != im->page_bytes) {
		page_error(im, path, "%lld bytes, but the pages of %s are %" PRIu64 " bytes: "
			   "not imported", (long long)st.st_size, im->o->model, im->page_bytes);
		goto out;
	}
	while (got < im->page_bytes &&
	       ((n = read(fd, dst + got, im->page_bytes - got)) > 0 || (n < 0 && errno == EINTR)))
		got += n > 0 ? (uint64_t)n : 0;
	if (got < im->page_bytes) {
		page_error(im, path, "read: %s", n < 0 ? strerror(errno) : "the file shrank");
		goto out;
	}
	rc = kvfs_batch_add(im->wb, l->num, name, im->src0 + (uint64_t)slot * im->stride,
			    im->page_bytes);
	if (rc < 0) {
		page_error(im, path, "not a valid page name: %s", strerror(-rc));
		goto out;
	}
	im->slot_name[slot] = name;
	if (fd >= 0)
		close(fd);
	return;
out:
	if (fd >= 0)
		close(fd);
	im->done++;
	progress_set(im->pr, im->done);
}

static int import_layer(struct import *im, const struct src_layer *l)
{
	size_t i;
	int rc = 0;

	for (i = 0; rc == 0 && i < l->nfiles; i++) {
		if (stop_signal) {
			progress_clear(im->pr);
			fprintf(stderr, "kvfs import: interrupted by %s: %u page(s) of the "
				"current batch are not written\n", strsignal(stop_signal),
				kvfs_batch_count(im->wb));
			return -EINTR;
		}
		add_file(im, l, l->files[i]);
		if (kvfs_batch_count(im->wb) == im->slots)
			rc = flush_batch(im, l);
	}
	return rc ? rc : flush_batch(im, l);
}

/* ---- the whole import ---- */

static int make_durable(struct import *im)
{
	if (fsync(kvfs_client_fd(im->c)) == 0)
		return 0;
	progress_clear(im->pr);
	fprintf(stderr, "kvfs import: %s: the pages could not all be made durable: %s\n",
		im->o->model, strerror(errno));
	return -errno;
}

static int import_run(struct import *im)
{
	size_t i;
	int rc;

	rc = model_page_bytes(im->o, &im->page_bytes);
	if (rc < 0)
		return rc;
	im->stride = (im->page_bytes + ALIGN - 1) / ALIGN * ALIGN;
	rc = scan_src(im);
	if (rc < 0)
		return rc;
	rc = kvfs_client_open(im->o->model, &im->c);
	if (rc < 0) {
		fprintf(stderr, "kvfs import: %s: %s\n", im->o->model, rc == -ENOTTY ?
			"not a model directory of a kvfs mount" : strerror(-rc));
		return rc;
	}
	rc = region_setup(im);
	if (rc < 0)
		return rc;
	im->pr = progress_start(im->o->pm, "import", im->total, "pages");
	for (i = 0; rc == 0 && i < im->nlayers; i++)
		if (im->layers[i].files)
			rc = import_layer(im, &im->layers[i]);
	if (rc == 0)
		rc = make_durable(im);
	im->durable = rc == 0;
	if (rc == 0)
		progress_finish(im->pr);
	else
		progress_cancel(im->pr);
	im->pr = NULL;
	return rc;
}

static void summary(const struct import *im, double secs, int status)
{
	double gbps = secs > 0 ? (double)im->bytes / secs / 1e9 : 0;
	unsigned i;

	if (!im->o->json) {
		printf("kvfs import: %s -> %s: %" PRIu64 " pages imported (%.1f MiB), %" PRIu64
		       " skipped (already there, same bytes), %" PRIu64 " failed, %" PRIu64
		       " not reached%s; %.2f s, %.3f GB/s\n", im->o->src,
		       im->o->model, im->imported, (double)im->bytes / (1 << 20), im->skipped,
		       im->failed, not_reached(im),
		       not_reached(im) ? " (the import stopped early: run it again to finish)" : "",
		       secs, gbps);
		return;
	}
	printf("{\"src\": ");
	kvfs_json_str(stdout, im->o->src);
	printf(", \"model\": ");
	kvfs_json_str(stdout, im->o->model);
	printf(", \"page_bytes\": %" PRIu64 ", \"layers\": %zu, \"files\": %" PRIu64
	       ", \"imported\": %" PRIu64 ", \"skipped\": %" PRIu64 ", \"failed\": %" PRIu64
	       ", \"not_reached\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"batches\": %" PRIu64 ", \"secs\": %.3f"
	       ", \"gbps\": %.4f, \"pages_per_s\": %.1f, \"replace\": %s, \"durable\": %s"
	       ", \"errors\": [", im->page_bytes, im->nlayers, im->total, im->imported,
	       im->skipped, im->failed, not_reached(im), im->bytes, im->batches, secs, gbps,
	       secs > 0 ? (double)im->imported / secs : 0, im->o->replace ? "true" : "false",
	       im->durable ? "true" : "false");
	for (i = 0; i < im->nerrs; i++) {
		printf("%s{\"path\": ", i ? ", " : "");
		kvfs_json_str(stdout, im->errs[i].path ? im->errs[i].path : "");
		printf(", \"error\": ");
		kvfs_json_str(stdout, im->errs[i].why ? im->errs[i].why : "");
		printf("}");
	}
	printf("], \"errors_listed\": %u, \"exit\": %d}\n", im->nerrs, status);
}

static void import_free(struct import *im)
{
	size_t i, j;

	for (i = 0; i < im->nlayers; i++) {
		for (j = 0; j < im->layers[i].nfiles; j++)
			free(im->layers[i].files[j]);
		free(im->layers[i].files);
		free(im->layers[i].dir);
	}
	free(im->layers);
	for (i = 0; i < im->nerrs; i++) {
		free(im->errs[i].path);
		free(im->errs[i].why);
	}
	free(im->slot_name);
	if (im->wb)
		kvfs_batch_free(im->wb);
	if (im->rb)
		kvfs_batch_free(im->rb);
	if (im->c)
		kvfs_client_close(im->c);   /* unregisters and unmaps the region */
}

static int parse_args(struct import_opts *o, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "replace", no_argument, NULL, 'r' },
		{ "batch", required_argument, NULL, 'b' },
		{ "sync-batches", no_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "progress", no_argument, NULL, 'P' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "qh", lo, NULL)) != -1) {
		switch (c) {
		case 'r': o->replace = true; break;
		case 's': o->sync_batches = true; break;
		case 'j': o->json = true; break;
		case 'P': o->pm = PROGRESS_ON; break;
		case 'q': o->pm = PROGRESS_OFF; break;
		case 'b':
			if (kvfs_parse_size(optarg, &o->batch_bytes) < 0 || !o->batch_bytes) {
				fprintf(stderr, "kvfs import: bad size \"%s\" (use e.g. 8M, 64M)\n",
					optarg);
				return -1;
			}
			break;
		case 'h':
			fputs(IMPORT_USAGE, stdout);
			return 1;
		default:
			fputs(IMPORT_USAGE, stderr);
			return -1;
		}
	}
	if (optind + 2 != argc) {
		fprintf(stderr, "kvfs import: give SRC and MOUNT/MODEL\n%s", IMPORT_USAGE);
		return -1;
	}
	o->src = argv[optind];
	o->model = argv[optind + 1];
	return 0;
}

int kvfs_cmd_import(int argc, char **argv)
{
	struct import_opts o = { .batch_bytes = 32ull << 20 };
	struct import im = { .o = &o };
	double t0;
	int rc, status;

	rc = parse_args(&o, argc, argv);
	if (rc)
		return rc > 0 ? 0 : 2;
	t0 = now_secs();
	/* No SA_RESTART: a read of a stuck source file returns EINTR. */
	struct sigaction sa = { .sa_handler = on_stop_signal };
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	rc = import_run(&im);
	status = rc < 0 || im.failed || not_reached(&im) ? 1 : 0;
	/* a refusal before anything ran (no model, no SRC) was said already */
	if (im.c || o.json)
		summary(&im, now_secs() - t0, status);
	import_free(&im);
	return status;
}
