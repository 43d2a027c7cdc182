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

#include "backend/backend.h"
#include "base/flags.h"
#include "formats/ggml_whisper.h"
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
	/* the fixture names no alignment heads: every head of the last half of the layers */
	const sg_whisper_info *wi = sg_whisper_get_info(w);
	cr_assert_eq(wi->n_align_heads, 4, "2 layers x 4 heads: layer 1's four");
	for (int a = 0; a < 4; a++) cr_expect(wi->align_heads[a][0] == 1 && wi->align_heads[a][1] == a);
	float *att = calloc((size_t)4 * 2 * (size_t)wi->n_audio_ctx, sizeof(float)), *np = calloc(2, sizeof(float));
	cr_expect_eq(sg_whisper_align(w, ids, 2, 0, 4, att, np), SG_ERR_RANGE, "no keys");
	cr_expect_eq(sg_whisper_align(w, ids, 2, wi->n_audio_ctx + 1, 4, att, np), SG_ERR_RANGE, "more keys than the window");
	cr_expect_eq(sg_whisper_align(w, ids, 2, 5, 0, att, np), SG_ERR_RANGE, "no text ids");
	cr_assert_eq(sg_whisper_align(w, ids, 2, 5, wi->n_vocab, att, np), SG_OK, "%s", sg_last_error());
	for (int r = 0; r < 8; r++) {
		double sum = 0;
		for (int j = 0; j < 5; j++) sum += att[r * 5 + j];
		cr_expect(fabs(sum - 1) < 1e-5, "row %d sums to %g over the 5 keys", r, sum);
	}
	cr_expect(np[0] > 0 && np[0] < 1 && np[1] == 0, "%g %g", np[0], np[1]);
	free(att);
	free(np);
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

/* A temporary copy of the fixture whose config.json has one value replaced. */
static void copy_with_config(const char *dir, const char *from, const char *to)
{
	char path[512], cmd[1024];
	snprintf(cmd, sizeof(cmd), "mkdir -p %s && cp " FIX "/model.safetensors %s/", dir, dir);
	cr_assert_eq(system(cmd), 0);
	FILE *f = fopen(FIX "/config.json", "rb");
	cr_assert_not_null(f);
	char buf[8192];
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	char *at = strstr(buf, from);
	cr_assert_not_null(at, "config.json has no %s", from);
	snprintf(path, sizeof(path), "%s/config.json", dir);
	f = fopen(path, "wb");
	fwrite(buf, 1, (size_t)(at - buf), f);
	fputs(to, f);
	fputs(at + strlen(from), f);
	fclose(f);
}

Test(whisper, a_config_that_disagrees_with_the_weights_names_the_tensor)
{
	char dir[] = "/tmp/sg_whisper_cfg_XXXXXX";
	cr_assert_not_null(mkdtemp(dir));
	copy_with_config(dir, "\"d_model\": 64", "\"d_model\": 32");
	sg_whisper_params p = sg_whisper_default_params();
	p.backend = "cpu";
	sg_whisper *w = NULL;
	cr_expect_eq(sg_whisper_load(dir, &p, &w), SG_ERR_FORMAT);
	cr_expect(strstr(sg_last_error(), "model.encoder.conv1.weight: expected [3, 80, 32], found BF16 [3, 80, 64]") != NULL,
		  "%s", sg_last_error());
	cr_expect_null(w);
	copy_with_config(dir, "\"max_source_positions\": 16", "\"max_source_positions\": 1500");
	cr_expect_eq(sg_whisper_load(dir, &p, &w), SG_ERR_FORMAT);
	cr_expect(strstr(sg_last_error(), "embed_positions") != NULL, "%s", sg_last_error());
	copy_with_config(dir, "\"activation_function\": \"gelu\"", "\"activation_function\": \"relu\"");
	cr_expect_eq(sg_whisper_load(dir, &p, &w), SG_ERR_UNSUPPORTED);
	cr_expect(strstr(sg_last_error(), "relu") != NULL, "%s", sg_last_error());
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

Test(whisper, describe_reads_the_sizes_without_loading)
{
	sg_whisper_info i;
	char dt[32];
	cr_assert_eq(sg_whisper_describe(FIX, &i, dt, sizeof(dt)), SG_OK, "%s", sg_last_error());
	cr_expect_eq(i.n_audio_ctx, 16);
	cr_expect_eq(i.d_model, 64);
	cr_expect_eq(i.n_text_layer, 2);
	cr_expect_str_eq(i.dtype, "BF16");
	cr_expect_str_eq(i.source, "hf");
	cr_expect_eq(i.n_params, 220672);
	cr_expect_eq(sg_whisper_describe("tests/fixtures/bert", &i, dt, sizeof(dt)), SG_ERR_UNSUPPORTED);
	cr_expect_eq(sg_whisper_describe("tests/fixtures/ct2", &i, dt, sizeof(dt)), SG_ERR_UNSUPPORTED, "a CTranslate2 TinySpec");
	cr_expect(strstr(sg_last_error(), "TinySpec") != NULL, "%s", sg_last_error());
}

#define GGML FIX "_ggml/ggml-model.bin"

/* The fixture rewritten as whisper.cpp's ggml file (tools/whisper_convert.py ggml: matrices F16,
 * vectors F32) gives transformers' numbers within the F16 rounding of the BF16 weights. */
Test(whisper, ggml_file_matches_transformers)
{
	sg_whisper_params p = sg_whisper_default_params();
	p.backend = "cpu";
	p.n_threads = 2;
	sg_whisper *w = NULL;
	cr_assert_eq(sg_whisper_load(GGML, &p, &w), SG_OK, "%s", sg_last_error());
	const sg_whisper_info *i = sg_whisper_get_info(w);
	cr_expect_str_eq(i->source, "ggml");
	cr_expect_str_eq(i->dtype, "F16");
	cr_expect_eq(i->n_ffn, 128);
	cr_expect_null(sg_whisper_tokenizer_path(w), "a ggml file carries its vocabulary");
	sg_weights *ref = encode_ref(w);
	int64_t n = (int64_t)i->n_audio_ctx * i->d_model;
	float *got = calloc((size_t)n, sizeof(float));
	cr_assert_eq(sg_whisper_encoder_output(w, got), SG_OK, "%s", sg_last_error());
	double e = rel_err(got, ref_tensor(ref, "encoder_output", n), n);
	cr_log_info("whisper ggml: encoder max |d| / max |ref| = %.3g", e);
	cr_expect(e <= TOL, "encoder output: %.3g > %g", e, TOL);
	const sg_tensor *it = sg_weights_find(ref, "decoder_input_ids");
	int nt = (int)sg_tensor_nelem(it), V = i->n_vocab;
	float *lg = calloc((size_t)nt * (size_t)V, sizeof(float));
	cr_assert_eq(sg_whisper_decode(w, 0, (const int32_t *)it->data, nt, 0, 1, lg), SG_OK, "%s", sg_last_error());
	e = rel_err(lg, ref_tensor(ref, "logits", (int64_t)nt * V), (int64_t)nt * V);
	cr_log_info("whisper ggml: logits max |d| / max |ref| = %.3g", e);
	cr_expect(e <= TOL, "logits: %.3g > %g", e, TOL);
	free(lg);
	free(got);
	sg_weights_close(ref);
	sg_whisper_free(w);
}

static uint8_t *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	cr_assert_not_null(f);
	fseek(f, 0, SEEK_END);
	*n = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *b = malloc(*n);
	cr_assert_eq(fread(b, 1, *n, f), *n);
	fclose(f);
	return b;
}

Test(whisper, ggml_parser_refuses_every_truncation_and_bad_fields)
{
	size_t n;
	uint8_t *b = slurp(GGML, &n);
	sg_ggml_whisper g;
	cr_assert_eq(sg_ggml_whisper_parse(b, n, "fixture", &g), SG_OK, "%s", sg_last_error());
	int nt = g.n_tensors;
	cr_expect_eq(nt, 89);
	const sg_tensor *c1 = sg_ggml_whisper_find(&g, "encoder.conv1.bias");
	cr_assert_not_null(c1);
	cr_expect(c1->n_dims == 2 && c1->ne[0] == 1 && c1->ne[1] == 64 && c1->type == SG_TYPE_F32);
	uint64_t last_end = g.tensors[nt - 1].offset + g.tensors[nt - 1].nbytes;
	cr_expect_eq(last_end, n, "the tensors run to the end of the file");
	sg_ggml_whisper_close(&g);
	/* every cut inside a tensor (or a header) is refused, cuts between tensors are whole files */
	size_t step = n / 97 + 1;
	for (size_t cut = 0; cut < n; cut += step) {
		sg_status st = sg_ggml_whisper_parse(b, cut, "cut", &g);
		if (st == SG_OK) {
			cr_expect_lt(g.n_tensors, nt);
			sg_ggml_whisper_close(&g);
		} else {
			cr_expect_eq(st, SG_ERR_FORMAT, "cut at %zu: %s", cut, sg_last_error());
		}
	}
	/* a tensor type that is not F32/F16/Q4_0..Q8_0 */
	uint8_t *c = malloc(n);
	memcpy(c, b, n);
	size_t first = (size_t)(sg_ggml_whisper_parse(b, n, "x", &g), g.tensors[0].offset);
	size_t hdr = first - strlen(g.tensors[0].name) - 4 * (size_t)g.tensors[0].n_dims - 12;
	sg_ggml_whisper_close(&g);
	c[hdr + 8] = 99;
	cr_expect_eq(sg_ggml_whisper_parse(c, n, "bad type", &g), SG_ERR_FORMAT);
	cr_expect(strstr(sg_last_error(), "type 99") != NULL, "%s", sg_last_error());
	memcpy(c, b, n);
	c[0] ^= 1;
	cr_expect_eq(sg_ggml_whisper_parse(c, n, "bad magic", &g), SG_ERR_FORMAT);
	cr_expect(strstr(sg_last_error(), "magic") != NULL, "%s", sg_last_error());
	free(c);
	free(b);
}

/* The encoder's two attention paths (SARAGOSSA_WHISPER_GEMM_ATTN) agree, and each matches the
 * reference (the GEMM one is the default the other tests run). */
Test(whisper, encoder_attention_op_path_matches_the_gemm_path)
{
	float *out[2];
	sg_weights *ref = NULL;
	int64_t n = 0;
	for (int k = 0; k < 2; k++) {
		setenv("SARAGOSSA_WHISPER_GEMM_ATTN", k ? "0" : "1", 1);
		sg_flags_reload();
		sg_whisper *w = load_n(1);
		unsetenv("SARAGOSSA_WHISPER_GEMM_ATTN");
		sg_flags_reload();
		const sg_whisper_info *i = sg_whisper_get_info(w);
		n = (int64_t)i->n_audio_ctx * i->d_model;
		if (ref) sg_weights_close(ref);
		ref = encode_ref(w);
		out[k] = calloc((size_t)n, sizeof(float));
		cr_assert_eq(sg_whisper_encoder_output(w, out[k]), SG_OK, "%s", sg_last_error());
		double e = rel_err(out[k], ref_tensor(ref, "encoder_output", n), n);
		cr_expect(e <= TOL, "path %d: %.3g", k, e);
		sg_whisper_free(w);
	}
	double e = rel_err(out[1], out[0], n);
	cr_expect(e <= 1e-5 && e > 0.0, "the attention op and the GEMM path differ by %.3g (0: the flag did nothing)", e);
	free(out[0]);
	free(out[1]);
	sg_weights_close(ref);
}

/* The same forward on the CUDA backend (the GPU test group: skipped without a usable GPU or a
 * CUDA build): encoder output, logits and the greedy tokens against transformers. */
Test(whisper, cuda_backend_matches_transformers, .timeout = 120)
{
	char devs[512];
	if (sg_backend_devices("cuda", devs, sizeof(devs)) < 1) cr_skip_test("no usable GPU (%s)", devs);
	sg_whisper_params p = sg_whisper_default_params();
	p.backend = "cuda";
	sg_whisper *w = NULL;
	cr_assert_eq(sg_whisper_load(FIX, &p, &w), SG_OK, "%s", sg_last_error());
	const sg_whisper_info *i = sg_whisper_get_info(w);
	sg_weights *ref = encode_ref(w);
	int64_t n = (int64_t)i->n_audio_ctx * i->d_model;
	float *got = calloc((size_t)n, sizeof(float));
	cr_assert_eq(sg_whisper_encoder_output(w, got), SG_OK, "%s", sg_last_error());
	double e = rel_err(got, ref_tensor(ref, "encoder_output", n), n);
	cr_log_info("whisper cuda: encoder max |d| / max |ref| = %.3g", e);
	cr_expect(e <= TOL, "encoder output: %.3g", e);
	const sg_tensor *it = sg_weights_find(ref, "decoder_input_ids");
	int nt = (int)sg_tensor_nelem(it), V = i->n_vocab;
	float *lg = calloc((size_t)nt * (size_t)V, sizeof(float));
	cr_assert_eq(sg_whisper_decode(w, 0, (const int32_t *)it->data, nt, 0, 1, lg), SG_OK, "%s", sg_last_error());
	e = rel_err(lg, ref_tensor(ref, "logits", (int64_t)nt * V), (int64_t)nt * V);
	cr_log_info("whisper cuda: logits max |d| / max |ref| = %.3g", e);
	cr_expect(e <= TOL, "logits: %.3g", e);
	const sg_tensor *gt = sg_weights_find(ref, "greedy");
	const int32_t *want = (const int32_t *)gt->data;
	cr_assert_eq(sg_whisper_decode(w, 0, (const int32_t *)it->data, nt, 0, 0, lg), SG_OK, "%s", sg_last_error());
	for (int k = 0; k < (int)sg_tensor_nelem(gt); k++) {
		int32_t tok = argmax(lg, V);
		cr_expect_eq(tok, want[k], "greedy token %d", k);
		cr_assert_eq(sg_whisper_decode(w, 0, &tok, 1, nt + k, 0, lg), SG_OK, "%s", sg_last_error());
	}
	free(lg);
	free(got);
	sg_weights_close(ref);
	sg_whisper_free(w);
}

/* Loads dir and checks the encoder output and the logits of the reference prompt against
 * transformers within tol; returns the logits' error. */
static double parity_of(const char *dir, double tol, const char *source)
{
	sg_whisper_params p = sg_whisper_default_params();
	p.backend = "cpu";
	p.n_threads = 2;
	sg_whisper *w = NULL;
	cr_assert_eq(sg_whisper_load(dir, &p, &w), SG_OK, "%s", sg_last_error());
	const sg_whisper_info *i = sg_whisper_get_info(w);
	cr_expect_str_eq(i->source, source);
	sg_weights *ref = encode_ref(w);
	int64_t n = (int64_t)i->n_audio_ctx * i->d_model;
	float *got = calloc((size_t)n, sizeof(float));
	cr_assert_eq(sg_whisper_encoder_output(w, got), SG_OK, "%s", sg_last_error());
	double e = rel_err(got, ref_tensor(ref, "encoder_output", n), n);
	cr_log_info("whisper %s: encoder max |d| / max |ref| = %.3g", dir, e);
	cr_expect(e <= tol, "%s: encoder output %.3g > %g", dir, e, tol);
	const sg_tensor *it = sg_weights_find(ref, "decoder_input_ids");
	int nt = (int)sg_tensor_nelem(it), V = i->n_vocab;
	float *lg = calloc((size_t)nt * (size_t)V, sizeof(float));
	cr_assert_eq(sg_whisper_decode(w, 0, (const int32_t *)it->data, nt, 0, 1, lg), SG_OK, "%s", sg_last_error());
	e = rel_err(lg, ref_tensor(ref, "logits", (int64_t)nt * V), (int64_t)nt * V);
	cr_log_info("whisper %s: logits max |d| / max |ref| = %.3g", dir, e);
	cr_expect(e <= tol, "%s: logits %.3g > %g", dir, e, tol);
	free(lg);
	free(got);
	sg_weights_close(ref);
	sg_whisper_free(w);
	return e;
}

/* The fixture as a CTranslate2 int8 folder (tools/whisper_convert.py ct2 ... int8: one float32
 * scale per row): the codes run as Q8_0; the error is the int8 rounding of the weights. */
Test(whisper, ct2_int8_fixture_stays_near_transformers)
{
	double e = parity_of(FIX "_ct2_int8", 3e-2, "ct2");
	cr_expect_gt(e, 1e-5, "int8 weights that change nothing: the codes were not used");
}

/* The fixture rewritten by tools/whisper_convert.py as a CTranslate2 float32 folder (fused qkv
 * and kv) and as a Hugging Face folder again: the same numbers. tests/e2e/test_whisper_formats.py
 * writes them and sets SG_WHISPER_FIXTURE_CT2 / SG_WHISPER_FIXTURE_HF; skipped otherwise. */
Test(whisper, converted_fixture_folders_match_transformers)
{
	const char *ct2 = getenv("SG_WHISPER_FIXTURE_CT2"), *hf = getenv("SG_WHISPER_FIXTURE_HF");
	if (!ct2 || !hf) cr_skip_test("SG_WHISPER_FIXTURE_CT2 / _HF not set (tests/e2e/test_whisper_formats.py sets them)");
	parity_of(ct2, TOL, "ct2");
	parity_of(hf, TOL, "hf");
}

/* sg_whisper_cross_attn against transformers' cross_attentions (eager attention, float32) of
 * three (layer, head) pairs named by a generation_config.json beside a copy of the fixture
 * (tests/fixtures/whisper_xattn, tools/make_whisper_xattn.py). */
Test(whisper, cross_attention_weights_match_transformers)
{
	char dir[] = "/tmp/sg_whisper_xattn_XXXXXX", cmd[600];
	cr_assert_not_null(mkdtemp(dir));
	snprintf(cmd, sizeof(cmd), "cp " FIX "/config.json " FIX "/model.safetensors %s/", dir);
	cr_assert_eq(system(cmd), 0);
	sg_weights *x = NULL;
	cr_assert_eq(sg_weights_open(FIX "_xattn/cross_attn.safetensors", &x), SG_OK, "%s", sg_last_error());
	const sg_tensor *ht = sg_weights_find(x, "heads"), *it = sg_weights_find(x, "ids"), *wt = sg_weights_find(x, "weights");
	cr_assert(ht && it && wt);
	int nh = (int)ht->ne[1], n = (int)sg_tensor_nelem(it);
	const int32_t *heads = (const int32_t *)ht->data;
	char path[600];
	snprintf(path, sizeof(path), "%s/generation_config.json", dir);
	FILE *f = fopen(path, "wb");
	cr_assert_not_null(f);
	fputs("{\"alignment_heads\": [", f);
	for (int k = 0; k < nh; k++) fprintf(f, "%s[%d, %d]", k ? ", " : "", heads[2 * k], heads[2 * k + 1]);
	fputs("]}\n", f);
	fclose(f);
	sg_whisper_params p = sg_whisper_default_params();
	p.backend = "cpu";
	sg_whisper *w = NULL;
	cr_assert_eq(sg_whisper_load(dir, &p, &w), SG_OK, "%s", sg_last_error());
	const sg_whisper_info *i = sg_whisper_get_info(w);
	cr_assert_eq(i->n_align_heads, nh);
	cr_expect_eq(i->align_heads[nh - 1][0], heads[2 * nh - 2]);
	cr_expect_eq(i->align_heads[nh - 1][1], heads[2 * nh - 1]);
	sg_weights *ref = encode_ref(w);
	int64_t total = (int64_t)nh * n * i->n_audio_ctx;
	cr_assert_eq(sg_tensor_nelem(wt), total);
	float *got = calloc((size_t)total, sizeof(float));
	cr_assert_eq(sg_whisper_cross_attn(w, (const int32_t *)it->data, n, got), SG_OK, "%s", sg_last_error());
	double e = rel_err(got, (const float *)wt->data, total);
	cr_log_info("whisper: cross-attention weights max |d| / max |ref| = %.3g", e);
	cr_expect(e <= TOL, "cross-attention weights: %.3g > %g", e, TOL);
	free(got);
	sg_weights_close(ref);
	sg_weights_close(x);
	sg_whisper_free(w);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}
