/* VITS forward (vits.h): text encoder, stochastic duration predictor in reverse, prior, flow in
 * reverse and the HiFi-GAN decoder, chunked with overlap so audio leaves before the sentence's
 * whole waveform exists. Activations are time-major [T][C] host memory (the CPU backend's);
 * the convolutions go through the backend's conv1d, attention's products through its matmul. */
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "models/vits_internal.h"

enum { SC_Z, SC_X, SC_Y, SC_R, SC_T, SC_ACC, SC_H, SC_H2, SC_P };

static float *scratch(sg_vits *v, int slot, size_t n)
{
	vscratch *s = &v->scratch[slot];
	if (n > s->cap) {
		sg_free(s->p);
		s->p = sg_malloc(n * sizeof(float));
		s->cap = s->p ? n : 0;
	}
	return s->p;
}

static sg_btensor view(const float *p, int64_t cols, int64_t rows)
{
	return (sg_btensor){.type = SG_TYPE_F32, .ne = {cols, rows, 1, 1}, .row_bytes = (size_t)cols * 4, .data = (void *)p};
}

/* The elementwise loops run in blocks of 8 (EW_B) with a scalar tail: a block's fixed trip count
 * lets the -O2 vectoriser (its very cheap cost model) turn it into packed instructions, where a
 * loop of unknown length stays scalar (it would need an epilogue). restrict: no run-time overlap
 * check either. */
enum { EW_B = 8 };

/* max(x, a x) = leaky ReLU for 0 <= a < 1: branch-free */
static void lrelu_to(float *restrict y, const float *restrict x, size_t n, float a)
{
	size_t i = 0;
	for (; i + EW_B <= n; i += EW_B)
		for (size_t j = i; j < i + EW_B; j++) y[j] = x[j] > x[j] * a ? x[j] : x[j] * a;
	for (; i < n; i++) y[i] = x[i] > x[i] * a ? x[i] : x[i] * a;
}

static void lrelu(float *x, size_t n, float a)
{
	size_t i = 0;
	for (; i + EW_B <= n; i += EW_B)
		for (size_t j = i; j < i + EW_B; j++) x[j] = x[j] > x[j] * a ? x[j] : x[j] * a;
	for (; i < n; i++) x[i] = x[i] > x[i] * a ? x[i] : x[i] * a;
}

/* y += x */
static void add_to(float *restrict y, const float *restrict x, size_t n)
{
	size_t i = 0;
	for (; i + EW_B <= n; i += EW_B)
		for (size_t j = i; j < i + EW_B; j++) y[j] += x[j];
	for (; i < n; i++) y[i] += x[i];
}

/* y = a + b */
static void add3(float *restrict y, const float *restrict a, const float *restrict b, size_t n)
{
	size_t i = 0;
	for (; i + EW_B <= n; i += EW_B)
		for (size_t j = i; j < i + EW_B; j++) y[j] = a[j] + b[j];
	for (; i < n; i++) y[i] = a[i] + b[i];
}

/* y = x / s */
static void div_to(float *restrict y, const float *restrict x, float s, size_t n)
{
	size_t i = 0;
	for (; i + EW_B <= n; i += EW_B)
		for (size_t j = i; j < i + EW_B; j++) y[j] = x[j] / s;
	for (; i < n; i++) y[i] = x[i] / s;
}

/* y [T][n] = the conv1d op over x [T + extra][cin] with c's weight ({cin, k, n}), pad zero rows
 * before x and the rest after it (x holds extra more rows: padding already in place); a
 * transposed conv's product takes no bias. */
static sg_status conv_op(sg_vits *v, const vconv *c, const float *x, int T, int extra, int pad, float *y)
{
	sg_btensor xt = view(x, c->cin, T + extra), yt = view(y, c->mat.ne[2], T);
	sg_conv_params p = {.stride = 1, .dilation = c->dil > 0 ? c->dil : 1, .groups = 1, .pad = pad};
	return v->be->ops->conv1d(v->be, &xt, &c->mat, c->bias.data ? &c->bias : NULL, &p, &yt);
}

/* y [T][cout] = conv(lrelu_a(x) [T][cin]) (act: the leaky ReLU slope applied to the input on
 * the way in, < 0 for none), zero padding at both ends. y must not alias x. */
static sg_status conv_act(sg_vits *v, const vconv *c, const float *x, int T, float act, float *y)
{
	if (c->depthwise) {
		for (int t = 0; t < T; t++) {
			float *yr = y + (size_t)t * c->cout;
			for (int ch = 0; ch < c->cout; ch++) yr[ch] = c->b ? c->b[ch] : 0.0f;
			for (int j = 0; j < c->k; j++) {
				int s = t + j * c->dil - c->pad;
				if (s < 0 || s >= T) continue;
				const float *xr = x + (size_t)s * c->cin;
				for (int ch = 0; ch < c->cout; ch++) yr[ch] += c->w[(size_t)ch * c->k + j] * xr[ch];
			}
		}
		return SG_OK;
	}
	if (act < 0) return conv_op(v, c, x, T, 0, c->pad, y);
	/* the activated input between its padding's zero rows, written once: the op reads it as is */
	size_t cin = (size_t)c->cin, pad = (size_t)c->pad;
	float *xa = scratch(v, SC_P, ((size_t)T + 2 * pad) * cin);
	if (!xa) return SG_FAIL(SG_ERR_NOMEM, "activation of %d x %d", T, c->cin);
	memset(xa, 0, sizeof(float) * pad * cin);
	lrelu_to(xa + pad * cin, x, (size_t)T * cin, act);
	memset(xa + (pad + (size_t)T) * cin, 0, sizeof(float) * pad * cin);
	return conv_op(v, c, xa, T, 2 * c->pad, 0, y);
}

static sg_status conv(sg_vits *v, const vconv *c, const float *x, int T, float *y) { return conv_act(v, c, x, T, -1.0f, y); }

/* y [T * stride][cout] = conv_transpose(x [T][cin]): the product gives each input frame's k
 * output rows, added at frame * stride - pad + j. */
static sg_status convt(sg_vits *v, const vconv *c, const float *x, int T, float *y)
{
	int64_t To = (int64_t)T * c->stride;
	float *z = scratch(v, SC_Z, (size_t)T * (size_t)c->k * (size_t)c->cout);
	if (!z) return SG_FAIL(SG_ERR_NOMEM, "transposed conv of %d frames", T);
	sg_status st = conv_op(v, c, x, T, 0, 0, z);
	if (st) return st;
	for (int64_t t = 0; t < To; t++) memcpy(y + (size_t)t * c->cout, c->b, sizeof(float) * (size_t)c->cout);
	for (int t = 0; t < T; t++)
		for (int j = 0; j < c->k; j++) {
			int64_t o = (int64_t)t * c->stride - c->pad + j;
			if (o < 0 || o >= To) continue;
			add_to(y + (size_t)o * c->cout, z + ((size_t)t * c->k + (size_t)j) * c->cout, (size_t)c->cout);
		}
	return SG_OK;
}

static sg_status layernorm(sg_vits *v, const vnorm *n, float *x, int T, int C)
{
	sg_btensor xt = view(x, C, T);
	return v->be->ops->layernorm(v->be, &xt, &n->g, &n->b, 1e-5f, &xt);
}

static void gelu(float *x, size_t n)
{
	for (size_t i = 0; i < n; i++) x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}

/* ---- text encoder ---- */

/* A host buffer as a weight matrix [n][k] for the backend's matmul. */
static sg_status as_weight(sg_vits *v, const float *p, int64_t k, int64_t n, sg_btensor *out)
{
	*out = view(p, k, n);
	return v->be->ops->tensor_bind(v->be, out);
}

/* Relative-position attention of one head (offset h0 into the rows of q, k, val [T][H]) into
 * out: scores and the weighted sum are matrix products through the backend; the relative terms
 * (2 * window + 1 per query) are added on the diagonals. buf: 3 * T * D + T * T + T * (2W + 1). */
static sg_status attend(sg_vits *v, const venc_layer *L, const float *q, const float *k, const float *val, int T, int h0,
			float *buf, float *out)
{
	int H = v->hidden, D = v->head_dim, W = v->window, R = 2 * W + 1;
	float scale = 1.0f / sqrtf((float)D);
	float *qh = buf, *kh = qh + (size_t)T * D, *vt = kh + (size_t)T * D, *p = vt + (size_t)T * D, *rel = p + (size_t)T * T;
	for (int t = 0; t < T; t++)
		for (int d = 0; d < D; d++) {
			qh[(size_t)t * D + d] = q[(size_t)t * H + h0 + d] * scale;
			kh[(size_t)t * D + d] = k[(size_t)t * H + h0 + d];
			vt[(size_t)d * T + t] = val[(size_t)t * H + h0 + d];
		}
	sg_btensor wk, wr, wv;
	sg_status st = as_weight(v, kh, D, T, &wk);
	if (!st) st = as_weight(v, L->rel_k, D, R, &wr);
	if (!st) st = as_weight(v, vt, T, D, &wv);
	sg_btensor xq = view(qh, D, T), sp = view(p, T, T), sr = view(rel, R, T);
	if (!st) st = v->be->ops->matmul(v->be, &wk, &xq, NULL, &sp);
	if (!st) st = v->be->ops->matmul(v->be, &wr, &xq, NULL, &sr);
	if (st) return st;
	for (int i = 0; i < T; i++) {
		float *pi = p + (size_t)i * T;
		for (int r = 0; r < R; r++) {
			int j = i + r - W;
			if (j >= 0 && j < T) pi[j] += rel[(size_t)i * R + r];
		}
	}
	if ((st = v->be->ops->softmax(v->be, &sp, &sp))) return st;
	float *oh = qh; /* the scaled queries are no longer needed */
	sg_btensor xo = view(oh, D, T);
	if ((st = v->be->ops->matmul(v->be, &wv, &sp, NULL, &xo))) return st;
	for (int i = 0; i < T; i++) {
		float *oi = out + (size_t)i * H + h0;
		const float *src = oh + (size_t)i * D;
		for (int d = 0; d < D; d++) oi[d] = src[d];
		for (int r = 0; r < R; r++) {
			int j = i + r - W;
			if (j < 0 || j >= T) continue;
			float pij = p[(size_t)i * T + j];
			const float *ev = L->rel_v + (size_t)r * D;
			for (int d = 0; d < D; d++) oi[d] += pij * ev[d];
		}
	}
	return SG_OK;
}

/* x [T][H] (out: the encoder's hidden states) and stats [T][2 * inter] (m, then logs). */
static sg_status encode(sg_vits *v, const int64_t *ids, int T, float *x, float *stats)
{
	int H = v->hidden, F = v->enc[0].ffn1.cout;
	size_t th = (size_t)T * H;
	int D = v->head_dim, R = 2 * v->window + 1;
	size_t abuf = 3 * (size_t)T * D + (size_t)T * T + (size_t)T * R;
	float *buf = sg_malloc(sizeof(float) * (5 * th + (size_t)T * F + abuf));
	if (!buf) return SG_FAIL(SG_ERR_NOMEM, "encoder of %d ids", T);
	float *q = buf, *k = q + th, *val = k + th, *att = val + th, *y = att + th, *f = y + th, *p = f + (size_t)T * F;
	float s = sqrtf((float)H);
	for (int t = 0; t < T; t++)
		for (int c = 0; c < H; c++) x[(size_t)t * H + c] = v->emb[(size_t)ids[t] * H + c] * s;
	sg_status st = SG_OK;
	for (int l = 0; l < v->n_layers && !st; l++) {
		const venc_layer *L = &v->enc[l];
		if ((st = conv(v, &L->qkvo[0], x, T, q)) || (st = conv(v, &L->qkvo[1], x, T, k)) || (st = conv(v, &L->qkvo[2], x, T, val))) break;
		for (int h = 0; h < v->n_heads && !st; h++) st = attend(v, L, q, k, val, T, h * v->head_dim, p, att);
		if (st || (st = conv(v, &L->qkvo[3], att, T, y))) break;
		add_to(x, y, th);
		if ((st = layernorm(v, &L->n1, x, T, H))) break;
		if ((st = conv(v, &L->ffn1, x, T, f))) break;
		for (size_t i = 0; i < (size_t)T * F; i++) f[i] = f[i] > 0 ? f[i] : 0;
		if ((st = conv(v, &L->ffn2, f, T, y))) break;
		add_to(x, y, th);
		st = layernorm(v, &L->n2, x, T, H);
	}
	if (!st) st = conv(v, &v->proj, x, T, stats);
	sg_free(buf);
	return st;
}

/* ---- duration predictor ---- */

static sg_status dds(sg_vits *v, const vdds *d, float *x, const float *g, int T, int C, float *y, float *y2)
{
	size_t n = (size_t)T * C;
	if (g)
		for (size_t i = 0; i < n; i++) x[i] += g[i];
	sg_status st = SG_OK;
	for (int i = 0; i < VITS_DDS_LAYERS && !st; i++) {
		if ((st = conv(v, &d->sep[i], x, T, y)) || (st = layernorm(v, &d->n1[i], y, T, C))) break;
		gelu(y, n);
		if ((st = conv(v, &d->pw[i], y, T, y2)) || (st = layernorm(v, &d->n2[i], y2, T, C))) break;
		gelu(y2, n);
		for (size_t j = 0; j < n; j++) x[j] += y2[j];
	}
	return st;
}

static float softplusf(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* The inverse of the rational-quadratic spline on [-B, B] with linear tails (identity outside),
 * parameters p[3 * nb - 1]: widths and heights (unnormalised, divided by sqrt(F)), inner
 * derivatives. Follows the reference's float computation step by step. */
static float spline_inverse(float x, const float *p, int nb, float sqrt_f, float B)
{
	if (!(x >= -B && x <= B)) return x;
	enum { MAXB = 64 };
	const float minw = 1e-3f, minh = 1e-3f, mind = 1e-3f;
	float w[MAXB], h[MAXB], cw[MAXB + 1], ch[MAXB + 1], d[MAXB + 1];
	float mw = -INFINITY, mh = -INFINITY, sw = 0, sh = 0;
	for (int i = 0; i < nb; i++) {
		w[i] = p[i] / sqrt_f;
		h[i] = p[nb + i] / sqrt_f;
		mw = w[i] > mw ? w[i] : mw;
		mh = h[i] > mh ? h[i] : mh;
	}
	for (int i = 0; i < nb; i++) sw += (w[i] = expf(w[i] - mw)), sh += (h[i] = expf(h[i] - mh));
	float cw_acc = 0, ch_acc = 0;
	cw[0] = ch[0] = 0;
	for (int i = 0; i < nb; i++) {
		cw_acc += minw + (1 - minw * nb) * (w[i] / sw);
		ch_acc += minh + (1 - minh * nb) * (h[i] / sh);
		cw[i + 1] = cw_acc;
		ch[i + 1] = ch_acc;
	}
	for (int i = 0; i <= nb; i++) cw[i] = 2 * B * cw[i] - B, ch[i] = 2 * B * ch[i] - B;
	cw[0] = ch[0] = -B;
	cw[nb] = ch[nb] = B;
	const float edge = (float)log(exp(1.0 - 1e-3) - 1.0); /* linear tails: derivative 1 at the ends */
	d[0] = d[nb] = mind + softplusf(edge);
	for (int i = 1; i < nb; i++) d[i] = mind + softplusf(p[2 * nb + i - 1]);
	int bin = -1;
	for (int i = 0; i <= nb; i++) bin += x >= (i == nb ? ch[i] + 1e-6f : ch[i]);
	bin = bin < 0 ? 0 : bin >= nb ? nb - 1 : bin;
	float in_cw = cw[bin], in_w = cw[bin + 1] - cw[bin], in_ch = ch[bin], in_h = ch[bin + 1] - ch[bin];
	float delta = in_h / in_w, d0 = d[bin], d1 = d[bin + 1];
	float dx = x - in_ch, s = d0 + d1 - 2 * delta;
	float a = dx * s + in_h * (delta - d0);
	float b = in_h * d0 - dx * s;
	float c = -delta * dx;
	float disc = b * b - 4 * a * c;
	if (disc < 0) disc = 0;
	float root = (2 * c) / (-b - sqrtf(disc));
	return root * in_w + in_cw;
}

static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A standard normal sample (Box-Muller). */
static float randn(uint64_t *s)
{
	double u1 = ((double)(rng_next(s) >> 11) + 0.5) / 9007199254740992.0;
	double u2 = (double)(rng_next(s) >> 11) / 9007199254740992.0;
	return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* logw [T] from the encoder's hidden states x [T][H]. */
static sg_status durations(sg_vits *v, const float *x, int T, float noise_w, uint64_t *rng, float *logw)
{
	int F = v->dp_ch, H = v->hidden;
	(void)H;
	size_t tf = (size_t)T * F;
	int P = 3 * v->dp_flow[0].bins - 1;
	float *buf = sg_malloc(sizeof(float) * (5 * tf + (size_t)T * P + 2 * (size_t)T));
	if (!buf) return SG_FAIL(SG_ERR_NOMEM, "duration predictor of %d ids", T);
	float *h = buf, *g = h + tf, *y = g + tf, *y2 = y + tf, *hh = y2 + tf, *pp = hh + tf, *z = pp + (size_t)T * P;
	sg_status st = conv(v, &v->dp_pre, x, T, h);
	if (!st) st = dds(v, &v->dp_convs, h, NULL, T, F, y, y2);
	if (!st) st = conv(v, &v->dp_proj, h, T, g);
	for (int t = 0; t < T; t++) {
		z[2 * t] = noise_w > 0 ? randn(rng) * noise_w : 0.0f;
		z[2 * t + 1] = noise_w > 0 ? randn(rng) * noise_w : 0.0f;
	}
	float sqrt_f = sqrtf((float)F);
	for (int i = 0; i < VITS_DP_FLOWS && !st; i++) {
		const vconvflow *cf = &v->dp_flow[i];
		for (int t = 0; t < T; t++) { /* flip the two channels */
			float a = z[2 * t];
			z[2 * t] = z[2 * t + 1];
			z[2 * t + 1] = a;
		}
		for (int t = 0; t < T; t++)
			for (int c = 0; c < F; c++) hh[(size_t)t * F + c] = cf->pre.w[c] * z[2 * t] + cf->pre.b[c];
		if ((st = dds(v, &cf->convs, hh, g, T, F, y, y2)) || (st = conv(v, &cf->proj, hh, T, pp))) break;
		for (int t = 0; t < T; t++) z[2 * t + 1] = spline_inverse(z[2 * t + 1], pp + (size_t)t * P, cf->bins, sqrt_f, 5.0f);
	}
	for (int t = 0; t < T; t++) {
		float a = z[2 * t];
		z[2 * t] = z[2 * t + 1];
		z[2 * t + 1] = a;
		logw[t] = (z[2 * t] - v->ea_m[0]) * v->ea_scale[0];
	}
	sg_free(buf);
	return st;
}

/* ---- flow ---- */

static sg_status coupling_reverse(sg_vits *v, const vcoupling *c, float *z, int T, int C)
{
	int half = C / 2, W = c->hidden;
	size_t tw = (size_t)T * W;
	/* x0, m [T][C/2]; h, out, acts [T][W]; rsb [T][2W] (the in-layer's output, then res/skip) */
	float *buf = sg_malloc(sizeof(float) * ((size_t)T * half * 2 + 5 * tw));
	if (!buf) return SG_FAIL(SG_ERR_NOMEM, "flow of %d frames", T);
	float *x0 = buf, *m = x0 + (size_t)T * half, *h = m + (size_t)T * half, *out = h + tw, *acts = out + tw, *rsb = acts + tw;
	for (int t = 0; t < T; t++) memcpy(x0 + (size_t)t * half, z + (size_t)t * C, sizeof(float) * (size_t)half);
	sg_status st = conv(v, &c->pre, x0, T, h);
	memset(out, 0, sizeof(float) * tw);
	for (int l = 0; l < c->n_layers && !st; l++) {
		if ((st = conv(v, &c->in[l], h, T, rsb))) break;
		sg_btensor xt = view(rsb, 2 * W, T), at = view(acts, W, T); /* tanh(a) * sigmoid(b) */
		if ((st = v->be->ops->tanh_gate(v->be, &xt, &at))) break;
		if ((st = conv(v, &c->rs[l], acts, T, rsb))) break;
		if (l + 1 < c->n_layers) {
			for (int t = 0; t < T; t++) {
				const float *rr = rsb + (size_t)t * 2 * W;
				float *hr = h + (size_t)t * W, *orow = out + (size_t)t * W;
				for (int j = 0; j < W; j++) hr[j] += rr[j], orow[j] += rr[W + j];
			}
		} else {
			for (size_t i = 0; i < tw; i++) out[i] += rsb[i];
		}
	}
	if (!st) st = conv(v, &c->post, out, T, m);
	if (!st)
		for (int t = 0; t < T; t++)
			for (int j = 0; j < half; j++) z[(size_t)t * C + half + j] -= m[(size_t)t * half + j];
	sg_free(buf);
	return st;
}

/* The flow in reverse over frames z[0..n) ([n][C]), in place. */
static sg_status flow_reverse(sg_vits *v, float *z, int64_t n, int C)
{
	sg_status st = SG_OK;
	for (int f = v->n_flows - 1; !st && f >= 0; f--) {
		for (int64_t t = 0; t < n; t++) { /* flip the channels */
			float *zr = z + (size_t)t * C;
			for (int a = 0, b = C - 1; a < b; a++, b--) {
				float s = zr[a];
				zr[a] = zr[b];
				zr[b] = s;
			}
		}
		st = coupling_reverse(v, &v->flow[f], z, (int)n, C);
	}
	return st;
}

/* ---- decoder ---- */

void vits_receptive(sg_vits *v)
{
	int reach = 0; /* the flow's: its couplings' convolutions' padding, one after the other */
	for (int f = 0; f < v->n_flows; f++) {
		const vcoupling *c = &v->flow[f];
		reach += c->pre.pad + c->post.pad;
		for (int l = 0; l < c->n_layers; l++) reach += c->in[l].pad + c->rs[l].pad;
	}
	v->flow_ctx = reach + 1;
	double r = v->dec_post.pad;
	for (int u = v->n_ups - 1; u >= 0; u--) {
		int most = 0;
		for (int j = 0; j < v->n_kernels; j++) {
			const vresblock *rb = &v->rb[u * v->n_kernels + j];
			int s = 0;
			for (int i = 0; i < rb->n; i++) s += rb->c[i].pad;
			most = s > most ? s : most;
		}
		r += most;
		v->margin_out[u] = (int)ceil(r) + 1;
		r = r / v->ups[u].stride + (double)v->ups[u].k / v->ups[u].stride + 1;
		v->margin[u] = (int)ceil(r) + 1;
	}
	r += v->dec_pre.pad;
	v->ctx_frames = (int)ceil(r) + 2;
}

/* Decodes frames z[0..T) ([T][inter]) into out (room for T * hop samples); *mine: the samples of
 * frames [k0, k1) in it. Each stage runs only on the rows its input needs for those frames: the
 * rows within v->margin[u] of them (the reach of the stage and all after it; for its residual
 * blocks, v->margin_out[u]), so the context a chunk carries is decoded at the frame rate's stages
 * and dropped before the costly late ones. Rows kept by the crop are exact: what a crop cuts off
 * is farther from them than any layer after it reaches, as the chunks' own context is. */
static sg_status decode(sg_vits *v, const float *z, int T, int k0, int k1, float *out, const float **mine)
{
	int64_t n = T, org = 0, rate = 1; /* x's rows: n from row org of the chunk at rate per frame */
	int C = v->dec_pre.cout;
	float *x = scratch(v, SC_X, (size_t)n * C);
	if (!x) return SG_FAIL(SG_ERR_NOMEM, "decoder of %d frames", T);
	sg_status st = conv(v, &v->dec_pre, z, T, x);
	for (int u = 0; u < v->n_ups && !st; u++) {
		const vconv *up = &v->ups[u];
		int64_t lo = k0 * rate - v->margin[u] - org, hi = k1 * rate + v->margin[u] - org;
		lo = lo > 0 && v->crop ? lo : 0;
		hi = hi < n && v->crop ? hi : n;
		x += lo * C;
		n = hi - lo;
		org = (org + lo) * up->stride;
		rate *= up->stride;
		lrelu(x, (size_t)n * C, v->lrelu); /* the transposed conv takes no fused activation */
		int64_t m = n * up->stride;
		int Co = up->cout;
		size_t sz = (size_t)m * Co;
		float *y = scratch(v, SC_Y, sz), *acc = scratch(v, SC_ACC, sz), *r = scratch(v, SC_R, sz), *t = scratch(v, SC_T, sz);
		if (!y || !acc || !r || !t) return SG_FAIL(SG_ERR_NOMEM, "decoder of %d frames", T);
		if ((st = convt(v, up, x, (int)n, y))) break;
		/* the residual blocks reach less far than the upsampling and what follows it */
		lo = k0 * rate - v->margin_out[u] - org, hi = k1 * rate + v->margin_out[u] - org;
		lo = lo > 0 && v->crop ? lo : 0;
		hi = hi < m && v->crop ? hi : m;
		y += lo * Co;
		m = hi - lo;
		sz = (size_t)m * Co;
		org += lo;
		for (int j = 0; j < v->n_kernels && !st; j++) {
			const vresblock *rb = &v->rb[u * v->n_kernels + j];
			/* the block's running sum: its first residual add reads y and writes cur (no copy of y) */
			float *cur = j ? r : acc, *t2 = scratch(v, SC_H, sz);
			const float *in = y;
			if (!t2) return SG_FAIL(SG_ERR_NOMEM, "decoder");
			for (int i = 0; i + rb->pairs < rb->n && !st; i += rb->pairs ? 2 : 1) {
				const float *d = t2;
				if ((st = conv_act(v, &rb->c[i], in, (int)m, v->lrelu, t2))) break;
				if (rb->pairs && (st = conv_act(v, &rb->c[i + 1], t2, (int)m, v->lrelu, t))) break;
				if (rb->pairs) d = t;
				if (in == cur) add_to(cur, d, sz);
				else add3(cur, in, d, sz);
				in = cur;
			}
			if (j) add_to(acc, r, sz);
		}
		if (st) break;
		x = scratch(v, SC_X, sz);
		if (!x) return SG_FAIL(SG_ERR_NOMEM, "decoder");
		div_to(x, acc, (float)v->n_kernels, sz);
		n = m;
		C = Co;
	}
	if (st) return st;
	if ((st = conv_act(v, &v->dec_post, x, (int)n, v->lrelu_final, out))) return st;
	for (int64_t i = 0; i < n; i++) out[i] = tanhf(out[i]);
	SG_ASSERT(k0 * rate >= org && k1 * rate <= org + n);
	*mine = out + (k0 * rate - org);
	return SG_OK;
}

/* ---- the whole ---- */

#define VITS_MAX_FRAMES (1 << 17) /* ~25 minutes of audio per sentence at a hop of 256 */

sg_status sg_vits_synth(sg_vits *v, const int64_t *ids, size_t n, const sg_vits_params *p, float **pcm, size_t *n_pcm)
{
	if (pcm) *pcm = NULL;
	if (n_pcm) *n_pcm = 0;
	if (!v || !ids || !p) return SG_FAIL(SG_ERR_INVALID_ARG, "a NULL argument");
	if (!n || n > 4096) return sg_error(SG_ERR_RANGE, "vits: %zu ids in one sentence (1 .. 4096)", n);
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= v->n_symbols)
			return sg_error(SG_ERR_RANGE, "vits: id %lld at %zu is outside the %d symbols", (long long)ids[i], i, v->n_symbols);
	int T = (int)n, H = v->hidden, C = v->inter;
	uint64_t rng = p->seed ^ 0x5eed5eed5eedull;
	float *x = sg_malloc(sizeof(float) * (size_t)T * (H + 2 * C + 1));
	if (!x) return SG_FAIL(SG_ERR_NOMEM, "%d ids", T);
	float *stats = x + (size_t)T * H, *logw = stats + (size_t)T * 2 * C;
	float *z = NULL, *wave = NULL;
	int *dur = NULL;
	sg_status st = encode(v, ids, T, x, stats);
	if (!st) st = durations(v, x, T, p->noise_w, &rng, logw);
	int64_t frames = 0;
	if (!st) {
		dur = sg_malloc(sizeof(int) * (size_t)T);
		if (!dur) st = SG_FAIL(SG_ERR_NOMEM, "durations");
	}
	for (int t = 0; !st && t < T; t++) {
		float w = ceilf(expf(logw[t]) * p->length_scale);
		if (!(w >= 0) || w > VITS_MAX_FRAMES) w = VITS_MAX_FRAMES; /* NaN or huge: refused below */
		dur[t] = (int)w;
		frames += dur[t];
	}
	if (!st && frames > VITS_MAX_FRAMES) st = sg_error(SG_ERR_RANGE, "vits: %lld frames of audio for one sentence (at most %d)", (long long)frames, VITS_MAX_FRAMES);
	int64_t Ty = frames < 1 ? 1 : frames;
	if (!st && !(z = sg_calloc((size_t)Ty * C, sizeof(float)))) st = SG_FAIL(SG_ERR_NOMEM, "%lld frames", (long long)Ty);
	/* the prior, repeated by the durations, with noise */
	for (int t = 0, f = 0; !st && t < T; t++)
		for (int r = 0; r < dur[t]; r++, f++) {
			float *zr = z + (size_t)f * C;
			const float *m = stats + (size_t)t * 2 * C, *logs = m + C;
			for (int c = 0; c < C; c++) zr[c] = m[c] + (p->noise_scale > 0 ? randn(&rng) * expf(logs[c]) * p->noise_scale : 0.0f);
		}
	/* the flow: when chunked, first over the first chunk's frames and the flow's reach past them,
	 * the rest (from that reach before them on) after the first chunk is out, so the first audio
	 * does not wait for the whole sentence's flow; the frames kept from either side are exact */
	int chunk = p->frames_per_chunk > 0 ? p->frames_per_chunk : (int)Ty;
	int64_t split = (int64_t)chunk + v->ctx_frames, s2 = split > v->flow_ctx ? split - v->flow_ctx : 0;
	float *rest = NULL;
	if (!st && v->flow_split && p->frames_per_chunk > 0 && split + 2 * (int64_t)v->flow_ctx < Ty) {
		if (!(rest = sg_malloc(sizeof(float) * (size_t)(Ty - s2) * C))) st = SG_FAIL(SG_ERR_NOMEM, "%lld frames", (long long)Ty);
		else memcpy(rest, z + (size_t)s2 * C, sizeof(float) * (size_t)(Ty - s2) * C);
		if (!st) st = flow_reverse(v, z, split + v->flow_ctx, C);
	} else if (!st) {
		st = flow_reverse(v, z, Ty, C);
	}
	size_t total = (size_t)Ty * v->hop;
	if (!st && pcm && !(wave = sg_malloc(total * sizeof(float)))) st = SG_FAIL(SG_ERR_NOMEM, "%zu samples", total);
	/* the decoder, chunk by chunk: each chunk decodes ctx_frames more on both sides, so its own
	 * samples equal the one-shot decode's; chunks grow (first small for the first audio) */
	float *buf = NULL;
	for (int64_t f0 = 0; !st && f0 < Ty;) {
		if (f0 && rest) { /* the flow's second part, once the first chunk is out */
			if (!(st = flow_reverse(v, rest, Ty - s2, C)))
				memcpy(z + (size_t)split * C, rest + (size_t)(split - s2) * C, sizeof(float) * (size_t)(Ty - split) * C);
			sg_free(rest);
			rest = NULL;
			if (st) break;
		}
		int64_t f1 = f0 + chunk < Ty ? f0 + chunk : Ty;
		int64_t a = f0 - v->ctx_frames > 0 ? f0 - v->ctx_frames : 0;
		int64_t b = f1 + v->ctx_frames < Ty ? f1 + v->ctx_frames : Ty;
		if (p->frames_per_chunk <= 0) a = 0, b = Ty;
		float *o = sg_realloc(buf, sizeof(float) * (size_t)(b - a) * v->hop);
		if (!o) {
			st = SG_FAIL(SG_ERR_NOMEM, "%lld frames", (long long)(b - a));
			break;
		}
		buf = o;
		const float *mine = NULL;
		if ((st = decode(v, z + (size_t)a * C, (int)(b - a), (int)(f0 - a), (int)(f1 - a), buf, &mine))) break;
		size_t cnt = (size_t)(f1 - f0) * v->hop;
		if (wave) memcpy(wave + (size_t)f0 * v->hop, mine, cnt * sizeof(float));
		if (p->on_audio && p->on_audio(mine, cnt, p->user)) st = sg_error(SG_ERR_CANCELLED, "vits: stopped by the audio callback");
		f0 = f1;
		if (chunk < 256) chunk = chunk * 2 < 256 ? chunk * 2 : 256;
	}
	sg_free(buf);
	sg_free(rest);
	sg_free(z);
	sg_free(dur);
	sg_free(x);
	if (st) {
		sg_free(wave);
		return st;
	}
	if (pcm) *pcm = wave;
	if (n_pcm) *n_pcm = total;
	return SG_OK;
}
