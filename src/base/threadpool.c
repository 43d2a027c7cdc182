#include "base/threadpool.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/flags.h"
#include "base/timer.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

/* How long an idle worker spins before it sleeps: long enough to bridge the serial gaps of a
 * decode step, short enough not to burn a core between requests. */
#define SPIN_NS 200000

typedef struct worker {
	sg_threadpool *pool;
	pthread_t thread;
	int ith;
} worker;

struct sg_threadpool {
	int n;         /* threads, caller included */
	worker *workers; /* n - 1 */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	_Alignas(64) atomic_uint gen; /* bumped once per run */
	_Alignas(64) atomic_int n_done;
	_Alignas(64) atomic_int bar_count;
	atomic_uint bar_phase;
	sg_task_fn fn;
	void *ctx;
	int stop;
};

int sg_cpu_count(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

static void *worker_main(void *arg)
{
	worker *w = arg;
	sg_threadpool *p = w->pool;
	unsigned seen = 0;
	for (;;) {
		/* spin, then sleep, until a new generation (run) or stop */
		unsigned g = atomic_load_explicit(&p->gen, memory_order_acquire);
		if (g == seen) {
			uint64_t t0 = sg_time_ns();
			for (int it = 0; g == seen; it++) {
				cpu_relax();
				g = atomic_load_explicit(&p->gen, memory_order_acquire);
				if ((it & 255) == 255 && sg_time_ns() - t0 > SPIN_NS) break;
			}
			if (g == seen) {
				pthread_mutex_lock(&p->mu);
				while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen && !p->stop)
					pthread_cond_wait(&p->cv, &p->mu);
				pthread_mutex_unlock(&p->mu);
			}
		}
		seen = g;
		if (p->stop) break;
		p->fn(p->ctx, w->ith, p->n);
		atomic_fetch_add_explicit(&p->n_done, 1, memory_order_acq_rel);
	}
	return NULL;
}

sg_status sg_threadpool_create(int n_threads, sg_threadpool **out)
{
	*out = NULL;
	if (n_threads < 0) return SG_FAIL(SG_ERR_INVALID_ARG, "n_threads %d < 0", n_threads);
	if (n_threads == 0) n_threads = (int)sg_flag_int("SARAGOSSA_THREADS");
	if (n_threads <= 0) n_threads = sg_cpu_count();
	if (n_threads > 1024) return SG_FAIL(SG_ERR_INVALID_ARG, "n_threads %d > 1024", n_threads);
	sg_threadpool *p = sg_calloc(1, sizeof(*p));
	if (!p) return SG_FAIL(SG_ERR_NOMEM, "pool of %d threads", n_threads);
	p->n = n_threads;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	p->workers = sg_calloc((size_t)n_threads, sizeof(worker));
	if (!p->workers) {
		sg_threadpool_free(p);
		return SG_FAIL(SG_ERR_NOMEM, "pool of %d threads", n_threads);
	}
	for (int i = 1; i < n_threads; i++) {
		worker *w = &p->workers[i - 1];
		w->pool = p;
		w->ith = i;
		if (pthread_create(&w->thread, NULL, worker_main, w)) {
			p->n = i; /* free joins the ones started */
			sg_threadpool_free(p);
			return SG_FAIL(SG_ERR_NOMEM, "could not start worker thread %d of %d", i, n_threads);
		}
	}
	*out = p;
	return SG_OK;
}

void sg_threadpool_free(sg_threadpool *p)
{
	if (!p) return;
	pthread_mutex_lock(&p->mu);
	p->stop = 1;
	atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	if (p->workers)
		for (int i = 1; i < p->n; i++) pthread_join(p->workers[i - 1].thread, NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	sg_free(p->workers);
	sg_free(p);
}

int sg_threadpool_size(const sg_threadpool *p) { return p ? p->n : 1; }

void sg_threadpool_run(sg_threadpool *p, sg_task_fn fn, void *ctx)
{
	if (!p || p->n == 1) {
		fn(ctx, 0, 1);
		return;
	}
	p->fn = fn;
	p->ctx = ctx;
	atomic_store_explicit(&p->n_done, 0, memory_order_relaxed);
	/* the mutex orders the bump against a worker that is about to sleep */
	pthread_mutex_lock(&p->mu);
	atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	fn(ctx, 0, p->n);
	int it = 0;
	while (atomic_load_explicit(&p->n_done, memory_order_acquire) != p->n - 1) {
		cpu_relax();
		if (++it > 4096) sched_yield(); /* oversubscribed machine: let the workers run */
	}
}

void sg_threadpool_barrier(sg_threadpool *p)
{
	if (!p || p->n == 1) return;
	unsigned phase = atomic_load_explicit(&p->bar_phase, memory_order_acquire);
	if (atomic_fetch_add_explicit(&p->bar_count, 1, memory_order_acq_rel) == p->n - 1) {
		atomic_store_explicit(&p->bar_count, 0, memory_order_relaxed);
		atomic_fetch_add_explicit(&p->bar_phase, 1, memory_order_release);
	} else {
		int it = 0;
		while (atomic_load_explicit(&p->bar_phase, memory_order_acquire) == phase) {
			cpu_relax();
			if (++it > 4096) sched_yield();
		}
	}
}

typedef struct {
	sg_range_fn fn;
	void *ctx;
	int64_t n, chunk;
} range_job;

static void range_task(void *arg, int ith, int nth)
{
	range_job *j = arg;
	int64_t b = (int64_t)ith * j->chunk, e = b + j->chunk;
	if (e > j->n) e = j->n;
	if (b < e) j->fn(j->ctx, b, e, ith);
}

void sg_parallel_for(sg_threadpool *p, int64_t n, int64_t grain, sg_range_fn fn, void *ctx)
{
	if (n <= 0) return;
	if (grain < 1) grain = 1;
	int nth = sg_threadpool_size(p);
	int64_t per = (n + nth - 1) / nth;
	per = (per + grain - 1) / grain * grain;
	range_job j = {fn, ctx, n, per};
	if (per >= n) {
		fn(ctx, 0, n, 0);
		return;
	}
	sg_threadpool_run(p, range_task, &j);
}
