/* Qwen3-TTS in the engine's text-to-speech layer: the tts_model_vt of a Qwen3-TTS folder (its
 * tokenizer, talker and code predictor, and the speech tokenizer's decoder streaming audio in
 * chunks as the codes are made). */
#ifndef SG_ENGINE_TTS_QWEN3_H
#define SG_ENGINE_TTS_QWEN3_H

#include "engine/tts.h"

/* 1 if dir holds a Qwen3-TTS model (config.json with a talker_config). */
int tts_qwen3_is(const char *dir);
/* Loads the folder (config.json, model.safetensors, the tokenizer files, speech_tokenizer/). */
sg_status tts_qwen3_load(const char *dir, const sg_tts_params *p, tts_model *out);

/* The folder's text tokenizer: tokenizer.json, else the byte-level BPE of vocab.json, merges.txt
 * and tokenizer_config.json as transformers' Qwen2 tokenizer builds it. */
struct sg_tokenizer;
sg_status tts_qwen3_tokenizer(const char *dir, struct sg_tokenizer **out);

#endif
