/* Stepping the automaton one byte at a time, and masking a vocabulary through the token trie. */
#include <stddef.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/flags.h"
#include "text/grammar/grammar.h"
#include "text/grammar/grammar_internal.h"

#define GSTATE_BYTES(s) (offsetof(gstate, f) + (size_t)(s)->total * sizeof(gframe))
#define MAX_EPS 64 /* unions/references/sequence starts entered on one byte */

enum { R_FAIL, R_OK, R_OKPOP, R_POP, R_PUSH };

struct sg_grammar_state {
	const sg_grammar *g;
	int overflow;
	int fast; /* SARAGOSSA_GRAMMAR_FAST_MASK: plain-token bitmap and plain subtrees */
	gstate *cur, *tmp, *save;
	gstate **dfs; /* [dfs_n] one state per trie depth (index 0 unused) */
	int dfs_n;
};

/* An output sink: a state to append stacks to, or (out == NULL) a flag that any stack
 * survived, for the read-only queries. */
typedef struct sink {
	gstate *out;
	int hit;
	int *overflow;
} sink;

static int is_ws(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static int hexval(int c)
{
	if (c >= '0' && c <= '9') return c - '0';
	if (c >= 'a' && c <= 'f') return c - 'a' + 10;
	if (c >= 'A' && c <= 'F') return c - 'A' + 10;
	return -1;
}

/* Strict UTF-8 (no overlongs, no surrogates, <= U+10FFFF). st: 0 at a boundary; 1..3 that many
 * continuation bytes due; 4..7 the first continuation byte has a narrowed range (E0, ED, F0, F4). */
static int utf8_step(uint8_t *st, int c)
{
	switch (*st) {
	case 0:
		if (c < 0x80) return 1;
		if (c >= 0xC2 && c <= 0xDF) *st = 1;
		else if (c == 0xE0) *st = 4;
		else if (c == 0xED) *st = 5;
		else if (c >= 0xE1 && c <= 0xEF) *st = 2;
		else if (c == 0xF0) *st = 6;
		else if (c >= 0xF1 && c <= 0xF3) *st = 3;
		else if (c == 0xF4) *st = 7;
		else return 0;
		return 1;
	case 1: case 2: case 3:
		if (c < 0x80 || c > 0xBF) return 0;
		*st = (uint8_t)(*st - 1);
		return 1;
	case 4: if (c < 0xA0 || c > 0xBF) return 0; *st = 1; return 1;
	case 5: if (c < 0x80 || c > 0x9F) return 0; *st = 1; return 1;
	case 6: if (c < 0x90 || c > 0xBF) return 0; *st = 2; return 1;
	case 7: if (c < 0x80 || c > 0x8F) return 0; *st = 2; return 1;
	default: return 0;
	}
}

static int ws_take(gframe *f)
{
	if (f->ws >= SG_GRAMMAR_MAX_WS) return R_FAIL;
	f->ws++;
	return R_OK;
}

static int byte_at(const glit *l, uint32_t pos) { return pos < l->len ? l->s[pos] : -1; }

/* Within v[lo..hi) (all sharing their first pos bytes, so sorted by byte_at(pos)), the sub-range
 * whose byte at pos is c. */
static void narrow(const glit *v, uint32_t lo, uint32_t hi, uint32_t pos, int c, uint32_t *nlo,
		   uint32_t *nhi)
{
	uint32_t l = lo, h = hi;
	while (l < h) {
		uint32_t m = l + (h - l) / 2;
		if (byte_at(&v[m], pos) < c) l = m + 1;
		else h = m;
	}
	*nlo = l;
	h = hi;
	while (l < h) {
		uint32_t m = l + (h - l) / 2;
		if (byte_at(&v[m], pos) <= c) l = m + 1;
		else h = m;
	}
	*nhi = l;
}

/* Whether an integer with this sign and these leading digits can still end inside [lo, hi]
 * (ndig 0: only the minus sign so far). At most 19 digits, so every value fits in int64. */
static int int_feasible(int neg, uint64_t mag, int ndig, int64_t lo, int64_t hi)
{
	if (ndig == 0) {
		int64_t v = hi < -1 ? hi : -1;
		return v >= lo;
	}
	if (mag == 0) return !neg && lo <= 0 && 0 <= hi;
	__int128 p = 1;
	for (int j = 0; ndig + j <= 19; j++, p *= 10) {
		__int128 L = (__int128)mag * p, H = L + p - 1;
		__int128 vl = neg ? -H : L, vh = neg ? -L : H;
		if (vl <= hi && vh >= lo) return 1;
		if (!neg && vl > hi) return 0;
		if (neg && vh < lo) return 0;
	}
	return 0;
}

static uint64_t num_mag(const gframe *f) { return (uint64_t)f->a | ((uint64_t)f->b << 32); }

static int num_complete(const gnode *n, const gframe *f)
{
	if (n->num.decimal) return f->st == 5;
	if (!(f->st == 2 || f->st == 3 || f->st == 5 || f->st == 8)) return 0;
	if (!n->num.bounded) return 1;
	uint64_t m = num_mag(f);
	__int128 v = f->u8 ? -(__int128)m : (__int128)m;
	return v >= n->num.lo && v <= n->num.hi;
}

/* A bounded decimal: the sign is fixed, the integer part's magnitude is a bounded integer, the
 * fraction is mandatory, no exponent. */
static int step_decimal(const gnode *n, gframe *f, int c)
{
	int dig = c >= '0' && c <= '9';
	switch (f->st) {
	case 0:
		if (n->num.neg) {
			if (c != '-') return R_FAIL;
			f->st = 1;
			f->u8 = 1;
			return R_OK;
		}
		/* fallthrough */
	case 1:
		if (!dig || !int_feasible(0, (uint64_t)(c - '0'), 1, n->num.lo, n->num.hi)) return R_FAIL;
		f->a = (uint32_t)(c - '0');
		f->b = 0;
		f->st = c == '0' ? 2 : 3;
		f->ws = 1;
		return R_OK;
	case 2:
	case 3:
		if (dig && f->st == 3) {
			if (f->ws >= 19) return R_FAIL;
			uint64_t m = num_mag(f) * 10 + (uint64_t)(c - '0');
			if (!int_feasible(0, m, f->ws + 1, n->num.lo, n->num.hi)) return R_FAIL;
			f->a = (uint32_t)m;
			f->b = (uint32_t)(m >> 32);
			f->ws++;
			return R_OK;
		}
		if (c != '.') return R_FAIL;
		{
			uint64_t m = num_mag(f);
			if ((__int128)m < n->num.lo || (__int128)m > n->num.hi) return R_FAIL;
		}
		f->st = 4;
		return R_OK;
	case 4:
		if (!dig) return R_FAIL;
		f->st = 5;
		f->ws = 1;
		return R_OK;
	case 5:
		if (dig) {
			if (f->ws >= SG_GRAMMAR_MAX_DIGITS) return R_FAIL;
			f->ws++;
			return R_OK;
		}
		return R_POP;
	}
	return R_FAIL;
}

static int step_number(const gnode *n, gframe *f, int c)
{
	if (n->num.decimal) return step_decimal(n, f, c);
	int dig = c >= '0' && c <= '9';
	int integer = n->num.integer, bounded = n->num.bounded;
	switch (f->st) {
	case 0: /* start */
		if (c == '-') {
			if (bounded && !int_feasible(1, 0, 0, n->num.lo, n->num.hi)) return R_FAIL;
			f->st = 1;
			f->u8 = 1;
			return R_OK;
		}
		/* fallthrough */
	case 1: /* after '-' */
		if (!dig) return R_FAIL;
		if (bounded) {
			if (c == '0' && f->u8) return R_FAIL; /* no -0 when bounded */
			if (!int_feasible(f->u8, (uint64_t)(c - '0'), 1, n->num.lo, n->num.hi)) return R_FAIL;
			f->a = (uint32_t)(c - '0');
			f->b = 0;
		}
		f->st = c == '0' ? 2 : 3;
		f->ws = 1;
		return R_OK;
	case 2: /* "0" */
	case 3: /* integer digits */
		if (dig && f->st == 3) {
			if (f->ws >= SG_GRAMMAR_MAX_DIGITS) return R_FAIL;
			if (bounded) {
				if (f->ws >= 19) return R_FAIL;
				uint64_t m = num_mag(f) * 10 + (uint64_t)(c - '0');
				if (!int_feasible(f->u8, m, f->ws + 1, n->num.lo, n->num.hi)) return R_FAIL;
				f->a = (uint32_t)m;
				f->b = (uint32_t)(m >> 32);
			}
			f->ws++;
			return R_OK;
		}
		if (!integer && c == '.') {
			f->st = 4;
			return R_OK;
		}
		if (!integer && (c == 'e' || c == 'E')) {
			f->st = 6;
			return R_OK;
		}
		return num_complete(n, f) ? R_POP : R_FAIL;
	case 4: /* '.' */
		if (!dig) return R_FAIL;
		f->st = 5;
		f->ws = 1;
		return R_OK;
	case 5: /* fraction digits */
		if (dig) {
			if (f->ws >= SG_GRAMMAR_MAX_DIGITS) return R_FAIL;
			f->ws++;
			return R_OK;
		}
		if (c == 'e' || c == 'E') {
			f->st = 6;
			return R_OK;
		}
		return R_POP;
	case 6: /* 'e' */
		if (c == '+' || c == '-') {
			f->st = 7;
			return R_OK;
		}
		/* fallthrough */
	case 7: /* exponent sign */
		if (!dig) return R_FAIL;
		f->st = 8;
		f->ws = 1;
		return R_OK;
	case 8: /* exponent digits */
		if (dig) {
			if (f->ws >= SG_GRAMMAR_MAX_EXP_DIGITS) return R_FAIL;
			f->ws++;
			return R_OK;
		}
		return R_POP;
	}
	return R_FAIL;
}

static int step_string(const gnode *n, gframe *f, int c)
{
	switch (f->st) {
	case 0:
		if (c != '"') return R_FAIL;
		f->st = 1;
		return R_OK;
	case 1:
		if (c == G_END || c < 0x20) return R_FAIL;
		if (c == '"') return (f->u8 || f->a < n->str.min) ? R_FAIL : R_OKPOP;
		if (c == '\\') {
			if (f->u8 || f->a >= n->str.max) return R_FAIL;
			f->st = 2;
			return R_OK;
		}
		if (f->u8 == 0) {
			/* a lead byte commits one more code point */
			if (f->a >= n->str.max) return R_FAIL;
			if (!utf8_step(&f->u8, c)) return R_FAIL;
			f->a++;
			return R_OK;
		}
		return utf8_step(&f->u8, c) ? R_OK : R_FAIL;
	case 2:
		switch (c) {
		case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
			f->a++;
			f->st = 1;
			return R_OK;
		case 'u':
			f->st = 3;
			f->b = 0;
			return R_OK;
		}
		return R_FAIL;
	case 3: case 4: case 5: case 6: {
		int h = c == G_END ? -1 : hexval(c);
		if (h < 0) return R_FAIL;
		f->b = f->b * 16 + (uint32_t)h;
		if (f->st == 4 && (f->b >> 4) == 0xD && (f->b & 0xF) >= 0xC) return R_FAIL; /* lone low */
		if (f->st == 6) {
			if (f->b >= 0xD800 && f->b <= 0xDBFF) {
				f->st = 7; /* a high surrogate: its low half must follow */
			} else {
				f->a++;
				f->st = 1;
			}
			return R_OK;
		}
		f->st++;
		return R_OK;
	}
	case 7: if (c != '\\') return R_FAIL; f->st = 8; return R_OK;
	case 8: if (c != 'u') return R_FAIL; f->st = 9; return R_OK;
	case 9: if (c != 'd' && c != 'D') return R_FAIL; f->st = 10; return R_OK;
	case 10: if (hexval(c) < 0xC || c == G_END) return R_FAIL; f->st = 11; return R_OK;
	case 11: if (c == G_END || hexval(c) < 0) return R_FAIL; f->st = 12; return R_OK;
	case 12:
		if (c == G_END || hexval(c) < 0) return R_FAIL;
		f->a++;
		f->st = 1;
		return R_OK;
	}
	return R_FAIL;
}

static int step_literals(const gnode *n, gframe *f, int c)
{
	uint32_t lo = f->a & 0xFFFF, hi = f->a >> 16, pos = f->b;
	const glit *v = n->lit.v;
	if (c != G_END) {
		uint32_t nlo, nhi;
		narrow(v, lo, hi, pos, c, &nlo, &nhi);
		if (nlo < nhi) {
			pos++;
			if (nhi - nlo == 1 && v[nlo].len == pos) return R_OKPOP;
			f->a = nlo | (nhi << 16);
			f->b = pos;
			return R_OK;
		}
	}
	if (lo < hi && v[lo].len == pos) return R_POP; /* complete: the byte belongs to the parent */
	return R_FAIL;
}

/* The key of an object with declared properties. Parent frame: the object, whose a is the next
 * declared index allowed. Frame: a = sorted-name range lo | hi << 16 over all names sharing the
 * bytes so far (for the "differs from every declared name" test too), b = bytes so far, st bit 0:
 * a declared name in the window is still possible, bit 1: an additional name is. */
static int step_key(const sg_grammar *g, gframe *stk, int sp, int c)
{
	gframe *f = &stk[sp - 1], *P = &stk[sp - 2];
	const gobj *o = &g->nodes[g->nodes[f->node].key.obj].obj;
	if (c == G_END) return R_FAIL;
	uint32_t lo = f->a & 0xFFFF, hi = f->a >> 16, pos = f->b;
	int wa = (int)P->a, wb = o->next_req[wa] < o->n ? o->next_req[wa] : o->n - 1;
	uint32_t nlo, nhi;
	narrow(o->sorted, lo, hi, pos, c, &nlo, &nhi);
	int decl = 0, decl_done = -1;
	if (f->st & 1) {
		for (uint32_t k = nlo; k < nhi; k++) {
			int p = o->order[k];
			if (p >= wa && p <= wb && o->nodes[p] != 0) {
				decl = 1;
				if (o->sorted[k].len == pos + 1) decl_done = p;
			}
		}
	}
	int exact_any = nlo < nhi && o->sorted[nlo].len == pos + 1;
	int add = 0, add_done = 0;
	if (f->st & 2) {
		if (pos == 0) {
			add = c == '"';
		} else if (c == '"') {
			add_done = f->u8 == 0 && !exact_any;
		} else if (c >= 0x20 && c != '\\') {
			add = utf8_step(&f->u8, c);
		}
	}
	if (decl_done >= 0) {
		P->b = (uint32_t)decl_done;
		P->a = (uint32_t)decl_done + 1;
		return R_OKPOP;
	}
	if (add_done) {
		P->b = G_ADD;
		P->a = (uint32_t)o->n;
		return R_OKPOP;
	}
	if (!decl && !add) return R_FAIL;
	f->a = nlo | (nhi << 16);
	f->b = pos + 1;
	f->st = (uint8_t)(decl | (add << 1));
	return R_OK;
}

static int step_object(const gobj *o, gframe *f, int c, int *child)
{
	int closable = o->next_req[f->a] == o->n;
	switch (f->st) {
	case 0:
		if (c != '{') return R_FAIL;
		f->st = 1;
		return R_OK;
	case 1: /* after '{' */
	case 5: /* after ',' */
		if (is_ws(c)) return ws_take(f);
		if (c == '}' && f->st == 1 && closable) return R_OKPOP;
		if (c == '"' && o->keyable[f->a]) {
			f->st = 2;
			f->ws = 0;
			f->b = G_ADD;
			*child = o->keynode;
			return R_PUSH;
		}
		return R_FAIL;
	case 2: /* after the key */
		if (is_ws(c)) return ws_take(f);
		if (c != ':') return R_FAIL;
		f->st = 3;
		f->ws = 0;
		return R_OK;
	case 3: /* after ':' */
		if (is_ws(c)) return ws_take(f);
		if (c == G_END) return R_FAIL;
		f->st = 4;
		f->ws = 0;
		*child = f->b == G_ADD ? o->additional : o->nodes[f->b];
		return R_PUSH;
	case 4: /* after a value */
		if (is_ws(c)) return ws_take(f);
		if (c == ',' && o->keyable[f->a]) {
			f->st = 5;
			f->ws = 0;
			return R_OK;
		}
		if (c == '}' && closable) return R_OKPOP;
		return R_FAIL;
	}
	return R_FAIL;
}

static int step_array(const gnode *n, gframe *f, int c, int *child)
{
	switch (f->st) {
	case 0:
		if (c != '[') return R_FAIL;
		f->st = 1;
		return R_OK;
	case 1: /* after '[' */
		if (is_ws(c)) return ws_take(f);
		if (c == ']' && n->arr.min == 0) return R_OKPOP;
		if (c == G_END || n->arr.max == 0) return R_FAIL;
		f->st = 2;
		f->a = 1;
		f->ws = 0;
		*child = n->arr.items;
		return R_PUSH;
	case 2: /* after an item */
		if (is_ws(c)) return ws_take(f);
		if (c == ',' && f->a < n->arr.max) {
			f->st = 3;
			f->ws = 0;
			return R_OK;
		}
		if (c == ']' && f->a >= n->arr.min) return R_OKPOP;
		return R_FAIL;
	case 3: /* after ',' */
		if (is_ws(c)) return ws_take(f);
		if (c == G_END) return R_FAIL;
		f->a++;
		f->st = 2;
		f->ws = 0;
		*child = n->arr.items;
		return R_PUSH;
	}
	return R_FAIL;
}

/* One byte on the top frame of stk[0..sp). */
static int step(const sg_grammar *g, gframe *stk, int sp, int c, int *child, int *also_pop)
{
	gframe *f = &stk[sp - 1];
	const gnode *n = &g->nodes[f->node];
	switch (n->kind) {
	case GN_ROOT:
		if (f->st == 2) return R_FAIL;
		if (is_ws(c)) return ws_take(f);
		if (f->st == 0) {
			if (c == G_END) return R_FAIL;
			f->st = 1;
			f->ws = 0;
			*child = n->root.child;
			return R_PUSH;
		}
		if (c == G_END) {
			f->st = 2;
			return R_OK;
		}
		return R_FAIL;
	case GN_OBJECT: return step_object(&n->obj, f, c, child);
	case GN_KEY: return step_key(g, stk, sp, c);
	case GN_ARRAY: return step_array(n, f, c, child);
	case GN_STRING: return step_string(n, f, c);
	case GN_NUMBER:
		if (c == G_END) return num_complete(n, f) ? R_POP : R_FAIL;
		return step_number(n, f, c);
	case GN_LITERALS: return step_literals(n, f, c);
	case GN_SEQ:
		if (f->a == (uint32_t)n->seq.n) return R_POP;
		if (n->seq.ws && f->a > 0 && is_ws(c)) return ws_take(f);
		/* the end goes to the next child too: a repetition of zero may still be complete */
		*child = n->seq.ch[f->a++];
		f->ws = 0;
		return R_PUSH;
	case GN_REPEAT: {
		int can_end = f->a >= n->rep.min;
		if (c == G_END || f->a >= n->rep.max) return can_end ? R_POP : R_FAIL;
		*also_pop = can_end; /* ending here is followed too */
		if (n->rep.ws && f->a > 0 && is_ws(c)) return ws_take(f);
		f->a++;
		f->ws = 0;
		*child = n->rep.child;
		return R_PUSH;
	}
	case GN_RAW: {
		const uint8_t *t = n->raw.term.s;
		uint32_t j = f->a;
		if (c == G_END || !utf8_step(&f->u8, c)) return R_FAIL;
		while (j > 0 && t[j] != c) j = n->raw.fail[j - 1];
		if (t[j] == c) j++;
		if (j == n->raw.term.len) return R_OKPOP;
		f->a = j;
		return R_OK;
	}
	}
	return R_FAIL;
}

static void emit(sink *k, const gframe *stk, int sp)
{
	if (!k->out) {
		k->hit = 1;
		return;
	}
	gstate *o = k->out;
	const gframe *p = o->f;
	for (int i = 0; i < o->n; p += o->len[i], i++)
		if (o->len[i] == sp && memcmp(p, stk, (size_t)sp * sizeof(gframe)) == 0) return;
	if (o->n >= SG_GRAMMAR_MAX_STACKS || o->total + sp > SG_GRAMMAR_MAX_TOTAL) {
		*k->overflow = 1;
		return;
	}
	memcpy(&o->f[o->total], stk, (size_t)sp * sizeof(gframe));
	o->len[o->n++] = (uint16_t)sp;
	o->total = (uint16_t)(o->total + sp);
}

static void push(const sg_grammar *g, gframe *stk, int sp, int node, int c, sink *k, int eps);

static void run(const sg_grammar *g, gframe *stk, int sp, int c, sink *k, int eps)
{
	while (sp > 0) {
		int child = 0, also_pop = 0;
		int r = step(g, stk, sp, c, &child, &also_pop);
		if (also_pop && sp > 1) {
			/* the other alternative: the top frame ends here and its parent takes the byte */
			gframe copy[SG_GRAMMAR_MAX_FRAMES];
			memcpy(copy, stk, (size_t)(sp - 1) * sizeof(gframe));
			run(g, copy, sp - 1, c, k, eps + 1);
		}
		switch (r) {
		case R_FAIL: return;
		case R_OK: emit(k, stk, sp); return;
		case R_OKPOP: emit(k, stk, sp - 1); return;
		case R_POP: sp--; continue;
		case R_PUSH: push(g, stk, sp, child, c, k, eps + 1); return;
		}
	}
}

static void push(const sg_grammar *g, gframe *stk, int sp, int node, int c, sink *k, int eps)
{
	if (eps > MAX_EPS) return;
	while (g->nodes[node].kind == GN_REF) node = g->nodes[node].ref.target;
	const gnode *n = &g->nodes[node];
	if (n->kind == GN_NEVER) return;
	if (n->kind == GN_UNION) {
		for (int i = 0; i < n->u.n; i++) {
			if (i == n->u.n - 1) {
				push(g, stk, sp, n->u.alts[i], c, k, eps + 1);
			} else {
				gframe copy[SG_GRAMMAR_MAX_FRAMES];
				memcpy(copy, stk, (size_t)sp * sizeof(gframe));
				push(g, copy, sp, n->u.alts[i], c, k, eps + 1);
			}
		}
		return;
	}
	if (sp >= SG_GRAMMAR_MAX_FRAMES) return;
	uint8_t nest = sp > 0 ? stk[sp - 1].nest : 0;
	if (n->kind == GN_OBJECT || n->kind == GN_ARRAY) {
		if (nest >= SG_GRAMMAR_MAX_NEST) return;
		nest++;
	}
	gframe f = {(uint32_t)node, 0, 0, 0, nest, 0, 0};
	if (n->kind == GN_LITERALS) f.a = (uint32_t)n->lit.n << 16;
	if (n->kind == GN_KEY) {
		const gobj *o = &g->nodes[n->key.obj].obj;
		uint32_t pa = stk[sp - 1].a;
		f.a = (uint32_t)o->n << 16;
		f.st = 1 | ((o->next_req[pa] == o->n && o->additional >= 0) ? 2 : 0);
	}
	stk[sp] = f;
	run(g, stk, sp + 1, c, k, eps);
}

/* in -> out on byte c (or G_END); returns the number of surviving stacks. */
static int advance1(const sg_grammar *g, const gstate *in, int c, gstate *out, int *overflow)
{
	sink k = {out, 0, overflow};
	if (out) {
		out->n = 0;
		out->total = 0;
	}
	const gframe *p = in->f;
	gframe stk[SG_GRAMMAR_MAX_FRAMES];
	for (int i = 0; i < in->n; p += in->len[i], i++) {
		memcpy(stk, p, (size_t)in->len[i] * sizeof(gframe));
		run(g, stk, in->len[i], c, &k, 0);
		if (!out && k.hit) return 1;
	}
	return out ? out->n : k.hit;
}

/* ---- state ---- */

static void state_init(const sg_grammar *g, gstate *s)
{
	s->n = 1;
	s->total = 1;
	s->len[0] = 1;
	gframe f = {(uint32_t)g->root, 0, 0, 0, 0, 0, 0};
	s->f[0] = f;
}

sg_status sg_grammar_state_new(const sg_grammar *g, sg_grammar_state **out)
{
	*out = NULL;
	if (!g || !g->sealed) return SG_FAIL(SG_ERR_INVALID_ARG, "grammar not finished");
	sg_grammar_state *s = sg_calloc(1, sizeof(*s));
	if (!s) return SG_FAIL(SG_ERR_NOMEM, "grammar state");
	s->g = g;
	s->fast = sg_flag_bool("SARAGOSSA_GRAMMAR_FAST_MASK");
	s->cur = sg_malloc(sizeof(gstate));
	s->tmp = sg_malloc(sizeof(gstate));
	s->save = sg_malloc(sizeof(gstate));
	if (!s->cur || !s->tmp || !s->save) {
		sg_grammar_state_free(s);
		return SG_FAIL(SG_ERR_NOMEM, "grammar state");
	}
	state_init(g, s->cur);
	*out = s;
	return SG_OK;
}

void sg_grammar_state_free(sg_grammar_state *s)
{
	if (!s) return;
	for (int i = 0; i < s->dfs_n; i++) sg_free(s->dfs[i]);
	sg_free(s->dfs);
	sg_free(s->cur);
	sg_free(s->tmp);
	sg_free(s->save);
	sg_free(s);
}

void sg_grammar_state_reset(sg_grammar_state *s)
{
	state_init(s->g, s->cur);
	s->overflow = 0;
}

void sg_grammar_state_copy(sg_grammar_state *dst, const sg_grammar_state *src)
{
	memcpy(dst->cur, src->cur, GSTATE_BYTES(src->cur));
	dst->overflow = src->overflow;
}

sg_status sg_grammar_advance(sg_grammar_state *s, const uint8_t *bytes, size_t n)
{
	memcpy(s->save, s->cur, GSTATE_BYTES(s->cur));
	for (size_t i = 0; i < n; i++) {
		if (!advance1(s->g, s->cur, bytes[i], s->tmp, &s->overflow)) {
			gstate *t = s->cur;
			s->cur = s->save;
			s->save = t;
			return sg_error(SG_ERR_FORMAT, "grammar: byte %zu (0x%02x) breaks the required format",
					i, bytes[i]);
		}
		gstate *t = s->cur;
		s->cur = s->tmp;
		s->tmp = t;
	}
	return SG_OK;
}

int sg_grammar_allows_byte(const sg_grammar_state *s, uint8_t b)
{
	int ovf = 0;
	return advance1(s->g, s->cur, b, NULL, &ovf);
}

int sg_grammar_accepts_eos(const sg_grammar_state *s)
{
	int ovf = 0;
	return advance1(s->g, s->cur, G_END, NULL, &ovf);
}

int sg_grammar_is_complete(const sg_grammar_state *s)
{
	if (!sg_grammar_accepts_eos(s)) return 0;
	for (int b = 0; b < 256; b++)
		if (sg_grammar_allows_byte(s, (uint8_t)b)) return 0;
	return 1;
}

int sg_grammar_state_overflowed(const sg_grammar_state *s) { return s->overflow; }

/* ---- masking ---- */

static sg_status ensure_dfs(sg_grammar_state *s, int depth)
{
	if (depth < s->dfs_n) return SG_OK;
	gstate **p = sg_realloc(s->dfs, (size_t)(depth + 1) * sizeof(gstate *));
	if (!p) return SG_FAIL(SG_ERR_NOMEM, "mask scratch");
	s->dfs = p;
	for (int i = s->dfs_n; i <= depth; i++) {
		/* index 0 is the current state itself, lent by walk() */
		s->dfs[i] = i == 0 ? NULL : sg_malloc(sizeof(gstate));
		if (i == 0) continue;
		if (!s->dfs[i]) {
			s->dfs_n = i;
			return SG_FAIL(SG_ERR_NOMEM, "mask scratch");
		}
	}
	s->dfs_n = depth + 1;
	return SG_OK;
}

/* The plain-token budget of one stack: the code points a plain token may still add when the
 * top frame is in a string body at a character boundary (a plain token cannot leave the string),
 * or -1. */
static int stack_budget(const sg_grammar *g, const gframe *top)
{
	const gnode *n = &g->nodes[top->node];
	if (n->kind == GN_STRING && top->st == 1 && top->u8 == 0) {
		uint32_t rem = n->str.max - top->a;
		return rem > SG_TRIE_PLAIN_MAX ? SG_TRIE_PLAIN_MAX : (int)rem;
	}
	if (n->kind == GN_KEY && top->st == 2 && top->u8 == 0 && top->b > 0) return SG_TRIE_PLAIN_MAX;
	if (n->kind == GN_RAW && top->u8 == 0 && n->raw.plain_ok) return SG_TRIE_PLAIN_MAX;
	return -1;
}

/* A plain token (or token suffix) of c code points is valid iff c <= the largest budget over the
 * stacks that have one. *all: every stack has a budget (then a plain token over the largest is
 * valid in none, which the root-level bitmap relies on). */
static int plain_budget(const sg_grammar *g, const gstate *s, int *all)
{
	int best = -1;
	*all = 1;
	const gframe *p = s->f;
	for (int i = 0; i < s->n; p += s->len[i], i++) {
		int b = stack_budget(g, &p[s->len[i] - 1]);
		if (b < 0) *all = 0;
		if (b > best) best = b;
	}
	return best;
}

static void set_range(const sg_trie_nodes *t, uint32_t from_node, uint32_t to_node, uint32_t *bits)
{
	for (uint32_t j = t->tok_off[from_node]; j < t->tok_off[to_node]; j++) {
		int id = t->tok_ids[j];
		bits[id >> 5] |= 1u << (id & 31);
	}
}

static void walk(sg_grammar_state *s, const sg_trie_nodes *t, uint32_t *bits)
{
	const sg_grammar *g = s->g;
	gstate **S = s->dfs;
	S[0] = s->cur;
	uint32_t i = 1;
	while (i < t->n) {
		int d = t->depth[i];
		if (!advance1(g, S[d - 1], t->byte[i], S[d], &s->overflow)) {
			i = t->skip[i];
			continue;
		}
		/* inside a string, a subtree whose remaining bytes are all plain is accepted at once */
		int all;
		if (s->fast && t->plain_sfx[i] >= 0 && plain_budget(g, S[d], &all) >= t->plain_sfx[i]) {
			set_range(t, i, t->skip[i], bits);
			i = t->skip[i];
			continue;
		}
		set_range(t, i, i + 1, bits);
		i++;
	}
	S[0] = NULL;
}

sg_status sg_grammar_mask(sg_grammar_state *s, const sg_token_trie *t, uint32_t *bits)
{
	int all;
	int budget = plain_budget(s->g, s->cur, &all);
	if (!all || !s->fast) budget = -1;
	const sg_trie_nodes *tn = budget >= 0 ? &t->impure : &t->all;
	sg_status st = ensure_dfs(s, tn->max_depth);
	if (st != SG_OK) return st;
	if (budget >= 0)
		memcpy(bits, t->plain_le + (size_t)budget * (size_t)t->words, (size_t)t->words * 4);
	else
		memset(bits, 0, (size_t)t->words * 4);
	walk(s, tn, bits);
	if (sg_grammar_accepts_eos(s))
		for (int i = 0; i < t->n_eot; i++) bits[t->eot[i] >> 5] |= 1u << (t->eot[i] & 31);
	return SG_OK;
}

/* ---- reasoning gate ---- */

struct sg_grammar_gate {
	sg_grammar_state *s;
	char *marker;
	size_t mlen;
	uint8_t *tail; /* the last mlen bytes seen while unconstrained */
	size_t tlen;
	int on;
};

sg_status sg_grammar_gate_new(const sg_grammar *g, const char *end_marker, int start_constrained,
			      sg_grammar_gate **out)
{
	*out = NULL;
	sg_grammar_gate *gt = sg_calloc(1, sizeof(*gt));
	if (!gt) return SG_FAIL(SG_ERR_NOMEM, "gate");
	sg_status st = sg_grammar_state_new(g, &gt->s);
	if (st != SG_OK) {
		sg_free(gt);
		return st;
	}
	gt->mlen = end_marker ? strlen(end_marker) : 0;
	gt->marker = sg_strdup(end_marker ? end_marker : "");
	gt->tail = sg_malloc(gt->mlen + 1);
	if (!gt->marker || !gt->tail) {
		sg_grammar_gate_free(gt);
		return SG_FAIL(SG_ERR_NOMEM, "gate");
	}
	gt->on = start_constrained || gt->mlen == 0;
	*out = gt;
	return SG_OK;
}

void sg_grammar_gate_free(sg_grammar_gate *gt)
{
	if (!gt) return;
	sg_grammar_state_free(gt->s);
	sg_free(gt->marker);
	sg_free(gt->tail);
	sg_free(gt);
}

int sg_grammar_gate_constrained(const sg_grammar_gate *gt) { return gt->on; }

sg_status sg_grammar_gate_advance(sg_grammar_gate *gt, const uint8_t *bytes, size_t n)
{
	size_t i = 0;
	while (!gt->on && i < n) {
		if (gt->tlen == gt->mlen) {
			memmove(gt->tail, gt->tail + 1, gt->mlen - 1);
			gt->tlen--;
		}
		gt->tail[gt->tlen++] = bytes[i++];
		if (gt->tlen == gt->mlen && memcmp(gt->tail, gt->marker, gt->mlen) == 0) gt->on = 1;
	}
	if (i < n) return sg_grammar_advance(gt->s, bytes + i, n - i);
	return SG_OK;
}

sg_status sg_grammar_gate_mask(sg_grammar_gate *gt, const sg_token_trie *t, uint32_t *bits)
{
	if (gt->on) return sg_grammar_mask(gt->s, t, bits);
	memset(bits, 0xFF, (size_t)t->words * 4);
	if (t->n_vocab % 32) bits[t->words - 1] = (1u << (t->n_vocab % 32)) - 1;
	return SG_OK;
}

int sg_grammar_gate_accepts_eos(const sg_grammar_gate *gt)
{
	return gt->on && sg_grammar_accepts_eos(gt->s);
}
