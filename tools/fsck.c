/*
 * `kvfs fsck STORE [--verify-data] [--repair | -n] [--json]`: the offline
 * store checker, modelled on e2fsck.
 *
 * It takes the store lock the daemon takes (so neither can run while the
 * other does), then checks, in order: the SQLite database (integrity, foreign
 * keys, schema version), the stripes (directory and marker), every extent
 * row's values and that it lies inside its segment file, overlaps between
 * extents, page -> extent references and refcounts, space allocated in
 * segment files that no extent covers, and with --verify-data every
 * extent's XXH3-128. Each problem is one line; a summary ends the run.
 *
 * --repair changes only what can be fixed without losing a good page. This
 * is a cache, so a page whose bytes cannot be trusted (its extent missing,
 * outside its segment, failing its checksum) is deleted: a miss beats wrong
 * bytes. Order follows docs/format.md rule 4 ("free after forget"): one
 * manifest transaction (delete pages, fix refcounts, delete extents no page
 * uses) commits first; only then is space no committed row names punched. A
 * crash between the two leaves orphaned space, which the next fsck or mount
 * reclaims. Problems that cannot be fixed safely (overlapping extents, a
 * missing stripe, foreign keys other than page -> extent) are left alone.
 *
 * Exit status as e2fsck: 0 clean, 1 errors corrected, 4 errors left
 * uncorrected (1|4 = 5: some of each), 8 operational error, 16 usage.
 *
 * This file opens and locks the store, drives the checks, repairs and
 * prints the summary; the checks of rows, stripes, extents and references
 * are in fsck_check.c, orphaned space, --verify-data and --repair in
 * fsck_fix.c, and the state they share in fsck.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine.h"
#include "fsck.h"
#include "tools.h"

#define EXIT_OK 0
#define EXIT_FIXED 1
#define EXIT_LEFT 4
#define EXIT_OPERATIONAL 8
#define EXIT_USAGE 16

static const char fsck_usage[] =
	"usage: kvfs fsck STORE [--verify-data] [--repair | --rebuild | -n] [--json]\n"
	"                 [--progress | -q]\n"
	"  check a store that is not mounted (see docs/fsck.md)\n"
	"  --verify-data  also read every extent and check its XXH3-128\n"
	"  --repair       fix what can be fixed (pages with unreadable data are deleted);\n"
	"                 a missing or unopenable kvfs.db is rebuilt from kvfs.journal\n"
	"  --rebuild      make kvfs.db anew from kvfs.journal (the old one is kept\n"
	"                 aside), then verify every page's data and repair\n"
	"  -n             read-only (the default)\n"
	"  --json         print the summary as one JSON object on stdout (problem\n"
	"                 lines go to stderr)\n"
	"  --progress     show each phase's status line on stderr even when it is\n"
	"                 not a terminal (rows, extents, segments, bytes verified)\n"
	"  -q, --quiet    never show it (default: shown when stderr is a terminal)\n"
	"  exit: 0 clean, 1 errors corrected, 4 errors left, 8 operational error, 16 usage\n";

/* One line on f->out, escaped: page names and paths are bytes from
 * clients, never printed raw. */
static void say_v(struct fsck *f, const char *fmt, va_list ap)
{
	char *line = NULL, *safe = NULL;

	progress_clear(f->pr);   /* both may be the terminal */
	if (vasprintf(&line, fmt, ap) >= 0)
		safe = kvfs_text_escape(line);
	fprintf(f->out, "%s\n", safe ? safe : "(out of memory formatting a line)");
	free(safe);
	free(line);
}

__attribute__((format(printf, 2, 3)))
void fsck_say(struct fsck *f, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	say_v(f, fmt, ap);
	va_end(ap);
}

__attribute__((format(printf, 3, 4)))
void problem(struct fsck *f, bool fixable, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	say_v(f, fmt, ap);
	va_end(ap);
	f->problems++;
	if (fixable)
		f->fixable++;
}

/* The libraries' lines name pages too: escaped as ours are. */
static void log_escaped(enum kv_log_level lvl, const char *line)
{
	static const char *const names[] = { "error", "warning", "info", "debug" };
	char *safe = kvfs_text_escape(line);

	fprintf(stderr, "kvfs: %s: %s\n", names[lvl], safe ? safe : line);
	free(safe);
}

/* One status line per phase: a phase ends with its final line. */
void phase_start(struct fsck *f, const char *label, uint64_t total, const char *unit)
{
	phase_end(f);
	f->pr = progress_start(f->pm, label, total, unit);
}

void phase_end(struct fsck *f)
{
	progress_finish(f->pr);
	f->pr = NULL;
}

static void report_fixable(void *arg, const char *line)
{
	struct fsck *f = arg;

	problem(f, true, "%s", line);
	f->renumber = true;
}

static void report_repair(void *arg, const char *line)
{
	struct fsck *f = arg;

	fprintf(f->out, "repair: %s\n", line);
}

/* ---- lock and open ---- */

/* As the daemon: a store someone serves is not checked. */
static int lock_store(struct fsck *f)
{
	char holder[32];
	int rc = kvfs_lock_store(f->store, !(f->repair || f->rebuild), &f->lock, holder,
				 sizeof(holder));

	if (rc == -EBUSY)
		fprintf(stderr, "kvfs fsck: store %s is in use (mounted by kvfs pid %s); "
			"unmount it first: fsck works on stores nobody serves\n",
			f->shown, holder);
	else if (rc < 0)
		fprintf(stderr, "kvfs fsck: cannot lock %s/kvfs.lock: %s\n", f->shown,
			strerror(-rc));
	return rc;
}

/* A new manifest from the journal; then every page's bytes are verified
 * against it and what fails is dropped, as by --repair --verify-data. */
static int rebuild(struct fsck *f, const char *why)
{
	struct kv_rebuild_stats st;
	int rc;

	if (f->m) {
		kv_manifest_close(f->m);
		f->m = NULL;
	}
	problem(f, true, "manifest: %s", why);
	rc = kv_manifest_rebuild(f->store, &st);
	if (rc < 0) {
		fprintf(stderr, "kvfs fsck: rebuilding %s/%s from %s failed: %s\n", f->shown,
			KV_MANIFEST_FILE, KV_JOURNAL_FILE, kv_strerror(rc));
		return rc;
	}
	fsck_say(f, "rebuild: %s/%s made from %s (its snapshot and %" PRIu64
		" batches after it: %" PRIu64 " changes)%s%s", f->store, KV_MANIFEST_FILE,
		KV_JOURNAL_FILE, st.batches, st.changes,
		st.aside[0] ? "; the old manifest is kept as " : "", st.aside);
	f->pre_fixed++;
	f->repair = f->verify = true;
	rc = kv_manifest_open(f->store, &f->m);
	if (rc == 0)
		rc = kv_manifest_recover(f->m, NULL);
	return rc;
}

/* Journaled batches the manifest lacks (a lost kvfs.db-wal): applied with
 * --repair (the mount would apply them too), reported without. */
static int roll_forward(struct fsck *f)
{
	struct kv_recover_stats st;
	uint64_t behind = 0;
	const char *damaged = NULL;
	int rc;

	rc = kv_manifest_journal_behind(f->m, &behind, &damaged);
	if (rc == 0 && damaged && !f->repair)
		problem(f, true, "journal: %s is damaged (%s): it could not rebuild the "
			"manifest; --repair writes it anew from the manifest",
			KV_JOURNAL_FILE, damaged);
	if (!f->repair) {
		if (rc == 0 && behind > 1)
			problem(f, true, "manifest: %" PRIu64 " committed batches are in %s but "
				"not in %s (kvfs.db-wal lost?); --repair or the next mount "
				"applies them", behind, KV_JOURNAL_FILE, KV_MANIFEST_FILE);
		return 0;
	}
	rc = kv_manifest_recover(f->m, &st);
	if (rc == 0 && damaged && !st.rewritten) {
		problem(f, true, "journal: %s was damaged (%s)", KV_JOURNAL_FILE, damaged);
		rc = kv_manifest_journal_rewrite(f->m);
		if (rc < 0)
			return rc;
		fprintf(f->out, "repair: wrote the journal anew from the manifest\n");
		f->pre_fixed++;
	}
	if (rc < 0) {
		fprintf(stderr, "kvfs fsck: applying %s/%s to the manifest failed: %s\n",
			f->shown, KV_JOURNAL_FILE, kv_strerror(rc));
		return rc;
	}
	if (st.batches > 1) {
		problem(f, true, "manifest: %" PRIu64 " committed batches were in %s but not "
			"in %s (kvfs.db-wal lost?)", st.batches, KV_JOURNAL_FILE,
			KV_MANIFEST_FILE);
		fprintf(f->out, "repair: applied them (%" PRIu64 " changes)\n", st.changes);
		f->pre_fixed++;
	}
	return 0;
}

static int open_store(struct fsck *f)
{
	char path[4096 + 16];
	struct stat sb;
	int rc;

	if (stat(f->store, &sb) < 0) {
		fprintf(stderr, "kvfs fsck: cannot open store %s: %s\n", f->shown,
			strerror(errno));
		return -errno;
	}
	if (!S_ISDIR(sb.st_mode)) {
		fprintf(stderr, "kvfs fsck: %s is not a directory (not a kvfs store)\n", f->shown);
		return -ENOTDIR;
	}
	snprintf(path, sizeof(path), "%s/%s", f->store, KV_MANIFEST_FILE);
	if (access(path, F_OK) < 0 && !kv_manifest_has_journal(f->store)) {
		fprintf(stderr, "kvfs fsck: %s is not a kvfs store (no %s and no %s: %s)\n",
			f->shown, KV_MANIFEST_FILE, KV_JOURNAL_FILE, strerror(errno));
		return -ENOENT;
	}
	rc = lock_store(f);
	if (rc < 0)
		return rc;
	if (access(path, F_OK) < 0) {
		if (f->repair || f->rebuild)
			return rebuild(f, "kvfs.db is missing; rebuilding it from the journal");
		problem(f, true, "manifest: %s is missing, but %s/%s holds the store's "
			"history: run `kvfs fsck --rebuild %s`", path, f->store,
			KV_JOURNAL_FILE, f->store);
		return KV_ERR_NOTSTORE;
	}
	rc = kv_manifest_open(f->store, &f->m);
	if (rc == 0)
		kv_manifest_prefetch(f->m);   /* every check below walks it all */
	if (rc == KV_ERR_NOTSTORE && kv_manifest_has_journal(f->store))
		rc = KV_ERR_CORRUPT;   /* kvfs.db truncated or overwritten */
	if (rc == KV_ERR_CORRUPT && kv_manifest_has_journal(f->store) && (f->repair || f->rebuild))
		return rebuild(f, "kvfs.db is damaged beyond opening; rebuilding it from "
			       "the journal");
	if (rc == 0 && f->rebuild)
		return rebuild(f, "rebuilding kvfs.db from the journal (--rebuild)");
	if (rc == 0)
		return roll_forward(f);
	if (rc != KV_ERR_CORRUPT)
		fprintf(stderr, "kvfs fsck: cannot open the manifest of %s: %s\n", f->shown,
			kv_strerror(rc));
	return rc;
}

/*
 * After all else: what the daemon's load would say. After the checks, only
 * the row values are left to prove (the checks above did the rest without
 * a b-tree seek per row); after a repair, everything again.
 */
static void final_check(struct fsck *f, const char *when, bool full)
{
	char msg[768];
	int rc;

	if (!full && f->rows_ok)
		return;   /* read_rows' pass proved it, and nothing has changed since */
	rc = full ? kv_manifest_check(f->m, msg, sizeof(msg)) :
		    kv_manifest_check_rows(f->m, NULL, NULL, KV_CHECK_ALL, NULL, msg, sizeof(msg));

	if (rc == KV_ERR_CORRUPT)
		problem(f, false, "manifest %s: %s", when, msg);
	else if (rc < 0)
		fprintf(stderr, "kvfs fsck: the manifest check could not run: %s\n", msg);
}

/* ---- the database checks, on threads of their own ----
 *
 * quick_check and the index scans each read the whole database once more;
 * they need nothing from the row checks, nor from each other, so each runs
 * on a connection of its own while the rows are checked, and their lines
 * are held until they are joined (two threads never print at once). The
 * index scans' result counts only where quick_check found nothing (they
 * stop at, or differ because of, a damaged b-tree page it reports). The
 * table side of the index sums is the row pass's (f->sums): compared once
 * both are done.
 */
struct db_job {
	int (*check)(struct kv_manifest *m, kv_check_report_fn *report, void *arg);
	struct kv_manifest *m;       /* its own connection */
	pthread_t th;
	bool started;
	char **lines;
	size_t n, cap;
	bool nomem;                  /* a line could not be kept */
	int rc;                      /* problems found, or -errno */
	struct kv_check_sums *sums;  /* index_scans' */
};

static void hold_line(void *arg, const char *line)
{
	struct db_job *j = arg;

	if (j->n == j->cap) {
		char **nl = kv_array_room(j->lines, j->n, &j->cap, sizeof(*nl), 16);

		if (!nl) {
			j->nomem = true;
			return;
		}
		j->lines = nl;
	}
	if (!(j->lines[j->n] = strdup(line)))
		j->nomem = true;
	else
		j->n++;
}

static int index_scans(struct kv_manifest *m, kv_check_report_fn *report, void *arg)
{
	struct db_job *j = arg;

	(void)report;   /* the differences are told by the comparison */
	return kv_check_sums_scan_indexes(m, j->sums);
}

static int compare_sums(struct kv_manifest *m, kv_check_report_fn *report, void *arg)
{
	struct db_job *j = arg;

	return kv_check_sums_compare(m, j->sums, report, arg);
}

static void *db_thread(void *arg)
{
	struct db_job *j = arg;

	j->rc = j->check(j->m, hold_line, j);
	return NULL;
}

/* Start a check; where a second connection cannot be had, it runs here
 * and now on the first (same lines, no overlap). */
static void db_check_start(struct fsck *f, struct db_job *j)
{
	int rc = kv_manifest_open(f->store, &j->m);

	if (rc == 0)
		(void)kv_manifest_scan_cache(j->m);   /* only slower without */

	if (rc == 0 && (rc = -pthread_create(&j->th, NULL, db_thread, j)) == 0) {
		j->started = true;
		return;
	}
	if (j->m) {
		kv_manifest_close(j->m);
		j->m = NULL;
	}
	j->rc = j->check(f->m, hold_line, j);
}

/* Join it; report what it found unless told to drop it. Its error, if
 * any (none when dropped). */
static int db_check_end(struct fsck *f, struct db_job *j, bool drop)
{
	if (j->started)
		pthread_join(j->th, NULL);
	j->started = false;
	for (size_t i = 0; i < j->n; i++) {
		if (!drop)
			problem(f, false, "%s", j->lines[i]);
		free(j->lines[i]);
	}
	free(j->lines);
	j->lines = NULL;
	j->n = 0;
	if (j->m)
		kv_manifest_close(j->m);
	j->m = NULL;
	if (drop)
		return 0;
	if (j->nomem && j->rc >= 0)
		j->rc = -ENOMEM;     /* a problem it found went unsaid */
	return j->rc < 0 ? j->rc : 0;
}

/* Both database checks joined, then the small ones (foreign key,
 * identities, versions) here. */
static int db_checks_end(struct fsck *f, struct db_job *btrees, struct db_job *sums)
{
	struct db_job refs = { .check = kv_manifest_check_refs };
	int rc = db_check_end(f, btrees, false);
	/* Damage found, or quick_check could not run at all: either way the
	 * index scans went unchecked before (they ran only after a clean
	 * quick_check). */
	bool damaged = btrees->rc != 0;
	int rc2 = db_check_end(f, sums, damaged);

	if (rc2 == 0 && !damaged && sums->sums) {
		struct db_job cmp = { .check = compare_sums, .sums = sums->sums };

		cmp.rc = cmp.check(f->m, hold_line, &cmp);
		rc2 = db_check_end(f, &cmp, false);
	}
	refs.rc = refs.check(f->m, hold_line, &refs);
	rc = rc < 0 ? rc : rc2;
	rc2 = db_check_end(f, &refs, false);
	return rc < 0 ? rc : rc2;
}

/* ---- driver ---- */

static int row_checks(struct fsck *f);

static int run_checks(struct fsck *f)
{
	struct db_job btrees = { .check = kv_manifest_check_btrees };
	struct db_job sums = { .check = kv_manifest_check_index_sums };
	int rc, rc2;

	/* The index scans here, the table side in the row pass; where the
	 * indexes cannot even be listed, the whole check as one job. */
	kv_check_sums_free(f->sums);
	f->sums = NULL;
	(void)kv_manifest_scan_cache(f->m);
	if (kv_check_sums_new(f->m, &f->sums) == 0) {
		sums.check = index_scans;
		sums.sums = f->sums;
	}

	db_check_start(f, &btrees);
	db_check_start(f, &sums);
	rc = row_checks(f);
	rc2 = db_checks_end(f, &btrees, &sums);
	if (rc < 0 || rc2 < 0)
		return rc < 0 ? rc : rc2;
	if (f->verify && (rc = verify_data(f)) < 0)
		return rc;
	if (f->problems == 0)
		final_check(f, "check", false);
	return 0;
}

/* Everything but the database check, against the manifest's rows. */
static int row_checks(struct fsck *f)
{
	int rc;

	f->meta = malloc(sizeof(*f->meta));
	if (!f->meta)
		return -ENOMEM;
	rc = kv_manifest_meta(f->m, f->meta);
	if (rc == KV_ERR_CORRUPT) {
		/* kv_manifest_meta logged why; without stripes nothing else can run */
		problem(f, false, "manifest: meta or stripes are damaged (see above); "
			"the extents were not checked");
		return 0;
	}
	if (rc < 0 || (rc = read_rows(f)) < 0 || (rc = scan_stripes(f)) < 0 ||
	    (rc = check_extents(f)) < 0)
		return rc;
	rc = kv_manifest_check_inodes(f->m, false, report_fixable, f);
	if (rc < 0)
		return rc;
	check_overlaps(f);
	check_page_refs(f);
	check_refcounts(f);
	phase_start(f, "fsck: segment files", f->nseg, "files");
	rc = scan_orphans(f, false);
	phase_end(f);
	return rc;
}

static void summary(struct fsck *f, int status)
{
	unsigned left = f->problems - f->fixed;

	if (f->json) {
		printf("{\"store\": ");
		kvfs_json_str(stdout, f->store);
		printf(", \"pages\": %zu, \"extents\": %zu, \"segments\": %zu, \"problems\": %u, "
		       "\"corrected\": %u, \"uncorrected\": %u, \"lost_pages\": %" PRIu64
		       ", \"orphaned_bytes\": %" PRIu64 ", \"punched_bytes\": %" PRIu64
		       ", \"verified_extents\": %" PRIu64 ", \"verified_bytes\": %" PRIu64
		       ", \"exit\": %d}\n", f->npg, f->next, f->nseg, f->problems, f->fixed,
		       left, f->lost_pages, f->orphan_bytes, f->punched_bytes, f->verified,
		       f->verified_bytes, status);
		return;
	}
	printf("kvfs fsck: %s: %zu pages, %zu extents, %zu segment files", f->shown, f->npg,
	       f->next, f->nseg);
	if (f->verify)
		printf(", data of %" PRIu64 " extents (%" PRIu64 " bytes) verified", f->verified,
		       f->verified_bytes);
	printf("\n");
	if (f->problems == 0)
		printf("kvfs fsck: %s: clean\n", f->shown);
	else if (f->repair)
		printf("kvfs fsck: %s: %u problem(s): %u corrected, %u left uncorrected; "
		       "%" PRIu64 " page(s) deleted, %" PRIu64 " bytes punched\n", f->shown,
		       f->problems, f->fixed, left, f->lost_pages, f->punched_bytes);
	else
		printf("kvfs fsck: %s: %u problem(s) left uncorrected (--repair would fix %u)\n",
		       f->shown, f->problems, f->fixable);
}

static int fsck_run(struct fsck *f)
{
	int rc;

	rc = open_store(f);
	if (rc == KV_ERR_CORRUPT) {
		if (kv_manifest_has_journal(f->store))
			problem(f, true, "manifest: %s/%s is damaged beyond opening; run `kvfs "
				"fsck --rebuild %s` to rebuild it from %s", f->store,
				KV_MANIFEST_FILE, f->store, KV_JOURNAL_FILE);
		else
			problem(f, false, "manifest: %s/%s is damaged beyond opening and there "
				"is no %s to rebuild it from: the store's pages cannot be "
				"recovered; make a new store with `kvfs mkfs`", f->store,
				KV_MANIFEST_FILE, KV_JOURNAL_FILE);
		return EXIT_LEFT;
	}
	if (rc == KV_ERR_NOTSTORE && f->problems)
		return EXIT_LEFT;     /* kvfs.db missing, the journal there: said so */
	if (rc < 0)
		return EXIT_OPERATIONAL;
	rc = run_checks(f);
	phase_end(f);
	if (rc < 0) {
		fprintf(stderr, "kvfs fsck: %s: the check could not complete: %s\n", f->shown,
			kv_strerror(rc));
		return EXIT_OPERATIONAL;
	}
	if (f->repair && f->fixable) {
		if (f->fixable > f->pre_fixed && repair(f) < 0)
			return EXIT_OPERATIONAL | EXIT_LEFT;
		/* Last: renumbering changes the page inodes the repair named. */
		if (f->renumber && kv_manifest_check_inodes(f->m, true, report_repair, f) < 0)
			return EXIT_OPERATIONAL | EXIT_LEFT;
		f->fixed = f->fixable;
		/* Rows changed outside the journal (refcounts): make it match. */
		if (kv_manifest_journal_rewrite(f->m) < 0)
			fprintf(stderr, "kvfs fsck: the journal could not be rewritten after "
				"the repair; the next mount rewrites it\n");
		if (f->problems == f->fixed)
			final_check(f, "after repair", true);
	}
	return (f->fixed ? EXIT_FIXED : 0) | (f->problems > f->fixed ? EXIT_LEFT : 0);
}

static void fsck_free(struct fsck *f)
{
	free(f->shown);
	for (size_t i = 0; i < f->npg; i++)
		free(f->pg[i].path);
	for (size_t i = 0; i < f->next; i++)
		free(f->ext[i].why);
	for (size_t i = 0; i < f->nseg; i++)
		if (f->seg[i].fd >= 0)
			close(f->seg[i].fd);
	free(f->pg);
	free(f->layers.ino);
	free(f->ext);
	free(f->seg);
	free(f->byloc);
	free(f->stripe_ok);
	free(f->meta);
	kv_check_sums_free(f->sums);
	if (f->m)
		kv_manifest_close(f->m);
	kvfs_unlock_store(&f->lock);
}

static int parse_args(struct fsck *f, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "verify-data", no_argument, NULL, 'v' },
		{ "repair", no_argument, NULL, 'r' },
		{ "rebuild", no_argument, NULL, 'R' },
		{ "json", no_argument, NULL, 'j' },
		{ "progress", no_argument, NULL, 'P' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	bool ro = false;
	int c;

	while ((c = getopt_long(argc, argv, "nqh", lo, NULL)) != -1) {
		switch (c) {
		case 'v': f->verify = true; break;
		case 'r': f->repair = true; break;
		case 'R': f->rebuild = true; break;
		case 'j': f->json = true; break;
		case 'n': ro = true; break;
		case 'P': f->pm = PROGRESS_ON; break;
		case 'q': f->pm = PROGRESS_OFF; break;
		case 'h':
			fputs(fsck_usage, stdout);
			return 1;
		default:
			fputs(fsck_usage, stderr);
			return -1;
		}
	}
	if (ro && (f->repair || f->rebuild)) {
		fprintf(stderr, "kvfs fsck: -n (read-only) and --repair or --rebuild exclude "
			"each other\n");
		return -1;
	}
	if (optind + 1 != argc) {
		fprintf(stderr, "kvfs fsck: %s\n%s", optind == argc ? "no STORE given" :
			"more than one STORE given", fsck_usage);
		return -1;
	}
	f->store = argv[optind];
	return 0;
}

int kvfs_cmd_fsck(int argc, char **argv)
{
	struct fsck f = { .lock = KVFS_STORE_LOCK_NONE };
	int rc;

	rc = parse_args(&f, argc, argv);
	if (rc)
		return rc > 0 ? EXIT_OK : EXIT_USAGE;
	f.out = f.json ? stderr : stdout;
	f.shown = kvfs_text_escape(f.store);
	if (!f.shown)
		return EXIT_OPERATIONAL;
	/* Our own lines say what is wrong; the library's warnings would repeat it. */
	kv_log_set_level(KV_LOG_ERR);
	kv_log_set_sink(log_escaped);
	rc = fsck_run(&f);
	/* --json: a script gets its one document even when the check could
	 * not run (the reason is on stderr, the status in "exit") */
	if (rc != EXIT_OPERATIONAL || f.json)
		summary(&f, rc);
	fsck_free(&f);
	return rc;
}
