/* Decoders of tokenizer.json (ByteLevel, Metaspace, ByteFallback, Fuse, Strip, WordPiece,
 * Replace, BPEDecoder, Sequence). A chain maps the list of token strings to a list of strings,
 * as the reference's decode_chain does, then joins them. sg_tokenizer_decode runs it; the
 * streaming detokenizer (detok.c) runs sg_tokenizer_decode. */
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/utf8.h"
#include "text/tokenizer/tokenizer_int.h"

enum { D_BYTELEVEL = 1, D_METASPACE, D_BYTEFALLBACK, D_FUSE, D_STRIP, D_WORDPIECE, D_REPLACE, D_BPE };

struct dec_step {
	int kind;
	char *a, *b; /* Replace: pattern, content; WordPiece: prefix; BPEDecoder: suffix; Strip: content */
	size_t an, bn;
	int start, stop, cleanup, prepend;
};


static sg_status parse_one(const json_t *j, sg_decoder *d)
{
	if (!j || json_is_null(j)) return SG_OK;
	const char *type = json_string_value(json_object_get(j, "type"));
	if (!type) return SG_FAIL(SG_ERR_FORMAT, "tokenizer: decoder without a type");
	if (!strcmp(type, "Sequence")) {
		const json_t *e;
		size_t i;
		json_array_foreach(json_object_get(j, "decoders"), i, e)
		{
			sg_status st = parse_one(e, d);
			if (st) return st;
		}
		return SG_OK;
	}
	dec_step s = {0};
	const char *str;
	if (!strcmp(type, "ByteLevel")) s.kind = D_BYTELEVEL;
	else if (!strcmp(type, "ByteFallback")) s.kind = D_BYTEFALLBACK;
	else if (!strcmp(type, "Fuse")) s.kind = D_FUSE;
	else if (!strcmp(type, "Metaspace")) {
		s.kind = D_METASPACE;
		str = json_string_value(json_object_get(j, "replacement"));
		s.a = sg_strdup(str ? str : "\xE2\x96\x81");
		const char *ps = json_string_value(json_object_get(j, "prepend_scheme"));
		const json_t *aps = json_object_get(j, "add_prefix_space");
		s.prepend = ps ? strcmp(ps, "never") != 0 : (json_is_boolean(aps) ? json_is_true(aps) : 1);
	} else if (!strcmp(type, "Strip")) {
		s.kind = D_STRIP;
		str = json_string_value(json_object_get(j, "content"));
		s.a = sg_strdup(str ? str : " ");
		s.start = (int)json_integer_value(json_object_get(j, "start"));
		s.stop = (int)json_integer_value(json_object_get(j, "stop"));
	} else if (!strcmp(type, "WordPiece")) {
		s.kind = D_WORDPIECE;
		str = json_string_value(json_object_get(j, "prefix"));
		s.a = sg_strdup(str ? str : "##");
		const json_t *c = json_object_get(j, "cleanup");
		s.cleanup = json_is_boolean(c) ? json_is_true(c) : 1;
	} else if (!strcmp(type, "BPEDecoder")) {
		s.kind = D_BPE;
		str = json_string_value(json_object_get(j, "suffix"));
		s.a = sg_strdup(str ? str : "</w>");
	} else if (!strcmp(type, "Replace")) {
		const char *p;
		size_t pn;
		int is_re;
		sg_status st = sg_tok_pattern(json_object_get(j, "pattern"), &p, &pn, &is_re);
		if (st) return st;
		if (is_re || !pn) return SG_FAIL(SG_ERR_UNSUPPORTED, "tokenizer: Replace decoder with a regex or empty pattern is not supported");
		const json_t *c = json_object_get(j, "content");
		s.kind = D_REPLACE;
		s.a = sg_strndup(p, pn);
		s.b = sg_strndup(json_string_value(c) ? json_string_value(c) : "", json_string_length(c));
		if (!s.b) {
			sg_free(s.a);
			s.a = NULL;
		}
	} else {
		return SG_FAIL(SG_ERR_UNSUPPORTED, "tokenizer: decoder '%s' is not supported", type);
	}
	if (s.kind != D_BYTELEVEL && s.kind != D_BYTEFALLBACK && s.kind != D_FUSE && !s.a)
		return SG_FAIL(SG_ERR_NOMEM, "decoder");
	if (s.a) s.an = strlen(s.a);
	if (s.b) s.bn = strlen(s.b);
	dec_step *v = sg_realloc(d->steps, (size_t)(d->n + 1) * sizeof(*v));
	if (!v) {
		sg_free(s.a);
		sg_free(s.b);
		return SG_FAIL(SG_ERR_NOMEM, "decoder");
	}
	d->steps = v;
	v[d->n++] = s;
	return SG_OK;
}

sg_status sg_dec_parse(const json_t *j, sg_decoder *out)
{
	memset(out, 0, sizeof(*out));
	sg_status st = parse_one(j, out);
	if (st) sg_dec_free(out);
	return st;
}

void sg_dec_free(sg_decoder *d)
{
	for (int i = 0; i < d->n; i++) {
		sg_free(d->steps[i].a);
		sg_free(d->steps[i].b);
	}
	sg_free(d->steps);
	d->steps = NULL;
	d->n = 0;
}

/* A list of strings: offsets into one buffer. */
typedef struct slist {
	sg_buf buf;
	size_t *off, *len;
	size_t n, cap;
} slist;

static int sl_add(slist *l, const char *s, size_t n)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		size_t *o = sg_realloc(l->off, cap * sizeof(size_t));
		if (!o) return -1;
		l->off = o;
		size_t *q = sg_realloc(l->len, cap * sizeof(size_t));
		if (!q) return -1;
		l->len = q;
		l->cap = cap;
	}
	size_t at = l->buf.n;
	if (sg_buf_put(&l->buf, s, n)) return -1;
	l->off[l->n] = at;
	l->len[l->n++] = n;
	return 0;
}

/* Starts a new string at the end of the buffer (filled by the caller with sg_buf_put). */
static int sl_begin(slist *l) { return sl_add(l, "", 0); }
static void sl_end(slist *l) { l->len[l->n - 1] = l->buf.n - l->off[l->n - 1]; }

static void sl_free(slist *l)
{
	sg_free(l->buf.p);
	sg_free(l->off);
	sg_free(l->len);
	memset(l, 0, sizeof(*l));
}

static int put_replaced(sg_buf *b, const char *s, size_t n, const char *pat, size_t pn, const char *rep, size_t rn)
{
	size_t i = 0;
	while (i < n) {
		const char *f = pn <= n - i ? memmem(s + i, n - i, pat, pn) : NULL;
		if (!f) break;
		size_t at = (size_t)(f - s);
		if (sg_buf_put(b, s + i, at - i) || sg_buf_put(b, rep, rn)) return -1;
		i = at + pn;
	}
	return sg_buf_put(b, s + i, n - i);
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9') return c - '0';
	if (c >= 'a' && c <= 'f') return c - 'a' + 10;
	if (c >= 'A' && c <= 'F') return c - 'A' + 10;
	return -1;
}

static int flush_bytes(slist *o, sg_buf *bytes)
{
	if (!bytes->n) return 0;
	int r = 0;
	if (sg_utf8_valid((const uint8_t *)bytes->p, bytes->n)) r = sl_add(o, bytes->p, bytes->n);
	else
		for (size_t k = 0; k < bytes->n && !r; k++) r = sl_add(o, "\xEF\xBF\xBD", 3);
	bytes->n = 0;
	return r;
}

static const char *const CLEANUPS[][2] = {
	{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
	{" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
};

static int wp_cleanup(slist *o, const char *s, size_t n)
{
	sg_buf a = {0}, b = {0};
	int r = sg_buf_put(&a, s, n);
	for (size_t k = 0; !r && k < sizeof(CLEANUPS) / sizeof(CLEANUPS[0]); k++) {
		b.n = 0;
		r = put_replaced(&b, a.p, a.n, CLEANUPS[k][0], strlen(CLEANUPS[k][0]), CLEANUPS[k][1], strlen(CLEANUPS[k][1]));
		sg_buf t = a;
		a = b;
		b = t;
	}
	if (!r) r = sl_add(o, a.p ? a.p : "", a.n);
	sg_free(a.p);
	sg_free(b.p);
	return r;
}

static int apply_step(const dec_step *d, const slist *in, slist *o)
{
	switch (d->kind) {
	case D_BYTELEVEL: {
		sg_buf raw = {0};
		int r = 0;
		for (size_t i = 0; i < in->n && !r; i++) {
			const char *s = in->buf.p + in->off[i];
			size_t n = in->len[i], at = raw.n;
			for (size_t k = 0; k < n && !r;) {
				uint32_t cp;
				int m = sg_uc_next(s + k, n - k, &cp);
				int b = sg_bytelevel_byte(cp);
				if (b < 0) {
					/* A char outside the alphabet: the token is kept as its own bytes. */
					raw.n = at;
					r = sg_buf_put(&raw, s, n);
					break;
				}
				r = sg_buf_putc(&raw, (char)b);
				k += (size_t)m;
			}
		}
		if (!r) {
			r = sl_begin(o) || sg_buf_put_lossy(&o->buf, raw.p ? raw.p : "", raw.n);
			if (!r) sl_end(o);
		}
		sg_free(raw.p);
		return r;
	}
	case D_BYTEFALLBACK: {
		sg_buf bytes = {0};
		int r = 0;
		for (size_t i = 0; i < in->n && !r; i++) {
			const char *s = in->buf.p + in->off[i];
			size_t n = in->len[i];
			int h1, h2;
			if (n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' && (h1 = hexval(s[3])) >= 0 && (h2 = hexval(s[4])) >= 0) {
				r = sg_buf_putc(&bytes, (char)(h1 * 16 + h2));
				continue;
			}
			r = flush_bytes(o, &bytes) || sl_add(o, s, n);
		}
		if (!r) r = flush_bytes(o, &bytes);
		sg_free(bytes.p);
		return r;
	}
	case D_FUSE:
		if (sl_begin(o)) return -1;
		for (size_t i = 0; i < in->n; i++)
			if (sg_buf_put(&o->buf, in->buf.p + in->off[i], in->len[i])) return -1;
		sl_end(o);
		return 0;
	case D_REPLACE:
		for (size_t i = 0; i < in->n; i++) {
			if (sl_begin(o) || put_replaced(&o->buf, in->buf.p + in->off[i], in->len[i], d->a, d->an, d->b, d->bn))
				return -1;
			sl_end(o);
		}
		return 0;
	case D_STRIP:
		for (size_t i = 0; i < in->n; i++) {
			const char *s = in->buf.p + in->off[i];
			size_t b = 0, e = in->len[i];
			for (int k = 0; k < d->start && e - b >= d->an && !memcmp(s + b, d->a, d->an); k++) b += d->an;
			for (int k = 0; k < d->stop && e - b >= d->an && !memcmp(s + e - d->an, d->a, d->an); k++) e -= d->an;
			if (sl_add(o, s + b, e - b)) return -1;
		}
		return 0;
	case D_METASPACE:
		for (size_t i = 0; i < in->n; i++) {
			size_t at = o->buf.n;
			if (sl_begin(o) || put_replaced(&o->buf, in->buf.p + in->off[i], in->len[i], d->a, d->an, " ", 1)) return -1;
			sl_end(o);
			if (i == 0 && d->prepend && o->len[o->n - 1] && o->buf.p[at] == ' ') {
				o->off[o->n - 1]++;
				o->len[o->n - 1]--;
			}
		}
		return 0;
	case D_WORDPIECE:
		for (size_t i = 0; i < in->n; i++) {
			const char *s = in->buf.p + in->off[i];
			size_t n = in->len[i];
			sg_buf t = {0};
			int r;
			if (i && n >= d->an && !memcmp(s, d->a, d->an)) r = sg_buf_put(&t, s + d->an, n - d->an);
			else if (i) r = sg_buf_putc(&t, ' ') || sg_buf_put(&t, s, n);
			else r = sg_buf_put(&t, s, n);
			if (!r) r = d->cleanup ? wp_cleanup(o, t.p ? t.p : "", t.n) : sl_add(o, t.p ? t.p : "", t.n);
			sg_free(t.p);
			if (r) return -1;
		}
		return 0;
	case D_BPE:
		for (size_t i = 0; i < in->n; i++) {
			if (sl_begin(o) || put_replaced(&o->buf, in->buf.p + in->off[i], in->len[i], d->a, d->an,
							i + 1 == in->n ? "" : " ", i + 1 == in->n ? 0 : 1))
				return -1;
			sl_end(o);
		}
		return 0;
	}
	return -1;
}

sg_status sg_dec_apply(const sg_decoder *d, const sg_str *toks, size_t n, sg_buf *out)
{
	slist a = {0}, b = {0};
	out->n = 0;
	sg_status st = SG_OK;
	for (size_t i = 0; i < n; i++)
		if (sl_add(&a, toks[i].s, toks[i].n)) goto oom;
	for (int k = 0; k < d->n; k++) {
		b.n = 0;
		b.buf.n = 0;
		if (apply_step(&d->steps[k], &a, &b)) goto oom;
		slist t = a;
		a = b;
		b = t;
	}
	if (sg_buf_reserve(out, a.buf.n)) goto oom;
	for (size_t i = 0; i < a.n; i++) {
		/* No decoder: the reference joins the tokens with spaces. */
		if (!d->n && i && sg_buf_putc(out, ' ')) goto oom;
		if (sg_buf_put(out, a.buf.p + a.off[i], a.len[i])) goto oom;
	}
	goto done;
oom:
	st = SG_FAIL(SG_ERR_NOMEM, "decode");
done:
	sl_free(&a);
	sl_free(&b);
	return st;
}
