/* Stop conditions: see stop.h.
 *
 * Each stop string runs a Knuth-Morris-Pratt automaton over the streamed bytes. Its state is
 * the length of the longest suffix of the text so far that is a prefix of the string, so the
 * text to hold back is simply the largest state (plus an unfinished UTF-8 tail), each byte is
 * looked at once per stop string whatever the pieces are, and a match is seen at the exact byte
 * that completes it.
 */
#include "engine/stop.h"

#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/utf8.h"

typedef struct stopstr {
	char *s; /* [len] */
	int32_t len;
	int32_t *pi; /* [len] KMP failure: pi[i] = longest proper border of s[0..i] */
	int32_t q;   /* automaton state: matched prefix length, < len */
} stopstr;

struct sg_stop {
	stopstr *str; /* [n_str] */
	size_t n_str;
	int32_t *eos; /* [n_eos] */
	size_t n_eos;
	int32_t max_tokens, n_tokens;
	sg_finish finish;
	int32_t stop_index;
	char *buf;   /* [cap] text not yet emitted, after `emitted` bytes handed out last call */
	size_t blen; /* bytes in buf */
	size_t cap;
	size_t emitted; /* bytes at the front of buf the last result pointed to */
};

sg_status sg_stop_create(const sg_stop_params *p, sg_stop **out)
{
	if (!p || !out) return SG_FAIL(SG_ERR_INVALID_ARG, "params and out are required");
	*out = NULL;
	if (p->max_tokens < 0)
		return SG_FAIL(SG_ERR_INVALID_ARG, "max_tokens = %d must be >= 0 (0 = no limit)",
		               p->max_tokens);
	if (p->n_stop_strings > SG_STOP_MAX_STRINGS)
		return SG_FAIL(SG_ERR_INVALID_ARG, "%zu stop strings, at most %d are allowed",
		               p->n_stop_strings, SG_STOP_MAX_STRINGS);
	if (p->n_eos > SG_STOP_MAX_EOS)
		return SG_FAIL(SG_ERR_INVALID_ARG, "%zu EOS ids, at most %d are allowed", p->n_eos,
		               SG_STOP_MAX_EOS);
	if ((p->n_stop_strings && !p->stop_strings) || (p->n_eos && !p->eos_ids))
		return SG_FAIL(SG_ERR_INVALID_ARG, "a count is set but its array is NULL");
	for (size_t i = 0; i < p->n_eos; i++)
		if (p->eos_ids[i] < 0)
			return SG_FAIL(SG_ERR_INVALID_ARG, "eos_ids[%zu] = %d is negative", i, p->eos_ids[i]);
	for (size_t i = 0; i < p->n_stop_strings; i++) {
		const char *t = p->stop_strings[i];
		size_t n = !t ? 0 : p->stop_lens ? p->stop_lens[i] : strnlen(t, SG_STOP_MAX_LEN + 1);
		if (n == 0) return SG_FAIL(SG_ERR_INVALID_ARG, "stop string %zu is empty", i);
		if (n > SG_STOP_MAX_LEN)
			return SG_FAIL(SG_ERR_INVALID_ARG, "stop string %zu is longer than %d bytes", i,
			               SG_STOP_MAX_LEN);
		if (!sg_utf8_valid((const uint8_t *)t, n))
			return SG_FAIL(SG_ERR_INVALID_ARG, "stop string %zu is not valid UTF-8", i);
	}

	sg_stop *s = sg_calloc(1, sizeof(*s));
	if (!s) return SG_FAIL(SG_ERR_NOMEM, "stop conditions");
	s->max_tokens = p->max_tokens;
	s->stop_index = -1;
	if (p->n_eos) {
		s->eos = sg_malloc(p->n_eos * sizeof(*s->eos));
		if (!s->eos) goto nomem;
		memcpy(s->eos, p->eos_ids, p->n_eos * sizeof(*s->eos));
		s->n_eos = p->n_eos;
	}
	if (p->n_stop_strings) {
		s->str = sg_calloc(p->n_stop_strings, sizeof(*s->str));
		if (!s->str) goto nomem;
		s->n_str = p->n_stop_strings;
		for (size_t i = 0; i < s->n_str; i++) {
			stopstr *x = &s->str[i];
			x->len = (int32_t)(p->stop_lens ? p->stop_lens[i] : strlen(p->stop_strings[i]));
			x->s = sg_malloc((size_t)x->len);
			if (x->s) memcpy(x->s, p->stop_strings[i], (size_t)x->len);
			x->pi = sg_malloc((size_t)x->len * sizeof(*x->pi));
			if (!x->s || !x->pi) goto nomem;
			x->pi[0] = 0;
			for (int32_t j = 1, k = 0; j < x->len; j++) {
				while (k > 0 && x->s[j] != x->s[k]) k = x->pi[k - 1];
				if (x->s[j] == x->s[k]) k++;
				x->pi[j] = k;
			}
		}
	}
	*out = s;
	return SG_OK;
nomem:
	sg_stop_free(s);
	return SG_FAIL(SG_ERR_NOMEM, "copies of %zu stop strings", p->n_stop_strings);
}

void sg_stop_free(sg_stop *s)
{
	if (!s) return;
	for (size_t i = 0; i < s->n_str; i++) {
		sg_free(s->str[i].s);
		sg_free(s->str[i].pi);
	}
	sg_free(s->str);
	sg_free(s->eos);
	sg_free(s->buf);
	sg_free(s);
}

void sg_stop_reset(sg_stop *s)
{
	for (size_t i = 0; i < s->n_str; i++) s->str[i].q = 0;
	s->n_tokens = 0;
	s->finish = SG_FINISH_NONE;
	s->stop_index = -1;
	s->blen = s->emitted = 0;
}

int sg_stop_is_eos(const sg_stop *s, int32_t token)
{
	for (size_t i = 0; i < s->n_eos; i++)
		if (s->eos[i] == token) return 1;
	return 0;
}

int32_t sg_stop_n_tokens(const sg_stop *s)
{
	return s->n_tokens;
}

const char *sg_finish_str(sg_finish f)
{
	switch (f) {
	case SG_FINISH_EOS:
		return "eos";
	case SG_FINISH_STOP_STRING:
		return "stop";
	case SG_FINISH_LENGTH:
		return "length";
	default:
		return "none";
	}
}

/* Drops the bytes handed out by the previous call: its pointer was valid until now. */
static void compact(sg_stop *s)
{
	if (s->emitted) {
		memmove(s->buf, s->buf + s->emitted, s->blen - s->emitted);
		s->blen -= s->emitted;
		s->emitted = 0;
	}
}

static void result(sg_stop *s, size_t len, sg_stop_result *out)
{
	s->emitted = len;
	out->text = s->buf ? s->buf : "";
	out->len = len;
	out->finish = s->finish;
	out->stop_index = s->stop_index;
}

static void clear_states(sg_stop *s)
{
	for (size_t i = 0; i < s->n_str; i++) s->str[i].q = 0;
}

/* Appends piece and runs the automata; sets the finish on a match. Returns the number of bytes
 * of buf that may be emitted. */
static sg_status feed(sg_stop *s, const char *piece, size_t len, size_t *emit)
{
	compact(s);
	if (len > s->cap - s->blen) {
		size_t need = s->blen + len, cap = s->cap ? s->cap : 256;
		while (cap < need) cap *= 2;
		char *nb = sg_realloc(s->buf, cap);
		if (!nb) return SG_FAIL(SG_ERR_NOMEM, "stop text buffer of %zu bytes", cap);
		s->buf = nb;
		s->cap = cap;
	}
	size_t base = s->blen;
	if (len) memcpy(s->buf + base, piece, len); /* buf is NULL until the first non-empty piece */
	s->blen += len;
	for (size_t i = 0; i < len; i++) {
		char c = piece[i];
		int32_t hit = -1;
		for (size_t j = 0; j < s->n_str; j++) {
			stopstr *x = &s->str[j];
			int32_t q = x->q;
			while (q > 0 && x->s[q] != c) q = x->pi[q - 1];
			if (x->s[q] == c) q++;
			if (q == x->len) {
				/* Several strings may end on this byte: the longest one covers them all. */
				if (hit < 0 || x->len > s->str[hit].len) hit = (int32_t)j;
				q = x->pi[q - 1];
			}
			x->q = q;
		}
		if (hit >= 0) {
			size_t end = base + i + 1;
			/* The automaton's invariant keeps every byte of a live partial match in buf,
			 * so the match starts inside it. */
			SG_ASSERT(end >= (size_t)s->str[hit].len);
			s->finish = SG_FINISH_STOP_STRING;
			s->stop_index = hit;
			clear_states(s);
			s->blen = end - (size_t)s->str[hit].len;
			*emit = s->blen;
			return SG_OK;
		}
	}
	size_t hold = 0;
	for (size_t j = 0; j < s->n_str; j++)
		if ((size_t)s->str[j].q > hold) hold = (size_t)s->str[j].q;
	size_t utf8_hold = s->blen - sg_utf8_complete_prefix((const uint8_t *)s->buf, s->blen);
	if (utf8_hold > hold) hold = utf8_hold;
	SG_ASSERT(hold <= s->blen);
	*emit = s->blen - hold;
	return SG_OK;
}

static sg_status after_finish(sg_stop *s, sg_stop_result *out)
{
	compact(s);
	s->blen = 0;
	result(s, 0, out);
	return SG_OK;
}

sg_status sg_stop_text(sg_stop *s, const char *piece, size_t len, sg_stop_result *out)
{
	if (!out || (!piece && len))
		return SG_FAIL(SG_ERR_INVALID_ARG, "piece (%zu bytes) and out are required", len);
	if (s->finish) return after_finish(s, out);
	size_t emit = 0;
	sg_status st = feed(s, piece, len, &emit);
	if (st) return st;
	result(s, emit, out);
	return SG_OK;
}

sg_status sg_stop_flush(sg_stop *s, sg_stop_result *out)
{
	if (!out) return SG_FAIL(SG_ERR_INVALID_ARG, "out is required");
	compact(s);
	clear_states(s);
	result(s, s->blen, out);
	return SG_OK;
}

sg_status sg_stop_next(sg_stop *s, int32_t token, const char *piece, size_t len, sg_stop_result *out)
{
	if (!out || (!piece && len))
		return SG_FAIL(SG_ERR_INVALID_ARG, "piece (%zu bytes) and out are required", len);
	if (s->finish) return after_finish(s, out);
	s->n_tokens++;
	if (sg_stop_is_eos(s, token)) {
		s->finish = SG_FINISH_EOS;
		return sg_stop_flush(s, out);
	}
	size_t emit = 0;
	sg_status st = feed(s, piece, len, &emit);
	if (st) return st;
	if (!s->finish && s->max_tokens > 0 && s->n_tokens >= s->max_tokens) {
		s->finish = SG_FINISH_LENGTH;
		clear_states(s);
		emit = s->blen;
	}
	result(s, emit, out);
	return SG_OK;
}
