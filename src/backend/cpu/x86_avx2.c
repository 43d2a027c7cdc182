/*
 * AVX2 + FMA (+ F16C) kernel set. The Makefile builds for baseline x86-64, so the ISA is set per
 * function by the pragma below and this set is only used after CPU feature detection.
 * Without VNNI, the u8 x s8 dot product is maddubs (pairs to int16) + madd (to int32): every
 * caller keeps |u * s| pairs below 2^15 (codes <= 128 against |s| <= 127).
 */
#include "backend/cpu/cpu_internal.h"

#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#include <immintrin.h>

static inline __m256i dpbusd_avx2(__m256i acc, __m256i u, __m256i s)
{
	__m256i p = _mm256_maddubs_epi16(u, s);
	return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

/* bit i of `bits` -> byte i: spread each byte of bits over 8 bytes, test one bit per byte */
static inline __m256i or_hbit_avx2(__m256i u, uint32_t bits, int v)
{
	__m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits),
					_mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL,
							   0x0303030303030303LL));
	const __m256i sel = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
	b = _mm256_cmpeq_epi8(_mm256_and_si256(b, sel), sel);
	return _mm256_or_si256(u, _mm256_and_si256(b, _mm256_set1_epi8((char)v)));
}

#define DPBUSD(acc, u, s) dpbusd_avx2((acc), (u), (s))
#define OR_HBIT(u, bits, v) or_hbit_avx2((u), (bits), (v))
#define KSET kset_avx2
#define GEMM_R 2 /* GEMM tile: rows x tokens; 16 vector registers hold its 8 accumulators */
#define GEMM_T 4
#define GEMM_Q8_U 0
#define GEMM_PACKED 0 /* the 8-row packed GEMM (needs the one-instruction DPBUSD) */
#define KSET_NAME "avx2"
#define MLX_SRLV16 0
#include "backend/cpu/x86_kernels.inc"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

const sg_cpu_kernels *sg_cpu_kernels_avx2(void) { return &kset_avx2; }

#else

const sg_cpu_kernels *sg_cpu_kernels_avx2(void) { return NULL; }

#endif
