/* The agent side of a generation, shared by the OpenAI, Ollama and Anthropic routes: what to
 * constrain (response_format / format JSON or a schema, a forced tool call), the reasoning split
 * (`<think>…</think>`), the reasoning budget, and the tool-call parser, between the generation
 * loop and a route's writer.
 *
 * A plan is made on the connection thread (so a bad schema is a 400 before the request waits
 * in the queue) and owned by the job; a run lives on the inference worker for one generation:
 *
 *     plan (request + model) ──► run: constraint for sg_generate ──► text pieces in
 *                                     reasoning split ──► tool-call parser ──► sg_agent_out
 */
#ifndef SG_SERVER_AGENT_H
#define SG_SERVER_AGENT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/generate.h"
#include "server/model.h"
#include "server/request.h"

/* A route's writer. Every callback may be NULL. */
typedef struct sg_agent_out {
	void *ud;
	void (*text)(void *ud, const char *s, size_t n);      /* answer text */
	void (*reasoning)(void *ud, const char *s, size_t n); /* reasoning text */
	void (*call_start)(void *ud, int index, const char *name);
	void (*call_args)(void *ud, int index, const char *s, size_t n); /* the next piece of the arguments */
	void (*call_end)(void *ud, int index);
	/* The call started at index will not end: the generation was cut short inside it
	 * (max_tokens, a stop string), or it turned out malformed (its raw text follows as text). A
	 * whole answer leaves it out; a stream has announced it, and its finish says why. */
	void (*call_void)(void *ud, int index);
} sg_agent_out;

typedef struct sg_agent_plan {
	struct sg_grammar *grammar; /* owned; NULL: the answer is not constrained */
	int json;                   /* the answer is JSON (an unfinished one is incomplete_json) */
	int tools;                  /* parse tool calls in the answer */
	json_t *tool_defs;          /* the request's tools (a reference) */
	int syntax;                 /* sg_toolcall_syntax */
	int reasoning;              /* split the reasoning from the answer */
	int start_in_reasoning;     /* the prompt opened the reasoning block */
	int thinking_off;           /* the prompt closed it: the answer starts at once */
	int32_t reasoning_budget;   /* reasoning tokens before the end marker is forced; 0: none */
	char think_start[16], think_end[16];
	int32_t think_start_id, think_end_id;
} sg_agent_plan;

/* Decides the plan of request q on model m: compiles response_format / format and the forced
 * tool-call grammar. Returns 0, or the HTTP status set in *e (an unsupported schema keyword is a
 * 400 naming it). *out is NULL when the request needs nothing of this (plain text). */
int sg_agent_plan_make(const sg_srv_model *m, const sg_srv_req *q, sg_agent_plan **out, sg_srv_err *e);
/* Reads the rendered prompt's end: did the template open or close the reasoning block? */
void sg_agent_plan_prompt(sg_agent_plan *p, const char *prompt, size_t len);
void sg_agent_plan_free(sg_agent_plan *p);

typedef struct sg_agent_run sg_agent_run;

/* A run of plan (may be NULL: text passes straight to out->text) on model m. */
sg_status sg_agent_run_new(const sg_agent_plan *plan, sg_srv_model *m, const sg_agent_out *out, sg_agent_run **r);
void sg_agent_run_free(sg_agent_run *r);
/* The constraint to give sg_generate, or NULL. */
const sg_gen_constraint *sg_agent_run_constraint(sg_agent_run *r);
/* Text released by the generation loop, in order. */
void sg_agent_run_feed(sg_agent_run *r, const char *text, size_t n);
/* The end of the output (res: how the generation ended; NULL: the model ended it): held-back
 * text is released. An unfinished call is cut (call_cut, never text) when the generation was cut
 * short by max_tokens, the context or a stop string, else the model ended its turn inside it and
 * it is malformed (returned as text). Blank text is dropped when a call was forced. */
void sg_agent_run_finish(sg_agent_run *r, const sg_gen_result *res);
int sg_agent_run_calls(const sg_agent_run *r);     /* tool calls completed */
int sg_agent_run_malformed(const sg_agent_run *r); /* calls returned as text */
int sg_agent_run_cut(const sg_agent_run *r);       /* calls cut short (0 or 1) */
/* 1 when the answer ends with tool calls and nothing else went wrong: calls completed, none
 * malformed, none cut. The finish is then OpenAI's "tool_calls" / Anthropic's "tool_use";
 * otherwise it is how the generation ended ("length" / "max_tokens" for a cut call), so every
 * API agrees on which calls completed and on why the answer ended. */
int sg_agent_run_tool_finish(const sg_agent_run *r);
/* 1 when the answer is complete for the constraint (always, without one), or is a tool call
 * that the end of the generation cut (reported as that truncation). */
int sg_agent_run_complete(const sg_agent_run *r);

#endif
