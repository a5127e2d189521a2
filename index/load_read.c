/*
 * Rows of the manifest read into a buffer, for the loader to put into the
 * index afterwards under its write lock (load.c, read_put): the reading,
 * most of a load's time, then holds no lock. A scan opened with
 * idx_read_v hands its rows here; a layer's scan hands each page's extent
 * just before the page, and the two make one row of the buffer.
 */
#include <stdlib.h>

#include "index_i.h"

struct read_row {
	struct kv_page_rec page;
	struct kv_extent_rec ext;
	bool has_page, has_ext;
};

struct kv_read_buf {
	unsigned n, cap;                  /* rows read: v[0 .. n-1] */
	struct read_row v[];
};

struct kv_read_buf *idx_read_buf_new(unsigned rows)
{
	struct kv_read_buf *b = malloc(sizeof(*b) + rows * sizeof(b->v[0]));

	if (b) {
		b->n = 0;
		b->cap = rows;
	}
	return b;
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
