/* A many-token matmul of few rows at 2 threads, its tokens shared out or not
 * (SARAGOSSA_CPU_GEMM_SPLIT_TOKENS): Whisper tiny's per-head scores times V, 64 rows (the head's
 * dims) x K = 1500 positions x 1500 tokens, F32. Best wall time of 30 interleaved runs each: on
 * cores shared with other work the best run is the one where both threads had a core.
 *
 *   cc -std=c17 -D_GNU_SOURCE -O2 -Iinclude -Isrc bench/kernels/bench_gemm_split.c build/libsaragossa.a \
 *      -lm -lpthread -ldl -o build/bench/bench_gemm_split && build/bench/bench_gemm_split
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_internal.h"
#include "base/flags.h"

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int tensor(sg_backend *be, int64_t n0, int64_t n1, sg_btensor *t)
{
	int64_t ne[4] = {n0, n1, 1, 1};
	if (be->ops->tensor_alloc(be, SG_TYPE_F32, ne, t) != SG_OK) return 1;
	float *p = t->data;
	for (int64_t i = 0; i < n0 * n1; i++) p[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
	return 0;
}

int main(void)
{
	sg_backend *be[2];
	for (int s = 0; s < 2; s++) {
		setenv("SARAGOSSA_CPU_GEMM_SPLIT_TOKENS", s ? "1" : "0", 1);
		sg_flags_reload();
		sg_cpu_params cp = {2, NULL};
		if (sg_cpu_backend_create(&cp, &be[s]) != SG_OK) return 1;
	}
	sg_btensor w, x, y; /* w [64][1500] (V^T), x [1500][1500] (the scores), y [1500][64] */
	if (tensor(be[0], 1500, 64, &w) || tensor(be[0], 1500, 1500, &x) || tensor(be[0], 64, 1500, &y)) return 1;
	double best[2] = {1e30, 1e30};
	for (int r = 0; r < 30; r++)
		for (int s = 0; s < 2; s++) {
			double t0 = now_s();
			if (be[s]->ops->matmul(be[s], &w, &x, NULL, &y) != SG_OK) return 1;
			double dt = now_s() - t0;
			if (dt < best[s]) best[s] = dt;
		}
	printf("kernel set %s, 64 x 1500 x 1500 tokens, 2 threads, best wall of 30: rows only %.2f ms, tokens shared %.2f ms (%.2fx)\n",
	       ((sg_cpu_backend *)be[0])->k->name, best[0] * 1e3, best[1] * 1e3, best[0] / best[1]);
	be[0]->ops->tensor_free(be[0], &w);
	be[0]->ops->tensor_free(be[0], &x);
	be[0]->ops->tensor_free(be[0], &y);
	sg_backend_free(be[0]);
	sg_backend_free(be[1]);
	return 0;
}
