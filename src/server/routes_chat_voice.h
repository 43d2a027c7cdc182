/* Spoken chat answers: OpenAI's Chat Completions audio output (`modalities: ["text", "audio"]`,
 * `audio: {"voice", "format"}`) served by the server's first text-to-speech model (--tts-model)
 * in the same process as the LLM. The answer's text is spoken sentence by sentence as its tokens
 * arrive: a streamed answer sends its text as `delta.audio.transcript` pieces and each chunk of
 * encoded audio as `delta.audio.data` (base64) as soon as it exists, and ends with a delta
 * holding `audio.expires_at`; a whole answer has `message.audio = {id, data, expires_at,
 * transcript}` and `message.content` null, as OpenAI answers. Reasoning and tool calls are not
 * spoken.
 *
 * Formats: wav, mp3, flac, opus and pcm16 (raw s16le at 24 kHz); aac is refused (no encoder). A
 * stream may use any of them (OpenAI's streams take pcm16 only): the data pieces then join into
 * the whole file. */
#ifndef SG_SERVER_ROUTES_CHAT_VOICE_H
#define SG_SERVER_ROUTES_CHAT_VOICE_H

#include <jansson.h>
#include <stddef.h>

#include "server/job.h"
#include "server/request.h"

struct sg_pool;

/* The request's audio output: body.modalities and body.audio into r (audio_out, audio_voice,
 * audio_format). 0, or the status (400) with *e naming the field. Pure. */
int sg_chat_audio_parse(const json_t *b, sg_srv_req *r, sg_srv_err *e);

/* Connection thread, for a request with r->audio_out: binds the voice model tts (a reference
 * held from pool, released with the job) and the voice the request names to job j. 0, or 400
 * with *e (an unknown voice, listing the model's); on failure tts is released here. */
int sg_chat_audio_attach(sg_job *j, sg_srv_model *tts, struct sg_pool *pool, sg_srv_err *e);

/* The worker's speaker of one answer. NULL when the job asked for no audio (or out of memory:
 * then *oom is set). */
typedef struct sg_chat_voice sg_chat_voice;
sg_chat_voice *sg_chat_voice_new(sg_job *job, const char *model_name, int *oom);
/* A streamed answer's next text: sent as a transcript delta, and every sentence it completes
 * spoken and sent as audio deltas. 0, or -1: the stream cannot go on (out of memory, the voice
 * failed: its message is in *e). */
int sg_chat_voice_text(sg_chat_voice *v, const char *s, size_t n, sg_srv_err *e);
/* The end of a streamed answer: the rest spoken and sent, then the delta with expires_at. */
int sg_chat_voice_end(sg_chat_voice *v, sg_srv_err *e);
/* A whole answer: text[0..n) spoken; the message.audio object (NULL with *e on failure). */
json_t *sg_chat_voice_message(sg_chat_voice *v, const char *text, size_t n, sg_srv_err *e);
void sg_chat_voice_free(sg_chat_voice *v);

#endif
