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

/* The public part of the sampler (its parameters, sg_sampler_create, _sample, _accept, _reset,
 * _seed, _n_vocab, _free) is declared in saragossa.h; what follows is the engine's own. */

/* 1 when sampling is the plain argmax of the model's logits: temperature 0, no logit_bias, no
 * active penalty, no log-probabilities. The token is then the largest logit (lowest id on
 * ties), which a backend can find where the logits are (sg_gen_model.eval_greedy). */
int sg_sampler_plain_greedy(const sg_sampler *s);

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

/* For tests and the API's "processed" views: writes logits[n_vocab] after steps 1-3 (sanitize,
 * bias, penalties) into out[n_vocab]. Same errors as sg_sampler_sample except the ban check. */
sg_status sg_sampler_adjusted_logits(sg_sampler *s, const float *logits, int32_t n_vocab, float *out);

/* Writes the distribution step 8 draws from into probs[n_vocab] (0 for filtered tokens, sums
 * to 1; greedy: 1 on the argmax). Does not touch the RNG. */
sg_status sg_sampler_distribution(sg_sampler *s, const float *logits, int32_t n_vocab, double *probs);

/* Speculative sampling (rejection sampling, Leviathan et al. / Chen et al.): guess was drawn by a
 * drafter from q[n_vocab] (the distribution it sampled from; NULL: a point mass, the guess
 * picked without a draw). With p the distribution sg_sampler_sample draws from (steps 1-7 on
 * logits), the guess is kept with probability min(1, p(guess) / q(guess)); otherwise the token
 * is drawn from norm(max(0, p - q)), which never gives a rejected guess. The result is
 * distributed as p whatever q is. Greedy (temperature 0) gives the argmax without a draw, as
 * sg_sampler_sample does. Uses one or two draws of the RNG; the penalty window is not touched
 * (call sg_sampler_accept). Errors as sg_sampler_sample, and SG_ERR_INVALID_ARG for a guess
 * outside the vocabulary. */
sg_status sg_sampler_sample_spec(sg_sampler *s, const float *logits, int32_t n_vocab, int32_t guess, const float *q,
				 sg_sample_result *out);

#endif
