/*
 * Attention of a packed batch of independent sequences (an encoder's batch of inputs): one warp
 * per (token, head) walks its own sequence's K/V rows with an online softmax, so a batch of any
 * number of sequences is one launch. Same formulas as the CPU reference (f32, scaled dot, running
 * max and sum), summed in another order: the differential test holds it to 1e-5. An additive bias
 * (MPNet's relative positions) is each sequence's [L][H][L] block, one after another.
 */
#include <cuda_runtime.h>
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_pdl.cuh"

#define PK_WARPS 4                /* warps (token, head pairs) per block */
#define PK_PER_LANE (SG_CU_MAX_HD / 32) /* head-dim elements a lane holds */

__global__ void __launch_bounds__(32 * PK_WARPS) attn_packed_kernel(sg_cu_attn_packed a)
{
	int lane = threadIdx.x & 31;
	int64_t pair = (int64_t)blockIdx.x * PK_WARPS + (threadIdx.x >> 5);
	if (pair >= a.n * a.H) return;
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
	const float *q = a.q + (t * a.H + h) * a.hd;
	float qv[PK_PER_LANE], acc[PK_PER_LANE];
#pragma unroll
	for (int i = 0; i < PK_PER_LANE; i++) {
		int e = lane + 32 * i;
		qv[i] = e < a.hd ? q[e] : 0.0f;
		acc[i] = 0.0f;
	}
	float m = -FLT_MAX, l = 0.0f;
	for (int64_t j = j0; j < j1; j++) {
		const float *k = a.k + (j * a.Hkv + hk) * a.hd, *v = a.v + (j * a.Hkv + hk) * a.hdv;
		float d = 0.0f;
#pragma unroll
		for (int i = 0; i < PK_PER_LANE; i++) {
			int e = lane + 32 * i;
			if (e < a.hd) d += qv[i] * k[e];
		}
#pragma unroll
		for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
		float s = d * a.scale + (bias ? bias[j] : 0.0f), mn = fmaxf(m, s), c = expf(m - mn), p = expf(s - mn);
		l = l * c + p;
#pragma unroll
		for (int i = 0; i < PK_PER_LANE; i++) {
			int e = lane + 32 * i;
			acc[i] = acc[i] * c + (e < a.hdv ? p * v[e] : 0.0f);
		}
		m = mn;
	}
	float *out = a.out + (t * a.H + h) * a.hdv;
	float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
	for (int i = 0; i < PK_PER_LANE; i++) {
		int e = lane + 32 * i;
		if (e < a.hdv) out[e] = acc[i] * inv;
	}
}

extern "C" int sg_cu_attention_packed(const sg_cu_attn_packed *a, sg_custream s)
{
	if (a->n <= 0) return 0;
	int64_t pairs = a->n * a->H;
	attn_packed_kernel<<<(unsigned)((pairs + PK_WARPS - 1) / PK_WARPS), 32 * PK_WARPS, 0, (cudaStream_t)s>>>(*a);
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
