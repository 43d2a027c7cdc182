#include "base/alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_long fail_after = -1;

static int should_fail(void)
{
	long n = atomic_load_explicit(&fail_after, memory_order_relaxed);
	if (n < 0) return 0;
	if (n == 0) return 1;
	atomic_fetch_sub_explicit(&fail_after, 1, memory_order_relaxed);
	return 0;
}

void sg_alloc_fail_after(long n) { atomic_store(&fail_after, n); }

void *sg_malloc(size_t n) { return should_fail() ? NULL : malloc(n ? n : 1); }

void *sg_calloc(size_t count, size_t size)
{
	if (size && count > (size_t)-1 / size) return NULL;
	return should_fail() ? NULL : calloc(count ? count : 1, size ? size : 1);
}

void *sg_realloc(void *p, size_t n) { return should_fail() ? NULL : realloc(p, n ? n : 1); }

void sg_free(void *p) { free(p); }

char *sg_strndup(const char *s, size_t n)
{
	size_t len = strnlen(s, n);
	char *d = sg_malloc(len + 1);
	if (!d) return NULL;
	memcpy(d, s, len);
	d[len] = 0;
	return d;
}

char *sg_strdup(const char *s) { return sg_strndup(s, (size_t)-1); }
