/*
 * The hybrid-architecture stages of the CPU backend against formulas written out here in double
 * (gated delta rule, short conv, gated RMSNorm, sigmoid gate, gather, split GLU, per-expert
 * scale) on the scalar reference and every SIMD set the CPU has; the chunked delta rule against
 * the token-by-token recurrence across a chunk boundary; and sessions of the hybrid fixtures:
 * snapshot/restore and reset reproduce an uninterrupted run bit for bit.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/flags.h"
#include "saragossa.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
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

static sg_btensor f32(sg_backend *be, int64_t n0, int64_t n1)
{
	sg_btensor t;
	int64_t ne[4] = {n0, n1, 1, 1};
	cr_assert_eq(be->ops->tensor_alloc(be, SG_TYPE_F32, ne, &t), SG_OK);
	return t;
}

static void fill(sg_btensor *t, float s)
{
	float *p = t->data;
	for (int64_t i = 0; i < t->ne[0] * sg_btensor_rows(t); i++) p[i] = frand() * s;
}

static double nmse(const double *want, const float *got, int64_t n)
{
	double num = 0, den = 0;
	for (int64_t i = 0; i < n; i++) {
		num += (want[i] - got[i]) * (want[i] - got[i]);
		den += want[i] * want[i];
	}
	return den > 0 ? num / den : num;
}

static void set_chunk_flag(const char *v)
{
	setenv("SARAGOSSA_CPU_GDN_CHUNK", v, 1);
	sg_flags_reload();
}

/* The recurrence in double, token by token: out [n][Hv][dv], S [Hv][dk][dv] in/out. */
static void gdn_naive(const float *qkv, const float *a, const float *b, const float *alog, const float *dtb, int n,
		      int Hk, int Hv, int dk, int dv, double *S, double *out)
{
	int C = 2 * Hk * dk + Hv * dv;
	for (int t = 0; t < n; t++)
		for (int h = 0; h < Hv; h++) {
			int hk = h / (Hv / Hk);
			const float *q = qkv + t * C + hk * dk, *k = qkv + t * C + Hk * dk + hk * dk;
			const float *v = qkv + t * C + 2 * Hk * dk + h * dv;
			double qn = 0, kn = 0, qq[256], kk[256];
			for (int i = 0; i < dk; i++) qn += (double)q[i] * q[i], kn += (double)k[i] * k[i];
			for (int i = 0; i < dk; i++) qq[i] = q[i] / sqrt(qn + 1e-6) / sqrt((double)dk), kk[i] = k[i] / sqrt(kn + 1e-6);
			double x = a[t * Hv + h] + dtb[h], sp = x > 20 ? x : log1p(exp(x));
			double g = -exp(alog[h]) * sp, beta = 1 / (1 + exp(-b[t * Hv + h]));
			double *Sh = S + (size_t)h * dk * dv;
			for (int i = 0; i < dk * dv; i++) Sh[i] *= exp(g);
			for (int c = 0; c < dv; c++) {
				double m = 0;
				for (int i = 0; i < dk; i++) m += Sh[i * dv + c] * kk[i];
				double dlt = (v[c] - m) * beta;
				for (int i = 0; i < dk; i++) Sh[i * dv + c] += kk[i] * dlt;
			}
			for (int c = 0; c < dv; c++) {
				double o = 0;
				for (int i = 0; i < dk; i++) o += Sh[i * dv + c] * qq[i];
				out[((size_t)t * Hv + h) * dv + c] = o;
			}
		}
}

Test(linear_attn, delta_rule_chunked_and_stepwise_match_the_recurrence_across_a_chunk_boundary)
{
	int Hk = 2, Hv = 4, dk = 16, dv = 24, n = 100; /* 100 tokens: chunks of 64 and 36 */
	int C = 2 * Hk * dk + Hv * dv;
	sg_backend *b0 = make("scalar", 1);
	sg_btensor qkv = f32(b0, C, n), a = f32(b0, Hv, n), b = f32(b0, Hv, n), al = f32(b0, Hv, 1), dt = f32(b0, Hv, 1);
	fill(&qkv, 1.5f);
	fill(&a, 2.0f);
	fill(&b, 3.0f);
	fill(&al, 1.0f);
	fill(&dt, 1.0f);
	double *S = calloc((size_t)Hv * dk * dv, sizeof(double)), *want = calloc((size_t)n * Hv * dv, sizeof(double));
	gdn_naive(qkv.data, a.data, b.data, al.data, dt.data, n, Hk, Hv, dk, dv, S, want);
	sg_gdn_params p = {Hk, Hv, dk, dv, 1e-6f};
	int tested = 0;
	for (size_t si = 0; si < sizeof(sets) / sizeof(sets[0]); si++) {
		sg_backend *be = make(sets[si], 2);
		if (!be) continue;
		tested++;
		for (int mode = 0; mode < 2; mode++) { /* 0: one call (chunked), 1: token by token (the step) */
			set_chunk_flag("1");
			sg_btensor st = f32(b0, dv, dk * Hv), out = f32(b0, Hv * dv, n);
			if (mode == 0) {
				cr_assert_eq(be->ops->gated_delta(be, &qkv, &a, &b, &al, &dt, &p, &st, &out), SG_OK, "%s", sg_last_error());
			} else {
				for (int t = 0; t < n; t++) {
					sg_btensor q1 = sg_btensor_rows_view(&qkv, t, 1), a1 = sg_btensor_rows_view(&a, t, 1);
					sg_btensor bb1 = sg_btensor_rows_view(&b, t, 1), o1 = sg_btensor_rows_view(&out, t, 1);
					cr_assert_eq(be->ops->gated_delta(be, &q1, &a1, &bb1, &al, &dt, &p, &st, &o1), SG_OK);
				}
			}
			double e = nmse(want, out.data, (int64_t)n * Hv * dv), es = nmse(S, st.data, (int64_t)Hv * dk * dv);
			cr_expect(e < 1e-12, "%s mode %d: output nmse %g", sets[si], mode, e);
			cr_expect(es < 1e-12, "%s mode %d: state nmse %g", sets[si], mode, es);
			b0->ops->tensor_free(b0, &st);
			b0->ops->tensor_free(b0, &out);
		}
		/* the recurrence switch: one call without chunks equals the step too */
		set_chunk_flag("0");
		sg_btensor st = f32(b0, dv, dk * Hv), out = f32(b0, Hv * dv, n);
		cr_assert_eq(be->ops->gated_delta(be, &qkv, &a, &b, &al, &dt, &p, &st, &out), SG_OK);
		cr_expect(nmse(want, out.data, (int64_t)n * Hv * dv) < 1e-10);
		b0->ops->tensor_free(b0, &st);
		b0->ops->tensor_free(b0, &out);
		set_chunk_flag("1");
		sg_backend_free(be);
	}
	cr_assert_geq(tested, 1);
	free(S);
	free(want);
	sg_btensor *ts[] = {&qkv, &a, &b, &al, &dt};
	for (int i = 0; i < 5; i++) b0->ops->tensor_free(b0, ts[i]);
	sg_backend_free(b0);
}

Test(linear_attn, short_conv_over_a_chunk_equals_token_by_token_and_the_formula)
{
	int C = 40, K = 4, n = 70;
	sg_backend *be = make("scalar", 2);
	sg_btensor x = f32(be, C, n), w = f32(be, K, C), s1 = f32(be, C, K - 1), s2 = f32(be, C, K - 1);
	sg_btensor o1 = f32(be, C, n), o2 = f32(be, C, n);
	fill(&x, 1);
	fill(&w, 1);
	fill(&s1, 1);
	memcpy(s2.data, s1.data, sizeof(float) * (size_t)(C * (K - 1)));
	double *want = calloc((size_t)(C * n), sizeof(double));
	const float *xp = x.data, *wp = w.data, *sp = s1.data;
	for (int t = 0; t < n; t++)
		for (int c = 0; c < C; c++) {
			double s = 0;
			for (int j = 0; j < K; j++) {
				int u = t - (K - 1) + j; /* negative: from the state */
				double in = u >= 0 ? xp[u * C + c] : sp[(u + K - 1) * C + c];
				s += wp[c * K + j] * in;
			}
			want[t * C + c] = s / (1 + exp(-s));
		}
	cr_assert_eq(be->ops->short_conv(be, &x, &w, &s1, &o1), SG_OK, "%s", sg_last_error());
	for (int t = 0; t < n; t++) {
		sg_btensor x1 = sg_btensor_rows_view(&x, t, 1), y1 = sg_btensor_rows_view(&o2, t, 1);
		cr_assert_eq(be->ops->short_conv(be, &x1, &w, &s2, &y1), SG_OK);
	}
	cr_expect(nmse(want, o1.data, C * n) < 1e-12, "chunk vs formula");
	cr_expect(!memcmp(o1.data, o2.data, sizeof(float) * (size_t)(C * n)), "chunk vs token by token");
	cr_expect(!memcmp(s1.data, s2.data, sizeof(float) * (size_t)(C * (K - 1))), "final conv states");
	for (int j = 0; j < K - 1; j++) /* the state holds the last K-1 inputs */
		cr_expect(!memcmp((float *)s1.data + j * C, xp + (n - K + 1 + j) * C, sizeof(float) * (size_t)C));
	cr_assert_eq(be->ops->short_conv(be, &x, &w, &s1, &x), SG_ERR_INVALID_ARG);
	free(want);
	sg_btensor *ts[] = {&x, &w, &s1, &s2, &o1, &o2};
	for (int i = 0; i < 6; i++) be->ops->tensor_free(be, ts[i]);
	sg_backend_free(be);
}

Test(linear_attn, gated_norm_sigmoid_gather_split_glu_and_expert_scale_match_formulas)
{
	int rows = 6, D = 37;
	for (size_t si = 0; si < sizeof(sets) / sizeof(sets[0]); si++) {
		sg_backend *be = make(sets[si], 2);
		if (!be) continue;
		sg_btensor x = f32(be, D, rows), g = f32(be, D, rows), w = f32(be, D, 1), y = f32(be, D, rows), g1 = f32(be, 1, rows);
		fill(&x, 2);
		fill(&g, 2);
		fill(&w, 1);
		fill(&g1, 3);
		double *want = calloc((size_t)(rows * 2 * D), sizeof(double));
		const float *xp = x.data, *gp = g.data, *wp = w.data, *g1p = g1.data;
		for (int r = 0; r < rows; r++) {
			double ss = 0;
			for (int i = 0; i < D; i++) ss += (double)xp[r * D + i] * xp[r * D + i];
			for (int i = 0; i < D; i++) {
				double z = gp[r * D + i];
				want[r * D + i] = xp[r * D + i] / sqrt(ss / D + 1e-6) * wp[i] * z / (1 + exp(-z));
			}
		}
		cr_assert_eq(be->ops->gated_rmsnorm(be, &x, &w, &g, 1e-6f, &y), SG_OK);
		cr_expect(nmse(want, y.data, rows * D) < 1e-11, "%s gated_rmsnorm", sets[si]);
		for (int r = 0; r < rows; r++)
			for (int i = 0; i < D; i++) {
				want[r * D + i] = xp[r * D + i] / (1 + exp(-(double)gp[r * D + i]));
				want[rows * D + r * D + i] = xp[r * D + i] / (1 + exp(-(double)g1p[r]));
			}
		cr_assert_eq(be->ops->sigmoid_mul(be, &x, &g, &y), SG_OK);
		cr_expect(nmse(want, y.data, rows * D) < 1e-11, "%s sigmoid_mul", sets[si]);
		cr_assert_eq(be->ops->sigmoid_mul(be, &x, &g1, &y), SG_OK);
		cr_expect(nmse(want + rows * D, y.data, rows * D) < 1e-11, "%s sigmoid_mul per row", sets[si]);
		/* gather: reversed odd columns */
		int32_t ix[18];
		for (int j = 0; j < 18; j++) ix[j] = 35 - 2 * j;
		sg_btensor idx;
		int64_t ne[4] = {18, 1, 1, 1};
		cr_assert_eq(be->ops->tensor_alloc(be, SG_TYPE_I32, ne, &idx), SG_OK);
		memcpy(idx.data, ix, sizeof(ix));
		sg_btensor gy = f32(be, 18, rows);
		cr_assert_eq(be->ops->gather_cols(be, &x, &idx, &gy), SG_OK);
		for (int r = 0; r < rows; r++)
			for (int j = 0; j < 18; j++) cr_expect_eq(((float *)gy.data)[r * 18 + j], xp[r * D + ix[j]]);
		ix[3] = D;
		memcpy(idx.data, ix, sizeof(ix));
		cr_assert_eq(be->ops->gather_cols(be, &x, &idx, &gy), SG_ERR_RANGE);
		/* split GLU over [rows][2F] with F = 9: silu and gelu-tanh */
		sg_btensor xs = f32(be, 18, rows), ys = f32(be, 9, rows);
		fill(&xs, 2);
		const float *xsp = xs.data;
		for (int act = 0; act < 2; act++) {
			for (int r = 0; r < rows; r++)
				for (int i = 0; i < 9; i++) {
					double z = xsp[r * 18 + i], u = xsp[r * 18 + 9 + i];
					double a = act == 0 ? z / (1 + exp(-z)) : 0.5 * z * (1 + tanh(sqrt(2 / M_PI) * (z + 0.044715 * z * z * z)));
					want[r * 9 + i] = a * u;
				}
			cr_assert_eq(be->ops->glu_split(be, &xs, act == 0 ? SG_ACT_SILU : SG_ACT_GELU_TANH, &ys), SG_OK);
			cr_expect(nmse(want, ys.data, rows * 9) < 1e-11, "%s glu_split act %d", sets[si], act);
		}
		/* per-expert scale; a bad id zeroes its weight */
		int32_t ids[4] = {2, 0, 5, 1};
		sg_btensor it, wt = f32(be, 2, 2), sc = f32(be, 3, 1);
		int64_t ne2[4] = {2, 2, 1, 1};
		cr_assert_eq(be->ops->tensor_alloc(be, SG_TYPE_I32, ne2, &it), SG_OK);
		memcpy(it.data, ids, sizeof(ids));
		float w0[4] = {0.5f, 0.25f, 0.125f, 1.0f}, s0[3] = {2.0f, 3.0f, 4.0f};
		memcpy(wt.data, w0, sizeof(w0));
		memcpy(sc.data, s0, sizeof(s0));
		cr_assert_eq(be->ops->moe_weight_scale(be, &wt, &it, &sc), SG_OK);
		const float *wr = wt.data;
		cr_expect(wr[0] == 2.0f && wr[1] == 0.5f && wr[2] == 0.0f && wr[3] == 3.0f);
		free(want);
		sg_btensor *ts[] = {&x, &g, &w, &y, &g1, &idx, &gy, &xs, &ys, &it, &wt, &sc};
		for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++) be->ops->tensor_free(be, ts[i]);
		sg_backend_free(be);
	}
}

/* --- sessions on the hybrid fixtures --- */

static const int32_t prompt[] = {5, 17, 101, 33, 250, 9, 77, 64, 3, 199, 12, 88, 41, 150, 7, 222, 31, 18};
#define N_PROMPT ((int)(sizeof(prompt) / sizeof(prompt[0])))

static sg_model *load(const char *name)
{
	char path[256];
	snprintf(path, sizeof(path), "tests/fixtures/%s", name);
	sg_model_params mp = sg_model_default_params();
	mp.n_threads = 1;
	sg_model *m = NULL;
	cr_assert_eq(sg_model_load(path, &mp, &m), SG_OK, "%s", sg_last_error());
	return m;
}

static sg_session *session(sg_model *m, int n_batch)
{
	sg_session_params sp = sg_session_default_params();
	sp.n_ctx = 64;
	sp.n_batch = n_batch;
	sp.kv_type = SG_KV_F32;
	sg_session *s = NULL;
	cr_assert_eq(sg_session_new(m, &sp, &s), SG_OK, "%s", sg_last_error());
	return s;
}

/* Prompt in two parts with a snapshot between; run on; restore; run the second part again; then
 * reset and run everything again: all three second parts bit-identical. */
static void roundtrip(const char *name, int n_batch, int cut)
{
	sg_model *m = load(name);
	sg_session *s = session(m, n_batch);
	int V = sg_model_n_vocab(m), rest = N_PROMPT - cut;
	float *a = calloc((size_t)rest * V, sizeof(float)), *b = calloc((size_t)rest * V, sizeof(float));
	float *c = calloc((size_t)rest * V, sizeof(float));
	cr_assert_eq(sg_session_eval(s, prompt, cut, NULL), SG_OK, "%s", sg_last_error());
	sg_snapshot *snap = NULL;
	cr_assert_eq(sg_session_snapshot(s, &snap), SG_OK, "%s", sg_last_error());
	cr_assert_eq(sg_session_eval(s, prompt + cut, rest, a), SG_OK, "%s", sg_last_error());
	cr_assert_eq(sg_session_restore(s, snap), SG_OK, "%s", sg_last_error());
	cr_assert_eq(sg_session_eval(s, prompt + cut, rest, b), SG_OK, "%s", sg_last_error());
	cr_assert(!memcmp(a, b, sizeof(float) * (size_t)rest * V), "%s: logits after restore differ", name);
	sg_session_reset(s);
	cr_assert_eq(sg_session_eval(s, prompt, cut, NULL), SG_OK);
	cr_assert_eq(sg_session_eval(s, prompt + cut, rest, c), SG_OK);
	cr_assert(!memcmp(a, c, sizeof(float) * (size_t)rest * V), "%s: logits after reset differ", name);
	sg_snapshot_free(snap);
	free(a);
	free(b);
	free(c);
	sg_session_free(s);
	sg_model_free(m);
}

Test(linear_attn, snapshot_restore_of_recurrent_state_is_bit_identical)
{
	roundtrip("qwen3_5_moe_text", 4, 7);
	roundtrip("qwen3_next", 1, 9);
}

Test(linear_attn, snapshot_restore_of_gemma4_shared_kv_and_per_layer_inputs)
{
	roundtrip("gemma4_text", 3, 8);
	roundtrip("gemma4_text_moe", 5, 6);
}
