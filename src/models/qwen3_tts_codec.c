/*
 * The Qwen3-TTS codec decoder (see qwen3_tts_codec.h). Weights are read once into F32 backend
 * tensors (convolutions laid out as the conv ops take them, SnakeBeta's exp taken,
 * layer scales and ConvNeXt gammas folded into the matrices before them); activations are
 * time-major [T][C] backend tensors. The transformer is an inner stack of the generic model.
 */
#include "models/qwen3_tts_codec.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/json.h"
#include "formats/model_desc.h"
#include "formats/qtypes.h"
#include "formats/weights.h"
#include "models/forward.h"
#include "models/model.h"

#define QC_MAX_STAGES 8
#define QC_MAX_GROUPS 64

typedef struct qc_conv {
	sg_btensor w, b; /* the conv ops' layouts (backend.h), [Cout] */
	float *host;     /* the bytes a bound weight still reads (a backend that keeps them in place), or NULL */
	int K, cin, cout, dil, groups, transposed, stride;
} qc_conv;

typedef struct qc_snake {
	sg_btensor a, b;
} qc_snake;

typedef struct qc_convnext {
	qc_conv up, dw;
	sg_btensor ln_w, ln_b, pw1, pw1b, pw2, pw2b;
} qc_convnext;

typedef struct qc_res {
	qc_snake s1, s2;
	qc_conv c1, c2;
} qc_res;

typedef struct qc_block {
	qc_snake s;
	qc_conv up;
	qc_res res[3];
} qc_block;

struct sg_qwen3_tts_codec {
	sg_weights *w;
	sg_backend *be;
	sg_model *tr; /* the transformer */
	int G, bins, cdim, qdim, latent, hidden, ddim, n_rates, n_ratios, rate, up;
	int rates[QC_MAX_STAGES], ratios[QC_MAX_STAGES];
	float *cb[QC_MAX_GROUPS]; /* host [bins][qdim]: embedding_sum / max(usage, eps) */
	sg_btensor out_first, out_rest; /* [cdim][qdim] */
	qc_conv pre;
	sg_btensor in_proj, in_proj_b, out_proj, out_proj_b;
	qc_convnext nx[QC_MAX_STAGES];
	qc_conv dec0, dec_out;
	qc_block blk[QC_MAX_STAGES];
	qc_snake s_out;
};

#define QC_LAYER(P)                                                                                \
	{"output_norm", P "norm"}, {"blk.{L}.attn_norm", P "layers.{L}.input_layernorm"},                \
	    {"blk.{L}.ffn_norm", P "layers.{L}.post_attention_layernorm"},                           \
	    {"blk.{L}.attn_q", P "layers.{L}.self_attn.q_proj"}, {"blk.{L}.attn_k", P "layers.{L}.self_attn.k_proj"}, \
	    {"blk.{L}.attn_v", P "layers.{L}.self_attn.v_proj"},                                     \
	    {"blk.{L}.attn_output", P "layers.{L}.self_attn.o_proj"},                                \
	    {"blk.{L}.ffn_gate", P "layers.{L}.mlp.gate_proj"}, {"blk.{L}.ffn_up", P "layers.{L}.mlp.up_proj"}, \
	    {"blk.{L}.ffn_down", P "layers.{L}.mlp.down_proj"},
static const sg_name_pair tr_names[] = {QC_LAYER("decoder.pre_transformer."){0, 0}};
static const sg_arch tr_archs[] = {SG_ARCH_LLAMA, 0};
static const sg_family tr_family = {.name = "qwen3-tts codec transformer", .archs = tr_archs, .names = tr_names};

/* ---- loading ---- */

/* The named tensor as host F32 with exactly n values (shape checked by count and ne[0]). */
static sg_status host_f32(sg_qwen3_tts_codec *c, const char *name, int64_t n, int64_t ne0, float **out)
{
	*out = NULL;
	const sg_tensor *t = sg_weights_find(c->w, name);
	if (!t) return sg_error(SG_ERR_NOT_FOUND, "qwen3-tts codec: tensor %s: missing", name);
	int k1 = t->n_dims == 3 && t->ne[0] == 1 && t->ne[1] == ne0; /* a 1x1 conv's [out][in][1] */
	if (sg_tensor_nelem(t) != n || (ne0 > 0 && t->ne[0] != ne0 && !k1) ||
	    !(t->type == SG_TYPE_F32 || t->type == SG_TYPE_F16 || t->type == SG_TYPE_BF16)) {
		char sh[96];
		return sg_error(SG_ERR_FORMAT, "qwen3-tts codec: tensor %s: expected %lld float values, found %s %s", name, (long long)n,
				sg_type_name(t->type), sg_tensor_shape_str(t, sh, sizeof(sh)));
	}
	float *v = sg_malloc(sizeof(float) * (size_t)n);
	if (!v) return sg_error(SG_ERR_NOMEM, "qwen3-tts codec: %s", name);
	sg_dequantize_ref(t->type, t->data, v, n);
	*out = v;
	return SG_OK;
}

static sg_status put(sg_qwen3_tts_codec *c, const float *v, int64_t n0, int64_t n1, int64_t n2, sg_btensor *out)
{
	int64_t ne[4] = {n0, n1, n2, 1};
	sg_status st = c->be->ops->tensor_alloc(c->be, SG_TYPE_F32, ne, out);
	return st ? st : c->be->ops->write(c->be, out, 0, v, sizeof(float) * (size_t)(n0 * n1 * n2));
}

static sg_status put4(sg_qwen3_tts_codec *c, const float *v, int64_t n0, int64_t n1, int64_t n2, int64_t n3, sg_btensor *out)
{
	int64_t ne[4] = {n0, n1, n2, n3};
	sg_status st = c->be->ops->tensor_alloc(c->be, SG_TYPE_F32, ne, out);
	return st ? st : c->be->ops->write(c->be, out, 0, v, sizeof(float) * (size_t)(n0 * n1 * n2 * n3));
}

/* A plain tensor of n0 x n1 values, uploaded as is (scale: each of the n1 rows times scale[row]) */
static sg_status load_mat(sg_qwen3_tts_codec *c, const char *name, int64_t n0, int64_t n1, const float *scale, sg_btensor *out)
{
	float *v;
	sg_status st = host_f32(c, name, n0 * n1, n0, &v);
	if (st) return st;
	if (scale)
		for (int64_t r = 0; r < n1; r++)
			for (int64_t i = 0; i < n0; i++) v[r * n0 + i] *= scale[r];
	st = put(c, v, n0, n1, 1, out);
	sg_free(v);
	return st;
}

/* A conv: PyTorch's [Cout][Cin/g][K] to the conv1d op's [Cout][K][Cin/g]; a transposed one,
 * [Cin][Cout][K], to conv_transpose1d's [stride][Cout][M][Cin] (M = ceil(K / stride)). */
static sg_status load_conv(sg_qwen3_tts_codec *c, const char *pfx, int cin, int cout, int K, int dil, int groups, int transposed,
			   int stride, qc_conv *cv)
{
	char name[256];
	int cg = cin / groups, M = (K + stride - 1) / stride;
	*cv = (qc_conv){.K = K, .cin = cin, .cout = cout, .dil = dil, .groups = groups, .transposed = transposed, .stride = stride};
	float *v, *p;
	snprintf(name, sizeof(name), "%s.weight", pfx);
	sg_status st = host_f32(c, name, (int64_t)cout * cg * K, K, &v);
	if (st) return st;
	size_t np = transposed ? (size_t)stride * cout * M * cin : (size_t)cout * cg * K;
	p = sg_calloc(np, sizeof(float));
	if (!p) {
		sg_free(v);
		return sg_error(SG_ERR_NOMEM, "qwen3-tts codec: %s", name);
	}
	if (transposed) {
		for (int i = 0; i < cin; i++)
			for (int o = 0; o < cout; o++)
				for (int k = 0; k < K; k++) {
					int ph = k % stride, m = k / stride;
					p[(((size_t)ph * cout + o) * M + m) * cin + i] = v[((size_t)i * cout + o) * K + k];
				}
		st = put4(c, p, cin, M, cout, stride, &cv->w);
	} else {
		for (int o = 0; o < cout; o++)
			for (int i = 0; i < cg; i++)
				for (int k = 0; k < K; k++) p[((size_t)o * K + k) * cg + i] = v[((size_t)o * cg + i) * K + k];
		if (groups == 1) {
			/* bound for conv1d alone: the CPU backend packs it for its tile kernel (no im2col,
			 * SARAGOSSA_CPU_CONV_PACKED), a GPU uploads it, a backend that keeps host bytes in
			 * place reads p, which then lives as long as the weight */
			cv->w = (sg_btensor){.type = SG_TYPE_F32,
					     .ne = {cg, K, cout, 1},
					     .row_bytes = (size_t)cg * sizeof(float),
					     .data = p,
					     .layout = SG_LAYOUT_CONV1D};
			st = c->be->ops->tensor_bind(c->be, &cv->w);
			if (!st && cv->w.data == p) cv->host = p, p = NULL;
			if (st) cv->w = (sg_btensor){0};
		} else {
			st = put4(c, p, cg, K, cout, 1, &cv->w);
		}
	}
	sg_free(v);
	sg_free(p);
	snprintf(name, sizeof(name), "%s.bias", pfx);
	if (!st && sg_weights_find(c->w, name)) st = load_mat(c, name, cout, 1, NULL, &cv->b);
	return st;
}

static sg_status load_snake(sg_qwen3_tts_codec *c, const char *pfx, int C, qc_snake *s)
{
	char name[256];
	float *a, *b;
	snprintf(name, sizeof(name), "%s.alpha", pfx);
	sg_status st = host_f32(c, name, C, C, &a);
	if (st) return st;
	snprintf(name, sizeof(name), "%s.beta", pfx);
	st = host_f32(c, name, C, C, &b);
	if (!st) {
		for (int i = 0; i < C; i++) a[i] = expf(a[i]), b[i] = expf(b[i]);
		st = put(c, a, C, 1, 1, &s->a);
		if (!st) st = put(c, b, C, 1, 1, &s->b);
	}
	sg_free(a);
	sg_free(b);
	return st;
}

static int ints_of(const json_t *a, int *v, int cap)
{
	if (!json_is_array(a) || json_array_size(a) < 1 || json_array_size(a) > (size_t)cap) return -1;
	for (size_t i = 0; i < json_array_size(a); i++) {
		json_t *x = json_array_get(a, i);
		if (!json_is_integer(x) || json_integer_value(x) < 1 || json_integer_value(x) > 64) return -1;
		v[i] = (int)json_integer_value(x);
	}
	return (int)json_array_size(a);
}

static int geti(const json_t *o, const char *k, int d)
{
	json_t *v = json_object_get(o, k);
	return json_is_integer(v) ? (int)json_integer_value(v) : d;
}

static sg_status load_transformer(sg_qwen3_tts_codec *c, const json_t *dc)
{
	json_t *j = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:i, s:b, s:s}", "model_type", "llama", "hidden_size",
			      c->hidden, "intermediate_size", geti(dc, "intermediate_size", 0), "num_hidden_layers",
			      geti(dc, "num_hidden_layers", 0), "num_attention_heads", geti(dc, "num_attention_heads", 0),
			      "num_key_value_heads", geti(dc, "num_key_value_heads", 0), "vocab_size", 1, "rms_norm_eps",
			      json_number_value(json_object_get(dc, "rms_norm_eps")), "rope_theta",
			      json_is_number(json_object_get(dc, "rope_theta")) ? json_number_value(json_object_get(dc, "rope_theta")) : 10000.0,
			      "max_position_embeddings", geti(dc, "max_position_embeddings", 8000), "attention_bias", 0, "hidden_act", "silu");
	if (!j) return sg_error(SG_ERR_NOMEM, "qwen3-tts codec: config");
	if (json_object_get(dc, "head_dim")) json_object_set(j, "head_dim", json_object_get(dc, "head_dim"));
	sg_model_desc d = {0};
	sg_status st = sg_model_desc_from_config(j, &d);
	json_decref(j);
	if (st) return sg_error_wrap(st, "qwen3-tts codec: decoder_config");
	int window = geti(dc, "sliding_window", 0);
	for (int i = 0; i < d.n_layer; i++) {
		d.layers[i].kind = window > 0 ? SG_LAYER_SLIDING_ATTN : SG_LAYER_FULL_ATTN;
		d.layers[i].sliding_window = window;
	}
	st = sg_model_build_inner(c->w, c->be, &tr_family, &d, &c->tr);
	sg_model_desc_free(&d);
	if (st) return st;
	/* layer scales folded into the rows of o_proj and down_proj */
	char name[256];
	for (int i = 0; i < c->tr->desc.n_layer && !st; i++) {
		sg_layer_weights *lw = &c->tr->layers[i];
		const char *which[2] = {"self_attn_layer_scale", "mlp_layer_scale"};
		const char *mats[2] = {"self_attn.o_proj", "mlp.down_proj"};
		sg_btensor *dst[2] = {&lw->wo, &lw->down};
		for (int k = 0; k < 2 && !st; k++) {
			float *scale;
			snprintf(name, sizeof(name), "decoder.pre_transformer.layers.%d.%s.scale", i, which[k]);
			st = host_f32(c, name, c->hidden, c->hidden, &scale);
			if (st) break;
			int64_t n0 = dst[k]->ne[0];
			snprintf(name, sizeof(name), "decoder.pre_transformer.layers.%d.%s.weight", i, mats[k]);
			c->be->ops->tensor_free(c->be, dst[k]);
			st = load_mat(c, name, n0, c->hidden, scale, dst[k]);
			sg_free(scale);
		}
	}
	return st;
}

static sg_status load_all(sg_qwen3_tts_codec *c, const char *dir)
{
	const json_t *cfg = c->w->config;
	const json_t *dc = cfg ? json_object_get(cfg, "decoder_config") : NULL;
	if (!json_is_object(dc)) return sg_error(SG_ERR_FORMAT, "qwen3-tts codec: '%s' has no config.json with a decoder_config", dir);
	c->G = geti(dc, "num_quantizers", 16);
	c->bins = geti(dc, "codebook_size", 2048);
	c->cdim = geti(dc, "codebook_dim", 512);
	c->qdim = c->cdim / 2;
	c->latent = geti(dc, "latent_dim", 1024);
	c->hidden = geti(dc, "hidden_size", 1024);
	c->ddim = geti(dc, "decoder_dim", 1536);
	c->rate = geti(cfg, "output_sample_rate", 24000);
	c->n_rates = ints_of(json_object_get(dc, "upsample_rates"), c->rates, QC_MAX_STAGES);
	c->n_ratios = ints_of(json_object_get(dc, "upsampling_ratios"), c->ratios, QC_MAX_STAGES);
	if (c->G < 2 || c->G > QC_MAX_GROUPS || c->bins < 1 || c->qdim < 1 || c->latent < 1 || c->hidden < 1 || c->n_rates < 1 ||
	    c->n_ratios < 1 || c->ddim >> c->n_rates < 1 || c->rate < 1)
		return sg_error(SG_ERR_FORMAT, "qwen3-tts codec: decoder_config: %d quantizers of %d codes, dims %d/%d/%d/%d, %d rates, %d ratios",
				c->G, c->bins, c->cdim, c->latent, c->hidden, c->ddim, c->n_rates, c->n_ratios);
	c->up = 1;
	for (int i = 0; i < c->n_rates; i++) c->up *= c->rates[i];
	for (int i = 0; i < c->n_ratios; i++) c->up *= c->ratios[i];
	char name[256];
	sg_status st = SG_OK;
	for (int g = 0; g < c->G && !st; g++) {
		const char *q = g ? "rest" : "first";
		int l = g ? g - 1 : 0;
		float *sum = NULL, *use = NULL;
		snprintf(name, sizeof(name), "decoder.quantizer.rvq_%s.vq.layers.%d._codebook.embedding_sum", q, l);
		st = host_f32(c, name, (int64_t)c->bins * c->qdim, c->qdim, &sum);
		snprintf(name, sizeof(name), "decoder.quantizer.rvq_%s.vq.layers.%d._codebook.cluster_usage", q, l);
		if (!st) st = host_f32(c, name, c->bins, c->bins, &use);
		if (!st)
			for (int b = 0; b < c->bins; b++) {
				float u = use[b] < 1e-5f ? 1e-5f : use[b];
				for (int i = 0; i < c->qdim; i++) sum[(size_t)b * c->qdim + i] /= u;
			}
		sg_free(use);
		c->cb[g] = st ? (sg_free(sum), NULL) : sum;
	}
	if (!st) st = load_mat(c, "decoder.quantizer.rvq_first.output_proj.weight", c->qdim, c->cdim, NULL, &c->out_first);
	if (!st) st = load_mat(c, "decoder.quantizer.rvq_rest.output_proj.weight", c->qdim, c->cdim, NULL, &c->out_rest);
	if (!st) st = load_conv(c, "decoder.pre_conv.conv", c->cdim, c->latent, 3, 1, 1, 0, 1, &c->pre);
	if (!st) st = load_mat(c, "decoder.pre_transformer.input_proj.weight", c->latent, c->hidden, NULL, &c->in_proj);
	if (!st) st = load_mat(c, "decoder.pre_transformer.input_proj.bias", c->hidden, 1, NULL, &c->in_proj_b);
	if (!st) st = load_mat(c, "decoder.pre_transformer.output_proj.weight", c->hidden, c->latent, NULL, &c->out_proj);
	if (!st) st = load_mat(c, "decoder.pre_transformer.output_proj.bias", c->latent, 1, NULL, &c->out_proj_b);
	if (!st) st = load_transformer(c, dc);
	int L = c->latent;
	for (int i = 0; i < c->n_ratios && !st; i++) {
		qc_convnext *x = &c->nx[i];
		char p[128];
		float *gamma = NULL, *b2 = NULL;
		snprintf(p, sizeof(p), "decoder.upsample.%d.0.conv", i);
		st = load_conv(c, p, L, L, c->ratios[i], 1, 1, 1, c->ratios[i], &x->up);
		snprintf(p, sizeof(p), "decoder.upsample.%d.1.dwconv.conv", i);
		if (!st) st = load_conv(c, p, L, L, 7, 1, L, 0, 1, &x->dw);
		snprintf(name, sizeof(name), "decoder.upsample.%d.1.norm.weight", i);
		if (!st) st = load_mat(c, name, L, 1, NULL, &x->ln_w);
		snprintf(name, sizeof(name), "decoder.upsample.%d.1.norm.bias", i);
		if (!st) st = load_mat(c, name, L, 1, NULL, &x->ln_b);
		snprintf(name, sizeof(name), "decoder.upsample.%d.1.pwconv1.weight", i);
		if (!st) st = load_mat(c, name, L, 4 * L, NULL, &x->pw1);
		snprintf(name, sizeof(name), "decoder.upsample.%d.1.pwconv1.bias", i);
		if (!st) st = load_mat(c, name, 4 * L, 1, NULL, &x->pw1b);
		snprintf(name, sizeof(name), "decoder.upsample.%d.1.gamma", i);
		if (!st) st = host_f32(c, name, L, L, &gamma);
		snprintf(name, sizeof(name), "decoder.upsample.%d.1.pwconv2.weight", i);
		if (!st) st = load_mat(c, name, 4 * L, L, gamma, &x->pw2);
		snprintf(name, sizeof(name), "decoder.upsample.%d.1.pwconv2.bias", i);
		if (!st) st = host_f32(c, name, L, L, &b2);
		if (!st) {
			for (int k = 0; k < L; k++) b2[k] *= gamma[k];
			st = put(c, b2, L, 1, 1, &x->pw2b);
		}
		sg_free(gamma);
		sg_free(b2);
	}
	if (!st) st = load_conv(c, "decoder.decoder.0.conv", L, c->ddim, 7, 1, 1, 0, 1, &c->dec0);
	for (int i = 0; i < c->n_rates && !st; i++) {
		qc_block *b = &c->blk[i];
		int in = c->ddim >> i, out = c->ddim >> (i + 1), r = c->rates[i];
		char p[128];
		snprintf(p, sizeof(p), "decoder.decoder.%d.block.0", i + 1);
		st = load_snake(c, p, in, &b->s);
		snprintf(p, sizeof(p), "decoder.decoder.%d.block.1.conv", i + 1);
		if (!st) st = load_conv(c, p, in, out, 2 * r, 1, 1, 1, r, &b->up);
		const int dils[3] = {1, 3, 9};
		for (int k = 0; k < 3 && !st; k++) {
			qc_res *u = &b->res[k];
			snprintf(p, sizeof(p), "decoder.decoder.%d.block.%d.act1", i + 1, k + 2);
			st = load_snake(c, p, out, &u->s1);
			snprintf(p, sizeof(p), "decoder.decoder.%d.block.%d.conv1.conv", i + 1, k + 2);
			if (!st) st = load_conv(c, p, out, out, 7, dils[k], 1, 0, 1, &u->c1);
			snprintf(p, sizeof(p), "decoder.decoder.%d.block.%d.act2", i + 1, k + 2);
			if (!st) st = load_snake(c, p, out, &u->s2);
			snprintf(p, sizeof(p), "decoder.decoder.%d.block.%d.conv2.conv", i + 1, k + 2);
			if (!st) st = load_conv(c, p, out, out, 1, 1, 1, 0, 1, &u->c2);
		}
	}
	int od = c->ddim >> c->n_rates;
	snprintf(name, sizeof(name), "decoder.decoder.%d", c->n_rates + 1);
	if (!st) st = load_snake(c, name, od, &c->s_out);
	snprintf(name, sizeof(name), "decoder.decoder.%d.conv", c->n_rates + 2);
	if (!st) st = load_conv(c, name, od, 1, 7, 1, 1, 0, 1, &c->dec_out);
	return st;
}

sg_status sg_qwen3_tts_codec_load(const char *dir, sg_backend *be, sg_qwen3_tts_codec **out)
{
	*out = NULL;
	if (!be->ops->conv1d || !be->ops->conv_transpose1d || !be->ops->snake || !be->ops->gelu || !be->ops->layernorm)
		return sg_error(SG_ERR_UNSUPPORTED, "qwen3-tts codec: the %s backend has no convolution ops", be->ops->name);
	sg_qwen3_tts_codec *c = sg_calloc(1, sizeof(*c));
	if (!c) return sg_error(SG_ERR_NOMEM, "qwen3-tts codec");
	c->be = be;
	sg_status st = sg_weights_open(dir, &c->w);
	if (!st) st = load_all(c, dir);
	if (st) {
		sg_error_wrap(st, "'%s'", dir);
		sg_qwen3_tts_codec_free(c);
		return st;
	}
	*out = c;
	return SG_OK;
}

static void free_t(sg_backend *be, sg_btensor *t)
{
	if (t->data) be->ops->tensor_free(be, t);
}

static void free_conv(sg_backend *be, qc_conv *cv)
{
	free_t(be, &cv->w); /* frees only what the backend owns: a bound weight in place stays */
	sg_free(cv->host);
	cv->host = NULL;
	free_t(be, &cv->b);
}

static void free_snake(sg_backend *be, qc_snake *s)
{
	free_t(be, &s->a);
	free_t(be, &s->b);
}

void sg_qwen3_tts_codec_free(sg_qwen3_tts_codec *c)
{
	if (!c) return;
	sg_backend *be = c->be;
	sg_model_free(c->tr);
	for (int g = 0; g < QC_MAX_GROUPS; g++) sg_free(c->cb[g]);
	sg_btensor *ts[] = {&c->out_first, &c->out_rest, &c->in_proj, &c->in_proj_b, &c->out_proj, &c->out_proj_b};
	for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++) free_t(be, ts[i]);
	free_conv(be, &c->pre);
	free_conv(be, &c->dec0);
	free_conv(be, &c->dec_out);
	free_snake(be, &c->s_out);
	for (int i = 0; i < QC_MAX_STAGES; i++) {
		qc_convnext *x = &c->nx[i];
		free_conv(be, &x->up);
		free_conv(be, &x->dw);
		sg_btensor *xs[] = {&x->ln_w, &x->ln_b, &x->pw1, &x->pw1b, &x->pw2, &x->pw2b};
		for (size_t k = 0; k < sizeof(xs) / sizeof(xs[0]); k++) free_t(be, xs[k]);
		qc_block *b = &c->blk[i];
		free_snake(be, &b->s);
		free_conv(be, &b->up);
		for (int k = 0; k < 3; k++) {
			free_snake(be, &b->res[k].s1);
			free_snake(be, &b->res[k].s2);
			free_conv(be, &b->res[k].c1);
			free_conv(be, &b->res[k].c2);
		}
	}
	sg_weights_close(c->w);
	sg_free(c);
}

int sg_qwen3_tts_codec_groups(const sg_qwen3_tts_codec *c) { return c->G; }
int sg_qwen3_tts_codec_sample_rate(const sg_qwen3_tts_codec *c) { return c->rate; }
int sg_qwen3_tts_codec_upsample(const sg_qwen3_tts_codec *c) { return c->up; }

/* ---- forward ---- */

static sg_status alloc2(sg_backend *be, int64_t cols, int64_t rows, sg_btensor *t)
{
	int64_t ne[4] = {cols, rows, 1, 1};
	return be->ops->tensor_alloc(be, SG_TYPE_F32, ne, t);
}

/* *x [T][cin] -> a new [Tout][cout] tensor; the old one is freed */
static sg_status run_conv(sg_qwen3_tts_codec *c, const qc_conv *cv, sg_btensor *x)
{
	sg_backend *be = c->be;
	int64_t T = x->ne[1], Tout = cv->transposed ? T * cv->stride : T;
	sg_btensor y;
	sg_status st = alloc2(be, cv->cout, Tout, &y);
	if (st) return st;
	const sg_btensor *b = cv->b.data ? &cv->b : NULL;
	if (cv->transposed) {
		st = be->ops->conv_transpose1d(be, x, &cv->w, b, cv->stride, &y);
	} else {
		sg_conv_params p = {.stride = 1, .dilation = cv->dil, .groups = cv->groups, .pad = (cv->K - 1) * cv->dil};
		st = be->ops->conv1d(be, x, &cv->w, b, &p, &y);
	}
	be->ops->tensor_free(be, x);
	*x = y;
	return st;
}

static sg_status run_matmul(sg_qwen3_tts_codec *c, const sg_btensor *w, const sg_btensor *b, sg_btensor *x)
{
	sg_backend *be = c->be;
	sg_btensor y;
	sg_status st = alloc2(be, w->ne[1], x->ne[1], &y);
	if (st) return st;
	st = be->ops->matmul(be, w, x, b && b->data ? b : NULL, &y);
	be->ops->tensor_free(be, x);
	*x = y;
	return st;
}

static sg_status copy_of(sg_backend *be, const sg_btensor *x, sg_btensor *y)
{
	sg_status st = alloc2(be, x->ne[0], x->ne[1], y);
	if (st) return st;
	size_t n = sizeof(float) * (size_t)(x->ne[0] * x->ne[1]);
	float *tmp = sg_malloc(n);
	if (!tmp) return sg_error(SG_ERR_NOMEM, "qwen3-tts codec");
	st = be->ops->read(be, x, 0, tmp, n);
	if (!st) st = be->ops->write(be, y, 0, tmp, n);
	sg_free(tmp);
	return st;
}

/* RVQ dequantisation and pre_conv: codes [n][G] -> *x [n][latent] */
static sg_status front(sg_qwen3_tts_codec *c, const int32_t *codes, int n, sg_btensor *x)
{
	sg_backend *be = c->be;
	int q = c->qdim;
	float *h = sg_calloc((size_t)n * (size_t)q * 2, sizeof(float));
	if (!h) return sg_error(SG_ERR_NOMEM, "qwen3-tts codec: %d frames", n);
	float *rest = h + (size_t)n * q;
	for (int t = 0; t < n; t++)
		for (int g = 0; g < c->G; g++) {
			const float *row = c->cb[g] + (size_t)codes[t * c->G + g] * q;
			float *dst = g ? rest + (size_t)t * q : h + (size_t)t * q;
			for (int i = 0; i < q; i++) dst[i] += row[i];
		}
	sg_btensor a, b, ya, yb;
	memset(&ya, 0, sizeof(ya));
	memset(&yb, 0, sizeof(yb));
	sg_status st = alloc2(be, q, n, &a);
	if (!st) st = alloc2(be, q, n, &b);
	if (!st) st = be->ops->write(be, &a, 0, h, sizeof(float) * (size_t)n * q);
	if (!st) st = be->ops->write(be, &b, 0, rest, sizeof(float) * (size_t)n * q);
	sg_free(h);
	if (!st) st = alloc2(be, c->cdim, n, &ya);
	if (!st) st = alloc2(be, c->cdim, n, &yb);
	if (!st) st = be->ops->matmul(be, &c->out_first, &a, NULL, &ya);
	if (!st) st = be->ops->matmul(be, &c->out_rest, &b, NULL, &yb);
	if (!st) st = be->ops->add(be, &ya, &yb, &ya);
	free_t(be, &a), free_t(be, &b), free_t(be, &yb);
	if (st) {
		free_t(be, &ya);
		return st;
	}
	*x = ya;
	return run_conv(c, &c->pre, x);
}

/* the transformer over *x [n][latent] in place */
static sg_status transformer(sg_qwen3_tts_codec *c, sg_btensor *x)
{
	sg_backend *be = c->be;
	int n = (int)x->ne[1], H = c->hidden;
	sg_status st = run_matmul(c, &c->in_proj, &c->in_proj_b, x);
	if (st) return st;
	float *h = sg_malloc(sizeof(float) * (size_t)n * H);
	if (!h) return sg_error(SG_ERR_NOMEM, "qwen3-tts codec: %d frames", n);
	st = be->ops->read(be, x, 0, h, sizeof(float) * (size_t)n * H);
	sg_fwd_state s;
	memset(&s, 0, sizeof(s));
	if (!st) st = sg_fwd_state_init(c->tr, n, n, SG_TYPE_F32, &s);
	if (!st) st = sg_forward_embd(c->tr, &s, h, n, 0, SG_LOGITS_NONE);
	sg_free(h);
	if (!st) {
		sg_btensor xs = sg_btensor_rows_view(&s.x, 0, n);
		st = be->ops->rmsnorm(be, &xs, &c->tr->out_norm, c->tr->desc.norm_eps, 0.0f, x);
	}
	if (s.kv) sg_fwd_state_free(c->tr, &s);
	if (!st) st = run_matmul(c, &c->out_proj, &c->out_proj_b, x);
	return st;
}

static sg_status snake(sg_qwen3_tts_codec *c, const qc_snake *s, const sg_btensor *x, sg_btensor *y)
{
	return c->be->ops->snake(c->be, x, &s->a, &s->b, y);
}

static sg_status convnext(sg_qwen3_tts_codec *c, const qc_convnext *nx, sg_btensor *x)
{
	sg_backend *be = c->be;
	sg_status st = run_conv(c, &nx->up, x);
	sg_btensor h;
	if (!st) st = copy_of(be, x, &h);
	if (st) return st;
	st = run_conv(c, &nx->dw, &h);
	if (!st) st = be->ops->layernorm(be, &h, &nx->ln_w, &nx->ln_b, 1e-6f, &h);
	if (!st) st = run_matmul(c, &nx->pw1, &nx->pw1b, &h);
	if (!st) st = be->ops->gelu(be, &h, &h);
	if (!st) st = run_matmul(c, &nx->pw2, &nx->pw2b, &h);
	if (!st) st = be->ops->add(be, x, &h, x);
	free_t(be, &h);
	return st;
}

static sg_status residual(sg_qwen3_tts_codec *c, const qc_res *u, sg_btensor *x)
{
	sg_backend *be = c->be;
	sg_btensor h;
	sg_status st = alloc2(be, x->ne[0], x->ne[1], &h);
	if (st) return st;
	st = snake(c, &u->s1, x, &h);
	if (!st) st = run_conv(c, &u->c1, &h);
	if (!st) st = snake(c, &u->s2, &h, &h);
	if (!st) st = run_conv(c, &u->c2, &h);
	if (!st) st = be->ops->add(be, x, &h, x);
	free_t(be, &h);
	return st;
}

sg_status sg_qwen3_tts_codec_decode(sg_qwen3_tts_codec *c, const int32_t *codes, int n, float *wav)
{
	if (n < 1) return sg_error(SG_ERR_INVALID_ARG, "qwen3-tts codec: %d frames", n);
	for (int i = 0; i < n * c->G; i++)
		if (codes[i] < 0 || codes[i] >= c->bins)
			return sg_error(SG_ERR_INVALID_ARG, "qwen3-tts codec: code %d of frame %d is outside [0, %d)", codes[i], i / c->G, c->bins);
	sg_backend *be = c->be;
	sg_btensor x;
	sg_status st = front(c, codes, n, &x);
	if (st) return st;
	st = transformer(c, &x);
	for (int i = 0; i < c->n_ratios && !st; i++) st = convnext(c, &c->nx[i], &x);
	if (!st) st = run_conv(c, &c->dec0, &x);
	for (int i = 0; i < c->n_rates && !st; i++) {
		const qc_block *b = &c->blk[i];
		st = snake(c, &b->s, &x, &x);
		if (!st) st = run_conv(c, &b->up, &x);
		for (int k = 0; k < 3 && !st; k++) st = residual(c, &b->res[k], &x);
	}
	if (!st) st = snake(c, &c->s_out, &x, &x);
	if (!st) st = run_conv(c, &c->dec_out, &x);
	if (!st) st = be->ops->read(be, &x, 0, wav, sizeof(float) * (size_t)n * (size_t)c->up);
	free_t(be, &x);
	if (st) return st;
	for (int64_t i = 0; i < (int64_t)n * c->up; i++) wav[i] = wav[i] < -1.0f ? -1.0f : wav[i] > 1.0f ? 1.0f : wav[i];
	return SG_OK;
}

/* ---- streaming ---- */

struct sg_qwen3_tts_stream {
	sg_qwen3_tts_codec *c;
	int chunk, context, first;
	sg_qwen3_tts_pcm_fn emit;
	void *user;
	int32_t *codes;
	int n, cap, done; /* frames held, room, frames already decoded */
	int base;         /* frames given as context only (sg_qwen3_tts_stream_prefix) */
	float *wav;
	int wav_cap;
};

sg_status sg_qwen3_tts_stream_open(sg_qwen3_tts_codec *c, int chunk, int context, sg_qwen3_tts_pcm_fn emit, void *user,
				   sg_qwen3_tts_stream **out)
{
	*out = NULL;
	if (chunk < 1 || context < 0 || chunk > 4096 || context > 4096)
		return sg_error(SG_ERR_INVALID_ARG, "qwen3-tts codec: chunk %d, context %d", chunk, context);
	sg_qwen3_tts_stream *s = sg_calloc(1, sizeof(*s));
	if (!s) return sg_error(SG_ERR_NOMEM, "qwen3-tts codec stream");
	*s = (sg_qwen3_tts_stream){.c = c, .chunk = chunk, .context = context, .first = chunk, .emit = emit, .user = user};
	*out = s;
	return SG_OK;
}

void sg_qwen3_tts_stream_first_chunk(sg_qwen3_tts_stream *s, int first) { s->first = first > 0 ? first : s->chunk; }

static sg_status decode_pending(sg_qwen3_tts_stream *s, int end)
{
	sg_qwen3_tts_codec *c = s->c;
	int start = s->done, ctx = start < s->context ? start : s->context;
	int n = end - (start - ctx);
	if (n > s->wav_cap) {
		float *w = sg_realloc(s->wav, sizeof(float) * (size_t)n * (size_t)c->up);
		if (!w) return sg_error(SG_ERR_NOMEM, "qwen3-tts codec: %d frames", n);
		s->wav = w;
		s->wav_cap = n;
	}
	sg_status st = sg_qwen3_tts_codec_decode(c, s->codes + (size_t)(start - ctx) * c->G, n, s->wav);
	if (st) return st;
	s->done = end;
	if (s->emit && s->emit(s->wav + (size_t)ctx * c->up, (size_t)(end - start) * (size_t)c->up, s->user))
		return sg_error(SG_ERR_CANCELLED, "qwen3-tts: audio stopped by its receiver");
	return SG_OK;
}

sg_status sg_qwen3_tts_stream_push(sg_qwen3_tts_stream *s, const int32_t *frame)
{
	int G = s->c->G;
	if (s->n == s->cap) {
		int cap = s->cap ? s->cap * 2 : 64;
		int32_t *v = sg_realloc(s->codes, sizeof(int32_t) * (size_t)cap * (size_t)G);
		if (!v) return sg_error(SG_ERR_NOMEM, "qwen3-tts codec: %d frames", cap);
		s->codes = v;
		s->cap = cap;
	}
	memcpy(s->codes + (size_t)s->n * G, frame, sizeof(int32_t) * (size_t)G);
	s->n++;
	int want = s->done > s->base ? s->chunk : s->first;
	return s->n - s->done >= want ? decode_pending(s, s->n) : SG_OK;
}

sg_status sg_qwen3_tts_stream_prefix(sg_qwen3_tts_stream *s, const int32_t *codes, int n)
{
	if (s->n || n < 0) return sg_error(SG_ERR_INVALID_ARG, "qwen3-tts codec: a prefix of %d frames after %d frames", n, s->n);
	for (int i = 0; i < n * s->c->G; i++)
		if (codes[i] < 0 || codes[i] >= s->c->bins)
			return sg_error(SG_ERR_INVALID_ARG, "qwen3-tts codec: code %d of frame %d is outside [0, %d)", codes[i], i / s->c->G, s->c->bins);
	int32_t *v = sg_malloc(sizeof(int32_t) * (size_t)(n + 64) * (size_t)s->c->G);
	if (!v) return sg_error(SG_ERR_NOMEM, "qwen3-tts codec: %d frames", n);
	memcpy(v, codes, sizeof(int32_t) * (size_t)n * (size_t)s->c->G);
	sg_free(s->codes);
	s->codes = v;
	s->cap = n + 64;
	s->n = s->done = s->base = n;
	return SG_OK;
}

sg_status sg_qwen3_tts_stream_finish(sg_qwen3_tts_stream *s)
{
	return s->n > s->done ? decode_pending(s, s->n) : SG_OK;
}

void sg_qwen3_tts_stream_free(sg_qwen3_tts_stream *s)
{
	if (!s) return;
	sg_free(s->codes);
	sg_free(s->wav);
	sg_free(s);
}
