/*
 * Region registry of the fast path (see region.h): registration with its
 * ownership checks, lookup by id for each batch, the reaper that drops the
 * regions of processes that died, and guarded access to mapped memory.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "region.h"

/* The table is global; each uid gets at most a share of it, and the last
 * REGIONS_ROOT_RESERVE entries are root's, so users who fill it between
 * them never lock root out. */
#define REGIONS_MAX 4096u
#define REGIONS_PER_UID 256u
#define REGIONS_ROOT_RESERVE 256u

struct kvfs_regions {
	pthread_mutex_t lock;
	struct kvfs_region *list;     /* registered (lock) */
	unsigned count;
	int epfd;                     /* pidfds of registering processes */
	int stop_fd;                  /* eventfd: reaper, exit */
	pthread_t reaper;
};

/* ---- guarded access ---- */

/* Guarded access (store/sigbus.c): the engine may shrink its file under
 * a mapping we are touching; the guard then gives the range anonymous
 * memory so the access completes harmlessly, and marks the region broken. */
static int guard_begin(struct kvfs_region *r)
{
	return kv_guard_begin(&r->guard);
}

static int guard_end(struct kvfs_region *r)
{
	return kv_guard_end(&r->guard);
}

int kvfs_region_load(struct kvfs_region *r, uint64_t off, void *dst, size_t len)
{
	int rc = guard_begin(r);

	if (rc < 0)
		return rc;
	memcpy(dst, r->base + off, len);
	return guard_end(r);
}

int kvfs_region_store(struct kvfs_region *r, uint64_t off, const void *src,
		      size_t len)
{
	int rc = guard_begin(r);

	if (rc < 0)
		return rc;
	memcpy(r->base + off, src, len);
	return guard_end(r);
}

int kvfs_region_load_hashed(struct kvfs_region *r, uint64_t off, void *dst, size_t len,
			    uint8_t out[KV_HASH_LEN])
{
	int rc = guard_begin(r);

	if (rc < 0)
		return rc;
	kv_copy_hash128(dst, r->base + off, len, out);
	return guard_end(r);
}

int kvfs_region_store_mapped(struct kvfs_region *r, uint64_t off, void *hold,
			     const void *src, size_t len, uint8_t out[KV_HASH_LEN])
{
	int rc = guard_begin(r), end;

	if (rc < 0)
		return rc;
	rc = kv_store_copy_mapped(hold, r->base + off, src, len, out);
	end = guard_end(r);
	return end < 0 ? end : rc;
}

int kvfs_region_zero(struct kvfs_region *r, uint64_t off, size_t len)
{
	int rc = guard_begin(r);

	if (rc < 0)
		return rc;
	memset(r->base + off, 0, len);
	return guard_end(r);
}

int kvfs_region_hash(struct kvfs_region *r, uint64_t off, size_t len,
		     uint8_t out[KV_HASH_LEN])
{
	int rc = guard_begin(r);

	if (rc < 0)
		return rc;
	kv_hash128(r->base + off, len, out);
	return guard_end(r);
}

int kvfs_region_residency(struct kvfs_region *r, uint64_t lo, uint64_t hi,
			  struct kvfs_residency *m)
{
	uint64_t psz = (uint64_t)sysconf(_SC_PAGESIZE);
	size_t pages;

	m->lo = lo / psz * psz;
	m->hi = hi > r->len ? r->len : hi;
	m->hi = (m->hi + psz - 1) / psz * psz;
	m->vec = NULL;
	if (m->hi <= m->lo)
		return 0;
	pages = (size_t)((m->hi - m->lo) / psz);
	m->vec = malloc(pages);
	if (!m->vec)
		return -ENOMEM;
	/* The tail past len is part of the mapping's last page. */
	if (mincore(r->base + m->lo, (size_t)(m->hi - m->lo), m->vec) < 0) {
		int rc = -errno;

		free(m->vec);
		m->vec = NULL;
		return rc;
	}
	return 0;
}

bool kvfs_residency_has(const struct kvfs_residency *m, uint64_t off, uint64_t len)
{
	uint64_t psz = (uint64_t)sysconf(_SC_PAGESIZE);

	if (len == 0)
		return true;
	if (!m->vec || off < m->lo || off + len > m->hi)
		return false;
	for (uint64_t p = (off - m->lo) / psz; p <= (off + len - 1 - m->lo) / psz; p++)
		if (!(m->vec[p] & 1))
			return false;
	return true;
}

void kvfs_residency_free(struct kvfs_residency *m)
{
	free(m->vec);
	m->vec = NULL;
}

/* Callers can trigger these at will: rate-limited. */
static struct kv_log_limit refusal_log;

/* ---- processes ---- */

/* Thread group of a thread, from /proc (FUSE names the calling thread). */
static pid_t tgid_of(pid_t tid)
{
	char path[64], line[128];
	pid_t tgid = -ESRCH;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
	f = fopen(path, "re");
	if (!f)
		return -ESRCH;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Tgid: %d", &tgid) == 1)
			break;
	fclose(f);
	return tgid;
}

/* The caller's open file description for its fd, through its pidfd. */
static int grab_fd(int pidfd, pid_t tgid, int fd, int *out)
{
	char path[64];
	int got = (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);

	if (got >= 0) {
		*out = got;
		return 0;
	}
	if (errno == EBADF)
		return -EBADF;
	if (errno != EPERM && errno != ENOSYS)
		return -errno;
	/* ptrace-style access refused (e.g. Yama) or no pidfd_getfd: reopen
	 * through /proc, and check the caller's own access mode below. */
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)tgid, fd);
	got = open(path, O_RDWR | O_CLOEXEC);
	if (got < 0)
		return errno == ENOENT ? -EBADF : -errno;
	*out = got;
	return 0;
}

/* Access mode the caller opened its fd with (a reopened file has ours). */
static int caller_accmode(pid_t tgid, int fd, ino_t ino)
{
	char path[64], line[128];
	unsigned long long fino = 0;
	unsigned flags = 0;
	bool have_flags = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/fdinfo/%d", (int)tgid, fd);
	f = fopen(path, "re");
	if (!f)
		return -EBADF;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "flags: %o", &flags) == 1)
			have_flags = true;
		sscanf(line, "ino: %llu", &fino);
	}
	fclose(f);
	/* The fd could have been swapped for another file meanwhile. */
	if (!have_flags || fino != (unsigned long long)ino)
		return -EBADF;
	return (int)(flags & O_ACCMODE);
}

/* Memory the caller could write itself, and that is memory (tmpfs/memfd). */
static int check_memory(const struct kvfs_caller *c, pid_t tgid, int cfd, int fd,
			struct kvfs_region *r)
{
	uint64_t *len = &r->len, off = r->file_off;
	struct statfs sf;
	struct stat st;
	int mode;

	if (fstat(fd, &st) < 0 || fstatfs(fd, &sf) < 0)
		return -errno;
	/* tmpfs only: a hugetlbfs mapping must be huge-page sized throughout
	 * (munmap, and the SIGBUS guard's remap, fail on a shorter one). */
	if (!S_ISREG(st.st_mode) || sf.f_type != TMPFS_MAGIC) {
		KV_LOG_LIMITED(&refusal_log, KV_LOG_WARN, "fast path: pid %d offered fd %d, which is not a memfd or a /dev/shm file",
		       (int)tgid, cfd);
		return -EINVAL;
	}
	if (st.st_uid != c->uid) {
		KV_LOG_LIMITED(&refusal_log, KV_LOG_WARN, "fast path: pid %d (uid %u) offered fd %d owned by uid %u",
		       (int)tgid, (unsigned)c->uid, cfd, (unsigned)st.st_uid);
		return -EACCES;
	}
	mode = caller_accmode(tgid, cfd, st.st_ino);
	if (mode < 0)
		return mode;
	if (mode != O_RDWR) {
		KV_LOG_LIMITED(&refusal_log, KV_LOG_WARN, "fast path: pid %d offered fd %d not opened read-write",
		       (int)tgid, cfd);
		return -EACCES;
	}
	r->dev = st.st_dev;
	r->ino = st.st_ino;
	if (off % (uint64_t)sysconf(_SC_PAGESIZE) || off >= (uint64_t)st.st_size) {
		KV_LOG_LIMITED(&refusal_log, KV_LOG_WARN, "fast path: pid %d offered fd %d at offset %llu: not page-aligned or past its end (%llu bytes)",
			       (int)tgid, cfd, (unsigned long long)off,
			       (unsigned long long)st.st_size);
		return -EINVAL;
	}
	if (*len == 0)
		*len = (uint64_t)st.st_size - off;
	if (*len == 0 || *len > (uint64_t)st.st_size - off || *len > SIZE_MAX / 2)
		return -EINVAL;
	/* Mapping (populated) and pinning a sparse file would make the daemon
	 * allocate the caller's memory, charged to the daemon. st_blocks is
	 * the one measure that counts fallocate'd pages (SEEK_HOLE and mincore
	 * see them as holes until touched); with an offset, the file must hold
	 * at least the bytes up to the region's end. */
	if ((uint64_t)st.st_blocks * 512 < (off ? off + *len : *len)) {
		KV_LOG_LIMITED(&refusal_log, KV_LOG_WARN, "fast path: pid %d offered fd %d with %llu of %llu bytes allocated; touch or fallocate the memory before registering it",
			       (int)tgid, cfd, (unsigned long long)st.st_blocks * 512,
			       (unsigned long long)(off + *len));
		return -EINVAL;
	}
	return 0;
}

/* ---- registry ---- */

static struct kvfs_region *find(struct kvfs_regions *rs, uint64_t id)
{
	for (struct kvfs_region *r = rs->list; r; r = r->next)
		if (r->id == id)
			return r;
	return NULL;
}

static unsigned count_of(struct kvfs_regions *rs, pid_t tgid)
{
	unsigned n = 0;

	for (struct kvfs_region *r = rs->list; r; r = r->next)
		n += r->tgid == tgid;
	return n;
}

/* What one uid has registered: regions, and bytes counted per file (from
 * the lowest start to the highest end of its regions in that file): tensor
 * parallel ranks map parts of one host pool, which is memory once. The
 * candidate region (not yet listed) counts too. */
static void usage_of(struct kvfs_regions *rs, const struct kvfs_region *cand,
		     unsigned *n, uint64_t *bytes)
{
	const struct kvfs_region *mine[REGIONS_PER_UID + 1];
	unsigned k = 0;

	for (const struct kvfs_region *r = rs->list; r && k < REGIONS_PER_UID; r = r->next)
		if (r->uid == cand->uid)
			mine[k++] = r;
	*n = k;
	mine[k++] = cand;
	*bytes = 0;
	for (unsigned i = 0; i < k; i++) {
		uint64_t lo = mine[i]->file_off, hi = lo + mine[i]->len;
		bool seen = false;

		for (unsigned j = 0; j < k; j++) {
			if (mine[j]->dev != mine[i]->dev || mine[j]->ino != mine[i]->ino)
				continue;
			if (j < i) {
				seen = true;    /* counted with the first of its file */
				break;
			}
			lo = mine[j]->file_off < lo ? mine[j]->file_off : lo;
			hi = mine[j]->file_off + mine[j]->len > hi ? mine[j]->file_off + mine[j]->len : hi;
		}
		if (!seen)
			*bytes += hi - lo;
	}
}

/* Registered bytes per uid: at most half the machine's memory, so one user
 * cannot make the daemon hold (and pin) everything. */
static uint64_t bytes_cap(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);

	return pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz / 2 : UINT64_MAX;
}

static void region_free(struct kvfs_region *r)
{
	kv_store_fixed_forget(r->id);   /* batch rings unpin it */
	if (munmap(r->base, r->len) < 0)
		kv_log(KV_LOG_ERR, "fast path: unmapping region %016" PRIx64 ": %s",
		       r->id, strerror(errno));
	if (r->pidfd >= 0)
		close(r->pidfd);
	free(r);
}

/* Unlink r from the registry (lock held); the registry's reference is
 * then the caller's to drop. */
static void region_unlink_locked(struct kvfs_regions *rs, struct kvfs_region *r)
{
	struct kvfs_region **pp;

	for (pp = &rs->list; *pp; pp = &(*pp)->next) {
		if (*pp == r) {
			*pp = r->next;
			rs->count--;
			break;
		}
	}
	epoll_ctl(rs->epfd, EPOLL_CTL_DEL, r->pidfd, NULL);
}

/* Unlink r from the registry (lock held); frees it unless a batch uses it. */
static void region_drop_locked(struct kvfs_regions *rs, struct kvfs_region *r)
{
	region_unlink_locked(rs, r);
	if (--r->refs == 0)
		region_free(r);
}

static int new_id(struct kvfs_regions *rs, uint64_t *id)
{
	/* Random ids: a stale or guessed id from another process finds
	 * nothing, and ownership is still checked on every use. */
	do {
		if (getrandom(id, sizeof(*id), 0) != sizeof(*id))
			return -errno;
	} while (*id == 0 || find(rs, *id));
	return 0;
}

static int publish(struct kvfs_regions *rs, struct kvfs_region *r)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int rc;

	unsigned uid_n;
	uint64_t uid_bytes;

	pthread_mutex_lock(&rs->lock);
	usage_of(rs, r, &uid_n, &uid_bytes);
	if (rs->count >= REGIONS_MAX || uid_n >= REGIONS_PER_UID ||
	    (r->uid != 0 && rs->count >= REGIONS_MAX - REGIONS_ROOT_RESERVE) ||
	    count_of(rs, r->tgid) >= KVFS_REGIONS_PER_PROCESS) {
		pthread_mutex_unlock(&rs->lock);
		KV_LOG_LIMITED(&refusal_log, KV_LOG_WARN, "fast path: pid %d has too many regions (%u per process, %u per uid, %u in all of which %u are root's)",
		       (int)r->tgid, KVFS_REGIONS_PER_PROCESS, REGIONS_PER_UID, REGIONS_MAX,
		       REGIONS_ROOT_RESERVE);
		return -EMFILE;
	}
	if (uid_bytes > bytes_cap()) {
		pthread_mutex_unlock(&rs->lock);
		KV_LOG_LIMITED(&refusal_log, KV_LOG_WARN, "fast path: uid %u would have %llu bytes registered, over the cap of half the memory",
		       (unsigned)r->uid, (unsigned long long)uid_bytes);
		return -ENOMEM;
	}
	rc = new_id(rs, &r->id);
	ev.data.u64 = r->id;
	if (rc == 0 && epoll_ctl(rs->epfd, EPOLL_CTL_ADD, r->pidfd, &ev) < 0)
		rc = -errno;
	if (rc == 0) {
		/* The list's reference, and the registering call's until it has
		 * reported the id: the reaper may drop a dead caller's region
		 * the moment the lock is released. */
		r->refs = 2;
		r->next = rs->list;
		rs->list = r;
		rs->count++;
	}
	pthread_mutex_unlock(&rs->lock);
	return rc;
}

static int map_region(struct kvfs_region *r, int fd)
{
	kv_guard_install();   /* again, should anything have replaced it */
	/* Populate now: O_DIRECT reads pin the destination pages inside the
	 * store's io_uring submit, and faulting them in there one 4 KiB page
	 * at a time serialises every batch behind the I/O thread. (It also
	 * makes fallocate'd pages up to date, which is what the per-call
	 * residency check looks for.) */
	void *p = mmap(NULL, r->len, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_POPULATE, fd, (off_t)r->file_off);

	if (p == MAP_FAILED)
		return -errno;
	r->base = p;
	r->guard = (struct kv_guard){ r->base, r->len, &r->broken };
	return 0;
}

int kvfs_region_register(struct kvfs_regions *rs, const struct kvfs_caller *c,
			 struct kvfs_region_arg *a)
{
	struct kvfs_region *r;
	int fd = -1, rc;

	if (a->abi != KVFS_ABI_VERSION)
		return -EPROTO;
	if ((a->flags & ~KVFS_REGION_AT_OFFSET) || a->reserved0 || a->reserved1 || a->fd < 0 ||
	    (!(a->flags & KVFS_REGION_AT_OFFSET) && a->offset))
		return -EINVAL;
	if (c->tid <= 0) {
		KV_LOG_LIMITED(&refusal_log, KV_LOG_WARN, "fast path: the caller's pid is not visible from the daemon's pid namespace");
		return -EPERM;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->uid = c->uid;
	r->len = a->length;
	r->file_off = a->offset;
	r->tgid = tgid_of(c->tid);
	r->pidfd = -1;
	rc = r->tgid > 0 ? 0 : -ESRCH;
	if (rc == 0) {
		r->pidfd = (int)syscall(SYS_pidfd_open, r->tgid, 0);
		rc = r->pidfd >= 0 ? 0 : -errno;
	}
	if (rc == 0)
		rc = grab_fd(r->pidfd, r->tgid, a->fd, &fd);
	if (rc == 0)
		rc = check_memory(c, r->tgid, a->fd, fd, r);
	if (rc == 0)
		rc = map_region(r, fd);
	if (fd >= 0)
		close(fd);    /* the mapping keeps the memory */
	if (rc == 0) {
		rc = publish(rs, r);
		if (rc < 0)
			munmap(r->base, r->len);
	}
	if (rc < 0) {
		if (r->pidfd >= 0)
			close(r->pidfd);
		free(r);
		return rc;
	}
	a->region_id = r->id;
	a->length = r->len;
	kv_log(KV_LOG_DEBUG, "fast path: region %016" PRIx64 " of %" PRIu64 " bytes for pid %d",
	       r->id, r->len, (int)r->tgid);
	kvfs_region_put(rs, r);
	return 0;
}

/*
 * Is the calling thread in the region's process, and is that process the
 * one that registered (not a new one that got its pid)? Read fresh on every
 * call: the caller is blocked in our ioctl, so its tid cannot be recycled
 * meanwhile, while a cached tid could have been.
 */
static bool caller_in_tgid(struct kvfs_regions *rs, struct kvfs_region *r,
			   pid_t tid)
{
	struct pollfd pfd = { .fd = r->pidfd, .events = POLLIN };
	pid_t tgid;
	bool alive;

	pthread_mutex_unlock(&rs->lock);
	tgid = tgid_of(tid);
	alive = poll(&pfd, 1, 0) == 0;    /* a pidfd polls readable once it exits */
	pthread_mutex_lock(&rs->lock);
	return alive && tgid == r->tgid;
}

/* Find the caller's region (lock held; may drop and retake it). */
static int find_owned(struct kvfs_regions *rs, const struct kvfs_caller *c,
		      uint64_t id, struct kvfs_region **out)
{
	struct kvfs_region *r = find(rs, id);

	if (!r)
		return -ENOENT;
	if (r->uid != c->uid)
		return -EPERM;
	r->refs++;    /* keep r while the lock is dropped */
	if (!caller_in_tgid(rs, r, c->tid)) {
		if (--r->refs == 0)
			region_free(r);
		return -EPERM;
	}
	*out = r;
	return 0;
}

int kvfs_region_unregister(struct kvfs_regions *rs, const struct kvfs_caller *c,
			   uint64_t id)
{
	struct kvfs_region *r;
	int rc;

	pthread_mutex_lock(&rs->lock);
	rc = find_owned(rs, c, id, &r);
	if (rc == 0) {
		/* Drop the registry's reference and ours together: each in
		 * turn would free r (for the compiler) before the second. */
		int drop = 1;

		if (find(rs, id) == r) {
			region_unlink_locked(rs, r);
			drop = 2;
		}
		r->refs -= drop;
		if (r->refs == 0)
			region_free(r);
	}
	pthread_mutex_unlock(&rs->lock);
	return rc;
}

int kvfs_region_get(struct kvfs_regions *rs, const struct kvfs_caller *c,
		    uint64_t id, struct kvfs_region **out)
{
	int rc;

	pthread_mutex_lock(&rs->lock);
	rc = find_owned(rs, c, id, out);
	pthread_mutex_unlock(&rs->lock);
	if (rc == 0 && atomic_load(&(*out)->broken)) {
		kvfs_region_put(rs, *out);
		rc = -EFAULT;
	}
	if (rc < 0)
		*out = NULL;
	return rc;
}

void kvfs_region_put(struct kvfs_regions *rs, struct kvfs_region *r)
{
	pthread_mutex_lock(&rs->lock);
	if (--r->refs == 0)
		region_free(r);
	pthread_mutex_unlock(&rs->lock);
}

/* ---- reaper ---- */

static void *reaper_main(void *arg)
{
	struct kvfs_regions *rs = arg;
	struct epoll_event ev[16];

	pthread_setname_np(pthread_self(), "kvfs-reaper");
	for (;;) {
		int n = epoll_wait(rs->epfd, ev, 16, -1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		for (int i = 0; i < n; i++) {
			struct kvfs_region *r;

			if (ev[i].data.u64 == 0)
				return NULL;
			pthread_mutex_lock(&rs->lock);
			r = find(rs, ev[i].data.u64);
			if (r) {
				kv_log(KV_LOG_DEBUG, "fast path: pid %d exited, dropping its region %016" PRIx64,
				       (int)r->tgid, r->id);
				region_drop_locked(rs, r);
			}
			pthread_mutex_unlock(&rs->lock);
		}
	}
	return NULL;
}

int kvfs_regions_start(struct kvfs_regions **out)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 0 };
	struct kvfs_regions *rs = calloc(1, sizeof(*rs));
	int rc;

	if (!rs)
		return -ENOMEM;
	kv_guard_install();
	pthread_mutex_init(&rs->lock, NULL);
	rs->epfd = epoll_create1(EPOLL_CLOEXEC);
	rs->stop_fd = eventfd(0, EFD_CLOEXEC);
	rc = rs->epfd >= 0 && rs->stop_fd >= 0 ? 0 : -errno;
	if (rc == 0 && epoll_ctl(rs->epfd, EPOLL_CTL_ADD, rs->stop_fd, &ev) < 0)
		rc = -errno;
	if (rc == 0)
		rc = -pthread_create(&rs->reaper, NULL, reaper_main, rs);
	if (rc < 0) {
		kv_log(KV_LOG_ERR, "fast path: cannot start the region reaper: %s",
		       strerror(-rc));
		if (rs->epfd >= 0)
			close(rs->epfd);
		if (rs->stop_fd >= 0)
			close(rs->stop_fd);
		free(rs);
		return rc;
	}
	*out = rs;
	return 0;
}

void kvfs_regions_stop(struct kvfs_regions *rs)
{
	uint64_t one = 1;

	if (!rs)
		return;
	if (write(rs->stop_fd, &one, sizeof(one)) != sizeof(one))
		kv_log(KV_LOG_WARN, "fast path: waking the reaper: %s", strerror(errno));
	pthread_join(rs->reaper, NULL);
	pthread_mutex_lock(&rs->lock);
	while (rs->list)
		region_drop_locked(rs, rs->list);
	pthread_mutex_unlock(&rs->lock);
	close(rs->epfd);
	close(rs->stop_fd);
	pthread_mutex_destroy(&rs->lock);
	free(rs);
}
