/*
 * npz: numpy's archive of arrays (np.savez), the weights.npz of MLX model folders. A zip file
 * whose entries are named "<array>.npy"; each entry is a .npy file: the magic "\x93NUMPY", a
 * version byte pair, a little-endian header length (2 bytes in version 1, 4 in 2 and 3), a
 * Python dict literal {'descr': '<f2', 'fortran_order': False, 'shape': (384, 80, 3), }, then
 * the array's bytes in C order.
 *
 * Entries must be stored (np.savez, mx.savez); deflated ones (np.savez_compressed) are refused
 * with an error that says so, since the tensors point into the file's map. Zip64 sizes and
 * offsets are read (numpy writes every entry with a zip64 extra field).
 */
#ifndef SG_FORMATS_NPZ_H
#define SG_FORMATS_NPZ_H

#include <stddef.h>
#include <stdint.h>

#include "formats/tensor.h"
#include "saragossa.h"

typedef struct sg_npz {
	sg_tensor *tensors; /* [n_tensors] in archive order; names without ".npy"; owned */
	int n_tensors;
} sg_npz;

/* Parses the archive held in data[0..size): the end-of-central-directory record (zip64 too),
 * every central entry, its local header and its .npy header. Each tensor's data points into
 * data (at any byte: .npy payloads are not aligned inside a zip). `what` names the file in
 * errors; tensors get `file`. On error *out is left empty and the message names the entry and
 * the numbers. */
sg_status sg_npz_parse(const uint8_t *data, size_t size, const char *what, int file, sg_npz *out);
void sg_npz_free(sg_npz *z);

#endif
