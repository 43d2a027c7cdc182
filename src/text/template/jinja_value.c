/* Jinja values: constructors, Python-compatible equality / ordering / str() / repr(), json.dumps as
 * transformers' tojson does it, and conversion from jansson. Python's formatting is the target
 * because the reference renderer is Python jinja2: `{{ 1.0 }}` prints "1.0", `{{ [1, 'a'] }}`
 * prints "[1, 'a']". */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "text/template/jinja_internal.h"

/* ---- errors and memory of a render ---- */

_Noreturn void jfail(jctx *c, const char *fmt, ...)
{
	char msg[800];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(c->err, sizeof(c->err), "%s: line %d, column %d: %s", c->tpl->name, c->line, c->col, msg);
	longjmp(c->jb, 1);
}

void *jalloc(jctx *c, size_t n)
{
	if (c->a.used + n > c->lim.max_memory) jfail(c, "rendering needs more than %zu bytes of memory", c->lim.max_memory);
	void *p = sg_arena_alloc(&c->a, n ? n : 1, 8);
	if (!p) jfail(c, "out of memory");
	return p;
}

_Noreturn void jfail_undef(jctx *c, jv u)
{
	jfail(c, "%s", u.hint ? u.hint : "value is undefined");
}

/* ---- constructors ---- */

jv jv_undef(const char *hint)
{
	jv v = {.t = JV_UNDEF};
	v.hint = hint;
	return v;
}
jv jv_none(void) { return (jv){.t = JV_NONE}; }
jv jv_bool(int b)
{
	jv v = {.t = JV_BOOL};
	v.b = !!b;
	return v;
}
jv jv_int(int64_t i)
{
	jv v = {.t = JV_INT};
	v.i = i;
	return v;
}
jv jv_float(double f)
{
	jv v = {.t = JV_FLOAT};
	v.f = f;
	return v;
}
jv jv_str(const char *p, size_t n)
{
	jv v = {.t = JV_STR};
	v.s.p = p;
	v.s.n = n;
	return v;
}
jv jv_cstr(const char *s) { return jv_str(s, strlen(s)); }

jv jv_strdup(jctx *c, const char *p, size_t n)
{
	char *d = jalloc(c, n + 1);
	if (n) memcpy(d, p, n);
	return jv_str(d, n);
}

jlist *jlist_new(jctx *c, size_t cap)
{
	jlist *l = jalloc(c, sizeof(*l));
	l->cap = cap ? cap : 4;
	l->v = jalloc(c, l->cap * sizeof(jv));
	return l;
}

void jlist_push(jctx *c, jlist *l, jv v)
{
	if (l->n == l->cap) {
		size_t nc = l->cap * 2;
		jv *nv = jalloc(c, nc * sizeof(jv));
		memcpy(nv, l->v, l->n * sizeof(jv));
		l->v = nv;
		l->cap = nc;
	}
	l->v[l->n++] = v;
}

jv jv_list(jlist *l)
{
	jv v = {.t = JV_LIST};
	v.l = l;
	return v;
}

jdict *jdict_new(jctx *c, size_t cap)
{
	jdict *d = jalloc(c, sizeof(*d));
	d->cap = cap ? cap : 4;
	d->k = jalloc(c, d->cap * sizeof(jv));
	d->v = jalloc(c, d->cap * sizeof(jv));
	return d;
}

/* Dict keys compare like Python's: 1 == 1.0 == True, strings by bytes. */
static int key_eq(jv a, jv b)
{
	if (a.t == JV_STR && b.t == JV_STR) return a.s.n == b.s.n && !memcmp(a.s.p, b.s.p, a.s.n);
	return jv_eq(a, b);
}

jv *jdict_get(const jdict *d, jv k)
{
	for (size_t i = 0; i < d->n; i++)
		if (key_eq(d->k[i], k)) return &d->v[i];
	return NULL;
}

jv *jdict_gets(const jdict *d, const char *k)
{
	size_t n = strlen(k);
	for (size_t i = 0; i < d->n; i++)
		if (d->k[i].t == JV_STR && d->k[i].s.n == n && !memcmp(d->k[i].s.p, k, n)) return &d->v[i];
	return NULL;
}

void jdict_set(jctx *c, jdict *d, jv k, jv v)
{
	jv *slot = jdict_get(d, k);
	if (slot) {
		*slot = v;
		return;
	}
	if (d->n == d->cap) {
		size_t nc = d->cap ? d->cap * 2 : 4;
		jv *nk = jalloc(c, nc * sizeof(jv)), *nv = jalloc(c, nc * sizeof(jv));
		if (d->n) {
			memcpy(nk, d->k, d->n * sizeof(jv));
			memcpy(nv, d->v, d->n * sizeof(jv));
		}
		d->k = nk;
		d->v = nv;
		d->cap = nc;
	}
	d->k[d->n] = k;
	d->v[d->n++] = v;
}

jv jv_dict(jdict *d)
{
	jv v = {.t = JV_DICT};
	v.d = d;
	return v;
}

int jv_truthy(jv v)
{
	switch (v.t) {
	case JV_UNDEF:
	case JV_NONE: return 0;
	case JV_BOOL: return v.b;
	case JV_INT: return v.i != 0;
	case JV_FLOAT: return v.f != 0.0;
	case JV_STR: return v.s.n != 0;
	case JV_LIST: return v.l->kind == JL_GEN || v.l->n != 0;
	case JV_DICT: return v.d->n != 0;
	default: return 1;
	}
}

static int is_num(jv v) { return v.t == JV_BOOL || v.t == JV_INT || v.t == JV_FLOAT; }
static double num_f(jv v) { return v.t == JV_FLOAT ? v.f : v.t == JV_INT ? (double)v.i : (double)v.b; }
static int64_t num_i(jv v) { return v.t == JV_INT ? v.i : v.b; }

int jv_eq(jv a, jv b)
{
	if (is_num(a) && is_num(b)) {
		if (a.t != JV_FLOAT && b.t != JV_FLOAT) return num_i(a) == num_i(b);
		return num_f(a) == num_f(b);
	}
	if (a.t != b.t) return 0;
	switch (a.t) {
	case JV_UNDEF:
	case JV_NONE: return 1;
	case JV_STR: return a.s.n == b.s.n && !memcmp(a.s.p, b.s.p, a.s.n);
	case JV_LIST:
		if (a.l->tuple != b.l->tuple || a.l->kind != b.l->kind || a.l->n != b.l->n) return 0;
		if (a.l->kind == JL_GEN) return a.l == b.l;
		for (size_t i = 0; i < a.l->n; i++)
			if (!jv_eq(a.l->v[i], b.l->v[i])) return 0;
		return 1;
	case JV_DICT:
		if (a.d->n != b.d->n) return 0;
		for (size_t i = 0; i < a.d->n; i++) {
			jv *o = jdict_get(b.d, a.d->k[i]);
			if (!o || !jv_eq(a.d->v[i], *o)) return 0;
		}
		return 1;
	case JV_NS: return a.d == b.d;
	case JV_LOOP: return a.loop == b.loop;
	case JV_MACRO: return a.m == b.m;
	case JV_FUNC: return a.fn == b.fn;
	case JV_METHOD: return a.meth == b.meth;
	default: return 0;
	}
}

const char *jv_typename(jv v)
{
	switch (v.t) {
	case JV_UNDEF: return "Undefined";
	case JV_NONE: return "NoneType";
	case JV_BOOL: return "bool";
	case JV_INT: return "int";
	case JV_FLOAT: return "float";
	case JV_STR: return "str";
	case JV_LIST:
		switch (v.l->kind) {
		case JL_GEN: return "generator";
		case JL_ITEMS: return "dict_items";
		case JL_KEYS: return "dict_keys";
		case JL_VALUES: return "dict_values";
		default: return v.l->tuple ? "tuple" : "list";
		}
	case JV_DICT: return "dict";
	case JV_NS: return "Namespace";
	case JV_LOOP: return "LoopContext";
	case JV_MACRO: return "Macro";
	default: return "function";
	}
}

int jv_cmp(jctx *c, jv a, jv b)
{
	if (is_num(a) && is_num(b)) {
		if (a.t != JV_FLOAT && b.t != JV_FLOAT) return (num_i(a) > num_i(b)) - (num_i(a) < num_i(b));
		double x = num_f(a), y = num_f(b);
		return (x > y) - (x < y);
	}
	if (a.t == JV_STR && b.t == JV_STR) {
		size_t n = a.s.n < b.s.n ? a.s.n : b.s.n;
		int r = memcmp(a.s.p, b.s.p, n);
		if (r) return r;
		return (a.s.n > b.s.n) - (a.s.n < b.s.n);
	}
	if (a.t == JV_LIST && b.t == JV_LIST && a.l->tuple == b.l->tuple && a.l->kind == JL_LIST && b.l->kind == JL_LIST) {
		for (size_t i = 0; i < a.l->n && i < b.l->n; i++) {
			if (jv_eq(a.l->v[i], b.l->v[i])) continue;
			return jv_cmp(c, a.l->v[i], b.l->v[i]);
		}
		return (a.l->n > b.l->n) - (a.l->n < b.l->n);
	}
	if (a.t == JV_UNDEF || b.t == JV_UNDEF) jfail(c, "%s", a.t == JV_UNDEF && a.hint ? a.hint : b.hint ? b.hint : "comparison with an undefined value");
	jfail(c, "'<' not supported between instances of '%s' and '%s'", jv_typename(a), jv_typename(b));
}

void jbuf_put(jctx *c, jbuf *b, const char *p, size_t n)
{
	if (!n) return;
	if (b->n + n + 1 > b->cap) {
		size_t nc = b->cap ? b->cap * 2 : 256;
		while (nc < b->n + n + 1) nc *= 2;
		char *np = jalloc(c, nc);
		if (b->n) memcpy(np, b->p, b->n);
		b->p = np;
		b->cap = nc;
	}
	memcpy(b->p + b->n, p, n);
	b->n += n;
	b->p[b->n] = 0;
}

void jbuf_putc(jctx *c, jbuf *b, char ch) { jbuf_put(c, b, &ch, 1); }

static void jbuf_puts(jctx *c, jbuf *b, const char *s) { jbuf_put(c, b, s, strlen(s)); }

/* Python's repr(float): the shortest digits that round-trip, fixed notation for exponents in
 * [-4, 16), else scientific with a sign and at least two exponent digits. */
void py_float_repr(double f, char *buf, size_t n)
{
	if (isnan(f)) {
		snprintf(buf, n, "nan");
		return;
	}
	if (isinf(f)) {
		snprintf(buf, n, f < 0 ? "-inf" : "inf");
		return;
	}
	char tmp[64];
	int prec;
	for (prec = 1; prec <= 17; prec++) {
		snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, f);
		if (strtod(tmp, NULL) == f) break;
	}
	/* tmp: [-]d[.ddd]e[+-]XX */
	char digits[32];
	int nd = 0, neg = 0;
	const char *q = tmp;
	if (*q == '-') {
		neg = 1;
		q++;
	}
	for (; *q && *q != 'e'; q++)
		if (*q >= '0' && *q <= '9') digits[nd++] = *q;
	int exp = atoi(q + 1);
	while (nd > 1 && digits[nd - 1] == '0') nd--;
	digits[nd] = 0;
	char *o = buf;
	size_t left = n;
#define PUT(ch)                                                                                    \
	do {                                                                                       \
		if (left > 1) {                                                                    \
			*o++ = (ch);                                                               \
			left--;                                                                    \
		}                                                                                  \
	} while (0)
	if (neg) PUT('-');
	if (exp >= -4 && exp < 16) {
		if (exp < 0) {
			PUT('0');
			PUT('.');
			for (int i = 0; i < -exp - 1; i++) PUT('0');
			for (int i = 0; i < nd; i++) PUT(digits[i]);
		} else {
			for (int i = 0; i <= exp; i++) PUT(i < nd ? digits[i] : '0');
			PUT('.');
			if (nd > exp + 1)
				for (int i = exp + 1; i < nd; i++) PUT(digits[i]);
			else
				PUT('0');
		}
	} else {
		PUT(digits[0]);
		if (nd > 1) {
			PUT('.');
			for (int i = 1; i < nd; i++) PUT(digits[i]);
		}
		PUT('e');
		PUT(exp < 0 ? '-' : '+');
		int ae = exp < 0 ? -exp : exp;
		char eb[16];
		snprintf(eb, sizeof(eb), "%02d", ae);
		for (char *e = eb; *e; e++) PUT(*e);
	}
	*o = 0;
#undef PUT
}

/* Code points Python's str.isprintable() rejects, approximately: controls, separators other than
 * the space, format characters. repr() escapes them. */
static int py_unprintable(uint32_t cp)
{
	if (cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad) return 1;
	if (cp >= 0x2000 && cp <= 0x200f) return cp != 0x2010;
	if (cp >= 0x2028 && cp <= 0x202f) return 1;
	if (cp >= 0x205f && cp <= 0x206f) return 1;
	if (cp == 0x3000 || cp == 0xfeff || cp == 0x1680 || cp == 0x180e) return 1;
	if (cp >= 0xfff9 && cp <= 0xfffb) return 1;
	if (cp >= 0xe000 && cp <= 0xf8ff) return 1;
	return 0;
}

static void write_str_repr(jctx *c, jbuf *b, const char *p, size_t n)
{
	int has_sq = memchr(p, '\'', n) != NULL, has_dq = memchr(p, '"', n) != NULL;
	char q = (has_sq && !has_dq) ? '"' : '\'';
	jbuf_putc(c, b, q);
	size_t i = 0;
	while (i < n) {
		uint8_t ch = (uint8_t)p[i];
		char esc[16];
		if (ch < 0x80) {
			if (ch == '\\' || ch == (uint8_t)q) {
				jbuf_putc(c, b, '\\');
				jbuf_putc(c, b, (char)ch);
			} else if (ch == '\n') jbuf_put(c, b, "\\n", 2);
			else if (ch == '\r') jbuf_put(c, b, "\\r", 2);
			else if (ch == '\t') jbuf_put(c, b, "\\t", 2);
			else if (ch < 0x20 || ch == 0x7f) {
				snprintf(esc, sizeof(esc), "\\x%02x", ch);
				jbuf_put(c, b, esc, 4);
			} else jbuf_putc(c, b, (char)ch);
			i++;
			continue;
		}
		uint32_t cp;
		int l = sg_utf8_decode((const uint8_t *)p + i, n - i, &cp);
		if (!l) { /* not valid UTF-8: cannot come from JSON; show the byte */
			snprintf(esc, sizeof(esc), "\\x%02x", ch);
			jbuf_put(c, b, esc, 4);
			i++;
			continue;
		}
		if (py_unprintable(cp)) {
			if (cp <= 0xff) snprintf(esc, sizeof(esc), "\\x%02x", cp);
			else if (cp <= 0xffff) snprintf(esc, sizeof(esc), "\\u%04x", cp);
			else snprintf(esc, sizeof(esc), "\\U%08x", cp);
			jbuf_puts(c, b, esc);
		} else jbuf_put(c, b, p + i, (size_t)l);
		i += (size_t)l;
	}
	jbuf_putc(c, b, q);
}

static void write_container(jctx *c, jbuf *b, jv v, int depth);

static void write_any(jctx *c, jbuf *b, jv v, int repr, int depth)
{
	char tmp[64];
	switch (v.t) {
	case JV_UNDEF: if (repr) jbuf_puts(c, b, "Undefined"); return;
	case JV_NONE: jbuf_puts(c, b, "None"); return;
	case JV_BOOL: jbuf_puts(c, b, v.b ? "True" : "False"); return;
	case JV_INT:
		snprintf(tmp, sizeof(tmp), "%lld", (long long)v.i);
		jbuf_puts(c, b, tmp);
		return;
	case JV_FLOAT:
		py_float_repr(v.f, tmp, sizeof(tmp));
		jbuf_puts(c, b, tmp);
		return;
	case JV_STR:
		if (repr) write_str_repr(c, b, v.s.p, v.s.n);
		else jbuf_put(c, b, v.s.p, v.s.n);
		return;
	case JV_LIST:
	case JV_DICT: write_container(c, b, v, depth); return;
	case JV_NS:
		jbuf_puts(c, b, "<Namespace ");
		write_container(c, b, jv_dict(v.d), depth);
		jbuf_putc(c, b, '>');
		return;
	case JV_LOOP: jbuf_puts(c, b, "<LoopContext>"); return;
	case JV_MACRO: jbuf_puts(c, b, "<Macro>"); return;
	default: jbuf_puts(c, b, "<built-in function>"); return;
	}
}

static void write_container(jctx *c, jbuf *b, jv v, int depth)
{
	if (depth > 100) jfail(c, "value nested too deeply to print");
	if (v.t == JV_LIST) {
		if (v.l->kind == JL_GEN)
			jfail(c, "unsupported construct: printing a generator (Jinja prints '<generator object ...>'); "
				 "convert it with | list");
		if (v.l->kind != JL_LIST) {
			jbuf_puts(c, b, jv_typename(v));
			jbuf_putc(c, b, '(');
		}
		jbuf_putc(c, b, v.l->tuple ? '(' : '[');
		for (size_t i = 0; i < v.l->n; i++) {
			if (i) jbuf_put(c, b, ", ", 2);
			write_any(c, b, v.l->v[i], 1, depth + 1);
		}
		if (v.l->tuple && v.l->n == 1) jbuf_putc(c, b, ',');
		jbuf_putc(c, b, v.l->tuple ? ')' : ']');
		if (v.l->kind != JL_LIST) jbuf_putc(c, b, ')');
		return;
	}
	jbuf_putc(c, b, '{');
	for (size_t i = 0; i < v.d->n; i++) {
		if (i) jbuf_put(c, b, ", ", 2);
		write_any(c, b, v.d->k[i], 1, depth + 1);
		jbuf_put(c, b, ": ", 2);
		write_any(c, b, v.d->v[i], 1, depth + 1);
	}
	jbuf_putc(c, b, '}');
}

void jv_write_str(jctx *c, jbuf *b, jv v) { write_any(c, b, v, 0, 0); }
void jv_write_repr(jctx *c, jbuf *b, jv v) { write_any(c, b, v, 1, 0); }

jv jv_to_str(jctx *c, jv v)
{
	if (v.t == JV_STR) return v;
	jbuf b = {0};
	jv_write_str(c, &b, v);
	return jv_str(b.p ? b.p : "", b.n);
}

static void json_str(jctx *c, jbuf *b, const char *p, size_t n)
{
	jbuf_putc(c, b, '"');
	size_t run = 0;
	for (size_t i = 0; i < n; i++) {
		uint8_t ch = (uint8_t)p[i];
		const char *e = NULL;
		char tmp[8];
		switch (ch) {
		case '"': e = "\\\""; break;
		case '\\': e = "\\\\"; break;
		case '\n': e = "\\n"; break;
		case '\r': e = "\\r"; break;
		case '\t': e = "\\t"; break;
		case '\b': e = "\\b"; break;
		case '\f': e = "\\f"; break;
		default:
			if (ch < 0x20) {
				snprintf(tmp, sizeof(tmp), "\\u%04x", ch);
				e = tmp;
			}
		}
		if (e) {
			jbuf_put(c, b, p + run, i - run);
			jbuf_put(c, b, e, strlen(e));
			run = i + 1;
		}
	}
	jbuf_put(c, b, p + run, n - run);
	jbuf_putc(c, b, '"');
}

static void json_newline(jctx *c, jbuf *b, int indent, int level)
{
	jbuf_putc(c, b, '\n');
	for (int i = 0; i < indent * level; i++) jbuf_putc(c, b, ' ');
}

static int key_index_cmp(const void *x, const void *y, void *arg);

void jv_write_json(jctx *c, jbuf *b, jv v, int indent, const char *item_sep, const char *key_sep, int sort_keys,
		   int level)
{
	char tmp[64];
	if (level > 100) jfail(c, "tojson: value nested too deeply");
	switch (v.t) {
	case JV_NONE: jbuf_puts(c, b, "null"); return;
	case JV_BOOL: jbuf_puts(c, b, v.b ? "true" : "false"); return;
	case JV_INT:
		snprintf(tmp, sizeof(tmp), "%lld", (long long)v.i);
		jbuf_puts(c, b, tmp);
		return;
	case JV_FLOAT:
		if (isnan(v.f)) jbuf_puts(c, b, "NaN");
		else if (isinf(v.f)) jbuf_puts(c, b, v.f < 0 ? "-Infinity" : "Infinity");
		else {
			py_float_repr(v.f, tmp, sizeof(tmp));
			jbuf_puts(c, b, tmp);
		}
		return;
	case JV_STR: json_str(c, b, v.s.p, v.s.n); return;
	case JV_LIST:
		if (v.l->kind != JL_LIST) jfail(c, "tojson: Object of type %s is not JSON serializable", jv_typename(v));
		if (!v.l->n) {
			jbuf_puts(c, b, "[]");
			return;
		}
		jbuf_putc(c, b, '[');
		for (size_t i = 0; i < v.l->n; i++) {
			if (i) jbuf_puts(c, b, item_sep);
			if (indent >= 0) json_newline(c, b, indent, level + 1);
			jv_write_json(c, b, v.l->v[i], indent, item_sep, key_sep, sort_keys, level + 1);
		}
		if (indent >= 0) json_newline(c, b, indent, level);
		jbuf_putc(c, b, ']');
		return;
	case JV_DICT: {
		if (!v.d->n) {
			jbuf_puts(c, b, "{}");
			return;
		}
		size_t *order = jalloc(c, v.d->n * sizeof(size_t));
		for (size_t i = 0; i < v.d->n; i++) order[i] = i;
		if (sort_keys) {
			for (size_t i = 0; i < v.d->n; i++)
				if (v.d->k[i].t != JV_STR) jfail(c, "tojson: sort_keys needs string keys");
			qsort_r(order, v.d->n, sizeof(size_t), key_index_cmp, v.d);
		}
		jbuf_putc(c, b, '{');
		for (size_t j = 0; j < v.d->n; j++) {
			size_t i = order[j];
			if (j) jbuf_puts(c, b, item_sep);
			if (indent >= 0) json_newline(c, b, indent, level + 1);
			jv k = v.d->k[i];
			if (k.t == JV_STR) json_str(c, b, k.s.p, k.s.n);
			else if (k.t == JV_NONE) jbuf_puts(c, b, "\"null\"");
			else if (k.t == JV_BOOL) jbuf_puts(c, b, k.b ? "\"true\"" : "\"false\"");
			else if (k.t == JV_INT || k.t == JV_FLOAT) {
				jbuf_putc(c, b, '"');
				jv_write_json(c, b, k, -1, item_sep, key_sep, 0, level + 1);
				jbuf_putc(c, b, '"');
			} else jfail(c, "tojson: keys must be str, int, float, bool or None, not %s", jv_typename(k));
			jbuf_puts(c, b, key_sep);
			jv_write_json(c, b, v.d->v[i], indent, item_sep, key_sep, sort_keys, level + 1);
		}
		if (indent >= 0) json_newline(c, b, indent, level);
		jbuf_putc(c, b, '}');
		return;
	}
	case JV_UNDEF: jfail(c, "tojson: Object of type Undefined is not JSON serializable");
	default: jfail(c, "tojson: Object of type %s is not JSON serializable", jv_typename(v));
	}
}

static int key_index_cmp(const void *x, const void *y, void *arg)
{
	const jdict *d = arg;
	jv a = d->k[*(const size_t *)x], b = d->k[*(const size_t *)y];
	size_t n = a.s.n < b.s.n ? a.s.n : b.s.n;
	int r = memcmp(a.s.p, b.s.p, n);
	if (r) return r;
	return (a.s.n > b.s.n) - (a.s.n < b.s.n);
}

jv jv_from_json(jctx *c, const json_t *j)
{
	if (!j) return jv_none();
	switch (json_typeof(j)) {
	case JSON_NULL: return jv_none();
	case JSON_TRUE: return jv_bool(1);
	case JSON_FALSE: return jv_bool(0);
	case JSON_INTEGER: return jv_int((int64_t)json_integer_value(j));
	case JSON_REAL: return jv_float(json_real_value(j));
	case JSON_STRING: return jv_strdup(c, json_string_value(j), json_string_length(j));
	case JSON_ARRAY: {
		jlist *l = jlist_new(c, json_array_size(j) + 1);
		for (size_t i = 0; i < json_array_size(j); i++) jlist_push(c, l, jv_from_json(c, json_array_get(j, i)));
		return jv_list(l);
	}
	case JSON_OBJECT: {
		jdict *d = jdict_new(c, json_object_size(j) + 1);
		const char *k;
		json_t *val;
		json_object_foreach((json_t *)j, k, val) {
			/* JSON object keys are unique and d has room: append without the lookup. */
			d->k[d->n] = jv_strdup(c, k, strlen(k));
			d->v[d->n++] = jv_from_json(c, val);
		}
		return jv_dict(d);
	}
	}
	return jv_none();
}

size_t utf8_count(const char *p, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (((uint8_t)p[i] & 0xC0) != 0x80) k++;
	return k;
}

size_t utf8_offset(const char *p, size_t n, size_t cp)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (((uint8_t)p[i] & 0xC0) != 0x80) {
			if (k == cp) return i;
			k++;
		}
	}
	return n;
}
