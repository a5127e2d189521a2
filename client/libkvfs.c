/*
 * libkvfs: the client side of the kvfs fast path (libkvfs.h). This file owns
 * clients and regions: the handshake that tells a kvfs model directory from
 * anything else, and shared memory that is safe to hand to the daemon
 * (sealed memfds, or the caller's own files mapped here and registered
 * there). Batches and the synchronous calls are in libkvfs_batch.c, the
 * submit/wait worker pool in libkvfs_async.c; locking is described in
 * libkvfs_i.h.
 *
 * Lifetimes nest: a batch must be freed before its region is destroyed, and
 * a region holds a client. kvfs_region_destroy refuses (-EBUSY) while a
 * batch of the region is submitted and not yet waited for; kvfs_client_close
 * first lets every queued call finish, then frees what is left.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libkvfs_i.h"

/* ioctl as 0/-errno. A read interrupted by a signal is safe to repeat:
 * reads and lookups are idempotent. A write is not (a repeat would find
 * its own pages and say EEXIST), so an interrupted write is reported as
 * -EINTR and the caller looks its pages up. */
int kvfs_i_ioctl(int fd, unsigned long cmd, void *arg)
{
	int rc;

	do
		rc = ioctl(fd, cmd, arg);
	while (rc < 0 && errno == EINTR && cmd != KVFS_IOC_WRITE);
	return rc < 0 ? -errno : 0;
}

/* ---- clients ---- */

/*
 * Unregistering region 0 is harmless and tells a kvfs model directory (which
 * knows the command and answers "no such region") from everything else.
 * EPROTO means kvfs, but one speaking another ABI version: say so.
 */
static int client_handshake(int fd)
{
	struct kvfs_region_arg a = { .abi = KVFS_ABI_VERSION, .region_id = 0 };
	int rc = kvfs_i_ioctl(fd, KVFS_IOC_REGION_UNREGISTER, &a);

	if (rc == 0 || rc == -ENOENT)
		return 0;
	if (rc == -EPROTO || rc == -ENOMEM)
		return rc;
	return -ENOTTY;
}

int kvfs_client_open(const char *model_dir, struct kvfs_client **out)
{
	struct kvfs_client *c;
	int rc;

	if (!model_dir || !out)
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->fd = open(model_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (c->fd < 0) {
		rc = -errno;
		goto err_free;
	}
	rc = client_handshake(c->fd);
	if (rc)
		goto err_close;
	rc = -pthread_mutex_init(&c->lock, NULL);
	if (rc)
		goto err_close;
	rc = -pthread_cond_init(&c->work_cv, NULL);
	if (rc)
		goto err_mutex;
	/* Made up front, not on the first kvfs_client_event_fd: a batch that
	 * completed before the engine asked for the fd must still show. */
	c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->efd < 0) {
		rc = -errno;
		goto err_cond;
	}
	*out = c;
	return 0;

err_cond:
	pthread_cond_destroy(&c->work_cv);
err_mutex:
	pthread_mutex_destroy(&c->lock);
err_close:
	close(c->fd);
err_free:
	free(c);
	return rc;
}

static void region_unlink(struct kvfs_region *r);
static void region_release(struct kvfs_region *r);

void kvfs_client_close(struct kvfs_client *c)
{
	if (!c)
		return;
	kvfs_i_workers_stop(c);
	/* No worker is left, so nothing is in flight and no lock is needed. */
	while (c->regions) {
		struct kvfs_region *r = c->regions;

		region_unlink(r);
		region_release(r);
	}
	pthread_cond_destroy(&c->work_cv);
	pthread_mutex_destroy(&c->lock);
	close(c->efd);
	close(c->fd);
	free(c);
}

int kvfs_client_fd(const struct kvfs_client *c)
{
	return c ? c->fd : -EINVAL;
}

int kvfs_client_event_fd(const struct kvfs_client *c)
{
	return c ? c->efd : -EINVAL;
}

int kvfs_client_event_drain(struct kvfs_client *c)
{
	uint64_t n;

	if (!c)
		return -EINVAL;
	if (read(c->efd, &n, sizeof(n)) != (ssize_t)sizeof(n))
		return errno == EAGAIN ? 0 : -errno;
	return n > INT_MAX ? INT_MAX : (int)n;
}

/* ---- regions ---- */

/*
 * Map and register bytes [offset, offset + size) of the memory behind fd
 * (which the region now owns). The mapping is populated up front so the
 * first read into it does not pay for page faults, neither here nor in the
 * daemon's copy of the pages. Offset 0 goes without KVFS_REGION_AT_OFFSET,
 * so whole-file regions still work with daemons that predate the flag.
 */
static int region_attach(struct kvfs_client *c, int fd, uint64_t offset,
			 size_t size, struct kvfs_region **out)
{
	struct kvfs_region_arg a = { .abi = KVFS_ABI_VERSION, .fd = fd,
				     .length = size };
	struct kvfs_region *r;
	int rc;

	if (offset) {
		a.flags = KVFS_REGION_AT_OFFSET;
		a.offset = offset;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->base = mmap(NULL, size, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_POPULATE, fd, (off_t)offset);
	if (r->base == MAP_FAILED) {
		rc = -errno;
		goto err_free;
	}
	rc = kvfs_i_ioctl(c->fd, KVFS_IOC_REGION_REGISTER, &a);
	if (rc)
		goto err_unmap;
	r->c = c;
	r->fd = fd;
	r->size = size;
	r->offset = offset;
	r->id = a.region_id;
	pthread_mutex_lock(&c->lock);
	r->next = c->regions;
	if (c->regions)
		c->regions->prev = r;
	c->regions = r;
	pthread_mutex_unlock(&c->lock);
	*out = r;
	return 0;

err_unmap:
	munmap(r->base, size);
err_free:
	free(r);
	return rc;
}

int kvfs_region_create(struct kvfs_client *c, size_t size,
		       struct kvfs_region **out)
{
	int fd, rc;

	if (!c || !out || size == 0)
		return -EINVAL;
	fd = memfd_create("kvfs-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0) {
		rc = -errno;
		goto err_close;
	}
	/* A region that shrinks under a mapping faults (SIGBUS) in whoever
	 * touches the lost pages, the daemon included: forbid it for good. */
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		rc = -errno;
		goto err_close;
	}
	rc = region_attach(c, fd, 0, size, out);
	if (rc)
		goto err_close;
	return 0;

err_close:
	close(fd);
	return rc;
}

int kvfs_region_register_fd(struct kvfs_client *c, int fd, size_t size,
			    struct kvfs_region **out)
{
	return kvfs_region_register_fd_at(c, fd, 0, size, out);
}

int kvfs_region_register_fd_at(struct kvfs_client *c, int fd, uint64_t offset,
			       size_t size, struct kvfs_region **out)
{
	long page = sysconf(_SC_PAGESIZE);
	struct stat st;
	int dfd, rc;

	/* mmap and the daemon both need a page-aligned start. */
	if (!c || !out || fd < 0 || offset % (uint64_t)(page > 0 ? page : 4096))
		return -EINVAL;
	dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (dfd < 0)
		return -errno;
	if (fstat(dfd, &st) < 0) {
		rc = -errno;
		goto err_close;
	}
	/* Mapping past the end of the file would fault on first touch. */
	rc = -EINVAL;
	if (!S_ISREG(st.st_mode) || st.st_size <= 0)
		goto err_close;
	rc = -ERANGE;
	if (offset >= (uint64_t)st.st_size)
		goto err_close;
	if (size == 0)
		size = (size_t)((uint64_t)st.st_size - offset);
	if ((uint64_t)size > (uint64_t)st.st_size - offset)
		goto err_close;
	rc = region_attach(c, dfd, offset, size, out);
	if (rc)
		goto err_close;
	return 0;

err_close:
	close(dfd);
	return rc;
}

static void region_unlink(struct kvfs_region *r)
{
	struct kvfs_client *c = r->c;

	if (r->prev)
		r->prev->next = r->next;
	else
		c->regions = r->next;
	if (r->next)
		r->next->prev = r->prev;
}

/* Unregister (best effort: the daemon may be gone, or may have dropped the
 * region already), unmap, close and free a region no longer listed. */
static void region_release(struct kvfs_region *r)
{
	struct kvfs_region_arg a = { .abi = KVFS_ABI_VERSION, .region_id = r->id };

	(void)kvfs_i_ioctl(r->c->fd, KVFS_IOC_REGION_UNREGISTER, &a);
	munmap(r->base, r->size);
	close(r->fd);
	free(r);
}

int kvfs_region_destroy(struct kvfs_region *r)
{
	struct kvfs_client *c;

	if (!r)
		return -EINVAL;
	c = r->c;
	/* A submitted batch refers to its region until kvfs_batch_wait
	 * collects it, and a batch whose data region this is would send its
	 * id in its next call. Checked and unlinked in one hold of the lock,
	 * so no submission slips in between. */
	pthread_mutex_lock(&c->lock);
	if (r->pending || r->data_users) {
		pthread_mutex_unlock(&c->lock);
		return -EBUSY;
	}
	region_unlink(r);
	pthread_mutex_unlock(&c->lock);
	region_release(r);
	return 0;
}

void *kvfs_region_base(const struct kvfs_region *r)
{
	return r ? r->base : NULL;
}

size_t kvfs_region_size(const struct kvfs_region *r)
{
	return r ? r->size : 0;
}

uint64_t kvfs_region_id(const struct kvfs_region *r)
{
	return r ? r->id : 0;
}

uint64_t kvfs_region_offset(const struct kvfs_region *r)
{
	return r ? r->offset : 0;
}

