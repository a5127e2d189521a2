/*
 * `kvfs model create|list`: model directories and their geometry, through
 * the mount itself (mkdir + the user.kvfs.geometry xattr), so the daemon
 * stays the only writer of the store.
 */
#include <dirent.h>
#include <errno.h>
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

int kvfs_cmd_model(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "create"))
		return model_create(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "list"))
		return model_list(argc - 1, argv + 1);
	fputs(model_usage, argc >= 2 && !strcmp(argv[1], "--help") ? stdout : stderr);
	return argc >= 2 && !strcmp(argv[1], "--help") ? 0 : 2;
}
