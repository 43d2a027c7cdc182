/* sg_generate's model over a sg_session, bound as engine/lm.c binds a model (without a tokenizer), for
 * the tests of the generation loop and its drafters: each call checks that the loop's position is the
 * session's. And a detokenizer whose pieces are empty, for tests that read ids. */
#ifndef SG_TEST_SESSION_MODEL_H
#define SG_TEST_SESSION_MODEL_H

#include <criterion/criterion.h>
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

/* s as sg_generate's model; greedy: with the one-token greedy step (eval_greedy) too. */
static inline sg_gen_model session_model(sg_session *s, int32_t n_vocab, int32_t n_ctx, int greedy)
{
	return (sg_gen_model){.self = s, .n_vocab = n_vocab, .n_ctx = n_ctx, .eval = sm_eval, .truncate = sm_truncate,
			      .reset = sm_reset, .eval_greedy = greedy ? sm_greedy : NULL, .eval_rows = sm_rows, .mark = sm_mark};
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
