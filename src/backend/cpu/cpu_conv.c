/*
 * CPU ops of the audio codec decoders (Qwen3-TTS's speech tokenizer, Piper's VITS): 1-D
 * convolution (grouped, dilated, strided, zero-padded on the left), transposed 1-D convolution,
 * SnakeBeta, exact GELU and WaveNet's tanh-sigmoid gate. Activations are time-major ([T][C]). A
 * convolution is an im2col of the input (each row the K taps' input rows side by side) times the
 * weight viewed as [Cout][K*Cin], through the backend's matmul (its GEMM for many rows); a
 * transposed convolution is one such product per output phase (t mod stride). Depthwise and other
 * grouped convolutions run direct loops.
 * A weight bound with SG_LAYOUT_CONV1D is packed once (SG_CPU_LAYOUT_CONV) and its convolution
 * runs the kernel set's tile kernel straight on the input rows: no im2col copies, and each
 * input row is read once per panel of outputs instead of once per pair of output channels.
 */
#include "backend/cpu/cpu_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/threadpool.h"

static sg_status need_f32(const char *op, const char *what, const sg_btensor *t)
{
	if (!t || !t->data) return sg_error(SG_ERR_INVALID_ARG, "cpu %s: %s is missing", op, what);
	if (t->type != SG_TYPE_F32)
		return sg_error(SG_ERR_INVALID_ARG, "cpu %s: %s must be F32, found %s", op, what, sg_type_name_cpu(t->type));
	return SG_OK;
}

/* im2col tiles of at most this many floats: the GEMM reads a tile while it is in cache */
#define COL_TILE (1 << 20)

typedef struct {
	const sg_cpu_kernels *k;
	const float *x, *w, *b;
	float *y;
	int64_t T, Tout, Cin, Cout, K, Cg, Og; /* Cg inputs and Og outputs per group */
	int stride, dil, pad;
} conv_job;

/* grouped (not depthwise): y[t][co] for co in [c0, c1), a dot product per tap */
static void conv_group_range(void *ctx, int64_t c0, int64_t c1, int ith)
{
	(void)ith;
	conv_job *j = ctx;
	for (int64_t t = 0; t < j->Tout; t++)
		for (int64_t co = c0; co < c1; co++) {
			float acc = j->b ? j->b[co] : 0.0f;
			int64_t g = co / j->Og;
			for (int64_t k = 0; k < j->K; k++) {
				int64_t src = t * j->stride + k * j->dil - j->pad;
				if (src < 0 || src >= j->T) continue;
				acc += j->k->dot_f32(j->w + (co * j->K + k) * j->Cg, j->x + src * j->Cin + g * j->Cg, j->Cg);
			}
			j->y[t * j->Cout + co] = acc;
		}
}

/* depthwise (groups = Cin = Cout, w [C][K][1]): vectorised over channels */
static void conv_dw_range(void *ctx, int64_t t0, int64_t t1, int ith)
{
	(void)ith;
	conv_job *j = ctx;
	int64_t C = j->Cout, K = j->K;
	for (int64_t t = t0; t < t1; t++) {
		float *yr = j->y + t * C;
		if (j->b) memcpy(yr, j->b, sizeof(float) * (size_t)C);
		else memset(yr, 0, sizeof(float) * (size_t)C);
		for (int64_t k = 0; k < K; k++) {
			int64_t src = t * j->stride + k * j->dil - j->pad;
			if (src < 0 || src >= j->T) continue;
			const float *xr = j->x + src * C;
			for (int64_t c = 0; c < C; c++) yr[c] += j->w[c * K + k] * xr[c];
		}
	}
}

typedef struct {
	const float *x;
	float *col;
	int64_t t0, T, Cin, K, stride, dil, pad, taps_back; /* taps_back: transposed (col row j holds x[j - m]) */
} col_job;

static void col_range(void *ctx, int64_t r0, int64_t r1, int ith)
{
	(void)ith;
	col_job *j = ctx;
	for (int64_t r = r0; r < r1; r++)
		for (int64_t k = 0; k < j->K; k++) {
			int64_t t = j->t0 + r;
			int64_t src = j->taps_back ? t - k : t * j->stride + k * j->dil - j->pad;
			float *dst = j->col + (r * j->K + k) * j->Cin;
			if (src < 0 || src >= j->T) memset(dst, 0, sizeof(float) * (size_t)j->Cin);
			else memcpy(dst, j->x + src * j->Cin, sizeof(float) * (size_t)j->Cin);
		}
}

void sg_cpu_conv_tile_ref(const sg_conv_tile *a, int64_t t0, int64_t t1, int64_t p0, int64_t p1)
{
	const int64_t NR = SG_CONV_NR;
	for (int64_t p = p0; p < p1; p++) {
		const float *wp = a->w + p * a->K * a->Cin * NR;
		int64_t n = a->Cout - p * NR < NR ? a->Cout - p * NR : NR;
		for (int64_t t = t0; t < t1; t++) {
			float acc[SG_CONV_NR];
			for (int64_t c = 0; c < NR; c++) acc[c] = a->bias && c < n ? a->bias[p * NR + c] : 0.0f;
			for (int64_t k = 0; k < a->K; k++) {
				const float *xr = a->x + (t * a->stride + k * a->dil) * a->Cin, *wk = wp + k * a->Cin * NR;
				for (int64_t ci = 0; ci < a->Cin; ci++)
					for (int64_t c = 0; c < NR; c++) acc[c] += xr[ci] * wk[ci * NR + c];
			}
			memcpy(a->y + t * a->Cout + p * NR, acc, sizeof(float) * (size_t)n);
		}
	}
}

void sg_cpu_conv_pack(sg_btensor *t)
{
	int64_t Cin = t->ne[0], K = t->ne[1], Cout = t->ne[2], NR = SG_CONV_NR, np = (Cout + NR - 1) / NR;
	size_t bytes = sizeof(float) * (size_t)(np * K * Cin * NR);
	float *p = NULL;
	if (t->type != SG_TYPE_F32 || t->ne[3] != 1) return;
	if (Cout < SG_CONV_NARROW) {
		t->layout = SG_CPU_LAYOUT_CONV_ROWS;
		return;
	}
	if (posix_memalign((void **)&p, 64, bytes)) return;
	memset(p, 0, bytes);
	const float *w = t->data;
	for (int64_t co = 0; co < Cout; co++)
		for (int64_t k = 0; k < K; k++)
			for (int64_t ci = 0; ci < Cin; ci++) p[((co / NR * K + k) * Cin + ci) * NR + co % NR] = w[(co * K + k) * Cin + ci];
	t->data = p;
	t->owned = 1;
	t->layout = SG_CPU_LAYOUT_CONV;
}

/* Output rows per work item of the packed convolution: the item's input rows (times Cin floats)
 * stay in L2 while its panels sweep them; a multiple of 6 (the AVX2 tile's rows). */
static int64_t conv_block_rows(int64_t Cin)
{
	int64_t r = (96 * 1024) / (Cin * (int64_t)sizeof(float));
	r = r < 48 ? 48 : r > 384 ? 384 : r;
	return r / 6 * 6;
}

typedef struct {
	const sg_cpu_kernels *k;
	sg_conv_tile a;
	int64_t Tout, rows, np; /* rows per block, panels */
} packed_job;

/* items: block b of rows times panel p, p fastest (a thread keeps its block's rows in cache
 * while it walks the panels) */
static void packed_range(void *ctx, int64_t i0, int64_t i1, int ith)
{
	(void)ith;
	packed_job *j = ctx;
	for (int64_t i = i0; i < i1; i++) {
		int64_t b = i / j->np, p = i % j->np, t0 = b * j->rows, t1 = t0 + j->rows < j->Tout ? t0 + j->rows : j->Tout;
		j->k->conv_tile(&j->a, t0, t1, p, p + 1);
	}
}

typedef struct {
	const sg_cpu_kernels *k;
	sg_conv_tile a; /* w: [Cout][K][Cin] as bound */
} rows_job;

/* SG_CPU_LAYOUT_CONV_ROWS: a dot product per output and tap (one over the K taps' rows side by
 * side when the dilation is 1: they are contiguous input rows) */
static void rows_range(void *ctx, int64_t t0, int64_t t1, int ith)
{
	(void)ith;
	rows_job *j = ctx;
	const sg_conv_tile *a = &j->a;
	for (int64_t t = t0; t < t1; t++)
		for (int64_t co = 0; co < a->Cout; co++) {
			const float *xr = a->x + t * a->stride * a->Cin, *wr = a->w + co * a->K * a->Cin;
			float acc = a->bias ? a->bias[co] : 0.0f;
			if (a->dil == 1) acc += j->k->dot_f32(xr, wr, a->K * a->Cin);
			else
				for (int64_t k = 0; k < a->K; k++) acc += j->k->dot_f32(xr + k * a->dil * a->Cin, wr + k * a->Cin, a->Cin);
			a->y[t * a->Cout + co] = acc;
		}
}

static sg_status conv_packed(sg_cpu_backend *cb, const sg_btensor *x, const sg_btensor *w, const sg_btensor *bias,
			     const sg_conv_params *p, sg_btensor *y)
{
	if (p->groups > 1)
		return sg_error(SG_ERR_INVALID_ARG, "cpu conv1d: a weight bound as SG_LAYOUT_CONV1D takes groups 1, not %d", p->groups);
	int64_t T = sg_btensor_rows(x), Cin = x->ne[0], Cout = y->ne[0], Tout = sg_btensor_rows(y), K = w->ne[1];
	/* input rows the outputs reach, from -pad on: zero rows around x unless x covers them */
	int64_t span = (Tout - 1) * p->stride + (K - 1) * p->dilation + 1;
	const float *xs = x->data;
	if (p->pad > 0 || span > T) {
		float *xp = sg_cpu_scratch(cb, sizeof(float) * (size_t)(span * Cin));
		if (!xp) return SG_FAIL(SG_ERR_NOMEM, "conv1d padding of %lld x %lld", (long long)span, (long long)Cin);
		int64_t lo = p->pad < span ? p->pad : span, n = T < span - lo ? T : span - lo;
		memset(xp, 0, sizeof(float) * (size_t)(lo * Cin));
		memcpy(xp + lo * Cin, xs, sizeof(float) * (size_t)(n * Cin));
		memset(xp + (lo + n) * Cin, 0, sizeof(float) * (size_t)((span - lo - n) * Cin));
		xs = xp;
	}
	if (w->layout == SG_CPU_LAYOUT_CONV_ROWS) {
		rows_job r = {cb->k, {xs, w->data, bias ? bias->data : NULL, y->data, Cin, Cout, K, p->stride, p->dilation}};
		sg_parallel_for(cb->pool, Tout, 16, rows_range, &r);
		return SG_OK;
	}
	packed_job j = {.k = cb->k,
			.a = {xs, w->data, bias ? bias->data : NULL, y->data, Cin, Cout, K, p->stride, p->dilation},
			.Tout = Tout,
			.rows = conv_block_rows(Cin),
			.np = (Cout + SG_CONV_NR - 1) / SG_CONV_NR};
	sg_parallel_for(cb->pool, (Tout + j.rows - 1) / j.rows * j.np, 1, packed_range, &j);
	return SG_OK;
}

sg_status sg_cpu_conv1d(sg_backend *be, const sg_btensor *x, const sg_btensor *w, const sg_btensor *bias,
			const sg_conv_params *p, sg_btensor *y)
{
	sg_cpu_backend *cb = (sg_cpu_backend *)be;
	sg_status st = sg_conv1d_check(be, x, w, bias, p, y);
	if (st) return st;
	int groups = p->groups > 0 ? p->groups : 1;
	conv_job j = {.k = cb->k, .x = x->data, .w = w->data, .b = bias ? bias->data : NULL, .y = y->data, .T = sg_btensor_rows(x),
		      .Tout = sg_btensor_rows(y), .Cin = x->ne[0], .Cout = y->ne[0], .K = w->ne[1], .Cg = w->ne[0],
		      .stride = p->stride, .dil = p->dilation, .pad = p->pad};
	j.Og = j.Cout / groups;
	if (w->layout == SG_CPU_LAYOUT_CONV || w->layout == SG_CPU_LAYOUT_CONV_ROWS) return conv_packed(cb, x, w, bias, p, y);
	if (groups > 1 && groups == j.Cin && groups == j.Cout) {
		sg_parallel_for(cb->pool, j.Tout, 8, conv_dw_range, &j);
		return SG_OK;
	}
	if (groups > 1) {
		sg_parallel_for(cb->pool, j.Cout, 8, conv_group_range, &j);
		return SG_OK;
	}
	if (j.K == 1 && j.stride == 1 && j.pad == 0 && j.Tout <= j.T) { /* a 1x1 conv is the product itself */
		sg_btensor wv = sg_btensor_f32_view(w->data, j.Cin, j.Cout), xv = sg_btensor_rows_view(x, 0, j.Tout);
		return be->ops->matmul(be, &wv, &xv, bias, y);
	}
	/* im2col tiles through the GEMM: y rows = col [rows][K*Cin] x w [Cout][K*Cin]^T + bias */
	int64_t KC = j.K * j.Cin, R = COL_TILE / KC;
	if (R < 16) R = 16;
	if (R > j.Tout) R = j.Tout;
	sg_btensor col;
	int64_t ne[4] = {KC, R, 1, 1};
	if ((st = be->ops->tensor_alloc(be, SG_TYPE_F32, ne, &col))) return st;
	sg_btensor wv = sg_btensor_f32_view(w->data, KC, j.Cout);
	for (int64_t t0 = 0; t0 < j.Tout && !st; t0 += R) {
		int64_t n = j.Tout - t0 < R ? j.Tout - t0 : R;
		col_job cj = {j.x, col.data, t0, j.T, j.Cin, j.K, j.stride, j.dil, j.pad, 0};
		sg_parallel_for(cb->pool, n, 4, col_range, &cj);
		sg_btensor cv = sg_btensor_f32_view(col.data, KC, n), yv = sg_btensor_rows_view(y, t0, n);
		st = be->ops->matmul(be, &wv, &cv, bias, &yv);
	}
	be->ops->tensor_free(be, &col);
	return st;
}

sg_status sg_cpu_conv_transpose1d(sg_backend *be, const sg_btensor *x, const sg_btensor *w, const sg_btensor *bias,
				  int stride, sg_btensor *y)
{
	sg_status st = sg_conv_transpose1d_check(be, x, w, bias, stride, y);
	if (st) return st;
	int64_t T = sg_btensor_rows(x), Cin = x->ne[0], M = w->ne[1], Cout = y->ne[0], Tout = sg_btensor_rows(y);
	/* output row j*stride + p = sum over m of W[p][.][m] x[j - m]: one GEMM per phase p over
	 * col rows [x[j], x[j-1], ...] */
	int64_t J = (Tout + stride - 1) / stride;
	sg_btensor col, tmp;
	int64_t nc[4] = {M * Cin, J, 1, 1}, nt[4] = {Cout, J, 1, 1};
	if ((st = be->ops->tensor_alloc(be, SG_TYPE_F32, nc, &col))) return st;
	if ((st = be->ops->tensor_alloc(be, SG_TYPE_F32, nt, &tmp))) {
		be->ops->tensor_free(be, &col);
		return st;
	}
	col_job cj = {x->data, col.data, 0, T, Cin, M, 1, 1, 0, 1};
	sg_parallel_for(((sg_cpu_backend *)be)->pool, J, 4, col_range, &cj);
	float *yd = y->data, *td = tmp.data;
	for (int p = 0; p < stride && !st; p++) {
		sg_btensor wv = sg_btensor_f32_view((float *)w->data + (size_t)p * Cout * M * Cin, M * Cin, Cout);
		st = be->ops->matmul(be, &wv, &col, bias, &tmp);
		for (int64_t jj = 0; jj < J && !st; jj++) {
			int64_t t = jj * stride + p;
			if (t < Tout) memcpy(yd + t * Cout, td + jj * Cout, sizeof(float) * (size_t)Cout);
		}
	}
	be->ops->tensor_free(be, &col);
	be->ops->tensor_free(be, &tmp);
	return st;
}

typedef struct {
	void (*fn)(const float *a, const float *b, float *out, int64_t n);
	const float *x;
	float *y;
	int64_t F;
} gate_job;

static void gate_range(void *ctx, int64_t r0, int64_t r1, int ith)
{
	(void)ith;
	gate_job *j = ctx;
	for (int64_t r = r0; r < r1; r++) j->fn(j->x + r * 2 * j->F, j->x + r * 2 * j->F + j->F, j->y + r * j->F, j->F);
}

sg_status sg_cpu_tanh_gate(sg_backend *be, const sg_btensor *x, sg_btensor *y)
{
	sg_cpu_backend *cb = (sg_cpu_backend *)be;
	sg_status st = need_f32("tanh_gate", "x", x);
	if (!st) st = need_f32("tanh_gate", "y", y);
	if (st) return st;
	if (x->ne[0] != 2 * y->ne[0] || sg_btensor_rows(x) != sg_btensor_rows(y) || x->data == y->data)
		return sg_error(SG_ERR_INVALID_ARG, "cpu tanh_gate: x [%lld][%lld] -> y [%lld][%lld] (half the width, not aliased)",
				(long long)sg_btensor_rows(x), (long long)x->ne[0], (long long)sg_btensor_rows(y), (long long)y->ne[0]);
	gate_job j = {cb->gate_simd ? cb->k->tanh_gate : sg_cpu_tanh_gate_ref, x->data, y->data, y->ne[0]};
	sg_parallel_for(cb->pool, sg_btensor_rows(x), 4, gate_range, &j);
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
