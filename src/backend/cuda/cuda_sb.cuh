/*
 * The block-per-lane GEMV's shared pieces (the one-token GEMVs of cuda_gemv.cu and the expert
 * GEMVs of cuda_moe.cu): a lane decodes one whole 256-element block of a planar Q4_K, Q6_K or MLX
 * 4-bit row at a time (SB<KT>: its loads issued at once, its scales decoded once, in registers),
 * against the token's 8-bit activations staged in shared memory (stage_x); the lanes of a row
 * meet by shuffles (sb_row_sum).
 */
#ifndef SG_BACKEND_CUDA_SB_CUH
#define SG_BACKEND_CUDA_SB_CUH

#include "backend/cuda/cuda_units.cuh"

#define SMEM_X_MAX (48 << 10) /* static shared memory limit: rows of larger K stage no activations */

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
static inline int sb_kind(const sg_cuw *w)
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
 * barrier. Ends with the block's barrier unless last is 0 (a multi-token kernel staging its
 * tokens one after another: the copies of all go out before the one wait and barrier). */
static __device__ __forceinline__ void stage_x(const int8_t *xq, const float *sx, const float *dx, int64_t nb, int4 *xs, float4 *ss, float4 *ds,
					       int last = 1)
{
	if (ds) {
		for (int64_t i = threadIdx.x; i < 16 * nb; i += blockDim.x) cp_async16(&xs[(i & ~(int64_t)15) + ((i & 15) ^ ((i >> 4) & 15))], (const int4 *)xq + i);
		for (int64_t i = threadIdx.x; i < 4 * nb; i += blockDim.x) cp_async16(&ss[(i & ~(int64_t)3) + ((i & 3) ^ ((i >> 3) & 3))], (const float4 *)sx + i);
		for (int64_t i = threadIdx.x; i < 2 * nb; i += blockDim.x) cp_async16(&ds[(i & ~(int64_t)1) + ((i & 1) ^ ((i >> 3) & 1))], (const float4 *)dx + i);
		if (last) cp_async_wait_all();
	} else {
		for (int64_t i = threadIdx.x; i < 16 * nb; i += blockDim.x) xs[(i & ~(int64_t)15) + ((i & 15) ^ ((i >> 4) & 15))] = ldd((const int4 *)xq + i);
		for (int64_t i = threadIdx.x; i < 4 * nb; i += blockDim.x) ss[(i & ~(int64_t)3) + ((i & 3) ^ ((i >> 3) & 3))] = ldd((const float4 *)sx + i);
	}
	if (last) __syncthreads();
}

/* the shared bytes stage_x takes for rows of K: codes, half sums and (staged) scales */
static inline size_t stage_bytes(int64_t K) { return (size_t)K + (size_t)K / 4 + (size_t)K / 8; }

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

/* Lanes per row for rows of nb blocks: the smallest power of two (4..32) holding every block;
 * past 32 blocks, 32 lanes walking them, or 16 when that leaves no lane idle in a last round. */
static inline int sb_lanes(int64_t nb)
{
	int l = 4;
	while (l < 32 && l < nb) l <<= 1;
	if (nb > 32 && nb % 32 && nb % 16 == 0) l = 16;
	return l;
}

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

#endif
