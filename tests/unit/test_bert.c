/*
 * The BERT encoder on its reference fixture (tests/fixtures/bert, made by tools/make_fixtures.py
 * with transformers in float32; run from the repository root): the last hidden state of every
 * position, the mean over the mask and BERT's pooler match the reference; padding changes
 * nothing for the real tokens; bad inputs are refused by value. Also sentence-transformers'
 * folder description (modules.json, the Pooling config) and the pooling arithmetic.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "base/json.h"
#include "formats/stconfig.h"
#include "formats/weights.h"
#include "models/bert.h"

#define FIX "tests/fixtures/bert"
#define TOL 1e-3 /* max |d| / max |ref| with f32 compute, as the decoders' parity */

static sg_bert *load(void)
{
	sg_bert_params p = sg_bert_default_params();
	p.backend = "cpu";
	p.n_threads = 2;
	sg_bert *b = NULL;
	cr_assert_eq(sg_bert_load(FIX, &p, &b), SG_OK, "%s", sg_last_error());
	return b;
}

static const float *ref_tensor(const sg_weights *w, const char *name, int64_t n)
{
	const sg_tensor *t = sg_weights_find(w, name);
	cr_assert(t != NULL, "ref.safetensors: %s missing", name);
	cr_assert_eq(sg_tensor_nelem(t), n, "%s: %lld values", name, (long long)sg_tensor_nelem(t));
	return (const float *)t->data;
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

Test(bert, last_hidden_state_pooled_and_pooler_match_transformers)
{
	sg_bert *b = load();
	const sg_model_desc *d = sg_bert_desc(b);
	sg_weights *ref = NULL;
	cr_assert_eq(sg_weights_open(FIX "/ref.safetensors", &ref), SG_OK, "%s", sg_last_error());
	const sg_tensor *it = sg_weights_find(ref, "input_ids");
	cr_assert(it != NULL);
	int n = (int)sg_tensor_nelem(it), D = d->dim;
	const int32_t *ids = (const int32_t *)it->data;
	const int32_t *mask = (const int32_t *)ref_tensor(ref, "attention_mask", n);
	const float *want = ref_tensor(ref, "last_hidden_state", (int64_t)n * D);
	float *got = calloc((size_t)n * (size_t)D, sizeof(float)), pooled[1024], pout[1024];
	cr_assert(D <= 1024);
	cr_assert_eq(sg_bert_forward(b, ids, NULL, mask, n, got), SG_OK, "%s", sg_last_error());
	double e = rel_err(got, want, (int64_t)n * D);
	cr_log_info("bert: last_hidden_state max |d| / max |ref| = %.3g", e);
	cr_expect(e <= TOL, "last_hidden_state: max |d| / max |ref| = %.3g > %g", e, TOL);
	sg_st_config c = sg_st_config_default();
	cr_assert_eq(sg_pool(&c, got, mask, n, D, pooled), SG_OK, "%s", sg_last_error());
	e = rel_err(pooled, ref_tensor(ref, "pooled", D), D);
	cr_expect(e <= TOL, "pooled (mean over the mask): %.3g > %g", e, TOL);
	cr_assert(sg_bert_has_pooler(b));
	cr_assert_eq(sg_bert_pooler(b, got, pout), SG_OK, "%s", sg_last_error());
	e = rel_err(pout, ref_tensor(ref, "pooler_output", D), D);
	cr_expect(e <= TOL, "pooler_output: %.3g > %g", e, TOL);
	free(got);
	sg_weights_close(ref);
	sg_bert_free(b);
}

Test(bert, padding_leaves_the_real_tokens_as_they_are_alone)
{
	sg_bert *b = load();
	int D = sg_bert_desc(b)->dim;
	const int32_t ids[] = {1, 17, 101, 33, 250, 9, 0, 0};
	const int32_t mask[] = {1, 1, 1, 1, 1, 1, 0, 0};
	const int32_t mask_mid[] = {1, 1, 0, 1, 1, 1, 1, 1};
	float *alone = calloc(8 * (size_t)D, sizeof(float)), *padded = calloc(8 * (size_t)D, sizeof(float));
	cr_assert_eq(sg_bert_forward(b, ids, NULL, NULL, 6, alone), SG_OK, "%s", sg_last_error());
	cr_assert_eq(sg_bert_forward(b, ids, NULL, mask, 8, padded), SG_OK, "%s", sg_last_error());
	double e = rel_err(padded, alone, 6 * (int64_t)D);
	cr_expect(e <= 1e-5, "real tokens moved by padding: %.3g", e);
	/* a hole in the mask: the token at 2 is seen by nobody, so the other rows differ from the
	 * unmasked run's, while a changed id at the hole changes nothing else */
	float *hole = calloc(8 * (size_t)D, sizeof(float)), *hole2 = calloc(8 * (size_t)D, sizeof(float));
	int32_t ids2[8];
	memcpy(ids2, ids, sizeof(ids2));
	cr_assert_eq(sg_bert_forward(b, ids, NULL, mask_mid, 8, hole), SG_OK, "%s", sg_last_error());
	ids2[2] = 77;
	cr_assert_eq(sg_bert_forward(b, ids2, NULL, mask_mid, 8, hole2), SG_OK, "%s", sg_last_error());
	cr_expect(rel_err(hole, hole2, 2 * (int64_t)D) <= 1e-6 && rel_err(hole + 3 * D, hole2 + 3 * D, 5 * (int64_t)D) <= 1e-6,
		  "a masked token's id reached other tokens");
	cr_expect(rel_err(hole, padded, 2 * (int64_t)D) > 1e-3, "the masked token was not taken out");
	free(alone), free(padded), free(hole), free(hole2);
	sg_bert_free(b);
}

Test(bert, token_types_change_the_output)
{
	sg_bert *b = load();
	int D = sg_bert_desc(b)->dim;
	const int32_t ids[] = {1, 17, 101, 33};
	const int32_t types[] = {0, 0, 1, 1};
	float a[4 * 1024], c[4 * 1024];
	cr_assert(D <= 1024);
	cr_assert_eq(sg_bert_forward(b, ids, NULL, NULL, 4, a), SG_OK, "%s", sg_last_error());
	cr_assert_eq(sg_bert_forward(b, ids, types, NULL, 4, c), SG_OK, "%s", sg_last_error());
	cr_expect(rel_err(a, c, 4 * (int64_t)D) > 1e-3);
	sg_bert_free(b);
}

/* Batching invariance: 64 sequences of mixed lengths (2..64 tokens, pseudo-random ids and token
 * types) packed into one sg_bert_forward_batch give each sequence the hidden state it has alone.
 * Tolerance: max |d| / max |alone| <= 1e-5 per sequence. Attention runs per sequence in both, so
 * what may differ is the GEMM's f32 summation order between a call of N rows and one of L rows
 * (blocking over rows), a few ulps of the largest value. */
Test(bert, a_sequence_in_a_packed_batch_of_64_equals_it_alone)
{
	sg_bert *b = load();
	const sg_model_desc *d = sg_bert_desc(b);
	int D = d->dim, lens[64], N = 0;
	uint32_t r = 12345;
	for (int s = 0; s < 64; s++) {
		r = r * 1103515245u + 12345u;
		lens[s] = 2 + (int)((r >> 16) % 63); /* 2..64 */
		N += lens[s];
	}
	int32_t *ids = malloc(sizeof(int32_t) * (size_t)N), *types = malloc(sizeof(int32_t) * (size_t)N);
	for (int i = 0; i < N; i++) {
		r = r * 1103515245u + 12345u;
		ids[i] = (int32_t)((r >> 8) % (uint32_t)d->n_vocab);
		types[i] = (int32_t)((r >> 20) % (uint32_t)d->type_vocab_size);
	}
	float *batch = calloc((size_t)N * (size_t)D, sizeof(float)), *alone = calloc(64 * (size_t)D, sizeof(float));
	cr_assert_eq(sg_bert_forward_batch(b, ids, types, lens, 64, batch), SG_OK, "%s", sg_last_error());
	double worst = 0;
	for (int s = 0, off = 0; s < 64; off += lens[s++]) {
		cr_assert_eq(sg_bert_forward(b, ids + off, types + off, NULL, lens[s], alone), SG_OK, "%s", sg_last_error());
		double e = rel_err(batch + (size_t)off * D, alone, (int64_t)lens[s] * D);
		worst = fmax(worst, e);
		cr_expect(e <= 1e-5, "sequence %d (%d tokens): max |d| / max |alone| = %.3g", s, lens[s], e);
	}
	cr_log_info("bert: packed batch of 64 vs alone, worst max |d| / max |ref| = %.3g", worst);
	/* bad input in one sequence names it and computes nothing */
	ids[lens[0] + 1] = d->n_vocab;
	cr_expect_eq(sg_bert_forward_batch(b, ids, types, lens, 64, batch), SG_ERR_RANGE);
	cr_expect(strstr(sg_last_error(), "sequence 1 of the batch") != NULL, "%s", sg_last_error());
	free(ids), free(types), free(batch), free(alone);
	sg_bert_free(b);
}

Test(bert, refuses_bad_inputs_by_value)
{
	sg_bert *b = load();
	const sg_model_desc *d = sg_bert_desc(b);
	int32_t ids[80] = {1, 2, 3};
	float *h = calloc(80 * (size_t)d->dim, sizeof(float));
	int32_t bad[] = {1, 320};
	cr_expect_eq(sg_bert_forward(b, bad, NULL, NULL, 2, h), SG_ERR_RANGE);
	cr_expect(strstr(sg_last_error(), "token 1 = 320") != NULL, "%s", sg_last_error());
	int32_t types[] = {0, 2};
	cr_expect_eq(sg_bert_forward(b, ids, types, NULL, 2, h), SG_ERR_RANGE);
	cr_expect(strstr(sg_last_error(), "token type 1 = 2") != NULL, "%s", sg_last_error());
	cr_expect_eq(sg_bert_forward(b, ids, NULL, NULL, 0, h), SG_ERR_RANGE);
	cr_expect_eq(sg_bert_forward(b, ids, NULL, NULL, d->max_ctx + 1, h), SG_ERR_RANGE);
	cr_expect(strstr(sg_last_error(), "1 to 64") != NULL, "%s", sg_last_error());
	int32_t none[] = {0, 0, 0};
	cr_expect_eq(sg_bert_forward(b, ids, NULL, none, 3, h), SG_ERR_INVALID_ARG);
	free(h);
	sg_bert_free(b);
}

Test(bert, load_refuses_decoders_and_missing_folders)
{
	sg_bert_params p = sg_bert_default_params();
	p.backend = "cpu";
	sg_bert *b = NULL;
	cr_expect_eq(sg_bert_load("tests/fixtures/llama", &p, &b), SG_ERR_UNSUPPORTED);
	cr_expect(strstr(sg_last_error(), "'llama' is not an encoder") != NULL, "%s", sg_last_error());
	cr_expect(b == NULL);
	cr_expect_neq(sg_bert_load("tests/fixtures/no_such_model", &p, &b), SG_OK);
	cr_expect(b == NULL);
}

static sg_status modules(const char *js, sg_st_config *c, char *path, size_t cap)
{
	json_t *j = NULL;
	sg_status st = sg_json_parse(js, strlen(js), "test", &j);
	cr_assert_eq(st, SG_OK, "%s", sg_last_error());
	st = sg_st_config_modules(j, c, path, cap);
	json_decref(j);
	return st;
}

static sg_status pooling(const char *js, sg_st_config *c)
{
	json_t *j = NULL;
	sg_status st = sg_json_parse(js, strlen(js), "test", &j);
	cr_assert_eq(st, SG_OK, "%s", sg_last_error());
	st = sg_st_config_pooling(j, c);
	json_decref(j);
	return st;
}

Test(stconfig, reads_modules_and_pooling_as_sentence_transformers_writes_them)
{
	sg_st_config c;
	char path[64];
	cr_assert_eq(modules("[{\"idx\":0,\"name\":\"0\",\"path\":\"\",\"type\":\"sentence_transformers.models.Transformer\"},"
			     "{\"idx\":1,\"name\":\"1\",\"path\":\"1_Pooling\",\"type\":\"sentence_transformers.models.Pooling\"},"
			     "{\"idx\":2,\"name\":\"2\",\"path\":\"2_Normalize\",\"type\":\"sentence_transformers.models.Normalize\"}]",
			     &c, path, sizeof(path)),
		     SG_OK, "%s", sg_last_error());
	cr_expect(c.normalize && c.from_folder && !strcmp(path, "1_Pooling"));
	cr_assert_eq(pooling("{\"word_embedding_dimension\":384,\"pooling_mode_cls_token\":false,\"pooling_mode_mean_tokens\":true,"
			     "\"pooling_mode_max_tokens\":false,\"pooling_mode_mean_sqrt_len_tokens\":false,"
			     "\"pooling_mode_weightedmean_tokens\":false,\"pooling_mode_lasttoken\":false,\"include_prompt\":true}",
			     &c),
		     SG_OK, "%s", sg_last_error());
	cr_expect(c.mode == SG_POOL_MEAN && c.dim == 384);
	cr_assert_eq(pooling("{\"pooling_mode_cls_token\":true}", &c), SG_OK, "%s", sg_last_error());
	cr_expect(c.mode == SG_POOL_CLS);
	cr_assert_eq(pooling("{\"pooling_mode\":\"lasttoken\"}", &c), SG_OK, "%s", sg_last_error());
	cr_expect(c.mode == SG_POOL_LAST);
	cr_assert_eq(modules("[{\"type\":\"sentence_transformers.models.Transformer\"}]", &c, path, sizeof(path)), SG_OK);
	cr_expect(!c.normalize && c.mode == SG_POOL_MEAN && path[0] == '\0');
}

Test(stconfig, refuses_what_it_cannot_run_by_name)
{
	sg_st_config c;
	char path[64];
	cr_expect_eq(modules("[{\"path\":\"2_LayerNorm\",\"type\":\"sentence_transformers.models.LayerNorm\"}]", &c, path, sizeof(path)),
		     SG_ERR_UNSUPPORTED);
	cr_expect(strstr(sg_last_error(), "sentence_transformers.models.LayerNorm") != NULL, "%s", sg_last_error());
	/* Dense: on the pooled vector only, before the Normalize */
	cr_expect_eq(modules("[{\"path\":\"2_Dense\",\"type\":\"sentence_transformers.models.Dense\"}]", &c, path, sizeof(path)),
		     SG_ERR_UNSUPPORTED);
	cr_expect(strstr(sg_last_error(), "token states") != NULL, "%s", sg_last_error());
	cr_expect_eq(modules("[{\"path\":\"1\",\"type\":\"Pooling\"},{\"path\":\"2\",\"type\":\"Normalize\"},{\"path\":\"3\",\"type\":\"Dense\"}]",
			     &c, path, sizeof(path)),
		     SG_ERR_UNSUPPORTED);
	cr_expect_eq(modules("[{\"path\":\"1\",\"type\":\"Pooling\"},{\"path\":\"../d\",\"type\":\"Dense\"}]", &c, path, sizeof(path)),
		     SG_ERR_FORMAT);
	cr_assert_eq(modules("[{\"path\":\"1\",\"type\":\"Pooling\"},{\"path\":\"2_Dense\",\"type\":\"sentence_transformers.models.Dense\"},"
			     "{\"path\":\"3_Dense\",\"type\":\"Dense\"},{\"path\":\"4\",\"type\":\"Normalize\"}]",
			     &c, path, sizeof(path)),
		     SG_OK, "%s", sg_last_error());
	cr_expect(c.n_dense == 2 && !strcmp(c.dense[0], "2_Dense") && !strcmp(c.dense[1], "3_Dense") && c.normalize);
	cr_expect_eq(modules("[{\"path\":\"../x\",\"type\":\"Pooling\"}]", &c, path, sizeof(path)), SG_ERR_FORMAT);
	cr_expect_eq(modules("[{\"path\":\"/etc\",\"type\":\"Pooling\"}]", &c, path, sizeof(path)), SG_ERR_FORMAT);
	cr_expect_eq(modules("[{\"path\":\"a/../../b\",\"type\":\"Pooling\"}]", &c, path, sizeof(path)), SG_ERR_FORMAT);
	cr_expect_eq(modules("[{\"path\":1,\"type\":\"Pooling\"}]", &c, path, sizeof(path)), SG_ERR_FORMAT);
	cr_expect_eq(modules("[{\"path\":\"p\"}]", &c, path, sizeof(path)), SG_ERR_FORMAT);
	cr_expect_eq(modules("{}", &c, path, sizeof(path)), SG_ERR_FORMAT);
	cr_expect_eq(modules("[{\"type\":\"XPooling\",\"path\":\"p\"}]", &c, path, sizeof(path)), SG_ERR_UNSUPPORTED);
	cr_expect_eq(pooling("{\"pooling_mode_weightedmean_tokens\":true}", &c), SG_ERR_UNSUPPORTED);
	cr_expect(strstr(sg_last_error(), "weightedmean") != NULL, "%s", sg_last_error());
	cr_expect_eq(pooling("{\"pooling_mode_cls_token\":true,\"pooling_mode_mean_tokens\":true}", &c), SG_ERR_UNSUPPORTED);
	cr_expect_eq(pooling("{\"pooling_mode_cls_token\":false}", &c), SG_ERR_FORMAT);
	cr_expect_eq(pooling("{\"pooling_mode_cls_token\":\"yes\"}", &c), SG_ERR_FORMAT);
	cr_expect_eq(pooling("{\"pooling_mode\":\"median\"}", &c), SG_ERR_UNSUPPORTED);
}

static sg_status prompts(const char *js, sg_st_prompts *p)
{
	json_t *j = NULL;
	sg_status st = sg_json_parse(js, strlen(js), "test", &j);
	cr_assert_eq(st, SG_OK, "%s", sg_last_error());
	st = sg_st_prompts_parse(j, p);
	json_decref(j);
	return st;
}

Test(stconfig, reads_prompts_and_include_prompt)
{
	sg_st_prompts p;
	cr_assert_eq(prompts("{\"prompts\":{\"query\":\"query: \",\"passage\":\"passage: \"},\"default_prompt_name\":\"passage\"}", &p),
		     SG_OK, "%s", sg_last_error());
	cr_assert_eq(p.n, 2);
	cr_expect(!strcmp(p.names[p.dflt], "passage") && !strcmp(p.texts[p.dflt], "passage: "));
	sg_st_prompts_free(&p);
	cr_assert_eq(prompts("{\"__version__\":{},\"prompts\":{},\"default_prompt_name\":null}", &p), SG_OK);
	cr_expect(p.n == 0 && p.dflt == -1);
	sg_st_prompts_free(&p);
	cr_assert_eq(prompts("{}", &p), SG_OK);
	cr_expect(p.n == 0 && p.dflt == -1);
	cr_expect_eq(prompts("{\"prompts\":{\"q\":1}}", &p), SG_ERR_FORMAT);
	cr_expect(strstr(sg_last_error(), "'q'") != NULL, "%s", sg_last_error());
	cr_expect_eq(prompts("{\"prompts\":[\"q\"]}", &p), SG_ERR_FORMAT);
	cr_expect_eq(prompts("{\"prompts\":{\"q\":\"x\"},\"default_prompt_name\":\"r\"}", &p), SG_ERR_FORMAT);
	cr_expect(strstr(sg_last_error(), "'r'") != NULL, "%s", sg_last_error());
	cr_expect_eq(prompts("{\"prompts\":{\"q\":\"x\"},\"default_prompt_name\":3}", &p), SG_ERR_FORMAT);
	cr_expect_eq(prompts("[]", &p), SG_ERR_FORMAT);
	sg_st_config c;
	cr_assert_eq(pooling("{\"pooling_mode_mean_tokens\":true}", &c), SG_OK);
	cr_expect(c.include_prompt == 1);
	cr_assert_eq(pooling("{\"pooling_mode_mean_tokens\":true,\"include_prompt\":false}", &c), SG_OK);
	cr_expect(c.include_prompt == 0);
	cr_expect_eq(pooling("{\"pooling_mode_mean_tokens\":true,\"include_prompt\":\"no\"}", &c), SG_ERR_FORMAT);
}

Test(stconfig, folder_without_modules_is_mean_unnormalised)
{
	sg_st_config c;
	cr_assert_eq(sg_st_config_load(FIX, &c), SG_OK, "%s", sg_last_error());
	cr_expect(c.mode == SG_POOL_MEAN && !c.normalize && !c.from_folder);
}

Test(stconfig, pooling_modes_over_the_mask)
{
	/* 4 tokens of 2 dims, the last one padding */
	const float h[] = {1, -2, 3, 4, -5, 6, 100, 100};
	const int32_t mask[] = {1, 1, 1, 0};
	float out[2];
	sg_st_config c = sg_st_config_default();
	cr_assert_eq(sg_pool(&c, h, mask, 4, 2, out), SG_OK);
	cr_expect(fabsf(out[0] - (-1.0f / 3)) < 1e-6f && fabsf(out[1] - 8.0f / 3) < 1e-6f, "%g %g", out[0], out[1]);
	c.mode = SG_POOL_CLS;
	cr_assert_eq(sg_pool(&c, h, mask, 4, 2, out), SG_OK);
	cr_expect(out[0] == 1 && out[1] == -2);
	c.mode = SG_POOL_MAX;
	cr_assert_eq(sg_pool(&c, h, mask, 4, 2, out), SG_OK);
	cr_expect(out[0] == 3 && out[1] == 6);
	c.mode = SG_POOL_LAST;
	cr_assert_eq(sg_pool(&c, h, mask, 4, 2, out), SG_OK);
	cr_expect(out[0] == -5 && out[1] == 6);
	c.normalize = 1;
	cr_assert_eq(sg_pool(&c, h, mask, 4, 2, out), SG_OK);
	cr_expect(fabsf(out[0] - (-5.0f / sqrtf(61))) < 1e-6f && fabsf(out[1] - 6.0f / sqrtf(61)) < 1e-6f);
	const int32_t none[] = {0, 0, 0, 0};
	cr_expect_eq(sg_pool(&c, h, none, 4, 2, out), SG_ERR_INVALID_ARG);
}

Test(stconfig, sentence_bert_config_gives_the_token_limit)
{
	sg_st_config c = sg_st_config_default();
	json_t *j = json_loads("{\"max_seq_length\":256,\"do_lower_case\":false}", 0, NULL);
	cr_assert_eq(sg_st_config_sbert(j, &c), SG_OK, "%s", sg_last_error());
	cr_expect(c.max_seq_length == 256);
	json_decref(j);
	j = json_loads("{\"max_seq_length\":-3}", 0, NULL);
	cr_expect_eq(sg_st_config_sbert(j, &c), SG_ERR_FORMAT);
	json_decref(j);
	j = json_loads("{\"max_seq_length\":\"long\"}", 0, NULL);
	cr_expect_eq(sg_st_config_sbert(j, &c), SG_ERR_FORMAT);
	json_decref(j);
	j = json_loads("{}", 0, NULL);
	c.max_seq_length = 0;
	cr_expect_eq(sg_st_config_sbert(j, &c), SG_OK);
	cr_expect(c.max_seq_length == 0);
	json_decref(j);
}
