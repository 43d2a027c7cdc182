/* JSON Schema -> grammar (grammar.h), for `response_format` json_schema, Ollama `format`, and tool
 * arguments. What is enforced (docs/api.md, "Structured output and tool calls", says the same):
 *
 *   type (a name or an array of names), enum, const, anyOf, oneOf (enforced as anyOf: exact when
 *   the alternatives are disjoint), allOf with one member, $ref to "#" or "#/..." (recursion is
 *   bounded by the nesting limit), $defs/definitions, boolean schemas;
 *   objects: properties, required, additionalProperties (false, true or a schema);
 *   arrays: items (a schema), minItems, maxItems;
 *   strings: minLength, maxLength (code points);
 *   integers: minimum, maximum, exclusiveMinimum, exclusiveMaximum (within int64);
 *   numbers: the same bounds, soundly: an integer within them, or a decimal (no exponent) whose
 *   whole unit interval lies within them ([0, 1] gives 0, 1 and 0.xxx); bounds no such value
 *   meets are refused.
 *
 * Sound restrictions (every output still validates; some valid documents cannot be produced):
 *   properties come in schema order, each required one present, optional ones skippable,
 *   additional properties (when allowed) after the declared ones, with names that carry no
 *   backslash escapes; an object schema with declared properties and no additionalProperties
 *   gets no additional properties (an object schema with none declared takes any keys);
 *   enum/const values are produced in their compact serialisation.
 *
 * Keywords that constrain values but are not enforced (pattern, format, multipleOf,
 * uniqueItems: true, prefixItems, not, if/then/else, patternProperties,
 * propertyNames, min/maxProperties, contains, dependent*, unevaluated*, ...): with strict, an
 * SG_ERR_UNSUPPORTED error "json_schema: unsupported keyword 'pattern' at /properties/name"
 * (a JSON pointer into the schema), which the server returns as HTTP 400. Without strict they are
 * skipped and the first one is reported in the warning. Unknown keywords are annotations and are
 * skipped in both modes (as JSON Schema itself does). */
#ifndef SG_TEXT_JSON_SCHEMA_H
#define SG_TEXT_JSON_SCHEMA_H

#include <jansson.h>
#include <stddef.h>

#include "saragossa.h"
#include "text/grammar/grammar.h"

/* Compiles `schema` into node *node of the unfinished grammar g (so tool-call grammars can wrap
 * several schemas). warn (may be NULL) receives the first keyword skipped in non-strict mode, or
 * "" if none. Errors name the keyword and its path. */
sg_status sg_json_schema_compile_into(sg_grammar *g, const json_t *schema, int strict, int *node,
				      char *warn, size_t warn_size);

/* Compiles a whole schema into a finished grammar whose root is the schema's value. */
sg_status sg_json_schema_compile(const json_t *schema, int strict, sg_grammar **out, char *warn,
				 size_t warn_size);

/* An OpenAI `response_format` object: {"type":"text"} gives *out = NULL (unconstrained),
 * {"type":"json_object"} the JSON-object grammar, {"type":"json_schema","json_schema":{"schema":
 * {...},"strict":bool}} the compiled schema. Anything else: SG_ERR_INVALID_ARG naming the field. */
sg_status sg_json_schema_response_format(const json_t *rf, sg_grammar **out, char *warn,
					 size_t warn_size);

#endif
