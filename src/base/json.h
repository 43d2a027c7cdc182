/* Thin helpers over jansson: parse with a position in the error, and typed field access whose
 * errors name the field and what was found. */
#ifndef SG_BASE_JSON_H
#define SG_BASE_JSON_H

#include <jansson.h>
#include <stdint.h>

#include "saragossa.h"

/* Parses buf[0..len) (need not be NUL-terminated; NULL with len 0 is empty). On error:
 * SG_ERR_FORMAT with "<what>: invalid JSON at line L, column C (byte B): <reason>", or "<what>:
 * empty (a JSON value is expected)". */
sg_status sg_json_parse(const char *buf, size_t len, const char *what, json_t **out);
/* As sg_json_parse, for a model's files: an integer beyond int64 is read as a real (transformers
 * writes model_max_length 1000000000000000019884624838656 when a tokenizer has no limit, which
 * Python reads as a number), integral reals within 2^53 stay integers. Requests stay strict. */
sg_status sg_json_parse_config(const char *buf, size_t len, const char *what, json_t **out);
/* Reads a file as sg_json_parse_config. */
sg_status sg_json_load_file(const char *path, size_t max_bytes, json_t **out);

/* Typed getters. A missing key returns SG_ERR_NOT_FOUND and leaves *out alone (callers with a
 * default ignore it); a key of the wrong type returns SG_ERR_FORMAT naming the field, the type
 * wanted and the type found. Integers must be integral and fit. */
sg_status sg_json_get_int(const json_t *obj, const char *key, int64_t *out);
sg_status sg_json_get_num(const json_t *obj, const char *key, double *out);
sg_status sg_json_get_bool(const json_t *obj, const char *key, int *out);
sg_status sg_json_get_str(const json_t *obj, const char *key, const char **out);

/* "object", "array", "string", "integer", "real", "true", "false", "null". */
const char *sg_json_type_name(const json_t *v);

#endif
