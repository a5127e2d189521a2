/*
 * Unit tests for tools/progress.c: the status line's rate limit (at most
 * one redraw per 0.2 s of the injected clock), its contents (count,
 * percentage, rate, ETA), padding over a longer old line, clearing, the
 * final line, and the size and duration formats.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "progress.h"

struct fake {
	double now;
	FILE *f;
	char *buf;
	size_t len;
};

static double fake_clock(void *arg)
{
	return ((struct fake *)arg)->now;
}

static int setup(void **state)
{
	struct fake *k = calloc(1, sizeof(*k));

	if (!k)
		return -1;
	k->now = 100.0;
	k->f = open_memstream(&k->buf, &k->len);
	*state = k;
	return k->f ? 0 : -1;
}

static int teardown(void **state)
{
	struct fake *k = *state;

	fclose(k->f);
	free(k->buf);
	free(k);
	return 0;
}

/* What the stream holds so far. */
static const char *out(struct fake *k)
{
	fflush(k->f);
	return k->buf ? k->buf : "";
}

static unsigned count_char(const char *s, char c)
{
	unsigned n = 0;

	for (; *s; s++)
		n += *s == c;
	return n;
}

static void test_rate_limited(void **state)
{
	struct fake *k = *state;
	struct progress *p = progress_open(k->f, fake_clock, k, "import", 1000, "pages");
	int i;

	assert_non_null(p);
	/* 100 updates within 0.1 s: too soon for any redraw */
	for (i = 1; i <= 100; i++) {
		k->now += 0.001;
		progress_set(p, (uint64_t)i);
	}
	assert_string_equal(out(k), "");
	/* 2 s of updates every 10 ms: one redraw per 0.2 s, about 10 */
	for (i = 0; i < 200; i++) {
		k->now += 0.01;
		progress_add(p, 1);
	}
	assert_in_range(count_char(out(k), '\r'), 9, 11);
	assert_null(strchr(out(k), '\n'));
	progress_finish(p);
	assert_int_equal(count_char(out(k), '\n'), 1);
}

static void test_line_contents(void **state)
{
	struct fake *k = *state;
	struct progress *p = progress_open(k->f, fake_clock, k, "check", 400, "rows");

	k->now += 1.0;
	progress_set(p, 100);             /* 100 rows/s, 300 left: 3 s */
	assert_string_equal(out(k), "\rcheck: 100/400 rows (25%), 100 rows/s, ETA 3s");
	k->now += 3.0;
	progress_set(p, 400);
	progress_finish(p);
	assert_non_null(strstr(out(k), "\rcheck: 400/400 rows in 4.0 s (100 rows/s)"));
	assert_int_equal(out(k)[strlen(out(k)) - 1], '\n');
}

static void test_bytes_and_unknown_total(void **state)
{
	struct fake *k = *state;
	struct progress *p = progress_open(k->f, fake_clock, k, "verify", 0, PROGRESS_BYTES);

	k->now += 2.0;
	progress_set(p, 3ull << 30);
	assert_string_equal(out(k), "\rverify: 3.00 GiB, 1.50 GiB/s");
	progress_finish(p);
}

/* A shorter line covers all of a longer one; clear erases it. */
static void test_pad_and_clear(void **state)
{
	struct fake *k = *state;
	struct progress *p = progress_open(k->f, fake_clock, k, "x", 0, "pages");
	const char *s;

	k->now += 1.0;
	progress_set(p, 123456);
	k->now += 1.0;
	progress_set(p, 123457);          /* same length */
	k->now += 100.0;
	progress_set(p, 123458);          /* rate drops a digit: pads */
	s = strrchr(out(k), '\r');
	assert_string_equal(s, "\rx: 123458 pages, 1210 pages/s ");
	progress_clear(p);
	s = out(k) + strlen(out(k)) - 1;
	assert_int_equal(*s, '\r');
	progress_clear(p);                /* nothing on screen: nothing written */
	assert_int_equal(out(k) + strlen(out(k)) - 1, s);
	progress_cancel(p);
	assert_int_equal(out(k) + strlen(out(k)) - 1, s);
}

/* A command that ends before the first redraw still says what it did. */
static void test_final_only(void **state)
{
	struct fake *k = *state;
	struct progress *p = progress_open(k->f, fake_clock, k, "gc", 10, "pages");

	k->now += 0.1;
	progress_set(p, 10);
	progress_finish(p);
	assert_string_equal(out(k), "gc: 10/10 pages in 0.1 s (100 pages/s)\n");
}

static void test_null_is_silent(void **state)
{
	(void)state;
	progress_set(NULL, 1);
	progress_add(NULL, 1);
	progress_set_total(NULL, 1);
	progress_clear(NULL);
	progress_finish(NULL);
	progress_cancel(NULL);
	assert_null(progress_start(PROGRESS_OFF, "x", 1, "pages"));
	assert_false(progress_wanted(PROGRESS_OFF));
	assert_true(progress_wanted(PROGRESS_ON));
}

static void test_formats(void **state)
{
	char b[32];

	(void)state;
	progress_fmt_bytes(812, b, sizeof(b));
	assert_string_equal(b, "812 B");
	progress_fmt_bytes(1536, b, sizeof(b));
	assert_string_equal(b, "1.50 KiB");
	progress_fmt_bytes(64.0 * 1024 * 1024, b, sizeof(b));
	assert_string_equal(b, "64.0 MiB");
	progress_fmt_bytes(300.0 * 1024 * 1024 * 1024, b, sizeof(b));
	assert_string_equal(b, "300 GiB");
	progress_fmt_secs(44.6, b, sizeof(b));
	assert_string_equal(b, "45s");
	progress_fmt_secs(725, b, sizeof(b));
	assert_string_equal(b, "12m05s");
	progress_fmt_secs(3 * 3600 + 125, b, sizeof(b));
	assert_string_equal(b, "3h02m");
	progress_fmt_secs(-1, b, sizeof(b));
	assert_string_equal(b, "0s");
}

/* Slow work keeps two decimals of its rate; the label may change. */
static void test_slow_steps(void **state)
{
	struct fake *k = *state;
	struct progress *p = progress_open(k->f, fake_clock, k, "bench", 8, "steps");

	k->now += 4.0;
	progress_set_label(p, "bench 64K read fast");
	progress_set(p, 1);
	assert_string_equal(out(k), "\rbench 64K read fast: 1/8 steps (12%), 0.25 steps/s, ETA 28s");
	progress_cancel(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_rate_limited, setup, teardown),
		cmocka_unit_test_setup_teardown(test_line_contents, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bytes_and_unknown_total, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pad_and_clear, setup, teardown),
		cmocka_unit_test_setup_teardown(test_final_only, setup, teardown),
		cmocka_unit_test(test_null_is_silent),
		cmocka_unit_test(test_formats),
		cmocka_unit_test_setup_teardown(test_slow_steps, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
