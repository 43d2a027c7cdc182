/*
 * whisper.cpp's ggml model file (ggml-tiny.en.bin and the like), the format before GGUF. All
 * integers are little-endian int32, nothing is aligned:
 *
 *   magic 0x67676d6c ("ggml")
 *   hparams: n_vocab, n_audio_ctx, n_audio_state, n_audio_head, n_audio_layer, n_text_ctx,
 *            n_text_state, n_text_head, n_text_layer, n_mels, ftype (+ 1000 x quantization
 *            version in quantized files)
 *   mel filters: n_mel, n_fft, then n_mel * n_fft f32
 *   vocabulary: count, then per token a u32 byte length and the bytes (byte-level BPE bytes,
 *            not the GPT-2 unicode spelling); special tokens past the count are implied
 *   tensors until the end of the file: n_dims, name length, ggml type, ne[n_dims] (innermost
 *            first), the name, the data (F32, F16 or a ggml block-quantized type)
 */
#ifndef SG_FORMATS_GGML_WHISPER_H
#define SG_FORMATS_GGML_WHISPER_H

#include <stddef.h>
#include <stdint.h>

#include "base/mmap.h"
#include "formats/tensor.h"
#include "saragossa.h"

#define SG_GGML_MAGIC 0x67676d6cu

typedef struct sg_ggml_whisper {
	int32_t hp[11];          /* the hparams in file order (see above) */
	int n_mel, n_fft;
	const uint8_t *filters;  /* n_mel * n_fft f32, unaligned, into the data */
	char **vocab;            /* [n_vocab_words] owned NUL-terminated copies */
	uint32_t *vocab_len;     /* [n_vocab_words] byte lengths (a token may hold a 0 byte) */
	int n_vocab_words;
	sg_tensor *tensors;      /* [n_tensors], names owned, data into the bytes */
	int n_tensors;
	sg_mapped_file map;      /* set by sg_ggml_whisper_open */
} sg_ggml_whisper;

/* Parses a ggml Whisper file held in data[0..size) (not copied). Checks every count, length,
 * dimension and type against the bytes left, and refuses duplicate tensor names. `what` names
 * the file in errors, which give the offset and the numbers. On error *out is left empty. */
sg_status sg_ggml_whisper_parse(const uint8_t *data, size_t size, const char *what, sg_ggml_whisper *out);
sg_status sg_ggml_whisper_open(const char *path, sg_ggml_whisper *out);
void sg_ggml_whisper_close(sg_ggml_whisper *g);
const sg_tensor *sg_ggml_whisper_find(const sg_ggml_whisper *g, const char *name);
/* 1 when the file at path starts with the ggml magic (reads 4 bytes). */
int sg_ggml_whisper_detect(const char *path);

#endif
