/* libFuzzer target: whisper.cpp's ggml model file parser; accepted tensors are touched at both
 * ends, every name is looked up again, every vocabulary token read to its end. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/error.h"
#include "formats/ggml_whisper.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	sg_ggml_whisper g;
	if (sg_ggml_whisper_parse(data, size, "fuzz", &g)) return 0;
	volatile uint8_t sink = 0;
	for (int i = 0; i < g.n_tensors; i++) {
		const sg_tensor *t = &g.tensors[i];
		if (t->nbytes) sink ^= t->data[0] ^ t->data[t->nbytes - 1];
		SG_ASSERT(sg_ggml_whisper_find(&g, t->name) == t);
	}
	for (int i = 0; i < g.n_vocab_words; i++) SG_ASSERT(strlen(g.vocab[i]) <= g.vocab_len[i]);
	sink ^= g.filters[(size_t)g.n_mel * (size_t)g.n_fft * 4 - 1];
	(void)sink;
	sg_ggml_whisper_close(&g);
	return 0;
}
