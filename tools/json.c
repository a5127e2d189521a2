/* JSON output shared by the commands that offer --json. */
#include <stdio.h>

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
