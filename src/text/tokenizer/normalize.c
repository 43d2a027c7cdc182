/* Normalizers of tokenizer.json: Unicode forms (utf8proc), Lowercase, Replace, Prepend, Strip,
 * StripAccents, BertNormalizer, Precompiled (SentencePiece's charsmap, charsmap.c), Sequence. Each step rewrites the whole string; the reference
 * also tracks offsets, which ids do not need. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/alloc.h"
#include "base/error.h"
#include "text/tokenizer/tokenizer_int.h"

enum { N_NFC = 1, N_NFD, N_NFKC, N_NFKD, N_LOWER, N_REPLACE, N_PREPEND, N_STRIP, N_STRIP_ACCENTS, N_BERT, N_PRECOMPILED };

struct norm_step {
	int kind;
	char *a, *b; /* Replace: literal pattern (NULL if regex) and content; Prepend: a */
	size_t an, bn;
	sg_regex re; /* Replace with a Regex pattern */
	int left, right;                               /* Strip */
	int clean, chinese, strip_accents, lowercase; /* BertNormalizer */
	sg_charsmap *map;                             /* Precompiled */
};

static sg_status parse_one(const json_t *j, sg_normalizer *nz);

static sg_status push_step(sg_normalizer *nz, const norm_step *s)
{
	norm_step *v = sg_realloc(nz->steps, (size_t)(nz->n + 1) * sizeof(*v));
	if (!v) return SG_FAIL(SG_ERR_NOMEM, "normalizer step");
	nz->steps = v;
	v[nz->n++] = *s;
	return SG_OK;
}

static int jbool(const json_t *j, const char *k, int def)
{
	const json_t *v = json_object_get(j, k);
	return json_is_boolean(v) ? json_is_true(v) : def;
}

static sg_status parse_one(const json_t *j, sg_normalizer *nz)
{
	if (!j || json_is_null(j)) return SG_OK;
	const char *type = json_string_value(json_object_get(j, "type"));
	if (!type) return SG_FAIL(SG_ERR_FORMAT, "tokenizer: normalizer without a type");
	norm_step s = {0};
	if (!strcmp(type, "Sequence")) {
		const json_t *a = json_object_get(j, "normalizers");
		size_t i;
		const json_t *e;
		json_array_foreach(a, i, e)
		{
			sg_status st = parse_one(e, nz);
			if (st) return st;
		}
		return SG_OK;
	}
	if (!strcmp(type, "NFC")) s.kind = N_NFC;
	else if (!strcmp(type, "NFD")) s.kind = N_NFD;
	else if (!strcmp(type, "NFKC")) s.kind = N_NFKC;
	else if (!strcmp(type, "NFKD")) s.kind = N_NFKD;
	else if (!strcmp(type, "Lowercase")) s.kind = N_LOWER;
	else if (!strcmp(type, "StripAccents")) s.kind = N_STRIP_ACCENTS;
	else if (!strcmp(type, "Strip")) {
		s.kind = N_STRIP;
		s.left = jbool(j, "strip_left", 1);
		s.right = jbool(j, "strip_right", 1);
	} else if (!strcmp(type, "Prepend")) {
		const json_t *v = json_object_get(j, "prepend");
		if (!json_is_string(v)) return SG_FAIL(SG_ERR_FORMAT, "tokenizer: Prepend without a string");
		s.kind = N_PREPEND;
		s.an = json_string_length(v);
		s.a = sg_strndup(json_string_value(v), s.an);
		if (!s.a) return SG_FAIL(SG_ERR_NOMEM, "Prepend");
	} else if (!strcmp(type, "Replace")) {
		const char *p, *c;
		size_t pn;
		int is_re;
		sg_status st = sg_tok_pattern(json_object_get(j, "pattern"), &p, &pn, &is_re);
		if (st) return st;
		const json_t *cv = json_object_get(j, "content");
		if (!json_is_string(cv)) return SG_FAIL(SG_ERR_FORMAT, "tokenizer: Replace without content");
		c = json_string_value(cv);
		s.kind = N_REPLACE;
		s.bn = json_string_length(cv);
		s.b = sg_strndup(c, s.bn);
		if (!s.b) return SG_FAIL(SG_ERR_NOMEM, "Replace");
		if (is_re) {
			if ((st = sg_regex_compile(&s.re, p, pn))) {
				sg_free(s.b);
				return st;
			}
		} else {
			if (!pn) {
				sg_free(s.b);
				return SG_FAIL(SG_ERR_FORMAT, "tokenizer: Replace with an empty pattern");
			}
			s.an = pn;
			s.a = sg_strndup(p, pn);
			if (!s.a) return SG_FAIL(SG_ERR_NOMEM, "Replace");
		}
	} else if (!strcmp(type, "BertNormalizer")) {
		s.kind = N_BERT;
		s.clean = jbool(j, "clean_text", 1);
		s.chinese = jbool(j, "handle_chinese_chars", 1);
		s.lowercase = jbool(j, "lowercase", 1);
		s.strip_accents = jbool(j, "strip_accents", s.lowercase);
	} else if (!strcmp(type, "Precompiled")) {
		/* SentencePiece's compiled normalisation map: an empty one is the identity. */
		const json_t *mv = json_object_get(j, "precompiled_charsmap");
		if (mv && !json_is_string(mv) && !json_is_null(mv))
			return SG_FAIL(SG_ERR_FORMAT, "tokenizer: Precompiled's precompiled_charsmap must be a base64 string");
		if (!json_is_string(mv) || !json_string_length(mv)) return SG_OK;
		s.kind = N_PRECOMPILED;
		if (!(s.map = sg_calloc(1, sizeof(*s.map)))) return SG_FAIL(SG_ERR_NOMEM, "Precompiled");
		sg_status st = sg_charsmap_parse(json_string_value(mv), json_string_length(mv), s.map);
		if (st) {
			sg_free(s.map);
			return st;
		}
	} else {
		return SG_FAIL(SG_ERR_UNSUPPORTED, "tokenizer: normalizer '%s' is not supported", type);
	}
	sg_status st = push_step(nz, &s);
	if (st) {
		sg_free(s.a);
		sg_free(s.b);
		if (s.map) sg_charsmap_free(s.map);
		sg_free(s.map);
	}
	return st;
}

sg_status sg_norm_parse(const json_t *j, sg_normalizer *out)
{
	memset(out, 0, sizeof(*out));
	sg_status st = parse_one(j, out);
	if (st) sg_norm_free(out);
	return st;
}

void sg_norm_free(sg_normalizer *nz)
{
	for (int i = 0; i < nz->n; i++) {
		sg_free(nz->steps[i].a);
		sg_free(nz->steps[i].b);
		sg_regex_free(&nz->steps[i].re);
		if (nz->steps[i].map) sg_charsmap_free(nz->steps[i].map);
		sg_free(nz->steps[i].map);
	}
	sg_free(nz->steps);
	nz->steps = NULL;
	nz->n = 0;
}

static int is_ascii(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] >= 0x80) return 0;
	return 1;
}

static sg_status unicode_form(const char *s, size_t n, int opts, sg_buf *out)
{
	if (is_ascii(s, n)) return sg_buf_put(out, s, n) ? SG_FAIL(SG_ERR_NOMEM, "normalize") : SG_OK;
	utf8proc_uint8_t *dst = NULL;
	utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst,
					  (utf8proc_option_t)(opts | UTF8PROC_STABLE));
	if (r < 0) return SG_FAIL(SG_ERR_INVALID_ARG, "normalize: %s", utf8proc_errmsg(r));
	int bad = sg_buf_put(out, dst, (size_t)r);
	free(dst);
	return bad ? SG_FAIL(SG_ERR_NOMEM, "normalize") : SG_OK;
}

/* char::to_lowercase, one char at a time as the reference does (no final-sigma context). */
static int put_lower(sg_buf *out, uint32_t c)
{
	if (c == 0x130) return sg_buf_put(out, "i\xCC\x87", 3);
	return sg_buf_put_cp(out, (uint32_t)utf8proc_tolower((utf8proc_int32_t)c));
}

static sg_status lower(const char *s, size_t n, sg_buf *out)
{
	for (size_t i = 0; i < n;) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x80) {
			if (sg_buf_putc(out, (char)(c >= 'A' && c <= 'Z' ? c + 32 : c))) goto oom;
			i++;
			continue;
		}
		uint32_t cp;
		i += (size_t)sg_uc_next(s + i, n - i, &cp);
		if (put_lower(out, cp)) goto oom;
	}
	return SG_OK;
oom:
	return SG_FAIL(SG_ERR_NOMEM, "lowercase");
}

static sg_status strip_accents(const char *s, size_t n, int bert_marks, sg_buf *out)
{
	sg_buf tmp = {0};
	sg_status st = unicode_form(s, n, UTF8PROC_DECOMPOSE, &tmp);
	for (size_t i = 0; !st && i < tmp.n;) {
		uint32_t cp;
		int k = sg_uc_next(tmp.p + i, tmp.n - i, &cp);
		int mark = bert_marks ? sg_bert_is_mark(cp) : sg_uc_is_mark(cp);
		if (!mark && sg_buf_put(out, tmp.p + i, (size_t)k)) st = SG_FAIL(SG_ERR_NOMEM, "strip accents");
		i += (size_t)k;
	}
	sg_free(tmp.p);
	return st;
}

static sg_status bert(const norm_step *ns, const char *s, size_t n, sg_buf *out)
{
	sg_buf a = {0}, b = {0};
	sg_status st = SG_OK;
	for (size_t i = 0; i < n;) {
		uint32_t c;
		int k = sg_uc_next(s + i, n - i, &c);
		i += (size_t)k;
		if (ns->clean) {
			if (sg_bert_is_removed(c)) continue;
			if (c == '\t' || c == '\n' || c == '\r' || sg_bert_is_space(c)) c = ' ';
		}
		int bad;
		if (ns->chinese && sg_uc_is_cjk(c)) bad = sg_buf_putc(&a, ' ') || sg_buf_put_cp(&a, c) || sg_buf_putc(&a, ' ');
		else bad = sg_buf_put_cp(&a, c);
		if (bad) {
			st = SG_FAIL(SG_ERR_NOMEM, "BertNormalizer");
			goto done;
		}
	}
	if (!a.p && sg_buf_reserve(&a, 1)) {
		st = SG_FAIL(SG_ERR_NOMEM, "BertNormalizer");
		goto done;
	}
	const char *cur = a.p;
	size_t curn = a.n;
	if (ns->strip_accents) {
		if ((st = strip_accents(cur, curn, 1, &b))) goto done;
		if (!b.p && sg_buf_reserve(&b, 1)) goto done;
		cur = b.p;
		curn = b.n;
	}
	st = ns->lowercase ? lower(cur, curn, out) : (sg_buf_put(out, cur, curn) ? SG_FAIL(SG_ERR_NOMEM, "bert") : SG_OK);
done:
	sg_free(a.p);
	sg_free(b.p);
	return st;
}

static sg_status replace(const norm_step *ns, const char *s, size_t n, sg_buf *out)
{
	size_t i = 0;
	if (ns->a) {
		while (i < n) {
			const char *f = ns->an <= n - i ? memmem(s + i, n - i, ns->a, ns->an) : NULL;
			if (!f) break;
			size_t at = (size_t)(f - s);
			if (sg_buf_put(out, s + i, at - i) || sg_buf_put(out, ns->b, ns->bn)) goto oom;
			i = at + ns->an;
		}
	} else {
		size_t ms, me;
		int r;
		while (i <= n && (r = sg_regex_next(&ns->re, s, n, i, &ms, &me)) == 1) {
			if (sg_buf_put(out, s + i, ms - i) || sg_buf_put(out, ns->b, ns->bn)) goto oom;
			if (me == ms) {
				/* An empty match: keep the next char and move past it. */
				uint32_t cp;
				int k = ms < n ? sg_uc_next(s + ms, n - ms, &cp) : 1;
				if (ms < n && sg_buf_put(out, s + ms, (size_t)k)) goto oom;
				me = ms + (size_t)k;
			}
			i = me;
		}
		if (i > n) i = n;
	}
	if (sg_buf_put(out, s + i, n - i)) goto oom;
	return SG_OK;
oom:
	return SG_FAIL(SG_ERR_NOMEM, "Replace");
}

static sg_status strip(const norm_step *ns, const char *s, size_t n, sg_buf *out)
{
	size_t b = 0, e = n;
	uint32_t cp;
	if (ns->left)
		while (b < e) {
			int k = sg_uc_next(s + b, e - b, &cp);
			if (!sg_uc_is_whitespace(cp)) break;
			b += (size_t)k;
		}
	if (ns->right)
		while (e > b) {
			size_t p = e - 1;
			while (p > b && ((unsigned char)s[p] & 0xC0) == 0x80) p--;
			sg_uc_next(s + p, e - p, &cp);
			if (!sg_uc_is_whitespace(cp)) break;
			e = p;
		}
	return sg_buf_put(out, s + b, e - b) ? SG_FAIL(SG_ERR_NOMEM, "Strip") : SG_OK;
}

static sg_status step(const norm_step *ns, const char *s, size_t n, sg_buf *out)
{
	switch (ns->kind) {
	case N_NFC: return unicode_form(s, n, UTF8PROC_COMPOSE, out);
	case N_NFD: return unicode_form(s, n, UTF8PROC_DECOMPOSE, out);
	case N_NFKC: return unicode_form(s, n, UTF8PROC_COMPOSE | UTF8PROC_COMPAT, out);
	case N_NFKD: return unicode_form(s, n, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, out);
	case N_LOWER: return lower(s, n, out);
	case N_STRIP_ACCENTS: return strip_accents(s, n, 0, out);
	case N_BERT: return bert(ns, s, n, out);
	case N_REPLACE: return replace(ns, s, n, out);
	case N_STRIP: return strip(ns, s, n, out);
	case N_PRECOMPILED: return sg_charsmap_apply(ns->map, s, n, out);
	case N_PREPEND:
		if (n && sg_buf_put(out, ns->a, ns->an)) return SG_FAIL(SG_ERR_NOMEM, "Prepend");
		return sg_buf_put(out, s, n) ? SG_FAIL(SG_ERR_NOMEM, "Prepend") : SG_OK;
	}
	return SG_FAIL(SG_ERR_INTERNAL, "normalizer kind %d", ns->kind);
}

sg_status sg_norm_apply(const sg_normalizer *nz, const char *s, size_t n, sg_buf *out)
{
	out->n = 0;
	if (sg_buf_reserve(out, n)) return SG_FAIL(SG_ERR_NOMEM, "normalize");
	if (!nz->n) {
		sg_buf_put(out, s, n);
		return SG_OK;
	}
	sg_buf tmp = {0};
	sg_status st = SG_OK;
	const char *cur = s;
	size_t curn = n;
	for (int i = 0; i < nz->n && !st; i++) {
		/* Ping-pong between out and tmp; the last step writes into out. */
		sg_buf *dst = ((nz->n - 1 - i) % 2 == 0) ? out : &tmp;
		sg_buf hold = {0};
		if (cur == dst->p) {
			hold = *dst; /* source and destination are the same buffer: detach the source */
			*dst = (sg_buf){0};
		}
		dst->n = 0;
		st = step(&nz->steps[i], cur, curn, dst);
		if (!st && !dst->p && sg_buf_reserve(dst, 1)) st = SG_FAIL(SG_ERR_NOMEM, "normalize");
		sg_free(hold.p);
		cur = dst->p;
		curn = dst->n;
	}
	sg_free(tmp.p);
	return st;
}
