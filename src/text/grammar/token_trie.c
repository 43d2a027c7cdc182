#include "text/grammar/token_trie.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/utf8.h"

typedef struct {
	const uint8_t *p;
	uint32_t len;
	int32_t id;
} tok_ref;

static int cmp_tok(const void *a, const void *b)
{
	const tok_ref *x = a, *y = b;
	uint32_t m = x->len < y->len ? x->len : y->len;
	int c = m ? memcmp(x->p, y->p, m) : 0;
	if (c) return c;
	if (x->len != y->len) return x->len < y->len ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

static void nodes_free(sg_trie_nodes *t)
{
	sg_free(t->byte);
	sg_free(t->depth);
	sg_free(t->skip);
	sg_free(t->tok_off);
	sg_free(t->tok_ids);
	sg_free(t->plain_sfx);
	memset(t, 0, sizeof(*t));
}

/* Builds a preorder trie from tokens sorted by bytes: each token adds nodes for the bytes past its
 * common prefix with the previous one, so nodes come out in preorder and the token end nodes in
 * non-decreasing order. */
static sg_status nodes_build(sg_trie_nodes *t, const tok_ref *toks, int n)
{
	size_t cap = 1;
	for (int i = 0; i < n; i++) cap += toks[i].len;
	if (cap > UINT32_MAX - 1) return SG_FAIL(SG_ERR_RANGE, "vocabulary has %zu bytes", cap);
	t->byte = sg_malloc(cap);
	t->depth = sg_malloc(cap * sizeof(uint16_t));
	t->skip = sg_malloc(cap * sizeof(uint32_t));
	t->tok_off = sg_malloc((cap + 1) * sizeof(uint32_t));
	t->tok_ids = sg_malloc(((size_t)n + 1) * sizeof(int32_t));
	t->plain_sfx = sg_malloc(cap);
	uint32_t *path = sg_malloc((size_t)(65536 + 1) * sizeof(uint32_t));
	int16_t *sfx = sg_malloc((size_t)(65536 + 1) * sizeof(int16_t));
	if (!t->byte || !t->depth || !t->skip || !t->tok_off || !t->tok_ids || !t->plain_sfx || !path || !sfx) {
		sg_free(path);
		sg_free(sfx);
		nodes_free(t);
		return SG_FAIL(SG_ERR_NOMEM, "trie of %zu nodes", cap);
	}
	uint32_t nn = 1;
	t->byte[0] = 0;
	t->depth[0] = 0;
	t->plain_sfx[0] = 0;
	path[0] = 0;
	int open = 1; /* path[0..open) are the nodes on the current root path */
	uint32_t *tok_node = sg_malloc(((size_t)n + 1) * sizeof(uint32_t));
	if (!tok_node) {
		sg_free(path);
		sg_free(sfx);
		nodes_free(t);
		return SG_FAIL(SG_ERR_NOMEM, "trie token table of %d", n);
	}
	const tok_ref *prev = NULL;
	uint16_t maxd = 0;
	for (int i = 0; i < n; i++) {
		const tok_ref *k = &toks[i];
		uint32_t lcp = 0;
		if (prev) {
			uint32_t m = prev->len < k->len ? prev->len : k->len;
			while (lcp < m && prev->p[lcp] == k->p[lcp]) lcp++;
		}
		/* close the nodes deeper than the common prefix */
		while ((uint32_t)open > lcp + 1) {
			open--;
			t->skip[path[open]] = nn;
		}
		for (uint32_t d = lcp; d < k->len; d++) {
			t->byte[nn] = k->p[d];
			t->depth[nn] = (uint16_t)(d + 1);
			t->plain_sfx[nn] = 0;
			path[open++] = nn;
			nn++;
		}
		tok_node[i] = path[k->len];
		/* code points of each plain suffix of this token, -1 where the suffix is not plain */
		sfx[k->len] = 0;
		for (uint32_t d = k->len; d-- > 0;) {
			uint8_t c = k->p[d];
			uint32_t cp;
			int cl = (c >= 0x80 && c <= 0xBF) ? 0 : sg_utf8_decode(k->p + d, k->len - d, &cp);
			if (cl == 0 || c < 0x20 || c == '"' || c == '\\' || sfx[d + (uint32_t)cl] < 0 ||
			    sfx[d + (uint32_t)cl] >= SG_TRIE_PLAIN_MAX)
				sfx[d] = -1;
			else
				sfx[d] = (int16_t)(sfx[d + (uint32_t)cl] + 1);
		}
		for (uint32_t d = 0; d <= k->len; d++) {
			int8_t *q = &t->plain_sfx[path[d]];
			if (*q >= 0) *q = sfx[d] < 0 ? -1 : (int8_t)(sfx[d] > *q ? sfx[d] : *q);
		}
		if (k->len > maxd) maxd = (uint16_t)k->len;
		prev = k;
	}
	while (open > 0) {
		open--;
		t->skip[path[open]] = nn;
	}
	/* CSR of tokens per node */
	int j = 0;
	for (uint32_t v = 0; v < nn; v++) {
		t->tok_off[v] = (uint32_t)j;
		while (j < n && tok_node[j] == v) {
			t->tok_ids[j] = toks[j].id;
			j++;
		}
	}
	t->tok_off[nn] = (uint32_t)j;
	t->n = nn;
	t->max_depth = maxd;
	sg_free(tok_node);
	sg_free(path);
	sg_free(sfx);
	return SG_OK;
}

/* Code points of a plain token, or -1 if the token is not plain. */
static int plain_chars(const uint8_t *p, uint32_t len)
{
	if (len == 0) return -1;
	int chars = 0;
	uint32_t i = 0;
	while (i < len) {
		uint8_t c = p[i];
		if (c < 0x20 || c == '"' || c == '\\') return -1;
		uint32_t cp;
		int k = sg_utf8_decode(p + i, len - i, &cp);
		if (k == 0) return -1;
		i += (uint32_t)k;
		if (++chars > SG_TRIE_PLAIN_MAX) return -1;
	}
	return chars;
}

sg_status sg_token_trie_build(const uint8_t *const *tok, const uint32_t *len, int n_vocab,
			      const int *special_ids, int n_special, const int *eot_ids, int n_eot,
			      sg_token_trie **out)
{
	*out = NULL;
	if (n_vocab <= 0 || !tok || !len || n_special < 0 || n_eot < 0)
		return SG_FAIL(SG_ERR_INVALID_ARG, "n_vocab %d, n_special %d, n_eot %d", n_vocab,
			       n_special, n_eot);
	sg_token_trie *t = sg_calloc(1, sizeof(*t));
	if (!t) return SG_FAIL(SG_ERR_NOMEM, "trie");
	t->n_vocab = n_vocab;
	t->words = (n_vocab + 31) / 32;
	t->special = sg_calloc((size_t)n_vocab, 1);
	t->eot = sg_calloc((size_t)n_eot + 1, sizeof(int32_t));
	tok_ref *all = sg_malloc((size_t)n_vocab * sizeof(tok_ref));
	tok_ref *imp = sg_malloc((size_t)n_vocab * sizeof(tok_ref));
	int8_t *chars = sg_malloc((size_t)n_vocab);
	t->plain_le = sg_calloc((size_t)(SG_TRIE_PLAIN_MAX + 1) * (size_t)t->words, sizeof(uint32_t));
	sg_status st = SG_OK;
	if (!t->special || !t->eot || !all || !imp || !chars || !t->plain_le) {
		st = SG_FAIL(SG_ERR_NOMEM, "trie tables for %d tokens", n_vocab);
		goto done;
	}
	for (int i = 0; i < n_special; i++) {
		if (special_ids[i] < 0 || special_ids[i] >= n_vocab) {
			st = SG_FAIL(SG_ERR_INVALID_ARG, "special id %d outside the vocabulary of %d",
				     special_ids[i], n_vocab);
			goto done;
		}
		t->special[special_ids[i]] = 1;
	}
	for (int i = 0; i < n_eot; i++) {
		if (eot_ids[i] < 0 || eot_ids[i] >= n_vocab) {
			st = SG_FAIL(SG_ERR_INVALID_ARG, "end-of-turn id %d outside the vocabulary of %d",
				     eot_ids[i], n_vocab);
			goto done;
		}
		t->eot[i] = eot_ids[i];
		t->special[eot_ids[i]] = 1;
	}
	t->n_eot = n_eot;
	int na = 0, ni = 0;
	for (int i = 0; i < n_vocab; i++) {
		chars[i] = -1;
		if (t->special[i] || len[i] == 0 || !tok[i]) continue;
		if (len[i] > 65535) {
			st = SG_FAIL(SG_ERR_RANGE, "token %d is %u bytes long", i, len[i]);
			goto done;
		}
		tok_ref r = {tok[i], len[i], i};
		all[na++] = r;
		int c = plain_chars(tok[i], len[i]);
		chars[i] = (int8_t)c;
		if (c < 0) imp[ni++] = r;
	}
	qsort(all, (size_t)na, sizeof(tok_ref), cmp_tok);
	qsort(imp, (size_t)ni, sizeof(tok_ref), cmp_tok);
	if ((st = nodes_build(&t->all, all, na)) != SG_OK) goto done;
	if ((st = nodes_build(&t->impure, imp, ni)) != SG_OK) goto done;
	for (int i = 0; i < n_vocab; i++) {
		if (chars[i] < 0) continue;
		for (int k = chars[i]; k <= SG_TRIE_PLAIN_MAX; k++)
			t->plain_le[(size_t)k * (size_t)t->words + (size_t)(i >> 5)] |= 1u << (i & 31);
	}
done:
	sg_free(all);
	sg_free(imp);
	sg_free(chars);
	if (st != SG_OK) {
		sg_token_trie_free(t);
		return st;
	}
	*out = t;
	return SG_OK;
}

void sg_token_trie_free(sg_token_trie *t)
{
	if (!t) return;
	nodes_free(&t->all);
	nodes_free(&t->impure);
	sg_free(t->plain_le);
	sg_free(t->eot);
	sg_free(t->special);
	sg_free(t);
}
