/*
 * safetensors: an 8-byte little-endian header length N, N bytes of JSON
 * ({"name": {"dtype": "F16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}}),
 * then the data; offsets are relative to the end of the header.
 */
#ifndef SG_FORMATS_SAFETENSORS_H
#define SG_FORMATS_SAFETENSORS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "formats/tensor.h"
#include "saragossa.h"

/* Largest JSON header accepted (the reference implementation's own limit). */
#define SG_SAFETENSORS_MAX_HEADER (100u << 20)

typedef struct sg_safetensors {
	sg_tensor *tensors; /* [n_tensors], sorted by offset; owned */
	int n_tensors;
	json_t *metadata;    /* the "__metadata__" object or NULL; owned reference */
	uint64_t data_start; /* 8 + N */
} sg_safetensors;

/* Parses and validates the header of a safetensors file held in data[0..size): header length,
 * JSON, dtypes, shapes, offsets inside the file, no two tensors overlapping, and
 * shape x dtype size = byte length. `what` names the file in errors; tensors get `file`.
 * On error *out is left empty and the message names the tensor and the numbers. */
sg_status sg_safetensors_parse(const uint8_t *data, size_t size, const char *what, int file,
			       sg_safetensors *out);
void sg_safetensors_free(sg_safetensors *s);

/* The sg_type of a safetensors dtype name ("BF16", "F8_E4M3", ...), or -1. */
int sg_safetensors_dtype(const char *name);

#endif
