/*
 * Bringing a store up and down: mkfs, kvfs_open (manifest, extent store,
 * in-memory index, recovery of uncommitted space, then each module's
 * threads, in order) and kvfs_close (the reverse, committing everything
 * queued). The top of the engine: it calls every module, none calls it.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kvfs_i.h"
#include "dirshare.h"
#include "openshare.h"

void kvfs_opts_default(struct kvfs_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->max_page = KVFS_MAX_PAGE_DEFAULT;
	o->entry_timeout = KVFS_ENTRY_TIMEOUT_DEFAULT;
	o->commit_batch = KVFS_COMMIT_BATCH_DEFAULT;
	o->dirty_budget = KVFS_DIRTY_BUDGET_DEFAULT;
	o->dedup = true;
	o->ram_cache = KVFS_RAM_CACHE_DEFAULT;
	o->read_hold = KVFS_READ_HOLD_DEFAULT;
	o->open_share = KVFS_OPEN_SHARE_DEFAULT;
	o->dir_share = KVFS_DIR_SHARE_DEFAULT;
	o->evict_high = KVFS_EVICT_HIGH_DEFAULT;
	o->evict_low = KVFS_EVICT_LOW_DEFAULT;
	o->events_ring = KVFS_EVENTS_RING_DEFAULT;
}

int kvfs_parse_size(const char *s, uint64_t *out)
{
	static const char units[] = "KMGTP";
	char *end;
	double v;
	const char *u;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || v < 0)
		return -EINVAL;
	if (*end) {
		u = strchr(units, *end & ~0x20);
		if (!u || !*u)
			return -EINVAL;
		end++;
		if (*end == 'i' || *end == 'I')
			end++;
		if (*end == 'B' || *end == 'b')
			end++;
		if (*end)
			return -EINVAL;
		v *= (double)(1ull << (10 * (u - units + 1)));
	}
	if (v >= 18446744073709551615.0)
		return -ERANGE;
	*out = (uint64_t)v;
	return 0;
}

/* ---- mkfs ---- */

static int read_uuid(char out[37])
{
	FILE *f = fopen("/proc/sys/kernel/random/uuid", "r");
	int ok;

	if (!f)
		return -errno;
	ok = fgets(out, 37, f) != NULL && strlen(out) == 36;
	fclose(f);
	return ok ? 0 : -EIO;
}

static int absolute_path(const char *p, char *out, size_t len)
{
	char cwd[PATH_MAX];

	if (p[0] == '/') {
		if (strlen(p) >= len)
			return -ENAMETOOLONG;
		strcpy(out, p);
		return 0;
	}
	if (!getcwd(cwd, sizeof(cwd)))
		return -errno;
	if ((size_t)snprintf(out, len, "%s/%s", cwd, p) >= len)
		return -ENAMETOOLONG;
	return 0;
}

/*
 * A stripe inside the store's directory is recorded relative to it: a copy
 * of the store (cp -a, a restore from backup) then uses its own segment
 * files, never the original's. Stripes elsewhere (other SSDs) are absolute.
 */
static int stripe_record(const char *dir, const char *stripe, char *out, size_t len)
{
	char adir[PATH_MAX], astripe[PATH_MAX];
	size_t n;
	int rc;

	rc = absolute_path(dir, adir, sizeof(adir));
	if (rc == 0)
		rc = absolute_path(stripe, astripe, sizeof(astripe));
	if (rc < 0)
		return rc;
	n = strlen(adir);
	while (n > 1 && adir[n - 1] == '/')
		adir[--n] = '\0';
	if (!strncmp(astripe, adir, n) && astripe[n] == '/' && astripe[n + 1])
		return (size_t)snprintf(out, len, "%s", astripe + n + 1) >= len ? -ENAMETOOLONG : 0;
	return (size_t)snprintf(out, len, "%s", astripe) >= len ? -ENAMETOOLONG : 0;
}

static int mkfs_meta(const char *dir, const struct kvfs_mkfs_opts *o,
		     struct kv_store_meta *m)
{
	unsigned i;
	int rc;

	memset(m, 0, sizeof(*m));
	rc = read_uuid(m->uuid);
	if (rc < 0)
		return rc;
	m->segment_size = o->segment_size ? o->segment_size : KV_SEGMENT_SIZE_DEFAULT;
	m->capacity = o->capacity;
	m->created_ns = kvfs_now_ns();
	m->nstripes = o->nstripes ? o->nstripes : 1;
	if (m->nstripes > KV_MAX_STRIPES) {
		kv_log(KV_LOG_ERR, "mkfs: %u stripes; at most %u are supported",
		       m->nstripes, KV_MAX_STRIPES);
		return -EINVAL;
	}
	if (m->segment_size < KV_SEGMENT_SIZE_MIN || m->segment_size > KV_SEGMENT_SIZE_MAX ||
	    m->segment_size % KV_ALIGN) {
		kv_log(KV_LOG_ERR, "mkfs: segment size %llu must be >= 1 MiB, <= 512 GiB and "
		       "a multiple of 4 KiB", (unsigned long long)m->segment_size);
		return -EINVAL;
	}
	for (i = 0; i < m->nstripes; i++) {
		rc = o->nstripes ? stripe_record(dir, o->stripes[i], m->stripes[i],
						 sizeof(m->stripes[i]))
				 : (snprintf(m->stripes[i], sizeof(m->stripes[i]), "stripe0"), 0);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int open_store(const char *dir, const struct kv_store_meta *m,
		      bool create, const struct kvfs_opts *o, struct kv_store **out)
{
	const char *paths[KV_MAX_STRIPES];
	struct kv_store_opts so = {
		.nstripes = m->nstripes, .stripes = paths, .uuid = m->uuid,
		.segment_size = m->segment_size, .capacity = m->capacity,
		.create = create, .no_direct = o && o->no_direct,
		.degraded = o && o->degraded,
		/* not for mkfs, nor for offline tools */
		.prealloc = o && !o->offline ? kv_store_prealloc_env() : 0,
	};
	char (*rel)[PATH_MAX] = calloc(m->nstripes, PATH_MAX);
	unsigned i;
	int rc = 0;

	if (!rel)
		return -ENOMEM;
	/* (rows read back from the manifest are resolved already; a new
	 * store's are still relative to its directory) */
	for (i = 0; i < m->nstripes && rc == 0; i++) {
		paths[i] = m->stripes[i];
		if (m->stripes[i][0] == '/')
			continue;
		if ((size_t)snprintf(rel[i], PATH_MAX, "%s/%s", dir, m->stripes[i]) >= PATH_MAX)
			rc = -ENAMETOOLONG;
		paths[i] = rel[i];
	}
	if (rc == 0)
		rc = kv_store_open(&so, out);
	free(rel);
	return rc;
}

/* The mount root's mode and owner, as a chmod or chown left them (its
 * times are this mount's). */
static int load_root_attr(struct kvfs *fs)
{
	struct kv_node_info root;
	struct kv_obj_attr a;
	bool found;
	int rc = kv_manifest_root_attr(fs->man, &a, &found);

	if (rc == KV_ERR_CORRUPT) {     /* logged: not worth refusing the mount */
		kv_log(KV_LOG_WARN, "the mount root is 0755 root this time; a chmod or "
		       "chown of it records it again");
		return 0;
	}
	if (rc < 0 || !found)
		return rc;
	rc = kv_index_get(fs->idx, KV_ROOT_INO, &root);
	if (rc < 0)
		return rc;
	root.attr.mode = a.mode;
	root.attr.uid = a.uid;
	root.attr.gid = a.gid;
	return kv_index_update(fs->idx, KV_ROOT_INO, &root, KV_UPD_ATTR);
}

/* mkdir -p: a store may be created anywhere, parents included. */
static int make_dirs(const char *dir)
{
	char path[PATH_MAX], *p;

	if (strlen(dir) >= sizeof(path))
		return -ENAMETOOLONG;
	strcpy(path, dir);
	for (p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return -errno;
	/* The manifest names every page: the store is its owner's alone. */
	return chmod(path, 0700) < 0 ? -errno : 0;
}

/* A store made without --capacity gets a budget it can keep: 95% of the
 * free space the stripes' filesystems have now (each counted once), so
 * that eviction, not ENOSPC from a full disk, is what a cache sees. */
#define DEFAULT_CAPACITY_PCT 95

static uint64_t default_capacity(struct kv_store *s)
{
	struct kv_store_usage u;

	kv_store_usage(s, &u);     /* no budget yet: avail is the free space */
	return u.avail / 100 * DEFAULT_CAPACITY_PCT / KV_ALIGN * KV_ALIGN;
}

static void capacity_too_small(uint64_t capacity, const char *why)
{
	kv_log(KV_LOG_ERR, "mkfs: a capacity of %llu bytes is below the minimum of "
	       "%llu bytes (1M)%s", (unsigned long long)capacity,
	       (unsigned long long)KVFS_CAPACITY_MIN, why);
}

int kvfs_mkfs(const char *dir, const struct kvfs_mkfs_opts *o)
{
	struct kv_store_meta *m = calloc(1, sizeof(*m));
	struct kv_store *s = NULL;
	char db[PATH_MAX];
	int rc;

	if (!m)
		return -ENOMEM;
	/* A capacity given is checked before anything is made: stripe
	 * markers left behind would refuse the next mkfs of this store. */
	if (o->capacity && o->capacity < KVFS_CAPACITY_MIN) {
		capacity_too_small(o->capacity, "");
		rc = -EINVAL;
		goto out;
	}
	rc = make_dirs(dir);
	if (rc < 0) {
		kv_log(KV_LOG_ERR, "mkfs: cannot create %s: %s", dir, strerror(-rc));
		goto out;
	}
	snprintf(db, sizeof(db), "%s/%s", dir, KV_MANIFEST_FILE);
	if (access(db, F_OK) == 0) {
		kv_log(KV_LOG_ERR, "mkfs: %s already holds a kvfs store (%s)", dir, db);
		rc = -EEXIST;
		goto out;
	}
	rc = mkfs_meta(dir, o, m);
	if (rc < 0)
		goto out;
	/* Stripes first: a manifest must never name stripes that do not exist. */
	rc = open_store(dir, m, true, NULL, &s);
	if (rc < 0)
		goto out;
	if (!m->capacity)
		m->capacity = default_capacity(s);
	kv_store_close(s);
	if (m->capacity < KVFS_CAPACITY_MIN) {
		capacity_too_small(m->capacity, " (the stripes' filesystems are nearly full)");
		rc = -ENOSPC;
		goto out;
	}
	if (o->capacity_made)
		*o->capacity_made = m->capacity;
	rc = kv_manifest_create(dir, m);
	if (rc == 0 && chmod(db, 0600) < 0)
		rc = -errno;
out:
	free(m);
	return rc;
}

/* ---- open / close ---- */

/* A budget the stripes cannot hold ends in ENOSPC from the disk instead of
 * eviction: refuse a -o capacity like that, warn about a stored one (the
 * disk may have filled since mkfs). Counts the store's own bytes (the
 * reclaim at mount has not run yet: what it frees only adds room). */
static int check_capacity_fits(struct kvfs *fs)
{
	struct kv_store_usage u;
	uint64_t can;

	if (!fs->meta.capacity)
		return 0;
	kv_store_usage(fs->store, &u);
	can = u.used + u.avail;   /* avail: the smaller of budget room and free space */
	if (can >= fs->meta.capacity)
		return 0;
	kv_log(fs->opts.capacity ? KV_LOG_ERR : KV_LOG_WARN,
	       "capacity %llu bytes%s is more than the stripes can hold (%llu used + %llu "
	       "free): writes will meet a full disk before eviction starts; %s",
	       (unsigned long long)fs->meta.capacity,
	       fs->opts.capacity ? " (-o capacity)" : "", (unsigned long long)u.used,
	       (unsigned long long)(can - u.used),
	       fs->opts.capacity ? "give a smaller -o capacity" : "free space or lower it with -o capacity");
	return fs->opts.capacity ? -EINVAL : 0;
}

static int lock_store(struct kvfs *fs)
{
	char holder[32];
	int rc = kvfs_lock_store(fs->store_dir, false, &fs->lock, holder,
				 sizeof(holder));

	if (rc == -EBUSY)
		kv_log(KV_LOG_ERR, "store %s is in use by another kvfs daemon (pid %s); "
		       "unmount it first", fs->store_dir, holder);
	else if (rc < 0)
		kv_log(KV_LOG_ERR, "cannot lock store %s (the directory and %s/kvfs.lock): %s",
		       fs->store_dir, fs->store_dir, kv_strerror(rc));
	return rc;
}

static int mark_extent(void *arg, const struct kv_extent_rec *r)
{
	return kv_store_mark_used(arg, &r->ext);
}

int kvfs_recover_space(struct kvfs *fs)
{
	struct kv_reclaim_stats rs = { 0 };
	bool walked;
	int rc;

	/* Extents retired while the index loaded are marked too: their
	 * removal may not be durable yet. Freed before the reclaim, the
	 * store returns them anyway; after it, they are freed as any other. */
	rc = kv_index_extent_walk(fs->idx, mark_extent, fs->store);
	walked = rc == 0;
	if (walked)
		rc = kv_store_reclaim(fs->store, &rs);   /* refuses overlaps first */
	kv_index_retired_drop(fs->idx);
	if (rc < 0 && (!walked || rc == KV_ERR_CORRUPT)) {
		kv_log(KV_LOG_ERR, "manifest extents do not match the segment files of %s: %s; "
		       "nothing was changed (see docs/format.md, recovery)",
		       fs->store_dir, kv_strerror(rc));
		return rc;
	}
	if (rc < 0)
		return rc;
	if (rs.bytes_reclaimed || rs.segments_removed)
		kv_log(KV_LOG_INFO, "recovery: reclaimed %llu uncommitted bytes, removed %llu empty segments",
		       (unsigned long long)rs.bytes_reclaimed,
		       (unsigned long long)rs.segments_removed);
	return 0;
}

/* Is resolved path p the directory dir, or inside it? */
static bool path_within(const char *p, const char *dir)
{
	char real[PATH_MAX];
	size_t n;

	if (!realpath(dir, real))
		return false;   /* a missing stripe cannot hold the mountpoint */
	n = strlen(real);
	if (n == 1)
		return true;    /* "/" */
	return !strncmp(p, real, n) && (p[n] == '\0' || p[n] == '/');
}

int kvfs_mountpoint_outside(const char *mnt, const char *store_dir,
			    struct kvfs *fs)
{
	char real[PATH_MAX];

	if (!realpath(mnt, real))
		return 0;       /* check_mountpoint has said why */
	if (path_within(real, store_dir)) {
		kv_log(KV_LOG_ERR, "cannot mount at %s: it is the store directory %s "
		       "or inside it; mount outside the store and its stripes", mnt,
		       store_dir);
		return -EINVAL;
	}
	for (unsigned i = 0; fs && i < fs->meta.nstripes; i++) {
		const char *sp = kv_store_stripe_path(fs->store, i);

		if (sp && path_within(real, sp)) {
			kv_log(KV_LOG_ERR, "cannot mount at %s: it is stripe %u's "
			       "directory %s or inside it; mount outside the store "
			       "and its stripes", mnt, i, sp);
			return -EINVAL;
		}
	}
	return 0;
}

static void fs_free(struct kvfs *fs);

/* Before the committer, which publishes: numbering goes on from the last
 * record an earlier mount committed. */
static int start_events(struct kvfs *fs)
{
	uint64_t last;
	int rc = kv_manifest_event_seq(fs->man, &last);

	if (rc < 0)
		return rc;
	return kvfs_events_init(fs, last, fs->opts.events_ring);
}

static int fs_alloc(const char *dir, const struct kvfs_opts *o, struct kvfs **out)
{
	struct kvfs *fs = calloc(1, sizeof(*fs));

	if (!fs)
		return -ENOMEM;
	fs->store_dir = strdup(dir);
	fs->lock = KVFS_STORE_LOCK_NONE;
	fs->live_buckets = 4096;        /* doubles as it fills (live.c) */
	fs->live = calloc(fs->live_buckets, sizeof(*fs->live));
	if (!fs->store_dir || !fs->live) {
		free(fs->store_dir);
		free(fs->live);
		free(fs);
		return -ENOMEM;
	}
	if (o)
		fs->opts = *o;
	else
		kvfs_opts_default(&fs->opts);
	if (fs->opts.offline)
		fs->opts.ram_cache = 0;
	pthread_mutex_init(&fs->ns_lock, NULL);
	pthread_cond_init(&fs->seal_cv, NULL);
	kvfs_pins_init(&fs->pins);
	kvfs_dirty_init(fs, fs->opts.dirty_budget);
	kvfs_open_share_init(fs);
	/* what write-back cycles stays warm for reuse (store/buf.c) */
	kv_buf_set_idle_max(fs->opts.dirty_budget);
	if (kvfs_ram_init(fs, fs->opts.ram_cache) < 0 || kvfs_dedup_init(fs) < 0) {
		fs_free(fs);
		return -ENOMEM;
	}
	*out = fs;
	return 0;
}

static void fs_free(struct kvfs *fs)
{
	size_t i;

	kvfs_prefetch_stop(fs);   /* before the store: it reads */
	if (fs->store)
		kvfs_pins_fini(fs);
	for (i = 0; i < fs->live_buckets; i++) {
		while (fs->live[i]) {
			struct kvfs_live *l = fs->live[i];

			fs->live[i] = l->hnext;
			kvfs_dirty_give_live(fs, l);
			kvfs_data_put(l->wbuf);
			kvfs_data_put(l->ram);
			free(l);
		}
	}
	if (fs->idx)
		kv_index_free(fs->idx);
	kvfs_load_free(fs);     /* its connection, after the index's loader */
	if (fs->store)
		kv_store_close(fs->store);
	if (fs->man)
		kv_manifest_close(fs->man);
	pthread_mutex_destroy(&fs->ns_lock);
	pthread_cond_destroy(&fs->seal_cv);
	kvfs_uidtab_free(&fs->uid_opens);
	kvfs_dir_share_free(fs);
	kvfs_dirty_fini(fs);
	kvfs_dedup_fini(fs);
	kvfs_ram_fini(fs);
	kvfs_cap_free(fs);
	kvfs_events_fini(fs);
	kvfs_unlock_store(&fs->lock);
	free(fs->live);
	free(fs->store_dir);
	free(fs);
}

int kvfs_open(const char *dir, const struct kvfs_opts *o, struct kvfs **out)
{
	struct kvfs *fs;
	bool background;
	int rc;

	rc = fs_alloc(dir, o, &fs);
	if (rc < 0)
		return rc;
	if (getenv("KVFS_TEST_HASH_COLLIDE")) {
		kv_hash_test_collide(true);
		kv_log(KV_LOG_WARN, "test hook KVFS_TEST_HASH_COLLIDE: every page of one "
		       "length has the same checksum; checksums detect nothing");
	}
	kvfs_reserve_before_open(dir);
	rc = kv_manifest_open(dir, &fs->man);
	if (rc == 0)
		rc = lock_store(fs);
	/* In the background, the loader's thread reads the manifest through
	 * and checks it (engine/loading.c) before any change is accepted. */
	background = fs->opts.background_load && !fs->opts.offline;
	if (rc == 0 && !background) {
		kv_manifest_prefetch(fs->man);   /* everything below walks it all */
		rc = kv_manifest_quick_check(fs->man);
	}
	if (rc == 0)
		rc = kv_manifest_recover(fs->man, NULL);
	if (rc < 0)
		goto fail;
	rc = kv_manifest_meta(fs->man, &fs->meta);
	if (rc == 0)
		rc = kv_manifest_bump_mount(fs->man, &fs->mount_gen);
	if (rc < 0)
		goto fail;
	if (fs->opts.max_page > fs->meta.segment_size) {
		/* A page lives in one extent: a larger one could never be sealed.
		 * Only an explicit -o max_page deserves a warning. */
		kv_log(fs->opts.max_page == KVFS_MAX_PAGE_DEFAULT ? KV_LOG_DEBUG : KV_LOG_WARN, "max_page %llu is larger than the segment size; using %llu",
		       (unsigned long long)fs->opts.max_page,
		       (unsigned long long)fs->meta.segment_size);
		fs->opts.max_page = fs->meta.segment_size;
	}
	if (fs->opts.capacity)
		fs->meta.capacity = fs->opts.capacity;   /* -o capacity: this mount's budget */
	rc = open_store(dir, &fs->meta, false, &fs->opts, &fs->store);
	if (!fs->opts.degraded && (rc == KV_ERR_NOTSTORE || rc == KV_ERR_MISMATCH ||
				   rc == -ENOENT || rc == -ENOTDIR || rc == -EIO))
		kv_log(KV_LOG_ERR, "a stripe of store %s cannot be opened (see above); "
		       "if its disk is gone for now, mount with -o degraded: its pages "
		       "then give EIO and nothing on it is written or reclaimed",
		       dir);
	if (rc == 0)
		rc = check_capacity_fits(fs);
	if (rc < 0)
		goto fail;
	rc = kv_index_new(&fs->idx);
	if (rc == 0)
		rc = load_root_attr(fs);
	if (rc < 0)
		goto fail;
	if (!background) {
		rc = kv_index_load(fs->idx, fs->man);
		if (rc == 0)
			rc = kvfs_recover_space(fs);
		if (rc < 0)
			goto fail;
	}
	rc = kvfs_room_start(fs);
	if (rc < 0)
		goto fail;
	rc = start_events(fs);
	if (rc == 0)
		rc = kvfs_commit_start(fs);
	if (rc == 0)
		rc = kvfs_cap_start(fs);
	if (rc == 0 && !fs->opts.offline)
		rc = kvfs_prefetch_start(fs);
	if (rc == 0 && background)
		rc = kvfs_load_start(fs, kvfs_recover_space, kvfs_manifest_damaged,
				     fs->opts.index_pages ? kvfs_unload_loop : NULL);
	if (rc == 0)     /* every directory is in the index by now */
		rc = kvfs_dir_share_count(fs);
	if (rc < 0)
		goto fail;
	*out = fs;
	return 0;
fail:
	kv_log(KV_LOG_ERR, "cannot open store %s: %s", dir, kv_strerror(rc));
	if ((rc == KV_ERR_CORRUPT || rc == KV_ERR_NOTSTORE || rc == -ENOENT) &&
	    kv_manifest_has_journal(dir))
		kv_log(KV_LOG_ERR, "%s/%s is missing or damaged, but %s/%s holds the "
		       "store's history: run `kvfs fsck --rebuild %s` to make the manifest "
		       "anew from it (the old one is kept aside)", dir, KV_MANIFEST_FILE,
		       dir, KV_JOURNAL_FILE, dir);
	else if (rc == KV_ERR_CORRUPT)
		kv_log(KV_LOG_ERR, "run `kvfs fsck %s` to see what is damaged, and "
		       "`kvfs fsck --repair %s` to drop what cannot be trusted", dir, dir);
	kvfs_load_stop(fs);
	kvfs_cap_stop(fs);
	kvfs_commit_stop(fs);
	fs_free(fs);
	return rc;
}

uint64_t kvfs_close(struct kvfs *fs)
{
	uint64_t lost;

	if (!fs)
		return 0;
	kvfs_load_stop(fs);     /* the walk gives up */
	kvfs_cap_stop(fs);      /* the evictor queues deletes: stop it first */
	kvfs_commit_stop(fs);
	lost = atomic_load(&fs->lost_changes);
	if (lost) {
		char line[48];
		int n = snprintf(line, sizeof(line), "lost %llu\n", (unsigned long long)lost);

		kv_log(KV_LOG_ERR, "%llu changes were not committed to the manifest of %s: "
		       "they are lost", (unsigned long long)lost, fs->store_dir);
		/* Left in the lock file (not cleared at unlock) for kvfs umount. */
		if (fs->lock.file_fd >= 0 && (ftruncate(fs->lock.file_fd, 0) < 0 ||
		    pwrite(fs->lock.file_fd, line, (size_t)n, 0) != n))
			kv_log(KV_LOG_WARN, "cannot record the loss in %s/kvfs.lock", fs->store_dir);
		fs->lock.keep_contents = true;
	}
	fs_free(fs);
	return lost;
}
