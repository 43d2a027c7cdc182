/*
 * The encoder of Qwen3-TTS's 12 Hz speech tokenizer (the qwen-tts package's
 * Qwen3TTSTokenizerV2Encoder, which is transformers' Mimi encoder): a 24 kHz clip -> frames of G
 * codes, the codes the codec decoder (qwen3_tts_codec.h) turns back into audio. In-context voice
 * cloning puts a reference clip's codes in the talker's prompt.
 *
 *   SEANet     causal conv (zeros on the left, and on the right up to a whole stride), then per
 *              ratio (the config's upsampling_ratios reversed): residual blocks (ELU, dilated
 *              conv, ELU, 1x1 conv, plus the input), ELU, strided conv doubling the channels;
 *              ELU, last conv to the hidden size
 *   transformer pre-LayerNorm causal decoder layers: rope (rotate-half) attention, GELU MLP,
 *              each branch times its layer scale; no final norm
 *   downsample causal strided conv (kernel 2 x the rate ratio, stride 2), padded by repeating
 *              the edge samples
 *   split RVQ  codebook 0 from the semantic quantizer, codebooks 1..G-1 from the acoustic one,
 *              each projecting the same frames (1x1 conv) and taking the nearest code of each
 *              residual in turn (Euclidean, exact)
 *
 * The convolutions and matrix products run on the backend, the norms, attention and the nearest
 * code search on the host: the encoder runs once per reference clip.
 */
#ifndef SG_MODELS_QWEN3_TTS_TOK_H
#define SG_MODELS_QWEN3_TTS_TOK_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

typedef struct sg_qwen3_tts_tok sg_qwen3_tts_tok;

/* Loads the encoder of a speech tokenizer folder (config.json's encoder_config, tensors
 * "encoder.*") onto be (kept by the caller for longer). SG_ERR_NOT_FOUND when the folder has no
 * encoder; an encoder this code does not run (non-causal, reflect padding, conv shortcuts):
 * SG_ERR_UNSUPPORTED naming the field. */
sg_status sg_qwen3_tts_tok_load(const char *dir, sg_backend *be, sg_qwen3_tts_tok **out);
void sg_qwen3_tts_tok_free(sg_qwen3_tts_tok *t);
int sg_qwen3_tts_tok_groups(const sg_qwen3_tts_tok *t);      /* codes kept per frame */
int sg_qwen3_tts_tok_sample_rate(const sg_qwen3_tts_tok *t); /* the clip's rate (24000) */

/* pcm [n] mono at the sample rate -> *codes [*n_frames][groups] (sg_free), n_frames =
 * ceil(n / encode_downsample_rate) as the package keeps. Too short a clip: SG_ERR_INVALID_ARG. */
sg_status sg_qwen3_tts_tok_encode(sg_qwen3_tts_tok *t, const float *pcm, size_t n, int32_t **codes,
                                  int *n_frames);

#endif
