/* Fuzz target: JSON parsing and typed field access on arbitrary bytes (request bodies). */
#include <stddef.h>
#include <stdint.h>

#include "base/json.h"
#include "base/utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *j = NULL;
	sg_utf8_valid(data, size);
	sg_utf8_complete_prefix(data, size);
	if (sg_json_parse((const char *)data, size, "fuzz", &j) != SG_OK) return 0;
	if (json_is_object(j)) {
		const char *key;
		json_t *v;
		json_object_foreach(j, key, v)
		{
			int64_t i;
			double d;
			int b;
			const char *s;
			sg_json_get_int(j, key, &i);
			sg_json_get_num(j, key, &d);
			sg_json_get_bool(j, key, &b);
			sg_json_get_str(j, key, &s);
			(void)v;
		}
	}
	json_decref(j);
	return 0;
}
