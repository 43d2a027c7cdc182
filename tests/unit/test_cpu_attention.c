/*
 * The CPU attention's tiled prefill path (tiles of tokens x grouped heads sharing each K/V block)
 * against the per-(token, head) path it replaces (SARAGOSSA_CPU_ATTN_TILE=0): every output must
 * be the same bit for bit (memcmp), over f32 and f16 caches, grouped-query ratios 1 to 8, head
 * dims 64, 128 and 40, chunks of 2 to 256 tokens at the start of the cache and at a depth, with and
 * without a softcap, on 1 and 2 threads. The per-item path itself is checked against the formula
 * in test_backend_ops.c; one case here also checks the tiled output against a double-precision
 * formula, so that equality of two wrong answers cannot pass.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_internal.h"
#include "base/flags.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)(rng >> 40) / 16777216.0f * 2.0f - 1.0f;
}

static sg_backend *make_be(int nth)
{
	sg_backend *be = NULL;
	sg_cpu_params p = {nth, NULL};
	cr_assert_eq(sg_cpu_backend_create(&p, &be), SG_OK);
	return be;
}

static sg_btensor tensor(sg_backend *be, sg_type type, int64_t n0, int64_t n1, int64_t n2)
{
	sg_btensor t;
	int64_t ne[4] = {n0, n1, n2, 1};
	cr_assert_eq(be->ops->tensor_alloc(be, type, ne, &t), SG_OK);
	return t;
}

static void fill(sg_btensor *t, float scale)
{
	int64_t n = t->ne[0] * sg_btensor_rows(t);
	for (int64_t i = 0; i < n; i++) {
		float x = frand() * scale;
		if (t->type == SG_TYPE_F16) ((uint16_t *)t->data)[i] = sg_cpu_f32_to_f16(x);
		else ((float *)t->data)[i] = x;
	}
}

static void set_tile(int on)
{
	setenv("SARAGOSSA_CPU_ATTN_TILE", on ? "1" : "0", 1);
	sg_flags_reload();
}

/* Runs the attention with the tiled path on and off; returns the number of differing bytes
 * (0 = identical) and leaves the tiled output in *got when asked. */
static size_t run_both(sg_backend *be, const sg_btensor *q, const sg_btensor *kc, const sg_btensor *vc, const sg_btensor *pos,
		       const sg_attn_params *ap, int64_t n, int64_t H, int64_t hdv, float *got)
{
	size_t bytes = sizeof(float) * (size_t)(n * H * hdv);
	sg_btensor o1 = tensor(be, SG_TYPE_F32, hdv, H, n), o0 = tensor(be, SG_TYPE_F32, hdv, H, n);
	/* different garbage in each output: a value the path forgets to write shows */
	memset(o1.data, 0x7f, bytes);
	memset(o0.data, 0x11, bytes);
	set_tile(1);
	cr_assert_eq(be->ops->attention(be, q, kc, vc, pos, ap, &o1), SG_OK);
	set_tile(0);
	cr_assert_eq(be->ops->attention(be, q, kc, vc, pos, ap, &o0), SG_OK);
	size_t diff = 0;
	const uint8_t *a = o1.data, *b = o0.data;
	for (size_t i = 0; i < bytes; i++) diff += a[i] != b[i];
	if (got) memcpy(got, o1.data, bytes);
	be->ops->tensor_free(be, &o1);
	be->ops->tensor_free(be, &o0);
	return diff;
}

Test(cpu_attention, tiled_prefill_equals_per_item_bit_for_bit)
{
	static const int64_t G[] = {1, 2, 4, 8}, HD[] = {64, 128, 40}, N[] = {2, 7, 33, 256}, START[] = {0, 1000};
	int cases = 0;
	for (int nth = 1; nth <= 2; nth++) {
		sg_backend *be = make_be(nth);
		for (int ty = 0; ty < 2; ty++)
			for (int gi = 0; gi < 4; gi++)
				for (int di = 0; di < 3; di++) {
					/* one full sweep over n and depth per (type, group, dim); the threads and the
					 * softcap alternate over the sweep to keep the run short */
					int64_t Hkv = G[gi] <= 2 ? 2 : 1, H = G[gi] * Hkv, hd = HD[di], ctx = 1300;
					sg_type kt = ty ? SG_TYPE_F16 : SG_TYPE_F32;
					sg_btensor kc = tensor(be, kt, hd, Hkv, ctx), vc = tensor(be, kt, hd, Hkv, ctx);
					fill(&kc, 1);
					fill(&vc, 1);
					for (int ni = 0; ni < 4; ni++)
						for (int si = 0; si < 2; si++) {
							if ((ni + si + di + gi) % 2 != nth - 1) continue;
							int64_t n = N[ni];
							sg_attn_params ap = {0, (ni + si + ty) % 2 ? 20.0f : 0.0f, 0, 1, 0, NULL, 0};
							sg_btensor q = tensor(be, SG_TYPE_F32, hd, H, n);
							fill(&q, 2);
							int32_t *pv = malloc(sizeof(int32_t) * (size_t)n);
							for (int64_t t = 0; t < n; t++) pv[t] = (int32_t)(START[si] + t);
							sg_btensor pos = tensor(be, SG_TYPE_I32, n, 1, 1);
							memcpy(pos.data, pv, sizeof(int32_t) * (size_t)n);
							size_t d = run_both(be, &q, &kc, &vc, &pos, &ap, n, H, hd, NULL);
							cr_expect_eq(d, 0, "%s G %lld hd %lld n %lld start %lld cap %g threads %d: %zu bytes differ",
								     ty ? "f16" : "f32", (long long)G[gi], (long long)hd, (long long)n,
								     (long long)START[si], ap.softcap, nth, d);
							cases++;
							free(pv);
							be->ops->tensor_free(be, &q);
							be->ops->tensor_free(be, &pos);
						}
					be->ops->tensor_free(be, &kc);
					be->ops->tensor_free(be, &vc);
				}
		sg_backend_free(be);
	}
	cr_expect_eq(cases, 2 * 4 * 3 * 8);
}

/* Positions need not be consecutive nor increasing: a token's output must not depend on which
 * other tokens share its tile. Out-of-order, repeated and far-apart positions; an output of the
 * tiled path is also checked against the formula in double precision. */
Test(cpu_attention, tiled_with_scattered_positions_equals_per_item_and_the_formula)
{
	sg_backend *be = make_be(2);
	int64_t Hkv = 2, H = 8, hd = 40, ctx = 700, n = 37;
	sg_btensor kc = tensor(be, SG_TYPE_F32, hd, Hkv, ctx), vc = tensor(be, SG_TYPE_F32, hd, Hkv, ctx);
	fill(&kc, 1);
	fill(&vc, 1);
	sg_btensor q = tensor(be, SG_TYPE_F32, hd, H, n), pos = tensor(be, SG_TYPE_I32, n, 1, 1);
	fill(&q, 2);
	int32_t *pv = pos.data;
	for (int64_t t = 0; t < n; t++) pv[t] = (int32_t)((t * 389) % ctx);
	pv[5] = pv[6] = 31; /* a repeat, ending exactly at a block edge */
	pv[9] = 0;
	sg_attn_params ap = {0, 0, 0, 1, 0, NULL, 0};
	float *got = malloc(sizeof(float) * (size_t)(n * H * hd));
	cr_expect_eq(run_both(be, &q, &kc, &vc, &pos, &ap, n, H, hd, got), 0);
	const float *qd = q.data, *kd = kc.data, *vd = vc.data;
	double worst = 0;
	for (int64_t t = 0; t < n; t++)
		for (int64_t h = 0; h < H; h++) {
			int64_t kh = h / (H / Hkv);
			double m = -1e300, l = 0, acc[40] = {0}, s[700];
			for (int64_t p = 0; p <= pv[t]; p++) {
				double d = 0;
				for (int64_t i = 0; i < hd; i++) d += (double)qd[(t * H + h) * hd + i] * kd[(p * Hkv + kh) * hd + i];
				s[p] = d / sqrt((double)hd);
				m = s[p] > m ? s[p] : m;
			}
			for (int64_t p = 0; p <= pv[t]; p++) {
				double e = exp(s[p] - m);
				l += e;
				for (int64_t i = 0; i < hd; i++) acc[i] += e * vd[(p * Hkv + kh) * hd + i];
			}
			for (int64_t i = 0; i < hd; i++) {
				double e = fabs(acc[i] / l - got[(t * H + h) * hd + i]);
				worst = e > worst ? e : worst;
			}
		}
	cr_expect(worst < 1e-5, "tiled output off the formula by %g", worst);
	free(got);
	sg_btensor *all[] = {&kc, &vc, &q, &pos};
	for (int i = 0; i < 4; i++) be->ops->tensor_free(be, all[i]);
	sg_backend_free(be);
}

/* Where the tiled path must not run (a ring cache of a sliding window, a window cutting ranges,
 * no causal mask, one token, a kv length split over threads) the flag changes nothing either. */
Test(cpu_attention, layers_outside_the_tiled_path_are_unchanged_by_the_flag)
{
	sg_backend *be = make_be(2);
	int64_t Hkv = 1, H = 4, hd = 64, ctx = 600;
	sg_btensor kc = tensor(be, SG_TYPE_F32, hd, Hkv, ctx), vc = tensor(be, SG_TYPE_F32, hd, Hkv, ctx);
	fill(&kc, 1);
	fill(&vc, 1);
	struct {
		sg_attn_params ap;
		int64_t n, start;
	} cs[] = {
		{{0, 0, 128, 1, 0, NULL, 0}, 64, 500},  /* window < ctx: a ring */
		{{0, 0, 600, 1, 0, NULL, 0}, 40, 560},  /* window = ctx: no ring, ranges from 0 (the tiled path) */
		{{0, 0, 0, 0, 0, NULL, 0}, 33, 100},    /* not causal */
		{{0, 30, 0, 1, 0, NULL, 0}, 1, 599},    /* one token */
		{{0, 0, 0, 1, 0, NULL, 0}, 3, 590},     /* 12 (token, head) pairs: the kv length is split */
	};
	for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
		int64_t n = cs[c].n;
		sg_btensor q = tensor(be, SG_TYPE_F32, hd, H, n), pos = tensor(be, SG_TYPE_I32, n, 1, 1);
		fill(&q, 2);
		for (int64_t t = 0; t < n; t++) ((int32_t *)pos.data)[t] = (int32_t)(cs[c].start + t);
		cr_expect_eq(run_both(be, &q, &kc, &vc, &pos, &cs[c].ap, n, H, hd, NULL), 0, "case %zu", c);
		be->ops->tensor_free(be, &q);
		be->ops->tensor_free(be, &pos);
	}
	be->ops->tensor_free(be, &kc);
	be->ops->tensor_free(be, &vc);
	sg_backend_free(be);
}

/* An additive logit bias (MPNet's relative positions): non-causal attention over every row up to
 * max(pos), with bias[t][h][row] added to the scaled logit, against a double-precision formula;
 * few (token, head) pairs with a long kv range take the split path, many take the plain one. A
 * bias of the wrong shape, or with a ring, is refused. */
Test(cpu_attention, additive_bias_matches_the_formula_on_both_paths)
{
	sg_backend *be = make_be(2);
	int64_t Hkv = 2, H = 4, hd = 40;
	int64_t shapes[2][2] = {{3, 600}, {20, 60}}; /* {n, ctx}: 12 pairs x 600 rows split; 80 pairs */
	for (int c = 0; c < 2; c++) {
		int64_t n = shapes[c][0], ctx = shapes[c][1];
		sg_btensor kc = tensor(be, SG_TYPE_F32, hd, Hkv, ctx), vc = tensor(be, SG_TYPE_F32, hd, Hkv, ctx);
		sg_btensor q = tensor(be, SG_TYPE_F32, hd, H, n), pos = tensor(be, SG_TYPE_I32, n, 1, 1);
		sg_btensor bias = tensor(be, SG_TYPE_F32, ctx, H, n), out = tensor(be, SG_TYPE_F32, hd, H, n);
		fill(&kc, 1);
		fill(&vc, 1);
		fill(&q, 2);
		fill(&bias, 3);
		int32_t *pv = pos.data;
		for (int64_t t = 0; t < n; t++) pv[t] = (int32_t)(ctx - 1 - t % 2); /* the last row is seen: max(pos) */
		sg_attn_params ap = {0, 0, 0, 0, 0, &bias, 0};
		cr_assert_eq(be->ops->attention(be, &q, &kc, &vc, &pos, &ap, &out), SG_OK);
		const float *qd = q.data, *kd = kc.data, *vd = vc.data, *bd = bias.data, *got = out.data;
		double worst = 0;
		for (int64_t t = 0; t < n; t++)
			for (int64_t h = 0; h < H; h++) {
				int64_t kh = h / (H / Hkv);
				double m = -1e300, l = 0, acc[40] = {0}, s[600];
				for (int64_t p = 0; p < ctx; p++) {
					double d = 0;
					for (int64_t i = 0; i < hd; i++) d += (double)qd[(t * H + h) * hd + i] * kd[(p * Hkv + kh) * hd + i];
					s[p] = d / sqrt((double)hd) + bd[(t * H + h) * ctx + p];
					m = s[p] > m ? s[p] : m;
				}
				for (int64_t p = 0; p < ctx; p++) {
					double e = exp(s[p] - m);
					l += e;
					for (int64_t i = 0; i < hd; i++) acc[i] += e * vd[(p * Hkv + kh) * hd + i];
				}
				for (int64_t i = 0; i < hd; i++) {
					double e = fabs(acc[i] / l - got[(t * H + h) * hd + i]);
					worst = e > worst ? e : worst;
				}
			}
		cr_expect(worst < 1e-5, "case %d: biased attention off the formula by %g", c, worst);
		if (c == 0) {
			sg_btensor small = tensor(be, SG_TYPE_F32, ctx - 1, H, n);
			sg_attn_params bad = {0, 0, 0, 0, 0, &small, 0};
			cr_expect_eq(be->ops->attention(be, &q, &kc, &vc, &pos, &bad, &out), SG_ERR_INVALID_ARG);
			sg_attn_params ring = {0, 0, 8, 1, 0, &bias, 0};
			cr_expect_eq(be->ops->attention(be, &q, &kc, &vc, &pos, &ring, &out), SG_ERR_INVALID_ARG);
			be->ops->tensor_free(be, &small);
		}
		sg_btensor *all[] = {&kc, &vc, &q, &pos, &bias, &out};
		for (int i = 0; i < 6; i++) be->ops->tensor_free(be, all[i]);
	}
	sg_backend_free(be);
}
