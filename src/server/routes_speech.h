/* OpenAI's POST /v1/audio/speech, served by the text-to-speech models (--tts-model): the JSON
 * body (model, input, voice, response_format, speed, instructions, stream_format) is read and
 * checked on the connection thread; the worker speaks the input sentence by sentence and sends
 * the encoded audio as it is made: the raw bytes in a chunked response (stream_format "audio"),
 * or speech.audio.delta events with base64 audio then speech.audio.done (stream_format "sse").
 * A request with saragossa's "stream": false gets the whole file at once, its length fields
 * true (a WAV's sizes, a FLAC's sample count).
 *
 * Voice cloning (saragossa's extension, Qwen3-TTS Base models): "ref_audio" carries a reference
 * clip as base64 (a data: URL too), "ref_text" its transcript (in-context cloning), and
 * "x_vector_only": true the speaker embedding alone. Bad base64 is a 400 here; bytes that are not
 * audio, or a model that cannot clone, a 400 from the worker before any audio.
 *
 * Voices: a model voice of the name asked for is used; else OpenAI's built-in names ("alloy",
 * "ash", ... "cedar") mean the model's default voice; any other name is a 400 listing the
 * model's voices. */
#ifndef SG_SERVER_ROUTES_SPEECH_H
#define SG_SERVER_ROUTES_SPEECH_H

#include <stddef.h>

#include "saragossa.h"
#include "server/job.h"
#include "server/request.h"

#define SG_SPEECH_MAX_CHARS 4096 /* OpenAI's cap on `input` */

typedef struct sg_speech_req {
	char *model;        /* the "model" field */
	char *input;        /* the text (never holds a NUL) */
	size_t input_chars; /* its characters (code points) */
	char *voice;        /* the voice asked for */
	const char *use_voice; /* what the model speaks with (a name of its own), NULL: its default;
				* set by sg_speech_resolve_voice */
	char *instructions; /* NULL: none */
	char format[8];     /* mp3 (default), opus, flac, wav, pcm */
	float speed;        /* 0.25 .. 4, default 1 */
	int sse;            /* stream_format "sse" */
	int stream;         /* 1 (default): sent as it is made; 0: the whole file at once */
	/* saragossa's voice cloning fields (Qwen3-TTS Base models): "ref_audio", an audio file as
	 * base64 (or a data: URL of it), decoded here; "ref_text", its transcript; "x_vector_only" */
	unsigned char *ref_audio; /* NULL: none */
	size_t ref_audio_size;
	char *ref_text;           /* NULL: none */
	int x_vector_only;
} sg_speech_req;

#define SG_SPEECH_MAX_REF_BYTES (25u << 20) /* the decoded reference clip's cap */


/* Reads body[0..len) into *r (zeroed first; free with sg_speech_req_free even on failure): 0,
 * or the HTTP status (400) with *e naming the field. Pure: no model is needed (fuzzed). */
int sg_speech_parse(const char *body, size_t len, sg_speech_req *r, sg_srv_err *e);
void sg_speech_req_free(sg_speech_req *r);
/* For sg_job.extra_free. */
void sg_speech_req_destroy(void *r);

/* 1 when name is one of OpenAI's built-in voice names. */
int sg_speech_openai_voice(const char *name);
/* The model voice for the name asked for (the rule above): *out NULL means the default voice.
 * 0, or 400 with *e listing the model's voices. tts's voice list is immutable: any thread. */
int sg_speech_voice(const sg_tts *tts, const char *name, const char *param, const char **out, sg_srv_err *e);
/* Sets r->use_voice from r->voice (sg_speech_voice). */
int sg_speech_resolve_voice(sg_speech_req *r, const sg_tts *tts, sg_srv_err *e);

/* RFC 4648 base64 of n bytes as a new JSON string (NULL when out of memory). */
json_t *sg_speech_base64(const void *bytes, size_t n);

/* The worker's entry: job->extra is the sg_speech_req (voice resolved), job->model a resident
 * text-to-speech model. Speaks, encodes and answers as the request asked; a client that goes
 * away stops the synthesis at its next audio chunk. */
void sg_speech_run(sg_job *job);

#endif
