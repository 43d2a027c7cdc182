/*
 * The CUDA backend's per-row and elementwise kernels: RMS and layer norms, the elementwise ops,
 * softmax, argmax and the sampling candidates (top-k of a logit row); and the decode chain's
 * launch mode (programmatic dependent launch) with the timeline of a CUDA_TRACE=1 build. Each
 * follows the CPU reference's arithmetic (same formulas, f32 unless the reference uses double).
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_reduce.cuh"

SG_CU_TRACE_FILE(norm)

/* --- norms --- */

__global__ void rmsnorm_kernel(const float *x, const float *w, float eps, float off, float *y, int64_t D)
{
	const float *xr = x + blockIdx.x * D;
	float *yr = y + blockIdx.x * D;
	pdl_trigger();
	pdl_wait();
	float sc = 1.0f / sqrtf(block_sumsq(xr, D) / (float)D + eps);
#pragma unroll 4
	for (int64_t i = threadIdx.x; i < D; i += blockDim.x)
		yr[i] = w ? xr[i] * sc * (w[i] + off) : xr[i] * sc;
}

extern "C" int sg_cu_rmsnorm(const float *x, const float *w, float eps, float off, float *y, int64_t rows, int64_t D, sg_custream s)
{
	if (rows <= 0) return 0;
	pdl_launch(rmsnorm_kernel, dim3((unsigned)rows), dim3(D >= 1024 ? 512 : 128), 0, (cudaStream_t)s, x,
	           w, eps, off, y, D);
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

__global__ void argmax_kernel(const float *x, int64_t D, int32_t *ids)
{
	const float *xr = x + blockIdx.x * D;
	float bv = -INFINITY;
	int bi = 0;
	for (int64_t i = threadIdx.x; i < D; i += blockDim.x) better(bv, bi, xr[i], (int)i);
	block_argmax(bv, bi);
	if (threadIdx.x == 0) ids[blockIdx.x] = bi;
}

/* Long rows in two passes: block b of row r takes a slice and leaves its (value, index); one
 * block per row then picks among them (same order rule, so the same winner as one pass). */
__global__ void argmax_part_kernel(const float *x, int64_t D, int64_t slice, float *pv, int32_t *pi)
{
	pdl_trigger();
	pdl_wait();
	const float *xr = x + blockIdx.y * D;
	int64_t a = blockIdx.x * slice, b = min(a + slice, D);
	float bv = -INFINITY;
	int bi = (int)a;
	for (int64_t i = a + threadIdx.x; i < b; i += blockDim.x) better(bv, bi, xr[i], (int)i);
	block_argmax(bv, bi);
	if (threadIdx.x == 0) pv[blockIdx.y * gridDim.x + blockIdx.x] = bv, pi[blockIdx.y * gridDim.x + blockIdx.x] = bi;
}

__global__ void argmax_final_kernel(const float *pv, const int32_t *pi, int np, int32_t *ids)
{
	pdl_trigger();
	pdl_wait();
	float bv = -INFINITY;
	int bi = pi[blockIdx.x * np];
	for (int i = threadIdx.x; i < np; i += blockDim.x) better(bv, bi, pv[blockIdx.x * np + i], pi[blockIdx.x * np + i]);
	block_argmax(bv, bi);
	if (threadIdx.x == 0) ids[blockIdx.x] = bi;
}

#define ARGMAX_SLICE 4096
extern "C" size_t sg_cu_argmax_scratch(int64_t rows, int64_t D) { return D > 2 * ARGMAX_SLICE ? (size_t)(rows * ((D + ARGMAX_SLICE - 1) / ARGMAX_SLICE)) * 8 : 0; }

extern "C" int sg_cu_argmax(const float *x, int64_t rows, int64_t D, int32_t *ids, void *scratch, sg_custream s)
{
	if (rows <= 0) return 0;
	cudaStream_t st = (cudaStream_t)s;
	if (!scratch || D <= 2 * ARGMAX_SLICE || rows > 65535) {
		argmax_kernel<<<(unsigned)rows, 256, 0, st>>>(x, D, ids);
		return ok();
	}
	int np = (int)((D + ARGMAX_SLICE - 1) / ARGMAX_SLICE);
	float *pv = (float *)scratch;
	int32_t *pi = (int32_t *)(pv + rows * np);
	pdl_launch(argmax_part_kernel, dim3((unsigned)np, (unsigned)rows), dim3(256), 0, st, x, D, (int64_t)ARGMAX_SLICE, pv, pi);
	pdl_launch(argmax_final_kernel, dim3((unsigned)rows), dim3(128), 0, st, (const float *)pv, (const int32_t *)pi, np, ids);
	return ok();
}

/* --- sampling candidates (top_candidates) --- */

/* A logit's rank key with its id: larger = better (higher value, then lower id), unique per id.
 * NaN ranks as -inf, +inf as FLT_MAX, -0 as 0, as the host sampler compares them. An empty slot
 * (id < 0) is 0, below every logit. */
static __device__ __forceinline__ unsigned long long tc_key(float v, int32_t id)
{
	if (id < 0) return 0ull;
	v = v != v ? -INFINITY : fminf(v, FLT_MAX);
	if (v == 0.0f) v = 0.0f;
	uint32_t u = __float_as_uint(v);
	u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
	return ((unsigned long long)u << 32) | (uint32_t)~(uint32_t)id;
}

#define TC_THREADS 1024
#define TC_CHUNK 8192

/* Block b selects the k best of its chunk of entries [b*chunk, min((b+1)*chunk, n)) (PAIRS: value
 * and id arrays; else x with ids = indices) into slots [b*k, b*k + k) of ov/oi, any order; slots
 * past a short chunk's size get id -1. Radix selection on the 64-bit keys, 8 bits a pass from the
 * top, until the boundary bucket is taken whole. Block 0 also gathers x at gather[0..m). */
template <bool PAIRS>
__global__ void __launch_bounds__(TC_THREADS) topc_kernel(const float *x, const int32_t *xid, int64_t n, int64_t chunk,
							   int k, float *ov, int32_t *oi, const int32_t *gather, int m,
							   float *gv)
{
	__shared__ unsigned hist[256];
	__shared__ int s_digit, s_need, s_done, s_cnt;
	pdl_trigger();
	pdl_wait();
	int tid = threadIdx.x, lane = tid & 31;
	if (!PAIRS && gather && blockIdx.x == 0)
		for (int i = tid; i < m; i += blockDim.x) {
			int32_t id = gather[i];
			gv[i] = id >= 0 && id < n ? x[id] : __int_as_float(0x7fc00000);
		}
	int64_t a = (int64_t)blockIdx.x * chunk, b = min(a + chunk, n);
	int cnt = (int)(b - a), kk = min(k, cnt), need = kk, bits = 0;
	unsigned long long pfx = 0;
	float *bo = ov + (int64_t)blockIdx.x * k;
	int32_t *bi = oi + (int64_t)blockIdx.x * k;
	for (int i = kk + tid; i < k; i += blockDim.x) bo[i] = -INFINITY, bi[i] = -1;
	if (tid == 0) s_cnt = 0;
	for (int sh = 56; kk < cnt && sh >= 0; sh -= 8) {
		for (int i = tid; i < 256; i += blockDim.x) hist[i] = 0;
		__syncthreads();
		/* every thread runs the same trips, so the warp votes with all lanes */
		for (int64_t i0 = a; i0 < b; i0 += blockDim.x) {
			int64_t i = i0 + tid;
			bool in = false;
			unsigned d = 0;
			if (i < b) {
				unsigned long long key = PAIRS ? tc_key(x[i], xid[i]) : tc_key(x[i], (int32_t)i);
				in = bits == 0 || (key >> (64 - bits)) == (pfx >> (64 - bits));
				d = (unsigned)(key >> sh) & 255u;
			}
			/* one atomic per distinct digit of the warp: the top digits of a row repeat a lot */
			unsigned act = __ballot_sync(0xffffffffu, in);
			if (in) {
				unsigned peers = __match_any_sync(act, d);
				if (lane == __ffs(peers) - 1) atomicAdd(&hist[d], (unsigned)__popc(peers));
			}
		}
		__syncthreads();
		if (tid < 32) {
			/* lane l holds bins 255-8l .. 248-8l, top down; find where the count from the top
			 * reaches need */
			unsigned c[8], tot = 0;
#pragma unroll
			for (int j = 0; j < 8; j++) c[j] = hist[255 - 8 * lane - j], tot += c[j];
			unsigned inc = tot;
#pragma unroll
			for (int o = 1; o < 32; o <<= 1) {
				unsigned v = __shfl_up_sync(0xffffffffu, inc, o);
				if (lane >= o) inc += v;
			}
			unsigned acc = inc - tot;
			if (acc < (unsigned)need && (unsigned)need <= inc)
				for (int j = 0; j < 8; j++) {
					if (acc + c[j] >= (unsigned)need) {
						s_digit = 255 - 8 * lane - j;
						s_need = need - (int)acc;
						s_done = c[j] == (unsigned)(need - (int)acc);
						break;
					}
					acc += c[j];
				}
		}
		__syncthreads();
		pfx |= (unsigned long long)s_digit << sh;
		bits += 8;
		need = s_need;
		if (s_done) break;
		__syncthreads();
	}
	__syncthreads();
	for (int64_t i = a + tid; i < b; i += blockDim.x) {
		float v = x[i];
		int32_t id = PAIRS ? xid[i] : (int32_t)i;
		unsigned long long key = tc_key(v, id);
		if (kk == cnt ? id >= 0 : (key >> (64 - bits)) >= (pfx >> (64 - bits))) {
			int at = atomicAdd(&s_cnt, 1);
			bo[at] = v, bi[at] = id;
		}
	}
}

extern "C" size_t sg_cu_topc_scratch(int64_t V, int k)
{
	int64_t nb = (V + TC_CHUNK - 1) / TC_CHUNK;
	return nb > 1 ? (size_t)(nb * k) * 8 : 0;
}

extern "C" int sg_cu_topc(const float *x, int64_t V, int k, const int32_t *gather, int m, int32_t *out, void *scratch,
			  sg_custream s)
{
	cudaStream_t st = (cudaStream_t)s;
	int64_t nb = (V + TC_CHUNK - 1) / TC_CHUNK;
	if (k < 1 || k > V || (nb > 1 && !scratch)) return (int)cudaErrorInvalidValue;
	int32_t *oid = out;
	float *ov = (float *)(out + k), *gv = (float *)(out + 2 * k);
	if (nb == 1) {
		pdl_launch(topc_kernel<false>, dim3(1), dim3(TC_THREADS), 0, st, x, (const int32_t *)NULL, V, V, k, ov, oid, gather, m, gv);
		return ok();
	}
	float *sv = (float *)scratch;
	int32_t *si = (int32_t *)(sv + nb * k);
	pdl_launch(topc_kernel<false>, dim3((unsigned)nb), dim3(TC_THREADS), 0, st, x, (const int32_t *)NULL, V, (int64_t)TC_CHUNK, k, sv, si, gather, m, gv);
	pdl_launch(topc_kernel<true>, dim3(1), dim3(TC_THREADS), 0, st, (const float *)sv, (const int32_t *)si, nb * k, nb * k, k, ov, oid, (const int32_t *)NULL, 0, (float *)NULL);
	return ok();
}

#if defined(SG_CU_TRACE) && SG_CU_TRACE
/* The timeline build's host half: the device table, and the PDL launches recorded into graphs
 * (the replays' order), each with its kernel's name and the capture it belongs to. */
struct trace_launch {
	const char *name;
	unsigned grid, block;
	unsigned long long capture;
};
static sg_cu_trec *g_trace;
static unsigned *g_trace_n;
static trace_launch *g_tl;
static size_t g_ntl, g_captl;

static void trace_init(void)
{
	if (g_trace) return;
	if (cudaMalloc(&g_trace, (size_t)SG_CU_TRACE_CAP * sizeof *g_trace) != cudaSuccess || cudaMalloc(&g_trace_n, sizeof *g_trace_n) != cudaSuccess ||
	    cudaMemset(g_trace_n, 0, sizeof *g_trace_n) != cudaSuccess || sg_cu_trace_bind_norm(g_trace, g_trace_n) ||
	    sg_cu_trace_bind_gemv(g_trace, g_trace_n) || sg_cu_trace_bind_moe(g_trace, g_trace_n) || sg_cu_trace_bind_attn(g_trace, g_trace_n)) {
		fprintf(stderr, "saragossa: CUDA trace: no device table (%s)\n", cudaGetErrorString(cudaGetLastError()));
		g_trace = NULL;
	}
}

void sg_cu_trace_launch(const void *k, unsigned grid, unsigned block, cudaStream_t st)
{
	cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
	unsigned long long id = 0;
	if (cudaStreamGetCaptureInfo(st, &cs, &id) != cudaSuccess || cs != cudaStreamCaptureStatusActive) return;
	if (g_ntl == g_captl) {
		size_t c = g_captl ? 2 * g_captl : 4096;
		trace_launch *t = (trace_launch *)realloc(g_tl, c * sizeof *t);
		if (!t) return;
		g_tl = t, g_captl = c;
	}
	const char *name = "?";
	if (cudaFuncGetName(&name, k) != cudaSuccess) name = "?";
	g_tl[g_ntl++] = {name, grid, block, id};
}

/* "L capture grid block name" per recorded launch, then "W t0 t1 grid block bid smid" per wait */
extern "C" int sg_cu_trace_dump(const char *path)
{
	if (!path || !*path || !g_trace) return 0;
	unsigned n = 0;
	if (cudaDeviceSynchronize() != cudaSuccess || cudaMemcpy(&n, g_trace_n, sizeof n, cudaMemcpyDeviceToHost) != cudaSuccess) return -1;
	if (n > SG_CU_TRACE_CAP) n = SG_CU_TRACE_CAP;
	sg_cu_trec *r = (sg_cu_trec *)malloc((size_t)n * sizeof *r + 1);
	FILE *f = fopen(path, "w");
	int rc = r && f && cudaMemcpy(r, g_trace, (size_t)n * sizeof *r, cudaMemcpyDeviceToHost) == cudaSuccess ? 0 : -1;
	for (size_t i = 0; !rc && i < g_ntl; i++) fprintf(f, "L %llu %u %u %s\n", g_tl[i].capture, g_tl[i].grid, g_tl[i].block, g_tl[i].name);
	for (unsigned i = 0; !rc && i < n; i++) fprintf(f, "W %llu %llu %u %u %u %u\n", r[i].t0, r[i].t1, r[i].grid, r[i].block, r[i].bid, r[i].smid);
	if (f && fclose(f)) rc = -1;
	free(r);
	if (rc) fprintf(stderr, "saragossa: CUDA trace: cannot write %s\n", path);
	return rc;
}
#else
extern "C" int sg_cu_trace_dump(const char *path) { return (void)path, 0; }
#endif

extern "C" void sg_cu_trace_start(void)
{
#if defined(SG_CU_TRACE) && SG_CU_TRACE
	trace_init();
#endif
}
