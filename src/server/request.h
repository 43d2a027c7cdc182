/* What a request is once parsed, whatever API it came by: the routes, the error record, the
 * request record (generation parameters), and the field readers and message checks that the
 * per-API parsers (routes_openai.c, routes_ollama.c, routes_anthropic.c) share. Pure functions of
 * the bytes (no model, no I/O); the parsers over them are fuzzed (tests/fuzz/fuzz_request.c).
 *
 * Every failure fills an sg_srv_err with the HTTP status and a message that names the field or
 * the byte position, as the API that was called reports it. The bottom of server/: it includes
 * no other server header. */
#ifndef SG_SERVER_REQUEST_H
#define SG_SERVER_REQUEST_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/sampler.h"

typedef enum sg_srv_route {
	SG_ROUTE_NONE = 0,
	SG_ROUTE_HEALTH,
	SG_ROUTE_OAI_MODELS,
	SG_ROUTE_OAI_CHAT,
	SG_ROUTE_OAI_COMPLETIONS,
	SG_ROUTE_TOKENIZE,
	SG_ROUTE_DETOKENIZE,
	SG_ROUTE_OLLAMA_CHAT,
	SG_ROUTE_OLLAMA_GENERATE,
	SG_ROUTE_OLLAMA_TAGS,
	SG_ROUTE_OLLAMA_SHOW,
	SG_ROUTE_OLLAMA_PS,
	SG_ROUTE_OLLAMA_VERSION,
	SG_ROUTE_OLLAMA_EMBED,
	SG_ROUTE_ANTHROPIC_MESSAGES,
	SG_ROUTE_ANTHROPIC_COUNT,
	SG_ROUTE_OAI_EMBEDDINGS,
	SG_ROUTE_OAI_TRANSCRIPTIONS, /* multipart bodies: server/routes_audio.c */
	SG_ROUTE_OAI_TRANSLATIONS,
	SG_ROUTE_OLLAMA_EMBEDDINGS, /* the older /api/embeddings (prompt -> embedding) */
	SG_ROUTE_RERANK,            /* /v1/rerank, /rerank: Jina/Cohere's shape, OpenAI's errors */
	SG_ROUTE_OAI_RESPONSES,     /* POST /v1/responses: server/routes_responses.c */
	SG_ROUTE_OAI_RESPONSE_ITEM, /* GET, DELETE /v1/responses/{id}[/input_items] */
	SG_ROUTE_WEB,               /* GET /: the chat page (server/web.c) */
	SG_ROUTE_METRICS,           /* GET /metrics: Prometheus text (server/metrics.c) */
	SG_ROUTE_OLLAMA_PULL,       /* Ollama's model management (server/routes_manage.c) */
	SG_ROUTE_OLLAMA_DELETE,
	SG_ROUTE_OLLAMA_COPY,
	SG_ROUTE_OAI_SPEECH,        /* /v1/audio/speech: server/routes_speech.c */
} sg_srv_route;

/* 1 when the route answers in Anthropic's error format. */
int sg_srv_route_is_anthropic(sg_srv_route r);

typedef enum sg_srv_tool_choice {
	SG_TOOLS_AUTO = 0, /* the model decides */
	SG_TOOLS_NONE,     /* no call is parsed */
	SG_TOOLS_REQUIRED, /* at least one call, enforced by the grammar */
	SG_TOOLS_NAMED,    /* a call to tool_name, enforced by the grammar */
} sg_srv_tool_choice;

/* 1 when the route answers in Ollama's error format ({"error": "..."}). */
int sg_srv_route_is_ollama(sg_srv_route r);

typedef struct sg_srv_err {
	int status;        /* HTTP status */
	const char *type;  /* OpenAI error type: invalid_request_error, not_found_error, ... */
	char param[64];    /* the offending field ("" if none) */
	char code[48];     /* OpenAI error code ("" if none) */
	char message[512];
} sg_srv_err;

/* Fills e and returns the status (for `return srv_err(...)`). */
int sg_srv_err_set(sg_srv_err *e, int status, const char *type, const char *param, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

typedef struct sg_srv_limits {
	int32_t max_tokens_cap; /* hard cap on tokens generated per request */
} sg_srv_limits;

#define SG_SRV_MAX_STOP 16
#define SG_SRV_MAX_CHOICES 16 /* OpenAI's n: choices generated one after the other */

typedef struct sg_srv_req {
	sg_srv_route route;
	char *model;          /* requested model name ("" when absent: the default model; never holds a NUL) */
	int chat;             /* messages (chat) or prompt (completion) */
	json_t *messages;     /* chat: array of {role, content:string, ...} with parts flattened */
	json_t *tools;        /* chat: the tools array passed to the template, or NULL */
	char *prompt;         /* completion: prompt text [prompt_len] (NULL when given as ids) */
	size_t prompt_len;    /* its bytes: text may hold NUL bytes (JSON's \u0000) */
	int32_t *prompt_ids;  /* completion / detokenize: [n_prompt_ids] */
	size_t n_prompt_ids;
	char *system;         /* ollama generate: system message [system_len] */
	size_t system_len;
	int raw;              /* ollama generate: no template */
	int add_special;      /* tokenize: add BOS etc. */
	int stream;
	int include_usage;    /* stream_options.include_usage */
	int32_t max_tokens;   /* already capped */
	int max_tokens_given; /* the client asked for a number (else the cap applies) */
	sg_sampler_params sp; /* logit_bias points into bias[] */
	sg_logit_bias *bias;
	char *stop[SG_SRV_MAX_STOP];
	size_t stop_len[SG_SRV_MAX_STOP]; /* each stop string's bytes */
	size_t n_stop;
	int logprobs;         /* return per-token logprobs */
	int top_logprobs;
	int json_format;      /* 1: response_format json_object / ollama format:"json"; 2: a schema */
	json_t *schema;       /* json_format 2: the JSON Schema */
	int schema_strict;    /* unsupported keywords are a 400 (Ollama format and strict: true) */
	int tool_choice;      /* sg_srv_tool_choice */
	char *tool_name;      /* SG_TOOLS_NAMED (never holds a NUL) */
	int parallel_tools;   /* several calls may follow one another (default 1) */
	int think;            /* reasoning: -1 not said, 0 off, 1 on */
	int reasoning_effort; /* 0 not said, 1 low, 2 medium, 3 high */
	int32_t reasoning_budget; /* reasoning tokens before the end is forced; 0: from the effort */
	json_t *kwargs;       /* extra chat-template variables (enable_thinking, ...), or NULL */
	char *user;           /* OpenAI user / Anthropic metadata.user_id: the session key [user_len] */
	size_t user_len;
	int n_choices;        /* OpenAI's n (1 when not given) */
	int echo;             /* completions: echo the prompt (refused: unsupported) */
	int spec;             /* speculative decoding: -1 the model's default, else SG_SRV_SPEC_* */
	int32_t draft_max, draft_min; /* 0: the model's */
	char *prediction;     /* OpenAI prediction.content: guesses for the answer [prediction_len], or NULL */
	size_t prediction_len;
	json_t *rsp;          /* /v1/responses: its own fields (input items, store, echo), or NULL */
	char note[160];       /* something ignored that the client should know ("template ignored") */
	int audio_out;        /* chat: modalities holds "audio": the answer is spoken (routes_chat_voice.h) */
	char audio_voice[64]; /* its audio.voice */
	char audio_format[8]; /* its audio.format as the encoders name it: wav, mp3, flac, opus, pcm */
} sg_srv_req;

/* The start of every parse: *req zeroed with the defaults (OpenAI's sampling: temperature 1, no
 * filters; max_tokens the cap), then body[0..len) parsed into *json (a new reference, an object).
 * Returns 0, or the HTTP status set in *err (an empty body, bad JSON, not an object). */
int sg_srv_req_begin(sg_srv_route route, const char *body, size_t len, const sg_srv_limits *lim, sg_srv_req *req,
		     json_t **json, sg_srv_err *err);
void sg_srv_req_free(sg_srv_req *req);
/* The speculative decoding field `name` (v may be NULL or null: not given): "ngram", "draft",
 * "none", or {"type": one of them, "draft_max": N, "draft_min": N}. 0 or the status set in err. */
int sg_srv_parse_spec(const json_t *v, const char *name, sg_srv_req *r, sg_srv_err *err);
/* OpenAI's prediction field ({"type": "content", "content": text or [{"type": "text", "text"}]})
 * into r->prediction. 0 or the status set in err. */
int sg_srv_parse_prediction(const json_t *v, sg_srv_req *r, sg_srv_err *err);
/* body[0..len) (body may be NULL when no body came) as a JSON object in *json (a new reference):
 * 0, or 400 set in *err for an empty body, invalid JSON or another JSON type. Every route that
 * reads a body starts here, so they answer these the same way. */
int sg_srv_body_object(const char *body, size_t len, json_t **json, sg_srv_err *err);

/* Strings and U+0000. JSON allows "\u0000" inside a string and the parser keeps it (a string
 * carries its length), so a C string would silently end at it: "tiny\u0000x" would name model
 * "tiny". Text (prompts, messages, stop strings, session keys) is carried with its length;
 * names and enumerated values (models, tools, roles, types, ids), where a NUL can mean nothing,
 * are refused with a 400 that names the field (sg_srv_get_str does it; sg_srv_has_nul and
 * sg_srv_nul for values read directly). */
int sg_srv_has_nul(const json_t *v); /* 1 when v is a string holding a NUL byte */
int sg_srv_nul(sg_srv_err *e, const char *name); /* the 400; always < 0 */

/* Field readers: o[key] (named `name` in messages) absent or null is "not given" (0); a present
 * value of the wrong type or out of range is a 400 naming the field, returned as a negative
 * number (-status) with *e filled; given and valid is 1, with *out set. get_str refuses a
 * string holding a NUL; get_text takes any string, with its length. */
int sg_srv_wrong_type(sg_srv_err *e, const char *name, const char *want, const json_t *v); /* always < 0 */
int sg_srv_get_num(const json_t *o, const char *key, const char *name, double lo, double hi, double *out, sg_srv_err *e);
int sg_srv_get_int(const json_t *o, const char *key, const char *name, int64_t lo, int64_t hi, int64_t *out, sg_srv_err *e);
int sg_srv_get_bool(const json_t *o, const char *key, const char *name, int *out, sg_srv_err *e);
int sg_srv_get_str(const json_t *o, const char *key, const char *name, const char **out, sg_srv_err *e);
int sg_srv_get_text(const json_t *o, const char *key, const char *name, const char **out, size_t *len, sg_srv_err *e);
/* A 500 "out of memory" (returns the status). */
int sg_srv_oom(sg_srv_err *e);
/* *dst = a heap copy of s (NUL-terminated): 0, or -500 with *e filled. dupn copies n bytes
 * (which may hold NULs) and terminates them. */
int sg_srv_dup(char **dst, const char *s, sg_srv_err *e);
int sg_srv_dupn(char **dst, const char *s, size_t n, sg_srv_err *e);

/* Parts the OpenAI and Ollama bodies share; each returns 0, or a negative or positive status with
 * *err filled (callers test < 0 and != 0 as the readers above). */
/* stop: a string or an array of at most SG_SRV_MAX_STOP strings of at most 1024 bytes, appended
 * with their lengths to r->stop. */
int sg_srv_parse_stop(const json_t *v, const char *name, sg_srv_req *r, sg_srv_err *err);
/* body.messages (roles checked, OpenAI content parts flattened to a string; ollama: string content,
 * no images, may be empty) and body.tools, copied into r. */
int sg_srv_parse_messages(const json_t *body, sg_srv_req *r, int ollama, sg_srv_err *err);
/* body.model into r->model ("" when absent and not required). */
int sg_srv_parse_model(const json_t *b, sg_srv_req *r, int required, sg_srv_err *err);

#endif
