/* Spoken chat answers (see routes_chat_voice.h). */
#include "server/routes_chat_voice.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "audio/encode.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/log.h"
#include "engine/tts.h"
#include "server/model.h"
#include "server/pool.h"
#include "server/response.h"
#include "server/routes_speech.h"

#define EXPIRES_S 3600 /* what audio.expires_at says: an hour after the answer */

/* ---- the request ---- */

int sg_chat_audio_parse(const json_t *b, sg_srv_req *r, sg_srv_err *e)
{
	json_t *mods = json_object_get(b, "modalities");
	json_t *audio = json_object_get(b, "audio");
	if (mods && !json_is_null(mods)) {
		if (!json_is_array(mods)) return -sg_srv_wrong_type(e, "modalities", "an array of strings", mods);
		size_t i;
		json_t *m;
		json_array_foreach(mods, i, m) {
			const char *s = json_string_value(m);
			if (!s || sg_srv_has_nul(m) || (strcmp(s, "text") && strcmp(s, "audio")))
				return sg_srv_err_set(e, 400, NULL, "modalities", "'modalities' holds \"text\" and \"audio\", not %s",
						      s ? "another string" : "a non-string");
			if (!strcmp(s, "audio")) r->audio_out = 1;
		}
	}
	if (!r->audio_out) {
		if (audio && !json_is_null(audio))
			return sg_srv_err_set(e, 400, NULL, "audio", "'audio' needs \"audio\" in 'modalities'");
		return 0;
	}
	if (!r->chat) return sg_srv_err_set(e, 400, NULL, "modalities", "audio output is for /v1/chat/completions");
	if (!audio || json_is_null(audio))
		return sg_srv_err_set(e, 400, NULL, "audio", "'modalities' asks for audio: 'audio' ({\"voice\", \"format\"}) is required");
	if (!json_is_object(audio)) return -sg_srv_wrong_type(e, "audio", "an object", audio);
	const char *voice = NULL, *fmt = NULL;
	int g;
	json_t *v = json_object_get(audio, "voice");
	if (json_is_object(v)) g = sg_srv_get_str(v, "id", "audio.voice.id", &voice, e);
	else g = sg_srv_get_str(audio, "voice", "audio.voice", &voice, e);
	if (g < 0) return e->status;
	if (!g || !*voice) return sg_srv_err_set(e, 400, NULL, "audio.voice", "'audio.voice' is required");
	if (strlen(voice) >= sizeof r->audio_voice)
		return sg_srv_err_set(e, 400, NULL, "audio.voice", "'audio.voice' is longer than %zu bytes", sizeof r->audio_voice - 1);
	if ((g = sg_srv_get_str(audio, "format", "audio.format", &fmt, e)) < 0) return e->status;
	if (!g) return sg_srv_err_set(e, 400, NULL, "audio.format", "'audio.format' is required (wav, mp3, flac, opus or pcm16)");
	if (!strcmp(fmt, "aac"))
		return sg_srv_err_set(e, 400, NULL, "audio.format",
				      "'audio.format' aac is not available: this server has no AAC encoder; use wav, mp3, flac, opus "
				      "or pcm16");
	const char *enc = !strcmp(fmt, "pcm16") ? "pcm" : fmt;
	if (strcmp(enc, "pcm") && strcmp(enc, "wav") && strcmp(enc, "mp3") && strcmp(enc, "flac") && strcmp(enc, "opus"))
		return sg_srv_err_set(e, 400, NULL, "audio.format",
				      "'audio.format' must be wav, mp3, flac, opus or pcm16, not '%.40s'", fmt);
	if (!audio_format_available(enc))
		return sg_srv_err_set(e, 400, NULL, "audio.format",
				      "'audio.format' %s is not available: this server's libsndfile has no MPEG Layer III writer", fmt);
	snprintf(r->audio_voice, sizeof r->audio_voice, "%s", voice);
	snprintf(r->audio_format, sizeof r->audio_format, "%s", enc);
	return 0;
}

/* What the connection binds to the job: the voice model, held. */
typedef struct chat_audio {
	sg_srv_model *tts;
	struct sg_pool *pool;
	const char *voice; /* the model's own name (immutable), NULL: its default */
} chat_audio;

static void chat_audio_destroy(void *p)
{
	chat_audio *a = p;
	if (!a) return;
	sg_pool_release(a->pool, a->tts);
	sg_free(a);
}

int sg_chat_audio_attach(sg_job *j, sg_srv_model *tts, struct sg_pool *pool, sg_srv_err *e)
{
	chat_audio *a = sg_calloc(1, sizeof *a);
	int st = a ? sg_speech_voice(sg_srv_model_tts(tts), j->req.audio_voice, "audio.voice", &a->voice, e) : sg_srv_oom(e);
	if (st || j->extra) {
		if (!st) st = sg_srv_err_set(e, 500, "server_error", NULL, "the request already carries other work");
		sg_free(a);
		sg_pool_release(pool, tts);
		return st;
	}
	a->tts = tts;
	a->pool = pool;
	j->extra = a;
	j->extra_free = chat_audio_destroy;
	return 0;
}

/* ---- the worker ---- */

struct sg_chat_voice {
	sg_job *job;
	const char *model_name;
	sg_tts *tts;
	const char *voice;
	int stream;
	audio_encoder *enc;
	char id[64];
	char *pending; /* text not spoken yet (a sentence not finished) */
	size_t plen, pcap;
	char *bytes;   /* encoded bytes not sent yet (a whole answer: all of them) */
	size_t blen, bcap;
	int oom;
};

static int enc_write(const void *b, size_t n, void *user)
{
	sg_chat_voice *v = user;
	if (sg_resp_buf_add(&v->bytes, &v->blen, &v->bcap, b, n)) return v->oom = 1;
	return 0;
}

sg_chat_voice *sg_chat_voice_new(sg_job *job, const char *model_name, int *oom)
{
	*oom = 0;
	if (!job->req.audio_out || job->extra_free != chat_audio_destroy) return NULL;
	const chat_audio *a = job->extra;
	sg_chat_voice *v = sg_calloc(1, sizeof *v);
	if (!v) {
		*oom = 1;
		return NULL;
	}
	v->job = job;
	v->model_name = model_name;
	v->tts = sg_srv_model_tts(a->tts);
	v->voice = a->voice;
	v->stream = job->req.stream;
	const char *tail = strchr(job->id, '-');
	snprintf(v->id, sizeof v->id, "audio_%s", tail ? tail + 1 : job->id);
	if (audio_encoder_open(job->req.audio_format, sg_tts_sample_rate(v->tts), 0, enc_write, v, &v->enc)) {
		SG_WARN("serve: %s: %s", job->id, sg_last_error());
		sg_free(v);
		*oom = 1;
		return NULL;
	}
	return v;
}

/* One chunk delta: {"audio": fields} in the shape of the chat stream's chunks. */
static int send_delta(sg_chat_voice *v, json_t *audio)
{
	json_object_set_new(audio, "id", json_string(v->id));
	json_t *c = json_pack("{s:s,s:s,s:I,s:s,s:s,s:[{s:i,s:{s:o},s:n,s:n}]}", "id", v->job->id, "object",
			      "chat.completion.chunk", "created", (json_int_t)v->job->created, "model", v->model_name,
			      "system_fingerprint", "saragossa", "choices", "index", 0, "delta", "audio", audio, "logprobs",
			      "finish_reason");
	return !c || sg_resp_line(v->job, c, 1) ? -1 : 0;
}

/* A streamed answer: the encoded bytes so far leave as one data delta. */
static int flush_bytes(sg_chat_voice *v)
{
	if (!v->stream || !v->blen) return 0;
	json_t *d = sg_speech_base64(v->bytes, v->blen);
	v->blen = 0;
	return d ? send_delta(v, json_pack("{s:o}", "data", d)) : -1;
}

static int on_audio(const float *pcm, size_t n, void *user)
{
	sg_chat_voice *v = user;
	if (atomic_load(&v->job->cancel)) return 1;
	if (audio_encoder_push(v->enc, pcm, n) || v->oom) return 1;
	return flush_bytes(v) ? 1 : 0;
}

/* Speaks text[0..n) (whole sentences). */
static int speak(sg_chat_voice *v, const char *text, size_t n, sg_srv_err *e)
{
	char *s = sg_malloc(n + 1);
	if (!s) return sg_srv_oom(e), -1;
	memcpy(s, text, n);
	s[n] = 0;
	/* nothing to say (white space, or marks alone): no audio, and no error */
	int blank = 1;
	for (size_t i = 0; i < n && blank; i++) blank = strchr(" \t\r\n.,;:!?*-#`\"'", s[i]) != NULL;
	sg_status st = SG_OK;
	if (!blank) {
		sg_speak_params sp = sg_speak_default_params();
		sp.voice = v->voice;
		sp.max_chars = n + 1;
		sp.on_audio = on_audio;
		sp.user = v;
		st = sg_speak(v->tts, s, &sp, NULL, NULL);
	}
	sg_free(s);
	if (!st && !v->oom) return 0;
	if (v->oom) sg_srv_oom(e);
	else sg_srv_err_set(e, st == SG_ERR_CANCELLED ? 499 : 500, "server_error", NULL, "speaking the answer: %s", sg_last_error());
	return -1;
}

int sg_chat_voice_text(sg_chat_voice *v, const char *s, size_t n, sg_srv_err *e)
{
	if (!n) return 0;
	json_t *t = sg_resp_string(s, n);
	if (!t || send_delta(v, json_pack("{s:o}", "transcript", t))) return sg_srv_oom(e), -1;
	if (sg_resp_buf_add(&v->pending, &v->plen, &v->pcap, s, n)) return sg_srv_oom(e), -1;
	/* every sentence but the last is finished (a sentence ends at white space after its mark) */
	tts_span *sp = NULL;
	int k = 0;
	if (tts_split_sentences(v->pending, v->plen, 0, &sp, &k)) return sg_srv_oom(e), -1;
	int r = 0;
	if (k > 1) {
		size_t done = sp[k - 1].start;
		r = speak(v, v->pending, done, e);
		memmove(v->pending, v->pending + done, v->plen - done);
		v->plen -= done;
	}
	sg_free(sp);
	return r;
}

int sg_chat_voice_end(sg_chat_voice *v, sg_srv_err *e)
{
	if (v->plen && speak(v, v->pending, v->plen, e)) return -1;
	v->plen = 0;
	if (audio_encoder_finish(v->enc)) {
		sg_srv_err_set(e, 500, "server_error", NULL, "speaking the answer: %s", sg_last_error());
		return -1;
	}
	if (flush_bytes(v)) return sg_srv_oom(e), -1;
	return send_delta(v, json_pack("{s:I}", "expires_at", (json_int_t)(v->job->created + EXPIRES_S))) ? (sg_srv_oom(e), -1) : 0;
}

json_t *sg_chat_voice_message(sg_chat_voice *v, const char *text, size_t n, sg_srv_err *e)
{
	if (n && speak(v, text, n, e)) return NULL;
	if (audio_encoder_finish(v->enc)) {
		sg_srv_err_set(e, 500, "server_error", NULL, "speaking the answer: %s", sg_last_error());
		return NULL;
	}
	if (v->blen) audio_encoder_fix_header(v->enc, v->bytes, v->blen);
	json_t *d = sg_speech_base64(v->bytes ? v->bytes : "", v->blen);
	json_t *a = d ? json_pack("{s:s,s:o,s:I,s:o}", "id", v->id, "data", d, "expires_at",
				  (json_int_t)(v->job->created + EXPIRES_S), "transcript", sg_resp_string(text ? text : "", n))
		      : NULL;
	if (!a) sg_srv_oom(e);
	SG_INFO("serve: %s: spoke the answer as %.2f s of %s", v->job->id,
		(double)audio_encoder_samples(v->enc) / audio_encoder_out_rate(v->enc), v->job->req.audio_format);
	return a;
}

void sg_chat_voice_free(sg_chat_voice *v)
{
	if (!v) return;
	audio_encoder_free(v->enc);
	sg_free(v->pending);
	sg_free(v->bytes);
	sg_free(v);
}
