/*
 * Unit tests of the one-pass copy and checksum (store/copyhash.c): for
 * every length class of XXH3 (short, mid-size, one stripe past, block
 * boundaries, pages of 4 KiB to 2 MiB and odd sizes) and for unaligned
 * source and destination, kv_copy_hash128 gives exactly kv_hash128 and a
 * byte-exact copy, and writes nothing past len. With the collision hook on
 * it follows kv_hash128 too.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store.h"

#define MAXLEN ((2u << 20) + 8192)
#define GUARD 64u

static uint8_t *src_buf, *dst_buf;

static int setup(void **state)
{
	uint64_t x = 0x9E3779B97F4A7C15ull;

	(void)state;
	src_buf = malloc(MAXLEN + GUARD);
	dst_buf = malloc(MAXLEN + 2 * GUARD);
	if (!src_buf || !dst_buf)
		return -1;
	for (size_t i = 0; i < MAXLEN + GUARD; i++) {
		x ^= x << 13; x ^= x >> 7; x ^= x << 17;
		src_buf[i] = (uint8_t)x;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	free(src_buf);
	free(dst_buf);
	return 0;
}

static void check(size_t len, size_t soff, size_t doff)
{
	uint8_t want[KV_HASH_LEN], got[KV_HASH_LEN];
	uint8_t *dst = dst_buf + GUARD + doff;

	memset(dst_buf, 0xA5, MAXLEN + 2 * GUARD);
	kv_hash128(src_buf + soff, len, want);
	kv_copy_hash128(dst, src_buf + soff, len, got);
	if (memcmp(want, got, KV_HASH_LEN) != 0)
		fail_msg("hash differs at len %zu (src +%zu, dst +%zu)", len, soff, doff);
	if (memcmp(dst, src_buf + soff, len) != 0)
		fail_msg("copy differs at len %zu (src +%zu, dst +%zu)", len, soff, doff);
	for (size_t i = 0; i < GUARD - doff; i++)
		assert_int_equal(dst[len + i], 0xA5);
	assert_int_equal(dst[-1], 0xA5);
}

static void every_length_class(void **state)
{
	static const size_t pages[] = {
		1023, 1024, 1025, 2047, 2048, 2049, 4096, 16384, 65536,
		65536 + 4095, 262144, 1u << 20, (1u << 20) + 1, 2u << 20,
		(2u << 20) + 8192,
	};

	(void)state;
	for (size_t len = 0; len <= 1100; len++)      /* short, mid, first blocks */
		check(len, 0, 0);
	for (size_t i = 0; i < sizeof(pages) / sizeof(pages[0]); i++)
		check(pages[i], 0, 0);
}

static void unaligned(void **state)
{
	(void)state;
	for (size_t s = 0; s < 64; s += 7)
		for (size_t d = 0; d < 64; d += 13) {
			check(4096 + s, s, d);
			check(65536 - d, s, d);
		}
}

static void follows_the_collision_hook(void **state)
{
	uint8_t a[KV_HASH_LEN], b[KV_HASH_LEN];

	(void)state;
	kv_hash_test_collide(true);
	kv_copy_hash128(dst_buf, src_buf, 65536, a);
	kv_copy_hash128(dst_buf, src_buf + 1, 65536, b);
	kv_hash_test_collide(false);
	assert_memory_equal(a, b, KV_HASH_LEN);   /* a function of the length */
	assert_memory_equal(dst_buf, src_buf + 1, 65536);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_length_class),
		cmocka_unit_test(unaligned),
		cmocka_unit_test(follows_the_collision_hook),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
