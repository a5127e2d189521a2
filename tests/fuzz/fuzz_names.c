/*
 * Fuzz target for the name and geometry text checks every path component
 * and user.kvfs.geometry value passes through:
 *   - kv_name_check_len / kv_name_check (index/kvname.h: the manifest and
 *     the index) and kvfs_check_name (fuse/ops.c: FUSE lookup, create, mkdir,
 *     rename): whatever they accept is 1..KV_NAME_MAX bytes without '/' or
 *     NUL and is not "." or ".."; whatever they refuse breaks one of those
 *     rules; both layers give the same answer for the same string;
 *   - kv_layer_name_parse: accepts exactly the non-empty all-digit strings
 *     whose value fits 32 bits, with the value strtoul gives;
 *   - kvfs_geometry_parse / kvfs_geometry_format (engine/geometry_text.c): what
 *     parse accepts passes kv_geometry_check and survives format -> parse
 *     unchanged; and every geometry kv_geometry_check accepts (built from
 *     the input's bytes) round-trips through format -> parse too.
 * A violated property aborts. Built as a libFuzzer target (clang) and, with
 * KVFS_FUZZ_STANDALONE, as a driver that runs the same checks on generated
 * inputs and replays the committed corpus.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "geometry_text.h"
#include "kvname.h"

int kvfs_check_name(const char *name);   /* fuse/ops.c (its header needs FUSE) */

static unsigned long names_ok, layers_ok, geos_ok, geos_set, structs_ok;

static void quiet(enum kv_log_level lvl, const char *line)
{
	(void)lvl;
	(void)line;
}

static bool is_dot_name(const char *s, size_t len)
{
	return (len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.');
}

/* The rules of kvname.h, stated independently of its code. */
static int expected_name_rc(const char *s, size_t len)
{
	if (len > KV_NAME_MAX)
		return -ENAMETOOLONG;
	if (len == 0 || memchr(s, '/', len) || memchr(s, '\0', len) || is_dot_name(s, len))
		return -EINVAL;
	return 0;
}

static void check_names(const uint8_t *data, size_t size, const char *cstr)
{
	size_t clen = strlen(cstr);
	int rc = kv_name_check_len((const char *)data, size);

	require(rc == expected_name_rc((const char *)data, size), "kv_name_check_len");
	names_ok += rc == 0;
	rc = kv_name_check(cstr);
	require(rc == expected_name_rc(cstr, clen), "kv_name_check");
	/* What FUSE lets through must be what the index takes, and back. */
	require(kvfs_check_name(cstr) == rc, "kvfs_check_name disagrees with kv_name_check");
}

static bool all_digits(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return false;
	return true;
}

static void check_layer(const char *s)
{
	uint32_t v = 0xdeadbeef;
	int rc = kv_layer_name_parse(s, &v);
	unsigned long long ref;

	if (!all_digits(s)) {
		require(rc == -EINVAL, "layer name with a non-digit accepted");
		return;
	}
	errno = 0;
	ref = strtoull(s, NULL, 10);
	if (errno == ERANGE || ref > UINT32_MAX) {
		require(rc == -EINVAL, "layer number over 32 bits accepted");
		return;
	}
	require(rc == 0, "a decimal layer number refused");
	require(v == ref, "layer value differs from strtoull");
	layers_ok++;
}

static bool geo_equal(const struct kv_geometry *a, const struct kv_geometry *b)
{
	return a->layers == b->layers && a->kv_heads == b->kv_heads &&
	       a->head_dim == b->head_dim && a->page_tokens == b->page_tokens &&
	       strcmp(a->dtype, b->dtype) == 0;
}

/* g is valid: format must produce text parse reads back to g exactly. */
static void check_roundtrip(const struct kv_geometry *g)
{
	char text[256], again[256];
	struct kv_geometry back;
	int n;

	n = kvfs_geometry_format(g, text, sizeof(text));
	require(n > 0 && (size_t)n < sizeof(text), "formatted geometry fits");
	require(kvfs_geometry_parse(text, (size_t)n, &back) == 0,
		"parse refuses what format wrote");
	require(geo_equal(g, &back), "parse(format(g)) != g");
	require(kvfs_geometry_format(&back, again, sizeof(again)) == n &&
		strcmp(text, again) == 0, "format is not stable");
}

/* The grammar of an accepted text: key=value fields, numbers in plain
 * decimal (no sign, no space, no base prefix: strtoul takes all of those). */
static void check_grammar(const uint8_t *data, size_t size)
{
	static const char *const numeric[] = { "layers", "kv_heads", "head_dim", "page_tokens" };
	char buf[256], *save = NULL, *tok;

	require(size < sizeof(buf), "accepted text is short");
	memcpy(buf, data, size);
	buf[size] = '\0';
	for (tok = strtok_r(buf, " ,\n\t", &save); tok; tok = strtok_r(NULL, " ,\n\t", &save)) {
		char *eq = strchr(tok, '=');

		require(eq != NULL, "accepted field without '='");
		*eq = '\0';
		for (size_t k = 0; k < 4; k++)
			if (!strcmp(tok, numeric[k]))
				require(all_digits(eq + 1), "accepted a number that is not decimal digits");
	}
}

static void check_geometry_text(const uint8_t *data, size_t size)
{
	struct kv_geometry g;

	memset(&g, 0xa5, sizeof(g));
	if (kvfs_geometry_parse((const char *)data, size, &g) < 0)
		return;
	require(memchr(g.dtype, '\0', sizeof(g.dtype)) != NULL, "dtype terminated");
	require(kv_geometry_check(&g) == 0, "parse accepted an invalid geometry");
	check_grammar(data, size);
	geos_ok++;
	geos_set += g.layers != 0;
	check_roundtrip(&g);
}

static const char *const dtypes[] = {
	"", "f16", "fp16", "bf16", "BF16", "f32", "fp32", "f64", "fp64", "f8",
	"fp8", "fp8_e4m3", "fp8_E5M2", "i8", "int8", "u8", "f16 ", "x", "fp8_e4m3fn",
};

/* A geometry struct straight from bytes: fields, then a dtype (a known name
 * or raw bytes); the parser must round-trip every one the check accepts. */
static void check_geometry_struct(const uint8_t *data, size_t size)
{
	struct kv_geometry g;
	size_t ndt = sizeof(dtypes) / sizeof(dtypes[0]);

	if (size < 17)
		return;
	memset(&g, 0, sizeof(g));
	memcpy(&g.layers, data, 4);
	memcpy(&g.kv_heads, data + 4, 4);
	memcpy(&g.head_dim, data + 8, 4);
	memcpy(&g.page_tokens, data + 12, 4);
	if (data[16] < 0x80) {
		strcpy(g.dtype, dtypes[data[16] % ndt]);
	} else {
		size_t n = size - 17 < KV_DTYPE_MAX ? size - 17 : KV_DTYPE_MAX;

		memcpy(g.dtype, data + 17, n);
	}
	/* Small values are the ones that pass the 1 GiB page limit. */
	if (data[16] & 0x40) {
		g.kv_heads %= 64;
		g.head_dim %= 512;
		g.page_tokens %= 256;
	}
	if (kv_geometry_check(&g) < 0)
		return;
	structs_ok++;
	check_roundtrip(&g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool init;
	char *cstr;

	if (!init) {
		kv_log_set_sink(quiet);
		init = true;
	}
	cstr = malloc(size + 1);
	if (!cstr)
		return 0;
	memcpy(cstr, data, size);
	cstr[size] = '\0';
	check_names(data, size, cstr);
	check_layer(cstr);
	check_geometry_text(data, size);
	check_geometry_struct(data, size);
	free(cstr);
	return 0;
}

#ifdef KVFS_FUZZ_STANDALONE
/* ---- generated inputs: near the edges the checks draw ---- */

static size_t gen_name(char *buf)
{
	static const char alphabet[] = "aZ09./-_\0\xff";
	static const size_t lens[] = { 0, 1, 2, 3, 254, 255, 256, 300 };
	size_t len = rnd() % 2 ? lens[rnd() % 8] : rnd() % 40;

	for (size_t i = 0; i < len; i++)
		buf[i] = rnd() % 4 ? 'a' + (char)(rnd() % 26) : alphabet[rnd() % 11];
	return len;
}

static size_t gen_layer(char *buf)
{
	static const char *const edges[] = {
		"4294967295", "4294967296", "04294967295", "18446744073709551616",
		"0", "00", "007", "+7", "-0", " 7", "7 ", "0x10", "", "99999999999",
	};
	size_t len;

	if (rnd() % 2) {
		strcpy(buf, edges[rnd() % 14]);
		return strlen(buf);
	}
	len = rnd() % 14;
	for (size_t i = 0; i < len; i++)
		buf[i] = rnd() % 16 ? '0' + (char)(rnd() % 10) : "+- x/"[rnd() % 5];
	return len;
}

static const char *num_text(char *tmp)
{
	static const char *const edges[] = {
		"0", "1", "4294967295", "4294967296", "-1", "+8", "08", "1e3", "",
		" 4", "0x10", "18446744073709551615", "18446744073709551616",
	};

	if (rnd() % 3)
		snprintf(tmp, 24, "%u", (unsigned)(1 + rnd() % (rnd() % 2 ? 64 : 5000)));
	else
		snprintf(tmp, 24, "%s", edges[rnd() % 13]);
	return tmp;
}

static size_t gen_geometry(char *buf, size_t cap)
{
	static const char *const keys[] = {
		"layers", "kv_heads", "head_dim", "page_tokens", "dtype", "bogus", "",
	};
	static const char seps[] = " ,\t\n";
	size_t len = 0, nf = rnd() % 8;
	char tmp[24];

	for (size_t i = 0; i < nf && len < cap - 64; i++) {
		size_t k = i < 5 && rnd() % 4 ? i : rnd() % 7;
		const char *v = k == 4 ? dtypes[rnd() % (sizeof(dtypes) / sizeof(dtypes[0]))]
				       : num_text(tmp);

		len += (size_t)snprintf(buf + len, cap - len, "%s%s%s%c", keys[k],
					rnd() % 16 ? "=" : "", v, seps[rnd() % 4]);
	}
	if (rnd() % 16 == 0 && len)
		buf[rnd() % len] = (char)rnd();
	return len;
}

int main(int argc, char **argv)
{
	static char buf[512];
	unsigned long iters = argc > 1 ? strtoul(argv[1], NULL, 10) : 100000;
	long replayed = 0;

	for (unsigned long i = 0; i < iters; i++) {
		size_t len;

		switch (i % 4) {
		case 0: len = gen_name(buf); break;
		case 1: len = gen_layer(buf); break;
		case 2: len = gen_geometry(buf, sizeof(buf)); break;
		default:
			len = 17 + rnd() % 16;
			for (size_t j = 0; j < len; j++)
				buf[j] = (char)rnd();
			break;
		}
		LLVMFuzzerTestOneInput((const uint8_t *)buf, len);
	}
	for (int a = 2; a < argc; a++) {
		long n = replay_dir(argv[a]);

		if (n < 0)
			return 1;
		replayed += n;
	}
	printf("fuzz_names: %lu inputs, %ld corpus files; accepted %lu names, %lu layer "
	       "numbers, %lu geometry texts (%lu set), %lu geometry structs; all "
	       "properties held\n", iters, replayed, names_ok, layers_ok, geos_ok,
	       geos_set, structs_ok);
	/* A generator that never gets past the checks proves nothing. */
	return names_ok > iters / 40 && layers_ok > iters / 40 && geos_set > iters / 400 &&
	       structs_ok > iters / 400 ? 0 : 1;
}
#endif
