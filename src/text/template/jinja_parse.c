/* Jinja parser: tokens into an AST (jinja_internal.h), following the grammar and operator
 * precedence of jinja2's parser: condexpr > or > and > not > compare > +,- > ~ > *,/,//,% > ** >
 * unary > postfix (. [] ()) > filters and tests. Unknown filters and tests are errors here, as in
 * Jinja, so a template is rejected before anything renders. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "text/template/jinja_internal.h"

#define MAX_PARSE_DEPTH 200

static token *cur(jparse *p) { return &p->toks[p->pos]; }
static token *peek(jparse *p, size_t k)
{
	size_t i = p->pos + k;
	return &p->toks[i < p->ntoks ? i : p->ntoks - 1];
}
static void next(jparse *p)
{
	if (p->pos + 1 < p->ntoks) p->pos++;
}

static int is_op(token *t, const char *op) { return t->t == TK_OP && t->n == strlen(op) && !strncmp(t->s, op, t->n); }
static int is_name(token *t, const char *nm) { return t->t == TK_NAME && !strcmp(t->s, nm); }

static const char *tok_desc(token *t, char *buf, size_t n)
{
	switch (t->t) {
	case TK_EOF: return "end of template";
	case TK_DATA: return "template text";
	case TK_VAR_BEGIN: return "'{{'";
	case TK_VAR_END: return "'}}'";
	case TK_BLOCK_BEGIN: return "'{%'";
	case TK_BLOCK_END: return "'%}'";
	case TK_STRING: return "string literal";
	case TK_INT: return "integer literal";
	case TK_FLOAT: return "float literal";
	default: snprintf(buf, n, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s); return buf;
	}
}

_Noreturn static void unexpected(jparse *p, const char *expected)
{
	char b[64];
	token *t = cur(p);
	jinja_parse_fail(p, SG_ERR_FORMAT, t->line, t->col, "expected %s, found %s", expected, tok_desc(t, b, sizeof(b)));
}

static void expect_op(jparse *p, const char *op)
{
	if (!is_op(cur(p), op)) {
		char e[16];
		snprintf(e, sizeof(e), "'%s'", op);
		unexpected(p, e);
	}
	next(p);
}

static int accept_op(jparse *p, const char *op)
{
	if (!is_op(cur(p), op)) return 0;
	next(p);
	return 1;
}

static int accept_name(jparse *p, const char *nm)
{
	if (!is_name(cur(p), nm)) return 0;
	next(p);
	return 1;
}

static void expect_block_end(jparse *p)
{
	if (cur(p)->t != TK_BLOCK_END) unexpected(p, "'%}'");
	next(p);
}

static void *palloc(jparse *p, size_t n)
{
	void *x = sg_arena_alloc(p->a, n, 8);
	if (!x) jinja_parse_fail(p, SG_ERR_NOMEM, cur(p)->line, cur(p)->col, "out of memory");
	return x;
}

static node *nn(jparse *p, node_type t, token *at)
{
	node *n = palloc(p, sizeof(node));
	n->t = t;
	n->line = at->line;
	n->col = at->col;
	return n;
}

void nodelist_push(sg_arena *a, nodelist *l, node *n, jparse *p)
{
	if (l->n == l->cap) {
		size_t nc = l->cap ? l->cap * 2 : 4;
		node **nv = sg_arena_alloc(a, nc * sizeof(node *), 8);
		if (!nv) jinja_parse_fail(p, SG_ERR_NOMEM, 0, 0, "out of memory");
		if (l->n) memcpy(nv, l->v, l->n * sizeof(node *));
		l->v = nv;
		l->cap = nc;
	}
	l->v[l->n++] = n;
}

static void enter(jparse *p)
{
	if (++p->depth > MAX_PARSE_DEPTH)
		jinja_parse_fail(p, SG_ERR_UNSUPPORTED, cur(p)->line, cur(p)->col, "expression nested more than %d deep", MAX_PARSE_DEPTH);
}

static node *parse_expr(jparse *p);
static node *parse_or(jparse *p);
static node *parse_unary(jparse *p, int with_filter);
static node *parse_postfix(jparse *p, node *n);
static node *parse_filter_expr(jparse *p, node *n);

/* Arguments of a call: ( a, b, k=v ); the '(' is current. */
static void parse_args(jparse *p, node *n)
{
	expect_op(p, "(");
	size_t cap = 0;
	int seen_kw = 0;
	while (!is_op(cur(p), ")")) {
		if (n->kids.n) expect_op(p, ",");
		if (is_op(cur(p), ")")) break;
		if (is_op(cur(p), "*") || is_op(cur(p), "**"))
			jinja_parse_fail(p, SG_ERR_UNSUPPORTED, cur(p)->line, cur(p)->col, "unsupported construct: *args / **kwargs in a call");
		const char *kw = NULL;
		if (cur(p)->t == TK_NAME && is_op(peek(p, 1), "=")) {
			kw = cur(p)->s;
			next(p);
			next(p);
			seen_kw = 1;
		} else if (seen_kw)
			jinja_parse_fail(p, SG_ERR_FORMAT, cur(p)->line, cur(p)->col, "positional argument follows keyword argument");
		node *a = parse_expr(p);
		if (n->kids.n == cap) {
			size_t nc = cap ? cap * 2 : 4;
			const char **nk = palloc(p, nc * sizeof(char *));
			if (cap) memcpy(nk, n->kwnames, cap * sizeof(char *));
			n->kwnames = nk;
			cap = nc;
		}
		n->kwnames[n->kids.n] = kw;
		nodelist_push(p->a, &n->kids, a, p);
	}
	next(p);
}

static node *parse_primary(jparse *p)
{
	token *t = cur(p);
	node *n;
	switch (t->t) {
	case TK_NAME:
		if (!strcmp(t->s, "true") || !strcmp(t->s, "True")) {
			n = nn(p, N_LIT, t);
			n->v = jv_bool(1);
		} else if (!strcmp(t->s, "false") || !strcmp(t->s, "False")) {
			n = nn(p, N_LIT, t);
			n->v = jv_bool(0);
		} else if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) {
			n = nn(p, N_LIT, t);
			n->v = jv_none();
		} else {
			n = nn(p, N_NAME, t);
			n->name = t->s;
		}
		next(p);
		return n;
	case TK_STRING: {
		/* Adjacent string literals concatenate, as in Python. */
		size_t total = 0, k = 0;
		while (peek(p, k)->t == TK_STRING) total += peek(p, k++)->n;
		char *d = palloc(p, total + 1);
		size_t off = 0;
		while (cur(p)->t == TK_STRING) {
			memcpy(d + off, cur(p)->s, cur(p)->n);
			off += cur(p)->n;
			next(p);
		}
		d[off] = 0;
		n = nn(p, N_LIT, t);
		n->v = jv_str(d, off);
		return n;
	}
	case TK_INT:
		n = nn(p, N_LIT, t);
		n->v = jv_int(t->i);
		next(p);
		return n;
	case TK_FLOAT:
		n = nn(p, N_LIT, t);
		n->v = jv_float(t->f);
		next(p);
		return n;
	case TK_OP:
		if (is_op(t, "(")) {
			next(p);
			if (accept_op(p, ")")) return nn(p, N_TUPLE, t);
			node *e = parse_expr(p);
			if (is_op(cur(p), ",")) {
				n = nn(p, N_TUPLE, t);
				nodelist_push(p->a, &n->kids, e, p);
				while (accept_op(p, ",")) {
					if (is_op(cur(p), ")")) break;
					nodelist_push(p->a, &n->kids, parse_expr(p), p);
				}
				e = n;
			}
			expect_op(p, ")");
			return e;
		}
		if (is_op(t, "[")) {
			next(p);
			n = nn(p, N_LIST, t);
			while (!is_op(cur(p), "]")) {
				if (n->kids.n) expect_op(p, ",");
				if (is_op(cur(p), "]")) break;
				nodelist_push(p->a, &n->kids, parse_expr(p), p);
			}
			next(p);
			return n;
		}
		if (is_op(t, "{")) {
			next(p);
			n = nn(p, N_DICT, t);
			while (!is_op(cur(p), "}")) {
				if (n->kids.n) expect_op(p, ",");
				if (is_op(cur(p), "}")) break;
				nodelist_push(p->a, &n->kids, parse_expr(p), p);
				expect_op(p, ":");
				nodelist_push(p->a, &n->kids, parse_expr(p), p);
			}
			next(p);
			return n;
		}
		break;
	default: break;
	}
	unexpected(p, "an expression");
}

static node *parse_subscript(jparse *p, node *obj, token *at)
{
	/* obj [ ... ]: an index or a slice a:b:c. */
	node *parts[3] = {NULL, NULL, NULL};
	int is_slice = 0, k = 0;
	if (!is_op(cur(p), ":")) parts[0] = parse_expr(p);
	while (is_op(cur(p), ":") && k < 2) {
		is_slice = 1;
		next(p);
		k++;
		if (!is_op(cur(p), ":") && !is_op(cur(p), "]")) parts[k] = parse_expr(p);
	}
	if (is_op(cur(p), ","))
		jinja_parse_fail(p, SG_ERR_UNSUPPORTED, cur(p)->line, cur(p)->col, "unsupported construct: tuple subscript");
	expect_op(p, "]");
	node *n = nn(p, is_slice ? N_SLICE : N_ITEM, at);
	n->a = obj;
	if (is_slice) {
		n->b = parts[0];
		n->c = parts[1];
		if (parts[2]) nodelist_push(p->a, &n->kids, parts[2], p);
	} else n->b = parts[0];
	return n;
}

static node *parse_postfix(jparse *p, node *n)
{
	for (;;) {
		token *t = cur(p);
		if (is_op(t, ".")) {
			next(p);
			token *a = cur(p);
			if (a->t == TK_NAME) {
				node *x = nn(p, N_ATTR, t);
				x->a = n;
				x->name = a->s;
				next(p);
				n = x;
			} else if (a->t == TK_INT) {
				node *x = nn(p, N_ITEM, t);
				x->a = n;
				x->b = nn(p, N_LIT, a);
				x->b->v = jv_int(a->i);
				next(p);
				n = x;
			} else unexpected(p, "an attribute name");
		} else if (is_op(t, "[")) {
			next(p);
			n = parse_subscript(p, n, t);
		} else if (is_op(t, "(")) {
			node *x = nn(p, N_CALL, t);
			x->a = n;
			parse_args(p, x);
			n = x;
		} else return n;
	}
}

static const char *dotted_name(jparse *p)
{
	token *t = cur(p);
	if (t->t != TK_NAME) unexpected(p, "a name");
	next(p);
	if (!is_op(cur(p), ".")) return t->s;
	/* filter names like "my.filter" do not exist among the builtins; report it clearly */
	jinja_parse_fail(p, SG_ERR_UNSUPPORTED, t->line, t->col, "unsupported construct: dotted filter or test name '%s.'", t->s);
}

static node *parse_filter(jparse *p, node *n, token *at)
{
	token *nt = cur(p);
	const char *name = dotted_name(p);
	if (!jinja_has_filter(name)) jinja_parse_fail(p, SG_ERR_UNSUPPORTED, nt->line, nt->col, "unsupported filter '%s'", name);
	node *f = nn(p, N_FILTER, at);
	f->a = n;
	f->name = name;
	if (is_op(cur(p), "(")) parse_args(p, f);
	return f;
}

static node *parse_filter_expr(jparse *p, node *n)
{
	for (;;) {
		token *t = cur(p);
		if (is_op(t, "|")) {
			next(p);
			n = parse_filter(p, n, t);
		} else if (is_name(t, "is")) {
			next(p);
			node *x = nn(p, N_TEST, t);
			x->a = n;
			if (accept_name(p, "not")) x->op = 1;
			token *nt = cur(p);
			x->name = dotted_name(p);
			if (!jinja_has_test(x->name)) jinja_parse_fail(p, SG_ERR_UNSUPPORTED, nt->line, nt->col, "unsupported test '%s'", x->name);
			token *c = cur(p);
			if (is_op(c, "(")) parse_args(p, x);
			else if ((c->t == TK_NAME || c->t == TK_STRING || c->t == TK_INT || c->t == TK_FLOAT || is_op(c, "[") ||
				  is_op(c, "{")) &&
				 !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
				if (is_name(c, "is")) jinja_parse_fail(p, SG_ERR_FORMAT, c->line, c->col, "you cannot chain multiple tests with is");
				node *arg = parse_postfix(p, parse_primary(p));
				nodelist_push(p->a, &x->kids, arg, p);
				x->kwnames = palloc(p, sizeof(char *));
			}
			n = x;
		} else if (is_op(t, "(")) {
			node *x = nn(p, N_CALL, t);
			x->a = n;
			parse_args(p, x);
			n = x;
		} else return n;
	}
}

static node *parse_unary(jparse *p, int with_filter)
{
	token *t = cur(p);
	node *n;
	enter(p);
	if (is_op(t, "-") || is_op(t, "+")) {
		next(p);
		n = nn(p, N_UNARY, t);
		n->op = t->s[0];
		n->a = parse_unary(p, 0);
	} else n = parse_postfix(p, parse_primary(p));
	if (with_filter) n = parse_filter_expr(p, n);
	p->depth--;
	return n;
}

static node *binop(jparse *p, token *t, int op, node *l, node *r)
{
	node *n = nn(p, N_BINOP, t);
	n->op = op;
	n->a = l;
	n->b = r;
	return n;
}

static node *parse_pow(jparse *p)
{
	node *l = parse_unary(p, 1);
	while (is_op(cur(p), "**")) {
		token *t = cur(p);
		next(p);
		l = binop(p, t, 'p', l, parse_unary(p, 1));
	}
	return l;
}

static node *parse_math2(jparse *p)
{
	node *l = parse_pow(p);
	for (;;) {
		token *t = cur(p);
		int op = is_op(t, "*") ? '*' : is_op(t, "/") ? '/' : is_op(t, "//") ? 'f' : is_op(t, "%") ? '%' : 0;
		if (!op) return l;
		next(p);
		l = binop(p, t, op, l, parse_pow(p));
	}
}

static node *parse_concat(jparse *p)
{
	node *l = parse_math2(p);
	while (is_op(cur(p), "~")) {
		token *t = cur(p);
		next(p);
		l = binop(p, t, '~', l, parse_math2(p));
	}
	return l;
}

static node *parse_math1(jparse *p)
{
	node *l = parse_concat(p);
	for (;;) {
		token *t = cur(p);
		int op = is_op(t, "+") ? '+' : is_op(t, "-") ? '-' : 0;
		if (!op) return l;
		next(p);
		l = binop(p, t, op, l, parse_concat(p));
	}
}

static node *parse_compare(jparse *p)
{
	node *l = parse_math1(p);
	for (;;) {
		token *t = cur(p);
		int op = is_op(t, "==") ? '=' : is_op(t, "!=") ? '!' : is_op(t, "<") ? '<' : is_op(t, ">") ? '>'
			: is_op(t, "<=") ? 'l' : is_op(t, ">=") ? 'g' : 0;
		if (op) next(p);
		else if (is_name(t, "in")) {
			op = 'i';
			next(p);
		} else if (is_name(t, "not") && is_name(peek(p, 1), "in")) {
			op = 'I';
			next(p);
			next(p);
		} else return l;
		/* a < b < c chains compare as (a < b) and (b < c) in Jinja; templates do not use it */
		l = binop(p, t, op, l, parse_math1(p));
	}
}

static node *parse_not(jparse *p)
{
	token *t = cur(p);
	if (is_name(t, "not")) {
		next(p);
		enter(p);
		node *n = nn(p, N_UNARY, t);
		n->op = 'n';
		n->a = parse_not(p);
		p->depth--;
		return n;
	}
	return parse_compare(p);
}

static node *parse_and(jparse *p)
{
	node *l = parse_not(p);
	while (is_name(cur(p), "and")) {
		token *t = cur(p);
		next(p);
		l = binop(p, t, 'a', l, parse_not(p));
	}
	return l;
}

static node *parse_or(jparse *p)
{
	node *l = parse_and(p);
	while (is_name(cur(p), "or")) {
		token *t = cur(p);
		next(p);
		l = binop(p, t, 'o', l, parse_and(p));
	}
	return l;
}

static node *parse_expr(jparse *p)
{
	enter(p);
	node *e = parse_or(p);
	while (is_name(cur(p), "if")) {
		token *t = cur(p);
		next(p);
		node *n = nn(p, N_COND, t);
		n->b = e;
		n->a = parse_or(p);
		if (accept_name(p, "else")) n->c = parse_expr(p);
		e = n;
	}
	p->depth--;
	return e;
}

/* expr or a, b, c (a tuple); with_cond = 0 keeps `if` free for a for-loop filter. */
static node *parse_tuple(jparse *p, int with_cond)
{
	token *t = cur(p);
	node *e = with_cond ? parse_expr(p) : parse_or(p);
	if (!is_op(cur(p), ",")) return e;
	node *n = nn(p, N_TUPLE, t);
	nodelist_push(p->a, &n->kids, e, p);
	while (accept_op(p, ",")) {
		token *c = cur(p);
		if (c->t == TK_VAR_END || c->t == TK_BLOCK_END || is_op(c, ")")) break;
		nodelist_push(p->a, &n->kids, with_cond ? parse_expr(p) : parse_or(p), p);
	}
	return n;
}

/* Names assigned by for / set: `x`, `a, b` or `(a, b)`. */
static void parse_targets(jparse *p, node *n)
{
	const char *names[64];
	size_t k = 0;
	int paren = accept_op(p, "(");
	do {
		token *t = cur(p);
		if (t->t != TK_NAME) unexpected(p, "a variable name");
		if (k == 64) jinja_parse_fail(p, SG_ERR_UNSUPPORTED, t->line, t->col, "too many assignment targets");
		names[k++] = t->s;
		next(p);
	} while (accept_op(p, ","));
	if (paren) expect_op(p, ")");
	n->targets = palloc(p, k * sizeof(char *));
	memcpy(n->targets, names, k * sizeof(char *));
	n->ntargets = k;
	if (k > 1) n->op = 1; /* unpacking */
}

typedef struct {
	int loops; /* for break/continue */
} pstate;

static const char *parse_body(jparse *p, nodelist *out, const char *const *ends, pstate *ps);

static void need_end(jparse *p, const char *found, const char *want, token *start)
{
	if (!found)
		jinja_parse_fail(p, SG_ERR_FORMAT, start->line, start->col, "block opened here is never closed (expected '%s')", want);
}

static node *parse_if(jparse *p, token *t, pstate *ps)
{
	node *n = nn(p, N_IF, t);
	n->a = parse_tuple(p, 0);
	expect_block_end(p);
	static const char *const ends[] = {"elif", "else", "endif", NULL};
	const char *e = parse_body(p, &n->body, ends, ps);
	need_end(p, e, "endif", t);
	token *et = cur(p);
	next(p);
	if (!strcmp(e, "elif")) {
		nodelist_push(p->a, &n->orelse, parse_if(p, et, ps), p);
		return n;
	}
	if (!strcmp(e, "else")) {
		expect_block_end(p);
		static const char *const ends2[] = {"endif", NULL};
		e = parse_body(p, &n->orelse, ends2, ps);
		need_end(p, e, "endif", t);
		next(p);
	}
	expect_block_end(p);
	return n;
}

static node *parse_stmt(jparse *p, pstate *ps)
{
	token *t = cur(p);
	if (t->t != TK_NAME) unexpected(p, "a tag name");
	const char *kw = t->s;
	next(p);
	node *n;
	if (!strcmp(kw, "if")) return parse_if(p, t, ps);
	if (!strcmp(kw, "for")) {
		n = nn(p, N_FOR, t);
		parse_targets(p, n);
		if (!accept_name(p, "in")) unexpected(p, "'in'");
		n->a = parse_tuple(p, 0);
		if (accept_name(p, "if")) n->b = parse_expr(p);
		if (is_name(cur(p), "recursive"))
			jinja_parse_fail(p, SG_ERR_UNSUPPORTED, cur(p)->line, cur(p)->col, "unsupported construct: recursive for loop");
		expect_block_end(p);
		static const char *const ends[] = {"else", "endfor", NULL};
		ps->loops++;
		const char *e = parse_body(p, &n->body, ends, ps);
		ps->loops--;
		need_end(p, e, "endfor", t);
		next(p);
		if (!strcmp(e, "else")) {
			expect_block_end(p);
			static const char *const ends2[] = {"endfor", NULL};
			e = parse_body(p, &n->orelse, ends2, ps);
			need_end(p, e, "endfor", t);
			next(p);
		}
		expect_block_end(p);
		return n;
	}
	if (!strcmp(kw, "set")) {
		n = nn(p, N_SET, t);
		if (cur(p)->t == TK_NAME && is_op(peek(p, 1), ".")) {
			/* namespace attribute: set ns.x = ... */
			node *a = nn(p, N_ATTR, cur(p));
			node *obj = nn(p, N_NAME, cur(p));
			obj->name = cur(p)->s;
			next(p);
			next(p);
			if (cur(p)->t != TK_NAME) unexpected(p, "an attribute name");
			a->a = obj;
			a->name = cur(p)->s;
			next(p);
			n->a = a;
		} else parse_targets(p, n);
		if (accept_op(p, "=")) {
			n->b = parse_tuple(p, 1);
			expect_block_end(p);
			return n;
		}
		if (n->a || n->ntargets != 1) unexpected(p, "'='");
		/* block set, optionally filtered: {% set x | trim %}...{% endset %} */
		while (is_op(cur(p), "|")) {
			token *ft = cur(p);
			next(p);
			n->c = parse_filter(p, n->c, ft);
		}
		expect_block_end(p);
		static const char *const ends[] = {"endset", NULL};
		const char *e = parse_body(p, &n->body, ends, ps);
		need_end(p, e, "endset", t);
		next(p);
		expect_block_end(p);
		n->op = 2;
		return n;
	}
	if (!strcmp(kw, "macro") || !strcmp(kw, "call")) {
		int is_call = kw[0] == 'c';
		n = nn(p, is_call ? N_CALLBLK : N_MACRO, t);
		const char *names[64];
		size_t k = 0;
		if (!is_call) {
			if (cur(p)->t != TK_NAME) unexpected(p, "a macro name");
			n->name = cur(p)->s;
			next(p);
		}
		if (!is_call || is_op(cur(p), "(")) {
			expect_op(p, "(");
			while (!is_op(cur(p), ")")) {
				if (k) expect_op(p, ",");
				if (is_op(cur(p), ")")) break;
				if (cur(p)->t != TK_NAME) unexpected(p, "a parameter name");
				if (k == 64) jinja_parse_fail(p, SG_ERR_UNSUPPORTED, t->line, t->col, "too many macro parameters");
				names[k++] = cur(p)->s;
				next(p);
				node *def = NULL;
				if (accept_op(p, "=")) def = parse_expr(p);
				nodelist_push(p->a, &n->defaults, def, p);
			}
			next(p);
		}
		n->targets = palloc(p, (k + 1) * sizeof(char *));
		if (k) memcpy(n->targets, names, k * sizeof(char *));
		n->ntargets = k;
		if (is_call) {
			n->a = parse_expr(p);
			if (n->a->t != N_CALL) jinja_parse_fail(p, SG_ERR_FORMAT, t->line, t->col, "expected a call after 'call'");
		}
		expect_block_end(p);
		static const char *const mends[] = {"endmacro", NULL}, *const cends[] = {"endcall", NULL};
		pstate inner = {0};
		const char *e = parse_body(p, &n->body, is_call ? cends : mends, &inner);
		need_end(p, e, is_call ? "endcall" : "endmacro", t);
		next(p);
		if (!is_call && cur(p)->t == TK_NAME && !strcmp(cur(p)->s, n->name)) next(p);
		expect_block_end(p);
		return n;
	}
	if (!strcmp(kw, "filter")) {
		n = nn(p, N_FILTBLK, t);
		do {
			token *ft = cur(p);
			n->c = parse_filter(p, n->c, ft);
		} while (accept_op(p, "|"));
		expect_block_end(p);
		static const char *const ends[] = {"endfilter", NULL};
		const char *e = parse_body(p, &n->body, ends, ps);
		need_end(p, e, "endfilter", t);
		next(p);
		expect_block_end(p);
		return n;
	}
	if (!strcmp(kw, "with")) {
		n = nn(p, N_WITH, t);
		const char *names[64];
		size_t k = 0;
		while (cur(p)->t != TK_BLOCK_END) {
			if (k) expect_op(p, ",");
			if (cur(p)->t != TK_NAME) unexpected(p, "a variable name");
			if (k == 64) jinja_parse_fail(p, SG_ERR_UNSUPPORTED, t->line, t->col, "too many with targets");
			names[k++] = cur(p)->s;
			next(p);
			expect_op(p, "=");
			nodelist_push(p->a, &n->defaults, parse_expr(p), p);
		}
		next(p);
		n->targets = palloc(p, (k + 1) * sizeof(char *));
		if (k) memcpy(n->targets, names, k * sizeof(char *));
		n->ntargets = k;
		static const char *const ends[] = {"endwith", NULL};
		const char *e = parse_body(p, &n->body, ends, ps);
		need_end(p, e, "endwith", t);
		next(p);
		expect_block_end(p);
		return n;
	}
	if (!strcmp(kw, "generation")) {
		/* transformers' assistant-mask marker: renders its body unchanged */
		n = nn(p, N_BLOCKS, t);
		expect_block_end(p);
		static const char *const ends[] = {"endgeneration", NULL};
		const char *e = parse_body(p, &n->body, ends, ps);
		need_end(p, e, "endgeneration", t);
		next(p);
		expect_block_end(p);
		return n;
	}
	if (!strcmp(kw, "break") || !strcmp(kw, "continue")) {
		if (!ps->loops) jinja_parse_fail(p, SG_ERR_FORMAT, t->line, t->col, "'%s' outside of a for loop", kw);
		n = nn(p, kw[0] == 'b' ? N_BREAK : N_CONTINUE, t);
		expect_block_end(p);
		return n;
	}
	jinja_parse_fail(p, SG_ERR_UNSUPPORTED, t->line, t->col, "unsupported construct: tag '%s'", kw);
}

/* Statements until a block tag named in ends (left current, its name returned) or the end of
 * the template (NULL). */
static const char *parse_body(jparse *p, nodelist *out, const char *const *ends, pstate *ps)
{
	enter(p);
	for (;;) {
		token *t = cur(p);
		if (t->t == TK_EOF) {
			p->depth--;
			return NULL;
		}
		if (t->t == TK_DATA) {
			node *n = nn(p, N_TEXT, t);
			n->name = t->s;
			n->n = t->n;
			nodelist_push(p->a, out, n, p);
			next(p);
			continue;
		}
		if (t->t == TK_VAR_BEGIN) {
			next(p);
			node *n = nn(p, N_OUTPUT, t);
			n->a = parse_tuple(p, 1);
			if (cur(p)->t != TK_VAR_END) unexpected(p, "'}}'");
			next(p);
			nodelist_push(p->a, out, n, p);
			continue;
		}
		if (t->t == TK_BLOCK_BEGIN) {
			token *nt = peek(p, 1);
			if (nt->t == TK_NAME && ends)
				for (int i = 0; ends[i]; i++)
					if (!strcmp(nt->s, ends[i])) {
						next(p);
						p->depth--;
						return ends[i];
					}
			if (nt->t == TK_NAME &&
			    (!strncmp(nt->s, "end", 3) || !strcmp(nt->s, "else") || !strcmp(nt->s, "elif")))
				jinja_parse_fail(p, SG_ERR_FORMAT, nt->line, nt->col, "unexpected tag '%s'", nt->s);
			next(p);
			nodelist_push(p->a, out, parse_stmt(p, ps), p);
			continue;
		}
		unexpected(p, "template text or a tag");
	}
}

void jinja_parse_template(jparse *p, nodelist *out)
{
	pstate ps = {0};
	parse_body(p, out, NULL, &ps);
}

sg_status sg_jinja_parse(const char *src, size_t len, const char *name, sg_jinja_template **out)
{
	*out = NULL;
	if (!src && len) return SG_FAIL(SG_ERR_INVALID_ARG, "src is NULL");
	sg_jinja_template *t = sg_calloc(1, sizeof(*t));
	if (!t) return SG_FAIL(SG_ERR_NOMEM, "out of memory");
	sg_arena_init(&t->arena, 0);
	t->name = sg_strdup(name ? name : "template");
	if (!t->name) {
		sg_jinja_free(t);
		return SG_FAIL(SG_ERR_NOMEM, "out of memory");
	}
	jparse *p = sg_calloc(1, sizeof(*p));
	if (!p) {
		sg_jinja_free(t);
		return SG_FAIL(SG_ERR_NOMEM, "out of memory");
	}
	p->a = &t->arena;
	p->name = t->name;
	p->src = src ? src : "";
	p->len = len;
	if (setjmp(p->jb)) {
		sg_status st = p->st;
		sg_error(st, "%s", p->err);
		sg_free(p);
		sg_jinja_free(t);
		return st;
	}
	jinja_lex(p);
	jinja_parse_template(p, &t->body);
	sg_free(p);
	*out = t;
	return SG_OK;
}

void sg_jinja_free(sg_jinja_template *t)
{
	if (!t) return;
	sg_arena_free(&t->arena);
	sg_free(t->name);
	sg_free(t);
}
