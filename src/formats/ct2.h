/*
 * CTranslate2 model.bin, the weight file of a CTranslate2 model folder (model.bin + config.json +
 * vocabulary.*, as faster-whisper ships Whisper). All integers little-endian, no padding:
 *
 *   u32 binary version (6)
 *   string spec name ("WhisperSpec"), u32 spec revision
 *   u32 variable count, then per variable:
 *     string name ("encoder/layer_0/self_attention/linear_0/weight")
 *     u8 rank, u32 dims[rank] (outermost first)
 *     u8 dtype (0 f32, 1 i8, 2 i16, 3 i32, 4 f16, 5 bf16), u32 byte count, the bytes
 *   u32 alias count, then per alias: string alias name, string name of the variable it stands for
 *
 * where a string is a u16 length counting a trailing NUL, then that many bytes. Variables are
 * not aligned in the file: a data pointer may sit at any byte, so readers copy or read
 * unaligned. A quantized weight X (i8 or i16) comes with a float variable X_scale: one scale per
 * outermost row for i8 (f32 [rows]), one for the whole matrix for i16 (a scalar).
 */
#ifndef SG_FORMATS_CT2_H
#define SG_FORMATS_CT2_H

#include <stddef.h>
#include <stdint.h>

#include "base/mmap.h"
#include "formats/tensor.h"
#include "saragossa.h"

/* The binary version this reader knows (CTranslate2's CURRENT_BINARY_VERSION). */
#define SG_CT2_VERSION 6

typedef struct sg_ct2_var {
	sg_tensor t;             /* name, type (F32 I8 I16 I32 F16 BF16), ne in ggml order, data into the map */
	const sg_tensor *scale;  /* the X_scale variable of a quantized (I8/I16) weight X, else NULL */
	int is_scale;            /* 1 for a variable that is some quantized weight's scale */
} sg_ct2_var;

typedef struct sg_ct2_alias {
	char *name;   /* owned */
	int target;   /* index into vars */
} sg_ct2_alias;

typedef struct sg_ct2 {
	uint32_t version;
	char *spec;         /* owned: "WhisperSpec" */
	uint32_t revision;
	sg_ct2_var *vars;   /* [n_vars], in file order; owned */
	int n_vars;
	sg_ct2_alias *aliases; /* [n_aliases], in file order; owned */
	int n_aliases;
	int *var_order;        /* [n_vars] indices of vars sorted by name, for lookups; owned */
	int *alias_order;      /* [n_aliases] indices of aliases sorted by name; owned */
	uint64_t data_bytes;   /* sum of the variables' byte counts */
	sg_mapped_file map;    /* set by sg_ct2_open; empty after sg_ct2_parse */
} sg_ct2;

/* Parses a model.bin held in data[0..size) (not copied: the variables point into it). Checks
 * every string, rank, dimension, dtype and byte count against the bytes left, byte count =
 * shape x dtype size, no two variables or aliases of one name, aliases naming a variable, each
 * X_scale the right shape for X, and nothing after the alias table. `what` names the file in
 * errors, which name the variable and the numbers. On error *out is left empty. */
sg_status sg_ct2_parse(const uint8_t *data, size_t size, const char *what, sg_ct2 *out);

/* Maps and parses `path`: a model.bin, or a folder holding one. sg_ct2_close unmaps it. */
sg_status sg_ct2_open(const char *path, sg_ct2 *out);
void sg_ct2_close(sg_ct2 *c);

/* The variable called `name`, following an alias to its variable; NULL when neither exists. */
const sg_ct2_var *sg_ct2_find(const sg_ct2 *c, const char *name);

/* 1 when `path` should be read as CTranslate2: a folder holding model.bin, a file named
 * model.bin, or a file not named .gguf or .safetensors whose first four bytes are a version
 * number below 256 (GGUF and ggml files start with a magic word). Reads at most 4 bytes. */
int sg_ct2_detect(const char *path);

/* "float32", "int8", ... for a CTranslate2 dtype id; NULL for an unknown one. */
const char *sg_ct2_dtype_name(int id);

#endif
