/*
 * How a node keeps its name. Engines name pages after block hashes written
 * in hex (SGLang: 64 digits; vLLM: 64 digits and "_g0"; the bench: 16), so
 * a name's leading run of lowercase hex digits is kept two digits to a
 * byte: a 64-digit name takes 34 bytes instead of 65, 32 bytes less per
 * page. Any other name is kept as it is. The node's NODE_NAME_HEX flag says
 * which:
 *
 *	plain:  name bytes, NUL
 *	packed: k, k bytes holding the first 2k digits, the rest of the name, NUL
 *
 * Only lowercase digits are packed, so a name decodes to exactly the bytes
 * it was given, and two names are equal exactly when their stored forms
 * are. Everything that reads a node's name goes through here.
 */
#include <string.h>

#include "index_i.h"

/* Packing fewer than 4 digits saves nothing (the count byte costs one). */
#define PACK_MIN_BYTES 2u

static int hex_val(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* Bytes of name[0..len) the packed form takes two digits to a byte: its
 * leading hex run rounded down to even, at most 2 * 127 digits (the count
 * is one byte, kept below 128 so that it never reads as negative). 0 when
 * that saves nothing. */
static size_t pack_digits(const char *name, size_t len)
{
	size_t h = 0;

	while (h < len && h < 2 * 127 && hex_val(name[h]) >= 0)
		h++;
	h &= ~(size_t)1;
	return h / 2 >= PACK_MIN_BYTES ? h : 0;
}

size_t idx_name_stored(const char *name, size_t len)
{
	size_t h = pack_digits(name, len);

	return h ? 1 + h / 2 + (len - h) + 1 : len + 1;
}

void idx_node_name_set(struct node *n, const char *name, size_t len)
{
	size_t h = pack_digits(name, len), i;
	unsigned char *p = (unsigned char *)n->name;

	if (!h) {
		__atomic_fetch_and(&n->flags, (uint8_t)~NODE_NAME_HEX, __ATOMIC_RELAXED);
		memcpy(n->name, name, len);
		n->name[len] = '\0';
		return;
	}
	__atomic_fetch_or(&n->flags, NODE_NAME_HEX, __ATOMIC_RELAXED);
	*p++ = (unsigned char)(h / 2);
	for (i = 0; i < h; i += 2)
		*p++ = (unsigned char)(hex_val(name[i]) << 4 | hex_val(name[i + 1]));
	memcpy(p, name + h, len - h);
	p[len - h] = '\0';
}

static bool is_packed(const struct node *n)
{
	return __atomic_load_n(&n->flags, __ATOMIC_RELAXED) & NODE_NAME_HEX;
}

size_t idx_node_name_stored(const struct node *n)
{
	size_t k;

	if (!is_packed(n))
		return strlen(n->name) + 1;
	k = (unsigned char)n->name[0];
	return 1 + k + strlen(n->name + 1 + k) + 1;
}

size_t idx_node_name_len(const struct node *n)
{
	size_t k;

	if (!is_packed(n))
		return strlen(n->name);
	k = (unsigned char)n->name[0];
	return 2 * k + strlen(n->name + 1 + k);
}

size_t idx_node_name(const struct node *n, char *out)
{
	static const char digit[] = "0123456789abcdef";
	const unsigned char *p = (const unsigned char *)n->name;
	size_t k, i, rest;

	if (!is_packed(n)) {
		rest = strlen(n->name);
		memcpy(out, n->name, rest + 1);
		return rest;
	}
	k = *p++;
	for (i = 0; i < k; i++, p++) {
		out[2 * i] = digit[*p >> 4];
		out[2 * i + 1] = digit[*p & 0xf];
	}
	rest = strlen((const char *)p);
	memcpy(out + 2 * k, p, rest + 1);
	return 2 * k + rest;
}

bool idx_node_name_eq(const struct node *n, const char *name, size_t len)
{
	const unsigned char *p = (const unsigned char *)n->name;
	size_t k, i;

	if (!is_packed(n))
		return strncmp(n->name, name, len) == 0 && n->name[len] == '\0';
	k = *p++;
	if (len < 2 * k)
		return false;
	for (i = 0; i < k; i++) {
		int hi = hex_val(name[2 * i]), lo = hex_val(name[2 * i + 1]);

		if (hi < 0 || lo < 0 || (unsigned)(hi << 4 | lo) != p[i])
			return false;
	}
	p += k;
	return strncmp((const char *)p, name + 2 * k, len - 2 * k) == 0 &&
	       p[len - 2 * k] == '\0';
}
