/*
 * Qwen3 dense: per-head RMS norms on q and k and an explicit head_dim (both already in the
 * description). GGUF files keep Hugging Face's row order (neox rope), so nothing else is its own.
 */
#include "models/model.h"

static const sg_arch qwen3_archs[] = {SG_ARCH_QWEN3, 0};

const sg_family sg_family_qwen3 = {
	.name = "qwen3",
	.archs = qwen3_archs,
	.names = NULL,
	.adjust = NULL,
	.experts = NULL,
};
