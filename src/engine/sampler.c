/* Token sampler: see sampler.h for the pipeline and docs/sampling.md for the semantics.
 *
 * Cost per call, V = n_vocab, nothing sorts the vocabulary:
 * - plain greedy: one vector pass over the logits, nothing written;
 * - otherwise one pass copies and sanitizes the logits (bias and penalties spliced in from a
 *   short list sorted by id, so untouched logits are never tested one by one);
 * - top-k <= 1024: one pass with a heap of k, skipping 64-logit blocks whose maximum cannot enter;
 *   larger k: a radix selection on the float bits (11+11+10 bits: at most three histogram passes,
 *   each over the previous level's boundary bucket only), O(V) whatever the logits look like and
 *   deterministic, unlike a quickselect with random pivots;
 * - without top-k: one vector pass of exp over V for the weights, then only the tokens that can
 *   still matter (weight >= min_p, and for top-p >= (1 - top_p) * total / 2V) are kept;
 * - top-p: the same radix selection, by mass, over those survivors.
 * Measured on one core of a busy x86-64 VM (NATIVE=0), V = 262,144: greedy 76 us, the default
 * chain (T 0.8, top-k 40, top-p 0.95, min-p 0.05) 285 us, temperature alone 610 us.
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
#define SUM_BLOCK 256 /* entries per partial sum of the weights */

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

	adj *adj;     /* [n_bias + cap_distinct] per-call overrides, ascending id */
	float *work;  /* [n_vocab] adjusted logits */
	float *wbuf;  /* [n_vocab] weights; raw logits for SG_LOGPROBS_RAW */
	double *bsum; /* [n_vocab / SUM_BLOCK + 1] sums of wbuf's blocks */
	cand *ca;     /* [n_vocab] candidate lists (ping-pong) */
	cand *cb;     /* [n_vocab] */
	int32_t *cid; /* [n_vocab] token ids of a candidate row (sg_sampler_sample_top) */
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

/* Passes over the whole vocabulary use GCC/clang generic vectors of 4 floats: plain IEEE
 * operations lane by lane, lowered to SSE2/AVX/NEON or to scalar code alike, so the bits of
 * every result are fixed by this code and not by the instruction set. Maxima are exact in any
 * order; sums are kept per lane and the lanes added in a fixed order. */
typedef float vf4 __attribute__((vector_size(16)));
typedef int32_t vi4 __attribute__((vector_size(16)));

static inline vf4 splat(float v)
{
	return (vf4){v, v, v, v};
}
static inline vf4 vsel(vi4 m, vf4 a, vf4 b)
{
	return (vf4)((m & (vi4)a) | (~m & (vi4)b));
}
static inline vf4 load4(const float *p)
{
	vf4 v;
	memcpy(&v, p, sizeof(v));
	return v;
}
/* Lanes past n - i read as fill. */
static inline vf4 load_tail(const float *p, int32_t left, float fill)
{
	vf4 v = splat(fill);
	memcpy(&v, p, (size_t)(left < 4 ? left : 4) * sizeof(float));
	return v;
}
/* Lane-wise max in which NaN loses (the comparison is false, the old value stays). */
static inline vf4 vmax(vf4 v, vf4 m)
{
	return vsel(v > m, v, m);
}
static inline float hmax(vf4 m)
{
	float r = m[0];
	for (int j = 1; j < 4; j++) r = m[j] > r ? m[j] : r;
	return r;
}
/* The sanitizing rule on four lanes. */
static inline vf4 vsanitize(vf4 v)
{
	v = vsel(v != v, splat(-INFINITY), v);
	return vsel(v > splat(FLT_MAX), splat(FLT_MAX), v);
}

/* exp(x) for x <= 0, from IEEE basic operations only (no libm), so every machine computes the
 * same bits. Cody-Waite reduction x = k ln2 + r, |r| <= ln2/2, degree-6 Taylor (relative error
 * < 1.3e-7 before rounding, about float's own precision), 2^k built from the exponent bits. Below -86 the
 * result is 0 (such a token is 1e-37 times less likely than the best one), which also keeps every result a
 * normal float: flush-to-zero modes cannot change it. -inf and NaN give 0. */
static inline vf4 vexp_neg(vf4 x)
{
	vi4 live = x > splat(-86.0f);
	vf4 xc = vsel(live, x, splat(-86.0f));
	vf4 t = xc * splat(1.44269504f);
	vi4 k = -__builtin_convertvector(splat(0.5f) - t, vi4); /* 0.5 - t > 0: truncation is floor */
	vf4 kf = __builtin_convertvector(k, vf4);
	vf4 r = (xc - kf * splat(0.693145752f)) - kf * splat(1.42860677e-6f); /* kf * hi is exact */
	vf4 p = splat(1.0f / 720.0f);
	p = p * r + splat(1.0f / 120.0f);
	p = p * r + splat(1.0f / 24.0f);
	p = p * r + splat(1.0f / 6.0f);
	p = p * r + splat(0.5f);
	p = p * r + splat(1.0f);
	p = p * r + splat(1.0f);
	vi4 bits = (k + 127) << 23; /* k in [-124, 0] */
	return (vf4)((vi4)(p * (vf4)bits) & live);
}

/* The same function on one value (lane 0 of the same code: identical bits). */
static inline float exp_neg(float x)
{
	return vexp_neg(splat(x))[0];
}

/* Sum of exp((x[i] - mx) * inv_t) over x[0..n), each term also stored in w[i] when w is set.
 * Summed per block of SUM_BLOCK entries: four float lanes of 64 terms each (relative error
 * below 4e-6 even in the worst case, 20% faster than double lanes), lanes added in double in
 * order; the block sums are stored in bsum[] when set and added in block order, so the draw
 * walks exactly the sums that made the total. */
static double sum_exp(const float *x, int32_t n, float mx, float inv_t, float *w, double *bsum)
{
	vf4 vm = splat(mx), vt = splat(inv_t);
	double total = 0.0;
	for (int32_t b0 = 0; b0 < n; b0 += SUM_BLOCK) {
		int32_t end = n - b0 > SUM_BLOCK ? b0 + SUM_BLOCK : n, i = b0;
		vf4 acc = {0, 0, 0, 0};
		for (; i + 4 <= end; i += 4) {
			vf4 e = vexp_neg((load4(x + i) - vm) * vt);
			acc += e;
			if (w) memcpy(w + i, &e, sizeof(e));
		}
		if (i < end) {
			vf4 e = vexp_neg((load_tail(x + i, end - i, -INFINITY) - vm) * vt);
			acc += e;
			if (w) memcpy(w + i, &e, (size_t)(end - i) * sizeof(float));
		}
		double bs = ((double)acc[0] + acc[1]) + ((double)acc[2] + acc[3]);
		if (bsum) bsum[b0 / SUM_BLOCK] = bs;
		total += bs;
	}
	return total;
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
	s->wbuf = sg_malloc((size_t)n_vocab * sizeof(*s->wbuf));
	s->bsum = sg_malloc(((size_t)n_vocab / SUM_BLOCK + 1) * sizeof(*s->bsum));
	s->ca = sg_malloc((size_t)n_vocab * sizeof(*s->ca));
	s->cb = sg_malloc((size_t)n_vocab * sizeof(*s->cb));
	s->cid = sg_malloc((size_t)n_vocab * sizeof(*s->cid));
	if (!s->adj || !s->work || !s->wbuf || !s->bsum || !s->ca || !s->cb || !s->cid) goto nomem;
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
	sg_free(s->wbuf);
	sg_free(s->bsum);
	sg_free(s->ca);
	sg_free(s->cb);
	sg_free(s->cid);
	sg_free(s);
}

uint64_t sg_sampler_seed(const sg_sampler *s)
{
	return s->seed;
}
int sg_sampler_plain_greedy(const sg_sampler *s) { return s->p.temperature == 0.0f && !s->n_bias && !s->pen_on && !s->p.logprobs; }

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
	/* Only an unbounded window (-1) could count this high; saturate rather than overflow. */
	if (s->counts[tok] == INT32_MAX) return;
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
	if (!s) return SG_FAIL(SG_ERR_INVALID_ARG, "sampler is NULL");
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

/* Steps 2-3 on one sanitized logit v: bias b (NULL: none), then the penalties for a token seen c
 * times in the window (c = 0: none). */
static float adjust(const sg_sampler *s, float v, const float *b, int32_t c)
{
	const sg_sampler_params *p = &s->p;
	/* OpenAI documents -100 as a ban; additive -100 leaves exp(-100) > 0 in float, so make it
	 * exact. */
	if (b) v = *b <= SG_SAMPLER_BAN_BIAS ? -INFINITY : v + *b;
	if (c > 0) {
		if (p->repetition_penalty != 1.0f) v = v > 0.0f ? v / p->repetition_penalty : v * p->repetition_penalty;
		v -= (float)c * p->frequency_penalty + p->presence_penalty;
	}
	return sanitize(v);
}

/* Builds s->adj: every token whose logit steps 2-3 change, ascending id, with its new value.
 * Only these tokens differ from sanitize(logits[i]), so a pass over the vocabulary can read the
 * logits directly and splice these in. */
static int32_t build_adj(sg_sampler *s, const float *logits)
{
	size_t bi = 0, di = 0, n = 0;
	int32_t nd = s->pen_on ? s->n_distinct : 0;
	while (bi < s->n_bias || di < (size_t)nd) {
		int32_t tb = bi < s->n_bias ? s->bias[bi].token : INT32_MAX;
		int32_t td = di < (size_t)nd ? s->distinct[di] : INT32_MAX;
		int32_t id = tb < td ? tb : td;
		const float *b = tb == id ? &s->bias[bi++].bias : NULL;
		int32_t c = 0;
		if (td == id) di++, c = s->counts[id];
		s->adj[n].id = id;
		s->adj[n].v = adjust(s, sanitize(logits[id]), b, c);
		n++;
	}
	return (int32_t)n;
}

/* Greedy over plain logits x[a..b): moves (*best, *bi) to the first index of a strictly larger
 * sanitized value. Blocks of 64: a vector block maximum, then a scan of the block only when it
 * beats the best so far, so each logit is read from memory once. */
static void argmax_range(const float *x, int32_t a, int32_t b, float *best, int32_t *bi)
{
	int32_t i = a;
	for (; i + 64 <= b; i += 64) {
		vf4 m = splat(-INFINITY);
		for (int32_t k = 0; k < 64; k += 4) m = vmax(load4(x + i + k), m);
		float bm = hmax(m);
		bm = bm > FLT_MAX ? FLT_MAX : bm;
		if (bm > *best) {
			*best = bm;
			for (int32_t k = 0; k < 64; k++)
				if (sanitize(x[i + k]) == bm) {
					*bi = i + k;
					break;
				}
		}
	}
	for (; i < b; i++) {
		float v = sanitize(x[i]);
		if (v > *best) *best = v, *bi = i;
	}
}

/* Greedy without log-probabilities: one read of the logits, nothing written, the adjusted
 * tokens spliced in. Returns the argmax (lowest id on ties) or -1 when every token is banned. */
static int32_t argmax_spliced(const float *logits, int32_t n, const adj *a, int32_t na)
{
	float best = -INFINITY;
	int32_t bi = -1, i = 0;
	for (int32_t j = 0; j <= na; j++) {
		int32_t end = j < na ? a[j].id : n;
		argmax_range(logits, i, end, &best, &bi);
		i = end;
		if (j < na) {
			if (a[j].v > best) best = a[j].v, bi = i;
			i++;
		}
	}
	return bi;
}

/* Copies sanitized x[a..b) into w[a..b); returns max(m, their maximum). */
static float copy_range(const float *x, int32_t a, int32_t b, float *w, float m)
{
	vf4 vm = splat(-INFINITY);
	int32_t i = a;
	for (; i + 4 <= b; i += 4) {
		vf4 v = vsanitize(load4(x + i));
		memcpy(w + i, &v, sizeof(v));
		vm = vmax(v, vm);
	}
	float hm = hmax(vm);
	m = hm > m ? hm : m;
	for (; i < b; i++) {
		float v = sanitize(x[i]);
		w[i] = v;
		m = v > m ? v : m;
	}
	return m;
}

/* Writes the adjusted logits into work; returns their maximum (-inf when all are banned). */
static float materialize(const float *logits, int32_t n, const adj *a, int32_t na, float *work)
{
	float m = -INFINITY;
	int32_t i = 0;
	for (int32_t j = 0; j <= na; j++) {
		int32_t end = j < na ? a[j].id : n;
		m = copy_range(logits, i, end, work, m);
		i = end;
		if (j < na) {
			work[i] = a[j].v;
			m = a[j].v > m ? a[j].v : m;
			i++;
		}
	}
	return m;
}

/* ---- log-probabilities ---- */

/* Inserts (i, v) into top[0..*cnt) (capacity cap, highest first) after every entry >= v, so
 * that lower ids, seen first, win ties. */
static void top_insert(sg_token_logprob *top, int32_t *cnt, int32_t cap, int32_t i, float v)
{
	if (*cnt == cap && !(v > top[cap - 1].logprob)) return;
	int32_t at = *cnt < cap ? (*cnt)++ : cap - 1;
	while (at > 0 && top[at - 1].logprob < v) {
		top[at] = top[at - 1];
		at--;
	}
	top[at].token = i;
	top[at].logprob = v;
}

/* Log-softmax of the adjusted logits (s->work, maximum wmax) or, in raw mode, of the sanitized
 * input logits: the chosen token's value and the top_logprobs best, banned tokens left out. */
static void fill_logprobs(sg_sampler *s, const float *logits, float wmax, int32_t tok, sg_sample_result *out)
{
	int32_t n = s->n_vocab, ntop = s->p.top_logprobs;
	const float *x = s->work;
	float mx = wmax;
	if (s->p.logprobs_mode == SG_LOGPROBS_RAW) {
		/* wbuf is free again once the token is drawn. */
		mx = copy_range(logits, 0, n, s->wbuf, -INFINITY);
		x = s->wbuf;
	}
	double sum = sum_exp(x, n, mx, 1.0f, NULL, NULL);
	int32_t i;

	/* Top alternatives: a block is scanned only if its maximum could enter the list. */
	sg_token_logprob *top = out->top;
	int32_t cnt = 0;
	if (ntop) {
		for (i = 0; i + 64 <= n; i += 64) {
			vf4 m = splat(-INFINITY);
			for (int32_t k = 0; k < 64; k += 4) m = vmax(load4(x + i + k), m);
			float bm = hmax(m);
			if (bm == -INFINITY || (cnt == ntop && !(bm > top[ntop - 1].logprob))) continue;
			for (int32_t k = 0; k < 64; k++)
				if (x[i + k] != -INFINITY) top_insert(top, &cnt, ntop, i + k, x[i + k]);
		}
		for (; i < n; i++)
			if (x[i] != -INFINITY) top_insert(top, &cnt, ntop, i, x[i]);
	}
	/* mx is a finite value of this distribution, so sum >= 1 and the log is finite. Reading
	 * v - lse as (v - mx) - log(sum) keeps the precision of the small differences. */
	double lsum = log(sum);
	for (int32_t k = 0; k < cnt; k++) top[k].logprob = (float)(((double)top[k].logprob - mx) - lsum);
	out->n_top = cnt;
	out->logprob = (float)(((double)x[tok] - mx) - lsum);
}

/* ---- steps 5-7: radix selections over candidate lists in ascending id order ---- */

/* Up to this k, a heap pass beats the radix selection's three passes. */
#define HEAP_TOP_K 1024

static const int LEVEL_SHIFT[3] = {21, 10, 0};
static const uint32_t LEVEL_MASK[3] = {0x7ff, 0x7ff, 0x3ff};

/* Top-k: writes the k entries of x[0..n) with the largest values (ties: lowest ids) into dst
 * as candidates, ascending id; returns their number (k < n). */
static int32_t select_top_k(const float *x, int32_t n, int32_t k, cand *dst)
{
	uint32_t hist[2048];
	int32_t ncur = 0, need = k;
	uint32_t pivot = 0; /* the boundary key, built 11 + 11 + 10 bits at a time */
	for (int l = 0; l < 3; l++) {
		int sh = LEVEL_SHIFT[l];
		uint32_t m = LEVEL_MASK[l];
		memset(hist, 0, (m + 1) * sizeof(hist[0]));
		if (l == 0)
			for (int32_t i = 0; i < n; i++) hist[fkey(x[i]) >> sh]++;
		else
			for (int32_t i = 0; i < ncur; i++) hist[(fkey(dst[i].v) >> sh) & m]++;
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
		if (l == 0) {
			for (int32_t i = 0; i < n; i++)
				if ((fkey(x[i]) >> sh) == b) dst[w++] = (cand){x[i], i};
		} else {
			for (int32_t i = 0; i < ncur; i++)
				if (((fkey(dst[i].v) >> sh) & m) == b) dst[w++] = dst[i];
		}
		ncur = w;
	}
	/* dst now holds the entries whose key equals pivot, in id order: the first `need` of them
	 * are in. */
	int32_t last_id = dst[need - 1].id;
	int32_t w = 0;
	for (int32_t i = 0; i < n; i++) {
		uint32_t key = fkey(x[i]);
		if (key > pivot || (key == pivot && i <= last_id)) dst[w++] = (cand){x[i], i};
	}
	return w;
}

/* Walks a level's histogram from the top bucket down to the one where the mass reaches *need,
 * and takes the mass above it off *need. Rounding can leave *need unreached: the walk then stops
 * at the lowest non-empty bucket. */
static uint32_t mass_boundary(const double *hist, uint32_t top, uint32_t lowest, double *need)
{
	uint32_t b = top;
	double acc = 0.0;
	for (;; b--) {
		if (acc + hist[b] >= *need || b == lowest) break;
		acc += hist[b];
	}
	*need -= acc;
	return b;
}

/* Top-p: keeps in place the smallest prefix of c[0..n) (by weight descending, ties lowest id)
 * whose weight reaches target; tmp is scratch for n entries. Returns the new count. */
static int32_t select_mass(cand *c, int32_t n, double target, cand *tmp)
{
	double hist[2048];
	double need = target;
	uint32_t pivot = 0;
	const cand *cur = c;
	int32_t ncur = n;
	for (int l = 0; l < 3; l++) {
		int sh = LEVEL_SHIFT[l];
		uint32_t m = LEVEL_MASK[l], lowest = m;
		memset(hist, 0, (m + 1) * sizeof(hist[0]));
		for (int32_t i = 0; i < ncur; i++) {
			uint32_t b = (fkey(cur[i].v) >> sh) & m;
			hist[b] += cur[i].v;
			lowest = b < lowest ? b : lowest;
		}
		uint32_t b = mass_boundary(hist, m, lowest, &need);
		pivot |= b << sh;
		/* The boundary bucket goes on to the next level, compacted into tmp (in place from
		 * the second level on: the write index never passes the read index). */
		int32_t k = 0;
		for (int32_t i = 0; i < ncur; i++)
			if (((fkey(cur[i].v) >> sh) & m) == b) tmp[k++] = cur[i];
		cur = tmp;
		ncur = k;
	}
	/* tmp holds the weights equal to the boundary, in id order: take them until the mass is
	 * reached (all of them if rounding left it short). */
	int32_t last_id = tmp[ncur - 1].id;
	double acc = 0.0;
	for (int32_t i = 0; i < ncur; i++) {
		acc += tmp[i].v;
		if (acc >= need) {
			last_id = tmp[i].id;
			break;
		}
	}
	int32_t k = 0;
	for (int32_t i = 0; i < n; i++) {
		uint32_t key = fkey(c[i].v);
		if (key > pivot || (key == pivot && c[i].id <= last_id)) c[k++] = c[i];
	}
	return k;
}

/* Orders candidates so that the root of a heap is the worst one: lower value, then higher id. */
static inline int worse(cand a, cand b)
{
	return a.v < b.v || (a.v == b.v && a.id > b.id);
}

static void sift_down(cand *h, int32_t k, int32_t i)
{
	for (;;) {
		int32_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < k && worse(h[l], h[m])) m = l;
		if (r < k && worse(h[r], h[m])) m = r;
		if (m == i) return;
		cand t = h[i];
		h[i] = h[m];
		h[m] = t;
		i = m;
	}
}

static int cmp_cand_id(const void *a, const void *b)
{
	int32_t x = ((const cand *)a)->id, y = ((const cand *)b)->id;
	return (x > y) - (x < y);
}

/* Top-k for small k: one pass with a heap of the k best; a block of 64 whose vector maximum
 * cannot beat the heap's worst is skipped, so a typical call reads x once and touches the heap
 * a few hundred times. Sorted logits (each one a new best) cost O(n log k), still bounded.
 * Writes the k winners into dst in id order; returns k (k < n). */
static int32_t select_top_k_heap(const float *x, int32_t n, int32_t k, cand *dst)
{
	for (int32_t i = 0; i < k; i++) dst[i] = (cand){x[i], i};
	for (int32_t i = k / 2 - 1; i >= 0; i--) sift_down(dst, k, i);
	int32_t i = k;
	/* A later id with an equal value is worse, so only a strictly larger value enters. */
	for (; i < n && (i & 63); i++)
		if (x[i] > dst[0].v) dst[0] = (cand){x[i], i}, sift_down(dst, k, 0);
	for (; i + 64 <= n; i += 64) {
		vf4 m = splat(-INFINITY);
		for (int32_t j = 0; j < 64; j += 4) m = vmax(load4(x + i + j), m);
		if (!(hmax(m) > dst[0].v)) continue;
		for (int32_t j = i; j < i + 64; j++)
			if (x[j] > dst[0].v) dst[0] = (cand){x[j], j}, sift_down(dst, k, 0);
	}
	for (; i < n; i++)
		if (x[i] > dst[0].v) dst[0] = (cand){x[i], i}, sift_down(dst, k, 0);
	qsort(dst, (size_t)k, sizeof(*dst), cmp_cand_id);
	return k;
}

/* ---- the pipeline ---- */

typedef struct prepared {
	int32_t greedy_tok; /* >= 0 when the answer is fixed (greedy) */
	const cand *c;      /* survivors with their weights, ascending id; NULL: dense */
	const float *w;     /* dense: [n_vocab] weights, when nothing was filtered */
	int32_t n;          /* entries in c, or n_vocab */
	double total;       /* sum of the weights drawn from */
} prepared;

static sg_status check_call(const sg_sampler *s, const float *logits, int32_t n_vocab, const void *out,
                            const char *fn)
{
	if (!s || !logits || !out) return sg_error(SG_ERR_INVALID_ARG, "%s: sampler, logits and out are required", fn);
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

static int32_t first_equal(const float *x, int32_t n, float v)
{
	for (int32_t i = 0; i < n; i++)
		if (x[i] == v) return i;
	return -1;
}

/* Steps 4-7 on the adjusted logits x[0..n) (s->work over the vocabulary, or a candidate row in
 * id order), whose maximum is mx (finite); top_k: the entries step 5 keeps, 0 = no top-k. The
 * candidates' ids are indices into x. */
static void prepare(sg_sampler *s, const float *x, int32_t n, int32_t top_k, float mx, prepared *pr)
{
	const sg_sampler_params *p = &s->p;
	pr->greedy_tok = -1;
	pr->c = NULL;
	pr->w = NULL;
	if (p->temperature == 0.0f) {
		pr->greedy_tok = first_equal(x, n, mx);
		return;
	}
	/* Multiplying by 1/T rather than dividing: cheaper in the vector loop, and as fixed. */
	float inv_t = 1.0f / p->temperature;
	/* Below ~3e-39 the reciprocal overflows and 0 * inf would give the best token a NaN
	 * weight; the largest finite factor gives the same answer as the exact one. */
	if (inv_t > FLT_MAX) inv_t = FLT_MAX;
	cand *c = s->ca, *o = s->cb;
	int32_t nc = 0;
	/* A weight below min_p (the best token's weight is exactly 1) can never survive step 7;
	 * dropping it now leaves top-p's answer unchanged because top-p measures against the total
	 * of all candidates, which is still summed. Zero weights can never be drawn. */
	float floor_w = p->min_p;
	double total = 0.0;
	if (top_k > 0) {
		int32_t k = top_k;
		if (k >= n)
			for (int32_t i = 0; i < n; i++) o[i] = (cand){x[i], i};
		else
			k = k <= HEAP_TOP_K ? select_top_k_heap(x, n, k, o) : select_top_k(x, n, k, o);
		for (int32_t i = 0; i < k; i++) {
			float w = exp_neg((o[i].v - mx) * inv_t);
			total += w;
			if (w > 0.0f && w >= floor_w) c[nc++] = (cand){w, o[i].id};
		}
	} else {
		total = sum_exp(x, n, mx, inv_t, s->wbuf, s->bsum);
		const float *w = s->wbuf;
		if (floor_w == 0.0f && p->top_p >= 1.0f) {
			/* Nothing filtered: draw straight from the dense weights. */
			pr->w = w;
			pr->n = n;
			pr->total = total;
			return;
		}
		/* Tokens lighter than (1 - top_p) * total / n weigh less than (1 - top_p) * total all
		 * together, so the heavier ones alone reach top_p: the nucleus lies among them. Drop
		 * the lighter ones before selecting (half that bound, a margin for rounding). */
		float fl = floor_w;
		if (p->top_p < 1.0f) {
			double e = 0.5 * (1.0 - (double)p->top_p) * total / n;
			if (e > fl) fl = (float)e;
		}
		for (int32_t i = 0; i < n; i++)
			if (w[i] > 0.0f && w[i] >= fl) c[nc++] = (cand){w[i], i};
	}
	SG_ASSERT(nc > 0); /* the maximum has weight exactly 1 */
	if (p->top_p < 1.0f) nc = select_mass(c, nc, (double)p->top_p * total, o);
	double t = 0.0;
	for (int32_t i = 0; i < nc; i++) t += c[i].v;
	pr->c = c;
	pr->n = nc;
	pr->total = t;
}

/* Step 8: inverse CDF in id order. u < total, so some prefix sum exceeds it unless rounding
 * leaves the running sum short: then the last token with a weight is taken. Dense weights are
 * walked block by block (the block sums of sum_exp), then inside the block. */
static int32_t draw(sg_sampler *s, const prepared *pr)
{
	double u = rng_u01(s->rng) * pr->total, acc = 0.0;
	if (pr->c) {
		for (int32_t i = 0; i < pr->n; i++) {
			acc += pr->c[i].v;
			if (u < acc) return pr->c[i].id;
		}
		return pr->c[pr->n - 1].id;
	}
	int32_t nb = (pr->n + SUM_BLOCK - 1) / SUM_BLOCK;
	for (int32_t b = 0; b < nb; b++) {
		if (u < acc + s->bsum[b]) {
			double r = u - acc, a2 = 0.0;
			int32_t end = pr->n - b * SUM_BLOCK > SUM_BLOCK ? (b + 1) * SUM_BLOCK : pr->n,
			        last = -1;
			for (int32_t i = b * SUM_BLOCK; i < end; i++) {
				a2 += pr->w[i];
				if (r < a2) return i;
				if (pr->w[i] > 0.0f) last = i;
			}
			if (last >= 0) return last;
		}
		acc += s->bsum[b];
	}
	int32_t i = pr->n - 1;
	while (i > 0 && !(pr->w[i] > 0.0f)) i--;
	return i;
}

/* Step 5's k over the whole vocabulary (0: no top-k). */
static int32_t vocab_top_k(const sg_sampler *s)
{
	return s->p.top_k > 0 && s->p.top_k < s->n_vocab ? s->p.top_k : 0;
}

static sg_status run_steps_1_3(sg_sampler *s, const float *logits, float *mx, const char *fn)
{
	int32_t na = build_adj(s, logits);
	*mx = materialize(logits, s->n_vocab, s->adj, na, s->work);
	if (*mx == -INFINITY) return all_banned(s, fn);
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
	st = run_steps_1_3(s, logits, &mx, "sg_sampler_sample");
	if (st) return st;
	prepared pr;
	prepare(s, s->work, n_vocab, vocab_top_k(s), mx, &pr);
	int32_t tok = pr.greedy_tok >= 0 ? pr.greedy_tok : draw(s, &pr);
	out->token = tok;
	if (s->p.logprobs) fill_logprobs(s, logits, mx, tok, out);
	return SG_OK;
}

sg_status sg_sampler_adjusted_logits(sg_sampler *s, const float *logits, int32_t n_vocab, float *out)
{
	sg_status st = check_call(s, logits, n_vocab, out, "sg_sampler_adjusted_logits");
	if (st) return st;
	int32_t na = build_adj(s, logits);
	materialize(logits, n_vocab, s->adj, na, out);
	return SG_OK;
}

sg_status sg_sampler_distribution(sg_sampler *s, const float *logits, int32_t n_vocab, double *probs)
{
	sg_status st = check_call(s, logits, n_vocab, probs, "sg_sampler_distribution");
	if (st) return st;
	float mx;
	st = run_steps_1_3(s, logits, &mx, "sg_sampler_distribution");
	if (st) return st;
	prepared pr;
	prepare(s, s->work, n_vocab, vocab_top_k(s), mx, &pr);
	memset(probs, 0, (size_t)n_vocab * sizeof(*probs));
	if (pr.greedy_tok >= 0) {
		probs[pr.greedy_tok] = 1.0;
		return SG_OK;
	}
	if (pr.c)
		for (int32_t i = 0; i < pr.n; i++) probs[pr.c[i].id] = pr.c[i].v / pr.total;
	else
		for (int32_t i = 0; i < pr.n; i++) probs[i] = pr.w[i] / pr.total;
	return SG_OK;
}

/* ---- speculative verification (sampler.h) ---- */

/* The probability of id under prepared weights (0 when filtered). */
static double prepared_p(const prepared *pr, int32_t id)
{
	if (pr->c) {
		for (int32_t i = 0; i < pr->n; i++)
			if (pr->c[i].id == id) return pr->c[i].v / pr->total;
		return 0.0;
	}
	return id < pr->n ? pr->w[id] / pr->total : 0.0;
}

/* The residual weight of id with probability pi: max(0, p - q), q a point mass on guess when
 * q is NULL. */
static inline double residual(double pi, int32_t id, int32_t guess, const float *q)
{
	double r = q ? pi - (double)q[id] : (id == guess ? 0.0 : pi);
	return r > 0.0 ? r : 0.0;
}

/* A draw from norm(max(0, p - q)) in id order; -1 when it has no mass (p == q up to rounding). */
static int32_t draw_residual(sg_sampler *s, const prepared *pr, int32_t guess, const float *q)
{
	double tot = 0.0;
	int32_t n = pr->n;
	for (int32_t i = 0; i < n; i++) {
		int32_t id = pr->c ? pr->c[i].id : i;
		double w = pr->c ? pr->c[i].v : (double)pr->w[i];
		tot += residual(w / pr->total, id, guess, q);
	}
	if (!(tot > 0.0)) return -1;
	double u = rng_u01(s->rng) * tot, acc = 0.0;
	int32_t last = -1;
	for (int32_t i = 0; i < n; i++) {
		int32_t id = pr->c ? pr->c[i].id : i;
		double w = pr->c ? pr->c[i].v : (double)pr->w[i];
		double r = residual(w / pr->total, id, guess, q);
		if (r <= 0.0) continue;
		acc += r;
		last = id;
		if (u < acc) return id;
	}
	return last;
}

sg_status sg_sampler_sample_spec(sg_sampler *s, const float *logits, int32_t n_vocab, int32_t guess, const float *q,
				 sg_sample_result *out)
{
	sg_status st = check_call(s, logits, n_vocab, out, "sg_sampler_sample_spec");
	if (st) return st;
	if (guess < 0 || guess >= n_vocab)
		return sg_error(SG_ERR_INVALID_ARG, "sg_sampler_sample_spec: guess %d outside [0, %d)", guess, n_vocab);
	out->logprob = 0.0f;
	out->n_top = 0;
	float mx;
	st = run_steps_1_3(s, logits, &mx, "sg_sampler_sample_spec");
	if (st) return st;
	prepared pr;
	prepare(s, s->work, n_vocab, vocab_top_k(s), mx, &pr);
	int32_t tok = pr.greedy_tok;
	if (tok < 0) {
		/* keep the guess with probability min(1, p/q); else draw from what p has beyond q */
		double px = prepared_p(&pr, guess), qx = q ? (double)q[guess] : 1.0;
		double u = rng_u01(s->rng);
		if (qx > 0.0 && u * qx < px) tok = guess;
		else if ((tok = draw_residual(s, &pr, guess, q)) < 0) tok = draw(s, &pr);
	}
	out->token = tok;
	if (s->p.logprobs) fill_logprobs(s, logits, mx, tok, out);
	return SG_OK;
}

/* ---- candidate rows (sampler.h) ---- */

/* The ids bias and penalties change, for sg_sampler_top_request: their number, at most cap. */
static int32_t changed_ids(const sg_sampler *s, int32_t *ids)
{
	int32_t n = 0;
	for (size_t i = 0; i < s->n_bias; i++) ids[n++] = s->bias[i].token;
	if (s->pen_on)
		for (int32_t i = 0; i < s->n_distinct; i++) ids[n++] = s->distinct[i];
	return n;
}

int sg_sampler_top_request(const sg_sampler *s, int32_t *k, int32_t *ids, int32_t cap, int32_t *m)
{
	const sg_sampler_params *p = &s->p;
	if (p->logprobs) return 0;
	int32_t kk = p->temperature == 0.0f ? 1 : vocab_top_k(s);
	int64_t mc = (int64_t)s->n_bias + (s->pen_on ? s->cap_distinct : 0);
	/* the candidate row (k + m entries before merging) must fit the sampler's scratch, and is
	 * only worth it well below the vocabulary */
	if (!kk || mc > cap || mc > SG_SAMPLER_TOP_MAX_IDS || kk + 2 * mc > s->n_vocab / 2) return 0;
	int32_t n = changed_ids(s, ids);
	for (int32_t i = n; i < mc; i++) ids[i] = -1;
	*k = kk + (int32_t)mc;
	*m = (int32_t)mc;
	return 1;
}

/* The bias entry of token id, or NULL. */
static const float *bias_of(const sg_sampler *s, int32_t id)
{
	size_t lo = 0, hi = s->n_bias;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (s->bias[mid].token < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < s->n_bias && s->bias[lo].token == id ? &s->bias[lo].bias : NULL;
}

sg_status sg_sampler_sample_top(sg_sampler *s, const int32_t *top_ids, const float *top_v, int32_t n_top,
				const int32_t *ids, const float *v, int32_t m, sg_sample_result *out)
{
	const char *fn = "sg_sampler_sample_top";
	if (!out || (n_top && (!top_ids || !top_v)) || (m && (!ids || !v)))
		return sg_error(SG_ERR_INVALID_ARG, "%s: candidates and out are required", fn);
	if (n_top < 1 || m < 0 || (int64_t)n_top + m > s->n_vocab)
		return sg_error(SG_ERR_INVALID_ARG, "%s: %d + %d candidates for a vocabulary of %d", fn, n_top, m, s->n_vocab);
	if (s->p.logprobs || (s->p.temperature != 0.0f && !vocab_top_k(s)))
		return sg_error(SG_ERR_INVALID_ARG, "%s: %s needs the full row of logits", fn,
				s->p.logprobs ? "log-probabilities" : "sampling without top-k");
	out->logprob = 0.0f;
	out->n_top = 0;
	/* The candidate row in id order, each token once. */
	cand *c = s->ca;
	int32_t n = 0;
	for (int32_t i = 0; i < n_top + m; i++) {
		int32_t id = i < n_top ? top_ids[i] : ids[i - n_top];
		if (id < 0 && i >= n_top) continue;
		if (id < 0 || id >= s->n_vocab)
			return sg_error(SG_ERR_RANGE, "%s: candidate id %d is outside [0, %d)", fn, id, s->n_vocab);
		c[n++] = (cand){i < n_top ? top_v[i] : v[i - n_top], id};
	}
	qsort(c, (size_t)n, sizeof(*c), cmp_cand_id);
	int32_t w = 0;
	float mx = -INFINITY;
	for (int32_t i = 0; i < n; i++) {
		if (w && c[i].id == s->cid[w - 1]) continue;
		int32_t id = c[i].id;
		float x = adjust(s, sanitize(c[i].v), bias_of(s, id), s->pen_on ? s->counts[id] : 0);
		s->cid[w] = id;
		s->work[w++] = x;
		mx = x > mx ? x : mx;
	}
	if (mx == -INFINITY) return all_banned(s, fn);
	prepared pr;
	int32_t k = s->p.top_k < w ? s->p.top_k : w;
	prepare(s, s->work, w, k, mx, &pr);
	int32_t at = pr.greedy_tok >= 0 ? pr.greedy_tok : draw(s, &pr);
	out->token = s->cid[at];
	return SG_OK;
}
