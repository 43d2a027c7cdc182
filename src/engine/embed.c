/* Text embeddings: tokenizer -> encoder -> pooling (see embed.h). */
#include "engine/embed.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/error.h"
#include "formats/stconfig.h"
#include "models/bert.h"
#include "text/tokenizer/tokenizer.h"

struct sg_embedder {
	sg_bert *enc;
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
	sg_tokenizer_free(e->tok);
	sg_free(e);
}

sg_status sg_embedder_load(const char *path, const char *backend, int n_threads, sg_embedder **out)
{
	*out = NULL;
	sg_embedder *e = sg_calloc(1, sizeof(*e));
	if (!e) return sg_error(SG_ERR_NOMEM, "embed: loading '%s'", path);
	sg_bert_params bp = sg_bert_default_params();
	bp.backend = backend;
	bp.n_threads = n_threads;
	sg_status st = sg_bert_load(path, &bp, &e->enc);
	struct stat s;
	if (!st && stat(path, &s) == 0 && S_ISDIR(s.st_mode)) st = sg_st_config_load(path, &e->pool);
	else if (!st) e->pool = sg_st_config_default();
	if (!st) {
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

sg_status sg_embedder_embed_ids(sg_embedder *e, const int32_t *ids, int n, float *out)
{
	if (n < 1) return sg_error(SG_ERR_INVALID_ARG, "embed: an input of no tokens");
	if (n > e->max_tokens)
		return sg_error(SG_ERR_RANGE, "embed: an input of %d tokens exceeds the model's limit of %d", n, e->max_tokens);
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
