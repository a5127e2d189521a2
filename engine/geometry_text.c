/*
 * Model geometry as text (user.kvfs.geometry): see geometry_text.h.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "geometry_text.h"

int kvfs_geometry_format(const struct kv_geometry *g, char *out, size_t len)
{
	return snprintf(out, len, "layers=%u kv_heads=%u head_dim=%u dtype=%s page_tokens=%u",
			g->layers, g->kv_heads, g->head_dim, g->dtype, g->page_tokens);
}

static int parse_u32(const char *v, uint32_t *out)
{
	char *end;
	unsigned long x;

	/* Plain decimal only: strtoul alone would take a sign, leading space
	 * and wrap a negative ("-18446744073709551615" is 1). */
	if (*v < '0' || *v > '9')
		return -EINVAL;
	errno = 0;
	x = strtoul(v, &end, 10);
	if (errno || *end || end == v || x > UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)x;
	return 0;
}

static int geometry_field(struct kv_geometry *g, const char *key, const char *v)
{
	if (!strcmp(key, "layers"))
		return parse_u32(v, &g->layers);
	if (!strcmp(key, "kv_heads"))
		return parse_u32(v, &g->kv_heads);
	if (!strcmp(key, "head_dim"))
		return parse_u32(v, &g->head_dim);
	if (!strcmp(key, "page_tokens"))
		return parse_u32(v, &g->page_tokens);
	if (!strcmp(key, "dtype")) {
		if (strlen(v) > KV_DTYPE_MAX)
			return -EINVAL;
		strcpy(g->dtype, v);
		return 0;
	}
	return -EINVAL;
}

int kvfs_geometry_parse(const char *s, size_t len, struct kv_geometry *g)
{
	char buf[256], *save = NULL, *tok;
	int rc = 0;

	if (len >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, s, len);
	buf[len] = '\0';
	memset(g, 0, sizeof(*g));
	for (tok = strtok_r(buf, " ,\n\t", &save); tok && rc == 0;
	     tok = strtok_r(NULL, " ,\n\t", &save)) {
		char *eq = strchr(tok, '=');

		if (!eq) {
			rc = -EINVAL;
			break;
		}
		*eq = '\0';
		rc = geometry_field(g, tok, eq + 1);
		if (rc < 0)
			kv_log(KV_LOG_INFO, "geometry: bad field \"%s\"", tok);
	}
	if (rc == 0)
		rc = kv_geometry_check(g);
	return rc;
}
