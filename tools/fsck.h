/*
 * Private to `kvfs fsck` (tools/fsck*.c): the run's state and the rows it
 * holds in memory. fsck.c opens and locks the store, drives the checks and
 * prints the summary; fsck_check.c reads the rows and checks the stripes,
 * the extents and the references; fsck_fix.c finds orphaned space, verifies
 * the data (--verify-data) and repairs (--repair). See fsck.c for what the
 * checker does.
 */
#ifndef KVFS_FSCK_H
#define KVFS_FSCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine.h"
#include "manifest.h"
#include "progress.h"
#include "store.h"

struct seg {
	uint32_t stripe, num;
	uint64_t size;
	int fd;              /* read-only, opened on first use */
};

struct ext {
	struct kv_check_extent r;
	int32_t seg;         /* index into segs, -1 if its file is missing or
	                      * its values are unusable */
	uint32_t pages;      /* page rows naming it */
	uint32_t kept;       /* of those, rows repair keeps */
	bool bad;            /* bytes untrustworthy: repair deletes its pages */
	bool deleted;        /* repair deleted its row */
	char *why;           /* why bad, for the lost-page lines */
};

struct page {
	uint64_t ino, extent_id;
	int64_t size;
	char *path;          /* "model/layer/name", read when first named */
	struct ext *e;       /* NULL: dangling */
	bool ident_ok;       /* its row's identity check matches */
	bool lost;           /* repair deletes it */
	const char *why;
};

struct fsck {
	const char *store;
	char *shown;                 /* store, escaped for output lines */
	bool repair, verify, json, rebuild;
	bool renumber;               /* inodes held twice: --repair renumbers */
	enum progress_mode pm;       /* --progress, --quiet, or on a terminal */
	struct progress *pr;         /* the running phase's status line */
	FILE *out;                   /* problem lines */
	struct kv_manifest *m;
	struct kv_store_meta *meta;
	bool *stripe_ok;             /* per stripe: directory and marker fine */
	struct ext *ext;             /* by id */
	size_t next, ext_cap;
	struct page *pg;             /* by ino */
	size_t npg, pg_cap;
	struct layers {              /* layers' inodes, ascending (read_rows) */
		uint64_t *ino;
		size_t n, cap;
	} layers;
	bool rows_ok;                /* read_rows' one pass proved every row's values */
	struct kv_check_sums *sums;  /* index sums: table side from read_rows' pass */
	struct seg *seg;             /* by (stripe, num) */
	size_t nseg, seg_cap;
	struct ext **byloc;          /* extents with a segment, by (seg, offset) */
	size_t nloc;
	unsigned problems, fixable, fixed;
	unsigned pre_fixed;          /* fixed before the checks: rebuild, roll-forward */
	uint64_t lost_pages, orphan_bytes, punched_bytes, verified, verified_bytes;
	struct kvfs_store_lock lock;
};

/* fsck.c */
void phase_start(struct fsck *f, const char *label, uint64_t total, const char *unit);
void phase_end(struct fsck *f);
__attribute__((format(printf, 3, 4)))
void problem(struct fsck *f, bool fixable, const char *fmt, ...);
/* A line on f->out that is not a problem (what --repair did). Both escape
 * control characters: names are clients' bytes. */
__attribute__((format(printf, 2, 3)))
void fsck_say(struct fsck *f, const char *fmt, ...);

/* fsck_check.c */
int read_rows(struct fsck *f);
/* p's path for a line (read from the manifest on first use). */
const char *fsck_page_path(struct fsck *f, struct page *p);
int scan_stripes(struct fsck *f);
void seg_path(struct fsck *f, uint32_t stripe, uint32_t num, char *out, size_t len);
__attribute__((format(printf, 3, 4)))
void extent_bad(struct fsck *f, struct ext *e, const char *fmt, ...);
int check_extents(struct fsck *f);
uint64_t ext_end(const struct ext *e);
void check_overlaps(struct fsck *f);
void check_page_refs(struct fsck *f);
void check_refcounts(struct fsck *f);

/* fsck_fix.c */
int scan_orphans(struct fsck *f, bool punch);
int verify_data(struct fsck *f);
int repair(struct fsck *f);

#endif
