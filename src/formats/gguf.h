/*
 * GGUF (versions 2 and 3, little-endian): "GGUF", version u32, tensor count u64, metadata count
 * u64, the metadata key/values, the tensor infos (name, n_dims u32, ne[n_dims] u64, ggml type
 * u32, offset u64), padding to general.alignment (default 32), then the tensor data.
 */
#ifndef SG_FORMATS_GGUF_H
#define SG_FORMATS_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "formats/tensor.h"
#include "saragossa.h"

typedef enum sg_gguf_vtype {
	SG_GGUF_U8 = 0,
	SG_GGUF_I8 = 1,
	SG_GGUF_U16 = 2,
	SG_GGUF_I16 = 3,
	SG_GGUF_U32 = 4,
	SG_GGUF_I32 = 5,
	SG_GGUF_F32 = 6,
	SG_GGUF_BOOL = 7,
	SG_GGUF_STRING = 8,
	SG_GGUF_ARRAY = 9,
	SG_GGUF_U64 = 10,
	SG_GGUF_I64 = 11,
	SG_GGUF_F64 = 12,
} sg_gguf_vtype;

/* Deepest nesting of arrays accepted (arrays of arrays of ...). */
#define SG_GGUF_MAX_DEPTH 8

typedef struct sg_gguf_kv {
	char *key;          /* owned */
	sg_gguf_vtype type;
	union {
		uint64_t u; /* U8..U64, BOOL */
		int64_t i;  /* I8..I64 */
		double f;   /* F32, F64 */
	} v;
	char *str;          /* STRING: owned NUL-terminated copy (embedded NULs cut it short) */
	uint64_t str_len;   /* STRING: length in the file */
	/* ARRAY: element type, count and the elements' bytes in the map (validated at parse) */
	sg_gguf_vtype arr_type;
	uint64_t arr_n;
	const uint8_t *arr_data;
	uint64_t arr_bytes;
} sg_gguf_kv;

typedef struct sg_gguf {
	char *path;     /* the `what` given to sg_gguf_parse (a file's path): owned; names the file in
	                 * errors and tells a reader of the same file that it is this one */
	uint32_t version;
	sg_gguf_kv *kv; /* [n_kv], file order */
	int64_t n_kv;
	sg_tensor *tensors; /* [n_tensors], file order */
	int n_tensors;
	uint64_t alignment;
	uint64_t data_start; /* absolute offset of the data section */
} sg_gguf;

/* Parses and validates a GGUF file held in data[0..size): magic, version (2 or 3; version 1 and
 * big-endian files are refused by name), every metadata value including nested arrays, the
 * alignment, the tensor infos (known ggml type, ne[0] a multiple of the block, data aligned,
 * inside the file, not overlapping another tensor). Tensors get `file` as their file index.
 * `what` (the file's path, or NULL) is copied into out->path. Array values, string-array
 * entries and tensor data point into data[]: the caller keeps it mapped while *out is used.
 * One file is parsed once per model load: the weights keep the result (sg_weights.gguf) and
 * the vocabulary and chat template read it from there (sg_tokenizer_from_gguf,
 * sg_chat_template_from_gguf). */
sg_status sg_gguf_parse(const uint8_t *data, size_t size, const char *what, int file, sg_gguf *out);
void sg_gguf_free(sg_gguf *g);

/* How many times sg_gguf_parse has run in this process (any outcome): lets a test prove that
 * loading a model parses its file once. */
uint64_t sg_gguf_parse_count(void);

const sg_gguf_kv *sg_gguf_find(const sg_gguf *g, const char *key);

/* Typed getters: SG_ERR_NOT_FOUND (no message) for a missing key; SG_ERR_FORMAT naming the key
 * and both types when the stored type does not convert (int getter: any integer or bool; num
 * getter: any integer or float). */
sg_status sg_gguf_get_int(const sg_gguf *g, const char *key, int64_t *out);
sg_status sg_gguf_get_num(const sg_gguf *g, const char *key, double *out);
sg_status sg_gguf_get_str(const sg_gguf *g, const char *key, const char **out);

/* Element i of a numeric array (integers, bools or floats) as int64 / double: SG_ERR_RANGE
 * past the end, SG_ERR_FORMAT for a string or nested array. */
sg_status sg_gguf_arr_int(const sg_gguf_kv *kv, uint64_t i, int64_t *out);
sg_status sg_gguf_arr_num(const sg_gguf_kv *kv, uint64_t i, double *out);

/* Walks the strings of a string array: init, then next() until it returns 0. The pointers are
 * into the map (not NUL-terminated). */
typedef struct sg_gguf_str_iter {
	const uint8_t *p;
	uint64_t left;
} sg_gguf_str_iter;
void sg_gguf_str_iter_init(const sg_gguf_kv *kv, sg_gguf_str_iter *it);
int sg_gguf_str_next(sg_gguf_str_iter *it, const char **s, uint64_t *len);

const char *sg_gguf_vtype_name(int t); /* "u32", "string", "array", ...; "unknown" */

/* Prints a short text form of a value into buf ("4096", "\"llama\"", "[string x 262144]"). */
char *sg_gguf_kv_str(const sg_gguf_kv *kv, char *buf, size_t cap);

#endif
