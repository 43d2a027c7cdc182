/*
 * Weight kernels of the CUDA backend: the per-format decoders (one "unit" of 8 or 32 elements
 * from 16-byte loads), the fused dequantize-GEMV used for one or a few tokens, the block-per-lane
 * GEMVs of the planar Q4_K / Q6_K / MLX 4-bit rows (a 256-element block a lane: mvs_kernel,
 * moes_kernel, and the copy-engine mvt_kernel), the grouped expert GEMV, the embedding gather and
 * the 16-bit dequantizer that feeds cuBLAS for prefill.
 *
 * Byte counts: a GEMV must stream the whole weight matrix once (N * row_bytes); the activations
 * (K bytes at 8 bits, plus a scale and two half sums per 32) are re-read by every block but stay
 * in L2 (and are staged in shared memory by the block-per-lane kernels). Batch-1 decode is
 * therefore bound by HBM bandwidth, and a kernel's job is to keep enough 16-byte loads in flight
 * with little work per byte: the unit kernels spend ~14 loads per 16 bytes of 4-bit codes on
 * scales and activations, the block-per-lane ones 12-14 loads per 144-210 bytes.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_q8.cuh"
#include "backend/cuda/cuda_reduce.cuh"

#if defined(SG_CU_TRACE) && SG_CU_TRACE
int sg_cu_trace_bind_matmul(sg_cu_trec *buf, unsigned *n) { return sg_cu_trace_bind(buf, n); }
#endif

#define WARPS 8 /* warps (rows) per GEMV block: 256 threads */
/* The 8-bit GEMV variant used by default (sg_cu_gemv): chosen by bench/kernels/cuda on the H200. */
#define SG_CU_GEMV_Q8_DEFAULT 4
static int g_sb = 1; /* SARAGOSSA_CUDA_GEMV_SB: the block-per-lane GEMV of the planar K-quants */
static int g_xstage = 1; /* SARAGOSSA_CUDA_GEMV_XSTAGE: its activations staged by cp.async, scales included */
static int g_pre = 1; /* SARAGOSSA_CUDA_GEMV_PRE: small plain-type launches load their first units before pdl_wait */
/* The most weight bytes a launch loading its units before the wait takes. Measured on an H200:
 * the BF16 projections of Qwen3-8B (33 to 200 MB a launch) 5.5% slower with every launch doing
 * it (the registers the loads hold cost more blocks an SM than the early loads win). */
#define PRE_MAX_BYTES ((size_t)4 << 20)
static int g_slots = 0, g_variant = 0; /* SARAGOSSA_CUDA_GEMV_ROWS, SARAGOSSA_CUDA_GEMV_VARIANT */

static __device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
static __device__ __forceinline__ float bf2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
static __device__ __forceinline__ float ldh(const uint8_t *p) { return h2f(__ldg((const unsigned short *)p)); }
static __device__ __forceinline__ uint4 ld16(const uint8_t *p) { return __ldg((const uint4 *)p); }

/* Byte i (a compile-time constant once unrolled) of a 16-byte register quad. */
static __device__ __forceinline__ uint32_t qbyte(const uint4 &q, int i)
{
	uint32_t w = i < 4 ? q.x : i < 8 ? q.y : i < 12 ? q.z : q.w;
	return (w >> (8 * (i & 3))) & 255u;
}
static __device__ __forceinline__ uint32_t qword(const uint4 &q, int i) { return i == 0 ? q.x : i == 1 ? q.y : i == 2 ? q.z : q.w; }

/*
 * Unit decoders. U<KT>::dq fills o[E] with the unit's weights and returns the index of its first
 * element; the unit's elements are NR runs of RL contiguous elements, RS apart (the K-quants
 * interleave two sub-blocks in one 16-byte load of nibbles).
 */
template <int KT> struct U;

/* The plain types also split a unit's load (ld, into R) from its conversion (cv), for the GEMV
 * that loads a thread's units before pdl_wait (SARAGOSSA_CUDA_GEMV_PRE). */
template <> struct U<SG_CUKT_F32> {
	enum { E = 8, RL = 8, RS = 8 };
	struct R {
		float4 a, b;
	};
	static __device__ __forceinline__ R ld(const uint8_t *row, int64_t u)
	{
		return {__ldg((const float4 *)(row + 32 * u)), __ldg((const float4 *)(row + 32 * u + 16))};
	}
	static __device__ __forceinline__ void cv(const R &q, float *o)
	{
		o[0] = q.a.x, o[1] = q.a.y, o[2] = q.a.z, o[3] = q.a.w, o[4] = q.b.x, o[5] = q.b.y, o[6] = q.b.z, o[7] = q.b.w;
	}
	static __device__ __forceinline__ int64_t dq(const sg_cuw &w, const uint8_t *row, const uint8_t *, const uint8_t *, int64_t u, float *o)
	{
		cv(ld(row, u), o);
		return 8 * u;
	}
};

template <> struct U<SG_CUKT_F16> {
	enum { E = 8, RL = 8, RS = 8 };
	typedef uint4 R;
	static __device__ __forceinline__ R ld(const uint8_t *row, int64_t u) { return ld16(row + 16 * u); }
	static __device__ __forceinline__ void cv(const R &q, float *o)
	{
#pragma unroll
		for (int i = 0; i < 4; i++) {
			uint32_t v = qword(q, i);
			o[2 * i] = h2f((uint16_t)v), o[2 * i + 1] = h2f((uint16_t)(v >> 16));
		}
	}
	static __device__ __forceinline__ int64_t dq(const sg_cuw &w, const uint8_t *row, const uint8_t *, const uint8_t *, int64_t u, float *o)
	{
		cv(ld(row, u), o);
		return 8 * u;
	}
};

template <> struct U<SG_CUKT_BF16> {
	enum { E = 8, RL = 8, RS = 8 };
	typedef uint4 R;
	static __device__ __forceinline__ R ld(const uint8_t *row, int64_t u) { return ld16(row + 16 * u); }
	static __device__ __forceinline__ void cv(const R &q, float *o)
	{
#pragma unroll
		for (int i = 0; i < 4; i++) {
			uint32_t v = qword(q, i);
			o[2 * i] = __uint_as_float(v << 16), o[2 * i + 1] = __uint_as_float(v & 0xffff0000u);
		}
	}
	static __device__ __forceinline__ int64_t dq(const sg_cuw &w, const uint8_t *row, const uint8_t *, const uint8_t *, int64_t u, float *o)
	{
		cv(ld(row, u), o);
		return 8 * u;
	}
};

/* Repacked legacy rows: [codes of every block][qh][d][m] (see cuda_backend.c). */
template <> struct U<SG_CUKT_Q8_0> {
	enum { E = 32, RL = 32, RS = 32 };
	static __device__ __forceinline__ int64_t dq(const sg_cuw &w, const uint8_t *row, const uint8_t *, const uint8_t *, int64_t u, float *o)
	{
		int64_t nb = w.K / 32;
		uint4 a = ld16(row + 32 * u), b = ld16(row + 32 * u + 16);
		float d = ldh(row + 32 * nb + 2 * u);
#pragma unroll
		for (int i = 0; i < 16; i++) {
			o[i] = d * (float)(int8_t)qbyte(a, i);
			o[16 + i] = d * (float)(int8_t)qbyte(b, i);
		}
		return 32 * u;
	}
};

template <int FIVE, int ONE> static __device__ __forceinline__ int64_t dq_legacy4(const sg_cuw &w, const uint8_t *row, int64_t u, float *o)
{
	int64_t nb = w.K / 32;
	uint4 q = ld16(row + 16 * u);
	uint32_t qh = FIVE ? __ldg((const unsigned int *)(row + 16 * nb + 4 * u)) : 0;
	const uint8_t *dp = row + (16 + (FIVE ? 4 : 0)) * nb;
	float d = ldh(dp + 2 * u), m = ONE ? ldh(dp + 2 * nb + 2 * u) : 0.0f;
	const int off = ONE ? 0 : FIVE ? 16 : 8;
#pragma unroll
	for (int i = 0; i < 16; i++) {
		int lo = (int)(qbyte(q, i) & 15), hi = (int)(qbyte(q, i) >> 4);
		if (FIVE) {
			lo |= (int)((qh >> i) & 1) << 4;
			hi |= (int)((qh >> (i + 16)) & 1) << 4;
		}
		if (ONE) {
			o[i] = d * (float)lo + m;
			o[16 + i] = d * (float)hi + m;
		} else {
			o[i] = d * (float)(lo - off);
			o[16 + i] = d * (float)(hi - off);
		}
	}
	return 32 * u;
}

template <> struct U<SG_CUKT_Q4_0> {
	enum { E = 32, RL = 32, RS = 32 };
	static __device__ __forceinline__ int64_t dq(const sg_cuw &w, const uint8_t *row, const uint8_t *, const uint8_t *, int64_t u, float *o) { return dq_legacy4<0, 0>(w, row, u, o); }
};
template <> struct U<SG_CUKT_Q4_1> {
	enum { E = 32, RL = 32, RS = 32 };
	static __device__ __forceinline__ int64_t dq(const sg_cuw &w, const uint8_t *row, const uint8_t *, const uint8_t *, int64_t u, float *o) { return dq_legacy4<0, 1>(w, row, u, o); }
};
template <> struct U<SG_CUKT_Q5_0> {
	enum { E = 32, RL = 32, RS = 32 };
	static __device__ __forceinline__ int64_t dq(const sg_cuw &w, const uint8_t *row, const uint8_t *, const uint8_t *, int64_t u, float *o) { return dq_legacy4<1, 0>(w, row, u, o); }
};
template <> struct U<SG_CUKT_Q5_1> {
	enum { E = 32, RL = 32, RS = 32 };
	static __device__ __forceinline__ int64_t dq(const sg_cuw &w, const uint8_t *row, const uint8_t *, const uint8_t *, int64_t u, float *o) { return dq_legacy4<1, 1>(w, row, u, o); }
};

/* Q4_K / Q5_K sub-block s (0..7): 6-bit scale and minimum from the 12 packed bytes at p. */
static __device__ __forceinline__ void k4_scale(const uint8_t *p, int s, float &sc, float &mn)
{
	if (s < 4) {
		sc = (float)(__ldg(p + s) & 63);
		mn = (float)(__ldg(p + s + 4) & 63);
	} else {
		sc = (float)((__ldg(p + s + 4) & 0xf) | ((__ldg(p + s - 4) >> 6) << 4));
		mn = (float)((__ldg(p + s + 4) >> 4) | ((__ldg(p + s) >> 6) << 4));
	}
}

/* A K-quant unit is lane l (0..7) of a 256-block: 16 bytes of nibbles = 16 elements of sub-block
 * 2j (low nibbles) and the same 16 positions of sub-block 2j+1 (high nibbles), j = l/2. Q5_K keeps
 * the file's blocks; Q4_K rows are planar (cuda_backend.c): piece l of block b at (l * nb + b) *
 * 16, then the blocks' 12 scale bytes, then their d and dmin. */
template <int FIVE> struct KQ4 {
	const uint8_t *q, *sc, *qh;
	float d, dmin;
	static __device__ __forceinline__ KQ4 at(const uint8_t *row, int64_t K, int64_t b, int l)
	{
		KQ4 k;
		if (FIVE) {
			const uint8_t *blk = row + b * 176;
			k.q = blk + 48 + 16 * l, k.sc = blk + 4, k.qh = blk + 16 + 16 * (l & 1);
			k.d = ldh(blk), k.dmin = ldh(blk + 2);
		} else {
			int64_t nb = K / 256;
			k.q = row + ((int64_t)l * nb + b) * 16, k.sc = row + 128 * nb + 12 * b, k.qh = NULL;
			k.d = ldh(row + 140 * nb + 4 * b), k.dmin = ldh(row + 140 * nb + 4 * b + 2);
		}
		return k;
	}
};

template <int FIVE> static __device__ __forceinline__ int64_t dq_k45(const uint8_t *row, int64_t K, int64_t u, float *o)
{
	int64_t b = u >> 3;
	int l = (int)(u & 7), j = l >> 1, h = l & 1;
	KQ4<FIVE> k = KQ4<FIVE>::at(row, K, b, l);
	float s0, m0, s1, m1;
	k4_scale(k.sc, 2 * j, s0, m0);
	k4_scale(k.sc, 2 * j + 1, s1, m1);
	float a0 = k.d * s0, b0 = k.dmin * m0, a1 = k.d * s1, b1 = k.dmin * m1;
	uint4 q = ld16(k.q);
	uint4 qh = FIVE ? ld16(k.qh) : make_uint4(0, 0, 0, 0);
#pragma unroll
	for (int i = 0; i < 16; i++) {
		int c0 = (int)(qbyte(q, i) & 15), c1 = (int)(qbyte(q, i) >> 4);
		if (FIVE) {
			c0 |= (int)((qbyte(qh, i) >> (2 * j)) & 1) << 4;
			c1 |= (int)((qbyte(qh, i) >> (2 * j + 1)) & 1) << 4;
		}
		o[i] = a0 * (float)c0 - b0;
		o[16 + i] = a1 * (float)c1 - b1;
	}
	return 256 * b + 64 * j + 16 * h;
}

template <> struct U<SG_CUKT_Q4_K> {
	enum { E = 32, RL = 16, RS = 32 };
	static __device__ __forceinline__ int64_t dq(const sg_cuw &w, const uint8_t *row, const uint8_t *, const uint8_t *, int64_t u, float *o) { return dq_k45<0>(row, w.K, u, o); }
};
template <> struct U<SG_CUKT_Q5_K> {
	enum { E = 32, RL = 16, RS = 32 };
	static __device__ __forceinline__ int64_t dq(const sg_cuw &w, const uint8_t *row, const uint8_t *, const uint8_t *, int64_t u, float *o) { return dq_k45<1>(row, w.K, u, o); }
};

/* Q6_K planar rows (cuda_backend.c): block b's ql piece p (0..7) at (p * nb + b) * 16, its qh
 * piece p (0..3) at 128 nb + (p * nb + b) * 16, its 16 scales at 192 nb + 16 b, its d at 208 nb +
 * 2 b. ql piece l holds low nibbles of quarter kk and high nibbles of quarter kk+2 of half n
 * (n = l/4, kk = l/2 % 2), with the high bits in qh piece 2n + l % 2. */
struct KQ6 {
	const uint8_t *ql, *qh, *sc;
	float d;
	static __device__ __forceinline__ KQ6 at(const uint8_t *row, int64_t K, int64_t b, int l)
	{
		int64_t nb = K / 256;
		KQ6 k;
		k.ql = row + ((int64_t)l * nb + b) * 16;
		k.qh = row + 128 * nb + ((int64_t)(2 * (l >> 2) + (l & 1)) * nb + b) * 16;
		k.sc = row + 192 * nb + 16 * b;
		k.d = ldh(row + 208 * nb + 2 * b);
		return k;
	}
};

template <> struct U<SG_CUKT_Q6_K> {
	enum { E = 32, RL = 16, RS = 64 };
	static __device__ __forceinline__ int64_t dq(const sg_cuw &w, const uint8_t *row, const uint8_t *, const uint8_t *, int64_t u, float *o)
	{
		int64_t b = u >> 3;
		int l = (int)(u & 7), n = l >> 2, kk = (l >> 1) & 1, li = 16 * (l & 1);
		KQ6 k = KQ6::at(row, w.K, b, l);
		uint4 ql = ld16(k.ql), qh = ld16(k.qh);
		int ba = 4 * n + kk, bb = ba + 2;
		float sa = k.d * (float)(int8_t)__ldg(k.sc + 2 * ba + (li >> 4));
		float sb = k.d * (float)(int8_t)__ldg(k.sc + 2 * bb + (li >> 4));
#pragma unroll
		for (int i = 0; i < 16; i++) {
			uint32_t lb = qbyte(ql, i), hb = qbyte(qh, i);
			int ca = (int)((lb & 15) | (((hb >> (2 * kk)) & 3) << 4)) - 32;
			int cb = (int)((lb >> 4) | (((hb >> (2 * kk + 4)) & 3) << 4)) - 32;
			o[i] = sa * (float)ca;
			o[16 + i] = sb * (float)cb;
		}
		return 256 * b + 32 * ba + li;
	}
};

/* MLX affine: w = scale * code + bias per group; units of 32 elements never straddle a group. */
static __device__ __forceinline__ void mlx_sb(const sg_cuw &w, const uint8_t *sc, const uint8_t *bi, int64_t u, float &s, float &b)
{
	/* a shift for the usual power-of-two groups: a 64-bit division here made the 4-bit GEMV
	 * instruction-bound (ncu: 64% SM throughput against 34% DRAM) */
	int64_t g = w.gsh >= 0 ? u >> w.gsh : 32 * u / w.group;
	uint16_t s16 = __ldg((const unsigned short *)sc + g), b16 = __ldg((const unsigned short *)bi + g);
	s = w.sb_bf16 ? bf2f(s16) : h2f(s16);
	b = w.sb_bf16 ? bf2f(b16) : h2f(b16);
}

/* Planar MLX 4-bit rows (cuda_backend.c: rows of whole 256-blocks not bound in the file's order):
 * 16-byte piece p of 256-block b at (p * nb + b) * 16; the others keep the file's order. */
static __device__ __forceinline__ const uint8_t *mlx4_unit(const sg_cuw &w, const uint8_t *row, int64_t u)
{
	return w.planar ? row + ((u & 7) * (w.K / 256) + (u >> 3)) * 16 : row + 16 * u;
}

template <> struct U<SG_CUKT_MLX4> {
	enum { E = 32, RL = 32, RS = 32 };
	static __device__ __forceinline__ int64_t dq(const sg_cuw &w, const uint8_t *row, const uint8_t *sc, const uint8_t *bi, int64_t u, float *o)
	{
		uint4 q = ld16(mlx4_unit(w, row, u));
		float s, b;
		mlx_sb(w, sc, bi, u, s, b);
#pragma unroll
		for (int i = 0; i < 32; i++) o[i] = s * (float)((qword(q, i >> 3) >> (4 * (i & 7))) & 15) + b;
		return 32 * u;
	}
};

template <> struct U<SG_CUKT_MLX8> {
	enum { E = 32, RL = 32, RS = 32 };
	static __device__ __forceinline__ int64_t dq(const sg_cuw &w, const uint8_t *row, const uint8_t *sc, const uint8_t *bi, int64_t u, float *o)
	{
		uint4 q0 = ld16(row + 32 * u), q1 = ld16(row + 32 * u + 16);
		float s, b;
		mlx_sb(w, sc, bi, u, s, b);
#pragma unroll
		for (int i = 0; i < 16; i++) {
			o[i] = s * (float)qbyte(q0, i) + b;
			o[16 + i] = s * (float)qbyte(q1, i) + b;
		}
		return 32 * u;
	}
};

/* MLX 6-bit: 32 elements = 24 bytes = three 8-byte loads; 8 elements = 48 bits. */
template <> struct U<SG_CUKT_MLX6> {
	enum { E = 32, RL = 32, RS = 32 };
	static __device__ __forceinline__ int64_t dq(const sg_cuw &w, const uint8_t *row, const uint8_t *sc, const uint8_t *bi, int64_t u, float *o)
	{
		const unsigned long long *p = (const unsigned long long *)(row + 24 * u);
		unsigned long long w0 = __ldg(p), w1 = __ldg(p + 1), w2 = __ldg(p + 2);
		unsigned long long g[4] = {w0, (w0 >> 48) | (w1 << 16), (w1 >> 32) | (w2 << 32), w2 >> 16};
		float s, b;
		mlx_sb(w, sc, bi, u, s, b);
#pragma unroll
		for (int i = 0; i < 32; i++) o[i] = s * (float)((g[i >> 3] >> (6 * (i & 7))) & 63) + b;
		return 32 * u;
	}
};

/* The unit's x values: NR runs of RL floats (16-byte aligned: runs start at multiples of 8). */
template <int KT> static __device__ __forceinline__ void load_x(const float *x, int64_t e0, float *xv)
{
	typedef U<KT> T;
#pragma unroll
	for (int i = 0; i < T::E; i += 4) {
		int64_t e = e0 + (i / T::RL) * T::RS + (i % T::RL);
		float4 v = ldd((const float4 *)(x + e));
		xv[i] = v.x, xv[i + 1] = v.y, xv[i + 2] = v.z, xv[i + 3] = v.w;
	}
}


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

/* Bit j of b (4 bits) moved to bit 4 of byte j: the fifth bit of four 5-bit codes. */
static __device__ __forceinline__ uint32_t spread4(uint32_t b) { return ((b & 1) << 4) | ((b & 2) << 11) | ((b & 4) << 18) | ((b & 8) << 25); }

template <int KT> struct UI;

template <> struct UI<SG_CUKT_Q8_0> {
	enum { HS = 16 };
	static __device__ __forceinline__ int64_t e0(int64_t u) { return 32 * u; }
	static __device__ __forceinline__ void dq(const sg_cuw &w, const uint8_t *row, const uint8_t *, const uint8_t *, int64_t u, int *c, float *sca, float *off)
	{
		int64_t nb = w.K / 32;
		uint4 a = ld16(row + 32 * u), b = ld16(row + 32 * u + 16);
		float d = ldh(row + 32 * nb + 2 * u);
#pragma unroll
		for (int k = 0; k < 4; k++) c[k] = (int)qword(a, k), c[4 + k] = (int)qword(b, k);
		sca[0] = sca[1] = d;
		off[0] = off[1] = 0.0f;
	}
};

template <int FIVE, int ONE> struct UIL {
	enum { HS = 16 };
	static __device__ __forceinline__ int64_t e0(int64_t u) { return 32 * u; }
	static __device__ __forceinline__ void dq(const sg_cuw &w, const uint8_t *row, const uint8_t *, const uint8_t *, int64_t u, int *c, float *sca, float *off)
	{
		int64_t nb = w.K / 32;
		uint4 q = ld16(row + 16 * u);
		uint32_t qh = FIVE ? __ldg((const unsigned int *)(row + 16 * nb + 4 * u)) : 0;
		const uint8_t *dp = row + (16 + (FIVE ? 4 : 0)) * nb;
		float d = ldh(dp + 2 * u);
#pragma unroll
		for (int k = 0; k < 4; k++) {
			uint32_t v = qword(q, k);
			c[k] = (int)((v & 0x0F0F0F0Fu) | (FIVE ? spread4((qh >> (4 * k)) & 15) : 0));
			c[4 + k] = (int)(((v >> 4) & 0x0F0F0F0Fu) | (FIVE ? spread4((qh >> (16 + 4 * k)) & 15) : 0));
		}
		sca[0] = sca[1] = d;
		off[0] = off[1] = ONE ? ldh(dp + 2 * nb + 2 * u) : (FIVE ? -16.0f : -8.0f) * d;
	}
};
template <> struct UI<SG_CUKT_Q4_0> : UIL<0, 0> {};
template <> struct UI<SG_CUKT_Q4_1> : UIL<0, 1> {};
template <> struct UI<SG_CUKT_Q5_0> : UIL<1, 0> {};
template <> struct UI<SG_CUKT_Q5_1> : UIL<1, 1> {};

template <int FIVE> struct UIK {
	enum { HS = 32 };
	static __device__ __forceinline__ int64_t e0(int64_t u)
	{
		int l = (int)(u & 7);
		return 256 * (u >> 3) + 64 * (l >> 1) + 16 * (l & 1);
	}
	static __device__ __forceinline__ void dq(const sg_cuw &w, const uint8_t *row, const uint8_t *, const uint8_t *, int64_t u, int *c, float *sca, float *off)
	{
		int l = (int)(u & 7), j = l >> 1;
		KQ4<FIVE> k = KQ4<FIVE>::at(row, w.K, u >> 3, l);
		float s0, m0, s1, m1;
		k4_scale(k.sc, 2 * j, s0, m0);
		k4_scale(k.sc, 2 * j + 1, s1, m1);
		uint4 q = ld16(k.q);
		uint4 qh = FIVE ? ld16(k.qh) : make_uint4(0, 0, 0, 0);
#pragma unroll
		for (int i = 0; i < 4; i++) {
			uint32_t v = qword(q, i), hv = qword(qh, i);
			c[i] = (int)((v & 0x0F0F0F0Fu) | (FIVE ? ((hv >> (2 * j)) & 0x01010101u) << 4 : 0));
			c[4 + i] = (int)(((v >> 4) & 0x0F0F0F0Fu) | (FIVE ? ((hv >> (2 * j + 1)) & 0x01010101u) << 4 : 0));
		}
		sca[0] = k.d * s0, sca[1] = k.d * s1;
		off[0] = -k.dmin * m0, off[1] = -k.dmin * m1;
	}
};
template <> struct UI<SG_CUKT_Q4_K> : UIK<0> {};
template <> struct UI<SG_CUKT_Q5_K> : UIK<1> {};

template <> struct UI<SG_CUKT_Q6_K> {
	enum { HS = 64 };
	static __device__ __forceinline__ int64_t e0(int64_t u)
	{
		int l = (int)(u & 7);
		return 256 * (u >> 3) + 32 * (4 * (l >> 2) + ((l >> 1) & 1)) + 16 * (l & 1);
	}
	static __device__ __forceinline__ void dq(const sg_cuw &w, const uint8_t *row, const uint8_t *, const uint8_t *, int64_t u, int *c, float *sca, float *off)
	{
		int l = (int)(u & 7), n = l >> 2, kk = (l >> 1) & 1, li = 16 * (l & 1);
		KQ6 k = KQ6::at(row, w.K, u >> 3, l);
		uint4 ql = ld16(k.ql), qh = ld16(k.qh);
		int ba = 4 * n + kk, bb = ba + 2;
		float sa = k.d * (float)(int8_t)__ldg(k.sc + 2 * ba + (li >> 4));
		float sb = k.d * (float)(int8_t)__ldg(k.sc + 2 * bb + (li >> 4));
#pragma unroll
		for (int i = 0; i < 4; i++) {
			uint32_t v = qword(ql, i), hv = qword(qh, i);
			c[i] = (int)((v & 0x0F0F0F0Fu) | (((hv >> (2 * kk)) & 0x03030303u) << 4));
			c[4 + i] = (int)(((v >> 4) & 0x0F0F0F0Fu) | (((hv >> (2 * kk + 4)) & 0x03030303u) << 4));
		}
		sca[0] = sa, sca[1] = sb;
		off[0] = -32.0f * sa, off[1] = -32.0f * sb;
	}
};

template <> struct UI<SG_CUKT_MLX4> {
	enum { HS = 16 };
	static __device__ __forceinline__ int64_t e0(int64_t u) { return 32 * u; }
	static __device__ __forceinline__ void dq(const sg_cuw &w, const uint8_t *row, const uint8_t *sc, const uint8_t *bi, int64_t u, int *c, float *sca, float *off)
	{
		uint4 q = ld16(mlx4_unit(w, row, u));
		float s, b;
		mlx_sb(w, sc, bi, u, s, b);
#pragma unroll
		for (int k = 0; k < 4; k++) {
			/* word k holds elements 8k..8k+7 as nibbles: even ones in the low nibbles */
			uint32_t v = qword(q, k), lo = v & 0x0F0F0F0Fu, hi = (v >> 4) & 0x0F0F0F0Fu;
			c[2 * k] = (int)__byte_perm(lo, hi, 0x5140);
			c[2 * k + 1] = (int)__byte_perm(lo, hi, 0x7362);
		}
		sca[0] = sca[1] = s;
		off[0] = off[1] = b;
	}
};

template <> struct UI<SG_CUKT_MLX8> {
	enum { HS = 16 };
	static __device__ __forceinline__ int64_t e0(int64_t u) { return 32 * u; }
	static __device__ __forceinline__ void dq(const sg_cuw &w, const uint8_t *row, const uint8_t *sc, const uint8_t *bi, int64_t u, int *c, float *sca, float *off)
	{
		uint4 a = ld16(row + 32 * u), b = ld16(row + 32 * u + 16);
		float s, bb;
		mlx_sb(w, sc, bi, u, s, bb);
		/* codes 0..255 as signed bytes code - 128; the bias absorbs the shift */
#pragma unroll
		for (int k = 0; k < 4; k++) c[k] = (int)(qword(a, k) ^ 0x80808080u), c[4 + k] = (int)(qword(b, k) ^ 0x80808080u);
		sca[0] = sca[1] = s;
		off[0] = off[1] = bb + 128.0f * s;
	}
};

#define QT 128 /* threads of a block-split int8 GEMV block: all of them split one row's units */

/*
 * Two ways to spread the work. Block-split (WM = 0): block b owns rows [b*R, b*R + R) and its QT
 * lanes stride over the units of those rows (split-K inside the block, reduced through shared
 * memory): thousands of blocks even for 4096 rows. Warp mode (WM = 1): as the f32 kernel, each
 * warp owns R rows and its 32 lanes stride over their units (no shared memory, two units in flight
 * per lane). Either way a unit's activations (two 16-byte loads) serve all R rows.
 */
/* One unit's two halves: dp4a of the codes against the 8-bit activations (xa, xc), each half
 * scaled by d * sca and offset by off * (d * sum of the activation codes). */
static __device__ __forceinline__ float unit_dot(const int *c, int4 xa, int4 xc, float d0, float d1, float s0, float s1, const float *sca,
						 const float *off)
{
	int i0 = __dp4a(c[0], xa.x, 0);
	i0 = __dp4a(c[1], xa.y, i0);
	i0 = __dp4a(c[2], xa.z, i0);
	i0 = __dp4a(c[3], xa.w, i0);
	int i1 = __dp4a(c[4], xc.x, 0);
	i1 = __dp4a(c[5], xc.y, i1);
	i1 = __dp4a(c[6], xc.z, i1);
	i1 = __dp4a(c[7], xc.w, i1);
	return d0 * sca[0] * (float)i0 + off[0] * s0 + d1 * sca[1] * (float)i1 + off[1] * s1;
}

template <int KT, int NT, int R, int WM>
__global__ void __launch_bounds__(WM ? WARPS * 32 : QT) mvq_kernel(sg_cuw w, const int8_t *__restrict__ xq, const float *__restrict__ dx,
								   const float *__restrict__ sx, int64_t n, float *__restrict__ y, int64_t N,
								   const float *__restrict__ bias, const int32_t *start, const int32_t *order,
								   const int32_t *used, const int32_t *nused, int64_t moe_k, int shared_x)
{
	typedef UI<KT> T;
	__shared__ float red[WM ? 1 : QT / 32][R * NT];
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int64_t r0 = WM ? ((int64_t)blockIdx.x * WARPS + warp) * R : (int64_t)blockIdx.x * R;
	const int stride = WM ? 32 : QT, tid = WM ? lane : (int)threadIdx.x;
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
		if (WM) {
#pragma unroll
			for (int rr = 0; rr < R; rr++)
#pragma unroll
				for (int t = 0; t < NT; t++) {
					float v = warp_sum(acc[rr][t]);
					int64_t r = r0 + rr;
					if (lane == 0 && t < nt && r < N) {
						int64_t yi = list ? list[c0 + t] : c0 + t;
						y[yi * N + r] = v + (bias ? bias[r] : 0.0f);
					}
				}
		} else {
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
}

typedef void (*mvq_fn)(sg_cuw, const int8_t *, const float *, const float *, int64_t, float *, int64_t, const float *, const int32_t *,
		       const int32_t *, const int32_t *, const int32_t *, int64_t, int);

/* Rows one block of the int8 kernel covers. */
static int q8_rows_per_block(int nt, int variant)
{
	if (nt != 1) return 1;
	switch (variant) {
	case 3: return 1;
	case 5: return 4;
	case 6: return WARPS;
	case 7: return 2 * WARPS;
	default: return 2;
	}
}
static int q8_threads(int nt, int variant) { return nt == 1 && variant >= 6 ? WARPS * 32 : QT; }

/* variant: 3, 4, 5 = block-split with 1, 2, 4 rows; 6, 7 = warp mode with 1, 2 rows (NT = 1) */
template <int KT> static mvq_fn pickq_nt(int nt, int variant)
{
	if (nt == 1) {
		switch (variant) {
		case 3: return mvq_kernel<KT, 1, 1, 0>;
		case 5: return mvq_kernel<KT, 1, 4, 0>;
		case 6: return mvq_kernel<KT, 1, 1, 1>;
		case 7: return mvq_kernel<KT, 1, 2, 1>;
		default: return mvq_kernel<KT, 1, 2, 0>;
		}
	}
	if (nt == 2) return mvq_kernel<KT, 2, 1, 0>;
	if (nt == 4) return mvq_kernel<KT, 4, 1, 0>;
	return mvq_kernel<KT, 8, 1, 0>;
}

static mvq_fn pickq(int kt, int nt, int variant)
{
	switch (kt) {
	case SG_CUKT_Q8_0: return pickq_nt<SG_CUKT_Q8_0>(nt, variant);
	case SG_CUKT_Q4_0: return pickq_nt<SG_CUKT_Q4_0>(nt, variant);
	case SG_CUKT_Q4_1: return pickq_nt<SG_CUKT_Q4_1>(nt, variant);
	case SG_CUKT_Q5_0: return pickq_nt<SG_CUKT_Q5_0>(nt, variant);
	case SG_CUKT_Q5_1: return pickq_nt<SG_CUKT_Q5_1>(nt, variant);
	case SG_CUKT_Q4_K: return pickq_nt<SG_CUKT_Q4_K>(nt, variant);
	case SG_CUKT_Q5_K: return pickq_nt<SG_CUKT_Q5_K>(nt, variant);
	case SG_CUKT_Q6_K: return pickq_nt<SG_CUKT_Q6_K>(nt, variant);
	case SG_CUKT_MLX4: return pickq_nt<SG_CUKT_MLX4>(nt, variant);
	case SG_CUKT_MLX8: return pickq_nt<SG_CUKT_MLX8>(nt, variant);
	default: return NULL;
	}
}

extern "C" int sg_cu_has_q8(int kt) { return pickq(kt, 1, 4) != NULL; }

extern "C" size_t sg_cu_q8_bytes(int64_t nx, int64_t K)
{
	size_t q = ((size_t)(nx * K) + 255) & ~(size_t)255, f = ((size_t)(nx * K / 32) * 4 + 255) & ~(size_t)255;
	return q + 3 * f;
}

/* Quantizes x [nx][K] into the scratch; returns the three arrays. */
static int quant_x(const float *x, int64_t nx, int64_t K, void *scratch, int8_t **xq, float **dx, float **sx, cudaStream_t s)
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

extern "C" int sg_cu_gemv(const sg_cuw *w, const float *x, int64_t n, float *y, int64_t N, const float *bias, int variant, void *q8_scratch,
			  sg_custream s)
{
	cudaStream_t st = (cudaStream_t)s;
	int nt = nt_for(n);
	/* one token of a planar K-quant: the fused kernel's block-per-lane variant, one matrix */
	if (!variant && n == 1 && q8_scratch && g_sb && !g_variant && !g_slots && sg_cu_sb_ok(w)) {
		sg_cu_multi m;
		memset(&m, 0, sizeof(m));
		m.nw = 1, m.epi = SG_CU_EPI_STORE, m.w[0] = *w, m.N[0] = N, m.bias[0] = bias, m.y[0] = y;
		return sg_cu_gemv_multi(&m, x, 0, NULL, 0.0f, 0.0f, NULL, 0, q8_scratch, s); /* its block-per-lane variant */
	}
	/* f32 activations: two rows per warp pay for quantized weights (their activations are reused
	 * across the rows), one for plain types (already at ~90% of the copy bandwidth) */
	int plain = w->kt == SG_CUKT_F32 || w->kt == SG_CUKT_F16 || w->kt == SG_CUKT_BF16;
	if (variant == 0) variant = q8_scratch && sg_cu_has_q8(w->kt) ? SG_CU_GEMV_Q8_DEFAULT : plain ? 1 : 2;
	if (variant >= 3) {
		mvq_fn f = pickq(w->kt, nt, variant);
		if (!f || !q8_scratch) return (int)cudaErrorInvalidValue;
		int8_t *xq;
		float *dx, *sx;
		int e = quant_x(x, n, w->K, q8_scratch, &xq, &dx, &sx, st);
		if (e) return e;
		int r = q8_rows_per_block(nt, variant);
		pdl_launch(f, dim3((unsigned)((N + r - 1) / r)), dim3(q8_threads(nt, variant)), 0, st, *w, (const int8_t *)xq, (const float *)dx,
			   (const float *)sx, n, y, N, bias, (const int32_t *)NULL, (const int32_t *)NULL, (const int32_t *)NULL, (const int32_t *)NULL,
			   (int64_t)1, 0);
		return (int)cudaGetLastError();
	}
	int r = nt == 1 && variant == 2 ? 2 : 1;
	mv_fn f = pick(w->kt, nt, r);
	if (!f) return (int)cudaErrorInvalidValue;
	int64_t rows_per_block = (int64_t)WARPS * r;
	dim3 grid((unsigned)((N + rows_per_block - 1) / rows_per_block), 1);
	f<<<grid, WARPS * 32, 0, st>>>(*w, x, n, y, N, bias, NULL, NULL, NULL, NULL, 1, 0);
	return (int)cudaGetLastError();
}

/* x rounded as the 8-bit activation quantizer rounds it (d * rint(x / d) per block of 32), in
 * floats: the prefill GEMM of a model decoded on 8-bit activations sees the same activations, so
 * prefill and decode differ by summation order only. */
__global__ void requant_kernel(const float *__restrict__ x, int64_t nblk, float *__restrict__ out)
{
	int lane = threadIdx.x & 31;
	int64_t w0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5, nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
	for (int64_t b = w0; b < nblk; b += nw) {
		float d;
		int q = q8_lane(x[b * 32 + lane], d);
		out[b * 32 + lane] = d * (float)q;
	}
}

extern "C" int sg_cu_requant(const float *x, int64_t n, float *out, sg_custream s)
{
	int64_t nblk = n / 32, blocks = (nblk + 7) / 8;
	if (n % 32) return (int)cudaErrorInvalidValue;
	if (nblk) requant_kernel<<<(unsigned)(blocks < 4096 ? blocks : 4096), 256, 0, (cudaStream_t)s>>>(x, nblk, out);
	return (int)cudaGetLastError();
}

/* One block a row: x rounded to 8-bit blocks as requant_kernel rounds it, then scaled by a power
 * of two (scale[t], exact) that brings the row's largest magnitude to [2^(top-1), 2^top), then
 * rounded to f16. The GEMM's output rows are multiplied back by scale[t] (scale_rows_kernel).
 * Row t is x's row rows[t] / rdiv when rows is given (the MoE gather: the slots of one token
 * share its row when rdiv = k), else row t. */
__global__ void q8_rows_f16_kernel(const float *__restrict__ x, const int32_t *__restrict__ rows, int64_t rdiv, int64_t K, int top,
				   __half *__restrict__ out, float *__restrict__ scale)
{
	const float *xr = x + (rows ? (int64_t)rows[blockIdx.x] / rdiv : (int64_t)blockIdx.x) * K;
	float a = 0.0f;
	for (int64_t i = threadIdx.x; i < K; i += blockDim.x) a = fmaxf(a, fabsf(xr[i]));
	a = block_max(a);
	int e = 0;
	if (a > 0.0f && isfinite(a)) frexpf(a, &e); /* a in [2^(e-1), 2^e) */
	float s = ldexpf(1.0f, e - top), is = ldexpf(1.0f, top - e);
	if (threadIdx.x == 0) scale[blockIdx.x] = s;
	int lane = threadIdx.x & 31;
	for (int64_t b = threadIdx.x >> 5; b < K / 32; b += blockDim.x >> 5) {
		float d;
		int q = q8_lane(xr[b * 32 + lane], d);
		out[(int64_t)blockIdx.x * K + b * 32 + lane] = __float2half_rn(d * (float)q * is);
	}
}

/* The dense GEMM's rows: largest magnitude in [2^13, 2^14). Its outputs are f32, so the rows can
 * sit this high: no input overflows f16, and only values below 2^-27 of their row's largest reach
 * f16's subnormals (the 8-bit rounding before loses up to 2^-8 of the block's largest, the f16
 * one ~2^-11 of each value). */
extern "C" int sg_cu_q8_rows_f16(const float *x, int64_t n, int64_t K, uint16_t *out, float *scale, sg_custream s)
{
	return sg_cu_q8_rows_f16_gather(x, NULL, 1, n, K, 14, out, scale, s);
}

extern "C" int sg_cu_q8_rows_f16_gather(const float *x, const int32_t *rows, int64_t rdiv, int64_t n, int64_t K, int top, uint16_t *out,
					float *scale, sg_custream s)
{
	if (K % 32 || n > 0x7fffffff || rdiv < 1 || top < -100 || top > 100) return (int)cudaErrorInvalidValue;
	if (n) q8_rows_f16_kernel<<<(unsigned)n, 256, 0, (cudaStream_t)s>>>(x, rows, rdiv, K, top, (__half *)out, scale);
	return (int)cudaGetLastError();
}

static __device__ __forceinline__ float to_f(float v) { return v; }
static __device__ __forceinline__ float to_f(__half v) { return __half2float(v); }

/* y[rows[t] or t][r] = c[t][r] * scale[t] (+ bias[r]); c rows ldc apart. c may be y (in place,
 * rows NULL, ldc = N): each element is read and written by the same thread. */
template <typename T>
__global__ void scale_rows_kernel(const T *c, int64_t ldc, const int32_t *rows, float *y, int64_t n, int64_t N, const float *scale,
				  const float *bias)
{
	for (int64_t t = blockIdx.y; t < n; t += gridDim.y) {
		int64_t yr = rows ? (int64_t)rows[t] : t;
		float sc = scale[t];
		for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < N; r += (int64_t)gridDim.x * blockDim.x)
			y[yr * N + r] = to_f(c[t * ldc + r]) * sc + (bias ? bias[r] : 0.0f);
	}
}

/* rows of N columns: blocks of 256 across a row (at most 64), rows in the grid's y */
static dim3 rows_grid(int64_t n, int64_t N)
{
	int64_t bx = (N + 255) / 256;
	return dim3((unsigned)(bx < 64 ? bx : 64), (unsigned)(n < 65535 ? n : 65535));
}

extern "C" int sg_cu_scale_rows(float *y, int64_t n, int64_t N, const float *scale, const float *bias, sg_custream s)
{
	if (n > 0 && N > 0) scale_rows_kernel<float><<<rows_grid(n, N), 256, 0, (cudaStream_t)s>>>(y, N, NULL, y, n, N, scale, bias);
	return (int)cudaGetLastError();
}

extern "C" int sg_cu_scale_rows_scatter(const uint16_t *c16, int64_t ldc, const int32_t *rows, int64_t n, int64_t N, const float *scale,
					float *y, sg_custream s)
{
	if (ldc < N) return (int)cudaErrorInvalidValue;
	if (n > 0 && N > 0) scale_rows_kernel<__half><<<rows_grid(n, N), 256, 0, (cudaStream_t)s>>>((const __half *)c16, ldc, rows, y, n, N, scale, NULL);
	return (int)cudaGetLastError();
}

/* --- the fused decode GEMV: one token, up to three matrices sharing the input, an epilogue --- */

/* The gated activations of the elementwise kernel, same arithmetic (act(g) * u). */
static __device__ __forceinline__ float act_of(int act, float g)
{
	if (act == SG_CU_EW_GELU) return 0.5f * g * (1.0f + tanhf(0.7978845608f * (g + 0.044715f * g * g * g)));
	if (act == SG_CU_EW_GELU_ERF) return 0.5f * g * (1.0f + erff(g * 0.70710678f));
	return g / (1.0f + expf(-g));
}

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
 * Block-split, as mvq_kernel's variants 4 and 5 (the fastest on the H200): block b owns S row
 * slots, S consecutive rows of the row space, or for the GLU S/2 rows of the gate and the same
 * rows of the up matrix (so the epilogue has both), and its QT threads stride over the units of
 * those rows; the slots' sums meet in shared memory. Thousands of short blocks keep the loads in
 * flight better than a few warps looping over long rows (measured: the warp-per-row layout lost
 * 20-50% here). Q8: 8-bit activations and dp4a (the UI decoders); else f32 activations (plain
 * formats). The weights' parameters stay in the kernel's parameter space (__grid_constant__).
 */
/* The epilogue of row slot s of a fused GEMV (S slots from row g0 of the row space; for the GLU
 * slots [0, S/2) are gate rows and [S/2, S) the same up rows); tot holds every slot's sum. */
/* res_s: slot s's residual p.res[r] (ADD) when the caller loaded it ahead, else NULL */
template <int S>
static __device__ __forceinline__ void multi_epi(const sg_cu_multi &p, int s, int64_t g0, const float *tot, int64_t rows, const float *res_s = NULL)
{
	if (p.epi == SG_CU_EPI_GLU) {
		int64_t r = g0 + s;
		if (s < S / 2 && r < rows) {
			float g = tot[s] + (p.bias[0] ? p.bias[0][r] : 0.0f), u = tot[s + S / 2] + (p.bias[1] ? p.bias[1][r] : 0.0f);
			p.y[0][r] = act_of(p.act, g) * u;
		}
	} else if (g0 + s < rows) {
		int64_t r;
		int m = multi_row(p, g0 + s, r);
		float v = tot[s] + (p.bias[m] ? p.bias[m][r] : 0.0f);
		if (p.epi == SG_CU_EPI_ADD) v = (res_s ? *res_s : p.res[r]) + v;
		p.y[m][r] = v;
	}
}

/* The S row slots starting at row g0 of the row space: matrix, row, and its codes, scales, biases. */
template <int S>
static __device__ __forceinline__ void multi_rows(const sg_cu_multi &p, int64_t g0, int per, int glu, int64_t rows, int *ms, int64_t *rs,
						  const uint8_t **rp, const uint8_t **sp, const uint8_t **bp)
{
#pragma unroll
	for (int s = 0; s < S; s++) {
		int64_t gr = g0 + s % per, r;
		if (gr >= rows) gr = rows - 1; /* computed, never stored */
		int m = glu ? s / per : multi_row(p, gr, r);
		if (glu) r = gr;
		ms[s] = m, rs[s] = r;
		const sg_cuw &w = p.w[m];
		rp[s] = w.data + (size_t)r * w.row_bytes;
		sp[s] = w.scales ? w.scales + (size_t)r * w.sb_row_bytes : NULL;
		bp[s] = w.biases ? w.biases + (size_t)r * w.sb_row_bytes : NULL;
	}
}

/* The S rows' weights into L2 (before pdl_wait: weights are never written) by nt threads. */
template <int S>
static __device__ __forceinline__ void multi_prefetch(const sg_cu_multi &p, const int *ms, const uint8_t *const *rp, const uint8_t *const *sp,
						      const uint8_t *const *bp, int lane, int nt)
{
#pragma unroll
	for (int s = 0; s < S; s++) {
		const sg_cuw &w = p.w[ms[s]];
		l2_prefetch(rp[s], w.row_bytes, lane, nt);
		if (sp[s]) l2_prefetch(sp[s], w.sb_row_bytes, lane, nt);
		if (bp[s]) l2_prefetch(bp[s], w.sb_row_bytes, lane, nt);
	}
}

/* One 32-weight unit of S rows against 8-bit activations: dp4a sums into acc. */
template <int KT, int S>
static __device__ __forceinline__ void q8_unit(const sg_cuw &w0, const uint8_t *const *rp, const uint8_t *const *sp, const uint8_t *const *bp,
					       int64_t u, const int8_t *vq, const float *vd, const float *vs, float *acc)
{
	typedef UI<KT> T;
	int64_t ea = T::e0(u), ec = ea + T::HS;
	int4 xa = *(const int4 *)(vq + ea), xc = *(const int4 *)(vq + ec);
	float d0 = vd[ea >> 5], d1 = vd[ec >> 5], s0 = vs[ea >> 4], s1 = vs[ec >> 4];
#pragma unroll
	for (int s = 0; s < S; s++) {
		int c[8];
		float sca[2], off[2];
		T::dq(w0, rp[s], sp[s], bp[s], u, c, sca, off);
		acc[s] += unit_dot(c, xa, xc, d0, d1, s0, s1, sca, off);
	}
}

/*
 * Warp-split variant (8-bit activations only): each warp owns S row slots and its lanes walk
 * the units with several loads in flight; the activations come from global memory (L1 serves
 * the block's other warps), the sums meet by shuffles: no shared memory, no block barrier.
 */
template <int KT, int S>
__global__ void __launch_bounds__(QT) mvw_kernel(const __grid_constant__ sg_cu_multi p, const float *__restrict__ x,
						 const int8_t *__restrict__ xq, const float *__restrict__ dx, const float *__restrict__ sx,
						 int64_t rows)
{
	const int glu = p.epi == SG_CU_EPI_GLU, per = glu ? S / 2 : S;
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int64_t g0 = ((int64_t)blockIdx.x * (QT / 32) + warp) * per;
	pdl_trigger();
	if (g0 >= rows) {
		pdl_wait();
		return;
	}
	const uint8_t *rp[S], *sp[S], *bp[S];
	int ms[S];
	int64_t rs[S];
	multi_rows<S>(p, g0, per, glu, rows, ms, rs, rp, sp, bp);
	if (p.prefetch) multi_prefetch<S>(p, ms, rp, sp, bp, lane, 32);
	pdl_wait();
	float acc[S];
#pragma unroll
	for (int s = 0; s < S; s++) acc[s] = 0.0f;
	const int64_t nu = p.w[0].K / 32;
#pragma unroll 4
	for (int64_t u = lane; u < nu; u += 32) q8_unit<KT, S>(p.w[0], rp, sp, bp, u, xq, dx, sx, acc);
#pragma unroll
	for (int s = 0; s < S; s++) acc[s] = warp_sum(acc[s]);
	if (lane < S) multi_epi<S>(p, lane, g0, acc, rows);
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
template <int KT, int Q8, int S, int STG>
__global__ void __launch_bounds__(QT) mvm_kernel(const __grid_constant__ sg_cu_multi p, const float *__restrict__ x,
						 const int8_t *__restrict__ xq, const float *__restrict__ dx, const float *__restrict__ sx,
						 int64_t rows)
{
	__shared__ float red[QT / 32][S];
	const int glu = p.epi == SG_CU_EPI_GLU, per = glu ? S / 2 : S;
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int64_t g0 = (int64_t)blockIdx.x * per;
	const uint8_t *rp[S], *sp[S], *bp[S];
	int ms[S];
	int64_t rs[S];
	pdl_trigger();
	multi_rows<S>(p, g0, per, glu, rows, ms, rs, rp, sp, bp);
	if (p.prefetch) multi_prefetch<S>(p, ms, rp, sp, bp, threadIdx.x, QT);
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
		if constexpr (STG) {
			/* many rows share the activations: stage them in shared memory once per block */
			extern __shared__ __align__(16) unsigned char xsm[];
			int64_t K = w0.K;
			int8_t *q = (int8_t *)xsm;
			float *d = (float *)(xsm + K), *sm = d + K / 32;
			for (int64_t i = threadIdx.x; i < K / 16; i += QT) ((int4 *)q)[i] = ldd((const int4 *)xq + i);
			for (int64_t i = threadIdx.x; i < K / 32; i += QT) d[i] = ldd(dx + i);
			for (int64_t i = threadIdx.x; i < K / 16; i += QT) sm[i] = ldd(sx + i);
			__syncthreads();
			vq = q, vd = d, vs = sm;
		}
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
	multi_epi<S>(p, (int)threadIdx.x, g0, tot, rows);
}

/*
 * The block-per-lane GEMV of the planar K-quants (variant 16, the default for Q4_K and Q6_K).
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
template <int KT> struct SB;

/* block b's 16 half sums from the swizzled shared copy (mvs_kernel) */
static __device__ __forceinline__ void ld_ss(const float4 *ss, int64_t b, float *o)
{
	const int f = (int)((b >> 1) & 3);
#pragma unroll
	for (int q = 0; q < 4; q++) {
		float4 v = ss[4 * b + (q ^ f)];
		o[4 * q] = v.x, o[4 * q + 1] = v.y, o[4 * q + 2] = v.z, o[4 * q + 3] = v.w;
	}
}

/* block b's 8 activation scales (staged in ds when it is not NULL, else global) and 16 half sums
 * (staged) */
struct XS {
	float d[8], s[16];
	__device__ __forceinline__ void load(const float *dx, const float4 *ss, const float4 *ds, int64_t b);
};

/* n float4 loads from p (16-byte aligned) into o[4n] */
static __device__ __forceinline__ void ld_f4(const float *p, float *o, int n)
{
#pragma unroll
	for (int i = 0; i < n; i++) {
		float4 v = ldd((const float4 *)p + i);
		o[4 * i] = v.x, o[4 * i + 1] = v.y, o[4 * i + 2] = v.z, o[4 * i + 3] = v.w;
	}
}

__device__ __forceinline__ void XS::load(const float *dx, const float4 *ss, const float4 *ds, int64_t b)
{
	if (ds) {
		const int f = (int)((b >> 2) & 1); /* stage_x's swizzle of the scale chunks */
#pragma unroll
		for (int h = 0; h < 2; h++) {
			float4 v = ds[2 * b + (h ^ f)];
			d[4 * h] = v.x, d[4 * h + 1] = v.y, d[4 * h + 2] = v.z, d[4 * h + 3] = v.w;
		}
	} else
		ld_f4(dx + 8 * b, d, 2);
	ld_ss(ss, b, s);
}

template <> struct SB<SG_CUKT_Q4_K> {
	uint4 q[8];
	uint32_t s[3], dm;
	__device__ __forceinline__ void load(const uint8_t *row, const uint8_t *, const uint8_t *, int, int64_t nb, int64_t b)
	{
#pragma unroll
		for (int p = 0; p < 8; p++) q[p] = ld16(row + ((int64_t)p * nb + b) * 16);
		const uint32_t *sp = (const uint32_t *)(row + 128 * nb + 12 * b);
		s[0] = __ldg(sp), s[1] = __ldg(sp + 1), s[2] = __ldg(sp + 2);
		dm = __ldg((const uint32_t *)(row + 140 * nb) + b);
	}
	/* the same from a row staged in shared memory */
	__device__ __forceinline__ void load_s(const uint8_t *row, int64_t nb, int64_t b)
	{
#pragma unroll
		for (int p = 0; p < 8; p++) q[p] = *(const uint4 *)(row + ((int64_t)p * nb + b) * 16);
		const uint32_t *sp = (const uint32_t *)(row + 128 * nb + 12 * b);
		s[0] = sp[0], s[1] = sp[1], s[2] = sp[2];
		dm = ((const uint32_t *)(row + 140 * nb))[b];
	}
	/* sub-block t (0..7): w = d * sc[t] * code - dmin * mn[t]; x ~= dx[t] * qx. acc[i] += the dot
	 * of row r[i]'s block b (NR rows of one column block: each activation chunk read once) */
	template <int NR>
	static __device__ __forceinline__ void dot(const SB *r, const int4 *xs, int64_t b, const float *dxv, const float *sxv, float *acc)
	{
		/* the 6-bit scales and minima as bytes: words of sub-blocks 0-3 and 4-7 */
		uint32_t sc[NR][2], mn[NR][2];
		float d[NR], dmin[NR];
#pragma unroll
		for (int i = 0; i < NR; i++) {
			const uint32_t *s = r[i].s;
			sc[i][0] = s[0] & 0x3f3f3f3fu, sc[i][1] = (s[2] & 0x0f0f0f0fu) | ((s[0] >> 2) & 0x30303030u);
			mn[i][0] = s[1] & 0x3f3f3f3fu, mn[i][1] = ((s[2] >> 4) & 0x0f0f0f0fu) | ((s[1] >> 2) & 0x30303030u);
			d[i] = h2f((uint16_t)r[i].dm), dmin[i] = h2f((uint16_t)(r[i].dm >> 16));
		}
		const int4 *xb = xs + 16 * b;
		const int bm = (int)(b & 15);
#pragma unroll
		for (int j = 0; j < 4; j++) {
			/* pieces 2j and 2j+1: elements 0-15 and 16-31 of sub-blocks 2j (low) and 2j+1 (high) */
			int lo[NR], hi[NR];
#pragma unroll
			for (int i = 0; i < NR; i++) lo[i] = hi[i] = 0;
#pragma unroll
			for (int h = 0; h < 2; h++) {
				int4 xa = xb[(4 * j + h) ^ bm], xc = xb[(4 * j + 2 + h) ^ bm];
#pragma unroll
				for (int i = 0; i < NR; i++) {
					const uint4 &v = r[i].q[2 * j + h];
					lo[i] = __dp4a((int)(v.x & 0x0f0f0f0fu), xa.x, lo[i]);
					lo[i] = __dp4a((int)(v.y & 0x0f0f0f0fu), xa.y, lo[i]);
					lo[i] = __dp4a((int)(v.z & 0x0f0f0f0fu), xa.z, lo[i]);
					lo[i] = __dp4a((int)(v.w & 0x0f0f0f0fu), xa.w, lo[i]);
					hi[i] = __dp4a((int)((v.x >> 4) & 0x0f0f0f0fu), xc.x, hi[i]);
					hi[i] = __dp4a((int)((v.y >> 4) & 0x0f0f0f0fu), xc.y, hi[i]);
					hi[i] = __dp4a((int)((v.z >> 4) & 0x0f0f0f0fu), xc.z, hi[i]);
					hi[i] = __dp4a((int)((v.w >> 4) & 0x0f0f0f0fu), xc.w, hi[i]);
				}
			}
			const int t0 = 2 * j, t1 = 2 * j + 1;
#pragma unroll
			for (int i = 0; i < NR; i++) {
				float c0 = (float)((sc[i][t0 >> 2] >> (8 * (t0 & 3))) & 255u), m0 = (float)((mn[i][t0 >> 2] >> (8 * (t0 & 3))) & 255u);
				float c1 = (float)((sc[i][t1 >> 2] >> (8 * (t1 & 3))) & 255u), m1 = (float)((mn[i][t1 >> 2] >> (8 * (t1 & 3))) & 255u);
				acc[i] += d[i] * c0 * dxv[t0] * (float)lo[i] - dmin[i] * m0 * (sxv[2 * t0] + sxv[2 * t0 + 1]);
				acc[i] += d[i] * c1 * dxv[t1] * (float)hi[i] - dmin[i] * m1 * (sxv[2 * t1] + sxv[2 * t1 + 1]);
			}
		}
	}
};

template <> struct SB<SG_CUKT_Q6_K> {
	uint4 ql[8], qh[4], sc;
	uint32_t d16;
	__device__ __forceinline__ void load(const uint8_t *row, const uint8_t *, const uint8_t *, int, int64_t nb, int64_t b)
	{
#pragma unroll
		for (int p = 0; p < 8; p++) ql[p] = ld16(row + ((int64_t)p * nb + b) * 16);
#pragma unroll
		for (int p = 0; p < 4; p++) qh[p] = ld16(row + 128 * nb + ((int64_t)p * nb + b) * 16);
		sc = ld16(row + 192 * nb + 16 * b);
		d16 = __ldg((const unsigned short *)(row + 208 * nb) + b);
	}
	__device__ __forceinline__ void load_s(const uint8_t *row, int64_t nb, int64_t b)
	{
#pragma unroll
		for (int p = 0; p < 8; p++) ql[p] = *(const uint4 *)(row + ((int64_t)p * nb + b) * 16);
#pragma unroll
		for (int p = 0; p < 4; p++) qh[p] = *(const uint4 *)(row + 128 * nb + ((int64_t)p * nb + b) * 16);
		sc = *(const uint4 *)(row + 192 * nb + 16 * b);
		d16 = ((const unsigned short *)(row + 208 * nb))[b];
	}
	/* runs of 16: w = d * sc[e / 16] * (code - 32); x ~= dx * qx, sx = dx * sum(qx) per run;
	 * acc[i] += the dot of row r[i]'s block b */
	template <int NR>
	static __device__ __forceinline__ void dot(const SB *r, const int4 *xs, int64_t b, const float *dxv, const float *sxv, float *acc)
	{
		const int4 *xb = xs + 16 * b;
		const int bm = (int)(b & 15);
		float a[NR];
#pragma unroll
		for (int i = 0; i < NR; i++) a[i] = 0.0f;
#pragma unroll
		for (int p = 0; p < 8; p++) {
			const int n = p >> 2, kk = (p >> 1) & 1, li = 16 * (p & 1);
			const int ea = 128 * n + 32 * kk + li, eb = ea + 64; /* low nibbles, high nibbles */
			int4 xa = xb[(ea >> 4) ^ bm], xc = xb[(eb >> 4) ^ bm];
#pragma unroll
			for (int i = 0; i < NR; i++) {
				const uint4 &v = r[i].ql[p], &hv = r[i].qh[2 * n + (p & 1)];
				int ia = 0, ib = 0;
#pragma unroll
				for (int k = 0; k < 4; k++) {
					uint32_t w = qword(v, k), h = qword(hv, k);
					int ca = (int)((w & 0x0f0f0f0fu) | (((h >> (2 * kk)) & 0x03030303u) << 4));
					int cb = (int)(((w >> 4) & 0x0f0f0f0fu) | (((h >> (2 * kk + 4)) & 0x03030303u) << 4));
					ia = __dp4a(ca, k == 0 ? xa.x : k == 1 ? xa.y : k == 2 ? xa.z : xa.w, ia);
					ib = __dp4a(cb, k == 0 ? xc.x : k == 1 ? xc.y : k == 2 ? xc.z : xc.w, ib);
				}
				float sa = (float)(int8_t)qbyte(r[i].sc, ea >> 4), sbv = (float)(int8_t)qbyte(r[i].sc, eb >> 4);
				a[i] += sa * (dxv[ea >> 5] * (float)ia - 32.0f * sxv[ea >> 4]);
				a[i] += sbv * (dxv[eb >> 5] * (float)ib - 32.0f * sxv[eb >> 4]);
			}
		}
#pragma unroll
		for (int i = 0; i < NR; i++) acc[i] += h2f((uint16_t)r[i].d16) * a[i];
	}
};

/* MLX 4-bit of group G (32, 64, 128) over planar rows: SB id 100 + log2(G / 32). Piece p (32
 * elements, activation block 8 b + p) has group 32 p / G: w = scale * code + bias. The 256 / G
 * scales and biases of the block are 16-bit (bf16 or f16), converted at the dot (not at the load:
 * the load runs before pdl_wait and must not wait for its data). */
#define SB_MLX4 100
template <int G> struct SBM {
	enum { NG = 256 / G };
	uint4 q[8];
	uint32_t sw[NG / 2 > 0 ? NG / 2 : 1], bw[NG / 2 > 0 ? NG / 2 : 1]; /* pairs of 16-bit values; G = 128: one pair */
	int bf;
	__device__ __forceinline__ void load(const uint8_t *row, const uint8_t *sc, const uint8_t *bi, int bf16, int64_t nb, int64_t b)
	{
#pragma unroll
		for (int p = 0; p < 8; p++) q[p] = ld16(row + ((int64_t)p * nb + b) * 16);
		const uint32_t *sp = (const uint32_t *)(sc + 2 * NG * b), *bp = (const uint32_t *)(bi + 2 * NG * b);
#pragma unroll
		for (int i = 0; i < NG / 2; i++) sw[i] = __ldg(sp + i), bw[i] = __ldg(bp + i);
		bf = bf16;
	}
	__device__ __forceinline__ float f16v(uint32_t w, int hi) const
	{
		uint16_t h = (uint16_t)(hi ? w >> 16 : w);
		return bf ? bf2f(h) : h2f(h);
	}
	template <int NR>
	static __device__ __forceinline__ void dot(const SBM *r, const int4 *xs, int64_t b, const float *dxv, const float *sxv, float *acc)
	{
		const int4 *xb = xs + 16 * b;
		const int bm = (int)(b & 15);
#pragma unroll
		for (int p = 0; p < 8; p++) {
			int4 xa = xb[(2 * p) ^ bm], xc = xb[(2 * p + 1) ^ bm];
			const int g = 32 * p / G;
#pragma unroll
			for (int i = 0; i < NR; i++) {
				const uint4 &v = r[i].q[p];
				int d = 0;
#pragma unroll
				for (int k = 0; k < 4; k++) {
					/* word k: elements 8k..8k+7 as nibbles, even ones low */
					uint32_t w = qword(v, k), lo = w & 0x0F0F0F0Fu, hi = (w >> 4) & 0x0F0F0F0Fu;
					int4 x = k < 2 ? xa : xc;
					int x0 = k & 1 ? x.z : x.x, x1 = k & 1 ? x.w : x.y;
					d = __dp4a((int)__byte_perm(lo, hi, 0x5140), x0, d);
					d = __dp4a((int)__byte_perm(lo, hi, 0x7362), x1, d);
				}
				float sv = r[i].f16v(r[i].sw[g >> 1], g & 1), bv = r[i].f16v(r[i].bw[g >> 1], g & 1);
				acc[i] += sv * dxv[p] * (float)d + bv * (sxv[2 * p] + sxv[2 * p + 1]);
			}
		}
	}
};
template <> struct SB<SB_MLX4> : SBM<32> {};
template <> struct SB<SB_MLX4 + 1> : SBM<64> {};
template <> struct SB<SB_MLX4 + 2> : SBM<128> {};

/* The block-per-lane kind of a weight: its SB id, or -1 without that kernel. */
static int sb_kind(const sg_cuw *w)
{
	if (w->kt == SG_CUKT_Q4_K || w->kt == SG_CUKT_Q6_K) return w->kt;
	if (w->kt == SG_CUKT_MLX4 && w->planar && w->K % 256 == 0 && w->gsh >= 0 && w->gsh <= 2) return SB_MLX4 + w->gsh;
	return -1;
}

/* One token's 8-bit activations (nb 256-blocks) and half sums into shared memory, swizzled: code
 * chunk c (16 bytes) of block b at xs[16 b + (c ^ b % 16)], half-sum chunk q (4 floats) at ss[4 b +
 * (q ^ b / 2 % 4)]. The lanes of a row read chunk c of 16 consecutive blocks at once, which in the
 * plain layout lie 256 bytes apart (one bank group: a 16-way conflict; from L1, 16 lines a load);
 * swizzled, no two of 8 neighbouring lanes share a bank. With ds (SARAGOSSA_CUDA_GEMV_XSTAGE=1)
 * the blocks' activation scales go to ds too (chunk h of block b at ds[2 b + (h ^ b / 4 % 2)]) and
 * every copy is a cp.async issued at once: one memory round trip after the kernel's wait instead of
 * one per loop round (three to eight for K = 4096 .. 12288) and one more for the scales after the
 * barrier. Ends with the block's barrier. */
static __device__ __forceinline__ void stage_x(const int8_t *xq, const float *sx, const float *dx, int64_t nb, int4 *xs, float4 *ss, float4 *ds)
{
	if (ds) {
		for (int64_t i = threadIdx.x; i < 16 * nb; i += blockDim.x) cp_async16(&xs[(i & ~(int64_t)15) + ((i & 15) ^ ((i >> 4) & 15))], (const int4 *)xq + i);
		for (int64_t i = threadIdx.x; i < 4 * nb; i += blockDim.x) cp_async16(&ss[(i & ~(int64_t)3) + ((i & 3) ^ ((i >> 3) & 3))], (const float4 *)sx + i);
		for (int64_t i = threadIdx.x; i < 2 * nb; i += blockDim.x) cp_async16(&ds[(i & ~(int64_t)1) + ((i & 1) ^ ((i >> 3) & 1))], (const float4 *)dx + i);
		cp_async_wait_all();
	} else {
		for (int64_t i = threadIdx.x; i < 16 * nb; i += blockDim.x) xs[(i & ~(int64_t)15) + ((i & 15) ^ ((i >> 4) & 15))] = ldd((const int4 *)xq + i);
		for (int64_t i = threadIdx.x; i < 4 * nb; i += blockDim.x) ss[(i & ~(int64_t)3) + ((i & 3) ^ ((i >> 3) & 3))] = ldd((const float4 *)sx + i);
	}
	__syncthreads();
}

/* the shared bytes stage_x takes for rows of K: codes, half sums and (staged) scales */
static size_t stage_bytes(int64_t K) { return (size_t)K + (size_t)K / 4 + (size_t)K / 8; }

/* Lane sl's part of one row's dot (nb 256-blocks at LPR lanes a row, block b = sl already loaded
 * into a when b < nb) against the staged activations, summed over the row's lanes. MANY: the lane
 * walks its blocks with two in registers, the next one's loads in flight during the dot. */
template <int KT, int LPR, int MANY>
static __device__ __forceinline__ float sb_row_sum(SB<KT> &a, int64_t b, const uint8_t *row, const uint8_t *rsc, const uint8_t *rbi, int bf,
						   int64_t nb, const int4 *xs, const float4 *ss, const float *dx, const float4 *ds)
{
	SB<KT> c;
	float acc = 0.0f;
	if (!MANY) {
		if (b < nb) {
			XS v;
			v.load(dx, ss, ds, b);
			SB<KT>::template dot<1>(&a, xs, b, v.d, v.s, &acc);
		}
	}
	while (MANY && b < nb) {
		int64_t b2 = b + LPR;
		if (b2 < nb) c.load(row, rsc, rbi, bf, nb, b2);
		XS v;
		v.load(dx, ss, ds, b);
		SB<KT>::template dot<1>(&a, xs, b, v.d, v.s, &acc);
		if (b2 >= nb) break;
		b = b2 + LPR;
		if (b < nb) a.load(row, rsc, rbi, bf, nb, b);
		v.load(dx, ss, ds, b2);
		SB<KT>::template dot<1>(&c, xs, b2, v.d, v.s, &acc);
	}
#pragma unroll
	for (int o = LPR / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
	return acc;
}

/*
 * The first block of each lane's row is loaded before pdl_wait; at most one block a lane (MANY =
 * 0) keeps the registers few and the blocks an SM holds many. Longer rows (MANY) walk their blocks
 * with two in registers, the next one's loads in flight during the dot: measured faster on the
 * H200 than splitting such rows over more lanes (K = 14336: 2366-2462 against 2102 GB/s).
 */
template <int KT, int LPR, int MANY>
static __device__ __forceinline__ void mvs_run(const sg_cu_multi &p, const int8_t *__restrict__ xq, const float *__restrict__ dx,
					       const float *__restrict__ sx, int64_t rows, int m, int64_t r, int64_t g0, float *tot)
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
		res_t = p.res[rr];
	}
	extern __shared__ int4 xs[];
	float4 *ss = (float4 *)(xs + 16 * nb), *ds = p.xstage ? ss + 4 * nb : NULL;
	stage_x(xq, sx, dx, nb, xs, ss, ds);
	float acc = sb_row_sum<KT, LPR, MANY>(a, b, row, rsc, rbi, w.sb_bf16, nb, xs, ss, dx, ds);
	if (sl == 0) tot[slot] = acc;
	__syncthreads();
	if ((int)threadIdx.x < S) multi_epi<S>(p, (int)threadIdx.x, g0, tot, rows, &res_t);
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
	const int64_t g0 = (int64_t)blockIdx.x * per;
	pdl_trigger();
	int64_t gr = g0 + slot % per, r;
	if (gr >= rows) gr = rows - 1; /* computed, never stored */
	int m = glu ? slot / per : multi_row(p, gr, r);
	if (glu) r = gr;
	if constexpr (KT2 != KT) {
		if (p.w[m].kt == KT2) return mvs_run<KT2, LPR, MANY>(p, xq, dx, sx, rows, m, r, g0, tot);
	}
	mvs_run<KT, LPR, MANY>(p, xq, dx, sx, rows, m, r, g0, tot);
	(void)x;
}

/* Lanes per row for rows of nb blocks: the smallest power of two (4..32) holding every block;
 * past 32 blocks, 32 lanes walking them, or 16 when that leaves no lane idle in a last round. */
static int sb_lanes(int64_t nb)
{
	int l = 4;
	while (l < 32 && l < nb) l <<= 1;
	if (nb > 32 && nb % 32 && nb % 16 == 0) l = 16;
	return l;
}

typedef void (*mvs_fn)(const sg_cu_multi, const float *, const int8_t *, const float *, const float *, int64_t);

/* The instance of a block-per-lane kernel family (K: mvs_kernel or moes_kernel, by a struct whose
 * f<KT, LPR, MANY>() names it) for SB kind sk (sb_kind) and rows of nb blocks at lpr lanes a row. */
template <typename K, int KT, int MANY> static typename K::fn sb_pick_kt(int lpr)
{
	switch (lpr) {
	case 4: return K::template f<KT, 4, MANY>();
	case 8: return K::template f<KT, 8, MANY>();
	case 16: return K::template f<KT, 16, MANY>();
	default: return K::template f<KT, 32, MANY>();
	}
}

template <typename K, int KT> static typename K::fn sb_pick_many(int lpr, int64_t nb)
{
	return nb > lpr ? sb_pick_kt<K, KT, 1>(lpr) : sb_pick_kt<K, KT, 0>(lpr);
}

template <typename K> static typename K::fn sb_pick(int sk, int lpr, int64_t nb)
{
	switch (sk) {
	case SG_CUKT_Q4_K: return sb_pick_many<K, SG_CUKT_Q4_K>(lpr, nb);
	case SG_CUKT_Q6_K: return sb_pick_many<K, SG_CUKT_Q6_K>(lpr, nb);
	case SB_MLX4: return sb_pick_many<K, SB_MLX4>(lpr, nb);
	case SB_MLX4 + 1: return sb_pick_many<K, SB_MLX4 + 1>(lpr, nb);
	case SB_MLX4 + 2: return sb_pick_many<K, SB_MLX4 + 2>(lpr, nb);
	default: return NULL;
	}
}

struct MvsK {
	typedef mvs_fn fn;
	template <int KT, int LPR, int MANY> static fn f() { return mvs_kernel<KT, LPR, MANY>; }
};
static mvs_fn picks(int sk, int lpr, int64_t nb) { return sb_pick<MvsK>(sk, lpr, nb); }
/* the Q4_K / Q6_K one (either may come first) */
struct MvsMix {
	typedef mvs_fn fn;
	template <int KT, int LPR, int MANY> static fn f() { return mvs_kernel<SG_CUKT_Q4_K, LPR, MANY, SG_CUKT_Q6_K>; }
};

static int g_mix = 1; /* SARAGOSSA_CUDA_GEMV_MIXED */
extern "C" void sg_cu_set_gemv_mixed(int on) { g_mix = on != 0; }

/* 1 if the block-per-lane kernel takes m's matrices, of two kinds, in one launch: Q4_K and Q6_K
 * rows of one length, stored (no GLU or residual), every change of kind at a multiple of a
 * block's rows, the default GEMV settings. Measured on an H200 (tg128, one binary): the q/k/v of
 * Qwen3-30B-A3B shapes (K = 2048, 5.9 MB) +2.3% at 1k positions and +0.9% at 8k in one launch;
 * those of Qwen3-8B (K = 4096, 14 MB) +1.5% and +0.9% (they were held to two launches by an 8 MB
 * limit from a measurement of -2.1% on the kernels of 2026-12-02). */
extern "C" int sg_cu_gemv_mixed_ok(const sg_cu_multi *m)
{
	if (!g_mix || g_sb != 1 || g_slots || g_variant || m->epi != SG_CU_EPI_STORE || m->nw < 2) return 0;
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
 * Variant 18, the persistent block-per-lane GEMV (SARAGOSSA_CUDA_GEMV_PERSIST): mvs_kernel's
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

static int g_persist = 4, g_pgrid = 0; /* SARAGOSSA_CUDA_GEMV_PERSIST (its default); a grid cap for the tests (0 = by occupancy) */
static long g_plaunches; /* launches of variant 18, for the tests */
extern "C" void sg_cu_set_gemv_persist(int on) { g_persist = on >= 0 && on <= 4 ? on : 1; }
#define PERSIST_BIG ((size_t)64 << 20) /* SARAGOSSA_CUDA_GEMV_PERSIST=3: launches of at least these weight bytes (an LM head) */
extern "C" void sg_cu_set_gemv_persist_grid(int blocks) { g_pgrid = blocks > 0 ? blocks : 0; }
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

/* The launch of variant 18: a grid of the blocks the SMs hold at once (by the occupancy of the
 * instance), the tasks spread evenly over as few rounds as that allows. */
/* mode: g_persist's setting, or 1 for a launch that asked for variant 18 itself (the kernel bench) */
static int mvp_launch(const sg_cu_multi *m, const float *x, const int8_t *xq, const float *dx, const float *sx, int64_t rows, cudaStream_t st,
		      int mode)
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
	if (mode == 2 && rounds > 1 && !g_pgrid) return -1; /* one round only */
	if (mode == 4 && !g_pgrid && (ntask <= sms || ntask > 3 * (int64_t)sms)) return -1; /* one round of 1-3 blocks an SM only */
	if (mode == 3) {
		size_t bytes = 0;
		for (int j = 0; j < m->nw; j++) bytes += (size_t)m->N[j] * m->w[j].row_bytes;
		if (bytes < PERSIST_BIG) return -1;
	}
	if (g_pgrid && grid > g_pgrid) grid = g_pgrid;
	sg_cu_multi mp = *m;
	mp.xstage = g_xstage;
	pdl_launch(f, dim3((unsigned)grid), dim3(QT), smem, st, mp, x, xq, dx, sx, rows);
	g_plaunches++;
	return (int)cudaGetLastError();
}

/*
 * Variant 17, the copy-engine GEMV of the planar K-quants (SARAGOSSA_CUDA_GEMV_SB=2, launches of
 * at least g_tmin bytes of weights, rows of at most 32 blocks): a persistent grid of two 256-thread
 * blocks an SM whose blocks take tiles of TR consecutive rows (~32 KB) in turn. One thread has the
 * copy engine move each tile into shared memory (cp.async.bulk, one copy per contiguous run of
 * rows, completing on the stage's mbarrier), TNST stages ahead, so two tiles a block (~128 KB an
 * SM) are in flight whatever the registers allow; the one-shot kernel was measured (ncu) at 48% of
 * DRAM throughput, its warps stalled on their own loads half the time. Within a tile the layout
 * is variant 16's: LPR lanes a row, lane b on block b, summed by the same shuffles, so the bits
 * are variant 16's. Eight warps a block, one task a thread: the first version (four warps, the
 * tasks of ~20 KB tiles looped over and their partial sums met in shared memory) was bound by
 * that serial work (ncu: 1.4 TB/s). The activations are staged once per block, and each lane's
 * activation scales read once.
 */
#define TNST 3 /* pipeline stages */
#define TNT 256 /* threads */
#define TSMEM (113 * 1024) /* shared memory a block at most: two blocks an SM */
static size_t g_tmin = (size_t)16 << 20; /* the launches variant 17 takes: at least these weight bytes */
static long g_tlaunches; /* its launches, for the tests */

static __device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

static __device__ __forceinline__ void mbar_init(uint64_t *bar, uint32_t count)
{
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}

static __device__ __forceinline__ void mbar_expect_tx(uint64_t *bar, uint32_t bytes)
{
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}

static __device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity)
{
	uint32_t done = 0;
	while (!done)
		asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
			     : "=r"(done)
			     : "r"(smem_u32(bar)), "r"(parity)
			     : "memory");
}

/* bytes (a multiple of 16) from global src to shared dst by the copy engine, completing on bar */
static __device__ __forceinline__ void bulk_g2s(void *dst, const void *src, uint32_t bytes, uint64_t *bar)
{
	asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_u32(dst)), "l"(src),
		     "r"(bytes), "r"(smem_u32(bar))
		     : "memory");
}

/* Tile t's rows into stage dst (thread 0): a GLU tile is TR/2 gate rows then the same up rows. */
static __device__ __forceinline__ void tile_fetch(const sg_cu_multi &p, int64_t t, int TR, int64_t rows, uint8_t *dst, uint64_t *bar)
{
	const size_t rb = p.w[0].row_bytes;
	uint32_t tx = 0;
	if (p.epi == SG_CU_EPI_GLU) {
		int64_t h = TR / 2, r0 = t * h, n = rows - r0 < h ? rows - r0 : h;
		tx = (uint32_t)(2 * n * (int64_t)rb);
		mbar_expect_tx(bar, tx);
		bulk_g2s(dst, p.w[0].data + (size_t)r0 * rb, (uint32_t)(n * (int64_t)rb), bar);
		bulk_g2s(dst + (size_t)h * rb, p.w[1].data + (size_t)r0 * rb, (uint32_t)(n * (int64_t)rb), bar);
		return;
	}
	int64_t g0 = t * TR, g1 = g0 + TR < rows ? g0 + TR : rows, off = 0;
	for (int m = 0; m < p.nw; m++) { /* the runs of rows of each matrix the tile covers */
		int64_t a = g0 > off ? g0 : off, b = g1 < off + p.N[m] ? g1 : off + p.N[m];
		if (a < b) tx += (uint32_t)((b - a) * (int64_t)rb);
		off += p.N[m];
	}
	mbar_expect_tx(bar, tx);
	off = 0;
	for (int m = 0; m < p.nw; m++) {
		int64_t a = g0 > off ? g0 : off, b = g1 < off + p.N[m] ? g1 : off + p.N[m];
		if (a < b) bulk_g2s(dst + (size_t)(a - g0) * rb, p.w[m].data + (size_t)(a - off) * rb, (uint32_t)((b - a) * (int64_t)rb), bar);
		off += p.N[m];
	}
}

template <int KT, int LPR>
__global__ void __launch_bounds__(TNT, 2) mvt_kernel(const __grid_constant__ sg_cu_multi p, const int8_t *__restrict__ xq, const float *__restrict__ dx,
						     const float *__restrict__ sx, int64_t rows, int TR, size_t stage_bytes)
{
	enum { S = TNT / LPR };
	extern __shared__ __align__(128) uint8_t tsm[];
	const int glu = p.epi == SG_CU_EPI_GLU, h = glu ? TR / 2 : TR; /* rows of the row space a tile */
	const int64_t nb = p.w[0].K / 256, ntiles = (rows + h - 1) / h;
	const size_t rb = p.w[0].row_bytes;
	uint8_t *stage = tsm;
	int4 *xs = (int4 *)(tsm + TNST * stage_bytes);
	float4 *ss = (float4 *)(xs + 16 * nb), *ds = p.xstage ? ss + 4 * nb : NULL;
	float *tot = (float *)(ss + 6 * nb); /* [2][S]: a tile's row sums, double-buffered */
	uint64_t *bar = (uint64_t *)(tot + 2 * S);
	const int slot = (int)threadIdx.x / LPR, sl = (int)threadIdx.x % LPR;
	pdl_trigger();
	if (threadIdx.x == 0) {
		for (int i = 0; i < TNST; i++) mbar_init(&bar[i], 1);
		asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
		/* weights are never written: the first tiles fly before the wait */
		for (int i = 0; i < TNST; i++) {
			int64_t t = blockIdx.x + (int64_t)i * gridDim.x;
			if (t < ntiles) tile_fetch(p, t, TR, rows, stage + i * stage_bytes, &bar[i]);
		}
	}
	pdl_wait();
	stage_x(xq, sx, dx, nb, xs, ss, ds); /* ends with a barrier: the mbarriers are initialised too */
	XS v; /* lane sl's block is the same in every tile */
	if (sl < nb) v.load(dx, ss, ds, sl);
	int it = 0;
	for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x, it++) {
		const int si = it % TNST;
		float *tt = tot + (it & 1) * S;
		mbar_wait(&bar[si], (uint32_t)((it / TNST) & 1));
		float acc = 0.0f;
		if (slot < TR && sl < nb) { /* rows past the matrix end read a stale stage: never stored */
			SB<KT> a;
			a.load_s(stage + si * stage_bytes + (size_t)slot * rb, nb, sl);
			SB<KT>::template dot<1>(&a, xs, sl, v.d, v.s, &acc);
		}
#pragma unroll
		for (int o = LPR / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
		if (sl == 0) tt[slot] = acc;
		__syncthreads(); /* the stage is read and the sums written */
		if (threadIdx.x == 0) {
			int64_t tn = t + (int64_t)TNST * gridDim.x;
			/* the block's reads of the stage (ordered by the barrier) before the copy engine's writes */
			asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
			if (tn < ntiles) tile_fetch(p, tn, TR, rows, stage + si * stage_bytes, &bar[si]);
		}
		const int i = (int)threadIdx.x;
		const int64_t g = t * h + i;
		if (i < h && g < rows) { /* multi_epi's arithmetic */
			if (glu) {
				float gv = tt[i] + (p.bias[0] ? p.bias[0][g] : 0.0f), u = tt[i + h] + (p.bias[1] ? p.bias[1][g] : 0.0f);
				p.y[0][g] = act_of(p.act, gv) * u;
			} else {
				int64_t r;
				int m = multi_row(p, g, r);
				float y = tt[i] + (p.bias[m] ? p.bias[m][r] : 0.0f);
				if (p.epi == SG_CU_EPI_ADD) y = p.res[r] + y;
				p.y[m][r] = y;
			}
		}
	}
}

typedef void (*mvt_fn)(const sg_cu_multi, const int8_t *, const float *, const float *, int64_t, int, size_t);

template <int KT> static mvt_fn pickt_l(int lpr)
{
	switch (lpr) {
	case 4: return mvt_kernel<KT, 4>;
	case 8: return mvt_kernel<KT, 8>;
	case 16: return mvt_kernel<KT, 16>;
	default: return mvt_kernel<KT, 32>;
	}
}

static mvt_fn pickt(int kt, int lpr)
{
	switch (kt) {
	case SG_CUKT_Q4_K: return pickt_l<SG_CUKT_Q4_K>(lpr);
	case SG_CUKT_Q6_K: return pickt_l<SG_CUKT_Q6_K>(lpr);
	default: return NULL;
	}
}

/* Launches mvt_kernel: rows per tile for three stages in TSMEM beside the staged activations
 * (even for a GLU, at most a row a lane group), or -1 where it does not apply: another format, a
 * mixed stage, rows of more than 32 blocks, launches under g_tmin bytes. */
static int mvt_launch(const sg_cu_multi *m, const int8_t *xq, const float *dx, const float *sx, int64_t rows, cudaStream_t st)
{
	static mvt_fn seen[32]; /* the instances met, by their shared bytes: blocks an SM (at most 2) */
	static size_t sizes[32];
	static int fits[32], nseen;
	const int glu = m->epi == SG_CU_EPI_GLU, kt = m->w[0].kt;
	const size_t rb = m->w[0].row_bytes;
	const int64_t K = m->w[0].K, nb = K / 256;
	size_t bytes = 0;
	for (int j = 0; j < m->nw; j++) {
		if (m->w[j].kt != kt || m->w[j].row_bytes != rb || m->w[j].scales) return -1;
		bytes += (size_t)m->N[j] * m->w[j].row_bytes;
	}
	int lpr = sb_lanes(nb);
	mvt_fn f = pickt(kt, lpr);
	if (!f || rb % 16 || nb > lpr || bytes < g_tmin) return -1;
	const int S = TNT / lpr;
	size_t fixed = stage_bytes(K) + 2 * sizeof(float) * (size_t)S + 8 * TNST + 128;
	if (fixed + TNST * (rb + 128) > TSMEM) return -1;
	int TR = (int)((TSMEM - fixed) / (TNST * rb));
	if (TR > S) TR = S;
	if (glu) TR &= ~1;
	if (TR < (glu ? 2 : 1)) return -1;
	size_t stage = (TR * rb + 127) & ~(size_t)127;
	size_t smem = TNST * stage + fixed;
	int i = 0, bps = 0;
	while (i < nseen && (seen[i] != f || sizes[i] != smem)) i++;
	if (i < nseen) {
		bps = fits[i];
	} else {
		if (cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, TSMEM)) return (int)cudaGetLastError();
		if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, f, TNT, smem) || bps < 1) bps = 1;
		if (bps > 2) bps = 2;
		if (nseen < 32) seen[nseen] = f, sizes[nseen] = smem, fits[nseen++] = bps;
	}
	int64_t h = glu ? TR / 2 : TR, ntiles = (rows + h - 1) / h, grid = (int64_t)bps * sg_cu_sms();
	if (grid > ntiles) grid = ntiles;
	sg_cu_multi mp = *m;
	mp.xstage = g_xstage;
	pdl_launch(f, dim3((unsigned)grid), dim3(TNT), smem, st, mp, xq, dx, sx, rows, TR, stage);
	g_tlaunches++;
	return (int)cudaGetLastError();
}

extern "C" void sg_cu_set_gemv_tile_min(size_t bytes) { g_tmin = bytes; }
extern "C" long sg_cu_gemv_tile_launches(void) { return g_tlaunches; }

extern "C" void sg_cu_set_gemv_sb(int on) { g_sb = on >= 0 && on <= 2 ? on : 1; }
extern "C" void sg_cu_set_gemv_xstage(int on) { g_xstage = on != 0; }
extern "C" void sg_cu_set_gemv_pre(int on) { g_pre = on != 0; }

extern "C" int sg_cu_sb_ok(const sg_cuw *w) { return picks(sb_kind(w), 32, 1) != NULL; }

/* Row slots per block of the fused 8-bit GEMV (SARAGOSSA_CUDA_GEMV_ROWS; 0 = the default), or a
 * whole kernel-bench variant (SARAGOSSA_CUDA_GEMV_VARIANT, 8..15; 0 = by shape). */
extern "C" void sg_cu_set_gemv_rows(int rows) { g_slots = rows == 1 || rows == 2 || rows == 4 || rows == 8 ? rows : 0; }
extern "C" void sg_cu_set_gemv_variant(int variant) { g_variant = variant >= 8 && variant <= 18 ? variant : 0; }
#define SG_CU_MULTI_SLOTS (g_slots ? g_slots : 2)
#define NQ_WARPS 16 /* warps of a norm-quantize block: 512 threads, the rmsnorm kernel's size for rows of >= 1024 */

/*
 * RMS-normalises one row x (when norm) into xn and quantizes it to 8-bit blocks exactly as
 * quant_x_kernel does. Block b quantizes the row's 32-blocks [16b, 16b + 16), one per warp; every
 * block sums the row's squares itself (the row is a few KB in L2), with the rmsnorm kernel's loop
 * and reduction at its block size, so xn is bit-identical to that kernel's output.
 */
__global__ void __launch_bounds__(NQ_WARPS * 32) norm_quant_kernel(const float *__restrict__ x, const float *__restrict__ w, int norm, float eps,
								   float off, int64_t K, float *__restrict__ xn, int8_t *__restrict__ xq,
								   float *__restrict__ dx, float *__restrict__ sx)
{
	int wi = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
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
		      float *dx, float *sx, cudaStream_t st)
{
	pdl_launch(norm_quant_kernel, dim3((unsigned)((K / 32 + NQ_WARPS - 1) / NQ_WARPS)), dim3(NQ_WARPS * 32), 0, st, x, w, norm,
		   eps, off, K, xn, xq, dx, sx);
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

/* variant: 8 = 2 row slots per block, 9 = 4, 10 = 1 (a GLU takes 2 instead), 11 = 8 (9 and 11
 * stage the 8-bit activations in shared memory), 12 = 4 and 13 = 8 with the activations read
 * from global memory; 14 = 2 and 15 = 4 slots per warp (mvw_kernel); 0 = by shape. */
static int multi_slots(int variant, int glu)
{
	switch (variant) {
	case 9: case 12: case 15: return 4;
	case 11: case 13: return 8;
	case 10: return glu ? 2 : 1;
	default: return 2;
	}
}
#define SMEM_X_MAX (48 << 10) /* static shared memory limit: larger K takes 2 slots */
static size_t smem_x(int64_t K) { return (size_t)K + (size_t)(K / 32) * 4 + (size_t)(K / 16) * 4; }

/* kind: 0 = mvm_kernel, activations in registers; 1 = mvm_kernel staging them in shared
 * memory; 2 = mvw_kernel (slots per warp). */
template <int KT, int Q8> static mvm_fn pickm_kt(int slots, int kind)
{
	if constexpr (!Q8) {
		return kind ? NULL : slots == 1 ? mvm_kernel<KT, Q8, 1, 0> : slots == 2 ? mvm_kernel<KT, Q8, 2, 0> : NULL;
	} else {
		if (kind == 2) return slots == 2 ? mvw_kernel<KT, 2> : slots == 4 ? mvw_kernel<KT, 4> : NULL;
		switch (slots) {
		case 1: return kind ? NULL : mvm_kernel<KT, Q8, 1, 0>;
		case 2: return kind ? NULL : mvm_kernel<KT, Q8, 2, 0>;
		case 4: return kind ? mvm_kernel<KT, Q8, 4, 1> : mvm_kernel<KT, Q8, 4, 0>;
		case 8: return kind ? mvm_kernel<KT, Q8, 8, 1> : mvm_kernel<KT, Q8, 8, 0>;
		default: return NULL;
		}
	}
}

static mvm_fn pickm(int kt, int slots, int kind)
{
	switch (kt) {
	case SG_CUKT_F32: return pickm_kt<SG_CUKT_F32, 0>(slots, kind);
	case SG_CUKT_F16: return pickm_kt<SG_CUKT_F16, 0>(slots, kind);
	case SG_CUKT_BF16: return pickm_kt<SG_CUKT_BF16, 0>(slots, kind);
	case SG_CUKT_Q8_0: return pickm_kt<SG_CUKT_Q8_0, 1>(slots, kind);
	case SG_CUKT_Q4_0: return pickm_kt<SG_CUKT_Q4_0, 1>(slots, kind);
	case SG_CUKT_Q5_0: return pickm_kt<SG_CUKT_Q5_0, 1>(slots, kind);
	case SG_CUKT_Q4_K: return pickm_kt<SG_CUKT_Q4_K, 1>(slots, kind);
	case SG_CUKT_Q5_K: return pickm_kt<SG_CUKT_Q5_K, 1>(slots, kind);
	case SG_CUKT_Q6_K: return pickm_kt<SG_CUKT_Q6_K, 1>(slots, kind);
	case SG_CUKT_MLX4: return pickm_kt<SG_CUKT_MLX4, 1>(slots, kind);
	case SG_CUKT_MLX8: return pickm_kt<SG_CUKT_MLX8, 1>(slots, kind);
	default: return NULL;
	}
}

static int plain_kt(int kt) { return kt == SG_CUKT_F32 || kt == SG_CUKT_F16 || kt == SG_CUKT_BF16; }

extern "C" int sg_cu_multi_ok(int kt) { return pickm(kt, 2, 0) != NULL; }

extern "C" void sg_cu_q8_split(void *q8, int64_t K, int8_t **xq, float **dx, float **sx)
{
	size_t q = ((size_t)K + 255) & ~(size_t)255, fb = ((size_t)(K / 32) * 4 + 255) & ~(size_t)255;
	*xq = (int8_t *)q8;
	*dx = (float *)((char *)q8 + q);
	*sx = (float *)((char *)q8 + q + fb);
}

extern "C" int sg_cu_gemv_multi(const sg_cu_multi *m, const float *x, int norm, const float *norm_w, float eps, float off, float *xn,
				int variant, void *q8_scratch, sg_custream s)
{
	cudaStream_t st = (cudaStream_t)s;
	int kt = m->w[0].kt, glu = m->epi == SG_CU_EPI_GLU;
	int64_t K = m->w[0].K, rows = m->N[0];
	if (m->nw < 1 || m->nw > SG_CU_MULTI_MAX) return (int)cudaErrorInvalidValue;
	const int auto_v = !variant; /* else the kernel bench's */
	if (!glu)
		for (int i = 1; i < m->nw; i++) rows += m->N[i];
	/* the kernel bench's best: one row per block for plain formats, two for the others (a GLU
	 * always pairs a gate and an up row) */
	if (!variant && !plain_kt(kt)) variant = g_variant;
	/* the block-per-lane kernel where it exists (types without it take the default) */
	if (!variant && !g_slots && g_sb && sg_cu_sb_ok(&m->w[0])) variant = 15 + g_sb;
	if (variant >= 16 && (!sg_cu_sb_ok(&m->w[0]) || stage_bytes(K) > SMEM_X_MAX)) variant = 0; /* 1.375 K bytes of activations staged */
	/* MLX 4-bit: the warp-split kernel measured 8% faster end to end on Qwen3-8B shapes (H200) */
	if (!variant && !g_slots && kt == SG_CUKT_MLX4) variant = 14;
	int S = variant >= 16 ? 1 : variant ? multi_slots(variant, glu) : plain_kt(kt) && !glu ? 1 : SG_CU_MULTI_SLOTS;
	int kind = variant == 14 || variant == 15 ? 2 : variant == 9 || variant == 11 || (!variant && g_slots >= 4) ? 1 : 0;
	if (plain_kt(kt) && (S > 2 || kind)) S = 2, kind = 0;
	if (kind == 1 && smem_x(K) > SMEM_X_MAX) S = 2, kind = 0;
	mvm_fn f = variant >= 16 ? NULL : pickm(kt, S, kind);
	if (!f && variant < 16) return (int)cudaErrorInvalidValue;
	const float *xin = x;
	int8_t *xq = NULL;
	float *dx = NULL, *sx = NULL;
	if (plain_kt(kt)) {
		if (norm) {
			int e = sg_cu_rmsnorm(x, norm_w, eps, off, xn, 1, K, s);
			if (e) return e;
			xin = xn;
		}
	} else {
		if (!q8_scratch || K % 32) return (int)cudaErrorInvalidValue;
		sg_cu_q8_split(q8_scratch, K, &xq, &dx, &sx);
		if (!x) goto launch; /* quantized by the producer */
		if (norm && K < 1024) { /* the rmsnorm kernel's 128-thread size: normalise apart, then quantize */
			int e = sg_cu_rmsnorm(x, norm_w, eps, off, xn, 1, K, s);
			if (e) return e;
			x = xn;
			norm = 0;
		}
		nq_launch(x, norm_w, norm, eps, off, K, norm ? xn : NULL, xq, dx, sx, st);
	}
launch:;
	if (variant == 17) {
		int e = mvt_launch(m, xq, dx, sx, rows, st);
		if (e >= 0) return e;
		variant = 16; /* shared memory too small for its stages */
	}
	int pmode = variant == 18 ? 1 : g_persist; /* a variant asked for is taken where it can be */
	if (variant == 16 && auto_v && g_persist) variant = 18;
	if (variant == 18) { /* a GLU's gate and up slots in one warp: at most 16 lanes a row; one kind */
		if (!sg_cu_gemv_mixed_ok(m) && (!glu || sb_lanes(K / 256) <= 16)) {
			int e = mvp_launch(m, xin, xq, dx, sx, rows, st, pmode);
			if (e >= 0) return e;
		}
		variant = 16;
	}
	if (variant == 16) {
		int lpr = sb_lanes(K / 256), slots = QT / lpr, per = glu ? slots / 2 : slots;
		sg_cu_multi mp = *m;
		mp.xstage = g_xstage;
		mvs_fn fk = sg_cu_gemv_mixed_ok(m) ? sb_pick_many<MvsMix, SG_CUKT_Q4_K>(lpr, K / 256) : picks(sb_kind(&m->w[0]), lpr, K / 256);
		pdl_launch(fk, dim3((unsigned)((rows + per - 1) / per)), dim3(QT), stage_bytes(K), st, mp, xin,
			   (const int8_t *)xq, (const float *)dx, (const float *)sx, rows);
		return (int)cudaGetLastError();
	}
	int per = (glu ? S / 2 : S) * (kind >= 2 ? QT / 32 : 1);
	int64_t nb = (rows + per - 1) / per;
	sg_cu_multi mp = *m;
	mp.prefetch = sg_cu_pdl == 2;
	size_t wbytes = 0; /* the launch's weight bytes: small launches load theirs before the wait */
	for (int i = 0; i < m->nw; i++) wbytes += (size_t)m->N[i] * m->w[i].row_bytes;
	mp.pre = g_pre && plain_kt(kt) && wbytes <= PRE_MAX_BYTES;
	pdl_launch(f, dim3((unsigned)nb), dim3(QT), kind == 1 ? smem_x(K) : 0, st, mp, xin, (const int8_t *)xq, (const float *)dx, (const float *)sx,
		   rows);
	return (int)cudaGetLastError();
}

/* --- MoE --- */

/* One block: counts the slots of each expert, lays them out by expert, lists the used experts
 * and zeroes the outputs of slots with an id out of range. */
__global__ void moe_sort_kernel(const int32_t *ids, int64_t S, int64_t E, int32_t *start, int32_t *order, int32_t *used, int32_t *nused,
				float *y, int64_t N)
{
	extern __shared__ int32_t sm[]; /* cnt [E], cursor [E] */
	int32_t *cnt = sm, *cur = sm + E;
	for (int64_t e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
	__syncthreads();
	for (int64_t s = threadIdx.x; s < S; s += blockDim.x) {
		int32_t e = ids[s];
		if (e >= 0 && e < E) atomicAdd(&cnt[e], 1);
	}
	/* a warp per slot: the ids are read once each, not once per output (S * N) */
	for (int64_t s = threadIdx.x >> 5; s < S; s += blockDim.x >> 5) {
		int32_t e = ids[s];
		if (e < 0 || e >= E)
			for (int64_t i = threadIdx.x & 31; i < N; i += 32) y[s * N + i] = 0.0f;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		int32_t acc = 0, nu = 0;
		for (int64_t e = 0; e < E; e++) {
			start[e] = acc;
			cur[e] = acc;
			if (cnt[e]) used[nu++] = (int32_t)e;
			acc += cnt[e];
		}
		start[E] = acc;
		*nused = nu;
	}
	__syncthreads();
	for (int64_t s = threadIdx.x; s < S; s += blockDim.x) {
		int32_t e = ids[s];
		if (e >= 0 && e < E) order[atomicAdd(&cur[e], 1)] = (int32_t)s;
	}
}

extern "C" int sg_cu_moe_sort(const int32_t *ids, int64_t S, int64_t E, int32_t *scratch, float *y, int64_t N, sg_custream s)
{
	int32_t *start = scratch, *order = start + E + 1, *used = order + S, *nused = used + E;
	if (E < 1 || E > 4096) return (int)cudaErrorInvalidValue; /* cnt and cursor in shared memory: 32 KB */
	moe_sort_kernel<<<1, 1024, (size_t)(2 * E) * sizeof(int32_t), (cudaStream_t)s>>>(ids, S, E, start, order, used, nused, y, N);
	return (int)cudaGetLastError();
}

/*
 * One token (decode): slot j's expert is ids[j] (a token's slots name distinct experts), so no
 * sort is needed: block (b, j) computes 8 rows of slot j, two a warp, lanes over the units
 * (mvw_kernel's layout), against the shared or the slot's own 8-bit activations.
 */
template <int KT>
__global__ void __launch_bounds__(QT) moe1_kernel(const sg_cuw w, const int8_t *__restrict__ xq, const float *__restrict__ dx,
						  const float *__restrict__ sx, int shared_x, const int32_t *__restrict__ ids, int64_t E,
						  float *__restrict__ y, int64_t N, const sg_cuw w2, int act)
{
	/* GLU (w2 given: the up matrix, same format): a warp's two rows are row r of the gate expert
	 * and row r of the up expert, and it stores act(g) * u (the sums are those of the unfused
	 * kernel: each row's accumulator sees the same units in the same order) */
	const int glu = w2.data != NULL, per = glu ? 1 : 2;
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, slot = blockIdx.y;
	int64_t r0 = ((int64_t)blockIdx.x * (QT / 32) + warp) * per;
	pdl_trigger();
	pdl_wait();
	if (r0 >= N) return;
	float *yo = y + (int64_t)slot * N;
	int32_t e = ldd(ids + slot);
	if (e < 0 || e >= E) { /* an id out of range gives zeros */
		if (lane < per && r0 + lane < N) yo[r0 + lane] = 0.0f;
		return;
	}
	const uint8_t *rp[2], *sp[2], *bp[2];
#pragma unroll
	for (int s = 0; s < 2; s++) {
		const sg_cuw &m = glu && s ? w2 : w;
		const uint8_t *data = m.data + (size_t)e * m.expert_bytes;
		int64_t r = glu ? r0 : r0 + s < N ? r0 + s : N - 1;
		rp[s] = data + (size_t)r * m.row_bytes;
		sp[s] = m.scales ? m.scales + (size_t)e * m.expert_sb_bytes + (size_t)r * m.sb_row_bytes : NULL;
		bp[s] = m.biases ? m.biases + (size_t)e * m.expert_sb_bytes + (size_t)r * m.sb_row_bytes : NULL;
	}
	int64_t K = w.K, xo = shared_x ? 0 : slot;
	const int8_t *vq = xq + xo * K;
	const float *vd = dx + xo * (K / 32), *vs = sx + xo * (K / 16);
	float acc[2] = {0.0f, 0.0f};
#pragma unroll 4
	for (int64_t u = lane; u < K / 32; u += 32) q8_unit<KT, 2>(w, rp, sp, bp, u, vq, vd, vs, acc);
	acc[0] = warp_sum(acc[0]), acc[1] = warp_sum(acc[1]);
	if (glu) {
		if (lane == 0) yo[r0] = act_of(act, acc[0]) * acc[1];
	} else if (lane < 2 && r0 + lane < N) {
		yo[r0 + lane] = acc[lane];
	}
}

/* moes_kernel's idm: trigger the next launch only after the wait (so that the launch after next
 * starts after the routing kernel ended), and read the ids and send the weights' loads before the
 * wait (the ids are then final: see sg_cu_moe_glu). SARAGOSSA_CUDA_MOE_IDS_EARLY. */
#define MOES_TRIGGER_LATE 1
#define MOES_IDS_EARLY 2
static int g_ids_early = 1;
extern "C" void sg_cu_set_moe_ids_early(int on) { g_ids_early = on != 0; }

/*
 * One token's expert matmul of the planar K-quants (SARAGOSSA_CUDA_GEMV_SB): mvs_kernel's layout
 * for the rows of slot blockIdx.y's expert. Block (b, j) takes QT / LPR row slots of expert ids[j]
 * (with the GLU: half of them gate rows, the other half the same up rows), each lane one
 * 256-block of its row, against the shared or the slot's own activations, staged swizzled.
 */
template <int KT, int LPR, int MANY>
__global__ void __launch_bounds__(QT) moes_kernel(const sg_cuw w, const int8_t *__restrict__ xq, const float *__restrict__ dx,
						  const float *__restrict__ sx, int shared_x, const int32_t *__restrict__ ids, int64_t E,
						  float *__restrict__ y, int64_t N, const sg_cuw w2, int act, int xstage, int idm)
{
	enum { S = QT / LPR };
	__shared__ float tot[S];
	const int glu = w2.data != NULL, per = glu ? S / 2 : S, js = blockIdx.y;
	const int slot = (int)threadIdx.x / LPR, sl = (int)threadIdx.x % LPR;
	const int64_t g0 = (int64_t)blockIdx.x * per, nb = w.K / 256;
	if (!(idm & MOES_TRIGGER_LATE)) pdl_trigger();
	int64_t r = g0 + slot % per;
	if (r >= N) r = N - 1; /* computed, never stored */
	const sg_cuw &m = glu && slot >= per ? w2 : w;
	const int early = idm & MOES_IDS_EARLY;
	if (!early) {
		pdl_wait(); /* the ids come from the router kernel */
		if (idm & MOES_TRIGGER_LATE) pdl_trigger();
	}
	int32_t e = ldd(ids + js); /* not ids[js]: that load went above the wait (see ldd) */
	float *yo = y + (int64_t)js * N;
	if (e < 0 || e >= E) { /* an id out of range gives zeros */
		if (early) pdl_wait();
		if ((int)threadIdx.x < per && g0 + threadIdx.x < N) yo[g0 + threadIdx.x] = 0.0f;
		return;
	}
	const uint8_t *row = m.data + (size_t)e * m.expert_bytes + (size_t)r * m.row_bytes;
	size_t so = (size_t)e * m.expert_sb_bytes + (size_t)r * m.sb_row_bytes;
	const uint8_t *rsc = m.scales ? m.scales + so : NULL, *rbi = m.biases ? m.biases + so : NULL;
	SB<KT> a;
	int64_t b = sl;
	if (b < nb) a.load(row, rsc, rbi, m.sb_bf16, nb, b);
	if (early) pdl_wait(); /* the weights' loads went out before it */
	int64_t xo = shared_x ? 0 : js;
	extern __shared__ int4 xs[];
	float4 *ss = (float4 *)(xs + 16 * nb), *ds = xstage ? ss + 4 * nb : NULL;
	stage_x(xq + xo * w.K, sx + xo * (w.K / 16), dx + xo * (w.K / 32), nb, xs, ss, ds);
	float acc = sb_row_sum<KT, LPR, MANY>(a, b, row, rsc, rbi, m.sb_bf16, nb, xs, ss, dx + xo * (w.K / 32), ds);
	if (sl == 0) tot[slot] = acc;
	__syncthreads();
	int t = (int)threadIdx.x;
	if (t < per && g0 + t < N) yo[g0 + t] = glu ? act_of(act, tot[t]) * tot[t + per] : tot[t];
}

typedef void (*moes_fn)(const sg_cuw, const int8_t *, const float *, const float *, int, const int32_t *, int64_t, float *, int64_t, const sg_cuw,
			int, int, int);

struct MoesK {
	typedef moes_fn fn;
	template <int KT, int LPR, int MANY> static fn f() { return moes_kernel<KT, LPR, MANY>; }
};
static moes_fn pick_moes(int sk, int lpr, int64_t nb) { return sb_pick<MoesK>(sk, lpr, nb); }

/* moes_kernel for k slots of one token: the launch status, or -1 when it does not apply (the
 * caller takes moe1_kernel) */
static int moes_launch(const sg_cuw *w, const sg_cuw *w2, const int8_t *xq, const float *dx, const float *sx, int shared_x, const int32_t *ids,
		       int64_t k, int64_t E, float *y, int64_t N, int act, int idm, cudaStream_t st)
{
	int64_t K = w->K, nb = K / 256;
	if (!g_sb || !sg_cu_sb_ok(w) || stage_bytes(K) > SMEM_X_MAX || (w2 && sb_kind(w2) != sb_kind(w))) return -1;
	int lpr = sb_lanes(nb), per = QT / lpr / (w2 ? 2 : 1);
	sg_cuw none;
	memset(&none, 0, sizeof(none));
	pdl_launch(pick_moes(sb_kind(w), lpr, nb), dim3((unsigned)((N + per - 1) / per), (unsigned)k), dim3(QT), stage_bytes(K), st, *w, xq, dx,
		   sx, shared_x, ids, E, y, N, w2 ? *w2 : none, act, g_xstage, idm);
	return (int)cudaGetLastError();
}

typedef void (*moe1_fn)(const sg_cuw, const int8_t *, const float *, const float *, int, const int32_t *, int64_t, float *, int64_t, const sg_cuw,
			int);

static moe1_fn pick_moe1(int kt)
{
	switch (kt) {
	case SG_CUKT_Q8_0: return moe1_kernel<SG_CUKT_Q8_0>;
	case SG_CUKT_Q4_0: return moe1_kernel<SG_CUKT_Q4_0>;
	case SG_CUKT_Q5_0: return moe1_kernel<SG_CUKT_Q5_0>;
	case SG_CUKT_Q4_K: return moe1_kernel<SG_CUKT_Q4_K>;
	case SG_CUKT_Q5_K: return moe1_kernel<SG_CUKT_Q5_K>;
	case SG_CUKT_Q6_K: return moe1_kernel<SG_CUKT_Q6_K>;
	case SG_CUKT_MLX4: return moe1_kernel<SG_CUKT_MLX4>;
	case SG_CUKT_MLX8: return moe1_kernel<SG_CUKT_MLX8>;
	default: return NULL;
	}
}

static int g_moe1 = 1;
extern "C" void sg_cu_set_moe_decode(int on) { g_moe1 = on; }

extern "C" int sg_cu_moe_glu_ok(const sg_cuw *wg, const sg_cuw *wu)
{
	return g_moe1 && sg_cu_has_q8(wg->kt) && pick_moe1(wg->kt) && wg->kt == wu->kt && wg->K == wu->K && wg->group == wu->group &&
	       wg->sb_bf16 == wu->sb_bf16;
}

extern "C" int sg_cu_moe_glu(const sg_cuw *wg, const sg_cuw *wu, const float *x, const int32_t *ids, int64_t k, int64_t E, int act, float *g,
			     int64_t N, void *q8_scratch, int *ids_done, sg_custream s)
{
	if (ids_done) *ids_done = 0;
	cudaStream_t st = (cudaStream_t)s;
	moe1_fn f1 = sg_cu_moe_glu_ok(wg, wu) && q8_scratch ? pick_moe1(wg->kt) : NULL;
	if (!f1 || !wu->data) return (int)cudaErrorInvalidValue;
	int8_t *xq;
	float *dx, *sx;
	if (x) {
		int e = quant_x(x, 1, wg->K, q8_scratch, &xq, &dx, &sx, st);
		if (e) return e;
	} else {
		sg_cu_q8_split(q8_scratch, wg->K, &xq, &dx, &sx); /* rounded by the producer */
	}
	int sb = moes_launch(wg, wu, xq, dx, sx, 1, ids, k, E, g, N, act, g_ids_early ? MOES_TRIGGER_LATE : 0, st);
	if (sb >= 0) {
		if (ids_done) *ids_done = g_ids_early && sb == 0;
		return sb;
	}
	pdl_launch(f1, dim3((unsigned)((N + QT / 32 - 1) / (QT / 32)), (unsigned)k), dim3(QT), 0, st, *wg, (const int8_t *)xq, (const float *)dx,
		   (const float *)sx, 1, ids, E, g, N, *wu, act);
	return (int)cudaGetLastError();
}

extern "C" int sg_cu_moe_matmul(const sg_cuw *w, const float *x, int shared_x, const int32_t *ids, int64_t n, int64_t k, int64_t E, float *y,
				int64_t N, int32_t *scratch, void *q8_scratch, int ids_ready, sg_custream s)
{
	cudaStream_t st = (cudaStream_t)s;
	int64_t S = n * k;
	moe1_fn f1 = n == 1 && g_moe1 && q8_scratch && sg_cu_has_q8(w->kt) ? pick_moe1(w->kt) : NULL;
	if (f1) {
		int8_t *xq;
		float *dx, *sx;
		int e = quant_x(x, shared_x ? 1 : S, w->K, q8_scratch, &xq, &dx, &sx, st);
		if (e) return e;
		int sb = moes_launch(w, NULL, xq, dx, sx, (int)shared_x, ids, S, E, y, N, 0, ids_ready && g_ids_early ? MOES_IDS_EARLY : 0, st);
		if (sb >= 0) return sb;
		sg_cuw none;
		memset(&none, 0, sizeof(none));
		pdl_launch(f1, dim3((unsigned)((N + 2 * (QT / 32) - 1) / (2 * (QT / 32))), (unsigned)S), dim3(QT), 0, st, *w, (const int8_t *)xq,
			   (const float *)dx, (const float *)sx, (int)shared_x, ids, E, y, N, none, 0);
		return (int)cudaGetLastError();
	}
	int32_t *start = scratch, *order = start + E + 1, *used = order + S, *nused = used + E;
	int e0 = sg_cu_moe_sort(ids, S, E, scratch, y, N, s);
	if (e0) return e0;
	/* at most min(E, S) experts are used; a token's own slots name distinct experts, so one
	 * token gives one slot per expert (NT = 1) */
	int nt = n == 1 ? 1 : 8;
	dim3 grid(1, (unsigned)(S < E ? S : E));
	if (q8_scratch && sg_cu_has_q8(w->kt)) {
		int v = SG_CU_GEMV_Q8_DEFAULT, r = q8_rows_per_block(nt, v);
		int8_t *xq;
		float *dx, *sx;
		int e = quant_x(x, shared_x ? n : S, w->K, q8_scratch, &xq, &dx, &sx, st);
		if (e) return e;
		grid.x = (unsigned)((N + r - 1) / r);
		pickq(w->kt, nt, v)<<<grid, q8_threads(nt, v), 0, st>>>(*w, xq, dx, sx, S, y, N, NULL, start, order, used, nused, k, shared_x);
		return (int)cudaGetLastError();
	}
	mv_fn f = pick(w->kt, nt, 1);
	if (!f) return (int)cudaErrorInvalidValue;
	grid.x = (unsigned)((N + WARPS - 1) / WARPS);
	f<<<grid, WARPS * 32, 0, st>>>(*w, x, S, y, N, NULL, start, order, used, nused, k, shared_x);
	return (int)cudaGetLastError();
}

/* --- embedding and dequantization --- */

/* Rows of w into f32 (outf) or 16-bit values (out16: bf16, or f16 when f16, saturated at the
 * largest finite f16 so that no weight turns into an infinity). Output row t is row r0 + t, or
 * with ids row ids[t / rper] * rper + t % rper (groups of rper rows: embedding rows with rper 1,
 * experts with rper N); a group id outside [0, V) gives zeros. */
template <int KT>
__global__ void dequant_rows_kernel(sg_cuw w, const int32_t *ids, int64_t rper, int64_t r0, int64_t V, float *outf, uint16_t *out16, int f16)
{
	typedef U<KT> T;
	int64_t t = blockIdx.x, r = r0 + t, K = w.K;
	if (ids) {
		int64_t g = ids[t / rper];
		if (g < 0 || g >= V) {
			for (int64_t i = threadIdx.x; i < K; i += blockDim.x)
				if (outf) outf[t * K + i] = 0.0f;
				else out16[t * K + i] = 0;
			return;
		}
		r = g * rper + t % rper;
	}
	const uint8_t *row = w.data + (size_t)r * w.row_bytes;
	const uint8_t *sc = w.scales ? w.scales + (size_t)r * w.sb_row_bytes : NULL, *bi = w.biases ? w.biases + (size_t)r * w.sb_row_bytes : NULL;
	for (int64_t u = threadIdx.x; u < K / T::E; u += blockDim.x) {
		float o[T::E];
		int64_t e0 = T::dq(w, row, sc, bi, u, o);
		/* runs of RL >= 8 contiguous elements starting at multiples of 8: 16-byte stores */
#pragma unroll
		for (int i = 0; i < T::E; i += 8) {
			int64_t e = t * K + e0 + (i / T::RL) * T::RS + (i % T::RL);
			if (outf) {
				((float4 *)(outf + e))[0] = make_float4(o[i], o[i + 1], o[i + 2], o[i + 3]);
				((float4 *)(outf + e))[1] = make_float4(o[i + 4], o[i + 5], o[i + 6], o[i + 7]);
				continue;
			}
			uint32_t h[4];
#pragma unroll
			for (int j = 0; j < 4; j++) {
				float a = o[i + 2 * j], b = o[i + 2 * j + 1];
				if (f16) {
					__half2 v = __floats2half2_rn(fminf(fmaxf(a, -65504.0f), 65504.0f), fminf(fmaxf(b, -65504.0f), 65504.0f));
					h[j] = *(uint32_t *)&v;
				} else {
					__nv_bfloat162 v = __floats2bfloat162_rn(a, b);
					h[j] = *(uint32_t *)&v;
				}
			}
			*(uint4 *)(out16 + e) = make_uint4(h[0], h[1], h[2], h[3]);
		}
	}
}

/* Plain types with any row length (embedding tables of odd width). */
__global__ void embed_plain_kernel(sg_cuw w, const int32_t *ids, int64_t V, float *out)
{
	int64_t t = blockIdx.x, r = ids[t], K = w.K;
	for (int64_t i = threadIdx.x; i < K; i += blockDim.x) {
		float v = 0.0f;
		if (r >= 0 && r < V) {
			const uint8_t *row = w.data + (size_t)r * w.row_bytes;
			if (w.kt == SG_CUKT_F32) v = ((const float *)row)[i];
			else if (w.kt == SG_CUKT_F16) v = h2f(((const uint16_t *)row)[i]);
			else v = bf2f(((const uint16_t *)row)[i]);
		}
		out[t * K + i] = v;
	}
}

typedef void (*dq_fn)(sg_cuw, const int32_t *, int64_t, int64_t, int64_t, float *, uint16_t *, int);

static dq_fn pick_dq(int kt)
{
	switch (kt) {
	case SG_CUKT_F32: return dequant_rows_kernel<SG_CUKT_F32>;
	case SG_CUKT_F16: return dequant_rows_kernel<SG_CUKT_F16>;
	case SG_CUKT_BF16: return dequant_rows_kernel<SG_CUKT_BF16>;
	case SG_CUKT_Q8_0: return dequant_rows_kernel<SG_CUKT_Q8_0>;
	case SG_CUKT_Q4_0: return dequant_rows_kernel<SG_CUKT_Q4_0>;
	case SG_CUKT_Q4_1: return dequant_rows_kernel<SG_CUKT_Q4_1>;
	case SG_CUKT_Q5_0: return dequant_rows_kernel<SG_CUKT_Q5_0>;
	case SG_CUKT_Q5_1: return dequant_rows_kernel<SG_CUKT_Q5_1>;
	case SG_CUKT_Q4_K: return dequant_rows_kernel<SG_CUKT_Q4_K>;
	case SG_CUKT_Q5_K: return dequant_rows_kernel<SG_CUKT_Q5_K>;
	case SG_CUKT_Q6_K: return dequant_rows_kernel<SG_CUKT_Q6_K>;
	case SG_CUKT_MLX4: return dequant_rows_kernel<SG_CUKT_MLX4>;
	case SG_CUKT_MLX6: return dequant_rows_kernel<SG_CUKT_MLX6>;
	case SG_CUKT_MLX8: return dequant_rows_kernel<SG_CUKT_MLX8>;
	default: return NULL;
	}
}

extern "C" int sg_cu_embed(const sg_cuw *w, const int32_t *ids, int64_t n, int64_t V, float *out, sg_custream s)
{
	if (n <= 0) return 0;
	int plain = w->kt == SG_CUKT_F32 || w->kt == SG_CUKT_F16 || w->kt == SG_CUKT_BF16;
	if (plain && w->K % 8) {
		embed_plain_kernel<<<(unsigned)n, 256, 0, (cudaStream_t)s>>>(*w, ids, V, out);
	} else {
		dq_fn f = pick_dq(w->kt);
		if (!f) return (int)cudaErrorInvalidValue;
		if ((uintptr_t)out & 15) return (int)cudaErrorMisalignedAddress; /* 16-byte stores */
		f<<<(unsigned)n, 128, 0, (cudaStream_t)s>>>(*w, ids, 1, 0, V, out, NULL, 0);
	}
	return (int)cudaGetLastError();
}

extern "C" int sg_cu_dequant_16(const sg_cuw *w, int64_t r0, int64_t nr, int f16, uint16_t *out, sg_custream s)
{
	dq_fn f = pick_dq(w->kt);
	if (!f) return (int)cudaErrorInvalidValue;
	if ((uintptr_t)out & 15) return (int)cudaErrorMisalignedAddress;
	f<<<(unsigned)nr, 128, 0, (cudaStream_t)s>>>(*w, NULL, 1, r0, 0, NULL, out, f16);
	return (int)cudaGetLastError();
}

extern "C" int sg_cu_dequant_16_groups(const sg_cuw *w, const int32_t *groups, int64_t ng, int64_t rper, int64_t V, int f16, uint16_t *out,
				       sg_custream s)
{
	dq_fn f = pick_dq(w->kt);
	if (!f || rper < 1 || ng * rper > 0x7fffffff) return (int)cudaErrorInvalidValue;
	if ((uintptr_t)out & 15) return (int)cudaErrorMisalignedAddress;
	if (ng > 0) f<<<(unsigned)(ng * rper), 128, 0, (cudaStream_t)s>>>(*w, groups, rper, 0, V, NULL, out, f16);
	return (int)cudaGetLastError();
}

extern "C" int sg_cu_dequant_f32(const sg_cuw *w, int64_t r0, int64_t nr, float *out, sg_custream s)
{
	dq_fn f = pick_dq(w->kt);
	if (!f) return (int)cudaErrorInvalidValue;
	if ((uintptr_t)out & 15) return (int)cudaErrorMisalignedAddress;
	f<<<(unsigned)nr, 128, 0, (cudaStream_t)s>>>(*w, NULL, 1, r0, 0, out, NULL, 0);
	return (int)cudaGetLastError();
}

__global__ void f32_to_16_kernel(const float *x, int64_t n, int f16, uint16_t *out)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
		out[i] = f16 ? __half_as_ushort(__float2half_rn(x[i])) : __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
}

extern "C" int sg_cu_f32_to_16(const float *x, int64_t n, int f16, uint16_t *out, sg_custream s)
{
	int64_t b = (n + 255) / 256;
	if (b) f32_to_16_kernel<<<(unsigned)(b < 65535 ? b : 65535), 256, 0, (cudaStream_t)s>>>(x, n, f16, out);
	return (int)cudaGetLastError();
}

__global__ void split_tf32_kernel(const float *x, int64_t n, float *hi, float *lo)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
		float v = x[i], h;
		uint32_t u;
		asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(v));
		h = __uint_as_float(u & 0xffffe000u); /* the low 13 bits are not part of a TF32 value */
		hi[i] = h;
		lo[i] = v - h;
	}
}

extern "C" int sg_cu_split_tf32(const float *x, int64_t n, float *hi, float *lo, sg_custream s)
{
	int64_t b = (n + 255) / 256;
	split_tf32_kernel<<<(unsigned)(b < 65535 ? b : 65535), 256, 0, (cudaStream_t)s>>>(x, n, hi, lo);
	return (int)cudaGetLastError();
}

__global__ void add_bias_kernel(float *y, const float *bias, int64_t n, int64_t N)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n * N; i += (int64_t)gridDim.x * blockDim.x) y[i] += bias[i % N];
}

extern "C" int sg_cu_add_bias(float *y, const float *bias, int64_t n, int64_t N, sg_custream s)
{
	int64_t b = (n * N + 255) / 256;
	add_bias_kernel<<<(unsigned)(b < 65535 ? b : 65535), 256, 0, (cudaStream_t)s>>>(y, bias, n, N);
	return (int)cudaGetLastError();
}
