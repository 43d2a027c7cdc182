/*
 * The CPU backend's fused decode stage: one token's matmul_multi (the RMS norm, the activation
 * quantization, every matrix of the stage, and the bias, GLU or residual epilogue) in one run of
 * the threadpool, where the composition (rmsnorm, one matmul per weight, glu or add) takes up to
 * six runs and a serial norm between them.
 *
 * Why it pays: a decode step of a model larger than the last-level cache is a stream of weight
 * bytes, and the stream stops at every run boundary (one thread waits for the other, then both
 * restart cold). Fewer runs a layer is fewer stops. Inside the run the rows of all the stage's
 * matrices are handed out in chunks of about SARAGOSSA_CPU_DECODE_CHUNK bytes from a shared
 * counter, so the split follows bytes, not rows (a Q6_K row costs more than a Q4_K row), and a
 * thread that the scheduler holds back (cores shared with other work) takes fewer chunks instead
 * of the other waiting for it.
 *
 * Same bits as the composition: every row is computed whole by one thread with the same kernel,
 * the norm and the epilogue use the composition's per-element code, and chunks start at multiples
 * of 16 rows, where the composition's split also falls (so the SIMD epilogues see the same tails).
 */
#include "backend/cpu/cpu_internal.h"

#include <stdatomic.h>
#include <string.h>

#include "base/error.h"
#include "base/threadpool.h"

#define CHUNK_ROWS_MIN 16 /* rows: no two threads write one cache line of y */

static int is_f32(const sg_btensor *t) { return t && t->data && t->type == SG_TYPE_F32; }

typedef struct fm_job {
	sg_cpu_backend *cb;
	int nw, glu;
	sg_act act;
	int64_t K;
	const float *x;     /* [K] the input row */
	const float *normw; /* [K] or NULL: no norm */
	float eps, off;
	float *xn;          /* [K] where thread 0 writes the normalised row (the caller's xn), or NULL */
	sg_wview w[SG_MATMUL_MULTI_MAX];
	sg_mv_fn mv[SG_MATMUL_MULTI_MAX];
	int q8[SG_MATMUL_MULTI_MAX];
	int slot[SG_MATMUL_MULTI_MAX]; /* the quantized copy of x weight i reads */
	sg_xlayout sxl[SG_MATMUL_MULTI_MAX];
	int sxoff[SG_MATMUL_MULTI_MAX];
	int nslot;
	int64_t N[SG_MATMUL_MULTI_MAX];
	float *y[SG_MATMUL_MULTI_MAX];
	const float *bias[SG_MATMUL_MULTI_MAX];
	const float *res; /* residual [N0] or NULL */
	float *out;       /* with res */
	/* work: segment s covers rows of weight s (of both weights with glu), in chunks of crow[s] */
	int nseg;
	int64_t crow[SG_MATMUL_MULTI_MAX], cfirst[SG_MATMUL_MULTI_MAX + 1];
	_Atomic int64_t next;
	uint8_t *scratch; /* per thread: normalised row [K] floats, then nslot quantized rows */
	size_t per_thread, xn_bytes, xq_bytes;
} fm_job;

static void fm_chunk(fm_job *j, int s, int64_t a, int64_t b, const void *const xs[SG_MATMUL_MULTI_MAX])
{
	if (j->glu) {
		j->mv[0](&j->w[0], a, b, xs[0], j->y[0] + a);
		j->mv[1](&j->w[1], a, b, xs[1], j->y[1] + a);
		for (int i = 0; i < 2; i++)
			if (j->bias[i])
				for (int64_t r = a; r < b; r++) j->y[i][r] += j->bias[i][r];
		sg_cpu_glu_rows(j->cb->k, j->act, j->y[0] + a, j->y[1] + a, j->y[0] + a, b - a);
		return;
	}
	j->mv[s](&j->w[s], a, b, xs[s], j->y[s] + a);
	if (j->bias[s])
		for (int64_t r = a; r < b; r++) j->y[s][r] += j->bias[s][r];
	if (j->res)
		for (int64_t r = a; r < b; r++) j->out[r] = j->res[r] + j->y[0][r];
}

static void fm_task(void *ctx, int ith, int nth)
{
	(void)nth;
	fm_job *j = ctx;
	uint8_t *mine = j->scratch + (size_t)ith * j->per_thread, *xq = mine + j->xn_bytes;
	const float *x = j->x;
	if (j->normw) {
		/* every thread normalises the row for itself: a microsecond of redundant work instead of
		 * a barrier (which costs more, and a whole time slice when the cores are shared) */
		float *xn = ith == 0 && j->xn ? j->xn : (float *)mine;
		sg_cpu_rmsnorm_row(j->cb->k, j->x, j->normw, j->K, j->eps, j->off, xn);
		x = xn;
	}
	sg_xq q[SG_MATMUL_MULTI_MAX];
	for (int s = 0; s < j->nslot; s++) {
		sg_xq_init(&q[s], j->K, xq + (size_t)s * j->xq_bytes);
		j->cb->k->quantize_x(x, j->K, j->sxl[s], j->sxoff[s], &q[s]);
	}
	const void *xs[SG_MATMUL_MULTI_MAX];
	for (int i = 0; i < j->nw; i++) xs[i] = j->q8[i] ? (const void *)&q[j->slot[i]] : (const void *)x;
	int64_t total = j->cfirst[j->nseg];
	for (int64_t c; (c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < total;) {
		int s = 0;
		while (c >= j->cfirst[s + 1]) s++;
		int64_t a = (c - j->cfirst[s]) * j->crow[s], b = a + j->crow[s] < j->N[s] ? a + j->crow[s] : j->N[s];
		fm_chunk(j, s, a, b, xs);
	}
}

/* 1: the stage is one the fused path takes (one token, F32 rows, shapes that agree); 0: the
 * composition runs it (and reports whatever is wrong with it). */
static int fm_setup(sg_cpu_backend *cb, const sg_matmul_multi *p, fm_job *j)
{
	memset(j, 0, sizeof(*j));
	if (p->nw < 1 || p->nw > SG_MATMUL_MULTI_MAX || (p->glu && p->nw != 2) || (p->residual && (p->nw != 1 || !p->out)) ||
	    (p->norm && !p->xn) || (p->glu && p->residual))
		return 0;
	const sg_btensor *x = p->x;
	if (!is_f32(x) || sg_btensor_rows(x) != 1) return 0;
	j->cb = cb;
	j->nw = p->nw;
	j->glu = p->glu;
	j->act = p->act;
	j->K = x->ne[0];
	j->x = x->data;
	if (p->glu && p->act != SG_ACT_SILU && p->act != SG_ACT_GELU_TANH && p->act != SG_ACT_GELU) return 0;
	if (p->norm) {
		if (!is_f32(p->norm) || p->norm->ne[0] != j->K) return 0;
		/* xn written by one thread while the others read x: never the same memory */
		if (!is_f32(p->xn) || p->xn->ne[0] != j->K || sg_btensor_rows(p->xn) != 1 || p->xn->data == x->data) return 0;
		j->normw = p->norm->data;
		j->eps = p->eps;
		j->off = p->norm_offset;
		j->xn = p->xn->data;
	}
	for (int i = 0; i < p->nw; i++) {
		const sg_btensor *w = p->w[i], *b = p->bias[i];
		sg_btensor *y = p->y[i];
		if (!w || sg_cpu_wview(w, &j->w[i]) == SG_KT_NONE || w->ne[0] != j->K) return 0;
		j->N[i] = sg_btensor_rows(w);
		if (!is_f32(y) || y->ne[0] != j->N[i] || sg_btensor_rows(y) != 1 || y->data == x->data || y->data == j->xn) return 0;
		if (b && (!is_f32(b) || b->ne[0] != j->N[i])) return 0;
		j->y[i] = y->data;
		j->bias[i] = b ? b->data : NULL;
		sg_kt kt = j->w[i].kt;
		j->mv[i] = cb->k->mv[kt];
		j->q8[i] = (cb->k->q8_mask >> kt) & 1;
		if (j->q8[i] && !cb->int8_dot) { /* kill-switch: the f32 reference path */
			j->mv[i] = sg_cpu_mv_ref;
			j->q8[i] = 0;
		}
		if (!j->q8[i]) continue;
		sg_xlayout xl = sg_cpu_kt_info(kt)->xl;
		int xoff = sg_cpu_kt_info(kt)->xoff, s = 0;
		while (s < j->nslot && (j->sxl[s] != xl || j->sxoff[s] != xoff)) s++;
		if (s == j->nslot) {
			j->sxl[s] = xl;
			j->sxoff[s] = xoff;
			j->nslot++;
		}
		j->slot[i] = s;
	}
	if (p->glu && j->N[0] != j->N[1]) return 0;
	if (p->residual) {
		if (!is_f32(p->residual) || !is_f32(p->out) || p->residual->ne[0] != j->N[0] || p->out->ne[0] != j->N[0] ||
		    sg_btensor_rows(p->residual) != 1 || sg_btensor_rows(p->out) != 1 || p->out->data == x->data || p->out->data == j->xn)
			return 0;
		j->res = p->residual->data;
		j->out = p->out->data;
	}
	/* the chunks: about decode_chunk bytes of weights each, a multiple of 16 rows */
	j->nseg = p->glu ? 1 : p->nw;
	for (int s = 0; s < j->nseg; s++) {
		size_t rb = j->w[s].row_bytes + (p->glu ? j->w[1].row_bytes : 0);
		int64_t cr = (int64_t)(cb->decode_chunk / (rb ? rb : 1)) / CHUNK_ROWS_MIN * CHUNK_ROWS_MIN;
		j->crow[s] = cr > CHUNK_ROWS_MIN ? cr : CHUNK_ROWS_MIN;
		j->cfirst[s + 1] = j->cfirst[s] + (j->N[s] + j->crow[s] - 1) / j->crow[s];
	}
	return 1;
}

sg_status sg_cpu_matmul_multi(sg_backend *be, const sg_matmul_multi *p)
{
	sg_cpu_backend *cb = (sg_cpu_backend *)be;
	fm_job j;
	if (!cb->fused || !fm_setup(cb, p, &j)) return sg_backend_matmul_multi_compose(be, p);
	j.xn_bytes = ((size_t)j.K * sizeof(float) + 63) & ~(size_t)63;
	j.xq_bytes = (sg_xq_bytes(j.K) + 63) & ~(size_t)63;
	j.per_thread = j.xn_bytes + (size_t)j.nslot * j.xq_bytes;
	j.scratch = sg_cpu_scratch(cb, j.per_thread * (size_t)cb->nth);
	if (!j.scratch) return sg_error(SG_ERR_NOMEM, "cpu matmul_multi: %zu bytes of scratch", j.per_thread * (size_t)cb->nth);
	atomic_init(&j.next, 0);
	/* dynamic: a worker the scheduler holds back is not waited for (see the threadpool) */
	sg_threadpool_run_dynamic(cb->pool, fm_task, &j);
	return SG_OK;
}
