/* The generation loop against a scripted model: the model's greedy next token is (last + 1) mod
 * V, and token i detokenizes to piece[i]. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/flags.h"
#include "engine/generate.h"

#define V 16

typedef struct fake {
	size_t n_past;        /* what the model holds */
	size_t evaluated;     /* tokens evaluated in all */
	size_t truncated_to;  /* last truncate argument, (size_t)-1 if none */
	int resets;
	int can_truncate;
	useconds_t delay_us;  /* per eval */
	atomic_int *cancel_at_eval; /* set when eval count reaches cancel_after */
	int cancel_after, evals;
	int greedy_evals; /* of them through eval_greedy */
	int top_evals;    /* of them through eval_top */
} fake;

static sg_status fake_eval(void *self, const int32_t *t, size_t n, size_t n_past, float *logits)
{
	fake *f = self;
	cr_assert_eq(n_past, f->n_past, "eval at %zu but the model holds %zu", n_past, f->n_past);
	if (f->delay_us) usleep(f->delay_us);
	f->n_past += n;
	f->evaluated += n;
	f->evals++;
	if (f->cancel_at_eval && f->evals == f->cancel_after) atomic_store(f->cancel_at_eval, 1);
	int32_t next = (t[n - 1] + 1) % V;
	for (int i = 0; i < V; i++) logits[i] = i == next ? 10.0f : 0.0f;
	return SG_OK;
}

/* The same model's greedy step: only the id of the largest logit comes back. */
static sg_status fake_eval_greedy(void *self, int32_t t, size_t n_past, int32_t *next)
{
	fake *f = self;
	cr_assert_eq(n_past, f->n_past, "greedy eval at %zu but the model holds %zu", n_past, f->n_past);
	f->n_past++;
	f->evaluated++;
	f->evals++;
	f->greedy_evals++;
	*next = (t + 1) % V;
	return SG_OK;
}

/* The same model's candidate step: its logits' k largest (ties to the lower id) and the logits
 * at ids. */
static sg_status fake_eval_top(void *self, int32_t t, size_t n_past, int32_t k, const int32_t *ids, int32_t m,
			       int32_t *tid, float *tv, float *v)
{
	fake *f = self;
	float l[V];
	int taken[V] = {0};
	sg_status s = fake_eval(self, &t, 1, n_past, l);
	f->top_evals++;
	for (int32_t j = 0; j < k; j++) {
		int best = -1;
		for (int i = 0; i < V; i++)
			if (!taken[i] && (best < 0 || l[i] > l[best])) best = i;
		taken[best] = 1;
		tid[k - 1 - j] = best, tv[k - 1 - j] = l[best];
	}
	for (int32_t i = 0; i < m; i++) v[i] = ids[i] >= 0 ? l[ids[i]] : NAN;
	return s;
}

static sg_status fake_truncate(void *self, size_t keep)
{
	fake *f = self;
	if (!f->can_truncate) return SG_ERR_UNSUPPORTED;
	f->truncated_to = keep;
	f->n_past = keep;
	return SG_OK;
}

static sg_status fake_reset(void *self)
{
	fake *f = self;
	f->n_past = 0;
	f->resets++;
	return SG_OK;
}

/* Pieces: token i -> pieces[i]. 4..6 spell "He" "l" "lo"; 9 and 10 are the two halves of "é". */
static const char *pieces[V] = {"a", "b", "c", "d", "He", "l", "lo", " w", "orld", "\xc3", "\xa9", "!", "x", "y", "z", "<eos>"};

typedef struct detok {
	char buf[8];
	size_t held;
	char out[16];
} detok;

/* Holds back an incomplete UTF-8 lead byte, like the real streaming detokenizer. */
static sg_status dt_push(void *self, int32_t tok, const char **piece, size_t *len)
{
	detok *d = self;
	const char *p = pieces[tok];
	size_t n = strlen(p);
	if (n == 1 && (unsigned char)p[0] >= 0xc0) {
		d->buf[0] = p[0];
		d->held = 1;
		*piece = "";
		*len = 0;
		return SG_OK;
	}
	memcpy(d->out, d->buf, d->held);
	memcpy(d->out + d->held, p, n);
	*len = d->held + n;
	d->held = 0;
	*piece = d->out;
	return SG_OK;
}

static sg_status dt_flush(void *self, const char **piece, size_t *len)
{
	detok *d = self;
	*piece = d->buf;
	*len = d->held;
	d->held = 0;
	return SG_OK;
}

static void dt_reset(void *self)
{
	((detok *)self)->held = 0;
}

typedef struct collect {
	char text[512];
	size_t len;
	int tokens, finals;
	int stop_after; /* callback asks to stop after this many tokens (0: never) */
} collect;

static int on_event(const sg_gen_event *ev, void *user)
{
	collect *c = user;
	cr_assert(c->len + ev->len < sizeof c->text);
	memcpy(c->text + c->len, ev->text, ev->len);
	c->len += ev->len;
	c->text[c->len] = 0;
	if (ev->has_token) c->tokens++;
	if (ev->is_final) c->finals++;
	return c->stop_after && c->tokens >= c->stop_after;
}

typedef struct rig {
	fake f;
	sg_gen_model m;
	detok d;
	sg_gen_detok dt;
	sg_gen_state st;
	collect c;
	sg_gen_params p;
} rig;

static void rig_init(rig *r, int n_ctx)
{
	memset(r, 0, sizeof *r);
	r->f.truncated_to = (size_t)-1;
	r->f.can_truncate = 1;
	r->m = (sg_gen_model){.self = &r->f, .n_vocab = V, .n_ctx = n_ctx, .eval = fake_eval,
			      .truncate = fake_truncate, .reset = fake_reset};
	r->dt = (sg_gen_detok){.self = &r->d, .push = dt_push, .flush = dt_flush, .reset = dt_reset};
	sg_gen_state_init(&r->st, &r->m);
	r->p = sg_gen_default_params();
	r->p.sampler.temperature = 0;
	r->p.on_event = on_event;
	r->p.user = &r->c;
}

Test(generate, greedy_runs_to_max_tokens_and_reports_length)
{
	rig r;
	rig_init(&r, 64);
	int32_t prompt[] = {0};
	r.p.prompt = prompt;
	r.p.n_prompt = 1;
	r.p.max_tokens = 3;
	sg_gen_result res;
	cr_assert_eq(sg_generate(&r.st, &r.dt, &r.p, &res), SG_OK, "%s", sg_last_error());
	cr_assert_str_eq(r.c.text, "bcd");
	cr_assert_eq(res.finish, SG_GEN_LENGTH);
	cr_assert_eq(res.n_generated, 3);
	cr_assert_eq(r.c.finals, 1);
	/* The last sampled token is not evaluated: the state holds the prompt and 2 tokens. */
	cr_assert_eq(r.st.n, 3);
	cr_assert_eq(r.f.n_past, 3);
	sg_gen_state_free(&r.st);
}

/* With eval_greedy and plain greedy sampling, decode steps hand back only the argmax: same text
 * and state as the logits path; any sampler setting that needs the logits (a penalty, a bias,
 * log-probabilities, temperature) or the kill-switch keeps the logits path. */
Test(generate, plain_greedy_decodes_through_eval_greedy_and_nothing_else_does)
{
	for (int mode = 0; mode < 6; mode++) {
		rig r;
		rig_init(&r, 64);
		r.m.eval_greedy = fake_eval_greedy;
		sg_logit_bias bias = {3, 0.5f};
		if (mode == 1) r.p.sampler.repetition_penalty = 1.1f;
		if (mode == 2) r.p.sampler.logit_bias = &bias, r.p.sampler.n_logit_bias = 1;
		if (mode == 3) r.p.sampler.logprobs = 1;
		if (mode == 4) r.p.sampler.temperature = 0.5f, r.p.sampler.top_k = 1;
		if (mode == 5) setenv("SARAGOSSA_GREEDY_IN_BACKEND", "0", 1);
		sg_flags_reload();
		int32_t prompt[] = {0, 1};
		r.p.prompt = prompt;
		r.p.n_prompt = 2;
		r.p.max_tokens = 5;
		sg_gen_result res;
		cr_assert_eq(sg_generate(&r.st, &r.dt, &r.p, &res), SG_OK, "%s", sg_last_error());
		unsetenv("SARAGOSSA_GREEDY_IN_BACKEND");
		sg_flags_reload();
		cr_expect_str_eq(r.c.text, "cdHello", "mode %d", mode);
		cr_expect_eq(r.st.n, 6, "mode %d", mode);
		cr_expect_eq(r.f.n_past, 6, "mode %d", mode);
		cr_expect_eq(r.f.greedy_evals, mode == 0 ? 4 : 0, "mode %d: %d greedy steps", mode, r.f.greedy_evals);
		sg_gen_state_free(&r.st);
	}
}

Test(generate, stop_string_spanning_pieces_is_cut_and_not_emitted)
{
	rig r;
	rig_init(&r, 64);
	int32_t prompt[] = {3}; /* -> He l lo " w" ... */
	const char *stops[] = {"llo w"};
	r.p.prompt = prompt;
	r.p.n_prompt = 1;
	r.p.max_tokens = 10;
	r.p.stop = stops;
	r.p.n_stop = 1;
	sg_gen_result res;
	cr_assert_eq(sg_generate(&r.st, &r.dt, &r.p, &res), SG_OK, "%s", sg_last_error());
	cr_assert_str_eq(r.c.text, "He");
	cr_assert_eq(res.finish, SG_GEN_STOP);
	cr_assert_eq(res.stop_index, 0);
	cr_assert_eq(res.n_generated, 4);
	sg_gen_state_free(&r.st);
}

Test(generate, eos_stops_without_its_text_and_split_utf8_arrives_whole)
{
	rig r;
	rig_init(&r, 64);
	int32_t prompt[] = {8}; /* -> 9 (\xc3) 10 (\xa9) 11 "!" 12 ... */
	int32_t eos[] = {12};
	r.p.prompt = prompt;
	r.p.n_prompt = 1;
	r.p.max_tokens = 10;
	r.p.eos_ids = eos;
	r.p.n_eos = 1;
	sg_gen_result res;
	cr_assert_eq(sg_generate(&r.st, &r.dt, &r.p, &res), SG_OK, "%s", sg_last_error());
	cr_assert_str_eq(r.c.text, "\xc3\xa9!");
	cr_assert_eq(res.finish, SG_GEN_STOP);
	cr_assert_eq(res.n_generated, 4);
	sg_gen_state_free(&r.st);
}

Test(generate, callback_stop_cancels_within_one_token_and_keeps_state_consistent)
{
	rig r;
	rig_init(&r, 64);
	int32_t prompt[] = {0, 1};
	r.p.prompt = prompt;
	r.p.n_prompt = 2;
	r.p.max_tokens = 10;
	r.c.stop_after = 3;
	sg_gen_result res;
	cr_assert_eq(sg_generate(&r.st, &r.dt, &r.p, &res), SG_OK, "%s", sg_last_error());
	cr_assert_eq(res.finish, SG_GEN_CANCELLED);
	cr_assert_eq(res.n_generated, 3);
	cr_assert_eq(r.st.n, r.f.n_past);
	cr_assert_eq(r.st.n, 4); /* 2 prompt + 2 evaluated */
	int32_t want[] = {0, 1, 2, 3};
	cr_assert_arr_eq(r.st.tokens, want, sizeof want);
	sg_gen_state_free(&r.st);
}

typedef struct flip {
	atomic_int *flag;
	useconds_t after;
} flip;

static void *flip_later(void *arg)
{
	flip *fl = arg;
	usleep(fl->after);
	atomic_store(fl->flag, 1);
	return NULL;
}

Test(generate, cancel_flag_from_another_thread_stops_the_loop)
{
	rig r;
	rig_init(&r, 100000);
	atomic_int cancel = 0;
	int32_t prompt[] = {0};
	r.p.prompt = prompt;
	r.p.n_prompt = 1;
	r.p.max_tokens = 50000;
	r.p.cancel = &cancel;
	r.f.delay_us = 200;
	flip fl = {&cancel, 20000};
	pthread_t th;
	pthread_create(&th, NULL, flip_later, &fl);
	sg_gen_result res;
	cr_assert_eq(sg_generate(&r.st, &r.dt, &r.p, &res), SG_OK, "%s", sg_last_error());
	pthread_join(th, NULL);
	cr_assert_eq(res.finish, SG_GEN_CANCELLED);
	cr_assert_lt(res.n_generated, 50000);
	cr_assert_eq(r.st.n, r.f.n_past);
	sg_gen_state_free(&r.st);
}

Test(generate, flag_set_during_an_eval_stops_before_the_next_token)
{
	rig r;
	rig_init(&r, 64);
	atomic_int cancel = 0;
	int32_t prompt[] = {0};
	r.p.prompt = prompt;
	r.p.n_prompt = 1;
	r.p.max_tokens = 20;
	r.p.cancel = &cancel;
	r.f.cancel_at_eval = &cancel;
	r.f.cancel_after = 3; /* prefill + 2 decode evals */
	sg_gen_result res;
	cr_assert_eq(sg_generate(&r.st, &r.dt, &r.p, &res), SG_OK, "%s", sg_last_error());
	cr_assert_eq(res.finish, SG_GEN_CANCELLED);
	cr_assert_eq(res.n_generated, 2, "sampled %zu tokens after the flag", res.n_generated);
	sg_gen_state_free(&r.st);
}

Test(generate, follow_up_turn_prefills_only_the_new_tokens)
{
	rig r;
	rig_init(&r, 64);
	int32_t p1[] = {0, 5};
	r.p.prompt = p1;
	r.p.n_prompt = 2;
	r.p.max_tokens = 3; /* samples 6 7 8; evaluates 6 7 */
	sg_gen_result res;
	cr_assert_eq(sg_generate(&r.st, &r.dt, &r.p, &res), SG_OK);
	cr_assert_eq(res.n_cached, 0);
	size_t before = r.f.evaluated;
	int32_t p2[] = {0, 5, 6, 7, 8, 1, 2};
	r.p.prompt = p2;
	r.p.n_prompt = 7;
	cr_assert_eq(sg_generate(&r.st, &r.dt, &r.p, &res), SG_OK);
	cr_assert_eq(res.n_cached, 4);
	cr_assert_eq(r.f.evaluated - before, 3 + 2, "prefill 3 new tokens, then 2 decode evals");
	cr_assert_eq(r.f.resets, 0);
	sg_gen_state_free(&r.st);
}

Test(generate, diverging_prompt_rolls_back_to_the_common_prefix)
{
	rig r;
	rig_init(&r, 64);
	int32_t p1[] = {0, 1, 2, 3, 4};
	r.p.prompt = p1;
	r.p.n_prompt = 5;
	r.p.max_tokens = 1;
	sg_gen_result res;
	cr_assert_eq(sg_generate(&r.st, &r.dt, &r.p, &res), SG_OK);
	int32_t p2[] = {0, 1, 9, 9};
	r.p.prompt = p2;
	r.p.n_prompt = 4;
	cr_assert_eq(sg_generate(&r.st, &r.dt, &r.p, &res), SG_OK);
	cr_assert_eq(r.f.truncated_to, 2);
	cr_assert_eq(res.n_cached, 2);
	/* The same prompt again: all but the last token reused (its logits are needed). */
	cr_assert_eq(sg_generate(&r.st, &r.dt, &r.p, &res), SG_OK);
	cr_assert_eq(res.n_cached, 3);
	sg_gen_state_free(&r.st);
}

Test(generate, model_without_truncate_restarts_on_divergence)
{
	rig r;
	rig_init(&r, 64);
	r.f.can_truncate = 0;
	int32_t p1[] = {0, 1, 2};
	r.p.prompt = p1;
	r.p.n_prompt = 3;
	r.p.max_tokens = 1;
	sg_gen_result res;
	cr_assert_eq(sg_generate(&r.st, &r.dt, &r.p, &res), SG_OK);
	int32_t p2[] = {0, 7};
	r.p.prompt = p2;
	r.p.n_prompt = 2;
	cr_assert_eq(sg_generate(&r.st, &r.dt, &r.p, &res), SG_OK);
	cr_assert_eq(r.f.resets, 1);
	cr_assert_eq(res.n_cached, 0);
	sg_gen_state_free(&r.st);
}

Test(generate, prompt_over_context_is_a_range_error_naming_both_sizes)
{
	rig r;
	rig_init(&r, 4);
	int32_t p[] = {0, 1, 2, 3};
	r.p.prompt = p;
	r.p.n_prompt = 4;
	sg_gen_result res;
	cr_assert_eq(sg_generate(&r.st, &r.dt, &r.p, &res), SG_ERR_RANGE);
	cr_assert(strstr(sg_last_error(), "4 tokens"), "%s", sg_last_error());
	cr_assert_eq(r.f.evaluated, 0);
	sg_gen_state_free(&r.st);
}

Test(generate, full_context_ends_with_length)
{
	rig r;
	rig_init(&r, 6);
	int32_t p[] = {0, 1};
	r.p.prompt = p;
	r.p.n_prompt = 2;
	r.p.max_tokens = 100;
	sg_gen_result res;
	cr_assert_eq(sg_generate(&r.st, &r.dt, &r.p, &res), SG_OK);
	cr_assert_eq(res.finish, SG_GEN_LENGTH);
	cr_assert_leq(r.f.n_past, 6);
	cr_assert_eq(res.n_generated, 4);
	sg_gen_state_free(&r.st);
}

Test(generate, token_outside_vocabulary_and_bad_sampler_params_are_refused)
{
	rig r;
	rig_init(&r, 64);
	int32_t p[] = {0, V};
	r.p.prompt = p;
	r.p.n_prompt = 2;
	sg_gen_result res;
	cr_assert_eq(sg_generate(&r.st, &r.dt, &r.p, &res), SG_ERR_RANGE);
	p[1] = 1;
	r.p.sampler.top_p = 1.5f;
	cr_assert_eq(sg_generate(&r.st, &r.dt, &r.p, &res), SG_ERR_INVALID_ARG);
	sg_gen_state_free(&r.st);
}

/* A constraint that allows only even tokens. */
static sg_status even_mask(void *self, float *logits, int32_t n)
{
	for (int32_t i = 1; i < n; i += 2) logits[i] = -__builtin_inff();
	return SG_OK;
}

static sg_status count_accept(void *self, int32_t tok)
{
	(*(int *)self)++;
	cr_assert_eq(tok % 2, 0, "token %d passed the mask", tok);
	return SG_OK;
}

Test(generate, constraint_masks_every_step_and_sees_every_token)
{
	rig r;
	rig_init(&r, 64);
	int accepted = 0;
	sg_gen_constraint c = {.self = &accepted, .mask = even_mask, .accept = count_accept};
	int32_t prompt[] = {0}; /* the model wants 1, 2, 3...: odd ones are banned */
	r.p.prompt = prompt;
	r.p.n_prompt = 1;
	r.p.max_tokens = 5;
	r.p.constraint = &c;
	sg_gen_result res;
	cr_assert_eq(sg_generate(&r.st, &r.dt, &r.p, &res), SG_OK, "%s", sg_last_error());
	cr_assert_eq(accepted, 5);
	sg_gen_state_free(&r.st);
}

/* With eval_top and a top-k sampler, decode steps hand back only candidates, and the text is the
 * one sampling the full logits gives (same seed); the kill-switch, log-probabilities and a k past
 * the model's top_max keep the logits path. */
Test(generate, top_k_sampling_decodes_through_eval_top_with_the_same_tokens)
{
	char want[512] = "";
	for (int mode = 0; mode < 5; mode++) {
		rig r;
		rig_init(&r, 64);
		if (mode != 1) r.m.eval_top = fake_eval_top, r.m.top_max = mode == 4 ? 4 : 8;
		r.p.sampler.temperature = 8.0f;
		r.p.sampler.top_k = 3;
		r.p.sampler.top_p = 1.0f;
		r.p.sampler.min_p = 0.0f;
		r.p.sampler.repetition_penalty = 1.5f;
		r.p.sampler.penalty_last_n = 2; /* k = 3 + 2 */
		r.p.sampler.seed = 42;
		if (mode == 3) r.p.sampler.logprobs = 1;
		if (mode == 2) setenv("SARAGOSSA_SAMPLE_IN_BACKEND", "0", 1);
		sg_flags_reload();
		int32_t prompt[] = {0, 1};
		r.p.prompt = prompt;
		r.p.n_prompt = 2;
		r.p.max_tokens = 12;
		sg_gen_result res;
		cr_assert_eq(sg_generate(&r.st, &r.dt, &r.p, &res), SG_OK, "%s", sg_last_error());
		unsetenv("SARAGOSSA_SAMPLE_IN_BACKEND");
		sg_flags_reload();
		if (mode == 0) {
			snprintf(want, sizeof want, "%s", r.c.text);
			cr_expect_str_neq(want, "cdHellolo worl", "the draw is not plain greedy");
		}
		cr_expect_str_eq(r.c.text, want, "mode %d", mode);
		cr_expect_eq(r.f.top_evals, mode == 0 ? (int)res.n_generated - 1 : 0, "mode %d: %d candidate steps", mode, r.f.top_evals);
		sg_gen_state_free(&r.st);
	}
}
