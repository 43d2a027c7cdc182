/* The public embedding and reranking calls (include/saragossa.h) over engine/embed.h. */
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "engine/embed.h"
#include "saragossa.h"

struct sg_embed_model {
	sg_embedder *e;
};

sg_embed_params sg_embed_default_params(void)
{
	sg_embed_params p = {.backend = NULL, .n_threads = 0};
	return p;
}

sg_status sg_embed_load(const char *path, const sg_embed_params *params, sg_embed_model **out)
{
	if (!out) return SG_FAIL(SG_ERR_INVALID_ARG, "out is NULL");
	*out = NULL;
	if (!path || !path[0]) return SG_FAIL(SG_ERR_INVALID_ARG, "path is %s", path ? "empty" : "NULL");
	sg_embed_params p = params ? *params : sg_embed_default_params();
	if (p.n_threads < 0) return SG_FAIL(SG_ERR_INVALID_ARG, "n_threads = %d must be >= 0", p.n_threads);
	sg_embed_model *m = sg_calloc(1, sizeof *m);
	if (!m) return SG_FAIL(SG_ERR_NOMEM, "model handle");
	sg_status st = sg_embedder_load(path, p.backend, p.n_threads, &m->e);
	if (st) {
		sg_free(m);
		return st;
	}
	*out = m;
	return SG_OK;
}

void sg_embed_free(sg_embed_model *m)
{
	if (!m) return;
	sg_embedder_free(m->e);
	sg_free(m);
}

int sg_embed_dim(const sg_embed_model *m) { return m ? sg_embedder_dim(m->e) : 0; }
int sg_embed_max_tokens(const sg_embed_model *m) { return m ? sg_embedder_max_tokens(m->e) : 0; }
int sg_embed_is_reranker(const sg_embed_model *m) { return m ? sg_embedder_is_reranker(m->e) : 0; }

/* Embeds in[0..n) into out with the requested dimensions. The full vectors need dim floats each
 * and out may hold fewer (dimensions < dim): they go through a buffer of their own then. */
static sg_status embed(sg_embed_model *m, const char *prompt, const sg_embed_input *in, size_t n, int truncate, int dimensions,
		       float *out, int *n_tokens)
{
	int dim = sg_embedder_dim(m->e);
	if (n > (size_t)1 << 24) return SG_FAIL(SG_ERR_RANGE, "%zu inputs in one call", n);
	if (dimensions < 0 || dimensions > dim)
		return SG_FAIL(SG_ERR_RANGE, "dimensions = %d is outside [0, %d] (0: the model's %d)", dimensions, dim, dim);
	float *v = dimensions && dimensions < dim ? sg_malloc(sizeof(float) * n * (size_t)dim) : out;
	if (!v) return SG_FAIL(SG_ERR_NOMEM, "%zu vectors", n);
	sg_status st = sg_embedder_embed_batch_prompt(m->e, prompt, in, (int)n, truncate, v, n_tokens);
	if (!st && dimensions && dimensions < dim) st = sg_embedder_truncate(m->e, v, (int)n, dimensions);
	if (!st && dimensions && dimensions < dim) memcpy(out, v, sizeof(float) * n * (size_t)dimensions);
	if (v != out) sg_free(v);
	return st;
}

sg_status sg_embed_texts(sg_embed_model *m, const char *const *texts, const size_t *lens, size_t n, int truncate,
			 int dimensions, float *out, int *n_tokens)
{
	return sg_embed_texts_prompt(m, NULL, texts, lens, n, truncate, dimensions, out, n_tokens);
}

int sg_embed_n_prompts(const sg_embed_model *m) { return m ? sg_embedder_n_prompts(m->e) : 0; }
const char *sg_embed_prompt_name(const sg_embed_model *m, int i) { return m ? sg_embedder_prompt_name(m->e, i) : NULL; }

const char *sg_embed_prompt(const sg_embed_model *m, const char *name)
{
	const char *text = NULL;
	if (!m || sg_embedder_prompt(m->e, name, &text)) {
		sg_error_clear();
		return NULL;
	}
	return text;
}

sg_status sg_embed_texts_prompt(sg_embed_model *m, const char *prompt, const char *const *texts, const size_t *lens, size_t n,
				int truncate, int dimensions, float *out, int *n_tokens)
{
	if (!m || !texts || !out || !n) return SG_FAIL(SG_ERR_INVALID_ARG, "%s", !n ? "no texts" : "a NULL argument");
	sg_embed_input *in = sg_calloc(n, sizeof *in);
	if (!in) return SG_FAIL(SG_ERR_NOMEM, "%zu inputs", n);
	sg_status st = SG_OK;
	for (size_t i = 0; i < n && !st; i++) {
		if (!texts[i]) st = SG_FAIL(SG_ERR_INVALID_ARG, "texts[%zu] is NULL", i);
		else in[i] = (sg_embed_input){.text = texts[i], .len = lens ? lens[i] : strlen(texts[i])};
	}
	if (!st) st = embed(m, prompt, in, n, truncate, dimensions, out, n_tokens);
	sg_free(in);
	return st;
}

sg_status sg_embed_tokens(sg_embed_model *m, const int32_t *const *ids, const int *n_ids, size_t n, int dimensions, float *out)
{
	if (!m || !ids || !n_ids || !out || !n) return SG_FAIL(SG_ERR_INVALID_ARG, "%s", !n ? "no inputs" : "a NULL argument");
	sg_embed_input *in = sg_calloc(n, sizeof *in);
	if (!in) return SG_FAIL(SG_ERR_NOMEM, "%zu inputs", n);
	sg_status st = SG_OK;
	for (size_t i = 0; i < n && !st; i++) {
		if (!ids[i] && n_ids[i]) st = SG_FAIL(SG_ERR_INVALID_ARG, "ids[%zu] is NULL", i);
		else in[i] = (sg_embed_input){.ids = ids[i], .n_ids = n_ids[i]};
	}
	if (!st) st = embed(m, "", in, n, 0, dimensions, out, NULL);
	sg_free(in);
	return st;
}

sg_status sg_rerank(sg_embed_model *m, const char *query, const char *const *docs, size_t n, int truncate, float *scores)
{
	if (!m || !query || !docs || !scores || !n) return SG_FAIL(SG_ERR_INVALID_ARG, "%s", !n ? "no documents" : "a NULL argument");
	if (n > (size_t)1 << 24) return SG_FAIL(SG_ERR_RANGE, "%zu documents in one call", n);
	sg_embed_input *in = sg_calloc(n, sizeof *in);
	if (!in) return SG_FAIL(SG_ERR_NOMEM, "%zu documents", n);
	sg_status st = SG_OK;
	for (size_t i = 0; i < n && !st; i++) {
		if (!docs[i]) st = SG_FAIL(SG_ERR_INVALID_ARG, "docs[%zu] is NULL", i);
		else in[i] = (sg_embed_input){.text = docs[i], .len = strlen(docs[i])};
	}
	if (!st) st = sg_embedder_rerank(m->e, query, strlen(query), in, (int)n, truncate, scores, NULL);
	sg_free(in);
	return st;
}
