/* libFuzzer target: the CTranslate2 model.bin parser; accepted variables are touched at both ends
 * and every name is looked up again. */
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "formats/ct2.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	sg_ct2 c;
	if (sg_ct2_parse(data, size, "fuzz", &c)) return 0;
	volatile uint8_t sink = 0;
	for (int i = 0; i < c.n_vars; i++) {
		const sg_tensor *t = &c.vars[i].t;
		if (t->nbytes) sink ^= t->data[0] ^ t->data[t->nbytes - 1];
		if (c.vars[i].scale && c.vars[i].scale->nbytes) sink ^= c.vars[i].scale->data[0];
		SG_ASSERT(sg_ct2_find(&c, t->name) == &c.vars[i]);
	}
	for (int i = 0; i < c.n_aliases; i++)
		SG_ASSERT(sg_ct2_find(&c, c.aliases[i].name) == &c.vars[c.aliases[i].target]);
	(void)sink;
	sg_ct2_close(&c);
	return 0;
}
