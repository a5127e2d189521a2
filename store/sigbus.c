/*
 * SIGBUS guards. Memory the daemon maps from files it does not control the
 * size of (an engine's region, a segment file someone cut short) raises
 * SIGBUS when touched past the file's end. A thread names the mappings it
 * is about to touch (at most KV_GUARDS_PER_THREAD at once, innermost last);
 * a SIGBUS inside one of them replaces that whole mapping with anonymous
 * memory, so the access completes harmlessly, and sets its broken flag for
 * the toucher to find after. A SIGBUS anywhere else kills the process as
 * it would have. One handler for the process, so every module that guards
 * memory shares it.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>

#include "store.h"

static __thread const struct kv_guard *volatile guards[KV_GUARDS_PER_THREAD];
static __thread volatile unsigned nguards;

static void on_sigbus(int sig, siginfo_t *si, void *uctx)
{
	uint8_t *a = si->si_addr;

	(void)sig; (void)uctx;
	/* Only a fault the kernel raised on an access (si_code > 0), not a
	 * SIGBUS someone sent (kill): that one acts as it would have. */
	for (unsigned i = si->si_code > 0 ? nguards : 0; i-- > 0;) {
		const struct kv_guard *g = guards[i];

		if (!g || a < (uint8_t *)g->base || a >= (uint8_t *)g->base + g->len)
			continue;
		/* broken first, then the new mapping: another thread copying
		 * concurrently may read the anonymous zeros, and must then
		 * see broken when it checks after its copy. */
		atomic_store(g->broken, 1);
		if (mmap(g->base, g->len, PROT_READ | PROT_WRITE,
			 MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
		    != MAP_FAILED)
			return;
		break;
	}
	signal(SIGBUS, SIG_DFL);   /* not ours: fail as we would have */
	raise(SIGBUS);
}

void kv_guard_install(void)
{
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	struct sigaction sa, old;

	/* Checked each time rather than once: whoever installed another
	 * handler since (a test harness) would otherwise turn a guarded
	 * SIGBUS back into a crash. Called when a mapping is made, not per
	 * access. */
	pthread_mutex_lock(&mu);
	if (sigaction(SIGBUS, NULL, &old) == 0 && (old.sa_flags & SA_SIGINFO) &&
	    old.sa_sigaction == on_sigbus) {
		pthread_mutex_unlock(&mu);
		return;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigbus;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGBUS, &sa, NULL) < 0)
		kv_log(KV_LOG_WARN, "cannot install the SIGBUS guard: %s; a mapping "
		       "cut short will stop the process", strerror(errno));
	pthread_mutex_unlock(&mu);
}

int kv_guard_begin(const struct kv_guard *g)
{
	if (atomic_load(g->broken))
		return -EFAULT;
	if (nguards >= KV_GUARDS_PER_THREAD)
		return -EDEADLK;   /* a caller nesting deeper than designed */
	guards[nguards] = g;
	atomic_signal_fence(memory_order_seq_cst);
	nguards = nguards + 1;
	atomic_signal_fence(memory_order_seq_cst);
	return 0;
}

int kv_guard_end(const struct kv_guard *g)
{
	/* A full fence: the access's loads and stores happen before broken
	 * is read, also against a SIGBUS handled on another thread. */
	atomic_thread_fence(memory_order_seq_cst);
	nguards = nguards - 1;
	guards[nguards] = NULL;
	atomic_signal_fence(memory_order_seq_cst);
	return atomic_load(g->broken) ? -EFAULT : 0;
}
