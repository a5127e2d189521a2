/*
 * Layers back to the manifest. Once the load is over, with a page budget
 * (-o index_pages): layers unused for UNLOAD_IDLE_TICKS polls go back to
 * the manifest while more pages than the budget are in RAM
 * (index/unload.c), the least recently used first, so that the budget
 * bounds the index's RAM for the whole mount, not only at its start. Each
 * layer is marked under ns_lock, where no change is half made and the
 * committer's order says whether every change queued for it is in the
 * manifest; its pages leave outside it, a step at a time. Runs on the
 * background load's thread (kvfs_load_start's after()).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "kvfs_i.h"

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#define UNLOAD_POLL_MS 1000
#define UNLOAD_IDLE_TICKS 5          /* polls unused before a layer may go */
#define UNLOAD_MAX_LAYERS 64         /* per poll: the stop flag is seen */
#define TRIM_EVERY_S 10.0            /* extents out of RAM at most this often */

static unsigned unload_poll_ms(void)
{
	const char *v = getenv("KVFS_TEST_UNLOAD_POLL_MS");
	unsigned long ms = v ? strtoul(v, NULL, 10) : 0;

	return ms >= 10 && ms <= 60000 ? (unsigned)ms : UNLOAD_POLL_MS;
}

/* One poll: how many pages left RAM. */
static uint64_t unload_cold(struct kvfs *fs, unsigned *layers)
{
	uint64_t ino, pages, all = 0;
	int rc;

	*layers = 0;
	kv_index_unload_tick(fs->idx);
	for (unsigned i = 0; i < UNLOAD_MAX_LAYERS && !kvfs_load_stopping(fs); i++) {
		if (!kv_index_unload_pick(fs->idx, UNLOAD_IDLE_TICKS, kvfs_commit_mark(fs), &ino))
			break;
		pthread_mutex_lock(&fs->ns_lock);
		rc = kv_index_unload_begin(fs->idx, ino, kvfs_commit_mark(fs), UNLOAD_IDLE_TICKS);
		pthread_mutex_unlock(&fs->ns_lock);
		if (rc < 0)
			break;    /* used, or changed, since it was picked: next poll */
		if (kv_index_unload_finish(fs->idx, ino, &pages) < 0)
			break;
		all += pages;
		(*layers)++;
		if (!pages)
			break;    /* what is left waits for its access times to be saved */
	}
	return all;
}

void kvfs_unload_loop(struct kvfs *fs)
{
	unsigned poll = unload_poll_ms(), layers;
	double trimmed = 0;
	bool due = false;
	uint64_t pages, dropped;

	while (!kvfs_load_stopping(fs)) {
		kvfs_load_pause_ms(fs, poll);
		if (kvfs_load_stopping(fs))
			break;
		pages = unload_cold(fs, &layers);
		if (layers) {
			struct kv_index_stats st;

			kv_index_stats(fs->idx, &st);
			kv_log(KV_LOG_INFO, "index: %u layer(s) unused for %.1f s went back to the "
			       "manifest (%" PRIu64 " pages); %" PRIu64 " pages in RAM, budget %"
			       PRIu64 " (index_pages)", layers, UNLOAD_IDLE_TICKS * poll / 1000.0,
			       pages, st.pages - st.pages_unloaded, fs->opts.index_pages);
			due = true;
		}
		/* Then the records of extents only pages out of RAM name. */
		if (due && mono_s() - trimmed >= TRIM_EVERY_S) {
			kv_index_extents_trim(fs->idx, &dropped);
			trimmed = mono_s();
			due = false;
		}
	}
}
