/*
 * The encoders' float matmul over weights packed at bind (SG_CPU_LAYOUT_PANEL, see cpu_internal.h):
 * the packing, the scalar reference of the tile kernel, and the op's driver, which hands chunks of
 * (panels, tokens) to the threads.
 *
 * Why a second float GEMM beside mm_packed[]: that one keeps the one-token matvec's sums (an 8-lane
 * chain per output, finished by a horizontal sum), which a decoder's prefill needs so that its
 * tokens equal decode's. An encoder has no decode step, so its weights can take the outer-product
 * form: a token's activation broadcast against 16 rows' weights of one k, 6 tokens x 16 outputs in
 * 12 registers, 8 loads per 12 FMAs and no horizontal sums; and the rows are packed once at load
 * instead of once per call.
 */
#include "backend/cpu/cpu_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/threadpool.h"

void sg_cpu_mm_panel_pack(sg_btensor *t)
{
	sg_wview v;
	sg_kt kt = sg_cpu_wview(t, &v);
	if (kt != SG_KT_F32 && kt != SG_KT_F16 && kt != SG_KT_BF16) return;
	int64_t N = sg_btensor_rows(t), K = t->ne[0], np = (N + SG_MM_NR - 1) / SG_MM_NR;
	void *mem = NULL;
	size_t bytes = sizeof(float) * (size_t)np * (size_t)K * SG_MM_NR;
	if (K < 1 || posix_memalign(&mem, 64, bytes)) return;
	float *p = mem;
	memset(p, 0, bytes);
	for (int64_t r = 0; r < N; r++) {
		const uint8_t *row = v.data + (size_t)r * v.row_bytes;
		float *o = p + (size_t)(r / SG_MM_NR) * (size_t)K * SG_MM_NR + r % SG_MM_NR;
		for (int64_t k = 0; k < K; k++) {
			float f;
			if (kt == SG_KT_F32) memcpy(&f, row + 4 * k, 4);
			else {
				uint16_t h;
				memcpy(&h, row + 2 * k, 2);
				f = kt == SG_KT_F16 ? sg_cpu_f16(h) : sg_cpu_bf16(h);
			}
			o[k * SG_MM_NR] = f;
		}
	}
	t->data = p;
	t->layout = SG_CPU_LAYOUT_PANEL;
	t->owned = 1;
}

void sg_cpu_mm_panel_ref(const sg_mm_panel *a, int64_t t0, int64_t t1, int64_t p0, int64_t p1, int64_t k0, int64_t k1)
{
	const int64_t N = a->N, K = a->K;
	for (int64_t p = p0; p < p1; p++)
		for (int64_t t = t0; t < t1; t++)
			for (int64_t j = 0; j < SG_MM_NR && p * SG_MM_NR + j < N; j++) {
				int64_t n = p * SG_MM_NR + j;
				float *y = a->y + t * N + n;
				float acc = k0 ? *y : a->bias ? a->bias[n] : 0.0f;
				const float *w = a->w + (p * K + k0) * SG_MM_NR + j, *x = a->x + t * K;
				/* fmaf: one rounding per step, as the kernels' FMA */
				for (int64_t k = k0; k < k1; k++, w += SG_MM_NR) acc = fmaf(*w, x[k], acc);
				*y = acc;
			}
}

/* Panels per chunk: 64 rows (no two threads write one cache line of y). Tokens per chunk: a
 * multiple of the tile's 6; 96 tokens of a 256-wide K block are 96 KiB, kept in L2 while the
 * chunk's 4 panels pass over them. */
#define PANEL_CH 4
#define TOK_CH 96

typedef struct panel_job {
	sg_mm_panel a;
	sg_mm_panel_fn fn;
	int64_t T, np, nrc, ntc;
	_Atomic int64_t next;
} panel_job;

static void panel_task(void *ctx, int ith, int nth)
{
	(void)ith;
	(void)nth;
	panel_job *j = ctx;
	int64_t kc = sg_cpu_panel_kc(j->a.K);
	/* chunks from a shared counter: a thread the scheduler holds back takes fewer */
	for (int64_t c; (c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->nrc * j->ntc;) {
		int64_t p0 = c / j->ntc * PANEL_CH, p1 = p0 + PANEL_CH < j->np ? p0 + PANEL_CH : j->np;
		int64_t t0 = c % j->ntc * TOK_CH, t1 = t0 + TOK_CH < j->T ? t0 + TOK_CH : j->T;
		for (int64_t k0 = 0; k0 < j->a.K; k0 += kc) j->fn(&j->a, t0, t1, p0, p1, k0, k0 + kc < j->a.K ? k0 + kc : j->a.K);
	}
}

sg_status sg_cpu_matmul_panel(sg_backend *be, const sg_btensor *w, const sg_btensor *x, const sg_btensor *bias, sg_btensor *y)
{
	sg_cpu_backend *cb = (sg_cpu_backend *)be;
	sg_status st = sg_cpu_check_f32("matmul", "x", x);
	if (!st) st = sg_cpu_check_f32("matmul", "y", y);
	if (!st && bias) st = sg_cpu_check_f32("matmul", "bias", bias);
	if (st) return st;
	int64_t N = sg_btensor_rows(w), K = w->ne[0], T = sg_btensor_rows(x);
	if (x->ne[0] != K)
		return sg_error(SG_ERR_INVALID_ARG, "cpu matmul: x has %lld columns, weights %lld", (long long)x->ne[0], (long long)K);
	if (y->ne[0] != N || sg_btensor_rows(y) != T)
		return sg_error(SG_ERR_INVALID_ARG, "cpu matmul: y is [%lld][%lld], expected [%lld][%lld]",
				(long long)sg_btensor_rows(y), (long long)y->ne[0], (long long)T, (long long)N);
	if (bias && bias->ne[0] != N)
		return sg_error(SG_ERR_INVALID_ARG, "cpu matmul: bias has %lld values, expected %lld", (long long)bias->ne[0], (long long)N);
	panel_job j = {.a = {.w = w->data, .bias = bias ? bias->data : NULL, .x = x->data, .y = y->data, .N = N, .K = K, .np = (N + SG_MM_NR - 1) / SG_MM_NR},
		       .fn = cb->k->mm_panel ? cb->k->mm_panel : sg_cpu_mm_panel_ref,
		       .T = T,
		       .np = (N + SG_MM_NR - 1) / SG_MM_NR};
	j.nrc = (j.np + PANEL_CH - 1) / PANEL_CH;
	j.ntc = (T + TOK_CH - 1) / TOK_CH;
	atomic_init(&j.next, 0);
	sg_threadpool_run_any(cb->pool, panel_task, &j);
	return SG_OK;
}
