/*
 * `kvfs model create|list|drop`: model directories and their geometry,
 * through the mount itself (mkdir + the user.kvfs.geometry xattr, unlink +
 * rmdir), so the daemon stays the only writer of the store.
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <libgen.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "tools.h"

static const char model_usage[] =
	"usage: kvfs model create MOUNT/NAME --layers N --kv-heads N --head-dim N --dtype T --page-tokens N\n"
	"       kvfs model list MOUNT\n"
	"       kvfs model drop MOUNT/NAME [--yes]   remove the model and all its pages\n"
	"  dtype: f16 bf16 f32 f64 f8 fp8_e4m3 fp8_e5m2 i8 u8\n"
	"  pages are then exactly 2*page_tokens*kv_heads*head_dim*sizeof(dtype) bytes,\n"
	"  and layer directories 00..N-1 are created\n";

#define FUSE_SUPER_MAGIC 0x65735546

/* Is dir the root of a kvfs mount? (a FUSE filesystem whose root is inode 1
 * and which answers kvfs's statfs name limit). Refusing elsewhere keeps
 * `model create` from making plain directories that look like success. */
static int check_mount_root(const char *cmd, const char *dir)
{
	struct statfs sf;
	struct stat st;

	if (statfs(dir, &sf) < 0 || stat(dir, &st) < 0) {
		fprintf(stderr, "kvfs model %s: %s: %s\n", cmd, dir, strerror(errno));
		return -1;
	}
	if ((unsigned long)sf.f_type != FUSE_SUPER_MAGIC || st.st_ino != 1) {
		fprintf(stderr, "kvfs model %s: %s is not the root of a kvfs mount\n", cmd, dir);
		return -1;
	}
	return 0;
}

static int model_create(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "layers", required_argument, NULL, 'l' },
		{ "kv-heads", required_argument, NULL, 'k' },
		{ "head-dim", required_argument, NULL, 'd' },
		{ "dtype", required_argument, NULL, 't' },
		{ "page-tokens", required_argument, NULL, 'p' },
		{ NULL, 0, NULL, 0 },
	};
	unsigned long layers = 0, heads = 0, dim = 0, tokens = 0, i;
	const char *dtype = NULL;
	char geo[256], path[4096];
	int c, width;

	if (argc == 2 && !strcmp(argv[1], "--help")) {
		fputs(model_usage, stdout);
		return 0;
	}
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'l': layers = strtoul(optarg, NULL, 10); break;
		case 'k': heads = strtoul(optarg, NULL, 10); break;
		case 'd': dim = strtoul(optarg, NULL, 10); break;
		case 't': dtype = optarg; break;
		case 'p': tokens = strtoul(optarg, NULL, 10); break;
		default: fputs(model_usage, stderr); return 2;
		}
	}
	if (optind + 1 != argc || !layers || !heads || !dim || !tokens || !dtype ||
	    layers > 99999) {
		fputs(model_usage, stderr);
		return 2;
	}
	snprintf(geo, sizeof(geo), "layers=%lu kv_heads=%lu head_dim=%lu dtype=%s page_tokens=%lu",
		 layers, heads, dim, dtype, tokens);
	snprintf(path, sizeof(path), "%s", argv[optind]);
	if (check_mount_root("create", dirname(path)) < 0)
		return 1;
	if (mkdir(argv[optind], 0755) < 0) {
		fprintf(stderr, "kvfs model create: mkdir %s: %s\n", argv[optind], strerror(errno));
		return 1;
	}
	if (setxattr(argv[optind], "user.kvfs.geometry", geo, strlen(geo), 0) < 0) {
		fprintf(stderr, "kvfs model create: geometry \"%s\" refused: %s (see the daemon log)\n",
			geo, strerror(errno));
		rmdir(argv[optind]);
		return 1;
	}
	width = layers > 100 ? (int)snprintf(NULL, 0, "%lu", layers - 1) : 2;
	for (i = 0; i < layers; i++) {
		snprintf(path, sizeof(path), "%s/%0*lu", argv[optind], width, i);
		if (mkdir(path, 0755) < 0) {
			fprintf(stderr, "kvfs model create: mkdir %s: %s\n", path, strerror(errno));
			return 1;
		}
	}
	printf("kvfs: model %s: %s, %lu layer directories\n", argv[optind], geo, layers);
	return 0;
}

static unsigned long count_pages(const char *model)
{
	unsigned long n = 0;
	struct dirent *e, *p;
	char path[4096];
	DIR *d = opendir(model), *l;

	if (!d)
		return 0;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		if (snprintf(path, sizeof(path), "%s/%s", model, e->d_name) >= (int)sizeof(path))
			continue;
		l = opendir(path);
		if (!l)
			continue;
		while ((p = readdir(l)))
			if (strcmp(p->d_name, ".") && strcmp(p->d_name, ".."))
				n++;
		closedir(l);
	}
	closedir(d);
	return n;
}

static int model_list(int argc, char **argv)
{
	char path[4096], geo[256];
	struct dirent *e;
	ssize_t len;
	DIR *d;

	if (argc == 2 && !strcmp(argv[1], "--help")) {
		fputs(model_usage, stdout);
		return 0;
	}
	if (argc != 2) {
		fputs(model_usage, stderr);
		return 2;
	}
	if (check_mount_root("list", argv[1]) < 0)
		return 1;
	d = opendir(argv[1]);
	if (!d) {
		fprintf(stderr, "kvfs model list: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	printf("%-32s %8s  %s\n", "MODEL", "PAGES", "GEOMETRY");
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		if (snprintf(path, sizeof(path), "%s/%s", argv[1], e->d_name) >= (int)sizeof(path))
			continue;
		len = getxattr(path, "user.kvfs.geometry", geo, sizeof(geo) - 1);
		geo[len > 0 ? len : 0] = '\0';
		printf("%-32s %8lu  %s\n", e->d_name, count_pages(path),
		       len > 0 ? geo : "(none: any page size)");
	}
	closedir(d);
	return 0;
}

/* ---- drop ---- */

struct drop_count {
	unsigned long pages, layers;
	unsigned long long bytes;
};

/* Visit every page of a model: count them (unlink false) or remove them
 * and their layer directories (unlink true). 0 or -1 (reported). */
static int walk_model(const char *model, bool unlink_them, struct drop_count *c)
{
	char layer[4096], page[4096 + 256];
	struct dirent *e, *p;
	struct stat st;
	DIR *d = opendir(model), *l;
	int rc = 0;

	if (!d) {
		fprintf(stderr, "kvfs model drop: %s: %s\n", model, strerror(errno));
		return -1;
	}
	while (rc == 0 && (e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(layer, sizeof(layer), "%s/%s", model, e->d_name);
		l = opendir(layer);
		if (!l) {
			fprintf(stderr, "kvfs model drop: %s: %s\n", layer, strerror(errno));
			rc = -1;
			break;
		}
		while (rc == 0 && (p = readdir(l))) {
			if (!strcmp(p->d_name, ".") || !strcmp(p->d_name, ".."))
				continue;
			snprintf(page, sizeof(page), "%s/%s", layer, p->d_name);
			if (lstat(page, &st) == 0 && (!unlink_them || unlink(page) == 0)) {
				c->pages++;
				c->bytes += (unsigned long long)st.st_size;
				continue;
			}
			fprintf(stderr, "kvfs model drop: %s %s: %s\n",
				unlink_them ? "unlink" : "stat", page, strerror(errno));
			rc = -1;
		}
		closedir(l);
		if (rc == 0 && unlink_them && rmdir(layer) < 0) {
			fprintf(stderr, "kvfs model drop: rmdir %s: %s\n", layer, strerror(errno));
			rc = -1;
		}
		c->layers++;
	}
	closedir(d);
	return rc;
}

/* Is path a model directory of a kvfs mount (a directory in its root)? */
static int check_model(const char *path)
{
	char dir[4096], base[4096];
	struct stat st;

	snprintf(dir, sizeof(dir), "%s", path);
	snprintf(base, sizeof(base), "%s", path);
	if (check_mount_root("drop", dirname(dir)) < 0)
		return -1;
	if (basename(base)[0] == '.' || stat(path, &st) < 0 || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "kvfs model drop: %s is not a model directory%s%s\n", path,
			errno == ENOENT ? ": " : "", errno == ENOENT ? strerror(errno) : "");
		return -1;
	}
	return 0;
}

/* Ask on the terminal; in a pipe the answer must be --yes. 0: go ahead,
 * 1: the user said no, 2: no terminal to ask on. */
static int confirm(const char *path, const struct drop_count *c)
{
	char answer[16];

	if (!isatty(STDIN_FILENO)) {
		fprintf(stderr, "kvfs model drop: not asking for confirmation without a "
			"terminal; pass --yes to drop %s (%lu pages)\n", path, c->pages);
		return 2;
	}
	fprintf(stderr, "drop model %s: %lu pages (%llu bytes) in %lu layers? [y/N] ",
		path, c->pages, c->bytes, c->layers);
	if (!fgets(answer, sizeof(answer), stdin) ||
	    (strcmp(answer, "y\n") && strcmp(answer, "yes\n"))) {
		fprintf(stderr, "kvfs model drop: nothing removed\n");
		return 1;
	}
	return 0;
}

static int model_drop(int argc, char **argv)
{
	struct drop_count c = { 0 }, done = { 0 };
	const char *path = NULL;
	bool yes = false;
	int i, rc;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--yes") || !strcmp(argv[i], "-y"))
			yes = true;
		else if (!strcmp(argv[i], "--help")) {
			fputs(model_usage, stdout);
			return 0;
		} else if (argv[i][0] != '-' && !path)
			path = argv[i];
		else {
			fputs(model_usage, stderr);
			return 2;
		}
	}
	if (!path) {
		fputs(model_usage, stderr);
		return 2;
	}
	if (check_model(path) < 0 || walk_model(path, false, &c) < 0)
		return 1;
	if (!yes && (rc = confirm(path, &c)) != 0)
		return rc;
	if (walk_model(path, true, &done) < 0)
		return 1;
	if (rmdir(path) < 0) {
		fprintf(stderr, "kvfs model drop: rmdir %s: %s\n", path, strerror(errno));
		return 1;
	}
	printf("kvfs: dropped model %s: %lu pages, %llu bytes, %lu layer directories\n",
	       path, done.pages, done.bytes, done.layers);
	return 0;
}

int kvfs_cmd_model(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "create"))
		return model_create(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "list"))
		return model_list(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "drop"))
		return model_drop(argc - 1, argv + 1);
	fputs(model_usage, argc >= 2 && !strcmp(argv[1], "--help") ? stdout : stderr);
	return argc >= 2 && !strcmp(argv[1], "--help") ? 0 : 2;
}
