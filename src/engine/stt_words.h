/*
 * Word-level timestamps for Whisper, as faster-whisper computes them (its find_alignment and
 * add_word_timestamps over CTranslate2's align, which follows openai-whisper's timing.py):
 *
 *  1. the window's text tokens run through the decoder after the start sequence and
 *     <|notimestamps|>, then <|endoftext|>; the alignment heads' cross-attention (softmax over
 *     the window's audio frames) and each text token's probability come back (the model does
 *     that: sg_whisper_align);
 *  2. each head's weights are standardised over the tokens, median-filtered over time (width 7,
 *     reflected edges) and averaged over the heads; dynamic time warping on the negated matrix
 *     (rows <|notimestamps|> .. the last text token) gives the frame where each token starts;
 *  3. the tokens are grouped into words (at spaces and punctuation, or at every complete
 *     character for Chinese, Japanese, Thai, Lao, Burmese and Cantonese), each word spans its
 *     first token's start to the next word's, with the mean probability of its tokens;
 *  4. the reference's clean-ups: long words at sentence ends cut to twice the median word
 *     duration, punctuation merged into its neighbour word, the first words after a pause and
 *     the segment's first and last words held to the segment's own times, each segment's start
 *     and end moved to its words'.
 *
 * Pure functions of their inputs (no model): transcribe.c feeds them the model's numbers, the
 * unit tests synthetic ones.
 */
#ifndef SG_ENGINE_STT_WORDS_H
#define SG_ENGINE_STT_WORDS_H

#include <stdint.h>

#include "engine/stt_rules.h"
#include "saragossa.h"

#define SG_STT_MEDIAN_WIDTH 7

/* Step 2: attn is [n_heads][n_rows][n_keys] (overwritten: standardised and filtered in place);
 * the rows first_row .. first_row + n_text (n_text + 1 of them) are aligned. jump[0..n_text]
 * gets the audio position (in encoder frames, 20 ms each) where each of those rows starts.
 * SG_ERR_NOMEM only. */
sg_status sg_stt_align_jumps(float *attn, int n_heads, int n_rows, int n_keys, int first_row, int n_text, int32_t *jump);

/* Dynamic time warping on -x ([n][m], row-major), CTranslate2's tie-breaking (a diagonal step
 * only when strictly cheapest, then up, else left): the path from (0, 0) to (n - 1, m - 1) as
 * pairs (pi[k], pj[k]), k < *len (at most n + m - 1). SG_ERR_NOMEM only. */
sg_status sg_stt_dtw(const float *x, int n, int m, int32_t *pi, int32_t *pj, int *len);

/* One word of the split: its text (heap, sg_free) and its slice of the token list. */
typedef struct sg_stt_wtok {
	char *text;
	int begin, n; /* tokens [begin, begin + n) */
} sg_stt_wtok;

/* Step 3's split of ids[0..n) (text tokens then <|endoftext|>) into words: at every complete
 * UTF-8 character when by_char, else those pieces joined unless a piece is special, starts with
 * a space or is punctuation. *words is heap memory (sg_stt_wtok_free); the <|endoftext|> piece is
 * the last word (its text empty). */
sg_status sg_stt_split_words(const sg_tokenizer *tok, const sg_stt_vocab *v, const int32_t *ids, int n, int by_char,
			     sg_stt_wtok **words, int *n_words);
void sg_stt_wtok_free(sg_stt_wtok *w, int n);

/* 1 for the languages split at characters (no spaces between words). */
int sg_stt_lang_by_char(const char *code);

/* One segment of a window, for step 4: its tokens (text and timestamps) and times in; its words
 * (heap: each word's text and the array, as sg_stt_segment holds them) and moved times out. */
typedef struct sg_stt_wseg {
	const int32_t *tokens;
	int n_tokens;
	double start, end;
	sg_stt_word *words;
	int n_words;
} sg_stt_wseg;

/* Steps 3 and 4 for one window: seg[0..n_seg) are its segments, text[0..n_text) their text
 * tokens in order, jump[0..n_text] from sg_stt_align_jumps, prob[0..n_text) each text token's
 * probability, time_offset the window's start in seconds, last_speech the end of the last
 * speech before the window (the caller moves it to sg_stt_words_end of the window after).
 * SG_ERR_NOMEM (the words so far are freed). */
sg_status sg_stt_window_words(const sg_tokenizer *tok, const sg_stt_vocab *v, int by_char, const int32_t *text, int n_text,
			      const int32_t *jump, const float *prob, double time_offset, double last_speech,
			      sg_stt_wseg *seg, int n_seg);
/* Frees the words of seg[0..n_seg) and sets them empty. */
void sg_stt_wseg_clear(sg_stt_wseg *seg, int n_seg);

/* The reference's get_end: the end of the last word of the last segment that has words, else
 * the last segment's end; -1 when n_seg is 0. */
double sg_stt_words_end(const sg_stt_wseg *seg, int n_seg);

#endif
