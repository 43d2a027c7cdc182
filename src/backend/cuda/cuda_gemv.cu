/*
 * The GEMV kernels of the CUDA backend (weights times one or a few tokens' activations): the unit
 * kernels (mv_kernel on f32 activations, mvq_kernel on 8-bit ones) for up to 8 tokens and the
 * grouped expert GEMV, and the fused one-token stage GEMVs (up to three matrices sharing the input,
 * with a store, GLU or residual-add epilogue): mvm_kernel (a block's threads split a few rows'
 * units), mvw_kernel (MLX 4-bit rows outside the block-per-lane layout: rows per warp), mvs_kernel
 * (the block-per-lane kernel of the planar Q4_K / Q6_K / MLX 4-bit rows) and mvp_kernel (the
 * same in a persistent grid). gemv_choose picks one for a stage from the policy (cuda_policy.h).
 *
 * Byte counts: a GEMV must stream the whole weight matrix once (N * row_bytes); the activations
 * (K bytes at 8 bits, plus a scale and two half sums per 32) are re-read by every block but stay
 * in L2 (and are staged in shared memory by the block-per-lane kernels). Batch-1 decode is
 * therefore bound by HBM bandwidth, and a kernel's job is to keep enough 16-byte loads in flight
 * with little work per byte: the unit kernels spend ~14 loads per 16 bytes of 4-bit codes on
 * scales and activations, the block-per-lane ones 12-14 loads per 144-210 bytes.
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "backend/cuda/cuda_gemv.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_policy.h"
#include "backend/cuda/cuda_q8.cuh"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/cuda_sb.cuh"

SG_CU_TRACE_FILE(gemv)

#define WARPS 8 /* warps (rows) per unit-kernel block: 256 threads */
/* The most weight bytes a launch loading its units before the wait takes (SARAGOSSA_CUDA_GEMV_PRE).
 * Measured on an H200: the BF16 projections of Qwen3-8B (33 to 200 MB a launch) 5.5% slower with
 * every launch doing it (the registers the loads hold cost more blocks an SM than the early loads
 * win). */
#define PRE_MAX_BYTES ((size_t)4 << 20)

/*
 * The GEMV: warp `warp` of block b owns rows [(b*WARPS + warp)*R, +R). Each lane walks the row's
 * units with stride 32 (consecutive lanes read consecutive 16-byte pieces: coalesced), decodes
 * them once and dots them with up to NT tokens. MoE (start != NULL): blockIdx.y picks a used
 * expert; its slots come from the sorted list.
 */
template <int KT, int NT, int R>
__global__ void __launch_bounds__(WARPS * 32) mv_kernel(sg_cuw w, const float *__restrict__ x, int64_t n, float *__restrict__ y, int64_t N,
							const float *__restrict__ bias, const int32_t *start, const int32_t *order,
							const int32_t *used, const int32_t *nused, int64_t moe_k, int shared_x)
{
	typedef U<KT> T;
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int64_t r0 = ((int64_t)blockIdx.x * WARPS + warp) * R;
	if (r0 >= N) return;
	const uint8_t *data = w.data, *sc = w.scales, *bi = w.biases;
	const int32_t *list = NULL;
	int64_t cnt = n;
	if (start) {
		if ((int)blockIdx.y >= *nused) return;
		int e = used[blockIdx.y];
		data += (size_t)e * w.expert_bytes;
		if (sc) sc += (size_t)e * w.expert_sb_bytes, bi += (size_t)e * w.expert_sb_bytes;
		list = order + start[e];
		cnt = start[e + 1] - start[e];
	}
	const int64_t nu = w.K / T::E, K = w.K;
	for (int64_t c0 = 0; c0 < cnt; c0 += NT) {
		int nt = cnt - c0 < NT ? (int)(cnt - c0) : NT;
		const float *xp[NT];
#pragma unroll
		for (int t = 0; t < NT; t++) {
			int64_t s = t < nt ? (list ? list[c0 + t] : c0 + t) : 0;
			int64_t xi = list && shared_x ? s / moe_k : s;
			xp[t] = x + xi * K;
		}
		float acc[R][NT];
#pragma unroll
		for (int rr = 0; rr < R; rr++)
#pragma unroll
			for (int t = 0; t < NT; t++) acc[rr][t] = 0.0f;
#pragma unroll 2
		for (int64_t u = lane; u < nu; u += 32) {
			float wv[R][T::E];
			int64_t e0 = 0;
#pragma unroll
			for (int rr = 0; rr < R; rr++) {
				int64_t r = r0 + rr < N ? r0 + rr : r0;
				const uint8_t *rsc = sc ? sc + (size_t)r * w.sb_row_bytes : NULL, *rbi = bi ? bi + (size_t)r * w.sb_row_bytes : NULL;
				e0 = T::dq(w, data + (size_t)r * w.row_bytes, rsc, rbi, u, wv[rr]);
			}
#pragma unroll
			for (int t = 0; t < NT; t++) {
				if (t < nt) {
					float xv[T::E];
					load_x<KT>(xp[t], e0, xv);
#pragma unroll
					for (int rr = 0; rr < R; rr++) {
						float a = 0.0f;
#pragma unroll
						for (int i = 0; i < T::E; i++) a = fmaf(wv[rr][i], xv[i], a);
						acc[rr][t] += a;
					}
				}
			}
		}
#pragma unroll
		for (int rr = 0; rr < R; rr++) {
#pragma unroll
			for (int t = 0; t < NT; t++) {
				float v = warp_sum(acc[rr][t]);
				int64_t r = r0 + rr;
				if (lane == 0 && t < nt && r < N) {
					int64_t yi = list ? list[c0 + t] : c0 + t;
					y[yi * N + r] = v + (bias ? bias[r] : 0.0f);
				}
			}
		}
	}
}

/*
 * The 8-bit activation path for quantized weights. Decoding every weight to f32 and reading 4
 * bytes of activation per weight makes the f32 GEMV compute- and L1-bound at 20-35% of HBM
 * bandwidth (int-to-float conversions and x traffic 8x the weight bytes for 4-bit types). Here the
 * activations are quantized once per call to int8 blocks of 32 (x ~= dx * qx, the CPU backend's
 * scheme, so results match its SIMD kernels' character: NMSE ~2e-5 against f32), codes stay
 * integers and four multiply-adds go in one dp4a. A unit is 32 weights in two halves of 16 (HS
 * elements apart) with one scale and offset per half: w = sca * code + off, so
 *   sum_half x w = dx * sca * dot(qx, code) + off * (dx * sum(qx)), the last factor precomputed.
 */
__global__ void quant_x_kernel(const float *__restrict__ x, int64_t nblk, int8_t *__restrict__ xq, float *__restrict__ dx, float *__restrict__ sx)
{
	int lane = threadIdx.x & 31;
	int64_t w0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5, nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
	pdl_trigger();
	pdl_wait();
	for (int64_t b = w0; b < nblk; b += nw) q8_store(x[b * 32 + lane], b, lane, xq, dx, sx);
}

/*
 * Block-split: block b owns rows [b*R, b*R + R) and its QT lanes stride over the units of those
 * rows (split-K inside the block, reduced through shared memory): thousands of blocks even for
 * 4096 rows. A unit's activations (two 16-byte loads) serve all R rows. Measured on the H200
 * (bench/RESULTS.md, 2026-11-29) against 1 or 4 rows a block and 1 or 2 rows a warp: 2 rows a
 * block for one token, the kernel bench's best.
 */
template <int KT, int NT, int R>
__global__ void __launch_bounds__(QT) mvq_kernel(sg_cuw w, const int8_t *__restrict__ xq, const float *__restrict__ dx,
						 const float *__restrict__ sx, int64_t n, float *__restrict__ y, int64_t N,
						 const float *__restrict__ bias, const int32_t *start, const int32_t *order,
						 const int32_t *used, const int32_t *nused, int64_t moe_k, int shared_x)
{
	typedef UI<KT> T;
	__shared__ float red[QT / 32][R * NT];
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int64_t r0 = (int64_t)blockIdx.x * R;
	const int stride = QT, tid = (int)threadIdx.x;
	pdl_trigger();
	pdl_wait();
	if (r0 >= N) return;
	const uint8_t *data = w.data, *sc = w.scales, *bi = w.biases;
	const int32_t *list = NULL;
	int64_t cnt = n;
	if (start) {
		if ((int)blockIdx.y >= *nused) return;
		int e = used[blockIdx.y];
		data += (size_t)e * w.expert_bytes;
		if (sc) sc += (size_t)e * w.expert_sb_bytes, bi += (size_t)e * w.expert_sb_bytes;
		list = order + start[e];
		cnt = start[e + 1] - start[e];
	}
	const int64_t K = w.K, nu = K / 32;
	for (int64_t c0 = 0; c0 < cnt; c0 += NT) {
		int nt = cnt - c0 < NT ? (int)(cnt - c0) : NT;
		int64_t xb[NT];
#pragma unroll
		for (int t = 0; t < NT; t++) {
			int64_t s = t < nt ? (list ? list[c0 + t] : c0 + t) : 0;
			xb[t] = (list && shared_x ? s / moe_k : s) * K;
		}
		float acc[R][NT];
#pragma unroll
		for (int rr = 0; rr < R; rr++)
#pragma unroll
			for (int t = 0; t < NT; t++) acc[rr][t] = 0.0f;
#pragma unroll 2
		for (int64_t u = tid; u < nu; u += stride) {
			int64_t e0 = T::e0(u);
			int4 xa[NT], xc[NT];
			float d0[NT], d1[NT], s0[NT], s1[NT];
#pragma unroll
			for (int t = 0; t < NT; t++) {
				if (t < nt) {
					int64_t ea = xb[t] + e0, ec = ea + T::HS;
					xa[t] = ldd((const int4 *)(xq + ea));
					xc[t] = ldd((const int4 *)(xq + ec));
					d0[t] = ldd(dx + (ea >> 5)), d1[t] = ldd(dx + (ec >> 5));
					s0[t] = ldd(sx + (ea >> 4)), s1[t] = ldd(sx + (ec >> 4));
				}
			}
#pragma unroll
			for (int rr = 0; rr < R; rr++) {
				int64_t r = r0 + rr < N ? r0 + rr : r0;
				const uint8_t *rsc = sc ? sc + (size_t)r * w.sb_row_bytes : NULL, *rbi = bi ? bi + (size_t)r * w.sb_row_bytes : NULL;
				int c[8];
				float sca[2], off[2];
				T::dq(w, data + (size_t)r * w.row_bytes, rsc, rbi, u, c, sca, off);
#pragma unroll
				for (int t = 0; t < NT; t++) {
					if (t < nt) acc[rr][t] += unit_dot(c, xa[t], xc[t], d0[t], d1[t], s0[t], s1[t], sca, off);
				}
			}
		}
#pragma unroll
		for (int rr = 0; rr < R; rr++)
#pragma unroll
			for (int t = 0; t < NT; t++) {
				float v = warp_sum(acc[rr][t]);
				if (lane == 0) red[warp][rr * NT + t] = v;
			}
		__syncthreads();
		if (threadIdx.x < R * NT) {
			int rr = threadIdx.x / NT, t = threadIdx.x % NT;
			int64_t r = r0 + rr;
			if (t < nt && r < N) {
				float v = 0.0f;
				for (int k = 0; k < QT / 32; k++) v += red[k][threadIdx.x];
				int64_t yi = list ? list[c0 + t] : c0 + t;
				y[yi * N + r] = v + (bias ? bias[r] : 0.0f);
			}
		}
		__syncthreads();
	}
}

typedef void (*mvq_fn)(sg_cuw, const int8_t *, const float *, const float *, int64_t, float *, int64_t, const float *, const int32_t *,
		       const int32_t *, const int32_t *, const int32_t *, int64_t, int);

/* Rows one block of the 8-bit kernel covers: 2 for one token, 1 for more (NT tokens a row). */
static int q8_rows_per_block(int nt) { return nt == 1 ? 2 : 1; }

template <int KT> static mvq_fn pickq_nt(int nt)
{
	if (nt == 1) return mvq_kernel<KT, 1, 2>;
	if (nt == 2) return mvq_kernel<KT, 2, 1>;
	if (nt == 4) return mvq_kernel<KT, 4, 1>;
	return mvq_kernel<KT, 8, 1>;
}

static mvq_fn pickq(int kt, int nt)
{
	switch (kt) {
	case SG_CUKT_Q8_0: return pickq_nt<SG_CUKT_Q8_0>(nt);
	case SG_CUKT_Q4_0: return pickq_nt<SG_CUKT_Q4_0>(nt);
	case SG_CUKT_Q4_1: return pickq_nt<SG_CUKT_Q4_1>(nt);
	case SG_CUKT_Q5_0: return pickq_nt<SG_CUKT_Q5_0>(nt);
	case SG_CUKT_Q5_1: return pickq_nt<SG_CUKT_Q5_1>(nt);
	case SG_CUKT_Q4_K: return pickq_nt<SG_CUKT_Q4_K>(nt);
	case SG_CUKT_Q5_K: return pickq_nt<SG_CUKT_Q5_K>(nt);
	case SG_CUKT_Q6_K: return pickq_nt<SG_CUKT_Q6_K>(nt);
	case SG_CUKT_MLX4: return pickq_nt<SG_CUKT_MLX4>(nt);
	case SG_CUKT_MLX8: return pickq_nt<SG_CUKT_MLX8>(nt);
	default: return NULL;
	}
}

extern "C" int sg_cu_has_q8(int kt) { return pickq(kt, 1) != NULL; }

extern "C" size_t sg_cu_q8_bytes(int64_t nx, int64_t K)
{
	size_t q = ((size_t)(nx * K) + 255) & ~(size_t)255, f = ((size_t)(nx * K / 32) * 4 + 255) & ~(size_t)255;
	return q + 3 * f;
}

/* Quantizes x [nx][K] into the scratch; returns the three arrays (cuda_gemv.h). */
int sg_cu_quant_x(const float *x, int64_t nx, int64_t K, void *scratch, int8_t **xq, float **dx, float **sx, cudaStream_t s)
{
	size_t q = ((size_t)(nx * K) + 255) & ~(size_t)255, f = ((size_t)(nx * K / 32) * 4 + 255) & ~(size_t)255;
	*xq = (int8_t *)scratch;
	*dx = (float *)((char *)scratch + q);
	*sx = (float *)((char *)scratch + q + f);
	int64_t nblk = nx * K / 32, blocks = (nblk + 7) / 8;
	pdl_launch(quant_x_kernel, dim3((unsigned)(blocks < 4096 ? blocks : 4096)), dim3(256), 0, s, x, nblk, *xq, *dx, *sx);
	return (int)cudaGetLastError();
}

typedef void (*mv_fn)(sg_cuw, const float *, int64_t, float *, int64_t, const float *, const int32_t *, const int32_t *, const int32_t *,
		      const int32_t *, int64_t, int);

template <int KT> static mv_fn pick_nt(int nt, int r)
{
	if (nt == 1) return r == 2 ? mv_kernel<KT, 1, 2> : mv_kernel<KT, 1, 1>;
	if (nt == 2) return mv_kernel<KT, 2, 1>;
	if (nt == 4) return mv_kernel<KT, 4, 1>;
	return mv_kernel<KT, 8, 1>;
}

static mv_fn pick(int kt, int nt, int r)
{
	switch (kt) {
	case SG_CUKT_F32: return pick_nt<SG_CUKT_F32>(nt, r);
	case SG_CUKT_F16: return pick_nt<SG_CUKT_F16>(nt, r);
	case SG_CUKT_BF16: return pick_nt<SG_CUKT_BF16>(nt, r);
	case SG_CUKT_Q8_0: return pick_nt<SG_CUKT_Q8_0>(nt, r);
	case SG_CUKT_Q4_0: return pick_nt<SG_CUKT_Q4_0>(nt, r);
	case SG_CUKT_Q4_1: return pick_nt<SG_CUKT_Q4_1>(nt, r);
	case SG_CUKT_Q5_0: return pick_nt<SG_CUKT_Q5_0>(nt, r);
	case SG_CUKT_Q5_1: return pick_nt<SG_CUKT_Q5_1>(nt, r);
	case SG_CUKT_Q4_K: return pick_nt<SG_CUKT_Q4_K>(nt, r);
	case SG_CUKT_Q5_K: return pick_nt<SG_CUKT_Q5_K>(nt, r);
	case SG_CUKT_Q6_K: return pick_nt<SG_CUKT_Q6_K>(nt, r);
	case SG_CUKT_MLX4: return pick_nt<SG_CUKT_MLX4>(nt, r);
	case SG_CUKT_MLX6: return pick_nt<SG_CUKT_MLX6>(nt, r);
	case SG_CUKT_MLX8: return pick_nt<SG_CUKT_MLX8>(nt, r);
	default: return NULL;
	}
}

static int nt_for(int64_t n) { return n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : 8; }

extern "C" int sg_cu_unit_elems(int kt) { return kt == SG_CUKT_F32 || kt == SG_CUKT_F16 || kt == SG_CUKT_BF16 ? 8 : 32; }

/* exact: each token as the one-token call takes it (the one-token kernels; their token loop or
 * grid gives every token the same arithmetic) */
static int gemv_run(const sg_cuw *w, const float *x, int64_t n, float *y, int64_t N, const float *bias, void *q8_scratch, sg_custream s, int exact)
{
	cudaStream_t st = (cudaStream_t)s;
	int nt = exact ? 1 : nt_for(n);
	/* one token of a planar K-quant: the fused stage GEMV, one matrix (its block-per-lane kernel) */
	if ((n == 1 || exact) && q8_scratch && sg_cu_policy_now()->gemv.block_per_lane && sg_cu_sb_ok(w)) {
		if (n > INT32_MAX) return (int)cudaErrorInvalidValue;
		sg_cu_multi m;
		memset(&m, 0, sizeof(m));
		m.nw = 1, m.epi = SG_CU_EPI_STORE, m.w[0] = *w, m.N[0] = N, m.bias[0] = bias, m.y[0] = y, m.ntok = (int)n;
		return sg_cu_gemv_multi(&m, x, 0, NULL, 0.0f, 0.0f, NULL, q8_scratch, s);
	}
	if (q8_scratch && sg_cu_has_q8(w->kt)) { /* 8-bit activations */
		mvq_fn f = pickq(w->kt, nt);
		int8_t *xq;
		float *dx, *sx;
		int e = sg_cu_quant_x(x, n, w->K, q8_scratch, &xq, &dx, &sx, st);
		if (e) return e;
		int r = q8_rows_per_block(nt);
		pdl_launch(f, dim3((unsigned)((N + r - 1) / r)), dim3(QT), 0, st, *w, (const int8_t *)xq, (const float *)dx, (const float *)sx, n, y,
			   N, bias, (const int32_t *)NULL, (const int32_t *)NULL, (const int32_t *)NULL, (const int32_t *)NULL, (int64_t)1, 0);
		return (int)cudaGetLastError();
	}
	/* f32 activations: two rows per warp pay for quantized weights (their activations are reused
	 * across the rows), one for plain types (already at ~90% of the copy bandwidth) */
	int plain = w->kt == SG_CUKT_F32 || w->kt == SG_CUKT_F16 || w->kt == SG_CUKT_BF16;
	int r = nt == 1 && !plain ? 2 : 1;
	mv_fn f = pick(w->kt, nt, r);
	if (!f) return (int)cudaErrorInvalidValue;
	int64_t rows_per_block = (int64_t)WARPS * r;
	dim3 grid((unsigned)((N + rows_per_block - 1) / rows_per_block), 1);
	f<<<grid, WARPS * 32, 0, st>>>(*w, x, n, y, N, bias, NULL, NULL, NULL, NULL, 1, 0);
	return (int)cudaGetLastError();
}

extern "C" int sg_cu_gemv(const sg_cuw *w, const float *x, int64_t n, float *y, int64_t N, const float *bias, void *q8_scratch, sg_custream s)
{
	return gemv_run(w, x, n, y, N, bias, q8_scratch, s, 0);
}

extern "C" int sg_cu_gemv_exact(const sg_cuw *w, const float *x, int64_t n, float *y, int64_t N, const float *bias, void *q8_scratch,
				sg_custream s)
{
	return gemv_run(w, x, n, y, N, bias, q8_scratch, s, 1);
}

/* The grouped GEMV of an MoE matmul (cuda_gemv.h): the S slots sorted by expert (start, order,
 * used, nused of sg_cu_moe_sort), blockIdx.y a used expert; 8-bit activations when q8_scratch is
 * given and the format has them, else f32 ones, one row a warp. */
int sg_cu_gemv_grouped(const sg_cuw *w, const float *x, int64_t rows_x, int64_t S, int64_t n, int64_t k, int64_t E, float *y, int64_t N,
		       const int32_t *start, const int32_t *order, const int32_t *used, const int32_t *nused, int shared_x, void *q8_scratch,
		       cudaStream_t st)
{
	/* at most min(E, S) experts are used; a token's own slots name distinct experts, so one
	 * token gives one slot per expert (NT = 1) */
	int nt = n == 1 ? 1 : 8;
	dim3 grid(1, (unsigned)(S < E ? S : E));
	if (q8_scratch && sg_cu_has_q8(w->kt)) {
		int r = q8_rows_per_block(nt);
		int8_t *xq;
		float *dx, *sx;
		int e = sg_cu_quant_x(x, rows_x, w->K, q8_scratch, &xq, &dx, &sx, st);
		if (e) return e;
		grid.x = (unsigned)((N + r - 1) / r);
		pickq(w->kt, nt)<<<grid, QT, 0, st>>>(*w, xq, dx, sx, S, y, N, NULL, start, order, used, nused, k, shared_x);
		return (int)cudaGetLastError();
	}
	mv_fn f = pick(w->kt, nt, 1);
	if (!f) return (int)cudaErrorInvalidValue;
	grid.x = (unsigned)((N + WARPS - 1) / WARPS);
	f<<<grid, WARPS * 32, 0, st>>>(*w, x, S, y, N, NULL, start, order, used, nused, k, shared_x);
	return (int)cudaGetLastError();
}

/* --- the fused decode GEMV: one token, up to three matrices sharing the input, an epilogue --- */

/* Row gr of the stage's row space (the matrices one after another) -> its matrix and row. */
static __device__ __forceinline__ int multi_row(const sg_cu_multi &p, int64_t gr, int64_t &r)
{
	r = gr;
	if (p.nw > 1 && r >= p.N[0]) {
		r -= p.N[0];
		if (p.nw > 2 && r >= p.N[1]) {
			r -= p.N[1];
			return 2;
		}
		return 1;
	}
	return 0;
}

/*
 * mvm_kernel, block-split as mvq_kernel (the fastest layout on the H200): block b owns S row
 * slots, S consecutive rows of the row space, or for the GLU S/2 rows of the gate and the same
 * rows of the up matrix (so the epilogue has both), and its QT threads stride over the units of
 * those rows; the slots' sums meet in shared memory. Thousands of short blocks keep the loads in
 * flight better than a few warps looping over long rows (measured: the warp-per-row layout lost
 * 20-50% here). Q8: 8-bit activations and dp4a (the UI decoders); else f32 activations (plain
 * formats). The weights' parameters stay in the kernel's parameter space (__grid_constant__).
 */
/* The epilogue of row slot s of a fused GEMV (S slots from row g0 of the row space; for the GLU
 * slots [0, S/2) are gate rows and [S/2, S) the same up rows); tot holds every slot's sum. */
/* res_s: slot s's residual p.res[r] (ADD) when the caller loaded it ahead, else NULL; t: the
 * token (sg_cu_multi.ntok) */
template <int S>
static __device__ __forceinline__ void multi_epi(const sg_cu_multi &p, int s, int64_t g0, const float *tot, int64_t rows, const float *res_s = NULL,
						 int64_t t = 0)
{
	if (p.epi == SG_CU_EPI_GLU) {
		int64_t r = g0 + s;
		if (s < S / 2 && r < rows) {
			float g = tot[s] + (p.bias[0] ? p.bias[0][r] : 0.0f), u = tot[s + S / 2] + (p.bias[1] ? p.bias[1][r] : 0.0f);
			p.y[0][t * p.N[0] + r] = act_of(p.act, g) * u;
		}
	} else if (g0 + s < rows) {
		int64_t r;
		int m = multi_row(p, g0 + s, r);
		float v = tot[s] + (p.bias[m] ? p.bias[m][r] : 0.0f);
		if (p.epi == SG_CU_EPI_ADD) v = (res_s ? *res_s : p.res[t * p.N[0] + r]) + v;
		p.y[m][t * p.N[m] + r] = v;
	}
}

/* The token of this block (sg_cu_multi.ntok; a row block's tokens are neighbours in the grid, so
 * the weights they share are read from HBM once) and the block's index among a token's blocks;
 * the activation pointers moved to the token's. */
static __device__ __forceinline__ int64_t multi_token(const sg_cu_multi &p, int64_t &blk)
{
	const int64_t nt = p.ntok > 1 ? p.ntok : 1;
	blk = blockIdx.x / nt;
	return blockIdx.x % nt;
}
template <typename T> static __device__ __forceinline__ T *tok_at(T *ptr, int64_t t, size_t bytes)
{
	return ptr && t ? (T *)((const char *)ptr + (size_t)t * bytes) : ptr;
}
#define MULTI_TOKEN_PTRS(p, t)                                                                                        \
	x = tok_at(x, t, sizeof(float) * (size_t)(p).w[0].K), xq = tok_at(xq, t, (p).q8b), dx = tok_at(dx, t, (p).q8b), \
	sx = tok_at(sx, t, (p).q8b)

/* Row slot s of a block whose slots start at row g0 of the row space (per rows a block; a GLU's
 * slots [0, per) gate rows and [per, 2 per) the same up rows): its matrix, and its row in *r,
 * clamped to the last row (computed, never stored). */
static __device__ __forceinline__ int slot_row(const sg_cu_multi &p, int64_t g0, int s, int per, int glu, int64_t rows, int64_t &r)
{
	int64_t gr = g0 + s % per;
	if (gr >= rows) gr = rows - 1;
	if (glu) {
		r = gr;
		return s / per;
	}
	return multi_row(p, gr, r);
}

/* The S row slots starting at row g0 of the row space: matrix, row, and its codes, scales, biases. */
template <int S>
static __device__ __forceinline__ void multi_rows(const sg_cu_multi &p, int64_t g0, int per, int glu, int64_t rows, int *ms, int64_t *rs,
						  const uint8_t **rp, const uint8_t **sp, const uint8_t **bp)
{
#pragma unroll
	for (int s = 0; s < S; s++) {
		int64_t r;
		int m = slot_row(p, g0, s, per, glu, rows, r);
		ms[s] = m, rs[s] = r;
		const sg_cuw &w = p.w[m];
		rp[s] = w.data + (size_t)r * w.row_bytes;
		sp[s] = w.scales ? w.scales + (size_t)r * w.sb_row_bytes : NULL;
		bp[s] = w.biases ? w.biases + (size_t)r * w.sb_row_bytes : NULL;
	}
}

/*
 * mvw_kernel, warp-split (8-bit activations; MLX 4-bit rows outside the block-per-lane layout,
 * where it measured 8% faster end to end than mvm_kernel on Qwen3-8B shapes): each warp owns S row
 * slots and its lanes walk the units with several loads in flight; the activations come from
 * global memory (L1 serves the block's other warps), the sums meet by shuffles: no shared memory,
 * no block barrier.
 */
template <int KT, int S>
__global__ void __launch_bounds__(QT) mvw_kernel(const __grid_constant__ sg_cu_multi p, const float *__restrict__ x,
						 const int8_t *__restrict__ xq, const float *__restrict__ dx, const float *__restrict__ sx,
						 int64_t rows)
{
	const int glu = p.epi == SG_CU_EPI_GLU, per = glu ? S / 2 : S;
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int64_t blk;
	const int64_t t = multi_token(p, blk);
	MULTI_TOKEN_PTRS(p, t);
	int64_t g0 = (blk * (QT / 32) + warp) * per;
	pdl_trigger();
	if (g0 >= rows) {
		pdl_wait();
		return;
	}
	const uint8_t *rp[S], *sp[S], *bp[S];
	int ms[S];
	int64_t rs[S];
	multi_rows<S>(p, g0, per, glu, rows, ms, rs, rp, sp, bp);
	pdl_wait();
	float acc[S];
#pragma unroll
	for (int s = 0; s < S; s++) acc[s] = 0.0f;
	const int64_t nu = p.w[0].K / 32;
#pragma unroll 4
	for (int64_t u = lane; u < nu; u += 32) q8_unit<KT, S>(p.w[0], rp, sp, bp, u, xq, dx, sx, acc);
#pragma unroll
	for (int s = 0; s < S; s++) acc[s] = warp_sum(acc[s]);
	if (lane < S) multi_epi<S>(p, lane, g0, acc, rows, NULL, t);
	(void)x;
}

/* acc[s] += slot s's unit of E f32 weights dotted with the activations xv (one fma chain a unit) */
template <int E, int S> static __device__ __forceinline__ void unit_fma(float (*wv)[E], const float *xv, float *acc)
{
#pragma unroll
	for (int s = 0; s < S; s++) {
		float a = 0.0f;
#pragma unroll
		for (int i = 0; i < E; i++) a = fmaf(wv[s][i], xv[i], a);
		acc[s] += a;
	}
}

/* A unit's raw load for the plain types (U<KT>::R), a placeholder for the others. */
template <int KT> struct Raw {
	typedef int R;
};
template <> struct Raw<SG_CUKT_F32> {
	typedef U<SG_CUKT_F32>::R R;
};
template <> struct Raw<SG_CUKT_F16> {
	typedef U<SG_CUKT_F16>::R R;
};
template <> struct Raw<SG_CUKT_BF16> {
	typedef U<SG_CUKT_BF16>::R R;
};

/*
 * Plain types with p.pre (SARAGOSSA_CUDA_GEMV_PRE, small launches: a MoE router): a thread's
 * first NP units of every slot (48 registers of them) are loaded before pdl_wait, weights being
 * never written, so their memory round trip overlaps the kernel ahead instead of following it;
 * they are summed in the loop's order (the same bits).
 */
template <int KT, int Q8, int S>
__global__ void __launch_bounds__(QT) mvm_kernel(const __grid_constant__ sg_cu_multi p, const float *__restrict__ x,
						 const int8_t *__restrict__ xq, const float *__restrict__ dx, const float *__restrict__ sx,
						 int64_t rows)
{
	__shared__ float red[QT / 32][S];
	const int glu = p.epi == SG_CU_EPI_GLU, per = glu ? S / 2 : S;
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int64_t blk;
	const int64_t t = multi_token(p, blk);
	MULTI_TOKEN_PTRS(p, t);
	int64_t g0 = blk * per;
	const uint8_t *rp[S], *sp[S], *bp[S];
	int ms[S];
	int64_t rs[S];
	pdl_trigger();
	multi_rows<S>(p, g0, per, glu, rows, ms, rs, rp, sp, bp);
	typedef typename Raw<KT>::R RT;
	constexpr int NP = Q8 ? 1 : 48 / (S * (int)(sizeof(RT) / 4));
	RT pre[S][NP];
	if constexpr (!Q8) {
		if (p.pre) {
			const int64_t nu = p.w[0].K / U<KT>::E;
#pragma unroll
			for (int k = 0; k < NP; k++) {
				int64_t u = threadIdx.x + (int64_t)k * QT;
				if (u < nu)
#pragma unroll
					for (int s = 0; s < S; s++) pre[s][k] = U<KT>::ld(rp[s], u);
			}
		}
	}
	pdl_wait();
	const sg_cuw &w0 = p.w[0];
	float acc[S];
#pragma unroll
	for (int s = 0; s < S; s++) acc[s] = 0.0f;
	if constexpr (Q8) {
		const int64_t nu = w0.K / 32;
		const int8_t *vq = xq;
		const float *vd = dx, *vs = sx;
#pragma unroll 2
		for (int64_t u = threadIdx.x; u < nu; u += QT) q8_unit<KT, S>(w0, rp, sp, bp, u, vq, vd, vs, acc);
	} else {
		typedef U<KT> T;
		const int64_t nu = w0.K / T::E;
		int64_t u0 = threadIdx.x;
		if (p.pre) {
#pragma unroll
			for (int k = 0; k < NP; k++) {
				int64_t u = threadIdx.x + (int64_t)k * QT;
				if (u < nu) {
					float wv[S][T::E], xv[T::E];
#pragma unroll
					for (int s = 0; s < S; s++) T::cv(pre[s][k], wv[s]);
					load_x<KT>(x, T::E * u, xv);
					unit_fma<T::E, S>(wv, xv, acc);
				}
			}
			u0 += (int64_t)NP * QT;
		}
#pragma unroll 2
		for (int64_t u = u0; u < nu; u += QT) {
			float wv[S][T::E], xv[T::E];
			int64_t e0 = 0;
#pragma unroll
			for (int s = 0; s < S; s++) e0 = T::dq(w0, rp[s], sp[s], bp[s], u, wv[s]);
			load_x<KT>(x, e0, xv);
			unit_fma<T::E, S>(wv, xv, acc);
		}
	}
#pragma unroll
	for (int s = 0; s < S; s++) {
		float v = warp_sum(acc[s]);
		if (lane == 0) red[warp][s] = v;
	}
	__syncthreads();
	if (threadIdx.x >= S) return;
	float tot[S];
#pragma unroll
	for (int s = 0; s < S; s++) {
		tot[s] = 0.0f;
#pragma unroll
		for (int k = 0; k < QT / 32; k++) tot[s] += red[k][s];
	}
	multi_epi<S>(p, (int)threadIdx.x, g0, tot, rows, NULL, t);
}

/*
 * mvs_kernel, the block-per-lane GEMV of the planar Q4_K, Q6_K and MLX 4-bit rows.
 * Each lane takes one whole 256-element block of a row at a time: 8 (Q4_K) or 13 (Q6_K) 16-byte
 * loads plus its small fields, all issued before the first is used, and lane b's p-th load sits
 * next to lane b+1's in the planar row, so every warp-wide load is one contiguous run. The unit
 * kernels above read 16 bytes of codes per unit and decode the block's scales again for each of
 * its 8 units (14 loads per 16 bytes for Q4_K: 27-46% of the copy bandwidth); here a block's
 * scales are decoded once, in registers, from three words. LPR lanes share a row (the largest
 * power of two that keeps them busy: 16 for K = 4096, 8 for 2048); a 128-thread block holds
 * 4 * 32 / LPR row slots whose sums meet in shared memory for multi_epi. The first block's loads
 * go out before pdl_wait: weights are never written, so they overlap the previous kernel's tail.
 */

/*
 * The first block of each lane's row is loaded before pdl_wait; at most one block a lane (MANY =
 * 0) keeps the registers few and the blocks an SM holds many. Longer rows (MANY) walk their blocks
 * with two in registers, the next one's loads in flight during the dot: measured faster on the
 * H200 than splitting such rows over more lanes (K = 14336: 2366-2462 against 2102 GB/s).
 */
template <int KT, int LPR, int MANY>
static __device__ __forceinline__ void mvs_run(const sg_cu_multi &p, const int8_t *__restrict__ xq, const float *__restrict__ dx,
					       const float *__restrict__ sx, int64_t rows, int m, int64_t r, int64_t g0, float *tot, int64_t t)
{
	enum { S = QT / LPR };
	const int slot = (int)threadIdx.x / LPR, sl = (int)threadIdx.x % LPR;
	const sg_cuw &w = p.w[m];
	const uint8_t *row = w.data + (size_t)r * w.row_bytes;
	const uint8_t *rsc = w.scales ? w.scales + (size_t)r * w.sb_row_bytes : NULL, *rbi = w.biases ? w.biases + (size_t)r * w.sb_row_bytes : NULL;
	const int64_t nb = p.w[0].K / 256;
	SB<KT> a;
	int64_t b = sl;
	if (b < nb) a.load(row, rsc, rbi, w.sb_bf16, nb, b);
	pdl_wait();
	/* the residual of the epilogue's row goes out with the activations' loads, not after the sums */
	float res_t = 0.0f;
	if (p.epi == SG_CU_EPI_ADD && (int)threadIdx.x < S && g0 + (int)threadIdx.x < rows) {
		int64_t rr;
		multi_row(p, g0 + (int)threadIdx.x, rr);
		res_t = p.res[t * p.N[0] + rr];
	}
	extern __shared__ int4 xs[];
	float4 *ss = (float4 *)(xs + 16 * nb), *ds = p.xstage ? ss + 4 * nb : NULL;
	stage_x(xq, sx, dx, nb, xs, ss, ds);
	float acc = sb_row_sum<KT, LPR, MANY>(a, b, row, rsc, rbi, w.sb_bf16, nb, xs, ss, dx, ds);
	if (sl == 0) tot[slot] = acc;
	__syncthreads();
	if ((int)threadIdx.x < S) multi_epi<S>(p, (int)threadIdx.x, g0, tot, rows, &res_t, t);
}

/* KT2 != KT (SARAGOSSA_CUDA_GEMV_MIXED): the matrices are of kinds KT and KT2 (q, k Q4_K and v
 * Q6_K in a Q4_K_M file), every block's rows in one kind (sg_cu_gemv_mixed_ok checks that the
 * kind changes at a multiple of the block's rows), so one launch takes what took one a kind. */
template <int KT, int LPR, int MANY, int KT2 = KT>
__global__ void __launch_bounds__(QT) mvs_kernel(const __grid_constant__ sg_cu_multi p, const float *__restrict__ x,
						 const int8_t *__restrict__ xq, const float *__restrict__ dx, const float *__restrict__ sx,
						 int64_t rows)
{
	enum { S = QT / LPR };
	__shared__ float tot[S];
	const int glu = p.epi == SG_CU_EPI_GLU, per = glu ? S / 2 : S;
	const int slot = (int)threadIdx.x / LPR;
	int64_t blk;
	const int64_t t = multi_token(p, blk);
	MULTI_TOKEN_PTRS(p, t);
	const int64_t g0 = blk * per;
	pdl_trigger();
	int64_t r;
	int m = slot_row(p, g0, slot, per, glu, rows, r);
	if constexpr (KT2 != KT) {
		if (p.w[m].kt == KT2) return mvs_run<KT2, LPR, MANY>(p, xq, dx, sx, rows, m, r, g0, tot, t);
	}
	mvs_run<KT, LPR, MANY>(p, xq, dx, sx, rows, m, r, g0, tot, t);
	(void)x;
}

typedef void (*mvs_fn)(const sg_cu_multi, const float *, const int8_t *, const float *, const float *, int64_t);

struct MvsK {
	typedef mvs_fn fn;
	template <int KT, int LPR, int MANY> static fn f() { return mvs_kernel<KT, LPR, MANY>; }
};
static mvs_fn picks(int sk, int lpr, int64_t nb) { return sb_pick<MvsK>(sk, lpr, nb); }
extern "C" int sg_cu_sb_ok(const sg_cuw *w) { return picks(sb_kind(w), 32, 1) != NULL; }
/* the Q4_K / Q6_K one (either may come first) */
struct MvsMix {
	typedef mvs_fn fn;
	template <int KT, int LPR, int MANY> static fn f() { return mvs_kernel<SG_CUKT_Q4_K, LPR, MANY, SG_CUKT_Q6_K>; }
};

/* 1 if the block-per-lane kernel takes m's matrices, of two kinds, in one launch: Q4_K and Q6_K
 * rows of one length, stored (no GLU or residual), every change of kind at a multiple of a
 * block's rows, the policy's block-per-lane and mixed fields on. Measured on an H200 (tg128, one binary): the q/k/v of
 * Qwen3-30B-A3B shapes (K = 2048, 5.9 MB) +2.3% at 1k positions and +0.9% at 8k in one launch;
 * those of Qwen3-8B (K = 4096, 14 MB) +1.5% and +0.9% (they were held to two launches by an 8 MB
 * limit from a measurement of -2.1% on the kernels of 2026-12-02). */
extern "C" int sg_cu_gemv_mixed_ok(const sg_cu_multi *m)
{
	const sg_cu_policy *pol = sg_cu_policy_now();
	if (!pol->gemv.mixed || !pol->gemv.block_per_lane || m->epi != SG_CU_EPI_STORE || m->nw < 2) return 0;
	int64_t K = m->w[0].K, per = QT / sb_lanes(K / 256), off = 0;
	if (K % 256 || stage_bytes(K) > (48 << 10)) return 0;
	int two = 0;
	for (int i = 0; i < m->nw; i++) {
		const sg_cuw *w = &m->w[i];
		if ((w->kt != SG_CUKT_Q4_K && w->kt != SG_CUKT_Q6_K) || w->K != K || !sg_cu_sb_ok(w)) return 0;
		if (i && w->kt != m->w[i - 1].kt) {
			if (off % per) return 0;
			two = 1;
		}
		off += m->N[i];
	}
	return two;
}

/*
 * mvt_kernel, the block-per-lane GEMV over several tokens of an exact step (SARAGOSSA_CUDA_VERIFY_MT):
 * blockIdx.y names a group of up to MVT_TOKENS tokens (from t0 = blockIdx.y * p.tg); the block
 * stages all of them at once (their copies in flight together), keeps its lanes' first weight
 * blocks in registers, and runs sb_row_sum once per token: each token's sum is that function's
 * over the token's staged activations, so every token gets the bits mvs_run gives it alone, while
 * the weights come from memory once a group instead of once a token. Rows of several blocks a lane
 * (MANY) reload theirs for each token after the first (from L1: a block's rows are a few KB).
 */
#define MVT_TOKENS 8

template <int KT, int LPR, int MANY>
static __device__ __forceinline__ void mvt_run(const sg_cu_multi &p, const int8_t *__restrict__ xq, const float *__restrict__ dx,
					       const float *__restrict__ sx, int64_t rows, int m, int64_t r, int64_t g0, int64_t t0, int nt,
					       float (*tot)[QT / 4])
{
	enum { S = QT / LPR };
	const int slot = (int)threadIdx.x / LPR, sl = (int)threadIdx.x % LPR;
	const sg_cuw &w = p.w[m];
	const uint8_t *row = w.data + (size_t)r * w.row_bytes;
	const uint8_t *rsc = w.scales ? w.scales + (size_t)r * w.sb_row_bytes : NULL, *rbi = w.biases ? w.biases + (size_t)r * w.sb_row_bytes : NULL;
	const int64_t nb = p.w[0].K / 256, tb = 22 * nb; /* a token's staged region in int4: stage_bytes(K) / 16 */
	SB<KT> a;
	if (sl < nb) a.load(row, rsc, rbi, w.sb_bf16, nb, sl);
	pdl_wait();
	extern __shared__ int4 xs[];
	for (int t = 0; t < nt; t++) {
		int4 *xt = xs + t * tb;
		float4 *ss = (float4 *)(xt + 16 * nb), *ds = p.xstage ? ss + 4 * nb : NULL;
		stage_x(tok_at(xq, t0 + t, p.q8b), tok_at(sx, t0 + t, p.q8b), tok_at(dx, t0 + t, p.q8b), nb, xt, ss, ds, t == nt - 1);
	}
	for (int t = 0; t < nt; t++) {
		const int4 *xt = xs + t * tb;
		const float4 *ss = (const float4 *)(xt + 16 * nb), *ds = p.xstage ? ss + 4 * nb : NULL;
		if (MANY && t && sl < nb) a.load(row, rsc, rbi, w.sb_bf16, nb, sl); /* sb_row_sum walked a past the first block */
		float acc = sb_row_sum<KT, LPR, MANY>(a, sl, row, rsc, rbi, w.sb_bf16, nb, xt, ss, tok_at(dx, t0 + t, p.q8b), ds);
		if (sl == 0) tot[t][slot] = acc;
	}
	__syncthreads();
	for (int i = (int)threadIdx.x; i < nt * S; i += QT) multi_epi<S>(p, i % S, g0, tot[i / S], rows, NULL, t0 + i / S);
}

template <int KT, int LPR, int MANY, int KT2 = KT>
__global__ void __launch_bounds__(QT) mvt_kernel(const __grid_constant__ sg_cu_multi p, const float *__restrict__ x,
						 const int8_t *__restrict__ xq, const float *__restrict__ dx, const float *__restrict__ sx,
						 int64_t rows)
{
	enum { S = QT / LPR };
	__shared__ float tot[MVT_TOKENS][QT / 4];
	const int glu = p.epi == SG_CU_EPI_GLU, per = glu ? S / 2 : S;
	const int slot = (int)threadIdx.x / LPR;
	const int64_t g0 = (int64_t)blockIdx.x * per, t0 = (int64_t)blockIdx.y * p.tg;
	const int nt = (int)(p.ntok - t0 < p.tg ? p.ntok - t0 : p.tg);
	pdl_trigger();
	int64_t r;
	int m = slot_row(p, g0, slot, per, glu, rows, r);
	if constexpr (KT2 != KT) {
		if (p.w[m].kt == KT2) return mvt_run<KT2, LPR, MANY>(p, xq, dx, sx, rows, m, r, g0, t0, nt, tot);
	}
	mvt_run<KT, LPR, MANY>(p, xq, dx, sx, rows, m, r, g0, t0, nt, tot);
	(void)x;
}

struct MvtK {
	typedef mvs_fn fn;
	template <int KT, int LPR, int MANY> static fn f() { return mvt_kernel<KT, LPR, MANY>; }
};
struct MvtMix {
	typedef mvs_fn fn;
	template <int KT, int LPR, int MANY> static fn f() { return mvt_kernel<SG_CUKT_Q4_K, LPR, MANY, SG_CUKT_Q6_K>; }
};

/* The tokens of a group: as many as the static shared memory holds (at most MVT_TOKENS), fewer
 * while the grid would have under four blocks an SM (a group's tokens run in turn in one block:
 * few blocks leave SMs idle) unless always (the tests), the groups as even as that allows. */
static int mvt_group(int64_t K, int nt, int64_t row_blocks, int always)
{
	static int sms;
	if (!sms && !(sms = sg_cu_sm_count())) sms = 132;
	int64_t fit = ((int64_t)SMEM_X_MAX - (int64_t)sizeof(float) * MVT_TOKENS * (QT / 4)) / (int64_t)stage_bytes(K); /* beside tot */
	int tg = (int)(fit < MVT_TOKENS ? fit : MVT_TOKENS);
	if (tg > nt) tg = nt;
	while (!always && tg > 1 && row_blocks * ((nt + tg - 1) / tg) < 4 * (int64_t)sms) tg = (tg + 1) / 2;
	if (tg < 1) return 0;
	int groups = (nt + tg - 1) / tg;
	return (nt + groups - 1) / groups;
}

/*
 * mvp_kernel, the persistent block-per-lane GEMV (SARAGOSSA_CUDA_GEMV_PERSIST): mvs_kernel's
 * lanes, row slots and sums in a grid of only as many blocks as the SMs hold at once, each walking
 * the tasks blockIdx.x, blockIdx.x + gridDim.x, ... (a task: the rows of one mvs_kernel block).
 * A lane's blocks over all its tasks are one sequence walked with two in registers, so the next
 * block's loads are in flight during every dot, across the ends of rows too (mvs_kernel loads a
 * lane's one block and waits it out; ncu found its warps stalled on their own loads half the
 * time), and the activations are staged once per block instead of once per task. A row's lanes
 * finish its sum themselves (the shuffles of sb_row_sum; a GLU's gate and up rows are the
 * neighbouring slots 2i and 2i+1 of one warp, LPR <= 16), so no barrier stands between tasks.
 * The same products, sums and epilogue arithmetic in the same order as mvs_kernel: the same bits.
 */
template <int KT, int LPR> struct Mvp {
	enum { S = QT / LPR };
	const sg_cu_multi &p;
	int glu, per, slot, sl;
	int64_t nb, nj, rows;
	/* the slot's row of task t: matrix and row (clamped: computed, never stored) */
	__device__ __forceinline__ int row_of(int64_t t, int64_t &r, int64_t &gr) const
	{
		gr = t * per + (glu ? slot >> 1 : slot);
		int64_t g = gr < rows ? gr : rows - 1;
		if (glu) {
			r = g;
			return slot & 1;
		}
		return multi_row(p, g, r);
	}
	/* block j of the lane's part of task t into a */
	__device__ __forceinline__ void load(SB<KT> &a, int64_t t, int64_t j) const
	{
		const int64_t b = sl + j * LPR;
		if (b >= nb) return;
		int64_t r, gr;
		const sg_cuw &w = p.w[row_of(t, r, gr)];
		a.load(w.data + (size_t)r * w.row_bytes, w.scales ? w.scales + (size_t)r * w.sb_row_bytes : NULL,
		       w.biases ? w.biases + (size_t)r * w.sb_row_bytes : NULL, w.sb_bf16, nb, b);
	}
	/* the dot of block j of task t; after the task's last block, its row's sum and epilogue */
	__device__ __forceinline__ void use(const SB<KT> &a, int64_t t, int64_t j, float &acc, const int4 *xs, const float4 *ss,
					    const float *dx, const float4 *ds) const
	{
		const int64_t b = sl + j * LPR;
		const int last = j == nj - 1;
		int64_t r, gr;
		const int m = row_of(t, r, gr);
		float res = 0.0f; /* out before the dot: its latency under the dot's */
		if (last && p.epi == SG_CU_EPI_ADD && sl == 0 && gr < rows) res = p.res[r];
		if (b < nb) {
			XS v;
			v.load(dx, ss, ds, b);
			SB<KT>::template dot<1>(&a, xs, b, v.d, v.s, &acc);
		}
		if (!last) return;
#pragma unroll
		for (int o = LPR / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
		if (glu) {
			const float up = __shfl_xor_sync(0xffffffffu, acc, LPR);
			if (sl == 0 && !(slot & 1) && gr < rows) {
				float g = acc + (p.bias[0] ? p.bias[0][r] : 0.0f), u = up + (p.bias[1] ? p.bias[1][r] : 0.0f);
				p.y[0][r] = act_of(p.act, g) * u;
			}
		} else if (sl == 0 && gr < rows) {
			float v = acc + (p.bias[m] ? p.bias[m][r] : 0.0f);
			if (p.epi == SG_CU_EPI_ADD) v = res + v;
			p.y[m][r] = v;
		}
		acc = 0.0f;
	}
};

/* blocks an SM the registers must allow: 4 (at most 128 a thread), 3 for Q6_K (its 13 loads a
 * block spill at 128) */
#define MVP_BLOCKS(KT) ((KT) == SG_CUKT_Q6_K ? 3 : 4)
template <int KT, int LPR>
__global__ void __launch_bounds__(QT, MVP_BLOCKS(KT)) mvp_kernel(const __grid_constant__ sg_cu_multi p, const float *__restrict__ x,
						 const int8_t *__restrict__ xq, const float *__restrict__ dx, const float *__restrict__ sx,
						 int64_t rows)
{
	Mvp<KT, LPR> k = {p};
	k.glu = p.epi == SG_CU_EPI_GLU, k.per = k.glu ? Mvp<KT, LPR>::S / 2 : Mvp<KT, LPR>::S;
	k.slot = (int)threadIdx.x / LPR, k.sl = (int)threadIdx.x % LPR;
	k.nb = p.w[0].K / 256, k.nj = (k.nb + LPR - 1) / LPR, k.rows = rows;
	const int64_t ntask = (rows + k.per - 1) / k.per, G = gridDim.x;
	const int64_t nit = ((ntask - 1 - (int64_t)blockIdx.x) / G + 1) * k.nj; /* the grid never exceeds ntask */
	pdl_trigger();
	SB<KT> a, c;
	int64_t lt = blockIdx.x, lj = 0, ut = blockIdx.x, uj = 0; /* the next block to load, to use */
#define MVP_NEXT(t, j) (++(j) == k.nj ? ((j) = 0, (t) += G) : 0)
	k.load(a, lt, lj);
	MVP_NEXT(lt, lj);
	pdl_wait();
	extern __shared__ int4 xs[];
	float4 *ss = (float4 *)(xs + 16 * k.nb), *ds = p.xstage ? ss + 4 * k.nb : NULL;
	stage_x(xq, sx, dx, k.nb, xs, ss, ds);
	float acc = 0.0f;
	for (int64_t i = 0; i < nit; i += 2) {
		if (i + 1 < nit) k.load(c, lt, lj), MVP_NEXT(lt, lj);
		k.use(a, ut, uj, acc, xs, ss, dx, ds);
		MVP_NEXT(ut, uj);
		if (i + 1 >= nit) break;
		if (i + 2 < nit) k.load(a, lt, lj), MVP_NEXT(lt, lj);
		k.use(c, ut, uj, acc, xs, ss, dx, ds);
		MVP_NEXT(ut, uj);
	}
#undef MVP_NEXT
	(void)x;
}

static long g_plaunches; /* mvp_kernel launches, for the tests (a count, not a setting) */
extern "C" long sg_cu_gemv_persist_launches(void) { return g_plaunches; }
extern "C" int sg_cu_sm_count(void)
{
	int dev = 0, n = 0;
	return cudaGetDevice(&dev) || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) ? 0 : n;
}

/* The SMs the persistent grids (and the decode attention's choice of shared memory) size themselves
 * to, asked once (132, an H100/H200's, if unknown). */
extern "C" int sg_cu_sms(void)
{
	static int sms;
	if (!sms && !(sms = sg_cu_sm_count())) sms = 132;
	return sms;
}

struct MvpK {
	typedef mvs_fn fn;
	template <int KT, int LPR, int MANY> static fn f() { return mvp_kernel<KT, LPR>; }
};

/* The launch of mvp_kernel: a grid of the blocks the SMs hold at once (by the occupancy of the
 * instance), the tasks spread evenly over as few rounds as that allows; -1 (nothing launched) where
 * the policy's SG_CU_PERSIST_ONE_ROUND leaves the launch to mvs_kernel. m's xstage is set. */
static int mvp_launch(const sg_cu_multi *m, const float *x, const int8_t *xq, const float *dx, const float *sx, int64_t rows, cudaStream_t st,
		      const sg_cu_policy *pol)
{
	static mvs_fn seen[32]; /* the instances met, by their shared bytes: blocks an SM */
	static size_t sizes[32];
	static int fits[32], nseen;
	const int sms = sg_cu_sms();
	const int64_t K = m->w[0].K;
	const int lpr = sb_lanes(K / 256), glu = m->epi == SG_CU_EPI_GLU, per = glu ? QT / lpr / 2 : QT / lpr;
	mvs_fn f = sb_pick<MvpK>(sb_kind(&m->w[0]), lpr, K / 256);
	if (!f) return -1;
	const size_t smem = stage_bytes(K);
	int i = 0, bps = 0;
	while (i < nseen && (seen[i] != f || sizes[i] != smem)) i++;
	if (i < nseen) {
		bps = fits[i];
	} else {
		if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, f, QT, smem) || bps < 1) bps = 1;
		if (nseen < 32) seen[nseen] = f, sizes[nseen] = smem, fits[nseen++] = bps;
	}
	int64_t ntask = (rows + per - 1) / per, maxg = (int64_t)sms * bps, rounds = (ntask + maxg - 1) / maxg;
	int64_t grid = (ntask + rounds - 1) / rounds;
	/* SG_CU_PERSIST_ONE_ROUND: launches of more tasks than SMs and at most 3 an SM only, one round
	 * of 1-3 blocks an SM (bench/RESULTS.md: the MoE's q/k/v and o gain 5%; the dense model's
	 * 4-blocks-an-SM launches lose, the grid holding the register file until its slowest block) */
	const int cap = pol->gemv.persist_grid;
	if (pol->gemv.persist == SG_CU_PERSIST_ONE_ROUND && !cap && (ntask <= sms || ntask > 3 * (int64_t)sms)) return -1;
	if (cap && grid > cap) grid = cap;
	pdl_launch(f, dim3((unsigned)grid), dim3(QT), smem, st, *m, x, xq, dx, sx, rows);
	g_plaunches++;
	return (int)cudaGetLastError();
}

#define NQ_WARPS 16 /* warps of a norm-quantize block: 512 threads, the rmsnorm kernel's size for rows of >= 1024 */

/*
 * RMS-normalises one row x (when norm) into xn and quantizes it to 8-bit blocks exactly as
 * quant_x_kernel does. Block b quantizes the row's 32-blocks [16b, 16b + 16), one per warp; every
 * block sums the row's squares itself (the row is a few KB in L2), with the rmsnorm kernel's loop
 * and reduction at its block size, so xn is bit-identical to that kernel's output. blockIdx.y:
 * the token (rows of K, 8-bit regions q8b bytes apart), each as if alone.
 */
__global__ void __launch_bounds__(NQ_WARPS * 32) norm_quant_kernel(const float *__restrict__ x, const float *__restrict__ w, int norm, float eps,
								   float off, int64_t K, float *__restrict__ xn, int8_t *__restrict__ xq,
								   float *__restrict__ dx, float *__restrict__ sx, size_t q8b)
{
	int wi = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
	const int64_t t = blockIdx.y;
	x = tok_at(x, t, sizeof(float) * (size_t)K), xn = tok_at(xn, t, sizeof(float) * (size_t)K);
	xq = tok_at(xq, t, q8b), dx = tok_at(dx, t, q8b), sx = tok_at(sx, t, q8b);
	float sc = 1.0f;
	int64_t b = (int64_t)blockIdx.x * nw + wi, i = b * 32 + lane;
	/* the norm weight before pdl_wait (weights are never written): its load, from HBM, is not
	 * waited out after the sum of squares */
	float wv = norm && w && b < K / 32 ? __ldg(w + i) + off : 0.0f;
	pdl_trigger();
	pdl_wait();
	const float xv = b < K / 32 ? x[i] : 0.0f; /* in flight with the sum's loads, not after it */
	if (norm) {
		sc = 1.0f / sqrtf(block_sumsq(x, K) / (float)K + eps);
	}
	if (b >= K / 32) return;
	float v = norm ? (w ? xv * sc * wv : xv * sc) : xv;
	if (xn) xn[i] = v;
	q8_store(v, b, lane, xq, dx, sx);
}

static void nq_launch(const float *x, const float *w, int norm, float eps, float off, int64_t K, float *xn, int8_t *xq,
		      float *dx, float *sx, cudaStream_t st, int ntok = 1, size_t q8b = 0)
{
	pdl_launch(norm_quant_kernel, dim3((unsigned)((K / 32 + NQ_WARPS - 1) / NQ_WARPS), (unsigned)ntok), dim3(NQ_WARPS * 32), 0, st, x, w,
		   norm, eps, off, K, xn, xq, dx, sx, q8b);
}

extern "C" int sg_cu_norm_quant(const float *x, const float *w, float eps, float off, int64_t K, float *xn, void *q8, sg_custream s)
{
	if (K % 32 || K < 1024 || !xn || !q8) return (int)cudaErrorInvalidValue; /* the rmsnorm kernel's 512-thread size */
	int8_t *xq;
	float *dx, *sx;
	sg_cu_q8_split(q8, K, &xq, &dx, &sx);
	nq_launch(x, w, 1, eps, off, K, xn, xq, dx, sx, (cudaStream_t)s);
	return (int)cudaGetLastError();
}

typedef void (*mvm_fn)(const sg_cu_multi, const float *, const int8_t *, const float *, const float *, int64_t);

/* mvm_kernel with slots row slots a block (1 or 2; the 8-bit formats take 2). */
template <int KT, int Q8> static mvm_fn pickm_kt(int slots)
{
	if constexpr (Q8) return slots == 2 ? mvm_kernel<KT, Q8, 2> : NULL;
	else return slots == 1 ? mvm_kernel<KT, Q8, 1> : slots == 2 ? mvm_kernel<KT, Q8, 2> : NULL;
}

static mvm_fn pickm(int kt, int slots)
{
	switch (kt) {
	case SG_CUKT_F32: return pickm_kt<SG_CUKT_F32, 0>(slots);
	case SG_CUKT_F16: return pickm_kt<SG_CUKT_F16, 0>(slots);
	case SG_CUKT_BF16: return pickm_kt<SG_CUKT_BF16, 0>(slots);
	case SG_CUKT_Q8_0: return pickm_kt<SG_CUKT_Q8_0, 1>(slots);
	case SG_CUKT_Q4_0: return pickm_kt<SG_CUKT_Q4_0, 1>(slots);
	case SG_CUKT_Q5_0: return pickm_kt<SG_CUKT_Q5_0, 1>(slots);
	case SG_CUKT_Q4_K: return pickm_kt<SG_CUKT_Q4_K, 1>(slots);
	case SG_CUKT_Q5_K: return pickm_kt<SG_CUKT_Q5_K, 1>(slots);
	case SG_CUKT_Q6_K: return pickm_kt<SG_CUKT_Q6_K, 1>(slots);
	case SG_CUKT_MLX4: return pickm_kt<SG_CUKT_MLX4, 1>(slots);
	case SG_CUKT_MLX8: return pickm_kt<SG_CUKT_MLX8, 1>(slots);
	default: return NULL;
	}
}

static int plain_kt(int kt) { return kt == SG_CUKT_F32 || kt == SG_CUKT_F16 || kt == SG_CUKT_BF16; }

/* The kernels a fused stage GEMV may take. */
typedef enum {
	GEMV_UNITS,     /* mvm_kernel: a block's threads over the units of 1-2 row slots */
	GEMV_WARPS,     /* mvw_kernel: MLX 4-bit rows outside the block-per-lane layout, 2 rows a warp */
	GEMV_LANES,     /* mvs_kernel: a 256-element block a lane */
	GEMV_LANES_MIX, /* mvs_kernel over Q4_K and Q6_K matrices in one launch */
	GEMV_PERSIST    /* mvp_kernel: mvs_kernel in a persistent grid (mvp_launch may leave it to mvs_kernel) */
} gemv_kernel;

/* A stage's kernel, from the policy and its first matrix (the others share its format and K but
 * for a mixed stage). The kernel bench's measurements behind each choice are in bench/RESULTS.md
 * ("CUDA kernels (H200)"). */
static gemv_kernel gemv_choose(const sg_cu_multi *m, const sg_cu_policy *pol)
{
	const sg_cuw *w = &m->w[0];
	/* the block-per-lane kernels stage 1.375 K bytes of activations */
	if (pol->gemv.block_per_lane && sg_cu_sb_ok(w) && stage_bytes(w->K) <= SMEM_X_MAX) {
		if (sg_cu_gemv_mixed_ok(m)) return GEMV_LANES_MIX;
		/* a GLU's gate and up slots in one warp of the persistent kernel: at most 16 lanes a row */
		if (pol->gemv.persist != SG_CU_PERSIST_OFF && (m->epi != SG_CU_EPI_GLU || sb_lanes(w->K / 256) <= 16)) return GEMV_PERSIST;
		return GEMV_LANES;
	}
	/* MLX 4-bit: the warp-split kernel measured 8% faster end to end on Qwen3-8B shapes (H200) */
	return w->kt == SG_CUKT_MLX4 ? GEMV_WARPS : GEMV_UNITS;
}

extern "C" int sg_cu_multi_ok(int kt) { return pickm(kt, 2) != NULL; }

extern "C" void sg_cu_q8_split(void *q8, int64_t K, int8_t **xq, float **dx, float **sx)
{
	size_t q = ((size_t)K + 255) & ~(size_t)255, fb = ((size_t)(K / 32) * 4 + 255) & ~(size_t)255;
	*xq = (int8_t *)q8;
	*dx = (float *)((char *)q8 + q);
	*sx = (float *)((char *)q8 + q + fb);
}

extern "C" int sg_cu_gemv_multi(const sg_cu_multi *m, const float *x, int norm, const float *norm_w, float eps, float off, float *xn,
				void *q8_scratch, sg_custream s)
{
	cudaStream_t st = (cudaStream_t)s;
	const sg_cu_policy *pol = sg_cu_policy_now();
	int kt = m->w[0].kt, glu = m->epi == SG_CU_EPI_GLU;
	int64_t K = m->w[0].K, rows = m->N[0];
	const int nt = m->ntok > 1 ? m->ntok : 1;
	const size_t q8b = sg_cu_q8_bytes(1, K);
	if (m->nw < 1 || m->nw > SG_CU_MULTI_MAX) return (int)cudaErrorInvalidValue;
	if (!glu)
		for (int i = 1; i < m->nw; i++) rows += m->N[i];
	gemv_kernel gk = gemv_choose(m, pol);
	if (nt > 1 && gk == GEMV_PERSIST) gk = GEMV_LANES; /* the same bits, and a grid of tokens */
	/* the unit kernels' row slots: the kernel bench's best, one row a block for plain formats, two
	 * for the others (a GLU always pairs a gate and an up row) */
	const int S = plain_kt(kt) && !glu ? 1 : 2;
	mvm_fn f = gk == GEMV_WARPS ? mvw_kernel<SG_CUKT_MLX4, 2> : gk == GEMV_UNITS ? pickm(kt, S) : NULL;
	if ((gk == GEMV_UNITS || gk == GEMV_WARPS) && !f) return (int)cudaErrorInvalidValue;
	const float *xin = x;
	int8_t *xq = NULL;
	float *dx = NULL, *sx = NULL;
	if (plain_kt(kt)) {
		if (norm) {
			int e = sg_cu_rmsnorm(x, norm_w, eps, off, xn, nt, K, s);
			if (e) return e;
			xin = xn;
		}
	} else {
		if (!q8_scratch || K % 32) return (int)cudaErrorInvalidValue;
		sg_cu_q8_split(q8_scratch, K, &xq, &dx, &sx);
		if (!x) goto launch; /* quantized by the producer */
		if (norm && K < 1024) { /* the rmsnorm kernel's 128-thread size: normalise apart, then quantize */
			int e = sg_cu_rmsnorm(x, norm_w, eps, off, xn, nt, K, s);
			if (e) return e;
			x = xn;
			norm = 0;
		}
		nq_launch(x, norm_w, norm, eps, off, K, norm ? xn : NULL, xq, dx, sx, st, nt, q8b);
	}
launch:;
	sg_cu_multi mp = *m;
	mp.xstage = pol->gemv.xstage;
	mp.ntok = nt;
	mp.q8b = q8b;
	if (gk == GEMV_PERSIST) {
		int e = mvp_launch(&mp, xin, xq, dx, sx, rows, st, pol);
		if (e >= 0) return e;
	}
	if (gk == GEMV_PERSIST || gk == GEMV_LANES || gk == GEMV_LANES_MIX) {
		int lpr = sb_lanes(K / 256), slots = QT / lpr, per = glu ? slots / 2 : slots;
		int64_t row_blocks = (rows + per - 1) / per;
		/* an exact step's tokens: a block a group of them, each block's weights read once */
		if (nt > 1 && pol->gemv.verify_mt && (mp.tg = mvt_group(K, nt, row_blocks, pol->gemv.verify_mt == 2)) > 1) {
			mvs_fn fk = gk == GEMV_LANES_MIX ? sb_pick_many<MvtMix, SG_CUKT_Q4_K>(lpr, K / 256) : sb_pick<MvtK>(sb_kind(&m->w[0]), lpr, K / 256);
			pdl_launch(fk, dim3((unsigned)row_blocks, (unsigned)((nt + mp.tg - 1) / mp.tg)), dim3(QT), stage_bytes(K) * (size_t)mp.tg, st, mp,
				   xin, (const int8_t *)xq, (const float *)dx, (const float *)sx, rows);
			return (int)cudaGetLastError();
		}
		mvs_fn fk = gk == GEMV_LANES_MIX ? sb_pick_many<MvsMix, SG_CUKT_Q4_K>(lpr, K / 256) : picks(sb_kind(&m->w[0]), lpr, K / 256);
		pdl_launch(fk, dim3((unsigned)((rows + per - 1) / per * nt)), dim3(QT), stage_bytes(K), st, mp, xin,
			   (const int8_t *)xq, (const float *)dx, (const float *)sx, rows);
		return (int)cudaGetLastError();
	}
	int per = (glu ? S / 2 : S) * (gk == GEMV_WARPS ? QT / 32 : 1);
	int64_t nb = (rows + per - 1) / per * nt;
	size_t wbytes = 0; /* the launch's weight bytes: small launches load theirs before the wait */
	for (int i = 0; i < m->nw; i++) wbytes += (size_t)m->N[i] * m->w[i].row_bytes;
	mp.pre = pol->gemv.pre && plain_kt(kt) && wbytes <= PRE_MAX_BYTES;
	pdl_launch(f, dim3((unsigned)nb), dim3(QT), 0, st, mp, xin, (const int8_t *)xq, (const float *)dx, (const float *)sx, rows);
	return (int)cudaGetLastError();
}
