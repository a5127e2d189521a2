/*
 * `kvfs bench --cases meta`: metadata at scale. Creates N small pages in
 * one model through fast-path batch writes, then measures what a store of
 * that many pages costs the daemon and the people using it:
 *
 *   RAM     the daemon's VmRSS after creating the pages minus before, per
 *           page, and its VmHWM; again IDLE_WAIT_S later, once the daemon
 *           has given back what the writes freed (it does so after two
 *           idle seconds); the same after a remount, when the daemon
 *           holds only what loading the store gave it (no write buffers)
 *   mount   unmount, drop caches, `kvfs mount` again: seconds until the
 *           mount answers (statfs and stat of the root reach the daemon),
 *           until a first KVFS_IOC_LOOKUP of a page answers (the client's
 *           open and region included, as an engine starting up), until a
 *           durable fast-path WRITE of one new page (in the last layer)
 *           returns, until a durable REPLACE of a page in a middle layer
 *           (with its own bytes) returns, and until the background load is
 *           over (.kvfs/stats)
 *   ls      readdir of one layer (--meta-layer-pages pages, default
 *           100,000) on the fresh mount: the kernel has cached none of it
 *   lookup  every page once through prefix KVFS_IOC_LOOKUP: block-major
 *           descriptors with group = layers, --meta-batch descriptors per
 *           call, from --meta-threads threads: keys per second
 *   fsck    `kvfs fsck STORE` without --verify-data on the unmounted
 *           store, caches dropped: pages per second
 *
 * Pages are named as an engine names its blocks: block b is a hash written
 * as 16 hex digits (--meta-name-digits: up to 64), and the block has a page
 * of that name in every layer. N pages are N / L blocks of L layers, L = N / --meta-layer-pages
 * rounded up (N is rounded down to a multiple of L). Each 4 KiB block of
 * every page carries the page's number, so dedup shares nothing, as with
 * real KV.
 */
#include <sys/statvfs.h>

#include "bench.h"

#define META_MODEL "benchm"
#define META_WRITE_PAGES 4096u   /* pages per KVFS_IOC_WRITE: ~16 MiB of 4 KiB pages */
#define META_MAGIC 0x6b7666732d6d6574ull   /* "kvfs-met" */
#define META_ROW_BYTES 512u      /* manifest bytes per page, generously (disk check) */
#define IDLE_WAIT_S 3            /* the daemon trims its memory after 2 idle seconds */

struct mem {
	uint64_t rss, hwm;           /* bytes */
};

struct meta {
	struct bench *b;
	char model[PATH_MAX + 16];
	unsigned layers, width;      /* width: digits of a layer directory's name */
	unsigned name_digits;        /* a page name's hex digits (16 to 64) */
	unsigned long blocks, pages;
	uint64_t size, stride;
	unsigned threads;
	struct kvfs_client *client;
	/* the running phase: workers take per_call blocks at a time */
	bool lookup;
	unsigned per_call;
	atomic_ulong next, done;     /* next block to take; pages (keys) done */
	atomic_uint finished;        /* workers that returned */
	atomic_int err;
	double *lat;                 /* LOOKUP call seconds */
	atomic_ulong nlat;
	/* results */
	double create_s, mount_s, first_lookup_s, first_write_s, first_replace_s, loaded_s, ls_s,
	       lookup_s, fsck_s;
	struct mem before, created, idle, mounted;
	unsigned long ls_entries, fsck_pages, calls;
	double p50_ms, p99_ms;
	double create_max_call_s;    /* the slowest write call: a stall shows here */
};

struct meta_worker {
	struct meta *m;
	pthread_t th;
	struct kvfs_region *region;
	struct kvfs_batch *kb;
	uint64_t src0;               /* region offset of page slot 0 (writes) */
	double end;                  /* when its last call returned */
	double max_call;             /* its slowest call, seconds */
};

#define NAME_BUF 80              /* a block name: up to 64 hex digits */

static uint64_t splitmix64(uint64_t z)
{
	z += 0x9E3779B97F4A7C15ull;
	z = (z ^ z >> 30) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ z >> 27) * 0x94D049BB133111EBull;
	return z ^ z >> 31;
}

/* splitmix64 is a bijection, so distinct blocks get distinct names that
 * look like an engine's block hashes (no order, no common prefix): 16 hex
 * digits per word, --meta-name-digits of them (SGLang's keys are 64). */
static void block_name(const struct meta *m, unsigned long blk, char *out)
{
	unsigned i;

	for (i = 0; i < m->name_digits / 16; i++)
		snprintf(out + 16 * i, NAME_BUF - 16 * i, "%016llx",
			 (unsigned long long)splitmix64((uint64_t)blk + ((uint64_t)i << 56)));
}

static void layer_path(const struct meta *m, unsigned l, char *out, size_t len)
{
	snprintf(out, len, "%s/%0*u", m->model, (int)m->width, l);
}

static void stamp(char *page, uint64_t size, unsigned long p)
{
	uint64_t off, w[2];

	for (off = 0; off < size; off += BLOCK) {
		w[0] = p;
		w[1] = META_MAGIC ^ off;
		memcpy(page + off, w, size - off < sizeof(w) ? size - off : sizeof(w));
	}
}

/* VmRSS and VmHWM of the daemon, from /proc/PID/status. */
static int daemon_mem(const struct bench *b, struct mem *out)
{
	int rc = daemon_proc_pair(b, "status", "VmRSS", "VmHWM", &out->rss, &out->hwm);

	if (rc == -ENOTSUP)
		bench_err("/proc/%d/status: no VmRSS/VmHWM", (int)b->daemon);
	return rc;
}

/* ---- workers: creating pages, looking them up ---- */

static void worker_teardown(struct meta_worker *w)
{
	if (w->kb)
		kvfs_batch_free(w->kb);
	if (w->region)
		kvfs_region_destroy(w->region);
	w->kb = NULL;
	w->region = NULL;
}

/* A region with the control area for one call, then (writes) a slot per
 * page for its bytes. */
static int worker_setup(struct meta_worker *w, struct meta *m)
{
	unsigned n = m->per_call * m->layers;
	uint64_t ctl = kvfs_batch_ctl_bytes(n);
	size_t size;
	int rc;

	w->src0 = (ctl + BLOCK - 1) / BLOCK * BLOCK;
	size = w->src0 + (m->lookup ? 0 : (size_t)n * m->stride);
	rc = kvfs_region_create(m->client, size, &w->region);
	if (rc < 0) {
		bench_err("meta: kvfs_region_create(%zu bytes): %s", size, strerror(-rc));
		return rc;
	}
	rc = kvfs_batch_new(w->region, 0, n, &w->kb);
	if (rc < 0)
		bench_err("meta: kvfs_batch_new(%u pages): %s", n, strerror(-rc));
	return rc;
}

/* Blocks first .. first+n-1, every layer of each: one write or lookup. */
static int meta_call(struct meta_worker *w, unsigned long first, unsigned n)
{
	struct meta *m = w->m;
	char *base = kvfs_region_base(w->region), name[NAME_BUF];
	struct kvfs_batch_result res;
	unsigned i, l, k = 0;
	double t0, took;
	int rc;

	kvfs_batch_reset(w->kb);
	for (i = 0; i < n; i++) {
		block_name(m, first + i, name);
		for (l = 0; l < m->layers; l++, k++) {
			uint64_t src = w->src0 + (uint64_t)k * m->stride;

			if (!m->lookup)
				stamp(base + src, m->size, (first + i) * m->layers + l);
			rc = m->lookup ? kvfs_batch_add(w->kb, l, name, 0, 0)
				       : kvfs_batch_add(w->kb, l, name, src, m->size);
			if (rc < 0) {
				bench_err("meta: kvfs_batch_add(%s): %s", name, strerror(-rc));
				return rc;
			}
		}
	}
	t0 = now_s();
	rc = m->lookup ? kvfs_batch_lookup(w->kb, m->layers, &res)
		       : kvfs_batch_write(w->kb, 0, &res);
	if (rc < 0) {
		bench_err("meta: %s of %u pages: %s", m->lookup ? "LOOKUP" : "WRITE", k,
			  strerror(-rc));
		return rc;
	}
	took = now_s() - t0;
	if (m->lookup)
		m->lat[atomic_fetch_add(&m->nlat, 1)] = took;
	if (took > w->max_call)
		w->max_call = took;
	for (i = 0; i < k; i++) {
		rc = kvfs_batch_status(w->kb, i, NULL);
		if (rc != 0) {
			block_name(m, first + i / m->layers, name);
			bench_err("meta: %s layer %u page %s: %s", m->lookup ? "LOOKUP" : "WRITE",
				  i % m->layers, name, strerror(-rc));
			return rc;
		}
	}
	/* a lookup's done is the hit length in blocks: all of them exist */
	if (res.done != (m->lookup ? n : k) || res.failed) {
		bench_err("meta: %s of %u blocks: done %u, failed %u", m->lookup ? "LOOKUP"
			  : "WRITE", n, res.done, res.failed);
		return -EPROTO;
	}
	atomic_fetch_add(&m->done, k);
	return 0;
}

static void *worker_main(void *arg)
{
	struct meta_worker *w = arg;
	struct meta *m = w->m;
	unsigned long first;
	int rc = 0, none = 0;

	while (rc == 0 && !interrupted && !atomic_load(&m->err)) {
		first = atomic_fetch_add(&m->next, m->per_call);
		if (first >= m->blocks)
			break;
		rc = meta_call(w, first, m->blocks - first < m->per_call
			       ? (unsigned)(m->blocks - first) : m->per_call);
	}
	if (rc < 0)
		atomic_compare_exchange_strong(&m->err, &none, rc);
	w->end = now_s();
	atomic_fetch_add(&m->finished, 1);
	return NULL;
}

/* Every block once, per_call blocks per call, from m->threads threads;
 * the seconds from the first call to the last answer in *secs. */
static int run_workers(struct meta *m, bool lookup, unsigned per_call, double *secs)
{
	struct meta_worker *w = calloc(m->threads, sizeof(*w));
	unsigned i, started = 0;
	double t0;
	int rc = 0;

	if (!w)
		return -ENOMEM;
	m->lookup = lookup;
	m->per_call = per_call;
	atomic_store(&m->next, 0);
	atomic_store(&m->done, 0);
	atomic_store(&m->finished, 0);
	atomic_store(&m->err, 0);
	for (i = 0; rc == 0 && i < m->threads; i++) {
		w[i].m = m;
		rc = worker_setup(&w[i], m);
	}
	t0 = now_s();
	for (i = 0; rc == 0 && i < m->threads; i++, started++) {
		rc = -pthread_create(&w[i].th, NULL, worker_main, &w[i]);
		if (rc < 0)
			bench_err("meta: pthread_create: %s", strerror(-rc));
	}
	if (rc < 0)
		atomic_store(&m->err, rc);
	/* the status line, while the workers run (the clock is theirs) */
	while (atomic_load(&m->finished) < started) {
		bench_step("meta: %s %lu/%lu pages", lookup ? "LOOKUP" : "creating",
			   atomic_load(&m->done), m->pages);
		usleep(20000);
	}
	*secs = 0;
	if (!lookup)
		m->create_max_call_s = 0;
	for (i = 0; i < started; i++) {
		pthread_join(w[i].th, NULL);
		if (w[i].end - t0 > *secs)
			*secs = w[i].end - t0;
		if (!lookup && w[i].max_call > m->create_max_call_s)
			m->create_max_call_s = w[i].max_call;
	}
	for (i = 0; i < m->threads; i++)
		worker_teardown(&w[i]);
	free(w);
	if (rc == 0)
		rc = atomic_load(&m->err);
	return rc ? rc : check_interrupt();
}

/* ---- the steps ---- */

/* The store's filesystem must hold every footprint and the manifest rows:
 * better refused now than ENOSPC after an hour. */
static int check_space(const struct meta *m)
{
	uint64_t need = m->pages * ((m->size + 4095) / 4096 * 4096 + META_ROW_BYTES);
	struct statvfs sv;

	if (statvfs(m->b->store, &sv) < 0) {
		bench_err("statvfs %s: %s", m->b->store, strerror(errno));
		return -errno;
	}
	if ((uint64_t)sv.f_bavail * sv.f_frsize >= need)
		return 0;
	bench_err("meta: %lu pages of %llu bytes need about %.1f GB on the store's "
		  "filesystem (%s); %.1f GB free", m->pages, (unsigned long long)m->size,
		  (double)need / 1e9, m->b->store,
		  (double)sv.f_bavail * (double)sv.f_frsize / 1e9);
	return -ENOSPC;
}

static int make_meta_layers(struct meta *m)
{
	char path[PATH_MAX + 32];
	unsigned l;
	int rc = make_dir(m->model);

	for (l = 0; rc == 0 && l < m->layers; l++) {
		layer_path(m, l, path, sizeof(path));
		rc = make_dir(path);
	}
	return rc;
}

/* fsync of a layer directory returns once its pages are durable. */
static int sync_meta_layers(const struct meta *m)
{
	char path[PATH_MAX + 32];
	unsigned l;
	int fd, rc = 0;

	for (l = 0; rc == 0 && l < m->layers; l++) {
		layer_path(m, l, path, sizeof(path));
		fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0 || fsync(fd) < 0) {
			rc = -errno;
			bench_err("fsync %s: %s", path, strerror(-rc));
		}
		if (fd >= 0)
			close(fd);
	}
	return rc;
}

static int create_pages(struct meta *m)
{
	unsigned per_call = META_WRITE_PAGES / m->layers;
	int rc;

	bench_step("meta: creating %lu pages", m->pages);
	rc = run_workers(m, false, per_call ? per_call : 1, &m->create_s);
	if (rc == 0) {
		double t0 = now_s();

		rc = sync_meta_layers(m);
		m->create_s += now_s() - t0;
	}
	/* the regions are gone: what the daemon maps of them is not counted */
	if (rc == 0)
		rc = daemon_mem(m->b, &m->created);
	if (rc == 0) {
		sleep(IDLE_WAIT_S);
		rc = daemon_mem(m->b, &m->idle);
	}
	bench_step_done();
	return rc;
}

/* Close the client and unmount (the daemon commits and exits), then drop
 * caches: what follows starts cold. */
static int unmount_cold(struct meta *m)
{
	int rc;

	kvfs_client_close(m->client);
	m->client = NULL;
	rc = stop_daemon(m->b);
	if (rc == 0)
		drop_caches(m->b);
	return rc;
}

/* MOUNT/.kvfs/stats says the index is still loading in the background:
 * 1, 0 (also from a daemon without background loads), or -errno. */
static int index_loading(struct meta *m)
{
	char path[PATH_MAX + 32], buf[16384], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/.kvfs/stats", m->b->mnt);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	p = strstr(buf, "\"loading\":");
	if (!p)
		return 0;    /* a daemon that loads before it answers (KVFS_BENCH_DAEMON) */
	p += strlen("\"loading\":");
	while (*p == ' ')
		p++;
	return *p == '1';
}

/* Wait for the background load to end (changes are accepted from then). */
static int wait_loaded(struct meta *m)
{
	int rc;

	while ((rc = index_loading(m)) == 1)
		usleep(5000);
	if (rc < 0)
		bench_err("reading %s/.kvfs/stats: %s", m->b->mnt, strerror(-rc));
	return rc;
}

/* A durable REPLACE of block 1's page in a middle layer with the bytes it
 * has (the counts stay as they are): a change to a page already there,
 * which waited for the whole load before kvfs took removals meanwhile. */
static int replace_one(struct meta *m, struct kvfs_batch *kb, char *buf, size_t off)
{
	unsigned long block = m->blocks > 1;
	unsigned layer = m->layers / 2;
	struct kvfs_batch_result res;
	char name[NAME_BUF];
	int rc;

	kvfs_batch_reset(kb);
	block_name(m, block, name);
	stamp(buf, m->size, block * m->layers + layer);
	rc = kvfs_batch_add(kb, layer, name, off, m->size);
	if (rc == 0)
		rc = kvfs_batch_write(kb, KVFS_WRITE_DURABLE | KVFS_WRITE_REPLACE, &res);
	if (rc == 0 && res.done != 1) {
		bench_err("meta: after the remount, REPLACE of layer %u page %s: %s", layer,
			  name, strerror(-kvfs_batch_status(kb, 0, NULL)));
		rc = -EPROTO;
	} else if (rc < 0) {
		bench_err("meta: the first REPLACE after the remount: %s", strerror(-rc));
	}
	return rc;
}

/* Unmount, then time a cold mount and a first LOOKUP of block 0 in layer 0
 * (opening the client and its region on the way, as an engine would), and
 * until the background load is over. */
static int remount(struct meta *m)
{
	struct bench *b = m->b;
	struct kvfs_region *r = NULL;
	struct kvfs_batch *kb = NULL;
	struct kvfs_batch_result res;
	size_t data_off = (kvfs_batch_ctl_bytes(1) + 4095) & ~(size_t)4095;
	char name[NAME_BUF];
	double t0;
	int rc;

	bench_step("meta: remounting %lu pages", m->pages);
	rc = unmount_cold(m);
	if (rc < 0)
		return rc;
	t0 = now_s();
	rc = start_daemon_wait(b, 3600, 0.001);
	m->mount_s = now_s() - t0;
	if (rc == 0) {
		rc = kvfs_client_open(m->model, &m->client);
		if (rc < 0)
			bench_err("kvfs_client_open %s: %s", m->model, strerror(-rc));
	}
	if (rc == 0)
		rc = kvfs_region_create(m->client, data_off + m->size, &r);
	if (rc == 0)
		rc = kvfs_batch_new(r, 0, 1, &kb);
	block_name(m, 0, name);
	if (rc == 0)
		rc = kvfs_batch_add(kb, 0, name, 0, 0);
	if (rc == 0)
		rc = kvfs_batch_lookup(kb, 1, &res);
	m->first_lookup_s = now_s() - t0;
	if (rc == 0 && res.done != 1) {
		bench_err("meta: after the remount, LOOKUP of layer 0 page %s: %s", name,
			  strerror(-kvfs_batch_status(kb, 0, NULL)));
		rc = -EPROTO;
	} else if (rc < 0 && m->client) {
		bench_err("meta: the first LOOKUP after the remount: %s", strerror(-rc));
	}
	/* A new page, durable, in the last layer (an engine storing a
	 * prefill right after a restart): fsck and ls allow for it. */
	if (rc == 0) {
		kvfs_batch_reset(kb);
		stamp((char *)kvfs_region_base(r) + data_off, m->size, ~0ul);
		rc = kvfs_batch_add(kb, m->layers - 1, "after-remount", data_off, m->size);
	}
	if (rc == 0)
		rc = kvfs_batch_write(kb, KVFS_WRITE_DURABLE, &res);
	m->first_write_s = now_s() - t0;
	if (rc == 0 && res.done != 1) {
		bench_err("meta: after the remount, WRITE of a new page: %s",
			  strerror(-kvfs_batch_status(kb, 0, NULL)));
		rc = -EPROTO;
	} else if (rc < 0 && kb) {
		bench_err("meta: the first WRITE after the remount: %s", strerror(-rc));
	}
	if (rc == 0)
		rc = replace_one(m, kb, (char *)kvfs_region_base(r) + data_off, data_off);
	m->first_replace_s = now_s() - t0;
	if (kb)
		kvfs_batch_free(kb);
	if (r)
		kvfs_region_destroy(r);
	if (rc == 0)
		rc = wait_loaded(m);
	m->loaded_s = now_s() - t0;
	if (rc == 0)
		rc = daemon_mem(b, &m->mounted);
	bench_step_done();
	return rc;
}

static int list_cold(struct meta *m)
{
	char path[PATH_MAX + 32];
	double t0;
	int rc;

	bench_step("meta: ls of a %lu-page layer", m->blocks);
	drop_caches(m->b);
	layer_path(m, 0, path, sizeof(path));
	t0 = now_s();
	rc = list_layer(path, &m->ls_entries);
	m->ls_s = now_s() - t0;
	if (rc < 0)
		bench_err("readdir %s: %s", path, strerror(-rc));
	else if (m->ls_entries != m->blocks + (m->layers == 1)) {   /* after-remount */
		bench_err("readdir %s: %lu entries, want %lu", path, m->ls_entries,
			  m->blocks + (m->layers == 1));
		rc = -EPROTO;
	}
	bench_step_done();
	return rc;
}

static int lookup_all(struct meta *m)
{
	unsigned per_call = m->b->o->meta_batch / m->layers;
	unsigned long ncalls;
	int rc;

	per_call = per_call ? per_call : 1;
	ncalls = (m->blocks + per_call - 1) / per_call;
	m->lat = calloc(ncalls, sizeof(*m->lat));
	if (!m->lat)
		return -ENOMEM;
	atomic_store(&m->nlat, 0);
	bench_step("meta: LOOKUP of %lu pages", m->pages);
	rc = run_workers(m, true, per_call, &m->lookup_s);
	m->calls = atomic_load(&m->nlat);
	if (rc == 0 && m->calls) {
		m->p50_ms = percentile(m->lat, m->calls, 0.50) * 1e3;
		m->p99_ms = percentile(m->lat, m->calls, 0.99) * 1e3;
	}
	free(m->lat);
	m->lat = NULL;
	bench_step_done();
	return rc;
}

/* `kvfs fsck STORE --json` on the unmounted store, cold. */
static int fsck_store(struct meta *m)
{
	struct bench *b = m->b;
	char *argv[] = { "kvfs", "fsck", b->store, "--json", "-q", NULL };
	char out[4096], *p;
	double t0;
	int rc;

	bench_step("meta: fsck of %lu pages", m->pages);
	rc = unmount_cold(m);
	if (rc < 0)
		return rc;
	t0 = now_s();
	rc = run_tool(b, argv, out, sizeof(out));
	m->fsck_s = now_s() - t0;
	if (rc != 0) {
		bench_err("kvfs fsck %s: exit status %d (output: %.200s; log: %s)", b->store,
			  rc, out, b->log);
		return rc < 0 ? rc : -EIO;
	}
	p = strstr(out, "\"pages\":");
	if (!p || sscanf(p + 8, "%lu", &m->fsck_pages) != 1 || m->fsck_pages < m->pages) {
		bench_err("kvfs fsck %s: no page count of at least %lu in: %.200s", b->store,
			  m->pages, out);
		return -EPROTO;
	}
	bench_step_done();
	return 0;
}

/* ---- the report ---- */

static double per_page(const struct meta *m, const struct mem *after)
{
	return ((double)after->rss - (double)m->before.rss) / (double)m->pages;
}

static void report(const struct meta *m)
{
	double mb = 1e6, per10m = m->mount_s * 1e7 / (double)m->pages;

	bench_progress_clear();
	if (m->b->o->json) {
		printf("{\"event\":\"meta\",\"pages\":%lu,\"page_size\":%llu,\"layers\":%u,"
		       "\"blocks\":%lu,\"threads\":%u,\"create_s\":%.3f,"
		       "\"create_pages_per_s\":%.1f,\"create_max_call_s\":%.4f,"
		       "\"rss_before_bytes\":%llu,"
		       "\"rss_created_bytes\":%llu,\"hwm_created_bytes\":%llu,"
		       "\"ram_bytes_per_page\":%.1f,\"rss_idle_bytes\":%llu,"
		       "\"idle_ram_bytes_per_page\":%.1f,\"rss_mounted_bytes\":%llu,"
		       "\"hwm_mounted_bytes\":%llu,\"mounted_ram_bytes_per_page\":%.1f,"
		       "\"mount_s\":%.4f,\"first_lookup_s\":%.4f,\"first_write_s\":%.4f,"
		       "\"first_replace_s\":%.4f,"
		       "\"mount_s_per_10m_pages\":%.3f,"
		       "\"loaded_s\":%.4f,\"loaded_s_per_10m_pages\":%.3f,"
		       "\"ls_entries\":%lu,\"ls_s\":%.4f,\"cold\":%s,\"lookup_keys\":%lu,"
		       "\"lookup_calls\":%lu,\"lookup_batch\":%u,\"lookup_s\":%.4f,"
		       "\"lookup_keys_per_s\":%.1f,\"lookup_call_p50_ms\":%.3f,"
		       "\"lookup_call_p99_ms\":%.3f,\"fsck_pages\":%lu,\"fsck_s\":%.4f,"
		       "\"fsck_pages_per_s\":%.1f}\n", m->pages,
		       (unsigned long long)m->size, m->layers, m->blocks, m->threads,
		       m->create_s, (double)m->pages / m->create_s, m->create_max_call_s,
		       (unsigned long long)m->before.rss, (unsigned long long)m->created.rss,
		       (unsigned long long)m->created.hwm, per_page(m, &m->created),
		       (unsigned long long)m->idle.rss, per_page(m, &m->idle),
		       (unsigned long long)m->mounted.rss, (unsigned long long)m->mounted.hwm,
		       per_page(m, &m->mounted), m->mount_s, m->first_lookup_s, m->first_write_s,
		       m->first_replace_s, per10m,
		       m->loaded_s, m->loaded_s * 1e7 / (double)m->pages, m->ls_entries, m->ls_s, m->b->cold ? "true" : "false", m->pages,
		       m->calls, m->per_call * m->layers, m->lookup_s,
		       (double)m->pages / m->lookup_s, m->p50_ms, m->p99_ms, m->fsck_pages,
		       m->fsck_s, (double)m->fsck_pages / m->fsck_s);
		fflush(stdout);
		return;
	}
	printf("\nmetadata: %lu pages of %llu bytes in one model, %u layer%s of %lu "
	       "(names: %u hex digits per block), %u threads\n", m->pages,
	       (unsigned long long)m->size, m->layers, m->layers > 1 ? "s" : "", m->blocks,
	       m->name_digits, m->threads);
	printf("  create   %9.2f s  %10.0f pages/s (fast-path batch writes, then fsync;\n"
	       "           slowest write call %.3f s)\n", m->create_s,
	       (double)m->pages / m->create_s, m->create_max_call_s);
	printf("  RAM      before %.1f MB; after creating %.1f MB (HWM %.1f): %.1f B/page;\n"
	       "           idle %d s later %.1f MB: %.1f B/page;\n"
	       "           after a remount %.1f MB (HWM %.1f): %.1f B/page   "
	       "(target <= 64 B/page)\n", (double)m->before.rss / mb,
	       (double)m->created.rss / mb, (double)m->created.hwm / mb,
	       per_page(m, &m->created), IDLE_WAIT_S, (double)m->idle.rss / mb,
	       per_page(m, &m->idle), (double)m->mounted.rss / mb,
	       (double)m->mounted.hwm / mb, per_page(m, &m->mounted));
	printf("  mount    %9.3f s until it answers (it reads models and layers only),\n"
	       "           %.3f s until the first LOOKUP, %.3f s until a new page is\n"
	       "           written durably, %.3f s until a page is replaced durably,\n"
	       "           %.3f s until the whole index is loaded in the background:\n"
	       "           %.1f s per 10M pages (target <= 1 s per 10M pages, or answer\n"
	       "           at once and load in the background)\n", m->mount_s,
	       m->first_lookup_s, m->first_write_s, m->first_replace_s, m->loaded_s,
	       m->loaded_s * 1e7 / (double)m->pages);
	printf("  ls       %9.3f s for %lu entries of one layer%s   (target <= 1 s for "
	       "100,000)\n", m->ls_s, m->ls_entries, m->b->cold ? ", cold" : "");
	printf("  LOOKUP   %9.3f s  %10.0f keys/s (%lu calls of up to %u, group %u; call p50 "
	       "%.2f ms, p99 %.2f ms)   (target >= 1M keys/s)\n", m->lookup_s,
	       (double)m->pages / m->lookup_s, m->calls, m->per_call * m->layers, m->layers,
	       m->p50_ms, m->p99_ms);
	printf("  fsck     %9.3f s  %10.0f pages/s (%lu pages, no --verify-data%s)   "
	       "(target >= 1M pages/s)\n", m->fsck_s, (double)m->fsck_pages / m->fsck_s,
	       m->fsck_pages, m->b->cold ? ", cold" : "");
	fflush(stdout);
}

/* ---- the case ---- */

/*
 * Runs after the other cases, on their store (their pages count for the
 * mount and fsck, not for the per-page figures): it unmounts and remounts,
 * and leaves the daemon stopped.
 */
int meta_case(struct bench *b)
{
	const struct bench_opts *o = b->o;
	struct meta m = { .b = b, .size = o->meta_size, .threads = o->meta_threads,
			  .name_digits = o->meta_name_digits };
	unsigned long v;
	int rc;

	m.layers = (unsigned)((o->meta_pages + o->meta_layer_pages - 1) / o->meta_layer_pages);
	m.blocks = (unsigned long)(o->meta_pages / m.layers);
	m.pages = m.blocks * m.layers;
	m.stride = (m.size + BLOCK - 1) / BLOCK * BLOCK;
	/* layer directories as `kvfs model create` names them: 00, 01, ... */
	for (m.width = 2, v = m.layers - 1; v >= 100; v /= 10)
		m.width++;
	snprintf(m.model, sizeof(m.model), "%s/" META_MODEL, b->mnt);
	rc = check_space(&m);
	if (rc == 0)
		rc = make_meta_layers(&m);
	if (rc == 0) {
		rc = kvfs_client_open(m.model, &m.client);
		if (rc < 0)
			bench_err("kvfs_client_open %s: %s", m.model, strerror(-rc));
	}
	if (rc == 0)
		rc = daemon_mem(b, &m.before);
	if (rc == 0)
		rc = create_pages(&m);
	if (rc == 0)
		rc = remount(&m);
	if (rc == 0)
		rc = list_cold(&m);
	if (rc == 0)
		rc = lookup_all(&m);
	if (rc == 0)
		rc = fsck_store(&m);
	if (m.client)
		kvfs_client_close(m.client);
	if (rc == 0)
		report(&m);
	return rc;
}
