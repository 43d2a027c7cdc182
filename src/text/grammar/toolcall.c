/* Streaming tool-call parsing (see toolcall.h): text mode looks for the syntax's start marker,
 * holding back a possible partial one; call mode accumulates the call body and re-scans it on
 * each piece (bodies are small), streaming the arguments of JSON calls as they become visible. */
#include "text/grammar/toolcall.h"

#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "text/grammar/toolcall_internal.h"

typedef struct {
	char *p;
	size_t n, cap;
} tbuf;

static int tb_put(tbuf *b, const char *s, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		size_t cap = (b->n + n + 1) * 2;
		char *q = sg_realloc(b->p, cap);
		if (!q) return -1;
		b->p = q;
		b->cap = cap;
	}
	if (n) memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = 0;
	return 0;
}

static void tb_drop(tbuf *b, size_t k) /* removes the first k bytes */
{
	if (k >= b->n) {
		b->n = 0;
	} else {
		memmove(b->p, b->p + k, b->n - k);
		b->n -= k;
	}
	if (b->p) b->p[b->n] = 0;
}

enum { M_TEXT, M_CALL, M_BAD };
enum { P_MORE, P_DONE, P_BAD, P_NOTCALL };

struct sg_toolcall_parser {
	sg_toolcall_syntax syn;
	const json_t *tools;
	const char *start, *end; /* markers; end NULL: the call runs to the end of the output */
	tbuf pend;               /* text mode: held text; call mode: the call body */
	tbuf raw;                /* the current call's raw text, for MALFORMED */
	int mode;
	int bare;       /* this call began with a bare '{' rather than a marker (Llama 3, Hermes) */
	int at_start;   /* Llama 3: only whitespace so far (or right after a ';'); Hermes with tools:
			 * only whitespace and bare calls so far */
	int bare_ok;    /* Hermes: tools were offered, so a bare JSON call object is accepted */
	int fence;      /* Hermes bare calls in a ``` fence: 1 inside it, 2 a call in it ended and
			 * the fence's close (or another call) is due */
	int index, count, malformed;
	int cut;        /* the end of output is a cut (sg_toolcall_cut), not the model's own end */
	int n_cut;
	/* the current call object being streamed */
	size_t off;     /* its offset in the body */
	int started, args_final, array_open;
	size_t args_emitted;
	/* Arguments being streamed are scanned incrementally (a long argument would otherwise be
	 * rescanned on every piece): live while the value is open. */
	int live;
	size_t args_abs; /* the value's offset in the body */
	size_t seek;     /* whole-call syntaxes: the end marker is not before this body offset */
	struct {
		int depth, in_str, esc;
		char stack[64];
		size_t pos;
	} vsc;
	sg_grammar *objg;
	sg_grammar_state *vs; /* validates streamed arguments */
	sg_toolcall_cb cb;
	void *ud;
};

static void ev(sg_toolcall_parser *p, sg_toolcall_event_kind k, const char *name, const char *t, size_t n)
{
	if (k == SG_TCE_TEXT && n == 0) return;
	sg_toolcall_event e = {k, p->index, name, t, n};
	p->cb(p->ud, &e);
}

/* ---- scanning JSON call objects ---- */

typedef struct {
	int err, complete;
	size_t end;               /* after the closing brace */
	long name_s, name_e;      /* the name's string value [s, e), quotes included; e < 0: not yet */
	long args_s;              /* start of the arguments value; < 0: not seen */
	size_t args_e;            /* how far the arguments value is visible */
	int args_done;
	int has_name_key;
} callscan;

static size_t skip_ws(const char *s, size_t i, size_t n)
{
	while (i < n && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) i++;
	return i;
}

/* 1: a complete value ends at *end; 0: the value continues past n; -1: malformed. */
static int scan_value(const char *s, size_t i, size_t n, size_t *end)
{
	if (i >= n) return 0;
	if (s[i] == '"') {
		for (size_t j = i + 1; j < n; j++) {
			if (s[j] == '\\') j++;
			else if (s[j] == '"') {
				*end = j + 1;
				return 1;
			}
		}
		return 0;
	}
	if (s[i] == '{' || s[i] == '[') {
		char stack[64];
		int d = 0, in_str = 0;
		for (size_t j = i; j < n; j++) {
			char ch = s[j];
			if (in_str) {
				if (ch == '\\') j++;
				else if (ch == '"') in_str = 0;
				continue;
			}
			if (ch == '"') in_str = 1;
			else if (ch == '{' || ch == '[') {
				if (d == 64) return -1;
				stack[d++] = ch == '{' ? '}' : ']';
			} else if (ch == '}' || ch == ']') {
				if (d == 0 || stack[d - 1] != ch) return -1;
				if (--d == 0) {
					*end = j + 1;
					return 1;
				}
			}
		}
		return 0;
	}
	size_t j = i;
	while (j < n && (strchr("+-.eE", s[j]) || (s[j] >= '0' && s[j] <= '9') || (s[j] >= 'a' && s[j] <= 'z')))
		j++;
	if (j == i) return -1;
	if (j == n) return 0;
	*end = j;
	return 1;
}

static int key_is(const char *s, size_t ks, size_t ke, const char *k)
{
	size_t l = strlen(k);
	return ke - ks == l + 2 && memcmp(s + ks + 1, k, l) == 0;
}

static callscan scan_call(const char *s, size_t i, size_t n, const char *args_key2)
{
	callscan r = {0, 0, 0, -1, -1, -1, 0, 0, 0};
	i = skip_ws(s, i, n);
	if (i >= n) return r;
	if (s[i] != '{') {
		r.err = 1;
		return r;
	}
	i++;
	int first = 1;
	for (;;) {
		i = skip_ws(s, i, n);
		if (i >= n) return r;
		if (s[i] == '}' && first) {
			r.complete = 1;
			r.end = i + 1;
			return r;
		}
		if (s[i] != '"') {
			r.err = 1;
			return r;
		}
		size_t ke;
		int k = scan_value(s, i, n, &ke);
		if (k <= 0) {
			r.err = k < 0;
			return r;
		}
		size_t ks = i;
		i = skip_ws(s, ke, n);
		if (i >= n) return r;
		if (s[i] != ':') {
			r.err = 1;
			return r;
		}
		i = skip_ws(s, i + 1, n);
		if (i >= n) return r;
		int is_name = key_is(s, ks, ke, "name");
		int is_args = key_is(s, ks, ke, "arguments") || (args_key2 && key_is(s, ks, ke, args_key2));
		size_t ve;
		int v = scan_value(s, i, n, &ve);
		if (v < 0) {
			r.err = 1;
			return r;
		}
		if (is_name) {
			r.has_name_key = 1;
			if (s[i] != '"') {
				r.err = 1;
				return r;
			}
			r.name_s = (long)i;
			if (v) r.name_e = (long)ve;
		}
		if (is_args) {
			r.args_s = (long)i;
			r.args_e = v ? ve : n;
			r.args_done = v;
		}
		if (!v) return r;
		i = skip_ws(s, ve, n);
		if (i >= n) return r;
		if (s[i] == ',') {
			i++;
			first = 0;
			continue;
		}
		if (s[i] == '}') {
			r.complete = 1;
			r.end = i + 1;
			return r;
		}
		r.err = 1;
		return r;
	}
}

/* Continues the scan of the open arguments value; 1: it ends at *end, 0: still open, -1: bad. */
static int live_scan(sg_toolcall_parser *p, const char *s, size_t n, size_t *end)
{
	for (; p->vsc.pos < n; p->vsc.pos++) {
		char ch = s[p->vsc.pos];
		if (p->vsc.in_str) {
			if (p->vsc.esc) p->vsc.esc = 0;
			else if (ch == '\\') p->vsc.esc = 1;
			else if (ch == '"') p->vsc.in_str = 0;
			continue;
		}
		if (ch == '"') {
			p->vsc.in_str = 1;
		} else if (ch == '{' || ch == '[') {
			if (p->vsc.depth == 64) return -1;
			p->vsc.stack[p->vsc.depth++] = ch == '{' ? '}' : ']';
		} else if (ch == '}' || ch == ']') {
			if (p->vsc.depth == 0 || p->vsc.stack[p->vsc.depth - 1] != ch) return -1;
			if (--p->vsc.depth == 0) {
				*end = ++p->vsc.pos;
				return 1;
			}
		}
	}
	return 0;
}

static int emit_args(sg_toolcall_parser *p, const char *s, size_t to)
{
	size_t from = p->args_abs + p->args_emitted;
	if (to <= from) return 0;
	if (sg_grammar_advance(p->vs, (const uint8_t *)s + from, to - from) != SG_OK) return -1;
	ev(p, SG_TCE_ARGS_DELTA, NULL, s + from, to - from);
	p->args_emitted = to - p->args_abs;
	return 0;
}

static void reset_call(sg_toolcall_parser *p)
{
	p->live = 0;
	p->seek = 0;
	p->started = 0;
	p->args_final = 0;
	p->args_emitted = 0;
	sg_grammar_state_reset(p->vs);
}

static int start_call(sg_toolcall_parser *p, const char *s, long ns, long ne)
{
	json_t *nm = json_loadb(s + ns, (size_t)(ne - ns), JSON_DECODE_ANY, NULL);
	if (!json_is_string(nm) || json_string_length(nm) == 0) {
		json_decref(nm);
		return -1;
	}
	ev(p, SG_TCE_CALL_START, json_string_value(nm), NULL, 0);
	json_decref(nm);
	p->started = 1;
	return 0;
}

/* Streams what is visible of the call object at body[p->off..); returns P_MORE, P_DONE (object
 * complete, call ended; *end set) or P_BAD. */
static int stream_call(sg_toolcall_parser *p, const char *s, size_t n, int final, size_t *end)
{
	const char *k2 = p->syn == SG_TC_LLAMA3 || p->bare ? "parameters" : NULL;
	if (p->live) {
		size_t ve = n;
		int v = live_scan(p, s, n, &ve);
		if (v < 0 || emit_args(p, s, v ? ve : n)) return P_BAD;
		if (!v) return final ? P_BAD : P_MORE;
		p->live = 0; /* closed: the full scan below reads what follows it */
	}
	callscan r = scan_call(s, p->off, n, k2);
	if (r.err) return P_BAD;
	if (!p->started && r.name_e >= 0 && start_call(p, s, r.name_s, r.name_e)) return P_BAD;
	if (p->started && r.args_s >= 0 && s[r.args_s] == '{') {
		p->args_abs = (size_t)r.args_s;
		if (emit_args(p, s, r.args_e)) return P_BAD;
		if (!r.args_done && !p->live) {
			memset(&p->vsc, 0, sizeof(p->vsc));
			p->vsc.pos = (size_t)r.args_s;
			size_t ve;
			if (live_scan(p, s, n, &ve) != 0) return P_BAD; /* the full scan saw it open */
			p->live = 1;
		}
	} else if (r.args_s >= 0 && s[r.args_s] != '{' && s[r.args_s] != '"') {
		return P_BAD;
	}
	if (!r.complete) return final ? P_BAD : P_MORE;
	if (!r.has_name_key) return P_NOTCALL;
	if (!p->started) return P_BAD;
	*end = r.end;
	if (p->args_final) return P_DONE; /* re-scanned while waiting for what follows */
	if (r.args_s < 0) {
		ev(p, SG_TCE_ARGS_DELTA, NULL, "{}", 2);
	} else if (s[r.args_s] == '"') {
		/* arguments given as a string holding JSON */
		json_t *str = json_loadb(s + r.args_s, r.args_e - (size_t)r.args_s, JSON_DECODE_ANY, NULL);
		json_t *obj = json_is_string(str) ? json_loadb(json_string_value(str), json_string_length(str), 0, NULL) : NULL;
		json_decref(str);
		if (!json_is_object(obj)) {
			json_decref(obj);
			return P_BAD;
		}
		char *t = json_dumps(obj, JSON_COMPACT);
		json_decref(obj);
		if (!t) return P_BAD;
		ev(p, SG_TCE_ARGS_DELTA, NULL, t, strlen(t));
		free(t);
	} else if (!sg_grammar_accepts_eos(p->vs)) {
		return P_BAD;
	}
	p->args_final = 1;
	return P_DONE;
}

static void finish_call(sg_toolcall_parser *p)
{
	ev(p, SG_TCE_CALL_END, NULL, NULL, 0);
	p->index++;
	p->count++;
	reset_call(p);
}

static int emit_whole(sg_toolcall_parser *p, char *name, json_t *args)
{
	char *t = json_dumps(args, JSON_COMPACT);
	json_decref(args);
	if (!t) {
		sg_free(name);
		return P_BAD;
	}
	ev(p, SG_TCE_CALL_START, name, NULL, 0);
	ev(p, SG_TCE_ARGS_DELTA, NULL, t, strlen(t));
	ev(p, SG_TCE_CALL_END, NULL, NULL, 0);
	free(t);
	sg_free(name);
	p->index++;
	p->count++;
	return P_DONE;
}

/* Where `lit` starts in s[0..n), or n if absent; *partial: a proper prefix of lit ends s. */
static size_t find_lit(const char *s, size_t n, const char *lit, int *partial)
{
	size_t l = strlen(lit);
	*partial = 0;
	for (size_t i = 0; i + l <= n; i++)
		if (memcmp(s + i, lit, l) == 0) return i;
	for (size_t k = l - 1; k > 0; k--)
		if (k <= n && memcmp(s + n - k, lit, k) == 0) {
			*partial = 1;
			break;
		}
	return n;
}

/* Is `name` (n bytes) the name of an offered tool (prefix: a proper or whole prefix of one)? */
static int tool_named(const json_t *tools, const char *name, size_t n, int prefix)
{
	size_t i;
	json_t *t;
	json_array_foreach(tools, i, t)
	{
		const json_t *f = json_object_get(t, "function");
		if (!f) f = t;
		const json_t *nm = json_object_get(f, "name");
		if (!json_is_string(nm)) continue;
		size_t l = json_string_length(nm);
		if ((prefix ? n <= l : n == l) && memcmp(json_string_value(nm), name, n) == 0) return 1;
	}
	return 0;
}

/* Hermes without its tags: is the bare object at body[0..n) a call? A call object has only the
 * keys "name" (a string naming an offered tool) and "arguments" or "parameters" (an object); it is
 * decided (P_DONE) once both are known and the arguments have opened. P_MORE: it could still be
 * one; P_NOTCALL: it cannot (its text is answer text). A model that writes its call bare writes
 * these two keys only, so anything else is refuted at once and a JSON answer streams as text. */
static int bare_decide(const sg_toolcall_parser *p, const char *s, size_t n)
{
	size_t i = skip_ws(s, 0, n);
	if (i >= n) return P_MORE;
	if (s[i] != '{') return P_NOTCALL;
	i++;
	int named = 0, has_args = 0;
	for (;;) {
		i = skip_ws(s, i, n);
		if (i >= n) return P_MORE;
		if (s[i] != '"') return P_NOTCALL;
		size_t ke;
		int k = scan_value(s, i, n, &ke);
		if (k < 0) return P_NOTCALL;
		if (k == 0) {
			/* a key still being written: it must be able to become one of the three */
			static const char *const keys[] = {"name", "arguments", "parameters"};
			size_t l = n - i - 1;
			for (size_t j = 0; j < 3; j++)
				if (l <= strlen(keys[j]) && memcmp(s + i + 1, keys[j], l) == 0) return P_MORE;
			return P_NOTCALL;
		}
		int is_name = key_is(s, i, ke, "name");
		int is_args = key_is(s, i, ke, "arguments") || key_is(s, i, ke, "parameters");
		if ((!is_name && !is_args) || (is_name && named) || (is_args && has_args)) return P_NOTCALL;
		i = skip_ws(s, ke, n);
		if (i >= n) return P_MORE;
		if (s[i] != ':') return P_NOTCALL;
		i = skip_ws(s, i + 1, n);
		if (i >= n) return P_MORE;
		size_t ve;
		int v = scan_value(s, i, n, &ve);
		if (v < 0) return P_NOTCALL;
		if (is_name) {
			if (s[i] != '"') return P_NOTCALL;
			if (!v) {
				/* a name still being written must be the start of an offered one (an
				 * escape is judged once the string is whole) */
				if (memchr(s + i + 1, '\\', n - i - 1)) return P_MORE;
				return tool_named(p->tools, s + i + 1, n - i - 1, 1) ? P_MORE : P_NOTCALL;
			}
			json_t *nm = json_loadb(s + i, ve - i, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
			int ok = json_is_string(nm) && tool_named(p->tools, json_string_value(nm), json_string_length(nm), 0);
			json_decref(nm);
			if (!ok) return P_NOTCALL;
			named = 1;
			if (has_args) return P_DONE;
		} else {
			if (s[i] != '{') return P_NOTCALL;
			has_args = 1;
			if (named) return P_DONE;
		}
		if (!v) return P_MORE;
		i = skip_ws(s, ve, n);
		if (i >= n) return P_MORE;
		if (s[i] != ',') return P_NOTCALL; /* '}' before both keys: not a call */
		i++;
	}
}

/* One step of call mode on the body; *used: body bytes consumed when P_DONE. */
static int progress(sg_toolcall_parser *p, int final, size_t *used)
{
	const char *s = p->pend.p;
	size_t n = p->pend.n;
	int partial;
	switch (p->syn) {
	case SG_TC_HERMES: {
		size_t e;
		if (p->bare) {
			if (!p->started) {
				int d = bare_decide(p, s, n);
				/* Undecided at the end: cut short, it may have been a call on its way
				 * (as a cut start marker is); the model's own end makes it text. */
				if (d == P_MORE && final) return p->cut ? P_BAD : P_NOTCALL;
				if (d != P_DONE) return d;
			}
			int r = stream_call(p, s, n, final, &e);
			if (r != P_DONE) return r == P_NOTCALL ? P_BAD : r;
			/* the call is whole; more bare calls may follow, after blanks only */
			finish_call(p);
			p->at_start = 1;
			if (p->fence) p->fence = 2;
			*used = e;
			return P_DONE;
		}
		int r = stream_call(p, s, n, final, &e);
		if (r != P_DONE) return r == P_NOTCALL ? P_BAD : r;
		size_t j = skip_ws(s, e, n);
		size_t l = strlen(p->end);
		if (n - j >= l) {
			if (memcmp(s + j, p->end, l) != 0) return P_BAD;
			finish_call(p);
			*used = j + l;
			return P_DONE;
		}
		if (memcmp(s + j, p->end, n - j) != 0 || final) return P_BAD;
		return P_MORE;
	}
	case SG_TC_LLAMA3: {
		size_t e;
		int r = stream_call(p, s, n, final, &e);
		if (r == P_NOTCALL) return p->bare ? P_NOTCALL : P_BAD;
		if (r != P_DONE) return (r == P_BAD && p->bare && !p->started) ? P_NOTCALL : r;
		size_t j = skip_ws(s, e, n);
		if (j >= n && !final) return P_MORE; /* a ';' and another call may follow */
		finish_call(p);
		if (j < n && s[j] == ';') {
			p->at_start = 1;
			*used = j + 1;
			return P_DONE;
		}
		*used = e;
		return P_DONE;
	}
	case SG_TC_MISTRAL: {
		size_t i = skip_ws(s, 0, n);
		if (i >= n) return final ? P_BAD : P_MORE;
		if (s[i] == '[' || p->array_open) {
			if (!p->array_open) {
				p->off = i + 1;
				p->array_open = 1;
			}
			for (;;) {
				size_t e;
				int r = stream_call(p, s, n, final, &e);
				if (r == P_NOTCALL) return P_BAD;
				if (r != P_DONE) return r;
				size_t j = skip_ws(s, e, n);
				if (j >= n) return final ? P_BAD : P_MORE;
				if (s[j] == ',') {
					finish_call(p);
					p->off = j + 1;
					continue;
				}
				if (s[j] == ']') {
					finish_call(p);
					*used = j + 1;
					p->array_open = 0;
					return P_DONE;
				}
				return P_BAD;
			}
		}
		/* name[ARGS]{...} or name[CALL_ID]id[ARGS]{...} */
		if (p->live) {
		mistral_live:;
			size_t ve = n;
			int v = live_scan(p, s, n, &ve);
			if (v < 0 || emit_args(p, s, v ? ve : n)) return P_BAD;
			if (!v) return final ? P_BAD : P_MORE;
			if (!sg_grammar_accepts_eos(p->vs)) return P_BAD;
			finish_call(p);
			*used = ve;
			return P_DONE;
		}
		size_t a = find_lit(s, n, "[ARGS]", &partial);
		if (a == n) return final ? P_BAD : P_MORE;
		size_t ne = i;
		while (ne < a && s[ne] != '[') ne++;
		size_t nee = ne;
		while (nee > i && (s[nee - 1] == ' ' || s[nee - 1] == '\n')) nee--;
		if (nee == i) return P_BAD;
		if (ne < a && (a - ne < 9 || memcmp(s + ne, "[CALL_ID]", 9) != 0)) return P_BAD;
		size_t as = skip_ws(s, a + 6, n);
		if (!p->started) {
			char *nm = sg_strndup(s + i, nee - i);
			if (!nm) return P_BAD;
			ev(p, SG_TCE_CALL_START, nm, NULL, 0);
			sg_free(nm);
			p->started = 1;
		}
		if (as >= n) return final ? P_BAD : P_MORE;
		if (s[as] != '{') return P_BAD;
		p->args_abs = as;
		memset(&p->vsc, 0, sizeof(p->vsc));
		p->vsc.pos = as;
		p->live = 1;
		goto mistral_live;
	}
	case SG_TC_QWEN_XML:
	case SG_TC_GEMMA4:
	case SG_TC_GEMMA3: {
		size_t e = p->seek + find_lit(s + p->seek, n - p->seek, p->end, &partial);
		if (e == n) {
			/* no marker before n - len + 1: the next search starts there */
			size_t l = strlen(p->end);
			if (n >= l) p->seek = n - l + 1;
			return final ? P_BAD : P_MORE;
		}
		char *name = NULL;
		json_t *args = NULL;
		int rc = p->syn == SG_TC_QWEN_XML ? sg_tc_parse_qwen_xml(s, e, p->tools, &name, &args)
			 : p->syn == SG_TC_GEMMA4 ? sg_tc_parse_gemma4(s, e, &name, &args)
						  : sg_tc_parse_gemma3(s, e, &name, &args);
		if (rc) return P_BAD;
		*used = e + strlen(p->end);
		return emit_whole(p, name, args);
	}
	}
	return P_BAD;
}

static sg_status fail_oom(void) { return SG_FAIL(SG_ERR_NOMEM, "tool-call buffer"); }

/* A Markdown fence that opens a bare call: "```" or "```json", blanks, then '{'. Returns the
 * offset of the '{' (> 0); 0 while s[0..n) may still become one; -1 when it cannot. */
static long fence_open(const char *s, size_t n)
{
	static const char f[] = "```json";
	size_t k = 0;
	while (k < n && k < 7 && s[k] == f[k]) k++;
	if (k == n) return 0;
	if (k != 3 && k != 7) return -1;
	size_t j = skip_ws(s, k, n);
	if (j == n) return 0;
	return s[j] == '{' ? (long)j : -1;
}

/* Text mode over pend: emits safe text, enters call mode at a marker. Returns 1 when it entered
 * call mode, 0 when everything left is held or emitted. */
static int text_step(sg_toolcall_parser *p, int final)
{
	const char *s = p->pend.p;
	size_t n = p->pend.n;
	if (p->syn == SG_TC_LLAMA3 && p->at_start) {
		size_t i = skip_ws(s, 0, n);
		if (i < n && s[i] == '{') {
			tb_drop(&p->pend, i);
			p->bare = 1;
			p->mode = M_CALL;
			p->raw.n = 0;
			return 1;
		}
		if (i == n && !final) return 0; /* only whitespace: hold it */
		if (i < n) p->at_start = 0;
	}
	while (p->bare_ok && p->at_start && p->fence == 2) {
		/* after a call in a fence: blanks and the fence's close belong to the call syntax */
		size_t i = skip_ws(s, 0, n), k = 0;
		while (k < 3 && i + k < n && s[i + k] == '`') k++;
		if (i + k == n && k < 3 && !final) return 0;
		if (k == 3 || i + k == n) { /* closed, or ended inside its close */
			tb_drop(&p->pend, i + k);
			p->fence = 0;
			s = p->pend.p;
			n = p->pend.n;
			break;
		}
		if (k == 0 && i < n && s[i] == '{') break; /* another call in the same fence */
		p->fence = 0;                             /* never closed: what follows is text */
		if (i < n) p->at_start = 0;
	}
	if (p->bare_ok && p->at_start) {
		size_t i = skip_ws(s, 0, n);
		long f = i < n && s[i] == '`' && !p->fence ? fence_open(s + i, n - i) : -1;
		if (f == 0 && !final) return 0; /* may be a fence opening a call: hold it */
		if (f > 0) {
			/* the fence's opening is held as the call's raw text (text again if it is none) */
			ev(p, SG_TCE_TEXT, NULL, s, i);
			p->raw.n = 0;
			if (tb_put(&p->raw, s + i, (size_t)f)) return 0;
			tb_drop(&p->pend, i + (size_t)f);
			p->fence = 1;
			p->bare = 1;
			p->mode = M_CALL;
			return 1;
		}
		if (i < n && s[i] == '{') {
			/* the blanks before it are text (the agent drops them if a call follows) */
			ev(p, SG_TCE_TEXT, NULL, s, i);
			tb_drop(&p->pend, i);
			p->bare = 1;
			p->mode = M_CALL;
			p->raw.n = 0;
			return 1;
		}
		if (i == n && !final) return 0; /* only whitespace: hold it */
		if (i < n) p->at_start = 0;
	}
	int partial;
	size_t k = find_lit(s, n, p->start, &partial);
	if (k < n) {
		ev(p, SG_TCE_TEXT, NULL, s, k);
		tb_drop(&p->pend, k + strlen(p->start));
		p->bare = 0;
		p->mode = M_CALL;
		p->raw.n = 0;
		tb_put(&p->raw, p->start, strlen(p->start));
		return 1;
	}
	size_t hold = 0;
	if (partial && (!final || p->cut)) {
		size_t l = strlen(p->start);
		for (size_t h = l - 1; h > 0; h--)
			if (h <= n && memcmp(s + n - h, p->start, h) == 0) {
				hold = h;
				break;
			}
	}
	ev(p, SG_TCE_TEXT, NULL, s, n - hold);
	if (final && hold) {
		/* the output was cut inside a start marker: the call it began is cut */
		ev(p, SG_TCE_CALL_CUT, NULL, s + n - hold, hold);
		p->n_cut++;
		hold = 0;
	}
	tb_drop(&p->pend, n - hold);
	return 0;
}

/* The rest of the call, up to its end marker when there is one, is reported as text. */
static void call_bad(sg_toolcall_parser *p) { p->mode = M_BAD; }

static sg_status run(sg_toolcall_parser *p, int final)
{
	for (;;) {
		if (p->mode == M_TEXT) {
			if (!text_step(p, final)) return SG_OK;
			p->off = 0;
			reset_call(p);
			continue;
		}
		if (p->mode == M_BAD) {
			int partial;
			/* a bare call has no end marker: the rest of the output is its text */
			const char *endm = p->bare ? NULL : p->end;
			size_t e = endm ? find_lit(p->pend.p, p->pend.n, endm, &partial) : p->pend.n;
			if (e == p->pend.n && !final) return SG_OK;
			size_t take = e == p->pend.n ? e : e + strlen(endm);
			if (tb_put(&p->raw, p->pend.p, take)) return fail_oom();
			ev(p, SG_TCE_MALFORMED, NULL, p->raw.p, p->raw.n);
			p->malformed++;
			if (p->started == 1) p->index++;
			tb_drop(&p->pend, take);
			p->raw.n = 0;
			p->mode = M_TEXT;
			p->array_open = 0;
			p->fence = 0;
			reset_call(p);
			continue;
		}
		size_t used = 0;
		int r = progress(p, final, &used);
		if (r == P_MORE) return SG_OK;
		if (r == P_NOTCALL && p->syn == SG_TC_HERMES) {
			/* not a call: text mode reads it (it may hold a tagged call further on) */
			ev(p, SG_TCE_TEXT, NULL, p->raw.p, p->raw.n); /* a fence's opening */
			p->raw.n = 0;
			p->fence = 0;
			p->at_start = 0;
			p->bare = 0;
			p->mode = M_TEXT;
			reset_call(p);
			continue;
		}
		if (r == P_NOTCALL) {
			/* a bare JSON answer that is not a call: it is text */
			p->at_start = 0;
			ev(p, SG_TCE_TEXT, NULL, p->pend.p, p->pend.n);
			tb_drop(&p->pend, p->pend.n);
			p->mode = M_TEXT;
			reset_call(p);
			return SG_OK;
		}
		if (r == P_BAD && final && p->cut) {
			/* unfinished when the output was cut: neither a call nor text */
			if (tb_put(&p->raw, p->pend.p, p->pend.n)) return fail_oom();
			ev(p, SG_TCE_CALL_CUT, NULL, p->raw.p, p->raw.n);
			p->n_cut++;
			if (p->started) p->index++;
			tb_drop(&p->pend, p->pend.n);
			p->raw.n = 0;
			p->mode = M_TEXT;
			p->array_open = 0;
			reset_call(p);
			return SG_OK;
		}
		if (r == P_BAD) {
			call_bad(p);
			continue;
		}
		if (tb_put(&p->raw, p->pend.p, used)) return fail_oom();
		tb_drop(&p->pend, used);
		p->raw.n = 0;
		p->mode = M_TEXT;
		p->off = 0;
		reset_call(p);
	}
}

sg_status sg_toolcall_parser_new(sg_toolcall_syntax syntax, const json_t *tools,
				 sg_toolcall_parser **out)
{
	*out = NULL;
	sg_toolcall_parser *p = sg_calloc(1, sizeof(*p));
	if (!p) return fail_oom();
	p->syn = syntax;
	p->tools = tools;
	switch (syntax) {
	case SG_TC_HERMES:
		p->start = "<tool_call>";
		p->end = "</tool_call>";
		/* Small Qwen models often write the call without its tags when the choice is theirs */
		p->bare_ok = p->at_start = tools && json_array_size(tools) > 0;
		break;
	case SG_TC_QWEN_XML: p->start = "<tool_call>"; p->end = "</tool_call>"; break;
	case SG_TC_GEMMA4: p->start = "<|tool_call>"; p->end = "<tool_call|>"; break;
	case SG_TC_GEMMA3: p->start = "```tool_code"; p->end = "```"; break;
	case SG_TC_LLAMA3: p->start = "<|python_tag|>"; p->end = NULL; p->at_start = 1; break;
	case SG_TC_MISTRAL: p->start = "[TOOL_CALLS]"; p->end = NULL; break;
	default:
		sg_free(p);
		return SG_FAIL(SG_ERR_INVALID_ARG, "unknown tool-call syntax %d", (int)syntax);
	}
	sg_status st = sg_grammar_json_object(&p->objg);
	if (st == SG_OK) st = sg_grammar_state_new(p->objg, &p->vs);
	if (st != SG_OK) {
		sg_toolcall_parser_free(p);
		return st;
	}
	*out = p;
	return SG_OK;
}

void sg_toolcall_parser_free(sg_toolcall_parser *p)
{
	if (!p) return;
	sg_free(p->pend.p);
	sg_free(p->raw.p);
	sg_grammar_state_free(p->vs);
	sg_grammar_free(p->objg);
	sg_free(p);
}

sg_status sg_toolcall_feed(sg_toolcall_parser *p, const char *text, size_t n, sg_toolcall_cb cb,
			   void *ud)
{
	p->cb = cb;
	p->ud = ud;
	if (tb_put(&p->pend, text, n)) return fail_oom();
	/* raw keeps the call text for a MALFORMED report: append what call mode consumes */
	return run(p, 0);
}

sg_status sg_toolcall_finish(sg_toolcall_parser *p, sg_toolcall_cb cb, void *ud)
{
	p->cb = cb;
	p->ud = ud;
	return run(p, 1);
}

sg_status sg_toolcall_cut(sg_toolcall_parser *p, sg_toolcall_cb cb, void *ud)
{
	p->cb = cb;
	p->ud = ud;
	p->cut = 1;
	return run(p, 1);
}

int sg_toolcall_count(const sg_toolcall_parser *p) { return p->count; }
int sg_toolcall_cut_count(const sg_toolcall_parser *p) { return p->n_cut; }
int sg_toolcall_malformed(const sg_toolcall_parser *p) { return p->malformed; }

sg_status sg_toolcall_syntax_from_name(const char *name, sg_toolcall_syntax *out)
{
	static const struct {
		const char *n;
		sg_toolcall_syntax s;
	} t[] = {{"hermes", SG_TC_HERMES}, {"qwen_xml", SG_TC_QWEN_XML}, {"gemma4", SG_TC_GEMMA4},
		 {"gemma3", SG_TC_GEMMA3}, {"llama3", SG_TC_LLAMA3},     {"mistral", SG_TC_MISTRAL}};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (name && strcmp(name, t[i].n) == 0) {
			*out = t[i].s;
			return SG_OK;
		}
	return SG_FAIL(SG_ERR_INVALID_ARG, "unknown tool-call syntax '%s'", name ? name : "(null)");
}

/* ---- reasoning split ---- */

struct sg_reasoning_split {
	char *start, *end;
	int in;
	int done; /* the reasoning block closed, or answer text came first: the rest is answer */
	tbuf pend;
};

static int all_blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\n' && s[i] != '\r' && s[i] != '\t') return 0;
	return 1;
}

sg_status sg_reasoning_split_new(const char *start_marker, const char *end_marker,
				 int start_in_reasoning, sg_reasoning_split **out)
{
	*out = NULL;
	if (!start_marker || !end_marker || !*start_marker || !*end_marker)
		return SG_FAIL(SG_ERR_INVALID_ARG, "reasoning markers must be non-empty");
	sg_reasoning_split *r = sg_calloc(1, sizeof(*r));
	if (!r) return fail_oom();
	r->start = sg_strdup(start_marker);
	r->end = sg_strdup(end_marker);
	r->in = start_in_reasoning != 0;
	if (!r->start || !r->end) {
		sg_reasoning_split_free(r);
		return fail_oom();
	}
	*out = r;
	return SG_OK;
}

void sg_reasoning_split_free(sg_reasoning_split *r)
{
	if (!r) return;
	sg_free(r->start);
	sg_free(r->end);
	sg_free(r->pend.p);
	sg_free(r);
}

/* Only one reasoning block, at the start of the output (after blanks at most): a marker later in
 * the answer is answer text (a JSON string may well contain "<think>"). */
static void reasoning_run(sg_reasoning_split *r, int final, sg_reasoning_cb cb, void *ud)
{
	for (;;) {
		if (r->done) {
			if (r->pend.n) cb(ud, 0, r->pend.p, r->pend.n);
			tb_drop(&r->pend, r->pend.n);
			return;
		}
		const char *m = r->in ? r->end : r->start;
		int partial;
		size_t k = find_lit(r->pend.p, r->pend.n, m, &partial);
		if (k < r->pend.n) {
			if (!r->in && !all_blank(r->pend.p, k)) {
				r->done = 1;
				continue;
			}
			if (k) cb(ud, r->in, r->pend.p, k);
			tb_drop(&r->pend, k + strlen(m));
			if (r->in) r->done = 1;
			r->in = !r->in;
			continue;
		}
		size_t hold = 0;
		if (partial && !final) {
			size_t l = strlen(m);
			for (size_t h = l - 1; h > 0; h--)
				if (h <= r->pend.n && memcmp(r->pend.p + r->pend.n - h, m, h) == 0) {
					hold = h;
					break;
				}
		}
		if (!r->in && !all_blank(r->pend.p, r->pend.n - hold)) {
			r->done = 1;
			continue;
		}
		if (r->pend.n - hold) cb(ud, r->in, r->pend.p, r->pend.n - hold);
		tb_drop(&r->pend, r->pend.n - hold);
		return;
	}
}

sg_status sg_reasoning_feed(sg_reasoning_split *r, const char *text, size_t n, sg_reasoning_cb cb,
			    void *ud)
{
	if (tb_put(&r->pend, text, n)) return fail_oom();
	reasoning_run(r, 0, cb, ud);
	return SG_OK;
}

sg_status sg_reasoning_finish(sg_reasoning_split *r, sg_reasoning_cb cb, void *ud)
{
	reasoning_run(r, 1, cb, ud);
	return SG_OK;
}
