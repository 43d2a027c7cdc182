/* Shared by test_sampler.c and test_backend_cuda.c: the order the sampler's top-k ranks logits in
 * (NaN as -inf, +inf as FLT_MAX, -0 equal to 0, ties to the lower id), written out plainly by a
 * full sort, as the reference for the candidates a backend hands over. */
#ifndef SG_TEST_RANK_REF_H
#define SG_TEST_RANK_REF_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static float rank_value(float v)
{
	if (v != v) return -INFINITY;
	if (v > FLT_MAX) return FLT_MAX;
	return v == 0.0f ? 0.0f : v;
}

static const float *rank_of;
static int cmp_rank(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	float vx = rank_value(rank_of[x]), vy = rank_value(rank_of[y]);
	if (vx != vy) return vx > vy ? -1 : 1;
	return (x > y) - (x < y);
}

/* ord [n] = the ids of l [n], best first. */
static void rank_order(const float *l, int64_t n, int32_t *ord)
{
	for (int64_t i = 0; i < n; i++) ord[i] = (int32_t)i;
	rank_of = l;
	qsort(ord, (size_t)n, sizeof(*ord), cmp_rank);
}

#endif
