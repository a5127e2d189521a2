/*
 * Unit tests of the extent store (store/), part two: batched io_uring I/O,
 * checksum verification, fault injection (EIO, short transfers, full
 * stripes), concurrent submitters and read-priority scheduling. See
 * store_fixture.h.
 */
#include <stdatomic.h>

#include "store_fixture.h"

/* ---- I/O ---- */

struct async_done {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int calls;
};

static void on_done(void *arg)
{
	struct async_done *d = arg;

	pthread_mutex_lock(&d->mu);
	d->calls++;
	pthread_cond_signal(&d->cv);
	pthread_mutex_unlock(&d->mu);
}

static void test_batch_io(void **state)
{
	enum { N = 200 };
	struct kv_io *w = calloc(N, sizeof(*w)), *r = calloc(N, sizeof(*r));
	struct async_done d = { PTHREAD_MUTEX_INITIALIZER,
				PTHREAD_COND_INITIALIZER, 0 };
	struct kv_extent ext[N];
	struct kv_store *s;
	struct tstore t;

	tstore_init(&t, "batch", 3, 4 * MIB);
	t.o.queue_depth = 16;  /* fewer slots than ios: exercises the queue */
	s = tstore_open(&t);
	for (unsigned i = 0; i < N; i++) {
		uint64_t len = 1 + (i * 7919u) % (200 * 1024);

		assert_int_equal(kv_extent_alloc(s, len, &w[i].ext), 0);
		w[i].op = KV_IO_WRITE;
		w[i].buf = kv_buf_alloc(len);
		w[i].res = 12345;
		fill_pattern(w[i].buf, len, i);
		ext[i] = w[i].ext;
		r[i].op = KV_IO_READ;
		r[i].ext = w[i].ext;
		r[i].buf = kv_buf_alloc(len);
	}
	assert_int_equal(kv_store_io(s, w, N), 0);
	for (unsigned i = 0; i < N; i++)
		assert_int_equal(w[i].res, 0);
	assert_int_equal(kv_store_sync(s, ext, N), 0);

	assert_int_equal(kv_store_io_async(s, r, N, on_done, &d), 0);
	pthread_mutex_lock(&d.mu);
	while (d.calls == 0)
		pthread_cond_wait(&d.cv, &d.mu);
	pthread_mutex_unlock(&d.mu);
	assert_int_equal(d.calls, 1);
	for (unsigned i = 0; i < N; i++) {
		assert_int_equal(r[i].res, 0);
		assert_memory_equal(r[i].buf, w[i].buf, r[i].ext.length);
		free(w[i].buf);
		free(r[i].buf);
	}
	/* malformed requests queue nothing */
	struct kv_io bad = { .op = KV_IO_READ, .ext = ext[0] };
	bad.buf = (char *)kv_buf_alloc(8192) + 1;
	capture_start();
	assert_int_equal(kv_store_io(s, &bad, 1), -EINVAL);
	capture_stop();
	free((char *)bad.buf - 1);
	assert_int_equal(kv_store_io_async(s, r, 0, on_done, &d), -EINVAL);
	free(w);
	free(r);
	kv_store_close(s);
}

static void test_read_verified(void **state)
{
	uint8_t hash[KV_HASH_LEN];
	struct kv_extent e;
	struct kv_store *s;
	struct tstore t;
	char p[300], hex[2 * KV_HASH_LEN + 1], expect[200];
	void *buf, *out = (void *)1;
	uint64_t len = 70000;
	int fd;

	tstore_init(&t, "verify", 2, MIB);
	s = tstore_open(&t);
	buf = kv_buf_alloc(len);
	write_one(s, len, 7, &e);
	fill_pattern(buf, len, 7);
	kv_hash128(buf, len, hash);

	assert_int_equal(kv_store_read_verified(s, &e, hash, &out), 0);
	assert_non_null(out);
	assert_int_equal((uintptr_t)out % KV_ALIGN, 0);
	assert_memory_equal(out, buf, len);
	kv_buf_put(out, len);

	/* flip one byte on disk behind the store's back */
	seg_path(&t, e.stripe, e.segment, p, sizeof(p));
	fd = open(p, O_WRONLY);
	assert_true(fd >= 0);
	uint8_t flipped = ((uint8_t *)buf)[1234] ^ 0x40;
	assert_int_equal(pwrite(fd, &flipped, 1, (off_t)(e.offset + 1234)), 1);
	assert_int_equal(fsync(fd), 0);
	close(fd);

	capture_start();
	out = (void *)1;
	assert_int_equal(kv_store_read_verified(s, &e, hash, &out),
			 KV_ERR_CHECKSUM);
	capture_stop();
	assert_null(out);
	kv_hash_hex(hash, hex);
	snprintf(expect, sizeof(expect), "checksum mismatch on stripe %u "
		 "segment %u offset %llu length %llu: expected %s got ",
		 e.stripe, e.segment, (unsigned long long)e.offset,
		 (unsigned long long)len, hex);
	assert_non_null(strstr(log_buf, expect));
	free(buf);
	kv_store_close(s);
}

static void test_fault_eio(void **state)
{
	struct kv_io io = { .op = KV_IO_WRITE };
	struct kv_extent e, f;
	struct kv_store *s;
	struct tstore t;

	tstore_init(&t, "fault-eio", 2, MIB);
	s = tstore_open(&t);
	assert_int_equal(kv_extent_alloc(s, 8192, &e), 0);
	io.ext = e;
	io.buf = kv_buf_alloc(8192);
	fill_pattern(io.buf, 8192, 9);

	capture_start();
	kv_store_fault_arm(s, 1u << KV_IO_WRITE, 1, -EIO);
	assert_int_equal(kv_store_io(s, &io, 1), -EIO);
	assert_int_equal(io.res, -EIO);
	/* the fault fired once; the next write goes through */
	assert_int_equal(kv_store_io(s, &io, 1), 0);
	assert_int_equal(io.res, 0);
	check_one(s, &e, 9);

	/* the 2nd read from now fails, the others do not */
	struct kv_io r[3];
	for (unsigned i = 0; i < 3; i++) {
		r[i] = (struct kv_io){ .op = KV_IO_READ, .ext = e };
		r[i].buf = kv_buf_alloc(8192);
	}
	kv_store_fault_arm(s, 1u << KV_IO_READ, 2, -EIO);
	for (unsigned i = 0; i < 3; i++)
		kv_store_io(s, &r[i], 1);
	assert_int_equal(r[0].res, 0);
	assert_int_equal(r[1].res, -EIO);
	assert_int_equal(r[2].res, 0);

	/* a persistent fault: the 2nd and 3rd from the 2nd on fail */
	kv_store_fault_arm_count(s, 1u << KV_IO_READ, 2, -ENOSPC, 2);
	for (unsigned i = 0; i < 3; i++)
		kv_store_io(s, &r[i], 1);
	kv_store_io(s, &r[0], 1);
	assert_int_equal(r[1].res, -ENOSPC);
	assert_int_equal(r[2].res, -ENOSPC);
	assert_int_equal(r[0].res, 0);            /* the 4th: past the count */

	/* an fsync failure reaches the syncer */
	write_one(s, 4096, 1, &f);
	kv_store_fault_arm(s, KV_FAULT_FSYNC, 1, -EIO);
	assert_int_equal(kv_store_sync(s, (struct kv_extent[]){ e, f }, 2),
			 -EIO);
	assert_int_equal(kv_store_sync(s, (struct kv_extent[]){ e, f }, 2), 0);

	/* disarm */
	kv_store_fault_arm(s, 1u << KV_IO_WRITE, 1, -EIO);
	kv_store_fault_arm(s, 0, 0, 0);
	assert_int_equal(kv_store_io(s, &io, 1), 0);
	capture_stop();
	for (unsigned i = 0; i < 3; i++)
		free(r[i].buf);
	free(io.buf);
	kv_store_close(s);
}

static void test_fault_short(void **state)
{
	struct kv_io io = { .op = KV_IO_WRITE };
	struct kv_extent e;
	struct kv_store *s;
	struct tstore t;
	uint64_t len = 300 * 1024 + 17;

	tstore_init(&t, "fault-short", 1, MIB);
	s = tstore_open(&t);
	assert_int_equal(kv_extent_alloc(s, len, &e), 0);
	io.ext = e;
	io.buf = kv_buf_alloc(len);
	fill_pattern(io.buf, len, 11);
	capture_start();
	kv_log_set_level(KV_LOG_DEBUG);
	/* half the footprint is reported written; the rest is retried */
	kv_store_fault_arm(s, 1u << KV_IO_WRITE, 1, 0);
	assert_int_equal(kv_store_io(s, &io, 1), 0);
	assert_non_null(strstr(log_buf, "short write at offset 0 (155648 of "
			       "311296 bytes)"));
	/* -EAGAIN is requeued, not reported */
	kv_store_fault_arm(s, 1u << KV_IO_WRITE, 1, -EAGAIN);
	assert_int_equal(kv_store_io(s, &io, 1), 0);
	free(io.buf);

	log_buf[0] = '\0';
	kv_store_fault_arm(s, 1u << KV_IO_READ, 1, 0);
	check_one(s, &e, 11);
	assert_non_null(strstr(log_buf, "short read"));
	kv_store_fault_arm(s, 1u << KV_IO_READ, 1, -EINTR);
	check_one(s, &e, 11);
	kv_log_set_level(KV_LOG_ERR);
	capture_stop();
	kv_store_close(s);
}

/* kv_store_read_many: every io gets exactly one callback, on this thread,
 * with its own result; short and interrupted reads are retried; a failure
 * fails only its io; malformed ios are reported through the callback. */
struct many_seen {
	pthread_t self;
	struct kv_io *base;
	unsigned calls[64];
	bool other_thread;
};

static void on_each(void *arg, struct kv_io *io)
{
	struct many_seen *m = arg;

	m->calls[io->res == 0 ? (unsigned)(io - m->base) : 63]++;
	if (!pthread_equal(pthread_self(), m->self))
		m->other_thread = true;
}

static void test_read_many(void **state)
{
	enum { N = 40 };
	struct kv_io w[N], r[N];
	struct many_seen m = { .self = pthread_self(), .base = r };
	struct kv_store *s;
	struct tstore t;

	tstore_init(&t, "many", 2, 4 * MIB);
	t.o.queue_depth = 8;    /* fewer ring slots than reads */
	s = tstore_open(&t);
	memset(w, 0, sizeof(w));
	memset(r, 0, sizeof(r));
	for (unsigned i = 0; i < N; i++) {
		uint64_t len = 4096 + (i * 7919u) % (100 * 1024);

		assert_int_equal(kv_extent_alloc(s, len, &w[i].ext), 0);
		w[i].op = KV_IO_WRITE;
		w[i].buf = kv_buf_alloc(len);
		fill_pattern(w[i].buf, len, i);
		r[i].op = KV_IO_READ;
		r[i].ext = w[i].ext;
		r[i].buf = kv_buf_alloc(len);
	}
	assert_int_equal(kv_store_io(s, w, N), 0);
	capture_start();
	kv_store_fault_arm(s, 1u << KV_IO_READ, 3, 0);        /* a short read */
	kv_store_read_many(s, r, N, NULL, on_each, &m);
	for (unsigned i = 0; i < N; i++) {
		assert_int_equal(r[i].res, 0);
		assert_memory_equal(r[i].buf, w[i].buf, r[i].ext.length);
		memset(r[i].buf, 0, r[i].ext.length);
	}
	kv_store_fault_arm(s, 1u << KV_IO_READ, 5, -EINTR);   /* retried */
	memset(m.calls, 0, sizeof(m.calls));
	kv_store_read_many(s, r, N, NULL, on_each, &m);
	for (unsigned i = 0; i < N; i++) {
		assert_int_equal(r[i].res, 0);
		assert_memory_equal(r[i].buf, w[i].buf, r[i].ext.length);
	}
	for (unsigned i = 0; i < N; i++)
		assert_int_equal(m.calls[i], 1);
	assert_int_equal(m.calls[63], 0);
	assert_false(m.other_thread);

	/* One failing read fails alone; a malformed io is reported, not issued. */
	memset(m.calls, 0, sizeof(m.calls));
	r[7].buf = (char *)r[7].buf + 1;
	kv_store_fault_arm(s, 1u << KV_IO_READ, 2, -EIO);
	kv_store_read_many(s, r, N, NULL, on_each, &m);
	capture_stop();
	r[7].buf = (char *)r[7].buf - 1;
	assert_int_equal(r[7].res, -EINVAL);
	assert_int_equal(m.calls[63], 2);
	for (unsigned i = 0, failed = 0; i < N; i++) {
		if (r[i].res == -EIO)
			failed++;
		else if (i != 7)
			assert_int_equal(r[i].res, 0);
		if (i == N - 1)
			assert_int_equal(failed, 1);
	}
	kv_store_read_many(s, r, 0, NULL, on_each, &m);     /* nothing to do */

	/* Into one registered buffer (all but the last io), twice under two
	 * keys for the same memory, and again after the key was forgotten. */
	size_t slot = 128 * 1024;
	char *big = kv_buf_alloc(slot * N);
	struct kv_fixed_buf fb = { big, slot * (N - 1), 42 };
	void *own[N];

	assert_non_null(big);
	for (unsigned i = 0; i < N; i++) {
		own[i] = r[i].buf;
		r[i].buf = i < N - 1 ? big + i * slot : own[i];
	}
	for (unsigned round = 0; round < 3; round++) {
		memset(big, 0xee, slot * N);
		memset(m.calls, 0, sizeof(m.calls));
		kv_store_read_many(s, r, N, &fb, on_each, &m);
		for (unsigned i = 0; i < N; i++) {
			assert_int_equal(r[i].res, 0);
			assert_memory_equal(r[i].buf, w[i].buf, r[i].ext.length);
			assert_int_equal(m.calls[i], 1);
		}
		if (round == 0)
			fb.key = 43;
		else
			kv_store_fixed_forget(43);
	}
	for (unsigned i = 0; i < N; i++)
		r[i].buf = own[i];
	free(big);
	for (unsigned i = 0; i < N; i++) {
		free(w[i].buf);
		free(r[i].buf);
	}
	kv_store_close(s);
}

/* A stripe whose filesystem said ENOSPC is skipped until something frees. */

static void test_stripe_full(void **state)
{
	struct kv_io io = { .op = KV_IO_WRITE };
	struct kv_extent e, other, f;
	struct kv_store *s;
	struct tstore t;

	tstore_init(&t, "stripe-full", 2, MIB);
	s = tstore_open(&t);
	write_one(s, 4096, 1, &other);          /* stripe 0 */
	assert_int_equal(kv_extent_alloc(s, 4096, &e), 0);
	assert_int_equal(e.stripe, 1);
	io.ext = e;
	io.buf = kv_buf_alloc(4096);
	capture_start();
	kv_store_fault_arm(s, 1u << KV_IO_WRITE, 1, -ENOSPC);
	assert_int_equal(kv_store_io(s, &io, 1), -ENOSPC);
	capture_stop();
	assert_non_null(strstr(log_buf, t.dirs[1]));
	for (unsigned i = 0; i < 4; i++) {
		assert_int_equal(kv_extent_alloc(s, 4096, &f), 0);
		assert_int_equal(f.stripe, 0);
	}
	/* space freed on stripe 1: it takes allocations again */
	assert_int_equal(kv_extent_free(s, &e), 0);
	assert_int_equal(kv_extent_alloc(s, 4096, &f), 0);
	assert_int_equal(kv_extent_alloc(s, 4096, &e), 0);
	assert_int_not_equal(f.stripe, e.stripe);
	free(io.buf);
	kv_store_close(s);
}

/* A write failing with EROFS takes its stripe out of allocation at once,
 * EIO only after three in a row; the stripe's extents are still read. */
static void test_stripe_failed(void **state)
{
	struct kv_io io = { .op = KV_IO_WRITE };
	struct kv_stripe_state ss;
	struct kv_extent e, kept, f;
	struct kv_store *s;
	struct tstore t;

	tstore_init(&t, "stripe-failed", 3, MIB);
	s = tstore_open(&t);
	write_one(s, 4096, 1, &kept);           /* stripe 0 */
	write_one(s, 4096, 2, &e);              /* stripe 1 */
	assert_int_equal(e.stripe, 1);
	io.ext = e;                             /* rewrites of the same bytes */
	io.buf = kv_buf_alloc(4096);
	fill_pattern(io.buf, 4096, 2);
	capture_start();
	/* two EIOs on stripe 1 and a success between: still in rotation */
	kv_store_fault_arm(s, 1u << KV_IO_WRITE, 1, -EIO);
	assert_int_equal(kv_store_io(s, &io, 1), -EIO);
	assert_int_equal(kv_store_io(s, &io, 1), 0);
	kv_store_fault_arm_count(s, 1u << KV_IO_WRITE, 1, -EIO, 2);
	assert_int_equal(kv_store_io(s, &io, 1), -EIO);
	assert_int_equal(kv_store_io(s, &io, 1), -EIO);
	assert_int_equal(kv_store_stripe_state(s, 1, &ss), 0);
	assert_int_equal(ss.health, KV_STRIPE_OK);
	assert_int_equal(ss.write_errors, 3);
	/* the third in a row takes it out, with one log line naming it */
	kv_store_fault_arm(s, 1u << KV_IO_WRITE, 1, -EIO);
	assert_int_equal(kv_store_io(s, &io, 1), -EIO);
	assert_int_equal(kv_store_stripe_state(s, 1, &ss), 0);
	assert_int_equal(ss.health, KV_STRIPE_FAILED);
	assert_int_equal(ss.error, -EIO);
	assert_non_null(strstr(log_buf, "taken out of allocation"));
	assert_non_null(strstr(log_buf, t.dirs[1]));
	for (unsigned i = 0; i < 6; i++) {
		assert_int_equal(kv_extent_alloc(s, 4096, &f), 0);
		assert_int_not_equal(f.stripe, 1);
		if (f.stripe == 2) {            /* EROFS: out at the first */
			io.ext = f;
			kv_store_fault_arm(s, 1u << KV_IO_WRITE, 1, -EROFS);
			assert_int_equal(kv_store_io(s, &io, 1), -EROFS);
		}
	}
	capture_stop();
	assert_int_equal(kv_store_stripe_state(s, 2, &ss), 0);
	assert_int_equal(ss.health, KV_STRIPE_FAILED);
	assert_int_equal(ss.error, -EROFS);
	assert_int_equal(kv_store_stripe_state(s, 0, &ss), 0);
	assert_int_equal(ss.health, KV_STRIPE_OK);
	assert_int_equal(kv_store_stripe_state(s, 3, &ss), -EINVAL);
	/* reads and frees on a failed stripe still work */
	check_one(s, &e, 2);
	assert_int_equal(kv_extent_free(s, &e), 0);
	/* with every stripe out, allocation fails with EIO, not ENOSPC */
	io.ext = kept;
	capture_start();
	kv_store_fault_arm(s, 1u << KV_IO_WRITE, 1, -EROFS);
	assert_int_equal(kv_store_io(s, &io, 1), -EROFS);
	assert_int_equal(kv_extent_alloc(s, 4096, &f), -EIO);
	capture_stop();
	assert_non_null(strstr(log_buf, "no stripe left to allocate on"));
	free(io.buf);
	kv_store_close(s);
}

/* ---- concurrency ---- */

struct worker {
	struct kv_store *s;
	unsigned id;
	unsigned errors;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	for (unsigned it = 0; it < 150; it++) {
		struct kv_io io[4];
		void *check = kv_buf_alloc(64 * 1024);

		for (unsigned i = 0; i < 4; i++) {
			uint64_t len = 4096 + (w->id * 1000 + it * 37 + i) % 60000;

			io[i] = (struct kv_io){ .op = KV_IO_WRITE };
			if (kv_extent_alloc(w->s, len, &io[i].ext))
				w->errors++;
			io[i].buf = kv_buf_alloc(len);
			fill_pattern(io[i].buf, len, w->id * 100000 + it * 4 + i);
		}
		if (kv_store_io(w->s, io, 4))
			w->errors++;
		for (unsigned i = 0; i < 4; i++) {
			struct kv_io r = { .op = KV_IO_READ, .ext = io[i].ext,
					   .buf = check };

			if (kv_store_io(w->s, &r, 1) ||
			    memcmp(check, io[i].buf, io[i].ext.length))
				w->errors++;
			if (kv_extent_free(w->s, &io[i].ext))
				w->errors++;
			free(io[i].buf);
		}
		free(check);
	}
	return NULL;
}

static void test_concurrent_io(void **state)
{
	struct worker w[4];
	pthread_t th[4];
	struct kv_store_usage u;
	struct kv_store *s;
	struct tstore t;

	tstore_init(&t, "concurrent", 3, 2 * MIB);
	s = tstore_open(&t);
	for (unsigned i = 0; i < 4; i++) {
		w[i] = (struct worker){ .s = s, .id = i };
		assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]),
				 0);
	}
	for (unsigned i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(w[i].errors, 0);
	}
	kv_store_usage(s, &u);
	assert_int_equal(u.extents, 0);
	assert_int_equal(u.used, 0);
	kv_store_close(s);
}

/* ---- read-priority scheduling ----
 *
 * A reader thread keeps kv_store_read_many batches on the device (its own
 * ring, never the I/O thread's) while the test queues writes. The scheduler
 * must keep writes in flight within the share while reads are active (the
 * stats' peak, and samples taken from the read callbacks), still complete
 * every write (no starvation), and use more than the share once reads are
 * idle. The idle gap is long (500 ms) so a preempted reader on a busy
 * machine still counts as active and the test stays deterministic. */

enum { SCHED_QD = 32, SCHED_SHARE = 2, SCHED_READS = 48, SCHED_WRITES = 96 };
#define SCHED_ENV "write-ops=2,write-kb=64,idle-us=500000"

struct sched_reader {
	struct kv_store *s;
	struct kv_io r[SCHED_READS];
	atomic_bool stop;
	atomic_bool sampling;          /* reads are surely active: check */
	atomic_uint rounds;
	atomic_uint max_writes;        /* writes in flight seen while sampling */
	atomic_uint errors;
};

static void sched_on_read(void *arg, struct kv_io *io)
{
	struct sched_reader *rd = arg;
	struct kv_sched_stats st;

	if (io->res)
		atomic_fetch_add(&rd->errors, 1);
	if (!atomic_load(&rd->sampling))
		return;
	kv_store_sched_stats(rd->s, &st);
	if (st.writes_inflight > atomic_load(&rd->max_writes))
		atomic_store(&rd->max_writes, st.writes_inflight);
}

static void *sched_reader_main(void *arg)
{
	struct sched_reader *rd = arg;

	while (!atomic_load(&rd->stop)) {
		kv_store_read_many(rd->s, rd->r, SCHED_READS, NULL, sched_on_read, rd);
		atomic_fetch_add(&rd->rounds, 1);
	}
	return NULL;
}

/* SCHED_WRITES fresh 16 KiB extents, written in one batch. */
static void sched_write_batch(struct kv_store *s, void *buf)
{
	struct kv_io w[SCHED_WRITES];

	for (unsigned i = 0; i < SCHED_WRITES; i++) {
		w[i] = (struct kv_io){ .op = KV_IO_WRITE, .buf = buf };
		assert_int_equal(kv_extent_alloc(s, 16384, &w[i].ext), 0);
	}
	assert_int_equal(kv_store_io(s, w, SCHED_WRITES), 0);
	for (unsigned i = 0; i < SCHED_WRITES; i++)
		assert_int_equal(kv_extent_free(s, &w[i].ext), 0);
}

static struct kv_store *sched_open(struct tstore *t, const char *name,
				   const char *env, struct sched_reader *rd)
{
	struct kv_store *s;

	tstore_init(t, name, 2, 16 * MIB);
	t->o.queue_depth = SCHED_QD;
	setenv("KVFS_SCHED", env, 1);
	s = tstore_open(t);
	unsetenv("KVFS_SCHED");
	memset(rd, 0, sizeof(*rd));
	rd->s = s;
	for (unsigned i = 0; i < SCHED_READS; i++) {
		struct kv_extent e;

		write_one(s, 65536, i, &e);
		rd->r[i] = (struct kv_io){ .op = KV_IO_READ, .ext = e,
					   .buf = kv_buf_alloc(65536) };
	}
	return s;
}

static void sched_start_reader(struct sched_reader *rd, pthread_t *th)
{
	assert_int_equal(pthread_create(th, NULL, sched_reader_main, rd), 0);
	while (atomic_load(&rd->rounds) < 2)
		usleep(1000);
	atomic_store(&rd->sampling, true);
}

static void sched_stop_reader(struct sched_reader *rd, pthread_t th)
{
	atomic_store(&rd->sampling, false);
	atomic_store(&rd->stop, true);
	pthread_join(th, NULL);
	assert_int_equal(atomic_load(&rd->errors), 0);
	for (unsigned i = 0; i < SCHED_READS; i++)
		free(rd->r[i].buf);
}

static void test_sched_read_first(void **state)
{
	struct sched_reader rd;
	struct kv_sched_stats st;
	struct kv_store *s;
	struct tstore t;
	pthread_t th;
	unsigned rounds;
	void *buf = kv_buf_alloc(16384);

	s = sched_open(&t, "sched", SCHED_ENV, &rd);
	kv_store_sched_stats(s, &st);
	assert_false(st.fifo);
	assert_int_equal(st.write_ops_share, SCHED_SHARE);
	assert_int_equal(st.write_bytes_share, 64 * 1024);
	assert_int_equal(st.idle_us, 500000);

	/* writes complete while the read stream never stops */
	sched_start_reader(&rd, &th);
	for (unsigned b = 0; b < 3; b++)
		sched_write_batch(s, buf);
	rounds = atomic_load(&rd.rounds);
	kv_store_sched_stats(s, &st);
	assert_true(st.writes_issued >= 3 * SCHED_WRITES);
	assert_true(st.writes_peak_reading >= 1);
	assert_true(st.writes_peak_reading <= SCHED_SHARE);
	assert_true(st.writes_peak <= SCHED_SHARE);
	assert_true(st.write_throttled_events > 0);
	assert_true(atomic_load(&rd.max_writes) <= SCHED_SHARE);
	assert_true(st.reads_issued >= 2 * SCHED_READS);
	sched_stop_reader(&rd, th);
	assert_true(atomic_load(&rd.rounds) >= rounds);

	/* reads idle (the gap has passed): writes take the whole depth */
	usleep(550000);
	kv_store_sched_stats(s, &st);
	assert_int_equal(st.reads_inflight, 0);
	sched_write_batch(s, buf);
	kv_store_sched_stats(s, &st);
	assert_true(st.writes_peak > SCHED_SHARE);
	assert_true(st.writes_peak_reading <= SCHED_SHARE);
	assert_int_equal(st.writes_inflight, 0);
	assert_int_equal(st.write_bytes_inflight, 0);
	free(buf);
	kv_store_close(s);
}

/* Reads idle, writes in flight stay within the byte bound (write-max-kb),
 * however many are queued. */
static void test_sched_depth_bound(void **state)
{
	struct sched_reader rd;
	struct kv_sched_stats st;
	struct kv_store *s;
	struct tstore t;
	void *buf = kv_buf_alloc(16384);

	s = sched_open(&t, "sched-bound", "write-max-kb=64", &rd);
	for (unsigned i = 0; i < SCHED_READS; i++)
		free(rd.r[i].buf);
	sched_write_batch(s, buf);
	kv_store_sched_stats(s, &st);
	assert_int_equal(st.write_bytes_max, 64 * 1024);
	assert_int_equal(st.writes_peak, 4);       /* 4 x 16 KiB */
	assert_int_equal(st.write_throttled_events, 0);
	free(buf);
	kv_store_close(s);
}

/* KVFS_SCHED=fifo: nothing is held, so writes exceed the share under reads
 * (this is what the test above would see without the scheduler). */
static void test_sched_fifo(void **state)
{
	struct sched_reader rd;
	struct kv_sched_stats st;
	struct kv_store *s;
	struct tstore t;
	pthread_t th;
	void *buf = kv_buf_alloc(16384);

	s = sched_open(&t, "sched-fifo", "fifo," SCHED_ENV, &rd);
	sched_start_reader(&rd, &th);
	sched_write_batch(s, buf);
	kv_store_sched_stats(s, &st);
	sched_stop_reader(&rd, th);
	assert_true(st.fifo);
	assert_true(st.writes_peak_reading > SCHED_SHARE);
	assert_int_equal(st.write_throttled_events, 0);
	free(buf);
	kv_store_close(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_batch_io),
		cmocka_unit_test(test_read_verified),
		cmocka_unit_test(test_fault_eio),
		cmocka_unit_test(test_fault_short),
		cmocka_unit_test(test_read_many),
		cmocka_unit_test(test_stripe_full),
		cmocka_unit_test(test_stripe_failed),
		cmocka_unit_test(test_concurrent_io),
		cmocka_unit_test(test_sched_read_first),
		cmocka_unit_test(test_sched_depth_bound),
		cmocka_unit_test(test_sched_fifo),
	};

	return cmocka_run_group_tests_name("store_io", tests, group_setup,
					   group_teardown);
}
