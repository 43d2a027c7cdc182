/*
 * Sessions: the state of one conversation on one model (KV cache, position, token history) and
 * its snapshots at token boundaries. The public calls are in include/saragossa.h; this header
 * holds what the engine's other modules (prefix cache, generation loop) may look into.
 */
#ifndef SG_ENGINE_SESSION_H
#define SG_ENGINE_SESSION_H

#include "models/forward.h"
#include "saragossa.h"

struct sg_session {
	sg_model *m;
	sg_fwd_state fs;    /* KV caches and chunk buffers */
	int n_ctx, n_batch;
	int n_past;         /* tokens evaluated = position of the next one */
	int32_t *tokens;    /* [n_ctx] history */
	float *last;        /* [n_vocab] logits of the last token */
	int has_last;
	int dev_last;       /* n_past at which s->fs.logits row dev_row holds the unread logits of a greedy step (0 = none) */
	int dev_row;
	int32_t *tc_host;   /* [tc_cap] a candidate step's read-back words */
	size_t tc_cap;
	/* the recurrent state at position mark_pos (sg_session_mark), for a truncate back to it or
	 * past it; mark_pos -1: none */
	void *mark;         /* [mark_cap] bytes: conv then delta-rule state of every linear layer */
	size_t mark_cap;
	int mark_pos;
	/* multi-token prediction (session_mtp.c), on after sg_session_mtp_enable: every eval runs
	 * the MTP module over its rows, so that its KV cache follows the history */
	int mtp;
	float *mtp_rows;    /* [n_batch][D] hidden states of the last evaluated chunk */
	int mtp_rows_pos0, mtp_rows_n;
	float *mtp_h;       /* [D] hidden state of position mtp_h_pos (-1: none), the next row's input */
	int mtp_h_pos;
	float *mtp_in, *mtp_out; /* [n_batch + 1][D] scratch */
	int32_t *mtp_next;  /* [n_batch + 1] */
	float *mtp_logits;  /* [n_vocab] */
};

/* ---- multi-token prediction (session_mtp.c) ----
 *
 * A model with an MTP module (Qwen3-Next / Qwen3.5 mtp.* tensors) drafts the tokens after the
 * history from the last hidden state. Its KV cache is kept in step by every sg_session_eval (the
 * module runs over the chunk's rows); positions reached another way (a greedy device step, a
 * restored snapshot) leave it behind, which makes guesses worse, never answers different. */

/* Turns the module on (SG_ERR_UNSUPPORTED when the model has none) or off. */
sg_status sg_session_mtp_enable(sg_session *s, int on);
int sg_session_has_mtp(const sg_session *s);
/* Up to max guesses of the tokens after `token`, which is to be evaluated at the session's
 * position (the history's next token): greedy (the module's argmax, lowest id on ties), each fed
 * back with the module's output. *n_out 0 when the module has no hidden state of the last
 * position. logits (may be NULL): [max][n_vocab], each guess's logits. */
sg_status sg_session_mtp_draft(sg_session *s, int32_t token, int max, int32_t *out, int *n_out, float *logits);
/* The session's hooks: after a chunk of tokens at pos0 was evaluated (s->fs.x holds its rows),
 * and after the position moved otherwise (truncate, reset, restore). */
sg_status sg_session_mtp_after_eval(sg_session *s, const int32_t *tokens, int n, int pos0);
void sg_session_mtp_moved(sg_session *s);
/* After the history changed (reset, restore): no hidden state is known. */
void sg_session_mtp_forget(sg_session *s);
void sg_session_mtp_free(sg_session *s);

/* 1 when sg_session_eval_exact can run on this session's backend: its match_decode op (the CPU,
 * CUDA), or, on a backend without one, SARAGOSSA_SPEC_STEPWISE: the tokens then run one decode
 * step each (exact, but the weights are read once per token: not faster than decoding them). */
int sg_session_can_verify(const sg_session *s);
/* 1 when verify steps run token by token (SARAGOSSA_SPEC_STEPWISE on a backend without
 * match_decode). */
int sg_session_verify_stepwise(const sg_session *s);
/* sg_session_eval_exact token by token: one decode step each (the backend's one-token path, a
 * replayed graph where it records one), each row of logits_out (may be NULL) the bits of a decode
 * step by construction. */
sg_status sg_session_eval_stepwise(sg_session *s, const int32_t *tokens, int n, float *logits_out);
/* Evaluates tokens[0..n) and writes the logits of every position into logits_out[n][n_vocab],
 * each row bit for bit what n one-token decode steps would give (the speculative verify step:
 * the weights are still read once for the whole chunk). SG_ERR_UNSUPPORTED where the backend
 * cannot promise those bits (sg_session_can_verify 0); other errors as sg_session_eval's. */
sg_status sg_session_eval_exact(sg_session *s, const int32_t *tokens, int n, float *logits_out);
/* sg_session_eval_exact for greedy decoding: only each position's argmax (lowest id on ties, NaN
 * never wins: the greedy sampler's choice) comes back, into ids[n], found where the logits are (on
 * a GPU, n ids cross instead of n rows of logits). The last position's logits stay on the device
 * as after sg_session_decode_greedy (sg_session_fetch_logits). Where the backend has no argmax op,
 * an MTP module is on or n exceeds a chunk, the rows come back and the argmax is taken here. */
sg_status sg_session_eval_exact_greedy(sg_session *s, const int32_t *tokens, int n, int32_t *ids);
/* Remembers the recurrent state at the current position (no-op without recurrent state), so
 * that a later sg_session_truncate to any position at or after it succeeds: the state is
 * restored there and the tokens up to the kept position are evaluated again, exactly. The mark
 * is forgotten by a reset, a restore or a truncate before it. */
sg_status sg_session_mark(sg_session *s);

/* Greedy decode of one token: evaluates `token` at the session's position and stores the argmax
 * of its logits (lowest id on ties) in *next, reading back only that id (on CUDA with graphs on,
 * the whole step is one graph replay). The logits stay on the device: sg_session_logits returns
 * NULL until sg_session_fetch_logits copies them. */
sg_status sg_session_decode_greedy(sg_session *s, int32_t token, int32_t *next);
/* Decode of one token whose next token is drawn from sampling candidates (sg_sampler_top_request):
 * evaluates `token` and reads back only the k largest logits (top_ids, top_v [k], any order) and
 * the logits at ids[0..m) (v [m]; -1 ids give NaN), all in one transfer; on CUDA with graphs on
 * the step is one graph replay. The logits stay on the device as after sg_session_decode_greedy.
 * SG_ERR_UNSUPPORTED where the backend cannot (sg_session_top_max = 0). */
sg_status sg_session_decode_top(sg_session *s, int32_t token, int k, const int32_t *ids, int m, int32_t *top_ids,
				float *top_v, float *v);
/* The largest k sg_session_decode_top takes on this session's backend (0: none; the CPU samples
 * from its logits where they are). */
int sg_session_top_max(const sg_session *s);
/* Copies the last decode step's logits from the device after sg_session_decode_greedy (no-op when
 * they are already on the host). */
sg_status sg_session_fetch_logits(sg_session *s);

/* 1 if the session carries recurrent state (linear-attention conv and delta-rule states): such a
 * session cannot be moved back to an earlier position by lowering n_past, only restored from a
 * snapshot or reset. */
int sg_session_has_recurrent_state(const sg_session *s);
/* 1 when the forward gives bit-identical state whatever the prefill chunking, decode steps
 * included: attention-only layers on the CPU, with the one-token kernels for every chunk
 * (SARAGOSSA_CPU_GEMM=0) or with the blocked GEMM where every weight's type has a GEMM that sums
 * like the one-token kernel (sg_session_gemm_matches_gemv). Only then may a caller reuse state
 * that was built in other pieces than a cold run would use and promise identical output. */
int sg_session_chunk_invariant(const sg_session *s);
/* 1 if the CPU's blocked GEMM over weights of `type` gives, for every token, the bits of the
 * one-token kernel (GEMV): today the float types (F32, F16, BF16). The one place a type is
 * switched on once its GEMM is made bit-identical. */
int sg_session_gemm_matches_gemv(sg_type type);

#endif
