/*
 * The kernel-cache notifier (notifier.h): a FIFO of names under one mutex
 * and one thread that sends them. The session pointer lives here alone, so
 * nothing else below the daemon needs FUSE to make the kernel forget.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include "notifier.h"
#include "store.h"

struct name_gone {
	struct name_gone *next;
	uint64_t parent;
	size_t len;
	char name[];
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cv;
	struct name_gone *head, **tail;
	uint32_t pending;
	bool running, stop;
	struct fuse_session *se;
	pthread_t thread;
	uint64_t queued, sent, dropped;  /* sent and dropped-at-stop count in order */
	pthread_cond_t sent_cv;
	struct kv_log_limit drop_log, fail_log;
} nt = { .lock = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER,
	 .sent_cv = PTHREAD_COND_INITIALIZER,
	 .tail = &nt.head };

static void *notifier_main(void *arg)
{
	struct name_gone *g;
	int rc;

	(void)arg;
	pthread_setname_np(pthread_self(), "kvfs-notify");
	pthread_mutex_lock(&nt.lock);
	while (!nt.stop) {
		if (!(g = nt.head)) {
			pthread_cond_wait(&nt.cv, &nt.lock);
			continue;
		}
		if (!(nt.head = g->next))
			nt.tail = &nt.head;
		nt.pending--;
		pthread_mutex_unlock(&nt.lock);
		/* -ENOENT: the kernel had nothing cached, which is fine. */
		rc = fuse_lowlevel_notify_inval_entry(nt.se, g->parent, g->name, g->len);
		if (rc < 0 && rc != -ENOENT)
			KV_LOG_LIMITED(&nt.fail_log, KV_LOG_WARN,
				       "could not make the kernel forget replaced, evicted "
				       "or withdrawn page %s: %s", g->name, kv_strerror(rc));
		free(g);
		pthread_mutex_lock(&nt.lock);
		nt.sent++;
		pthread_cond_broadcast(&nt.sent_cv);
	}
	pthread_mutex_unlock(&nt.lock);
	return NULL;
}

int kvfs_notifier_start(struct fuse_session *se)
{
	int rc;

	pthread_mutex_lock(&nt.lock);
	nt.se = se;
	nt.stop = false;
	rc = -pthread_create(&nt.thread, NULL, notifier_main, NULL);
	nt.running = rc == 0;
	pthread_mutex_unlock(&nt.lock);
	if (rc < 0)
		kv_log(KV_LOG_ERR, "cannot start the kernel-cache notifier: %s", kv_strerror(rc));
	return rc;
}

void kvfs_notifier_stop(void)
{
	struct name_gone *g;
	bool running;

	pthread_mutex_lock(&nt.lock);
	running = nt.running;
	nt.stop = true;
	nt.running = false;
	pthread_cond_broadcast(&nt.cv);
	pthread_mutex_unlock(&nt.lock);
	if (running)
		pthread_join(nt.thread, NULL);
	pthread_mutex_lock(&nt.lock);
	while ((g = nt.head)) {
		nt.head = g->next;
		nt.sent++;    /* no session to send to: nobody should wait for it */
		free(g);
	}
	pthread_cond_broadcast(&nt.sent_cv);
	nt.tail = &nt.head;
	nt.pending = 0;
	nt.se = NULL;
	pthread_mutex_unlock(&nt.lock);
}

uint64_t kvfs_notifier_forget(uint64_t parent, const char *name)
{
	size_t len = strlen(name);
	struct name_gone *g = NULL;
	uint64_t ticket = 0;
	bool full;

	pthread_mutex_lock(&nt.lock);
	full = nt.pending >= KVFS_NOTIFY_QUEUE_MAX;
	if (!nt.running) {
		pthread_mutex_unlock(&nt.lock);
		return 0;
	}
	pthread_mutex_unlock(&nt.lock);
	if (!full)
		g = malloc(sizeof(*g) + len + 1);
	pthread_mutex_lock(&nt.lock);
	if (g && nt.running && nt.pending < KVFS_NOTIFY_QUEUE_MAX) {
		g->next = NULL;
		g->parent = parent;
		g->len = len;
		memcpy(g->name, name, len + 1);
		*nt.tail = g;
		nt.tail = &g->next;
		nt.pending++;
		ticket = ++nt.queued;
		pthread_cond_signal(&nt.cv);
		g = NULL;
	} else if (nt.running) {
		nt.dropped++;
		full = true;
	}
	pthread_mutex_unlock(&nt.lock);
	free(g);
	if (full)
		KV_LOG_LIMITED(&nt.drop_log, KV_LOG_WARN,
			       "kernel-cache notifier: queue full (%u names) or no memory: "
			       "the kernel may keep replaced or evicted page %s until "
			       "entry_timeout", KVFS_NOTIFY_QUEUE_MAX, name);
	return ticket;
}

int kvfs_notifier_attrs_now(uint64_t ino)
{
	struct fuse_session *se;
	int rc;

	pthread_mutex_lock(&nt.lock);
	se = nt.running ? nt.se : NULL;
	pthread_mutex_unlock(&nt.lock);
	if (!se)
		return 0;
	rc = fuse_lowlevel_notify_inval_inode(se, ino, -1, 0);
	if (rc < 0 && rc != -ENOENT)
		KV_LOG_LIMITED(&nt.fail_log, KV_LOG_WARN, "could not make the kernel drop "
			       "the attributes of inode %llu: %s", (unsigned long long)ino,
			       kv_strerror(rc));
	return rc == -ENOENT ? 0 : rc;
}

int kvfs_notifier_wait(uint64_t ticket, unsigned timeout_ms)
{
	struct timespec until;
	int rc = 0;
	bool sent;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += timeout_ms / 1000;
	until.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&nt.lock);
	while (rc == 0 && nt.sent < ticket)
		rc = -pthread_cond_timedwait(&nt.sent_cv, &nt.lock, &until);
	sent = nt.sent >= ticket;
	pthread_mutex_unlock(&nt.lock);
	return sent ? 0 : -ETIMEDOUT;
}

void kvfs_notifier_stats(struct kvfs_notifier_stats *st)
{
	pthread_mutex_lock(&nt.lock);
	*st = (struct kvfs_notifier_stats){ .queued = nt.queued, .sent = nt.sent,
					    .dropped = nt.dropped, .pending = nt.pending };
	pthread_mutex_unlock(&nt.lock);
}
