/* Base64 decoding (base64.h). */
#include "base/base64.h"

#include <stdint.h>

#include "base/alloc.h"

static int b64_value(unsigned char c)
{
	if (c >= 'A' && c <= 'Z') return c - 'A';
	if (c >= 'a' && c <= 'z') return c - 'a' + 26;
	if (c >= '0' && c <= '9') return c - '0' + 52;
	if (c == '+') return 62;
	if (c == '/') return 63;
	return -1;
}

int sg_base64_decode(const char *s, size_t n, unsigned char **out, size_t *out_n, size_t *bad)
{
	*out = NULL;
	*out_n = 0;
	*bad = 0;
	unsigned char *o = sg_malloc(n / 4 * 3 + 4);
	if (!o) return -2;
	size_t k = 0, quad = 0, pad = 0;
	uint32_t acc = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
		if (c == '=') {
			/* padding: only the last one or two characters of the last quad */
			if (quad < 2 || ++pad > 2) goto fail_at;
			acc <<= 6;
			quad++;
		} else {
			int v = b64_value(c);
			if (v < 0 || pad) goto fail_at;
			acc = acc << 6 | (uint32_t)v;
			quad++;
		}
		if (quad == 4) {
			o[k++] = (unsigned char)(acc >> 16);
			if (pad < 2) o[k++] = (unsigned char)(acc >> 8);
			if (pad < 1) o[k++] = (unsigned char)acc;
			quad = 0, acc = 0;
			if (pad) {
				/* nothing but white space after the padding */
				for (size_t j = i + 1; j < n; j++)
					if (s[j] != ' ' && s[j] != '\t' && s[j] != '\n' && s[j] != '\r') {
						i = j;
						goto fail_at;
					}
				break;
			}
		}
		continue;
	fail_at:
		*bad = i;
		sg_free(o);
		return -1;
	}
	if (quad) {
		/* unpadded tail: 2 or 3 characters give 1 or 2 bytes */
		if (quad == 1) {
			*bad = n;
			sg_free(o);
			return -1;
		}
		acc <<= 6 * (4 - quad);
		o[k++] = (unsigned char)(acc >> 16);
		if (quad == 3) o[k++] = (unsigned char)(acc >> 8);
	}
	*out = o;
	*out_n = k;
	return 0;
}
