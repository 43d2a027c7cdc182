/* Arena: bump allocation from chained blocks, freed all at once. For per-load and per-request
 * scratch (parsed headers, tensor tables) where individual frees would be noise. */
#ifndef SG_BASE_ARENA_H
#define SG_BASE_ARENA_H

#include <stddef.h>

typedef struct sg_arena_block sg_arena_block;

typedef struct sg_arena {
	sg_arena_block *head; /* newest block first */
	size_t block_size;    /* default size of a new block */
	size_t used;          /* bytes handed out since the last reset */
} sg_arena;

/* block_size 0 picks 64 KiB. No allocation happens until the first sg_arena_alloc. */
void sg_arena_init(sg_arena *a, size_t block_size);
/* Zeroed memory aligned to `align` (a power of two, ≤ 4096); NULL when out of memory. */
void *sg_arena_alloc(sg_arena *a, size_t size, size_t align);
char *sg_arena_strdup(sg_arena *a, const char *s, size_t len);
/* Keeps the first block for reuse, frees the others. */
void sg_arena_reset(sg_arena *a);
void sg_arena_free(sg_arena *a);

#endif
