/* Stop conditions of one generation: end-of-sequence token ids, stop strings over the streamed
 * text, and the max_tokens budget. The generation loop feeds every sampled token with its
 * detokenized piece and emits exactly the text this module hands back.
 *
 * Stop strings: the text is matched byte for byte as it streams, so a stop string may span any
 * number of tokens and cut UTF-8 sequences anywhere. The matcher never hands out a byte that
 * could still turn out to be the start of a stop string: it holds back the longest tail of the
 * text that is a proper prefix of some stop string, and emits it once the next piece rules the
 * match out (or at the end). It also holds back a trailing incomplete UTF-8 sequence, so a
 * caller fed raw byte pieces still emits whole characters. When a stop string completes,
 * generation stops at the earliest byte where any stop string is complete (the result does not
 * depend on how the text was cut into pieces); among stop strings ending at that byte, the
 * longest is reported. Text before it is emitted, the stop string and anything after it are not
 * (OpenAI's and llama.cpp's behaviour).
 *
 * Example:
 *
 *     const char *stops[] = {"\nUser:"};
 *     sg_stop_params sp = {.eos_ids = eos, .n_eos = 1, .stop_strings = stops, .n_stop_strings = 1,
 *                          .max_tokens = 256};
 *     sg_stop *stop;
 *     if (sg_stop_create(&sp, &stop)) return ...;
 *     for (;;) {
 *             int32_t tok = ...sample...;
 *             sg_stop_result r;
 *             sg_stop_next(stop, tok, piece, piece_len, &r);
 *             emit(r.text, r.len);
 *             if (r.finish) break;
 *     }
 *     sg_stop_free(stop);
 */
#ifndef SG_ENGINE_STOP_H
#define SG_ENGINE_STOP_H

#include <stddef.h>
#include <stdint.h>

#include "saragossa.h"

#define SG_STOP_MAX_STRINGS 64
#define SG_STOP_MAX_LEN     1024 /* bytes of one stop string */
#define SG_STOP_MAX_EOS     64

typedef struct sg_stop sg_stop;

typedef enum sg_finish {
	SG_FINISH_NONE = 0,    /* keep generating */
	SG_FINISH_EOS,         /* an end-of-sequence / end-of-turn token was sampled */
	SG_FINISH_STOP_STRING, /* a stop string completed */
	SG_FINISH_LENGTH,      /* max_tokens tokens were generated */
} sg_finish;

typedef struct sg_stop_params {
	const int32_t *eos_ids; /* [n_eos] EOS/EOT ids (>= 0; duplicates allowed); copied */
	size_t n_eos;
	const char *const *stop_strings; /* [n_stop_strings] non-empty, valid UTF-8; copied */
	const size_t *stop_lens; /* [n_stop_strings] byte lengths (a string may hold a NUL byte, as
				  * JSON's \u0000 does), or NULL: each string ends at its NUL */
	size_t n_stop_strings;
	int32_t max_tokens; /* >= 0; 0 = no limit here (the caller bounds by the context) */
} sg_stop_params;

typedef struct sg_stop_result {
	const char *text; /* [len] bytes to emit now; valid until the next call on this sg_stop */
	size_t len;
	sg_finish finish;   /* SG_FINISH_NONE while generation goes on */
	int32_t stop_index; /* which stop string completed (SG_FINISH_STOP_STRING), else -1 */
} sg_stop_result;

/* Validates and copies p. SG_ERR_INVALID_ARG names the offending entry (an empty stop string,
 * one longer than SG_STOP_MAX_LEN or not valid UTF-8, a negative EOS id or max_tokens, more
 * than SG_STOP_MAX_STRINGS strings or SG_STOP_MAX_EOS ids). */
sg_status sg_stop_create(const sg_stop_params *p, sg_stop **out);
void sg_stop_free(sg_stop *s);

/* Forgets the held-back text, the token count and a finish: ready for the next generation. */
void sg_stop_reset(sg_stop *s);

/* One generated token and its text piece (may be empty or a partial UTF-8 sequence). Checks,
 * in this order: EOS id (the token's own text is not emitted; held-back text is), stop strings,
 * max_tokens (held-back text is emitted). Every call counts one token, EOS included. After a
 * finish, further calls emit nothing and repeat the finish. */
sg_status sg_stop_next(sg_stop *s, int32_t token, const char *piece, size_t len, sg_stop_result *out);

/* Text only, no token accounting (text that does not come from a sampled token). */
sg_status sg_stop_text(sg_stop *s, const char *piece, size_t len, sg_stop_result *out);

/* Ends the text (cancelled, or stopped by the caller for its own reason): emits what is held
 * back; finish stays what it was (SG_FINISH_NONE if nothing stopped). */
sg_status sg_stop_flush(sg_stop *s, sg_stop_result *out);

/* 1 if token is one of the EOS/EOT ids. */
int sg_stop_is_eos(const sg_stop *s, int32_t token);

/* Tokens counted so far by sg_stop_next. */
int32_t sg_stop_n_tokens(const sg_stop *s);

/* "eos", "stop", "length" or "none": the API maps both eos and stop to "stop". */
const char *sg_finish_str(sg_finish f);

#endif
