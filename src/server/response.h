/* Response builders every API's routes share: the error envelope of each API, JSON lines
 * written to a job as SSE events or NDJSON, whole responses, text as JSON strings, timestamps,
 * OpenAI's usage object, the tool-call record a streamed answer accumulates, and the generation
 * parameters a job's request asks for. It depends only on what is below it in server/ (job,
 * model, request), never on a route file or the pool. */
#ifndef SG_SERVER_RESPONSE_H
#define SG_SERVER_RESPONSE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/generate.h"
#include "server/job.h"
#include "server/request.h"

/* The error body in the format of the API the route belongs to: OpenAI's {"error": {message,
 * type, param, code}}, Ollama's {"error": "..."}, Anthropic's {"type": "error", "error": {type,
 * message}} (its types chosen from the status). A new reference. */
json_t *sg_resp_error_body(sg_srv_route route, const sg_srv_err *e);

/* The HTTP status of an engine failure: 400 for a bad prompt (SG_ERR_RANGE, SG_ERR_INVALID_ARG),
 * 503 for memory the guard refused (SG_ERR_NOMEM: the server is fine, the request does not
 * fit), else 500. */
int sg_resp_status(sg_status st);

/* "length" when the generation stopped at its token limit, else "stop" (OpenAI's finish_reason,
 * Ollama's done_reason). */
const char *sg_resp_finish_reason(const sg_gen_result *r);
/* *e for an engine failure st with sg_last_error() as its message: sg_resp_status's status, type
 * invalid_request_error for a 400, else server_error. */
void sg_resp_err_engine(sg_srv_err *e, sg_status st);
/* *e for a JSON answer (response_format) unfinished when the generation r ended: 400
 * incomplete_json naming max_tokens. */
void sg_resp_err_incomplete(sg_srv_err *e, const sg_gen_result *r);
/* Runs the job's generation with p on its model (*r zeroed first): the session key partitions the
 * prefix cache, what it reused is noted for the response headers, and the cache blocks of the
 * session's pool are published when it is done. The engine's status. */
sg_status sg_resp_generate(sg_job *job, const sg_gen_params *p, sg_gen_result *r);
/* The memory guard's check of the draft model's KV rows a generation with p may reach (when p
 * drafts with the model's draft model; sg_resp_generate calls it). */
sg_status sg_resp_reserve_draft(sg_job *job, const sg_gen_params *p);
/* The log line of a generation that finished well: prompt, cache, prefill and decode speeds, and
 * how it ended (finish). */
void sg_resp_log_done(const sg_job *job, const char *model, const sg_gen_result *r, const char *finish);

/* Bytes as a JSON string, invalid UTF-8 replaced by U+FFFD (a token may be half a character). */
json_t *sg_resp_string(const char *s, size_t n);

/* "2024-05-01T12:00:00.000000Z" for now, and "2024-05-01T12:00:00Z" for t (seconds since the
 * epoch). */
void sg_resp_rfc3339(char *buf, size_t cap);
void sg_resp_rfc3339_of(int64_t t, char *buf, size_t cap);

/* Appends s[0..n) to the heap buffer *b (*len used, *cap allocated, NUL kept after). 0, or -1
 * when out of memory. */
int sg_resp_buf_add(char **b, size_t *len, size_t *cap, const char *s, size_t n);

/* Writes o (consumed) to the job as one line: "data: {...}\n\n" (sse) or "{...}\n" (NDJSON). 0, or
 * -1 when out of memory. */
int sg_resp_line(sg_job *job, json_t *o, int sse);
/* Writes an SSE event with a name: "event: NAME\ndata: {...}\n\n" (data consumed). 0, or -1. */
int sg_resp_event(sg_job *job, const char *event, json_t *data);
/* The whole response at once: status and o (consumed) as JSON (500 when it cannot be written). */
void sg_resp_send(sg_job *job, int status, json_t *o);

/* OpenAI's usage object of a generation (prompt, completion, total, cached prompt tokens). */
json_t *sg_resp_oai_usage(const sg_gen_result *r);

/* llama.cpp's "timings" object of a generation: cache_n (prompt tokens reused), prompt_n and
 * prompt_ms (the prefill), predicted_n and predicted_ms (the decode), their per-second speeds,
 * and ttft_ms. Chat and completion answers carry it beside usage. */
json_t *sg_resp_oai_timings(const sg_gen_result *r);

/* Tool calls an answer makes, kept as [{id, name, arguments (the text so far), ended}] while the
 * agent machinery reports them. */
void sg_resp_call_start(json_t *calls, int index, const char *id, const char *name);
/* Appends s[0..n) to call index's arguments: 0, or -1 when out of memory (no such call: 0). */
int sg_resp_call_args(json_t *calls, int index, const char *s, size_t n);
void sg_resp_call_end(json_t *calls, int index);
/* Ollama's form of a call: {"function": {"name", "arguments": {...}}}. */
json_t *sg_resp_ollama_call(const json_t *call);

/* The generation parameters job's request asks for: its prompt, sampler, EOS ids, stops,
 * max_tokens and cancel flag (callback, user and constraint left to the route). */
sg_gen_params sg_resp_gen_params(sg_job *job);

#endif
