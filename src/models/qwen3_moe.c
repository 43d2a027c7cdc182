/*
 * Qwen3 MoE: routed experts (softmax router, top-k, normalised when norm_topk_prob), qk-norm.
 * The description carries all of it, and the experts bind in whichever layout the file holds
 * them (experts.c: GGUF and MLX stacks, transformers 5's fused gate_up_proj, one tensor per
 * expert), so this family adds nothing to the generic binding.
 */
#include "models/model.h"

static const sg_arch qwen3_moe_archs[] = {SG_ARCH_QWEN3_MOE, 0};

const sg_family sg_family_qwen3_moe = {
	.name = "qwen3_moe",
	.archs = qwen3_moe_archs,
	.names = NULL,
	.adjust = NULL,
	.experts = NULL,
};
