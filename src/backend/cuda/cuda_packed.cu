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
	/* the sequence holding token t: the last s with offs[s] <= t */
	int lo = 0, hi = a.n_seq - 1;
	while (lo < hi) {
		int mid = (lo + hi + 1) >> 1;
		if (a.offs[mid] <= t) lo = mid;
		else hi = mid - 1;
	}
	int64_t j0 = a.offs[lo], j1 = a.offs[lo + 1];
	const float *bias = NULL;
	if (a.bias) { /* this sequence's block starts after every earlier one's L * H * L values */
		int64_t base = 0;
		for (int s = 0; s < lo; s++) {
			int64_t L = a.offs[s + 1] - a.offs[s];
			base += L * a.H * L;
		}
		bias = a.bias + base + ((t - j0) * a.H + h) * (j1 - j0) - j0;
	}
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
 * The same attention with a block per (sequence, head) (SARAGOSSA_CUDA_PACKED_SMEM): the sequence's
 * K and V rows are copied into shared memory PS_KT rows at a time, once for every 32 queries, instead
 * of every (token, head) warp reading all of them from L1/L2 itself (a 40-token sequence's rows were
 * read 40 times). Each warp holds PS_QW queries' running max, sum and outputs in registers and scores
 * a tile's rows a lane each, as the kernel above; K rows are padded to hd + 1 floats so that 32 lanes
 * reading 32 rows hit 32 banks. Head dims up to 64 (MiniLM's 32, BERT-base's and MPNet's 64).
 */
#define PS_KT 64 /* key rows a tile */
#define PS_QW 8  /* queries a warp */
#define PS_WARPS 4

template <int NPL>
__global__ void __launch_bounds__(32 * PS_WARPS) attn_packed_smem_kernel(sg_cu_attn_packed a)
{
	extern __shared__ float ps_sm[];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int sq = blockIdx.x, h = blockIdx.y, hk = h / (int)(a.H / a.Hkv);
	const int hd = (int)a.hd, hdv = (int)a.hdv, ks = hd + 1;
	const int64_t j0 = a.offs[sq], j1 = a.offs[sq + 1], L = j1 - j0;
	float *kt = ps_sm, *vt = kt + PS_KT * ks, *qs = vt + PS_KT * hdv + warp * PS_QW * hd;
	int64_t base = 0;
	if (a.bias)
		for (int s2 = 0; s2 < sq; s2++) {
			const int64_t L2 = a.offs[s2 + 1] - a.offs[s2];
			base += L2 * a.H * L2;
		}
	for (int64_t q0 = j0; q0 < j1; q0 += PS_WARPS * PS_QW) {
		const int64_t qw = q0 + warp * PS_QW;
		for (int i = 0; i < PS_QW; i++) {
			const int64_t t = qw + i;
			if (t < j1)
				for (int e = lane; e < hd; e += 32) qs[i * hd + e] = a.q[(t * a.H + h) * a.hd + e];
		}
		float m[PS_QW], l[PS_QW], acc[PS_QW][NPL];
#pragma unroll
		for (int i = 0; i < PS_QW; i++) {
			m[i] = -FLT_MAX, l[i] = 0.0f;
#pragma unroll
			for (int k = 0; k < NPL; k++) acc[i][k] = 0.0f;
		}
		for (int64_t k0 = j0; k0 < j1; k0 += PS_KT) {
			const int nk = (int)(j1 - k0 < PS_KT ? j1 - k0 : PS_KT);
			__syncthreads(); /* the last tile's readers are done (and the queries are staged) */
			for (int idx = (int)threadIdx.x; idx < nk * hd; idx += 32 * PS_WARPS) {
				const int r = idx / hd, e = idx - r * hd;
				kt[r * ks + e] = a.k[((k0 + r) * a.Hkv + hk) * a.hd + e];
			}
			for (int idx = (int)threadIdx.x; idx < nk * hdv; idx += 32 * PS_WARPS) {
				const int r = idx / hdv, e = idx - r * hdv;
				vt[r * hdv + e] = a.v[((k0 + r) * a.Hkv + hk) * a.hdv + e];
			}
			__syncthreads();
#pragma unroll
			for (int i = 0; i < PS_QW; i++) {
				const int64_t t = qw + i;
				if (t >= j1) continue; /* warp-uniform */
				const float *qv = qs + i * hd;
				const float *brow = a.bias ? a.bias + base + ((t - j0) * a.H + h) * L - j0 : NULL;
				for (int c = 0; c < nk; c += 32) {
					const int r = c + lane, live = r < nk;
					float sc = -FLT_MAX;
					if (live) {
						const float *kr = kt + r * ks;
						float d = 0.0f;
						for (int e = 0; e < hd; e++) d += qv[e] * kr[e];
						sc = d * a.scale + (brow ? brow[k0 + r] : 0.0f);
					}
					float bm = sc;
#pragma unroll
					for (int o = 16; o > 0; o >>= 1) bm = fmaxf(bm, __shfl_xor_sync(0xffffffffu, bm, o));
					const float mn = fmaxf(m[i], bm), cf = expf(m[i] - mn), p = live ? expf(sc - mn) : 0.0f;
					float ps = p;
#pragma unroll
					for (int o = 16; o > 0; o >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, o);
					l[i] = l[i] * cf + ps;
#pragma unroll
					for (int k = 0; k < NPL; k++) acc[i][k] *= cf;
					const int nr = nk - c < 32 ? nk - c : 32;
					for (int rr = 0; rr < nr; rr++) {
						const float pr = __shfl_sync(0xffffffffu, p, rr);
						const float *vr = vt + (c + rr) * hdv;
#pragma unroll
						for (int k = 0; k < NPL; k++) {
							const int e = lane + 32 * k;
							if (e < hdv) acc[i][k] += pr * vr[e];
						}
					}
					m[i] = mn;
				}
			}
		}
#pragma unroll
		for (int i = 0; i < PS_QW; i++) {
			const int64_t t = qw + i;
			if (t >= j1) continue;
			float *out = a.out + (t * a.H + h) * a.hdv;
			const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
#pragma unroll
			for (int k = 0; k < NPL; k++) {
				const int e = lane + 32 * k;
				if (e < hdv) out[e] = acc[i][k] * inv;
			}
		}
	}
}

extern "C" int sg_cu_attention_packed(const sg_cu_attn_packed *a, sg_custream s)
{
	if (a->n <= 0) return 0;
	static int sms;
	if (!sms && !(sms = sg_cu_sm_count())) sms = 132;
	/* a block per (sequence, head) where there are enough of them to fill the GPU */
	if (a->smem && a->hd <= 64 && a->hdv <= 64 && (int64_t)a->n_seq * a->H >= 2 * (int64_t)sms && a->n_seq < (1 << 30) && a->H < 65536) {
		const size_t sb = sizeof(float) * ((size_t)PS_KT * (size_t)(a->hd + 1 + a->hdv) + (size_t)PS_WARPS * PS_QW * (size_t)a->hd);
		const dim3 g((unsigned)a->n_seq, (unsigned)a->H);
		if (a->hdv <= 32) attn_packed_smem_kernel<1><<<g, 32 * PS_WARPS, sb, (cudaStream_t)s>>>(*a);
		else attn_packed_smem_kernel<2><<<g, 32 * PS_WARPS, sb, (cudaStream_t)s>>>(*a);
		return ok();
	}
	int64_t pairs = a->n * a->H;
	const unsigned grid = (unsigned)((pairs + PK_WARPS - 1) / PK_WARPS);
	const size_t smem = sizeof(float) * PK_WARPS * (size_t)a->hd;
	const cudaStream_t st = (cudaStream_t)s;
	const int64_t w = (a->hdv + 31) / 32;
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
