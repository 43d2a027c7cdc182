/*
 * The weight formats' decoders shared by the GEMV, MoE and dequantization kernels: a "unit" of 8
 * (plain types) or 32 elements from 16-byte loads, as f32 values (U<KT>, for f32 activations and
 * the dequantizer) or as integer codes with their scales for dp4a against 8-bit activations
 * (UI<KT>), and the dot of one unit against those activations. Device code only; every kernel
 * file that includes it instantiates what it uses.
 */
#ifndef SG_BACKEND_CUDA_UNITS_CUH
#define SG_BACKEND_CUDA_UNITS_CUH

#include <cuda_fp16.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_pdl.cuh"

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

/* The gated activations of the elementwise kernel, same arithmetic (act(g) * u). */
static __device__ __forceinline__ float act_of(int act, float g)
{
	if (act == SG_CU_EW_GELU) return 0.5f * g * (1.0f + tanhf(0.7978845608f * (g + 0.044715f * g * g * g)));
	if (act == SG_CU_EW_GELU_ERF) return 0.5f * g * (1.0f + erff(g * 0.70710678f));
	return g / (1.0f + expf(-g));
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

#endif
