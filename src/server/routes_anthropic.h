/* The Anthropic Messages routes: POST /v1/messages and /v1/messages/count_tokens (the body
 * converted to the OpenAI message shapes the chat templates take; answers as content blocks or
 * the Messages SSE event sequence). Errors are Anthropic's envelope (server/response.h). */
#ifndef SG_SERVER_ROUTES_ANTHROPIC_H
#define SG_SERVER_ROUTES_ANTHROPIC_H

#include <jansson.h>

#include "server/job.h"
#include "server/request.h"

/* The Messages body (*req already begun by sg_srv_req_begin) into *req: messages and tools in
 * the OpenAI shapes. Returns 0, or the HTTP status set in *err. */
int sg_anthropic_parse(const json_t *body, sg_srv_req *req, const sg_srv_limits *lim, sg_srv_err *err);

/* The worker's entry for a /v1/messages job. */
void sg_anthropic_run(sg_job *job);

#endif
