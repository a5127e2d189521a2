/*
 * `kvfs bench`: its status line on stderr. A run is a list of steps known
 * up front: for each size, writing its pages (to kvfs, and as plain files
 * for the files method), each method's run of the read case, each way's
 * run of the write case, each pair's run of the mixed case and each
 * phase's run of the conc case; then the meta case's steps. The line names the step under way and
 * counts those done; the report on stdout is printed between steps,
 * after the line is erased.
 */
#include "bench.h"
#include "progress.h"

static struct progress *bench_pr;
static uint64_t steps_done;

static unsigned bits(unsigned v)
{
	unsigned n = 0;

	for (; v; v &= v - 1)
		n++;
	return n;
}

static uint64_t count_steps(const struct bench_opts *o)
{
	bool reads = o->cases & (1u << C_READ | 1u << C_MIXED | 1u << C_CONC);
	uint64_t per_size = 0;

	if (reads)
		per_size += 1 + !!(o->methods & 1u << M_FILES);
	if (o->cases & 1u << C_READ)
		per_size += (uint64_t)o->repeat * bits(o->methods);
	if (o->cases & 1u << C_WRITE)
		per_size += write_case_steps(o);
	if (o->cases & 1u << C_MIXED)
		per_size += mixed_case_steps(o);
	if (o->cases & 1u << C_CONC)
		per_size += conc_case_steps(o);
	return per_size * o->nsizes + (o->cases & 1u << C_META ? META_STEPS : 0);
}

void bench_progress_start(const struct bench_opts *o)
{
	bench_pr = progress_start(o->pm, "bench", count_steps(o), "steps");
	steps_done = 0;
}

void bench_step(const char *fmt, ...)
{
	char label[64] = "bench: ";
	va_list ap;

	if (!bench_pr)
		return;
	va_start(ap, fmt);
	vsnprintf(label + 7, sizeof(label) - 7, fmt, ap);
	va_end(ap);
	progress_set_label(bench_pr, label);
	progress_set(bench_pr, steps_done);
}

void bench_step_done(void)
{
	progress_set(bench_pr, ++steps_done);
}

void bench_progress_clear(void)
{
	fflush(stdout);
	progress_clear(bench_pr);
}

void bench_progress_end(bool ok)
{
	progress_set_label(bench_pr, "bench");
	if (ok)
		progress_finish(bench_pr);
	else
		progress_cancel(bench_pr);
	bench_pr = NULL;
}
