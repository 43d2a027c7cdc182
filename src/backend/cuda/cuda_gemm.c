/*
 * The CUDA backend's cuBLAS paths for many tokens (prefill): dense GEMMs on dequantized weight
 * tiles, MoE expert GEMMs, and prefill attention as GEMMs. Called from the op table in
 * cuda_backend.c when a chunk has more than GEMV_MAX_TOKENS tokens and no graph is being recorded.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "base/alloc.h"

/*
 * cuBLAS is loaded on first use, not linked: its libraries are hundreds of megabytes, and mapping
 * and relocating them at start-up cost every saragossa process ~0.2 s and ~200 MB of RSS, CPU-only
 * runs included. Only the five entry points the GEMMs need are resolved, and the grouped GEMM
 * (cuBLAS 12.5 on) when the library has it.
 */
#define STR_(x) #x
#define STR(x) STR_(x)
static struct {
	cublasStatus_t (*create)(cublasHandle_t *);
	cublasStatus_t (*destroy)(cublasHandle_t);
	cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
	cublasStatus_t (*gemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *, const void *,
			       cudaDataType, int, const void *, cudaDataType, int, const void *, void *, cudaDataType, int,
			       cublasComputeType_t, cublasGemmAlgo_t);
	cublasStatus_t (*gemm_sb)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *, const void *,
				  cudaDataType, int, long long, const void *, cudaDataType, int, long long, const void *, void *,
				  cudaDataType, int, long long, int, cublasComputeType_t, cublasGemmAlgo_t);
	/* cublasGemmGroupedBatchedEx, or NULL: the MoE GEMM then calls gemm once per expert */
	cublasStatus_t (*gemm_grouped)(cublasHandle_t, const cublasOperation_t *, const cublasOperation_t *, const int *, const int *,
				       const int *, const void *, const void *const *, cudaDataType, const int *, const void *const *,
				       cudaDataType, const int *, const void *, void *const *, cudaDataType, const int *, int, const int *,
				       cublasComputeType_t);
} blas_fn;

int sg_cuda_blas_ready(sg_cuda_backend *cb)
{
	if (cb->blas_state) return cb->blas_state > 0;
	cb->blas_state = -1;
	if (!blas_fn.gemm) {
		void *h = dlopen("libcublas.so." STR(CUBLAS_VER_MAJOR), RTLD_NOW | RTLD_LOCAL);
		if (!h) h = dlopen("libcublas.so", RTLD_NOW | RTLD_LOCAL);
		if (!h) return 0;
		*(void **)&blas_fn.create = dlsym(h, "cublasCreate_v2");
		*(void **)&blas_fn.destroy = dlsym(h, "cublasDestroy_v2");
		*(void **)&blas_fn.set_stream = dlsym(h, "cublasSetStream_v2");
		*(void **)&blas_fn.gemm = dlsym(h, "cublasGemmEx");
		*(void **)&blas_fn.gemm_sb = dlsym(h, "cublasGemmStridedBatchedEx");
		*(void **)&blas_fn.gemm_grouped = dlsym(h, "cublasGemmGroupedBatchedEx");
		if (!blas_fn.create || !blas_fn.destroy || !blas_fn.set_stream || !blas_fn.gemm || !blas_fn.gemm_sb) {
			blas_fn.gemm = NULL;
			return 0;
		}
	}
	if (blas_fn.create(&cb->blas) != CUBLAS_STATUS_SUCCESS) return 0;
	if (blas_fn.set_stream(cb->blas, cb->stream) != CUBLAS_STATUS_SUCCESS) {
		blas_fn.destroy(cb->blas);
		cb->blas = NULL;
		return 0;
	}
	cb->blas_state = 1;
	return 1;
}


/* f32 data: FP32 math, or TF32 tensor cores (tf32: one product, tf32x3: three on split operands) */
static cublasComputeType_t f32_math(const sg_cuda_backend *cb)
{
	return cb->gemm == GEMM_TF32 || cb->gemm == GEMM_TF32X3 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

/* Values a TF32 operand holds exactly (f16 and bf16 have at most 11 significant bits). */
static int tf32_exact(sg_cukt kt) { return kt == SG_CUKT_F16 || kt == SG_CUKT_BF16; }

/* Rows of a dequantized weight tile: about GEMM_TILE_BYTES, the tiles of one matrix of equal size
 * and a multiple of 128 rows (odd row counts made cuBLAS pick slower kernels). */
static int64_t tile_rows(int64_t N, int64_t K, size_t es)
{
	int64_t cap = (int64_t)(GEMM_TILE_BYTES / es / (size_t)K);
	if (cap < 128) cap = 128;
	int64_t nt = (N + cap - 1) / cap, rt = ((N + nt - 1) / nt + 127) & ~(int64_t)127;
	return rt < N ? rt : N;
}

/* cuBLAS C (nr x n, ld N) = W^T (nr x K) * X (K x n) (+ beta C): the column-major view of
 * y[t][r0 + r] = w[r0 + r] . x[t]. */
static sg_status blas_gemm(sg_cuda_backend *cb, int64_t nr, int64_t n, int64_t K, const void *w, const void *x, cudaDataType ty,
			   float beta, float *y, int64_t N, cublasComputeType_t math)
{
	const float one = 1.0f;
	cublasStatus_t bs = blas_fn.gemm(cb->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, (int)n, (int)K, &one, w, ty, (int)K, x, ty, (int)K,
					 &beta, y, CUDA_R_32F, (int)N, math, CUBLAS_GEMM_DEFAULT);
	return bs == CUBLAS_STATUS_SUCCESS ? SG_OK : sg_error(SG_ERR_BACKEND, "cuda matmul: cuBLAS GEMM failed (status %d)", (int)bs);
}

/*
 * Quantized weights on 8-bit activations (SARAGOSSA_CUDA_Q8X) take f16 operands
 * (SARAGOSSA_CUDA_GEMM_F16): the activations are already rounded to 8-bit blocks, the f16 rounding
 * after it (a power-of-two row scale keeps them in range) is ~8x finer, and one f16 tensor-core
 * product is ~6x fewer tensor-core cycles than the three TF32 ones.
 */
static sg_status gemm_f16(sg_cuda_backend *cb, const sg_cuw *v, const float *x, int64_t n, float *y, int64_t N, const float *bias)
{
	int64_t K = v->K, rt = tile_rows(N, K, 2);
	size_t xb = round16((size_t)(n * K) * 2), sb = round16((size_t)n * 4);
	sg_status st;
	uint8_t *sc = sg_cuda_scratch(cb, xb + sb + round16((size_t)(rt * K) * 2), &st);
	if (!sc) return st;
	float *scale = (float *)(sc + xb);
	uint16_t *wt = (uint16_t *)(sc + xb + sb);
	CU_RET("matmul", sg_cu_q8_rows_f16(x, n, K, (uint16_t *)sc, scale, S(cb)));
	for (int64_t r0 = 0; r0 < N; r0 += rt) {
		int64_t nr = N - r0 < rt ? N - r0 : rt;
		CU_RET("matmul", sg_cu_dequant_16(v, r0, nr, 1, wt, S(cb)));
		if ((st = blas_gemm(cb, nr, n, K, wt, sc, CUDA_R_16F, 0.0f, y + r0, N, CUBLAS_COMPUTE_32F))) return st;
	}
	CU_RET("matmul", sg_cu_scale_rows(y, n, N, scale, bias, S(cb)));
	return SG_OK;
}

/* One kept split of gemm_x3_one: a weight, the bias its rows carry, its (hi, hi, lo) rows. */
struct sg_cu_x3c {
	const void *w;     /* the weight's data */
	const float *bias; /* the bias its split rows carry (NULL: none) */
	float *w3;         /* [N][K3] */
	int64_t N, K3;
};

void sg_cuda_x3_forget(sg_cuda_backend *cb, const void *data)
{
	for (int i = 0; i < cb->n_x3c; i++) {
		if (data && cb->x3c[i].w != data) continue;
		cudaFree(cb->x3c[i].w3);
		cb->x3c_bytes -= (size_t)(cb->x3c[i].N * cb->x3c[i].K3) * 4;
		cb->x3c[i--] = cb->x3c[--cb->n_x3c];
	}
	if (!data) {
		sg_free(cb->x3c);
		cb->x3c = NULL;
		cb->cap_x3c = 0;
	}
}

/* The depth of gemm_x3_one's rows for K columns: three copies of K rounded up to 4, the bias's two
 * columns, all rounded up to 8. */
static int64_t x3_depth(int64_t K) { return (3 * ((K + 3) & ~(int64_t)3) + 2 + 7) & ~(int64_t)7; }

/* The kept (hi, hi, lo) rows of an f32 matmul-only weight read in place, and its bias, split on the
 * first call while the limit allows (never while a graph is recorded: no allocation there); NULL:
 * split per call as before. The split rows are the ones the per-call form makes, so the products
 * are the same. */
static const float *x3_kept(sg_cuda_backend *cb, const sg_cuw *v, const float *bias, int64_t N)
{
	if (!v->matmul_only || v->kt != SG_CUKT_F32 || v->row_bytes != (size_t)v->K * 4) return NULL;
	const int64_t K3 = x3_depth(v->K);
	for (int i = 0; i < cb->n_x3c; i++)
		if (cb->x3c[i].w == v->data && cb->x3c[i].bias == bias && cb->x3c[i].N == N && cb->x3c[i].K3 == K3) return cb->x3c[i].w3;
	size_t bytes = (size_t)(N * K3) * 4;
	if (cb->capturing || cb->x3c_bytes + bytes > cb->x3c_max) return NULL;
	if (cb->n_x3c == cb->cap_x3c) {
		int cap = cb->cap_x3c ? 2 * cb->cap_x3c : 64;
		struct sg_cu_x3c *e = sg_realloc(cb->x3c, sizeof(*e) * (size_t)cap);
		if (!e) return NULL;
		cb->x3c = e, cb->cap_x3c = cap;
	}
	float *w3 = NULL;
	if (cudaMalloc((void **)&w3, bytes)) {
		(void)cudaGetLastError();
		return NULL;
	}
	if (sg_cu_split3_tf32((const float *)v->data, N, v->K, v->K, 1, bias, 0, K3, w3, S(cb))) {
		(void)cudaGetLastError();
		cudaFree(w3);
		return NULL;
	}
	cb->x3c[cb->n_x3c++] = (struct sg_cu_x3c){v->data, bias, w3, N, K3};
	cb->x3c_bytes += bytes;
	return w3;
}

/*
 * tf32x3 as one TF32 GEMM (SARAGOSSA_CUDA_GEMM_X3_ONE, up to that K): the three products hi*hi + hi*lo + lo*hi
 * are one dot product of depth 3K when each weight row is laid out as (hi, hi, lo) and each
 * activation row as (hi, lo, hi) (sg_cu_split3_tf32), and the bias rides in two more columns
 * (its hi and lo against two ones). One cuBLAS call a tile instead of three that re-read and
 * re-write the output, no bias kernel, and the weight split read straight from f32 weights (other
 * types dequantized into a tile first). Same products as the three-GEMM form, summed in one order.
 * kept: the weight's kept split (x3_kept), or NULL to split it here.
 */
static sg_status gemm_x3_one(sg_cuda_backend *cb, const sg_cuw *v, const float *kept, const float *x, int64_t n, float *y, int64_t N,
			     const float *bias)
{
	const int64_t K = v->K, K3 = x3_depth(K);
	const int direct = v->kt == SG_CUKT_F32 && v->row_bytes == (size_t)K * 4;
	if (kept) {
		sg_status st;
		float *x3 = sg_cuda_scratch(cb, round16((size_t)(n * K3) * 4), &st);
		if (!x3) return st;
		CU_RET("matmul", sg_cu_split3_tf32(x, n, K, K, 0, NULL, bias != NULL, K3, x3, S(cb)));
		return blas_gemm(cb, N, n, K3, kept, x3, CUDA_R_32F, 0.0f, y, N, CUBLAS_COMPUTE_32F_FAST_TF32);
	}
	const int64_t rt = tile_rows(N, K3, 4);
	const size_t xb = round16((size_t)(n * K3) * 4), tb = round16((size_t)(rt * K3) * 4);
	const size_t db = direct ? 0 : round16((size_t)(rt * K) * 4);
	sg_status st;
	uint8_t *sc = sg_cuda_scratch(cb, xb + tb + db, &st);
	if (!sc) return st;
	float *x3 = (float *)sc, *w3 = (float *)(sc + xb), *wt = (float *)(sc + xb + tb);
	CU_RET("matmul", sg_cu_split3_tf32(x, n, K, K, 0, NULL, bias != NULL, K3, x3, S(cb)));
	for (int64_t r0 = 0; r0 < N; r0 += rt) {
		const int64_t nr = N - r0 < rt ? N - r0 : rt;
		const float *src = wt;
		if (direct) src = (const float *)(v->data + (size_t)r0 * v->row_bytes);
		else CU_RET("matmul", sg_cu_dequant_f32(v, r0, nr, wt, S(cb)));
		CU_RET("matmul", sg_cu_split3_tf32(src, nr, K, K, 1, bias ? bias + r0 : NULL, 0, K3, w3, S(cb)));
		if ((st = blas_gemm(cb, nr, n, K3, w3, x3, CUDA_R_32F, 0.0f, y + r0, N, CUBLAS_COMPUTE_32F_FAST_TF32))) return st;
	}
	return SG_OK;
}

/*
 * Several weights over one x (an encoder's q, k and v) when each takes the one-GEMM tf32x3 form
 * from its kept split: x is split once for all of them instead of once a weight. *done = 0 (and
 * nothing run) where any weight would take another path; the caller then runs them one by one.
 * The same products as one GEMM a weight.
 */
sg_status sg_cuda_gemm_shared_x(sg_cuda_backend *cb, const sg_cuw *v, int nw, const float *x, int64_t n, float *const *y, const int64_t *N,
				const float *const *bias, int *done)
{
	*done = 0;
	if (nw < 2 || !cb->shared_x || cb->gemm != GEMM_TF32X3) return SG_OK;
	const float *kept[SG_CUDA_SHARED_MAX];
	if (nw > SG_CUDA_SHARED_MAX) return SG_OK;
	for (int i = 0; i < nw; i++) {
		/* one activation split serves them all: the same depth, and a bias on all or none (its
		 * two ones columns) */
		if (v[i].K != v[0].K || !bias[i] != !bias[0] || (cb->q8x && sg_cu_has_q8(v[i].kt)) || tf32_exact(v[i].kt)) return SG_OK;
		if (N[i] > INT32_MAX || v[i].K > INT32_MAX) return SG_OK;
	}
	for (int i = 0; i < nw; i++)
		if (!(kept[i] = x3_kept(cb, &v[i], bias[i], N[i]))) return SG_OK;
	const int64_t K3 = x3_depth(v[0].K);
	sg_status st;
	float *x3 = sg_cuda_scratch(cb, round16((size_t)(n * K3) * 4), &st);
	if (!x3) return st;
	CU_RET("matmul", sg_cu_split3_tf32(x, n, v[0].K, v[0].K, 0, NULL, bias[0] != NULL, K3, x3, S(cb)));
	for (int i = 0; i < nw; i++)
		if ((st = blas_gemm(cb, N[i], n, K3, kept[i], x3, CUDA_R_32F, 0.0f, y[i], N[i], CUBLAS_COMPUTE_32F_FAST_TF32))) return st;
	*done = 1;
	return SG_OK;
}

sg_status sg_cuda_gemm(sg_cuda_backend *cb, const sg_cuw *v, const float *x, int64_t n, float *y, int64_t N, const float *bias)
{
	int64_t K = v->K;
	/* with 8-bit decode activations the GEMM takes the same rounded activations (see sg_cu_requant) */
	int rq = cb->q8x && sg_cu_has_q8(v->kt) && K % 32 == 0;
	if (rq && cb->gemm_f16) return gemm_f16(cb, v, x, n, y, N, bias);
	/* a weight whose split is kept takes the one-GEMM form at every K (the three-GEMM form was faster
	 * for wide rows only while the weights were split again every call) */
	const int split = !rq && cb->gemm == GEMM_TF32X3 && !tf32_exact(v->kt);
	const float *kept = split ? x3_kept(cb, v, bias, N) : NULL;
	if (split && (K <= cb->x3_one || kept)) return gemm_x3_one(cb, v, kept, x, n, y, N, bias);
	size_t es = cb->gemm == GEMM_BF16 ? 2 : 4;
	int x3 = cb->gemm == GEMM_TF32X3, wsplit = x3 && !tf32_exact(v->kt);
	int64_t rt = tile_rows(N, K, es);
	size_t xs = round16((size_t)(n * K) * 4);
	size_t xb = cb->gemm == GEMM_BF16 ? round16((size_t)(n * K) * 2) : x3 ? 2 * xs : 0, rb = rq ? xs : 0;
	size_t tb = round16((size_t)(rt * K) * es);
	sg_status st;
	uint8_t *sc = sg_cuda_scratch(cb, xb + rb + tb * (wsplit ? 2 : 1), &st);
	if (!sc) return st;
	if (rq) {
		CU_RET("matmul", sg_cu_requant(x, n * K, (float *)(sc + xb), S(cb)));
		x = (const float *)(sc + xb);
	}
	const void *xa = x, *xl = NULL;
	if (cb->gemm == GEMM_BF16) {
		CU_RET("matmul", sg_cu_f32_to_16(x, n * K, 0, (uint16_t *)sc, S(cb)));
		xa = sc;
	} else if (x3) {
		CU_RET("matmul", sg_cu_split_tf32(x, n * K, (float *)sc, (float *)(sc + xs), S(cb)));
		xa = sc, xl = sc + xs;
	}
	void *wt = sc + xb + rb, *wl = sc + xb + rb + tb;
	cudaDataType ty = cb->gemm == GEMM_BF16 ? CUDA_R_16BF : CUDA_R_32F;
	cublasComputeType_t math = cb->gemm == GEMM_BF16 ? CUBLAS_COMPUTE_32F : f32_math(cb);
	for (int64_t r0 = 0; r0 < N; r0 += rt) {
		int64_t nr = N - r0 < rt ? N - r0 : rt;
		if (cb->gemm == GEMM_BF16) CU_RET("matmul", sg_cu_dequant_16(v, r0, nr, 0, wt, S(cb)));
		else CU_RET("matmul", sg_cu_dequant_f32(v, r0, nr, wt, S(cb)));
		if (wsplit) CU_RET("matmul", sg_cu_split_tf32(wt, nr * K, wt, wl, S(cb)));
		/* tf32x3 adds W_hi^T X_lo and W_lo^T X_hi to W_hi^T X_hi */
		const void *pa[3] = {wt, wt, wl}, *pb[3] = {xa, xl, xa};
		for (int t = 0; t < (x3 ? 2 + wsplit : 1); t++)
			if ((st = blas_gemm(cb, nr, n, K, pa[t], pb[t], ty, t ? 1.0f : 0.0f, y + r0, N, math))) return st;
	}
	if (bias) CU_RET("matmul", sg_cu_add_bias(y, bias, n, N, S(cb)));
	return SG_OK;
}

void sg_cuda_blas_destroy(sg_cuda_backend *cb)
{
	if (cb->blas) blas_fn.destroy(cb->blas);
	cb->blas = NULL;
}

/*
 * MoE prefill through f16 tensor-core GEMMs (SARAGOSSA_CUDA_MOE_GEMM tokens or more): the slots
 * sorted by expert on the device, the per-expert offsets read back (the one sync: the GEMM
 * shapes are host arguments), each slot's input gathered in that order and rounded to 8 bits
 * then f16 (gemm_f16's arithmetic), the used experts' weights dequantized to f16 in tiles of
 * about GEMM_TILE_BYTES, one grouped GEMM per tile (one problem per expert: C_e [c_e][N] =
 * X_e [c_e][K] W_e^T; a cublasGemmEx per expert where the library lacks the grouped call or
 * answers CUBLAS_STATUS_NOT_SUPPORTED), then the outputs scaled back and scattered to their
 * slots' rows of y.
 *
 * cublasGemmGroupedBatchedEx multiplies f16 operands into f16 outputs only (f32 accumulation,
 * CUBLAS_COMPUTE_32F; cublasGemmEx's f16 -> f32 is not among its types), so the outputs are f16
 * too, and the rows go in at a largest magnitude of [2^(MOE_TOP-1), 2^MOE_TOP), not gemm_f16's
 * 2^14: an output then overflows only for a weight row whose absolute sum passes 2^(16-MOE_TOP)
 * (4096; trained weights are ~0.1 a value), and the output's f16 rounding (~2^-11 of it, NMSE
 * ~1e-7) is far below the 8-bit rounding of the inputs. Values of an input row below 2^-18 of
 * its largest fall into f16's subnormals, where they keep an absolute error of 2^-28 of the row's
 * largest: nothing next to the 8-bit rounding (2^-8 of a block's largest).
 *
 * Scratch, one buffer (each part 256-byte aligned): the sort (start [E+1], order [S], used [E],
 * nused, as sg_cu_moe_sort), the gathered inputs f16 [S][K], their row scales f32 [S], the
 * outputs f16 [S][ldc] (ldc = N rounded up to 8: every output pointer 16-byte aligned), the
 * device pointer arrays A, B, C [3][used experts], the weight tile f16 [te][N][K].
 */
#define MOE_TOP 4

/* Host arrays of one call: the offsets read back and the grouped GEMM's per-expert arguments. */
typedef struct {
	int32_t *start;           /* [E+1] */
	int32_t *used;            /* [E] the experts with slots */
	int *m, *nn, *kk, *ld_a, *ld_c, *gsize; /* [E] per problem (lda = ldb = K) */
	cublasOperation_t *ta, *tb; /* [E] */
	float *alpha, *beta;      /* [E] */
	const void **ptr;         /* [3][E]: A (weight tile), B (inputs), C (outputs) */
	void *mem;
} moe_host;

static sg_status moe_host_alloc(moe_host *h, int64_t E)
{
	size_t ne = (size_t)E;
	size_t bytes = sizeof(int32_t) * (2 * ne + 1) + sizeof(int) * 6 * ne + sizeof(cublasOperation_t) * 2 * ne + sizeof(float) * 2 * ne +
		       sizeof(void *) * 3 * ne + 64;
	memset(h, 0, sizeof(*h));
	uint8_t *p = sg_malloc(bytes);
	if (!p) return sg_error(SG_ERR_NOMEM, "cuda moe_matmul: %zu bytes of host arrays for %lld experts", bytes, (long long)E);
	h->mem = p;
	/* pointers first (the widest alignment), then the 4-byte arrays */
	h->ptr = (const void **)p, p += sizeof(void *) * 3 * ne;
	h->alpha = (float *)p, p += sizeof(float) * ne;
	h->beta = (float *)p, p += sizeof(float) * ne;
	h->ta = (cublasOperation_t *)p, p += sizeof(cublasOperation_t) * ne;
	h->tb = (cublasOperation_t *)p, p += sizeof(cublasOperation_t) * ne;
	int **ia[6] = {&h->m, &h->nn, &h->kk, &h->ld_a, &h->ld_c, &h->gsize};
	for (int i = 0; i < 6; i++) *ia[i] = (int *)p, p += sizeof(int) * ne;
	h->start = (int32_t *)p, p += sizeof(int32_t) * (ne + 1);
	h->used = (int32_t *)p;
	return SG_OK;
}

sg_status sg_cuda_moe_gemm(sg_cuda_backend *cb, const sg_cuw *v, const float *x, int shared_x, const int32_t *ids, int64_t n, int64_t k,
			   int64_t E, float *y, int64_t N)
{
	const char *op = "moe_matmul";
	int64_t K = v->K, ns = n * k, ldc = (N + 7) & ~(int64_t)7;
	size_t eb = (size_t)(N * K) * 2; /* one expert's weights in f16 */
	/* experts per tile; an expert larger than the bound is a tile of its own */
	int64_t te = (int64_t)(GEMM_TILE_BYTES / eb);
	if (te < 1) te = 1;
	if (te > E) te = E;
	size_t ib = round256(sizeof(int32_t) * (size_t)(2 * E + ns + 2)), xb = round256((size_t)(ns * K) * 2), sb = round256((size_t)ns * 4);
	size_t ob = round256((size_t)(ns * ldc) * 2), pb = round256(sizeof(void *) * 3 * (size_t)E + sizeof(int32_t) * (size_t)E);
	sg_status st;
	uint8_t *sc = sg_cuda_scratch(cb, ib + xb + sb + ob + pb + (size_t)te * eb, &st);
	if (!sc) return st;
	int32_t *order = (int32_t *)sc + E + 1;
	uint16_t *x16 = (uint16_t *)(sc + ib), *c16 = (uint16_t *)(sc + ib + xb + sb), *wt = (uint16_t *)(sc + ib + xb + sb + ob + pb);
	float *scale = (float *)(sc + ib + xb);
	const void **dptr = (const void **)(sc + ib + xb + sb + ob);
	CU_RET(op, sg_cu_moe_sort(ids, ns, E, (int32_t *)sc, y, N, S(cb)));
	moe_host h;
	if ((st = moe_host_alloc(&h, E))) return st;
	int e = (int)cudaMemcpyAsync(h.start, sc, sizeof(int32_t) * (size_t)(E + 1), cudaMemcpyDeviceToHost, cb->stream);
	if (!e) e = (int)cudaStreamSynchronize(cb->stream);
	int64_t P = e ? 0 : h.start[E], nu = 0; /* slots with an id in range; experts with slots */
	for (int64_t i = 0; i < E && !e; i++) {
		int32_t c = h.start[i + 1] - h.start[i];
		if (c < 0 || h.start[i] < 0 || h.start[i + 1] > ns) {
			st = sg_error(SG_ERR_BACKEND, "cuda moe_matmul: expert %lld's slots [%d, %d) of %lld", (long long)i, h.start[i], h.start[i + 1], (long long)ns);
			goto out;
		}
		if (!c) continue;
		int64_t j = nu++;
		h.used[j] = (int32_t)i;
		h.m[j] = (int)N, h.nn[j] = c, h.kk[j] = (int)K, h.ld_a[j] = (int)K, h.ld_c[j] = (int)ldc, h.gsize[j] = 1;
		h.ta[j] = CUBLAS_OP_T, h.tb[j] = CUBLAS_OP_N, h.alpha[j] = 1.0f, h.beta[j] = 0.0f;
		h.ptr[j] = wt + (size_t)(j % te) * (size_t)(N * K);
		h.ptr[E + j] = x16 + (size_t)h.start[i] * (size_t)K;
		h.ptr[2 * E + j] = c16 + (size_t)h.start[i] * (size_t)ldc;
	}
	if (!e && P > 0) e = sg_cu_q8_rows_f16_gather(x, order, shared_x ? k : 1, P, K, MOE_TOP, x16, scale, S(cb));
	/* from pageable memory the copy has staged the host array when it returns */
	if (!e && P > 0 && blas_fn.gemm_grouped) e = (int)cudaMemcpyAsync(dptr, h.ptr, sizeof(void *) * 3 * (size_t)E, cudaMemcpyHostToDevice, cb->stream);
	if (e) {
		st = cu_fail(op, e);
		goto out;
	}
	/* the used experts' ids on the device: each tile's experts dequantized in one launch */
	int32_t *dused = (int32_t *)(dptr + 3 * E);
	if (nu > 0 && (e = (int)cudaMemcpyAsync(dused, h.used, sizeof(int32_t) * (size_t)nu, cudaMemcpyHostToDevice, cb->stream))) {
		st = cu_fail(op, e);
		goto out;
	}
	for (int64_t j0 = 0; j0 < nu; j0 += te) {
		int64_t j1 = j0 + te < nu ? j0 + te : nu;
		e = sg_cu_dequant_16_groups(v, dused + j0, j1 - j0, N, E, 1, (uint16_t *)h.ptr[j0], S(cb));
		if (e) {
			st = cu_fail(op, e);
			goto out;
		}
		cublasStatus_t bs = CUBLAS_STATUS_NOT_SUPPORTED;
		if (blas_fn.gemm_grouped)
			bs = blas_fn.gemm_grouped(cb->blas, h.ta + j0, h.tb + j0, h.m + j0, h.nn + j0, h.kk + j0, h.alpha + j0, dptr + j0, CUDA_R_16F,
						  h.ld_a + j0, dptr + E + j0, CUDA_R_16F, h.ld_a + j0, h.beta + j0, (void *const *)(dptr + 2 * E + j0),
						  CUDA_R_16F, h.ld_c + j0, (int)(j1 - j0), h.gsize + j0, CUBLAS_COMPUTE_32F);
		if (bs == CUBLAS_STATUS_NOT_SUPPORTED) { /* no grouped call (or not for these types here): one GEMM an expert */
			bs = CUBLAS_STATUS_SUCCESS;
			for (int64_t j = j0; j < j1 && bs == CUBLAS_STATUS_SUCCESS; j++)
				bs = blas_fn.gemm(cb->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, h.nn[j], (int)K, h.alpha + j, h.ptr[j], CUDA_R_16F, (int)K,
						  h.ptr[E + j], CUDA_R_16F, (int)K, h.beta + j, (void *)h.ptr[2 * E + j], CUDA_R_16F, (int)ldc, CUBLAS_COMPUTE_32F,
						  CUBLAS_GEMM_DEFAULT);
		}
		if (bs != CUBLAS_STATUS_SUCCESS) {
			st = sg_error(SG_ERR_BACKEND, "cuda moe_matmul: cuBLAS GEMM of experts %d..%d (%lld tokens, K %lld, N %lld) failed (status %d)",
				      h.used[j0], h.used[j1 - 1], (long long)n, (long long)K, (long long)N, (int)bs);
			goto out;
		}
	}
	if (P > 0 && (e = sg_cu_scale_rows_scatter(c16, ldc, order, P, N, scale, y, S(cb)))) st = cu_fail(op, e);
out:
	sg_free(h.mem);
	return st;
}

#define ATTN_S_BYTES (256u << 20) /* scores of the GEMM prefill path held at once */

/* The largest position of a chunk: from the last host write when it was these values, else read back. */
static sg_status pos_max(sg_cuda_backend *cb, const sg_btensor *pos, int64_t n, int64_t *out)
{
	if (cb->pos_ptr == pos->data && cb->pos_n == n) {
		*out = cb->pos_max;
		return SG_OK;
	}
	int32_t *h = sg_malloc((size_t)n * 4);
	if (!h) return sg_error(SG_ERR_NOMEM, "cuda attention: %lld positions", (long long)n);
	int e = (int)cudaMemcpyAsync(h, pos->data, (size_t)n * 4, cudaMemcpyDeviceToHost, cb->stream);
	if (!e) e = (int)cudaStreamSynchronize(cb->stream);
	int64_t mx = 0;
	for (int64_t i = 0; i < n && !e; i++) mx = h[i] > mx ? h[i] : mx;
	sg_free(h);
	if (e) return cu_fail("attention", e);
	*out = mx;
	return SG_OK;
}

/*
 * Prefill attention as two GEMMs per query head: s = K^T q over the live KV rows [0, L), the
 * row softmax with the mask, out = V p. f16 caches are widened to f32 first, so the math is
 * FP32 (TF32 with SARAGOSSA_CUDA_GEMM=tf32; tf32x3 splits q, p and f32 caches into hi + lo
 * parts, f16 values being exact TF32 already). Query heads of one KV head are batched by their
 * index in the group (a strided batch over KV heads); KV heads go in groups whose scores fit
 * ATTN_S_BYTES.
 */
typedef struct {
	const float *a[3], *b[3]; /* the products' operands: a[t] (x) b[t], summed */
	int nt;
} split3;

static sg_status sgemm_sb(sg_cuda_backend *cb, cublasOperation_t ta, int m, int n, int k, const split3 *p, int lda, long long sa, int ldb,
			  long long sb, float *c, int ldc, long long sc, int batch)
{
	const float one = 1.0f, zero = 0.0f;
	for (int t = 0; t < p->nt; t++)
		if (blas_fn.gemm_sb(cb->blas, ta, CUBLAS_OP_N, m, n, k, &one, p->a[t], CUDA_R_32F, lda, sa, p->b[t], CUDA_R_32F, ldb, sb, t ? &one : &zero, c,
				    CUDA_R_32F, ldc, sc, batch, f32_math(cb), CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
			return sg_error(SG_ERR_BACKEND, "cuda attention: cuBLAS GEMM failed");
	return SG_OK;
}

/* A cache as f32 operand(s): widened from f16 (exact in TF32) or, for tf32x3, split. */
static sg_status kv_operand(sg_cuda_backend *cb, const void *c, int f16, int64_t n, int x3, float *w, float *lo, const float **hi_out,
			    const float **lo_out)
{
	*hi_out = c, *lo_out = NULL;
	if (f16) {
		CU_RET("attention", sg_cu_f16_to_f32(c, n, w, S(cb)));
		*hi_out = w;
	} else if (x3) {
		CU_RET("attention", sg_cu_split_tf32(c, n, w, lo, S(cb)));
		*hi_out = w, *lo_out = lo;
	}
	return SG_OK;
}

/* One half-precision strided-batched product: C (f32) = op(A) B, A and B f16. */
static sg_status hgemm_sb(sg_cuda_backend *cb, cublasOperation_t ta, int m, int n, int k, const void *A, int lda, long long sa, const void *B,
			  int ldb, long long sb, float *c, int ldc, long long sc, int batch)
{
	const float one = 1.0f, zero = 0.0f;
	if (blas_fn.gemm_sb(cb->blas, ta, CUBLAS_OP_N, m, n, k, &one, A, CUDA_R_16F, lda, sa, B, CUDA_R_16F, ldb, sb, &zero, c, CUDA_R_32F, ldc, sc, batch,
			    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
		return sg_error(SG_ERR_BACKEND, "cuda attention: cuBLAS GEMM failed");
	return SG_OK;
}

/*
 * The same two GEMMs over f16 caches with f16 queries and probabilities (SARAGOSSA_CUDA_ATTN_F16):
 * the caches are the operands as they are (no widening), one tensor-core product each, FP32
 * sums. An f16 cache already rounds K and V to 11 bits; q and p take the same rounding.
 */
static sg_status attn_gemm_f16(sg_cuda_backend *cb, const sg_cu_attn *a, int64_t L, int64_t pmax)
{
	int64_t G = a->H / a->Hkv, n = a->n, qn = n * a->H * a->hd;
	size_t qb = round16((size_t)qn * 2), per = round16((size_t)(G * n * L) * 6); /* scores f32 + probabilities f16 */
	int64_t hg = (int64_t)(ATTN_S_BYTES / per);
	if (hg < 1) hg = 1;
	if (hg > a->Hkv) hg = a->Hkv;
	sg_status st;
	uint8_t *sc = sg_cuda_scratch(cb, qb + per * (size_t)hg + 16, &st);
	if (!sc) return st;
	uint16_t *Q = (uint16_t *)sc;
	float *sb = (float *)(sc + qb);
	uint16_t *pb = (uint16_t *)(sc + qb + round16((size_t)hg * G * n * L * 4));
	const uint16_t *K = a->kc, *V = a->vc;
	CU_RET("attention", sg_cu_f32_to_16(a->q, qn, 1, Q, S(cb)));
	for (int64_t k0 = 0; k0 < a->Hkv; k0 += hg) {
		int nk = (int)(a->Hkv - k0 < hg ? a->Hkv - k0 : hg);
		for (int64_t g = 0; g < G && !st; g++)
			st = hgemm_sb(cb, CUBLAS_OP_T, (int)L, (int)n, (int)a->hd, K + k0 * a->hd, (int)(a->Hkv * a->hd), a->hd, Q + (k0 * G + g) * a->hd,
				      (int)(a->H * a->hd), G * a->hd, sb + g * n * L, (int)L, G * n * L, nk);
		if (st) return st;
		CU_RET("attention", sg_cu_attn_rows(sb, a->pos, nk * G * n, n, L, a->scale, a->cap, a->window, a->causal, pmax, pb, S(cb)));
		for (int64_t g = 0; g < G && !st; g++)
			st = hgemm_sb(cb, CUBLAS_OP_N, (int)a->hdv, (int)n, (int)L, V + k0 * a->hdv, (int)(a->Hkv * a->hdv), a->hdv, pb + g * n * L, (int)L,
				      G * n * L, a->out + (k0 * G + g) * a->hdv, (int)(a->H * a->hdv), G * a->hdv, nk);
		if (st) return st;
	}
	return SG_OK;
}

sg_status sg_cuda_attn_gemm(sg_cuda_backend *cb, const sg_cu_attn *a, const sg_btensor *pos)
{
	int64_t pmax = 0;
	sg_status st = pos_max(cb, pos, a->n, &pmax);
	if (st) return st;
	int64_t L = pmax + 1 > a->ctx ? a->ctx : pmax + 1 < 1 ? 1 : pmax + 1, G = a->H / a->Hkv, n = a->n;
	if (cb->attn_f16 && a->kf16 && a->vf16) return attn_gemm_f16(cb, a, L, pmax);
	int x3 = cb->gemm == GEMM_TF32X3;
	int64_t kn = L * a->Hkv * a->hd, vn = L * a->Hkv * a->hdv, qn = n * a->H * a->hd;
	size_t kb = a->kf16 || x3 ? round16((size_t)kn * 4) : 0, vb = a->vf16 || x3 ? round16((size_t)vn * 4) : 0;
	size_t klb = x3 && !a->kf16 ? kb : 0, vlb = x3 && !a->vf16 ? vb : 0, qb = x3 ? 2 * round16((size_t)qn * 4) : 0;
	size_t per = (size_t)(G * n * L) * 4 * (x3 ? 2 : 1); /* scores (and their lo parts) of one KV head */
	int64_t hg = (int64_t)(ATTN_S_BYTES / per);
	if (hg < 1) hg = 1;
	if (hg > a->Hkv) hg = a->Hkv;
	uint8_t *sc = sg_cuda_scratch(cb, kb + vb + klb + vlb + qb + per * (size_t)hg, &st);
	if (!sc) return st;
	const float *K, *Kl, *V, *Vl, *Q = a->q, *Ql = NULL;
	uint8_t *o = sc;
	if ((st = kv_operand(cb, a->kc, a->kf16, kn, x3, (float *)o, (float *)(o + kb + vb), &K, &Kl))) return st;
	if ((st = kv_operand(cb, a->vc, a->vf16, vn, x3, (float *)(o + kb), (float *)(o + kb + vb + klb), &V, &Vl))) return st;
	o += kb + vb + klb + vlb;
	if (x3) {
		CU_RET("attention", sg_cu_split_tf32(a->q, qn, (float *)o, (float *)(o + qb / 2), S(cb)));
		Q = (const float *)o, Ql = (const float *)(o + qb / 2);
		o += qb;
	}
	float *sb = (float *)o, *sl = x3 ? sb + (size_t)hg * G * n * L : NULL;
	for (int64_t k0 = 0; k0 < a->Hkv; k0 += hg) {
		int nk = (int)(a->Hkv - k0 < hg ? a->Hkv - k0 : hg);
		for (int64_t g = 0; g < G && !st; g++) { /* s[(kh G + g)][t][j] = sum_d K[j][kh][d] q[t][kh G + g][d] */
			int64_t qo = (k0 * G + g) * a->hd;
			split3 p = {{K + k0 * a->hd, K + k0 * a->hd, Kl ? Kl + k0 * a->hd : NULL}, {Q + qo, Ql ? Ql + qo : NULL, Q + qo}, x3 ? (Kl ? 3 : 2) : 1};
			st = sgemm_sb(cb, CUBLAS_OP_T, (int)L, (int)n, (int)a->hd, &p, (int)(a->Hkv * a->hd), a->hd, (int)(a->H * a->hd), G * a->hd,
				      sb + g * n * L, (int)L, G * n * L, nk);
		}
		if (st) return st;
		CU_RET("attention", sg_cu_attn_rows(sb, a->pos, nk * G * n, n, L, a->scale, a->cap, a->window, a->causal, pmax, NULL, S(cb)));
		if (x3) CU_RET("attention", sg_cu_split_tf32(sb, (int64_t)nk * G * n * L, sb, sl, S(cb)));
		for (int64_t g = 0; g < G && !st; g++) { /* out[t][kh G + g][d] = sum_j V[j][kh][d] p[kh G + g][t][j] */
			const float *ph = sb + g * n * L, *pl = sl ? sl + g * n * L : NULL;
			split3 p = {{V + k0 * a->hdv, V + k0 * a->hdv, Vl ? Vl + k0 * a->hdv : NULL}, {ph, pl, ph}, x3 ? (Vl ? 3 : 2) : 1};
			st = sgemm_sb(cb, CUBLAS_OP_N, (int)a->hdv, (int)n, (int)L, &p, (int)(a->Hkv * a->hdv), a->hdv, (int)L, G * n * L,
				      a->out + (k0 * G + g) * a->hdv, (int)(a->H * a->hdv), G * a->hdv, nk);
		}
		if (st) return st;
	}
	return SG_OK;
}

