/*
 * The engine's background index load (engine/loading.c): its state, kept
 * in struct kvfs, and the calls the rest of the engine makes. Internal to
 * the engine; included by kvfs_i.h.
 */
#ifndef KVFS_LOADING_H
#define KVFS_LOADING_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "index.h"
#include "manifest.h"

struct kvfs;

/* Loading the index in the background (engine/loading.c). */
struct kvfs_load {
	struct kv_manifest *man;          /* the loader's own connection */
	struct kv_index_loader *loader;
	pthread_t thread;
	bool inited, running;
	_Atomic bool loading;             /* the walk or its last steps run */
	_Atomic bool stop;                /* closing: give up the walk */
	pthread_mutex_t lock;             /* err with loading */
	_Atomic int err;                  /* 0, or why changes are refused */
	int (*ready)(struct kvfs *fs);    /* kvfs_load_start's callbacks */
	void (*damaged)(struct kvfs *fs, int err);
	void (*after)(struct kvfs *fs);
	double t0;                        /* when it began (CLOCK_MONOTONIC s) */
	_Atomic uint64_t ms;              /* how long it took, once done */
};

/* engine/loading.c: the index loaded in the background (opts.background_load).
 * start: after the committer and evictor exist; once every row is in,
 * ready() runs on the loader's thread before changes are let through, and
 * damaged() is told of a damaged manifest (callbacks: loading.c sits below
 * the files that start it and those it reports to); after() (may be NULL)
 * runs on it once the load succeeded, until kvfs_load_stopping (it waits
 * with kvfs_load_pause_ms, which returns early then); stop: first thing at close;
 * free: after the index is freed. Nothing waits for the load: every change
 * goes ahead meanwhile (see loading.c). kvfs_loading: the walk is still
 * going (stats). */
int kvfs_load_start(struct kvfs *fs, int (*ready)(struct kvfs *fs),
		    void (*damaged)(struct kvfs *fs, int err), void (*after)(struct kvfs *fs));
bool kvfs_load_stopping(struct kvfs *fs);
void kvfs_load_pause_ms(struct kvfs *fs, unsigned ms);
void kvfs_load_stop(struct kvfs *fs);
void kvfs_load_free(struct kvfs *fs);
bool kvfs_loading(struct kvfs *fs);
/* 0 while loading, without one, or after one that succeeded; its error once
 * it failed or was stopped. */
int kvfs_load_result(struct kvfs *fs);
/* Unmounting: the walk gives up at its next step. */
void kvfs_load_cancel(struct kvfs *fs);
uint64_t kvfs_load_ms(struct kvfs *fs);   /* so far, or in all; 0 without */

#endif
