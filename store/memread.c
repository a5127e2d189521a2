/*
 * Reads from stripes whose file system is memory (tmpfs, ramfs): there a
 * read is a copy by the kernel, and checking the page a second pass over
 * it. Such a stripe's segments are mapped read-only instead, and a reader
 * copies a page out of the mapping and hashes it in the same pass
 * (kv_copy_hash128): one pass over the bytes, not two. On a device an
 * O_DIRECT read is a DMA, costs no CPU pass, and stays as it is.
 *
 * A mapping lives as long as its segment (segment_unref unmaps it), and a
 * reader holds a segment reference while it copies, as a queued read does.
 * Touching a mapping past the end of its file raises SIGBUS, so an extent
 * is copied only once the file is known to hold it: the size is checked
 * with fstat when an extent ends past what was seen before, which happens
 * once per segment's growth, not per read. Sizes only shrink by
 * kvfs's own truncations, of ranges no live extent uses (a drained segment
 * resets known_size to 0). A file cut short by someone else after its size
 * was seen is caught by a SIGBUS guard (sigbus.c): that copy is void, and
 * the segment is read through the ring from then on.
 *
 * KVFS_MAPPED_READS=off turns it off (reads through the ring, then a hash),
 * for benchmarks that compare the two.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <linux/magic.h>

#include "store_i.h"

bool store_dir_in_memory(int dirfd)
{
	const char *env = getenv("KVFS_MAPPED_READS");
	struct statfs sf;

	if (env && (strcmp(env, "off") == 0 || strcmp(env, "0") == 0))
		return false;
	if (fstatfs(dirfd, &sf) < 0)
		return false;      /* then reads go through the ring, as always */
	return sf.f_type == TMPFS_MAGIC || sf.f_type == RAMFS_MAGIC;
}

void segment_unmap(struct segment *seg)
{
	uint8_t *map = atomic_load(&seg->map);

	if (map)
		munmap(map, seg->map_len);
}

/* The segment's mapping, made on first use (under the store lock, once
 * per segment); NULL once a read found it cut short, or if it cannot be
 * mapped: then it is read through the ring. */
static const uint8_t *segment_map(struct kv_store *s, struct segment *seg)
{
	static struct kv_log_limit map_log;
	uint8_t *map;

	if (atomic_load(&seg->map_broken))
		return NULL;          /* cut short, or could not be mapped */
	map = atomic_load(&seg->map);
	if (map)
		return map;
	kv_guard_install();
	pthread_mutex_lock(&s->lock);
	map = atomic_load(&seg->map);
	if (!map) {
		map = mmap(NULL, s->segment_size, PROT_READ, MAP_SHARED, seg->fd, 0);
		if (map == MAP_FAILED) {
			/* Not tried again: every read would retry under the
			 * store lock (address space or map count exhausted). */
			map = NULL;
			atomic_store(&seg->map_broken, 1);
			KV_LOG_LIMITED(&map_log, KV_LOG_WARN, "%s/seg-%08" PRIu32 ": cannot map "
				       "for reading: %s; reading it through the ring",
				       s->stripes[seg->stripe].path, seg->num, kv_strerror(-errno));
		} else {
			seg->map_len = s->segment_size;
			seg->guard = (struct kv_guard){ map, seg->map_len, &seg->map_broken };
			atomic_store(&seg->map, map);
		}
	}
	pthread_mutex_unlock(&s->lock);
	return map && !atomic_load(&seg->map_broken) ? map : NULL;
}

/* Does the file hold [0, end)? */
static int segment_holds(struct kv_store *s, struct segment *seg, uint64_t end)
{
	struct stat sb;

	if (end <= atomic_load(&seg->known_size))
		return 0;
	if (fstat(seg->fd, &sb) < 0)
		return -errno;
	atomic_store(&seg->known_size, (uint64_t)sb.st_size);
	if (end <= (uint64_t)sb.st_size)
		return 0;
	kv_log(KV_LOG_ERR, "%s/seg-%08" PRIu32 ": extent ends at %" PRIu64
	       " past the end of the file (%" PRIu64 " bytes)",
	       s->stripes[seg->stripe].path, seg->num, end, (uint64_t)sb.st_size);
	return -EIO;
}

int kv_store_map_extent(struct kv_store *s, const struct kv_extent *e,
			const void **bytes, void **hold)
{
	struct segment *seg = NULL;
	const uint8_t *map;
	int rc;

	*bytes = NULL;
	*hold = NULL;
	if (e->stripe >= s->nstripes || !s->stripes[e->stripe].in_memory)
		return -EOPNOTSUPP;
	if (e->length == 0 || e->length > s->segment_size || e->offset % KV_ALIGN ||
	    e->offset > s->segment_size - e->length) {
		kv_log(KV_LOG_ERR, "store: mapped read of stripe %" PRIu32 " segment %"
		       PRIu32 " offset %" PRIu64 " length %" PRIu64 " refused: outside "
		       "the segment", e->stripe, e->segment, e->offset, e->length);
		return -EINVAL;
	}
	pthread_mutex_lock(&s->lock);
	seg = segment_find(&s->stripes[e->stripe], e->segment);
	if (seg)
		atomic_fetch_add(&seg->refs, 1);
	pthread_mutex_unlock(&s->lock);
	if (!seg)
		return -EIO;   /* freed under the caller: its bug, not silent */
	rc = segment_holds(s, seg, e->offset + e->length);
	map = rc == 0 ? segment_map(s, seg) : NULL;
	if (!map) {
		segment_unref(seg);
		return rc ? rc : -EOPNOTSUPP;
	}
	*bytes = map + e->offset;
	*hold = seg;
	return 0;
}

int kv_store_copy_mapped(void *hold, void *dst, const void *src, size_t len,
			 uint8_t out[KV_HASH_LEN])
{
	static struct kv_log_limit cut_log;
	struct segment *seg = hold;

	if (kv_guard_begin(&seg->guard) < 0)
		return -EIO;
	kv_copy_hash128(dst, src, len, out);
	if (kv_guard_end(&seg->guard) == 0)
		return 0;
	KV_LOG_LIMITED(&cut_log, KV_LOG_ERR, "stripe %" PRIu32 " seg-%08" PRIu32 ": the file "
		       "is shorter than it was (cut short behind the store's back?): "
		       "reading it through the ring from now on", seg->stripe, seg->num);
	return -EIO;
}

void kv_store_unmap_extent(void *hold)
{
	if (hold)
		segment_unref(hold);
}

static int read_mapped_verified(struct kv_store *s, const struct kv_extent *e,
				void *buf, uint8_t got[KV_HASH_LEN])
{
	const void *src;
	void *hold;
	int rc = kv_store_map_extent(s, e, &src, &hold);

	if (rc)
		return rc;
	rc = kv_store_copy_mapped(hold, buf, src, e->length, got);
	memset((uint8_t *)buf + e->length, 0, kv_extent_footprint(e) - e->length);
	kv_store_unmap_extent(hold);
	return rc;
}

int kv_store_read_verified(struct kv_store *s, const struct kv_extent *e,
			   const uint8_t hash[KV_HASH_LEN], void **out)
{
	uint8_t got[KV_HASH_LEN];
	char want_hex[2 * KV_HASH_LEN + 1], got_hex[2 * KV_HASH_LEN + 1];
	struct kv_io io = { .op = KV_IO_READ, .ext = *e };
	int rc;

	*out = NULL;
	io.buf = kv_buf_get(kv_extent_footprint(e));   /* the read fills it */
	if (!io.buf)
		return -ENOMEM;
	rc = read_mapped_verified(s, e, io.buf, got);
	if (rc == -EOPNOTSUPP || rc == -EIO) {   /* the ring has the last word */
		rc = store_read_sync(s, &io);
		if (rc == 0)
			kv_hash128(io.buf, e->length, got);
	}
	if (rc)
		goto fail;
	if (memcmp(got, hash, KV_HASH_LEN) != 0) {
		kv_hash_hex(hash, want_hex);
		kv_hash_hex(got, got_hex);
		kv_log(KV_LOG_ERR, "checksum mismatch on stripe %" PRIu32
		       " segment %" PRIu32 " offset %" PRIu64 " length %" PRIu64
		       ": expected %s got %s", e->stripe, e->segment, e->offset,
		       e->length, want_hex, got_hex);
		rc = KV_ERR_CHECKSUM;
		goto fail;
	}
	*out = io.buf;
	return 0;

fail:
	kv_buf_put(io.buf, kv_extent_footprint(e));
	return rc;
}
