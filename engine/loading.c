/*
 * A mount that answers at once: the index is loaded in the background.
 *
 * kvfs_open (with opts.background_load) loads the models and layers, and
 * numbers new inodes and extent ids above every row; this thread then loads
 * the extents and pages, chunk by chunk, on a manifest connection of its
 * own. Meanwhile reads are served: a lookup or listing in a layer not yet
 * loaded loads that layer first (index/load.c), so nothing a whole index
 * would find is missed.
 *
 * Changes are taken at once too:
 *   - New pages: their bytes go to segment files made since the open (the
 *     store allocates nowhere else before its reclaim), they share no
 *     extent the load is checking (index: frozen_below), and a page into a
 *     layer not loaded yet loads that layer first, so a name taken in a row
 *     is EEXIST as ever.
 *   - Removals, replacements and moves: the layers they touch are loaded
 *     first (the index refuses them in a layer not loaded), so
 *     the walk, which skips the rows of layers loaded whole, brings nothing
 *     back. A page that goes moves its extent's refcount and the load's
 *     count of pages naming it alike; an extent whose last page went is
 *     retired, not dropped (the walk over the snapshot would put it back),
 *     and is still marked at the reclaim after the load. Its space comes
 *     back through the store: freed before the reclaim, the reclaim
 *     returns it (store/reclaim.c); after, it is an ordinary free.
 *   - Eviction and gc: victims come from layers loaded whole
 *     (kv_index_page_walk), and what they free in the segments found at
 *     mount counts at once, though its blocks go back to the disk only at
 *     the reclaim (store/reclaim.c). The evictor frees only what waiting
 *     writers need meanwhile (engine/capacity.c).
 *   - mkdir, times and modes: models and layers are whole from the start.
 *
 * A manifest that proves damaged on the way (a bad row, a refcount that
 * disagrees, PRAGMA quick_check) refuses every change, as a damage the
 * committer finds does; what was read so far is still served (every read
 * is checked against the page's checksum).
 */
#include <errno.h>
#include <malloc.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "kvfs_i.h"

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Test hook: milliseconds to wait before walking, so tests see a mount
 * whose pages are not loaded yet. */
static unsigned test_pause_ms(void)
{
	const char *v = getenv("KVFS_TEST_LOAD_PAUSE_MS");
	unsigned long ms = v ? strtoul(v, NULL, 10) : 0;

	return ms > 600000 ? 600000 : (unsigned)ms;
}

static bool stopping(struct kvfs *fs)
{
	return atomic_load_explicit(&fs->load.stop, memory_order_relaxed);
}

static void pause_ms(struct kvfs *fs, unsigned ms)
{
	while (ms && !stopping(fs)) {
		unsigned step = ms > 50 ? 50 : ms;
		struct timespec ts = { 0, (long)step * 1000000 };

		nanosleep(&ts, NULL);
		ms -= step;
	}
}

bool kvfs_load_stopping(struct kvfs *fs)
{
	return stopping(fs);
}

void kvfs_load_pause_ms(struct kvfs *fs, unsigned ms)
{
	pause_ms(fs, ms);
}

static void finish(struct kvfs *fs, int rc)
{
	atomic_store(&fs->load.ms, (uint64_t)((mono_s() - fs->load.t0) * 1000));
	pthread_mutex_lock(&fs->load.lock);
	atomic_store(&fs->load.err, rc);
	atomic_store(&fs->load.loading, false);
	pthread_mutex_unlock(&fs->load.lock);
}

static int quick_check(struct kv_manifest *m, void *arg)
{
	(void)arg;
	return kv_manifest_quick_check(m);
}

static int shrink(struct kv_manifest *m, void *arg)
{
	(void)arg;
	kv_manifest_shrink(m);
	return 0;
}

static void *load_main(void *arg)
{
	struct kvfs *fs = arg;
	int rc;

	pthread_setname_np(pthread_self(), "kvfs-load");
	pause_ms(fs, test_pause_ms());
	while ((rc = kv_index_load_step(fs->load.loader)) == 1)
		if (stopping(fs)) {
			rc = -ECANCELED;
			break;
		}
	/* Its snapshot would keep the WAL from being checkpointed. After a
	 * failure, layers the walk did not reach give EIO from now on. */
	kv_index_load_end(fs->load.loader);
	/* On the loader's connection, which layers left in the manifest
	 * (-o index_pages) still load through: never at the same time. */
	if (rc == 0 && !stopping(fs))
		rc = kv_index_loader_use(fs->load.loader, quick_check, NULL);
	if (rc == 0 && !stopping(fs))
		rc = fs->load.ready(fs);
	/* Once the reclaim has marked them: the records of extents only the
	 * layers left in the manifest name (-o index_pages) leave RAM, copied
	 * in steps that each hold the index's lock well under a millisecond.
	 * A failure (no memory for the copy, or the index changing faster
	 * than it keeps up) changes nothing and is not tried again this
	 * mount. */
	if (rc == 0 && !stopping(fs)) {
		uint64_t dropped;

		kv_index_extents_trim(fs->idx, &dropped);
	}
	/* The connection stays open until unmount, but nothing reads much
	 * through it any more: its page cache (64 MiB, filled by the walk,
	 * the layers loaded on demand and quick_check) goes back now. glibc
	 * keeps freed small blocks resident inside its arenas (the cache's
	 * pages, the walk's row buffers), so trim them too: once per mount,
	 * 7 ms at 1M pages (docs/benchmarks/scale.md, "The loader's memory
	 * given back, and one layer read by inode"). */
	kv_index_loader_use(fs->load.loader, shrink, NULL);
	if (!stopping(fs))       /* not in the way of an unmount */
		malloc_trim(0);
	if (rc == -ECANCELED || stopping(fs)) {
		finish(fs, -ECANCELED);
		return NULL;
	}
	if (rc == 0) {
		struct kv_index_stats st;

		kv_index_stats(fs->idx, &st);
		kv_log(KV_LOG_INFO, "index of %s loaded in the background: %" PRIu64
		       " pages, %" PRIu64 " extents in %.1f s; %" PRIu64 " of the pages, in %"
		       PRIu64 " layers, stay in the manifest until used (index_pages)",
		       fs->store_dir, st.pages, st.extents, mono_s() - fs->load.t0,
		       st.pages_unloaded, st.layers_unloaded);
		if (st.empty_pages)   /* a store made before this charge may now be full */
			kv_log(KV_LOG_INFO, "%" PRIu64 " empty pages are charged %" PRIu64
			       " bytes of the capacity (4 KiB each)", st.empty_pages,
			       st.empty_pages * KV_ALIGN);
	} else {
		kv_log(KV_LOG_ERR, "cannot finish loading the index of %s: %s; it serves "
		       "what was loaded, and refuses every change (EIO)", fs->store_dir,
		       kv_strerror(rc));
		if (rc == KV_ERR_CORRUPT)
			fs->load.damaged(fs, rc);
	}
	finish(fs, rc);
	if (rc == 0 && fs->load.after)
		fs->load.after(fs);
	return NULL;
}

int kvfs_load_start(struct kvfs *fs, int (*ready)(struct kvfs *fs),
		    void (*damaged)(struct kvfs *fs, int err), void (*after)(struct kvfs *fs))
{
	int rc;

	fs->load.ready = ready;
	fs->load.damaged = damaged;
	fs->load.after = after;
	pthread_mutex_init(&fs->load.lock, NULL);
	fs->load.inited = true;
	fs->load.t0 = mono_s();
	rc = kv_manifest_open(fs->store_dir, &fs->load.man);
	kv_index_set_page_budget(fs->idx, fs->opts.index_pages);
	if (rc == 0)
		rc = kv_index_load_begin(fs->idx, fs->load.man, &fs->load.loader);
	if (rc < 0)
		return rc;
	atomic_store(&fs->load.loading, true);
	rc = -pthread_create(&fs->load.thread, NULL, load_main, fs);
	if (rc < 0) {
		atomic_store(&fs->load.loading, false);
		return rc;
	}
	fs->load.running = true;
	return 0;
}

void kvfs_load_cancel(struct kvfs *fs)
{
	if (!fs->load.inited)
		return;
	pthread_mutex_lock(&fs->load.lock);
	atomic_store(&fs->load.stop, true);
	pthread_mutex_unlock(&fs->load.lock);
}

void kvfs_load_stop(struct kvfs *fs)
{
	if (!fs->load.inited)
		return;
	kvfs_load_cancel(fs);
	if (fs->load.running) {
		pthread_join(fs->load.thread, NULL);
		fs->load.running = false;
	}
	/* The walk may have been cut short, or left layers in the manifest:
	 * none is loaded from now on. */
	kv_index_load_close(fs->load.loader);
	pthread_mutex_lock(&fs->load.lock);
	if (atomic_load(&fs->load.loading)) {
		atomic_store(&fs->load.err, -ECANCELED);
		atomic_store(&fs->load.loading, false);
	}
	pthread_mutex_unlock(&fs->load.lock);
}

void kvfs_load_free(struct kvfs *fs)
{
	if (!fs->load.inited)
		return;
	kv_manifest_close(fs->load.man);
	fs->load.man = NULL;
	pthread_mutex_destroy(&fs->load.lock);
	fs->load.inited = false;
}

int kvfs_load_result(struct kvfs *fs)
{
	if (!fs->load.inited || atomic_load(&fs->load.loading))
		return 0;
	return atomic_load(&fs->load.err);
}

bool kvfs_loading(struct kvfs *fs)
{
	return atomic_load_explicit(&fs->load.loading, memory_order_relaxed);
}

uint64_t kvfs_load_ms(struct kvfs *fs)
{
	if (!fs->load.inited)
		return 0;
	if (kvfs_loading(fs))
		return (uint64_t)((mono_s() - fs->load.t0) * 1000);
	return atomic_load(&fs->load.ms);
}
