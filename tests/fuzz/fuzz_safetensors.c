/* libFuzzer target: the safetensors header parser; accepted tensors are touched at both ends. */
#include <stddef.h>
#include <stdint.h>

#include "formats/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	sg_safetensors s;
	if (sg_safetensors_parse(data, size, "fuzz", 0, &s)) return 0;
	volatile uint8_t sink = 0;
	for (int i = 0; i < s.n_tensors; i++)
		if (s.tensors[i].nbytes) sink ^= s.tensors[i].data[0] ^ s.tensors[i].data[s.tensors[i].nbytes - 1];
	(void)sink;
	sg_safetensors_free(&s);
	return 0;
}
