/* Attribute and item access as jinja2's getattr / getitem do them (a dict's key, a loop's
 * fields, a string's characters, a method of str / dict / list bound to its object), and the
 * items a for loop walks. The evaluator and the builtins both sit on these. */
#include <stdio.h>
#include <string.h>

#include "text/template/jinja_internal.h"

static jv attr_undef(jctx *c, jv obj, const char *name)
{
	size_t n = strlen(name) + 64;
	char *h = jalloc(c, n);
	snprintf(h, n, "'%s object' has no attribute '%s'", obj.t == JV_NONE ? "None" : jv_typename(obj), name);
	return jv_undef(h);
}

static jv method(jctx *c, jv obj, const char *name)
{
	jmethod *m = jalloc(c, sizeof(*m));
	m->self = obj;
	m->name = name;
	jv v = {.t = JV_METHOD};
	v.meth = m;
	return v;
}

static jv loop_attr(jctx *c, jv obj, const char *name)
{
	jloop *L = obj.loop;
	size_t n = L->items->n, i = L->i;
	if (!strcmp(name, "index")) return jv_int((int64_t)i + 1);
	if (!strcmp(name, "index0")) return jv_int((int64_t)i);
	if (!strcmp(name, "revindex")) return jv_int((int64_t)(n - i));
	if (!strcmp(name, "revindex0")) return jv_int((int64_t)(n - i - 1));
	if (!strcmp(name, "first")) return jv_bool(i == 0);
	if (!strcmp(name, "last")) return jv_bool(i + 1 == n);
	if (!strcmp(name, "length")) return jv_int((int64_t)n);
	if (!strcmp(name, "depth")) return jv_int(L->depth);
	if (!strcmp(name, "depth0")) return jv_int(L->depth - 1);
	if (!strcmp(name, "previtem")) return i > 0 ? L->items->v[i - 1] : jv_undef("there is no previous item");
	if (!strcmp(name, "nextitem")) return i + 1 < n ? L->items->v[i + 1] : jv_undef("there is no next item");
	if (!strcmp(name, "cycle")) return method(c, obj, "cycle");
	if (!strcmp(name, "changed")) jfail(c, "unsupported construct: loop.changed");
	return attr_undef(c, obj, name);
}

jv jinja_getattr(jctx *c, jv obj, const char *name)
{
	switch (obj.t) {
	case JV_UNDEF: jfail_undef(c, obj);
	case JV_DICT:
		if (jinja_is_method(obj, name)) return method(c, obj, name);
		{
			jv *v = jdict_gets(obj.d, name);
			if (v) return *v;
		}
		return attr_undef(c, obj, name);
	case JV_NS: {
		jv *v = jdict_gets(obj.d, name);
		return v ? *v : attr_undef(c, obj, name);
	}
	case JV_LOOP: return loop_attr(c, obj, name);
	case JV_STR:
	case JV_LIST:
		if (jinja_is_method(obj, name)) return method(c, obj, name);
		return attr_undef(c, obj, name);
	default: return attr_undef(c, obj, name);
	}
}

static int64_t norm_index(int64_t i, size_t n) { return i < 0 ? i + (int64_t)n : i; }

jv jinja_getitem(jctx *c, jv obj, jv key)
{
	switch (obj.t) {
	case JV_UNDEF: jfail_undef(c, obj);
	case JV_DICT:
	case JV_NS: {
		jv *v = jdict_get(obj.d, key);
		if (v) return *v;
		if (key.t == JV_STR && obj.t == JV_DICT && jinja_is_method(obj, key.s.p ? jv_strdup(c, key.s.p, key.s.n).s.p : ""))
			return method(c, obj, jv_strdup(c, key.s.p, key.s.n).s.p);
		break;
	}
	case JV_LIST:
		if (obj.l->kind != JL_LIST) break; /* generators and views are not subscriptable */
		if (key.t == JV_INT || key.t == JV_BOOL) {
			int64_t i = norm_index(key.t == JV_INT ? key.i : key.b, obj.l->n);
			if (i >= 0 && (size_t)i < obj.l->n) return obj.l->v[i];
		}
		break;
	case JV_STR:
		if (key.t == JV_INT || key.t == JV_BOOL) {
			size_t n = utf8_count(obj.s.p, obj.s.n);
			int64_t i = norm_index(key.t == JV_INT ? key.i : key.b, n);
			if (i >= 0 && (size_t)i < n) {
				size_t b = utf8_offset(obj.s.p, obj.s.n, (size_t)i), e = utf8_offset(obj.s.p, obj.s.n, (size_t)i + 1);
				return jv_str(obj.s.p + b, e - b);
			}
		}
		break;
	case JV_LOOP:
		if (key.t == JV_STR) return loop_attr(c, obj, jv_strdup(c, key.s.p, key.s.n).s.p);
		break;
	default: break;
	}
	if (key.t == JV_STR) {
		const char *k = jv_strdup(c, key.s.p, key.s.n).s.p;
		if (obj.t == JV_STR && jinja_is_method(obj, k)) return method(c, obj, k);
		return attr_undef(c, obj, k);
	}
	jbuf b = {0};
	jv_write_repr(c, &b, key);
	size_t n = b.n + 64;
	char *h = jalloc(c, n);
	snprintf(h, n, "'%s object' has no element %s", obj.t == JV_NONE ? "None" : jv_typename(obj), b.p ? b.p : "");
	return jv_undef(h);
}

/* ---- iteration ---- */

jlist *jinja_iterate(jctx *c, jv v)
{
	switch (v.t) {
	case JV_UNDEF: return jlist_new(c, 1);
	case JV_LIST: return v.l;
	case JV_DICT:
	case JV_NS: {
		jlist *l = jlist_new(c, v.d->n + 1);
		for (size_t i = 0; i < v.d->n; i++) jlist_push(c, l, v.d->k[i]);
		return l;
	}
	case JV_STR: {
		jlist *l = jlist_new(c, v.s.n + 1);
		size_t i = 0;
		while (i < v.s.n) {
			size_t j = i + 1;
			while (j < v.s.n && ((uint8_t)v.s.p[j] & 0xC0) == 0x80) j++;
			jlist_push(c, l, jv_str(v.s.p + i, j - i));
			i = j;
		}
		return l;
	}
	default: jfail(c, "'%s' object is not iterable", jv_typename(v));
	}
}

/* ---- methods ---- */

static const char *const STR_METHODS[] = {"startswith", "endswith", "split", "rsplit", "strip", "lstrip", "rstrip",
					  "upper", "lower", "title", "capitalize", "replace", "format", "find", "rfind",
					  "count", "join", "isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper",
					  "splitlines", "removeprefix", "removesuffix", "index", "rindex", "zfill",
					  "center", "ljust", "rjust", "casefold", "swapcase", "partition", "rpartition",
					  "expandtabs", "isnumeric", "isdecimal", "istitle", "isidentifier", "isprintable",
					  "isascii", "encode", "format_map", "maketrans", "translate", NULL};
static const char *const DICT_METHODS[] = {"get", "items", "keys", "values", "copy", "pop", "popitem", "setdefault",
					   "update", "clear", "fromkeys", NULL};
static const char *const LIST_METHODS[] = {"count", "index", "copy", "append", "extend", "insert", "pop", "remove",
					   "reverse", "sort", "clear", NULL};

static int in_list(const char *const *l, const char *name)
{
	for (int i = 0; l[i]; i++)
		if (!strcmp(l[i], name)) return 1;
	return 0;
}

int jinja_is_method(jv obj, const char *name)
{
	if (obj.t == JV_STR) return in_list(STR_METHODS, name);
	if (obj.t == JV_DICT) return in_list(DICT_METHODS, name);
	if (obj.t == JV_LIST) return in_list(LIST_METHODS, name);
	return 0;
}
