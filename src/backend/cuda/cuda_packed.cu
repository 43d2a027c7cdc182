/*
 * Attention of a packed batch of independent sequences (an encoder's batch of inputs): one warp
 * per (token, head) walks its own sequence's K/V rows 32 at a time with an online softmax, so a batch
 * of any number of sequences is one launch. Same formulas as the CPU reference (f32, scaled dot, running
 * max and sum), summed in another order: the differential test holds it to 1e-5. An additive bias
 * (MPNet's relative positions) is each sequence's [L][H][L] block, one after another.
 */
#include <cuda_runtime.h>
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_pdl.cuh"

#define PK_WARPS 4 /* warps (token, head pairs) per block */

/* The sequence holding token t: the last s with offs[s] <= t. */
static __device__ __forceinline__ int pk_seq_of(const sg_cu_attn_packed &a, int64_t t)
{
	int lo = 0, hi = a.n_seq - 1;
	while (lo < hi) {
		int mid = (lo + hi + 1) >> 1;
		if (a.offs[mid] <= t) lo = mid;
		else hi = mid - 1;
	}
	return lo;
}

/* Where sequence s's bias block starts: after every earlier one's L * H * L values. */
static __device__ __forceinline__ int64_t pk_bias_base(const sg_cu_attn_packed &a, int s)
{
	int64_t base = 0;
	for (int i = 0; i < s; i++) {
		const int64_t L = a.offs[i + 1] - a.offs[i];
		base += L * a.H * L;
	}
	return base;
}

/*
 * A warp per (token, head), its sequence's rows 32 at a time, a row a lane: each lane takes the
 * whole dot product of the query (in shared memory) with its own row, so a block of 32 rows costs
 * one max and one sum across the warp (not a reduction per row), its exponentials are computed
 * once each, and the lanes' row loads are in flight together. The weighted sum of V is then a lane
 * per output dim, each row's probability taken from its lane by a shuffle. The lane's share of the
 * output is a template size, so a 32-wide head is one accumulator, not the widest head's 16 with 15 of
 * them predicated off on every row. (The first form walked
 * the rows one at a time with a warp reduction for each: 337 us a layer for a 2048-token MiniLM
 * chunk on an H100, half of the encoder's GPU time.)
 */
template <int NPL> /* output elements a lane holds: the value head dim over 32, rounded up to a power of two */
__global__ void __launch_bounds__(32 * PK_WARPS) attn_packed_kernel(sg_cu_attn_packed a)
{
	extern __shared__ float pk_q[]; /* [PK_WARPS][hd]: each warp's query */
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	int64_t pair = (int64_t)blockIdx.x * PK_WARPS + warp;
	if (pair >= a.n * a.H) return; /* no block-wide barrier below: a warp may leave */
	int64_t t = pair / a.H;
	int h = (int)(pair % a.H), hk = h / (a.H / a.Hkv);
	const int sq = pk_seq_of(a, t);
	int64_t j0 = a.offs[sq], j1 = a.offs[sq + 1];
	const float *bias = a.bias ? a.bias + pk_bias_base(a, sq) + ((t - j0) * a.H + h) * (j1 - j0) - j0 : NULL;
	float *qs = pk_q + warp * a.hd;
	const float *q = a.q + (t * a.H + h) * a.hd;
	for (int64_t e = lane; e < a.hd; e += 32) qs[e] = q[e];
	__syncwarp();
	const int vec = (a.hd & 3) == 0 && ((uintptr_t)a.k & 15) == 0;
	float acc[NPL];
#pragma unroll
	for (int i = 0; i < NPL; i++) acc[i] = 0.0f;
	float m = -FLT_MAX, l = 0.0f;
	for (int64_t b0 = j0; b0 < j1; b0 += 32) {
		const int64_t j = b0 + lane;
		const int live = j < j1;
		float s = -FLT_MAX;
		if (live) {
			const float *k = a.k + (j * a.Hkv + hk) * a.hd;
			float d = 0.0f;
			if (vec) {
				for (int64_t e = 0; e < a.hd; e += 4) {
					const float4 kv = *(const float4 *)(k + e), qv = *(const float4 *)(qs + e);
					d += qv.x * kv.x + qv.y * kv.y + qv.z * kv.z + qv.w * kv.w;
				}
			} else {
				for (int64_t e = 0; e < a.hd; e++) d += qs[e] * k[e];
			}
			s = d * a.scale + (bias ? bias[j] : 0.0f);
		}
		float bm = s;
#pragma unroll
		for (int o = 16; o > 0; o >>= 1) bm = fmaxf(bm, __shfl_xor_sync(0xffffffffu, bm, o));
		const float mn = fmaxf(m, bm), c = expf(m - mn), p = live ? expf(s - mn) : 0.0f;
		float ps = p;
#pragma unroll
		for (int o = 16; o > 0; o >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, o);
		l = l * c + ps;
#pragma unroll
		for (int i = 0; i < NPL; i++) acc[i] *= c;
		const int nr = j1 - b0 < 32 ? (int)(j1 - b0) : 32;
		for (int r = 0; r < nr; r++) {
			const float pr = __shfl_sync(0xffffffffu, p, r);
			const float *v = a.v + ((b0 + r) * a.Hkv + hk) * a.hdv;
#pragma unroll
			for (int i = 0; i < NPL; i++) {
				int e = lane + 32 * i;
				if (e < a.hdv) acc[i] += pr * v[e];
			}
		}
		m = mn;
	}
	float *out = a.out + (t * a.H + h) * a.hdv;
	float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
	for (int i = 0; i < NPL; i++) {
		int e = lane + 32 * i;
		if (e < a.hdv) out[e] = acc[i] * inv;
	}
}

/*
 * The same attention a block per (16 consecutive tokens, head) for heads of at most 128 dims: the
 * block stages each 32-row tile of a sequence's K and V once in shared memory for all of its tokens
 * in that sequence (the warp-per-token kernel above has each token's warp read them again: 113 us a
 * layer for a 2134-token BERT-base batch on an H100, bound by its instructions and their latency
 * rather than the bytes). A warp takes 4 tokens: lane r dots K row r with the 4 queries (each K
 * value loaded once for the 4, the queries' values broadcast from shared memory), one max and one
 * sum across the warp per token and tile, then a lane per output dim sums V's rows for the 4. A
 * block's tokens may start or end sequences: it walks the sequences they belong to in turn, a
 * token taking part in its own sequence's tiles only. Same formulas as the kernel above; each dot
 * product summed in the same order (dim by dim).
 */
#define PT_TOKENS 16 /* tokens a block */
#define PT_WARPS 4   /* warps a block; each PT_TOKENS / PT_WARPS tokens */
#define PT_QW (PT_TOKENS / PT_WARPS)
#define PT_MAX_HD 128

template <int NPL> /* output elements a lane holds: hdv over 32, rounded up to a power of two (at most 4) */
__global__ void __launch_bounds__(32 * PT_WARPS) attn_packed_tile_kernel(sg_cu_attn_packed a)
{
	__shared__ float ks[32 * (PT_MAX_HD + 1)]; /* a tile's K rows, hd + 1 apart (no bank conflicts) */
	__shared__ float vs[32 * PT_MAX_HD];
	__shared__ __align__(16) float qs[PT_TOKENS * PT_MAX_HD];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, hd = (int)a.hd, hdv = (int)a.hdv, ldk = hd + 1;
	const int h = blockIdx.y, hk = h / (int)(a.H / a.Hkv);
	const int64_t t0 = (int64_t)blockIdx.x * PT_TOKENS, t1 = t0 + PT_TOKENS < a.n ? t0 + PT_TOKENS : a.n;
	for (int u = warp; u < PT_TOKENS; u += PT_WARPS) {
		const int64_t t = t0 + u;
		for (int e = lane; e < hd; e += 32) qs[u * hd + e] = t < t1 ? a.q[(t * a.H + h) * hd + e] : 0.0f;
	}
	const int sf = pk_seq_of(a, t0), sl = pk_seq_of(a, t1 - 1); /* the sequences of the first and last token */
	int64_t base = a.bias ? pk_bias_base(a, sf) : 0; /* sequence s's bias block, s walked from sf */
	const int64_t tw = t0 + warp * PT_QW; /* this warp's first token */
	float m[PT_QW], l[PT_QW], acc[PT_QW][NPL];
#pragma unroll
	for (int u = 0; u < PT_QW; u++) {
		m[u] = -FLT_MAX, l[u] = 0.0f;
#pragma unroll
		for (int i = 0; i < NPL; i++) acc[u][i] = 0.0f;
	}
	const float *qw = qs + warp * PT_QW * hd;
	for (int s = sf; s <= sl; s++) {
		const int64_t j0 = a.offs[s], j1 = a.offs[s + 1], L = j1 - j0;
		for (int64_t b0 = j0; b0 < j1; b0 += 32) {
			const int nr = j1 - b0 < 32 ? (int)(j1 - b0) : 32;
			__syncthreads(); /* the last tile's rows are read by every warp */
			for (int r = warp; r < nr; r += PT_WARPS) { /* a warp a row: coalesced, no division */
				const float *kg = a.k + ((b0 + r) * a.Hkv + hk) * hd, *vg = a.v + ((b0 + r) * a.Hkv + hk) * hdv;
				for (int e = lane; e < hd; e += 32) ks[r * ldk + e] = kg[e];
				for (int e = lane; e < hdv; e += 32) vs[r * hdv + e] = vg[e];
			}
			__syncthreads();
			/* lane r: row r's dot with each of the warp's tokens (rows past nr read stale values
			 * and are masked below) */
			float d[PT_QW];
#pragma unroll
			for (int u = 0; u < PT_QW; u++) d[u] = 0.0f;
			const float *kr = ks + lane * ldk;
			if ((hd & 3) == 0) {
				for (int e = 0; e < hd; e += 4) {
					const float k0 = kr[e], k1 = kr[e + 1], k2 = kr[e + 2], k3 = kr[e + 3];
#pragma unroll
					for (int u = 0; u < PT_QW; u++) {
						const float4 qv = *(const float4 *)(qw + u * hd + e);
						d[u] = fmaf(qv.x, k0, d[u]);
						d[u] = fmaf(qv.y, k1, d[u]);
						d[u] = fmaf(qv.z, k2, d[u]);
						d[u] = fmaf(qv.w, k3, d[u]);
					}
				}
			} else {
				for (int e = 0; e < hd; e++) {
					const float kv = kr[e];
#pragma unroll
					for (int u = 0; u < PT_QW; u++) d[u] = fmaf(qw[u * hd + e], kv, d[u]);
				}
			}
			float p[PT_QW];
#pragma unroll
			for (int u = 0; u < PT_QW; u++) {
				const int64_t t = tw + u;
				p[u] = 0.0f;
				if (t < j0 || t >= j1) continue; /* warp-uniform: not this sequence's token */
				const int live = lane < nr;
				const float sc = live ? d[u] * a.scale + (a.bias ? a.bias[base + ((t - j0) * a.H + h) * L + (b0 - j0) + lane] : 0.0f) : -FLT_MAX;
				float bm = sc;
#pragma unroll
				for (int o = 16; o > 0; o >>= 1) bm = fmaxf(bm, __shfl_xor_sync(0xffffffffu, bm, o));
				const float mn = fmaxf(m[u], bm), c = expf(m[u] - mn);
				p[u] = live ? expf(sc - mn) : 0.0f;
				float ps = p[u];
#pragma unroll
				for (int o = 16; o > 0; o >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, o);
				l[u] = l[u] * c + ps;
				m[u] = mn;
#pragma unroll
				for (int i = 0; i < NPL; i++) acc[u][i] *= c;
			}
			for (int r = 0; r < nr; r++) {
				float pr[PT_QW];
#pragma unroll
				for (int u = 0; u < PT_QW; u++) pr[u] = __shfl_sync(0xffffffffu, p[u], r);
#pragma unroll
				for (int i = 0; i < NPL; i++) {
					const int e = lane + 32 * i;
					if (e < hdv) {
						const float vv = vs[r * hdv + e];
#pragma unroll
						for (int u = 0; u < PT_QW; u++) acc[u][i] = fmaf(pr[u], vv, acc[u][i]);
					}
				}
			}
		}
		if (a.bias) base += L * a.H * L;
	}
#pragma unroll
	for (int u = 0; u < PT_QW; u++) {
		const int64_t t = tw + u;
		if (t >= t1) break;
		float *out = a.out + (t * a.H + h) * hdv;
		const float inv = l[u] > 0.0f ? 1.0f / l[u] : 0.0f;
#pragma unroll
		for (int i = 0; i < NPL; i++) {
			const int e = lane + 32 * i;
			if (e < hdv) out[e] = acc[u][i] * inv;
		}
	}
}

extern "C" int sg_cu_attention_packed(const sg_cu_attn_packed *a, sg_custream s)
{
	if (a->n <= 0) return 0;
	int64_t pairs = a->n * a->H;
	const unsigned grid = (unsigned)((pairs + PK_WARPS - 1) / PK_WARPS);
	const size_t smem = sizeof(float) * PK_WARPS * (size_t)a->hd;
	const cudaStream_t st = (cudaStream_t)s;
	const int64_t w = (a->hdv + 31) / 32;
	if (a->tiles && a->hd <= PT_MAX_HD && a->hdv <= PT_MAX_HD && a->H <= 65535) {
		const dim3 tg((unsigned)((a->n + PT_TOKENS - 1) / PT_TOKENS), (unsigned)a->H);
		if (w <= 1) attn_packed_tile_kernel<1><<<tg, 32 * PT_WARPS, 0, st>>>(*a);
		else if (w <= 2) attn_packed_tile_kernel<2><<<tg, 32 * PT_WARPS, 0, st>>>(*a);
		else attn_packed_tile_kernel<4><<<tg, 32 * PT_WARPS, 0, st>>>(*a);
		return ok();
	}
	if (w <= 1) attn_packed_kernel<1><<<grid, 32 * PK_WARPS, smem, st>>>(*a);
	else if (w <= 2) attn_packed_kernel<2><<<grid, 32 * PK_WARPS, smem, st>>>(*a);
	else if (w <= 4) attn_packed_kernel<4><<<grid, 32 * PK_WARPS, smem, st>>>(*a);
	else if (w <= 8) attn_packed_kernel<8><<<grid, 32 * PK_WARPS, smem, st>>>(*a);
	else attn_packed_kernel<SG_CU_MAX_HD / 32><<<grid, 32 * PK_WARPS, smem, st>>>(*a);
	return ok();
}

/* pool_rows: a thread per (sequence, column), its rows walked in order (a warp's loads are one
 * row's consecutive columns); the mean in double as sg_pool sums it. */
__global__ void pool_rows_kernel(const float *__restrict__ x, const int32_t *__restrict__ offs, int64_t D, int mode, float *__restrict__ out)
{
	const int s = blockIdx.y;
	const int64_t d = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (d >= D) return;
	const int64_t r0 = offs[s], r1 = offs[s + 1];
	float v = 0.0f;
	if (r1 > r0) {
		if (mode == 1) {
			v = x[r0 * D + d];
		} else if (mode == 2) {
			v = x[(r1 - 1) * D + d];
		} else if (mode == 3) {
			double m = -INFINITY;
			for (int64_t r = r0; r < r1; r++)
				if (x[r * D + d] > m) m = x[r * D + d];
			v = (float)m;
		} else {
			double acc = 0.0;
			for (int64_t r = r0; r < r1; r++) acc += (double)x[r * D + d];
			acc /= (double)(r1 - r0);
			v = (float)acc;
		}
	}
	out[(int64_t)s * D + d] = v;
}

extern "C" int sg_cu_pool_rows(const float *x, const int32_t *offs, int n_seq, int64_t D, int mode, float *out, sg_custream s)
{
	if (n_seq <= 0 || D <= 0) return 0;
	dim3 grid((unsigned)((D + 127) / 128), (unsigned)n_seq);
	pool_rows_kernel<<<grid, 128, 0, (cudaStream_t)s>>>(x, offs, D, mode, out);
	return ok();
}
