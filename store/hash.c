/*
 * Payload checksums: XXH3-128 of an extent's payload bytes, kept in its
 * big-endian canonical form (the bytes xxhsum prints) so the value stored in
 * the manifest does not depend on host byte order. Uses the runtime-dispatched
 * variant (AVX2/AVX-512) when libxxhash provides it: at SSD speed the plain
 * SSE2 build would cost noticeably more CPU per read.
 */
#include "config.h"

#include <stdatomic.h>

#include "store.h"

#ifdef HAVE_XXH_DISPATCH
#include <xxh_x86dispatch.h>
#define hash128 XXH3_128bits_dispatch
#else
#include <xxhash.h>
#define hash128 XXH3_128bits
#endif

static atomic_bool collide;

void kv_hash_test_collide(bool on)
{
	atomic_store(&collide, on);
}

bool kv_hash_test_colliding(void)
{
	return atomic_load_explicit(&collide, memory_order_relaxed);
}

void kv_hash128(const void *buf, size_t len, uint8_t out[KV_HASH_LEN])
{
	XXH128_canonical_t c;
	uint64_t n = len;

	if (atomic_load_explicit(&collide, memory_order_relaxed))
		XXH128_canonicalFromHash(&c, hash128(&n, sizeof(n)));
	else
		XXH128_canonicalFromHash(&c, hash128(buf, len));
	_Static_assert(sizeof(c.digest) == KV_HASH_LEN, "XXH3-128 is 16 bytes");
	for (unsigned i = 0; i < KV_HASH_LEN; i++)
		out[i] = c.digest[i];
}

void kv_hash_hex(const uint8_t h[KV_HASH_LEN], char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (unsigned i = 0; i < KV_HASH_LEN; i++) {
		out[2 * i] = digits[h[i] >> 4];
		out[2 * i + 1] = digits[h[i] & 15];
	}
	out[2 * KV_HASH_LEN] = '\0';
}
