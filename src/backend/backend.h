/*
 * The backend op table: the small set of fused stages a model forward is written against.
 *
 * A backend (sg_backend) is a compute device with its own memory. The forward pass allocates its
 * activations, KV cache and scalars as backend tensors (sg_btensor), binds its weights in place
 * (CPU: the bytes of the mmap'd file; a GPU backend uploads, possibly repacked), and issues ops in
 * sequence. Ops are asynchronous in contract: none returns data to the host and none waits for
 * the device, so a GPU backend can record a whole forward once and replay it. The only host
 * round trips are the explicit transfers (sg_backend_write / sg_backend_read) and sg_backend_sync.
 *
 * Dynamic scalars live in backend tensors: the position of every token of a step is an I32
 * tensor `pos` [n], and the KV length an op needs is derived from it on the device (pos + 1), so
 * a recorded graph stays valid as the sequence grows. Shapes (n tokens, heads, dims) are static.
 * Positions come from sg_backend_write alone (no op writes a pos tensor), so a GPU kernel may read
 * them before it waits for the kernel ahead of it (the CUDA decode attention does).
 *
 * Every op returns an sg_status; an error means the caller passed inconsistent shapes or types
 * (a programming error, validated before any work) or a type the backend does not support
 * (ask sg_backend_supports first). Data-dependent problems (a token id past the vocabulary) cannot
 * be reported by a device without a round trip: such inputs are defined to produce zeros, and
 * callers validate host data before upload.
 *
 * Fallbacks: an entry of the op table may be NULL; the sg_backend_* wrappers below then compose
 * the stage from simpler ones (attn_prep = rope + rope + kv_store). A backend answers
 * supports(stage, type) for every (stage, weight type) pair it implements.
 *
 * A decode step, as the forward writes it (CPU shown; every call returns an sg_status to check):
 *
 *   sg_backend *be;  sg_cpu_backend_create(NULL, &be);
 *   sg_btensor wq = {.type = SG_TYPE_Q4_K, .ne = {dim, n_head * hd, 1, 1}, .data = mmap_ptr};
 *   be->ops->tensor_bind(be, &wq);                        // weights stay in the mmap
 *   int64_t ne_x[4] = {dim, 1, 1, 1};  be->ops->tensor_alloc(be, SG_TYPE_F32, ne_x, &x);
 *   be->ops->write(be, &tok, 0, &id, 4);  be->ops->write(be, &pos, 0, &p, 4);   // host -> device
 *   be->ops->embed(be, &tok_embd, &tok, &x);
 *   be->ops->rmsnorm(be, &x, &attn_norm, eps, 0, &xn);
 *   be->ops->matmul(be, &wq, &xn, NULL, &q);  ... k, v ...
 *   sg_backend_attn_prep(be, &q, &k, &v, &pos, &rope, &kc, &vc);
 *   be->ops->attention(be, &q, &kc, &vc, &pos, &attn, &o);
 *   ... matmul, add, rmsnorm, matmul x2, glu, matmul, add ... final norm, matmul, argmax ...
 *   be->ops->read(be, &next_id, 0, &id, 4);              // the only read back
 *
 * Tensor layout convention: ne[0] is the innermost (contiguous) dimension; rows are ne[0]
 * elements (or ne[0]/block blocks) and are stored contiguously, row r at data + r*row_bytes, over
 * all outer dimensions flattened (rows = ne[1]*ne[2]*ne[3]). Shapes below are written outermost
 * first, as in C: x [n][D] means ne[0] = D, ne[1] = n.
 */
#ifndef SG_BACKEND_BACKEND_H
#define SG_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "formats/model_desc.h" /* sg_act, sg_rope_scaling: shared with the model description */
#include "formats/qtypes.h"
#include "saragossa.h"

typedef struct sg_backend sg_backend; /* a compute device: cpu, cuda (defined below) */

/* Where the experts of a stacked expert weight w [E][N][K] live when they are not the rows of
 * w->data (the engine's expert slot cache, src/engine/expert_cache.h), in one of two forms:
 *   host memory (data set; sg_backend_caps.expert_table): expert e's N rows are at data[e], laid
 *     out exactly as in the stack (same row bytes), or data[e] is NULL when expert e is not
 *     resident;
 *   device memory (slot set; sg_backend_caps.expert_slots): expert e's rows, in the layout the
 *     backend's expert_upload wrote, are at base + slot[e] * stride, where slot is a device array
 *     of E slot numbers in [0, n_slots), -1 for an expert not resident.
 * A moe_matmul slot routed to an expert that is not resident is an error of the caller (the op
 * gives zeros). Owned by whoever set it; it changes between ops, never during one. Float and
 * GGUF-quantized types only (MLX affine weights carry companions the table does not name). */
typedef struct sg_expert_table {
	int64_t n_expert;        /* E */
	const void *const *data; /* [E] host pointers, or NULL */
	const int32_t *slot;     /* [E] device slot numbers, or NULL */
	const uint8_t *base;     /* device: slot 0's rows of this weight */
	size_t stride;           /* device: bytes from one slot to the next */
	int64_t n_slots;         /* device: slots behind base */
} sg_expert_table;

/* A tensor in a backend's memory. Plain value type: views are made by copying and adjusting. */
typedef struct sg_btensor {
	sg_type type;       /* element type: activations are F32 (or F16 for a KV cache), scalars I32 */
	int64_t ne[4];      /* ne[0] innermost; unused dimensions are 1 */
	size_t row_bytes;   /* bytes of one row of ne[0] elements */
	void *data;         /* device memory; CPU: host memory, possibly inside a read-only mmap */
	/* MLX affine only (type SG_TYPE_MLX_AFFINE): data is uint32 [rows][ne[0]*bits/32] */
	sg_mlx_q mlx;
	const void *scales; /* [rows][ne[0]/group] in mlx.sb_type */
	const void *biases; /* [rows][ne[0]/group] in mlx.sb_type */
	int owned;          /* 1 when the backend allocated data (sg_backend_tensor_free releases it) */
	/* Row order in data: 0 = the file's; tensor_bind may repack rows into an order of its own
	 * (> 0, backend-specific: the CUDA backend's planar K-quant rows). -1 before tensor_bind asks
	 * it to keep the file's order, for a tensor whose rows will be viewed as shorter rows;
	 * SG_LAYOUT_CONV1D before tensor_bind says the tensor is a conv1d weight read by conv1d
	 * only, which the backend may repack into a layout of its own; SG_LAYOUT_MATMUL_ONLY, a
	 * weight read by matmul only (an encoder's), likewise. */
	int layout;
	/* A stacked expert weight read through an indirection (NULL: the experts are the rows of
	 * data). moe_matmul / moe_glu read expert e from experts->data[e]; a backend that cannot
	 * (sg_backend_caps.expert_table 0) refuses the tensor with SG_ERR_UNSUPPORTED. */
	const sg_expert_table *experts;
} sg_btensor;

/* Rows of a tensor: the product of its outer dimensions. */
static inline int64_t sg_btensor_rows(const sg_btensor *t) { return t->ne[1] * t->ne[2] * t->ne[3]; }

/* Bytes of one row of MLX scales (or biases): ne[0]/group values of 2 bytes. */
static inline size_t sg_btensor_mlx_sb_row_bytes(const sg_btensor *t)
{
	return t->mlx.group > 0 ? (size_t)(t->ne[0] / t->mlx.group) * 2 : 0;
}

/* A view of rows [r0, r0 + n) of t as a 2-D tensor [n][ne[0]] (MLX scales/biases follow); the
 * view does not own the memory. The caller keeps r0 + n <= rows. */
static inline sg_btensor sg_btensor_rows_view(const sg_btensor *t, int64_t r0, int64_t n)
{
	sg_btensor v = *t;
	v.ne[1] = n;
	v.ne[2] = v.ne[3] = 1;
	v.data = (char *)t->data + (size_t)r0 * t->row_bytes;
	if (t->type == SG_TYPE_MLX_AFFINE) {
		size_t sb = sg_btensor_mlx_sb_row_bytes(t);
		v.scales = (const char *)t->scales + (size_t)r0 * sb;
		v.biases = (const char *)t->biases + (size_t)r0 * sb;
	}
	v.owned = 0;
	return v;
}

/* A plain F32 [rows][cols] view of a backend's memory (data need not be a tensor's own). */
static inline sg_btensor sg_btensor_f32_view(void *data, int64_t cols, int64_t rows)
{
	sg_btensor v;
	memset(&v, 0, sizeof(v));
	v.type = SG_TYPE_F32;
	v.data = data;
	v.ne[0] = cols;
	v.ne[1] = rows;
	v.ne[2] = v.ne[3] = 1;
	v.row_bytes = (size_t)cols * sizeof(float);
	return v;
}

typedef enum sg_stage {
	SG_STAGE_EMBED,      /* weights of any type -> f32 rows */
	SG_STAGE_MATMUL,     /* y = x W^T, weights of the given type */
	SG_STAGE_RMSNORM,
	SG_STAGE_LAYERNORM,
	SG_STAGE_ROPE,
	SG_STAGE_KV_STORE,   /* type = the cache type (F32 or F16) */
	SG_STAGE_ATTN_PREP,  /* fused rope(q) + rope(k) + kv_store */
	SG_STAGE_ATTENTION,  /* type = the cache type */
	SG_STAGE_GLU,
	SG_STAGE_ADD,
	SG_STAGE_SCALE,
	SG_STAGE_SOFTCAP,
	SG_STAGE_SOFTMAX,
	SG_STAGE_MOE_ROUTE,
	SG_STAGE_MOE_MATMUL, /* grouped expert matmul, weights of the given type */
	SG_STAGE_MOE_COMBINE,
	SG_STAGE_ARGMAX,
	SG_STAGE_LINEAR_ATTN, /* short conv, gated delta rule step/chunk, gated RMSNorm and helpers */
	SG_STAGE_COUNT
} sg_stage;



typedef struct sg_rope_params {
	int head_dim;          /* elements per head in x */
	int n_rot;             /* rotated dims (even, <= head_dim): partial rotary when < head_dim */
	int neox;              /* 1: pairs (i, i + n_rot/2) (GPT-NeoX / HF); 0: pairs (2i, 2i+1) */
	float theta;           /* base; per layer: the forward passes the layer's own value */
	/* proportional: the rotated pairs span the whole head ((i, i + head_dim/2) in neox layout)
	 * with frequency theta^(-2i/head_dim) for i < n_rot/2 and 0 (identity) past it */
	sg_rope_scaling scaling;
	float factor;          /* linear, yarn, llama3 */
	int orig_ctx;          /* yarn, llama3: original training context */
	float beta_fast, beta_slow; /* yarn ramp (defaults 32, 1 when 0) */
	float attn_factor;     /* yarn: cos/sin multiplier; 0 = 0.1*ln(factor) + 1 */
	float low_freq_factor, high_freq_factor; /* llama3 (defaults 1, 4 when 0) */
	/* dynamic (NTK): theta grows once max(pos) + 1 passes orig_ctx, with factor */
} sg_rope_params;

/* The inverse frequencies of the rotated pairs after scaling (linear, llama3, yarn, proportional;
 * dynamic NTK is the caller's, through `theta`), into inv_freq[0 .. head_dim/2); writes the
 * position multiplier (linear) and the cos/sin multiplier (yarn). Returns the number of pairs. */
int sg_rope_inv_freq(const sg_rope_params *p, double theta, float *inv_freq, float *pos_scale, float *mscale);

typedef struct sg_attn_params {
	float scale;   /* logit multiplier; 0 = 1/sqrt(head_dim) */
	float softcap; /* > 0: logits become softcap * tanh(logits / softcap) before softmax */
	int window;    /* > 0: sliding window, token at p sees kv positions (p - window, p]; with
			* causal and a window shorter than the cache, the cache is a ring: kv position
			* j lives in row j % ctx (the same row as before while positions stay below ctx),
			* so a sliding layer may keep only window + chunk rows */
	int causal;    /* 1: token at p sees kv positions <= p; 0: every position <= max(pos), or with
			* a window the positions less than window away on either side, |j - p| < window */
	int feeds_matmul; /* hint: the next op is a matmul_multi with x = out and x_fed set, so a
			   * backend may hand out over in the form its matmul takes (8-bit blocks) */
	const sg_btensor *bias; /* NULL, or F32 [n][H][ctx]: added to the scaled logit of query
					* token t, head h and kv row r (before the softcap); not with a
					* ring (causal sliding window). MPNet's relative position bias.
					* The CPU backend takes it; CUDA refuses it (SG_ERR_UNSUPPORTED) */
	int rows_live; /* hint: > 0, no query's position is past rows_live - 1 (the host knows its
			* positions), so a backend may size its grid by it outside a graph recording
			* (a recorded step must serve later positions); 0 = unknown */
} sg_attn_params;

typedef enum { SG_ROUTER_SOFTMAX, SG_ROUTER_SIGMOID } sg_router;

/* pool_rows' modes. */
typedef enum { SG_BPOOL_MEAN, SG_BPOOL_FIRST, SG_BPOOL_LAST, SG_BPOOL_MAX } sg_bpool;

/* Shapes of a gated delta net layer (Qwen3-Next / Qwen3.5 linear attention). */
typedef struct sg_gdn_params {
	int n_k_head, n_v_head; /* n_v_head is a multiple of n_k_head */
	int dk, dv;             /* key and value head dims */
	float l2_eps;           /* q/k L2 norm: x / sqrt(sum(x^2) + eps) (1e-6) */
} sg_gdn_params;

/* A fused projection stage (see the matmul_multi op): optionally RMS-normalises x, multiplies
 * it by up to three weight matrices sharing it (q, k, v; gate and up), and finishes with an
 * epilogue: plain stores, the gated activation of a GLU, or a residual add. */
#define SG_MATMUL_MULTI_MAX 3
typedef struct sg_matmul_multi {
	const sg_btensor *x;     /* [n][K] */
	const sg_btensor *norm;  /* [K] or NULL: x is first RMS-normalised (eps, norm_offset) into xn */
	float eps, norm_offset;
	sg_btensor *xn;          /* [n][K], written when norm is set (the projections read it) */
	int nw;                  /* 1 .. SG_MATMUL_MULTI_MAX */
	const sg_btensor *w[SG_MATMUL_MULTI_MAX];    /* [N_i][K], one weight type for all */
	const sg_btensor *bias[SG_MATMUL_MULTI_MAX]; /* [N_i] or NULL */
	sg_btensor *y[SG_MATMUL_MULTI_MAX];          /* [n][N_i] */
	int glu;                 /* nw = 2, N_0 = N_1: y[0] = act(x W0^T) * (x W1^T); y[1] is scratch */
	sg_act act;
	const sg_btensor *residual; /* nw = 1, [n][N_0] or NULL: out = residual + x W0^T, y[0] scratch */
	sg_btensor *out;            /* with residual; may alias it */
	int x_fed;                  /* hint: x is the out of the op just before, which had feeds_matmul */
	int feeds_moe;              /* hint: with norm, one token: the next ops are a moe_route of y[0] and a
	                             * moe_glu with x = xn, and nothing writes xn between, so a backend may
	                             * hand xn over to that moe_glu in the form its matmul takes */
} sg_matmul_multi;


#define SG_BACKEND_TOPC_MAX 2048 /* the most candidates top_candidates gives */

/* What a backend is and can do, as the layers above it need to know (session sizing, snapshots,
 * decode graphs, the server's memory guard, `doctor` and `bench`): asked through the caps op, so
 * nothing above src/backend/ tests which backend runs. */
typedef struct sg_backend_caps {
	int kv_f16;          /* 1: a session's KV cache defaults to F16 (SG_KV_AUTO), else F32 */
	int prefill_chunk;   /* tokens per prefill chunk a session takes by default */
	int device_memory;   /* 1: tensors live in the device's own memory (mem_info reports it) */
	int capture;         /* 1: a decode step can be recorded once and replayed (capture ops, on) */
	int capture_hybrid;  /* 1: also steps of hybrid layer stacks (recurrent state in place) */
	int expert_table;    /* 1: moe_matmul reads experts through sg_btensor.experts->data (host
	                      * memory slots: the expert slot cache runs on this backend) */
	int expert_slots;    /* 1: moe_matmul reads experts through experts->slot (device memory
	                      * slots written by expert_upload) */
	char device[160];    /* the device: "NVIDIA H200, 139.8 GiB, sm_90"; the CPU: its kernel set */
	char graphs_flag[48]; /* the flag that switches capture off ("" when none) */
} sg_backend_caps;

/* A recorded decode step (a CUDA graph), owned by its caller: several sessions may share one
 * backend, each with its own recording. */
typedef struct sg_backend_graph sg_backend_graph;

/* sg_btensor.layout before tensor_bind: an F32 conv1d weight ({Cin/groups, K, Cout}) that only
 * conv1d with groups 1 will read; a backend may repack it (the CPU backend packs panels of output
 * channels for its tile kernel, SARAGOSSA_CPU_CONV_PACKED) and sets layout to its own value, or
 * keeps the bytes as they are (layout 0). Its data must then not be read directly. */
#define SG_LAYOUT_CONV1D (-2)
/* sg_btensor.layout before tensor_bind: a float weight (F32, F16, BF16) that only the matmul op will
 * read, for an encoder: its products need not equal the one-token matvec's bits (no decode step is
 * compared with them), only be the same for a token alone or among others. A backend may repack it
 * (the CPU backend packs panels of rows for an outer-product tile, SARAGOSSA_CPU_GEMM_PANEL) and
 * set layout to its own value, or keep the bytes as they are (layout 0). Its data must then not be
 * read directly. */
#define SG_LAYOUT_MATMUL_ONLY (-3)

/* A 1-D convolution's geometry (conv1d). */
typedef struct sg_conv_params {
	int stride, dilation, groups;
	int pad; /* zeros before the input (a causal conv: (K-1)*dilation) */
} sg_conv_params;

/*
 * The op table. Every op takes the backend first; tensors are backend tensors of this backend.
 * In-place use is allowed where an op says so. Unless stated, F32 tensors only.
 */
typedef struct sg_backend_ops {
	const char *name; /* "cpu", "cuda" */
	void (*destroy)(sg_backend *be);
	/* 1 if the backend implements stage for weight/cache type `type` (F32 for type-less stages). */
	int (*supports)(sg_backend *be, sg_stage stage, sg_type type);

	/* --- memory --- */
	/* Allocates a zeroed tensor of a plain type (F32, F16, BF16, I32) and shape ne. */
	sg_status (*tensor_alloc)(sg_backend *be, sg_type type, const int64_t ne[4], sg_btensor *out);
	/* Binds host weight bytes (a GGUF/safetensors mmap) of type/shape ne: CPU keeps the pointer
	 * (the bytes must outlive the tensor), a GPU uploads. For MLX affine, t->mlx, scales and
	 * biases are set by the caller in *io and are bound likewise. */
	sg_status (*tensor_bind)(sg_backend *be, sg_btensor *io);
	void (*tensor_free)(sg_backend *be, sg_btensor *t);
	/* Device expert slots (caps.expert_slots; NULL elsewhere). expert_bytes: the bytes one expert
	 * of the stacked weight w [E][N][K] (type and shape; data may be NULL) takes in this
	 * backend's layout, 0 when its type cannot be read from slots. expert_upload: one expert's N
	 * rows of w in the file's bytes (host memory) into dst, device memory of that many bytes
	 * inside a tensor of tensor_alloc, in the layout tensor_bind gives w, so the expert reads
	 * as the bound stack's would; ordered with the ops, src is free again on return. */
	size_t (*expert_bytes)(sg_backend *be, const sg_btensor *w);
	sg_status (*expert_upload)(sg_backend *be, const sg_btensor *w, const void *src, void *dst);
	/* Host memory [p, p + n) made (pin 1) or no longer (pin 0) a fast source of transfers (page-
	 * locked, for DMA); SG_ERR_UNSUPPORTED when it cannot be (the memory then works, slower).
	 * NULL where transfers need nothing of the kind. */
	sg_status (*host_pin)(sg_backend *be, void *p, size_t n, int pin);
	/* Host transfers: the only ops that move data across the host boundary. Byte offsets. */
	sg_status (*write)(sg_backend *be, sg_btensor *t, size_t offset, const void *src, size_t n);
	sg_status (*read)(sg_backend *be, const sg_btensor *t, size_t offset, void *dst, size_t n);
	/* Waits until every queued op has finished (CPU: ops are synchronous, nothing to do). */
	sg_status (*sync)(sg_backend *be);
	/* The device memory free now and its total, in bytes (what the server's memory guard
	 * projects device allocations against). NULL for a backend whose tensors live in host
	 * memory (the CPU): the process footprint covers them. */
	sg_status (*mem_info)(sg_backend *be, uint64_t *free_bytes, uint64_t *total_bytes);

	/* --- ops --- */
	/* out[i] = row ids[i] of w, dequantized. w [V][D] any supported type; ids I32 [n];
	 * out [n][D]. An id outside [0, V) gives a zero row (CPU also returns SG_ERR_RANGE). */
	sg_status (*embed)(sg_backend *be, const sg_btensor *w, const sg_btensor *ids, sg_btensor *out);
	/* y[t][r] = sum_k x[t][k] * w[r][k] (+ bias[r]). w [N][K] any supported type; x [n][K];
	 * bias [N] or NULL; y [n][N]. One token (n = 1) takes the GEMV path, more take the blocked
	 * GEMM. Quantized weights may quantize x on the fly to 8-bit blocks of 32. */
	sg_status (*matmul)(sg_backend *be, const sg_btensor *w, const sg_btensor *x,
			    const sg_btensor *bias, sg_btensor *y);
	/* y = x / sqrt(mean(x^2) + eps) * (w + w_offset), per row of D = ne[0]. x, y [rows][D];
	 * w [D] or NULL (no weight). w_offset is 1 for Gemma (stores w, applies 1+w), else 0.
	 * Per-head norms (qk-norm) pass x viewed as [n*H][head_dim]. y may alias x. */
	sg_status (*rmsnorm)(sg_backend *be, const sg_btensor *x, const sg_btensor *w, float eps,
			     float w_offset, sg_btensor *y);
	/* y = (x - mean) / sqrt(var + eps) * w + b per row; w, b [D] or NULL. y may alias x. */
	sg_status (*layernorm)(sg_backend *be, const sg_btensor *x, const sg_btensor *w,
			       const sg_btensor *b, float eps, sg_btensor *y);
	/* In place: rotates the first n_rot dims of every head of x [n][H][head_dim] by the angle
	 * pos[t] * inv_freq(i) (after scaling). pos I32 [n]. */
	sg_status (*rope)(sg_backend *be, sg_btensor *x, const sg_btensor *pos, const sg_rope_params *p);
	/* Writes k, v [n][Hkv][hd] into kcache, vcache [ctx][Hkv][hd] (F32 or F16) at rows pos[t].
	 * A position outside [0, ctx) is skipped (CPU also returns SG_ERR_RANGE). */
	sg_status (*kv_store)(sg_backend *be, const sg_btensor *k, const sg_btensor *v,
			      const sg_btensor *pos, sg_btensor *kcache, sg_btensor *vcache);
	/* Fused: rope(q), rope(k), kv_store(k, v). May be NULL (composition). */
	sg_status (*attn_prep)(sg_backend *be, sg_btensor *q, sg_btensor *k, const sg_btensor *v,
			       const sg_btensor *pos, const sg_rope_params *rope, sg_btensor *kcache,
			       sg_btensor *vcache);
	/* out[t][h] = softmax_j(scale * q[t][h] . kcache[j][h/g]) weighted sum of vcache[j][h/g],
	 * over the kv positions j the params allow for pos[t] (g = H/Hkv, grouped-query attention).
	 * q [n][H][hd]; kcache [ctx][Hkv][hd]; vcache [ctx][Hkv][hdv]; pos I32 [n];
	 * out [n][H][hdv]. Online softmax; split over heads and kv length across threads. */
	sg_status (*attention)(sg_backend *be, const sg_btensor *q, const sg_btensor *kcache,
			       const sg_btensor *vcache, const sg_btensor *pos, const sg_attn_params *p,
			       sg_btensor *out);
	/* out = act(gate) * up, elementwise; act SiLU, GELU-tanh or GELU (erf); gate, up, out [n][F];
	 * out may alias either. */
	sg_status (*glu)(sg_backend *be, const sg_btensor *gate, const sg_btensor *up, sg_act act,
			 sg_btensor *out);
	/* out = a + b (residual), same shapes; out may alias a or b. */
	sg_status (*add)(sg_backend *be, const sg_btensor *a, const sg_btensor *b, sg_btensor *out);
	/* out = x * s; out may alias x. */
	sg_status (*scale)(sg_backend *be, const sg_btensor *x, float s, sg_btensor *out);
	/* out = cap * tanh(x / cap); out may alias x. */
	sg_status (*softcap)(sg_backend *be, const sg_btensor *x, float cap, sg_btensor *out);
	/* Row softmax of x [rows][D] into out; out may alias x. */
	sg_status (*softmax)(sg_backend *be, const sg_btensor *x, sg_btensor *out);
	/* Top-k expert routing. logits [n][E]; probabilities p = softmax(logits) or sigmoid(logits);
	 * ids I32 [n][k] = the k largest p (descending, ties to the lower id); weights [n][k] = their
	 * p, divided by their sum when norm_topk. */
	sg_status (*moe_route)(sg_backend *be, const sg_btensor *logits, sg_router router, int k,
			       int norm_topk, sg_btensor *ids, sg_btensor *weights);
	/* Grouped expert matmul: y[t][j] = w[ids[t][j]] x_t(j) for every token t and slot j.
	 * w [E][N][K] (ne[2] = E) any supported type; ids I32 [n][k]; x [n][K] (one input shared by
	 * a token's slots) or [n][k][K] (one per slot); y [n][k][N]. Each expert's weights are read
	 * once per call however many tokens chose it. An id outside [0, E) gives zeros. With
	 * w->experts set, expert e is read through the table (host pointers or device slots: the
	 * same bytes, the same kernel: the results equal the stacked tensor's bit for bit). */
	sg_status (*moe_matmul)(sg_backend *be, const sg_btensor *w, const sg_btensor *x,
				const sg_btensor *ids, sg_btensor *y);
	/* out[t] = sum_j weights[t][j] * y[t][j]; y [n][k][D]; weights [n][k]; out [n][D]. */
	sg_status (*moe_combine)(sg_backend *be, const sg_btensor *y, const sg_btensor *weights,
				 sg_btensor *out);
	/* ids[t] = index of the largest x[t][i] (the lowest such index on ties; NaN never wins).
	 * x [n][V]; ids I32 [n]. */
	sg_status (*argmax)(sg_backend *be, const sg_btensor *x, sg_btensor *ids);
	/* Sampling candidates of one row of logits x [1][V] (see sg_sampler_top_request): the k
	 * largest values, ranked with NaN as -inf, +inf as FLT_MAX and -0 as 0, ties to the lower
	 * id, in no particular order; and x at the ids of gather I32 [m] (NULL: m = 0; an id outside
	 * [0, V) gives NaN). out I32 [2k + m]: the k ids, the k values' float bits, the m gathered
	 * values' bits. 1 <= k <= min(V, SG_BACKEND_TOPC_MAX). May be NULL: the logits are then read
	 * back and the sampler ranks them itself (the CPU's, where they already are). */
	sg_status (*top_candidates)(sg_backend *be, const sg_btensor *x, int k, const sg_btensor *gather, sg_btensor *out);

	/* --- hybrid (gated delta net) and Gemma 4 stages; SG_STAGE_LINEAR_ATTN --- */
	/* Causal depthwise conv with SiLU over the sequence, one channel per column:
	 * out[t][c] = silu(sum_j w[c][j] * u[t + j][c]) with u = state rows then x rows, j < K.
	 * x, out [n][C]; w [C][K] F32 (ne[0] = K, or a flat [C*K] vector); state [K-1][C], the last
	 * K-1 inputs before x (zeros at the start), updated in place to the last K-1 of u.
	 * One token (decode) and a whole chunk (prefill) run the same arithmetic. out must not
	 * alias x. */
	sg_status (*short_conv)(sg_backend *be, const sg_btensor *x, const sg_btensor *w, sg_btensor *state,
				sg_btensor *out);
	/* Gated delta rule over n tokens, see sg_gdn_params. qkv [n][2*Hk*dk + Hv*dv] (q heads, k
	 * heads, v heads, after the short conv); a, b [n][Hv]; a_log, dt_bias [Hv]; state
	 * [Hv][dk][dv] in/out; out [n][Hv][dv]. Per token and value head h (key head h/(Hv/Hk)):
	 *   q, k = l2norm(q), l2norm(k); q /= sqrt(dk); g = -exp(a_log) softplus(a + dt_bias);
	 *   S = exp(g) S; S += k (beta (v - S^T k))^T with beta = sigmoid(b); out = S^T q.
	 * Prefill may use an equivalent chunked form; the result equals the token-by-token
	 * recurrence to f32 rounding. */
	sg_status (*gated_delta)(sg_backend *be, const sg_btensor *qkv, const sg_btensor *a, const sg_btensor *b,
				 const sg_btensor *a_log, const sg_btensor *dt_bias, const sg_gdn_params *p,
				 sg_btensor *state, sg_btensor *out);
	/* y = x / sqrt(mean(x^2) + eps) * w * silu(gate) per row; x, gate, y [rows][d]; w [d].
	 * y may alias x. */
	sg_status (*gated_rmsnorm)(sg_backend *be, const sg_btensor *x, const sg_btensor *w, const sg_btensor *gate,
				   float eps, sg_btensor *y);
	/* out = x * sigmoid(gate); x, out [n][W]; gate [n][W] or [n][1] (one gate per row, the
	 * shared expert's). out may alias x. */
	sg_status (*sigmoid_mul)(sg_backend *be, const sg_btensor *x, const sg_btensor *gate, sg_btensor *out);
	/* out[t][j] = x[t][idx[j]]: splits interleaved projections (q and its gate, fused qkvz).
	 * x [n][W]; idx I32 [W2] with values in [0, W); out [n][W2]. */
	sg_status (*gather_cols)(sg_backend *be, const sg_btensor *x, const sg_btensor *idx, sg_btensor *out);
	/* out = act(x[:, :F]) * x[:, F:] per row (fused gate_up projections). x [rows][2F];
	 * out [rows][F]. */
	sg_status (*glu_split)(sg_backend *be, const sg_btensor *x, sg_act act, sg_btensor *out);
	/* weights[t][j] *= scale[ids[t][j]] (Gemma 4 per-expert scale). weights [n][k]; ids I32
	 * [n][k]; scale [E]. An id outside [0, E) leaves the weight at 0. */
	sg_status (*moe_weight_scale)(sg_backend *be, sg_btensor *weights, const sg_btensor *ids,
				      const sg_btensor *scale);

	/* --- audio codec decoders (Qwen3-TTS); NULL where a backend has none --- */
	/* y[t][co] = bias[co] + sum over k < K and the input channels ci of co's group g:
	 *   w[co][k][ci] * x[t*stride + k*dilation - pad][g*Cin/groups + ci]   (zeros outside x).
	 * x [T][Cin]; w F32 [Cout][K][Cin/groups] (ne = {Cin/groups, K, Cout}: Conv1d's weight
	 * [Cout][Cin/groups][K] with its last two axes swapped once at load, so a row of w is one
	 * output's taps side by side; bound with SG_LAYOUT_CONV1D, groups must be 1); bias [Cout] or
	 * NULL; y [Tout][Cout] (Tout = y->ne[1]). y must not alias x. */
	sg_status (*conv1d)(sg_backend *be, const sg_btensor *x, const sg_btensor *w, const sg_btensor *bias,
			    const sg_conv_params *p, sg_btensor *y);
	/* Transposed, as ConvTranspose1d with kernel K <= M*stride: output row t = j*stride + p is
	 *   bias + sum over m < M, ci of w[p][co][m][ci] * x[j - m][ci]   (zeros outside x),
	 * where w F32 [stride][Cout][M][Cin] (ne = {Cin, M, Cout, stride}) holds ConvTranspose1d's
	 * tap k = p + m*stride of its [Cin][Cout][K] weight (zero for k >= K), laid out at load. x
	 * [T][Cin]; bias [Cout] or NULL; y [Tout][Cout] with Tout <= (T - 1 + M)*stride: later rows
	 * are trimmed (a causal decoder keeps T*stride). y must not alias x. */
	sg_status (*conv_transpose1d)(sg_backend *be, const sg_btensor *x, const sg_btensor *w,
				      const sg_btensor *bias, int stride, sg_btensor *y);
	/* SnakeBeta per channel c: y = x + sin(x a[c])^2 / (b[c] + 1e-9). x, y [T][C]; a, b [C]
	 * (the model's exp(alpha), exp(beta)). y may alias x. */
	sg_status (*snake)(sg_backend *be, const sg_btensor *x, const sg_btensor *a, const sg_btensor *b,
			   sg_btensor *y);
	/* y = x * (1 + erf(x / sqrt 2)) / 2 elementwise (exact GELU). y may alias x. */
	sg_status (*gelu)(sg_backend *be, const sg_btensor *x, sg_btensor *y);
	/* WaveNet's gate (the VITS flow): y[t][j] = tanh(x[t][j]) * sigmoid(x[t][F + j]). x [T][2F];
	 * y [T][F], not aliasing x. NULL where a backend has none. */
	sg_status (*tanh_gate)(sg_backend *be, const sg_btensor *x, sg_btensor *y);

	/* --- fused stages (may be NULL: sg_backend_matmul_multi composes them) --- */
	/* The projections of sg_matmul_multi in as few launches as the backend can: a GPU runs one
	 * token's norm, activation quantization and every matrix of the stage as two kernels. The
	 * result equals the composition (rmsnorm, matmul per weight, glu or add) up to the summation
	 * order of the dot products. */
	sg_status (*matmul_multi)(sg_backend *be, const sg_matmul_multi *p);
	/* attn_prep with the per-head RMS norms of q and k first (qk-norm models): q_norm, k_norm
	 * [head_dim] (eps, w_offset as rmsnorm). May be NULL; the forward then issues the norms,
	 * the ropes and kv_store one by one. */
	sg_status (*attn_prep_norm)(sg_backend *be, sg_btensor *q, sg_btensor *k, const sg_btensor *v,
				    const sg_btensor *pos, const sg_rope_params *rope, const sg_btensor *q_norm,
				    const sg_btensor *k_norm, float eps, float w_offset, sg_btensor *kcache,
				    sg_btensor *vcache);
	/* attn_prep (q_norm, k_norm: the per-head norms of attn_prep_norm, or NULL for none) then
	 * attention(q, kcache, vcache, pos, ap, out), as one stage: a GPU's one-token attention
	 * normalises and rotates its query heads and the step's K row itself (one kernel fewer). The
	 * caches and out equal the composition's bit for bit; q and k are scratch afterwards (the
	 * composition leaves them rotated, the fused stage raw). May be NULL. */
	sg_status (*attention_prep)(sg_backend *be, sg_btensor *q, sg_btensor *k, const sg_btensor *v, const sg_btensor *pos,
				    const sg_rope_params *rope, const sg_btensor *q_norm, const sg_btensor *k_norm, float eps,
				    float w_offset, sg_btensor *kcache, sg_btensor *vcache, const sg_attn_params *ap,
				    sg_btensor *out);
	/* g = act(moe_matmul(w_gate, x, ids)) * moe_matmul(w_up, x, ids): the gate and up expert
	 * matmuls of an MoE layer with their GLU (u [n][k][F] may be used as scratch). Equals the
	 * composition (sg_backend_moe_glu_compose) up to the summation order. May be NULL. */
	sg_status (*moe_glu)(sg_backend *be, const sg_btensor *w_gate, const sg_btensor *w_up,
			     const sg_btensor *x, const sg_btensor *ids, sg_act act, sg_btensor *g,
			     sg_btensor *u);
	/* out = residual + moe_combine(y, weights) (the MoE layer's output added to the stream);
	 * out may alias residual; tmp [n][D] may be used as scratch. Bit-identical to the
	 * composition (moe_combine into tmp, add). May be NULL. */
	sg_status (*moe_combine_add)(sg_backend *be, const sg_btensor *y, const sg_btensor *weights,
				     const sg_btensor *residual, sg_btensor *out, sg_btensor *tmp);
	/* n bytes of src from src_off to dst at dst_off, both tensors of this backend, ordered with
	 * the ops around it (device to device on a GPU: no host round trip). The ranges must lie
	 * inside the tensors (SG_ERR_RANGE otherwise) and must not overlap. May be NULL: session
	 * snapshots then go through host memory. */
	sg_status (*copy)(sg_backend *be, const sg_btensor *src, size_t src_off, sg_btensor *dst,
			  size_t dst_off, size_t n);

	/* Attention of n_seq independent sequences packed one after another (an encoder's batch):
	 * token t of sequence s, offs[s] <= t < offs[s + 1], attends without a causal mask to the k
	 * and v rows of its own sequence only. q [n][H][hd], k [n][Hkv][hd], v [n][Hkv][hdv], out
	 * [n][H][hdv], F32; offs I32 [n_seq + 1] on the backend (offs[0] = 0, offs[n_seq] = n);
	 * p->scale as attention's; p->bias NULL or each sequence's [L][H][L] additive logits one
	 * block after another (MPNet); no softcap, window or causal mask. May be NULL: the caller then
	 * runs attention once per sequence. */
	sg_status (*attention_packed)(sg_backend *be, const sg_btensor *q, const sg_btensor *k, const sg_btensor *v,
				      const sg_btensor *offs, int n_seq, const sg_attn_params *p, sg_btensor *out);

	/* Each of n_seq packed sequences' rows pooled into one (an encoder's sentence embeddings):
	 * out[s] = the mean (SG_BPOOL_MEAN), first, last or element-wise largest of rows offs[s] ..
	 * offs[s + 1] - 1 of x [n][D]; x and out [n_seq][D] F32, offs I32 [n_seq + 1] on the backend.
	 * The mean sums each column in double in row order and divides once, then rounds to float
	 * (sg_pool's arithmetic, so the same bits). May be NULL: the caller reads the rows back. */
	sg_status (*pool_rows)(sg_backend *be, const sg_btensor *x, const sg_btensor *offs, int n_seq, int mode, sg_btensor *out);

	/* --- exact verification (may be NULL) --- */
	/* on = 1: until called with 0, every many-token op gives each token the bits a one-token
	 * step gives it (a speculative verify step then scores its k + 1 tokens exactly as k + 1
	 * decode steps would). The CPU runs the one-token matmul kernel per token (weights still read
	 * once per tile of tokens), one-token attention per token and the token-by-token delta rule.
	 * NULL: the backend cannot promise it, and speculative decoding stays off there. */
	void (*match_decode)(sg_backend *be, int on);

	/* --- what it is (required) --- */
	void (*caps)(sg_backend *be, sg_backend_caps *out);

	/* --- capture and replay (NULL where caps.capture is never set) --- */
	/* Starts recording the ops issued on be; nothing runs until a replay. Writes and reads are
	 * not allowed while recording, and no op may grow the backend's scratch (run the step once
	 * unrecorded first). */
	sg_status (*capture_begin)(sg_backend *be);
	/* Ends the recording into a new graph *out (graph_free releases it). */
	sg_status (*capture_end)(sg_backend *be, sg_backend_graph **out);
	/* Ends a recording and throws it away (an op failed while recording); no-op when idle. */
	void (*capture_abort)(sg_backend *be);
	/* 1 if g was recorded before the backend's scratch moved: replaying it would read freed
	 * memory, so the caller records again. */
	int (*graph_stale)(sg_backend *be, const sg_backend_graph *g);
	/* Enqueues one replay of g; does not wait. Fails on a stale graph. */
	sg_status (*graph_replay)(sg_backend *be, const sg_backend_graph *g);
	void (*graph_free)(sg_backend *be, sg_backend_graph *g);

	/* --- measurement (may be NULL) --- */
	/* The copy bandwidth of the device's memory in GB/s (1e9 bytes/s, read + written) with
	 * `bytes`-sized copies: the roofline `bench` holds a decode step to. *what names the
	 * measurement ("cudaMemcpy D2D"). */
	sg_status (*copy_bandwidth)(sg_backend *be, size_t bytes, double *gbps, const char **what);
} sg_backend_ops;

/* The backend object. A backend implementation embeds it first in its own struct. */
struct sg_backend {
	const sg_backend_ops *ops;
};

/* --- CPU backend --- */
typedef struct sg_cpu_params {
	int n_threads; /* caller included; 0 = SARAGOSSA_THREADS, else one per core */
	const char *simd; /* NULL = the SARAGOSSA_SIMD flag: auto, avx512, avx2, neon or scalar */
} sg_cpu_params;

sg_cpu_params sg_cpu_default_params(void);
/* Creates the CPU backend: starts the worker threads and picks the kernel set. A SIMD level the
 * CPU lacks is an SG_ERR_UNSUPPORTED error. *out is freed with sg_backend_free. */
sg_status sg_cpu_backend_create(const sg_cpu_params *p, sg_backend **out);
/* Name of the kernel set a CPU backend runs: "avx512", "avx2", "neon" or "scalar". */
const char *sg_cpu_backend_simd(const sg_backend *be);

/* --- opening a backend by name (registry.c: the one place that knows which backends exist) --- */
typedef struct sg_backend_params {
	int n_threads; /* CPU: threads, caller included; 0 = SARAGOSSA_THREADS, else one per core */
	int device;    /* an accelerator's device ordinal */
} sg_backend_params;

sg_backend_params sg_backend_default_params(void);
/* Opens backend `name` ("cpu", "cuda"): SG_ERR_UNSUPPORTED naming what this build runs when
 * it has no backend of that name, or the device's reason when it cannot start. *out is freed
 * with sg_backend_free. */
sg_status sg_backend_open(const char *name, const sg_backend_params *p, sg_backend **out);
/* The backends this build runs, for messages: "cpu, cuda". */
const char *sg_backend_names(void);
/* 1 if saragossa has a backend called name ("cpu", "cuda"), built into this build or not. */
int sg_backend_known(const char *name);
/* The accelerator backend "auto" tries first: its name when this build has one and a device of
 * it is usable now, else NULL (the CPU). */
const char *sg_backend_auto_accel(void);
/* The accelerator backends saragossa has, built in or not: i = 0, 1, ... until NULL ("cuda"). */
const char *sg_backend_accel_name(int i);
/* The devices of accelerator backend `name` usable now (0 when none) with one line each into
 * buf ("GPU 0: NVIDIA H200, 139.8 GiB, sm_90, driver 13.0", or why none); -1 when this build
 * lacks that backend, buf then says how to get it ("not built (make CUDA=1)"). */
int sg_backend_devices(const char *name, char *buf, size_t n);
/* Free and total memory of device `device` of accelerator backend `name`, without opening a
 * backend: SG_ERR_UNSUPPORTED for the CPU or a backend this build lacks. */
sg_status sg_backend_device_memory(const char *name, int device, uint64_t *free_bytes, uint64_t *total_bytes);

/* --- generic helpers over the table --- */
static inline void sg_backend_caps_get(sg_backend *be, sg_backend_caps *out)
{
	be->ops->caps(be, out);
}

/* Frees a recorded graph (NULL: nothing). */
static inline void sg_backend_graph_free(sg_backend *be, sg_backend_graph *g)
{
	if (g && be->ops->graph_free) be->ops->graph_free(be, g);
}

static inline void sg_backend_free(sg_backend *be)
{
	if (be) be->ops->destroy(be);
}

static inline int sg_backend_supports(sg_backend *be, sg_stage s, sg_type t)
{
	return be->ops->supports(be, s, t);
}

/* The stage of p: the backend's fused op when it has one, else rmsnorm, matmul per weight and
 * glu or add (sg_backend_matmul_multi_compose). */
sg_status sg_backend_matmul_multi(sg_backend *be, const sg_matmul_multi *p);
/* The composition, for backends whose fused op declines a case (many tokens, mixed types). */
sg_status sg_backend_matmul_multi_compose(sg_backend *be, const sg_matmul_multi *p);

/* The arguments of conv1d / conv_transpose1d as the ops' comments state them (F32, y not x, a bias
 * per output, the geometry), for every backend that has the ops; errors name the backend (conv.c). */
sg_status sg_conv1d_check(const sg_backend *be, const sg_btensor *x, const sg_btensor *w, const sg_btensor *bias,
			  const sg_conv_params *p, const sg_btensor *y);
sg_status sg_conv_transpose1d_check(const sg_backend *be, const sg_btensor *x, const sg_btensor *w, const sg_btensor *bias,
				    int stride, const sg_btensor *y);

/* The gate and up expert matmuls with the GLU: the backend's fused op when it has one, else
 * moe_matmul twice and glu. */
sg_status sg_backend_moe_glu(sg_backend *be, const sg_btensor *w_gate, const sg_btensor *w_up, const sg_btensor *x,
			     const sg_btensor *ids, sg_act act, sg_btensor *g, sg_btensor *u);
sg_status sg_backend_moe_glu_compose(sg_backend *be, const sg_btensor *w_gate, const sg_btensor *w_up, const sg_btensor *x,
				     const sg_btensor *ids, sg_act act, sg_btensor *g, sg_btensor *u);

/* residual + the weighted sum of the experts' outputs: the backend's fused op, else moe_combine
 * into tmp and add. */
sg_status sg_backend_moe_combine_add(sg_backend *be, const sg_btensor *y, const sg_btensor *weights, const sg_btensor *residual,
				     sg_btensor *out, sg_btensor *tmp);
sg_status sg_backend_moe_combine_add_compose(sg_backend *be, const sg_btensor *y, const sg_btensor *weights, const sg_btensor *residual,
					     sg_btensor *out, sg_btensor *tmp);

/* rope(q), rope(k), kv_store(k, v): the backend's fused stage when it has one. */
static inline sg_status sg_backend_attn_prep(sg_backend *be, sg_btensor *q, sg_btensor *k,
					     const sg_btensor *v, const sg_btensor *pos,
					     const sg_rope_params *rope, sg_btensor *kcache,
					     sg_btensor *vcache)
{
	if (be->ops->attn_prep) return be->ops->attn_prep(be, q, k, v, pos, rope, kcache, vcache);
	sg_status st = be->ops->rope(be, q, pos, rope);
	if (st == SG_OK) st = be->ops->rope(be, k, pos, rope);
	if (st == SG_OK) st = be->ops->kv_store(be, k, v, pos, kcache, vcache);
	return st;
}

#endif
