/* libFuzzer target: the npz (zip of .npy) reader; accepted tensors are touched at both ends.
 * Seed: np.savez of a float16 [2][3], a uint32 [4] and an int64 [2][2] array. */
#include <stddef.h>
#include <stdint.h>

#include "formats/npz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	sg_npz z;
	if (sg_npz_parse(data, size, "fuzz", 0, &z)) return 0;
	volatile uint8_t sink = 0;
	for (int i = 0; i < z.n_tensors; i++)
		if (z.tensors[i].nbytes) sink ^= z.tensors[i].data[0] ^ z.tensors[i].data[z.tensors[i].nbytes - 1];
	(void)sink;
	sg_npz_free(&z);
	return 0;
}
