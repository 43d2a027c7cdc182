/* Response bodies of the OpenAI and Ollama routes: listings (answered on the connection thread)
 * and generations (run by the inference worker, streamed as SSE or NDJSON, or sent whole). */
#ifndef SG_SERVER_ROUTES_H
#define SG_SERVER_ROUTES_H

#include <jansson.h>

#include "server/job.h"
#include "server/model.h"
#include "server/request.h"

/* The error body in the format of the API the route belongs to. */
json_t *sg_routes_error_body(sg_srv_route route, const sg_srv_err *e);

/* GET /v1/models, /api/tags, /api/ps. */
json_t *sg_routes_oai_models(sg_srv_model *const *models, int n);
json_t *sg_routes_oai_model(const sg_srv_model *m);
json_t *sg_routes_ollama_tags(sg_srv_model *const *models, int n, int ps);
json_t *sg_routes_ollama_show(const sg_srv_model *m);

/* The worker's entry for every generation route (job->req.route says which). */
void sg_routes_run_generation(sg_job *job);

/* routes_anthropic.c: the Anthropic error envelope, and the worker's entry for /v1/messages. */
json_t *sg_routes_anthropic_error(const sg_srv_err *e);
void sg_routes_anthropic_run(sg_job *job);

/* "2024-05-01T12:00:00.000000Z" for now. */
void sg_routes_rfc3339(char *buf, size_t cap);

#endif
