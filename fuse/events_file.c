/*
 * MOUNT/.kvfs/events as a FUSE file: each open is an engine reader
 * (kvfs_events_reader_new) with its own cursor. A read with nothing new is
 * parked (its FUSE request kept, no worker thread held) and answered when
 * the engine says records arrived (kvfs_events_file_wake, its events_ready
 * hook, called by the committer), by an interrupt (EINTR) or at shutdown
 * (EOF). A poll handle waits the same way.
 *
 * Why no wake-up is lost: a read checks for records and parks under
 * evf.lock; the engine appends under its own lock and only then calls the
 * hook, which takes evf.lock. So a record appended after the check finds
 * the read parked.
 *
 * Locking: evf.lock, then the engine's events lock (taken inside
 * kvfs_events_*). Replies and poll notifications are sent after evf.lock
 * is dropped; fuse_req_interrupted (libfuse's session lock) is the only
 * libfuse call made under it, and libfuse calls the interrupt callback
 * with no lock of ours held.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "events_file.h"

/* One open of the file (fi->fh). */
struct ev_file {
	struct kvfs_events_reader *r;
	struct fuse_pollhandle *ph; /* a poll waiting to be told */
	struct ev_file *prev, *next;
};

/* A read parked until records arrive. */
struct ev_wait {
	fuse_req_t req;
	struct ev_file *f;
	size_t size;
	struct ev_wait *next;
};

static struct {
	pthread_mutex_t lock;
	struct ev_file *files;
	struct ev_wait *waits;      /* parked reads, oldest first */
} evf = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* A reply made under evf.lock, sent after it. */
struct ev_reply {
	fuse_req_t req;
	char *buf;
	size_t len;
	int err;
};

static void send_reply(struct ev_reply *rp)
{
	if (rp->err)
		fuse_reply_err(rp->req, rp->err);
	else
		fuse_reply_buf(rp->req, rp->buf, rp->len);
	free(rp->buf);
}

/* Answer a read from f now: its bytes, or EOF (an empty reply). Only
 * when kvfs_events_ready said so, or size is 0. */
static struct ev_reply answer(struct kvfs *fs, struct ev_file *f, fuse_req_t req,
			      size_t size)
{
	struct ev_reply rp = { .req = req };
	bool eof;

	if (!size)
		return rp;
	rp.buf = malloc(size);
	if (!rp.buf) {
		rp.err = ENOMEM;
		return rp;
	}
	rp.len = kvfs_events_take(fs, f->r, rp.buf, size, &eof);
	return rp;
}

/* Take out the parked reads matching req, or those of file f (evf.lock
 * held). */
static struct ev_wait *unpark(fuse_req_t req, const struct ev_file *f)
{
	struct ev_wait **pp = &evf.waits, *w, *out = NULL;

	while ((w = *pp)) {
		if ((req && w->req != req) || (f && w->f != f)) {
			pp = &w->next;
			continue;
		}
		*pp = w->next;
		w->next = out;
		out = w;
	}
	return out;
}

static void reply_all(struct ev_wait *w, int err)
{
	struct ev_wait *next;

	for (; w; w = next) {
		next = w->next;
		if (err)
			fuse_reply_err(w->req, err);
		else
			fuse_reply_buf(w->req, NULL, 0);
		free(w);
	}
}

void kvfs_events_file_wake(struct kvfs *fs)
{
	struct ev_reply *rps = NULL;
	struct fuse_pollhandle **phs = NULL;
	struct ev_wait **pp, *w;
	struct ev_file *f;
	size_t nrp = 0, nph = 0, i;

	pthread_mutex_lock(&evf.lock);
	for (w = evf.waits; w; w = w->next)
		nrp++;
	for (f = evf.files; f; f = f->next)
		nph += f->ph != NULL;
	/* No memory for the lists: the reads stay parked until the next
	 * records (or an interrupt, or shutdown) try again. */
	if (nrp && !(rps = malloc(nrp * sizeof(*rps))))
		nrp = 0;
	if (nph && !(phs = malloc(nph * sizeof(*phs))))
		nph = 0;
	for (i = 0, pp = &evf.waits; (w = *pp) && i < nrp;) {
		if (!kvfs_events_ready(fs, w->f->r)) {
			pp = &w->next;
			continue;
		}
		*pp = w->next;
		rps[i++] = answer(fs, w->f, w->req, w->size);
		free(w);
	}
	nrp = i;
	for (i = 0, f = evf.files; f && i < nph; f = f->next)
		if (f->ph && kvfs_events_ready(fs, f->r)) {
			phs[i++] = f->ph;
			f->ph = NULL;
		}
	nph = i;
	pthread_mutex_unlock(&evf.lock);

	for (i = 0; i < nrp; i++)
		send_reply(&rps[i]);
	for (i = 0; i < nph; i++) {
		fuse_lowlevel_notify_poll(phs[i]);
		fuse_pollhandle_destroy(phs[i]);
	}
	free(rps);
	free(phs);
}

/* Forget file f (it was released, or its open never reached the caller). */
static void file_drop(struct kvfs *fs, struct ev_file *f)
{
	struct ev_wait *w;

	pthread_mutex_lock(&evf.lock);
	/* The kernel releases a file only after its reads ended; a read
	 * still parked would name freed memory, so end it if one is. */
	w = unpark(NULL, f);
	if (f->prev)
		f->prev->next = f->next;
	else
		evf.files = f->next;
	if (f->next)
		f->next->prev = f->prev;
	pthread_mutex_unlock(&evf.lock);
	reply_all(w, EBADF);
	if (f->ph)
		fuse_pollhandle_destroy(f->ph);
	kvfs_events_reader_free(fs, f->r);
	free(f);
}

void kvfs_events_release(fuse_req_t req, struct fuse_file_info *fi)
{
	file_drop(req_fs(req), (struct ev_file *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

void kvfs_events_open(fuse_req_t req, struct fuse_file_info *fi)
{
	struct kvfs *fs = req_fs(req);
	struct ev_file *f;

	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC))
		return kvfs_reply_err(req, -EACCES);
	f = calloc(1, sizeof(*f));
	if (!f || !(f->r = kvfs_events_reader_new(fs))) {
		free(f);
		return kvfs_reply_err(req, -ENOMEM);
	}
	pthread_mutex_lock(&evf.lock);
	f->next = evf.files;
	if (evf.files)
		evf.files->prev = f;
	evf.files = f;
	pthread_mutex_unlock(&evf.lock);
	fi->fh = (uintptr_t)f;
	fi->direct_io = 1;       /* no page cache: every read reaches us */
	fi->nonseekable = 1;     /* a stream: the offset means nothing */
	fi->keep_cache = 0;
	if (fuse_reply_open(req, fi) != 0)    /* interrupted: no RELEASE */
		file_drop(fs, f);
}

/* libfuse: the kernel interrupted req (a signal to the reader). */
static void interrupted(fuse_req_t req, void *data)
{
	struct ev_wait *w;

	(void)data;
	pthread_mutex_lock(&evf.lock);
	w = unpark(req, NULL);
	pthread_mutex_unlock(&evf.lock);
	reply_all(w, EINTR);   /* nothing: it was answered or is not parked yet */
}

void kvfs_events_read(fuse_req_t req, size_t size, struct fuse_file_info *fi)
{
	struct kvfs *fs = req_fs(req);
	struct ev_file *f = (struct ev_file *)(uintptr_t)fi->fh;
	struct ev_reply rp;
	struct ev_wait *w;

	if (!size || kvfs_events_ready(fs, f->r)) {
		rp = answer(fs, f, req, size);
		return send_reply(&rp);
	}
	w = malloc(sizeof(*w));
	if (!w)
		return kvfs_reply_err(req, -ENOMEM);
	*w = (struct ev_wait){ .req = req, .f = f, .size = size };
	/* Registered before the read is parked: once parked, the committer
	 * may answer it (and libfuse free req) at any moment. An interrupt
	 * that came before is seen below, under the lock. */
	fuse_req_interrupt_func(req, interrupted, NULL);
	pthread_mutex_lock(&evf.lock);
	if (kvfs_events_ready(fs, f->r)) {
		rp = answer(fs, f, req, size);
	} else if (fuse_req_interrupted(req)) {
		rp = (struct ev_reply){ .req = req, .err = EINTR };
	} else {
		/* Parked: this FUSE worker goes back to serving others. */
		struct ev_wait **pp = &evf.waits;

		while (*pp)
			pp = &(*pp)->next;
		*pp = w;
		pthread_mutex_unlock(&evf.lock);
		return;
	}
	pthread_mutex_unlock(&evf.lock);
	free(w);
	send_reply(&rp);
}

void kvfs_events_poll(fuse_req_t req, struct fuse_file_info *fi,
		      struct fuse_pollhandle *ph)
{
	struct kvfs *fs = req_fs(req);
	struct ev_file *f = (struct ev_file *)(uintptr_t)fi->fh;
	struct fuse_pollhandle *old = NULL;
	unsigned revents = 0;

	pthread_mutex_lock(&evf.lock);
	if (kvfs_events_ready(fs, f->r)) {
		revents = POLLIN | POLLRDNORM;
		old = ph;       /* ready now: nothing to tell it later */
	} else if (ph) {
		old = f->ph;    /* the newest handle is the one the kernel waits on */
		f->ph = ph;
	}
	pthread_mutex_unlock(&evf.lock);
	if (old)
		fuse_pollhandle_destroy(old);
	fuse_reply_poll(req, revents);
}
