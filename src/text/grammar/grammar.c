/* The byte-level JSON automaton: node graph, per-byte stepping of a set of parse stacks, and the
 * trie walk that turns it into a token mask. See grammar.h for the contract and limits. */
#include "text/grammar/grammar.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/arena.h"
#include "base/error.h"
#include "text/grammar/grammar_internal.h"

/* ---- building ---- */

static int fail_build(sg_grammar *g, const char *msg)
{
	if (g->err == SG_OK) {
		g->err = SG_ERR_NOMEM;
		snprintf(g->errmsg, sizeof(g->errmsg), "%s", msg);
	}
	return 0;
}

static int new_node(sg_grammar *g, int kind)
{
	if (g->sealed) return fail_build(g, "grammar: node added after finish");
	if (g->n == g->cap) {
		int cap = g->cap ? g->cap * 2 : 64;
		gnode *p = sg_realloc(g->nodes, (size_t)cap * sizeof(gnode));
		if (!p) return fail_build(g, "grammar: out of memory for nodes");
		g->nodes = p;
		g->cap = cap;
	}
	memset(&g->nodes[g->n], 0, sizeof(gnode));
	g->nodes[g->n].kind = (uint8_t)kind;
	return g->n++;
}

static void *galloc(sg_grammar *g, size_t n)
{
	void *p = sg_arena_alloc(&g->arena, n ? n : 1, 8);
	if (!p) fail_build(g, "grammar: out of memory");
	return p;
}

sg_grammar *sg_grammar_new(void)
{
	sg_grammar *g = sg_calloc(1, sizeof(*g));
	if (!g) return NULL;
	sg_arena_init(&g->arena, 0);
	g->any = -1;
	g->root = -1;
	new_node(g, GN_NEVER); /* id 0 */
	if (g->err != SG_OK) {
		sg_grammar_free(g);
		return NULL;
	}
	return g;
}

void sg_grammar_free(sg_grammar *g)
{
	if (!g) return;
	sg_free(g->nodes);
	sg_arena_free(&g->arena);
	sg_free(g);
}

int sg_grammar_add_never(sg_grammar *g) { return 0; }

static uint32_t clamp_u32(int64_t v)
{
	if (v < 0 || v >= (int64_t)G_UNBOUNDED) return G_UNBOUNDED;
	return (uint32_t)v;
}

int sg_grammar_add_string(sg_grammar *g, int64_t min_len, int64_t max_len)
{
	int id = new_node(g, GN_STRING);
	if (!id) return 0;
	g->nodes[id].str.min = min_len < 0 ? 0 : (min_len > G_UNBOUNDED - 1 ? G_UNBOUNDED - 1 : (uint32_t)min_len);
	g->nodes[id].str.max = clamp_u32(max_len);
	return id;
}

int sg_grammar_add_number(sg_grammar *g, int integer, int bounded, int64_t lo, int64_t hi)
{
	int id = new_node(g, GN_NUMBER);
	if (!id) return 0;
	g->nodes[id].num.integer = integer != 0;
	g->nodes[id].num.bounded = integer && bounded;
	g->nodes[id].num.lo = lo;
	g->nodes[id].num.hi = hi;
	return id;
}

int sg_grammar_add_decimal(sg_grammar *g, int negative, int64_t lo, int64_t hi)
{
	if (lo < 0 || hi < lo) return fail_build(g, "grammar: decimal bounds out of order");
	int id = new_node(g, GN_NUMBER);
	if (!id) return 0;
	g->nodes[id].num.decimal = 1;
	g->nodes[id].num.neg = negative != 0;
	g->nodes[id].num.lo = lo;
	g->nodes[id].num.hi = hi;
	return id;
}

static int cmp_lit(const void *a, const void *b)
{
	const glit *x = a, *y = b;
	uint32_t m = x->len < y->len ? x->len : y->len;
	int c = m ? memcmp(x->s, y->s, m) : 0;
	if (c) return c;
	return x->len < y->len ? -1 : x->len > y->len;
}

int sg_grammar_add_literals(sg_grammar *g, const char *const *s, const size_t *len, int n)
{
	if (n <= 0 || n > 65535) return fail_build(g, "grammar: literal set needs 1..65535 values");
	glit *v = galloc(g, (size_t)n * sizeof(glit));
	if (!v) return 0;
	for (int i = 0; i < n; i++) {
		if (len[i] == 0 || len[i] > UINT32_MAX / 2) return fail_build(g, "grammar: empty literal");
		uint8_t *p = galloc(g, len[i]);
		if (!p) return 0;
		memcpy(p, s[i], len[i]);
		v[i].s = p;
		v[i].len = (uint32_t)len[i];
	}
	qsort(v, (size_t)n, sizeof(glit), cmp_lit);
	int m = 0;
	for (int i = 0; i < n; i++)
		if (m == 0 || cmp_lit(&v[m - 1], &v[i]) != 0) v[m++] = v[i];
	int id = new_node(g, GN_LITERALS);
	if (!id) return 0;
	g->nodes[id].lit.v = v;
	g->nodes[id].lit.n = m;
	return id;
}

int sg_grammar_add_literal(sg_grammar *g, const char *s)
{
	size_t n = strlen(s);
	return sg_grammar_add_literals(g, &s, &n, 1);
}

int sg_grammar_add_union(sg_grammar *g, const int *alts, int n)
{
	if (n <= 0) return 0;
	if (n == 1) return alts[0];
	int *a = galloc(g, (size_t)n * sizeof(int));
	if (!a) return 0;
	memcpy(a, alts, (size_t)n * sizeof(int));
	int id = new_node(g, GN_UNION);
	if (!id) return 0;
	g->nodes[id].u.alts = a;
	g->nodes[id].u.n = n;
	return id;
}

int sg_grammar_add_ref(sg_grammar *g)
{
	int id = new_node(g, GN_REF);
	if (id) g->nodes[id].ref.target = -1;
	return id;
}

void sg_grammar_set_ref(sg_grammar *g, int ref, int target)
{
	if (ref <= 0 || ref >= g->n || g->nodes[ref].kind != GN_REF || target < 0 || target >= g->n) {
		fail_build(g, "grammar: bad reference");
		return;
	}
	g->nodes[ref].ref.target = target;
}

int sg_grammar_add_array(sg_grammar *g, int items, int64_t min, int64_t max)
{
	int id = new_node(g, GN_ARRAY);
	if (!id) return 0;
	g->nodes[id].arr.items = items;
	g->nodes[id].arr.min = min < 0 ? 0 : (min > G_UNBOUNDED - 1 ? G_UNBOUNDED - 1 : (uint32_t)min);
	g->nodes[id].arr.max = clamp_u32(max);
	if (items == 0) g->nodes[id].arr.max = 0; /* items that match nothing: only [] */
	return id;
}

/* Writes the JSON string form ("..." with escapes) of a decoded name. */
static glit encode_name(sg_grammar *g, const char *s, size_t n)
{
	glit r = {NULL, 0};
	uint8_t *p = galloc(g, n * 6 + 2);
	if (!p) return r;
	size_t k = 0;
	p[k++] = '"';
	for (size_t i = 0; i < n; i++) {
		uint8_t c = (uint8_t)s[i];
		if (c == '"' || c == '\\') {
			p[k++] = '\\';
			p[k++] = c;
		} else if (c < 0x20) {
			static const char hex[] = "0123456789abcdef";
			const char *sh = c == '\n' ? "n" : c == '\t' ? "t" : c == '\r' ? "r" : c == '\b' ? "b" : c == '\f' ? "f" : NULL;
			p[k++] = '\\';
			if (sh) {
				p[k++] = (uint8_t)sh[0];
			} else {
				p[k++] = 'u';
				p[k++] = '0';
				p[k++] = '0';
				p[k++] = (uint8_t)hex[c >> 4];
				p[k++] = (uint8_t)hex[c & 15];
			}
		} else {
			p[k++] = c;
		}
	}
	p[k++] = '"';
	r.s = p;
	r.len = (uint32_t)k;
	return r;
}

int sg_grammar_add_object(sg_grammar *g, const sg_grammar_prop *props, int n, int additional)
{
	if (n < 0 || n > 65535) return fail_build(g, "grammar: object needs 0..65535 properties");
	gobj o;
	memset(&o, 0, sizeof(o));
	o.n = n;
	o.additional = additional < 0 ? -1 : additional;
	o.names = galloc(g, (size_t)(n + 1) * sizeof(glit));
	o.nodes = galloc(g, (size_t)(n + 1) * sizeof(int));
	o.next_req = galloc(g, (size_t)(n + 1) * sizeof(int));
	o.keyable = galloc(g, (size_t)(n + 1));
	o.sorted = galloc(g, (size_t)(n + 1) * sizeof(glit));
	o.order = galloc(g, (size_t)(n + 1) * sizeof(int));
	if (g->err != SG_OK) return 0;
	for (int i = 0; i < n; i++) {
		o.names[i] = encode_name(g, props[i].name, props[i].name_len);
		if (!o.names[i].s) return 0;
		o.nodes[i] = props[i].node;
		if (props[i].required && props[i].node == 0)
			return fail_build(g, "grammar: a required property can never be valid");
	}
	int nr = n;
	for (int i = n; i >= 0; i--) {
		if (i < n && props[i].required) nr = i;
		o.next_req[i] = nr;
	}
	for (int a = 0; a <= n; a++) {
		int k = 0;
		int wb = o.next_req[a] < n ? o.next_req[a] : n - 1;
		for (int i = a; i <= wb; i++)
			if (o.nodes[i] != 0) k = 1;
		if (o.next_req[a] == n && o.additional >= 0) k = 1;
		o.keyable[a] = (uint8_t)k;
	}
	/* sorted names with their property index, for the key matcher's range narrowing */
	for (int i = 0; i < n; i++) o.order[i] = i;
	for (int i = 1; i < n; i++) { /* insertion sort: stable, n is small in practice */
		int x = o.order[i], j = i - 1;
		while (j >= 0 && cmp_lit(&o.names[o.order[j]], &o.names[x]) > 0) {
			o.order[j + 1] = o.order[j];
			j--;
		}
		o.order[j + 1] = x;
	}
	for (int i = 0; i < n; i++) {
		o.sorted[i] = o.names[o.order[i]];
		if (i > 0 && cmp_lit(&o.sorted[i - 1], &o.sorted[i]) == 0)
			return fail_build(g, "grammar: duplicate property name");
	}
	int key;
	if (n == 0) {
		key = sg_grammar_add_string(g, 0, -1);
	} else {
		key = new_node(g, GN_KEY);
	}
	int id = new_node(g, GN_OBJECT);
	if (!id || !key) return 0;
	o.keynode = key;
	g->nodes[id].obj = o;
	if (n > 0) g->nodes[key].key.obj = id;
	return id;
}

int sg_grammar_add_raw_until(sg_grammar *g, const char *term)
{
	size_t n = term ? strlen(term) : 0;
	if (n == 0 || n > 64) return fail_build(g, "grammar: raw text terminator needs 1..64 bytes");
	uint8_t *t = galloc(g, n), *fail = galloc(g, n);
	if (!t || !fail) return 0;
	memcpy(t, term, n);
	/* KMP prefix function: fail[i] = length of the longest proper border of term[0..i] */
	fail[0] = 0;
	for (size_t i = 1, k = 0; i < n; i++) {
		while (k > 0 && t[i] != t[k]) k = fail[k - 1];
		if (t[i] == t[k]) k++;
		fail[i] = (uint8_t)k;
	}
	int id = new_node(g, GN_RAW);
	if (!id) return 0;
	g->nodes[id].raw.term.s = t;
	g->nodes[id].raw.term.len = (uint32_t)n;
	g->nodes[id].raw.fail = fail;
	/* a plain token (no control byte, quote or backslash) can never complete a terminator that
	 * ends in such a byte, so inside the text every plain token is valid */
	uint8_t last = t[n - 1];
	g->nodes[id].raw.plain_ok = last < 0x20 || last == '"' || last == '\\';
	return id;
}

int sg_grammar_add_seq(sg_grammar *g, const int *children, int n, int ws)
{
	if (n <= 0) return fail_build(g, "grammar: empty sequence");
	int *c = galloc(g, (size_t)n * sizeof(int));
	if (!c) return 0;
	memcpy(c, children, (size_t)n * sizeof(int));
	int id = new_node(g, GN_SEQ);
	if (!id) return 0;
	g->nodes[id].seq.ch = c;
	g->nodes[id].seq.n = n;
	g->nodes[id].seq.ws = ws != 0;
	return id;
}

int sg_grammar_add_repeat(sg_grammar *g, int child, int64_t min, int64_t max, int ws)
{
	int id = new_node(g, GN_REPEAT);
	if (!id) return 0;
	g->nodes[id].rep.child = child;
	g->nodes[id].rep.min = min < 0 ? 0 : (min > G_UNBOUNDED - 1 ? G_UNBOUNDED - 1 : (uint32_t)min);
	g->nodes[id].rep.max = clamp_u32(max);
	g->nodes[id].rep.ws = ws != 0;
	return id;
}

int sg_grammar_add_any(sg_grammar *g)
{
	if (g->any >= 0) return g->any;
	int r = sg_grammar_add_ref(g);
	int obj = sg_grammar_add_object(g, NULL, 0, r);
	int arr = sg_grammar_add_array(g, r, 0, -1);
	int str = sg_grammar_add_string(g, 0, -1);
	int num = sg_grammar_add_number(g, 0, 0, 0, 0);
	const char *lits[] = {"true", "false", "null"};
	size_t lens[] = {4, 5, 4};
	int lit = sg_grammar_add_literals(g, lits, lens, 3);
	int alts[] = {obj, arr, str, num, lit};
	int u = sg_grammar_add_union(g, alts, 5);
	if (g->err != SG_OK) return 0;
	sg_grammar_set_ref(g, r, u);
	g->any = u;
	g->any_object = obj;
	return u;
}

/* Epsilon edges: nodes that hand the same byte to a child without consuming it. A cycle of them
 * would recurse forever on one byte. */
static int eps_cycle(const sg_grammar *g, int v, uint8_t *color)
{
	if (color[v] == 1) return 1;
	if (color[v] == 2) return 0;
	color[v] = 1;
	const gnode *n = &g->nodes[v];
	int bad = 0;
	switch (n->kind) {
	case GN_REF: bad = eps_cycle(g, n->ref.target, color); break;
	case GN_UNION:
		for (int i = 0; i < n->u.n && !bad; i++) bad = eps_cycle(g, n->u.alts[i], color);
		break;
	case GN_SEQ: bad = eps_cycle(g, n->seq.ch[0], color); break;
	case GN_REPEAT: bad = eps_cycle(g, n->rep.child, color); break;
	default: break;
	}
	color[v] = 2;
	return bad;
}

sg_status sg_grammar_finish(sg_grammar *g, int root)
{
	if (!g) return SG_FAIL(SG_ERR_INVALID_ARG, "no grammar");
	if (g->err != SG_OK) return sg_error(g->err, "%s", g->errmsg);
	if (root < 0 || root >= g->n) return SG_FAIL(SG_ERR_INVALID_ARG, "root node %d of %d", root, g->n);
	for (int i = 0; i < g->n; i++) {
		const gnode *n = &g->nodes[i];
		if (n->kind == GN_REF && n->ref.target < 0)
			return SG_FAIL(SG_ERR_INVALID_ARG, "grammar: unresolved reference (node %d)", i);
		int kids[2] = {-1, -1};
		if (n->kind == GN_ARRAY) kids[0] = n->arr.items;
		if (n->kind == GN_OBJECT) kids[0] = n->obj.additional;
		for (int k = 0; k < 2; k++)
			if (kids[k] >= g->n) return SG_FAIL(SG_ERR_INVALID_ARG, "grammar: bad child of node %d", i);
	}
	uint8_t *color = sg_calloc((size_t)g->n, 1);
	if (!color) return SG_FAIL(SG_ERR_NOMEM, "grammar check");
	int bad = 0;
	for (int i = 0; i < g->n && !bad; i++) bad = eps_cycle(g, i, color);
	sg_free(color);
	if (bad)
		return SG_FAIL(SG_ERR_INVALID_ARG,
			       "grammar: a reference or union refers to itself without consuming input");
	int r = new_node(g, GN_ROOT);
	if (g->err != SG_OK) return sg_error(g->err, "%s", g->errmsg);
	g->nodes[r].root.child = root;
	g->root = r;
	g->sealed = 1;
	return SG_OK;
}

sg_status sg_grammar_json_object(sg_grammar **out)
{
	*out = NULL;
	sg_grammar *g = sg_grammar_new();
	if (!g) return SG_FAIL(SG_ERR_NOMEM, "grammar");
	sg_grammar_add_any(g);
	sg_status st = sg_grammar_finish(g, g->any_object);
	if (st != SG_OK) {
		sg_grammar_free(g);
		return st;
	}
	*out = g;
	return SG_OK;
}
