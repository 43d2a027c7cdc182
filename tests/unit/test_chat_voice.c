/* The LLM -> TTS hand-off of spoken chat answers (server/routes_chat_voice.c) on the synthetic
 * tone voice: a streamed answer's text is spoken as soon as a sentence is finished (the audio
 * of "Hello there." leaves before the next sentence's end arrives), the rest at the end; the
 * request's audio fields are checked. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <string.h>

#include "server/job.h"
#include "server/pool.h"
#include "server/routes_chat_voice.h"

#define TONE "tests/fixtures/tts/test.tone.json"

static int count(const char *hay, size_t n, const char *needle)
{
	int k = 0;
	size_t l = strlen(needle);
	for (size_t i = 0; i + l <= n; i++) k += !memcmp(hay + i, needle, l);
	return k;
}

/* A pool holding the tone voice, and a streamed chat job bound to it. */
static sg_job *voice_job(sg_pool **pool, int stream, const char *format)
{
	sg_server_model_spec spec = {.name = "tone", .path = TONE, .tts = 1};
	cr_assert_eq(sg_pool_new(&spec, 1, 0, 0, NULL, pool), SG_OK, "%s", sg_last_error());
	cr_assert_eq(sg_pool_load_initial(*pool), SG_OK, "%s", sg_last_error());
	sg_srv_model *m = sg_pool_acquire(*pool, 0);
	cr_assert_not_null(m);
	sg_job *j = sg_job_new();
	cr_assert_not_null(j);
	snprintf(j->id, sizeof j->id, "chatcmpl-test");
	j->req.route = SG_ROUTE_OAI_CHAT;
	j->req.chat = 1;
	j->req.stream = stream;
	j->req.audio_out = 1;
	snprintf(j->req.audio_voice, sizeof j->req.audio_voice, "alloy");
	snprintf(j->req.audio_format, sizeof j->req.audio_format, "%s", format);
	sg_srv_err e;
	cr_assert_eq(sg_chat_audio_attach(j, m, *pool, &e), 0, "%s", e.message);
	return j;
}

Test(chat_voice, a_finished_sentence_is_spoken_before_the_next_arrives)
{
	sg_pool *pool;
	sg_job *j = voice_job(&pool, 1, "pcm");
	int oom;
	sg_chat_voice *v = sg_chat_voice_new(j, "q3", &oom);
	cr_assert_not_null(v);
	sg_srv_err e;
	/* tokens as an LLM sends them */
	static const char *const pieces[] = {"Hel", "lo", " there", ".", " How", " are", " you", "?"};
	int data_after[8];
	for (int i = 0; i < 8; i++) {
		cr_assert_eq(sg_chat_voice_text(v, pieces[i], strlen(pieces[i]), &e), 0, "%s", e.message);
		data_after[i] = count(j->out, j->out_len, "\"data\"");
	}
	/* "Hello there." is finished once the white space after it comes */
	cr_assert_eq(data_after[3], 0, "spoken before the sentence was known to end");
	cr_assert_gt(data_after[4], 0, "the first sentence was not spoken when the second began");
	cr_assert_eq(data_after[7], data_after[4], "the unfinished second sentence was spoken early");
	cr_assert_eq(count(j->out, j->out_len, "\"transcript\""), 8);
	cr_assert_eq(sg_chat_voice_end(v, &e), 0, "%s", e.message);
	cr_assert_gt(count(j->out, j->out_len, "\"data\""), data_after[7]);
	cr_assert_eq(count(j->out, j->out_len, "\"expires_at\""), 1);
	cr_assert_eq(count(j->out, j->out_len, "\"id\":\"audio_test\""), count(j->out, j->out_len, "\"audio\":{"));
	sg_chat_voice_free(v);
	sg_job_unref(j);
	sg_pool_free(pool);
}

Test(chat_voice, a_whole_answer_is_one_audio_object)
{
	sg_pool *pool;
	sg_job *j = voice_job(&pool, 0, "wav");
	int oom;
	sg_chat_voice *v = sg_chat_voice_new(j, "q3", &oom);
	sg_srv_err e;
	const char *text = "Hello there. How are you?";
	json_t *a = sg_chat_voice_message(v, text, strlen(text), &e);
	cr_assert_not_null(a, "%s", e.message);
	cr_assert_str_eq(json_string_value(json_object_get(a, "transcript")), text);
	cr_assert_str_eq(json_string_value(json_object_get(a, "id")), "audio_test");
	/* the WAV header and 2 bytes a sample (30429 samples at most), base64 */
	size_t b64 = json_string_length(json_object_get(a, "data"));
	cr_assert(b64 > 4 * (44 + 2 * 29000) / 3 && b64 <= 4 * (44 + 2 * 30429 + 2) / 3 + 4, "%zu base64 bytes", b64);
	cr_assert_eq(j->out_len, 0, "a whole answer writes nothing before its message");
	json_decref(a);
	sg_chat_voice_free(v);
	sg_job_unref(j);
	sg_pool_free(pool);
}

Test(chat_voice, the_request_fields_are_checked)
{
	static const struct {
		const char *body;
		int status;
		const char *param;
	} cases[] = {
		{"{\"modalities\": [\"text\", \"audio\"], \"audio\": {\"voice\": \"alloy\", \"format\": \"pcm16\"}}", 0, ""},
		{"{\"modalities\": [\"text\"]}", 0, ""},
		{"{\"modalities\": [\"text\", \"audio\"], \"audio\": {\"voice\": {\"id\": \"lo\"}, \"format\": \"opus\"}}", 0, ""},
		{"{\"modalities\": \"audio\"}", 400, "modalities"},
		{"{\"modalities\": [\"audio\"]}", 400, "audio"},
		{"{\"modalities\": [\"audio\"], \"audio\": {\"format\": \"wav\"}}", 400, "audio.voice"},
		{"{\"modalities\": [\"audio\"], \"audio\": {\"voice\": \"alloy\"}}", 400, "audio.format"},
		{"{\"modalities\": [\"audio\"], \"audio\": {\"voice\": \"alloy\", \"format\": \"aac\"}}", 400, "audio.format"},
		{"{\"modalities\": [\"audio\"], \"audio\": [1]}", 400, "audio"},
		{"{\"audio\": {\"voice\": \"alloy\", \"format\": \"wav\"}}", 400, "audio"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		json_t *b = json_loads(cases[i].body, 0, NULL);
		cr_assert_not_null(b);
		sg_srv_req r = {.chat = 1};
		sg_srv_err e = {0};
		int st = sg_chat_audio_parse(b, &r, &e);
		cr_assert_eq(st, cases[i].status, "case %zu: %d %s", i, st, e.message);
		if (st) cr_assert_str_eq(e.param, cases[i].param, "case %zu", i);
		json_decref(b);
	}
}
