/* Text embeddings: tokenizer -> encoder (or a decoder's last hidden state) -> pooling (see embed.h). */
#include "engine/embed.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/json.h"
#include "base/mmap.h"
#include "formats/model_desc.h"
#include "formats/stconfig.h"
#include "models/bert.h"
#include "models/forward.h"
#include "models/model.h"
#include "text/tokenizer/tokenizer.h"

/* Decoders used as embedders: the context one input may have at most (the KV cache of one call
 * is sized to the input; this bounds it). */
#define LM_MAX_TOKENS 8192

struct sg_embedder {
	sg_bert *enc;     /* an encoder, or NULL when lm is set */
	sg_model *lm;     /* a decoder with an embedding head (last-token pooling) */
	sg_tokenizer *tok; /* NULL: ids only */
	sg_st_config pool;
	int dim, max_tokens;
};

int sg_embedder_dim(const sg_embedder *e) { return e->dim; }
int sg_embedder_max_tokens(const sg_embedder *e) { return e->max_tokens; }
int sg_embedder_has_tokenizer(const sg_embedder *e) { return e->tok != NULL; }

void sg_embedder_free(sg_embedder *e)
{
	if (!e) return;
	sg_bert_free(e->enc);
	if (e->lm) sg_model_free(e->lm);
	sg_tokenizer_free(e->tok);
	sg_free(e);
}

/* 1 when the folder's config.json describes a decoder (an LLM) rather than an encoder; 0 when it
 * is an encoder or cannot be read (the encoder loader then names what is wrong). */
static int is_decoder(const char *path)
{
	char cp[4096];
	char *txt = NULL;
	size_t n = 0;
	json_t *cfg = NULL;
	sg_model_desc d;
	int dec = 0;
	if (snprintf(cp, sizeof(cp), "%s/config.json", path) >= (int)sizeof(cp)) return 0;
	if (sg_read_file(cp, (size_t)16 << 20, &txt, &n)) {
		sg_error_clear();
		return 0;
	}
	if (!sg_json_parse(txt, n, "config.json", &cfg) && !sg_model_desc_from_config(cfg, &d)) {
		dec = d.arch != SG_ARCH_BERT && d.arch != SG_ARCH_WHISPER;
		sg_model_desc_free(&d);
	}
	sg_error_clear();
	json_decref(cfg);
	sg_free(txt);
	return dec;
}

/* A decoder as an embedder: only with an embedding head (sentence-transformers' modules.json
 * pooling the last token; Qwen3-Embedding's layout), never a plain chat model. */
static sg_status load_lm(sg_embedder *e, const char *path, const char *backend, int n_threads)
{
	sg_status st = sg_st_config_load(path, &e->pool);
	if (st) return st;
	if (!e->pool.from_folder || e->pool.mode != SG_POOL_LAST)
		return sg_error(SG_ERR_UNSUPPORTED, "embed: '%s' is a language model without an embedding head (a sentence-transformers "
						    "modules.json pooling the last token, as Qwen3-Embedding has)", path);
	sg_model_params mp = sg_model_default_params();
	mp.n_threads = n_threads;
	if (backend) mp.backend = backend;
	if ((st = sg_model_load(path, &mp, &e->lm))) return st;
	const sg_model_desc *d = &e->lm->desc;
	if (d->arch == SG_ARCH_QWEN3_NEXT || d->arch == SG_ARCH_GEMMA3 || d->arch == SG_ARCH_GEMMA4)
		return sg_error(SG_ERR_UNSUPPORTED, "embed: '%s' (%s): decoder embedders run the llama, mistral and qwen families",
				path, d->model_type);
	e->dim = d->dim;
	e->max_tokens = d->max_ctx > 0 && d->max_ctx < LM_MAX_TOKENS ? d->max_ctx : LM_MAX_TOKENS;
	if (e->pool.max_seq_length > 0 && e->pool.max_seq_length < e->max_tokens) e->max_tokens = e->pool.max_seq_length;
	if (e->pool.dim > 0 && e->pool.dim != e->dim)
		return sg_error(SG_ERR_FORMAT, "embed: '%s': the Pooling module expects %d dims, the model has %d", path, e->pool.dim,
				e->dim);
	return SG_OK;
}

sg_status sg_embedder_load(const char *path, const char *backend, int n_threads, sg_embedder **out)
{
	*out = NULL;
	sg_embedder *e = sg_calloc(1, sizeof(*e));
	if (!e) return sg_error(SG_ERR_NOMEM, "embed: loading '%s'", path);
	sg_bert_params bp = sg_bert_default_params();
	bp.backend = backend;
	bp.n_threads = n_threads;
	struct stat s;
	int lm = stat(path, &s) == 0 && S_ISDIR(s.st_mode) && is_decoder(path);
	sg_status st = lm ? load_lm(e, path, backend, n_threads) : sg_bert_load(path, &bp, &e->enc);
	if (!st && lm) {
		/* load_lm read the pooling and the sizes */
	} else if (!st && stat(path, &s) == 0 && S_ISDIR(s.st_mode)) st = sg_st_config_load(path, &e->pool);
	else if (!st) e->pool = sg_st_config_default();
	if (!st && !lm) {
		const sg_model_desc *d = sg_bert_desc(e->enc);
		e->dim = d->dim;
		e->max_tokens = sg_bert_max_tokens(e->enc);
		if (e->pool.max_seq_length > 0 && e->pool.max_seq_length < e->max_tokens) e->max_tokens = e->pool.max_seq_length;
		if (e->pool.dim > 0 && e->pool.dim != e->dim)
			st = sg_error(SG_ERR_FORMAT, "embed: '%s': the Pooling module expects %d dims, the encoder has %d", path,
				      e->pool.dim, e->dim);
	}
	char tj[4096];
	if (!st && snprintf(tj, sizeof(tj), "%s/tokenizer.json", path) < (int)sizeof(tj) && stat(tj, &s) == 0)
		st = sg_tokenizer_load(path, &e->tok);
	if (st) {
		sg_embedder_free(e);
		return st;
	}
	*out = e;
	return SG_OK;
}

/* The decoder's last-token state, normed as its head sees it, then the folder's Normalize. Each
 * call has its own forward state sized to the input, so calls may run at once. */
static sg_status embed_lm(sg_embedder *e, const int32_t *ids, int n, float *out)
{
	const sg_model_desc *d = &e->lm->desc;
	for (int i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= d->n_vocab)
			return sg_error(SG_ERR_RANGE, "embed: token %d = %d is outside the vocabulary [0, %d)", i, ids[i], d->n_vocab);
	sg_fwd_state fs;
	memset(&fs, 0, sizeof(fs));
	sg_status st = sg_fwd_state_init(e->lm, n, n < 256 ? n : 256, SG_TYPE_F32, &fs);
	if (!st) st = sg_forward_hidden_last(e->lm, &fs, ids, n, out);
	sg_fwd_state_free(e->lm, &fs);
	if (!st) st = sg_pool(&e->pool, out, NULL, 1, e->dim, out);
	return st;
}

sg_status sg_embedder_embed_ids(sg_embedder *e, const int32_t *ids, int n, float *out)
{
	if (n < 1) return sg_error(SG_ERR_INVALID_ARG, "embed: an input of no tokens");
	if (n > e->max_tokens)
		return sg_error(SG_ERR_RANGE, "embed: an input of %d tokens exceeds the model's limit of %d", n, e->max_tokens);
	if (e->lm) return embed_lm(e, ids, n, out);
	float *h = sg_malloc(sizeof(float) * (size_t)n * (size_t)e->dim);
	if (!h) return sg_error(SG_ERR_NOMEM, "embed: %d tokens", n);
	sg_status st = sg_bert_forward(e->enc, ids, NULL, NULL, n, h);
	if (!st) st = sg_pool(&e->pool, h, NULL, n, e->dim, out);
	sg_free(h);
	return st;
}

sg_status sg_embedder_embed_text(sg_embedder *e, const char *text, size_t len, int truncate, float *out, int *n_tokens)
{
	if (!e->tok) return sg_error(SG_ERR_UNSUPPORTED, "embed: the model folder has no tokenizer.json (give token ids)");
	sg_tokens t = {0};
	sg_status st = sg_tokenizer_encode(e->tok, text, len, 1, &t);
	if (!st && t.n == 0) st = sg_error(SG_ERR_INVALID_ARG, "embed: the text has no tokens");
	if (!st && t.n > (size_t)e->max_tokens) {
		if (!truncate)
			st = sg_error(SG_ERR_RANGE, "embed: an input of %zu tokens exceeds the model's limit of %d (truncate to embed its start)",
				      t.n, e->max_tokens);
		else {
			/* keep the closing special token ([SEP]) as the tokenizer's truncation does */
			int32_t last = t.ids[t.n - 1];
			t.n = (size_t)e->max_tokens;
			if (sg_tokenizer_is_special(e->tok, last)) t.ids[t.n - 1] = last;
		}
	}
	if (!st) st = sg_embedder_embed_ids(e, t.ids, (int)t.n, out);
	if (!st && n_tokens) *n_tokens = (int)t.n;
	sg_tokens_free(&t);
	return st;
}
