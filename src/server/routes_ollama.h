/* The Ollama routes: /api/chat and /api/generate (request bodies with Ollama's option names and
 * defaults; answers whole or as NDJSON lines with thinking and tool_calls), /api/tags, /api/ps,
 * /api/show, and the answer to Ollama's "load" request. Errors are {"error": "..."}. */
#ifndef SG_SERVER_ROUTES_OLLAMA_H
#define SG_SERVER_ROUTES_OLLAMA_H

#include <jansson.h>

#include "server/job.h"
#include "server/model.h"
#include "server/pool.h"
#include "server/request.h"

/* The body of req->route (chat, generate; *req already begun by sg_srv_req_begin) into *req.
 * Returns 0, or the HTTP status set in *err. */
int sg_ollama_parse(const json_t *body, sg_srv_req *req, const sg_srv_limits *lim, sg_srv_err *err);

/* /api/tags (every configured model; ps 0) or /api/ps (the resident ones; ps 1). */
json_t *sg_ollama_tags(const sg_pool_item *items, int n, int ps);
/* /api/show of a resident model. */
json_t *sg_ollama_show(const sg_srv_model *m);
/* The answer to a request with nothing to generate (Ollama's way of loading a model). */
json_t *sg_ollama_loaded(const sg_srv_model *m, int chat);

/* The worker's entry for a chat or generate job. */
void sg_ollama_run(sg_job *job);

#endif
