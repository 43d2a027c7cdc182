/* VITS (Piper voices): loading from ONNX initializers and the forward (vits.h). */
#include "models/vits.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/flags.h"
#include "formats/onnx.h"
#include "models/vits_internal.h"

/* ---- binding ---- */

static void dims_str(const sg_onnx_tensor *t, char *buf, size_t n)
{
	size_t k = 0;
	buf[0] = 0;
	for (int i = 0; i < t->n_dims && k + 24 < n; i++) k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)t->dims[i]);
}

/* The float tensor name with n dims d[] (a negative d: any). */
static sg_status want(const sg_onnx *o, const char *name, int n, const int64_t *d, const sg_onnx_tensor **out)
{
	const sg_onnx_tensor *t = sg_onnx_find(o, name);
	if (!t) return sg_error(SG_ERR_FORMAT, "piper: weight '%s' is missing (not a Piper VITS export?)", name);
	int ok = t->data_type == SG_ONNX_FLOAT && t->n_dims == n;
	for (int i = 0; ok && i < n; i++) ok = d[i] < 0 || t->dims[i] == d[i];
	if (!ok) {
		char have[96], exp[96];
		size_t k = 0;
		dims_str(t, have, sizeof have);
		exp[0] = 0;
		for (int i = 0; i < n && k + 24 < sizeof exp; i++) k += (size_t)snprintf(exp + k, sizeof exp - k, "%s%lld", i ? ", " : "", (long long)d[i]);
		return sg_error(SG_ERR_FORMAT, "piper: %s: expected float [%s], found type %d [%s]", name, exp, t->data_type, have);
	}
	*out = t;
	return SG_OK;
}

/* The name of input i of the node called node (a weight the exporter renamed), or NULL. */
static const char *node_input(const sg_onnx *o, const char *node, size_t i)
{
	const sg_onnx_node *n = sg_onnx_find_node(o, node);
	return n && n->n_inputs > i && n->inputs[i][0] ? n->inputs[i] : NULL;
}

static int64_t node_attr_int(const sg_onnx *o, const char *node, const char *attr, int64_t dflt)
{
	const sg_onnx_attr *a = sg_onnx_attr_get(sg_onnx_find_node(o, node), attr);
	if (!a) return dflt;
	if (a->n_ints) return a->ints[0];
	return a->has_i ? a->i : dflt;
}

static float node_attr_float(const sg_onnx *o, const char *node, const char *attr, float dflt)
{
	const sg_onnx_attr *a = sg_onnx_attr_get(sg_onnx_find_node(o, node), attr);
	return a && a->has_f ? a->f : dflt;
}

/* The conv1d op's weight {cin, k, n} (w: [n][k][cin]) and the bias view, bound for conv1d alone
 * (the backend may pack it: the repacked copy here is then freed). */
static sg_status bind_weight(sg_vits *v, vconv *c, const float *w, int64_t cin, int64_t k, int64_t n)
{
	c->mat = (sg_btensor){.type = SG_TYPE_F32,
			      .ne = {cin, k, n, 1},
			      .row_bytes = (size_t)cin * 4,
			      .data = (void *)w,
			      .layout = SG_LAYOUT_CONV1D};
	if (c->b) c->bias = (sg_btensor){.type = SG_TYPE_F32, .ne = {n, 1, 1, 1}, .row_bytes = (size_t)n * 4, .data = (void *)c->b};
	sg_status st = v->be->ops->tensor_bind(v->be, &c->mat);
	if (!st && c->owned && c->mat.data != c->owned) {
		sg_free(c->owned);
		c->owned = NULL;
	}
	return st;
}

/* A Conv1d: weight [cout][cin][k] under wname (bias bname or NULL), dilation and pads from node
 * (NULL: dilation 1, "same" padding). Kernels wider than 1 are repacked to [cout][k][cin], the
 * conv1d op's layout. depthwise: weight [c][1][k], applied per channel (no op). */
static sg_status bind_conv(sg_vits *v, vconv *c, const char *wname, const char *bname, int64_t cout, int64_t cin, int64_t k,
			   const char *node, int depthwise)
{
	memset(c, 0, sizeof *c);
	const sg_onnx_tensor *w, *b = NULL;
	int64_t dw[3] = {cout, depthwise ? 1 : cin, k};
	sg_status st = want(v->onnx, wname, 3, dw, &w);
	if (!st && bname) st = want(v->onnx, bname, 1, &cout, &b);
	if (st) return st;
	c->cout = (int)w->dims[0];
	c->cin = depthwise ? c->cout : (int)w->dims[1];
	c->k = (int)w->dims[2];
	c->w = w->data;
	c->b = b ? b->data : NULL;
	c->depthwise = depthwise;
	c->dil = node ? (int)node_attr_int(v->onnx, node, "dilations", 1) : 1;
	c->pad = node ? (int)node_attr_int(v->onnx, node, "pads", (int64_t)c->dil * (c->k - 1) / 2) : c->dil * (c->k - 1) / 2;
	if (c->dil < 1 || c->dil > 4096 || c->pad < 0 || 2 * c->pad != c->dil * (c->k - 1))
		return sg_error(SG_ERR_FORMAT, "piper: %s: dilation %d and padding %d do not keep the length", wname, c->dil, c->pad);
	if (depthwise) return SG_OK;
	const float *m = c->w;
	if (c->k > 1) {
		float *r = sg_malloc(sizeof(float) * (size_t)c->cout * (size_t)c->cin * (size_t)c->k);
		if (!r) return SG_FAIL(SG_ERR_NOMEM, "%s", wname);
		for (int o = 0; o < c->cout; o++)
			for (int i = 0; i < c->cin; i++)
				for (int j = 0; j < c->k; j++)
					r[((size_t)o * c->k + j) * c->cin + i] = c->w[((size_t)o * c->cin + i) * c->k + j];
		c->owned = r;
		m = r;
	}
	return bind_weight(v, c, m, c->cin, c->k, c->cout);
}

/* A ConvTranspose1d: weight [cin][cout][k], repacked to [k][cout][cin] so the product (a 1x1
 * conv1d of k * cout outputs, no bias) gives, per input frame, k output rows of cout values to
 * overlap-add. */
static sg_status bind_convt(sg_vits *v, vconv *c, int i, int64_t cin)
{
	char wn[64], bn[64], node[64];
	snprintf(wn, sizeof wn, "dec.ups.%d.weight", i);
	snprintf(bn, sizeof bn, "dec.ups.%d.bias", i);
	snprintf(node, sizeof node, "/dec/ups.%d/ConvTranspose", i);
	memset(c, 0, sizeof *c);
	const sg_onnx_tensor *w, *b;
	int64_t dw[3] = {cin, -1, -1};
	sg_status st = want(v->onnx, wn, 3, dw, &w);
	int64_t cout = st ? 0 : w->dims[1];
	if (!st) st = want(v->onnx, bn, 1, &cout, &b);
	if (st) return st;
	c->cin = (int)cin;
	c->cout = (int)cout;
	c->k = (int)w->dims[2];
	c->b = b->data;
	c->stride = (int)node_attr_int(v->onnx, node, "strides", 0);
	c->pad = (int)node_attr_int(v->onnx, node, "pads", -1);
	if (c->stride < 1 || c->pad < 0 || c->k < c->stride || c->k - 2 * c->pad != c->stride)
		return sg_error(SG_ERR_FORMAT, "piper: %s: stride %d, kernel %d and padding %d do not upsample by the stride", node, c->stride, c->k,
				c->pad);
	float *r = sg_malloc(sizeof(float) * (size_t)c->cout * (size_t)c->cin * (size_t)c->k);
	if (!r) return SG_FAIL(SG_ERR_NOMEM, "%s", wn);
	const float *src = w->data;
	for (int ci = 0; ci < c->cin; ci++)
		for (int co = 0; co < c->cout; co++)
			for (int j = 0; j < c->k; j++) r[((size_t)j * c->cout + co) * c->cin + ci] = src[((size_t)ci * c->cout + co) * c->k + j];
	c->owned = r;
	sg_status bst = bind_weight(v, c, r, c->cin, 1, (int64_t)c->k * c->cout);
	c->bias = (sg_btensor){0};
	return bst;
}

static sg_status bind_ln(sg_vits *v, vnorm *n, const char *prefix, int64_t ch)
{
	char g[128], b[128];
	snprintf(g, sizeof g, "%s.gamma", prefix);
	snprintf(b, sizeof b, "%s.beta", prefix);
	const sg_onnx_tensor *tg, *tb;
	sg_status st = want(v->onnx, g, 1, &ch, &tg);
	if (!st) st = want(v->onnx, b, 1, &ch, &tb);
	if (st) return st;
	n->g = (sg_btensor){.type = SG_TYPE_F32, .ne = {ch, 1, 1, 1}, .row_bytes = (size_t)ch * 4, .data = (void *)tg->data};
	n->b = (sg_btensor){.type = SG_TYPE_F32, .ne = {ch, 1, 1, 1}, .row_bytes = (size_t)ch * 4, .data = (void *)tb->data};
	return SG_OK;
}

static sg_status bind_dds(sg_vits *v, vdds *d, const char *prefix, int64_t ch)
{
	char a[160], b[160];
	sg_status st = SG_OK;
	for (int i = 0; i < VITS_DDS_LAYERS && !st; i++) {
		snprintf(a, sizeof a, "%s.convs_sep.%d.weight", prefix, i);
		snprintf(b, sizeof b, "%s.convs_sep.%d.bias", prefix, i);
		st = bind_conv(v, &d->sep[i], a, b, ch, 1, 3, NULL, 1);
		if (st) break;
		d->sep[i].dil = i == 0 ? 1 : i == 1 ? 3 : 9; /* kernel_size ** i */
		d->sep[i].pad = d->sep[i].dil;
		snprintf(a, sizeof a, "%s.convs_1x1.%d.weight", prefix, i);
		snprintf(b, sizeof b, "%s.convs_1x1.%d.bias", prefix, i);
		st = bind_conv(v, &d->pw[i], a, b, ch, ch, 1, NULL, 0);
		snprintf(a, sizeof a, "%s.norms_1.%d", prefix, i);
		if (!st) st = bind_ln(v, &d->n1[i], a, ch);
		snprintf(a, sizeof a, "%s.norms_2.%d", prefix, i);
		if (!st) st = bind_ln(v, &d->n2[i], a, ch);
	}
	return st;
}

static sg_status bind_all(sg_vits *v)
{
	const sg_onnx *o = v->onnx;
	char a[160], b[160], node[160];
	sg_status st;
	/* the embedding: the Gather of the text encoder's embedding node (its name varies by export) */
	const char *emb = node_input(o, "/enc_p/emb/Gather", 0);
	if (!emb) emb = "enc_p.emb.weight";
	const sg_onnx_tensor *t;
	int64_t d2[2] = {-1, -1};
	if ((st = want(o, emb, 2, d2, &t))) return st;
	v->n_symbols = (int)t->dims[0];
	int64_t H = t->dims[1];
	v->hidden = (int)H;
	v->emb = t->data;
	if (H < 8 || H > 4096) return sg_error(SG_ERR_FORMAT, "piper: hidden size %lld", (long long)H);
	/* encoder layers: as many as have attention weights */
	for (v->n_layers = 0; v->n_layers < VITS_MAX_LAYERS; v->n_layers++) {
		snprintf(a, sizeof a, "enc_p.encoder.attn_layers.%d.conv_q.weight", v->n_layers);
		if (!sg_onnx_find(o, a)) break;
	}
	if (!v->n_layers) return sg_error(SG_ERR_FORMAT, "piper: no text encoder layers (enc_p.encoder.attn_layers.0.conv_q.weight)");
	snprintf(a, sizeof a, "enc_p.encoder.attn_layers.0.emb_rel_k");
	int64_t d3[3] = {1, -1, -1};
	if ((st = want(o, a, 3, d3, &t))) return st;
	v->head_dim = (int)t->dims[2];
	v->window = (int)(t->dims[1] - 1) / 2;
	if (v->head_dim < 1 || H % v->head_dim || t->dims[1] != 2 * v->window + 1)
		return sg_error(SG_ERR_FORMAT, "piper: relative embeddings [%lld, %lld] do not fit hidden size %lld", (long long)t->dims[1],
				(long long)t->dims[2], (long long)H);
	v->n_heads = (int)(H / v->head_dim);
	const char *qkvo[4] = {"q", "k", "v", "o"};
	for (int l = 0; l < v->n_layers; l++) {
		venc_layer *L = &v->enc[l];
		for (int j = 0; j < 4; j++) {
			snprintf(a, sizeof a, "enc_p.encoder.attn_layers.%d.conv_%s.weight", l, qkvo[j]);
			snprintf(b, sizeof b, "enc_p.encoder.attn_layers.%d.conv_%s.bias", l, qkvo[j]);
			if ((st = bind_conv(v, &L->qkvo[j], a, b, H, H, 1, NULL, 0))) return st;
		}
		int64_t dr[3] = {1, 2 * v->window + 1, v->head_dim};
		snprintf(a, sizeof a, "enc_p.encoder.attn_layers.%d.emb_rel_k", l);
		if ((st = want(o, a, 3, dr, &t))) return st;
		L->rel_k = t->data;
		snprintf(a, sizeof a, "enc_p.encoder.attn_layers.%d.emb_rel_v", l);
		if ((st = want(o, a, 3, dr, &t))) return st;
		L->rel_v = t->data;
		snprintf(a, sizeof a, "enc_p.encoder.norm_layers_1.%d", l);
		if ((st = bind_ln(v, &L->n1, a, H))) return st;
		snprintf(a, sizeof a, "enc_p.encoder.norm_layers_2.%d", l);
		if ((st = bind_ln(v, &L->n2, a, H))) return st;
		snprintf(a, sizeof a, "enc_p.encoder.ffn_layers.%d.conv_1.weight", l);
		int64_t df[3] = {-1, H, -1};
		if ((st = want(o, a, 3, df, &t))) return st;
		int64_t F = t->dims[0], K = t->dims[2];
		snprintf(b, sizeof b, "enc_p.encoder.ffn_layers.%d.conv_1.bias", l);
		if ((st = bind_conv(v, &L->ffn1, a, b, F, H, K, NULL, 0))) return st;
		snprintf(a, sizeof a, "enc_p.encoder.ffn_layers.%d.conv_2.weight", l);
		snprintf(b, sizeof b, "enc_p.encoder.ffn_layers.%d.conv_2.bias", l);
		if ((st = bind_conv(v, &L->ffn2, a, b, H, F, K, NULL, 0))) return st;
	}
	if ((st = bind_conv(v, &v->proj, "enc_p.proj.weight", "enc_p.proj.bias", 2 * H, H, 1, NULL, 0))) return st;
	v->inter = v->hidden; /* the prior's channels: proj gives 2 * inter */

	/* stochastic duration predictor */
	if (!sg_onnx_find(o, "dp.flows.3.proj.weight"))
		return sg_error(SG_ERR_UNSUPPORTED, "piper: the voice has no stochastic duration predictor (dp.flows.*): not supported yet");
	const sg_onnx_tensor *pre;
	int64_t dpw[3] = {-1, H, 1};
	if ((st = want(o, "dp.pre.weight", 3, dpw, &pre))) return st;
	int64_t F = pre->dims[0];
	v->dp_ch = (int)F;
	if ((st = bind_conv(v, &v->dp_pre, "dp.pre.weight", "dp.pre.bias", F, H, 1, NULL, 0))) return st;
	if ((st = bind_dds(v, &v->dp_convs, "dp.convs", F))) return st;
	if ((st = bind_conv(v, &v->dp_proj, "dp.proj.weight", "dp.proj.bias", F, F, 1, NULL, 0))) return st;
	/* the flows run in reverse: 7, 5, 3 (the first conv flow, 1, is left out by the reference) */
	for (int i = 0; i < VITS_DP_FLOWS; i++) {
		vconvflow *cf = &v->dp_flow[i];
		int idx = 7 - 2 * i;
		snprintf(a, sizeof a, "dp.flows.%d.pre.weight", idx);
		snprintf(b, sizeof b, "dp.flows.%d.pre.bias", idx);
		if ((st = bind_conv(v, &cf->pre, a, b, F, 1, 1, NULL, 0))) return st;
		snprintf(a, sizeof a, "dp.flows.%d.convs", idx);
		if ((st = bind_dds(v, &cf->convs, a, F))) return st;
		snprintf(a, sizeof a, "dp.flows.%d.proj.weight", idx);
		int64_t dproj[3] = {-1, F, 1};
		if ((st = want(o, a, 3, dproj, &t))) return st;
		int64_t P = t->dims[0];
		if (P < 5 || (P + 1) % 3) return sg_error(SG_ERR_FORMAT, "piper: %s has %lld outputs (3 * bins - 1)", a, (long long)P);
		cf->bins = (int)(P + 1) / 3;
		snprintf(b, sizeof b, "dp.flows.%d.proj.bias", idx);
		if ((st = bind_conv(v, &cf->proj, a, b, P, F, 1, NULL, 0))) return st;
	}
	int64_t d21[2] = {2, 1};
	if ((st = want(o, "dp.flows.0.m", 2, d21, &t))) return st;
	v->ea_m = t->data;
	/* exp(-logs), folded into a constant by the export: the factor of the affine flow's Mul */
	const char *ea = node_input(o, "/dp/flows.0/Mul", 1);
	if (!ea || (st = want(o, ea, 2, d21, &t))) {
		if ((st = want(o, "dp.flows.0.logs", 2, d21, &t))) return st;
		for (int i = 0; i < 2; i++) v->ea_scale[i] = expf(-((const float *)t->data)[i]);
	} else {
		for (int i = 0; i < 2; i++) v->ea_scale[i] = ((const float *)t->data)[i];
	}

	/* flow: residual coupling layers 0, 2, 4, ... with a WaveNet each */
	for (v->n_flows = 0; v->n_flows < VITS_MAX_FLOWS; v->n_flows++) {
		snprintf(a, sizeof a, "flow.flows.%d.pre.weight", 2 * v->n_flows);
		if (!sg_onnx_find(o, a)) break;
	}
	if (!v->n_flows) return sg_error(SG_ERR_FORMAT, "piper: no flow (flow.flows.0.pre.weight)");
	int64_t half = v->inter / 2;
	for (int f = 0; f < v->n_flows; f++) {
		vcoupling *c = &v->flow[f];
		int idx = 2 * f;
		snprintf(a, sizeof a, "flow.flows.%d.pre.weight", idx);
		snprintf(b, sizeof b, "flow.flows.%d.pre.bias", idx);
		int64_t dp2[3] = {-1, half, 1};
		if ((st = want(o, a, 3, dp2, &t))) return st;
		int64_t W = t->dims[0];
		c->hidden = (int)W;
		if ((st = bind_conv(v, &c->pre, a, b, W, half, 1, NULL, 0))) return st;
		for (c->n_layers = 0; c->n_layers < VITS_MAX_WN; c->n_layers++) {
			snprintf(a, sizeof a, "flow.flows.%d.enc.in_layers.%d.bias", idx, c->n_layers);
			if (!sg_onnx_find(o, a)) break;
		}
		if (!c->n_layers) return sg_error(SG_ERR_FORMAT, "piper: flow %d has no WaveNet layers", idx);
		for (int l = 0; l < c->n_layers; l++) {
			/* weight-normed convolutions: the export folds them into constants of new names */
			snprintf(node, sizeof node, "/flow/flows.%d/enc/in_layers.%d/Conv", idx, l);
			const char *wn = node_input(o, node, 1);
			snprintf(b, sizeof b, "flow.flows.%d.enc.in_layers.%d.bias", idx, l);
			if (!wn) return sg_error(SG_ERR_FORMAT, "piper: node %s is missing", node);
			int64_t dk[3] = {2 * W, W, -1};
			if ((st = want(o, wn, 3, dk, &t))) return st;
			if ((st = bind_conv(v, &c->in[l], wn, b, 2 * W, W, t->dims[2], node, 0))) return st;
			snprintf(node, sizeof node, "/flow/flows.%d/enc/res_skip_layers.%d/Conv", idx, l);
			wn = node_input(o, node, 1);
			snprintf(b, sizeof b, "flow.flows.%d.enc.res_skip_layers.%d.bias", idx, l);
			if (!wn) return sg_error(SG_ERR_FORMAT, "piper: node %s is missing", node);
			if ((st = bind_conv(v, &c->rs[l], wn, b, l + 1 < c->n_layers ? 2 * W : W, W, 1, NULL, 0))) return st;
		}
		snprintf(a, sizeof a, "flow.flows.%d.post.weight", idx);
		snprintf(b, sizeof b, "flow.flows.%d.post.bias", idx);
		if ((st = bind_conv(v, &c->post, a, b, half, W, 1, NULL, 0))) return st;
	}

	/* decoder */
	int64_t dpre[3] = {-1, v->inter, -1};
	if ((st = want(o, "dec.conv_pre.weight", 3, dpre, &t))) return st;
	int64_t C = t->dims[0];
	if ((st = bind_conv(v, &v->dec_pre, "dec.conv_pre.weight", "dec.conv_pre.bias", C, v->inter, t->dims[2], "/dec/conv_pre/Conv", 0)))
		return st;
	for (v->n_ups = 0; v->n_ups < VITS_MAX_UPS; v->n_ups++) {
		snprintf(a, sizeof a, "dec.ups.%d.weight", v->n_ups);
		if (!sg_onnx_find(o, a)) break;
	}
	if (!v->n_ups) return sg_error(SG_ERR_FORMAT, "piper: no decoder upsampling (dec.ups.0.weight)");
	for (v->n_kernels = 0; v->n_kernels < VITS_MAX_UPS * VITS_MAX_KERNELS; v->n_kernels++) {
		snprintf(a, sizeof a, "dec.resblocks.%d.convs.0.weight", v->n_kernels);
		snprintf(b, sizeof b, "dec.resblocks.%d.convs1.0.weight", v->n_kernels);
		if (!sg_onnx_find(o, a) && !sg_onnx_find(o, b)) break;
	}
	if (!v->n_kernels) return sg_error(SG_ERR_FORMAT, "piper: no decoder residual blocks (dec.resblocks.0.*)");
	if (v->n_kernels % v->n_ups)
		return sg_error(SG_ERR_FORMAT, "piper: %d decoder residual blocks for %d upsampling stages", v->n_kernels, v->n_ups);
	v->n_kernels /= v->n_ups;
	v->hop = 1;
	int64_t ch = C;
	for (int u = 0; u < v->n_ups; u++) {
		if ((st = bind_convt(v, &v->ups[u], u, ch))) return st;
		ch = v->ups[u].cout;
		v->hop *= v->ups[u].stride;
		for (int j = 0; j < v->n_kernels; j++) {
			int r = u * v->n_kernels + j;
			vresblock *rb = &v->rb[r];
			snprintf(a, sizeof a, "dec.resblocks.%d.convs1.0.weight", r);
			int type1 = sg_onnx_find(o, a) != NULL;
			rb->n = 0;
			rb->pairs = type1;
			for (int i = 0; i < VITS_MAX_RB_CONVS; i++) {
				/* ResBlock2: convs.i; ResBlock1: convs1.i followed by convs2.i (dilation 1) */
				for (int s = 0; s < (type1 ? 2 : 1); s++) {
					const char *list = type1 ? (s ? "convs2" : "convs1") : "convs";
					snprintf(a, sizeof a, "dec.resblocks.%d.%s.%d.weight", r, list, i);
					if (!sg_onnx_find(o, a)) break;
					snprintf(b, sizeof b, "dec.resblocks.%d.%s.%d.bias", r, list, i);
					snprintf(node, sizeof node, "/dec/resblocks.%d/%s.%d/Conv", r, list, i);
					int64_t dk[3] = {ch, ch, -1};
					if ((st = want(o, a, 3, dk, &t))) return st;
					if (rb->n == VITS_MAX_RB_CONVS * 2) return sg_error(SG_ERR_FORMAT, "piper: residual block %d has too many convolutions", r);
					if ((st = bind_conv(v, &rb->c[rb->n], a, b, ch, ch, t->dims[2], node, 0))) return st;
					rb->n++;
				}
			}
			if (!rb->n) return sg_error(SG_ERR_FORMAT, "piper: decoder residual block %d has no convolutions", r);
		}
	}
	int64_t dpost[3] = {1, ch, -1};
	if ((st = want(o, "dec.conv_post.weight", 3, dpost, &t))) return st;
	if ((st = bind_conv(v, &v->dec_post, "dec.conv_post.weight", NULL, 1, ch, t->dims[2], "/dec/conv_post/Conv", 0))) return st;
	v->lrelu = node_attr_float(o, "/dec/LeakyRelu", "alpha", 0.1f);
	char last[64];
	snprintf(last, sizeof last, "/dec/LeakyRelu_%d", v->n_ups);
	v->lrelu_final = node_attr_float(o, last, "alpha", 0.01f);
	if (sg_onnx_find(o, "emb_g.weight") || sg_onnx_find(o, "dec.cond.weight"))
		return sg_error(SG_ERR_UNSUPPORTED, "piper: multi-speaker voices (emb_g) are not supported yet");
	vits_receptive(v);
	v->crop = sg_flag_bool("SARAGOSSA_PIPER_CROP");
	v->flow_split = sg_flag_bool("SARAGOSSA_PIPER_FLOW_SPLIT");
	return SG_OK;
}

sg_status sg_vits_load(const char *path, const char *backend, int n_threads, sg_vits **out)
{
	if (!out) return SG_FAIL(SG_ERR_INVALID_ARG, "out is NULL");
	*out = NULL;
	if (backend && strcmp(backend, "cpu") && strcmp(backend, "auto"))
		return sg_error(SG_ERR_UNSUPPORTED, "piper: voices run on the CPU only (backend '%s' asked)", backend);
	sg_vits *v = sg_calloc(1, sizeof *v);
	if (!v) return SG_FAIL(SG_ERR_NOMEM, "vits");
	sg_status st = sg_onnx_load(path, &v->onnx);
	if (!st) {
		sg_backend_params bp = sg_backend_default_params();
		bp.n_threads = n_threads;
		st = sg_backend_open("cpu", &bp, &v->be);
	}
	if (!st && (!v->be->ops->conv1d || !v->be->ops->tanh_gate))
		st = sg_error(SG_ERR_UNSUPPORTED, "piper: the %s backend has no conv1d or tanh_gate op", v->be->ops->name);
	if (!st) st = bind_all(v);
	if (st) {
		sg_vits_free(v);
		return st;
	}
	*out = v;
	return SG_OK;
}

static void free_conv(sg_vits *v, vconv *c)
{
	sg_free(c->owned);
	if (c->mat.owned) v->be->ops->tensor_free(v->be, &c->mat);
}

static void free_dds(sg_vits *v, vdds *d)
{
	for (int i = 0; i < VITS_DDS_LAYERS; i++) free_conv(v, &d->sep[i]), free_conv(v, &d->pw[i]);
}

void sg_vits_free(sg_vits *v)
{
	if (!v) return;
	for (int l = 0; l < VITS_MAX_LAYERS; l++) {
		for (int j = 0; j < 4; j++) free_conv(v, &v->enc[l].qkvo[j]);
		free_conv(v, &v->enc[l].ffn1);
		free_conv(v, &v->enc[l].ffn2);
	}
	free_conv(v, &v->proj);
	free_conv(v, &v->dp_pre);
	free_conv(v, &v->dp_proj);
	free_dds(v, &v->dp_convs);
	for (int i = 0; i < VITS_DP_FLOWS; i++) {
		free_conv(v, &v->dp_flow[i].pre);
		free_conv(v, &v->dp_flow[i].proj);
		free_dds(v, &v->dp_flow[i].convs);
	}
	for (int f = 0; f < VITS_MAX_FLOWS; f++) {
		vcoupling *c = &v->flow[f];
		free_conv(v, &c->pre);
		free_conv(v, &c->post);
		for (int l = 0; l < VITS_MAX_WN; l++) free_conv(v, &c->in[l]), free_conv(v, &c->rs[l]);
	}
	free_conv(v, &v->dec_pre);
	free_conv(v, &v->dec_post);
	for (int u = 0; u < VITS_MAX_UPS; u++) free_conv(v, &v->ups[u]);
	for (int r = 0; r < VITS_MAX_UPS * VITS_MAX_KERNELS; r++)
		for (int i = 0; i < VITS_MAX_RB_CONVS * 2; i++) free_conv(v, &v->rb[r].c[i]);
	for (int i = 0; i < VITS_SCRATCH; i++) sg_free(v->scratch[i].p);
	sg_backend_free(v->be);
	sg_onnx_free(v->onnx);
	sg_free(v);
}

int sg_vits_n_symbols(const sg_vits *v) { return v ? v->n_symbols : 0; }
int sg_vits_hop(const sg_vits *v) { return v ? v->hop : 0; }
