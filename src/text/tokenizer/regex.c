/* Patterns of tokenizer.json ({"String": ...} or {"Regex": ...}, used by the Replace normalizer
 * and the Split pre-tokenizer) and the PCRE2 regex wrapper they run on. The reference matches with
 * Oniguruma, whose \s and \w follow Unicode properties; PCRE2's differ at the edges (U+180E,
 * marks), so patterns are rewritten to spell the reference's classes out. */
#include <pthread.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "text/tokenizer/tokenizer_int.h"

sg_status sg_tok_pattern(const json_t *p, const char **s, size_t *n, int *is_regex)
{
	const json_t *v;
	if (json_is_string(p)) v = p, *is_regex = 0;
	else if ((v = json_object_get(p, "String"))) *is_regex = 0;
	else if ((v = json_object_get(p, "Regex"))) *is_regex = 1;
	if (!v || !json_is_string(v)) return SG_FAIL(SG_ERR_FORMAT, "tokenizer: pattern must be {\"String\"} or {\"Regex\"}");
	*s = json_string_value(v);
	*n = json_string_length(v);
	return SG_OK;
}

#define WS_CLASS "\\t-\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"
#define WORD_CLASS "\\p{L}\\p{M}\\p{Nd}\\p{Pc}"

static int translate(const char *p, size_t n, sg_buf *o)
{
	int in_class = 0;
	for (size_t i = 0; i < n; i++) {
		char c = p[i];
		if (c == '\\' && i + 1 < n) {
			char e = p[i + 1];
			const char *rep = NULL;
			if (e == 's') rep = in_class ? WS_CLASS : "[" WS_CLASS "]";
			else if (e == 'S' && !in_class) rep = "[^" WS_CLASS "]";
			else if (e == 'w') rep = in_class ? WORD_CLASS : "[" WORD_CLASS "]";
			else if (e == 'W' && !in_class) rep = "[^" WORD_CLASS "]";
			if (rep) {
				if (sg_buf_put(o, rep, strlen(rep))) return -1;
			} else if (sg_buf_put(o, p + i, 2)) {
				return -1;
			}
			i++;
			continue;
		}
		if (c == '[' && !in_class) {
			in_class = 1;
			if (sg_buf_putc(o, c)) return -1;
			/* A ']' right after '[' or '[^' is a literal. */
			if (i + 1 < n && p[i + 1] == '^') {
				if (sg_buf_putc(o, '^')) return -1;
				i++;
			}
			if (i + 1 < n && p[i + 1] == ']') {
				if (sg_buf_putc(o, ']')) return -1;
				i++;
			}
			continue;
		}
		if (c == ']' && in_class) in_class = 0;
		if (sg_buf_putc(o, c)) return -1;
	}
	return 0;
}

sg_status sg_regex_compile(sg_regex *re, const char *pattern, size_t len)
{
	memset(re, 0, sizeof(*re));
	sg_buf t = {0};
	if (translate(pattern, len, &t) || sg_buf_reserve(&t, 1)) {
		sg_free(t.p);
		return SG_FAIL(SG_ERR_NOMEM, "regex");
	}
	int err;
	PCRE2_SIZE off;
	re->code = pcre2_compile((PCRE2_SPTR)t.p, t.n, PCRE2_UTF | PCRE2_UCP, &err, &off, NULL);
	sg_free(t.p);
	if (!re->code) {
		PCRE2_UCHAR msg[160];
		pcre2_get_error_message(err, msg, sizeof(msg));
		return SG_FAIL(SG_ERR_FORMAT, "tokenizer: regex '%.*s' does not compile: %s (offset %zu)", (int)len, pattern,
			       (const char *)msg, (size_t)off);
	}
	re->jit = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0;
	return SG_OK;
}

void sg_regex_free(sg_regex *re)
{
	if (re->code) pcre2_code_free(re->code);
	re->code = NULL;
}

/* Per-thread match data and JIT stack: a compiled pattern is shared, its scratch is not. */
typedef struct re_tls {
	pcre2_match_data *md;
	pcre2_match_context *mc;
	pcre2_jit_stack *js;
} re_tls;
static pthread_key_t re_key;
static pthread_once_t re_once = PTHREAD_ONCE_INIT;

static void re_tls_free(void *p)
{
	re_tls *t = p;
	if (!t) return;
	if (t->md) pcre2_match_data_free(t->md);
	if (t->mc) pcre2_match_context_free(t->mc);
	if (t->js) pcre2_jit_stack_free(t->js);
	sg_free(t);
}
static void re_key_init(void) { pthread_key_create(&re_key, re_tls_free); }

static re_tls *get_tls(void)
{
	pthread_once(&re_once, re_key_init);
	re_tls *t = pthread_getspecific(re_key);
	if (t) return t;
	t = sg_calloc(1, sizeof(*t));
	if (!t) return NULL;
	t->md = pcre2_match_data_create(16, NULL);
	t->mc = pcre2_match_context_create(NULL);
	t->js = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, NULL);
	if (!t->md || !t->mc || !t->js) {
		re_tls_free(t);
		return NULL;
	}
	pcre2_jit_stack_assign(t->mc, NULL, t->js);
	pthread_setspecific(re_key, t);
	return t;
}

int sg_regex_next(const sg_regex *re, const char *s, size_t n, size_t start, size_t *ms, size_t *me)
{
	re_tls *t = get_tls();
	if (!t) return -1;
	int r;
	if (re->jit) r = pcre2_jit_match(re->code, (PCRE2_SPTR)s, n, start, 0, t->md, t->mc);
	else r = pcre2_match(re->code, (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK, t->md, t->mc);
	if (r == PCRE2_ERROR_NOMATCH) return 0;
	if (r < 0) return -1;
	PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
	*ms = ov[0];
	*me = ov[1];
	return 1;
}
