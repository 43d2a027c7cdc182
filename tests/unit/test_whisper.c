/*
 * The Whisper model on its reference fixture (tests/fixtures/whisper: a random-weight
 * WhisperForConditionalGeneration made by tools/make_fixtures.py, transformers in float32; run
 * from the repository root): the encoder output, the decoder's logits and the greedy tokens
 * match the reference; the KV cache gives the same logits token by token as all at once; a
 * copied sequence continues like its source; bad inputs and bad files are refused by value.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/weights.h"
#include "models/whisper.h"

#define FIX "tests/fixtures/whisper"
#define TOL 1e-3 /* max |d| / max |ref| with f32 compute, as the other parity tests */

static sg_whisper *load_n(int n_seq)
{
	sg_whisper_params p = sg_whisper_default_params();
	p.backend = "cpu";
	p.n_threads = 2;
	p.n_seq = n_seq;
	sg_whisper *w = NULL;
	cr_assert_eq(sg_whisper_load(FIX, &p, &w), SG_OK, "%s", sg_last_error());
	return w;
}

static const void *ref_tensor(const sg_weights *w, const char *name, int64_t n)
{
	const sg_tensor *t = sg_weights_find(w, name);
	cr_assert(t != NULL, "ref.safetensors: %s missing", name);
	cr_assert_eq(sg_tensor_nelem(t), n, "%s: %lld values", name, (long long)sg_tensor_nelem(t));
	return t->data;
}

static double rel_err(const float *got, const float *want, int64_t n)
{
	double d = 0.0, m = 0.0;
	for (int64_t i = 0; i < n; i++) {
		d = fmax(d, fabs((double)got[i] - want[i]));
		m = fmax(m, fabs((double)want[i]));
	}
	return d / m;
}

static int argmax(const float *x, int n)
{
	int b = 0;
	for (int i = 1; i < n; i++)
		if (x[i] > x[b]) b = i;
	return b;
}

/* Opens the reference and encodes its input features. */
static sg_weights *encode_ref(sg_whisper *w)
{
	const sg_whisper_info *i = sg_whisper_get_info(w);
	sg_weights *ref = NULL;
	cr_assert_eq(sg_weights_open(FIX "/ref.safetensors", &ref), SG_OK, "%s", sg_last_error());
	int T = 2 * i->n_audio_ctx;
	const float *mel = ref_tensor(ref, "input_features", (int64_t)i->n_mels * T);
	cr_assert_eq(sg_whisper_encode(w, mel, T), SG_OK, "%s", sg_last_error());
	return ref;
}

Test(whisper, fixture_info_comes_from_config_json)
{
	sg_whisper *w = load_n(1);
	const sg_whisper_info *i = sg_whisper_get_info(w);
	cr_expect_eq(i->n_mels, 80);
	cr_expect_eq(i->n_audio_ctx, 16);
	cr_expect_eq(i->n_text_ctx, 64);
	cr_expect_eq(i->n_vocab, 320);
	cr_expect_eq(i->d_model, 64);
	cr_expect_eq(i->n_audio_layer, 2);
	cr_expect_eq(i->n_text_layer, 2);
	cr_expect_eq(i->n_audio_head, 4);
	cr_expect_eq(i->n_text_head, 4);
	cr_expect_eq(i->multilingual, 0);
	cr_expect_str_eq(i->source, "hf");
	cr_expect_str_eq(i->dtype, "BF16");
	cr_expect_gt(i->n_params, 100000);
	sg_whisper_free(w);
}

Test(whisper, encoder_output_matches_transformers)
{
	sg_whisper *w = load_n(1);
	const sg_whisper_info *i = sg_whisper_get_info(w);
	sg_weights *ref = encode_ref(w);
	int64_t n = (int64_t)i->n_audio_ctx * i->d_model;
	float *got = calloc((size_t)n, sizeof(float));
	cr_assert_eq(sg_whisper_encoder_output(w, got), SG_OK, "%s", sg_last_error());
	double e = rel_err(got, ref_tensor(ref, "encoder_output", n), n);
	cr_log_info("whisper: encoder max |d| / max |ref| = %.3g", e);
	cr_expect(e <= TOL, "encoder output: max |d| / max |ref| = %.3g > %g", e, TOL);
	free(got);
	sg_weights_close(ref);
	sg_whisper_free(w);
}

Test(whisper, logits_and_greedy_tokens_match_transformers)
{
	sg_whisper *w = load_n(1);
	const sg_whisper_info *i = sg_whisper_get_info(w);
	sg_weights *ref = encode_ref(w);
	const sg_tensor *it = sg_weights_find(ref, "decoder_input_ids");
	cr_assert(it != NULL);
	int n = (int)sg_tensor_nelem(it), V = i->n_vocab;
	const int32_t *ids = (const int32_t *)it->data;
	float *lg = calloc((size_t)n * (size_t)V, sizeof(float));
	cr_assert_eq(sg_whisper_decode(w, 0, ids, n, 0, 1, lg), SG_OK, "%s", sg_last_error());
	double e = rel_err(lg, ref_tensor(ref, "logits", (int64_t)n * V), (int64_t)n * V);
	cr_log_info("whisper: logits max |d| / max |ref| = %.3g", e);
	cr_expect(e <= TOL, "logits: %.3g > %g", e, TOL);
	/* greedy continuation through the KV cache, one token a step */
	const sg_tensor *gt = sg_weights_find(ref, "greedy");
	cr_assert(gt != NULL);
	int ng = (int)sg_tensor_nelem(gt);
	const int32_t *want = (const int32_t *)gt->data;
	float *last = calloc((size_t)V, sizeof(float));
	cr_assert_eq(sg_whisper_decode(w, 0, ids, n, 0, 0, last), SG_OK, "%s", sg_last_error());
	for (int k = 0; k < ng; k++) {
		int32_t tok = argmax(last, V);
		cr_expect_eq(tok, want[k], "greedy token %d: %d, transformers %d", k, tok, want[k]);
		cr_assert_eq(sg_whisper_decode(w, 0, &tok, 1, n + k, 0, last), SG_OK, "%s", sg_last_error());
	}
	free(last);
	free(lg);
	sg_weights_close(ref);
	sg_whisper_free(w);
}

Test(whisper, kv_cache_steps_equal_one_batch_and_seq_copy_continues)
{
	sg_whisper *w = load_n(3);
	const sg_whisper_info *i = sg_whisper_get_info(w);
	sg_weights *ref = encode_ref(w);
	int V = i->n_vocab;
	const int32_t ids[] = {3, 40, 7, 200, 11, 5};
	float *all = calloc(6 * (size_t)V, sizeof(float)), *one = calloc((size_t)V, sizeof(float));
	cr_assert_eq(sg_whisper_decode(w, 1, ids, 6, 0, 1, all), SG_OK, "%s", sg_last_error());
	for (int k = 0; k < 6; k++) {
		cr_assert_eq(sg_whisper_decode(w, 0, ids + k, 1, k, 0, one), SG_OK, "%s", sg_last_error());
		double e = rel_err(one, all + (size_t)k * V, V);
		cr_expect(e <= 1e-5, "token %d: step-by-step logits differ from the batch by %.3g", k, e);
	}
	/* seq 2 takes seq 0's first 4 positions, then continues with tokens 4 and 5 */
	cr_assert_eq(sg_whisper_seq_copy(w, 0, 2, 4), SG_OK, "%s", sg_last_error());
	cr_assert_eq(sg_whisper_decode(w, 2, ids + 4, 2, 4, 0, one), SG_OK, "%s", sg_last_error());
	cr_expect(rel_err(one, all + 5 * (size_t)V, V) <= 1e-5, "the copied sequence continued differently");
	/* a reset (pos 0) with other tokens gives other logits */
	const int32_t other[] = {3, 41};
	cr_assert_eq(sg_whisper_decode(w, 0, other, 2, 0, 0, one), SG_OK, "%s", sg_last_error());
	cr_expect(rel_err(one, all + (size_t)V, V) > 1e-3);
	free(all);
	free(one);
	sg_weights_close(ref);
	sg_whisper_free(w);
}

Test(whisper, refuses_bad_inputs_by_value)
{
	sg_whisper *w = load_n(2);
	const sg_whisper_info *i = sg_whisper_get_info(w);
	int32_t ids[2] = {3, 4};
	float lg[320];
	cr_expect_eq(sg_whisper_decode(w, 0, ids, 2, 0, 0, lg), SG_ERR_INVALID_ARG, "decode before any encode");
	cr_expect(strstr(sg_last_error(), "encoded") != NULL, "%s", sg_last_error());
	int T = 2 * i->n_audio_ctx;
	float *mel = calloc((size_t)i->n_mels * (size_t)T, sizeof(float));
	cr_expect_eq(sg_whisper_encode(w, mel, T - 2), SG_ERR_INVALID_ARG);
	cr_expect(strstr(sg_last_error(), "30") != NULL || strstr(sg_last_error(), "32") != NULL, "%s", sg_last_error());
	mel[5] = NAN;
	cr_expect_eq(sg_whisper_encode(w, mel, T), SG_ERR_INVALID_ARG, "a NaN in the mel");
	mel[5] = 0.0f;
	cr_assert_eq(sg_whisper_encode(w, mel, T), SG_OK, "%s", sg_last_error());
	ids[1] = 320;
	cr_expect_eq(sg_whisper_decode(w, 0, ids, 2, 0, 0, lg), SG_ERR_RANGE);
	cr_expect(strstr(sg_last_error(), "320") != NULL, "%s", sg_last_error());
	ids[1] = 4;
	cr_expect_eq(sg_whisper_decode(w, 2, ids, 2, 0, 0, lg), SG_ERR_RANGE, "sequence 2 of 2");
	cr_expect_eq(sg_whisper_decode(w, 0, ids, 2, 63, 0, lg), SG_ERR_RANGE, "past the 64 positions");
	cr_expect_eq(sg_whisper_decode(w, 0, ids, 2, 62, 0, lg), SG_OK, "%s", sg_last_error());
	cr_expect_eq(sg_whisper_seq_copy(w, 0, 5, 1), SG_ERR_RANGE);
	cr_expect_eq(sg_whisper_cross_attn(w, ids, 2, lg), SG_ERR_UNSUPPORTED, "the fixture names no alignment heads");
	free(mel);
	sg_whisper_free(w);
}

Test(whisper, refuses_missing_and_foreign_models)
{
	sg_whisper *w = NULL;
	sg_whisper_params p = sg_whisper_default_params();
	p.backend = "cpu";
	cr_expect_neq(sg_whisper_load("tests/fixtures/no-such-model", &p, &w), SG_OK);
	cr_expect_null(w);
	cr_expect_eq(sg_whisper_load("tests/fixtures/bert", &p, &w), SG_ERR_UNSUPPORTED);
	cr_expect(strstr(sg_last_error(), "bert") != NULL, "%s", sg_last_error());
	cr_expect_null(w);
	p.n_seq = -1;
	cr_expect_eq(sg_whisper_load(FIX, &p, &w), SG_ERR_INVALID_ARG);
}
