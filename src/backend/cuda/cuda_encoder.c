/*
 * The CUDA backend's ops for an encoder's packed batch (an embedding or rerank call's chunk): the
 * attention of every sequence in one launch (kernels in cuda_packed.cu) and q, k and v sharing one
 * split of x (the GEMMs in cuda_gemm.c). The op table is in cuda_backend.c.
 */
#include <math.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_kernels.h"
#include "base/error.h"

/* Many tokens' projections of one x (no norm or epilogue): one split of x for all where the GEMMs
 * take kept tf32x3 splits (sg_cuda_gemm_shared_x); *done 0 leaves them to the composition. */
sg_status sg_cuda_matmul_shared_x(sg_cuda_backend *cb, const sg_matmul_multi *p, int64_t n, int *done)
{
	sg_cuw v[SG_CUDA_SHARED_MAX];
	float *y[SG_CUDA_SHARED_MAX];
	int64_t N[SG_CUDA_SHARED_MAX];
	const float *b[SG_CUDA_SHARED_MAX];
	*done = 0;
	if (!cb->gemm || (cb->blas_state <= 0 && (cb->capturing || !sg_cuda_blas_ready(cb)))) return SG_OK;
	for (int i = 0; i < p->nw; i++) {
		sg_status st = sg_cuda_wview("matmul", p->w[i], &v[i]);
		if (st || (st = sg_cuda_multi_check(p, i, &v[i], n))) return st;
		N[i] = sg_btensor_rows(p->w[i]);
		y[i] = p->y[i]->data, b[i] = p->bias[i] ? p->bias[i]->data : NULL;
	}
	return sg_cuda_gemm_shared_x(cb, v, p->nw, p->x->data, n, y, N, b, done);
}

sg_status sg_cuda_attention_packed(sg_backend *be, const sg_btensor *q, const sg_btensor *k, const sg_btensor *v,
				       const sg_btensor *offs, int n_seq, const sg_attn_params *p, sg_btensor *out)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)be;
	if (p->softcap > 0 || p->window > 0 || p->causal)
		return sg_error(SG_ERR_UNSUPPORTED, "cuda attention_packed: a softcap, window or causal mask");
	if (q->type != SG_TYPE_F32 || k->type != SG_TYPE_F32 || v->type != SG_TYPE_F32 || out->type != SG_TYPE_F32 ||
	    offs->type != SG_TYPE_I32)
		return sg_error(SG_ERR_INVALID_ARG, "cuda attention_packed: q, k, v and out are F32, offs I32");
	sg_cu_attn_packed a;
	memset(&a, 0, sizeof(a));
	a.hd = k->ne[0];
	a.Hkv = k->ne[1];
	a.n = k->ne[2] * k->ne[3];
	a.hdv = v->ne[0];
	a.n_seq = n_seq;
	if (n_seq < 1 || nvals(offs) < n_seq + 1 || v->ne[1] != a.Hkv || v->ne[2] * v->ne[3] != a.n || a.hd > SG_CU_MAX_HD ||
	    a.hdv > SG_CU_MAX_HD)
		return sg_error(SG_ERR_INVALID_ARG, "cuda attention_packed: k [%lld][%lld][%lld], v [%lld][%lld][%lld], %d sequences",
				(long long)a.n, (long long)a.Hkv, (long long)a.hd, (long long)(v->ne[2] * v->ne[3]), (long long)v->ne[1],
				(long long)a.hdv, n_seq);
	sg_status st = sg_cuda_heads_of("attention_packed", q, a.n, a.hd, &a.H);
	if (st) return st;
	if (a.H % a.Hkv || nvals(out) != a.n * a.H * a.hdv)
		return sg_error(SG_ERR_INVALID_ARG, "cuda attention_packed: %lld query heads over %lld kv heads, out of %lld values",
				(long long)a.H, (long long)a.Hkv, (long long)nvals(out));
	a.q = q->data;
	a.k = k->data;
	a.v = v->data;
	a.offs = offs->data;
	a.out = out->data;
	if (p->bias) {
		/* each sequence's [L][H][L] block: at least one value per query row and head */
		if ((st = check_f32("attention_packed", "bias", p->bias)) || nvals(p->bias) < a.n * a.H)
			return st ? st : sg_error(SG_ERR_INVALID_ARG, "cuda attention_packed: a bias of %lld values for %lld rows of %lld heads",
						  (long long)nvals(p->bias), (long long)a.n, (long long)a.H);
		a.bias = p->bias->data;
	}
	a.scale = p->scale > 0 ? p->scale : 1.0f / sqrtf((float)a.hd);
	a.tiles = cb->packed_tiles;
	CU_RET("attention_packed", sg_cu_attention_packed(&a, S(cb)));
	return SG_OK;
}
