/*
 * Whisper (OpenAI's speech recognition model): an audio encoder over a log-mel window and a text
 * decoder that cross-attends to it. Loads from a Hugging Face folder (model_type "whisper",
 * safetensors), an MLX folder (mlx-examples' converter: config.json with openai-whisper's
 * dimensions, weights.safetensors or weights.npz, MLX affine when quantized), a CTranslate2
 * folder (model.bin, as faster-whisper ships it) or a whisper.cpp ggml .bin. The forward runs
 * on the backend op table.
 *
 * Encoder: x = gelu(conv1(mel)) (k=3, pad 1), x = gelu(conv2(x)) (k=3, stride 2, pad 1),
 * x += positions, pre-norm blocks (LayerNorm, attention with biases on q and v and out, none on
 * k; LayerNorm, GELU MLP), final LayerNorm.
 * Decoder: x = embed[id] + positions[pos], pre-norm blocks (causal self-attention over a KV cache
 * per sequence, cross-attention over the encoder output's K/V computed once per encode, MLP),
 * final LayerNorm, logits = x embed^T.
 *
 * One sg_whisper holds the weights and the state of one stream (the current window's encoder
 * output and cross K/V, n_seq decoder KV caches); it is not for use from two threads at once.
 */
#ifndef SG_MODELS_WHISPER_H
#define SG_MODELS_WHISPER_H

#include <stddef.h>
#include <stdint.h>

#include "saragossa.h"

typedef struct sg_whisper sg_whisper;

typedef struct sg_whisper_info {
	int n_mels;          /* 80 or 128 */
	int n_audio_ctx;     /* encoder positions after the stride-2 conv: 1500 for real models */
	int n_text_ctx;      /* decoder positions: 448 */
	int n_vocab;
	int d_model, n_audio_layer, n_text_layer, n_audio_head, n_text_head;
	int multilingual;    /* vocab >= 51865 */
	int n_align_heads;   /* alignment heads (layer, head) pairs for word timestamps: the model's list,
	                      * else every head of the last half of the decoder layers */
	const int (*align_heads)[2];
	const char *source;  /* "hf", "ct2", "ggml", "mlx" */
	const char *dtype;   /* weight type as stored, for inspect */
	int n_ffn;           /* MLP hidden size (4 * d_model for real models) */
	int64_t n_params;    /* weight element count */
	int64_t weight_bytes; /* bytes the weights take as stored */
} sg_whisper_info;

typedef struct sg_whisper_params {
	const char *backend;   /* NULL = default backend (SARAGOSSA_BACKEND), "cpu", "cuda" */
	int n_threads;         /* 0 = default */
	int n_seq;             /* decoder KV sequences kept at once (beam width); 0 = 1 */
} sg_whisper_params;

sg_whisper_params sg_whisper_default_params(void);

/* path: a Hugging Face folder (config.json model_type whisper + safetensors), an MLX folder
 * (config.json with n_audio_state + weights.safetensors or weights.npz), a CTranslate2 folder
 * (model.bin + config.json + vocabulary.* / tokenizer.json), or a whisper.cpp ggml .bin.
 * Every weight is bound with its expected shape; a missing or misshapen one is an error naming
 * it. The caller owns *out (sg_whisper_free). */
sg_status sg_whisper_load(const char *path, const sg_whisper_params *p, sg_whisper **out);
void sg_whisper_free(sg_whisper *w);
/* What path holds, as sg_whisper_load would report it, without a backend or binding a weight
 * (inspect): every field of *out but align_heads (NULL; n_align_heads is set); out->dtype
 * points into dtype[cap]. SG_ERR_UNSUPPORTED when path is not a Whisper model. */
sg_status sg_whisper_describe(const char *path, sg_whisper_info *out, char *dtype, size_t cap);
const sg_whisper_info *sg_whisper_get_info(const sg_whisper *w);

/* The vocabulary file found beside the weights: tokenizer.json, else (MLX folders carry none)
 * gpt2.tiktoken or multilingual.tiktoken as the model's vocabulary size asks; NULL when there
 * is none or the file embeds its vocabulary, as ggml does (then sg_whisper_vocab gives the
 * token strings). */
const char *sg_whisper_tokenizer_path(const sg_whisper *w);
/* Token string of id from an embedded vocabulary (ggml); NULL when there is none or id is out
 * of range. The string belongs to w. */
const char *sg_whisper_vocab(const sg_whisper *w, int id);
/* The number of token strings the embedded vocabulary holds (0 without one: ids from 0). */
int sg_whisper_vocab_count(const sg_whisper *w);
/* As sg_whisper_vocab, with the token's byte length in *len (a token may hold a 0 byte). */
const char *sg_whisper_vocab_bytes(const sg_whisper *w, int id, size_t *len);

/* Encode one window: mel is [n_mels][n_frames] (row-major, n_frames = 2 * n_audio_ctx = 3000
 * for real models), already padded/trimmed to the window. Computes the encoder output and each
 * decoder layer's cross-attention K/V once; they stay in the model until the next encode. */
sg_status sg_whisper_encode(sg_whisper *w, const float *mel, int n_frames);
/* Copy the encoder output [n_audio_ctx][d_model] to the host (tests, parity). */
sg_status sg_whisper_encoder_output(sg_whisper *w, float *out);

/* Decoder: run n tokens of sequence `seq` (0 <= seq < n_seq) starting at position `pos`
 * (positions < pos must already be in that sequence's KV cache; pos = 0 resets it).
 * logits: [n][n_vocab] when all_logits, else [n_vocab] for the last token only. */
sg_status sg_whisper_decode(sg_whisper *w, int seq, const int32_t *ids, int n, int pos, int all_logits,
			    float *logits);
/* Beam search: copy the first n_pos positions of seq src's KV cache to seq dst. */
sg_status sg_whisper_seq_copy(sg_whisper *w, int src, int dst, int n_pos);
/* Word timestamps: cross-attention weights of the alignment heads for a decoded token sequence:
 * run ids (the full sequence from position 0) through the decoder and return
 * [n_align_heads][n][n_audio_ctx] attention probabilities (after softmax). It runs on (and
 * overwrites) sequence 0's KV cache. SG_ERR_UNSUPPORTED when the model has no alignment heads. */
sg_status sg_whisper_cross_attn(sg_whisper *w, const int32_t *ids, int n, float *out);
/* The same with the softmax over the first n_keys encoder positions only (the window's audio,
 * as CTranslate2's align does it): attn is [n_align_heads][n][n_keys]. When next_prob is not
 * NULL it gets [n]: each position's probability of the next id ids[t + 1] under the softmax of
 * its logits over the first n_text ids (the text tokens; 0 where ids[t + 1] >= n_text and at
 * the last position). */
sg_status sg_whisper_align(sg_whisper *w, const int32_t *ids, int n, int n_keys, int n_text, float *attn, float *next_prob);

#endif
