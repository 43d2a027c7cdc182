/* The OpenAI audio routes (see routes_audio.h). */
#include "server/routes_audio.h"

#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audio/stream.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/log.h"
#include "base/timer.h"
#include "engine/transcribe.h"
#include "server/model.h"
#include "server/response.h"

#define MAX_FIELD 4096 /* bytes of a text field (the prompt is the longest) */

void sg_audio_req_free(sg_audio_req *r)
{
	if (!r) return;
	sg_free(r->model);
	sg_free(r->language);
	sg_free(r->prompt);
	sg_free(r->data);
	memset(r, 0, sizeof *r);
}

void sg_audio_req_destroy(void *r)
{
	sg_audio_req_free(r);
	sg_free(r);
}

/* A text field's value as a C string: 0 (absent: *out NULL), 1, or -400 with e filled. */
static int field(const sg_multipart *mp, const char *name, char **out, sg_srv_err *e)
{
	*out = NULL;
	const sg_mp_part *p = sg_multipart_get(mp, name);
	if (!p) return 0;
	if (p->len > MAX_FIELD) return -sg_srv_err_set(e, 400, NULL, name, "'%s' is longer than %d bytes", name, MAX_FIELD);
	if (memchr(p->data, 0, p->len)) return -sg_srv_err_set(e, 400, NULL, name, "'%s' holds a NUL byte", name);
	*out = sg_malloc(p->len + 1);
	if (!*out) return -sg_srv_err_set(e, 500, "server_error", NULL, "out of memory");
	memcpy(*out, p->data, p->len);
	(*out)[p->len] = 0;
	return 1;
}

int sg_audio_parse(sg_srv_route route, const sg_multipart *mp, sg_audio_req *r, sg_srv_err *e)
{
	memset(r, 0, sizeof *r);
	snprintf(r->format, sizeof r->format, "json");
	r->translate = route == SG_ROUTE_OAI_TRANSLATIONS;
	const sg_mp_part *file = sg_multipart_get(mp, "file");
	if (!file) return sg_srv_err_set(e, 400, NULL, "file", "the form has no 'file' field (the audio to transcribe)");
	if (!file->len) return sg_srv_err_set(e, 400, NULL, "file", "the uploaded 'file' is empty (0 bytes)");
	int g;
	char *v = NULL;
	if ((g = field(mp, "model", &r->model, e)) < 0) return -g;
	if (!g || !r->model[0]) return sg_srv_err_set(e, 400, NULL, "model", "'model' is required (a --stt-model name, or whisper-1)");
	if (!r->translate) {
		if ((g = field(mp, "language", &r->language, e)) < 0) return -g;
		if (g && (strlen(r->language) < 2 || strlen(r->language) > 7))
			return sg_srv_err_set(e, 400, NULL, "language", "'language' must be an ISO-639-1 code such as en or de, not '%.40s'",
					      r->language);
	}
	if ((g = field(mp, "prompt", &r->prompt, e)) < 0) return -g;
	if ((g = field(mp, "response_format", &v, e)) < 0) return -g;
	if (g) {
		static const char *const ok[] = {"json", "text", "srt", "verbose_json", "vtt"};
		int found = 0;
		for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) found |= !strcmp(v, ok[i]);
		if (!found) {
			sg_srv_err_set(e, 400, NULL, "response_format",
				       "'response_format' must be json, text, srt, verbose_json or vtt, not '%.40s'", v);
			sg_free(v);
			return 400;
		}
		snprintf(r->format, sizeof r->format, "%s", v);
		sg_free(v);
	}
	if ((g = field(mp, "temperature", &v, e)) < 0) return -g;
	if (g) {
		char *end;
		double t = strtod(v, &end);
		int bad = end == v || *end || !(t >= 0 && t <= 1);
		sg_free(v);
		if (bad) return sg_srv_err_set(e, 400, NULL, "temperature", "'temperature' must be a number in [0, 1]");
		r->temperature = (float)t;
	}
	if ((g = field(mp, "stream", &v, e)) < 0) return -g;
	if (g) {
		int t = !strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "1");
		int f = !strcmp(v, "false") || !strcmp(v, "False") || !strcmp(v, "0");
		sg_free(v);
		if (!t && !f) return sg_srv_err_set(e, 400, NULL, "stream", "'stream' must be true or false");
		r->stream = t;
	}
	/* timestamp_granularities[]: each part one value, "segment" or "word" */
	for (int i = 0; i < mp->n; i++) {
		const sg_mp_part *p = &mp->parts[i];
		if (strcmp(p->name, "timestamp_granularities[]") && strcmp(p->name, "timestamp_granularities")) continue;
		if (p->len == 4 && !memcmp(p->data, "word", 4)) r->words = 1;
		else if (!(p->len == 7 && !memcmp(p->data, "segment", 7)))
			return sg_srv_err_set(e, 400, NULL, "timestamp_granularities[]",
					      "'timestamp_granularities[]' values are segment or word, not '%.*s'",
					      (int)(p->len < 40 ? p->len : 40), p->data);
		if (strcmp(r->format, "verbose_json"))
			return sg_srv_err_set(e, 400, NULL, "timestamp_granularities[]",
					      "timestamp_granularities[] needs response_format verbose_json");
	}
	r->data = sg_malloc(file->len);
	if (!r->data) return sg_srv_err_set(e, 500, "server_error", NULL, "out of memory for the upload");
	memcpy(r->data, file->data, file->len);
	r->len = file->len;
	return 0;
}

/* ---- the worker ---- */

typedef struct stream_state {
	sg_job *job;
	int n_sent;
} stream_state;

static int on_segment(const sg_stt_segment *seg, void *user)
{
	stream_state *ss = user;
	if (atomic_load(&ss->job->cancel)) return 1;
	const char *t = seg->text ? seg->text : "";
	if (!ss->n_sent)
		while (*t == ' ') t++; /* the text starts as the done event's does */
	ss->n_sent++;
	if (!*t) return 0;
	json_t *o = json_pack("{s:s,s:s%}", "type", "transcript.text.delta", "delta", t, strlen(t));
	return sg_resp_line(ss->job, o, 1) ? 1 : 0;
}

static void respond_err(sg_job *job, int streaming, const sg_srv_err *e)
{
	json_t *b = sg_resp_error_body(job->req.route, e);
	if (streaming) {
		json_object_set_new(b, "type", json_string("error"));
		sg_resp_line(job, b, 1);
		sg_job_finish(job);
		return;
	}
	sg_resp_send(job, e->status, b);
}

void sg_audio_run(sg_job *job)
{
	sg_audio_req *q = job->extra;
	sg_stt *stt = sg_srv_model_stt(job->model);
	sg_srv_err e;
	if (!q || !stt) {
		sg_srv_err_set(&e, 500, "server_error", NULL, "the audio job has no speech-to-text model");
		respond_err(job, 0, &e);
		return;
	}
	double t0 = sg_time_s();
	/* streamed over the upload's bytes, which the request holds anyway (bounded by the upload cap):
	 * the decoded samples are never held whole, one 30 s window at a time */
	sg_audio_stream *audio = NULL;
	sg_status st = sg_audio_stream_open_memory(q->data, q->len, &audio);
	if (st) {
		sg_srv_err_set(&e, 400, NULL, "file", "the uploaded file is not audio this server can read: %s", sg_last_error());
		snprintf(e.code, sizeof e.code, "invalid_audio");
		respond_err(job, 0, &e);
		return;
	}
	float temps[8];
	int n_t = 0;
	for (double t = q->temperature; t <= 1.0 + 1e-6 && n_t < 8; t += 0.2) temps[n_t++] = (float)t;
	sg_transcribe_params tp = sg_transcribe_default_params();
	tp.language = q->language;
	tp.translate = q->translate;
	tp.initial_prompt = q->prompt;
	tp.word_timestamps = q->words;
	tp.temperatures = temps;
	tp.n_temperatures = n_t;
	stream_state ss = {.job = job};
	tp.on_segment = on_segment;
	tp.user = &ss;
	if (q->stream) sg_job_begin(job, 200, "text/event-stream");
	sg_transcript *tr = NULL;
	st = sg_transcribe_stream(stt, audio, &tp, &tr);
	sg_audio_stream_close(audio);
	if (st == SG_ERR_CANCELLED && atomic_load(&job->cancel)) {
		sg_transcript_free(tr);
		sg_job_finish(job);
		return;
	}
	if (st) {
		int status = st == SG_ERR_INVALID_ARG || st == SG_ERR_FORMAT || st == SG_ERR_UNSUPPORTED ? 400 : sg_resp_status(st);
		sg_srv_err_set(&e, status, status == 400 ? NULL : "server_error", NULL, "%s", sg_last_error());
		sg_transcript_free(tr);
		respond_err(job, q->stream, &e);
		return;
	}
	SG_INFO("serve: %s: transcribed %.1f s of audio in %.2f s (%d segments)", sg_srv_model_info_get(job->model)->name, tr->duration,
		sg_time_s() - t0, tr->n_segments);
	const char *task = q->translate ? "translate" : "transcribe";
	if (q->stream) {
		json_t *o = json_pack("{s:s,s:s}", "type", "transcript.text.done", "text", tr->text ? tr->text : "");
		sg_resp_line(job, o, 1);
		sg_transcript_free(tr);
		sg_job_finish(job);
		return;
	}
	char *out = NULL;
	size_t len = 0;
	st = sg_transcript_format(tr, q->format, task, &out, &len);
	sg_transcript_free(tr);
	if (st) {
		sg_srv_err_set(&e, 500, "server_error", NULL, "%s", sg_last_error());
		respond_err(job, 0, &e);
		return;
	}
	const char *ctype = !strcmp(q->format, "json") || !strcmp(q->format, "verbose_json") ? "application/json"
			    : !strcmp(q->format, "vtt")                                    ? "text/vtt; charset=utf-8"
											   : "text/plain; charset=utf-8";
	sg_job_respond(job, 200, ctype, out, len);
	sg_free(out);
}
