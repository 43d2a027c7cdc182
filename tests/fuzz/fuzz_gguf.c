/* libFuzzer target: the GGUF parser and the model description read from its metadata. Every
 * tensor it accepts is touched at both ends and every string array walked, so ASan sees any
 * pointer the parser let out of bounds. */
#include <stddef.h>
#include <stdint.h>

#include "formats/gguf.h"
#include "formats/model_desc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	sg_gguf g;
	if (sg_gguf_parse(data, size, "fuzz", 0, &g)) return 0;
	volatile uint8_t sink = 0;
	for (int i = 0; i < g.n_tensors; i++)
		if (g.tensors[i].nbytes) sink ^= g.tensors[i].data[0] ^ g.tensors[i].data[g.tensors[i].nbytes - 1];
	for (int64_t i = 0; i < g.n_kv; i++) {
		char buf[128];
		sg_gguf_kv_str(&g.kv[i], buf, sizeof(buf));
		sg_gguf_str_iter it;
		sg_gguf_str_iter_init(&g.kv[i], &it);
		const char *s;
		uint64_t len;
		while (sg_gguf_str_next(&it, &s, &len))
			if (len) sink ^= (uint8_t)s[len - 1];
		double d;
		for (uint64_t k = 0; k < g.kv[i].arr_n && k < 4; k++) sg_gguf_arr_num(&g.kv[i], k, &d);
	}
	sg_model_desc desc;
	if (!sg_model_desc_from_gguf(&g, &desc)) sg_model_desc_free(&desc);
	(void)sink;
	sg_gguf_free(&g);
	return 0;
}
