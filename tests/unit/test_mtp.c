/*
 * Multi-token prediction: the MTP module of the qwen3_next_mtp fixture against the reference that
 * tools/make_mtp_fixture.py composed from transformers' Qwen3-Next classes (the draft logits at
 * every position and the chained second step), the drafter in the generation loop (greedy answers
 * equal plain decoding, guesses verified), the kill-switch and models without a module.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/flags.h"
#include "engine/draft.h"
#include "engine/generate.h"
#include "engine/session.h"
#include "formats/weights.h"
#include "saragossa.h"

#include "session_model.h"

#define FX "tests/fixtures/qwen3_next_mtp"

static sg_model *load(const char *path)
{
	sg_model_params mp = sg_model_default_params();
	mp.n_threads = 2;
	mp.backend = "cpu";
	sg_model *m = NULL;
	cr_assert_eq(sg_model_load(path, &mp, &m), SG_OK, "%s", sg_last_error());
	return m;
}

static sg_session *session(sg_model *m, int n_ctx)
{
	sg_session_params sp = sg_session_default_params();
	sp.n_ctx = n_ctx;
	sg_session *s = NULL;
	cr_assert_eq(sg_session_new(m, &sp, &s), SG_OK, "%s", sg_last_error());
	return s;
}

/* max |a - b| / max |b| over n values */
static double rel_err(const float *a, const float *b, size_t n)
{
	double d = 0, w = 0;
	for (size_t i = 0; i < n; i++) {
		d = fmax(d, fabs((double)a[i] - b[i]));
		w = fmax(w, fabs((double)b[i]));
	}
	return d / w;
}

static int argmax(const float *v, int n)
{
	int b = 0;
	for (int i = 1; i < n; i++)
		if (v[i] > v[b]) b = i;
	return b;
}

Test(mtp, draft_logits_match_the_reference_module_at_every_position)
{
	sg_weights *ref = NULL;
	cr_assert_eq(sg_weights_open(FX "/ref.safetensors", &ref), SG_OK, "%s", sg_last_error());
	const sg_tensor *it = sg_weights_find(ref, "input_ids"), *nt = sg_weights_find(ref, "next_id");
	const sg_tensor *lt = sg_weights_find(ref, "logits"), *mt = sg_weights_find(ref, "mtp_logits");
	const sg_tensor *xt = sg_weights_find(ref, "mtp_next");
	cr_assert(it && nt && lt && mt && xt);
	int T = (int)sg_tensor_nelem(it);
	const int32_t *ids = (const int32_t *)it->data;
	int32_t next = ((const int32_t *)nt->data)[0];
	sg_model *m = load(FX);
	int V = sg_model_n_vocab(m);
	sg_session *s = session(m, 64);
	cr_assert(sg_session_has_mtp(s));
	cr_assert_eq(sg_session_mtp_enable(s, 1), SG_OK, "%s", sg_last_error());
	float *lg = malloc(sizeof(float) * 2 * (size_t)V);
	int32_t out[2];
	int n = -1;
	double worst = 0;
	/* nothing evaluated: no hidden state, no guess */
	cr_assert_eq(sg_session_mtp_draft(s, ids[0], 2, out, &n, lg), SG_OK);
	cr_assert_eq(n, 0);
	for (int j = 1; j <= T; j++) {
		/* the prompt's first j tokens, then the module at position j - 1 with token j */
		sg_session_reset(s);
		cr_assert_eq(sg_session_eval(s, ids, j, NULL), SG_OK, "%s", sg_last_error());
		const float *want_main = (const float *)lt->data + (size_t)(j - 1) * V;
		cr_assert_lt(rel_err(sg_session_logits(s), want_main, (size_t)V), 2e-3, "main logits at %d", j - 1);
		int32_t tok = j < T ? ids[j] : next;
		int steps = j == T ? 2 : 1;
		cr_assert_eq(sg_session_mtp_draft(s, tok, steps, out, &n, lg), SG_OK, "%s", sg_last_error());
		cr_assert_eq(n, steps);
		const float *want = (const float *)mt->data + (size_t)(j - 1) * V;
		double e = rel_err(lg, want, (size_t)V);
		cr_assert_lt(e, 2e-3, "MTP logits at position %d: max |d| / max |ref| = %g", j - 1, e);
		worst = fmax(worst, e);
		cr_assert_eq(out[0], argmax(want, V), "position %d", j - 1);
		if (j == T) {
			e = rel_err(lg + V, (const float *)xt->data, (size_t)V);
			cr_assert_lt(e, 2e-3, "the chained second step: %g", e);
			cr_assert_eq(out[1], argmax((const float *)xt->data, V));
			worst = fmax(worst, e);
		}
	}
	cr_log_info("MTP draft logits: max |d| / max |ref| = %.3g at worst", worst);
	/* the whole prompt in one chunk gives the same module state as one token at a time */
	sg_session_reset(s);
	for (int j = 0; j < T; j++) cr_assert_eq(sg_session_eval(s, ids + j, 1, NULL), SG_OK);
	cr_assert_eq(sg_session_mtp_draft(s, next, 2, out, &n, lg), SG_OK);
	cr_assert_lt(rel_err(lg, (const float *)mt->data + (size_t)(T - 1) * V, (size_t)V), 2e-3);
	cr_assert_lt(rel_err(lg + V, (const float *)xt->data, (size_t)V), 2e-3);
	/* bad input */
	cr_assert_eq(sg_session_mtp_draft(s, V, 1, out, &n, NULL), SG_ERR_RANGE);
	free(lg);
	sg_session_free(s);
	sg_model_free(m);
	sg_weights_close(ref);
}

Test(mtp, models_without_a_module_and_the_kill_switch_refuse_it)
{
	sg_model *m = load("tests/fixtures/qwen3_next");
	sg_session *s = session(m, 32);
	cr_assert(!sg_session_has_mtp(s));
	cr_assert_eq(sg_session_mtp_enable(s, 1), SG_ERR_UNSUPPORTED);
	sg_drafter *d = NULL;
	cr_assert_eq(sg_drafter_mtp(s, &d), SG_ERR_UNSUPPORTED);
	sg_session_free(s);
	sg_model_free(m);
	setenv("SARAGOSSA_SPEC_MTP", "0", 1);
	sg_flags_reload();
	m = load(FX);
	s = session(m, 32);
	cr_assert(!sg_session_has_mtp(s), "the module is not loaded with SARAGOSSA_SPEC_MTP=0");
	sg_session_free(s);
	sg_model_free(m);
	unsetenv("SARAGOSSA_SPEC_MTP");
	sg_flags_reload();
	cr_assert(sg_drafter_enabled("mtp"));
}

/* ---- the drafter in the generation loop ---- */


typedef struct run {
	int32_t t[64];
	int n;
} run;
static int on_tok(const sg_gen_event *ev, void *user)
{
	run *r = user;
	if (ev->has_token && r->n < 64) r->t[r->n++] = ev->token;
	return 0;
}

static sg_gen_result gen(sg_gen_state *st, const int32_t *prompt, size_t np, const sg_gen_drafter *dr, float temp, run *r)
{
	memset(r, 0, sizeof(*r));
	cr_assert_eq(sg_gen_state_reset(st), SG_OK);
	sg_gen_params p = sg_gen_default_params();
	p.prompt = prompt;
	p.n_prompt = np;
	p.max_tokens = 40;
	p.sampler.temperature = temp;
	p.sampler.seed = 99;
	p.drafter = dr;
	p.draft_max = 3;
	p.on_event = on_tok;
	p.user = r;
	sg_gen_result res;
	cr_assert_eq(sg_generate(st, silent_detok(), &p, &res), SG_OK, "%s", sg_last_error());
	return res;
}

Test(mtp, drafter_answers_equal_plain_decoding)
{
	sg_weights *ref = NULL;
	cr_assert_eq(sg_weights_open(FX "/ref.safetensors", &ref), SG_OK, "%s", sg_last_error());
	const sg_tensor *it = sg_weights_find(ref, "input_ids");
	const int32_t *ids = (const int32_t *)it->data;
	size_t T = (size_t)sg_tensor_nelem(it);
	sg_model *m = load(FX);
	sg_session *s = session(m, 96);
	sg_gen_model ops = session_model(s, sg_model_n_vocab(m), 96, 0);
	sg_gen_state st;
	sg_gen_state_init(&st, &ops);
	sg_drafter *d = NULL;
	cr_assert_eq(sg_drafter_mtp(s, &d), SG_OK, "%s", sg_last_error());
	for (int mode = 0; mode < 2; mode++) {
		float temp = mode ? 0.8f : 0.0f;
		run plain, r;
		/* without the drafter the module keeps running (it is on in the session): its work
		 * never changes the answer */
		gen(&st, ids, T, NULL, temp, &plain);
		sg_gen_result res = gen(&st, ids, T, sg_drafter_ops(d), temp, &r);
		cr_assert_eq(r.n, plain.n);
		for (int i = 0; i < r.n; i++) cr_assert_eq(r.t[i], plain.t[i], "%s: token %d", mode ? "sampled" : "greedy", i);
		cr_assert_gt(res.n_verify, 0);
		cr_assert_gt(res.n_drafted, 0);
		cr_log_info("MTP %s: %zu of %zu guesses kept, %zu verify steps for %d tokens", mode ? "sampled" : "greedy", res.n_accepted,
			    res.n_drafted, res.n_verify, r.n);
		/* the fixture's module was trained on nothing: some guesses still hold (the greedy
		 * continuation of a random model repeats itself) */
	}
	/* the greedy answer is the reference's greedy continuation (transformers) */
	const sg_tensor *gt = sg_weights_find(ref, "greedy");
	run r;
	gen(&st, ids, T, sg_drafter_ops(d), 0.0f, &r);
	for (int64_t i = 0; i < sg_tensor_nelem(gt); i++) cr_assert_eq(r.t[i], ((const int32_t *)gt->data)[i], "greedy token %lld", (long long)i);
	sg_drafter_free(d);
	sg_gen_state_free(&st);
	sg_session_free(s);
	sg_model_free(m);
	sg_weights_close(ref);
}
