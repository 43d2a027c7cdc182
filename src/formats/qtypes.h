/*
 * Tensor element types: the storage types of GGUF (ggml type ids, kept numerically identical so
 * a GGUF tensor's type field maps directly) plus the plain integer/float types of safetensors
 * and the MLX affine quantization. One description per type (block size, bytes per block) and a
 * scalar reference dequantizer to f32: the ground truth every kernel is tested against.
 *
 * Implemented in qtypes.c (formats module). Layouts follow the GGUF specification; MLX affine
 * is: weight uint32 [rows][cols*bits/32] (little-endian, element j of a row at bit j*bits of the
 * row's bit stream), scales and biases [rows][cols/group] in bf16 or f16, w = scale*q + bias.
 */
#ifndef SG_FORMATS_QTYPES_H
#define SG_FORMATS_QTYPES_H

#include <stddef.h>
#include <stdint.h>

typedef enum sg_type {
	/* ggml / GGUF ids */
	SG_TYPE_F32 = 0,
	SG_TYPE_F16 = 1,
	SG_TYPE_Q4_0 = 2,
	SG_TYPE_Q4_1 = 3,
	SG_TYPE_Q5_0 = 6,
	SG_TYPE_Q5_1 = 7,
	SG_TYPE_Q8_0 = 8,
	SG_TYPE_Q8_1 = 9,
	SG_TYPE_Q2_K = 10,
	SG_TYPE_Q3_K = 11,
	SG_TYPE_Q4_K = 12,
	SG_TYPE_Q5_K = 13,
	SG_TYPE_Q6_K = 14,
	SG_TYPE_Q8_K = 15,
	SG_TYPE_IQ4_NL = 20,
	SG_TYPE_IQ4_XS = 23,
	SG_TYPE_I8 = 24,
	SG_TYPE_I16 = 25,
	SG_TYPE_I32 = 26,
	SG_TYPE_I64 = 27,
	SG_TYPE_F64 = 28,
	SG_TYPE_BF16 = 30,
	/* not in ggml: safetensors-only element types and MLX affine */
	SG_TYPE_U8 = 100,
	SG_TYPE_U32,
	SG_TYPE_BOOL,
	SG_TYPE_F8_E4M3,
	SG_TYPE_F8_E5M2,
	SG_TYPE_MLX_AFFINE, /* needs bits + group size + scales/biases: see sg_mlx_q */
	SG_TYPE_COUNT
} sg_type;

typedef struct sg_type_info {
	const char *name;   /* "Q4_K", "BF16", "MLX_AFFINE" */
	int block;          /* elements per block (1 for plain types) */
	int block_bytes;    /* bytes per block (0 for MLX_AFFINE: depends on bits) */
	int quantized;      /* 1 if block > 1 or affine */
} sg_type_info;

/* NULL for an id that is not a known type. */
const sg_type_info *sg_type_get(int type);
const char *sg_type_name(int type); /* "unknown" for unknown ids */

/* The id whose name is `name` ("Q4_K", "bf16": case-insensitive), or -1. */
int sg_type_from_name(const char *name);

/* 1 for the types a weight matrix may be stored in and a matmul consumes (floats and the
 * block-quantized types); 0 for integer/bool element types. */
int sg_type_is_float_or_quant(sg_type t);

/* Bytes of a row of n elements; 0 if n is not a multiple of the block size (or for MLX). */
size_t sg_type_row_bytes(sg_type t, int64_t n);

/* Reference dequantization of n elements (n a multiple of the block) starting at a block
 * boundary. Works for every float/int/quantized type above except MLX_AFFINE. */
void sg_dequantize_ref(sg_type t, const void *src, float *dst, int64_t n);

/* MLX affine quantized matrix (one row's worth of parameters is enough to dequantize a row). */
typedef struct sg_mlx_q {
	int bits;           /* 2, 3, 4, 5, 6 or 8 */
	int group;          /* 32, 64 or 128 */
	sg_type sb_type;    /* SG_TYPE_BF16 or SG_TYPE_F16: scales and biases */
} sg_mlx_q;

/* uint32 words per packed row of `cols` elements (cols*bits/32), or 0 if cols*bits is not a
 * multiple of 32 or bits is not one of the supported widths. */
int64_t sg_mlx_packed_words(int bits, int64_t cols);

/* Dequantizes one row of `cols` elements: packed points at the row's first uint32, scales and
 * biases at the row's first group. cols must be a multiple of the group and of 32/gcd(bits,32). */
void sg_mlx_dequantize_row_ref(const sg_mlx_q *q, const uint32_t *packed, const void *scales,
			       const void *biases, float *dst, int64_t cols);

/* Scalar conversions used everywhere. */
float sg_f16_to_f32(uint16_t h);
uint16_t sg_f32_to_f16(float f); /* round to nearest even */
float sg_bf16_to_f32(uint16_t h);
uint16_t sg_f32_to_bf16(float f); /* round to nearest even, NaN preserved */

#endif
