/*
 * Differential tests of the CUDA backend: every op on the GPU against the CPU backend's scalar
 * reference kernels, over several shapes and types, fresh random inputs, and GPU outputs
 * poisoned with NaN before each op (an element an op forgets to write fails the comparison).
 * Compared by normalised error ||a - b||^2 / ||a||^2 against a per-op threshold:
 *  - f32 ops and the fused GEMV: float summation order against the reference's (the reference
 *    matvec accumulates in double): relative error ~1e-7 per element, NMSE ~1e-13; threshold
 *    1e-9 (rows may cancel to far less than their terms).
 *  - more than 8 tokens go through cuBLAS: FP32 by default (as the GEMV); with
 *    SARAGOSSA_CUDA_GEMM=bf16 weights and activations are rounded to bf16 (relative error uniform
 *    in +-2^-9, variance 2^-18/3 each), NMSE ~3e-6; threshold 1e-4.
 *  - quantized weights on the GEMV with SARAGOSSA_CUDA_Q8X=1 (and every 8-bit kernel) quantize activations to
 *    8 bits per block of 32 as the CPU SIMD kernels do: checked exactly (1e-7) against the
 *    reference fed the same rounded activations d * q, and end to end (5e-4) against f32 ones.
 *  - f16 caches: both backends round to f16 identically; threshold as f32.
 * The repacked weight layouts are checked against the formats module's reference dequantizer
 * (embed returns dequantized rows).
 *
 * The session's decode graph (cuda_decode): prefill, then greedy steps replayed from the recorded
 * graph give bit-identical logits and ids to SARAGOSSA_CUDA_GRAPHS=0 (the per-op path); an MoE
 * model stays per-op. decode_greedy runs on the CPU too (CI): the id is the argmax of the step's
 * logits.
 *
 * Without a GPU (CI) or without CUDA in the build, every GPU test skips with a message.
 */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "engine/session.h"
#include "saragossa.h"

#if SG_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_policy.h"
#include <cuda_runtime_api.h>
#include "base/error.h"
#include "base/flags.h"
#include "formats/qtypes.h"
#include "rank_ref.h"

/* The kernels' policy (cuda_policy.h) changed one field at a time: the tests' way to compare two
 * kernels of a stage in one process; sg_cu_policy_load() puts the flags' policy back. */
#define POLICY_SETTER(fn, field)                                                                   \
	static void fn(int v)                                                                      \
	{                                                                                          \
		sg_cu_policy p_ = *sg_cu_policy_now();                                             \
		p_.field = v;                                                                      \
		sg_cu_policy_set(&p_);                                                             \
	}
POLICY_SETTER(set_gemv_sb, gemv.block_per_lane)
POLICY_SETTER(set_gemv_xstage, gemv.xstage)
POLICY_SETTER(set_gemv_mixed, gemv.mixed)
POLICY_SETTER(set_gemv_pre, gemv.pre)
POLICY_SETTER(set_gemv_persist_grid, gemv.persist_grid)
POLICY_SETTER(set_attn_merge, attn.merge1)
POLICY_SETTER(set_attn_kpre, attn.kpre)
POLICY_SETTER(set_attn_vfirst, attn.vfirst)
POLICY_SETTER(set_attn_kpipe, attn.kpipe)
POLICY_SETTER(set_attn_mma, attn.mma)
POLICY_SETTER(set_attn_prep, attn.prep)
POLICY_SETTER(set_moe_ids_early, moe.ids_early)
POLICY_SETTER(set_route_warp, moe.route_warp)
/* the persistent-grid GEMV for every launch it takes (1) or none (0) */
static void set_gemv_persist(int on)
{
	sg_cu_policy p = *sg_cu_policy_now();
	p.gemv.persist = on ? SG_CU_PERSIST_ALWAYS : SG_CU_PERSIST_OFF;
	sg_cu_policy_set(&p);
}

#define NMSE_F32 1e-9
#define NMSE_BF16 1e-4
#define NMSE_F16 1e-6 /* f16 operands on the 8-bit-rounded activations: ~4e-8 expected */
#define NMSE_Q8X 5e-4 /* 8-bit activations against f32 ones: 2e-5 to 1e-4 measured (random K-quant minima make outputs differences of large terms) */

static sg_backend *cpu, *gpu;

static void setup(void)
{
	sg_cpu_params cp = {2, "scalar"};
	cr_assert_eq(sg_cpu_backend_create(&cp, &cpu), SG_OK);
	sg_cuda_params gp = sg_cuda_default_params();
	if (sg_cuda_backend_create(&gp, &gpu) != SG_OK) {
		sg_backend_free(cpu);
		cpu = NULL;
		cr_skip_test("no usable GPU: %s", sg_last_error());
	}
}

static void teardown(void)
{
	sg_backend_free(gpu);
	sg_backend_free(cpu);
	gpu = cpu = NULL;
}

#define TEST_RNG_SEED 0x9E3779B97F4A7C15ull
#include "test_rng.h"

static double nmse(const float *a, const float *b, int64_t n)
{
	double num = 0, den = 0;
	for (int64_t i = 0; i < n; i++) {
		if (!isfinite(b[i]) && isfinite(a[i])) return INFINITY; /* an unwritten (poisoned) element */
		double d = (double)a[i] - b[i];
		num += d * d;
		den += (double)a[i] * a[i];
	}
	return den > 0 ? num / den : num;
}

/* The same tensor on both backends. */
typedef struct {
	sg_btensor c, g;
	int64_t n; /* elements */
} pair;

static pair pair_new(sg_type type, int64_t n0, int64_t n1, int64_t n2, int64_t n3)
{
	pair p;
	int64_t ne[4] = {n0, n1, n2, n3};
	cr_assert_eq(cpu->ops->tensor_alloc(cpu, type, ne, &p.c), SG_OK);
	cr_assert_eq(gpu->ops->tensor_alloc(gpu, type, ne, &p.g), SG_OK, "%s", sg_last_error());
	p.n = n0 * n1 * n2 * n3;
	return p;
}

static size_t esize(const pair *p) { return p->c.type == SG_TYPE_F16 || p->c.type == SG_TYPE_BF16 ? 2 : 4; }

static void pair_push(pair *p) { cr_assert_eq(gpu->ops->write(gpu, &p->g, 0, p->c.data, (size_t)p->n * esize(p)), SG_OK); }

static pair pair_rand(int64_t n0, int64_t n1, int64_t n2, float scale)
{
	pair p = pair_new(SG_TYPE_F32, n0, n1, n2, 1);
	for (int64_t i = 0; i < p.n; i++) ((float *)p.c.data)[i] = grand() * scale;
	pair_push(&p);
	return p;
}

/* n values s with every block of 32 rounded as the GPU's activation quantizer does:
 * d * rint(x * 127/amax), into o. */
static void requant_into(const float *s, float *o, int64_t n)
{
	for (int64_t b = 0; b < n / 32; b++) {
		float amax = 0;
		for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(s[32 * b + i]));
		float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
		for (int i = 0; i < 32; i++) o[32 * b + i] = d * (float)(int)rintf(s[32 * b + i] * id);
	}
}

/* x rounded as the GPU's activation quantizer rounds it. */
static pair requantized(const pair *x)
{
	pair r = pair_new(SG_TYPE_F32, x->c.ne[0], x->c.ne[1], x->c.ne[2], 1);
	requant_into(x->c.data, r.c.data, x->n);
	pair_push(&r);
	return r;
}

static pair pair_i32(int64_t n0, int64_t n1, const int32_t *v)
{
	pair p = pair_new(SG_TYPE_I32, n0, n1, 1, 1);
	memcpy(p.c.data, v, sizeof(int32_t) * (size_t)p.n);
	pair_push(&p);
	return p;
}

/* NaN bytes in the GPU copy: what an op does not write stays NaN. */
static void poison(pair *p)
{
	size_t bytes = (size_t)p->n * esize(p);
	void *buf = malloc(bytes);
	memset(buf, 0xff, bytes);
	cr_assert_eq(gpu->ops->write(gpu, &p->g, 0, buf, bytes), SG_OK);
	free(buf);
}

/* The GPU copy as floats (F16 converted). */
static float *fetch(const pair *p)
{
	size_t bytes = (size_t)p->n * esize(p);
	void *raw = malloc(bytes);
	cr_assert_eq(gpu->ops->read(gpu, &p->g, 0, raw, bytes), SG_OK, "%s", sg_last_error());
	if (p->c.type == SG_TYPE_F16) {
		float *f = malloc(sizeof(float) * (size_t)p->n);
		for (int64_t i = 0; i < p->n; i++) f[i] = sg_f16_to_f32(((uint16_t *)raw)[i]);
		free(raw);
		return f;
	}
	return raw;
}

static float *cpu_floats(const pair *p)
{
	float *f = malloc(sizeof(float) * (size_t)p->n);
	for (int64_t i = 0; i < p->n; i++)
		f[i] = p->c.type == SG_TYPE_F16 ? sg_f16_to_f32(((uint16_t *)p->c.data)[i]) : ((float *)p->c.data)[i];
	return f;
}

static double pair_nmse(const pair *p)
{
	float *g = fetch(p), *c = cpu_floats(p);
	double e = nmse(c, g, p->n);
	free(g);
	free(c);
	return e;
}

static void pair_free(pair *p)
{
	cpu->ops->tensor_free(cpu, &p->c);
	gpu->ops->tensor_free(gpu, &p->g);
}

/* --- weights --- */

typedef struct {
	sg_type type;
	int bits, group, sb_bf16;
	const char *name;
} wtype;

static const wtype wtypes[] = {
	{SG_TYPE_F32, 0, 0, 0, "F32"},   {SG_TYPE_F16, 0, 0, 0, "F16"},   {SG_TYPE_BF16, 0, 0, 0, "BF16"},
	{SG_TYPE_Q8_0, 0, 0, 0, "Q8_0"}, {SG_TYPE_Q4_0, 0, 0, 0, "Q4_0"}, {SG_TYPE_Q4_1, 0, 0, 0, "Q4_1"},
	{SG_TYPE_Q5_0, 0, 0, 0, "Q5_0"}, {SG_TYPE_Q5_1, 0, 0, 0, "Q5_1"}, {SG_TYPE_Q4_K, 0, 0, 0, "Q4_K"},
	{SG_TYPE_Q5_K, 0, 0, 0, "Q5_K"}, {SG_TYPE_Q6_K, 0, 0, 0, "Q6_K"},
	{SG_TYPE_MLX_AFFINE, 4, 32, 1, "MLX4 g32"},  {SG_TYPE_MLX_AFFINE, 4, 64, 0, "MLX4 g64 f16"},
	{SG_TYPE_MLX_AFFINE, 4, 128, 1, "MLX4 g128"}, {SG_TYPE_MLX_AFFINE, 6, 64, 1, "MLX6 g64"},
	{SG_TYPE_MLX_AFFINE, 6, 32, 0, "MLX6 g32 f16"}, {SG_TYPE_MLX_AFFINE, 8, 64, 1, "MLX8 g64"},
	{SG_TYPE_MLX_AFFINE, 8, 128, 0, "MLX8 g128 f16"},
};
#define N_WTYPES ((int)(sizeof(wtypes) / sizeof(wtypes[0])))

/* 1 if the type has 8-bit activation kernels; q8_path: and the backend uses them (the flag). */
static int q8_kernels(const wtype *wt)
{
	int plain = wt->type == SG_TYPE_F32 || wt->type == SG_TYPE_F16 || wt->type == SG_TYPE_BF16;
	return !plain && wt->bits != 6;
}
static int q8_path(const wtype *wt) { return q8_kernels(wt) && sg_flag_bool("SARAGOSSA_CUDA_Q8X"); }

/* byte offsets of the f16 scale fields in one GGUF block */
static int f16_fields(sg_type t, int off[2])
{
	off[0] = 0;
	switch (t) {
	case SG_TYPE_Q4_1: case SG_TYPE_Q5_1: case SG_TYPE_Q4_K: case SG_TYPE_Q5_K: off[1] = 2; return 2;
	case SG_TYPE_Q6_K: off[0] = 208; return 1;
	default: return 1;
	}
}

static uint16_t f2h(float f, int bf16)
{
	if (!bf16) return sg_f32_to_f16(f);
	return sg_f32_to_bf16(f);
}

/* Host bytes of a random weight matrix [rows][K] (rows = N * E). Owns its buffers. */
typedef struct {
	sg_btensor t; /* host view: bind copies it */
	uint8_t *mem;
	uint16_t *sc, *bi;
} hw;

static hw make_w(const wtype *wt, int64_t rows, int64_t K)
{
	hw w;
	memset(&w, 0, sizeof(w));
	w.t.type = wt->type;
	w.t.ne[0] = K;
	w.t.ne[1] = rows;
	w.t.ne[2] = w.t.ne[3] = 1;
	size_t rb;
	if (wt->type == SG_TYPE_MLX_AFFINE) {
		w.t.mlx.bits = wt->bits;
		w.t.mlx.group = wt->group;
		w.t.mlx.sb_type = wt->sb_bf16 ? SG_TYPE_BF16 : SG_TYPE_F16;
		size_t ng = (size_t)(rows * K / wt->group);
		w.sc = malloc(2 * ng);
		w.bi = malloc(2 * ng);
		for (size_t i = 0; i < ng; i++) {
			float sv = 0.02f + 0.01f * frand(), bv = -sv * (float)((1 << wt->bits) - 1) / 2 + 0.01f * frand();
			w.sc[i] = f2h(sv, wt->sb_bf16);
			w.bi[i] = f2h(bv, wt->sb_bf16);
		}
		w.t.scales = w.sc;
		w.t.biases = w.bi;
		rb = (size_t)K / 8 * (size_t)wt->bits;
	} else {
		rb = sg_type_row_bytes(wt->type, K);
	}
	cr_assert(rb > 0);
	size_t bytes = rb * (size_t)rows;
	w.mem = malloc(bytes + 16);
	if (wt->type == SG_TYPE_F32) {
		for (size_t i = 0; i < bytes / 4; i++) ((float *)w.mem)[i] = grand();
	} else if (wt->type == SG_TYPE_F16 || wt->type == SG_TYPE_BF16) {
		for (size_t i = 0; i < bytes / 2; i++) ((uint16_t *)w.mem)[i] = f2h(grand(), wt->type == SG_TYPE_BF16);
	} else {
		for (size_t i = 0; i < bytes; i++) w.mem[i] = (uint8_t)rnd();
		if (wt->type != SG_TYPE_MLX_AFFINE) {
			const sg_type_info *ti = sg_type_get(wt->type);
			size_t bb = (size_t)ti->block_bytes;
			int off[2], nf = f16_fields(wt->type, off);
			for (size_t b = 0; b < bytes / bb; b++)
				for (int f = 0; f < nf; f++) {
					float d = 0.01f * (1.0f + 0.5f * frand()), v = f == 1 ? (wt->type == SG_TYPE_Q4_1 ? -7.5f * d : wt->type == SG_TYPE_Q5_1 ? -15.5f * d : 0.005f) : d;
					uint16_t h = sg_f32_to_f16(v);
					memcpy(w.mem + b * bb + off[f], &h, 2);
				}
		}
	}
	w.t.data = w.mem;
	return w;
}

static void free_hw(hw *w)
{
	free(w->mem);
	free(w->sc);
	free(w->bi);
}

/* Binds the host weights on both backends: c (CPU, in place) and g (uploaded). */
static void bind_both(const hw *w, sg_btensor *c, sg_btensor *g)
{
	*c = w->t;
	*g = w->t;
	cr_assert_eq(cpu->ops->tensor_bind(cpu, c), SG_OK, "%s", sg_last_error());
	cr_assert_eq(gpu->ops->tensor_bind(gpu, g), SG_OK, "%s", sg_last_error());
}

static int64_t k_for(const wtype *wt, int v)
{
	if (wt->type == SG_TYPE_Q4_K || wt->type == SG_TYPE_Q5_K || wt->type == SG_TYPE_Q6_K) return v ? 768 : 256;
	return v ? 1024 : (wt->group > 32 ? 2 * wt->group : 96);
}

TestSuite(cuda, .init = setup, .fini = teardown);

Test(cuda, matmul_every_type_gemv_and_gemm_paths_match_cpu_reference)
{
	for (int c = 0; c < N_WTYPES; c++) {
		for (int v = 0; v < 2; v++) {
			int64_t K = k_for(&wtypes[c], v), N = v ? 300 : 37;
			hw w = make_w(&wtypes[c], N, K);
			sg_btensor wc, wg;
			bind_both(&w, &wc, &wg);
			static const int ntoks[] = {1, 2, 3, 8, 20};
			for (int ti = 0; ti < 5; ti++) {
				int n = ntoks[ti];
				pair x = pair_rand(K, n, 1, 1.0f), y = pair_new(SG_TYPE_F32, N, n, 1, 1), b = pair_rand(N, 1, 1, 1.0f);
				int use_bias = ti & 1;
				poison(&y);
				cr_assert_eq(cpu->ops->matmul(cpu, &wc, &x.c, use_bias ? &b.c : NULL, &y.c), SG_OK);
				cr_assert_eq(gpu->ops->matmul(gpu, &wg, &x.g, use_bias ? &b.g : NULL, &y.g), SG_OK, "%s", sg_last_error());
				/* 8-bit activations: the GEMV's, and the GEMM's rounded the same way (sg_cu_requant) */
				int q8 = q8_path(&wtypes[c]);
				int bf16 = n > 8 && !strcmp(sg_flag_str("SARAGOSSA_CUDA_GEMM"), "bf16");
				double e = pair_nmse(&y), thr = bf16 ? NMSE_BF16 : q8 ? NMSE_Q8X : NMSE_F32;
				cr_expect(e < thr, "%s K=%lld N=%lld n=%d: nmse %.3g >= %.1g", wtypes[c].name, (long long)K, (long long)N, n, e, thr);
				if (q8 && !bf16) { /* exact: the reference on the activations the GPU rounded */
					pair xr = requantized(&x);
					cr_assert_eq(cpu->ops->matmul(cpu, &wc, &xr.c, use_bias ? &b.c : NULL, &y.c), SG_OK);
					/* the GEMM's f16 operands (SARAGOSSA_CUDA_GEMM_F16) add ~2^-12 of each value */
					int f16 = n > 8 && sg_flag_bool("SARAGOSSA_CUDA_GEMM_F16");
					double ex = pair_nmse(&y), xthr = f16 ? NMSE_F16 : NMSE_F32 * 100;
					cr_expect(ex < xthr, "%s K=%lld n=%d: exact nmse %.3g >= %.1g", wtypes[c].name, (long long)K, n, ex, xthr);
					pair_free(&xr);
				}
				cr_log_info("matmul %s K=%lld n=%d nmse %.3g", wtypes[c].name, (long long)K, n, e);
				pair_free(&x);
				pair_free(&y);
				pair_free(&b);
			}
			gpu->ops->tensor_free(gpu, &wg), cpu->ops->tensor_free(cpu, &wc); /* the CPU may own a repacked copy */
			free_hw(&w);
		}
	}
}

/* tf32x3 as one GEMM (SARAGOSSA_CUDA_GEMM_X3_ONE: the bias inside the product, the depth padded to a
 * multiple of 8: 3 x 40 + 2 becomes 128) and as three GEMMs and a bias kernel: f32 weights read in
 * place, quantized ones through a dequantized tile (8-bit activations off, so both reach this path),
 * with and without bias: both within f32's error of the CPU. */
Test(cuda, gemm_tf32x3_as_one_product_and_as_three_match_cpu)
{
	static const int types[] = {0, 3, 8}; /* F32, Q8_0, Q4_K */
	for (int one = 1; one >= 0; one--) {
		setenv("SARAGOSSA_CUDA_GEMM", "tf32x3", 1);
		setenv("SARAGOSSA_CUDA_GEMM_X3_ONE", one ? "100000" : "0", 1);
		setenv("SARAGOSSA_CUDA_Q8X", "0", 1);
		sg_flags_reload();
		sg_backend *save = gpu;
		sg_cuda_params gp = sg_cuda_default_params();
		cr_assert_eq(sg_cuda_backend_create(&gp, &gpu), SG_OK, "%s", sg_last_error());
		for (int ci = 0; ci < 3; ci++) {
			const wtype *wt = &wtypes[types[ci]];
			for (int kv = 0; kv < 2; kv++) {
				int64_t K = wt->type == SG_TYPE_F32 ? (kv ? 384 : 40) : k_for(wt, kv), N = 45;
				hw w = make_w(wt, N, K);
				sg_btensor wc, wg;
				bind_both(&w, &wc, &wg);
				for (int ti = 0; ti < 4; ti++) {
					int n = ti < 2 ? 9 : 33, use_bias = ti & 1;
					pair x = pair_rand(K, n, 1, 1.0f), y = pair_new(SG_TYPE_F32, N, n, 1, 1), b = pair_rand(N, 1, 1, 1.0f);
					poison(&y);
					cr_assert_eq(cpu->ops->matmul(cpu, &wc, &x.c, use_bias ? &b.c : NULL, &y.c), SG_OK);
					cr_assert_eq(gpu->ops->matmul(gpu, &wg, &x.g, use_bias ? &b.g : NULL, &y.g), SG_OK, "%s", sg_last_error());
					double e = pair_nmse(&y);
					cr_expect(e < NMSE_F32, "x3_one=%d %s K=%lld n=%d bias=%d: nmse %.3g", one, wt->name, (long long)K, n, use_bias, e);
					pair_free(&x);
					pair_free(&y);
					pair_free(&b);
				}
				gpu->ops->tensor_free(gpu, &wg), cpu->ops->tensor_free(cpu, &wc);
				free_hw(&w);
			}
		}
		sg_backend_free(gpu);
		gpu = save;
		unsetenv("SARAGOSSA_CUDA_GEMM");
		unsetenv("SARAGOSSA_CUDA_GEMM_X3_ONE");
		unsetenv("SARAGOSSA_CUDA_Q8X");
		sg_flags_reload();
	}
}

/* SARAGOSSA_CUDA_X3_CACHE: an f32 weight bound for matmul alone (an encoder's) keeps its one-GEMM
 * tf32x3 split after the first GEMM (one entry a weight and bias; the same bits on every later call,
 * those of a weight split per call, within f32's error of the CPU), released with the weight; a
 * weight bound otherwise, or a limit of 0, keeps none. */
Test(cuda, gemm_x3_kept_split_of_matmul_only_weights)
{
	setenv("SARAGOSSA_CUDA_GEMM", "tf32x3", 1);
	setenv("SARAGOSSA_CUDA_GEMM_X3_ONE", "100000", 1);
	for (int lim = 1; lim >= 0; lim--) {
		setenv("SARAGOSSA_CUDA_X3_CACHE", lim ? "64" : "0", 1);
		sg_flags_reload();
		sg_backend *save = gpu;
		sg_cuda_params gp = sg_cuda_default_params();
		cr_assert_eq(sg_cuda_backend_create(&gp, &gpu), SG_OK, "%s", sg_last_error());
		sg_cuda_backend *cb = (sg_cuda_backend *)gpu;
		const int64_t K = 384, N = 200, n = 40;
		hw w = make_w(&wtypes[0], N, K);
		sg_btensor wc, wg, pc, pg; /* matmul-only; plain */
		w.t.layout = SG_LAYOUT_MATMUL_ONLY;
		bind_both(&w, &wc, &wg);
		w.t.layout = 0;
		bind_both(&w, &pc, &pg);
		pair x = pair_rand(K, n, 1, 1.0f), b = pair_rand(N, 1, 1, 1.0f), b2 = pair_rand(N, 1, 1, 1.0f);
		pair y = pair_new(SG_TYPE_F32, N, n, 1, 1);
		float *out[4];
		const sg_btensor *ws[4] = {&wg, &wg, &pg, &wg};
		const pair *bs[4] = {&b, &b, &b, &b2};
		const int want[4] = {1, 1, 1, 2};
		for (int i = 0; i < 4; i++) {
			poison(&y);
			cr_assert_eq(cpu->ops->matmul(cpu, &wc, &x.c, &bs[i]->c, &y.c), SG_OK);
			cr_assert_eq(gpu->ops->matmul(gpu, ws[i], &x.g, &bs[i]->g, &y.g), SG_OK, "%s", sg_last_error());
			double e = pair_nmse(&y);
			cr_expect(e < NMSE_F32, "limit %d call %d: nmse %.3g", lim, i, e);
			cr_expect_eq(cb->n_x3c, lim ? want[i] : 0, "limit %d call %d: %d weights kept", lim, i, cb->n_x3c);
			out[i] = fetch(&y);
		}
		cr_expect(!memcmp(out[0], out[1], sizeof(float) * (size_t)(N * n)), "limit %d: the kept split changed the bits", lim);
		cr_expect(!memcmp(out[0], out[2], sizeof(float) * (size_t)(N * n)), "limit %d: the kept split is not the per-call split", lim);
		for (int i = 0; i < 4; i++) free(out[i]);
		gpu->ops->tensor_free(gpu, &wg);
		cr_expect_eq(cb->n_x3c, 0, "limit %d: freeing the weight left %d kept", lim, cb->n_x3c);
		cr_expect_eq(cb->x3c_bytes, 0, "limit %d: %zu bytes kept", lim, cb->x3c_bytes);
		gpu->ops->tensor_free(gpu, &pg), cpu->ops->tensor_free(cpu, &wc), cpu->ops->tensor_free(cpu, &pc);
		free_hw(&w);
		pair_free(&x), pair_free(&b), pair_free(&b2), pair_free(&y);
		sg_backend_free(gpu);
		gpu = save;
	}
	unsetenv("SARAGOSSA_CUDA_GEMM");
	unsetenv("SARAGOSSA_CUDA_GEMM_X3_ONE");
	unsetenv("SARAGOSSA_CUDA_X3_CACHE");
	sg_flags_reload();
}

/* SARAGOSSA_CUDA_SHARED_X: an encoder's q, k and v (matmul_multi of matmul-only f32 weights over one
 * x, many tokens) split x once for the three; each output the bits of its own matmul, with widths
 * 200, 64 and 200; a plain weight among them takes the one-by-one path, the same bits again. */
Test(cuda, matmul_multi_shares_one_split_of_x)
{
	setenv("SARAGOSSA_CUDA_GEMM", "tf32x3", 1);
	sg_flags_reload();
	sg_backend *save = gpu;
	sg_cuda_params gp = sg_cuda_default_params();
	cr_assert_eq(sg_cuda_backend_create(&gp, &gpu), SG_OK, "%s", sg_last_error());
	const int64_t K = 384, n = 40, Ns[3] = {200, 64, 200};
	hw w[3];
	sg_btensor wg[3], wc[3], pg, pc;
	pair b[3], y[3], ym[3];
	pair x = pair_rand(K, n, 1, 1.0f);
	for (int i = 0; i < 3; i++) {
		w[i] = make_w(&wtypes[0], Ns[i], K);
		w[i].t.layout = SG_LAYOUT_MATMUL_ONLY;
		bind_both(&w[i], &wc[i], &wg[i]);
		b[i] = pair_rand(Ns[i], 1, 1, 1.0f);
		y[i] = pair_new(SG_TYPE_F32, Ns[i], n, 1, 1);
		ym[i] = pair_new(SG_TYPE_F32, Ns[i], n, 1, 1);
	}
	w[2].t.layout = 0;
	bind_both(&w[2], &pc, &pg);
	for (int round = 0; round < 2; round++) { /* 0: all kept; 1: the third a plain weight */
		sg_matmul_multi m = {.x = &x.g, .nw = 3, .w = {&wg[0], &wg[1], round ? &pg : &wg[2]}, .bias = {&b[0].g, &b[1].g, &b[2].g},
				     .y = {&ym[0].g, &ym[1].g, &ym[2].g}};
		for (int i = 0; i < 3; i++) {
			poison(&y[i]), poison(&ym[i]);
			cr_assert_eq(gpu->ops->matmul(gpu, m.w[i], &x.g, &b[i].g, &y[i].g), SG_OK, "%s", sg_last_error());
		}
		cr_assert_eq(sg_backend_matmul_multi(gpu, &m), SG_OK, "%s", sg_last_error());
		for (int i = 0; i < 3; i++) {
			float *a = fetch(&y[i]), *c = fetch(&ym[i]);
			cr_expect(!memcmp(a, c, sizeof(float) * (size_t)(Ns[i] * n)), "round %d output %d: not its matmul's bits", round, i);
			cr_assert_eq(cpu->ops->matmul(cpu, &wc[i], &x.c, &b[i].c, &ym[i].c), SG_OK);
			double e = pair_nmse(&ym[i]);
			cr_expect(e < NMSE_F32, "round %d output %d: nmse %.3g against the CPU", round, i, e);
			free(a), free(c);
		}
	}
	for (int i = 0; i < 3; i++) {
		gpu->ops->tensor_free(gpu, &wg[i]), cpu->ops->tensor_free(cpu, &wc[i]);
		free_hw(&w[i]);
		pair_free(&b[i]), pair_free(&y[i]), pair_free(&ym[i]);
	}
	gpu->ops->tensor_free(gpu, &pg), cpu->ops->tensor_free(cpu, &pc);
	pair_free(&x);
	sg_backend_free(gpu);
	gpu = save;
	unsetenv("SARAGOSSA_CUDA_GEMM");
	sg_flags_reload();
}

/* Every unit GEMV path of the launcher: f32 activations (q8 scratch not given) exactly against
 * f32 activations, 8-bit ones (the block-split kernel; for one token of a block-per-lane format also
 * with that kernel, the policy's default) exactly against the activations they round. */
Test(cuda, every_gemv_path_matches_cpu_reference)
{
	for (int c = 3; c < N_WTYPES; c++) {
		if (!q8_kernels(&wtypes[c])) continue;
		int64_t K = k_for(&wtypes[c], 1), N = 77;
		hw w = make_w(&wtypes[c], N, K);
		sg_btensor wc, wg;
		bind_both(&w, &wc, &wg);
		sg_cuw v;
		cr_assert_eq(sg_cuda_weight_view(&wg, &v), SG_OK);
		for (int n = 1; n <= 3; n += 2) {
			pair x = pair_rand(K, n, 1, 1.0f), xr = requantized(&x), y = pair_new(SG_TYPE_F32, N, n, 1, 1);
			pair q8 = pair_new(SG_TYPE_I32, (int64_t)(sg_cu_q8_bytes(n, K) / 4 + 1), 1, 1, 1);
			static const char *path[3] = {"f32 activations", "8-bit, block-split", "8-bit, the policy's"};
			for (int pi = 0; pi < 3; pi++) {
				poison(&y);
				cr_assert_eq(gpu->ops->sync(gpu), SG_OK);
				set_gemv_sb(pi == 2);
				cr_assert_eq(sg_cu_gemv(&v, x.g.data, n, y.g.data, N, NULL, pi ? q8.g.data : NULL, NULL), 0, "%s %s", wtypes[c].name, path[pi]);
				cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
				sg_cu_policy_load();
				cr_assert_eq(cpu->ops->matmul(cpu, &wc, pi ? &xr.c : &x.c, NULL, &y.c), SG_OK);
				double e = pair_nmse(&y);
				cr_expect(e < NMSE_F32 * 100, "%s n=%d %s: nmse %.3g", wtypes[c].name, n, path[pi], e);
			}
			pair_free(&x), pair_free(&xr), pair_free(&y), pair_free(&q8);
		}
		gpu->ops->tensor_free(gpu, &wg), cpu->ops->tensor_free(cpu, &wc); /* the CPU may own a repacked copy */
		free_hw(&w);
	}
}

Test(cuda, embed_of_repacked_weights_equals_reference_dequantizer_and_zeroes_bad_ids)
{
	for (int c = 0; c < N_WTYPES; c++) {
		int64_t K = k_for(&wtypes[c], 1), V = 11;
		hw w = make_w(&wtypes[c], V, K);
		sg_btensor wc, wg;
		bind_both(&w, &wc, &wg);
		int32_t idv[6] = {3, 0, 10, -1, 7, 11};
		pair ids = pair_i32(6, 1, idv), out = pair_new(SG_TYPE_F32, K, 6, 1, 1);
		poison(&out);
		cr_assert_eq(gpu->ops->embed(gpu, &wg, &ids.g, &out.g), SG_OK, "%s", sg_last_error());
		float *g = fetch(&out), *ref = calloc((size_t)K, sizeof(float));
		size_t rb = wtypes[c].type == SG_TYPE_MLX_AFFINE ? (size_t)K / 8 * (size_t)wtypes[c].bits : sg_type_row_bytes(wtypes[c].type, K);
		for (int t = 0; t < 6; t++) {
			int32_t id = idv[t];
			if (id >= 0 && id < V) {
				if (wtypes[c].type == SG_TYPE_MLX_AFFINE) {
					size_t sb = (size_t)(K / wtypes[c].group);
					sg_mlx_dequantize_row_ref(&w.t.mlx, (const uint32_t *)(w.mem + rb * (size_t)id), w.sc + sb * (size_t)id,
								  w.bi + sb * (size_t)id, ref, K);
				} else {
					sg_dequantize_ref(wtypes[c].type, w.mem + rb * (size_t)id, ref, K);
				}
			} else {
				memset(ref, 0, sizeof(float) * (size_t)K);
			}
			double e = nmse(ref, g + t * K, K);
			cr_expect(e < 1e-12, "%s id %d: nmse %.3g", wtypes[c].name, id, e);
		}
		free(g);
		free(ref);
		pair_free(&ids);
		pair_free(&out);
		gpu->ops->tensor_free(gpu, &wg), cpu->ops->tensor_free(cpu, &wc); /* the CPU may own a repacked copy */
		free_hw(&w);
	}
}

/* A table asked to keep the file's row order (sg_btensor.layout -1, as Gemma 4 binds its
 * per-layer embeddings before viewing [V][L*P] as [V*L][P]): MLX 4-bit rows of whole 256-blocks
 * stay unplanar, so the shorter-row view gathers the reference rows; bound normally they are
 * planar (layout 1). Q4_K, whose rows are always planar on the GPU, refuses the request. */
Test(cuda, rows_kept_in_file_order_survive_a_shorter_row_view)
{
	const wtype *wt = &wtypes[12]; /* MLX4 g64 f16 */
	int64_t L = 4, P = 256, V = 5, K = L * P;
	hw w = make_w(wt, V, K);
	sg_btensor wg = w.t, wp = w.t;
	wg.layout = -1;
	cr_assert_eq(gpu->ops->tensor_bind(gpu, &wg), SG_OK, "%s", sg_last_error());
	cr_expect_eq(wg.layout, 0);
	cr_assert_eq(gpu->ops->tensor_bind(gpu, &wp), SG_OK, "%s", sg_last_error());
	cr_expect_eq(wp.layout, 1);
	sg_btensor v = wg;
	v.ne[0] = P, v.ne[1] = V * L, v.row_bytes /= (size_t)L;
	int32_t idv[4] = {0, 7, 13, 19}; /* row id * L + layer */
	pair ids = pair_i32(4, 1, idv), out = pair_new(SG_TYPE_F32, P, 4, 1, 1);
	poison(&out);
	cr_assert_eq(gpu->ops->embed(gpu, &v, &ids.g, &out.g), SG_OK, "%s", sg_last_error());
	float *g = fetch(&out), *ref = malloc(sizeof(float) * (size_t)K);
	size_t rb = (size_t)K / 2, sb = (size_t)(K / wt->group);
	for (int t = 0; t < 4; t++) {
		int64_t r = idv[t] / L, l = idv[t] % L;
		sg_mlx_dequantize_row_ref(&w.t.mlx, (const uint32_t *)(w.mem + rb * (size_t)r), w.sc + sb * (size_t)r, w.bi + sb * (size_t)r, ref, K);
		double e = nmse(ref + l * P, g + t * P, P);
		cr_expect(e < 1e-12, "view row %d: nmse %.3g", idv[t], e);
	}
	free(g), free(ref);
	pair_free(&ids), pair_free(&out);
	gpu->ops->tensor_free(gpu, &wg), gpu->ops->tensor_free(gpu, &wp);
	free_hw(&w);
	hw q = make_w(&wtypes[8], 4, 512);
	sg_btensor qg = q.t;
	qg.layout = -1;
	cr_expect_eq(gpu->ops->tensor_bind(gpu, &qg), SG_ERR_UNSUPPORTED);
	free_hw(&q);
}

Test(cuda, moe_matmul_reads_selected_experts_and_zeroes_bad_ids)
{
	static const int tys[] = {2, 8, 10, 12};
	for (int ci = 0; ci < 4; ci++) {
		const wtype *wt = &wtypes[tys[ci]];
		int64_t E = 6, N = 40, K = k_for(wt, 0), k = 2;
		hw w = make_w(wt, E * N, K);
		w.t.ne[1] = N;
		w.t.ne[2] = E;
		sg_btensor wc, wg;
		bind_both(&w, &wc, &wg);
		for (int n = 1; n <= 5; n += 4) {
			for (int shared = 0; shared < 2; shared++) {
				int32_t idv[10];
				for (int i = 0; i < n * k; i++) idv[i] = (int32_t)((i * 5 + 1) % E);
				if (n > 1) idv[3] = 99; /* out of range: zero row */
				if (n == 1 && shared) idv[1] = -1; /* the one-token kernel too */
				pair ids = pair_i32(k, n, idv), x = pair_rand(K, shared ? n : n * k, 1, 1.0f), y = pair_new(SG_TYPE_F32, N, n * k, 1, 1);
				poison(&y);
				pair xr = q8_path(wt) ? requantized(&x) : x;
				cpu->ops->moe_matmul(cpu, &wc, &xr.c, &ids.c, &y.c);
				if (q8_path(wt)) pair_free(&xr);
				cr_assert_eq(gpu->ops->moe_matmul(gpu, &wg, &x.g, &ids.g, &y.g), SG_OK, "%s", sg_last_error());
				double e = pair_nmse(&y);
				cr_expect(e < NMSE_F32 * 100, "%s n=%d shared=%d: nmse %.3g", wt->name, n, shared, e);
				pair_free(&ids);
				pair_free(&x);
				pair_free(&y);
			}
		}
		gpu->ops->tensor_free(gpu, &wg), cpu->ops->tensor_free(cpu, &wc); /* the CPU may own a repacked copy */
		free_hw(&w);
	}
}

/* The expert slot cache's device slots: experts uploaded one by one (expert_upload: repacked on
 * the device, or on the host with the kill-switch) into a pool, read through a slot table, give
 * the bound stack's outputs bit for bit: one token (the fused gate/up kernel against the slot
 * path's composition), a few tokens (the grouped GEMV) and 70 (the grouped GEMM's dequantizer
 * reading experts a slot stride apart). */
Test(cuda, moe_through_device_slots_equals_the_bound_stack_bit_for_bit)
{
	static const int tys[] = {2, 3, 4, 5, 6, 7, 8, 9, 10}; /* BF16, the legacy 32-blocks, the K-quants */
	sg_cuda_backend *cb = (sg_cuda_backend *)gpu;
	for (int ci = 0; ci < (int)(sizeof tys / sizeof tys[0]); ci++) {
		const wtype *wt = &wtypes[tys[ci]];
		int64_t E = 6, N = 40, K = k_for(wt, 1), k = 2;
		hw w = make_w(wt, E * N, K);
		w.t.ne[1] = N;
		w.t.ne[2] = E;
		sg_btensor wg = w.t;
		cr_assert_eq(gpu->ops->tensor_bind(gpu, &wg), SG_OK, "%s", sg_last_error());
		sg_btensor stack = w.t; /* a deferred stack: type and shape, no data */
		stack.data = NULL;
		size_t eb = gpu->ops->expert_bytes(gpu, &stack), stride = (eb + 255) & ~(size_t)255;
		cr_assert(eb > 0, "%s: no slot layout", wt->name);
		const int32_t slot_of[6] = {2, -1, 1, 3, -1, 0}; /* experts 1 and 4 not resident */
		sg_btensor pool, map;
		int64_t pne[4] = {(int64_t)(stride / 4), 4, 1, 1}, mne[4] = {E, 1, 1, 1};
		cr_assert_eq(gpu->ops->tensor_alloc(gpu, SG_TYPE_I32, pne, &pool), SG_OK);
		cr_assert_eq(gpu->ops->tensor_alloc(gpu, SG_TYPE_I32, mne, &map), SG_OK);
		cr_assert_eq(gpu->ops->write(gpu, &map, 0, slot_of, sizeof slot_of), SG_OK);
		size_t erb = sg_type_row_bytes(wt->type, K);
		for (int repack = 0; repack < 2; repack++) {
			cb->xrepack = repack;
			for (int e = 0; e < E; e++)
				if (slot_of[e] >= 0)
					cr_assert_eq(gpu->ops->expert_upload(gpu, &stack, w.mem + (size_t)e * (size_t)N * erb,
									     (uint8_t *)pool.data + (size_t)slot_of[e] * stride), SG_OK, "%s", sg_last_error());
			sg_expert_table tb = {.n_expert = E, .slot = map.data, .base = pool.data, .stride = stride, .n_slots = 4};
			sg_btensor ws = stack;
			ws.experts = &tb;
			static const int ns[] = {1, 3, 70};
			for (int ni = 0; ni < 3; ni++) {
				int n = ns[ni];
				int32_t *idv = malloc(sizeof(int32_t) * (size_t)(n * k));
				static const int32_t resident[4] = {0, 2, 3, 5};
				for (int i = 0; i < n * k; i++) idv[i] = resident[(i * 3 + i / 5) % 4];
				if (n == 1) idv[1] = idv[0] == 0 ? 5 : 0;
				pair ids = pair_i32(k, n, idv), x = pair_rand(K, n, 1, 1.0f), y1 = pair_new(SG_TYPE_F32, N, n * k, 1, 1),
				     y2 = pair_new(SG_TYPE_F32, N, n * k, 1, 1), u1 = pair_new(SG_TYPE_F32, N, n * k, 1, 1),
				     u2 = pair_new(SG_TYPE_F32, N, n * k, 1, 1);
				cr_assert_eq(gpu->ops->moe_matmul(gpu, &wg, &x.g, &ids.g, &y1.g), SG_OK, "%s", sg_last_error());
				cr_assert_eq(gpu->ops->moe_matmul(gpu, &ws, &x.g, &ids.g, &y2.g), SG_OK, "%s", sg_last_error());
				float *a = fetch(&y1), *b = fetch(&y2);
				cr_expect(!memcmp(a, b, sizeof(float) * (size_t)(N * n * k)), "%s repack %d n=%d: moe_matmul through slots differs", wt->name, repack, n);
				free(a), free(b);
				if (n == 1) { /* gate and up with the GLU: the bound stack's fused kernel against the slots' composition */
					cr_assert_eq(sg_backend_moe_glu(gpu, &wg, &wg, &x.g, &ids.g, SG_ACT_SILU, &y1.g, &u1.g), SG_OK, "%s", sg_last_error());
					cr_assert_eq(sg_backend_moe_glu(gpu, &ws, &ws, &x.g, &ids.g, SG_ACT_SILU, &y2.g, &u2.g), SG_OK, "%s", sg_last_error());
					a = fetch(&y1), b = fetch(&y2);
					cr_expect(!memcmp(a, b, sizeof(float) * (size_t)(N * k)), "%s repack %d: moe_glu through slots differs", wt->name, repack);
					free(a), free(b);
				}
				pair_free(&ids), pair_free(&x), pair_free(&y1), pair_free(&y2), pair_free(&u1), pair_free(&u2);
				free(idv);
			}
		}
		cb->xrepack = sg_flag_bool("SARAGOSSA_CUDA_EXPERT_REPACK");
		gpu->ops->tensor_free(gpu, &pool), gpu->ops->tensor_free(gpu, &map), gpu->ops->tensor_free(gpu, &wg);
		free_hw(&w);
	}
}

/* --- the MoE GEMM path (SARAGOSSA_CUDA_MOE_GEMM) --- */

/* Its outputs against the reference fed the same 8-bit rounded inputs differ by three f16
 * roundings (the inputs, the dequantized weights, the outputs: relative 2^-11 each, NMSE ~3e-7
 * measured by estimate); against the grouped GEMV (exact on those inputs) the same. A wrong
 * expert, slot or row scale gives ~1. */
#define NMSE_MOE_GEMM 1e-5

/* moe_matmul on a backend created with SARAGOSSA_CUDA_MOE_GEMM = flag (its own weight upload):
 * x host [nx][K], ids host [n][k]; returns y [n*k][N] (malloc), rows first poisoned with NaN. */
static float *moe_gpu(const char *flag, const hw *w, const float *xh, int64_t nx, const int32_t *idv, int64_t n, int64_t k)
{
	int64_t K = w->t.ne[0], N = w->t.ne[1];
	setenv("SARAGOSSA_CUDA_MOE_GEMM", flag, 1);
	sg_flags_reload(); /* flags are read once per process otherwise */
	sg_backend *g = NULL;
	sg_cuda_params gp = sg_cuda_default_params();
	cr_assert_eq(sg_cuda_backend_create(&gp, &g), SG_OK, "%s", sg_last_error());
	unsetenv("SARAGOSSA_CUDA_MOE_GEMM");
	sg_flags_reload();
	sg_btensor wg = w->t, x, ids, y;
	cr_assert_eq(g->ops->tensor_bind(g, &wg), SG_OK, "%s", sg_last_error());
	int64_t nex[4] = {K, nx, 1, 1}, nei[4] = {k, n, 1, 1}, ney[4] = {N, n * k, 1, 1};
	cr_assert_eq(g->ops->tensor_alloc(g, SG_TYPE_F32, nex, &x), SG_OK);
	cr_assert_eq(g->ops->tensor_alloc(g, SG_TYPE_I32, nei, &ids), SG_OK);
	cr_assert_eq(g->ops->tensor_alloc(g, SG_TYPE_F32, ney, &y), SG_OK);
	size_t yb = sizeof(float) * (size_t)(n * k * N);
	float *out = malloc(yb);
	memset(out, 0xff, yb);
	cr_assert_eq(g->ops->write(g, &x, 0, xh, sizeof(float) * (size_t)(nx * K)), SG_OK);
	cr_assert_eq(g->ops->write(g, &ids, 0, idv, sizeof(int32_t) * (size_t)(n * k)), SG_OK);
	cr_assert_eq(g->ops->write(g, &y, 0, out, yb), SG_OK);
	cr_assert_eq(g->ops->moe_matmul(g, &wg, &x, &ids, &y), SG_OK, "%s", sg_last_error());
	cr_assert_eq(g->ops->read(g, &y, 0, out, yb), SG_OK, "%s", sg_last_error());
	g->ops->tensor_free(g, &x), g->ops->tensor_free(g, &ids), g->ops->tensor_free(g, &y), g->ops->tensor_free(g, &wg);
	sg_backend_free(g);
	return out;
}

static float *requant_host(const float *x, int64_t n)
{
	float *o = malloc(sizeof(float) * (size_t)n);
	requant_into(x, o, n);
	return o;
}

/* The CPU backend's moe_matmul on host data; y [n*k][N] (malloc). */
static float *moe_cpu(const hw *w, const float *xh, int64_t nx, const int32_t *idv, int64_t n, int64_t k)
{
	int64_t K = w->t.ne[0], N = w->t.ne[1];
	sg_btensor wc = w->t, x, ids, y;
	cr_assert_eq(cpu->ops->tensor_bind(cpu, &wc), SG_OK, "%s", sg_last_error());
	int64_t nex[4] = {K, nx, 1, 1}, nei[4] = {k, n, 1, 1}, ney[4] = {N, n * k, 1, 1};
	cr_assert_eq(cpu->ops->tensor_alloc(cpu, SG_TYPE_F32, nex, &x), SG_OK);
	cr_assert_eq(cpu->ops->tensor_alloc(cpu, SG_TYPE_I32, nei, &ids), SG_OK);
	cr_assert_eq(cpu->ops->tensor_alloc(cpu, SG_TYPE_F32, ney, &y), SG_OK);
	memcpy(x.data, xh, sizeof(float) * (size_t)(nx * K));
	memcpy(ids.data, idv, sizeof(int32_t) * (size_t)(n * k));
	cr_assert_eq(cpu->ops->moe_matmul(cpu, &wc, &x, &ids, &y), SG_OK, "%s", sg_last_error());
	float *out = malloc(sizeof(float) * (size_t)(n * k * N));
	memcpy(out, y.data, sizeof(float) * (size_t)(n * k * N));
	cpu->ops->tensor_free(cpu, &x), cpu->ops->tensor_free(cpu, &ids), cpu->ops->tensor_free(cpu, &y), cpu->ops->tensor_free(cpu, &wc);
	return out;
}

/* Rows of slots whose id is out of range are exactly zero (not NaN: the poison was overwritten). */
static int bad_rows_zero(const float *y, const int32_t *idv, int64_t S, int64_t E, int64_t N)
{
	for (int64_t s = 0; s < S; s++)
		if (idv[s] < 0 || idv[s] >= E)
			for (int64_t r = 0; r < N; r++)
				if (y[s * N + r] != 0.0f) return 0;
	return 1;
}

static const wtype moe_wtypes[] = {
	{SG_TYPE_Q4_K, 0, 0, 0, "Q4_K"}, {SG_TYPE_Q6_K, 0, 0, 0, "Q6_K"}, {SG_TYPE_MLX_AFFINE, 4, 64, 1, "MLX4 g64"}};

/*
 * 200 tokens of 8 slots over 16 experts of [96][256]: expert 0 takes a slot of every token,
 * experts 5 and 11 none, expert 15 one; a few slots name experts 99 and -1 (zero rows). The
 * GEMM path (SARAGOSSA_CUDA_MOE_GEMM=1) against the CPU fed the same 8-bit rounded inputs and fed
 * the f32 ones, and against the grouped GEMV (=0), for shared [n][K] and per-slot [n*k][K] inputs.
 */
Test(cuda, moe_gemm_path_matches_cpu_and_grouped_gemv)
{
	const int64_t E = 16, N = 96, K = 256, n = 200, k = 8, S = n * k;
	static const int32_t pool[12] = {1, 2, 3, 4, 6, 7, 8, 9, 10, 12, 13, 14};
	int32_t *idv = malloc(sizeof(int32_t) * (size_t)S);
	for (int64_t t = 0; t < n; t++) {
		idv[t * k] = 0;
		for (int64_t j = 1; j < k; j++) idv[t * k + j] = pool[(t + j) % 12]; /* distinct within a token */
		if (t % 37 == 5) idv[t * k + 3] = 99;
		if (t % 41 == 7) idv[t * k + 6] = -1;
	}
	idv[17 * k + 5] = 15;
	for (int c = 0; c < 3; c++) {
		const wtype *wt = &moe_wtypes[c];
		hw w = make_w(wt, E * N, K);
		w.t.ne[1] = N;
		w.t.ne[2] = E;
		for (int shared = 1; shared >= 0; shared--) {
			int64_t nx = shared ? n : S;
			float *xh = malloc(sizeof(float) * (size_t)(nx * K));
			for (int64_t i = 0; i < nx * K; i++) xh[i] = grand();
			float *xr = requant_host(xh, nx * K);
			float *yg = moe_gpu("1", &w, xh, nx, idv, n, k), *yv = moe_gpu("0", &w, xh, nx, idv, n, k);
			float *yr = moe_cpu(&w, xr, nx, idv, n, k), *yc = moe_cpu(&w, xh, nx, idv, n, k);
			double er = nmse(yr, yg, S * N), ec = nmse(yc, yg, S * N), ev = nmse(yv, yg, S * N);
			cr_expect(er < NMSE_MOE_GEMM, "%s shared=%d: GEMM vs CPU on the rounded inputs: nmse %.3g", wt->name, shared, er);
			cr_expect(ec < NMSE_Q8X, "%s shared=%d: GEMM vs CPU on f32 inputs: nmse %.3g", wt->name, shared, ec);
			cr_expect(ev < NMSE_MOE_GEMM, "%s shared=%d: GEMM vs grouped GEMV: nmse %.3g", wt->name, shared, ev);
			/* the f16 roundings make the two paths differ: equal outputs mean the GEMM path never ran */
			cr_expect(ev > 0, "%s shared=%d: GEMM and GEMV outputs are identical (GEMM path not taken?)", wt->name, shared);
			cr_expect(bad_rows_zero(yg, idv, S, E, N), "%s shared=%d: a slot with an id out of range is not zero", wt->name, shared);
			cr_log_info("moe gemm %s shared=%d: nmse vs rounded CPU %.3g, f32 CPU %.3g, GEMV %.3g", wt->name, shared, er, ec, ev);
			free(xh), free(xr), free(yg), free(yv), free(yr), free(yc);
		}
		free_hw(&w);
	}
	free(idv);
}

/*
 * Experts of [1024][1024] (2 MB each in f16): the 36 used of 40 take two weight tiles of 64 MB
 * (32 experts, then 4), with runs of consecutive experts broken by the unused ones (4, 13, 22,
 * 31). GEMM path against the grouped GEMV only (the GEMV path has its CPU parity test).
 */
Test(cuda, moe_gemm_path_over_several_weight_tiles_matches_grouped_gemv)
{
	const int64_t E = 40, N = 1024, K = 1024, n = 64, k = 8, S = n * k;
	int32_t *idv = malloc(sizeof(int32_t) * (size_t)S);
	for (int64_t t = 0; t < n; t++)
		for (int64_t j = 0; j < k; j++) {
			int32_t e = (int32_t)((t * 7 + j * 5) % E); /* distinct within a token: 5j mod 40 */
			idv[t * k + j] = e % 9 == 4 ? e + 1 : e;  /* 4, 13, 22, 31 unused (e + 1 is not 5j away) */
		}
	for (int c = 0; c < 3; c += 2) {
		const wtype *wt = &moe_wtypes[c];
		hw w = make_w(wt, E * N, K);
		w.t.ne[1] = N;
		w.t.ne[2] = E;
		float *xh = malloc(sizeof(float) * (size_t)(n * K));
		for (int64_t i = 0; i < n * K; i++) xh[i] = grand();
		float *yg = moe_gpu("1", &w, xh, n, idv, n, k), *yv = moe_gpu("0", &w, xh, n, idv, n, k);
		double ev = nmse(yv, yg, S * N);
		cr_expect(ev < NMSE_MOE_GEMM && ev > 0, "%s: GEMM vs grouped GEMV over two tiles: nmse %.3g", wt->name, ev);
		cr_log_info("moe gemm %s two tiles: nmse vs GEMV %.3g", wt->name, ev);
		free(xh), free(yg), free(yv);
		free_hw(&w);
	}
	free(idv);
}

/* The fused one-token gate/up/GLU (moe_glu) gives the bits of its composition on the GPU (two
 * moe_matmul calls and glu), bad ids included, and matches the CPU's composition. */
Test(cuda, moe_glu_one_token_equals_its_composition)
{
	static const int tys[] = {8, 10, 12, 3};
	static const sg_act acts[] = {SG_ACT_SILU, SG_ACT_GELU_TANH};
	for (int ci = 0; ci < 4; ci++) {
		const wtype *wt = &wtypes[tys[ci]];
		int64_t E = 6, N = 72, K = k_for(wt, 1), k = 4;
		hw wgh = make_w(wt, E * N, K), wuh = make_w(wt, E * N, K);
		wgh.t.ne[1] = wuh.t.ne[1] = N;
		wgh.t.ne[2] = wuh.t.ne[2] = E;
		sg_btensor gc, gg, uc, ug;
		bind_both(&wgh, &gc, &gg);
		bind_both(&wuh, &uc, &ug);
		int32_t idv[4] = {3, 0, 5, 1};
		if (ci == 1) idv[2] = 77; /* out of range: a zero row either way */
		pair ids = pair_i32(k, 1, idv), x = pair_rand(K, 1, 1, 1.0f);
		for (int ai = 0; ai < 2; ai++) {
			pair g = pair_new(SG_TYPE_F32, N, k, 1, 1), u = pair_new(SG_TYPE_F32, N, k, 1, 1);
			pair g2 = pair_new(SG_TYPE_F32, N, k, 1, 1), u2 = pair_new(SG_TYPE_F32, N, k, 1, 1);
			poison(&g);
			cr_assert_eq(sg_backend_moe_glu(gpu, &gg, &ug, &x.g, &ids.g, acts[ai], &g.g, &u.g), SG_OK, "%s", sg_last_error());
			cr_assert_eq(sg_backend_moe_glu_compose(gpu, &gg, &ug, &x.g, &ids.g, acts[ai], &g2.g, &u2.g), SG_OK, "%s", sg_last_error());
			float *a = fetch(&g), *b = fetch(&g2);
			cr_expect(!memcmp(a, b, sizeof(float) * (size_t)(N * k)), "%s act %d: fused differs from the composition", wt->name, (int)acts[ai]);
			if (ci == 1)
				for (int64_t r = 0; r < N; r++) cr_expect(a[2 * N + r] == 0.0f, "%s: bad id row %lld = %g", wt->name, (long long)r, (double)a[2 * N + r]);
			/* against the CPU on the activations the GPU rounded */
			pair xr = requantized(&x);
			sg_backend_moe_glu(cpu, &gc, &uc, &xr.c, &ids.c, acts[ai], &g.c, &u.c);
			double e = pair_nmse(&g);
			cr_expect(e < NMSE_F32 * 100, "%s act %d: nmse %.3g vs the CPU", wt->name, (int)acts[ai], e);
			free(a), free(b);
			pair *all[] = {&g, &u, &g2, &u2, &xr};
			for (int i = 0; i < 5; i++) pair_free(all[i]);
		}
		pair_free(&ids), pair_free(&x);
		gpu->ops->tensor_free(gpu, &gg), cpu->ops->tensor_free(cpu, &gc);
		gpu->ops->tensor_free(gpu, &ug), cpu->ops->tensor_free(cpu, &uc);
		free_hw(&wgh), free_hw(&wuh);
	}
}

/* The down experts reading their ids before their wait (SARAGOSSA_CUDA_MOE_IDS_EARLY, after a
 * gate/up kernel that triggers late) give the bits of the plain order, over routing, gate/up and
 * down as the forward runs them (each setting twice); moe_glu hands the ids on only from its planar
 * kernel. */
Test(cuda, moe_down_experts_reading_ids_early_changes_nothing)
{
	static const int tys[] = {8, 10, 3};
	for (int c = 0; c < 3; c++) {
		const wtype *wt = &wtypes[tys[c]];
		int64_t E = 32, F = 256, D = 1024, k = 8;
		hw wgh = make_w(wt, E * F, D), wuh = make_w(wt, E * F, D), wdh = make_w(wt, E * D, F);
		wgh.t.ne[1] = wuh.t.ne[1] = F, wdh.t.ne[1] = D;
		wgh.t.ne[2] = wuh.t.ne[2] = wdh.t.ne[2] = E;
		sg_btensor gc, gg, uc, ug, dc, dg;
		bind_both(&wgh, &gc, &gg), bind_both(&wuh, &uc, &ug), bind_both(&wdh, &dc, &dg);
		pair x = pair_rand(D, 1, 1, 1.0f), lg = pair_rand(E, 1, 1, 2.0f);
		float *got[4], *gg4[4];
		for (int v = 0; v < 4; v++) {
			int on = v >> 1;
			set_moe_ids_early(on);
			pair ids = pair_new(SG_TYPE_I32, k, 1, 1, 1), w = pair_new(SG_TYPE_F32, k, 1, 1, 1),
			     g = pair_new(SG_TYPE_F32, F, k, 1, 1), u = pair_new(SG_TYPE_F32, F, k, 1, 1),
			     ey = pair_new(SG_TYPE_F32, D, k, 1, 1);
			poison(&ey);
			cr_assert_eq(gpu->ops->moe_route(gpu, &lg.g, SG_ROUTER_SOFTMAX, (int)k, 1, &ids.g, &w.g), SG_OK, "%s", sg_last_error());
			cr_assert_eq(sg_backend_moe_glu(gpu, &gg, &ug, &x.g, &ids.g, SG_ACT_SILU, &g.g, &u.g), SG_OK, "%s", sg_last_error());
			const void *handed = ((sg_cuda_backend *)gpu)->moe_ids_done;
			cr_expect(handed == (on && c < 2 ? ids.g.data : NULL), "%s flag %d: ids handed on %p", wt->name, on, handed);
			cr_assert_eq(gpu->ops->moe_matmul(gpu, &dg, &g.g, &ids.g, &ey.g), SG_OK, "%s", sg_last_error());
			cr_expect(((sg_cuda_backend *)gpu)->moe_ids_done == NULL, "the down experts take the hint once");
			got[v] = fetch(&ey), gg4[v] = fetch(&g);
			pair_free(&ids), pair_free(&w), pair_free(&g), pair_free(&u), pair_free(&ey);
		}
		sg_cu_policy_load(); /* as the backend set it */
		for (int v = 1; v < 4; v++) {
			cr_expect(memcmp(got[0], got[v], sizeof(float) * (size_t)(D * k)) == 0, "%s: the down experts differ (variant %d)", wt->name, v);
			cr_expect(memcmp(gg4[0], gg4[v], sizeof(float) * (size_t)(F * k)) == 0, "%s: the gate/up experts differ (variant %d)", wt->name,
				  v);
		}
		for (int v = 0; v < 4; v++) free(got[v]), free(gg4[v]);
		pair_free(&x), pair_free(&lg);
		gpu->ops->tensor_free(gpu, &gg), cpu->ops->tensor_free(cpu, &gc);
		gpu->ops->tensor_free(gpu, &ug), cpu->ops->tensor_free(cpu, &uc);
		gpu->ops->tensor_free(gpu, &dg), cpu->ops->tensor_free(cpu, &dc);
		free_hw(&wgh), free_hw(&wuh), free_hw(&wdh);
	}
}

/* One token's buffers of an MoE router stage and its gate/up experts: xn [K], logits [E], ids and
 * weights [k], the experts' g and u [k][N]. */
typedef struct {
	pair xn, rl, ids, w, g, u;
} moe_bufs;
static moe_bufs moe_bufs_new(int64_t K, int64_t E, int64_t k, int64_t N)
{
	moe_bufs b = {pair_new(SG_TYPE_F32, K, 1, 1, 1), pair_new(SG_TYPE_F32, E, 1, 1, 1), pair_new(SG_TYPE_I32, k, 1, 1, 1),
	              pair_new(SG_TYPE_F32, k, 1, 1, 1), pair_new(SG_TYPE_F32, N, k, 1, 1), pair_new(SG_TYPE_F32, N, k, 1, 1)};
	return b;
}
static void moe_bufs_free(moe_bufs *b)
{
	pair *all[] = {&b->xn, &b->rl, &b->ids, &b->w, &b->g, &b->u};
	for (int i = 0; i < 6; i++) pair_free(all[i]);
}

/* The MoE norm + router stage with the feeds_moe hint hands the gate/up experts x already rounded
 * to 8 bits (one token, rows of >= 1024 values): the normalised x, the routing and the experts'
 * outputs are the bits of the unhinted stage, for an F32 and a Q4_K router; and they agree with
 * the CPU. */
Test(cuda, moe_router_stage_feeding_the_experts_changes_nothing)
{
	int64_t K = 2048, E = 16, N = 96, k = 4;
	const wtype *ewt = &wtypes[8]; /* Q4_K experts */
	hw wgh = make_w(ewt, E * N, K), wuh = make_w(ewt, E * N, K);
	wgh.t.ne[1] = wuh.t.ne[1] = N;
	wgh.t.ne[2] = wuh.t.ne[2] = E;
	sg_btensor gc, gg, uc, ug;
	bind_both(&wgh, &gc, &gg);
	bind_both(&wuh, &uc, &ug);
	for (int rt = 0; rt < 2; rt++) {
		const wtype *rwt = &wtypes[rt ? 8 : 0];
		hw rh = make_w(rwt, E, K);
		sg_btensor rc, rg;
		bind_both(&rh, &rc, &rg);
		pair x = pair_rand(K, 1, 1, 1.0f), nw = pair_rand(K, 1, 1, 1.0f);
		float *got[2][3];
		int32_t gid[2][8];
		for (int hint = 0; hint < 2; hint++) {
			moe_bufs mb = moe_bufs_new(K, E, k, N);
			pair xn = mb.xn, rl = mb.rl, ids = mb.ids, w = mb.w, g = mb.g, u = mb.u;
			sg_matmul_multi r = {.x = &x.g, .norm = &nw.g, .eps = 1e-6f, .xn = &xn.g, .nw = 1,
			                     .w = {&rg}, .y = {&rl.g}, .feeds_moe = hint};
			cr_assert_eq(sg_backend_matmul_multi(gpu, &r), SG_OK, "%s", sg_last_error());
			cr_assert_eq(gpu->ops->moe_route(gpu, &rl.g, SG_ROUTER_SOFTMAX, k, 1, &ids.g, &w.g), SG_OK);
			cr_assert_eq(sg_backend_moe_glu(gpu, &gg, &ug, &xn.g, &ids.g, SG_ACT_SILU, &g.g, &u.g), SG_OK,
			             "%s", sg_last_error());
			got[hint][0] = fetch(&xn), got[hint][1] = fetch(&w), got[hint][2] = fetch(&g);
			cr_assert_eq(gpu->ops->read(gpu, &ids.g, 0, gid[hint], sizeof(int32_t) * (size_t)k), SG_OK);
			if (hint) { /* the CPU on the same routing and the activations the GPU rounded */
				sg_matmul_multi rcpu = {.x = &x.c, .norm = &nw.c, .eps = 1e-6f, .xn = &xn.c, .nw = 1,
				                        .w = {&rc}, .y = {&rl.c}};
				cr_assert_eq(sg_backend_matmul_multi(cpu, &rcpu), SG_OK);
				cr_expect(pair_nmse(&xn) < NMSE_F32, "router %s: normalised x vs the CPU", rwt->name);
				memcpy(ids.c.data, gid[hint], sizeof(int32_t) * (size_t)k);
				pair xr = requantized(&xn);
				sg_backend_moe_glu(cpu, &gc, &uc, &xr.c, &ids.c, SG_ACT_SILU, &g.c, &u.c);
				cr_expect(pair_nmse(&g) < NMSE_F32 * 100, "router %s: experts vs the CPU", rwt->name);
				pair_free(&xr);
			}
			moe_bufs_free(&mb);
		}
		cr_expect(memcmp(gid[0], gid[1], sizeof(int32_t) * (size_t)k) == 0, "router %s: ids differ", rwt->name);
		int64_t n[3] = {K, k, N * k};
		for (int j = 0; j < 3; j++) {
			cr_expect(memcmp(got[0][j], got[1][j], sizeof(float) * (size_t)n[j]) == 0,
			          "router %s: output %d of the hinted stage differs", rwt->name, j);
			free(got[0][j]), free(got[1][j]);
		}
		pair_free(&x), pair_free(&nw);
		gpu->ops->tensor_free(gpu, &rg), cpu->ops->tensor_free(cpu, &rc);
		free_hw(&rh);
	}
	gpu->ops->tensor_free(gpu, &gg), cpu->ops->tensor_free(cpu, &gc);
	gpu->ops->tensor_free(gpu, &ug), cpu->ops->tensor_free(cpu, &uc);
	free_hw(&wgh), free_hw(&wuh);
}

/* moe_combine_add in place (out = residual) gives the bits of moe_combine then add. */
Test(cuda, moe_combine_add_equals_combine_then_add)
{
	int64_t n = 3, k = 8, D = 2048 + 64;
	pair y = pair_rand(D, n * k, 1, 1.0f), w = pair_rand(k, n, 1, 1.0f), x = pair_rand(D, n, 1, 3.0f), x2 = pair_new(SG_TYPE_F32, D, n, 1, 1);
	pair t = pair_new(SG_TYPE_F32, D, n, 1, 1), t2 = pair_new(SG_TYPE_F32, D, n, 1, 1);
	float *x0 = fetch(&x);
	cr_assert_eq(gpu->ops->write(gpu, &x2.g, 0, x0, sizeof(float) * (size_t)(n * D)), SG_OK);
	cr_assert_eq(sg_backend_moe_combine_add(gpu, &y.g, &w.g, &x.g, &x.g, &t.g), SG_OK, "%s", sg_last_error());
	cr_assert_eq(gpu->ops->moe_combine(gpu, &y.g, &w.g, &t2.g), SG_OK);
	cr_assert_eq(gpu->ops->add(gpu, &x2.g, &t2.g, &x2.g), SG_OK);
	float *a = fetch(&x), *b = fetch(&x2);
	cr_expect(!memcmp(a, b, sizeof(float) * (size_t)(n * D)), "fused combine + residual differs from combine then add");
	cr_expect(memcmp(a, x0, sizeof(float) * (size_t)(n * D)), "the residual was not updated");
	free(a), free(b), free(x0);
	pair *all[] = {&y, &w, &x, &x2, &t, &t2};
	for (int i = 0; i < 6; i++) pair_free(all[i]);
}

Test(cuda, unsupported_weight_types_fail_to_bind_with_their_name)
{
	uint8_t buf[84 * 4] = {0};
	sg_btensor t = {.type = SG_TYPE_Q2_K, .ne = {256, 4, 1, 1}, .data = buf};
	cr_assert_eq(gpu->ops->tensor_bind(gpu, &t), SG_ERR_UNSUPPORTED);
	cr_expect(strstr(sg_last_error(), "Q2_K") != NULL, "%s", sg_last_error());
	cr_expect(!sg_backend_supports(gpu, SG_STAGE_MATMUL, SG_TYPE_Q3_K));
	cr_expect(sg_backend_supports(gpu, SG_STAGE_MATMUL, SG_TYPE_Q4_K));
	uint16_t sb[8] = {0};
	sg_btensor m = {.type = SG_TYPE_MLX_AFFINE, .ne = {64, 4, 1, 1}, .data = buf, .mlx = {3, 64, SG_TYPE_BF16}, .scales = sb, .biases = sb};
	cr_assert_eq(gpu->ops->tensor_bind(gpu, &m), SG_ERR_UNSUPPORTED);
	cr_expect(strstr(sg_last_error(), "3 bits") != NULL, "%s", sg_last_error());
}

Test(cuda, norms_match_cpu)
{
	static const int64_t Ds[] = {7, 640, 4096};
	for (int i = 0; i < 3; i++) {
		int64_t D = Ds[i], R = 5;
		pair x = pair_rand(D, R, 1, 2.0f), w = pair_rand(D, 1, 1, 1.0f), b = pair_rand(D, 1, 1, 1.0f), y = pair_new(SG_TYPE_F32, D, R, 1, 1);
		poison(&y);
		cpu->ops->rmsnorm(cpu, &x.c, &w.c, 1e-6f, 1.0f, &y.c);
		cr_assert_eq(gpu->ops->rmsnorm(gpu, &x.g, &w.g, 1e-6f, 1.0f, &y.g), SG_OK);
		cr_expect(pair_nmse(&y) < NMSE_F32, "rmsnorm D=%lld", (long long)D);
		poison(&y);
		cpu->ops->rmsnorm(cpu, &x.c, NULL, 1e-5f, 0.0f, &y.c);
		cr_assert_eq(gpu->ops->rmsnorm(gpu, &x.g, NULL, 1e-5f, 0.0f, &y.g), SG_OK);
		cr_expect(pair_nmse(&y) < NMSE_F32, "rmsnorm no weight D=%lld", (long long)D);
		poison(&y);
		cpu->ops->layernorm(cpu, &x.c, &w.c, &b.c, 1e-5f, &y.c);
		cr_assert_eq(gpu->ops->layernorm(gpu, &x.g, &w.g, &b.g, 1e-5f, &y.g), SG_OK);
		cr_expect(pair_nmse(&y) < NMSE_F32, "layernorm D=%lld", (long long)D);
		/* in place */
		cpu->ops->rmsnorm(cpu, &x.c, &w.c, 1e-6f, 0.0f, &x.c);
		cr_assert_eq(gpu->ops->rmsnorm(gpu, &x.g, &w.g, 1e-6f, 0.0f, &x.g), SG_OK);
		cr_expect(pair_nmse(&x) < NMSE_F32, "rmsnorm in place D=%lld", (long long)D);
		pair_free(&x), pair_free(&w), pair_free(&b), pair_free(&y);
	}
}

static sg_rope_params rope_case(int i, int hd)
{
	sg_rope_params p = {0};
	p.head_dim = hd;
	p.n_rot = i == 2 ? hd / 2 : hd;
	p.neox = i != 1;
	p.theta = i == 4 ? 500000.0f : 10000.0f;
	p.scaling = i == 3 ? SG_ROPE_SCALING_LINEAR : i == 4 ? SG_ROPE_SCALING_YARN : i == 5 ? SG_ROPE_SCALING_LLAMA3 : i == 6 ? SG_ROPE_SCALING_PROPORTIONAL : SG_ROPE_SCALING_NONE;
	if (i == 6) p.n_rot = hd / 4;
	p.factor = i >= 3 ? 4.0f : 0.0f;
	p.orig_ctx = i >= 4 ? 4096 : 0;
	if (i == 7) p.scaling = SG_ROPE_SCALING_DYNAMIC, p.orig_ctx = 2048; /* 4000 > 2048: the base grows */
	return p;
}

Test(cuda, rope_every_scaling_and_layout_matches_cpu)
{
	int32_t posv[3] = {0, 17, 4000};
	for (int i = 0; i < 8; i++) {
		sg_rope_params p = rope_case(i, 64);
		pair x = pair_rand(64 * 4, 3, 1, 1.0f), pos = pair_i32(3, 1, posv);
		cpu->ops->rope(cpu, &x.c, &pos.c, &p);
		cr_assert_eq(gpu->ops->rope(gpu, &x.g, &pos.g, &p), SG_OK, "%s", sg_last_error());
		double e = pair_nmse(&x);
		cr_expect(e < NMSE_F32, "rope case %d: nmse %.3g", i, e);
		pair_free(&x), pair_free(&pos);
	}
}

/* kv_store (or the fused attn_prep) then attention, on F32 and F16 caches. */
static void attn_case(int n, int H, int Hkv, int hd, int ctx, int p0, sg_attn_params ap, sg_type ct, int fused)
{
	int32_t *posv = malloc(sizeof(int32_t) * (size_t)n);
	for (int t = 0; t < n; t++) posv[t] = p0 + t;
	pair pos = pair_i32(n, 1, posv);
	pair kc = pair_new(ct, hd, Hkv, ctx, 1), vc = pair_new(ct, hd, Hkv, ctx, 1);
	/* earlier positions: fill both caches with the same random history */
	pair hk = pair_rand(hd * Hkv, ctx, 1, 1.0f), hv = pair_rand(hd * Hkv, ctx, 1, 1.0f);
	int32_t *allp = malloc(sizeof(int32_t) * (size_t)ctx);
	for (int i = 0; i < ctx; i++) allp[i] = i;
	pair ap_pos = pair_i32(ctx, 1, allp);
	cpu->ops->kv_store(cpu, &hk.c, &hv.c, &ap_pos.c, &kc.c, &vc.c);
	cr_assert_eq(gpu->ops->kv_store(gpu, &hk.g, &hv.g, &ap_pos.g, &kc.g, &vc.g), SG_OK, "%s", sg_last_error());
	cr_expect(pair_nmse(&kc) < NMSE_F32 && pair_nmse(&vc) < NMSE_F32, "kv_store %s", ct == SG_TYPE_F16 ? "f16" : "f32");
	pair q = pair_rand(hd * H, n, 1, 1.0f), k = pair_rand(hd * Hkv, n, 1, 1.0f), v = pair_rand(hd * Hkv, n, 1, 1.0f);
	sg_rope_params rp = rope_case(0, hd);
	if (fused) {
		sg_backend_attn_prep(cpu, &q.c, &k.c, &v.c, &pos.c, &rp, &kc.c, &vc.c);
		cr_assert_eq(sg_backend_attn_prep(gpu, &q.g, &k.g, &v.g, &pos.g, &rp, &kc.g, &vc.g), SG_OK, "%s", sg_last_error());
		cr_expect(pair_nmse(&q) < NMSE_F32 && pair_nmse(&k) < NMSE_F32, "attn_prep rotations");
		cr_expect(pair_nmse(&kc) < NMSE_F32 && pair_nmse(&vc) < NMSE_F32, "attn_prep cache rows");
	} else {
		cpu->ops->kv_store(cpu, &k.c, &v.c, &pos.c, &kc.c, &vc.c);
		cr_assert_eq(gpu->ops->kv_store(gpu, &k.g, &v.g, &pos.g, &kc.g, &vc.g), SG_OK);
	}
	pair out = pair_new(SG_TYPE_F32, hd * H, n, 1, 1);
	poison(&out);
	cr_assert_eq(cpu->ops->attention(cpu, &q.c, &kc.c, &vc.c, &pos.c, &ap, &out.c), SG_OK);
	cr_assert_eq(gpu->ops->attention(gpu, &q.g, &kc.g, &vc.g, &pos.g, &ap, &out.g), SG_OK, "%s", sg_last_error());
	double e = pair_nmse(&out);
	/* prefill over f16 caches: f16 queries and probabilities in the GEMMs (SARAGOSSA_CUDA_ATTN_F16)
	 * or the flash kernel (SARAGOSSA_CUDA_ATTN_FLASH: head dims 64 and 128, causal, no ring) */
	int ring = ap.causal && ap.window > 0 && ap.window < ctx, flash = (hd == 64 || hd == 128) && ap.causal && !ring;
	int h16 = ct == SG_TYPE_F16 && n > 8 && sg_flag_bool("SARAGOSSA_CUDA_ATTN_F16") &&
		  (sg_flag_bool("SARAGOSSA_CUDA_ATTN_GEMM") || (flash && sg_flag_bool("SARAGOSSA_CUDA_ATTN_FLASH")));
	/* one token over f16 caches on tensor cores (SARAGOSSA_CUDA_ATTN_MMA): f16 queries and probabilities too */
	h16 |= ct == SG_TYPE_F16 && n == 1 && (hd == 64 || hd == 128) && !ring && sg_flag_bool("SARAGOSSA_CUDA_ATTN_MMA");
	cr_expect(e < (h16 ? NMSE_F16 : NMSE_F32), "attention n=%d H=%d/%d hd=%d ctx=%d p0=%d window=%d cap=%g causal=%d %s: nmse %.3g", n, H, Hkv, hd, ctx, p0,
		  ap.window, (double)ap.softcap, ap.causal, ct == SG_TYPE_F16 ? "f16" : "f32", e);
	pair *all[] = {&pos, &kc, &vc, &hk, &hv, &ap_pos, &q, &k, &v, &out};
	for (int i = 0; i < 10; i++) pair_free(all[i]);
	free(posv);
	free(allp);
}

Test(cuda, attention_decode_split_prefill_window_softcap_gqa_match_cpu)
{
	sg_attn_params causal = {0, 0, 0, 1, 0, NULL, 0}, win = {0, 0, 100, 1, 0, NULL, 0}, cap = {0.1f, 30.0f, 0, 1, 0, NULL, 0}, full = {0, 0, 0, 0, 0, NULL, 0};
	attn_case(1, 8, 2, 128, 4096, 3000, causal, SG_TYPE_F32, 0);   /* decode, split over the length */
	attn_case(1, 4, 1, 256, 2048, 2047, causal, SG_TYPE_F16, 1);   /* Gemma-like heads, f16 cache */
	attn_case(7, 8, 8, 64, 512, 300, win, SG_TYPE_F32, 1);         /* prefill chunk, sliding window */
	attn_case(5, 6, 3, 32, 64, 10, cap, SG_TYPE_F16, 0);           /* softcap, explicit scale */
	attn_case(9, 4, 2, 64, 32, 0, full, SG_TYPE_F32, 0);           /* bidirectional (encoder) */
	attn_case(600, 1, 1, 64, 1024, 0, causal, SG_TYPE_F32, 1);     /* many tokens: one block each */
	sg_attn_params ring = {0, 0, 8, 1, 0, NULL, 0};
	attn_case(4, 4, 2, 32, 12, 17, ring, SG_TYPE_F32, 0);          /* ring cache: window 8 in 12 rows */
	attn_case(4, 4, 2, 32, 12, 30, ring, SG_TYPE_F16, 1);
	/* the one-token kernel: groups of 8, 3 (taken one head a block), 1; head dims 32 to 256;
	 * the first position; a ring; a soft-cap; f16 and f32 */
	attn_case(1, 16, 2, 64, 3000, 2999, causal, SG_TYPE_F16, 1);
	attn_case(1, 6, 2, 32, 700, 650, causal, SG_TYPE_F32, 0);
	attn_case(1, 2, 2, 128, 100, 0, cap, SG_TYPE_F16, 0);
	attn_case(1, 4, 2, 32, 12, 30, ring, SG_TYPE_F16, 0);
	attn_case(1, 8, 1, 256, 40000, 33000, causal, SG_TYPE_F16, 1);
	attn_case(1, 64, 8, 128, 2000, 1999, causal, SG_TYPE_F16, 1); /* groups of 8 over 8 KV heads */
	/* the GEMM path (more than 8 tokens): GQA, f16 cache, soft-cap, a later chunk */
	attn_case(40, 8, 2, 64, 300, 100, cap, SG_TYPE_F16, 1);
	attn_case(16, 32, 8, 128, 2048, 1500, causal, SG_TYPE_F32, 0);
}

/* The flash prefill kernel (f16 caches, head dims 128 and 64): row blocks of 64 with a short last
 * one, a first chunk from position 0, a later chunk, GQA, a window wider than the cache. */
Test(cuda, attention_flash_prefill_matches_cpu)
{
	sg_attn_params causal = {0, 0, 0, 1, 0, NULL, 0}, cap = {0.1f, 30.0f, 0, 1, 0, NULL, 0};
	attn_case(300, 8, 2, 128, 1000, 500, causal, SG_TYPE_F16, 1);
	attn_case(40, 8, 2, 64, 300, 100, cap, SG_TYPE_F16, 1); /* soft-cap, explicit scale */
	attn_case(130, 4, 4, 64, 256, 0, causal, SG_TYPE_F16, 0);
	attn_case(65, 16, 2, 128, 4096, 3000, causal, SG_TYPE_F16, 1);
	sg_attn_params wide = {0, 0, 2000, 1, 0, NULL, 0};
	attn_case(100, 4, 1, 128, 1024, 900, wide, SG_TYPE_F16, 0);
}

/* attention_packed (an encoder's batch in one launch): every token attends to its own sequence's
 * rows only, against a direct double-precision softmax; lengths 1 to 300, GQA, head dims 30 to 256,
 * with and without an additive bias (MPNet's: each sequence's [L][H][L] block in turn), the block
 * per 16 tokens and the warp per token. */
static void packed_case(const int *lens, int n_seq, int H, int Hkv, int hd, int with_bias)
{
	int32_t *offs = malloc(sizeof(int32_t) * (size_t)(n_seq + 1));
	offs[0] = 0;
	for (int s = 0; s < n_seq; s++) offs[s + 1] = offs[s] + lens[s];
	int n = offs[n_seq];
	pair q = pair_rand(hd * H, n, 1, 1.0f), k = pair_rand(hd, Hkv, n, 1.0f), v = pair_rand(hd, Hkv, n, 1.0f);
	pair o = pair_i32(n_seq + 1, 1, offs), out = pair_new(SG_TYPE_F32, hd, H, n, 1);
	poison(&out);
	int64_t nb = 0;
	for (int s = 0; s < n_seq; s++) nb += (int64_t)lens[s] * H * lens[s];
	pair bias = pair_rand(with_bias ? nb : 1, 1, 1, 2.0f);
	sg_attn_params ap = {0, 0, 0, 0, 0, with_bias ? &bias.g : NULL, 0};
	cr_assert_eq(gpu->ops->attention_packed(gpu, &q.g, &k.g, &v.g, &o.g, n_seq, &ap, &out.g), SG_OK, "%s", sg_last_error());
	float *g = fetch(&out), *ref = malloc(sizeof(float) * (size_t)n * (size_t)H * (size_t)hd);
	const float *Q = q.c.data, *K = k.c.data, *V = v.c.data;
	double *w = malloc(sizeof(double) * (size_t)n);
	const float *B = bias.c.data;
	int64_t boff = 0;
	for (int s = 0; s < n_seq; boff += (int64_t)lens[s] * H * lens[s], s++)
		for (int t = offs[s]; t < offs[s + 1]; t++)
			for (int h = 0; h < H; h++) {
				int hk = h / (H / Hkv), L = lens[s];
				double mx = -1e300, sum = 0;
				for (int j = offs[s]; j < offs[s + 1]; j++) {
					double d = 0;
					for (int e = 0; e < hd; e++)
						d += (double)Q[((size_t)t * H + h) * hd + e] * K[((size_t)j * Hkv + hk) * hd + e];
					w[j] = d / sqrt((double)hd);
					if (with_bias) w[j] += B[boff + ((int64_t)(t - offs[s]) * H + h) * L + (j - offs[s])];
					if (w[j] > mx) mx = w[j];
				}
				for (int j = offs[s]; j < offs[s + 1]; j++) sum += (w[j] = exp(w[j] - mx));
				for (int e = 0; e < hd; e++) {
					double acc = 0;
					for (int j = offs[s]; j < offs[s + 1]; j++) acc += w[j] * V[((size_t)j * Hkv + hk) * hd + e];
					ref[((size_t)t * H + h) * hd + e] = (float)(acc / sum);
				}
			}
	double maxd = 0;
	for (int64_t i = 0; i < out.n; i++) maxd = fmax(maxd, fabs((double)g[i] - ref[i]));
	cr_expect(maxd < 1e-5, "attention_packed %d sequences H=%d/%d hd=%d bias %d: max difference %.3g", n_seq, H, Hkv, hd,
		  with_bias, maxd);
	pair *all[] = {&q, &k, &v, &o, &out, &bias};
	for (int i = 0; i < 6; i++) pair_free(all[i]);
	free(g);
	free(ref);
	free(w);
	free(offs);
}

Test(cuda, attention_packed_with_and_without_bias_matches_per_sequence_softmax)
{
	cr_assert(gpu->ops->attention_packed != NULL);
	int a[] = {7, 1, 77, 30, 2};
	packed_case(a, 5, 12, 12, 32, 0); /* MiniLM's heads */
	int b[] = {64};
	packed_case(b, 1, 12, 12, 64, 0); /* BERT-base's, one sequence */
	int c[] = {3, 50, 9};
	packed_case(c, 3, 8, 2, 128, 0); /* grouped KV heads */
	packed_case(a, 5, 12, 12, 64, 1); /* MPNet's relative position bias */
	packed_case(b, 1, 12, 12, 64, 1);
	int d[] = {300, 33, 1, 64, 65}; /* rows in several blocks of 32, partial last blocks */
	packed_case(d, 5, 4, 4, 30, 0); /* a head dim that is not a multiple of 4 */
	packed_case(d, 5, 6, 2, 64, 1);
	/* a batch of 60 sequences (lengths past one block of 32 rows, one row, partial blocks) */
	int e[60];
	for (int i = 0; i < 60; i++) e[i] = i == 7 ? 150 : i == 8 ? 1 : 1 + (i * 37) % 70;
	packed_case(e, 60, 12, 12, 32, 0);
	packed_case(e, 60, 12, 4, 64, 1);
	packed_case(e, 60, 8, 8, 30, 0);
	/* heads past 128 dims take the warp-per-token kernel; so does every head with the tiles off */
	packed_case(a, 5, 4, 2, 256, 1);
	sg_cuda_backend *cb = (sg_cuda_backend *)gpu;
	cb->packed_tiles = 0;
	packed_case(e, 60, 12, 4, 64, 1);
	packed_case(d, 5, 4, 4, 30, 0);
	cb->packed_tiles = sg_flag_bool("SARAGOSSA_CUDA_PACKED_TILES");
}

/* The audio codec's ops (Qwen3-TTS's decoder) against the CPU's: a convolution with and without
 * bias, strided, dilated, causally padded, grouped and depthwise, long enough to take several
 * im2col tiles on the GPU; transposed convolutions of strides 1 to 5 with rows trimmed; SnakeBeta;
 * the exact GELU. */
static void conv_case(int64_t T, int64_t Cin, int64_t Cout, int K, int stride, int dil, int pad, int groups, int with_bias)
{
	sg_conv_params p = {stride, dil, groups, pad};
	int64_t Tout = (T + pad - (int64_t)(K - 1) * dil - 1) / stride + 1;
	pair x = pair_rand(Cin, T, 1, 1.0f), w = pair_rand(Cin / groups, K, Cout, 0.3f), b = pair_rand(Cout, 1, 1, 1.0f);
	pair y = pair_new(SG_TYPE_F32, Cout, Tout, 1, 1);
	poison(&y);
	cr_assert_eq(cpu->ops->conv1d(cpu, &x.c, &w.c, with_bias ? &b.c : NULL, &p, &y.c), SG_OK, "%s", sg_last_error());
	cr_assert_eq(gpu->ops->conv1d(gpu, &x.g, &w.g, with_bias ? &b.g : NULL, &p, &y.g), SG_OK, "%s", sg_last_error());
	double e = pair_nmse(&y);
	cr_expect(e < NMSE_F32, "conv1d T=%lld %lld->%lld K=%d stride %d dil %d pad %d groups %d bias %d: nmse %.3g", (long long)T,
		  (long long)Cin, (long long)Cout, K, stride, dil, pad, groups, with_bias, e);
	pair *all[] = {&x, &w, &b, &y};
	for (int i = 0; i < 4; i++) pair_free(all[i]);
}

static void convt_case(int64_t T, int64_t Cin, int64_t Cout, int M, int stride, int64_t Tout)
{
	pair x = pair_rand(Cin, T, 1, 1.0f), b = pair_rand(Cout, 1, 1, 1.0f), y = pair_new(SG_TYPE_F32, Cout, Tout, 1, 1);
	pair w = pair_new(SG_TYPE_F32, Cin, M, Cout, stride);
	for (int64_t i = 0; i < w.n; i++) ((float *)w.c.data)[i] = grand() * 0.3f;
	pair_push(&w);
	poison(&y);
	cr_assert_eq(cpu->ops->conv_transpose1d(cpu, &x.c, &w.c, &b.c, stride, &y.c), SG_OK, "%s", sg_last_error());
	cr_assert_eq(gpu->ops->conv_transpose1d(gpu, &x.g, &w.g, &b.g, stride, &y.g), SG_OK, "%s", sg_last_error());
	double e = pair_nmse(&y);
	cr_expect(e < NMSE_F32, "conv_transpose1d T=%lld %lld->%lld M=%d stride %d Tout %lld: nmse %.3g", (long long)T, (long long)Cin,
		  (long long)Cout, M, stride, (long long)Tout, e);
	pair *all[] = {&x, &w, &b, &y};
	for (int i = 0; i < 4; i++) pair_free(all[i]);
}

Test(cuda, codec_convolutions_snake_and_gelu_match_cpu)
{
	cr_assert(gpu->ops->conv1d && gpu->ops->conv_transpose1d && gpu->ops->snake && gpu->ops->gelu);
	conv_case(50, 16, 24, 7, 1, 1, 6, 1, 1);     /* causal, bias (K * Cin a multiple of 8: the GEMM) */
	conv_case(50, 12, 24, 7, 1, 1, 6, 1, 1);     /* K * Cin = 84: directly */
	conv_case(61, 32, 8, 3, 2, 1, 2, 1, 0);      /* strided, no bias */
	conv_case(40, 12, 12, 7, 1, 3, 18, 1, 1);    /* dilated */
	conv_case(33, 24, 24, 7, 1, 1, 6, 24, 1);    /* depthwise */
	conv_case(30, 16, 8, 5, 1, 2, 8, 4, 1);      /* grouped */
	conv_case(3000, 1200, 16, 7, 1, 1, 6, 1, 1); /* two im2col tiles (16M floats each) */
	convt_case(9, 16, 12, 2, 2, 18);             /* M * Cin a multiple of 8: the GEMM per phase */
	convt_case(40, 64, 32, 3, 4, 160);
	convt_case(7, 8, 8, 3, 5, 33);               /* trimmed below (T - 1 + M) * stride */
	convt_case(11, 6, 10, 4, 1, 14);
	/* SnakeBeta and GELU, in place as the codec calls them */
	pair x = pair_rand(40, 17, 1, 2.0f), a = pair_rand(40, 1, 1, 1.0f), b = pair_rand(40, 1, 1, 0.5f);
	for (int i = 0; i < 40; i++) ((float *)b.c.data)[i] = fabsf(((float *)b.c.data)[i]) + 0.1f;
	pair_push(&b);
	cr_assert_eq(cpu->ops->snake(cpu, &x.c, &a.c, &b.c, &x.c), SG_OK);
	cr_assert_eq(gpu->ops->snake(gpu, &x.g, &a.g, &b.g, &x.g), SG_OK, "%s", sg_last_error());
	cr_expect(pair_nmse(&x) < NMSE_F32, "snake: nmse %.3g", pair_nmse(&x));
	cr_assert_eq(cpu->ops->gelu(cpu, &x.c, &x.c), SG_OK);
	cr_assert_eq(gpu->ops->gelu(gpu, &x.g, &x.g), SG_OK, "%s", sg_last_error());
	cr_expect(pair_nmse(&x) < NMSE_F32, "gelu: nmse %.3g", pair_nmse(&x));
	pair *all[] = {&x, &a, &b};
	for (int i = 0; i < 3; i++) pair_free(all[i]);
}

/* f16 K and V caches [ctx][Hkv][hd] of random rows at every position, stored by kv_store. */
static void f16_caches(int64_t hd, int64_t Hkv, int64_t ctx, pair *kh, pair *vh)
{
	pair kc = pair_rand(hd * Hkv, ctx, 1, 1.0f), vc = pair_rand(hd * Hkv, ctx, 1, 1.0f);
	*kh = pair_new(SG_TYPE_F16, hd, Hkv, ctx, 1), *vh = pair_new(SG_TYPE_F16, hd, Hkv, ctx, 1);
	int32_t *allp = malloc(sizeof(int32_t) * (size_t)ctx);
	for (int i = 0; i < ctx; i++) allp[i] = i;
	pair ap_pos = pair_i32(ctx, 1, allp);
	cr_assert_eq(gpu->ops->kv_store(gpu, &kc.g, &vc.g, &ap_pos.g, &kh->g, &vh->g), SG_OK);
	free(allp);
	pair_free(&kc), pair_free(&vc), pair_free(&ap_pos);
}

/* The feeds_matmul / x_fed hints: the one-token attention rounds its output to 8 bits for the
 * o projection right after it, which then skips its own rounding: the same bits as without. */
static void feeding_case(int64_t ctx, int32_t p)
{
	int64_t H = 32, Hkv = 8, hd = 128, D = H * hd;
	const wtype *wt = &wtypes[12]; /* MLX4 g64 f16 */
	hw w = make_w(wt, 512, D);
	sg_btensor wc, wg;
	bind_both(&w, &wc, &wg);
	pair pos = pair_i32(1, 1, &p), q = pair_rand(D, 1, 1, 1.0f), kh, vh, att = pair_new(SG_TYPE_F32, D, 1, 1, 1);
	pair res = pair_rand(512, 1, 1, 1.0f), y = pair_new(SG_TYPE_F32, 512, 1, 1, 1), out = pair_new(SG_TYPE_F32, 512, 1, 1, 1);
	f16_caches(hd, Hkv, ctx, &kh, &vh);
	float *got[2];
	for (int fed = 0; fed < 2; fed++) {
		sg_attn_params ap = {0, 0, 0, 1, fed, NULL, 0};
		cr_assert_eq(gpu->ops->write(gpu, &pos.g, 0, &p, 4), SG_OK);
		cr_assert_eq(gpu->ops->attention(gpu, &q.g, &kh.g, &vh.g, &pos.g, &ap, &att.g), SG_OK, "%s", sg_last_error());
		sg_matmul_multi m = {.x = &att.g, .nw = 1, .w = {&wg}, .y = {&y.g}, .residual = &res.g, .out = &out.g, .x_fed = fed};
		cr_assert_eq(sg_backend_matmul_multi(gpu, &m), SG_OK, "%s", sg_last_error());
		got[fed] = fetch(&out);
	}
	cr_expect(memcmp(got[0], got[1], sizeof(float) * 512) == 0, "the hinted path differs");
	free(got[0]), free(got[1]);
	pair *all[] = {&pos, &q, &kh, &vh, &att, &res, &y, &out};
	for (int i = 0; i < 8; i++) pair_free(all[i]);
	gpu->ops->tensor_free(gpu, &wg), cpu->ops->tensor_free(cpu, &wc);
	free_hw(&w);
}
Test(cuda, attention_feeding_the_next_matmul_changes_nothing) { feeding_case(3000, 2500); }

/* Two settings of a one-token attention switch give the same bits (and finite outputs) over head
 * dims 64, 128, 256, groups of 8, 4, 2, 1, short and long live lengths (one live slice of many,
 * a few, all 64), a ring, a soft-cap; set(restore) puts the process's setting back at the end. */
/* tol > 0: the two outputs within that normalised squared error instead of the same bits */
static void decode_settings_close(void (*set)(int), const char *flag, int s0, int s1, int restore, double tol);
static void decode_settings_agree(void (*set)(int), const char *flag, int s0, int s1, int restore)
{
	/* the f32 kernel's switches: the tensor-core kernel (SARAGOSSA_CUDA_ATTN_MMA) off meanwhile */
	set_attn_mma(0);
	decode_settings_close(set, flag, s0, s1, restore, 0);
	sg_cu_policy_load();
}
static void decode_settings_close(void (*set)(int), const char *flag, int s0, int s1, int restore, double tol)
{
	sg_attn_params causal = {0, 0, 0, 1, 0, NULL, 0}, ring = {0, 0, 8, 1, 0, NULL, 0}, cap = {0.1f, 30.0f, 0, 1, 0, NULL, 0};
	struct {
		int64_t H, Hkv, hd, ctx;
		int32_t p;
		sg_attn_params ap;
	} cs[] = {{32, 8, 128, 4096, 1088, causal}, {32, 8, 128, 4096, 31, causal}, {32, 4, 128, 40000, 32768, causal},
	          {16, 2, 64, 3000, 2999, causal},  {8, 1, 256, 40000, 33000, causal}, {4, 2, 128, 12, 30, ring},
	          {64, 8, 128, 2000, 31, causal},   {2, 2, 128, 100, 0, cap},          {4, 4, 128, 600, 599, cap}};
	for (size_t c = 0; c < sizeof(cs) / sizeof(cs[0]); c++) {
		int64_t H = cs[c].H, Hkv = cs[c].Hkv, hd = cs[c].hd, ctx = cs[c].ctx, D = H * hd;
		int32_t p = cs[c].p;
		pair pos = pair_i32(1, 1, &p), q = pair_rand(D, 1, 1, 1.0f), kh, vh, att = pair_new(SG_TYPE_F32, D, 1, 1, 1);
		f16_caches(hd, Hkv, ctx, &kh, &vh);
		float *got[2];
		for (int m = 0; m < 2; m++) {
			set(m ? s1 : s0);
			poison(&att);
			cr_assert_eq(gpu->ops->attention(gpu, &q.g, &kh.g, &vh.g, &pos.g, &cs[c].ap, &att.g),
			             SG_OK, "%s", sg_last_error());
			got[m] = fetch(&att);
		}
		set(restore);
		int same = memcmp(got[0], got[1], sizeof(float) * (size_t)D) == 0, finite = 1;
		double num = 0, den = 0;
		for (int64_t i = 0; i < D; i++) {
			finite &= isfinite(got[0][i]) && isfinite(got[1][i]);
			num += ((double)got[1][i] - got[0][i]) * ((double)got[1][i] - got[0][i]), den += (double)got[0][i] * got[0][i];
		}
		if (tol > 0) same = num <= tol * den;
		cr_expect(same && finite, "case %zu (H %lld, hd %lld, p %d): %s=%d %s (nmse %.3g)", c, (long long)H, (long long)hd, p, flag, s1,
		          same ? "output not finite" : "differs", den > 0 ? num / den : 0.0);
		free(got[0]), free(got[1]);
		pair *all[] = {&pos, &q, &kh, &vh, &att};
		for (int i = 0; i < 5; i++) pair_free(all[i]);
	}
}

/* The slices merged in one round trip (SARAGOSSA_CUDA_ATTN_MERGE=1) give the bits of the merge
 * that waits for the position (=0); the scratch poisoned first, so a slice past the live rows
 * taken in would show. */
static void poison_scratch(void)
{
	sg_status st;
	float *part = sg_cuda_scratch((sg_cuda_backend *)gpu, 64u << 20, &st);
	cr_assert(part, "%s", sg_last_error());
	cr_assert_eq(cudaMemset(part, 0xff, 64u << 20), cudaSuccess); /* NaN in every float */
}
static void merge_with_poisoned_scratch(int one)
{
	set_attn_merge(one);
	poison_scratch();
}
Test(cuda, attention_decode_one_pass_merge_equals_merge)
{
	decode_settings_agree(merge_with_poisoned_scratch, "SARAGOSSA_CUDA_ATTN_MERGE", 0, 1, sg_flag_bool("SARAGOSSA_CUDA_ATTN_MERGE"));
}

/* The tensor-core kernel's first tiles' V rows copied before the wait too (SARAGOSSA_CUDA_ATTN_VFIRST=1;
 * the lanes whose row, or the row standing in for theirs, is the step's position read it after)
 * give the bits of reading them after the scores (=0): the cases of up to 2 blocks an SM take it,
 * the position alone in its tile (p = 0) and inside one (599, 2999). */
Test(cuda, attention_decode_v_rows_before_the_wait_equal_after)
{
	decode_settings_close(set_attn_vfirst, "SARAGOSSA_CUDA_ATTN_VFIRST", 0, 1, sg_flag_bool("SARAGOSSA_CUDA_ATTN_VFIRST"), 0);
}

/* The first tiles' K rows copied into shared memory before the wait (SARAGOSSA_CUDA_ATTN_KPRE=1;
 * the lane whose row is the step's position reads it after) give the bits of reading every row
 * after it (=0): the cases hold a first tile with the position in it (p = 31, 30 in a ring). */
Test(cuda, attention_decode_k_rows_before_the_wait_equal_after)
{
	decode_settings_agree(set_attn_kpre, "SARAGOSSA_CUDA_ATTN_KPRE", 0, 1, sg_flag_bool("SARAGOSSA_CUDA_ATTN_KPRE"));
}

/* The prep fused into the one-token attention (SARAGOSSA_CUDA_ATTN_PREP=1), also with the K rows
 * pipelined (SARAGOSSA_CUDA_ATTN_KPIPE=1: the step's row then re-read in a later tile), gives the
 * bits of the prep kernel followed by the attention (=0): the output and both caches whole (the step's rows
 * poisoned before each run, so a missing store shows), over head dims 64/128/256, groups 1-8 with
 * one or two blocks a KV head, every rope layout and scaling, with and without q/k norms (and a
 * norm offset), the position in a first tile (the K row copied before the wait), at 0 and past
 * 32k. */
Test(cuda, attention_with_the_prep_fused_equals_prep_then_attention)
{
	struct {
		int64_t H, Hkv, hd, ctx;
		int32_t p;
		int rope, norm;
		float off;
	} cs[] = {{32, 8, 128, 4096, 1088, 0, 1, 0}, {32, 4, 128, 4096, 31, 0, 1, 0},  {16, 2, 64, 3000, 2999, 1, 0, 0},
	          {8, 1, 256, 40000, 33000, 2, 1, 0}, {64, 8, 128, 2000, 500, 7, 1, 0}, {8, 8, 128, 600, 0, 4, 1, 1.0f},
	          {4, 2, 128, 100, 64, 3, 1, 0},      {16, 2, 256, 700, 333, 5, 1, 0},  {8, 2, 128, 300, 257, 6, 1, 0}};
	sg_attn_params ap = {0, 0, 0, 1, 1, NULL, 0};
	for (size_t c = 0; c < sizeof(cs) / sizeof(cs[0]); c++) {
		int64_t H = cs[c].H, Hkv = cs[c].Hkv, hd = cs[c].hd, ctx = cs[c].ctx, D = H * hd;
		int32_t p = cs[c].p;
		sg_rope_params rp = rope_case(cs[c].rope, (int)hd);
		pair pos = pair_i32(1, 1, &p), q0 = pair_rand(D, 1, 1, 2.0f), k0 = pair_rand(hd * Hkv, 1, 1, 2.0f), v = pair_rand(hd * Hkv, 1, 1, 1.0f);
		pair q = pair_new(SG_TYPE_F32, D, 1, 1, 1), k = pair_new(SG_TYPE_F32, hd * Hkv, 1, 1, 1), kh, vh;
		pair qn = pair_rand(hd, 1, 1, 1.0f), kn = pair_rand(hd, 1, 1, 1.0f), att = pair_new(SG_TYPE_F32, D, 1, 1, 1);
		f16_caches(hd, Hkv, ctx, &kh, &vh);
		float *got[3][3];
		for (int m = 0; m < 3; m++) { /* the prep kernel; fused; fused with the K rows pipelined */
			set_attn_prep(m > 0);
			set_attn_kpipe(m == 2);
			cr_assert_eq(gpu->ops->write(gpu, &q.g, 0, q0.c.data, sizeof(float) * (size_t)D), SG_OK);
			cr_assert_eq(gpu->ops->write(gpu, &k.g, 0, k0.c.data, sizeof(float) * (size_t)(hd * Hkv)), SG_OK);
			uint16_t nan16[1024];
			for (int i = 0; i < 1024; i++) nan16[i] = 0x7e00;
			size_t row = (size_t)(hd * Hkv) * 2;
			cr_assert_eq(gpu->ops->write(gpu, &kh.g, (size_t)p * row, nan16, row), SG_OK);
			cr_assert_eq(gpu->ops->write(gpu, &vh.g, (size_t)p * row, nan16, row), SG_OK);
			poison(&att);
			cr_assert_eq(gpu->ops->attention_prep(gpu, &q.g, &k.g, &v.g, &pos.g, &rp, cs[c].norm ? &qn.g : NULL, cs[c].norm ? &kn.g : NULL,
			                                      1e-6f, cs[c].off, &kh.g, &vh.g, &ap, &att.g),
			             SG_OK, "%s", sg_last_error());
			got[m][0] = fetch(&att), got[m][1] = fetch(&kh), got[m][2] = fetch(&vh);
		}
		sg_cu_policy_load();
		sg_cu_policy_load();
		size_t n[3] = {(size_t)D, (size_t)(ctx * hd * Hkv), (size_t)(ctx * hd * Hkv)};
		const char *what[3] = {"output", "k cache", "v cache"};
		int finite = 1;
		for (int64_t i = 0; i < D; i++) finite &= isfinite(got[0][0][i]) != 0;
		cr_expect(finite, "case %zu: output not finite", c);
		for (int j = 0; j < 3; j++) {
			for (int m = 1; m < 3; m++)
				cr_expect(!memcmp(got[0][j], got[m][j], sizeof(float) * n[j]),
				          "case %zu (H %lld, Hkv %lld, hd %lld, p %d, rope %d): fused%s %s differs", c, (long long)H, (long long)Hkv,
				          (long long)hd, p, cs[c].rope, m == 2 ? " (K pipelined)" : "", what[j]);
			for (int m = 0; m < 3; m++) free(got[m][j]);
		}
		pair *all[] = {&pos, &q0, &k0, &v, &q, &k, &kh, &vh, &qn, &kn, &att};
		for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) pair_free(all[i]);
	}
}

/* Each later tile's K rows copied while the tile before reads its V rows (SARAGOSSA_CUDA_ATTN_KPIPE=1)
 * give the bits of reading them after the scores start (=0): the cases walk up to 33k positions,
 * several tiles a warp, the position in a later tile, a ring. */
Test(cuda, attention_decode_pipelined_k_rows_equal_unpipelined)
{
	int restore = sg_flag_bool("SARAGOSSA_CUDA_ATTN_KPIPE");
	decode_settings_agree(set_attn_kpipe, "SARAGOSSA_CUDA_ATTN_KPIPE", 0, 1, restore);
}

/* The one-token attention on tensor cores (SARAGOSSA_CUDA_ATTN_MMA=1) against the f32 dot products
 * (=0) over the same cases (short and long live lengths, several tiles a warp, a soft-cap; the ring
 * and head dim 256 take the f32 kernel either way): within the f16 rounding of queries and
 * probabilities. */
Test(cuda, attention_decode_on_tensor_cores_matches_f32_kernel)
{
	decode_settings_close(set_attn_mma, "SARAGOSSA_CUDA_ATTN_MMA", 0, 1, sg_flag_bool("SARAGOSSA_CUDA_ATTN_MMA"), NMSE_F16);
}

/* With each attention kill-switch or tunable set, the path it leaves still matches the CPU. */
Test(cuda, attention_kill_switches_keep_working_paths)
{
	sg_attn_params causal = {0, 0, 0, 1, 0, NULL, 0};
	const char *sw[] = {"SARAGOSSA_CUDA_ATTN_DECODE", "SARAGOSSA_CUDA_ATTN_DECODE",
	                    "SARAGOSSA_CUDA_ATTN_GEMM",   "SARAGOSSA_CUDA_ATTN_F16",
	                    "SARAGOSSA_CUDA_ATTN_FLASH",  "SARAGOSSA_CUDA_ATTN_MERGE",
	                    "SARAGOSSA_CUDA_ATTN_KPRE",   "SARAGOSSA_CUDA_ATTN_MMA",
	                    "SARAGOSSA_CUDA_ATTN_VFIRST"},
	           *val[] = {"0", "2", "0", "0", "0", "0", "0", "0", "0"};
	for (int i = 0; i < 9; i++) {
		setenv(sw[i], val[i], 1);
		sg_flags_reload(); /* flags are read once per process otherwise */
		sg_backend *save = gpu;
		sg_cuda_params gp = sg_cuda_default_params();
		cr_assert_eq(sg_cuda_backend_create(&gp, &gpu), SG_OK, "%s", sg_last_error());
		attn_case(1, 8, 2, 128, 1000, 900, causal, SG_TYPE_F16, 0);
		attn_case(1, 8, 1, 256, 1000, 999, causal, SG_TYPE_F16, 0);
		attn_case(20, 8, 2, 128, 1000, 900, causal, SG_TYPE_F16, 0);
		sg_backend_free(gpu);
		gpu = save;
		unsetenv(sw[i]);
		sg_flags_reload();
	}
}

Test(cuda, elementwise_softmax_route_combine_argmax_match_cpu)
{
	int64_t D = 1000, R = 3;
	pair a = pair_rand(D, R, 1, 3.0f), b = pair_rand(D, R, 1, 1.0f), o = pair_new(SG_TYPE_F32, D, R, 1, 1);
	for (int op = 0; op < 7; op++) {
		poison(&o);
		sg_status sc = SG_OK, sg = SG_OK;
		switch (op) {
		case 0: sc = cpu->ops->glu(cpu, &a.c, &b.c, SG_ACT_SILU, &o.c); sg = gpu->ops->glu(gpu, &a.g, &b.g, SG_ACT_SILU, &o.g); break;
		case 1: sc = cpu->ops->glu(cpu, &a.c, &b.c, SG_ACT_GELU_TANH, &o.c); sg = gpu->ops->glu(gpu, &a.g, &b.g, SG_ACT_GELU_TANH, &o.g); break;
		case 2: sc = cpu->ops->add(cpu, &a.c, &b.c, &o.c); sg = gpu->ops->add(gpu, &a.g, &b.g, &o.g); break;
		case 3: sc = cpu->ops->scale(cpu, &a.c, 0.37f, &o.c); sg = gpu->ops->scale(gpu, &a.g, 0.37f, &o.g); break;
		case 4: sc = cpu->ops->softcap(cpu, &a.c, 2.5f, &o.c); sg = gpu->ops->softcap(gpu, &a.g, 2.5f, &o.g); break;
		case 5: sc = cpu->ops->softmax(cpu, &a.c, &o.c); sg = gpu->ops->softmax(gpu, &a.g, &o.g); break;
		case 6: sc = cpu->ops->glu(cpu, &a.c, &b.c, SG_ACT_GELU, &o.c); sg = gpu->ops->glu(gpu, &a.g, &b.g, SG_ACT_GELU, &o.g); break;
		}
		cr_assert_eq(sc, SG_OK);
		cr_assert_eq(sg, SG_OK, "op %d: %s", op, sg_last_error());
		double e = pair_nmse(&o);
		cr_expect(e < NMSE_F32, "elementwise op %d: nmse %.3g", op, e);
	}
	/* routing: softmax and sigmoid, normalised or not; a tie between experts 1 and 4; expert
	 * counts of the one-warp kernel (64, 100, 128) and of the shared-memory one (300), the two
	 * kernels giving the same bits where both apply */
	int64_t n = 4;
	for (int r = 0; r < 16; r++) {
		int64_t E = (int64_t[]){64, 100, 128, 300}[r / 4];
		int k = r % 4 < 2 ? 8 : 2;
		pair lg = pair_rand(E, n, 1, 2.0f), ids = pair_new(SG_TYPE_I32, k, n, 1, 1),
		     w = pair_new(SG_TYPE_F32, k, n, 1, 1);
		((float *)lg.c.data)[1] = ((float *)lg.c.data)[4] = 9.0f;
		pair_push(&lg);
		sg_router ro = r & 1 ? SG_ROUTER_SIGMOID : SG_ROUTER_SOFTMAX;
		int nrm = r % 4 < 2;
		cpu->ops->moe_route(cpu, &lg.c, ro, k, nrm, &ids.c, &w.c);
		int32_t gi[32], gi0[32];
		float gw[32], gw0[32];
		set_route_warp(0);
		cr_assert_eq(gpu->ops->moe_route(gpu, &lg.g, ro, k, nrm, &ids.g, &w.g), SG_OK, "%s",
		             sg_last_error());
		cr_assert_eq(gpu->ops->read(gpu, &ids.g, 0, gi0, sizeof(int32_t) * (size_t)(k * n)), SG_OK);
		cr_assert_eq(gpu->ops->read(gpu, &w.g, 0, gw0, sizeof(float) * (size_t)(k * n)), SG_OK);
		set_route_warp(1);
		cr_assert_eq(gpu->ops->moe_route(gpu, &lg.g, ro, k, nrm, &ids.g, &w.g), SG_OK, "%s",
		             sg_last_error());
		cr_assert_eq(gpu->ops->read(gpu, &ids.g, 0, gi, sizeof(int32_t) * (size_t)(k * n)), SG_OK);
		cr_assert_eq(gpu->ops->read(gpu, &w.g, 0, gw, sizeof(float) * (size_t)(k * n)), SG_OK);
		cr_expect(memcmp(gi, ids.c.data, sizeof(int32_t) * (size_t)(k * n)) == 0,
		          "route %d (E %lld): ids differ", r, (long long)E);
		cr_expect(memcmp(gi, gi0, sizeof(gi[0]) * (size_t)(k * n)) == 0 &&
		              memcmp(gw, gw0, sizeof(gw[0]) * (size_t)(k * n)) == 0,
		          "route %d (E %lld): the one-warp kernel differs from the shared-memory one", r,
		          (long long)E);
		cr_expect(pair_nmse(&w) < NMSE_F32, "route %d weights", r);
		/* combine */
		pair y = pair_rand(D, n * k, 1, 1.0f), out = pair_new(SG_TYPE_F32, D, n, 1, 1);
		poison(&out);
		cpu->ops->moe_combine(cpu, &y.c, &w.c, &out.c);
		cr_assert_eq(gpu->ops->moe_combine(gpu, &y.g, &w.g, &out.g), SG_OK);
		cr_expect(pair_nmse(&out) < NMSE_F32, "combine %d", r);
		pair_free(&lg), pair_free(&ids), pair_free(&w), pair_free(&y), pair_free(&out);
	}
	/* argmax: ties go to the lower index, NaN never wins, all -inf gives 0 */
	int64_t V = 50000;
	pair x = pair_rand(V, 3, 1, 1.0f), am = pair_new(SG_TYPE_I32, 3, 1, 1, 1);
	float *xv = x.c.data;
	xv[100] = xv[40000] = 50.0f;
	xv[V + 7] = NAN;
	xv[V + 9] = 60.0f;
	for (int64_t i = 0; i < V; i++) xv[2 * V + i] = -INFINITY;
	pair_push(&x);
	cpu->ops->argmax(cpu, &x.c, &am.c);
	cr_assert_eq(gpu->ops->argmax(gpu, &x.g, &am.g), SG_OK);
	int32_t g3[3];
	cr_assert_eq(gpu->ops->read(gpu, &am.g, 0, g3, sizeof(g3)), SG_OK);
	int32_t *c3 = am.c.data;
	cr_expect(g3[0] == 100 && c3[0] == 100, "argmax tie: gpu %d cpu %d", g3[0], c3[0]);
	cr_expect(g3[1] == 9 && c3[1] == 9, "argmax NaN: gpu %d cpu %d", g3[1], c3[1]);
	cr_expect(g3[2] == c3[2], "argmax -inf row: gpu %d cpu %d", g3[2], c3[2]);
	pair_free(&x), pair_free(&am), pair_free(&a), pair_free(&b), pair_free(&o);
}

/* --- sampling candidates --- */

static int cmp_i32(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	return (x > y) - (x < y);
}

/* Checks a candidate read-back w [2k + m] against x [V]: the ids are the host's k best as a set,
 * each value is x's bits at its id, the gathered values are x at ids (NaN outside). */
static void check_candidates(const float *x, int64_t V, int k, const int32_t *ids, int m, const int32_t *w, const char *what)
{
	int32_t *ord = malloc(sizeof(int32_t) * (size_t)V), *got = malloc(sizeof(int32_t) * (size_t)k);
	rank_order(x, V, ord);
	qsort(ord, (size_t)k, sizeof(int32_t), cmp_i32);
	memcpy(got, w, sizeof(int32_t) * (size_t)k);
	for (int i = 0; i < k; i++) {
		cr_assert(got[i] >= 0 && got[i] < V, "%s: candidate %d has id %d", what, i, got[i]);
		cr_assert(!memcmp(&w[k + i], &x[got[i]], 4), "%s: candidate %d (id %d) carries another value", what, i, got[i]);
	}
	qsort(got, (size_t)k, sizeof(int32_t), cmp_i32);
	for (int i = 0; i < k; i++) cr_assert_eq(got[i], ord[i], "%s: %d-th candidate id %d, the host ranks %d", what, i, got[i], ord[i]);
	for (int i = 0; i < m; i++) {
		float g;
		memcpy(&g, &w[2 * k + i], 4);
		if (ids[i] < 0 || ids[i] >= V) cr_assert(g != g, "%s: gathered id %d outside the row gave %g", what, ids[i], (double)g);
		else cr_assert(!memcmp(&g, &x[ids[i]], 4), "%s: gathered id %d", what, ids[i]);
	}
	free(ord);
	free(got);
}

/* top_candidates against the host sampler's ranking, over one- and two-stage row lengths, with
 * ties, NaN, +-inf and -0 in the row and gathered ids outside it. */
Test(cuda, top_candidates_match_the_host_ranking)
{
	static const int64_t Vs[] = {100, 8192, 8193, 50000, 151936, 262144};
	static const int ks[] = {1, 40, 104, 2048};
	for (size_t vi = 0; vi < sizeof(Vs) / sizeof(Vs[0]); vi++) {
		int64_t V = Vs[vi];
		pair x = pair_new(SG_TYPE_F32, V, 1, 1, 1);
		float *xv = x.c.data;
		for (int64_t i = 0; i < V; i++) xv[i] = roundf(grand() * 16.0f) / 8.0f; /* many ties */
		xv[3] = NAN, xv[V - 1] = INFINITY, xv[V / 2] = INFINITY, xv[7] = -INFINITY, xv[11] = -0.0f, xv[12] = 0.0f;
		if (vi == 2) for (int64_t i = 0; i < V; i++) xv[i] = i % 3 ? -0.0f : 0.0f; /* all tied */
		pair_push(&x);
		int32_t gid[] = {-1, 0, (int32_t)V - 1, (int32_t)V, 5, 3};
		int m = (int)(sizeof(gid) / sizeof(gid[0]));
		pair g = pair_i32(m, 1, gid);
		for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++) {
			int k = ks[ki] < V ? ks[ki] : (int)V;
			pair out = pair_new(SG_TYPE_I32, 2 * k + m, 1, 1, 1);
			cr_assert_eq(gpu->ops->top_candidates(gpu, &x.g, k, &g.g, &out.g), SG_OK, "%s", sg_last_error());
			int32_t *w = malloc(sizeof(int32_t) * (size_t)(2 * k + m));
			cr_assert_eq(gpu->ops->read(gpu, &out.g, 0, w, sizeof(int32_t) * (size_t)(2 * k + m)), SG_OK);
			char what[64];
			snprintf(what, sizeof(what), "V %lld k %d", (long long)V, k);
			check_candidates(xv, V, k, gid, m, w, what);
			free(w);
			pair_free(&out);
		}
		pair out = pair_new(SG_TYPE_I32, 2 * 8, 1, 1, 1);
		cr_expect_neq(gpu->ops->top_candidates(gpu, &x.g, (int)V + 1, NULL, &out.g), SG_OK, "k past the row");
		cr_expect_neq(gpu->ops->top_candidates(gpu, &x.g, 0, NULL, &out.g), SG_OK, "k = 0");
		cr_expect_neq(gpu->ops->top_candidates(gpu, &x.g, 9, NULL, &out.g), SG_OK, "out too small");
		pair_free(&out), pair_free(&g), pair_free(&x);
	}
}

/* A small decode step recorded once and replayed with new device positions equals the per-op
 * path bit for bit. */
Test(cuda, graph_replay_equals_per_op_with_device_positions)
{
	const wtype *wt = &wtypes[8]; /* Q4_K */
	int64_t D = 256, H = 4, hd = 64, ctx = 2048;
	hw w = make_w(wt, H * hd, D);
	sg_btensor wc, wg;
	bind_both(&w, &wc, &wg);
	pair x = pair_rand(D, 1, 1, 1.0f), q = pair_new(SG_TYPE_F32, H * hd, 1, 1, 1), k = pair_rand(hd, 1, 1, 1.0f), v = pair_rand(hd, 1, 1, 1.0f);
	pair kc = pair_new(SG_TYPE_F16, hd, 1, ctx, 1), vc = pair_new(SG_TYPE_F16, hd, 1, ctx, 1), out = pair_new(SG_TYPE_F32, H * hd, 1, 1, 1);
	pair am = pair_new(SG_TYPE_I32, 1, 1, 1, 1);
	int32_t p = 0;
	pair pos = pair_i32(1, 1, &p);
	sg_rope_params rp = rope_case(0, (int)hd);
	sg_attn_params ap = {0, 0, 0, 1, 0, NULL, 0};
	float *ref[3];
	int32_t refid[3];
	/* per-op path */
	for (int step = 0; step < 3; step++) {
		int32_t pv = 100 * step + 5;
		cr_assert_eq(gpu->ops->write(gpu, &pos.g, 0, &pv, 4), SG_OK);
		pair_push(&k); /* attn_prep rotates k in place: every step starts from the same k */
		cr_assert_eq(gpu->ops->matmul(gpu, &wg, &x.g, NULL, &q.g), SG_OK);
		cr_assert_eq(sg_backend_attn_prep(gpu, &q.g, &k.g, &v.g, &pos.g, &rp, &kc.g, &vc.g), SG_OK);
		cr_assert_eq(gpu->ops->attention(gpu, &q.g, &kc.g, &vc.g, &pos.g, &ap, &out.g), SG_OK);
		cr_assert_eq(gpu->ops->argmax(gpu, &out.g, &am.g), SG_OK);
		ref[step] = fetch(&out);
		cr_assert_eq(gpu->ops->read(gpu, &am.g, 0, &refid[step], 4), SG_OK);
	}
	/* same steps from a clean cache, recorded once */
	float *zeros = calloc((size_t)(hd * ctx), 2);
	cr_assert_eq(gpu->ops->write(gpu, &kc.g, 0, zeros, (size_t)(hd * ctx) * 2), SG_OK);
	cr_assert_eq(gpu->ops->write(gpu, &vc.g, 0, zeros, (size_t)(hd * ctx) * 2), SG_OK);
	cr_assert_eq(sg_cuda_graph_begin(gpu), SG_OK, "%s", sg_last_error());
	cr_assert_eq(gpu->ops->matmul(gpu, &wg, &x.g, NULL, &q.g), SG_OK);
	cr_assert_eq(sg_backend_attn_prep(gpu, &q.g, &k.g, &v.g, &pos.g, &rp, &kc.g, &vc.g), SG_OK);
	cr_assert_eq(gpu->ops->attention(gpu, &q.g, &kc.g, &vc.g, &pos.g, &ap, &out.g), SG_OK);
	cr_assert_eq(gpu->ops->argmax(gpu, &out.g, &am.g), SG_OK);
	cr_assert_eq(sg_cuda_graph_end(gpu), SG_OK, "%s", sg_last_error());
	for (int step = 0; step < 3; step++) {
		int32_t pv = 100 * step + 5, id = -1;
		cr_assert_eq(gpu->ops->write(gpu, &pos.g, 0, &pv, 4), SG_OK);
		pair_push(&k);
		cr_assert_eq(sg_cuda_graph_replay(gpu), SG_OK, "%s", sg_last_error());
		float *g = fetch(&out);
		cr_expect(memcmp(g, ref[step], sizeof(float) * (size_t)(H * hd)) == 0, "step %d differs from the per-op path", step);
		cr_assert_eq(gpu->ops->read(gpu, &am.g, 0, &id, 4), SG_OK);
		cr_expect(id == refid[step], "step %d argmax %d vs %d", step, id, refid[step]);
		free(g);
		free(ref[step]);
	}
	free(zeros);
	pair *all[] = {&x, &q, &k, &v, &kc, &vc, &out, &am, &pos};
	for (int i = 0; i < 9; i++) pair_free(all[i]);
	gpu->ops->tensor_free(gpu, &wg), cpu->ops->tensor_free(cpu, &wc); /* the CPU may own a repacked copy */
	free_hw(&w);
}

/* ---- the decode graph of a session (forward.c) against the per-op path ---- */

static const int32_t dprompt[] = {5, 17, 101, 33, 250, 9, 77};
#define DSTEPS 12

/* Prefill of the prompt, then DSTEPS greedy steps feeding back the argmax of each step's logits;
 * every step's logits into lg [DSTEPS][V], the ids into ids. graphs: SARAGOSSA_CUDA_GRAPHS.
 * Returns 1 if the session's decode ran from a recorded graph. */
static int decode_run(const char *name, const char *graphs, int greedy, float *lg, int32_t *ids, int *V)
{
	char path[256];
	snprintf(path, sizeof(path), "tests/fixtures/%s", name);
	setenv("SARAGOSSA_CUDA_GRAPHS", graphs, 1);
	sg_flags_reload();
	sg_model_params mp = sg_model_default_params();
	mp.backend = "cuda";
	sg_model *m = NULL;
	if (sg_model_load(path, &mp, &m) != SG_OK) {
		unsetenv("SARAGOSSA_CUDA_GRAPHS");
		sg_flags_reload();
		cr_skip_test("no usable GPU: %s", sg_last_error());
	}
	*V = sg_model_n_vocab(m);
	sg_session_params sp = sg_session_default_params();
	sp.n_ctx = 64;
	sp.n_batch = 4; /* the prompt in chunks: the scratch grows before the first decode step */
	sp.kv_type = SG_KV_F32;
	sg_session *s = NULL;
	cr_assert_eq(sg_session_new(m, &sp, &s), SG_OK, "%s", sg_last_error());
	int n = (int)(sizeof(dprompt) / sizeof(dprompt[0]));
	cr_assert_eq(sg_session_eval(s, dprompt, n, NULL), SG_OK, "%s", sg_last_error());
	const float *l0 = sg_session_logits(s);
	int32_t tok = 0;
	for (int i = 1; i < *V; i++)
		if (l0[i] > l0[tok]) tok = i;
	for (int step = 0; step < DSTEPS; step++) {
		float *row = lg + (size_t)step * (size_t)*V;
		if (greedy) {
			int32_t next = -1;
			cr_assert_eq(sg_session_decode_greedy(s, tok, &next), SG_OK, "%s", sg_last_error());
			cr_assert_null(sg_session_logits(s), "greedy decode read the logits back");
			cr_assert_eq(sg_session_fetch_logits(s), SG_OK, "%s", sg_last_error());
			memcpy(row, sg_session_logits(s), sizeof(float) * (size_t)*V);
			tok = next;
		} else {
			cr_assert_eq(sg_session_eval(s, &tok, 1, NULL), SG_OK, "%s", sg_last_error());
			memcpy(row, sg_session_logits(s), sizeof(float) * (size_t)*V);
			tok = 0;
			for (int i = 1; i < *V; i++)
				if (row[i] > row[tok]) tok = i;
		}
		ids[step] = tok;
	}
	int used = s->fs.graph != NULL;
	sg_session_free(s);
	sg_model_free(m);
	unsetenv("SARAGOSSA_CUDA_GRAPHS");
	sg_flags_reload();
	return used;
}

/* Graph replay (greedy: only the id read back; and full logits) gives bit-identical logits and
 * tokens to the per-op path (same kernels, same order). */
static void graph_matches_per_op(const char *name, int expect_graph)
{
	int V = 0;
	size_t cap = (size_t)DSTEPS * 300000;
	float *a = malloc(sizeof(float) * cap), *b = malloc(sizeof(float) * cap), *c = malloc(sizeof(float) * cap);
	int32_t ia[DSTEPS], ib[DSTEPS], ic[DSTEPS];
	cr_assert(a && b && c);
	cr_assert_eq(decode_run(name, "0", 0, a, ia, &V), 0, "%s: a graph with SARAGOSSA_CUDA_GRAPHS=0", name);
	cr_assert(V <= 300000);
	cr_assert_eq(decode_run(name, "1", 1, b, ib, &V), expect_graph, "%s: graph used", name);
	cr_assert_eq(decode_run(name, "1", 0, c, ic, &V), expect_graph, "%s: graph used", name);
	size_t bytes = sizeof(float) * (size_t)DSTEPS * (size_t)V;
	cr_expect(!memcmp(a, b, bytes), "%s: greedy graph logits differ from the per-op path", name);
	cr_expect(!memcmp(a, c, bytes), "%s: graph logits differ from the per-op path", name);
	for (int i = 0; i < DSTEPS; i++) {
		cr_expect_eq(ia[i], ib[i], "%s: step %d greedy id %d vs %d", name, i, ib[i], ia[i]);
		cr_expect_eq(ia[i], ic[i], "%s: step %d id %d vs %d", name, i, ic[i], ia[i]);
	}
	free(a);
	free(b);
	free(c);
}

/* Programmatic dependent launch only moves when a kernel's blocks start, never what they compute:
 * the recorded decode with SARAGOSSA_CUDA_PDL=1 gives the bits of plain launches
 * (a kernel reading its predecessor's output before waiting would show here as a difference). */
static void pdl_matches_plain(const char *name)
{
	int V = 0;
	size_t cap = (size_t)DSTEPS * 300000;
	float *l[2];
	int32_t ids[2][DSTEPS];
	const char *mode[2] = {"0", "1"};
	for (int i = 0; i < 2; i++) {
		l[i] = malloc(sizeof(float) * cap);
		cr_assert(l[i]);
		setenv("SARAGOSSA_CUDA_PDL", mode[i], 1);
		cr_assert_eq(decode_run(name, "1", 0, l[i], ids[i], &V), 1, "%s: graph used", name);
		unsetenv("SARAGOSSA_CUDA_PDL");
		sg_flags_reload();
	}
	for (int i = 1; i < 2; i++) {
		cr_expect(!memcmp(l[0], l[i], sizeof(float) * (size_t)DSTEPS * (size_t)V), "%s: PDL=%s logits differ from plain launches", name, mode[i]);
		cr_expect(!memcmp(ids[0], ids[i], sizeof(ids[0])), "%s: PDL=%s tokens differ", name, mode[i]);
	}
	for (int i = 0; i < 2; i++) free(l[i]);
}

/* Decode steps ending in sampling candidates (sg_session_decode_top), replayed from their own
 * graph and op by op: every step's candidates are the host ranking of that step's logits, and the
 * logits are the greedy path's bits. */
static void candidates_match_logits(const char *name)
{
	int V = 0;
	size_t cap = (size_t)DSTEPS * 300000;
	float *ref = malloc(sizeof(float) * cap);
	int32_t rid[DSTEPS];
	cr_assert(ref);
	cr_assert_eq(decode_run(name, "1", 1, ref, rid, &V), 1, "%s: graph used", name);
	for (int graphs = 0; graphs < 2; graphs++) {
		char path[256];
		snprintf(path, sizeof(path), "tests/fixtures/%s", name);
		setenv("SARAGOSSA_CUDA_GRAPHS", graphs ? "1" : "0", 1);
		sg_flags_reload();
		sg_model_params mp = sg_model_default_params();
		mp.backend = "cuda";
		sg_model *m = NULL;
		cr_assert_eq(sg_model_load(path, &mp, &m), SG_OK, "%s", sg_last_error());
		sg_session_params sp = sg_session_default_params();
		sp.n_ctx = 64;
		sp.n_batch = 4;
		sp.kv_type = SG_KV_F32;
		sg_session *s = NULL;
		cr_assert_eq(sg_session_new(m, &sp, &s), SG_OK, "%s", sg_last_error());
		cr_assert_eq(sg_session_top_max(s), SG_BACKEND_TOPC_MAX);
		int n = (int)(sizeof(dprompt) / sizeof(dprompt[0]));
		cr_assert_eq(sg_session_eval(s, dprompt, n, NULL), SG_OK, "%s", sg_last_error());
		const float *l0 = sg_session_logits(s);
		int32_t tok = 0;
		for (int i = 1; i < V; i++)
			if (l0[i] > l0[tok]) tok = i;
		enum { K = 50, M = 3 };
		int32_t gid[M] = {1, -1, 7}, w[2 * K + M], tid[K];
		float tv[K], gv[M];
		for (int step = 0; step < DSTEPS; step++) {
			cr_assert_eq(sg_session_decode_top(s, tok, K, gid, M, tid, tv, gv), SG_OK, "%s", sg_last_error());
			cr_assert_null(sg_session_logits(s), "a candidate step read the logits back");
			cr_assert_eq(sg_session_fetch_logits(s), SG_OK, "%s", sg_last_error());
			const float *l = sg_session_logits(s);
			cr_assert(!memcmp(l, ref + (size_t)step * (size_t)V, sizeof(float) * (size_t)V), "%s: step %d logits differ from the greedy path's", name, step);
			memcpy(w, tid, sizeof(tid)), memcpy(w + K, tv, sizeof(tv)), memcpy(w + 2 * K, gv, sizeof(gv));
			char what[64];
			snprintf(what, sizeof(what), "%s step %d graphs %d", name, step, graphs);
			check_candidates(l, V, K, gid, M, w, what);
			tok = rid[step]; /* the greedy path's tokens: its logits stay comparable */
		}
		cr_expect_eq(s->fs.graph_tc != NULL, graphs, "%s: candidate graph recorded with graphs %d", name, graphs);
		sg_session_free(s);
		sg_model_free(m);
		unsetenv("SARAGOSSA_CUDA_GRAPHS");
		sg_flags_reload();
	}
	free(ref);
}

Test(cuda_decode, candidate_steps_rank_their_logits_qwen3) { candidates_match_logits("qwen3"); }
Test(cuda_decode, candidate_steps_rank_their_logits_moe) { candidates_match_logits("qwen3_moe"); }

Test(cuda_decode, pdl_launches_are_bit_identical_qwen3) { pdl_matches_plain("qwen3"); }
Test(cuda_decode, pdl_launches_are_bit_identical_mlx_q4) { pdl_matches_plain("qwen3_mlx_q4_g32"); }
Test(cuda_decode, pdl_launches_are_bit_identical_moe) { pdl_matches_plain("qwen3_moe"); }

Test(cuda_decode, graph_replay_is_bit_identical_qwen3) { graph_matches_per_op("qwen3", 1); }
Test(cuda_decode, graph_replay_is_bit_identical_llama) { graph_matches_per_op("llama", 1); }
Test(cuda_decode, graph_replay_is_bit_identical_mlx_q4) { graph_matches_per_op("qwen3_mlx_q4_g32", 1); }
Test(cuda_decode, graph_replay_is_bit_identical_moe) { graph_matches_per_op("qwen3_moe", 1); }
/* sliding layers with ring caches of 12 rows (window 8 + chunk 4 in a context of 64): the ring rows
 * are written with the positions before each replay, and the steps wrap the ring */
Test(cuda_decode, graph_replay_is_bit_identical_gemma3_ring) { graph_matches_per_op("gemma3_text", 1); }

/* Hybrid stacks recorded as one graph (SARAGOSSA_CUDA_GRAPHS_HYBRID=1): the gated delta net's conv
 * and delta states, updated in place by each replay, carry the sequence as the per-op steps do
 * (Qwen3-Next; Qwen3.5 MoE with its shared expert and gated attention; Gemma 4's experts beside the
 * dense MLP, k = v, sliding ring caches); Gemma 4 with per-layer inputs (token rows the host copies
 * mid-step) stays per-op. */
static void hybrid_graph_matches_per_op(const char *name, int expect_graph)
{
	setenv("SARAGOSSA_CUDA_GRAPHS_HYBRID", "1", 1);
	sg_flags_reload();
	graph_matches_per_op(name, expect_graph);
	unsetenv("SARAGOSSA_CUDA_GRAPHS_HYBRID");
	sg_flags_reload();
}
Test(cuda_decode, graph_replay_is_bit_identical_qwen3_next) { hybrid_graph_matches_per_op("qwen3_next", 1); }
Test(cuda_decode, graph_replay_is_bit_identical_qwen3_5_moe) { hybrid_graph_matches_per_op("qwen3_5_moe_text", 1); }
Test(cuda_decode, graph_replay_is_bit_identical_gemma4_moe) { hybrid_graph_matches_per_op("gemma4_text_moe", 1); }
Test(cuda_decode, gemma4_per_layer_inputs_stay_per_op) { hybrid_graph_matches_per_op("gemma4_text", 0); }
Test(cuda_decode, pdl_launches_are_bit_identical_qwen3_next)
{
	setenv("SARAGOSSA_CUDA_GRAPHS_HYBRID", "1", 1);
	pdl_matches_plain("qwen3_next");
	unsetenv("SARAGOSSA_CUDA_GRAPHS_HYBRID");
	sg_flags_reload();
}


/* ---- exact verify steps (match_decode) ---- */

/* Runs a stage (form 0: q/k/v with the norm; 1: gate/up with the GLU; 2: down with the residual
 * add; 3: the plain matmul) over rows [t0, t0 + nt) of x into the outputs' same rows. */
typedef struct {
	sg_btensor *w[3];
	int64_t N[3];
	pair x, xn, nw, res, y[3];
} stage_case;

static void stage_run(stage_case *s, int form, int64_t t0, int64_t nt)
{
	sg_btensor x = sg_btensor_rows_view(&s->x.g, t0, nt), xn = sg_btensor_rows_view(&s->xn.g, t0, nt);
	sg_btensor y[3], res = sg_btensor_rows_view(&s->res.g, t0, nt);
	for (int i = 0; i < 3; i++) y[i] = sg_btensor_rows_view(&s->y[i].g, t0, nt);
	sg_status st;
	if (form == 3) {
		st = gpu->ops->matmul(gpu, s->w[0], &x, NULL, &y[0]);
	} else {
		sg_matmul_multi p = {.x = &x, .nw = form == 0 ? 3 : form == 1 ? 2 : 1, .w = {s->w[0], s->w[1], s->w[2]}, .y = {&y[0], &y[1], &y[2]}};
		if (form < 2) p.norm = &s->nw.g, p.eps = 1e-6f, p.xn = &xn;
		if (form == 1) p.glu = 1, p.act = SG_ACT_SILU;
		if (form == 2) p.residual = &res, p.out = &y[0];
		st = sg_backend_matmul_multi(gpu, &p);
	}
	cr_assert_eq(st, SG_OK, "form %d: %s", form, sg_last_error());
}

/* Every weight format and stage form: n tokens in one exact step (match_decode) give each token
 * the bits of a one-token step, through the token-batched kernels (SARAGOSSA_CUDA_VERIFY_BATCH=1:
 * a block a token, and SARAGOSSA_CUDA_VERIFY_MT's groups of tokens a block, here always taken; rows
 * of 35 blocks (K = 8960) hold 3 tokens a group and several blocks a lane) and one token at a
 * time (0). */
Test(cuda, exact_steps_give_each_token_its_one_token_bits)
{
	sg_cuda_backend *cb = (sg_cuda_backend *)gpu;
	const int64_t n = 5;
	const sg_cu_policy pol0 = *sg_cu_policy_now();
	for (int c = 0; c < N_WTYPES; c++) {
		const wtype *wt = &wtypes[c];
		for (int kv = 0; kv < 3; kv++) {
			int64_t K = kv == 2 ? 8960 : k_for(wt, kv), Ns[3] = {64, 64, 48};
			hw h[3];
			sg_btensor wc[3], wg[3];
			stage_case s;
			memset(&s, 0, sizeof(s));
			for (int i = 0; i < 3; i++) {
				h[i] = make_w(wt, Ns[i], K);
				bind_both(&h[i], &wc[i], &wg[i]);
				s.w[i] = &wg[i];
			}
			s.x = pair_rand(K, n, 1, 1.0f), s.xn = pair_new(SG_TYPE_F32, K, n, 1, 1), s.nw = pair_rand(K, 1, 1, 1.0f);
			s.res = pair_rand(64, n, 1, 1.0f);
			for (int i = 0; i < 3; i++) s.y[i] = pair_new(SG_TYPE_F32, Ns[i], n, 1, 1);
			for (int form = 0; form < 4; form++) {
				int outs = form == 0 ? 3 : 1;
				float *ref[3], *got[3];
				for (int i = 0; i < outs; i++) poison(&s.y[i]);
				for (int64_t t = 0; t < n; t++) stage_run(&s, form, t, 1);
				for (int i = 0; i < outs; i++) ref[i] = fetch(&s.y[i]);
				for (int b = 2; b >= 0; b--) { /* tokens in groups a block; a block a token; token by token */
					sg_cu_policy pol = pol0;
					pol.gemv.verify_mt = b == 2 ? 2 : 0;
					sg_cu_policy_set(&pol);
					cb->verify_batch = b > 0;
					for (int i = 0; i < outs; i++) poison(&s.y[i]);
					gpu->ops->match_decode(gpu, 1);
					stage_run(&s, form, 0, n);
					gpu->ops->match_decode(gpu, 0);
					for (int i = 0; i < outs; i++) {
						got[i] = fetch(&s.y[i]);
						cr_expect(!memcmp(ref[i], got[i], sizeof(float) * (size_t)(Ns[i] * n)), "%s K=%lld form %d output %d, %s: not the one-token bits",
							  wt->name, (long long)K, form, i, b == 2 ? "token groups" : b ? "batched" : "token by token");
						free(got[i]);
					}
				}
				sg_cu_policy_set(&pol0);
				cb->verify_batch = sg_flag_bool("SARAGOSSA_CUDA_VERIFY_BATCH");
				for (int i = 0; i < outs; i++) free(ref[i]);
			}
			pair *all[] = {&s.x, &s.xn, &s.nw, &s.res, &s.y[0], &s.y[1], &s.y[2]};
			for (int i = 0; i < 7; i++) pair_free(all[i]);
			for (int i = 0; i < 3; i++) gpu->ops->tensor_free(gpu, &wg[i]), cpu->ops->tensor_free(cpu, &wc[i]), free_hw(&h[i]);
		}
	}
}

/* The attention of an exact step: n tokens after their prep (q/k norms, rope, the cache rows) give
 * each token the output and cache rows of one-token steps taken in turn (the prep fused into the
 * one-token kernel there), over f16 and f32 caches, GQA, a window; caches of at most 512 rows take
 * one launch for the step's tokens, longer ones a launch per token (a short sequence in a long cache
 * among them), or one launch of the slices the positions reach when the caller says how far they go
 * (rows_live). */
Test(cuda, exact_step_attention_equals_one_token_steps)
{
	struct {
		int64_t H, Hkv, hd, ctx;
		int32_t p;
		int window, f16;
	} cs[] = {{16, 4, 128, 512, 37, 0, 1}, {8, 8, 64, 300, 250, 0, 1}, {8, 2, 128, 700, 600, 128, 1}, {4, 2, 64, 200, 9, 0, 0},
		  {8, 2, 64, 1500, 1000, 0, 1}, {8, 4, 64, 2048, 40, 0, 1}, {12, 2, 128, 2048, 400, 0, 1}};
	const int64_t n = 6;
	for (size_t c = 0; c < sizeof(cs) / sizeof(cs[0]); c++) {
		int64_t H = cs[c].H, Hkv = cs[c].Hkv, hd = cs[c].hd, ctx = cs[c].ctx, D = H * hd, KD = Hkv * hd;
		sg_attn_params ap = {0, 0, cs[c].window, 1, 1, NULL, 0};
		sg_rope_params rp = rope_case(1, (int)hd);
		int32_t pv[6];
		for (int t = 0; t < n; t++) pv[t] = cs[c].p + t;
		pair pos = pair_i32(1, n, pv), q0 = pair_rand(D, n, 1, 2.0f), k0 = pair_rand(KD, n, 1, 2.0f), v = pair_rand(KD, n, 1, 1.0f);
		pair q = pair_new(SG_TYPE_F32, D, n, 1, 1), k = pair_new(SG_TYPE_F32, KD, n, 1, 1), att = pair_new(SG_TYPE_F32, D, n, 1, 1);
		pair qn = pair_rand(hd, 1, 1, 1.0f), kn = pair_rand(hd, 1, 1, 1.0f), hk = pair_rand(KD, ctx, 1, 1.0f), hv = pair_rand(KD, ctx, 1, 1.0f);
		sg_type ct = cs[c].f16 ? SG_TYPE_F16 : SG_TYPE_F32;
		pair kc = pair_new(ct, hd, Hkv, ctx, 1), vc = pair_new(ct, hd, Hkv, ctx, 1);
		int32_t *allp = malloc(sizeof(int32_t) * (size_t)ctx);
		for (int i = 0; i < ctx; i++) allp[i] = i;
		pair hp = pair_i32(ctx, 1, allp);
		float *got[4][3];
		/* one-token steps; one exact step, batched; token by token; batched with the positions
		 * known (rows_live: the one launch stops at the slices they reach) */
		for (int m = 0; m < 4; m++) {
			ap.rows_live = m == 3 ? cs[c].p + (int)n : 0;
			cr_assert_eq(gpu->ops->kv_store(gpu, &hk.g, &hv.g, &hp.g, &kc.g, &vc.g), SG_OK);
			cr_assert_eq(gpu->ops->write(gpu, &q.g, 0, q0.c.data, sizeof(float) * (size_t)(D * n)), SG_OK);
			cr_assert_eq(gpu->ops->write(gpu, &k.g, 0, k0.c.data, sizeof(float) * (size_t)(KD * n)), SG_OK);
			poison(&att);
			((sg_cuda_backend *)gpu)->verify_batch = m != 2;
			int64_t step = m ? n : 1;
			if (m) gpu->ops->match_decode(gpu, 1);
			for (int64_t t = 0; t < n; t += step) {
				sg_btensor qt = sg_btensor_rows_view(&q.g, t, step), kt = sg_btensor_rows_view(&k.g, t, step), vt = sg_btensor_rows_view(&v.g, t, step);
				sg_btensor pt = sg_btensor_rows_view(&pos.g, t, step), ot = sg_btensor_rows_view(&att.g, t, step);
				pt.ne[0] = step, pt.ne[1] = 1, pt.row_bytes = sizeof(int32_t) * (size_t)step; /* [n] as the forward passes it */
				cr_assert_eq(gpu->ops->attention_prep(gpu, &qt, &kt, &vt, &pt, &rp, &qn.g, &kn.g, 1e-6f, 0.0f, &kc.g, &vc.g, &ap, &ot), SG_OK, "%s",
					     sg_last_error());
				/* one-token steps back to back: a forward has a whole layer of kernels between
				 * two steps' attentions; here the next step's loads before its wait could
				 * overtake this step's cache stores */
				if (!m) cr_assert_eq(gpu->ops->sync(gpu), SG_OK);
			}
			if (m) gpu->ops->match_decode(gpu, 0);
			got[m][0] = fetch(&att), got[m][1] = fetch(&kc), got[m][2] = fetch(&vc);
		}
		((sg_cuda_backend *)gpu)->verify_batch = sg_flag_bool("SARAGOSSA_CUDA_VERIFY_BATCH");
		size_t nv[3] = {(size_t)(D * n), (size_t)(ctx * KD), (size_t)(ctx * KD)};
		const char *what[3] = {"output", "k cache", "v cache"};
		int finite = 1;
		for (size_t i = 0; i < nv[0]; i++) finite &= isfinite(got[0][0][i]) != 0;
		cr_expect(finite, "case %zu: output not finite", c);
		for (int j = 0; j < 3; j++) {
			for (int m = 1; m < 4; m++)
				cr_expect(!memcmp(got[0][j], got[m][j], sizeof(float) * nv[j]), "case %zu: exact step (%s) %s differs from one-token steps", c,
					  m == 1 ? "batched" : m == 2 ? "token by token" : "batched, positions known", what[j]);
			for (int m = 0; m < 4; m++) free(got[m][j]);
		}
		free(allp);
		pair *all[] = {&pos, &q0, &k0, &v, &q, &k, &att, &qn, &kn, &hk, &hv, &kc, &vc, &hp};
		for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) pair_free(all[i]);
	}
}

/* The expert ops of an exact step: n tokens' routed gate/up (with the GLU) and down give each
 * token the bits of a one-token step. */
Test(cuda, exact_step_experts_equal_one_token_steps)
{
	static const int tys[] = {8, 10, 12, 3, 1};
	const int64_t n = 4, k = 3, E = 6, N = 256, D = 64;
	for (int ci = 0; ci < 5; ci++) {
		const wtype *wt = &wtypes[tys[ci]];
		int64_t K = k_for(wt, 1);
		hw wgh = make_w(wt, E * N, K), wuh = make_w(wt, E * N, K), wdh = make_w(wt, E * D, N);
		wgh.t.ne[1] = wuh.t.ne[1] = N, wdh.t.ne[1] = D;
		wgh.t.ne[2] = wuh.t.ne[2] = wdh.t.ne[2] = E;
		sg_btensor gc, gg, uc, ug, dc, dg;
		bind_both(&wgh, &gc, &gg);
		bind_both(&wuh, &uc, &ug);
		bind_both(&wdh, &dc, &dg);
		int32_t idv[12] = {3, 0, 5, 1, 2, 4, 5, 4, 3, 0, 1, 2};
		pair ids = pair_i32(k, n, idv), x = pair_rand(K, n, 1, 1.0f);
		pair g = pair_new(SG_TYPE_F32, N, n * k, 1, 1), u = pair_new(SG_TYPE_F32, N, n * k, 1, 1), y = pair_new(SG_TYPE_F32, D, n * k, 1, 1);
		float *got[3][2];
		for (int m = 0; m < 3; m++) { /* one-token steps; one exact step, batched; token by token */
			((sg_cuda_backend *)gpu)->verify_batch = m != 2;
			poison(&g), poison(&y);
			int64_t step = m ? n : 1;
			if (m) gpu->ops->match_decode(gpu, 1);
			for (int64_t t = 0; t < n; t += step) {
				sg_btensor xt = sg_btensor_rows_view(&x.g, t, step), it = sg_btensor_rows_view(&ids.g, t, step);
				sg_btensor gt = sg_btensor_rows_view(&g.g, t * k, step * k), ut = sg_btensor_rows_view(&u.g, t * k, step * k);
				sg_btensor yt = sg_btensor_rows_view(&y.g, t * k, step * k);
				cr_assert_eq(sg_backend_moe_glu(gpu, &gg, &ug, &xt, &it, SG_ACT_SILU, &gt, &ut), SG_OK, "%s", sg_last_error());
				cr_assert_eq(gpu->ops->moe_matmul(gpu, &dg, &gt, &it, &yt), SG_OK, "%s", sg_last_error());
			}
			if (m) gpu->ops->match_decode(gpu, 0);
			got[m][0] = fetch(&g), got[m][1] = fetch(&y);
		}
		((sg_cuda_backend *)gpu)->verify_batch = sg_flag_bool("SARAGOSSA_CUDA_VERIFY_BATCH");
		for (int m = 1; m < 3; m++) {
			cr_expect(!memcmp(got[0][0], got[m][0], sizeof(float) * (size_t)(N * n * k)), "%s: exact step's gate/up (%d) differ", wt->name, m);
			cr_expect(!memcmp(got[0][1], got[m][1], sizeof(float) * (size_t)(D * n * k)), "%s: exact step's down (%d) differ", wt->name, m);
		}
		for (int m = 0; m < 3; m++) free(got[m][0]), free(got[m][1]);
		pair_free(&ids), pair_free(&x), pair_free(&g), pair_free(&u), pair_free(&y);
		gpu->ops->tensor_free(gpu, &gg), cpu->ops->tensor_free(cpu, &gc);
		gpu->ops->tensor_free(gpu, &ug), cpu->ops->tensor_free(cpu, &uc);
		gpu->ops->tensor_free(gpu, &dg), cpu->ops->tensor_free(cpu, &dc);
		free_hw(&wgh), free_hw(&wuh), free_hw(&wdh);
	}
}

#else

Test(cuda, skipped_without_cuda_in_the_build)
{
	cr_skip_test("CUDA is not built in (make CUDA=1)");
}

#endif

/* ---- greedy decode on any backend (runs on the CPU in CI) ---- */

/* sg_session_decode_greedy returns the argmax (lowest id on ties) of the logits sg_session_eval
 * gives for the same token, and its fetched logits are those logits. */
Test(decode_greedy, returns_the_argmax_of_the_step_logits_on_cpu)
{
	sg_model_params mp = sg_model_default_params();
	mp.n_threads = 1;
	sg_model *m = NULL;
	cr_assert_eq(sg_model_load("tests/fixtures/qwen3", &mp, &m), SG_OK, "%s", sg_last_error());
	sg_session_params sp = sg_session_default_params();
	sp.n_ctx = 32;
	sp.kv_type = SG_KV_F32;
	sg_session *a = NULL, *b = NULL;
	cr_assert_eq(sg_session_new(m, &sp, &a), SG_OK, "%s", sg_last_error());
	cr_assert_eq(sg_session_new(m, &sp, &b), SG_OK, "%s", sg_last_error());
	int V = sg_model_n_vocab(m);
	const int32_t prompt[] = {5, 17, 101, 33};
	cr_assert_eq(sg_session_eval(a, prompt, 4, NULL), SG_OK);
	cr_assert_eq(sg_session_eval(b, prompt, 4, NULL), SG_OK);
	cr_assert_eq(sg_session_fetch_logits(a), SG_OK); /* already on the host: no-op */
	int32_t tok = 7;
	for (int step = 0; step < 6; step++) {
		int32_t next = -1;
		cr_assert_eq(sg_session_decode_greedy(a, tok, &next), SG_OK, "%s", sg_last_error());
		cr_assert_eq(sg_session_eval(b, &tok, 1, NULL), SG_OK, "%s", sg_last_error());
		const float *lb = sg_session_logits(b);
		int32_t best = 0;
		for (int i = 1; i < V; i++)
			if (lb[i] > lb[best]) best = i;
		cr_expect_eq(next, best, "step %d: greedy %d, argmax of the logits %d", step, next, best);
		cr_assert_null(sg_session_logits(a));
		cr_assert_eq(sg_session_fetch_logits(a), SG_OK, "%s", sg_last_error());
		cr_expect(!memcmp(sg_session_logits(a), lb, sizeof(float) * (size_t)V), "step %d: fetched logits differ", step);
		tok = best;
	}
	cr_expect_eq(sg_session_position(a), 10);
	cr_expect(!memcmp(sg_session_tokens(a), sg_session_tokens(b), sizeof(int32_t) * 10));
	/* out-of-vocabulary token: refused, the session unchanged */
	int32_t next;
	cr_expect_eq(sg_session_decode_greedy(a, V, &next), SG_ERR_RANGE);
	cr_expect_eq(sg_session_position(a), 10);
	sg_session_free(a);
	sg_session_free(b);
	sg_model_free(m);
}

#if SG_CUDA
/* The planar Q4_K / Q6_K / MLX 4-bit device rows (no GPU needed): repacking then unpacking gives the file row
 * back; each field lands where the kernels read it (Q4_K: piece p of block b's codes at (p * nb +
 * b) * 16, scales at 128 nb + 12 b, d/dmin at 140 nb + 4 b; Q6_K: ql pieces, qh pieces at 128 nb,
 * scales at 192 nb + 16 b, d at 208 nb + 2 b); bad lengths and types are refused. */
Test(cuda_layout, planar_k_quant_rows_round_trip_and_place_every_field)
{
	static const int64_t Ks[] = {256, 768, 4096};
	for (int t = 0; t < 2; t++) {
		int kt = t ? SG_CUKT_Q6_K : SG_CUKT_Q4_K, bb = t ? 210 : 144;
		for (int ki = 0; ki < 3; ki++) {
			int64_t K = Ks[ki], nb = K / 256;
			size_t n = (size_t)nb * (size_t)bb;
			uint8_t *f = malloc(n), *d = malloc(n), *back = malloc(n);
			for (size_t i = 0; i < n; i++) f[i] = (uint8_t)rnd();
			cr_assert_eq(sg_cuda_repack_kq(kt, K, f, d), 0);
			memset(back, 0, n);
			cr_assert_eq(sg_cuda_unpack_kq(kt, K, d, back), 0);
			cr_expect(!memcmp(f, back, n), "kt %d K=%lld: round trip differs", kt, (long long)K);
			for (int64_t b = 0; b < nb; b++) {
				const uint8_t *fb = f + b * bb;
				for (int p = 0; p < 8; p++)
					cr_expect(!memcmp(d + (p * nb + b) * 16, fb + (t ? 0 : 16) + 16 * p, 16), "kt %d block %lld piece %d", kt, (long long)b, p);
				if (t) {
					for (int p = 0; p < 4; p++) cr_expect(!memcmp(d + 128 * nb + (p * nb + b) * 16, fb + 128 + 16 * p, 16));
					cr_expect(!memcmp(d + 192 * nb + 16 * b, fb + 192, 16) && !memcmp(d + 208 * nb + 2 * b, fb + 208, 2));
				} else {
					cr_expect(!memcmp(d + 128 * nb + 12 * b, fb + 4, 12) && !memcmp(d + 140 * nb + 4 * b, fb, 4));
				}
			}
			free(f), free(d), free(back);
		}
	}
	{ /* MLX 4-bit codes: 8 pieces of 16 bytes a 256-block */
		int64_t K = 1024, nb = K / 256;
		uint8_t f[512], d[512], back[512];
		for (int i = 0; i < 512; i++) f[i] = (uint8_t)rnd();
		cr_assert_eq(sg_cuda_repack_kq(SG_CUKT_MLX4, K, f, d), 0);
		cr_assert_eq(sg_cuda_unpack_kq(SG_CUKT_MLX4, K, d, back), 0);
		cr_expect(!memcmp(f, back, 512));
		for (int64_t b = 0; b < nb; b++)
			for (int p = 0; p < 8; p++) cr_expect(!memcmp(d + (p * nb + b) * 16, f + b * 128 + 16 * p, 16), "MLX4 block %lld piece %d", (long long)b, p);
	}
	uint8_t buf[512];
	cr_expect_eq(sg_cuda_repack_kq(SG_CUKT_Q4_K, 100, buf, buf + 256), -1);
	cr_expect_eq(sg_cuda_repack_kq(SG_CUKT_Q8_0, 256, buf, buf + 256), -1);
	cr_expect_eq(sg_cuda_unpack_kq(SG_CUKT_Q6_K, 0, buf, buf + 256), -1);
}

/* The fused decode GEMV (sg_cu_gemv_multi) against the CPU: every format it takes, every kernel,
 * each epilogue (three stores with biases after a norm; the GLU; the residual add). The reference
 * runs the CPU's rmsnorm and matmuls on the activations the GPU used (rounded to 8 bits for the
 * quantized formats), so only summation order separates the two. */
/* A stage over q, k, v of two formats (Q4_K, Q4_K, Q6_K: a Q4_K_M file's layers) runs as one launch
 * per format on activations rounded once, and equals the composition of its ops. */
Test(cuda, fused_stage_of_mixed_formats_matches_composition)
{
	int64_t K = 1024, N[3] = {256, 128, 128};
	const wtype *ty[3] = {&wtypes[8], &wtypes[8], &wtypes[10]};
	hw w[3];
	sg_btensor wc[3], wg[3];
	pair y[3], yc[3];
	for (int i = 0; i < 3; i++) {
		w[i] = make_w(ty[i], N[i], K);
		bind_both(&w[i], &wc[i], &wg[i]);
		y[i] = pair_new(SG_TYPE_F32, N[i], 1, 1, 1), yc[i] = pair_new(SG_TYPE_F32, N[i], 1, 1, 1);
	}
	pair x = pair_rand(K, 1, 1, 1.0f), nw = pair_rand(K, 1, 1, 1.0f), xn = pair_new(SG_TYPE_F32, K, 1, 1, 1);
	sg_matmul_multi m = {.x = &x.g, .norm = &nw.g, .eps = 1e-6f, .xn = &xn.g, .nw = 3, .w = {&wg[0], &wg[1], &wg[2]}, .y = {&y[0].g, &y[1].g, &y[2].g}};
	cr_assert_eq(sg_backend_matmul_multi(gpu, &m), SG_OK, "%s", sg_last_error());
	m.y[0] = &yc[0].g, m.y[1] = &yc[1].g, m.y[2] = &yc[2].g;
	cr_assert_eq(sg_backend_matmul_multi_compose(gpu, &m), SG_OK, "%s", sg_last_error());
	for (int i = 0; i < 3; i++) {
		float *a = fetch(&y[i]), *b = fetch(&yc[i]);
		double num = 0, den = 0;
		for (int64_t r = 0; r < N[i]; r++) num += ((double)a[r] - b[r]) * ((double)a[r] - b[r]), den += (double)b[r] * b[r];
		cr_expect(den > 0 && num / den < NMSE_F32 * 100, "output %d: nmse %.3g", i, den > 0 ? num / den : -1.0);
		free(a), free(b);
		pair_free(&y[i]), pair_free(&yc[i]);
		gpu->ops->tensor_free(gpu, &wg[i]), cpu->ops->tensor_free(cpu, &wc[i]);
		free_hw(&w[i]);
	}
	pair_free(&x), pair_free(&nw), pair_free(&xn);
}

Test(cuda, fused_gemv_every_format_kernel_and_epilogue_matches_cpu)
{
	for (int c = 0; c < N_WTYPES; c++) {
		sg_cuw probe;
		int64_t K = k_for(&wtypes[c], 1);
		hw w0 = make_w(&wtypes[c], 64, K);
		sg_btensor wc[3], wg[3];
		bind_both(&w0, &wc[0], &wg[0]);
		cr_assert_eq(sg_cuda_weight_view(&wg[0], &probe), SG_OK);
		if (!sg_cu_multi_ok(probe.kt)) {
			gpu->ops->tensor_free(gpu, &wg[0]), cpu->ops->tensor_free(cpu, &wc[0]);
			free_hw(&w0);
			continue;
		}
		hw w1 = make_w(&wtypes[c], 64, K), w2 = make_w(&wtypes[c], 37, K);
		bind_both(&w1, &wc[1], &wg[1]);
		bind_both(&w2, &wc[2], &wg[2]);
		int q8 = q8_kernels(&wtypes[c]);
		pair x = pair_rand(K, 1, 1, 1.5f), nw = pair_rand(K, 1, 1, 1.0f), xn = pair_new(SG_TYPE_F32, K, 1, 1, 1);
		pair y[3], b[3];
		int64_t N[3] = {64, 64, 37};
		for (int i = 0; i < 3; i++) y[i] = pair_new(SG_TYPE_F32, N[i], 1, 1, 1), b[i] = pair_rand(N[i], 1, 1, 1.0f);
		pair res = pair_rand(37, 1, 1, 1.0f), out = pair_new(SG_TYPE_F32, 37, 1, 1, 1);
		pair q8s = pair_new(SG_TYPE_I32, (int64_t)(sg_cu_q8_bytes(1, K) / 4 + 1), 1, 1, 1);
		cr_assert_eq(cpu->ops->rmsnorm(cpu, &x.c, &nw.c, 1e-6f, 0.0f, &xn.c), SG_OK);
		float *xcpu = cpu_floats(&xn);
		/* the policy's kernels: 0 the default (block per lane where the format has it), 1 the unit
		 * kernels (MLX 4-bit: the warp-split one), 2 the persistent grid for every launch it takes */
		static const char *kern[3] = {"default", "unit kernels", "persistent grid"};
		for (int var = 0; var < 3; var++) {
			for (int epi = 0; epi < 3; epi++) {
				sg_cu_multi m;
				memset(&m, 0, sizeof(m));
				m.epi = epi == 0 ? SG_CU_EPI_STORE : epi == 1 ? SG_CU_EPI_GLU : SG_CU_EPI_ADD;
				m.nw = epi == 0 ? 3 : epi == 1 ? 2 : 1;
				m.act = SG_CU_EW_SILU;
				for (int i = 0; i < m.nw; i++) {
					int wi = epi == 2 ? 2 : i;
					cr_assert_eq(sg_cuda_weight_view(&wg[wi], &m.w[i]), SG_OK);
					m.N[i] = N[wi];
					m.bias[i] = epi == 0 ? b[i].g.data : NULL;
					m.y[i] = epi == 2 ? out.g.data : y[i].g.data;
					poison(&y[i]);
				}
				m.res = res.g.data;
				poison(&xn);
				poison(&out);
				cr_assert_eq(gpu->ops->sync(gpu), SG_OK);
				/* the norm runs in the stage for the first two epilogues; the add takes x as is */
				int norm = epi < 2;
				const float *xin = norm ? x.g.data : xn.c.data; /* replaced below for the add */
				if (!norm) {
					cr_assert_eq(gpu->ops->write(gpu, &xn.g, 0, xn.c.data, sizeof(float) * (size_t)K), SG_OK);
					/* the launch below is on the legacy stream, not ordered with the backend's */
					cr_assert_eq(gpu->ops->sync(gpu), SG_OK);
					xin = xn.g.data;
				}
				set_gemv_sb(var != 1);
				set_gemv_persist(var == 2);
				cr_assert_eq(sg_cu_gemv_multi(&m, xin, norm, nw.g.data, 1e-6f, 0.0f, norm ? xn.g.data : NULL, q8 ? q8s.g.data : NULL, NULL), 0,
					     "%s %s epilogue %d", wtypes[c].name, kern[var], epi);
				cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
				sg_cu_policy_load();
				if (norm) cr_expect(pair_nmse(&xn) < NMSE_F32, "%s: the stage's norm", wtypes[c].name);
				/* the reference takes the GPU's normalised x (a last-bit difference would move an
				 * 8-bit rounding), rounded as the GPU rounded it */
				float *xg = fetch(&xn);
				memcpy(xn.c.data, xg, sizeof(float) * (size_t)K);
				free(xg);
				pair xr = q8 ? requantized(&xn) : xn;
				memcpy(xn.c.data, xcpu, sizeof(float) * (size_t)K);
				if (epi == 0) {
					for (int i = 0; i < 3; i++) {
						cr_assert_eq(cpu->ops->matmul(cpu, &wc[i], &xr.c, &b[i].c, &y[i].c), SG_OK);
						double e = pair_nmse(&y[i]);
						cr_expect(e < NMSE_F32 * 100, "%s %s store %d: nmse %.3g", wtypes[c].name, kern[var], i, e);
					}
				} else if (epi == 1) {
					cr_assert_eq(cpu->ops->matmul(cpu, &wc[0], &xr.c, NULL, &y[0].c), SG_OK);
					cr_assert_eq(cpu->ops->matmul(cpu, &wc[1], &xr.c, NULL, &y[1].c), SG_OK);
					cr_assert_eq(cpu->ops->glu(cpu, &y[0].c, &y[1].c, SG_ACT_SILU, &y[0].c), SG_OK);
					double e = pair_nmse(&y[0]);
					cr_expect(e < NMSE_F32 * 100, "%s %s glu: nmse %.3g", wtypes[c].name, kern[var], e);
				} else {
					cr_assert_eq(cpu->ops->matmul(cpu, &wc[2], &xr.c, NULL, &out.c), SG_OK);
					cr_assert_eq(cpu->ops->add(cpu, &res.c, &out.c, &out.c), SG_OK);
					double e = pair_nmse(&out);
					cr_expect(e < NMSE_F32 * 100, "%s %s add: nmse %.3g", wtypes[c].name, kern[var], e);
				}
				if (q8) pair_free(&xr);
			}
		}
		free(xcpu);
		for (int i = 0; i < 3; i++) pair_free(&y[i]), pair_free(&b[i]), gpu->ops->tensor_free(gpu, &wg[i]), cpu->ops->tensor_free(cpu, &wc[i]);
		pair_free(&x), pair_free(&nw), pair_free(&xn), pair_free(&res), pair_free(&out), pair_free(&q8s);
		free_hw(&w0), free_hw(&w1), free_hw(&w2);
	}
}

/* The block-per-lane GEMV of Q4_K, Q6_K and MLX 4-bit (SARAGOSSA_CUDA_GEMV_SB, the default) over row lengths
 * that give it every shape (K = 256 .. 25600: 4 to 32 lanes a row, idle lanes, lanes walking up
 * to 4 blocks), through the op table's one-token matmul and its fused
 * stages (store with bias, GLU, residual add), exactly against the CPU reference on the
 * activations the GPU rounded. */
Test(cuda, block_per_lane_gemv_of_long_rows_matches_cpu_reference)
{
	static const int64_t Ks[] = {256, 768, 2048, 4096, 5120, 8192, 12288, 16384, 25600};
	const wtype *tys[5] = {&wtypes[8], &wtypes[10], &wtypes[11], &wtypes[12], &wtypes[13]}; /* Q4_K, Q6_K, MLX4 g32/g64 f16/g128 */
	const int mode = 1; /* SARAGOSSA_CUDA_GEMV_SB: a block per lane */
	for (int ti = 0; ti < 5; ti++)
		for (int ki = 0; ki < (int)(sizeof(Ks) / sizeof(Ks[0])); ki++) {
			set_gemv_sb(mode);
			int64_t K = Ks[ki], N = 45;
			hw h0 = make_w(tys[ti], N, K), h1 = make_w(tys[ti], N, K);
			sg_btensor c0, g0, c1, g1;
			bind_both(&h0, &c0, &g0);
			bind_both(&h1, &c1, &g1);
			pair x = pair_rand(K, 1, 1, 1.0f), xr = requantized(&x), b = pair_rand(N, 1, 1, 1.0f);
			pair y0 = pair_new(SG_TYPE_F32, N, 1, 1, 1), y1 = pair_new(SG_TYPE_F32, N, 1, 1, 1);
			pair res = pair_rand(N, 1, 1, 1.0f), out = pair_new(SG_TYPE_F32, N, 1, 1, 1);
			/* one-token matmul with a bias */
			poison(&y0);
			cr_assert_eq(gpu->ops->matmul(gpu, &g0, &x.g, &b.g, &y0.g), SG_OK, "%s", sg_last_error());
			cr_assert_eq(cpu->ops->matmul(cpu, &c0, &xr.c, &b.c, &y0.c), SG_OK);
			double e = pair_nmse(&y0);
			cr_expect(e < NMSE_F32 * 100, "%s K=%lld mode %d matmul: nmse %.3g", tys[ti]->name, (long long)K, mode, e);
			/* two stores in one launch */
			poison(&y0), poison(&y1);
			sg_matmul_multi m = {.x = &x.g, .nw = 2, .w = {&g0, &g1}, .y = {&y0.g, &y1.g}};
			cr_assert_eq(sg_backend_matmul_multi(gpu, &m), SG_OK, "%s", sg_last_error());
			cr_assert_eq(cpu->ops->matmul(cpu, &c0, &xr.c, NULL, &y0.c), SG_OK);
			cr_assert_eq(cpu->ops->matmul(cpu, &c1, &xr.c, NULL, &y1.c), SG_OK);
			double e0 = pair_nmse(&y0), e1 = pair_nmse(&y1);
			cr_expect(e0 < NMSE_F32 * 100 && e1 < NMSE_F32 * 100, "%s K=%lld mode %d stores: nmse %.3g %.3g", tys[ti]->name, (long long)K, mode, e0, e1);
			/* gate and up with the GLU */
			poison(&y0);
			sg_matmul_multi gu = {.x = &x.g, .nw = 2, .w = {&g0, &g1}, .y = {&y0.g, &y1.g}, .glu = 1, .act = SG_ACT_SILU};
			cr_assert_eq(sg_backend_matmul_multi(gpu, &gu), SG_OK, "%s", sg_last_error());
			cr_assert_eq(cpu->ops->matmul(cpu, &c0, &xr.c, NULL, &y0.c), SG_OK);
			cr_assert_eq(cpu->ops->matmul(cpu, &c1, &xr.c, NULL, &y1.c), SG_OK);
			cr_assert_eq(cpu->ops->glu(cpu, &y0.c, &y1.c, SG_ACT_SILU, &y0.c), SG_OK);
			e = pair_nmse(&y0);
			cr_expect(e < NMSE_F32 * 100, "%s K=%lld mode %d glu: nmse %.3g", tys[ti]->name, (long long)K, mode, e);
			/* the residual add */
			poison(&out);
			sg_matmul_multi ad = {.x = &x.g, .nw = 1, .w = {&g0}, .y = {&y0.g}, .residual = &res.g, .out = &out.g};
			cr_assert_eq(sg_backend_matmul_multi(gpu, &ad), SG_OK, "%s", sg_last_error());
			cr_assert_eq(cpu->ops->matmul(cpu, &c0, &xr.c, NULL, &out.c), SG_OK);
			cr_assert_eq(cpu->ops->add(cpu, &res.c, &out.c, &out.c), SG_OK);
			e = pair_nmse(&out);
			cr_expect(e < NMSE_F32 * 100, "%s K=%lld mode %d add: nmse %.3g", tys[ti]->name, (long long)K, mode, e);
			pair_free(&x), pair_free(&xr), pair_free(&b), pair_free(&y0), pair_free(&y1), pair_free(&res), pair_free(&out);
			gpu->ops->tensor_free(gpu, &g0), cpu->ops->tensor_free(cpu, &c0), gpu->ops->tensor_free(gpu, &g1), cpu->ops->tensor_free(cpu, &c1);
			free_hw(&h0), free_hw(&h1);
		}
	sg_cu_policy_load();
}

/* The block-per-lane GEMVs' activations staged by cp.async with their scales (SARAGOSSA_CUDA_GEMV_XSTAGE=1,
 * the default) give the bits of the loop staging that reads the scales from global memory (=0):
 * the same values, the same sums. Dense (GLU, residual add) and the MoE
 * experts (shared and per-slot inputs), over row lengths of 1 to 100 blocks. */
static void run_sb_stages(sg_btensor *g0, sg_btensor *g1, pair *x, pair *res, pair *scratch, pair *glu, pair *out)
{
	poison(glu), poison(out);
	sg_matmul_multi gu = {.x = &x->g, .nw = 2, .w = {g0, g1}, .y = {&glu->g, &scratch->g}, .glu = 1, .act = SG_ACT_SILU};
	cr_assert_eq(sg_backend_matmul_multi(gpu, &gu), SG_OK, "%s", sg_last_error());
	sg_matmul_multi ad = {.x = &x->g, .nw = 1, .w = {g1}, .y = {&scratch->g}, .residual = &res->g, .out = &out->g};
	cr_assert_eq(sg_backend_matmul_multi(gpu, &ad), SG_OK, "%s", sg_last_error());
}

/* The GLU and residual-add stages of N x K weights of type ty give the same bits (and write
 * their last rows) with set(0) and set(1); mode names the GEMV_SB setting in the messages. */
static void stages_same_bits(const wtype *ty, int64_t N, int64_t K, void (*set)(int), const char *what, int mode)
{
	hw h0 = make_w(ty, N, K), h1 = make_w(ty, N, K);
	sg_btensor c0, g0, c1, g1;
	bind_both(&h0, &c0, &g0);
	bind_both(&h1, &c1, &g1);
	pair x = pair_rand(K, 1, 1, 1.0f), res = pair_rand(N, 1, 1, 1.0f), scratch = pair_new(SG_TYPE_F32, N, 1, 1, 1);
	pair y[2][2]; /* the GLU's output, the residual add's */
	float *h[2][2];
	for (int st = 0; st < 2; st++) {
		for (int i = 0; i < 2; i++) y[st][i] = pair_new(SG_TYPE_F32, N, 1, 1, 1);
		set(st);
		run_sb_stages(&g0, &g1, &x, &res, &scratch, &y[st][0], &y[st][1]);
		for (int i = 0; i < 2; i++) h[st][i] = fetch(&y[st][i]);
	}
	for (int i = 0; i < 2; i++) {
		cr_expect(!memcmp(h[0][i], h[1][i], sizeof(float) * (size_t)N), "%s K=%lld mode %d %s: %s=1 changed the bits", ty->name,
			  (long long)K, mode, i ? "add" : "glu", what);
		cr_expect(isfinite(h[1][i][N - 1]), "%s K=%lld mode %d %s: not written", ty->name, (long long)K, mode, i ? "add" : "glu");
		free(h[0][i]), free(h[1][i]);
		pair_free(&y[0][i]), pair_free(&y[1][i]);
	}
	pair_free(&x), pair_free(&res), pair_free(&scratch);
	gpu->ops->tensor_free(gpu, &g0), cpu->ops->tensor_free(cpu, &c0), gpu->ops->tensor_free(gpu, &g1), cpu->ops->tensor_free(cpu, &c1);
	free_hw(&h0), free_hw(&h1);
}

Test(cuda, block_per_lane_gemv_cp_async_staging_equals_loop_staging)
{
	static const int64_t Ks[] = {256, 2048, 4096, 12288, 25600};
	const wtype *tys[3] = {&wtypes[8], &wtypes[10], &wtypes[12]}; /* Q4_K, Q6_K, MLX4 g64 f16 */
	for (int ti = 0; ti < 3; ti++)
		for (int ki = 0; ki < (int)(sizeof(Ks) / sizeof(Ks[0])); ki++) {
			set_gemv_sb(1);
			stages_same_bits(tys[ti], 301, Ks[ki], set_gemv_xstage, "XSTAGE", 1);
		}
	/* the one-token expert GEMVs */
	for (int ti = 0; ti < 3; ti++)
		for (int ki = 0; ki < 3; ki++) {
			set_gemv_sb(1);
			int64_t E = 6, N = 40, K = Ks[ki], k = 3;
			hw w = make_w(tys[ti], E * N, K);
			w.t.ne[1] = N;
			w.t.ne[2] = E;
			sg_btensor wc, wg;
			bind_both(&w, &wc, &wg);
			for (int shared = 0; shared < 2; shared++) {
				int32_t idv[3] = {4, 1, 4};
				pair ids = pair_i32(k, 1, idv), x = pair_rand(K, shared ? 1 : k, 1, 1.0f), y[2];
				float *h[2];
				for (int st = 0; st < 2; st++) {
					y[st] = pair_new(SG_TYPE_F32, N, k, 1, 1);
					poison(&y[st]);
					set_gemv_xstage(st);
					cr_assert_eq(gpu->ops->moe_matmul(gpu, &wg, &x.g, &ids.g, &y[st].g), SG_OK, "%s", sg_last_error());
					h[st] = fetch(&y[st]);
				}
				cr_expect(!memcmp(h[0], h[1], sizeof(float) * (size_t)(N * k)), "%s K=%lld shared=%d experts: staging changed the bits",
					  tys[ti]->name, (long long)K, shared);
				cr_expect(isfinite(h[1][N * k - 1]), "%s K=%lld shared=%d experts: not written", tys[ti]->name, (long long)K, shared);
				free(h[0]), free(h[1]);
				pair_free(&ids), pair_free(&x), pair_free(&y[0]), pair_free(&y[1]);
			}
			gpu->ops->tensor_free(gpu, &wg), cpu->ops->tensor_free(cpu, &wc);
			free_hw(&w);
		}
	sg_cu_policy_load();
	sg_cu_policy_load();
}

/* SARAGOSSA_CUDA_GEMV_PRE: the plain types' GLU and residual-add stages (launches under its 4 MB)
 * with a thread's first units loaded before the wait give the bits of the loop, over rows
 * shorter than, as long as and longer than the units a thread loads early. */
Test(cuda, gemv_units_loaded_before_the_wait_keep_the_bits)
{
	static const int64_t Ks[] = {256, 2048, 3072, 6144, 16384};
	for (int ti = 0; ti < 3; ti++) /* F32, F16, BF16 */
		for (int ki = 0; ki < (int)(sizeof(Ks) / sizeof(Ks[0])); ki++) stages_same_bits(&wtypes[ti], 29, Ks[ki], set_gemv_pre, "PRE", 0);
	sg_cu_policy_load();
}

/* SARAGOSSA_CUDA_GEMV_MIXED: a normalised q/k/v-like store stage of Q4_K and Q6_K matrices in one
 * block-per-lane launch gives the bits of one launch per format (=0), both orders of the kinds,
 * rows of one, two and three blocks a lane's walk (K = 2048 .. 12288), and row counts whose kind
 * change falls inside a block (no single launch then: the same bits again). */
Test(cuda, mixed_format_gemv_launch_equals_one_launch_per_format)
{
	static const int64_t Ks[] = {2048, 4096, 12288};
	static const int64_t Ns[][3] = {{128, 64, 64}, {100, 36, 28}};
	const wtype *q4 = &wtypes[8], *q6 = &wtypes[10];
	const wtype *orders[2][3] = {{q4, q4, q6}, {q6, q4, q4}};
	for (int ki = 0; ki < 3; ki++)
		for (int ni = 0; ni < 2; ni++)
			for (int oi = 0; oi < 2; oi++) {
				int64_t K = Ks[ki];
				hw h[3];
				sg_btensor c[3], g[3];
				for (int i = 0; i < 3; i++) h[i] = make_w(orders[oi][i], Ns[ni][i], K), bind_both(&h[i], &c[i], &g[i]);
				pair x = pair_rand(K, 1, 1, 1.0f), nw = pair_rand(K, 1, 1, 1.0f), xn = pair_new(SG_TYPE_F32, K, 1, 1, 1);
				/* whether one launch takes them: every kind change at a multiple of a block's rows */
				sg_cu_multi cm = {.nw = 3, .epi = SG_CU_EPI_STORE};
				int64_t per = K == 2048 ? 16 : 8, chg = oi ? Ns[ni][0] : Ns[ni][0] + Ns[ni][1];
				for (int i = 0; i < 3; i++) {
					cr_assert_eq(sg_cuda_weight_view(&g[i], &cm.w[i]), SG_OK);
					cm.N[i] = Ns[ni][i];
				}
				set_gemv_mixed(1);
				cr_expect_eq(sg_cu_gemv_mixed_ok(&cm), chg % per == 0, "K=%lld rows %lld/%lld/%lld order %d: one launch %s", (long long)K,
					     (long long)Ns[ni][0], (long long)Ns[ni][1], (long long)Ns[ni][2], oi, chg % per ? "taken" : "not taken");
				pair y[2][3];
				float *out[2][3];
				for (int mix = 0; mix < 2; mix++) {
					set_gemv_mixed(mix);
					for (int i = 0; i < 3; i++) y[mix][i] = pair_new(SG_TYPE_F32, Ns[ni][i], 1, 1, 1), poison(&y[mix][i]);
					sg_matmul_multi mm = {.x = &x.g, .norm = &nw.g, .eps = 1e-6f, .xn = &xn.g, .nw = 3, .w = {&g[0], &g[1], &g[2]},
							      .y = {&y[mix][0].g, &y[mix][1].g, &y[mix][2].g}};
					cr_assert_eq(sg_backend_matmul_multi(gpu, &mm), SG_OK, "%s", sg_last_error());
					for (int i = 0; i < 3; i++) out[mix][i] = fetch(&y[mix][i]);
				}
				for (int i = 0; i < 3; i++) {
					cr_expect(!memcmp(out[0][i], out[1][i], sizeof(float) * (size_t)Ns[ni][i]),
						  "K=%lld rows %lld/%lld/%lld order %d: matrix %d, one launch changed the bits", (long long)K,
						  (long long)Ns[ni][0], (long long)Ns[ni][1], (long long)Ns[ni][2], oi, i);
					cr_expect(isfinite(out[1][i][Ns[ni][i] - 1]), "K=%lld order %d: matrix %d not written", (long long)K, oi, i);
					free(out[0][i]), free(out[1][i]);
					pair_free(&y[0][i]), pair_free(&y[1][i]);
				}
				pair_free(&x), pair_free(&nw), pair_free(&xn);
				for (int i = 0; i < 3; i++) gpu->ops->tensor_free(gpu, &g[i]), cpu->ops->tensor_free(cpu, &c[i]), free_hw(&h[i]);
			}
	sg_cu_policy_load();
}

/* SARAGOSSA_CUDA_GEMV_PERSIST: the block-per-lane stages in the persistent grid give the bits of
 * a block per task: the GLU and residual-add stages (rows of 1 to 3 blocks a lane, 4 to 32 lanes
 * a row; a GLU of 32 lanes keeps a block per task) and a normalised store stage of three matrices,
 * with the grid by occupancy (a task or two a block) and capped at 3 blocks (tens of tasks a
 * block: a lane's walk across the ends of its rows). */
static void persist_one_round(int on)
{
	sg_cu_policy p = *sg_cu_policy_now();
	p.gemv.persist = on ? SG_CU_PERSIST_ONE_ROUND : SG_CU_PERSIST_OFF;
	sg_cu_policy_set(&p);
}

Test(cuda, persistent_gemv_equals_a_block_per_task)
{
	static const int64_t Ks[] = {256, 2048, 4096, 5120, 12288};
	static const int caps[] = {0, 3};
	static const int64_t Ns[3] = {100, 36, 28};
	const wtype *tys[3] = {&wtypes[8], &wtypes[10], &wtypes[12]}; /* Q4_K, Q6_K, MLX4 g64 f16 */
	long n0 = sg_cu_gemv_persist_launches();
	for (int ci = 0; ci < 2; ci++) {
		set_gemv_persist_grid(caps[ci]);
		for (int ti = 0; ti < 3; ti++)
			for (int ki = 0; ki < (int)(sizeof(Ks) / sizeof(Ks[0])); ki++) {
				stages_same_bits(tys[ti], 301, Ks[ki], set_gemv_persist, "PERSIST", caps[ci]);
				if (ki != 2 && ki != 4) continue;
				int64_t K = Ks[ki];
				hw h[3];
				sg_btensor c[3], g[3];
				for (int i = 0; i < 3; i++) h[i] = make_w(tys[ti], Ns[i], K), bind_both(&h[i], &c[i], &g[i]);
				pair x = pair_rand(K, 1, 1, 1.0f), nw = pair_rand(K, 1, 1, 1.0f), xn = pair_new(SG_TYPE_F32, K, 1, 1, 1);
				pair y[2][3];
				float *out[2][3];
				for (int on = 0; on < 2; on++) {
					set_gemv_persist(on);
					for (int i = 0; i < 3; i++) y[on][i] = pair_new(SG_TYPE_F32, Ns[i], 1, 1, 1), poison(&y[on][i]);
					sg_matmul_multi mm = {.x = &x.g, .norm = &nw.g, .eps = 1e-6f, .xn = &xn.g, .nw = 3, .w = {&g[0], &g[1], &g[2]},
							      .y = {&y[on][0].g, &y[on][1].g, &y[on][2].g}};
					cr_assert_eq(sg_backend_matmul_multi(gpu, &mm), SG_OK, "%s", sg_last_error());
					for (int i = 0; i < 3; i++) out[on][i] = fetch(&y[on][i]);
				}
				for (int i = 0; i < 3; i++) {
					cr_expect(!memcmp(out[0][i], out[1][i], sizeof(float) * (size_t)Ns[i]), "%s K=%lld cap %d store: matrix %d, PERSIST=1 changed the bits",
						  tys[ti]->name, (long long)K, caps[ci], i);
					cr_expect(isfinite(out[1][i][Ns[i] - 1]), "%s K=%lld cap %d store: matrix %d not written", tys[ti]->name, (long long)K, caps[ci], i);
					free(out[0][i]), free(out[1][i]);
					pair_free(&y[0][i]), pair_free(&y[1][i]);
				}
				pair_free(&x), pair_free(&nw), pair_free(&xn);
				for (int i = 0; i < 3; i++) gpu->ops->tensor_free(gpu, &g[i]), cpu->ops->tensor_free(cpu, &c[i]), free_hw(&h[i]);
			}
	}
	/* per cap and type: 5 residual adds, 4 GLUs (K = 5120: 32 lanes a row), 2 stores */
	cr_expect_eq(sg_cu_gemv_persist_launches() - n0, 2 * 3 * 11, "persistent launches: %ld", sg_cu_gemv_persist_launches() - n0);
	set_gemv_persist_grid(0);
	/* the flag's setting (SG_CU_PERSIST_ONE_ROUND) takes launches of more tasks than SMs and at
	 * most 3 an SM only (K = 4096: 8 rows a residual add's task, 4 a GLU's) */
	long n1 = sg_cu_gemv_persist_launches();
	int sms = sg_cu_sm_count(), want = 0;
	for (int i = 0; i < 2; i++) {
		int64_t N = i ? 2000 : 301, t[2] = {(N + 7) / 8, (N + 3) / 4};
		for (int j = 0; j < 2; j++) want += t[j] > sms && t[j] <= 3 * sms;
		stages_same_bits(tys[0], N, 4096, persist_one_round, "PERSIST one round", 0);
	}
	cr_expect_eq(sg_cu_gemv_persist_launches() - n1, want, "PERSIST one round took %ld launches, expected %d (%d SMs)", sg_cu_gemv_persist_launches() - n1,
		     want, sms);
	sg_cu_policy_load();
}

/* The backend's fused stages equal their compositions on the same GPU: the matmul_multi op (BF16
 * weights take it whatever the flags) and attn_prep_norm (qk-norm + ropes + cache store) bit for
 * bit, since the fused norm kernels keep the unfused ones' sums. */
Test(cuda, fused_stages_equal_their_composition_on_the_gpu)
{
	const wtype *bt = &wtypes[2]; /* BF16 */
	int64_t K = 256;
	hw hq = make_w(bt, 96, K), hu = make_w(bt, 96, K);
	sg_btensor wc[2], wg[2];
	bind_both(&hq, &wc[0], &wg[0]);
	bind_both(&hu, &wc[1], &wg[1]);
	pair x = pair_rand(K, 1, 1, 1.0f), nw = pair_rand(K, 1, 1, 1.0f), xn = pair_new(SG_TYPE_F32, K, 1, 1, 1);
	pair g = pair_new(SG_TYPE_F32, 96, 1, 1, 1), u = pair_new(SG_TYPE_F32, 96, 1, 1, 1);
	sg_matmul_multi p = {.x = &x.g, .norm = &nw.g, .eps = 1e-6f, .norm_offset = 1.0f, .xn = &xn.g, .nw = 2,
			     .w = {&wg[0], &wg[1]}, .y = {&g.g, &u.g}, .glu = 1, .act = SG_ACT_GELU_TANH};
	cr_assert_eq(sg_backend_matmul_multi(gpu, &p), SG_OK, "%s", sg_last_error());
	float *fused = fetch(&g);
	cr_assert_eq(sg_backend_matmul_multi_compose(gpu, &p), SG_OK, "%s", sg_last_error());
	float *comp = fetch(&g);
	double e = nmse(comp, fused, 96);
	cr_expect(e < NMSE_F32, "fused GLU stage vs composition: nmse %.3g", e);
	/* and against the CPU's composition */
	sg_matmul_multi pc = p;
	pc.x = &x.c, pc.norm = &nw.c, pc.xn = &xn.c, pc.w[0] = &wc[0], pc.w[1] = &wc[1], pc.y[0] = &g.c, pc.y[1] = &u.c;
	cr_assert_eq(sg_backend_matmul_multi(cpu, &pc), SG_OK);
	cr_expect(pair_nmse(&g) < NMSE_F32, "fused GLU stage vs the CPU");
	free(fused), free(comp);

	/* attn_prep_norm: 3 tokens, 4 q heads, 2 kv heads of 64, an F16 cache */
	int n = 3, Hq = 4, Hk = 2, hd = 64, ctx = 16;
	int32_t posv[3] = {2, 3, 9};
	sg_rope_params rp = rope_case(0, hd);
	pair pos = pair_i32(n, 1, posv), qn = pair_rand(hd, 1, 1, 1.0f), kn = pair_rand(hd, 1, 1, 1.0f);
	pair q0 = pair_rand(hd * Hq, n, 1, 2.0f), k0 = pair_rand(hd * Hk, n, 1, 2.0f), v = pair_rand(hd * Hk, n, 1, 1.0f);
	pair q1 = pair_new(SG_TYPE_F32, hd * Hq, n, 1, 1), k1 = pair_new(SG_TYPE_F32, hd * Hk, n, 1, 1);
	pair kc0 = pair_new(SG_TYPE_F16, hd, Hk, ctx, 1), vc0 = pair_new(SG_TYPE_F16, hd, Hk, ctx, 1);
	pair kc1 = pair_new(SG_TYPE_F16, hd, Hk, ctx, 1), vc1 = pair_new(SG_TYPE_F16, hd, Hk, ctx, 1);
	cr_assert_eq(gpu->ops->write(gpu, &q1.g, 0, q0.c.data, sizeof(float) * (size_t)q0.n), SG_OK);
	cr_assert_eq(gpu->ops->write(gpu, &k1.g, 0, k0.c.data, sizeof(float) * (size_t)k0.n), SG_OK);
	cr_assert_not_null(gpu->ops->attn_prep_norm);
	cr_assert_eq(gpu->ops->attn_prep_norm(gpu, &q0.g, &k0.g, &v.g, &pos.g, &rp, &qn.g, &kn.g, 1e-6f, 0.0f, &kc0.g, &vc0.g), SG_OK, "%s",
		     sg_last_error());
	sg_btensor qh = q1.g, kh = k1.g;
	qh.ne[0] = hd, qh.ne[1] = n * Hq, kh.ne[0] = hd, kh.ne[1] = n * Hk;
	qh.row_bytes = kh.row_bytes = sizeof(float) * (size_t)hd;
	cr_assert_eq(gpu->ops->rmsnorm(gpu, &qh, &qn.g, 1e-6f, 0.0f, &qh), SG_OK);
	cr_assert_eq(gpu->ops->rmsnorm(gpu, &kh, &kn.g, 1e-6f, 0.0f, &kh), SG_OK);
	cr_assert_eq(gpu->ops->rope(gpu, &q1.g, &pos.g, &rp), SG_OK);
	cr_assert_eq(gpu->ops->rope(gpu, &k1.g, &pos.g, &rp), SG_OK);
	cr_assert_eq(gpu->ops->kv_store(gpu, &k1.g, &v.g, &pos.g, &kc1.g, &vc1.g), SG_OK);
	pair *fa[] = {&q0, &k0, &kc0, &vc0}, *fb[] = {&q1, &k1, &kc1, &vc1};
	for (int i = 0; i < 4; i++) {
		float *a = fetch(fa[i]), *b = fetch(fb[i]);
		cr_expect(!memcmp(a, b, sizeof(float) * (size_t)fa[i]->n), "attn_prep_norm output %d differs from the composition", i);
		free(a), free(b);
	}
	pair *all[] = {&x, &nw, &xn, &g, &u, &pos, &qn, &kn, &q0, &k0, &v, &q1, &k1, &kc0, &vc0, &kc1, &vc1};
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) pair_free(all[i]);
	gpu->ops->tensor_free(gpu, &wg[0]), gpu->ops->tensor_free(gpu, &wg[1]);
	cpu->ops->tensor_free(cpu, &wc[0]), cpu->ops->tensor_free(cpu, &wc[1]);
	free_hw(&hq), free_hw(&hu);
}
#endif

/* ---- linear attention and Gemma 4 stages (SG_STAGE_LINEAR_ATTN) ---- */
#if SG_CUDA

/* Elementwise and per-row ops of the stage: only expf/erff/tanhf rounding and the order of one
 * row sum separate the GPU from the CPU, NMSE ~1e-14; the gate is 1e-10. */
#define NMSE_LIN 1e-10

static int32_t *rand_ids(int64_t n, int64_t lo, int64_t hi)
{
	int32_t *v = malloc(sizeof(int32_t) * (size_t)n);
	for (int64_t i = 0; i < n; i++) v[i] = (int32_t)(lo + (int64_t)(rnd() % (uint32_t)(hi - lo)));
	return v;
}

/* gated_rmsnorm (both block sizes, in place), sigmoid_mul (per element and per row, in place),
 * gather_cols, glu_split (every activation; in place on one row) and moe_weight_scale (ids out of
 * range zero the weight) on 1 and 7 tokens against the CPU. */
Test(cuda, linear_attn_elementwise_stages_match_cpu)
{
	static const int ns[] = {1, 7};
	for (int ni = 0; ni < 2; ni++) {
		int n = ns[ni];
		/* gated RMSNorm: heads of 24 (128 threads) and rows of 1030 (512 threads); y aliases x */
		static const int64_t Ds[] = {24, 1030};
		for (int di = 0; di < 2; di++) {
			int64_t D = Ds[di], rows = (int64_t)n * 5;
			pair x = pair_rand(D, rows, 1, 1.5f), w = pair_rand(D, 1, 1, 1.0f), g = pair_rand(D, rows, 1, 2.0f), y = pair_new(SG_TYPE_F32, D, rows, 1, 1);
			poison(&y);
			cr_assert_eq(gpu->ops->gated_rmsnorm(gpu, &x.g, &w.g, &g.g, 1e-6f, &y.g), SG_OK, "%s", sg_last_error());
			cr_assert_eq(cpu->ops->gated_rmsnorm(cpu, &x.c, &w.c, &g.c, 1e-6f, &y.c), SG_OK);
			double e = pair_nmse(&y);
			cr_expect(e < NMSE_LIN, "gated_rmsnorm n %d D %lld: nmse %.3g", n, (long long)D, e);
			cr_assert_eq(gpu->ops->gated_rmsnorm(gpu, &x.g, &w.g, &g.g, 1e-6f, &x.g), SG_OK, "%s", sg_last_error());
			cr_assert_eq(cpu->ops->gated_rmsnorm(cpu, &x.c, &w.c, &g.c, 1e-6f, &x.c), SG_OK);
			e = pair_nmse(&x);
			cr_expect(e < NMSE_LIN, "gated_rmsnorm in place n %d D %lld: nmse %.3g", n, (long long)D, e);
			pair_free(&x), pair_free(&w), pair_free(&g), pair_free(&y);
		}
		/* sigmoid gate: one per element, one per row (shared expert), in place */
		{
			int64_t W = 77;
			pair x = pair_rand(W, n, 1, 1.0f), ge = pair_rand(W, n, 1, 3.0f), gr = pair_rand(1, n, 1, 3.0f), o = pair_new(SG_TYPE_F32, W, n, 1, 1);
			poison(&o);
			cr_assert_eq(gpu->ops->sigmoid_mul(gpu, &x.g, &ge.g, &o.g), SG_OK, "%s", sg_last_error());
			cr_assert_eq(cpu->ops->sigmoid_mul(cpu, &x.c, &ge.c, &o.c), SG_OK);
			double e = pair_nmse(&o);
			cr_expect(e < NMSE_LIN, "sigmoid_mul per element n %d: nmse %.3g", n, e);
			cr_assert_eq(gpu->ops->sigmoid_mul(gpu, &x.g, &gr.g, &x.g), SG_OK, "%s", sg_last_error());
			cr_assert_eq(cpu->ops->sigmoid_mul(cpu, &x.c, &gr.c, &x.c), SG_OK);
			e = pair_nmse(&x);
			cr_expect(e < NMSE_LIN, "sigmoid_mul per row in place n %d: nmse %.3g", n, e);
			pair_free(&x), pair_free(&ge), pair_free(&gr), pair_free(&o);
		}
		/* column gather with repeats, into a wider and a narrower output */
		{
			int64_t W = 37;
			static const int64_t W2s[] = {53, 5};
			for (int wi = 0; wi < 2; wi++) {
				int64_t W2 = W2s[wi];
				int32_t *iv = rand_ids(W2, 0, W);
				pair x = pair_rand(W, n, 1, 1.0f), idx = pair_i32(W2, 1, iv), o = pair_new(SG_TYPE_F32, W2, n, 1, 1);
				poison(&o);
				cr_assert_eq(gpu->ops->gather_cols(gpu, &x.g, &idx.g, &o.g), SG_OK, "%s", sg_last_error());
				cr_assert_eq(cpu->ops->gather_cols(cpu, &x.c, &idx.c, &o.c), SG_OK);
				float *og = fetch(&o);
				cr_expect(!memcmp(og, o.c.data, sizeof(float) * (size_t)o.n), "gather_cols n %d W2 %lld: not an exact copy", n, (long long)W2);
				free(og), free(iv);
				pair_free(&x), pair_free(&idx), pair_free(&o);
			}
		}
		/* split GLU, every activation; in place on a single row */
		{
			static const sg_act acts[] = {SG_ACT_SILU, SG_ACT_GELU_TANH, SG_ACT_GELU};
			int64_t F = 45;
			for (int ai = 0; ai < 3; ai++) {
				pair x = pair_rand(2 * F, n, 1, 1.5f), o = pair_new(SG_TYPE_F32, F, n, 1, 1);
				poison(&o);
				cr_assert_eq(gpu->ops->glu_split(gpu, &x.g, acts[ai], &o.g), SG_OK, "%s", sg_last_error());
				cr_assert_eq(cpu->ops->glu_split(cpu, &x.c, acts[ai], &o.c), SG_OK);
				double e = pair_nmse(&o);
				cr_expect(e < NMSE_LIN, "glu_split act %d n %d: nmse %.3g", (int)acts[ai], n, e);
				if (n == 1) {
					sg_btensor xg = x.g, xc = x.c;
					xg.ne[0] = xc.ne[0] = F; /* out = the first half of x */
					cr_assert_eq(gpu->ops->glu_split(gpu, &x.g, acts[ai], &xg), SG_OK, "%s", sg_last_error());
					cr_assert_eq(cpu->ops->glu_split(cpu, &x.c, acts[ai], &xc), SG_OK);
					e = pair_nmse(&x);
					cr_expect(e < NMSE_LIN, "glu_split act %d in place: nmse %.3g", (int)acts[ai], e);
				} else {
					sg_btensor xg = x.g;
					xg.ne[0] = F;
					cr_expect_eq(gpu->ops->glu_split(gpu, &x.g, acts[ai], &xg), SG_ERR_INVALID_ARG, "glu_split in place over rows must be refused");
				}
				pair_free(&x), pair_free(&o);
			}
		}
		/* per-expert scale: ids of 5 experts with -1 and 5 mixed in */
		{
			int64_t k = 3, E = 5;
			int32_t *iv = rand_ids((int64_t)n * k, -1, E + 1);
			pair w = pair_rand(k, n, 1, 1.0f), ids = pair_i32(k, n, iv), sc = pair_rand(E, 1, 1, 2.0f);
			cr_assert_eq(gpu->ops->moe_weight_scale(gpu, &w.g, &ids.g, &sc.g), SG_OK, "%s", sg_last_error());
			cr_assert_eq(cpu->ops->moe_weight_scale(cpu, &w.c, &ids.c, &sc.c), SG_OK);
			float *wg = fetch(&w);
			cr_expect(!memcmp(wg, w.c.data, sizeof(float) * (size_t)w.n), "moe_weight_scale n %d: differs from the CPU", n);
			free(wg), free(iv);
			pair_free(&w), pair_free(&ids), pair_free(&sc);
		}
	}
	cr_expect(sg_backend_supports(gpu, SG_STAGE_LINEAR_ATTN, SG_TYPE_F32));
	cr_expect(!sg_backend_supports(gpu, SG_STAGE_LINEAR_ATTN, SG_TYPE_F16));
}

/* The short conv over consecutive calls of 7, 1, 1, 3, 1 and 37 tokens (fewer tokens than state
 * rows take part of the new state from the old), from a random state: outputs and the state in
 * place after every call equal the CPU's; channels not a multiple of 32, taps 1 to 12. */
Test(cuda, short_conv_and_its_state_match_cpu_over_consecutive_calls)
{
	static const int64_t Cs[] = {77, 200};
	static const int Ks[] = {4, 2, 1, 12};
	static const int steps[] = {7, 1, 1, 3, 1, 37};
	for (int ci = 0; ci < 2; ci++) {
		for (int ki = 0; ki < 4; ki++) {
			int64_t C = Cs[ci];
			int K = Ks[ki];
			pair w = pair_rand(K, C, 1, 0.5f), st = pair_rand(C, K > 1 ? K - 1 : 1, 1, 1.0f);
			for (int s = 0; s < 6; s++) {
				int n = steps[s];
				pair x = pair_rand(C, n, 1, 1.0f), o = pair_new(SG_TYPE_F32, C, n, 1, 1);
				poison(&o);
				cr_assert_eq(gpu->ops->short_conv(gpu, &x.g, &w.g, &st.g, &o.g), SG_OK, "%s", sg_last_error());
				cr_assert_eq(cpu->ops->short_conv(cpu, &x.c, &w.c, &st.c, &o.c), SG_OK);
				double e = pair_nmse(&o);
				cr_expect(e < NMSE_LIN, "short_conv C %lld K %d call %d (n %d): out nmse %.3g", (long long)C, K, s, n, e);
				e = pair_nmse(&st);
				cr_expect(e < NMSE_LIN, "short_conv C %lld K %d call %d (n %d): state nmse %.3g", (long long)C, K, s, n, e);
				pair_free(&x), pair_free(&o);
			}
			/* out aliasing x is refused, as on the CPU */
			pair x = pair_rand(C, 2, 1, 1.0f);
			cr_expect_eq(gpu->ops->short_conv(gpu, &x.g, &w.g, &st.g, &x.g), SG_ERR_INVALID_ARG);
			pair_free(&x), pair_free(&w), pair_free(&st);
		}
	}
}

/* The gated delta rule over consecutive calls of 7, 1, 1, 7 and 1 tokens from a random state,
 * against the CPU's token-by-token recurrence (SARAGOSSA_CPU_GDN_CHUNK=0): outputs and state
 * after every call. Shapes cover every kernel variant (dk <= 32, 128, 256, 1024), grouped key
 * heads, value dims below, at and past a 32-column tile, and the Qwen3.6 head dims (128). Only
 * the order of the dk-long sums differs (f32), NMSE ~1e-13; the gate is 1e-9. */
Test(cuda, gated_delta_and_its_state_match_cpu_recurrence_over_consecutive_calls)
{
	static const int shapes[][4] = {{2, 4, 16, 16}, {2, 6, 40, 24}, {3, 3, 17, 70}, {1, 2, 128, 128}, {1, 2, 200, 33}, {1, 2, 300, 40}};
	static const int steps[] = {7, 1, 1, 7, 1};
	setenv("SARAGOSSA_CPU_GDN_CHUNK", "0", 1);
	sg_flags_reload();
	for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
		sg_gdn_params p = {shapes[si][0], shapes[si][1], shapes[si][2], shapes[si][3], 1e-6f};
		int Hk = p.n_k_head, Hv = p.n_v_head, dk = p.dk, dv = p.dv;
		int64_t C = 2 * (int64_t)Hk * dk + (int64_t)Hv * dv;
		pair alog = pair_rand(Hv, 1, 1, 0.3f), dtb = pair_rand(Hv, 1, 1, 0.3f), st = pair_rand(dv, dk, Hv, 0.1f);
		for (int s = 0; s < 5; s++) {
			int n = steps[s];
			pair qkv = pair_rand(C, n, 1, 1.0f), a = pair_rand(Hv, n, 1, 1.0f), b = pair_rand(Hv, n, 1, 1.0f);
			pair o = pair_new(SG_TYPE_F32, (int64_t)Hv * dv, n, 1, 1);
			poison(&o);
			cr_assert_eq(gpu->ops->gated_delta(gpu, &qkv.g, &a.g, &b.g, &alog.g, &dtb.g, &p, &st.g, &o.g), SG_OK, "%s", sg_last_error());
			cr_assert_eq(cpu->ops->gated_delta(cpu, &qkv.c, &a.c, &b.c, &alog.c, &dtb.c, &p, &st.c, &o.c), SG_OK, "%s", sg_last_error());
			double e = pair_nmse(&o);
			cr_expect(e < NMSE_F32, "gated_delta %d/%d heads %dx%d call %d (n %d): out nmse %.3g", Hk, Hv, dk, dv, s, n, e);
			e = pair_nmse(&st);
			cr_expect(e < NMSE_F32, "gated_delta %d/%d heads %dx%d call %d (n %d): state nmse %.3g", Hk, Hv, dk, dv, s, n, e);
			pair_free(&qkv), pair_free(&a), pair_free(&b), pair_free(&o);
		}
		pair_free(&alog), pair_free(&dtb), pair_free(&st);
	}
	/* shapes the kernels cannot take are refused before any launch */
	sg_gdn_params bad = {3, 4, 16, 16, 1e-6f};
	pair q = pair_rand(2 * 3 * 16 + 4 * 16, 1, 1, 1.0f), a = pair_rand(4, 1, 1, 1.0f), st = pair_rand(16, 16, 4, 1.0f), o = pair_new(SG_TYPE_F32, 64, 1, 1, 1);
	cr_expect_eq(gpu->ops->gated_delta(gpu, &q.g, &a.g, &a.g, &a.g, &a.g, &bad, &st.g, &o.g), SG_ERR_INVALID_ARG);
	pair_free(&q), pair_free(&a), pair_free(&st), pair_free(&o);
	unsetenv("SARAGOSSA_CPU_GDN_CHUNK");
	sg_flags_reload();
}

/* ---- hybrid and Gemma 4 models on the GPU against the CPU reference ---- */

/* Loads fixture `name` on the GPU (prompt in chunks of 4 tokens: the recurrent state crosses a
 * chunk boundary) and on the CPU's scalar reference kernels, prefills the same prompt and runs
 * DSTEPS_LIN decode steps on the CPU's greedy tokens: every step's logits agree to 1e-4 (L2
 * relative), and the decode steps after the first were replayed from a recorded graph exactly
 * where SARAGOSSA_CUDA_GRAPHS_HYBRID (on by default) and the stack allow it (Gemma 4 with per-layer
 * inputs stays per-op). */
#define DSTEPS_LIN 4
static void hybrid_logits_match_cpu(const char *name)
{
	sg_backend *probe = NULL;
	sg_cuda_params gp = sg_cuda_default_params();
	if (sg_cuda_backend_create(&gp, &probe) != SG_OK) cr_skip_test("no usable GPU: %s", sg_last_error());
	sg_backend_free(probe);
	char path[256];
	snprintf(path, sizeof(path), "tests/fixtures/%s", name);
	sg_model_params mp = sg_model_default_params();
	mp.backend = "cuda";
	sg_model *mg = NULL, *mc = NULL;
	cr_assert_eq(sg_model_load(path, &mp, &mg), SG_OK, "%s on cuda: %s", name, sg_last_error());
	setenv("SARAGOSSA_SIMD", "scalar", 1);
	sg_flags_reload();
	sg_model_params cp = sg_model_default_params();
	cp.n_threads = 2;
	sg_status lst = sg_model_load(path, &cp, &mc);
	unsetenv("SARAGOSSA_SIMD");
	sg_flags_reload();
	cr_assert_eq(lst, SG_OK, "%s on cpu: %s", name, sg_last_error());
	int V = sg_model_n_vocab(mc);
	cr_assert_eq(sg_model_n_vocab(mg), V);
	sg_session_params sp = sg_session_default_params();
	sp.n_ctx = 64;
	sp.kv_type = SG_KV_F32;
	sg_session *sc = NULL, *sgp = NULL;
	cr_assert_eq(sg_session_new(mc, &sp, &sc), SG_OK, "%s", sg_last_error());
	sp.n_batch = 4;
	cr_assert_eq(sg_session_new(mg, &sp, &sgp), SG_OK, "%s", sg_last_error());
	int n = (int)(sizeof(dprompt) / sizeof(dprompt[0]));
	cr_assert_eq(sg_session_eval(sc, dprompt, n, NULL), SG_OK, "%s", sg_last_error());
	cr_assert_eq(sg_session_eval(sgp, dprompt, n, NULL), SG_OK, "%s: %s", name, sg_last_error());
	for (int step = 0; step <= DSTEPS_LIN; step++) {
		const float *lc = sg_session_logits(sc), *lg = sg_session_logits(sgp);
		cr_assert(lc && lg);
		double num = 0, den = 0;
		int32_t tok = 0;
		for (int i = 0; i < V; i++) {
			double d = (double)lg[i] - lc[i];
			num += isfinite(d) ? d * d : INFINITY;
			den += (double)lc[i] * lc[i];
			if (lc[i] > lc[tok]) tok = i;
		}
		double rel = sqrt(num / (den > 0 ? den : 1));
		cr_expect(rel <= 1e-4, "%s: %s logits relative error %.3g", name, step ? "decode step" : "prefill", rel);
		if (step == DSTEPS_LIN) break;
		cr_assert_eq(sg_session_eval(sc, &tok, 1, NULL), SG_OK, "%s", sg_last_error());
		cr_assert_eq(sg_session_eval(sgp, &tok, 1, NULL), SG_OK, "%s: %s", name, sg_last_error());
	}
	int want = sg_flag_bool("SARAGOSSA_CUDA_GRAPHS") && sg_flag_bool("SARAGOSSA_CUDA_GRAPHS_HYBRID") && mg->desc.per_layer_input_dim == 0;
	cr_expect((sgp->fs.graph != NULL) == want, "%s: the hybrid stack's decode %s a graph (%s expected)", name,
	          sgp->fs.graph ? "recorded" : "did not record", want ? "one" : "none");
	sg_session_free(sc);
	sg_session_free(sgp);
	sg_model_free(mc);
	sg_model_free(mg);
}

Test(cuda_hybrid, qwen3_next_logits_match_cpu) { hybrid_logits_match_cpu("qwen3_next"); }
Test(cuda_hybrid, qwen3_5_moe_logits_match_cpu) { hybrid_logits_match_cpu("qwen3_5_moe_text"); }
Test(cuda_hybrid, gemma4_logits_match_cpu) { hybrid_logits_match_cpu("gemma4_text"); }
Test(cuda_hybrid, gemma4_moe_logits_match_cpu) { hybrid_logits_match_cpu("gemma4_text_moe"); }

#endif
