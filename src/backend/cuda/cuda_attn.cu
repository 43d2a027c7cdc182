/*
 * Attention of the CUDA backend, but for the flash prefill kernel (cuda_flash.cu): RoPE and the
 * KV-cache store (plain, and fused with the q/k norms: the attention prep), the general attention
 * kernel (any n, split over the KV length), the slice merges, the one-token decode attention
 * (attn_dec_kernel: the query heads of a KV head share its reads, slices of the live length in
 * parallel; the compile-time-shape forms with the K copy before the wait, the K-row pipeline, the
 * tensor-core product; dec_choose picks one from the policy) and the masked
 * row softmax of the cuBLAS prefill path. Each follows the CPU reference's arithmetic (same
 * formulas, f32) so the differential tests can hold tight thresholds.
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_policy.h"
#include "backend/cuda/cuda_q8.cuh"
#include "backend/cuda/cuda_reduce.cuh"

SG_CU_TRACE_FILE(attn)

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
 * its unrotated tail and its v row into the caches. The head goes through shared memory and its
 * norm weights and v row through registers, all loaded at once (the norm weights before the wait:
 * weights are never written), so the block waits out one memory round trip, not one per stage;
 * the arithmetic is that of the separate rmsnorm, rope and kv_store kernels. */
#define PREP_THREADS 128
#define PREP_MAX     1024 /* head dims of q / k and of v */
#define PREP_PER     (PREP_MAX / PREP_THREADS)
__global__ void __launch_bounds__(PREP_THREADS)
    attn_prep_kernel(float *q, float *k, const float *v, const int32_t *pos, int64_t Hq, int64_t Hk,
                     int64_t hdv, const sg_cu_rope r, void *kc, int kf16, void *vc, int vf16, int64_t ctx,
                     const float *qn, const float *kn, float eps, float off)
{
	__shared__ __align__(16) float xs[PREP_MAX];
	int64_t t = blockIdx.x / (Hq + Hk), h = blockIdx.x % (Hq + Hk);
	int isk = h >= Hq, tid = threadIdx.x;
	const float *nw = isk ? kn : qn;
	float wv[PREP_PER], vv[PREP_PER];
#pragma unroll
	for (int j = 0; j < PREP_PER; j++) {
		int i = tid + j * PREP_THREADS;
		wv[j] = nw && i < r.hd ? nw[i] + off : 1.0f;
	}
	pdl_trigger();
	pdl_wait();
	int pmax = r.dyn ? block_pmax(pos, gridDim.x / (Hq + Hk)) : 0;
	int32_t p = pos[t];
	float pf = (float)p * r.pos_scale;
	float *x = isk ? k + (t * Hk + (h - Hq)) * r.hd : q + (t * Hq + h) * r.hd;
	int store = isk && p >= 0 && p < ctx;
	const float *vr = v + (t * Hk + (isk ? h - Hq : 0)) * hdv;
#pragma unroll
	for (int j = 0; j < PREP_PER; j++) {
		int i = tid + j * PREP_THREADS;
		if (i < r.hd) xs[i] = x[i];
		vv[j] = isk && i < hdv ? vr[i] : 0.0f; /* not on store: the load need not wait for pos */
	}
	__syncthreads();
	if (qn || kn) {
		/* the per-head RMS norm first: the rmsnorm kernel's sums at its block size for rows of
		 * head_dim < 1024 (128 threads), so the result is bit-identical to running it */
		float sc = 1.0f / sqrtf(block_sumsq(xs, r.hd) / (float)r.hd + eps);
		if (nw)
#pragma unroll
			for (int j = 0; j < PREP_PER; j++) {
				int i = tid + j * PREP_THREADS;
				if (i < r.hd) xs[i] = xs[i] * sc * wv[j];
			}
		__syncthreads();
	}
	for (int kk = tid; kk < r.half; kk += PREP_THREADS) rope_pair(xs, r, pf, kk, pmax);
	__syncthreads();
	int64_t kbase = store ? ((int64_t)p * Hk + (h - Hq)) * r.hd : 0,
	        vbase = ((int64_t)p * Hk + (h - Hq)) * hdv;
#pragma unroll
	for (int j = 0; j < PREP_PER; j++) {
		int i = tid + j * PREP_THREADS;
		if (i < r.hd) {
			x[i] = xs[i];
			if (store) cache_put(kc, kf16, kbase + i, xs[i]);
		}
		if (store && i < hdv) cache_put(vc, vf16, vbase + i, vv[j]);
	}
}

extern "C" int sg_cu_attn_prep(float *q, float *k, const float *v, const int32_t *pos, int64_t n, int64_t Hq, int64_t Hk, int64_t hdv,
			       const sg_cu_rope *r, void *kc, int kf16, void *vc, int vf16, int64_t ctx, const float *qn, const float *kn,
			       float eps, float off, sg_custream s)
{
	if (n <= 0) return 0;
	if ((qn || kn) && r->hd >= 1024)
		return (int)cudaErrorInvalidValue; /* the rmsnorm kernel would use 512 threads */
	if (r->hd > PREP_MAX || hdv > PREP_MAX) return (int)cudaErrorInvalidValue;
	pdl_launch(attn_prep_kernel, dim3((unsigned)(n * (Hq + Hk))), dim3(PREP_THREADS), 0, (cudaStream_t)s,
	           q, k, v, pos, Hq, Hk, hdv, *r, kc, kf16, vc, vf16, ctx, qn, kn, eps, off);
	return ok();
}

/* A fence in the chain (cuda_internal.h): launched plainly, it starts after everything before it has
 * ended, and never triggers its dependents early. */
__global__ void fence_kernel() {}

extern "C" int sg_cu_fence(sg_custream s)
{
	fence_kernel<<<1, 1, 0, (cudaStream_t)s>>>();
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
	if (!a.causal && a.window > 0 && p + a.window - 1 < hi) hi = p + a.window - 1; /* two-sided window */
	if (!a.ring && hi > a.ctx - 1) hi = a.ctx - 1;
	int64_t lo = a.window > 0 ? p - a.window + 1 : 0;
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

/* Token blockIdx.z of an exact step's attentions in one launch (sg_cu_attn_decode_tokens): its
 * query, position, output and slices, the rest shared; every block then runs the one-token
 * kernel's arithmetic for that token. */
static __device__ __forceinline__ sg_cu_attn dec_token(const sg_cu_attn &a)
{
	sg_cu_attn b = a;
	const int64_t t = blockIdx.z;
	b.q += t * a.H * a.hd, b.pos += t, b.out += t * a.H * a.hdv;
	if (b.part) b.part += t * a.H * a.nchunk * (a.hdv + 2);
	return b;
}

/* The live rows [lo, hi] of a one-token decode and the rows of each of its nsplit slices (at
 * least 64, a multiple of 32): slice c holds [lo + c chunk, ...], live when lo + c chunk <= hi.
 * Read on the device (the position), so one recorded graph serves every length. */
static __device__ __forceinline__ void dec_span(const sg_cu_attn &a, int nsplit, int64_t &lo, int64_t &hi, int64_t &chunk)
{
	int64_t p = a.pos[0];
	hi = p;
	if (!a.ring && hi > a.ctx - 1) hi = a.ctx - 1;
	lo = a.window > 0 ? p - a.window + 1 : 0; /* one token: its own position is the highest either way */
	if (a.ring && lo < hi - a.ctx + 1) lo = hi - a.ctx + 1;
	if (lo < 0) lo = 0;
	chunk = (hi - lo + nsplit) / nsplit;
	chunk = chunk < 64 ? 64 : (chunk + 31) & ~(int64_t)31;
}

/* Merges the chunks of each (token, head): the chunks' weights exp(M_c - M) are found once, in
 * parallel, then each output dim sums its chunks in chunk order with independent loads. DEC (the
 * one-token decode kernel's slices): only the live slices, which are all its kernel wrote (the
 * others would add exp(-inf) * 0). */
#define MERGE_MAX 256
template <int DEC, bool MT = false> __global__ void attn_merge_kernel(const sg_cu_attn a0)
{
	const sg_cu_attn a = MT ? dec_token(a0) : a0;
	__shared__ float sf[MERGE_MAX];
	pdl_trigger();
	pdl_wait();
	int64_t th = blockIdx.x, st = a.hdv + 2;
	int ns = a.nchunk, nc = ns;
	if (DEC) {
		int64_t lo, hi, chunk;
		dec_span(a, a.nchunk, lo, hi, chunk);
		int64_t live = (hi - lo) / chunk + 1;
		nc = live < ns ? (int)live : ns;
	}
	const float *pp = a.part + th * ns * st;
	float M = -INFINITY;
	for (int c = threadIdx.x; c < nc; c += blockDim.x) M = fmaxf(M, pp[c * st]);
	M = block_max(M);
	float L = 0.0f;
	for (int c = threadIdx.x; c < nc; c += blockDim.x) {
		float lc = pp[c * st + 1], f = lc > 0 ? expf(pp[c * st] - M) : 0.0f;
		sf[c] = f;
		L += lc * f;
	}
	L = block_sum(L);
	for (int64_t d = threadIdx.x; d < a.hdv; d += blockDim.x) { /* whole warps: hdv is a multiple of 32 when xq is set */
		float A = 0.0f;
#pragma unroll 8
		for (int c = 0; c < nc; c++) A += pp[c * st + 2 + d] * sf[c];
		float v = L > 0 ? A / L : 0.0f;
		a.out[th * a.hdv + d] = v;
		if (a.xq) q8_store(v, (th * a.hdv + d) >> 5, (int)(d & 31), a.xq, a.dx, a.sx);
	}
}

/*
 * The one-token merge in one round trip (SARAGOSSA_CUDA_ATTN_MERGE=1): the position is read
 * before pdl_wait (positions are written by host copies alone, see attn_dec_kernel), so every
 * load of the live slices (thread c: slice c's M and L; each thread: its dim of every live
 * slice, up to DEC_SPLIT, predicated) goes out at once after the wait; the kernel above waits
 * out the position, then its M, L and A reads one after another, the A reads eight slices at a
 * time. The same arithmetic in the same order (for 128 threads and at most 128 slices: each
 * thread's max and sum hold slice c = threadIdx.x alone, then the same block reductions): its
 * bits.
 */
#define DEC_SPLIT 64 /* the most slices of a one-token decode */
template <bool MT = false> __global__ void __launch_bounds__(128) attn_merge1_kernel(const sg_cu_attn a0)
{
	const sg_cu_attn a = MT ? dec_token(a0) : a0;
	__shared__ float sf[DEC_SPLIT];
	pdl_trigger();
	int64_t lo, hi, chunk;
	dec_span(a, a.nchunk, lo, hi, chunk);
	int64_t live = (hi - lo) / chunk + 1;
	const int ns = a.nchunk;
	pdl_wait();
	int64_t th = blockIdx.x, st = a.hdv + 2;
	const float *pp = a.part + th * ns * st;
	const int nc = live < ns ? (int)live : ns, t = (int)threadIdx.x;
	float mc = -INFINITY, lc = 0.0f, v[DEC_SPLIT];
	if (t < nc) mc = pp[t * st], lc = pp[t * st + 1];
	for (int64_t d0 = 0; d0 < a.hdv; d0 += blockDim.x) {
		int64_t d = d0 + t;
#pragma unroll
		for (int c = 0; c < DEC_SPLIT; c++) v[c] = c < nc && d < a.hdv ? pp[c * st + 2 + d] : 0.0f;
		if (d0 == 0) { /* the first dims' values went out with M and L */
			float M = block_max(mc);
			float f = lc > 0 ? expf(mc - M) : 0.0f;
			if (t < nc) sf[t] = f;
			float L = block_sum(lc * f);
			mc = M, lc = L; /* kept for the later dims */
		}
		if (d >= a.hdv) continue; /* whole warps: hdv is a multiple of 32 */
		float A = 0.0f;
#pragma unroll
		for (int c = 0; c < DEC_SPLIT; c++)
			if (c < nc) A = fmaf(v[c], sf[c], A);
		float L = lc, o = L > 0 ? A / L : 0.0f;
		a.out[th * a.hdv + d] = o;
		if (a.xq) q8_store(o, (th * a.hdv + d) >> 5, (int)(d & 31), a.xq, a.dx, a.sx);
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
	if (a->nchunk > 1) attn_merge_kernel<0><<<(unsigned)items, 128, 0, st>>>(*a);
	return ok();
}

/*
 * Decode attention (one token), flash-decoding with the query heads of a KV head sharing each
 * K/V read. A block takes G query heads of one KV head and one of nsplit slices of the live KV
 * range (the slice length follows the live length, read from pos on the device, so one recorded
 * graph serves every step). Each warp scores 32 positions at a time, a lane per position
 * reading its K row with 16-byte loads against the queries in shared memory; the warp then
 * folds the 32 values in, each lane owning hdv/32 output dims, with the probabilities broadcast
 * from shared memory. Warps merge in shared memory; slices merge in attn_merge_kernel.
 */
#define DW 4 /* warps per decode block */

static __device__ __forceinline__ void h8(uint4 u, float *f)
{
	const __half2 *h = (const __half2 *)&u;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		float2 t = __half22float2(h[i]);
		f[2 * i] = t.x, f[2 * i + 1] = t.y;
	}
}
static __device__ __forceinline__ void ld8(const __half *p, float *f) { h8(*(const uint4 *)p, f); }

/* The tensor-core pieces of the one-token attention (SARAGOSSA_CUDA_ATTN_MMA). */
static __device__ __forceinline__ uint32_t h2u(__half2 h) { return *(const uint32_t *)&h; }
/* four 8 x 8 f16 tiles from shared memory (lane l gives the address of row l % 8 of tile l / 8),
 * as rows or (t) transposed */
static __device__ __forceinline__ void ldsm4(uint32_t *r, uint32_t addr)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
static __device__ __forceinline__ void ldsm4t(uint32_t *r, uint32_t addr)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
/* A warp's tile of cache rows t0 .. t0 + 31 (src: row 0 of the head, stride apart; rows past b1
 * stand in as row t0) into dst [32][HD + 8] by cp.async, once every lane is done with dst; returns
 * with the rows there for the whole warp. */
template <int HD>
static __device__ __forceinline__ void tile_rows(__half *dst, const __half *src, int64_t stride, int64_t t0, int64_t b1, int lane)
{
	constexpr int CPR = HD / 8; /* 16-byte chunks a row */
	__syncwarp();
#pragma unroll
	for (int it = 0; it < CPR; it++) {
		int i = it * 32 + lane, r = i / CPR, cc = i % CPR;
		int64_t jr = t0 + r <= b1 ? t0 + r : t0;
		cp_async16(dst + r * (HD + 8) + cc * 8, src + jr * stride + cc * 8);
	}
	cp_async_wait_all();
	__syncwarp();
}
/* c += A B, A 16 x 16 f16 with rows 8 .. 15 zero (a0, a2: row lane / 4), B 16 x 8 f16, c f32 */
static __device__ __forceinline__ void mma16816(float *c, uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
}
static __device__ __forceinline__ void ld8(const float *p, float *f)
{
	float4 a = ((const float4 *)p)[0], b = ((const float4 *)p)[1];
	f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}
template <int NV> static __device__ __forceinline__ void ldv(const __half *p, float *f)
{
	if (NV == 8) {
		ld8(p, f);
	} else if (NV == 4) {
		uint2 u = *(const uint2 *)p;
		const __half2 *h = (const __half2 *)&u;
		float2 a = __half22float2(h[0]), b = __half22float2(h[1]);
		f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
	} else if (NV == 2) {
		float2 a = __half22float2(*(const __half2 *)p);
		f[0] = a.x, f[1] = a.y;
	} else {
		f[0] = __half2float(*p);
	}
}
template <int NV> static __device__ __forceinline__ void ldv(const float *p, float *f)
{
	if (NV == 8) {
		ld8(p, f);
	} else if (NV == 4) {
		float4 a = *(const float4 *)p;
		f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w;
	} else if (NV == 2) {
		float2 a = *(const float2 *)p;
		f[0] = a.x, f[1] = a.y;
	} else {
		f[0] = *p;
	}
}

/* Shared memory of attn_dec_kernel, in floats (a multiple of 4: the copied K/V rows follow). */
static size_t dec_smem(int G, int64_t hd, int64_t hdv)
{
	return (size_t)(G * hd + DW * 32 * G + DW * 32 + 2 * DW * G + DW * G * hdv) * 4;
}
/* ... and one set of a warp's 32 K (or V) rows copied before the wait, f16, padded rows */
static size_t dec_rows_smem(int64_t hd) { return (size_t)DW * 32 * (size_t)(hd + 8) * 2; }

/* One head of the fused prep by one warp: x [HD] raw, into dst [HD] (shared memory) normalised
 * (when the layer has q/k norms: nw this head's weights, or NULL for none) and rotated. The sum
 * of squares is block_sumsq's at the prep kernel's 128 threads: thread t < HD/4 takes float4 t,
 * warps reduce by the same tree and warp 0 adds the warps' sums in order, so lane l here takes
 * float4s l, l + 32 (the prep kernel's warps 0, 1) and the chunks' sums are added the same way;
 * the scaling and rope_pair are the prep kernel's expressions (bit-identical). */
template <int HD>
static __device__ __forceinline__ void prep_head(const float *x, const float *nw, int norm, const sg_cu_aprep &pp, float *dst,
                                                 int lane, float pf, int pmax)
{
	constexpr int NC = (HD / 4 + 31) / 32;
	float4 v[NC], w[NC];
#pragma unroll
	for (int c = 0; c < NC; c++) {
		int i = c * 32 + lane;
		v[c] = i < HD / 4 ? ((const float4 *)x)[i] : make_float4(0, 0, 0, 0);
		w[c] = nw && i < HD / 4 ? ((const float4 *)nw)[i] : make_float4(1, 1, 1, 1);
	}
	if (norm) {
		float tot = 0.0f;
#pragma unroll
		for (int c = 0; c < NC; c++) {
			float ss = 0.0f;
			ss += v[c].x * v[c].x + v[c].y * v[c].y + v[c].z * v[c].z + v[c].w * v[c].w;
			ss = warp_sum(ss);
			tot = c ? tot + ss : ss;
		}
		float sc = 1.0f / sqrtf(tot / (float)HD + pp.eps);
		if (nw)
#pragma unroll
			for (int c = 0; c < NC; c++) {
				v[c].x = v[c].x * sc * (w[c].x + pp.off), v[c].y = v[c].y * sc * (w[c].y + pp.off);
				v[c].z = v[c].z * sc * (w[c].z + pp.off), v[c].w = v[c].w * sc * (w[c].w + pp.off);
			}
	}
#pragma unroll
	for (int c = 0; c < NC; c++)
		if (c * 32 + lane < HD / 4) ((float4 *)dst)[c * 32 + lane] = v[c];
	__syncwarp();
	for (int kk = lane; kk < pp.r.half; kk += 32) rope_pair(dst, pp.r, pf, kk, pmax);
	__syncwarp();
}

/*
 * HD > 0: the f16 path with head dims hd = hdv = HD known at compile time: a lane's K row loads
 * are all in flight at once, and V rows are read 16 bytes a lane, HD/8 lanes a row, 256/HD rows
 * per load instruction (the partial sums of the lanes sharing dims meet by shuffles at the end).
 * HD = 0: any shapes the _ok test passes, NV = hdv/32 dims a lane.
 * STG, the form of an HD > 0 kernel: DEC_PLAIN; DEC_KPIPE (with the K copy before the wait;
 * SARAGOSSA_CUDA_ATTN_KPIPE): every later tile's K rows are copied into the same shared rows while
 * the tile before takes its V rows, so a warp walking several tiles (long contexts) waits out one
 * memory round trip a tile, not two; DEC_MMA, the tensor-core kernel (SARAGOSSA_CUDA_ATTN_MMA).
 */
enum { DEC_PLAIN = 0, DEC_KPIPE = 2, DEC_MMA = 4 };
template <typename T, int G, int NV, int HD, int STG, bool MT = false>
__global__ void __launch_bounds__(DW * 32) attn_dec_kernel(const sg_cu_attn a0)
{
	const sg_cu_attn a = MT ? dec_token(a0) : a0;
	extern __shared__ float4 dec_sm4[];
	constexpr int LPR = HD ? HD / 8 : 32; /* lanes a V row */
	constexpr int RPI = 32 / LPR;         /* V rows a load instruction */
	constexpr int VD = HD ? 8 : NV;       /* V dims a lane */
	const int hd = HD ? HD : (int)a.hd, hdv = HD ? HD : (int)a.hdv;
	float *sq = (float *)dec_sm4;           /* [G][hd] queries */
	float *sp = sq + G * hd;                /* [DW][32][G] probabilities of the warp's tile */
	int *srow = (int *)(sp + DW * 32 * G);  /* [DW][32] cache rows of the tile */
	float *smx = (float *)(srow + DW * 32); /* [DW][G] running max */
	float *sl = smx + DW * G;               /* [DW][G] running sum */
	float *sacc = sl + DW * G;              /* [DW][G][hdv] */
	constexpr int CPR = HD ? HD / 8 : 1;    /* 16-byte chunks a row */
	/* PRE: [32][HD + 8]: rows 16 bytes longer than HD, so the 8 lanes of a shared-memory phase,
	 * each reading its own row at one offset, fall in 8 different banks */
	__half *kpst = (__half *)(sacc + DW * G * hdv) + (threadIdx.x >> 5) * 32 * (HD + 8);
	/* VFIRST (a.vfirst, the tensor-core kernel): the first tile's V rows, the same layout, after every warp's K rows */
	__half *vpst = (__half *)(sacc + DW * G * hdv) + (DW + (threadIdx.x >> 5)) * 32 * (HD + 8);
	pdl_trigger();
	int gall = (int)(a.H / a.Hkv), ng = gall / G;
	int kh = blockIdx.x / ng, h0 = kh * gall + (blockIdx.x % ng) * G;
	int c = blockIdx.y, nsplit = a.nchunk, warp = threadIdx.x >> 5, lane = threadIdx.x & 31; /* the grid may stop at the live slices */
	/* The position before pdl_wait: positions are written by host copies alone, ordered before
	 * every kernel of the step (no kernel of a step writes them), so the value is there when any
	 * kernel of the step runs; the wait is for the queries and this step's K/V row. */
	int64_t lo, hi, chunk;
	dec_span(a, nsplit, lo, hi, chunk);
	int64_t b0 = lo + (int64_t)c * chunk, b1 = min(b0 + chunk - 1, hi), tf = b0 + warp * 32;
	int64_t rs = a.Hkv * hd, vrs = a.Hkv * hdv;
	/* PRE (SARAGOSSA_CUDA_ATTN_KPRE): the K rows of the warp's first tile are copied into shared
	 * memory (cp.async) before the wait: rows of earlier positions were written
	 * by earlier steps, and the lane whose row is this step's position reads it again after the
	 * wait. The copy's memory round trip overlaps the previous kernel's tail. */
	constexpr bool PRE = HD > 0, PIPE = HD && STG == DEC_KPIPE;
	int kpre = 0;
	const int64_t jf = tf + lane <= b1 ? tf + lane : tf; /* the lane's row of the first tile */
	if constexpr (PRE) {
		if (a.kpre && tf <= b1) {
#pragma unroll
			for (int it = 0; it < CPR; it++) {
				int i = it * 32 + lane, r = i / CPR, cc = i % CPR;
				int64_t jr = tf + r <= b1 ? tf + r : tf, rr = a.ring ? jr % a.ctx : jr;
				cp_async16(kpst + r * (HD + 8) + cc * 8, (const __half *)a.kc + kh * hd + rr * rs + cc * 8);
				if (STG == DEC_MMA && a.vfirst) cp_async16(vpst + r * (HD + 8) + cc * 8, (const __half *)a.vc + kh * hdv + rr * vrs + cc * 8);
			}
			kpre = jf != a.pos[0];
		}
	}
	pdl_wait();
	/* hd is a multiple of 8: whole float4s */
	constexpr int QV = (G * (HD ? HD : 256) / 4 + DW * 32 - 1) / (DW * 32);
	float4 qv[QV];
	const float4 *q4 = (const float4 *)(a.q + (int64_t)h0 * hd);
	const bool fused = HD && a.prep.on;
	if (!fused) {
#pragma unroll
		for (int k = 0; k < QV; k++) {
			int i = (int)threadIdx.x + k * DW * 32;
			if (i < G * hd / 4) qv[k] = q4[i];
		}
	}
	if constexpr (HD > 0) {
		/* the prep fused in: the block's query heads into sq; the blocks of the slice holding the
		 * position also the step's K and V rows into the caches (every such block stores the
		 * same bits; each reads its own stores after the barrier) */
		if (fused) {
			if (b0 > hi) return;
			const sg_cu_aprep &pp = a.prep;
			int p = a.pos[0], pmax = pp.r.dyn ? max(p, 0) : 0, qk = pp.qn || pp.kn;
			float pf = (float)p * pp.r.pos_scale;
			for (int g = warp; g < G; g += DW) prep_head<HD>(a.q + (int64_t)(h0 + g) * HD, pp.qn, qk, pp, sq + g * HD, lane, pf, pmax);
			if (p >= 0 && p < a.ctx && p >= b0 && p <= b1 && warp == DW - 1) {
				float *ks = sacc; /* free until the end */
				prep_head<HD>(pp.k + (int64_t)kh * HD, pp.kn, qk, pp, ks, lane, pf, pmax);
				__half *kd = (__half *)a.kc + ((int64_t)p * a.Hkv + kh) * HD, *vd = (__half *)a.vc + ((int64_t)p * a.Hkv + kh) * HD;
				const float *vr = pp.v + (int64_t)kh * HD;
#pragma unroll
				for (int i = lane; i < HD / 4; i += 32) {
					float4 kv = ((const float4 *)ks)[i], vv = ((const float4 *)vr)[i];
					__half2 k2[2] = {__floats2half2_rn(kv.x, kv.y), __floats2half2_rn(kv.z, kv.w)};
					__half2 v2[2] = {__floats2half2_rn(vv.x, vv.y), __floats2half2_rn(vv.z, vv.w)};
					*(uint2 *)(kd + 4 * i) = *(const uint2 *)k2;
					*(uint2 *)(vd + 4 * i) = *(const uint2 *)v2;
				}
			}
			__syncthreads();
		}
	}
	if constexpr (PRE) {
		if (a.kpre && tf <= b1) {
			cp_async_wait_all();
			__syncwarp();
			if (!kpre) { /* this step's row (or the first row standing in for it): read after the wait */
				int64_t row = a.ring ? jf % a.ctx : jf;
				const uint4 *src = (const uint4 *)((const __half *)a.kc + kh * hd + row * rs);
#pragma unroll
				for (int cc = 0; cc < CPR; cc++) *(uint4 *)(kpst + lane * (HD + 8) + cc * 8) = src[cc];
				if (STG == DEC_MMA && a.vfirst) { /* and its V row (a lane past the slice: the row standing in) */
					const uint4 *vs = (const uint4 *)((const __half *)a.vc + kh * hdv + row * vrs);
#pragma unroll
					for (int cc = 0; cc < CPR; cc++) *(uint4 *)(vpst + lane * (HD + 8) + cc * 8) = vs[cc];
				}
			}
			__syncwarp();
		}
	}
	if (b0 > hi) return; /* a slice past the live rows: the merge skips it (whole block: no barrier waits) */
	if (!fused) {
#pragma unroll
		for (int k = 0; k < QV; k++) {
			int i = (int)threadIdx.x + k * DW * 32;
			if (i < G * hd / 4) ((float4 *)sq)[i] = qv[k];
		}
	}
	if constexpr (STG == DEC_MMA && HD > 0 && HD <= 128) {
		/* Tensor cores (SARAGOSSA_CUDA_ATTN_MMA): a tile's scores as one 16 x 32 product (the G
		 * query heads as rows, the rest zero) and its values as a 16 x HD one, from the tile's K,
		 * then V, rows in the warp's shared rows; queries and probabilities rounded to f16 as in
		 * the prefill kernels, sums in f32. Lane (g, t) = (lane / 4, lane % 4) holds head g's
		 * scores of positions 8n + 2t, 8n + 2t + 1 and its values of dims 8j + 2t, 8j + 2t + 1. */
		const int g = lane >> 2, t = lane & 3;
		const bool real = g < G;
		__syncthreads(); /* sq written by every warp */
		uint32_t qa[HD / 16][2];
#pragma unroll
		for (int ks = 0; ks < HD / 16; ks++) {
			float2 x0 = real ? *(const float2 *)(sq + g * HD + 16 * ks + 2 * t) : make_float2(0, 0);
			float2 x1 = real ? *(const float2 *)(sq + g * HD + 16 * ks + 8 + 2 * t) : make_float2(0, 0);
			qa[ks][0] = h2u(__floats2half2_rn(x0.x, x0.y)), qa[ks][1] = h2u(__floats2half2_rn(x1.x, x1.y));
		}
		float o[HD / 8][4];
#pragma unroll
		for (int j = 0; j < HD / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
		float mr = -INFINITY, lr = 0.0f;
		const uint32_t kbuf = (uint32_t)__cvta_generic_to_shared(kpst);
		for (int64_t t0 = tf; t0 <= b1; t0 += DW * 32) {
			if (t0 != tf || !a.kpre) { /* the tile's K rows (the first one's came before the wait) */
				tile_rows<HD>(kpst, (const __half *)a.kc + kh * hd, rs, t0, b1, lane);
			}
			float sc[4][4];
#pragma unroll
			for (int n = 0; n < 4; n++) {
				sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
#pragma unroll
				for (int ks = 0; ks < HD / 16; ks += 2) { /* two k-steps of K rows 8n .. 8n + 7 */
					uint32_t b[4];
					ldsm4(b, kbuf + (uint32_t)(((8 * n + (lane & 7)) * (HD + 8) + 16 * ks + 8 * (lane >> 3)) * 2));
					mma16816(sc[n], qa[ks][0], qa[ks][1], b[0], b[1]);
					mma16816(sc[n], qa[ks + 1][0], qa[ks + 1][1], b[2], b[3]);
				}
			}
			float mx = -INFINITY;
#pragma unroll
			for (int n = 0; n < 4; n++)
#pragma unroll
				for (int c = 0; c < 2; c++) {
					int64_t jp = t0 + 8 * n + 2 * t + c;
					float v = sc[n][c] * a.scale;
					if (a.cap > 0) v = a.cap * tanhf(v / a.cap);
					sc[n][c] = jp <= b1 ? v : -INFINITY;
					mx = fmaxf(mx, sc[n][c]);
				}
			mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
			mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
			float mn = fmaxf(mr, mx), cf = expf(mr - mn); /* finite: position t0 is live */
			mr = mn;
			lr *= cf;
#pragma unroll
			for (int j = 0; j < HD / 8; j++) o[j][0] *= cf, o[j][1] *= cf;
			uint32_t pa[2][2];
#pragma unroll
			for (int n = 0; n < 4; n++) {
				float p0 = expf(sc[n][0] - mn), p1 = expf(sc[n][1] - mn);
				lr += p0 + p1;
				pa[n >> 1][n & 1] = real ? h2u(__floats2half2_rn(p0, p1)) : 0u;
			}
			/* the V rows into the same shared rows, the scores' K rows read (the first tile's came
			 * before the wait, with VFIRST) */
			uint32_t vbuf = kbuf;
			if (t0 == tf && a.vfirst)
				vbuf = (uint32_t)__cvta_generic_to_shared(vpst);
			else
				tile_rows<HD>(kpst, (const __half *)a.vc + kh * hdv, vrs, t0, b1, lane);
#pragma unroll
			for (int kk = 0; kk < 2; kk++) /* positions 16 kk .. 16 kk + 15 */
#pragma unroll
				for (int q2 = 0; q2 < HD / 16; q2++) { /* dims 16 q2 .. 16 q2 + 15 */
					uint32_t b[4];
					ldsm4t(b, vbuf + (uint32_t)(((16 * kk + 8 * ((lane >> 3) & 1) + (lane & 7)) * (HD + 8) + 16 * q2 + 8 * (lane >> 4)) * 2));
					mma16816(o[2 * q2], pa[kk][0], pa[kk][1], b[0], b[1]);
					mma16816(o[2 * q2 + 1], pa[kk][0], pa[kk][1], b[2], b[3]);
				}
		}
		lr += __shfl_xor_sync(0xffffffffu, lr, 1);
		lr += __shfl_xor_sync(0xffffffffu, lr, 2);
		if (real) {
			if (t == 0) smx[warp * G + g] = mr, sl[warp * G + g] = lr;
#pragma unroll
			for (int j = 0; j < HD / 8; j++) *(float2 *)(sacc + (warp * G + g) * hdv + 8 * j + 2 * t) = make_float2(o[j][0], o[j][1]);
		}
	} else {
	float m[G], l[G], acc[G][VD];
#pragma unroll
	for (int g = 0; g < G; g++) {
		m[g] = -INFINITY, l[g] = 0.0f;
#pragma unroll
		for (int e = 0; e < VD; e++) acc[g][e] = 0.0f;
	}
	const int sub = HD ? lane / LPR : 0, dl = HD ? (lane % LPR) * 8 : lane * NV; /* V row of the instruction, first dim */
	const T *kb = (const T *)a.kc + kh * hd, *vb = (const T *)a.vc + kh * hdv + dl;
	float *pw = sp + warp * 32 * G;
	int *rw = srow + warp * 32;
	__syncthreads();
	for (int64_t t0 = tf; t0 <= b1; t0 += DW * 32) {
		/* lanes past the slice read the tile's first row (always live) and are masked below,
		 * so every load is unconditional and a row is never past the cache */
		int valid = t0 + lane <= b1;
		int64_t j = valid ? t0 + lane : t0, row = a.ring ? j % a.ctx : j;
		float s[G];
#pragma unroll
		for (int g = 0; g < G; g++) s[g] = 0.0f;
		const T *kr = kb + row * rs;
		/* PRE: the first tile's rows from shared memory (padded rows: the same offsets as a
		 * row in the cache, one base address for both); with kpipe every tile's, each copied
		 * while the tile before it took its V rows */
		const T *ks = kr;
		if constexpr (PRE) {
			if (PIPE && t0 != tf) {
				cp_async_wait_all();
				__syncwarp();
				if (j == a.pos[0]) { /* this step's row: read again, past the prep's stores */
#pragma unroll 1
					for (int cc = 0; cc < CPR; cc++) *(uint4 *)(kpst + lane * (HD + 8) + cc * 8) = ((const uint4 *)kr)[cc];
				}
			}
			if (a.kpre && (t0 == tf || PIPE)) ks = (const T *)(kpst + lane * (HD + 8));
		}
#pragma unroll(HD ? 16 : 4)
		for (int e = 0; e < hd; e += 8) {
			float kf[8];
			ld8(ks + e, kf);
#pragma unroll
			for (int g = 0; g < G; g++) {
				const float4 *q4 = (const float4 *)(sq + g * hd + e);
				float4 x0 = q4[0], x1 = q4[1];
				s[g] += x0.x * kf[0] + x0.y * kf[1] + x0.z * kf[2] + x0.w * kf[3] + x1.x * kf[4] + x1.y * kf[5] + x1.z * kf[6] +
					x1.w * kf[7];
			}
		}
		if constexpr (PIPE) { /* the next tile's K rows on their way while this one's V rows load */
			int64_t t1 = t0 + DW * 32;
			if (t1 <= b1) {
				__syncwarp(); /* every lane is done with its row of this tile */
#pragma unroll 2
				for (int it = 0; it < CPR; it++) {
					int i = it * 32 + lane, r = i / CPR, cc = i % CPR;
					int64_t jr = t1 + r <= b1 ? t1 + r : t1, rr = a.ring ? jr % a.ctx : jr;
					cp_async16(kpst + r * (HD + 8) + cc * 8, (const __half *)a.kc + kh * hd + rr * rs + cc * 8);
				}
				cp_async_commit();
			}
		}
#pragma unroll
		for (int g = 0; g < G; g++) {
			float sg = valid ? s[g] * a.scale : -INFINITY;
			if (valid && a.cap > 0) sg = a.cap * tanhf(sg / a.cap);
			float mn = fmaxf(m[g], warp_max(sg)); /* finite: lane 0 is valid */
			float cf = expf(m[g] - mn);
			l[g] *= cf;
#pragma unroll
			for (int e = 0; e < VD; e++) acc[g][e] *= cf;
			m[g] = mn;
			float pr = valid ? expf(sg - mn) : 0.0f;
			l[g] += pr;
			pw[lane * G + g] = pr;
		}
		rw[lane] = (int)row;
		__syncwarp();
		/* HD: all 32 rows (masked ones have p = 0), every load in flight at once */
		int nv = HD ? 32 : (int)min((int64_t)32, b1 - t0 + 1);
#pragma unroll(HD ? 32 / RPI : 8)
		for (int jj = sub; jj < nv; jj += RPI) {
			float vf[VD];
			if constexpr (HD)
				ld8(vb + (int64_t)rw[jj] * vrs, vf);
			else
				ldv<NV>(vb + (int64_t)rw[jj] * vrs, vf);
#pragma unroll
			for (int g = 0; g < G; g++) {
				float pg = pw[jj * G + g];
#pragma unroll
				for (int e = 0; e < VD; e++) acc[g][e] += pg * vf[e];
			}
		}
		__syncwarp();
	}
	if constexpr (RPI > 1) { /* lanes holding the same dims for other rows */
#pragma unroll
		for (int o = LPR; o < 32; o <<= 1)
#pragma unroll
			for (int g = 0; g < G; g++)
#pragma unroll
				for (int e = 0; e < VD; e++) acc[g][e] += __shfl_xor_sync(0xffffffffu, acc[g][e], o);
	}
#pragma unroll
	for (int g = 0; g < G; g++) {
		float ls = warp_sum(l[g]);
		if (lane == 0) smx[warp * G + g] = m[g], sl[warp * G + g] = ls;
		if (sub == 0)
#pragma unroll
			for (int e = 0; e < VD; e++) sacc[(warp * G + g) * hdv + dl + e] = acc[g][e];
	}
	}
	__syncthreads();
	for (int i = threadIdx.x; i < G * hdv; i += DW * 32) {
		int g = i / hdv, d = i % hdv;
		float M = -INFINITY, L = 0.0f, A = 0.0f;
		for (int w = 0; w < DW; w++) M = fmaxf(M, smx[w * G + g]);
		for (int w = 0; w < DW; w++)
			if (sl[w * G + g] > 0) {
				float f = expf(smx[w * G + g] - M);
				L += sl[w * G + g] * f;
				A += sacc[(w * G + g) * hdv + d] * f;
			}
		int64_t h = h0 + g;
		if (nsplit == 1) { /* whole warps: G hdv is a multiple of 32 */
			float v = L > 0 ? A / L : 0.0f;
			a.out[h * hdv + d] = v;
			if (a.xq) q8_store(v, (h * hdv + d) >> 5, lane, a.xq, a.dx, a.sx);
		} else {
			float *pp = a.part + (h * nsplit + c) * (hdv + 2);
			pp[2 + d] = A;
			if (d == 0) pp[0] = M, pp[1] = L;
		}
	}
}

/* The query heads a decode block takes: the largest of 8, 4, 2, 1 dividing the group; few KV
 * heads (4 for Qwen3-30B-A3B): 4 query heads a block, for twice the blocks. Measured against fixed
 * groups (bench/RESULTS.md): 8 heads a block lost at 32k on the MoE, 1 or 2 lost at 8k. */
static int dec_group(const sg_cu_attn *a)
{
	int gall = (int)(a->H / a->Hkv);
	int g = gall % 8 == 0 ? 8 : gall % 4 == 0 ? 4 : gall % 2 == 0 ? 2 : 1;
	if (g == 8 && a->Hkv * (gall / g) < 8) g = 4;
	return g;
}

extern "C" int sg_cu_attn_decode_ok(const sg_cu_attn *a)
{
	int64_t nv = a->hdv / 32;
	return a->n == 1 && a->kf16 == a->vf16 && a->hd % 8 == 0 && a->hd <= 256 && a->hdv % 32 == 0 && (nv == 1 || nv == 2 || nv == 4 || nv == 8) &&
	       a->ctx < INT32_MAX && dec_smem(dec_group(a), a->hd, a->hdv) <= 48 * 1024;
}

/* The forms of the one-token attention kernel (dec_choose). */
typedef enum {
	DEC_GENERAL,     /* runtime shapes (any head dim, f32 or f16 caches) */
	DEC_FIXED,       /* f16, head dim 64/128/256 at compile time, every K row read after the wait */
	DEC_FIXED_KPRE,  /* and the first tiles' K rows copied into shared memory before the wait */
	DEC_FIXED_KPIPE, /* and every later tile's K rows copied while the tile before reads its V rows */
	DEC_TC,          /* tensor cores (the K copy before the wait included) */
	DEC_TC_VFIRST    /* and the first tiles' V rows copied before the wait too */
} dec_form;

/* The compile-time-shape kernel takes the attention: f16 caches of one head dim 64, 128 or 256. */
static int dec_fixed_ok(const sg_cu_attn *a, const sg_cu_policy *pol)
{
	return pol->attn.decode != SG_CU_DECODE_GROUPED && a->kf16 && a->hd == a->hdv && (a->hd == 64 || a->hd == 128 || a->hd == 256);
}

/* ... with its first tiles' K rows copied before the wait, where the block's shared memory stays
 * within the 48 KB that needs no opt-in (f16 head dim 128 with 4 query heads: 45 KB) */
static int dec_kpre_ok(const sg_cu_attn *a, int G, const sg_cu_policy *pol)
{
	return dec_fixed_ok(a, pol) && pol->attn.kpre && dec_smem(G, a->hd, a->hdv) + dec_rows_smem(a->hd) <= 48 * 1024;
}

/* ... on tensor cores: blocks of up to 4 query heads (those its tests cover), head dim 64 or 128, no ring */
static int dec_tc_ok(const sg_cu_attn *a, int G, const sg_cu_policy *pol)
{
	return dec_kpre_ok(a, G, pol) && a->hd <= 128 && G <= 4 && pol->attn.mma && !a->ring;
}

/* The tensor-core kernel copies its first tiles' V rows before the wait too where two blocks an
 * SM hold the whole grid (its shared memory then passes 48 KB: opted into once) */
static int dec_vfirst(dim3 grid, const sg_cu_policy *pol) { return pol->attn.vfirst && (int64_t)grid.x * grid.y <= 2 * (int64_t)sg_cu_sms(); }

/* The form a one-token attention takes (G query heads a block, the grid): the one place where the
 * decode attention's switches meet. The launch may step down from the VFIRST form where the GPU
 * refuses its shared memory. */
static dec_form dec_choose(const sg_cu_attn *a, int G, dim3 grid, const sg_cu_policy *pol)
{
	if (!dec_fixed_ok(a, pol)) return DEC_GENERAL;
	if (!dec_kpre_ok(a, G, pol)) return DEC_FIXED;
	if (dec_tc_ok(a, G, pol)) return dec_vfirst(grid, pol) ? DEC_TC_VFIRST : DEC_TC;
	/* the pipeline where a warp may walk several tiles: a slice longer than DW tiles (more than
	 * 8192 rows at 64 slices); measured 1.8% slower where no warp does (1k positions) */
	if (pol->attn.kpipe && a->ctx > (int64_t)DW * 32 * a->nchunk) return DEC_FIXED_KPIPE;
	return DEC_FIXED_KPRE;
}

/* The compile-time head-dim kernel in form f. */
template <int G, int NV, int HD, bool MT>
static void dec_fixed(const sg_cu_attn *a, dec_form f, dim3 grid, size_t sm, cudaStream_t st, const sg_cu_policy *pol)
{
	if (f == DEC_FIXED) { (void)pdl_launch(attn_dec_kernel<__half, G, NV, HD, DEC_PLAIN, MT>, grid, dim3(DW * 32), sm, st, *a); return; }
	const size_t smk = sm + dec_rows_smem(HD);
	sg_cu_attn b = *a;
	b.kpre = 1;
	if constexpr (HD <= 128 && G <= 4) {
		if (f == DEC_TC_VFIRST) {
			static int ready; /* 1 = the kernel may take the larger shared memory, -1 = it may not */
			size_t smv = smk + dec_rows_smem(HD);
			if (!ready)
				ready = cudaFuncSetAttribute(attn_dec_kernel<__half, G, NV, HD, DEC_MMA, MT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smv) ? -1
																		 : 1;
			if (ready > 0) {
				b.vfirst = 1;
				(void)pdl_launch(attn_dec_kernel<__half, G, NV, HD, DEC_MMA, MT>, grid, dim3(DW * 32), smv, st, b);
				return;
			}
			(void)cudaGetLastError();
			f = DEC_TC;
		}
		if (f == DEC_TC) { (void)pdl_launch(attn_dec_kernel<__half, G, NV, HD, DEC_MMA, MT>, grid, dim3(DW * 32), smk, st, b); return; }
	}
	if (f == DEC_FIXED_KPIPE) { (void)pdl_launch(attn_dec_kernel<__half, G, NV, HD, DEC_KPIPE, MT>, grid, dim3(DW * 32), smk, st, b); return; }
	(void)pdl_launch(attn_dec_kernel<__half, G, NV, HD, DEC_PLAIN, MT>, grid, dim3(DW * 32), smk, st, b);
}

template <typename T, int G, bool MT>
static void dec_launch(const sg_cu_attn *a, dim3 grid, size_t sm, cudaStream_t st, const sg_cu_policy *pol)
{
	const dec_form f = dec_choose(a, G, dim3(grid.x, (unsigned)a->nchunk, grid.z), pol); /* the form of the whole grid's step */
	if constexpr (sizeof(T) == 2) {
		if (f != DEC_GENERAL && a->hd == 128) return dec_fixed<G, 4, 128, MT>(a, f, grid, sm, st, pol);
		if (f != DEC_GENERAL && a->hd == 256) return dec_fixed<G, 8, 256, MT>(a, f, grid, sm, st, pol);
		if (f != DEC_GENERAL && a->hd == 64) return dec_fixed<G, 2, 64, MT>(a, f, grid, sm, st, pol);
	}
	switch (a->hdv / 32) {
	case 1:
		pdl_launch(attn_dec_kernel<T, G, 1, 0, DEC_PLAIN, MT>, grid, dim3(DW * 32), sm, st, *a);
		break;
	case 2:
		pdl_launch(attn_dec_kernel<T, G, 2, 0, DEC_PLAIN, MT>, grid, dim3(DW * 32), sm, st, *a);
		break;
	case 4:
		pdl_launch(attn_dec_kernel<T, G, 4, 0, DEC_PLAIN, MT>, grid, dim3(DW * 32), sm, st, *a);
		break;
	default:
		pdl_launch(attn_dec_kernel<T, G, 8, 0, DEC_PLAIN, MT>, grid, dim3(DW * 32), sm, st, *a);
		break;
	}
}

template <typename T, bool MT> static void dec_launch_g(const sg_cu_attn *a, int G, dim3 grid, size_t sm, cudaStream_t st, const sg_cu_policy *pol)
{
	switch (G) {
	case 8: return dec_launch<T, 8, MT>(a, grid, sm, st, pol);
	case 4: return dec_launch<T, 4, MT>(a, grid, sm, st, pol);
	case 2: return dec_launch<T, 2, MT>(a, grid, sm, st, pol);
	default: return dec_launch<T, 1, MT>(a, grid, sm, st, pol);
	}
}

extern "C" int sg_cu_attn_decode_units(const sg_cu_attn *a) { return (int)(a->Hkv * (a->H / a->Hkv / dec_group(a))); }

extern "C" int sg_cu_attn_prep_ok(const sg_cu_attn *a)
{
	const sg_cu_policy *pol = sg_cu_policy_now();
	return pol->attn.prep && pol->attn.decode != SG_CU_DECODE_GROUPED && a->n == 1 && a->kf16 && a->vf16 && !a->ring && a->hd == a->hdv &&
	       (a->hd == 64 || a->hd == 128 || a->hd == 256) && a->prep.r.hd == a->hd && sg_cu_attn_decode_ok(a);
}

/* One-token attentions of ntok tokens (the token in the grid's z; the choices of form made from
 * the one-token grid, so each token gets the kernel a one-token step would launch). */
template <bool MT> static int dec_run(const sg_cu_attn *a, int64_t ntok, int ny, sg_custream s)
{
	if (!sg_cu_attn_decode_ok(a) || a->nchunk < 1 || (a->nchunk > 1 && !a->part) || ntok < 1 || ntok > 65535 || ny < 1 || ny > a->nchunk)
		return (int)cudaErrorInvalidValue;
	if (a->prep.on && (MT || !sg_cu_attn_prep_ok(a))) return (int)cudaErrorInvalidValue;
	const sg_cu_policy *pol = sg_cu_policy_now();
	int G = dec_group(a);
	dim3 grid((unsigned)sg_cu_attn_decode_units(a), (unsigned)ny, (unsigned)ntok);
	size_t sm = dec_smem(G, a->hd, a->hdv);
	cudaStream_t st = (cudaStream_t)s;
	const sg_cu_attn &b = *a;
	if (a->kf16) dec_launch_g<__half, MT>(&b, G, grid, sm, st, pol);
	else dec_launch_g<float, MT>(&b, G, grid, sm, st, pol);
	/* the merge in one round trip of loads (SARAGOSSA_CUDA_ATTN_MERGE), else the many-token path's */
	dim3 mg((unsigned)b.H, 1, (unsigned)ntok);
	if (b.nchunk > 1 && pol->attn.merge1 && b.nchunk <= DEC_SPLIT) pdl_launch(attn_merge1_kernel<MT>, mg, dim3(128), 0, st, b);
	else if (b.nchunk > 1) pdl_launch(attn_merge_kernel<1, MT>, mg, dim3(128), 0, st, b);
	return ok();
}

extern "C" int sg_cu_attn_decode(const sg_cu_attn *a, sg_custream s) { return dec_run<false>(a, 1, a->nchunk, s); }

extern "C" int sg_cu_attn_decode_tokens(const sg_cu_attn *a, int64_t ntok, int ny, sg_custream s)
{
	return a->xq ? (int)cudaErrorInvalidValue : dec_run<true>(a, ntok, ny, s);
}

/*
 * Prefill attention through cuBLAS (the host side is in cuda_backend.c): the scores of a group
 * of heads are a GEMM into s [h][n][L]; this kernel turns each row into probabilities in place
 * (scale, soft-cap, the causal and window mask, softmax) before the second GEMM with V.
 */
/* Three reads of the row and one write (the scaled score is recomputed, not stored between the
 * passes: the same float each time); the probabilities go back in place, or as f16 into p16. */
static __device__ __forceinline__ float score_of(float x, float scale, float cap)
{
	float v = x * scale;
	return cap > 0 ? cap * tanhf(v / cap) : v;
}

__global__ void attn_rows_kernel(float *s, const int32_t *pos, int64_t n, int64_t L, float scale, float cap, int window, int causal, int64_t pmax,
				 __half *p16)
{
	int64_t r = blockIdx.x, t = r % n;
	float *row = s + r * L;
	int64_t p = pos[t], hi = causal ? p : pmax;
	if (!causal && window > 0 && p + window - 1 < hi) hi = p + window - 1; /* two-sided window */
	if (hi > L - 1) hi = L - 1;
	int64_t lo = window > 0 ? p - window + 1 : 0;
	if (lo < 0) lo = 0;
	float m = -INFINITY;
	for (int64_t j = lo + threadIdx.x; j <= hi; j += blockDim.x) m = fmaxf(m, score_of(row[j], scale, cap));
	m = block_max(m);
	float sum = 0.0f;
	for (int64_t j = lo + threadIdx.x; j <= hi; j += blockDim.x) sum += expf(score_of(row[j], scale, cap) - m);
	sum = block_sum(sum);
	float inv = sum > 0 ? 1.0f / sum : 0.0f;
	for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
		float v = j >= lo && j <= hi ? expf(score_of(row[j], scale, cap) - m) * inv : 0.0f;
		if (p16) p16[r * L + j] = __float2half_rn(v);
		else row[j] = v;
	}
}

extern "C" int sg_cu_attn_rows(float *s, const int32_t *pos, int64_t rows, int64_t n, int64_t L, float scale, float cap, int window, int causal,
			       int64_t pmax, uint16_t *p16, sg_custream st)
{
	if (rows <= 0) return 0;
	attn_rows_kernel<<<(unsigned)rows, 256, 0, (cudaStream_t)st>>>(s, pos, n, L, scale, cap, window, causal, pmax, (__half *)p16);
	return ok();
}
