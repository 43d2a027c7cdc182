/*
 * CPU backend internals: the weight view kernels read, the 8-bit activation format the
 * integer kernels consume, and the kernel set (one per ISA) chosen at start-up.
 */
#ifndef SG_BACKEND_CPU_INTERNAL_H
#define SG_BACKEND_CPU_INTERNAL_H

#include <stddef.h>
#include <pthread.h>
#include <stdint.h>

#include "backend/backend.h"

/*
 * Kernel types: the weight formats a matvec kernel exists for (MLX affine split by bits).
 * SG_KT_MLX4G is MLX 4-bit as the CPU backend repacks it at bind (SARAGOSSA_CPU_MLX_REPACK): each
 * row one stream of groups, group = [16-bit scale][16-bit bias][group/2 bytes of codes, the MLX
 * bytes unchanged], so a row is (K/group) * (group/2 + 4) bytes and rows (or whole groups of a
 * row) can still be sliced like any block format. The split layout streams codes, scales and
 * biases from three places, which DRAM serves measurably slower than one stream.
 */
typedef enum sg_kt {
	SG_KT_F32, SG_KT_F16, SG_KT_BF16,
	SG_KT_Q8_0, SG_KT_Q4_0, SG_KT_Q4_1, SG_KT_Q5_0, SG_KT_Q5_1,
	SG_KT_Q2_K, SG_KT_Q3_K, SG_KT_Q4_K, SG_KT_Q5_K, SG_KT_Q6_K,
	SG_KT_IQ4_NL, SG_KT_IQ4_XS,
	SG_KT_MLX2, SG_KT_MLX3, SG_KT_MLX4, SG_KT_MLX5, SG_KT_MLX6, SG_KT_MLX8,
	SG_KT_MLX4G,
	SG_KT_COUNT,
	SG_KT_NONE = -1
} sg_kt;

/* How a kernel type wants its activations. */
typedef enum {
	SG_XL_F32,  /* plain f32 */
	SG_XL_NAT,  /* 8-bit blocks of 32, natural order */
	SG_XL_ILV4, /* 8-bit blocks of 32, each block [16 even elements][16 odd] (MLX 4-bit nibbles) */
	SG_XL_ILV2  /* 8-bit blocks of 32, element 4k+a at position 8a+k (MLX 2-bit crumbs) */
} sg_xlayout;

typedef struct sg_kt_info {
	const char *name;
	int block;         /* elements per weight block (32, 256; MLX: the group) */
	sg_xlayout xl;     /* activation format */
	int xoff;          /* integer offset o of the codes: w = scale * (code - o); see sg_xblk */
} sg_kt_info;

const sg_kt_info *sg_cpu_kt_info(sg_kt kt);

/* The weight matrix as kernels see it: rows of K elements, row r at data + r * row_bytes. */
typedef struct sg_wview {
	sg_kt kt;
	int64_t K;
	const uint8_t *data;
	size_t row_bytes;
	/* MLX affine */
	int bits, group, sb_bf16;
	const uint8_t *scales, *biases; /* [rows][K/group] 16-bit; NULL for SG_KT_MLX4G (inline) */
	size_t sb_row_bytes;
} sg_wview;

/* Bytes of one group of SG_KT_MLX4G: scale, bias, codes. */
static inline size_t sg_cpu_mlx4g_group_bytes(int group) { return (size_t)group / 2 + 4; }

/* The SG_KT_MLX4G row of split MLX 4-bit bytes: codes [K/2], scales and biases [K/group]. */
void sg_cpu_mlx4g_pack_row(const uint8_t *codes, const uint8_t *sc, const uint8_t *bi, int64_t K, int group, uint8_t *out);

/* Fills a view from a backend tensor; SG_KT_NONE (returned) if the type has no kernel. */
sg_kt sg_cpu_wview(const sg_btensor *w, sg_wview *out);

/*
 * Activations quantized to 8 bits in blocks of 32: x ~= d * q. One block is 64 bytes (one cache
 * line): the 32 codes and an int32 vector used as the dot product's initial accumulator. For a
 * weight type whose codes carry an offset o (w = s * (c - o)), ioff[0] = -o * sum(q[0..15]) and
 * ioff[4] = -o * sum(q[16..31]) (the rest zero), so the integer dot of the codes starts from the
 * offset's contribution and needs no extra instruction per block.
 */
typedef struct sg_xblk {
	_Alignas(64) int8_t q[32];
	int32_t ioff[8];
} sg_xblk;

typedef struct sg_xq {
	int64_t nb;    /* blocks (K / 32) */
	sg_xblk *b;    /* [nb] */
	float *d;      /* [nb] scale */
	float *s;      /* [nb] d * sum(q): the block's sum, for weight minima and biases */
	float *sh;     /* [nb][2] d * sum of each half (16 elements): for 16-element minima */
} sg_xq;

/* Bytes of scratch one quantized K-vector needs (64-byte aligned pieces). */
size_t sg_xq_bytes(int64_t K);
/* Lays an sg_xq over mem (64-byte aligned, sg_xq_bytes(K) long). */
void sg_xq_init(sg_xq *x, int64_t K, void *mem);

/* y[r - r0] for rows r0..r1-1 of w against one activation vector: x is const float * for
 * SG_XL_F32 kernel types, else const sg_xq *. */
typedef void (*sg_mv_fn)(const sg_wview *w, int64_t r0, int64_t r1, const void *x, float *y);
/* The many-token matmul (GEMM) of one weight type: y[t * ldy + r] for rows [r0, r1) and tokens
 * [t0, t1), over elements [k0, k1) of K (multiples of the type's block; k0 > 0 adds to y, so the
 * caller may block over K). Token t's activations lie at x + t * xstride: an sg_xq laid out by
 * sg_xq_init (quantized with the set's mm_xoff) for 8-bit types, K floats for float types. Every
 * weight block is unpacked once per tile of several rows and applied to several tokens. */
typedef void (*sg_mm_fn)(const sg_wview *w, int64_t r0, int64_t r1, const uint8_t *x, size_t xstride, int64_t t0,
			 int64_t t1, float *y, int64_t ldy, int64_t k0, int64_t k1);
typedef void (*sg_quant_x_fn)(const float *x, int64_t K, sg_xlayout xl, int xoff, sg_xq *out);

/* A conv1d weight packed at bind (sg_btensor.layout SG_CPU_LAYOUT_CONV): panels of
 * SG_CONV_NR output channels, each [K][Cin][SG_CONV_NR] (the panel's outputs side by side for
 * one input channel of one tap; outputs past Cout are zero), 64-byte aligned. A tile kernel
 * holds several output rows of one panel in registers over the K * Cin products: no im2col,
 * each tap a product over shifted (for a dilated conv: further shifted) input rows. */
#define SG_CPU_LAYOUT_CONV 2
/* A conv1d weight of fewer than SG_CONV_NARROW outputs, kept as bound ([Cout][K][Cin]) and run as
 * dot products (a panel would be mostly zeros): sg_btensor.layout SG_CPU_LAYOUT_CONV_ROWS. */
#define SG_CPU_LAYOUT_CONV_ROWS 3
#define SG_CONV_NARROW 4
#define SG_CONV_NR 16
typedef struct sg_conv_tile {
	const float *x;    /* input row t * stride + k * dil at x + that * Cin (the padding's zero
	                    * rows already in place) */
	const float *w;    /* packed [ceil(Cout / SG_CONV_NR)][K][Cin][SG_CONV_NR] */
	const float *bias; /* [Cout] or NULL */
	float *y;          /* [Tout][Cout] */
	int64_t Cin, Cout, K, stride, dil;
} sg_conv_tile;
/* Output rows [t0, t1) of panels [p0, p1): y[t][co] = bias[co] + the K * Cin products, summed
 * tap by tap, input channel by input channel (the same order for every row and panel). */
typedef void (*sg_conv_tile_fn)(const sg_conv_tile *a, int64_t t0, int64_t t1, int64_t p0, int64_t p1);

/* A float matmul weight [N][K] packed at bind from SG_LAYOUT_MATMUL_ONLY (sg_btensor.layout
 * SG_CPU_LAYOUT_PANEL): panels of SG_MM_NR rows, each [K][SG_MM_NR] floats (the panel's rows side
 * by side for one k; rows past N are zero), 64-byte aligned; F16 and BF16 converted once. The
 * tile kernel broadcasts one activation of a token against a whole panel and keeps a few tokens'
 * outputs in registers (an outer product: no horizontal sums, which the matvec-order tiles pay per
 * output). Each output is bias[n] (or 0) then one fused multiply-add per k in order, over K blocks
 * of sg_cpu_panel_kc(K) with the partial sum stored in y between blocks: a token's outputs do not
 * depend on the other tokens of the call, nor on the thread count. */
#define SG_CPU_LAYOUT_PANEL 4
#define SG_MM_NR 16
typedef struct sg_mm_panel {
	const float *w;    /* packed [ceil(N / SG_MM_NR)][K][SG_MM_NR] */
	const float *bias; /* [N] or NULL */
	const float *x;    /* [T][K] */
	float *y;          /* [T][N] */
	int64_t N, K;
	int64_t np;        /* panels in w (the kernels may prefetch any of them) */
} sg_mm_panel;
/* Rows [t0, t1) of y over panels [p0, p1) (the outputs p * SG_MM_NR .. + SG_MM_NR - 1 below N),
 * K block [k0, k1): y = (k0 == 0 ? bias or 0 : y) + the products of that block, k in order. */
typedef void (*sg_mm_panel_fn)(const sg_mm_panel *a, int64_t t0, int64_t t1, int64_t p0, int64_t p1, int64_t k0, int64_t k1);
/* The K block of a panel matmul: a panel's block (SG_MM_NR x kc floats, 16 KiB at kc 256) stays
 * in L1 while a chunk of tokens passes. Depends on K only, so a token's sums never depend on the
 * call's other tokens: K is cut into equal blocks of at most 256, a multiple of 8. */
static inline int64_t sg_cpu_panel_kc(int64_t K)
{
	int64_t nb = (K + 255) / 256;
	return ((K + nb - 1) / nb + 7) / 8 * 8;
}

/* Most tokens one mvt call takes. */
#define SG_MVT_MAX 8

typedef struct sg_cpu_kernels {
	const char *name;
	sg_mv_fn mv[SG_KT_COUNT];
	/* mv of nt tokens at once (1 <= nt <= SG_MVT_MAX) with mv's bits for each: x[t] activations,
	 * y[t] outputs at row r0; each weight block unpacked once for them. NULL: none */
	void (*mvt[SG_KT_COUNT])(const sg_wview *w, int64_t r0, int64_t r1, int nt, const void *const *x, float *const *y);
	unsigned q8_mask; /* bit kt set: mv[kt] takes 8-bit activations (sg_xq), else f32 */
	sg_mm_fn mm[SG_KT_COUNT];        /* NULL: the many-token matmul loops mv over tokens */
	sg_mm_fn mm_packed[SG_KT_COUNT]; /* float weights: a packed-panel mm[] with mm[]'s bits (NULL: none) */
	short mm_xoff[SG_KT_COUNT];      /* the code offset mm[kt] wants in its activations */
	sg_quant_x_fn quantize_x;
	float (*dot_f32)(const float *a, const float *b, int64_t n);
	void (*axpy_f32)(float *y, const float *x, float a, int64_t n); /* y += a * x */
	/* out = act(g) * u over n elements, act SG_ACT_SILU or SG_ACT_GELU_TANH; out may alias g or u */
	void (*glu)(sg_act act, const float *g, const float *u, float *out, int64_t n);
	/* out = cap * tanh(x / cap); out may alias x */
	/* out = gelu_erf(g) * u (GELU with the exact erf) over n elements; NULL: the scalar erff loop */
	void (*gelu_erf)(const float *g, const float *u, float *out, int64_t n);
	void (*softcap)(const float *x, float cap, float *out, int64_t n);
	/* out[i] = e^(x[i] - m) for i < n (out may alias x); returns the sum of the out[i] */
	float (*expsum)(const float *x, float m, float *out, int64_t n);
	/* out = softmax(x) over n elements: the max, expsum from it, then each value times 1 / sum
	 * (the bits of those three steps as scalar loops around expsum); out may alias x. NULL: the
	 * scalar loops */
	void (*softmax_row)(const float *x, float *out, int64_t n);
	/* acc[i] += sum_k e[k] * v[k * vstride + i] for i < d, k < nk: attention's weighted sum of
	 * value rows, acc kept in registers across the rows */
	void (*wsum_f32)(float *acc, const float *v, int64_t vstride, const float *e, int64_t nk, int64_t d);
	/* out[k] = q . key row k (at k * kstride) of d elements, k < nk: attention scores */
	void (*dots_f32)(const float *q, const float *k, int64_t kstride, int64_t nk, int64_t d, float *out);
	sg_conv_tile_fn conv_tile; /* conv1d over a packed weight (SG_CPU_LAYOUT_CONV) */
	sg_mm_panel_fn mm_panel;   /* matmul over a packed weight (SG_CPU_LAYOUT_PANEL); NULL: none */
	/* y = (x - mean) / sqrt(var + eps) * w + b over one row of D (w, b may be NULL): mean and
	 * variance summed in double as sg_cpu_layernorm_row_ref, 4 lanes at a time, the rest the same
	 * float operations; NULL: the reference */
	void (*layernorm_row)(const float *x, const float *w, const float *b, int64_t D, float eps, float *y);
	/* out = tanh(a) * sigmoid(b) over n elements (WaveNet's gate) */
	void (*tanh_gate)(const float *a, const float *b, float *out, int64_t n);
} sg_cpu_kernels;

/* Software prefetch distance of the SIMD weight kernels in bytes (SARAGOSSA_CPU_PREFETCH; 0 turns
 * the prefetch into a no-op on the line being read). Set by sg_cpu_backend_create, read-only after. */
extern size_t sg_cpu_pf_dist;

/* Kernel sets: the scalar reference always; an ISA set when compiled in (NULL otherwise). */
extern const sg_cpu_kernels sg_cpu_kernels_ref;
const sg_cpu_kernels *sg_cpu_kernels_avx2(void);
const sg_cpu_kernels *sg_cpu_kernels_avx512(void);
const sg_cpu_kernels *sg_cpu_kernels_neon(void);

/* Resolves a SIMD name ("auto", "avx512", ...) against the CPU; NULL + *why if unavailable. */
const sg_cpu_kernels *sg_cpu_kernels_pick(const char *simd, const char **why);

/* Name of a type (for messages) and the row bytes of a bindable weight tensor. */
const char *sg_type_name_cpu(sg_type t);
size_t sg_cpu_row_bytes(const sg_btensor *t);

/* Scalar pieces shared by the reference and the SIMD files. */
float sg_cpu_f16(uint16_t h);
float sg_cpu_bf16(uint16_t h);
uint16_t sg_cpu_f32_to_f16(float f);
/* Dequantizes elements [k0, k0 + n) of row r (k0, n multiples of the kernel type's block). */
void sg_cpu_dequant_row_ref(const sg_wview *w, int64_t r, int64_t k0, int64_t n, float *out);
/* The 4-bit non-linear grid of IQ4_NL / IQ4_XS. */
extern const int8_t sg_cpu_iq4_grid[16];
/* Q4_K / Q5_K: unpacks the 12 bytes of 6-bit scales and minima into sc[8], mn[8]. */
void sg_cpu_k4_scales(const uint8_t *p, uint8_t sc[8], uint8_t mn[8]);
/* Q3_K: unpacks the 12 bytes of 6-bit scales to 16 signed values (already minus 32). */
void sg_cpu_q3k_scales(const uint8_t *p, int8_t sc[16]);
/* The activation-layout permutation: position i of a block holds element perm[i]. */
const uint8_t *sg_cpu_xl_perm(sg_xlayout xl);
/* The reference matvec (f32 activations, any kernel type). */
void sg_cpu_mv_ref(const sg_wview *w, int64_t r0, int64_t r1, const void *x, float *y);
void sg_cpu_quantize_x_ref(const float *x, int64_t K, sg_xlayout xl, int xoff, sg_xq *out);
/* The scalar references of the elementwise kernels (libm's expf / tanhf). */
void sg_cpu_glu_ref(sg_act act, const float *g, const float *u, float *out, int64_t n);
void sg_cpu_softcap_ref(const float *x, float cap, float *out, int64_t n);
void sg_cpu_tanh_gate_ref(const float *a, const float *b, float *out, int64_t n);
float sg_cpu_expsum_ref(const float *x, float m, float *out, int64_t n);
void sg_cpu_dots_f32_ref(const float *q, const float *k, int64_t kstride, int64_t nk, int64_t d, float *out);
void sg_cpu_wsum_f32_ref(float *acc, const float *v, int64_t vstride, const float *e, int64_t nk, int64_t d);
void sg_cpu_conv_tile_ref(const sg_conv_tile *a, int64_t t0, int64_t t1, int64_t p0, int64_t p1);
void sg_cpu_layernorm_row_ref(const float *x, const float *w, const float *b, int64_t D, float eps, float *y);
void sg_cpu_mm_panel_ref(const sg_mm_panel *a, int64_t t0, int64_t t1, int64_t p0, int64_t p1, int64_t k0, int64_t k1);
/* Packs the float weight t ([N][K] F32, F16 or BF16) into SG_CPU_LAYOUT_PANEL, in memory t then
 * owns; on allocation failure t stays as it was (layout 0: the matmul's usual path). */
void sg_cpu_mm_panel_pack(sg_btensor *t);
/* matmul over a weight of SG_CPU_LAYOUT_PANEL (cpu_backend.c's matmul hands it over). */
sg_status sg_cpu_matmul_panel(sg_backend *be, const sg_btensor *w, const sg_btensor *x, const sg_btensor *bias, sg_btensor *y);
/* Packs the F32 conv1d weight t ({Cin, K, Cout}) into SG_CPU_LAYOUT_CONV, in memory t then owns
 * (fewer than SG_CONV_NARROW outputs: marks it SG_CPU_LAYOUT_CONV_ROWS, bytes in place); on
 * allocation failure t stays as it was (conv1d then runs its im2col path). */
void sg_cpu_conv_pack(sg_btensor *t);
/* MLX codes of elements [k0, k0+32) of a row into natural order (any bits). */
void sg_cpu_mlx_codes(const uint8_t *row, int bits, int64_t k0, uint8_t out[32]);

/* --- the backend object --- */
#define SG_CPU_CACHE_SLOTS 32
#define SG_CPU_CACHE_MIN (1u << 20)     /* blocks below 1 MiB are left to malloc */
#define SG_CPU_CACHE_BYTES (128u << 20) /* idle blocks kept, in all */
typedef struct sg_threadpool sg_threadpool;

typedef struct sg_cpu_backend {
	sg_backend base; /* first: a sg_backend * is a sg_cpu_backend * */
	sg_threadpool *pool;
	int nth;
	const sg_cpu_kernels *k;
	int int8_dot;      /* SARAGOSSA_CPU_INT8_DOT */
	int attn_split_kv; /* SARAGOSSA_CPU_ATTN_SPLIT_KV */
	int gemm;          /* SARAGOSSA_CPU_GEMM: many tokens take the kernel set's mm[] */
	int gemm_packed;   /* SARAGOSSA_CPU_GEMM_PACKED: float weights take mm_packed[] where the set has it */
	int gemm_split_tokens; /* SARAGOSSA_CPU_GEMM_SPLIT_TOKENS: a GEMM of few rows shares its tokens out */
	int exact;         /* match_decode on: many-token ops give each token the one-token bits */
	int verify_mt;     /* SARAGOSSA_CPU_VERIFY_MT: many tokens without the GEMM take mvt[] (up to
			    * SG_MVT_MAX a call) */
	int conv_packed;   /* SARAGOSSA_CPU_CONV_PACKED: bind packs conv1d weights (SG_CPU_LAYOUT_CONV) */
	int gemm_panel;    /* SARAGOSSA_CPU_GEMM_PANEL: bind packs SG_LAYOUT_MATMUL_ONLY weights (SG_CPU_LAYOUT_PANEL) */
	int gate_simd;     /* SARAGOSSA_CPU_GATE_SIMD: tanh_gate takes the kernel set's (else the libm loop) */
	int softmax_simd;  /* SARAGOSSA_CPU_SOFTMAX_SIMD: softmax rows take the kernel set's softmax_row */
	int mlx_repack;    /* SARAGOSSA_CPU_MLX_REPACK: bind repacks MLX 4-bit weights of groups >= 64 to
			    * SG_KT_MLX4G (1); 0 never; 2 every group size */
	/* Large tensor_alloc blocks kept for reuse (SARAGOSSA_CPU_TENSOR_CACHE): an encoder's batch
	 * allocates tens of MB of activations per call, which fresh from the kernel cost a page fault
	 * and a zeroed page each 4 KiB. live: blocks handed out (so a free knows their size); idle:
	 * blocks freed, up to SG_CPU_CACHE_BYTES in all. */
	pthread_mutex_t cache_mu;
	int tensor_cache;
	struct { void *p; size_t bytes; } live[SG_CPU_CACHE_SLOTS], idle[SG_CPU_CACHE_SLOTS];
	size_t idle_bytes;
	void *scratch_raw; /* allocation */
	uint8_t *scratch;  /* 64-byte aligned inside it */
	size_t scratch_cap;
} sg_cpu_backend;

/* Scratch of at least n bytes, 64-byte aligned. It only grows (the first call of each larger
 * shape allocates; a steady decode loop never does). NULL if the allocation fails. */
void *sg_cpu_scratch(sg_cpu_backend *cb, size_t n);

/* Shape checks shared by the ops: SG_OK or SG_ERR_INVALID_ARG with the offending values. */
sg_status sg_cpu_check_f32(const char *op, const char *what, const sg_btensor *t);
sg_status sg_cpu_check_same(const char *op, const sg_btensor *a, const sg_btensor *b);

/* One row of rmsnorm: y = x / rms(x) * (w + off) (w may be NULL: no weight); the op's own code. */
void sg_cpu_rmsnorm_row(const sg_cpu_kernels *k, const float *x, const float *w, int64_t D, float eps, float off, float *y);
/* out = act(g) * u over n elements, the glu op's code for SILU, GELU_TANH and GELU (erf); out may
 * alias g or u. */
void sg_cpu_glu_rows(const sg_cpu_kernels *k, sg_act act, const float *g, const float *u, float *out, int64_t n);

/* Ops implemented in cpu_ops.c (table entries of the CPU backend). */
sg_status sg_cpu_rmsnorm(sg_backend *be, const sg_btensor *x, const sg_btensor *w, float eps, float w_offset, sg_btensor *y);
sg_status sg_cpu_layernorm(sg_backend *be, const sg_btensor *x, const sg_btensor *w, const sg_btensor *b, float eps, sg_btensor *y);
sg_status sg_cpu_rope(sg_backend *be, sg_btensor *x, const sg_btensor *pos, const sg_rope_params *p);
sg_status sg_cpu_kv_store(sg_backend *be, const sg_btensor *k, const sg_btensor *v, const sg_btensor *pos, sg_btensor *kc, sg_btensor *vc);
sg_status sg_cpu_attention(sg_backend *be, const sg_btensor *q, const sg_btensor *kc, const sg_btensor *vc, const sg_btensor *pos, const sg_attn_params *p, sg_btensor *out);
sg_status sg_cpu_glu(sg_backend *be, const sg_btensor *gate, const sg_btensor *up, sg_act act, sg_btensor *out);
sg_status sg_cpu_add(sg_backend *be, const sg_btensor *a, const sg_btensor *b, sg_btensor *out);
sg_status sg_cpu_scale(sg_backend *be, const sg_btensor *x, float s, sg_btensor *out);
sg_status sg_cpu_softcap(sg_backend *be, const sg_btensor *x, float cap, sg_btensor *out);
sg_status sg_cpu_softmax(sg_backend *be, const sg_btensor *x, sg_btensor *out);
sg_status sg_cpu_moe_route(sg_backend *be, const sg_btensor *logits, sg_router router, int k, int norm_topk, sg_btensor *ids, sg_btensor *weights);
sg_status sg_cpu_moe_combine(sg_backend *be, const sg_btensor *y, const sg_btensor *weights, sg_btensor *out);
sg_status sg_cpu_argmax(sg_backend *be, const sg_btensor *x, sg_btensor *ids);

/* Ops implemented in cpu_linear_attn.c (hybrid and Gemma 4 stages). */
/* cpu_conv.c: the audio codec ops */
sg_status sg_cpu_conv1d(sg_backend *be, const sg_btensor *x, const sg_btensor *w, const sg_btensor *bias, const sg_conv_params *p, sg_btensor *y);
sg_status sg_cpu_conv_transpose1d(sg_backend *be, const sg_btensor *x, const sg_btensor *w, const sg_btensor *bias, int stride, sg_btensor *y);
sg_status sg_cpu_snake(sg_backend *be, const sg_btensor *x, const sg_btensor *a, const sg_btensor *b, sg_btensor *y);
sg_status sg_cpu_gelu(sg_backend *be, const sg_btensor *x, sg_btensor *y);
sg_status sg_cpu_tanh_gate(sg_backend *be, const sg_btensor *x, sg_btensor *y);
sg_status sg_cpu_short_conv(sg_backend *be, const sg_btensor *x, const sg_btensor *w, sg_btensor *state, sg_btensor *out);
sg_status sg_cpu_gated_delta(sg_backend *be, const sg_btensor *qkv, const sg_btensor *a, const sg_btensor *b, const sg_btensor *a_log, const sg_btensor *dt_bias, const sg_gdn_params *p, sg_btensor *state, sg_btensor *out);
sg_status sg_cpu_gated_rmsnorm(sg_backend *be, const sg_btensor *x, const sg_btensor *w, const sg_btensor *gate, float eps, sg_btensor *y);
sg_status sg_cpu_sigmoid_mul(sg_backend *be, const sg_btensor *x, const sg_btensor *gate, sg_btensor *out);
sg_status sg_cpu_gather_cols(sg_backend *be, const sg_btensor *x, const sg_btensor *idx, sg_btensor *out);
sg_status sg_cpu_glu_split(sg_backend *be, const sg_btensor *x, sg_act act, sg_btensor *out);
sg_status sg_cpu_moe_weight_scale(sg_backend *be, sg_btensor *weights, const sg_btensor *ids, const sg_btensor *scale);

#endif
