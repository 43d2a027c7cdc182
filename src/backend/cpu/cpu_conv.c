/*
 * CPU ops of the audio codec decoders (Qwen3-TTS's speech tokenizer): 1-D convolution (grouped,
 * dilated, strided, zero-padded on the left), transposed 1-D convolution, SnakeBeta and exact
 * GELU. Activations are time-major ([T][C]); the weights come permuted to [K][Cout][Cin] so each
 * tap is one row-major matrix and an output element is a sum of contiguous dot products through
 * the kernel set (SIMD or the scalar reference). Work is split over output channels; each output
 * element is computed by the same code whatever the thread count.
 */
#include "backend/cpu/cpu_internal.h"

#include <math.h>
#include <string.h>

#include "base/error.h"
#include "base/threadpool.h"

/* time rows per tile: a weight row is read once per tile */
#define CONV_TILE 16

static sg_status need_f32(const char *op, const char *what, const sg_btensor *t)
{
	if (!t || !t->data) return sg_error(SG_ERR_INVALID_ARG, "cpu %s: %s is missing", op, what);
	if (t->type != SG_TYPE_F32)
		return sg_error(SG_ERR_INVALID_ARG, "cpu %s: %s must be F32, found %s", op, what, sg_type_name_cpu(t->type));
	return SG_OK;
}

typedef struct {
	const sg_cpu_kernels *k;
	const float *x, *w, *b;
	float *y;
	int64_t T, Tout, Cin, Cout, K, Cg, Og; /* Cg inputs and Og outputs per group */
	int stride, dil, pad, transposed;
} conv_job;

/* y[t][co] for co in [c0, c1): bias, then every tap's dot products, tile by tile */
static void conv_range(void *ctx, int64_t c0, int64_t c1, int ith)
{
	(void)ith;
	conv_job *j = ctx;
	for (int64_t t0 = 0; t0 < j->Tout; t0 += CONV_TILE) {
		int64_t t1 = t0 + CONV_TILE < j->Tout ? t0 + CONV_TILE : j->Tout;
		for (int64_t t = t0; t < t1; t++)
			for (int64_t co = c0; co < c1; co++) j->y[t * j->Cout + co] = j->b ? j->b[co] : 0.0f;
		for (int64_t k = 0; k < j->K; k++)
			for (int64_t co = c0; co < c1; co++) {
				const float *wr = j->w + (k * j->Cout + co) * j->Cg;
				int64_t g = co / j->Og;
				for (int64_t t = t0; t < t1; t++) {
					int64_t src;
					if (j->transposed) {
						int64_t r = t - k;
						if (r < 0 || r % j->stride) continue;
						src = r / j->stride;
					} else {
						src = t * j->stride + k * j->dil - j->pad;
					}
					if (src < 0 || src >= j->T) continue;
					const float *xr = j->x + src * j->Cin + g * j->Cg;
					j->y[t * j->Cout + co] += j->k->dot_f32(wr, xr, j->Cg);
				}
			}
	}
}

/* depthwise (groups = Cin = Cout): vectorised over channels */
static void conv_dw_range(void *ctx, int64_t t0, int64_t t1, int ith)
{
	(void)ith;
	conv_job *j = ctx;
	int64_t C = j->Cout;
	for (int64_t t = t0; t < t1; t++) {
		float *yr = j->y + t * C;
		if (j->b) memcpy(yr, j->b, sizeof(float) * (size_t)C);
		else memset(yr, 0, sizeof(float) * (size_t)C);
		for (int64_t k = 0; k < j->K; k++) {
			int64_t src = t * j->stride + k * j->dil - j->pad;
			if (src < 0 || src >= j->T) continue;
			const float *xr = j->x + src * C, *wr = j->w + k * C;
			for (int64_t c = 0; c < C; c++) yr[c] += wr[c] * xr[c];
		}
	}
}

static sg_status conv_common(const char *op, const sg_btensor *x, const sg_btensor *w, const sg_btensor *bias,
			     sg_btensor *y, conv_job *j)
{
	sg_status st = need_f32(op, "x", x);
	if (!st) st = need_f32(op, "w", w);
	if (!st) st = need_f32(op, "y", y);
	if (!st && bias) st = need_f32(op, "bias", bias);
	if (st) return st;
	if (x->data == y->data) return sg_error(SG_ERR_INVALID_ARG, "cpu %s: y aliases x", op);
	j->x = x->data;
	j->w = w->data;
	j->b = bias ? bias->data : NULL;
	j->y = y->data;
	j->T = sg_btensor_rows(x);
	j->Cin = x->ne[0];
	j->Tout = sg_btensor_rows(y);
	j->Cout = y->ne[0];
	j->Cg = w->ne[0];
	j->K = w->ne[2] * w->ne[3];
	if (w->ne[1] != j->Cout || (bias && bias->ne[0] != j->Cout) || j->K < 1 || j->T < 1)
		return sg_error(SG_ERR_INVALID_ARG, "cpu %s: w [%lld][%lld][%lld] for x [%lld][%lld] -> y [%lld][%lld]", op,
				(long long)j->K, (long long)w->ne[1], (long long)w->ne[0], (long long)j->T,
				(long long)j->Cin, (long long)j->Tout, (long long)j->Cout);
	return SG_OK;
}

sg_status sg_cpu_conv1d(sg_backend *be, const sg_btensor *x, const sg_btensor *w, const sg_btensor *bias,
			const sg_conv_params *p, sg_btensor *y)
{
	sg_cpu_backend *cb = (sg_cpu_backend *)be;
	conv_job j = {.k = cb->k};
	sg_status st = conv_common("conv1d", x, w, bias, y, &j);
	if (st) return st;
	int groups = p->groups > 0 ? p->groups : 1;
	if (p->stride < 1 || p->dilation < 1 || p->pad < 0 || j.Cin % groups || j.Cout % groups || j.Cg != j.Cin / groups)
		return sg_error(SG_ERR_INVALID_ARG, "cpu conv1d: stride %d, dilation %d, pad %d, %d groups for %lld -> %lld channels (w rows of %lld)",
				p->stride, p->dilation, p->pad, groups, (long long)j.Cin, (long long)j.Cout, (long long)j.Cg);
	j.stride = p->stride;
	j.dil = p->dilation;
	j.pad = p->pad;
	j.Og = j.Cout / groups;
	if (groups > 1 && groups == j.Cin && groups == j.Cout) {
		sg_parallel_for(cb->pool, j.Tout, 8, conv_dw_range, &j);
		return SG_OK;
	}
	sg_parallel_for(cb->pool, j.Cout, 8, conv_range, &j);
	return SG_OK;
}

sg_status sg_cpu_conv_transpose1d(sg_backend *be, const sg_btensor *x, const sg_btensor *w, const sg_btensor *bias,
				  int stride, sg_btensor *y)
{
	sg_cpu_backend *cb = (sg_cpu_backend *)be;
	conv_job j = {.k = cb->k};
	sg_status st = conv_common("conv_transpose1d", x, w, bias, y, &j);
	if (st) return st;
	if (stride < 1 || j.Cg != j.Cin || j.Tout > (j.T - 1) * stride + j.K)
		return sg_error(SG_ERR_INVALID_ARG, "cpu conv_transpose1d: stride %d, w rows of %lld for %lld channels, %lld -> %lld rows",
				stride, (long long)j.Cg, (long long)j.Cin, (long long)j.T, (long long)j.Tout);
	j.stride = stride;
	j.transposed = 1;
	j.Og = j.Cout;
	sg_parallel_for(cb->pool, j.Cout, 8, conv_range, &j);
	return SG_OK;
}

typedef struct {
	const float *x, *a, *b;
	float *y;
	int64_t C;
} snake_job;

static void snake_range(void *ctx, int64_t r0, int64_t r1, int ith)
{
	(void)ith;
	snake_job *j = ctx;
	for (int64_t r = r0; r < r1; r++)
		for (int64_t c = 0; c < j->C; c++) {
			float v = j->x[r * j->C + c], s = sinf(v * j->a[c]);
			j->y[r * j->C + c] = v + 1.0f / (j->b[c] + 1e-9f) * (s * s);
		}
}

sg_status sg_cpu_snake(sg_backend *be, const sg_btensor *x, const sg_btensor *a, const sg_btensor *b, sg_btensor *y)
{
	sg_status st = need_f32("snake", "x", x);
	if (!st) st = need_f32("snake", "a", a);
	if (!st) st = need_f32("snake", "b", b);
	if (!st) st = need_f32("snake", "y", y);
	if (st) return st;
	if (a->ne[0] != x->ne[0] || b->ne[0] != x->ne[0] || y->ne[0] != x->ne[0] || sg_btensor_rows(y) != sg_btensor_rows(x))
		return sg_error(SG_ERR_INVALID_ARG, "cpu snake: x [%lld][%lld], a [%lld], b [%lld], y [%lld][%lld]",
				(long long)sg_btensor_rows(x), (long long)x->ne[0], (long long)a->ne[0], (long long)b->ne[0],
				(long long)sg_btensor_rows(y), (long long)y->ne[0]);
	snake_job j = {x->data, a->data, b->data, y->data, x->ne[0]};
	sg_parallel_for(((sg_cpu_backend *)be)->pool, sg_btensor_rows(x), 4, snake_range, &j);
	return SG_OK;
}

typedef struct {
	const float *x;
	float *y;
} gelu_job;

static void gelu_range(void *ctx, int64_t i0, int64_t i1, int ith)
{
	(void)ith;
	gelu_job *j = ctx;
	for (int64_t i = i0; i < i1; i++) {
		float v = j->x[i];
		j->y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
	}
}

sg_status sg_cpu_gelu(sg_backend *be, const sg_btensor *x, sg_btensor *y)
{
	sg_status st = need_f32("gelu", "x", x);
	if (!st) st = need_f32("gelu", "y", y);
	if (st) return st;
	int64_t n = x->ne[0] * sg_btensor_rows(x);
	if (y->ne[0] * sg_btensor_rows(y) != n) return sg_error(SG_ERR_INVALID_ARG, "cpu gelu: x and y differ in size");
	gelu_job j = {x->data, y->data};
	sg_parallel_for(((sg_cpu_backend *)be)->pool, n, 1024, gelu_range, &j);
	return SG_OK;
}
