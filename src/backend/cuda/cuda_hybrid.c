/*
 * The CUDA backend's linear-attention (gated delta net) and Gemma 4 stage ops: argument checks on
 * the host, kernels in cuda_linear.cu. The op table is in cuda_backend.c.
 */
#include "backend/cuda/cuda_internal.h"

sg_status sg_cuda_short_conv(sg_backend *be, const sg_btensor *x, const sg_btensor *w, sg_btensor *state, sg_btensor *out)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	sg_status st;
	if ((st = check_f32("short_conv", "x", x)) || (st = check_f32("short_conv", "w", w)) || (st = check_f32("short_conv", "state", state)) ||
	    (st = check_f32("short_conv", "out", out)) || (st = check_same("short_conv", x, out)))
		return st;
	int64_t C = x->ne[0], n = sg_btensor_rows(x);
	if (nvals(w) % C || nvals(w) / C < 1 || nvals(w) / C > SG_CU_CONV_MAXK)
		return sg_error(SG_ERR_INVALID_ARG, "cuda short_conv: w has %lld values for %lld channels (want C * K, K <= %d)", (long long)nvals(w),
				(long long)C, SG_CU_CONV_MAXK);
	int64_t K = nvals(w) / C;
	if (K > 1 && (state->ne[0] != C || sg_btensor_rows(state) != K - 1))
		return sg_error(SG_ERR_INVALID_ARG, "cuda short_conv: state is [%lld][%lld], expected [%lld][%lld]", (long long)sg_btensor_rows(state),
				(long long)state->ne[0], (long long)(K - 1), (long long)C);
	if (x->data == out->data) return sg_error(SG_ERR_INVALID_ARG, "cuda short_conv: out aliases x");
	CU_RET("short_conv", sg_cu_short_conv(x->data, w->data, state->data, out->data, n, C, (int)K, S(cb)));
	return SG_OK;
}

sg_status sg_cuda_gated_delta(sg_backend *be, const sg_btensor *qkv, const sg_btensor *a, const sg_btensor *b, const sg_btensor *a_log,
				  const sg_btensor *dt_bias, const sg_gdn_params *p, sg_btensor *state, sg_btensor *out)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	sg_status st;
	const char *op = "gated_delta";
	if ((st = check_f32(op, "qkv", qkv)) || (st = check_f32(op, "a", a)) || (st = check_f32(op, "b", b)) || (st = check_f32(op, "a_log", a_log)) ||
	    (st = check_f32(op, "dt_bias", dt_bias)) || (st = check_f32(op, "state", state)) || (st = check_f32(op, "out", out)))
		return st;
	int Hk = p->n_k_head, Hv = p->n_v_head, dk = p->dk, dv = p->dv;
	if (Hk < 1 || Hv < 1 || Hv % Hk || dk < 1 || dv < 1 || dk > SG_CU_GDN_MAX_DK || dv > 1024 || Hv > 65535)
		return sg_error(SG_ERR_INVALID_ARG, "cuda gated_delta: heads %d/%d of dims %d/%d (value heads a multiple of key heads, dims <= %d)", Hk, Hv,
				dk, dv, SG_CU_GDN_MAX_DK);
	int64_t n = sg_btensor_rows(qkv), C = 2 * (int64_t)Hk * dk + (int64_t)Hv * dv;
	if (qkv->ne[0] != C || a->ne[0] != Hv || b->ne[0] != Hv || sg_btensor_rows(a) != n || sg_btensor_rows(b) != n || nvals(a_log) != Hv ||
	    nvals(dt_bias) != Hv || nvals(state) != (int64_t)Hv * dk * dv || nvals(out) != n * Hv * dv)
		return sg_error(SG_ERR_INVALID_ARG,
				"cuda gated_delta: shapes: qkv [%lld][%lld] (want width %lld), a/b width %lld/%lld, state %lld, out %lld values for %d value "
				"heads of %dx%d",
				(long long)n, (long long)qkv->ne[0], (long long)C, (long long)a->ne[0], (long long)b->ne[0], (long long)nvals(state),
				(long long)nvals(out), Hv, dk, dv);
	sg_cu_gdn g = {qkv->data, a->data, b->data, a_log->data, dt_bias->data, state->data, out->data, n, C, Hk, Hv, dk, dv, p->l2_eps};
	CU_RET(op, sg_cu_gated_delta(&g, S(cb)));
	return SG_OK;
}

sg_status sg_cuda_gated_rmsnorm(sg_backend *be, const sg_btensor *x, const sg_btensor *w, const sg_btensor *gate, float eps, sg_btensor *y)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	sg_status st;
	if ((st = check_f32("gated_rmsnorm", "x", x)) || (st = check_f32("gated_rmsnorm", "w", w)) || (st = check_f32("gated_rmsnorm", "gate", gate)) ||
	    (st = check_f32("gated_rmsnorm", "y", y)) || (st = check_same("gated_rmsnorm", x, y)) || (st = check_same("gated_rmsnorm", x, gate)))
		return st;
	if (nvals(w) != x->ne[0])
		return sg_error(SG_ERR_INVALID_ARG, "cuda gated_rmsnorm: w has %lld values, rows %lld", (long long)nvals(w), (long long)x->ne[0]);
	CU_RET("gated_rmsnorm", sg_cu_gated_rmsnorm(x->data, w->data, gate->data, eps, y->data, sg_btensor_rows(x), x->ne[0], S(cb)));
	return SG_OK;
}

sg_status sg_cuda_sigmoid_mul(sg_backend *be, const sg_btensor *x, const sg_btensor *gate, sg_btensor *out)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	sg_status st;
	if ((st = check_f32("sigmoid_mul", "x", x)) || (st = check_f32("sigmoid_mul", "gate", gate)) || (st = check_f32("sigmoid_mul", "out", out)) ||
	    (st = check_same("sigmoid_mul", x, out)))
		return st;
	if ((gate->ne[0] != 1 && gate->ne[0] != x->ne[0]) || sg_btensor_rows(gate) != sg_btensor_rows(x))
		return sg_error(SG_ERR_INVALID_ARG, "cuda sigmoid_mul: gate is [%lld][%lld] for x [%lld][%lld]", (long long)sg_btensor_rows(gate),
				(long long)gate->ne[0], (long long)sg_btensor_rows(x), (long long)x->ne[0]);
	CU_RET("sigmoid_mul", sg_cu_sigmoid_mul(x->data, gate->data, sg_btensor_rows(x), x->ne[0], gate->ne[0], out->data, S(cb)));
	return SG_OK;
}

/* Indices stay on the device: one outside [0, W) gives a zero column (the CPU, which reads them
 * on the host, refuses it with SG_ERR_RANGE). */
sg_status sg_cuda_gather_cols(sg_backend *be, const sg_btensor *x, const sg_btensor *idx, sg_btensor *out)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	sg_status st;
	if ((st = check_f32("gather_cols", "x", x)) || (st = check_i32("gather_cols", "idx", idx)) || (st = check_f32("gather_cols", "out", out)))
		return st;
	int64_t n = sg_btensor_rows(x), W = x->ne[0], W2 = nvals(idx);
	if (out->ne[0] != W2 || sg_btensor_rows(out) != n || x->data == out->data)
		return sg_error(SG_ERR_INVALID_ARG, "cuda gather_cols: out is [%lld][%lld], expected [%lld][%lld] apart from x", (long long)sg_btensor_rows(out),
				(long long)out->ne[0], (long long)n, (long long)W2);
	CU_RET("gather_cols", sg_cu_gather_cols(x->data, idx->data, n, W, W2, out->data, S(cb)));
	return SG_OK;
}

sg_status sg_cuda_glu_split(sg_backend *be, const sg_btensor *x, sg_act act, sg_btensor *out)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	sg_status st;
	if ((st = check_f32("glu_split", "x", x)) || (st = check_f32("glu_split", "out", out))) return st;
	if (x->ne[0] % 2 || out->ne[0] * 2 != x->ne[0] || sg_btensor_rows(out) != sg_btensor_rows(x))
		return sg_error(SG_ERR_INVALID_ARG, "cuda glu_split: x [%lld][%lld] -> out [%lld][%lld] (want half the width)", (long long)sg_btensor_rows(x),
				(long long)x->ne[0], (long long)sg_btensor_rows(out), (long long)out->ne[0]);
	int kind = act == SG_ACT_SILU ? SG_CU_EW_SILU : act == SG_ACT_GELU_TANH ? SG_CU_EW_GELU : act == SG_ACT_GELU ? SG_CU_EW_GELU_ERF : -1;
	if (kind < 0) return sg_error(SG_ERR_UNSUPPORTED, "cuda glu_split: activation %d", (int)act);
	if (x->data == out->data && sg_btensor_rows(x) > 1) return sg_error(SG_ERR_INVALID_ARG, "cuda glu_split: out aliases x over several rows");
	CU_RET("glu_split", sg_cu_glu_split(x->data, kind, sg_btensor_rows(x), out->ne[0], out->data, S(cb)));
	return SG_OK;
}

sg_status sg_cuda_moe_weight_scale(sg_backend *be, sg_btensor *weights, const sg_btensor *ids, const sg_btensor *scale)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	sg_status st;
	if ((st = check_f32("moe_weight_scale", "weights", weights)) || (st = check_i32("moe_weight_scale", "ids", ids)) ||
	    (st = check_f32("moe_weight_scale", "scale", scale)))
		return st;
	if (nvals(ids) != nvals(weights))
		return sg_error(SG_ERR_INVALID_ARG, "cuda moe_weight_scale: %lld ids for %lld weights", (long long)nvals(ids), (long long)nvals(weights));
	CU_RET("moe_weight_scale", sg_cu_moe_weight_scale(weights->data, ids->data, nvals(weights), scale->data, nvals(scale), S(cb)));
	return SG_OK;
}

