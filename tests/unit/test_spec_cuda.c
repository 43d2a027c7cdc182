/*
 * Speculative decoding on the CUDA backend (the GPU test group: every test skips without a usable
 * GPU or without CUDA in the build). A verify step is the CUDA backend's exact step (match_decode:
 * the one-token kernels over all the step's tokens). Checked: greedy answers with every drafter
 * (always right, always wrong, right then wrong, the n-gram drafter, a draft model, the MTP module)
 * equal the plain greedy answer on the GPU, for the dense (f32, MLX 4-bit, Gemma 3), MoE, hybrid
 * and MTP fixtures, and the verify rows are the bits of decode steps, with the token-batched
 * kernels and token by token (SARAGOSSA_CUDA_VERIFY_BATCH). Run on a GPU machine: build/test_unit
 * with --filter set to the spec_cuda suite (spec_cuda, a slash, a star).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/flags.h"
#include "engine/draft.h"
#include "engine/generate.h"
#include "engine/session.h"
#include "saragossa.h"

#include "session_model.h"


#define N_ANS 32
typedef struct run {
	int32_t t[N_ANS + 4];
	int n;
} run;
static int on_tok(const sg_gen_event *ev, void *user)
{
	run *r = user;
	if (ev->has_token && r->n < N_ANS + 4) r->t[r->n++] = ev->token;
	return 0;
}

typedef struct oracle {
	sg_gen_drafter ops;
	const int32_t *truth;
	size_t n_truth;
	int right, V;
} oracle;

static sg_status oracle_draft(void *self, const int32_t *hist, size_t n, int32_t max, int32_t *out, int32_t *n_out)
{
	oracle *o = self;
	(void)hist;
	*n_out = 0;
	for (int32_t k = 0; k < max && n + (size_t)k < o->n_truth; k++) {
		int32_t t = o->truth[n + (size_t)k];
		if (o->right >= 0 && k >= o->right) t = (t + 1) % o->V;
		out[(*n_out)++] = t;
	}
	return SG_OK;
}

static sg_model *load_cuda(const char *name)
{
	char path[256];
	snprintf(path, sizeof path, "tests/fixtures/%s", name);
	sg_model_params mp = sg_model_default_params();
	mp.backend = "cuda";
	sg_model *m = NULL;
	if (sg_model_load(path, &mp, &m) != SG_OK) cr_skip_test("no usable GPU: %s", sg_last_error());
	return m;
}

static void answers_equal_plain(const char *name)
{
	setenv("SARAGOSSA_SPEC_P_MIN", "0", 1);
	setenv("SARAGOSSA_VERIFY_GRAPHS", "1", 1); /* the recorded steps from the first of each count */
	sg_flags_reload();
	sg_model *m = load_cuda(name);
	int V = sg_model_n_vocab(m);
	sg_session_params sp = sg_session_default_params();
	sp.n_ctx = 128;
	sg_session *s = NULL;
	cr_assert_eq(sg_session_new(m, &sp, &s), SG_OK, "%s", sg_last_error());
	cr_assert(sg_session_can_verify(s));
	cr_assert(!sg_session_verify_stepwise(s), "the CUDA backend has exact steps (match_decode)");
	sg_gen_model ops = session_model(s, V, 128, 1);
	sg_gen_state st;
	sg_gen_state_init(&st, &ops);
	int32_t prompt[20];
	for (int i = 0; i < 20; i++) prompt[i] = (int32_t)((i % 6) * 17 + 3) % V;
	sg_gen_params p = sg_gen_default_params();
	p.prompt = prompt;
	p.n_prompt = 20;
	p.max_tokens = N_ANS;
	p.sampler.temperature = 0;
	p.on_event = on_tok;
	run plain, r;
	memset(&plain, 0, sizeof plain);
	p.user = &plain;
	sg_gen_result res;
	cr_assert_eq(sg_gen_state_reset(&st), SG_OK);
	cr_assert_eq(sg_generate(&st, silent_detok(), &p, &res), SG_OK, "%s", sg_last_error());
	cr_assert_eq(plain.n, N_ANS);
	int32_t truth[64];
	memcpy(truth, prompt, sizeof prompt);
	memcpy(truth + 20, plain.t, sizeof(int32_t) * N_ANS);
	/* drafters: oracles always right, always wrong, right for 2; the n-gram drafter; the model
	 * itself as a draft model; its MTP module where it has one */
	oracle o[3] = {{{NULL, "oracle", oracle_draft, NULL, NULL}, truth, 20 + N_ANS, -1, V},
		       {{NULL, "oracle", oracle_draft, NULL, NULL}, truth, 20 + N_ANS, 0, V},
		       {{NULL, "oracle", oracle_draft, NULL, NULL}, truth, 20 + N_ANS, 2, V}};
	for (int i = 0; i < 3; i++) o[i].ops.self = &o[i];
	sg_drafter *ng = NULL, *dm = NULL, *mtp = NULL;
	cr_assert_eq(sg_drafter_ngram(1, 3, &ng), SG_OK);
	sg_session *ds = NULL;
	cr_assert_eq(sg_session_new(m, &sp, &ds), SG_OK);
	cr_assert_eq(sg_drafter_model(ds, V, &dm), SG_OK);
	const sg_gen_drafter *drs[6] = {&o[0].ops, &o[1].ops, &o[2].ops, sg_drafter_ops(ng), sg_drafter_ops(dm), NULL};
	int nd = 5;
	if (sg_session_has_mtp(s)) {
		cr_assert_eq(sg_drafter_mtp(s, &mtp), SG_OK, "%s", sg_last_error());
		drs[nd++] = sg_drafter_ops(mtp);
	}
	for (int i = 0; i < 2 * nd; i++) { /* each drafter with the rows' argmaxes on the GPU, then with the rows */
		ops.eval_rows_greedy = i < nd ? sm_rows_greedy : NULL;
		memset(&r, 0, sizeof r);
		p.user = &r;
		p.drafter = drs[i % nd];
		p.draft_max = 4;
		cr_assert_eq(sg_gen_state_reset(&st), SG_OK);
		cr_assert_eq(sg_generate(&st, silent_detok(), &p, &res), SG_OK, "%s: %s", name, sg_last_error());
		cr_assert_eq(r.n, plain.n, "%s drafter %d", name, i);
		for (int k = 0; k < r.n; k++) cr_assert_eq(r.t[k], plain.t[k], "%s drafter %d (%s): token %d", name, i, drs[i % nd]->name, k);
		cr_assert_gt(res.n_verify, 0, "%s drafter %d: no verify step", name, i);
		if (i % nd == 0) cr_assert_eq(res.n_accepted, res.n_drafted);
		if (i % nd == 1) cr_assert_eq(res.n_accepted, 0);
	}
	sg_drafter_free(mtp);
	sg_drafter_free(dm);
	sg_drafter_free(ng);
	sg_session_free(ds);
	sg_gen_state_free(&st);
	sg_session_free(s);
	sg_model_free(m);
	unsetenv("SARAGOSSA_SPEC_P_MIN");
	unsetenv("SARAGOSSA_VERIFY_GRAPHS");
	sg_flags_reload();
}

Test(spec_cuda, dense_greedy_answers_equal_plain_decoding, .timeout = 300) { answers_equal_plain("qwen3"); }
Test(spec_cuda, moe_greedy_answers_equal_plain_decoding, .timeout = 300) { answers_equal_plain("qwen3_moe"); }
Test(spec_cuda, hybrid_greedy_answers_equal_plain_decoding, .timeout = 300) { answers_equal_plain("qwen3_next"); }
Test(spec_cuda, mtp_greedy_answers_equal_plain_decoding, .timeout = 300) { answers_equal_plain("qwen3_next_mtp"); }
Test(spec_cuda, mlx_4bit_greedy_answers_equal_plain_decoding, .timeout = 300) { answers_equal_plain("qwen3_mlx_q4_g32"); }
Test(spec_cuda, gemma3_greedy_answers_equal_plain_decoding, .timeout = 300) { answers_equal_plain("gemma3_text"); }
Test(spec_cuda, hybrid_moe_greedy_answers_equal_plain_decoding, .timeout = 300) { answers_equal_plain("qwen3_5_moe_text"); }

/* The verify rows are the bits of decode steps, through a mark and a truncate (hybrid), with the
 * token-batched kernels and token by token. */
Test(spec_cuda, verify_rows_are_the_bits_of_decode_steps, .timeout = 300)
{
	const char *names[] = {"qwen3", "qwen3_next", "qwen3_mlx_q4_g32", "qwen3_moe"};
	for (int f = 0; f < 8; f++) {
		setenv("SARAGOSSA_CUDA_VERIFY_BATCH", f < 4 ? "1" : "0", 1);
		sg_flags_reload();
		const char *name = names[f % 4];
		sg_model *m = load_cuda(name);
		const int V = sg_model_n_vocab(m), n = 5;
		sg_session_params sp = sg_session_default_params();
		sp.n_ctx = 64;
		sg_session *s = NULL;
		cr_assert_eq(sg_session_new(m, &sp, &s), SG_OK);
		int32_t prompt[16];
		for (int i = 0; i < 16; i++) prompt[i] = (int32_t)(i * 7 + 2) % V;
		char what[96];
		snprintf(what, sizeof what, "%s (batch %d)", name, f < 4);
		cr_assert_eq(sg_session_eval(s, prompt, 10, NULL), SG_OK);
		sm_check_verify_rows(s, prompt + 10, n, what);
		cr_assert_eq(sg_session_truncate(s, 10), SG_OK, "%s", sg_last_error());
		sm_check_greedy_rows(s, prompt + 10, n, what);
		sg_session_free(s);
		sg_model_free(m);
	}
	unsetenv("SARAGOSSA_CUDA_VERIFY_BATCH");
	sg_flags_reload();
}
