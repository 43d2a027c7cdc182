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

/* The run word: the run's generation in the high 32 bits (bumped once per run), RUN_ANY when its
 * slots may be taken by any thread, and in the low bits the next slot not yet taken (runs of
 * sg_threadpool_run_any only). One word, so a worker that wakes late takes a slot of the run it
 * saw or none: a compare-and-swap fails once the caller has moved on. */
#define RUN_GEN(w) ((unsigned)((w) >> 32))
#define RUN_ANY (1ull << 31)
#define RUN_SLOT(w) ((int)((w) & (RUN_ANY - 1)))

struct sg_threadpool {
	int n;         /* threads, caller included */
	worker *workers; /* n - 1 */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int steal;     /* SARAGOSSA_POOL_STEAL: sg_threadpool_run_any lets the caller take late slots */
	_Alignas(64) _Atomic uint64_t run; /* see RUN_GEN */
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
		uint64_t r = atomic_load_explicit(&p->run, memory_order_acquire);
		if (RUN_GEN(r) == seen) {
			uint64_t t0 = sg_time_ns();
			for (int it = 0; RUN_GEN(r) == seen; it++) {
				cpu_relax();
				r = atomic_load_explicit(&p->run, memory_order_acquire);
				if ((it & 255) == 255 && sg_time_ns() - t0 > SPIN_NS) break;
			}
			if (RUN_GEN(r) == seen) {
				pthread_mutex_lock(&p->mu);
				while (RUN_GEN(r = atomic_load_explicit(&p->run, memory_order_acquire)) == seen && !p->stop)
					pthread_cond_wait(&p->cv, &p->mu);
				pthread_mutex_unlock(&p->mu);
			}
		}
		seen = RUN_GEN(r);
		if (p->stop) break;
		if (!(r & RUN_ANY)) { /* a run where every thread does its own slot (it waits for us) */
			p->fn(p->ctx, w->ith, p->n);
			atomic_fetch_add_explicit(&p->n_done, 1, memory_order_acq_rel);
			continue;
		}
		/* take slots of the run we saw while there are any: fn and ctx are that run's, which
		 * cannot end before a slot we took is done */
		while (RUN_GEN(r) == seen && RUN_SLOT(r) < p->n) {
			if (!atomic_compare_exchange_weak_explicit(&p->run, &r, r + 1, memory_order_acq_rel, memory_order_acquire))
				continue;
			p->fn(p->ctx, RUN_SLOT(r), p->n);
			atomic_fetch_add_explicit(&p->n_done, 1, memory_order_acq_rel);
			r = atomic_load_explicit(&p->run, memory_order_acquire);
		}
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
	p->steal = sg_flag_bool("SARAGOSSA_POOL_STEAL");
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
	atomic_store_explicit(&p->run, (uint64_t)(RUN_GEN(atomic_load(&p->run)) + 1) << 32, memory_order_release);
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
	atomic_store_explicit(&p->run, (uint64_t)(RUN_GEN(atomic_load(&p->run)) + 1) << 32, memory_order_release);
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	fn(ctx, 0, p->n);
	int it = 0;
	while (atomic_load_explicit(&p->n_done, memory_order_acquire) != p->n - 1) {
		cpu_relax();
		if (++it > 4096) sched_yield(); /* oversubscribed machine: let the workers run */
	}
}

void sg_threadpool_run_any(sg_threadpool *p, sg_task_fn fn, void *ctx)
{
	if (!p || p->n == 1 || !p->steal) {
		sg_threadpool_run(p, fn, ctx);
		return;
	}
	p->fn = fn;
	p->ctx = ctx;
	atomic_store_explicit(&p->n_done, 0, memory_order_relaxed);
	/* slot 0 is the caller's; the workers take 1.. */
	pthread_mutex_lock(&p->mu);
	uint64_t r = ((uint64_t)(RUN_GEN(atomic_load(&p->run)) + 1) << 32) | RUN_ANY | 1;
	atomic_store_explicit(&p->run, r, memory_order_release);
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	fn(ctx, 0, p->n);
	/* the slots no worker has taken yet: a worker the scheduler keeps off its core (the cores
	 * shared with other work) would otherwise hold up the run by a time slice */
	int mine = 1;
	r = atomic_load_explicit(&p->run, memory_order_acquire);
	while (RUN_SLOT(r) < p->n) {
		if (!atomic_compare_exchange_weak_explicit(&p->run, &r, r + 1, memory_order_acq_rel, memory_order_acquire)) continue;
		fn(ctx, RUN_SLOT(r), p->n);
		mine++;
		r = atomic_load_explicit(&p->run, memory_order_acquire);
	}
	int it = 0;
	while (atomic_load_explicit(&p->n_done, memory_order_acquire) != p->n - mine) {
		cpu_relax();
		if (++it > 4096) sched_yield();
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
	sg_threadpool_run_any(p, range_task, &j);
}
