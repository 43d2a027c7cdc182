#include "base/arena.h"
#include "base/alloc.h"

#include <stdint.h>
#include <string.h>

struct sg_arena_block {
	sg_arena_block *next;
	size_t cap, off;
	unsigned char data[];
};

void sg_arena_init(sg_arena *a, size_t block_size)
{
	a->head = NULL;
	a->block_size = block_size ? block_size : 64 * 1024;
	a->used = 0;
}

void *sg_arena_alloc(sg_arena *a, size_t size, size_t align)
{
	if (align == 0) align = 1;
	if ((align & (align - 1)) || align > 4096) return NULL;
	sg_arena_block *b = a->head;
	if (b) {
		/* align the address, not the offset: malloc only guarantees 16 bytes */
		uintptr_t base = (uintptr_t)b->data;
		size_t off = (size_t)(((base + b->off + align - 1) & ~(uintptr_t)(align - 1)) - base);
		if (off <= b->cap && size <= b->cap - off) {
			b->off = off + size;
			a->used += size;
			memset(b->data + off, 0, size);
			return b->data + off;
		}
	}
	if (size > SIZE_MAX - align - sizeof(sg_arena_block)) return NULL;
	size_t cap = size + align > a->block_size ? size + align : a->block_size;
	sg_arena_block *nb = sg_malloc(sizeof(*nb) + cap);
	if (!nb) return NULL;
	nb->cap = cap;
	nb->next = a->head;
	a->head = nb;
	size_t off = (align - ((uintptr_t)nb->data & (align - 1))) & (align - 1);
	nb->off = off + size;
	a->used += size;
	memset(nb->data + off, 0, size);
	return nb->data + off;
}

char *sg_arena_strdup(sg_arena *a, const char *s, size_t len)
{
	char *d = sg_arena_alloc(a, len + 1, 1);
	if (!d) return NULL;
	memcpy(d, s, len);
	d[len] = 0;
	return d;
}

void sg_arena_reset(sg_arena *a)
{
	sg_arena_block *b = a->head;
	if (!b) return;
	/* keep the oldest block (the last in the chain): it is the usual working size */
	sg_arena_block *keep = b;
	while (keep->next) keep = keep->next;
	while (b != keep) {
		sg_arena_block *n = b->next;
		sg_free(b);
		b = n;
	}
	keep->off = 0;
	a->head = keep;
	a->used = 0;
}

void sg_arena_free(sg_arena *a)
{
	sg_arena_block *b = a->head;
	while (b) {
		sg_arena_block *n = b->next;
		sg_free(b);
		b = n;
	}
	a->head = NULL;
	a->used = 0;
}
