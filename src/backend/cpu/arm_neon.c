/*
 * arm64 NEON kernel set: float weights (F32, F16, BF16) and the f32 helpers in NEON; the
 * quantized types run the scalar reference until integer (sdot) kernels are written for them.
 * Compiled only on aarch64; elsewhere the set is absent.
 */
#include "backend/cpu/cpu_internal.h"

#if defined(__aarch64__)

#include <arm_neon.h>
#include <string.h>

static void mv_f32_neon(const sg_wview *w, int64_t r0, int64_t r1, const void *xv, float *y)
{
	const float *x = xv;
	for (int64_t r = r0; r < r1; r++) {
		const float *row = (const float *)(w->data + (size_t)r * w->row_bytes);
		float32x4_t a0 = vdupq_n_f32(0), a1 = a0;
		int64_t k = 0;
		for (; k + 8 <= w->K; k += 8) {
			a0 = vfmaq_f32(a0, vld1q_f32(row + k), vld1q_f32(x + k));
			a1 = vfmaq_f32(a1, vld1q_f32(row + k + 4), vld1q_f32(x + k + 4));
		}
		float s = vaddvq_f32(vaddq_f32(a0, a1));
		for (; k < w->K; k++) s += row[k] * x[k];
		y[r - r0] = s;
	}
}

static inline float32x4_t ld_f16x4(const uint8_t *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)p))); }
static inline float32x4_t ld_bf16x4(const uint8_t *p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)p), 16)); }

#define MV_HALF_NEON(NAME, LD, SCALAR)                                                             \
	static void NAME(const sg_wview *w, int64_t r0, int64_t r1, const void *xv, float *y)      \
	{                                                                                          \
		const float *x = xv;                                                               \
		for (int64_t r = r0; r < r1; r++) {                                                \
			const uint8_t *row = w->data + (size_t)r * w->row_bytes;                   \
			float32x4_t a0 = vdupq_n_f32(0), a1 = a0;                                  \
			int64_t k = 0;                                                             \
			for (; k + 8 <= w->K; k += 8) {                                            \
				a0 = vfmaq_f32(a0, LD(row + 2 * k), vld1q_f32(x + k));             \
				a1 = vfmaq_f32(a1, LD(row + 2 * k + 8), vld1q_f32(x + k + 4));     \
			}                                                                          \
			float s = vaddvq_f32(vaddq_f32(a0, a1));                                   \
			for (; k < w->K; k++) {                                                    \
				uint16_t h;                                                        \
				memcpy(&h, row + 2 * k, 2);                                        \
				s += SCALAR(h) * x[k];                                             \
			}                                                                          \
			y[r - r0] = s;                                                             \
		}                                                                                  \
	}
MV_HALF_NEON(mv_f16_neon, ld_f16x4, sg_cpu_f16)
MV_HALF_NEON(mv_bf16_neon, ld_bf16x4, sg_cpu_bf16)

static float dot_f32_neon(const float *a, const float *b, int64_t n)
{
	float32x4_t acc = vdupq_n_f32(0);
	int64_t i = 0;
	for (; i + 4 <= n; i += 4) acc = vfmaq_f32(acc, vld1q_f32(a + i), vld1q_f32(b + i));
	float s = vaddvq_f32(acc);
	for (; i < n; i++) s += a[i] * b[i];
	return s;
}

static void axpy_f32_neon(float *y, const float *x, float a, int64_t n)
{
	int64_t i = 0;
	for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), vld1q_f32(x + i), a));
	for (; i < n; i++) y[i] += a * x[i];
}

static const sg_cpu_kernels kset_neon = {
	.name = "neon",
	.mv = {[SG_KT_F32] = mv_f32_neon, [SG_KT_F16] = mv_f16_neon, [SG_KT_BF16] = mv_bf16_neon,
	       [SG_KT_Q8_0] = sg_cpu_mv_ref, [SG_KT_Q4_0] = sg_cpu_mv_ref, [SG_KT_Q4_1] = sg_cpu_mv_ref,
	       [SG_KT_Q5_0] = sg_cpu_mv_ref, [SG_KT_Q5_1] = sg_cpu_mv_ref, [SG_KT_Q2_K] = sg_cpu_mv_ref,
	       [SG_KT_Q3_K] = sg_cpu_mv_ref, [SG_KT_Q4_K] = sg_cpu_mv_ref, [SG_KT_Q5_K] = sg_cpu_mv_ref,
	       [SG_KT_Q6_K] = sg_cpu_mv_ref, [SG_KT_IQ4_NL] = sg_cpu_mv_ref, [SG_KT_IQ4_XS] = sg_cpu_mv_ref,
	       [SG_KT_MLX2] = sg_cpu_mv_ref, [SG_KT_MLX3] = sg_cpu_mv_ref, [SG_KT_MLX4] = sg_cpu_mv_ref,
	       [SG_KT_MLX5] = sg_cpu_mv_ref, [SG_KT_MLX6] = sg_cpu_mv_ref, [SG_KT_MLX8] = sg_cpu_mv_ref, [SG_KT_MLX4G] = sg_cpu_mv_ref},
	.q8_mask = 0,
	.quantize_x = sg_cpu_quantize_x_ref,
	.dot_f32 = dot_f32_neon,
	.axpy_f32 = axpy_f32_neon,
	.glu = sg_cpu_glu_ref,
	.softcap = sg_cpu_softcap_ref,
	.expsum = sg_cpu_expsum_ref,
	.wsum_f32 = sg_cpu_wsum_f32_ref,
	.dots_f32 = sg_cpu_dots_f32_ref,
	.conv_tile = sg_cpu_conv_tile_ref,
	.tanh_gate = sg_cpu_tanh_gate_ref,
};

const sg_cpu_kernels *sg_cpu_kernels_neon(void) { return &kset_neon; }

#else

const sg_cpu_kernels *sg_cpu_kernels_neon(void) { return NULL; }

#endif
