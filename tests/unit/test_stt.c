/* Speech-to-text above the model: Whisper's decoding rules on synthetic logits, the split of a
 * window's tokens into segments, the transcript writers, and the multipart parser of the audio
 * routes. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "engine/stt_rules.h"
#include "engine/transcribe.h"
#include "server/multipart.h"
#include "server/routes_audio.h"

/* A Whisper-shaped vocabulary without a tokenizer: 50 text ids, the specials, 1501 timestamps. */
enum { EOT = 50, SOT, TRANSLATE, TRANSCRIBE, SOT_LM, SOT_PREV, NO_SPEECH, NO_TS, TB, NV = TB + 1501, BLANK = 10 };

static sg_stt_vocab vocab(void)
{
	sg_stt_vocab v = {0};
	v.n_vocab = NV;
	v.eot = EOT;
	v.sot = SOT;
	v.translate = TRANSLATE;
	v.transcribe = TRANSCRIBE;
	v.sot_lm = SOT_LM;
	v.sot_prev = SOT_PREV;
	v.no_speech = NO_SPEECH;
	v.no_timestamps = NO_TS;
	v.timestamp_begin = TB;
	v.blank = BLANK;
	return v;
}

static float logits[NV];

static void flat(float x)
{
	for (int i = 0; i < NV; i++) logits[i] = x;
}

Test(stt_rules, first_step_allows_only_timestamps_up_to_max_initial)
{
	sg_stt_vocab v = vocab();
	sg_stt_rules r = {.v = &v, .timestamps = 1, .max_initial_timestamp_index = 50};
	flat(0);
	sg_stt_rules_apply(&r, NULL, 0, logits);
	for (int i = 0; i < TB; i++) cr_assert(isinf(logits[i]) && logits[i] < 0, "text id %d allowed at the first step", i);
	for (int i = TB; i <= TB + 50; i++) cr_assert_eq(logits[i], 0.0f, "timestamp %d masked", i - TB);
	for (int i = TB + 51; i < NV; i++) cr_assert(isinf(logits[i]), "timestamp %d past max_initial allowed", i - TB);
}

Test(stt_rules, suppress_blank_masks_space_and_end_at_the_first_step_only)
{
	sg_stt_vocab v = vocab();
	int32_t sup[] = {7};
	sg_stt_rules r = {.v = &v, .suppress_blank = 1, .suppress = sup, .n_suppress = 1};
	flat(1);
	sg_stt_rules_apply(&r, NULL, 0, logits);
	cr_assert(isinf(logits[BLANK]) && isinf(logits[EOT]) && isinf(logits[7]));
	cr_assert_eq(logits[11], 1.0f);
	cr_assert_eq(logits[NO_TS], 1.0f, "without timestamps <|notimestamps|> is not the rules' business");
	int32_t s[] = {20};
	flat(1);
	sg_stt_rules_apply(&r, s, 1, logits);
	cr_assert_eq(logits[BLANK], 1.0f);
	cr_assert_eq(logits[EOT], 1.0f);
	cr_assert(isinf(logits[7]), "the suppressed set applies at every step");
}

Test(stt_rules, a_closed_pair_must_be_followed_by_text)
{
	sg_stt_vocab v = vocab();
	sg_stt_rules r = {.v = &v, .timestamps = 1, .max_initial_timestamp_index = -1};
	int32_t s[] = {TB, 20, 21, TB + 9, TB + 9};
	flat(0);
	logits[30] = 5; /* text wins: the timestamp-sum rule does not fire */
	sg_stt_rules_apply(&r, s, 5, logits);
	for (int i = TB; i < NV; i++) cr_assert(isinf(logits[i]), "timestamp %d allowed after a closed pair", i - TB);
	cr_assert_eq(logits[30], 5.0f);
	cr_assert(isinf(logits[NO_TS]));
}

Test(stt_rules, a_timestamp_after_text_must_be_closed_or_end)
{
	sg_stt_vocab v = vocab();
	sg_stt_rules r = {.v = &v, .timestamps = 1, .max_initial_timestamp_index = -1};
	int32_t s[] = {TB, 20, TB + 10};
	flat(0);
	logits[EOT] = 10; /* more probable than the timestamps together: the sum rule keeps it */
	sg_stt_rules_apply(&r, s, 3, logits);
	for (int i = 0; i < EOT; i++) cr_assert(isinf(logits[i]), "text id %d allowed inside a pair", i);
	cr_assert_eq(logits[EOT], 10.0f, "the end may follow a single timestamp");
	for (int i = TB; i < TB + 10; i++) cr_assert(isinf(logits[i]), "timestamp %d goes back", i - TB);
	cr_assert_eq(logits[TB + 10], 0.0f, "closing the pair at the same time is allowed");
}

Test(stt_rules, timestamps_never_go_back_and_segments_have_length)
{
	sg_stt_vocab v = vocab();
	sg_stt_rules r = {.v = &v, .timestamps = 1, .max_initial_timestamp_index = -1};
	int32_t s[] = {TB + 3, 20};
	flat(0);
	logits[25] = 9; /* text wins */
	sg_stt_rules_apply(&r, s, 2, logits);
	for (int i = TB; i <= TB + 3; i++) cr_assert(isinf(logits[i]), "timestamp %d not after the open one", i - TB);
	cr_assert_eq(logits[TB + 4], 0.0f);
}

Test(stt_rules, timestamps_win_when_their_summed_probability_beats_every_text_token)
{
	sg_stt_vocab v = vocab();
	sg_stt_rules r = {.v = &v, .timestamps = 1, .max_initial_timestamp_index = -1};
	int32_t s[] = {TB, 20};
	/* one text token at 3, every timestamp at 0: 1501 * e^0 > e^3 */
	flat(-INFINITY);
	logits[25] = 3;
	for (int i = TB; i < NV; i++) logits[i] = 0;
	sg_stt_rules_apply(&r, s, 2, logits);
	cr_assert(isinf(logits[25]), "text kept although the timestamps are more probable together");
	cr_assert_eq(logits[TB + 5], 0.0f);
	/* the text token at 8: e^8 = 2981 > 1500 * e^0 (the first timestamp is masked) */
	flat(-INFINITY);
	logits[25] = 8;
	for (int i = TB; i < NV; i++) logits[i] = 0;
	sg_stt_rules_apply(&r, s, 2, logits);
	cr_assert_eq(logits[25], 8.0f);
}

Test(stt_rules, log_softmax_normalises_and_keeps_minus_infinity)
{
	float x[4] = {1, 2, -INFINITY, 3}, y[4];
	sg_stt_log_softmax(x, 4, y);
	double s = 0;
	for (int i = 0; i < 4; i++) s += exp(y[i]);
	cr_assert_float_eq(s, 1.0, 1e-6);
	cr_assert(isinf(y[2]));
	cr_assert_float_eq(y[3] - y[1], 1.0f, 1e-6);
}

Test(stt_rules, compression_ratio_flags_repetition)
{
	const char *loop = "the the the the the the the the the the the the the the the the the the the the the the the";
	cr_assert_gt(sg_stt_compression_ratio(loop, strlen(loop)), 2.4);
	const char *plain = "And so my fellow Americans";
	cr_assert_lt(sg_stt_compression_ratio(plain, strlen(plain)), 1.5);
	cr_assert_eq(sg_stt_compression_ratio("", 0), 0.0);
}

Test(stt_split, pairs_cut_segments_and_a_single_end_completes_the_window)
{
	sg_stt_vocab v = vocab();
	int32_t t[] = {TB, 20, 21, TB + 50, TB + 50, 22, TB + 90};
	sg_stt_slice sl[8];
	int n = 0, seek = 100;
	sg_stt_split_segments(&v, t, 7, 1.0, 3000, &seek, sl, &n);
	cr_assert_eq(n, 2);
	cr_assert_eq(sl[0].begin, 0);
	cr_assert_eq(sl[0].end, 4);
	cr_assert_float_eq(sl[0].start, 1.0, 1e-9);
	cr_assert_float_eq(sl[0].end_s, 2.0, 1e-9);
	cr_assert_eq(sl[1].begin, 4);
	cr_assert_eq(sl[1].end, 7);
	cr_assert_float_eq(sl[1].end_s, 1.0 + 90 * 0.02, 1e-9);
	cr_assert_eq(seek, 3100, "a window that ends with a single timestamp is done whole");
}

Test(stt_split, an_unfinished_segment_is_dropped_and_seek_goes_to_the_last_pair)
{
	sg_stt_vocab v = vocab();
	int32_t t[] = {TB, 20, TB + 40, TB + 40, 21, 22};
	sg_stt_slice sl[8];
	int n = 0, seek = 0;
	sg_stt_split_segments(&v, t, 6, 0.0, 3000, &seek, sl, &n);
	cr_assert_eq(n, 1);
	cr_assert_eq(sl[0].end, 3);
	cr_assert_eq(seek, 80, "40 timestamp steps are 80 mel frames");
}

Test(stt_split, no_pair_is_one_segment_ending_at_the_last_timestamp)
{
	sg_stt_vocab v = vocab();
	int32_t t[] = {TB, 20, 21, TB + 7};
	sg_stt_slice sl[8];
	int n = 0, seek = 0;
	sg_stt_split_segments(&v, t, 4, 2.0, 1200, &seek, sl, &n);
	cr_assert_eq(n, 1);
	cr_assert_float_eq(sl[0].end_s, 2.0 + 7 * 0.02, 1e-9);
	cr_assert_eq(seek, 1200);
	int32_t u[] = {20, 21};
	sg_stt_split_segments(&v, u, 2, 0.0, 1200, &seek, sl, &n);
	cr_assert_float_eq(sl[0].end_s, 12.0, 1e-9, "no timestamp: the window's content");
}

static sg_transcript *two_segments(void)
{
	static sg_stt_segment seg[2];
	static sg_transcript tr;
	seg[0] = (sg_stt_segment){.id = 0, .start = 0, .end = 3.5, .text = " Hello there."};
	seg[1] = (sg_stt_segment){.id = 1, .start = 3.5, .end = 3725.042, .text = " a --> b"};
	tr = (sg_transcript){.segments = seg, .n_segments = 2, .text = "Hello there. a --> b", .duration = 3726};
	snprintf(tr.language, sizeof tr.language, "en");
	return &tr;
}

Test(stt_format, srt_and_vtt_cues)
{
	char *out;
	size_t len;
	cr_assert_eq(sg_transcript_format(two_segments(), "srt", "transcribe", &out, &len), SG_OK);
	cr_assert_str_eq(out, "1\n00:00:00,000 --> 00:00:03,500\nHello there.\n\n"
			      "2\n00:00:03,500 --> 01:02:05,042\na -> b\n\n");
	cr_assert_eq(len, strlen(out));
	sg_free(out);
	cr_assert_eq(sg_transcript_format(two_segments(), "vtt", "transcribe", &out, &len), SG_OK);
	cr_assert_str_eq(out, "WEBVTT\n\n00:00:00.000 --> 00:00:03.500\nHello there.\n\n"
			      "00:00:03.500 --> 01:02:05.042\na -> b\n\n");
	sg_free(out);
}

Test(stt_format, json_text_and_verbose_json)
{
	char *out;
	size_t len;
	cr_assert_eq(sg_transcript_format(two_segments(), "json", NULL, &out, &len), SG_OK);
	cr_assert_str_eq(out, "{\"text\":\"Hello there. a --> b\"}\n");
	sg_free(out);
	cr_assert_eq(sg_transcript_format(two_segments(), "text", NULL, &out, &len), SG_OK);
	cr_assert_str_eq(out, "Hello there. a --> b\n");
	sg_free(out);
	cr_assert_eq(sg_transcript_format(two_segments(), "verbose_json", "translate", &out, &len), SG_OK);
	cr_assert(strstr(out, "\"task\":\"translate\""));
	cr_assert(strstr(out, "\"language\":\"english\""));
	cr_assert(strstr(out, "\"end\":3725.042"));
	sg_free(out);
	cr_assert_eq(sg_transcript_format(two_segments(), "xml", NULL, &out, &len), SG_ERR_INVALID_ARG);
	cr_assert_null(out);
}

#define CT "multipart/form-data; boundary=XyZ"

static int mp_parse(const char *ct, const char *body, sg_multipart *mp, sg_srv_err *e)
{
	return sg_multipart_parse(ct, body, strlen(body), mp, e);
}

Test(multipart, parses_fields_and_a_file)
{
	const char *body = "preamble\r\n--XyZ\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\ntiny\r\n"
			   "--XyZ\r\ncontent-disposition: form-data; name=\"file\"; filename=\"a \\\"b\\\".wav\"\r\n"
			   "Content-Type: audio/wav\r\n\r\nRIFF\r\n--notit\r\n--XyZ--\r\nepilogue";
	sg_multipart mp;
	sg_srv_err e;
	cr_assert_eq(mp_parse(CT, body, &mp, &e), 0, "%s", e.message);
	cr_assert_eq(mp.n, 2);
	const sg_mp_part *m = sg_multipart_get(&mp, "model");
	cr_assert_eq(m->len, 4);
	cr_assert_eq(memcmp(m->data, "tiny", 4), 0);
	cr_assert_eq(m->has_filename, 0);
	const sg_mp_part *f = sg_multipart_get(&mp, "file");
	cr_assert_str_eq(f->filename, "a \"b\".wav");
	cr_assert_str_eq(f->ctype, "audio/wav");
	cr_assert_eq(f->len, strlen("RIFF\r\n--notit"));
}

Test(multipart, quoted_boundary_and_body_opening_with_it)
{
	const char *body = "--a b\r\nContent-Disposition: form-data; name=x\r\n\r\n1\r\n--a b--";
	sg_multipart mp;
	sg_srv_err e;
	cr_assert_eq(mp_parse("multipart/form-data; charset=utf-8; boundary=\"a b\"", body, &mp, &e), 0, "%s", e.message);
	cr_assert_eq(mp.n, 1);
	cr_assert_str_eq(mp.parts[0].name, "x");
}

Test(multipart, rejects_bad_bodies_with_400_or_415)
{
	sg_multipart mp;
	sg_srv_err e;
	cr_assert_eq(mp_parse("application/json", "{}", &mp, &e), 415);
	cr_assert_eq(mp_parse("multipart/form-data", "x", &mp, &e), 400, "no boundary parameter");
	cr_assert_eq(mp_parse(CT, "", &mp, &e), 400, "empty");
	cr_assert_eq(mp_parse(CT, "--XyZ\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nabc", &mp, &e), 400, "truncated");
	cr_assert(strstr(e.message, "truncated"));
	cr_assert_eq(mp_parse(CT, "--XyZ\r\nContent-Type: a\r\n\r\nabc\r\n--XyZ--", &mp, &e), 400, "no disposition");
	cr_assert_eq(mp_parse(CT, "--XyZ\r\nContent-Disposition: form-data; name=\"f\r\n\r\nabc\r\n--XyZ--", &mp, &e), 400,
		     "unterminated quote");
	cr_assert_eq(mp_parse(CT, "--XyZ\r\nContent-Disposition: attachment; name=\"f\"\r\n\r\nabc\r\n--XyZ--", &mp, &e), 400);
}

Test(audio_form, missing_file_model_and_bad_fields_name_the_field)
{
	sg_multipart mp;
	sg_srv_err e;
	sg_audio_req q;
	const char *no_file = "--XyZ\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\ntiny\r\n--XyZ--";
	cr_assert_eq(mp_parse(CT, no_file, &mp, &e), 0);
	cr_assert_eq(sg_audio_parse(SG_ROUTE_OAI_TRANSCRIPTIONS, &mp, &q, &e), 400);
	cr_assert_str_eq(e.param, "file");
	sg_audio_req_free(&q);
	const char *bad_fmt = "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\nRIFF\r\n"
			      "--XyZ\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\ntiny\r\n"
			      "--XyZ\r\nContent-Disposition: form-data; name=\"response_format\"\r\n\r\nxml\r\n--XyZ--";
	cr_assert_eq(mp_parse(CT, bad_fmt, &mp, &e), 0);
	cr_assert_eq(sg_audio_parse(SG_ROUTE_OAI_TRANSCRIPTIONS, &mp, &q, &e), 400);
	cr_assert_str_eq(e.param, "response_format");
	sg_audio_req_free(&q);
	const char *ok = "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\nRIFF\r\n"
			 "--XyZ\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\ntiny\r\n"
			 "--XyZ\r\nContent-Disposition: form-data; name=\"temperature\"\r\n\r\n0.4\r\n"
			 "--XyZ\r\nContent-Disposition: form-data; name=\"response_format\"\r\n\r\nverbose_json\r\n"
			 "--XyZ\r\nContent-Disposition: form-data; name=\"timestamp_granularities[]\"\r\n\r\nword\r\n"
			 "--XyZ\r\nContent-Disposition: form-data; name=\"stream\"\r\n\r\ntrue\r\n--XyZ--";
	cr_assert_eq(mp_parse(CT, ok, &mp, &e), 0);
	cr_assert_eq(sg_audio_parse(SG_ROUTE_OAI_TRANSCRIPTIONS, &mp, &q, &e), 0, "%s", e.message);
	cr_assert_str_eq(q.model, "tiny");
	cr_assert_float_eq(q.temperature, 0.4f, 1e-6);
	cr_assert_eq(q.words, 1);
	cr_assert_eq(q.stream, 1);
	cr_assert_eq(q.len, 4);
	sg_audio_req_free(&q);
}
