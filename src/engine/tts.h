/* Text-to-speech in the engine: one record per model kind (tts_model_vt), so the engine (sentence
 * splitting, streaming, the input cap, the public API, CLI and server) knows nothing of a model's
 * insides. A model kind fills a tts_model_vt and speaks one sentence at a time. */
#ifndef SG_ENGINE_TTS_H
#define SG_ENGINE_TTS_H

#include <stddef.h>

#include "saragossa.h"

typedef int (*tts_emit_fn)(const float *pcm, size_t n, void *user); /* non-zero: stop */

typedef struct tts_model_vt {
	const char *kind;
	int (*sample_rate)(const void *m);
	int (*n_voices)(const void *m);
	const char *(*voice)(const void *m, int i);
	/* one sentence (already split by the engine), emitting chunks as they are made */
	sg_status (*speak)(void *m, const char *text, const sg_speak_params *p, tts_emit_fn emit, void *user);
	void (*free)(void *m);
	/* Voice cloning: prepares p's reference clip (p->ref_audio) once before the sentences, which
	 * speak then reads; NULL for a kind that cannot clone. */
	sg_status (*reference)(void *m, const sg_speak_params *p);
} tts_model_vt;

/* A loaded model of some kind. */
typedef struct tts_model {
	const tts_model_vt *vt;
	void *m;
} tts_model;

/* The default input cap of sg_speak (max_chars 0). */
#define TTS_DEFAULT_MAX_CHARS 4096
/* A sentence longer than this is cut at white space: a model's work and memory grow with the
 * square of a sentence's length (attention), and the first audio waits for the first sentence. */
#define TTS_MAX_SENTENCE_BYTES 600

/* One sentence of a text: bytes [start, start + len). */
typedef struct tts_span {
	size_t start, len;
} tts_span;

/* Splits text[0..len) into sentences: a sentence ends after '.', '!', '?', ';' or ':' (and the
 * closing quotes or brackets after it) followed by white space, after the CJK full stops, or at
 * a blank line; a sentence longer than max_bytes (0: no limit) is cut at the last white space
 * before it. Leading and trailing white space is left out; sentences of white space alone are
 * dropped. *out (caller frees with sg_free) holds *n spans; none for a text of white space. */
sg_status tts_split_sentences(const char *text, size_t len, size_t max_bytes, tts_span **out, int *n);

/* Checks p (speed range, noise values, voice known), splits text (sentences of at most
 * TTS_MAX_SENTENCE_BYTES) and speaks it sentence by
 * sentence through the model, calling p->on_audio with each chunk; with pcm_out the whole
 * waveform is gathered too. */
sg_status tts_speak(tts_model *t, const char *text, const sg_speak_params *p, float **pcm_out, size_t *n_out);

#endif
