/*
 * Llama family: Llama, Mistral and Qwen2 (whose q/k/v biases the description already states).
 * Their own: llama.cpp's converter permutes the q/k rows of llama-arch GGUF files so that the
 * interleaved rope (pairs 2i, 2i+1) computes what Hugging Face's rotate_half (pairs i, i + d/2)
 * computes on the original rows; Qwen2 GGUF files keep the original rows and the neox layout.
 */
#include "models/model.h"

static sg_status llama_adjust(sg_model *m)
{
	int permuted = m->w->format == SG_WEIGHTS_GGUF && m->desc.arch != SG_ARCH_QWEN2;
	m->rope_neox = !permuted;
	return SG_OK;
}

static const sg_arch llama_archs[] = {SG_ARCH_LLAMA, SG_ARCH_MISTRAL, SG_ARCH_QWEN2, 0};

const sg_family sg_family_llama = {
	.name = "llama",
	.archs = llama_archs,
	.names = NULL,
	.adjust = llama_adjust,
	.experts = NULL,
};
