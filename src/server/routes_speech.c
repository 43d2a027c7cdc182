/* POST /v1/audio/speech (see routes_speech.h). */
#include "server/routes_speech.h"

#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "audio/encode.h"
#include "base/alloc.h"
#include "base/base64.h"
#include "base/error.h"
#include "base/log.h"
#include "base/timer.h"
#include "server/model.h"
#include "server/response.h"

/* OpenAI's built-in voices (the openai package's list): each means the model's default voice
 * unless the model has a voice of that name. */
static const char *const openai_voices[] = {"alloy", "ash",     "ballad", "coral", "echo", "fable", "onyx",
					    "nova",  "sage",    "shimmer", "verse", "marin", "cedar"};

int sg_speech_openai_voice(const char *name)
{
	for (size_t i = 0; name && i < sizeof openai_voices / sizeof *openai_voices; i++)
		if (!strcmp(name, openai_voices[i])) return 1;
	return 0;
}

void sg_speech_req_free(sg_speech_req *r)
{
	if (!r) return;
	sg_free(r->model);
	sg_free(r->input);
	sg_free(r->voice);
	sg_free(r->instructions);
	sg_free(r->ref_audio);
	sg_free(r->ref_text);
	memset(r, 0, sizeof *r);
}

void sg_speech_req_destroy(void *r)
{
	sg_speech_req_free(r);
	sg_free(r);
}

#define TRY(x)                                                                                     \
	do {                                                                                       \
		if ((x) < 0) return e->status;                                                     \
	} while (0)

int sg_speech_parse(const char *body, size_t len, sg_speech_req *r, sg_srv_err *e)
{
	memset(r, 0, sizeof *r);
	snprintf(r->format, sizeof r->format, "mp3");
	r->speed = 1.0f;
	r->stream = 1;
	json_t *b = NULL;
	int st = sg_srv_body_object(body, len, &b, e);
	if (st) return st;
	const char *s = NULL;
	int g;
#define OUT(x)                                                                                     \
	do {                                                                                       \
		st = (x);                                                                          \
		goto out;                                                                          \
	} while (0)
	if ((g = sg_srv_get_str(b, "model", "model", &s, e)) < 0) OUT(e->status);
	if (!g || !*s) OUT(sg_srv_err_set(e, 400, NULL, "model", "'model' is required (a --tts-model name, or tts-1)"));
	if (sg_srv_dup(&r->model, s, e) < 0) OUT(e->status);
	/* input: text, at most SG_SPEECH_MAX_CHARS characters, something to say */
	json_t *in = json_object_get(b, "input");
	if (!in || json_is_null(in)) OUT(sg_srv_err_set(e, 400, NULL, "input", "'input' (the text to speak) is required"));
	if (!json_is_string(in)) OUT(-sg_srv_wrong_type(e, "input", "a string", in));
	if (sg_srv_has_nul(in)) OUT(-sg_srv_nul(e, "input"));
	s = json_string_value(in);
	size_t n = json_string_length(in), chars = 0, blank = 1;
	for (size_t i = 0; i < n; i++) {
		chars += ((unsigned char)s[i] & 0xC0) != 0x80;
		blank &= s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r';
	}
	if (blank) OUT(sg_srv_err_set(e, 400, NULL, "input", "'input' is empty: there is nothing to speak"));
	if (chars > SG_SPEECH_MAX_CHARS)
		OUT(sg_srv_err_set(e, 400, NULL, "input", "'input' has %zu characters; the maximum is %d", chars, SG_SPEECH_MAX_CHARS));
	r->input_chars = chars;
	if (sg_srv_dupn(&r->input, s, n, e) < 0) OUT(e->status);
	/* voice: a name, or OpenAI's custom-voice object {"id": name} */
	json_t *v = json_object_get(b, "voice");
	if (json_is_object(v)) {
		if ((g = sg_srv_get_str(v, "id", "voice.id", &s, e)) < 0) OUT(e->status);
		if (!g) OUT(sg_srv_err_set(e, 400, NULL, "voice", "'voice' as an object needs an 'id' (a voice name)"));
	} else {
		if ((g = sg_srv_get_str(b, "voice", "voice", &s, e)) < 0) OUT(e->status);
		if (!g) OUT(sg_srv_err_set(e, 400, NULL, "voice", "'voice' is required (a voice of the model, or an OpenAI voice "
								  "name such as alloy for the model's default)"));
	}
	if (!*s) OUT(sg_srv_err_set(e, 400, NULL, "voice", "'voice' is empty"));
	if (sg_srv_dup(&r->voice, s, e) < 0) OUT(e->status);
	if ((g = sg_srv_get_str(b, "response_format", "response_format", &s, e)) < 0) OUT(e->status);
	if (g) {
		static const char *const ok[] = {"mp3", "opus", "flac", "wav", "pcm"};
		int found = 0;
		for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) found |= !strcmp(s, ok[i]);
		if (!strcmp(s, "aac"))
			OUT(sg_srv_err_set(e, 400, NULL, "response_format",
					   "'response_format' aac is not available: this server has no AAC encoder; use mp3, opus, "
					   "flac, wav or pcm"));
		if (!found)
			OUT(sg_srv_err_set(e, 400, NULL, "response_format",
					   "'response_format' must be mp3, opus, aac, flac, wav or pcm, not '%.40s'", s));
		snprintf(r->format, sizeof r->format, "%s", s);
	}
	if (!audio_format_available(r->format))
		OUT(sg_srv_err_set(e, 400, NULL, "response_format",
				   "'response_format' %s is not available: this server's libsndfile has no MPEG Layer III "
				   "writer; use opus, flac, wav or pcm",
				   r->format));
	double x;
	if ((g = sg_srv_get_num(b, "speed", "speed", 0.25, 4.0, &x, e)) < 0) OUT(e->status);
	if (g) r->speed = (float)x;
	const char *t = NULL;
	size_t tl = 0;
	if ((g = sg_srv_get_text(b, "instructions", "instructions", &t, &tl, e)) < 0) OUT(e->status);
	if (g && tl) {
		if (memchr(t, 0, tl)) OUT(-sg_srv_nul(e, "instructions"));
		if (tl > SG_SPEECH_MAX_CHARS)
			OUT(sg_srv_err_set(e, 400, NULL, "instructions", "'instructions' is longer than %d bytes", SG_SPEECH_MAX_CHARS));
		if (sg_srv_dupn(&r->instructions, t, tl, e) < 0) OUT(e->status);
	}
	if ((g = sg_srv_get_str(b, "stream_format", "stream_format", &s, e)) < 0) OUT(e->status);
	if (g) {
		if (strcmp(s, "audio") && strcmp(s, "sse"))
			OUT(sg_srv_err_set(e, 400, NULL, "stream_format", "'stream_format' must be audio or sse, not '%.40s'", s));
		r->sse = !strcmp(s, "sse");
	}
	if ((g = sg_srv_get_bool(b, "stream", "stream", &r->stream, e)) < 0) OUT(e->status);
	/* voice cloning */
	json_t *ra = json_object_get(b, "ref_audio");
	if (ra && !json_is_null(ra)) {
		if (!json_is_string(ra)) OUT(-sg_srv_wrong_type(e, "ref_audio", "a base64 string", ra));
		const char *a = json_string_value(ra), *comma;
		size_t al = json_string_length(ra), bad = 0, off = 0;
		/* a data: URL: the base64 after its comma */
		if (al >= 5 && !strncmp(a, "data:", 5)) {
			comma = memchr(a, ',', al);
			if (!comma || !memmem(a, (size_t)(comma - a), ";base64", 7))
				OUT(sg_srv_err_set(e, 400, NULL, "ref_audio", "'ref_audio' as a data: URL must be base64 (data:audio/wav;base64,...)"));
			off = (size_t)(comma + 1 - a);
		}
		if (al - off > (size_t)SG_SPEECH_MAX_REF_BYTES / 3 * 4 + 4096)
			OUT(sg_srv_err_set(e, 400, NULL, "ref_audio", "'ref_audio' is over %u bytes of audio", SG_SPEECH_MAX_REF_BYTES));
		if (sg_base64_decode(a + off, al - off, &r->ref_audio, &r->ref_audio_size, &bad))
			OUT(sg_srv_err_set(e, 400, NULL, "ref_audio", "'ref_audio' is not valid base64 (at character %zu)", bad + off));
		if (!r->ref_audio_size) OUT(sg_srv_err_set(e, 400, NULL, "ref_audio", "'ref_audio' is empty"));
	}
	if ((g = sg_srv_get_text(b, "ref_text", "ref_text", &t, &tl, e)) < 0) OUT(e->status);
	if (g && tl) {
		if (!r->ref_audio) OUT(sg_srv_err_set(e, 400, NULL, "ref_text", "'ref_text' is the transcript of 'ref_audio', which is missing"));
		if (memchr(t, 0, tl)) OUT(-sg_srv_nul(e, "ref_text"));
		if (tl > SG_SPEECH_MAX_CHARS)
			OUT(sg_srv_err_set(e, 400, NULL, "ref_text", "'ref_text' is longer than %d bytes", SG_SPEECH_MAX_CHARS));
		if (sg_srv_dupn(&r->ref_text, t, tl, e) < 0) OUT(e->status);
	}
	if ((g = sg_srv_get_bool(b, "x_vector_only", "x_vector_only", &r->x_vector_only, e)) < 0) OUT(e->status);
	if (r->x_vector_only && !r->ref_audio)
		OUT(sg_srv_err_set(e, 400, NULL, "x_vector_only", "'x_vector_only' clones the voice of 'ref_audio', which is missing"));
	if (r->ref_audio && !r->x_vector_only && !r->ref_text)
		OUT(sg_srv_err_set(e, 400, NULL, "ref_text",
				   "'ref_text' (the transcript of 'ref_audio') is required for in-context cloning; or send "
				   "\"x_vector_only\": true to clone from the speaker embedding alone"));
	if (r->sse && !r->stream)
		OUT(sg_srv_err_set(e, 400, NULL, "stream", "'stream': false asks for one whole file; stream_format sse streams events"));
	st = 0;
out:
	json_decref(b);
#undef OUT
	return st;
}

int sg_speech_voice(const sg_tts *tts, const char *name, const char *param, const char **out, sg_srv_err *e)
{
	*out = NULL;
	int n = sg_tts_n_voices(tts);
	for (int i = 0; i < n; i++)
		if (!strcmp(name, sg_tts_voice(tts, i))) {
			*out = i ? sg_tts_voice(tts, i) : NULL;
			return 0;
		}
	if (sg_speech_openai_voice(name)) return 0;
	char list[1024];
	size_t o = 0;
	list[0] = 0;
	for (int i = 0; i < n && o + 64 < sizeof list; i++)
		o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", sg_tts_voice(tts, i));
	return sg_srv_err_set(e, 400, NULL, param,
			      "unknown voice '%.80s'; this model's voices are: %s (OpenAI's voice names, alloy to cedar, "
			      "mean its default voice)",
			      name, list);
}

int sg_speech_resolve_voice(sg_speech_req *r, const sg_tts *tts, sg_srv_err *e)
{
	return sg_speech_voice(tts, r->voice, "voice", &r->use_voice, e);
}

json_t *sg_speech_base64(const void *bytes, size_t n)
{
	static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const unsigned char *p = bytes;
	size_t m = (n + 2) / 3 * 4;
	char *s = sg_malloc(m + 1);
	if (!s) return NULL;
	size_t o = 0;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
		s[o++] = a[v >> 18 & 63];
		s[o++] = a[v >> 12 & 63];
		s[o++] = i + 1 < n ? a[v >> 6 & 63] : '=';
		s[o++] = i + 2 < n ? a[v & 63] : '=';
	}
	s[o] = 0;
	json_t *j = json_stringn_nocheck(s, o);
	sg_free(s);
	return j;
}

/* ---- the worker ---- */

typedef struct speak_out {
	sg_job *job;
	const sg_speech_req *q;
	audio_encoder *enc;
	char *buf; /* bytes not sent yet: all of them for a whole file, else those since the last send */
	size_t len, cap;
	int begun; /* the status is sent */
	int oom;
	double t0, t_first; /* start, and the first audio's time (0: none yet) */
} speak_out;

static int enc_write(const void *b, size_t n, void *user)
{
	speak_out *so = user;
	if (so->begun && so->q->stream && !so->q->sse) return sg_job_write(so->job, b, n) ? (so->oom = 1) : 0;
	if (sg_resp_buf_add(&so->buf, &so->len, &so->cap, b, n)) return so->oom = 1;
	return 0;
}

/* What the encoder made so far leaves: the status first (now that audio exists: an error
 * before it is still a plain error response), then the bytes or one delta event. */
static void send_pending(speak_out *so)
{
	if (!so->begun) {
		so->begun = 1;
		sg_job_begin(so->job, 200, so->q->sse ? "text/event-stream" : audio_format_mime(so->q->format));
	}
	if (!so->len) return;
	if (so->q->sse) {
		json_t *a = sg_speech_base64(so->buf, so->len);
		if (!a || sg_resp_line(so->job, json_pack("{s:s,s:o}", "type", "speech.audio.delta", "audio", a), 1)) so->oom = 1;
	} else if (sg_job_write(so->job, so->buf, so->len)) {
		so->oom = 1;
	}
	so->len = 0;
}

static int on_audio(const float *pcm, size_t n, void *user)
{
	speak_out *so = user;
	if (atomic_load(&so->job->cancel)) return 1;
	if (!so->t_first) so->t_first = sg_time_s();
	if (audio_encoder_push(so->enc, pcm, n)) return 1;
	if (so->q->stream) send_pending(so);
	return so->oom;
}

static void respond_err(speak_out *so, const sg_srv_err *e)
{
	json_t *b = sg_resp_error_body(so->job->req.route, e);
	if (!so->begun) {
		sg_resp_send(so->job, e->status, b);
		return;
	}
	/* the audio has begun: an SSE stream ends with an error event; raw audio just ends short */
	if (so->q->sse) {
		json_object_set_new(b, "type", json_string("error"));
		sg_resp_line(so->job, b, 1);
	} else {
		json_decref(b);
	}
	sg_job_finish(so->job);
}

void sg_speech_run(sg_job *job)
{
	const sg_speech_req *q = job->extra;
	sg_tts *tts = sg_srv_model_tts(job->model);
	speak_out so = {.job = job, .q = q, .t0 = sg_time_s()};
	sg_srv_err e;
	if (!q || !tts) {
		sg_srv_err_set(&e, 500, "server_error", NULL, "the speech job has no text-to-speech model");
		respond_err(&so, &e);
		return;
	}
	const char *name = sg_srv_model_info_get(job->model)->name;
	int rate = sg_tts_sample_rate(tts);
	sg_status st = audio_encoder_open(q->format, rate, 0, enc_write, &so, &so.enc);
	if (!st) {
		sg_speak_params sp = sg_speak_default_params();
		sp.voice = q->use_voice;
		sp.instructions = q->instructions;
		sp.ref_audio = q->ref_audio, sp.ref_audio_size = q->ref_audio_size;
		sp.ref_text = q->ref_text, sp.x_vector_only = q->x_vector_only;
		sp.speed = q->speed;
		sp.max_chars = SG_SPEECH_MAX_CHARS;
		sp.on_audio = on_audio;
		sp.user = &so;
		st = sg_speak(tts, q->input, &sp, NULL, NULL);
		if (!st) st = audio_encoder_finish(so.enc);
	}
	if (atomic_load(&job->cancel)) {
		SG_INFO("serve: %s: speech stopped after %.2f s of audio (client gone)", name,
			so.enc ? (double)audio_encoder_samples(so.enc) / audio_encoder_out_rate(so.enc) : 0.0);
		sg_job_finish(job);
		goto done;
	}
	if (st || so.oom) {
		if (so.oom) sg_srv_err_set(&e, 500, "server_error", NULL, "out of memory for the audio");
		else {
			int status = st == SG_ERR_INVALID_ARG || st == SG_ERR_FORMAT || st == SG_ERR_UNSUPPORTED ? 400 : sg_resp_status(st);
			sg_srv_err_set(&e, status, status == 400 ? NULL : "server_error", status == 400 ? "input" : NULL, "%s",
				       sg_last_error());
		}
		SG_WARN("serve: %s: speech failed: %s", name, e.message);
		respond_err(&so, &e);
		goto done;
	}
	double secs = (double)audio_encoder_samples(so.enc) / audio_encoder_out_rate(so.enc);
	SG_INFO("serve: %s: spoke %zu characters as %.2f s of %s in %.2f s (first audio after %.3f s)", name, q->input_chars, secs,
		q->format, sg_time_s() - so.t0, so.t_first ? so.t_first - so.t0 : 0.0);
	if (!q->stream) {
		/* the whole file: its length fields can be true */
		if (so.len) audio_encoder_fix_header(so.enc, so.buf, so.len);
		sg_job_respond(job, 200, audio_format_mime(q->format), so.buf ? so.buf : "", so.len);
		goto done;
	}
	send_pending(&so);
	if (q->sse) {
		/* usage: the input's characters as input tokens, the audio's 20 ms frames as output */
		json_int_t in = (json_int_t)q->input_chars, out = (json_int_t)(secs * 50 + 0.5);
		sg_resp_line(job, json_pack("{s:s,s:{s:I,s:I,s:I}}", "type", "speech.audio.done", "usage", "input_tokens", in,
					    "output_tokens", out, "total_tokens", in + out),
			     1);
	}
	sg_job_finish(job);
done:
	audio_encoder_free(so.enc);
	sg_free(so.buf);
}
