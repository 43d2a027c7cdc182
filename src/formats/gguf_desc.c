/*
 * GGUF metadata -> sg_model_desc. Keys follow the GGUF conventions (<arch>.block_count,
 * <arch>.attention.head_count, <arch>.rope.freq_base, ...). Per-layer keys may be arrays.
 * Converters fold Gemma's and Qwen3-Next's "1 + w" into the stored norm weights, so a GGUF
 * description has norm_offset 0 where the config.json one has 1.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "formats/model_desc.h"

static const struct {
	const char *name;
	sg_arch arch;
} gguf_archs[] = {
	{"llama", SG_ARCH_LLAMA},         {"mistral", SG_ARCH_MISTRAL},      {"qwen2", SG_ARCH_QWEN2},
	{"qwen3", SG_ARCH_QWEN3},         {"qwen3moe", SG_ARCH_QWEN3_MOE},   {"qwen3next", SG_ARCH_QWEN3_NEXT},
	{"qwen35moe", SG_ARCH_QWEN3_NEXT}, {"gemma3", SG_ARCH_GEMMA3},      {"gemma4", SG_ARCH_GEMMA4},
	{"whisper", SG_ARCH_WHISPER},     {"bert", SG_ARCH_BERT},
};

typedef struct greader {
	const sg_gguf *g;
	const char *arch;
	sg_status st;
} greader;

static const char *akey(const greader *r, const char *suffix, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s.%s", r->arch, suffix);
	return buf;
}

/* <arch>.suffix as an int (first element when an array), def when absent. */
static int gi(greader *r, const char *suffix, int def)
{
	char k[160];
	const sg_gguf_kv *kv = sg_gguf_find(r->g, akey(r, suffix, k, sizeof(k)));
	if (!kv) return def;
	int64_t v;
	sg_status st = kv->type == SG_GGUF_ARRAY ? (kv->arr_n ? sg_gguf_arr_int(kv, 0, &v) : SG_ERR_FORMAT)
						: sg_gguf_get_int(r->g, k, &v);
	if (st || v < 0 || v > INT32_MAX) {
		if (!r->st) r->st = st && st != SG_ERR_FORMAT ? st : sg_error(SG_ERR_FORMAT, "gguf: key '%s' is not a valid size", k);
		return def;
	}
	return (int)v;
}

/* Element i of a per-layer key: the array element, the scalar, or def. */
static int gi_layer(greader *r, const char *suffix, int i, int def)
{
	char k[160];
	const sg_gguf_kv *kv = sg_gguf_find(r->g, akey(r, suffix, k, sizeof(k)));
	if (!kv || kv->type != SG_GGUF_ARRAY) return gi(r, suffix, def);
	int64_t v;
	sg_status st = sg_gguf_arr_int(kv, (uint64_t)i, &v);
	if (st || v < 0 || v > INT32_MAX) {
		if (!r->st) r->st = sg_error(SG_ERR_FORMAT, "gguf: key '%s' needs a valid value for layer %d", k, i);
		return def;
	}
	return (int)v;
}

static double gf(greader *r, const char *suffix, double def)
{
	char k[160];
	double v;
	sg_status st = sg_gguf_get_num(r->g, akey(r, suffix, k, sizeof(k)), &v);
	if (st == SG_ERR_NOT_FOUND) return def;
	if (st) {
		if (!r->st) r->st = st;
		return def;
	}
	return v;
}

sg_status sg_model_desc_from_gguf(const sg_gguf *g, sg_model_desc *d)
{
	memset(d, 0, sizeof(*d));
	const char *arch = NULL;
	if (sg_gguf_get_str(g, "general.architecture", &arch))
		return sg_error(SG_ERR_FORMAT, "gguf: no string general.architecture");
	for (size_t i = 0; i < sizeof(gguf_archs) / sizeof(gguf_archs[0]); i++)
		if (!strcmp(gguf_archs[i].name, arch)) d->arch = gguf_archs[i].arch;
	if (!d->arch)
		return sg_error(SG_ERR_UNSUPPORTED, "gguf: unknown general.architecture '%s' (supported: llama, mistral, "
						    "qwen2, qwen3, qwen3moe, qwen3next, qwen35moe, gemma3, gemma4, bert)",
				arch);
	snprintf(d->model_type, sizeof(d->model_type), "%s", arch);
	greader r = {g, arch, SG_OK};
	d->dim = gi(&r, "embedding_length", 0);
	d->n_layer = gi(&r, "block_count", 0);
	d->ffn_dim = gi(&r, "feed_forward_length", 0);
	d->max_ctx = gi(&r, "context_length", 0);
	d->n_head = gi(&r, "attention.head_count", 0);
	d->n_kv_head = gi(&r, "attention.head_count_kv", d->n_head);
	d->head_dim = gi(&r, "attention.key_length", d->n_head ? d->dim / d->n_head : 0);
	const sg_gguf_kv *toks = sg_gguf_find(g, "tokenizer.ggml.tokens");
	d->n_vocab = gi(&r, "vocab_size", toks && toks->arr_n <= INT32_MAX ? (int)toks->arr_n : 0);
	if (!d->n_vocab)
		for (int i = 0; i < g->n_tensors; i++)
			if (!strcmp(g->tensors[i].name, "token_embd.weight") && g->tensors[i].n_dims == 2 &&
			    g->tensors[i].ne[1] <= INT32_MAX)
				d->n_vocab = (int)g->tensors[i].ne[1];
	int64_t v;
	d->bos_token = sg_gguf_get_int(g, "tokenizer.ggml.bos_token_id", &v) || v > INT32_MAX ? -1 : (int)v;
	d->eos_token = sg_gguf_get_int(g, "tokenizer.ggml.eos_token_id", &v) || v > INT32_MAX ? -1 : (int)v;
	d->quant.kind = SG_QUANT_GGUF;
	d->quant.file_type = sg_gguf_get_int(g, "general.file_type", &v) || v > INT32_MAX ? -1 : (int)v;
	d->tied_embeddings = 1;
	for (int i = 0; i < g->n_tensors; i++)
		if (!strcmp(g->tensors[i].name, "output.weight")) d->tied_embeddings = 0;
	if (r.st) return r.st;
	if (d->n_layer <= 0 || d->n_layer > SG_MAX_LAYERS || d->dim <= 0 || d->n_head <= 0 || d->head_dim <= 0 ||
	    d->n_kv_head <= 0 || d->n_vocab <= 0)
		return sg_error(SG_ERR_FORMAT,
				"gguf: %s needs positive block_count (%d, at most %d), embedding_length (%d), "
				"attention.head_count (%d), head_count_kv (%d), key_length (%d) and a vocabulary (%d)",
				arch, d->n_layer, SG_MAX_LAYERS, d->dim, d->n_head, d->n_kv_head, d->head_dim, d->n_vocab);
	d->layers = sg_calloc((size_t)d->n_layer, sizeof(sg_layer_desc));
	if (!d->layers) return sg_error(SG_ERR_NOMEM, "gguf: %d layers", d->n_layer);

	d->norm = SG_NORM_RMS;
	d->norm_eps = (float)gf(&r, "attention.layer_norm_rms_epsilon", 1e-6);
	d->mlp = SG_MLP_GATED;
	d->act = SG_ACT_SILU;
	d->embed_scale = 1.0f;
	sg_rope rope = {.theta = (float)gf(&r, "rope.freq_base", 10000.0), .partial = 1.0f, .factor = 1.0f};
	int n_rot = gi(&r, "rope.dimension_count", 0);
	char k[160];
	const char *sc = NULL;
	if (!sg_gguf_get_str(g, akey(&r, "rope.scaling.type", k, sizeof(k)), &sc)) {
		if (!strcmp(sc, "linear")) rope.scaling = SG_ROPE_SCALING_LINEAR;
		else if (!strcmp(sc, "yarn")) rope.scaling = SG_ROPE_SCALING_YARN;
		rope.factor = (float)gf(&r, "rope.scaling.factor", 1.0);
		rope.orig_ctx = gi(&r, "rope.scaling.original_context_length", 0);
	}
	sg_rope slide = rope;
	slide.theta = (float)gf(&r, "rope.freq_base_swa", 10000.0);
	slide.scaling = SG_ROPE_SCALING_NONE;
	slide.factor = 1.0f;
	int window = gi(&r, "attention.sliding_window", 0);
	int gemma = d->arch == SG_ARCH_GEMMA3 || d->arch == SG_ARCH_GEMMA4;
	int pattern = gi(&r, "attention.sliding_window_pattern", gemma ? 6 : 0);
	const sg_gguf_kv *swa_arr = sg_gguf_find(g, akey(&r, "attention.sliding_window_pattern", k, sizeof(k)));
	int interval = gi(&r, "full_attention_interval", 4);
	for (int i = 0; i < d->n_layer; i++) {
		sg_layer_desc *l = &d->layers[i];
		l->n_head = gi_layer(&r, "attention.head_count", i, d->n_head);
		l->n_kv_head = gi_layer(&r, "attention.head_count_kv", i, d->n_kv_head);
		l->head_dim = d->head_dim;
		l->ffn_dim = gi_layer(&r, "feed_forward_length", i, d->ffn_dim);
		l->kv_source = i;
		l->rope = rope;
		l->kind = SG_LAYER_FULL_ATTN;
		if (swa_arr && swa_arr->type == SG_GGUF_ARRAY) {
			int64_t b = 0;
			if (!sg_gguf_arr_int(swa_arr, (uint64_t)i, &b) && b) l->kind = SG_LAYER_SLIDING_ATTN;
		} else if (pattern > 0 && window > 0 && (i + 1) % pattern) {
			l->kind = SG_LAYER_SLIDING_ATTN;
		} else if (window > 0 && !gemma && !pattern) {
			l->kind = SG_LAYER_SLIDING_ATTN;
		}
		if (d->arch == SG_ARCH_QWEN3_NEXT && interval > 0 && (i + 1) % interval) l->kind = SG_LAYER_LINEAR_ATTN;
		if (l->kind == SG_LAYER_SLIDING_ATTN) {
			l->sliding_window = window;
			l->rope = slide;
		}
		if (l->n_kv_head <= 0 || l->n_head <= 0 || l->n_head % l->n_kv_head) {
			sg_model_desc_free(d);
			return sg_error(SG_ERR_FORMAT, "gguf: layer %d has %d heads and %d kv heads", i, l->n_head,
					l->n_kv_head);
		}
	}
	switch (d->arch) {
	case SG_ARCH_QWEN2: d->attn_bias = 1; break;
	case SG_ARCH_QWEN3: d->qk_norm = 1; break;
	case SG_ARCH_QWEN3_MOE: d->qk_norm = 1; break;
	case SG_ARCH_QWEN3_NEXT:
		d->qk_norm = 1;
		d->attn_output_gate = 1;
		d->lin_conv_kernel = gi(&r, "ssm.conv_kernel", 0);
		d->lin_k_head_dim = gi(&r, "ssm.state_size", 0);
		d->lin_n_k_head = gi(&r, "ssm.group_count", 0);
		d->lin_n_v_head = gi(&r, "ssm.time_step_rank", 0);
		d->lin_v_head_dim = d->lin_n_v_head ? gi(&r, "ssm.inner_size", 0) / d->lin_n_v_head : 0;
		break;
	case SG_ARCH_GEMMA3:
	case SG_ARCH_GEMMA4:
		d->qk_norm = 1;
		d->sandwich_norm = 1;
		d->act = SG_ACT_GELU_TANH;
		d->embed_scale = sqrtf((float)d->dim);
		d->attn_softcap = (float)gf(&r, "attn_logit_softcapping", 0.0);
		d->final_softcap = (float)gf(&r, "final_logit_softcapping", 0.0);
		d->query_scale = d->arch == SG_ARCH_GEMMA4 ? 1.0f : (float)(1.0 / sqrt((double)d->head_dim));
		if (d->arch == SG_ARCH_GEMMA4) {
			d->v_norm = 1;
			d->per_layer_input_dim = gi(&r, "embedding_length_per_layer_input", 0);
			d->n_kv_shared_layers = gi(&r, "attention.shared_kv_layers", 0);
			int swa_hd = gi(&r, "attention.key_length_swa", d->head_dim);
			for (int i = 0; i < d->n_layer; i++)
				if (d->layers[i].kind == SG_LAYER_SLIDING_ATTN) d->layers[i].head_dim = swa_hd;
		}
		break;
	case SG_ARCH_BERT:
		d->norm = SG_NORM_LAYER;
		d->norm_eps = (float)gf(&r, "attention.layer_norm_epsilon", 1e-12);
		d->mlp = SG_MLP_PLAIN;
		d->act = SG_ACT_GELU;
		d->attn_bias = 1;
		d->pos_pad_id = -1;
		break;
	default: break;
	}
	d->n_expert = gi(&r, "expert_count", 0);
	d->n_expert_used = gi(&r, "expert_used_count", 0);
	d->moe_ffn_dim = gi(&r, "expert_feed_forward_length", 0);
	d->shared_expert_ffn_dim = gi(&r, "expert_shared_feed_forward_length", 0);
	d->shared_expert_gate = d->arch == SG_ARCH_QWEN3_NEXT && d->shared_expert_ffn_dim > 0;
	d->norm_topk_prob = d->arch == SG_ARCH_QWEN3_NEXT || d->arch == SG_ARCH_QWEN3_MOE;
	for (int i = 0; i < d->n_layer; i++) {
		sg_layer_desc *l = &d->layers[i];
		l->moe = d->n_expert > 0;
		int rot = n_rot > 0 && n_rot <= l->head_dim && l->kind != SG_LAYER_SLIDING_ATTN ? n_rot : l->head_dim;
		l->n_rot = rot & ~1;
		l->rope.partial = (float)l->n_rot / (float)l->head_dim;
	}
	if (r.st || (d->n_expert > 0 && (d->n_expert_used <= 0 || d->n_expert_used > d->n_expert))) {
		sg_status st = r.st ? r.st
				    : sg_error(SG_ERR_FORMAT, "gguf: %d experts with %d used per token", d->n_expert,
					       d->n_expert_used);
		sg_model_desc_free(d);
		return st;
	}
	return SG_OK;
}

const char *sg_gguf_ftype_name(int ft)
{
	switch (ft) {
	case 0: return "F32";
	case 1: return "F16";
	case 2: return "Q4_0";
	case 3: return "Q4_1";
	case 7: return "Q8_0";
	case 8: return "Q5_0";
	case 9: return "Q5_1";
	case 10: return "Q2_K";
	case 11: return "Q3_K_S";
	case 12: return "Q3_K_M";
	case 13: return "Q3_K_L";
	case 14: return "Q4_K_S";
	case 15: return "Q4_K_M";
	case 16: return "Q5_K_S";
	case 17: return "Q5_K_M";
	case 18: return "Q6_K";
	case 25: return "IQ4_NL";
	case 30: return "IQ4_XS";
	case 32: return "BF16";
	default: return NULL;
	}
}
