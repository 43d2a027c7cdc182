/*
 * Sampled speculative decoding keeps the target's distribution: rejection sampling
 * (sg_sampler_sample_spec) against a fixed distribution, and whole generations on the reference
 * fixtures with a draft model that samples its guesses from a different model (q != p), checked
 * by a chi-square goodness-of-fit test of the first tokens' joint distribution against the exact
 * distribution computed from the target's logits.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/flags.h"
#include "engine/draft.h"
#include "engine/generate.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "saragossa.h"

#include "session_model.h"

/* ---- chi-square ---- */

/* ln Gamma(x), x > 0 (Lanczos, g = 7). */
static double lgam(double x)
{
	static const double c[9] = {0.99999999999980993,  676.5203681218851,     -1259.1392167224028,
				    771.32342877765313,   -176.61502916214059,   12.507343278686905,
				    -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7};
	x -= 1.0;
	double a = c[0], t = x + 7.5;
	for (int i = 1; i < 9; i++) a += c[i] / (x + (double)i);
	return 0.5 * log(2.0 * M_PI) + (x + 0.5) * log(t) - t + log(a);
}

/* The upper regularized incomplete gamma Q(a, x): a series below a + 1, else a continued
 * fraction (modified Lentz). */
static double gamma_q(double a, double x)
{
	if (x <= 0.0) return 1.0;
	if (x < a + 1.0) {
		double term = 1.0 / a, sum = term;
		for (int n = 1; n < 1000; n++) {
			term *= x / (a + (double)n);
			sum += term;
			if (fabs(term) < fabs(sum) * 1e-15) break;
		}
		return 1.0 - sum * exp(-x + a * log(x) - lgam(a));
	}
	double b = x + 1.0 - a, c = 1.0 / 1e-300, d = 1.0 / b, h = d;
	for (int i = 1; i < 1000; i++) {
		double an = -(double)i * ((double)i - a);
		b += 2.0;
		d = an * d + b;
		if (fabs(d) < 1e-300) d = 1e-300;
		c = b + an / c;
		if (fabs(c) < 1e-300) c = 1e-300;
		d = 1.0 / d;
		double del = d * c;
		h *= del;
		if (fabs(del - 1.0) < 1e-15) break;
	}
	return exp(-x + a * log(x) - lgam(a)) * h;
}

/* The p-value of observed counts against expected probabilities (bins expecting fewer than 5
 * merged into one); *df its degrees of freedom. Every observation must fall in a bin of
 * positive probability. */
static double chi2_pvalue(const double *prob, const long *obs, int n, long total, int *df)
{
	double x = 0.0, rest_e = 0.0;
	long rest_o = 0;
	int bins = 0;
	for (int i = 0; i < n; i++) {
		if (prob[i] <= 0.0) {
			cr_assert_eq(obs[i], 0, "outcome %d has probability 0 and was drawn %ld times", i, obs[i]);
			continue;
		}
		double e = prob[i] * (double)total;
		if (e < 5.0) {
			rest_e += e;
			rest_o += obs[i];
			continue;
		}
		x += ((double)obs[i] - e) * ((double)obs[i] - e) / e;
		bins++;
	}
	if (rest_e > 0.0) {
		x += ((double)rest_o - rest_e) * ((double)rest_o - rest_e) / rest_e;
		bins++;
	}
	*df = bins - 1;
	return *df > 0 ? gamma_q(0.5 * *df, 0.5 * x) : 1.0;
}

Test(spec_sampled, chi_square_helper_knows_its_quantiles)
{
	/* chi-square quantiles: P(X > 3.841 | df 1) = 0.05, P(X > 124.342 | df 100) = 0.05 */
	cr_assert_float_eq(gamma_q(0.5, 3.841 / 2), 0.05, 1e-3);
	cr_assert_float_eq(gamma_q(50.0, 124.342 / 2), 0.05, 1e-3);
	cr_assert_float_eq(gamma_q(3.0, 0.0), 1.0, 1e-12);
}

/* ---- rejection sampling against a fixed distribution ---- */

Test(spec_sampled, rejection_sampling_keeps_the_distribution_for_any_proposal)
{
	enum { V = 12, N = 40000 };
	float logits[V];
	for (int i = 0; i < V; i++) logits[i] = (float)((i * 7) % 5) * 0.6f - (float)i * 0.1f;
	sg_sampler_params sp = sg_sampler_default_params();
	sp.temperature = 0.9f;
	sp.top_k = 8;
	sp.top_p = 0.97f;
	sp.min_p = 0.0f;
	sp.seed = 77;
	sg_sampler *s = NULL;
	cr_assert_eq(sg_sampler_create(&sp, V, &s), SG_OK);
	double p[V];
	cr_assert_eq(sg_sampler_distribution(s, logits, V, p), SG_OK);
	/* proposals: a point mass on a likely token, one on a filtered token, and a spread q that
	 * puts too much on some tokens and too little on others (and some on filtered ones) */
	float q[V];
	double qs = 0;
	for (int i = 0; i < V; i++) qs += (q[i] = (float)(1 + (i * 5) % 7));
	for (int i = 0; i < V; i++) q[i] = (float)(q[i] / qs);
	int32_t filtered = -1, likely = 0;
	for (int i = 0; i < V; i++) {
		if (p[i] == 0.0 && filtered < 0) filtered = i;
		if (p[i] > p[likely]) likely = i;
	}
	cr_assert_geq(filtered, 0, "the filters left every token");
	struct {
		const char *what;
		int point;
		int32_t guess;
	} cases[] = {{"point mass, likely", 1, likely}, {"point mass, filtered", 1, filtered}, {"spread q", 0, -1}};
	uint64_t rng = 12345;
	for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
		long obs[V] = {0}, kept = 0;
		for (int i = 0; i < N; i++) {
			int32_t g = cases[c].guess;
			if (!cases[c].point) {
				/* draw the guess from q (a generator of the test's own) */
				rng = rng * 6364136223846793005ull + 1442695040888963407ull;
				double u = (double)(rng >> 11) * 0x1.0p-53, acc = 0;
				for (g = 0; g < V - 1; g++)
					if (u < (acc += q[g])) break;
			}
			sg_sample_result r;
			cr_assert_eq(sg_sampler_sample_spec(s, logits, V, g, cases[c].point ? NULL : q, &r), SG_OK);
			obs[r.token]++;
			kept += r.token == g;
		}
		int df;
		double pv = chi2_pvalue(p, obs, V, N, &df);
		cr_assert_gt(pv, 1e-4, "%s: chi-square p-value %g (df %d)", cases[c].what, pv, df);
		if (cases[c].point && cases[c].guess == likely) {
			/* a point mass is kept with probability p(guess) */
			double rate = (double)kept / N;
			cr_assert_lt(fabs(rate - p[likely]), 5 * sqrt(p[likely] * (1 - p[likely]) / N), "kept %g, p %g", rate, p[likely]);
		}
	}
	/* greedy: the argmax, whatever the guess */
	sg_sampler_free(s);
	sp.temperature = 0;
	cr_assert_eq(sg_sampler_create(&sp, V, &s), SG_OK);
	sg_sample_result r;
	cr_assert_eq(sg_sampler_sample_spec(s, logits, V, filtered, NULL, &r), SG_OK);
	cr_assert_eq(r.token, likely);
	cr_assert_eq(sg_sampler_sample_spec(s, logits, V, V, NULL, &r), SG_ERR_INVALID_ARG);
	sg_sampler_free(s);
}

/* ---- whole generations on the fixtures ---- */


enum { K = 3 };
typedef struct toks {
	int32_t t[K];
	int n;
} toks;
static int on_tok(const sg_gen_event *ev, void *user)
{
	toks *r = user;
	if (ev->has_token && r->n < K) r->t[r->n++] = ev->token;
	return 0;
}

static sg_model *load(const char *name)
{
	char path[256];
	snprintf(path, sizeof path, "tests/fixtures/%s", name);
	sg_model_params mp = sg_model_default_params();
	mp.n_threads = 1;
	sg_model *m = NULL;
	cr_assert_eq(sg_model_load(path, &mp, &m), SG_OK, "%s: %s", name, sg_last_error());
	return m;
}

/* The target's sampling: top-k 4, a logit_bias on every id and a presence penalty, which the
 * draft model's guesses do not see (it samples without biases and penalties): q differs from p
 * and the correction has work to do. */
static sg_logit_bias bias[320];

static sg_sampler_params sparams(uint64_t seed)
{
	for (int i = 0; i < 320; i++) bias[i] = (sg_logit_bias){i, (float)((i * 37) % 7 - 3) * 0.2f};
	sg_sampler_params sp = sg_sampler_default_params();
	sp.temperature = 1.0f;
	sp.top_k = 4;
	sp.top_p = 1.0f;
	sp.min_p = 0.0f;
	sp.presence_penalty = 1.0f;
	sp.logit_bias = bias;
	sp.n_logit_bias = 320;
	sp.seed = seed;
	return sp;
}

/* The joint distribution of the first K tokens under plain sampling, exactly: top-k 4 gives
 * 4^K outcomes, numbered by the ranks (ascending id) of their tokens, r0 + 4 r1 + 16 r2; the
 * probability of each is the product of the target's probabilities along its path. */
enum { NOUT = 64 };
typedef struct tree {
	sg_session *s;
	sg_sampler *smp;
	int V;
	double joint[NOUT];
	int32_t out[NOUT][K];
} tree;

static void walk(tree *tr, int32_t *seq, int len, int depth, int o, int mult, double prob)
{
	if (depth == K) {
		tr->joint[o] = prob;
		memcpy(tr->out[o], seq + len - K, sizeof(int32_t) * K);
		return;
	}
	double *p = malloc(sizeof(double) * (size_t)tr->V);
	sg_session_reset(tr->s);
	cr_assert_eq(sg_session_eval(tr->s, seq, len, NULL), SG_OK);
	/* the penalty window: the tokens generated so far */
	sg_sampler_reset(tr->smp);
	for (int i = 0; i < depth; i++) cr_assert_eq(sg_sampler_accept(tr->smp, seq[len - depth + i]), SG_OK);
	cr_assert_eq(sg_sampler_distribution(tr->smp, sg_session_logits(tr->s), tr->V, p), SG_OK);
	int r = 0;
	for (int32_t t = 0; t < tr->V; t++) {
		if (p[t] <= 0) continue;
		cr_assert_lt(r, 4);
		seq[len] = t;
		walk(tr, seq, len + 1, depth + 1, o + r * mult, mult * 4, prob * p[t]);
		r++;
	}
	cr_assert_eq(r, 4, "a step with %d tokens of probability > 0", r);
	free(p);
}

static void exact_joint(sg_model *m, const int32_t *prompt, int np, tree *tr)
{
	tr->V = sg_model_n_vocab(m);
	sg_session_params ssp = sg_session_default_params();
	ssp.n_ctx = 64;
	cr_assert_eq(sg_session_new(m, &ssp, &tr->s), SG_OK);
	sg_sampler_params sp = sparams(1);
	cr_assert_eq(sg_sampler_create(&sp, tr->V, &tr->smp), SG_OK);
	int32_t seq[64];
	memcpy(seq, prompt, sizeof(int32_t) * (size_t)np);
	walk(tr, seq, np, 0, 0, 1, 1.0);
	sg_sampler_free(tr->smp);
	sg_session_free(tr->s);
}

static int outcome(const tree *tr, const int32_t *t)
{
	for (int o = 0; o < NOUT; o++)
		if (!memcmp(tr->out[o], t, sizeof(int32_t) * K)) return o;
	return -1;
}

/* RUNS generations of K tokens with seeds 1..RUNS: the chi-square p-value of their first tokens
 * against the exact joint; *kept and *drafted: the guesses over all runs. */
static double sampled_pvalue(sg_model *target, const tree *tr, const int32_t *prompt, size_t np, const sg_gen_drafter *dr,
			     int runs, size_t *kept, size_t *drafted)
{
	int V = sg_model_n_vocab(target);
	sg_session *s = NULL;
	sg_session_params ssp = sg_session_default_params();
	ssp.n_ctx = 64;
	cr_assert_eq(sg_session_new(target, &ssp, &s), SG_OK);
	sg_gen_model ops = session_model(s, V, 64, 0);
	sg_gen_state st;
	sg_gen_state_init(&st, &ops);
	long obs[NOUT] = {0};
	*kept = *drafted = 0;
	for (int i = 0; i < runs; i++) {
		toks r = {.n = 0};
		sg_gen_params p = sg_gen_default_params();
		p.prompt = prompt;
		p.n_prompt = np;
		p.max_tokens = K + 2; /* room for guesses at tokens 2 and 3 */
		p.sampler = sparams((uint64_t)i + 1);
		p.drafter = dr;
		p.draft_max = K;
		p.on_event = on_tok;
		p.user = &r;
		sg_gen_result res;
		cr_assert_eq(sg_generate(&st, silent_detok(), &p, &res), SG_OK, "%s", sg_last_error());
		cr_assert_geq(r.n, K);
		int o = outcome(tr, r.t);
		cr_assert_geq(o, 0, "run %d drew %d %d %d, which plain sampling never gives", i, r.t[0], r.t[1], r.t[2]);
		obs[o]++;
		*kept += res.n_accepted;
		*drafted += res.n_drafted;
	}
	sg_gen_state_free(&st);
	sg_session_free(s);
	int df;
	double pv = chi2_pvalue(tr->joint, obs, NOUT, runs, &df);
	cr_log_info("chi-square p-value %g, df %d, %zu of %zu guesses kept", pv, df, *kept, *drafted);
	return pv;
}

/* The target (llama fixture) sampled with guesses drawn by a draft model (the same weights in a
 * session of their own, sampling without the target's biases and penalty): the first 3 tokens of 2000 seeded runs have the distribution of plain
 * sampling. (Without the correction, keeping every guess or drawing a rejection's token from p
 * instead of max(0, p - q), the p-value falls far below the bound.) */
Test(spec_sampled, draft_model_sampling_keeps_the_target_distribution, .timeout = 600)
{
	sg_model *target = load("llama");
	cr_assert_eq(sg_model_n_vocab(target), 320);
	const int32_t prompt[] = {11, 57, 201, 9, 144, 57, 201, 9, 300, 12};
	size_t np = sizeof prompt / sizeof *prompt;
	tree tr;
	exact_joint(target, prompt, (int)np, &tr);
	double sum = 0;
	for (int o = 0; o < NOUT; o++) sum += tr.joint[o];
	cr_assert_float_eq(sum, 1.0, 1e-9);

	sg_session *ds = NULL;
	sg_session_params ssp = sg_session_default_params();
	ssp.n_ctx = 64;
	cr_assert_eq(sg_session_new(target, &ssp, &ds), SG_OK);
	setenv("SARAGOSSA_SPEC_P_MIN", "0", 1);
	sg_flags_reload();
	sg_drafter *dm = NULL;
	cr_assert_eq(sg_drafter_model(ds, sg_model_n_vocab(target), &dm), SG_OK);
	const int RUNS = 2000;
	size_t kept, drafted;
	double pv = sampled_pvalue(target, &tr, prompt, np, sg_drafter_ops(dm), RUNS, &kept, &drafted);
	cr_assert_gt(pv, 1e-3, "speculative sampling: chi-square p-value %g", pv);
	/* both sides of the correction were taken: guesses kept and guesses rejected */
	cr_assert_gt(drafted, (size_t)RUNS, "%zu guesses", drafted);
	cr_assert_gt(kept, drafted / 20, "%zu of %zu kept", kept, drafted);
	cr_assert_lt(kept, drafted - drafted / 20, "%zu of %zu kept", kept, drafted);
	/* the test itself: plain sampling passes it */
	pv = sampled_pvalue(target, &tr, prompt, np, NULL, RUNS, &kept, &drafted);
	cr_assert_gt(pv, 1e-3, "plain sampling: chi-square p-value %g", pv);
	sg_drafter_free(dm);
	sg_session_free(ds);
	unsetenv("SARAGOSSA_SPEC_P_MIN");
	sg_flags_reload();
	sg_model_free(target);
}
