/*
 * The real Whisper tiny.en (faster-whisper's CTranslate2 folder, F16) against CTranslate2's own
 * numbers (tests/fixtures/whisper_tiny_en/ct2_ref.safetensors, made by tools/make_whisper_ref.py):
 * encoder output rows and statistics, and the greedy tokens of three speech clips. Runs when
 * tests/e2e/test_whisper_real.py sets SG_WHISPER_REAL_MODEL (the folder) and
 * SG_WHISPER_REAL_CLIPS (a folder holding <clip>.wav); skipped otherwise. The mel is ours
 * (src/audio/mel.c, held to transformers' feature extractor by its own test).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audio/decode.h"
#include "audio/mel.h"
#include "formats/weights.h"
#include "models/whisper.h"

#define REF "tests/fixtures/whisper_tiny_en/ct2_ref.safetensors"

static const int rows[] = {0, 1, 100, 375, 750, 1100, 1498, 1499}; /* as tools/make_whisper_ref.py */

static const sg_tensor *ref_get(const sg_weights *w, const char *clip, const char *what)
{
	char name[128];
	snprintf(name, sizeof(name), "%s.%s", clip, what);
	const sg_tensor *t = sg_weights_find(w, name);
	cr_assert(t != NULL, "ref: %s missing", name);
	return t;
}

static void check_clip(sg_whisper *w, const sg_weights *ref, const char *dir, const char *clip)
{
	const sg_whisper_info *i = sg_whisper_get_info(w);
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s.wav", dir, clip);
	sg_audio a;
	cr_assert_eq(sg_audio_decode_file(path, &a), SG_OK, "%s", sg_last_error());
	int T = 2 * i->n_audio_ctx, D = i->d_model, N = i->n_audio_ctx, V = i->n_vocab;
	float *mel = calloc((size_t)i->n_mels * (size_t)T, sizeof(float)), *enc = calloc((size_t)N * (size_t)D, sizeof(float));
	cr_assert_eq(sg_audio_log_mel(a.samples, a.n, i->n_mels, mel), SG_OK, "%s", sg_last_error());
	sg_audio_free(&a);
	cr_assert_eq(sg_whisper_encode(w, mel, T), SG_OK, "%s", sg_last_error());
	cr_assert_eq(sg_whisper_encoder_output(w, enc), SG_OK, "%s", sg_last_error());
	/* rows: max |d| / max |ref| */
	const float *want = (const float *)ref_get(ref, clip, "enc_rows")->data;
	double d = 0.0, m = 0.0, sum = 0.0, sq = 0.0;
	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++)
		for (int k = 0; k < D; k++) {
			d = fmax(d, fabs((double)enc[(size_t)rows[r] * D + k] - want[r * (size_t)D + k]));
			m = fmax(m, fabs((double)want[r * (size_t)D + k]));
		}
	for (size_t k = 0; k < (size_t)N * D; k++) sum += enc[k], sq += (double)enc[k] * enc[k];
	double mean = sum / ((double)N * D), sd = sqrt(sq / ((double)N * D) - mean * mean);
	const float *stats = (const float *)ref_get(ref, clip, "enc_stats")->data;
	cr_log_info("whisper tiny.en %s: encoder rows max |d| / max |ref| = %.3g; mean %.5f (ref %.5f), sd %.5f (ref %.5f)", clip,
		    d / m, mean, stats[0], sd, stats[1]);
	cr_expect(d / m <= 1e-4, "%s: encoder rows differ by %.3g of their largest value", clip, d / m);
	cr_expect(fabs(mean - stats[0]) <= 1e-3 * stats[1] + 1e-4 && fabs(sd - stats[1]) <= 1e-3 * stats[1],
		  "%s: encoder mean %.6f sd %.6f, CTranslate2 %.6f %.6f", clip, mean, sd, stats[0], stats[1]);
	/* greedy after <|startoftranscript|> <|notimestamps|>, no suppression, as the reference ran */
	const sg_tensor *gt = ref_get(ref, clip, "greedy");
	int ng = (int)sg_tensor_nelem(gt);
	const int32_t *g = (const int32_t *)gt->data;
	int32_t prompt[2] = {50257, 50362};
	float *lg = calloc((size_t)V, sizeof(float));
	cr_assert_eq(sg_whisper_decode(w, 0, prompt, 2, 0, 0, lg), SG_OK, "%s", sg_last_error());
	int agree = 0;
	for (int k = 0; k <= ng; k++) {
		int32_t best = 0;
		for (int v = 1; v < V; v++)
			if (lg[v] > lg[best]) best = v;
		int32_t want_tok = k < ng ? g[k] : 50256; /* then <|endoftext|> */
		if (best != want_tok) {
			cr_expect_eq(best, want_tok, "%s: greedy token %d is %d, CTranslate2 %d", clip, k, best, want_tok);
			break;
		}
		agree++;
		if (k == ng) break;
		cr_assert_eq(sg_whisper_decode(w, 0, &best, 1, 2 + k, 0, lg), SG_OK, "%s", sg_last_error());
	}
	cr_log_info("whisper tiny.en %s: %d of %d greedy tokens (with <|endoftext|>) as CTranslate2", clip, agree, ng + 1);
	free(lg);
	free(mel);
	free(enc);
}

Test(whisper_real, tiny_en_ct2_matches_ctranslate2_on_speech, .timeout = 600)
{
	const char *model = getenv("SG_WHISPER_REAL_MODEL"), *clips = getenv("SG_WHISPER_REAL_CLIPS");
	if (!model || !clips) cr_skip_test("SG_WHISPER_REAL_MODEL / SG_WHISPER_REAL_CLIPS not set (tests/e2e/test_whisper_real.py sets them)");
	sg_whisper_params p = sg_whisper_default_params();
	p.backend = getenv("SG_WHISPER_REAL_BACKEND") ? getenv("SG_WHISPER_REAL_BACKEND") : "cpu";
	sg_whisper *w = NULL;
	cr_assert_eq(sg_whisper_load(model, &p, &w), SG_OK, "%s", sg_last_error());
	const sg_whisper_info *i = sg_whisper_get_info(w);
	cr_expect_eq(i->n_audio_ctx, 1500);
	cr_expect_eq(i->n_text_ctx, 448);
	cr_expect_eq(i->n_vocab, 51864);
	cr_expect_eq(i->d_model, 384);
	cr_expect_eq(i->n_audio_layer, 4);
	cr_expect_eq(i->n_text_head, 6);
	cr_expect_eq(i->multilingual, 0);
	cr_expect_str_eq(i->source, "ct2");
	cr_expect_eq(i->n_align_heads, 8, "config.json's alignment_heads");
	cr_expect_not_null(sg_whisper_tokenizer_path(w));
	sg_weights *ref = NULL;
	cr_assert_eq(sg_weights_open(REF, &ref), SG_OK, "%s", sg_last_error());
	check_clip(w, ref, clips, "jfk");
	check_clip(w, ref, clips, "austen_0870");
	check_clip(w, ref, clips, "austen_0890");
	/* the alignment heads' cross-attention: rows of probabilities */
	int32_t ids[4] = {50257, 50362, 843, 523};
	int nh = i->n_align_heads, N = i->n_audio_ctx;
	float *att = calloc((size_t)nh * 4 * (size_t)N, sizeof(float));
	cr_assert_eq(sg_whisper_cross_attn(w, ids, 4, att), SG_OK, "%s", sg_last_error());
	for (int r = 0; r < nh * 4; r++) {
		double s = 0.0;
		for (int j = 0; j < N; j++) s += att[(size_t)r * N + j];
		cr_expect(fabs(s - 1.0) < 1e-4, "attention row %d sums to %.6f", r, s);
	}
	free(att);
	sg_weights_close(ref);
	sg_whisper_free(w);
}

/* The same weights rewritten as whisper.cpp's ggml file (tools/whisper_convert.py ggml, set by
 * the e2e test as SG_WHISPER_REAL_GGML): the same numbers, and its vocabulary spells the tokens. */
Test(whisper_real, tiny_en_ggml_matches_ctranslate2, .timeout = 600)
{
	const char *model = getenv("SG_WHISPER_REAL_GGML"), *clips = getenv("SG_WHISPER_REAL_CLIPS");
	if (!model || !clips) cr_skip_test("SG_WHISPER_REAL_GGML / SG_WHISPER_REAL_CLIPS not set (tests/e2e/test_whisper_real.py sets them)");
	sg_whisper_params p = sg_whisper_default_params();
	p.backend = "cpu";
	sg_whisper *w = NULL;
	cr_assert_eq(sg_whisper_load(model, &p, &w), SG_OK, "%s", sg_last_error());
	cr_expect_str_eq(sg_whisper_get_info(w)->source, "ggml");
	cr_expect_null(sg_whisper_tokenizer_path(w));
	cr_expect_str_eq(sg_whisper_vocab(w, 843), " And");
	cr_expect_str_eq(sg_whisper_vocab(w, 5891), " fellow");
	cr_expect_null(sg_whisper_vocab(w, 50257), "special tokens are not in the file's list");
	sg_weights *ref = NULL;
	cr_assert_eq(sg_weights_open(REF, &ref), SG_OK, "%s", sg_last_error());
	check_clip(w, ref, clips, "jfk");
	sg_weights_close(ref);
	sg_whisper_free(w);
}
