/* The hybrid layer path (gated delta net linear attention, gated full attention, shared experts,
 * Gemma 4's shared K/V and per-layer inputs): the part of the generic forward that only some
 * descriptions need. forward.c calls it; it uses forward_state.h's state and helpers, nothing of
 * forward.c. */
#ifndef SG_MODELS_FORWARD_HYBRID_H
#define SG_MODELS_FORWARD_HYBRID_H

#include "models/forward_state.h"

/* Hybrid / Gemma 4 part of the state (called by sg_fwd_state_init / _free). */
sg_status sg_fwd_hybrid_init(const sg_model *m, sg_fwd_state *s);
void sg_fwd_hybrid_free(const sg_model *m, sg_fwd_state *s);
/* 1 if the description needs the hybrid layer path (linear attention, output gate, shared K/V,
 * k = v, per-layer inputs, shared expert, MoE beside a dense MLP, layer scalars). */
int sg_fwd_is_hybrid(const sg_model *m);
/* Runs every layer of a chunk whose embeddings are in s->x (tokens: the chunk's ids). */
sg_status sg_fwd_hybrid_layers(const sg_model *m, sg_fwd_state *s, const int32_t *tokens, int n, int pos0);
/* Runs one attention layer li (its attention and MLP blocks) on the chunk in s->x: the MTP layer. */
sg_status sg_fwd_hybrid_attn_layer(const sg_model *m, sg_fwd_state *s, int li, int n);

#endif
