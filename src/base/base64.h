/* Base64 (RFC 4648, the standard alphabet) for the readers of text formats that carry bytes:
 * request bodies (a reference clip), tokenizer.json's precompiled charsmap. */
#ifndef SG_BASE_BASE64_H
#define SG_BASE_BASE64_H

#include <stddef.h>

/* s[0..n), '=' padding, ASCII white space skipped, into a new buffer *out of *out_n bytes
 * (sg_free). 0; -1 with the offending offset in *bad (a character outside the alphabet, padding
 * inside the text, or a length that cannot be base64); -2 out of memory. */
int sg_base64_decode(const char *s, size_t n, unsigned char **out, size_t *out_n, size_t *bad);

#endif
