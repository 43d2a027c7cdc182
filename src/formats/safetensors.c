/*
 * safetensors header parser. The file is untrusted: every number is checked against the file
 * size before anything points into it, and the error says which tensor and which numbers.
 */
#include "formats/safetensors.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/json.h"

static const struct {
	const char *name;
	sg_type type;
} dtypes[] = {
	{"F64", SG_TYPE_F64},         {"F32", SG_TYPE_F32},         {"F16", SG_TYPE_F16},
	{"BF16", SG_TYPE_BF16},       {"I64", SG_TYPE_I64},         {"I32", SG_TYPE_I32},
	{"I16", SG_TYPE_I16},         {"I8", SG_TYPE_I8},           {"U8", SG_TYPE_U8},
	{"U32", SG_TYPE_U32},         {"BOOL", SG_TYPE_BOOL},       {"F8_E4M3", SG_TYPE_F8_E4M3},
	{"F8_E5M2", SG_TYPE_F8_E5M2},
};

int sg_safetensors_dtype(const char *name)
{
	for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++)
		if (!strcmp(dtypes[i].name, name)) return (int)dtypes[i].type;
	return -1;
}

void sg_safetensors_free(sg_safetensors *s)
{
	if (!s) return;
	for (int i = 0; i < s->n_tensors; i++) sg_free(s->tensors[i].name);
	sg_free(s->tensors);
	if (s->metadata) json_decref(s->metadata);
	memset(s, 0, sizeof(*s));
}

static uint64_t rd64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
	return v;
}

static int by_offset(const void *a, const void *b)
{
	const sg_tensor *x = a, *y = b;
	if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
	return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* Reads one header entry into t; data is the file's first byte. */
static sg_status parse_entry(const char *what, const char *name, json_t *v, const uint8_t *data,
			     uint64_t data_start, uint64_t size, sg_tensor *t)
{
	if (!json_is_object(v))
		return sg_error(SG_ERR_FORMAT, "safetensors: %s: tensor '%s' must be an object, found %s", what,
				name, sg_json_type_name(v));
	const char *dt = NULL;
	if (sg_json_get_str(v, "dtype", &dt))
		return sg_error(SG_ERR_FORMAT, "safetensors: %s: tensor '%s' has no string 'dtype'", what, name);
	int type = sg_safetensors_dtype(dt);
	if (type < 0)
		return sg_error(SG_ERR_FORMAT,
				"safetensors: %s: tensor '%s' has unknown dtype '%s' (known: F64 F32 F16 BF16 I64 "
				"I32 I16 I8 U8 U32 BOOL F8_E4M3 F8_E5M2)",
				what, name, dt);
	json_t *shape = json_object_get(v, "shape"), *offs = json_object_get(v, "data_offsets");
	if (!json_is_array(shape))
		return sg_error(SG_ERR_FORMAT, "safetensors: %s: tensor '%s' has no 'shape' array", what, name);
	size_t nd = json_array_size(shape);
	if (nd > SG_MAX_DIMS)
		return sg_error(SG_ERR_FORMAT, "safetensors: %s: tensor '%s' has %zu dimensions (at most %d)", what,
				name, nd, SG_MAX_DIMS);
	t->type = (sg_type)type;
	t->n_dims = (int)nd;
	for (size_t i = 0; i < nd; i++) {
		json_t *d = json_array_get(shape, i);
		if (!json_is_integer(d) || json_integer_value(d) < 0)
			return sg_error(SG_ERR_FORMAT, "safetensors: %s: tensor '%s' shape[%zu] is not a size", what,
					name, i);
		t->ne[nd - 1 - i] = json_integer_value(d); /* file order is outermost first */
	}
	if (!json_is_array(offs) || json_array_size(offs) != 2 || !json_is_integer(json_array_get(offs, 0)) ||
	    !json_is_integer(json_array_get(offs, 1)))
		return sg_error(SG_ERR_FORMAT, "safetensors: %s: tensor '%s' needs 'data_offsets': [begin, end]",
				what, name);
	json_int_t b = json_integer_value(json_array_get(offs, 0)), e = json_integer_value(json_array_get(offs, 1));
	uint64_t avail = size - data_start;
	if (b < 0 || e < b)
		return sg_error(SG_ERR_FORMAT, "safetensors: %s: tensor '%s' has data_offsets [%lld, %lld]", what,
				name, (long long)b, (long long)e);
	if ((uint64_t)e > avail)
		return sg_error(SG_ERR_FORMAT,
				"safetensors: %s: tensor '%s' data ends at %llu past file size %llu (data section "
				"of %llu bytes from offset %llu)",
				what, name, (unsigned long long)(data_start + (uint64_t)e), (unsigned long long)size,
				(unsigned long long)avail, (unsigned long long)data_start);
	int64_t nel;
	if (sg_shape_product(t->ne, t->n_dims, &nel))
		return sg_error(SG_ERR_FORMAT, "safetensors: %s: tensor '%s' shape is too large", what, name);
	uint64_t want = (uint64_t)nel * (uint64_t)sg_type_get(type)->block_bytes;
	if (want != (uint64_t)(e - b)) {
		char sh[160];
		return sg_error(SG_ERR_FORMAT,
				"safetensors: %s: tensor '%s' is %s %s = %llu bytes but data_offsets [%lld, %lld] "
				"hold %llu",
				what, name, dt, sg_tensor_shape_str(t, sh, sizeof(sh)), (unsigned long long)want,
				(long long)b, (long long)e, (unsigned long long)(e - b));
	}
	t->offset = data_start + (uint64_t)b;
	t->nbytes = (uint64_t)(e - b);
	t->data = data + t->offset;
	return SG_OK;
}

sg_status sg_safetensors_parse(const uint8_t *data, size_t size, const char *what, int file,
			       sg_safetensors *out)
{
	memset(out, 0, sizeof(*out));
	if (!what) what = "(memory)";
	if (size < 8)
		return sg_error(SG_ERR_FORMAT, "safetensors: %s: file is %zu bytes, too short for the 8-byte header "
					       "length", what, size);
	uint64_t hlen = rd64(data);
	if (hlen > SG_SAFETENSORS_MAX_HEADER)
		return sg_error(SG_ERR_FORMAT, "safetensors: %s: header length %llu exceeds the %u-byte limit", what,
				(unsigned long long)hlen, SG_SAFETENSORS_MAX_HEADER);
	if (hlen > size - 8)
		return sg_error(SG_ERR_FORMAT, "safetensors: %s: header length %llu runs past file size %zu", what,
				(unsigned long long)hlen, size);
	if (hlen < 2 || data[8] != '{')
		return sg_error(SG_ERR_FORMAT, "safetensors: %s: header does not start with a JSON object (not a "
					       "safetensors file?)", what);
	json_t *root;
	sg_status st = sg_json_parse((const char *)data + 8, (size_t)hlen, "safetensors header", &root);
	if (st) return sg_error_wrap(st, "safetensors: %s", what);
	if (!json_is_object(root)) {
		json_decref(root);
		return sg_error(SG_ERR_FORMAT, "safetensors: %s: header is not a JSON object", what);
	}
	size_t n = json_object_size(root);
	out->tensors = sg_calloc(n ? n : 1, sizeof(sg_tensor));
	if (!out->tensors) {
		json_decref(root);
		return sg_error(SG_ERR_NOMEM, "safetensors: %s: %zu header entries", what, n);
	}
	out->data_start = 8 + hlen;
	const char *key;
	json_t *v;
	json_object_foreach(root, key, v)
	{
		if (!strcmp(key, "__metadata__")) {
			if (!json_is_object(v)) {
				st = sg_error(SG_ERR_FORMAT, "safetensors: %s: __metadata__ must be an object", what);
				goto fail;
			}
			out->metadata = json_incref(v);
			continue;
		}
		sg_tensor *t = &out->tensors[out->n_tensors];
		st = parse_entry(what, key, v, data, out->data_start, size, t);
		if (st) goto fail;
		t->name = sg_strdup(key);
		if (!t->name) {
			st = sg_error(SG_ERR_NOMEM, "safetensors: %s: tensor names", what);
			goto fail;
		}
		t->file = file;
		out->n_tensors++;
	}
	json_decref(root);
	root = NULL;
	qsort(out->tensors, (size_t)out->n_tensors, sizeof(sg_tensor), by_offset);
	for (int i = 1; i < out->n_tensors; i++) {
		const sg_tensor *a = &out->tensors[i - 1], *b = &out->tensors[i];
		/* empty tensors own no bytes and cannot overlap anything */
		if (a->nbytes && b->nbytes && a->offset + a->nbytes > b->offset) {
			st = sg_error(SG_ERR_FORMAT,
				      "safetensors: %s: tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap", what,
				      a->name, (unsigned long long)(a->offset - out->data_start),
				      (unsigned long long)(a->offset - out->data_start + a->nbytes), b->name,
				      (unsigned long long)(b->offset - out->data_start),
				      (unsigned long long)(b->offset - out->data_start + b->nbytes));
			goto fail;
		}
	}
	return SG_OK;
fail:
	if (root) json_decref(root);
	sg_safetensors_free(out);
	return st;
}
