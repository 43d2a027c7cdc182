/*
 * The generic transformer forward: one implementation for every decoder family, driven by the
 * model description. The caller (a session) owns the state it runs on: the KV cache of every
 * layer and the activation buffers of one chunk, all backend tensors.
 */
#ifndef SG_MODELS_FORWARD_H
#define SG_MODELS_FORWARD_H

#include "models/model.h"

/* One layer's KV cache. A sliding-window layer whose window plus a chunk is shorter than the
 * context keeps a ring of that many rows (position p in row p % rows). */
typedef struct sg_kv_layer {
	sg_btensor k, v; /* [rows][Hkv][hd] F32 or F16 */
	int rows;
	int ring;        /* 1: rows < n_ctx, positions wrap */
} sg_kv_layer;

/* State of the forward for one session: caches and the buffers of one chunk of up to `chunk`
 * tokens. Buffers are sized once for the widest layer. */
typedef struct sg_fwd_state {
	int n_ctx, chunk;
	sg_type kv_type;
	sg_kv_layer *kv;        /* [n_layer] */
	sg_btensor ids, pos;    /* I32 [chunk] */
	sg_btensor ring_rows;   /* I32 [chunk]: pos % rows of the ring layers */
	int ring_rows_of;       /* the ring size ring_rows was computed for (0 = none) */
	int pos0;               /* position of the chunk running now */
	sg_btensor x, xb;       /* [chunk][D] residual stream, normed / projected */
	sg_btensor q, k, v;     /* [chunk][H*hd], [chunk][Hkv*hd] x2 */
	sg_btensor att;         /* [chunk][H*hd] */
	sg_btensor g, u;        /* [chunk][F] (MoE: [chunk][k][F]) */
	sg_btensor rl;          /* MoE router logits [chunk][E] */
	sg_btensor eids, ew;    /* MoE I32 [chunk][k], F32 [chunk][k] */
	sg_btensor ey;          /* MoE [chunk][k][D] */
	sg_btensor logits;      /* [1][V], grown to [chunk][V] when every position's logits are wanted */
} sg_fwd_state;

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

#endif
