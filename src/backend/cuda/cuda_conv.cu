/*
 * The audio codec's ops on the GPU (Qwen3-TTS's decoder): the gathers that turn a 1-D convolution
 * into a GEMM (im2col rows; a transposed convolution's phases written back interleaved), a
 * grouped (depthwise) convolution computed directly, SnakeBeta and the exact GELU. The GEMMs
 * themselves are the backend's matmul (cuda_backend.c). Same formulas as the CPU ops
 * (cpu_conv.c, cpu_ops.c); the differential tests hold them to f32 rounding.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_pdl.cuh"

#define CONV_BLOCK 256

/* out[t][k*C + c] = x[t*stride + k*dil - pad][c], 0 outside [0, T) (dil may be negative: a
 * transposed convolution's rows read x[t - k]). */
__global__ void im2col_kernel(const float *x, int64_t T, int64_t C, int64_t Tout, int K, int stride, int dil, int pad,
			      float *out)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, n = Tout * K * C;
	if (i >= n) return;
	int64_t c = i % C, k = (i / C) % K, t = i / (C * K);
	int64_t s = t * stride + k * dil - pad;
	out[i] = s >= 0 && s < T ? x[s * C + c] : 0.0f;
}

extern "C" int sg_cu_im2col(const float *x, int64_t T, int64_t C, int64_t Tout, int K, int stride, int dil, int pad,
			    float *out, sg_custream s)
{
	int64_t n = Tout * K * C;
	if (n <= 0) return 0;
	im2col_kernel<<<(unsigned)((n + CONV_BLOCK - 1) / CONV_BLOCK), CONV_BLOCK, 0, (cudaStream_t)s>>>(x, T, C, Tout, K, stride,
												  dil, pad, out);
	return ok();
}

/* y[j*stride + p][co] = src[j][co] for the rows below Tout: one phase of a transposed conv. */
__global__ void phase_rows_kernel(const float *src, int64_t J, int64_t C, int stride, int p, int64_t Tout, float *y)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= J * C) return;
	int64_t j = i / C, c = i % C, t = j * stride + p;
	if (t < Tout) y[t * C + c] = src[i];
}

extern "C" int sg_cu_phase_rows(const float *src, int64_t J, int64_t C, int stride, int p, int64_t Tout, float *y,
				sg_custream s)
{
	if (J * C <= 0) return 0;
	phase_rows_kernel<<<(unsigned)((J * C + CONV_BLOCK - 1) / CONV_BLOCK), CONV_BLOCK, 0, (cudaStream_t)s>>>(src, J, C, stride,
													    p, Tout, y);
	return ok();
}

/* A grouped convolution directly, a thread per output: y[t][co] = bias[co] + sum over k, ci of
 * w[co][k][ci] * x[t*stride + k*dil - pad][g*Cg + ci] (g = co's group, Cg = Cin / groups). */
__global__ void conv_grouped_kernel(sg_cu_conv a)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= a.Tout * a.Cout) return;
	int64_t co = i % a.Cout, t = i / a.Cout;
	int64_t Cg = a.Cin / a.groups, g = co / (a.Cout / a.groups);
	const float *w = a.w + co * a.K * Cg;
	float acc = a.bias ? a.bias[co] : 0.0f;
	for (int k = 0; k < a.K; k++) {
		int64_t s = t * a.stride + (int64_t)k * a.dil - a.pad;
		if (s < 0 || s >= a.T) continue;
		const float *xr = a.x + s * a.Cin + g * Cg;
		for (int64_t c = 0; c < Cg; c++) acc += w[k * Cg + c] * xr[c];
	}
	a.y[i] = acc;
}

extern "C" int sg_cu_conv_grouped(const sg_cu_conv *a, sg_custream s)
{
	int64_t n = a->Tout * a->Cout;
	if (n <= 0) return 0;
	conv_grouped_kernel<<<(unsigned)((n + CONV_BLOCK - 1) / CONV_BLOCK), CONV_BLOCK, 0, (cudaStream_t)s>>>(*a);
	return ok();
}

/* A transposed convolution directly, a thread per output: row t = j*stride + p is bias + sum over
 * m < M, ci of w[p][co][m][ci] * x[j - m][ci] (w [stride][Cout][M][Cin]). */
__global__ void convt_direct_kernel(sg_cu_conv a)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= a.Tout * a.Cout) return;
	int64_t co = i % a.Cout, t = i / a.Cout, j = t / a.stride, p = t % a.stride;
	const float *w = a.w + (p * a.Cout + co) * a.K * a.Cin;
	float acc = a.bias ? a.bias[co] : 0.0f;
	for (int m = 0; m < a.K; m++) {
		int64_t s = j - m;
		if (s < 0 || s >= a.T) continue;
		const float *xr = a.x + s * a.Cin;
		for (int64_t c = 0; c < a.Cin; c++) acc += w[m * a.Cin + c] * xr[c];
	}
	a.y[i] = acc;
}

extern "C" int sg_cu_convt_direct(const sg_cu_conv *a, sg_custream s)
{
	int64_t n = a->Tout * a->Cout;
	if (n <= 0) return 0;
	convt_direct_kernel<<<(unsigned)((n + CONV_BLOCK - 1) / CONV_BLOCK), CONV_BLOCK, 0, (cudaStream_t)s>>>(*a);
	return ok();
}

/* SnakeBeta: y = x + sin(x a[c])^2 / (b[c] + 1e-9), c the channel (rows of C). */
__global__ void snake_kernel(const float *x, const float *sa, const float *sb, int64_t n, int64_t C, float *y)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n) return;
	int64_t c = i % C;
	float v = x[i], sn = sinf(v * sa[c]);
	y[i] = v + sn * sn / (sb[c] + 1e-9f);
}

extern "C" int sg_cu_snake(const float *x, const float *a, const float *b, int64_t n, int64_t C, float *y, sg_custream s)
{
	if (n <= 0) return 0;
	snake_kernel<<<(unsigned)((n + CONV_BLOCK - 1) / CONV_BLOCK), CONV_BLOCK, 0, (cudaStream_t)s>>>(x, a, b, n, C, y);
	return ok();
}

/* The exact GELU: x (1 + erf(x / sqrt 2)) / 2. */
__global__ void gelu_erf_kernel(const float *x, int64_t n, float *y)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n) return;
	float v = x[i];
	y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

extern "C" int sg_cu_gelu_erf(const float *x, int64_t n, float *y, sg_custream s)
{
	if (n <= 0) return 0;
	gelu_erf_kernel<<<(unsigned)((n + CONV_BLOCK - 1) / CONV_BLOCK), CONV_BLOCK, 0, (cudaStream_t)s>>>(x, n, y);
	return ok();
}
