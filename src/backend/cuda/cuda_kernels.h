/*
 * The seam between the CUDA backend's host glue (cuda_backend.c, plain C) and its kernels
 * (cuda_*.cu): parameter structs of plain C types and launchers that enqueue on a stream and
 * return the launch status (0 = cudaSuccess). No launcher synchronises.
 */
#ifndef SG_BACKEND_CUDA_KERNELS_H
#define SG_BACKEND_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* GPU weight formats. The legacy 32-blocks are repacked at bind (see cuda_backend.c); Q5_K keeps
 * the GGUF bytes (its blocks are multiples of 16 bytes); Q4_K and Q6_K rows, and MLX 4-bit rows
 * of a multiple of 256 elements, are planar (each field of every block as a run, the codes split
 * into 16-byte planes: sg_cuda_repack_kq). */
typedef enum sg_cukt {
	SG_CUKT_F32, SG_CUKT_F16, SG_CUKT_BF16,
	SG_CUKT_Q8_0, SG_CUKT_Q4_0, SG_CUKT_Q4_1, SG_CUKT_Q5_0, SG_CUKT_Q5_1,
	SG_CUKT_Q4_K, SG_CUKT_Q5_K, SG_CUKT_Q6_K,
	SG_CUKT_MLX4, SG_CUKT_MLX6, SG_CUKT_MLX8,
	SG_CUKT_COUNT,
	SG_CUKT_NONE = -1
} sg_cukt;

/* A weight matrix on the device: rows of K elements, row r at data + r * row_bytes; for a stack
 * of experts, expert e at data + e * expert_bytes (scales: + e * expert_sb_bytes). */
typedef struct sg_cuw {
	int kt;                 /* sg_cukt */
	int64_t K;              /* elements per row */
	const uint8_t *data;
	size_t row_bytes;
	int planar;             /* rows in the planar order (Q4_K, Q6_K always; MLX 4-bit when bound so) */
	int matmul_only;        /* bound as SG_LAYOUT_MATMUL_ONLY (an encoder's weight: read by matmul alone) */
	/* MLX affine */
	int group, sb_bf16;
	int gsh;                /* log2(group / 32) when group is a power of two >= 32, else -1 */
	const uint8_t *scales, *biases; /* [rows][K/group] 16-bit */
	size_t sb_row_bytes;
	size_t expert_bytes, expert_sb_bytes;
} sg_cuw;

typedef struct CUstream_st *sg_custream;

/* --- GEMV (cuda_gemv.cu) --- */

/* Elements one GEMV lane decodes per step (8 for plain types, else 32). */
int sg_cu_unit_elems(int kt);

/* 1 if kt has the 8-bit activation kernels (quantized types but MLX 6-bit). */
int sg_cu_has_q8(int kt);
/* Scratch bytes of nx activation rows of K quantized to 8 bits (codes, scales, half sums). */
size_t sg_cu_q8_bytes(int64_t nx, int64_t K);
/* The three arrays of one token's 8-bit activations in a q8 buffer: codes [K], block scales
 * [K/32], scaled half-block sums [K/16]. */
void sg_cu_q8_split(void *q8, int64_t K, int8_t **xq, float **dx, float **sx);

/* y[t][r] = w[r] . x[t] (+ bias[r]) for t < n, r < N; x [n][K], y [n][N]. Fused dequantize-GEMV
 * with 16-byte weight loads; n tokens share each decoded weight. With q8_scratch (sg_cu_q8_bytes(n,
 * K) bytes) and a type that has them, 8-bit activations: one token of a block-per-lane type takes
 * the fused stage kernel (the policy's gemv.block_per_lane), else 2 rows a 128-thread block split
 * over its lanes. Without, f32 activations: 2 rows a warp for quantized types, 1 for plain ones. */
int sg_cu_gemv(const sg_cuw *w, const float *x, int64_t n, float *y, int64_t N, const float *bias, void *q8_scratch, sg_custream s);
/* The same for n tokens, each with the bits sg_cu_gemv gives it alone (exact verification): the
 * one-token kernel over the n tokens. q8_scratch: n * sg_cu_q8_bytes(1, K) bytes. */
int sg_cu_gemv_exact(const sg_cuw *w, const float *x, int64_t n, float *y, int64_t N, const float *bias, void *q8_scratch, sg_custream s);

/* The fused decode GEMV (one token): up to three matrices of one format and K share the input
 * (concatenated in row space: one launch), with an epilogue. */
#define SG_CU_MULTI_MAX 3
enum { SG_CU_EPI_STORE, SG_CU_EPI_GLU, SG_CU_EPI_ADD };
typedef struct sg_cu_multi {
	int nw, epi, act;                     /* act: SG_CU_EW_SILU, _GELU or _GELU_ERF (GLU) */
	sg_cuw w[SG_CU_MULTI_MAX];
	int64_t N[SG_CU_MULTI_MAX];           /* rows of each */
	const float *bias[SG_CU_MULTI_MAX];   /* [N_i] or NULL */
	float *y[SG_CU_MULTI_MAX];            /* STORE: y_i = W_i x; GLU (nw 2, N_0 = N_1):
					       * y_0 = act(W_0 x) * W_1 x; ADD (nw 1): y_0 = res + W_0 x */
	const float *res;                     /* ADD; may alias y_0 */
	int xstage;                           /* set by sg_cu_gemv_multi: the policy's gemv.xstage */
	int pre;                              /* set by sg_cu_gemv_multi: gemv.pre, for launches of at most 4 MB */
	int ntok;                             /* tokens (0 or 1: one): x, xn [ntok][K], y_i [ntok][N_i],
					       * res [ntok][N_0], each token with a one-token call's bits */
	size_t q8b;                           /* set by sg_cu_gemv_multi: bytes of a token's 8-bit activations */
	int tg;                               /* set by sg_cu_gemv_multi: tokens a block (mvt_kernel) */
} sg_cu_multi;
/* 1 if kt has the fused kernel: plain types on f32 activations, the others on 8-bit ones. */
int sg_cu_multi_ok(int kt);
/* Runs m on one token x [K]: when norm, x is first RMS-normalised (w may be NULL, eps, off) into
 * xn; quantized formats quantize the (normalised) x to 8 bits in the same kernel. The kernel is
 * the policy's (cuda_policy.h; gemv_choose). q8_scratch: sg_cu_q8_bytes(1, K) bytes for quantized
 * kt; x NULL (quantized kt, no norm): q8_scratch already holds x quantized (see sg_cu_q8_split).
 * m->ntok > 1: that many tokens in one launch, each given the bits the one-token call gives it
 * (the kernel the one-token call picks, its blocks repeated per token, a row block's tokens
 * neighbours in the grid so the weights come from HBM once); q8_scratch then holds ntok
 * sg_cu_q8_bytes(1, K) regions (x NULL: all of them already hold the tokens' x). */
int sg_cu_gemv_multi(const sg_cu_multi *m, const float *x, int norm, const float *norm_w, float eps,
		     float off, float *xn, void *q8_scratch, sg_custream s);

long sg_cu_gemv_persist_launches(void); /* persistent-grid GEMV launches so far (the tests' count) */
int sg_cu_sm_count(void); /* the current device's SMs (0 if none) */
int sg_cu_sms(void);      /* the same, asked once, 132 if unknown (grid sizing) */
/* 1 if the block-per-lane kernel takes m's matrices of two kinds in one launch: Q4_K and Q6_K
 * matrices of one fused store stage (q, k, v of a Q4_K_M file) where each block's rows are of one
 * kind, the policy's gemv.mixed on */
int sg_cu_gemv_mixed_ok(const sg_cu_multi *m);
/* 1 if w has the block-per-lane kernel (Q4_K, Q6_K, MLX 4-bit of group 32/64/128 with rows of a
 * multiple of 256) */
int sg_cu_sb_ok(const sg_cuw *w);

/* --- MoE (cuda_moe.cu) --- */

/* Top-k routing of n rows of E logits (softmax or sigmoid, the k picks normalised when norm). */
int sg_cu_moe_route(const float *logits, int64_t n, int64_t E, int sigmoid, int k, int norm,
		    int32_t *ids, float *w, sg_custream s);
/* Rows of a quantized type from the file's blocks into the device's order, on the device: each
 * block's fields (file offset off[i], bytes[i], planes[i]: split into 16-byte pieces over planes)
 * laid out as runs over the row's nb blocks, as the host's repack does (cuda_repack.c). */
typedef struct sg_cu_fields {
	int nf, block_bytes, off[4], bytes[4], planes[4];
} sg_cu_fields;
int sg_cu_repack_rows(const uint8_t *src, size_t src_rb, int64_t rows, int64_t nb, sg_cu_fields f, uint8_t *dst, size_t dst_rb,
		      sg_custream s);

/* Expert ids renumbered to slots: out[i] = slot[ids[i]] for ids in [0, E), else -1 (the expert
 * slot cache on the device: the expert kernels then read slot out[i] of the pool). */
int sg_cu_moe_slot_ids(const int32_t *ids, int64_t n, const int32_t *slot, int64_t E, int32_t *out, sg_custream s);
/* out[t] = res[t] + sum_j w[t][j] y[t][j] (res NULL: the sum); out may alias res. */
int sg_cu_moe_combine(const float *y, const float *w, int64_t n, int64_t k, int64_t D, const float *res, float *out,
		      sg_custream s);
/* The one-token gate and up expert matmuls with the GLU in one launch (after one activation
 * rounding): g[j][r] = act(wg[ids[j]] x . ) * (wu[ids[j]] x .) for the k slots, bit-identical to
 * two one-token moe_matmul calls and the glu kernel. _ok: the pair has that kernel. act:
 * SG_CU_EW_SILU, _GELU or _GELU_ERF. x NULL: q8_scratch already holds x rounded (sg_cu_q8_split). */
int sg_cu_moe_glu_ok(const sg_cuw *wg, const sg_cuw *wu);
int sg_cu_moe_glu(const sg_cuw *wg, const sg_cuw *wu, const float *x, const int32_t *ids, int64_t k, int64_t E, int act, float *g,
		  int64_t N, void *q8_scratch, int *ids_done, sg_custream s);
/* The policy's moe.ids_early (SARAGOSSA_CUDA_MOE_IDS_EARLY): sg_cu_moe_glu's planar kernel lets the
 * launch after it start only once its wait is over (*ids_done = 1 then: every kernel launched
 * after the next one starts after the routing kernel ended), and sg_cu_moe_matmul with ids_ready
 * (the ids those of such a moe_glu, not rewritten since) reads the ids and sends the weights'
 * loads before its wait. */

/* (cuda_gemv.cu) */
/* One row x [K] RMS-normalised into xn (bit-identical to sg_cu_rmsnorm) and rounded to 8-bit
 * blocks into q8 (sg_cu_q8_bytes(1, K), laid out as sg_cu_q8_split says) in one kernel; K a
 * multiple of 32, at least 1024. */
int sg_cu_norm_quant(const float *x, const float *w, float eps, float off, int64_t K, float *xn, void *q8,
                     sg_custream s);

/* --- conversions and the embedding gather (cuda_dequant.cu) --- */

/* out = x with every block of 32 rounded as the 8-bit activation quantizer rounds it (n % 32 = 0). */
int sg_cu_requant(const float *x, int64_t n, float *out, sg_custream s);

/* Dequantizes rows [r0, r0 + nr) of w into bf16, or f16 when f16 (saturated at +-65504), [nr][K]
 * (the tiles of the tensor-core GEMM). */
int sg_cu_dequant_16(const sg_cuw *w, int64_t r0, int64_t nr, int f16, uint16_t *out, sg_custream s);
/* The same for ng groups of rper rows: group i is rows [groups[i] * rper, + rper) (groups a device
 * array; an id outside [0, V) gives zero rows), into out [ng * rper][K]: the used experts of an
 * MoE matmul in one launch. */
int sg_cu_dequant_16_groups(const sg_cuw *w, const int32_t *groups, int64_t ng, int64_t rper, int64_t V, int f16, uint16_t *out,
			    sg_custream s);
/* Dequantizes rows [r0, r0 + nr) of w into f32 [nr][K] (the tiles of the f32 GEMM). */
int sg_cu_dequant_f32(const sg_cuw *w, int64_t r0, int64_t nr, float *out, sg_custream s);
/* out = bf16(x), or f16(x) when f16, n values. */
int sg_cu_f32_to_16(const float *x, int64_t n, int f16, uint16_t *out, sg_custream s);
/* x = hi + lo with hi exactly a TF32 value (10 mantissa bits): three TF32 tensor-core products
 * (hi*hi + hi*lo + lo*hi) then carry about FP32's accuracy. hi may alias x. */
int sg_cu_split_tf32(const float *x, int64_t n, float *hi, float *lo, sg_custream s);
/* The operands of tf32x3 as one TF32 GEMM of depth K3 (at least 3 * Kp + 2, Kp = K rounded up to 4):
 * each of x's rows [rows][ld] becomes out [rows][K3] holding its TF32 split three times, so that
 * a weight row (wside: hi, hi, lo) dotted with an activation row (hi, lo, hi) sums hi*hi + hi*lo +
 * lo*hi, then two tail values: a weight row's bias[r] as hi and lo against an activation row's two
 * ones (ones), so the bias is added inside the product; zeros without bias or ones, and after. */
int sg_cu_split3_tf32(const float *x, int64_t rows, int64_t K, int64_t ld, int wside, const float *bias, int ones, int64_t K3,
		      float *out, sg_custream s);
/* Rows x [n][K] rounded to 8-bit blocks (as sg_cu_requant), times a power of two per row that
 * keeps them in f16's range, into f16 out [n][K]; scale[t] = the inverse power (K % 32 = 0). */
int sg_cu_q8_rows_f16(const float *x, int64_t n, int64_t K, uint16_t *out, float *scale, sg_custream s);
/* The same rounding of gathered rows: out row t is x's row rows[t] / rdiv ([n] indices; rows
 * NULL: row t), its largest magnitude brought to [2^(top-1), 2^top) (sg_cu_q8_rows_f16: 14). */
int sg_cu_q8_rows_f16_gather(const float *x, const int32_t *rows, int64_t rdiv, int64_t n, int64_t K, int top,
			     uint16_t *out, float *scale, sg_custream s);
/* y[t][r] = y[t][r] * scale[t] (+ bias[r]), y [n][N]. */
int sg_cu_scale_rows(float *y, int64_t n, int64_t N, const float *scale, const float *bias, sg_custream s);
/* The same scaling as a scatter of f16 GEMM outputs: y[rows[t]][r] = c16[t * ldc + r] * scale[t]
 * for t < n, r < N (ldc >= N); y [..][N]. */
int sg_cu_scale_rows_scatter(const uint16_t *c16, int64_t ldc, const int32_t *rows, int64_t n, int64_t N,
			     const float *scale, float *y, sg_custream s);
/* y[t][r] += bias[r] for t < n. */
int sg_cu_add_bias(float *y, const float *bias, int64_t n, int64_t N, sg_custream s);

/* out[t] = row ids[t] of w dequantized (zeros for an id outside [0, V)); out [n][K] f32. */
int sg_cu_embed(const sg_cuw *w, const int32_t *ids, int64_t n, int64_t V, float *out, sg_custream s);

/* --- MoE expert matmuls (cuda_moe.cu) --- */

/* MoE: the S slots (ids [S]) sorted by expert into scratch (int32 device memory, 2E + S + 2
 * values): start [E+1] (expert e's slots are order[start[e] .. start[e+1]), start[E] the slots
 * with an id in range), order [S] (slot indices t*k + j), used [E] (the experts with slots, in
 * increasing order), nused [1]. Zeroes the rows y[s] [N] of slots whose id is outside [0, E).
 * E <= 4096. The order within an expert is not deterministic. */
int sg_cu_moe_sort(const int32_t *ids, int64_t S, int64_t E, int32_t *scratch, float *y, int64_t N,
		   sg_custream s);
/* MoE: sorts the n*k slots by expert into scratch (start [E+1], order [n*k], used [E], nused [1]:
 * int32 device memory, 2E + n*k + 2 values), zeroing y rows of slots whose id is out of range,
 * then runs the grouped GEMV over the used experts only (8-bit activations when q8_scratch is
 * given: sg_cu_q8_bytes(rows of x, K)). */
int sg_cu_moe_matmul(const sg_cuw *w, const float *x, int shared_x, const int32_t *ids, int64_t n,
		     int64_t k, int64_t E, float *y, int64_t N, int32_t *scratch, void *q8_scratch, int ids_ready,
		     sg_custream s);

/* --- norms (cuda_norm.cu), attention (cuda_attn.cu, cuda_flash.cu), elementwise (cuda_norm.cu) --- */

int sg_cu_rmsnorm(const float *x, const float *w, float eps, float off, float *y, int64_t rows,
		  int64_t D, sg_custream s);
int sg_cu_layernorm(const float *x, const float *w, const float *b, float eps, float *y,
		    int64_t rows, int64_t D, sg_custream s);

#define SG_CU_MAX_HALF 512 /* rotated pairs per head (head_dim <= 1024) */
typedef struct sg_cu_rope {
	int hd, half, neox;
	float pos_scale, mscale;
	/* dynamic NTK: the base depends on the step's largest position, known on the device only */
	int dyn, nr, dim, prop, orig_ctx;
	double theta;
	float factor;
	float inv_freq[SG_CU_MAX_HALF];
} sg_cu_rope;

/* In place on x [n][H][hd] (pos I32 [n]). */
int sg_cu_rope_apply(float *x, const int32_t *pos, int64_t n, int64_t H, const sg_cu_rope *r,
		     sg_custream s);
/* k, v [n][per] into caches [ctx][per] (F32 or F16: *_f16) at rows pos[t]; skipped outside. */
int sg_cu_kv_store(const float *k, const float *v, const int32_t *pos, int64_t n, int64_t kper,
		   int64_t vper, void *kc, int kf16, void *vc, int vf16, int64_t ctx, sg_custream s);
/* Fused rope(q), rope(k), kv_store(k, v): q [n][Hq][hd], k [n][Hk][hd], v [n][Hk][hdv]. With
 * qn or kn (per-head norm weights [hd], or both NULL): every q and k head is RMS-normalised first
 * (eps, weight offset off; a NULL weight of the two means no weight). */
int sg_cu_attn_prep(float *q, float *k, const float *v, const int32_t *pos, int64_t n, int64_t Hq,
		    int64_t Hk, int64_t hdv, const sg_cu_rope *r, void *kc, int kf16, void *vc,
		    int vf16, int64_t ctx, const float *qn, const float *kn, float eps, float off,
		    sg_custream s);

/* The attention prep done inside the one-token attention (SARAGOSSA_CUDA_ATTN_PREP): q holds
 * the raw query heads; every block normalises and rotates its own, and the blocks of the slice
 * holding the position do the same for the step's K row and store it and the V row into the
 * caches, with the prep kernel's arithmetic (bit-identical). */
typedef struct sg_cu_aprep {
	int on;
	const float *k, *v;   /* the step's raw rows [Hkv][hd], [Hkv][hdv] */
	const float *qn, *kn; /* per-head norm weights [hd], or NULL */
	float eps, off;
	sg_cu_rope r;
} sg_cu_aprep;

typedef struct sg_cu_attn {
	const float *q;       /* [n][H][hd] */
	const void *kc, *vc;  /* [ctx][Hkv][hd], [ctx][Hkv][hdv] */
	int kf16, vf16;
	const int32_t *pos;   /* [n] */
	int64_t n, H, Hkv, hd, hdv, ctx;
	float scale, cap;
	int window, causal, ring; /* ring: kv position j lives in row j % ctx (see backend.h) */
	int nchunk, chunk;    /* kv split (flash-decoding): static, from ctx */
	float *part;          /* [n*H][nchunk][hdv + 2] when nchunk > 1 */
	float *out;           /* [n][H][hdv] */
	int8_t *xq;           /* decode only, when set: out also rounded to 8-bit blocks for the next */
	float *dx, *sx;       /* GEMV (sg_cu_q8_split's arrays; hdv a multiple of 32) */
	int kpre;             /* decode (set by sg_cu_attn_decode): the first tiles' K rows copied before the wait */
	int layout_pad;       /* unused: holds the offsets of the fields after it where they were when the decode
	                       * kernels were measured (without it ptxas gave the tensor-core kernels other
	                       * register counts, bench/RESULTS.md); remove together with a GPU re-measurement */
	int vfirst;           /* decode (set by sg_cu_attn_decode, the tensor-core kernel): the first tiles' V rows too */
	int layout_pad_cl;    /* unused, likewise: where the removed cluster size was */
	sg_cu_aprep prep;     /* decode: the prep fused in (prep.on; see sg_cu_attn_prep_ok) */
} sg_cu_attn;
#define SG_CU_MAX_HD 512
int sg_cu_attention(const sg_cu_attn *a, sg_custream s);

/* Attention of packed independent sequences (cuda_packed.cu): token t of sequence s (offs[s] <=
 * t < offs[s + 1]) attends, without a causal mask, to the k/v rows offs[s] .. offs[s + 1] - 1.
 * q [n][H][hd], k [n][Hkv][hd], v [n][Hkv][hdv], out [n][H][hdv], all F32; offs I32 [n_seq + 1];
 * bias NULL or each sequence's [L][H][L] additive logits one after another. */
typedef struct sg_cu_attn_packed {
	int64_t n, H, Hkv, hd, hdv;
	int n_seq;
	const float *q, *k, *v, *bias;
	const int32_t *offs;
	float scale;
	float *out;
	int tiles; /* SARAGOSSA_CUDA_PACKED_TILES: heads of at most 128 dims a block per 16 tokens (K/V tiles shared) */
} sg_cu_attn_packed;
int sg_cu_attention_packed(const sg_cu_attn_packed *a, sg_custream s);
/* pool_rows (backend.h): x [n][D] rows offs[s] .. offs[s + 1] - 1 into out [n_seq][D]; mode an sg_bpool */
int sg_cu_pool_rows(const float *x, const int32_t *offs, int n_seq, int64_t D, int mode, float *out, sg_custream s);

/* The audio codec's ops (cuda_conv.cu): im2col rows out[t][k*C + c] = x[t*stride + k*dil - pad][c]
 * (0 outside [0, T); dil may be negative), one transposed-conv phase's rows written back
 * interleaved (y[j*stride + p] = src[j] below Tout), a grouped convolution directly (w [Cout][K][Cin
 * / groups]), SnakeBeta (a, b per channel of C) and the exact GELU. */
int sg_cu_im2col(const float *x, int64_t T, int64_t C, int64_t Tout, int K, int stride, int dil, int pad, float *out,
		 sg_custream s);
int sg_cu_phase_rows(const float *src, int64_t J, int64_t C, int stride, int p, int64_t Tout, float *y, sg_custream s);
typedef struct sg_cu_conv {
	const float *x, *w, *bias; /* bias NULL: none */
	float *y;
	int64_t T, Tout, Cin, Cout;
	int K, stride, dil, pad, groups;
} sg_cu_conv;
int sg_cu_conv_grouped(const sg_cu_conv *a, sg_custream s);
/* a transposed convolution directly (w [stride][Cout][K][Cin]; K the taps per phase) */
int sg_cu_convt_direct(const sg_cu_conv *a, sg_custream s);
int sg_cu_snake(const float *x, const float *a, const float *b, int64_t n, int64_t C, float *y, sg_custream s);
int sg_cu_gelu_erf(const float *x, int64_t n, float *y, sg_custream s);
/* Decode (n = 1): the query heads of a KV head share its reads; nchunk slices of the live KV
 * range (part holds them when nchunk > 1). _ok says whether the shapes fit (f16 or f32 caches of
 * one type, hd a multiple of 8 up to 256, hdv 32/64/128/256); _units is the blocks per slice. */
int sg_cu_attn_decode_ok(const sg_cu_attn *a);
int sg_cu_attn_decode_units(const sg_cu_attn *a);
int sg_cu_attn_decode(const sg_cu_attn *a, sg_custream s);
/* The one-token attention of each of ntok tokens in one launch (an exact step): token t reads q +
 * t H hd and pos[t], writes out + t H hdv (part + t H nchunk (hdv + 2)); each the bits of its
 * one-token launch. No fused prep, no 8-bit output. ny (1..nchunk): the slices launched, where no
 * token's live rows reach slice ny (the others are empty: their blocks only return). */
int sg_cu_attn_decode_tokens(const sg_cu_attn *a, int64_t ntok, int ny, sg_custream s);
/* 1 if the decode kernel takes a's prep fused in: f16 caches, hd = hdv of 64, 128 or 256 (the
 * compile-time-shape kernel), the rope's head dim hd, the policy's attn.prep on. */
int sg_cu_attn_prep_ok(const sg_cu_attn *a);
/* Prefill (any n) in one flash-style kernel: f16 caches, hd = hdv of 64 or 128, causal, no ring
 * (_ok says whether the shapes fit); no score matrix, no host read of the positions. */
int sg_cu_attn_flash_ok(const sg_cu_attn *a);
int sg_cu_attn_flash(const sg_cu_attn *a, sg_custream s);
/* A CUDA_TRACE=1 build: the decode chain's timeline table set up (at backend creation), and written
 * into path (other builds: nothing). */
void sg_cu_trace_start(void);
int sg_cu_trace_dump(const char *path);
/* The one-token attention's kernel is the policy's (cuda_policy.h; dec_choose): the query heads of
 * a KV head per block, the compile-time-shape kernel with its K rows copied before the wait, the
 * K-row pipeline, tensor cores, the first tiles' V rows copied too; the slices merged in one round
 * trip of loads (up to 64 slices). */
/* Prefill through GEMMs: s [rows][L] scores of rows = heads * n query rows (token = row % n)
 * become probabilities in place, or as f16 into p16 [rows][L] (s then unchanged): scale,
 * soft-cap, causal/window mask (pmax: the last position when not causal), softmax; masked
 * entries are 0. */
int sg_cu_attn_rows(float *s, const int32_t *pos, int64_t rows, int64_t n, int64_t L, float scale, float cap, int window, int causal,
		    int64_t pmax, uint16_t *p16, sg_custream st);
int sg_cu_f16_to_f32(const void *x, int64_t n, float *out, sg_custream s);

enum { SG_CU_EW_SILU, SG_CU_EW_GELU, SG_CU_EW_GELU_ERF, SG_CU_EW_ADD, SG_CU_EW_SCALE, SG_CU_EW_SOFTCAP };
int sg_cu_elementwise(int kind, const float *a, const float *b, float sc, float *out, int64_t n,
		      sg_custream s);
int sg_cu_softmax(const float *x, float *out, int64_t rows, int64_t D, sg_custream s);
/* scratch: sg_cu_argmax_scratch(rows, D) bytes (0 = none needed; NULL = one block per row) */
size_t sg_cu_argmax_scratch(int64_t rows, int64_t D);
int sg_cu_argmax(const float *x, int64_t rows, int64_t D, int32_t *ids, void *scratch, sg_custream s);
/* Sampling candidates of one row x [V] (top_candidates): out [2k + m] = k ids, k values, x at
 * gather[0..m) (NaN for an id outside [0, V)). scratch: sg_cu_topc_scratch(V, k) bytes. */
size_t sg_cu_topc_scratch(int64_t V, int k);
int sg_cu_topc(const float *x, int64_t V, int k, const int32_t *gather, int m, int32_t *out, void *scratch, sg_custream s);

/* --- linear attention and Gemma 4 stages (cuda_linear.cu) --- */

#define SG_CU_CONV_MAXK 64   /* short conv taps (the CPU's limit) */
#define SG_CU_GDN_MAX_DK 1024 /* key head dim of the delta rule (the CPU's limit) */

/* Causal depthwise conv + SiLU: x, out [n][C]; w [C][K]; state [K-1][C] updated in place
 * (see backend.h short_conv). out must not alias x. */
int sg_cu_short_conv(const float *x, const float *w, float *state, float *out, int64_t n, int64_t C, int K,
		     sg_custream s);

/* The gated delta rule over n tokens (backend.h gated_delta), token by token. */
typedef struct sg_cu_gdn {
	const float *qkv;            /* [n][C], C = 2*Hk*dk + Hv*dv */
	const float *a, *b;          /* [n][Hv] */
	const float *a_log, *dt_bias; /* [Hv] */
	float *state;                /* [Hv][dk][dv], in/out */
	float *out;                  /* [n][Hv][dv] */
	int64_t n, C;
	int Hk, Hv, dk, dv;
	float eps;                   /* q/k L2 norm */
} sg_cu_gdn;
int sg_cu_gated_delta(const sg_cu_gdn *g, sg_custream s);

/* y = x / sqrt(mean(x^2) + eps) * w * silu(gate) per row of D; y may alias x. */
int sg_cu_gated_rmsnorm(const float *x, const float *w, const float *gate, float eps, float *y, int64_t rows,
			int64_t D, sg_custream s);
/* out = x * sigmoid(gate); x, out [rows][W]; gate [rows][gw], gw = W or 1. out may alias x. */
int sg_cu_sigmoid_mul(const float *x, const float *gate, int64_t rows, int64_t W, int64_t gw, float *out,
		      sg_custream s);
/* out[t][j] = x[t][idx[j]] (0 for an index outside [0, W)); x [n][W], idx [W2], out [n][W2]. */
int sg_cu_gather_cols(const float *x, const int32_t *idx, int64_t n, int64_t W, int64_t W2, float *out,
		      sg_custream s);
/* out[r] = act(x[r][:F]) * x[r][F:]; act SG_CU_EW_SILU, _GELU or _GELU_ERF; x [rows][2F]. */
int sg_cu_glu_split(const float *x, int act, int64_t rows, int64_t F, float *out, sg_custream s);
/* w[i] *= scale[ids[i]] for i < nk (0 for an id outside [0, E)). */
int sg_cu_moe_weight_scale(float *w, const int32_t *ids, int64_t nk, const float *scale, int64_t E, sg_custream s);

#ifdef __cplusplus
}
#endif
#endif
