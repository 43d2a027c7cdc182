#include "base/json.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/mmap.h"

#include <math.h>
#include <string.h>

const char *sg_json_type_name(const json_t *v)
{
	if (!v) return "missing";
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "object";
	case JSON_ARRAY: return "array";
	case JSON_STRING: return "string";
	case JSON_INTEGER: return "integer";
	case JSON_REAL: return "real";
	case JSON_TRUE: return "true";
	case JSON_FALSE: return "false";
	case JSON_NULL: return "null";
	}
	return "unknown";
}

/* After a parse with every number read as a real: the integral ones that a double holds exactly
 * (|x| <= 2^53) become integers again, so only the integers too big for int64 stay reals. Depth
 * is bounded by jansson's own nesting limit. */
static void reals_to_ints(json_t *v)
{
	size_t i;
	const char *k;
	json_t *x;
	if (json_is_object(v)) {
		json_object_foreach(v, k, x)
		{
			if (json_is_real(x) && fabs(json_real_value(x)) <= 9007199254740992.0 && json_real_value(x) == floor(json_real_value(x)))
				json_object_set_new(v, k, json_integer((json_int_t)json_real_value(x)));
			else reals_to_ints(x);
		}
	} else if (json_is_array(v)) {
		json_array_foreach(v, i, x)
		{
			if (json_is_real(x) && fabs(json_real_value(x)) <= 9007199254740992.0 && json_real_value(x) == floor(json_real_value(x)))
				json_array_set_new(v, i, json_integer((json_int_t)json_real_value(x)));
			else reals_to_ints(x);
		}
	}
}

static sg_status parse(const char *buf, size_t len, const char *what, int big_ints_as_reals, json_t **out)
{
	json_error_t err;
	*out = NULL;
	if (!buf || !len) return sg_error(SG_ERR_FORMAT, "%s: empty (a JSON value is expected)", what ? what : "json");
	/* JSON_ALLOW_NUL keeps embedded \u0000 legal as JSON allows; strings stay length-tracked. */
	*out = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &err);
	/* a config file's integer beyond int64 is read as a real, as Python's json reads it into a number */
	if (!*out && big_ints_as_reals && strstr(err.text, "too big integer")) {
		json_error_t err2;
		*out = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &err2);
		if (*out) reals_to_ints(*out);
	}
	if (!*out)
		return sg_error(SG_ERR_FORMAT, "%s: invalid JSON at line %d, column %d (byte %d): %s",
				what ? what : "json", err.line, err.column, err.position, err.text);
	return SG_OK;
}

sg_status sg_json_parse(const char *buf, size_t len, const char *what, json_t **out)
{
	return parse(buf, len, what, 0, out);
}

sg_status sg_json_parse_config(const char *buf, size_t len, const char *what, json_t **out)
{
	return parse(buf, len, what, 1, out);
}

sg_status sg_json_load_file(const char *path, size_t max_bytes, json_t **out)
{
	char *buf;
	size_t len;
	*out = NULL;
	sg_status st = sg_read_file(path, max_bytes, &buf, &len);
	if (st) return st;
	st = sg_json_parse_config(buf, len, path, out);
	sg_free(buf);
	return st;
}

static sg_status wrong_type(const char *key, const char *want, const json_t *v)
{
	return sg_error(SG_ERR_FORMAT, "field '%s' must be %s, found %s", key, want, sg_json_type_name(v));
}

sg_status sg_json_get_int(const json_t *obj, const char *key, int64_t *out)
{
	json_t *v = json_object_get(obj, key);
	if (!v) return SG_ERR_NOT_FOUND;
	if (json_is_integer(v)) return *out = json_integer_value(v), SG_OK;
	if (json_is_real(v)) {
		double d = json_real_value(v);
		if (d == floor(d) && fabs(d) < 9.0e15) return *out = (int64_t)d, SG_OK;
	}
	return wrong_type(key, "an integer", v);
}

sg_status sg_json_get_num(const json_t *obj, const char *key, double *out)
{
	json_t *v = json_object_get(obj, key);
	if (!v) return SG_ERR_NOT_FOUND;
	if (!json_is_number(v)) return wrong_type(key, "a number", v);
	*out = json_number_value(v);
	return SG_OK;
}

sg_status sg_json_get_bool(const json_t *obj, const char *key, int *out)
{
	json_t *v = json_object_get(obj, key);
	if (!v) return SG_ERR_NOT_FOUND;
	if (!json_is_boolean(v)) return wrong_type(key, "a boolean", v);
	*out = json_is_true(v);
	return SG_OK;
}

sg_status sg_json_get_str(const json_t *obj, const char *key, const char **out)
{
	json_t *v = json_object_get(obj, key);
	if (!v) return SG_ERR_NOT_FOUND;
	if (!json_is_string(v)) return wrong_type(key, "a string", v);
	*out = json_string_value(v);
	return SG_OK;
}
