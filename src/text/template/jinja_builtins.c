/* Jinja builtins used by chat templates: filters, tests, string / dict / list methods and the
 * globals transformers provides (range, namespace, dict, raise_exception, strftime_now). Each
 * follows the Python behaviour of jinja2 3.1 and CPython, since that is what the reference
 * renderer runs; where a corner is not implemented the call fails with a message naming it. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#include "base/utf8.h"
#include "text/template/jinja_internal.h"

/* ---- argument helpers ---- */

typedef struct jargs {
	jv *v;
	const char **kw;
	size_t n;
	size_t npos;
	const char *fname;
} jargs;

static jargs mkargs(jv *v, const char **kw, size_t n, const char *fname)
{
	jargs a = {v, kw, n, 0, fname};
	while (a.npos < n && !(kw && kw[a.npos])) a.npos++;
	return a;
}

/* Positional argument i or keyword `name`; *found tells whether it was given. */
static jv arg(jctx *c, jargs *a, size_t i, const char *name, jv def)
{
	jv r = def;
	int have = 0;
	if (i < a->npos) {
		r = a->v[i];
		have = 1;
	}
	for (size_t k = a->npos; k < a->n; k++)
		if (name && !strcmp(a->kw[k], name)) {
			if (have) jfail(c, "%s() got multiple values for argument '%s'", a->fname, name);
			r = a->v[k];
			have = 1;
		}
	return r;
}

static void max_args(jctx *c, jargs *a, size_t maxpos, const char *const *names)
{
	if (a->npos > maxpos) jfail(c, "%s() takes at most %zu positional argument(s) (%zu given)", a->fname, maxpos, a->npos);
	for (size_t k = a->npos; k < a->n; k++) {
		int ok = 0;
		for (int i = 0; names && names[i]; i++)
			if (!strcmp(names[i], a->kw[k])) ok = 1;
		if (!ok) jfail(c, "%s() got an unexpected keyword argument '%s'", a->fname, a->kw[k]);
	}
}

static jv need_str(jctx *c, jv v, const char *what)
{
	if (v.t != JV_STR) {
		if (v.t == JV_UNDEF && v.hint) jfail(c, "%s", v.hint);
		jfail(c, "%s must be a string, not '%s'", what, jv_typename(v));
	}
	return v;
}

static int64_t need_int(jctx *c, jv v, const char *what)
{
	if (v.t == JV_INT) return v.i;
	if (v.t == JV_BOOL) return v.b;
	jfail(c, "%s must be an integer, not '%s'", what, jv_typename(v));
}

static char *cstr(jctx *c, jv s) { return (char *)jv_strdup(c, s.s.p, s.s.n).s.p; }

/* ---- Unicode helpers ---- */

static int py_isspace(uint32_t cp)
{
	return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
	       (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

static uint32_t cp_at(const char *p, size_t n, size_t i, int *len)
{
	uint32_t cp;
	int l = sg_utf8_decode((const uint8_t *)p + i, n - i, &cp);
	if (!l) {
		l = 1;
		cp = (uint8_t)p[i];
	}
	*len = l;
	return cp;
}

static void put_cp(jctx *c, jbuf *b, uint32_t cp)
{
	uint8_t u[4];
	int l = sg_utf8_encode(cp, u);
	if (l) jbuf_put(c, b, (const char *)u, (size_t)l);
}

/* mode: 'u' upper, 'l' lower, 'c' capitalize, 't' str.title(), 'j' jinja title */
static jv case_map(jctx *c, jv s, int mode)
{
	jbuf b = {0};
	int at_word_start = 1;
	for (size_t i = 0; i < s.s.n;) {
		int l;
		uint32_t cp = cp_at(s.s.p, s.s.n, i, &l);
		uint32_t o = cp;
		int alpha = utf8proc_category((utf8proc_int32_t)cp) <= UTF8PROC_CATEGORY_LO && cp < 0x110000 &&
			    utf8proc_category((utf8proc_int32_t)cp) != UTF8PROC_CATEGORY_CN;
		switch (mode) {
		case 'u': o = (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp); break;
		case 'l': o = (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp); break;
		case 'c':
			o = i == 0 ? (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp) : (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
			break;
		case 't':
			o = at_word_start ? (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp) : (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
			at_word_start = !alpha;
			break;
		case 'j': {
			int sep = py_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
			o = at_word_start && !sep ? (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp) : (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
			at_word_start = sep;
			break;
		}
		}
		/* the special casings Python applies (SpecialCasing.txt) that a simple mapping misses */
		if (cp == 0xDF && (mode == 'u' || ((mode == 'c' || mode == 't') && o != cp) || (mode == 'j' && o != cp)))
			jbuf_put(c, &b, mode == 'u' || mode == 'j' ? "SS" : "Ss", 2);
		else if (cp == 0x130 && o == 'i') jbuf_put(c, &b, "i\xcc\x87", 3);
		else if (cp >= 0xFB00 && cp <= 0xFB06 && o != cp) {
			static const char *const lig[] = {"FF", "FI", "FL", "FFI", "FFL", "ST", "ST"};
			static const char *const tlig[] = {"Ff", "Fi", "Fl", "Ffi", "Ffl", "St", "St"};
			const char *r = mode == 'u' || mode == 'j' ? lig[cp - 0xFB00] : tlig[cp - 0xFB00];
			jbuf_put(c, &b, r, strlen(r));
		} else if (l == 1 && cp >= 0x80) jbuf_put(c, &b, s.s.p + i, 1);
		else put_cp(c, &b, o);
		i += (size_t)l;
	}
	return jv_str(b.p ? b.p : "", b.n);
}

/* str.strip family; chars NULL strips whitespace. which: 1 left, 2 right, 3 both. */
static jv strip(jctx *c, jv s, jv chars, int which)
{
	size_t b = 0, e = s.s.n;
	if (chars.t == JV_STR) {
		if (which & 1)
			while (b < e) {
				int l;
				cp_at(s.s.p, e, b, &l);
				if (!memmem(chars.s.p, chars.s.n, s.s.p + b, (size_t)l)) break;
				b += (size_t)l;
			}
		if (which & 2)
			while (e > b) {
				size_t k = e - 1;
				while (k > b && ((uint8_t)s.s.p[k] & 0xC0) == 0x80) k--;
				if (!memmem(chars.s.p, chars.s.n, s.s.p + k, e - k)) break;
				e = k;
			}
		return jv_str(s.s.p + b, e - b);
	}
	if (chars.t != JV_NONE && chars.t != JV_UNDEF) jfail(c, "strip arg must be None or str");
	if (which & 1)
		while (b < e) {
			int l;
			uint32_t cp = cp_at(s.s.p, e, b, &l);
			if (!py_isspace(cp)) break;
			b += (size_t)l;
		}
	if (which & 2)
		while (e > b) {
			size_t k = e - 1;
			while (k > b && ((uint8_t)s.s.p[k] & 0xC0) == 0x80) k--;
			int l;
			uint32_t cp = cp_at(s.s.p, e, k, &l);
			if (!py_isspace(cp)) break;
			e = k;
		}
	return jv_str(s.s.p + b, e - b);
}

static jv split(jctx *c, jv s, jv sep, int64_t maxsplit, int from_right)
{
	jlist *l = jlist_new(c, 8);
	if (sep.t == JV_STR) {
		if (!sep.s.n) jfail(c, "empty separator");
		if (!from_right) {
			size_t i = 0;
			for (;;) {
				const char *f = maxsplit != 0 ? memmem(s.s.p + i, s.s.n - i, sep.s.p, sep.s.n) : NULL;
				if (!f) {
					jlist_push(c, l, jv_str(s.s.p + i, s.s.n - i));
					break;
				}
				size_t k = (size_t)(f - s.s.p);
				jlist_push(c, l, jv_str(s.s.p + i, k - i));
				i = k + sep.s.n;
				if (maxsplit > 0) maxsplit--;
			}
			return jv_list(l);
		}
		/* rsplit: collect from the right, then reverse */
		size_t e = s.s.n;
		for (;;) {
			const char *f = NULL;
			if (maxsplit != 0 && e >= sep.s.n)
				for (size_t k = e - sep.s.n + 1; k-- > 0;)
					if (!memcmp(s.s.p + k, sep.s.p, sep.s.n)) {
						f = s.s.p + k;
						break;
					}
			if (!f) {
				jlist_push(c, l, jv_str(s.s.p, e));
				break;
			}
			size_t k = (size_t)(f - s.s.p);
			jlist_push(c, l, jv_str(s.s.p + k + sep.s.n, e - k - sep.s.n));
			e = k;
			if (maxsplit > 0) maxsplit--;
		}
		for (size_t i = 0; i < l->n / 2; i++) {
			jv t = l->v[i];
			l->v[i] = l->v[l->n - 1 - i];
			l->v[l->n - 1 - i] = t;
		}
		return jv_list(l);
	}
	if (sep.t != JV_NONE && sep.t != JV_UNDEF) jfail(c, "must be str or None, not %s", jv_typename(sep));
	if (from_right && maxsplit >= 0) jfail(c, "unsupported construct: rsplit() on whitespace with maxsplit");
	size_t i = 0;
	while (i < s.s.n) {
		int len;
		while (i < s.s.n && py_isspace(cp_at(s.s.p, s.s.n, i, &len))) i += (size_t)len;
		if (i >= s.s.n) break;
		if (maxsplit == 0) {
			jv rest = strip(c, jv_str(s.s.p + i, s.s.n - i), jv_none(), 2);
			jlist_push(c, l, rest);
			break;
		}
		size_t b = i;
		while (i < s.s.n && !py_isspace(cp_at(s.s.p, s.s.n, i, &len))) i += (size_t)len;
		jlist_push(c, l, jv_str(s.s.p + b, i - b));
		if (maxsplit > 0) maxsplit--;
	}
	return jv_list(l);
}

static jv replace(jctx *c, jv s, jv old, jv new, int64_t count)
{
	jbuf b = {0};
	if (!old.s.n) {
		/* Python inserts `new` between every character (and at both ends) */
		size_t i = 0;
		int64_t done = 0;
		while (i <= s.s.n) {
			if (count < 0 || done < count) {
				jbuf_put(c, &b, new.s.p, new.s.n);
				done++;
			}
			if (i == s.s.n) break;
			int l;
			cp_at(s.s.p, s.s.n, i, &l);
			jbuf_put(c, &b, s.s.p + i, (size_t)l);
			i += (size_t)l;
		}
		return jv_str(b.p ? b.p : "", b.n);
	}
	size_t i = 0;
	int64_t done = 0;
	for (;;) {
		const char *f = (count < 0 || done < count) ? memmem(s.s.p + i, s.s.n - i, old.s.p, old.s.n) : NULL;
		if (!f) break;
		size_t k = (size_t)(f - s.s.p);
		jbuf_put(c, &b, s.s.p + i, k - i);
		jbuf_put(c, &b, new.s.p, new.s.n);
		i = k + old.s.n;
		done++;
	}
	jbuf_put(c, &b, s.s.p + i, s.s.n - i);
	return jv_str(b.p ? b.p : "", b.n);
}

/* Python str.format with {}, {0}, {name} and {{ }} (no format specs). */
static jv str_format(jctx *c, jv fmt, jargs *a)
{
	jbuf b = {0};
	size_t autonum = 0;
	const char *p = fmt.s.p;
	size_t n = fmt.s.n;
	for (size_t i = 0; i < n; i++) {
		if (p[i] == '{' && i + 1 < n && p[i + 1] == '{') {
			jbuf_putc(c, &b, '{');
			i++;
			continue;
		}
		if (p[i] == '}' && i + 1 < n && p[i + 1] == '}') {
			jbuf_putc(c, &b, '}');
			i++;
			continue;
		}
		if (p[i] == '}') jfail(c, "Single '}' encountered in format string");
		if (p[i] != '{') {
			jbuf_putc(c, &b, p[i]);
			continue;
		}
		size_t k = i + 1;
		while (k < n && p[k] != '}') k++;
		if (k >= n) jfail(c, "Single '{' encountered in format string");
		const char *f = p + i + 1;
		size_t fl = k - i - 1;
		if (memchr(f, ':', fl) || memchr(f, '!', fl) || memchr(f, '.', fl) || memchr(f, '[', fl))
			jfail(c, "unsupported construct: str.format field '{%.*s}'", (int)fl, f);
		jv v;
		if (!fl) {
			if (autonum >= a->npos) jfail(c, "Replacement index %zu out of range for positional args tuple", autonum);
			v = a->v[autonum++];
		} else if (f[0] >= '0' && f[0] <= '9') {
			size_t idx = (size_t)strtoul(f, NULL, 10);
			if (idx >= a->npos) jfail(c, "Replacement index %zu out of range for positional args tuple", idx);
			v = a->v[idx];
		} else {
			int found = 0;
			for (size_t j = a->npos; j < a->n; j++)
				if (strlen(a->kw[j]) == fl && !memcmp(a->kw[j], f, fl)) {
					v = a->v[j];
					found = 1;
				}
			if (!found) jfail(c, "KeyError: '%.*s'", (int)fl, f);
		}
		jv_write_str(c, &b, v);
		i = k;
	}
	return jv_str(b.p ? b.p : "", b.n);
}

/* Python's printf-style formatting, only %s %d %i %r %%: `"%s" | format(x)`. */
static jv percent_format(jctx *c, jv fmt, jargs *a)
{
	jbuf b = {0};
	size_t k = 0;
	for (size_t i = 0; i < fmt.s.n; i++) {
		char ch = fmt.s.p[i];
		if (ch != '%') {
			jbuf_putc(c, &b, ch);
			continue;
		}
		if (i + 1 >= fmt.s.n) jfail(c, "incomplete format");
		char t = fmt.s.p[++i];
		if (t == '%') {
			jbuf_putc(c, &b, '%');
			continue;
		}
		if (k >= a->npos) jfail(c, "not enough arguments for format string");
		jv v = a->v[k++];
		if (t == 's') jv_write_str(c, &b, v);
		else if (t == 'r') jv_write_repr(c, &b, v);
		else if (t == 'd' || t == 'i') {
			char tmp[32];
			if (v.t == JV_FLOAT) snprintf(tmp, sizeof(tmp), "%lld", (long long)v.f);
			else snprintf(tmp, sizeof(tmp), "%lld", (long long)need_int(c, v, "%d format"));
			jbuf_put(c, &b, tmp, strlen(tmp));
		} else jfail(c, "unsupported construct: format conversion '%%%c'", t);
	}
	if (k < a->npos) jfail(c, "not all arguments converted during string formatting");
	return jv_str(b.p ? b.p : "", b.n);
}

jv jinja_percent(jctx *c, jv fmt, jv args)
{
	if (args.t == JV_DICT) jfail(c, "unsupported construct: %%-formatting with a mapping");
	jargs a;
	if (args.t == JV_LIST && args.l->tuple) a = mkargs(args.l->v, NULL, args.l->n, "%");
	else a = mkargs(&args, NULL, 1, "%");
	a.npos = a.n;
	return percent_format(c, fmt, &a);
}

/* ---- sorting (stable, Python-compatible ordering) ---- */

typedef struct sortctx {
	jctx *c;
	jv *keys;
	int reverse;
} sortctx;

static void merge_sort(sortctx *s, size_t *idx, size_t *tmp, size_t n)
{
	if (n < 2) return;
	size_t h = n / 2;
	merge_sort(s, idx, tmp, h);
	merge_sort(s, idx + h, tmp, n - h);
	size_t i = 0, j = h, k = 0;
	while (i < h && j < n) {
		int r = jv_cmp(s->c, s->keys[idx[j]], s->keys[idx[i]]);
		if (s->reverse) r = -r;
		/* take from the right only when strictly smaller: stability */
		if (r < 0) tmp[k++] = idx[j++];
		else tmp[k++] = idx[i++];
	}
	while (i < h) tmp[k++] = idx[i++];
	while (j < n) tmp[k++] = idx[j++];
	memcpy(idx, tmp, n * sizeof(size_t));
}

static jv lower_key(jctx *c, jv v, int case_sensitive)
{
	if (!case_sensitive && v.t == JV_STR) return case_map(c, v, 'l');
	return v;
}

/* attribute paths like "a.b" or "0" (jinja2's make_attrgetter) */
static jv attr_path(jctx *c, jv item, jv attr)
{
	if (attr.t == JV_INT) return jinja_getitem(c, item, attr);
	need_str(c, attr, "attribute");
	size_t i = 0;
	jv v = item;
	while (i <= attr.s.n) {
		size_t k = i;
		while (k < attr.s.n && attr.s.p[k] != '.') k++;
		jv part = jv_str(attr.s.p + i, k - i);
		int digits = k > i;
		for (size_t j = i; j < k; j++)
			if (attr.s.p[j] < '0' || attr.s.p[j] > '9') digits = 0;
		if (digits) part = jv_int(strtoll(cstr(c, part), NULL, 10));
		v = jinja_getitem(c, v, part);
		i = k + 1;
	}
	return v;
}

static jv sorted(jctx *c, jlist *items, jv *keys, int reverse)
{
	size_t n = items->n;
	size_t *idx = jalloc(c, (n + 1) * sizeof(size_t)), *tmp = jalloc(c, (n + 1) * sizeof(size_t));
	for (size_t i = 0; i < n; i++) idx[i] = i;
	sortctx s = {c, keys, reverse};
	merge_sort(&s, idx, tmp, n);
	jlist *l = jlist_new(c, n + 1);
	for (size_t i = 0; i < n; i++) jlist_push(c, l, items->v[idx[i]]);
	return jv_list(l);
}

/* ---- filters ---- */

static const char *const FILTERS[] = {"abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e", "escape",
				      "first", "float", "forceescape", "format", "indent", "int", "items", "join", "last",
				      "length", "list", "lower", "map", "max", "min", "reject", "rejectattr", "replace",
				      "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum", "title",
				      "tojson", "trim", "unique", "upper", "wordcount", NULL};

int jinja_has_filter(const char *name)
{
	for (int i = 0; FILTERS[i]; i++)
		if (!strcmp(FILTERS[i], name)) return 1;
	return 0;
}

static const char *const TESTS[] = {"defined", "undefined", "none", "boolean", "false", "true", "integer", "float",
				    "number", "string", "mapping", "iterable", "sequence", "callable", "sameas",
				    "escaped", "eq", "equalto", "==", "ne", "!=", "lt", "lessthan", "<", "le", "<=",
				    "gt", "greaterthan", ">", "ge", ">=", "in", "odd", "even", "divisibleby", "lower",
				    "upper", "filter", "test", NULL};

int jinja_has_test(const char *name)
{
	for (int i = 0; TESTS[i]; i++)
		if (!strcmp(TESTS[i], name)) return 1;
	return 0;
}

static jv list_of(jctx *c, jv v)
{
	if (v.t == JV_LIST && !v.l->tuple && v.l->kind == JL_LIST) return v;
	jlist *src = jinja_iterate(c, v);
	jlist *l = jlist_new(c, src->n + 1);
	for (size_t i = 0; i < src->n; i++) jlist_push(c, l, src->v[i]);
	return jv_list(l);
}

static jv do_indent(jctx *c, jv s, jv width, int first, int blank)
{
	jv ind;
	if (width.t == JV_STR) ind = width;
	else {
		int64_t w = need_int(c, width, "indent width");
		if (w < 0) w = 0;
		if (w > 4096) jfail(c, "indent width %lld too large", (long long)w);
		char *sp = jalloc(c, (size_t)w + 1);
		memset(sp, ' ', (size_t)w);
		ind = jv_str(sp, (size_t)w);
	}
	/* s + "\n", then splitlines(): lines split at \n, \r\n, \r */
	jlist *lines = jlist_new(c, 8);
	size_t i = 0, b = 0;
	jbuf sb = {0};
	jbuf_put(c, &sb, s.s.p, s.s.n);
	jbuf_putc(c, &sb, '\n');
	while (i < sb.n) {
		if (sb.p[i] == '\n' || sb.p[i] == '\r') {
			jlist_push(c, lines, jv_str(sb.p + b, i - b));
			if (sb.p[i] == '\r' && i + 1 < sb.n && sb.p[i + 1] == '\n') i++;
			b = i + 1;
		}
		i++;
	}
	if (b < sb.n) jlist_push(c, lines, jv_str(sb.p + b, sb.n - b));
	jbuf o = {0};
	if (first) jbuf_put(c, &o, ind.s.p, ind.s.n);
	for (size_t k = 0; k < lines->n; k++) {
		jv ln = lines->v[k];
		if (k) {
			jbuf_putc(c, &o, '\n');
			if (blank || ln.s.n) jbuf_put(c, &o, ind.s.p, ind.s.n);
		}
		jbuf_put(c, &o, ln.s.p, ln.s.n);
	}
	return jv_str(o.p ? o.p : "", o.n);
}

static jv to_int(jctx *c, jv v, jv def, int64_t base)
{
	if (v.t == JV_INT) return v;
	if (v.t == JV_BOOL) return jv_int(v.b);
	if (v.t == JV_FLOAT) {
		if (!isfinite(v.f) || fabs(v.f) >= 9.2e18) return def;
		return jv_int((int64_t)v.f);
	}
	if (v.t == JV_STR) {
		char *s = cstr(c, v), *e;
		while (*s == ' ' || *s == '\t' || *s == '\n') s++;
		errno = 0;
		long long r = strtoll(s, &e, (int)base);
		while (*e == ' ' || *e == '\t' || *e == '\n') e++;
		if (!errno && e != s && !*e && !strchr(s, '_')) return jv_int(r);
		double f = strtod(s, &e);
		while (*e == ' ' || *e == '\t' || *e == '\n') e++;
		if (e != s && !*e && isfinite(f) && fabs(f) < 9.2e18) return jv_int((int64_t)f);
	}
	return def;
}

static jv to_float(jctx *c, jv v, jv def)
{
	if (v.t == JV_FLOAT) return v;
	if (v.t == JV_INT) return jv_float((double)v.i);
	if (v.t == JV_BOOL) return jv_float(v.b);
	if (v.t == JV_STR) {
		char *s = cstr(c, v), *e;
		while (*s == ' ' || *s == '\t' || *s == '\n') s++;
		double f = strtod(s, &e);
		while (*e == ' ' || *e == '\t' || *e == '\n') e++;
		if (e != s && !*e) return jv_float(f);
	}
	return def;
}

static int64_t length_of(jctx *c, jv v)
{
	switch (v.t) {
	case JV_UNDEF: return 0;
	case JV_STR: return (int64_t)utf8_count(v.s.p, v.s.n);
	case JV_LIST:
		if (v.l->kind == JL_GEN) jfail(c, "object of type 'generator' has no len()");
		return (int64_t)v.l->n;
	case JV_DICT:
	case JV_NS: return (int64_t)v.d->n;
	default: jfail(c, "object of type '%s' has no len()", jv_typename(v));
	}
}

static jv select_like(jctx *c, jv in, jargs *a, int by_attr, int keep)
{
	jlist *items = jinja_iterate(c, in);
	jlist *out = jlist_new(c, items->n + 1);
	out->kind = JL_GEN;
	size_t first = by_attr ? 1 : 0;
	jv attr = by_attr ? arg(c, a, 0, NULL, jv_undef(NULL)) : jv_none();
	if (by_attr && attr.t == JV_UNDEF) jfail(c, "%s() needs an attribute name", a->fname);
	jv test = arg(c, a, first, NULL, jv_none());
	for (size_t i = 0; i < items->n; i++) {
		jv v = by_attr ? attr_path(c, items->v[i], attr) : items->v[i];
		int t;
		if (test.t == JV_NONE) t = jv_truthy(v);
		else {
			need_str(c, test, "test name");
			char *tn = cstr(c, test);
			if (!jinja_has_test(tn)) jfail(c, "unsupported test '%s'", tn);
			t = jinja_test(c, tn, v, a->v + first + 1, a->npos > first + 1 ? a->npos - first - 1 : 0);
		}
		if (t == keep) jlist_push(c, out, items->v[i]);
	}
	return jv_list(out);
}

static jv min_max(jctx *c, jv in, jargs *a, int want_max)
{
	static const char *const names[] = {"case_sensitive", "attribute", NULL};
	max_args(c, a, 2, names);
	int cs = jv_truthy(arg(c, a, 0, "case_sensitive", jv_bool(0)));
	jv attr = arg(c, a, 1, "attribute", jv_none());
	jlist *items = jinja_iterate(c, in);
	if (!items->n) return jv_undef("No aggregated item, sequence was empty.");
	size_t best = 0;
	jv bk = lower_key(c, attr.t == JV_NONE ? items->v[0] : attr_path(c, items->v[0], attr), cs);
	for (size_t i = 1; i < items->n; i++) {
		jv k = lower_key(c, attr.t == JV_NONE ? items->v[i] : attr_path(c, items->v[i], attr), cs);
		int r = jv_cmp(c, k, bk);
		if (want_max ? r > 0 : r < 0) {
			best = i;
			bk = k;
		}
	}
	return items->v[best];
}

jv jinja_filter(jctx *c, const char *name, jv in, jv *argv, const char **kwnames, size_t nargs)
{
	jargs a = mkargs(argv, kwnames, nargs, name);
	jv U = jv_undef(NULL);
	if (!strcmp(name, "default") || !strcmp(name, "d")) {
		static const char *const names[] = {"default_value", "boolean", NULL};
		max_args(c, &a, 2, names);
		jv def = arg(c, &a, 0, "default_value", jv_str("", 0));
		int boolean = jv_truthy(arg(c, &a, 1, "boolean", jv_bool(0)));
		if (in.t == JV_UNDEF || (boolean && !jv_truthy(in))) return def;
		return in;
	}
	if (!strcmp(name, "length") || !strcmp(name, "count")) return jv_int(length_of(c, in));
	if (!strcmp(name, "safe")) return in;
	if (!strcmp(name, "string")) return jv_to_str(c, in);
	if (!strcmp(name, "trim")) {
		static const char *const names[] = {"chars", NULL};
		max_args(c, &a, 1, names);
		return strip(c, jv_to_str(c, in), arg(c, &a, 0, "chars", jv_none()), 3);
	}
	if (!strcmp(name, "upper")) return case_map(c, jv_to_str(c, in), 'u');
	if (!strcmp(name, "lower")) return case_map(c, jv_to_str(c, in), 'l');
	if (!strcmp(name, "capitalize")) return case_map(c, jv_to_str(c, in), 'c');
	if (!strcmp(name, "title")) return case_map(c, jv_to_str(c, in), 'j');
	if (!strcmp(name, "replace")) {
		static const char *const names[] = {"old", "new", "count", NULL};
		max_args(c, &a, 3, names);
		jv s = jv_to_str(c, in);
		jv old = jv_to_str(c, arg(c, &a, 0, "old", U)), nw = jv_to_str(c, arg(c, &a, 1, "new", U));
		jv cnt = arg(c, &a, 2, "count", jv_none());
		return replace(c, s, old, nw, cnt.t == JV_NONE ? -1 : need_int(c, cnt, "count"));
	}
	if (!strcmp(name, "tojson")) {
		static const char *const names[] = {"indent", "ensure_ascii", "separators", "sort_keys", NULL};
		max_args(c, &a, 4, names);
		jv ind = arg(c, &a, 0, "indent", jv_none());
		if (jv_truthy(arg(c, &a, 1, "ensure_ascii", jv_bool(0)))) jfail(c, "unsupported construct: tojson(ensure_ascii=true)");
		jv seps = arg(c, &a, 2, "separators", jv_none());
		int sort_keys = jv_truthy(arg(c, &a, 3, "sort_keys", jv_bool(0)));
		int indent = -1;
		if (ind.t != JV_NONE) {
			indent = (int)need_int(c, ind, "indent");
			if (indent < 0) indent = 0;
			if (indent > 64) jfail(c, "tojson indent %d too large", indent);
		}
		const char *isep = indent >= 0 ? "," : ", ", *ksep = ": ";
		if (seps.t == JV_LIST) {
			if (seps.l->n != 2 || seps.l->v[0].t != JV_STR || seps.l->v[1].t != JV_STR)
				jfail(c, "tojson separators must be two strings");
			isep = cstr(c, seps.l->v[0]);
			ksep = cstr(c, seps.l->v[1]);
		} else if (seps.t != JV_NONE) jfail(c, "tojson separators must be a tuple of two strings");
		jbuf b = {0};
		jv_write_json(c, &b, in, indent, isep, ksep, sort_keys, 0);
		return jv_str(b.p ? b.p : "", b.n);
	}
	if (!strcmp(name, "items")) {
		jlist *l = jlist_new(c, (in.t == JV_DICT ? in.d->n : 0) + 1);
		l->kind = JL_GEN;
		if (in.t == JV_UNDEF) return jv_list(l);
		if (in.t != JV_DICT) jfail(c, "Can only get item pairs from a mapping, not '%s'", jv_typename(in));
		for (size_t i = 0; i < in.d->n; i++) {
			jlist *p = jlist_new(c, 2);
			p->tuple = 1;
			jlist_push(c, p, in.d->k[i]);
			jlist_push(c, p, in.d->v[i]);
			jlist_push(c, l, jv_list(p));
		}
		return jv_list(l);
	}
	if (!strcmp(name, "list")) return list_of(c, in);
	if (!strcmp(name, "join")) {
		static const char *const names[] = {"d", "attribute", NULL};
		max_args(c, &a, 2, names);
		jv sep = jv_to_str(c, arg(c, &a, 0, "d", jv_str("", 0)));
		jv attr = arg(c, &a, 1, "attribute", jv_none());
		jlist *items = jinja_iterate(c, in);
		jbuf b = {0};
		for (size_t i = 0; i < items->n; i++) {
			if (i) jbuf_put(c, &b, sep.s.p, sep.s.n);
			jv v = attr.t == JV_NONE ? items->v[i] : attr_path(c, items->v[i], attr);
			jv_write_str(c, &b, v);
		}
		return jv_str(b.p ? b.p : "", b.n);
	}
	if (!strcmp(name, "first")) {
		jlist *items = jinja_iterate(c, in);
		return items->n ? items->v[0] : jv_undef("No first item, sequence was empty.");
	}
	if (!strcmp(name, "last")) {
		if (in.t == JV_UNDEF) return jv_undef("No last item, sequence was empty.");
		if (in.t == JV_LIST && in.l->kind != JL_LIST) jfail(c, "'%s' object is not reversible", jv_typename(in));
		jlist *items = jinja_iterate(c, in);
		return items->n ? items->v[items->n - 1] : jv_undef("No last item, sequence was empty.");
	}
	if (!strcmp(name, "reverse")) {
		if (in.t == JV_STR) {
			jlist *items = jinja_iterate(c, in);
			jbuf b = {0};
			for (size_t i = items->n; i-- > 0;) jbuf_put(c, &b, items->v[i].s.p, items->v[i].s.n);
			return jv_str(b.p ? b.p : "", b.n);
		}
		jlist *items = jinja_iterate(c, in);
		jlist *l = jlist_new(c, items->n + 1);
		for (size_t i = items->n; i-- > 0;) jlist_push(c, l, items->v[i]);
		/* reversed() gives an iterator; a generator has no reversed() and becomes a list */
		if (!(in.t == JV_LIST && in.l->kind == JL_GEN)) l->kind = JL_GEN;
		return jv_list(l);
	}
	if (!strcmp(name, "int")) {
		static const char *const names[] = {"default", "base", NULL};
		max_args(c, &a, 2, names);
		if (in.t == JV_UNDEF) jfail(c, "%s", in.hint ? in.hint : "value is undefined");
		return to_int(c, in, arg(c, &a, 0, "default", jv_int(0)), need_int(c, arg(c, &a, 1, "base", jv_int(10)), "base"));
	}
	if (!strcmp(name, "float")) {
		static const char *const names[] = {"default", NULL};
		max_args(c, &a, 1, names);
		if (in.t == JV_UNDEF) jfail(c, "%s", in.hint ? in.hint : "value is undefined");
		return to_float(c, in, arg(c, &a, 0, "default", jv_float(0.0)));
	}
	if (!strcmp(name, "abs")) {
		if (in.t == JV_INT) {
			if (in.i == INT64_MIN) jfail(c, "integer overflow");
			return jv_int(in.i < 0 ? -in.i : in.i);
		}
		if (in.t == JV_BOOL) return jv_int(in.b);
		if (in.t == JV_FLOAT) return jv_float(fabs(in.f));
		jfail(c, "bad operand type for abs(): '%s'", jv_typename(in));
	}
	if (!strcmp(name, "round")) {
		static const char *const names[] = {"precision", "method", NULL};
		max_args(c, &a, 2, names);
		int64_t prec = need_int(c, arg(c, &a, 0, "precision", jv_int(0)), "precision");
		jv method = arg(c, &a, 1, "method", jv_cstr("common"));
		need_str(c, method, "method");
		if (in.t != JV_INT && in.t != JV_FLOAT && in.t != JV_BOOL) jfail(c, "round() needs a number, not '%s'", jv_typename(in));
		double x = in.t == JV_FLOAT ? in.f : in.t == JV_INT ? (double)in.i : in.b;
		if (prec < -20 || prec > 20) jfail(c, "round precision %lld out of range", (long long)prec);
		char *m = cstr(c, method);
		/* Python's round(int, n) stays an int */
		if (!strcmp(m, "common") && in.t != JV_FLOAT && prec >= 0) return jv_int(in.t == JV_INT ? in.i : in.b);
		if (!strcmp(m, "common")) {
			if (prec >= 0) {
				char tmp[400];
				snprintf(tmp, sizeof(tmp), "%.*f", (int)prec, x);
				return jv_float(strtod(tmp, NULL));
			}
			double p10 = pow(10.0, (double)-prec);
			return jv_float(nearbyint(x / p10) * p10);
		}
		double p10 = pow(10.0, (double)prec);
		if (!strcmp(m, "ceil")) return jv_float(ceil(x * p10) / p10);
		if (!strcmp(m, "floor")) return jv_float(floor(x * p10) / p10);
		jfail(c, "method must be common, ceil or floor");
	}
	if (!strcmp(name, "dictsort")) {
		static const char *const names[] = {"case_sensitive", "by", "reverse", NULL};
		max_args(c, &a, 3, names);
		int cs = jv_truthy(arg(c, &a, 0, "case_sensitive", jv_bool(0)));
		jv by = arg(c, &a, 1, "by", jv_cstr("key"));
		int rev = jv_truthy(arg(c, &a, 2, "reverse", jv_bool(0)));
		if (in.t != JV_DICT) {
			if (in.t == JV_UNDEF) jfail(c, "%s", in.hint ? in.hint : "value is undefined");
			jfail(c, "dictsort needs a mapping, not '%s'", jv_typename(in));
		}
		need_str(c, by, "by");
		int by_value = by.s.n == 5 && !memcmp(by.s.p, "value", 5);
		if (!by_value && !(by.s.n == 3 && !memcmp(by.s.p, "key", 3))) jfail(c, "You can only sort by either 'key' or 'value'");
		jv items = jinja_filter(c, "items", in, NULL, NULL, 0);
		jv *keys = jalloc(c, (in.d->n + 1) * sizeof(jv));
		for (size_t i = 0; i < in.d->n; i++) keys[i] = lower_key(c, by_value ? in.d->v[i] : in.d->k[i], cs);
		return sorted(c, items.l, keys, rev);
	}
	if (!strcmp(name, "sort")) {
		static const char *const names[] = {"reverse", "case_sensitive", "attribute", NULL};
		max_args(c, &a, 3, names);
		int rev = jv_truthy(arg(c, &a, 0, "reverse", jv_bool(0)));
		int cs = jv_truthy(arg(c, &a, 1, "case_sensitive", jv_bool(0)));
		jv attr = arg(c, &a, 2, "attribute", jv_none());
		jlist *items = jinja_iterate(c, in);
		jv *keys = jalloc(c, (items->n + 1) * sizeof(jv));
		for (size_t i = 0; i < items->n; i++)
			keys[i] = lower_key(c, attr.t == JV_NONE ? items->v[i] : attr_path(c, items->v[i], attr), cs);
		return sorted(c, items, keys, rev);
	}
	if (!strcmp(name, "unique")) {
		static const char *const names[] = {"case_sensitive", "attribute", NULL};
		max_args(c, &a, 2, names);
		int cs = jv_truthy(arg(c, &a, 0, "case_sensitive", jv_bool(0)));
		jv attr = arg(c, &a, 1, "attribute", jv_none());
		jlist *items = jinja_iterate(c, in);
		jlist *out = jlist_new(c, items->n + 1), *seen = jlist_new(c, items->n + 1);
		out->kind = JL_GEN;
		for (size_t i = 0; i < items->n; i++) {
			jv k = lower_key(c, attr.t == JV_NONE ? items->v[i] : attr_path(c, items->v[i], attr), cs);
			int dup = 0;
			for (size_t j = 0; j < seen->n && !dup; j++) dup = jv_eq(seen->v[j], k);
			if (!dup) {
				jlist_push(c, seen, k);
				jlist_push(c, out, items->v[i]);
			}
		}
		return jv_list(out);
	}
	if (!strcmp(name, "map")) {
		jlist *items = jinja_iterate(c, in);
		jlist *out = jlist_new(c, items->n + 1);
		out->kind = JL_GEN;
		jv attr = arg(c, &a, (size_t)-1, "attribute", U);
		if (attr.t != JV_UNDEF) {
			jv def = arg(c, &a, (size_t)-1, "default", U);
			for (size_t i = 0; i < items->n; i++) {
				jv v = attr_path(c, items->v[i], attr);
				jlist_push(c, out, v.t == JV_UNDEF && def.t != JV_UNDEF ? def : v);
			}
			return jv_list(out);
		}
		if (!a.npos) jfail(c, "map requires a filter argument");
		need_str(c, a.v[0], "filter name");
		char *fn = cstr(c, a.v[0]);
		if (!jinja_has_filter(fn)) jfail(c, "unsupported filter '%s'", fn);
		for (size_t i = 0; i < items->n; i++)
			jlist_push(c, out, jinja_filter(c, fn, items->v[i], a.v + 1, kwnames ? kwnames + 1 : NULL, a.n - 1));
		return jv_list(out);
	}
	if (!strcmp(name, "select")) return select_like(c, in, &a, 0, 1);
	if (!strcmp(name, "reject")) return select_like(c, in, &a, 0, 0);
	if (!strcmp(name, "selectattr")) return select_like(c, in, &a, 1, 1);
	if (!strcmp(name, "rejectattr")) return select_like(c, in, &a, 1, 0);
	if (!strcmp(name, "indent")) {
		static const char *const names[] = {"width", "first", "blank", NULL};
		max_args(c, &a, 3, names);
		if (in.t != JV_STR) jfail(c, "unsupported operand type(s) for +=: '%s' and 'str'", jv_typename(in));
		return do_indent(c, in, arg(c, &a, 0, "width", jv_int(4)), jv_truthy(arg(c, &a, 1, "first", jv_bool(0))),
				 jv_truthy(arg(c, &a, 2, "blank", jv_bool(0))));
	}
	if (!strcmp(name, "sum")) {
		static const char *const names[] = {"attribute", "start", NULL};
		max_args(c, &a, 2, names);
		jv attr = arg(c, &a, 0, "attribute", jv_none());
		jv acc = arg(c, &a, 1, "start", jv_int(0));
		jlist *items = jinja_iterate(c, in);
		for (size_t i = 0; i < items->n; i++) {
			jv v = attr.t == JV_NONE ? items->v[i] : attr_path(c, items->v[i], attr);
			jv pair[2] = {acc, v};
			(void)pair;
			if (!((acc.t == JV_INT || acc.t == JV_FLOAT || acc.t == JV_BOOL) && (v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL)))
				jfail(c, "unsupported operand type(s) for +: '%s' and '%s'", jv_typename(acc), jv_typename(v));
			if (acc.t != JV_FLOAT && v.t != JV_FLOAT) {
				int64_t r;
				if (__builtin_add_overflow(acc.t == JV_INT ? acc.i : acc.b, v.t == JV_INT ? v.i : v.b, &r)) jfail(c, "integer overflow");
				acc = jv_int(r);
			} else
				acc = jv_float((acc.t == JV_FLOAT ? acc.f : acc.t == JV_INT ? (double)acc.i : acc.b) +
					       (v.t == JV_FLOAT ? v.f : v.t == JV_INT ? (double)v.i : v.b));
		}
		return acc;
	}
	if (!strcmp(name, "min")) return min_max(c, in, &a, 0);
	if (!strcmp(name, "max")) return min_max(c, in, &a, 1);
	if (!strcmp(name, "e") || !strcmp(name, "escape") || !strcmp(name, "forceescape")) {
		jv s = jv_to_str(c, in);
		jbuf b = {0};
		for (size_t i = 0; i < s.s.n; i++) {
			switch (s.s.p[i]) {
			case '&': jbuf_put(c, &b, "&amp;", 5); break;
			case '<': jbuf_put(c, &b, "&lt;", 4); break;
			case '>': jbuf_put(c, &b, "&gt;", 4); break;
			case '"': jbuf_put(c, &b, "&#34;", 5); break;
			case '\'': jbuf_put(c, &b, "&#39;", 5); break;
			default: jbuf_putc(c, &b, s.s.p[i]);
			}
		}
		return jv_str(b.p ? b.p : "", b.n);
	}
	if (!strcmp(name, "format")) {
		if (a.n > a.npos) jfail(c, "unsupported construct: format filter with keyword arguments");
		return percent_format(c, need_str(c, in, "format string"), &a);
	}
	if (!strcmp(name, "attr")) {
		/* Python getattr: a dict's keys are not attributes, only its methods are */
		jv nm = need_str(c, arg(c, &a, 0, "name", U), "attribute name");
		if (in.t == JV_DICT && !jinja_is_method(in, cstr(c, nm))) return jv_undef("no such attribute");
		return jinja_getattr(c, in, cstr(c, nm));
	}
	if (!strcmp(name, "wordcount")) {
		jv s = jv_to_str(c, in);
		int64_t n = 0;
		int inword = 0;
		for (size_t i = 0; i < s.s.n;) {
			int l;
			uint32_t cp = cp_at(s.s.p, s.s.n, i, &l);
			utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
			int w = cp == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
				(cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
			if (w && !inword) n++;
			inword = w;
			i += (size_t)l;
		}
		return jv_int(n);
	}
	jfail(c, "unsupported filter '%s'", name);
}

/* ---- tests ---- */

int jinja_test(jctx *c, const char *name, jv in, jv *args, size_t nargs)
{
	jv a0 = nargs ? args[0] : jv_undef("test argument missing");
	if (!strcmp(name, "defined")) return in.t != JV_UNDEF;
	if (!strcmp(name, "undefined")) return in.t == JV_UNDEF;
	if (!strcmp(name, "none")) return in.t == JV_NONE;
	if (!strcmp(name, "boolean")) return in.t == JV_BOOL;
	if (!strcmp(name, "false")) return in.t == JV_BOOL && !in.b;
	if (!strcmp(name, "true")) return in.t == JV_BOOL && in.b;
	if (!strcmp(name, "integer")) return in.t == JV_INT;
	if (!strcmp(name, "float")) return in.t == JV_FLOAT;
	if (!strcmp(name, "number")) return in.t == JV_INT || in.t == JV_FLOAT || in.t == JV_BOOL;
	if (!strcmp(name, "string")) return in.t == JV_STR;
	if (!strcmp(name, "mapping")) return in.t == JV_DICT;
	if (!strcmp(name, "iterable")) return in.t == JV_UNDEF || in.t == JV_STR || in.t == JV_LIST || in.t == JV_DICT;
	if (!strcmp(name, "sequence"))
		return in.t == JV_UNDEF || in.t == JV_STR || (in.t == JV_LIST && in.l->kind == JL_LIST) || in.t == JV_DICT;
	if (!strcmp(name, "callable")) return in.t == JV_MACRO || in.t == JV_FUNC || in.t == JV_METHOD;
	if (!strcmp(name, "escaped")) return 0;
	if (!strcmp(name, "sameas")) {
		if (in.t != a0.t) return 0;
		if (in.t == JV_NONE || in.t == JV_UNDEF) return 1;
		if (in.t == JV_BOOL) return in.b == a0.b;
		if (in.t == JV_LIST) return in.l == a0.l;
		if (in.t == JV_DICT || in.t == JV_NS) return in.d == a0.d;
		if (in.t == JV_STR) return in.s.p == a0.s.p && in.s.n == a0.s.n;
		if (in.t == JV_INT) return in.i == a0.i && in.i >= -5 && in.i <= 256;
		return 0;
	}
	if (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "==")) return jv_eq(in, a0);
	if (!strcmp(name, "ne") || !strcmp(name, "!=")) return !jv_eq(in, a0);
	if (!strcmp(name, "lt") || !strcmp(name, "lessthan") || !strcmp(name, "<")) return jv_cmp(c, in, a0) < 0;
	if (!strcmp(name, "le") || !strcmp(name, "<=")) return jv_cmp(c, in, a0) <= 0;
	if (!strcmp(name, "gt") || !strcmp(name, "greaterthan") || !strcmp(name, ">")) return jv_cmp(c, in, a0) > 0;
	if (!strcmp(name, "ge") || !strcmp(name, ">=")) return jv_cmp(c, in, a0) >= 0;
	if (!strcmp(name, "in")) {
		jv r = jv_none();
		(void)r;
		if (a0.t == JV_STR) {
			if (in.t != JV_STR) jfail(c, "'in <string>' requires string as left operand, not %s", jv_typename(in));
			return !in.s.n || memmem(a0.s.p, a0.s.n, in.s.p, in.s.n) != NULL;
		}
		if (a0.t == JV_LIST) {
			for (size_t i = 0; i < a0.l->n; i++)
				if (jv_eq(a0.l->v[i], in)) return 1;
			return 0;
		}
		if (a0.t == JV_DICT) return jdict_get(a0.d, in) != NULL;
		if (a0.t == JV_UNDEF) return 0;
		jfail(c, "argument of type '%s' is not iterable", jv_typename(a0));
	}
	if (!strcmp(name, "odd") || !strcmp(name, "even")) {
		int64_t v = need_int(c, in.t == JV_FLOAT && in.f == floor(in.f) ? jv_int((int64_t)in.f) : in, "value");
		int odd = (v % 2) != 0;
		return name[0] == 'o' ? odd : !odd;
	}
	if (!strcmp(name, "divisibleby")) {
		int64_t v = need_int(c, in, "value"), d = need_int(c, a0, "divisor");
		if (!d) jfail(c, "integer division or modulo by zero");
		return d == -1 || v % d == 0;
	}
	if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
		in = jv_to_str(c, in); /* jinja2 tests str(value).islower() */
		jv m = case_map(c, in, name[0] == 'l' ? 'l' : 'u');
		int cased = 0;
		for (size_t i = 0; i < in.s.n; i++)
			if ((in.s.p[i] >= 'a' && in.s.p[i] <= 'z') || (in.s.p[i] >= 'A' && in.s.p[i] <= 'Z') || (uint8_t)in.s.p[i] >= 0x80) cased = 1;
		return cased && m.s.n == in.s.n && !memcmp(m.s.p, in.s.p, in.s.n);
	}
	if (!strcmp(name, "filter") || !strcmp(name, "test")) {
		if (in.t != JV_STR) return 0;
		char *nm = cstr(c, in);
		return name[0] == 'f' ? jinja_has_filter(nm) : jinja_has_test(nm);
	}
	jfail(c, "unsupported test '%s'", name);
}

/* ---- methods ---- */

static int prefix_match(jctx *c, jv s, jv p, int end)
{
	if (p.t == JV_LIST && p.l->tuple) {
		for (size_t i = 0; i < p.l->n; i++)
			if (prefix_match(c, s, p.l->v[i], end)) return 1;
		return 0;
	}
	if (p.t != JV_STR) jfail(c, "%s first arg must be str or a tuple of str, not %s", end ? "endswith" : "startswith", jv_typename(p));
	if (p.s.n > s.s.n) return 0;
	return !memcmp(s.s.p + (end ? s.s.n - p.s.n : 0), p.s.p, p.s.n);
}

static jv str_method(jctx *c, jv s, const char *m, jargs *a)
{
	jv U = jv_undef(NULL);
	if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
		max_args(c, a, 3, NULL);
		if (a->npos > 1) {
			size_t n = utf8_count(s.s.p, s.s.n);
			int64_t st = a->v[1].t == JV_NONE ? 0 : need_int(c, a->v[1], "start");
			int64_t en = a->npos > 2 && a->v[2].t != JV_NONE ? need_int(c, a->v[2], "end") : (int64_t)n;
			if (st < 0) st = st + (int64_t)n < 0 ? 0 : st + (int64_t)n;
			if (en < 0) en = en + (int64_t)n < 0 ? 0 : en + (int64_t)n;
			if ((size_t)st > n) return jv_bool(0);
			if ((size_t)en > n) en = (int64_t)n;
			if (en < st) en = st;
			size_t b = utf8_offset(s.s.p, s.s.n, (size_t)st), e = utf8_offset(s.s.p, s.s.n, (size_t)en);
			s = jv_str(s.s.p + b, e - b);
		}
		return jv_bool(prefix_match(c, s, arg(c, a, 0, NULL, U), m[0] == 'e'));
	}
	if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
		static const char *const names[] = {"sep", "maxsplit", NULL};
		max_args(c, a, 2, names);
		jv sep = arg(c, a, 0, "sep", jv_none());
		int64_t ms = need_int(c, arg(c, a, 1, "maxsplit", jv_int(-1)), "maxsplit");
		return split(c, s, sep, ms, m[0] == 'r');
	}
	if (!strcmp(m, "strip")) return strip(c, s, arg(c, a, 0, "chars", jv_none()), 3);
	if (!strcmp(m, "lstrip")) return strip(c, s, arg(c, a, 0, "chars", jv_none()), 1);
	if (!strcmp(m, "rstrip")) return strip(c, s, arg(c, a, 0, "chars", jv_none()), 2);
	if (!strcmp(m, "upper")) return case_map(c, s, 'u');
	if (!strcmp(m, "lower") || !strcmp(m, "casefold")) return case_map(c, s, 'l');
	if (!strcmp(m, "title")) return case_map(c, s, 't');
	if (!strcmp(m, "capitalize")) return case_map(c, s, 'c');
	if (!strcmp(m, "replace")) {
		max_args(c, a, 3, NULL);
		jv old = need_str(c, arg(c, a, 0, NULL, U), "replace() argument 1");
		jv nw = need_str(c, arg(c, a, 1, NULL, U), "replace() argument 2");
		jv cnt = arg(c, a, 2, "count", jv_int(-1));
		return replace(c, s, old, nw, need_int(c, cnt, "count"));
	}
	if (!strcmp(m, "format")) return str_format(c, s, a);
	if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "index") || !strcmp(m, "rindex") || !strcmp(m, "count")) {
		max_args(c, a, 1, NULL);
		jv sub = need_str(c, arg(c, a, 0, NULL, U), "substring");
		if (!strcmp(m, "count")) {
			if (!sub.s.n) return jv_int((int64_t)utf8_count(s.s.p, s.s.n) + 1);
			int64_t k = 0;
			for (size_t i = 0; i + sub.s.n <= s.s.n;) {
				const char *f = memmem(s.s.p + i, s.s.n - i, sub.s.p, sub.s.n);
				if (!f) break;
				k++;
				i = (size_t)(f - s.s.p) + sub.s.n;
			}
			return jv_int(k);
		}
		int rev = m[0] == 'r';
		int64_t pos = -1;
		if (!rev) {
			const char *f = sub.s.n ? memmem(s.s.p, s.s.n, sub.s.p, sub.s.n) : s.s.p;
			if (f) pos = (int64_t)utf8_count(s.s.p, (size_t)(f - s.s.p));
		} else if (sub.s.n <= s.s.n)
			for (size_t k = s.s.n - sub.s.n + 1; k-- > 0;)
				if (!memcmp(s.s.p + k, sub.s.p, sub.s.n)) {
					pos = (int64_t)utf8_count(s.s.p, k);
					break;
				}
		if (pos < 0 && (!strcmp(m, "index") || !strcmp(m, "rindex"))) jfail(c, "substring not found");
		return jv_int(pos);
	}
	if (!strcmp(m, "join")) {
		jlist *items = jinja_iterate(c, arg(c, a, 0, NULL, U));
		jbuf b = {0};
		for (size_t i = 0; i < items->n; i++) {
			if (items->v[i].t != JV_STR) jfail(c, "sequence item %zu: expected str instance, %s found", i, jv_typename(items->v[i]));
			if (i) jbuf_put(c, &b, s.s.p, s.s.n);
			jbuf_put(c, &b, items->v[i].s.p, items->v[i].s.n);
		}
		return jv_str(b.p ? b.p : "", b.n);
	}
	if (!strncmp(m, "is", 2) && strlen(m) > 2) {
		if (!s.s.n) return jv_bool(0);
		int all = 1, cased = 0, upper = 0, lower = 0;
		for (size_t i = 0; i < s.s.n;) {
			int l;
			uint32_t cp = cp_at(s.s.p, s.s.n, i, &l);
			utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
			int letter = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
			int digit = cat == UTF8PROC_CATEGORY_ND;
			if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) upper = cased = 1;
			if (cat == UTF8PROC_CATEGORY_LL) lower = cased = 1;
			if (!strcmp(m, "isdigit") || !strcmp(m, "isdecimal") || !strcmp(m, "isnumeric")) all &= digit;
			else if (!strcmp(m, "isalpha")) all &= letter;
			else if (!strcmp(m, "isalnum")) all &= letter || digit;
			else if (!strcmp(m, "isspace")) all &= py_isspace(cp);
			else if (!strcmp(m, "isascii")) all &= cp < 0x80;
			i += (size_t)l;
		}
		if (!strcmp(m, "islower")) return jv_bool(cased && lower && !upper);
		if (!strcmp(m, "isupper")) return jv_bool(cased && upper && !lower);
		if (!strcmp(m, "isdigit") || !strcmp(m, "isdecimal") || !strcmp(m, "isnumeric") || !strcmp(m, "isalpha") ||
		    !strcmp(m, "isalnum") || !strcmp(m, "isspace") || !strcmp(m, "isascii"))
			return jv_bool(all);
	}
	if (!strcmp(m, "splitlines")) {
		jlist *l = jlist_new(c, 8);
		size_t b = 0;
		for (size_t i = 0; i < s.s.n; i++)
			if (s.s.p[i] == '\n' || s.s.p[i] == '\r') {
				jlist_push(c, l, jv_str(s.s.p + b, i - b));
				if (s.s.p[i] == '\r' && i + 1 < s.s.n && s.s.p[i + 1] == '\n') i++;
				b = i + 1;
			}
		if (b < s.s.n) jlist_push(c, l, jv_str(s.s.p + b, s.s.n - b));
		return jv_list(l);
	}
	if (!strcmp(m, "removeprefix") || !strcmp(m, "removesuffix")) {
		jv p = need_str(c, arg(c, a, 0, NULL, U), m);
		int end = m[6] == 's';
		if (prefix_match(c, s, p, end)) return end ? jv_str(s.s.p, s.s.n - p.s.n) : jv_str(s.s.p + p.s.n, s.s.n - p.s.n);
		return s;
	}
	jfail(c, "unsupported construct: str.%s()", m);
}

jv jinja_method(jctx *c, jmethod *mt, jv *argv, const char **kwnames, size_t nargs)
{
	jargs a = mkargs(argv, kwnames, nargs, mt->name);
	jv self = mt->self;
	const char *m = mt->name;
	if (self.t == JV_STR) return str_method(c, self, m, &a);
	if (self.t == JV_DICT) {
		if (!strcmp(m, "get")) {
			max_args(c, &a, 2, NULL);
			jv *v = jdict_get(self.d, arg(c, &a, 0, NULL, jv_undef("get expected at least 1 argument")));
			return v ? *v : arg(c, &a, 1, NULL, jv_none());
		}
		if (!strcmp(m, "items")) {
			jv it = jinja_filter(c, "items", self, NULL, NULL, 0);
			it.l->kind = JL_ITEMS;
			return it;
		}
		if (!strcmp(m, "keys") || !strcmp(m, "values")) {
			jlist *l = jlist_new(c, self.d->n + 1);
			l->kind = m[0] == 'k' ? JL_KEYS : JL_VALUES;
			for (size_t i = 0; i < self.d->n; i++) jlist_push(c, l, m[0] == 'k' ? self.d->k[i] : self.d->v[i]);
			return jv_list(l);
		}
		if (!strcmp(m, "copy")) {
			jdict *d = jdict_new(c, self.d->n + 1);
			for (size_t i = 0; i < self.d->n; i++) jdict_set(c, d, self.d->k[i], self.d->v[i]);
			return jv_dict(d);
		}
		jfail(c, "access to attribute '%s' of 'dict' object is unsafe", m);
	}
	if (self.t == JV_LIST) {
		if (!strcmp(m, "count") || !strcmp(m, "index")) {
			jv x = arg(c, &a, 0, NULL, jv_undef(NULL));
			int64_t k = 0;
			for (size_t i = 0; i < self.l->n; i++)
				if (jv_eq(self.l->v[i], x)) {
					if (m[0] == 'i') return jv_int((int64_t)i);
					k++;
				}
			if (m[0] == 'i') jfail(c, "value is not in list");
			return jv_int(k);
		}
		if (!strcmp(m, "copy")) return jinja_filter(c, "list", self, NULL, NULL, 0);
		jfail(c, "access to attribute '%s' of '%s' object is unsafe", m, jv_typename(self));
	}
	if (self.t == JV_LOOP && !strcmp(m, "cycle")) {
		if (!a.npos) jfail(c, "no items for cycling given");
		return a.v[self.loop->i % a.npos];
	}
	jfail(c, "unsupported method '%s'", m);
}

/* ---- global functions ---- */

static void check_ns_name(jctx *c, jv k)
{
	if (k.t == JV_STR && k.s.n && k.s.p[0] == '_')
		jfail(c, "Chat templates cannot store underscore-prefixed attributes on a namespace, but got '%.*s'", (int)k.s.n, k.s.p);
}

jv jinja_func(jctx *c, int fn, jv *argv, const char **kwnames, size_t nargs)
{
	jargs a = mkargs(argv, kwnames, nargs, "function");
	switch (fn) {
	case JF_RANGE: {
		a.fname = "range";
		max_args(c, &a, 3, NULL);
		if (!a.npos) jfail(c, "range expected at least 1 argument, got 0");
		int64_t start = 0, stop, stepv = 1;
		if (a.npos == 1) stop = need_int(c, a.v[0], "range argument");
		else {
			start = need_int(c, a.v[0], "range argument");
			stop = need_int(c, a.v[1], "range argument");
			if (a.npos == 3) stepv = need_int(c, a.v[2], "range argument");
		}
		if (!stepv) jfail(c, "range() arg 3 must not be zero");
		jlist *l = jlist_new(c, 8);
		for (int64_t i = start; stepv > 0 ? i < stop : i > stop; i += stepv) {
			/* the sandbox's MAX_RANGE */
			if (l->n >= 100000) jfail(c, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
			jlist_push(c, l, jv_int(i));
			if ((stepv > 0 && i > INT64_MAX - stepv) || (stepv < 0 && i < INT64_MIN - stepv)) break;
		}
		return jv_list(l);
	}
	case JF_NAMESPACE:
	case JF_DICT: {
		jdict *d = jdict_new(c, nargs + 1);
		if (a.npos > 1) jfail(c, "%s expected at most 1 positional argument", fn == JF_DICT ? "dict" : "namespace");
		if (a.npos == 1) {
			jv src = a.v[0];
			if (src.t == JV_DICT || src.t == JV_NS) {
				for (size_t i = 0; i < src.d->n; i++) {
					if (fn == JF_NAMESPACE) check_ns_name(c, src.d->k[i]);
					jdict_set(c, d, src.d->k[i], src.d->v[i]);
				}
			} else if (src.t == JV_LIST) {
				for (size_t i = 0; i < src.l->n; i++) {
					jv p = src.l->v[i];
					if (p.t != JV_LIST || p.l->n != 2) jfail(c, "dictionary update sequence element #%zu has the wrong length", i);
					if (fn == JF_NAMESPACE) check_ns_name(c, p.l->v[0]);
					jdict_set(c, d, p.l->v[0], p.l->v[1]);
				}
			} else jfail(c, "'%s' object is not iterable", jv_typename(src));
		}
		for (size_t k = a.npos; k < nargs; k++) {
			jv key = jv_cstr(kwnames[k]);
			if (fn == JF_NAMESPACE) check_ns_name(c, key);
			jdict_set(c, d, key, argv[k]);
		}
		jv v = {.t = fn == JF_DICT ? JV_DICT : JV_NS};
		v.d = d;
		return v;
	}
	case JF_RAISE: {
		jv msg = nargs ? argv[0] : jv_str("", 0);
		jv s = jv_to_str(c, msg);
		jfail(c, "raise_exception: %.*s", (int)(s.s.n > 600 ? 600 : s.s.n), s.s.p);
	}
	case JF_STRFTIME: {
		if (nargs != 1) jfail(c, "strftime_now() takes exactly one argument (%zu given)", nargs);
		jv f = need_str(c, argv[0], "strftime_now format");
		time_t now = c->lim.now ? (time_t)c->lim.now : time(NULL);
		struct tm tmv;
		localtime_r(&now, &tmv);
		char buf[512];
		size_t n = f.s.n ? strftime(buf, sizeof(buf), cstr(c, f), &tmv) : 0;
		if (!n && f.s.n) jfail(c, "strftime_now: format produces more than %zu bytes", sizeof(buf));
		return jv_strdup(c, buf, n);
	}
	default: jfail(c, "unsupported construct: this global function");
	}
}
