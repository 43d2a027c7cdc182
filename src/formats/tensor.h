/*
 * One tensor of a weight file, as every format parser reports it: name, storage type, shape and
 * where its bytes lie in the file's memory map. Shapes use the ggml order everywhere: ne[0] is
 * the innermost (contiguous) dimension, so a Hugging Face [out, in] matrix is ne = {in, out},
 * the same as its GGUF counterpart. A family declares each weight's shape once for both.
 */
#ifndef SG_FORMATS_TENSOR_H
#define SG_FORMATS_TENSOR_H

#include <stdint.h>

#include "formats/qtypes.h"

#define SG_MAX_DIMS 8

typedef struct sg_tensor {
	char *name;              /* owned, NUL-terminated */
	sg_type type;            /* storage type; SG_TYPE_MLX_AFFINE for a packed MLX weight */
	int n_dims;              /* 0..SG_MAX_DIMS (0: a scalar) */
	int64_t ne[SG_MAX_DIMS]; /* innermost first; for MLX_AFFINE the logical [cols, rows] */
	uint64_t offset;         /* absolute byte offset of the data in its file */
	uint64_t nbytes;         /* bytes in the file (for MLX: the packed uint32 words only) */
	const uint8_t *data;     /* into the file's map; never written */
	int file;                /* index of the file (shard) that holds it */
	/* MLX affine only: quantization and the companion tensors ([rows][cols/group] each) */
	sg_mlx_q mlx;
	const struct sg_tensor *scales, *biases;
	int companion; /* 1 for a .scales/.biases tensor folded into its weight */
} sg_tensor;

/* Product of ne[0..n_dims); 1 for a scalar. Shapes are validated at parse time not to overflow. */
static inline int64_t sg_tensor_nelem(const sg_tensor *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->n_dims; i++) n *= t->ne[i];
	return n;
}

/* Writes "[a, b, c]" (ne order) into buf; returns buf. */
char *sg_tensor_shape_str(const sg_tensor *t, char *buf, int cap);

/* Multiplies a shape, refusing negative dims and products past 2^62. 0 on success. */
int sg_shape_product(const int64_t *ne, int n, int64_t *out);

#endif
