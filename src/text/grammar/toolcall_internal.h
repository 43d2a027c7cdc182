/* Internals of the tool-call parsers: the converters of the non-JSON syntaxes to JSON. */
#ifndef SG_TEXT_TOOLCALL_INTERNAL_H
#define SG_TEXT_TOOLCALL_INTERNAL_H

#include <jansson.h>
#include <stddef.h>

/* Each parses a complete call body (the text between the start and end markers) into the
 * function name (*name, sg_malloc'd) and the arguments object (*args, a new reference).
 * Returns 0 on success, -1 if the body is malformed. */
int sg_tc_parse_qwen_xml(const char *s, size_t n, const json_t *tools, char **name, json_t **args);
int sg_tc_parse_gemma4(const char *s, size_t n, char **name, json_t **args);
int sg_tc_parse_gemma3(const char *s, size_t n, char **name, json_t **args);

#endif
