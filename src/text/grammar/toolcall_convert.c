/* Converters of the non-JSON tool-call syntaxes (Qwen3.5 XML, Gemma 4, Gemma 3 Python calls) to a
 * name and a JSON arguments object. Each works on a whole call body and fails cleanly on anything
 * unexpected; depth is bounded so hostile input cannot exhaust the stack. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "text/grammar/toolcall_internal.h"

#define MAX_DEPTH 64

typedef struct {
	const char *s;
	size_t n, i;
} cur;

static void skip_ws(cur *c)
{
	while (c->i < c->n && (c->s[c->i] == ' ' || c->s[c->i] == '\n' || c->s[c->i] == '\t' || c->s[c->i] == '\r'))
		c->i++;
}

static int eat(cur *c, const char *lit)
{
	size_t l = strlen(lit);
	if (c->n - c->i < l || memcmp(c->s + c->i, lit, l) != 0) return 0;
	c->i += l;
	return 1;
}

static const char *find(const char *s, size_t n, const char *lit)
{
	size_t l = strlen(lit);
	if (l > n) return NULL;
	for (size_t i = 0; i + l <= n; i++)
		if (memcmp(s + i, lit, l) == 0) return s + i;
	return NULL;
}

static int ident_char(int ch) { return isalnum(ch) || ch == '_' || ch == '-' || ch == '.'; }

/* ---- Qwen3.5/3.6 XML ---- */

/* The declared JSON type of a parameter ("string", "integer", ...) or NULL. */
static const char *param_type(const json_t *tools, const char *fn, const char *param)
{
	size_t i;
	json_t *t;
	json_array_foreach(tools, i, t)
	{
		const json_t *f = json_object_get(t, "function");
		if (!f) f = t;
		const char *nm = json_string_value(json_object_get(f, "name"));
		if (!nm || strcmp(nm, fn) != 0) continue;
		const json_t *p = json_object_get(json_object_get(json_object_get(f, "parameters"), "properties"), param);
		const json_t *ty = json_object_get(p, "type");
		if (json_is_string(ty)) return json_string_value(ty);
		if (json_is_array(ty) && json_array_size(ty) > 0) {
			/* ["string","null"]: a string unless the text is exactly null */
			for (size_t k = 0; k < json_array_size(ty); k++)
				if (json_is_string(json_array_get(ty, k)) &&
				    strcmp(json_string_value(json_array_get(ty, k)), "string") == 0)
					return "string";
		}
		return NULL;
	}
	return NULL;
}

int sg_tc_parse_qwen_xml(const char *s, size_t n, const json_t *tools, char **name, json_t **args)
{
	*name = NULL;
	*args = NULL;
	cur c = {s, n, 0};
	skip_ws(&c);
	if (!eat(&c, "<function=")) return -1;
	const char *gt = memchr(s + c.i, '>', n - c.i);
	if (!gt || gt == s + c.i) return -1;
	char *fn = sg_strndup(s + c.i, (size_t)(gt - (s + c.i)));
	if (!fn) return -1;
	c.i = (size_t)(gt - s) + 1;
	json_t *obj = json_object();
	for (;;) {
		skip_ws(&c);
		if (eat(&c, "</function>")) break;
		if (!eat(&c, "<parameter=")) goto bad;
		const char *pg = memchr(s + c.i, '>', n - c.i);
		if (!pg || pg == s + c.i) goto bad;
		char *key = sg_strndup(s + c.i, (size_t)(pg - (s + c.i)));
		if (!key) goto bad;
		c.i = (size_t)(pg - s) + 1;
		if (c.i < n && s[c.i] == '\n') c.i++;
		const char *end = find(s + c.i, n - c.i, "</parameter>");
		if (!end) {
			sg_free(key);
			goto bad;
		}
		size_t vl = (size_t)(end - (s + c.i));
		if (vl > 0 && s[c.i + vl - 1] == '\n') vl--;
		const char *ty = tools ? param_type(tools, fn, key) : NULL;
		json_t *v = NULL;
		if (!ty || strcmp(ty, "string") != 0) {
			v = json_loadb(s + c.i, vl, JSON_DECODE_ANY, NULL);
			if (v && !ty && json_is_string(v)) { /* a quoted text stays the text as written */
				json_decref(v);
				v = NULL;
			}
		}
		if (!v) v = json_stringn(s + c.i, vl);
		int rc = v ? json_object_set_new(obj, key, v) : -1;
		sg_free(key);
		if (rc) goto bad;
		c.i = (size_t)(end - s) + strlen("</parameter>");
	}
	skip_ws(&c);
	if (c.i != n) goto bad;
	*name = fn;
	*args = obj;
	return 0;
bad:
	sg_free(fn);
	json_decref(obj);
	return -1;
}

/* ---- Gemma 4: call:name{key:value,...}; strings quoted by <|"|> ---- */

#define GQ "<|\"|>"

static json_t *g4_value(cur *c, int depth);

static char *g4_key(cur *c)
{
	skip_ws(c);
	if (eat(c, GQ)) {
		const char *e = find(c->s + c->i, c->n - c->i, GQ);
		if (!e) return NULL;
		char *k = sg_strndup(c->s + c->i, (size_t)(e - (c->s + c->i)));
		c->i = (size_t)(e - c->s) + strlen(GQ);
		return k;
	}
	size_t st = c->i;
	while (c->i < c->n && c->s[c->i] != ':' && c->s[c->i] != '}' && c->s[c->i] != ',') c->i++;
	size_t e = c->i;
	while (e > st && isspace((unsigned char)c->s[e - 1])) e--;
	if (e == st) return NULL;
	return sg_strndup(c->s + st, e - st);
}

static json_t *g4_value(cur *c, int depth)
{
	if (depth > MAX_DEPTH) return NULL;
	skip_ws(c);
	if (c->i >= c->n) return NULL;
	if (eat(c, GQ)) {
		const char *e = find(c->s + c->i, c->n - c->i, GQ);
		if (!e) return NULL;
		json_t *v = json_stringn(c->s + c->i, (size_t)(e - (c->s + c->i)));
		c->i = (size_t)(e - c->s) + strlen(GQ);
		return v;
	}
	char ch = c->s[c->i];
	if (ch == '{') {
		c->i++;
		json_t *o = json_object();
		skip_ws(c);
		if (eat(c, "}")) return o;
		for (;;) {
			char *k = g4_key(c);
			skip_ws(c);
			if (!k || !eat(c, ":")) {
				sg_free(k);
				json_decref(o);
				return NULL;
			}
			json_t *v = g4_value(c, depth + 1);
			int rc = v ? json_object_set_new(o, k, v) : -1;
			sg_free(k);
			if (rc) {
				json_decref(o);
				return NULL;
			}
			skip_ws(c);
			if (eat(c, ",")) continue;
			if (eat(c, "}")) return o;
			json_decref(o);
			return NULL;
		}
	}
	if (ch == '[') {
		c->i++;
		json_t *a = json_array();
		skip_ws(c);
		if (eat(c, "]")) return a;
		for (;;) {
			json_t *v = g4_value(c, depth + 1);
			if (!v || json_array_append_new(a, v)) {
				json_decref(a);
				return NULL;
			}
			skip_ws(c);
			if (eat(c, ",")) continue;
			if (eat(c, "]")) return a;
			json_decref(a);
			return NULL;
		}
	}
	size_t st = c->i;
	while (c->i < c->n && c->s[c->i] != ',' && c->s[c->i] != '}' && c->s[c->i] != ']') c->i++;
	size_t e = c->i;
	while (e > st && isspace((unsigned char)c->s[e - 1])) e--;
	if (e == st) return NULL;
	json_t *v = json_loadb(c->s + st, e - st, JSON_DECODE_ANY, NULL);
	if (v && (json_is_object(v) || json_is_array(v) || json_is_string(v))) {
		json_decref(v);
		v = NULL;
	}
	return v ? v : json_stringn(c->s + st, e - st); /* a bare word: keep it as text */
}

int sg_tc_parse_gemma4(const char *s, size_t n, char **name, json_t **args)
{
	*name = NULL;
	*args = NULL;
	cur c = {s, n, 0};
	skip_ws(&c);
	if (!eat(&c, "call:")) return -1;
	size_t st = c.i;
	while (c.i < n && ident_char((unsigned char)s[c.i])) c.i++;
	size_t ne = c.i;
	if (c.i == st || c.i >= n || s[c.i] != '{') return -1;
	json_t *a = g4_value(&c, 0);
	skip_ws(&c);
	if (!a || !json_is_object(a) || c.i != n) {
		json_decref(a);
		return -1;
	}
	*name = sg_strndup(s + st, ne - st);
	if (!*name) {
		json_decref(a);
		return -1;
	}
	*args = a;
	return 0;
}

/* ---- Gemma 3: name(key=value, ...) with Python literals ---- */

static json_t *py_value(cur *c, int depth);

static json_t *py_string(cur *c)
{
	char q = c->s[c->i++];
	char *buf = sg_malloc(c->n - c->i + 1);
	if (!buf) return NULL;
	size_t k = 0;
	while (c->i < c->n && c->s[c->i] != q) {
		char ch = c->s[c->i++];
		if (ch == '\\' && c->i < c->n) {
			char e = c->s[c->i++];
			ch = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
		}
		buf[k++] = ch;
	}
	if (c->i >= c->n) {
		sg_free(buf);
		return NULL;
	}
	c->i++;
	json_t *v = json_stringn(buf, k);
	sg_free(buf);
	return v;
}

static json_t *py_seq(cur *c, char close, int depth)
{
	json_t *a = json_array();
	skip_ws(c);
	if (c->i < c->n && c->s[c->i] == close) {
		c->i++;
		return a;
	}
	for (;;) {
		json_t *v = py_value(c, depth + 1);
		if (!v || json_array_append_new(a, v)) break;
		skip_ws(c);
		if (c->i < c->n && c->s[c->i] == ',') {
			c->i++;
			skip_ws(c);
			if (c->i < c->n && c->s[c->i] == close) { /* trailing comma */
				c->i++;
				return a;
			}
			continue;
		}
		if (c->i < c->n && c->s[c->i] == close) {
			c->i++;
			return a;
		}
		break;
	}
	json_decref(a);
	return NULL;
}

static json_t *py_value(cur *c, int depth)
{
	if (depth > MAX_DEPTH) return NULL;
	skip_ws(c);
	if (c->i >= c->n) return NULL;
	char ch = c->s[c->i];
	if (ch == '"' || ch == '\'') return py_string(c);
	if (ch == '[') {
		c->i++;
		return py_seq(c, ']', depth);
	}
	if (ch == '(') {
		c->i++;
		return py_seq(c, ')', depth);
	}
	if (ch == '{') {
		c->i++;
		json_t *o = json_object();
		skip_ws(c);
		if (eat(c, "}")) return o;
		for (;;) {
			skip_ws(c);
			json_t *k = (c->i < c->n && (c->s[c->i] == '"' || c->s[c->i] == '\'')) ? py_string(c) : NULL;
			skip_ws(c);
			json_t *v = (k && eat(c, ":")) ? py_value(c, depth + 1) : NULL;
			int rc = v ? json_object_set_new(o, json_string_value(k), v) : -1;
			json_decref(k);
			if (rc) break;
			skip_ws(c);
			if (eat(c, ",")) {
				skip_ws(c);
				if (eat(c, "}")) return o;
				continue;
			}
			if (eat(c, "}")) return o;
			break;
		}
		json_decref(o);
		return NULL;
	}
	if (eat(c, "True")) return json_true();
	if (eat(c, "False")) return json_false();
	if (eat(c, "None")) return json_null();
	size_t st = c->i;
	while (c->i < c->n && (isdigit((unsigned char)c->s[c->i]) || strchr("+-.eE", c->s[c->i]))) c->i++;
	if (c->i == st) return NULL;
	return json_loadb(c->s + st, c->i - st, JSON_DECODE_ANY, NULL);
}

int sg_tc_parse_gemma3(const char *s, size_t n, char **name, json_t **args)
{
	*name = NULL;
	*args = NULL;
	cur c = {s, n, 0};
	skip_ws(&c);
	size_t st = c.i;
	while (c.i < n && ident_char((unsigned char)s[c.i])) c.i++;
	size_t ne = c.i;
	if (ne == st || !eat(&c, "(")) return -1;
	json_t *o = json_object();
	skip_ws(&c);
	if (!eat(&c, ")")) {
		for (;;) {
			skip_ws(&c);
			size_t ks = c.i;
			while (c.i < n && (isalnum((unsigned char)s[c.i]) || s[c.i] == '_')) c.i++;
			size_t ke = c.i;
			skip_ws(&c);
			if (ke == ks || !eat(&c, "=")) goto bad;
			json_t *v = py_value(&c, 0);
			char *k = sg_strndup(s + ks, ke - ks);
			int rc = (v && k) ? json_object_set_new(o, k, v) : -1;
			if (rc && v && !k) json_decref(v);
			sg_free(k);
			if (rc) goto bad;
			skip_ws(&c);
			if (eat(&c, ",")) continue;
			if (eat(&c, ")")) break;
			goto bad;
		}
	}
	skip_ws(&c);
	if (c.i != n) goto bad;
	*name = sg_strndup(s + st, ne - st);
	if (!*name) goto bad;
	*args = o;
	return 0;
bad:
	json_decref(o);
	return -1;
}
