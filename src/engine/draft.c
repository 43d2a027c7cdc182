/* Drafters for speculative decoding (see draft.h). */
#include "engine/draft.h"

#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/flags.h"
#include "engine/lm.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "text/tokenizer/tokenizer.h"

struct sg_drafter {
	sg_gen_drafter ops;
	/* n-gram */
	int nmin, nmax;
	int32_t *ref; /* [n_ref] a reference searched after the history */
	size_t n_ref;
	/* draft model */
	sg_session *ds;
	int32_t target_vocab;
	float p_min; /* a draft ends at a token of lower probability */
	/* sampled drafting (sample_begin): the draft's own sampler and scratch */
	sg_sampler *smp;
	float *lbuf;   /* [draft vocab] logits, ids the target lacks banned */
	double *qbuf;  /* [draft vocab] the distribution drawn from */
	int32_t lvocab; /* their size */
};

int sg_drafter_enabled(const char *kind)
{
	if (!sg_flag_bool("SARAGOSSA_SPEC")) return 0;
	if (!strcmp(kind, "ngram")) return sg_flag_bool("SARAGOSSA_SPEC_NGRAM");
	if (!strcmp(kind, "model")) return sg_flag_bool("SARAGOSSA_SPEC_DRAFT_MODEL");
	if (!strcmp(kind, "mtp")) return sg_flag_bool("SARAGOSSA_SPEC_MTP");
	return 0;
}

const sg_gen_drafter *sg_drafter_ops(const sg_drafter *d) { return d ? &d->ops : NULL; }

void sg_drafter_free(sg_drafter *d)
{
	if (!d) return;
	sg_free(d->ref);
	sg_sampler_free(d->smp);
	sg_free(d->lbuf);
	sg_free(d->qbuf);
	sg_free(d);
}

sg_status sg_drafter_ngram_reference(sg_drafter *d, const int32_t *ids, size_t n)
{
	sg_free(d->ref);
	d->ref = NULL;
	d->n_ref = 0;
	if (!n) return SG_OK;
	d->ref = sg_malloc(n * sizeof(int32_t));
	if (!d->ref) return SG_FAIL(SG_ERR_NOMEM, "a reference of %zu tokens", n);
	memcpy(d->ref, ids, n * sizeof(int32_t));
	d->n_ref = n;
	return SG_OK;
}

/* ---- n-gram / prompt lookup ---- */

/* The latest start i <= end - len in a[0..end) of the len tokens at suf, or -1. */
static long find_in(const int32_t *a, size_t end, const int32_t *suf, size_t len)
{
	if (end < len) return -1;
	for (long i = (long)(end - len); i >= 0; i--) {
		if (a[i] != suf[0]) continue;
		if (!memcmp(a + i, suf, len * sizeof(int32_t))) return i;
	}
	return -1;
}

/* Up to max tokens of a[from..n) into out; how many. */
static int32_t copy_from(const int32_t *a, size_t n, size_t from, int32_t max, int32_t *out)
{
	int32_t k = 0;
	while (k < max && from + (size_t)k < n) {
		out[k] = a[from + (size_t)k];
		k++;
	}
	return k;
}

static sg_status ngram_draft(void *self, const int32_t *hist, size_t n, int32_t max, int32_t *out, int32_t *n_out)
{
	sg_drafter *d = self;
	*n_out = 0;
	/* the longest suffix that occurred before wins; among equals the latest occurrence (the
	 * most recent version of a line being edited) */
	for (int len = d->nmax; len >= d->nmin; len--) {
		if ((size_t)len > n) continue;
		const int32_t *suf = hist + n - (size_t)len;
		/* in the history before the suffix itself (a match ending at n - 1 at the latest) */
		long i = (size_t)len < n ? find_in(hist, n - 1, suf, (size_t)len) : -1;
		if (i >= 0) {
			*n_out = copy_from(hist, n, (size_t)i + (size_t)len, max, out);
			return SG_OK;
		}
		i = find_in(d->ref, d->n_ref, suf, (size_t)len);
		if (i >= 0 && (size_t)i + (size_t)len < d->n_ref) {
			*n_out = copy_from(d->ref, d->n_ref, (size_t)i + (size_t)len, max, out);
			return SG_OK;
		}
	}
	return SG_OK;
}

sg_status sg_drafter_ngram(int ngram_min, int ngram_max, sg_drafter **out)
{
	*out = NULL;
	if (ngram_min < 1 || ngram_max < ngram_min || ngram_max > 64)
		return SG_FAIL(SG_ERR_INVALID_ARG, "n-gram sizes %d..%d (want 1 <= min <= max <= 64)", ngram_min, ngram_max);
	sg_drafter *d = sg_calloc(1, sizeof(*d));
	if (!d) return SG_FAIL(SG_ERR_NOMEM, "drafter");
	d->nmin = ngram_min;
	d->nmax = ngram_max;
	d->ops = (sg_gen_drafter){.self = d, .name = "ngram", .draft = ngram_draft};
	*out = d;
	return SG_OK;
}

/* ---- draft model ---- */

/* A guess's probability is taken among the draft's DRAFT_TOP most likely tokens (llama.cpp's draft
 * sampler: top-k 10, then the softmax of those): the p_min rule then needs no pass of exp over the
 * vocabulary, and a GPU sends back only those candidates. */
#define DRAFT_TOP 10

/* The largest of vals[k] (the lowest id on ties; NaN as -inf) and its softmax among them. */
static int32_t top_best(const int32_t *ids, const float *vals, int k, float *p)
{
	int b = -1;
	for (int i = 0; i < k; i++) {
		if (vals[i] != vals[i]) continue;
		if (b < 0 || vals[i] > vals[b] || (vals[i] == vals[b] && ids[i] < ids[b])) b = i;
	}
	if (b < 0) {
		*p = 0.0f;
		return ids[0];
	}
	double z = 0;
	for (int i = 0; i < k; i++)
		if (vals[i] == vals[i]) z += exp((double)(vals[i] - vals[b]));
	*p = (float)(1.0 / z);
	return ids[b];
}

/* The argmax of logits[V] (lowest id on ties) and its probability among the DRAFT_TOP largest. */
static int32_t argmax_p(const float *l, int32_t V, float *p)
{
	int32_t ids[DRAFT_TOP];
	float vals[DRAFT_TOP];
	int k = 0;
	for (int32_t i = 0; i < V; i++) {
		float v = l[i];
		if (v != v) continue;
		if (k == DRAFT_TOP && v <= vals[k - 1]) continue; /* ties keep the lower id */
		int j = k < DRAFT_TOP ? k++ : k - 1;
		while (j > 0 && vals[j - 1] < v) {
			vals[j] = vals[j - 1], ids[j] = ids[j - 1];
			j--;
		}
		vals[j] = v, ids[j] = i;
	}
	if (!k) {
		*p = 0.0f;
		return 0;
	}
	return top_best(ids, vals, k, p);
}

/* Brings the draft session to hist[0..n) (its logits: those after hist[n - 1]) and bounds *max
 * by its context; *max 0 when it cannot guess. */
static sg_status model_sync(sg_drafter *d, const int32_t *hist, size_t n, int32_t *max)
{
	sg_session *s = d->ds;
	int32_t V = sg_session_n_vocab(s);
	int ctx = sg_session_n_ctx(s);
	for (size_t i = 0; i < n; i++)
		if (hist[i] < 0 || hist[i] >= V) {
			*max = 0; /* a token it cannot read: no guess */
			return SG_OK;
		}
	if (n + (size_t)*max > (size_t)ctx) {
		if (n >= (size_t)ctx) {
			*max = 0; /* the history outgrew the draft's context */
			return SG_OK;
		}
		*max = (int32_t)((size_t)ctx - n);
	}
	/* keep the common prefix of its state (at least the last token is evaluated again, for its
	 * logits); a state that cannot be cut back starts over */
	size_t pos = (size_t)sg_session_position(s), keep = 0;
	const int32_t *have = sg_session_tokens(s);
	while (keep < n && keep < pos && have[keep] == hist[keep]) keep++;
	if (keep == n) keep--;
	if (keep < pos && sg_session_truncate(s, (int)keep) != SG_OK) {
		sg_session_reset(s);
		keep = 0;
	}
	sg_status st = sg_session_eval(s, hist + keep, (int)(n - keep), NULL);
	if (st) {
		sg_session_reset(s);
		*max = 0;
	}
	return st;
}

static sg_status model_draft(void *self, const int32_t *hist, size_t n, int32_t max, int32_t *out, int32_t *n_out)
{
	sg_drafter *d = self;
	*n_out = 0;
	sg_session *s = d->ds;
	int32_t V = sg_session_n_vocab(s);
	sg_status st = model_sync(d, hist, n, &max);
	/* after the first guess, each step's candidates only where the backend finds them (a GPU) */
	const int kt = V < DRAFT_TOP ? V : DRAFT_TOP;
	int dev = sg_session_top_max(s) >= kt && sg_flag_bool("SARAGOSSA_SAMPLE_IN_BACKEND");
	int32_t ids[DRAFT_TOP];
	float vals[DRAFT_TOP];
	int have = 0;
	for (int32_t k = 0; !st && k < max; k++) {
		float p;
		int32_t t;
		if (have) {
			t = top_best(ids, vals, kt, &p);
		} else {
			const float *l = sg_session_logits(s);
			if (!l) return sg_error(SG_ERR_INTERNAL, "draft model: no logits");
			t = argmax_p(l, V, &p);
		}
		if (t >= d->target_vocab || (k > 0 && p < d->p_min)) break;
		out[(*n_out)++] = t;
		if (k + 1 < max) {
			have = dev && sg_session_decode_top(s, t, kt, NULL, 0, ids, vals, NULL) == SG_OK;
			/* where the candidates step fails (it leaves the position as it was), the logits */
			if (!have) dev = 0, st = sg_session_eval(s, &t, 1, NULL);
		}
	}
	if (st) {
		sg_session_reset(s);
		*n_out = 0;
	}
	return st;
}

/* Sampled drafting: the guesses are drawn from the draft model's distribution under the
 * target's temperature, top-k, top-p and min-p (penalties and biases left out: any q keeps the
 * answer's distribution, a closer one keeps more guesses), with a seed derived from the
 * target's, so that a seed still gives one answer. */
static sg_status model_sample_begin(void *self, const sg_sampler_params *p, uint64_t seed, int *on)
{
	sg_drafter *d = self;
	*on = 0;
	sg_sampler_free(d->smp);
	d->smp = NULL;
	if (p->temperature <= 0.0f) return SG_OK;
	int32_t V = sg_session_n_vocab(d->ds);
	sg_sampler_params q = sg_sampler_default_params();
	q.temperature = p->temperature;
	q.top_k = p->top_k;
	q.top_p = p->top_p;
	q.min_p = p->min_p;
	q.repetition_penalty = 1.0f;
	q.presence_penalty = q.frequency_penalty = 0.0f;
	q.seed = seed ^ 0x5be3a1d7c0ffee11ull;
	if (q.seed == SG_SAMPLER_SEED_RANDOM) q.seed--;
	sg_status st = sg_sampler_create(&q, V, &d->smp);
	if (st) return st;
	if (d->lvocab != V) {
		sg_free(d->lbuf);
		sg_free(d->qbuf);
		d->lbuf = sg_malloc((size_t)V * sizeof(*d->lbuf));
		d->qbuf = sg_malloc((size_t)V * sizeof(*d->qbuf));
		d->lvocab = d->lbuf && d->qbuf ? V : 0;
		if (!d->lvocab) return SG_FAIL(SG_ERR_NOMEM, "draft sampling buffers of %d tokens", V);
	}
	*on = 1;
	return SG_OK;
}

static sg_status model_draft_q(void *self, const int32_t *hist, size_t n, int32_t max, int32_t *out, float *q, int32_t n_vocab,
			       int32_t *n_out)
{
	sg_drafter *d = self;
	*n_out = 0;
	if (!d->smp) return sg_error(SG_ERR_INTERNAL, "draft model: sampled drafting was not begun");
	sg_session *s = d->ds;
	int32_t V = sg_session_n_vocab(s);
	sg_status st = model_sync(d, hist, n, &max);
	for (int32_t k = 0; !st && k < max; k++) {
		const float *l = sg_session_logits(s);
		if (!l) return sg_error(SG_ERR_INTERNAL, "draft model: no logits");
		/* an unsure draft ends before its draw (a decision that does not look at the token) */
		float pmax;
		(void)argmax_p(l, V, &pmax);
		if (k > 0 && pmax < d->p_min) break;
		memcpy(d->lbuf, l, (size_t)V * sizeof(*l));
		for (int32_t i = d->target_vocab; i < V; i++) d->lbuf[i] = -INFINITY;
		sg_sample_result r;
		if ((st = sg_sampler_sample(d->smp, d->lbuf, V, &r))) break;
		if ((st = sg_sampler_distribution(d->smp, d->lbuf, V, d->qbuf))) break;
		float *qk = q + (size_t)k * (size_t)n_vocab;
		for (int32_t i = 0; i < n_vocab; i++) qk[i] = i < V ? (float)d->qbuf[i] : 0.0f;
		out[(*n_out)++] = r.token;
		if (k + 1 < max) st = sg_session_eval(s, &r.token, 1, NULL);
	}
	if (st) {
		sg_session_reset(s);
		*n_out = 0;
	}
	return st;
}

sg_status sg_drafter_model(sg_session *draft, int32_t target_vocab, sg_drafter **out)
{
	*out = NULL;
	if (!draft || target_vocab < 1) return SG_FAIL(SG_ERR_INVALID_ARG, "no draft model or vocabulary");
	sg_drafter *d = sg_calloc(1, sizeof(*d));
	if (!d) return SG_FAIL(SG_ERR_NOMEM, "drafter");
	d->ds = draft;
	d->target_vocab = target_vocab;
	d->p_min = (float)sg_flag_int("SARAGOSSA_SPEC_P_MIN") / 100.0f;
	d->ops = (sg_gen_drafter){
		.self = d, .name = "model", .draft = model_draft, .sample_begin = model_sample_begin, .draft_q = model_draft_q};
	*out = d;
	return SG_OK;
}

sg_status sg_drafter_check_vocab(const sg_lm *target, const sg_lm *draft)
{
	const sg_tokenizer *a = sg_lm_tokenizer(target), *b = sg_lm_tokenizer(draft);
	int32_t na = sg_tokenizer_n_vocab(a), nb = sg_tokenizer_n_vocab(b);
	if (na != nb)
		return SG_FAIL(SG_ERR_INVALID_ARG, "the draft model's tokenizer has %d tokens, the target's %d: they must share one vocabulary",
			       nb, na);
	for (int32_t id = 0; id < na; id++) {
		size_t la = 0, lb = 0;
		const char *ta = sg_tokenizer_token(a, id, &la), *tb = sg_tokenizer_token(b, id, &lb);
		if (!ta != !tb || la != lb || (ta && memcmp(ta, tb, la)))
			return SG_FAIL(SG_ERR_INVALID_ARG, "token %d is '%.*s' in the target's vocabulary and '%.*s' in the draft model's", id,
				       ta ? (int)la : 0, ta ? ta : "", tb ? (int)lb : 0, tb ? tb : "");
	}
	return SG_OK;
}

/* ---- MTP ---- */

static sg_status mtp_draft(void *self, const int32_t *hist, size_t n, int32_t max, int32_t *out, int32_t *n_out)
{
	sg_drafter *d = self;
	sg_session *s = d->ds;
	*n_out = 0;
	/* the session holds hist[0..n - 1); hist[n - 1] is the token to be evaluated next */
	size_t pos = (size_t)sg_session_position(s);
	if (n < 2 || pos != n - 1 || sg_session_tokens(s)[pos - 1] != hist[n - 2]) return SG_OK;
	int got = 0;
	sg_status st = sg_session_mtp_draft(s, hist[n - 1], max, out, &got, NULL);
	*n_out = st ? 0 : got;
	return st;
}

sg_status sg_drafter_mtp(sg_session *target, sg_drafter **out)
{
	*out = NULL;
	if (!target) return SG_FAIL(SG_ERR_INVALID_ARG, "no session");
	sg_status st = sg_session_mtp_enable(target, 1);
	if (st) return st;
	sg_drafter *d = sg_calloc(1, sizeof(*d));
	if (!d) return SG_FAIL(SG_ERR_NOMEM, "drafter");
	d->ds = target;
	d->ops = (sg_gen_drafter){.self = d, .name = "mtp", .draft = mtp_draft};
	*out = d;
	return SG_OK;
}
