/*
 * Extent pins for the fast path. A batch read resolves page names to
 * extents and then reads those extents without holding any lock; meanwhile
 * a page may be unlinked or replaced and its extent freed and reused by a
 * new page, which would feed the batch someone else's bytes (caught by the
 * checksum, but reported as corruption). So frees are deferred while a
 * batch that began before them is still running, the way RCU defers
 * reclamation past a grace period: each batch takes a sequence number, and
 * an extent released while batches are active is freed once every batch
 * older than the release has ended. Frees never wait, and a stream of
 * overlapping batches cannot postpone a free forever.
 */
#include <errno.h>
#include <stdlib.h>

#include "kvfs_i.h"

struct kvfs_deferred {
	struct kv_extent ext;
	uint64_t seq;                 /* newest batch begun at release time */
	struct kvfs_deferred *next;
};

void kvfs_pins_init(struct kvfs_pins *p)
{
	pthread_mutex_init(&p->lock, NULL);
	p->seq = 0;
	p->head = p->tail = NULL;
	p->dhead = p->dtail = NULL;
}

static void free_list(struct kvfs *fs, struct kvfs_deferred *d)
{
	while (d) {
		struct kvfs_deferred *next = d->next;
		int rc = kv_extent_free(fs->store, &d->ext);

		if (rc < 0)
			kv_log(KV_LOG_ERR, "freeing a deferred extent: %s", kv_strerror(rc));
		free(d);
		d = next;
	}
}

void kvfs_pins_fini(struct kvfs *fs)
{
	struct kvfs_pins *p = &fs->pins;

	free_list(fs, p->dhead);
	p->dhead = p->dtail = NULL;
	pthread_mutex_destroy(&p->lock);
}

void kvfs_pin_begin(struct kvfs *fs, struct kvfs_pin *pin)
{
	struct kvfs_pins *p = &fs->pins;

	pthread_mutex_lock(&p->lock);
	pin->seq = ++p->seq;
	pin->next = NULL;
	pin->prev = p->tail;
	if (p->tail)
		p->tail->next = pin;
	else
		p->head = pin;
	p->tail = pin;
	pthread_mutex_unlock(&p->lock);
}

void kvfs_pin_end(struct kvfs *fs, struct kvfs_pin *pin)
{
	struct kvfs_pins *p = &fs->pins;
	struct kvfs_deferred *ready = NULL, **tailp = &ready;

	pthread_mutex_lock(&p->lock);
	if (pin->prev)
		pin->prev->next = pin->next;
	else
		p->head = pin->next;
	if (pin->next)
		pin->next->prev = pin->prev;
	else
		p->tail = pin->prev;
	/* Batches are listed oldest first and releases in order, so the
	 * releases no remaining batch can see form a prefix of the list. */
	while (p->dhead && (!p->head || p->head->seq > p->dhead->seq)) {
		*tailp = p->dhead;
		tailp = &p->dhead->next;
		p->dhead = p->dhead->next;
	}
	*tailp = NULL;
	if (!p->dhead)
		p->dtail = NULL;
	pthread_mutex_unlock(&p->lock);
	free_list(fs, ready);
}

int kvfs_extent_release(struct kvfs *fs, const struct kv_extent *e)
{
	struct kvfs_pins *p = &fs->pins;
	struct kvfs_deferred *d;

	pthread_mutex_lock(&p->lock);
	if (!p->head) {
		pthread_mutex_unlock(&p->lock);
		return kv_extent_free(fs->store, e);
	}
	d = malloc(sizeof(*d));
	if (d) {
		d->ext = *e;
		d->seq = p->seq;
		d->next = NULL;
		if (p->dtail)
			p->dtail->next = d;
		else
			p->dhead = d;
		p->dtail = d;
	}
	pthread_mutex_unlock(&p->lock);
	/* Without memory to remember it the extent stays allocated until the
	 * next mount's recovery reclaims it: a leak, never a wrong byte. */
	return d ? 0 : -ENOMEM;
}
