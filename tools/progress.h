/*
 * A status line for long `kvfs` commands: "label: done/total (pct) rate
 * ETA", redrawn in place with \r on stderr at most 5 times a second, and
 * one final line when the work is done. Shown only on a terminal (or when
 * forced with --progress), so pipes, files and --json consumers never see
 * it.
 *
 * A NULL handle is a silent one: progress_start returns NULL when the line
 * is off (or memory is short: a status line is not worth failing a command
 * for), and every function accepts NULL, so callers need no conditionals.
 * One thread at a time may use a handle.
 */
#ifndef KVFS_PROGRESS_H
#define KVFS_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct progress;

/* --progress / --quiet / neither (on when stderr is a terminal). */
enum progress_mode { PROGRESS_AUTO, PROGRESS_ON, PROGRESS_OFF };

/* Counts in bytes are shown as KiB/MiB/GiB; pass it as the unit. */
#define PROGRESS_BYTES NULL

/* Whether a command with this mode shows its status line. */
bool progress_wanted(enum progress_mode mode);

/*
 * Work of total units (0: unknown: no percentage or ETA) named unit
 * ("pages", "rows"; PROGRESS_BYTES for bytes) under label. NULL when
 * mode says no.
 */
struct progress *progress_start(enum progress_mode mode, const char *label,
				uint64_t total, const char *unit);

/* The same to any stream, with any clock (seconds, monotonic): for tests. */
struct progress *progress_open(FILE *out, double (*clock)(void *), void *clock_arg,
			       const char *label, uint64_t total, const char *unit);

/* Units done so far (absolute, or one more step). Draws when due. */
void progress_set(struct progress *p, uint64_t done);
void progress_add(struct progress *p, uint64_t n);
/* The total became known or changed. */
void progress_set_total(struct progress *p, uint64_t total);
/* Say what is being done now (the label); shown at the next redraw. */
void progress_set_label(struct progress *p, const char *label);
/* Erase the line before printing something else on the terminal; the next
 * update draws it again. */
void progress_clear(struct progress *p);
/* Print the final line ("label: N units in S s, R/s") and free. */
void progress_finish(struct progress *p);
/* Erase the line and free, without a final line (the command failed and
 * says so itself). */
void progress_cancel(struct progress *p);

/* Helpers, exposed for the tests: "812 B", "1.5 KiB", "3.20 GiB"; and a
 * duration as "45s", "12m05s", "3h02m". */
void progress_fmt_bytes(double bytes, char *out, size_t len);
void progress_fmt_secs(double secs, char *out, size_t len);

#endif
