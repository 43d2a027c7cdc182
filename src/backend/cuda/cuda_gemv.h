/*
 * What the GEMV file (cuda_gemv.cu) lends the MoE file (cuda_moe.cu): the activations' rounding to
 * 8-bit blocks and the grouped GEMV over the experts an MoE matmul uses. Kernel files only (C++).
 */
#ifndef SG_BACKEND_CUDA_GEMV_H
#define SG_BACKEND_CUDA_GEMV_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.h"

/* x [nx][K] rounded to 8-bit blocks into scratch (sg_cu_q8_bytes(nx, K) bytes); the three arrays
 * as sg_cu_q8_split lays them out. Returns the launch status. */
int sg_cu_quant_x(const float *x, int64_t nx, int64_t K, void *scratch, int8_t **xq, float **dx, float **sx, cudaStream_t s);

/* y[slot] = W[ids[slot]] x[slot or slot / k] for the S = n * k slots sorted by expert (start, order,
 * used, nused: sg_cu_moe_sort's scratch), rows_x rows of x (n when shared_x, else S); 8-bit
 * activations when q8_scratch is given and w's format has them. */
int sg_cu_gemv_grouped(const sg_cuw *w, const float *x, int64_t rows_x, int64_t S, int64_t n, int64_t k, int64_t E, float *y, int64_t N,
		       const int32_t *start, const int32_t *order, const int32_t *used, const int32_t *nused, int shared_x, void *q8_scratch,
		       cudaStream_t st);

#endif
