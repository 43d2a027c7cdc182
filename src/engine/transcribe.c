/* Long-form transcription with a Whisper model (see transcribe.h and saragossa.h). */
#include "engine/transcribe.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audio/decode.h"
#include "audio/mel.h"
#include "audio/stream.h"
#include "base/alloc.h"
#include "base/error.h"
#include "engine/stt_words.h"
#include "models/whisper.h"

struct sg_stt {
	sg_whisper *w;
	const sg_whisper_info *info;
	sg_tokenizer *tok;
	sg_stt_vocab v;
	int32_t *nonspeech; /* [n_nonspeech] the default suppressed set */
	int n_nonspeech;
	int n_seq;          /* KV sequences the model holds: two banks of max_beam beams */
	int max_beam;
};

sg_stt_params sg_stt_default_params(void)
{
	return (sg_stt_params){0};
}

sg_transcribe_params sg_transcribe_default_params(void)
{
	return (sg_transcribe_params){
		.timestamps = 1,
		.beam_size = 5,
		.patience = 1,
		.best_of = 5,
		.compression_ratio_threshold = 2.4f,
		.logprob_threshold = -1.0f,
		.no_speech_threshold = 0.6f,
		.condition_on_previous_text = 1,
		.prompt_reset_on_temperature = 0.5f,
		.suppress_blank = 1,
		.max_initial_timestamp = 1.0f,
	};
}

const sg_stt_vocab *sg_stt_vocab_of(const sg_stt *stt)
{
	return &stt->v;
}

const sg_whisper_info *sg_stt_info(const sg_stt *stt) { return stt ? stt->info : NULL; }

const sg_tokenizer *sg_stt_tokenizer(const sg_stt *stt)
{
	return stt->tok;
}

int sg_stt_multilingual(const sg_stt *stt)
{
	return stt && stt->v.multilingual;
}

void sg_stt_free(sg_stt *stt)
{
	if (!stt) return;
	sg_whisper_free(stt->w);
	sg_tokenizer_free(stt->tok);
	sg_free(stt->nonspeech);
	sg_free(stt);
}

/* Whisper's language tokens in the order of its vocabulary (openai-whisper's LANGUAGES). */
static const char *const vocab_langs[] = {
	"en", "zh", "de", "es", "ru", "ko", "fr", "ja", "pt", "tr", "pl", "ca", "nl", "ar", "sv", "it", "id",
	"hi", "fi", "vi", "he", "uk", "el", "ms", "cs", "ro", "da", "hu", "ta", "no", "th", "ur", "hr", "bg",
	"lt", "la", "mi", "ml", "cy", "sk", "te", "fa", "lv", "bn", "sr", "az", "sl", "kn", "et", "mk", "br",
	"eu", "is", "hy", "ne", "mn", "bs", "kk", "sq", "sw", "gl", "mr", "pa", "si", "km", "sn", "yo", "so",
	"af", "oc", "ka", "be", "tg", "sd", "gu", "am", "yi", "lo", "uz", "fo", "ht", "ps", "tk", "nn", "mt",
	"sa", "lb", "my", "bo", "tl", "mg", "as", "tt", "haw", "ln", "ha", "ba", "jw", "su", "yue",
};

/* Regular tokens' bytes by id: a ggml file's embedded list or a tiktoken rank file's. */
typedef struct byte_vocab {
	const char **tok; /* [n] */
	uint32_t *len;    /* [n] */
	int n;
	const char *no_speech; /* the name this source gives the no-speech token */
} byte_vocab;

/* A Whisper tokenizer from the regular tokens' bytes: the special tokens after them are named
 * by their places, as openai-whisper (and whisper.cpp) lay them out: <|endoftext|>,
 * <|startoftranscript|>, n_vocab - 51765 - multilingual language tokens, the task and marker
 * tokens, then the 1501 timestamps. Merges follow tiktoken's rule (a token's rank is its id). */
static sg_status bytes_tokenizer(const byte_vocab *bv, int32_t n_vocab, const char *what, sg_tokenizer **out)
{
	int n_words = bv->n, multi = n_vocab >= 51865;
	int n_lang = n_vocab - 51765 - multi, eot = multi ? 50257 : 50256;
	if (n_lang < 1 || n_lang > (int)(sizeof(vocab_langs) / sizeof(vocab_langs[0])) || n_words > eot + 1 || n_words < 256)
		return sg_error(SG_ERR_FORMAT,
				"whisper: %s of %d tokens for a model of %d is not a Whisper layout (%d languages)", what,
				n_words, n_vocab, n_lang);
	const char **tok = sg_calloc((size_t)n_vocab, sizeof(char *));
	uint32_t *len = sg_calloc((size_t)n_vocab, sizeof(uint32_t));
	int32_t *types = sg_calloc((size_t)n_vocab, sizeof(int32_t));
	float *score = sg_calloc((size_t)n_vocab, sizeof(float));
	char *names = sg_calloc((size_t)(n_vocab - eot), 24); /* the special tokens' names */
	sg_status st = SG_OK;
	if (!tok || !len || !types || !score || !names) {
		st = sg_error(SG_ERR_NOMEM, "whisper: a vocabulary of %d tokens", n_vocab);
		goto done;
	}
	const char *const marks[] = {"<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", bv->no_speech,
				     "<|notimestamps|>"};
	for (int32_t i = 0; i < n_vocab; i++) {
		score[i] = -(float)i;
		types[i] = 1;
		if (i < n_words && i < eot) { /* (a file may list <|endoftext|> too: named below) */
			tok[i] = bv->tok[i];
			len[i] = bv->len[i];
			continue;
		}
		/* ids between the file's list and <|endoftext|> (none in whisper.cpp's files) stay unused */
		if (i < eot) {
			tok[i] = "";
			continue;
		}
		char *nm = names + (size_t)(i - eot) * 24;
		int k = i - eot - 2; /* the language index, then the marks */
		if (i == eot) snprintf(nm, 24, "<|endoftext|>");
		else if (i == eot + 1) snprintf(nm, 24, "<|startoftranscript|>");
		else if (k < n_lang) snprintf(nm, 24, "<|%s|>", vocab_langs[k]);
		else if (k - n_lang < 6) snprintf(nm, 24, "%s", marks[k - n_lang]);
		else snprintf(nm, 24, "<|%.2f|>", 0.02 * (k - n_lang - 6));
		tok[i] = nm;
		len[i] = (uint32_t)strlen(nm);
		types[i] = 3;
	}
	sg_vocab_desc d;
	memset(&d, 0, sizeof(d));
	d.model = "gpt2";
	d.n_tokens = n_vocab;
	d.tokens = tok;
	d.token_lens = len;
	d.types = types;
	d.scores = score;
	d.bos_id = d.eos_id = d.unk_id = d.pad_id = -1;
	d.add_bos = d.add_eos = 0;
	d.derive_merges = 1;
	d.raw_bytes = 1;
	st = sg_tokenizer_from_vocab(&d, out);
	if (st) sg_error_wrap(st, "whisper: %s", what);
done:
	sg_free(tok);
	sg_free(len);
	sg_free(types);
	sg_free(score);
	sg_free(names);
	return st;
}

/* The tokenizer of a file that embeds its vocabulary (whisper.cpp's ggml, which names the
 * no-speech token <|nocaptions|>). */
static sg_status embedded_tokenizer(const sg_whisper *w, int32_t n_vocab, sg_tokenizer **out)
{
	int n = sg_whisper_vocab_count(w);
	byte_vocab bv = {sg_calloc((size_t)n, sizeof(char *)), sg_calloc((size_t)n, sizeof(uint32_t)), n, "<|nocaptions|>"};
	sg_status st = bv.tok && bv.len ? SG_OK : sg_error(SG_ERR_NOMEM, "whisper: a vocabulary of %d tokens", n);
	for (int i = 0; i < n && !st; i++) {
		size_t l = 0;
		bv.tok[i] = sg_whisper_vocab_bytes(w, i, &l);
		bv.len[i] = (uint32_t)l;
	}
	if (!st) st = bytes_tokenizer(&bv, n_vocab, "an embedded vocabulary", out);
	sg_free(bv.tok);
	sg_free(bv.len);
	return st;
}

static int b64_value(int c)
{
	if (c >= 'A' && c <= 'Z') return c - 'A';
	if (c >= 'a' && c <= 'z') return c - 'a' + 26;
	if (c >= '0' && c <= '9') return c - '0' + 52;
	return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* RFC 4648 base64 of s[0..n) into out (room for 3 n / 4 bytes); the byte count, or -1. */
static long b64_decode(const char *s, size_t n, uint8_t *out)
{
	while (n && s[n - 1] == '=') n--;
	uint32_t acc = 0;
	long o = 0;
	int bits = 0;
	for (size_t i = 0; i < n; i++) {
		int v = b64_value((unsigned char)s[i]);
		if (v < 0) return -1;
		acc = acc << 6 | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[o++] = (uint8_t)(acc >> bits);
		}
	}
	return bits >= 6 ? -1 : o;
}

/* A tiktoken rank file (openai-whisper's gpt2.tiktoken / multilingual.tiktoken: one
 * "<base64 bytes> <rank>" line per regular token) as a Whisper tokenizer; openai-whisper names
 * the no-speech token <|nospeech|>. The ranks must be 0..n-1, each once. */
static sg_status tiktoken_tokenizer(const char *path, int32_t n_vocab, sg_tokenizer **out)
{
	FILE *f = fopen(path, "rb");
	if (!f) return sg_error(SG_ERR_NOT_FOUND, "whisper vocabulary %s: %s", path, strerror(errno));
	char *text = NULL;
	long size = fseek(f, 0, SEEK_END) ? -1 : ftell(f);
	sg_status st = SG_OK;
	if (size < 0 || size > (64L << 20)) st = sg_error(SG_ERR_FORMAT, "whisper vocabulary %s: %ld bytes (at most 64 MiB)", path, size);
	if (!st && !(text = sg_malloc((size_t)size + 1))) st = sg_error(SG_ERR_NOMEM, "whisper vocabulary %s: %ld bytes", path, size);
	if (!st && (fseek(f, 0, SEEK_SET) || fread(text, 1, (size_t)size, f) != (size_t)size))
		st = sg_error(SG_ERR_IO, "whisper vocabulary %s: cannot read it", path);
	fclose(f);
	int cap = n_vocab > 0 ? n_vocab : 1, lines = 0;
	byte_vocab bv = {sg_calloc((size_t)cap, sizeof(char *)), sg_calloc((size_t)cap, sizeof(uint32_t)), 0, "<|nospeech|>"};
	uint8_t *bytes = st ? NULL : sg_malloc((size_t)size + 1); /* every token's bytes, back to back */
	if (!st && (!bv.tok || !bv.len || !bytes)) st = sg_error(SG_ERR_NOMEM, "whisper vocabulary %s", path);
	size_t used = 0;
	for (char *p = text, *end = text + (st ? 0 : size); !st && p < end; lines++) {
		char *nl = memchr(p, '\n', (size_t)(end - p)), *le = nl ? nl : end;
		if (le > p && le[-1] == '\r') le--;
		if (le == p) { /* a blank line (the last one) */
			p = nl ? nl + 1 : end;
			lines--;
			continue;
		}
		char *sp = memchr(p, ' ', (size_t)(le - p)), *re = NULL;
		long rank = sp ? strtol(sp + 1, &re, 10) : -1;
		long nb = sp ? b64_decode(p, (size_t)(sp - p), bytes + used) : -1;
		if (!sp || re != le || nb < 1 || rank < 0) {
			st = sg_error(SG_ERR_FORMAT, "whisper vocabulary %s: line %d is not '<base64> <rank>' (not a tiktoken file)", path,
				      lines + 1);
			break;
		}
		if (rank >= cap || bv.tok[rank]) {
			st = sg_error(SG_ERR_FORMAT, "whisper vocabulary %s: line %d: rank %ld is %s (a model of %d tokens)", path, lines + 1,
				      rank, rank >= cap ? "past the model's vocabulary" : "given twice", n_vocab);
			break;
		}
		bv.tok[rank] = (const char *)bytes + used;
		bv.len[rank] = (uint32_t)nb;
		used += (size_t)nb;
		p = nl ? nl + 1 : end;
	}
	bv.n = lines;
	for (int i = 0; i < bv.n && !st; i++)
		if (!bv.tok[i]) st = sg_error(SG_ERR_FORMAT, "whisper vocabulary %s: %d lines but no rank %d", path, bv.n, i);
	if (!st) st = bytes_tokenizer(&bv, n_vocab, path, out);
	sg_free(text);
	sg_free(bytes);
	sg_free(bv.tok);
	sg_free(bv.len);
	return st;
}

static int ends_with(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && !strcmp(s + a - b, suf);
}

sg_status sg_stt_load(const char *path, const sg_stt_params *params, sg_stt **out)
{
	if (!out) return SG_FAIL(SG_ERR_INVALID_ARG, "out is NULL");
	*out = NULL;
	if (!path) return SG_FAIL(SG_ERR_INVALID_ARG, "path is NULL");
	sg_stt_params p = params ? *params : sg_stt_default_params();
	sg_stt *s = sg_calloc(1, sizeof(*s));
	if (!s) return SG_FAIL(SG_ERR_NOMEM, "out of memory");
	/* two banks of beams: a step's new beams are copied from one bank into the other */
	if (p.max_beam < 0 || p.max_beam > SG_STT_MAX_BEAM) {
		sg_free(s);
		return sg_error(SG_ERR_INVALID_ARG, "sg_stt_load: max_beam %d is out of 1..%d", p.max_beam, SG_STT_MAX_BEAM);
	}
	s->max_beam = p.max_beam ? p.max_beam : 5;
	s->n_seq = 2 * s->max_beam;
	sg_whisper_params wp = sg_whisper_default_params();
	wp.backend = p.backend;
	wp.n_threads = p.n_threads;
	wp.n_seq = s->n_seq;
	sg_status st = sg_whisper_load(path, &wp, &s->w);
	if (st) goto fail;
	s->info = sg_whisper_get_info(s->w);
	/* the vocabulary: the model's own files, else the one the caller names */
	const char *tp = sg_whisper_tokenizer_path(s->w);
	int embedded = !tp && sg_whisper_vocab_count(s->w);
	if (!tp && !embedded) tp = p.vocab;
	if (!tp && !embedded) {
		st = sg_error(SG_ERR_NOT_FOUND,
			      "whisper: %s carries no vocabulary (no tokenizer.json, gpt2.tiktoken or multilingual.tiktoken beside "
			      "it, as MLX folders do not): name one with --vocab FILE (serve: --stt-vocab), a .tiktoken file "
			      "such as openai-whisper's %s or a tokenizer.json",
			      path, s->info->n_vocab >= 51865 ? "multilingual.tiktoken" : "gpt2.tiktoken");
		goto fail;
	}
	if (embedded) st = embedded_tokenizer(s->w, s->info->n_vocab, &s->tok);
	else if (ends_with(tp, ".tiktoken")) st = tiktoken_tokenizer(tp, s->info->n_vocab, &s->tok);
	else if ((st = sg_tokenizer_load(tp, &s->tok))) sg_error_wrap(st, "whisper tokenizer %s", tp);
	if (st) goto fail;
	if ((st = sg_stt_vocab_init(s->tok, s->info->n_vocab, &s->v))) goto fail;
	if ((st = sg_stt_suppress_default(s->tok, &s->v, &s->nonspeech, &s->n_nonspeech))) goto fail;
	*out = s;
	return SG_OK;
fail:
	sg_stt_free(s);
	return st;
}

/* ---- one window ---- */

/* splitmix64: the sampler's generator at temperature > 0 */
static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

typedef struct seqbuf {
	int32_t *ids; /* [cap] sampled ids */
	int n;
	double logprob; /* sum of the sampled tokens' log-probabilities */
	int done;
} seqbuf;

/* What a window's decode gives back. */
typedef struct win_result {
	int32_t *tokens; /* [n] sampled ids, end token excluded */
	int n;
	double sum_logprob;
	float avg_logprob, compression_ratio, no_speech_prob, temperature;
} win_result;

typedef struct run {
	sg_stt *s;
	const sg_transcribe_params *p;
	sg_stt_rules rules;
	int32_t *suppress; /* owned when the caller gave a list with -1 in it */
	float *logits;     /* [SG_STT_MAX_BEAM][n_vocab] */
	float *lp;         /* [n_vocab] log-probabilities */
	int max_new;       /* tokens one window may sample */
	uint64_t rng;
} run;

static sg_status run_prompt(run *r, int seq, const int32_t *prompt, int n_prompt, int sot_index, float *no_speech)
{
	sg_stt *s = r->s;
	int nv = s->v.n_vocab;
	/* the logits after <|startoftranscript|> give the no-speech probability; the prompt's
	 * last ones the first sampled token */
	sg_status st = sg_whisper_decode(s->w, seq, prompt, sot_index + 1, 0, 0, r->logits);
	if (st) return st;
	if (no_speech) {
		sg_stt_log_softmax(r->logits, nv, r->lp);
		*no_speech = expf(r->lp[s->v.no_speech]);
	}
	if (n_prompt > sot_index + 1)
		st = sg_whisper_decode(s->w, seq, prompt + sot_index + 1, n_prompt - sot_index - 1, sot_index + 1, 0,
				       r->logits);
	return st;
}

static int argmax(const float *x, int n)
{
	int b = 0;
	for (int i = 1; i < n; i++)
		if (x[i] > x[b]) b = i;
	return b;
}

/* One sequence sampled from the prompt: greedy at temperature 0, else sampled from
 * softmax(logits / t). */
static sg_status decode_sample(run *r, const int32_t *prompt, int n_prompt, int sot_index, float t, seqbuf *out,
			       float *no_speech)
{
	sg_stt *s = r->s;
	int nv = s->v.n_vocab;
	sg_status st = run_prompt(r, 0, prompt, n_prompt, sot_index, no_speech);
	if (st) return st;
	out->n = 0;
	out->logprob = 0;
	int pos = n_prompt;
	for (;;) {
		sg_stt_rules_apply(&r->rules, out->ids, out->n, r->logits);
		sg_stt_log_softmax(r->logits, nv, r->lp);
		int tok;
		if (t <= 0) tok = argmax(r->logits, nv);
		else {
			/* inverse CDF over exp(lp / t) */
			double sum = 0;
			for (int i = 0; i < nv; i++) sum += r->lp[i] == -INFINITY ? 0 : exp((double)r->lp[i] / t);
			double u = (double)(rng_next(&r->rng) >> 11) * 0x1.0p-53 * sum, acc = 0;
			tok = argmax(r->logits, nv);
			for (int i = 0; i < nv; i++) {
				if (r->lp[i] == -INFINITY) continue;
				acc += exp((double)r->lp[i] / t);
				if (acc > u) {
					tok = i;
					break;
				}
			}
		}
		/* the end token's log-probability counts too, as CTranslate2 scores it */
		out->logprob += r->lp[tok];
		if (tok == s->v.eot) break;
		out->ids[out->n++] = tok;
		if (out->n >= r->max_new) break;
		int32_t id = tok;
		if ((st = sg_whisper_decode(s->w, 0, &id, 1, pos++, 0, r->logits))) return st;
	}
	return SG_OK;
}

/* A candidate continuation during beam search. */
typedef struct cand {
	double score;
	int src;  /* the beam it extends */
	int32_t tok;
} cand;

static int cand_cmp(const void *a, const void *b)
{
	double x = ((const cand *)a)->score, y = ((const cand *)b)->score;
	if (x != y) return x < y ? 1 : -1;
	/* equal scores keep the order they were made in (a stable sort, as the reference's) */
	int sa = ((const cand *)a)->src, sb = ((const cand *)b)->src;
	if (sa != sb) return sa - sb;
	return ((const cand *)a)->tok - ((const cand *)b)->tok;
}

/* CTranslate2's beam search (which faster-whisper runs): the 2 * beam_size best continuations
 * over all live beams; each of the first beam_size that ends is registered as finished (its
 * place taken by the next of the others that does not end), the rest go on; the search stops
 * once beam_size * patience are finished (all those of the step that reached it count), or at
 * the last step, where the first beam_size all count as finished; the winner is the best sum of
 * log-probabilities over its length. */
static sg_status decode_beam(run *r, const int32_t *prompt, int n_prompt, int sot_index, seqbuf *best,
			     float *no_speech)
{
	sg_stt *s = r->s;
	int nv = s->v.n_vocab, B = r->p->beam_size, C = 2 * B;
	int max_fin = (int)lround(B * (double)r->p->patience);
	if (max_fin < 1) max_fin = 1;
	sg_status st = run_prompt(r, 0, prompt, n_prompt, sot_index, no_speech);
	if (st) return st;
	size_t cap = (size_t)r->max_new + 1;
	int fin_cap = max_fin + B; /* a step adds at most B to fewer than max_fin */
	int n_bufs = 2 * B + fin_cap;
	int32_t *mem = sg_malloc(sizeof(int32_t) * cap * (size_t)n_bufs);
	cand *cands = sg_malloc(sizeof(cand) * (size_t)B * (size_t)C);
	seqbuf *bank = sg_calloc((size_t)n_bufs, sizeof(seqbuf));
	if (!mem || !cands || !bank) {
		st = SG_FAIL(SG_ERR_NOMEM, "out of memory for %d beams", B);
		goto done;
	}
	for (int i = 0; i < n_bufs; i++) bank[i].ids = mem + cap * (size_t)i;
	seqbuf *cur = bank, *nxt = bank + B, *fin = bank + 2 * B;
	int n_cur = 1, n_fin = 0, cur_base = 0; /* live beams use KV seqs cur_base .. cur_base + n_cur */
	cur[0].n = 0;
	cur[0].logprob = 0;
	int pos = n_prompt, step = 0;
	/* the prompt's logits are in r->logits[0]; later steps fill one row per live beam */
	for (;; step++) {
		int nc = 0;
		for (int b = 0; b < n_cur; b++) {
			float *lg = r->logits + (size_t)b * nv;
			sg_stt_rules_apply(&r->rules, cur[b].ids, cur[b].n, lg);
			sg_stt_log_softmax(lg, nv, r->lp);
			/* this beam's C best tokens: enough for the C best over all beams */
			for (int k = 0; k < C; k++) {
				int bi = -1;
				for (int i = 0; i < nv; i++) {
					if (r->lp[i] == -INFINITY) continue;
					if (bi < 0 || r->lp[i] > r->lp[bi]) bi = i;
				}
				if (bi < 0) break;
				cands[nc++] = (cand){cur[b].logprob + r->lp[bi], b, bi};
				r->lp[bi] = -INFINITY;
			}
		}
		qsort(cands, (size_t)nc, sizeof(cand), cand_cmp);
		if (nc > C) nc = C;
		int last = step + 1 >= r->max_new, n_next = 0, sec = B;
		for (int k = 0; k < B && k < nc; k++) {
			const cand *x = &cands[k];
			const seqbuf *from = &cur[x->src];
			int ends = x->tok == s->v.eot;
			if ((ends || last) && n_fin < fin_cap) {
				seqbuf *f = &fin[n_fin++];
				memcpy(f->ids, from->ids, sizeof(int32_t) * (size_t)from->n);
				f->n = from->n;
				if (!ends) f->ids[f->n++] = x->tok;
				f->logprob = x->score;
			}
			if (last) continue;
			if (ends) {
				/* the next candidate past the first B that does not end takes its place */
				while (sec < nc && cands[sec].tok == s->v.eot) sec++;
				if (sec >= nc) continue;
				x = &cands[sec++];
				from = &cur[x->src];
			}
			seqbuf *to = &nxt[n_next++];
			memcpy(to->ids, from->ids, sizeof(int32_t) * (size_t)from->n);
			to->n = from->n;
			to->ids[to->n++] = x->tok;
			to->logprob = x->score;
			to->done = x->src; /* the source beam, for the KV copy */
		}
		if (last || n_fin >= max_fin || !n_next) break;
		/* the new beams' caches: copied from their sources into the other bank */
		int nxt_base = cur_base ? 0 : s->max_beam;
		for (int i = 0; i < n_next; i++)
			if ((st = sg_whisper_seq_copy(s->w, cur_base + nxt[i].done, nxt_base + i, pos))) goto done;
		for (int i = 0; i < n_next; i++) {
			int32_t id = nxt[i].ids[nxt[i].n - 1];
			if ((st = sg_whisper_decode(s->w, nxt_base + i, &id, 1, pos, 0, r->logits + (size_t)i * nv)))
				goto done;
		}
		pos++;
		seqbuf *t = cur;
		cur = nxt;
		nxt = t;
		n_cur = n_next;
		cur_base = nxt_base;
	}
	/* the best by sum of log-probabilities over length (length_penalty 1, as faster-whisper);
	 * the first registered wins a tie */
	int bi = -1;
	double bs = 0;
	for (int i = 0; i < n_fin; i++) {
		double sc = fin[i].logprob / (fin[i].n ? fin[i].n : 1);
		if (bi < 0 || sc > bs) {
			bi = i;
			bs = sc;
		}
	}
	best->n = 0;
	best->logprob = 0;
	if (bi >= 0) {
		memcpy(best->ids, fin[bi].ids, sizeof(int32_t) * (size_t)fin[bi].n);
		best->n = fin[bi].n;
		best->logprob = fin[bi].logprob;
	}
done:
	sg_free(mem);
	sg_free(cands);
	sg_free(bank);
	return st;
}

static sg_status text_of(const sg_stt *s, const int32_t *ids, int n, char **out, size_t *len)
{
	/* the text tokens only (timestamps and specials sit at or above <|endoftext|>) */
	int32_t *t = sg_malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
	if (!t) return SG_FAIL(SG_ERR_NOMEM, "out of memory");
	int k = 0;
	for (int i = 0; i < n; i++)
		if (ids[i] < s->v.eot) t[k++] = ids[i];
	sg_status st = sg_tokenizer_decode(s->tok, t, (size_t)k, 1, out, len);
	sg_free(t);
	return st;
}

static void strip_span(const char *s, size_t n, size_t *b, size_t *e)
{
	*b = 0;
	*e = n;
	while (*b < *e && (s[*b] == ' ' || s[*b] == '\t' || s[*b] == '\n' || s[*b] == '\r')) (*b)++;
	while (*e > *b && (s[*e - 1] == ' ' || s[*e - 1] == '\t' || s[*e - 1] == '\n' || s[*e - 1] == '\r')) (*e)--;
}

/* faster-whisper's generate_with_fallback: temperatures in order until the result is neither
 * too repetitive nor too improbable (or it looks like silence). */
static sg_status decode_window(run *r, const int32_t *prompt, int n_prompt, int sot_index, win_result *res)
{
	const sg_transcribe_params *p = r->p;
	static const float def_t[] = {0.0f, 0.2f, 0.4f, 0.6f, 0.8f, 1.0f};
	const float *temps = p->temperatures ? p->temperatures : def_t;
	int n_t = p->temperatures ? p->n_temperatures : 6;
	size_t cap = (size_t)r->max_new + 1;
	int32_t *buf = sg_malloc(sizeof(int32_t) * cap * 3);
	if (!buf) return SG_FAIL(SG_ERR_NOMEM, "out of memory");
	seqbuf best = {.ids = buf + cap}, sample = {.ids = buf + 2 * cap};
	/* the kept result and the best below the compression threshold, if any */
	win_result keep = {0}, keep_cr = {0};
	int have_keep = 0, have_cr = 0;
	int32_t *keep_ids = sg_malloc(sizeof(int32_t) * cap * 2);
	if (!keep_ids) {
		sg_free(buf);
		return SG_FAIL(SG_ERR_NOMEM, "out of memory");
	}
	sg_status st = SG_OK;
	float t = 0;
	int accepted = 0;
	for (int ti = 0; ti < n_t && !accepted; ti++) {
		t = temps[ti];
		float nsp = 0;
		if (t <= 0 && p->beam_size > 1) st = decode_beam(r, prompt, n_prompt, sot_index, &best, &nsp);
		else if (t <= 0) st = decode_sample(r, prompt, n_prompt, sot_index, 0, &best, &nsp);
		else {
			/* best_of samples, the best by log-probability over length */
			double bs = 0;
			int have = 0;
			for (int k = 0; k < (p->best_of > 0 ? p->best_of : 1) && !st; k++) {
				st = decode_sample(r, prompt, n_prompt, sot_index, t, &sample, &nsp);
				double sc = sample.logprob / (sample.n ? sample.n : 1);
				if (!st && (!have || sc > bs)) {
					have = 1;
					bs = sc;
					memcpy(best.ids, sample.ids, sizeof(int32_t) * (size_t)sample.n);
					best.n = sample.n;
					best.logprob = sample.logprob;
				}
			}
		}
		if (st) break;
		char *text = NULL;
		size_t len = 0;
		if ((st = text_of(r->s, best.ids, best.n, &text, &len))) break;
		size_t b, e;
		strip_span(text, len, &b, &e);
		win_result wr = {
			.n = best.n,
			.sum_logprob = best.logprob,
			.avg_logprob = (float)(best.logprob / (best.n + 1)),
			.compression_ratio = (float)sg_stt_compression_ratio(text + b, e - b),
			.no_speech_prob = nsp,
			.temperature = t,
		};
		sg_free(text);
		int fallback = 0, below_cr = 1;
		if (p->compression_ratio_threshold > 0 && wr.compression_ratio > p->compression_ratio_threshold) {
			fallback = 1;
			below_cr = 0;
		}
		if (p->logprob_threshold < 0 && wr.avg_logprob < p->logprob_threshold) fallback = 1;
		if (p->no_speech_threshold > 0 && wr.no_speech_prob > p->no_speech_threshold && p->logprob_threshold < 0 &&
		    wr.avg_logprob < p->logprob_threshold)
			fallback = 0; /* silence: no hotter decode will help */
		/* remember the best of all and the best below the compression threshold */
		if (!have_keep || wr.avg_logprob > keep.avg_logprob) {
			keep = wr;
			keep.tokens = keep_ids;
			memcpy(keep_ids, best.ids, sizeof(int32_t) * (size_t)best.n);
			have_keep = 1;
		}
		if (below_cr && (!have_cr || wr.avg_logprob > keep_cr.avg_logprob)) {
			keep_cr = wr;
			keep_cr.tokens = keep_ids + cap;
			memcpy(keep_ids + cap, best.ids, sizeof(int32_t) * (size_t)best.n);
			have_cr = 1;
		}
		if (!fallback) {
			accepted = 1;
			*res = wr;
			res->tokens = keep_ids;
			memcpy(keep_ids, best.ids, sizeof(int32_t) * (size_t)best.n);
		}
	}
	if (!st && !accepted) {
		/* every temperature failed: the best below the compression threshold, else the best;
		 * it reports the last temperature tried (the prompt reset reads it) */
		*res = have_cr ? keep_cr : keep;
		res->temperature = t;
	}
	sg_free(buf);
	if (st) {
		sg_free(keep_ids);
		res->tokens = NULL;
		return st;
	}
	/* res->tokens points into keep_ids: hand the buffer over */
	if (res->tokens != keep_ids) memmove(keep_ids, res->tokens, sizeof(int32_t) * (size_t)res->n);
	res->tokens = keep_ids;
	return SG_OK;
}

void sg_stt_split_segments(const sg_stt_vocab *v, const int32_t *tokens, int n, double time_offset, int segment_size,
			   int *seek, sg_stt_slice *seg, int *n_seg)
{
	int32_t tb = v->timestamp_begin;
	int single_end = n >= 2 && tokens[n - 2] < tb && tokens[n - 1] >= tb;
	int k = 0, last = 0, any_pair = 0;
	for (int i = 1; i <= n; i++) {
		int cut = i < n ? tokens[i] >= tb && tokens[i - 1] >= tb : 0;
		if (i < n && cut) any_pair = 1;
		if (!cut && !(i == n && single_end && any_pair)) continue;
		seg[k++] = (sg_stt_slice){
			.begin = last,
			.end = i,
			.start = time_offset + (tokens[last] - tb) * SG_STT_TIME_PRECISION,
			.end_s = time_offset + (tokens[i - 1] - tb) * SG_STT_TIME_PRECISION,
		};
		last = i;
	}
	if (any_pair) {
		if (single_end) *seek += segment_size;
		else *seek += (tokens[last - 1] - tb) * SG_STT_INPUT_STRIDE;
		*n_seg = k;
		return;
	}
	double duration = segment_size * 0.01;
	int32_t last_ts = -1;
	for (int i = 0; i < n; i++)
		if (tokens[i] >= tb) last_ts = tokens[i];
	if (last_ts >= 0 && last_ts != tb) duration = (last_ts - tb) * SG_STT_TIME_PRECISION;
	seg[0] = (sg_stt_slice){.begin = 0, .end = n, .start = time_offset, .end_s = time_offset + duration};
	*n_seg = 1;
	*seek += segment_size;
}

/* ---- the long-form loop ---- */

static sg_status check_params(const sg_stt *s, const sg_transcribe_params *p)
{
	if (p->beam_size < 1 || p->beam_size > s->max_beam)
		return sg_error(SG_ERR_INVALID_ARG, "transcribe: beam size %d is out of 1..%d (the model was loaded for beams of at most %d: sg_stt_params.max_beam)",
				p->beam_size, s->max_beam, s->max_beam);
	if (p->best_of < 0 || p->best_of > 32)
		return sg_error(SG_ERR_INVALID_ARG, "transcribe: best_of %d is out of 0..32", p->best_of);
	if (!(p->patience > 0 && p->patience <= 8))
		return sg_error(SG_ERR_INVALID_ARG, "transcribe: patience %g is out of (0, 8]", (double)p->patience);
	if (p->temperatures && (p->n_temperatures < 1 || p->n_temperatures > 32))
		return sg_error(SG_ERR_INVALID_ARG, "transcribe: %d temperatures (1..32 are allowed)", p->n_temperatures);
	for (int i = 0; p->temperatures && i < p->n_temperatures; i++)
		if (!(p->temperatures[i] >= 0 && p->temperatures[i] <= 2))
			return sg_error(SG_ERR_INVALID_ARG, "transcribe: temperature %g is out of [0, 2]", (double)p->temperatures[i]);
	if (!(p->max_initial_timestamp >= 0 && p->max_initial_timestamp <= 30))
		return sg_error(SG_ERR_INVALID_ARG, "transcribe: max_initial_timestamp %g is out of [0, 30]", (double)p->max_initial_timestamp);
	if (p->n_suppress_tokens < 0 || (p->n_suppress_tokens && !p->suppress_tokens))
		return sg_error(SG_ERR_INVALID_ARG, "transcribe: suppress_tokens is NULL with %d tokens", p->n_suppress_tokens);
	for (int i = 0; p->suppress_tokens && i < p->n_suppress_tokens; i++)
		if (p->suppress_tokens[i] < -1 || p->suppress_tokens[i] >= s->v.n_vocab)
			return sg_error(SG_ERR_INVALID_ARG, "transcribe: suppressed token %d is outside the vocabulary (%d)",
					p->suppress_tokens[i], s->v.n_vocab);
	if (p->language && *p->language && !s->v.multilingual && strcasecmp(p->language, "en"))
		return sg_error(SG_ERR_INVALID_ARG, "transcribe: language '%.32s': this model is English-only", p->language);
	if (p->language && *p->language && s->v.multilingual && sg_stt_vocab_lang(&s->v, p->language) < 0)
		return sg_error(SG_ERR_INVALID_ARG, "transcribe: unknown language '%.32s' (a code such as en, de, fr)", p->language);
	if (p->translate && !s->v.multilingual)
		return sg_error(SG_ERR_INVALID_ARG, "transcribe: this model is English-only and cannot translate");
	return SG_OK;
}

/* The suppressed set: the caller's list, where -1 stands for the model's non-speech set. */
static sg_status make_suppress(run *r)
{
	const sg_transcribe_params *p = r->p;
	if (!p->suppress_tokens) {
		r->rules.suppress = r->s->nonspeech;
		r->rules.n_suppress = r->s->n_nonspeech;
		return SG_OK;
	}
	int has_default = 0;
	for (int i = 0; i < p->n_suppress_tokens; i++) has_default |= p->suppress_tokens[i] == -1;
	size_t n = (size_t)p->n_suppress_tokens + (has_default ? (size_t)r->s->n_nonspeech : 0);
	r->suppress = sg_malloc(sizeof(int32_t) * (n ? n : 1));
	if (!r->suppress) return SG_FAIL(SG_ERR_NOMEM, "out of memory");
	int k = 0;
	for (int i = 0; i < p->n_suppress_tokens; i++)
		if (p->suppress_tokens[i] >= 0) r->suppress[k++] = p->suppress_tokens[i];
	for (int i = 0; has_default && i < r->s->n_nonspeech; i++) r->suppress[k++] = r->s->nonspeech[i];
	r->rules.suppress = r->suppress;
	r->rules.n_suppress = k;
	return SG_OK;
}

/* The language of the window just encoded: the most probable language token after
 * <|startoftranscript|>. */
static sg_status detect_language(run *r, int32_t *lang, float *prob)
{
	sg_stt *s = r->s;
	int nv = s->v.n_vocab;
	int32_t sot = s->v.sot;
	sg_status st = sg_whisper_decode(s->w, 0, &sot, 1, 0, 0, r->logits);
	if (st) return st;
	float *lg = r->logits;
	for (int i = 0; i < nv; i++) r->lp[i] = -INFINITY;
	for (int i = 0; i < s->v.n_lang; i++) r->lp[s->v.lang_id[i]] = lg[s->v.lang_id[i]];
	sg_stt_log_softmax(r->lp, nv, r->lp);
	int b = argmax(r->lp, nv);
	*lang = b;
	*prob = expf(r->lp[b]);
	return SG_OK;
}

typedef struct idvec {
	int32_t *v;
	int n, cap;
} idvec;

static int idvec_push(idvec *x, const int32_t *ids, int n)
{
	if (x->n + n > x->cap) {
		int cap = x->cap ? x->cap : 256;
		while (cap < x->n + n) cap *= 2;
		int32_t *v = sg_realloc(x->v, sizeof(int32_t) * (size_t)cap);
		if (!v) return -1;
		x->v = v;
		x->cap = cap;
	}
	memcpy(x->v + x->n, ids, sizeof(int32_t) * (size_t)n);
	x->n += n;
	return 0;
}

static sg_status push_segment(sg_transcript *tr, int *cap, const sg_stt_segment *seg)
{
	if (tr->n_segments == *cap) {
		int c = *cap ? *cap * 2 : 32;
		sg_stt_segment *v = sg_realloc(tr->segments, sizeof(sg_stt_segment) * (size_t)c);
		if (!v) return SG_FAIL(SG_ERR_NOMEM, "out of memory for %d segments", c);
		tr->segments = v;
		*cap = c;
	}
	tr->segments[tr->n_segments++] = *seg;
	return SG_OK;
}

static void segment_free(sg_stt_segment *g)
{
	sg_free(g->text);
	sg_free(g->tokens);
	for (int i = 0; i < g->n_words; i++) sg_free(g->words[i].word);
	sg_free(g->words);
}

void sg_transcript_free(sg_transcript *tr)
{
	if (!tr) return;
	for (int i = 0; i < tr->n_segments; i++) segment_free(&tr->segments[i]);
	sg_free(tr->segments);
	sg_free(tr->text);
	sg_free(tr);
}

static sg_status join_text(sg_transcript *tr)
{
	size_t len = 0;
	for (int i = 0; i < tr->n_segments; i++) len += strlen(tr->segments[i].text);
	char *t = sg_malloc(len + 1), *q = t;
	if (!t) return SG_FAIL(SG_ERR_NOMEM, "out of memory");
	for (int i = 0; i < tr->n_segments; i++) {
		size_t k = strlen(tr->segments[i].text);
		memcpy(q, tr->segments[i].text, k);
		q += k;
	}
	*q = 0;
	size_t b, e;
	strip_span(t, len, &b, &e);
	memmove(t, t + b, e - b);
	t[e - b] = 0;
	tr->text = t;
	return SG_OK;
}

/* Where the samples come from: a buffer in memory, or a file streamed through a window of
 * samples [base, base + len) that only moves forward (seek never goes back before the window
 * being decoded), so a long recording is never held whole. */
typedef struct source {
	const float *pcm; /* memory: [n] */
	size_t n;         /* memory: the count; stream: known after the first pass */
	sg_audio_stream *st;
	float *buf;       /* stream: [cap] samples from base */
	size_t base, len, cap;
	int eof;
} source;

/* Makes samples [off, off + want) readable at *p: *avail of them (fewer only at the end). */
static sg_status source_get(source *s, size_t off, size_t want, const float **p, size_t *avail)
{
	if (!s->st) {
		*p = off < s->n ? s->pcm + off : NULL;
		*avail = off < s->n ? s->n - off : 0;
		return SG_OK;
	}
	if (off < s->base) return sg_error(SG_ERR_INTERNAL, "transcribe: sample %zu is before the stream's window (%zu)", off, s->base);
	/* drop what is before off */
	size_t drop = off - s->base < s->len ? off - s->base : s->len;
	memmove(s->buf, s->buf + drop, sizeof(float) * (s->len - drop));
	s->len -= drop;
	s->base += drop;
	if (s->base < off) { /* off is past what was read: skip samples */
		float tmp[4096];
		while (s->base < off && !s->eof) {
			size_t k = off - s->base < 4096 ? off - s->base : 4096, got;
			sg_status st = sg_audio_stream_read(s->st, tmp, k, &got);
			if (st) return st;
			if (!got) s->eof = 1;
			s->base += got;
		}
	}
	if (want > s->cap) {
		float *nb = sg_realloc(s->buf, sizeof(float) * want);
		if (!nb) return SG_FAIL(SG_ERR_NOMEM, "out of memory for %zu samples", want);
		s->buf = nb;
		s->cap = want;
	}
	while (s->len < want && !s->eof) {
		size_t got;
		sg_status st = sg_audio_stream_read(s->st, s->buf + s->len, want - s->len, &got);
		if (st) return st;
		if (!got) s->eof = 1;
		s->len += got;
	}
	*p = s->len ? s->buf : NULL;
	*avail = s->base == off ? s->len : 0;
	return SG_OK;
}

/* The window's log-mel: [n_mels][win] from the audio at frame seek, the floor raised to the
 * whole file's (the reference clamps at the maximum of the whole spectrogram minus 8), frames
 * past the audio set to 0 as the reference pads a short window. */
static sg_status window_mel(source *src, int seek, int segment_size, int n_mels, int win, float floor_v, float *full,
			    float *mel)
{
	const float *p;
	size_t avail;
	sg_status st = source_get(src, (size_t)seek * SG_MEL_HOP, SG_MEL_N_SAMPLES, &p, &avail);
	if (!st) st = sg_audio_log_mel(avail ? p : NULL, avail, n_mels, full);
	if (st) return st;
	for (int m = 0; m < n_mels; m++) {
		const float *s = full + (size_t)m * SG_MEL_N_FRAMES;
		float *dst = mel + (size_t)m * win;
		for (int j = 0; j < win; j++) dst[j] = j < segment_size ? (s[j] > floor_v ? s[j] : floor_v) : 0.0f;
	}
	return SG_OK;
}

/* The maximum log10 mel energy over the whole audio, 30 s at a time (in the normalised scale
 * (log10 + 4) / 4), and for a stream the count of its samples (it is read once, then rewound). */
static sg_status global_max(source *src, int n_mels, float *full, float *out)
{
	float mx = -INFINITY;
	for (size_t off = 0;; off += SG_MEL_N_SAMPLES) {
		const float *p;
		size_t avail;
		sg_status st = source_get(src, off, SG_MEL_N_SAMPLES, &p, &avail);
		if (st) return st;
		if (!avail) {
			if (src->st) src->n = off;
			break;
		}
		if ((st = sg_audio_log_mel(p, avail, n_mels, full))) return st;
		size_t frames = avail / SG_MEL_HOP + 1;
		if (frames > SG_MEL_N_FRAMES) frames = SG_MEL_N_FRAMES;
		for (int m = 0; m < n_mels; m++)
			for (size_t j = 0; j < frames; j++) {
				float x = full[(size_t)m * SG_MEL_N_FRAMES + j];
				if (x > mx) mx = x;
			}
		if (avail < SG_MEL_N_SAMPLES) {
			if (src->st) src->n = off + avail;
			break;
		}
	}
	if (src->st) {
		sg_status st = sg_audio_stream_rewind(src->st);
		if (st) return st;
		src->base = src->len = 0;
		src->eof = 0;
	}
	*out = mx;
	return SG_OK;
}

/* The words of a window's segments (word_timestamps): its text tokens aligned to its audio
 * (segment_size mel frames) through the alignment heads, as the reference's add_word_timestamps
 * does, with the window's start sequence (<|startoftranscript|> [language task]). */
static sg_status window_words(run *r, int32_t lang, const char *lang_code, const int32_t *toks, int n, int segment_size,
			      double time_offset, double last_speech, sg_stt_wseg *ws, int n_ws)
{
	sg_stt *s = r->s;
	const sg_stt_vocab *v = &s->v;
	int n_text = 0, K = segment_size / SG_STT_INPUT_STRIDE;
	for (int i = 0; i < n; i++) n_text += toks[i] < v->eot;
	if (!n_text || K < 1)
		return sg_stt_window_words(s->tok, v, 0, NULL, 0, NULL, NULL, time_offset, last_speech, ws, n_ws);
	int nh = s->info->n_align_heads, n_ids = 0;
	int32_t *ids = sg_malloc(sizeof(int32_t) * (size_t)(n_text + 5));
	float *attn = ids ? sg_malloc(sizeof(float) * (size_t)nh * (size_t)(n_text + 5) * (size_t)K) : NULL;
	float *prob = attn ? sg_malloc(sizeof(float) * (size_t)(n_text + 5)) : NULL;
	int32_t *jump = prob ? sg_malloc(sizeof(int32_t) * (size_t)(n_text + 1)) : NULL;
	sg_status st = SG_OK;
	if (!jump) {
		st = SG_FAIL(SG_ERR_NOMEM, "out of memory aligning %d tokens", n_text);
		goto done;
	}
	ids[n_ids++] = v->sot;
	if (v->multilingual) {
		ids[n_ids++] = lang;
		ids[n_ids++] = r->p->translate ? v->translate : v->transcribe;
	}
	int sot_len = n_ids;
	ids[n_ids++] = v->no_timestamps;
	for (int i = 0; i < n; i++)
		if (toks[i] < v->eot) ids[n_ids++] = toks[i];
	ids[n_ids++] = v->eot;
	if ((st = sg_whisper_align(s->w, ids, n_ids, K, v->eot, attn, prob))) goto done;
	if ((st = sg_stt_align_jumps(attn, nh, n_ids, K, sot_len, n_text, jump))) goto done;
	st = sg_stt_window_words(s->tok, v, v->multilingual && sg_stt_lang_by_char(lang_code), ids + sot_len + 1, n_text, jump,
				 prob + sot_len, time_offset, last_speech, ws, n_ws);
done:
	sg_free(ids);
	sg_free(attn);
	sg_free(prob);
	sg_free(jump);
	return st;
}

static sg_status transcribe(sg_stt *s, source *src, const sg_transcribe_params *params, sg_transcript **out)
{
	sg_transcribe_params p = params ? *params : sg_transcribe_default_params();
	sg_status st = check_params(s, &p);
	if (st) return st;
	if (p.word_timestamps && !s->info->n_align_heads)
		return sg_error(SG_ERR_UNSUPPORTED, "transcribe: word timestamps need the model's alignment heads, which it does not name");
	int nv = s->v.n_vocab, n_mels = s->info->n_mels, win = 2 * s->info->n_audio_ctx;
	if (win > SG_MEL_N_FRAMES || win < 2)
		return sg_error(SG_ERR_UNSUPPORTED, "transcribe: the model's window of %d mel frames is not Whisper's (at most %d)", win,
				SG_MEL_N_FRAMES);
	sg_transcript *tr = sg_calloc(1, sizeof(*tr));
	run r = {.s = s, .p = &p, .rng = p.seed ^ 0x5851f42d4c957f2dull};
	float *full = sg_malloc(sizeof(float) * (size_t)n_mels * SG_MEL_N_FRAMES);
	float *mel = sg_malloc(sizeof(float) * (size_t)n_mels * (size_t)win);
	r.logits = sg_malloc(sizeof(float) * (size_t)nv * SG_STT_MAX_BEAM);
	r.lp = sg_malloc(sizeof(float) * (size_t)nv);
	int n_ctx = s->info->n_text_ctx;
	int32_t *prompt = sg_malloc(sizeof(int32_t) * (size_t)n_ctx);
	idvec all = {0};
	int seg_cap = 0;
	if (!tr || !full || !mel || !r.logits || !r.lp || !prompt) {
		st = SG_FAIL(SG_ERR_NOMEM, "out of memory");
		goto done;
	}
	tr->language_prob = 1;
	snprintf(tr->language, sizeof(tr->language), "%s", "en");
	if ((st = make_suppress(&r))) goto done;
	r.rules.v = &s->v;
	r.rules.suppress_blank = p.suppress_blank;
	r.rules.timestamps = p.timestamps;
	r.rules.max_initial_timestamp_index = (int)lround(p.max_initial_timestamp / SG_STT_TIME_PRECISION);
	int32_t lang = -1;
	if (s->v.multilingual && p.language && *p.language) lang = sg_stt_vocab_lang(&s->v, p.language);
	if (p.initial_prompt && *p.initial_prompt) {
		/* " " + the prompt stripped, as the reference encodes it */
		size_t b, e, L = strlen(p.initial_prompt);
		strip_span(p.initial_prompt, L, &b, &e);
		char *t = sg_malloc(e - b + 2);
		if (!t) {
			st = SG_FAIL(SG_ERR_NOMEM, "out of memory");
			goto done;
		}
		t[0] = ' ';
		memcpy(t + 1, p.initial_prompt + b, e - b);
		t[e - b + 1] = 0;
		struct sg_tokens pt = {0};
		st = sg_tokenizer_encode(s->tok, t, e - b + 1, 0, &pt);
		sg_free(t);
		if (!st && idvec_push(&all, pt.ids, (int)pt.n)) st = SG_FAIL(SG_ERR_NOMEM, "out of memory");
		sg_tokens_free(&pt);
		if (st) goto done;
	}
	float gmax;
	if ((st = global_max(src, n_mels, full, &gmax))) goto done;
	size_t n = src->n;
	tr->duration = (double)n / SG_AUDIO_RATE;
	float floor_v = gmax - 2.0f; /* (max - 8 + 4) / 4 in the normalised scale */
	int content_frames = (int)(n / SG_MEL_HOP), seek = 0, prompt_reset_since = 0;
	double last_speech = 0.0; /* word timestamps: the end of the last word so far */
	sg_stt_slice *slices = NULL;
	while (seek < content_frames) {
		double time_offset = seek * 0.01;
		int segment_size = content_frames - seek < win ? content_frames - seek : win;
		/* the language is detected once, on the first 30 s of the features: when the audio is
		 * shorter, that is one frame more than the window's content (the reference's
		 * spectrogram has a frame past the last full hop), so that window is encoded apart */
		int detect = s->v.multilingual && lang < 0;
		if (detect && segment_size < win) {
			float prob;
			if ((st = window_mel(src, seek, segment_size + 1, n_mels, win, floor_v, full, mel))) break;
			if ((st = sg_whisper_encode(s->w, mel, win))) break;
			if ((st = detect_language(&r, &lang, &prob))) break;
			tr->language_prob = prob;
			detect = 0;
		}
		if ((st = window_mel(src, seek, segment_size, n_mels, win, floor_v, full, mel))) break;
		if ((st = sg_whisper_encode(s->w, mel, win))) break;
		if (detect) {
			float prob;
			if ((st = detect_language(&r, &lang, &prob))) break;
			tr->language_prob = prob;
		}
		if (s->v.multilingual) snprintf(tr->language, sizeof(tr->language), "%s", sg_stt_vocab_lang_code(&s->v, lang));
		/* [<|startofprev|> previous text] <|startoftranscript|> [language task] [<|notimestamps|>] */
		int np = 0, max_prev = n_ctx / 2 - 1;
		int prev = all.n - prompt_reset_since;
		if (prev > 0) {
			if (prev > max_prev) prev = max_prev;
			prompt[np++] = s->v.sot_prev;
			memcpy(prompt + np, all.v + all.n - prev, sizeof(int32_t) * (size_t)prev);
			np += prev;
		}
		int sot_index = np;
		prompt[np++] = s->v.sot;
		if (s->v.multilingual) {
			prompt[np++] = lang;
			prompt[np++] = p.translate ? s->v.translate : s->v.transcribe;
		}
		if (!p.timestamps) prompt[np++] = s->v.no_timestamps;
		r.max_new = n_ctx / 2 < n_ctx - np ? n_ctx / 2 : n_ctx - np;
		win_result res = {0};
		if ((st = decode_window(&r, prompt, np, sot_index, &res))) break;
		if (p.no_speech_threshold > 0 && res.no_speech_prob > p.no_speech_threshold &&
		    !(p.logprob_threshold < 0 && res.avg_logprob > p.logprob_threshold)) {
			/* silence: on to the next window */
			sg_free(res.tokens);
			seek += segment_size;
			if (p.on_progress) p.on_progress(seek * 0.01, tr->duration, p.user);
			continue;
		}
		int previous_seek = seek, n_sl = 0;
		sg_stt_slice *sl = sg_realloc(slices, sizeof(sg_stt_slice) * (size_t)(res.n + 1));
		if (!sl) {
			sg_free(res.tokens);
			st = SG_FAIL(SG_ERR_NOMEM, "out of memory");
			break;
		}
		slices = sl;
		sg_stt_split_segments(&s->v, res.tokens, res.n, time_offset, segment_size, &seek, slices, &n_sl);
		sg_stt_wseg *ws = NULL;
		if (p.word_timestamps) {
			ws = sg_calloc((size_t)(n_sl ? n_sl : 1), sizeof(*ws));
			if (!ws) {
				sg_free(res.tokens);
				st = SG_FAIL(SG_ERR_NOMEM, "out of memory");
				break;
			}
			for (int i = 0; i < n_sl; i++)
				ws[i] = (sg_stt_wseg){res.tokens + slices[i].begin, slices[i].end - slices[i].begin, slices[i].start,
						      slices[i].end_s, NULL, 0};
			st = window_words(&r, lang, tr->language, res.tokens, res.n, segment_size, previous_seek / 100.0, last_speech, ws,
					  n_sl);
			if (st) {
				sg_free(ws);
				sg_free(res.tokens);
				break;
			}
			/* the next window starts at the last word's end unless this one ended on a
			 * single timestamp; the words set the segments' times */
			int ts = s->v.timestamp_begin;
			int single_end = res.n >= 2 && res.tokens[res.n - 2] < ts && res.tokens[res.n - 1] >= ts;
			double le = sg_stt_words_end(ws, n_sl);
			if (!single_end && n_sl && le > time_offset) seek = (int)rint(le * 100.0);
			if (n_sl) last_speech = le;
			for (int i = 0; i < n_sl; i++) {
				slices[i].start = ws[i].start;
				slices[i].end_s = ws[i].end;
			}
		}
		int stop = 0;
		for (int i = 0; i < n_sl && !st; i++) {
			sg_stt_segment g = {
				.seek = previous_seek,
				.start = slices[i].start,
				.end = slices[i].end_s,
				.temperature = res.temperature,
				.avg_logprob = res.avg_logprob,
				.compression_ratio = res.compression_ratio,
				.no_speech_prob = res.no_speech_prob,
			};
			int nt = slices[i].end - slices[i].begin;
			size_t len;
			if ((st = text_of(s, res.tokens + slices[i].begin, nt, &g.text, &len))) break;
			size_t b, e;
			strip_span(g.text, len, &b, &e);
			if (g.start == g.end || b == e) {
				sg_free(g.text);
				if (ws) sg_stt_wseg_clear(&ws[i], 1);
				continue;
			}
			if (ws) {
				g.words = ws[i].words;
				g.n_words = ws[i].n_words;
				ws[i].words = NULL;
				ws[i].n_words = 0;
			}
			g.tokens = sg_malloc(sizeof(int32_t) * (size_t)(nt ? nt : 1));
			if (!g.tokens || idvec_push(&all, res.tokens + slices[i].begin, nt)) {
				segment_free(&g);
				st = SG_FAIL(SG_ERR_NOMEM, "out of memory");
				break;
			}
			memcpy(g.tokens, res.tokens + slices[i].begin, sizeof(int32_t) * (size_t)nt);
			g.n_tokens = nt;
			g.id = tr->n_segments;
			if ((st = push_segment(tr, &seg_cap, &g))) {
				segment_free(&g);
				break;
			}
			if (p.on_segment && p.on_segment(&tr->segments[tr->n_segments - 1], p.user)) stop = 1;
		}
		if (ws) sg_stt_wseg_clear(ws, n_sl);
		sg_free(ws);
		sg_free(res.tokens);
		if (st) break;
		if (!p.condition_on_previous_text || res.temperature > p.prompt_reset_on_temperature) prompt_reset_since = all.n;
		if (p.on_progress) p.on_progress((seek < content_frames ? seek : content_frames) * 0.01, tr->duration, p.user);
		if (stop) {
			st = sg_error(SG_ERR_CANCELLED, "transcribe: stopped by the segment callback");
			break;
		}
	}
	sg_free(slices);
	if (!st || st == SG_ERR_CANCELLED) {
		sg_status j = join_text(tr);
		if (j) st = j;
	}
done:
	sg_free(full);
	sg_free(mel);
	sg_free(r.logits);
	sg_free(r.lp);
	sg_free(r.suppress);
	sg_free(prompt);
	sg_free(all.v);
	if (st && st != SG_ERR_CANCELLED) {
		sg_transcript_free(tr);
		tr = NULL;
	}
	*out = tr;
	return st;
}

sg_status sg_transcribe_pcm(sg_stt *stt, const float *pcm, size_t n, const sg_transcribe_params *params,
			    sg_transcript **out)
{
	if (!out) return SG_FAIL(SG_ERR_INVALID_ARG, "out is NULL");
	*out = NULL;
	if (!stt || (!pcm && n)) return SG_FAIL(SG_ERR_INVALID_ARG, "stt or pcm is NULL");
	if (!n) return sg_error(SG_ERR_FORMAT, "transcribe: the audio is empty (no samples)");
	source src = {.pcm = pcm, .n = n};
	return transcribe(stt, &src, params, out);
}

sg_status sg_transcribe_stream(sg_stt *stt, sg_audio_stream *audio, const sg_transcribe_params *params,
			       sg_transcript **out)
{
	if (!out) return SG_FAIL(SG_ERR_INVALID_ARG, "out is NULL");
	*out = NULL;
	if (!stt || !audio) return SG_FAIL(SG_ERR_INVALID_ARG, "stt or audio is NULL");
	/* one window of samples is held at a time, whatever the audio's length */
	source src = {.st = audio};
	sg_status st = transcribe(stt, &src, params, out);
	sg_free(src.buf);
	return st;
}

sg_status sg_transcribe_file(sg_stt *stt, const char *path, const sg_transcribe_params *params, sg_transcript **out)
{
	if (!out) return SG_FAIL(SG_ERR_INVALID_ARG, "out is NULL");
	*out = NULL;
	if (!stt || !path) return SG_FAIL(SG_ERR_INVALID_ARG, "stt or path is NULL");
	sg_audio_stream *audio = NULL;
	sg_status st = sg_audio_stream_open(path, &audio);
	if (st) return st;
	st = sg_transcribe_stream(stt, audio, params, out);
	sg_audio_stream_close(audio);
	return st;
}

sg_status sg_transcribe_memory(sg_stt *stt, const void *bytes, size_t n, const sg_transcribe_params *params,
			       sg_transcript **out)
{
	if (!out) return SG_FAIL(SG_ERR_INVALID_ARG, "out is NULL");
	*out = NULL;
	if (!stt || (!bytes && n)) return SG_FAIL(SG_ERR_INVALID_ARG, "stt or bytes is NULL");
	sg_audio_stream *audio = NULL;
	sg_status st = sg_audio_stream_open_memory(bytes, n, &audio);
	if (st) return st;
	st = sg_transcribe_stream(stt, audio, params, out);
	sg_audio_stream_close(audio);
	return st;
}
