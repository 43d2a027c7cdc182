/*
 * SentencePiece's compiled normalisation map: the "precompiled_charsmap" of a Precompiled
 * normalizer (XLM-R, T5, ALBERT, mBART), as HF `tokenizers` runs it.
 *
 * The blob (base64 in tokenizer.json): a little-endian u32 giving the trie's size in bytes, the
 * trie (a darts-clone double array of u32 units), then the replacement strings, each ended by a
 * NUL. A trie key is a byte string; its value is the offset of its replacement in the strings.
 * Unit fields: label = u & (bit 31 | 0xFF), has_leaf = bit 8, value = u & 0x7FFFFFFF, offset =
 * (u >> 10) << (bit 9 ? 8 : 0); a walk starts at unit 0, moves by node ^= offset(unit), then per
 * key byte c: node ^= c, the unit there must carry label c, node ^= its offset, and where it has
 * a leaf the unit at the new node holds the value.
 *
 * Normalising as the reference does: the text is cut into extended grapheme clusters; a cluster
 * shorter than 6 bytes whose bytes start with a key (the SHORTEST key that is a prefix: the
 * reference takes the first result of a common-prefix search) becomes that key's replacement,
 * whatever follows the key inside the cluster; otherwise each character is looked up alone the
 * same way and kept when no key starts it. A blob the reference would refuse (too short, strings
 * not UTF-8) is an error; a trie that walks outside itself or points outside the strings (where
 * the reference would panic) matches nothing there.
 */
#include <string.h>
#include <utf8proc.h>

#include "base/alloc.h"
#include "base/base64.h"
#include "base/error.h"
#include "base/utf8.h"
#include "text/tokenizer/tokenizer_int.h"

/* Standard base64 with padding and nothing else (what the reference writes and accepts). */
static sg_status b64_decode(const char *s, size_t n, uint8_t **out, size_t *out_n)
{
	if (n % 4) return SG_FAIL(SG_ERR_FORMAT, "tokenizer: precompiled_charsmap is not base64 (%zu characters)", n);
	size_t bad = 0;
	while (bad < n && !strchr(" \t\r\n", s[bad])) bad++;
	if (bad < n) return SG_FAIL(SG_ERR_FORMAT, "tokenizer: precompiled_charsmap is not base64 (byte %zu)", bad);
	int r = sg_base64_decode(s, n, out, out_n, &bad);
	if (r == -2) return SG_FAIL(SG_ERR_NOMEM, "precompiled_charsmap");
	if (r) return SG_FAIL(SG_ERR_FORMAT, "tokenizer: precompiled_charsmap is not base64 (byte %zu)", bad);
	return SG_OK;
}

sg_status sg_charsmap_parse_blob(const uint8_t *b, size_t n, sg_charsmap *out)
{
	memset(out, 0, sizeof(*out));
	if (n < 4)
		return SG_FAIL(SG_ERR_FORMAT, "tokenizer: precompiled_charsmap of %zu bytes has no trie size",
		               n);
	uint32_t tsize = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
	size_t nu = tsize / 4;
	if (nu > (n - 4) / 4)
		return SG_FAIL(SG_ERR_FORMAT,
		               "tokenizer: precompiled_charsmap trie of %u bytes in a blob of %zu", tsize, n);
	const uint8_t *strs = b + 4 + nu * 4;
	size_t ns = n - 4 - nu * 4;
	if (!sg_utf8_valid(strs, ns))
		return SG_FAIL(SG_ERR_FORMAT, "tokenizer: precompiled_charsmap strings are not UTF-8");
	out->unit = sg_malloc((nu ? nu : 1) * sizeof(uint32_t));
	out->norm = sg_malloc(ns ? ns : 1);
	if (!out->unit || !out->norm) {
		sg_charsmap_free(out);
		return SG_FAIL(SG_ERR_NOMEM, "precompiled_charsmap");
	}
	for (size_t i = 0; i < nu; i++) {
		const uint8_t *p = b + 4 + i * 4;
		out->unit[i] =
		    (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	}
	if (ns) memcpy(out->norm, strs, ns);
	out->n_unit = nu;
	out->n_norm = ns;
	return SG_OK;
}

sg_status sg_charsmap_parse(const char *b64, size_t n, sg_charsmap *out)
{
	uint8_t *blob = NULL;
	size_t bn = 0;
	memset(out, 0, sizeof(*out));
	sg_status st = b64_decode(b64, n, &blob, &bn);
	if (!st) st = sg_charsmap_parse_blob(blob, bn, out);
	sg_free(blob);
	return st;
}

void sg_charsmap_free(sg_charsmap *m)
{
	sg_free(m->unit);
	sg_free(m->norm);
	memset(m, 0, sizeof(*m));
}

static size_t u_offset(uint32_t u)
{
	return (size_t)(u >> 10) << ((u & (1u << 9)) >> 6);
}

/* The replacement of the shortest key that prefixes k[0..n), or NULL. */
static const char *lookup(const sg_charsmap *m, const uint8_t *k, size_t n, size_t *rn)
{
	if (!m->n_unit) return NULL;
	size_t node = u_offset(m->unit[0]);
	for (size_t i = 0; i < n && k[i]; i++) {
		node ^= k[i];
		if (node >= m->n_unit) return NULL;
		uint32_t u = m->unit[node];
		if ((u & (0x80000000u | 0xFFu)) != k[i]) return NULL;
		node ^= u_offset(u);
		if (node >= m->n_unit) return NULL;
		if (!((u >> 8) & 1)) continue;
		size_t v = m->unit[node] & 0x7FFFFFFFu;
		/* past the strings, or inside a character: the reference would panic; no match */
		if (v > m->n_norm || (v < m->n_norm && ((unsigned char)m->norm[v] & 0xC0) == 0x80))
			return NULL;
		const char *e = v < m->n_norm ? memchr(m->norm + v, 0, m->n_norm - v) : NULL;
		*rn = e ? (size_t)(e - (m->norm + v)) : m->n_norm - v;
		return m->norm + v;
	}
	return NULL;
}

sg_status sg_charsmap_apply(const sg_charsmap *m, const char *s, size_t n, sg_buf *out)
{
	utf8proc_int32_t state = 0;
	size_t g = 0; /* start of the current cluster */
	uint32_t prev = 0;
	for (size_t i = 0; i <= n;) {
		uint32_t cp = 0;
		int k = i < n ? sg_uc_next(s + i, n - i, &cp) : 0;
		/* a cluster ends at the end of the text or before a break */
		int brk = i == n || (i > g && utf8proc_grapheme_break_stateful((utf8proc_int32_t)prev,
		                                                               (utf8proc_int32_t)cp, &state));
		if (brk && i > g) {
			size_t rn = 0;
			const char *r = i - g < 6 ? lookup(m, (const uint8_t *)s + g, i - g, &rn) : NULL;
			if (r) {
				if (sg_buf_put(out, r, rn)) goto oom;
			} else {
				for (size_t c = g; c < i;) {
					uint32_t x;
					int ck = sg_uc_next(s + c, i - c, &x);
					r = lookup(m, (const uint8_t *)s + c, (size_t)ck, &rn);
					if (r ? sg_buf_put(out, r, rn) : sg_buf_put(out, s + c, (size_t)ck))
						goto oom;
					c += (size_t)ck;
				}
			}
			g = i;
		}
		if (i == n) break;
		prev = cp; /* every adjacent pair goes through the break rule once, in order (state) */
		i += (size_t)k;
	}
	return SG_OK;
oom:
	return SG_FAIL(SG_ERR_NOMEM, "Precompiled");
}
