/*
 * Fault injection from outside the daemon, for tests: with -o
 * fault_injection, root sets the xattr user.kvfs.fault on the mount root to
 *
 *     store read|write|fsync[,...] NTH EIO|ENOSPC|EROFS|short [COUNT]
 *     manifest commit|write[,...] NTH EIO|ENOSPC|EROFS [COUNT]
 *     off
 *
 * and the NTH matching operation from then on fails that way, and the
 * COUNT - 1 after it (default 1: a transient fault; a short
 * transfer is retried by the store and must not be seen at all). This
 * reaches the seams LD_PRELOAD cannot: io_uring completions
 * (kv_store_fault_arm) and the manifest's commits and row changes
 * (kv_manifest_fault_arm). Without the option the xattr is refused, so a
 * production mount cannot be made to fail on purpose.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvfs_i.h"
#include "manifest.h"
#include "store.h"

struct fault_word {
	const char *word;
	unsigned bit;
};

static const struct fault_word store_ops[] = {
	{ "read", 1u << KV_IO_READ }, { "write", 1u << KV_IO_WRITE },
	{ "fsync", KV_FAULT_FSYNC }, { NULL, 0 },
};
static const struct fault_word manifest_ops[] = {
	{ "commit", KV_MF_FAULT_COMMIT }, { "write", KV_MF_FAULT_WRITE }, { NULL, 0 },
};

/* "read,fsync" -> the bits; 0 if any word is unknown. */
static unsigned parse_ops(char *list, const struct fault_word *words)
{
	unsigned mask = 0, bit;
	char *save = NULL;

	for (char *w = strtok_r(list, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
		bit = 0;
		for (const struct fault_word *f = words; f->word; f++)
			if (!strcmp(w, f->word))
				bit = f->bit;
		if (!bit)
			return 0;
		mask |= bit;
	}
	return mask;
}

/* "EIO" -> -EIO, "short" -> 0 (store only); 1 if unknown. */
static int parse_err(const char *s, bool short_ok)
{
	if (!strcmp(s, "EIO"))
		return -EIO;
	if (!strcmp(s, "ENOSPC"))
		return -ENOSPC;
	if (!strcmp(s, "EROFS"))
		return -EROFS;
	if (!strcmp(s, "CORRUPT"))
		return KV_ERR_CORRUPT;     /* what SQLite's SQLITE_CORRUPT maps to */
	if (short_ok && !strcmp(s, "short"))
		return 0;
	return 1;
}

static int arm(struct kvfs *fs, char *spec)
{
	char target[16], ops[64], errs[16];
	unsigned nth, count = 1, mask;
	int n, err;

	n = sscanf(spec, "%15s %63s %u %15s %u", target, ops, &nth, errs, &count);
	if (n < 4 || nth == 0 || count == 0)
		return -EINVAL;
	if (!strcmp(target, "store")) {
		if (!(mask = parse_ops(ops, store_ops)) || (err = parse_err(errs, true)) > 0)
			return -EINVAL;
		kv_store_fault_arm_count(fs->store, mask, nth, err, count);
		return 0;
	}
	if (!strcmp(target, "manifest")) {
		if (!(mask = parse_ops(ops, manifest_ops)) || (err = parse_err(errs, false)) > 0)
			return -EINVAL;
		kv_manifest_fault_arm(fs->man, mask, nth, err, count);
		return 0;
	}
	return -EINVAL;
}

int kvfs_fault_set(struct kvfs *fs, const char *value, size_t size)
{
	char spec[sizeof(fs->fault_spec)];
	int rc;

	if (!fs->opts.fault_injection)
		return -EPERM;
	if (size == 0 || size >= sizeof(spec))
		return -EINVAL;
	memcpy(spec, value, size);
	spec[size] = '\0';
	spec[strcspn(spec, "\n")] = '\0';
	if (!strcmp(spec, "off")) {
		kv_store_fault_arm(fs->store, 0, 0, 0);
		kv_manifest_fault_arm(fs->man, 0, 0, 0, 0);
		rc = 0;
	} else {
		char copy[sizeof(spec)];

		memcpy(copy, spec, sizeof(copy));
		rc = arm(fs, copy);
	}
	if (rc < 0) {
		kv_log(KV_LOG_ERR, "fault injection: \"%s\" refused: expected \"store "
		       "read|write|fsync NTH EIO|ENOSPC|EROFS|short [COUNT]\", \"manifest "
		       "commit|write NTH EIO|ENOSPC|EROFS [COUNT]\" or \"off\"", spec);
		return rc;
	}
	kv_log(KV_LOG_WARN, "fault injection armed: %s", spec);
	pthread_mutex_lock(&fs->ns_lock);
	memcpy(fs->fault_spec, spec, sizeof(spec));
	pthread_mutex_unlock(&fs->ns_lock);
	return 0;
}

int kvfs_fault_get(struct kvfs *fs, char *out, size_t len)
{
	int n;

	if (!fs->opts.fault_injection)
		return -ENODATA;
	pthread_mutex_lock(&fs->ns_lock);
	n = snprintf(out, len, "%s", fs->fault_spec[0] ? fs->fault_spec : "off");
	pthread_mutex_unlock(&fs->ns_lock);
	return n;
}
