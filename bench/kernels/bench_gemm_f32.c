/* Many-token F32 matmuls at the encoder shapes (all-MiniLM-L6-v2, Whisper tiny: d 384, FFN 1536)
 * on the CPU backend at 1 thread: GFLOP/s per process CPU time, best of R runs, the packed
 * kernel (SARAGOSSA_CPU_GEMM_PACKED=1), the unpacked tile it replaces, and the encoders' panel
 * tile over weights packed at bind (SG_LAYOUT_MATMUL_ONLY, SARAGOSSA_CPU_GEMM_PANEL) taken in turn.
 *
 *   cc -std=c17 -D_GNU_SOURCE -O2 -Iinclude -Isrc bench/kernels/bench_gemm_f32.c build/libsaragossa.a \
 *      -lm -lpthread -ldl -o build/bench/bench_gemm_f32 && build/bench/bench_gemm_f32 [TOKENS] [RUNS] [f32|f16]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_internal.h"
#include "base/flags.h"

static double cpu_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int tensor(sg_backend *be, sg_type type, int64_t n0, int64_t n1, sg_btensor *t)
{
	int64_t ne[4] = {n0, n1, 1, 1};
	if (be->ops->tensor_alloc(be, type, ne, t) != SG_OK) return 1;
	for (int64_t i = 0; i < n0 * n1; i++) {
		float v = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
		if (type == SG_TYPE_F16) ((uint16_t *)t->data)[i] = sg_cpu_f32_to_f16(v);
		else ((float *)t->data)[i] = v;
	}
	return 0;
}

int main(int argc, char **argv)
{
	int64_t T = argc > 1 ? atoll(argv[1]) : 2048;
	int runs = argc > 2 ? atoi(argv[2]) : 5;
	sg_type wt = argc > 3 && !strcmp(argv[3], "f16") ? SG_TYPE_F16 : SG_TYPE_F32; /* the weights' type */
	/* N (rows), K: MiniLM / Whisper tiny projections and MLP, then Whisper's per-head scores (K = head dim
	 * 64, the keys as rows) and their product with V (the head's 64 dims as rows, K = 1500 positions) */
	static const int64_t shapes[5][2] = {{384, 384}, {1536, 384}, {384, 1536}, {1500, 64}, {64, 1500}};
	sg_backend *be[2] = {NULL, NULL};
	for (int p = 0; p < 2; p++) {
		setenv("SARAGOSSA_CPU_GEMM_PACKED", p ? "1" : "0", 1);
		sg_flags_reload();
		sg_cpu_params cp = {1, NULL};
		if (sg_cpu_backend_create(&cp, &be[p]) != SG_OK) return 1;
	}
	printf("kernel set %s, %s weights, %lld tokens, 1 thread, best of %d\n", ((sg_cpu_backend *)be[0])->k->name,
	       wt == SG_TYPE_F16 ? "F16" : "F32", (long long)T, runs);
	printf("| N x K | unpacked tile GFLOP/s | packed GFLOP/s | ratio | panel (bound once) GFLOP/s | panel / packed |\n"
	       "|---|---|---|---|---|---|\n");
	for (int s = 0; s < 5; s++) {
		int64_t N = shapes[s][0], K = shapes[s][1];
		sg_btensor w, x, y;
		if (tensor(be[0], wt, K, N, &w) || tensor(be[0], SG_TYPE_F32, K, T, &x) || tensor(be[0], SG_TYPE_F32, N, T, &y)) return 1;
		sg_btensor wp = w;
		wp.owned = 0;
		wp.layout = SG_LAYOUT_MATMUL_ONLY;
		if (be[1]->ops->tensor_bind(be[1], &wp) != SG_OK) return 1;
		double best[3] = {1e30, 1e30, 1e30};
		for (int r = 0; r < runs; r++)
			for (int p = 0; p < 3; p++) {
				double t0 = cpu_s();
				if (be[p < 2 ? p : 1]->ops->matmul(be[p < 2 ? p : 1], p < 2 ? &w : &wp, &x, NULL, &y) != SG_OK) return 1;
				double dt = cpu_s() - t0;
				if (dt < best[p]) best[p] = dt;
			}
		double f = 2.0 * (double)N * (double)K * (double)T / 1e9;
		printf("| %lld x %lld | %.1f | %.1f | %.2f | %.1f | %.2f |\n", (long long)N, (long long)K, f / best[0], f / best[1],
		       best[0] / best[1], f / best[2], best[1] / best[2]);
		be[1]->ops->tensor_free(be[1], &wp);
		be[0]->ops->tensor_free(be[0], &w);
		be[0]->ops->tensor_free(be[0], &x);
		be[0]->ops->tensor_free(be[0], &y);
	}
	sg_backend_free(be[0]);
	sg_backend_free(be[1]);
	return 0;
}
