/* The OpenAI audio routes: POST /v1/audio/transcriptions and /v1/audio/translations, served by
 * the speech-to-text models (--stt-model). Their bodies are multipart/form-data (file, model,
 * language, prompt, response_format, temperature, timestamp_granularities[], stream), read into
 * an sg_audio_req on the connection thread; the transcription runs on the inference worker. */
#ifndef SG_SERVER_ROUTES_AUDIO_H
#define SG_SERVER_ROUTES_AUDIO_H

#include <stddef.h>

#include "server/job.h"
#include "server/multipart.h"
#include "server/request.h"

typedef struct sg_audio_req {
	char *model;          /* the "model" field ("" when absent) */
	char *language;       /* ISO-639-1 code, NULL: detected */
	char *prompt;         /* NULL: none */
	char format[16];      /* json (default), text, srt, verbose_json, vtt */
	float temperature;    /* first temperature of the fallback ladder; default 0 */
	int words;            /* timestamp_granularities[] has "word" */
	int stream;           /* SSE transcript.text.delta / transcript.text.done events */
	int translate;        /* the translations route */
	char *data;           /* [len] the uploaded file's bytes (a copy, kept until the transcription ends) */
	size_t len;
} sg_audio_req;

/* Reads the form's fields for route into *r (zeroed first; free with sg_audio_req_free even on
 * failure). Returns 0, or the HTTP status (400) with *e naming the field. */
int sg_audio_parse(sg_srv_route route, const sg_multipart *mp, sg_audio_req *r, sg_srv_err *e);
void sg_audio_req_free(sg_audio_req *r);
/* For sg_job.extra_free. */
void sg_audio_req_destroy(void *r);

/* The worker's entry: job->extra is the sg_audio_req, job->model a resident speech-to-text
 * model. Transcribes the upload, read in place a block at a time (its samples are never decoded
 * whole), and answers in the requested format (or streams the text as SSE events). */
void sg_audio_run(sg_job *job);

#endif
