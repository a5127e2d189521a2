/* JSON output shared by the commands that offer --json, and names made
 * safe for a terminal. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools.h"

/* s as a JSON string: quotes, backslashes and control bytes escaped (the
 * other bytes pass as they are: paths are bytes, and JSON readers take
 * UTF-8). */
void kvfs_json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(f, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", *s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

char *kvfs_text_escape(const char *s)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = strlen(s);
	char *out = malloc(4 * n + 1), *o = out;

	if (!out)
		return NULL;
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '\\') {
			*o++ = '\\';
			*o++ = '\\';
		} else if (c < 0x20 || c == 0x7f) {
			*o++ = '\\';
			*o++ = 'x';
			*o++ = hex[c >> 4];
			*o++ = hex[c & 15];
		} else {
			*o++ = (char)c;
		}
	}
	*o = '\0';
	return out;
}
