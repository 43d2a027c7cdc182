/*
 * GEMV bench for the CUDA backend's fused dequantize-GEMV (one token, the decode case).
 *
 * For each weight type and shape it binds the weights through the backend (so the repacked
 * device layouts are what is measured), makes enough distinct copies that one pass over them is
 * several times the 60 MB L2 (every launch reads from HBM, not the cache), records a CUDA graph
 * of launches cycling over the copies (no launch gaps between kernels) and times its replays
 * with events. Reported: weight bytes per launch / time, and that as a percentage of the card's
 * measured device-to-device copy bandwidth (bytes read + written, as the usual definition).
 *
 * Columns: the reference, cuBLAS bf16 GEMV over a pre-dequantized bf16 copy (2 bytes a weight:
 * what a dequantize-then-GEMM design streams), then the backend's kernels as its policy
 * (cuda_policy.h) selects them: f32 activations (sg_cu_gemv without the 8-bit scratch), the 8-bit
 * unit kernel (sg_cu_gemv, block-per-lane off), the fused stage GEMV with its unit kernels
 * (block-per-lane off: mvm_kernel, MLX 4-bit mvw_kernel), with the block-per-lane kernel
 * (mvs_kernel) and with the persistent grid for every launch (mvp_kernel). The kernels measured
 * and removed since (rows per block or warp, activations in shared memory, the copy-engine tiles)
 * are in bench/RESULTS.md with their numbers.
 *
 * Build and run: bench/kernels/cuda/run.sh (needs build/libsaragossa.a built with CUDA=1).
 */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_policy.h"

#define CK(x)                                                                                      \
	do {                                                                                       \
		cudaError_t e_ = (x);                                                              \
		if (e_) {                                                                          \
			fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static uint64_t rng = 12345;
static uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

typedef struct {
	const char *name;
	sg_type type;
	int bits, group;
} btype;

static const btype types[] = {
	{"Q4_K", SG_TYPE_Q4_K, 0, 0}, {"Q8_0", SG_TYPE_Q8_0, 0, 0}, {"BF16", SG_TYPE_BF16, 0, 0},
	{"MLX4 g64", SG_TYPE_MLX_AFFINE, 4, 64}, {"Q6_K", SG_TYPE_Q6_K, 0, 0}, {"Q5_0", SG_TYPE_Q5_0, 0, 0},
	{"MLX8 g64", SG_TYPE_MLX_AFFINE, 8, 64},
};

/* Host bytes of a [N][K] matrix: random codes, scales set to small normal values. */
static sg_btensor host_w(const btype *bt, int64_t N, int64_t K)
{
	sg_btensor t;
	memset(&t, 0, sizeof(t));
	t.type = bt->type;
	t.ne[0] = K, t.ne[1] = N, t.ne[2] = t.ne[3] = 1;
	size_t rb = bt->type == SG_TYPE_MLX_AFFINE ? (size_t)K / 8 * (size_t)bt->bits : sg_type_row_bytes(bt->type, K);
	size_t bytes = rb * (size_t)N;
	uint8_t *m = malloc(bytes);
	for (size_t i = 0; i < bytes; i++) m[i] = (uint8_t)rnd();
	if (bt->type == SG_TYPE_BF16)
		for (size_t i = 0; i < bytes / 2; i++) ((uint16_t *)m)[i] = (uint16_t)(0x3c00 + (rnd() & 0x3ff)) ^ (rnd() & 0x8000);
	const sg_type_info *ti = sg_type_get(bt->type);
	if (bt->type != SG_TYPE_MLX_AFFINE && bt->type != SG_TYPE_BF16) {
		/* every block's f16 scales at 0.01 (Q6_K keeps its d at byte 208) */
		size_t bb = (size_t)ti->block_bytes;
		uint16_t h = sg_f32_to_f16(0.01f);
		for (size_t b = 0; b < bytes / bb; b++) memcpy(m + b * bb + (bt->type == SG_TYPE_Q6_K ? 208 : 0), &h, 2);
	}
	if (bt->type == SG_TYPE_MLX_AFFINE) {
		size_t ng = (size_t)(N * K / bt->group);
		uint16_t *s = malloc(2 * ng), *b = malloc(2 * ng);
		for (size_t i = 0; i < ng; i++) s[i] = sg_f32_to_bf16(0.01f), b[i] = sg_f32_to_bf16(-0.08f);
		t.mlx.bits = bt->bits, t.mlx.group = bt->group, t.mlx.sb_type = SG_TYPE_BF16;
		t.scales = s, t.biases = b;
	}
	t.data = m;
	return t;
}

/* Milliseconds per launch of the graph body (reps launches) replayed `times` times. */
static double time_graph(cudaStream_t s, cudaGraphExec_t ex, int reps, int times)
{
	cudaEvent_t a, b;
	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	CK(cudaGraphLaunch(ex, s)); /* warm-up */
	CK(cudaEventRecord(a, s));
	for (int i = 0; i < times; i++) CK(cudaGraphLaunch(ex, s));
	CK(cudaEventRecord(b, s));
	CK(cudaEventSynchronize(b));
	float ms = 0;
	CK(cudaEventElapsedTime(&ms, a, b));
	cudaEventDestroy(a);
	cudaEventDestroy(b);
	return ms / (double)(reps * times);
}

static double copy_bw(cudaStream_t s)
{
	size_t bytes = (size_t)1 << 30;
	void *src, *dst;
	CK(cudaMalloc(&src, bytes));
	CK(cudaMalloc(&dst, bytes));
	CK(cudaMemset(src, 1, bytes));
	cudaEvent_t a, b;
	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
	CK(cudaEventRecord(a, s));
	for (int i = 0; i < 10; i++) CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
	CK(cudaEventRecord(b, s));
	CK(cudaEventSynchronize(b));
	float ms;
	CK(cudaEventElapsedTime(&ms, a, b));
	cudaFree(src);
	cudaFree(dst);
	return 2.0 * (double)bytes * 10 / (ms * 1e-3) / 1e9;
}

#define MAX_COPIES 64
#define TARGET_BYTES (512u << 20) /* one pass over the copies: ~8x the L2 */

int main(int argc, char **argv)
{
	int quick = argc > 1 && !strcmp(argv[1], "--quick");
	/* GEMV_ONLY=<type name> and GEMV_SHAPE=<0..2> restrict the run (for profilers) */
	const char *only = getenv("GEMV_ONLY"), *shp = getenv("GEMV_SHAPE");
	sg_backend *be = NULL;
	sg_cuda_params p = sg_cuda_default_params();
	if (sg_cuda_backend_create(&p, &be) != SG_OK) {
		fprintf(stderr, "gemv_bench: %s\n", sg_last_error());
		return 1;
	}
	cudaStream_t s;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	cublasHandle_t h;
	if (cublasCreate(&h) || cublasSetStream(h, s)) return 1;
	double bw = copy_bw(s);
	printf("device: %s\ncopy bandwidth (read + write): %.0f GB/s\n\n", sg_cuda_backend_device(be), bw);
	printf("GB/s = weight bytes / time; %% = of the copy bandwidth. cublas: cuBLAS bf16 GEMV over a bf16 copy (2 bytes a weight);\n"
	       "f32: f32 activations; unit8: 8-bit activations, 2 rows a 128-thread block; fused: the fused stage GEMV's unit kernels\n"
	       "(the 8-bit rounding in the launch); lanes: a 256-element block a lane (Q4_K, Q6_K, MLX 4-bit); persist: the same in a\n"
	       "persistent grid, each lane walking the blocks of several rows with the next one's loads in flight.\n\n");
	printf("| type | N x K | MB | cublas GB/s | f32 GB/s | unit8 GB/s | fused GB/s | lanes GB/s | persist GB/s | best us | best %% copy |\n");
	printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
	const sg_cu_policy base = *sg_cu_policy_now();
	static const int64_t shapes[3][2] = {{4096, 4096}, {14336, 4096}, {4096, 14336}};
	int ntypes = (int)(sizeof(types) / sizeof(types[0]));
	float *x, *y;
	CK(cudaMalloc((void **)&x, sizeof(float) * 14336));
	CK(cudaMalloc((void **)&y, sizeof(float) * 14336));
	CK(cudaMemset(x, 0, sizeof(float) * 14336));
	void *q8buf;
	CK(cudaMalloc(&q8buf, sg_cu_q8_bytes(1, 14336)));
	for (int si = 0; si < 3; si++) {
		if (shp && atoi(shp) != si) continue;
		int64_t N = shapes[si][0], K = shapes[si][1];
		/* v0: cuBLAS over bf16 copies */
		int nb = (int)(TARGET_BYTES / (size_t)(N * K * 2)) + 1;
		uint16_t *wb[MAX_COPIES], *xb;
		if (nb > MAX_COPIES) nb = MAX_COPIES;
		for (int c = 0; c < nb; c++) {
			CK(cudaMalloc((void **)&wb[c], (size_t)(N * K) * 2));
			CK(cudaMemset(wb[c], 0x3c, (size_t)(N * K) * 2));
		}
		CK(cudaMalloc((void **)&xb, (size_t)K * 2));
		CK(cudaMemset(xb, 0, (size_t)K * 2));
		CK(cudaDeviceSynchronize());
		const float one = 1, zero = 0;
		cudaGraph_t g;
		cudaGraphExec_t ex;
		int reps = nb * 4;
		CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
		for (int r = 0; r < reps; r++)
			cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, 1, (int)K, &one, wb[r % nb], CUDA_R_16BF, (int)K, xb, CUDA_R_16BF, (int)K, &zero, y,
				     CUDA_R_32F, (int)N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
		CK(cudaStreamEndCapture(s, &g));
		CK(cudaGraphInstantiate(&ex, g, 0));
		double t0 = time_graph(s, ex, reps, quick ? 2 : 5);
		cudaGraphExecDestroy(ex);
		cudaGraphDestroy(g);
		for (int c = 0; c < nb; c++) cudaFree(wb[c]);
		cudaFree(xb);
		for (int ti = 0; ti < ntypes; ti++) {
			if (quick && ti > 3) break;
			const btype *bt = &types[ti];
			if (only && strcmp(only, bt->name)) continue;
			sg_btensor hw = host_w(bt, N, K);
			sg_btensor dw[MAX_COPIES];
			sg_cuw v[MAX_COPIES];
			dw[0] = hw;
			if (be->ops->tensor_bind(be, &dw[0])) {
				fprintf(stderr, "bind %s: %s\n", bt->name, sg_last_error());
				return 1;
			}
			size_t sbb = bt->type == SG_TYPE_MLX_AFFINE ? sg_btensor_mlx_sb_row_bytes(&dw[0]) : 0;
			size_t wbytes = dw[0].row_bytes * (size_t)N + 2 * sbb * (size_t)N;
			int nc = (int)(TARGET_BYTES / wbytes) + 1;
			if (nc > MAX_COPIES) nc = MAX_COPIES;
			for (int c = 1; c < nc; c++) {
				dw[c] = hw;
				if (be->ops->tensor_bind(be, &dw[c])) return 1;
			}
			CK(cudaDeviceSynchronize()); /* the uploads ran on the backend's stream */
			for (int c = 0; c < nc; c++)
				if (sg_cuda_weight_view(&dw[c], &v[c])) return 1;
			enum { NK = 5 };
			double tv[NK] = {0};
			for (int kk = 0; kk < NK; kk++) {
				const int fused = kk >= 2;
				if (kk == 1 && !sg_cu_has_q8(v[0].kt)) continue;
				if (fused && !sg_cu_multi_ok(v[0].kt)) continue;
				if (kk >= 3 && !sg_cu_sb_ok(&v[0])) continue;
				sg_cu_policy pol = base;
				pol.gemv.block_per_lane = kk >= 3;
				pol.gemv.persist = kk == 4 ? SG_CU_PERSIST_ALWAYS : SG_CU_PERSIST_OFF;
				sg_cu_policy_set(&pol);
				reps = nc * 4;
				CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
				for (int r = 0; r < reps; r++) {
					int e;
					if (fused) {
						sg_cu_multi m;
						memset(&m, 0, sizeof(m));
						m.nw = 1, m.epi = SG_CU_EPI_STORE, m.w[0] = v[r % nc], m.N[0] = N, m.y[0] = y;
						e = sg_cu_gemv_multi(&m, x, 0, NULL, 0, 0, NULL, q8buf, (sg_custream)s);
					} else {
						e = sg_cu_gemv(&v[r % nc], x, 1, y, N, NULL, kk ? q8buf : NULL, (sg_custream)s);
					}
					if (e) {
						fprintf(stderr, "launch failed\n");
						return 1;
					}
				}
				CK(cudaStreamEndCapture(s, &g));
				CK(cudaGraphInstantiate(&ex, g, 0));
				tv[kk] = time_graph(s, ex, reps, quick ? 2 : 5);
				cudaGraphExecDestroy(ex);
				cudaGraphDestroy(g);
			}
			sg_cu_policy_set(&base);
			double gb[NK], best = 0, bt_us = 0;
			for (int kk = 0; kk < NK; kk++) {
				gb[kk] = tv[kk] > 0 ? (double)wbytes / (tv[kk] * 1e-3) / 1e9 : 0;
				if (gb[kk] > best) best = gb[kk], bt_us = tv[kk] * 1e3;
			}
			printf("| %s | %lld x %lld | %.1f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.1f | %.0f%% |\n", bt->name, (long long)N, (long long)K,
			       (double)wbytes / 1e6, 2.0 * (double)(N * K) / (t0 * 1e-3) / 1e9, gb[0], gb[1], gb[2], gb[3], gb[4], bt_us, 100 * best / bw);
			fflush(stdout);
			for (int c = 0; c < nc; c++) be->ops->tensor_free(be, &dw[c]);
			free(hw.data);
			free((void *)hw.scales);
			free((void *)hw.biases);
		}
	}
	cublasDestroy(h);
	sg_backend_free(be);
	return 0;
}
