/*
 * The public embedding and reranking API (include/saragossa.h: sg_embed_*, sg_rerank) on the
 * fixtures (run from the repository root): the random cross-encoder's scores are
 * sentence-transformers' CrossEncoder's (ref.json, within 1e-4); token ids give the BERT
 * fixture's mean-pooled reference (1e-3, as the encoder's own test); a text embeds the same alone
 * and inside 64 texts of mixed lengths (batching invariance, 1e-6 per value: the GEMM's f32
 * summation order); dimensions keep the first values; bad input is a status and a message, never
 * a crash.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/weights.h"
#include "saragossa.h"

#define CE "tests/fixtures/cross_encoder"
#define BERT "tests/fixtures/bert"

static sg_embed_model *load(const char *path)
{
	sg_embed_params p = sg_embed_default_params();
	p.backend = "cpu";
	p.n_threads = 2;
	sg_embed_model *m = NULL;
	cr_assert_eq(sg_embed_load(path, &p, &m), SG_OK, "%s", sg_last_error());
	return m;
}

/* The BERT fixture with the cross-encoder's WordPiece tokenizer (its 162 ids lie inside the
 * BERT's 320), in a temporary folder of symlinks: an embedding model that takes text. */
static void text_model(char *dir)
{
	char cwd[PATH_MAX], src[PATH_MAX * 2], dst[PATH_MAX * 2];
	cr_assert(getcwd(cwd, sizeof cwd));
	strcpy(dir, "/tmp/sg-embed-XXXXXX");
	cr_assert(mkdtemp(dir));
	const char *files[][2] = {{BERT, "config.json"}, {BERT, "model.safetensors"}, {CE, "tokenizer.json"},
				  {CE, "tokenizer_config.json"}};
	for (size_t i = 0; i < 4; i++) {
		snprintf(src, sizeof src, "%s/%s/%s", cwd, files[i][0], files[i][1]);
		snprintf(dst, sizeof dst, "%s/%s", dir, files[i][1]);
		cr_assert_eq(symlink(src, dst), 0, "%s", dst);
	}
}

static void rm_model(const char *dir)
{
	char p[PATH_MAX + 32];
	const char *files[] = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"};
	for (size_t i = 0; i < 4; i++) {
		snprintf(p, sizeof p, "%s/%s", dir, files[i]);
		unlink(p);
	}
	rmdir(dir);
}

Test(api_embed, rerank_gives_the_cross_encoder_reference_scores)
{
	json_error_t je;
	json_t *ref = json_load_file(CE "/ref.json", 0, &je);
	cr_assert(ref != NULL, "%s", je.text);
	json_t *docs = json_object_get(ref, "documents"), *want = json_object_get(ref, "scores");
	size_t n = json_array_size(docs);
	cr_assert(n >= 4 && n <= 16 && json_array_size(want) == n);
	const char *d[16];
	float got[16];
	for (size_t i = 0; i < n; i++) d[i] = json_string_value(json_array_get(docs, i));
	sg_embed_model *m = load(CE);
	cr_expect(sg_embed_is_reranker(m));
	cr_assert_eq(sg_rerank(m, json_string_value(json_object_get(ref, "query")), d, n, 0, got), SG_OK, "%s", sg_last_error());
	for (size_t i = 0; i < n; i++) {
		double w = json_real_value(json_array_get(want, i));
		cr_expect(fabs(got[i] - w) <= 1e-4, "document %zu: %.7f, sentence-transformers %.7f", i, got[i], w);
	}
	/* a cross-encoder makes no embeddings */
	const char *t[] = {"x"};
	float v[64];
	cr_expect_eq(sg_embed_texts(m, t, NULL, 1, 0, 0, v, NULL), SG_ERR_UNSUPPORTED);
	cr_expect(strstr(sg_last_error(), "reranker") != NULL, "%s", sg_last_error());
	sg_embed_free(m);
	json_decref(ref);
}

Test(api_embed, token_ids_give_the_reference_mean_pooled_vector)
{
	sg_weights *ref = NULL;
	cr_assert_eq(sg_weights_open(BERT "/ref.safetensors", &ref), SG_OK, "%s", sg_last_error());
	const sg_tensor *it = sg_weights_find(ref, "input_ids"), *mt = sg_weights_find(ref, "attention_mask");
	const sg_tensor *pt = sg_weights_find(ref, "pooled");
	cr_assert(it && mt && pt);
	int n = (int)sg_tensor_nelem(it), real = 0;
	const int32_t *ids = (const int32_t *)it->data, *mask = (const int32_t *)mt->data;
	for (int i = 0; i < n; i++) real += mask[i] != 0;
	sg_embed_model *m = load(BERT);
	int D = sg_embed_dim(m);
	cr_assert_eq(D, (int)sg_tensor_nelem(pt));
	cr_expect(!sg_embed_is_reranker(m) && sg_embed_max_tokens(m) == 64);
	float *v = calloc(2 * (size_t)D, sizeof(float));
	const int32_t *in[2] = {ids, ids};
	int lens[2] = {real, real};
	cr_assert_eq(sg_embed_tokens(m, in, lens, 2, 0, v), SG_OK, "%s", sg_last_error());
	const float *want = (const float *)pt->data;
	double dmax = 0, wmax = 0;
	for (int j = 0; j < D; j++) {
		dmax = fmax(dmax, fabs((double)v[j] - want[j]));
		wmax = fmax(wmax, fabs((double)want[j]));
		cr_expect_eq(v[j], v[D + j]);
	}
	cr_expect(dmax / wmax <= 1e-3, "max |d| / max |ref| = %.3g", dmax / wmax);
	sg_embed_free(m);
	free(v);
	sg_weights_close(ref);
}

Test(api_embed, a_text_in_a_batch_of_64_equals_it_alone_and_dimensions_cut)
{
	char dir[64];
	text_model(dir);
	sg_embed_model *m = load(dir);
	rm_model(dir);
	int D = sg_embed_dim(m);
	static const char *words[] = {"cats", "sleep", "the", "capital", "of", "france", "is", "paris", "river", "zzq"};
	char *texts[64];
	for (int i = 0; i < 64; i++) {
		texts[i] = calloc(512, 1);
		for (int k = 0; k <= (i * 7) % 40; k++) {
			strcat(texts[i], words[(i + k * 3) % 10]);
			strcat(texts[i], " ");
		}
	}
	float *batch = calloc(64 * (size_t)D, sizeof(float)), *alone = calloc((size_t)D, sizeof(float));
	int ntok[64];
	cr_assert_eq(sg_embed_texts(m, (const char *const *)texts, NULL, 64, 0, 0, batch, ntok), SG_OK, "%s", sg_last_error());
	double worst = 0;
	for (int i = 0; i < 64; i++) {
		cr_assert(ntok[i] >= 3 && ntok[i] <= 64);
		cr_assert_eq(sg_embed_texts(m, (const char *const *)&texts[i], NULL, 1, 0, 0, alone, NULL), SG_OK);
		for (int j = 0; j < D; j++) worst = fmax(worst, fabs((double)alone[j] - batch[(size_t)i * D + j]));
	}
	cr_expect(worst <= 1e-6, "a text in a batch of 64 vs alone: max |d| = %.3g", worst);
	float cut[8];
	cr_assert_eq(sg_embed_texts(m, (const char *const *)texts, NULL, 1, 0, 8, cut, NULL), SG_OK, "%s", sg_last_error());
	cr_expect(memcmp(cut, batch, sizeof cut) == 0, "the fixture does not normalise: dimensions keeps the first values");
	for (int i = 0; i < 64; i++) free(texts[i]);
	free(batch);
	free(alone);
	sg_embed_free(m);
}

Test(api_embed, bad_input_is_a_status_and_a_message)
{
	sg_embed_model *m = NULL;
	cr_expect_eq(sg_embed_load(NULL, NULL, &m), SG_ERR_INVALID_ARG);
	cr_expect_eq(sg_embed_load(BERT, NULL, NULL), SG_ERR_INVALID_ARG);
	cr_expect_neq(sg_embed_load("tests/fixtures/no_such_model", NULL, &m), SG_OK);
	cr_expect(m == NULL);
	cr_expect_eq(sg_embed_load("tests/fixtures/llama", NULL, &m), SG_ERR_UNSUPPORTED);
	cr_expect(strstr(sg_last_error(), "is a language model without an embedding head") != NULL, "%s", sg_last_error());
	m = load(BERT);
	float v[64];
	const char *t[] = {"x", NULL};
	cr_expect_eq(sg_embed_texts(m, t, NULL, 0, 0, 0, v, NULL), SG_ERR_INVALID_ARG);
	cr_expect_eq(sg_embed_texts(m, t, NULL, 2, 0, 0, v, NULL), SG_ERR_INVALID_ARG);
	cr_expect_eq(sg_embed_texts(m, t, NULL, 1, 0, 0, v, NULL), SG_ERR_UNSUPPORTED); /* no tokenizer.json */
	const int32_t ids[] = {1, 2, 999};
	const int32_t *in[] = {ids};
	int n3 = 3, n0 = 0;
	cr_expect_eq(sg_embed_tokens(m, in, &n3, 1, 0, v), SG_ERR_RANGE);
	cr_expect(strstr(sg_last_error(), "token 2 = 999 is outside the vocabulary [0, 320)") != NULL, "%s", sg_last_error());
	cr_expect_eq(sg_embed_tokens(m, in, &n0, 1, 0, v), SG_ERR_INVALID_ARG);
	int n2 = 2;
	cr_expect_eq(sg_embed_tokens(m, in, &n2, 1, 65, v), SG_ERR_RANGE);
	cr_expect_eq(sg_embed_tokens(m, in, &n2, 1, -1, v), SG_ERR_RANGE);
	const char *docs[] = {"a"};
	cr_expect_eq(sg_rerank(m, "q", docs, 1, 0, v), SG_ERR_UNSUPPORTED);
	cr_expect_eq(sg_rerank(m, NULL, docs, 1, 0, v), SG_ERR_INVALID_ARG);
	sg_embed_free(m);
	sg_embed_free(NULL);
}

/* RoBERTa-style positions (from the pad id) and MPNet's relative bias through the packed batch:
 * on the XLM-R and MPNet fixtures, inputs of mixed lengths (one holding a pad token, whose
 * position is the pad id's) embedded in one call equal each embedded alone (one forward of its
 * own) within 1e-6, and the fixture's whole input is transformers' pooled vector within 1e-3. */
static void batch_equals_alone(const char *dir)
{
	char path[256];
	snprintf(path, sizeof path, "%s/ref.safetensors", dir);
	sg_weights *ref = NULL;
	cr_assert_eq(sg_weights_open(path, &ref), SG_OK, "%s", sg_last_error());
	const sg_tensor *it = sg_weights_find(ref, "input_ids"), *mt = sg_weights_find(ref, "attention_mask");
	const sg_tensor *pt = sg_weights_find(ref, "pooled");
	cr_assert(it && mt && pt);
	snprintf(path, sizeof path, "%s/config.json", dir);
	json_error_t je;
	json_t *cfg = json_load_file(path, 0, &je);
	cr_assert(cfg != NULL, "%s", je.text);
	int pad = (int)json_integer_value(json_object_get(cfg, "pad_token_id"));
	json_decref(cfg);
	int n = (int)sg_tensor_nelem(it), real = 0;
	int32_t full[64], holed[64];
	cr_assert(n <= 64);
	for (int i = 0; i < n; i++)
		if (((const int32_t *)mt->data)[i]) full[real++] = ((const int32_t *)it->data)[i];
	cr_assert(real >= 8);
	/* a pad token inside an input: transformers gives it the pad id's position and counts on after */
	memcpy(holed, full, sizeof(int32_t) * (size_t)real);
	holed[real / 3] = pad;
	const int32_t *in[] = {full, holed, full, full, full, full};
	int lens[] = {3, real, real, real / 2, 1, real - 1};
	enum { N = 6 };
	sg_embed_model *m = load(dir);
	int D = sg_embed_dim(m);
	float *batch = calloc((size_t)N * (size_t)D, sizeof(float)), *alone = calloc((size_t)D, sizeof(float));
	cr_assert_eq(sg_embed_tokens(m, in, lens, N, 0, batch), SG_OK, "%s", sg_last_error());
	double worst = 0;
	for (int i = 0; i < N; i++) {
		cr_assert_eq(sg_embed_tokens(m, &in[i], &lens[i], 1, 0, alone), SG_OK, "%s", sg_last_error());
		for (int j = 0; j < D; j++) worst = fmax(worst, fabs((double)alone[j] - batch[(size_t)i * D + j]));
	}
	cr_expect(worst <= 1e-6, "%s: an input in a batch of mixed lengths vs alone: max |d| = %.3g", dir, worst);
	/* the holed input differs from the whole one (the pad token is not ignored nor the same) */
	double hd = 0;
	for (int j = 0; j < D; j++) hd = fmax(hd, fabs((double)batch[(size_t)D + j] - batch[(size_t)2 * D + j]));
	cr_expect(hd > 1e-4, "%s: a pad token inside the input changed nothing", dir);
	const float *want = (const float *)pt->data;
	double dmax = 0, wmax = 0;
	for (int j = 0; j < D; j++) {
		dmax = fmax(dmax, fabs((double)batch[(size_t)2 * D + j] - want[j]));
		wmax = fmax(wmax, fabs((double)want[j]));
	}
	cr_expect(dmax / wmax <= 1e-3, "%s: in the batch, max |d| / max |ref| = %.3g", dir, dmax / wmax);
	sg_embed_free(m);
	free(batch);
	free(alone);
	sg_weights_close(ref);
}

Test(api_embed, xlm_roberta_and_mpnet_batches_of_mixed_lengths_equal_each_input_alone)
{
	batch_equals_alone("tests/fixtures/xlm_roberta");
	batch_equals_alone("tests/fixtures/mpnet");
}
