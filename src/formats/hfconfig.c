/*
 * config.json -> sg_model_desc. Each family states its defaults (those of its transformers
 * configuration class) and its switches; the shared reader below takes the common fields.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/json.h"
#include "formats/model_desc.h"

static const struct {
	const char *name;
	sg_arch arch;
} hf_types[] = {
	{"llama", SG_ARCH_LLAMA},
	{"mistral", SG_ARCH_MISTRAL},
	{"qwen2", SG_ARCH_QWEN2},
	{"qwen3", SG_ARCH_QWEN3},
	{"qwen3_moe", SG_ARCH_QWEN3_MOE},
	{"qwen3_next", SG_ARCH_QWEN3_NEXT},
	{"qwen3_5_moe", SG_ARCH_QWEN3_NEXT},
	{"qwen3_5_moe_text", SG_ARCH_QWEN3_NEXT},
	{"qwen3_5", SG_ARCH_QWEN3_NEXT},
	{"qwen3_5_text", SG_ARCH_QWEN3_NEXT},
	{"gemma3", SG_ARCH_GEMMA3},
	{"gemma3_text", SG_ARCH_GEMMA3},
	{"gemma4", SG_ARCH_GEMMA4},
	{"gemma4_text", SG_ARCH_GEMMA4},
	{"gemma4_unified", SG_ARCH_GEMMA4},
	{"whisper", SG_ARCH_WHISPER},
	{"bert", SG_ARCH_BERT},
	{"roberta", SG_ARCH_BERT},
	{"xlm-roberta", SG_ARCH_BERT},
	{"mpnet", SG_ARCH_BERT},
};

const char *sg_model_desc_supported(void)
{
	return "llama, mistral, qwen2, qwen3, qwen3_moe, qwen3_next, qwen3_5_moe, qwen3_5_moe_text, qwen3_5, "
	       "qwen3_5_text, gemma3, gemma3_text, gemma4, gemma4_text, gemma4_unified, whisper, bert, roberta, xlm-roberta, mpnet";
}

const char *sg_arch_name(sg_arch a)
{
	switch (a) {
	case SG_ARCH_LLAMA: return "llama";
	case SG_ARCH_MISTRAL: return "mistral";
	case SG_ARCH_QWEN2: return "qwen2";
	case SG_ARCH_QWEN3: return "qwen3";
	case SG_ARCH_QWEN3_MOE: return "qwen3_moe";
	case SG_ARCH_QWEN3_NEXT: return "qwen3_next";
	case SG_ARCH_GEMMA3: return "gemma3";
	case SG_ARCH_GEMMA4: return "gemma4";
	case SG_ARCH_WHISPER: return "whisper";
	case SG_ARCH_BERT: return "bert";
	}
	return "unknown";
}

const char *sg_layer_kind_name(sg_layer_kind k)
{
	switch (k) {
	case SG_LAYER_FULL_ATTN: return "full";
	case SG_LAYER_SLIDING_ATTN: return "sliding";
	case SG_LAYER_LINEAR_ATTN: return "linear";
	}
	return "unknown";
}

void sg_model_desc_free(sg_model_desc *d)
{
	if (!d) return;
	sg_free(d->layers);
	memset(d, 0, sizeof(*d));
}

/* ---- typed reads with defaults; a present field of the wrong type is an error ---- */

typedef struct reader {
	const json_t *o;
	sg_status st; /* first error */
} reader;

static int geti(reader *r, const char *key, int def)
{
	int64_t v;
	sg_status st = sg_json_get_int(r->o, key, &v);
	if (st == SG_ERR_NOT_FOUND || (!st && json_is_null(json_object_get(r->o, key)))) return def;
	if (json_is_null(json_object_get(r->o, key))) return def;
	if (st) {
		if (!r->st) r->st = sg_error_wrap(st, "config.json");
		return def;
	}
	if (v < 0 || v > INT32_MAX) {
		if (!r->st) r->st = sg_error(SG_ERR_FORMAT, "config.json: field '%s' = %lld is out of range", key, (long long)v);
		return def;
	}
	return (int)v;
}

static double getf(reader *r, const char *key, double def)
{
	double v;
	if (json_is_null(json_object_get(r->o, key))) return def;
	sg_status st = sg_json_get_num(r->o, key, &v);
	if (st == SG_ERR_NOT_FOUND) return def;
	if (st) {
		if (!r->st) r->st = sg_error_wrap(st, "config.json");
		return def;
	}
	return v;
}

static int getb(reader *r, const char *key, int def)
{
	int v;
	if (json_is_null(json_object_get(r->o, key))) return def;
	sg_status st = sg_json_get_bool(r->o, key, &v);
	if (st == SG_ERR_NOT_FOUND) return def;
	if (st) {
		if (!r->st) r->st = sg_error_wrap(st, "config.json");
		return def;
	}
	return v;
}

static const char *gets(reader *r, const char *key, const char *def)
{
	const char *v;
	sg_status st = sg_json_get_str(r->o, key, &v);
	if (st == SG_ERR_NOT_FOUND || json_is_null(json_object_get(r->o, key))) return def;
	if (st) {
		if (!r->st) r->st = sg_error_wrap(st, "config.json");
		return def;
	}
	return v;
}

/* eos_token_id may be an integer or a list (first taken). */
static int token_id(const json_t *o, const char *key)
{
	const json_t *v = json_object_get(o, key);
	if (json_is_array(v)) v = json_array_get(v, 0);
	return json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) <= INT32_MAX
		       ? (int)json_integer_value(v)
		       : -1;
}

static sg_act parse_act(const char *s, sg_act def)
{
	if (!s) return def;
	if (!strcmp(s, "silu") || !strcmp(s, "swish")) return SG_ACT_SILU;
	if (!strcmp(s, "gelu_pytorch_tanh") || !strcmp(s, "gelu_new") || !strcmp(s, "gelu_fast")) return SG_ACT_GELU_TANH;
	if (!strcmp(s, "gelu")) return SG_ACT_GELU;
	return def;
}

/* Rope from a rope_scaling / rope_parameters object into r (theta only when present). */
static sg_status parse_rope_obj(const json_t *o, sg_rope *rp)
{
	if (!json_is_object(o)) return SG_OK;
	reader r = {o, SG_OK};
	rp->theta = (float)getf(&r, "rope_theta", rp->theta);
	rp->partial = (float)getf(&r, "partial_rotary_factor", rp->partial);
	const char *t = gets(&r, "rope_type", NULL);
	if (!t) t = gets(&r, "type", NULL);
	if (t) {
		if (!strcmp(t, "default")) rp->scaling = SG_ROPE_SCALING_NONE;
		else if (!strcmp(t, "linear")) rp->scaling = SG_ROPE_SCALING_LINEAR;
		else if (!strcmp(t, "yarn")) rp->scaling = SG_ROPE_SCALING_YARN;
		else if (!strcmp(t, "llama3")) rp->scaling = SG_ROPE_SCALING_LLAMA3;
		else if (!strcmp(t, "proportional")) rp->scaling = SG_ROPE_SCALING_PROPORTIONAL;
		else if (!strcmp(t, "dynamic")) rp->scaling = SG_ROPE_SCALING_DYNAMIC;
		else return sg_error(SG_ERR_UNSUPPORTED, "config.json: rope type '%s' (supported: default, linear, yarn, "
							 "llama3, proportional, dynamic)", t);
	}
	rp->factor = (float)getf(&r, "factor", rp->factor);
	rp->orig_ctx = geti(&r, "original_max_position_embeddings", rp->orig_ctx);
	rp->low_freq_factor = (float)getf(&r, "low_freq_factor", rp->low_freq_factor);
	rp->high_freq_factor = (float)getf(&r, "high_freq_factor", rp->high_freq_factor);
	rp->beta_fast = (float)getf(&r, "beta_fast", rp->beta_fast);
	rp->beta_slow = (float)getf(&r, "beta_slow", rp->beta_slow);
	rp->attn_factor = (float)getf(&r, "attention_factor", rp->attn_factor);
	return r.st;
}

static sg_layer_kind parse_layer_type(const char *s, int *ok)
{
	*ok = 1;
	if (!strcmp(s, "full_attention") || !strcmp(s, "attention")) return SG_LAYER_FULL_ATTN;
	if (!strcmp(s, "sliding_attention")) return SG_LAYER_SLIDING_ATTN;
	if (!strcmp(s, "linear_attention")) return SG_LAYER_LINEAR_ATTN;
	*ok = 0;
	return SG_LAYER_FULL_ATTN;
}

/* The text part of a config: text_config for multimodal wrappers. Refuses a vision/audio-only
 * config by name. */
static sg_status pick_text(const json_t *config, const json_t **text, const char **model_type)
{
	const char *mt = NULL;
	if (!json_is_object(config)) return sg_error(SG_ERR_FORMAT, "config.json: not a JSON object");
	if (sg_json_get_str(config, "model_type", &mt))
		return sg_error(SG_ERR_FORMAT, "config.json: no string \"model_type\" (supported: %s)", sg_model_desc_supported());
	const json_t *tc = json_object_get(config, "text_config");
	*text = config;
	*model_type = mt;
	if (json_is_object(tc)) {
		const char *tmt = NULL;
		*text = tc;
		/* text_config may omit model_type (then the wrapper's name applies) */
		if (!sg_json_get_str(tc, "model_type", &tmt)) *model_type = tmt;
		return SG_OK;
	}
	if ((strstr(mt, "vision") || strstr(mt, "siglip") || strstr(mt, "clip") || strstr(mt, "audio")) &&
	    strcmp(mt, "whisper"))
		return sg_error(SG_ERR_UNSUPPORTED,
				"config.json: model_type '%s' is a vision/audio tower only; saragossa runs the text "
				"part of multimodal models (supported: %s)",
				mt, sg_model_desc_supported());
	return SG_OK;
}

static sg_status alloc_layers(sg_model_desc *d)
{
	if (d->n_layer <= 0 || d->n_layer > SG_MAX_LAYERS)
		return sg_error(SG_ERR_FORMAT, "config.json: num_hidden_layers = %d (want 1..%d)", d->n_layer, SG_MAX_LAYERS);
	d->layers = sg_calloc((size_t)d->n_layer, sizeof(sg_layer_desc));
	if (!d->layers) return sg_error(SG_ERR_NOMEM, "config.json: %d layers", d->n_layer);
	return SG_OK;
}

static sg_status check_sizes(const sg_model_desc *d)
{
	if (d->dim <= 0 || d->n_vocab <= 0 || d->n_head <= 0 || d->head_dim <= 0 || d->n_kv_head <= 0)
		return sg_error(SG_ERR_FORMAT,
				"config.json: %s needs positive hidden_size (%d), vocab_size (%d), "
				"num_attention_heads (%d), head_dim (%d), num_key_value_heads (%d)",
				d->model_type, d->dim, d->n_vocab, d->n_head, d->head_dim, d->n_kv_head);
	if (d->n_head % d->n_kv_head)
		return sg_error(SG_ERR_FORMAT, "config.json: num_attention_heads %d is not a multiple of num_key_value_heads %d",
				d->n_head, d->n_kv_head);
	return SG_OK;
}

static sg_status decoder_common(reader *r, sg_model_desc *d)
{
	d->n_vocab = geti(r, "vocab_size", 0);
	d->dim = geti(r, "hidden_size", 0);
	d->n_layer = geti(r, "num_hidden_layers", 0);
	d->ffn_dim = geti(r, "intermediate_size", 0);
	d->n_head = geti(r, "num_attention_heads", 0);
	d->n_kv_head = geti(r, "num_key_value_heads", d->n_head);
	d->head_dim = geti(r, "head_dim", d->n_head ? d->dim / d->n_head : 0);
	d->max_ctx = geti(r, "max_position_embeddings", 0);
	d->norm_eps = (float)getf(r, "rms_norm_eps", 1e-6);
	d->act = parse_act(gets(r, "hidden_act", NULL), SG_ACT_SILU);
	d->attn_bias = getb(r, "attention_bias", 0);
	d->bos_token = token_id(r->o, "bos_token_id");
	d->eos_token = token_id(r->o, "eos_token_id");
	if (r->st) return r->st;
	sg_status st = check_sizes(d);
	if (!st) st = alloc_layers(d);
	return st;
}

/* rope for every layer: theta + rope_scaling / rope_parameters (v5 spelling). */
static sg_status rope_common(reader *r, sg_rope *rp, double def_theta)
{
	rp->theta = (float)getf(r, "rope_theta", def_theta);
	rp->partial = (float)getf(r, "partial_rotary_factor", 1.0);
	rp->factor = 1.0f;
	sg_status st = parse_rope_obj(json_object_get(r->o, "rope_scaling"), rp);
	if (!st) {
		const json_t *rpar = json_object_get(r->o, "rope_parameters");
		/* a per-layer-type dict (Gemma) is handled by the family */
		if (json_is_object(rpar) && !json_object_get(rpar, "full_attention")) st = parse_rope_obj(rpar, rp);
	}
	return st ? st : r->st;
}

static void fill_layers(sg_model_desc *d, const sg_rope *rp)
{
	for (int i = 0; i < d->n_layer; i++) {
		sg_layer_desc *l = &d->layers[i];
		l->kind = SG_LAYER_FULL_ATTN;
		l->n_head = d->n_head;
		l->n_kv_head = d->n_kv_head;
		l->head_dim = d->head_dim;
		l->rope = *rp;
		l->kv_source = i;
		l->ffn_dim = d->ffn_dim;
	}
}

static void finish_rot(sg_model_desc *d)
{
	for (int i = 0; i < d->n_layer; i++) {
		sg_layer_desc *l = &d->layers[i];
		l->n_rot = (int)lround(l->head_dim * (double)l->rope.partial);
		l->n_rot &= ~1;
	}
}

/* layer_types array overrides kinds; its length must match the layer count. */
static sg_status apply_layer_types(const json_t *o, sg_model_desc *d, int *found)
{
	const json_t *lt = json_object_get(o, "layer_types");
	*found = 0;
	if (!lt || json_is_null(lt)) return SG_OK;
	if (!json_is_array(lt) || (int)json_array_size(lt) != d->n_layer)
		return sg_error(SG_ERR_FORMAT, "config.json: layer_types must list %d layers, found %s of %zu", d->n_layer,
				sg_json_type_name(lt), json_is_array(lt) ? json_array_size(lt) : 0);
	for (int i = 0; i < d->n_layer; i++) {
		const json_t *e = json_array_get(lt, (size_t)i);
		int ok = 0;
		sg_layer_kind k = json_is_string(e) ? parse_layer_type(json_string_value(e), &ok) : SG_LAYER_FULL_ATTN;
		if (!ok)
			return sg_error(SG_ERR_FORMAT, "config.json: layer_types[%d] = %s (want full_attention, "
						       "sliding_attention or linear_attention)",
					i, json_is_string(e) ? json_string_value(e) : sg_json_type_name(e));
		d->layers[i].kind = k;
	}
	*found = 1;
	return SG_OK;
}

static void set_sliding(sg_model_desc *d, int window)
{
	for (int i = 0; i < d->n_layer; i++)
		if (d->layers[i].kind == SG_LAYER_SLIDING_ATTN) d->layers[i].sliding_window = window;
}

static sg_status parse_quant(const json_t *config, sg_model_desc *d)
{
	const json_t *q = json_object_get(config, "quantization");
	if (!q) q = json_object_get(config, "quantization_config");
	if (!json_is_object(q)) return SG_OK;
	reader r = {q, SG_OK};
	if (json_object_get(q, "bits")) {
		d->quant.kind = SG_QUANT_MLX;
		d->quant.bits = geti(&r, "bits", 0);
		d->quant.group = geti(&r, "group_size", 0);
		return r.st;
	}
	const char *m = gets(&r, "quant_method", "?");
	return sg_error(SG_ERR_UNSUPPORTED, "config.json: quantization method '%s' (supported: MLX affine, GGUF)", m);
}

/* ---- families ---- */

static sg_status llama_like(reader *r, sg_model_desc *d)
{
	sg_status st = decoder_common(r, d);
	sg_rope rp = {0};
	if (!st) st = rope_common(r, &rp, 10000.0);
	if (st) return st;
	fill_layers(d, &rp);
	d->norm = SG_NORM_RMS;
	d->mlp = SG_MLP_GATED;
	d->embed_scale = 1.0f;
	d->tied_embeddings = getb(r, "tie_word_embeddings", 0);
	int window = geti(r, "sliding_window", 0);
	if (d->arch == SG_ARCH_QWEN2) {
		d->attn_bias = 1;
		/* Qwen2 only slides when use_sliding_window, from max_window_layers on */
		if (getb(r, "use_sliding_window", 0)) {
			int from = geti(r, "max_window_layers", d->n_layer);
			for (int i = from; i < d->n_layer; i++) d->layers[i].kind = SG_LAYER_SLIDING_ATTN;
		}
	} else if (window > 0 && d->arch == SG_ARCH_MISTRAL) {
		for (int i = 0; i < d->n_layer; i++) d->layers[i].kind = SG_LAYER_SLIDING_ATTN;
	}
	int found;
	st = apply_layer_types(r->o, d, &found);
	set_sliding(d, window);
	if (d->arch == SG_ARCH_QWEN3 || d->arch == SG_ARCH_QWEN3_MOE) d->qk_norm = 1;
	if (d->arch == SG_ARCH_QWEN3_MOE) {
		/* transformers 5 spells the expert count num_local_experts */
		d->n_expert = geti(r, "num_experts", geti(r, "num_local_experts", 0));
		d->n_expert_used = geti(r, "num_experts_per_tok", 0);
		d->moe_ffn_dim = geti(r, "moe_intermediate_size", 0);
		d->norm_topk_prob = getb(r, "norm_topk_prob", 0);
		int step = geti(r, "decoder_sparse_step", 1);
		const json_t *only = json_object_get(r->o, "mlp_only_layers");
		for (int i = 0; i < d->n_layer && d->n_expert > 0; i++) {
			int dense = 0;
			for (size_t k = 0; json_is_array(only) && k < json_array_size(only); k++)
				if (json_integer_value(json_array_get(only, k)) == i) dense = 1;
			d->layers[i].moe = !dense && step > 0 && (i + 1) % step == 0;
		}
	}
	return st ? st : r->st;
}

static sg_status qwen3_next(reader *r, sg_model_desc *d)
{
	sg_status st = decoder_common(r, d);
	sg_rope rp = {0};
	if (!st) st = rope_common(r, &rp, 10000.0);
	if (st) return st;
	fill_layers(d, &rp);
	d->norm = SG_NORM_RMS;
	d->norm_offset = 1.0f; /* zero-centred norm weights, applied as 1 + w */
	d->qk_norm = 1;
	d->attn_output_gate = getb(r, "attn_output_gate", 1);
	d->mlp = SG_MLP_GATED;
	d->embed_scale = 1.0f;
	d->tied_embeddings = getb(r, "tie_word_embeddings", 0);
	int found;
	if ((st = apply_layer_types(r->o, d, &found))) return st;
	if (!found) {
		int every = geti(r, "full_attention_interval", 4);
		for (int i = 0; i < d->n_layer; i++)
			d->layers[i].kind = every > 0 && (i + 1) % every == 0 ? SG_LAYER_FULL_ATTN : SG_LAYER_LINEAR_ATTN;
	}
	d->lin_n_k_head = geti(r, "linear_num_key_heads", 0);
	d->lin_n_v_head = geti(r, "linear_num_value_heads", 0);
	d->lin_k_head_dim = geti(r, "linear_key_head_dim", 0);
	d->lin_v_head_dim = geti(r, "linear_value_head_dim", 0);
	d->lin_conv_kernel = geti(r, "linear_conv_kernel_dim", 0);
	d->n_expert = geti(r, "num_experts", 0);
	d->n_expert_used = geti(r, "num_experts_per_tok", 0);
	d->moe_ffn_dim = geti(r, "moe_intermediate_size", 0);
	d->shared_expert_ffn_dim = geti(r, "shared_expert_intermediate_size", 0);
	d->shared_expert_gate = d->shared_expert_ffn_dim > 0;
	d->norm_topk_prob = getb(r, "norm_topk_prob", 1);
	int step = geti(r, "decoder_sparse_step", 1);
	for (int i = 0; i < d->n_layer; i++) d->layers[i].moe = d->n_expert > 0 && step > 0 && (i + 1) % step == 0;
	int has_linear = 0;
	for (int i = 0; i < d->n_layer; i++) has_linear |= d->layers[i].kind == SG_LAYER_LINEAR_ATTN;
	if (has_linear && (d->lin_n_k_head <= 0 || d->lin_n_v_head <= 0 || d->lin_k_head_dim <= 0 ||
			   d->lin_v_head_dim <= 0 || d->lin_conv_kernel <= 0))
		return sg_error(SG_ERR_FORMAT, "config.json: %s has linear-attention layers but linear_num_key_heads "
					       "(%d), linear_num_value_heads (%d), linear_key_head_dim (%d), "
					       "linear_value_head_dim (%d), linear_conv_kernel_dim (%d) are not all positive",
				d->model_type, d->lin_n_k_head, d->lin_n_v_head, d->lin_k_head_dim, d->lin_v_head_dim,
				d->lin_conv_kernel);
	return r->st;
}

static sg_status gemma(reader *r, sg_model_desc *d)
{
	int g4 = d->arch == SG_ARCH_GEMMA4;
	sg_status st = decoder_common(r, d);
	if (st) return st;
	sg_rope full = {0}, slide = {0};
	if ((st = rope_common(r, &full, 1000000.0))) return st;
	slide = full;
	slide.scaling = SG_ROPE_SCALING_NONE; /* rope_scaling applies to global layers only */
	slide.factor = 1.0f;
	slide.theta = (float)getf(r, "rope_local_base_freq", 10000.0);
	const json_t *rpar = json_object_get(r->o, "rope_parameters");
	if (json_is_object(rpar) && json_object_get(rpar, "full_attention")) {
		full = (sg_rope){.theta = full.theta, .partial = 1.0f, .factor = 1.0f};
		slide = (sg_rope){.theta = slide.theta, .partial = 1.0f, .factor = 1.0f};
		if ((st = parse_rope_obj(json_object_get(rpar, "full_attention"), &full)) ||
		    (st = parse_rope_obj(json_object_get(rpar, "sliding_attention"), &slide)))
			return st;
	}
	fill_layers(d, &full);
	d->norm = SG_NORM_RMS;
	d->norm_offset = g4 ? 0.0f : 1.0f;
	d->qk_norm = 1;
	d->sandwich_norm = 1;
	d->mlp = SG_MLP_GATED;
	d->act = parse_act(gets(r, "hidden_activation", NULL), SG_ACT_GELU_TANH);
	d->embed_scale = sqrtf((float)d->dim);
	d->tied_embeddings = getb(r, "tie_word_embeddings", 1);
	d->attn_softcap = (float)getf(r, "attn_logit_softcapping", 0.0);
	d->final_softcap = (float)getf(r, "final_logit_softcapping", 0.0);
	double qpas = getf(r, "query_pre_attn_scalar", d->head_dim);
	d->query_scale = g4 ? 1.0f : (float)(1.0 / sqrt(qpas > 0 ? qpas : d->head_dim));
	int window = geti(r, "sliding_window", g4 ? 512 : 4096);
	if (!g4 && getb(r, "use_bidirectional_attention", 0)) {
		/* EmbeddingGemma: transformers turns the file's window w into w / 2 + 1 and lets a
		 * sliding layer's token see keys at distance < w / 2 + 1 on both sides */
		d->bidirectional = 1;
		window = window / 2 + 1;
	}
	int found;
	if ((st = apply_layer_types(r->o, d, &found))) return st;
	if (!found) {
		int pattern = geti(r, "sliding_window_pattern", 6);
		for (int i = 0; i < d->n_layer; i++)
			d->layers[i].kind = pattern > 0 && (i + 1) % pattern == 0 ? SG_LAYER_FULL_ATTN : SG_LAYER_SLIDING_ATTN;
	}
	set_sliding(d, window);
	for (int i = 0; i < d->n_layer; i++)
		if (d->layers[i].kind == SG_LAYER_SLIDING_ATTN) d->layers[i].rope = slide;
	if (g4) {
		d->v_norm = 1;
		/* full-attention layers: global_head_dim (transformers' default 512) and, with
		 * attention_k_eq_v, num_global_key_value_heads; per_layer_config (the spelling newer
		 * transformers writes) overrides head_dim / num_key_value_heads by layer index */
		int ghd = geti(r, "global_head_dim", 512);
		int k_eq_v = getb(r, "attention_k_eq_v", 0);
		int gkv = k_eq_v ? geti(r, "num_global_key_value_heads", d->n_kv_head) : d->n_kv_head;
		const json_t *plc = json_object_get(r->o, "per_layer_config");
		d->per_layer_input_dim = geti(r, "hidden_size_per_layer_input", 0);
		d->n_kv_shared_layers = geti(r, "num_kv_shared_layers", 0);
		int wide = getb(r, "use_double_wide_mlp", 0);
		if (getb(r, "enable_moe_block", 0)) {
			d->n_expert = geti(r, "num_experts", 0);
			d->n_expert_used = geti(r, "top_k_experts", 0);
			d->moe_ffn_dim = geti(r, "moe_intermediate_size", 0);
			d->moe_beside_dense = 1;
			d->norm_topk_prob = 1;
			if (d->n_expert <= 0 || d->moe_ffn_dim <= 0)
				return sg_error(SG_ERR_FORMAT, "config.json: enable_moe_block with num_experts %d, "
							       "moe_intermediate_size %d", d->n_expert, d->moe_ffn_dim);
		}
		if (d->per_layer_input_dim < 0)
			return sg_error(SG_ERR_FORMAT, "config.json: hidden_size_per_layer_input = %d", d->per_layer_input_dim);
		if (d->n_kv_shared_layers < 0 || d->n_kv_shared_layers >= d->n_layer)
			return sg_error(SG_ERR_FORMAT, "config.json: num_kv_shared_layers = %d with %d layers",
					d->n_kv_shared_layers, d->n_layer);
		int first_shared = d->n_layer - d->n_kv_shared_layers;
		for (int i = 0; i < d->n_layer; i++) {
			sg_layer_desc *l = &d->layers[i];
			if (l->kind == SG_LAYER_FULL_ATTN) {
				l->k_eq_v = k_eq_v;
				if (!json_is_object(plc)) {
					l->head_dim = ghd;
					l->n_kv_head = gkv;
				}
			}
			char key[16];
			snprintf(key, sizeof(key), "%d", i);
			const json_t *lc = json_is_object(plc) ? json_object_get(plc, key) : NULL;
			if (json_is_object(lc)) {
				reader lr = {lc, SG_OK};
				l->head_dim = geti(&lr, "head_dim", l->head_dim);
				l->n_kv_head = geti(&lr, "num_key_value_heads", l->n_kv_head);
				if (lr.st) return lr.st;
			}
			if (l->head_dim <= 0 || l->n_kv_head <= 0 || l->n_head % l->n_kv_head)
				return sg_error(SG_ERR_FORMAT, "config.json: layer %d has head_dim %d with %d of %d heads for K/V", i,
						l->head_dim, l->n_kv_head, l->n_head);
			l->moe = d->n_expert > 0;
			if (i >= first_shared) {
				/* reuse the K/V of the last unshared layer of the same kind */
				for (int j = first_shared - 1; j >= 0; j--)
					if (d->layers[j].kind == l->kind) {
						l->kv_source = j;
						break;
					}
				if (wide) l->ffn_dim = 2 * d->ffn_dim;
			}
		}
	}
	return r->st;
}

/* An MLX Whisper folder's config.json: openai-whisper's ModelDimensions (n_mels, n_audio_ctx,
 * n_audio_state, n_audio_head, n_audio_layer, n_vocab, n_text_ctx, n_text_state, n_text_head,
 * n_text_layer); the MLP is 4 x the state. */
static void whisper_dims(reader *r, sg_model_desc *d)
{
	d->n_vocab = geti(r, "n_vocab", 0);
	d->dim = geti(r, "n_text_state", 0);
	d->n_layer = geti(r, "n_text_layer", 0);
	d->n_enc_layer = geti(r, "n_audio_layer", 0);
	d->n_head = geti(r, "n_text_head", 0);
	d->ffn_dim = 4 * d->dim;
	d->n_mels = geti(r, "n_mels", 80);
	d->n_audio_ctx = geti(r, "n_audio_ctx", 1500);
	d->max_ctx = geti(r, "n_text_ctx", 448);
	/* the start and end tokens follow from the vocabulary (multilingual ones shift by one) */
	int multi = d->n_vocab >= 51865;
	d->bos_token = multi ? 50258 : 50257;
	d->eos_token = multi ? 50257 : 50256;
}

/* A Hugging Face Whisper config.json (transformers' names). */
static void whisper_hf(reader *r, sg_model_desc *d)
{
	d->n_vocab = geti(r, "vocab_size", 0);
	d->dim = geti(r, "d_model", 0);
	d->n_layer = geti(r, "decoder_layers", 0);
	d->n_enc_layer = geti(r, "encoder_layers", 0);
	d->n_head = geti(r, "decoder_attention_heads", 0);
	d->ffn_dim = geti(r, "decoder_ffn_dim", 0);
	d->n_mels = geti(r, "num_mel_bins", 80);
	d->n_audio_ctx = geti(r, "max_source_positions", 1500);
	d->max_ctx = geti(r, "max_target_positions", 448);
	d->act = parse_act(gets(r, "activation_function", NULL), SG_ACT_GELU);
	d->bos_token = token_id(r->o, "decoder_start_token_id");
	d->eos_token = token_id(r->o, "eos_token_id");
}

static sg_status whisper(reader *r, sg_model_desc *d)
{
	d->act = SG_ACT_GELU;
	if (json_object_get(r->o, "n_audio_state")) whisper_dims(r, d);
	else whisper_hf(r, d);
	d->n_kv_head = d->n_head;
	d->head_dim = d->n_head ? d->dim / d->n_head : 0;
	d->norm = SG_NORM_LAYER;
	d->norm_eps = 1e-5f;
	d->mlp = SG_MLP_PLAIN;
	d->attn_bias = 1;
	d->embed_scale = 1.0f;
	d->tied_embeddings = 1;
	if (r->st) return r->st;
	sg_status st = check_sizes(d);
	if (!st) st = alloc_layers(d);
	if (st) return st;
	sg_rope none = {.partial = 0.0f, .factor = 1.0f}; /* learned positions, no rope */
	fill_layers(d, &none);
	return SG_OK;
}

static sg_status bert(reader *r, sg_model_desc *d)
{
	d->n_vocab = geti(r, "vocab_size", 0);
	d->dim = geti(r, "hidden_size", 0);
	d->n_layer = geti(r, "num_hidden_layers", 0);
	d->n_head = geti(r, "num_attention_heads", 0);
	d->n_kv_head = d->n_head;
	d->head_dim = d->n_head ? d->dim / d->n_head : 0;
	d->ffn_dim = geti(r, "intermediate_size", 0);
	d->max_ctx = geti(r, "max_position_embeddings", 512);
	int mpnet = !strcmp(d->model_type, "mpnet");
	int roberta = mpnet || !strcmp(d->model_type, "roberta") || !strcmp(d->model_type, "xlm-roberta");
	d->type_vocab_size = mpnet ? 0 : geti(r, "type_vocab_size", 2);
	d->pos_pad_id = roberta ? geti(r, "pad_token_id", 1) : -1;
	d->rel_buckets = mpnet ? geti(r, "relative_attention_num_buckets", 32) : 0;
	if (!r->st && roberta && (d->pos_pad_id < 0 || d->pos_pad_id >= d->max_ctx - 1))
		return sg_error(SG_ERR_FORMAT, "config.json: pad_token_id %d leaves no position of %d for a token", d->pos_pad_id,
				d->max_ctx);
	/* transformers computes 32 buckets whatever the table holds */
	if (!r->st && mpnet && d->rel_buckets != 32)
		return sg_error(SG_ERR_UNSUPPORTED, "config.json: relative_attention_num_buckets %d (mpnet runs 32)", d->rel_buckets);
	d->norm = SG_NORM_LAYER;
	d->norm_eps = (float)getf(r, "layer_norm_eps", 1e-12);
	d->mlp = SG_MLP_PLAIN;
	const char *act = gets(r, "hidden_act", NULL), *pe = gets(r, "position_embedding_type", NULL);
	if (r->st) return r->st;
	/* parse_act falls back to its default on a name it does not know: here that would run
	 * GELU for a ReLU model */
	if (act && strcmp(act, "gelu") && parse_act(act, SG_ACT_SILU) != SG_ACT_GELU_TANH)
		return sg_error(SG_ERR_UNSUPPORTED, "config.json: hidden_act '%s' (bert runs gelu, gelu_new, gelu_pytorch_tanh)", act);
	/* relative_key(_query) adds learned distance embeddings inside attention */
	if (pe && strcmp(pe, "absolute"))
		return sg_error(SG_ERR_UNSUPPORTED, "config.json: position_embedding_type '%s' (bert runs absolute)", pe);
	d->act = parse_act(act, SG_ACT_GELU);
	d->attn_bias = 1;
	d->embed_scale = 1.0f;
	d->bos_token = d->eos_token = -1;
	if (r->st) return r->st;
	sg_status st = check_sizes(d);
	if (!st) st = alloc_layers(d);
	if (st) return st;
	sg_rope none = {.partial = 0.0f, .factor = 1.0f};
	fill_layers(d, &none);
	return SG_OK;
}

sg_status sg_model_desc_from_config(const json_t *config, sg_model_desc *d)
{
	memset(d, 0, sizeof(*d));
	const json_t *text = NULL;
	const char *mt = NULL;
	sg_status st = pick_text(config, &text, &mt);
	if (st) return st;
	int found = 0;
	for (size_t i = 0; i < sizeof(hf_types) / sizeof(hf_types[0]); i++)
		if (!strcmp(hf_types[i].name, mt)) d->arch = hf_types[i].arch, found = 1;
	if (!found)
		return sg_error(SG_ERR_UNSUPPORTED, "config.json: unknown model_type '%s' (supported: %s)", mt,
				sg_model_desc_supported());
	snprintf(d->model_type, sizeof(d->model_type), "%s", mt);
	d->quant.file_type = -1;
	/* vocab_size sometimes lives only on the multimodal wrapper */
	json_t *merged = NULL;
	if (text != config && !json_object_get(text, "vocab_size") && json_object_get(config, "vocab_size")) {
		merged = json_deep_copy(text);
		if (!merged) return sg_error(SG_ERR_NOMEM, "config.json");
		json_object_set(merged, "vocab_size", json_object_get(config, "vocab_size"));
		text = merged;
	}
	reader r = {text, SG_OK};
	switch (d->arch) {
	case SG_ARCH_LLAMA:
	case SG_ARCH_MISTRAL:
	case SG_ARCH_QWEN2:
	case SG_ARCH_QWEN3:
	case SG_ARCH_QWEN3_MOE: st = llama_like(&r, d); break;
	case SG_ARCH_QWEN3_NEXT: st = qwen3_next(&r, d); break;
	case SG_ARCH_GEMMA3:
	case SG_ARCH_GEMMA4: st = gemma(&r, d); break;
	case SG_ARCH_WHISPER: st = whisper(&r, d); break;
	case SG_ARCH_BERT: st = bert(&r, d); break;
	}
	/* tie_word_embeddings may sit on the wrapper of a multimodal config */
	if (!st && text != config && json_is_boolean(json_object_get(config, "tie_word_embeddings")))
		d->tied_embeddings = json_is_true(json_object_get(config, "tie_word_embeddings"));
	if (!st && d->layers) finish_rot(d);
	if (!st) st = parse_quant(config, d);
	if (!st && d->n_expert > 0 && (d->n_expert_used <= 0 || d->n_expert_used > d->n_expert))
		st = sg_error(SG_ERR_FORMAT, "config.json: %d experts with %d used per token", d->n_expert, d->n_expert_used);
	if (merged) json_decref(merged);
	if (st) sg_model_desc_free(d);
	return st;
}
