/*
 * Read-priority I/O scheduling: reads before background writes, writes in
 * the slack, with a guaranteed minimum share.
 *
 * Concurrent reads and writes on one SSD lose far more than their sum: the
 * Tutti paper measured mixed traffic collapsing read bandwidth by ~60%. In
 * kvfs, reads are what an engine waits on (a prefix restore stalls decoding)
 * while page writes are write-behind (sealed pages are already visible and
 * served from RAM). So the I/O thread, which issues every payload write,
 * keeps writes to a small share of the device while any reader is active,
 * and lets them use the whole queue depth when reads are idle.
 *
 * Most reads never pass through the I/O thread (kv_store_read_many and
 * kv_store_read_verified use the caller's own ring), so every ring reports
 * its reads here: a store-wide count of reads in flight and the time the
 * last one ended. Reads are "active" while any is in flight and for idle_ns
 * after the last one ends, so the short gaps between an engine's batches
 * (name resolution, the ioctl round trip) do not let a burst of writes fill
 * the device just before the next batch.
 *
 * While reads are active the I/O thread keeps at most write_ops writes and
 * write_bytes bytes of writes in flight, but always at least one: the
 * minimum share, which also goes ahead of reads queued on the I/O thread
 * itself, so writes never starve. With reads idle, writes may use the whole
 * queue depth but at most write_max bytes: enough to keep the device busy
 * (8 MiB measured as fast as 64 MiB for 1 MiB writes), and a bound on what
 * a read arriving after a pause queues behind. fsyncs are never held (a
 * commit waits on them). A thread holding writes back always has one in
 * flight, so a write completion wakes it; it also waits with a timeout so
 * that it refills the queue as soon as reads go idle.
 *
 * KVFS_SCHED (read at store open) is a benchmarking knob:
 *   fifo              no throttling: reads first among queued work on the
 *                     I/O thread only, writes at the full queue depth
 *   read-first        the default
 *   write-ops=N       writes in flight while reads are active (default qd/8)
 *   write-kb=N        KiB of writes in flight while reads are active (1024)
 *   write-max-kb=N    KiB of writes in flight at most, reads idle (8192)
 *   idle-us=N         how long after the last read reads count as idle (2000)
 * e.g. KVFS_SCHED=read-first,write-ops=2,idle-us=500.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "store_i.h"

#define WRITE_BYTES_DEFAULT (1u << 20)
#define WRITE_MAX_DEFAULT (8u << 20)
#define IDLE_NS_DEFAULT 2000000ull
#define HOLD_WAIT_MIN_NS 100000ull

/* ---- configuration ---- */

/* One "key=N" token of KVFS_SCHED; false if it is not one of ours. */
static bool parse_num(const char *tok, const char *key, uint64_t max,
		      uint64_t *out)
{
	size_t n = strlen(key);
	char *end;
	unsigned long long v;

	if (strncmp(tok, key, n) || tok[n] != '=')
		return false;
	errno = 0;
	v = strtoull(tok + n + 1, &end, 10);
	if (errno || end == tok + n + 1 || *end || v > max)
		return false;
	*out = v;
	return true;
}

static bool parse_token(struct sched *sc, const char *tok)
{
	uint64_t v;

	if (!strcmp(tok, "fifo"))
		sc->fifo = true;
	else if (!strcmp(tok, "read-first"))
		sc->fifo = false;
	else if (parse_num(tok, "write-ops", 4096, &v) && v > 0)
		sc->write_ops = (unsigned)v;
	else if (parse_num(tok, "write-kb", 1u << 20, &v))
		sc->write_bytes = v << 10;
	else if (parse_num(tok, "write-max-kb", 1u << 24, &v))
		sc->write_max = v << 10;
	else if (parse_num(tok, "idle-us", 10000000, &v))
		sc->idle_ns = v * 1000;
	else
		return false;
	return true;
}

/* Apply KVFS_SCHED; a token we do not know is logged and ignored. */
static void parse_env(struct sched *sc, const char *env)
{
	char *dup = strdup(env), *save = NULL, *tok;

	if (!dup) {
		kv_log(KV_LOG_WARN, "store: KVFS_SCHED ignored: out of memory");
		return;
	}
	for (tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
		if (!parse_token(sc, tok))
			kv_log(KV_LOG_WARN, "store: KVFS_SCHED: \"%s\" ignored (want "
			       "fifo, read-first, write-ops=N, write-kb=N, "
			       "write-max-kb=N or idle-us=N)", tok);
	free(dup);
}

void sched_init(struct sched *sc, unsigned qd)
{
	const char *env = getenv("KVFS_SCHED");

	sc->fifo = false;
	sc->write_ops = qd / 8 ? qd / 8 : 1;
	sc->write_bytes = WRITE_BYTES_DEFAULT;
	sc->write_max = WRITE_MAX_DEFAULT;
	sc->idle_ns = IDLE_NS_DEFAULT;
	if (env && *env)
		parse_env(sc, env);
	if (sc->fifo)
		kv_log(KV_LOG_INFO, "store: I/O scheduler fifo (KVFS_SCHED): "
		       "writes use the whole queue depth while reads run");
	else
		kv_log(KV_LOG_INFO, "store: I/O scheduler read-first: while reads "
		       "run, writes in flight are kept to %u and %" PRIu64 " KiB "
		       "(at least one), else to %" PRIu64 " KiB; reads count as "
		       "idle %" PRIu64 " us after the last one", sc->write_ops,
		       sc->write_bytes >> 10, sc->write_max >> 10,
		       sc->idle_ns / 1000);
}

/* ---- read activity, reported by every ring ---- */

void sched_read_start(struct sched *sc)
{
	atomic_fetch_add_explicit(&sc->reads_inflight, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&sc->reads_issued, 1, memory_order_relaxed);
}

void sched_read_end(struct sched *sc)
{
	/* The time goes first: the I/O thread never sees no read in flight
	 * together with an old end time, which would read as idle. */
	atomic_store_explicit(&sc->last_read_ns, now_ns(), memory_order_relaxed);
	atomic_fetch_sub_explicit(&sc->reads_inflight, 1, memory_order_release);
}

bool sched_reads_active(const struct sched *sc, uint64_t now)
{
	uint64_t last;

	if (atomic_load_explicit(&sc->reads_inflight, memory_order_acquire))
		return true;
	last = atomic_load_explicit(&sc->last_read_ns, memory_order_relaxed);
	return last && now < last + sc->idle_ns;
}

/* ---- writes: the I/O thread only ---- */

/* Would a write of bytes stay within n writes and max bytes in flight?
 * One write always may go. */
static bool write_fits(const struct sched *sc, unsigned n, uint64_t max,
		       uint64_t bytes)
{
	unsigned w = atomic_load_explicit(&sc->writes_inflight,
					  memory_order_relaxed);
	uint64_t b = atomic_load_explicit(&sc->write_bytes_inflight,
					  memory_order_relaxed);

	return w == 0 || (w < n && b + bytes <= max);
}

bool sched_write_in_share(const struct sched *sc, uint64_t bytes)
{
	return write_fits(sc, sc->write_ops, sc->write_bytes, bytes);
}

bool sched_write_in_depth(const struct sched *sc, uint64_t bytes)
{
	return sc->fifo || write_fits(sc, UINT_MAX, sc->write_max, bytes);
}

static void peak(atomic_uint *p, unsigned v)
{
	if (v > atomic_load_explicit(p, memory_order_relaxed))
		atomic_store_explicit(p, v, memory_order_relaxed);
}

void sched_write_start(struct sched *sc, uint64_t bytes, bool reading)
{
	unsigned n = atomic_load_explicit(&sc->writes_inflight,
					  memory_order_relaxed) + 1;

	atomic_store_explicit(&sc->writes_inflight, n, memory_order_relaxed);
	atomic_fetch_add_explicit(&sc->write_bytes_inflight, bytes,
				  memory_order_relaxed);
	atomic_fetch_add_explicit(&sc->writes_issued, 1, memory_order_relaxed);
	peak(&sc->writes_peak, n);
	if (reading)
		peak(&sc->writes_peak_reading, n);
}

void sched_write_end(struct sched *sc, uint64_t bytes)
{
	atomic_fetch_sub_explicit(&sc->writes_inflight, 1, memory_order_relaxed);
	atomic_fetch_sub_explicit(&sc->write_bytes_inflight, bytes,
				  memory_order_relaxed);
}

void sched_held(struct sched *sc)
{
	sc->held = true;
	atomic_fetch_add_explicit(&sc->throttled, 1, memory_order_relaxed);
}

/*
 * Writes are held back: how long the I/O thread may sleep before it must
 * look again. With reads in flight a write completion or a new request
 * wakes it anyway; idle_ns only bounds the wait. Otherwise it wakes when
 * the quiet gap after the last read runs out. false: look now.
 */
bool sched_hold_timeout(const struct sched *sc, struct __kernel_timespec *ts)
{
	uint64_t now = now_ns(), last;
	/* idle-us=0 must not make the thread spin while reads are in flight */
	uint64_t wait = sc->idle_ns > HOLD_WAIT_MIN_NS ? sc->idle_ns : HOLD_WAIT_MIN_NS;

	if (!atomic_load_explicit(&sc->reads_inflight, memory_order_acquire)) {
		last = atomic_load_explicit(&sc->last_read_ns,
					    memory_order_relaxed);
		if (now >= last + sc->idle_ns)
			return false;
		wait = last + sc->idle_ns - now;
	}
	ts->tv_sec = (long long)(wait / 1000000000ull);
	ts->tv_nsec = (long long)(wait % 1000000000ull);
	return true;
}

/* ---- counters ---- */

void sched_log(const struct sched *sc)
{
	uint64_t w = atomic_load(&sc->writes_issued);

	if (!w)
		return;
	kv_log(KV_LOG_INFO, "store: I/O scheduler %s: %" PRIu64 " reads and %"
	       PRIu64 " writes issued, writes held back %" PRIu64 " times, most "
	       "writes in flight %u (%u while reads were active)",
	       sc->fifo ? "fifo" : "read-first",
	       (uint64_t)atomic_load(&sc->reads_issued), w,
	       (uint64_t)atomic_load(&sc->throttled),
	       atomic_load(&sc->writes_peak), atomic_load(&sc->writes_peak_reading));
}

void kv_store_sched_stats(struct kv_store *s, struct kv_sched_stats *st)
{
	const struct sched *sc = &s->eng.sched;

	*st = (struct kv_sched_stats){
		.fifo = sc->fifo,
		.write_ops_share = sc->write_ops,
		.write_bytes_share = sc->write_bytes,
		.write_bytes_max = sc->write_max,
		.idle_us = sc->idle_ns / 1000,
		.reads_inflight = atomic_load(&sc->reads_inflight),
		.writes_inflight = atomic_load(&sc->writes_inflight),
		.write_bytes_inflight = atomic_load(&sc->write_bytes_inflight),
		.writes_peak = atomic_load(&sc->writes_peak),
		.writes_peak_reading = atomic_load(&sc->writes_peak_reading),
		.reads_issued = atomic_load(&sc->reads_issued),
		.writes_issued = atomic_load(&sc->writes_issued),
		.write_throttled_events = atomic_load(&sc->throttled),
	};
}
