/* Phonemes with libespeak-ng and Piper's phoneme ids (phonemize.h). */
#include "audio/phonemize.h"

#include <espeak-ng/speak_lib.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/alloc.h"
#include "base/error.h"

static pthread_mutex_t espeak_lock = PTHREAD_MUTEX_INITIALIZER;
static int espeak_state; /* 0: not started, 1: running, -1: failed to start */
static char espeak_voice[64];

/* ---- growable arrays ---- */

typedef struct cpbuf {
	uint32_t *v;
	size_t n, cap;
} cpbuf;

static int cp_push(cpbuf *b, uint32_t c)
{
	if (b->n == b->cap) {
		size_t cap = b->cap ? 2 * b->cap : 256;
		uint32_t *v = sg_realloc(b->v, cap * sizeof *v);
		if (!v) return -1;
		b->v = v;
		b->cap = cap;
	}
	b->v[b->n++] = c;
	return 0;
}

typedef struct szbuf {
	size_t *v;
	int n, cap;
} szbuf;

static int sz_push(szbuf *b, size_t x)
{
	if (b->n == b->cap) {
		int cap = b->cap ? 2 * b->cap : 16;
		size_t *v = sg_realloc(b->v, (size_t)cap * sizeof *v);
		if (!v) return -1;
		b->v = v;
		b->cap = cap;
	}
	b->v[b->n++] = x;
	return 0;
}

/* ---- clause punctuation ---- */

/* What ended a clause, told from the text espeak-ng consumed for it (libespeak-ng 1.51 does not
 * report the terminator that Piper's patched copy returns): the mark before trailing white
 * space and closing quotes or brackets. espeak-ng reads one character past the clause (the start
 * of the next word) before it stops, so a last character that follows white space is left out.
 * An ellipsis adds nothing and does not end the sentence (espeak-ng's attributes for it match
 * none of Piper's cases). */
enum { END_NONE, END_PERIOD, END_QUESTION, END_EXCLAMATION, END_COMMA, END_COLON, END_SEMICOLON };

static int is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

static int is_mark(char c) { return c && strchr(".?!,:;\"')]", c) != NULL; }

static int clause_end(const char *a, const char *b, int at_eof)
{
	while (b > a && is_ws((unsigned char)b[-1])) b--;
	if (!at_eof && b > a && !is_mark(b[-1])) {
		const char *c = b - 1;
		while (c > a && ((unsigned char)*c & 0xC0) == 0x80) c--; /* the look-ahead character's first byte */
		if (c > a && is_ws((unsigned char)c[-1])) {
			b = c;
			while (b > a && is_ws((unsigned char)b[-1])) b--;
		}
	}
	while (b > a && strchr("\"')]", b[-1])) b--; /* closing quotes and brackets after the mark */
	if (b == a) return END_NONE;
	char c = b[-1];
	if (c == '.' && b - a >= 2 && b[-2] == '.') return END_NONE; /* ellipsis */
	switch (c) {
	case '.': return END_PERIOD;
	case '?': return END_QUESTION;
	case '!': return END_EXCLAMATION;
	case ',': return END_COMMA;
	case ':': return END_COLON;
	case ';': return END_SEMICOLON;
	default: return END_NONE;
	}
}

/* Decodes s (NFD-normalised first) and appends its code points, leaving out "(xx)" language
 * marks, to b. */
static int append_phonemes(cpbuf *b, const char *s)
{
	utf8proc_uint8_t *nfd = utf8proc_NFD((const utf8proc_uint8_t *)s);
	if (!nfd) return -1;
	const utf8proc_uint8_t *p = nfd;
	utf8proc_ssize_t left = (utf8proc_ssize_t)strlen((const char *)nfd);
	int in_flag = 0, rc = 0;
	while (left > 0) {
		utf8proc_int32_t c;
		utf8proc_ssize_t k = utf8proc_iterate(p, left, &c);
		if (k <= 0) break;
		p += k;
		left -= k;
		if (in_flag) {
			if (c == ')') in_flag = 0;
		} else if (c == '(') {
			in_flag = 1;
		} else if (cp_push(b, (uint32_t)c)) {
			rc = -1;
			break;
		}
	}
	free(nfd); /* utf8proc allocates with malloc */
	return rc;
}

static sg_status start_espeak(const char *voice)
{
	if (espeak_state == 0) {
		/* DONT_EXIT: without it espeak-ng calls exit() when its data is missing */
		int rate = espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0, NULL, espeakINITIALIZE_DONT_EXIT);
		espeak_state = rate > 0 ? 1 : -1;
	}
	if (espeak_state < 0)
		return sg_error(SG_ERR_UNSUPPORTED, "phonemize: espeak-ng did not start (is espeak-ng-data installed?)");
	if (strcmp(espeak_voice, voice)) {
		if (strlen(voice) >= sizeof espeak_voice || espeak_SetVoiceByName(voice) != EE_OK) {
			espeak_voice[0] = 0;
			return sg_error(SG_ERR_NOT_FOUND, "phonemize: espeak-ng has no voice '%s'", voice);
		}
		strcpy(espeak_voice, voice);
	}
	return SG_OK;
}

sg_status sg_phonemize(const char *voice, const char *text, sg_phonemes *out)
{
	memset(out, 0, sizeof *out);
	if (!voice || !text) return SG_FAIL(SG_ERR_INVALID_ARG, "a NULL argument");
	if (utf8proc_decompose((const utf8proc_uint8_t *)text, 0, NULL, 0, UTF8PROC_NULLTERM) < 0)
		return sg_error(SG_ERR_INVALID_ARG, "phonemize: the text is not valid UTF-8");
	cpbuf b = {0};
	szbuf sent = {0};
	sg_status st = SG_OK;
	pthread_mutex_lock(&espeak_lock);
	st = start_espeak(voice);
	int open = 0; /* a sentence is open */
	const void *ptr = text;
	while (!st && ptr) {
		const char *before = ptr;
		const char *ph = espeak_TextToPhonemes(&ptr, espeakCHARS_UTF8, espeakPHONEMES_IPA);
		const char *after = ptr ? (const char *)ptr : before + strlen(before);
		if (!open) {
			if (sz_push(&sent, b.n)) st = SG_FAIL(SG_ERR_NOMEM, "sentences");
			open = 1;
		}
		if (!st && ph && append_phonemes(&b, ph)) st = SG_FAIL(SG_ERR_NOMEM, "phonemes");
		int end = clause_end(before, after, ptr == NULL);
		static const char *marks[] = {"", ".", "?", "!", ", ", ": ", "; "};
		for (const char *m = marks[end]; !st && *m; m++)
			if (cp_push(&b, (unsigned char)*m)) st = SG_FAIL(SG_ERR_NOMEM, "phonemes");
		if (end == END_PERIOD || end == END_QUESTION || end == END_EXCLAMATION) open = 0;
		if (ptr && (const char *)ptr <= before) break; /* no progress: stop rather than loop */
	}
	pthread_mutex_unlock(&espeak_lock);
	if (!st && sz_push(&sent, b.n)) st = SG_FAIL(SG_ERR_NOMEM, "sentences");
	if (st) {
		sg_free(b.v);
		sg_free(sent.v);
		return st;
	}
	/* drop sentences without phonemes: one closed by the end of the text, or of marks alone */
	int k = 0;
	size_t w = 0; /* phonemes kept so far */
	for (int i = 0; i + 1 < sent.n; i++) {
		size_t a = sent.v[i], e = sent.v[i + 1];
		int letters = 0;
		for (size_t j = a; j < e && !letters; j++) letters = b.v[j] > 127 || !strchr(" .?!,:;", (int)b.v[j]);
		if (!letters) continue;
		memmove(b.v + w, b.v + a, (e - a) * sizeof *b.v);
		sent.v[k++] = w; /* k <= i: the starts not yet read are ahead */
		w += e - a;
	}
	sent.v[k] = w;
	out->cp = b.v;
	out->n_cp = w;
	out->sentence = sent.v;
	out->n_sentences = k;
	return SG_OK;
}

void sg_phonemes_free(sg_phonemes *p)
{
	if (!p) return;
	sg_free(p->cp);
	sg_free(p->sentence);
	memset(p, 0, sizeof *p);
}

/* ---- ids ---- */

sg_status sg_phoneme_map_add(sg_phoneme_map *m, const char *key, const int64_t *ids, size_t n)
{
	utf8proc_int32_t c;
	size_t len = strlen(key);
	utf8proc_ssize_t k = len ? utf8proc_iterate((const utf8proc_uint8_t *)key, (utf8proc_ssize_t)len, &c) : 0;
	if (k <= 0 || (size_t)k != len) return sg_error(SG_ERR_FORMAT, "phoneme_id_map: key '%s' is not one character", key);
	if (n > 64) return sg_error(SG_ERR_FORMAT, "phoneme_id_map: key '%s' has %zu ids", key, n);
	size_t cap = m->n + 1;
	uint32_t *cp = sg_realloc(m->cp, cap * sizeof *cp);
	if (cp) m->cp = cp;
	int32_t *first = sg_realloc(m->first, cap * sizeof *first);
	if (first) m->first = first;
	int32_t *count = sg_realloc(m->count, cap * sizeof *count);
	if (count) m->count = count;
	int64_t *all = sg_realloc(m->ids, (m->n_ids + n + 1) * sizeof *all);
	if (all) m->ids = all;
	if (!cp || !first || !count || !all) return SG_FAIL(SG_ERR_NOMEM, "phoneme map");
	m->cp[m->n] = (uint32_t)c;
	m->first[m->n] = (int32_t)m->n_ids;
	m->count[m->n] = (int32_t)n;
	memcpy(m->ids + m->n_ids, ids, n * sizeof *ids);
	m->n_ids += n;
	m->n++;
	return SG_OK;
}

typedef struct entry {
	uint32_t cp;
	int32_t first, count;
} entry;

static int cmp_entry(const void *a, const void *b)
{
	uint32_t x = ((const entry *)a)->cp, y = ((const entry *)b)->cp;
	return x < y ? -1 : x > y;
}

sg_status sg_phoneme_map_finish(sg_phoneme_map *m)
{
	if (!m->n) return SG_OK;
	entry *e = sg_malloc(m->n * sizeof *e);
	if (!e) return SG_FAIL(SG_ERR_NOMEM, "phoneme map");
	for (size_t i = 0; i < m->n; i++) e[i] = (entry){m->cp[i], m->first[i], m->count[i]};
	qsort(e, m->n, sizeof *e, cmp_entry);
	for (size_t i = 0; i < m->n; i++) {
		m->cp[i] = e[i].cp;
		m->first[i] = e[i].first;
		m->count[i] = e[i].count;
	}
	sg_free(e);
	return SG_OK;
}

void sg_phoneme_map_free(sg_phoneme_map *m)
{
	if (!m) return;
	sg_free(m->cp);
	sg_free(m->first);
	sg_free(m->count);
	sg_free(m->ids);
	memset(m, 0, sizeof *m);
}

const int64_t *sg_phoneme_map_get(const sg_phoneme_map *m, uint32_t c, size_t *n)
{
	size_t lo = 0, hi = m->n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (m->cp[mid] < c) lo = mid + 1;
		else hi = mid;
	}
	if (lo < m->n && m->cp[lo] == c) {
		*n = (size_t)m->count[lo];
		return m->ids + m->first[lo];
	}
	*n = 0;
	return NULL;
}

sg_status sg_phonemes_to_ids(const sg_phoneme_map *m, const uint32_t *cp, size_t n, int64_t **ids, size_t *n_ids,
			     int *missing)
{
	*ids = NULL;
	*n_ids = 0;
	if (missing) *missing = 0;
	size_t nb, ne, np;
	const int64_t *bos = sg_phoneme_map_get(m, '^', &nb), *eos = sg_phoneme_map_get(m, '$', &ne),
		      *pad = sg_phoneme_map_get(m, '_', &np);
	if (!bos || !eos || !pad) return sg_error(SG_ERR_FORMAT, "phoneme_id_map lacks '%s'", !bos ? "^" : !eos ? "$" : "_");
	size_t cap = nb + np + ne, most = 1;
	for (size_t i = 0; i < m->n; i++) most = (size_t)m->count[i] > most ? (size_t)m->count[i] : most;
	cap += n * (most + np);
	int64_t *v = sg_malloc(cap * sizeof *v);
	if (!v) return SG_FAIL(SG_ERR_NOMEM, "%zu ids", cap);
	size_t k = 0;
	memcpy(v + k, bos, nb * sizeof *v), k += nb;
	memcpy(v + k, pad, np * sizeof *v), k += np;
	for (size_t i = 0; i < n; i++) {
		size_t c;
		const int64_t *x = sg_phoneme_map_get(m, cp[i], &c);
		if (!x) {
			if (missing) (*missing)++;
			continue;
		}
		memcpy(v + k, x, c * sizeof *v), k += c;
		memcpy(v + k, pad, np * sizeof *v), k += np;
	}
	memcpy(v + k, eos, ne * sizeof *v), k += ne;
	*ids = v;
	*n_ids = k;
	return SG_OK;
}
