/* libFuzzer target: config.json -> model description, on arbitrary JSON. */
#include <stddef.h>
#include <stdint.h>

#include "base/json.h"
#include "formats/model_desc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *j;
	if (sg_json_parse((const char *)data, size, "fuzz", &j)) return 0;
	sg_model_desc d;
	if (!sg_model_desc_from_config(j, &d)) {
		volatile int sink = 0;
		for (int i = 0; i < d.n_layer; i++) sink += d.layers[i].head_dim + d.layers[i].kv_source;
		(void)sink;
		sg_model_desc_free(&d);
	}
	json_decref(j);
	return 0;
}
