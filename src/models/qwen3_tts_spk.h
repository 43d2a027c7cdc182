/*
 * The speaker encoder of Qwen3-TTS's Base models (the qwen-tts package's Qwen3TTSSpeakerEncoder,
 * ECAPA-TDNN): a reference clip -> one x-vector, which takes the place of a preset speaker's
 * codec embedding in the talker's prompt.
 *
 *   mel        128-bin magnitude log-mel of the 24 kHz clip (n_fft 1024, hop 256, 0..12 kHz;
 *              sg_audio_log_mel_mag)
 *   blocks.0   TDNN: Conv1d (k 5) + ReLU
 *   blocks.1-3 SE-Res2Net: 1x1 TDNN, Res2Net (the channels in `scale` chunks, chunk i through a
 *              dilated TDNN after adding chunk i-1's output), 1x1 TDNN, squeeze-excitation (time
 *              mean, 1x1 conv, ReLU, 1x1 conv, sigmoid, times the channels), plus the input
 *   mfa        the blocks' outputs side by side through a TDNN
 *   asp        attentive statistics pooling: [x, mean, std] -> TDNN -> tanh -> 1x1 conv ->
 *              softmax over time -> weighted mean and std
 *   fc         1x1 conv to the x-vector (the talker's hidden size)
 *
 * Every conv pads "same" by reflection, as the package's Conv1d(padding="same",
 * padding_mode="reflect") does; the convolutions run on the backend (sg_qtts_conv), the rest on
 * the host.
 */
#ifndef SG_MODELS_QWEN3_TTS_SPK_H
#define SG_MODELS_QWEN3_TTS_SPK_H

#include <stddef.h>

#include "backend/backend.h"
#include "formats/weights.h"

typedef struct sg_qwen3_tts_spk sg_qwen3_tts_spk;

/* Reads config.json's speaker_encoder_config and binds "speaker_encoder.*" of w on be (both kept
 * by the caller for longer). SG_ERR_NOT_FOUND when the folder has no speaker encoder. */
sg_status sg_qwen3_tts_spk_load(const sg_weights *w, sg_backend *be, sg_qwen3_tts_spk **out);
void sg_qwen3_tts_spk_free(sg_qwen3_tts_spk *s);
int sg_qwen3_tts_spk_dim(const sg_qwen3_tts_spk *s);         /* the x-vector's size */
int sg_qwen3_tts_spk_sample_rate(const sg_qwen3_tts_spk *s); /* the clip's rate (24000) */

/* The package's extract_speaker_embedding: pcm [n] mono at the sample rate -> out [dim]. A clip
 * too short for the convolutions' reflect padding: SG_ERR_INVALID_ARG saying so. */
sg_status sg_qwen3_tts_spk_embed(sg_qwen3_tts_spk *s, const float *pcm, size_t n, float *out);
/* The same from a log-mel [T][mel] already computed (the tests feed the package's). */
sg_status sg_qwen3_tts_spk_embed_mel(sg_qwen3_tts_spk *s, const float *mel, int T, float *out);

#endif
