/* GGUF files: tokenizer.ggml.* metadata of a parsed GGUF into sg_vocab_desc. */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/mmap.h"
#include "formats/gguf.h"
#include "text/tokenizer/tokenizer_int.h"

/* Copies a string array's entries (pointers into the map) into arrays of pointer + length. */
static sg_status str_array(const sg_gguf_kv *kv, const char *key, const char ***s, uint32_t **lens, int32_t *n)
{
	if (kv->type != SG_GGUF_ARRAY || kv->arr_type != SG_GGUF_STRING || kv->arr_n >= SG_TOK_MAX_ID)
		return SG_FAIL(SG_ERR_FORMAT, "gguf: %s must be an array of fewer than %d strings", key, SG_TOK_MAX_ID);
	*s = sg_calloc(kv->arr_n ? kv->arr_n : 1, sizeof(char *));
	*lens = sg_calloc(kv->arr_n ? kv->arr_n : 1, sizeof(uint32_t));
	if (!*s || !*lens) return SG_FAIL(SG_ERR_NOMEM, "gguf: %s", key);
	sg_gguf_str_iter it;
	sg_gguf_str_iter_init(kv, &it);
	const char *p;
	uint64_t len;
	int32_t i = 0;
	while (i < (int32_t)kv->arr_n && sg_gguf_str_next(&it, &p, &len)) {
		if (len > UINT32_MAX / 4) return SG_FAIL(SG_ERR_FORMAT, "gguf: %s[%d] is too long", key, i);
		(*s)[i] = p;
		(*lens)[i++] = (uint32_t)len;
	}
	if (i != (int32_t)kv->arr_n) return SG_FAIL(SG_ERR_FORMAT, "gguf: %s has %d strings, expected %llu", key, i, (unsigned long long)kv->arr_n);
	*n = i;
	return SG_OK;
}

static int32_t get_id(const sg_gguf *g, const char *key)
{
	int64_t v;
	return sg_gguf_get_int(g, key, &v) == SG_OK && v >= 0 && v <= INT32_MAX ? (int32_t)v : -1;
}

static int get_flag(const sg_gguf *g, const char *key)
{
	int64_t v;
	return sg_gguf_get_int(g, key, &v) == SG_OK ? v != 0 : -1;
}

sg_status sg_tokenizer_from_gguf(const sg_gguf *g, sg_tokenizer **out)
{
	*out = NULL;
	const char *path = g->path ? g->path : "(gguf)";
	sg_vocab_desc d;
	memset(&d, 0, sizeof(d));
	uint32_t *tlen = NULL, *mlen = NULL;
	const char **toks = NULL, **merges = NULL;
	float *scores = NULL;
	int32_t *types = NULL;
	sg_status st;
	const sg_gguf_kv *kt = sg_gguf_find(g, "tokenizer.ggml.tokens");
	if ((st = sg_gguf_get_str(g, "tokenizer.ggml.model", &d.model)) || !kt) {
		st = SG_FAIL(SG_ERR_FORMAT, "gguf: '%s' has no tokenizer (tokenizer.ggml.model / tokens)", path);
		goto done;
	}
	sg_gguf_get_str(g, "general.architecture", &d.arch);
	sg_gguf_get_str(g, "tokenizer.ggml.pre", &d.pre);
	if ((st = str_array(kt, "tokenizer.ggml.tokens", &toks, &tlen, &d.n_tokens))) goto done;
	d.tokens = toks;
	d.token_lens = tlen;
	const sg_gguf_kv *km = sg_gguf_find(g, "tokenizer.ggml.merges");
	if (km) {
		if ((st = str_array(km, "tokenizer.ggml.merges", &merges, &mlen, &d.n_merges))) goto done;
		d.merges = merges;
		d.merge_lens = mlen;
	}
	const sg_gguf_kv *ks = sg_gguf_find(g, "tokenizer.ggml.scores");
	if (ks && ks->arr_n == (uint64_t)d.n_tokens) {
		scores = sg_malloc((size_t)d.n_tokens * sizeof(float));
		if (!scores) goto oom;
		for (int32_t i = 0; i < d.n_tokens; i++) {
			double v;
			if ((st = sg_gguf_arr_num(ks, (uint64_t)i, &v))) goto done;
			scores[i] = (float)v;
		}
		d.scores = scores;
	}
	const sg_gguf_kv *ky = sg_gguf_find(g, "tokenizer.ggml.token_type");
	if (ky && ky->arr_n == (uint64_t)d.n_tokens) {
		types = sg_malloc((size_t)d.n_tokens * sizeof(int32_t));
		if (!types) goto oom;
		for (int32_t i = 0; i < d.n_tokens; i++) {
			int64_t v;
			if ((st = sg_gguf_arr_int(ky, (uint64_t)i, &v))) goto done;
			types[i] = (int32_t)v;
		}
		d.types = types;
	}
	d.bos_id = get_id(g, "tokenizer.ggml.bos_token_id");
	d.eos_id = get_id(g, "tokenizer.ggml.eos_token_id");
	d.unk_id = get_id(g, "tokenizer.ggml.unknown_token_id");
	d.pad_id = get_id(g, "tokenizer.ggml.padding_token_id");
	d.add_bos = get_flag(g, "tokenizer.ggml.add_bos_token");
	d.add_eos = get_flag(g, "tokenizer.ggml.add_eos_token");
	/* The reference defaults add_bos_token to true for SentencePiece vocabularies that do not say. */
	if (d.add_bos < 0 && !strcmp(d.model, "llama")) d.add_bos = 1;
	st = sg_tokenizer_from_vocab(&d, out);
	if (st) sg_error_wrap(st, "%s", path);
	goto done;
oom:
	st = SG_FAIL(SG_ERR_NOMEM, "gguf tokenizer");
done:
	sg_free(toks);
	sg_free(tlen);
	sg_free(merges);
	sg_free(mlen);
	sg_free(scores);
	sg_free(types);
	return st;
}

sg_status sg_tokenizer_load_gguf(const char *path, const sg_gguf *parsed, sg_tokenizer **out)
{
	*out = NULL;
	if (parsed && parsed->path && !strcmp(parsed->path, path)) return sg_tokenizer_from_gguf(parsed, out);
	sg_mapped_file f;
	sg_status st = sg_mmap_open(path, &f);
	if (st) return st;
	sg_gguf g;
	if (!(st = sg_gguf_parse(f.data, f.size, path, 0, &g))) {
		st = sg_tokenizer_from_gguf(&g, out);
		sg_gguf_free(&g);
	}
	sg_mmap_close(&f);
	return st;
}
