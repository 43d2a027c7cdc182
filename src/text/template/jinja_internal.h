/* Shared internals of the Jinja interpreter (jinja_*.c): values, tokens, AST, evaluator state.
 * Memory: the AST lives in the template's arena; every value made while rendering lives in the
 * render's arena and is freed at once at the end, so values are never reference-counted and an
 * error can unwind with longjmp without leaking. */
#ifndef SG_TEXT_JINJA_INTERNAL_H
#define SG_TEXT_JINJA_INTERNAL_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

#include "base/arena.h"
#include "text/template/jinja.h"

/* ---- values ---- */

typedef enum {
	JV_UNDEF, /* Jinja's Undefined: falsy, prints as "", errors on most other uses */
	JV_NONE,
	JV_BOOL,
	JV_INT,
	JV_FLOAT,
	JV_STR,
	JV_LIST, /* also tuples (jlist.tuple) */
	JV_DICT,
	JV_NS,     /* namespace(): the one mutable object */
	JV_LOOP,   /* the `loop` variable */
	JV_MACRO,  /* a macro or a call block's caller() */
	JV_FUNC,   /* a global function: range, namespace, dict, raise_exception, strftime_now */
	JV_METHOD, /* a bound method: "abc".startswith, d.items, loop.cycle */
} jv_type;

typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jloop jloop;
typedef struct jmacro jmacro;
typedef struct jmethod jmethod;

typedef struct jv {
	jv_type t;
	union {
		int b;
		int64_t i;
		double f;
		struct {
			const char *p; /* UTF-8, not NUL-terminated */
			size_t n;
		} s;
		jlist *l;
		jdict *d; /* JV_DICT and JV_NS */
		jloop *loop;
		jmacro *m;
		int fn; /* JV_FUNC: a JF_* id */
		jmethod *meth;
		const char *hint; /* JV_UNDEF: "'x' is undefined" style message, or NULL */
	};
} jv;

/* What Python object a list value stands for. Jinja's map/select/items/unique/reverse filters
 * return generators and dict.items()/keys()/values() views; they are computed eagerly here but keep
 * the Python behaviour that shows: a generator is always truthy, has no len(), cannot be printed
 * meaningfully (so printing one is an error) and is not JSON; a view prints as dict_items([...]). */
enum { JL_LIST = 0, JL_GEN, JL_ITEMS, JL_KEYS, JL_VALUES };

struct jlist {
	jv *v;
	size_t n, cap;
	int tuple;
	int kind; /* JL_* */
};

struct jdict {
	jv *k, *v; /* insertion order */
	size_t n, cap;
};

struct jloop {
	jlist *items;
	size_t i;
	int depth; /* 1 for the outermost loop */
	int cycle_dummy;
};

struct jmethod {
	jv self;
	const char *name;
};

enum { JF_RANGE = 1, JF_NAMESPACE, JF_DICT, JF_RAISE, JF_STRFTIME, JF_JOINER };

/* ---- tokens ---- */

typedef enum {
	TK_EOF,
	TK_DATA,      /* template text */
	TK_VAR_BEGIN, /* {{ */
	TK_VAR_END,
	TK_BLOCK_BEGIN, /* {% */
	TK_BLOCK_END,
	TK_NAME,
	TK_STRING, /* unescaped value in s/n */
	TK_INT,
	TK_FLOAT,
	TK_OP, /* operator text in s/n */
} tk_type;

typedef struct token {
	tk_type t;
	int line, col;
	const char *s; /* token text or unescaped string (arena) */
	size_t n;
	int64_t i;
	double f;
} token;

/* ---- AST ---- */

typedef enum {
	/* expressions */
	N_LIT,    /* v */
	N_NAME,   /* name */
	N_LIST,   /* kids (list literal) */
	N_TUPLE,  /* kids */
	N_DICT,   /* kids: key, value, key, value... */
	N_ATTR,   /* a . name */
	N_ITEM,   /* a [ b ] */
	N_SLICE,  /* a [ b : c : d ], absent parts NULL */
	N_CALL,   /* a ( kids ), kwnames for keyword args */
	N_FILTER, /* a | name ( kids ); a NULL for filter blocks */
	N_TEST,   /* a is [not] name ( kids ) (op = 1 for not) */
	N_UNARY,  /* op: '-', '+', 'n' (not) */
	N_BINOP,  /* op: '+','-','*','/','f'(//),'%','p'(**),'~','a'(and),'o'(or),'=','!','<','>','l'(<=),'g'(>=),'i'(in),'I'(not in) */
	N_COND,   /* b if a else c */
	/* statements */
	N_TEXT,    /* name/n: literal output */
	N_OUTPUT,  /* {{ a }} */
	N_IF,      /* a cond, body, orelse */
	N_FOR,     /* targets, a iterable, b filter, body, orelse */
	N_SET,     /* targets (names) or a (ns attribute target: N_ATTR), b value; body for block set, c filter chain */
	N_MACRO,   /* name, params (names + defaults), body */
	N_CALLBLK, /* a call expression, params, body */
	N_FILTBLK, /* c filter chain (N_FILTER with a == NULL innermost), body */
	N_WITH,    /* targets + values, body */
	N_BREAK,
	N_CONTINUE,
	N_BLOCKS, /* body: a statement list */
} node_type;

typedef struct node node;
typedef struct nodelist {
	node **v;
	size_t n, cap;
} nodelist;

struct node {
	node_type t;
	int line, col;
	int op;
	const char *name; /* names, attribute, filter/test, macro name, text */
	size_t n;         /* length of name for N_TEXT */
	jv v;             /* N_LIT */
	node *a, *b, *c;
	nodelist kids;      /* call args, list items, dict pairs */
	const char **kwnames; /* N_CALL / N_FILTER / N_TEST: kwnames[i] non-NULL if kids[i] is keyword */
	nodelist body, orelse;
	const char **targets; /* N_FOR / N_SET / N_WITH names, N_MACRO params */
	nodelist defaults;    /* N_MACRO params' defaults (NULL entries) / N_WITH values */
	size_t ntargets;
};

struct sg_jinja_template {
	sg_arena arena;
	char *name;
	nodelist body;
};

/* ---- lexer / parser ---- */

typedef struct jparse {
	sg_arena *a;
	const char *name;
	const char *src;
	size_t len;
	token *toks;
	size_t ntoks, cap, pos;
	int depth;
	jmp_buf jb;
	sg_status st;
	char err[512];
} jparse;

/* Fills p->toks; longjmps on error. */
void jinja_lex(jparse *p);
_Noreturn void jinja_parse_fail(jparse *p, sg_status st, int line, int col, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
void jinja_parse_template(jparse *p, nodelist *out);
void nodelist_push(sg_arena *a, nodelist *l, node *n, jparse *p);

/* Whether a filter / test of that name exists (checked when parsing, as Jinja does). */
int jinja_has_filter(const char *name);
int jinja_has_test(const char *name);

/* ---- evaluator ---- */

typedef struct scope scope;
struct scope {
	scope *parent;
	jdict vars;
};

struct jmacro {
	const node *def; /* N_MACRO or N_CALLBLK (then the call block's body is the macro body) */
	scope *closure;
	jv caller; /* JV_MACRO for a macro invoked by a call block, else JV_UNDEF */
};

typedef struct jbuf {
	char *p;
	size_t n, cap;
} jbuf;

typedef struct jctx {
	sg_arena a;
	const sg_jinja_template *tpl;
	sg_jinja_limits lim;
	jbuf *out; /* where output goes now (captures swap it) */
	size_t total_out;
	scope *globals;
	uint64_t steps;
	int depth;
	int loopctl; /* 0, 'b' break, 'c' continue */
	jmp_buf jb;
	char err[1024];
	int line, col; /* position of the construct being evaluated */
} jctx;

/* values (jinja_value.c): the bottom of the renderer, calling nothing above it */
/* Ends the render with "<template>: line L, column C: <message>" (longjmp to sg_jinja_render). */
_Noreturn void jfail(jctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Fails with an undefined value's own hint ("'x' is undefined"). */
_Noreturn void jfail_undef(jctx *c, jv u);
/* n bytes of the render's arena; fails past lim.max_memory. */
void *jalloc(jctx *c, size_t n);
jv jv_undef(const char *hint);
jv jv_none(void);
jv jv_bool(int b);
jv jv_int(int64_t i);
jv jv_float(double f);
jv jv_str(const char *p, size_t n);
jv jv_cstr(const char *s);
jv jv_strdup(jctx *c, const char *p, size_t n);
jlist *jlist_new(jctx *c, size_t cap);
void jlist_push(jctx *c, jlist *l, jv v);
jv jv_list(jlist *l);
jdict *jdict_new(jctx *c, size_t cap);
void jdict_set(jctx *c, jdict *d, jv k, jv v);
jv *jdict_get(const jdict *d, jv k);
jv *jdict_gets(const jdict *d, const char *k);
jv jv_dict(jdict *d);
int jv_truthy(jv v);
int jv_eq(jv a, jv b);
int jv_cmp(jctx *c, jv a, jv b); /* <0, 0, >0; jfail on incomparable types */
const char *jv_typename(jv v);    /* Python's names: 'str', 'int', 'dict', 'list', ... */
void jbuf_put(jctx *c, jbuf *b, const char *p, size_t n);
void jbuf_putc(jctx *c, jbuf *b, char ch);
void jv_write_str(jctx *c, jbuf *b, jv v);  /* Python str() */
void jv_write_repr(jctx *c, jbuf *b, jv v); /* Python repr() */
jv jv_to_str(jctx *c, jv v);
void py_float_repr(double f, char *buf, size_t n);
jv jv_from_json(jctx *c, const json_t *j);
/* json.dumps(v, ensure_ascii=False, indent, separators, sort_keys) as transformers' tojson. */
void jv_write_json(jctx *c, jbuf *b, jv v, int indent, const char *item_sep, const char *key_sep, int sort_keys,
		   int level);
size_t utf8_count(const char *p, size_t n);
/* byte offset of code point index cp (clamped to n) */
size_t utf8_offset(const char *p, size_t n, size_t cp);

/* access (jinja_access.c), over the values; the evaluator and the builtins use it */
jv jinja_getattr(jctx *c, jv obj, const char *name);
jv jinja_getitem(jctx *c, jv obj, jv key);
jlist *jinja_iterate(jctx *c, jv v); /* the items a for loop sees */
int jinja_is_method(jv obj, const char *name); /* a str / dict / list method jinja2 lets a template call */

/* evaluator (jinja_eval.c) */
jv jinja_call(jctx *c, jv fn, jv *args, const char **kwnames, size_t nargs);

/* builtins (jinja_builtins.c), over access and values; the evaluator calls them */
jv jinja_filter(jctx *c, const char *name, jv in, jv *args, const char **kwnames, size_t nargs);
int jinja_test(jctx *c, const char *name, jv in, jv *args, size_t nargs);
jv jinja_method(jctx *c, jmethod *m, jv *args, const char **kwnames, size_t nargs);
jv jinja_func(jctx *c, int fn, jv *args, const char **kwnames, size_t nargs);
/* Python's `fmt % args` for %s %r %d %i %% (args: a tuple, or one value). */
jv jinja_percent(jctx *c, jv fmt, jv args);

#endif
