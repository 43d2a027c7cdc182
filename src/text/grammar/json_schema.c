/* JSON Schema compiler: walks the schema and builds grammar nodes. See json_schema.h for what is
 * enforced. */
#include "text/grammar/json_schema.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"

#define MAX_SCHEMA_DEPTH 64

typedef struct {
	const json_t *target;
	int node;
} memo_ent;

typedef struct {
	sg_grammar *g;
	const json_t *root;
	int strict;
	memo_ent *memo;
	int nmemo, cap;
	char path[512];
	size_t plen;
	int depth;
	char *warn;
	size_t warn_size;
} cctx;

/* Every other keyword (title, description, default, examples, $schema, $id, $comment, $defs,
 * definitions, unknown ones) is an annotation and is skipped. */
/* Known validation keywords this compiler does not enforce. */
static const char *unsupported[] = {
	"pattern", "format", "multipleOf", "not", "if", "then", "else", "patternProperties",
	"propertyNames", "minProperties", "maxProperties", "contains", "minContains", "maxContains",
	"prefixItems", "unevaluatedProperties", "unevaluatedItems", "dependentRequired",
	"dependentSchemas", "dependencies", "additionalItems", "contentEncoding",
	"contentMediaType", "contentSchema", "$dynamicRef", "$recursiveRef", NULL};
/* Keywords this compiler enforces. */
static const char *handled[] = {"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref",
				"properties", "required", "additionalProperties", "items",
				"minItems", "maxItems", "minLength", "maxLength", "minimum",
				"maximum", "exclusiveMinimum", "exclusiveMaximum", "uniqueItems",
				NULL};

static int in_list(const char *k, const char **list)
{
	for (int i = 0; list[i]; i++)
		if (strcmp(k, list[i]) == 0) return 1;
	return 0;
}

/* Appends "/seg" (JSON pointer escaped) to the path; returns the old length to restore. */
static size_t path_push(cctx *c, const char *seg)
{
	size_t old = c->plen;
	char buf[160];
	size_t k = 0;
	for (const char *p = seg; *p && k + 2 < sizeof(buf); p++) {
		if (*p == '~') {
			buf[k++] = '~';
			buf[k++] = '0';
		} else if (*p == '/') {
			buf[k++] = '~';
			buf[k++] = '1';
		} else {
			buf[k++] = *p;
		}
	}
	buf[k] = 0;
	int n = snprintf(c->path + c->plen, sizeof(c->path) - c->plen, "/%s", buf);
	if (n > 0) c->plen += (size_t)n < sizeof(c->path) - c->plen ? (size_t)n : sizeof(c->path) - c->plen - 1;
	return old;
}

static void path_pop(cctx *c, size_t old)
{
	c->plen = old;
	c->path[old] = 0;
}

static size_t path_push_idx(cctx *c, size_t i)
{
	char b[32];
	snprintf(b, sizeof(b), "%zu", i);
	return path_push(c, b);
}

static const char *here(const cctx *c) { return c->plen ? c->path : "(root)"; }

static sg_status bad(cctx *c, const char *what)
{
	return sg_error(SG_ERR_INVALID_ARG, "json_schema: %s at %s", what, here(c));
}

static sg_status unsup(cctx *c, const char *kw)
{
	if (!c->strict) {
		if (c->warn && c->warn[0] == 0)
			snprintf(c->warn, c->warn_size, "keyword '%s' at %s is not enforced", kw, here(c));
		return SG_OK;
	}
	return sg_error(SG_ERR_UNSUPPORTED, "json_schema: unsupported keyword '%s' at %s", kw, here(c));
}

static sg_status compile(cctx *c, const json_t *s, int *node);

/* ---- enum / const: values as literals in their compact serialisation ---- */

typedef struct {
	char *buf;
	size_t len, cap;
	int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
	if (b->oom) return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = (b->len + n + 1) * 2;
		char *p = sg_realloc(b->buf, cap);
		if (!p) {
			b->oom = 1;
			return;
		}
		b->buf = p;
		b->cap = cap;
	}
	memcpy(b->buf + b->len, s, n);
	b->len += n;
	b->buf[b->len] = 0;
}

static void sb_str(sbuf *b, const char *s, size_t n)
{
	sb_put(b, "\"", 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		char e[8];
		if (ch == '"' || ch == '\\') {
			e[0] = '\\';
			e[1] = (char)ch;
			sb_put(b, e, 2);
		} else if (ch < 0x20) {
			int k = snprintf(e, sizeof(e), "\\u%04x", ch);
			sb_put(b, e, (size_t)k);
		} else {
			sb_put(b, (const char *)&s[i], 1);
		}
	}
	sb_put(b, "\"", 1);
}

/* Shortest "%.Ng" that reads back to the same double, as Python's repr would choose. */
static void sb_real(sbuf *b, double v)
{
	char t[40];
	for (int p = 1; p <= 17; p++) {
		snprintf(t, sizeof(t), "%.*g", p, v);
		if (strtod(t, NULL) == v) break;
	}
	sb_put(b, t, strlen(t));
}

static int sb_value(sbuf *b, const json_t *v, int depth)
{
	if (depth > MAX_SCHEMA_DEPTH) return 0;
	char t[32];
	switch (json_typeof(v)) {
	case JSON_NULL: sb_put(b, "null", 4); return 1;
	case JSON_TRUE: sb_put(b, "true", 4); return 1;
	case JSON_FALSE: sb_put(b, "false", 5); return 1;
	case JSON_INTEGER:
		snprintf(t, sizeof(t), "%lld", (long long)json_integer_value(v));
		sb_put(b, t, strlen(t));
		return 1;
	case JSON_REAL:
		if (!isfinite(json_real_value(v))) return 0;
		sb_real(b, json_real_value(v));
		return 1;
	case JSON_STRING: sb_str(b, json_string_value(v), json_string_length(v)); return 1;
	case JSON_ARRAY: {
		sb_put(b, "[", 1);
		for (size_t i = 0; i < json_array_size(v); i++) {
			if (i) sb_put(b, ",", 1);
			if (!sb_value(b, json_array_get(v, i), depth + 1)) return 0;
		}
		sb_put(b, "]", 1);
		return 1;
	}
	case JSON_OBJECT: {
		sb_put(b, "{", 1);
		const char *k;
		json_t *x;
		int first = 1;
		json_object_foreach((json_t *)v, k, x)
		{
			if (!first) sb_put(b, ",", 1);
			first = 0;
			sb_str(b, k, strlen(k));
			sb_put(b, ":", 1);
			if (!sb_value(b, x, depth + 1)) return 0;
		}
		sb_put(b, "}", 1);
		return 1;
	}
	}
	return 0;
}

/* Type name mask bits. */
enum { T_NULL = 1, T_BOOL = 2, T_INT = 4, T_NUM = 8, T_STR = 16, T_ARR = 32, T_OBJ = 64, T_ALL = 127 };

static int value_type_ok(const json_t *v, int types)
{
	switch (json_typeof(v)) {
	case JSON_NULL: return types & T_NULL;
	case JSON_TRUE:
	case JSON_FALSE: return types & T_BOOL;
	case JSON_INTEGER: return types & (T_INT | T_NUM);
	case JSON_REAL: {
		double d = json_real_value(v);
		return (types & T_NUM) || ((types & T_INT) && d == floor(d));
	}
	case JSON_STRING: return types & T_STR;
	case JSON_ARRAY: return types & T_ARR;
	case JSON_OBJECT: return types & T_OBJ;
	}
	return 0;
}

static sg_status compile_enum(cctx *c, const json_t *vals, int types, int *node)
{
	size_t n = json_array_size(vals);
	if (n == 0) {
		*node = 0;
		return SG_OK;
	}
	if (n > 65535) return bad(c, "enum with more than 65535 values");
	sbuf b = {0};
	size_t *off = sg_malloc(n * sizeof(size_t)), *len = sg_malloc(n * sizeof(size_t));
	const char **ptr = sg_malloc(n * sizeof(char *));
	sg_status st = SG_OK;
	int k = 0;
	if (!off || !len || !ptr) {
		st = SG_FAIL(SG_ERR_NOMEM, "enum of %zu", n);
		goto done;
	}
	for (size_t i = 0; i < n; i++) {
		const json_t *v = json_array_get(vals, i);
		if (!value_type_ok(v, types)) continue;
		size_t start = b.len;
		if (!sb_value(&b, v, 0)) {
			st = bad(c, "enum value that cannot be serialised");
			goto done;
		}
		off[k] = start;
		len[k] = b.len - start;
		k++;
	}
	if (b.oom) {
		st = SG_FAIL(SG_ERR_NOMEM, "enum values");
		goto done;
	}
	for (int i = 0; i < k; i++) ptr[i] = b.buf + off[i];
	*node = k ? sg_grammar_add_literals(c->g, ptr, len, k) : 0;
done:
	sg_free(b.buf);
	sg_free(off);
	sg_free(len);
	sg_free(ptr);
	return st;
}

/* ---- $ref ---- */

static const json_t *resolve_ref(cctx *c, const char *ref)
{
	if (ref[0] != '#') return NULL;
	const json_t *cur = c->root;
	const char *p = ref + 1;
	while (*p) {
		if (*p != '/') return NULL;
		p++;
		char seg[256];
		size_t k = 0;
		while (*p && *p != '/') {
			char ch = *p++;
			if (ch == '~' && *p == '0') {
				ch = '~';
				p++;
			} else if (ch == '~' && *p == '1') {
				ch = '/';
				p++;
			}
			if (k + 1 >= sizeof(seg)) return NULL;
			seg[k++] = ch;
		}
		seg[k] = 0;
		if (json_is_object(cur)) {
			cur = json_object_get(cur, seg);
		} else if (json_is_array(cur)) {
			char *end;
			unsigned long i = strtoul(seg, &end, 10);
			if (*end || k == 0) return NULL;
			cur = json_array_get(cur, i);
		} else {
			return NULL;
		}
		if (!cur) return NULL;
	}
	return cur;
}

static sg_status compile_ref(cctx *c, const char *ref, int *node)
{
	const json_t *t = resolve_ref(c, ref);
	if (!t) {
		char m[320];
		snprintf(m, sizeof(m), "$ref '%.200s' does not resolve to a local schema", ref);
		return bad(c, m);
	}
	for (int i = 0; i < c->nmemo; i++)
		if (c->memo[i].target == t) {
			*node = c->memo[i].node;
			return SG_OK;
		}
	if (c->nmemo == c->cap) {
		int cap = c->cap ? c->cap * 2 : 16;
		memo_ent *m = sg_realloc(c->memo, (size_t)cap * sizeof(memo_ent));
		if (!m) return SG_FAIL(SG_ERR_NOMEM, "ref table");
		c->memo = m;
		c->cap = cap;
	}
	int r = sg_grammar_add_ref(c->g);
	c->memo[c->nmemo].target = t;
	c->memo[c->nmemo].node = r;
	c->nmemo++;
	/* the target compiles with its own pointer as the error path */
	char saved[sizeof(c->path)];
	size_t saved_len = c->plen;
	memcpy(saved, c->path, sizeof(saved));
	snprintf(c->path, sizeof(c->path), "%s", ref + 1);
	c->plen = strlen(c->path);
	int target = 0;
	sg_status st = compile(c, t, &target);
	memcpy(c->path, saved, sizeof(saved));
	c->plen = saved_len;
	if (st != SG_OK) return st;
	if (r) sg_grammar_set_ref(c->g, r, target);
	*node = r;
	return SG_OK;
}

/* ---- typed schemas ---- */

static sg_status get_count(cctx *c, const json_t *s, const char *kw, int64_t *out)
{
	const json_t *v = json_object_get(s, kw);
	if (!v) return SG_OK;
	double d = json_is_integer(v) ? (double)json_integer_value(v) : json_is_real(v) ? json_real_value(v) : -1;
	if (!json_is_number(v) || d < 0 || d != floor(d)) {
		size_t o = path_push(c, kw);
		sg_status st = bad(c, "expected a non-negative integer");
		path_pop(c, o);
		return st;
	}
	*out = d > 4e9 ? (int64_t)4e9 : (int64_t)d;
	return SG_OK;
}

static sg_status compile_integer(cctx *c, const json_t *s, int *node)
{
	double lo = -9.2e18, hi = 9.2e18;
	int bounded = 0;
	const char *kws[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
	for (int i = 0; i < 4; i++) {
		const json_t *v = json_object_get(s, kws[i]);
		if (!v) continue;
		if (json_is_boolean(v) && i >= 2) { /* draft 4: a flag on minimum/maximum */
			if (json_is_true(v)) {
				const json_t *m = json_object_get(s, i == 2 ? "minimum" : "maximum");
				if (!json_is_number(m)) continue;
				double d = json_number_value(m);
				if (i == 2) lo = fmax(lo, floor(d) + 1);
				else hi = fmin(hi, ceil(d) - 1);
			}
			continue;
		}
		if (!json_is_number(v)) {
			size_t o = path_push(c, kws[i]);
			sg_status st = bad(c, "expected a number");
			path_pop(c, o);
			return st;
		}
		double d = json_number_value(v);
		bounded = 1;
		switch (i) {
		case 0: lo = fmax(lo, ceil(d)); break;
		case 1: hi = fmin(hi, floor(d)); break;
		case 2: lo = fmax(lo, floor(d) + 1); break;
		case 3: hi = fmin(hi, ceil(d) - 1); break;
		}
	}
	if (lo > hi) return bad(c, "integer bounds admit no value");
	if (lo < -9.2e18) lo = -9.2e18;
	if (hi > 9.2e18) hi = 9.2e18;
	*node = sg_grammar_add_number(c->g, 1, bounded, (int64_t)lo, (int64_t)hi);
	return SG_OK;
}

/* Bounds on a (non-integer) number, enforced soundly by a union of: integers within the bounds,
 * decimals p.f with p >= 0 whose unit interval [p, p+1) lies within them, and negative decimals
 * -p.f whose interval (-(p+1), -p] does. No exponents. */
static sg_status compile_number(cctx *c, const json_t *s, int *node)
{
	const char *kws[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
	double lo = -INFINITY, hi = INFINITY;
	int lox = 0, hix = 0, bounded = 0;
	for (int i = 0; i < 4; i++) {
		const json_t *v = json_object_get(s, kws[i]);
		if (!v) continue;
		if (json_is_boolean(v) && i >= 2) { /* draft 4 */
			if (json_is_true(v)) {
				if (i == 2) lox = 1;
				else hix = 1;
			}
			continue;
		}
		if (!json_is_number(v)) {
			size_t o = path_push(c, kws[i]);
			sg_status st = bad(c, "expected a number");
			path_pop(c, o);
			return st;
		}
		double d = json_number_value(v);
		bounded = 1;
		if (i == 0 && d > lo) lo = d, lox = lox && d == lo;
		if (i == 1 && d < hi) hi = d, hix = hix && d == hi;
		if (i == 2 && d >= lo) lo = d, lox = 1;
		if (i == 3 && d <= hi) hi = d, hix = 1;
	}
	if (!bounded) {
		*node = sg_grammar_add_number(c->g, 0, 0, 0, 0);
		return SG_OK;
	}
	if (lo > hi || (lo == hi && (lox || hix))) return bad(c, "number bounds admit no value");
	const double big = 9.2e18;
	double ilo = isinf(lo) ? -big : (lox ? floor(lo) + 1 : ceil(lo));
	double ihi = isinf(hi) ? big : (hix ? ceil(hi) - 1 : floor(hi));
	int alts[3], n = 0;
	if (ilo <= ihi)
		alts[n++] = sg_grammar_add_number(c->g, 1, 1, (int64_t)fmax(ilo, -big), (int64_t)fmin(ihi, big));
	/* p.f, p >= 0: p >= lo (p > lo when exclusive) and p + 1 <= hi */
	double pa = fmax(0, ilo), pb = isinf(hi) ? big : floor(hi) - 1;
	if (pa <= pb) alts[n++] = sg_grammar_add_decimal(c->g, 0, (int64_t)pa, (int64_t)fmin(pb, big));
	/* -p.f, p >= 0: -(p + 1) >= lo and -p <= hi (< hi when exclusive) */
	double na = isinf(hi) ? 0 : fmax(0, hix ? floor(-hi) + 1 : ceil(-hi));
	double nb = isinf(lo) ? big : floor(-lo) - 1;
	if (na <= nb) alts[n++] = sg_grammar_add_decimal(c->g, 1, (int64_t)na, (int64_t)fmin(nb, big));
	if (n == 0) return bad(c, "number bounds admit no value this compiler can produce");
	*node = sg_grammar_add_union(c->g, alts, n);
	return SG_OK;
}

static sg_status compile_object(cctx *c, const json_t *s, int *node)
{
	const json_t *props = json_object_get(s, "properties");
	const json_t *req = json_object_get(s, "required");
	const json_t *addl = json_object_get(s, "additionalProperties");
	if (props && !json_is_object(props)) return bad(c, "properties must be an object");
	if (req && !json_is_array(req)) return bad(c, "required must be an array");
	sg_status st = SG_OK;
	int additional = -1;
	if (addl) {
		size_t o = path_push(c, "additionalProperties");
		if (json_is_false(addl)) additional = -1;
		else st = compile(c, addl, &additional);
		if (st == SG_OK && additional == 0) additional = -1;
		path_pop(c, o);
		if (st != SG_OK) return st;
	} else if (!props || json_object_size(props) == 0) {
		additional = sg_grammar_add_any(c->g);
	}
	size_t np = props ? json_object_size(props) : 0, nr = req ? json_array_size(req) : 0;
	sg_grammar_prop *p = sg_calloc(np + nr + 1, sizeof(*p));
	if (!p) return SG_FAIL(SG_ERR_NOMEM, "object of %zu properties", np);
	int n = 0;
	const char *k;
	json_t *v;
	if (props) {
		size_t o0 = path_push(c, "properties");
		json_object_foreach((json_t *)props, k, v)
		{
			size_t o = path_push(c, k);
			int pn = 0;
			st = compile(c, v, &pn);
			path_pop(c, o);
			if (st != SG_OK) break;
			p[n].name = k;
			p[n].name_len = strlen(k);
			p[n].node = pn;
			n++;
		}
		path_pop(c, o0);
	}
	for (size_t i = 0; st == SG_OK && i < nr; i++) {
		const json_t *r = json_array_get(req, i);
		if (!json_is_string(r)) {
			size_t o = path_push(c, "required");
			st = bad(c, "required entries must be strings");
			path_pop(c, o);
			break;
		}
		/* no object key the parser reads can hold U+0000, so such an entry would match nothing (and
		 * a C string compare would take "a\u0000b" for "a") */
		if (memchr(json_string_value(r), 0, json_string_length(r))) {
			size_t o = path_push(c, "required");
			st = bad(c, "required entries must not contain U+0000");
			path_pop(c, o);
			break;
		}
		int found = 0;
		for (int j = 0; j < n; j++)
			if (p[j].name_len == json_string_length(r) && memcmp(p[j].name, json_string_value(r), p[j].name_len) == 0) {
				p[j].required = 1;
				found = 1;
			}
		if (found) continue;
		/* required but not declared: it must come as an additional property */
		if (additional < 0) {
			size_t o = path_push(c, "required");
			st = bad(c, "a required property is neither declared nor allowed as additional");
			path_pop(c, o);
			break;
		}
		p[n].name = json_string_value(r);
		p[n].name_len = json_string_length(r);
		p[n].node = additional;
		p[n].required = 1;
		n++;
	}
	for (int j = 0; st == SG_OK && j < n; j++)
		if (p[j].required && p[j].node == 0) {
			size_t o = path_push(c, "required");
			st = bad(c, "a required property's schema admits no value");
			path_pop(c, o);
		}
	if (st == SG_OK) *node = sg_grammar_add_object(c->g, p, n, additional);
	sg_free(p);
	return st;
}

static sg_status compile_type(cctx *c, const json_t *s, int t, int *node)
{
	sg_status st = SG_OK;
	switch (t) {
	case T_NULL: *node = sg_grammar_add_literal(c->g, "null"); return SG_OK;
	case T_BOOL: {
		const char *v[] = {"true", "false"};
		size_t l[] = {4, 5};
		*node = sg_grammar_add_literals(c->g, v, l, 2);
		return SG_OK;
	}
	case T_INT: return compile_integer(c, s, node);
	case T_NUM: return compile_number(c, s, node);
	case T_STR: {
		int64_t mn = 0, mx = -1;
		if ((st = get_count(c, s, "minLength", &mn)) != SG_OK) return st;
		if ((st = get_count(c, s, "maxLength", &mx)) != SG_OK) return st;
		if (mx >= 0 && mn > mx) return bad(c, "minLength exceeds maxLength");
		*node = sg_grammar_add_string(c->g, mn, mx);
		return SG_OK;
	}
	case T_ARR: {
		int64_t mn = 0, mx = -1;
		if ((st = get_count(c, s, "minItems", &mn)) != SG_OK) return st;
		if ((st = get_count(c, s, "maxItems", &mx)) != SG_OK) return st;
		if (mx >= 0 && mn > mx) return bad(c, "minItems exceeds maxItems");
		const json_t *it = json_object_get(s, "items");
		int items;
		if (!it) {
			items = sg_grammar_add_any(c->g);
		} else if (json_is_array(it)) {
			size_t o = path_push(c, "items");
			st = unsup(c, "items (array form)");
			path_pop(c, o);
			if (st != SG_OK) return st;
			items = sg_grammar_add_any(c->g);
		} else {
			size_t o = path_push(c, "items");
			st = compile(c, it, &items);
			path_pop(c, o);
			if (st != SG_OK) return st;
		}
		if (items == 0 && mn > 0) return bad(c, "minItems > 0 but items admit no value");
		*node = sg_grammar_add_array(c->g, items, mn, mx);
		return SG_OK;
	}
	case T_OBJ: return compile_object(c, s, node);
	}
	return bad(c, "unknown type");
}

static int type_bit(const char *t)
{
	static const char *names[] = {"null", "boolean", "integer", "number", "string", "array", "object"};
	for (int i = 0; i < 7; i++)
		if (strcmp(t, names[i]) == 0) return 1 << i;
	return 0;
}

static sg_status compile_union(cctx *c, const json_t *arr, const char *kw, int *node)
{
	size_t n = json_array_size(arr);
	if (!json_is_array(arr) || n == 0) return bad(c, "anyOf/oneOf/allOf must be a non-empty array");
	int *alts = sg_malloc(n * sizeof(int));
	if (!alts) return SG_FAIL(SG_ERR_NOMEM, "union of %zu", n);
	sg_status st = SG_OK;
	int k = 0;
	size_t o0 = path_push(c, kw);
	for (size_t i = 0; i < n && st == SG_OK; i++) {
		size_t o = path_push_idx(c, i);
		int a = 0;
		st = compile(c, json_array_get(arr, i), &a);
		path_pop(c, o);
		if (a != 0) alts[k++] = a;
	}
	path_pop(c, o0);
	if (st == SG_OK) *node = k ? sg_grammar_add_union(c->g, alts, k) : 0;
	sg_free(alts);
	return st;
}

static sg_status compile(cctx *c, const json_t *s, int *node)
{
	*node = 0;
	if (json_is_true(s)) {
		*node = sg_grammar_add_any(c->g);
		return SG_OK;
	}
	if (json_is_false(s)) return SG_OK;
	if (!json_is_object(s)) return bad(c, "a schema must be an object or a boolean");
	if (++c->depth > MAX_SCHEMA_DEPTH) {
		c->depth--;
		return bad(c, "schema nested deeper than 64 levels");
	}
	sg_status st = SG_OK;
	const char *k;
	json_t *v;
	/* unsupported keywords first, so the error names the keyword rather than a side effect */
	json_object_foreach((json_t *)s, k, v)
	{
		if (in_list(k, unsupported) || (strcmp(k, "uniqueItems") == 0 && json_is_true(v))) {
			size_t o = path_push(c, k);
			st = unsup(c, k);
			path_pop(c, o);
			if (st != SG_OK) goto out;
		}
	}
	const json_t *ref = json_object_get(s, "$ref");
	const json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
	const json_t *any = json_object_get(s, "anyOf"), *one = json_object_get(s, "oneOf");
	const json_t *all = json_object_get(s, "allOf"), *type = json_object_get(s, "type");
	int n_comb = (ref != NULL) + (any != NULL) + (one != NULL) + (all != NULL);
	if (n_comb > 1 || (n_comb == 1 && (type || en || cn))) {
		/* an intersection of a combinator with sibling constraints is not compiled */
		json_object_foreach((json_t *)s, k, v)
		{
			if (in_list(k, handled) && strcmp(k, "$ref") && strcmp(k, "anyOf") &&
			    strcmp(k, "oneOf") && strcmp(k, "allOf")) {
				size_t o = path_push(c, k);
				st = unsup(c, "keyword alongside $ref/anyOf/oneOf/allOf");
				path_pop(c, o);
				if (st != SG_OK) goto out;
				break;
			}
		}
		if (n_comb > 1) {
			st = unsup(c, "more than one of $ref/anyOf/oneOf/allOf");
			if (st != SG_OK) goto out;
		}
	}
	if (ref) {
		if (!json_is_string(ref)) {
			st = bad(c, "$ref must be a string");
			goto out;
		}
		st = compile_ref(c, json_string_value(ref), node);
		goto out;
	}
	if (any || one) {
		st = compile_union(c, any ? any : one, any ? "anyOf" : "oneOf", node);
		goto out;
	}
	if (all) {
		if (!json_is_array(all) || json_array_size(all) != 1) {
			size_t o = path_push(c, "allOf");
			st = unsup(c, "allOf");
			path_pop(c, o);
			if (st != SG_OK) goto out;
			*node = sg_grammar_add_any(c->g);
			goto out;
		}
		size_t o = path_push(c, "allOf");
		size_t o2 = path_push_idx(c, 0);
		st = compile(c, json_array_get(all, 0), node);
		path_pop(c, o2);
		path_pop(c, o);
		goto out;
	}
	int types = 0;
	if (type) {
		if (json_is_string(type)) {
			types = type_bit(json_string_value(type));
		} else if (json_is_array(type)) {
			for (size_t i = 0; i < json_array_size(type); i++) {
				const json_t *t = json_array_get(type, i);
				int b = json_is_string(t) ? type_bit(json_string_value(t)) : 0;
				if (!b) {
					types = 0;
					break;
				}
				types |= b;
			}
		}
		if (!types) {
			size_t o = path_push(c, "type");
			st = bad(c, "type must be a type name or an array of type names");
			path_pop(c, o);
			goto out;
		}
		if ((types & T_NUM) && (types & T_INT)) types &= ~T_INT;
	}
	if (en || cn) {
		if (en && !json_is_array(en)) {
			st = bad(c, "enum must be an array");
			goto out;
		}
		json_t *vals = en ? json_incref((json_t *)en) : json_pack("[O]", cn);
		if (!vals) {
			st = SG_FAIL(SG_ERR_NOMEM, "const");
			goto out;
		}
		if (en && cn) { /* both: the const, if the enum holds it */
			int found = 0;
			for (size_t i = 0; i < json_array_size(en); i++)
				if (json_equal(json_array_get(en, i), cn)) found = 1;
			json_decref(vals);
			vals = found ? json_pack("[O]", cn) : json_array();
		}
		st = compile_enum(c, vals, types ? types : T_ALL, node);
		json_decref(vals);
		goto out;
	}
	if (!types) {
		/* no type: infer it from the keywords, as generators commonly omit it */
		if (json_object_get(s, "properties") || json_object_get(s, "required") ||
		    json_object_get(s, "additionalProperties"))
			types = T_OBJ;
		else if (json_object_get(s, "items") || json_object_get(s, "minItems") ||
			 json_object_get(s, "maxItems"))
			types = T_ARR;
		else if (json_object_get(s, "minLength") || json_object_get(s, "maxLength"))
			types = T_STR;
		else if (json_object_get(s, "minimum") || json_object_get(s, "maximum") ||
			 json_object_get(s, "exclusiveMinimum") || json_object_get(s, "exclusiveMaximum"))
			types = T_NUM;
	}
	if (!types) {
		*node = sg_grammar_add_any(c->g);
		goto out;
	}
	int alts[7], na = 0;
	for (int b = 1; b <= T_OBJ && st == SG_OK; b <<= 1) {
		if (!(types & b)) continue;
		int a = 0;
		st = compile_type(c, s, b, &a);
		if (a) alts[na++] = a;
	}
	if (st == SG_OK) *node = na ? sg_grammar_add_union(c->g, alts, na) : 0;
out:
	c->depth--;
	return st;
}

sg_status sg_json_schema_compile_into(sg_grammar *g, const json_t *schema, int strict, int *node,
				      char *warn, size_t warn_size)
{
	cctx c;
	memset(&c, 0, sizeof(c));
	c.g = g;
	c.root = schema;
	c.strict = strict;
	c.warn = warn_size ? warn : NULL;
	c.warn_size = warn_size;
	if (c.warn) c.warn[0] = 0;
	*node = 0;
	sg_status st = compile(&c, schema, node);
	sg_free(c.memo);
	return st;
}

sg_status sg_json_schema_compile(const json_t *schema, int strict, sg_grammar **out, char *warn,
				 size_t warn_size)
{
	*out = NULL;
	if (!schema) return SG_FAIL(SG_ERR_INVALID_ARG, "no schema");
	sg_grammar *g = sg_grammar_new();
	if (!g) return SG_FAIL(SG_ERR_NOMEM, "grammar");
	int root = 0;
	sg_status st = sg_json_schema_compile_into(g, schema, strict, &root, warn, warn_size);
	if (st == SG_OK && root == 0) st = sg_error(SG_ERR_INVALID_ARG, "json_schema: the schema admits no value");
	if (st == SG_OK) st = sg_grammar_finish(g, root);
	if (st != SG_OK) {
		sg_grammar_free(g);
		return st;
	}
	*out = g;
	return SG_OK;
}

sg_status sg_json_schema_response_format(const json_t *rf, sg_grammar **out, char *warn,
					 size_t warn_size)
{
	*out = NULL;
	if (warn && warn_size) warn[0] = 0;
	if (!json_is_object(rf)) return sg_error(SG_ERR_INVALID_ARG, "response_format must be an object");
	const char *type = json_string_value(json_object_get(rf, "type"));
	if (!type) return sg_error(SG_ERR_INVALID_ARG, "response_format.type must be a string");
	if (strcmp(type, "text") == 0) return SG_OK;
	if (strcmp(type, "json_object") == 0) return sg_grammar_json_object(out);
	if (strcmp(type, "json_schema") != 0)
		return sg_error(SG_ERR_INVALID_ARG, "response_format.type '%s' is not text, json_object or json_schema", type);
	const json_t *js = json_object_get(rf, "json_schema");
	if (!json_is_object(js)) return sg_error(SG_ERR_INVALID_ARG, "response_format.json_schema must be an object");
	const json_t *schema = json_object_get(js, "schema");
	if (!schema) return sg_error(SG_ERR_INVALID_ARG, "response_format.json_schema.schema is missing");
	const json_t *strict = json_object_get(js, "strict");
	if (strict && !json_is_boolean(strict))
		return sg_error(SG_ERR_INVALID_ARG, "response_format.json_schema.strict must be a boolean");
	return sg_json_schema_compile(schema, json_is_true(strict), out, warn, warn_size);
}
