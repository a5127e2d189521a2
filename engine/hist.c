/*
 * Latency histograms for the metrics files: power-of-two buckets in
 * microseconds, updated with relaxed atomics so recording costs a few
 * nanoseconds on any thread and never takes a lock.
 */
#include "kvfs_i.h"

void kvfs_hist_record(struct kvfs_hist *h, uint64_t ns)
{
	uint64_t us = ns / 1000;
	unsigned i = 0;

	while (i < KVFS_HIST_BUCKETS - 1 && us >= (1ull << i))
		i++;
	atomic_fetch_add_explicit(&h->bucket[i], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->sum_ns, ns, memory_order_relaxed);
}

double kvfs_hist_bound(unsigned i)
{
	if (i >= KVFS_HIST_BUCKETS - 1)
		return 0;
	return (double)(1ull << i) / 1e6;
}
