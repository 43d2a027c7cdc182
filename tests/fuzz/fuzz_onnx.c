/* libFuzzer target: the ONNX reader; accepted tensors are touched at both ends and every node's
 * strings and attributes are walked. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "formats/onnx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	sg_onnx *o;
	if (sg_onnx_parse(data, size, "fuzz", &o)) return 0;
	volatile size_t sink = 0;
	for (int i = 0; i < o->n_tensors; i++) {
		const sg_onnx_tensor *t = &o->tensors[i];
		sink += strlen(t->name);
		if (t->n_bytes) sink ^= ((const uint8_t *)t->data)[0] ^ ((const uint8_t *)t->data)[t->n_bytes - 1];
	}
	for (int i = 0; i < o->n_nodes; i++) {
		const sg_onnx_node *n = &o->nodes[i];
		sink += strlen(n->name) + strlen(n->op_type);
		for (size_t k = 0; k < n->n_inputs; k++) sink += strlen(n->inputs[k]);
		for (size_t k = 0; k < n->n_outputs; k++) sink += strlen(n->outputs[k]);
		for (size_t k = 0; k < n->n_attrs; k++) sink += n->attrs[k].n_ints ? (size_t)n->attrs[k].ints[0] : 0;
	}
	(void)sink;
	sg_onnx_free(o);
	return 0;
}
