/*
 * The audio codec's ops on the CUDA backend (Qwen3-TTS's decoder): a convolution as im2col rows
 * through the backend's matmul (one GEMM per phase of a transposed one, the phases written back
 * interleaved), grouped convolutions and rows the GEMM kernels cannot take directly, SnakeBeta and
 * the exact GELU (kernels in cuda_conv.cu).
 */
#include <stdint.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_kernels.h"
#include "base/error.h"

#define CONV_COL_FLOATS (16ll << 20) /* im2col rows per GEMM: at most 64 MiB */

sg_status sg_cuda_conv1d(sg_backend *be, const sg_btensor *x, const sg_btensor *w, const sg_btensor *bias,
			     const sg_conv_params *p, sg_btensor *y)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	sg_status st = sg_conv1d_check(be, x, w, bias, p, y);
	if (st) return st;
	int groups = p->groups > 0 ? p->groups : 1;
	sg_cu_conv a = {.x = x->data, .w = w->data, .bias = bias ? bias->data : NULL, .y = y->data, .T = sg_btensor_rows(x),
			.Tout = sg_btensor_rows(y), .Cin = x->ne[0], .Cout = y->ne[0], .K = (int)w->ne[1], .stride = p->stride,
			.dil = p->dilation, .pad = p->pad, .groups = groups};
	/* grouped, or rows the matmul kernels cannot take (K * Cin not a multiple of 8): directly */
	if (groups > 1 || ((int64_t)a.K * a.Cin) % 8) {
		CU_RET("conv1d", sg_cu_conv_grouped(&a, S(cb)));
		return SG_OK;
	}
	/* im2col tiles through the GEMM: y rows = col [rows][K*Cin] x w [Cout][K*Cin]^T + bias */
	int64_t KC = (int64_t)a.K * a.Cin, R = CONV_COL_FLOATS / KC;
	if (R < 16) R = 16;
	if (R > a.Tout) R = a.Tout;
	sg_btensor col;
	int64_t ne[4] = {KC, R, 1, 1};
	if ((st = be->ops->tensor_alloc(be, SG_TYPE_F32, ne, &col))) return st;
	sg_btensor wv = sg_btensor_f32_view(w->data, KC, a.Cout);
	for (int64_t t0 = 0; t0 < a.Tout && !st; t0 += R) {
		int64_t n = a.Tout - t0 < R ? a.Tout - t0 : R;
		/* rows t0.. of the output read x from t0 * stride on */
		int e = sg_cu_im2col(a.x, a.T, a.Cin, n, a.K, a.stride, a.dil, a.pad - (int)(t0 * a.stride), col.data, S(cb));
		if (e) {
			st = cu_fail("conv1d", e);
			break;
		}
		sg_btensor cv = sg_btensor_f32_view(col.data, KC, n), yv = sg_btensor_rows_view(y, t0, n);
		st = sg_cuda_matmul(be, &wv, &cv, bias, &yv);
	}
	be->ops->tensor_free(be, &col);
	return st;
}

sg_status sg_cuda_conv_transpose1d(sg_backend *be, const sg_btensor *x, const sg_btensor *w, const sg_btensor *bias,
				       int stride, sg_btensor *y)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	sg_status st = sg_conv_transpose1d_check(be, x, w, bias, stride, y);
	if (st) return st;
	int64_t T = sg_btensor_rows(x), Cin = x->ne[0], M = w->ne[1], Cout = y->ne[0], Tout = sg_btensor_rows(y);
	if ((M * Cin) % 8) { /* rows the matmul kernels cannot take: directly */
		sg_cu_conv a = {.x = x->data, .w = w->data, .bias = bias ? bias->data : NULL, .y = y->data, .T = T, .Tout = Tout,
				.Cin = Cin, .Cout = Cout, .K = (int)M, .stride = stride, .dil = 1, .pad = 0, .groups = 1};
		CU_RET("conv_transpose1d", sg_cu_convt_direct(&a, S(cb)));
		return SG_OK;
	}
	/* output row j*stride + p = sum over m of W[p][.][m] x[j - m]: one GEMM per phase p over col
	 * rows [x[j], x[j-1], ...], its rows written back interleaved */
	int64_t J = (Tout + stride - 1) / stride;
	sg_btensor col, tmp;
	int64_t nc[4] = {M * Cin, J, 1, 1}, nt[4] = {Cout, J, 1, 1};
	if ((st = be->ops->tensor_alloc(be, SG_TYPE_F32, nc, &col))) return st;
	if ((st = be->ops->tensor_alloc(be, SG_TYPE_F32, nt, &tmp))) {
		be->ops->tensor_free(be, &col);
		return st;
	}
	int e = sg_cu_im2col(x->data, T, Cin, J, (int)M, 1, -1, 0, col.data, S(cb));
	if (e) st = cu_fail("conv_transpose1d", e);
	for (int p = 0; p < stride && !st; p++) {
		sg_btensor wv = sg_btensor_f32_view((float *)w->data + (size_t)p * (size_t)(Cout * M * Cin), M * Cin, Cout);
		st = sg_cuda_matmul(be, &wv, &col, bias, &tmp);
		if (!st && (e = sg_cu_phase_rows(tmp.data, J, Cout, stride, p, Tout, y->data, S(cb)))) st = cu_fail("conv_transpose1d", e);
	}
	be->ops->tensor_free(be, &col);
	be->ops->tensor_free(be, &tmp);
	return st;
}

sg_status sg_cuda_snake(sg_backend *be, const sg_btensor *x, const sg_btensor *a, const sg_btensor *b, sg_btensor *y)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	sg_status st;
	if ((st = check_f32("snake", "x", x)) || (st = check_f32("snake", "a", a)) || (st = check_f32("snake", "b", b)) ||
	    (st = check_f32("snake", "y", y)))
		return st;
	int64_t C = x->ne[0], n = nvals(x);
	if (nvals(a) != C || nvals(b) != C || nvals(y) != n)
		return sg_error(SG_ERR_INVALID_ARG, "cuda snake: x [..][%lld], a %lld, b %lld, y %lld values", (long long)C, (long long)nvals(a),
				(long long)nvals(b), (long long)nvals(y));
	CU_RET("snake", sg_cu_snake(x->data, a->data, b->data, n, C, y->data, S(cb)));
	return SG_OK;
}

sg_status sg_cuda_gelu(sg_backend *be, const sg_btensor *x, sg_btensor *y)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	sg_status st;
	if ((st = check_f32("gelu", "x", x)) || (st = check_f32("gelu", "y", y))) return st;
	if (nvals(y) != nvals(x))
		return sg_error(SG_ERR_INVALID_ARG, "cuda gelu: x of %lld values, y of %lld", (long long)nvals(x), (long long)nvals(y));
	CU_RET("gelu", sg_cu_gelu_erf(x->data, nvals(x), y->data, S(cb)));
	return SG_OK;
}

sg_status sg_cuda_pool_rows(sg_backend *be, const sg_btensor *x, const sg_btensor *offs, int n_seq, int mode, sg_btensor *out)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	sg_status st;
	if ((st = check_f32("pool_rows", "x", x)) || (st = check_f32("pool_rows", "out", out)) || (st = check_i32("pool_rows", "offs", offs)))
		return st;
	int64_t D = x->ne[0];
	if (n_seq < 1 || nvals(offs) < n_seq + 1 || nvals(out) < (int64_t)n_seq * D || mode < SG_BPOOL_MEAN || mode > SG_BPOOL_MAX)
		return sg_error(SG_ERR_INVALID_ARG, "cuda pool_rows: %d sequences, offs of %lld values, out of %lld, mode %d", n_seq,
				(long long)nvals(offs), (long long)nvals(out), mode);
	CU_RET("pool_rows", sg_cu_pool_rows(x->data, offs->data, n_seq, D, mode, out->data, S(cb)));
	return SG_OK;
}
