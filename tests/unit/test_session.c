/*
 * Sessions on the tiny reference fixtures (tests/fixtures, run from the repository root):
 * snapshot/restore at a token boundary gives back exactly the logits of an uninterrupted run,
 * a ring-buffer (sliding-window) cache survives a restore, bad input leaves the session as it
 * was, and the public accessors say what was evaluated.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "base/flags.h"
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

/* Snapshots in host memory (SARAGOSSA_SNAPSHOT_RESIDENT=0) take the read/write path instead of
 * the backend's copy op: the same logits. */
Test(session, snapshot_in_host_memory_restores_the_same)
{
	setenv("SARAGOSSA_SNAPSHOT_RESIDENT", "0", 1);
	sg_flags_reload();
	snapshot_roundtrip("llama", 4);
	snapshot_roundtrip("gemma3_text", 2);
	unsetenv("SARAGOSSA_SNAPSHOT_RESIDENT");
	sg_flags_reload();
}

/* The backend's copy op (what resident snapshots use) moves the bytes asked for and refuses a
 * range past either tensor; a session on the CPU keeps its snapshots in host memory. */
Test(session, backend_copy_moves_bytes_and_refuses_ranges_past_a_tensor)
{
	sg_backend *be = NULL;
	cr_assert_eq(sg_cpu_backend_create(NULL, &be), SG_OK, "%s", sg_last_error());
	int64_t ne[4] = {8, 1, 1, 1};
	sg_btensor a, b;
	cr_assert_eq(be->ops->tensor_alloc(be, SG_TYPE_I32, ne, &a), SG_OK);
	cr_assert_eq(be->ops->tensor_alloc(be, SG_TYPE_I32, ne, &b), SG_OK);
	int32_t v[8] = {1, 2, 3, 4, 5, 6, 7, 8}, got[8];
	cr_assert_eq(be->ops->write(be, &a, 0, v, sizeof(v)), SG_OK);
	cr_assert_eq(be->ops->copy(be, &a, 8, &b, 4, 12), SG_OK, "%s", sg_last_error());
	cr_assert_eq(be->ops->read(be, &b, 0, got, sizeof(got)), SG_OK);
	cr_expect(got[0] == 0 && got[1] == 3 && got[2] == 4 && got[3] == 5 && got[4] == 0, "copy moved the wrong bytes");
	cr_expect_eq(be->ops->copy(be, &a, 24, &b, 0, 12), SG_ERR_RANGE);
	cr_expect_eq(be->ops->copy(be, &a, 0, &b, 28, 8), SG_ERR_RANGE);
	cr_expect_eq(be->ops->copy(be, &a, (size_t)-1, &b, 0, 2), SG_ERR_RANGE);
	be->ops->tensor_free(be, &a);
	be->ops->tensor_free(be, &b);
	sg_backend_free(be);
	sg_model *m = load("llama");
	sg_session *s = session(m, 32, 4);
	cr_expect_eq(sg_session_snapshots_on_device(s), 0);
	sg_session_free(s);
	sg_model_free(m);
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

/* A backend without sampling candidates (the CPU: its sampler reads the logits where they are)
 * says so, and a candidate step asked of it is refused before anything moves. */
Test(session, candidate_steps_are_refused_where_the_backend_has_none)
{
	sg_model *m = load("qwen3");
	sg_session *s = session(m, 64, 8);
	cr_assert_eq(sg_session_eval(s, prompt, 3, NULL), SG_OK, "%s", sg_last_error());
	cr_assert_eq(sg_session_top_max(s), 0);
	int32_t tid[4], ids[1] = {1};
	float tv[4], gv[1];
	cr_assert_eq(sg_session_decode_top(s, prompt[3], 4, ids, 1, tid, tv, gv), SG_ERR_UNSUPPORTED);
	cr_assert_eq(sg_session_decode_top(s, -1, 4, ids, 1, tid, tv, gv), SG_ERR_RANGE);
	cr_assert_eq(sg_session_position(s), 3);
	cr_assert_not_null(sg_session_logits(s), "the last step's logits are still there");
	sg_session_free(s);
	sg_model_free(m);
}
