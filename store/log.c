/*
 * Logging and error codes shared by every kvfs module: kv_log() formats one
 * line and hands it to a replaceable sink (default: one atomic write(2) to
 * stderr, so lines from concurrent threads never interleave), kv_strerror()
 * names any 0 / -errno / KV_ERR_* code, and kv_errno() maps a code to the
 * errno the syscall edge (FUSE reply, tool exit status) should report.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "store.h"

#define LOG_LINE_MAX 1024

typedef void (*log_sink_fn)(enum kv_log_level, const char *);

static _Atomic int log_level = KV_LOG_INFO;
static _Atomic(log_sink_fn) log_sink;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static const char *const level_names[] = {
	[KV_LOG_ERR] = "error",
	[KV_LOG_WARN] = "warning",
	[KV_LOG_INFO] = "info",
	[KV_LOG_DEBUG] = "debug",
};

/* KVFS_LOG=error|warning|info|debug sets the initial level. */
static void log_init(void)
{
	const char *env = getenv("KVFS_LOG");
	size_t n = env ? strlen(env) : 0;

	/* Accept any prefix of 3+ letters: "err", "warn", "debug". */
	for (int l = KV_LOG_ERR; n >= 3 && l <= KV_LOG_DEBUG; l++) {
		if (n <= strlen(level_names[l]) &&
		    !strncasecmp(env, level_names[l], n))
			atomic_store(&log_level, l);
	}
}

void kv_log_set_level(enum kv_log_level lvl)
{
	/* Run the env default first so it cannot override this call later. */
	pthread_once(&log_once, log_init);
	atomic_store(&log_level, lvl);
}

void kv_log_set_sink(void (*sink)(enum kv_log_level, const char *line))
{
	atomic_store(&log_sink, sink);
}

static void stderr_sink(enum kv_log_level lvl, const char *line)
{
	char buf[LOG_LINE_MAX + 32];
	int n = snprintf(buf, sizeof(buf), "kvfs: %s: %s\n",
			 level_names[lvl], line);

	if (n < 0)
		return;
	if ((size_t)n >= sizeof(buf)) {
		n = sizeof(buf) - 1;
		buf[n - 1] = '\n';
	}
	/* One write so concurrent lines do not interleave; nothing to do on error. */
	ssize_t w = write(STDERR_FILENO, buf, (size_t)n);
	(void)w;
}

/*
 * Lines quote names and values users chose: a page or directory name may
 * hold a newline and a timestamp (a forged line) or terminal escapes.
 * Every control byte is written as \xNN, in place, the line cut to fit.
 */
static void defang(char *line, size_t cap)
{
	static const char hex[] = "0123456789abcdef";
	char out[LOG_LINE_MAX];
	size_t o = 0;

	for (const unsigned char *c = (const unsigned char *)line; *c && o + 5 < cap; c++) {
		if (*c >= 0x20 && *c != 0x7f) {
			out[o++] = (char)*c;
			continue;
		}
		out[o++] = '\\';
		out[o++] = 'x';
		out[o++] = hex[*c >> 4];
		out[o++] = hex[*c & 15];
	}
	out[o] = 0;
	memcpy(line, out, o + 1);
}

void kv_log(enum kv_log_level lvl, const char *fmt, ...)
{
	char line[LOG_LINE_MAX];
	int saved = errno;  /* callers may log between a syscall and errno use */
	log_sink_fn sink;
	va_list ap;

	pthread_once(&log_once, log_init);
	if ((int)lvl > atomic_load(&log_level) || (int)lvl < KV_LOG_ERR ||
	    lvl > KV_LOG_DEBUG)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	defang(line, sizeof(line));
	sink = atomic_load(&log_sink);
	if (sink)
		sink(lvl, line);
	else
		stderr_sink(lvl, line);
	errno = saved;
}

static pthread_mutex_t limit_lock = PTHREAD_MUTEX_INITIALIZER;

bool kv_log_limit_take(struct kv_log_limit *l, uint64_t *suppressed)
{
	struct timespec ts;
	int64_t now;
	bool ok;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	*suppressed = 0;
	pthread_mutex_lock(&limit_lock);
	if (now - l->window_start_ns >= (int64_t)KV_LOG_LIMIT_WINDOW_S * 1000000000) {
		l->window_start_ns = now;
		l->lines = 0;
	}
	ok = l->lines < KV_LOG_LIMIT_BURST;
	if (ok) {
		l->lines++;
		*suppressed = l->suppressed;
		l->suppressed = 0;
	} else {
		l->suppressed++;
	}
	pthread_mutex_unlock(&limit_lock);
	return ok;
}

const char *kv_strerror(int rc)
{
	static __thread char buf[128];

	switch (rc) {
	case 0:
		return "success";
	case KV_ERR_CORRUPT:
		return "on-disk data failed validation";
	case KV_ERR_SCHEMA:
		return "manifest schema is newer than this kvfs";
	case KV_ERR_NOTSTORE:
		return "not a kvfs store";
	case KV_ERR_MISMATCH:
		return "stripe directory belongs to another store or stripe";
	case KV_ERR_CHECKSUM:
		return "payload checksum mismatch";
	}
	if (rc <= KV_ERR_BASE) {
		snprintf(buf, sizeof(buf), "unknown kvfs error %d", rc);
		return buf;
	}
	/* GNU strerror_r: may return a static string instead of filling buf. */
	return strerror_r(rc < 0 ? -rc : rc, buf, sizeof(buf));
}

int kv_errno(int rc)
{
	switch (rc) {
	case KV_ERR_CHECKSUM:
	case KV_ERR_CORRUPT:
		return EIO;
	case KV_ERR_SCHEMA:
		return EPROTONOSUPPORT;
	case KV_ERR_NOTSTORE:
	case KV_ERR_MISMATCH:
		return EINVAL;
	}
	if (rc <= KV_ERR_BASE)
		return EIO;
	return rc < 0 ? -rc : rc;
}
