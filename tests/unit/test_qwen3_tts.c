/*
 * Qwen3-TTS on its reference fixture (tests/fixtures/qwen3_tts/tiny: a random-weight model at small
 * shapes made by tools/make_qwen_tts_fixtures.py with the qwen-tts package, float32 on the CPU):
 * greedy codes identical to the package's generate() for a preset speaker (whole text in the
 * prompt), a designed voice (instructions, text fed per frame) and a dialect-free second speaker;
 * the codec decoder's waveform within 1e-4 of the package's, one-shot and chunked; bad inputs.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "models/qwen3_tts.h"
#include "models/qwen3_tts_codec.h"

#include "tts_ref.h"

#define FIX "tests/fixtures/qwen3_tts/tiny"

static json_t *ref(void) { return tts_ref_load(FIX "/ref.json"); }

static sg_qwen3_tts *load(void)
{
	sg_qwen3_tts *m = NULL;
	cr_assert_eq(sg_qwen3_tts_load(FIX, "cpu", 1, &m), SG_OK, "%s", sg_last_error());
	return m;
}

Test(qwen3_tts, config_speakers_and_languages)
{
	sg_qwen3_tts *m = load();
	cr_expect_eq(sg_qwen3_tts_groups(m), 4);
	cr_expect_str_eq(sg_qwen3_tts_type(m), "custom_voice");
	cr_assert_eq(sg_qwen3_tts_n_speakers(m), 2);
	cr_expect_str_eq(sg_qwen3_tts_speaker(m, 0), "alice");
	cr_expect_str_eq(sg_qwen3_tts_speaker(m, 1), "bob");
	cr_expect_eq(sg_qwen3_tts_n_languages(m), 2);
	sg_qwen3_tts_free(m);
}

typedef struct {
	int n;
	int32_t seen[64 * 4];
} frames_seen;

static int on_frame(const int32_t *codes, int frame, void *user)
{
	frames_seen *s = user;
	cr_expect_eq(frame, s->n);
	if (s->n < 64) memcpy(s->seen + s->n * 4, codes, sizeof(int32_t) * 4);
	s->n++;
	return 0;
}

Test(qwen3_tts, greedy_codes_match_the_package)
{
	json_t *r = ref();
	sg_qwen3_tts *m = load();
	json_t *cases = json_object_get(r, "cases");
	cr_assert_eq(json_array_size(cases), 3);
	for (size_t c = 0; c < json_array_size(cases); c++) {
		json_t *k = json_array_get(cases, c);
		int n_ids, n_ins = 0, n_ref;
		int32_t *ids = ints(json_object_get(k, "input_ids"), &n_ids);
		json_t *ins = json_object_get(k, "instruct_ids");
		int32_t *iids = json_is_array(ins) ? ints(ins, &n_ins) : NULL;
		int32_t *want = codes_of(json_object_get(k, "codes"), 4, &n_ref);
		sg_qwen3_tts_gen g = sg_qwen3_tts_gen_defaults(m);
		frames_seen fs = {0};
		g.ids = ids, g.n_ids = n_ids, g.instruct_ids = iids, g.n_instruct = n_ins;
		g.speaker = json_string_value(json_object_get(k, "speaker"));
		g.language = json_string_value(json_object_get(k, "language"));
		g.non_streaming = json_is_true(json_object_get(k, "non_streaming_mode"));
		g.max_frames = (int)json_integer_value(json_object_get(k, "max_new_tokens"));
		g.temperature = 0, g.sub_temperature = 0;
		g.on_frame = on_frame, g.user = &fs;
		int32_t *got = NULL;
		int n = 0;
		cr_assert_eq(sg_qwen3_tts_generate(m, &g, &got, &n), SG_OK, "case %zu: %s", c, sg_last_error());
		cr_expect_eq(n, n_ref, "case %zu: %d frames, the package made %d", c, n, n_ref);
		cr_expect_eq(fs.n, n);
		for (int i = 0; i < n && i < n_ref; i++)
			for (int j = 0; j < 4; j++)
				cr_expect_eq(got[i * 4 + j], want[i * 4 + j], "case %zu frame %d code %d: %d, the package %d", c, i, j,
					     got[i * 4 + j], want[i * 4 + j]);
		cr_expect(memcmp(fs.seen, got, sizeof(int32_t) * 4 * (size_t)(n < 64 ? n : 64)) == 0);
		sg_free(got);
		free(ids), free(iids), free(want);
	}
	sg_qwen3_tts_free(m);
	json_decref(r);
}

Test(qwen3_tts, sampling_is_seeded_and_stays_in_range)
{
	json_t *r = ref();
	sg_qwen3_tts *m = load();
	json_t *k = json_array_get(json_object_get(r, "cases"), 0);
	int n_ids;
	int32_t *ids = ints(json_object_get(k, "input_ids"), &n_ids);
	sg_qwen3_tts_gen g = sg_qwen3_tts_gen_defaults(m);
	g.ids = ids, g.n_ids = n_ids, g.speaker = "Alice", g.max_frames = 10, g.seed = 7;
	int32_t *a = NULL, *b = NULL;
	int na = 0, nb = 0;
	cr_assert_eq(sg_qwen3_tts_generate(m, &g, &a, &na), SG_OK, "%s", sg_last_error());
	cr_assert_eq(sg_qwen3_tts_generate(m, &g, &b, &nb), SG_OK, "%s", sg_last_error());
	cr_expect_eq(na, nb);
	cr_expect(memcmp(a, b, sizeof(int32_t) * 4 * (size_t)na) == 0, "same seed, same codes");
	for (int i = 0; i < na * 4; i++) cr_expect(a[i] >= 0 && a[i] < 64, "code %d", a[i]);
	sg_free(a), sg_free(b), free(ids);
	sg_qwen3_tts_free(m);
	json_decref(r);
}

Test(qwen3_tts, bad_inputs_are_errors)
{
	sg_qwen3_tts *m = load();
	int32_t ids[10] = {390, 11, 12, 5, 6, 391, 13, 390, 11, 12};
	sg_qwen3_tts_gen g = sg_qwen3_tts_gen_defaults(m);
	g.ids = ids, g.n_ids = 10, g.max_frames = 4;
	int32_t *c = NULL;
	int n;
	g.speaker = "carol";
	cr_expect_eq(sg_qwen3_tts_generate(m, &g, &c, &n), SG_ERR_INVALID_ARG);
	cr_expect(strstr(sg_last_error(), "alice, bob"), "%s", sg_last_error());
	g.speaker = NULL, g.language = "klingon";
	cr_expect_eq(sg_qwen3_tts_generate(m, &g, &c, &n), SG_ERR_INVALID_ARG);
	cr_expect(strstr(sg_last_error(), "auto, chinese, english"), "%s", sg_last_error());
	g.language = NULL, g.n_ids = 5;
	cr_expect_eq(sg_qwen3_tts_generate(m, &g, &c, &n), SG_ERR_INVALID_ARG);
	g.n_ids = 10, ids[4] = 100000;
	cr_expect_eq(sg_qwen3_tts_generate(m, &g, &c, &n), SG_ERR_INVALID_ARG);
	ids[4] = 6, g.max_frames = 0;
	cr_expect_eq(sg_qwen3_tts_generate(m, &g, &c, &n), SG_ERR_INVALID_ARG);
	cr_expect_null(c);
	sg_qwen3_tts_free(m);
	sg_qwen3_tts *x = NULL;
	cr_expect_neq(sg_qwen3_tts_load("tests/fixtures/no-such-model", "cpu", 1, &x), SG_OK);
	cr_expect_neq(sg_qwen3_tts_load("tests/fixtures/qwen3", "cpu", 1, &x), SG_OK);
	cr_expect_null(x);
}

static void expect_close(const float *got, const float *want, int n, const char *what)
{
	double max_ref = 0, max_err = 0;
	int at = 0;
	for (int i = 0; i < n; i++) {
		if (fabs(want[i]) > max_ref) max_ref = fabs(want[i]);
		if (fabs(got[i] - want[i]) > max_err) max_err = fabs(got[i] - want[i]), at = i;
	}
	/* relative to the waveform's peak; the reference is stored to 7 decimals */
	cr_expect(max_err <= 1e-4 * max_ref + 1e-7, "%s: max error %g at sample %d (peak %g): %g vs %g", what, max_err, at, max_ref,
		  got[at], want[at]);
}

typedef struct {
	float *pcm;
	size_t n, calls;
	int stop_after;
} sink;

static int collect(const float *pcm, size_t n, void *user)
{
	sink *s = user;
	memcpy(s->pcm + s->n, pcm, sizeof(float) * n);
	s->n += n;
	s->calls++;
	return s->stop_after && (int)s->calls >= s->stop_after;
}

Test(qwen3_tts, codec_waveform_matches_the_package)
{
	json_t *r = ref();
	json_t *d = json_object_get(r, "decode");
	sg_backend *be = cpu();
	sg_qwen3_tts_codec *c = NULL;
	cr_assert_eq(sg_qwen3_tts_codec_load(FIX "/speech_tokenizer", be, &c), SG_OK, "%s", sg_last_error());
	cr_expect_eq(sg_qwen3_tts_codec_upsample(c), 24);
	cr_expect_eq(sg_qwen3_tts_codec_sample_rate(c), 24000);
	int n, nw;
	int32_t *codes = codes_of(json_object_get(d, "codes"), 4, &n);
	float *want = floats(json_object_get(d, "wav"), &nw);
	cr_assert_eq(nw, n * 24);
	float *wav = malloc(sizeof(float) * (size_t)nw);
	cr_assert_eq(sg_qwen3_tts_codec_decode(c, codes, n, wav), SG_OK, "%s", sg_last_error());
	expect_close(wav, want, nw, "one-shot");

	/* the package's chunked decode (chunk 3, left context 5: shorter than the codec's window, so
	 * it differs from the one-shot waveform) */
	int ns;
	float *want_s = floats(json_object_get(d, "wav_stream"), &ns);
	sink s = {calloc((size_t)nw, sizeof(float)), 0, 0, 0};
	sg_qwen3_tts_stream *st = NULL;
	cr_assert_eq(sg_qwen3_tts_stream_open(c, (int)json_integer_value(json_object_get(d, "stream_chunk")),
					      (int)json_integer_value(json_object_get(d, "stream_context")), collect, &s, &st),
		     SG_OK);
	for (int f = 0; f < n; f++) cr_assert_eq(sg_qwen3_tts_stream_push(st, codes + f * 4), SG_OK, "%s", sg_last_error());
	cr_assert_eq(sg_qwen3_tts_stream_finish(st), SG_OK);
	cr_expect_eq(s.n, (size_t)nw);
	cr_expect_eq(s.calls, (size_t)(n + 2) / 3);
	expect_close(s.pcm, want_s, nw, "chunked");
	sg_qwen3_tts_stream_free(st);

	/* with a left context covering every earlier frame the chunks concatenated are the one-shot
	 * waveform (the decoder is causal); a short first chunk too */
	memset(s.pcm, 0, sizeof(float) * (size_t)nw);
	s.n = s.calls = 0;
	cr_assert_eq(sg_qwen3_tts_stream_open(c, 4, n, collect, &s, &st), SG_OK);
	sg_qwen3_tts_stream_first_chunk(st, 1);
	cr_assert_eq(sg_qwen3_tts_stream_push(st, codes), SG_OK);
	cr_expect_eq(s.calls, 1, "the first frame alone is decoded at once");
	for (int f = 1; f < n; f++) cr_assert_eq(sg_qwen3_tts_stream_push(st, codes + f * 4), SG_OK);
	cr_expect_eq(s.calls, 1 + (size_t)(n - 1) / 4);
	cr_assert_eq(sg_qwen3_tts_stream_finish(st), SG_OK);
	cr_expect_eq(s.n, (size_t)nw);
	expect_close(s.pcm, wav, nw, "streamed vs one-shot");
	sg_qwen3_tts_stream_free(st);

	/* a receiver that stops */
	s.n = s.calls = 0, s.stop_after = 1;
	cr_assert_eq(sg_qwen3_tts_stream_open(c, 2, 25, collect, &s, &st), SG_OK);
	cr_expect_eq(sg_qwen3_tts_stream_push(st, codes), SG_OK);
	cr_expect_eq(sg_qwen3_tts_stream_push(st, codes + 4), SG_ERR_CANCELLED);
	sg_qwen3_tts_stream_free(st);

	codes[5] = 64;
	cr_expect_eq(sg_qwen3_tts_codec_decode(c, codes, n, wav), SG_ERR_INVALID_ARG);
	cr_expect_eq(sg_qwen3_tts_codec_decode(c, codes, 0, wav), SG_ERR_INVALID_ARG);
	free(s.pcm), free(want_s), free(wav), free(want), free(codes);
	sg_qwen3_tts_codec_free(c);
	sg_backend_free(be);
	json_decref(r);
}
