/*
 * Scalar reference for the weight types: block layouts (from the GGUF specification and the MLX
 * affine description in formats/qtypes.h), row dequantization, the reference matvec (dequantize,
 * then a double-precision dot product with the f32 activations) and the 8-bit activation
 * quantizer the SIMD kernels use.
 */
#include "backend/cpu/cpu_internal.h"

#include <math.h>
#include <string.h>

static const sg_kt_info kt_info[SG_KT_COUNT] = {
	[SG_KT_F32] = {"F32", 1, SG_XL_F32, 0},
	[SG_KT_F16] = {"F16", 1, SG_XL_F32, 0},
	[SG_KT_BF16] = {"BF16", 1, SG_XL_F32, 0},
	[SG_KT_Q8_0] = {"Q8_0", 32, SG_XL_NAT, 0},
	[SG_KT_Q4_0] = {"Q4_0", 32, SG_XL_NAT, 8},
	[SG_KT_Q4_1] = {"Q4_1", 32, SG_XL_NAT, 0},
	[SG_KT_Q5_0] = {"Q5_0", 32, SG_XL_NAT, 16},
	[SG_KT_Q5_1] = {"Q5_1", 32, SG_XL_NAT, 0},
	[SG_KT_Q2_K] = {"Q2_K", 256, SG_XL_NAT, 0},
	[SG_KT_Q3_K] = {"Q3_K", 256, SG_XL_NAT, 4},
	[SG_KT_Q4_K] = {"Q4_K", 256, SG_XL_NAT, 0},
	[SG_KT_Q5_K] = {"Q5_K", 256, SG_XL_NAT, 0},
	[SG_KT_Q6_K] = {"Q6_K", 256, SG_XL_NAT, 32},
	[SG_KT_IQ4_NL] = {"IQ4_NL", 32, SG_XL_NAT, 128}, /* offset: the VNNI kernel reads the grid + 128 */
	[SG_KT_IQ4_XS] = {"IQ4_XS", 256, SG_XL_NAT, 128}, /* offset: the VNNI kernel reads the grid + 128 */
	[SG_KT_MLX2] = {"MLX2", 32, SG_XL_ILV2, 0},
	[SG_KT_MLX3] = {"MLX3", 32, SG_XL_NAT, 0},
	[SG_KT_MLX4] = {"MLX4", 32, SG_XL_ILV4, 0},
	[SG_KT_MLX5] = {"MLX5", 32, SG_XL_NAT, 0},
	[SG_KT_MLX6] = {"MLX6", 32, SG_XL_NAT, 0},
	[SG_KT_MLX8] = {"MLX8", 32, SG_XL_NAT, 0},
	[SG_KT_MLX4G] = {"MLX4G", 32, SG_XL_ILV4, 0},
};

const sg_kt_info *sg_cpu_kt_info(sg_kt kt) { return kt >= 0 && kt < SG_KT_COUNT ? &kt_info[kt] : NULL; }

const int8_t sg_cpu_iq4_grid[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
				    1,    13,   25,  38,  53,  69,  89,  113};

float sg_cpu_f16(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
	if (exp == 0x1f) {
		bits = sign | 0x7f800000u | (man << 13);
	} else if (exp == 0) {
		/* subnormal: exact as a float product */
		float f = (float)man * 0x1p-24f;
		return sign ? -f : f;
	} else {
		bits = sign | ((exp + 112) << 23) | (man << 13);
	}
	float f;
	memcpy(&f, &bits, 4);
	return f;
}

float sg_cpu_bf16(uint16_t h)
{
	uint32_t bits = (uint32_t)h << 16;
	float f;
	memcpy(&f, &bits, 4);
	return f;
}

uint16_t sg_cpu_f32_to_f16(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	uint32_t sign = (x >> 16) & 0x8000, ax = x & 0x7fffffff;
	if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
	if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds past the largest half */
	if (ax < 0x38800000u) { /* subnormal half: round the value in units of 2^-24 */
		float a;
		memcpy(&a, &ax, 4);
		return (uint16_t)(sign | (uint32_t)lrintf(a * 0x1p24f));
	}
	uint32_t r = ax + 0xfff + ((ax >> 13) & 1); /* round to nearest even */
	return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline float rdh(const uint8_t *p) { return sg_cpu_f16(rd16(p)); }

void sg_cpu_k4_scales(const uint8_t *p, uint8_t sc[8], uint8_t mn[8])
{
	for (int j = 0; j < 4; j++) {
		sc[j] = p[j] & 63;
		mn[j] = p[j + 4] & 63;
		sc[j + 4] = (uint8_t)((p[j + 8] & 0xf) | ((p[j] >> 6) << 4));
		mn[j + 4] = (uint8_t)((p[j + 8] >> 4) | ((p[j + 4] >> 6) << 4));
	}
}

void sg_cpu_q3k_scales(const uint8_t *p, int8_t sc[16])
{
	/* 16 six-bit values: low 4 bits in bytes 0..7 (two nibbles each: j and j+8), high 2 bits in
	 * bytes 8..11 (four crumbs each: j, j+4, j+8, j+12) */
	for (int j = 0; j < 16; j++) {
		int lo = (p[j & 7] >> (4 * (j >> 3))) & 0xf;
		int hi = (p[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
		sc[j] = (int8_t)((lo | hi << 4) - 32);
	}
}

/* One block of each GGUF type to 32 or 256 floats. */
static void dq_block(sg_kt kt, const uint8_t *b, float *y)
{
	switch (kt) {
	case SG_KT_Q8_0: {
		float d = rdh(b);
		for (int i = 0; i < 32; i++) y[i] = d * (int8_t)b[2 + i];
		break;
	}
	case SG_KT_Q4_0:
	case SG_KT_IQ4_NL: {
		float d = rdh(b);
		for (int i = 0; i < 16; i++) {
			int lo = b[2 + i] & 0xf, hi = b[2 + i] >> 4;
			if (kt == SG_KT_Q4_0) {
				y[i] = d * (lo - 8);
				y[i + 16] = d * (hi - 8);
			} else {
				y[i] = d * sg_cpu_iq4_grid[lo];
				y[i + 16] = d * sg_cpu_iq4_grid[hi];
			}
		}
		break;
	}
	case SG_KT_Q4_1: {
		float d = rdh(b), m = rdh(b + 2);
		for (int i = 0; i < 16; i++) {
			y[i] = d * (b[4 + i] & 0xf) + m;
			y[i + 16] = d * (b[4 + i] >> 4) + m;
		}
		break;
	}
	case SG_KT_Q5_0:
	case SG_KT_Q5_1: {
		int one = kt == SG_KT_Q5_1;
		float d = rdh(b), m = one ? rdh(b + 2) : 0;
		const uint8_t *qhp = b + (one ? 4 : 2), *qs = qhp + 4;
		uint32_t qh = (uint32_t)qhp[0] | (uint32_t)qhp[1] << 8 | (uint32_t)qhp[2] << 16 |
			      (uint32_t)qhp[3] << 24;
		for (int i = 0; i < 16; i++) {
			int lo = (qs[i] & 0xf) | (int)((qh >> i) & 1) << 4;
			int hi = (qs[i] >> 4) | (int)((qh >> (i + 16)) & 1) << 4;
			y[i] = one ? d * lo + m : d * (lo - 16);
			y[i + 16] = one ? d * hi + m : d * (hi - 16);
		}
		break;
	}
	case SG_KT_Q2_K: {
		const uint8_t *sc = b, *qs = b + 16;
		float d = rdh(b + 80), dmin = rdh(b + 82);
		for (int blk = 0; blk < 8; blk++) { /* 32 elements: crumb pair blk&3 of qs[32*(blk/4)..] */
			const uint8_t *q = qs + 32 * (blk >> 2);
			int sh = 2 * (blk & 3);
			for (int l = 0; l < 32; l++) {
				int s = sc[2 * blk + (l >> 4)];
				y[32 * blk + l] = d * (s & 0xf) * ((q[l] >> sh) & 3) - dmin * (s >> 4);
			}
		}
		break;
	}
	case SG_KT_Q3_K: {
		const uint8_t *hm = b, *qs = b + 32;
		int8_t sc[16];
		sg_cpu_q3k_scales(b + 96, sc);
		float d = rdh(b + 108);
		for (int blk = 0; blk < 8; blk++) {
			const uint8_t *q = qs + 32 * (blk >> 2);
			int sh = 2 * (blk & 3);
			for (int l = 0; l < 32; l++) {
				int c = ((q[l] >> sh) & 3) - ((hm[l] >> blk) & 1 ? 0 : 4);
				y[32 * blk + l] = d * sc[2 * blk + (l >> 4)] * c;
			}
		}
		break;
	}
	case SG_KT_Q4_K:
	case SG_KT_Q5_K: {
		int five = kt == SG_KT_Q5_K;
		float d = rdh(b), dmin = rdh(b + 2);
		uint8_t sc[8], mn[8];
		sg_cpu_k4_scales(b + 4, sc, mn);
		const uint8_t *qh = b + 16, *qs = b + 16 + (five ? 32 : 0);
		for (int blk = 0; blk < 8; blk++) {
			const uint8_t *q = qs + 32 * (blk >> 1);
			for (int l = 0; l < 32; l++) {
				int c = blk & 1 ? q[l] >> 4 : q[l] & 0xf;
				if (five) c |= ((qh[l] >> blk) & 1) << 4;
				y[32 * blk + l] = d * sc[blk] * c - dmin * mn[blk];
			}
		}
		break;
	}
	case SG_KT_Q6_K: {
		const uint8_t *ql = b, *qh = b + 128;
		const int8_t *sc = (const int8_t *)(b + 192);
		float d = rdh(b + 208);
		for (int blk = 0; blk < 8; blk++) { /* half n = blk/4, quarter k = blk%4 */
			int n = blk >> 2, k = blk & 3;
			const uint8_t *l4 = ql + 64 * n + 32 * (k & 1), *h2 = qh + 32 * n;
			for (int l = 0; l < 32; l++) {
				int lo = k < 2 ? l4[l] & 0xf : l4[l] >> 4;
				int c = (lo | ((h2[l] >> (2 * k)) & 3) << 4) - 32;
				y[32 * blk + l] = d * sc[2 * blk + (l >> 4)] * c;
			}
		}
		break;
	}
	case SG_KT_IQ4_XS: {
		float d = rdh(b);
		uint16_t sh = rd16(b + 2);
		const uint8_t *sl = b + 4, *qs = b + 8;
		for (int blk = 0; blk < 8; blk++) {
			int ls = ((sl[blk >> 1] >> (4 * (blk & 1))) & 0xf) | ((sh >> (2 * blk)) & 3) << 4;
			float dl = d * (ls - 32);
			for (int i = 0; i < 16; i++) {
				y[32 * blk + i] = dl * sg_cpu_iq4_grid[qs[16 * blk + i] & 0xf];
				y[32 * blk + i + 16] = dl * sg_cpu_iq4_grid[qs[16 * blk + i] >> 4];
			}
		}
		break;
	}
	default: break;
	}
}

static size_t kt_block_bytes(sg_kt kt)
{
	switch (kt) {
	case SG_KT_Q8_0: return 34;
	case SG_KT_Q4_0: case SG_KT_IQ4_NL: return 18;
	case SG_KT_Q4_1: return 20;
	case SG_KT_Q5_0: return 22;
	case SG_KT_Q5_1: return 24;
	case SG_KT_Q2_K: return 84;
	case SG_KT_Q3_K: return 110;
	case SG_KT_Q4_K: return 144;
	case SG_KT_Q5_K: return 176;
	case SG_KT_Q6_K: return 210;
	case SG_KT_IQ4_XS: return 136;
	default: return 0;
	}
}

void sg_cpu_mlx_codes(const uint8_t *row, int bits, int64_t k0, uint8_t out[32])
{
	/* 32 elements span exactly 4*bits bytes, starting at a byte boundary */
	const uint8_t *p = row + (size_t)(k0 / 8) * (size_t)bits;
	uint32_t mask = (1u << bits) - 1;
	for (int i = 0; i < 32; i++) {
		int bit = i * bits, byte = bit >> 3, sh = bit & 7;
		uint32_t v = p[byte] | (byte + 1 < 4 * bits ? (uint32_t)p[byte + 1] << 8 : 0);
		out[i] = (uint8_t)((v >> sh) & mask);
	}
}

void sg_cpu_mlx4g_pack_row(const uint8_t *codes, const uint8_t *sc, const uint8_t *bi, int64_t K, int group, uint8_t *out)
{
	size_t gb = (size_t)group / 2;
	for (int64_t g = 0; g < K / group; g++) {
		memcpy(out, sc + 2 * g, 2);
		memcpy(out + 2, bi + 2 * g, 2);
		memcpy(out + 4, codes + (size_t)g * gb, gb);
		out += gb + 4;
	}
}

void sg_cpu_dequant_row_ref(const sg_wview *w, int64_t r, int64_t k0, int64_t n, float *out)
{
	const uint8_t *row = w->data + (size_t)r * w->row_bytes;
	switch (w->kt) {
	case SG_KT_F32: memcpy(out, row + 4 * k0, 4 * (size_t)n); return;
	case SG_KT_F16:
		for (int64_t i = 0; i < n; i++) out[i] = rdh(row + 2 * (k0 + i));
		return;
	case SG_KT_BF16:
		for (int64_t i = 0; i < n; i++) out[i] = sg_cpu_bf16(rd16(row + 2 * (k0 + i)));
		return;
	case SG_KT_MLX2: case SG_KT_MLX3: case SG_KT_MLX4:
	case SG_KT_MLX5: case SG_KT_MLX6: case SG_KT_MLX8: {
		const uint8_t *sc = w->scales + (size_t)r * w->sb_row_bytes;
		const uint8_t *bi = w->biases + (size_t)r * w->sb_row_bytes;
		for (int64_t k = k0; k < k0 + n; k += 32) {
			uint8_t c[32];
			sg_cpu_mlx_codes(row, w->bits, k, c);
			int64_t g = k / w->group;
			uint16_t s16 = rd16(sc + 2 * g), b16 = rd16(bi + 2 * g);
			float s = w->sb_bf16 ? sg_cpu_bf16(s16) : sg_cpu_f16(s16);
			float bb = w->sb_bf16 ? sg_cpu_bf16(b16) : sg_cpu_f16(b16);
			for (int i = 0; i < 32; i++) out[k - k0 + i] = s * c[i] + bb;
		}
		return;
	}
	case SG_KT_MLX4G: {
		size_t gs = sg_cpu_mlx4g_group_bytes(w->group);
		for (int64_t k = k0; k < k0 + n; k += 32) {
			const uint8_t *p = row + (size_t)(k / w->group) * gs;
			uint8_t c[32];
			/* the group's codes are the MLX bytes of its elements: element k % group of them */
			sg_cpu_mlx_codes(p + 4, 4, k % w->group, c);
			uint16_t s16 = rd16(p), b16 = rd16(p + 2);
			float s = w->sb_bf16 ? sg_cpu_bf16(s16) : sg_cpu_f16(s16);
			float bb = w->sb_bf16 ? sg_cpu_bf16(b16) : sg_cpu_f16(b16);
			for (int i = 0; i < 32; i++) out[k - k0 + i] = s * c[i] + bb;
		}
		return;
	}
	default: {
		int blk = kt_info[w->kt].block;
		size_t bb = kt_block_bytes(w->kt);
		for (int64_t k = k0; k < k0 + n; k += blk)
			dq_block(w->kt, row + (size_t)(k / blk) * bb, out + (k - k0));
		return;
	}
	}
}

sg_kt sg_cpu_wview(const sg_btensor *t, sg_wview *v)
{
	memset(v, 0, sizeof(*v));
	v->kt = SG_KT_NONE;
	v->K = t->ne[0];
	v->data = t->data;
	v->row_bytes = t->row_bytes;
	sg_kt kt = SG_KT_NONE;
	switch (t->type) {
	case SG_TYPE_F32: kt = SG_KT_F32; break;
	case SG_TYPE_F16: kt = SG_KT_F16; break;
	case SG_TYPE_BF16: kt = SG_KT_BF16; break;
	case SG_TYPE_Q8_0: kt = SG_KT_Q8_0; break;
	case SG_TYPE_Q4_0: kt = SG_KT_Q4_0; break;
	case SG_TYPE_Q4_1: kt = SG_KT_Q4_1; break;
	case SG_TYPE_Q5_0: kt = SG_KT_Q5_0; break;
	case SG_TYPE_Q5_1: kt = SG_KT_Q5_1; break;
	case SG_TYPE_Q2_K: kt = SG_KT_Q2_K; break;
	case SG_TYPE_Q3_K: kt = SG_KT_Q3_K; break;
	case SG_TYPE_Q4_K: kt = SG_KT_Q4_K; break;
	case SG_TYPE_Q5_K: kt = SG_KT_Q5_K; break;
	case SG_TYPE_Q6_K: kt = SG_KT_Q6_K; break;
	case SG_TYPE_IQ4_NL: kt = SG_KT_IQ4_NL; break;
	case SG_TYPE_IQ4_XS: kt = SG_KT_IQ4_XS; break;
	case SG_TYPE_MLX_AFFINE: {
		int g = t->mlx.group;
		if (g != 32 && g != 64 && g != 128) return SG_KT_NONE;
		if (t->mlx.sb_type != SG_TYPE_BF16 && t->mlx.sb_type != SG_TYPE_F16) return SG_KT_NONE;
		if (!t->scales || !t->biases) return SG_KT_NONE;
		switch (t->mlx.bits) {
		case 2: kt = SG_KT_MLX2; break;
		case 3: kt = SG_KT_MLX3; break;
		case 4: kt = SG_KT_MLX4; break;
		case 5: kt = SG_KT_MLX5; break;
		case 6: kt = SG_KT_MLX6; break;
		case 8: kt = SG_KT_MLX8; break;
		default: return SG_KT_NONE;
		}
		v->bits = t->mlx.bits;
		v->group = g;
		v->sb_bf16 = t->mlx.sb_type == SG_TYPE_BF16;
		size_t cb = (size_t)t->ne[0] / 8 * (size_t)t->mlx.bits, sb = sg_btensor_mlx_sb_row_bytes(t);
		if (kt == SG_KT_MLX4 && t->row_bytes == cb + 2 * sb && t->ne[0] % g == 0) {
			/* repacked at bind: the row size says so (the split layout's rows hold codes only) */
			kt = SG_KT_MLX4G;
			break;
		}
		v->scales = t->scales;
		v->biases = t->biases;
		v->sb_row_bytes = sb;
		break;
	}
	default: return SG_KT_NONE;
	}
	if (v->K % kt_info[kt].block) return SG_KT_NONE;
	v->kt = kt;
	return kt;
}

const char *sg_type_name_cpu(sg_type t)
{
	switch (t) {
	case SG_TYPE_F32: return "F32";
	case SG_TYPE_F16: return "F16";
	case SG_TYPE_BF16: return "BF16";
	case SG_TYPE_I32: return "I32";
	case SG_TYPE_Q8_0: return "Q8_0";
	case SG_TYPE_Q4_0: return "Q4_0";
	case SG_TYPE_Q4_1: return "Q4_1";
	case SG_TYPE_Q5_0: return "Q5_0";
	case SG_TYPE_Q5_1: return "Q5_1";
	case SG_TYPE_Q2_K: return "Q2_K";
	case SG_TYPE_Q3_K: return "Q3_K";
	case SG_TYPE_Q4_K: return "Q4_K";
	case SG_TYPE_Q5_K: return "Q5_K";
	case SG_TYPE_Q6_K: return "Q6_K";
	case SG_TYPE_IQ4_NL: return "IQ4_NL";
	case SG_TYPE_IQ4_XS: return "IQ4_XS";
	case SG_TYPE_MLX_AFFINE: return "MLX_AFFINE";
	default: return "unsupported";
	}
}

size_t sg_cpu_row_bytes(const sg_btensor *t)
{
	sg_wview v;
	sg_kt kt = sg_cpu_wview(t, &v);
	switch (kt) {
	case SG_KT_NONE: return 0;
	case SG_KT_F32: return (size_t)t->ne[0] * 4;
	case SG_KT_F16: case SG_KT_BF16: return (size_t)t->ne[0] * 2;
	case SG_KT_MLX2: case SG_KT_MLX3: case SG_KT_MLX4: case SG_KT_MLX5: case SG_KT_MLX6: case SG_KT_MLX8:
		return (size_t)t->ne[0] / 8 * (size_t)t->mlx.bits;
	case SG_KT_MLX4G: return (size_t)(t->ne[0] / t->mlx.group) * sg_cpu_mlx4g_group_bytes(t->mlx.group);
	default: return (size_t)(t->ne[0] / kt_info[kt].block) * kt_block_bytes(kt);
	}
}

/* --- activations --- */

static const uint8_t perm_nat[32] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10,
				     11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
				     22, 23, 24, 25, 26, 27, 28, 29, 30, 31};
static const uint8_t perm_ilv4[32] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30,
				      1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31};
static const uint8_t perm_ilv2[32] = {0, 4, 8,  12, 16, 20, 24, 28, 1, 5, 9,  13, 17, 21, 25, 29,
				      2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31};

const uint8_t *sg_cpu_xl_perm(sg_xlayout xl)
{
	return xl == SG_XL_ILV4 ? perm_ilv4 : xl == SG_XL_ILV2 ? perm_ilv2 : perm_nat;
}

size_t sg_xq_bytes(int64_t K)
{
	int64_t nb = K / 32;
	size_t fl = ((size_t)nb * 4 * sizeof(float) + 63) & ~(size_t)63;
	return (size_t)nb * sizeof(sg_xblk) + fl;
}

void sg_xq_init(sg_xq *x, int64_t K, void *mem)
{
	x->nb = K / 32;
	x->b = mem;
	float *f = (float *)(x->b + x->nb);
	x->d = f;
	x->s = f + x->nb;
	x->sh = f + 2 * x->nb;
}

void sg_cpu_quantize_x_ref(const float *x, int64_t K, sg_xlayout xl, int xoff, sg_xq *out)
{
	const uint8_t *perm = sg_cpu_xl_perm(xl);
	for (int64_t b = 0; b < K / 32; b++) {
		const float *xb = x + 32 * b;
		float amax = 0;
		for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(xb[i]));
		float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
		sg_xblk *o = &out->b[b];
		int sum[2] = {0, 0};
		for (int i = 0; i < 32; i++) {
			int q = (int)lrintf(xb[perm[i]] * id);
			o->q[i] = (int8_t)q;
			sum[perm[i] >> 4] += q;
		}
		memset(o->ioff, 0, sizeof(o->ioff));
		/* the halves of a block by element index: positions 0..15 hold elements 0..15 only in the
		 * natural layout, which is the only one used with an offset */
		o->ioff[0] = -xoff * sum[0];
		o->ioff[4] = -xoff * sum[1];
		out->d[b] = d;
		out->sh[2 * b] = d * (float)sum[0];
		out->sh[2 * b + 1] = d * (float)sum[1];
		out->s[b] = d * (float)(sum[0] + sum[1]);
	}
}

/* The reference matvec: dequantize 256 elements at a time, accumulate in double. */
void sg_cpu_mv_ref(const sg_wview *w, int64_t r0, int64_t r1, const void *xv, float *y)
{
	const float *x = xv;
	float buf[256];
	int64_t step = w->K % 256 == 0 ? 256 : w->K % 128 == 0 ? 128 : 32;
	if (w->kt == SG_KT_F32 || w->kt == SG_KT_F16 || w->kt == SG_KT_BF16) step = 1;
	for (int64_t r = r0; r < r1; r++) {
		double acc = 0;
		int64_t k = 0;
		for (; k + step <= w->K && step > 1; k += step) {
			sg_cpu_dequant_row_ref(w, r, k, step, buf);
			for (int64_t i = 0; i < step; i++) acc += (double)buf[i] * x[k + i];
		}
		for (; k < w->K; k++) { /* plain types, any length */
			sg_cpu_dequant_row_ref(w, r, k, 1, buf);
			acc += (double)buf[0] * x[k];
		}
		y[r - r0] = (float)acc;
	}
}

static float dot_f32_ref(const float *a, const float *b, int64_t n)
{
	float acc = 0;
	for (int64_t i = 0; i < n; i++) acc += a[i] * b[i];
	return acc;
}

static void axpy_f32_ref(float *y, const float *x, float a, int64_t n)
{
	for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

void sg_cpu_glu_ref(sg_act act, const float *g, const float *u, float *out, int64_t n)
{
	if (act == SG_ACT_SILU) {
		for (int64_t i = 0; i < n; i++) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
		return;
	}
	for (int64_t i = 0; i < n; i++) {
		float x = g[i];
		out[i] = 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x))) * u[i];
	}
}

void sg_cpu_tanh_gate_ref(const float *a, const float *b, float *out, int64_t n)
{
	for (int64_t i = 0; i < n; i++) out[i] = tanhf(a[i]) * (1.0f / (1.0f + expf(-b[i])));
}

void sg_cpu_softcap_ref(const float *x, float cap, float *out, int64_t n)
{
	for (int64_t i = 0; i < n; i++) out[i] = cap * tanhf(x[i] / cap);
}

float sg_cpu_expsum_ref(const float *x, float m, float *out, int64_t n)
{
	float s = 0;
	for (int64_t i = 0; i < n; i++) s += out[i] = expf(x[i] - m);
	return s;
}

void sg_cpu_wsum_f32_ref(float *acc, const float *v, int64_t vstride, const float *e, int64_t nk, int64_t d)
{
	for (int64_t k = 0; k < nk; k++)
		for (int64_t i = 0; i < d; i++) acc[i] += e[k] * v[k * vstride + i];
}

void sg_cpu_dots_f32_ref(const float *q, const float *k, int64_t kstride, int64_t nk, int64_t d, float *out)
{
	for (int64_t j = 0; j < nk; j++) out[j] = dot_f32_ref(q, k + j * kstride, d);
}

const sg_cpu_kernels sg_cpu_kernels_ref = {
	.name = "scalar",
	.mv = {sg_cpu_mv_ref, sg_cpu_mv_ref, sg_cpu_mv_ref, sg_cpu_mv_ref, sg_cpu_mv_ref, sg_cpu_mv_ref, sg_cpu_mv_ref, sg_cpu_mv_ref, sg_cpu_mv_ref, sg_cpu_mv_ref, sg_cpu_mv_ref,
	       sg_cpu_mv_ref, sg_cpu_mv_ref, sg_cpu_mv_ref, sg_cpu_mv_ref, sg_cpu_mv_ref, sg_cpu_mv_ref, sg_cpu_mv_ref, sg_cpu_mv_ref, sg_cpu_mv_ref, sg_cpu_mv_ref, sg_cpu_mv_ref},
	.q8_mask = 0,
	.quantize_x = sg_cpu_quantize_x_ref,
	.dot_f32 = dot_f32_ref,
	.axpy_f32 = axpy_f32_ref,
	.glu = sg_cpu_glu_ref,
	.softcap = sg_cpu_softcap_ref,
	.expsum = sg_cpu_expsum_ref,
	.wsum_f32 = sg_cpu_wsum_f32_ref,
	.dots_f32 = sg_cpu_dots_f32_ref,
	.conv_tile = sg_cpu_conv_tile_ref,
	.tanh_gate = sg_cpu_tanh_gate_ref,
};
