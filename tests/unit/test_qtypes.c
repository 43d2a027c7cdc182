/* Type table and reference dequantizers. Bit-for-bit parity with the Python `gguf` package
 * lives in tests/e2e/test_formats.py; here: hand-built blocks with values worked out from the
 * layout, the f16 conversion against the compiler's own _Float16, and MLX affine against an
 * independent bit-stream packer. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "formats/qtypes.h"

Test(qtypes, block_sizes_match_the_gguf_specification)
{
	struct {
		sg_type t;
		int block, bytes;
	} want[] = {
		{SG_TYPE_F32, 1, 4},      {SG_TYPE_F16, 1, 2},      {SG_TYPE_BF16, 1, 2},
		{SG_TYPE_Q4_0, 32, 18},   {SG_TYPE_Q4_1, 32, 20},   {SG_TYPE_Q5_0, 32, 22},
		{SG_TYPE_Q5_1, 32, 24},   {SG_TYPE_Q8_0, 32, 34},   {SG_TYPE_Q2_K, 256, 84},
		{SG_TYPE_Q3_K, 256, 110}, {SG_TYPE_Q4_K, 256, 144}, {SG_TYPE_Q5_K, 256, 176},
		{SG_TYPE_Q6_K, 256, 210}, {SG_TYPE_Q8_K, 256, 292}, {SG_TYPE_IQ4_NL, 32, 18},
		{SG_TYPE_IQ4_XS, 256, 136}, {SG_TYPE_I64, 1, 8},   {SG_TYPE_F8_E4M3, 1, 1},
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		const sg_type_info *ti = sg_type_get(want[i].t);
		cr_assert_not_null(ti);
		cr_expect_eq(ti->block, want[i].block, "%s block", ti->name);
		cr_expect_eq(ti->block_bytes, want[i].bytes, "%s bytes", ti->name);
	}
	cr_expect_null(sg_type_get(4)); /* removed Q4_2 */
	cr_expect_null(sg_type_get(-1));
	cr_expect_null(sg_type_get(99));
	cr_expect_str_eq(sg_type_name(77), "unknown");
	cr_expect_eq(sg_type_from_name("q4_k"), SG_TYPE_Q4_K);
	cr_expect_eq(sg_type_from_name("BF16"), SG_TYPE_BF16);
	cr_expect_eq(sg_type_from_name("Q9_K"), -1);
}

Test(qtypes, row_bytes_rejects_partial_blocks)
{
	cr_expect_eq(sg_type_row_bytes(SG_TYPE_Q4_K, 512), 288u);
	cr_expect_eq(sg_type_row_bytes(SG_TYPE_Q4_K, 100), 0u);
	cr_expect_eq(sg_type_row_bytes(SG_TYPE_F16, 3), 6u);
	cr_expect_eq(sg_type_row_bytes(SG_TYPE_MLX_AFFINE, 64), 0u);
	cr_expect_eq(sg_type_row_bytes(SG_TYPE_F32, -4), 0u);
}

Test(qtypes, f16_conversion_matches_the_compiler_for_every_half_and_many_floats)
{
	for (uint32_t h = 0; h < 65536; h++) {
		_Float16 ref;
		uint16_t hh = (uint16_t)h;
		memcpy(&ref, &hh, 2);
		float want = (float)ref, got = sg_f16_to_f32(hh);
		if (isnan(want)) {
			cr_assert(isnan(got), "0x%04x", h);
			continue;
		}
		cr_assert(memcmp(&want, &got, 4) == 0, "f16 0x%04x: want %a got %a", h, want, got);
		cr_assert_eq(sg_f32_to_f16(got), hh, "round trip 0x%04x", h);
	}
	/* f32 -> f16 rounding, including ties, subnormals, overflow: a spread of bit patterns */
	uint32_t x = 12345;
	for (int i = 0; i < 2000000; i++) {
		x = x * 1664525u + 1013904223u;
		uint32_t u = (x & 0x80000000u) | ((0x30000000u + (x >> 2) % 0x18000000u));
		if (i % 3 == 0) u &= ~0x0fffu, u |= 0x1000u; /* exact ties on the f16 grid */
		float f;
		memcpy(&f, &u, 4);
		_Float16 ref = (_Float16)f;
		uint16_t want;
		memcpy(&want, &ref, 2);
		cr_assert_eq(sg_f32_to_f16(f), want, "f32 %a (0x%08x)", f, u);
	}
	cr_expect_eq(sg_f32_to_f16(INFINITY), 0x7c00);
	cr_expect_eq(sg_f32_to_f16(-1e9f), 0xfc00);
	cr_expect(isnan(sg_f16_to_f32(sg_f32_to_f16(NAN))));
}

Test(qtypes, bf16_rounds_to_nearest_even_and_keeps_nan)
{
	cr_expect_eq(sg_f32_to_bf16(1.0f), 0x3f80);
	/* 1 + 2^-8 is a tie between 1 and 1+2^-7: goes to even (1.0) */
	cr_expect_eq(sg_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
	cr_expect_eq(sg_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
	cr_expect_eq(sg_f32_to_bf16(1.0f + 0x1p-7f + 0x1p-8f), 0x3f82); /* odd tie rounds up */
	cr_expect_eq(sg_bf16_to_f32(0xc040), -3.0f);
	uint16_t n = sg_f32_to_bf16(NAN);
	cr_expect((n & 0x7f80) == 0x7f80 && (n & 0x7f));
}

Test(qtypes, plain_types_dequantize_to_their_values)
{
	float out[4];
	int64_t i64[3] = {-5, 0, 1LL << 40};
	sg_dequantize_ref(SG_TYPE_I64, i64, out, 3);
	cr_expect(out[0] == -5.0f && out[1] == 0.0f && out[2] == 0x1p40f);
	uint8_t e4m3[4] = {0x7e, 0x01, 0xb8, 0x7f}; /* 448, 2^-9, -1, NaN */
	sg_dequantize_ref(SG_TYPE_F8_E4M3, e4m3, out, 4);
	cr_expect(out[0] == 448.0f && out[1] == 0x1p-9f && out[2] == -1.0f && isnan(out[3]));
	uint8_t e5m2[3] = {0x7b, 0x3c, 0x7c}; /* 57344, 1, inf */
	sg_dequantize_ref(SG_TYPE_F8_E5M2, e5m2, out, 3);
	cr_expect(out[0] == 57344.0f && out[1] == 1.0f && isinf(out[2]));
	uint8_t b[3] = {0, 1, 7};
	sg_dequantize_ref(SG_TYPE_BOOL, b, out, 3);
	cr_expect(out[0] == 0 && out[1] == 1 && out[2] == 1);
}

Test(qtypes, q4_0_block_by_hand)
{
	uint8_t blk[18] = {0x00, 0x40}; /* d = 2.0 */
	for (int j = 0; j < 16; j++) blk[2 + j] = (uint8_t)(j | (15 - j) << 4);
	float y[32];
	sg_dequantize_ref(SG_TYPE_Q4_0, blk, y, 32);
	for (int j = 0; j < 16; j++) {
		cr_expect_eq(y[j], 2.0f * (float)(j - 8));
		cr_expect_eq(y[16 + j], 2.0f * (float)(15 - j - 8));
	}
}

Test(qtypes, q5_0_takes_the_fifth_bit_from_qh)
{
	uint8_t blk[22] = {0x00, 0x3c}; /* d = 1 */
	blk[2] = 0x01;                   /* element 0 high bit */
	blk[5] = 0x80;                   /* bit 31: element 31 high bit */
	float y[32];
	sg_dequantize_ref(SG_TYPE_Q5_0, blk, y, 32);
	cr_expect_eq(y[0], 0.0f);   /* 16 - 16 */
	cr_expect_eq(y[1], -16.0f); /* 0 - 16 */
	cr_expect_eq(y[31], 0.0f);
	cr_expect_eq(y[16], -16.0f);
}

Test(qtypes, q4_k_unpacks_6bit_scales_and_mins)
{
	uint8_t blk[144] = {0};
	blk[0] = 0x00, blk[1] = 0x3c; /* d = 1 */
	blk[2] = 0x00, blk[3] = 0x38; /* dmin = 0.5 */
	uint8_t *s = blk + 4;
	/* sub-block 0: scale 5, min 3; sub-block 5: scale 0x2a (42) = low 0xa + high 2, min 0x31 */
	s[0] = 5;
	s[4] = 3;
	s[9] = 0x0a | (0x1 << 4); /* j=5: sc low nibble s[9]&15, m low nibble s[9]>>4 */
	s[1] |= 2 << 6;           /* sc high bits from s[j-4] */
	s[5] |= 3 << 6;           /* m high bits from s[j] -> 0x31 = 1 | 3<<4 */
	uint8_t *qs = blk + 16;
	qs[0] = 0x07;        /* element 0 (sub-block 0) q=7 */
	qs[64 + 1] = 0x90;   /* chunk 2 (sub-blocks 4,5): element 160+1 high nibble q=9 */
	float y[256];
	sg_dequantize_ref(SG_TYPE_Q4_K, blk, y, 256);
	cr_expect_eq(y[0], 5.0f * 7 - 0.5f * 3);
	cr_expect_eq(y[1], -1.5f);
	cr_expect_eq(y[161], 42.0f * 9 - 0.5f * 49);
	cr_expect_eq(y[160], -0.5f * 49);
}

Test(qtypes, q6_k_element_layout)
{
	uint8_t blk[210] = {0};
	blk[208] = 0x00, blk[209] = 0x3c; /* d = 1 */
	int8_t *sc = (int8_t *)(blk + 192);
	for (int i = 0; i < 16; i++) sc[i] = (int8_t)(i + 1);
	blk[0] = 0xff;        /* ql[0]: element 0 low 15, element 64 high 15 */
	blk[128] = 0x3 << 6; /* qh[0] pair 3 -> element 96 gets +48 */
	float y[256];
	sg_dequantize_ref(SG_TYPE_Q6_K, blk, y, 256);
	cr_expect_eq(y[0], 1.0f * (15 - 32));
	cr_expect_eq(y[64], 5.0f * (15 - 32));
	cr_expect_eq(y[96], 7.0f * (48 - 32));
	cr_expect_eq(y[32], 3.0f * -32);
	cr_expect_eq(y[128], 9.0f * -32);
}

Test(qtypes, iq4_nl_uses_the_codebook)
{
	uint8_t blk[18] = {0x00, 0x3c};
	blk[2] = 0xf0; /* element 0 -> code 0 (-127), element 16 -> code 15 (113) */
	float y[32];
	sg_dequantize_ref(SG_TYPE_IQ4_NL, blk, y, 32);
	cr_expect_eq(y[0], -127.0f);
	cr_expect_eq(y[16], 113.0f);
	cr_expect_eq(y[1], -127.0f);
}

/* Independent packer: writes q[j] at bit j*bits of a byte stream, one bit at a time. */
static void pack_bits(const int *q, int64_t n, int bits, uint32_t *out, int64_t words)
{
	uint8_t *bytes = (uint8_t *)out;
	memset(out, 0, (size_t)words * 4);
	for (int64_t j = 0; j < n; j++)
		for (int b = 0; b < bits; b++)
			if (q[j] >> b & 1) bytes[(j * bits + b) / 8] |= (uint8_t)(1u << ((j * bits + b) % 8));
}

Test(qtypes, mlx_affine_every_bits_and_group)
{
	const int bitsv[] = {2, 3, 4, 5, 6, 8}, groups[] = {32, 64, 128};
	enum { COLS = 384 };
	int q[COLS];
	uint32_t packed[COLS * 8 / 32];
	uint16_t sc[COLS / 32], bi[COLS / 32];
	float y[COLS];
	uint32_t x = 7;
	for (int bi_ = 0; bi_ < 6; bi_++)
		for (int gi = 0; gi < 3; gi++)
			for (int sbt = 0; sbt < 2; sbt++) {
				int bits = bitsv[bi_], g = groups[gi];
				sg_mlx_q mq = {bits, g, sbt ? SG_TYPE_F16 : SG_TYPE_BF16};
				for (int j = 0; j < COLS; j++) {
					x = x * 1103515245u + 12345u;
					q[j] = (int)((x >> 8) % (1u << bits));
				}
				int64_t words = sg_mlx_packed_words(bits, COLS);
				cr_assert_eq(words, COLS * bits / 32);
				pack_bits(q, COLS, bits, packed, words);
				for (int k = 0; k < COLS / g; k++) {
					float s = 0.25f * (float)(k + 1), b = -1.5f + (float)k;
					sc[k] = sbt ? sg_f32_to_f16(s) : sg_f32_to_bf16(s);
					bi[k] = sbt ? sg_f32_to_f16(b) : sg_f32_to_bf16(b);
				}
				sg_mlx_dequantize_row_ref(&mq, packed, sc, bi, y, COLS);
				for (int j = 0; j < COLS; j++) {
					int k = j / g;
					float want = 0.25f * (float)(k + 1) * (float)q[j] + (-1.5f + (float)k);
					cr_assert_eq(y[j], want, "bits %d group %d col %d: q %d", bits, g, j, q[j]);
				}
			}
	cr_expect_eq(sg_mlx_packed_words(7, 64), 0);
	cr_expect_eq(sg_mlx_packed_words(3, 10), 0);
}
