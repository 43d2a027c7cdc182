/* Token sampler: turns one step's logits into a token id, with the controls people know from
 * transformers, llama.cpp and the OpenAI API, plus log-probabilities for the API.
 *
 * Pipeline, in this order (docs/sampling.md has the full story):
 *
 *   1. sanitize      NaN -> -inf (banned), +inf -> largest finite float
 *   2. logit_bias    additive (OpenAI); a bias <= -100 bans the token outright
 *   3. penalties     over the tokens of the penalty window (see penalty_last_n):
 *                    repetition (transformers RepetitionPenaltyLogitsProcessor / llama.cpp
 *                    repeat_penalty: positive logit / r, negative logit * r, once per distinct
 *                    token), then frequency and presence (OpenAI: l -= count*f + (count>0)*p)
 *        -> log-probabilities are taken here (log-softmax of these logits)
 *   4. temperature   0 = greedy: argmax, lowest id on ties, no random draw, steps 5-8 skipped
 *   5. top-k         keep the k highest logits (ties: lowest ids)
 *   6. top-p         keep the smallest prefix, by probability, whose mass reaches top_p
 *   7. min-p         keep tokens whose probability >= min_p * (highest probability)
 *   8. draw          one 64-bit draw from xoshiro256** per call, inverse CDF in id order
 *
 * Steps 4-7 follow transformers' warper order (temperature, top-k, top-p, min-p), also used by
 * vLLM; llama.cpp applies temperature last, which only changes what top-p and min-p see.
 *
 * Determinism: the token depends only on the seed, the logits and the accepted tokens. No
 * threads, no libm calls on the token's path (exp is our own, IEEE basic operations only, no
 * contraction under -std=c17), sums in a fixed order: the same inputs give the same tokens on
 * every machine, compiler and thread count.
 *
 * Scratch (a few arrays of n_vocab entries) is allocated once at creation; sampling allocates
 * nothing. A sampler is used by one thread at a time.
 */
#ifndef SG_ENGINE_SAMPLER_H
#define SG_ENGINE_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "saragossa.h"

#define SG_SAMPLER_MAX_LOGPROBS 20         /* top alternatives, as the OpenAI API allows */
#define SG_SAMPLER_SEED_RANDOM  UINT64_MAX /* seed from the OS entropy source at creation */
#define SG_SAMPLER_BAN_BIAS     (-100.0f)  /* a logit_bias at or below this bans the token */

typedef struct sg_sampler sg_sampler;

typedef struct sg_logit_bias {
	int32_t token;
	float bias; /* added to the logit; <= SG_SAMPLER_BAN_BIAS or -inf bans the token */
} sg_logit_bias;

typedef enum sg_logprobs_mode {
	SG_LOGPROBS_PROCESSED = 0, /* after logit_bias and penalties, before temperature/filters */
	SG_LOGPROBS_RAW,           /* the model's logits as given (NaN as -inf) */
} sg_logprobs_mode;

typedef struct sg_sampler_params {
	float temperature;               /* >= 0; 0 = greedy. default 0.8 */
	int32_t top_k;                   /* >= 0; 0 = off. default 40 */
	float top_p;                     /* (0, 1]; 1 = off. default 0.95 */
	float min_p;                     /* [0, 1]; 0 = off. default 0.05 */
	float repetition_penalty;        /* > 0; 1 = off. default 1 */
	float presence_penalty;          /* finite (OpenAI range -2..2); 0 = off */
	float frequency_penalty;         /* finite (OpenAI range -2..2); 0 = off */
	int32_t penalty_last_n;          /* window of accepted tokens the penalties see: N > 0 the last N,
	                                    -1 all since creation/reset, 0 none. default 64 */
	const sg_logit_bias *logit_bias; /* [n_logit_bias], copied at creation; ids distinct */
	size_t n_logit_bias;
	uint64_t seed;        /* default SG_SAMPLER_SEED_RANDOM; sg_sampler_seed() tells it */
	int logprobs;         /* 1: fill sg_sample_result.logprob and top[]. default 0 */
	int32_t top_logprobs; /* 0..SG_SAMPLER_MAX_LOGPROBS alternatives when logprobs. default 0 */
	sg_logprobs_mode logprobs_mode;
} sg_sampler_params;

typedef struct sg_token_logprob {
	int32_t token;
	float logprob;
} sg_token_logprob;

typedef struct sg_sample_result {
	int32_t token;
	float logprob; /* of token, when params.logprobs (else 0) */
	int32_t n_top; /* entries in top[]: min(top_logprobs, tokens not banned) */
	sg_token_logprob top[SG_SAMPLER_MAX_LOGPROBS]; /* highest first, ties by lowest id */
} sg_sample_result;

/* The defaults above (llama.cpp's), by value. */
sg_sampler_params sg_sampler_default_params(void);

/* Validates p and creates a sampler for logits of n_vocab entries. Every out-of-domain value
 * is refused with SG_ERR_INVALID_ARG and a message naming the parameter and the value
 * ("top_p = 1.5 is outside (0, 1]"); a logit_bias token outside [0, n_vocab) with SG_ERR_RANGE.
 * On success *out owns its copies of the bias list; free with sg_sampler_free. */
sg_status sg_sampler_create(const sg_sampler_params *p, int32_t n_vocab, sg_sampler **out);
void sg_sampler_free(sg_sampler *s);

/* The seed actually in use (the drawn one when params.seed was SG_SAMPLER_SEED_RANDOM). */
uint64_t sg_sampler_seed(const sg_sampler *s);
int32_t sg_sampler_n_vocab(const sg_sampler *s);
/* 1 when sampling is the plain argmax of the model's logits: temperature 0, no logit_bias, no
 * active penalty, no log-probabilities. The token is then the largest logit (lowest id on
 * ties), which a backend can find where the logits are (sg_gen_model.eval_greedy). */
int sg_sampler_plain_greedy(const sg_sampler *s);

/* Samples one token from logits[n_vocab] (n_vocab must be the sampler's). The token is NOT
 * added to the penalty history: call sg_sampler_accept with it (and with prompt tokens, if the
 * penalties should see them). Greedy sampling never touches the RNG; every other call consumes
 * exactly one draw. Fails with SG_ERR_INVALID_ARG when every token is banned (all logits -inf
 * or NaN after bias and penalties); the RNG is untouched then. */
sg_status sg_sampler_sample(sg_sampler *s, const float *logits, int32_t n_vocab, sg_sample_result *out);

/* Sampling from candidates, for a backend that keeps the logits in device memory: instead of the
 * whole row it hands over the few logits the draw can depend on, the k largest and those of the
 * tokens that logit_bias and the penalties change. The token is then exactly the one
 * sg_sampler_sample would give on the full row, with the same RNG step: an unchanged token in
 * the top-k after steps 1-3 is among the k unchanged ones with the largest logits, so among the
 * (top_k + changed) largest of the row; temperature and the later steps see only the top-k.
 *
 * sg_sampler_top_request says how much of the row that takes: the *k largest logits (NaN as -inf,
 * ties to the lowest ids) and the logits at ids[0..*m) (the changed tokens, then -1 padding;
 * cap >= *m entries). *k and *m stay fixed for the sampler's life, so a recorded device graph is
 * reused from token to token. Returns 0 (nothing written) when the full row is needed instead:
 * no top-k or one over most of the vocabulary, log-probabilities, or more than cap ids. */
#define SG_SAMPLER_TOP_MAX_IDS 1024
int sg_sampler_top_request(const sg_sampler *s, int32_t *k, int32_t *ids, int32_t cap, int32_t *m);
/* Samples from the candidates of a request: top_ids/top_v [n_top] the largest logits in any
 * order, v [m] the logits at the request's ids (-1 entries ignored). Same contract and errors as
 * sg_sampler_sample (log-probabilities are not available here). */
sg_status sg_sampler_sample_top(sg_sampler *s, const int32_t *top_ids, const float *top_v, int32_t n_top,
				const int32_t *ids, const float *v, int32_t m, sg_sample_result *out);

/* Appends token to the penalty history. SG_ERR_RANGE for an id outside [0, n_vocab). */
sg_status sg_sampler_accept(sg_sampler *s, int32_t token);

/* Clears the penalty history and restarts the RNG from the seed: the next calls repeat the
 * sequence of a fresh sampler. */
void sg_sampler_reset(sg_sampler *s);

/* For tests and the API's "processed" views: writes logits[n_vocab] after steps 1-3 (sanitize,
 * bias, penalties) into out[n_vocab]. Same errors as sg_sampler_sample except the ban check. */
sg_status sg_sampler_adjusted_logits(sg_sampler *s, const float *logits, int32_t n_vocab, float *out);

/* Writes the distribution step 8 draws from into probs[n_vocab] (0 for filtered tokens, sums
 * to 1; greedy: 1 on the argmax). Does not touch the RNG. */
sg_status sg_sampler_distribution(sg_sampler *s, const float *logits, int32_t n_vocab, double *probs);

#endif
