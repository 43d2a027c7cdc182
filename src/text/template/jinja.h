/* Jinja templates as chat templates use them: a lexer, a parser to an AST and a tree-walking
 * evaluator for the subset of Jinja2 that real chat templates need, rendering byte-identical to
 * Python jinja2 configured as Hugging Face transformers configures it (ImmutableSandboxedEnvironment,
 * trim_blocks, lstrip_blocks, loop controls, transformers' tojson / raise_exception /
 * strftime_now). A construct it does not implement is an error naming it and its line and column,
 * never a silently different output.
 *
 * Usage:
 *     sg_jinja_template *t;
 *     if (sg_jinja_parse(src, len, "chat_template", &t) != SG_OK) ... sg_last_error() ...
 *     json_t *vars = json_pack("{s:o, s:b}", "messages", msgs, "add_generation_prompt", 1);
 *     char *out; size_t n;
 *     if (sg_jinja_render(t, vars, NULL, &out, &n) == SG_OK) { fwrite(out, 1, n, stdout); sg_free(out); }
 *     sg_jinja_free(t);
 */
#ifndef SG_TEXT_JINJA_H
#define SG_TEXT_JINJA_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "saragossa.h"

typedef struct sg_jinja_template sg_jinja_template;

typedef struct sg_jinja_limits {
	size_t max_output;    /* bytes of rendered text (default 64 MiB) */
	size_t max_memory;    /* bytes of values made while rendering (default 512 MiB) */
	uint64_t max_steps;   /* evaluation steps, bounds loops (default 50 million) */
	int max_depth;        /* nesting of macro calls, blocks and expressions (default 1000) */
	/* strftime_now() uses this time (seconds since the epoch, local time) when non-zero, so tests
	 * can pin the date; 0 takes the current time. */
	int64_t now;
} sg_jinja_limits;

/* Parses src[0..len) (need not be NUL-terminated). `name` labels error messages. On success *out
 * is owned by the caller (sg_jinja_free). Syntax errors and unsupported constructs return
 * SG_ERR_FORMAT / SG_ERR_UNSUPPORTED with "name: line L, column C: ...". */
sg_status sg_jinja_parse(const char *src, size_t len, const char *name, sg_jinja_template **out);
void sg_jinja_free(sg_jinja_template *t);

/* Renders with the variables of the JSON object `vars` (borrowed; NULL = none). limits may be
 * NULL for the defaults. On success *out is a NUL-terminated heap string (sg_free) of *out_len
 * bytes. A runtime error (undefined variable used where Jinja errors, raise_exception, type
 * error, limit exceeded) returns SG_ERR_FORMAT with the line and column of the expression. */
sg_status sg_jinja_render(const sg_jinja_template *t, const json_t *vars, const sg_jinja_limits *limits,
			  char **out, size_t *out_len);

#endif
