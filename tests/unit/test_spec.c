/*
 * Speculative decoding on the reference fixtures (CPU): the answer with any drafter is the answer
 * without one, token for token, greedy and sampled with one seed, for dense, MoE, hybrid (gated
 * delta net) and quantized (MLX 4-bit, blocked GEMM on) models, with drafters that are always
 * right, always wrong, right for j tokens then wrong (every edge of the roll-back), the n-gram
 * drafter and a draft model (the target itself, in a session of its own). Also: stop strings and
 * constraints with speculation on, the drafters themselves, and the verify step's bits.
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
#include "saragossa.h"

#include "session_model.h"

#define MAXT 64

/* ---- the fixture model bound for sg_generate: session_model.h; its detokenizer here */

/* pieces: "<id>" per token */
static char piece_buf[32];
static sg_status d_push(void *self, int32_t tok, const char **piece, size_t *len)
{
	(void)self;
	*len = (size_t)snprintf(piece_buf, sizeof piece_buf, "<%d>", tok);
	*piece = piece_buf;
	return SG_OK;
}
static sg_status d_flush(void *self, const char **piece, size_t *len)
{
	(void)self;
	*piece = "";
	*len = 0;
	return SG_OK;
}
static void d_reset(void *self) { (void)self; }
static const sg_gen_detok detok = {NULL, d_push, d_flush, d_reset};

typedef struct run {
	int32_t tok[MAXT + 8];
	int n;
	char text[4096];
	size_t tlen;
} run;

static int on_ev(const sg_gen_event *ev, void *user)
{
	run *r = user;
	if (ev->has_token && r->n < MAXT + 8) r->tok[r->n++] = ev->token;
	if (ev->len && r->tlen + ev->len < sizeof r->text) {
		memcpy(r->text + r->tlen, ev->text, ev->len);
		r->tlen += ev->len;
	}
	return 0;
}

typedef struct fx {
	sg_model *m;
	sg_session *s;
	sg_gen_model ops;
	sg_gen_state st;
	int V;
} fx;

static void fx_open(fx *f, const char *name, int n_ctx)
{
	char path[256];
	snprintf(path, sizeof path, "tests/fixtures/%s", name);
	sg_model_params mp = sg_model_default_params();
	mp.n_threads = 2;
	cr_assert_eq(sg_model_load(path, &mp, &f->m), SG_OK, "%s: %s", name, sg_last_error());
	sg_session_params sp = sg_session_default_params();
	sp.n_ctx = n_ctx;
	cr_assert_eq(sg_session_new(f->m, &sp, &f->s), SG_OK, "%s", sg_last_error());
	f->V = sg_model_n_vocab(f->m);
	f->ops = session_model(f->s, f->V, n_ctx, 1);
	sg_gen_state_init(&f->st, &f->ops);
}

static void fx_close(fx *f)
{
	sg_gen_state_free(&f->st);
	sg_session_free(f->s);
	sg_model_free(f->m);
}

static int32_t prompt[24];
static size_t n_prompt = 24;

static void make_prompt(int V)
{
	/* a repeated phrase so the n-gram drafter has something to find */
	for (size_t i = 0; i < n_prompt; i++) prompt[i] = (int32_t)((i % 7) * 13 + 5) % V;
}

static sg_gen_params params(run *r, int max_tokens, float temp, uint64_t seed)
{
	sg_gen_params p = sg_gen_default_params();
	p.prompt = prompt;
	p.n_prompt = n_prompt;
	p.max_tokens = max_tokens;
	p.sampler.temperature = temp;
	p.sampler.seed = seed;
	p.on_event = on_ev;
	p.user = r;
	return p;
}

/* One generation from a fresh state. */
static sg_gen_result gen(fx *f, sg_gen_params *p, run *r)
{
	memset(r, 0, sizeof(*r));
	cr_assert_eq(sg_gen_state_reset(&f->st), SG_OK);
	sg_gen_result res;
	cr_assert_eq(sg_generate(&f->st, &detok, p, &res), SG_OK, "%s", sg_last_error());
	/* the state holds the prompt and the answer's evaluated tokens, no guesses past them */
	cr_assert_eq((size_t)sg_session_position(f->s), f->st.n);
	cr_assert_eq(f->st.n, n_prompt + (size_t)r->n - 1, "state %zu, prompt %zu + answer %d - 1", f->st.n, n_prompt, r->n);
	return res;
}

/* ---- drafters of known quality ---- */

typedef struct oracle {
	sg_gen_drafter ops;
	const int32_t *truth; /* prompt + answer */
	size_t n_truth;
	int right;            /* guesses right before the first wrong one (-1: always right) */
	int V;
	size_t calls;
} oracle;

static sg_status oracle_draft(void *self, const int32_t *hist, size_t n, int32_t max, int32_t *out, int32_t *n_out)
{
	oracle *o = self;
	o->calls++;
	*n_out = 0;
	cr_assert(n <= o->n_truth);
	cr_assert(!memcmp(hist, o->truth, n * sizeof(int32_t)), "the history left the answer");
	for (int32_t k = 0; k < max && n + (size_t)k < o->n_truth; k++) {
		int32_t t = o->truth[n + (size_t)k];
		if (o->right >= 0 && k >= o->right) t = (t + 1) % o->V;
		out[(*n_out)++] = t;
	}
	return SG_OK;
}

static void same_answer(const run *a, const run *b, const char *what)
{
	cr_assert_eq(a->n, b->n, "%s: %d tokens, plain %d", what, b->n, a->n);
	for (int i = 0; i < a->n; i++) cr_assert_eq(a->tok[i], b->tok[i], "%s: token %d is %d, plain %d", what, i, b->tok[i], a->tok[i]);
	cr_assert_eq(a->tlen, b->tlen, "%s: text", what);
	cr_assert(!memcmp(a->text, b->text, a->tlen), "%s: text", what);
}

/* Greedy and sampled answers of `name` with every drafter equal the plain ones. */
static void spec_matches_plain(const char *name)
{
	fx f;
	fx_open(&f, name, 128);
	make_prompt(f.V);
	const int N = 40;
	for (int mode = 0; mode < 2; mode++) {
		float temp = mode ? 0.9f : 0.0f;
		run plain, r;
		sg_gen_params p = params(&plain, N, temp, 1234);
		gen(&f, &p, &plain);
		cr_assert_eq(plain.n, N);
		int32_t truth[128];
		memcpy(truth, prompt, n_prompt * sizeof(int32_t));
		memcpy(truth + n_prompt, plain.tok, (size_t)N * sizeof(int32_t));
		int rights[] = {-1, 0, 1, 2, 3};
		for (size_t i = 0; i < sizeof rights / sizeof *rights; i++) {
			oracle o = {{NULL, "oracle", oracle_draft, NULL, NULL}, truth, n_prompt + (size_t)N, rights[i], f.V, 0};
			o.ops.self = &o;
			for (int dm = 1; dm <= 4; dm += 3) {
				char what[128];
				snprintf(what, sizeof what, "%s %s, oracle right %d, draft_max %d", name, mode ? "sampled" : "greedy", rights[i], dm);
				p = params(&r, N, temp, 1234);
				p.drafter = &o.ops;
				p.draft_max = dm;
				sg_gen_result res = gen(&f, &p, &r);
				same_answer(&plain, &r, what);
				cr_assert_gt(res.n_verify, 0, "%s: no verify step", what);
				if (rights[i] == -1 && dm == 4) {
					/* always right: each verify step keeps all its guesses */
					cr_assert_eq(res.n_accepted, res.n_drafted, "%s", what);
					cr_assert_lt(res.n_verify, (size_t)N / 2, "%s: %zu verify steps", what, res.n_verify);
				}
				if (rights[i] == 0) cr_assert_eq(res.n_accepted, 0, "%s", what);
				if (rights[i] > 0) cr_assert_geq(res.n_accepted, (size_t)(rights[i] < dm ? rights[i] : dm), "%s", what);
			}
		}
		/* the n-gram drafter */
		sg_drafter *ng = NULL;
		cr_assert_eq(sg_drafter_ngram(1, 3, &ng), SG_OK);
		p = params(&r, N, temp, 1234);
		p.drafter = sg_drafter_ops(ng);
		p.draft_max = 6;
		sg_gen_result res = gen(&f, &p, &r);
		same_answer(&plain, &r, mode ? "ngram sampled" : "ngram greedy");
		cr_assert_gt(res.n_drafted, 0);
		sg_drafter_free(ng);
		/* a draft model: the target itself in a session of its own (always right when greedy) */
		sg_session *ds = NULL;
		sg_session_params sp = sg_session_default_params();
		sp.n_ctx = 128;
		cr_assert_eq(sg_session_new(f.m, &sp, &ds), SG_OK);
		sg_drafter *dm = NULL;
		cr_assert_eq(sg_drafter_model(ds, f.V, &dm), SG_OK);
		setenv("SARAGOSSA_SPEC_P_MIN", "0", 1);
		/* sampled: greedy guesses checked against the target's own draw (the rejection-sampling
		 * path, whose answer is the same in distribution only, is test_spec_sampled.c's) */
		setenv("SARAGOSSA_SPEC_REJECTION", "0", 1);
		sg_flags_reload();
		p = params(&r, N, temp, 1234);
		p.drafter = sg_drafter_ops(dm);
		p.draft_max = 5;
		res = gen(&f, &p, &r);
		same_answer(&plain, &r, mode ? "draft model sampled" : "draft model greedy");
		/* (where prefill chunks give decode's bits, the draft's guesses are the target's) */
		if (!mode && !strcmp(name, "qwen3")) cr_assert_eq(res.n_accepted, res.n_drafted, "%s: the target as its own draft", name);
		if (!mode) {
			/* SARAGOSSA_SPEC_P_MIN: at 100 no guess after the first is sure enough (a draft is its
			 * first guess alone); at 0 every draft runs to draft_max where the answer allows */
			for (int pm = 0; pm < 2; pm++) {
				setenv("SARAGOSSA_SPEC_P_MIN", pm ? "100" : "0", 1);
				sg_flags_reload();
				sg_drafter *dp = NULL;
				cr_assert_eq(sg_drafter_model(ds, f.V, &dp), SG_OK);
				p = params(&r, N, temp, 1234);
				p.drafter = sg_drafter_ops(dp);
				p.draft_max = 5;
				res = gen(&f, &p, &r);
				same_answer(&plain, &r, pm ? "draft model, p_min 100" : "draft model, p_min 0");
				if (pm) cr_assert_eq(res.n_drafted, res.n_verify, "%s: p_min 100 keeps a draft to one guess", name);
				else cr_assert_gt(res.n_drafted, res.n_verify, "%s: p_min 0 drafts several guesses a step", name);
				sg_drafter_free(dp);
			}
			setenv("SARAGOSSA_SPEC_P_MIN", "0", 1);
			sg_flags_reload();
		}
		unsetenv("SARAGOSSA_SPEC_REJECTION");
		sg_flags_reload();
		if (mode) {
			/* rejection sampling: a whole answer; the target as its own draft (q = p where the
			 * bits agree) keeps every guess */
			p = params(&r, N, temp, 1234);
			p.drafter = sg_drafter_ops(dm);
			p.draft_max = 5;
			res = gen(&f, &p, &r);
			cr_assert_eq(r.n, N, "%s: rejection sampling gave %d tokens", name, r.n);
			cr_assert_gt(res.n_drafted, 0);
			if (!strcmp(name, "qwen3")) cr_assert_eq(res.n_accepted, res.n_drafted, "%s: q = p keeps every guess", name);
		}
		sg_drafter_free(dm);
		sg_session_free(ds);
		unsetenv("SARAGOSSA_SPEC_P_MIN");
		sg_flags_reload();
	}
	fx_close(&f);
}

/* The back-off after steps that keep nothing: with the costs measured (SARAGOSSA_SPEC_COST) it doubles
 * up to 64 tokens without guesses, without them it stops at 8, so an always-wrong drafter gets fewer
 * verify steps with the costs on; the answer is plain decoding's either way. */
Test(spec, an_always_wrong_drafter_backs_off_further_when_costs_are_measured)
{
	fx f;
	fx_open(&f, "qwen3", 128);
	make_prompt(f.V);
	const int N = 60;
	run plain, r;
	sg_gen_params p = params(&plain, N, 0.0f, 1234);
	gen(&f, &p, &plain);
	int32_t truth[128];
	memcpy(truth, prompt, n_prompt * sizeof(int32_t));
	memcpy(truth + n_prompt, plain.tok, (size_t)N * sizeof(int32_t));
	size_t steps[2];
	for (int cost = 0; cost < 2; cost++) {
		setenv("SARAGOSSA_SPEC_COST", cost ? "1" : "0", 1);
		sg_flags_reload();
		oracle o = {{NULL, "oracle", oracle_draft, NULL, NULL}, truth, n_prompt + (size_t)N, 0, f.V, 0};
		o.ops.self = &o;
		p = params(&r, N, 0.0f, 1234);
		p.drafter = &o.ops;
		p.draft_max = 4;
		sg_gen_result res = gen(&f, &p, &r);
		same_answer(&plain, &r, cost ? "always wrong, costs on" : "always wrong, costs off");
		cr_assert_eq(res.n_accepted, 0);
		steps[cost] = res.n_verify;
	}
	unsetenv("SARAGOSSA_SPEC_COST");
	sg_flags_reload();
	/* 60 tokens: skips of 2, 4, 8, 16, 32 (6 steps at most) against 2, 4, 8, 8, ... (8 or more) */
	cr_assert_leq(steps[1], 6, "costs on: %zu verify steps", steps[1]);
	cr_assert_geq(steps[0], 7, "costs off: %zu verify steps", steps[0]);
	fx_close(&f);
}

Test(spec, dense_answers_equal_plain_decoding_with_every_drafter) { spec_matches_plain("qwen3"); }
Test(spec, moe_answers_equal_plain_decoding_with_every_drafter) { spec_matches_plain("qwen3_moe"); }
Test(spec, hybrid_answers_equal_plain_decoding_with_every_drafter) { spec_matches_plain("qwen3_next"); }
Test(spec, hybrid_moe_answers_equal_plain_decoding_with_every_drafter) { spec_matches_plain("qwen3_5_moe_text"); }
Test(spec, sliding_window_answers_equal_plain_decoding_with_every_drafter) { spec_matches_plain("gemma3_text"); }
/* quantized weights with the blocked GEMM on: the verify step must not take the GEMM */
Test(spec, quantized_answers_equal_plain_decoding_with_every_drafter) { spec_matches_plain("llama_mlx_q4_g32"); }

/* The verify step's rows are the bits of one-token steps, with the GEMM on: quantized weights,
 * experts, the gated delta rule, a sliding window. */
static void verify_rows_bits(const char *name)
{
	fx f;
	fx_open(&f, name, 64);
	make_prompt(f.V);
	const int n = 6;
	cr_assert_eq(sg_session_eval(f.s, prompt, 16, NULL), SG_OK);
	sm_check_verify_rows(f.s, prompt + 16, n, name);
	cr_assert_eq(sg_session_truncate(f.s, 16), SG_OK);
	sm_check_greedy_rows(f.s, prompt + 16, n, name);
	fx_close(&f);
}

Test(spec, verify_rows_are_the_bits_of_decode_steps)
{
	verify_rows_bits("llama_mlx_q4_g32");
	verify_rows_bits("qwen3_mlx_q8_g64");
	verify_rows_bits("qwen3_moe");
	verify_rows_bits("qwen3_next");
	verify_rows_bits("qwen3_5_moe_text");
	verify_rows_bits("gemma3_text");
	verify_rows_bits("gemma4_text");
}

/* Verify steps one decode step per token (SARAGOSSA_SPEC_STEPWISE, the path of a backend without
 * match_decode: CUDA) give the rows of the batched verify step, bit for bit, and roll back alike. */
static void stepwise_rows_bits(const char *name)
{
	fx f;
	fx_open(&f, name, 64);
	make_prompt(f.V);
	int V = f.V, n = 6;
	float *a = malloc(sizeof(float) * (size_t)V * (size_t)n), *b = malloc(sizeof(float) * (size_t)V * (size_t)n);
	cr_assert_eq(sg_session_eval(f.s, prompt, 12, NULL), SG_OK);
	cr_assert_eq(sg_session_mark(f.s), SG_OK);
	cr_assert_eq(sg_session_eval_exact(f.s, prompt + 12, n, a), SG_OK);
	cr_assert_eq(sg_session_truncate(f.s, 12), SG_OK);
	cr_assert_eq(sg_session_eval_stepwise(f.s, prompt + 12, n, b), SG_OK);
	cr_assert_eq(sg_session_position(f.s), 12 + n);
	cr_assert(!memcmp(a, b, sizeof(float) * (size_t)V * (size_t)n), "%s: stepwise rows differ", name);
	free(a);
	free(b);
	fx_close(&f);
}

Test(spec, stepwise_verify_rows_are_the_batched_rows)
{
	stepwise_rows_bits("qwen3");
	stepwise_rows_bits("qwen3_next");
	stepwise_rows_bits("qwen3_moe");
}

/* The logits buffer grows with the steps that need more rows (at least 32, then powers of two): a
 * step of 40 rows after one of 6 still gives every row, each the bits of a decode step. */
Test(spec, verify_rows_after_the_logits_buffer_grew_again_are_the_stepwise_rows)
{
	fx f;
	fx_open(&f, "qwen3", 128);
	enum { N = 40 };
	int V = f.V;
	int32_t tok[4 + N];
	for (int i = 0; i < 4 + N; i++) tok[i] = (int32_t)((i * 11 + 3) % V);
	float *a = malloc(sizeof(float) * (size_t)V * N), *b = malloc(sizeof(float) * (size_t)V * N);
	cr_assert_eq(sg_session_eval(f.s, tok, 4, NULL), SG_OK);
	cr_assert_eq(sg_session_eval_exact(f.s, tok + 4, 6, a), SG_OK);
	cr_assert_eq(sg_session_truncate(f.s, 4), SG_OK);
	cr_assert_eq(sg_session_eval_exact(f.s, tok + 4, N, a), SG_OK, "%s", sg_last_error());
	cr_assert_eq(sg_session_truncate(f.s, 4), SG_OK);
	cr_assert_eq(sg_session_eval_stepwise(f.s, tok + 4, N, b), SG_OK);
	for (int i = 0; i < N; i++)
		cr_assert(!memcmp(a + (size_t)i * V, b + (size_t)i * V, sizeof(float) * (size_t)V), "row %d differs", i);
	free(a);
	free(b);
	fx_close(&f);
}

/* A hybrid session rolls back to any position after its mark, and not before it. */
Test(spec, hybrid_truncate_needs_a_mark_and_restores_the_state_exactly)
{
	fx f;
	fx_open(&f, "qwen3_next", 64);
	make_prompt(f.V);
	int V = f.V;
	float *ref = malloc(sizeof(float) * (size_t)V);
	cr_assert_eq(sg_session_eval(f.s, prompt, 10, NULL), SG_OK);
	cr_assert_eq(sg_session_truncate(f.s, 8), SG_ERR_UNSUPPORTED, "no mark yet");
	cr_assert_eq(sg_session_mark(f.s), SG_OK);
	cr_assert_eq(sg_session_eval(f.s, prompt + 10, 1, NULL), SG_OK);
	memcpy(ref, sg_session_logits(f.s), sizeof(float) * (size_t)V);
	cr_assert_eq(sg_session_eval_exact(f.s, prompt + 11, 5, NULL), SG_OK);
	cr_assert_eq(sg_session_truncate(f.s, 9), SG_ERR_UNSUPPORTED, "before the mark");
	cr_assert_eq(sg_session_truncate(f.s, 10), SG_OK, "%s", sg_last_error());
	cr_assert_eq(sg_session_position(f.s), 10);
	cr_assert_eq(sg_session_eval(f.s, prompt + 10, 1, NULL), SG_OK);
	cr_assert(!memcmp(ref, sg_session_logits(f.s), sizeof(float) * (size_t)V), "the state after the roll-back differs");
	free(ref);
	fx_close(&f);
}

/* Stop strings and constraints hold with speculation on: the same answer, finish and text. */
static sg_status odd_mask(void *self, float *logits, int32_t n)
{
	(void)self;
	for (int32_t i = 0; i < n; i += 2) logits[i] = -INFINITY;
	return SG_OK;
}
static sg_status no_accept(void *self, int32_t tok)
{
	(void)self;
	cr_assert(tok % 2 == 1, "a forbidden token %d was accepted", tok);
	return SG_OK;
}
static void no_reset(void *self) { (void)self; }

Test(spec, stop_strings_and_constraints_hold_with_speculation)
{
	fx f;
	fx_open(&f, "qwen3", 128);
	make_prompt(f.V);
	sg_gen_constraint odd = {NULL, odd_mask, no_accept, no_reset};
	run plain, r;
	/* constrained: only odd ids */
	sg_gen_params p = params(&plain, 30, 0, 1);
	p.constraint = &odd;
	gen(&f, &p, &plain);
	int32_t truth[128];
	memcpy(truth, prompt, n_prompt * sizeof(int32_t));
	memcpy(truth + n_prompt, plain.tok, (size_t)plain.n * sizeof(int32_t));
	/* guesses that the constraint forbids (even ids) are rejected */
	oracle o = {{NULL, "oracle", oracle_draft, NULL, NULL}, truth, n_prompt + (size_t)plain.n, 1, f.V, 0};
	o.ops.self = &o;
	p = params(&r, 30, 0, 1);
	p.constraint = &odd;
	p.drafter = &o.ops;
	p.draft_max = 4;
	gen(&f, &p, &r);
	same_answer(&plain, &r, "constrained");
	/* sampled with a draft model's sampled guesses (rejection sampling), which know nothing of
	 * the constraint: a forbidden guess has p = 0 and is never kept (no_accept checks) */
	{
		sg_session *dss = NULL;
		sg_session_params dsp = sg_session_default_params();
		dsp.n_ctx = 128;
		cr_assert_eq(sg_session_new(f.m, &dsp, &dss), SG_OK);
		sg_drafter *dmo = NULL;
		cr_assert_eq(sg_drafter_model(dss, f.V, &dmo), SG_OK);
		p = params(&r, 30, 0.9f, 5);
		p.constraint = &odd;
		p.drafter = sg_drafter_ops(dmo);
		p.draft_max = 4;
		sg_gen_result rr = gen(&f, &p, &r);
		cr_assert_eq(r.n, 30);
		cr_assert_gt(rr.n_drafted, 0);
		cr_assert_lt(rr.n_accepted, rr.n_drafted, "even guesses were kept");
		sg_drafter_free(dmo);
		sg_session_free(dss);
	}
	/* a stop string: the text of the 5th answer token */
	p = params(&plain, 30, 0, 1);
	gen(&f, &p, &plain);
	char stop[32];
	snprintf(stop, sizeof stop, "<%d>", plain.tok[4]);
	const char *stops[] = {stop};
	p = params(&plain, 30, 0, 1);
	p.stop = stops;
	p.n_stop = 1;
	sg_gen_result a = gen(&f, &p, &plain);
	memcpy(truth + n_prompt, plain.tok, (size_t)plain.n * sizeof(int32_t));
	sg_drafter *ng = NULL;
	cr_assert_eq(sg_drafter_ngram(1, 3, &ng), SG_OK);
	const sg_gen_drafter *ds[2] = {&o.ops, sg_drafter_ops(ng)};
	o.right = -1;
	for (int i = 0; i < 2; i++) {
		p = params(&r, 30, 0, 1);
		p.stop = stops;
		p.n_stop = 1;
		p.drafter = ds[i];
		p.draft_max = 8;
		sg_gen_result b = gen(&f, &p, &r);
		same_answer(&plain, &r, "stop string");
		cr_assert_eq(a.finish, b.finish);
		cr_assert_eq(b.finish, SG_GEN_STOP);
		cr_assert_eq(a.stop_index, b.stop_index);
	}
	sg_drafter_free(ng);
	fx_close(&f);
}

/* The context bound ends a speculative answer where it ends a plain one. */
Test(spec, full_context_ends_at_the_same_token)
{
	fx f;
	fx_open(&f, "qwen3", 40);
	make_prompt(f.V);
	run plain, r;
	sg_gen_params p = params(&plain, 60, 0, 1);
	sg_gen_result a = gen(&f, &p, &plain);
	cr_assert_eq(a.finish, SG_GEN_LENGTH);
	sg_session *ds = NULL;
	sg_session_params sp = sg_session_default_params();
	sp.n_ctx = 40;
	cr_assert_eq(sg_session_new(f.m, &sp, &ds), SG_OK);
	sg_drafter *dm = NULL;
	cr_assert_eq(sg_drafter_model(ds, f.V, &dm), SG_OK);
	p = params(&r, 60, 0, 1);
	p.drafter = sg_drafter_ops(dm);
	p.draft_max = 7;
	sg_gen_result b = gen(&f, &p, &r);
	same_answer(&plain, &r, "full context");
	cr_assert_eq(b.finish, SG_GEN_LENGTH);
	sg_drafter_free(dm);
	sg_session_free(ds);
	fx_close(&f);
}

Test(spec, ngram_drafter_continues_the_latest_longest_match)
{
	sg_drafter *d = NULL;
	cr_assert_eq(sg_drafter_ngram(1, 3, &d), SG_OK);
	const sg_gen_drafter *o = sg_drafter_ops(d);
	/* "1 2 3 4 5 | 9 2 3 7 | 1 2 3": the 3-gram 1 2 3 matches at 0 (-> 4 5 9), over the later 2 3 7 */
	int32_t h[] = {1, 2, 3, 4, 5, 9, 2, 3, 7, 1, 2, 3};
	int32_t out[8], n = -1;
	cr_assert_eq(o->draft(o->self, h, 12, 3, out, &n), SG_OK);
	cr_assert_eq(n, 3);
	cr_assert(out[0] == 4 && out[1] == 5 && out[2] == 9);
	/* only a 1-gram: the latest occurrence of 3 (followed by 7 1 2 3) */
	int32_t h2[] = {3, 8, 3, 7, 1, 2, 6, 3};
	cr_assert_eq(o->draft(o->self, h2, 8, 8, out, &n), SG_OK);
	cr_assert_eq(n, 5);
	cr_assert(out[0] == 7 && out[4] == 3);
	/* nothing to match */
	int32_t h3[] = {1, 2, 3};
	cr_assert_eq(o->draft(o->self, h3, 3, 4, out, &n), SG_OK);
	cr_assert_eq(n, 0);
	sg_drafter_free(d);
	cr_assert_eq(sg_drafter_ngram(0, 3, &d), SG_ERR_INVALID_ARG);
	cr_assert_eq(sg_drafter_ngram(4, 3, &d), SG_ERR_INVALID_ARG);
	cr_assert_eq(sg_drafter_ngram(1, 65, &d), SG_ERR_INVALID_ARG);
}

Test(spec, bad_draft_lengths_are_refused)
{
	fx f;
	fx_open(&f, "qwen3", 64);
	make_prompt(f.V);
	sg_drafter *d = NULL;
	cr_assert_eq(sg_drafter_ngram(1, 3, &d), SG_OK);
	run r;
	sg_gen_params p = params(&r, 4, 0, 1);
	p.drafter = sg_drafter_ops(d);
	p.draft_max = 0;
	sg_gen_result res;
	cr_assert_eq(sg_generate(&f.st, &detok, &p, &res), SG_ERR_INVALID_ARG);
	p.draft_max = 4;
	p.draft_min = 5;
	cr_assert_eq(sg_generate(&f.st, &detok, &p, &res), SG_ERR_INVALID_ARG);
	sg_drafter_free(d);
	fx_close(&f);
}
