/*
 * Stripe directories and segment files. A stripe is a directory carrying a
 * marker file (kvfs-stripe) that names the store uuid and the stripe index,
 * so a store can never be opened over the wrong disk or in the wrong order.
 * It holds segment files seg-NNNNNNNN; this file creates, scans, opens and
 * unlinks them, keeps each stripe's table of open segment fds, and provides
 * the sorted range lists the allocator uses for free space and recovery
 * keeps for marked extents. Placement policy lives in store.c.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store_i.h"

#define MARKER_MAX 512

/* ---- range lists ---- */

static int rangevec_grow(struct rangevec *rv)
{
	struct range *v = kv_array_room(rv->v, rv->n, &rv->cap, sizeof(*v), 8);

	if (!v)
		return -ENOMEM;
	rv->v = v;
	return 0;
}

/* Index of the first range that ends after off. */
static size_t rangevec_lower(const struct rangevec *rv, uint64_t off)
{
	size_t lo = 0, hi = rv->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (rv->v[mid].off + rv->v[mid].len <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

bool rangevec_overlaps(const struct rangevec *rv, uint64_t off, uint64_t len)
{
	size_t i = rangevec_lower(rv, off);

	return i < rv->n && rv->v[i].off < off + len;
}

int rangevec_push(struct rangevec *rv, uint64_t off, uint64_t len)
{
	int rc = rangevec_grow(rv);

	if (rc)
		return rc;
	rv->v[rv->n++] = (struct range){ off, len };
	return 0;
}

static int rangevec_insert_at(struct rangevec *rv, size_t i, uint64_t off,
			      uint64_t len)
{
	int rc = rangevec_grow(rv);

	if (rc)
		return rc;
	memmove(&rv->v[i + 1], &rv->v[i], (rv->n - i) * sizeof(rv->v[0]));
	rv->v[i] = (struct range){ off, len };
	rv->n++;
	return 0;
}

static void rangevec_remove_at(struct rangevec *rv, size_t i)
{
	memmove(&rv->v[i], &rv->v[i + 1], (rv->n - i - 1) * sizeof(rv->v[0]));
	rv->n--;
}

/* Insert a free range, merging with neighbours it touches. -EEXIST on overlap. */
int rangevec_insert_free(struct rangevec *rv, uint64_t off, uint64_t len)
{
	size_t i = rangevec_lower(rv, off);
	bool join_prev, join_next;

	if (i < rv->n && rv->v[i].off < off + len)
		return -EEXIST;
	join_prev = i > 0 && rv->v[i - 1].off + rv->v[i - 1].len == off;
	join_next = i < rv->n && rv->v[i].off == off + len;
	if (join_prev && join_next) {
		rv->v[i - 1].len += len + rv->v[i].len;
		rangevec_remove_at(rv, i);
	} else if (join_prev) {
		rv->v[i - 1].len += len;
	} else if (join_next) {
		rv->v[i].off = off;
		rv->v[i].len += len;
	} else {
		return rangevec_insert_at(rv, i, off, len);
	}
	return 0;
}

#define RADIX_BITS 11
#define RADIX (1u << RADIX_BITS)

/*
 * Sort by offset: LSD radix sort on offset / KV_ALIGN (aligned, and below
 * the segment size, so a 1 GiB segment's keys have 18 bits: two passes),
 * or qsort where no temporary array can be had.
 */
static int range_cmp(const void *a, const void *b)
{
	const struct range *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

static void rangevec_sort(struct rangevec *rv)
{
	struct range *tmp, *src = rv->v, *dst;
	uint64_t max = 0;
	size_t *count;

	for (size_t i = 0; i < rv->n; i++)
		max |= rv->v[i].off;
	max /= KV_ALIGN;
	tmp = malloc(rv->n * sizeof(*tmp));
	count = malloc(RADIX * sizeof(*count));
	if (!tmp || !count) {
		free(tmp);
		free(count);
		qsort(rv->v, rv->n, sizeof(rv->v[0]), range_cmp);
		return;
	}
	dst = tmp;
	for (unsigned shift = 0; shift < 64 && (max >> shift); shift += RADIX_BITS) {
		size_t sum = 0;

		memset(count, 0, RADIX * sizeof(*count));
		for (size_t i = 0; i < rv->n; i++)
			count[(src[i].off / KV_ALIGN >> shift) & (RADIX - 1)]++;
		for (size_t d = 0; d < RADIX; d++) {
			size_t c = count[d];

			count[d] = sum;
			sum += c;
		}
		for (size_t i = 0; i < rv->n; i++)
			dst[count[(src[i].off / KV_ALIGN >> shift) & (RADIX - 1)]++] = src[i];
		dst = src;
		src = src == rv->v ? tmp : rv->v;
	}
	if (src != rv->v)
		memcpy(rv->v, src, rv->n * sizeof(*src));
	free(tmp);
	free(count);
}

/*
 * Recovery marks extents in whatever order the index hands them out (hash
 * slots, not offsets), so they are pushed unsorted and sorted once here:
 * O(n) in all (n log n where it falls back to qsort), where inserting each
 * in place was O(n^2) in memmove. Offsets are KV_ALIGN-aligned (checked
 * when marked). Returns the index i of the first range that overlaps range
 * i - 1, or 0 if none does (the list is then sorted and disjoint).
 */
size_t rangevec_sort_check(struct rangevec *rv)
{
	if (rv->n > 1)
		rangevec_sort(rv);
	for (size_t i = 1; i < rv->n; i++)
		if (rv->v[i - 1].off + rv->v[i - 1].len > rv->v[i].off)
			return i;
	return 0;
}

/*
 * First fit: carve len bytes from the start of the lowest range that fits.
 * Returns the length that range had before (0: nothing fits), so the caller
 * knows whether its cached largest range shrank.
 */
uint64_t rangevec_take(struct rangevec *rv, uint64_t len, uint64_t *off)
{
	for (size_t i = 0; i < rv->n; i++) {
		uint64_t had = rv->v[i].len;

		if (had < len)
			continue;
		*off = rv->v[i].off;
		rv->v[i].off += len;
		rv->v[i].len -= len;
		if (rv->v[i].len == 0)
			rangevec_remove_at(rv, i);
		return had;
	}
	return 0;
}

/* Length of the range containing off, 0 if none does. */
uint64_t rangevec_span(const struct rangevec *rv, uint64_t off)
{
	size_t i = rangevec_lower(rv, off);

	return i < rv->n && rv->v[i].off <= off ? rv->v[i].len : 0;
}

uint64_t rangevec_largest(const struct rangevec *rv)
{
	uint64_t m = 0;

	for (size_t i = 0; i < rv->n; i++)
		if (rv->v[i].len > m)
			m = rv->v[i].len;
	return m;
}

void rangevec_release(struct rangevec *rv)
{
	free(rv->v);
	*rv = (struct rangevec){ 0 };
}

/* ---- stripe directory and marker ---- */

static int write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Make the entry for path durable in its parent directory. */
static int fsync_parent(const char *path)
{
	char parent[PATH_MAX];
	char *slash;
	int fd, rc = 0;

	if (snprintf(parent, sizeof(parent), "%s", path) >= (int)sizeof(parent))
		return -ENAMETOOLONG;
	slash = strrchr(parent, '/');
	if (!slash)
		strcpy(parent, ".");
	else if (slash == parent)
		parent[1] = '\0';
	else
		*slash = '\0';
	fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

/* mkdir -p, making every directory it creates durable. */
static int mkdir_p(const char *path)
{
	char buf[PATH_MAX];
	size_t len = strlen(path);
	int rc;

	if (len == 0 || len >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, len + 1);
	for (size_t i = 1; i <= len; i++) {
		if (buf[i] != '/' && buf[i] != '\0')
			continue;
		char saved = buf[i];

		buf[i] = '\0';
		if (mkdir(buf, 0700) == 0) {
			rc = fsync_parent(buf);
			if (rc)
				return rc;
		} else if (errno != EEXIST) {
			return -errno;
		}
		buf[i] = saved;
	}
	return 0;
}

static int marker_write(struct stripe *st, const char *uuid, unsigned idx)
{
	char text[MARKER_MAX];
	int fd, rc, n;

	n = snprintf(text, sizeof(text), "kvfs-stripe 1\nuuid %s\nindex %u\n",
		     uuid, idx);
	if (n < 0 || n >= (int)sizeof(text))
		return -ENAMETOOLONG;
	fd = openat(st->dirfd, MARKER_TMP_NAME,
		    O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = -errno;
		goto fail;
	}
	rc = write_all(fd, text, (size_t)n);
	if (!rc && fsync(fd) < 0)
		rc = -errno;
	close(fd);
	if (rc)
		goto fail_unlink;
	/* rename + dir fsync: a crash leaves either no marker or a whole one */
	if (renameat(st->dirfd, MARKER_TMP_NAME, st->dirfd, MARKER_NAME) < 0) {
		rc = -errno;
		goto fail_unlink;
	}
	if (fsync(st->dirfd) < 0) {
		rc = -errno;
		goto fail;
	}
	return 0;

fail_unlink:
	unlinkat(st->dirfd, MARKER_TMP_NAME, 0);
fail:
	kv_log(KV_LOG_ERR, "%s/%s: cannot write stripe marker: %s", st->path,
	       MARKER_NAME, kv_strerror(rc));
	return rc;
}

static int marker_read(struct stripe *st, char *text, size_t size)
{
	int fd = openat(st->dirfd, MARKER_NAME, O_RDONLY | O_CLOEXEC);
	size_t len = 0;
	int rc = 0;

	if (fd < 0)
		return -errno;
	while (len < size - 1) {
		ssize_t n = read(fd, text + len, size - 1 - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			break;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	text[len] = '\0';
	return rc;
}

/*
 * 0 if the marker names this store and index. quiet: a missing marker is
 * expected (create), so say nothing about it.
 */
static int marker_check(struct stripe *st, const char *uuid, unsigned idx,
			bool quiet)
{
	char text[MARKER_MAX], found[MARKER_MAX];
	unsigned version, index;
	int n = 0, rc;

	rc = marker_read(st, text, sizeof(text));
	if (rc == -ENOENT) {
		if (!quiet)
			kv_log(KV_LOG_ERR, "%s: no %s marker: not a kvfs stripe "
			       "(create the store with mkfs first)", st->path,
			       MARKER_NAME);
		return KV_ERR_NOTSTORE;
	}
	if (rc) {
		kv_log(KV_LOG_ERR, "%s/%s: cannot read stripe marker: %s",
		       st->path, MARKER_NAME, kv_strerror(rc));
		return rc;
	}
	if (sscanf(text, "kvfs-stripe %u", &version) != 1) {
		kv_log(KV_LOG_ERR, "%s/%s: malformed stripe marker", st->path,
		       MARKER_NAME);
		return KV_ERR_CORRUPT;
	}
	if (version != 1) {
		kv_log(KV_LOG_ERR, "%s/%s: stripe format version %u, this kvfs "
		       "knows version 1", st->path, MARKER_NAME, version);
		return KV_ERR_SCHEMA;
	}
	if (sscanf(text, "kvfs-stripe 1 uuid %511s index %u %n", found, &index,
		   &n) != 2 || text[n] != '\0') {
		kv_log(KV_LOG_ERR, "%s/%s: malformed stripe marker", st->path,
		       MARKER_NAME);
		return KV_ERR_CORRUPT;
	}
	if (strcmp(found, uuid) != 0) {
		kv_log(KV_LOG_ERR, "%s: stripe belongs to store %s (as stripe %u), "
		       "not to this store %s", st->path, found, index, uuid);
		return KV_ERR_MISMATCH;
	}
	if (index != idx) {
		kv_log(KV_LOG_ERR, "%s: this store's stripe %u is recorded as stripe %u "
		       "(stripe directories swapped?)", st->path, index, idx);
		return KV_ERR_MISMATCH;
	}
	return 0;
}

int stripe_open(struct kv_store *s, unsigned idx, const char *path,
		const char *uuid, bool create)
{
	struct stripe *st = &s->stripes[idx];
	struct stat sb;
	int rc;

	st->path = strdup(path);
	if (!st->path)
		return -ENOMEM;
	if (create) {
		rc = mkdir_p(path);
		if (rc) {
			kv_log(KV_LOG_ERR, "%s: cannot create stripe directory: %s",
			       path, kv_strerror(rc));
			return rc;
		}
	}
	st->dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (st->dirfd < 0) {
		rc = -errno;
		kv_log(KV_LOG_ERR, "%s: cannot open stripe directory: %s", path,
		       kv_strerror(rc));
		return rc;
	}
	if (fstat(st->dirfd, &sb) < 0) {
		rc = -errno;
		kv_log(KV_LOG_ERR, "%s: stat: %s", path, kv_strerror(rc));
		return rc;
	}
	st->dev = sb.st_dev;
	st->ino = sb.st_ino;
	st->in_memory = store_dir_in_memory(st->dirfd);
	st->heads = store_write_heads(st->dirfd);
	if (st->heads > 1)
		kv_log(KV_LOG_INFO, "%s: writes to one file go one at a time here: "
		       "%u segments are written at once", path, st->heads);
	if (st->in_memory)
		kv_log(KV_LOG_INFO, "%s: in memory (tmpfs): pages are copied out of "
		       "mapped segments and hashed in the same pass", path);
	for (unsigned i = 0; i < idx; i++) {
		if (s->stripes[i].dev == st->dev && s->stripes[i].ino == st->ino) {
			kv_log(KV_LOG_ERR, "%s: same directory as stripe %u (%s)",
			       path, i, s->stripes[i].path);
			return -EINVAL;
		}
	}
	rc = marker_check(st, uuid, idx, create);
	if (rc == KV_ERR_NOTSTORE && create)
		rc = marker_write(st, uuid, idx);
	return rc;
}

void stripe_close(struct stripe *st)
{
	for (size_t i = 0; i < st->nsegs; i++)
		segment_unref(st->segs[i]);
	free(st->segs);
	if (st->dirfd >= 0)
		close(st->dirfd);
	free(st->path);
	st->segs = NULL;
	st->nsegs = 0;
	st->dirfd = -1;
	st->path = NULL;
}

/* ---- segment files ---- */

void segment_name(uint32_t num, char out[SEG_NAME_MAX])
{
	snprintf(out, SEG_NAME_MAX, "seg-%08" PRIu32, num);
}

int kv_segment_path(const char *stripe_dir, uint32_t num, char *out, size_t len)
{
	char name[SEG_NAME_MAX];

	segment_name(num, name);
	return snprintf(out, len, "%s/%s", stripe_dir, name);
}

bool kv_segment_parse(const char *name, uint32_t *num)
{
	char canon[SEG_NAME_MAX];
	unsigned long v;
	char *end;

	if (strncmp(name, "seg-", 4) != 0 || name[4] < '0' || name[4] > '9')
		return false;
	errno = 0;
	v = strtoul(name + 4, &end, 10);
	if (errno || *end != '\0' || v > UINT32_MAX)
		return false;
	segment_name((uint32_t)v, canon);
	if (strcmp(canon, name) != 0)
		return false;
	*num = (uint32_t)v;
	return true;
}

static int segment_open_fd(struct kv_store *s, struct stripe *st,
			   uint32_t num, int extra)
{
	char name[SEG_NAME_MAX];
	int flags = O_RDWR | O_CLOEXEC | extra;
	int fd;

	segment_name(num, name);
	fd = openat(st->dirfd, name, flags | (s->direct ? O_DIRECT : 0), 0600);
	if (fd < 0 && errno == EINVAL && s->direct) {
		/* tmpfs and some FUSE filesystems refuse O_DIRECT */
		kv_log(KV_LOG_WARN, "%s/%s: O_DIRECT not supported here, using "
		       "buffered I/O for this store", st->path, name);
		s->direct = false;
		fd = openat(st->dirfd, name, flags, 0600);
	}
	if (fd < 0) {
		fd = -errno;
		kv_log(KV_LOG_ERR, "%s/%s: cannot open segment: %s", st->path,
		       name, kv_strerror(fd));
	}
	return fd;
}

static struct segment *segment_new(uint32_t stripe, uint32_t num, int fd)
{
	struct segment *seg = calloc(1, sizeof(*seg));

	if (!seg)
		return NULL;
	seg->stripe = stripe;
	seg->num = num;
	seg->fd = fd;
	atomic_init(&seg->refs, 1);
	return seg;
}

static int table_append(struct stripe *st, struct segment *seg)
{
	if (st->nsegs == st->cap) {
		struct segment **v = kv_array_room(st->segs, st->nsegs, &st->cap, sizeof(*v), 16);

		if (!v)
			return -ENOMEM;
		st->segs = v;
	}
	st->segs[st->nsegs++] = seg;
	return 0;
}

static int segment_cmp(const void *a, const void *b)
{
	const struct segment *x = *(struct segment *const *)a;
	const struct segment *y = *(struct segment *const *)b;

	return x->num < y->num ? -1 : x->num > y->num;
}

/* Add one existing segment file found by the directory scan. */
static int scan_add(struct kv_store *s, struct stripe *st, uint32_t num,
		    const char *name)
{
	struct segment *seg;
	struct stat sb;
	int fd, rc;

	fd = segment_open_fd(s, st, num, O_NOFOLLOW);
	if (fd < 0)
		return fd;
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		kv_log(KV_LOG_WARN, "%s/%s: not a regular file, ignored",
		       st->path, name);
		close(fd);
		return 0;
	}
	seg = segment_new((uint32_t)(st - s->stripes), num, fd);
	if (!seg) {
		close(fd);
		return -ENOMEM;
	}
	seg->file_size = (uint64_t)sb.st_size;
	seg->bump = seg->file_size;
	s->found += (uint64_t)sb.st_blocks * 512;   /* holes punched are free */
	rc = table_append(st, seg);
	if (rc) {
		segment_unref(seg);
		return rc;
	}
	if ((uint64_t)num + 1 > st->next_num)
		st->next_num = (uint64_t)num + 1;
	return 0;
}

/* Open every segment file in the stripe directory. */
int stripe_scan(struct kv_store *s, struct stripe *st)
{
	struct dirent *de;
	uint32_t num;
	DIR *d;
	int fd, rc = 0;

	/* fdopendir owns its fd; keep dirfd for *at() calls */
	fd = openat(st->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || !(d = fdopendir(fd))) {
		rc = -errno;
		if (fd >= 0)
			close(fd);
		kv_log(KV_LOG_ERR, "%s: cannot list stripe directory: %s",
		       st->path, kv_strerror(rc));
		return rc;
	}
	while (!rc && (errno = 0, de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    !strcmp(de->d_name, MARKER_NAME))
			continue;
		if (!kv_segment_parse(de->d_name, &num)) {
			kv_log(KV_LOG_WARN, "%s/%s: not a kvfs segment, ignored",
			       st->path, de->d_name);
			continue;
		}
		rc = scan_add(s, st, num, de->d_name);
	}
	if (!rc && errno) {
		rc = -errno;
		kv_log(KV_LOG_ERR, "%s: readdir: %s", st->path, kv_strerror(rc));
	}
	closedir(d);
	if (st->nsegs > 1)
		qsort(st->segs, st->nsegs, sizeof(st->segs[0]), segment_cmp);
	return rc;
}

/*
 * Create the next segment file of a stripe and make its directory entry
 * durable before any extent in it is handed out (design rule 2 in store.c).
 */
int segment_create(struct kv_store *s, struct stripe *st, struct segment **out)
{
	char name[SEG_NAME_MAX];
	struct segment *seg;
	uint32_t num;
	int fd, rc;

	if (st->next_num > UINT32_MAX) {
		kv_log(KV_LOG_ERR, "%s: segment numbers exhausted", st->path);
		return -ENOSPC;
	}
	num = (uint32_t)st->next_num;
	segment_name(num, name);
	fd = segment_open_fd(s, st, num, O_CREAT | O_EXCL);
	if (fd < 0)
		return fd;
	if (fsync(st->dirfd) < 0) {
		rc = -errno;
		kv_log(KV_LOG_ERR, "%s: fsync after creating %s: %s", st->path,
		       name, kv_strerror(rc));
		goto fail_unlink;
	}
	seg = segment_new((uint32_t)(st - s->stripes), num, fd);
	if (!seg) {
		rc = -ENOMEM;
		goto fail_unlink;
	}
	rc = table_append(st, seg);
	if (rc) {
		segment_unref(seg);
		unlinkat(st->dirfd, name, 0);
		return rc;
	}
	st->next_num++;
	seg->fresh = !s->reclaimed;
	*out = seg;
	return 0;

fail_unlink:
	unlinkat(st->dirfd, name, 0);
	close(fd);
	return rc;
}

struct segment *segment_find(const struct stripe *st, uint32_t num)
{
	size_t lo = 0, hi = st->nsegs;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (st->segs[mid]->num < num)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < st->nsegs && st->segs[lo]->num == num ? st->segs[lo] : NULL;
}

/*
 * Unlink a segment file and drop it from the table. The fd closes when the
 * last queued I/O on it completes (segment_unref), not here.
 */
int segment_unlink(struct stripe *st, struct segment *seg)
{
	char name[SEG_NAME_MAX];
	size_t i;
	int rc;

	segment_name(seg->num, name);
	if (unlinkat(st->dirfd, name, 0) < 0 && errno != ENOENT) {
		rc = -errno;
		kv_log(KV_LOG_ERR, "%s/%s: cannot remove empty segment: %s",
		       st->path, name, kv_strerror(rc));
		return rc;
	}
	for (i = 0; i < st->nsegs && st->segs[i] != seg; i++)
		;
	if (i < st->nsegs) {
		memmove(&st->segs[i], &st->segs[i + 1],
			(st->nsegs - i - 1) * sizeof(st->segs[0]));
		st->nsegs--;
	}
	segment_unref(seg);
	return 0;
}

void segment_unref(struct segment *seg)
{
	if (atomic_fetch_sub(&seg->refs, 1) != 1)
		return;
	segment_unmap(seg);
	if (seg->fd >= 0)
		close(seg->fd);
	rangevec_release(&seg->freel);
	rangevec_release(&seg->marks);
	rangevec_release(&seg->early);
	free(seg);
}
