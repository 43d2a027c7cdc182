/* Jinja lexer: template text into data / tag / expression tokens, with the whitespace rules of
 * transformers' environment: trim_blocks (the first newline after a block or comment tag goes),
 * lstrip_blocks (spaces and tabs before a block or comment tag on its own line go), and the
 * explicit `-` (strip all whitespace on that side) and `+` (keep it) markers. Newlines in text are
 * normalised to "\n" as Jinja does. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "text/template/jinja_internal.h"

_Noreturn void jinja_parse_fail(jparse *p, sg_status st, int line, int col, const char *fmt, ...)
{
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(p->err, sizeof(p->err), "%s: line %d, column %d: %s", p->name, line, col, msg);
	p->st = st;
	longjmp(p->jb, 1);
}

typedef struct lexer {
	jparse *p;
	size_t i;
	int line, col;
	int line_starting;
} lexer;

static void adv(lexer *L, size_t n)
{
	for (size_t k = 0; k < n && L->i < L->p->len; k++) {
		if (L->p->src[L->i] == '\n') {
			L->line++;
			L->col = 1;
		} else if (((uint8_t)L->p->src[L->i] & 0xC0) != 0x80) L->col++;
		L->i++;
	}
}

static int is_ws(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f'; }

static token *push(lexer *L, tk_type t, int line, int col)
{
	jparse *p = L->p;
	if (p->ntoks == p->cap) {
		size_t nc = p->cap ? p->cap * 2 : 256;
		token *nt = sg_arena_alloc(p->a, nc * sizeof(token), 8);
		if (!nt) jinja_parse_fail(p, SG_ERR_NOMEM, line, col, "out of memory");
		if (p->ntoks) memcpy(nt, p->toks, p->ntoks * sizeof(token));
		p->toks = nt;
		p->cap = nc;
	}
	token *t0 = &p->toks[p->ntoks++];
	memset(t0, 0, sizeof(*t0));
	t0->t = t;
	t0->line = line;
	t0->col = col;
	return t0;
}

static char *adup(lexer *L, size_t n)
{
	char *d = sg_arena_alloc(L->p->a, n + 1, 1);
	if (!d) jinja_parse_fail(L->p, SG_ERR_NOMEM, L->line, L->col, "out of memory");
	return d;
}

/* Emits text src[b..e) with newlines normalised. */
static void emit_data(lexer *L, size_t b, size_t e, int line, int col)
{
	if (e <= b) return;
	const char *s = L->p->src;
	char *d = adup(L, e - b);
	size_t n = 0;
	for (size_t k = b; k < e; k++) {
		if (s[k] == '\r') {
			d[n++] = '\n';
			if (k + 1 < e && s[k + 1] == '\n') k++;
		} else d[n++] = s[k];
	}
	d[n] = 0;
	token *t = push(L, TK_DATA, line, col);
	t->s = d;
	t->n = n;
}

static void lex_string(lexer *L)
{
	jparse *p = L->p;
	const char *s = p->src;
	char q = s[L->i];
	int line = L->line, col = L->col;
	size_t k = L->i + 1;
	while (k < p->len && s[k] != q) {
		if (s[k] == '\\') k++;
		k++;
	}
	if (k >= p->len) jinja_parse_fail(p, SG_ERR_FORMAT, line, col, "unterminated string literal");
	size_t b = L->i + 1, e = k;
	char *d = adup(L, (e - b) * 4 + 4);
	size_t n = 0;
	for (size_t j = b; j < e; j++) {
		char ch = s[j];
		if (ch == '\r') {
			d[n++] = '\n';
			if (j + 1 < e && s[j + 1] == '\n') j++;
			continue;
		}
		if (ch != '\\' || j + 1 >= e) {
			d[n++] = ch;
			continue;
		}
		char x = s[++j];
		uint32_t cp;
		int digits = 0;
		switch (x) {
		case 'n': d[n++] = '\n'; break;
		case 't': d[n++] = '\t'; break;
		case 'r': d[n++] = '\r'; break;
		case '\\': d[n++] = '\\'; break;
		case '\'': d[n++] = '\''; break;
		case '"': d[n++] = '"'; break;
		case 'a': d[n++] = '\a'; break;
		case 'b': d[n++] = '\b'; break;
		case 'f': d[n++] = '\f'; break;
		case 'v': d[n++] = '\v'; break;
		case '\n': break;
		case 'x': digits = 2; break;
		case 'u': digits = 4; break;
		case 'U': digits = 8; break;
		default:
			if (x >= '0' && x <= '7') {
				cp = 0;
				int m = 0;
				while (m < 3 && j < e && s[j] >= '0' && s[j] <= '7') {
					cp = cp * 8 + (uint32_t)(s[j] - '0');
					j++;
					m++;
				}
				j--;
				uint8_t u[4];
				int l = sg_utf8_encode(cp, u);
				memcpy(d + n, u, (size_t)l);
				n += (size_t)l;
			} else {
				d[n++] = '\\';
				d[n++] = x;
			}
		}
		if (digits) {
			cp = 0;
			for (int m = 0; m < digits; m++) {
				char h = j + 1 < e ? s[j + 1] : 0;
				int v = (h >= '0' && h <= '9') ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10
					: (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
				if (v < 0) jinja_parse_fail(p, SG_ERR_FORMAT, line, col, "truncated \\%c escape in string literal", x);
				cp = cp * 16 + (uint32_t)v;
				j++;
			}
			uint8_t u[4];
			int l = sg_utf8_encode(cp, u);
			if (!l) jinja_parse_fail(p, SG_ERR_UNSUPPORTED, line, col, "escape \\%c%X is not a Unicode scalar value", x, cp);
			memcpy(d + n, u, (size_t)l);
			n += (size_t)l;
		}
	}
	d[n] = 0;
	token *t = push(L, TK_STRING, line, col);
	t->s = d;
	t->n = n;
	adv(L, k + 1 - L->i);
}

static int is_digit(char ch) { return ch >= '0' && ch <= '9'; }
static int is_name0(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_'; }

static void lex_number(lexer *L)
{
	jparse *p = L->p;
	const char *s = p->src;
	size_t k = L->i;
	int is_float = 0;
	while (k < p->len && (is_digit(s[k]) || (s[k] == '_' && k + 1 < p->len && is_digit(s[k + 1])))) k++;
	if (k + 1 < p->len && s[k] == '.' && is_digit(s[k + 1])) {
		is_float = 1;
		k++;
		while (k < p->len && (is_digit(s[k]) || (s[k] == '_' && k + 1 < p->len && is_digit(s[k + 1])))) k++;
	}
	if (k < p->len && (s[k] == 'e' || s[k] == 'E')) {
		size_t m = k + 1;
		if (m < p->len && (s[m] == '+' || s[m] == '-')) m++;
		if (m < p->len && is_digit(s[m])) {
			is_float = 1;
			k = m;
			while (k < p->len && (is_digit(s[k]) || s[k] == '_')) k++;
		}
	}
	char buf[128];
	size_t n = 0;
	for (size_t j = L->i; j < k && n + 1 < sizeof(buf); j++)
		if (s[j] != '_') buf[n++] = s[j];
	buf[n] = 0;
	token *t = push(L, is_float ? TK_FLOAT : TK_INT, L->line, L->col);
	if (is_float) t->f = strtod(buf, NULL);
	else {
		errno = 0;
		char *end;
		unsigned long long v = strtoull(buf, &end, 10);
		if (errno || v > (unsigned long long)INT64_MAX)
			jinja_parse_fail(p, SG_ERR_UNSUPPORTED, L->line, L->col, "integer literal %s is too large", buf);
		t->i = (int64_t)v;
	}
	adv(L, k - L->i);
}

static const char *const OPS2[] = {"//", "**", "==", "!=", "<=", ">=", NULL};
static const char OPS1[] = "+-/*%~[](){}<>=.:|,;";

/* Tokens inside a tag up to its end; kind is 'b' (block) or 'v' (variable). Returns the end
 * marker's modifier ('-', '+' or 0). */
static int lex_tag(lexer *L, char kind, int sline, int scol)
{
	jparse *p = L->p;
	const char *s = p->src;
	char stack[256];
	int depth = 0;
	for (;;) {
		while (L->i < p->len && is_ws(s[L->i])) adv(L, 1);
		if (L->i >= p->len)
			jinja_parse_fail(p, SG_ERR_FORMAT, sline, scol, "unexpected end of template: tag opened here is never closed (expected '%s')",
					 kind == 'b' ? "%}" : "}}");
		const char *end = kind == 'b' ? "%}" : "}}";
		if (depth == 0) {
			int mod = 0;
			size_t k = L->i;
			if ((s[k] == '-' || (s[k] == '+' && kind == 'b')) && k + 2 < p->len + 0 && !strncmp(s + k + 1, end, 2)) mod = s[k];
			if (mod || (k + 1 < p->len && !strncmp(s + k, end, 2))) {
				push(L, kind == 'b' ? TK_BLOCK_END : TK_VAR_END, L->line, L->col);
				adv(L, mod ? 3 : 2);
				return mod;
			}
		}
		char ch = s[L->i];
		if (ch == '\'' || ch == '"') {
			lex_string(L);
			continue;
		}
		if (is_digit(ch)) {
			lex_number(L);
			continue;
		}
		if (is_name0(ch)) {
			size_t k = L->i;
			while (k < p->len && (is_name0(s[k]) || is_digit(s[k]))) k++;
			token *t = push(L, TK_NAME, L->line, L->col);
			char *d = adup(L, k - L->i);
			memcpy(d, s + L->i, k - L->i);
			d[k - L->i] = 0;
			t->s = d;
			t->n = k - L->i;
			adv(L, k - L->i);
			continue;
		}
		size_t oplen = 0;
		for (int o = 0; OPS2[o]; o++)
			if (L->i + 1 < p->len && !strncmp(s + L->i, OPS2[o], 2)) oplen = 2;
		if (!oplen && strchr(OPS1, ch) && ch) oplen = 1;
		if (!oplen) jinja_parse_fail(p, SG_ERR_FORMAT, L->line, L->col, "unexpected character '%c' in tag", ch);
		if (oplen == 1 && (ch == '(' || ch == '[' || ch == '{')) {
			if (depth >= (int)sizeof(stack)) jinja_parse_fail(p, SG_ERR_FORMAT, L->line, L->col, "brackets nested too deeply");
			stack[depth++] = ch == '(' ? ')' : ch == '[' ? ']' : '}';
		} else if (oplen == 1 && (ch == ')' || ch == ']' || ch == '}')) {
			if (!depth || stack[depth - 1] != ch) jinja_parse_fail(p, SG_ERR_FORMAT, L->line, L->col, "unexpected '%c'", ch);
			depth--;
		}
		token *t = push(L, TK_OP, L->line, L->col);
		t->s = s + L->i;
		t->n = oplen;
		adv(L, oplen);
	}
}

/* After a tag: `-` eats all following whitespace, else trim_blocks eats one newline (blocks and
 * comments only, `+` keeps it). */
static void after_tag(lexer *L, int mod, int is_block)
{
	const char *s = L->p->src;
	size_t start = L->i;
	if (mod == '-') {
		while (L->i < L->p->len && is_ws(s[L->i])) adv(L, 1);
	} else if (is_block && mod != '+' && L->i < L->p->len && s[L->i] == '\n') adv(L, 1);
	if (L->i > start) L->line_starting = s[L->i - 1] == '\n';
	else L->line_starting = 0;
}

/* The data before a tag, with `-` / lstrip_blocks applied; returns the new end. */
static size_t strip_before(lexer *L, size_t b, size_t e, char kind, int mod)
{
	const char *s = L->p->src;
	if (mod == '-') {
		while (e > b && is_ws(s[e - 1])) e--;
		return e;
	}
	if (kind == '{' || mod == '+') return e;
	size_t l = e;
	while (l > b && s[l - 1] != '\n') l--;
	if (l > b || L->line_starting) {
		size_t k = l;
		while (k < e && is_ws(s[k]) && s[k] != '\n') k++;
		if (k == e) return l;
	}
	return e;
}

static int match_word(const char *s, size_t len, size_t k, const char *w)
{
	size_t n = strlen(w);
	return k + n <= len && !strncmp(s + k, w, n) && (k + n == len || !(is_name0(s[k + n]) || is_digit(s[k + n])));
}

void jinja_lex(jparse *p)
{
	/* Jinja normalises every newline of the source to "\n" first (strings included) and drops
	 * one trailing newline (keep_trailing_newline is off). */
	char *norm = sg_arena_alloc(p->a, p->len + 1, 1);
	if (!norm) jinja_parse_fail(p, SG_ERR_NOMEM, 1, 1, "out of memory");
	size_t nn = 0;
	for (size_t k = 0; k < p->len; k++) {
		if (p->src[k] == '\r') {
			norm[nn++] = '\n';
			if (k + 1 < p->len && p->src[k + 1] == '\n') k++;
		} else norm[nn++] = p->src[k];
	}
	if (nn && norm[nn - 1] == '\n') nn--;
	norm[nn] = 0;
	p->src = norm;
	p->len = nn;
	lexer L = {.p = p, .i = 0, .line = 1, .col = 1, .line_starting = 1};
	const char *s = p->src;
	while (L.i < p->len) {
		size_t b = L.i, k = L.i;
		int dline = L.line, dcol = L.col;
		while (k + 1 < p->len && !(s[k] == '{' && (s[k + 1] == '{' || s[k + 1] == '%' || s[k + 1] == '#'))) k++;
		if (k + 1 >= p->len) {
			emit_data(&L, b, p->len, dline, dcol);
			break;
		}
		char kind = s[k + 1];
		int mod = 0;
		if (k + 2 < p->len && (s[k + 2] == '-' || s[k + 2] == '+')) mod = s[k + 2];
		if (kind == '{' && mod == '+') mod = 0;
		size_t e = strip_before(&L, b, k, kind, mod);
		emit_data(&L, b, e, dline, dcol);
		adv(&L, k - L.i);
		int tline = L.line, tcol = L.col;
		adv(&L, mod ? 3 : 2);
		if (kind == '#') {
			size_t m = L.i;
			while (m + 1 < p->len && !(s[m] == '#' && s[m + 1] == '}')) m++;
			if (m + 1 >= p->len) jinja_parse_fail(p, SG_ERR_FORMAT, tline, tcol, "unterminated comment");
			int emod = (m > L.i && (s[m - 1] == '-' || s[m - 1] == '+')) ? s[m - 1] : 0;
			adv(&L, m + 2 - L.i);
			after_tag(&L, emod, 1);
			continue;
		}
		if (kind == '%') {
			/* {% raw %} ... {% endraw %}: the text in between is data, tags and all. */
			size_t q = L.i;
			while (q < p->len && is_ws(s[q])) q++;
			if (match_word(s, p->len, q, "raw")) {
				q += 3;
				while (q < p->len && is_ws(s[q])) q++;
				int rmod = 0;
				if (q < p->len && (s[q] == '-' || s[q] == '+')) rmod = s[q++];
				if (q + 1 >= p->len || strncmp(s + q, "%}", 2))
					jinja_parse_fail(p, SG_ERR_FORMAT, tline, tcol, "expected '%%}' after 'raw'");
				adv(&L, q + 2 - L.i);
				if (rmod == '-') while (L.i < p->len && is_ws(s[L.i])) adv(&L, 1);
				size_t rb = L.i, m = L.i;
				int found = 0;
				for (; m + 1 < p->len; m++) {
					if (s[m] != '{' || s[m + 1] != '%') continue;
					size_t z = m + 2;
					int emod = 0;
					if (z < p->len && (s[z] == '-' || s[z] == '+')) emod = s[z++];
					while (z < p->len && is_ws(s[z])) z++;
					if (!match_word(s, p->len, z, "endraw")) continue;
					z += 6;
					while (z < p->len && is_ws(s[z])) z++;
					int cmod = 0;
					if (z < p->len && (s[z] == '-' || s[z] == '+')) cmod = s[z++];
					if (z + 1 >= p->len || strncmp(s + z, "%}", 2)) continue;
					size_t re = m;
					if (emod == '-') while (re > rb && is_ws(s[re - 1])) re--;
					int rl = L.line, rc = L.col;
					emit_data(&L, rb, re, rl, rc);
					adv(&L, z + 2 - L.i);
					after_tag(&L, cmod, 1);
					found = 1;
					break;
				}
				if (!found) jinja_parse_fail(p, SG_ERR_FORMAT, tline, tcol, "'raw' block is never closed (expected 'endraw')");
				continue;
			}
			push(&L, TK_BLOCK_BEGIN, tline, tcol);
			int emod = lex_tag(&L, 'b', tline, tcol);
			after_tag(&L, emod, 1);
		} else {
			push(&L, TK_VAR_BEGIN, tline, tcol);
			int emod = lex_tag(&L, 'v', tline, tcol);
			after_tag(&L, emod, 0);
		}
	}
	push(&L, TK_EOF, L.line, L.col);
}
