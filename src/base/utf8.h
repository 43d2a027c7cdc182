/* UTF-8 helpers: strict decoding (no overlongs, no surrogates, ≤ U+10FFFF), encoding, and the
 * boundary test the streaming detokenizer needs. */
#ifndef SG_BASE_UTF8_H
#define SG_BASE_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Decodes one code point at s[0..len). Returns its byte length (1..4) and sets *cp, or 0 if the
 * bytes there are not a valid, complete sequence (then *cp = 0xFFFD). */
int sg_utf8_decode(const uint8_t *s, size_t len, uint32_t *cp);
/* Encodes cp (≤ U+10FFFF, not a surrogate) into out[0..4); returns the length, 0 if invalid. */
int sg_utf8_encode(uint32_t cp, uint8_t out[4]);
/* 1 if the whole buffer is valid UTF-8. */
int sg_utf8_valid(const uint8_t *s, size_t len);
/* Length of the longest prefix of s that does not end inside a multi-byte sequence that could
 * still be completed by more bytes. Invalid bytes count as complete (they will never become
 * valid), so a stream never stalls on garbage. */
size_t sg_utf8_complete_prefix(const uint8_t *s, size_t len);
/* Expected length of a sequence from its lead byte (1..4), 0 for a continuation or invalid lead. */
int sg_utf8_seq_len(uint8_t lead);

#endif
