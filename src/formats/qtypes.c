/*
 * Type descriptions and scalar reference dequantizers. Every layout here is written from the
 * GGUF / ggml block-format specification: each block stores one or two f16 scales and packed
 * integers; the value is d*q (symmetric types), d*q + m (types with a minimum) or, for the
 * k-quants, a super-block of 256 with 6- or 8-bit sub-block scales.
 *
 * The products are written in the same order as the Python `gguf` package's dequantizers
 * ((d*sc)*q - dmin*m), so with the ISO C mode (no implicit FMA contraction) the results match
 * it bit for bit. Kernels are tested against these functions.
 */
#include "formats/qtypes.h"

#include <string.h>
#include <strings.h>

#define QK 32   /* block of the legacy quants */
#define QK_K 256 /* super-block of the k-quants and IQ4_XS */

static const sg_type_info infos[SG_TYPE_COUNT] = {
	[SG_TYPE_F32] = {"F32", 1, 4, 0},
	[SG_TYPE_F16] = {"F16", 1, 2, 0},
	[SG_TYPE_Q4_0] = {"Q4_0", QK, 2 + QK / 2, 1},
	[SG_TYPE_Q4_1] = {"Q4_1", QK, 4 + QK / 2, 1},
	[SG_TYPE_Q5_0] = {"Q5_0", QK, 2 + 4 + QK / 2, 1},
	[SG_TYPE_Q5_1] = {"Q5_1", QK, 4 + 4 + QK / 2, 1},
	[SG_TYPE_Q8_0] = {"Q8_0", QK, 2 + QK, 1},
	[SG_TYPE_Q8_1] = {"Q8_1", QK, 4 + QK, 1},
	[SG_TYPE_Q2_K] = {"Q2_K", QK_K, QK_K / 16 + QK_K / 4 + 4, 1},
	[SG_TYPE_Q3_K] = {"Q3_K", QK_K, QK_K / 8 + QK_K / 4 + 12 + 2, 1},
	[SG_TYPE_Q4_K] = {"Q4_K", QK_K, 4 + 12 + QK_K / 2, 1},
	[SG_TYPE_Q5_K] = {"Q5_K", QK_K, 4 + 12 + QK_K / 8 + QK_K / 2, 1},
	[SG_TYPE_Q6_K] = {"Q6_K", QK_K, QK_K / 2 + QK_K / 4 + QK_K / 16 + 2, 1},
	[SG_TYPE_Q8_K] = {"Q8_K", QK_K, 4 + QK_K + QK_K / 8, 1},
	[SG_TYPE_IQ4_NL] = {"IQ4_NL", QK, 2 + QK / 2, 1},
	[SG_TYPE_IQ4_XS] = {"IQ4_XS", QK_K, 2 + 2 + QK_K / 64 + QK_K / 2, 1},
	[SG_TYPE_I8] = {"I8", 1, 1, 0},
	[SG_TYPE_I16] = {"I16", 1, 2, 0},
	[SG_TYPE_I32] = {"I32", 1, 4, 0},
	[SG_TYPE_I64] = {"I64", 1, 8, 0},
	[SG_TYPE_F64] = {"F64", 1, 8, 0},
	[SG_TYPE_BF16] = {"BF16", 1, 2, 0},
	[SG_TYPE_U8] = {"U8", 1, 1, 0},
	[SG_TYPE_U32] = {"U32", 1, 4, 0},
	[SG_TYPE_BOOL] = {"BOOL", 1, 1, 0},
	[SG_TYPE_F8_E4M3] = {"F8_E4M3", 1, 1, 0},
	[SG_TYPE_F8_E5M2] = {"F8_E5M2", 1, 1, 0},
	[SG_TYPE_MLX_AFFINE] = {"MLX_AFFINE", 1, 0, 1},
};

const sg_type_info *sg_type_get(int type)
{
	if (type < 0 || type >= SG_TYPE_COUNT || !infos[type].name) return NULL;
	return &infos[type];
}

const char *sg_type_name(int type)
{
	const sg_type_info *ti = sg_type_get(type);
	return ti ? ti->name : "unknown";
}

int sg_type_from_name(const char *name)
{
	if (!name) return -1;
	for (int i = 0; i < SG_TYPE_COUNT; i++)
		if (infos[i].name && !strcasecmp(infos[i].name, name)) return i;
	return -1;
}

int sg_type_is_float_or_quant(sg_type t)
{
	switch (t) {
	case SG_TYPE_I8:
	case SG_TYPE_I16:
	case SG_TYPE_I32:
	case SG_TYPE_I64:
	case SG_TYPE_U8:
	case SG_TYPE_U32:
	case SG_TYPE_BOOL: return 0;
	default: return sg_type_get((int)t) != NULL;
	}
}

size_t sg_type_row_bytes(sg_type t, int64_t n)
{
	const sg_type_info *ti = sg_type_get((int)t);
	if (!ti || ti->block_bytes == 0 || n < 0 || n % ti->block) return 0;
	uint64_t blocks = (uint64_t)(n / ti->block);
	if (blocks > SIZE_MAX / (uint64_t)ti->block_bytes) return 0;
	return (size_t)(blocks * (uint64_t)ti->block_bytes);
}

/* ---- scalar conversions ---- */

static inline float bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static inline uint32_t f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

float sg_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f;
	uint32_t man = h & 0x3ff;
	if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13)); /* inf / NaN, payload kept */
	if (exp == 0) {
		if (man == 0) return bits_f32(sign);
		/* subnormal: man * 2^-24 is exact in f32 */
		float v = (float)man * 0x1p-24f;
		return sign ? -v : v;
	}
	return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t sg_f32_to_f16(float f)
{
	uint32_t u = f32_bits(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
	uint32_t a = u & 0x7fffffff;
	if (a > 0x7f800000u) return sign | 0x7e00 | (uint16_t)((a >> 13) & 0x3ff); /* NaN stays NaN */
	if (a >= 0x477ff000u) return sign | 0x7c00; /* rounds to or past 65520: inf */
	if (a < 0x38800000u) {
		/* below the smallest normal f16 (2^-14): subnormal or zero, round to nearest even */
		if (a < 0x33000000u) return sign; /* < 2^-25: rounds to zero */
		uint32_t man = (a & 0x7fffff) | 0x800000;
		/* value = man * 2^(e-150); in units of 2^-24 that is man >> (126 - e), s in 14..24 */
		int s = 126 - (int)(a >> 23);
		uint32_t q = man >> s;
		uint32_t rem = man & ((1u << s) - 1);
		uint32_t half = 1u << (s - 1);
		if (rem > half || (rem == half && (q & 1))) q++;
		return sign | (uint16_t)q;
	}
	uint32_t r = a + 0xfff + ((a >> 13) & 1) - 0x38000000u; /* rebias 127->15 and round */
	return sign | (uint16_t)(r >> 13);
}

float sg_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t sg_f32_to_bf16(float f)
{
	uint32_t u = f32_bits(f);
	if ((u & 0x7fffffff) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
	return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

static float f8_e4m3_to_f32(uint8_t b)
{
	/* E4M3 "fn": bias 7, no infinities, S.1111.111 is NaN */
	int e = (b >> 3) & 0xf, m = b & 7;
	float v;
	if (e == 15 && m == 7) v = bits_f32(0x7fc00000u);
	else if (e == 0) v = (float)m * 0x1p-9f;
	else v = bits_f32((uint32_t)(e + 120) << 23 | (uint32_t)m << 20);
	return (b & 0x80) ? -v : v;
}

/* E5M2 has the f16 exponent and the two top mantissa bits: it is the high byte of an f16. */
static float f8_e5m2_to_f32(uint8_t b) { return sg_f16_to_f32((uint16_t)(b << 8)); }

/* ---- block dequantizers: one block of `src` to dst ---- */

static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline float rdh(const uint8_t *p) { return sg_f16_to_f32(rd16(p)); }

static void deq_q4_0(const uint8_t *b, float *y)
{
	float d = rdh(b);
	const uint8_t *qs = b + 2;
	for (int j = 0; j < QK / 2; j++) {
		y[j] = d * (float)((qs[j] & 0xf) - 8);
		y[j + QK / 2] = d * (float)((qs[j] >> 4) - 8);
	}
}

static void deq_q4_1(const uint8_t *b, float *y)
{
	float d = rdh(b), m = rdh(b + 2);
	const uint8_t *qs = b + 4;
	for (int j = 0; j < QK / 2; j++) {
		y[j] = d * (float)(qs[j] & 0xf) + m;
		y[j + QK / 2] = d * (float)(qs[j] >> 4) + m;
	}
}

/* Q5: the fifth bit of element j (j < 32) is bit j of the little-endian qh word. */
static void deq_q5_0(const uint8_t *b, float *y)
{
	float d = rdh(b);
	uint32_t qh = rd32(b + 2);
	const uint8_t *qs = b + 6;
	for (int j = 0; j < QK / 2; j++) {
		int lo = (qs[j] & 0xf) | (int)(((qh >> j) & 1) << 4);
		int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
		y[j] = d * (float)(lo - 16);
		y[j + QK / 2] = d * (float)(hi - 16);
	}
}

static void deq_q5_1(const uint8_t *b, float *y)
{
	float d = rdh(b), m = rdh(b + 2);
	uint32_t qh = rd32(b + 4);
	const uint8_t *qs = b + 8;
	for (int j = 0; j < QK / 2; j++) {
		int lo = (qs[j] & 0xf) | (int)(((qh >> j) & 1) << 4);
		int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
		y[j] = d * (float)lo + m;
		y[j + QK / 2] = d * (float)hi + m;
	}
}

static void deq_q8_0(const uint8_t *b, float *y)
{
	float d = rdh(b);
	for (int j = 0; j < QK; j++) y[j] = (float)(int8_t)b[2 + j] * d;
}

static void deq_q8_1(const uint8_t *b, float *y)
{
	float d = rdh(b); /* b+2 holds d*sum(q), used only by dot products */
	for (int j = 0; j < QK; j++) y[j] = (float)(int8_t)b[4 + j] * d;
}

/* Q2_K: scales[16] (low nibble scale, high nibble min), qs[64], d, dmin. Elements come in
 * 128-halves; within one, 4 bit-planes (shift 0,2,4,6) of 32 bytes, 16 elements per scale. */
static void deq_q2_k(const uint8_t *b, float *y)
{
	const uint8_t *sc = b, *qs = b + 16;
	float d = rdh(b + 80), dmin = rdh(b + 82);
	int is = 0;
	for (int half = 0; half < 2; half++, qs += 32)
		for (int shift = 0; shift < 8; shift += 2)
			for (int k = 0; k < 2; k++, is++) {
				float dl = d * (float)(sc[is] & 0xf), ml = dmin * (float)(sc[is] >> 4);
				for (int l = 0; l < 16; l++) *y++ = dl * (float)((qs[16 * k + l] >> shift) & 3) - ml;
			}
}

/* 6-bit signed scale i of Q3_K: low 4 bits in bytes 0..7 (nibble i/8), high 2 bits in bytes
 * 8..11 (byte 8+i%4, bit pair i/4). */
static int q3k_scale(const uint8_t *s, int i)
{
	int lo = i < 8 ? (s[i] & 0xf) : (s[i - 8] >> 4);
	int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
	return (lo | hi << 4) - 32;
}

/* Q3_K: hmask[32], qs[64], scales[12], d. q = 2 low bits - (high bit clear ? 4 : 0). */
static void deq_q3_k(const uint8_t *b, float *y)
{
	const uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
	float d = rdh(b + 108);
	int is = 0, bit = 0;
	for (int half = 0; half < 2; half++, qs += 32)
		for (int shift = 0; shift < 8; shift += 2, bit++)
			for (int k = 0; k < 2; k++, is++) {
				float dl = d * (float)q3k_scale(sc, is);
				for (int l = 0; l < 16; l++) {
					int idx = 16 * k + l;
					int q = ((qs[idx] >> shift) & 3) - ((hm[idx] >> bit) & 1 ? 0 : 4);
					*y++ = dl * (float)q;
				}
			}
}

/* Scale and min j (0..7) of the 12-byte packed 6-bit pairs shared by Q4_K and Q5_K. */
static void k4_scale_min(const uint8_t *s, int j, int *sc, int *m)
{
	if (j < 4) {
		*sc = s[j] & 63;
		*m = s[j + 4] & 63;
	} else {
		*sc = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
		*m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
	}
}

/* Q4_K: d, dmin, scales[12], qs[128]; 64-element chunks: low nibbles then high nibbles. */
static void deq_q4_k(const uint8_t *b, float *y)
{
	float d = rdh(b), dmin = rdh(b + 2);
	const uint8_t *s = b + 4, *qs = b + 16;
	for (int j = 0; j < 8; j += 2, qs += 32) {
		int sc, m;
		k4_scale_min(s, j, &sc, &m);
		float d1 = d * (float)sc, m1 = dmin * (float)m;
		k4_scale_min(s, j + 1, &sc, &m);
		float d2 = d * (float)sc, m2 = dmin * (float)m;
		for (int l = 0; l < 32; l++) *y++ = d1 * (float)(qs[l] & 0xf) - m1;
		for (int l = 0; l < 32; l++) *y++ = d2 * (float)(qs[l] >> 4) - m2;
	}
}

/* Q5_K: as Q4_K plus qh[32]: the fifth bit of element l of sub-block j is bit j of qh[l]. */
static void deq_q5_k(const uint8_t *b, float *y)
{
	float d = rdh(b), dmin = rdh(b + 2);
	const uint8_t *s = b + 4, *qh = b + 16, *qs = b + 48;
	for (int j = 0; j < 8; j += 2, qs += 32) {
		int sc, m;
		k4_scale_min(s, j, &sc, &m);
		float d1 = d * (float)sc, m1 = dmin * (float)m;
		k4_scale_min(s, j + 1, &sc, &m);
		float d2 = d * (float)sc, m2 = dmin * (float)m;
		for (int l = 0; l < 32; l++) *y++ = d1 * (float)((qs[l] & 0xf) | ((qh[l] >> j) & 1) << 4) - m1;
		for (int l = 0; l < 32; l++)
			*y++ = d2 * (float)((qs[l] >> 4) | ((qh[l] >> (j + 1)) & 1) << 4) - m2;
	}
}

/* Q6_K: ql[128], qh[64], int8 scales[16], d. 128-halves; in each, element l + 32*k takes
 * the low/high nibble of ql and bit pair k of qh[l]. */
static void deq_q6_k(const uint8_t *b, float *y)
{
	const uint8_t *ql = b, *qh = b + 128;
	const int8_t *sc = (const int8_t *)(b + 192);
	float d = rdh(b + 208);
	for (int half = 0; half < 2; half++, ql += 64, qh += 32, sc += 8, y += 128)
		for (int l = 0; l < 32; l++) {
			int is = l / 16;
			int q1 = ((ql[l] & 0xf) | ((qh[l] >> 0) & 3) << 4) - 32;
			int q2 = ((ql[l + 32] & 0xf) | ((qh[l] >> 2) & 3) << 4) - 32;
			int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
			int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
			y[l] = d * (float)sc[is] * (float)q1;
			y[l + 32] = d * (float)sc[is + 2] * (float)q2;
			y[l + 64] = d * (float)sc[is + 4] * (float)q3;
			y[l + 96] = d * (float)sc[is + 6] * (float)q4;
		}
}

static void deq_q8_k(const uint8_t *b, float *y)
{
	float d = bits_f32(rd32(b)); /* f32 scale; bsums after qs serve dot products only */
	for (int j = 0; j < QK_K; j++) y[j] = d * (float)(int8_t)b[4 + j];
}

/* The non-uniform 4-bit codebook of IQ4_NL / IQ4_XS (from the GGUF specification). */
static const int8_t iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
				      1,    13,   25,  38,  53,  69,  89,  113};

static void deq_iq4_nl(const uint8_t *b, float *y)
{
	float d = rdh(b);
	const uint8_t *qs = b + 2;
	for (int j = 0; j < QK / 2; j++) {
		y[j] = d * (float)iq4_values[qs[j] & 0xf];
		y[j + QK / 2] = d * (float)iq4_values[qs[j] >> 4];
	}
}

/* IQ4_XS: d, scales_h (u16: 2 bits per sub-block), scales_l[4] (nibbles), qs[128]. */
static void deq_iq4_xs(const uint8_t *b, float *y)
{
	float d = rdh(b);
	uint16_t sh = rd16(b + 2);
	const uint8_t *sl = b + 4, *qs = b + 8;
	for (int ib = 0; ib < QK_K / 32; ib++, qs += 16, y += 32) {
		int ls = ((sl[ib / 2] >> (4 * (ib % 2))) & 0xf) | (((sh >> (2 * ib)) & 3) << 4);
		float dl = d * (float)(ls - 32);
		for (int j = 0; j < 16; j++) {
			y[j] = dl * (float)iq4_values[qs[j] & 0xf];
			y[j + 16] = dl * (float)iq4_values[qs[j] >> 4];
		}
	}
}

typedef void (*block_fn)(const uint8_t *, float *);

static block_fn block_fn_of(sg_type t)
{
	switch (t) {
	case SG_TYPE_Q4_0: return deq_q4_0;
	case SG_TYPE_Q4_1: return deq_q4_1;
	case SG_TYPE_Q5_0: return deq_q5_0;
	case SG_TYPE_Q5_1: return deq_q5_1;
	case SG_TYPE_Q8_0: return deq_q8_0;
	case SG_TYPE_Q8_1: return deq_q8_1;
	case SG_TYPE_Q2_K: return deq_q2_k;
	case SG_TYPE_Q3_K: return deq_q3_k;
	case SG_TYPE_Q4_K: return deq_q4_k;
	case SG_TYPE_Q5_K: return deq_q5_k;
	case SG_TYPE_Q6_K: return deq_q6_k;
	case SG_TYPE_Q8_K: return deq_q8_k;
	case SG_TYPE_IQ4_NL: return deq_iq4_nl;
	case SG_TYPE_IQ4_XS: return deq_iq4_xs;
	default: return NULL;
	}
}

void sg_dequantize_ref(sg_type t, const void *src, float *dst, int64_t n)
{
	const uint8_t *p = src;
	block_fn fn = block_fn_of(t);
	if (fn) {
		const sg_type_info *ti = sg_type_get((int)t);
		for (int64_t i = 0; i + ti->block <= n; i += ti->block, p += ti->block_bytes) fn(p, dst + i);
		return;
	}
	/* plain element types; unaligned-safe reads through memcpy */
	for (int64_t i = 0; i < n; i++) {
		switch (t) {
		case SG_TYPE_F32: memcpy(&dst[i], p + 4 * i, 4); break;
		case SG_TYPE_F16: dst[i] = rdh(p + 2 * i); break;
		case SG_TYPE_BF16: dst[i] = sg_bf16_to_f32(rd16(p + 2 * i)); break;
		case SG_TYPE_F64: {
			double v;
			memcpy(&v, p + 8 * i, 8);
			dst[i] = (float)v;
			break;
		}
		case SG_TYPE_I8: dst[i] = (float)(int8_t)p[i]; break;
		case SG_TYPE_U8: dst[i] = (float)p[i]; break;
		case SG_TYPE_BOOL: dst[i] = p[i] ? 1.0f : 0.0f; break;
		case SG_TYPE_I16: dst[i] = (float)(int16_t)rd16(p + 2 * i); break;
		case SG_TYPE_I32: dst[i] = (float)(int32_t)rd32(p + 4 * i); break;
		case SG_TYPE_U32: dst[i] = (float)rd32(p + 4 * i); break;
		case SG_TYPE_I64: {
			int64_t v;
			memcpy(&v, p + 8 * i, 8);
			dst[i] = (float)v;
			break;
		}
		case SG_TYPE_F8_E4M3: dst[i] = f8_e4m3_to_f32(p[i]); break;
		case SG_TYPE_F8_E5M2: dst[i] = f8_e5m2_to_f32(p[i]); break;
		default: dst[i] = 0.0f; break; /* MLX_AFFINE / unknown: not dequantizable alone */
		}
	}
}

/* ---- MLX affine ---- */

static int mlx_bits_ok(int bits)
{
	return bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8;
}

int64_t sg_mlx_packed_words(int bits, int64_t cols)
{
	if (!mlx_bits_ok(bits) || cols <= 0 || (cols * bits) % 32) return 0;
	return cols * bits / 32;
}

void sg_mlx_dequantize_row_ref(const sg_mlx_q *q, const uint32_t *packed, const void *scales,
			       const void *biases, float *dst, int64_t cols)
{
	const int bits = q->bits;
	const uint32_t mask = (1u << bits) - 1;
	const uint8_t *sp = scales, *bp = biases;
	float s = 0, bias = 0;
	for (int64_t j = 0; j < cols; j++) {
		if (j % q->group == 0) {
			int64_t g = j / q->group;
			uint16_t sh = rd16(sp + 2 * g), bh = rd16(bp + 2 * g);
			s = q->sb_type == SG_TYPE_BF16 ? sg_bf16_to_f32(sh) : sg_f16_to_f32(sh);
			bias = q->sb_type == SG_TYPE_BF16 ? sg_bf16_to_f32(bh) : sg_f16_to_f32(bh);
		}
		/* element j sits at bit j*bits of the row's little-endian bit stream and may span
		 * two words (3, 5 and 6 bits) */
		int64_t bit = j * bits;
		int64_t w = bit / 32;
		int off = (int)(bit % 32);
		uint32_t v = packed[w] >> off;
		if (off + bits > 32) v |= packed[w + 1] << (32 - off);
		dst[j] = s * (float)(v & mask) + bias;
	}
}
