#include "formats/tensor.h"

#include <stdio.h>

char *sg_tensor_shape_str(const sg_tensor *t, char *buf, int cap)
{
	int n = snprintf(buf, (size_t)cap, "[");
	for (int i = 0; i < t->n_dims && n < cap; i++)
		n += snprintf(buf + n, (size_t)(cap - n), "%s%lld", i ? ", " : "", (long long)t->ne[i]);
	if (n < cap) snprintf(buf + n, (size_t)(cap - n), "]");
	return buf;
}

int sg_shape_product(const int64_t *ne, int n, int64_t *out)
{
	int64_t p = 1;
	for (int i = 0; i < n; i++) {
		if (ne[i] < 0) return -1;
		if (ne[i] && p > (INT64_C(1) << 62) / ne[i]) return -1;
		p *= ne[i];
	}
	*out = p;
	return 0;
}
