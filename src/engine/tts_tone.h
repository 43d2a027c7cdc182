/* A synthetic voice for testing the audio paths without weights (the text-to-speech analogue of
 * the tiny random LLMs the tests build): a "*.tone.json" file names its sample rate, its voices
 * and its chunk length, and each letter is spoken as a short tone (its pitch from the letter and
 * the voice), each space as a pause. Deterministic, fast, and streamed in chunks like a real
 * model, so the encoders, the server routes, cancellation and the chat hand-off can be tested
 * anywhere. tests/fixtures/tts/test.tone.json is one. */
#ifndef SG_ENGINE_TTS_TONE_H
#define SG_ENGINE_TTS_TONE_H

#include "engine/tts.h"

/* Loads the tone voice file at path: {"kind": "tone", "sample_rate": 8000..48000, "voices":
 * ["name", ...] (1..16), "chunk_ms": 10..1000, and optionally "delay_ms": 0..1000, the time each
 * chunk takes to make, so that tests can watch audio stream out}. Malformed: SG_ERR_FORMAT naming the field. */
sg_status tts_tone_load(const char *path, tts_model *out);

#endif
