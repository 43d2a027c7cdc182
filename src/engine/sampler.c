/* Token sampler: see sampler.h for the pipeline and docs/sampling.md for the semantics.
 *
 * Cost per call, V = n_vocab: one pass to copy and sanitize the logits (plain greedy without
 * log-probabilities reads them once and writes nothing), one pass of exp over V (or over k after
 * top-k) for the weights, then work proportional to the survivors. Top-k and top-p never sort
 * the vocabulary: both are radix selections on the float bits (11+11+10 bits, so at most three
 * histogram passes, each over the previous level's boundary bucket only), O(V) whatever the
 * logits look like, and deterministic, unlike a quickselect with random pivots.
 */
#include "engine/sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/error.h"

/* Contracting a*b+c into an FMA changes the last bit on some machines only; the token must not
 * depend on that. GCC already keeps contraction off under -std=c17; clang needs telling. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define MAX_VOCAB (1 << 28)

typedef struct cand {
	float v;    /* the adjusted logit, then the unnormalised weight exp((v - max) / T) */
	int32_t id; /* token id; every candidate list stays in ascending id order */
} cand;

typedef struct adj {
	int32_t id;
	float v; /* logit after bias and penalties */
} adj;

struct sg_sampler {
	sg_sampler_params p; /* copy; p.logit_bias points at bias below */
	int32_t n_vocab;
	uint64_t seed;
	uint64_t rng[4]; /* xoshiro256** state */

	sg_logit_bias *bias; /* [n_bias], sorted by token */
	size_t n_bias;

	int pen_on;      /* some penalty is active and the window is not empty */
	int32_t *counts; /* [n_vocab] occurrences inside the window */
	int32_t *ring;   /* [penalty_last_n] when penalty_last_n > 0: the window, oldest at ring_head */
	int32_t ring_len, ring_head;
	int32_t *distinct; /* [cap_distinct] ids with counts > 0, ascending */
	int32_t n_distinct, cap_distinct;

	adj *adj;    /* [n_bias + cap_distinct] per-call overrides, ascending id */
	float *work; /* [n_vocab] adjusted logits */
	cand *ca;    /* [n_vocab] candidate lists (ping-pong) */
	cand *cb;    /* [n_vocab] */
};

/* ---- random numbers: splitmix64 to seed xoshiro256** (Blackman & Vigna) ---- */

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(uint64_t s[4])
{
	uint64_t r = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return r;
}

static void rng_seed(uint64_t s[4], uint64_t seed)
{
	uint64_t x = seed;
	for (int i = 0; i < 4; i++) s[i] = splitmix64(&x);
}

/* Uniform in [0, 1) with 53 random bits: exact in double, the same everywhere. */
static double rng_u01(uint64_t s[4])
{
	return (double)(rng_next(s) >> 11) * 0x1.0p-53;
}

static uint64_t entropy_seed(void)
{
	uint64_t v = 0;
	if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v)) {
		/* No entropy source (old kernel, seccomp): a clock and address mix is enough for
		 * "different each run"; nobody should rely on it for secrecy. */
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		uint64_t x = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^
		             ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&v;
		v = splitmix64(&x);
	}
	return v == SG_SAMPLER_SEED_RANDOM ? v - 1 : v;
}

/* ---- numerics ---- */

/* The sanitizing rule of step 1 (and after every adjustment): NaN bans, +inf is the largest
 * finite value so that several +inf logits tie instead of producing NaN probabilities. */
static inline float sanitize(float v)
{
	if (v != v) return -INFINITY;
	return v > FLT_MAX ? FLT_MAX : v;
}

/* exp(x) for x <= 0 in float, from IEEE basic operations only (no libm), so every machine
 * computes the same bits. Cody-Waite reduction x = k ln2 + r, |r| <= ln2/2, degree-7 Taylor
 * (relative error < 5e-9 before rounding), 2^k built from the exponent bits. Results below
 * 2^-126 are returned as 0: such a token is 1e-38 times less likely than the best one. */
static inline float exp_neg(float x)
{
	if (!(x > -87.0f)) return 0.0f; /* also -inf and NaN */
	float t = x * 1.44269504f;
	int k = -(int)(0.5f - t); /* 0.5 - t > 0, so truncation is floor: k = round(t) */
	float kf = (float)k;
	float r = (x - kf * 0.693145752f) - kf * 1.42860677e-6f; /* ln2 split: kf*hi is exact */
	float p = 1.0f / 5040.0f;
	p = p * r + 1.0f / 720.0f;
	p = p * r + 1.0f / 120.0f;
	p = p * r + 1.0f / 24.0f;
	p = p * r + 1.0f / 6.0f;
	p = p * r + 0.5f;
	p = p * r + 1.0f;
	p = p * r + 1.0f;
	union {
		uint32_t u;
		float f;
	} s = {.u = (uint32_t)(k + 127) << 23}; /* k in [-126, 0] */
	return p * s.f;
}

/* Order-preserving map of a float onto uint32 (-inf lowest, +inf highest). */
static inline uint32_t fkey(float v)
{
	uint32_t u;
	memcpy(&u, &v, sizeof(u));
	return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* ---- parameters ---- */

sg_sampler_params sg_sampler_default_params(void)
{
	sg_sampler_params p = {
	    .temperature = 0.8f,
	    .top_k = 40,
	    .top_p = 0.95f,
	    .min_p = 0.05f,
	    .repetition_penalty = 1.0f,
	    .presence_penalty = 0.0f,
	    .frequency_penalty = 0.0f,
	    .penalty_last_n = 64,
	    .logit_bias = NULL,
	    .n_logit_bias = 0,
	    .seed = SG_SAMPLER_SEED_RANDOM,
	    .logprobs = 0,
	    .top_logprobs = 0,
	    .logprobs_mode = SG_LOGPROBS_PROCESSED,
	};
	return p;
}

static int cmp_bias(const void *a, const void *b)
{
	int32_t x = ((const sg_logit_bias *)a)->token, y = ((const sg_logit_bias *)b)->token;
	return (x > y) - (x < y);
}

static sg_status validate(const sg_sampler_params *p, int32_t n_vocab)
{
	if (n_vocab < 1 || n_vocab > MAX_VOCAB)
		return sg_error(SG_ERR_INVALID_ARG, "sg_sampler_create: n_vocab = %d is outside [1, %d]",
		                n_vocab, MAX_VOCAB);
	if (!(p->temperature >= 0.0f) || isinf(p->temperature))
		return sg_error(SG_ERR_INVALID_ARG,
		                "sg_sampler_create: temperature = %g must be finite and >= 0 (0 = greedy)",
		                (double)p->temperature);
	if (p->top_k < 0)
		return sg_error(SG_ERR_INVALID_ARG, "sg_sampler_create: top_k = %d must be >= 0 (0 = off)",
		                p->top_k);
	if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
		return sg_error(SG_ERR_INVALID_ARG,
		                "sg_sampler_create: top_p = %g is outside (0, 1] (1 = off)",
		                (double)p->top_p);
	if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
		return sg_error(SG_ERR_INVALID_ARG,
		                "sg_sampler_create: min_p = %g is outside [0, 1] (0 = off)",
		                (double)p->min_p);
	if (!(p->repetition_penalty > 0.0f) || isinf(p->repetition_penalty))
		return sg_error(SG_ERR_INVALID_ARG,
		                "sg_sampler_create: repetition_penalty = %g must be finite and > 0 (1 = off)",
		                (double)p->repetition_penalty);
	if (!isfinite(p->presence_penalty))
		return sg_error(SG_ERR_INVALID_ARG, "sg_sampler_create: presence_penalty = %g must be finite",
		                (double)p->presence_penalty);
	if (!isfinite(p->frequency_penalty))
		return sg_error(SG_ERR_INVALID_ARG,
		                "sg_sampler_create: frequency_penalty = %g must be finite",
		                (double)p->frequency_penalty);
	if (p->penalty_last_n < -1)
		return sg_error(SG_ERR_INVALID_ARG,
		                "sg_sampler_create: penalty_last_n = %d must be >= -1 (-1 = all, 0 = none)",
		                p->penalty_last_n);
	if (p->top_logprobs < 0 || p->top_logprobs > SG_SAMPLER_MAX_LOGPROBS)
		return sg_error(SG_ERR_INVALID_ARG, "sg_sampler_create: top_logprobs = %d is outside [0, %d]",
		                p->top_logprobs, SG_SAMPLER_MAX_LOGPROBS);
	if (p->logprobs_mode != SG_LOGPROBS_PROCESSED && p->logprobs_mode != SG_LOGPROBS_RAW)
		return sg_error(SG_ERR_INVALID_ARG, "sg_sampler_create: logprobs_mode = %d is not a mode",
		                (int)p->logprobs_mode);
	if (p->n_logit_bias && !p->logit_bias)
		return sg_error(SG_ERR_INVALID_ARG,
		                "sg_sampler_create: n_logit_bias = %zu with no logit_bias", p->n_logit_bias);
	if (p->n_logit_bias > (size_t)n_vocab)
		return sg_error(
		    SG_ERR_INVALID_ARG,
		    "sg_sampler_create: n_logit_bias = %zu is more than the %d tokens of the vocabulary",
		    p->n_logit_bias, n_vocab);
	for (size_t i = 0; i < p->n_logit_bias; i++) {
		const sg_logit_bias *b = &p->logit_bias[i];
		if (b->token < 0 || b->token >= n_vocab)
			return sg_error(SG_ERR_RANGE,
			                "sg_sampler_create: logit_bias token %d is outside [0, %d)", b->token,
			                n_vocab);
		if (b->bias != b->bias || b->bias == INFINITY)
			return sg_error(SG_ERR_INVALID_ARG,
			                "sg_sampler_create: logit_bias for token %d = %g must be a number "
			                "(use -100 or -inf to ban)",
			                b->token, (double)b->bias);
	}
	return SG_OK;
}

sg_status sg_sampler_create(const sg_sampler_params *p, int32_t n_vocab, sg_sampler **out)
{
	if (!p || !out) return SG_FAIL(SG_ERR_INVALID_ARG, "params and out are required");
	*out = NULL;
	sg_status st = validate(p, n_vocab);
	if (st) return st;

	sg_sampler *s = sg_calloc(1, sizeof(*s));
	if (!s) return SG_FAIL(SG_ERR_NOMEM, "sampler for %d tokens", n_vocab);
	s->p = *p;
	s->n_vocab = n_vocab;
	s->seed = p->seed == SG_SAMPLER_SEED_RANDOM ? entropy_seed() : p->seed;
	rng_seed(s->rng, s->seed);

	if (p->n_logit_bias) {
		s->bias = sg_malloc(p->n_logit_bias * sizeof(*s->bias));
		if (!s->bias) goto nomem;
		memcpy(s->bias, p->logit_bias, p->n_logit_bias * sizeof(*s->bias));
		qsort(s->bias, p->n_logit_bias, sizeof(*s->bias), cmp_bias);
		s->n_bias = p->n_logit_bias;
		for (size_t i = 1; i < s->n_bias; i++)
			if (s->bias[i].token == s->bias[i - 1].token) {
				int32_t tok = s->bias[i].token;
				sg_sampler_free(s);
				return sg_error(SG_ERR_INVALID_ARG,
				                "sg_sampler_create: logit_bias lists token %d twice", tok);
			}
	}
	s->p.logit_bias = s->bias;

	s->pen_on = p->penalty_last_n != 0 && (p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f ||
	                                       p->frequency_penalty != 0.0f);
	if (s->pen_on) {
		s->cap_distinct =
		    p->penalty_last_n > 0 && p->penalty_last_n < n_vocab ? p->penalty_last_n : n_vocab;
		s->counts = sg_calloc((size_t)n_vocab, sizeof(*s->counts));
		s->distinct = sg_malloc((size_t)s->cap_distinct * sizeof(*s->distinct));
		if (p->penalty_last_n > 0) s->ring = sg_malloc((size_t)p->penalty_last_n * sizeof(*s->ring));
		if (!s->counts || !s->distinct || (p->penalty_last_n > 0 && !s->ring)) goto nomem;
	}
	s->adj = sg_malloc((s->n_bias + (size_t)s->cap_distinct + 1) * sizeof(*s->adj));
	s->work = sg_malloc((size_t)n_vocab * sizeof(*s->work));
	s->ca = sg_malloc((size_t)n_vocab * sizeof(*s->ca));
	s->cb = sg_malloc((size_t)n_vocab * sizeof(*s->cb));
	if (!s->adj || !s->work || !s->ca || !s->cb) goto nomem;
	*out = s;
	return SG_OK;
nomem:
	sg_sampler_free(s);
	return SG_FAIL(SG_ERR_NOMEM, "scratch for %d tokens", n_vocab);
}

void sg_sampler_free(sg_sampler *s)
{
	if (!s) return;
	sg_free(s->bias);
	sg_free(s->counts);
	sg_free(s->ring);
	sg_free(s->distinct);
	sg_free(s->adj);
	sg_free(s->work);
	sg_free(s->ca);
	sg_free(s->cb);
	sg_free(s);
}

uint64_t sg_sampler_seed(const sg_sampler *s)
{
	return s->seed;
}
int32_t sg_sampler_n_vocab(const sg_sampler *s)
{
	return s->n_vocab;
}

void sg_sampler_reset(sg_sampler *s)
{
	rng_seed(s->rng, s->seed);
	if (!s->pen_on) return;
	for (int32_t i = 0; i < s->n_distinct; i++) s->counts[s->distinct[i]] = 0;
	s->n_distinct = 0;
	s->ring_len = s->ring_head = 0;
}

/* ---- penalty window ---- */

static int32_t lower_bound(const int32_t *a, int32_t n, int32_t x)
{
	int32_t lo = 0, hi = n;
	while (lo < hi) {
		int32_t mid = lo + (hi - lo) / 2;
		if (a[mid] < x)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static void window_add(sg_sampler *s, int32_t tok)
{
	if (s->counts[tok]++ > 0) return;
	int32_t at = lower_bound(s->distinct, s->n_distinct, tok);
	memmove(s->distinct + at + 1, s->distinct + at, (size_t)(s->n_distinct - at) * sizeof(int32_t));
	s->distinct[at] = tok;
	s->n_distinct++;
}

static void window_remove(sg_sampler *s, int32_t tok)
{
	if (--s->counts[tok] > 0) return;
	int32_t at = lower_bound(s->distinct, s->n_distinct, tok);
	SG_ASSERT(at < s->n_distinct && s->distinct[at] == tok);
	memmove(s->distinct + at, s->distinct + at + 1, (size_t)(s->n_distinct - at - 1) * sizeof(int32_t));
	s->n_distinct--;
}

sg_status sg_sampler_accept(sg_sampler *s, int32_t token)
{
	if (token < 0 || token >= s->n_vocab)
		return SG_FAIL(SG_ERR_RANGE, "token %d is outside [0, %d)", token, s->n_vocab);
	if (!s->pen_on) return SG_OK;
	int32_t n = s->p.penalty_last_n;
	if (n > 0) {
		if (s->ring_len == n)
			window_remove(s, s->ring[s->ring_head]);
		else
			s->ring_len++;
		s->ring[s->ring_head] = token;
		s->ring_head = s->ring_head + 1 == n ? 0 : s->ring_head + 1;
	}
	window_add(s, token);
	return SG_OK;
}

/* ---- steps 1-3: sanitize, bias, penalties ---- */

/* Builds s->adj: every token whose logit steps 2-3 change, ascending id, with its new value.
 * Only these tokens differ from sanitize(logits[i]), so a pass over the vocabulary can read the
 * logits directly and splice these in. */
static int32_t build_adj(sg_sampler *s, const float *logits)
{
	const sg_sampler_params *p = &s->p;
	size_t bi = 0, di = 0, n = 0;
	int32_t nd = s->pen_on ? s->n_distinct : 0;
	while (bi < s->n_bias || di < (size_t)nd) {
		int32_t tb = bi < s->n_bias ? s->bias[bi].token : INT32_MAX;
		int32_t td = di < (size_t)nd ? s->distinct[di] : INT32_MAX;
		int32_t id = tb < td ? tb : td;
		float v = sanitize(logits[id]);
		if (tb == id) {
			float b = s->bias[bi++].bias;
			/* OpenAI documents -100 as a ban; additive -100 leaves exp(-100) > 0 in float,
			 * so make it exact. */
			v = b <= SG_SAMPLER_BAN_BIAS ? -INFINITY : v + b;
		}
		if (td == id) {
			di++;
			int32_t c = s->counts[id];
			if (p->repetition_penalty != 1.0f)
				v = v > 0.0f ? v / p->repetition_penalty : v * p->repetition_penalty;
			v -= (float)c * p->frequency_penalty + p->presence_penalty;
		}
		s->adj[n].id = id;
		s->adj[n].v = sanitize(v);
		n++;
	}
	return (int32_t)n;
}

/* Greedy without log-probabilities: one read of the logits, nothing written. Returns the
 * argmax (lowest id on ties) or -1 when every token is banned. */
static int32_t argmax_spliced(const float *logits, int32_t n, const adj *a, int32_t na)
{
	float best = -INFINITY;
	int32_t bi = -1, i = 0;
	for (int32_t j = 0; j <= na; j++) {
		int32_t end = j < na ? a[j].id : n;
		for (; i < end; i++) {
			float v = logits[i];
			v = v > FLT_MAX ? FLT_MAX : v; /* NaN fails every comparison: never chosen */
			if (v > best) best = v, bi = i;
		}
		if (j < na) {
			if (a[j].v > best) best = a[j].v, bi = i;
			i++;
		}
	}
	return bi;
}

/* Writes the adjusted logits into work; returns the argmax (-1 if all banned), *mx its value. */
static int32_t materialize(const float *logits, int32_t n, const adj *a, int32_t na, float *work, float *mx)
{
	float best = -INFINITY;
	int32_t bi = -1, i = 0;
	for (int32_t j = 0; j <= na; j++) {
		int32_t end = j < na ? a[j].id : n;
		for (; i < end; i++) {
			float v = sanitize(logits[i]);
			work[i] = v;
			if (v > best) best = v, bi = i;
		}
		if (j < na) {
			work[i] = a[j].v;
			if (a[j].v > best) best = a[j].v, bi = i;
			i++;
		}
	}
	*mx = best;
	return bi;
}

/* ---- log-probabilities ---- */

static void fill_logprobs(const sg_sampler *s, const float *logits, const float *work, float wmax,
                          int32_t tok, sg_sample_result *out)
{
	int32_t n = s->n_vocab, ntop = s->p.top_logprobs;
	int raw = s->p.logprobs_mode == SG_LOGPROBS_RAW;
	float mx = wmax;
	if (raw) {
		mx = -INFINITY;
		for (int32_t i = 0; i < n; i++) {
			float v = sanitize(logits[i]);
			if (v > mx) mx = v;
		}
	}
	double sum = 0.0;
	sg_token_logprob *top = out->top;
	int32_t cnt = 0;
	for (int32_t i = 0; i < n; i++) {
		float v = raw ? sanitize(logits[i]) : work[i];
		if (v == -INFINITY) continue;
		sum += exp_neg(v - mx);
		if (ntop && (cnt < ntop || v > top[cnt - 1].logprob)) {
			/* Insert after every entry >= v: lower ids, seen first, win ties. */
			int32_t at = cnt < ntop ? cnt : ntop - 1;
			while (at > 0 && top[at - 1].logprob < v) {
				top[at] = top[at - 1];
				at--;
			}
			top[at].token = i;
			top[at].logprob = v;
			if (cnt < ntop) cnt++;
		}
	}
	/* mx is a finite logit of this distribution, so sum >= 1 and the log is finite. Reading
	 * v - lse as (v - mx) - log(sum) keeps the precision of the small differences. */
	double lsum = log(sum);
	for (int32_t k = 0; k < cnt; k++) top[k].logprob = (float)(((double)top[k].logprob - mx) - lsum);
	out->n_top = cnt;
	float vt = raw ? sanitize(logits[tok]) : work[tok];
	out->logprob = (float)(((double)vt - mx) - lsum);
}

/* ---- steps 5-7: radix selections over candidate lists in ascending id order ---- */

static const int LEVEL_SHIFT[3] = {21, 10, 0};
static const uint32_t LEVEL_MASK[3] = {0x7ff, 0x7ff, 0x3ff};

/* Top-k: moves the k candidates of largest v (ties: lowest ids) from src[0..n) into dst, id
 * order kept; returns their number. dst may not alias src. */
static int32_t select_top_k(const cand *src, int32_t n, int32_t k, cand *dst)
{
	if (k >= n) {
		memcpy(dst, src, (size_t)n * sizeof(*src));
		return n;
	}
	uint32_t hist[2048];
	const cand *cur = src;
	int32_t ncur = n, need = k;
	uint32_t pivot = 0; /* the boundary key, built 11 + 11 + 10 bits at a time */
	for (int l = 0; l < 3; l++) {
		int sh = LEVEL_SHIFT[l];
		uint32_t m = LEVEL_MASK[l];
		memset(hist, 0, (m + 1) * sizeof(hist[0]));
		for (int32_t i = 0; i < ncur; i++) hist[(fkey(cur[i].v) >> sh) & m]++;
		uint32_t b = m;
		int32_t acc = 0;
		for (;; b--) {
			if (acc + (int32_t)hist[b] >= need) break;
			acc += (int32_t)hist[b];
		}
		need -= acc;
		pivot |= b << sh;
		/* Keep only the boundary bucket for the next level, compacted into dst (in place
		 * from the second level on: the write index never passes the read index). */
		int32_t w = 0;
		for (int32_t i = 0; i < ncur; i++)
			if (((fkey(cur[i].v) >> sh) & m) == b) dst[w++] = cur[i];
		cur = dst;
		ncur = w;
	}
	/* cur now holds the candidates whose key equals pivot, in id order: the first `need` of
	 * them are in. */
	int32_t last_id = cur[need - 1].id;
	int32_t w = 0;
	for (int32_t i = 0; i < n; i++) {
		uint32_t key = fkey(src[i].v);
		if (key > pivot || (key == pivot && src[i].id <= last_id)) dst[w++] = src[i];
	}
	return w;
}

/* Top-p: keeps in place the smallest prefix of c[0..n) (by weight descending, ties lowest id)
 * whose weight reaches target; tmp is scratch. Returns the new count. */
static int32_t select_mass(cand *c, int32_t n, double target, cand *tmp)
{
	double hist[2048];
	const cand *cur = c;
	int32_t ncur = n;
	double need = target;
	uint32_t pivot = 0;
	for (int l = 0; l < 3; l++) {
		int sh = LEVEL_SHIFT[l];
		uint32_t m = LEVEL_MASK[l];
		memset(hist, 0, (m + 1) * sizeof(hist[0]));
		uint32_t lowest = m; /* the last non-empty bucket: rounding can leave need unreached */
		for (int32_t i = 0; i < ncur; i++) {
			uint32_t b = (fkey(cur[i].v) >> sh) & m;
			hist[b] += cur[i].v;
			if (b < lowest) lowest = b;
		}
		uint32_t b = m;
		double acc = 0.0;
		for (;; b--) {
			if (acc + hist[b] >= need || b == lowest) break;
			acc += hist[b];
		}
		need -= acc;
		pivot |= b << sh;
		int32_t w = 0;
		for (int32_t i = 0; i < ncur; i++)
			if (((fkey(cur[i].v) >> sh) & m) == b) tmp[w++] = cur[i];
		cur = tmp;
		ncur = w;
	}
	int32_t last_id = cur[ncur - 1].id;
	double acc = 0.0;
	for (int32_t i = 0; i < ncur; i++) {
		acc += cur[i].v;
		if (acc >= need) {
			last_id = cur[i].id;
			break;
		}
	}
	int32_t w = 0;
	for (int32_t i = 0; i < n; i++) {
		uint32_t key = fkey(c[i].v);
		if (key > pivot || (key == pivot && c[i].id <= last_id)) c[w++] = c[i];
	}
	return w;
}

/* ---- the pipeline ---- */

typedef struct prepared {
	int32_t greedy_tok; /* >= 0 when the answer is fixed (greedy) */
	cand *c;            /* survivors with their weights, ascending id */
	int32_t n;
	double total; /* sum of survivors' weights, in id order */
} prepared;

static sg_status check_call(const sg_sampler *s, const float *logits, int32_t n_vocab, const void *out,
                            const char *fn)
{
	if (!logits || !out) return sg_error(SG_ERR_INVALID_ARG, "%s: logits and out are required", fn);
	if (n_vocab != s->n_vocab)
		return sg_error(SG_ERR_INVALID_ARG, "%s: %d logits given, the sampler was made for %d", fn,
		                n_vocab, s->n_vocab);
	return SG_OK;
}

static sg_status all_banned(const sg_sampler *s, const char *fn)
{
	return sg_error(SG_ERR_INVALID_ARG,
	                "%s: every token is banned (all %d logits are -inf or NaN after logit_bias and "
	                "penalties)",
	                fn, s->n_vocab);
}

/* Steps 4-7 on s->work (max mx at index amax). */
static void prepare(sg_sampler *s, float mx, int32_t amax, prepared *pr)
{
	const sg_sampler_params *p = &s->p;
	int32_t n = s->n_vocab;
	pr->greedy_tok = -1;
	if (p->temperature == 0.0f) {
		pr->greedy_tok = amax;
		return;
	}
	float T = p->temperature;
	const float *work = s->work;
	cand *c = s->ca, *o = s->cb;
	int32_t nc = 0;
	/* A weight below min_p (the best token's weight is exactly 1) can never survive step 7;
	 * dropping it now leaves top-p's answer unchanged because top-p measures against the total
	 * of all candidates, which is still summed. Zero weights can never be drawn. */
	float floor_w = p->min_p;
	double total = 0.0;
	if (p->top_k > 0 && p->top_k < n) {
		for (int32_t i = 0; i < n; i++) c[i] = (cand){work[i], i};
		int32_t k = select_top_k(c, n, p->top_k, o);
		for (int32_t i = 0; i < k; i++) {
			float w = exp_neg((o[i].v - mx) / T);
			total += w;
			if (w > 0.0f && w >= floor_w) c[nc++] = (cand){w, o[i].id};
		}
	} else {
		for (int32_t i = 0; i < n; i++) {
			float w = exp_neg((work[i] - mx) / T);
			total += w;
			if (w > 0.0f && w >= floor_w) c[nc++] = (cand){w, i};
		}
	}
	SG_ASSERT(nc > 0); /* the argmax has weight exactly 1 */
	if (p->top_p < 1.0f) nc = select_mass(c, nc, (double)p->top_p * total, o);
	double t = 0.0;
	for (int32_t i = 0; i < nc; i++) t += c[i].v;
	pr->c = c;
	pr->n = nc;
	pr->total = t;
}

static sg_status run_steps_1_3(sg_sampler *s, const float *logits, float *mx, int32_t *amax, const char *fn)
{
	int32_t na = build_adj(s, logits);
	*amax = materialize(logits, s->n_vocab, s->adj, na, s->work, mx);
	if (*amax < 0) return all_banned(s, fn);
	return SG_OK;
}

sg_status sg_sampler_sample(sg_sampler *s, const float *logits, int32_t n_vocab, sg_sample_result *out)
{
	sg_status st = check_call(s, logits, n_vocab, out, "sg_sampler_sample");
	if (st) return st;
	out->logprob = 0.0f;
	out->n_top = 0;
	if (s->p.temperature == 0.0f && !s->p.logprobs) {
		int32_t na = build_adj(s, logits);
		int32_t tok = argmax_spliced(logits, n_vocab, s->adj, na);
		if (tok < 0) return all_banned(s, "sg_sampler_sample");
		out->token = tok;
		return SG_OK;
	}
	float mx;
	int32_t amax;
	st = run_steps_1_3(s, logits, &mx, &amax, "sg_sampler_sample");
	if (st) return st;
	prepared pr;
	prepare(s, mx, amax, &pr);
	int32_t tok = pr.greedy_tok;
	if (tok < 0) {
		/* Inverse CDF in id order. u < total, so some prefix sum exceeds it unless rounding
		 * in the running sum leaves it short: then the last candidate is taken. */
		double u = rng_u01(s->rng) * pr.total, acc = 0.0;
		tok = pr.c[pr.n - 1].id;
		for (int32_t i = 0; i < pr.n; i++) {
			acc += pr.c[i].v;
			if (u < acc) {
				tok = pr.c[i].id;
				break;
			}
		}
	}
	out->token = tok;
	if (s->p.logprobs) fill_logprobs(s, logits, s->work, mx, tok, out);
	return SG_OK;
}

sg_status sg_sampler_adjusted_logits(sg_sampler *s, const float *logits, int32_t n_vocab, float *out)
{
	sg_status st = check_call(s, logits, n_vocab, out, "sg_sampler_adjusted_logits");
	if (st) return st;
	int32_t na = build_adj(s, logits);
	float mx;
	materialize(logits, n_vocab, s->adj, na, out, &mx);
	return SG_OK;
}

sg_status sg_sampler_distribution(sg_sampler *s, const float *logits, int32_t n_vocab, double *probs)
{
	sg_status st = check_call(s, logits, n_vocab, probs, "sg_sampler_distribution");
	if (st) return st;
	float mx;
	int32_t amax;
	st = run_steps_1_3(s, logits, &mx, &amax, "sg_sampler_distribution");
	if (st) return st;
	prepared pr;
	prepare(s, mx, amax, &pr);
	memset(probs, 0, (size_t)n_vocab * sizeof(*probs));
	if (pr.greedy_tok >= 0) {
		probs[pr.greedy_tok] = 1.0;
		return SG_OK;
	}
	for (int32_t i = 0; i < pr.n; i++) probs[pr.c[i].id] = pr.c[i].v / pr.total;
	return SG_OK;
}
