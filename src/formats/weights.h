/*
 * A loaded model's weights, whatever the format: a Hugging Face folder (config.json + one or
 * many safetensors shards, MLX affine-quantized or not), an MLX folder whose weights are one
 * weights.npz (numpy's archive, as older MLX converters write it) or a GGUF file. Files are memory-mapped;
 * tensors point into the maps and nothing is copied or read until used.
 *
 * MLX quantized weights are folded: W.weight (uint32, packed) becomes one tensor of type
 * SG_TYPE_MLX_AFFINE with its logical shape, and W.scales / W.biases hang off it as companions.
 *
 * The binder checks each weight a family declares against what the file holds and says both on
 * mismatch: `blk.3.attn_q.weight: expected Q4_K [2048, 4096], found F16 [2048, 2048]`.
 */
#ifndef SG_FORMATS_WEIGHTS_H
#define SG_FORMATS_WEIGHTS_H

#include <jansson.h>

#include "base/mmap.h"
#include "formats/gguf.h"
#include "formats/npz.h"
#include "formats/safetensors.h"
#include "formats/tensor.h"
#include "saragossa.h"

/* NPZ: numpy's archive (weights.npz of MLX folders), named tensors like safetensors' */
typedef enum sg_weights_format { SG_WEIGHTS_SAFETENSORS = 1, SG_WEIGHTS_GGUF = 2, SG_WEIGHTS_NPZ = 3 } sg_weights_format;

typedef struct sg_weights {
	sg_weights_format format;
	char *path;               /* as opened */
	sg_mapped_file *files;    /* [n_files] */
	int n_files;
	sg_safetensors *st;       /* [n_files] when SAFETENSORS */
	sg_gguf gguf;             /* when GGUF (one file) */
	sg_npz npz;               /* when NPZ (one file) */
	sg_tensor **tensors;      /* [n_tensors]: every tensor, companions included, in file order */
	int n_tensors;
	json_t *config;           /* config.json beside the weights, or NULL; owned */
	int *index;               /* name hash table: [index_cap] slots of tensor indices, -1 empty */
	int index_cap;
} sg_weights;

/* Opens `path`: a folder (model.safetensors.index.json, else model.safetensors alone, else every
 * *.safetensors, else weights.npz, else one *.gguf), a .safetensors or .npz file (config.json
 * read from beside it when present) or a GGUF file. Validates every file's header, refuses duplicate tensor names across
 * shards and index entries naming a tensor its shard lacks, and folds MLX quantized weights
 * using config.json's "quantization". On success the caller owns *out (sg_weights_close). */
sg_status sg_weights_open(const char *path, sg_weights **out);
void sg_weights_close(sg_weights *w);

/* The tensor with exactly this name, or NULL. */
const sg_tensor *sg_weights_find(const sg_weights *w, const char *name);

/* Name translation between GGUF names ("blk.{L}.attn_q") and Hugging Face names
 * ("model.layers.{L}.self_attn.q_proj"); patterns have at most one {L}, and the suffix after the
 * stem (".weight", ".bias") is carried over. A family passes its own table or the default. */
typedef struct sg_name_pair {
	const char *gguf;
	const char *hf;
} sg_name_pair;
extern const sg_name_pair sg_names_default[]; /* llama/qwen/mistral/MoE; ends with {0} */
extern const sg_name_pair sg_names_gemma[];   /* the default plus Gemma's sandwich norms */

/* Translates `name`; returns 1 and writes buf on a match, 0 if no pattern matches. */
int sg_names_gguf_to_hf(const sg_name_pair *map, const char *name, char *buf, size_t cap);
int sg_names_hf_to_gguf(const sg_name_pair *map, const char *name, char *buf, size_t cap);

/* Finds a tensor by its GGUF-style name in any format: the exact name first, then (for
 * safetensors) the Hugging Face name, also under the multimodal prefixes
 * ("model.language_model.", "language_model."). */
const sg_tensor *sg_weights_lookup(const sg_weights *w, const sg_name_pair *map, const char *gguf_name);

/* What a family expects of one weight. */
enum {
	SG_WANT_ANY = -1,    /* any type */
	SG_WANT_FLOAT = -2,  /* F32, F16 or BF16 (norms, biases) */
	SG_WANT_MATMUL = -3, /* a float or quantized type a matmul consumes, MLX affine included */
};
typedef struct sg_bind {
	const char *name;   /* GGUF-style, may hold {L} */
	int want;           /* an sg_type, or SG_WANT_* */
	int n_dims;         /* 0 = do not check the shape */
	int64_t ne[4];      /* expected shape, innermost first; -1 = any size */
	int optional;       /* absent is fine: *out = NULL */
	const sg_tensor **out;
} sg_bind;

/* Binds n specs for `layer` (substituted for {L}; -1 if none). Stops at the first failure with
 * "<name>: expected <type> <shape>, found <type> <shape>" or "<name>: missing". */
sg_status sg_weights_bind(const sg_weights *w, const sg_name_pair *map, const sg_bind *specs, int n, int layer);

/* "Q4_K", "BF16", or for MLX "MLX_AFFINE u4 g64 (bf16)". */
char *sg_tensor_type_str(const sg_tensor *t, char *buf, size_t cap);

#endif
