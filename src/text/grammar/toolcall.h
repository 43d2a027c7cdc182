/* Tool calls in model output: streaming parsers of each family's tool-call syntax into one form
 * (function name + arguments as a JSON object), the reasoning/answer split, and grammars that
 * force a tool call when `tool_choice` is "required" or names a function.
 *
 * Syntaxes (taken from the models' own chat templates):
 *   SG_TC_HERMES    Qwen2.5/Qwen3: <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>,
 *                   several in a row for parallel calls
 *                   With tools given, also the call object without its tags, as small Qwen models
 *                   write it: an answer that (after blanks) is one or more objects whose only keys
 *                   are "name" (an offered tool's) and "arguments" or "parameters" (an object).
 *                   Such an object is held back until that is decided; an object the output cut
 *                   while it could still be a call is CALL_CUT, one the model ended undecided is text
 *                   The objects may stand in a Markdown fence (```json or ```), which is then part
 *                   of the call syntax (a fence whose content is no call is text)
 *   SG_TC_QWEN_XML  Qwen3.5/3.6: <tool_call>\n<function=f>\n<parameter=k>\nvalue\n</parameter>\n
 *                   </function>\n</tool_call>; a value is JSON when the parameter's schema says it
 *                   is not a string (or, without tools, when it parses as JSON), else text
 *   SG_TC_GEMMA4    Gemma 4: <|tool_call>call:f{k:<|"|>text<|"|>,n:1,o:{a:true},l:[1,2]}<tool_call|>
 *   SG_TC_GEMMA3    Gemma 3 (no template syntax; the documented prompt convention):
 *                   ```tool_code\nf(k="text", n=1, flag=True)\n```
 *   SG_TC_LLAMA3    Llama 3.x: {"name": "f", "parameters": {...}} as the whole answer, or after
 *                   <|python_tag|>; several separated by ';'
 *   SG_TC_MISTRAL   Mistral: [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...] and the newer
 *                   [TOOL_CALLS]f[ARGS]{...} (optionally f[CALL_ID]id[ARGS]{...}), repeatable
 *
 * Streaming: feed text pieces as they are detokenized; events come through a callback. Plain text
 * is emitted as soon as it cannot be the start of a call marker (a possible partial marker is held
 * back). For the JSON syntaxes (Hermes, Llama 3, Mistral) the arguments stream as deltas once the
 * function name is known, each delta checked to keep the arguments a valid JSON prefix; the others
 * emit their arguments in one delta when the call closes. A call that turns out malformed is
 * reported as SG_TCE_MALFORMED with its raw text (show it as text, log it); if that call had
 * already started, its index is void. A call the end of the output cut short (max_tokens or a
 * stop string, sg_toolcall_cut) is SG_TCE_CALL_CUT: neither a call nor answer text, and the
 * answer reports the truncation. Parsing never aborts. */
#ifndef SG_TEXT_TOOLCALL_H
#define SG_TEXT_TOOLCALL_H

#include <jansson.h>
#include <stddef.h>

#include "saragossa.h"
#include "text/grammar/grammar.h"

typedef enum {
	SG_TC_HERMES,
	SG_TC_QWEN_XML,
	SG_TC_GEMMA4,
	SG_TC_GEMMA3,
	SG_TC_LLAMA3,
	SG_TC_MISTRAL,
} sg_toolcall_syntax;

typedef enum {
	SG_TCE_TEXT,       /* text: plain answer text */
	SG_TCE_CALL_START, /* index, name */
	SG_TCE_ARGS_DELTA, /* index, text: the next piece of the arguments JSON */
	SG_TCE_CALL_END,   /* index: the arguments are complete and a valid JSON object */
	SG_TCE_MALFORMED,  /* text: the raw text of a call that could not be parsed */
	SG_TCE_CALL_CUT,   /* index, text: the raw text of a call (or of the start of its marker) that
			    * the output's end cut short; index is void (a CALL_START it had is
			    * never followed by a CALL_END) */
} sg_toolcall_event_kind;

typedef struct sg_toolcall_event {
	sg_toolcall_event_kind kind;
	int index;        /* the call's 0-based position in this output */
	const char *name; /* CALL_START */
	const char *text; /* TEXT, ARGS_DELTA, MALFORMED: not NUL-terminated, valid during the call */
	size_t len;
} sg_toolcall_event;

typedef void (*sg_toolcall_cb)(void *ud, const sg_toolcall_event *ev);

typedef struct sg_toolcall_parser sg_toolcall_parser;

/* tools: the request's OpenAI-style tools array (may be NULL), used for parameter types of the
 * XML syntax and the tool names of bare Hermes calls. The parser keeps a reference to it. */
sg_status sg_toolcall_parser_new(sg_toolcall_syntax syntax, const json_t *tools,
				 sg_toolcall_parser **out);
void sg_toolcall_parser_free(sg_toolcall_parser *p);
/* Feeds text[0..n); events are delivered before it returns. */
sg_status sg_toolcall_feed(sg_toolcall_parser *p, const char *text, size_t n, sg_toolcall_cb cb,
			   void *ud);
/* End of output: held-back text is flushed; an unfinished call is MALFORMED (the model ended
 * its turn inside it). */
sg_status sg_toolcall_finish(sg_toolcall_parser *p, sg_toolcall_cb cb, void *ud);
/* End of output cut short (max_tokens, the context, a stop string): an unfinished call, or a
 * held-back partial start marker, is CALL_CUT; a call already malformed stays MALFORMED. */
sg_status sg_toolcall_cut(sg_toolcall_parser *p, sg_toolcall_cb cb, void *ud);
int sg_toolcall_count(const sg_toolcall_parser *p);     /* calls completed */
int sg_toolcall_malformed(const sg_toolcall_parser *p); /* calls reported malformed */
int sg_toolcall_cut_count(const sg_toolcall_parser *p); /* calls reported cut (0 or 1) */
/* Parses a syntax name: "hermes", "qwen_xml", "gemma4", "gemma3", "llama3", "mistral". */
sg_status sg_toolcall_syntax_from_name(const char *name, sg_toolcall_syntax *out);

/* ---- reasoning split ----
 * Splits output into reasoning (between the start and end markers, e.g. "<think>" and
 * "</think>") and answer text, streaming, holding back partial markers. start_in_reasoning: the
 * prompt already opened the reasoning block. */
typedef struct sg_reasoning_split sg_reasoning_split;
typedef void (*sg_reasoning_cb)(void *ud, int is_reasoning, const char *text, size_t len);

sg_status sg_reasoning_split_new(const char *start_marker, const char *end_marker,
				 int start_in_reasoning, sg_reasoning_split **out);
void sg_reasoning_split_free(sg_reasoning_split *r);
sg_status sg_reasoning_feed(sg_reasoning_split *r, const char *text, size_t n, sg_reasoning_cb cb,
			    void *ud);
sg_status sg_reasoning_finish(sg_reasoning_split *r, sg_reasoning_cb cb, void *ud);

/* ---- forcing a call ----
 * The grammar for tool_choice "required" (name NULL: any of the tools) or a named function: the
 * output must be one tool call (up to max_calls when parallel calls are allowed) in the given
 * syntax, with the arguments constrained by the function's `parameters` schema (compiled strictly:
 * an unsupported keyword is an error naming the tool). Supported for SG_TC_HERMES, SG_TC_LLAMA3,
 * SG_TC_MISTRAL (its array form) and SG_TC_QWEN_XML (text parameters as raw text, or one of their
 * enum values; other parameters as JSON by their schema; a text parameter with another string
 * constraint is an error); others return SG_ERR_UNSUPPORTED. */
sg_status sg_toolcall_grammar(sg_toolcall_syntax syntax, const json_t *tools, const char *name,
			      int max_calls, sg_grammar **out);

#endif
