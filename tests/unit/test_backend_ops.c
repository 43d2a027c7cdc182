/*
 * Differential tests of the CPU backend: every op on every SIMD kernel set this CPU has,
 * against the scalar reference kernel set, over several shapes (odd sizes included), compared by
 * normalised error ||a - b||^2 / ||a||^2. The scalar reference is itself checked against
 * independent formulas written here in double precision (norms, RoPE, attention, softmax) and
 * against the formats module's reference dequantizers.
 *
 * Thresholds:
 *  - f32 ops (norms, rope, attention, elementwise, float weights): SIMD and scalar differ only in
 *    summation order, a relative error of a few ulps (~1e-7) per element, so NMSE ~1e-13;
 *    threshold 1e-10.
 *  - quantized weights: the SIMD kernels quantize activations to 8 bits per block of 32
 *    (step d = amax/127, rounding error uniform in +-d/2, variance d^2/12). For Gaussian data
 *    amax ~ 2.1 sigma over 32 values, so the relative error variance per element is about
 *    (2.1/127)^2/12 = 2.3e-5, and the dot product of independent random rows inherits it:
 *    NMSE ~2e-5. Threshold 1e-4 (4x margin); the measured values are printed with --verbose.
 */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_internal.h"
#include "base/flags.h"

#define NMSE_F32 1e-10
#define NMSE_Q8X 1e-4

/* --- helpers --- */

#define TEST_RNG_SEED 88172645463325252ull
#include "test_rng.h"

static sg_backend *make_be(const char *simd, int nth)
{
	sg_backend *be = NULL;
	sg_cpu_params p = {nth, simd};
	if (sg_cpu_backend_create(&p, &be) != SG_OK) return NULL;
	return be;
}

/* The SIMD sets this CPU can run (the scalar reference is the baseline). */
static const char *simd_sets[] = {"avx512", "avx2", "neon"};
#define N_SETS 3

static double nmse(const float *a, const float *b, int64_t n)
{
	double num = 0, den = 0;
	for (int64_t i = 0; i < n; i++) {
		double d = (double)a[i] - b[i];
		num += d * d;
		den += (double)a[i] * a[i];
	}
	return den > 0 ? num / den : num;
}

static sg_btensor f32_tensor(sg_backend *be, int64_t n0, int64_t n1, int64_t n2)
{
	sg_btensor t;
	int64_t ne[4] = {n0, n1, n2, 1};
	cr_assert_eq(be->ops->tensor_alloc(be, SG_TYPE_F32, ne, &t), SG_OK);
	return t;
}

static sg_btensor i32_tensor(sg_backend *be, int64_t n0, int64_t n1, const int32_t *v)
{
	sg_btensor t;
	int64_t ne[4] = {n0, n1, 1, 1};
	cr_assert_eq(be->ops->tensor_alloc(be, SG_TYPE_I32, ne, &t), SG_OK);
	memcpy(t.data, v, sizeof(int32_t) * (size_t)(n0 * n1));
	return t;
}

static void fill(sg_btensor *t, float scale)
{
	float *p = t->data;
	for (int64_t i = 0; i < t->ne[0] * sg_btensor_rows(t); i++) p[i] = grand() * scale;
}

/* A random weight matrix of kernel type kt: random codes, scales set to sane small values.
 * Owns its memory (free with free_w). */
typedef struct {
	sg_btensor t;
	void *mem, *sc, *bi; /* the bytes as built (split MLX layout); bind may repack t into its own copy */
	sg_backend *be;
} wmat;

static const sg_type kt_type[SG_KT_COUNT] = {
	SG_TYPE_F32,  SG_TYPE_F16,  SG_TYPE_BF16, SG_TYPE_Q8_0, SG_TYPE_Q4_0, SG_TYPE_Q4_1, SG_TYPE_Q5_0,
	SG_TYPE_Q5_1, SG_TYPE_Q2_K, SG_TYPE_Q3_K, SG_TYPE_Q4_K, SG_TYPE_Q5_K, SG_TYPE_Q6_K, SG_TYPE_IQ4_NL,
	SG_TYPE_IQ4_XS, SG_TYPE_MLX_AFFINE, SG_TYPE_MLX_AFFINE, SG_TYPE_MLX_AFFINE, SG_TYPE_MLX_AFFINE,
	SG_TYPE_MLX_AFFINE, SG_TYPE_MLX_AFFINE};
static const int kt_bits[SG_KT_COUNT] = {[SG_KT_MLX2] = 2, [SG_KT_MLX3] = 3, [SG_KT_MLX4] = 4,
					 [SG_KT_MLX5] = 5, [SG_KT_MLX6] = 6, [SG_KT_MLX8] = 8};

/* byte offsets of the f16 scale fields inside one block (the GGUF layouts) */
static void f16_fields(sg_kt kt, int off[2], int *n)
{
	*n = 1;
	off[0] = 0;
	switch (kt) {
	case SG_KT_Q4_1: case SG_KT_Q5_1: case SG_KT_Q4_K: case SG_KT_Q5_K: *n = 2; off[1] = 2; break;
	case SG_KT_Q2_K: *n = 2; off[0] = 80; off[1] = 82; break;
	case SG_KT_Q3_K: off[0] = 108; break;
	case SG_KT_Q6_K: off[0] = 208; break;
	default: break;
	}
}

static wmat make_w(sg_backend *be, sg_kt kt, int64_t N, int64_t K, int group, int sb_bf16)
{
	wmat w = {0};
	w.t.type = kt_type[kt];
	w.t.ne[0] = K;
	w.t.ne[1] = N;
	w.t.ne[2] = w.t.ne[3] = 1;
	if (w.t.type == SG_TYPE_MLX_AFFINE) {
		w.t.mlx.bits = kt_bits[kt];
		w.t.mlx.group = group;
		w.t.mlx.sb_type = sb_bf16 ? SG_TYPE_BF16 : SG_TYPE_F16;
		size_t ng = (size_t)(N * K / group);
		uint16_t *s = malloc(2 * ng), *b = malloc(2 * ng);
		for (size_t i = 0; i < ng; i++) {
			/* real MLX weights are near zero-mean: the bias sits near -scale * (2^bits - 1) / 2 */
			float sv = 0.02f + 0.01f * frand(), bv = -sv * (float)((1 << kt_bits[kt]) - 1) / 2 + 0.01f * frand();
			uint32_t su, bu;
			memcpy(&su, &sv, 4);
			memcpy(&bu, &bv, 4);
			s[i] = sb_bf16 ? (uint16_t)(su >> 16) : sg_cpu_f32_to_f16(sv);
			b[i] = sb_bf16 ? (uint16_t)(bu >> 16) : sg_cpu_f32_to_f16(bv);
		}
		w.sc = s;
		w.bi = b;
		w.t.scales = s;
		w.t.biases = b;
	}
	/* row bytes from the backend's own table (independently checked by bind) */
	w.t.data = (void *)1;
	size_t rb = sg_cpu_row_bytes(&w.t);
	cr_assert(rb > 0, "type %s K %lld", sg_cpu_kt_info(kt)->name, (long long)K);
	size_t bytes = rb * (size_t)N;
	uint8_t *m = malloc(bytes + 64);
	w.mem = m;
	if (kt == SG_KT_F32) {
		for (size_t i = 0; i < bytes / 4; i++) ((float *)m)[i] = grand();
	} else if (kt == SG_KT_F16 || kt == SG_KT_BF16) {
		for (size_t i = 0; i < bytes / 2; i++) {
			float f = grand();
			uint32_t u;
			memcpy(&u, &f, 4);
			((uint16_t *)m)[i] = kt == SG_KT_F16 ? sg_cpu_f32_to_f16(f) : (uint16_t)(u >> 16);
		}
	} else {
		for (size_t i = 0; i < bytes; i++) m[i] = (uint8_t)rnd();
		if (w.t.type != SG_TYPE_MLX_AFFINE) {
			int blk = sg_cpu_kt_info(kt)->block;
			size_t bb = rb / (size_t)(K / blk);
			int off[2], nf;
			f16_fields(kt, off, &nf);
			for (size_t b = 0; b < bytes / bb; b++)
				for (int f = 0; f < nf; f++) {
					float d = 0.01f * (1.0f + 0.5f * frand()), v = d;
					/* Q4_1 / Q5_1 minima: near -d * (2^bits - 1) / 2, as for zero-mean weights */
					if (f == 1 && kt == SG_KT_Q4_1) v = -7.5f * d;
					else if (f == 1 && kt == SG_KT_Q5_1) v = -15.5f * d;
					else if (f == 1) v = 0.005f * (1.0f + 0.5f * frand());
					uint16_t h = sg_cpu_f32_to_f16(v);
					memcpy(m + b * bb + off[f], &h, 2);
				}
		}
	}
	w.t.data = m;
	w.be = be;
	cr_assert_eq(be->ops->tensor_bind(be, &w.t), SG_OK);
	return w;
}

static void free_w(wmat *w)
{
	w->be->ops->tensor_free(w->be, &w->t); /* a repacked copy; a no-op on bytes bound in place */
	free(w->mem);
	free(w->sc);
	free(w->bi);
}

/* --- matmul --- */

typedef struct {
	sg_kt kt;
	int group, sb_bf16;
} wcase;

static int n_wcases(wcase *out)
{
	int n = 0;
	for (int kt = 0; kt < SG_KT_COUNT; kt++) {
		if (kt == SG_KT_MLX4G) continue; /* what bind makes of MLX4: every MLX4 case below runs it */
		if (kt_type[kt] != SG_TYPE_MLX_AFFINE) {
			out[n++] = (wcase){kt, 0, 0};
			continue;
		}
		static const int groups[3] = {32, 64, 128};
		for (int g = 0; g < 3; g++) out[n++] = (wcase){kt, groups[g], g != 1};
	}
	return n;
}

static int64_t k_for(const wcase *c, int variant)
{
	int blk = c->group ? c->group : sg_cpu_kt_info(c->kt)->block;
	if (blk == 1) return variant == 0 ? 67 : 300; /* odd lengths for the float types */
	if (blk == 256) return variant == 0 ? 256 : 768;
	return variant == 0 ? 3 * (int64_t)blk : 7 * (int64_t)blk * (blk == 32 ? 3 : 1);
}

/* x as the integer kernels see it: each block of 32 rounded to d * q (8 bits). */
static void requantize(const float *x, int64_t K, float *out)
{
	sg_xq xq;
	void *mem = aligned_alloc(64, (sg_xq_bytes(K) + 63) & ~(size_t)63);
	sg_xq_init(&xq, K, mem);
	sg_cpu_quantize_x_ref(x, K, SG_XL_NAT, 0, &xq);
	for (int64_t i = 0; i < K; i++) out[i] = xq.d[i / 32] * xq.b[i / 32].q[i % 32];
	free(mem);
}

/*
 * Every kernel type on every SIMD set, two ways:
 *  - exact: against the scalar reference fed the same 8-bit activations the SIMD kernel uses
 *    (d * q): what remains is float summation order, NMSE ~1e-13; threshold NMSE_F32 x 100
 *    because a row's sum may cancel to much less than its terms;
 *  - end to end: against the reference on the f32 activations: the 8-bit activation error,
 *    threshold NMSE_Q8X (see the top of the file).
 */
Test(backend_ops, matmul_every_type_on_every_simd_set_matches_scalar_reference)
{
	sg_backend *ref = make_be("scalar", 1);
	cr_assert(ref);
	wcase cases[64];
	int nc = n_wcases(cases);
	for (int s = 0; s < N_SETS; s++) {
		sg_backend *be = make_be(simd_sets[s], 2);
		if (!be) continue;
		for (int c = 0; c < nc; c++) {
			int quant = cases[c].kt > SG_KT_BF16;
			for (int variant = 0; variant < 3; variant++) {
				int64_t K = variant < 2 ? k_for(&cases[c], variant) : 768, N = variant == 0 ? 13 : variant == 1 ? 37 : 64;
				for (int ntok = 1; ntok <= 5; ntok += 4) {
					wmat w = make_w(be, cases[c].kt, N, K, cases[c].group, cases[c].sb_bf16);
					sg_btensor x = f32_tensor(be, K, ntok, 1), xr = f32_tensor(be, K, ntok, 1);
					sg_btensor y0 = f32_tensor(be, N, ntok, 1), y1 = f32_tensor(be, N, ntok, 1);
					fill(&x, 1.0f);
					for (int t = 0; t < ntok; t++) {
						if (quant) requantize((float *)x.data + t * K, K, (float *)xr.data + t * K);
						else memcpy((float *)xr.data + t * K, (float *)x.data + t * K, sizeof(float) * (size_t)K);
					}
					cr_assert_eq(be->ops->matmul(be, &w.t, &x, NULL, &y1), SG_OK);
					/* exact: same activations */
					cr_assert_eq(ref->ops->matmul(ref, &w.t, &xr, NULL, &y0), SG_OK);
					double e = nmse(y0.data, y1.data, N * ntok);
					cr_expect(e < NMSE_F32 * 100, "%s %s g%d K=%lld N=%lld n=%d: exact nmse %.3g", simd_sets[s],
						  sg_cpu_kt_info(cases[c].kt)->name, cases[c].group, (long long)K, (long long)N, ntok, e);
					/* end to end, on the large shape (enough samples for a stable estimate) */
					if (variant == 2) {
						cr_assert_eq(ref->ops->matmul(ref, &w.t, &x, NULL, &y0), SG_OK);
						double e2 = nmse(y0.data, y1.data, N * ntok);
						double thr = quant ? NMSE_Q8X : NMSE_F32;
						cr_expect(e2 < thr, "%s %s g%d K=%lld N=%lld n=%d: nmse %.3g >= %.1g", simd_sets[s],
							  sg_cpu_kt_info(cases[c].kt)->name, cases[c].group, (long long)K, (long long)N, ntok, e2, thr);
						cr_log_info("%s %s g%d n=%d exact nmse %.3g, vs f32 activations %.3g", simd_sets[s],
							    sg_cpu_kt_info(cases[c].kt)->name, cases[c].group, ntok, e, e2);
					}
					sg_btensor *all[] = {&x, &xr, &y0, &y1};
					for (int i = 0; i < 4; i++) be->ops->tensor_free(be, all[i]);
					free_w(&w);
				}
			}
		}
		sg_backend_free(be);
	}
	sg_backend_free(ref);
}

/*
 * The many-token GEMM kernels against the same set with the GEMM switched off (the one-token
 * kernel looped over tokens): the same 8-bit activations and the same integer dots, so only the
 * float summation order differs (threshold NMSE_F32 x 100, as above). Shapes: odd row counts
 * (tails of the row tile), token counts that are not multiples of the token tile and pass the
 * token chunk, and K past the GEMM's K chunk (partial sums added over chunks), with a bias.
 * Float weights must give equal bits.
 */
Test(backend_ops, gemm_equals_per_token_loop_up_to_summation_order)
{
	wcase cases[64];
	int nc = n_wcases(cases), checked = 0;
	for (int s = 0; s < N_SETS; s++) {
		sg_backend *be = make_be(simd_sets[s], 2), *lp = make_be(simd_sets[s], 2);
		if (!be) continue;
		const sg_cpu_kernels *k = ((sg_cpu_backend *)be)->k;
		((sg_cpu_backend *)lp)->gemm = 0;
		for (int c = 0; c < nc; c++) {
			if (!k->mm[cases[c].kt]) continue;
			int blk = cases[c].group ? cases[c].group : sg_cpu_kt_info(cases[c].kt)->block;
			for (int v = 0; v < 3; v++) {
				int64_t N = v == 0 ? 5 : v == 1 ? 37 : 19, ntok = v == 0 ? 2 : v == 1 ? 7 : 70;
				int64_t K = v == 2 ? (blk == 1 ? 2061 : 2304) : k_for(&cases[c], v);
				wmat w = make_w(be, cases[c].kt, N, K, cases[c].group, cases[c].sb_bf16);
				sg_btensor x = f32_tensor(be, K, ntok, 1), b = f32_tensor(be, N, 1, 1);
				sg_btensor y0 = f32_tensor(be, N, ntok, 1), y1 = f32_tensor(be, N, ntok, 1);
				fill(&x, 1.0f);
				fill(&b, 1.0f);
				cr_assert_eq(be->ops->matmul(be, &w.t, &x, &b, &y1), SG_OK);
				cr_assert_eq(lp->ops->matmul(lp, &w.t, &x, &b, &y0), SG_OK);
				double e = nmse(y0.data, y1.data, N * ntok);
				cr_expect(e < NMSE_F32 * 100, "%s %s g%d K=%lld N=%lld n=%lld: gemm vs loop nmse %.3g", simd_sets[s],
					  sg_cpu_kt_info(cases[c].kt)->name, cases[c].group, (long long)K, (long long)N, (long long)ntok, e);
				/* float weights: the GEMM keeps the matvec's summation sequence (prefill in any
				 * chunking equals decode), so the bits are equal */
				if (cases[c].kt <= SG_KT_BF16)
					cr_expect(!memcmp(y0.data, y1.data, sizeof(float) * (size_t)(N * ntok)),
						  "%s %s K=%lld N=%lld n=%lld: float GEMM differs from the matvec in bits", simd_sets[s],
						  sg_cpu_kt_info(cases[c].kt)->name, (long long)K, (long long)N, (long long)ntok);
				checked++;
				sg_btensor *all[] = {&x, &b, &y0, &y1};
				for (int i = 0; i < 4; i++) be->ops->tensor_free(be, all[i]);
				free_w(&w);
			}
		}
		sg_backend_free(be);
		sg_backend_free(lp);
	}
	/* every x86 set has GEMM kernels for the types real models use */
#if defined(__x86_64__)
	cr_expect(checked > 0, "no GEMM kernel was exercised");
#endif
}

/*
 * Prefill against decode: a many-token matmul (GEMM kernels on, as in a prompt chunk) against the
 * same tokens one call each (the decode path, one token). Bit for bit wherever the contract holds:
 * float weights (the GEMM keeps the matvec's summation sequence) and every type without a GEMM
 * kernel in the set (the one-token kernel looped). The quantized GEMM kernels (Q8_0, Q4_0, Q5_0,
 * Q4_K, Q6_K, MLX 4-bit) apply the scale to each block's whole integer dot and add K chunks,
 * where the matvec scales 8 lane partials per block in one chain: equal only up to summation
 * order, like the test above; SARAGOSSA_CPU_GEMM=0 makes every type bit-identical.
 */
Test(backend_ops, prefill_equals_decode_bit_for_bit_for_float_and_non_gemm_types)
{
	wcase cases[64];
	int nc = n_wcases(cases), exact = 0;
	static const char *sets[] = {"scalar", "avx512", "avx2", "neon"};
	for (int s = 0; s < 4; s++) {
		sg_backend *be = make_be(sets[s], 2);
		if (!be) continue;
		const sg_cpu_kernels *k = ((sg_cpu_backend *)be)->k;
		for (int c = 0; c < nc; c++) {
			sg_kt kt = cases[c].kt;
			int64_t N = 21, K = k_for(&cases[c], 1), ntok = 6;
			wmat w = make_w(be, kt, N, K, cases[c].group, cases[c].sb_bf16);
			sg_wview v;
			sg_kt bound = sg_cpu_wview(&w.t, &v); /* MLX4 may be bound as MLX4G */
			if (k->mm[bound] && bound > SG_KT_BF16) {
				free_w(&w);
				continue;
			}
			sg_btensor x = f32_tensor(be, K, ntok, 1), y = f32_tensor(be, N, ntok, 1);
			sg_btensor x1 = f32_tensor(be, K, 1, 1), y1 = f32_tensor(be, N, 1, 1);
			fill(&x, 1.0f);
			cr_assert_eq(be->ops->matmul(be, &w.t, &x, NULL, &y), SG_OK);
			for (int64_t t = 0; t < ntok; t++) {
				memcpy(x1.data, (float *)x.data + t * K, sizeof(float) * (size_t)K);
				cr_assert_eq(be->ops->matmul(be, &w.t, &x1, NULL, &y1), SG_OK);
				cr_expect(!memcmp(y1.data, (float *)y.data + t * N, sizeof(float) * (size_t)N),
					  "%s %s g%d token %lld: prefill differs from decode in bits", sets[s], sg_cpu_kt_info(bound)->name,
					  cases[c].group, (long long)t);
			}
			exact++;
			sg_btensor *all[] = {&x, &y, &x1, &y1};
			for (int i = 0; i < 4; i++) be->ops->tensor_free(be, all[i]);
			free_w(&w);
		}
		sg_backend_free(be);
	}
	cr_expect(exact > 20);
}

/* The packed float GEMMs (SARAGOSSA_CPU_GEMM_PACKED: AVX-512's 512-bit tile, AVX2's 4-row tile)
 * against the unpacked tile they replace, bit for bit: rows past a block of 8 (and of 4), K a
 * multiple of 8 (the sums finished across registers; 64 is Whisper's head dim) and with a tail
 * past one (finished one by one), tokens over two chunks of the driver and partial token tiles,
 * and long rows (4104). */
Test(backend_ops, packed_float_gemm_has_the_unpacked_gemms_bits)
{
	static const char *sets[] = {"avx512", "avx2"};
	static const sg_kt kts[3] = {SG_KT_F32, SG_KT_F16, SG_KT_BF16};
	static const int64_t Ks[4] = {64, 96, 100, 4104};
	int checked = 0;
	for (int s = 0; s < 2; s++) {
		sg_backend *be[2];
		for (int packed = 0; packed < 2; packed++) {
			setenv("SARAGOSSA_CPU_GEMM_PACKED", packed ? "1" : "0", 1);
			sg_flags_reload();
			be[packed] = make_be(sets[s], 2);
		}
		unsetenv("SARAGOSSA_CPU_GEMM_PACKED");
		sg_flags_reload();
		if (!be[0] || !be[1]) {
			if (be[0]) sg_backend_free(be[0]);
			if (be[1]) sg_backend_free(be[1]);
			continue;
		}
		cr_assert(!((sg_cpu_backend *)be[0])->gemm_packed && ((sg_cpu_backend *)be[1])->gemm_packed);
		cr_assert(((sg_cpu_backend *)be[1])->k->mm_packed[SG_KT_F32], "%s: no packed float GEMM", sets[s]);
		for (int i = 0; i < 3; i++)
			for (int ki = 0; ki < 4; ki++) {
				int64_t N = 77, K = Ks[ki], ntok = 101;
				wmat w = make_w(be[0], kts[i], N, K, 0, 0);
				sg_btensor x = f32_tensor(be[0], K, ntok, 1), y0 = f32_tensor(be[0], N, ntok, 1), y1 = f32_tensor(be[0], N, ntok, 1);
				fill(&x, 1.0f);
				cr_assert_eq(be[0]->ops->matmul(be[0], &w.t, &x, NULL, &y0), SG_OK);
				cr_assert_eq(be[1]->ops->matmul(be[1], &w.t, &x, NULL, &y1), SG_OK);
				cr_expect(!memcmp(y0.data, y1.data, sizeof(float) * (size_t)(N * ntok)), "%s %s K %lld: packed GEMM differs in bits",
					  sets[s], sg_cpu_kt_info(kts[i])->name, (long long)K);
				checked++;
				sg_btensor *all[] = {&x, &y0, &y1};
				for (int j = 0; j < 3; j++) be[0]->ops->tensor_free(be[0], all[j]);
				free_w(&w);
			}
		sg_backend_free(be[0]);
		sg_backend_free(be[1]);
	}
#if defined(__x86_64__)
	cr_expect(checked >= 12, "no x86 kernel set ran the packed GEMM");
#endif
}

/* SARAGOSSA_CPU_TENSOR_CACHE: a freed tensor of 1 MiB or more comes back for an allocation of its size
 * (or up to half of it), zeroed like a fresh one; a smaller one or a much smaller request gets fresh
 * memory; with the flag off nothing is kept. */
Test(backend_ops, large_tensors_are_reused_zeroed)
{
	for (int on = 1; on >= 0; on--) {
		setenv("SARAGOSSA_CPU_TENSOR_CACHE", on ? "1" : "0", 1);
		sg_flags_reload();
		sg_backend *be = make_be(NULL, 1);
		unsetenv("SARAGOSSA_CPU_TENSOR_CACHE");
		sg_flags_reload();
		cr_assert(be);
		sg_btensor a = f32_tensor(be, 1024, 512, 1); /* 2 MiB */
		void *pa = a.data;
		memset(a.data, 0x5a, 1024 * 512 * 4);
		be->ops->tensor_free(be, &a);
		sg_btensor b = f32_tensor(be, 1024, 300, 1); /* 1.2 MiB: more than half */
		if (on) cr_expect_eq(b.data, pa, "the idle block is not reused");
		for (int64_t i = 0; i < 1024 * 300; i++) cr_assert_eq(((float *)b.data)[i], 0.0f, "reused block not zeroed at %lld", (long long)i);
		be->ops->tensor_free(be, &b);
		sg_btensor c = f32_tensor(be, 1024, 100, 1); /* 400 KiB: below the cache's size */
		if (on) cr_expect_neq(c.data, pa);
		sg_btensor d = f32_tensor(be, 1024, 512, 1);
		if (on) cr_expect_eq(d.data, pa);
		be->ops->tensor_free(be, &c);
		be->ops->tensor_free(be, &d);
		sg_backend_free(be);
	}
}

/* The x86 layer norm row (SARAGOSSA_CPU_NORM_SIMD) against the scalar reference: the mean's
 * double sum is exact either way, so a row differs only where the variance's double sum rounds in
 * another order, by an ulp of the scale at most; rows of MiniLM's, BERT's FFN and odd widths, with
 * and without weight and bias, an offset mean (the residual stream's). */
Test(backend_ops, layernorm_row_simd_matches_the_reference)
{
	static const char *sets[] = {"avx512", "avx2"};
	static const int64_t Ds[4] = {384, 1536, 100, 7};
	int rows = 0, same = 0;
	for (int s = 0; s < 2; s++) {
		sg_backend *be = make_be(sets[s], 1);
		if (!be) continue;
		const sg_cpu_kernels *k = ((sg_cpu_backend *)be)->k;
		cr_assert(k->layernorm_row, "%s: no layer norm row", sets[s]);
		for (int di = 0; di < 4; di++)
			for (int r = 0; r < 50; r++) {
				int64_t D = Ds[di];
				float *x = malloc(sizeof(float) * (size_t)D * 5), *w = x + D, *b = w + D, *y0 = b + D, *y1 = y0 + D;
				float off = (float)(r % 5) - 2.0f, sc = r % 2 ? 10.0f : 0.1f;
				for (int64_t i = 0; i < D; i++) {
					x[i] = off + sc * grand();
					w[i] = 1.0f + 0.1f * frand();
					b[i] = 0.1f * frand();
				}
				const float *wa = r % 3 ? w : NULL, *ba = r % 4 ? b : NULL;
				sg_cpu_layernorm_row_ref(x, wa, ba, D, 1e-12f, y0);
				k->layernorm_row(x, wa, ba, D, 1e-12f, y1);
				for (int64_t i = 0; i < D; i++)
					cr_assert(fabsf(y0[i] - y1[i]) <= 4e-7f * (fabsf(y0[i]) + 1.0f), "%s D %lld row %d [%lld]: %.9g vs %.9g", sets[s],
						  (long long)D, r, (long long)i, y0[i], y1[i]);
				rows++;
				same += !memcmp(y0, y1, sizeof(float) * (size_t)D);
				free(x);
			}
		sg_backend_free(be);
	}
#if defined(__x86_64__)
	cr_expect(rows >= 200, "no x86 kernel set ran the layer norm row");
	cr_expect(same * 10 >= rows * 9, "%d of %d rows bit for bit", same, rows);
#endif
}

/* The encoders' panel matmul (SG_LAYOUT_MATMUL_ONLY weights packed at bind, SARAGOSSA_CPU_GEMM_PANEL):
 * the kernel set's tile gives its scalar reference's bits (bias first, one fmaf per k, K blocks);
 * each token alone gives its bits inside the batch (the batching invariance an encoder needs); and
 * against the plain GEMM with the matvec's sums it differs by the summation order only (NMSE_F32).
 * Rows past a panel of 16, K with a tail (100) and over several K blocks (600: 3 of 200), tokens
 * over two chunks and a partial tile, F16 and BF16 weights converted at bind. With the flag off the
 * weight stays in the file's layout. */
Test(backend_ops, panel_matmul_matches_its_reference_and_the_plain_gemm)
{
	static const char *sets[] = {"avx512", "avx2"};
	static const sg_kt kts[3] = {SG_KT_F32, SG_KT_F16, SG_KT_BF16};
	static const int64_t Ns[2] = {77, 384}, Ks[3] = {64, 100, 600};
	int checked = 0;
	for (int s = 0; s < 2; s++) {
		sg_backend *be = make_be(sets[s], 2);
		if (!be) continue;
		cr_assert(((sg_cpu_backend *)be)->gemm_panel && ((sg_cpu_backend *)be)->k->mm_panel, "%s: no panel matmul", sets[s]);
		for (int i = 0; i < 3; i++)
			for (int ni = 0; ni < 2; ni++)
				for (int ki = 0; ki < 3; ki++) {
					int64_t N = Ns[ni], K = Ks[ki], ntok = 101;
					wmat w = make_w(be, kts[i], N, K, 0, 0);
					sg_btensor wp = w.t;
					wp.data = w.mem;
					wp.layout = SG_LAYOUT_MATMUL_ONLY;
					cr_assert_eq(be->ops->tensor_bind(be, &wp), SG_OK);
					cr_assert_eq(wp.layout, SG_CPU_LAYOUT_PANEL);
					sg_btensor x = f32_tensor(be, K, ntok, 1), bias = f32_tensor(be, N, 1, 1);
					sg_btensor y0 = f32_tensor(be, N, ntok, 1), y1 = f32_tensor(be, N, ntok, 1), y2 = f32_tensor(be, N, ntok, 1);
					sg_btensor x1 = f32_tensor(be, K, 1, 1), y3 = f32_tensor(be, N, 1, 1);
					fill(&x, 1.0f);
					fill(&bias, 1.0f);
					cr_assert_eq(be->ops->matmul(be, &w.t, &x, &bias, &y0), SG_OK);
					cr_assert_eq(be->ops->matmul(be, &wp, &x, &bias, &y1), SG_OK);
					sg_mm_panel a = {.w = wp.data, .bias = bias.data, .x = x.data, .y = y2.data, .N = N, .K = K, .np = (N + SG_MM_NR - 1) / SG_MM_NR};
					for (int64_t k0 = 0, kc = sg_cpu_panel_kc(K); k0 < K; k0 += kc)
						sg_cpu_mm_panel_ref(&a, 0, ntok, 0, (N + SG_MM_NR - 1) / SG_MM_NR, k0, k0 + kc < K ? k0 + kc : K);
					cr_expect(!memcmp(y1.data, y2.data, sizeof(float) * (size_t)(N * ntok)), "%s %s N %lld K %lld: tile differs from its reference",
						  sets[s], sg_cpu_kt_info(kts[i])->name, (long long)N, (long long)K);
					double e = nmse(y0.data, y1.data, N * ntok);
					cr_expect(e < NMSE_F32, "%s %s N %lld K %lld: NMSE %g against the plain GEMM", sets[s], sg_cpu_kt_info(kts[i])->name,
						  (long long)N, (long long)K, e);
					for (int64_t t = 0; t < ntok; t += 7) {
						memcpy(x1.data, (float *)x.data + t * K, sizeof(float) * (size_t)K);
						cr_assert_eq(be->ops->matmul(be, &wp, &x1, &bias, &y3), SG_OK);
						cr_expect(!memcmp(y3.data, (float *)y1.data + t * N, sizeof(float) * (size_t)N),
							  "%s token %lld alone differs from the batch", sets[s], (long long)t);
					}
					checked++;
					sg_btensor *all[] = {&x, &bias, &y0, &y1, &y2, &x1, &y3, &wp};
					for (int j = 0; j < 8; j++) be->ops->tensor_free(be, all[j]);
					free_w(&w);
				}
		sg_backend_free(be);
	}
#if defined(__x86_64__)
	cr_expect(checked >= 18, "no x86 kernel set ran the panel matmul");
#endif
	setenv("SARAGOSSA_CPU_GEMM_PANEL", "0", 1);
	sg_flags_reload();
	sg_backend *be = make_be(NULL, 1);
	unsetenv("SARAGOSSA_CPU_GEMM_PANEL");
	sg_flags_reload();
	cr_assert(be);
	wmat w = make_w(be, SG_KT_F32, 16, 32, 0, 0);
	sg_btensor wp = w.t;
	wp.data = w.mem;
	wp.layout = SG_LAYOUT_MATMUL_ONLY;
	cr_assert_eq(be->ops->tensor_bind(be, &wp), SG_OK);
	cr_expect_eq(wp.layout, 0);
	cr_expect_eq(wp.data, w.mem);
	free_w(&w);
	sg_backend_free(be);
}

/* A GEMM of few rows (one 64-row chunk: Whisper's scores times V) with its tokens shared out over
 * threads (SARAGOSSA_CPU_GEMM_SPLIT_TOKENS) gives the bits of one thread and of rows-only sharing,
 * for float and 8-bit weights, with a bias, over a token count that leaves a partial chunk. */
Test(backend_ops, gemm_of_few_rows_split_over_tokens_keeps_its_bits)
{
	sg_backend *b1 = make_be(NULL, 1), *b2[2];
	for (int on = 0; on < 2; on++) {
		setenv("SARAGOSSA_CPU_GEMM_SPLIT_TOKENS", on ? "1" : "0", 1);
		sg_flags_reload();
		b2[on] = make_be(NULL, 3);
	}
	unsetenv("SARAGOSSA_CPU_GEMM_SPLIT_TOKENS");
	sg_flags_reload();
	cr_assert(b1 && b2[0] && b2[1]);
	cr_assert(!((sg_cpu_backend *)b2[0])->gemm_split_tokens && ((sg_cpu_backend *)b2[1])->gemm_split_tokens);
	static const sg_kt kts[3] = {SG_KT_F32, SG_KT_F16, SG_KT_Q8_0};
	for (int i = 0; i < 3; i++) {
		int64_t N = 64, K = 160, ntok = 1003;
		wmat w = make_w(b1, kts[i], N, K, 0, 0);
		sg_btensor x = f32_tensor(b1, K, ntok, 1), bias = f32_tensor(b1, N, 1, 1);
		sg_btensor y[3] = {f32_tensor(b1, N, ntok, 1), f32_tensor(b1, N, ntok, 1), f32_tensor(b1, N, ntok, 1)};
		fill(&x, 1.0f);
		fill(&bias, 1.0f);
		cr_assert_eq(b1->ops->matmul(b1, &w.t, &x, &bias, &y[0]), SG_OK);
		cr_assert_eq(b2[0]->ops->matmul(b2[0], &w.t, &x, &bias, &y[1]), SG_OK);
		cr_assert_eq(b2[1]->ops->matmul(b2[1], &w.t, &x, &bias, &y[2]), SG_OK);
		for (int v = 1; v < 3; v++)
			cr_expect(!memcmp(y[0].data, y[v].data, sizeof(float) * (size_t)(N * ntok)), "%s split %d: differs from one thread",
				  sg_cpu_kt_info(kts[i])->name, v - 1);
		sg_btensor *all[] = {&x, &bias, &y[0], &y[1], &y[2]};
		for (int j = 0; j < 5; j++) b1->ops->tensor_free(b1, all[j]);
		free_w(&w);
	}
	sg_backend_free(b1);
	sg_backend_free(b2[0]);
	sg_backend_free(b2[1]);
}

/* A speculative verify step (match_decode on): every type, GEMM kernels or not, gives each of
 * many tokens the bits of a one-token call, with the multi-token kernels (9 tokens: 4 + 5) and
 * without them (SARAGOSSA_CPU_VERIFY_MT=0). */
Test(backend_ops, match_decode_gives_every_token_the_bits_of_decode)
{
	wcase cases[64];
	int nc = n_wcases(cases), checked = 0;
	static const char *sets[] = {"scalar", "avx512", "avx2", "neon"};
	for (int mt = 0; mt < 2; mt++) {
		setenv("SARAGOSSA_CPU_VERIFY_MT", mt ? "1" : "0", 1);
		sg_flags_reload();
		for (int s = 0; s < 4; s++) {
			sg_backend *be = make_be(sets[s], 2);
			if (!be) continue;
			cr_assert(be->ops->match_decode);
			for (int c = 0; c < nc; c++) {
				int64_t N = 37, K = k_for(&cases[c], 1), ntok = 9;
				wmat w = make_w(be, cases[c].kt, N, K, cases[c].group, cases[c].sb_bf16);
				sg_wview v;
				sg_kt bound = sg_cpu_wview(&w.t, &v);
				sg_btensor x = f32_tensor(be, K, ntok, 1), y = f32_tensor(be, N, ntok, 1);
				sg_btensor x1 = f32_tensor(be, K, 1, 1), y1 = f32_tensor(be, N, 1, 1);
				fill(&x, 1.0f);
				be->ops->match_decode(be, 1);
				cr_assert_eq(be->ops->matmul(be, &w.t, &x, NULL, &y), SG_OK);
				be->ops->match_decode(be, 0);
				for (int64_t t = 0; t < ntok; t++) {
					memcpy(x1.data, (float *)x.data + t * K, sizeof(float) * (size_t)K);
					cr_assert_eq(be->ops->matmul(be, &w.t, &x1, NULL, &y1), SG_OK);
					cr_expect(!memcmp(y1.data, (float *)y.data + t * N, sizeof(float) * (size_t)N),
						  "%s %s g%d verify_mt %d token %lld: a verify step differs from decode in bits", sets[s],
						  sg_cpu_kt_info(bound)->name, cases[c].group, mt, (long long)t);
				}
				checked++;
				sg_btensor *all[] = {&x, &y, &x1, &y1};
				for (int i = 0; i < 4; i++) be->ops->tensor_free(be, all[i]);
				free_w(&w);
			}
			sg_backend_free(be);
		}
	}
	unsetenv("SARAGOSSA_CPU_VERIFY_MT");
	sg_flags_reload();
	cr_expect(checked > 40);
}

Test(backend_ops, scalar_matmul_equals_dequantized_dot_in_double)
{
	/* the reference matvec against an explicit dequantize-then-dot here, for every type */
	sg_backend *ref = make_be("scalar", 1);
	wcase cases[64];
	int nc = n_wcases(cases);
	for (int c = 0; c < nc; c++) {
		int64_t K = k_for(&cases[c], 0), N = 5;
		wmat w = make_w(ref, cases[c].kt, N, K, cases[c].group, cases[c].sb_bf16);
		sg_btensor x = f32_tensor(ref, K, 1, 1), y = f32_tensor(ref, N, 1, 1);
		fill(&x, 1.0f);
		cr_assert_eq(ref->ops->matmul(ref, &w.t, &x, NULL, &y), SG_OK);
		sg_wview v;
		sg_cpu_wview(&w.t, &v);
		float *row = malloc(sizeof(float) * (size_t)K);
		for (int64_t r = 0; r < N; r++) {
			sg_cpu_dequant_row_ref(&v, r, 0, K, row);
			double acc = 0;
			for (int64_t k = 0; k < K; k++) acc += (double)row[k] * ((float *)x.data)[k];
			cr_expect(fabs(acc - ((float *)y.data)[r]) <= 1e-5 * (fabs(acc) + 1e-3), "%s row %lld: %g vs %g",
				  sg_cpu_kt_info(cases[c].kt)->name, (long long)r, acc, (double)((float *)y.data)[r]);
		}
		free(row);
		ref->ops->tensor_free(ref, &x);
		ref->ops->tensor_free(ref, &y);
		free_w(&w);
	}
	sg_backend_free(ref);
}

Test(backend_ops, reference_dequantizer_equals_qtypes_reference)
{
	/* the backend's scalar decoder against the formats module's, on random blocks of every type */
	sg_backend *be = make_be("scalar", 1);
	wcase cases[64];
	int nc = n_wcases(cases);
	for (int c = 0; c < nc; c++) {
		int64_t K = k_for(&cases[c], 1), N = 3;
		wmat w = make_w(be, cases[c].kt, N, K, cases[c].group, cases[c].sb_bf16);
		sg_wview v;
		sg_cpu_wview(&w.t, &v);
		float *a = malloc(sizeof(float) * (size_t)K), *b = malloc(sizeof(float) * (size_t)K);
		for (int64_t r = 0; r < N; r++) {
			sg_cpu_dequant_row_ref(&v, r, 0, K, a);
			const uint8_t *row = (const uint8_t *)w.t.data + (size_t)r * w.t.row_bytes;
			if (w.t.type == SG_TYPE_MLX_AFFINE) {
				/* the split bytes as built: bind may have repacked MLX 4-bit (SG_KT_MLX4G) */
				row = (const uint8_t *)w.mem + (size_t)r * (size_t)(K / 8 * w.t.mlx.bits);
				size_t sb = sg_btensor_mlx_sb_row_bytes(&w.t);
				sg_mlx_dequantize_row_ref(&w.t.mlx, (const uint32_t *)row, (const uint8_t *)w.t.scales + r * sb,
							  (const uint8_t *)w.t.biases + r * sb, b, K);
			} else {
				sg_dequantize_ref(w.t.type, row, b, K);
			}
			for (int64_t i = 0; i < K; i++)
				cr_assert(fabsf(a[i] - b[i]) <= 1e-6f * fabsf(b[i]) + 1e-12f, "%s g%d row %lld elem %lld: %g vs qtypes %g",
					  sg_cpu_kt_info(cases[c].kt)->name, cases[c].group, (long long)r, (long long)i, (double)a[i], (double)b[i]);
		}
		free(a);
		free(b);
		free_w(&w);
	}
	sg_backend_free(be);
}

Test(backend_ops, dequantizer_decodes_hand_built_blocks)
{
	/* blocks whose values are known from the GGUF layouts: checks the reference decoder itself */
	sg_wview v = {0};
	float y[256];
	uint8_t b[210] = {0};
	uint16_t one = sg_cpu_f32_to_f16(1.0f), half = sg_cpu_f32_to_f16(0.5f);
	/* Q4_0: d=1, low nibble of byte i -> element i, high -> element i+16, value code-8 */
	memcpy(b, &one, 2);
	for (int i = 0; i < 16; i++) b[2 + i] = (uint8_t)(i | (15 - i) << 4);
	v.kt = SG_KT_Q4_0; v.K = 32; v.data = b; v.row_bytes = 18;
	sg_cpu_dequant_row_ref(&v, 0, 0, 32, y);
	for (int i = 0; i < 16; i++) {
		cr_assert_float_eq(y[i], (float)(i - 8), 0);
		cr_assert_float_eq(y[i + 16], (float)(7 - i), 0);
	}
	/* Q5_0: fifth bit of element i is bit i of qh (element i+16: bit i+16), value code-16 */
	memset(b, 0, sizeof(b));
	memcpy(b, &one, 2);
	b[2] = 0x01; /* element 0 */
	b[4] = 0x01; /* element 16 */
	v.kt = SG_KT_Q5_0; v.row_bytes = 22;
	sg_cpu_dequant_row_ref(&v, 0, 0, 32, y);
	cr_assert_float_eq(y[0], 0.0f, 0);
	cr_assert_float_eq(y[16], 0.0f, 0);
	cr_assert_float_eq(y[1], -16.0f, 0);
	/* Q6_K: d=0.5, all scales 2, ql=0, qh=0 -> every value 0.5*2*(0-32) = -32 */
	memset(b, 0, sizeof(b));
	for (int i = 0; i < 16; i++) b[192 + i] = 2;
	memcpy(b + 208, &half, 2);
	v.kt = SG_KT_Q6_K; v.K = 256; v.row_bytes = 210;
	sg_cpu_dequant_row_ref(&v, 0, 0, 256, y);
	for (int i = 0; i < 256; i++) cr_assert_float_eq(y[i], -32.0f, 0);
	/* Q4_K: d=1, dmin=0.5, scale j = j+1 and min j = 1 (6-bit packing), codes 3 */
	memset(b, 0, sizeof(b));
	memcpy(b, &one, 2);
	memcpy(b + 2, &half, 2);
	for (int j = 0; j < 4; j++) {
		b[4 + j] = (uint8_t)(j + 1);       /* scales 0..3 */
		b[8 + j] = 1;                      /* mins 0..3 */
		b[12 + j] = (uint8_t)((j + 5) | 1 << 4); /* scales 4..7 low bits, mins 4..7 low bits */
	}
	memset(b + 16, 0x33, 128);
	v.kt = SG_KT_Q4_K; v.row_bytes = 144;
	sg_cpu_dequant_row_ref(&v, 0, 0, 256, y);
	for (int j = 0; j < 8; j++) cr_assert_float_eq(y[32 * j + 5], (float)(j + 1) * 3 - 0.5f, 1e-6, "block %d", j);
}

/* --- MLX 4-bit repack (SARAGOSSA_CPU_MLX_REPACK) --- */

static sg_btensor rebind(sg_backend *be, const sg_btensor *split)
{
	sg_btensor t = *split;
	t.row_bytes = 0;
	t.owned = 0;
	cr_assert_eq(be->ops->tensor_bind(be, &t), SG_OK);
	return t;
}

/* [V][L*P] seen as [V*L][P] (a per-layer table, sliced like the Gemma 4 loader does). */
static sg_btensor split_rows(const sg_btensor *t, int64_t L)
{
	sg_btensor v = *t;
	v.ne[0] /= L;
	v.ne[1] *= L;
	v.row_bytes /= (size_t)L;
	v.owned = 0;
	return v;
}

/*
 * The same MLX 4-bit bytes bound with the repack (one stream of [scale, bias, codes] groups) and
 * without (codes, scales, biases read in place), on every kernel set: matvec and GEMM agree up to
 * float summation order (same 8-bit activations, same integer dots), embedding rows, row views
 * and a per-layer reslicing of the row agree bit for bit, and the repacked matvec and GEMM give
 * the same bits on one thread and two. The default policy repacks groups of 64 and 128 only.
 * Shapes: group 32/64/128, f16 and bf16 scales, rows not a
 * multiple of the row tile, K past the GEMM's K chunk, odd group counts.
 */
Test(backend_ops, mlx4_repacked_equals_split_layout)
{
	static const char *sets[] = {"scalar", "avx512", "avx2", "neon"};
	int ran = 0;
	for (int s = 0; s < 4; s++) {
		sg_backend *on = make_be(sets[s], 2), *on1 = make_be(sets[s], 1), *off = make_be(sets[s], 2);
		if (!on) continue;
		((sg_cpu_backend *)on)->mlx_repack = ((sg_cpu_backend *)on1)->mlx_repack = 2; /* groups of 32 too */
		((sg_cpu_backend *)off)->mlx_repack = 0;
		static const int groups[3] = {32, 64, 128};
		for (int gi = 0; gi < 3; gi++)
			for (int v = 0; v < 3; v++) {
				int g = groups[gi], bf = (gi + v) & 1;
				int64_t K = v == 0 ? 3 * g : v == 1 ? 7 * g : 2304, N = v == 0 ? 13 : v == 1 ? 37 : 21, L = K / g;
				wmat w = make_w(off, SG_KT_MLX4, N, K, g, bf);
				sg_btensor t = rebind(on, &w.t), t1 = rebind(on1, &w.t);
				sg_wview vw;
				cr_assert_eq(sg_cpu_wview(&w.t, &vw), SG_KT_MLX4);
				cr_assert_eq(sg_cpu_wview(&t, &vw), SG_KT_MLX4G, "%s g%d: bind did not repack", sets[s], g);
				cr_assert(t.owned && t.data != w.t.data);
				for (int nt = 1; nt <= 70; nt += nt == 1 ? 4 : 65) {
					sg_btensor x = f32_tensor(on, K, nt, 1), y0 = f32_tensor(on, N, nt, 1);
					sg_btensor y1 = f32_tensor(on, N, nt, 1), y2 = f32_tensor(on, N, nt, 1);
					fill(&x, 1.0f);
					cr_assert_eq(off->ops->matmul(off, &w.t, &x, NULL, &y0), SG_OK);
					cr_assert_eq(on->ops->matmul(on, &t, &x, NULL, &y1), SG_OK);
					cr_assert_eq(on1->ops->matmul(on1, &t1, &x, NULL, &y2), SG_OK);
					double e = nmse(y0.data, y1.data, N * nt);
					cr_expect(e < NMSE_F32 * 100, "%s g%d bf%d K=%lld N=%lld n=%d: repacked vs split nmse %.3g", sets[s], g, bf,
						  (long long)K, (long long)N, nt, e);
					cr_expect(!memcmp(y1.data, y2.data, sizeof(float) * (size_t)(N * nt)),
						  "%s g%d K=%lld n=%d: repacked, 1 and 2 threads differ", sets[s], g, (long long)K, nt);
					if (nt == 1) { /* rows 3..9 as a view: the same rows of the full result */
						sg_btensor tv = sg_btensor_rows_view(&t, 3, 7), yv = f32_tensor(on, 7, 1, 1);
						cr_assert_eq(on->ops->matmul(on, &tv, &x, NULL, &yv), SG_OK);
						cr_expect(!memcmp(yv.data, (float *)y1.data + 3, 7 * sizeof(float)), "%s g%d: row view", sets[s], g);
						on->ops->tensor_free(on, &yv);
					}
					sg_btensor *all[] = {&x, &y0, &y1, &y2};
					for (int i = 0; i < 4; i++) on->ops->tensor_free(on, all[i]);
				}
				/* embedding rows, whole and resliced to [N*L][group] */
				for (int sl = 0; sl < 2; sl++) {
					sg_btensor a = sl ? split_rows(&w.t, L) : w.t, b = sl ? split_rows(&t, L) : t;
					int64_t V = sg_btensor_rows(&a), D = a.ne[0];
					int32_t idv[4] = {0, (int32_t)(V - 1), (int32_t)(V / 2), 1};
					sg_btensor ids = i32_tensor(on, 4, 1, idv), o0 = f32_tensor(on, D, 4, 1), o1 = f32_tensor(on, D, 4, 1);
					cr_assert_eq(off->ops->embed(off, &a, &ids, &o0), SG_OK);
					cr_assert_eq(on->ops->embed(on, &b, &ids, &o1), SG_OK);
					cr_expect(!memcmp(o0.data, o1.data, sizeof(float) * (size_t)(4 * D)), "%s g%d: embed (resliced %d)", sets[s], g, sl);
					sg_btensor *all[] = {&ids, &o0, &o1};
					for (int i = 0; i < 3; i++) on->ops->tensor_free(on, all[i]);
				}
				on1->ops->tensor_free(on1, &t1);
				on->ops->tensor_free(on, &t);
				free_w(&w);
				ran++;
			}
		sg_backend_free(on);
		sg_backend_free(on1);
		sg_backend_free(off);
	}
	cr_expect(ran >= 9);
	sg_backend *be = make_be(NULL, 1);
	((sg_cpu_backend *)be)->mlx_repack = 1;
	for (int g = 32; g <= 128; g *= 2) {
		wmat w = make_w(be, SG_KT_MLX4, 3, 256, g, 1);
		sg_wview vw;
		cr_expect_eq(sg_cpu_wview(&w.t, &vw), g == 32 ? SG_KT_MLX4 : SG_KT_MLX4G, "group %d", g);
		free_w(&w);
	}
	sg_backend_free(be);
}

/* --- races: one thread and two give the same bits --- */

Test(backend_ops, one_and_two_threads_give_identical_bits)
{
	sg_backend *b1 = make_be(NULL, 1), *b2 = make_be(NULL, 2);
	cr_assert(b1 && b2);
	wcase cases[64];
	int nc = n_wcases(cases);
	for (int c = 0; c < nc; c++) {
		int64_t K = k_for(&cases[c], 1), N = 37;
		wmat w = make_w(b1, cases[c].kt, N, K, cases[c].group, cases[c].sb_bf16);
		for (int ntok = 1; ntok <= 3; ntok += 2) {
			sg_btensor x = f32_tensor(b1, K, ntok, 1), y1 = f32_tensor(b1, N, ntok, 1), y2 = f32_tensor(b1, N, ntok, 1);
			fill(&x, 1.0f);
			cr_assert_eq(b1->ops->matmul(b1, &w.t, &x, NULL, &y1), SG_OK);
			cr_assert_eq(b2->ops->matmul(b2, &w.t, &x, NULL, &y2), SG_OK);
			cr_expect(memcmp(y1.data, y2.data, sizeof(float) * (size_t)(N * ntok)) == 0, "%s n=%d",
				  sg_cpu_kt_info(cases[c].kt)->name, ntok);
			b1->ops->tensor_free(b1, &x);
			b1->ops->tensor_free(b1, &y1);
			b1->ops->tensor_free(b1, &y2);
		}
		free_w(&w);
	}
	/* attention with the kv length split into chunks (few heads, long cache) */
	int64_t H = 4, Hkv = 2, hd = 64, ctx = 700;
	sg_btensor q = f32_tensor(b1, hd, H, 1), kc = f32_tensor(b1, hd, Hkv, ctx), vc = f32_tensor(b1, hd, Hkv, ctx);
	sg_btensor o1 = f32_tensor(b1, hd, H, 1), o2 = f32_tensor(b1, hd, H, 1);
	fill(&q, 1);
	fill(&kc, 1);
	fill(&vc, 1);
	int32_t p = 650;
	sg_btensor pos = i32_tensor(b1, 1, 1, &p);
	sg_attn_params ap = {0, 0, 0, 1, 0, NULL, 0};
	cr_assert_eq(b1->ops->attention(b1, &q, &kc, &vc, &pos, &ap, &o1), SG_OK);
	cr_assert_eq(b2->ops->attention(b2, &q, &kc, &vc, &pos, &ap, &o2), SG_OK);
	cr_expect(memcmp(o1.data, o2.data, sizeof(float) * (size_t)(H * hd)) == 0, "attention");
	sg_btensor *all[] = {&q, &kc, &vc, &o1, &o2, &pos};
	for (int i = 0; i < 6; i++) b1->ops->tensor_free(b1, all[i]);
	sg_backend_free(b1);
	sg_backend_free(b2);
}

/* --- expert matmul and embedding --- */

Test(backend_ops, moe_matmul_equals_per_expert_matmul)
{
	sg_backend *be = make_be(NULL, 2);
	int64_t E = 5, N = 19, K = 256, n = 3, k = 2;
	static const sg_kt kts[] = {SG_KT_Q4_K, SG_KT_Q8_0, SG_KT_BF16, SG_KT_MLX4};
	for (int c = 0; c < 4; c++) {
		wmat w = make_w(be, kts[c], N * E, K, 64, 1);
		sg_btensor w3 = w.t;
		w3.ne[1] = N;
		w3.ne[2] = E;
		int32_t idv[6] = {4, 0, 2, 4, -1, 1}; /* slot 4 invalid: zeros */
		sg_btensor ids = i32_tensor(be, k, n, idv);
		for (int shared = 0; shared < 2; shared++) {
			sg_btensor x = f32_tensor(be, K, shared ? n : n * k, 1), y = f32_tensor(be, N, n * k, 1);
			fill(&x, 1);
			cr_assert_eq(be->ops->moe_matmul(be, &w3, &x, &ids, &y), SG_OK);
			for (int64_t s = 0; s < n * k; s++) {
				sg_btensor yr = f32_tensor(be, N, 1, 1);
				if (idv[s] < 0) {
					for (int64_t i = 0; i < N; i++) cr_expect_eq(((float *)y.data)[s * N + i], 0.0f);
					be->ops->tensor_free(be, &yr);
					continue;
				}
				sg_btensor we = sg_btensor_rows_view(&w.t, idv[s] * N, N);
				sg_btensor xr = sg_btensor_rows_view(&x, shared ? s / k : s, 1);
				cr_assert_eq(be->ops->matmul(be, &we, &xr, NULL, &yr), SG_OK);
				cr_expect(memcmp(yr.data, (float *)y.data + s * N, sizeof(float) * (size_t)N) == 0, "%s slot %lld",
					  sg_cpu_kt_info(kts[c])->name, (long long)s);
				be->ops->tensor_free(be, &yr);
			}
			be->ops->tensor_free(be, &x);
			be->ops->tensor_free(be, &y);
		}
		be->ops->tensor_free(be, &ids);
		free_w(&w);
	}
	sg_backend_free(be);
}

Test(backend_ops, embed_returns_dequantized_rows_and_flags_bad_ids)
{
	sg_backend *be = make_be(NULL, 2);
	static const sg_kt kts[] = {SG_KT_Q6_K, SG_KT_Q4_0, SG_KT_F16, SG_KT_MLX6};
	for (int c = 0; c < 4; c++) {
		int64_t V = 11, D = 256;
		wmat w = make_w(be, kts[c], V, D, 32, 0);
		int32_t idv[3] = {10, 0, 3};
		sg_btensor ids = i32_tensor(be, 3, 1, idv), out = f32_tensor(be, D, 3, 1);
		cr_assert_eq(be->ops->embed(be, &w.t, &ids, &out), SG_OK);
		sg_wview v;
		sg_cpu_wview(&w.t, &v);
		float row[256];
		for (int t = 0; t < 3; t++) {
			sg_cpu_dequant_row_ref(&v, idv[t], 0, D, row);
			cr_expect(memcmp(row, (float *)out.data + t * D, sizeof(row)) == 0);
		}
		idv[1] = (int32_t)V;
		memcpy(ids.data, idv, sizeof(idv));
		cr_expect_eq(be->ops->embed(be, &w.t, &ids, &out), SG_ERR_RANGE);
		for (int i = 0; i < D; i++) cr_expect_eq(((float *)out.data)[D + i], 0.0f);
		be->ops->tensor_free(be, &ids);
		be->ops->tensor_free(be, &out);
		free_w(&w);
	}
	sg_backend_free(be);
}

/* --- f32 ops: SIMD vs scalar, and scalar vs formulas in double --- */

typedef struct {
	sg_backend *be[1 + N_SETS];
	int n;
} beset;

static beset all_sets(void)
{
	beset s = {{0}, 0};
	s.be[s.n++] = make_be("scalar", 1);
	for (int i = 0; i < N_SETS; i++) {
		sg_backend *b = make_be(simd_sets[i], 2);
		if (b) s.be[s.n++] = b;
	}
	return s;
}

static void free_sets(beset *s)
{
	for (int i = 0; i < s->n; i++) sg_backend_free(s->be[i]);
}

Test(backend_ops, rmsnorm_and_layernorm_match_formula)
{
	beset s = all_sets();
	int64_t rows = 7, D = 301;
	sg_backend *b0 = s.be[0];
	sg_btensor x = f32_tensor(b0, D, rows, 1), w = f32_tensor(b0, D, 1, 1), bb = f32_tensor(b0, D, 1, 1);
	fill(&x, 2);
	fill(&w, 0.5f);
	fill(&bb, 0.5f);
	float *want = malloc(sizeof(float) * (size_t)(rows * D));
	for (int kind = 0; kind < 3; kind++) { /* rmsnorm, gemma rmsnorm (1+w), layernorm */
		const float *xp = x.data, *wp = w.data, *bp = bb.data;
		for (int64_t r = 0; r < rows; r++) {
			double ss = 0, mean = 0, var = 0;
			for (int64_t i = 0; i < D; i++) ss += (double)xp[r * D + i] * xp[r * D + i], mean += xp[r * D + i];
			mean /= D;
			for (int64_t i = 0; i < D; i++) var += (xp[r * D + i] - mean) * (xp[r * D + i] - mean);
			var /= D;
			for (int64_t i = 0; i < D; i++) {
				double v = xp[r * D + i];
				if (kind < 2) want[r * D + i] = (float)(v / sqrt(ss / D + 1e-6) * (wp[i] + (kind == 1)));
				else want[r * D + i] = (float)((v - mean) / sqrt(var + 1e-5) * wp[i] + bp[i]);
			}
		}
		for (int i = 0; i < s.n; i++) {
			sg_btensor y = f32_tensor(b0, D, rows, 1);
			sg_status st = kind < 2 ? s.be[i]->ops->rmsnorm(s.be[i], &x, &w, 1e-6f, (float)kind, &y)
						: s.be[i]->ops->layernorm(s.be[i], &x, &w, &bb, 1e-5f, &y);
			cr_assert_eq(st, SG_OK);
			double e = nmse(want, y.data, rows * D);
			cr_expect(e < NMSE_F32, "kind %d set %d nmse %g", kind, i, e);
			b0->ops->tensor_free(b0, &y);
		}
	}
	free(want);
	b0->ops->tensor_free(b0, &x);
	b0->ops->tensor_free(b0, &w);
	b0->ops->tensor_free(b0, &bb);
	free_sets(&s);
}

/* RoPE written out from the definition, in double. */
static void rope_naive(float *x, int64_t n, int64_t H, const int32_t *pos, const sg_rope_params *p)
{
	int half = p->n_rot / 2;
	for (int64_t t = 0; t < n; t++)
		for (int64_t h = 0; h < H; h++) {
			float *v = x + (t * H + h) * p->head_dim;
			for (int i = 0; i < half; i++) {
				double f = pow(p->theta, -2.0 * i / p->n_rot);
				double a = (p->scaling == SG_ROPE_SCALING_LINEAR ? pos[t] / p->factor : pos[t]) * f;
				int i0 = p->neox ? i : 2 * i, i1 = p->neox ? i + half : 2 * i + 1;
				double x0 = v[i0], x1 = v[i1];
				v[i0] = (float)(x0 * cos(a) - x1 * sin(a));
				v[i1] = (float)(x1 * cos(a) + x0 * sin(a));
			}
		}
}

Test(backend_ops, rope_layouts_partial_and_linear_scaling_match_formula)
{
	beset s = all_sets();
	sg_backend *b0 = s.be[0];
	int64_t n = 3, H = 5, hd = 64;
	int32_t pv[3] = {0, 7, 123};
	sg_btensor pos = i32_tensor(b0, 3, 1, pv);
	sg_rope_params cases[4] = {
		{64, 64, 1, 10000, SG_ROPE_SCALING_NONE, 0, 0, 0, 0, 0, 0, 0},
		{64, 64, 0, 10000, SG_ROPE_SCALING_NONE, 0, 0, 0, 0, 0, 0, 0},
		{64, 32, 1, 1e6f, SG_ROPE_SCALING_NONE, 0, 0, 0, 0, 0, 0, 0},
		{64, 48, 0, 500000, SG_ROPE_SCALING_LINEAR, 4, 0, 0, 0, 0, 0, 0},
	};
	for (int c = 0; c < 4; c++) {
		sg_btensor x = f32_tensor(b0, hd, H, n);
		fill(&x, 1);
		float *want = malloc(sizeof(float) * (size_t)(n * H * hd));
		memcpy(want, x.data, sizeof(float) * (size_t)(n * H * hd));
		rope_naive(want, n, H, pv, &cases[c]);
		for (int i = 0; i < s.n; i++) {
			sg_btensor y = f32_tensor(b0, hd, H, n);
			memcpy(y.data, x.data, sizeof(float) * (size_t)(n * H * hd));
			cr_assert_eq(s.be[i]->ops->rope(s.be[i], &y, &pos, &cases[c]), SG_OK);
			/* float angles (as the reference models compute them) against double: 1e-10 */
			double e = nmse(want, y.data, n * H * hd);
			cr_expect(e < NMSE_F32, "case %d set %d nmse %g", c, i, e);
			b0->ops->tensor_free(b0, &y);
		}
		free(want);
		b0->ops->tensor_free(b0, &x);
	}
	b0->ops->tensor_free(b0, &pos);
	free_sets(&s);
}

Test(backend_ops, rope_scaling_yarn_llama3_proportional_agree_across_sets)
{
	beset s = all_sets();
	sg_backend *b0 = s.be[0];
	int32_t pv[2] = {5, 40000};
	sg_btensor pos = i32_tensor(b0, 2, 1, pv);
	sg_rope_params cases[3] = {
		{128, 128, 1, 1e6f, SG_ROPE_SCALING_YARN, 4, 32768, 32, 1, 0, 0, 0},
		{128, 128, 1, 500000, SG_ROPE_SCALING_LLAMA3, 8, 8192, 0, 0, 0, 1, 4},
		{128, 32, 1, 1e6f, SG_ROPE_SCALING_PROPORTIONAL, 0, 0, 0, 0, 0, 0, 0},
	};
	for (int c = 0; c < 3; c++) {
		sg_btensor x = f32_tensor(b0, 128, 2, 2);
		fill(&x, 1);
		sg_btensor y0 = f32_tensor(b0, 128, 2, 2);
		memcpy(y0.data, x.data, sizeof(float) * 512);
		cr_assert_eq(b0->ops->rope(b0, &y0, &pos, &cases[c]), SG_OK);
		/* rotation keeps each pair's norm times mscale^2 */
		double n0 = 0, n1 = 0;
		for (int i = 0; i < 512; i++) n0 += (double)((float *)x.data)[i] * ((float *)x.data)[i], n1 += (double)((float *)y0.data)[i] * ((float *)y0.data)[i];
		double ms = c == 0 ? 0.1 * log(4.0) + 1 : 1.0;
		if (c == 0) cr_expect(n1 > n0, "yarn mscale > 1 grows the norm");
		else cr_expect(fabs(n1 - n0 * ms * ms) < 1e-4 * n0, "case %d norm %g vs %g", c, n1, n0);
		if (c == 2) /* dims past the rotated pairs of the full-head layout are untouched */
			for (int i = 16; i < 64; i++) cr_expect_eq(((float *)y0.data)[i], ((float *)x.data)[i]);
		for (int i = 1; i < s.n; i++) {
			sg_btensor y = f32_tensor(b0, 128, 2, 2);
			memcpy(y.data, x.data, sizeof(float) * 512);
			cr_assert_eq(s.be[i]->ops->rope(s.be[i], &y, &pos, &cases[c]), SG_OK);
			cr_expect(nmse(y0.data, y.data, 512) < NMSE_F32);
			b0->ops->tensor_free(b0, &y);
		}
		b0->ops->tensor_free(b0, &x);
		b0->ops->tensor_free(b0, &y0);
	}
	b0->ops->tensor_free(b0, &pos);
	free_sets(&s);
}

/* Attention from the definition in double: scores, mask, softmax, weighted sum. A window without
 * causal is two-sided: |j - pos| < window. */
static void attn_naive(const float *q, const float *kc, const float *vc, const int32_t *pos, int64_t n, int64_t H, int64_t Hkv,
		       int64_t hd, const sg_attn_params *p, float *out)
{
	double sc = p->scale > 0 ? p->scale : 1 / sqrt((double)hd);
	int32_t pmax = 0;
	for (int64_t t = 0; t < n; t++) pmax = pos[t] > pmax ? pos[t] : pmax;
	for (int64_t t = 0; t < n; t++)
		for (int64_t h = 0; h < H; h++) {
			int64_t kh = h / (H / Hkv), hi = p->causal ? pos[t] : pmax, lo = p->window ? pos[t] - p->window + 1 : 0;
			if (!p->causal && p->window && pos[t] + p->window - 1 < hi) hi = pos[t] + p->window - 1;
			if (lo < 0) lo = 0;
			double s[2048], m = -1e300, l = 0, acc[256] = {0};
			for (int64_t j = lo; j <= hi; j++) {
				double d = 0;
				for (int64_t i = 0; i < hd; i++) d += (double)q[(t * H + h) * hd + i] * kc[(j * Hkv + kh) * hd + i];
				d *= sc;
				if (p->softcap > 0) d = p->softcap * tanh(d / p->softcap);
				s[j] = d;
				m = d > m ? d : m;
			}
			for (int64_t j = lo; j <= hi; j++) {
				double e = exp(s[j] - m);
				l += e;
				for (int64_t i = 0; i < hd; i++) acc[i] += e * vc[(j * Hkv + kh) * hd + i];
			}
			for (int64_t i = 0; i < hd; i++) out[(t * H + h) * hd + i] = (float)(acc[i] / l);
		}
}

Test(backend_ops, attention_gqa_window_softcap_chunked_bidirectional_matches_formula)
{
	beset s = all_sets();
	sg_backend *b0 = s.be[0];
	int64_t H = 6, Hkv = 2, hd = 80, ctx = 900;
	sg_btensor kc = f32_tensor(b0, hd, Hkv, ctx), vc = f32_tensor(b0, hd, Hkv, ctx);
	fill(&kc, 1);
	fill(&vc, 1);
	int32_t pv[4] = {3, 299, 300, 870};
	/* causal; softcap; causal window; no mask; two-sided window (bidirectional, EmbeddingGemma) */
	sg_attn_params cases[5] = {{0, 0, 0, 1, 0, NULL, 0}, {0.05f, 30, 0, 1, 0, NULL, 0}, {0, 0, 128, 1, 0, NULL, 0}, {0, 0, 0, 0, 0, NULL, 0},
				   {0, 0, 128, 0, 0, NULL, 0}};
	for (int64_t n = 1; n <= 4; n += 3) {
		sg_btensor q = f32_tensor(b0, hd, H, n), pos = i32_tensor(b0, n, 1, n == 1 ? pv + 3 : pv);
		fill(&q, 1);
		float *want = malloc(sizeof(float) * (size_t)(n * H * hd));
		for (int c = 0; c < 5; c++) {
			attn_naive(q.data, kc.data, vc.data, pos.data, n, H, Hkv, hd, &cases[c], want);
			for (int i = 0; i < s.n; i++) {
				sg_btensor o = f32_tensor(b0, hd, H, n);
				cr_assert_eq(s.be[i]->ops->attention(s.be[i], &q, &kc, &vc, &pos, &cases[c], &o), SG_OK);
				double e = nmse(want, o.data, n * H * hd);
				cr_expect(e < NMSE_F32, "n %lld case %d set %d nmse %g", (long long)n, c, i, e);
				b0->ops->tensor_free(b0, &o);
			}
		}
		free(want);
		b0->ops->tensor_free(b0, &q);
		b0->ops->tensor_free(b0, &pos);
	}
	b0->ops->tensor_free(b0, &kc);
	b0->ops->tensor_free(b0, &vc);
	free_sets(&s);
}

Test(backend_ops, kv_store_f16_cache_then_attention_matches_f32)
{
	sg_backend *be = make_be(NULL, 2);
	int64_t H = 4, Hkv = 4, hd = 32, ctx = 16, n = 5;
	sg_btensor k = f32_tensor(be, hd, Hkv, n), v = f32_tensor(be, hd, Hkv, n), q = f32_tensor(be, hd, H, n);
	fill(&k, 1);
	fill(&v, 1);
	fill(&q, 1);
	int32_t pv[5] = {0, 1, 2, 3, 4};
	sg_btensor pos = i32_tensor(be, n, 1, pv);
	sg_btensor kc32 = f32_tensor(be, hd, Hkv, ctx), vc32 = f32_tensor(be, hd, Hkv, ctx), kc16, vc16;
	int64_t ne[4] = {hd, Hkv, ctx, 1};
	cr_assert_eq(be->ops->tensor_alloc(be, SG_TYPE_F16, ne, &kc16), SG_OK);
	cr_assert_eq(be->ops->tensor_alloc(be, SG_TYPE_F16, ne, &vc16), SG_OK);
	cr_assert_eq(be->ops->kv_store(be, &k, &v, &pos, &kc32, &vc32), SG_OK);
	cr_assert_eq(be->ops->kv_store(be, &k, &v, &pos, &kc16, &vc16), SG_OK);
	sg_btensor o32 = f32_tensor(be, hd, H, n), o16 = f32_tensor(be, hd, H, n);
	sg_attn_params ap = {0, 0, 0, 1, 0, NULL, 0};
	cr_assert_eq(be->ops->attention(be, &q, &kc32, &vc32, &pos, &ap, &o32), SG_OK);
	cr_assert_eq(be->ops->attention(be, &q, &kc16, &vc16, &pos, &ap, &o16), SG_OK);
	/* f16 storage: relative rounding 2^-11 per value, NMSE ~1e-7 */
	cr_expect(nmse(o32.data, o16.data, n * H * hd) < 1e-5);
	int32_t bad = (int32_t)ctx;
	sg_btensor pbad = i32_tensor(be, 1, 1, &bad);
	sg_btensor k1 = sg_btensor_rows_view(&k, 0, Hkv), v1 = sg_btensor_rows_view(&v, 0, Hkv);
	cr_expect_eq(be->ops->kv_store(be, &k1, &v1, &pbad, &kc32, &vc32), SG_ERR_RANGE);
	sg_btensor *all[] = {&k, &v, &q, &pos, &kc32, &vc32, &kc16, &vc16, &o32, &o16, &pbad};
	for (int i = 0; i < 11; i++) be->ops->tensor_free(be, all[i]);
	sg_backend_free(be);
}

Test(backend_ops, elementwise_softmax_glu_match_formula)
{
	beset s = all_sets();
	sg_backend *b0 = s.be[0];
	int64_t rows = 3, D = 77, n = rows * D;
	sg_btensor a = f32_tensor(b0, D, rows, 1), b = f32_tensor(b0, D, rows, 1);
	fill(&a, 2);
	fill(&b, 2);
	const float *ap = a.data, *bp = b.data;
	float *want = malloc(sizeof(float) * (size_t)n);
	for (int op = 0; op < 7; op++) {
		for (int64_t i = 0; i < n; i++) {
			double g = ap[i], u = bp[i];
			switch (op) {
			case 0: want[i] = (float)(g / (1 + exp(-g)) * u); break;
			case 1: want[i] = (float)(0.5 * g * (1 + tanh(sqrt(2 / M_PI) * (g + 0.044715 * g * g * g))) * u); break;
			case 2: want[i] = (float)(g + u); break;
			case 3: want[i] = (float)(g * 0.125); break;
			case 4: want[i] = (float)(5 * tanh(g / 5)); break;
			case 5: break;
			case 6: want[i] = (float)(0.5 * g * (1 + erf(g / sqrt(2.0))) * u); break;
			}
		}
		if (op == 5)
			for (int64_t r = 0; r < rows; r++) {
				double m = -1e300, l = 0;
				for (int64_t i = 0; i < D; i++) m = ap[r * D + i] > m ? ap[r * D + i] : m;
				for (int64_t i = 0; i < D; i++) l += exp(ap[r * D + i] - m);
				for (int64_t i = 0; i < D; i++) want[r * D + i] = (float)(exp(ap[r * D + i] - m) / l);
			}
		for (int i = 0; i < s.n; i++) {
			sg_backend *be = s.be[i];
			sg_btensor y = f32_tensor(b0, D, rows, 1);
			sg_status st = op == 0 ? be->ops->glu(be, &a, &b, SG_ACT_SILU, &y)
				       : op == 1 ? be->ops->glu(be, &a, &b, SG_ACT_GELU_TANH, &y)
				       : op == 2 ? be->ops->add(be, &a, &b, &y)
				       : op == 3 ? be->ops->scale(be, &a, 0.125f, &y)
				       : op == 4 ? be->ops->softcap(be, &a, 5, &y)
				       : op == 6 ? be->ops->glu(be, &a, &b, SG_ACT_GELU, &y)
						 : be->ops->softmax(be, &a, &y);
			cr_assert_eq(st, SG_OK);
			double e = nmse(want, y.data, n);
			cr_expect(e < NMSE_F32, "op %d set %d nmse %g", op, i, e);
			b0->ops->tensor_free(b0, &y);
		}
	}
	free(want);
	b0->ops->tensor_free(b0, &a);
	b0->ops->tensor_free(b0, &b);
	free_sets(&s);
}

/* The x86 sets' vector softmax rows (SARAGOSSA_CPU_SOFTMAX_SIMD) give the bits of the scalar max
 * and scaling loops around the same exponentials: row lengths below, at and past a vector, with
 * a scalar tail, Whisper's 1500, and rows holding -inf (masked) values. */
Test(backend_ops, softmax_simd_rows_have_the_scalar_loops_bits)
{
	static const char *sets[] = {"avx512", "avx2"};
	static const int64_t Ds[] = {1, 5, 8, 77, 1500};
	int checked = 0;
	for (int si = 0; si < 2; si++) {
		sg_backend *be[2];
		for (int on = 0; on < 2; on++) {
			setenv("SARAGOSSA_CPU_SOFTMAX_SIMD", on ? "1" : "0", 1);
			sg_flags_reload();
			be[on] = make_be(sets[si], 2);
		}
		unsetenv("SARAGOSSA_CPU_SOFTMAX_SIMD");
		sg_flags_reload();
		if (!be[0] || !be[1]) {
			if (be[0]) sg_backend_free(be[0]);
			if (be[1]) sg_backend_free(be[1]);
			continue;
		}
		cr_assert(((sg_cpu_backend *)be[1])->k->softmax_row, "%s: no vector softmax rows", sets[si]);
		cr_assert(!((sg_cpu_backend *)be[0])->softmax_simd && ((sg_cpu_backend *)be[1])->softmax_simd);
		for (size_t di = 0; di < sizeof(Ds) / sizeof(Ds[0]); di++) {
			int64_t D = Ds[di], rows = 5;
			sg_btensor x = f32_tensor(be[0], D, rows, 1), y0 = f32_tensor(be[0], D, rows, 1), y1 = f32_tensor(be[0], D, rows, 1);
			fill(&x, 6.0f);
			float *xp = x.data;
			for (int64_t i = 3; i < D * rows; i += 7) xp[i] = -INFINITY;
			cr_assert_eq(be[0]->ops->softmax(be[0], &x, &y0), SG_OK);
			cr_assert_eq(be[1]->ops->softmax(be[1], &x, &y1), SG_OK);
			cr_expect(!memcmp(y0.data, y1.data, sizeof(float) * (size_t)(D * rows)), "%s D %lld: vector softmax differs in bits",
				  sets[si], (long long)D);
			checked++;
			sg_btensor *all[] = {&x, &y0, &y1};
			for (int j = 0; j < 3; j++) be[0]->ops->tensor_free(be[0], all[j]);
		}
		sg_backend_free(be[0]);
		sg_backend_free(be[1]);
	}
#if defined(__x86_64__)
	cr_expect(checked >= 5, "no x86 kernel set ran the vector softmax");
#endif
}

/*
 * The vectorised tanh (softcap) and the gated activations (GELU-tanh, SiLU) of every set, element
 * by element against double precision: relative error within 2e-6 (the polynomial and exp
 * approximations are ~3e-7; float rounding of the argument adds a few ulp). Dense over [-9, 9],
 * plus tiny and large magnitudes (where the result is e^z-small, the bound grows with |z|, the
 * condition of e^z in float), at a length that leaves a scalar tail. GELU's reference is
 * g / (1 + e^(-2u)), equal to 0.5 g (1 + tanh(u)) but free of its cancellation for negative u (in
 * double as in float); the scalar set computes the cancelling form with libm, so it is held to an
 * absolute bound instead.
 */
Test(backend_ops, vector_tanh_gelu_silu_are_accurate_to_2e6_relative)
{
	beset s = all_sets();
	sg_backend *b0 = s.be[0];
	int64_t n = 18003;
	sg_btensor a = f32_tensor(b0, n, 1, 1), one = f32_tensor(b0, n, 1, 1), y = f32_tensor(b0, n, 1, 1);
	float *ap = a.data;
	for (int64_t i = 0; i < n; i++) {
		ap[i] = -9.0f + 18.0f * (float)i / (float)(n - 1);
		((float *)one.data)[i] = 1.0f;
	}
	const float extra[] = {0, 1e-7f, -3e-5f, 0.01f, -0.5499f, 0.55f, 0.5501f, 30.0f, -60.0f, 100.0f};
	for (int i = 0; i < 10; i++) ap[i * 7] = extra[i];
	for (int i = 0; i < s.n; i++) {
		sg_backend *be = s.be[i];
		for (int op = 0; op < 3; op++) {
			sg_status st = op == 0 ? be->ops->softcap(be, &a, 1.0f, &y)
				       : op == 1 ? be->ops->glu(be, &a, &one, SG_ACT_GELU_TANH, &y)
						 : be->ops->glu(be, &a, &one, SG_ACT_SILU, &y);
			cr_assert_eq(st, SG_OK);
			double worst = 0;
			int64_t at = 0;
			for (int64_t k = 0; k < n; k++) {
				double g = ap[k], want = op == 0 ? tanh(g)
							: op == 1 ? g / (1 + exp(-2 * sqrt(2 / M_PI) * (g + 0.044715 * g * g * g)))
								  : g / (1 + exp(-g));
				if (fabs(want) < 1e-30) continue;
				double err = fabs(((float *)y.data)[k] - want);
				/* e^z in float is only as exact as z: its rounding (a few ulp of |z|) adds
				 * |z| x 2.5e-7 of relative error where the result is e^z-small */
				double z = op == 1 ? 2 * sqrt(2 / M_PI) * fabs(g + 0.044715 * g * g * g) : op == 2 ? fabs(g) : 0;
				double rel = (i == 0 ? err / (1 + fabs(g)) : err / fabs(want)) / (1 + z * 0.125);
				if (rel > worst) worst = rel, at = k;
			}
			cr_expect(worst < 2e-6, "set %d op %d: relative error %.3g at x = %g", i, op, worst, (double)ap[at]);
			cr_log_info("set %d op %d: worst relative error %.3g at x = %g", i, op, worst, (double)ap[at]);
		}
	}
	b0->ops->tensor_free(b0, &a);
	b0->ops->tensor_free(b0, &one);
	b0->ops->tensor_free(b0, &y);
	free_sets(&s);
}

/*
 * GELU with the exact erf: every set (the x86 sets' vectorised erf, the scalar set's libm erff)
 * element by element against 0.5 g (1 + erf(g / sqrt 2)) in double, and each SIMD set against the
 * scalar set: absolute error <= 1e-6 over [-9, 9] (the erfc approximation is within 1.5e-7 of
 * erf, times |g| / 2, plus float rounding), at a length with a scalar tail. At the tails the
 * result is the erff form's: exactly g for g >= 6 and 0 for g <= -6, never a subnormal (the
 * next matmul would pay for every one).
 */
Test(backend_ops, vector_gelu_erf_within_1e6_of_erff)
{
	beset s = all_sets();
	sg_backend *b0 = s.be[0];
	int64_t n = 20005;
	sg_btensor a = f32_tensor(b0, n, 1, 1), one = f32_tensor(b0, n, 1, 1), y = f32_tensor(b0, n, 1, 1),
		   y0 = f32_tensor(b0, n, 1, 1);
	float *ap = a.data;
	for (int64_t i = 0; i < n; i++) {
		ap[i] = -9.0f + 18.0f * (float)i / (float)(n - 1);
		((float *)one.data)[i] = 1.0f;
	}
	const float extra[] = {0, -0.0f, 1e-7f, -3e-5f, 6.0f, 7.5f, -7.0f, 30.0f, -60.0f, 1e4f, -1e4f, -5.5f, -13.4f};
	for (int i = 0; i < 13; i++) ap[i * 7 + 3] = extra[i];
	cr_assert_eq(b0->ops->glu(b0, &a, &one, SG_ACT_GELU, &y0), SG_OK);
	const float *r0 = y0.data;
	for (int i = 0; i < s.n; i++) {
		sg_backend *be = s.be[i];
		cr_assert_eq(be->ops->glu(be, &a, &one, SG_ACT_GELU, &y), SG_OK);
		const float *yp = y.data;
		double worst = 0, worst0 = 0;
		int64_t at = 0;
		for (int64_t k = 0; k < n; k++) {
			double g = ap[k], want = 0.5 * g * (1 + erf(g / sqrt(2.0)));
			if (fabs(g) <= 9) {
				double err = fabs(yp[k] - want), e0 = fabs(yp[k] - r0[k]);
				if (err > worst) worst = err, at = k;
				if (e0 > worst0) worst0 = e0;
			}
			if (g >= 6) cr_expect_eq(yp[k], ap[k], "set %d: gelu(%g) = %.9g, not the input", i, g, (double)yp[k]);
			if (g <= -6) cr_expect(yp[k] == 0, "set %d: gelu(%g) = %g, not 0", i, g, (double)yp[k]);
			cr_expect(yp[k] == 0 || fabsf(yp[k]) >= FLT_MIN, "set %d: gelu(%g) = %g is subnormal", i, g, (double)yp[k]);
			cr_expect(isfinite(yp[k]), "set %d: gelu(%g) is not finite", i, g);
		}
		cr_expect(worst <= 1e-6, "set %d: absolute error %.3g at x = %g", i, worst, (double)ap[at]);
		cr_expect(worst0 <= 1e-6, "set %d: %.3g from the scalar set's erff", i, worst0);
		cr_log_info("set %d: gelu-erf worst absolute error %.3g at x = %g, %.3g from erff", i, worst, (double)ap[at], worst0);
	}
	b0->ops->tensor_free(b0, &a);
	b0->ops->tensor_free(b0, &one);
	b0->ops->tensor_free(b0, &y);
	b0->ops->tensor_free(b0, &y0);
	free_sets(&s);
}

Test(backend_ops, moe_route_topk_softmax_sigmoid_and_combine)
{
	sg_backend *be = make_be(NULL, 2);
	float lg[2][6] = {{0.1f, 2.0f, -1.0f, 2.0f, 0.5f, 3.0f}, {1, 1, 1, 1, 1, 1}};
	sg_btensor logits = f32_tensor(be, 6, 2, 1);
	memcpy(logits.data, lg, sizeof(lg));
	int32_t z[6] = {0};
	sg_btensor ids = i32_tensor(be, 3, 2, z), w = f32_tensor(be, 3, 2, 1);
	for (int router = 0; router < 2; router++)
		for (int norm = 0; norm < 2; norm++) {
			cr_assert_eq(be->ops->moe_route(be, &logits, router ? SG_ROUTER_SIGMOID : SG_ROUTER_SOFTMAX, 3, norm, &ids, &w), SG_OK);
			const int32_t *id = ids.data;
			const float *wv = w.data;
			/* descending, ties to the lower id */
			cr_expect(id[0] == 5 && id[1] == 1 && id[2] == 3, "%d %d %d", id[0], id[1], id[2]);
			cr_expect(id[3] == 0 && id[4] == 1 && id[5] == 2);
			double den = 0;
			for (int e = 0; e < 6; e++) den += exp(lg[0][e]);
			double p5 = router ? 1 / (1 + exp(-3.0)) : exp(3.0) / den, p1 = router ? 1 / (1 + exp(-2.0)) : exp(2.0) / den;
			if (norm) cr_expect(fabs(wv[0] - p5 / (p5 + 2 * p1)) < 1e-6);
			else cr_expect(fabs(wv[0] - p5) < 1e-6);
		}
	/* combine */
	sg_btensor y = f32_tensor(be, 4, 6, 1), out = f32_tensor(be, 4, 2, 1);
	fill(&y, 1);
	cr_assert_eq(be->ops->moe_combine(be, &y, &w, &out), SG_OK);
	for (int t = 0; t < 2; t++)
		for (int i = 0; i < 4; i++) {
			double e = 0;
			for (int s = 0; s < 3; s++) e += (double)((float *)w.data)[t * 3 + s] * ((float *)y.data)[(t * 3 + s) * 4 + i];
			cr_expect(fabs(e - ((float *)out.data)[t * 4 + i]) < 1e-6);
		}
	sg_btensor *all[] = {&logits, &ids, &w, &y, &out};
	for (int i = 0; i < 5; i++) be->ops->tensor_free(be, all[i]);
	sg_backend_free(be);
}

/* The linear-attention stages on every SIMD set against the scalar reference backend (the
 * formulas themselves are checked in test_linear_attn.c): a chunked prefill of 70 tokens
 * through short conv, delta rule and gated norm, then one decode step from the states it left. */
Test(backend_ops, linear_attention_stages_match_scalar_reference)
{
	beset s = all_sets();
	sg_backend *b0 = s.be[0];
	int Hk = 2, Hv = 4, dk = 32, dv = 16, n = 70, K = 4, C = 2 * Hk * dk + Hv * dv;
	sg_gdn_params p = {Hk, Hv, dk, dv, 1e-6f};
	sg_btensor x = f32_tensor(b0, C, n, 1), w = f32_tensor(b0, K, C, 1), a = f32_tensor(b0, Hv, n, 1);
	sg_btensor b = f32_tensor(b0, Hv, n, 1), al = f32_tensor(b0, Hv, 1, 1), dt = f32_tensor(b0, Hv, 1, 1);
	sg_btensor z = f32_tensor(b0, dv, n * Hv, 1), nw = f32_tensor(b0, dv, 1, 1);
	sg_btensor *in[] = {&x, &w, &a, &b, &al, &dt, &z, &nw};
	for (int i = 0; i < 8; i++) fill(in[i], 0.7f);
	float *ref = NULL;
	int64_t nout = (int64_t)(n + 1) * Hv * dv;
	for (int i = 0; i < s.n; i++) {
		sg_backend *be = s.be[i];
		const sg_backend_ops *o = be->ops;
		sg_btensor cs = f32_tensor(b0, C, K - 1, 1), ss = f32_tensor(b0, dv, dk, Hv), cv = f32_tensor(b0, C, n, 1);
		sg_btensor out = f32_tensor(b0, Hv * dv, n + 1, 1);
		sg_btensor out_n = sg_btensor_rows_view(&out, 0, n), out_1 = sg_btensor_rows_view(&out, n, 1);
		cr_assert_eq(o->short_conv(be, &x, &w, &cs, &cv), SG_OK);
		cr_assert_eq(o->gated_delta(be, &cv, &a, &b, &al, &dt, &p, &ss, &out_n), SG_OK);
		sg_btensor x1 = sg_btensor_rows_view(&x, 3, 1), c1 = sg_btensor_rows_view(&cv, 0, 1);
		sg_btensor a1 = sg_btensor_rows_view(&a, 5, 1), bb1 = sg_btensor_rows_view(&b, 6, 1);
		cr_assert_eq(o->short_conv(be, &x1, &w, &cs, &c1), SG_OK);
		cr_assert_eq(o->gated_delta(be, &c1, &a1, &bb1, &al, &dt, &p, &ss, &out_1), SG_OK);
		sg_btensor oh = out_n;
		oh.ne[0] = dv;
		oh.ne[1] = (int64_t)n * Hv;
		oh.row_bytes = sizeof(float) * (size_t)dv;
		cr_assert_eq(o->gated_rmsnorm(be, &oh, &nw, &z, 1e-6f, &oh), SG_OK);
		if (!ref) {
			ref = malloc(sizeof(float) * (size_t)nout);
			memcpy(ref, out.data, sizeof(float) * (size_t)nout);
		} else {
			double e = nmse(ref, out.data, nout);
			cr_expect(e < NMSE_F32, "set %d: nmse %g", i, e);
		}
		sg_btensor *ts[] = {&cs, &ss, &cv, &out};
		for (int k = 0; k < 4; k++) b0->ops->tensor_free(b0, ts[k]);
	}
	free(ref);
	for (int i = 0; i < 8; i++) b0->ops->tensor_free(b0, in[i]);
	free_sets(&s);
}

Test(backend_ops, argmax_takes_lowest_index_on_ties_and_skips_nan)
{
	sg_backend *be = make_be(NULL, 2);
	float xv[3][5] = {{1, 3, 3, 2, 0}, {NAN, -1, -2, NAN, -1}, {-5, -4, -3, -2, 10}};
	sg_btensor x = f32_tensor(be, 5, 3, 1);
	memcpy(x.data, xv, sizeof(xv));
	int32_t z[3] = {0};
	sg_btensor ids = i32_tensor(be, 3, 1, z);
	cr_assert_eq(be->ops->argmax(be, &x, &ids), SG_OK);
	const int32_t *id = ids.data;
	cr_expect(id[0] == 1 && id[1] == 1 && id[2] == 4, "%d %d %d", id[0], id[1], id[2]);
	be->ops->tensor_free(be, &x);
	be->ops->tensor_free(be, &ids);
	sg_backend_free(be);
}

Test(backend_ops, rejects_bad_shapes_and_unknown_simd)
{
	sg_backend *be = NULL;
	sg_cpu_params p = {1, "sse9"};
	cr_expect_eq(sg_cpu_backend_create(&p, &be), SG_ERR_UNSUPPORTED);
	be = make_be(NULL, 1);
	sg_btensor x = f32_tensor(be, 64, 1, 1), y = f32_tensor(be, 5, 1, 1);
	wmat w = make_w(be, SG_KT_Q8_0, 5, 96, 0, 0);
	cr_expect_eq(be->ops->matmul(be, &w.t, &x, NULL, &y), SG_ERR_INVALID_ARG);
	sg_btensor bad = w.t;
	bad.ne[0] = 100; /* not a multiple of the block */
	cr_expect_eq(be->ops->tensor_bind(be, &bad), SG_ERR_UNSUPPORTED);
	cr_expect(sg_backend_supports(be, SG_STAGE_LINEAR_ATTN, SG_TYPE_F32));
	cr_expect(!sg_backend_supports(be, SG_STAGE_LINEAR_ATTN, SG_TYPE_F16));
	cr_expect(sg_backend_supports(be, SG_STAGE_MATMUL, SG_TYPE_IQ4_XS));
	cr_expect(!sg_backend_supports(be, SG_STAGE_MATMUL, SG_TYPE_Q8_K));
	free_w(&w);
	be->ops->tensor_free(be, &x);
	be->ops->tensor_free(be, &y);
	sg_backend_free(be);
}

/* matmul_multi (the composition on the CPU) refuses bad shapes */
Test(backend_ops, matmul_multi_reports_bad_shapes)
{
	sg_backend *be = make_be(NULL, 2);
	cr_assert(be);
	wmat w = make_w(be, SG_KT_Q4_K, 32, 256, 0, 0);
	sg_btensor x = f32_tensor(be, 256, 1, 1), y = f32_tensor(be, 31, 1, 1), xn = f32_tensor(be, 256, 1, 1);
	sg_btensor nw = f32_tensor(be, 128, 1, 1);
	sg_matmul_multi m = {.x = &x, .nw = 1, .w = {&w.t}, .y = {&y}};
	cr_expect_eq(sg_backend_matmul_multi(be, &m), SG_ERR_INVALID_ARG, "y of 31 rows for 32");
	sg_btensor y2 = f32_tensor(be, 32, 1, 1);
	sg_matmul_multi m2 = {.x = &x, .norm = &nw, .xn = &xn, .nw = 1, .w = {&w.t}, .y = {&y2}};
	cr_expect_neq(sg_backend_matmul_multi(be, &m2), SG_OK, "norm weight of 128 for rows of 256");
	sg_matmul_multi m3 = {.x = &x, .nw = 2, .w = {&w.t, &w.t}, .y = {&y2, &y2}, .residual = &x, .out = &x};
	cr_expect_eq(sg_backend_matmul_multi(be, &m3), SG_ERR_INVALID_ARG, "residual with two weights");
	free_w(&w);
	sg_btensor *all[] = {&x, &y, &xn, &nw, &y2};
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) be->ops->tensor_free(be, all[i]);
	sg_backend_free(be);
}
