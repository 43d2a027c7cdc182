/* Qwen3-TTS's speaker encoder (see qwen3_tts_spk.h). Activations are host [T][C] arrays. */
#include "models/qwen3_tts_spk.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "audio/mel.h"
#include "base/alloc.h"
#include "base/error.h"
#include "models/qwen3_tts_conv.h"

#define SPK_MAX_LAYERS 8
#define SPK_MAX_SCALE  16

typedef struct spk_block {
	sg_qtts_conv tdnn1, tdnn2, se1, se2;
	sg_qtts_conv res[SPK_MAX_SCALE - 1];
} spk_block;

struct sg_qwen3_tts_spk {
	sg_backend *be;
	int mel, dim, att, scale, se, rate, nl;
	int ch[SPK_MAX_LAYERS], ks[SPK_MAX_LAYERS], dil[SPK_MAX_LAYERS];
	sg_qtts_conv b0, mfa, asp_tdnn, asp_conv, fc;
	spk_block blk[SPK_MAX_LAYERS];
};

static int int_list(const json_t *o, const char *k, int *v, int cap)
{
	const json_t *a = json_object_get(o, k);
	if (!json_is_array(a) || json_array_size(a) < 1 || json_array_size(a) > (size_t)cap) return -1;
	for (size_t i = 0; i < json_array_size(a); i++) {
		const json_t *e = json_array_get(a, i);
		if (!json_is_integer(e) || json_integer_value(e) < 1 || json_integer_value(e) > 1 << 16)
			return -1;
		v[i] = (int)json_integer_value(e);
	}
	return (int)json_array_size(a);
}

static int jint(const json_t *o, const char *k, int dflt)
{
	const json_t *v = json_object_get(o, k);
	return json_is_integer(v) ? (int)json_integer_value(v) : dflt;
}

sg_status sg_qwen3_tts_spk_load(const sg_weights *w, sg_backend *be, sg_qwen3_tts_spk **out)
{
	*out = NULL;
	const json_t *cfg = w->config;
	const json_t *sc = cfg ? json_object_get(cfg, "speaker_encoder_config") : NULL;
	if (!sg_weights_find(w, "speaker_encoder.fc.weight"))
		return sg_error(SG_ERR_NOT_FOUND,
		                "qwen3-tts: no speaker encoder (tensor speaker_encoder.fc.weight)");
	if (!be->ops->conv1d)
		return sg_error(SG_ERR_UNSUPPORTED, "qwen3-tts speaker encoder: the %s backend has no conv1d",
		                be->ops->name);
	sg_qwen3_tts_spk *s = sg_calloc(1, sizeof(*s));
	if (!s) return sg_error(SG_ERR_NOMEM, "qwen3-tts speaker encoder");
	s->be = be;
	/* the package's defaults where the config leaves a field out */
	static const int dch[] = {512, 512, 512, 512, 1536}, dks[] = {5, 3, 3, 3, 1},
	                 ddil[] = {1, 2, 3, 4, 1};
	s->mel = jint(sc, "mel_dim", 128), s->dim = jint(sc, "enc_dim", 1024),
	s->att = jint(sc, "enc_attention_channels", 128);
	s->scale = jint(sc, "enc_res2net_scale", 8), s->se = jint(sc, "enc_se_channels", 128),
	s->rate = jint(sc, "sample_rate", 24000);
	int n1 = 5, n2 = 5, n3 = 5;
	memcpy(s->ch, dch, sizeof(dch)), memcpy(s->ks, dks, sizeof(dks)), memcpy(s->dil, ddil, sizeof(ddil));
	if (json_object_get(sc, "enc_channels")) n1 = int_list(sc, "enc_channels", s->ch, SPK_MAX_LAYERS);
	if (json_object_get(sc, "enc_kernel_sizes"))
		n2 = int_list(sc, "enc_kernel_sizes", s->ks, SPK_MAX_LAYERS);
	if (json_object_get(sc, "enc_dilations")) n3 = int_list(sc, "enc_dilations", s->dil, SPK_MAX_LAYERS);
	s->nl = n1;
	sg_status st = SG_OK;
	int mfa_in = 0;
	for (int i = 1; i < n1 - 1; i++) mfa_in += s->ch[i];
	if (n1 < 3 || n1 != n2 || n1 != n3)
		st = sg_error(
		    SG_ERR_FORMAT,
		    "qwen3-tts: speaker_encoder_config: enc_channels, enc_kernel_sizes and enc_dilations "
		    "must be lists of the same length, 3 to %d positive integers",
		    SPK_MAX_LAYERS);
	else if (s->mel != 128 || s->rate != 24000)
		st = sg_error(SG_ERR_UNSUPPORTED,
		              "qwen3-tts: speaker_encoder_config: mel_dim %d at %d Hz (the package computes "
		              "128 mel bins at 24000 Hz)",
		              s->mel, s->rate);
	else if (s->scale < 2 || s->scale > SPK_MAX_SCALE || s->dim < 1 || s->att < 1 || s->se < 1 ||
	         mfa_in != s->ch[n1 - 1])
		st = sg_error(SG_ERR_FORMAT,
		              "qwen3-tts: speaker_encoder_config: res2net scale %d (2..%d), the middle "
		              "blocks' %d channels must "
		              "equal the last enc_channels %d",
		              s->scale, SPK_MAX_SCALE, mfa_in, s->ch[n1 - 1]);
	for (int i = 1; !st && i < n1 - 1; i++)
		if (s->ch[i] % s->scale || s->ch[i] != s->ch[i - 1])
			st = sg_error(SG_ERR_FORMAT,
			              "qwen3-tts: speaker_encoder_config: block %d has %d channels after %d "
			              "(equal, and a multiple of "
			              "the res2net scale %d)",
			              i, s->ch[i], s->ch[i - 1], s->scale);
	char p[160];
	if (!st)
		st = sg_qtts_conv_load(be, w, "speaker_encoder.blocks.0.conv", s->mel, s->ch[0], s->ks[0],
		                       s->dil[0], 1, 1, &s->b0);
	for (int i = 1; !st && i < n1 - 1; i++) {
		spk_block *b = &s->blk[i];
		int C = s->ch[i], wd = C / s->scale;
		snprintf(p, sizeof(p), "speaker_encoder.blocks.%d.tdnn1.conv", i);
		st = sg_qtts_conv_load(be, w, p, s->ch[i - 1], C, 1, 1, 1, 1, &b->tdnn1);
		for (int j = 0; !st && j < s->scale - 1; j++) {
			snprintf(p, sizeof(p), "speaker_encoder.blocks.%d.res2net_block.blocks.%d.conv", i,
			         j);
			st = sg_qtts_conv_load(be, w, p, wd, wd, s->ks[i], s->dil[i], 1, 1, &b->res[j]);
		}
		snprintf(p, sizeof(p), "speaker_encoder.blocks.%d.tdnn2.conv", i);
		if (!st) st = sg_qtts_conv_load(be, w, p, C, C, 1, 1, 1, 1, &b->tdnn2);
		snprintf(p, sizeof(p), "speaker_encoder.blocks.%d.se_block.conv1", i);
		if (!st) st = sg_qtts_conv_load(be, w, p, C, s->se, 1, 1, 1, 1, &b->se1);
		snprintf(p, sizeof(p), "speaker_encoder.blocks.%d.se_block.conv2", i);
		if (!st) st = sg_qtts_conv_load(be, w, p, s->se, C, 1, 1, 1, 1, &b->se2);
	}
	int Cl = s->ch[n1 - 1];
	if (!st)
		st = sg_qtts_conv_load(be, w, "speaker_encoder.mfa.conv", Cl, Cl, s->ks[n1 - 1],
		                       s->dil[n1 - 1], 1, 1, &s->mfa);
	if (!st)
		st = sg_qtts_conv_load(be, w, "speaker_encoder.asp.tdnn.conv", 3 * Cl, s->att, 1, 1, 1, 1,
		                       &s->asp_tdnn);
	if (!st)
		st = sg_qtts_conv_load(be, w, "speaker_encoder.asp.conv", s->att, Cl, 1, 1, 1, 1,
		                       &s->asp_conv);
	if (!st) st = sg_qtts_conv_load(be, w, "speaker_encoder.fc", 2 * Cl, s->dim, 1, 1, 1, 1, &s->fc);
	if (st) {
		sg_qwen3_tts_spk_free(s);
		return sg_error_wrap(st, "qwen3-tts speaker encoder");
	}
	*out = s;
	return SG_OK;
}

void sg_qwen3_tts_spk_free(sg_qwen3_tts_spk *s)
{
	if (!s) return;
	sg_qtts_conv *cs[] = {&s->b0, &s->mfa, &s->asp_tdnn, &s->asp_conv, &s->fc};
	for (size_t i = 0; i < sizeof(cs) / sizeof(cs[0]); i++) sg_qtts_conv_free(cs[i]);
	for (int i = 0; i < SPK_MAX_LAYERS; i++) {
		spk_block *b = &s->blk[i];
		sg_qtts_conv_free(&b->tdnn1), sg_qtts_conv_free(&b->tdnn2), sg_qtts_conv_free(&b->se1),
		    sg_qtts_conv_free(&b->se2);
		for (int j = 0; j < SPK_MAX_SCALE - 1; j++) sg_qtts_conv_free(&b->res[j]);
	}
	sg_free(s);
}

int sg_qwen3_tts_spk_dim(const sg_qwen3_tts_spk *s)
{
	return s->dim;
}
int sg_qwen3_tts_spk_sample_rate(const sg_qwen3_tts_spk *s)
{
	return s->rate;
}

/* ---- forward ---- */

/* A TDNN: reflect padding "same" (left = total/2), the conv, ReLU (relu 0: none). x [T][cin]
 * (row stride xs floats), y [T][cout] (row stride ys). */
static sg_status tdnn(sg_qtts_conv *c, const float *x, int xs, int T, float *y, int ys, int relu)
{
	int total = c->dil * (c->K - 1), left = total / 2, right = total - left, Tp = T + total, To;
	if (left >= T || right >= T)
		return sg_error(
		    SG_ERR_INVALID_ARG,
		    "qwen3-tts speaker encoder: %d mel frames are too few for a reflect padding of %d "
		    "(the reference clip is too short)",
		    T, left > right ? left : right);
	float *xp = sg_malloc(sizeof(float) * (size_t)Tp * (size_t)c->cin);
	float *yo = ys == c->cout ? y : sg_malloc(sizeof(float) * (size_t)T * (size_t)c->cout);
	if (!xp || !yo) {
		sg_free(xp);
		if (yo != y) sg_free(yo);
		return sg_error(SG_ERR_NOMEM, "qwen3-tts speaker encoder: %d frames", T);
	}
	for (int t = 0; t < Tp; t++) {
		int j = t - left;
		if (j < 0)
			j = -j;
		else if (j >= T)
			j = 2 * (T - 1) - j;
		memcpy(xp + (size_t)t * c->cin, x + (size_t)j * xs, sizeof(float) * (size_t)c->cin);
	}
	sg_status st = sg_qtts_conv_run(c, xp, Tp, yo, &To);
	sg_free(xp);
	if (!st && relu)
		for (size_t i = 0; i < (size_t)T * c->cout; i++) yo[i] = yo[i] > 0 ? yo[i] : 0;
	if (yo != y) {
		for (int t = 0; !st && t < T; t++)
			memcpy(y + (size_t)t * ys, yo + (size_t)t * c->cout, sizeof(float) * (size_t)c->cout);
		sg_free(yo);
	}
	return st;
}

/* SE-Res2Net block: x [T][C] -> y [T][C] (row stride ys) */
static sg_status se_res2net(sg_qwen3_tts_spk *s, spk_block *b, const float *x, int T, int C, float *y, int ys)
{
	int wd = C / s->scale;
	float *h = sg_malloc(sizeof(float) * (size_t)T * C), *r = sg_malloc(sizeof(float) * (size_t)T * C);
	float *in = sg_malloc(sizeof(float) * (size_t)T * wd), *h2 = sg_malloc(sizeof(float) * (size_t)T * C);
	float *m = sg_malloc(sizeof(float) * (size_t)(C + s->se) * 2);
	sg_status st = h && r && in && h2 && m
	                   ? SG_OK
	                   : sg_error(SG_ERR_NOMEM, "qwen3-tts speaker encoder: %d frames", T);
	if (!st) st = tdnn(&b->tdnn1, x, C, T, h, C, 1);
	/* Res2Net: chunk 0 as is, chunk 1 through res[0], chunk i through res[i-1] after adding
	 * chunk i-1's output */
	for (int t = 0; !st && t < T; t++)
		memcpy(r + (size_t)t * C, h + (size_t)t * C, sizeof(float) * (size_t)wd);
	for (int i = 1; !st && i < s->scale; i++) {
		for (int t = 0; t < T; t++)
			for (int k = 0; k < wd; k++)
				in[(size_t)t * wd + k] = h[(size_t)t * C + i * wd + k] +
				                         (i > 1 ? r[(size_t)t * C + (i - 1) * wd + k] : 0.0f);
		st = tdnn(&b->res[i - 1], in, wd, T, r + (size_t)i * wd, C, 1);
	}
	if (!st) st = tdnn(&b->tdnn2, r, C, T, h2, C, 1);
	/* squeeze-excitation over the time mean */
	float *mean = m, *z = m + C, *g = m + C + s->se;
	int one;
	if (!st) {
		for (int c = 0; c < C; c++) {
			float acc = 0;
			for (int t = 0; t < T; t++) acc += h2[(size_t)t * C + c];
			mean[c] = acc / (float)T;
		}
		st = sg_qtts_conv_run(&b->se1, mean, 1, z, &one);
	}
	if (!st) {
		for (int k = 0; k < s->se; k++) z[k] = z[k] > 0 ? z[k] : 0;
		st = sg_qtts_conv_run(&b->se2, z, 1, g, &one);
	}
	if (!st) {
		for (int c = 0; c < C; c++) g[c] = 1.0f / (1.0f + expf(-g[c]));
		for (int t = 0; t < T; t++)
			for (int c = 0; c < C; c++)
				y[(size_t)t * ys + c] = h2[(size_t)t * C + c] * g[c] + x[(size_t)t * C + c];
	}
	sg_free(h), sg_free(r), sg_free(in), sg_free(h2), sg_free(m);
	return st;
}

/* mean and std of x [T][C] over time under weights a [T][C] (a NULL: 1/T each), std clamped at
 * 1e-12 before the root, as the package's _compute_statistics */
static void stats(const float *x, const float *a, int T, int C, float *mean, float *std)
{
	for (int c = 0; c < C; c++) {
		double mu = 0, var = 0;
		for (int t = 0; t < T; t++) mu += (a ? a[(size_t)t * C + c] : 1.0 / T) * x[(size_t)t * C + c];
		for (int t = 0; t < T; t++) {
			double d = x[(size_t)t * C + c] - mu;
			var += (a ? a[(size_t)t * C + c] : 1.0 / T) * d * d;
		}
		mean[c] = (float)mu;
		std[c] = (float)sqrt(var > 1e-12 ? var : 1e-12);
	}
}

sg_status sg_qwen3_tts_spk_embed_mel(sg_qwen3_tts_spk *s, const float *mel, int T, float *out)
{
	if (T < 1 || T > 1 << 20 || !mel)
		return sg_error(SG_ERR_INVALID_ARG, "qwen3-tts speaker encoder: %d mel frames", T);
	int nb = s->nl - 2, C = s->ch[1], Cl = s->ch[s->nl - 1];
	float *x0 = sg_malloc(sizeof(float) * (size_t)T * s->ch[0]);
	float *cat = sg_malloc(sizeof(float) * (size_t)T * Cl),
	      *h = sg_malloc(sizeof(float) * (size_t)T * Cl);
	float *ain = sg_malloc(sizeof(float) * (size_t)T * 3 * Cl),
	      *a = sg_malloc(sizeof(float) * (size_t)T * Cl);
	float *z = sg_malloc(sizeof(float) * (size_t)T * s->att),
	      *pool = sg_malloc(sizeof(float) * 4 * (size_t)Cl);
	sg_status st = x0 && cat && h && ain && a && z && pool
	                   ? SG_OK
	                   : sg_error(SG_ERR_NOMEM, "qwen3-tts speaker encoder: %d frames", T);
	if (!st) st = tdnn(&s->b0, mel, s->mel, T, x0, s->ch[0], 1);
	/* each block reads the previous one's output (the first reads blocks.0's) and writes its
	 * own columns of cat, which the mfa reads whole */
	for (int i = 0; !st && i < nb; i++) {
		const float *xin = x0;
		float *xb = NULL;
		if (i > 0) {
			xb = sg_malloc(sizeof(float) * (size_t)T * C);
			if (!xb) {
				st = sg_error(SG_ERR_NOMEM, "qwen3-tts speaker encoder");
				break;
			}
			for (int t = 0; t < T; t++)
				memcpy(xb + (size_t)t * C, cat + (size_t)t * Cl + (size_t)(i - 1) * C,
				       sizeof(float) * (size_t)C);
			xin = xb;
		}
		st = se_res2net(s, &s->blk[i + 1], xin, T, C, cat + (size_t)i * C, Cl);
		sg_free(xb);
	}
	if (!st) st = tdnn(&s->mfa, cat, Cl, T, h, Cl, 1);
	/* attentive statistics pooling */
	float *mean = pool, *std = pool + Cl;
	if (!st) {
		stats(h, NULL, T, Cl, mean, std);
		for (int t = 0; t < T; t++) {
			float *r = ain + (size_t)t * 3 * Cl;
			memcpy(r, h + (size_t)t * Cl, sizeof(float) * (size_t)Cl);
			memcpy(r + Cl, mean, sizeof(float) * (size_t)Cl);
			memcpy(r + 2 * Cl, std, sizeof(float) * (size_t)Cl);
		}
		st = tdnn(&s->asp_tdnn, ain, 3 * Cl, T, z, s->att, 1);
	}
	if (!st) {
		for (size_t i = 0; i < (size_t)T * s->att; i++) z[i] = tanhf(z[i]);
		st = tdnn(&s->asp_conv, z, s->att, T, a, Cl, 0);
	}
	if (!st) {
		for (int c = 0; c < Cl; c++) { /* softmax over time */
			float mx = -INFINITY;
			for (int t = 0; t < T; t++) mx = fmaxf(mx, a[(size_t)t * Cl + c]);
			double sum = 0;
			for (int t = 0; t < T; t++)
				sum += a[(size_t)t * Cl + c] = expf(a[(size_t)t * Cl + c] - mx);
			for (int t = 0; t < T; t++)
				a[(size_t)t * Cl + c] = (float)(a[(size_t)t * Cl + c] / sum);
		}
		stats(h, a, T, Cl, pool, pool + Cl);
		int one;
		st = sg_qtts_conv_run(&s->fc, pool, 1, out, &one);
	}
	sg_free(x0), sg_free(cat), sg_free(h), sg_free(ain), sg_free(a), sg_free(z), sg_free(pool);
	return st;
}

sg_status sg_qwen3_tts_spk_embed(sg_qwen3_tts_spk *s, const float *pcm, size_t n, float *out)
{
	sg_mel_mag_params mp = {
	    .rate = 24000, .n_fft = 1024, .win = 1024, .hop = 256, .n_mels = 128, .fmin = 0, .fmax = 12000};
	float *mel = NULL;
	int T = 0;
	sg_status st = sg_audio_log_mel_mag(&mp, pcm, n, &mel, &T);
	if (st)
		return sg_error_wrap(
		    st, "qwen3-tts speaker encoder: the reference clip (%zu samples at %d Hz)", n, s->rate);
	st = sg_qwen3_tts_spk_embed_mel(s, mel, T, out);
	sg_free(mel);
	return st;
}
