/*
 * The fast path's executor: kvfs's own threads, which run batch calls so
 * that no call ever holds a FUSE worker. A FUSE worker only decodes an
 * ioctl, submits it here and goes back to the pool; the job replies when
 * it is done (libfuse lets any thread reply). Metadata, readdir and FUSE
 * reads are then served whatever the engines do.
 *
 * Fairness and bounds: jobs queue per uid and the threads take the uids in
 * turn, so one uid's backlog only delays another uid's call by the calls
 * already running. A uid runs on at most `uid_threads` threads at once and
 * holds at most `uid_mem` bytes of estimated daemon memory in running
 * calls (one call of any size may run alone); every running call together
 * holds at most `mem` bytes (the same exception). A uid with `uid_queue`
 * calls waiting is refused (-EAGAIN) until some finish. While more than
 * one uid has calls running (FUSE callers count, kvfs_exec_note_caller),
 * each thread's nice is raised with its uid's running count, so that each
 * uid's calls weigh about one thread in the OS's CPU share (when the
 * daemon may lower a nice again: see uid_weighting).
 *
 * No FUSE here: a job is a function and an estimate.
 */
#ifndef KVFS_EXECUTOR_H
#define KVFS_EXECUTOR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct kvfs_exec;

struct kvfs_exec_job {
	void (*run)(struct kvfs_exec_job *job);  /* frees the job if it must */
	uint32_t uid;            /* who: the fairness key */
	uint64_t mem;            /* estimated daemon bytes while it runs */
	struct kvfs_exec_job *next;  /* the executor's */
};

struct kvfs_exec_limits {
	unsigned threads;        /* executor threads */
	unsigned uid_threads;    /* most threads one uid runs on at once */
	unsigned uid_queue;      /* most calls one uid may have waiting */
	uint64_t uid_mem;        /* estimated bytes of one uid's running calls */
	uint64_t mem;            /* ... of every running call */
};

/* Defaults: 16 threads (as many as the FUSE pool had), 12 per uid, 256
 * waiting per uid, 512 MiB per uid, 1 GiB in all. */
void kvfs_exec_default_limits(struct kvfs_exec_limits *l);

/* Start the threads. 0, -EINVAL (a zero limit), -ENOMEM or -errno. */
int kvfs_exec_start(const struct kvfs_exec_limits *l, struct kvfs_exec **out);

/* Queue a job: 0, -EAGAIN (the uid has uid_queue calls waiting) or
 * -ESHUTDOWN (stopping). On error the job is the caller's again. */
int kvfs_exec_submit(struct kvfs_exec *ex, struct kvfs_exec_job *job);

/* A front-end request of uid arrived (a FUSE operation): while another
 * uid alone runs calls, they are weighed as if uid ran one too, for a
 * second after its last request. Cheap enough for every request; NULL is a
 * no-op. */
void kvfs_exec_note_caller(struct kvfs_exec *ex, uint32_t uid);

/* Run every job already queued, then join the threads. NULL is a no-op. */
void kvfs_exec_stop(struct kvfs_exec *ex);

struct kvfs_exec_stats {
	uint64_t submitted, refused, completed;
	uint32_t running, queued;
	uint64_t mem_running;    /* estimated bytes of the running calls */
	bool uid_weighting;      /* threads' nice follows their uid's share */
};
void kvfs_exec_stats(struct kvfs_exec *ex, struct kvfs_exec_stats *st);

#endif
