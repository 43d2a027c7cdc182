/* Internal to the CUDA backend's host side: the backend object, the helpers its files share
 * (cuda_backend.c: the op table, memory, weights, graphs; cuda_gemm.c: the cuBLAS paths for many
 * tokens). Not a public interface. */
#ifndef SG_BACKEND_CUDA_INTERNAL_H
#define SG_BACKEND_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_kernels.h"
#include "base/error.h"

#define GEMV_MAX_TOKENS 8          /* more tokens take the tensor-core GEMM (when enabled) */
#define GEMM_TILE_BYTES (64u << 20) /* weight tile dequantized per cuBLAS call */
#define MAX_HEAD_DIM 1024

typedef struct sg_cuda_backend {
	sg_backend base; /* first: a sg_backend * is a sg_cuda_backend * */
	int device;
	cudaStream_t stream;
	cublasHandle_t blas; /* created on the first GEMM (see sg_cuda_blas_ready) */
	int blas_state;      /* 0 not tried, 1 ready, -1 unavailable: the GEMV kernel serves every n */
	void *scratch;
	size_t scratch_cap;
	unsigned scratch_gen; /* bumped when the scratch moves: a graph recorded before is stale */
	int gemm; /* GEMM_*: SARAGOSSA_CUDA_GEMM */
	int q8x;  /* SARAGOSSA_CUDA_Q8X */
	int gemm_f16; /* SARAGOSSA_CUDA_GEMM_F16 */
	int64_t x3_one; /* SARAGOSSA_CUDA_GEMM_X3_ONE: the widest K taking the one-GEMM form */
	/* SARAGOSSA_CUDA_X3_CACHE: the one-GEMM tf32x3 layout of f32 weights bound for matmul alone
	 * (an encoder's), split once and kept (cuda_gemm.c, gemm_x3_one): entries, bytes, limit */
	struct sg_cu_x3c *x3c;
	int n_x3c, cap_x3c;
	size_t x3c_bytes, x3c_max;
	int packed_tiles; /* SARAGOSSA_CUDA_PACKED_TILES: attention_packed a block per 16 tokens and head (cuda_packed.cu) */
	int shared_x; /* SARAGOSSA_CUDA_SHARED_X: one split of x for the weights of a matmul_multi (sg_cuda_gemm_shared_x) */
	int fused; /* SARAGOSSA_CUDA_FUSED */
	int moe_gemm; /* SARAGOSSA_CUDA_MOE_GEMM: fewest tokens of the MoE GEMM path, 0 = never */
	int attn_dec;  /* SARAGOSSA_CUDA_ATTN_DECODE != 0: the one-token attention kernel (the policy's attn.decode) */
	int verify_attn; /* SARAGOSSA_CUDA_VERIFY_ATTN: an exact step's one-token attentions in one launch */
	int attn_gemm; /* SARAGOSSA_CUDA_ATTN_GEMM */
	int attn_flash; /* SARAGOSSA_CUDA_ATTN_FLASH */
	int attn_f16;  /* SARAGOSSA_CUDA_ATTN_F16 */
	/* The last I32 values written from the host (the positions of a chunk): their device address,
	 * count and largest value, so prefill attention knows the KV length without a read-back.
	 * Forgotten when a graph runs (a recorded step may advance positions on the device). */
	const void *pos_ptr;
	int64_t pos_n, pos_max;
	/* One-token attention output already rounded to 8 bits for the matmul after it (the
	 * feeds_matmul / x_fed hints): the buffer, its capacity in values, whose output it holds. */
	void *q8a;
	int64_t q8a_cap;
	const void *q8a_of;
	const void *moe_ids_done; /* ids whose last moe_glu let the down experts read them early */
	int32_t *slot_ids;        /* expert ids renumbered to device slots (the expert slot cache) */
	int64_t slot_ids_cap;
	uint8_t *xstage;          /* an expert's file bytes on the device, before the repack into its slot */
	size_t xstage_cap;
	int xrepack;              /* SARAGOSSA_CUDA_EXPERT_REPACK: experts repacked on the device */
	int exact;        /* match_decode on: many-token ops give each token a one-token step's bits */
	int verify_batch; /* SARAGOSSA_CUDA_VERIFY_BATCH: exact steps' GEMVs over all tokens in one launch */
	int capturing;
	cudaGraphExec_t exec;
	unsigned exec_gen;
	char desc[320];
} sg_cuda_backend;

/* Many tokens: cuBLAS over dequantized weight tiles. GEMM_TF32X3 (the default) splits f32
 * activations and weights into hi + lo TF32 parts and sums three tensor-core products (about
 * FP32's accuracy: the parity gate of 1e-3 on logits holds; 1.2-1.3x FP32's speed at 2k-8k
 * tokens on an H200); GEMM_F32 is plain FP32 math; GEMM_TF32 one TF32 product (1.1e-3 on the
 * fixtures, past the gate); GEMM_BF16 rounds both to bf16 (logits move by ~5e-3). */
enum { GEMM_OFF, GEMM_F32, GEMM_BF16, GEMM_TF32, GEMM_TF32X3 };

/* The split weights of gemm_x3_one kept for a weight (data) and its bias: released with the weight
 * (sg_cuda_x3_forget, from tensor_free) or the backend. */
void sg_cuda_x3_forget(sg_cuda_backend *cb, const void *data);

static inline sg_custream S(sg_cuda_backend *cb) { return (sg_custream)cb->stream; }

static inline sg_status cu_fail(const char *op, int err)
{
	return sg_error(SG_ERR_BACKEND, "cuda %s: %s", op, cudaGetErrorString((cudaError_t)err));
}
#define CU_RET(op, call)                                                                           \
	do {                                                                                       \
		int e_ = (int)(call);                                                              \
		if (e_) return cu_fail(op, e_);                                                   \
	} while (0)

static inline const char *tname(sg_type t) { return sg_type_name((int)t); }

static inline sg_status check_f32(const char *op, const char *what, const sg_btensor *t)
{
	if (!t || !t->data) return sg_error(SG_ERR_INVALID_ARG, "cuda %s: %s is missing", op, what);
	if (t->type != SG_TYPE_F32)
		return sg_error(SG_ERR_INVALID_ARG, "cuda %s: %s must be F32, found %s", op, what, tname(t->type));
	return SG_OK;
}

static inline sg_status check_i32(const char *op, const char *what, const sg_btensor *t)
{
	if (!t || !t->data || t->type != SG_TYPE_I32)
		return sg_error(SG_ERR_INVALID_ARG, "cuda %s: %s must be an I32 tensor", op, what);
	return SG_OK;
}

static inline sg_status check_same(const char *op, const sg_btensor *a, const sg_btensor *b)
{
	if (a->ne[0] != b->ne[0] || sg_btensor_rows(a) != sg_btensor_rows(b))
		return sg_error(SG_ERR_INVALID_ARG, "cuda %s: shapes differ: [%lld][%lld] vs [%lld][%lld]", op,
				(long long)sg_btensor_rows(a), (long long)a->ne[0], (long long)sg_btensor_rows(b),
				(long long)b->ne[0]);
	return SG_OK;
}

static inline int64_t nvals(const sg_btensor *t) { return t->ne[0] * sg_btensor_rows(t); }

static inline size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* One row of K elements from the file's layout into the device's (cuda_repack.c): the legacy
 * 32-blocks' codes before their scales and minima, the planar K-quants (sg_cuda_repack_kq); dst
 * (dst_bytes) is zeroed first. */
void sg_cuda_repack_row(sg_cukt kt, int64_t K, const uint8_t *src, uint8_t *dst, size_t dst_bytes);
/* The same layouts as fields for the device's repack (sg_cu_repack_rows): 0, or -1 for a type
 * whose rows are copied as they are. */
int sg_cuda_repack_fields(sg_cukt kt, sg_cu_fields *f);

static inline size_t round256(size_t n) { return (n + 255) & ~(size_t)255; }

/* The op table's matmul (cuda_backend.c), and the audio codec's ops (cuda_codec.c). */
sg_status sg_cuda_matmul(sg_backend *be, const sg_btensor *w, const sg_btensor *x, const sg_btensor *bias, sg_btensor *y);
sg_status sg_cuda_conv1d(sg_backend *be, const sg_btensor *x, const sg_btensor *w, const sg_btensor *bias,
			 const sg_conv_params *p, sg_btensor *y);
sg_status sg_cuda_conv_transpose1d(sg_backend *be, const sg_btensor *x, const sg_btensor *w, const sg_btensor *bias,
				   int stride, sg_btensor *y);
sg_status sg_cuda_snake(sg_backend *be, const sg_btensor *x, const sg_btensor *a, const sg_btensor *b, sg_btensor *y);
sg_status sg_cuda_gelu(sg_backend *be, const sg_btensor *x, sg_btensor *y);
sg_status sg_cuda_pool_rows(sg_backend *be, const sg_btensor *x, const sg_btensor *offs, int n_seq, int mode, sg_btensor *out);

/* The backend's one scratch buffer, at least n bytes (grown outside graph recordings only). */
void *sg_cuda_scratch(sg_cuda_backend *cb, size_t n, sg_status *st);
/* The kernel view of a bound weight tensor; op names the caller in errors. */
sg_status sg_cuda_wview(const char *op, const sg_btensor *w, sg_cuw *v);

/* Checks shared by the op files (cuda_backend.c): x against weights w (columns, alignment); the
 * heads of [n][H][hd] values x; a matmul_multi's weight, output and bias. */
sg_status sg_cuda_check_x(const char *op, const sg_btensor *x, const sg_btensor *w, const sg_cuw *v);
sg_status sg_cuda_heads_of(const char *op, const sg_btensor *x, int64_t n, int64_t hd, int64_t *H);
/* matmul_multi's weight i (viewed as v) against x, y[i] and bias[i] for n tokens. */
sg_status sg_cuda_multi_check(const sg_matmul_multi *p, int i, const sg_cuw *v, int64_t n);

/* --- cuda_encoder.c --- */
/* The attention_packed op. */
sg_status sg_cuda_attention_packed(sg_backend *be, const sg_btensor *q, const sg_btensor *k, const sg_btensor *v, const sg_btensor *offs,
				   int n_seq, const sg_attn_params *p, sg_btensor *out);
/* matmul_multi of many tokens without norm or epilogue through sg_cuda_gemm_shared_x: *done 0 leaves it
 * to the composition. */
sg_status sg_cuda_matmul_shared_x(sg_cuda_backend *cb, const sg_matmul_multi *p, int64_t n, int *done);

/* --- cuda_gemm.c --- */
/* 1 when cuBLAS is loaded and the backend's handle made (tried once; never inside a recording). */
int sg_cuda_blas_ready(sg_cuda_backend *cb);
void sg_cuda_blas_destroy(sg_cuda_backend *cb);
/* y [n][N] = x [n][K] w^T (+ bias) through tensor-core GEMMs on dequantized weight tiles. */
sg_status sg_cuda_gemm(sg_cuda_backend *cb, const sg_cuw *v, const float *x, int64_t n, float *y, int64_t N, const float *bias);
/* Up to SG_CUDA_SHARED_MAX weights over one x, x's tf32x3 split made once (SARAGOSSA_CUDA_SHARED_X):
 * *done 1 when taken, 0 when some weight takes another path (nothing run; matmul them one by one). */
#define SG_CUDA_SHARED_MAX 3
sg_status sg_cuda_gemm_shared_x(sg_cuda_backend *cb, const sg_cuw *v, int nw, const float *x, int64_t n, float *const *y, const int64_t *N,
				const float *const *bias, int *done);
/* The moe_matmul op for many tokens through per-expert GEMMs (quantized experts, 8-bit activations). */
sg_status sg_cuda_moe_gemm(sg_cuda_backend *cb, const sg_cuw *v, const float *x, int shared_x, const int32_t *ids, int64_t n, int64_t k,
			   int64_t E, float *y, int64_t N);
/* Prefill attention as GEMMs (scores, masked softmax, values) over the live KV rows. */
sg_status sg_cuda_attn_gemm(sg_cuda_backend *cb, const sg_cu_attn *a, const sg_btensor *pos);


/* A kernel launched without programmatic dependence that lets the next kernel start only when it
 * ends (cuda_attn.cu): a later kernel's loads before its pdl_wait then see every store before it. */
int sg_cu_fence(sg_custream s);

/* The linear-attention and Gemma 4 stage ops (cuda_hybrid.c), for the op table. */
sg_status sg_cuda_short_conv(sg_backend *be, const sg_btensor *x, const sg_btensor *w, sg_btensor *state, sg_btensor *out);
sg_status sg_cuda_gated_delta(sg_backend *be, const sg_btensor *qkv, const sg_btensor *a, const sg_btensor *b, const sg_btensor *a_log,
			      const sg_btensor *dt_bias, const sg_gdn_params *p, sg_btensor *state, sg_btensor *out);
sg_status sg_cuda_gated_rmsnorm(sg_backend *be, const sg_btensor *x, const sg_btensor *w, const sg_btensor *gate, float eps, sg_btensor *y);
sg_status sg_cuda_sigmoid_mul(sg_backend *be, const sg_btensor *x, const sg_btensor *gate, sg_btensor *out);
sg_status sg_cuda_gather_cols(sg_backend *be, const sg_btensor *x, const sg_btensor *idx, sg_btensor *out);
sg_status sg_cuda_glu_split(sg_backend *be, const sg_btensor *x, sg_act act, sg_btensor *out);
sg_status sg_cuda_moe_weight_scale(sg_backend *be, sg_btensor *weights, const sg_btensor *ids, const sg_btensor *scale);

#endif
