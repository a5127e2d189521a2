/*
 * Write heads: where a file takes one write at a time, a stripe spreads
 * consecutive allocations over several segment files, so that their writes
 * run at once.
 *
 * Why: tmpfs and ramfs take a file's inode lock exclusively for every
 * write; a stripe there whose allocations all land in one segment file
 * writes one payload at a time, however many threads and io_uring workers
 * there are. Measured on a 16-core machine with a store on tmpfs
 * (docs/benchmarks/metadata.md, "Write heads"): 1 MiB fast-path writes
 * reached 0.48-0.55 of raw with one segment being written, and 1.40-1.68
 * with four. An O_DIRECT write into allocated space on a disk file system
 * takes the lock shared, so device stripes keep one head and pack low
 * segments first (store.c, "Placement"). Buffered
 * writes to a disk (-o no_direct) are serialised too, but each head adds
 * an fdatasync (a journal commit) to every commit batch there, which was
 * not measured: such stripes keep one head.
 *
 * Placement with heads: the stripe's lowest `heads` segments with room for
 * the extent are the candidates, taken in turn; while fewer than `heads`
 * have room, a new segment is made instead. Frees still fill low segments
 * first, since the candidates are the lowest with room.
 *
 * KVFS_WRITE_HEADS=N (1 to KV_WRITE_HEADS_MAX) sets the number for every
 * stripe, for benchmarks that compare.
 *
 * Locking: under kv_store.lock, as every allocation.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <linux/magic.h>

#include "store_i.h"

#define HEADS_MEMORY 4   /* on tmpfs and ramfs */
#define HEADS_RETRY_NS 1000000000ull  /* after a segment could not be made */

unsigned store_write_heads(int dirfd)
{
	const char *env = getenv("KVFS_WRITE_HEADS");
	struct statfs sf;
	char *end;
	long n;

	if (env && *env) {
		n = strtol(env, &end, 10);
		if (!*end && n >= 1 && n <= KV_WRITE_HEADS_MAX)
			return (unsigned)n;
		kv_log(KV_LOG_WARN, "KVFS_WRITE_HEADS=%s is not a number from 1 to %d; "
		       "using the default", env, KV_WRITE_HEADS_MAX);
	}
	if (fstatfs(dirfd, &sf) < 0)
		return 1;
	return sf.f_type == TMPFS_MAGIC || sf.f_type == RAMFS_MAGIC ? HEADS_MEMORY : 1;
}

int heads_pick(struct kv_store *s, struct stripe *st, uint64_t fp,
	       struct segment **out)
{
	struct segment *cand[KV_WRITE_HEADS_MAX];
	unsigned n = 0;
	int rc;

	for (size_t i = 0; i < st->nsegs && n < st->heads; i++)
		if (segment_has_room(s, st->segs[i], fp))
			cand[n++] = st->segs[i];
	if (n < st->heads && (n == 0 || now_ns() >= st->heads_retry)) {
		rc = segment_create(s, st, out);
		if (rc == 0 || n == 0 || stripe_error_is_device(rc))
			return rc;
		/* No new file, for a reason of the directory's own (out of
		 * inodes or descriptors): the heads there are will do, and
		 * making one is not tried (nor logged) again for a second. */
		st->heads_retry = now_ns() + HEADS_RETRY_NS;
	}
	*out = cand[st->head_next++ % n];
	return 0;
}
