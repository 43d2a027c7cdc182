/* Whisper's decoding rules on logits (see stt_rules.h). */
#include "engine/stt_rules.h"

#include <ctype.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "base/alloc.h"
#include "base/error.h"

static int32_t tok_id(const sg_tokenizer *t, const char *s)
{
	return sg_tokenizer_token_id(t, s, strlen(s));
}

/* "<|xx|>" with 2..7 lowercase letters: a language token; its code into code */
static int lang_token(const char *s, size_t n, char code[8])
{
	if (n < 6 || n > 11 || memcmp(s, "<|", 2) || memcmp(s + n - 2, "|>", 2)) return 0;
	size_t k = n - 4;
	for (size_t i = 0; i < k; i++)
		if (!islower((unsigned char)s[2 + i])) return 0;
	memcpy(code, s + 2, k);
	code[k] = 0;
	return 1;
}

sg_status sg_stt_vocab_init(const sg_tokenizer *tok, int32_t n_vocab, sg_stt_vocab *v)
{
	memset(v, 0, sizeof(*v));
	v->n_vocab = n_vocab;
	static const struct {
		const char *s;
		size_t off;
	} need[] = {
		{"<|endoftext|>", offsetof(sg_stt_vocab, eot)},
		{"<|startoftranscript|>", offsetof(sg_stt_vocab, sot)},
		{"<|translate|>", offsetof(sg_stt_vocab, translate)},
		{"<|transcribe|>", offsetof(sg_stt_vocab, transcribe)},
		{"<|startoflm|>", offsetof(sg_stt_vocab, sot_lm)},
		{"<|startofprev|>", offsetof(sg_stt_vocab, sot_prev)},
		{"<|notimestamps|>", offsetof(sg_stt_vocab, no_timestamps)},
	};
	for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++) {
		int32_t id = tok_id(tok, need[i].s);
		if (id < 0 || id >= n_vocab)
			return sg_error(SG_ERR_FORMAT, "whisper: the tokenizer has no %s token below the model's vocabulary (%d): not a Whisper vocabulary",
					need[i].s, n_vocab);
		*(int32_t *)((char *)v + need[i].off) = id;
	}
	v->no_speech = tok_id(tok, "<|nospeech|>");
	if (v->no_speech < 0) v->no_speech = tok_id(tok, "<|nocaptions|>");
	if (v->no_speech < 0 || v->no_speech >= n_vocab)
		return sg_error(SG_ERR_FORMAT, "whisper: the tokenizer has neither <|nospeech|> nor <|nocaptions|>");
	v->timestamp_begin = tok_id(tok, "<|0.00|>");
	if (v->timestamp_begin < 0) v->timestamp_begin = v->no_timestamps + 1;
	if (v->timestamp_begin + 1500 >= n_vocab)
		return sg_error(SG_ERR_FORMAT, "whisper: the model's vocabulary (%d) has no room for the 1501 timestamp tokens after id %d",
				n_vocab, v->timestamp_begin);
	struct sg_tokens sp = {0};
	if (sg_tokenizer_encode(tok, " ", 1, 0, &sp) || sp.n < 1) {
		sg_tokens_free(&sp);
		return sg_error(SG_ERR_FORMAT, "whisper: the tokenizer cannot encode \" \"");
	}
	v->blank = sp.ids[0];
	sg_tokens_free(&sp);
	/* the language tokens sit between <|startoftranscript|> and <|translate|> */
	for (int32_t id = v->sot + 1; id < v->translate && v->n_lang < SG_STT_MAX_LANG; id++) {
		size_t n;
		const char *s = sg_tokenizer_token(tok, id, &n);
		if (!s || !lang_token(s, n, v->lang_code[v->n_lang])) continue;
		v->lang_id[v->n_lang++] = id;
	}
	v->multilingual = v->n_lang > 1 && n_vocab >= 51865;
	return SG_OK;
}

int32_t sg_stt_vocab_lang(const sg_stt_vocab *v, const char *code)
{
	for (int i = 0; code && i < v->n_lang; i++)
		if (!strcasecmp(v->lang_code[i], code)) return v->lang_id[i];
	return -1;
}

const char *sg_stt_vocab_lang_code(const sg_stt_vocab *v, int32_t id)
{
	for (int i = 0; i < v->n_lang; i++)
		if (v->lang_id[i] == id) return v->lang_code[i];
	return NULL;
}

static int cmp_i32(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	return (x > y) - (x < y);
}

sg_status sg_stt_suppress_default(const sg_tokenizer *tok, const sg_stt_vocab *v, int32_t **ids, int *n)
{
	/* the reference's lists: single symbols, then multi-character ones, then music notes (these
	 * are suppressed by their first token even when they take several) */
	static const char *const symbols[] = {
		"\"", "#", "(", ")", "*", "+", "/", ":", ";", "<", "=", ">", "@", "[", "\\", "]", "^", "_", "`", "{",
		"|", "}", "~", "\xe3\x80\x8c", "\xe3\x80\x8d", "\xe3\x80\x8e", "\xe3\x80\x8f", "<<", ">>", "<<<",
		">>>", "--", "---", "-(", "-[", "('", "(\"", "((", "))", "(((", ")))", "[[", "]]", "{{", "}}",
		"\xe2\x99\xaa\xe2\x99\xaa", "\xe2\x99\xaa\xe2\x99\xaa\xe2\x99\xaa"};
	static const char *const notes[] = {"\xe2\x99\xa9", "\xe2\x99\xaa", "\xe2\x99\xab", "\xe2\x99\xac",
					    "\xe2\x99\xad", "\xe2\x99\xae", "\xe2\x99\xaf"};
	size_t n_sym = sizeof(symbols) / sizeof(symbols[0]), n_notes = sizeof(notes) / sizeof(notes[0]);
	size_t cap = 2 * (n_sym + n_notes) + 16;
	int32_t *out = sg_malloc(sizeof(int32_t) * cap);
	if (!out) return SG_FAIL(SG_ERR_NOMEM, "out of memory");
	int k = 0;
	struct sg_tokens t = {0};
	sg_status st = SG_OK;
	char buf[32];
	for (size_t i = 0; i < 2 + n_sym + n_notes && !st; i++) {
		const char *s = i == 0 ? "-" : i == 1 ? "'" : i < 2 + n_sym ? symbols[i - 2] : notes[i - 2 - n_sym];
		int note = i >= 2 + n_sym;
		for (int sp = i < 2 ? 1 : 0; sp < 2 && !st; sp++) {
			snprintf(buf, sizeof(buf), "%s%s", sp ? " " : "", s);
			t.n = 0;
			st = sg_tokenizer_encode(tok, buf, strlen(buf), 0, &t);
			if (st) break;
			/* " -" and " '" count by their first token whatever follows */
			if (t.n >= 1 && (t.n == 1 || note || i < 2)) out[k++] = t.ids[0];
		}
	}
	sg_tokens_free(&t);
	if (st) {
		sg_free(out);
		return st;
	}
	int32_t always[] = {v->transcribe, v->translate, v->sot, v->sot_prev, v->sot_lm, v->no_speech};
	for (size_t i = 0; i < sizeof(always) / sizeof(always[0]); i++) out[k++] = always[i];
	qsort(out, (size_t)k, sizeof(int32_t), cmp_i32);
	int m = 0;
	for (int i = 0; i < k; i++)
		if (!m || out[m - 1] != out[i]) out[m++] = out[i];
	*ids = out;
	*n = m;
	return SG_OK;
}

void sg_stt_log_softmax(const float *logits, int n, float *out)
{
	float mx = -INFINITY;
	for (int i = 0; i < n; i++)
		if (logits[i] > mx) mx = logits[i];
	if (mx == -INFINITY) {
		for (int i = 0; i < n; i++) out[i] = -INFINITY;
		return;
	}
	double s = 0;
	for (int i = 0; i < n; i++) s += exp((double)logits[i] - mx);
	float lse = (float)(mx + log(s));
	for (int i = 0; i < n; i++) out[i] = logits[i] - lse;
}

void sg_stt_rules_apply(const sg_stt_rules *r, const int32_t *sampled, int n_sampled, float *logits)
{
	const sg_stt_vocab *v = r->v;
	int32_t nv = v->n_vocab, tb = v->timestamp_begin;
	if (r->suppress_blank && n_sampled == 0) {
		logits[v->blank] = -INFINITY;
		logits[v->eot] = -INFINITY;
	}
	for (int i = 0; i < r->n_suppress; i++)
		if (r->suppress[i] >= 0 && r->suppress[i] < nv) logits[r->suppress[i]] = -INFINITY;
	if (!r->timestamps) return;
	logits[v->no_timestamps] = -INFINITY;
	int last_ts = n_sampled >= 1 && sampled[n_sampled - 1] >= tb;
	int penult_ts = n_sampled < 2 || sampled[n_sampled - 2] >= tb;
	if (last_ts) {
		if (penult_ts) /* a pair just closed: text (or the end) must follow */
			for (int32_t i = tb; i < nv; i++) logits[i] = -INFINITY;
		else /* a timestamp after text: another one (closing the pair) or the end */
			for (int32_t i = 0; i < v->eot; i++) logits[i] = -INFINITY;
	}
	for (int i = n_sampled - 1; i >= 0; i--) {
		if (sampled[i] < tb) continue;
		/* timestamps never go back; after a closed pair not even to the same time */
		int32_t last = last_ts && !penult_ts ? sampled[i] : sampled[i] + 1;
		for (int32_t j = tb; j < last && j < nv; j++) logits[j] = -INFINITY;
		break;
	}
	if (n_sampled == 0) {
		for (int32_t i = 0; i < tb; i++) logits[i] = -INFINITY;
		if (r->max_initial_timestamp_index >= 0)
			for (int32_t i = tb + r->max_initial_timestamp_index + 1; i < nv; i++) logits[i] = -INFINITY;
	}
	/* the summed probability of the timestamps against the best text token's */
	float mx = -INFINITY;
	for (int32_t i = 0; i < nv; i++)
		if (logits[i] > mx) mx = logits[i];
	if (mx == -INFINITY) return;
	double s_all = 0, s_ts = 0;
	float best_text = -INFINITY;
	for (int32_t i = 0; i < nv; i++) {
		double e = exp((double)logits[i] - mx);
		s_all += e;
		if (i >= tb) s_ts += e;
		else if (logits[i] > best_text) best_text = logits[i];
	}
	if (s_ts <= 0) return;
	double lse = mx + log(s_all);
	double ts_logprob = mx + log(s_ts) - lse, text_logprob = (double)best_text - lse;
	if (ts_logprob > text_logprob)
		for (int32_t i = 0; i < tb; i++) logits[i] = -INFINITY;
}

double sg_stt_compression_ratio(const char *text, size_t len)
{
	if (!len) return 0;
	uLongf cap = compressBound((uLong)len);
	unsigned char *buf = sg_malloc(cap);
	if (!buf) return 0;
	double r = 0;
	if (compress2(buf, &cap, (const Bytef *)text, (uLong)len, 6) == Z_OK && cap) r = (double)len / (double)cap;
	sg_free(buf);
	return r;
}
