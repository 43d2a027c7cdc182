/*
 * The CUDA backend's non-matmul kernels: norms, RoPE, KV store (plain and fused with RoPE),
 * attention (one kernel for decode and prefill, split over the KV length: flash-decoding),
 * elementwise ops, softmax, MoE routing and combine, argmax. Each follows the CPU reference's
 * arithmetic (same formulas, f32 unless the reference uses double) so the differential tests
 * can hold tight thresholds.
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_reduce.cuh"

static __device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

static __device__ float block_max(float v)
{
	__shared__ float sh[32];
	__shared__ float res;
	v = warp_max(v);
	int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = blockDim.x >> 5;
	__syncthreads();
	if (l == 0) sh[w] = v;
	__syncthreads();
	if (w == 0) {
		float s = l < nw ? sh[l] : -INFINITY;
		s = warp_max(s);
		if (l == 0) res = s;
	}
	__syncthreads();
	return res;
}

static int ok(void) { return (int)cudaGetLastError(); }
static unsigned grid_for(int64_t n, int threads)
{
	int64_t b = (n + threads - 1) / threads;
	return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

/* --- norms --- */

__global__ void rmsnorm_kernel(const float *x, const float *w, float eps, float off, float *y, int64_t D)
{
	const float *xr = x + blockIdx.x * D;
	float *yr = y + blockIdx.x * D;
	float ss = 0.0f;
	for (int64_t i = threadIdx.x; i < D; i += blockDim.x) ss += xr[i] * xr[i];
	ss = block_sum(ss);
	float sc = 1.0f / sqrtf(ss / (float)D + eps);
	for (int64_t i = threadIdx.x; i < D; i += blockDim.x) yr[i] = w ? xr[i] * sc * (w[i] + off) : xr[i] * sc;
}

extern "C" int sg_cu_rmsnorm(const float *x, const float *w, float eps, float off, float *y, int64_t rows, int64_t D, sg_custream s)
{
	if (rows <= 0) return 0;
	rmsnorm_kernel<<<(unsigned)rows, D >= 1024 ? 512 : 128, 0, (cudaStream_t)s>>>(x, w, eps, off, y, D);
	return ok();
}

__global__ void layernorm_kernel(const float *x, const float *w, const float *b, float eps, float *y, int64_t D)
{
	const float *xr = x + blockIdx.x * D;
	float *yr = y + blockIdx.x * D;
	double sum = 0;
	for (int64_t i = threadIdx.x; i < D; i += blockDim.x) sum += xr[i];
	double mean = block_sum(sum) / (double)D;
	double var = 0;
	for (int64_t i = threadIdx.x; i < D; i += blockDim.x) var += (xr[i] - mean) * (xr[i] - mean);
	var = block_sum(var) / (double)D;
	float m = (float)mean, sc = (float)(1.0 / sqrt(var + eps));
	for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
		float v = (xr[i] - m) * sc;
		if (w) v *= w[i];
		if (b) v += b[i];
		yr[i] = v;
	}
}

extern "C" int sg_cu_layernorm(const float *x, const float *w, const float *b, float eps, float *y, int64_t rows, int64_t D, sg_custream s)
{
	if (rows <= 0) return 0;
	layernorm_kernel<<<(unsigned)rows, D >= 1024 ? 512 : 128, 0, (cudaStream_t)s>>>(x, w, b, eps, y, D);
	return ok();
}

/* --- RoPE and the KV cache --- */

/* Largest position of the step (dynamic NTK needs it; every thread of the block gets it). */
static __device__ int block_pmax(const int32_t *pos, int64_t n)
{
	__shared__ int pm;
	if (threadIdx.x == 0) {
		int m = 0;
		for (int64_t i = 0; i < n; i++) m = max(m, pos[i]);
		pm = m;
	}
	__syncthreads();
	return pm;
}

/* Frequency of pair k: the host's table, or for dynamic NTK the same double-precision formula as
 * the CPU reference with the base grown from the step's largest position. */
static __device__ __forceinline__ float rope_freq(const sg_cu_rope &r, int k, int pmax)
{
	if (!r.dyn) return r.inv_freq[k];
	double theta = r.theta;
	if (r.factor > 0 && r.orig_ctx > 0 && pmax + 1 > r.orig_ctx && r.nr > 2)
		theta *= pow((double)r.factor * (pmax + 1.0) / r.orig_ctx - ((double)r.factor - 1), (double)r.nr / (r.nr - 2));
	double f = 1.0 / pow(theta, (double)(2 * k) / (double)r.dim);
	if (r.prop && 2 * k >= r.nr) f = 0;
	return (float)f;
}

static __device__ __forceinline__ void rope_pair(float *x, const sg_cu_rope &r, float p, int k, int pmax)
{
	float a = p * rope_freq(r, k, pmax);
	float cs = cosf(a) * r.mscale, sn = sinf(a) * r.mscale;
	int ia = r.neox ? k : 2 * k, ib = r.neox ? k + r.half : 2 * k + 1;
	float x0 = x[ia], x1 = x[ib];
	x[ia] = x0 * cs - x1 * sn;
	x[ib] = x1 * cs + x0 * sn;
}

__global__ void rope_kernel(float *x, const int32_t *pos, int64_t H, int64_t total, const sg_cu_rope r)
{
	int pmax = r.dyn ? block_pmax(pos, total / H) : 0;
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total * r.half; i += (int64_t)gridDim.x * blockDim.x) {
		int64_t head = i / r.half;
		int k = (int)(i % r.half);
		rope_pair(x + head * r.hd, r, (float)pos[head / H] * r.pos_scale, k, pmax);
	}
}

extern "C" int sg_cu_rope_apply(float *x, const int32_t *pos, int64_t n, int64_t H, const sg_cu_rope *r, sg_custream s)
{
	int64_t total = n * H;
	if (total <= 0 || r->half <= 0) return 0;
	rope_kernel<<<grid_for(total * r->half, 256), 256, 0, (cudaStream_t)s>>>(x, pos, H, total, *r);
	return ok();
}

static __device__ __forceinline__ void cache_put(void *c, int f16, int64_t i, float v)
{
	if (f16) ((__half *)c)[i] = __float2half_rn(v);
	else ((float *)c)[i] = v;
}

__global__ void kv_store_kernel(const float *k, const float *v, const int32_t *pos, int64_t n, int64_t kper, int64_t vper, void *kc, int kf16,
				void *vc, int vf16, int64_t ctx)
{
	int64_t per = kper > vper ? kper : vper;
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n * per; i += (int64_t)gridDim.x * blockDim.x) {
		int64_t t = i / per, e = i % per;
		int32_t p = pos[t];
		if (p < 0 || p >= ctx) continue;
		if (e < kper) cache_put(kc, kf16, (int64_t)p * kper + e, k[t * kper + e]);
		if (e < vper) cache_put(vc, vf16, (int64_t)p * vper + e, v[t * vper + e]);
	}
}

extern "C" int sg_cu_kv_store(const float *k, const float *v, const int32_t *pos, int64_t n, int64_t kper, int64_t vper, void *kc, int kf16, void *vc,
			      int vf16, int64_t ctx, sg_custream s)
{
	if (n <= 0) return 0;
	int64_t per = kper > vper ? kper : vper;
	kv_store_kernel<<<grid_for(n * per, 256), 256, 0, (cudaStream_t)s>>>(k, v, pos, n, kper, vper, kc, kf16, vc, vf16, ctx);
	return ok();
}

/* One block per (token, head) of q and k together: rotate; a k head also writes its rotated row,
 * its unrotated tail and its v row into the caches (same thread that rotated a pair stores it). */
__global__ void attn_prep_kernel(float *q, float *k, const float *v, const int32_t *pos, int64_t Hq, int64_t Hk, int64_t hdv, const sg_cu_rope r,
				 void *kc, int kf16, void *vc, int vf16, int64_t ctx, const float *qn, const float *kn, float eps, float off)
{
	int64_t t = blockIdx.x / (Hq + Hk), h = blockIdx.x % (Hq + Hk);
	int pmax = r.dyn ? block_pmax(pos, gridDim.x / (Hq + Hk)) : 0;
	int32_t p = pos[t];
	float pf = (float)p * r.pos_scale;
	int isk = h >= Hq;
	float *x = isk ? k + (t * Hk + (h - Hq)) * r.hd : q + (t * Hq + h) * r.hd;
	const float *nw = isk ? kn : qn;
	if (qn || kn) {
		/* the per-head RMS norm first: the rmsnorm kernel's sums at its block size for rows of
		 * head_dim < 1024 (128 threads), so the result is bit-identical to running it */
		float ss = 0.0f;
		for (int64_t i = threadIdx.x; i < r.hd; i += blockDim.x) ss += x[i] * x[i];
		ss = block_sum(ss);
		float sc = 1.0f / sqrtf(ss / (float)r.hd + eps);
		if (nw)
			for (int64_t i = threadIdx.x; i < r.hd; i += blockDim.x) x[i] = x[i] * sc * (nw[i] + off);
		__syncthreads();
	}
	int store = isk && p >= 0 && p < ctx;
	int64_t kbase = store ? ((int64_t)p * Hk + (h - Hq)) * r.hd : 0;
	for (int kk = threadIdx.x; kk < r.half; kk += blockDim.x) {
		rope_pair(x, r, pf, kk, pmax);
		if (store) {
			int ia = r.neox ? kk : 2 * kk, ib = r.neox ? kk + r.half : 2 * kk + 1;
			cache_put(kc, kf16, kbase + ia, x[ia]);
			cache_put(kc, kf16, kbase + ib, x[ib]);
		}
	}
	if (!store) return;
	for (int i = 2 * r.half + threadIdx.x; i < r.hd; i += blockDim.x) cache_put(kc, kf16, kbase + i, x[i]);
	const float *vr = v + (t * Hk + (h - Hq)) * hdv;
	int64_t vbase = ((int64_t)p * Hk + (h - Hq)) * hdv;
	for (int64_t i = threadIdx.x; i < hdv; i += blockDim.x) cache_put(vc, vf16, vbase + i, vr[i]);
}

extern "C" int sg_cu_attn_prep(float *q, float *k, const float *v, const int32_t *pos, int64_t n, int64_t Hq, int64_t Hk, int64_t hdv,
			       const sg_cu_rope *r, void *kc, int kf16, void *vc, int vf16, int64_t ctx, const float *qn, const float *kn,
			       float eps, float off, sg_custream s)
{
	if (n <= 0) return 0;
	if ((qn || kn) && r->hd >= 1024) return (int)cudaErrorInvalidValue; /* the rmsnorm kernel would use 512 threads */
	attn_prep_kernel<<<(unsigned)(n * (Hq + Hk)), 128, 0, (cudaStream_t)s>>>(q, k, v, pos, Hq, Hk, hdv, *r, kc, kf16, vc, vf16, ctx, qn, kn,
										 eps, off);
	return ok();
}

/* --- attention --- */

#define AW 4 /* warps per attention block: each takes every AW-th kv position */

static __device__ __forceinline__ float kv_at(const void *c, int f16, int64_t i)
{
	return f16 ? __half2float(((const __half *)c)[i]) : ((const float *)c)[i];
}

/* ND = registers per lane for a head row (head dims up to 32*ND). */
template <int ND> __global__ void __launch_bounds__(AW * 32) attn_kernel(const sg_cu_attn a)
{
	__shared__ float sm_m[AW], sm_l[AW];
	__shared__ float sm_acc[AW][32 * ND];
	__shared__ int sm_pmax;
	int64_t th = blockIdx.x, t = th / a.H, h = th % a.H, kh = h / (a.H / a.Hkv);
	int c = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	if (!a.causal) {
		if (warp == 0) {
			int pm = 0;
			for (int64_t i = lane; i < a.n; i += 32) pm = max(pm, a.pos[i]);
			for (int o = 16; o > 0; o >>= 1) pm = max(pm, __shfl_xor_sync(0xffffffffu, pm, o));
			if (lane == 0) sm_pmax = pm;
		}
		__syncthreads();
	}
	int64_t p = a.pos[t];
	int64_t hi = a.causal ? p : sm_pmax;
	if (!a.ring && hi > a.ctx - 1) hi = a.ctx - 1;
	int64_t lo = a.causal && a.window > 0 ? p - a.window + 1 : 0;
	if (a.ring && lo < hi - a.ctx + 1) lo = hi - a.ctx + 1; /* older rows were overwritten */
	if (lo < 0) lo = 0;
	int64_t b0 = lo + (int64_t)c * a.chunk, b1 = a.nchunk == 1 ? hi : min(b0 + a.chunk - 1, hi);

	float qv[ND], acc[ND];
	const float *qr = a.q + (t * a.H + h) * a.hd;
#pragma unroll
	for (int i = 0; i < ND; i++) {
		int d = lane + 32 * i;
		qv[i] = d < a.hd ? qr[d] : 0.0f;
		acc[i] = 0.0f;
	}
	float m = -INFINITY, l = 0.0f;
	for (int64_t j = b0 + warp; j <= b1; j += AW) {
		int64_t row = a.ring ? j % a.ctx : j;
		int64_t kb = (row * a.Hkv + kh) * a.hd, vb = (row * a.Hkv + kh) * a.hdv;
		float s = 0.0f;
#pragma unroll
		for (int i = 0; i < ND; i++) {
			int d = lane + 32 * i;
			if (d < a.hd) s += qv[i] * kv_at(a.kc, a.kf16, kb + d);
		}
		s = warp_sum(s) * a.scale;
		if (a.cap > 0) s = a.cap * tanhf(s / a.cap);
		if (s > m) { /* new maximum: rescale what was accumulated */
			float cf = expf(m - s);
			l *= cf;
#pragma unroll
			for (int i = 0; i < ND; i++) acc[i] *= cf;
			m = s;
		}
		float e = expf(s - m);
		l += e;
#pragma unroll
		for (int i = 0; i < ND; i++) {
			int d = lane + 32 * i;
			if (d < a.hdv) acc[i] += e * kv_at(a.vc, a.vf16, vb + d);
		}
	}
	if (lane == 0) sm_m[warp] = m, sm_l[warp] = l;
#pragma unroll
	for (int i = 0; i < ND; i++) sm_acc[warp][lane + 32 * i] = acc[i];
	__syncthreads();
	float M = -INFINITY;
	for (int w = 0; w < AW; w++) M = fmaxf(M, sm_m[w]);
	float L = 0.0f;
	for (int w = 0; w < AW; w++)
		if (sm_l[w] > 0) L += sm_l[w] * expf(sm_m[w] - M);
	for (int64_t d = threadIdx.x; d < a.hdv; d += blockDim.x) {
		float A = 0.0f;
		for (int w = 0; w < AW; w++)
			if (sm_l[w] > 0) A += sm_acc[w][d] * expf(sm_m[w] - M);
		if (a.nchunk == 1) {
			a.out[th * a.hdv + d] = L > 0 ? A / L : 0.0f;
		} else {
			float *pp = a.part + (th * a.nchunk + c) * (a.hdv + 2);
			pp[2 + d] = A;
			if (d == 0) pp[0] = M, pp[1] = L;
		}
	}
}

/* Merges the chunks of each (token, head) in chunk order. */
__global__ void attn_merge_kernel(const sg_cu_attn a)
{
	int64_t th = blockIdx.x;
	const float *pp = a.part + th * a.nchunk * (a.hdv + 2);
	float M = -INFINITY, L = 0.0f;
	for (int c = 0; c < a.nchunk; c++) M = fmaxf(M, pp[c * (a.hdv + 2)]);
	for (int c = 0; c < a.nchunk; c++) {
		const float *q = pp + c * (a.hdv + 2);
		if (q[1] > 0) L += q[1] * expf(q[0] - M);
	}
	for (int64_t d = threadIdx.x; d < a.hdv; d += blockDim.x) {
		float A = 0.0f;
		for (int c = 0; c < a.nchunk; c++) {
			const float *q = pp + c * (a.hdv + 2);
			if (q[1] > 0) A += q[2 + d] * expf(q[0] - M);
		}
		a.out[th * a.hdv + d] = L > 0 ? A / L : 0.0f;
	}
}

extern "C" int sg_cu_attention(const sg_cu_attn *a, sg_custream s)
{
	int64_t items = a->n * a->H;
	if (items <= 0) return 0;
	int64_t dmax = a->hd > a->hdv ? a->hd : a->hdv;
	dim3 grid((unsigned)items, (unsigned)a->nchunk);
	cudaStream_t st = (cudaStream_t)s;
	if (dmax <= 32) attn_kernel<1><<<grid, AW * 32, 0, st>>>(*a);
	else if (dmax <= 64) attn_kernel<2><<<grid, AW * 32, 0, st>>>(*a);
	else if (dmax <= 128) attn_kernel<4><<<grid, AW * 32, 0, st>>>(*a);
	else if (dmax <= 256) attn_kernel<8><<<grid, AW * 32, 0, st>>>(*a);
	else if (dmax <= 512) attn_kernel<16><<<grid, AW * 32, 0, st>>>(*a);
	else return (int)cudaErrorInvalidValue;
	if (a->nchunk > 1) attn_merge_kernel<<<(unsigned)items, 128, 0, st>>>(*a);
	return ok();
}

/* --- elementwise --- */

__global__ void ew_kernel(int kind, const float *a, const float *b, float sc, float *out, int64_t n)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
		float g = a[i], r;
		switch (kind) {
		case SG_CU_EW_SILU: r = g / (1.0f + expf(-g)) * b[i]; break;
		case SG_CU_EW_GELU: r = 0.5f * g * (1.0f + tanhf(0.7978845608f * (g + 0.044715f * g * g * g))) * b[i]; break;
		case SG_CU_EW_GELU_ERF: r = 0.5f * g * (1.0f + erff(g * 0.70710678f)) * b[i]; break;
		case SG_CU_EW_ADD: r = g + b[i]; break;
		case SG_CU_EW_SCALE: r = g * sc; break;
		default: r = sc * tanhf(g / sc); break;
		}
		out[i] = r;
	}
}

extern "C" int sg_cu_elementwise(int kind, const float *a, const float *b, float sc, float *out, int64_t n, sg_custream s)
{
	if (n <= 0) return 0;
	ew_kernel<<<grid_for(n, 256), 256, 0, (cudaStream_t)s>>>(kind, a, b, sc, out, n);
	return ok();
}

/* --- softmax, routing, argmax --- */

__global__ void softmax_kernel(const float *x, float *out, int64_t D)
{
	const float *xr = x + blockIdx.x * D;
	float *o = out + blockIdx.x * D;
	float m = -INFINITY;
	for (int64_t i = threadIdx.x; i < D; i += blockDim.x) m = fmaxf(m, xr[i]);
	m = block_max(m);
	double sum = 0;
	for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
		float e = expf(xr[i] - m);
		o[i] = e;
		sum += e;
	}
	float inv = (float)(1.0 / block_sum(sum));
	for (int64_t i = threadIdx.x; i < D; i += blockDim.x) o[i] *= inv;
}

extern "C" int sg_cu_softmax(const float *x, float *out, int64_t rows, int64_t D, sg_custream s)
{
	if (rows <= 0) return 0;
	softmax_kernel<<<(unsigned)rows, 256, 0, (cudaStream_t)s>>>(x, out, D);
	return ok();
}

/* (value, index) argmax with ties to the lower index; NaN never wins. */
static __device__ __forceinline__ void better(float &bv, int &bi, float v, int i)
{
	if (v > bv || (v == bv && i < bi)) bv = v, bi = i;
}

static __device__ void block_argmax(float &bv, int &bi)
{
	__shared__ float sv[32];
	__shared__ int si[32];
	for (int o = 16; o > 0; o >>= 1) {
		float v = __shfl_xor_sync(0xffffffffu, bv, o);
		int i = __shfl_xor_sync(0xffffffffu, bi, o);
		better(bv, bi, v, i);
	}
	int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = blockDim.x >> 5;
	__syncthreads();
	if (l == 0) sv[w] = bv, si[w] = bi;
	__syncthreads();
	bv = sv[0], bi = si[0];
	for (int k = 1; k < nw; k++) better(bv, bi, sv[k], si[k]);
	__syncthreads();
}

#define MAX_EXPERTS 1024
__global__ void route_kernel(const float *logits, int64_t E, int sigmoid, int k, int norm, int32_t *ids, float *wout)
{
	__shared__ float p[MAX_EXPERTS];
	const float *x = logits + blockIdx.x * E;
	if (sigmoid) {
		for (int64_t i = threadIdx.x; i < E; i += blockDim.x) p[i] = 1.0f / (1.0f + expf(-x[i]));
	} else {
		float m = -INFINITY;
		for (int64_t i = threadIdx.x; i < E; i += blockDim.x) m = fmaxf(m, x[i]);
		m = block_max(m);
		double sum = 0;
		for (int64_t i = threadIdx.x; i < E; i += blockDim.x) {
			p[i] = expf(x[i] - m);
			sum += p[i];
		}
		float inv = (float)(1.0 / block_sum(sum));
		for (int64_t i = threadIdx.x; i < E; i += blockDim.x) p[i] *= inv;
	}
	__syncthreads();
	float wsum = 0.0f;
	for (int s = 0; s < k; s++) {
		float bv = -INFINITY;
		int bi = 0x7fffffff;
		for (int64_t i = threadIdx.x; i < E; i += blockDim.x)
			if (p[i] == p[i]) better(bv, bi, p[i], (int)i);
		block_argmax(bv, bi);
		if (bi == 0x7fffffff) bi = 0;
		if (threadIdx.x == 0) {
			ids[blockIdx.x * k + s] = bi;
			wout[blockIdx.x * k + s] = p[bi];
			wsum += p[bi];
			p[bi] = NAN; /* taken */
		}
		__syncthreads();
	}
	if (threadIdx.x == 0 && norm && wsum > 0)
		for (int s = 0; s < k; s++) wout[blockIdx.x * k + s] /= wsum;
}

extern "C" int sg_cu_moe_route(const float *logits, int64_t n, int64_t E, int sigmoid, int k, int norm, int32_t *ids, float *w, sg_custream s)
{
	if (n <= 0) return 0;
	if (E > MAX_EXPERTS) return (int)cudaErrorInvalidValue;
	route_kernel<<<(unsigned)n, 256, 0, (cudaStream_t)s>>>(logits, E, sigmoid, k, norm, ids, w);
	return ok();
}

__global__ void combine_kernel(const float *y, const float *w, int64_t k, int64_t D, float *out)
{
	int64_t t = blockIdx.x;
	for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
		float acc = 0.0f;
		for (int64_t s = 0; s < k; s++) acc += w[t * k + s] * y[(t * k + s) * D + d];
		out[t * D + d] = acc;
	}
}

extern "C" int sg_cu_moe_combine(const float *y, const float *w, int64_t n, int64_t k, int64_t D, float *out, sg_custream s)
{
	if (n <= 0) return 0;
	combine_kernel<<<(unsigned)n, 256, 0, (cudaStream_t)s>>>(y, w, k, D, out);
	return ok();
}

__global__ void argmax_kernel(const float *x, int64_t D, int32_t *ids)
{
	const float *xr = x + blockIdx.x * D;
	float bv = -INFINITY;
	int bi = 0;
	for (int64_t i = threadIdx.x; i < D; i += blockDim.x) better(bv, bi, xr[i], (int)i);
	block_argmax(bv, bi);
	if (threadIdx.x == 0) ids[blockIdx.x] = bi;
}

extern "C" int sg_cu_argmax(const float *x, int64_t rows, int64_t D, int32_t *ids, sg_custream s)
{
	if (rows <= 0) return 0;
	argmax_kernel<<<(unsigned)rows, 256, 0, (cudaStream_t)s>>>(x, D, ids);
	return ok();
}
