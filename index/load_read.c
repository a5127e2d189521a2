/*
 * Rows of the manifest read into a buffer, for the loader to put into the
 * index afterwards under its write lock (load.c, read_put): the reading,
 * most of a load's time, then holds no lock. A scan opened with
 * idx_read_v hands its rows here; a layer's scan hands each page's extent
 * just before the page, and the two make one row of the buffer.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "index_i.h"

struct read_row {
	struct kv_page_rec page;
	struct kv_extent_rec ext;
	bool has_page, has_ext;
};

struct kv_read_buf {
	unsigned n, cap;                  /* rows read: v[0 .. n-1] */
	struct read_row *v;               /* apart: two buffers swap rows */
};

struct kv_read_buf *idx_read_buf_new(unsigned rows)
{
	struct kv_read_buf *b = malloc(sizeof(*b));

	if (b && !(b->v = malloc(rows * sizeof(b->v[0])))) {
		free(b);
		return NULL;
	}
	if (b) {
		b->n = 0;
		b->cap = rows;
	}
	return b;
}

void idx_read_buf_free(struct kv_read_buf *b)
{
	if (b)
		free(b->v);
	free(b);
}

void idx_read_buf_swap(struct kv_read_buf *a, struct kv_read_buf *b)
{
	struct kv_read_buf t = *a;

	*a = *b;
	*b = t;
}

static void row_close(struct kv_read_buf *b)
{
	if (++b->n < b->cap)
		b->v[b->n].has_page = b->v[b->n].has_ext = false;
}

/* An extent stays open for its page; a second extent in a row means the
 * first came alone (the walk's scan of the extents table). */
static int keep_extent(void *arg, const struct kv_extent_rec *r)
{
	struct kv_read_buf *b = arg;

	if (b->v[b->n].has_ext)
		row_close(b);
	b->v[b->n].ext = *r;
	b->v[b->n].has_ext = true;
	return 0;
}

static int keep_page(void *arg, const struct kv_page_rec *r)
{
	struct kv_read_buf *b = arg;

	b->v[b->n].page = *r;
	b->v[b->n].has_page = true;
	row_close(b);
	return 0;
}

const struct kv_manifest_visitor idx_read_v = {
	.extent = keep_extent, .page = keep_page, .sizes_checked = true,
};

int idx_read_chunk(struct kv_read_buf *b, struct kv_manifest_scan *s, unsigned max)
{
	int rc;

	if (max > b->cap)
		max = b->cap;
	b->n = 0;
	b->v[0].has_page = b->v[0].has_ext = false;
	rc = kv_manifest_scan_step(s, max);
	if (b->n < b->cap && b->v[b->n].has_ext)
		row_close(b);
	return rc;
}

bool idx_read_row(const struct kv_read_buf *b, unsigned i, const struct kv_extent_rec **ext,
		  const struct kv_page_rec **page)
{
	if (i >= b->n)
		return false;
	*ext = b->v[i].has_ext ? &b->v[i].ext : NULL;
	*page = b->v[i].has_page ? &b->v[i].page : NULL;
	return true;
}

/*
 * A thread that reads the next chunk while the loader puts the last one
 * (load.c, read_put): a layer's load is about as much SQLite reading as
 * putting into the index, so on two cores the two overlap. It reads only
 * while the loader, holding its mutex, waits for it: the connection is
 * still used by one thread at a time.
 */
struct idx_read_ahead {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct kv_manifest_scan *s;       /* to read from, while asked */
	struct kv_read_buf *b;
	int rc;
	enum { RA_IDLE, RA_ASKED, RA_DONE, RA_QUIT } state;
};

static void *read_ahead_main(void *arg)
{
	struct idx_read_ahead *ra = arg;

	pthread_setname_np(pthread_self(), "kvfs-readahead");
	pthread_mutex_lock(&ra->mu);
	for (;;) {
		while (ra->state != RA_ASKED && ra->state != RA_QUIT)
			pthread_cond_wait(&ra->cv, &ra->mu);
		if (ra->state == RA_QUIT)
			break;
		pthread_mutex_unlock(&ra->mu);
		int rc = idx_read_chunk(ra->b, ra->s, ra->b->cap);
		pthread_mutex_lock(&ra->mu);
		ra->rc = rc;
		if (ra->state != RA_QUIT)     /* freed while reading: still quit */
			ra->state = RA_DONE;
		pthread_cond_broadcast(&ra->cv);
	}
	pthread_mutex_unlock(&ra->mu);
	return NULL;
}

int idx_read_ahead_new(struct idx_read_ahead **out)
{
	struct idx_read_ahead *ra = calloc(1, sizeof(*ra));
	int rc;

	*out = NULL;
	if (!ra)
		return -ENOMEM;
	pthread_mutex_init(&ra->mu, NULL);
	pthread_cond_init(&ra->cv, NULL);
	rc = -pthread_create(&ra->th, NULL, read_ahead_main, ra);
	if (rc) {
		pthread_mutex_destroy(&ra->mu);
		pthread_cond_destroy(&ra->cv);
		free(ra);
		return rc;
	}
	*out = ra;
	return 0;
}

void idx_read_ahead_free(struct idx_read_ahead *ra)
{
	if (!ra)
		return;
	pthread_mutex_lock(&ra->mu);
	ra->state = RA_QUIT;
	pthread_cond_broadcast(&ra->cv);
	pthread_mutex_unlock(&ra->mu);
	pthread_join(ra->th, NULL);
	pthread_mutex_destroy(&ra->mu);
	pthread_cond_destroy(&ra->cv);
	free(ra);
}

void idx_read_ahead_ask(struct idx_read_ahead *ra, struct kv_manifest_scan *s,
			struct kv_read_buf *b)
{
	pthread_mutex_lock(&ra->mu);
	ra->s = s;
	ra->b = b;
	ra->state = RA_ASKED;
	pthread_cond_broadcast(&ra->cv);
	pthread_mutex_unlock(&ra->mu);
}

int idx_read_ahead_wait(struct idx_read_ahead *ra)
{
	int rc;

	pthread_mutex_lock(&ra->mu);
	while (ra->state != RA_DONE)
		pthread_cond_wait(&ra->cv, &ra->mu);
	rc = ra->rc;
	ra->state = RA_IDLE;
	pthread_mutex_unlock(&ra->mu);
	return rc;
}
