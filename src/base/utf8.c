#include "base/utf8.h"

int sg_utf8_seq_len(uint8_t c)
{
	if (c < 0x80) return 1;
	if (c < 0xC2) return 0; /* continuation, or an overlong 2-byte lead */
	if (c < 0xE0) return 2;
	if (c < 0xF0) return 3;
	if (c < 0xF5) return 4;
	return 0;
}

int sg_utf8_decode(const uint8_t *s, size_t len, uint32_t *cp)
{
	*cp = 0xFFFD;
	if (len == 0) return 0;
	int n = sg_utf8_seq_len(s[0]);
	if (n == 0 || (size_t)n > len) return 0;
	if (n == 1) return *cp = s[0], 1;
	uint32_t c = s[0] & (0x7F >> n);
	for (int i = 1; i < n; i++) {
		if ((s[i] & 0xC0) != 0x80) return 0;
		c = (c << 6) | (s[i] & 0x3F);
	}
	static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
	if (c < min[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
	*cp = c;
	return n;
}

int sg_utf8_encode(uint32_t cp, uint8_t out[4])
{
	if (cp < 0x80) return out[0] = (uint8_t)cp, 1;
	if (cp < 0x800) {
		out[0] = (uint8_t)(0xC0 | (cp >> 6));
		out[1] = (uint8_t)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
	if (cp < 0x10000) {
		out[0] = (uint8_t)(0xE0 | (cp >> 12));
		out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
		out[2] = (uint8_t)(0x80 | (cp & 0x3F));
		return 3;
	}
	if (cp > 0x10FFFF) return 0;
	out[0] = (uint8_t)(0xF0 | (cp >> 18));
	out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
	out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
	out[3] = (uint8_t)(0x80 | (cp & 0x3F));
	return 4;
}

int sg_utf8_valid(const uint8_t *s, size_t len)
{
	size_t i = 0;
	uint32_t cp;
	while (i < len) {
		if (s[i] < 0x80) {
			i++;
			continue;
		}
		int n = sg_utf8_decode(s + i, len - i, &cp);
		if (!n) return 0;
		i += (size_t)n;
	}
	return 1;
}

size_t sg_utf8_complete_prefix(const uint8_t *s, size_t len)
{
	/* only the last 3 bytes can start an unfinished sequence */
	size_t start = len > 3 ? len - 3 : 0;
	for (size_t i = len; i > start; i--) {
		uint8_t c = s[i - 1];
		if ((c & 0xC0) == 0x80) continue; /* continuation: keep looking for its lead */
		int n = sg_utf8_seq_len(c);
		if (n <= 1) return len; /* ASCII or invalid lead: complete as far as a stream goes */
		size_t have = len - (i - 1);
		if (have >= (size_t)n) return len;
		/* the bytes after the lead must be continuations for it to be completable */
		for (size_t k = i; k < len; k++)
			if ((s[k] & 0xC0) != 0x80) return len;
		return i - 1;
	}
	return len;
}
