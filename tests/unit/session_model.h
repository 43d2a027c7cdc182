/* sg_generate's model over a sg_session, bound as engine/lm.c binds a model (without a tokenizer), for
 * the tests of the generation loop and its drafters: each call checks that the loop's position is the
 * session's. And a detokenizer whose pieces are empty, for tests that read ids. */
#ifndef SG_TEST_SESSION_MODEL_H
#define SG_TEST_SESSION_MODEL_H

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "engine/generate.h"
#include "engine/session.h"

static inline sg_status sm_eval(void *self, const int32_t *t, size_t n, size_t n_past, float *logits)
{
	sg_session *s = self;
	cr_assert_eq((size_t)sg_session_position(s), n_past);
	sg_status st = sg_session_eval(s, t, (int)n, NULL);
	if (!st) memcpy(logits, sg_session_logits(s), sizeof(float) * (size_t)sg_session_n_vocab(s));
	return st;
}

static inline sg_status sm_greedy(void *self, int32_t t, size_t n_past, int32_t *next)
{
	cr_assert_eq((size_t)sg_session_position(self), n_past);
	return sg_session_decode_greedy(self, t, next);
}

static inline sg_status sm_rows(void *self, const int32_t *t, size_t n, size_t n_past, float *logits)
{
	cr_assert_eq((size_t)sg_session_position(self), n_past);
	return sg_session_eval_exact(self, t, (int)n, logits);
}

static inline sg_status sm_rows_greedy(void *self, const int32_t *t, size_t n, size_t n_past, int32_t *ids)
{
	cr_assert_eq((size_t)sg_session_position(self), n_past);
	return sg_session_eval_exact_greedy(self, t, (int)n, ids);
}

/* The greedy sampler's choice in a row of logits: the largest, the lowest id on ties, NaN never. */
static inline int32_t sm_argmax(const float *x, int V)
{
	int32_t b = -1;
	for (int i = 0; i < V; i++)
		if (x[i] == x[i] && (b < 0 || x[i] > x[b])) b = i;
	return b;
}

/* An exact step of toks[0..n) at the session's position p (after a mark there) gives every row the
 * bits of a decode step: the rows against one-token evals after a truncate back to p. Leaves the
 * session at p + n. */
static inline void sm_check_verify_rows(sg_session *s, const int32_t *toks, int n, const char *name)
{
	int p = sg_session_position(s), V = sg_session_n_vocab(s);
	float *rows = malloc(sizeof(float) * (size_t)V * (size_t)n);
	cr_assert_eq(sg_session_mark(s), SG_OK);
	cr_assert_eq(sg_session_eval_exact(s, toks, n, rows), SG_OK, "%s", sg_last_error());
	cr_assert_eq(sg_session_truncate(s, p), SG_OK, "%s", sg_last_error());
	for (int t = 0; t < n; t++) {
		cr_assert_eq(sg_session_eval(s, toks + t, 1, NULL), SG_OK, "%s", sg_last_error());
		cr_expect(!memcmp(rows + (size_t)t * V, sg_session_logits(s), sizeof(float) * (size_t)V), "%s: row %d differs from its decode step",
			  name, t);
	}
	free(rows);
}

/* sg_session_eval_exact_greedy after a mark at the session's position p: the ids are the argmaxes
 * of sg_session_eval_exact's rows, and the last row's logits are still there to fetch. Leaves the
 * session at p + n. */
static inline void sm_check_greedy_rows(sg_session *s, const int32_t *toks, int n, const char *name)
{
	int p = sg_session_position(s), V = sg_session_n_vocab(s);
	float *rows = malloc(sizeof(float) * (size_t)V * (size_t)n);
	int32_t ids[64];
	cr_assert(n <= 64);
	cr_assert_eq(sg_session_mark(s), SG_OK);
	cr_assert_eq(sg_session_eval_exact(s, toks, n, rows), SG_OK, "%s", sg_last_error());
	cr_assert_eq(sg_session_truncate(s, p), SG_OK, "%s", sg_last_error());
	cr_assert_eq(sg_session_eval_exact_greedy(s, toks, n, ids), SG_OK, "%s", sg_last_error());
	cr_assert_eq(sg_session_position(s), p + n);
	for (int t = 0; t < n; t++) cr_assert_eq(ids[t], sm_argmax(rows + (size_t)t * V, V), "%s: row %d's argmax", name, t);
	cr_assert_eq(sg_session_fetch_logits(s), SG_OK, "%s", sg_last_error());
	cr_assert(!memcmp(sg_session_logits(s), rows + (size_t)(n - 1) * V, sizeof(float) * (size_t)V), "%s: the last row left to fetch", name);
	free(rows);
}

static inline sg_status sm_mark(void *self, size_t n_past)
{
	cr_assert_eq((size_t)sg_session_position(self), n_past);
	return sg_session_mark(self);
}

static inline sg_status sm_truncate(void *self, size_t keep) { return sg_session_truncate(self, (int)keep); }

static inline sg_status sm_reset(void *self)
{
	sg_session_reset(self);
	return SG_OK;
}

/* s as sg_generate's model; greedy: with the one-token greedy step (eval_greedy) and the verify
 * step's argmaxes (eval_rows_greedy) too. */
static inline sg_gen_model session_model(sg_session *s, int32_t n_vocab, int32_t n_ctx, int greedy)
{
	return (sg_gen_model){.self = s, .n_vocab = n_vocab, .n_ctx = n_ctx, .eval = sm_eval, .truncate = sm_truncate,
			      .reset = sm_reset, .eval_greedy = greedy ? sm_greedy : NULL, .eval_rows = sm_rows,
			      .eval_rows_greedy = greedy ? sm_rows_greedy : NULL, .mark = sm_mark};
}

static inline sg_status sm_push(void *self, int32_t tok, const char **piece, size_t *len)
{
	(void)self;
	(void)tok;
	*piece = "";
	*len = 0;
	return SG_OK;
}

static inline sg_status sm_flush(void *self, const char **piece, size_t *len) { return sm_push(self, 0, piece, len); }

static inline void sm_detok_reset(void *self) { (void)self; }

static inline const sg_gen_detok *silent_detok(void)
{
	static const sg_gen_detok d = {NULL, sm_push, sm_flush, sm_detok_reset};
	return &d;
}

#endif
