/*
 * A manifest of its own for a unit test (test_index_load.c, test_journal.c):
 * made with kvfs mkfs's defaults in a fresh directory under /tmp, removed
 * with everything in it at the end. Include after cmocka.h.
 */
#ifndef KVFS_TEST_MANIFEST_FIXTURE_H
#define KVFS_TEST_MANIFEST_FIXTURE_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manifest.h"

static int mfx_rm_entry(const char *p, const struct stat *sb, int type, struct FTW *f)
{
	(void)sb;
	(void)type;
	(void)f;
	return remove(p);
}

/* Make dir (a mkdtemp template, changed in place) holding a new manifest;
 * db (may be NULL) gets its path. */
static __attribute__((unused)) void mfx_create(char *dir, char *db, size_t dblen)
{
	struct kv_store_meta *meta = calloc(1, sizeof(*meta));

	assert_non_null(meta);
	assert_non_null(mkdtemp(dir));
	if (db)
		snprintf(db, dblen, "%s/%s", dir, KV_MANIFEST_FILE);
	strcpy(meta->uuid, "0123abcd-89ab-4def-8123-456789abcdef");
	meta->segment_size = 1ull << 30;
	meta->nstripes = 1;
	strcpy(meta->stripes[0], "/srv/ssd0");
	assert_int_equal(kv_manifest_create(dir, meta), 0);
	free(meta);
}

static __attribute__((unused)) void mfx_remove(const char *dir)
{
	nftw(dir, mfx_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
