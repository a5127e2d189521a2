/*
 * libkvfs batches (libkvfs.h): the layout of descriptors and names in a
 * batch's control area, the checks the daemon would make on a name done at
 * add time (with the caller's context), and the synchronous calls (read,
 * lookup, prefetch, write). Submitted calls go through libkvfs_async.c,
 * which needs the same ioctl argument: kvfs_i_batch_arg builds it for both.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "libkvfs_i.h"

/* ---- batches ---- */

size_t kvfs_batch_ctl_bytes(unsigned max_pages)
{
	return (size_t)max_pages * (sizeof(struct kvfs_page_desc) + KVFS_NAME_MAX);
}

int kvfs_batch_new(struct kvfs_region *r, uint64_t ctl_off, unsigned max_pages,
		   struct kvfs_batch **out)
{
	struct kvfs_batch *b;
	size_t ctl;
	int rc;

	if (!r || !out || ctl_off % 8 || max_pages == 0 || max_pages > KVFS_BATCH_MAX)
		return -EINVAL;
	ctl = kvfs_batch_ctl_bytes(max_pages);
	if (ctl_off > r->size || ctl > r->size - ctl_off)
		return -ERANGE;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	rc = -pthread_cond_init(&b->done_cv, NULL);
	if (rc) {
		free(b);
		return rc;
	}
	b->r = r;
	b->ctl_off = ctl_off;
	b->max = max_pages;
	b->desc = (struct kvfs_page_desc *)((char *)r->base + ctl_off);
	b->names = (char *)(b->desc + max_pages);
	*out = b;
	return 0;
}

void kvfs_batch_free(struct kvfs_batch *b)
{
	if (!b)
		return;
	/* A worker may still be writing the result, and the region counts
	 * the submission until it is collected: wait for both. */
	if (batch_state(b) != BATCH_IDLE)
		(void)kvfs_batch_wait(b, NULL);
	(void)kvfs_batch_set_data_region(b, NULL);
	pthread_cond_destroy(&b->done_cv);
	free(b);
}

/* Harmless even while a read is in flight: the worker issues the count it
 * was given at submit, and adding is refused until kvfs_batch_wait. */
void kvfs_batch_reset(struct kvfs_batch *b)
{
	if (b)
		b->count = 0;
}

unsigned kvfs_batch_count(const struct kvfs_batch *b)
{
	return b ? b->count : 0;
}

/* The same rules the daemon applies, so a bad name fails at add time with
 * the caller's context instead of as one page's status later. */
static int check_name(const char *name, size_t *len)
{
	size_t n;

	if (!name)
		return -EINVAL;
	n = strnlen(name, KVFS_NAME_MAX + 1);
	if (n > KVFS_NAME_MAX)
		return -ENAMETOOLONG;
	if (n == 0 || memchr(name, '/', n) || !strcmp(name, ".") || !strcmp(name, ".."))
		return -EINVAL;
	*len = n;
	return 0;
}

/* Slot for the next descriptor, zeroed: reserved fields must be 0, and
 * outputs left from an earlier use of the control area must not show. */
static int batch_next(struct kvfs_batch *b, struct kvfs_page_desc **d)
{
	if (batch_state(b) != BATCH_IDLE)
		return -EBUSY;
	if (b->count >= b->max)
		return -ENOSPC;
	*d = &b->desc[b->count];
	memset(*d, 0, sizeof(**d));
	return 0;
}

int kvfs_batch_add(struct kvfs_batch *b, uint32_t layer, const char *name,
		   uint64_t dst_off, uint64_t dst_len)
{
	struct kvfs_page_desc *d;
	char *slot;
	size_t len;
	int rc;

	if (!b)
		return -EINVAL;
	rc = check_name(name, &len);
	if (rc)
		return rc;
	rc = batch_next(b, &d);
	if (rc)
		return rc;
	slot = b->names + (size_t)b->count * KVFS_NAME_MAX;
	memcpy(slot, name, len);
	d->name_off = (uint64_t)(slot - (char *)b->r->base);
	d->name_len = (uint32_t)len;
	d->layer = layer;
	d->dst_off = dst_off;
	d->dst_len = dst_len;
	return (int)b->count++;
}

int kvfs_batch_add_handle(struct kvfs_batch *b, uint64_t handle,
			  uint64_t dst_off, uint64_t dst_len)
{
	struct kvfs_page_desc *d;
	int rc;

	if (!b || handle == 0)
		return -EINVAL;
	rc = batch_next(b, &d);
	if (rc)
		return rc;
	d->handle = handle;
	d->dst_off = dst_off;
	d->dst_len = dst_len;
	return (int)b->count++;
}

int kvfs_batch_set_dst(struct kvfs_batch *b, unsigned i, uint64_t dst_off,
		       uint64_t dst_len)
{
	if (!b || i >= b->count)
		return -EINVAL;
	if (batch_state(b) != BATCH_IDLE)
		return -EBUSY;
	b->desc[i].dst_off = dst_off;
	b->desc[i].dst_len = dst_len;
	return 0;
}

/*
 * The batch's own region keeps its descriptors and names either way. The
 * data region is counted (not pinned by the daemon: it is looked up by id
 * on every call) so that kvfs_region_destroy cannot free it under a batch
 * that would send its id next.
 */
int kvfs_batch_set_data_region(struct kvfs_batch *b, struct kvfs_region *data)
{
	struct kvfs_client *c;
	int rc = 0;

	if (!b)
		return -EINVAL;
	c = b->r->c;
	if (data && data->c != c)
		return -EXDEV;
	if (data == b->r)
		data = NULL;       /* the default: same-region overlap checks apply */
	pthread_mutex_lock(&c->lock);
	if (b->state != BATCH_IDLE) {
		rc = -EBUSY;
	} else if (b->dr != data) {
		if (b->dr)
			b->dr->data_users--;
		if (data)
			data->data_users++;
		b->dr = data;
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

struct kvfs_region *kvfs_batch_data_region(const struct kvfs_batch *b)
{
	if (!b)
		return NULL;
	return b->dr ? b->dr : b->r;
}

void kvfs_i_batch_arg(const struct kvfs_batch *b, unsigned long cmd,
		      unsigned group, unsigned flags, struct kvfs_batch_arg *a)
{
	memset(a, 0, sizeof(*a));
	a->abi = KVFS_ABI_VERSION;
	a->flags = flags;
	a->region_id = b->r->id;
	a->desc_off = b->ctl_off;
	a->count = b->count;
	a->group = group;
	/* Lookups and prefetches have no destinations: the flag would only
	 * make the daemon refuse them. */
	if (b->dr && (cmd == KVFS_IOC_READ || cmd == KVFS_IOC_WRITE)) {
		a->flags |= KVFS_BATCH_DATA_REGION;
		a->data_region_id = b->dr->id;
	}
}

void kvfs_i_batch_result(const struct kvfs_batch_arg *a,
			 struct kvfs_batch_result *res)
{
	if (!res)
		return;
	res->done = a->done;
	res->failed = a->failed;
	res->bytes = a->bytes;
}

static int batch_call(struct kvfs_batch *b, unsigned long cmd, unsigned group,
		      unsigned flags, struct kvfs_batch_result *res)
{
	struct kvfs_batch_arg a;
	int rc;

	if (!b)
		return -EINVAL;
	if (batch_state(b) != BATCH_IDLE)
		return -EBUSY;
	kvfs_i_batch_arg(b, cmd, group, flags, &a);
	rc = kvfs_i_ioctl(b->r->c->fd, cmd, &a);
	if (rc == 0)
		kvfs_i_batch_result(&a, res);
	return rc;
}

int kvfs_batch_read(struct kvfs_batch *b, struct kvfs_batch_result *res)
{
	return batch_call(b, KVFS_IOC_READ, 0, 0, res);
}

int kvfs_batch_lookup(struct kvfs_batch *b, unsigned group,
		      struct kvfs_batch_result *res)
{
	return batch_call(b, KVFS_IOC_LOOKUP, group, 0, res);
}

int kvfs_batch_prefetch(struct kvfs_batch *b, struct kvfs_batch_result *res)
{
	return batch_call(b, KVFS_IOC_PREFETCH, 0, 0, res);
}

/* Flags the daemon would refuse for the whole call are refused here, with
 * the caller's context. */
int kvfs_i_write_flags_ok(unsigned flags)
{
	return !(flags & ~(KVFS_WRITE_DURABLE | KVFS_WRITE_REPLACE));
}

int kvfs_batch_write(struct kvfs_batch *b, unsigned flags,
		     struct kvfs_batch_result *res)
{
	if (!kvfs_i_write_flags_ok(flags))
		return -EINVAL;
	return batch_call(b, KVFS_IOC_WRITE, 0, flags, res);
}

int kvfs_write_pages(struct kvfs_region *r, uint64_t ctl_off,
		     struct kvfs_write_page *pages, unsigned n, unsigned flags,
		     struct kvfs_batch_result *res)
{
	struct kvfs_batch *b;
	int rc;

	if (!pages || n == 0 || !kvfs_i_write_flags_ok(flags))
		return -EINVAL;
	rc = kvfs_batch_new(r, ctl_off, n, &b);
	if (rc)
		return rc;
	for (unsigned i = 0; i < n; i++) {
		pages[i].status = 0;
		pages[i].handle = 0;
	}
	for (unsigned i = 0; i < n && rc >= 0; i++) {
		rc = kvfs_batch_add(b, pages[i].layer, pages[i].name, pages[i].src_off,
				    pages[i].len);
		if (rc < 0)
			pages[i].status = rc;   /* a bad name: nothing was sent */
	}
	if (rc >= 0)
		rc = kvfs_batch_write(b, flags, res);
	for (unsigned i = 0; i < n && rc == 0; i++) {
		pages[i].status = b->desc[i].status;
		pages[i].handle = b->desc[i].handle;
	}
	kvfs_batch_free(b);
	return rc < 0 ? rc : 0;
}

/* ---- per-descriptor results ---- */

int kvfs_batch_status(const struct kvfs_batch *b, unsigned i, uint64_t *bytes)
{
	if (!b || i >= b->count)
		return -EINVAL;
	if (batch_state(b) == BATCH_QUEUED)
		return -EBUSY;
	if (bytes)
		*bytes = b->desc[i].bytes;
	return b->desc[i].status;
}

uint64_t kvfs_batch_handle(const struct kvfs_batch *b, unsigned i)
{
	if (!b || i >= b->count || batch_state(b) == BATCH_QUEUED)
		return 0;
	return b->desc[i].handle;
}

const struct kvfs_page_desc *kvfs_batch_desc(const struct kvfs_batch *b,
					     unsigned i)
{
	if (!b || i >= b->count)
		return NULL;
	return &b->desc[i];
}
