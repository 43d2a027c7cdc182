/* Bound Conv1d weights run on host activations (see qwen3_tts_conv.h). */
#include "models/qwen3_tts_conv.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "formats/qtypes.h"

sg_status sg_qtts_host_f32(const sg_weights *w, const char *name, int64_t n, float **out)
{
	*out = NULL;
	const sg_tensor *t = sg_weights_find(w, name);
	if (!t) return sg_error(SG_ERR_NOT_FOUND, "qwen3-tts: tensor %s: missing", name);
	if (sg_tensor_nelem(t) != n ||
	    !(t->type == SG_TYPE_F32 || t->type == SG_TYPE_F16 || t->type == SG_TYPE_BF16)) {
		char sh[96];
		return sg_error(SG_ERR_FORMAT,
		                "qwen3-tts: tensor %s: expected %lld float values, found %s %s", name,
		                (long long)n, sg_type_name(t->type), sg_tensor_shape_str(t, sh, sizeof(sh)));
	}
	float *v = sg_malloc(sizeof(float) * (size_t)n);
	if (!v) return sg_error(SG_ERR_NOMEM, "qwen3-tts: %s", name);
	sg_dequantize_ref(t->type, t->data, v, n);
	*out = v;
	return SG_OK;
}

sg_status sg_qtts_conv_load(sg_backend *be, const sg_weights *w, const char *pfx, int cin, int cout, int K,
                            int dil, int stride, int need_bias, sg_qtts_conv *c)
{
	memset(c, 0, sizeof(*c));
	c->be = be, c->cin = cin, c->cout = cout, c->K = K, c->dil = dil, c->stride = stride;
	char name[256];
	snprintf(name, sizeof(name), "%s.weight", pfx);
	const sg_tensor *t = sg_weights_find(w, name);
	/* a Linear [cout][cin] serves as a conv of one tap */
	int lin = t && K == 1 && t->n_dims == 2 && t->ne[0] == cin && t->ne[1] == cout;
	if (t && !lin && (t->n_dims != 3 || t->ne[0] != K || t->ne[1] != cin || t->ne[2] != cout)) {
		char sh[96];
		return sg_error(SG_ERR_FORMAT, "qwen3-tts: tensor %s: expected [%d, %d, %d], found %s %s",
		                name, cout, cin, K, sg_type_name(t->type),
		                sg_tensor_shape_str(t, sh, sizeof(sh)));
	}
	float *v;
	sg_status st = sg_qtts_host_f32(w, name, (int64_t)cout * cin * K, &v);
	if (st) return st;
	float *p = sg_malloc(sizeof(float) * (size_t)cout * cin * K);
	if (!p) {
		sg_free(v);
		return sg_error(SG_ERR_NOMEM, "qwen3-tts: %s", name);
	}
	/* [cout][cin][K] -> the conv1d op's [cout][K][cin] */
	for (int o = 0; o < cout; o++)
		for (int i = 0; i < cin; i++)
			for (int k = 0; k < K; k++)
				p[((size_t)o * K + k) * cin + i] = v[((size_t)o * cin + i) * K + k];
	sg_free(v);
	c->w = (sg_btensor){.type = SG_TYPE_F32,
	                    .ne = {cin, K, cout, 1},
	                    .row_bytes = (size_t)cin * sizeof(float),
	                    .data = p,
	                    .layout = SG_LAYOUT_CONV1D};
	st = be->ops->tensor_bind(be, &c->w);
	if (st) {
		c->w = (sg_btensor){0};
		sg_free(p);
		return sg_error_wrap(st, "qwen3-tts: %s", name);
	}
	if (c->w.data == p)
		c->host = p; /* read in place */
	else
		sg_free(p);
	snprintf(name, sizeof(name), "%s.bias", pfx);
	if (!need_bias && !sg_weights_find(w, name)) return SG_OK;
	float *b;
	st = sg_qtts_host_f32(w, name, cout, &b);
	if (st) return st;
	int64_t ne[4] = {cout, 1, 1, 1};
	st = be->ops->tensor_alloc(be, SG_TYPE_F32, ne, &c->b);
	if (!st) st = be->ops->write(be, &c->b, 0, b, sizeof(float) * (size_t)cout);
	sg_free(b);
	return st;
}

void sg_qtts_conv_free(sg_qtts_conv *c)
{
	if (!c->be) return;
	if (c->w.data) c->be->ops->tensor_free(c->be, &c->w); /* frees only what the backend owns */
	if (c->b.data) c->be->ops->tensor_free(c->be, &c->b);
	sg_free(c->host);
	memset(c, 0, sizeof(*c));
}

int sg_qtts_conv_out_rows(const sg_qtts_conv *c, int Tp)
{
	int span = c->dil * (c->K - 1) + 1;
	return Tp < span ? 0 : (Tp - span) / c->stride + 1;
}

sg_status sg_qtts_conv_run(sg_qtts_conv *c, const float *x, int Tp, float *y, int *Tout)
{
	sg_backend *be = c->be;
	int To = sg_qtts_conv_out_rows(c, Tp);
	*Tout = To;
	if (To < 1)
		return sg_error(SG_ERR_INVALID_ARG,
		                "qwen3-tts: %d input rows for a kernel of %d taps (dilation %d)", Tp, c->K,
		                c->dil);
	int64_t nx[4] = {c->cin, Tp, 1, 1}, ny[4] = {c->cout, To, 1, 1};
	sg_btensor tx = {0}, ty = {0};
	sg_status st = be->ops->tensor_alloc(be, SG_TYPE_F32, nx, &tx);
	if (!st) st = be->ops->tensor_alloc(be, SG_TYPE_F32, ny, &ty);
	if (!st) st = be->ops->write(be, &tx, 0, x, sizeof(float) * (size_t)c->cin * (size_t)Tp);
	sg_conv_params p = {.stride = c->stride, .dilation = c->dil, .groups = 1, .pad = 0};
	if (!st) st = be->ops->conv1d(be, &tx, &c->w, c->b.data ? &c->b : NULL, &p, &ty);
	if (!st) st = be->ops->read(be, &ty, 0, y, sizeof(float) * (size_t)c->cout * (size_t)To);
	if (tx.data) be->ops->tensor_free(be, &tx);
	if (ty.data) be->ops->tensor_free(be, &ty);
	return st;
}
