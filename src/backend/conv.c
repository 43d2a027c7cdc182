/*
 * The arguments of the audio codec's convolution ops (conv1d, conv_transpose1d), checked the same
 * way for every backend that has them: F32 tensors, no aliasing, a bias per output, and the
 * geometry the op's comment in backend.h states.
 */
#include <stdint.h>

#include "backend/backend.h"
#include "base/error.h"
#include "formats/qtypes.h"

static sg_status need_f32(const sg_backend *be, const char *op, const char *what, const sg_btensor *t)
{
	if (!t || !t->data) return sg_error(SG_ERR_INVALID_ARG, "%s %s: %s is missing", be->ops->name, op, what);
	if (t->type != SG_TYPE_F32)
		return sg_error(SG_ERR_INVALID_ARG, "%s %s: %s must be F32, found %s", be->ops->name, op, what, sg_type_name((int)t->type));
	return SG_OK;
}

static sg_status common(const sg_backend *be, const char *op, const sg_btensor *x, const sg_btensor *w, const sg_btensor *bias,
			const sg_btensor *y)
{
	sg_status st = need_f32(be, op, "x", x);
	if (!st) st = need_f32(be, op, "w", w);
	if (!st) st = need_f32(be, op, "y", y);
	if (!st && bias) st = need_f32(be, op, "bias", bias);
	if (st) return st;
	if (x->data == y->data) return sg_error(SG_ERR_INVALID_ARG, "%s %s: y aliases x", be->ops->name, op);
	if (bias && bias->ne[0] != y->ne[0])
		return sg_error(SG_ERR_INVALID_ARG, "%s %s: bias of %lld for %lld outputs", be->ops->name, op, (long long)bias->ne[0],
				(long long)y->ne[0]);
	return SG_OK;
}

sg_status sg_conv1d_check(const sg_backend *be, const sg_btensor *x, const sg_btensor *w, const sg_btensor *bias,
			  const sg_conv_params *p, const sg_btensor *y)
{
	sg_status st = common(be, "conv1d", x, w, bias, y);
	if (st) return st;
	int groups = p->groups > 0 ? p->groups : 1;
	int64_t T = sg_btensor_rows(x), Cin = x->ne[0], Cout = y->ne[0];
	if (w->ne[2] != Cout || w->ne[3] != 1 || w->ne[1] < 1 || T < 1 || p->stride < 1 || p->dilation < 1 || p->pad < 0 ||
	    Cin % groups || Cout % groups || w->ne[0] != Cin / groups)
		return sg_error(SG_ERR_INVALID_ARG,
				"%s conv1d: w [%lld][%lld][%lld] (stride %d, dilation %d, pad %d, %d groups) for x [%lld][%lld] -> y [%lld][%lld]",
				be->ops->name, (long long)w->ne[2], (long long)w->ne[1], (long long)w->ne[0], p->stride, p->dilation, p->pad,
				groups, (long long)T, (long long)Cin, (long long)sg_btensor_rows(y), (long long)Cout);
	return SG_OK;
}

sg_status sg_conv_transpose1d_check(const sg_backend *be, const sg_btensor *x, const sg_btensor *w, const sg_btensor *bias,
				    int stride, const sg_btensor *y)
{
	sg_status st = common(be, "conv_transpose1d", x, w, bias, y);
	if (st) return st;
	int64_t T = sg_btensor_rows(x), Cin = x->ne[0], M = w->ne[1], Cout = y->ne[0], Tout = sg_btensor_rows(y);
	if (stride < 1 || w->ne[0] != Cin || w->ne[2] != Cout || w->ne[3] != stride || M < 1 || T < 1 || Tout > (T - 1 + M) * stride)
		return sg_error(SG_ERR_INVALID_ARG, "%s conv_transpose1d: w [%lld][%lld][%lld][%lld] with stride %d for x [%lld][%lld] -> y [%lld][%lld]",
				be->ops->name, (long long)w->ne[3], (long long)w->ne[2], (long long)w->ne[1], (long long)w->ne[0], stride,
				(long long)T, (long long)Cin, (long long)Tout, (long long)Cout);
	return SG_OK;
}
