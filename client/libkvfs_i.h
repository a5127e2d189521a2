/*
 * libkvfs internals shared by its three files: libkvfs.c (clients and
 * regions), libkvfs_batch.c (batches and the synchronous calls) and
 * libkvfs_async.c (submit/wait and the worker pool). Not installed: the
 * structs are opaque to engines (libkvfs.h), and every function declared
 * here is hidden from the shared library's symbol table.
 *
 * Locking: one mutex per client (kvfs_client.lock) protects its region
 * list, the work queue, the worker pool and every batch's submission state.
 * Batch descriptors live in shared memory and are owned by whoever owns the
 * batch (the caller, or a worker between submit and completion); the mutex
 * never covers them. The ioctls run with no lock held, so calls from
 * several threads (or several workers) reach the daemon in parallel.
 */
#ifndef LIBKVFS_I_H
#define LIBKVFS_I_H

#include <pthread.h>
#include <stdbool.h>

#include "libkvfs.h"

#define KVFS_HIDDEN __attribute__((visibility("hidden")))

/* Async calls in flight at once per client. Each one is a thread blocked in
 * the daemon, which batches its own I/O, so a few suffice to overlap calls. */
#define KVFS_WORKERS_MAX 4

enum batch_state {
	BATCH_IDLE,       /* owned by the caller */
	BATCH_QUEUED,     /* submitted: waiting for or running on a worker */
	BATCH_DONE,       /* finished: result kept for kvfs_batch_wait */
};

struct kvfs_client {
	int fd;                        /* the model directory */
	pthread_mutex_t lock;
	struct kvfs_region *regions;   /* open regions, for close */
	struct kvfs_batch *queue_head; /* submitted, not yet picked up */
	struct kvfs_batch *queue_tail;
	unsigned queued;
	pthread_cond_t work_cv;        /* queue non-empty, or stopping */
	pthread_t workers[KVFS_WORKERS_MAX];
	unsigned nworkers;
	unsigned idle;                 /* workers waiting on work_cv */
	bool stopping;
	int efd;                       /* eventfd: +1 per completed submission */
};

struct kvfs_region {
	struct kvfs_client *c;
	struct kvfs_region *prev, *next;   /* c->regions, under c->lock */
	int fd;                            /* our own descriptor of the memory */
	void *base;
	size_t size;
	uint64_t offset;                   /* where it starts in the file */
	uint64_t id;
	unsigned pending;                  /* batches submitted and not yet
	                                    * waited for, under c->lock */
	unsigned data_users;               /* batches whose data region it is,
	                                    * under c->lock */
};

struct kvfs_batch {
	struct kvfs_region *r;
	struct kvfs_region *dr;        /* data region (not r), or NULL; set by
	                                * the batch's owner, counted in
	                                * dr->data_users under r->c->lock */
	struct kvfs_page_desc *desc;   /* region bytes at ctl_off */
	char *names;                   /* max * KVFS_NAME_MAX bytes after desc */
	uint64_t ctl_off;
	unsigned max;
	unsigned count;
	/* Submission state, under r->c->lock. state is also read without the
	 * lock (atomically) to refuse changes to a batch a worker owns. */
	int state;
	unsigned gen;                  /* submissions so far: a waiter tells
	                                * its own from a later one */
	struct kvfs_batch *next_queued;
	pthread_cond_t done_cv;
	struct kvfs_batch_arg arg;     /* what the worker issues, and its outs */
	unsigned long cmd;             /* ... with this command */
	int rc;                        /* the worker's result */
};

static inline int batch_state(const struct kvfs_batch *b)
{
	return __atomic_load_n(&b->state, __ATOMIC_ACQUIRE);
}

static inline void batch_set_state(struct kvfs_batch *b, int state)
{
	__atomic_store_n(&b->state, state, __ATOMIC_RELEASE);
}

/* ioctl as 0/-errno, repeated after EINTR except for a write. */
KVFS_HIDDEN int kvfs_i_ioctl(int fd, unsigned long cmd, void *arg);
/* The argument of ioctl cmd for batch b (flags already checked); a read or
 * write names the batch's data region if it has one. */
KVFS_HIDDEN void kvfs_i_batch_arg(const struct kvfs_batch *b, unsigned long cmd,
				  unsigned group, unsigned flags,
				  struct kvfs_batch_arg *a);
KVFS_HIDDEN void kvfs_i_batch_result(const struct kvfs_batch_arg *a,
				     struct kvfs_batch_result *res);
/* Nonzero if a write's flags are ones the daemon knows. */
KVFS_HIDDEN int kvfs_i_write_flags_ok(unsigned flags);
/* Let every queued call finish, then join the workers (kvfs_client_close). */
KVFS_HIDDEN void kvfs_i_workers_stop(struct kvfs_client *c);

#endif
