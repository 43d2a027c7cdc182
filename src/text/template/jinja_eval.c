/* Jinja evaluator: walks the AST with Jinja's scoping (a for-loop iteration and a macro call each
 * get a fresh scope; `if` does not), Python's operator semantics and Jinja's Undefined rules
 * (undefined is falsy and prints as "", but attribute access, arithmetic and ordering on it are
 * errors). Errors unwind with longjmp to sg_jinja_render; every value lives in the render arena. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "text/template/jinja_internal.h"

static void step(jctx *c)
{
	if (++c->steps > c->lim.max_steps) jfail(c, "rendering took more than %llu steps", (unsigned long long)c->lim.max_steps);
}

static void at(jctx *c, const node *n)
{
	c->line = n->line;
	c->col = n->col;
}

/* ---- scopes ---- */

static scope *scope_new(jctx *c, scope *parent)
{
	scope *s = jalloc(c, sizeof(*s));
	s->parent = parent;
	return s;
}

static void scope_set(jctx *c, scope *s, const char *name, jv v)
{
	jv *slot = jdict_gets(&s->vars, name);
	if (slot) *slot = v;
	else jdict_set(c, &s->vars, jv_cstr(name), v);
}

static jv lookup(jctx *c, scope *s, const char *name)
{
	for (; s; s = s->parent) {
		jv *v = jdict_gets(&s->vars, name);
		if (v) return *v;
	}
	static const struct {
		const char *name;
		int fn;
	} globals[] = {{"range", JF_RANGE}, {"namespace", JF_NAMESPACE}, {"dict", JF_DICT},
		       {"raise_exception", JF_RAISE}, {"strftime_now", JF_STRFTIME}, {"joiner", JF_JOINER}};
	for (size_t i = 0; i < sizeof(globals) / sizeof(globals[0]); i++)
		if (!strcmp(globals[i].name, name)) {
			jv f = {.t = JV_FUNC};
			f.fn = globals[i].fn;
			return f;
		}
	size_t n = strlen(name) + 32;
	char *h = jalloc(c, n);
	snprintf(h, n, "'%s' is undefined", name);
	return jv_undef(h);
}

/* Python slice semantics for sequences of n items. */
static void slice_bounds(jctx *c, jv lo, jv hi, jv st, size_t n, int64_t *start, int64_t *stop, int64_t *stepv)
{
	int64_t s = 1;
	if (st.t != JV_NONE) {
		if (st.t != JV_INT) jfail(c, "slice indices must be integers or None");
		s = st.i;
		if (!s) jfail(c, "slice step cannot be zero");
	}
	int64_t N = (int64_t)n;
	int64_t a, b;
	if (lo.t == JV_NONE) a = s > 0 ? 0 : N - 1;
	else {
		if (lo.t != JV_INT) jfail(c, "slice indices must be integers or None");
		a = lo.i < 0 ? lo.i + N : lo.i;
		if (a < 0) a = s > 0 ? 0 : -1;
		if (a >= N) a = s > 0 ? N : N - 1;
	}
	if (hi.t == JV_NONE) b = s > 0 ? N : -1;
	else {
		if (hi.t != JV_INT) jfail(c, "slice indices must be integers or None");
		b = hi.i < 0 ? hi.i + N : hi.i;
		if (b < 0) b = s > 0 ? 0 : -1;
		if (b >= N) b = s > 0 ? N : N - 1;
	}
	*start = a;
	*stop = b;
	*stepv = s;
}

static jv do_slice(jctx *c, jv obj, jv lo, jv hi, jv st)
{
	if (obj.t == JV_UNDEF) jfail_undef(c, obj);
	int64_t a, b, s;
	if (obj.t == JV_LIST) {
		if (obj.l->kind != JL_LIST) jfail(c, "'%s' object is not subscriptable", jv_typename(obj));
		slice_bounds(c, lo, hi, st, obj.l->n, &a, &b, &s);
		jlist *l = jlist_new(c, 0);
		l->tuple = obj.l->tuple;
		for (int64_t i = a; s > 0 ? i < b : i > b; i += s) jlist_push(c, l, obj.l->v[i]);
		return jv_list(l);
	}
	if (obj.t == JV_STR) {
		size_t n = utf8_count(obj.s.p, obj.s.n);
		slice_bounds(c, lo, hi, st, n, &a, &b, &s);
		if (s == 1) {
			if (b <= a) return jv_str("", 0);
			size_t x = utf8_offset(obj.s.p, obj.s.n, (size_t)a), y = utf8_offset(obj.s.p, obj.s.n, (size_t)b);
			return jv_str(obj.s.p + x, y - x);
		}
		jbuf out = {0};
		for (int64_t i = a; s > 0 ? i < b : i > b; i += s) {
			size_t x = utf8_offset(obj.s.p, obj.s.n, (size_t)i), y = utf8_offset(obj.s.p, obj.s.n, (size_t)i + 1);
			jbuf_put(c, &out, obj.s.p + x, y - x);
		}
		return jv_str(out.p ? out.p : "", out.n);
	}
	jfail(c, "'%s' object is not subscriptable", jv_typename(obj));
}

/* ---- operators ---- */

static int isnum(jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static double fval(jv v) { return v.t == JV_FLOAT ? v.f : v.t == JV_INT ? (double)v.i : (double)v.b; }
static int64_t ival(jv v) { return v.t == JV_INT ? v.i : v.b; }

_Noreturn static void optype_fail(jctx *c, const char *op, jv a, jv b)
{
	if (a.t == JV_UNDEF) jfail_undef(c, a);
	if (b.t == JV_UNDEF) jfail_undef(c, b);
	jfail(c, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_typename(a), jv_typename(b));
}

static jv repeat(jctx *c, jv seq, int64_t k)
{
	if (k < 0) k = 0;
	if (seq.t == JV_STR) {
		if (seq.s.n && (uint64_t)k > c->lim.max_output / seq.s.n) jfail(c, "string repetition too large");
		jbuf b = {0};
		for (int64_t i = 0; i < k; i++) jbuf_put(c, &b, seq.s.p, seq.s.n);
		return jv_str(b.p ? b.p : "", b.n);
	}
	if (seq.l->n && (uint64_t)k > (c->lim.max_memory / sizeof(jv)) / seq.l->n) jfail(c, "list repetition too large");
	jlist *l = jlist_new(c, 0);
	l->tuple = seq.l->tuple;
	for (int64_t i = 0; i < k; i++)
		for (size_t j = 0; j < seq.l->n; j++) jlist_push(c, l, seq.l->v[j]);
	return jv_list(l);
}

static jv arith(jctx *c, int op, jv a, jv b)
{
	if (isnum(a) && isnum(b)) {
		int ints = a.t != JV_FLOAT && b.t != JV_FLOAT;
		int64_t x = ival(a), y = ival(b), r;
		double fx = fval(a), fy = fval(b);
		switch (op) {
		case '+':
			if (ints) {
				if (__builtin_add_overflow(x, y, &r)) jfail(c, "integer overflow");
				return jv_int(r);
			}
			return jv_float(fx + fy);
		case '-':
			if (ints) {
				if (__builtin_sub_overflow(x, y, &r)) jfail(c, "integer overflow");
				return jv_int(r);
			}
			return jv_float(fx - fy);
		case '*':
			if (ints) {
				if (__builtin_mul_overflow(x, y, &r)) jfail(c, "integer overflow");
				return jv_int(r);
			}
			return jv_float(fx * fy);
		case '/':
			if (fy == 0) jfail(c, "division by zero");
			return jv_float(fx / fy);
		case 'f':
			if (ints) {
				if (!y) jfail(c, "integer division or modulo by zero");
				if (x == INT64_MIN && y == -1) jfail(c, "integer overflow");
				int64_t q = x / y;
				if ((x % y != 0) && ((x < 0) != (y < 0))) q--;
				return jv_int(q);
			}
			if (fy == 0) jfail(c, "float floor division by zero");
			return jv_float(floor(fx / fy));
		case '%':
			if (ints) {
				if (!y) jfail(c, "integer division or modulo by zero");
				if (y == -1) return jv_int(0);
				int64_t m = x % y;
				if (m != 0 && ((m < 0) != (y < 0))) m += y;
				return jv_int(m);
			}
			if (fy == 0) jfail(c, "float modulo");
			{
				double m = fmod(fx, fy);
				if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
				return jv_float(m);
			}
		case 'p':
			if (ints && y >= 0) {
				int64_t acc = 1, base = x;
				for (int64_t e = y; e > 0; e >>= 1) {
					if (e & 1)
						if (__builtin_mul_overflow(acc, base, &acc)) jfail(c, "integer overflow");
					if (e > 1 && __builtin_mul_overflow(base, base, &base)) jfail(c, "integer overflow");
				}
				return jv_int(acc);
			}
			return jv_float(pow(fx, fy));
		}
	}
	if (op == '+' && a.t == JV_STR && b.t == JV_STR) {
		jbuf o = {0};
		jbuf_put(c, &o, a.s.p, a.s.n);
		jbuf_put(c, &o, b.s.p, b.s.n);
		return jv_str(o.p ? o.p : "", o.n);
	}
	if (op == '+' && a.t == JV_LIST && b.t == JV_LIST && a.l->tuple == b.l->tuple && !a.l->kind && !b.l->kind) {
		jlist *l = jlist_new(c, a.l->n + b.l->n + 1);
		l->tuple = a.l->tuple;
		for (size_t i = 0; i < a.l->n; i++) jlist_push(c, l, a.l->v[i]);
		for (size_t i = 0; i < b.l->n; i++) jlist_push(c, l, b.l->v[i]);
		return jv_list(l);
	}
	if (op == '*' && (a.t == JV_STR || (a.t == JV_LIST && !a.l->kind)) && (b.t == JV_INT || b.t == JV_BOOL)) return repeat(c, a, ival(b));
	if (op == '*' && (b.t == JV_STR || (b.t == JV_LIST && !b.l->kind)) && (a.t == JV_INT || a.t == JV_BOOL)) return repeat(c, b, ival(a));
	if (op == '+' && a.t == JV_STR && b.t != JV_UNDEF)
		jfail(c, "can only concatenate str (not \"%s\") to str", jv_typename(b));
	if (op == '%' && a.t == JV_STR) return jinja_percent(c, a, b);
	static const char *names[] = {['+'] = "+", ['-'] = "-", ['*'] = "*", ['/'] = "/", ['f'] = "//", ['%'] = "%", ['p'] = "**"};
	optype_fail(c, names[op], a, b);
}

static int contains(jctx *c, jv hay, jv needle)
{
	switch (hay.t) {
	case JV_UNDEF: return 0;
	case JV_STR:
		if (needle.t != JV_STR) {
			if (needle.t == JV_UNDEF) jfail_undef(c, needle);
			jfail(c, "'in <string>' requires string as left operand, not %s", jv_typename(needle));
		}
		if (!needle.s.n) return 1;
		return memmem(hay.s.p, hay.s.n, needle.s.p, needle.s.n) != NULL;
	case JV_LIST:
		for (size_t i = 0; i < hay.l->n; i++)
			if (jv_eq(hay.l->v[i], needle)) return 1;
		return 0;
	case JV_DICT:
	case JV_NS: return jdict_get(hay.d, needle) != NULL;
	default: jfail(c, "argument of type '%s' is not iterable", jv_typename(hay));
	}
}

/* ---- expressions ---- */

static jv eval(jctx *c, scope *s, const node *n);

static void eval_args(jctx *c, scope *s, const node *n, jv **args)
{
	*args = jalloc(c, (n->kids.n + 1) * sizeof(jv));
	for (size_t i = 0; i < n->kids.n; i++) (*args)[i] = eval(c, s, n->kids.v[i]);
}

static void render_body(jctx *c, scope *s, const nodelist *body);

static jv call_macro(jctx *c, jmacro *m, jv *args, const char **kw, size_t nargs)
{
	const node *def = m->def;
	if (++c->depth > c->lim.max_depth) jfail(c, "macro calls nested more than %d deep", c->lim.max_depth);
	scope *s = scope_new(c, m->closure);
	size_t npos = 0;
	while (npos < nargs && !(kw && kw[npos])) npos++;
	if (npos > def->ntargets)
		jfail(c, "macro '%s' takes not more than %zu argument(s)", def->name ? def->name : "caller", def->ntargets);
	for (size_t i = 0; i < def->ntargets; i++) {
		jv v;
		int have = 0;
		if (i < npos) {
			v = args[i];
			have = 1;
		}
		for (size_t k = npos; k < nargs; k++)
			if (!strcmp(kw[k], def->targets[i])) {
				if (have) jfail(c, "macro '%s' got multiple values for argument '%s'", def->name ? def->name : "caller", kw[k]);
				v = args[k];
				have = 1;
			}
		if (!have) {
			const node *d = def->defaults.n > i ? def->defaults.v[i] : NULL;
			if (d) v = eval(c, s, d);
			else {
				size_t hn = strlen(def->targets[i]) + 96;
				char *h = jalloc(c, hn);
				snprintf(h, hn, "parameter '%s' was not provided", def->targets[i]);
				v = jv_undef(h);
			}
		}
		scope_set(c, s, def->targets[i], v);
	}
	for (size_t k = npos; k < nargs; k++) {
		int known = 0;
		for (size_t i = 0; i < def->ntargets; i++)
			if (!strcmp(kw[k], def->targets[i])) known = 1;
		if (!known) jfail(c, "macro '%s' takes no keyword argument '%s'", def->name ? def->name : "caller", kw[k]);
	}
	if (m->caller.t == JV_MACRO) scope_set(c, s, "caller", m->caller);
	jbuf buf = {0}, *saved = c->out;
	int saved_ctl = c->loopctl;
	c->out = &buf;
	render_body(c, s, &def->body);
	c->out = saved;
	c->loopctl = saved_ctl;
	c->depth--;
	return jv_str(buf.p ? buf.p : "", buf.n);
}

jv jinja_call(jctx *c, jv fn, jv *args, const char **kwnames, size_t nargs)
{
	switch (fn.t) {
	case JV_MACRO: return call_macro(c, fn.m, args, kwnames, nargs);
	case JV_FUNC: return jinja_func(c, fn.fn, args, kwnames, nargs);
	case JV_METHOD: return jinja_method(c, fn.meth, args, kwnames, nargs);
	case JV_UNDEF: jfail_undef(c, fn);
	default: jfail(c, "'%s' object is not callable", jv_typename(fn));
	}
}

static jv eval_filter(jctx *c, scope *s, const node *n, jv in)
{
	jv *args;
	eval_args(c, s, n, &args);
	at(c, n);
	return jinja_filter(c, n->name, in, args, n->kwnames, n->kids.n);
}

static jv eval(jctx *c, scope *s, const node *n)
{
	step(c);
	if (++c->depth > c->lim.max_depth) jfail(c, "expression nested more than %d deep", c->lim.max_depth);
	jv r;
	switch (n->t) {
	case N_LIT: r = n->v; break;
	case N_NAME: r = lookup(c, s, n->name); break;
	case N_LIST:
	case N_TUPLE: {
		jlist *l = jlist_new(c, n->kids.n + 1);
		l->tuple = n->t == N_TUPLE;
		for (size_t i = 0; i < n->kids.n; i++) jlist_push(c, l, eval(c, s, n->kids.v[i]));
		r = jv_list(l);
		break;
	}
	case N_DICT: {
		jdict *d = jdict_new(c, n->kids.n / 2 + 1);
		for (size_t i = 0; i + 1 < n->kids.n; i += 2) {
			jv k = eval(c, s, n->kids.v[i]);
			if (k.t == JV_LIST && !k.l->tuple) {
				at(c, n->kids.v[i]);
				jfail(c, "unhashable type: 'list'");
			}
			if (k.t == JV_DICT || k.t == JV_UNDEF) {
				at(c, n->kids.v[i]);
				jfail(c, "unhashable type: '%s'", jv_typename(k));
			}
			jdict_set(c, d, k, eval(c, s, n->kids.v[i + 1]));
		}
		r = jv_dict(d);
		break;
	}
	case N_ATTR: {
		jv o = eval(c, s, n->a);
		at(c, n);
		r = jinja_getattr(c, o, n->name);
		break;
	}
	case N_ITEM: {
		jv o = eval(c, s, n->a);
		jv k = eval(c, s, n->b);
		at(c, n);
		r = jinja_getitem(c, o, k);
		break;
	}
	case N_SLICE: {
		jv o = eval(c, s, n->a);
		jv lo = n->b ? eval(c, s, n->b) : jv_none();
		jv hi = n->c ? eval(c, s, n->c) : jv_none();
		jv st = n->kids.n ? eval(c, s, n->kids.v[0]) : jv_none();
		at(c, n);
		r = do_slice(c, o, lo, hi, st);
		break;
	}
	case N_CALL: {
		jv fn = eval(c, s, n->a);
		jv *args;
		eval_args(c, s, n, &args);
		at(c, n);
		r = jinja_call(c, fn, args, n->kwnames, n->kids.n);
		break;
	}
	case N_FILTER: r = eval_filter(c, s, n, eval(c, s, n->a)); break;
	case N_TEST: {
		jv in = eval(c, s, n->a);
		jv *args;
		eval_args(c, s, n, &args);
		at(c, n);
		int t = jinja_test(c, n->name, in, args, n->kids.n);
		r = jv_bool(n->op ? !t : t);
		break;
	}
	case N_UNARY: {
		jv a = eval(c, s, n->a);
		at(c, n);
		if (n->op == 'n') r = jv_bool(!jv_truthy(a));
		else if (a.t == JV_INT || a.t == JV_BOOL) {
			int64_t x = ival(a);
			if (n->op == '-' && x == INT64_MIN) jfail(c, "integer overflow");
			r = jv_int(n->op == '-' ? -x : x);
		} else if (a.t == JV_FLOAT) r = jv_float(n->op == '-' ? -a.f : a.f);
		else if (a.t == JV_UNDEF) jfail_undef(c, a);
		else jfail(c, "bad operand type for unary %c: '%s'", n->op, jv_typename(a));
		break;
	}
	case N_BINOP: {
		if (n->op == 'a' || n->op == 'o') {
			jv a = eval(c, s, n->a);
			int t = jv_truthy(a);
			r = (n->op == 'a') == t ? eval(c, s, n->b) : a;
			break;
		}
		jv a = eval(c, s, n->a);
		jv b = eval(c, s, n->b);
		at(c, n);
		switch (n->op) {
		case '~': {
			jbuf o = {0};
			jv_write_str(c, &o, a);
			jv_write_str(c, &o, b);
			r = jv_str(o.p ? o.p : "", o.n);
			break;
		}
		case '=': r = jv_bool(jv_eq(a, b)); break;
		case '!': r = jv_bool(!jv_eq(a, b)); break;
		case '<': r = jv_bool(jv_cmp(c, a, b) < 0); break;
		case '>': r = jv_bool(jv_cmp(c, a, b) > 0); break;
		case 'l': r = jv_bool(jv_cmp(c, a, b) <= 0); break;
		case 'g': r = jv_bool(jv_cmp(c, a, b) >= 0); break;
		case 'i': r = jv_bool(contains(c, b, a)); break;
		case 'I': r = jv_bool(!contains(c, b, a)); break;
		default: r = arith(c, n->op, a, b);
		}
		break;
	}
	case N_COND: {
		jv t = eval(c, s, n->a);
		if (jv_truthy(t)) r = eval(c, s, n->b);
		else if (n->c) r = eval(c, s, n->c);
		else r = jv_undef("the inline if-expression evaluated to false and no else section was defined");
		break;
	}
	default: at(c, n); jfail(c, "internal: statement node in an expression");
	}
	c->depth--;
	return r;
}

/* ---- statements ---- */

static void emit(jctx *c, const char *p, size_t n)
{
	if (c->out == NULL) return;
	c->total_out += n;
	if (c->total_out > c->lim.max_output) jfail(c, "output larger than %zu bytes", c->lim.max_output);
	jbuf_put(c, c->out, p, n);
}

static void assign(jctx *c, scope *s, const node *n, jv v)
{
	if (!n->op || n->ntargets == 1) {
		scope_set(c, s, n->targets[0], v);
		return;
	}
	jlist *items = (v.t == JV_LIST) ? v.l : jinja_iterate(c, v);
	if (items->n != n->ntargets)
		jfail(c, "cannot unpack %zu value(s) into %zu variable(s)", items->n, n->ntargets);
	for (size_t i = 0; i < n->ntargets; i++) scope_set(c, s, n->targets[i], items->v[i]);
}

static void exec_for(jctx *c, scope *s, const node *n)
{
	jv it = eval(c, s, n->a);
	at(c, n->a);
	if (it.t == JV_NONE || it.t == JV_INT || it.t == JV_FLOAT || it.t == JV_BOOL)
		jfail(c, "'%s' object is not iterable", jv_typename(it));
	jlist *items = jinja_iterate(c, it);
	if (n->b) {
		/* the loop filter runs before the loop, so loop.length counts what passes */
		jlist *kept = jlist_new(c, items->n + 1);
		for (size_t i = 0; i < items->n; i++) {
			scope *fs = scope_new(c, s);
			assign(c, fs, n, items->v[i]);
			if (jv_truthy(eval(c, fs, n->b))) jlist_push(c, kept, items->v[i]);
		}
		items = kept;
	}
	jloop *L = jalloc(c, sizeof(*L));
	L->items = items;
	/* loop.depth counts recursive-loop levels only; nested plain loops are all depth 1 */
	L->depth = 1;
	jv lv = {.t = JV_LOOP};
	lv.loop = L;
	for (size_t i = 0; i < items->n; i++) {
		step(c);
		L->i = i;
		scope *is = scope_new(c, s);
		at(c, n);
		assign(c, is, n, items->v[i]);
		scope_set(c, is, "loop", lv);
		render_body(c, is, &n->body);
		if (c->loopctl == 'b') {
			c->loopctl = 0;
			break;
		}
		c->loopctl = 0;
	}
	if (!items->n) render_body(c, s, &n->orelse);
}

static void exec_set(jctx *c, scope *s, const node *n)
{
	jv v;
	if (n->op == 2) {
		jbuf buf = {0}, *saved = c->out;
		c->out = &buf;
		render_body(c, s, &n->body);
		c->out = saved;
		v = jv_str(buf.p ? buf.p : "", buf.n);
		/* filters of a block set apply innermost first; the chain's innermost input is NULL */
		const node *chain[64];
		int k = 0;
		for (const node *f = n->c; f && k < 64; f = f->a) chain[k++] = f;
		while (k--) v = eval_filter(c, s, chain[k], v);
	} else v = eval(c, s, n->b);
	at(c, n);
	if (n->a) {
		jv ns = lookup(c, s, n->a->a->name);
		if (ns.t != JV_NS) jfail(c, "cannot assign attribute on non-namespace object");
		if (n->a->name[0] == '_') jfail(c, "cannot store underscore-prefixed attributes on a namespace");
		jdict_set(c, ns.d, jv_cstr(n->a->name), v);
		return;
	}
	assign(c, s, n, v);
}

static void exec_stmt(jctx *c, scope *s, const node *n)
{
	step(c);
	switch (n->t) {
	case N_TEXT: emit(c, n->name, n->n); return;
	case N_OUTPUT: {
		jv v = eval(c, s, n->a);
		at(c, n);
		if (v.t == JV_STR) emit(c, v.s.p, v.s.n);
		else if (v.t != JV_UNDEF) {
			jbuf b = {0};
			jv_write_str(c, &b, v);
			emit(c, b.p, b.n);
		}
		return;
	}
	case N_IF:
		if (jv_truthy(eval(c, s, n->a))) render_body(c, s, &n->body);
		else render_body(c, s, &n->orelse);
		return;
	case N_FOR: exec_for(c, s, n); return;
	case N_SET: exec_set(c, s, n); return;
	case N_MACRO: {
		jmacro *m = jalloc(c, sizeof(*m));
		m->def = n;
		m->closure = s;
		m->caller = jv_undef(NULL);
		jv v = {.t = JV_MACRO};
		v.m = m;
		scope_set(c, s, n->name, v);
		return;
	}
	case N_CALLBLK: {
		jmacro *cm = jalloc(c, sizeof(*cm));
		cm->def = n;
		cm->closure = s;
		cm->caller = jv_undef(NULL);
		jv callerv = {.t = JV_MACRO};
		callerv.m = cm;
		const node *call = n->a;
		jv fn = eval(c, s, call->a);
		jv *args;
		eval_args(c, s, call, &args);
		at(c, n);
		if (fn.t != JV_MACRO) jfail(c, "call block needs a macro, got '%s'", jv_typename(fn));
		jmacro m2 = *fn.m;
		m2.caller = callerv;
		jv r = call_macro(c, &m2, args, call->kwnames, call->kids.n);
		emit(c, r.s.p, r.s.n);
		return;
	}
	case N_FILTBLK: {
		jbuf buf = {0}, *saved = c->out;
		c->out = &buf;
		render_body(c, s, &n->body);
		c->out = saved;
		jv v = jv_str(buf.p ? buf.p : "", buf.n);
		const node *chain[64];
		int k = 0;
		for (const node *f = n->c; f && k < 64; f = f->a) chain[k++] = f;
		while (k--) v = eval_filter(c, s, chain[k], v);
		jv sv = jv_to_str(c, v);
		emit(c, sv.s.p, sv.s.n);
		return;
	}
	case N_WITH: {
		scope *ws = scope_new(c, s);
		for (size_t i = 0; i < n->ntargets; i++) scope_set(c, ws, n->targets[i], eval(c, s, n->defaults.v[i]));
		render_body(c, ws, &n->body);
		return;
	}
	case N_BLOCKS: render_body(c, s, &n->body); return;
	case N_BREAK: c->loopctl = 'b'; return;
	case N_CONTINUE: c->loopctl = 'c'; return;
	default: at(c, n); jfail(c, "internal: expression node as a statement");
	}
}

static void render_body(jctx *c, scope *s, const nodelist *body)
{
	if (++c->depth > c->lim.max_depth) jfail(c, "blocks nested more than %d deep", c->lim.max_depth);
	for (size_t i = 0; i < body->n && !c->loopctl; i++) exec_stmt(c, s, body->v[i]);
	c->depth--;
}

sg_status sg_jinja_render(const sg_jinja_template *t, const json_t *vars, const sg_jinja_limits *limits,
			  char **out, size_t *out_len)
{
	*out = NULL;
	if (out_len) *out_len = 0;
	if (!t) return SG_FAIL(SG_ERR_INVALID_ARG, "template is NULL");
	if (vars && !json_is_object(vars)) return SG_FAIL(SG_ERR_INVALID_ARG, "variables must be a JSON object");
	jctx *c = sg_calloc(1, sizeof(*c));
	if (!c) return SG_FAIL(SG_ERR_NOMEM, "out of memory");
	sg_arena_init(&c->a, 0);
	c->tpl = t;
	c->lim = (sg_jinja_limits){.max_output = 64u << 20, .max_memory = 512u << 20, .max_steps = 50000000, .max_depth = 1000};
	if (limits) {
		if (limits->max_output) c->lim.max_output = limits->max_output;
		if (limits->max_memory) c->lim.max_memory = limits->max_memory;
		if (limits->max_steps) c->lim.max_steps = limits->max_steps;
		if (limits->max_depth > 0) c->lim.max_depth = limits->max_depth;
		c->lim.now = limits->now;
	}
	jbuf result = {0};
	if (setjmp(c->jb)) {
		sg_status st = sg_error(SG_ERR_FORMAT, "%s", c->err);
		sg_arena_free(&c->a);
		sg_free(c);
		return st;
	}
	c->globals = scope_new(c, NULL);
	if (vars) {
		const char *k;
		json_t *v;
		json_object_foreach((json_t *)vars, k, v) scope_set(c, c->globals, jv_strdup(c, k, strlen(k)).s.p, jv_from_json(c, v));
	}
	scope *root = scope_new(c, c->globals);
	c->out = &result;
	render_body(c, root, &t->body);
	char *r = sg_malloc(result.n + 1);
	if (!r) {
		sg_arena_free(&c->a);
		sg_free(c);
		return SG_FAIL(SG_ERR_NOMEM, "out of memory for %zu bytes of output", result.n);
	}
	if (result.n) memcpy(r, result.p, result.n);
	r[result.n] = 0;
	*out = r;
	if (out_len) *out_len = result.n;
	sg_arena_free(&c->a);
	sg_free(c);
	return SG_OK;
}
