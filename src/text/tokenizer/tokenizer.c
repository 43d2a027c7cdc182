/* The tokenizer: building it from a spec (shared by tokenizer.json and GGUF arrays), added-token
 * matching, the encode pipeline (added tokens -> normalizer -> pre-tokenizer -> model -> post
 * processor) and decode, in the order and with the rules of the reference. */
#include <stdatomic.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/flags.h"
#include "base/utf8.h"
#include "text/tokenizer/tokenizer_int.h"

char *sg_tok_blob(sg_tokenizer *t, size_t n)
{
	char **v = sg_realloc(t->blobs, (size_t)(t->n_blobs + 1) * sizeof(*v));
	if (!v) return NULL;
	t->blobs = v;
	char *p = sg_malloc(n ? n : 1);
	if (!p) return NULL;
	v[t->n_blobs++] = p;
	return p;
}

/* ---- added-token matcher: a byte trie, leftmost-longest like the reference's Aho-Corasick ---- */

struct trie_edge {
	uint64_t key; /* node << 8 | byte, UINT64_MAX empty */
	uint32_t child;
};

struct sg_trie {
	struct trie_edge *e;
	size_t mask;
	int32_t *term; /* [n_nodes] added index, -1 */
	uint32_t n_nodes;
	uint8_t first[32]; /* bitmap of first bytes */
};

static uint64_t tmix(uint64_t x)
{
	x *= 0x9E3779B97F4A7C15ull;
	return x ^ (x >> 29);
}

static int64_t trie_child(const struct sg_trie *tr, uint32_t node, uint8_t b)
{
	uint64_t key = (uint64_t)node << 8 | b;
	for (size_t i = tmix(key) & tr->mask;; i = (i + 1) & tr->mask) {
		if (tr->e[i].key == key) return tr->e[i].child;
		if (tr->e[i].key == UINT64_MAX) return -1;
	}
}

static void trie_free(struct sg_trie *tr)
{
	if (!tr) return;
	sg_free(tr->e);
	sg_free(tr->term);
	sg_free(tr);
}

/* Builds a trie over the added tokens for which pick(a) holds, keyed by norm or content. */
static sg_status trie_build(const sg_tokenizer *t, int normalized, struct sg_trie **out)
{
	*out = NULL;
	size_t total = 1;
	int any = 0;
	for (int i = 0; i < t->n_added; i++)
		if (t->added[i].normalized == normalized) total += (normalized ? t->added[i].norm.n : t->added[i].content.n), any = 1;
	if (!any) return SG_OK;
	struct sg_trie *tr = sg_calloc(1, sizeof(*tr));
	if (!tr) return SG_FAIL(SG_ERR_NOMEM, "added tokens");
	size_t cap = 16;
	while (cap < total * 2) cap *= 2;
	tr->e = sg_malloc(cap * sizeof(*tr->e));
	tr->term = sg_malloc(total * sizeof(int32_t));
	if (!tr->e || !tr->term) {
		trie_free(tr);
		return SG_FAIL(SG_ERR_NOMEM, "added tokens");
	}
	for (size_t i = 0; i < cap; i++) tr->e[i].key = UINT64_MAX;
	tr->mask = cap - 1;
	tr->n_nodes = 1;
	tr->term[0] = -1;
	for (int i = 0; i < t->n_added; i++) {
		const added_tok *a = &t->added[i];
		if (a->normalized != normalized) continue;
		sg_str s = normalized ? a->norm : a->content;
		if (!s.n) continue;
		tr->first[(uint8_t)s.s[0] >> 3] |= (uint8_t)(1u << ((uint8_t)s.s[0] & 7));
		uint32_t node = 0;
		for (uint32_t k = 0; k < s.n; k++) {
			int64_t c = trie_child(tr, node, (uint8_t)s.s[k]);
			if (c < 0) {
				uint64_t key = (uint64_t)node << 8 | (uint8_t)s.s[k];
				size_t j = tmix(key) & tr->mask;
				while (tr->e[j].key != UINT64_MAX) j = (j + 1) & tr->mask;
				tr->e[j] = (struct trie_edge){key, tr->n_nodes};
				tr->term[tr->n_nodes] = -1;
				c = tr->n_nodes++;
			}
			node = (uint32_t)c;
		}
		/* The same content twice: the later entry wins, as in the reference's map. */
		tr->term[node] = i;
	}
	*out = tr;
	return SG_OK;
}

/* Longest added token starting at s[i]: its index and end, or -1. */
static int trie_match(const struct sg_trie *tr, const char *s, size_t n, size_t i, size_t *end)
{
	uint8_t b0 = (uint8_t)s[i];
	if (!(tr->first[b0 >> 3] & (1u << (b0 & 7)))) return -1;
	uint32_t node = 0;
	int best = -1;
	for (size_t k = i; k < n; k++) {
		int64_t c = trie_child(tr, node, (uint8_t)s[k]);
		if (c < 0) break;
		node = (uint32_t)c;
		if (tr->term[node] >= 0) {
			best = tr->term[node];
			*end = k + 1;
		}
	}
	return best;
}

/* ---- building ---- */

static _Atomic uint64_t next_uid = 1;

void sg_tokenizer_free(sg_tokenizer *t)
{
	if (!t) return;
	sg_strmap_free(&t->mmap);
	sg_strmap_free(&t->tmap);
	sg_strmap_free(&t->amap);
	sg_free(t->akeys);
	sg_free(t->tok);
	sg_free(t->special);
	sg_free(t->mtok);
	sg_free(t->bpe.merges);
	sg_unigram_free(&t->uni);
	sg_norm_free(&t->norm);
	sg_pretok_free(&t->pre);
	sg_dec_free(&t->dec);
	sg_free(t->post.pre);
	sg_free(t->post.post);
	sg_free(t->added);
	trie_free(t->trie_raw);
	trie_free(t->trie_norm);
	for (int i = 0; i < t->n_blobs; i++) sg_free(t->blobs[i]);
	sg_free(t->blobs);
	sg_free(t);
}

static sg_str copy_str(sg_tokenizer *t, const char *s, size_t n)
{
	char *p = sg_tok_blob(t, n);
	if (!p) return (sg_str){NULL, 0};
	memcpy(p, s, n);
	return (sg_str){p, (uint32_t)n};
}

/* Byte-level spelling -> raw bytes; tokens with a char outside the alphabet stay as they are. */
static sg_str to_raw(char *dst, const sg_str in)
{
	size_t o = 0;
	for (size_t k = 0; k < in.n;) {
		uint32_t cp;
		int m = sg_uc_next(in.s + k, in.n - k, &cp);
		int b = sg_bytelevel_byte(cp);
		if (b < 0) {
			memcpy(dst, in.s, in.n);
			return (sg_str){dst, in.n};
		}
		dst[o++] = (char)b;
		k += (size_t)m;
	}
	return (sg_str){dst, (uint32_t)o};
}

static sg_status parse_post(const json_t *j, sg_post *p, const sg_tokenizer *t);

static int push_ids(int32_t **v, int *n, const int32_t *ids, int k, int front)
{
	int32_t *w = sg_realloc(*v, (size_t)(*n + k + 1) * sizeof(int32_t));
	if (!w) return -1;
	if (front) {
		memmove(w + k, w, (size_t)*n * sizeof(int32_t));
		memcpy(w, ids, (size_t)k * sizeof(int32_t));
	} else {
		memcpy(w + *n, ids, (size_t)k * sizeof(int32_t));
	}
	*v = w;
	*n += k;
	return 0;
}

static sg_status build_vocab(sg_tokenizer *t, const tok_spec *s)
{
	int32_t nv = s->n_vocab;
	for (int i = 0; i < s->n_added; i++)
		if (s->added[i].id >= nv) nv = s->added[i].id + 1;
	t->n_vocab = nv;
	t->tok = sg_calloc((size_t)nv, sizeof(sg_str));
	t->mtok = sg_calloc((size_t)nv, sizeof(sg_str));
	t->special = sg_calloc((size_t)nv, 1);
	if (!t->tok || !t->mtok || !t->special) return SG_FAIL(SG_ERR_NOMEM, "vocabulary of %d", nv);
	size_t total = 0;
	for (int32_t i = 0; i < s->n_vocab; i++) total += s->vocab[i].n;
	char *blob = sg_tok_blob(t, total * 2);
	if (!blob) return SG_FAIL(SG_ERR_NOMEM, "vocabulary strings");
	char *raw = blob + total;
	int raw_form = s->model == MODEL_BPE && t->pre.byte_level;
	for (int32_t i = 0; i < s->n_vocab; i++) {
		if (!s->vocab[i].s) continue;
		memcpy(blob, s->vocab[i].s, s->vocab[i].n);
		t->tok[i] = (sg_str){blob, s->vocab[i].n};
		blob += s->vocab[i].n;
		if (raw_form) {
			t->mtok[i] = to_raw(raw, t->tok[i]);
			raw += t->mtok[i].n;
		} else {
			t->mtok[i] = t->tok[i];
		}
	}
	sg_status st = sg_strmap_build(&t->mmap, t->mtok, s->n_vocab);
	if (st) return st;
	/* Added tokens override the spelling for decode (the reference looks them up first). */
	t->added = sg_calloc((size_t)(s->n_added ? s->n_added : 1), sizeof(added_tok));
	t->akeys = sg_calloc((size_t)(s->n_added ? s->n_added : 1), sizeof(sg_str));
	if (!t->added || !t->akeys) return SG_FAIL(SG_ERR_NOMEM, "added tokens");
	sg_buf nb = {0};
	for (int i = 0; i < s->n_added; i++) {
		added_tok a = s->added[i];
		if (a.id < 0) continue;
		a.content = copy_str(t, a.content.s, a.content.n);
		if (!a.content.s) return SG_FAIL(SG_ERR_NOMEM, "added tokens");
		a.norm = a.content;
		if (a.normalized && t->norm.n) {
			if ((st = sg_norm_apply(&t->norm, a.content.s, a.content.n, &nb))) {
				sg_free(nb.p);
				return st;
			}
			a.norm = copy_str(t, nb.p, nb.n);
		}
		t->tok[a.id] = a.content;
		t->akeys[t->n_added] = a.content;
		t->added[t->n_added++] = a;
	}
	sg_free(nb.p);
	if ((st = sg_strmap_build(&t->amap, t->akeys, t->n_added))) return st;
	if (raw_form && (st = sg_strmap_build(&t->tmap, t->tok, nv))) return st;
	for (int32_t i = 0; i < nv; i++) {
		if (!t->tok[i].s) continue;
		int32_t a = sg_strmap_get(&t->amap, t->tok[i].s, t->tok[i].n);
		t->special[i] = a >= 0 && t->added[a].special;
	}
	if ((st = trie_build(t, 0, &t->trie_raw)) || (st = trie_build(t, 1, &t->trie_norm))) return st;
	return SG_OK;
}

static sg_status build_model(sg_tokenizer *t, const tok_spec *s)
{
	if (s->model == MODEL_WORDPIECE) {
		t->wp.unk_id = s->unk ? sg_strmap_get(&t->mmap, s->unk, strlen(s->unk)) : -1;
		const char *p = s->wp_prefix ? s->wp_prefix : "##";
		t->wp.prefix_len = strlen(p);
		if (t->wp.prefix_len >= sizeof(t->wp.prefix)) return SG_FAIL(SG_ERR_FORMAT, "tokenizer: WordPiece prefix too long");
		memcpy(t->wp.prefix, p, t->wp.prefix_len);
		t->wp.max_chars = s->wp_max_chars > 0 ? s->wp_max_chars : 100;
		return SG_OK;
	}
	if (s->model == MODEL_UNIGRAM) return sg_unigram_init(t, s);
	sg_model_bpe *m = &t->bpe;
	m->byte_fallback = s->byte_fallback;
	m->fuse_unk = s->fuse_unk;
	m->ignore_merges = s->ignore_merges;
	m->cache = sg_flag_bool("SARAGOSSA_TOKENIZER_CACHE");
	m->unk_id = s->unk ? sg_strmap_get(&t->mmap, s->unk, strlen(s->unk)) : -1;
	for (int b = 0; b < 256; b++) {
		char name[8];
		if (t->pre.byte_level) {
			name[0] = (char)b;
			m->byte_id[b] = sg_strmap_get(&t->mmap, name, 1);
		} else {
			snprintf(name, sizeof(name), "<0x%02X>", b);
			m->byte_id[b] = s->byte_fallback ? sg_strmap_get(&t->mmap, name, 6) : -1;
		}
	}
	sg_status st = sg_bpe_alloc_merges(t, (size_t)s->n_merges);
	if (st) return st;
	sg_buf tmp = {0};
	for (int32_t i = 0; i < s->n_merges && !st; i++) {
		sg_str a = s->merges[2 * i], b = s->merges[2 * i + 1];
		tmp.n = 0;
		if (sg_buf_reserve(&tmp, (size_t)(a.n + b.n) * 2 + 2)) {
			st = SG_FAIL(SG_ERR_NOMEM, "merges");
			break;
		}
		if (t->pre.byte_level) {
			a = to_raw(tmp.p, a);
			b = to_raw(tmp.p + a.n, b);
		} else {
			memcpy(tmp.p, a.s, a.n);
			memcpy(tmp.p + a.n, b.s, b.n);
		}
		int32_t ia = sg_strmap_get(&t->mmap, tmp.p, a.n);
		int32_t ib = sg_strmap_get(&t->mmap, tmp.p + a.n, b.n);
		int32_t ic = sg_strmap_get(&t->mmap, tmp.p, (size_t)a.n + b.n);
		if (ia < 0 || ib < 0 || ic < 0)
			st = SG_FAIL(SG_ERR_FORMAT, "tokenizer: merge %d ('%.*s' '%.*s') uses a token missing from the vocabulary", i,
				     (int)s->merges[2 * i].n, s->merges[2 * i].s, (int)s->merges[2 * i + 1].n, s->merges[2 * i + 1].s);
		else st = sg_bpe_add_merge(t, ia, ib, ic, i);
	}
	sg_free(tmp.p);
	return st;
}

sg_status sg_tok_build(const tok_spec *s, sg_tokenizer **out)
{
	*out = NULL;
	sg_tokenizer *t = sg_calloc(1, sizeof(*t));
	if (!t) return SG_FAIL(SG_ERR_NOMEM, "tokenizer");
	t->uid = atomic_fetch_add(&next_uid, 1);
	t->model = s->model;
	t->bos_id = t->eos_id = -1;
	sg_status st;
	if ((st = sg_norm_parse(s->normalizer, &t->norm)) || (st = sg_pretok_parse(s->pre_tokenizer, &t->pre)) ||
	    (st = sg_dec_parse(s->decoder, &t->dec)) || (st = build_vocab(t, s)) || (st = build_model(t, s)) ||
	    (st = parse_post(s->post_processor, &t->post, t)))
		goto fail;
	if (s->bos) t->bos_id = sg_tokenizer_token_id(t, s->bos, strlen(s->bos));
	if (s->eos) t->eos_id = sg_tokenizer_token_id(t, s->eos, strlen(s->eos));
	/* tokenizer_config's add_bos_token / add_eos_token, for tokenizers whose post-processor does
	 * not already add them (the reference's tokenizer classes build that template). */
	if (s->add_bos == 1 && t->bos_id >= 0 && !(t->post.n_pre && t->post.pre[0] == t->bos_id))
		if (push_ids(&t->post.pre, &t->post.n_pre, &t->bos_id, 1, 1)) goto oom;
	if (s->add_eos == 1 && t->eos_id >= 0 && !(t->post.n_post && t->post.post[t->post.n_post - 1] == t->eos_id))
		if (push_ids(&t->post.post, &t->post.n_post, &t->eos_id, 1, 0)) goto oom;
	*out = t;
	return SG_OK;
oom:
	st = SG_FAIL(SG_ERR_NOMEM, "tokenizer");
fail:
	sg_tokenizer_free(t);
	return st;
}

/* ---- post-processors ---- */

static sg_status parse_post(const json_t *j, sg_post *p, const sg_tokenizer *t)
{
	if (!j || json_is_null(j)) return SG_OK;
	const char *type = json_string_value(json_object_get(j, "type"));
	if (!type) return SG_FAIL(SG_ERR_FORMAT, "tokenizer: post_processor without a type");
	if (!strcmp(type, "Sequence")) {
		const json_t *e;
		size_t i;
		json_array_foreach(json_object_get(j, "processors"), i, e)
		{
			sg_status st = parse_post(e, p, t);
			if (st) return st;
		}
		return SG_OK;
	}
	if (!strcmp(type, "ByteLevel")) return SG_OK;
	int32_t pre[64], post[64];
	int npre = 0, npost = 0;
	if (!strcmp(type, "BertProcessing") || !strcmp(type, "RobertaProcessing")) {
		const json_t *cls = json_object_get(j, "cls"), *sep = json_object_get(j, "sep");
		if (!json_is_integer(json_array_get(cls, 1)) || !json_is_integer(json_array_get(sep, 1)))
			return SG_FAIL(SG_ERR_FORMAT, "tokenizer: %s needs cls and sep as [token, id]", type);
		pre[npre++] = (int32_t)json_integer_value(json_array_get(cls, 1));
		post[npost++] = (int32_t)json_integer_value(json_array_get(sep, 1));
	} else if (!strcmp(type, "TemplateProcessing")) {
		const json_t *single = json_object_get(j, "single"), *sp = json_object_get(j, "special_tokens");
		const json_t *e;
		size_t i;
		int seen_seq = 0;
		json_array_foreach(single, i, e)
		{
			const json_t *st = json_object_get(e, "SpecialToken");
			if (json_object_get(e, "Sequence")) {
				seen_seq = 1;
				continue;
			}
			const char *name = json_string_value(json_object_get(st, "id"));
			const json_t *ids = json_object_get(json_object_get(sp, name ? name : ""), "ids");
			if (!name || !json_is_array(ids))
				return SG_FAIL(SG_ERR_FORMAT, "tokenizer: TemplateProcessing special token '%s' has no ids", name ? name : "?");
			const json_t *v;
			size_t k;
			json_array_foreach(ids, k, v)
			{
				if (npre >= 64 || npost >= 64) return SG_FAIL(SG_ERR_UNSUPPORTED, "tokenizer: template too long");
				if (seen_seq) post[npost++] = (int32_t)json_integer_value(v);
				else pre[npre++] = (int32_t)json_integer_value(v);
			}
		}
	} else {
		return SG_FAIL(SG_ERR_UNSUPPORTED, "tokenizer: post_processor '%s' is not supported", type);
	}
	for (int i = 0; i < npre; i++)
		if (pre[i] < 0 || pre[i] >= t->n_vocab) return SG_FAIL(SG_ERR_FORMAT, "tokenizer: post_processor id %d out of range", pre[i]);
	for (int i = 0; i < npost; i++)
		if (post[i] < 0 || post[i] >= t->n_vocab) return SG_FAIL(SG_ERR_FORMAT, "tokenizer: post_processor id %d out of range", post[i]);
	if (push_ids(&p->pre, &p->n_pre, pre, npre, 1) || push_ids(&p->post, &p->n_post, post, npost, 0))
		return SG_FAIL(SG_ERR_NOMEM, "post_processor");
	return SG_OK;
}

/* ---- encode ---- */

static int is_word_char(uint32_t c) { return c == '_' || sg_uc_is_alnum(c); }

static uint32_t last_cp(const char *s, size_t n)
{
	size_t p = n - 1;
	while (p > 0 && ((unsigned char)s[p] & 0xC0) == 0x80) p--;
	uint32_t cp;
	sg_uc_next(s + p, n - p, &cp);
	return cp;
}

/* Splits s[0..n) on the added tokens of one trie. Emits (text range, -1) and (range, added idx)
 * segments in order, applying single_word / lstrip / rstrip as the reference does. */
typedef struct aseg {
	size_t b, e;
	int added;
} aseg;

static int aseg_push(aseg **v, size_t *n, size_t *cap, aseg x)
{
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 16;
		aseg *w = sg_realloc(*v, c * sizeof(aseg));
		if (!w) return -1;
		*v = w;
		*cap = c;
	}
	(*v)[(*n)++] = x;
	return 0;
}

static int split_added(const sg_tokenizer *t, const struct sg_trie *tr, const char *s, size_t n, aseg **v, size_t *nv,
		       size_t *cap)
{
	size_t start_off = 0;
	for (size_t i = 0; tr && i < n;) {
		size_t end = i;
		int a = trie_match(tr, s, n, i, &end);
		if (a < 0) {
			i++;
			continue;
		}
		size_t b = i, e = end;
		i = end;
		const added_tok *at = &t->added[a];
		if (at->single_word) {
			int ok_l = b == 0 || !is_word_char(last_cp(s, b));
			uint32_t cp = 0;
			if (e < n) sg_uc_next(s + e, n - e, &cp);
			int ok_r = e == n || !is_word_char(cp);
			if (!ok_l || !ok_r) continue;
		}
		if (at->lstrip) {
			size_t nb = b;
			while (nb > 0) {
				size_t p = nb - 1;
				while (p > 0 && ((unsigned char)s[p] & 0xC0) == 0x80) p--;
				uint32_t cp;
				sg_uc_next(s + p, nb - p, &cp);
				if (!sg_uc_is_whitespace(cp)) break;
				nb = p;
			}
			b = nb > start_off ? nb : start_off;
		}
		if (at->rstrip) {
			while (e < n) {
				uint32_t cp;
				int k = sg_uc_next(s + e, n - e, &cp);
				if (!sg_uc_is_whitespace(cp)) break;
				e += (size_t)k;
			}
		}
		if (start_off < b && aseg_push(v, nv, cap, (aseg){start_off, b, -1})) return -1;
		if (aseg_push(v, nv, cap, (aseg){b, e, a})) return -1;
		start_off = e;
	}
	if (start_off < n && aseg_push(v, nv, cap, (aseg){start_off, n, -1})) return -1;
	return 0;
}

static sg_status model_words(const sg_tokenizer *t, const sg_buf *buf, const sg_pieces *w, sg_tokens *out)
{
	for (size_t i = 0; i < w->n; i++) {
		const char *s = buf->p + w->v[i].off;
		size_t n = w->v[i].len;
		sg_status st = t->model == MODEL_BPE	   ? sg_bpe_word(t, s, n, out)
			       : t->model == MODEL_UNIGRAM ? sg_unigram_word(t, s, n, out)
							   : sg_wp_word(t, s, n, out);
		if (st) return st;
	}
	return SG_OK;
}

sg_status sg_tokenizer_encode(const sg_tokenizer *t, const char *text, size_t len, int add_special, sg_tokens *out)
{
	if (!t || (!text && len)) return SG_FAIL(SG_ERR_INVALID_ARG, "tokenizer and text are required");
	if (!sg_utf8_valid((const uint8_t *)text, len)) {
		size_t bad = 0;
		while (bad < len) {
			uint32_t cp;
			int k = sg_utf8_decode((const uint8_t *)text + bad, len - bad, &cp);
			if (!k) break;
			bad += (size_t)k;
		}
		return SG_FAIL(SG_ERR_INVALID_ARG, "input is not valid UTF-8 (byte %zu)", bad);
	}
	if (add_special)
		for (int i = 0; i < t->post.n_pre; i++)
			if (sg_tokens_push(out, t->post.pre[i])) return SG_FAIL(SG_ERR_NOMEM, "ids");
	aseg *raw = NULL, *nseg = NULL;
	size_t nraw = 0, craw = 0, nn = 0, cn = 0;
	sg_buf norm = {0}, work = {0};
	sg_pieces words = {0};
	sg_status st = SG_OK;
	if (split_added(t, t->trie_raw, text ? text : "", len, &raw, &nraw, &craw)) goto oom;
	for (size_t i = 0; i < nraw && !st; i++) {
		if (raw[i].added >= 0) {
			if (sg_tokens_push(out, t->added[raw[i].added].id)) goto oom;
			continue;
		}
		if ((st = sg_norm_apply(&t->norm, text + raw[i].b, raw[i].e - raw[i].b, &norm))) break;
		nn = 0;
		if (split_added(t, t->trie_norm, norm.p, norm.n, &nseg, &nn, &cn)) goto oom;
		for (size_t k = 0; k < nn && !st; k++) {
			if (nseg[k].added >= 0) {
				if (sg_tokens_push(out, t->added[nseg[k].added].id)) goto oom;
				continue;
			}
			work.n = 0;
			words.n = 0;
			int at_start = raw[i].b == 0 && nseg[k].b == 0;
			st = sg_pretok_apply(&t->pre, norm.p + nseg[k].b, nseg[k].e - nseg[k].b, at_start, &work, &words);
			if (!st) st = model_words(t, &work, &words, out);
		}
	}
	if (!st && add_special)
		for (int i = 0; i < t->post.n_post; i++)
			if (sg_tokens_push(out, t->post.post[i])) goto oom;
	goto done;
oom:
	st = SG_FAIL(SG_ERR_NOMEM, "encode");
done:
	sg_free(raw);
	sg_free(nseg);
	sg_free(norm.p);
	sg_free(work.p);
	sg_free(words.v);
	return st;
}

/* ---- decode and lookups ---- */

sg_status sg_tokenizer_decode(const sg_tokenizer *t, const int32_t *ids, size_t n, int skip_special, char **out,
			      size_t *out_len)
{
	*out = NULL;
	*out_len = 0;
	sg_str *toks = sg_malloc((n ? n : 1) * sizeof(sg_str));
	if (!toks) return SG_FAIL(SG_ERR_NOMEM, "decode of %zu ids", n);
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		int32_t id = ids[i];
		if (id < 0 || id >= t->n_vocab || !t->tok[id].s) continue;
		if (skip_special && t->special[id]) continue;
		toks[k++] = t->tok[id];
	}
	sg_buf b = {0};
	sg_status st = sg_dec_apply(&t->dec, toks, k, &b);
	sg_free(toks);
	if (!st && !b.p && sg_buf_reserve(&b, 1)) st = SG_FAIL(SG_ERR_NOMEM, "decode");
	if (st) {
		sg_free(b.p);
		return st;
	}
	*out = b.p;
	*out_len = b.n;
	return SG_OK;
}

int32_t sg_tokenizer_n_vocab(const sg_tokenizer *t) { return t->n_vocab; }

const char *sg_tokenizer_token(const sg_tokenizer *t, int32_t id, size_t *len)
{
	if (id < 0 || id >= t->n_vocab || !t->tok[id].s) return NULL;
	if (len) *len = t->tok[id].n;
	return t->tok[id].s;
}

const char *sg_tokenizer_token_bytes(const sg_tokenizer *t, int32_t id, size_t *len)
{
	/* tmap exists when the model's spelling differs from its working form: byte-level BPE */
	if (id < 0 || id >= t->n_vocab || !t->tmap.slot || !t->mtok[id].s || !t->tok[id].s) return NULL;
	int32_t a = sg_strmap_get(&t->amap, t->tok[id].s, t->tok[id].n);
	if (a >= 0 && t->added[a].id == id) return NULL; /* an added token: its content, by decode */
	if (len) *len = t->mtok[id].n;
	return t->mtok[id].s;
}

int32_t sg_tokenizer_token_id(const sg_tokenizer *t, const char *s, size_t len)
{
	int32_t a = sg_strmap_get(&t->amap, s, len);
	if (a >= 0) return t->added[a].id;
	/* The model's spelling (tok) may differ from its working form (raw bytes). */
	return sg_strmap_get(t->tmap.slot ? &t->tmap : &t->mmap, s, len);
}

int sg_tokenizer_is_special(const sg_tokenizer *t, int32_t id)
{
	return id >= 0 && id < t->n_vocab && t->special[id];
}
int32_t sg_tokenizer_bos(const sg_tokenizer *t) { return t->bos_id; }
int32_t sg_tokenizer_eos(const sg_tokenizer *t) { return t->eos_id; }
