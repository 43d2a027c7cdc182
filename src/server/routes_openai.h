/* The OpenAI routes: /v1/chat/completions and /v1/completions (request bodies, and the answers
 * whole or as SSE chunks with logprobs, reasoning_content and tool_calls), /v1/models, and the
 * /tokenize and /detokenize extensions that share OpenAI's error format. */
#ifndef SG_SERVER_ROUTES_OPENAI_H
#define SG_SERVER_ROUTES_OPENAI_H

#include <jansson.h>

#include "server/job.h"
#include "server/model.h"
#include "server/pool.h"
#include "server/request.h"

/* The body of req->route (chat, completions, tokenize, detokenize; *req already begun by
 * sg_srv_req_begin) into *req. Returns 0, or the HTTP status set in *err. */
int sg_openai_parse(const json_t *body, sg_srv_req *req, const sg_srv_limits *lim, sg_srv_err *err);

/* GET /v1/models: every configured model ("resident" true/false); one resident model's entry. */
json_t *sg_openai_models(const sg_pool_item *items, int n);
json_t *sg_openai_model(const sg_srv_model_info *in);

/* OpenAI's logprobs entry of one sampled token: {token, logprob, bytes, top_logprobs: [the first
 * top_n alternatives, each {token, logprob, bytes}]}, as chat completions and the Responses API
 * (output_text.logprobs) give it. A token that is part of a UTF-8 character is named
 * "bytes:\xNN...". A new reference. */
json_t *sg_openai_logprob(const sg_srv_model *m, const sg_sample_result *sr, int top_n);

/* The worker's entry for a chat or completions job. */
void sg_openai_run(sg_job *job);

#endif
