/*
 * Gemma 4 text (gemma4_text and the text part of gemma4 / gemma4_unified). The description
 * carries per-layer head dims and K/V heads, proportional partial rope on full layers, K/V
 * sharing (kv_source), k = v on full layers, the scale-free v norm, plain-weight norms, query
 * scale 1, the double-wide MLP of shared layers and the final softcap.
 *
 * Its own here: the tensor names; the MoE block (router with its own norm scale and a
 * per-expert output scale, experts with a fused gate_up projection (MLX: gate and up apart),
 * three extra norms), which runs beside the dense MLP; the per-layer inputs (a packed [V][n_layer * P] embedding table,
 * a model-wide projection and norm, a gate, projection and norm in every layer); the layer
 * scalar that multiplies each layer's output.
 */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "models/model.h"

static const sg_name_pair names[] = {
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
	{"blk.{L}.pre_ffw_norm_2", "model.layers.{L}.pre_feedforward_layernorm_2"},
	{"blk.{L}.post_ffw_norm_1", "model.layers.{L}.post_feedforward_layernorm_1"},
	{"blk.{L}.post_ffw_norm_2", "model.layers.{L}.post_feedforward_layernorm_2"},
	{"blk.{L}.ffn_gate", "model.layers.{L}.mlp.gate_proj"},
	{"blk.{L}.ffn_up", "model.layers.{L}.mlp.up_proj"},
	{"blk.{L}.ffn_down", "model.layers.{L}.mlp.down_proj"},
	{"blk.{L}.ffn_gate_inp", "model.layers.{L}.router.proj"},
	{"blk.{L}.ffn_gate_inp_scale", "model.layers.{L}.router.scale"},
	{"blk.{L}.ffn_expert_scale", "model.layers.{L}.router.per_expert_scale"},
	{"blk.{L}.ffn_experts", "model.layers.{L}.experts"},
	/* MLX (mlx_lm, mlx_vlm) splits gate_up_proj into experts.switch_glu.{gate,up,down}_proj */
	{"blk.{L}.ffn_gate_exps", "model.layers.{L}.experts.switch_glu.gate_proj"},
	{"blk.{L}.ffn_up_exps", "model.layers.{L}.experts.switch_glu.up_proj"},
	{"blk.{L}.ffn_down_exps", "model.layers.{L}.experts.switch_glu.down_proj"},
	{"blk.{L}.layer_scalar", "model.layers.{L}.layer_scalar"},
	{"blk.{L}.inp_gate", "model.layers.{L}.per_layer_input_gate"},
	{"blk.{L}.proj", "model.layers.{L}.per_layer_projection"},
	{"blk.{L}.post_norm", "model.layers.{L}.post_per_layer_input_norm"},
	{"per_layer_token_embd", "model.embed_tokens_per_layer"},
	{"per_layer_model_proj", "model.per_layer_model_projection"},
	{"per_layer_proj_norm", "model.per_layer_projection_norm"},
	{0, 0},
};

static sg_status adjust(sg_model *m)
{
	sg_status st = sg_model_hybrid_prepare(m);
	if (st) return st;
	int L = m->desc.n_layer;
	m->hy.layer_scalar = sg_calloc((size_t)L, sizeof(float));
	if (!m->hy.layer_scalar) return sg_error(SG_ERR_NOMEM, "model: %d layers", L);
	for (int i = 0; i < L; i++) m->hy.layer_scalar[i] = 1.0f;
	return SG_OK;
}

/* The experts: Hugging Face's fused gate_up_proj is bound in place (the forward runs it fused);
 * MLX's separate switch_glu stacks as any family's. */
static sg_status experts(sg_model *m, int layer, sg_layer_weights *lw)
{
	return sg_model_bind_experts(m, layer, lw, &m->hy.layers[layer].gate_up_exps);
}

/* The layer scalar: one value read once (it multiplies the residual stream on the host side). */
static sg_status layer_scalar(sg_model *m, int i)
{
	char name[64];
	snprintf(name, sizeof(name), "blk.%d.layer_scalar", i);
	const sg_tensor *t = sg_weights_lookup(m->w, names, name);
	if (!t) return SG_OK;
	if (sg_tensor_nelem(t) != 1 || (t->type != SG_TYPE_F32 && t->type != SG_TYPE_F16 && t->type != SG_TYPE_BF16))
		return sg_error(SG_ERR_FORMAT, "%s: expected one F32/F16/BF16 value, found %s with %lld values", name,
				sg_type_name(t->type), (long long)sg_tensor_nelem(t));
	sg_dequantize_ref(t->type, t->data, &m->hy.layer_scalar[i], 1);
	return SG_OK;
}

static sg_status per_layer_tables(sg_model *m)
{
	const sg_model_desc *d = &m->desc;
	int64_t D = d->dim, P = d->per_layer_input_dim, L = d->n_layer;
	sg_want ws[] = {
		{"per_layer_token_embd.weight", SG_WANT_MATMUL, 2, {L * P, -1}, 0, SG_WANT_ROWS_SPLIT, &m->hy.pl_embd_full}, /* viewed as [V*L][P] below */
		{"per_layer_model_proj.weight", SG_WANT_MATMUL, 2, {D, L * P}, 0, 0, &m->hy.pl_model_proj},
		{"per_layer_proj_norm.weight", SG_WANT_FLOAT, 1, {P}, 0, 1, &m->hy.pl_proj_norm},
	};
	sg_status st = sg_model_bind_wants(m, ws, 3, -1);
	if (st) return st;
	/* an embedding reads one row per token, not the table: not a decode cost */
	const sg_tensor *t = sg_weights_lookup(m->w, names, "per_layer_token_embd.weight");
	m->weight_bytes -= t->nbytes;
	/* view the [V][L*P] table as [V*L][P]: row id*L + layer is that layer's slice */
	sg_btensor v = m->hy.pl_embd_full;
	int block_ok = v.layout <= 0 && (v.type == SG_TYPE_F32 || v.type == SG_TYPE_F16 || v.type == SG_TYPE_BF16 ||
					 (v.type == SG_TYPE_MLX_AFFINE && v.mlx.group > 0 && P % v.mlx.group == 0));
	if (!block_ok || v.row_bytes % (size_t)L)
		return sg_error(SG_ERR_UNSUPPORTED, "per_layer_token_embd.weight: type %s cannot be split into %lld rows of %lld",
				sg_type_name(v.type), (long long)L, (long long)P);
	m->hy.pl_vocab = sg_btensor_rows(&v);
	v.ne[0] = P;
	v.ne[1] = m->hy.pl_vocab * L;
	v.ne[2] = v.ne[3] = 1;
	v.row_bytes /= (size_t)L;
	v.owned = 0;
	m->hy.pl_embd = v;
	return SG_OK;
}

static sg_status bind_extra(sg_model *m)
{
	const sg_model_desc *d = &m->desc;
	int64_t D = d->dim, E = d->n_expert, P = d->per_layer_input_dim;
	sg_status st = SG_OK;
	for (int i = 0; i < d->n_layer && !st; i++) {
		sg_hybrid_layer *hl = &m->hy.layers[i];
		st = layer_scalar(m, i);
		if (!st && d->layers[i].moe) {
			sg_want ws[] = {
				{"blk.{L}.ffn_gate_inp_scale", SG_WANT_FLOAT, 1, {D}, 0, 1, &hl->router_scale},
				{"blk.{L}.ffn_expert_scale", SG_WANT_FLOAT, 1, {E}, 0, 1, &hl->expert_scale},
				{"blk.{L}.pre_ffw_norm_2.weight", SG_WANT_FLOAT, 1, {D}, 0, 1, &hl->pre_ffn_norm2},
				{"blk.{L}.post_ffw_norm_1.weight", SG_WANT_FLOAT, 1, {D}, 0, 1, &hl->post_ffn_norm1},
				{"blk.{L}.post_ffw_norm_2.weight", SG_WANT_FLOAT, 1, {D}, 0, 1, &hl->post_ffn_norm2},
			};
			st = sg_model_bind_wants(m, ws, 5, i);
		}
		if (!st && P > 0) {
			sg_want ws[] = {
				{"blk.{L}.inp_gate.weight", SG_WANT_MATMUL, 2, {D, P}, 0, 0, &hl->pl_gate},
				{"blk.{L}.proj.weight", SG_WANT_MATMUL, 2, {P, D}, 0, 0, &hl->pl_proj},
				{"blk.{L}.post_norm.weight", SG_WANT_FLOAT, 1, {D}, 0, 1, &hl->pl_norm},
			};
			st = sg_model_bind_wants(m, ws, 3, i);
		}
	}
	if (!st && P > 0) st = per_layer_tables(m);
	return st;
}

static const sg_arch archs[] = {SG_ARCH_GEMMA4, 0};

const sg_family sg_family_gemma4 = {
	.name = "gemma4",
	.archs = archs,
	.names = names,
	.adjust = adjust,
	.experts = experts,
	.bind_extra = bind_extra,
};
