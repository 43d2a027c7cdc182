/* Unit tests of src/formats/onnx: initializers from raw_data and the typed fields, nodes with
 * their attributes, and clean errors for a truncated file, garbage and a tensor whose data is
 * short of its dims (fixtures made by tools/make_onnx_fixtures.py with the onnx package). */
#include <criterion/criterion.h>

#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/mmap.h"
#include "formats/onnx.h"

#define TINY "tests/fixtures/onnx/tiny.onnx"

Test(onnx, reads_initializers_from_raw_and_typed_fields)
{
	sg_onnx *o;
	cr_assert_eq(sg_onnx_load(TINY, &o), SG_OK, "%s", sg_last_error());
	cr_assert_eq(o->opset, 15);
	cr_assert_eq(o->ir_version, 8);
	cr_assert_eq(o->n_tensors, 3);
	const sg_onnx_tensor *w = sg_onnx_find(o, "conv.weight");
	cr_assert_not_null(w);
	cr_assert_eq(w->data_type, SG_ONNX_FLOAT);
	cr_assert_eq(w->n_dims, 3);
	cr_assert(w->dims[0] == 2 && w->dims[1] == 3 && w->dims[2] == 5);
	cr_assert_eq(w->n_elems, 30);
	const float *wf = w->data;
	cr_assert_float_eq(wf[29], 29.0f / 8, 0);
	const sg_onnx_tensor *b = sg_onnx_find(o, "conv.bias");
	cr_assert_not_null(b);
	cr_assert_float_eq(((const float *)b->data)[1], -1.25f, 0);
	const sg_onnx_tensor *s = sg_onnx_find(o, "shape");
	cr_assert_eq(s->data_type, SG_ONNX_INT64);
	cr_assert_eq(((const int64_t *)s->data)[1], -1);
	cr_assert_null(sg_onnx_find(o, "nope"));
	sg_onnx_free(o);
}

Test(onnx, reads_nodes_and_attributes)
{
	sg_onnx *o;
	cr_assert_eq(sg_onnx_load(TINY, &o), SG_OK, "%s", sg_last_error());
	cr_assert_eq(o->n_nodes, 2);
	const sg_onnx_node *n = sg_onnx_find_node(o, "/enc/conv/Conv");
	cr_assert_not_null(n);
	cr_assert_str_eq(n->op_type, "Conv");
	cr_assert_eq(n->n_inputs, 3);
	cr_assert_str_eq(n->inputs[1], "conv.weight");
	cr_assert_str_eq(n->outputs[0], "y");
	const sg_onnx_attr *d = sg_onnx_attr_get(n, "dilations");
	cr_assert(d && d->n_ints == 1 && d->ints[0] == 2);
	const sg_onnx_attr *p = sg_onnx_attr_get(n, "pads");
	cr_assert(p && p->n_ints == 2 && p->ints[1] == 4);
	const sg_onnx_attr *g = sg_onnx_attr_get(n, "group");
	cr_assert(g && g->has_i && g->i == 1);
	cr_assert_null(sg_onnx_attr_get(n, "nope"));
	sg_onnx_free(o);
}

Test(onnx, rejects_truncated_garbage_and_short_tensors)
{
	sg_mapped_file f;
	cr_assert_eq(sg_mmap_open(TINY, &f), SG_OK);
	sg_onnx *o = (sg_onnx *)1;
	/* every truncation either fails cleanly or decodes a smaller (valid) message */
	int failed = 0;
	for (size_t n = 0; n < f.size; n++) {
		sg_status st = sg_onnx_parse(f.data, n, "cut", &o);
		if (st) {
			cr_assert_null(o);
			cr_assert(st == SG_ERR_FORMAT, "cut at %zu: %s", n, sg_last_error());
			failed++;
		} else {
			sg_onnx_free(o);
		}
	}
	cr_assert_gt(failed, (int)f.size / 2);
	cr_assert_eq(sg_onnx_parse(f.data, f.size - 20, "cut", &o), SG_ERR_FORMAT);
	cr_assert(strstr(sg_last_error(), "onnx cut"), "%s", sg_last_error());
	sg_mmap_close(&f);
	const uint8_t junk[] = "\xff\xff\xff\xff\xff garbage that is no protobuf";
	cr_assert_eq(sg_onnx_parse(junk, sizeof junk, "junk", &o), SG_ERR_FORMAT);
	cr_assert_eq(sg_onnx_parse(junk, 0, "empty", &o), SG_ERR_FORMAT);
	cr_assert_eq(sg_onnx_load("tests/fixtures/onnx/bad_size.onnx", &o), SG_ERR_FORMAT);
	cr_assert(strstr(sg_last_error(), "'short' holds 16 bytes, its dims and type need 20"), "%s", sg_last_error());
	cr_assert_neq(sg_onnx_load("tests/fixtures/onnx/missing.onnx", &o), SG_OK);
	cr_assert(strstr(sg_last_error(), "missing.onnx"), "%s", sg_last_error());
}
