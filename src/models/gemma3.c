/*
 * Gemma 3 text: the description carries the (1 + w) norms, sqrt(dim) embedding scale, qk-norm,
 * query_pre_attn_scalar, local/global layers with their two rope thetas, GeGLU, tied embeddings
 * and the softcaps. Its own here: the names of the four norms around attention and MLP, which
 * differ from Llama's (Gemma's post_attention_layernorm follows attention; the MLP has
 * pre_feedforward_layernorm). GGUF files keep the neox row order.
 */
#include "models/model.h"

static const sg_name_pair gemma3_names[] = {
	{"token_embd", "model.embed_tokens"},
	{"output_norm", "model.norm"},
	{"output", "lm_head"},
	{"blk.{L}.attn_norm", "model.layers.{L}.input_layernorm"},
	{"blk.{L}.attn_q", "model.layers.{L}.self_attn.q_proj"},
	{"blk.{L}.attn_k", "model.layers.{L}.self_attn.k_proj"},
	{"blk.{L}.attn_v", "model.layers.{L}.self_attn.v_proj"},
	{"blk.{L}.attn_output", "model.layers.{L}.self_attn.o_proj"},
	{"blk.{L}.attn_q_norm", "model.layers.{L}.self_attn.q_norm"},
	{"blk.{L}.attn_k_norm", "model.layers.{L}.self_attn.k_norm"},
	{"blk.{L}.post_attention_norm", "model.layers.{L}.post_attention_layernorm"},
	{"blk.{L}.ffn_norm", "model.layers.{L}.pre_feedforward_layernorm"},
	{"blk.{L}.post_ffw_norm", "model.layers.{L}.post_feedforward_layernorm"},
	{"blk.{L}.ffn_gate", "model.layers.{L}.mlp.gate_proj"},
	{"blk.{L}.ffn_up", "model.layers.{L}.mlp.up_proj"},
	{"blk.{L}.ffn_down", "model.layers.{L}.mlp.down_proj"},
	{0, 0},
};

static const sg_arch gemma3_archs[] = {SG_ARCH_GEMMA3, 0};

const sg_family sg_family_gemma3 = {
	.name = "gemma3",
	.archs = gemma3_archs,
	.names = gemma3_names,
	.adjust = NULL,
	.experts = NULL,
};
