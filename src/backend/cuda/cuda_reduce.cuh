/* Warp and block reductions (sum, max) shared by the CUDA kernel files. The reduction tree is part of the
 * numerics: kernels that must give the bits of another (the fused norm-quantize kernel and the
 * rmsnorm kernel) use these same functions at the same block size. */
#ifndef SG_BACKEND_CUDA_REDUCE_CUH
#define SG_BACKEND_CUDA_REDUCE_CUH

#include <math.h>
#include <stdint.h>

struct add_op {
	template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct max_op {
	__device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <typename T, typename Op> static __device__ __forceinline__ T warp_reduce(T v, Op op)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/* Over the block (blockDim a multiple of 32, at most 1024): lanes reduce, then warp 0 reduces
 * the warps' values (id stands for the missing ones); every thread gets the result. */
template <typename T, typename Op> static __device__ T block_reduce(T v, Op op, T id)
{
	__shared__ T sh[32];
	__shared__ T res;
	v = warp_reduce(v, op);
	int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = blockDim.x >> 5;
	__syncthreads();
	if (l == 0) sh[w] = v;
	__syncthreads();
	if (w == 0) {
		T s = l < nw ? sh[l] : id;
		s = warp_reduce(s, op);
		if (l == 0) res = s;
	}
	__syncthreads();
	return res;
}

template <typename T> static __device__ __forceinline__ T warp_sum(T v) { return warp_reduce(v, add_op()); }
template <typename T> static __device__ T block_sum(T v) { return block_reduce(v, add_op(), (T)0); }
static __device__ __forceinline__ float warp_max(float v) { return warp_reduce(v, max_op()); }
static __device__ float block_max(float v) { return block_reduce(v, max_op(), -INFINITY); }

/* The sum of squares of x [0, K) over the block: 16-byte loads, four in flight a thread (a
 * strided scalar loop waits out one load latency per element a thread: ~4 us for 4096 values
 * at 512 threads). Kernels whose norms must agree bit for bit call it at the same block size. */
static __device__ float block_sumsq(const float *x, int64_t K)
{
	float ss = 0.0f;
	if (K % 4 == 0 && ((uintptr_t)x & 15) == 0) {
		const float4 *x4 = (const float4 *)x;
		int64_t K4 = K / 4;
#pragma unroll 4
		for (int64_t i = threadIdx.x; i < K4; i += blockDim.x) {
			float4 v = x4[i];
			ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
		}
	} else {
#pragma unroll 4
		for (int64_t i = threadIdx.x; i < K; i += blockDim.x) ss += x[i] * x[i];
	}
	return block_sum(ss);
}

/* (value, index) argmax with ties to the lower index; NaN never wins. */
static __device__ __forceinline__ void better(float &bv, int &bi, float v, int i)
{
	if (v > bv || (v == bv && i < bi)) bv = v, bi = i;
}

/* (value, index) argmax over the warp; every lane gets it. */
static __device__ __forceinline__ void warp_argmax(float &bv, int &bi)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) {
		float v = __shfl_xor_sync(0xffffffffu, bv, o);
		int i = __shfl_xor_sync(0xffffffffu, bi, o);
		better(bv, bi, v, i);
	}
}

static __device__ void block_argmax(float &bv, int &bi)
{
	__shared__ float sv[32];
	__shared__ int si[32];
	warp_argmax(bv, bi);
	int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = blockDim.x >> 5;
	__syncthreads();
	if (l == 0) sv[w] = bv, si[w] = bi;
	__syncthreads();
	bv = sv[0], bi = si[0];
	for (int k = 1; k < nw; k++) better(bv, bi, sv[k], si[k]);
	__syncthreads();
}

#endif
