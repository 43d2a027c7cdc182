/* Drafters for speculative decoding (sg_gen_drafter, engine/generate.h):
 *
 * - n-gram / prompt lookup: the tokens that followed the latest earlier occurrence of the
 *   history's last n tokens (n from ngram_max down to ngram_min), no model. Pays where the answer
 *   repeats its context: a file being edited, code quoted back, a list continued.
 * - a draft model: a smaller model with the same vocabulary, decoding greedily in a session of
 *   its own that is kept in step with the target's history (its common prefix kept, the rest
 *   evaluated); a draft stops early at a token the draft model is unsure of (SARAGOSSA_SPEC_P_MIN).
 *
 * Usage:
 *
 *     sg_drafter *d;
 *     if (sg_drafter_ngram(SG_DRAFT_NGRAM_MIN, SG_DRAFT_NGRAM_MAX, &d)) ... sg_last_error() ...
 *     p.drafter = sg_drafter_ops(d); p.draft_max = 8;
 *     sg_generate(...);
 *     sg_drafter_free(d);
 */
#ifndef SG_ENGINE_DRAFT_H
#define SG_ENGINE_DRAFT_H

#include <stdint.h>

#include "engine/generate.h"
#include "saragossa.h"

typedef struct sg_drafter sg_drafter;
typedef struct sg_lm sg_lm;
typedef struct sg_session sg_session;

/* The n-gram sizes the CLI and the server use: a single repeated token (a common word) guesses
 * wrong too often to pay for its verify step. */
#define SG_DRAFT_NGRAM_MIN 2
#define SG_DRAFT_NGRAM_MAX 4

/* An n-gram drafter matching suffixes of ngram_min..ngram_max tokens (1 <= min <= max <= 64). */
sg_status sg_drafter_ngram(int ngram_min, int ngram_max, sg_drafter **out);
/* A draft-model drafter decoding in the session `draft` (borrowed: it must outlive the drafter,
 * and belongs to it: nothing else may evaluate in it). target_vocab: the target's vocabulary
 * size; a draft id at or past it ends a draft. */
sg_status sg_drafter_model(sg_session *draft, int32_t target_vocab, sg_drafter **out);
/* An MTP drafter: the target's own multi-token-prediction module (Qwen3-Next / Qwen3.5 mtp.*
 * tensors), run in the target's session `target` (borrowed; the drafter turns the module on
 * there, sg_session_mtp_enable). It guesses greedily from the hidden state of the session's last
 * position, so it guesses only when the history is the session's. SG_ERR_UNSUPPORTED when the
 * model has no module (or SARAGOSSA_SPEC_MTP=0 kept it from loading). */
sg_status sg_drafter_mtp(sg_session *target, sg_drafter **out);
/* Gives an n-gram drafter a reference text (ids copied; n 0 clears it) to search where the
 * history has no match: a predicted answer (OpenAI's `prediction`), a file about to be edited. */
sg_status sg_drafter_ngram_reference(sg_drafter *d, const int32_t *ids, size_t n);
const sg_gen_drafter *sg_drafter_ops(const sg_drafter *d);
void sg_drafter_free(sg_drafter *d);

/* SG_OK when draft and target tokenize alike: the same vocabulary size (within the smaller
 * embedding table) and the same bytes for every token id both have; else SG_ERR_INVALID_ARG
 * naming the first difference. */
sg_status sg_drafter_check_vocab(const sg_lm *target, const sg_lm *draft);

/* The flag that switches a drafter kind off ("SARAGOSSA_SPEC_NGRAM", ...), and whether it is on
 * (SARAGOSSA_SPEC too). */
int sg_drafter_enabled(const char *kind);

#endif
