/*
 * Text -> IPA phonemes with libespeak-ng, the way Piper's phonemizer does it, and phonemes ->
 * the ids of a voice's phoneme_id_map.
 *
 * espeak-ng speaks clause by clause: each clause's phonemes (IPA, decomposed to NFD so a phoneme
 * is one code point) are appended to the current sentence, language-switch marks "(en)" left
 * out, then the clause's punctuation: "." "?" "!" for a sentence end, ", " ": " "; " for a
 * clause; a sentence end starts a new sentence. Ids: BOS "^", then each phoneme's ids followed
 * by the pad "_", then EOS "$".
 *
 * libespeak-ng keeps global state: calls are serialised by a lock inside this module.
 */
#ifndef SG_AUDIO_PHONEMIZE_H
#define SG_AUDIO_PHONEMIZE_H

#include <stddef.h>
#include <stdint.h>

#include "saragossa.h"

/* The phonemes of a text, sentence by sentence. */
typedef struct sg_phonemes {
	uint32_t *cp;       /* [n_cp] phonemes (Unicode code points) of all sentences in order */
	size_t n_cp;
	size_t *sentence;   /* [n_sentences + 1]: sentence i is cp[sentence[i] .. sentence[i + 1]) */
	int n_sentences;
} sg_phonemes;

/* Phonemizes UTF-8 text with espeak-ng voice `voice` ("en-us"). An unknown voice is
 * SG_ERR_NOT_FOUND naming it; espeak-ng failing to start (no data) is SG_ERR_UNSUPPORTED.
 * Sentences without phonemes are dropped (a text of symbols espeak-ng does not read gives
 * none). *out is freed with sg_phonemes_free. */
sg_status sg_phonemize(const char *voice, const char *text, sg_phonemes *out);
void sg_phonemes_free(sg_phonemes *p);

/* A voice's phoneme -> ids table. */
typedef struct sg_phoneme_map {
	uint32_t *cp;     /* [n] sorted */
	int32_t *first;   /* [n] index into ids */
	int32_t *count;   /* [n] */
	int64_t *ids;     /* [n_ids] */
	size_t n, n_ids;
} sg_phoneme_map;

/* Adds phoneme key (one UTF-8 code point; other keys are SG_ERR_FORMAT) with its ids. Keys may
 * come in any order; call sg_phoneme_map_finish once after the last. */
sg_status sg_phoneme_map_add(sg_phoneme_map *m, const char *key, const int64_t *ids, size_t n);
sg_status sg_phoneme_map_finish(sg_phoneme_map *m);
void sg_phoneme_map_free(sg_phoneme_map *m);
/* The ids of code point c ([*n]), or NULL when the map lacks it. */
const int64_t *sg_phoneme_map_get(const sg_phoneme_map *m, uint32_t c, size_t *n);

/* Piper's id sequence of phonemes cp[0..n): BOS, pad, (ids, pad) per phoneme, EOS. Phonemes the
 * map lacks are skipped (as Piper does) and counted in *missing (may be NULL). The map must hold
 * "^", "$" and "_" (SG_ERR_FORMAT otherwise). *ids is freed with sg_free. */
sg_status sg_phonemes_to_ids(const sg_phoneme_map *m, const uint32_t *cp, size_t n, int64_t **ids, size_t *n_ids,
			     int *missing);

#endif
