/*
 * What one uid's open page files may take, counted per uid in one table
 * (fs->uid_opens, under ns_lock):
 *
 * - Loaded bytes (-o read_hold). A reader's first read loads and
 *   verifies the whole page (its checksum covers the whole page) and the
 *   handle keeps it for the reads after, one copy per open file unless
 *   the RAM tier shares it. Nothing bounded that: one uid opening 48
 *   pages of 64 MiB and reading a byte of each grew the daemon by 3 GB.
 *   Now each uid's open files keep at most read_hold bytes; past that a
 *   read loads the page for itself and lets it go (the RAM tier may still
 *   keep it), so memory stays bounded by what the FUSE workers read at
 *   once, and only that uid's reads get slower.
 *
 * - Bytes held against eviction (-o open_share). A page someone holds
 *   open is never evicted: its reader may read it until it closes. One
 *   uid opening 16 pages of 64 MiB per GiB of capacity (and keeping them
 *   open, or being stopped) emptied everyone else's pages and made every
 *   write ENOSPC. Now one uid's open files may hold at most open_share
 *   percent of the capacity, or one page of any size; past it, open
 *   fails with EMFILE, the errno
 *   Linux gives for per-user limits (RLIMIT_NOFILE, inotify instances).
 *   Only in cache mode: without eviction, an open file takes nothing
 *   from anyone.
 */
#include <errno.h>

#include "kvfs_i.h"
#include "openshare.h"

struct kvfs_uid_bytes {
	uint32_t uid;
	uint64_t loaded;     /* kept between reads (read_hold) */
	uint64_t held;       /* held against eviction (open_share) */
	uint64_t writers;    /* pages it is still writing (create to seal) */
};

void kvfs_open_share_init(struct kvfs *fs)
{
	fs->uid_opens = KVFS_UIDTAB(struct kvfs_uid_bytes);
}

static struct kvfs_uid_bytes *entry_of(struct kvfs *fs, uint32_t uid, bool add)
{
	return kvfs_uidtab_get(&fs->uid_opens, uid, add);
}

static void entry_maybe_drop(struct kvfs *fs, struct kvfs_uid_bytes *e)
{
	if (!e->loaded && !e->held && !e->writers)
		kvfs_uidtab_remove(&fs->uid_opens, e);
}

bool kvfs_read_hold_take(struct kvfs *fs, uint32_t uid, uint64_t bytes, uint64_t ino)
{
	static struct kv_log_limit log;
	struct kvfs_uid_bytes *e;
	bool ok;

	pthread_mutex_lock(&fs->ns_lock);
	e = entry_of(fs, uid, false);
	ok = (e ? e->loaded : 0) + bytes <= fs->opts.read_hold &&
	     (e || (e = entry_of(fs, uid, true)));
	if (ok)
		e->loaded += bytes;
	pthread_mutex_unlock(&fs->ns_lock);
	if (!ok)
		KV_LOG_LIMITED(&log, KV_LOG_INFO, "uid %u: its open page files keep %llu bytes "
			       "loaded (-o read_hold); inode %llu is loaded again for each read",
			       uid, (unsigned long long)fs->opts.read_hold,
			       (unsigned long long)ino);
	return ok;
}

void kvfs_read_hold_give(struct kvfs *fs, uint32_t uid, uint64_t bytes)
{
	struct kvfs_uid_bytes *e;

	pthread_mutex_lock(&fs->ns_lock);
	e = entry_of(fs, uid, false);
	if (e) {
		e->loaded -= bytes;
		entry_maybe_drop(fs, e);
	}
	pthread_mutex_unlock(&fs->ns_lock);
}

uint64_t kvfs_open_share_bytes(const struct kvfs *fs, uint32_t uid)
{
	const struct kvfs_opts *o = &fs->opts;

	if (!uid || !fs->meta.capacity || o->authoritative || o->open_share >= 100)
		return 0;
	return fs->meta.capacity / 100 * o->open_share +
	       fs->meta.capacity % 100 * o->open_share / 100;
}

static int refuse(struct kvfs *fs, uint32_t uid, uint64_t held, uint64_t share,
		  const char *what, const char *name)
{
	static struct kv_log_limit log;

	KV_LOG_LIMITED(&log, KV_LOG_INFO, "%s page %s refused (EMFILE): uid %u's page files "
		       "(open, or being written) hold %llu of their %llu bytes against eviction "
		       "(-o open_share=%u%% of the capacity)", what, name, uid,
		       (unsigned long long)held, (unsigned long long)share,
		       fs->opts.open_share);
	return -EMFILE;
}

uint64_t kvfs_open_share_held(struct kvfs *fs, uint32_t uid)
{
	struct kvfs_uid_bytes *e;
	uint64_t held;

	pthread_mutex_lock(&fs->ns_lock);
	e = entry_of(fs, uid, false);
	held = e ? e->held : 0;
	pthread_mutex_unlock(&fs->ns_lock);
	return held;
}

/* What uid's page files hold: open ones, and those it is still writing,
 * each of which holds at least the block its name is charged (an empty
 * page being written has no bytes yet, but cannot be evicted). */
static uint64_t have_of(const struct kvfs_uid_bytes *e, uint64_t writing)
{
	uint64_t names = e ? e->writers * KV_ALIGN : 0;

	return (e ? e->held : 0) + (writing > names ? writing : names);
}

int kvfs_open_share_take(struct kvfs *fs, uint32_t uid, uint64_t bytes, uint64_t writing,
			 const char *name, uint64_t *counted)
{
	uint64_t share = kvfs_open_share_bytes(fs, uid), have;
	struct kvfs_uid_bytes *e = entry_of(fs, uid, false);

	*counted = 0;
	if (!bytes || !share)
		return 0;          /* no limit */
	/* A uid holding nothing may open any page, however large: a page
	 * larger than the share must stay readable. */
	have = have_of(e, writing);
	if (have && have + bytes > share)
		return refuse(fs, uid, have, share, "open of", name);
	if (!e && !(e = entry_of(fs, uid, true)))
		return -ENOMEM;
	e->held += bytes;
	*counted = bytes;
	return 0;
}

uint64_t kvfs_open_share_add_locked(struct kvfs *fs, uint32_t uid, uint64_t bytes)
{
	struct kvfs_uid_bytes *e;

	if (!kvfs_open_share_bytes(fs, uid) || !(e = entry_of(fs, uid, true)))
		return 0;     /* no limit; or no memory for the record: uncounted */
	e->held += bytes;
	return bytes;
}

int kvfs_open_share_full(struct kvfs *fs, uint32_t uid, uint64_t writing, const char *name)
{
	uint64_t share = kvfs_open_share_bytes(fs, uid);
	struct kvfs_uid_bytes *e = share ? entry_of(fs, uid, false) : NULL;
	uint64_t have = have_of(e, writing);

	if (share && have >= share)
		return refuse(fs, uid, have, share, "create of", name);
	return 0;
}

void kvfs_open_share_give_locked(struct kvfs *fs, uint32_t uid, uint64_t bytes)
{
	struct kvfs_uid_bytes *e;

	if (!bytes || !(e = entry_of(fs, uid, false)))
		return;
	e->held -= bytes;
	entry_maybe_drop(fs, e);
}

bool kvfs_open_share_writer_locked(struct kvfs *fs, uint32_t uid)
{
	struct kvfs_uid_bytes *e;

	if (!kvfs_open_share_bytes(fs, uid) || !(e = entry_of(fs, uid, true)))
		return false;    /* no limit; or no memory for the record: uncounted */
	e->writers++;
	return true;
}

void kvfs_open_share_writer_done_locked(struct kvfs *fs, uint32_t uid)
{
	struct kvfs_uid_bytes *e = entry_of(fs, uid, false);

	if (!e || !e->writers)
		return;
	e->writers--;
	entry_maybe_drop(fs, e);
}
