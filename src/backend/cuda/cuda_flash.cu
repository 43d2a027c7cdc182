/*
 * Prefill attention in one kernel, FlashAttention-2's loop: a block takes 64 query rows of one
 * head (four warps of 16 rows); tiles of 64 cache positions pass through shared memory once a
 * block, K and V; the scores, their online softmax and the weighted values stay in registers, as
 * f16 tensor-core products (mma m16n8k16) summed in f32. No score matrix is written, and the
 * positions are read on the device (each block takes the largest of its rows), so nothing waits
 * on the host. Shapes: f16 caches, K and V head dims equal, 64 or 128, causal, no ring cache;
 * sliding window and soft-cap included. The other shapes take the cuBLAS path.
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_pdl.cuh"

#define FA_ROWS 64 /* query rows a block */
#define FA_KEYS 64 /* cache positions a tile */
#define FA_THREADS 128

/* c += a b: a 16x16 f16 (row-major fragment), b 16x8 f16 (column-major), c 16x8 f32 */
static __device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ uint32_t h2_bits(float x, float y)
{
	__half2 h = __floats2half2_rn(x, y);
	return *(const uint32_t *)&h;
}

/* four 8x8 f16 matrices from shared memory, transposed (lane i gives row i % 8 of matrix i / 8) */
static __device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const __half *p)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"((uint32_t)__cvta_generic_to_shared(p)));
}

static __device__ __forceinline__ float2 q_pair(const float *row, int ok, int d)
{
	return ok ? *(const float2 *)(row + d) : make_float2(0.0f, 0.0f);
}

/*
 * Fragments (lane = 4 g + t): a score tile s[nt] (16 rows x 8 positions) holds rows g and g + 8,
 * positions 2t and 2t + 1; the same registers, packed to f16, are the A fragments of the
 * probabilities for the product with V (positions 16 kk .. 16 kk + 15 = tiles 2 kk, 2 kk + 1).
 * Shared rows are HD + 8 halves long, so the 8 rows a fragment load touches fall in distinct banks.
 */
/* The K and V rows of the tile at j0 into ks, vs (rows past jhi: a live one, masked later), and
 * the wait for them. (A second buffer, the next tile's copy overlapping this one's products, was
 * measured 0-2% slower on the H200: two blocks an SM already overlap them.) */
template <int HD>
static __device__ __forceinline__ void fa_load(const sg_cu_attn &a, int kh, int64_t j0, int64_t jhi, __half *ks, __half *vs)
{
	constexpr int ST = HD + 8;
	const __half *kc = (const __half *)a.kc, *vc = (const __half *)a.vc;
	for (int c = threadIdx.x; c < FA_KEYS * HD / 8; c += FA_THREADS) {
		int r = c / (HD / 8), cc = c % (HD / 8);
		int64_t j = j0 + r <= jhi ? j0 + r : jhi;
		size_t off = (size_t)(j * a.Hkv + kh) * HD + cc * 8;
		cp_async16(ks + r * ST + cc * 8, kc + off);
		cp_async16(vs + r * ST + cc * 8, vc + off);
	}
	cp_async_wait_all();
}

/* One tile of 64 positions at j0 for the warp's 16 rows (positions pa, pb of its rows g, g + 8):
 * scores, mask, the online softmax update of (ma, la), (mb, lb) and o, and the product with V. */
template <int HD>
static __device__ __forceinline__ void fa_tile(const sg_cu_attn &a, const __half *ks, const __half *vs, const uint32_t (&qf)[HD / 16][4],
					       float (&o)[HD / 8][4], float &ma, float &mb, float &la, float &lb, int64_t j0, int64_t jhi,
					       int pa, int pb)
{
	constexpr int ST = HD + 8, KS = HD / 16, NT = HD / 8, PT = FA_KEYS / 8;
	const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	float s[PT][4];
#pragma unroll
	for (int i = 0; i < PT; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
	for (int k = 0; k < KS; k++)
#pragma unroll
		for (int i = 0; i < PT; i++) {
			const __half *kr = ks + (i * 8 + g) * ST + k * 16 + 2 * t;
			mma16816(s[i], qf[k], *(const uint32_t *)kr, *(const uint32_t *)(kr + 8));
		}
	float xa = -INFINITY, xb = -INFINITY;
#pragma unroll
	for (int i = 0; i < PT; i++)
#pragma unroll
		for (int e = 0; e < 2; e++) {
			int64_t j = j0 + i * 8 + 2 * t + e;
			float va = s[i][e] * a.scale, vb = s[i][2 + e] * a.scale;
			if (a.cap > 0) va = a.cap * tanhf(va / a.cap), vb = a.cap * tanhf(vb / a.cap);
			int in_a = j <= pa && j <= jhi && (a.window <= 0 || j > pa - a.window);
			int in_b = j <= pb && j <= jhi && (a.window <= 0 || j > pb - a.window);
			s[i][e] = in_a ? va : -INFINITY, s[i][2 + e] = in_b ? vb : -INFINITY;
			xa = fmaxf(xa, s[i][e]), xb = fmaxf(xb, s[i][2 + e]);
		}
	xa = fmaxf(xa, __shfl_xor_sync(0xffffffffu, xa, 1)), xa = fmaxf(xa, __shfl_xor_sync(0xffffffffu, xa, 2));
	xb = fmaxf(xb, __shfl_xor_sync(0xffffffffu, xb, 1)), xb = fmaxf(xb, __shfl_xor_sync(0xffffffffu, xb, 2));
	float na = fmaxf(ma, xa), nb = fmaxf(mb, xb);
	float ua = na == -INFINITY ? 0.0f : na, ub = nb == -INFINITY ? 0.0f : nb; /* a row with nothing live yet */
	float ca = __expf(ma - ua), cb = __expf(mb - ub);
	ma = na, mb = nb, la *= ca, lb *= cb;
#pragma unroll
	for (int i = 0; i < NT; i++) o[i][0] *= ca, o[i][1] *= ca, o[i][2] *= cb, o[i][3] *= cb;
#pragma unroll
	for (int i = 0; i < PT; i++) {
		s[i][0] = __expf(s[i][0] - ua), s[i][1] = __expf(s[i][1] - ua);
		s[i][2] = __expf(s[i][2] - ub), s[i][3] = __expf(s[i][3] - ub);
		la += s[i][0] + s[i][1], lb += s[i][2] + s[i][3];
	}
#pragma unroll
	for (int kk = 0; kk < FA_KEYS / 16; kk++) {
		uint32_t pf[4] = {h2_bits(s[2 * kk][0], s[2 * kk][1]), h2_bits(s[2 * kk][2], s[2 * kk][3]),
				  h2_bits(s[2 * kk + 1][0], s[2 * kk + 1][1]), h2_bits(s[2 * kk + 1][2], s[2 * kk + 1][3])};
		const int mi = lane >> 3, ri = lane & 7;
#pragma unroll
		for (int dn = 0; dn < HD / 16; dn++) {
			uint32_t b[4];
			ldsm_x4_t(b, vs + (kk * 16 + (mi & 1) * 8 + ri) * ST + dn * 16 + (mi >> 1) * 8);
			mma16816(o[2 * dn], pf, b[0], b[1]);
			mma16816(o[2 * dn + 1], pf, b[2], b[3]);
		}
	}
}

template <int HD>
__global__ void __launch_bounds__(FA_THREADS) flash_kernel(const sg_cu_attn a)
{
	constexpr int KS = HD / 16, NT = HD / 8;
	__shared__ __align__(16) __half ks[FA_KEYS * (HD + 8)];
	__shared__ __align__(16) __half vs[FA_KEYS * (HD + 8)];
	__shared__ int s_pmax, s_pmin;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	const int h = blockIdx.y, kh = h / (int)(a.H / a.Hkv);
	const int64_t r0 = (int64_t)blockIdx.x * FA_ROWS, n = a.n;
	if (threadIdx.x == 0) s_pmax = INT_MIN, s_pmin = INT_MAX;
	__syncthreads();
	if (threadIdx.x < FA_ROWS && r0 + threadIdx.x < n) {
		int p = a.pos[r0 + threadIdx.x];
		atomicMax(&s_pmax, p);
		atomicMin(&s_pmin, p);
	}
	__syncthreads();
	const int64_t jhi = min((int64_t)s_pmax, a.ctx - 1);
	int64_t jlo = a.window > 0 ? (int64_t)s_pmin - a.window + 1 : 0;
	jlo = jlo < 0 ? 0 : jlo;

	/* the warp's rows: g and g + 8 of its 16 */
	const int64_t ra = r0 + warp * 16 + g, rb = ra + 8;
	const int oka = ra < n, okb = rb < n;
	const int pa = oka ? a.pos[ra] : -1, pb = okb ? a.pos[rb] : -1;
	int wmax = max(pa, pb);
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) wmax = max(wmax, __shfl_xor_sync(0xffffffffu, wmax, o));
	uint32_t qf[KS][4];
	{
		const float *qa = a.q + ((oka ? ra : 0) * a.H + h) * HD, *qb = a.q + ((okb ? rb : 0) * a.H + h) * HD;
#pragma unroll
		for (int k = 0; k < KS; k++) {
			int d = k * 16 + 2 * t;
			float2 x0 = q_pair(qa, oka, d), x1 = q_pair(qb, okb, d), x2 = q_pair(qa, oka, d + 8), x3 = q_pair(qb, okb, d + 8);
			qf[k][0] = h2_bits(x0.x, x0.y), qf[k][1] = h2_bits(x1.x, x1.y);
			qf[k][2] = h2_bits(x2.x, x2.y), qf[k][3] = h2_bits(x3.x, x3.y);
		}
	}
	float o[NT][4], ma = -INFINITY, mb = -INFINITY, la = 0.0f, lb = 0.0f;
#pragma unroll
	for (int i = 0; i < NT; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
	for (int64_t j0 = jlo / FA_KEYS * FA_KEYS; j0 <= jhi; j0 += FA_KEYS) {
		fa_load<HD>(a, kh, j0, jhi, ks, vs);
		__syncthreads();
		if (j0 <= wmax) fa_tile<HD>(a, ks, vs, qf, o, ma, mb, la, lb, j0, jhi, pa, pb); /* else its rows all precede the tile */
		__syncthreads(); /* the tile is consumed */
	}
	la += __shfl_xor_sync(0xffffffffu, la, 1), la += __shfl_xor_sync(0xffffffffu, la, 2);
	lb += __shfl_xor_sync(0xffffffffu, lb, 1), lb += __shfl_xor_sync(0xffffffffu, lb, 2);
	float ia = la > 0 ? 1.0f / la : 0.0f, ib = lb > 0 ? 1.0f / lb : 0.0f;
	float *oa = a.out + (ra * a.H + h) * HD + 2 * t, *ob = a.out + (rb * a.H + h) * HD + 2 * t;
#pragma unroll
	for (int i = 0; i < NT; i++) {
		if (oka) *(float2 *)(oa + i * 8) = make_float2(o[i][0] * ia, o[i][1] * ia);
		if (okb) *(float2 *)(ob + i * 8) = make_float2(o[i][2] * ib, o[i][3] * ib);
	}
}

extern "C" int sg_cu_attn_flash_ok(const sg_cu_attn *a)
{
	return a->kf16 && a->vf16 && a->hd == a->hdv && (a->hd == 64 || a->hd == 128) && a->causal && !a->ring && a->n > 0 &&
	       a->H % a->Hkv == 0 && a->H <= 65535 && a->ctx < INT32_MAX;
}

extern "C" int sg_cu_attn_flash(const sg_cu_attn *a, sg_custream s)
{
	if (!sg_cu_attn_flash_ok(a)) return (int)cudaErrorInvalidValue;
	dim3 grid((unsigned)((a->n + FA_ROWS - 1) / FA_ROWS), (unsigned)a->H);
	cudaStream_t st = (cudaStream_t)s;
	if (a->hd == 128) flash_kernel<128><<<grid, FA_THREADS, 0, st>>>(*a);
	else flash_kernel<64><<<grid, FA_THREADS, 0, st>>>(*a);
	return (int)cudaGetLastError();
}
