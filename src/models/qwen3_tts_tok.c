/* The 12 Hz speech tokenizer's encoder (see qwen3_tts_tok.h). Activations are host [T][C]. */
#include "models/qwen3_tts_tok.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "formats/weights.h"
#include "models/qwen3_tts_conv.h"

#define TOK_MAX_STAGES 8
#define TOK_MAX_RES    4
#define TOK_MAX_LAYERS 64
#define TOK_MAX_Q      64

typedef struct tok_res {
	sg_qtts_conv c1, c2;
} tok_res;

typedef struct tok_layer {
	float *ln1_w, *ln1_b, *ln2_w, *ln2_b, *ls_attn, *ls_mlp; /* [D] host */
	sg_qtts_conv q, k, v, o, fc1, fc2;
} tok_layer;

struct sg_qwen3_tts_tok {
	sg_weights *w;
	sg_backend *be;
	int rate, G, hop, nst, nres, D, nl, nh, nkv, hd, ffn, cdim, bins, down_rate, has_down;
	float eps, theta;
	int ratios[TOK_MAX_STAGES]; /* in the encoder's order (the config's reversed) */
	sg_qtts_conv c0, last, down;
	sg_qtts_conv up[TOK_MAX_STAGES];
	tok_res res[TOK_MAX_STAGES][TOK_MAX_RES];
	tok_layer L[TOK_MAX_LAYERS];
	sg_qtts_conv proj_sem, proj_ac;
	float
	    *cb[TOK_MAX_Q]; /* [bins][cdim]: embed_sum / max(cluster_usage, 1e-5); 0 semantic, 1.. acoustic */
};

static int geti(const json_t *o, const char *k, int d)
{
	const json_t *v = json_object_get(o, k);
	return json_is_integer(v) ? (int)json_integer_value(v) : d;
}

static double getf(const json_t *o, const char *k, double d)
{
	const json_t *v = json_object_get(o, k);
	return json_is_number(v) ? json_number_value(v) : d;
}

void sg_qwen3_tts_tok_free(sg_qwen3_tts_tok *t)
{
	if (!t) return;
	sg_qtts_conv_free(&t->c0), sg_qtts_conv_free(&t->last), sg_qtts_conv_free(&t->down);
	sg_qtts_conv_free(&t->proj_sem), sg_qtts_conv_free(&t->proj_ac);
	for (int i = 0; i < TOK_MAX_STAGES; i++) {
		sg_qtts_conv_free(&t->up[i]);
		for (int j = 0; j < TOK_MAX_RES; j++)
			sg_qtts_conv_free(&t->res[i][j].c1), sg_qtts_conv_free(&t->res[i][j].c2);
	}
	for (int i = 0; i < TOK_MAX_LAYERS; i++) {
		tok_layer *l = &t->L[i];
		sg_free(l->ln1_w), sg_free(l->ln1_b), sg_free(l->ln2_w), sg_free(l->ln2_b),
		    sg_free(l->ls_attn), sg_free(l->ls_mlp);
		sg_qtts_conv *cs[] = {&l->q, &l->k, &l->v, &l->o, &l->fc1, &l->fc2};
		for (int k = 0; k < 6; k++) sg_qtts_conv_free(cs[k]);
	}
	for (int i = 0; i < TOK_MAX_Q; i++) sg_free(t->cb[i]);
	sg_weights_close(t->w);
	sg_free(t);
}

int sg_qwen3_tts_tok_groups(const sg_qwen3_tts_tok *t)
{
	return t->G;
}
int sg_qwen3_tts_tok_sample_rate(const sg_qwen3_tts_tok *t)
{
	return t->rate;
}

static sg_status load_codebook(sg_qwen3_tts_tok *t, const char *rvq, int l, float **out)
{
	char name[200];
	float *sum, *use;
	snprintf(name, sizeof(name), "encoder.quantizer.%s.layers.%d.codebook.embed_sum", rvq, l);
	sg_status st = sg_qtts_host_f32(t->w, name, (int64_t)t->bins * t->cdim, &sum);
	if (st) return st;
	snprintf(name, sizeof(name), "encoder.quantizer.%s.layers.%d.codebook.cluster_usage", rvq, l);
	st = sg_qtts_host_f32(t->w, name, t->bins, &use);
	if (st) {
		sg_free(sum);
		return st;
	}
	for (int b = 0; b < t->bins; b++) {
		float u = use[b] < 1e-5f ? 1e-5f : use[b];
		for (int i = 0; i < t->cdim; i++) sum[(size_t)b * t->cdim + i] /= u;
	}
	sg_free(use);
	*out = sum;
	return SG_OK;
}

static sg_status load_all(sg_qwen3_tts_tok *t, const char *dir)
{
	const json_t *cfg = t->w->config, *ec = cfg ? json_object_get(cfg, "encoder_config") : NULL;
	if (!json_is_object(ec) || !sg_weights_find(t->w, "encoder.encoder.layers.0.conv.weight"))
		return sg_error(SG_ERR_NOT_FOUND,
		                "qwen3-tts: '%s' has no speech tokenizer encoder (encoder_config, encoder.*)",
		                dir);
	const char *pad = json_string_value(json_object_get(ec, "pad_mode"));
	if (pad && strcmp(pad, "constant"))
		return sg_error(SG_ERR_UNSUPPORTED,
		                "qwen3-tts tokenizer encoder: pad_mode '%s' (this build runs 'constant')",
		                pad);
	if (json_is_false(json_object_get(ec, "use_causal_conv")) ||
	    json_is_true(json_object_get(ec, "use_conv_shortcut")))
		return sg_error(
		    SG_ERR_UNSUPPORTED,
		    "qwen3-tts tokenizer encoder: use_causal_conv false or use_conv_shortcut true "
		    "(this build runs causal convolutions without shortcuts)");
	if (geti(ec, "audio_channels", 1) != 1)
		return sg_error(SG_ERR_UNSUPPORTED, "qwen3-tts tokenizer encoder: audio_channels != 1");
	t->rate = geti(cfg, "input_sample_rate", geti(ec, "sampling_rate", 24000));
	t->G = geti(cfg, "encoder_valid_num_quantizers", 16);
	t->down_rate = geti(cfg, "encode_downsample_rate", 1920);
	int nq = geti(ec, "num_quantizers", 32), nsem = geti(ec, "num_semantic_quantizers", 1);
	int nf = geti(ec, "num_filters", 64), K0 = geti(ec, "kernel_size", 7),
	    Kl = geti(ec, "last_kernel_size", 3);
	int Kr = geti(ec, "residual_kernel_size", 3), dg = geti(ec, "dilation_growth_rate", 2),
	    comp = geti(ec, "compress", 2);
	t->nres = geti(ec, "num_residual_layers", 1);
	t->D = geti(ec, "hidden_size", 512), t->nl = geti(ec, "num_hidden_layers", 8),
	t->nh = geti(ec, "num_attention_heads", 8);
	t->nkv = geti(ec, "num_key_value_heads", t->nh),
	t->hd = geti(ec, "head_dim", t->nh > 0 ? t->D / t->nh : 0);
	t->ffn = geti(ec, "intermediate_size", 2048),
	t->cdim = geti(ec, "vector_quantization_hidden_dimension", geti(ec, "codebook_dim", 256));
	t->bins = geti(ec, "codebook_size", 2048);
	t->eps = (float)getf(ec, "norm_eps", 1e-5), t->theta = (float)getf(ec, "rope_theta", 10000.0);
	const char *act = json_string_value(json_object_get(ec, "hidden_act"));
	int ur[TOK_MAX_STAGES];
	const json_t *ua = json_object_get(ec, "upsampling_ratios");
	t->nst = json_is_array(ua) ? (int)json_array_size(ua) : 0;
	for (int i = 0; i < t->nst && i < TOK_MAX_STAGES; i++)
		ur[i] = (int)json_integer_value(json_array_get(ua, (size_t)i));
	if (t->nst < 1 || t->nst > TOK_MAX_STAGES || t->nres < 0 || t->nres > TOK_MAX_RES || t->nl < 0 ||
	    t->nl > TOK_MAX_LAYERS || t->nh < 1 || t->nkv < 1 || t->nh % t->nkv || t->hd < 2 || t->hd % 2 ||
	    t->D < 1 || t->ffn < 1 || t->cdim < 1 || t->bins < 2 || nf < 1 || comp < 1 || K0 < 1 || Kl < 1 ||
	    Kr < 1 || dg < 1 || t->G < 1 || t->G > nq || nsem != 1 || nq > TOK_MAX_Q || t->rate < 1000 ||
	    t->down_rate < 1 || (act && strcmp(act, "gelu")))
		return sg_error(SG_ERR_FORMAT,
		                "qwen3-tts tokenizer encoder: encoder_config: %d ratios, %d residual layers, "
		                "%d layers of %d "
		                "(%d heads of %d, %d kv), %d of %d quantizers (%d semantic), act %s",
		                t->nst, t->nres, t->nl, t->D, t->nh, t->hd, t->nkv, t->G, nq, nsem,
		                act ? act : "gelu");
	t->hop = 1;
	for (int i = 0; i < t->nst; i++) {
		if (ur[i] < 1 || ur[i] > 64)
			return sg_error(SG_ERR_FORMAT, "qwen3-tts tokenizer encoder: upsampling ratio %d",
			                ur[i]);
		t->ratios[i] = ur[t->nst - 1 - i];
		t->hop *= ur[i];
	}
	/* the downsample exists when the frame rate differs from the convolutions' (MimiModel) */
	double efr = ceil((double)t->rate / t->hop);
	const json_t *fj = json_object_get(ec, "frame_rate");
	if (!json_is_number(fj)) fj = json_object_get(ec, "_frame_rate");
	double fr = json_is_number(fj) ? json_number_value(fj) : (double)t->rate / (t->hop * 2.0);
	t->has_down = fr != efr;
	sg_backend *be = t->be;
	const sg_weights *w = t->w;
	char p[200];
	sg_status st = sg_qtts_conv_load(be, w, "encoder.encoder.layers.0.conv", 1, nf, K0, 1, 1, 1, &t->c0);
	int idx = 1, ch = nf;
	for (int s = 0; !st && s < t->nst; s++) {
		for (int j = 0; !st && j < t->nres; j++, idx++) {
			int dil = 1;
			for (int k = 0; k < j; k++) dil *= dg;
			snprintf(p, sizeof(p), "encoder.encoder.layers.%d.block.1.conv", idx);
			st = sg_qtts_conv_load(be, w, p, ch, ch / comp, Kr, dil, 1, 1, &t->res[s][j].c1);
			snprintf(p, sizeof(p), "encoder.encoder.layers.%d.block.3.conv", idx);
			if (!st)
				st = sg_qtts_conv_load(be, w, p, ch / comp, ch, 1, 1, 1, 1, &t->res[s][j].c2);
		}
		idx++; /* ELU */
		snprintf(p, sizeof(p), "encoder.encoder.layers.%d.conv", idx++);
		if (!st)
			st = sg_qtts_conv_load(be, w, p, ch, 2 * ch, 2 * t->ratios[s], 1, t->ratios[s], 1,
			                       &t->up[s]);
		ch *= 2;
	}
	idx++; /* ELU */
	snprintf(p, sizeof(p), "encoder.encoder.layers.%d.conv", idx);
	if (!st) st = sg_qtts_conv_load(be, w, p, ch, t->D, Kl, 1, 1, 1, &t->last);
	int qd = t->nh * t->hd, kd = t->nkv * t->hd;
	for (int i = 0; !st && i < t->nl; i++) {
		tok_layer *l = &t->L[i];
		const char *vec[6] = {"input_layernorm.weight",          "input_layernorm.bias",
		                      "post_attention_layernorm.weight", "post_attention_layernorm.bias",
		                      "self_attn_layer_scale.scale",     "mlp_layer_scale.scale"};
		float **dst[6] = {&l->ln1_w, &l->ln1_b, &l->ln2_w, &l->ln2_b, &l->ls_attn, &l->ls_mlp};
		for (int k = 0; !st && k < 6; k++) {
			snprintf(p, sizeof(p), "encoder.encoder_transformer.layers.%d.%s", i, vec[k]);
			st = sg_qtts_host_f32(w, p, t->D, dst[k]);
		}
		const char *mats[6] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
		                       "self_attn.o_proj", "mlp.fc1",          "mlp.fc2"};
		sg_qtts_conv *mc[6] = {&l->q, &l->k, &l->v, &l->o, &l->fc1, &l->fc2};
		int in[6] = {t->D, t->D, t->D, qd, t->D, t->ffn}, out[6] = {qd, kd, kd, t->D, t->ffn, t->D};
		for (int k = 0; !st && k < 6; k++) {
			snprintf(p, sizeof(p), "encoder.encoder_transformer.layers.%d.%s", i, mats[k]);
			st = sg_qtts_conv_load(be, w, p, in[k], out[k], 1, 1, 1, 0, mc[k]);
		}
	}
	if (!st && t->has_down) {
		int r = (int)(efr / fr);
		if (r < 1)
			st = sg_error(SG_ERR_FORMAT,
			              "qwen3-tts tokenizer encoder: frame rate %g above the convolutions' %g",
			              fr, efr);
		else
			st = sg_qtts_conv_load(be, w, "encoder.downsample.conv", t->D, t->D, 2 * r, 1, 2, 0,
			                       &t->down);
	}
	if (!st)
		st = sg_qtts_conv_load(be, w,
		                       "encoder.quantizer.semantic_residual_vector_quantizer.input_proj",
		                       t->D, t->cdim, 1, 1, 1, 0, &t->proj_sem);
	if (!st && t->G > 1)
		st = sg_qtts_conv_load(be, w,
		                       "encoder.quantizer.acoustic_residual_vector_quantizer.input_proj",
		                       t->D, t->cdim, 1, 1, 1, 0, &t->proj_ac);
	if (!st) st = load_codebook(t, "semantic_residual_vector_quantizer", 0, &t->cb[0]);
	for (int g = 1; !st && g < t->G; g++)
		st = load_codebook(t, "acoustic_residual_vector_quantizer", g - 1, &t->cb[g]);
	return st;
}

sg_status sg_qwen3_tts_tok_load(const char *dir, sg_backend *be, sg_qwen3_tts_tok **out)
{
	*out = NULL;
	if (!be->ops->conv1d)
		return sg_error(SG_ERR_UNSUPPORTED,
		                "qwen3-tts tokenizer encoder: the %s backend has no conv1d", be->ops->name);
	sg_qwen3_tts_tok *t = sg_calloc(1, sizeof(*t));
	if (!t) return sg_error(SG_ERR_NOMEM, "qwen3-tts tokenizer encoder");
	t->be = be;
	sg_status st = sg_weights_open(dir, &t->w);
	if (!st) st = load_all(t, dir);
	if (st) {
		sg_qwen3_tts_tok_free(t);
		return st;
	}
	*out = t;
	return SG_OK;
}

/* ---- forward ---- */

static void elu(float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (x[i] <= 0) x[i] = expm1f(x[i]);
}

/* A causal conv as MimiConv1d runs it: (K_eff - stride) rows on the left and enough on the right
 * for a whole last stride, zeros (replicate 0) or the edge rows repeated (replicate 1); *x [T][cin]
 * is replaced by [ceil(T / stride)][cout]. */
static sg_status causal_conv(sg_qtts_conv *c, float **x, int *T, int replicate)
{
	int Ke = (c->K - 1) * c->dil + 1, s = c->stride, left = Ke - s, To = (*T + s - 1) / s,
	    right = To * s - *T;
	int Tp = *T + left + right, n;
	float *xp = sg_calloc((size_t)Tp * (size_t)c->cin, sizeof(float));
	float *y = sg_malloc(sizeof(float) * (size_t)To * (size_t)c->cout);
	if (!xp || !y) {
		sg_free(xp), sg_free(y);
		return sg_error(SG_ERR_NOMEM, "qwen3-tts tokenizer encoder: %d rows", Tp);
	}
	for (int t = 0; t < Tp; t++) {
		int j = t - left;
		if (replicate)
			j = j < 0 ? 0 : j >= *T ? *T - 1 : j;
		else if (j < 0 || j >= *T)
			continue;
		memcpy(xp + (size_t)t * c->cin, *x + (size_t)j * c->cin, sizeof(float) * (size_t)c->cin);
	}
	sg_status st = sg_qtts_conv_run(c, xp, Tp, y, &n);
	sg_free(xp);
	if (!st && n != To)
		st = sg_error(SG_ERR_INTERNAL, "qwen3-tts tokenizer encoder: %d rows, expected %d", n, To);
	if (st) {
		sg_free(y);
		return st;
	}
	sg_free(*x);
	*x = y;
	*T = To;
	return SG_OK;
}

static void layernorm(const float *x, const float *w, const float *b, float eps, int T, int D, float *y)
{
	for (int t = 0; t < T; t++) {
		const float *r = x + (size_t)t * D;
		double mu = 0, var = 0;
		for (int i = 0; i < D; i++) mu += r[i];
		mu /= D;
		for (int i = 0; i < D; i++) var += (r[i] - mu) * (r[i] - mu);
		float inv = (float)(1.0 / sqrt(var / D + eps));
		for (int i = 0; i < D; i++) y[(size_t)t * D + i] = (float)(r[i] - mu) * inv * w[i] + b[i];
	}
}

/* rotate-half rope at positions 0..T-1 over rows of n heads of hd, in place */
static void rope(float *x, int T, int n, int hd, float theta)
{
	int h2 = hd / 2;
	for (int t = 0; t < T; t++)
		for (int i = 0; i < h2; i++) {
			/* float32 throughout, as the reference computes its cos/sin tables */
			float inv = 1.0f / powf(theta, (float)(2 * i) / (float)hd), a = (float)t * inv,
			      c = cosf(a), s = sinf(a);
			for (int h = 0; h < n; h++) {
				float *r = x + ((size_t)t * n + h) * hd;
				float x0 = r[i], x1 = r[i + h2];
				r[i] = x0 * c - x1 * s;
				r[i + h2] = x1 * c + x0 * s;
			}
		}
}

static sg_status layer(sg_qwen3_tts_tok *t, tok_layer *l, float *x, int T)
{
	int D = t->D, qd = t->nh * t->hd, kd = t->nkv * t->hd, n, rep = t->nh / t->nkv;
	size_t big = (size_t)T * (size_t)(qd > t->ffn ? (qd > D ? qd : D) : (t->ffn > D ? t->ffn : D));
	float *h = sg_malloc(sizeof(float) * (size_t)T * D), *q = sg_malloc(sizeof(float) * (size_t)T * qd);
	float *k = sg_malloc(sizeof(float) * (size_t)T * kd), *v = sg_malloc(sizeof(float) * (size_t)T * kd);
	float *a = sg_malloc(sizeof(float) * big), *o = sg_malloc(sizeof(float) * big),
	      *p = sg_malloc(sizeof(float) * (size_t)T);
	sg_status st = h && q && k && v && a && o && p
	                   ? SG_OK
	                   : sg_error(SG_ERR_NOMEM, "qwen3-tts tokenizer encoder: %d frames", T);
	if (!st) {
		layernorm(x, l->ln1_w, l->ln1_b, t->eps, T, D, h);
		st = sg_qtts_conv_run(&l->q, h, T, q, &n);
	}
	if (!st) st = sg_qtts_conv_run(&l->k, h, T, k, &n);
	if (!st) st = sg_qtts_conv_run(&l->v, h, T, v, &n);
	if (!st) {
		rope(q, T, t->nh, t->hd, t->theta);
		rope(k, T, t->nkv, t->hd, t->theta);
		float scale = 1.0f / sqrtf((float)t->hd);
		/* causal attention over every earlier frame: transformers' Mimi builds a plain causal
		 * mask (its sliding_window is not applied) */
		for (int hh = 0; hh < t->nh; hh++) {
			int kh = hh / rep;
			for (int i = 0; i < T; i++) {
				const float *qi = q + ((size_t)i * t->nh + hh) * t->hd;
				float mx = -INFINITY;
				for (int j = 0; j <= i; j++) {
					const float *kj = k + ((size_t)j * t->nkv + kh) * t->hd;
					float s = 0;
					for (int e = 0; e < t->hd; e++) s += qi[e] * kj[e];
					p[j] = s * scale;
					if (p[j] > mx) mx = p[j];
				}
				double sum = 0;
				for (int j = 0; j <= i; j++) sum += p[j] = expf(p[j] - mx);
				float *oi = a + ((size_t)i * t->nh + hh) * t->hd;
				memset(oi, 0, sizeof(float) * (size_t)t->hd);
				for (int j = 0; j <= i; j++) {
					const float *vj = v + ((size_t)j * t->nkv + kh) * t->hd;
					float wgt = (float)(p[j] / sum);
					for (int e = 0; e < t->hd; e++) oi[e] += wgt * vj[e];
				}
			}
		}
		st = sg_qtts_conv_run(&l->o, a, T, o, &n);
	}
	if (!st) {
		for (int tt = 0; tt < T; tt++)
			for (int i = 0; i < D; i++)
				x[(size_t)tt * D + i] += l->ls_attn[i] * o[(size_t)tt * D + i];
		layernorm(x, l->ln2_w, l->ln2_b, t->eps, T, D, h);
		st = sg_qtts_conv_run(&l->fc1, h, T, a, &n);
	}
	if (!st) {
		for (size_t i = 0; i < (size_t)T * t->ffn; i++)
			a[i] = 0.5f * a[i] * (1.0f + erff(a[i] * (float)M_SQRT1_2));
		st = sg_qtts_conv_run(&l->fc2, a, T, o, &n);
	}
	if (!st)
		for (int tt = 0; tt < T; tt++)
			for (int i = 0; i < D; i++)
				x[(size_t)tt * D + i] += l->ls_mlp[i] * o[(size_t)tt * D + i];
	sg_free(h), sg_free(q), sg_free(k), sg_free(v), sg_free(a), sg_free(o), sg_free(p);
	return st;
}

/* nearest codes of the residual quantizer g0.. g1-1 for frames x [T][cdim] (consumed) */
static void rvq(sg_qwen3_tts_tok *t, float *x, int T, int g0, int g1, int32_t *codes)
{
	int C = t->cdim;
	for (int f = 0; f < T; f++) {
		float *r = x + (size_t)f * C;
		for (int g = g0; g < g1; g++) {
			const float *cb = t->cb[g];
			double best = INFINITY;
			int bi = 0;
			for (int b = 0; b < t->bins; b++) {
				double d = 0;
				for (int i = 0; i < C; i++) {
					double e = (double)r[i] - cb[(size_t)b * C + i];
					d += e * e;
				}
				if (d < best) best = d, bi = b;
			}
			codes[(size_t)f * t->G + g] = bi;
			for (int i = 0; i < C; i++) r[i] -= cb[(size_t)bi * C + i];
		}
	}
}

sg_status sg_qwen3_tts_tok_encode(sg_qwen3_tts_tok *t, const float *pcm, size_t n, int32_t **codes,
                                  int *n_frames)
{
	*codes = NULL;
	*n_frames = 0;
	int keep = (int)((n + (size_t)t->down_rate - 1) / (size_t)t->down_rate);
	if (!pcm || n < 1 || n > (size_t)t->rate * 600)
		return sg_error(SG_ERR_INVALID_ARG,
		                "qwen3-tts tokenizer encoder: %zu samples (1 to 10 minutes at %d Hz)", n,
		                t->rate);
	int T = (int)n;
	float *x = sg_malloc(sizeof(float) * n);
	if (!x) return sg_error(SG_ERR_NOMEM, "qwen3-tts tokenizer encoder: %zu samples", n);
	memcpy(x, pcm, sizeof(float) * n);
	sg_status st = causal_conv(&t->c0, &x, &T, 0);
	for (int s = 0; !st && s < t->nst; s++) {
		int C = t->up[s].cin;
		for (int j = 0; !st && j < t->nres; j++) {
			float *h = sg_malloc(sizeof(float) * (size_t)T * C);
			if (!h) {
				st = sg_error(SG_ERR_NOMEM, "qwen3-tts tokenizer encoder");
				break;
			}
			memcpy(h, x, sizeof(float) * (size_t)T * C);
			int Th = T;
			elu(h, (size_t)T * C);
			st = causal_conv(&t->res[s][j].c1, &h, &Th, 0);
			if (!st) elu(h, (size_t)Th * t->res[s][j].c1.cout);
			if (!st) st = causal_conv(&t->res[s][j].c2, &h, &Th, 0);
			if (!st)
				for (size_t i = 0; i < (size_t)T * C; i++) x[i] += h[i];
			sg_free(h);
		}
		if (!st) {
			elu(x, (size_t)T * C);
			st = causal_conv(&t->up[s], &x, &T, 0);
		}
	}
	if (!st) {
		elu(x, (size_t)T * t->last.cin);
		st = causal_conv(&t->last, &x, &T, 0);
	}
	for (int i = 0; !st && i < t->nl; i++) st = layer(t, &t->L[i], x, T);
	if (!st && t->has_down) st = causal_conv(&t->down, &x, &T, 1);
	int32_t *c = NULL;
	float *e = NULL;
	if (!st) {
		if (keep > T) keep = T;
		c = sg_malloc(sizeof(int32_t) * (size_t)T * (size_t)t->G);
		e = sg_malloc(sizeof(float) * (size_t)T * (size_t)t->cdim);
		if (!c || !e) st = sg_error(SG_ERR_NOMEM, "qwen3-tts tokenizer encoder: %d frames", T);
	}
	int nn;
	if (!st) st = sg_qtts_conv_run(&t->proj_sem, x, T, e, &nn);
	if (!st) rvq(t, e, T, 0, 1, c);
	if (!st && t->G > 1) st = sg_qtts_conv_run(&t->proj_ac, x, T, e, &nn);
	if (!st && t->G > 1) rvq(t, e, T, 1, t->G, c);
	sg_free(x), sg_free(e);
	if (st) {
		sg_free(c);
		return st;
	}
	*codes = c;
	*n_frames = keep;
	return SG_OK;
}
