/*
 * Qwen3-TTS voice cloning on its reference fixture (tests/fixtures/qwen3_tts/base: a random-weight
 * Base model with a speaker encoder and a speech tokenizer with its encoder, made by
 * tools/make_qwen_tts_fixtures.py --kind base with the qwen-tts package, float32 on the CPU):
 * the speaker encoder's mel and x-vector against the package's, the tokenizer encoder's codes of
 * the reference clip identical, and greedy codes identical for x-vector-only and in-context
 * prompts.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "audio/decode.h"
#include "audio/mel.h"
#include "backend/backend.h"
#include "base/alloc.h"
#include "formats/weights.h"
#include "models/qwen3_tts.h"
#include "models/qwen3_tts_spk.h"
#include "models/qwen3_tts_tok.h"
#include "saragossa.h"

#include "tts_ref.h"

#define FIX "tests/fixtures/qwen3_tts/base"

static json_t *ref(void) { return tts_ref_load(FIX "/ref.json"); }

/* Greedy generation for case k of ref.json with the given x-vector and reference codes; expects
 * the package's codes. */
static void expect_case(sg_qwen3_tts *m, const json_t *k, const float *xvec, const int32_t *rcodes,
                        int n_rcodes, const char *what)
{
	int n_ids, n_rids = 0, n_want;
	int32_t *ids = ints(json_object_get(k, "input_ids"), &n_ids);
	const json_t *ri = json_object_get(k, "ref_ids");
	int32_t *rids = json_is_array(ri) ? ints(ri, &n_rids) : NULL;
	int32_t *want = codes_of(json_object_get(k, "codes"), 4, &n_want);
	int icl = !strcmp(json_string_value(json_object_get(k, "mode")), "icl");
	sg_qwen3_tts_gen g = sg_qwen3_tts_gen_defaults(m);
	g.ids = ids, g.n_ids = n_ids;
	g.spk_embed = xvec;
	g.ref_codes = icl ? rcodes : NULL, g.n_ref = icl ? n_rcodes : 0;
	g.ref_ids = icl ? rids : NULL, g.n_ref_ids = icl ? n_rids : 0;
	g.language = json_string_value(json_object_get(k, "language"));
	g.non_streaming = json_is_true(json_object_get(k, "non_streaming_mode"));
	g.max_frames = (int)json_integer_value(json_object_get(k, "max_new_tokens"));
	g.temperature = 0, g.sub_temperature = 0;
	int32_t *got = NULL;
	int n = 0;
	cr_assert_eq(sg_qwen3_tts_generate(m, &g, &got, &n), SG_OK, "%s: %s", what, sg_last_error());
	cr_expect_eq(n, n_want, "%s: %d frames, the package made %d", what, n, n_want);
	for (int i = 0; i < n && i < n_want; i++)
		for (int j = 0; j < 4; j++)
			cr_expect_eq(got[i * 4 + j], want[i * 4 + j],
			             "%s frame %d code %d: %d, the package %d", what, i, j, got[i * 4 + j],
			             want[i * 4 + j]);
	sg_free(got);
	free(ids), free(rids), free(want);
}

Test(qwen3_tts_clone, greedy_codes_match_the_package_given_its_prompt)
{
	json_t *r = ref();
	sg_qwen3_tts *m = NULL;
	cr_assert_eq(sg_qwen3_tts_load(FIX, "cpu", 1, &m), SG_OK, "%s", sg_last_error());
	cr_expect_str_eq(sg_qwen3_tts_type(m), "base");
	int n, nr;
	float *xvec = floats(json_object_get(r, "spk_embedding"), &n);
	int32_t *rcodes = codes_of(json_object_get(r, "ref_codes"), 4, &nr);
	json_t *cases = json_object_get(r, "cases");
	cr_assert_eq(json_array_size(cases), 4);
	char what[32];
	for (size_t c = 0; c < json_array_size(cases); c++) {
		snprintf(what, sizeof(what), "case %zu", c);
		expect_case(m, json_array_get(cases, c), xvec, rcodes, nr, what);
	}
	/* bad in-context inputs are errors */
	sg_qwen3_tts_gen g = sg_qwen3_tts_gen_defaults(m);
	int n_ids;
	int32_t *ids = ints(json_object_get(json_array_get(cases, 1), "input_ids"), &n_ids);
	g.ids = ids, g.n_ids = n_ids, g.max_frames = 4, g.spk_embed = xvec, g.ref_codes = rcodes,
	g.n_ref = nr;
	int32_t *got = NULL;
	int nf;
	cr_expect_eq(sg_qwen3_tts_generate(m, &g, &got, &nf), SG_ERR_INVALID_ARG, "no reference text");
	cr_expect(strstr(sg_last_error(), "transcript"), "%s", sg_last_error());
	int32_t rid[6] = {390, 11, 12, 5, 391, 13};
	g.ref_ids = rid, g.n_ref_ids = 6;
	rcodes[7] = 64;
	cr_expect_eq(sg_qwen3_tts_generate(m, &g, &got, &nf), SG_ERR_INVALID_ARG,
	             "a code outside the codebook");
	rcodes[7] = 0, rid[3] = 100000;
	cr_expect_eq(sg_qwen3_tts_generate(m, &g, &got, &nf), SG_ERR_INVALID_ARG,
	             "a text id outside the vocabulary");
	cr_expect_null(got);
	free(ids), free(xvec), free(rcodes);
	sg_qwen3_tts_free(m);
	json_decref(r);
}

static sg_audio clip(void)
{
	sg_audio a;
	cr_assert_eq(sg_audio_decode_file_at(FIX "/ref.wav", 24000, &a), SG_OK, "%s", sg_last_error());
	cr_assert_eq(a.n, 7200);
	cr_assert_eq(a.src_rate, 24000);
	return a;
}

Test(qwen3_tts_clone, speaker_mel_matches_the_package)
{
	json_t *r = ref();
	sg_audio a = clip();
	sg_mel_mag_params mp = {
	    .rate = 24000, .n_fft = 1024, .win = 1024, .hop = 256, .n_mels = 128, .fmin = 0, .fmax = 12000};
	float *mel = NULL;
	int T = 0;
	cr_assert_eq(sg_audio_log_mel_mag(&mp, a.samples, a.n, &mel, &T), SG_OK, "%s", sg_last_error());
	json_t *want = json_object_get(r, "mel");
	cr_assert_eq(T, (int)json_array_size(want));
	double worst = 0;
	for (int t = 0; t < T; t++)
		for (int m = 0; m < 128; m++) {
			double w =
			    json_number_value(json_array_get(json_array_get(want, (size_t)t), (size_t)m));
			double d = fabs(mel[t * 128 + m] - w);
			if (d > worst) worst = d;
		}
	/* log-magnitudes of order 1..10, stored to 6 decimals */
	cr_expect(worst < 1e-4, "mel: max |diff| %g", worst);
	sg_free(mel);
	/* too short for the padding; bad parameters */
	cr_expect_eq(sg_audio_log_mel_mag(&mp, a.samples, 300, &mel, &T), SG_ERR_INVALID_ARG);
	mp.win = 512;
	cr_expect_eq(sg_audio_log_mel_mag(&mp, a.samples, a.n, &mel, &T), SG_ERR_INVALID_ARG);
	sg_audio_free(&a);
	json_decref(r);
}

Test(qwen3_tts_clone, speaker_embedding_matches_the_package)
{
	json_t *r = ref();
	sg_audio a = clip();
	sg_weights *w = NULL;
	cr_assert_eq(sg_weights_open(FIX, &w), SG_OK, "%s", sg_last_error());
	sg_backend *be = cpu();
	sg_qwen3_tts_spk *s = NULL;
	cr_assert_eq(sg_qwen3_tts_spk_load(w, be, &s), SG_OK, "%s", sg_last_error());
	int n;
	float *want = floats(json_object_get(r, "spk_embedding"), &n);
	cr_assert_eq(sg_qwen3_tts_spk_dim(s), n);
	float *got = malloc(sizeof(float) * (size_t)n);
	cr_assert_eq(sg_qwen3_tts_spk_embed(s, a.samples, a.n, got), SG_OK, "%s", sg_last_error());
	double max_ref = 0, max_err = 0;
	for (int i = 0; i < n; i++) {
		if (fabs(want[i]) > max_ref) max_ref = fabs(want[i]);
		if (fabs(got[i] - want[i]) > max_err) max_err = fabs(got[i] - want[i]);
	}
	cr_expect(max_err <= 1e-4 * max_ref, "x-vector: max error %g (peak %g)", max_err, max_ref);
	/* a clip too short for the first TDNN's reflect padding is an error, not a crash */
	cr_expect_eq(sg_qwen3_tts_spk_embed(s, a.samples, 800, got), SG_ERR_INVALID_ARG);
	cr_expect_eq(sg_qwen3_tts_spk_embed(s, a.samples, 10, got), SG_ERR_INVALID_ARG);
	free(got), free(want);
	sg_qwen3_tts_spk_free(s);
	sg_backend_free(be);
	sg_weights_close(w);
	sg_audio_free(&a);
	json_decref(r);
}

Test(qwen3_tts_clone, custom_voice_has_no_speaker_encoder)
{
	sg_weights *w = NULL;
	cr_assert_eq(sg_weights_open("tests/fixtures/qwen3_tts/tiny", &w), SG_OK, "%s", sg_last_error());
	sg_backend *be = cpu();
	sg_qwen3_tts_spk *s = NULL;
	cr_expect_eq(sg_qwen3_tts_spk_load(w, be, &s), SG_ERR_NOT_FOUND);
	cr_expect_null(s);
	sg_backend_free(be);
	sg_weights_close(w);
}

Test(qwen3_tts_clone, reference_codes_match_the_package)
{
	json_t *r = ref();
	sg_audio a = clip();
	sg_backend *be = cpu();
	sg_qwen3_tts_tok *t = NULL;
	cr_assert_eq(sg_qwen3_tts_tok_load(FIX "/speech_tokenizer", be, &t), SG_OK, "%s", sg_last_error());
	cr_expect_eq(sg_qwen3_tts_tok_groups(t), 4);
	int nw;
	int32_t *want = codes_of(json_object_get(r, "ref_codes"), 4, &nw);
	int32_t *got = NULL;
	int n = 0;
	cr_assert_eq(sg_qwen3_tts_tok_encode(t, a.samples, a.n, &got, &n), SG_OK, "%s", sg_last_error());
	cr_assert_eq(n, nw, "%d frames, the package %d", n, nw);
	int bad = 0;
	for (int i = 0; i < n * 4; i++) bad += got[i] != want[i];
	cr_expect_eq(bad, 0,
	             "%d of %d codes differ from the package's (first frame: %d %d %d %d vs %d %d %d %d)",
	             bad, n * 4, got[0], got[1], got[2], got[3], want[0], want[1], want[2], want[3]);
	sg_free(got);
	/* a clip shorter than one frame still gives one frame, as the package's ceil does */
	cr_assert_eq(sg_qwen3_tts_tok_encode(t, a.samples, 100, &got, &n), SG_OK, "%s", sg_last_error());
	cr_expect_eq(n, 1);
	sg_free(got);
	cr_expect_eq(sg_qwen3_tts_tok_encode(t, a.samples, 0, &got, &n), SG_ERR_INVALID_ARG);
	free(want);
	sg_qwen3_tts_tok_free(t);
	/* the CustomVoice fixture's tokenizer has only a decoder */
	cr_expect_eq(sg_qwen3_tts_tok_load("tests/fixtures/qwen3_tts/tiny/speech_tokenizer", be, &t),
	             SG_ERR_NOT_FOUND);
	sg_backend_free(be);
	sg_audio_free(&a);
	json_decref(r);
}

static unsigned char *file_bytes(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	cr_assert(f, "%s", path);
	fseek(f, 0, SEEK_END);
	*n = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	unsigned char *b = malloc(*n);
	cr_assert_eq(fread(b, 1, *n, f), *n);
	fclose(f);
	return b;
}

typedef struct {
	float *pcm;
	size_t n, cap, first;
} sink;

static int on_audio(const float *pcm, size_t n, void *user)
{
	sink *s = user;
	if (s->n + n > s->cap) {
		s->cap = (s->n + n) * 2;
		s->pcm = realloc(s->pcm, sizeof(float) * s->cap);
	}
	if (!s->n) s->first = n;
	memcpy(s->pcm + s->n, pcm, sizeof(float) * n);
	s->n += n;
	return 0;
}

/* sg_speak with the clip as bytes, greedy: the package's codes decoded on the engine's chunks
 * (the reference frames as left context when in-context) */
static void expect_speak(sg_tts *tts, const json_t *sp, const unsigned char *wav, size_t nwav, int xvec_only)
{
	const char *mode = xvec_only ? "x_vector" : "icl";
	char key[64];
	sg_speak_params p = sg_speak_default_params();
	sink s = {0};
	p.temperature = 0;
	p.ref_audio = wav, p.ref_audio_size = nwav;
	p.ref_text = json_string_value(json_object_get(sp, "ref_text"));
	p.x_vector_only = xvec_only;
	p.on_audio = on_audio, p.user = &s;
	float *pcm = NULL;
	size_t n = 0;
	cr_assert_eq(sg_speak(tts, json_string_value(json_object_get(sp, "text")), &p, &pcm, &n), SG_OK,
	             "%s: %s", mode, sg_last_error());
	snprintf(key, sizeof(key), "%s_codes", mode);
	size_t frames = json_array_size(json_object_get(sp, key));
	snprintf(key, sizeof(key), "%s_wav_chunks", mode);
	const json_t *want = json_object_get(sp, key);
	cr_assert_eq(n, frames * 160, "%s: %zu samples, the package's %zu frames make %zu", mode, n, frames,
	             frames * 160);
	cr_assert_eq(n, json_array_size(want));
	cr_expect_eq(s.n, n);
	cr_expect_eq(s.first, 2 * 160, "%s: the first chunk is two frames", mode);
	double peak = 0, err = 0;
	for (size_t i = 0; i < n; i++) {
		double w = json_number_value(json_array_get(want, i));
		if (fabs(w) > peak) peak = fabs(w);
		if (fabs(pcm[i] - w) > err) err = fabs(pcm[i] - w);
	}
	cr_expect(err <= 1e-4 * peak + 1e-7, "%s: max error %g (peak %g)", mode, err, peak);
	sg_free(pcm);
	free(s.pcm);
}

/* GPU group: the talker and code predictor on CUDA, the codec and the cloning encoders on the
 * CPU (the default) or, with SARAGOSSA_QWEN_TTS_CODEC_SAME=1, on CUDA too */
Test(qwen3_tts_clone_cuda, speak_clones_on_cuda, .timeout = 300)
{
	json_t *r = ref();
	size_t nwav;
	unsigned char *wav = file_bytes(FIX "/ref.wav", &nwav);
	sg_tts *tts = NULL;
	sg_tts_params tp = sg_tts_default_params();
	tp.backend = "cuda";
	sg_status ls = sg_tts_load(FIX, &tp, &tts);
	if (ls && (strstr(sg_last_error(), "no usable GPU") || strstr(sg_last_error(), "no CUDA backend"))) {
		free(wav);
		json_decref(r);
		cr_skip_test("no GPU here");
	}
	cr_assert_eq(ls, SG_OK, "%s", sg_last_error());
	expect_speak(tts, json_object_get(r, "speak"), wav, nwav, 0);
	expect_speak(tts, json_object_get(r, "speak"), wav, nwav, 1);
	sg_tts_free(tts);
	free(wav);
	json_decref(r);
}

Test(qwen3_tts_clone, speak_clones_the_reference_voice)
{
	json_t *r = ref();
	const json_t *sp = json_object_get(r, "speak");
	size_t nwav;
	unsigned char *wav = file_bytes(FIX "/ref.wav", &nwav);
	sg_tts *tts = NULL;
	sg_tts_params tp = sg_tts_default_params();
	tp.backend = "cpu", tp.n_threads = 1;
	cr_assert_eq(sg_tts_load(FIX, &tp, &tts), SG_OK, "%s", sg_last_error());
	expect_speak(tts, sp, wav, nwav, 1);
	expect_speak(tts, sp, wav, nwav, 0);
	expect_speak(tts, sp, wav, nwav, 1); /* the prepared clip is reused, codes or not */

	/* bad clones: no transcript for in-context, bytes that are not audio, a clip too short */
	sg_speak_params p = sg_speak_default_params();
	p.temperature = 0;
	p.ref_audio = wav, p.ref_audio_size = nwav;
	cr_expect_eq(sg_speak(tts, "Hello.", &p, NULL, NULL), SG_ERR_INVALID_ARG);
	cr_expect(strstr(sg_last_error(), "transcript"), "%s", sg_last_error());
	p.x_vector_only = 1;
	p.ref_audio = "not audio at all", p.ref_audio_size = 16;
	cr_expect_eq(sg_speak(tts, "Hello.", &p, NULL, NULL), SG_ERR_FORMAT, "%s", sg_last_error());
	p.ref_audio = wav, p.ref_audio_size = 44 + 200; /* a WAV header and 100 samples */
	cr_expect_neq(sg_speak(tts, "Hello.", &p, NULL, NULL), SG_OK);
	p.ref_audio = NULL;
	cr_expect_eq(sg_speak(tts, "Hello.", &p, NULL, NULL), SG_ERR_INVALID_ARG, "a size without bytes");
	sg_tts_free(tts);

	/* a CustomVoice model has no speaker encoder */
	cr_assert_eq(sg_tts_load("tests/fixtures/qwen3_tts/tiny", &tp, &tts), SG_OK, "%s", sg_last_error());
	p.ref_audio = wav, p.ref_audio_size = nwav;
	cr_expect_eq(sg_speak(tts, "Hello.", &p, NULL, NULL), SG_ERR_UNSUPPORTED);
	cr_expect(strstr(sg_last_error(), "Base model"), "%s", sg_last_error());
	sg_tts_free(tts);
	free(wav);
	json_decref(r);
}
