/* Read-only memory maps of whole files. Weights are used in place from the map on the CPU. */
#ifndef SG_BASE_MMAP_H
#define SG_BASE_MMAP_H

#include <stddef.h>
#include <stdint.h>

#include "saragossa.h"

typedef struct sg_mapped_file {
	const uint8_t *data; /* NULL for an empty file */
	size_t size;
	char *path; /* owned copy, for error messages */
} sg_mapped_file;

/* Maps `path` read-only. Errors name the path and the reason (missing, a directory, no
 * permission). The map does not read the file: pages come in on first touch. */
sg_status sg_mmap_open(const char *path, sg_mapped_file *out);
void sg_mmap_close(sg_mapped_file *f);
/* How many maps sg_mmap_open has made in this process: lets a test prove that loading a model
 * maps each of its files once. */
uint64_t sg_mmap_open_count(void);

/* Reads a whole (small) file into a NUL-terminated heap buffer; *len excludes the NUL.
 * Refuses files larger than max_bytes. */
sg_status sg_read_file(const char *path, size_t max_bytes, char **out, size_t *len);

#endif
