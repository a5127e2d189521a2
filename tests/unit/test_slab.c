/*
 * Unit tests for the index's object slab (index/slab.c): every size class
 * hands out aligned, disjoint objects across many chunks, a freed object is
 * reused by its own class only, the live byte count follows, a walk by
 * address finds every object handed out, and a chunk emptied goes back.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "slab.h"

static void test_sizes_out_of_range(void **state)
{
	struct slab s;

	(void)state;
	slab_init(&s);
	assert_null(slab_alloc(&s, 0));
	assert_null(slab_alloc(&s, SLAB_MAX + 1));
	assert_non_null(slab_alloc(&s, SLAB_MAX));
	assert_int_equal(s.live, SLAB_MAX);
	slab_fini(&s);
}

/* Objects of every size, many chunks' and two regions' worth (20 MB):
 * each keeps its own bytes. */
static void test_objects_are_disjoint(void **state)
{
	enum { N = 80000 };
	struct slab s;
	unsigned char **p = calloc(N, sizeof(*p));
	size_t i, j, live = 0;

	(void)state;
	assert_non_null(p);
	slab_init(&s);
	for (i = 0; i < N; i++) {
		size_t sz = 1 + i % SLAB_MAX;

		p[i] = slab_alloc(&s, sz);
		assert_non_null(p[i]);
		assert_int_equal((uintptr_t)p[i] % 8, 0);
		memset(p[i], (int)(i & 0xff), sz);
		live += (sz + 7) & ~(size_t)7;
	}
	assert_int_equal(s.live, live);
	assert_true(s.nchunks > 1);
	assert_true(s.nregions > 1);
	for (i = 0; i < N; i++)
		for (j = 0; j < 1 + i % SLAB_MAX; j++)
			if (p[i][j] != (i & 0xff))
				fail_msg("object %zu byte %zu changed", i, j);
	for (i = 0; i < N; i++)
		slab_free(&s, p[i], 1 + i % SLAB_MAX);
	assert_int_equal(s.live, 0);
	slab_fini(&s);
	free(p);
}

/* A freed object comes back to its class (any size rounding to it) and to
 * no other; a fresh chunk is not cut while the free list holds one. */
static void test_free_list_reuse(void **state)
{
	struct slab s;
	void *a, *b, *c, *d;
	size_t chunks;

	(void)state;
	slab_init(&s);
	a = slab_alloc(&s, 104);
	b = slab_alloc(&s, 56);
	chunks = s.nchunks;
	slab_free(&s, a, 104);
	c = slab_alloc(&s, 56);         /* another class: not a */
	assert_ptr_not_equal(c, a);
	d = slab_alloc(&s, 101);        /* rounds to 104: a again */
	assert_ptr_equal(d, a);
	slab_free(&s, b, 56);
	slab_free(&s, c, 56);
	assert_ptr_equal(slab_alloc(&s, 56), c);   /* last freed, first out */
	assert_ptr_equal(slab_alloc(&s, 49), b);
	assert_int_equal(s.nchunks, chunks);
	assert_int_equal(s.live, 104 + 56 + 56);
	slab_fini(&s);
	assert_int_equal(s.nchunks, 0);
}

/* A full span refuses more (NULL, once logged) and keeps what it holds;
 * freed objects are still handed out again. 32 MiB here, 32 GiB in the
 * index. */
static void test_full_span(void **state)
{
	enum { SZ = 512 };
	struct slab s;
	unsigned char **p;
	size_t n = 0, cap = (32u << 20) / SZ, i;

	(void)state;
	assert_int_equal(slab_init_span(&s, 1000), -EINVAL);
	assert_int_equal(slab_init_span(&s, 32u << 20), 0);
	p = calloc(cap + 1, sizeof(*p));
	assert_non_null(p);
	while (n <= cap && (p[n] = slab_alloc(&s, SZ)) != NULL) {
		memset(p[n], (int)(n & 0xff), SZ);
		n++;
	}
	assert_true(n > cap / 2 && n <= cap);    /* stopped at the span */
	assert_true(s.span_full);
	assert_int_equal(s.nregions, 2);
	assert_null(slab_alloc(&s, SZ));
	assert_null(slab_alloc(&s, 8));           /* no new chunk for any class */
	for (i = 0; i < n; i++)
		if (p[i][0] != (i & 0xff) || p[i][SZ - 1] != (i & 0xff))
			fail_msg("object %zu changed", i);
	slab_free(&s, p[7], SZ);
	assert_ptr_equal(slab_alloc(&s, SZ), p[7]);
	slab_fini(&s);
	free(p);
}

/* The walk by address (slab_chunk_places): objects of two classes over
 * many chunks and two regions, every other one freed; each object still
 * handed out lies at a place of a chunk of its own class, once. */
static void test_chunk_places(void **state)
{
	enum { N = 250000 };
	struct slab s;
	uint64_t **p = calloc(N, sizeof(*p));
	size_t k, j, n, size, found = 0;
	char *places;

	(void)state;
	assert_non_null(p);
	assert_int_equal(slab_init(&s), 0);
	for (uint64_t i = 0; i < N; i++) {
		p[i] = slab_alloc(&s, i % 3 ? 48 : 100);
		assert_non_null(p[i]);
		*p[i] = i + 1;               /* the object's key, never 0 */
	}
	for (size_t i = 0; i < N; i += 2)
		slab_free(&s, p[i], i % 3 ? 48 : 100);
	assert_true(slab_chunks(&s) > 64);      /* past one 16 MiB region */
	for (k = 0; k < slab_chunks(&s); k++) {
		places = slab_chunk_places(&s, k, &size, &n);
		assert_true(size == 48 || size == 104);
		assert_int_equal(n, (256u * 1024) / size);
		for (j = 0; j < n; j++) {
			uint64_t *o = (uint64_t *)(void *)(places + j * size);

			if (!slab_place_readable(o, size) || *o == 0 || *o > N)
				continue;
			/* a live one: its key names it, at its class's size */
			if (p[*o - 1] != o || (*o - 1) % 2 == 0)
				continue;
			assert_int_equal(size, (*o - 1) % 3 ? 48 : 104);
			found++;
		}
	}
	assert_int_equal(found, N / 2);
	slab_fini(&s);
	free(p);
}

/* Pages of [p, p + len) resident (mincore). */
static size_t resident_pages(const void *p, size_t len)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), n = len / pg, in = 0;
	unsigned char *vec = calloc(n, 1);

	assert_non_null(vec);
	assert_int_equal(mincore((void *)p, len, vec), 0);
	for (size_t i = 0; i < n; i++)
		in += vec[i] & 1;
	free(vec);
	return in;
}

/* A chunk whose every object is freed goes back to the system (its pages
 * leave RAM), has no places for the walk, and is the next chunk cut, for
 * any class; the objects of other chunks keep their bytes. The newest
 * chunk of a class stays while it is cut from, and goes once replaced. */
static void test_empty_chunks_go_back(void **state)
{
	enum { CHUNK = 256 * 1024, SZ = 104, PER = CHUNK / SZ, N = 3 * PER + 10 };
	struct slab s;
	char **p = calloc(N, sizeof(*p));
	char *first, *q, *places;
	size_t chunks, n, size;

	(void)state;
	assert_non_null(p);
	assert_int_equal(slab_init(&s), 0);
	for (size_t i = 0; i < N; i++) {
		p[i] = slab_alloc(&s, SZ);
		assert_non_null(p[i]);
		memset(p[i], (int)(i % 251) + 1, SZ);
	}
	chunks = s.nchunks;
	assert_int_equal(chunks, 4);
	assert_int_equal(slab_resident(&s), 4 * (size_t)CHUNK);
	first = p[0];
	assert_true(resident_pages(first, CHUNK) > 0);
	for (size_t i = 0; i < PER; i++)        /* the whole first chunk */
		slab_free(&s, p[i], SZ);
	assert_int_equal(slab_resident(&s), 3 * (size_t)CHUNK);
	assert_int_equal(resident_pages(first, CHUNK), 0);
	places = slab_chunk_places(&s, 0, &size, &n);
	assert_ptr_equal(places, first);
	assert_int_equal(n, 0);
	/* Another class cuts it again before new space. */
	q = slab_alloc(&s, 48);
	assert_ptr_equal(q, first);
	assert_int_equal(s.nchunks, chunks);
	assert_int_equal(slab_resident(&s), 4 * (size_t)CHUNK);
	slab_chunk_places(&s, 0, &size, &n);
	assert_int_equal(size, 48);
	assert_int_equal(n, CHUNK / 48);
	for (size_t i = PER; i < N; i++)
		for (size_t b = 0; b < SZ; b++)
			assert_int_equal((unsigned char)p[i][b], i % 251 + 1);
	/* The newest chunk of class 104 (10 objects) emptied: kept while
	 * it is cut from; a chunk of the second one's objects freed but one,
	 * then new objects come from that one's free list, not new space. */
	for (size_t i = 3 * PER; i < N; i++)
		slab_free(&s, p[i], SZ);
	assert_int_equal(slab_resident(&s), 4 * (size_t)CHUNK);
	for (size_t i = PER; i < 2 * PER - 1; i++)
		slab_free(&s, p[i], SZ);
	assert_int_equal(slab_resident(&s), 4 * (size_t)CHUNK);
	assert_ptr_equal(slab_alloc(&s, SZ), p[2 * PER - 2]);   /* last freed */
	slab_free(&s, p[2 * PER - 2], SZ);
	slab_free(&s, p[2 * PER - 1], SZ);       /* the second chunk's last */
	assert_int_equal(slab_resident(&s), 3 * (size_t)CHUNK);
	assert_int_equal(s.live, 48 + (PER) * SZ);
	slab_free(&s, q, 48);
	slab_fini(&s);
	free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sizes_out_of_range),
		cmocka_unit_test(test_objects_are_disjoint),
		cmocka_unit_test(test_free_list_reuse),
		cmocka_unit_test(test_full_span),
		cmocka_unit_test(test_chunk_places),
		cmocka_unit_test(test_empty_chunks_go_back),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
