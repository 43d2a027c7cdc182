/* libFuzzer target: sentence-transformers' modules.json and Pooling config.json, on arbitrary
 * bytes (and sentence_bert_config.json). The first byte picks which reader gets the JSON that follows. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/json.h"
#include "formats/stconfig.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1) return 0;
	json_t *j;
	if (sg_json_parse((const char *)data + 1, size - 1, "fuzz", &j)) return 0;
	sg_st_config c = sg_st_config_default();
	char path[64];
	if (data[0] % 3 == 2) {
		(void)sg_st_config_sbert(j, &c);
	} else if (data[0] % 3 == 1) {
		if (!sg_st_config_modules(j, &c, path, sizeof(path))) {
			volatile size_t sink = strlen(path);
			(void)sink;
		}
	} else {
		(void)sg_st_config_pooling(j, &c);
	}
	json_decref(j);
	return 0;
}
