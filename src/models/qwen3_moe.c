/*
 * Qwen3 MoE: routed experts (softmax router, top-k, normalised when norm_topk_prob), qk-norm.
 * Its own: how the experts are stored. GGUF and MLX folders hold each projection as one stacked
 * tensor [E][F][D] (bound in place); Hugging Face folders hold one tensor per expert
 * (model.layers.L.mlp.experts.E.gate_proj.weight), which are stacked once into a backend
 * tensor, since the grouped expert matmul wants the experts of a projection contiguous.
 */
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "models/model.h"

/* Stacks experts.{0..E-1}.<proj>.weight of one layer into out [E][rows][cols]. */
static sg_status stack(sg_model *m, int layer, const char *proj, int64_t cols, int64_t rows, sg_btensor *out)
{
	int E = m->desc.n_expert;
	const sg_tensor *first = NULL;
	char name[256];
	for (int e = 0; e < E; e++) {
		snprintf(name, sizeof(name), "model.layers.%d.mlp.experts.%d.%s.weight", layer, e, proj);
		const sg_tensor *t = sg_weights_find(m->w, name);
		if (!t) return sg_error(SG_ERR_NOT_FOUND, "%s: missing (and no stacked blk.%d.ffn_%s_exps)", name, layer, proj);
		char ts[64], ss[96];
		if (t->n_dims != 2 || t->ne[0] != cols || t->ne[1] != rows || (first && t->type != first->type) ||
		    (t->type != SG_TYPE_F32 && t->type != SG_TYPE_F16 && t->type != SG_TYPE_BF16))
			return sg_error(SG_ERR_FORMAT, "%s: expected %s [%lld, %lld], found %s %s", name,
					first ? sg_type_name(first->type) : "F32/F16/BF16", (long long)cols, (long long)rows,
					sg_tensor_type_str(t, ts, sizeof(ts)), sg_tensor_shape_str(t, ss, sizeof(ss)));
		if (!first) {
			int64_t ne[4] = {cols, rows, E, 1};
			sg_status st = m->be->ops->tensor_alloc(m->be, t->type, ne, out);
			if (st) return st;
			first = t;
		}
		sg_status st = m->be->ops->write(m->be, out, (size_t)e * t->nbytes, t->data, t->nbytes);
		if (st) return st;
	}
	m->weight_bytes += (size_t)m->desc.n_expert_used * first->nbytes; /* a decode step reads k of the E experts */
	return SG_OK;
}

static sg_status qwen3_moe_experts(sg_model *m, int layer, sg_layer_weights *lw)
{
	char name[64];
	snprintf(name, sizeof(name), "blk.%d.ffn_gate_exps.weight", layer);
	if (sg_weights_lookup(m->w, m->fam->names, name)) return sg_model_bind_stacked_experts(m, layer, lw);
	int64_t D = m->desc.dim, F = m->desc.moe_ffn_dim;
	sg_status st = stack(m, layer, "gate_proj", D, F, &lw->gate_exps);
	if (!st) st = stack(m, layer, "up_proj", D, F, &lw->up_exps);
	if (!st) st = stack(m, layer, "down_proj", F, D, &lw->down_exps);
	return st;
}

static const sg_arch qwen3_moe_archs[] = {SG_ARCH_QWEN3_MOE, 0};

const sg_family sg_family_qwen3_moe = {
	.name = "qwen3_moe",
	.archs = qwen3_moe_archs,
	.names = NULL,
	.adjust = NULL,
	.experts = qwen3_moe_experts,
};
