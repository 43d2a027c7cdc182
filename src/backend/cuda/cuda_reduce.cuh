/* Warp and block sums shared by the CUDA kernel files. The reduction tree is part of the
 * numerics: kernels that must give the bits of another (the fused norm-quantize kernel and the
 * rmsnorm kernel) use these same functions at the same block size. */
#ifndef SG_BACKEND_CUDA_REDUCE_CUH
#define SG_BACKEND_CUDA_REDUCE_CUH

template <typename T> static __device__ __forceinline__ T warp_sum(T v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

/* Sum over the block (blockDim a multiple of 32, at most 1024); every thread gets the result. */
template <typename T> static __device__ T block_sum(T v)
{
	__shared__ T sh[32];
	__shared__ T res;
	v = warp_sum(v);
	int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = blockDim.x >> 5;
	__syncthreads();
	if (l == 0) sh[w] = v;
	__syncthreads();
	if (w == 0) {
		T s = l < nw ? sh[l] : (T)0;
		s = warp_sum(s);
		if (l == 0) res = s;
	}
	__syncthreads();
	return res;
}

#endif
