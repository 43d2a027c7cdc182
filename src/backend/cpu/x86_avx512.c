/*
 * AVX-512 kernel set (F + BW + VL + VNNI): the shared 256-bit kernels of x86_kernels.inc with
 * the u8 x s8 dot product as one vpdpbusd (VNNI; no int16 saturation, so any code width) and
 * the fifth/high bits of Q5 blocks expanded by a mask register. The ISA is set per function by
 * the pragma below; the set is only used after CPU feature detection.
 */
#include "backend/cpu/cpu_internal.h"

#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"))), \
			     apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#endif

#include <immintrin.h>

#define DPBUSD(acc, u, s) _mm256_dpbusd_epi32((acc), (u), (s))
/* one mask move and one masked add (the bit is clear in u, so add = or) */
#define OR_HBIT(u, bits, v) _mm256_mask_add_epi8((u), _cvtu32_mask32(bits), (u), _mm256_set1_epi8((char)(v)))
#define KSET kset_avx512
#define GEMM_R 4 /* GEMM tile: rows x tokens; 32 vector registers hold its 16 accumulators */
#define GEMM_T 4
#define GEMM_Q8_U 1
#define GEMM_PACKED 1 /* the 8-row packed GEMM (needs the one-instruction DPBUSD) */
#define KSET_NAME "avx512"
#define MLX_SRLV16 1 /* vpsrlvw for the MLX 3/5/6-bit unpack */
#include "backend/cpu/x86_kernels.inc"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

const sg_cpu_kernels *sg_cpu_kernels_avx512(void) { return &kset_avx512; }

#else

const sg_cpu_kernels *sg_cpu_kernels_avx512(void) { return NULL; }

#endif
