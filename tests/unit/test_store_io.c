/*
 * Unit tests of the extent store (store/), part two: batched io_uring I/O,
 * checksum verification, fault injection (EIO, short transfers, full
 * stripes) and concurrent submitters. See store_fixture.h.
 */
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
	free(out);

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_batch_io),
		cmocka_unit_test(test_read_verified),
		cmocka_unit_test(test_fault_eio),
		cmocka_unit_test(test_fault_short),
		cmocka_unit_test(test_read_many),
		cmocka_unit_test(test_stripe_full),
		cmocka_unit_test(test_concurrent_io),
	};

	return cmocka_run_group_tests_name("store_io", tests, group_setup,
					   group_teardown);
}
