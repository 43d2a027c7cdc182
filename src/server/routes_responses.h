/* OpenAI's Responses API: POST /v1/responses (input items, instructions, function tools,
 * text.format, reasoning items, the typed SSE events), and the stored responses behind
 * previous_response_id: GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items.
 *
 * A Responses body is translated into the Chat Completions request the rest of the server
 * already runs (messages, tools, response_format, reasoning_effort), so templating, constrained
 * decoding, tool-call parsing and reasoning splitting are the chat route's own; what differs is
 * the answer (output items and typed events) and the store.
 *
 * The store keeps, for each stored response, its conversation as chat messages (the input before
 * it, its own input, its output as an assistant turn), its input items and the response object.
 * It is bounded by a count (SARAGOSSA_SERVE_RESPONSES_MAX) and evicts the least recently used.
 * A continued response inherits the session key of the one it continues, so its prompt (the
 * stored conversation plus the new input) hits the prefix cache blocks of that session. The store
 * is shared by the connection threads and the worker: every call locks it, and what it returns
 * is a copy. */
#ifndef SG_SERVER_ROUTES_RESPONSES_H
#define SG_SERVER_ROUTES_RESPONSES_H

#include <jansson.h>

#include "server/job.h"
#include "server/request.h"

typedef struct sg_rsp_store sg_rsp_store;

/* A store of at most capacity (>= 1) responses. NULL when out of memory. */
sg_rsp_store *sg_rsp_store_new(int capacity);
void sg_rsp_store_free(sg_rsp_store *s);
/* Responses held now. */
int sg_rsp_store_count(sg_rsp_store *s);

/* The body of POST /v1/responses (*req begun by sg_srv_req_begin) into *req as a chat request;
 * the fields only the Responses API has are kept in req->rsp. 0, or the HTTP status set in
 * *err (the field named as the Responses API names it). Pure: no store, no model. */
int sg_responses_parse(const json_t *body, sg_srv_req *req, const sg_srv_limits *lim, sg_srv_err *err);

/* The connection thread's step after parsing job->req: previous_response_id is looked up (404
 * naming it when the store does not hold it), its conversation put before the new input and its
 * session key inherited (when the request gives none); job->extra takes what the worker needs
 * (the store, borrowed: it outlives every job). 0, or the status set in *err. */
int sg_responses_prepare(sg_rsp_store *s, sg_job *job, sg_srv_err *err);

/* The worker's entry for a /v1/responses job. */
void sg_responses_run(sg_job *job);

/* GET (or HEAD) and DELETE of /v1/responses/{rest}, where rest is "ID" or "ID/input_items":
 * the stored response, its deletion record, or its input items as a list. The status (200, 404
 * in OpenAI's shape, 405), with *out the body (a new reference) or *err filled. */
int sg_responses_item(sg_rsp_store *s, const char *method, const char *rest, json_t **out, sg_srv_err *err);

#endif
