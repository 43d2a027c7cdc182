/* The embedding and reranking routes: OpenAI's POST /v1/embeddings, Ollama's POST /api/embed and
 * the older POST /api/embeddings, and the Jina/Cohere rerank shape (POST /v1/rerank, /rerank)
 * that llama.cpp serves. The parser is a pure function of the bytes (fuzzed with the other
 * request parsers); the run belongs to the inference worker and goes through engine/embed.h, so
 * every encoder family the engine loads is served here alike. */
#ifndef SG_SERVER_ROUTES_EMBED_H
#define SG_SERVER_ROUTES_EMBED_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/embed.h"
#include "server/request.h"

typedef struct sg_embed_req {
	sg_srv_route route;
	char *model;            /* never holds a NUL; "" when absent */
	int n;                  /* inputs (documents, for rerank) */
	sg_embed_input *in;     /* [n]: texts point into body, ids into ids */
	int32_t *ids;           /* the token ids of every id input, one after another */
	json_t *body;           /* the parsed body (owns the strings in points at) */
	int base64;             /* OpenAI encoding_format "base64" */
	int dimensions;         /* 0: the model's own */
	int truncate;           /* Ollama: default 1; elsewhere 0 unless asked */
	const char *prompt_name; /* one of the model's prompts (sentence-transformers'), in body; NULL:
	                          * the model's default prompt */
	const char *query;      /* rerank: [query_len] bytes in body */
	size_t query_len;
	int top_n;              /* rerank: 0 = all */
	int return_documents;   /* rerank: default 1 */
} sg_embed_req;

/* Parses body[0..len) for route (SG_ROUTE_OAI_EMBEDDINGS, SG_ROUTE_OLLAMA_EMBED,
 * SG_ROUTE_OLLAMA_EMBEDDINGS, SG_ROUTE_RERANK) into *r (sg_embed_req_free releases it, on error
 * too). At most max_inputs inputs. Returns 0, or the HTTP status set in *e: a missing or empty
 * input, an empty string, a wrong type, too many inputs, a bad encoding_format / dimensions /
 * top_n, each naming the field (and the input's index). */
int sg_embed_req_parse(sg_srv_route route, const char *body, size_t len, int max_inputs, sg_embed_req *r, sg_srv_err *e);
void sg_embed_req_free(sg_embed_req *r);

/* Worker: runs the request on e (a loaded embedder or cross-encoder served as `name`) and builds
 * the response body in the route's shape into *out (a new reference). ns_load: nanoseconds this
 * request spent loading the model (Ollama's load_duration). Returns 0, or the HTTP status set in
 * *err (an input over the model's limit without truncate, dimensions over the model's). */
int sg_embed_run(sg_embedder *e, const char *name, const sg_embed_req *r, uint64_t ns_load, json_t **out, sg_srv_err *err);

#endif
