/*
 * Qwen3-TTS (the `qwen-tts` package's Qwen3TTSForConditionalGeneration, 12 Hz speech tokenizer):
 * text token ids -> multi-codebook speech codes, one frame of G codes per 1/12 s.
 *
 *   talker          a Qwen3-family decoder (the generic forward, sg_forward_embd) whose inputs are
 *                   sums of embeddings: projected text embeddings (text_projection: fc1, SiLU,
 *                   fc2) plus codec embeddings (tags, speaker, codebook 0 and the code predictor's
 *                   codebooks); its head (codec_head) gives codebook 0 of the next frame.
 *   code predictor  a small Qwen3 decoder run per frame from [talker hidden, codebook-0 embedding]
 *                   (projected to its width), one head and one embedding per codebook 1..G-1.
 *
 * The prompt is built as the package builds it (its custom-voice, voice-design and streaming-text
 * layouts); decoding is greedy (temperature 0) or sampled with temperature / top-k / top-p, the
 * talker with the package's repetition penalty, the special codec tokens suppressed and end of
 * speech allowed from the third frame. The codes go to the codec decoder (qwen3_tts_codec.h).
 */
#ifndef SG_MODELS_QWEN3_TTS_H
#define SG_MODELS_QWEN3_TTS_H

#include <stdint.h>

#include "saragossa.h"

typedef struct sg_qwen3_tts sg_qwen3_tts;

/* Opens the folder's config.json and safetensors (talker and code predictor) on backend `backend`
 * ("cpu", "cuda", "auto"). Errors name the file, the tensor or the config key. */
sg_status sg_qwen3_tts_load(const char *dir, const char *backend, int n_threads, sg_qwen3_tts **out);
void sg_qwen3_tts_free(sg_qwen3_tts *m);

/* The backend it runs on (owned by the model; the codec may share it). */
struct sg_backend *sg_qwen3_tts_backend(const sg_qwen3_tts *m);
int sg_qwen3_tts_groups(const sg_qwen3_tts *m);          /* codes per frame (G) */
const char *sg_qwen3_tts_type(const sg_qwen3_tts *m);    /* "custom_voice", "voice_design", "base" */
int sg_qwen3_tts_n_speakers(const sg_qwen3_tts *m);
const char *sg_qwen3_tts_speaker(const sg_qwen3_tts *m, int i); /* sorted by name */
int sg_qwen3_tts_n_languages(const sg_qwen3_tts *m);
const char *sg_qwen3_tts_language(const sg_qwen3_tts *m, int i);
/* The weights (the speaker encoder of a Base model reads them too); owned by the model. */
struct sg_weights *sg_qwen3_tts_weights(const sg_qwen3_tts *m);
int sg_qwen3_tts_hidden(const sg_qwen3_tts *m); /* the talker's width (the x-vector's size) */
/* The tokenizer's ids of the chat markers the text is wrapped in. */
int sg_qwen3_tts_im_start(const sg_qwen3_tts *m);
int sg_qwen3_tts_im_end(const sg_qwen3_tts *m);

/* Called with each frame's G codes as soon as they exist; non-zero stops (SG_ERR_CANCELLED). */
typedef int (*sg_qwen3_tts_frame_fn)(const int32_t *codes, int frame, void *user);

typedef struct sg_qwen3_tts_gen {
	/* "<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n" tokenized (at least 3
	 * role ids, one text id, 5 closing ids) */
	const int32_t *ids;
	int n_ids;
	/* "<|im_start|>user\n{instruct}<|im_end|>\n" tokenized, or NULL */
	const int32_t *instruct_ids;
	int n_instruct;
	const char *speaker;   /* a preset speaker (case-insensitive) or NULL/"" for none */
	/* A cloned voice (Base models): the reference clip's x-vector [D] (qwen3_tts_spk.h), in the
	 * prompt where a preset speaker's embedding goes; speaker is then ignored. NULL: none. */
	const float *spk_embed;
	/* In-context cloning (with spk_embed): the reference clip's codes [n_ref][G] (the speech
	 * tokenizer's encoder) and its transcript as "<|im_start|>assistant\n{ref_text}<|im_end|>\n"
	 * tokenized (at least 3 role ids, one text id, 2 closing ids), laid out before the text as the
	 * package's in-context prompt. n_ref 0: x-vector only. */
	const int32_t *ref_codes;
	int n_ref;
	const int32_t *ref_ids;
	int n_ref_ids;
	const char *language;  /* a language of the config, or NULL/"auto" */
	int non_streaming;     /* 1: the whole text in the prompt (the package's default for preset
	                        * and designed voices); 0: text fed one token per frame */
	int max_frames;        /* talker steps, as the package's max_new_tokens */
	float temperature;     /* 0: greedy */
	int top_k;             /* 0: off */
	float top_p;           /* 1: off */
	float repetition_penalty; /* talker codebook 0; 1: off */
	float sub_temperature; /* code predictor; 0: greedy */
	int sub_top_k;
	float sub_top_p;
	uint64_t seed;
	sg_qwen3_tts_frame_fn on_frame;
	void *user;
} sg_qwen3_tts_gen;

/* The package's defaults (generation_config.json of the folder when it has one): sampled at 0.9,
 * top-k 50, repetition penalty 1.05. */
sg_qwen3_tts_gen sg_qwen3_tts_gen_defaults(const sg_qwen3_tts *m);

/* Generates the frames; *codes [n_frames][G] (sg_free) may be NULL when only on_frame is wanted.
 * Bad ids, an unknown speaker or language: SG_ERR_INVALID_ARG naming them. */
sg_status sg_qwen3_tts_generate(sg_qwen3_tts *m, const sg_qwen3_tts_gen *g, int32_t **codes, int *n_frames);

#endif
