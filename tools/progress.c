/*
 * The status line of long `kvfs` commands (see progress.h). The rate is
 * the average since the start: steadier than an instantaneous one, and
 * the work these commands do (checking rows, reading extents, writing
 * pages) runs at an even pace.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "progress.h"

#define PROGRESS_INTERVAL 0.2     /* seconds between redraws: 5 per second */

struct progress {
	FILE *out;
	double (*clock)(void *);
	void *clock_arg;
	char label[64];
	char unit[24];
	bool bytes;
	uint64_t total, done;
	double t0, last;              /* start; last redraw (or the start) */
	int width;                    /* characters of the line on screen */
	bool drawn;                   /* a line is on screen, unterminated */
};

static double mono_clock(void *arg)
{
	struct timespec ts;

	(void)arg;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

bool progress_wanted(enum progress_mode mode)
{
	if (mode == PROGRESS_AUTO)
		return isatty(STDERR_FILENO);
	return mode == PROGRESS_ON;
}

void progress_fmt_bytes(double bytes, char *out, size_t len)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB" };
	unsigned u = 0;

	if (bytes < 1024) {
		snprintf(out, len, "%.0f B", bytes);
		return;
	}
	bytes /= 1024;
	while (bytes >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
		bytes /= 1024;
		u++;
	}
	/* three significant digits, as ls -h and df -h keep about */
	snprintf(out, len, bytes < 10 ? "%.2f %s" : bytes < 100 ? "%.1f %s" : "%.0f %s",
		 bytes, units[u]);
}

void progress_fmt_secs(double secs, char *out, size_t len)
{
	unsigned long s = secs > 0 ? (unsigned long)(secs + 0.5) : 0;

	if (s < 60)
		snprintf(out, len, "%lus", s);
	else if (s < 3600)
		snprintf(out, len, "%lum%02lus", s / 60, s % 60);
	else
		snprintf(out, len, "%luh%02lum", s / 3600, s / 60 % 60);
}

struct progress *progress_open(FILE *out, double (*clock)(void *), void *clock_arg,
			       const char *label, uint64_t total, const char *unit)
{
	struct progress *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->out = out;
	p->clock = clock ? clock : mono_clock;
	p->clock_arg = clock_arg;
	snprintf(p->label, sizeof(p->label), "%s", label);
	p->bytes = unit == PROGRESS_BYTES;
	snprintf(p->unit, sizeof(p->unit), "%s", p->bytes ? "" : unit);
	p->total = total;
	p->t0 = p->last = p->clock(p->clock_arg);
	return p;
}

struct progress *progress_start(enum progress_mode mode, const char *label,
				uint64_t total, const char *unit)
{
	if (!progress_wanted(mode))
		return NULL;
	return progress_open(stderr, NULL, NULL, label, total, unit);
}

/* "1234/5678 pages" or "1.20 GiB/5.00 GiB"; no total: "1234 pages". */
static void fmt_count(const struct progress *p, char *out, size_t len)
{
	char a[32], b[32];

	if (!p->bytes) {
		if (p->total)
			snprintf(out, len, "%llu/%llu %s", (unsigned long long)p->done,
				 (unsigned long long)p->total, p->unit);
		else
			snprintf(out, len, "%llu %s", (unsigned long long)p->done, p->unit);
		return;
	}
	progress_fmt_bytes((double)p->done, a, sizeof(a));
	if (!p->total) {
		snprintf(out, len, "%s", a);
		return;
	}
	progress_fmt_bytes((double)p->total, b, sizeof(b));
	snprintf(out, len, "%s/%s", a, b);
}

static void fmt_rate(const struct progress *p, double rate, char *out, size_t len)
{
	char r[32];

	if (p->bytes) {
		progress_fmt_bytes(rate, r, sizeof(r));
		snprintf(out, len, "%s/s", r);
	} else {
		/* slow steps (a benchmark's) would all read "0/s" */
		snprintf(out, len, rate < 10 ? "%.2f %s/s" : "%.0f %s/s", rate, p->unit);
	}
}

/* Write line over what is on screen, padding over a longer old line. */
static void put_line(struct progress *p, const char *line, bool final)
{
	int n = (int)strlen(line);

	fprintf(p->out, "\r%s%*s", line, p->width > n ? p->width - n : 0, "");
	if (final)
		fputc('\n', p->out);
	fflush(p->out);
	p->width = final ? 0 : n;
	p->drawn = !final;
}

static void draw(struct progress *p, double now)
{
	double secs = now - p->t0, rate = secs > 0 ? (double)p->done / secs : 0;
	char line[256], count[80], r[48], eta[32];
	int n;

	fmt_count(p, count, sizeof(count));
	fmt_rate(p, rate, r, sizeof(r));
	n = snprintf(line, sizeof(line), "%s: %s", p->label, count);
	if (p->total && n < (int)sizeof(line))
		n += snprintf(line + n, sizeof(line) - n, " (%.0f%%)",
			      p->done >= p->total ? 100.0
						  : 100.0 * (double)p->done / (double)p->total);
	if (n < (int)sizeof(line))
		n += snprintf(line + n, sizeof(line) - n, ", %s", r);
	if (p->total && p->done < p->total && rate > 0 && n < (int)sizeof(line)) {
		progress_fmt_secs((double)(p->total - p->done) / rate, eta, sizeof(eta));
		snprintf(line + n, sizeof(line) - n, ", ETA %s", eta);
	}
	put_line(p, line, false);
	p->last = now;
}

void progress_set(struct progress *p, uint64_t done)
{
	double now;

	if (!p)
		return;
	p->done = done;
	now = p->clock(p->clock_arg);
	if (now - p->last >= PROGRESS_INTERVAL)
		draw(p, now);
}

void progress_add(struct progress *p, uint64_t n)
{
	if (p)
		progress_set(p, p->done + n);
}

void progress_set_total(struct progress *p, uint64_t total)
{
	if (p)
		p->total = total;
}

void progress_set_label(struct progress *p, const char *label)
{
	if (p)
		snprintf(p->label, sizeof(p->label), "%s", label);
}

void progress_clear(struct progress *p)
{
	if (!p || !p->drawn)
		return;
	fprintf(p->out, "\r%*s\r", p->width, "");
	fflush(p->out);
	p->width = 0;
	p->drawn = false;
}

void progress_finish(struct progress *p)
{
	char line[256], count[80], r[48];
	double secs;

	if (!p)
		return;
	secs = p->clock(p->clock_arg) - p->t0;
	fmt_count(p, count, sizeof(count));
	fmt_rate(p, secs > 0 ? (double)p->done / secs : 0, r, sizeof(r));
	snprintf(line, sizeof(line), "%s: %s in %.1f s (%s)", p->label, count, secs, r);
	if (p->drawn) {
		put_line(p, line, true);
	} else {
		fprintf(p->out, "%s\n", line);
		fflush(p->out);
	}
	free(p);
}

void progress_cancel(struct progress *p)
{
	progress_clear(p);
	free(p);
}
