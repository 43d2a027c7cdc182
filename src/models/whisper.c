/*
 * Whisper's forward on the backend op table (see whisper.h), after the loader (whisper_load.c)
 * has bound the weights. With D = d_model, M = n_mels, N = n_audio_ctx, T = 2N mel frames:
 *
 * Encoder, all N positions at once (every matmul takes the GEMM path):
 *   conv1 (k=3, pad 1): the host lays the mel window out as im2col rows col[t][i*3 + j] =
 *     mel[i][t + j - 1] (zero outside), which is the layout of conv1's [D][M][3] weight read as
 *     [D][3M] rows, so conv1 is one matmul [T][3M] x [D][3M]^T. Its output goes to rows 1..T of
 *     a padded buffer xp [T + 2][D] whose first and last rows stay zero, then GELU.
 *   conv2 (k=3, stride 2, pad 1): out[t] = W0 xp[2t] + W1 xp[2t+1] + W2 xp[2t+2]. Viewing xp as
 *     N + 1 row pairs P[r] = (xp[2r], xp[2r+1]) of 2D values, that is [W0|W1] P[t] + W2 P[t+1][:D]:
 *     one matmul over the pairs, a gather of the pairs' first halves, a second matmul and an add
 *     (the loader re-orders conv2's weight into [W0|W1] and W2 once). Then GELU and positions.
 *   Blocks: x += attn(LN(x)) (no mask: every query's position is N-1 and causal is off, over the
 *     K/V rows the projections wrote, viewed as the cache [N][H][hd]); x += MLP(LN(x)); LN.
 *   GELU is the glu op with a tensor of ones as its up operand (erf GELU times 1).
 *   Each decoder layer's cross K/V = enc Wk^T, enc Wv^T + bv are computed here, once per window.
 *
 * Decoder, n tokens of one sequence from position p: x = tok[id] + pos[p..]; per block the
 * causal self-attention over the sequence's KV cache (kv_store at rows p..p+n-1), the
 * cross-attention over the window's K/V, the MLP; LN; logits = x tok^T (or proj_out).
 */
#include "models/whisper.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/flags.h"
#include "base/log.h"
#include "models/model.h"
#include "models/whisper_internal.h"

sg_whisper_params sg_whisper_default_params(void)
{
	sg_whisper_params p = {.backend = NULL, .n_threads = 0, .n_seq = 1};
	return p;
}

const sg_whisper_info *sg_whisper_get_info(const sg_whisper *w) { return &w->info; }
const char *sg_whisper_tokenizer_path(const sg_whisper *w) { return w->tokenizer; }

const char *sg_whisper_vocab(const sg_whisper *w, int id)
{
	return w->vocab && id >= 0 && id < w->n_vocab_str ? w->vocab[id] : NULL;
}

int sg_whisper_vocab_count(const sg_whisper *w) { return w->vocab ? w->n_vocab_str : 0; }

const char *sg_whisper_vocab_bytes(const sg_whisper *w, int id, size_t *len)
{
	const char *s = sg_whisper_vocab(w, id);
	*len = s ? (w->vocab_len ? w->vocab_len[id] : strlen(s)) : 0;
	return s;
}

/* t's first rows x cols values as a [rows][cols] tensor (t must hold that many). */
static sg_btensor shaped(const sg_btensor *t, int64_t cols, int64_t rows)
{
	sg_btensor v = *t;
	v.ne[0] = cols;
	v.ne[1] = rows;
	v.ne[2] = v.ne[3] = 1;
	v.row_bytes = (size_t)cols * 4;
	v.owned = 0;
	return v;
}

/* t [rows][H * hd] viewed as [rows][H][hd] (a K/V cache or attention input). */
static sg_btensor heads(const sg_btensor *t, int64_t H)
{
	sg_btensor v = *t;
	int64_t rows = sg_btensor_rows(t);
	v.ne[0] = t->ne[0] / H;
	v.ne[1] = H;
	v.ne[2] = rows;
	v.ne[3] = 1;
	v.row_bytes = (size_t)v.ne[0] * 4;
	v.owned = 0;
	return v;
}

static void dec_acts_free(sg_whisper *w)
{
	sg_btensor *t = (sg_btensor *)&w->da.x;
	size_t n = (sizeof(w->da) - offsetof(wh_dec_acts, x)) / sizeof(sg_btensor);
	for (size_t i = 0; i < n; i++)
		if (t[i].data) w->be->ops->tensor_free(w->be, &t[i]);
	memset(&w->da, 0, sizeof(w->da));
}

void sg_whisper_free(sg_whisper *w)
{
	if (!w) return;
	if (w->be) {
		dec_acts_free(w);
		for (int i = 0; i < w->n_owned; i++)
			if (w->owned[i].data) w->be->ops->tensor_free(w->be, &w->owned[i]);
		sg_backend_free(w->be);
	}
	for (int i = 0; i < w->n_host; i++) free(w->host[i]); /* posix_memalign'd */
	sg_free(w->host);
	sg_free(w->owned);
	if (w->dec)
		for (int L = 0; L < w->info.n_text_layer; L++) {
			sg_free(w->dec[L].kc);
			sg_free(w->dec[L].vc);
		}
	sg_free(w->enc);
	sg_free(w->dec);
	sg_free(w->align);
	for (int i = 0; i < w->n_vocab_str; i++) sg_free(w->vocab[i]);
	sg_free(w->vocab);
	sg_free(w->vocab_len);
	sg_whisper_close_weights(w);
	sg_free(w->tokenizer);
	sg_free(w->path);
	sg_free(w);
}

/* The encoder's activations and the decoder's state, allocated once per model. */
static sg_status alloc_state(sg_whisper *w, wh_enc_acts *e)
{
	const sg_whisper_info *i = &w->info;
	int64_t D = i->d_model, N = i->n_audio_ctx, T = 2 * N, M = i->n_mels, F = i->n_ffn;
	sg_status st = sg_whisper_alloc(w, SG_TYPE_F32, 3 * M, T, 1, &e->col);
	if (!st) st = sg_whisper_alloc(w, SG_TYPE_F32, D, T + 2, 1, &e->xp);
	sg_btensor *nd[] = {&e->x, &e->h, &e->q, &e->k, &e->v, &e->a, &w->enc_out};
	for (size_t k = 0; k < sizeof(nd) / sizeof(nd[0]) && !st; k++) st = sg_whisper_alloc(w, SG_TYPE_F32, D, N, 1, nd[k]);
	if (!st) st = sg_whisper_alloc(w, SG_TYPE_F32, F, N, 1, &e->f);
	int64_t n1 = T * D > N * F ? T * D : N * F;
	if (!st) st = sg_whisper_alloc(w, SG_TYPE_F32, n1, 1, 1, &w->ones);
	if (!st) st = sg_whisper_alloc(w, SG_TYPE_I32, N, 1, 1, &e->qpos);
	if (!st) st = sg_whisper_alloc(w, SG_TYPE_I32, D, 1, 1, &w->gidx);
	int64_t big = n1 > N ? n1 : N;
	float *ones = st ? NULL : sg_malloc(sizeof(float) * (size_t)big);
	if (!st && !ones) st = sg_error(SG_ERR_NOMEM, "whisper: %lld values", (long long)big);
	if (!st) {
		for (int64_t k = 0; k < n1; k++) ones[k] = 1.0f;
		st = w->be->ops->write(w->be, &w->ones, 0, ones, sizeof(float) * (size_t)n1);
	}
	int32_t *iv = (int32_t *)ones;
	if (!st) {
		for (int64_t k = 0; k < N; k++) iv[k] = (int32_t)(N - 1);
		st = w->be->ops->write(w->be, &e->qpos, 0, iv, sizeof(int32_t) * (size_t)N);
	}
	if (!st) {
		for (int64_t k = 0; k < D; k++) iv[k] = (int32_t)k;
		st = w->be->ops->write(w->be, &w->gidx, 0, iv, sizeof(int32_t) * (size_t)D);
	}
	sg_free(ones);
	for (int L = 0; L < i->n_text_layer && !st; L++) {
		wh_layer *l = &w->dec[L];
		st = sg_whisper_alloc(w, SG_TYPE_F32, D, N, 1, &l->ck);
		if (!st) st = sg_whisper_alloc(w, SG_TYPE_F32, D, N, 1, &l->cv);
		l->kc = sg_calloc((size_t)w->n_seq, sizeof(sg_btensor));
		l->vc = sg_calloc((size_t)w->n_seq, sizeof(sg_btensor));
		if (!st && (!l->kc || !l->vc)) st = sg_error(SG_ERR_NOMEM, "whisper: %d sequences", w->n_seq);
		int64_t H = i->n_text_head;
		for (int s = 0; s < w->n_seq && !st; s++) {
			st = sg_whisper_alloc(w, SG_TYPE_F32, D / H, H, i->n_text_ctx, &l->kc[s]);
			if (!st) st = sg_whisper_alloc(w, SG_TYPE_F32, D / H, H, i->n_text_ctx, &l->vc[s]);
		}
	}
	return st;
}

static wh_enc_acts *enc_acts(sg_whisper *w) { return &w->ea; }

/* A weight (any type the reference dequantizes) as F32 host values [rows][ne0]. */
static sg_status host_f32(sg_whisper *w, const sg_btensor *t, float **out)
{
	int64_t rows = sg_btensor_rows(t), cols = t->ne[0];
	size_t rb = sg_type_row_bytes(t->type, cols);
	uint8_t *raw = sg_malloc(rb * (size_t)rows);
	float *f = sg_malloc(sizeof(float) * (size_t)(rows * cols));
	sg_status st = raw && f && rb ? SG_OK : sg_error(SG_ERR_NOMEM, "whisper: %lld x %lld values", (long long)rows, (long long)cols);
	if (!st) st = w->be->ops->read(w->be, t, 0, raw, rb * (size_t)rows);
	for (int64_t r = 0; r < rows && !st; r++) sg_dequantize_ref(t->type, raw + (size_t)r * rb, f + r * cols, cols);
	sg_free(raw);
	if (st) {
		sg_free(f);
		return st;
	}
	*out = f;
	return SG_OK;
}

/*
 * The encoder's self-attention as matmuls, per head h (hd = D/H, N positions):
 *   Q_h = LN(x) Wq_h^T + bq_h (scaled by 1/sqrt(hd)), K_h = LN(x) Wk_h^T   [N][hd]
 *   S = Q_h K_h^T, softmax over each row                                 [N][N]
 *   V_h^T = Wv_h LN(x)^T (a matmul whose "weight" is LN(x))               [hd][N]
 *   O_h = S V_h (weight V_h^T), x += O_h Wo_h^T                           [N][hd], [N][D]
 * Wq_h, Wk_h are row blocks of the bound weights; Wv (F32) and Wo's per-head column blocks
 * (F32) are copied once here. v's bias is moved past the softmax, whose rows sum to 1:
 * softmax(S) (V + 1 bv^T) Wo^T = softmax(S) V Wo^T + Wo bv, so bo2 = bo + Wo bv and V has none.
 * Every product is a GEMM over all N positions, where the attention op runs one query's dot
 * products at a time (about a third of the GEMM's rate on the CPU, measured on tiny.en).
 */
static sg_status prepare_gemm_attn(sg_whisper *w)
{
	const sg_whisper_info *i = &w->info;
	sg_backend *be = w->be;
	int64_t D = i->d_model, H = i->n_audio_head, hd = D / H, N = i->n_audio_ctx;
	wh_enc_acts *e = &w->ea;
	/* A backend whose tensors live in device memory runs the attention op as one fused kernel, and
	 * its matmuls take weight-shaped operands only (K a multiple of 8, where N = 1500 is not):
	 * there the op path stays (measured on an H100: large-v3-turbo's encoder 68 ms a window). */
	sg_backend_caps caps = {0};
	if (be->ops->caps) be->ops->caps(be, &caps);
	w->gemm_attn = sg_flag_bool("SARAGOSSA_WHISPER_GEMM_ATTN") && !caps.device_memory &&
		       sg_backend_supports(be, SG_STAGE_MATMUL, SG_TYPE_F32) && sg_backend_supports(be, SG_STAGE_SOFTMAX, SG_TYPE_F32);
	if (!w->gemm_attn) return SG_OK;
	sg_status st = sg_whisper_alloc(w, SG_TYPE_F32, hd, N, 1, &e->qh);
	if (!st) st = sg_whisper_alloc(w, SG_TYPE_F32, hd, N, 1, &e->kh);
	if (!st) st = sg_whisper_alloc(w, SG_TYPE_F32, hd, N, 1, &e->oh);
	if (!st) st = sg_whisper_alloc(w, SG_TYPE_F32, N, hd, 1, &e->vt);
	if (!st) st = sg_whisper_alloc(w, SG_TYPE_F32, N, N, 1, &e->s);
	float *woh = st ? NULL : sg_malloc(sizeof(float) * (size_t)(D * D)), *bo2 = st ? NULL : sg_malloc(sizeof(float) * (size_t)D);
	if (!st && (!woh || !bo2)) st = sg_error(SG_ERR_NOMEM, "whisper: %lld values", (long long)(D * D));
	for (int L = 0; L < i->n_audio_layer && !st; L++) {
		wh_layer *l = &w->enc[L];
		float *wv = NULL, *wo = NULL, *bv = NULL, *bo = NULL;
		st = l->self.wv_mlx ? sg_whisper_stored_f32(l->self.wv_mlx, &wv) : host_f32(w, &l->self.wv, &wv);
		if (!st) st = l->self.wo_mlx ? sg_whisper_stored_f32(l->self.wo_mlx, &wo) : host_f32(w, &l->self.wo, &wo);
		if (!st) st = host_f32(w, &l->self.bv, &bv);
		if (!st) st = host_f32(w, &l->self.bo, &bo);
		if (!st) {
			for (int64_t o = 0; o < D; o++) {
				double acc = bo[o];
				for (int64_t k = 0; k < D; k++) acc += (double)wo[o * D + k] * bv[k];
				bo2[o] = (float)acc;
			}
			for (int64_t h = 0; h < H; h++)
				for (int64_t o = 0; o < D; o++) memcpy(woh + (h * D + o) * hd, wo + o * D + h * hd, sizeof(float) * (size_t)hd);
		}
		if (!st) st = sg_whisper_alloc(w, SG_TYPE_F32, D, D, 1, &l->wv32);
		if (!st) st = sg_whisper_alloc(w, SG_TYPE_F32, hd, D, H, &l->wo_h);
		if (!st) st = sg_whisper_alloc(w, SG_TYPE_F32, D, 1, 1, &l->bo2);
		if (!st) st = be->ops->write(be, &l->wv32, 0, wv, sizeof(float) * (size_t)(D * D));
		if (!st) st = be->ops->write(be, &l->wo_h, 0, woh, sizeof(float) * (size_t)(D * D));
		if (!st) st = be->ops->write(be, &l->bo2, 0, bo2, sizeof(float) * (size_t)D);
		sg_free(wv);
		sg_free(wo);
		sg_free(bv);
		sg_free(bo);
	}
	sg_free(woh);
	sg_free(bo2);
	return st;
}

/* D values of a [D] vector from offset off, as a [n] vector view. */
static sg_btensor vec_view(const sg_btensor *t, int64_t off, int64_t n)
{
	sg_btensor v = *t;
	v.ne[0] = n;
	v.ne[1] = v.ne[2] = v.ne[3] = 1;
	v.row_bytes = (size_t)n * 4;
	v.data = (char *)t->data + (size_t)off * 4;
	v.owned = 0;
	return v;
}

/* x += self-attention(LN(x) in e->h) through the GEMM path (see prepare_gemm_attn). */
static sg_status enc_attn_gemm(sg_whisper *w, wh_enc_acts *e, const wh_layer *l)
{
	sg_backend *be = w->be;
	const sg_backend_ops *o = be->ops;
	const sg_whisper_info *i = &w->info;
	int64_t D = i->d_model, H = i->n_audio_head, hd = D / H;
	float scale = 1.0f / sqrtf((float)hd);
	sg_status st = SG_OK;
	for (int64_t h = 0; h < H && !st; h++) {
		sg_btensor wq = sg_btensor_rows_view(&l->self.wq, h * hd, hd), wk = sg_btensor_rows_view(&l->self.wk, h * hd, hd);
		sg_btensor wv = sg_btensor_rows_view(&l->wv32, h * hd, hd), wo = sg_btensor_rows_view(&l->wo_h, h * D, D);
		sg_btensor bq = vec_view(&l->self.bq, h * hd, hd), bk = l->self.bk.data ? vec_view(&l->self.bk, h * hd, hd) : bq;
		st = o->matmul(be, &wq, &e->h, &bq, &e->qh);
		if (!st) st = o->scale(be, &e->qh, scale, &e->qh);
		if (!st) st = o->matmul(be, &wk, &e->h, l->self.bk.data ? &bk : NULL, &e->kh);
		if (!st) st = o->matmul(be, &e->kh, &e->qh, NULL, &e->s);
		if (!st) st = o->softmax(be, &e->s, &e->s);
		if (!st) st = o->matmul(be, &e->h, &wv, NULL, &e->vt);
		if (!st) st = o->matmul(be, &e->vt, &e->s, NULL, &e->oh);
		if (!st) st = o->matmul(be, &wo, &e->oh, h == 0 ? &l->bo2 : NULL, &e->a);
		if (!st) st = o->add(be, &e->x, &e->a, &e->x);
	}
	return st;
}

sg_status sg_whisper_load(const char *path, const sg_whisper_params *p, sg_whisper **out)
{
	*out = NULL;
	sg_whisper_params dp = sg_whisper_default_params();
	if (!p) p = &dp;
	if (!path) return sg_error(SG_ERR_INVALID_ARG, "whisper: no path");
	if (p->n_seq < 0 || p->n_seq > 64 || p->n_threads < 0)
		return sg_error(SG_ERR_INVALID_ARG, "whisper: n_seq %d (0 to 64), n_threads %d", p->n_seq, p->n_threads);
	const char *be_name = p->backend ? p->backend : sg_flag_str("SARAGOSSA_BACKEND");
	if (!be_name || !*be_name) be_name = "auto";
	sg_whisper *w = sg_calloc(1, sizeof(*w));
	if (!w) return sg_error(SG_ERR_NOMEM, "whisper: loading '%s'", path);
	w->n_seq = p->n_seq ? p->n_seq : 1;
	w->path = sg_strdup(path);
	sg_status st = w->path ? SG_OK : sg_error(SG_ERR_NOMEM, "whisper: a path");
	if (!st) st = sg_model_open_backend("whisper", be_name, p->n_threads, &w->be);
	if (!st) st = sg_whisper_load_weights(w, path);
	if (!st) st = alloc_state(w, &w->ea);
	if (!st) st = prepare_gemm_attn(w);
	if (st) {
		sg_error_wrap(st, "whisper model '%s'", path);
		sg_whisper_free(w);
		return st;
	}
	*out = w;
	return SG_OK;
}

/* x += attention block (self over its own rows, no mask) of the encoder. */
static sg_status enc_layer(sg_whisper *w, wh_enc_acts *e, const wh_layer *l)
{
	sg_backend *be = w->be;
	const sg_backend_ops *o = be->ops;
	const sg_whisper_info *i = &w->info;
	int64_t H = i->n_audio_head, N = i->n_audio_ctx, F = i->n_ffn;
	const float eps = 1e-5f;
	sg_attn_params ap = {.scale = 0.0f, .causal = 0};
	sg_btensor kc = heads(&e->k, H), vc = heads(&e->v, H), ones = shaped(&w->ones, F, N);
	sg_status st = o->layernorm(be, &e->x, &l->ln1_w, &l->ln1_b, eps, &e->h);
	if (w->gemm_attn) {
		if (!st) st = enc_attn_gemm(w, e, l);
		goto mlp;
	}
	if (!st) st = o->matmul(be, &l->self.wq, &e->h, &l->self.bq, &e->q);
	if (!st) st = o->matmul(be, &l->self.wk, &e->h, l->self.bk.data ? &l->self.bk : NULL, &e->k);
	if (!st) st = o->matmul(be, &l->self.wv, &e->h, &l->self.bv, &e->v);
	if (!st) st = o->attention(be, &e->q, &kc, &vc, &e->qpos, &ap, &e->a);
	if (!st) st = o->matmul(be, &l->self.wo, &e->a, &l->self.bo, &e->h);
	if (!st) st = o->add(be, &e->x, &e->h, &e->x);
mlp:
	if (!st) st = o->layernorm(be, &e->x, &l->ln2_w, &l->ln2_b, eps, &e->h);
	if (!st) st = o->matmul(be, &l->fc1, &e->h, &l->fc1_b, &e->f);
	if (!st) st = o->glu(be, &e->f, &ones, SG_ACT_GELU, &e->f);
	if (!st) st = o->matmul(be, &l->fc2, &e->f, &l->fc2_b, &e->h);
	if (!st) st = o->add(be, &e->x, &e->h, &e->x);
	return st;
}

/* conv1 + GELU + conv2 + GELU + positions into e->x (see the top of the file). */
static sg_status enc_convs(sg_whisper *w, wh_enc_acts *e)
{
	sg_backend *be = w->be;
	const sg_backend_ops *o = be->ops;
	const sg_whisper_info *i = &w->info;
	int64_t D = i->d_model, N = i->n_audio_ctx, T = 2 * N;
	sg_btensor y1 = sg_btensor_rows_view(&e->xp, 1, T), ones1 = shaped(&w->ones, D, T), onesN = shaped(&w->ones, D, N);
	sg_btensor pairs = shaped(&e->xp, 2 * D, N + 1);
	sg_btensor p0 = sg_btensor_rows_view(&pairs, 0, N), p1 = sg_btensor_rows_view(&pairs, 1, N);
	sg_status st = o->matmul(be, &w->conv1, &e->col, &w->conv1_b, &y1);
	if (!st) st = o->glu(be, &y1, &ones1, SG_ACT_GELU, &y1);
	if (!st) st = o->matmul(be, &w->conv2a, &p0, &w->conv2_b, &e->x);
	if (!st) st = o->gather_cols(be, &p1, &w->gidx, &e->a);
	if (!st) st = o->matmul(be, &w->conv2b, &e->a, NULL, &e->h);
	if (!st) st = o->add(be, &e->x, &e->h, &e->x);
	if (!st) st = o->glu(be, &e->x, &onesN, SG_ACT_GELU, &e->x);
	if (!st) st = o->add(be, &e->x, &w->enc_pos, &e->x);
	return st;
}

sg_status sg_whisper_encode(sg_whisper *w, const float *mel, int n_frames)
{
	const sg_whisper_info *i = &w->info;
	int64_t M = i->n_mels, N = i->n_audio_ctx, T = 2 * N;
	if (!mel || n_frames != T)
		return sg_error(SG_ERR_INVALID_ARG, "whisper_encode: %d mel frames (this model takes windows of exactly %lld)", n_frames, (long long)T);
	for (int64_t k = 0; k < M * T; k++)
		if (!isfinite(mel[k]))
			return sg_error(SG_ERR_INVALID_ARG, "whisper_encode: mel[%lld][%lld] is not finite", (long long)(k / T), (long long)(k % T));
	wh_enc_acts *e = enc_acts(w);
	sg_backend *be = w->be;
	float *col = sg_malloc(sizeof(float) * (size_t)(T * 3 * M));
	if (!col) return sg_error(SG_ERR_NOMEM, "whisper_encode: %lld values", (long long)(T * 3 * M));
	for (int64_t t = 0; t < T; t++)
		for (int64_t m = 0; m < M; m++)
			for (int64_t j = 0; j < 3; j++) {
				int64_t s = t + j - 1;
				col[(t * M + m) * 3 + j] = s >= 0 && s < T ? mel[m * T + s] : 0.0f;
			}
	w->encoded = 0;
	sg_status st = be->ops->write(be, &e->col, 0, col, sizeof(float) * (size_t)(T * 3 * M));
	sg_free(col);
	if (!st) st = enc_convs(w, e);
	for (int L = 0; L < i->n_audio_layer && !st; L++) {
		st = enc_layer(w, e, &w->enc[L]);
		if (st) sg_error_wrap(st, "whisper encoder layer %d", L);
	}
	if (!st) st = be->ops->layernorm(be, &e->x, &w->enc_ln_w, &w->enc_ln_b, 1e-5f, &w->enc_out);
	for (int L = 0; L < i->n_text_layer && !st; L++) {
		const wh_layer *l = &w->dec[L];
		st = be->ops->matmul(be, &l->cross.wk, &w->enc_out, l->cross.bk.data ? &l->cross.bk : NULL, (sg_btensor *)&l->ck);
		if (!st) st = be->ops->matmul(be, &l->cross.wv, &w->enc_out, &l->cross.bv, (sg_btensor *)&l->cv);
	}
	if (!st) st = be->ops->sync(be);
	if (!st) w->encoded = 1;
	return st;
}

sg_status sg_whisper_encoder_output(sg_whisper *w, float *out)
{
	if (!w->encoded) return sg_error(SG_ERR_INVALID_ARG, "whisper: no window has been encoded");
	size_t n = (size_t)w->info.n_audio_ctx * (size_t)w->info.d_model;
	return w->be->ops->read(w->be, &w->enc_out, 0, out, sizeof(float) * n);
}

/* Decoder activations for at least n tokens. */
static sg_status dec_acts(sg_whisper *w, int n)
{
	wh_dec_acts *a = &w->da;
	if (a->cap >= n) return SG_OK;
	dec_acts_free(w);
	const sg_whisper_info *i = &w->info;
	sg_backend *be = w->be;
	int cap = n < 8 ? 8 : n;
	int64_t D = i->d_model, F = i->n_ffn, V = i->n_vocab;
	int64_t nd[4] = {D, cap, 1, 1}, nf[4] = {F, cap, 1, 1}, ni[4] = {cap, 1, 1, 1}, nv[4] = {V, cap, 1, 1};
	sg_status st = SG_OK;
	sg_btensor *fd[] = {&a->x, &a->h, &a->q, &a->k, &a->v, &a->a, &a->t};
	for (size_t k = 0; k < sizeof(fd) / sizeof(fd[0]) && !st; k++) st = be->ops->tensor_alloc(be, SG_TYPE_F32, nd, fd[k]);
	if (!st) st = be->ops->tensor_alloc(be, SG_TYPE_F32, nf, &a->f);
	if (!st) st = be->ops->tensor_alloc(be, SG_TYPE_F32, nf, &a->ones);
	if (!st) st = be->ops->tensor_alloc(be, SG_TYPE_I32, ni, &a->ids);
	if (!st) st = be->ops->tensor_alloc(be, SG_TYPE_I32, ni, &a->pos);
	if (!st) st = be->ops->tensor_alloc(be, SG_TYPE_I32, ni, &a->xpos);
	if (!st) st = be->ops->tensor_alloc(be, SG_TYPE_F32, nv, &a->logits);
	float *h = st ? NULL : sg_malloc(sizeof(float) * (size_t)(F * cap));
	if (!st && !h) st = sg_error(SG_ERR_NOMEM, "whisper: %lld values", (long long)(F * cap));
	if (!st) {
		for (int64_t k = 0; k < F * cap; k++) h[k] = 1.0f;
		st = be->ops->write(be, &a->ones, 0, h, sizeof(float) * (size_t)(F * cap));
	}
	if (!st) {
		int32_t *iv = (int32_t *)h;
		for (int k = 0; k < cap; k++) iv[k] = i->n_audio_ctx - 1;
		st = be->ops->write(be, &a->xpos, 0, iv, sizeof(int32_t) * (size_t)cap);
	}
	sg_free(h);
	if (st) {
		dec_acts_free(w);
		return st;
	}
	a->cap = cap;
	return SG_OK;
}

/* The decoder over n tokens (ids and positions already written). When qcap is set, each layer
 * L with qcap[L] non-NULL copies its cross-attention queries [n][D] there. */
static sg_status dec_run(sg_whisper *w, int seq, int n, float **qcap)
{
	sg_backend *be = w->be;
	const sg_backend_ops *o = be->ops;
	const sg_whisper_info *i = &w->info;
	wh_dec_acts *a = &w->da;
	int64_t D = i->d_model, F = i->n_ffn, H = i->n_text_head;
	const float eps = 1e-5f;
	sg_btensor x = sg_btensor_rows_view(&a->x, 0, n), h = sg_btensor_rows_view(&a->h, 0, n);
	sg_btensor q = sg_btensor_rows_view(&a->q, 0, n), k = sg_btensor_rows_view(&a->k, 0, n);
	sg_btensor v = sg_btensor_rows_view(&a->v, 0, n), at = sg_btensor_rows_view(&a->a, 0, n);
	sg_btensor f = sg_btensor_rows_view(&a->f, 0, n), ones = sg_btensor_rows_view(&a->ones, 0, n);
	sg_btensor ids = shaped(&a->ids, n, 1), pos = shaped(&a->pos, n, 1), xpos = shaped(&a->xpos, n, 1);
	sg_btensor kh = heads(&k, H), vh = heads(&v, H);
	sg_attn_params self = {.scale = 0.0f, .causal = 1}, cross = {.scale = 0.0f, .causal = 0};
	sg_status st = o->embed(be, &w->tok, &ids, &x);
	if (!st) st = o->embed(be, &w->dec_pos, &pos, &h);
	if (!st) st = o->add(be, &x, &h, &x);
	for (int L = 0; L < i->n_text_layer && !st; L++) {
		const wh_layer *l = &w->dec[L];
		sg_btensor ck = heads(&l->ck, H), cv = heads(&l->cv, H);
		st = o->layernorm(be, &x, &l->ln1_w, &l->ln1_b, eps, &h);
		if (!st) st = o->matmul(be, &l->self.wq, &h, &l->self.bq, &q);
		if (!st) st = o->matmul(be, &l->self.wk, &h, l->self.bk.data ? &l->self.bk : NULL, &k);
		if (!st) st = o->matmul(be, &l->self.wv, &h, &l->self.bv, &v);
		if (!st) st = o->kv_store(be, &kh, &vh, &pos, &l->kc[seq], &l->vc[seq]);
		if (!st) st = o->attention(be, &q, &l->kc[seq], &l->vc[seq], &pos, &self, &at);
		if (!st) st = o->matmul(be, &l->self.wo, &at, &l->self.bo, &h);
		if (!st) st = o->add(be, &x, &h, &x);
		if (!st) st = o->layernorm(be, &x, &l->lnx_w, &l->lnx_b, eps, &h);
		if (!st) st = o->matmul(be, &l->cross.wq, &h, &l->cross.bq, &q);
		if (!st && qcap && qcap[L]) st = o->read(be, &q, 0, qcap[L], sizeof(float) * (size_t)(n * D));
		if (!st) st = o->attention(be, &q, &ck, &cv, &xpos, &cross, &at);
		if (!st) st = o->matmul(be, &l->cross.wo, &at, &l->cross.bo, &h);
		if (!st) st = o->add(be, &x, &h, &x);
		if (!st) st = o->layernorm(be, &x, &l->ln2_w, &l->ln2_b, eps, &h);
		if (!st) st = o->matmul(be, &l->fc1, &h, &l->fc1_b, &f);
		if (!st) st = o->glu(be, &f, &ones, SG_ACT_GELU, &f);
		if (!st) st = o->matmul(be, &l->fc2, &f, &l->fc2_b, &h);
		if (!st) st = o->add(be, &x, &h, &x);
		if (st) sg_error_wrap(st, "whisper decoder layer %d", L);
	}
	if (!st) st = o->layernorm(be, &x, &w->dec_ln_w, &w->dec_ln_b, eps, &x);
	(void)F;
	return st;
}

static sg_status dec_begin(sg_whisper *w, int seq, const int32_t *ids, int n, int pos, const char *fn)
{
	const sg_whisper_info *i = &w->info;
	if (!w->encoded) return sg_error(SG_ERR_INVALID_ARG, "%s: no window has been encoded", fn);
	if (seq < 0 || seq >= w->n_seq) return sg_error(SG_ERR_RANGE, "%s: sequence %d outside [0, %d)", fn, seq, w->n_seq);
	if (!ids || n < 1 || pos < 0 || (int64_t)pos + n > i->n_text_ctx)
		return sg_error(SG_ERR_RANGE, "%s: %d tokens at position %d (the decoder holds %d positions)", fn, n, pos, i->n_text_ctx);
	for (int k = 0; k < n; k++)
		if (ids[k] < 0 || ids[k] >= i->n_vocab)
			return sg_error(SG_ERR_RANGE, "%s: token %d = %d is outside the vocabulary [0, %d)", fn, k, ids[k], i->n_vocab);
	sg_status st = dec_acts(w, n);
	if (st) return st;
	int32_t *p = sg_malloc(sizeof(int32_t) * (size_t)n);
	if (!p) return sg_error(SG_ERR_NOMEM, "%s: %d positions", fn, n);
	for (int k = 0; k < n; k++) p[k] = pos + k;
	st = w->be->ops->write(w->be, &w->da.ids, 0, ids, sizeof(int32_t) * (size_t)n);
	if (!st) st = w->be->ops->write(w->be, &w->da.pos, 0, p, sizeof(int32_t) * (size_t)n);
	sg_free(p);
	return st;
}

sg_status sg_whisper_decode(sg_whisper *w, int seq, const int32_t *ids, int n, int pos, int all_logits, float *logits)
{
	sg_status st = dec_begin(w, seq, ids, n, pos, "whisper_decode");
	if (!st) st = dec_run(w, seq, n, NULL);
	if (st) return st;
	sg_backend *be = w->be;
	int64_t V = w->info.n_vocab;
	int rows = all_logits ? n : 1;
	sg_btensor x = sg_btensor_rows_view(&w->da.x, all_logits ? 0 : n - 1, rows);
	sg_btensor lg = sg_btensor_rows_view(&w->da.logits, 0, rows);
	st = be->ops->matmul(be, &w->proj, &x, NULL, &lg);
	if (!st && logits) st = be->ops->read(be, &lg, 0, logits, sizeof(float) * (size_t)(rows * V));
	return st;
}

sg_status sg_whisper_seq_copy(sg_whisper *w, int src, int dst, int n_pos)
{
	const sg_whisper_info *i = &w->info;
	if (src < 0 || src >= w->n_seq || dst < 0 || dst >= w->n_seq || n_pos < 0 || n_pos > i->n_text_ctx)
		return sg_error(SG_ERR_RANGE, "whisper_seq_copy: %d -> %d, %d positions (%d sequences of %d)", src, dst, n_pos, w->n_seq,
				i->n_text_ctx);
	if (src == dst || !n_pos) return SG_OK;
	sg_backend *be = w->be;
	size_t bytes = (size_t)n_pos * (size_t)i->d_model * sizeof(float);
	float *tmp = be->ops->copy ? NULL : sg_malloc(bytes);
	if (!be->ops->copy && !tmp) return sg_error(SG_ERR_NOMEM, "whisper_seq_copy: %zu bytes", bytes);
	sg_status st = SG_OK;
	for (int L = 0; L < i->n_text_layer && !st; L++) {
		wh_layer *l = &w->dec[L];
		sg_btensor *pairs[2][2] = {{&l->kc[src], &l->kc[dst]}, {&l->vc[src], &l->vc[dst]}};
		for (int k = 0; k < 2 && !st; k++) {
			if (be->ops->copy) {
				st = be->ops->copy(be, pairs[k][0], 0, pairs[k][1], 0, bytes);
			} else {
				st = be->ops->read(be, pairs[k][0], 0, tmp, bytes);
				if (!st) st = be->ops->write(be, pairs[k][1], 0, tmp, bytes);
			}
		}
	}
	sg_free(tmp);
	return st;
}

sg_status sg_whisper_align(sg_whisper *w, const int32_t *ids, int n, int n_keys, int n_text, float *attn, float *next_prob)
{
	const sg_whisper_info *i = &w->info;
	int nh = i->n_align_heads;
	if (!nh) return sg_error(SG_ERR_UNSUPPORTED, "whisper_align: the model names no alignment heads");
	int64_t D = i->d_model, N = i->n_audio_ctx, H = i->n_text_head, hd = D / H, V = i->n_vocab;
	if (n_keys < 1 || n_keys > N)
		return sg_error(SG_ERR_RANGE, "whisper_align: %d keys asked, the window has %lld", n_keys, (long long)N);
	if (next_prob && (n_text < 1 || n_text > V))
		return sg_error(SG_ERR_RANGE, "whisper_align: %d text tokens in a vocabulary of %lld", n_text, (long long)V);
	sg_status st = dec_begin(w, 0, ids, n, 0, "whisper_align");
	if (st) return st;
	int nL = i->n_text_layer;
	float **qcap = sg_calloc((size_t)nL, sizeof(float *));
	float **kcap = sg_calloc((size_t)nL, sizeof(float *));
	if (!qcap || !kcap) st = sg_error(SG_ERR_NOMEM, "whisper_align: %d layers", nL);
	for (int a = 0; a < nh && !st; a++) {
		int L = i->align_heads[a][0];
		if (qcap[L]) continue;
		qcap[L] = sg_malloc(sizeof(float) * (size_t)(n * D));
		kcap[L] = sg_malloc(sizeof(float) * (size_t)(N * D));
		if (!qcap[L] || !kcap[L]) st = sg_error(SG_ERR_NOMEM, "whisper_align: %lld values", (long long)(N * D));
		if (!st) st = w->be->ops->read(w->be, &w->dec[L].ck, 0, kcap[L], sizeof(float) * (size_t)(N * D));
	}
	if (!st) st = dec_run(w, 0, n, qcap);
	/* softmax(q . k / sqrt(hd)) over the first n_keys positions, per alignment head and token:
	 * the weights the attention op applies but does not hand out */
	float scale = 1.0f / sqrtf((float)hd);
	for (int a = 0; a < nh && !st; a++) {
		int L = i->align_heads[a][0], hh = i->align_heads[a][1];
		for (int t = 0; t < n; t++) {
			const float *qv = qcap[L] + (int64_t)t * D + hh * hd;
			float *o = attn + ((int64_t)a * n + t) * n_keys, mx = -INFINITY;
			for (int64_t j = 0; j < n_keys; j++) {
				const float *kv = kcap[L] + j * D + hh * hd;
				float s = 0.0f;
				for (int64_t d = 0; d < hd; d++) s += qv[d] * kv[d];
				o[j] = s * scale;
				mx = o[j] > mx ? o[j] : mx;
			}
			double sum = 0.0;
			for (int64_t j = 0; j < n_keys; j++) sum += (o[j] = expf(o[j] - mx));
			for (int64_t j = 0; j < n_keys; j++) o[j] = (float)(o[j] / sum);
		}
	}
	/* each position's probability of the next id, over the first n_text ids */
	float *row = !st && next_prob ? sg_malloc(sizeof(float) * (size_t)V) : NULL;
	if (!st && next_prob && !row) st = sg_error(SG_ERR_NOMEM, "whisper_align: %lld logits", (long long)V);
	if (row) {
		sg_backend *be = w->be;
		sg_btensor x = sg_btensor_rows_view(&w->da.x, 0, n), lg = sg_btensor_rows_view(&w->da.logits, 0, n);
		st = be->ops->matmul(be, &w->proj, &x, NULL, &lg);
		for (int t = 0; t < n && !st; t++) {
			next_prob[t] = 0.0f;
			if (t + 1 >= n || ids[t + 1] >= n_text) continue;
			st = be->ops->read(be, &lg, sizeof(float) * (size_t)(t * V), row, sizeof(float) * (size_t)V);
			float mx = -INFINITY;
			for (int j = 0; j < n_text; j++) mx = row[j] > mx ? row[j] : mx;
			double sum = 0.0;
			for (int j = 0; j < n_text; j++) sum += expf(row[j] - mx);
			next_prob[t] = (float)(expf(row[ids[t + 1]] - mx) / sum);
		}
	}
	sg_free(row);
	for (int L = 0; L < nL && qcap && kcap; L++) {
		sg_free(qcap[L]);
		sg_free(kcap[L]);
	}
	sg_free(qcap);
	sg_free(kcap);
	return st;
}

sg_status sg_whisper_cross_attn(sg_whisper *w, const int32_t *ids, int n, float *out)
{
	return sg_whisper_align(w, ids, n, w->info.n_audio_ctx, 0, out, NULL);
}
