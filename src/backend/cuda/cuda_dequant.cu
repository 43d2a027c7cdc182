/*
 * Weight and activation conversions of the CUDA backend: the dequantizer that feeds the cuBLAS
 * prefill GEMMs (rows, or the used experts' rows, to f32, bf16 or f16), the embedding gather, the
 * rounding of activations to 8-bit blocks as the GEMV kernels see them (in f32, or in f16 with a
 * power-of-two scale a row), the GEMM outputs' row scaling, f32 <-> f16/bf16 and the TF32 split.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_q8.cuh"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/cuda_units.cuh"

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
	/* experts (w.expert_bytes set) may lie further apart than their rows: device slots */
	const uint8_t *row = ids && w.expert_bytes ? w.data + (size_t)ids[t / rper] * w.expert_bytes + (size_t)(t % rper) * w.row_bytes
						   : w.data + (size_t)r * w.row_bytes;
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

/* v rounded to the nearest TF32 value (the low 13 bits are not part of one): tf32x3's hi part, v - hi its lo */
static __device__ __forceinline__ float tf32_hi(float v)
{
	uint32_t u;
	asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(v));
	return __uint_as_float(u & 0xffffe000u);
}

__global__ void split_tf32_kernel(const float *x, int64_t n, float *hi, float *lo)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
		const float v = x[i], h = tf32_hi(v);
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

/* One row of a one-product tf32x3 GEMM (sg_cu_split3_tf32): three TF32 copies of the row's K values
 * (each of Kp = K rounded up to 4, zero-padded), in the order that lines up the three products, then a
 * tail: the bias's hi and lo parts on a weight row, two ones on an activation row (or zeros). A thread
 * takes 4 values of the row (one 16-byte load where the row allows) and writes their three copies as
 * 16-byte stores, or one value of the tail: no division by Kp per value (the form before ran at a
 * third of the copy bandwidth), the same values. */
__global__ void split3_tf32_kernel(const float *__restrict__ x, int64_t rows, int64_t K, int64_t ld, int wside,
				   const float *__restrict__ bias, int ones, int64_t K3, float *__restrict__ out)
{
	const int64_t Kp = (K + 3) & ~(int64_t)3, nq = Kp / 4, n = nq + (K3 - 3 * Kp);
	for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
		const float *xr = x + r * ld;
		float *o = out + r * K3;
		const int vec = K % 4 == 0 && ((uintptr_t)xr & 15) == 0;
		for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q < n; q += (int64_t)gridDim.x * blockDim.x) {
			if (q < nq) {
				float f[4], h[4], l[4];
				if (vec) {
					const float4 v = *(const float4 *)(xr + 4 * q);
					f[0] = v.x, f[1] = v.y, f[2] = v.z, f[3] = v.w;
				} else {
#pragma unroll
					for (int i = 0; i < 4; i++) f[i] = 4 * q + i < K ? xr[4 * q + i] : 0.0f;
				}
#pragma unroll
				for (int i = 0; i < 4; i++) h[i] = tf32_hi(f[i]), l[i] = f[i] - h[i];
				const float4 H = make_float4(h[0], h[1], h[2], h[3]), L = make_float4(l[0], l[1], l[2], l[3]);
				/* weights hi, hi, lo; activations hi, lo, hi */
				*(float4 *)(o + 4 * q) = H;
				*(float4 *)(o + Kp + 4 * q) = wside ? H : L;
				*(float4 *)(o + 2 * Kp + 4 * q) = wside ? L : H;
			} else {
				const int64_t e = q - nq;
				float v = 0.0f;
				if (e < 2) {
					if (bias) {
						const float f = bias[r], h = tf32_hi(f);
						v = e ? f - h : h;
					} else {
						v = ones ? 1.0f : 0.0f;
					}
				}
				o[3 * Kp + e] = v;
			}
		}
	}
}

extern "C" int sg_cu_split3_tf32(const float *x, int64_t rows, int64_t K, int64_t ld, int wside, const float *bias, int ones,
				 int64_t K3, float *out, sg_custream s)
{
	if (rows <= 0) return 0;
	const int64_t Kp = (K + 3) & ~(int64_t)3, bx = (Kp / 4 + (K3 - 3 * Kp) + 127) / 128;
	dim3 grid((unsigned)(bx < 64 ? bx : 64), (unsigned)(rows < 65535 ? rows : 65535));
	split3_tf32_kernel<<<grid, 128, 0, (cudaStream_t)s>>>(x, rows, K, ld, wside, bias, ones, K3, out);
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

__global__ void f16_to_f32_kernel(const __half *x, int64_t n, float *out)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) out[i] = __half2float(x[i]);
}

extern "C" int sg_cu_f16_to_f32(const void *x, int64_t n, float *out, sg_custream s)
{
	if (n <= 0) return 0;
	f16_to_f32_kernel<<<grid_for(n, 256), 256, 0, (cudaStream_t)s>>>((const __half *)x, n, out);
	return ok();
}
