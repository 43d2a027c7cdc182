/*
 * The Qwen3-TTS speech tokenizer's decoder ("Qwen3-TTS-Tokenizer-12Hz", the qwen-tts package's
 * Qwen3TTSTokenizerV2Decoder): frames of G codes -> a 24 kHz waveform.
 *
 *   split RVQ     codebook 0 and codebooks 1..G-1 summed in two residual quantizers, each with its
 *                 1x1 output projection, added
 *   pre_conv      causal conv (k 3) to the latent width
 *   transformer   input projection, sliding-window causal decoder layers with layer scales (folded
 *                 into o_proj and down_proj at load; the generic forward runs them), final norm,
 *                 output projection
 *   upsample      per ratio: causal transposed conv, ConvNeXt block (depthwise conv k 7, LayerNorm,
 *                 GELU MLP, gamma folded into its second layer)
 *   decoder       causal conv k 7, per rate: SnakeBeta, causal transposed conv (k 2r, stride r),
 *                 three residual units (SnakeBeta, dilated conv k 7, SnakeBeta, conv k 1), then
 *                 SnakeBeta, conv k 7 to one channel, clamped to [-1, 1]
 *
 * Every convolution is causal, so audio can be decoded in chunks as codes arrive: the package's
 * chunked decode runs each chunk with up to `context` frames of left context and keeps the
 * chunk's own samples; the stream below does exactly that.
 */
#ifndef SG_MODELS_QWEN3_TTS_CODEC_H
#define SG_MODELS_QWEN3_TTS_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "saragossa.h"

typedef struct sg_qwen3_tts_codec sg_qwen3_tts_codec;

/* Loads the decoder of a speech tokenizer folder (config.json with decoder_config and
 * model.safetensors, tensors "decoder.*") onto be, which the caller owns and keeps alive longer.
 * The backend needs the conv ops (SG_ERR_UNSUPPORTED otherwise). */
sg_status sg_qwen3_tts_codec_load(const char *dir, sg_backend *be, sg_qwen3_tts_codec **out);
void sg_qwen3_tts_codec_free(sg_qwen3_tts_codec *c);

int sg_qwen3_tts_codec_groups(const sg_qwen3_tts_codec *c);      /* codes per frame */
int sg_qwen3_tts_codec_sample_rate(const sg_qwen3_tts_codec *c); /* 24000 */
int sg_qwen3_tts_codec_upsample(const sg_qwen3_tts_codec *c);    /* samples per frame (1920) */

/* One forward: codes [n][G] -> wav [n * upsample]. Codes outside the codebook: SG_ERR_INVALID_ARG. */
sg_status sg_qwen3_tts_codec_decode(sg_qwen3_tts_codec *c, const int32_t *codes, int n, float *wav);

/* Streaming decode: frames pushed one at a time; each time `chunk` new frames exist they are
 * decoded with up to `context` earlier frames of left context and their samples emitted;
 * finish decodes the rest. The concatenated output equals the package's
 * chunked_decode(codes, chunk_size=chunk, left_context_size=context). */
typedef int (*sg_qwen3_tts_pcm_fn)(const float *pcm, size_t n, void *user); /* non-zero stops */
typedef struct sg_qwen3_tts_stream sg_qwen3_tts_stream;
sg_status sg_qwen3_tts_stream_open(sg_qwen3_tts_codec *c, int chunk, int context, sg_qwen3_tts_pcm_fn emit, void *user,
				   sg_qwen3_tts_stream **out);
/* SG_ERR_CANCELLED when emit asked to stop */
sg_status sg_qwen3_tts_stream_push(sg_qwen3_tts_stream *s, const int32_t *frame);
sg_status sg_qwen3_tts_stream_finish(sg_qwen3_tts_stream *s);
/* Before the first push: n frames [n][G] that serve as left context and are never emitted (the
 * reference clip's codes of in-context cloning, which the package decodes with the new frames and
 * cuts off). Bad codes: SG_ERR_INVALID_ARG. */
sg_status sg_qwen3_tts_stream_prefix(sg_qwen3_tts_stream *s, const int32_t *codes, int n);
/* The first chunk may be shorter than the others (first audio sooner); 0 = chunk. */
void sg_qwen3_tts_stream_first_chunk(sg_qwen3_tts_stream *s, int first);
void sg_qwen3_tts_stream_free(sg_qwen3_tts_stream *s);

#endif
