/* Threadpool: persistent workers for the kernels. The caller is thread 0; a run hands the same
 * function to every thread and returns when all have finished. Workers spin briefly between runs
 * (a decode step issues hundreds of runs a few microseconds apart) and then sleep. */
#ifndef SG_BASE_THREADPOOL_H
#define SG_BASE_THREADPOOL_H

#include <stdint.h>

#include "saragossa.h"

typedef struct sg_threadpool sg_threadpool;

typedef void (*sg_task_fn)(void *ctx, int ith, int nth);
typedef void (*sg_range_fn)(void *ctx, int64_t begin, int64_t end, int ith);

/* n_threads counts the caller; 0 takes SARAGOSSA_THREADS, else the number of online cores.
 * *out is owned by the caller (sg_threadpool_free). */
sg_status sg_threadpool_create(int n_threads, sg_threadpool **out);
void sg_threadpool_free(sg_threadpool *pool);
/* Number of threads, caller included; 1 for a NULL pool. */
int sg_threadpool_size(const sg_threadpool *pool);

/* Runs fn(ctx, ith, nth) on every thread; a NULL pool runs fn(ctx, 0, 1) on the caller.
 * Not reentrant: one run at a time per pool. No allocation. */
void sg_threadpool_run(sg_threadpool *pool, sg_task_fn fn, void *ctx);

/* As sg_threadpool_run, for an fn that never calls sg_threadpool_barrier: its slots (ith) go to
 * whichever thread takes them first, and once the caller has done slot 0 it runs itself every
 * slot no worker has started, so a worker held off its core by other work does not hold up the
 * run (SARAGOSSA_POOL_STEAL=0: sg_threadpool_run). Each slot still runs exactly once. */
void sg_threadpool_run_any(sg_threadpool *pool, sg_task_fn fn, void *ctx);

/* Inside a run: every thread must call it; none returns until all have arrived. */
void sg_threadpool_barrier(sg_threadpool *pool);

/* Splits [0, n) into one contiguous range per thread (ranges a multiple of `grain`, except the
 * last) and calls fn on each non-empty range (through sg_threadpool_run_any: fn must not wait at
 * a barrier, and two ranges may run on one thread). Deterministic: the split depends only on n, grain
 * and the thread count. */
void sg_parallel_for(sg_threadpool *pool, int64_t n, int64_t grain, sg_range_fn fn, void *ctx);

/* Number of online CPU cores (at least 1). */
int sg_cpu_count(void);

#endif
