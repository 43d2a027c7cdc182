/*
 * Whisper's decoding rules on one step's logits, as the reference decoders (openai-whisper's
 * logit filters, CTranslate2's Whisper generator that faster-whisper drives) apply them: the
 * special tokens of a Whisper vocabulary, the suppressed sets, the timestamp grammar, and the
 * small measures the transcription loop decides with (log-softmax, compression ratio).
 *
 * Pure functions of their inputs: no model, no I/O. transcribe.c runs them on the model's
 * logits; the unit tests run them on synthetic ones.
 */
#ifndef SG_ENGINE_STT_RULES_H
#define SG_ENGINE_STT_RULES_H

#include <stddef.h>
#include <stdint.h>

#include "saragossa.h"
#include "text/tokenizer/tokenizer.h"

#define SG_STT_MAX_LANG 128

/* The special ids of a Whisper vocabulary. Found by their spelling in the tokenizer; the
 * timestamp tokens <|0.00|> ... <|30.00|> follow <|notimestamps|> when the tokenizer does not
 * list them (Hugging Face's tokenizer.json for the older checkpoints does not). */
typedef struct sg_stt_vocab {
	int32_t n_vocab;         /* the model's logits width */
	int32_t eot;             /* <|endoftext|> */
	int32_t sot;             /* <|startoftranscript|> */
	int32_t translate, transcribe;
	int32_t sot_lm, sot_prev; /* <|startoflm|>, <|startofprev|> */
	int32_t no_speech;       /* <|nospeech|> or <|nocaptions|> */
	int32_t no_timestamps;   /* <|notimestamps|> */
	int32_t timestamp_begin; /* <|0.00|>: each next id is 0.02 s later */
	int32_t blank;           /* the id of " " (suppressed as the first token) */
	int multilingual;        /* the vocabulary has language tokens past <|en|> */
	int n_lang;
	int32_t lang_id[SG_STT_MAX_LANG];  /* <|xx|> ids, in vocabulary order */
	char lang_code[SG_STT_MAX_LANG][8]; /* "en", "zh", ... */
} sg_stt_vocab;

/* Reads the special ids from tok for a model whose logits have n_vocab entries. A missing one
 * (the tokenizer is not a Whisper vocabulary) is SG_ERR_FORMAT naming it. */
sg_status sg_stt_vocab_init(const sg_tokenizer *tok, int32_t n_vocab, sg_stt_vocab *v);

/* The id of language code ("en", "de", ...; case-insensitive), -1 when the vocabulary has none. */
int32_t sg_stt_vocab_lang(const sg_stt_vocab *v, const char *code);
/* The code of language token id, NULL when id is not one. */
const char *sg_stt_vocab_lang_code(const sg_stt_vocab *v, int32_t id);

/* The reference's "non-speech" tokens (suppress_tokens = -1): symbols and music notes that are
 * one token alone or after a space, plus " -" and " '", and the special tokens the reference
 * always suppresses (transcribe, translate, sot, sot_prev, sot_lm, no_speech). Sorted, unique;
 * *ids is heap memory (sg_free). */
sg_status sg_stt_suppress_default(const sg_tokenizer *tok, const sg_stt_vocab *v, int32_t **ids, int *n);

/* What one decoding step forbids. */
typedef struct sg_stt_rules {
	const sg_stt_vocab *v;
	const int32_t *suppress; /* [n_suppress] ids always masked (may be NULL) */
	int n_suppress;
	int suppress_blank;      /* mask " " and <|endoftext|> as the first sampled token */
	int timestamps;          /* 0: the prompt ended with <|notimestamps|>: no timestamp rules */
	int max_initial_timestamp_index; /* the first timestamp is at most <|0.00|> + this; < 0: no bound */
} sg_stt_rules;

/* Masks (sets to -INFINITY) what the rules forbid in logits[0..n_vocab) given the tokens
 * sampled so far after the prompt, sampled[0..n_sampled): suppress_blank at the first step, the
 * suppressed ids, and with timestamps the timestamp grammar: <|notimestamps|> never; timestamps
 * in pairs (after one timestamp that follows text, only a timestamp or the end; after two in a
 * row, only text); never a timestamp earlier than the last one (nor equal to it when it closed
 * a pair, so that every segment has a length); only a timestamp, at most
 * max_initial_timestamp_index, at the first step; and only timestamps when their summed
 * probability exceeds that of every single text token. */
void sg_stt_rules_apply(const sg_stt_rules *r, const int32_t *sampled, int n_sampled, float *logits);

/* out[i] = logits[i] - logsumexp(logits) over n entries (in double, as the reference does in
 * float32 then sums; -INFINITY stays -INFINITY). out may be logits. */
void sg_stt_log_softmax(const float *logits, int n, float *out);

/* len(text) / len(zlib.compress(text)) as the reference computes it (zlib level 6): how
 * repetitive a transcript is; 0 for empty text. */
double sg_stt_compression_ratio(const char *text, size_t len);

#endif
