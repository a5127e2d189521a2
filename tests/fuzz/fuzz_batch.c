/*
 * Fuzz target for the fast-path batch validator (fast/batch_check.c): the
 * input is the kind of call (lookup, read, write), a region length, a
 * struct kvfs_batch_arg and descriptors, all attacker-chosen. Whatever the
 * bytes, the validator must not crash, and everything it accepts must be
 * safe to act on: ranges inside the region (checked here in 128-bit
 * arithmetic); for reads, accepted destinations disjoint from each other,
 * from the descriptor array and from the names still to be read; for
 * writes, no handle, a non-empty source outside the descriptor array, only
 * known flags, and after the duplicate check no two accepted descriptors
 * naming the same page while every descriptor it failed really had a twin.
 * A violated property aborts, which libFuzzer reports.
 *
 * Built two ways: with clang -fsanitize=fuzzer as a libFuzzer target, and
 * with KVFS_FUZZ_STANDALONE as a program that runs the same checks on
 * pseudo-random and edge-case inputs (so the suite exercises it without
 * clang).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch_check.h"

typedef unsigned __int128 u128;

#define MAX_DESCS 64

static unsigned long accepted;   /* descriptors that passed: not vacuous */
static unsigned long writes_accepted, dups_failed;

static void require(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz_batch: property violated: %s\n", what);
		abort();
	}
}

static int inside(uint64_t off, uint64_t len, uint64_t region)
{
	return (u128)off + len <= region;
}

static int overlap(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
	return (u128)a < (u128)b + blen && (u128)b < (u128)a + alen;
}

/* A data region (KVFS_BATCH_DATA_REGION) of its own, shorter than the
 * descriptors' region, holds the sources and destinations. */
static int own_data(const struct kvfs_batch_arg *a)
{
	return !!(a->flags & KVFS_BATCH_DATA_REGION);
}

static uint64_t data_len_of(const struct kvfs_batch_arg *a, uint64_t region)
{
	return own_data(a) ? region / 2 : region;
}

static void check_write(const struct kvfs_batch_arg *a,
			const struct kvfs_page_desc *d, uint64_t region)
{
	uint64_t arr = (uint64_t)a->count * sizeof(*d);

	require(d->handle == 0, "write with a handle accepted");
	require(d->dst_len > 0, "empty source accepted");
	require(inside(d->dst_off, d->dst_len, data_len_of(a, region)), "source inside region");
	require(own_data(a) || !overlap(d->dst_off, d->dst_len, a->desc_off, arr),
		"source over the descriptors");
}

static void check_accepted(const struct kvfs_batch_arg *a,
			   const struct kvfs_page_desc *d, uint64_t region,
			   enum kvfs_batch_kind kind, const int32_t *st)
{
	uint64_t arr = (uint64_t)a->count * sizeof(*d);
	int is_read = kind == KVFS_BATCH_READ;

	for (uint32_t i = 0; i < a->count; i++) {
		int by_name = !is_read || d[i].handle == 0;

		if (st[i])
			continue;
		accepted++;
		require(d[i].reserved == 0, "reserved accepted");
		if (by_name) {
			require(d[i].name_len >= 1 && d[i].name_len <= KVFS_NAME_MAX, "name length");
			require(inside(d[i].name_off, d[i].name_len, region), "name inside region");
		}
		if (kind == KVFS_BATCH_WRITE) {
			check_write(a, &d[i], region);
			writes_accepted++;
		}
		if (!is_read)
			continue;
		require(d[i].dst_len > 0, "empty destination accepted");
		require(inside(d[i].dst_off, d[i].dst_len, data_len_of(a, region)),
			"destination inside region");
		require(own_data(a) || !overlap(d[i].dst_off, d[i].dst_len, a->desc_off, arr),
			"destination over the descriptors");
		for (uint32_t j = 0; j < a->count; j++) {
			if (j == i || st[j])
				continue;
			require(!overlap(d[i].dst_off, d[i].dst_len, d[j].dst_off, d[j].dst_len),
				"two accepted destinations overlap");
			if (d[j].handle == 0 && !own_data(a))
				require(!overlap(d[i].dst_off, d[i].dst_len, d[j].name_off, d[j].name_len),
					"destination over a name");
		}
	}
}

/*
 * Names for the duplicate check: descriptor i's name is name_len bytes of a
 * pool at name_off % 257. The pool is mostly one letter, so descriptors of
 * one layer and name length often collide, as the check must handle.
 */
static const char *const *fake_names(const struct kvfs_page_desc *d, uint32_t n,
				     uint8_t salt)
{
	static char pool[257 + KVFS_NAME_MAX];
	static const char *names[MAX_DESCS];

	memset(pool, 'a', sizeof(pool));
	for (size_t j = salt % 7; j < sizeof(pool); j += 7 + salt % 61)
		pool[j] = 'b';
	for (uint32_t i = 0; i < n; i++)
		names[i] = pool + d[i].name_off % 257;
	return names;
}

static int same_page(const struct kvfs_page_desc *a, const char *na,
		     const struct kvfs_page_desc *b, const char *nb)
{
	return a->layer == b->layer && a->name_len == b->name_len &&
	       memcmp(na, nb, a->name_len) == 0;
}

static void check_dups(const struct kvfs_batch_arg *a,
		       const struct kvfs_page_desc *d, int32_t *st, uint8_t salt)
{
	const char *const *names = fake_names(d, a->count, salt);
	int32_t before[MAX_DESCS];
	long bad;

	memcpy(before, st, a->count * sizeof(*st));
	bad = kvfs_batch_check_dups(a->count, d, names, st);
	require(bad >= 0 && bad <= (long)a->count, "dup count");
	for (uint32_t i = 0; i < a->count; i++) {
		int twin = 0;

		if (before[i]) {
			require(st[i] == before[i], "dup check changed a failed status");
			continue;
		}
		for (uint32_t j = 0; j < a->count; j++)
			if (j != i && before[j] == 0 && same_page(&d[i], names[i], &d[j], names[j]))
				twin = 1;
		require(twin ? st[i] == -EINVAL : st[i] == 0,
			twin ? "a page named twice was accepted" : "a unique page was failed");
		dups_failed += twin;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvfs_page_desc d[MAX_DESCS];
	int32_t st[MAX_DESCS];
	struct kvfs_batch_arg a;
	uint64_t region;
	size_t n;
	enum kvfs_batch_kind kind;
	uint8_t salt;
	long bad;

	if (size < 9 + sizeof(a))
		return 0;
	kind = (enum kvfs_batch_kind)(data[0] % 3);
	salt = data[0] / 3;
	memcpy(&region, data + 1, 8);
	memcpy(&a, data + 9, sizeof(a));
	data += 9 + sizeof(a);
	size -= 9 + sizeof(a);
	n = size / sizeof(*d);
	if (n > MAX_DESCS)
		n = MAX_DESCS;
	memcpy(d, data, n * sizeof(*d));

	if (kvfs_batch_check_arg(&a, region, kind) != 0)
		return 0;
	require(a.abi == KVFS_ABI_VERSION, "abi");
	require(kind == KVFS_BATCH_WRITE ?
		!(a.flags & ~(KVFS_WRITE_DURABLE | KVFS_WRITE_REPLACE | KVFS_BATCH_DATA_REGION)) :
		kind == KVFS_BATCH_READ ? !(a.flags & ~KVFS_BATCH_DATA_REGION) : a.flags == 0,
		"unknown flags");
	require(!own_data(&a) == !a.data_region_id, "data region id without the flag");
	require(kind == KVFS_BATCH_LOOKUP || a.group == 0, "group on a read or write");
	require(a.count >= 1 && a.count <= KVFS_BATCH_MAX, "count");
	require(inside(a.desc_off, (uint64_t)a.count * sizeof(*d), region), "descriptor array");
	if (a.count > n)
		return 0;     /* the daemon copies exactly count descriptors */
	bad = kvfs_batch_check_descs(&a, d, region, data_len_of(&a, region), kind, st);
	require(bad >= 0 && bad <= (long)a.count, "failed count");
	if (kind == KVFS_BATCH_WRITE)
		check_dups(&a, d, st, salt);
	check_accepted(&a, d, region, kind, st);
	return 0;
}

#ifdef KVFS_FUZZ_STANDALONE
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* Small numbers near boundaries find more than uniform 64-bit noise. */
static uint64_t edgy(uint64_t region)
{
	switch (rnd() % 6) {
	case 0: return rnd();
	case 1: return rnd() % 64;
	case 2: return region - rnd() % 64;
	case 3: return UINT64_MAX - rnd() % 4096;
	default: return rnd() % (region + 1);
	}
}

static size_t make_input(uint8_t *buf)
{
	struct kvfs_batch_arg a = { .abi = KVFS_ABI_VERSION };
	struct kvfs_page_desc d[MAX_DESCS];
	uint64_t region = rnd() % 3 ? 1 + rnd() % (1u << 16) : rnd();
	unsigned n = 1 + rnd() % MAX_DESCS;

	memset(d, 0, sizeof(d));
	a.count = rnd() % 16 ? n : (uint32_t)rnd();
	a.desc_off = rnd() % 4 ? (rnd() % 512) * 8 : edgy(region);
	a.group = rnd() % 8 ? 0 : (uint32_t)(rnd() % 4);
	a.flags = rnd() % 4 ? 0 : (uint32_t)(rnd() % 8);   /* 4: unknown */
	if (rnd() % 32 == 0)
		a.abi = (uint32_t)rnd();
	for (unsigned i = 0; i < n; i++) {
		d[i].handle = rnd() % 2 ? 0 : rnd();
		d[i].name_off = edgy(region);
		d[i].layer = (uint32_t)(rnd() % 3);
		switch (rnd() % 8) {
		case 0: d[i].name_len = (uint32_t)rnd(); break;
		case 1: case 2: d[i].name_len = 1 + (uint32_t)(rnd() % 3); break;  /* twins */
		default: d[i].name_len = (uint32_t)(rnd() % 300); break;
		}
		d[i].dst_off = edgy(region);
		d[i].dst_len = rnd() % 4 ? rnd() % 8192 : edgy(region);
		d[i].reserved = rnd() % 32 == 0;
	}
	buf[0] = (uint8_t)rnd();
	memcpy(buf + 1, &region, 8);
	memcpy(buf + 9, &a, sizeof(a));
	memcpy(buf + 9 + sizeof(a), d, n * sizeof(*d));
	return 9 + sizeof(a) + n * sizeof(*d);
}

int main(int argc, char **argv)
{
	static uint8_t buf[9 + sizeof(struct kvfs_batch_arg) +
			   MAX_DESCS * sizeof(struct kvfs_page_desc)];
	unsigned long iters = argc > 1 ? strtoul(argv[1], NULL, 10) : 200000;

	for (unsigned long i = 0; i < iters; i++) {
		size_t len = make_input(buf);

		LLVMFuzzerTestOneInput(buf, len);
	}
	printf("fuzz_batch: %lu random batches, %lu descriptors accepted (%lu writes), "
	       "%lu named twice, all properties held\n", iters, accepted,
	       writes_accepted, dups_failed);
	/* A generator that never gets past the validator proves nothing. */
	return accepted > iters / 10 && writes_accepted > iters / 100 &&
	       dups_failed > iters / 1000 ? 0 : 1;
}
#endif
