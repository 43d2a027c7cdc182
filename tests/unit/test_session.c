/*
 * Sessions on the tiny reference fixtures (tests/fixtures, run from the repository root):
 * snapshot/restore at a token boundary gives back exactly the logits of an uninterrupted run,
 * a ring-buffer (sliding-window) cache survives a restore, bad input leaves the session as it
 * was, and the public accessors say what was evaluated.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "engine/session.h"
#include "saragossa.h"

static const int32_t prompt[] = {5, 17, 101, 33, 250, 9, 77, 64, 3, 199, 12, 88, 41, 150, 7, 222, 31, 18};
#define N_PROMPT ((int)(sizeof(prompt) / sizeof(prompt[0])))

static sg_model *load(const char *name)
{
	char path[256];
	snprintf(path, sizeof(path), "tests/fixtures/%s", name);
	sg_model_params mp = sg_model_default_params();
	mp.n_threads = 1;
	sg_model *m = NULL;
	cr_assert_eq(sg_model_load(path, &mp, &m), SG_OK, "%s", sg_last_error());
	return m;
}

static sg_session *session(sg_model *m, int n_ctx, int n_batch)
{
	sg_session_params sp = sg_session_default_params();
	sp.n_ctx = n_ctx;
	sp.n_batch = n_batch;
	sp.kv_type = SG_KV_F32;
	sg_session *s = NULL;
	cr_assert_eq(sg_session_new(m, &sp, &s), SG_OK, "%s", sg_last_error());
	return s;
}

/* Evaluates the prompt in two parts with a snapshot between, runs on, restores, runs the second
 * part again: both runs must give bit-identical logits. */
static void snapshot_roundtrip(const char *name, int n_batch)
{
	sg_model *m = load(name);
	sg_session *s = session(m, 64, n_batch);
	int V = sg_model_n_vocab(m), cut = 7;
	cr_assert_eq(sg_session_eval(s, prompt, cut, NULL), SG_OK, "%s", sg_last_error());
	sg_snapshot *snap = NULL;
	cr_assert_eq(sg_session_snapshot(s, &snap), SG_OK, "%s", sg_last_error());
	cr_assert_eq(sg_snapshot_position(snap), cut);
	float *a = calloc((size_t)(N_PROMPT - cut) * V, sizeof(float));
	float *b = calloc((size_t)(N_PROMPT - cut) * V, sizeof(float));
	cr_assert_eq(sg_session_eval(s, prompt + cut, N_PROMPT - cut, a), SG_OK, "%s", sg_last_error());
	cr_assert_eq(sg_session_position(s), N_PROMPT);
	cr_assert_eq(sg_session_restore(s, snap), SG_OK, "%s", sg_last_error());
	cr_assert_eq(sg_session_position(s), cut);
	cr_assert_eq(sg_session_eval(s, prompt + cut, N_PROMPT - cut, b), SG_OK, "%s", sg_last_error());
	cr_assert(!memcmp(a, b, sizeof(float) * (size_t)(N_PROMPT - cut) * V), "%s: logits after restore differ", name);
	cr_assert(!memcmp(sg_session_tokens(s), prompt, sizeof(prompt)));
	sg_snapshot_free(snap);
	free(a);
	free(b);
	sg_session_free(s);
	sg_model_free(m);
}

Test(session, snapshot_restore_reproduces_the_uninterrupted_logits)
{
	snapshot_roundtrip("llama", 4);
}

Test(session, snapshot_restore_of_a_wrapped_sliding_window_ring)
{
	/* gemma3_text: window 8 and chunks of 2 give rings of 10 rows, which the 18 tokens wrap */
	snapshot_roundtrip("gemma3_text", 2);
}

Test(session, bad_tokens_and_overflow_leave_the_session_unchanged)
{
	sg_model *m = load("qwen2");
	sg_session *s = session(m, 8, 0);
	cr_assert_eq(sg_session_eval(s, prompt, 4, NULL), SG_OK);
	float before[8];
	memcpy(before, sg_session_logits(s), sizeof(before));
	int32_t bad[] = {1, sg_model_n_vocab(m)};
	cr_assert_eq(sg_session_eval(s, bad, 2, NULL), SG_ERR_RANGE);
	cr_assert_neq(strstr(sg_last_error(), "outside the vocabulary"), NULL, "%s", sg_last_error());
	cr_assert_eq(sg_session_eval(s, prompt, 5, NULL), SG_ERR_RANGE);
	cr_assert_eq(sg_session_eval(s, prompt, 0, NULL), SG_ERR_INVALID_ARG);
	cr_assert_eq(sg_session_position(s), 4);
	cr_assert(!memcmp(before, sg_session_logits(s), sizeof(before)));
	sg_session_reset(s);
	cr_assert_eq(sg_session_position(s), 0);
	cr_assert_null(sg_session_logits(s));
	sg_session_free(s);
	sg_model_free(m);
}

Test(session, unsupported_architecture_is_refused_at_load)
{
	sg_model_params mp = sg_model_default_params();
	sg_model *m = NULL;
	cr_assert_eq(sg_model_load("tests/fixtures/bert", &mp, &m), SG_ERR_UNSUPPORTED);
	cr_assert_null(m);
	cr_assert_neq(strstr(sg_last_error(), "unsupported architecture"), NULL, "%s", sg_last_error());
}
