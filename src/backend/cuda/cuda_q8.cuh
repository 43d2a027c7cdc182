/* One token's activations rounded to 8-bit blocks of 32, shared by the GEMV kernels and the
 * kernels that produce their inputs (cuda_gemv.cu, cuda_moe.cu, cuda_attn.cu). */
#ifndef SG_BACKEND_CUDA_Q8_CUH
#define SG_BACKEND_CUDA_Q8_CUH

#include <stdint.h>

/* A warp's block of 32 values, one per lane, rounded to 8 bits: returns the lane's code and the
 * block's scale d (amax / 127). */
static __device__ __forceinline__ int q8_lane(float v, float &d)
{
	float a = fabsf(v);
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
	d = a / 127.0f;
	float id = a > 0 ? 127.0f / a : 0.0f;
	return __float2int_rn(v * id);
}

/* Block b quantized into the three arrays: codes, the block's scale, and d * the sum of each
 * half's codes. */
static __device__ __forceinline__ void q8_store(float v, int64_t b, int lane, int8_t *xq, float *dx, float *sx)
{
	float d;
	int q = q8_lane(v, d), sq = q;
	xq[b * 32 + lane] = (int8_t)q;
#pragma unroll
	for (int o = 8; o > 0; o >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
	if (lane == 0) dx[b] = d;
	if ((lane & 15) == 0) sx[2 * b + (lane >> 4)] = d * (float)sq;
}

#endif
