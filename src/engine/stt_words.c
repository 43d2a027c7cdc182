/* Word-level timestamps for Whisper (see stt_words.h). */
#include "engine/stt_words.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"

#define TOKENS_PER_SECOND 50.0 /* encoder frames per second: 16 kHz, hop 160, stride 2 */

/* ---- step 2: the alignment path ---- */

sg_status sg_stt_dtw(const float *x, int n, int m, int32_t *pi, int32_t *pj, int *len)
{
	*len = 0;
	if (n < 1 || m < 1) return SG_OK;
	size_t W = (size_t)m + 1;
	float *cost = sg_malloc(sizeof(float) * (size_t)(n + 1) * W);
	signed char *trace = sg_malloc((size_t)(n + 1) * W);
	if (!cost || !trace) {
		sg_free(cost);
		sg_free(trace);
		return SG_FAIL(SG_ERR_NOMEM, "out of memory for a %d x %d alignment", n, m);
	}
	for (size_t k = 0; k < (size_t)(n + 1) * W; k++) {
		cost[k] = INFINITY;
		trace[k] = -1;
	}
	cost[0] = 0.0f;
	/* column by column, as the reference fills it; a step is diagonal (0) only when strictly
	 * cheapest, up (1) when strictly cheaper than both others, else left (2) */
	for (int j = 1; j <= m; j++)
		for (int i = 1; i <= n; i++) {
			float c0 = cost[(size_t)(i - 1) * W + (size_t)(j - 1)], c1 = cost[(size_t)(i - 1) * W + (size_t)j],
			      c2 = cost[(size_t)i * W + (size_t)(j - 1)], c;
			int t;
			if (c0 < c1 && c0 < c2) {
				c = c0;
				t = 0;
			} else if (c1 < c0 && c1 < c2) {
				c = c1;
				t = 1;
			} else {
				c = c2;
				t = 2;
			}
			cost[(size_t)i * W + (size_t)j] = -x[(size_t)(i - 1) * (size_t)m + (size_t)(j - 1)] + c;
			trace[(size_t)i * W + (size_t)j] = (signed char)t;
		}
	for (int j = 0; j <= m; j++) trace[j] = 2;
	for (int i = 0; i <= n; i++) trace[(size_t)i * W] = 1;
	/* backwards from (n, m), then reversed */
	int i = n, j = m, k = 0;
	while (i > 0 || j > 0) {
		pi[k] = i - 1;
		pj[k] = j - 1;
		k++;
		int t = trace[(size_t)i * W + (size_t)j];
		if (t == 0) {
			i--;
			j--;
		} else if (t == 1) i--;
		else j--;
	}
	for (int a = 0, b = k - 1; a < b; a++, b--) {
		int32_t ti = pi[a], tj = pj[a];
		pi[a] = pi[b];
		pj[a] = pj[b];
		pi[b] = ti;
		pj[b] = tj;
	}
	*len = k;
	sg_free(cost);
	sg_free(trace);
	return SG_OK;
}

/* The median of 7 (or fewer) values: insertion sort, the middle one. */
static float median_of(float *w, int n)
{
	for (int a = 1; a < n; a++) {
		float v = w[a];
		int b = a - 1;
		while (b >= 0 && w[b] > v) {
			w[b + 1] = w[b];
			b--;
		}
		w[b + 1] = v;
	}
	return w[n / 2];
}

sg_status sg_stt_align_jumps(float *attn, int n_heads, int n_rows, int n_keys, int first_row, int n_text, int32_t *jump)
{
	int n = n_text + 1, K = n_keys, r = SG_STT_MEDIAN_WIDTH / 2;
	if (first_row < 0 || first_row + n > n_rows || K < 1 || n_heads < 1)
		return sg_error(SG_ERR_RANGE, "stt_align: rows %d..%d of %d, %d keys, %d heads", first_row, first_row + n, n_rows, K,
				n_heads);
	float *mat = sg_calloc((size_t)n * (size_t)K, sizeof(float));
	float *row = sg_malloc(sizeof(float) * (size_t)K);
	int32_t *pi = sg_malloc(sizeof(int32_t) * (size_t)(n + K));
	int32_t *pj = sg_malloc(sizeof(int32_t) * (size_t)(n + K));
	sg_status st = SG_OK;
	if (!mat || !row || !pi || !pj) {
		st = SG_FAIL(SG_ERR_NOMEM, "out of memory for a %d x %d alignment", n, K);
		goto done;
	}
	for (int h = 0; h < n_heads; h++) {
		float *a = attn + (size_t)h * (size_t)n_rows * (size_t)K;
		/* standardised over the tokens (each frame's column: mean 0, variance 1) */
		for (int j = 0; j < K; j++) {
			float mean = 0.0f, var = 0.0f;
			for (int i = 0; i < n_rows; i++) mean += a[(size_t)i * K + j];
			mean /= (float)n_rows;
			for (int i = 0; i < n_rows; i++) {
				float d = a[(size_t)i * K + j] - mean;
				var += d * d;
			}
			var /= (float)n_rows;
			float inv = var > 0.0f ? 1.0f / sqrtf(var) : 0.0f;
			for (int i = 0; i < n_rows; i++) a[(size_t)i * K + j] = (a[(size_t)i * K + j] - mean) * inv;
		}
		/* median over time (reflected at the edges), summed over the heads */
		for (int i = 0; i < n; i++) {
			const float *in = a + (size_t)(first_row + i) * K;
			float *o = mat + (size_t)i * K;
			if (K <= r) {
				for (int j = 0; j < K; j++) o[j] += in[j];
				continue;
			}
			for (int j = 0; j < K; j++) {
				float w[SG_STT_MEDIAN_WIDTH];
				for (int k = -r; k <= r; k++) {
					int p = abs(j + k);
					if (p >= K) p = K - (p - K) - 2;
					w[k + r] = in[p];
				}
				row[j] = median_of(w, SG_STT_MEDIAN_WIDTH);
			}
			for (int j = 0; j < K; j++) o[j] += row[j];
		}
	}
	for (size_t k = 0; k < (size_t)n * (size_t)K; k++) mat[k] /= (float)n_heads;
	int len;
	if ((st = sg_stt_dtw(mat, n, K, pi, pj, &len))) goto done;
	/* the frame where each row starts: the path's first step into it */
	int c = 0;
	for (int k = 0; k < len; k++)
		if (!k || pi[k] != pi[k - 1]) jump[c++] = pj[k];
	if (c != n) st = sg_error(SG_ERR_INTERNAL, "stt_align: the path crosses %d rows of %d", c, n);
done:
	sg_free(mat);
	sg_free(row);
	sg_free(pi);
	sg_free(pj);
	return st;
}

/* ---- step 3: words ---- */

int sg_stt_lang_by_char(const char *code)
{
	static const char *const by_char[] = {"zh", "ja", "th", "lo", "my", "yue"};
	if (!code) return 0;
	for (size_t i = 0; i < sizeof(by_char) / sizeof(by_char[0]); i++)
		if (!strcmp(code, by_char[i])) return 1;
	return 0;
}

void sg_stt_wtok_free(sg_stt_wtok *w, int n)
{
	for (int i = 0; w && i < n; i++) sg_free(w[i].text);
	sg_free(w);
}

/* Code points in s[0..n) (valid UTF-8: the decoder's output is). */
static int cp_len(const char *s, size_t n)
{
	int c = 0;
	for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
	return c;
}

/* The code point index of the first U+FFFD in s, -1 if none. */
static int fffd_at(const char *s, size_t n)
{
	int c = 0;
	for (size_t i = 0; i < n; i++) {
		if (((unsigned char)s[i] & 0xC0) == 0x80) continue;
		if (i + 2 < n && (unsigned char)s[i] == 0xEF && (unsigned char)s[i + 1] == 0xBF && (unsigned char)s[i + 2] == 0xBD)
			return c;
		c++;
	}
	return -1;
}

/* 1 when code point idx of s is U+FFFD. */
static int fffd_is_at(const char *s, size_t n, int idx)
{
	int c = 0;
	for (size_t i = 0; i < n; i++) {
		if (((unsigned char)s[i] & 0xC0) == 0x80) continue;
		if (c == idx)
			return i + 2 < n && (unsigned char)s[i] == 0xEF && (unsigned char)s[i + 1] == 0xBF &&
			       (unsigned char)s[i + 2] == 0xBD;
		c++;
	}
	return 0;
}

/* The text of ids: the text tokens only (the specials decode to nothing). */
static sg_status decode_text(const sg_tokenizer *tok, const sg_stt_vocab *v, const int32_t *ids, int n, char **out,
			     size_t *len)
{
	int32_t *t = sg_malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
	if (!t) return SG_FAIL(SG_ERR_NOMEM, "out of memory");
	int k = 0;
	for (int i = 0; i < n; i++)
		if (ids[i] < v->eot) t[k++] = ids[i];
	sg_status st = sg_tokenizer_decode(tok, t, (size_t)k, 1, out, len);
	sg_free(t);
	return st;
}

/* Python's str.strip() of ASCII whitespace: [*b, *e) of s. */
static void strip(const char *s, size_t *b, size_t *e)
{
	*b = 0;
	*e = strlen(s);
	while (*b < *e && strchr(" \t\n\r\v\f", s[*b])) (*b)++;
	while (*e > *b && strchr(" \t\n\r\v\f", s[*e - 1])) (*e)--;
}

/* Python's `a in b` for strings: a (the span [p, p + n)) is a substring of b. */
static int substr_of(const char *p, size_t n, const char *b)
{
	if (!n) return 1;
	for (const char *q = b; *q; q++)
		if (!strncmp(q, p, n) && strlen(q) >= n) return 1;
	return 0;
}

static char *concat(const char *a, const char *b)
{
	size_t na = strlen(a), nb = strlen(b);
	char *s = sg_malloc(na + nb + 1);
	if (!s) return NULL;
	memcpy(s, a, na);
	memcpy(s + na, b, nb + 1);
	return s;
}

sg_status sg_stt_split_words(const sg_tokenizer *tok, const sg_stt_vocab *v, const int32_t *ids, int n, int by_char,
			     sg_stt_wtok **words, int *n_words)
{
	*words = NULL;
	*n_words = 0;
	char *full = NULL;
	size_t flen = 0;
	sg_status st = decode_text(tok, v, ids, n, &full, &flen);
	if (st) return st;
	sg_stt_wtok *w = sg_calloc((size_t)(n ? n : 1), sizeof(*w));
	if (!w) {
		sg_free(full);
		return SG_FAIL(SG_ERR_NOMEM, "out of memory");
	}
	/* pieces: the shortest runs of tokens that decode to whole characters (a U+FFFD counts as
	 * whole only where the full text has one too) */
	int nw = 0, begin = 0, offset = 0;
	for (int t = 0; t < n && !st; t++) {
		char *d = NULL;
		size_t dl = 0;
		if ((st = decode_text(tok, v, ids + begin, t - begin + 1, &d, &dl))) break;
		int r = fffd_at(d, dl);
		if (r < 0 || fffd_is_at(full, flen, r + offset)) {
			w[nw++] = (sg_stt_wtok){d, begin, t - begin + 1};
			offset += cp_len(d, dl);
			begin = t + 1;
		} else sg_free(d);
	}
	sg_free(full);
	if (st) {
		sg_stt_wtok_free(w, nw);
		return st;
	}
	if (!by_char) {
		/* joined into words: a piece starts one when it is special, begins with a space or
		 * is punctuation (stripped, a substring of Python's string.punctuation) */
		static const char punct[] = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
		int k = 0;
		for (int i = 0; i < nw; i++) {
			size_t b, e;
			strip(w[i].text, &b, &e);
			int special = ids[w[i].begin] >= v->eot, space = w[i].text[0] == ' ';
			if (special || space || substr_of(w[i].text + b, e - b, punct) || k == 0) {
				w[k++] = w[i];
				continue;
			}
			char *j = concat(w[k - 1].text, w[i].text);
			if (!j) {
				for (int q = i; q < nw; q++) sg_free(w[q].text);
				sg_stt_wtok_free(w, k);
				return SG_FAIL(SG_ERR_NOMEM, "out of memory");
			}
			sg_free(w[k - 1].text);
			sg_free(w[i].text);
			w[k - 1].text = j;
			w[k - 1].n += w[i].n;
		}
		nw = k;
	}
	*words = w;
	*n_words = nw;
	return SG_OK;
}

/* ---- step 4: the window's words ---- */

typedef struct timing {
	char *word;
	int n_tok;
	double start, end, prob;
} timing;

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* numpy's round(x, 2): x * 100 rounded half to even, over 100 */
static double round2(double x)
{
	return rint(x * 100.0) / 100.0;
}

/* faster-whisper's merge_punctuations: a word that begins with a space and is (stripped) one of
 * the opening marks joins the next word; one of the closing marks joins the word before unless
 * that ends with a space. The emptied entries stay, with no text and no tokens. */
static sg_status merge_punctuations(timing *a, int n)
{
	static const char prepended[] = "\"'\xe2\x80\x9c\xc2\xbf([{-";
	static const char appended[] = "\"'.\xe3\x80\x82,\xef\xbc\x8c!\xef\xbc\x81?\xef\xbc\x9f:\xef\xbc\x9a\xe2\x80\x9d)]}\xe3\x80\x81";
	for (int i = n - 2, j = n - 1; i >= 0; i--) {
		size_t b, e;
		strip(a[i].word, &b, &e);
		if (a[i].word[0] == ' ' && substr_of(a[i].word + b, e - b, prepended)) {
			char *s = concat(a[i].word, a[j].word);
			if (!s) return SG_FAIL(SG_ERR_NOMEM, "out of memory");
			sg_free(a[j].word);
			a[j].word = s;
			a[j].n_tok += a[i].n_tok;
			a[i].word[0] = 0;
			a[i].n_tok = 0;
		} else j = i;
	}
	for (int i = 0, j = 1; j < n; j++) {
		size_t pl = strlen(a[i].word);
		if (!(pl && a[i].word[pl - 1] == ' ') && substr_of(a[j].word, strlen(a[j].word), appended)) {
			char *s = concat(a[i].word, a[j].word);
			if (!s) return SG_FAIL(SG_ERR_NOMEM, "out of memory");
			sg_free(a[i].word);
			a[i].word = s;
			a[i].n_tok += a[j].n_tok;
			a[j].word[0] = 0;
			a[j].n_tok = 0;
		} else i = j;
	}
	return SG_OK;
}

void sg_stt_wseg_clear(sg_stt_wseg *seg, int n_seg)
{
	for (int s = 0; s < n_seg; s++) {
		for (int k = 0; k < seg[s].n_words; k++) sg_free(seg[s].words[k].word);
		sg_free(seg[s].words);
		seg[s].words = NULL;
		seg[s].n_words = 0;
	}
}

sg_status sg_stt_window_words(const sg_tokenizer *tok, const sg_stt_vocab *v, int by_char, const int32_t *text, int n_text,
			      const int32_t *jump, const float *prob, double time_offset, double last_speech,
			      sg_stt_wseg *seg, int n_seg)
{
	for (int s = 0; s < n_seg; s++) {
		seg[s].words = NULL;
		seg[s].n_words = 0;
	}
	if (n_text < 1) return SG_OK;
	/* the text tokens then <|endoftext|>, split into words; the last one (the end token's) has
	 * no timing */
	int32_t *ids = sg_malloc(sizeof(int32_t) * (size_t)(n_text + 1));
	if (!ids) return SG_FAIL(SG_ERR_NOMEM, "out of memory");
	memcpy(ids, text, sizeof(int32_t) * (size_t)n_text);
	ids[n_text] = v->eot;
	sg_stt_wtok *wt = NULL;
	int nw = 0;
	sg_status st = sg_stt_split_words(tok, v, ids, n_text + 1, by_char, &wt, &nw);
	sg_free(ids);
	if (st) return st;
	int na = nw - 1;
	timing *al = na > 0 ? sg_calloc((size_t)na, sizeof(timing)) : NULL;
	double *dur = na > 0 ? sg_malloc(sizeof(double) * (size_t)na) : NULL;
	if (na > 0 && (!al || !dur)) {
		st = SG_FAIL(SG_ERR_NOMEM, "out of memory");
		goto done;
	}
	int wb = 0;
	for (int k = 0; k < na; k++) {
		int b = wb, e = wb + wt[k].n;
		wb = e;
		if (e > n_text) e = n_text;
		double sum = 0.0;
		for (int t = b; t < e; t++) sum += prob[t];
		al[k] = (timing){wt[k].text, wt[k].n, jump[b] / TOKENS_PER_SECOND, jump[e] / TOKENS_PER_SECOND,
				 e > b ? sum / (e - b) : NAN};
		wt[k].text = NULL; /* al owns it */
	}
	/* the median of the non-zero word durations, at most 0.7 s; twice that is a word's most */
	int nd = 0;
	for (int k = 0; k < na; k++)
		if (al[k].end - al[k].start != 0.0) dur[nd++] = al[k].end - al[k].start;
	double median = 0.0;
	if (nd) {
		qsort(dur, (size_t)nd, sizeof(double), cmp_double);
		median = nd % 2 ? dur[nd / 2] : (dur[nd / 2 - 1] + dur[nd / 2]) / 2.0;
	}
	if (median > 0.7) median = 0.7;
	double max_d = median * 2.0;
	/* long words at sentence ends: cut to the most */
	static const char ends[] = ".\xe3\x80\x82!\xef\xbc\x81?\xef\xbc\x9f";
	for (int k = 1; nd && k < na; k++)
		if (al[k].end - al[k].start > max_d) {
			if (substr_of(al[k].word, strlen(al[k].word), ends)) al[k].end = al[k].start + max_d;
			else if (substr_of(al[k - 1].word, strlen(al[k - 1].word), ends)) al[k].start = al[k].end - max_d;
		}
	if (na > 0 && (st = merge_punctuations(al, na))) goto done;
	/* to the segments, each taking as many tokens as it has text tokens */
	int wi = 0;
	for (int s = 0; s < n_seg; s++) {
		sg_stt_wseg *g = &seg[s];
		int want = 0, saved = 0, nwd = 0;
		for (int k = 0; k < g->n_tokens; k++) want += g->tokens[k] < v->eot;
		g->words = sg_calloc((size_t)(na > 0 ? na : 1), sizeof(sg_stt_word));
		if (!g->words) {
			st = SG_FAIL(SG_ERR_NOMEM, "out of memory");
			goto done;
		}
		while (wi < na && saved < want) {
			timing *t = &al[wi];
			if (t->word[0]) {
				char *c = concat(t->word, "");
				if (!c) {
					st = SG_FAIL(SG_ERR_NOMEM, "out of memory");
					goto done;
				}
				g->words[nwd++] = (sg_stt_word){c, round2(time_offset + t->start), round2(time_offset + t->end),
								(float)t->prob};
				g->n_words = nwd;
			}
			saved += t->n_tok;
			wi++;
		}
		if (!nwd) continue;
		sg_stt_word *w0 = &g->words[0], *wl = &g->words[nwd - 1];
		/* the first words after a pause: not longer than the most */
		if (w0->end - last_speech > median * 4 &&
		    (w0->end - w0->start > max_d || (nwd > 1 && g->words[1].end - w0->start > max_d * 2))) {
			if (nwd > 1 && g->words[1].end - g->words[1].start > max_d) {
				double half = g->words[1].end / 2, cut = g->words[1].end - max_d;
				double boundary = half > cut ? half : cut;
				w0->end = g->words[1].start = boundary;
			}
			w0->start = w0->end - max_d > 0 ? w0->end - max_d : 0;
		}
		/* the segment's own start when the first word is too long, else the word's */
		if (g->start < w0->end && g->start - 0.5 > w0->start) {
			double m = w0->end - median < g->start ? w0->end - median : g->start;
			w0->start = m > 0 ? m : 0;
		} else g->start = w0->start;
		/* and its end likewise */
		if (g->end > wl->start && g->end + 0.5 < wl->end) {
			double m = wl->start + median;
			wl->end = m > g->end ? m : g->end;
		} else g->end = wl->end;
		last_speech = g->end;
	}
done:
	for (int k = 0; al && k < na; k++) sg_free(al[k].word);
	sg_free(al);
	sg_free(dur);
	sg_stt_wtok_free(wt, nw);
	if (st) sg_stt_wseg_clear(seg, n_seg);
	return st;
}

double sg_stt_words_end(const sg_stt_wseg *seg, int n_seg)
{
	for (int s = n_seg - 1; s >= 0; s--)
		if (seg[s].n_words) return seg[s].words[seg[s].n_words - 1].end;
	return n_seg ? seg[n_seg - 1].end : -1;
}
