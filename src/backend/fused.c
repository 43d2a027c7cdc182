/* Fused stages composed from the op table, for backends that lack (or decline) the fused op. */
#include "backend/backend.h"
#include "base/error.h"

sg_status sg_backend_matmul_multi_compose(sg_backend *be, const sg_matmul_multi *p)
{
	const sg_backend_ops *o = be->ops;
	if (p->nw < 1 || p->nw > SG_MATMUL_MULTI_MAX) return sg_error(SG_ERR_INVALID_ARG, "matmul_multi: %d weights (1 to %d)", p->nw, SG_MATMUL_MULTI_MAX);
	if ((p->glu && p->nw != 2) || (p->residual && (p->nw != 1 || !p->out)) || (p->norm && !p->xn))
		return sg_error(SG_ERR_INVALID_ARG, "matmul_multi: inconsistent stage (glu needs 2 weights, residual 1 weight and out, norm xn)");
	const sg_btensor *x = p->x;
	sg_status st;
	if (p->norm) {
		if ((st = o->rmsnorm(be, x, p->norm, p->eps, p->norm_offset, p->xn))) return st;
		x = p->xn;
	}
	for (int i = 0; i < p->nw; i++)
		if ((st = o->matmul(be, p->w[i], x, p->bias[i], p->y[i]))) return st;
	if (p->glu) return o->glu(be, p->y[0], p->y[1], p->act, p->y[0]);
	if (p->residual) return o->add(be, p->residual, p->y[0], p->out);
	return SG_OK;
}

sg_status sg_backend_matmul_multi(sg_backend *be, const sg_matmul_multi *p)
{
	return be->ops->matmul_multi ? be->ops->matmul_multi(be, p) : sg_backend_matmul_multi_compose(be, p);
}

sg_status sg_backend_moe_glu_compose(sg_backend *be, const sg_btensor *w_gate, const sg_btensor *w_up, const sg_btensor *x,
				     const sg_btensor *ids, sg_act act, sg_btensor *g, sg_btensor *u)
{
	const sg_backend_ops *o = be->ops;
	sg_status st;
	if ((st = o->moe_matmul(be, w_gate, x, ids, g)) || (st = o->moe_matmul(be, w_up, x, ids, u))) return st;
	return o->glu(be, g, u, act, g);
}

sg_status sg_backend_moe_glu(sg_backend *be, const sg_btensor *w_gate, const sg_btensor *w_up, const sg_btensor *x,
			     const sg_btensor *ids, sg_act act, sg_btensor *g, sg_btensor *u)
{
	return be->ops->moe_glu ? be->ops->moe_glu(be, w_gate, w_up, x, ids, act, g, u)
				: sg_backend_moe_glu_compose(be, w_gate, w_up, x, ids, act, g, u);
}

sg_status sg_backend_moe_combine_add_compose(sg_backend *be, const sg_btensor *y, const sg_btensor *weights, const sg_btensor *residual,
					     sg_btensor *out, sg_btensor *tmp)
{
	sg_status st = be->ops->moe_combine(be, y, weights, tmp);
	return st ? st : be->ops->add(be, residual, tmp, out);
}

sg_status sg_backend_moe_combine_add(sg_backend *be, const sg_btensor *y, const sg_btensor *weights, const sg_btensor *residual,
				     sg_btensor *out, sg_btensor *tmp)
{
	return be->ops->moe_combine_add ? be->ops->moe_combine_add(be, y, weights, residual, out, tmp)
					: sg_backend_moe_combine_add_compose(be, y, weights, residual, out, tmp);
}
