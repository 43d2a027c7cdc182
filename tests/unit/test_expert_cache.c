/*
 * The expert slot cache on the tiny reference fixtures (tests/fixtures, run from the repository
 * root): --expert-cache values parse or are refused with a message; a model whose experts are
 * left on disk gives the resident model's logits bit for bit through the cache, before and after
 * the pool is shrunk (as the server's memory guard does) and grown back; a deferred model without
 * a cache refuses to run; the pool cannot shrink below one layer's experts.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "engine/expert_cache.h"
#include "engine/session.h"
#include "models/model.h"
#include "saragossa.h"

static const int32_t prompt[] = {5, 17, 101, 33, 250, 9, 77, 64, 3, 199, 12, 88, 41, 150, 7, 222, 31, 18};
#define N_PROMPT ((int)(sizeof(prompt) / sizeof(prompt[0])))

Test(expert_cache, spec_values_parse)
{
	sg_xc_spec s;
	char err[200];
	cr_assert_eq(sg_xc_parse("off", &s, err, sizeof err), 0);
	cr_assert_eq(s.mode, SG_XC_OFF);
	cr_assert_eq(sg_xc_parse(NULL, &s, err, sizeof err), 0);
	cr_assert_eq(s.mode, SG_XC_OFF);
	cr_assert_eq(sg_xc_parse("auto", &s, err, sizeof err), 0);
	cr_assert_eq(s.mode, SG_XC_AUTO);
	cr_assert_eq(sg_xc_parse("6g", &s, err, sizeof err), 0);
	cr_assert_eq(s.mode, SG_XC_BYTES);
	cr_assert_eq(s.bytes, 6ull << 30);
	cr_assert_eq(sg_xc_parse("12.5%", &s, err, sizeof err), 0);
	cr_assert_eq(s.mode, SG_XC_PERCENT);
	cr_assert_float_eq(s.percent, 12.5, 1e-12);
	const char *bad[] = {"0%", "101%", "x%", "%", "-1g", "lots", "6q"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		err[0] = 0;
		cr_assert_eq(sg_xc_parse(bad[i], &s, err, sizeof err), -1, "%s", bad[i]);
		cr_assert(strstr(err, "--expert-cache"), "%s: %s", bad[i], err);
	}
}

static sg_model *load(const char *name, int defer)
{
	char path[256];
	snprintf(path, sizeof path, "tests/fixtures/%s", name);
	sg_model_params mp = sg_model_default_params();
	mp.backend = "cpu";
	mp.n_threads = 1;
	sg_model *m = NULL;
	cr_assert_eq(sg_model_load_ex(path, &mp, defer, &m), SG_OK, "%s", sg_last_error());
	return m;
}

static void logits(sg_model *m, float *out)
{
	sg_session_params sp = sg_session_default_params();
	sp.n_ctx = 64;
	sp.kv_type = SG_KV_F32;
	sg_session *s = NULL;
	cr_assert_eq(sg_session_new(m, &sp, &s), SG_OK, "%s", sg_last_error());
	cr_assert_eq(sg_session_eval(s, prompt, N_PROMPT, out), SG_OK, "%s", sg_last_error());
	sg_session_free(s);
}

static void resize_keeps_logits(const char *name)
{
	sg_model *ref = load(name, 0);
	int V = sg_model_n_vocab(ref);
	size_t n = (size_t)N_PROMPT * (size_t)V;
	float *a = calloc(n, sizeof(float)), *b = calloc(n, sizeof(float));
	logits(ref, a);
	sg_model_free(ref);

	sg_model *m = load(name, 1);
	int64_t experts = 0;
	cr_assert_gt(sg_xc_slot_bytes(m, &experts, NULL), 0);
	cr_assert_eq(sg_xc_attach(m, experts), SG_OK, "%s", sg_last_error());
	sg_xc_stats st;
	cr_assert(sg_xc_stats_get(m, &st));
	cr_assert_eq(st.slots, experts);
	logits(m, b);
	cr_assert(!memcmp(a, b, n * sizeof(float)), "%s: logits through the cache differ", name);
	int E = m->desc.n_expert;
	cr_assert_eq(sg_xc_resize(m, 1), E, "shrinks to one layer's experts, no further");
	memset(b, 0, n * sizeof(float));
	logits(m, b);
	cr_assert(!memcmp(a, b, n * sizeof(float)), "%s: logits after the shrink differ", name);
	cr_assert(sg_xc_stats_get(m, &st));
	cr_assert_eq(st.slots, E);
	cr_assert_lt(st.hits, st.lookups, "one layer's slots for all layers: experts are read again");
	cr_assert_eq(sg_xc_resize(m, experts * 4), experts, "grows back to the allocation, no further");
	memset(b, 0, n * sizeof(float));
	logits(m, b);
	cr_assert(!memcmp(a, b, n * sizeof(float)), "%s: logits after growing back differ", name);
	sg_model_free(m);
	free(a);
	free(b);
}

Test(expert_cache, per_expert_layout_keeps_logits_through_resizes) { resize_keeps_logits("qwen3_moe"); }
Test(expert_cache, fused_gate_up_layout_keeps_logits_through_resizes) { resize_keeps_logits("qwen3_moe_stacked"); }
Test(expert_cache, hybrid_layers_keep_logits_through_resizes) { resize_keeps_logits("qwen3_5_moe_text"); }

Test(expert_cache, deferred_experts_without_a_cache_refuse_to_run)
{
	sg_model *m = load("qwen3_moe", 1);
	sg_session_params sp = sg_session_default_params();
	sp.n_ctx = 16;
	sg_session *s = NULL;
	cr_assert_eq(sg_session_new(m, &sp, &s), SG_OK, "%s", sg_last_error());
	cr_assert_neq(sg_session_eval(s, prompt, 4, NULL), SG_OK);
	cr_assert(strstr(sg_last_error(), "experts were left on disk"), "%s", sg_last_error());
	sg_session_free(s);
	sg_model_free(m);
}

Test(expert_cache, a_pool_below_one_layer_and_a_dense_model_are_refused)
{
	sg_model *m = load("qwen3_moe", 1);
	cr_assert_eq(sg_xc_attach(m, m->desc.n_expert - 1), SG_ERR_INVALID_ARG);
	cr_assert(strstr(sg_last_error(), "fewer than one layer's"), "%s", sg_last_error());
	sg_model_free(m);
	sg_model *d = load("qwen3", 0);
	cr_assert_eq(sg_xc_attach(d, 100), SG_ERR_UNSUPPORTED);
	cr_assert(strstr(sg_last_error(), "no routed experts"), "%s", sg_last_error());
	sg_model_free(d);
}
