/*
 * Whisper's loader: reads the hyper-parameters and binds every weight from one of four sources.
 *
 *   Hugging Face   config.json (model_type whisper) + safetensors, transformers' names
 *                  (model.encoder.layers.L.self_attn.q_proj, ...); k_proj has no bias; the
 *                  output matrix is the token embedding unless proj_out.weight is stored.
 *   CTranslate2    model.bin (formats/ct2.c) + config.json (alignment heads only): sizes come from
 *                  the variables' shapes. Self-attention has one fused [3D][D] qkv matrix
 *                  (linear_0) and the out projection (linear_1); cross-attention has q (linear_0),
 *                  a fused [2D][D] kv (linear_1) and out (linear_2). The fused matrices are bound
 *                  once and viewed as their row blocks, so nothing is split at run time.
 *   MLX            config.json with openai-whisper's ModelDimensions (n_mels, n_audio_state, ...;
 *                  "quantization": {group_size, bits} when quantized) + weights.safetensors or
 *                  weights.npz, openai-whisper's names (encoder.blocks.L.attn.query, mlp1, mlp2,
 *                  ...) as mlx-examples' converter writes them: conv weights [out][k][in], no
 *                  encoder positions (sinusoids, made here), the decoder's alignment heads as an
 *                  int64 [n][2] tensor, Linear and Embedding weights MLX affine when quantized.
 *   whisper.cpp    a ggml .bin: openai-whisper's names (mlp.0, mlp.2) and an embedded vocabulary.
 *
 * Matrices are bound in place where the backend takes their type and the bytes are aligned
 * (CTranslate2 stores variables at any byte: those are copied once into aligned host memory).
 * Norm weights and biases are widened to F32. conv2's weight is re-ordered once into the two
 * matrices the forward multiplies (see whisper.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/json.h"
#include "formats/ct2.h"
#include "formats/ggml_whisper.h"
#include "formats/weights.h"
#include "models/whisper_internal.h"

enum { SRC_HF, SRC_CT2, SRC_GGML, SRC_MLX };

typedef struct wh_src {
	int kind;
	sg_weights *st; /* SRC_HF, SRC_MLX */
	sg_ct2 ct2;     /* SRC_CT2 */
	int ct2_open;
	sg_ggml_whisper gg; /* SRC_GGML */
	int gg_open;
	json_t *config; /* CTranslate2's config.json (HF: st->config); owned for CT2 */
} wh_src;

static const sg_tensor *src_find(const wh_src *s, const char *name)
{
	if (s->kind == SRC_HF || s->kind == SRC_MLX) return sg_weights_find(s->st, name);
	if (s->kind == SRC_GGML) return sg_ggml_whisper_find(&s->gg, name);
	const sg_ct2_var *v = sg_ct2_find(&s->ct2, name);
	return v ? &v->t : NULL;
}

sg_status sg_whisper_own(sg_whisper *w, const sg_btensor *t)
{
	if (w->n_owned == w->cap_owned) {
		int cap = w->cap_owned ? 2 * w->cap_owned : 64;
		sg_btensor *p = sg_realloc(w->owned, sizeof(*p) * (size_t)cap);
		if (!p) {
			sg_btensor c = *t;
			w->be->ops->tensor_free(w->be, &c);
			return sg_error(SG_ERR_NOMEM, "whisper: %d tensors", cap);
		}
		w->owned = p;
		w->cap_owned = cap;
	}
	w->owned[w->n_owned++] = *t;
	return SG_OK;
}

sg_status sg_whisper_alloc(sg_whisper *w, sg_type type, int64_t ne0, int64_t ne1, int64_t ne2, sg_btensor *out)
{
	int64_t ne[4] = {ne0, ne1, ne2, 1};
	sg_status st = w->be->ops->tensor_alloc(w->be, type, ne, out);
	if (st) return sg_error_wrap(st, "whisper: a [%lld][%lld][%lld] tensor", (long long)ne2, (long long)ne1, (long long)ne0);
	return sg_whisper_own(w, out);
}

static sg_status keep_host(sg_whisper *w, void *p)
{
	if (w->n_host == w->cap_host) {
		int cap = w->cap_host ? 2 * w->cap_host : 64;
		void **q = sg_realloc(w->host, sizeof(*q) * (size_t)cap);
		if (!q) {
			sg_free(p);
			return sg_error(SG_ERR_NOMEM, "whisper: %d host buffers", cap);
		}
		w->host = q;
		w->cap_host = cap;
	}
	w->host[w->n_host++] = p;
	return SG_OK;
}

static char *shape_str(const int64_t *ne, int n, char *buf, size_t cap)
{
	size_t o = (size_t)snprintf(buf, cap, "[");
	for (int i = 0; i < n && o < cap; i++) o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? ", " : "", (long long)ne[i]);
	if (o < cap) snprintf(buf + o, cap - o, "]");
	return buf;
}

/* The tensor called name with n dims of exactly ne (innermost first); NULL (an error naming both
 * shapes, or "missing") otherwise. optional: absent gives NULL with no error. */
static const sg_tensor *need(const wh_src *s, const char *name, int n, const int64_t *ne, int optional, sg_status *st)
{
	const sg_tensor *t = src_find(s, name);
	if (!t) {
		if (!optional) *st = sg_error(SG_ERR_FORMAT, "%s: missing", name);
		return NULL;
	}
	int ok = t->n_dims == n;
	for (int i = 0; i < n && ok; i++) ok = t->ne[i] == ne[i];
	if (!ok) {
		char a[96], b[96];
		*st = sg_error(SG_ERR_FORMAT, "%s: expected %s, found %s %s", name, shape_str(ne, n, a, sizeof(a)),
			       sg_type_name(t->type), shape_str(t->ne, t->n_dims, b, sizeof(b)));
		return NULL;
	}
	return t;
}

/* The per-row float32 scale of a CTranslate2 int8 weight (W = q / scale); NULL otherwise. */
static const float *i8_scales(const sg_whisper *w, const sg_tensor *t, int64_t rows, sg_status *st)
{
	if (w->src->kind != SRC_CT2 || t->type != SG_TYPE_I8) return NULL;
	const sg_ct2_var *v = sg_ct2_find(&w->src->ct2, t->name);
	if (!v || !v->scale || v->scale->type != SG_TYPE_F32 || sg_tensor_nelem(v->scale) != rows) {
		*st = sg_error(SG_ERR_UNSUPPORTED, "%s: int8 without one float32 scale per row", t->name);
		return NULL;
	}
	return (const float *)v->scale->data; /* may be unaligned: read with memcpy */
}

/*
 * A CTranslate2 int8 matrix [rows][cols] as ggml's Q8_0 (blocks of 32: an f16 scale d and 32
 * int8 codes, x = d q): the codes are CTranslate2's, d = 1 / its row scale, so the matmul runs
 * the Q8_0 kernels on the same codes (the only rounding is d's to f16). cols % 32 == 0.
 */
static sg_status i8_to_q8_0(sg_whisper *w, const sg_tensor *t, const float *scales, int64_t cols, int64_t rows, void **out)
{
	size_t rb = sg_type_row_bytes(SG_TYPE_Q8_0, cols), total = rb * (size_t)rows;
	uint8_t *q = NULL;
	if (posix_memalign((void **)&q, 64, total > 0 ? total : 1))
		return sg_error(SG_ERR_NOMEM, "%s: %lld rows", t->name, (long long)rows);
	for (int64_t r = 0; r < rows; r++) {
		float sc;
		memcpy(&sc, (const uint8_t *)scales + 4 * r, 4);
		uint16_t d = sg_f32_to_f16(sc != 0.0f ? 1.0f / sc : 0.0f);
		for (int64_t b = 0; b < cols / 32; b++) {
			uint8_t *blk = q + (size_t)r * rb + (size_t)b * 34;
			memcpy(blk, &d, 2);
			memcpy(blk + 2, t->data + r * cols + b * 32, 32);
		}
	}
	sg_status st = keep_host(w, q);
	if (!st) *out = q;
	return st;
}

/* n float values of t from element off into out: F32/F16/BF16, or CTranslate2 int8 with scales. */
static sg_status float_values(const sg_whisper *w, const sg_tensor *t, int64_t off, int64_t n, float *out)
{
	if (t->type == SG_TYPE_I8) {
		sg_status st = SG_OK;
		int64_t rows = t->n_dims ? t->ne[t->n_dims - 1] : 1, per = rows ? sg_tensor_nelem(t) / rows : 0;
		const float *sc = i8_scales(w, t, rows, &st);
		if (!sc) return st ? st : sg_error(SG_ERR_UNSUPPORTED, "%s: int8 outside a CTranslate2 file", t->name);
		for (int64_t k = 0; k < n; k++) {
			float s;
			memcpy(&s, (const uint8_t *)sc + 4 * ((off + k) / per), 4);
			out[k] = (float)(int8_t)t->data[off + k] / s;
		}
		return SG_OK;
	}
	if (t->type != SG_TYPE_F32 && t->type != SG_TYPE_F16 && t->type != SG_TYPE_BF16)
		return sg_error(SG_ERR_UNSUPPORTED, "%s: expected F32, F16 or BF16, found %s", t->name, sg_type_name(t->type));
	sg_dequantize_ref(t->type, t->data + (size_t)off * (t->type == SG_TYPE_F32 ? 4 : 2), out, n);
	return SG_OK;
}

/* p itself when 64-byte aligned, else a copy of its n bytes in aligned host memory the model
 * keeps (npz payloads and CTranslate2 variables start at any byte; the kernels read whole
 * elements). */
static sg_status aligned(sg_whisper *w, const char *name, const void *p, size_t n, const void **out)
{
	if ((uintptr_t)p % 64 == 0) {
		*out = p;
		return SG_OK;
	}
	void *copy = NULL;
	if (posix_memalign(&copy, 64, n ? n : 1)) return sg_error(SG_ERR_NOMEM, "%s: %zu bytes", name, n);
	memcpy(copy, p, n);
	sg_status st = keep_host(w, copy);
	if (!st) *out = copy;
	return st;
}

/* An MLX affine matrix [rows][ne0]: the packed words with their scales and biases. */
static sg_status bind_mlx(sg_whisper *w, const sg_tensor *t, int64_t ne0, int64_t rows, sg_btensor *out)
{
	sg_backend *be = w->be;
	if (!sg_backend_supports(be, SG_STAGE_MATMUL, SG_TYPE_MLX_AFFINE))
		return sg_error(SG_ERR_UNSUPPORTED, "%s: MLX affine weights do not run on the %s backend", t->name, be->ops->name);
	sg_btensor b = {.type = SG_TYPE_MLX_AFFINE, .ne = {ne0, rows, 1, 1}, .mlx = t->mlx, .layout = -1};
	const void *d = NULL;
	sg_status st = aligned(w, t->name, t->data, t->nbytes, &d);
	if (!st) st = aligned(w, t->scales->name, t->scales->data, t->scales->nbytes, &b.scales);
	if (!st) st = aligned(w, t->biases->name, t->biases->data, t->biases->nbytes, &b.biases);
	b.data = (void *)d;
	if (!st) st = be->ops->tensor_bind(be, &b);
	if (st) return sg_error_wrap(st, "%s", t->name);
	*out = b;
	w->info.weight_bytes += (int64_t)(t->nbytes + t->scales->nbytes + t->biases->nbytes);
	return sg_whisper_own(w, out);
}

sg_status sg_whisper_stored_f32(const sg_tensor *t, float **out)
{
	*out = NULL;
	int64_t cols = t->ne[0], rows = t->n_dims > 1 ? sg_tensor_nelem(t) / cols : 1;
	if (t->type != SG_TYPE_MLX_AFFINE) return sg_error(SG_ERR_INTERNAL, "%s: not an MLX affine tensor", t->name);
	size_t pb = (size_t)sg_mlx_packed_words(t->mlx.bits, cols) * 4, sb = (size_t)(cols / t->mlx.group) * 2;
	float *f = sg_malloc(sizeof(float) * (size_t)(rows * cols));
	uint32_t *row = sg_malloc(pb ? pb : 4);
	uint16_t *sc = sg_malloc(sb ? sb : 2), *bi = sg_malloc(sb ? sb : 2);
	sg_status st = f && row && sc && bi ? SG_OK : sg_error(SG_ERR_NOMEM, "%s: %lld values", t->name, (long long)(rows * cols));
	for (int64_t r = 0; r < rows && !st; r++) {
		/* the stored bytes may be unaligned (npz): a row's words and groups are copied first */
		memcpy(row, t->data + (size_t)r * pb, pb);
		memcpy(sc, t->scales->data + (size_t)r * sb, sb);
		memcpy(bi, t->biases->data + (size_t)r * sb, sb);
		sg_mlx_dequantize_row_ref(&t->mlx, row, sc, bi, f + r * cols, cols);
	}
	sg_free(row);
	sg_free(sc);
	sg_free(bi);
	if (st) sg_free(f);
	else *out = f;
	return st;
}

/* Binds the bytes of t (type/shape as stored, viewed as rows of ne0) as a matrix [rows][ne0]. */
static sg_status bind_matrix(sg_whisper *w, const sg_tensor *t, int64_t ne0, int64_t rows, sg_btensor *out)
{
	sg_backend *be = w->be;
	if (t->type == SG_TYPE_MLX_AFFINE) return bind_mlx(w, t, ne0, rows, out);
	if (t->type == SG_TYPE_I8) {
		sg_status st = SG_OK;
		const float *sc = i8_scales(w, t, rows, &st);
		void *q = NULL;
		if (!sc) return st ? st : sg_error(SG_ERR_UNSUPPORTED, "%s: int8 outside a CTranslate2 file", t->name);
		if (ne0 % 32) return sg_error(SG_ERR_UNSUPPORTED, "%s: int8 rows of %lld (a multiple of 32 runs)", t->name, (long long)ne0);
		if (!sg_backend_supports(be, SG_STAGE_MATMUL, SG_TYPE_Q8_0))
			return sg_error(SG_ERR_UNSUPPORTED, "%s: int8 weights need Q8_0 matmuls, which the %s backend lacks", t->name, be->ops->name);
		st = i8_to_q8_0(w, t, sc, ne0, rows, &q);
		sg_btensor b = {.type = SG_TYPE_Q8_0, .ne = {ne0, rows, 1, 1}, .data = q, .layout = -1};
		if (!st) st = be->ops->tensor_bind(be, &b);
		if (st) return sg_error_wrap(st, "%s", t->name);
		*out = b;
		w->info.weight_bytes += (int64_t)t->nbytes;
		return sg_whisper_own(w, out);
	}
	if (!sg_backend_supports(be, SG_STAGE_MATMUL, t->type) || !sg_type_row_bytes(t->type, ne0))
		return sg_error(SG_ERR_UNSUPPORTED, "%s: weights of type %s do not run on the %s backend", t->name,
				sg_type_name(t->type), be->ops->name);
	const void *data = NULL;
	sg_status st = aligned(w, t->name, t->data, t->nbytes, &data);
	if (st) return st;
	sg_btensor b = {.type = t->type, .ne = {ne0, rows, 1, 1}, .data = (void *)data, .layout = -1};
	st = be->ops->tensor_bind(be, &b);
	if (st) return sg_error_wrap(st, "%s", t->name);
	*out = b;
	w->info.weight_bytes += (int64_t)t->nbytes;
	return sg_whisper_own(w, out);
}

/* Values [off, off + n) of the float tensor t as an F32 tensor [rows][n / rows]. */
static sg_status bind_floats(sg_whisper *w, const sg_tensor *t, int64_t off, int64_t n, int64_t rows, sg_btensor *out)
{
	float *tmp = sg_malloc(sizeof(float) * (size_t)n);
	if (!tmp) return sg_error(SG_ERR_NOMEM, "%s: %lld values", t->name, (long long)n);
	size_t es = t->type == SG_TYPE_F32 ? 4 : t->type == SG_TYPE_I8 ? 1 : 2;
	sg_status st = float_values(w, t, off, n, tmp);
	if (!st) st = sg_whisper_alloc(w, SG_TYPE_F32, n / rows, rows, 1, out);
	if (!st) st = w->be->ops->write(w->be, out, 0, tmp, sizeof(float) * (size_t)n);
	sg_free(tmp);
	if (!st) w->info.weight_bytes += (int64_t)((size_t)n * es);
	return st;
}

static sg_status vec(sg_whisper *w, const char *name, int64_t n, int optional, sg_btensor *out)
{
	sg_status st = SG_OK;
	const sg_tensor *t = need(w->src, name, 1, &n, optional, &st);
	if (!t) return st;
	return bind_floats(w, t, 0, n, 1, out);
}

static sg_status mat(sg_whisper *w, const char *name, int64_t cols, int64_t rows, sg_btensor *out)
{
	sg_status st = SG_OK;
	int64_t ne[2] = {cols, rows};
	const sg_tensor *t = need(w->src, name, 2, ne, 0, &st);
	return t ? bind_matrix(w, t, cols, rows, out) : st;
}

/* A fused [parts*D][D] matrix and its [parts*D] bias, viewed as parts blocks of D rows. */
static sg_status fused(sg_whisper *w, const char *wname, const char *bname, int parts, sg_btensor **ws, sg_btensor **bs)
{
	int64_t D = w->info.d_model;
	sg_btensor all;
	sg_status st = mat(w, wname, D, parts * D, &all);
	int64_t nb = parts * D;
	const sg_tensor *b = st ? NULL : need(w->src, bname, 1, &nb, 0, &st);
	for (int i = 0; i < parts && !st; i++) {
		*ws[i] = sg_btensor_rows_view(&all, i * D, D);
		st = bind_floats(w, b, i * D, D, 1, bs[i]);
	}
	return st;
}

/* --- Hugging Face and whisper.cpp: separate q, k, v; the same layout under other names --- */

typedef struct wh_names {
	const char *layer;                    /* "model.%s.layers.%d" or "%s.blocks.%d" */
	const char *ln1, *self, *lnx, *cross; /* block stems */
	const char *qkvo[4];                  /* projections inside an attention stem */
	const char *ln2, *fc1, *fc2;
} wh_names;

static const wh_names hf_names = {"model.%s.layers.%d", "self_attn_layer_norm", "self_attn", "encoder_attn_layer_norm",
				  "encoder_attn", {"q_proj", "k_proj", "v_proj", "out_proj"}, "final_layer_norm", "fc1", "fc2"};
static const wh_names ggml_names = {"%s.blocks.%d", "attn_ln", "attn", "cross_attn_ln", "cross_attn",
				    {"query", "key", "value", "out"}, "mlp_ln", "mlp.0", "mlp.2"};
static const wh_names mlx_names = {"%s.blocks.%d", "attn_ln", "attn", "cross_attn_ln", "cross_attn",
				   {"query", "key", "value", "out"}, "mlp_ln", "mlp1", "mlp2"};

static sg_status sep_attn(sg_whisper *w, const wh_names *nm, const char *pre, wh_attn *a)
{
	int64_t D = w->info.d_model;
	char n[200];
	sg_btensor *ws[] = {&a->wq, &a->wk, &a->wv, &a->wo}, *bs[] = {&a->bq, &a->bk, &a->bv, &a->bo};
	sg_status st = SG_OK;
	for (int i = 0; i < 4 && !st; i++) {
		snprintf(n, sizeof(n), "%s.%s.weight", pre, nm->qkvo[i]);
		st = mat(w, n, D, D, ws[i]);
		snprintf(n, sizeof(n), "%s.%s.bias", pre, nm->qkvo[i]);
		if (!st) st = vec(w, n, D, i == 1, bs[i]); /* k has no bias in Whisper */
	}
	/* the GEMM attention path copies Wv and Wo as F32; a bound MLX tensor may be repacked */
	snprintf(n, sizeof(n), "%s.%s.weight", pre, nm->qkvo[2]);
	const sg_tensor *v = st ? NULL : src_find(w->src, n);
	a->wv_mlx = v && v->type == SG_TYPE_MLX_AFFINE ? v : NULL;
	snprintf(n, sizeof(n), "%s.%s.weight", pre, nm->qkvo[3]);
	const sg_tensor *o = st ? NULL : src_find(w->src, n);
	a->wo_mlx = o && o->type == SG_TYPE_MLX_AFFINE ? o : NULL;
	return st;
}

static sg_status sep_layer(sg_whisper *w, const wh_names *nm, const char *side, int L, int dec, wh_layer *l)
{
	int64_t D = w->info.d_model, F = w->info.n_ffn;
	char pre[96], n[200];
	snprintf(pre, sizeof(pre), nm->layer, side, L);
#define NM(stem, suffix) (snprintf(n, sizeof(n), "%s.%s%s", pre, stem, suffix), n)
	sg_status st = vec(w, NM(nm->ln1, ".weight"), D, 0, &l->ln1_w);
	if (!st) st = vec(w, NM(nm->ln1, ".bias"), D, 0, &l->ln1_b);
	if (!st) st = sep_attn(w, nm, NM(nm->self, ""), &l->self);
	if (!st && dec) st = vec(w, NM(nm->lnx, ".weight"), D, 0, &l->lnx_w);
	if (!st && dec) st = vec(w, NM(nm->lnx, ".bias"), D, 0, &l->lnx_b);
	if (!st && dec) st = sep_attn(w, nm, NM(nm->cross, ""), &l->cross);
	if (!st) st = vec(w, NM(nm->ln2, ".weight"), D, 0, &l->ln2_w);
	if (!st) st = vec(w, NM(nm->ln2, ".bias"), D, 0, &l->ln2_b);
	if (!st) st = mat(w, NM(nm->fc1, ".weight"), D, F, &l->fc1);
	if (!st) st = vec(w, NM(nm->fc1, ".bias"), F, 0, &l->fc1_b);
	if (!st) st = mat(w, NM(nm->fc2, ".weight"), F, D, &l->fc2);
	if (!st) st = vec(w, NM(nm->fc2, ".bias"), D, 0, &l->fc2_b);
#undef NM
	return st;
}

static int cfg_int(const json_t *c, const char *key, int def, sg_status *st)
{
	int64_t v = def;
	sg_status s = sg_json_get_int(c, key, &v);
	if (s == SG_ERR_NOT_FOUND || json_is_null(json_object_get(c, key))) return def;
	if (s && !*st) *st = sg_error(SG_ERR_FORMAT, "config.json: %s is not an integer", key);
	if (!s && (v < 0 || v > (1 << 24)) && !*st) *st = sg_error(SG_ERR_FORMAT, "config.json: %s = %lld is out of range", key, (long long)v);
	return (int)v;
}

/* alignment_heads [[layer, head], ...] of a config object (absent: none). */
static sg_status read_align(sg_whisper *w, const json_t *c)
{
	const json_t *a = c ? json_object_get(c, "alignment_heads") : NULL;
	if (!a || !json_is_array(a) || !json_array_size(a)) return SG_OK;
	size_t n = json_array_size(a);
	w->align = sg_calloc(n, sizeof(*w->align));
	if (!w->align) return sg_error(SG_ERR_NOMEM, "whisper: %zu alignment heads", n);
	for (size_t i = 0; i < n; i++) {
		const json_t *p = json_array_get(a, i);
		if (!json_is_array(p) || json_array_size(p) != 2 || !json_is_integer(json_array_get(p, 0)) ||
		    !json_is_integer(json_array_get(p, 1)))
			return sg_error(SG_ERR_FORMAT, "alignment_heads[%zu] is not a [layer, head] pair", i);
		json_int_t L = json_integer_value(json_array_get(p, 0)), h = json_integer_value(json_array_get(p, 1));
		if (L < 0 || L >= w->info.n_text_layer || h < 0 || h >= w->info.n_text_head)
			return sg_error(SG_ERR_FORMAT, "alignment_heads[%zu] = [%lld, %lld] is outside %d layers x %d heads", i,
					(long long)L, (long long)h, w->info.n_text_layer, w->info.n_text_head);
		w->align[i][0] = (int)L;
		w->align[i][1] = (int)h;
	}
	w->info.n_align_heads = (int)n;
	w->info.align_heads = (const int(*)[2])w->align;
	return SG_OK;
}

static int file_exists(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* dir of path: path itself when it is a folder, else its parent. */
static void dir_of(const char *path, char *buf, size_t cap)
{
	struct stat sb;
	snprintf(buf, cap, "%s", path);
	if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return;
	char *slash = strrchr(buf, '/');
	if (slash) *slash = 0;
	else snprintf(buf, cap, ".");
}

/* tokenizer.json beside the weights, else the tiktoken ranks openai-whisper names for the
 * model's vocabulary (gpt2 for English-only models, multilingual otherwise). */
static sg_status find_tokenizer(sg_whisper *w, const char *path)
{
	char dir[4096], tok[4200];
	dir_of(path, dir, sizeof(dir));
	snprintf(tok, sizeof(tok), "%s/tokenizer.json", dir);
	if (!file_exists(tok)) snprintf(tok, sizeof(tok), "%s/%s.tiktoken", dir, w->info.n_vocab >= 51865 ? "multilingual" : "gpt2");
	if (!file_exists(tok)) return SG_OK;
	w->tokenizer = sg_strdup(tok);
	return w->tokenizer ? SG_OK : sg_error(SG_ERR_NOMEM, "whisper: a path");
}

static sg_status check_sizes(const sg_whisper_info *i)
{
	if (i->n_mels < 1 || i->n_audio_ctx < 1 || i->n_text_ctx < 1 || i->n_vocab < 1 || i->d_model < 1 || i->n_audio_layer < 1 ||
	    i->n_text_layer < 1 || i->n_audio_head < 1 || i->n_text_head < 1 || i->n_ffn < 1 || i->d_model % i->n_audio_head ||
	    i->d_model % i->n_text_head || i->d_model / i->n_audio_head > 256 || i->d_model / i->n_text_head > 256 ||
	    i->n_audio_ctx > 1 << 16 || i->n_text_ctx > 1 << 16 || i->n_mels > 1024)
		return sg_error(SG_ERR_FORMAT,
				"whisper: sizes out of range: %d mels, audio ctx %d, text ctx %d, vocab %d, d_model %d, "
				"%d+%d layers, %d/%d heads, ffn %d",
				i->n_mels, i->n_audio_ctx, i->n_text_ctx, i->n_vocab, i->d_model, i->n_audio_layer, i->n_text_layer,
				i->n_audio_head, i->n_text_head, i->n_ffn);
	return SG_OK;
}

/* --- MLX --- */

/* The alignment heads an MLX folder stores: an integer tensor [n][2] of (layer, head). */
static sg_status mlx_align(sg_whisper *w, const wh_src *s)
{
	const sg_tensor *t = src_find(s, "alignment_heads");
	if (!t) return SG_OK;
	int es = t->type == SG_TYPE_I64 ? 8 : t->type == SG_TYPE_I32 ? 4 : 0;
	if (!es || t->n_dims != 2 || t->ne[0] != 2 || t->ne[1] < 1 || t->ne[1] > 1 << 16)
		return sg_error(SG_ERR_FORMAT, "alignment_heads: expected I64 or I32 [n, 2], found %s [%lld dims]", sg_type_name(t->type),
				(long long)t->n_dims);
	int n = (int)t->ne[1];
	w->align = sg_calloc((size_t)n, sizeof(*w->align));
	if (!w->align) return sg_error(SG_ERR_NOMEM, "whisper: %d alignment heads", n);
	for (int i = 0; i < n; i++) {
		int64_t v[2] = {0, 0};
		for (int k = 0; k < 2; k++) {
			if (es == 8) memcpy(&v[k], t->data + (size_t)(2 * i + k) * 8, 8);
			else {
				int32_t x;
				memcpy(&x, t->data + (size_t)(2 * i + k) * 4, 4);
				v[k] = x;
			}
		}
		if (v[0] < 0 || v[0] >= w->info.n_text_layer || v[1] < 0 || v[1] >= w->info.n_text_head)
			return sg_error(SG_ERR_FORMAT, "alignment_heads[%d] = [%lld, %lld] is outside %d layers x %d heads", i, (long long)v[0],
					(long long)v[1], w->info.n_text_layer, w->info.n_text_head);
		w->align[i][0] = (int)v[0];
		w->align[i][1] = (int)v[1];
	}
	w->info.n_align_heads = n;
	w->info.align_heads = (const int(*)[2])w->align;
	return SG_OK;
}

/* An MLX folder: openai-whisper's ModelDimensions in config.json. */
static sg_status open_mlx(sg_whisper *w, wh_src *s)
{
	const json_t *c = s->st->config;
	sg_whisper_info *i = &w->info;
	sg_status st = SG_OK;
	s->kind = SRC_MLX;
	i->source = "mlx";
	i->n_mels = cfg_int(c, "n_mels", 80, &st);
	i->n_audio_ctx = cfg_int(c, "n_audio_ctx", 1500, &st);
	i->n_text_ctx = cfg_int(c, "n_text_ctx", 448, &st);
	i->n_vocab = cfg_int(c, "n_vocab", 0, &st);
	i->d_model = cfg_int(c, "n_audio_state", 0, &st);
	i->n_audio_layer = cfg_int(c, "n_audio_layer", 0, &st);
	i->n_text_layer = cfg_int(c, "n_text_layer", 0, &st);
	i->n_audio_head = cfg_int(c, "n_audio_head", 0, &st);
	i->n_text_head = cfg_int(c, "n_text_head", 0, &st);
	int text_state = cfg_int(c, "n_text_state", i->d_model, &st);
	i->n_ffn = 4 * i->d_model; /* openai-whisper's MLP width */
	if (!st && text_state != i->d_model)
		return sg_error(SG_ERR_UNSUPPORTED, "whisper: n_audio_state %d and n_text_state %d differ", i->d_model, text_state);
	if (!st) st = check_sizes(i);
	return st ? st : mlx_align(w, s);
}

/* --- Hugging Face --- */

static sg_status open_hf(sg_whisper *w, wh_src *s, const char *path)
{
	sg_status st = sg_weights_open(path, &s->st);
	if (st) return st;
	s->kind = SRC_HF;
	const json_t *c = s->st->config;
	if (c && json_object_get(c, "n_audio_state")) return open_mlx(w, s);
	if (s->st->format != SG_WEIGHTS_SAFETENSORS || !c)
		return sg_error(SG_ERR_UNSUPPORTED,
				"whisper: '%s' is none of a Hugging Face folder (config.json + safetensors), an MLX folder "
				"(config.json with n_audio_state + weights.safetensors or weights.npz) and a CTranslate2 folder",
				path);
	const char *mt = NULL;
	if (sg_json_get_str(c, "model_type", &mt) || strcmp(mt, "whisper"))
		return sg_error(SG_ERR_UNSUPPORTED, "whisper: config.json model_type is '%s', not 'whisper'", mt ? mt : "(none)");
	sg_whisper_info *i = &w->info;
	i->n_mels = cfg_int(c, "num_mel_bins", 80, &st);
	i->n_audio_ctx = cfg_int(c, "max_source_positions", 1500, &st);
	i->n_text_ctx = cfg_int(c, "max_target_positions", 448, &st);
	i->n_vocab = cfg_int(c, "vocab_size", 0, &st);
	i->d_model = cfg_int(c, "d_model", 0, &st);
	i->n_audio_layer = cfg_int(c, "encoder_layers", 0, &st);
	i->n_text_layer = cfg_int(c, "decoder_layers", 0, &st);
	i->n_audio_head = cfg_int(c, "encoder_attention_heads", 0, &st);
	i->n_text_head = cfg_int(c, "decoder_attention_heads", 0, &st);
	i->n_ffn = cfg_int(c, "encoder_ffn_dim", 0, &st);
	int dffn = cfg_int(c, "decoder_ffn_dim", i->n_ffn, &st);
	const char *act = NULL;
	if (!sg_json_get_str(c, "activation_function", &act) && strcmp(act, "gelu"))
		return sg_error(SG_ERR_UNSUPPORTED, "whisper: activation_function '%s' (Whisper runs gelu)", act);
	if (!st && dffn != i->n_ffn)
		return sg_error(SG_ERR_UNSUPPORTED, "whisper: encoder ffn %d and decoder ffn %d differ", i->n_ffn, dffn);
	if (!st) st = check_sizes(i);
	i->source = "hf";
	/* alignment heads: generation_config.json beside config.json */
	char dir[4096], gp[4200];
	dir_of(path, dir, sizeof(dir));
	snprintf(gp, sizeof(gp), "%s/generation_config.json", dir);
	if (!st && file_exists(gp)) {
		json_t *g = NULL;
		st = sg_json_load_file(gp, 16u << 20, &g);
		if (!st) st = read_align(w, g);
		json_decref(g);
	}
	return st;
}

/* --- CTranslate2 --- */

static int ct2_scalar(const wh_src *s, const char *name, int def)
{
	const sg_tensor *t = src_find(s, name);
	if (!t || t->n_dims != 0) return def;
	switch (t->type) {
	case SG_TYPE_I8: return (int8_t)t->data[0];
	case SG_TYPE_I16: return (int16_t)(t->data[0] | t->data[1] << 8);
	case SG_TYPE_I32: return (int32_t)((uint32_t)t->data[0] | (uint32_t)t->data[1] << 8 | (uint32_t)t->data[2] << 16 | (uint32_t)t->data[3] << 24);
	default: return def;
	}
}

static int64_t ct2_dim(const wh_src *s, const char *name, int d)
{
	const sg_tensor *t = src_find(s, name);
	return t && d < t->n_dims ? t->ne[d] : 0;
}

static int ct2_count_layers(const wh_src *s, const char *side)
{
	int n = 0;
	char name[128];
	for (;; n++) {
		snprintf(name, sizeof(name), "%s/layer_%d/ffn/linear_0/weight", side, n);
		if (!src_find(s, name) || n > 4096) return n;
	}
}

static sg_status open_ct2(sg_whisper *w, wh_src *s, const char *path)
{
	sg_status st = sg_ct2_open(path, &s->ct2);
	if (st) return st;
	s->ct2_open = 1;
	s->kind = SRC_CT2;
	if (strcmp(s->ct2.spec, "WhisperSpec"))
		return sg_error(SG_ERR_UNSUPPORTED, "whisper: '%s' holds a CTranslate2 %s, not a WhisperSpec", path, s->ct2.spec);
	sg_whisper_info *i = &w->info;
	i->n_mels = (int)ct2_dim(s, "encoder/conv1/weight", 1);
	i->d_model = (int)ct2_dim(s, "decoder/embeddings/weight", 0);
	i->n_vocab = (int)ct2_dim(s, "decoder/embeddings/weight", 1);
	i->n_audio_ctx = (int)ct2_dim(s, "encoder/position_encodings/encodings", 1);
	i->n_text_ctx = (int)ct2_dim(s, "decoder/position_encodings/encodings", 1);
	i->n_audio_layer = ct2_count_layers(s, "encoder");
	i->n_text_layer = ct2_count_layers(s, "decoder");
	i->n_audio_head = ct2_scalar(s, "encoder/num_heads", 0);
	i->n_text_head = ct2_scalar(s, "decoder/num_heads", 0);
	i->n_ffn = (int)ct2_dim(s, "encoder/layer_0/ffn/linear_0/weight", 1);
	i->source = "ct2";
	if (!ct2_scalar(s, "decoder/pre_norm", 1) || ct2_scalar(s, "decoder/scale_embeddings", 0))
		return sg_error(SG_ERR_UNSUPPORTED, "whisper: CTranslate2 decoder with post-norm or scaled embeddings");
	st = check_sizes(i);
	char dir[4096], cp[4200];
	dir_of(path, dir, sizeof(dir));
	snprintf(cp, sizeof(cp), "%s/config.json", dir);
	if (!st && file_exists(cp)) {
		st = sg_json_load_file(cp, 16u << 20, &s->config);
		if (!st) st = read_align(w, s->config);
	}
	return st;
}

static sg_status ct2_attn_out(sg_whisper *w, const char *pre, const char *lin, wh_attn *a)
{
	int64_t D = w->info.d_model;
	char n[160];
	snprintf(n, sizeof(n), "%s/%s/weight", pre, lin);
	sg_status st = mat(w, n, D, D, &a->wo);
	snprintf(n, sizeof(n), "%s/%s/bias", pre, lin);
	if (!st) st = vec(w, n, D, 0, &a->bo);
	return st;
}

static sg_status ct2_norm(sg_whisper *w, const char *pre, sg_btensor *g, sg_btensor *b)
{
	int64_t D = w->info.d_model;
	char n[160];
	snprintf(n, sizeof(n), "%s/gamma", pre);
	sg_status st = vec(w, n, D, 0, g);
	snprintf(n, sizeof(n), "%s/beta", pre);
	if (!st) st = vec(w, n, D, 0, b);
	return st;
}

static sg_status ct2_layer(sg_whisper *w, const char *side, int L, int dec, wh_layer *l)
{
	int64_t D = w->info.d_model, F = w->info.n_ffn;
	char pre[96], n[160], n2[160];
	snprintf(pre, sizeof(pre), "%s/layer_%d", side, L);
	snprintf(n, sizeof(n), "%s/self_attention/layer_norm", pre);
	sg_status st = ct2_norm(w, n, &l->ln1_w, &l->ln1_b);
	snprintf(n, sizeof(n), "%s/self_attention/linear_0/weight", pre);
	snprintf(n2, sizeof(n2), "%s/self_attention/linear_0/bias", pre);
	sg_btensor *qkv[] = {&l->self.wq, &l->self.wk, &l->self.wv}, *qkvb[] = {&l->self.bq, &l->self.bk, &l->self.bv};
	if (!st) st = fused(w, n, n2, 3, qkv, qkvb);
	snprintf(n, sizeof(n), "%s/self_attention", pre);
	if (!st) st = ct2_attn_out(w, n, "linear_1", &l->self);
	if (dec) {
		snprintf(n, sizeof(n), "%s/attention/layer_norm", pre);
		if (!st) st = ct2_norm(w, n, &l->lnx_w, &l->lnx_b);
		snprintf(n, sizeof(n), "%s/attention/linear_0/weight", pre);
		if (!st) st = mat(w, n, D, D, &l->cross.wq);
		snprintf(n, sizeof(n), "%s/attention/linear_0/bias", pre);
		if (!st) st = vec(w, n, D, 0, &l->cross.bq);
		snprintf(n, sizeof(n), "%s/attention/linear_1/weight", pre);
		snprintf(n2, sizeof(n2), "%s/attention/linear_1/bias", pre);
		sg_btensor *kv[] = {&l->cross.wk, &l->cross.wv}, *kvb[] = {&l->cross.bk, &l->cross.bv};
		if (!st) st = fused(w, n, n2, 2, kv, kvb);
		snprintf(n, sizeof(n), "%s/attention", pre);
		if (!st) st = ct2_attn_out(w, n, "linear_2", &l->cross);
	}
	snprintf(n, sizeof(n), "%s/ffn/layer_norm", pre);
	if (!st) st = ct2_norm(w, n, &l->ln2_w, &l->ln2_b);
	snprintf(n, sizeof(n), "%s/ffn/linear_0/weight", pre);
	if (!st) st = mat(w, n, D, F, &l->fc1);
	snprintf(n, sizeof(n), "%s/ffn/linear_0/bias", pre);
	if (!st) st = vec(w, n, F, 0, &l->fc1_b);
	snprintf(n, sizeof(n), "%s/ffn/linear_1/weight", pre);
	if (!st) st = mat(w, n, F, D, &l->fc2);
	snprintf(n, sizeof(n), "%s/ffn/linear_1/bias", pre);
	if (!st) st = vec(w, n, D, 0, &l->fc2_b);
	return st;
}

/* --- whisper.cpp ggml --- */

static sg_status open_ggml(sg_whisper *w, wh_src *s, const char *path)
{
	sg_status st = sg_ggml_whisper_open(path, &s->gg);
	if (st) return st;
	s->gg_open = 1;
	s->kind = SRC_GGML;
	const int32_t *h = s->gg.hp;
	sg_whisper_info *i = &w->info;
	i->n_vocab = h[0];
	i->n_audio_ctx = h[1];
	i->d_model = h[2];
	i->n_audio_head = h[3];
	i->n_audio_layer = h[4];
	i->n_text_ctx = h[5];
	i->n_text_head = h[7];
	i->n_text_layer = h[8];
	i->n_mels = h[9];
	i->n_ffn = (int)ct2_dim(s, "encoder.blocks.0.mlp.0.weight", 1);
	i->source = "ggml";
	if (h[6] != h[2])
		return sg_error(SG_ERR_FORMAT, "whisper: '%s': audio state %d and text state %d differ", path, h[2], h[6]);
	return check_sizes(i);
}

/* The embedded vocabulary: token strings by id (special tokens past the file's list are NULL). */
static sg_status take_vocab(sg_whisper *w)
{
	sg_ggml_whisper *g = &w->src->gg;
	w->vocab = g->vocab;
	w->vocab_len = g->vocab_len;
	w->n_vocab_str = g->n_vocab_words;
	g->vocab = NULL;
	g->vocab_len = NULL;
	g->n_vocab_words = 0;
	return SG_OK;
}

/* --- common --- */

/* conv2's [D][D][3] weight as the two matrices the forward multiplies: taps 0 and 1 side by
 * side ([o][tap * D + i], against a pair of input rows) and tap 2 alone. tap_major: the weight
 * is stored [D][3][D] (MLX's [out][k][in]). */
static sg_status bind_conv2(sg_whisper *w, const sg_tensor *t, int tap_major)
{
	int64_t D = w->info.d_model, n = 3 * D * D;
	float *all = sg_malloc(sizeof(float) * (size_t)n), *a = sg_malloc(sizeof(float) * (size_t)(2 * D * D)),
	      *b = sg_malloc(sizeof(float) * (size_t)(D * D));
	sg_status st = SG_OK;
	if (!all || !a || !b) st = sg_error(SG_ERR_NOMEM, "%s: %lld values", t->name, (long long)n);
	if (!st) st = float_values(w, t, 0, n, all);
	if (!st) {
		for (int64_t o = 0; o < D; o++)
			for (int64_t i = 0; i < D; i++) {
				/* element (o, i, tap) */
				int64_t at = tap_major ? o * 3 * D + i : (o * D + i) * 3, step = tap_major ? D : 1;
				a[o * 2 * D + i] = all[at];
				a[o * 2 * D + D + i] = all[at + step];
				b[o * D + i] = all[at + 2 * step];
			}
		st = sg_whisper_alloc(w, SG_TYPE_F32, 2 * D, D, 1, &w->conv2a);
	}
	if (!st) st = sg_whisper_alloc(w, SG_TYPE_F32, D, D, 1, &w->conv2b);
	if (!st) st = w->be->ops->write(w->be, &w->conv2a, 0, a, sizeof(float) * (size_t)(2 * D * D));
	if (!st) st = w->be->ops->write(w->be, &w->conv2b, 0, b, sizeof(float) * (size_t)(D * D));
	if (!st) w->info.weight_bytes += (int64_t)t->nbytes;
	sg_free(all);
	sg_free(a);
	sg_free(b);
	return st;
}

/* The top-level tensors' names per source. */
typedef struct wh_top {
	const char *conv1, *conv1_b, *conv2, *conv2_b, *enc_pos, *enc_ln, *tok, *dec_pos, *dec_ln;
	const char *norm_w, *norm_b; /* suffixes of a LayerNorm's weight and bias */
} wh_top;

static const wh_top tops[] = {
	[SRC_HF] = {"model.encoder.conv1.weight", "model.encoder.conv1.bias", "model.encoder.conv2.weight", "model.encoder.conv2.bias",
		    "model.encoder.embed_positions.weight", "model.encoder.layer_norm", "model.decoder.embed_tokens.weight",
		    "model.decoder.embed_positions.weight", "model.decoder.layer_norm", ".weight", ".bias"},
	[SRC_CT2] = {"encoder/conv1/weight", "encoder/conv1/bias", "encoder/conv2/weight", "encoder/conv2/bias",
		     "encoder/position_encodings/encodings", "encoder/layer_norm", "decoder/embeddings/weight",
		     "decoder/position_encodings/encodings", "decoder/layer_norm", "/gamma", "/beta"},
	[SRC_GGML] = {"encoder.conv1.weight", "encoder.conv1.bias", "encoder.conv2.weight", "encoder.conv2.bias",
		      "encoder.positional_embedding", "encoder.ln_post", "decoder.token_embedding.weight",
		      "decoder.positional_embedding", "decoder.ln", ".weight", ".bias"},
	/* no encoder positions: MLX makes them (see mlx_positions) */
	[SRC_MLX] = {"encoder.conv1.weight", "encoder.conv1.bias", "encoder.conv2.weight", "encoder.conv2.bias", NULL,
		     "encoder.ln_post", "decoder.token_embedding.weight", "decoder.positional_embedding", "decoder.ln", ".weight",
		     ".bias"},
};

/* MLX's conv1 weight [D][3][M] ([out][k][in]) reordered as the [D][M][3] rows the forward
 * multiplies, in its stored element type, then bound as a matrix [D][3M]. */
static sg_status mlx_conv1(sg_whisper *w, const sg_tensor *t)
{
	int64_t D = w->info.d_model, M = w->info.n_mels;
	size_t es = t->type == SG_TYPE_F32 ? 4 : 2;
	if (t->type != SG_TYPE_F32 && t->type != SG_TYPE_F16 && t->type != SG_TYPE_BF16)
		return sg_error(SG_ERR_UNSUPPORTED, "%s: expected F32, F16 or BF16, found %s", t->name, sg_type_name(t->type));
	uint8_t *p = NULL;
	if (posix_memalign((void **)&p, 64, t->nbytes ? t->nbytes : 1)) return sg_error(SG_ERR_NOMEM, "%s: %llu bytes", t->name, (unsigned long long)t->nbytes);
	for (int64_t o = 0; o < D; o++)
		for (int64_t k = 0; k < 3; k++)
			for (int64_t m = 0; m < M; m++) memcpy(p + (size_t)((o * M + m) * 3 + k) * es, t->data + (size_t)((o * 3 + k) * M + m) * es, es);
	sg_status st = keep_host(w, p);
	if (st) return st;
	sg_tensor r = *t;
	r.data = p;
	r.ne[0] = 3;
	r.ne[1] = M;
	return bind_matrix(w, &r, 3 * M, D, &w->conv1);
}

/* The encoder's sinusoidal positions, which MLX folders do not store: openai-whisper's
 * sinusoids(n_audio_ctx, D) (sin over the first D/2 channels, cos over the rest, timescales
 * 10000^(-c / (D/2 - 1))), worked in float32 as mlx_whisper does, then rounded to the folder's
 * float type (the decoder positions' type), as its converter builds the model at that type. */
static sg_status mlx_positions(sg_whisper *w)
{
	const sg_whisper_info *i = &w->info;
	int64_t D = i->d_model, N = i->n_audio_ctx, half = D / 2;
	const sg_tensor *dp = src_find(w->src, tops[SRC_MLX].dec_pos);
	if (D % 2 || half < 2) return sg_error(SG_ERR_UNSUPPORTED, "whisper: sinusoidal positions of %lld channels", (long long)D);
	float *x = sg_malloc(sizeof(float) * (size_t)(N * D));
	if (!x) return sg_error(SG_ERR_NOMEM, "whisper: %lld positions", (long long)(N * D));
	float inc = (float)(log(10000.0) / (double)(half - 1));
	for (int64_t c = 0; c < half; c++) {
		float inv = expf(-inc * (float)c);
		for (int64_t t = 0; t < N; t++) {
			float a = (float)t * inv;
			x[t * D + c] = sinf(a);
			x[t * D + half + c] = cosf(a);
		}
	}
	if (dp && dp->type != SG_TYPE_F32)
		for (int64_t k = 0; k < N * D; k++)
			x[k] = dp->type == SG_TYPE_BF16 ? sg_bf16_to_f32(sg_f32_to_bf16(x[k])) : sg_f16_to_f32(sg_f32_to_f16(x[k]));
	sg_status st = sg_whisper_alloc(w, SG_TYPE_F32, D, N, 1, &w->enc_pos);
	if (!st) st = w->be->ops->write(w->be, &w->enc_pos, 0, x, sizeof(float) * (size_t)(N * D));
	sg_free(x);
	return st;
}

/* A conv bias: [D], or [D][1] as whisper.cpp stores it. */
static sg_status conv_bias(sg_whisper *w, const char *name, sg_btensor *out)
{
	int64_t D = w->info.d_model, ne2[2] = {1, D};
	sg_status st = SG_OK;
	const sg_tensor *t = src_find(w->src, name);
	if (t && t->n_dims == 2) t = need(w->src, name, 2, ne2, 0, &st);
	else return vec(w, name, D, 0, out);
	return t ? bind_floats(w, t, 0, D, 1, out) : st;
}

static sg_status norm_pair(sg_whisper *w, const wh_top *n, const char *stem, sg_btensor *g, sg_btensor *b)
{
	char a[160];
	snprintf(a, sizeof(a), "%s%s", stem, n->norm_w);
	sg_status st = vec(w, a, w->info.d_model, 0, g);
	snprintf(a, sizeof(a), "%s%s", stem, n->norm_b);
	return st ? st : vec(w, a, w->info.d_model, 0, b);
}

static sg_status bind_layer(sg_whisper *w, const char *side, int L, int dec, wh_layer *l)
{
	switch (w->src->kind) {
	case SRC_HF: return sep_layer(w, &hf_names, side, L, dec, l);
	case SRC_GGML: return sep_layer(w, &ggml_names, side, L, dec, l);
	case SRC_MLX: return sep_layer(w, &mlx_names, side, L, dec, l);
	default: return ct2_layer(w, side, L, dec, l);
	}
}

static sg_status bind_all(sg_whisper *w)
{
	wh_src *s = w->src;
	const wh_top *n = &tops[s->kind];
	sg_whisper_info *i = &w->info;
	int64_t D = i->d_model, M = i->n_mels, V = i->n_vocab;
	sg_status st = SG_OK;
	int mlx = s->kind == SRC_MLX;
	/* MLX stores conv weights [out][k][in] */
	int64_t c1[3] = {3, M, D}, c2[3] = {3, D, D}, ep[2] = {D, i->n_audio_ctx}, dp[2] = {D, i->n_text_ctx};
	if (mlx) c1[0] = M, c1[1] = 3, c2[0] = D, c2[1] = 3;
	const sg_tensor *t = need(s, n->conv1, 3, c1, 0, &st);
	if (t) st = mlx ? mlx_conv1(w, t) : bind_matrix(w, t, 3 * M, D, &w->conv1);
	if (!st) st = conv_bias(w, n->conv1_b, &w->conv1_b);
	if (!st) t = need(s, n->conv2, 3, c2, 0, &st);
	if (!st) st = bind_conv2(w, t, mlx);
	if (!st) st = conv_bias(w, n->conv2_b, &w->conv2_b);
	if (!st && mlx) st = mlx_positions(w);
	if (!st && !mlx) t = need(s, n->enc_pos, 2, ep, 0, &st);
	if (!st && !mlx) st = bind_floats(w, t, 0, D * i->n_audio_ctx, i->n_audio_ctx, &w->enc_pos);
	for (int L = 0; L < i->n_audio_layer && !st; L++) {
		st = bind_layer(w, "encoder", L, 0, &w->enc[L]);
		if (st) sg_error_wrap(st, "encoder layer %d", L);
	}
	if (!st) st = norm_pair(w, n, n->enc_ln, &w->enc_ln_w, &w->enc_ln_b);
	/* decoder */
	if (!st) st = mat(w, n->tok, D, V, &w->tok);
	w->proj = w->tok;
	/* transformers saves a tied proj_out once; a checkpoint that stores its own is used */
	if (!st && s->kind == SRC_HF && src_find(s, "proj_out.weight")) st = mat(w, "proj_out.weight", D, V, &w->proj);
	if (!st) t = need(s, n->dec_pos, 2, dp, 0, &st);
	if (!st) st = bind_matrix(w, t, D, i->n_text_ctx, &w->dec_pos);
	for (int L = 0; L < i->n_text_layer && !st; L++) {
		st = bind_layer(w, "decoder", L, 1, &w->dec[L]);
		if (st) sg_error_wrap(st, "decoder layer %d", L);
	}
	if (!st) st = norm_pair(w, n, n->dec_ln, &w->dec_ln_w, &w->dec_ln_b);
	if (!st) {
		const sg_tensor *tt = src_find(s, n->tok);
		if (tt) sg_tensor_type_str(tt, w->dtype, sizeof(w->dtype));
	}
	i->dtype = w->dtype;
	return st;
}

static void count_params(sg_whisper *w)
{
	wh_src *s = w->src;
	int64_t n = 0;
	if (s->kind == SRC_HF || s->kind == SRC_MLX)
		for (int i = 0; i < s->st->n_tensors; i++) {
			const sg_tensor *t = s->st->tensors[i];
			n += t->companion || !strcmp(t->name, "alignment_heads") ? 0 : sg_tensor_nelem(t);
		}
	else if (s->kind == SRC_GGML)
		for (int i = 0; i < s->gg.n_tensors; i++) n += sg_tensor_nelem(&s->gg.tensors[i]);
	else
		for (int i = 0; i < s->ct2.n_vars; i++)
			if (!s->ct2.vars[i].is_scale && s->ct2.vars[i].t.n_dims) n += sg_tensor_nelem(&s->ct2.vars[i].t);
	w->info.n_params = n;
}

/* No list in the model's files: every head of the last half of the decoder layers, the rule
 * openai-whisper and CTranslate2's converter fall back on. */
static sg_status default_align(sg_whisper *w)
{
	sg_whisper_info *i = &w->info;
	if (i->n_align_heads || i->n_text_layer < 1 || i->n_text_head < 1) return SG_OK;
	int first = i->n_text_layer / 2, n = (i->n_text_layer - first) * i->n_text_head;
	w->align = sg_calloc((size_t)n, sizeof(*w->align));
	if (!w->align) return sg_error(SG_ERR_NOMEM, "whisper: %d alignment heads", n);
	for (int L = first, k = 0; L < i->n_text_layer; L++)
		for (int h = 0; h < i->n_text_head; h++, k++) {
			w->align[k][0] = L;
			w->align[k][1] = h;
		}
	i->n_align_heads = n;
	i->align_heads = (const int(*)[2])w->align;
	return SG_OK;
}

static sg_status open_source(sg_whisper *w, wh_src *s, const char *path)
{
	sg_status st;
	if (sg_ct2_detect(path)) st = open_ct2(w, s, path);
	else if (sg_ggml_whisper_detect(path)) st = open_ggml(w, s, path);
	else st = open_hf(w, s, path);
	return st ? st : default_align(w);
}

sg_status sg_whisper_load_weights(sg_whisper *w, const char *path)
{
	wh_src *s = sg_calloc(1, sizeof(*s));
	if (!s) return sg_error(SG_ERR_NOMEM, "whisper: loading '%s'", path);
	w->src = s;
	sg_status st = open_source(w, s, path);
	sg_whisper_info *i = &w->info;
	i->multilingual = i->n_vocab >= 51865;
	if (!st) st = s->kind == SRC_GGML ? take_vocab(w) : find_tokenizer(w, path);
	if (!st) {
		w->enc = sg_calloc((size_t)i->n_audio_layer, sizeof(wh_layer));
		w->dec = sg_calloc((size_t)i->n_text_layer, sizeof(wh_layer));
		if (!w->enc || !w->dec) st = sg_error(SG_ERR_NOMEM, "whisper: %d + %d layers", i->n_audio_layer, i->n_text_layer);
	}
	if (!st) st = bind_all(w);
	if (!st) count_params(w);
	return st;
}

void sg_whisper_close_weights(sg_whisper *w)
{
	wh_src *s = w->src;
	if (!s) return;
	if (s->st) sg_weights_close(s->st);
	if (s->ct2_open) sg_ct2_close(&s->ct2);
	if (s->gg_open) sg_ggml_whisper_close(&s->gg);
	if (s->config) json_decref(s->config);
	sg_free(s);
	w->src = NULL;
}

sg_status sg_whisper_describe(const char *path, sg_whisper_info *out, char *dtype, size_t cap)
{
	memset(out, 0, sizeof(*out));
	sg_whisper *w = sg_calloc(1, sizeof(*w));
	wh_src *s = sg_calloc(1, sizeof(*s));
	if (!w || !s) {
		sg_free(w);
		sg_free(s);
		return sg_error(SG_ERR_NOMEM, "whisper: describing '%s'", path);
	}
	w->src = s;
	sg_status st = open_source(w, s, path);
	if (!st) {
		const sg_tensor *t = src_find(s, tops[s->kind].tok);
		if (t) sg_tensor_type_str(t, dtype, cap);
		else snprintf(dtype, cap, "unknown");
		count_params(w);
		int64_t bytes = 0;
		if (s->kind == SRC_HF || s->kind == SRC_MLX)
			for (int i = 0; i < s->st->n_tensors; i++) bytes += (int64_t)s->st->tensors[i]->nbytes;
		else if (s->kind == SRC_GGML)
			for (int i = 0; i < s->gg.n_tensors; i++) bytes += (int64_t)s->gg.tensors[i].nbytes;
		else bytes = (int64_t)s->ct2.data_bytes;
		*out = w->info;
		out->multilingual = out->n_vocab >= 51865;
		out->weight_bytes = bytes;
		out->align_heads = NULL;
		out->dtype = dtype;
	}
	sg_whisper_close_weights(w);
	sg_free(w->align);
	sg_free(w);
	return st;
}
