/*
 * The CUDA kernels of the hybrid architectures (Qwen3-Next / Qwen3.5 gated delta net) and of
 * Gemma 4: short causal conv, gated delta rule, gated RMSNorm, sigmoid gate, column gather,
 * split GLU, per-expert weight scale. The arithmetic is the CPU reference's
 * (backend/cpu/cpu_linear_attn.c): same formulas in f32, so the differential tests hold tight
 * thresholds; only summation order (and fused multiply-adds) differ.
 *
 * Every launcher enqueues on its stream and returns the launch status; nothing synchronises,
 * allocates or reads back, so a decode step using them can be recorded as a graph.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_reduce.cuh"

static int lin_ok(void) { return (int)cudaGetLastError(); }

static unsigned lin_grid(int64_t n, int threads)
{
	int64_t b = (n + threads - 1) / threads;
	return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

static __device__ __forceinline__ float lin_silu(float x) { return x / (1.0f + expf(-x)); }
static __device__ __forceinline__ float lin_sigm(float x) { return 1.0f / (1.0f + expf(-x)); }
/* softplus as torch computes it (beta 1, threshold 20: linear past it), as the CPU does */
static __device__ __forceinline__ float lin_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }


/* --- short conv --- */

/*
 * Block: 32 consecutive channels (one coalesced 128-byte row segment per token) x CONV_TL token
 * lanes. Lane l computes the outputs of tokens l, l + CONV_TL, ...; the window u = state rows then
 * x rows is read from global memory (u[j] = state[j] for j < K-1, else x[j - (K-1)]). The new
 * state (the last K-1 rows of u) is read into registers by every thread first and written after
 * a barrier: with n < K-1 some of it comes from the old state rows it replaces. Channels are
 * independent, so the block owns its channels' state and no other block touches it.
 */
#define CONV_TL 8
#define CONV_KEEP ((SG_CU_CONV_MAXK - 1 + CONV_TL - 1) / CONV_TL) /* state rows per lane */

__global__ void __launch_bounds__(32 * CONV_TL) short_conv_kernel(const float *x, const float *w, float *state, float *out, int64_t n,
								 int64_t C, int K)
{
	int64_t c = (int64_t)blockIdx.x * 32 + (threadIdx.x & 31);
	int lane = threadIdx.x >> 5;
	int on = c < C;
	if (on) {
		const float *wc = w + c * K;
		for (int64_t t = lane; t < n; t += CONV_TL) {
			float s = 0.0f;
			for (int i = 0; i < K; i++) {
				int64_t j = t + i;
				float u = j < K - 1 ? state[j * C + c] : x[(j - (K - 1)) * C + c];
				s += wc[i] * u;
			}
			out[t * C + c] = lin_silu(s);
		}
	}
	float keep[CONV_KEEP];
#pragma unroll
	for (int r = 0; r < CONV_KEEP; r++) {
		int i = lane + CONV_TL * r;
		keep[r] = 0.0f;
		if (on && i < K - 1) {
			int64_t j = n + i;
			keep[r] = j < K - 1 ? state[j * C + c] : x[(j - (K - 1)) * C + c];
		}
	}
	__syncthreads();
#pragma unroll
	for (int r = 0; r < CONV_KEEP; r++) {
		int i = lane + CONV_TL * r;
		if (on && i < K - 1) state[(int64_t)i * C + c] = keep[r];
	}
}

extern "C" int sg_cu_short_conv(const float *x, const float *w, float *state, float *out, int64_t n, int64_t C, int K, sg_custream s)
{
	if (n <= 0 || C <= 0) return 0;
	if (K < 1 || K > SG_CU_CONV_MAXK) return (int)cudaErrorInvalidValue;
	int64_t blocks = (C + 31) / 32;
	if (blocks > INT32_MAX) return (int)cudaErrorInvalidValue;
	short_conv_kernel<<<(unsigned)blocks, 32 * CONV_TL, 0, (cudaStream_t)s>>>(x, w, state, out, n, C, K);
	return lin_ok();
}

/* --- gated delta rule --- */

/*
 * Every column c of a head's state S [dk][dv] evolves on its own: with k, q normalised and the
 * token's decay eg and beta,
 *   S[:,c] *= eg;  delta = beta (v[c] - S[:,c] . k);  S[:,c] += k delta;  o[c] = S[:,c] . q.
 * Block (h, column tile): 32 columns (lane cx, coalesced along a state row) x P warps; warp py
 * keeps rows py, py + P, ... of its column in R registers (P*R >= dk), so the state is read once
 * at the start of the call and written once at its end, whatever the number of tokens, and
 * the tokens run one after another inside the block (the exact recurrence). The dot products over
 * dk are a warp's partial sums added in warp order through shared memory. Per token, the raw q
 * and k rows of the key head go to shared memory with their sums of squares (every block of a
 * key head recomputes them: 2*dk values, cheaper than a separate kernel).
 */
template <int P, int R> __global__ void __launch_bounds__(32 * P) gdn_kernel(const sg_cu_gdn g)
{
	__shared__ float qs[P * R], ks[P * R];
	__shared__ float red_kv[P][32], red_o[P][32];
	__shared__ float wsq[2][P];
	int cx = threadIdx.x & 31, py = threadIdx.x >> 5;
	int h = blockIdx.x, hk = h / (g.Hv / g.Hk);
	int c = blockIdx.y * 32 + cx, dk = g.dk, dv = g.dv;
	int col = c < dv;
	float *S = g.state + (size_t)h * dk * dv;
	float s[R];
#pragma unroll
	for (int r = 0; r < R; r++) {
		int i = py + P * r;
		s[r] = col && i < dk ? S[(size_t)i * dv + c] : 0.0f;
	}
	const float qscale = 1.0f / sqrtf((float)dk), eg_l = -expf(g.a_log[h]), dtb = g.dt_bias[h];
	const size_t qoff = (size_t)hk * dk, koff = (size_t)g.Hk * dk + (size_t)hk * dk, voff = 2 * (size_t)g.Hk * dk + (size_t)h * dv;
	for (int64_t t = 0; t < g.n; t++) {
		const float *row = g.qkv + t * g.C;
		float sq = 0.0f, sk = 0.0f;
		for (int i = threadIdx.x; i < dk; i += 32 * P) {
			float qv = row[qoff + i], kv = row[koff + i];
			qs[i] = qv;
			ks[i] = kv;
			sq += qv * qv;
			sk += kv * kv;
		}
		sq = warp_sum(sq);
		sk = warp_sum(sk);
		if (cx == 0) wsq[0][py] = sq, wsq[1][py] = sk;
		__syncthreads(); /* q, k rows and their partial sums of squares are in */
		float tq = 0.0f, tk = 0.0f;
#pragma unroll
		for (int w = 0; w < P; w++) tq += wsq[0][w], tk += wsq[1][w];
		/* the CPU's l2n: x * (mul / sqrt(sum x^2 + eps)) */
		float iq = qscale / sqrtf(tq + g.eps), ik = 1.0f / sqrtf(tk + g.eps);
		float gt = eg_l * lin_softplus(g.a[t * g.Hv + h] + dtb);
		float eg = expf(gt), beta = lin_sigm(g.b[t * g.Hv + h]);
		/* decay, then what the decayed state predicts for k */
		float part = 0.0f;
#pragma unroll
		for (int r = 0; r < R; r++) {
			int i = py + P * r;
			if (i < dk) {
				s[r] *= eg;
				part += (ks[i] * ik) * s[r];
			}
		}
		red_kv[py][cx] = part;
		__syncthreads(); /* partial S^T k of every warp */
		float kv = 0.0f;
#pragma unroll
		for (int w = 0; w < P; w++) kv += red_kv[w][cx];
		float delta = col ? (row[voff + c] - kv) * beta : 0.0f;
		float po = 0.0f;
#pragma unroll
		for (int r = 0; r < R; r++) {
			int i = py + P * r;
			if (i < dk) {
				s[r] += (ks[i] * ik) * delta;
				po += (qs[i] * iq) * s[r];
			}
		}
		red_o[py][cx] = po;
		/* after this barrier nobody reads qs, ks, wsq or red_kv of this token again: the next
		 * token may overwrite them (red_o only after its second barrier, which warp 0 reaches
		 * once it has stored this token's output) */
		__syncthreads();
		if (py == 0 && col) {
			float o = 0.0f;
#pragma unroll
			for (int w = 0; w < P; w++) o += red_o[w][cx];
			g.out[((size_t)t * g.Hv + h) * dv + c] = o;
		}
	}
#pragma unroll
	for (int r = 0; r < R; r++) {
		int i = py + P * r;
		if (col && i < dk) S[(size_t)i * dv + c] = s[r];
	}
}

extern "C" int sg_cu_gated_delta(const sg_cu_gdn *g, sg_custream s)
{
	if (g->n <= 0) return 0;
	if (g->Hk < 1 || g->Hv < 1 || g->Hv % g->Hk || g->dk < 1 || g->dv < 1 || g->dk > SG_CU_GDN_MAX_DK) return (int)cudaErrorInvalidValue;
	dim3 grid((unsigned)g->Hv, (unsigned)((g->dv + 31) / 32));
	cudaStream_t st = (cudaStream_t)s;
	if (g->dk <= 32) gdn_kernel<4, 8><<<grid, 32 * 4, 0, st>>>(*g);
	else if (g->dk <= 128) gdn_kernel<4, 32><<<grid, 32 * 4, 0, st>>>(*g);
	else if (g->dk <= 256) gdn_kernel<4, 64><<<grid, 32 * 4, 0, st>>>(*g);
	else gdn_kernel<16, 64><<<grid, 32 * 16, 0, st>>>(*g);
	return lin_ok();
}

/* --- gated RMSNorm, sigmoid gate --- */

/* One block per row: y = x * (1 / sqrt(mean(x^2) + eps)) * w * silu(gate), the CPU's order. */
__global__ void gated_rmsnorm_kernel(const float *x, const float *w, const float *gate, float eps, float *y, int64_t D)
{
	const float *xr = x + blockIdx.x * D, *gr = gate + blockIdx.x * D;
	float *yr = y + blockIdx.x * D;
	float sc = 1.0f / sqrtf(block_sumsq(xr, D) / (float)D + eps);
	/* each element is read and written by the same thread: y may alias x */
	for (int64_t i = threadIdx.x; i < D; i += blockDim.x) yr[i] = xr[i] * sc * w[i] * lin_silu(gr[i]);
}

extern "C" int sg_cu_gated_rmsnorm(const float *x, const float *w, const float *gate, float eps, float *y, int64_t rows, int64_t D,
				   sg_custream s)
{
	if (rows <= 0 || D <= 0) return 0;
	if (rows > INT32_MAX) return (int)cudaErrorInvalidValue;
	gated_rmsnorm_kernel<<<(unsigned)rows, D >= 1024 ? 512 : 128, 0, (cudaStream_t)s>>>(x, w, gate, eps, y, D);
	return lin_ok();
}

/* out = x * sigmoid(gate), gate one per element (gw = W) or one per row (gw = 1). */
__global__ void sigmoid_mul_kernel(const float *x, const float *gate, int64_t rows, int64_t W, int64_t gw, float *out)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * W; i += (int64_t)gridDim.x * blockDim.x) {
		float gv = gw == 1 ? gate[i / W] : gate[i];
		out[i] = x[i] * lin_sigm(gv);
	}
}

extern "C" int sg_cu_sigmoid_mul(const float *x, const float *gate, int64_t rows, int64_t W, int64_t gw, float *out, sg_custream s)
{
	if (rows <= 0 || W <= 0) return 0;
	sigmoid_mul_kernel<<<lin_grid(rows * W, 256), 256, 0, (cudaStream_t)s>>>(x, gate, rows, W, gw, out);
	return lin_ok();
}

/* --- gather, split GLU, per-expert scale --- */

/* out[t][j] = x[t][idx[j]]; an index outside [0, W) gives 0 (the device cannot report it). */
__global__ void gather_cols_kernel(const float *x, const int32_t *idx, int64_t n, int64_t W, int64_t W2, float *out)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n * W2; i += (int64_t)gridDim.x * blockDim.x) {
		int64_t t = i / W2;
		int32_t j = idx[i - t * W2];
		out[i] = j >= 0 && j < W ? x[t * W + j] : 0.0f;
	}
}

extern "C" int sg_cu_gather_cols(const float *x, const int32_t *idx, int64_t n, int64_t W, int64_t W2, float *out, sg_custream s)
{
	if (n <= 0 || W2 <= 0) return 0;
	gather_cols_kernel<<<lin_grid(n * W2, 256), 256, 0, (cudaStream_t)s>>>(x, idx, n, W, W2, out);
	return lin_ok();
}

/* out[r][i] = act(x[r][i]) * x[r][F + i]; with one row out may alias x (element i is read and
 * written by the same thread, and the up half is never written). */
__global__ void glu_split_kernel(const float *x, int act, int64_t rows, int64_t F, float *out)
{
	for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < rows * F; e += (int64_t)gridDim.x * blockDim.x) {
		int64_t r = e / F, i = e - r * F;
		const float *gr = x + r * 2 * F;
		float gv = gr[i], u = gr[F + i], a;
		if (act == SG_CU_EW_SILU) a = lin_silu(gv);
		else if (act == SG_CU_EW_GELU) a = 0.5f * gv * (1.0f + tanhf(0.7978845608028654f * (gv + 0.044715f * gv * gv * gv)));
		else a = 0.5f * gv * (1.0f + erff(gv * 0.70710678118654752f));
		out[e] = a * u;
	}
}

extern "C" int sg_cu_glu_split(const float *x, int act, int64_t rows, int64_t F, float *out, sg_custream s)
{
	if (rows <= 0 || F <= 0) return 0;
	if (act != SG_CU_EW_SILU && act != SG_CU_EW_GELU && act != SG_CU_EW_GELU_ERF) return (int)cudaErrorInvalidValue;
	glu_split_kernel<<<lin_grid(rows * F, 256), 256, 0, (cudaStream_t)s>>>(x, act, rows, F, out);
	return lin_ok();
}

/* w[i] *= scale[ids[i]]; an id outside [0, E) leaves the weight at 0. */
__global__ void moe_weight_scale_kernel(float *w, const int32_t *ids, int64_t nk, const float *scale, int64_t E)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nk; i += (int64_t)gridDim.x * blockDim.x) {
		int32_t id = ids[i];
		w[i] = id >= 0 && id < E ? w[i] * scale[id] : 0.0f;
	}
}

extern "C" int sg_cu_moe_weight_scale(float *w, const int32_t *ids, int64_t nk, const float *scale, int64_t E, sg_custream s)
{
	if (nk <= 0) return 0;
	moe_weight_scale_kernel<<<lin_grid(nk, 256), 256, 0, (cudaStream_t)s>>>(w, ids, nk, scale, E);
	return lin_ok();
}
