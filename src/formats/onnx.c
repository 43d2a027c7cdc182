/* ONNX models (onnx.h), decoded with protobuf-c. */
#include "formats/onnx.h"

#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/mmap.h"
#include "formats/onnx.pb-c.h"

/* protobuf-c allocates through the library's allocator, so tests that fail allocations reach it */
static void *pb_alloc(void *ctx, size_t n) { return sg_malloc(n ? n : 1); }
static void pb_free(void *ctx, void *p) { sg_free(p); }
static ProtobufCAllocator pb_allocator = {pb_alloc, pb_free, NULL};

size_t sg_onnx_type_size(int t)
{
	switch (t) {
	case SG_ONNX_UINT8:
	case SG_ONNX_INT8:
	case SG_ONNX_BOOL: return 1;
	case SG_ONNX_UINT16:
	case SG_ONNX_INT16:
	case SG_ONNX_FLOAT16:
	case SG_ONNX_BFLOAT16: return 2;
	case SG_ONNX_FLOAT:
	case SG_ONNX_INT32:
	case SG_ONNX_UINT32: return 4;
	case SG_ONNX_INT64:
	case SG_ONNX_DOUBLE:
	case SG_ONNX_UINT64: return 8;
	default: return 0;
	}
}

static const char *str_or_empty(const char *s) { return s ? s : ""; }

static sg_status bind_tensor(const Sgonnx__TensorProto *t, const char *what, sg_onnx_tensor *out)
{
	const char *name = str_or_empty(t->name);
	out->name = name;
	if (t->has_data_location && t->data_location == 1)
		return sg_error(SG_ERR_UNSUPPORTED, "onnx %s: tensor '%s' keeps its data in an external file (not read)", what, name);
	if (t->n_dims > SG_ONNX_MAX_DIMS)
		return sg_error(SG_ERR_FORMAT, "onnx %s: tensor '%s' has %zu dims (at most %d)", what, name, t->n_dims, SG_ONNX_MAX_DIMS);
	out->data_type = t->has_data_type ? t->data_type : 0;
	size_t es = sg_onnx_type_size(out->data_type);
	if (!es) return sg_error(SG_ERR_UNSUPPORTED, "onnx %s: tensor '%s' has data type %d (not read)", what, name, out->data_type);
	out->n_dims = (int)t->n_dims;
	int64_t n = 1;
	for (size_t i = 0; i < t->n_dims; i++) {
		int64_t d = t->dims[i];
		if (d < 0 || (d && n > ((int64_t)1 << 40) / d))
			return sg_error(SG_ERR_FORMAT, "onnx %s: tensor '%s' dim %zu = %lld is negative or too large", what, name, i, (long long)d);
		out->dims[i] = d;
		n *= d;
	}
	out->n_elems = n;
	size_t want = (size_t)n * es;
	const void *data = NULL;
	size_t have = 0;
	if (t->has_raw_data) {
		data = t->raw_data.data;
		have = t->raw_data.len;
	} else if (out->data_type == SG_ONNX_FLOAT) {
		data = t->float_data;
		have = t->n_float_data * 4;
	} else if (out->data_type == SG_ONNX_INT64) {
		data = t->int64_data;
		have = t->n_int64_data * 8;
	} else if (out->data_type == SG_ONNX_DOUBLE) {
		data = t->double_data;
		have = t->n_double_data * 8;
	} else if (out->data_type == SG_ONNX_INT32) {
		data = t->int32_data;
		have = t->n_int32_data * 4;
	} else if (t->n_int32_data) {
		/* the narrow types (8/16-bit, bool) are stored one per int32 in int32_data: not read */
		return sg_error(SG_ERR_UNSUPPORTED, "onnx %s: tensor '%s' of type %d stores its values in int32_data (not read)", what, name, out->data_type);
	}
	if (have != want)
		return sg_error(SG_ERR_FORMAT, "onnx %s: tensor '%s' holds %zu bytes, its dims and type need %zu", what, name, have, want);
	out->data = data;
	out->n_bytes = have;
	return SG_OK;
}

sg_status sg_onnx_parse(const uint8_t *data, size_t size, const char *what, sg_onnx **out)
{
	if (!out) return SG_FAIL(SG_ERR_INVALID_ARG, "out is NULL");
	*out = NULL;
	if (!what) what = "model";
	if (!data || !size) return sg_error(SG_ERR_FORMAT, "onnx %s: the file is empty", what);
	Sgonnx__ModelProto *m = sgonnx__model_proto__unpack(&pb_allocator, size, data);
	if (!m) return sg_error(SG_ERR_FORMAT, "onnx %s: not an ONNX model (the protobuf message does not decode: truncated or another format)", what);
	sg_onnx *o = sg_calloc(1, sizeof *o);
	if (!o) {
		sgonnx__model_proto__free_unpacked(m, &pb_allocator);
		return SG_FAIL(SG_ERR_NOMEM, "onnx model");
	}
	o->msg = m;
	sg_status st = SG_OK;
	const Sgonnx__GraphProto *g = m->graph;
	if (!g) {
		st = sg_error(SG_ERR_FORMAT, "onnx %s: the model has no graph", what);
		goto fail;
	}
	o->ir_version = m->has_ir_version ? m->ir_version : 0;
	for (size_t i = 0; i < m->n_opset_import; i++) {
		const Sgonnx__OperatorSetIdProto *op = m->opset_import[i];
		if ((!op->domain || !op->domain[0]) && op->has_version) o->opset = op->version;
	}
	if (g->n_initializer > (1u << 24) || g->n_node > (1u << 24)) {
		st = sg_error(SG_ERR_FORMAT, "onnx %s: %zu initializers, %zu nodes", what, g->n_initializer, g->n_node);
		goto fail;
	}
	o->tensors = sg_calloc(g->n_initializer + 1, sizeof *o->tensors);
	o->nodes = sg_calloc(g->n_node + 1, sizeof *o->nodes);
	if (!o->tensors || !o->nodes) {
		st = SG_FAIL(SG_ERR_NOMEM, "onnx tables");
		goto fail;
	}
	for (size_t i = 0; i < g->n_initializer && !st; i++) st = bind_tensor(g->initializer[i], what, &o->tensors[i]);
	if (st) goto fail;
	o->n_tensors = (int)g->n_initializer;
	for (size_t i = 0; i < g->n_node; i++) {
		const Sgonnx__NodeProto *np = g->node[i];
		sg_onnx_node *n = &o->nodes[i];
		n->name = str_or_empty(np->name);
		n->op_type = str_or_empty(np->op_type);
		n->inputs = (const char *const *)np->input;
		n->n_inputs = np->n_input;
		n->outputs = (const char *const *)np->output;
		n->n_outputs = np->n_output;
		n->n_attrs = np->n_attribute;
		if (n->n_attrs && !(n->attrs = sg_calloc(n->n_attrs, sizeof *n->attrs))) {
			st = SG_FAIL(SG_ERR_NOMEM, "onnx attributes");
			goto fail;
		}
		for (size_t k = 0; k < n->n_attrs; k++) {
			const Sgonnx__AttributeProto *a = np->attribute[k];
			n->attrs[k] = (sg_onnx_attr){.name = str_or_empty(a->name), .has_i = a->has_i, .has_f = a->has_f,
						     .i = a->i, .f = a->f, .ints = a->ints, .n_ints = a->n_ints,
						     .floats = a->floats, .n_floats = a->n_floats};
		}
		o->n_nodes = (int)i + 1;
	}
	*out = o;
	return SG_OK;
fail:
	sg_onnx_free(o);
	return st;
}

sg_status sg_onnx_load(const char *path, sg_onnx **out)
{
	if (!out) return SG_FAIL(SG_ERR_INVALID_ARG, "out is NULL");
	*out = NULL;
	sg_mapped_file f;
	sg_status st = sg_mmap_open(path, &f);
	if (st) return st;
	st = sg_onnx_parse(f.data, f.size, path, out);
	sg_mmap_close(&f); /* the decoded message holds copies of the bytes it needs */
	return st;
}

void sg_onnx_free(sg_onnx *o)
{
	if (!o) return;
	for (int i = 0; i < o->n_nodes; i++) sg_free(o->nodes[i].attrs);
	sg_free(o->nodes);
	sg_free(o->tensors);
	if (o->msg) sgonnx__model_proto__free_unpacked(o->msg, &pb_allocator);
	sg_free(o);
}

const sg_onnx_tensor *sg_onnx_find(const sg_onnx *o, const char *name)
{
	for (int i = 0; o && i < o->n_tensors; i++)
		if (!strcmp(o->tensors[i].name, name)) return &o->tensors[i];
	return NULL;
}

const sg_onnx_node *sg_onnx_find_node(const sg_onnx *o, const char *name)
{
	for (int i = 0; o && i < o->n_nodes; i++)
		if (!strcmp(o->nodes[i].name, name)) return &o->nodes[i];
	return NULL;
}

const sg_onnx_attr *sg_onnx_attr_get(const sg_onnx_node *n, const char *name)
{
	for (size_t i = 0; n && i < n->n_attrs; i++)
		if (!strcmp(n->attrs[i].name, name)) return &n->attrs[i];
	return NULL;
}
