/*
 * Model geometry helpers for the manifest and the daemon: element size of a
 * dtype name, the payload size of one page (K and V of one layer for
 * page_tokens tokens), and validation of a geometry before it is stored, so
 * that a page-size rule derived from it can never overflow or be zero.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <strings.h>

#include "manifest.h"

#define KV_PAGE_BYTES_MAX (1ull << 30)

static const struct {
	const char *name;
	unsigned size;
} dtypes[] = {
	{ "f16", 2 }, { "fp16", 2 }, { "bf16", 2 },
	{ "f32", 4 }, { "fp32", 4 },
	{ "f64", 8 }, { "fp64", 8 },
	{ "f8", 1 }, { "fp8", 1 }, { "fp8_e4m3", 1 }, { "fp8_e5m2", 1 },
	{ "i8", 1 }, { "int8", 1 }, { "u8", 1 },
};

unsigned kv_dtype_size(const char *dtype)
{
	size_t i;

	if (!dtype)
		return 0;
	for (i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++)
		if (strcasecmp(dtype, dtypes[i].name) == 0)
			return dtypes[i].size;
	return 0;
}

/* 2 * page_tokens * kv_heads * head_dim * size; false on overflow. */
static bool page_bytes(const struct kv_geometry *g, unsigned size, uint64_t *out)
{
	uint64_t b = 2;

	if (__builtin_mul_overflow(b, (uint64_t)g->page_tokens, &b) ||
	    __builtin_mul_overflow(b, (uint64_t)g->kv_heads, &b) ||
	    __builtin_mul_overflow(b, (uint64_t)g->head_dim, &b) ||
	    __builtin_mul_overflow(b, (uint64_t)size, &b))
		return false;
	*out = b;
	return true;
}

uint64_t kv_geometry_page_bytes(const struct kv_geometry *geo)
{
	unsigned size;
	uint64_t b;

	if (!memchr(geo->dtype, '\0', sizeof(geo->dtype)))
		return 0;
	size = kv_dtype_size(geo->dtype);
	if (!size || !geo->page_tokens || !geo->kv_heads || !geo->head_dim)
		return 0;
	if (!page_bytes(geo, size, &b))
		return 0;
	return b;
}

static bool geometry_unset(const struct kv_geometry *g)
{
	return !g->layers && !g->kv_heads && !g->head_dim && !g->page_tokens &&
	       !g->dtype[0];
}

static int bad_field(const char *field, uint32_t v)
{
	kv_log(KV_LOG_ERR, "geometry: %s must be > 0 (got %" PRIu32
	       "); set all of layers, kv_heads, head_dim, page_tokens, dtype, or none",
	       field, v);
	return -EINVAL;
}

int kv_geometry_check(const struct kv_geometry *geo)
{
	unsigned size;
	uint64_t b;

	if (!memchr(geo->dtype, '\0', sizeof(geo->dtype))) {
		kv_log(KV_LOG_ERR, "geometry: dtype longer than %u bytes", KV_DTYPE_MAX);
		return -EINVAL;
	}
	if (geometry_unset(geo))
		return 0;
	if (!geo->layers)
		return bad_field("layers", geo->layers);
	if (!geo->kv_heads)
		return bad_field("kv_heads", geo->kv_heads);
	if (!geo->head_dim)
		return bad_field("head_dim", geo->head_dim);
	if (!geo->page_tokens)
		return bad_field("page_tokens", geo->page_tokens);
	size = kv_dtype_size(geo->dtype);
	if (!size) {
		kv_log(KV_LOG_ERR, "geometry: unknown dtype '%s' (known: f16, bf16, f32, "
		       "f64, f8, fp8_e4m3, fp8_e5m2, i8, u8)", geo->dtype);
		return -EINVAL;
	}
	if (!page_bytes(geo, size, &b) || b > KV_PAGE_BYTES_MAX) {
		kv_log(KV_LOG_ERR, "geometry: page_tokens %" PRIu32 " x kv_heads %" PRIu32
		       " x head_dim %" PRIu32 " x %s x 2 (K and V) is over the 1 GiB page limit",
		       geo->page_tokens, geo->kv_heads, geo->head_dim, geo->dtype);
		return -EINVAL;
	}
	return 0;
}
