/* Embedding and rerank routes (see routes_embed.h). */
#include "server/routes_embed.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/timer.h"

void sg_embed_req_free(sg_embed_req *r)
{
	sg_free(r->model);
	sg_free(r->in);
	sg_free(r->ids);
	json_decref(r->body);
	memset(r, 0, sizeof(*r));
}

static int is_ids(const json_t *a)
{
	return json_is_array(a) && json_array_size(a) > 0 && json_is_integer(json_array_get(a, 0));
}

/* One text input from v (a string), named `name` in errors. */
static int text_input(const json_t *v, const char *name, sg_embed_input *out, sg_srv_err *e)
{
	if (!json_is_string(v)) return sg_srv_wrong_type(e, name, "a string", v);
	size_t n = json_string_length(v);
	if (!n) return -sg_srv_err_set(e, 400, NULL, name, "'%s' is an empty string: there is nothing to embed", name);
	*out = (sg_embed_input){.text = json_string_value(v), .len = n};
	return 1;
}

/* Token ids from the array a (non-negative integers below 2^31) appended at ids[*used]. */
static int ids_input(const json_t *a, const char *name, int32_t *ids, size_t *used, sg_embed_input *out, sg_srv_err *e)
{
	size_t k;
	json_t *x;
	if (!json_array_size(a)) return -sg_srv_err_set(e, 400, NULL, name, "'%s' is an empty list of token ids", name);
	out->ids = ids + *used;
	out->n_ids = (int)json_array_size(a);
	json_array_foreach(a, k, x) {
		json_int_t v = json_is_integer(x) ? json_integer_value(x) : -1;
		if (v < 0 || v > INT32_MAX)
			return -sg_srv_err_set(e, 400, NULL, name, "'%s[%zu]' must be a token id (an integer >= 0)", name, k);
		ids[(*used)++] = (int32_t)v;
	}
	return 1;
}

/* The input field: a string, an array of strings, an array of token ids or an array of arrays
 * of token ids (OpenAI's four forms; Ollama takes the first two). */
static int parse_input(sg_embed_req *r, const json_t *v, const char *name, int ids_ok, int max_inputs, sg_srv_err *e)
{
	char nm[48];
	if (!v || json_is_null(v)) return -sg_srv_err_set(e, 400, NULL, name, "'%s' is required", name);
	if (json_is_string(v)) {
		r->in = sg_calloc(1, sizeof(*r->in));
		if (!r->in) return -sg_srv_oom(e);
		r->n = 1;
		return text_input(v, name, &r->in[0], e);
	}
	if (!json_is_array(v))
		return sg_srv_wrong_type(e, name, ids_ok ? "a string, an array of strings or of token ids" : "a string or an array of strings", v);
	size_t n = json_array_size(v);
	if (!n) return -sg_srv_err_set(e, 400, NULL, name, "'%s' is an empty array: give at least one input", name);
	int flat_ids = is_ids(v);
	if (flat_ids && !ids_ok) return sg_srv_wrong_type(e, name, "a string or an array of strings", v);
	size_t n_in = flat_ids ? 1 : n;
	if (n_in > (size_t)max_inputs)
		return -sg_srv_err_set(e, 400, NULL, name, "'%s' holds %zu inputs, over this server's limit of %d per request", name, n_in,
				       max_inputs);
	size_t n_ids = 0, k;
	json_t *x;
	if (flat_ids) n_ids = n;
	else if (ids_ok)
		json_array_foreach(v, k, x) if (json_is_array(x)) n_ids += json_array_size(x);
	r->in = sg_calloc(n_in, sizeof(*r->in));
	r->ids = n_ids ? sg_malloc(sizeof(int32_t) * n_ids) : NULL;
	if (!r->in || (n_ids && !r->ids)) return -sg_srv_oom(e);
	r->n = (int)n_in;
	size_t used = 0;
	if (flat_ids) return ids_input(v, name, r->ids, &used, &r->in[0], e);
	json_array_foreach(v, k, x) {
		snprintf(nm, sizeof nm, "%s[%zu]", name, k);
		int st = ids_ok && json_is_array(x) ? ids_input(x, nm, r->ids, &used, &r->in[k], e)
			 : json_is_string(x)      ? text_input(x, nm, &r->in[k], e)
						  : sg_srv_wrong_type(e, nm, ids_ok ? "a string or an array of token ids" : "a string", x);
		if (st < 0) return st;
	}
	return 1;
}

static int parse_rerank(sg_embed_req *r, const json_t *b, int max_inputs, sg_srv_err *e)
{
	int st = sg_srv_get_text(b, "query", "query", &r->query, &r->query_len, e);
	if (st < 0) return st;
	if (!st) return -sg_srv_err_set(e, 400, NULL, "query", "'query' (a string) is required");
	if (!r->query_len) return -sg_srv_err_set(e, 400, NULL, "query", "'query' is an empty string");
	const json_t *d = json_object_get(b, "documents");
	if (!d || json_is_null(d)) return -sg_srv_err_set(e, 400, NULL, "documents", "'documents' (an array of strings) is required");
	if (!json_is_array(d)) return sg_srv_wrong_type(e, "documents", "an array of strings", d);
	size_t n = json_array_size(d), k;
	json_t *x;
	if (!n) return -sg_srv_err_set(e, 400, NULL, "documents", "'documents' is an empty array: give at least one document");
	if (n > (size_t)max_inputs)
		return -sg_srv_err_set(e, 400, NULL, "documents", "'documents' holds %zu documents, over this server's limit of %d per request",
				       n, max_inputs);
	r->in = sg_calloc(n, sizeof(*r->in));
	if (!r->in) return -sg_srv_oom(e);
	r->n = (int)n;
	json_array_foreach(d, k, x) {
		char nm[48];
		snprintf(nm, sizeof nm, "documents[%zu]", k);
		/* Cohere's and Jina's {"text": ...} objects as well as plain strings */
		const json_t *t = json_is_object(x) ? json_object_get(x, "text") : x;
		if (!json_is_string(t)) return sg_srv_wrong_type(e, nm, "a string (or an object with a string 'text')", x);
		r->in[k] = (sg_embed_input){.text = json_string_value(t), .len = json_string_length(t)};
	}
	int64_t v = 0;
	if ((st = sg_srv_get_int(b, "top_n", "top_n", 1, INT32_MAX, &v, e)) < 0) return st;
	r->top_n = st ? (int)v : 0;
	r->return_documents = 1;
	if ((st = sg_srv_get_bool(b, "return_documents", "return_documents", &r->return_documents, e)) < 0) return st;
	if ((st = sg_srv_get_bool(b, "truncate", "truncate", &r->truncate, e)) < 0) return st;
	return 0;
}

int sg_embed_req_parse(sg_srv_route route, const char *body, size_t len, int max_inputs, sg_embed_req *r, sg_srv_err *e)
{
	memset(r, 0, sizeof(*r));
	r->route = route;
	int st = sg_srv_body_object(body, len, &r->body, e);
	if (st) return st;
	const json_t *b = r->body;
	const char *model = NULL;
	if ((st = sg_srv_get_str(b, "model", "model", &model, e)) < 0) return -st;
	if (!st && route != SG_ROUTE_RERANK) return sg_srv_err_set(e, 400, NULL, "model", "'model' (a string) is required");
	if (sg_srv_dup(&r->model, model ? model : "", e)) return 500;
	int64_t v = 0;
	switch (route) {
	case SG_ROUTE_OAI_EMBEDDINGS: {
		if ((st = parse_input(r, json_object_get(b, "input"), "input", 1, max_inputs, e)) < 0) return -st;
		const char *fmt = NULL;
		if ((st = sg_srv_get_str(b, "encoding_format", "encoding_format", &fmt, e)) < 0) return -st;
		if (st && strcmp(fmt, "float") && strcmp(fmt, "base64"))
			return sg_srv_err_set(e, 400, NULL, "encoding_format", "'encoding_format' must be \"float\" or \"base64\", not \"%.40s\"",
					      fmt);
		r->base64 = st && !strcmp(fmt, "base64");
		break;
	}
	case SG_ROUTE_OLLAMA_EMBED:
		if ((st = parse_input(r, json_object_get(b, "input"), "input", 0, max_inputs, e)) < 0) return -st;
		r->truncate = 1; /* Ollama truncates unless told not to */
		break;
	case SG_ROUTE_OLLAMA_EMBEDDINGS: {
		const json_t *p = json_object_get(b, "prompt");
		if (!p || json_is_null(p)) return sg_srv_err_set(e, 400, NULL, "prompt", "'prompt' (a string) is required");
		if ((st = parse_input(r, p, "prompt", 0, 1, e)) < 0) return -st;
		if (!json_is_string(p)) return -sg_srv_wrong_type(e, "prompt", "a string", p);
		r->truncate = 1;
		break;
	}
	case SG_ROUTE_RERANK:
		if ((st = parse_rerank(r, b, max_inputs, e)) < 0) return -st;
		return 0;
	default: return sg_srv_err_set(e, 500, "server_error", NULL, "not an embedding route");
	}
	if ((st = sg_srv_get_int(b, "dimensions", "dimensions", 1, 1 << 20, &v, e)) < 0) return -st;
	r->dimensions = st ? (int)v : 0;
	if (route != SG_ROUTE_OLLAMA_EMBEDDINGS && (st = sg_srv_get_str(b, "prompt_name", "prompt_name", &r->prompt_name, e)) < 0)
		return -st;
	if ((st = sg_srv_get_bool(b, "truncate", "truncate", &r->truncate, e)) < 0) return -st;
	return 0;
}

/* RFC 4648 base64 of n bytes (OpenAI's base64 embeddings: the little-endian float32 bytes). */
static json_t *base64_floats(const float *v, int n)
{
	static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const unsigned char *p = (const unsigned char *)v;
	size_t len = sizeof(float) * (size_t)n, o = 0;
	char *s = sg_malloc((len + 2) / 3 * 4 + 1);
	if (!s) return NULL;
	for (size_t i = 0; i < len; i += 3) {
		uint32_t w = (uint32_t)p[i] << 16 | (i + 1 < len ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < len ? p[i + 2] : 0);
		s[o++] = tab[w >> 18 & 63];
		s[o++] = tab[w >> 12 & 63];
		s[o++] = i + 1 < len ? tab[w >> 6 & 63] : '=';
		s[o++] = i + 2 < len ? tab[w & 63] : '=';
	}
	json_t *j = json_stringn(s, o);
	sg_free(s);
	return j;
}

static json_t *float_array(const float *v, int n)
{
	json_t *a = json_array();
	for (int i = 0; a && i < n; i++)
		if (json_array_append_new(a, json_real((double)v[i]))) {
			json_decref(a);
			return NULL;
		}
	return a;
}

/* Best score first, ties in input order (qsort_r's context: the scores). */
static int by_score(const void *a, const void *b, void *scores)
{
	const float *s = scores;
	int x = *(const int *)a, y = *(const int *)b;
	if (s[x] != s[y]) return s[x] > s[y] ? -1 : 1;
	return x - y;
}

static int engine_err(sg_status st, const char *field, sg_srv_err *err)
{
	int status = st == SG_ERR_NOMEM ? 503 : st == SG_ERR_RANGE || st == SG_ERR_INVALID_ARG || st == SG_ERR_UNSUPPORTED ? 400 : 500;
	const char *what = sg_last_error();
	/* the engine names the input ("input 3: embed: an input of 600 tokens exceeds ...") */
	return sg_srv_err_set(err, status, status == 500 ? "server_error" : NULL, field, "%s", what);
}

static int run_rerank(sg_embedder *e, const char *name, const sg_embed_req *r, json_t **out, sg_srv_err *err)
{
	float *scores = sg_malloc(sizeof(float) * (size_t)r->n);
	int *ntok = sg_malloc(sizeof(int) * (size_t)r->n), *order = sg_malloc(sizeof(int) * (size_t)r->n);
	int status = 0;
	if (!scores || !ntok || !order) status = sg_srv_oom(err);
	sg_status st = status ? SG_OK : sg_embedder_rerank(e, r->query, r->query_len, r->in, r->n, r->truncate, scores, ntok);
	if (!status && st) status = engine_err(st, "documents", err);
	if (!status) {
		json_int_t tokens = 0;
		for (int i = 0; i < r->n; i++) tokens += ntok[i], order[i] = i;
		qsort_r(order, (size_t)r->n, sizeof(int), by_score, scores);
		int k = r->top_n > 0 && r->top_n < r->n ? r->top_n : r->n;
		json_t *res = json_array();
		for (int i = 0; res && i < k; i++) {
			const sg_embed_input *d = &r->in[order[i]];
			json_t *o = json_pack("{s:i,s:f}", "index", order[i], "relevance_score", (double)scores[order[i]]);
			if (o && r->return_documents) json_object_set_new(o, "document", json_pack("{s:s%}", "text", d->text, d->len));
			json_array_append_new(res, o);
		}
		*out = json_pack("{s:s,s:s,s:o,s:{s:I,s:I}}", "object", "list", "model", name, "results", res, "usage", "prompt_tokens",
				 tokens, "total_tokens", tokens);
		if (!*out) status = sg_srv_oom(err);
	}
	sg_free(scores);
	sg_free(ntok);
	sg_free(order);
	return status;
}

int sg_embed_run(sg_embedder *e, const char *name, const sg_embed_req *r, uint64_t ns_load, json_t **out, sg_srv_err *err)
{
	*out = NULL;
	int rerank = r->route == SG_ROUTE_RERANK;
	if (rerank != sg_embedder_is_reranker(e)) {
		int st = sg_srv_err_set(err, 400, NULL, "model",
					rerank ? "model '%s' is an embedding model, not a reranker (a cross-encoder): it cannot score "
						 "documents; use /v1/embeddings"
					       : "model '%s' is a reranker (a cross-encoder): it scores (query, document) pairs on /v1/rerank "
						 "and makes no embeddings",
					name);
		snprintf(err->code, sizeof err->code, "model_not_supported");
		return st;
	}
	if (rerank) return run_rerank(e, name, r, out, err);
	int dim = sg_embedder_dim(e);
	if (r->dimensions > dim)
		return sg_srv_err_set(err, 400, NULL, "dimensions", "'dimensions' is %d, over the %d dimensions of model '%s'", r->dimensions,
				      dim, name);
	uint64_t t0 = sg_time_ns();
	float *v = sg_malloc(sizeof(float) * (size_t)r->n * (size_t)dim);
	int *ntok = sg_malloc(sizeof(int) * (size_t)r->n);
	int status = 0;
	if (!v || !ntok) status = sg_srv_oom(err);
	int ollama = r->route != SG_ROUTE_OAI_EMBEDDINGS;
	const char *field = r->route == SG_ROUTE_OLLAMA_EMBEDDINGS ? "prompt" : "input";
	const char *prompt = NULL;
	if (!status && r->prompt_name && sg_embedder_prompt(e, r->prompt_name, &prompt)) {
		status = sg_srv_err_set(err, 400, NULL, "prompt_name", "%s", sg_last_error());
		sg_error_clear();
	}
	sg_status st = status ? SG_OK : sg_embedder_embed_batch_prompt(e, prompt, r->in, r->n, r->truncate, v, ntok);
	if (!status && st) status = engine_err(st, field, err);
	if (!status && r->dimensions) {
		sg_embedder_truncate(e, v, r->n, r->dimensions);
		dim = r->dimensions;
	}
	json_int_t tokens = 0;
	for (int i = 0; !status && i < r->n; i++) tokens += ntok[i];
	if (!status && r->route == SG_ROUTE_OLLAMA_EMBEDDINGS) {
		*out = json_pack("{s:o}", "embedding", float_array(v, dim));
	} else if (!status && ollama) {
		json_t *a = json_array();
		for (int i = 0; a && i < r->n; i++) json_array_append_new(a, float_array(v + (size_t)i * dim, dim));
		uint64_t total = sg_time_ns() - t0 + ns_load;
		*out = json_pack("{s:s,s:o,s:I,s:I,s:I}", "model", name, "embeddings", a, "total_duration", (json_int_t)total,
				 "load_duration", (json_int_t)ns_load, "prompt_eval_count", tokens);
	} else if (!status) {
		json_t *data = json_array();
		for (int i = 0; data && i < r->n; i++) {
			const float *row = v + (size_t)i * dim;
			json_array_append_new(data, json_pack("{s:s,s:i,s:o}", "object", "embedding", "index", i, "embedding",
							      r->base64 ? base64_floats(row, dim) : float_array(row, dim)));
		}
		*out = json_pack("{s:s,s:o,s:s,s:{s:I,s:I}}", "object", "list", "data", data, "model", name, "usage", "prompt_tokens", tokens,
				 "total_tokens", tokens);
	}
	if (!status && !*out) status = sg_srv_oom(err);
	sg_free(v);
	sg_free(ntok);
	return status;
}
