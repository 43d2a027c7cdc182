/* The state the generic forward runs on (one session's caches and chunk buffers) and the small
 * helpers its two halves share: forward.c (every family) and forward_hybrid.c (the hybrid layer
 * path) both build on this header, and neither on the other's code. */
#ifndef SG_MODELS_FORWARD_STATE_H
#define SG_MODELS_FORWARD_STATE_H

#include "models/model.h"

/* One layer's KV cache. A sliding-window layer whose window plus a chunk is shorter than the
 * context keeps a ring of that many rows (position p in row p % rows). */
/* Exact (verify) steps of 2 .. SG_FWD_VERIFY_GRAPHS - 1 tokens keep a recorded graph each. */
#define SG_FWD_VERIFY_GRAPHS 33

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
	sg_btensor amax;        /* I32 [1]: the decode step's argmax (greedy next token) */
	sg_btensor amax_rows;   /* I32 [chunk]: a verify step's rows' argmaxes (allocated when first asked for) */
	sg_backend_graph *graph; /* the recorded one-token decode step (backends that capture), or NULL */
	sg_btensor tc_ids;      /* I32 [tc_m]: tokens whose logits a candidate step also reads back */
	sg_btensor tc_out;      /* I32 [2 tc_k + tc_m]: its candidates (top_candidates' layout) */
	int tc_k, tc_m;         /* the candidate step's shape (0 = none allocated) */
	sg_backend_graph *graph_tc; /* the recorded step ending in those candidates, or NULL */
	int graph_off;          /* 1: recording failed once; this state stays on the per-op path */
	sg_backend_graph *graph_v[SG_FWD_VERIFY_GRAPHS]; /* [n]: the recorded exact step of n tokens, or NULL */
	int graph_v_uses[SG_FWD_VERIFY_GRAPHS]; /* [n]: exact steps of n tokens run op by op so far (SARAGOSSA_VERIFY_GRAPHS) */
	int graph_v_off;        /* 1: recording an exact step failed once; they stay per-op */
	int exact;              /* 1 while the session runs an exact step (sg_forward_exact) */
	int capture, capture_hybrid; /* the backend's caps when the state was made: decode steps (of
	                             * hybrid stacks) may be recorded (read once, not every step) */
	/* hybrid and Gemma 4 (forward_hybrid.c); empty for other families */
	int hybrid;             /* 1: layers run through sg_fwd_hybrid_layers */
	sg_btensor *conv, *ssm; /* [n_layer] linear layers: conv state [K-1][C], delta state [Hv][dk][dv] */
	sg_btensor lqkv, lconv; /* [chunk][C] projections, after the short conv */
	sg_btensor lz, lo;      /* [chunk][Vd] output gate, delta-rule output */
	sg_btensor la, lb;      /* [chunk][Hv] */
	sg_btensor raw, raw2;   /* [chunk][widest fused projection] before gather_cols */
	sg_btensor gate;        /* [chunk][H*hd] attention output gate */
	sg_btensor sh, shg;     /* [chunk][D] shared expert / second branch, [chunk][1] its gate */
	sg_btensor x0;          /* [chunk][D] scaled embeddings (per-layer inputs) */
	sg_btensor pl, pl2;     /* [chunk][P] per-layer input, its gate */
	sg_btensor pl_ids;      /* I32 [n_layer][chunk]: id * n_layer + layer rows of the per-layer table */
	sg_btensor gu;          /* [chunk][k][2F] fused expert gate_up outputs */
	sg_btensor h2;          /* [chunk][D] Gemma 4 experts' input */
	sg_btensor mtp_in;      /* [chunk][2D] the MTP layer's projection input (models with one) */
} sg_fwd_state;

/* Small helpers of the forward passes (forward.c, forward_hybrid.c). */
#define SG_FWD_OK(call)                                                                            \
	do {                                                                                       \
		sg_status st_ = (call);                                                            \
		if (st_) return st_;                                                               \
	} while (0)

/* A 2-D view [rows][cols] of the start of a plain (4-byte element) buffer. */
static inline sg_btensor sg_fwd_view2(const sg_btensor *t, int64_t cols, int64_t rows)
{
	sg_btensor v = *t;
	v.ne[0] = cols;
	v.ne[1] = rows;
	v.ne[2] = v.ne[3] = 1;
	v.row_bytes = (size_t)cols * 4;
	v.owned = 0;
	return v;
}

static inline sg_status sg_fwd_alloc2(sg_backend *be, sg_type type, int64_t cols, int64_t rows, sg_btensor *out)
{
	int64_t ne[4] = {cols, rows, 1, 1};
	return be->ops->tensor_alloc(be, type, ne, out);
}

/* An optional weight: NULL when absent (no data). */
static inline const sg_btensor *sg_fwd_opt(const sg_btensor *t) { return t->data ? t : NULL; }

/* The RoPE of layer l as the backend op takes it. */
static inline sg_rope_params sg_fwd_rope(const sg_model *m, const sg_layer_desc *l)
{
	return (sg_rope_params){
		.head_dim = (int)l->head_dim,
		.n_rot = l->n_rot,
		.neox = m->rope_neox,
		.theta = l->rope.theta,
		.scaling = l->rope.scaling,
		.factor = l->rope.factor,
		.orig_ctx = l->rope.orig_ctx,
		.beta_fast = l->rope.beta_fast,
		.beta_slow = l->rope.beta_slow,
		.attn_factor = l->rope.attn_factor,
		.low_freq_factor = l->rope.low_freq_factor,
		.high_freq_factor = l->rope.high_freq_factor,
	};
}

#endif
