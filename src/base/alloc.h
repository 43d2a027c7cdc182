/* Allocation through one seam, so tests can make allocations fail on purpose (torture tests)
 * and every caller is forced to handle NULL. Large buffers (weights, KV) use their own paths. */
#ifndef SG_BASE_ALLOC_H
#define SG_BASE_ALLOC_H

#include <stddef.h>

void *sg_malloc(size_t n);
void *sg_calloc(size_t count, size_t size); /* NULL on overflow of count*size */
void *sg_realloc(void *p, size_t n);
void sg_free(void *p);
char *sg_strdup(const char *s);
char *sg_strndup(const char *s, size_t n);

/* Torture hook: after `n` more successful allocations on any thread, every allocation fails
 * until reset with -1 (the default: never fail). */
void sg_alloc_fail_after(long n);

#endif
