/* Unit tests of src/engine/sampler: parameter validation, greedy, each filter against a
 * double-precision reference written here from the definitions (transformers' warpers), draws
 * against the distribution they come from, penalties against hand-computed values, logit_bias,
 * seeds, log-probabilities, and bad input. */
#include <criterion/criterion.h>

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "engine/sampler.h"
#include "rank_ref.h"

/* ---- helpers ---- */

static uint64_t lcg_state;
static double lcg_u01(void)
{
	lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
	return (double)(lcg_state >> 11) * 0x1.0p-53;
}

/* Logits spread like a language model's: a few strong tokens over a long tail. */
static float *random_logits(int32_t n, uint64_t seed, float scale)
{
	float *l = malloc((size_t)n * sizeof(*l));
	lcg_state = seed;
	for (int32_t i = 0; i < n; i++) {
		double u = lcg_u01();
		l[i] = (float)(scale * (u * u * u) - 3.0 * lcg_u01());
	}
	return l;
}

static sg_sampler *make(sg_sampler_params p, int32_t n)
{
	sg_sampler *s = NULL;
	sg_status st = sg_sampler_create(&p, n, &s);
	cr_assert_eq(st, SG_OK, "create: %s", sg_last_error());
	return s;
}

static sg_sampler_params plain(float temperature, uint64_t seed)
{
	sg_sampler_params p = sg_sampler_default_params();
	p.temperature = temperature;
	p.top_k = 0;
	p.top_p = 1.0f;
	p.min_p = 0.0f;
	p.seed = seed;
	return p;
}

typedef struct {
	double v;
	int32_t id;
} ref_item;

static int cmp_ref(const void *a, const void *b)
{
	const ref_item *x = a, *y = b;
	if (x->v != y->v) return x->v > y->v ? -1 : 1;
	return (x->id > y->id) - (x->id < y->id);
}

/* The reference: transformers' order (temperature, top-k, top-p, min-p) on a full sort in
 * double precision. logits are already adjusted (bias, penalties). */
static void ref_distribution(const float *logits, int32_t n, double T, int32_t k, double top_p, double min_p,
                             double *probs)
{
	ref_item *it = malloc((size_t)n * sizeof(*it));
	for (int32_t i = 0; i < n; i++) it[i] = (ref_item){isnan(logits[i]) ? -INFINITY : logits[i], i};
	qsort(it, (size_t)n, sizeof(*it), cmp_ref);
	memset(probs, 0, (size_t)n * sizeof(*probs));
	if (T == 0) {
		probs[it[0].id] = 1;
		free(it);
		return;
	}
	int32_t keep = (k > 0 && k < n) ? k : n;
	double mx = it[0].v / T, z = 0;
	double *w = malloc((size_t)n * sizeof(*w));
	for (int32_t i = 0; i < keep; i++) z += (w[i] = exp(it[i].v / T - mx));
	if (top_p < 1) {
		double cum = 0;
		int32_t i = 0;
		while (i < keep) {
			cum += w[i] / z;
			i++;
			if (cum >= top_p) break;
		}
		keep = i;
	}
	if (min_p > 0) {
		int32_t i = 0;
		while (i < keep && w[i] >= min_p * w[0]) i++;
		keep = i;
	}
	z = 0;
	for (int32_t i = 0; i < keep; i++) z += w[i];
	for (int32_t i = 0; i < keep; i++) probs[it[i].id] = w[i] / z;
	free(w);
	free(it);
}

static double max_abs_diff(const double *a, const double *b, int32_t n)
{
	double m = 0;
	for (int32_t i = 0; i < n; i++) m = fmax(m, fabs(a[i] - b[i]));
	return m;
}

/* Draws `draws` tokens and returns the chi-square statistic of the counts against probs
 * (over the tokens with probs > 0); *outside counts draws where probs == 0. */
static double draw_chi2(sg_sampler *s, const float *logits, int32_t n, const double *probs, int draws,
                        int *outside, int *df)
{
	int *cnt = calloc((size_t)n, sizeof(*cnt));
	*outside = 0;
	for (int d = 0; d < draws; d++) {
		sg_sample_result r;
		cr_assert_eq(sg_sampler_sample(s, logits, n, &r), SG_OK);
		cr_assert(r.token >= 0 && r.token < n);
		cnt[r.token]++;
	}
	double chi = 0;
	*df = -1;
	for (int32_t i = 0; i < n; i++) {
		if (probs[i] == 0) {
			*outside += cnt[i];
			continue;
		}
		double e = probs[i] * draws;
		chi += (cnt[i] - e) * (cnt[i] - e) / e;
		(*df)++;
	}
	free(cnt);
	return chi;
}

/* Far in the tail of chi-square(df): mean df, sd sqrt(2 df). A wrong distribution over 20,000
 * draws lands hundreds of sds away. */
static double chi2_limit(int df)
{
	return df + 6.0 * sqrt(2.0 * (df > 1 ? df : 1)) + 10.0;
}

/* ---- parameters ---- */

Test(sampler, defaults_are_llama_cpp_values)
{
	sg_sampler_params p = sg_sampler_default_params();
	cr_assert_float_eq(p.temperature, 0.8f, 1e-7);
	cr_assert_eq(p.top_k, 40);
	cr_assert_float_eq(p.top_p, 0.95f, 1e-7);
	cr_assert_float_eq(p.min_p, 0.05f, 1e-7);
	cr_assert_float_eq(p.repetition_penalty, 1.0f, 0);
	cr_assert_eq(p.penalty_last_n, 64);
	cr_assert_eq(p.seed, SG_SAMPLER_SEED_RANDOM);
	sg_sampler *s = make(p, 100);
	cr_assert_neq(sg_sampler_seed(s), SG_SAMPLER_SEED_RANDOM, "a random seed is drawn and reported");
	sg_sampler_free(s);
}

static void expect_reject(sg_sampler_params p, int32_t n, sg_status want, const char *needle)
{
	sg_sampler *s = (sg_sampler *)1;
	sg_status st = sg_sampler_create(&p, n, &s);
	cr_assert_eq(st, want, "expected %d for '%s', got %d (%s)", want, needle, st, sg_last_error());
	cr_assert_null(s);
	cr_assert(strstr(sg_last_error(), needle), "message '%s' lacks '%s'", sg_last_error(), needle);
}

Test(sampler, rejects_out_of_domain_params_naming_them)
{
	sg_sampler_params p;
	p = plain(-0.5f, 1), expect_reject(p, 10, SG_ERR_INVALID_ARG, "temperature = -0.5");
	p = plain(NAN, 1), expect_reject(p, 10, SG_ERR_INVALID_ARG, "temperature = nan");
	p = plain(INFINITY, 1), expect_reject(p, 10, SG_ERR_INVALID_ARG, "temperature = inf");
	p = plain(1, 1), p.top_k = -3, expect_reject(p, 10, SG_ERR_INVALID_ARG, "top_k = -3");
	p = plain(1, 1), p.top_p = 0.0f,
	expect_reject(p, 10, SG_ERR_INVALID_ARG, "top_p = 0 is outside (0, 1]");
	p = plain(1, 1), p.top_p = 1.5f, expect_reject(p, 10, SG_ERR_INVALID_ARG, "top_p = 1.5");
	p = plain(1, 1), p.top_p = -0.1f, expect_reject(p, 10, SG_ERR_INVALID_ARG, "top_p = -0.1");
	p = plain(1, 1), p.top_p = NAN, expect_reject(p, 10, SG_ERR_INVALID_ARG, "top_p = nan");
	p = plain(1, 1), p.min_p = 1.01f, expect_reject(p, 10, SG_ERR_INVALID_ARG, "min_p = 1.01");
	p = plain(1, 1), p.repetition_penalty = 0,
	expect_reject(p, 10, SG_ERR_INVALID_ARG, "repetition_penalty = 0");
	p = plain(1, 1), p.presence_penalty = INFINITY,
	expect_reject(p, 10, SG_ERR_INVALID_ARG, "presence_penalty");
	p = plain(1, 1), p.frequency_penalty = NAN,
	expect_reject(p, 10, SG_ERR_INVALID_ARG, "frequency_penalty");
	p = plain(1, 1), p.penalty_last_n = -2,
	expect_reject(p, 10, SG_ERR_INVALID_ARG, "penalty_last_n = -2");
	p = plain(1, 1), p.top_logprobs = 21, expect_reject(p, 10, SG_ERR_INVALID_ARG, "top_logprobs = 21");
	p = plain(1, 1), expect_reject(p, 0, SG_ERR_INVALID_ARG, "n_vocab = 0");
	sg_logit_bias b[2] = {{3, 1.0f}, {10, 1.0f}};
	p = plain(1, 1), p.logit_bias = b, p.n_logit_bias = 2;
	expect_reject(p, 10, SG_ERR_RANGE, "logit_bias token 10 is outside [0, 10)");
	b[1] = (sg_logit_bias){3, 2.0f};
	expect_reject(p, 10, SG_ERR_INVALID_ARG, "token 3 twice");
	b[1] = (sg_logit_bias){4, NAN};
	expect_reject(p, 10, SG_ERR_INVALID_ARG, "logit_bias for token 4");
}

Test(sampler, wrong_vocab_size_and_bad_token_are_errors)
{
	sg_sampler *s = make(plain(1, 1), 8);
	float l[9] = {0};
	sg_sample_result r;
	cr_assert_eq(sg_sampler_sample(s, l, 9, &r), SG_ERR_INVALID_ARG);
	cr_assert(strstr(sg_last_error(), "9 logits given"));
	cr_assert_eq(sg_sampler_accept(s, 8), SG_ERR_RANGE);
	cr_assert_eq(sg_sampler_accept(s, -1), SG_ERR_RANGE);
	sg_sampler_free(s);
}

/* ---- greedy ---- */

Test(sampler, greedy_is_argmax_with_lowest_id_on_ties)
{
	float l[6] = {1.0f, 3.0f, -2.0f, 3.0f, 2.9f, 3.0f};
	for (uint64_t seed = 1; seed < 4; seed++) {
		sg_sampler *s = make(plain(0, seed), 6);
		for (int i = 0; i < 3; i++) {
			sg_sample_result r;
			cr_assert_eq(sg_sampler_sample(s, l, 6, &r), SG_OK);
			cr_assert_eq(r.token, 1);
		}
		sg_sampler_free(s);
	}
}

Test(sampler, greedy_matches_reference_argmax_on_large_vocab)
{
	int32_t n = 262144;
	float *l = random_logits(n, 7, 20.0f);
	int32_t best = 0;
	for (int32_t i = 1; i < n; i++)
		if (l[i] > l[best]) best = i;
	sg_sampler *s = make(plain(0, 1), n);
	sg_sample_result r;
	cr_assert_eq(sg_sampler_sample(s, l, n, &r), SG_OK);
	cr_assert_eq(r.token, best);
	sg_sampler_free(s);
	free(l);
}

Test(sampler, greedy_treats_nan_as_banned_and_inf_as_largest)
{
	float l[6] = {NAN, 5.0f, INFINITY, NAN, INFINITY, -INFINITY};
	sg_sampler *s = make(plain(0, 1), 6);
	sg_sample_result r;
	cr_assert_eq(sg_sampler_sample(s, l, 6, &r), SG_OK);
	cr_assert_eq(r.token, 2, "two +inf tie, the lower id wins");
	float m[3] = {NAN, -INFINITY, NAN};
	sg_sampler_free(s);
	s = make(plain(0, 1), 3);
	cr_assert_eq(sg_sampler_sample(s, m, 3, &r), SG_ERR_INVALID_ARG);
	cr_assert(strstr(sg_last_error(), "every token is banned"), "%s", sg_last_error());
	sg_sampler_free(s);
}

/* ---- filters against the reference, and draws against the distribution ---- */

static void check_filter(sg_sampler_params p, int32_t n, uint64_t lseed, float scale, int draws)
{
	float *l = random_logits(n, lseed, scale);
	double *ref = malloc((size_t)n * sizeof(*ref)), *got = malloc((size_t)n * sizeof(*got));
	ref_distribution(l, n, p.temperature, p.top_k, p.top_p, p.min_p, ref);
	sg_sampler *s = make(p, n);
	cr_assert_eq(sg_sampler_distribution(s, l, n, got), SG_OK);
	double diff = max_abs_diff(ref, got, n);
	cr_assert_lt(diff, 2e-6, "T=%g k=%d p=%g min_p=%g: distribution differs by %g", (double)p.temperature,
	             p.top_k, (double)p.top_p, (double)p.min_p, diff);
	for (int32_t i = 0; i < n; i++)
		cr_assert_eq(ref[i] == 0, got[i] == 0, "token %d kept by one side only (ref %g, got %g)", i,
		             ref[i], got[i]);
	if (draws) {
		int outside, df;
		double chi = draw_chi2(s, l, n, ref, draws, &outside, &df);
		cr_assert_eq(outside, 0, "%d draws outside the kept set", outside);
		cr_assert_lt(chi, chi2_limit(df), "chi2 %g with %d df", chi, df);
	}
	sg_sampler_free(s);
	free(l);
	free(ref);
	free(got);
}

Test(sampler, top_k_draws_only_the_k_best_at_their_renormalised_frequencies)
{
	sg_sampler_params p = plain(1.0f, 11);
	p.top_k = 5;
	check_filter(p, 50, 3, 6.0f, 20000);
}

Test(sampler, top_p_draws_only_inside_the_nucleus)
{
	sg_sampler_params p = plain(1.0f, 12);
	p.top_p = 0.7f;
	check_filter(p, 40, 4, 6.0f, 20000);
}

Test(sampler, min_p_drops_tokens_below_the_threshold)
{
	sg_sampler_params p = plain(1.0f, 13);
	p.min_p = 0.1f;
	check_filter(p, 40, 5, 6.0f, 20000);
}

Test(sampler, temperature_only_matches_softmax_of_scaled_logits)
{
	sg_sampler_params p = plain(1.0f, 14);
	check_filter(p, 30, 6, 4.0f, 20000);
	p.temperature = 0.5f;
	check_filter(p, 30, 6, 4.0f, 20000);
	p.temperature = 2.0f;
	check_filter(p, 30, 6, 4.0f, 20000);
}

Test(sampler, all_filters_together_follow_transformers_order)
{
	sg_sampler_params p = plain(0.7f, 15);
	p.top_k = 12;
	p.top_p = 0.8f;
	p.min_p = 0.02f;
	check_filter(p, 64, 8, 5.0f, 20000);
	p.temperature = 1.6f;
	check_filter(p, 64, 9, 5.0f, 20000);
}

Test(sampler, top_p_measures_mass_before_min_p_removes_the_tail)
{
	/* probabilities .30 .25 .20 .15 and twenty of .005: min_p 0.1 cuts the tail (.005 < .03).
	 * top_p 0.6 over the whole distribution needs three tokens (.30 + .25 = .55 < .6); measured
	 * after min_p had renormalised (target .6 * .9 = .54) it would keep two. */
	float l[24];
	double pr[4] = {0.30, 0.25, 0.20, 0.15};
	for (int i = 0; i < 24; i++) l[i] = (float)log(i < 4 ? pr[i] : 0.005);
	sg_sampler_params p = plain(1.0f, 1);
	p.top_p = 0.6f;
	p.min_p = 0.1f;
	sg_sampler *s = make(p, 24);
	double got[24];
	cr_assert_eq(sg_sampler_distribution(s, l, 24, got), SG_OK);
	for (int i = 0; i < 24; i++) cr_assert_eq(got[i] > 0, i < 3, "token %d: %g", i, got[i]);
	cr_assert_float_eq(got[0], 0.40, 1e-6);
	sg_sampler_free(s);
}

Test(sampler, filters_on_a_262k_vocabulary_match_a_full_sort)
{
	sg_sampler_params p = plain(0.8f, 16);
	p.top_k = 40;
	p.top_p = 0.95f;
	p.min_p = 0.05f;
	check_filter(p, 262144, 10, 25.0f, 0);
	p = plain(1.0f, 16);
	p.top_p = 0.9f;
	check_filter(p, 262144, 11, 25.0f, 0);
	p = plain(1.0f, 16);
	p.top_k = 100000;
	check_filter(p, 262144, 12, 25.0f, 0);
}

Test(sampler, temperature_sharpens_and_flattens_measured_by_draws)
{
	int32_t n = 8;
	float l[8] = {2.0f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, -1.5f, -2.0f};
	double T[3] = {0.5, 1.0, 2.0}, freq[3];
	for (int t = 0; t < 3; t++) {
		sg_sampler *s = make(plain((float)T[t], 21), n);
		int top = 0;
		for (int d = 0; d < 20000; d++) {
			sg_sample_result r;
			cr_assert_eq(sg_sampler_sample(s, l, n, &r), SG_OK);
			top += r.token == 0;
		}
		freq[t] = top / 20000.0;
		double z = 0;
		for (int i = 0; i < n; i++) z += exp(l[i] / T[t]);
		double want = exp(l[0] / T[t]) / z;
		cr_assert_lt(fabs(freq[t] - want), 4 * sqrt(want * (1 - want) / 20000),
		             "T=%g: top token drawn %g, expected %g", T[t], freq[t], want);
		sg_sampler_free(s);
	}
	cr_assert_gt(freq[0], freq[1] + 0.1);
	cr_assert_gt(freq[1], freq[2] + 0.1);
}

Test(sampler, extreme_temperatures_stay_finite)
{
	float l[6] = {1.0f, 3.0f, -2.0f, 3.0f, -INFINITY, 0.5f};
	double got[6];
	sg_sampler *s = make(plain(1e-40f, 1), 6); /* a subnormal: 1/T overflows */
	cr_assert_eq(sg_sampler_distribution(s, l, 6, got), SG_OK);
	cr_assert_float_eq(got[1], 0.5, 1e-12, "the two best share: %g", got[1]);
	cr_assert_float_eq(got[3], 0.5, 1e-12);
	sg_sampler_free(s);
	s = make(plain(1e30f, 1), 6);
	cr_assert_eq(sg_sampler_distribution(s, l, 6, got), SG_OK);
	for (int i = 0; i < 6; i++) cr_assert_float_eq(got[i], i == 4 ? 0.0 : 0.2, 1e-6, "token %d", i);
	sg_sampler_free(s);
}

Test(sampler, ties_in_top_k_and_top_p_keep_lowest_ids)
{
	int32_t n = 262144;
	float *l = calloc((size_t)n, sizeof(*l));
	double *got = malloc((size_t)n * sizeof(*got));
	sg_sampler_params p = plain(1.0f, 1);
	p.top_k = 1000;
	sg_sampler *s = make(p, n);
	cr_assert_eq(sg_sampler_distribution(s, l, n, got), SG_OK);
	for (int32_t i = 0; i < n; i++) cr_assert_eq(got[i] > 0, i < 1000, "token %d", i);
	sg_sampler_free(s);
	p = plain(1.0f, 1);
	p.top_p = 0.25f;
	s = make(p, n);
	cr_assert_eq(sg_sampler_distribution(s, l, n, got), SG_OK);
	for (int32_t i = 0; i < n; i++) cr_assert_eq(got[i] > 0, i < n / 4, "token %d", i);
	sg_sampler_free(s);
	free(l);
	free(got);
}

Test(sampler, top_k_on_sorted_logits_picks_the_right_end)
{
	/* Ascending logits make every token a new best: the heap's worst case. */
	int32_t n = 100000;
	float *l = malloc((size_t)n * sizeof(*l));
	double *got = malloc((size_t)n * sizeof(*got)), *ref = malloc((size_t)n * sizeof(*ref));
	for (int dir = 0; dir < 2; dir++) {
		for (int32_t i = 0; i < n; i++) l[i] = (float)(dir ? n - i : i) * 1e-3f;
		int32_t ks[2] = {40, 5000}; /* the heap and the radix selection */
		for (int j = 0; j < 2; j++) {
			sg_sampler_params p = plain(1.0f, 1);
			p.top_k = ks[j];
			sg_sampler *s = make(p, n);
			cr_assert_eq(sg_sampler_distribution(s, l, n, got), SG_OK);
			ref_distribution(l, n, 1.0, ks[j], 1.0, 0.0, ref);
			cr_assert_lt(max_abs_diff(got, ref, n), 1e-6, "dir %d k %d", dir, ks[j]);
			for (int32_t i = 0; i < n; i++)
				cr_assert_eq(got[i] > 0, dir ? i < ks[j] : i >= n - ks[j],
				             "dir %d k %d token %d", dir, ks[j], i);
			sg_sampler_free(s);
		}
	}
	free(l);
	free(got);
	free(ref);
}

Test(sampler, sampling_never_draws_nan_and_splits_inf_evenly)
{
	float l[5] = {NAN, INFINITY, 3.0f, INFINITY, NAN};
	sg_sampler *s = make(plain(1.0f, 5), 5);
	int cnt[5] = {0};
	for (int d = 0; d < 20000; d++) {
		sg_sample_result r;
		cr_assert_eq(sg_sampler_sample(s, l, 5, &r), SG_OK);
		cnt[r.token]++;
	}
	cr_assert_eq(cnt[0] + cnt[2] + cnt[4], 0);
	cr_assert_lt(abs(cnt[1] - 10000), 4 * 71, "inf tokens drawn %d / %d", cnt[1], cnt[3]);
	float m[5] = {NAN, NAN, -INFINITY, NAN, -INFINITY};
	sg_sample_result r;
	cr_assert_eq(sg_sampler_sample(s, m, 5, &r), SG_ERR_INVALID_ARG);
	sg_sampler_free(s);
}

Test(sampler, arbitrary_bit_patterns_never_crash_or_pick_a_banned_token)
{
	int32_t n = 777;
	float *l = malloc((size_t)n * sizeof(*l));
	double *probs = malloc((size_t)n * sizeof(*probs));
	lcg_state = 2024;
	for (int trial = 0; trial < 300; trial++) {
		for (int32_t i = 0; i < n; i++) {
			uint32_t bits = (uint32_t)(lcg_u01() * 4294967296.0);
			if (trial % 3 == 0) bits |= 0x7f800000u; /* many inf and NaN */
			memcpy(&l[i], &bits, sizeof(bits));
		}
		sg_sampler_params p = plain((float)(trial % 4) * 0.7f, (uint64_t)trial);
		p.top_k = trial % 5 == 0 ? 0 : trial % 50;
		p.top_p = trial % 2 ? 0.5f : 1.0f;
		p.min_p = trial % 7 == 0 ? 0.2f : 0.0f;
		p.repetition_penalty = 1.3f;
		p.frequency_penalty = trial % 2 ? 1e30f : -0.5f;
		p.logprobs = trial % 2;
		p.top_logprobs = 20;
		sg_sampler *s = make(p, n);
		for (int t = 0; t < 4; t++) {
			sg_sample_result r;
			sg_status st = sg_sampler_sample(s, l, n, &r);
			if (st != SG_OK) {
				cr_assert_eq(st, SG_ERR_INVALID_ARG);
				break;
			}
			cr_assert(r.token >= 0 && r.token < n);
			cr_assert(!isnan(l[r.token]) && l[r.token] != -INFINITY,
			          "trial %d: drew a banned logit", trial);
			if (p.logprobs)
				cr_assert(!isnan(r.logprob) && r.logprob <= 0.0f, "logprob %g", r.logprob);
			cr_assert_eq(sg_sampler_distribution(s, l, n, probs), SG_OK);
			double sum = 0;
			for (int32_t i = 0; i < n; i++) {
				cr_assert(probs[i] >= 0 && probs[i] <= 1, "p[%d] = %g", i, probs[i]);
				sum += probs[i];
			}
			cr_assert_float_eq(sum, 1.0, 1e-9);
			sg_sampler_accept(s, r.token);
		}
		sg_sampler_free(s);
	}
	free(l);
	free(probs);
}

/* ---- penalties and bias ---- */

Test(sampler, penalties_transform_logits_exactly_as_defined)
{
	float l[6] = {2.0f, 1.5f, -1.0f, 0.0f, 3.0f, -2.0f};
	sg_logit_bias b[2] = {{0, 0.5f}, {5, -1.0f}};
	sg_sampler_params p = plain(1.0f, 1);
	p.repetition_penalty = 1.25f;
	p.presence_penalty = 0.5f;
	p.frequency_penalty = 0.25f;
	p.penalty_last_n = -1;
	p.logit_bias = b;
	p.n_logit_bias = 2;
	sg_sampler *s = make(p, 6);
	int32_t hist[] = {1, 1, 2, 3, 1, 5};
	for (size_t i = 0; i < sizeof(hist) / sizeof(hist[0]); i++)
		cr_assert_eq(sg_sampler_accept(s, hist[i]), SG_OK);
	float got[6];
	cr_assert_eq(sg_sampler_adjusted_logits(s, l, 6, got), SG_OK);
	/* By hand: bias first, then repetition (positive / 1.25, negative * 1.25), then
	 * OpenAI's count * frequency + presence. Counts: 1 -> 3, 2 -> 1, 3 -> 1, 5 -> 1. */
	float want[6] = {
	    2.5f,                                  /* 2 + 0.5, never seen */
	    1.5f / 1.25f - 3 * 0.25f - 0.5f,       /* 1.2 - 0.75 - 0.5 = -0.05 */
	    -1.0f * 1.25f - 0.25f - 0.5f,          /* -2.0 */
	    0.0f - 0.25f - 0.5f,                   /* zero stays zero under the repetition penalty */
	    3.0f,                                  /* never seen */
	    (-2.0f - 1.0f) * 1.25f - 0.25f - 0.5f, /* bias then penalty: -4.5 */
	};
	for (int i = 0; i < 6; i++)
		cr_assert_float_eq(got[i], want[i], 1e-6, "token %d: %g vs %g", i, got[i], want[i]);
	sg_sampler_free(s);
}

Test(sampler, penalty_window_keeps_only_the_last_n_tokens)
{
	float l[5] = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
	sg_sampler_params p = plain(1.0f, 1);
	p.repetition_penalty = 2.0f;
	p.penalty_last_n = 3;
	sg_sampler *s = make(p, 5);
	int32_t hist[] = {0, 1, 2, 3, 3};
	for (int i = 0; i < 5; i++) sg_sampler_accept(s, hist[i]);
	float got[5];
	sg_sampler_adjusted_logits(s, l, 5, got);
	float want[5] = {1.0f, 1.0f, 0.5f, 0.5f, 1.0f}; /* window: 2, 3, 3 */
	for (int i = 0; i < 5; i++) cr_assert_float_eq(got[i], want[i], 0, "token %d", i);
	sg_sampler_reset(s);
	sg_sampler_adjusted_logits(s, l, 5, got);
	for (int i = 0; i < 5; i++) cr_assert_float_eq(got[i], 1.0f, 0, "reset clears the window");
	sg_sampler_free(s);
}

Test(sampler, repetition_penalty_steers_greedy_away_from_a_repeat)
{
	float l[3] = {2.0f, 1.9f, 0.0f};
	sg_sampler_params p = plain(0, 1);
	p.repetition_penalty = 1.1f;
	sg_sampler *s = make(p, 3);
	sg_sample_result r;
	sg_sampler_sample(s, l, 3, &r);
	cr_assert_eq(r.token, 0);
	sg_sampler_accept(s, 0);
	sg_sampler_sample(s, l, 3, &r);
	cr_assert_eq(r.token, 1, "2.0 / 1.1 = 1.82 < 1.9");
	sg_sampler_free(s);
}

Test(sampler, logit_bias_minus_100_bans_and_positive_bias_shifts_exactly)
{
	float l[10] = {5, 4, 3, 2, 1, 0, -1, -2, -3, -4};
	sg_logit_bias b[2] = {{0, -100.0f}, {9, 6.0f}};
	sg_sampler_params p = plain(1.0f, 31);
	p.logit_bias = b;
	p.n_logit_bias = 2;
	sg_sampler *s = make(p, 10);
	float adj[10];
	memcpy(adj, l, sizeof(adj));
	adj[0] = -INFINITY;
	adj[9] = 2.0f;
	double ref[10], got[10];
	ref_distribution(adj, 10, 1.0, 0, 1.0, 0.0, ref);
	cr_assert_eq(sg_sampler_distribution(s, l, 10, got), SG_OK);
	cr_assert_lt(max_abs_diff(ref, got, 10), 1e-6);
	int outside, df;
	double chi = draw_chi2(s, l, 10, ref, 20000, &outside, &df);
	cr_assert_eq(outside, 0, "the banned token was drawn %d times", outside);
	cr_assert_lt(chi, chi2_limit(df));
	sg_sampler_free(s);

	p.temperature = 0;
	s = make(p, 10);
	sg_sample_result r;
	sg_sampler_sample(s, l, 10, &r);
	cr_assert_eq(r.token, 1, "greedy skips the banned best token");
	sg_sampler_free(s);
}

Test(sampler, banning_every_token_is_an_error_not_a_crash)
{
	sg_logit_bias b[4] = {{0, -100}, {1, -INFINITY}, {2, -150}, {3, -100}};
	float l[4] = {1, 2, 3, 4};
	for (int greedy = 0; greedy < 2; greedy++) {
		sg_sampler_params p = plain(greedy ? 0.0f : 1.0f, 1);
		p.logit_bias = b;
		p.n_logit_bias = 4;
		sg_sampler *s = make(p, 4);
		sg_sample_result r;
		cr_assert_eq(sg_sampler_sample(s, l, 4, &r), SG_ERR_INVALID_ARG);
		cr_assert(strstr(sg_last_error(), "every token is banned"));
		double probs[4];
		cr_assert_eq(sg_sampler_distribution(s, l, 4, probs), SG_ERR_INVALID_ARG);
		sg_sampler_free(s);
	}
}

/* ---- seeds ---- */

static void draw_sequence(uint64_t seed, int n, int32_t *out)
{
	int32_t v = 1000;
	float *l = random_logits(v, 99, 5.0f);
	sg_sampler_params p = sg_sampler_default_params();
	p.seed = seed;
	p.top_k = 0; /* a wide distribution, so that sequences from different seeds differ */
	p.min_p = 0;
	sg_sampler *s = make(p, v);
	for (int i = 0; i < n; i++) {
		sg_sample_result r;
		cr_assert_eq(sg_sampler_sample(s, l, v, &r), SG_OK);
		out[i] = r.token;
		l[r.token] -= 0.5f; /* the logits change along the way, as in generation */
	}
	sg_sampler_free(s);
	free(l);
}

Test(sampler, same_seed_same_tokens_different_seed_different_tokens)
{
	int32_t a[500], b[500], c[500];
	draw_sequence(42, 500, a);
	draw_sequence(42, 500, b);
	draw_sequence(43, 500, c);
	cr_assert_eq(memcmp(a, b, sizeof(a)), 0);
	int same = 0;
	for (int i = 0; i < 500; i++) same += a[i] == c[i];
	cr_assert_lt(same, 100, "seeds 42 and 43 agree on %d of 500 tokens", same);
}

Test(sampler, reset_replays_the_sequence)
{
	float *l = random_logits(300, 5, 4.0f);
	sg_sampler *s = make(plain(1.0f, 7), 300);
	int32_t a[100], b[100];
	sg_sample_result r;
	for (int i = 0; i < 100; i++) sg_sampler_sample(s, l, 300, &r), a[i] = r.token;
	sg_sampler_reset(s);
	for (int i = 0; i < 100; i++) sg_sampler_sample(s, l, 300, &r), b[i] = r.token;
	cr_assert_eq(memcmp(a, b, sizeof(a)), 0);
	sg_sampler_free(s);
	free(l);
}

typedef struct {
	uint64_t seed;
	int32_t toks[300];
} thread_job;

static void *thread_draw(void *arg)
{
	thread_job *j = arg;
	draw_sequence(j->seed, 300, j->toks);
	return NULL;
}

Test(sampler, samplers_on_several_threads_give_the_single_thread_sequence)
{
	int32_t solo[300];
	draw_sequence(9, 300, solo);
	thread_job jobs[4];
	pthread_t t[4];
	for (int i = 0; i < 4; i++) jobs[i].seed = 9, pthread_create(&t[i], NULL, thread_draw, &jobs[i]);
	for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
	for (int i = 0; i < 4; i++) cr_assert_eq(memcmp(jobs[i].toks, solo, sizeof(solo)), 0, "thread %d", i);
}

/* ---- log-probabilities ---- */

static void check_logprobs(sg_logprobs_mode mode, float temperature)
{
	int32_t n = 262144;
	float *l = random_logits(n, 77, 30.0f);
	l[5] = NAN;
	l[6] = -INFINITY;
	sg_logit_bias b[1] = {{123, 4.0f}};
	sg_sampler_params p = plain(temperature, 3);
	p.top_k = 40;
	p.logit_bias = b;
	p.n_logit_bias = 1;
	p.logprobs = 1;
	p.top_logprobs = 20;
	p.logprobs_mode = mode;
	sg_sampler *s = make(p, n);
	sg_sample_result r;
	cr_assert_eq(sg_sampler_sample(s, l, n, &r), SG_OK);

	/* The reference: log-softmax in double of the logits the mode names. */
	double *x = malloc((size_t)n * sizeof(*x)), mx = -INFINITY, z = 0;
	for (int32_t i = 0; i < n; i++) {
		x[i] = isnan(l[i]) ? -INFINITY : l[i];
		if (mode == SG_LOGPROBS_PROCESSED && i == 123) x[i] += 4.0;
		mx = fmax(mx, x[i]);
	}
	for (int32_t i = 0; i < n; i++) z += exp(x[i] - mx);
	double lse = mx + log(z);
	cr_assert_float_eq(r.logprob, x[r.token] - lse, 1e-5, "chosen %d: %g vs %g", r.token, r.logprob,
	                   x[r.token] - lse);
	cr_assert_eq(r.n_top, 20);
	ref_item *it = malloc((size_t)n * sizeof(*it));
	for (int32_t i = 0; i < n; i++) it[i] = (ref_item){x[i], i};
	qsort(it, (size_t)n, sizeof(*it), cmp_ref);
	for (int k = 0; k < 20; k++) {
		cr_assert_eq(r.top[k].token, it[k].id, "rank %d", k);
		cr_assert_float_eq(r.top[k].logprob, it[k].v - lse, 1e-5, "rank %d", k);
	}
	sg_sampler_free(s);
	free(it);
	free(x);
	free(l);
}

Test(sampler, logprobs_match_a_double_log_softmax)
{
	check_logprobs(SG_LOGPROBS_PROCESSED, 0.7f);
	check_logprobs(SG_LOGPROBS_RAW, 0.7f);
	check_logprobs(SG_LOGPROBS_PROCESSED, 0.0f);
}

Test(sampler, logprobs_of_a_small_vocab_sum_to_one)
{
	float l[20];
	for (int i = 0; i < 20; i++) l[i] = (float)(i % 7) * 0.9f - 2.0f;
	sg_sampler_params p = plain(1.0f, 3);
	p.logprobs = 1;
	p.top_logprobs = 20;
	sg_sampler *s = make(p, 20);
	sg_sample_result r;
	cr_assert_eq(sg_sampler_sample(s, l, 20, &r), SG_OK);
	double sum = 0;
	for (int k = 0; k < r.n_top; k++) {
		sum += exp(r.top[k].logprob);
		if (k) {
			cr_assert_geq(r.top[k - 1].logprob, r.top[k].logprob);
			if (r.top[k - 1].logprob == r.top[k].logprob)
				cr_assert_lt(r.top[k - 1].token, r.top[k].token);
		}
	}
	cr_assert_eq(r.n_top, 20);
	cr_assert_float_eq(sum, 1.0, 1e-5);
	sg_sampler_free(s);
}

Test(sampler, top_logprobs_skip_banned_tokens)
{
	float l[4] = {1, NAN, 2, -INFINITY};
	sg_sampler_params p = plain(0.0f, 3);
	p.logprobs = 1;
	p.top_logprobs = 4;
	sg_sampler *s = make(p, 4);
	sg_sample_result r;
	cr_assert_eq(sg_sampler_sample(s, l, 4, &r), SG_OK);
	cr_assert_eq(r.token, 2);
	cr_assert_eq(r.n_top, 2);
	cr_assert_eq(r.top[0].token, 2);
	cr_assert_eq(r.top[1].token, 0);
	sg_sampler_free(s);
}

Test(sampler, failed_allocations_are_reported_not_crashed)
{
	sg_sampler_params p = plain(1.0f, 1);
	p.repetition_penalty = 1.2f;
	for (long k = 0; k < 8; k++) {
		sg_alloc_fail_after(k);
		sg_sampler *s = NULL;
		sg_status st = sg_sampler_create(&p, 1000, &s);
		sg_alloc_fail_after(-1);
		if (st == SG_OK) {
			sg_sampler_free(s);
			break;
		}
		cr_assert_eq(st, SG_ERR_NOMEM);
		cr_assert_null(s);
	}
}

/* ---- candidate rows (sg_sampler_top_request / sg_sampler_sample_top) ---- */

/* What a backend hands over for a request: the k best of l (in reverse rank order, to show the
 * order does not matter) and l at ids. */
static void candidates_of(const float *l, int32_t n, int32_t k, const int32_t *ids, int32_t m, int32_t *tid, float *tv,
			  float *gv)
{
	int32_t *ord = malloc((size_t)n * sizeof(*ord));
	rank_order(l, n, ord);
	for (int32_t i = 0; i < k; i++) tid[i] = ord[k - 1 - i], tv[i] = l[ord[k - 1 - i]];
	for (int32_t i = 0; i < m; i++) gv[i] = ids[i] >= 0 ? l[ids[i]] : NAN;
	free(ord);
}

/* Every sampler setting a request accepts gives, token for token over a generation (penalty
 * window, RNG and all), what sampling the full row gives; logits with ties, NaN, +-inf and -0. */
Test(sampler, candidate_rows_give_the_full_rows_tokens)
{
	enum { V = 6000, STEPS = 40 };
	sg_logit_bias bias[] = {{7, 3.0f}, {11, -100.0f}, {13, 25.0f}, {5000, -2.0f}};
	for (int cfg = 0; cfg < 9; cfg++) {
		sg_sampler_params p = sg_sampler_default_params();
		p.seed = 1000 + (uint64_t)cfg;
		if (cfg == 1) p.temperature = 1.5f, p.top_k = 5;
		if (cfg == 2) p.top_k = 300, p.top_p = 0.5f, p.min_p = 0.0f;
		if (cfg == 3) p.top_k = 64, p.top_p = 1.0f, p.min_p = 0.3f, p.temperature = 2.0f;
		if (cfg == 4) p.repetition_penalty = 1.4f, p.presence_penalty = 0.7f, p.frequency_penalty = 0.4f, p.penalty_last_n = 16;
		if (cfg == 5) p.logit_bias = bias, p.n_logit_bias = 4, p.repetition_penalty = 0.7f;
		if (cfg == 6) p.temperature = 0.0f, p.repetition_penalty = 1.5f, p.penalty_last_n = 8;
		if (cfg == 7) p.temperature = 0.0f, p.logit_bias = bias, p.n_logit_bias = 4;
		if (cfg == 8) p.top_k = 1, p.presence_penalty = -1.5f;
		sg_sampler *full = make(p, V), *top = make(p, V);
		float *base = random_logits(V, 77 + (uint64_t)cfg, 30.0f);
		for (int32_t i = 0; i < V; i++) base[i] = roundf(base[i] * 4.0f) / 4.0f; /* ties */
		base[3] = NAN, base[4] = INFINITY, base[9] = -INFINITY, base[10] = -0.0f, base[12] = 0.0f;
		if (cfg == 6) base[4] = 0.5f;
		float l[V];
		int32_t ids[SG_SAMPLER_TOP_MAX_IDS], tid[V];
		float tv[V], gv[SG_SAMPLER_TOP_MAX_IDS];
		for (int step = 0; step < STEPS; step++) {
			/* the same strong tokens come back, so the penalties and the window matter */
			lcg_state = 31 * (uint64_t)step + (uint64_t)cfg;
			for (int32_t i = 0; i < V; i++) l[i] = base[i] + (float)(0.25 * floor(4.0 * lcg_u01()));
			int32_t k = 0, m = 0;
			cr_assert(sg_sampler_top_request(top, &k, ids, SG_SAMPLER_TOP_MAX_IDS, &m), "cfg %d", cfg);
			cr_assert(k >= 1 && k < V && m >= 0, "cfg %d: k %d m %d", cfg, k, m);
			candidates_of(l, V, k, ids, m, tid, tv, gv);
			sg_sample_result a, b;
			cr_assert_eq(sg_sampler_sample(full, l, V, &a), SG_OK, "%s", sg_last_error());
			cr_assert_eq(sg_sampler_sample_top(top, tid, tv, k, ids, gv, m, &b), SG_OK, "%s", sg_last_error());
			cr_assert_eq(b.token, a.token, "cfg %d step %d: %d from candidates, %d from the row", cfg, step, b.token,
				     a.token);
			cr_assert_eq(sg_sampler_accept(full, a.token), SG_OK);
			cr_assert_eq(sg_sampler_accept(top, b.token), SG_OK);
		}
		free(base);
		sg_sampler_free(full);
		sg_sampler_free(top);
	}
}

/* Settings whose draw depends on the whole row ask for it; a candidate row the sampler cannot use
 * is refused, not guessed from. */
Test(sampler, candidate_rows_are_refused_where_the_row_matters)
{
	enum { V = 1000 };
	int32_t k, m, ids[SG_SAMPLER_TOP_MAX_IDS];
	sg_sampler_params p = sg_sampler_default_params();
	p.seed = 1;
	sg_sampler *s = make(p, V);
	cr_assert(sg_sampler_top_request(s, &k, ids, SG_SAMPLER_TOP_MAX_IDS, &m));
	cr_assert_eq(k, 40);
	cr_assert_eq(m, 0);
	int32_t tid[2] = {1, 5000};
	float tv[2] = {1.0f, 2.0f};
	sg_sample_result r;
	cr_assert_eq(sg_sampler_sample_top(s, tid, tv, 2, NULL, NULL, 0, &r), SG_ERR_RANGE);
	float nanv[1] = {NAN};
	cr_assert_eq(sg_sampler_sample_top(s, tid, nanv, 1, NULL, NULL, 0, &r), SG_ERR_INVALID_ARG); /* all banned */
	cr_assert_eq(sg_sampler_sample_top(s, tid, tv, 0, NULL, NULL, 0, &r), SG_ERR_INVALID_ARG);
	sg_sampler_free(s);
	for (int cfg = 0; cfg < 4; cfg++) {
		p = sg_sampler_default_params();
		p.seed = 1;
		if (cfg == 0) p.top_k = 0;
		if (cfg == 1) p.logprobs = 1;
		if (cfg == 2) p.repetition_penalty = 1.1f, p.penalty_last_n = -1; /* every token may change */
		if (cfg == 3) p.top_k = 600;
		s = make(p, V);
		cr_assert_not(sg_sampler_top_request(s, &k, ids, SG_SAMPLER_TOP_MAX_IDS, &m), "cfg %d", cfg);
		cr_assert_eq(sg_sampler_sample_top(s, tid, tv, 1, NULL, NULL, 0, &r), cfg == 2 || cfg == 3 ? SG_OK : SG_ERR_INVALID_ARG,
			     "cfg %d", cfg);
		sg_sampler_free(s);
	}
	p = sg_sampler_default_params();
	p.repetition_penalty = 1.1f; /* a window of 64 */
	s = make(p, V);
	cr_assert_not(sg_sampler_top_request(s, &k, ids, 32, &m), "more ids than the caller's room");
	cr_assert(sg_sampler_top_request(s, &k, ids, 64, &m));
	cr_assert_eq(m, 64);
	cr_assert_eq(k, 104);
	cr_assert_eq(ids[0], -1, "an empty window is all padding");
	sg_sampler_free(s);
}

/* A sweep of random settings (temperature, top-k, top-p, min-p, the three penalties and their
 * window, biases and bans, vocabulary sizes, rows with many ties): wherever a request is granted,
 * the candidates give the full row's tokens over a short generation. */
Test(sampler, candidate_rows_agree_over_random_settings)
{
	uint64_t st = 0x5eed;
#define RND() (st = st * 6364136223846793005ull + 1442695040888963407ull, (double)(st >> 11) * 0x1.0p-53)
	int granted = 0;
	for (int cfg = 0; cfg < 150; cfg++) {
		int32_t V = 64 + (int32_t)(RND() * 3000);
		sg_sampler_params p = sg_sampler_default_params();
		p.seed = (uint64_t)cfg * 7919u;
		p.temperature = RND() < 0.15 ? 0.0f : (float)(0.05 + 3.0 * RND());
		p.top_k = 1 + (int32_t)(RND() * (V / 8));
		p.top_p = RND() < 0.5 ? 1.0f : (float)(0.05 + 0.95 * RND());
		p.min_p = RND() < 0.5 ? 0.0f : (float)(0.5 * RND());
		if (RND() < 0.5) p.repetition_penalty = (float)(0.5 + RND());
		if (RND() < 0.3) p.presence_penalty = (float)(4.0 * RND() - 2.0);
		if (RND() < 0.3) p.frequency_penalty = (float)(4.0 * RND() - 2.0);
		p.penalty_last_n = (int32_t)(RND() * 20);
		sg_logit_bias bias[8];
		int nb = (int)(RND() * 8);
		for (int i = 0; i < nb; i++) bias[i] = (sg_logit_bias){(int32_t)(i * (V / 8) + (int32_t)(RND() * (V / 8))), RND() < 0.3 ? -100.0f : (float)(40.0 * RND() - 20.0)};
		p.logit_bias = bias, p.n_logit_bias = (size_t)nb;
		sg_sampler *full = make(p, V), *top = make(p, V);
		float *l = malloc(sizeof(float) * (size_t)V), *tv = malloc(sizeof(float) * (size_t)V), gv[SG_SAMPLER_TOP_MAX_IDS];
		int32_t *tid = malloc(sizeof(int32_t) * (size_t)V), ids[SG_SAMPLER_TOP_MAX_IDS];
		double q = RND() < 0.5 ? 4.0 : 1024.0; /* coarse steps: many ties */
		for (int step = 0; step < 12; step++) {
			for (int32_t i = 0; i < V; i++) l[i] = (float)(round(q * (8.0 * RND() * RND() - 2.0)) / q);
			if (step % 4 == 1) l[(int32_t)(RND() * V)] = NAN;
			int32_t k, m;
			if (!sg_sampler_top_request(top, &k, ids, SG_SAMPLER_TOP_MAX_IDS, &m)) break;
			granted++;
			candidates_of(l, V, k, ids, m, tid, tv, gv);
			sg_sample_result a, b;
			sg_status sa = sg_sampler_sample(full, l, V, &a), sb = sg_sampler_sample_top(top, tid, tv, k, ids, gv, m, &b);
			cr_assert_eq(sb, sa, "cfg %d step %d: status %d from candidates, %d from the row", cfg, step, sb, sa);
			if (sa) break;
			cr_assert_eq(b.token, a.token, "cfg %d step %d (V %d T %g k %d p %g minp %g): %d from candidates, %d from the row", cfg, step, V,
				     (double)p.temperature, p.top_k, (double)p.top_p, (double)p.min_p, b.token, a.token);
			sg_sampler_accept(full, a.token), sg_sampler_accept(top, b.token);
		}
		free(l), free(tv), free(tid);
		sg_sampler_free(full);
		sg_sampler_free(top);
	}
#undef RND
	cr_assert(granted > 1000, "only %d candidate draws were granted", granted);
}
