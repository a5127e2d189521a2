/*
 * Copy and checksum in one pass: kv_copy_hash128 copies a payload and
 * computes its XXH3-128 (the same value kv_hash128 gives) while each 64-byte
 * stripe is in registers. Where the store's bytes sit in memory (a stripe
 * on tmpfs), reading a page was the kernel's copy and then a second pass to
 * hash it: 1.9 GB/s per core here against 3.7 GB/s for the copy alone. In
 * one pass the hashing hides behind the memory traffic of the copy: 4.9
 * GB/s (docs/benchmarks/engines.md).
 *
 * The loop is XXH3's long-input loop (xxhash.h, XXH3_hashLong_128b) with a
 * store added; its constants and final merge come from xxhash.h itself
 * (XXH_INLINE_ALL), and the unit test `copyhash` checks the result against
 * kv_hash128 for every length class. Without AVX2, or with the test hook
 * that makes hashes collide, it is memcpy then kv_hash128.
 */
#include "config.h"

#include <stdatomic.h>
#include <string.h>

#include "store.h"

#if defined(HAVE_COPY_HASH_AVX2)
#define XXH_INLINE_ALL
#include <xxhash.h>
#include <immintrin.h>

#define STRIPE 64u
#define SECRET_SIZE sizeof(XXH3_kSecret)
#define STRIPES_PER_BLOCK ((SECRET_SIZE - STRIPE) / 8u)
#define BLOCK (STRIPE * STRIPES_PER_BLOCK)
#define LASTACC_START 7u    /* XXH_SECRET_LASTACC_START */
#define MERGEACCS_START 11u /* XXH_SECRET_MERGEACCS_START */

/* One stripe into the accumulators; stored to dst when dst is not NULL. */
__attribute__((target("avx2"), always_inline)) static inline void
stripe(__m256i acc[2], uint8_t *dst, const uint8_t *src, const uint8_t *secret)
{
	for (int i = 0; i < 2; i++) {
		__m256i d = _mm256_loadu_si256((const __m256i *)src + i);
		__m256i dk = _mm256_xor_si256(d, _mm256_loadu_si256((const __m256i *)secret + i));
		__m256i lo = _mm256_shuffle_epi32(dk, _MM_SHUFFLE(0, 3, 0, 1));
		__m256i swap = _mm256_shuffle_epi32(d, _MM_SHUFFLE(1, 0, 3, 2));

		if (dst)
			_mm256_storeu_si256((__m256i *)dst + i, d);
		acc[i] = _mm256_add_epi64(_mm256_mul_epu32(dk, lo),
					  _mm256_add_epi64(acc[i], swap));
	}
}

__attribute__((target("avx2"), always_inline)) static inline void
scramble(__m256i acc[2], const uint8_t *secret)
{
	const __m256i prime = _mm256_set1_epi32((int)XXH_PRIME32_1);

	for (int i = 0; i < 2; i++) {
		__m256i a = _mm256_xor_si256(acc[i], _mm256_srli_epi64(acc[i], 47));
		__m256i dk = _mm256_xor_si256(a, _mm256_loadu_si256((const __m256i *)secret + i));
		__m256i hi = _mm256_shuffle_epi32(dk, _MM_SHUFFLE(0, 3, 0, 1));

		acc[i] = _mm256_add_epi64(_mm256_mul_epu32(dk, prime),
					  _mm256_slli_epi64(_mm256_mul_epu32(hi, prime), 32));
	}
}

/* len > XXH3_MIDSIZE_MAX (240): XXH3's long-input path. */
__attribute__((target("avx2"))) static XXH128_hash_t
copy_hash_long(uint8_t *dst, const uint8_t *src, size_t len)
{
	const uint8_t *secret = XXH3_kSecret;
	XXH_ALIGN(32) uint64_t a64[XXH_ACC_NB] = XXH3_INIT_ACC;
	size_t nb = (len - 1) / BLOCK, tail, done;
	XXH128_hash_t h;
	__m256i acc[2];

	memcpy(acc, a64, sizeof(acc));
	for (size_t n = 0; n < nb; n++) {
		for (size_t s = 0; s < STRIPES_PER_BLOCK; s++)
			stripe(acc, dst + s * STRIPE, src + s * STRIPE, secret + s * 8);
		scramble(acc, secret + SECRET_SIZE - STRIPE);
		dst += BLOCK;
		src += BLOCK;
		len -= BLOCK;
	}
	tail = (len - 1) / STRIPE;
	for (size_t s = 0; s < tail; s++)
		stripe(acc, dst + s * STRIPE, src + s * STRIPE, secret + s * 8);
	done = tail * STRIPE;
	memcpy(dst + done, src + done, len - done);
	/* The last 64 bytes again, overlapping: read from the copy, which is hot. */
	stripe(acc, NULL, dst + len - STRIPE, secret + SECRET_SIZE - STRIPE - LASTACC_START);
	memcpy(a64, acc, sizeof(a64));
	len += nb * BLOCK;
	h.low64 = XXH3_mergeAccs(a64, secret + MERGEACCS_START,
				 (uint64_t)len * XXH_PRIME64_1);
	h.high64 = XXH3_mergeAccs(a64, secret + SECRET_SIZE - sizeof(a64) - MERGEACCS_START,
				  ~((uint64_t)len * XXH_PRIME64_2));
	return h;
}

static bool fused_ok(void)
{
	static _Atomic int have = -1;
	int h = atomic_load_explicit(&have, memory_order_relaxed);

	if (h < 0) {
		h = __builtin_cpu_supports("avx2") ? 1 : 0;
		atomic_store(&have, h);
	}
	return h;
}
#endif

void kv_copy_hash128(void *dst, const void *src, size_t len, uint8_t out[KV_HASH_LEN])
{
#if defined(HAVE_COPY_HASH_AVX2)
	if (len > XXH3_MIDSIZE_MAX && fused_ok() && !kv_hash_test_colliding()) {
		XXH128_canonical_t c;

		XXH128_canonicalFromHash(&c, copy_hash_long(dst, src, len));
		memcpy(out, c.digest, KV_HASH_LEN);
		return;
	}
#endif
	memcpy(dst, src, len);
	kv_hash128(dst, len, out);
}
