/*
 * The CPU backend's codec ops (cpu_conv.c) against the formulas written out here in double:
 * conv1d (groups, depthwise, dilation, stride, left padding), the transposed conv with its
 * trimmed tail, SnakeBeta and exact GELU, on the scalar reference and every SIMD set the CPU
 * has, with one and two threads; conv1d over weights packed at bind (the tile kernels) over odd
 * shapes; WaveNet's tanh-sigmoid gate; bad shapes are errors.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "saragossa.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float frand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)(rng >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
}

static const char *sets[] = {"scalar", "avx512", "avx2", "neon"};

static sg_backend *make(const char *simd, int nth)
{
	sg_backend *be = NULL;
	sg_cpu_params p = {nth, simd};
	return sg_cpu_backend_create(&p, &be) == SG_OK ? be : NULL;
}

static sg_btensor t3(sg_backend *be, int64_t n0, int64_t n1, int64_t n2, const float *v)
{
	sg_btensor t;
	int64_t ne[4] = {n0, n1, n2, 1};
	cr_assert_eq(be->ops->tensor_alloc(be, SG_TYPE_F32, ne, &t), SG_OK);
	if (v) cr_assert_eq(be->ops->write(be, &t, 0, v, sizeof(float) * (size_t)(n0 * n1 * n2)), SG_OK);
	return t;
}

static float *rnd(size_t n)
{
	float *v = malloc(sizeof(float) * n);
	for (size_t i = 0; i < n; i++) v[i] = frand();
	return v;
}

/* mag: the sum of the |terms| of each output, or NULL: float sums of many terms (the packed
 * convolutions' K * Cin) drift by a few ulps of their partial sums, not of the result */
static void check_mag(sg_backend *be, const sg_btensor *y, const double *want, const double *mag, size_t n, const char *what)
{
	float *got = malloc(sizeof(float) * n);
	cr_assert_eq(be->ops->read(be, y, 0, got, sizeof(float) * n), SG_OK);
	for (size_t i = 0; i < n; i++)
		cr_assert(fabs(got[i] - want[i]) <= 1e-5 * (1 + fabs(want[i])) + (mag ? 1e-6 * mag[i] : 0), "%s [%zu]: %g vs %g", what, i,
			  got[i], want[i]);
	free(got);
}

static void check(sg_backend *be, const sg_btensor *y, const double *want, size_t n, const char *what)
{
	check_mag(be, y, want, NULL, n, what);
}

/* w given as [Cout][K][Cin/groups]; packed: bound as SG_LAYOUT_CONV1D (the backend packs it) */
static void conv_case_as(sg_backend *be, int T, int Cin, int Cout, int K, int stride, int dil, int groups, int pad, int Tout,
			 int packed)
{
	int cg = Cin / groups, og = Cout / groups;
	float *x = rnd((size_t)T * Cin), *w = rnd((size_t)K * Cout * cg), *b = rnd((size_t)Cout);
	double *want = calloc((size_t)Tout * Cout, sizeof(double)), *mag = calloc((size_t)Tout * Cout, sizeof(double));
	for (int t = 0; t < Tout; t++)
		for (int co = 0; co < Cout; co++) {
			double s = b[co], m = fabs(b[co]);
			int g = co / og;
			for (int k = 0; k < K; k++) {
				int src = t * stride + k * dil - pad;
				if (src < 0 || src >= T) continue;
				for (int ci = 0; ci < cg; ci++) {
					double term = (double)w[((size_t)co * K + k) * cg + ci] * x[(size_t)src * Cin + g * cg + ci];
					s += term;
					m += fabs(term);
				}
			}
			want[(size_t)t * Cout + co] = s;
			mag[(size_t)t * Cout + co] = m;
		}
	sg_btensor tx = t3(be, Cin, T, 1, x), tb = t3(be, Cout, 1, 1, b), ty = t3(be, Cout, Tout, 1, NULL), tw;
	if (packed) {
		tw = (sg_btensor){.type = SG_TYPE_F32, .ne = {cg, K, Cout, 1}, .data = w, .layout = SG_LAYOUT_CONV1D};
		cr_assert_eq(be->ops->tensor_bind(be, &tw), SG_OK);
		cr_assert(tw.layout > 0, "the weight was packed at bind");
	} else {
		tw = t3(be, cg, K, Cout, w);
	}
	sg_conv_params p = {stride, dil, groups, pad};
	cr_assert_eq(be->ops->conv1d(be, &tx, &tw, &tb, &p, &ty), SG_OK, "%s", sg_last_error());
	char what[160];
	snprintf(what, sizeof what, "conv1d%s T %d, %d -> %d, K %d, stride %d, dilation %d, pad %d", packed ? " (packed)" : "", T, Cin, Cout,
		 K, stride, dil, pad);
	check_mag(be, &ty, want, packed ? mag : NULL, (size_t)Tout * Cout, what);
	be->ops->tensor_free(be, &tx), be->ops->tensor_free(be, &tw), be->ops->tensor_free(be, &tb), be->ops->tensor_free(be, &ty);
	free(x), free(w), free(b), free(want), free(mag);
}

static void conv_case(sg_backend *be, int T, int Cin, int Cout, int K, int stride, int dil, int groups, int pad, int Tout)
{
	conv_case_as(be, T, Cin, Cout, K, stride, dil, groups, pad, Tout, 0);
}

/* ConvTranspose1d of kernel K given as [Cin][Cout][K], handed to the op as [stride][Cout][M][Cin] */
static void convt_case(sg_backend *be, int T, int Cin, int Cout, int K, int stride, int Tout)
{
	int M = (K + stride - 1) / stride;
	float *x = rnd((size_t)T * Cin), *w = rnd((size_t)Cin * Cout * K), *b = rnd((size_t)Cout);
	float *wp = calloc((size_t)stride * Cout * M * Cin, sizeof(float));
	for (int ci = 0; ci < Cin; ci++)
		for (int co = 0; co < Cout; co++)
			for (int k = 0; k < K; k++) wp[(((size_t)(k % stride) * Cout + co) * M + k / stride) * Cin + ci] = w[((size_t)ci * Cout + co) * K + k];
	double *want = calloc((size_t)Tout * Cout, sizeof(double));
	for (int t = 0; t < Tout; t++)
		for (int co = 0; co < Cout; co++) want[(size_t)t * Cout + co] = b[co];
	for (int i = 0; i < T; i++)
		for (int k = 0; k < K; k++) {
			int t = i * stride + k;
			if (t >= Tout) continue;
			for (int co = 0; co < Cout; co++)
				for (int ci = 0; ci < Cin; ci++)
					want[(size_t)t * Cout + co] += (double)w[((size_t)ci * Cout + co) * K + k] * x[(size_t)i * Cin + ci];
		}
	sg_btensor tx = t3(be, Cin, T, 1, x), tb = t3(be, Cout, 1, 1, b), ty = t3(be, Cout, Tout, 1, NULL), tw;
	int64_t ne[4] = {Cin, M, Cout, stride};
	cr_assert_eq(be->ops->tensor_alloc(be, SG_TYPE_F32, ne, &tw), SG_OK);
	cr_assert_eq(be->ops->write(be, &tw, 0, wp, sizeof(float) * (size_t)stride * Cout * M * Cin), SG_OK);
	cr_assert_eq(be->ops->conv_transpose1d(be, &tx, &tw, &tb, stride, &ty), SG_OK);
	check(be, &ty, want, (size_t)Tout * Cout, "conv_transpose1d");
	be->ops->tensor_free(be, &tx), be->ops->tensor_free(be, &tw), be->ops->tensor_free(be, &tb), be->ops->tensor_free(be, &ty);
	free(x), free(w), free(wp), free(b), free(want);
}

Test(cpu_conv, conv_and_transposed_conv_match_the_formulas)
{
	for (size_t s = 0; s < sizeof(sets) / sizeof(sets[0]); s++)
		for (int nth = 1; nth <= 2; nth++) {
			sg_backend *be = make(sets[s], nth);
			if (!be) continue;
			conv_case(be, 37, 13, 21, 7, 1, 1, 1, 6, 37);   /* causal k 7 */
			conv_case(be, 40, 16, 16, 7, 1, 9, 1, 54, 40);  /* dilated */
			conv_case(be, 33, 24, 24, 7, 1, 1, 24, 6, 33);  /* depthwise */
			conv_case(be, 30, 12, 18, 3, 1, 1, 3, 2, 30);   /* grouped */
			conv_case(be, 31, 8, 5, 4, 2, 1, 1, 1, 15);     /* strided, padded */
			conv_case(be, 5, 8, 1, 7, 1, 1, 1, 6, 5);       /* one output channel */
			conv_case(be, 3000, 64, 40, 7, 1, 3, 1, 18, 3000); /* several im2col tiles */
			convt_case(be, 9, 12, 7, 16, 8, 72);            /* k 2r, stride r, tail trimmed */
			convt_case(be, 11, 6, 6, 2, 2, 22);             /* k = stride */
			convt_case(be, 4, 5, 3, 5, 3, 14);              /* the whole output (K < M*stride) */
			sg_backend_free(be);
		}
}

Test(cpu_conv, packed_conv_matches_the_formula_over_odd_shapes)
{
	static const int ks[] = {3, 7, 11}, dils[] = {1, 3, 5}, Ts[] = {1, 2, 7, 50};
	static const int chans[][2] = {{1, 1}, {9, 3}, {5, 17}, {13, 33}, {32, 32}, {40, 7}};
	for (size_t s = 0; s < sizeof(sets) / sizeof(sets[0]); s++)
		for (int nth = 1; nth <= 2; nth++) {
			sg_backend *be = make(sets[s], nth);
			if (!be) continue;
			for (int a = 0; a < 3; a++)
				for (int d = 0; d < 3; d++)
					for (int c = 0; c < 6; c++)
						for (int t = 0; t < 4; t++) {
							int K = ks[a], dil = dils[d], pad = dil * (K - 1) / 2;
							conv_case_as(be, Ts[t], chans[c][0], chans[c][1], K, 1, dil, 1, pad, Ts[t], 1); /* same */
						}
			conv_case_as(be, 37, 13, 21, 7, 1, 1, 1, 6, 37, 1);     /* causal */
			conv_case_as(be, 31, 8, 5, 4, 2, 1, 1, 1, 15, 1);       /* strided, padded */
			conv_case_as(be, 19, 24, 50, 1, 1, 1, 1, 0, 19, 1);     /* 1x1 */
			conv_case_as(be, 3000, 64, 40, 7, 1, 3, 1, 9, 3000, 1); /* several row blocks */
			conv_case_as(be, 700, 512, 20, 3, 1, 1, 1, 1, 700, 1);  /* wide input rows */
			sg_backend_free(be);
		}
}

Test(cpu_conv, tanh_gate_matches_the_formula)
{
	for (size_t s = 0; s < sizeof(sets) / sizeof(sets[0]); s++)
		for (int nth = 1; nth <= 2; nth++) {
			sg_backend *be = make(sets[s], nth);
			if (!be) continue;
			int T = 13, F = 37;
			float *x = rnd((size_t)T * 2 * F);
			for (int i = 0; i < T * 2 * F; i++) x[i] *= 6.0f; /* both tails of tanh and sigmoid */
			double *want = malloc(sizeof(double) * (size_t)T * F);
			for (int t = 0; t < T; t++)
				for (int j = 0; j < F; j++) {
					const float *r = x + (size_t)t * 2 * F;
					want[(size_t)t * F + j] = tanh((double)r[j]) / (1.0 + exp(-(double)r[F + j]));
				}
			sg_btensor tx = t3(be, 2 * F, T, 1, x), ty = t3(be, F, T, 1, NULL);
			cr_assert_eq(be->ops->tanh_gate(be, &tx, &ty), SG_OK);
			check(be, &ty, want, (size_t)T * F, "tanh_gate");
			cr_expect_eq(be->ops->tanh_gate(be, &tx, &tx), SG_ERR_INVALID_ARG, "aliased");
			be->ops->tensor_free(be, &tx), be->ops->tensor_free(be, &ty);
			free(x), free(want);
			sg_backend_free(be);
		}
}

Test(cpu_conv, snake_and_gelu_match_the_formulas)
{
	sg_backend *be = make(NULL, 2);
	cr_assert(be);
	int T = 29, C = 11;
	float *x = rnd((size_t)T * C), *a = rnd((size_t)C), *b = rnd((size_t)C);
	for (int c = 0; c < C; c++) a[c] = expf(a[c]), b[c] = expf(b[c]);
	double *want = malloc(sizeof(double) * (size_t)T * C);
	for (int i = 0; i < T * C; i++) {
		double s = sin((double)x[i] * a[i % C]);
		want[i] = x[i] + s * s / (b[i % C] + 1e-9);
	}
	sg_btensor tx = t3(be, C, T, 1, x), ta = t3(be, C, 1, 1, a), tb = t3(be, C, 1, 1, b), ty = t3(be, C, T, 1, NULL);
	cr_assert_eq(be->ops->snake(be, &tx, &ta, &tb, &ty), SG_OK);
	check(be, &ty, want, (size_t)T * C, "snake");
	cr_assert_eq(be->ops->snake(be, &tx, &ta, &tb, &tx), SG_OK, "in place");
	check(be, &tx, want, (size_t)T * C, "snake in place");
	cr_assert_eq(be->ops->write(be, &tx, 0, x, sizeof(float) * (size_t)T * C), SG_OK);
	for (int i = 0; i < T * C; i++) want[i] = 0.5 * x[i] * (1 + erf(x[i] / sqrt(2.0)));
	cr_assert_eq(be->ops->gelu(be, &tx, &ty), SG_OK);
	check(be, &ty, want, (size_t)T * C, "gelu");
	be->ops->tensor_free(be, &tx), be->ops->tensor_free(be, &ta), be->ops->tensor_free(be, &tb), be->ops->tensor_free(be, &ty);
	free(x), free(a), free(b), free(want);
	sg_backend_free(be);
}

Test(cpu_conv, bad_shapes_are_errors)
{
	sg_backend *be = make(NULL, 1);
	cr_assert(be);
	sg_btensor x = t3(be, 8, 10, 1, NULL), w = t3(be, 8, 3, 4, NULL), y = t3(be, 4, 10, 1, NULL), y5 = t3(be, 5, 10, 1, NULL);
	sg_btensor wg = t3(be, 3, 3, 4, NULL), i32;
	int64_t ne[4] = {8, 10, 1, 1};
	cr_assert_eq(be->ops->tensor_alloc(be, SG_TYPE_I32, ne, &i32), SG_OK);
	sg_conv_params p = {1, 1, 1, 2};
	cr_expect_eq(be->ops->conv1d(be, &x, &w, NULL, &p, &y), SG_OK);
	cr_expect_eq(be->ops->conv1d(be, &x, &w, NULL, &p, &y5), SG_ERR_INVALID_ARG, "Cout differs from w");
	cr_expect_eq(be->ops->conv1d(be, &x, &wg, NULL, &p, &y), SG_ERR_INVALID_ARG, "w rows differ from Cin");
	p.groups = 3;
	cr_expect_eq(be->ops->conv1d(be, &x, &w, NULL, &p, &y), SG_ERR_INVALID_ARG, "groups do not divide");
	p.groups = 1, p.stride = 0;
	cr_expect_eq(be->ops->conv1d(be, &x, &w, NULL, &p, &y), SG_ERR_INVALID_ARG);
	p.stride = 1;
	cr_expect_eq(be->ops->conv1d(be, &i32, &w, NULL, &p, &y), SG_ERR_INVALID_ARG, "I32 input");
	cr_expect_eq(be->ops->conv1d(be, &x, &w, NULL, &p, &x), SG_ERR_INVALID_ARG, "aliased");
	float wv[4 * 3 * 4] = {0};
	sg_btensor wp = {.type = SG_TYPE_F32, .ne = {4, 3, 4, 1}, .data = wv, .layout = SG_LAYOUT_CONV1D};
	cr_assert_eq(be->ops->tensor_bind(be, &wp), SG_OK);
	p.groups = 2;
	cr_expect_eq(be->ops->conv1d(be, &x, &wp, NULL, &p, &y), SG_ERR_INVALID_ARG, "a packed weight with groups");
	p.groups = 1;
	be->ops->tensor_free(be, &wp);
	sg_btensor yt = t3(be, 4, 40, 1, NULL), wt;
	int64_t nt[4] = {8, 2, 4, 2};
	cr_assert_eq(be->ops->tensor_alloc(be, SG_TYPE_F32, nt, &wt), SG_OK);
	sg_btensor yt2 = t3(be, 4, 22, 1, NULL);
	cr_expect_eq(be->ops->conv_transpose1d(be, &x, &wt, NULL, 2, &yt2), SG_OK);
	cr_expect_eq(be->ops->conv_transpose1d(be, &x, &wt, NULL, 2, &yt), SG_ERR_INVALID_ARG, "longer than (T-1+M)s");
	cr_expect_eq(be->ops->conv_transpose1d(be, &x, &wt, NULL, 3, &yt2), SG_ERR_INVALID_ARG, "stride differs from w");
	be->ops->tensor_free(be, &wt), be->ops->tensor_free(be, &yt2);
	cr_expect_eq(be->ops->snake(be, &x, &y, &y, &x), SG_ERR_INVALID_ARG);
	cr_expect_eq(be->ops->gelu(be, &x, &y), SG_ERR_INVALID_ARG);
	sg_btensor *all[] = {&x, &w, &y, &y5, &wg, &i32, &yt};
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) be->ops->tensor_free(be, all[i]);
	sg_backend_free(be);
}
