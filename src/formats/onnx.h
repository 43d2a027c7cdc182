/*
 * ONNX models (protobuf, read with protobuf-c from the messages of src/formats/onnx.proto): the
 * graph's initializers (name, dims, element type, data from raw_data or the typed fields) and its
 * nodes (op type, inputs, outputs, attributes), so a model file can bind its weights by name and
 * find the ones an exporter renamed through the nodes that use them. External data is refused.
 */
#ifndef SG_FORMATS_ONNX_H
#define SG_FORMATS_ONNX_H

#include <stddef.h>
#include <stdint.h>

#include "saragossa.h"

/* ONNX TensorProto.DataType values this reader knows the size of. */
enum {
	SG_ONNX_FLOAT = 1,
	SG_ONNX_UINT8 = 2,
	SG_ONNX_INT8 = 3,
	SG_ONNX_UINT16 = 4,
	SG_ONNX_INT16 = 5,
	SG_ONNX_INT32 = 6,
	SG_ONNX_INT64 = 7,
	SG_ONNX_BOOL = 9,
	SG_ONNX_FLOAT16 = 10,
	SG_ONNX_DOUBLE = 11,
	SG_ONNX_UINT32 = 12,
	SG_ONNX_UINT64 = 13,
	SG_ONNX_BFLOAT16 = 16,
};

#define SG_ONNX_MAX_DIMS 8

typedef struct sg_onnx_tensor {
	const char *name;
	int data_type;                   /* SG_ONNX_* */
	int n_dims;
	int64_t dims[SG_ONNX_MAX_DIMS]; /* outermost first, as the file stores them */
	int64_t n_elems;
	const void *data; /* n_elems values, little-endian, of data_type; owned by the sg_onnx */
	size_t n_bytes;
} sg_onnx_tensor;

typedef struct sg_onnx_attr {
	const char *name;
	int has_i, has_f;
	int64_t i;
	float f;
	const int64_t *ints; /* [n_ints] */
	size_t n_ints;
	const float *floats; /* [n_floats] */
	size_t n_floats;
} sg_onnx_attr;

typedef struct sg_onnx_node {
	const char *name, *op_type; /* "" when absent */
	const char *const *inputs;  /* [n_inputs]; an omitted optional input is "" */
	size_t n_inputs;
	const char *const *outputs; /* [n_outputs] */
	size_t n_outputs;
	sg_onnx_attr *attrs; /* [n_attrs] */
	size_t n_attrs;
} sg_onnx_node;

typedef struct sg_onnx {
	int64_t ir_version;
	int64_t opset; /* of the default domain, 0 when not given */
	sg_onnx_tensor *tensors; /* [n_tensors]: the graph's initializers */
	int n_tensors;
	sg_onnx_node *nodes; /* [n_nodes] in the file's (topological) order */
	int n_nodes;
	void *msg; /* the decoded message that owns the strings and data */
} sg_onnx;

/* Decodes an ONNX model held in data[0..size); `what` names it in errors. A buffer that is not
 * a protobuf message, a model without a graph, a tensor whose data does not match its dims and
 * type, or one stored outside the file is SG_ERR_FORMAT (SG_ERR_UNSUPPORTED for external data or
 * an unknown type) naming it. *out is freed with sg_onnx_free. */
sg_status sg_onnx_parse(const uint8_t *data, size_t size, const char *what, sg_onnx **out);
/* The same from the file at path. */
sg_status sg_onnx_load(const char *path, sg_onnx **out);
void sg_onnx_free(sg_onnx *o);

/* The initializer called name, or NULL. */
const sg_onnx_tensor *sg_onnx_find(const sg_onnx *o, const char *name);
/* The first node named name, or NULL. */
const sg_onnx_node *sg_onnx_find_node(const sg_onnx *o, const char *name);
/* Attribute name of node n, or NULL. */
const sg_onnx_attr *sg_onnx_attr_get(const sg_onnx_node *n, const char *name);
/* Bytes of one element of data_type, 0 for an unknown type. */
size_t sg_onnx_type_size(int data_type);

#endif
