/*
 * The generic transformer forward: one implementation for every decoder family, driven by the
 * model description. The caller (a session) owns the state it runs on: the KV cache of every
 * layer and the activation buffers of one chunk, all backend tensors.
 */
#ifndef SG_MODELS_FORWARD_H
#define SG_MODELS_FORWARD_H

#include "models/forward_state.h"
#include "models/model.h"


/* Allocates the state for contexts of n_ctx tokens, chunks of `chunk` tokens and a cache of
 * kv_type (F32 or F16). Free with sg_fwd_state_free. */
sg_status sg_fwd_state_init(const sg_model *m, int n_ctx, int chunk, sg_type kv_type, sg_fwd_state *s);
void sg_fwd_state_free(const sg_model *m, sg_fwd_state *s);

/* Which logits a chunk computes: none (a prompt chunk before the last), the last token's (at
 * row 0 of s->logits), or every token's (rows 0..n-1). */
typedef enum { SG_LOGITS_NONE = 0, SG_LOGITS_LAST, SG_LOGITS_ALL } sg_logits_mode;

/* Runs n (1..chunk) tokens at positions pos0..pos0+n-1 (pos0 + n <= n_ctx; the caller checked
 * the ids against the vocabulary), writing their K/V into the caches and the logits `mode` asks
 * for into s->logits. */
sg_status sg_forward(const sg_model *m, sg_fwd_state *s, const int32_t *tokens, int n, int pos0, sg_logits_mode mode);

/* Runs n (1..chunk) rows of input embeddings embd [n][dim] (host memory) at positions pos0..
 * through the layers (K/V into the caches), then the logits `mode` asks for as sg_forward does
 * (the model's head; SG_ERR_INVALID_ARG without one); with SG_LOGITS_NONE or SG_LOGITS_LAST the
 * last row's final-normed hidden state is left in row 0 of s->xb. Speech models whose inputs are
 * sums of several embeddings (Qwen3-TTS) run their decoders through it. Not for hybrid stacks. */
sg_status sg_forward_embd(const sg_model *m, sg_fwd_state *s, const float *embd, int n, int pos0, sg_logits_mode mode);

/* The final-normed hidden state of the last of n tokens (positions 0..n-1, n <= s->n_ctx, run in
 * chunks of s->chunk, no logits) into out [dim] (host memory): a decoder used as an embedder
 * (last-token pooling). The state's caches are overwritten from position 0; hybrid stacks (whose
 * recurrent state carries over) are SG_ERR_UNSUPPORTED. */
sg_status sg_forward_hidden_last(const sg_model *m, sg_fwd_state *s, const int32_t *tokens, int n, float *out);

/* One decode step: token at position pos (pos < n_ctx, the id checked by the caller), its K/V
 * into the caches, its logits in row 0 of s->logits and their argmax (lowest id on ties) in
 * s->amax; nothing is read back. On the CUDA backend with SARAGOSSA_CUDA_GRAPHS on and a layer
 * stack whose launches do not depend on the position (ring caches, if any, of one size; hybrid
 * layers with SARAGOSSA_CUDA_GRAPHS_HYBRID=1, without Gemma 4's per-layer inputs, past position 0),
 * the step is recorded once as a graph and replayed for every later token: only the token id
 * and position are copied to the device before the replay. A step after the backend's scratch
 * moved (a longer prefill in between) runs per-op and records the graph again. */
sg_status sg_forward_decode(const sg_model *m, sg_fwd_state *s, int32_t token, int pos);
/* An exact step (the backend's match_decode on): sg_forward of n tokens with every position's
 * logits. Where decode steps are recorded (sg_fwd_decode_graphs; not hybrid or MTP stacks) and
 * SARAGOSSA_VERIFY_GRAPHS is on, a step of 2..SG_FWD_VERIFY_GRAPHS - 1 tokens is recorded once per
 * token count and replayed after: the per-op launches of a step of small models cost more host
 * time than the GPU spends on them. The ids and positions are copied before each replay. */
sg_status sg_forward_exact(const sg_model *m, sg_fwd_state *s, const int32_t *tokens, int n, int pos0);
/* The argmax (lowest id on ties, NaN never wins) of each of the first n rows of logits the last
 * step of every position's logits left, into ids[n]: only the ids are read back. */
sg_status sg_forward_rows_argmax(const sg_model *m, sg_fwd_state *s, int n, int32_t *ids);
/* sg_forward_decode ending in sampling candidates instead of the argmax: the step's logits go
 * through the backend's top_candidates (k largest, and the logits at ids[0..m), -1 for none)
 * into s->tc_out; nothing is read back. The step is recorded and replayed like the greedy one,
 * as its own graph, kept while k and m stay the same. SG_ERR_UNSUPPORTED where the backend has no
 * top_candidates. */
sg_status sg_forward_decode_top(const sg_model *m, sg_fwd_state *s, int32_t token, int pos, int k, const int32_t *ids,
				int mids);
/* ---- multi-token prediction (forward_mtp.c; models with m->has_mtp) ----
 *
 * The MTP module at position p reads the final-normed hidden state of the token at p and the
 * embedding of the token at p + 1, and predicts the token at p + 2:
 *   z = fc([norm_emb(embed(next)) | norm_hid(hidden)]); z = mtp layer(z) (its own KV cache, at p);
 *   out = norm(z); logits = out Wout. */

/* The final-normed hidden states of the last chunk's n rows (its residual stream, still in s->x
 * after sg_forward) into out [n][D] (host). */
sg_status sg_forward_hidden_rows(const sg_model *m, sg_fwd_state *s, int n, float *out);
/* Runs the MTP module on n (1..chunk) rows at positions pos0.. (pos0 + n <= n_ctx): next [n] the
 * tokens after them, hidden [n][D] their hidden states (host). Writes the normed outputs into
 * out [n][D] and, when logits is not NULL, the last row's logits into logits [V] (host). The main
 * stack's chunk buffers are overwritten (its KV caches are not). */
sg_status sg_forward_mtp(const sg_model *m, sg_fwd_state *s, const int32_t *next, const float *hidden, int n, int pos0,
			 float *out, float *logits);

/* 1 if sg_forward_decode on this state replays a recorded step (a backend that captures, its
 * flag on, eligible layers): the session routes single-token steps through it. */
int sg_fwd_decode_graphs(const sg_model *m, const sg_fwd_state *s);

#endif
