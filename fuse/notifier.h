/*
 * The kernel-cache notifier: the one thread that tells the kernel to drop
 * cached names (fuse_lowlevel_notify_inval_entry) for pages replaced or
 * evicted behind its back. (kvfs_notifier_attrs_now sends attribute
 * invalidations itself: they need no thread.)
 *
 * Why a thread of its own: the notification waits in the kernel for the
 * directory's lock, and a client may hold that lock inside a LOOKUP that
 * waits for a FUSE worker. Sent from a request path, every worker can end
 * up waiting for the lock while the LOOKUP waits for a worker: the mount
 * deadlocks. So requests only queue a name (never blocking, never waiting
 * for this thread), and this thread holds no kvfs lock while it sends.
 *
 * The queue is bounded (KVFS_NOTIFY_QUEUE_MAX names). A name that does not
 * fit is dropped, counted and logged (rate-limited): the kernel then keeps
 * the old entry until entry_timeout, and a lookup through it gets ENOENT
 * or ESTALE from the daemon, never another page's bytes.
 */
#ifndef KVFS_NOTIFIER_H
#define KVFS_NOTIFIER_H

#include <stdint.h>

#define KVFS_NOTIFY_QUEUE_MAX 65536u

struct fuse_session;

/* Start the thread for session se; names are queued from then on. 0 or
 * -errno. */
int kvfs_notifier_start(struct fuse_session *se);
/* Stop it (queued names are dropped: the session is going away). Call
 * while the session's fd is still open. */
void kvfs_notifier_stop(void);
/* Queue "drop name in directory parent"; never blocks. Returns a ticket
 * for kvfs_notifier_wait, 0 if nothing was queued (no running notifier, as
 * in offline tools, or the name was dropped). */
uint64_t kvfs_notifier_forget(uint64_t parent, const char *name);
/* Drop the attributes the kernel caches for inode ino (a change it did not
 * make itself, such as a pin set through an attribute), now. Safe on a
 * request path, unlike a name: for attributes alone (offset -1) the kernel
 * takes no inode or directory lock. 0 or -errno. */
int kvfs_notifier_attrs_now(uint64_t ino);
/*
 * Wait until the name with this ticket (and every one before it) has been
 * sent, at most timeout_ms: 0, or -ETIMEDOUT. Only for threads that no
 * request waits for (the fast path's executor): the send itself may wait
 * for a request.
 */
int kvfs_notifier_wait(uint64_t ticket, unsigned timeout_ms);

struct kvfs_notifier_stats {
	uint64_t queued, sent, dropped;
	uint32_t pending;
};
void kvfs_notifier_stats(struct kvfs_notifier_stats *st);

#endif
