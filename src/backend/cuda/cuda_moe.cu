/*
 * Mixture-of-experts kernels of the CUDA backend: the routing (top-k of the router's logits, by one
 * warp or a block), the expert GEMVs (one token: each slot's expert
 * straight from the routing ids, moe1_kernel or the block-per-lane moes_kernel; several tokens:
 * the slots sorted by expert and the grouped GEMV of cuda_gemv.cu) and the weighted combine.
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cuda/cuda_gemv.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_policy.h"
#include "backend/cuda/cuda_q8.cuh"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/cuda_sb.cuh"

SG_CU_TRACE_FILE(moe)

#define MAX_EXPERTS 1024
__global__ void route_kernel(const float *logits, int64_t E, int sigmoid, int k, int norm, int32_t *ids, float *wout)
{
	__shared__ float p[MAX_EXPERTS];
	pdl_trigger();
	pdl_wait();
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

/*
 * route_kernel for E <= 256 experts as one warp with the probabilities in registers (expert
 * 32 i + lane in p[i], NaN past E): the k picks are shuffles alone, no shared memory or
 * barriers. The same bits as route_kernel at 32 threads: each lane sums its experts in the same
 * order, the warp reduces them in the same tree, ties go to the lower index. One token's k ids
 * and weights into ids [k], wout [k].
 */
#define ROUTE_PER 8
static __device__ __forceinline__ void route_warp(float (&p)[ROUTE_PER], int64_t E, int sigmoid, int k, int norm, int32_t *ids, float *wout)
{
	const int lane = threadIdx.x & 31;
	if (sigmoid) {
#pragma unroll
		for (int i = 0; i < ROUTE_PER; i++)
			if (32 * i + lane < E) p[i] = 1.0f / (1.0f + expf(-p[i]));
	} else {
		float m = -INFINITY;
#pragma unroll
		for (int i = 0; i < ROUTE_PER; i++)
			if (32 * i + lane < E) m = fmaxf(m, p[i]);
		m = warp_max(m);
		double sum = 0;
#pragma unroll
		for (int i = 0; i < ROUTE_PER; i++)
			if (32 * i + lane < E) {
				p[i] = expf(p[i] - m);
				sum += p[i];
			}
		float inv = (float)(1.0 / warp_sum(sum));
#pragma unroll
		for (int i = 0; i < ROUTE_PER; i++) p[i] *= inv; /* NaN stays NaN: never picked */
	}
	float wsum = 0.0f;
	for (int s = 0; s < k; s++) {
		float bv = -INFINITY;
		int bi = 0x7fffffff;
#pragma unroll
		for (int i = 0; i < ROUTE_PER; i++)
			if (p[i] == p[i]) better(bv, bi, p[i], 32 * i + lane);
		warp_argmax(bv, bi);
		/* all taken or NaN: route_kernel's expert 0 */
		if (bi == 0x7fffffff) bi = 0, bv = __shfl_sync(0xffffffffu, p[0], 0);
#pragma unroll
		for (int i = 0; i < ROUTE_PER; i++)
			if (32 * i + lane == bi) p[i] = NAN; /* taken */
		if (lane == 0) {
			ids[s] = bi;
			wout[s] = bv;
		}
		wsum += bv;
	}
	if (lane == 0 && norm && wsum > 0)
		for (int s = 0; s < k; s++) wout[s] /= wsum;
}

__global__ void __launch_bounds__(32)
    route_warp_kernel(const float *logits, int64_t E, int sigmoid, int k, int norm, int32_t *ids, float *wout)
{
	pdl_trigger();
	pdl_wait();
	int lane = threadIdx.x;
	const float *x = logits + blockIdx.x * E;
	float p[ROUTE_PER];
#pragma unroll
	for (int i = 0; i < ROUTE_PER; i++) p[i] = 32 * i + lane < E ? x[32 * i + lane] : NAN;
	route_warp(p, E, sigmoid, k, norm, ids + blockIdx.x * k, wout + blockIdx.x * k);
}

extern "C" int sg_cu_moe_route(const float *logits, int64_t n, int64_t E, int sigmoid, int k, int norm,
                               int32_t *ids, float *w, sg_custream s)
{
	if (n <= 0) return 0;
	if (E > MAX_EXPERTS) return (int)cudaErrorInvalidValue;
	/* the one-warp kernel for up to 256 experts (SARAGOSSA_CUDA_ROUTE_WARP=0: route_kernel for every count) */
	if (E <= 32 * ROUTE_PER && sg_cu_policy_now()->moe.route_warp) {
		pdl_launch(route_warp_kernel, dim3((unsigned)n), dim3(32), 0, (cudaStream_t)s, logits, E,
		           sigmoid, k, norm, ids, w);
		return ok();
	}
	/* one warp for the usual expert counts: its k picks then need no cross-warp barrier work */
	pdl_launch(route_kernel, dim3((unsigned)n), dim3(E <= 256 ? 32 : 256), 0, (cudaStream_t)s, logits, E, sigmoid, k, norm, ids, w);
	return ok();
}

/* Thread b of row blockIdx.y: block b's fields to their runs (see sg_cu_fields). */
__global__ void repack_rows_kernel(const uint8_t *src, size_t src_rb, int64_t nb, sg_cu_fields f, uint8_t *dst, size_t dst_rb)
{
	const uint8_t *s = src + (size_t)blockIdx.y * src_rb;
	uint8_t *d = dst + (size_t)blockIdx.y * dst_rb;
	for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < nb; b += (int64_t)gridDim.x * blockDim.x) {
		size_t pos = 0;
		for (int i = 0; i < f.nf; i++) {
			const int pieces = f.planes[i] ? f.bytes[i] / 16 : 1, pb = f.planes[i] ? 16 : f.bytes[i];
			for (int p = 0; p < pieces; p++) {
				uint8_t *o = d + pos + ((size_t)p * (size_t)nb + (size_t)b) * (size_t)pb;
				const uint8_t *in = s + (size_t)b * (size_t)f.block_bytes + (size_t)f.off[i] + (size_t)p * 16;
				for (int j = 0; j < pb; j++) o[j] = in[j];
			}
			pos += (size_t)f.bytes[i] * (size_t)nb;
		}
	}
}

extern "C" int sg_cu_repack_rows(const uint8_t *src, size_t src_rb, int64_t rows, int64_t nb, sg_cu_fields f, uint8_t *dst, size_t dst_rb,
				 sg_custream s)
{
	if (rows < 1 || nb < 1 || rows > 65535) return (int)cudaErrorInvalidValue;
	/* the rows' padding past their fields reads as zeros, as a bound stack's does */
	int e = (int)cudaMemsetAsync(dst, 0, dst_rb * (size_t)rows, (cudaStream_t)s);
	if (e) return e;
	unsigned gx = (unsigned)((nb + 127) / 128);
	repack_rows_kernel<<<dim3(gx, (unsigned)rows), 128, 0, (cudaStream_t)s>>>(src, src_rb, nb, f, dst, dst_rb);
	return (int)cudaGetLastError();
}

__global__ void slot_ids_kernel(const int32_t *ids, int64_t n, const int32_t *slot, int64_t E, int32_t *out)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n) return;
	int32_t e = ids[i];
	out[i] = e >= 0 && e < E ? slot[e] : -1;
}

extern "C" int sg_cu_moe_slot_ids(const int32_t *ids, int64_t n, const int32_t *slot, int64_t E, int32_t *out, sg_custream s)
{
	if (n > 0) slot_ids_kernel<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)s>>>(ids, n, slot, E, out);
	return (int)cudaGetLastError();
}

/* Block (b, t): dims [256 b, 256 b + 256) of token t, its k slots summed in slot order. */
/* out = res + sum_s w_s y_s (res NULL: the sum alone); the sum first, then one add, as the
 * combine and add kernels would do it. out may alias res (each element one thread's). */
__global__ void combine_kernel(const float *y, const float *w, int64_t k, int64_t D, const float *res, float *out)
{
	int64_t t = blockIdx.y, d = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	pdl_trigger();
	pdl_wait();
	if (d >= D) return;
	float acc = 0.0f;
#pragma unroll 8
	for (int64_t s = 0; s < k; s++)
		acc += w[t * k + s] * y[(t * k + s) * D + d]; /* the loads in flight together */
	out[t * D + d] = res ? res[t * D + d] + acc : acc;
}

extern "C" int sg_cu_moe_combine(const float *y, const float *w, int64_t n, int64_t k, int64_t D, const float *res, float *out, sg_custream s)
{
	if (n <= 0) return 0;
	if (n > 65535) return (int)cudaErrorInvalidValue;
	pdl_launch(combine_kernel, dim3((unsigned)((D + 255) / 256), (unsigned)n), dim3(256), 0, (cudaStream_t)s, y, w, k, D, res, out);
	return ok();
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

/*
 * One token's expert matmul of the planar K-quants (SARAGOSSA_CUDA_GEMV_SB): cuda_gemv.cu's mvs_kernel layout
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
 * caller takes moe1_kernel): the policy's block-per-lane GEMV on, a format and K it takes. */
static int moes_launch(const sg_cuw *w, const sg_cuw *w2, const int8_t *xq, const float *dx, const float *sx, int shared_x, const int32_t *ids,
		       int64_t k, int64_t E, float *y, int64_t N, int act, int idm, cudaStream_t st)
{
	const sg_cu_policy *pol = sg_cu_policy_now();
	int64_t K = w->K, nb = K / 256;
	if (!pol->gemv.block_per_lane || !sg_cu_sb_ok(w) || stage_bytes(K) > SMEM_X_MAX || (w2 && sb_kind(w2) != sb_kind(w))) return -1;
	int lpr = sb_lanes(nb), per = QT / lpr / (w2 ? 2 : 1);
	sg_cuw none;
	memset(&none, 0, sizeof(none));
	pdl_launch(pick_moes(sb_kind(w), lpr, nb), dim3((unsigned)((N + per - 1) / per), (unsigned)k), dim3(QT), stage_bytes(K), st, *w, xq, dx,
		   sx, shared_x, ids, E, y, N, w2 ? *w2 : none, act, pol->gemv.xstage, idm);
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

extern "C" int sg_cu_moe_glu_ok(const sg_cuw *wg, const sg_cuw *wu)
{
	return sg_cu_policy_now()->moe.decode && sg_cu_has_q8(wg->kt) && pick_moe1(wg->kt) && wg->kt == wu->kt && wg->K == wu->K && wg->group == wu->group &&
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
		int e = sg_cu_quant_x(x, 1, wg->K, q8_scratch, &xq, &dx, &sx, st);
		if (e) return e;
	} else {
		sg_cu_q8_split(q8_scratch, wg->K, &xq, &dx, &sx); /* rounded by the producer */
	}
	const int early = sg_cu_policy_now()->moe.ids_early;
	int sb = moes_launch(wg, wu, xq, dx, sx, 1, ids, k, E, g, N, act, early ? MOES_TRIGGER_LATE : 0, st);
	if (sb >= 0) {
		if (ids_done) *ids_done = early && sb == 0;
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
	const sg_cu_policy *pol = sg_cu_policy_now();
	moe1_fn f1 = n == 1 && pol->moe.decode && q8_scratch && sg_cu_has_q8(w->kt) ? pick_moe1(w->kt) : NULL;
	if (f1) {
		int8_t *xq;
		float *dx, *sx;
		int e = sg_cu_quant_x(x, shared_x ? 1 : S, w->K, q8_scratch, &xq, &dx, &sx, st);
		if (e) return e;
		int sb = moes_launch(w, NULL, xq, dx, sx, (int)shared_x, ids, S, E, y, N, 0, ids_ready && pol->moe.ids_early ? MOES_IDS_EARLY : 0, st);
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
	return sg_cu_gemv_grouped(w, x, shared_x ? n : S, S, n, k, E, y, N, start, order, used, nused, (int)shared_x, q8_scratch, st);
}
