/*
 * Qwen3-Next and Qwen3.5 / 3.6 (qwen3_next, qwen3_5_text, qwen3_5_moe_text and the text part of
 * qwen3_5 / qwen3_5_moe): linear-attention layers (gated delta net) and gated full-attention
 * layers per layer_types, zero-centred norms (1 + w), MoE with a sigmoid-gated shared expert.
 * The description carries all of it; this file binds the tensors.
 *
 * Its own: the linear-attention weights, in two layouts. Qwen3.5 keeps in_proj_qkv / z / b / a
 * apart (qkv already [q heads | k heads | v heads]); Qwen3-Next fuses them per key head
 * (in_proj_qkvz rows [q | k | v of the head's value heads | z of them] for each key head,
 * in_proj_ba [b | a] likewise), split after the matmul by gather_cols. Full attention's q_proj
 * holds [q | gate] per head in both. The routed experts bind in any of their layouts
 * (experts.c), the fused gate_up_proj of transformers 5 split into a gate and an up stack.
 */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/flags.h"
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
	{"blk.{L}.ffn_norm", "model.layers.{L}.post_attention_layernorm"},
	{"blk.{L}.ffn_gate", "model.layers.{L}.mlp.gate_proj"},
	{"blk.{L}.ffn_up", "model.layers.{L}.mlp.up_proj"},
	{"blk.{L}.ffn_down", "model.layers.{L}.mlp.down_proj"},
	{"blk.{L}.ffn_gate_inp", "model.layers.{L}.mlp.gate"},
	{"blk.{L}.ffn_gate_exps", "model.layers.{L}.mlp.switch_mlp.gate_proj"},
	{"blk.{L}.ffn_up_exps", "model.layers.{L}.mlp.switch_mlp.up_proj"},
	{"blk.{L}.ffn_down_exps", "model.layers.{L}.mlp.switch_mlp.down_proj"},
	{"blk.{L}.ffn_experts", "model.layers.{L}.mlp.experts"},
	{"blk.{L}.ffn_gate_shexp", "model.layers.{L}.mlp.shared_expert.gate_proj"},
	{"blk.{L}.ffn_up_shexp", "model.layers.{L}.mlp.shared_expert.up_proj"},
	{"blk.{L}.ffn_down_shexp", "model.layers.{L}.mlp.shared_expert.down_proj"},
	{"blk.{L}.ffn_gate_inp_shexp", "model.layers.{L}.mlp.shared_expert_gate"},
	{"blk.{L}.ssm_in_qkv", "model.layers.{L}.linear_attn.in_proj_qkv"},
	{"blk.{L}.ssm_in_z", "model.layers.{L}.linear_attn.in_proj_z"},
	{"blk.{L}.ssm_in_b", "model.layers.{L}.linear_attn.in_proj_b"},
	{"blk.{L}.ssm_in_a", "model.layers.{L}.linear_attn.in_proj_a"},
	{"blk.{L}.ssm_in_qkvz", "model.layers.{L}.linear_attn.in_proj_qkvz"},
	{"blk.{L}.ssm_in_ba", "model.layers.{L}.linear_attn.in_proj_ba"},
	{"blk.{L}.ssm_conv1d", "model.layers.{L}.linear_attn.conv1d"},
	{"blk.{L}.ssm_a", "model.layers.{L}.linear_attn.A_log"},
	{"blk.{L}.ssm_dt", "model.layers.{L}.linear_attn.dt_bias"},
	{"blk.{L}.ssm_norm", "model.layers.{L}.linear_attn.norm"},
	{"blk.{L}.ssm_out", "model.layers.{L}.linear_attn.out_proj"},
	{0, 0},
};

static sg_status bind_linear(sg_model *m, int i, sg_hybrid_layer *hl)
{
	const sg_model_desc *d = &m->desc;
	int64_t D = d->dim, Hv = d->lin_n_v_head, Vd = Hv * d->lin_v_head_dim;
	int64_t C = 2 * (int64_t)d->lin_n_k_head * d->lin_k_head_dim + Vd, K = d->lin_conv_kernel;
	char name[64];
	snprintf(name, sizeof(name), "blk.%d.ssm_in_qkvz.weight", i);
	int fused = sg_weights_lookup(m->w, names, name) != NULL;
	sg_want ws[12];
	int n = 0;
	if (fused) {
		ws[n++] = (sg_want){"blk.{L}.ssm_in_qkvz.weight", SG_WANT_MATMUL, 2, {D, C + Vd}, 0, 0, &hl->lin_qkvz};
		ws[n++] = (sg_want){"blk.{L}.ssm_in_ba.weight", SG_WANT_MATMUL, 2, {D, 2 * Hv}, 0, 0, &hl->lin_ba};
	} else {
		ws[n++] = (sg_want){"blk.{L}.ssm_in_qkv.weight", SG_WANT_MATMUL, 2, {D, C}, 0, 0, &hl->lin_qkv};
		ws[n++] = (sg_want){"blk.{L}.ssm_in_z.weight", SG_WANT_MATMUL, 2, {D, Vd}, 0, 0, &hl->lin_z};
		ws[n++] = (sg_want){"blk.{L}.ssm_in_b.weight", SG_WANT_MATMUL, 2, {D, Hv}, 0, 0, &hl->lin_b};
		ws[n++] = (sg_want){"blk.{L}.ssm_in_a.weight", SG_WANT_MATMUL, 2, {D, Hv}, 0, 0, &hl->lin_a};
	}
	/* the depthwise conv: HF [C][1][K], MLX [C][K][1]: the same C*K values in the same order */
	ws[n++] = (sg_want){"blk.{L}.ssm_conv1d.weight", SG_WANT_FLOAT, 0, {0}, 0, 1, &hl->conv_w};
	ws[n++] = (sg_want){"blk.{L}.ssm_a", SG_WANT_FLOAT, 1, {Hv}, 0, 1, &hl->a_log};
	ws[n++] = (sg_want){"blk.{L}.ssm_dt", SG_WANT_FLOAT, 1, {Hv}, 0, 1, &hl->dt_bias};
	ws[n++] = (sg_want){"blk.{L}.ssm_norm.weight", SG_WANT_FLOAT, 1, {d->lin_v_head_dim}, 0, 1, &hl->lin_norm};
	ws[n++] = (sg_want){"blk.{L}.ssm_out.weight", SG_WANT_MATMUL, 2, {Vd, D}, 0, 0, &hl->lin_out};
	sg_status st = sg_model_bind_wants(m, ws, n, i);
	if (!st && hl->conv_w.ne[0] * sg_btensor_rows(&hl->conv_w) != C * K)
		st = sg_error(SG_ERR_FORMAT, "blk.%d.ssm_conv1d.weight: %lld values, expected %lld channels x kernel %lld", i,
			      (long long)(hl->conv_w.ne[0] * sg_btensor_rows(&hl->conv_w)), (long long)C, (long long)K);
	return st;
}

/* Gather indices: the columns of q and gate in q_proj's [q | gate] per head; of qkv, z, b, a
 * in the fused per-key-head projections. */
static sg_status make_indices(sg_model *m, int any_fused)
{
	const sg_model_desc *d = &m->desc;
	sg_status st = SG_OK;
	for (int i = 0; i < d->n_layer; i++) {
		const sg_layer_desc *l = &d->layers[i];
		if (l->kind == SG_LAYER_LINEAR_ATTN || !d->attn_output_gate) continue;
		int64_t H = l->n_head, hd = l->head_dim;
		int32_t *q = sg_malloc(sizeof(int32_t) * (size_t)(2 * H * hd));
		if (!q) return sg_error(SG_ERR_NOMEM, "model: indices");
		for (int64_t h = 0; h < H; h++)
			for (int64_t c = 0; c < hd; c++) {
				q[h * hd + c] = (int32_t)(h * 2 * hd + c);
				q[H * hd + h * hd + c] = (int32_t)(h * 2 * hd + hd + c);
			}
		st = sg_model_index_tensor(m, q, H * hd, &m->hy.idx_q);
		if (!st) st = sg_model_index_tensor(m, q + H * hd, H * hd, &m->hy.idx_gate);
		sg_free(q);
		break; /* every full layer has the same heads */
	}
	if (st || !any_fused) return st;
	int64_t Hk = d->lin_n_k_head, dk = d->lin_k_head_dim, dv = d->lin_v_head_dim, r = d->lin_n_v_head / Hk;
	int64_t W = 2 * dk + 2 * r * dv, C = 2 * Hk * dk + Hk * r * dv, Vd = Hk * r * dv;
	int32_t *ix = sg_malloc(sizeof(int32_t) * (size_t)(C + Vd + 2 * Hk * r));
	if (!ix) return sg_error(SG_ERR_NOMEM, "model: indices");
	int32_t *qkv = ix, *z = ix + C, *b = z + Vd, *a = b + Hk * r;
	for (int64_t g = 0; g < Hk; g++) {
		for (int64_t c = 0; c < dk; c++) {
			qkv[g * dk + c] = (int32_t)(g * W + c);
			qkv[Hk * dk + g * dk + c] = (int32_t)(g * W + dk + c);
		}
		for (int64_t c = 0; c < r * dv; c++) {
			qkv[2 * Hk * dk + g * r * dv + c] = (int32_t)(g * W + 2 * dk + c);
			z[g * r * dv + c] = (int32_t)(g * W + 2 * dk + r * dv + c);
		}
		for (int64_t c = 0; c < r; c++) {
			b[g * r + c] = (int32_t)(g * 2 * r + c);
			a[g * r + c] = (int32_t)(g * 2 * r + r + c);
		}
	}
	st = sg_model_index_tensor(m, qkv, C, &m->hy.idx_qkv);
	if (!st) st = sg_model_index_tensor(m, z, Vd, &m->hy.idx_z);
	if (!st) st = sg_model_index_tensor(m, b, Hk * r, &m->hy.idx_b);
	if (!st) st = sg_model_index_tensor(m, a, Hk * r, &m->hy.idx_a);
	sg_free(ix);
	return st;
}

/* The MTP layer's tensors (mtp.layers.0.*) under the generic layer names (any layer number). */
static const sg_name_pair mtp_names[] = {
	{"blk.{L}.attn_norm", "mtp.layers.0.input_layernorm"},
	{"blk.{L}.attn_q", "mtp.layers.0.self_attn.q_proj"},
	{"blk.{L}.attn_k", "mtp.layers.0.self_attn.k_proj"},
	{"blk.{L}.attn_v", "mtp.layers.0.self_attn.v_proj"},
	{"blk.{L}.attn_output", "mtp.layers.0.self_attn.o_proj"},
	{"blk.{L}.attn_q_norm", "mtp.layers.0.self_attn.q_norm"},
	{"blk.{L}.attn_k_norm", "mtp.layers.0.self_attn.k_norm"},
	{"blk.{L}.ffn_norm", "mtp.layers.0.post_attention_layernorm"},
	{"blk.{L}.ffn_gate", "mtp.layers.0.mlp.gate_proj"},
	{"blk.{L}.ffn_up", "mtp.layers.0.mlp.up_proj"},
	{"blk.{L}.ffn_down", "mtp.layers.0.mlp.down_proj"},
	{"blk.{L}.ffn_gate_inp", "mtp.layers.0.mlp.gate"},
	{"blk.{L}.ffn_gate_exps", "mtp.layers.0.mlp.switch_mlp.gate_proj"},
	{"blk.{L}.ffn_up_exps", "mtp.layers.0.mlp.switch_mlp.up_proj"},
	{"blk.{L}.ffn_down_exps", "mtp.layers.0.mlp.switch_mlp.down_proj"},
	{"blk.{L}.ffn_experts", "mtp.layers.0.mlp.experts"},
	{"blk.{L}.ffn_gate_shexp", "mtp.layers.0.mlp.shared_expert.gate_proj"},
	{"blk.{L}.ffn_up_shexp", "mtp.layers.0.mlp.shared_expert.up_proj"},
	{"blk.{L}.ffn_down_shexp", "mtp.layers.0.mlp.shared_expert.down_proj"},
	{"blk.{L}.ffn_gate_inp_shexp", "mtp.layers.0.mlp.shared_expert_gate"},
	{"mtp_fc", "mtp.fc"},
	{"mtp_norm_emb", "mtp.pre_fc_norm_embedding"},
	{"mtp_norm_hid", "mtp.pre_fc_norm_hidden"},
	{"mtp_norm", "mtp.norm"},
	{0, 0},
};

/* The multi-token-prediction module where the checkpoint has one (mtp.fc.weight; the first of
 * mtp_num_hidden_layers layers): one full-attention layer at index n_layer, shaped as layer 0's
 * MLP (a mixture of experts with a shared expert, or dense), and its projection and norms. Its
 * weights do not count in weight_bytes (a decode step does not read them). */
static sg_status bind_mtp(sg_model *m, int64_t Fs)
{
	sg_model_desc *d = &m->desc;
	if (!sg_weights_lookup(m->w, mtp_names, "mtp_fc.weight") || !sg_flag_bool("SARAGOSSA_SPEC_MTP")) return SG_OK;
	int L = d->n_layer, full = -1;
	for (int i = 0; i < L && full < 0; i++)
		if (d->layers[i].kind != SG_LAYER_LINEAR_ATTN) full = i;
	if (full < 0) return SG_OK; /* no attention layer to shape it after */
	sg_layer_desc *dl = sg_realloc(d->layers, sizeof(*dl) * (size_t)(L + 1));
	if (dl) d->layers = dl;
	sg_layer_weights *lw = dl ? sg_realloc(m->layers, sizeof(*lw) * (size_t)(L + 1)) : NULL;
	if (lw) m->layers = lw;
	sg_hybrid_layer *hl = lw ? sg_realloc(m->hy.layers, sizeof(*hl) * (size_t)(L + 1)) : NULL;
	if (!hl) return sg_error(SG_ERR_NOMEM, "model: the MTP layer");
	m->hy.layers = hl;
	d->layers[L] = d->layers[full];
	d->layers[L].kv_source = L;
	d->layers[L].moe = d->layers[0].moe;
	d->layers[L].ffn_dim = d->layers[0].ffn_dim;
	memset(&m->layers[L], 0, sizeof(m->layers[L]));
	memset(&m->hy.layers[L], 0, sizeof(m->hy.layers[L]));
	m->has_mtp = 1; /* from here sg_model_free frees what is bound */
	size_t bytes = m->weight_bytes;
	sg_family f = *m->fam;
	const sg_family *keep = m->fam;
	f.names = mtp_names;
	m->fam = &f;
	sg_status st = sg_model_bind_layer(m, L);
	int64_t D = d->dim;
	if (!st && d->layers[L].moe && Fs > 0) {
		sg_want ws[] = {
			{"blk.{L}.ffn_gate_shexp.weight", SG_WANT_MATMUL, 2, {D, Fs}, 0, 0, &hl[L].sh_gate},
			{"blk.{L}.ffn_up_shexp.weight", SG_WANT_MATMUL, 2, {D, Fs}, 0, 0, &hl[L].sh_up},
			{"blk.{L}.ffn_down_shexp.weight", SG_WANT_MATMUL, 2, {Fs, D}, 0, 0, &hl[L].sh_down},
			{"blk.{L}.ffn_gate_inp_shexp.weight", SG_WANT_MATMUL, 2, {D, 1}, !d->shared_expert_gate, 0, &hl[L].sh_gate_inp},
		};
		st = sg_model_bind_wants(m, ws, 4, L);
	}
	if (!st) {
		sg_want ws[] = {
			{"mtp_fc.weight", SG_WANT_MATMUL, 2, {2 * D, D}, 0, 0, &m->mtp_fc},
			{"mtp_norm_emb.weight", SG_WANT_FLOAT, 1, {D}, 0, 1, &m->mtp_norm_emb},
			{"mtp_norm_hid.weight", SG_WANT_FLOAT, 1, {D}, 0, 1, &m->mtp_norm_hid},
			{"mtp_norm.weight", SG_WANT_FLOAT, 1, {D}, 0, 1, &m->mtp_norm},
		};
		st = sg_model_bind_wants(m, ws, 4, -1);
	}
	m->fam = keep;
	m->weight_bytes = bytes;
	return st ? sg_error_wrap(st, "model: the MTP module") : SG_OK;
}

static sg_status bind_extra(sg_model *m)
{
	const sg_model_desc *d = &m->desc;
	int64_t D = d->dim, Fs = d->shared_expert_ffn_dim;
	int any_fused = 0;
	sg_status st = SG_OK;
	if (d->lin_n_k_head > 0 && d->lin_n_v_head % d->lin_n_k_head)
		return sg_error(SG_ERR_FORMAT, "model: %d value heads are not a multiple of %d key heads", d->lin_n_v_head,
				d->lin_n_k_head);
	for (int i = 0; i < d->n_layer && !st; i++) {
		sg_hybrid_layer *hl = &m->hy.layers[i];
		if (d->layers[i].kind == SG_LAYER_LINEAR_ATTN) {
			st = bind_linear(m, i, hl);
			any_fused |= hl->lin_qkvz.data != NULL;
		}
		if (!st && d->layers[i].moe && Fs > 0) {
			sg_want ws[] = {
				{"blk.{L}.ffn_gate_shexp.weight", SG_WANT_MATMUL, 2, {D, Fs}, 0, 0, &hl->sh_gate},
				{"blk.{L}.ffn_up_shexp.weight", SG_WANT_MATMUL, 2, {D, Fs}, 0, 0, &hl->sh_up},
				{"blk.{L}.ffn_down_shexp.weight", SG_WANT_MATMUL, 2, {Fs, D}, 0, 0, &hl->sh_down},
				{"blk.{L}.ffn_gate_inp_shexp.weight", SG_WANT_MATMUL, 2, {D, 1}, !d->shared_expert_gate, 0,
				 &hl->sh_gate_inp},
			};
			st = sg_model_bind_wants(m, ws, 4, i);
		}
	}
	if (!st) st = make_indices(m, any_fused);
	return st ? st : bind_mtp(m, Fs);
}

static const sg_arch archs[] = {SG_ARCH_QWEN3_NEXT, 0};

const sg_family sg_family_qwen3_next = {
	.name = "qwen3_next",
	.archs = archs,
	.names = names,
	.adjust = sg_model_hybrid_prepare,
	.experts = NULL,
	.bind_extra = bind_extra,
};
