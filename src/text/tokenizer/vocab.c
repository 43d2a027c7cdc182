/* Vocabularies given as arrays (GGUF's tokenizer.ggml.*) built into the tokenizer that the
 * reference (transformers' GGUF conversion) builds from the same metadata:
 *   gpt2  -> byte-level BPE with the file's merges and the Split regex named by ggml.pre;
 *   llama -> SentencePiece-style BPE with byte fallback, merges derived from the scores
 *            (Gemma: from the file order, with whitespace tokens respelled with U+2581);
 * control tokens become special added tokens, user-defined ones plain added tokens. */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "text/tokenizer/tokenizer_int.h"

#define SPACE_MARK "\xE2\x96\x81" /* U+2581 */

static const char LLAMA3_SPLIT[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char QWEN2_SPLIT[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char QWEN35_SPLIT[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char TEKKEN_SPLIT[] =
	"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
	"|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
	"|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char GPT4O_SPLIT[] =
	"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
	"|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
	"|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const struct {
	const char *name, *re;
} PRE_SPLITS[] = {
	{"llama3", LLAMA3_SPLIT}, {"llama-v3", LLAMA3_SPLIT}, {"llama-bpe", LLAMA3_SPLIT}, {"falcon3", LLAMA3_SPLIT},
	{"falcon-h1", LLAMA3_SPLIT}, {"pixtral", LLAMA3_SPLIT}, {"midm-2.0", LLAMA3_SPLIT}, {"lfm2", LLAMA3_SPLIT},
	{"jina-v5-nano", LLAMA3_SPLIT}, {"dbrx", LLAMA3_SPLIT}, {"smaug-bpe", LLAMA3_SPLIT}, {"tekken", TEKKEN_SPLIT},
	{"qwen2", QWEN2_SPLIT}, {"deepseek-r1-qwen", QWEN2_SPLIT}, {"kormo", QWEN2_SPLIT}, {"f2llmv2", QWEN2_SPLIT},
	{"megrez", QWEN2_SPLIT}, {"qwen35", QWEN35_SPLIT}, {"gpt-4o", GPT4O_SPLIT}, {"llama4", GPT4O_SPLIT},
	{"kanana2", GPT4O_SPLIT}, {"talkie", GPT4O_SPLIT}, {"minimax-m2", GPT4O_SPLIT},
};

static const char *pre_split(const char *pre)
{
	for (size_t i = 0; pre && i < sizeof(PRE_SPLITS) / sizeof(PRE_SPLITS[0]); i++)
		if (!strcmp(pre, PRE_SPLITS[i].name)) return PRE_SPLITS[i].re;
	return NULL;
}

static size_t n_chars(const char *s, size_t n)
{
	size_t c = 0;
	for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
	return c;
}

typedef struct cand {
	int32_t l, r;      /* ids of the halves */
	double score;      /* of the merged token */
	uint32_t ll, lr;   /* char lengths of the halves */
	uint32_t seq;      /* insertion order (ties keep it: Python's sort is stable) */
} cand;

static int cand_cmp(const void *pa, const void *pb)
{
	const cand *a = pa, *b = pb;
	/* Descending on (score, len left, len right), as sorted(..., reverse=True). */
	if (a->score != b->score) return a->score > b->score ? -1 : 1;
	if (a->ll != b->ll) return a->ll > b->ll ? -1 : 1;
	if (a->lr != b->lr) return a->lr > b->lr ? -1 : 1;
	return a->seq < b->seq ? -1 : a->seq > b->seq;
}

static int cand_cmp_ids(const void *pa, const void *pb)
{
	const cand *a = pa, *b = pb;
	if (a->l != b->l) return a->l < b->l ? -1 : 1;
	return a->r < b->r ? -1 : a->r > b->r;
}

/* Merges implied by a vocabulary: every split of a token into two tokens, best score first. */
static sg_status derive_merges(const sg_str *tok, int32_t n, const double *score, sg_str **out, int32_t *n_out)
{
	sg_strmap map = {0};
	sg_status st = sg_strmap_build(&map, tok, n);
	if (st) return st;
	cand *c = NULL;
	size_t nc = 0, cc = 0;
	uint8_t *done = sg_calloc((size_t)n, 1);
	if (!done) st = SG_FAIL(SG_ERR_NOMEM, "merges");
	for (int32_t i = 0; i < n && !st; i++) {
		if (!tok[i].s) continue;
		/* A duplicate spelling: the dict keeps the first position and the last value. */
		int32_t last = sg_strmap_get(&map, tok[i].s, tok[i].n);
		if (done[last]) continue;
		done[last] = 1;
		size_t start = nc;
		for (uint32_t k = 1; k < tok[i].n; k++) {
			if (((unsigned char)tok[i].s[k] & 0xC0) == 0x80) continue;
			int32_t l = sg_strmap_get(&map, tok[i].s, k), r = sg_strmap_get(&map, tok[i].s + k, tok[i].n - k);
			if (l < 0 || r < 0) continue;
			if (nc == cc) {
				cc = cc ? cc * 2 : 1024;
				cand *v = sg_realloc(c, cc * sizeof(*v));
				if (!v) {
					st = SG_FAIL(SG_ERR_NOMEM, "merges");
					break;
				}
				c = v;
			}
			c[nc++] = (cand){l, r, score[last], (uint32_t)n_chars(tok[i].s, k), (uint32_t)n_chars(tok[i].s + k, tok[i].n - k), 0};
		}
		if (nc > start) qsort(c + start, nc - start, sizeof(cand), cand_cmp_ids); /* c may be NULL */
	}
	for (size_t i = 0; i < nc; i++) c[i].seq = (uint32_t)i;
	if (!st && nc) qsort(c, nc, sizeof(cand), cand_cmp);
	sg_str *m = st ? NULL : sg_malloc((nc ? nc : 1) * 2 * sizeof(sg_str));
	if (!st && !m) st = SG_FAIL(SG_ERR_NOMEM, "merges");
	for (size_t i = 0; !st && i < nc; i++) {
		m[2 * i] = tok[c[i].l];
		m[2 * i + 1] = tok[c[i].r];
	}
	sg_free(c);
	sg_free(done);
	sg_strmap_free(&map);
	if (st) return st;
	*out = m;
	*n_out = (int32_t)nc;
	return SG_OK;
}

static int add_tok(added_tok **v, int *n, int *cap, int32_t id, sg_str s, int special)
{
	if (*n == *cap) {
		int c = *cap ? *cap * 2 : 64;
		added_tok *w = sg_realloc(*v, (size_t)c * sizeof(added_tok));
		if (!w) return -1;
		*v = w;
		*cap = c;
	}
	(*v)[(*n)++] = (added_tok){.id = id, .content = s, .special = (uint8_t)special};
	return 0;
}

/* Token i as the file spells it. */
static sg_str orig_str(const sg_vocab_desc *d, int32_t i)
{
	const char *s = d->tokens[i] ? d->tokens[i] : "";
	return (sg_str){s, d->token_lens && d->tokens[i] ? d->token_lens[i] : (uint32_t)strlen(s)};
}

static int in_bytelevel_alphabet(sg_str s)
{
	for (size_t k = 0; k < s.n;) {
		uint32_t cp;
		k += (size_t)sg_uc_next(s.s + k, s.n - k, &cp);
		if (sg_bytelevel_byte(cp) < 0) return 0;
	}
	return 1;
}

sg_status sg_tokenizer_from_vocab(const sg_vocab_desc *d, sg_tokenizer **out)
{
	*out = NULL;
	if (!d || !d->model || d->n_tokens <= 0 || d->n_tokens >= SG_TOK_MAX_ID || !d->tokens)
		return SG_FAIL(SG_ERR_INVALID_ARG, "vocabulary arrays are required (1..%d tokens)", SG_TOK_MAX_ID - 1);
	int gpt2 = !strcmp(d->model, "gpt2"), llama = !strcmp(d->model, "llama");
	if (!gpt2 && !llama)
		return SG_FAIL(SG_ERR_UNSUPPORTED, "gguf: tokenizer.ggml.model '%s' is not supported (gpt2 and llama are; the reference "
						   "cannot build the others from GGUF either)", d->model);
	int gemma = llama && d->arch && (!strcmp(d->arch, "gemma") || !strcmp(d->arch, "gemma2") || !strcmp(d->arch, "gemma3"));
	int32_t n = d->n_tokens;
	sg_status st = SG_OK;
	sg_str *tok = sg_calloc((size_t)n + 1, sizeof(sg_str));
	double *score = sg_calloc((size_t)n + 1, sizeof(double));
	sg_str *merges = NULL;
	added_tok *added = NULL;
	int n_added = 0, cap_added = 0;
	int32_t n_merges = 0;
	sg_buf spell = {0};
	json_t *norm = NULL, *pre = NULL, *dec = NULL;
	if (!tok || !score) {
		st = SG_FAIL(SG_ERR_NOMEM, "vocabulary");
		goto done;
	}
	/* Spellings: byte-level vocabularies write every token in the byte alphabet; Gemma writes a
	 * run of spaces as spaces where its tokenizer looks for U+2581. Offsets first (the buffer grows). */
	size_t *off = sg_malloc((size_t)n * sizeof(size_t));
	if (!off) {
		st = SG_FAIL(SG_ERR_NOMEM, "vocabulary");
		goto done;
	}
	for (int32_t i = 0; i < n && !st; i++) {
		const char *s = d->tokens[i] ? d->tokens[i] : "";
		size_t len = d->token_lens ? d->token_lens[i] : strlen(s);
		off[i] = spell.n;
		sg_str orig = {s, (uint32_t)len};
		int r = 0;
		int all_space = len > 0;
		for (size_t k = 0; k < len && all_space; k++) all_space = s[k] == ' ';
		int raw = d->raw_bytes && !(d->types && d->types[i] == 3);
		if (gpt2 && (raw || !in_bytelevel_alphabet(orig))) {
			for (size_t k = 0; k < len && !r; k++) r = sg_buf_put_cp(&spell, sg_bytelevel_cp((uint8_t)s[k]));
		} else if (gemma && all_space) {
			for (size_t k = 0; k < len && !r; k++) r = sg_buf_put(&spell, SPACE_MARK, 3);
		} else {
			r = sg_buf_put(&spell, s, len);
		}
		if (r) st = SG_FAIL(SG_ERR_NOMEM, "vocabulary");
		tok[i].n = (uint32_t)(spell.n - off[i]);
		score[i] = gemma ? -(double)i : d->scores ? d->scores[i] : 0.0;
	}
	for (int32_t i = 0; i < n && !st; i++) tok[i].s = spell.p + off[i];
	sg_free(off);
	if (st) goto done;

	if (gpt2 && !(d->derive_merges && !d->n_merges)) {
		if (!d->merges && d->n_merges) {
			st = SG_FAIL(SG_ERR_FORMAT, "gguf: merges missing");
			goto done;
		}
		merges = sg_calloc(2 * (size_t)(d->n_merges ? d->n_merges : 1), sizeof(sg_str));
		if (!merges) {
			st = SG_FAIL(SG_ERR_NOMEM, "merges");
			goto done;
		}
		for (int32_t i = 0; i < d->n_merges; i++) {
			const char *m = d->merges[i];
			size_t ml = d->merge_lens ? d->merge_lens[i] : strlen(m);
			const char *sp = memchr(m, ' ', ml);
			if (!sp || memchr(sp + 1, ' ', ml - (size_t)(sp - m) - 1)) {
				st = SG_FAIL(SG_ERR_FORMAT, "gguf: merge %d ('%.*s') is not two tokens", i, (int)ml, m);
				goto done;
			}
			merges[2 * i] = (sg_str){m, (uint32_t)(sp - m)};
			merges[2 * i + 1] = (sg_str){sp + 1, (uint32_t)(ml - (size_t)(sp - m) - 1)};
		}
		n_merges = d->n_merges;
	} else if ((st = derive_merges(tok, n, score, &merges, &n_merges))) {
		goto done;
	}

	/* Added tokens: control -> special; user-defined (when its spelling is in the vocabulary) ->
	 * plain; and the defaults the reference's tokenizer class declares. */
	sg_strmap vmap = {0};
	if ((st = sg_strmap_build(&vmap, tok, n))) goto done;
	static const char *const GEMMA_DEF[] = {"<unk>", "<bos>", "<eos>", "<pad>", "<mask>"};
	static const char *const LLAMA_DEF[] = {"<unk>", "<s>", "</s>"};
	static const char *const GPT2_DEF[] = {"<|endoftext|>"};
	const char *const *defs = gemma ? GEMMA_DEF : llama ? LLAMA_DEF : GPT2_DEF;
	int n_defs = gemma ? 5 : llama ? 3 : 1;
	int r = 0;
	for (int k = 0; k < n_defs && !r; k++) {
		int32_t id = sg_strmap_get(&vmap, defs[k], strlen(defs[k]));
		if (id >= 0) r = add_tok(&added, &n_added, &cap_added, id, tok[id], 1);
	}
	for (int32_t i = 0; d->types && i < n && !r; i++) {
		if (d->types[i] == 3 && (!gpt2 || in_bytelevel_alphabet(tok[i])))
			r = add_tok(&added, &n_added, &cap_added, i, orig_str(d, i), 1);
	}
	for (int32_t i = 0; d->types && i < n && !r; i++) {
		if (d->types[i] != 4) continue;
		sg_str orig = orig_str(d, i);
		int32_t id = sg_strmap_get(&vmap, orig.s, orig.n);
		if (id >= 0) r = add_tok(&added, &n_added, &cap_added, id, orig, 0);
	}
	sg_strmap_free(&vmap);
	if (r) {
		st = SG_FAIL(SG_ERR_NOMEM, "added tokens");
		goto done;
	}

	const char *split = pre_split(d->pre);
	if (split) pre = json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b}]}", "type", "Sequence", "pretokenizers",
				   "type", "Split", "pattern", "Regex", split, "behavior", "Isolated", "invert", 0, "type",
				   "ByteLevel", "add_prefix_space", 0, "use_regex", 0);
	if (gpt2) {
		if (!pre) pre = json_pack("{s:s, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0, "use_regex", 1);
		dec = json_pack("{s:s}", "type", "ByteLevel");
	} else if (gemma) {
		norm = json_pack("{s:s, s:{s:s}, s:s}", "type", "Replace", "pattern", "String", " ", "content", SPACE_MARK);
		if (!pre) pre = json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "String", " ", "behavior", "MergedWithPrevious", "invert", 0);
		dec = json_pack("{s:s, s:[{s:s, s:{s:s}, s:s}, {s:s}, {s:s}]}", "type", "Sequence", "decoders", "type", "Replace", "pattern",
				"String", SPACE_MARK, "content", " ", "type", "ByteFallback", "type", "Fuse");
	} else {
		if (!pre) pre = json_pack("{s:s, s:s, s:s, s:b}", "type", "Metaspace", "replacement", SPACE_MARK, "prepend_scheme", "first", "split", 0);
		dec = json_pack("{s:s, s:[{s:s, s:{s:s}, s:s}, {s:s}, {s:s}, {s:s, s:s, s:i, s:i}]}", "type", "Sequence", "decoders", "type",
				"Replace", "pattern", "String", SPACE_MARK, "content", " ", "type", "ByteFallback", "type", "Fuse", "type",
				"Strip", "content", " ", "start", 1, "stop", 0);
	}
	if (!pre || !dec || (gemma && !norm)) {
		st = SG_FAIL(SG_ERR_NOMEM, "tokenizer components");
		goto done;
	}
	tok_spec s = {0};
	s.model = MODEL_BPE;
	s.vocab = tok;
	s.n_vocab = n;
	s.merges = merges;
	s.n_merges = n_merges;
	char unk_name[256] = "";
	if (gemma) snprintf(unk_name, sizeof(unk_name), "<unk>");
	s.unk = unk_name[0] ? unk_name : NULL;
	s.byte_fallback = llama;
	s.fuse_unk = llama;
	s.normalizer = norm;
	s.pre_tokenizer = pre;
	s.decoder = dec;
	s.added = added;
	s.n_added = n_added;
	s.add_bos = d->add_bos;
	s.add_eos = d->add_eos;
	char bos[512] = "", eos[512] = "";
	if (d->bos_id >= 0 && d->bos_id < n) snprintf(bos, sizeof(bos), "%.*s", (int)tok[d->bos_id].n, tok[d->bos_id].s);
	if (d->eos_id >= 0 && d->eos_id < n) snprintf(eos, sizeof(eos), "%.*s", (int)tok[d->eos_id].n, tok[d->eos_id].s);
	s.bos = bos[0] ? bos : NULL;
	s.eos = eos[0] ? eos : NULL;
	st = sg_tok_build(&s, out);
done:
	sg_free(tok);
	sg_free(score);
	sg_free(merges);
	sg_free(added);
	sg_free(spell.p);
	json_decref(norm);
	json_decref(pre);
	json_decref(dec);
	return st;
}

