/*
 * SentencePiece Unigram model as HF `tokenizers` runs it (models/unigram): the best-scoring
 * segmentation of a word into vocabulary pieces (Viterbi over character positions, scores summed
 * in double). At each character position every piece that starts there is tried, shortest first;
 * where no one-character piece starts there, the character may also be taken as the unknown
 * token at min(score) - 10. A candidate replaces the best path ending at its end only when it
 * scores strictly more (so ties keep the earliest start). Consecutive unknown pieces are fused
 * into one string; a string that is not a piece becomes its bytes' <0xXX> pieces with byte
 * fallback (when all exist), else the unknown id.
 */
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "text/tokenizer/tokenizer_int.h"

#define UNK_PENALTY 10.0

sg_status sg_unigram_init(sg_tokenizer *t, const tok_spec *s)
{
	sg_model_uni *m = &t->uni;
	int32_t nv = s->n_vocab;
	m->score = sg_calloc((size_t)(nv ? nv : 1), sizeof(double));
	if (!m->score) return SG_FAIL(SG_ERR_NOMEM, "unigram scores");
	double lo = INFINITY;
	for (int32_t i = 0; i < nv; i++) {
		if (!s->vocab[i].s)
			return SG_FAIL(SG_ERR_FORMAT, "tokenizer: Unigram vocab entry %d is missing", i);
		m->score[i] = s->scores[i];
		if (s->scores[i] < lo) lo = s->scores[i];
		if (s->vocab[i].n > m->max_len) m->max_len = s->vocab[i].n;
	}
	m->unk_score = lo - UNK_PENALTY;
	if (s->unk_id >= nv)
		return SG_FAIL(SG_ERR_FORMAT, "tokenizer: Unigram unk_id %d is outside the %d pieces",
		               s->unk_id, nv);
	m->unk_id = s->unk_id;
	m->byte_fallback = s->byte_fallback;
	for (int b = 0; b < 256; b++) {
		char name[8];
		snprintf(name, sizeof(name), "<0x%02X>", b);
		m->byte_id[b] = sg_strmap_get(&t->mmap, name, 6);
	}
	return SG_OK;
}

void sg_unigram_free(sg_model_uni *m)
{
	sg_free(m->score);
	m->score = NULL;
}

static int char_len(unsigned char c)
{
	return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

/* The id(s) of one piece string of the best path, appended. */
static sg_status emit(const sg_tokenizer *t, const char *p, size_t n, sg_tokens *out)
{
	const sg_model_uni *m = &t->uni;
	int32_t id = sg_strmap_get(&t->mmap, p, n);
	if (id >= 0) return sg_tokens_push(out, id) ? SG_FAIL(SG_ERR_NOMEM, "tokens") : SG_OK;
	if (m->byte_fallback) {
		size_t k = 0;
		while (k < n && m->byte_id[(unsigned char)p[k]] >= 0) k++;
		if (k == n) {
			for (k = 0; k < n; k++)
				if (sg_tokens_push(out, m->byte_id[(unsigned char)p[k]]))
					return SG_FAIL(SG_ERR_NOMEM, "tokens");
			return SG_OK;
		}
	}
	if (m->unk_id < 0)
		return SG_FAIL(SG_ERR_INVALID_ARG,
		               "tokenizer: '%.*s' has no piece and the Unigram model has no unk_id",
		               (int)(n > 40 ? 40 : n), p);
	return sg_tokens_push(out, m->unk_id) ? SG_FAIL(SG_ERR_NOMEM, "tokens") : SG_OK;
}

sg_status sg_unigram_word(const sg_tokenizer *t, const char *w, size_t n, sg_tokens *out)
{
	const sg_model_uni *m = &t->uni;
	if (!n) return SG_OK;
	double *best = sg_malloc((n + 1) * sizeof(double));
	int64_t *from =
	    sg_malloc((n + 1) * sizeof(int64_t)); /* start of the best piece ending here, -1 none */
	int32_t *id = sg_malloc((n + 1) * sizeof(int32_t));
	sg_status st = SG_OK;
	if (!best || !from || !id) {
		st = SG_FAIL(SG_ERR_NOMEM, "unigram lattice of %zu bytes", n);
		goto done;
	}
	for (size_t i = 0; i <= n; i++) from[i] = -1, best[i] = 0.0, id[i] = -1;
	for (size_t pos = 0; pos < n;) {
		size_t mb = (size_t)char_len((unsigned char)w[pos]);
		if (mb > n - pos) mb = n - pos;
		double here = best[pos];
		int single = 0;
		for (size_t len = mb; len <= n - pos && len <= m->max_len;) {
			int32_t k = sg_strmap_get(&t->mmap, w + pos, len);
			if (k >= 0) {
				double c = here + m->score[k];
				if (from[pos + len] < 0 || c > best[pos + len])
					best[pos + len] = c, from[pos + len] = (int64_t)pos,
					           id[pos + len] = k;
				if (len == mb) single = 1;
			}
			if (pos + len == n) break;
			len += (size_t)char_len((unsigned char)w[pos + len]);
		}
		if (!single) {
			double c = here + m->unk_score;
			if (from[pos + mb] < 0 || c > best[pos + mb])
				best[pos + mb] = c, from[pos + mb] = (int64_t)pos, id[pos + mb] = m->unk_id;
		}
		pos += mb;
	}
	/* back from the end: piece boundaries into `id` reused as a stack of ends */
	size_t np = 0;
	int64_t *ends = (int64_t *)best; /* best is no longer needed; n + 1 slots hold every end */
	for (int64_t e = (int64_t)n; e > 0; e = from[e]) ends[np++] = e;
	for (size_t i = np; i-- > 0 && !st;) {
		int64_t e = ends[i], b = from[e];
		if (m->unk_id >= 0 && id[e] == m->unk_id) {
			/* fuse a run of unknown pieces */
			while (i > 0 && id[ends[i - 1]] == m->unk_id) e = ends[--i];
		}
		st = emit(t, w + b, (size_t)(e - b), out);
	}
done:
	sg_free(best);
	sg_free(from);
	sg_free(id);
	return st;
}
