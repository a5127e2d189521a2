/*
 * The manifest-loader fuzz target (fuzz_manifest.c), as its standalone
 * driver (fuzz_manifest_gen.c) calls it: run one kvfs.db image and learn
 * what each step returned, so the driver can also check that corruptions
 * it made on purpose were refused, and valid edits accepted.
 */
#ifndef KVFS_FUZZ_MANIFEST_H
#define KVFS_FUZZ_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

/* Return codes of each step; 1 where the step did not run. */
struct fuzz_manifest_result {
	int open;     /* kv_manifest_open */
	int meta;     /* kv_manifest_meta */
	int load;     /* kv_index_load into a fresh index */
	int walk;     /* kv_manifest_load with the checking visitor */
	int check;    /* kv_manifest_check */
};

struct fuzz_manifest_stats {
	unsigned long runs, opened, loaded, checked_clean, pages_loaded;
};
extern struct fuzz_manifest_stats fuzz_manifest_stats;

/* The target's private store directory (made on first use). */
const char *fuzz_manifest_dir(void);
/* Remove its kvfs.db and SQLite's side files. */
void fuzz_manifest_clear(void);
/* Write data as the store's kvfs.db, open, load and check it. */
void fuzz_manifest_run(const uint8_t *data, size_t size, struct fuzz_manifest_result *res);

#endif
