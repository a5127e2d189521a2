/*
 * The kvfs binary as mount(8)'s and umount(8)'s external helpers, so that
 * `mount -t fuse.kvfs STORE MOUNTPOINT -o OPTS`, an /etc/fstab line and
 * systemd's .mount units work like any other filesystem:
 *
 *   /sbin/mount.fuse.kvfs SPEC DIR [-sfnv] [-N NS] [-o OPTS] [-t TYPE]
 *   /sbin/umount.fuse.kvfs DIR [-flnrv] [-N NS] [-t TYPE]
 *
 * (the calling conventions of mount(8), "EXTERNAL HELPERS"). Both are links
 * to the kvfs binary, which looks at the name it was run as: no PATH
 * lookup, which at boot may not find /usr/local/bin.
 *
 * The mount helper runs `kvfs mount` (which ignores the options only
 * mount(8) and systemd read: fstab lines work there too) and that detaches
 * its daemon once the mount is up. The
 * umount helper runs `kvfs umount`, which waits for the daemon to commit and
 * release the store: a shutdown does not cut its last commit short.
 * Exit statuses follow mount(8): 0 ok, 1 bad invocation, 32 mount failed.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mount.h"
#include "tools.h"

#define MOUNT_EX_USAGE 1
#define MOUNT_EX_FAIL 32
#define HELPER_OPTS_MAX 4096

struct helper_args {
	const char *spec, *dir, *type;
	char opts[HELPER_OPTS_MAX];
	bool fake, verbose, force, lazy;
};

static int add_opts(struct helper_args *h, const char *list)
{
	char *dup = strdup(list), *save = NULL, *opt;
	size_t len = strlen(h->opts);
	int rc = 0;

	if (!dup)
		return -1;
	for (opt = strtok_r(dup, ",", &save); opt; opt = strtok_r(NULL, ",", &save)) {
		int n = snprintf(h->opts + len, sizeof(h->opts) - len, "%s%s",
				 len ? "," : "", opt);
		if (n < 0 || (size_t)n >= sizeof(h->opts) - len) {
			rc = -1;
			break;
		}
		len += (size_t)n;
	}
	free(dup);
	return rc;
}

/* Flags and -o/-t/-N values, wherever they come among the positionals. */
static int parse_helper(struct helper_args *h, int argc, char **argv, int npos,
			const char *flags)
{
	const char *pos[2] = { NULL, NULL };
	int n = 0;

	memset(h, 0, sizeof(*h));
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (a[0] != '-' || !a[1]) {
			if (n == npos)
				return -1;
			pos[n++] = a;
		} else if (!strcmp(a, "-o") || !strcmp(a, "-t") || !strcmp(a, "-N")) {
			if (++i == argc)
				return -1;
			if (a[1] == 'N') {
				fprintf(stderr, "%s: -N (another mount namespace) is not supported\n",
					argv[0]);
				return -1;
			}
			if (a[1] == 't')
				h->type = argv[i];
			else if (add_opts(h, argv[i]) < 0)
				return -1;
		} else {
			for (const char *f = a + 1; *f; f++) {
				if (!strchr(flags, *f))
					return -1;
				h->fake |= *f == 'f' && npos == 2;
				h->force |= *f == 'f' && npos == 1;
				h->lazy |= *f == 'l';
				h->verbose |= *f == 'v';
				if (*f == 'r' && npos == 2 && add_opts(h, "ro") < 0)
					return -1;
			}
		}
	}
	if (n != npos)
		return -1;
	h->spec = pos[0];
	h->dir = npos == 2 ? pos[1] : pos[0];
	return 0;
}

int kvfs_mount_helper_main(int argc, char **argv)
{
	struct helper_args h;
	char *margv[7];
	int margc = 0, rc;

	if (parse_helper(&h, argc, argv, 2, "sfnvrw") < 0) {
		fprintf(stderr, "usage: mount.fuse.kvfs STORE MOUNTPOINT [-sfnvrw] [-o OPTIONS]\n"
			"  (run by mount -t fuse.kvfs; see kvfs(8))\n");
		return MOUNT_EX_USAGE;
	}
	if (h.type && strcmp(h.type, "fuse.kvfs") && strcmp(h.type, "kvfs"))
		fprintf(stderr, "mount.fuse.kvfs: type %s taken as fuse.kvfs\n", h.type);
	/* /proc/mounts names the store "kvfs:STORE": accept it back. */
	if (!strncmp(h.spec, "kvfs:", 5))
		h.spec += 5;
	margv[margc++] = "mount";
	margv[margc++] = (char *)h.spec;
	margv[margc++] = (char *)h.dir;
	if (!h.verbose)
		margv[margc++] = "-q";   /* mount(8) is silent when all is well */
	if (h.opts[0]) {
		margv[margc++] = "-o";
		margv[margc++] = h.opts;
	}
	margv[margc] = NULL;
	if (h.verbose)
		fprintf(stderr, "mount.fuse.kvfs: kvfs mount %s %s%s%s\n", h.spec, h.dir,
			h.opts[0] ? " -o " : "", h.opts);
	if (h.fake)
		return 0;
	rc = kvfs_mount_main(margc, margv);
	return rc == 0 ? 0 : rc == 2 ? MOUNT_EX_USAGE : MOUNT_EX_FAIL;
}

int kvfs_umount_helper_main(int argc, char **argv)
{
	struct helper_args h;
	char *uargv[4];
	int uargc = 0;

	if (parse_helper(&h, argc, argv, 1, "flnrv") < 0) {
		fprintf(stderr, "usage: umount.fuse.kvfs MOUNTPOINT [-flnrv]\n"
			"  (run by umount; see kvfs(8))\n");
		return MOUNT_EX_USAGE;
	}
	uargv[uargc++] = "umount";
	if (h.force)
		uargv[uargc++] = "--force";
	else if (h.lazy)
		uargv[uargc++] = "--lazy";
	uargv[uargc++] = (char *)h.dir;
	uargv[uargc] = NULL;
	if (h.verbose)
		fprintf(stderr, "umount.fuse.kvfs: kvfs umount %s%s%s\n",
			uargc == 3 ? uargv[1] : "", uargc == 3 ? " " : "", h.dir);
	return kvfs_cmd_umount(uargc, uargv);
}
