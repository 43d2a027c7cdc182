/* The generation loop: prefill a prompt, then decode token by token through the sampler, the
 * streaming detokenizer and the stop conditions, handing complete UTF-8 text to a callback.
 * The server and the CLI both run their generations through here.
 *
 * The loop talks to the model through two small tables (sg_gen_model, sg_gen_detok) so that it
 * knows nothing of a particular forward pass or tokenizer: the server and the CLI bind them to
 * an sg_session and an sg_tokenizer; the unit tests bind them to a scripted model.
 *
 * Multi-turn reuse: an sg_gen_state remembers which tokens the model's state (KV cache,
 * recurrent state) holds. A new prompt is compared with that history; the common prefix is kept
 * (rolled back to, when the model can truncate) and only the new tokens are prefilled.
 *
 * Usage:
 *
 *     sg_gen_state st;
 *     sg_gen_state_init(&st, &model_ops);
 *     sg_gen_params p = sg_gen_default_params();
 *     p.prompt = ids; p.n_prompt = n; p.max_tokens = 128; p.on_event = print_piece;
 *     sg_gen_result r;
 *     if (sg_generate(&st, &detok_ops, &p, &r)) ... sg_last_error() ...
 *     sg_gen_state_free(&st);
 */
#ifndef SG_ENGINE_GENERATE_H
#define SG_ENGINE_GENERATE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/sampler.h"
#include "engine/stop.h"
#include "saragossa.h"

/* What the loop needs from a model and its per-conversation state. */
typedef struct sg_gen_model {
	void *self;
	int32_t n_vocab; /* logits per step */
	int32_t n_ctx;   /* positions the state can hold */
	/* Appends tokens[0..n) at positions n_past.. and writes the logits of the last one into
	 * logits[n_vocab]. On failure the state is undefined: the loop resets its history. */
	sg_status (*eval)(void *self, const int32_t *tokens, size_t n, size_t n_past, float *logits);
	/* Drops every position >= n_keep, so the next eval continues at n_keep. NULL (or
	 * SG_ERR_UNSUPPORTED) when the state cannot roll back; then only n_keep == 0 (a fresh
	 * start) is asked, through `reset`. */
	sg_status (*truncate)(void *self, size_t n_keep);
	/* Forgets everything (position 0). Required. */
	sg_status (*reset)(void *self);
	/* Appends one token at n_past and gives *next, the id of its largest logit (lowest id on
	 * ties), without handing the logits over (a GPU keeps them and returns only the id). Used
	 * for plain greedy sampling (sg_sampler_plain_greedy) without a constraint. May be NULL. */
	sg_status (*eval_greedy)(void *self, int32_t token, size_t n_past, int32_t *next);
	/* Appends one token at n_past and hands over sampling candidates of its logits instead of
	 * the logits (sg_sampler_top_request): the k largest in any order (top_ids, top_v [k]) and
	 * the logits at ids[0..m) (v [m]; -1 ids are padding). Used when the sampler can draw from
	 * them (sg_sampler_sample_top) and there is no constraint. May be NULL; top_max is the
	 * largest k it takes. */
	sg_status (*eval_top)(void *self, int32_t token, size_t n_past, int32_t k, const int32_t *ids, int32_t m,
			      int32_t *top_ids, float *top_v, float *v);
	int32_t top_max;
	/* Speculative verification: appends tokens[0..n) at n_past and writes the logits of every
	 * one of them into logits[n][n_vocab], each row bit for bit what n one-token steps would
	 * give. NULL (or SG_ERR_UNSUPPORTED) where the model cannot: no speculation then. */
	sg_status (*eval_rows)(void *self, const int32_t *tokens, size_t n, size_t n_past, float *logits);
	/* eval_rows for plain greedy sampling without a constraint: only each row's argmax (lowest id
	 * on ties, as eval_greedy) into ids[n] (a GPU returns n ids instead of n rows). May be NULL. */
	sg_status (*eval_rows_greedy)(void *self, const int32_t *tokens, size_t n, size_t n_past, int32_t *ids);
	/* Before a verify step: remembers the state at n_past so that truncate may later drop any of
	 * the positions evaluated after it (a recurrent state cannot be cut back otherwise). May be
	 * NULL when truncate always works. */
	sg_status (*mark)(void *self, size_t n_past);
} sg_gen_model;

/* A drafter for speculative decoding: guesses the tokens that follow a history. The loop
 * verifies the guesses in one eval_rows step and keeps those the sampler would have picked
 * anyway, so a guess changes the speed, never the output. */
typedef struct sg_gen_drafter {
	void *self;
	const char *name; /* "ngram", "model" */
	/* Up to max (>= 1) tokens that may follow hist[0..n) into out[]; *n_out of them (0: no
	 * guess). */
	sg_status (*draft)(void *self, const int32_t *hist, size_t n, int32_t max, int32_t *out, int32_t *n_out);
	/* Sampled drafting (may be NULL): at the start of a generation that samples (temperature
	 * > 0), the sampler's parameters and seed; *on = 1 when the drafter will draw its guesses
	 * from a distribution of its own and hand it over through draft_q, 0 to guess with draft.
	 * The loop then verifies each guess by rejection sampling (sg_sampler_sample_spec): the
	 * answer has the distribution of plain sampling, though not the same tokens for a seed. */
	sg_status (*sample_begin)(void *self, const sg_sampler_params *p, uint64_t seed, int *on);
	/* As draft, and q[i * n_vocab ..] the distribution guess i was drawn from (n_vocab: the
	 * target's; 0 past the drafter's vocabulary). */
	sg_status (*draft_q)(void *self, const int32_t *hist, size_t n, int32_t max, int32_t *out, float *q, int32_t n_vocab,
			     int32_t *n_out);
} sg_gen_drafter;

/* A streaming detokenizer: ids in, complete UTF-8 pieces out. */
typedef struct sg_gen_detok {
	void *self;
	/* *piece (may be empty) stays valid until the next call. */
	sg_status (*push)(void *self, int32_t token, const char **piece, size_t *len);
	sg_status (*flush)(void *self, const char **piece, size_t *len);
	/* Starts a new text (called at the start of every generation). */
	void (*reset)(void *self);
} sg_gen_detok;

/* The tokens the model's state holds, in order. */
typedef struct sg_gen_state {
	const sg_gen_model *model; /* borrowed */
	int32_t *tokens;           /* [cap], first n valid */
	size_t n, cap;
} sg_gen_state;

/* One step of output. A token event carries the sampled token (and its logprobs); text may be
 * empty (held back by the stop matcher or the detokenizer) or cover earlier tokens. The final
 * event (is_final) carries text released at the end and no token. */
typedef struct sg_gen_event {
	const char *text; /* [len], complete UTF-8 */
	size_t len;
	int has_token;
	int32_t token;
	const sg_sample_result *sample; /* token, logprob, top[] (when the sampler computes them) */
	int is_final;
} sg_gen_event;

/* A constraint on what may be generated (constrained decoding: JSON, tool-call grammars). */
typedef struct sg_gen_constraint {
	void *self;
	/* Before each sample: set logits[i] to -INFINITY for every token not allowed now. */
	sg_status (*mask)(void *self, float *logits, int32_t n_vocab);
	/* After each sample: the chosen token (an EOS id included). */
	sg_status (*accept)(void *self, int32_t token);
	/* At the start of every generation. */
	void (*reset)(void *self);
} sg_gen_constraint;

/* Returns 0 to go on, non-zero to stop (treated like a cancellation). */
typedef int (*sg_gen_event_fn)(const sg_gen_event *ev, void *user);

typedef enum sg_gen_finish {
	SG_GEN_NONE = 0,
	SG_GEN_STOP,      /* an EOS id or a stop string */
	SG_GEN_LENGTH,    /* max_tokens, or the context is full */
	SG_GEN_CANCELLED, /* the cancel flag, or the callback asked to stop */
} sg_gen_finish;

typedef struct sg_gen_params {
	const int32_t *prompt; /* [n_prompt] the whole conversation so far (history is matched) */
	size_t n_prompt;
	sg_sampler_params sampler;
	const int32_t *eos_ids; /* [n_eos] */
	size_t n_eos;
	const char *const *stop; /* [n_stop] stop strings */
	const size_t *stop_lens; /* [n_stop] their byte lengths, or NULL: each ends at its NUL */
	size_t n_stop;
	int32_t max_tokens;        /* > 0; the context also bounds it */
	size_t prefill_chunk;      /* tokens per prefill eval (cancellation is checked between) */
	const atomic_int *cancel;  /* non-zero: stop before the next token; may be NULL */
	const sg_gen_constraint *constraint; /* may be NULL */
	/* speculative decoding: drafts of draft_min..draft_max tokens (fewer guesses are not
	 * verified) checked in one step each; NULL, or a model without eval_rows: off */
	const sg_gen_drafter *drafter;
	int32_t draft_max, draft_min;
	sg_gen_event_fn on_event;  /* may be NULL */
	void *user;
} sg_gen_params;

typedef struct sg_gen_result {
	sg_gen_finish finish;
	int32_t stop_index;  /* which stop string ended it, else -1 */
	size_t n_prompt;     /* prompt tokens */
	size_t n_cached;     /* of them, reused from the state (not prefilled) */
	size_t n_generated;  /* tokens sampled (an EOS counts) */
	double prefill_s;    /* start (sampler set-up included) to the end of the prefill */
	double ttft_s;       /* start to first sampled token */
	double decode_s;     /* first sampled token to the end */
	uint64_t seed;       /* the sampler's seed */
	/* speculative decoding (all 0 without it) */
	size_t n_verify;     /* verify steps (an eval of a sampled token and its draft) */
	size_t n_drafted;    /* draft tokens verified */
	size_t n_accepted;   /* of them, kept (the sampler picked them) */
} sg_gen_result;

/* Sampler defaults, prefill_chunk 512, max_tokens 256, draft_max 16, draft_min 1, everything
 * else empty. */
sg_gen_params sg_gen_default_params(void);

void sg_gen_state_init(sg_gen_state *st, const sg_gen_model *model);
void sg_gen_state_free(sg_gen_state *st);
/* Forgets the history and resets the model state. */
sg_status sg_gen_state_reset(sg_gen_state *st);

/* Tokens of prompt[0..n) the state already holds (the length of the common prefix). */
size_t sg_gen_common_prefix(const sg_gen_state *st, const int32_t *prompt, size_t n);

/* Runs one generation. Errors: SG_ERR_INVALID_ARG (empty prompt, bad sampler or stop
 * parameters), SG_ERR_RANGE when the prompt does not fit the context ("prompt has N tokens,
 * the context holds C"), or the model's own failure. A cancellation is not an error: it
 * returns SG_OK with finish SG_GEN_CANCELLED, and the state holds exactly the tokens evaluated
 * so far, so the next turn can reuse them. *res is filled in every case it can be. */
sg_status sg_generate(sg_gen_state *st, const sg_gen_detok *detok, const sg_gen_params *p, sg_gen_result *res);

/* "stop", "length", "cancelled" or "none". */
const char *sg_gen_finish_str(sg_gen_finish f);

#endif
