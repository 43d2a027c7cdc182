/*
 * The CPU backend's non-matmul ops: norms, RoPE, KV store, attention, gated activations,
 * elementwise ops, softmax, MoE routing and combine, argmax. Their inner products go through the
 * kernel set (dot_f32, axpy_f32: SIMD or the scalar reference); the rest is scalar C that the
 * compiler vectorises. Each op splits its rows (or heads) over the threadpool, and every output
 * element is computed by the same code whatever the thread count, so results do not depend on it.
 */
#include "backend/cpu/cpu_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "base/error.h"
#include "base/flags.h"
#include "base/threadpool.h"

#define MAX_HEAD_DIM 1024

static sg_status need_i32(const char *op, const char *what, const sg_btensor *t)
{
	if (!t || !t->data || t->type != SG_TYPE_I32)
		return sg_error(SG_ERR_INVALID_ARG, "cpu %s: %s must be an I32 tensor", op, what);
	return SG_OK;
}

/* --- norms --- */

typedef struct {
	const sg_cpu_kernels *k;
	const float *x, *w, *b;
	float *y;
	int64_t D;
	float eps, off;
	int simd; /* layernorm: the kernel set's row (SARAGOSSA_CPU_NORM_SIMD) */
} norm_job;

void sg_cpu_rmsnorm_row(const sg_cpu_kernels *k, const float *x, const float *w, int64_t D, float eps, float off, float *y)
{
	float ss = k->dot_f32(x, x, D);
	float sc = 1.0f / sqrtf(ss / (float)D + eps);
	if (w)
		for (int64_t i = 0; i < D; i++) y[i] = x[i] * sc * (w[i] + off);
	else
		for (int64_t i = 0; i < D; i++) y[i] = x[i] * sc;
}

static void rmsnorm_range(void *ctx, int64_t r0, int64_t r1, int ith)
{
	norm_job *j = ctx;
	for (int64_t r = r0; r < r1; r++) sg_cpu_rmsnorm_row(j->k, j->x + r * j->D, j->w, j->D, j->eps, j->off, j->y + r * j->D);
}

sg_status sg_cpu_rmsnorm(sg_backend *be, const sg_btensor *x, const sg_btensor *w, float eps, float w_offset, sg_btensor *y)
{
	sg_cpu_backend *cb = (sg_cpu_backend *)be;
	sg_status st;
	if ((st = sg_cpu_check_f32("rmsnorm", "x", x)) || (st = sg_cpu_check_f32("rmsnorm", "y", y)) ||
	    (st = sg_cpu_check_same("rmsnorm", x, y)))
		return st;
	if (w && ((st = sg_cpu_check_f32("rmsnorm", "w", w)) || w->ne[0] != x->ne[0]))
		return st ? st : SG_FAIL(SG_ERR_INVALID_ARG, "w has %lld values, rows %lld", (long long)w->ne[0], (long long)x->ne[0]);
	norm_job j = {cb->k, x->data, w ? w->data : NULL, NULL, y->data, x->ne[0], eps, w_offset, 0};
	sg_parallel_for(cb->pool, sg_btensor_rows(x), 1, rmsnorm_range, &j);
	return SG_OK;
}

void sg_cpu_layernorm_row_ref(const float *x, const float *w, const float *b, int64_t D, float eps, float *y)
{
	double mean = 0, var = 0;
	for (int64_t i = 0; i < D; i++) mean += x[i];
	mean /= (double)D;
	for (int64_t i = 0; i < D; i++) var += (x[i] - mean) * (x[i] - mean);
	var /= (double)D;
	float m = (float)mean, sc = (float)(1.0 / sqrt(var + eps));
	for (int64_t i = 0; i < D; i++) {
		float v = (x[i] - m) * sc;
		if (w) v *= w[i];
		if (b) v += b[i];
		y[i] = v;
	}
}

static void layernorm_range(void *ctx, int64_t r0, int64_t r1, int ith)
{
	norm_job *j = ctx;
	/* the kernel set's row (SARAGOSSA_CPU_NORM_SIMD) or the reference */
	void (*row)(const float *, const float *, const float *, int64_t, float, float *) =
		j->k->layernorm_row && j->simd ? j->k->layernorm_row : sg_cpu_layernorm_row_ref;
	for (int64_t r = r0; r < r1; r++) row(j->x + r * j->D, j->w, j->b, j->D, j->eps, j->y + r * j->D);
}

sg_status sg_cpu_layernorm(sg_backend *be, const sg_btensor *x, const sg_btensor *w, const sg_btensor *b, float eps, sg_btensor *y)
{
	sg_cpu_backend *cb = (sg_cpu_backend *)be;
	sg_status st;
	if ((st = sg_cpu_check_f32("layernorm", "x", x)) || (st = sg_cpu_check_f32("layernorm", "y", y)) ||
	    (st = sg_cpu_check_same("layernorm", x, y)))
		return st;
	if ((w && (w->type != SG_TYPE_F32 || w->ne[0] != x->ne[0])) || (b && (b->type != SG_TYPE_F32 || b->ne[0] != x->ne[0])))
		return SG_FAIL(SG_ERR_INVALID_ARG, "w and b must be F32 [%lld]", (long long)x->ne[0]);
	norm_job j = {cb->k, x->data, w ? w->data : NULL, b ? b->data : NULL, y->data, x->ne[0], eps, 0, sg_flag_bool("SARAGOSSA_CPU_NORM_SIMD")};
	sg_parallel_for(cb->pool, sg_btensor_rows(x), 1, layernorm_range, &j);
	return SG_OK;
}

/* --- RoPE --- */

typedef struct {
	float *x;
	const int32_t *pos;
	int64_t H, hd;
	int half, pair_stride, neox;
	float inv_freq[MAX_HEAD_DIM / 2];
	float pos_scale, mscale;
} rope_job;

/* Frequencies after scaling (the model's own definition of each scheme, restated). */
static void rope_freqs(const sg_rope_params *p, int32_t pmax, rope_job *j)
{
	int nr = p->n_rot;
	double theta = p->theta;
	/* dynamic NTK: past the original context the base grows with the sequence length (the
	 * longest position of this step + 1) */
	if (p->scaling == SG_ROPE_SCALING_DYNAMIC && p->factor > 0 && p->orig_ctx > 0 && pmax + 1 > p->orig_ctx && nr > 2)
		theta *= pow(p->factor * (pmax + 1.0) / p->orig_ctx - (p->factor - 1), (double)nr / (nr - 2));
	j->half = sg_rope_inv_freq(p, theta, j->inv_freq, &j->pos_scale, &j->mscale);
	j->neox = p->neox;
}

static void rope_range(void *ctx, int64_t i0, int64_t i1, int ith)
{
	rope_job *j = ctx;
	float cs[MAX_HEAD_DIM / 2], sn[MAX_HEAD_DIM / 2];
	int64_t cur = -1;
	for (int64_t i = i0; i < i1; i++) {
		int64_t t = i / j->H;
		if (t != cur) { /* angles once per token, shared by its heads */
			float p = (float)j->pos[t] * j->pos_scale;
			for (int k = 0; k < j->half; k++) {
				float a = p * j->inv_freq[k];
				cs[k] = cosf(a) * j->mscale;
				sn[k] = sinf(a) * j->mscale;
			}
			cur = t;
		}
		float *x = j->x + i * j->hd;
		for (int k = 0; k < j->half; k++) {
			int a = j->neox ? k : 2 * k, b = j->neox ? k + j->half : 2 * k + 1;
			float x0 = x[a], x1 = x[b];
			x[a] = x0 * cs[k] - x1 * sn[k];
			x[b] = x1 * cs[k] + x0 * sn[k];
		}
	}
}

sg_status sg_cpu_rope(sg_backend *be, sg_btensor *x, const sg_btensor *pos, const sg_rope_params *p)
{
	sg_cpu_backend *cb = (sg_cpu_backend *)be;
	sg_status st;
	if ((st = sg_cpu_check_f32("rope", "x", x)) || (st = need_i32("rope", "pos", pos))) return st;
	if (p->head_dim < 2 || p->head_dim > MAX_HEAD_DIM || p->n_rot < 0 || p->n_rot > p->head_dim || (p->n_rot & 1) ||
	    p->theta <= 0 || (x->ne[0] * x->ne[1]) % p->head_dim)
		return SG_FAIL(SG_ERR_INVALID_ARG, "head_dim %d, n_rot %d, theta %g for rows of %lld", p->head_dim, p->n_rot,
			       (double)p->theta, (long long)x->ne[0]);
	rope_job j;
	j.x = x->data;
	j.pos = pos->data;
	j.hd = p->head_dim;
	int64_t n = pos->ne[0] * sg_btensor_rows(pos);
	int64_t total = (int64_t)sg_btensor_rows(x) * x->ne[0] / p->head_dim;
	if (total % n) return SG_FAIL(SG_ERR_INVALID_ARG, "x has %lld heads in all, not a multiple of %lld tokens", (long long)total, (long long)n);
	j.H = total / n;
	int32_t pmax = 0;
	for (int64_t t = 0; t < n; t++) pmax = j.pos[t] > pmax ? j.pos[t] : pmax;
	rope_freqs(p, pmax, &j);
	/* grain of 16 heads: one token's few heads are rotated by the caller alone (less than a
	 * microsecond of work; handing half to another thread costs a run of the pool) */
	sg_parallel_for(cb->pool, total, 16, rope_range, &j);
	return SG_OK;
}

/* --- KV cache --- */

sg_status sg_cpu_kv_store(sg_backend *be, const sg_btensor *k, const sg_btensor *v, const sg_btensor *pos, sg_btensor *kc, sg_btensor *vc)
{
	sg_status st;
	if ((st = sg_cpu_check_f32("kv_store", "k", k)) || (st = sg_cpu_check_f32("kv_store", "v", v)) ||
	    (st = need_i32("kv_store", "pos", pos)))
		return st;
	const sg_btensor *src[2] = {k, v};
	sg_btensor *dst[2] = {kc, vc};
	int64_t n = pos->ne[0] * sg_btensor_rows(pos), bad = 0;
	for (int c = 0; c < 2; c++) {
		const sg_btensor *s = src[c];
		sg_btensor *d = dst[c];
		if (d->type != SG_TYPE_F32 && d->type != SG_TYPE_F16) return SG_FAIL(SG_ERR_INVALID_ARG, "cache must be F32 or F16");
		int64_t per = s->ne[0] * sg_btensor_rows(s) / n; /* elements per token */
		int64_t cper = d->ne[0] * d->ne[1];
		if (per * n != s->ne[0] * sg_btensor_rows(s) || per != cper)
			return SG_FAIL(SG_ERR_INVALID_ARG, "a token has %lld values, a cache row %lld", (long long)per, (long long)cper);
		int64_t ctx = d->ne[2] * d->ne[3];
		const int32_t *pp = pos->data;
		for (int64_t t = 0; t < n; t++) {
			if (pp[t] < 0 || pp[t] >= ctx) {
				bad = 1;
				continue;
			}
			const float *x = (const float *)s->data + t * per;
			if (d->type == SG_TYPE_F32) {
				memcpy((float *)d->data + (size_t)pp[t] * per, x, sizeof(float) * (size_t)per);
			} else {
				uint16_t *o = (uint16_t *)d->data + (size_t)pp[t] * per;
				for (int64_t i = 0; i < per; i++) o[i] = sg_cpu_f32_to_f16(x[i]);
			}
		}
	}
	return bad ? SG_FAIL(SG_ERR_RANGE, "a position is outside the cache") : SG_OK;
}

/* --- attention --- */

#define KV_CHUNK 256     /* kv positions per work item when a step has few heads */
#define FEW_ITEMS 32     /* below this many (token, head) pairs, also split the kv length */
#define TILE_QUERIES 32  /* queries (tokens x grouped heads) that share each K/V block of a tile */
#define MAX_TILE_TOKENS 32

typedef struct {
	sg_cpu_backend *cb;
	const float *q;
	const uint8_t *kc, *vc;
	int kf16, vf16;
	const int32_t *pos;
	int64_t n, H, Hkv, hd, hdv, ctx, nchunk;
	int32_t pmax;
	float scale, cap;
	int window, causal, ring;
	const float *bias; /* [n][H][ctx] or NULL (sg_attn_params.bias) */
	float *out, *part; /* part [n*H][nchunk][hdv + 2] */
	/* the tiled path: tiles of tq tokens x the G grouped heads of one kv head; each thread's
	 * buffer (tbuf + ith * tfloats) holds m [tq*G], l [tq*G] and, for f16 caches, the block's
	 * rows converted once: k [ATT_KB][hd], v [ATT_KB][hdv] */
	int64_t tq, tfloats;
	float *tbuf;
	_Atomic int64_t next;
} attn_job;

static void kv_range(const attn_job *j, int64_t t, int64_t *lo, int64_t *hi)
{
	int64_t p = j->pos[t];
	*hi = j->causal ? p : j->pmax;
	if (!j->causal && j->window > 0 && p + j->window - 1 < *hi) *hi = p + j->window - 1; /* two-sided window */
	if (!j->ring && *hi > j->ctx - 1) *hi = j->ctx - 1;
	*lo = j->window > 0 ? p - j->window + 1 : 0;
	if (j->ring && *lo < *hi - j->ctx + 1) *lo = *hi - j->ctx + 1; /* older rows were overwritten */
	if (*lo < 0) *lo = 0;
}

static const float *kv_row(const uint8_t *base, int f16, int64_t j, int64_t Hkv, int64_t h, int64_t d, float *buf)
{
	size_t off = ((size_t)j * Hkv + h) * d;
	if (!f16) return (const float *)base + off;
	const uint16_t *p = (const uint16_t *)base + off;
	for (int64_t i = 0; i < d; i++) buf[i] = sg_cpu_f16(p[i]);
	return buf;
}

#define ATT_KB 32 /* kv positions scored at once: one max, one vector exp, one pass over the values */

/* One block of the online softmax: kv positions [p0, p0 + nk) (nk <= ATT_KB) of kv head kh for
 * the query q, folded into its running maximum *m, sum *l and unnormalised acc [hdv]. The block's
 * scores first, the running maximum (and the rescaling of what was accumulated) once, the
 * exponentials as one vector, then the value rows added with the accumulator held in registers.
 * krows / vrows: NULL, or the block's rows already converted to f32 ([nk][hd], [nk][hdv]; used
 * only where the rows go one by one, i.e. f16 caches): the same values kv_row would give, so the
 * result is the same bit for bit. Every path of the attention runs a query's blocks through this
 * function, which is what makes the tiled path equal the per-item one. */
static void attn_block(const attn_job *j, const float *q, int64_t kh, int64_t p0, int64_t nk, const float *krows,
		       const float *vrows, const float *brow, float *m_io, float *l_io, float *acc)
{
	const sg_cpu_kernels *k = j->cb->k;
	float kbuf[MAX_HEAD_DIM], vbuf[MAX_HEAD_DIM], sc[ATT_KB];
	float m = *m_io, l = *l_io;
	int64_t row0 = j->ring ? p0 % j->ctx : p0;
	float cm = -INFINITY;
	/* a ring's size depends on the prefill chunk, and so would the wrap points: rings take the
	 * row-by-row path always, so their results do not depend on the chunking */
	int contiguous = !j->ring && row0 + nk <= j->ctx;
	if (!j->kf16 && contiguous) {
		k->dots_f32(q, (const float *)j->kc + ((size_t)row0 * j->Hkv + kh) * j->hd, j->Hkv * j->hd, nk, j->hd, sc);
	} else {
		for (int64_t i = 0; i < nk; i++) {
			int64_t row = j->ring ? (p0 + i) % j->ctx : p0 + i;
			const float *kr = krows ? krows + i * j->hd : kv_row(j->kc, j->kf16, row, j->Hkv, kh, j->hd, kbuf);
			sc[i] = k->dot_f32(q, kr, j->hd);
		}
	}
	for (int64_t i = 0; i < nk; i++) sc[i] *= j->scale;
	if (brow) /* the query's bias row, by kv row (never a ring: rows are positions) */
		for (int64_t i = 0; i < nk; i++) sc[i] += brow[p0 + i];
	if (j->cap > 0) k->softcap(sc, j->cap, sc, nk);
	for (int64_t i = 0; i < nk; i++) cm = sc[i] > cm ? sc[i] : cm;
	if (cm > m) { /* new maximum: rescale what was accumulated */
		if (m > -INFINITY) {
			float c = expf(m - cm);
			l *= c;
			for (int64_t i = 0; i < j->hdv; i++) acc[i] *= c;
		}
		m = cm;
	}
	l += k->expsum(sc, m, sc, nk);
	if (!j->vf16 && contiguous) {
		const float *v = (const float *)j->vc + ((size_t)row0 * j->Hkv + kh) * j->hdv;
		k->wsum_f32(acc, v, j->Hkv * j->hdv, sc, nk, j->hdv);
	} else {
		for (int64_t i = 0; i < nk; i++) {
			int64_t row = j->ring ? (p0 + i) % j->ctx : p0 + i;
			const float *vr = vrows ? vrows + i * j->hdv : kv_row(j->vc, j->vf16, row, j->Hkv, kh, j->hdv, vbuf);
			k->axpy_f32(acc, vr, sc[i], j->hdv);
		}
	}
	*m_io = m;
	*l_io = l;
}

/* Online softmax over kv positions [a, b] for one (token, head): m, l and the unnormalised acc.
 * Blocks of ATT_KB positions start at a, so the split depends only on the kv range, never on the
 * threads. */
static void attn_item(const attn_job *j, int64_t t, int64_t h, int64_t a, int64_t b, float *m_out, float *l_out, float *acc)
{
	const float *q = j->q + (t * j->H + h) * j->hd;
	int64_t kh = h / (j->H / j->Hkv);
	const float *brow = j->bias ? j->bias + (t * j->H + h) * j->ctx : NULL;
	float m = -INFINITY, l = 0;
	memset(acc, 0, sizeof(float) * (size_t)j->hdv);
	for (int64_t p0 = a; p0 <= b; p0 += ATT_KB) {
		int64_t nk = b - p0 + 1 < ATT_KB ? b - p0 + 1 : ATT_KB;
		attn_block(j, q, kh, p0, nk, NULL, NULL, brow, &m, &l, acc);
	}
	*m_out = m;
	*l_out = l;
}

static void attn_task(void *ctx, int ith, int nth)
{
	attn_job *j = ctx;
	int64_t items = j->n * j->H * j->nchunk;
	for (int64_t it = items * ith / nth; it < items * (ith + 1) / nth; it++) {
		int64_t th = it / j->nchunk, c = it % j->nchunk, t = th / j->H, h = th % j->H;
		int64_t lo, hi;
		kv_range(j, t, &lo, &hi);
		int64_t a = lo + c * KV_CHUNK, b = j->nchunk == 1 ? hi : (a + KV_CHUNK - 1 < hi ? a + KV_CHUNK - 1 : hi);
		float m = -INFINITY, l = 0;
		if (j->nchunk == 1) {
			float *o = j->out + th * j->hdv;
			if (a <= b) attn_item(j, t, h, a, b, &m, &l, o);
			float inv = l > 0 ? 1.0f / l : 0.0f;
			for (int64_t i = 0; i < j->hdv; i++) o[i] = l > 0 ? o[i] * inv : 0.0f;
		} else {
			float *pp = j->part + it * (j->hdv + 2);
			if (a <= b) attn_item(j, t, h, a, b, &m, &l, pp + 2);
			else memset(pp + 2, 0, sizeof(float) * (size_t)j->hdv);
			pp[0] = m;
			pp[1] = l;
		}
	}
	if (j->nchunk == 1) return;
	sg_threadpool_barrier(j->cb->pool);
	/* merge the chunks of each (token, head) in chunk order */
	int64_t nth_items = j->n * j->H;
	for (int64_t th = nth_items * ith / nth; th < nth_items * (ith + 1) / nth; th++) {
		const float *pp = j->part + th * j->nchunk * (j->hdv + 2);
		float m = -INFINITY, l = 0;
		for (int64_t c = 0; c < j->nchunk; c++) m = fmaxf(m, pp[c * (j->hdv + 2)]);
		float *o = j->out + th * j->hdv;
		memset(o, 0, sizeof(float) * (size_t)j->hdv);
		for (int64_t c = 0; c < j->nchunk; c++) {
			const float *p = pp + c * (j->hdv + 2);
			if (p[1] == 0) continue;
			float f = expf(p[0] - m);
			l += p[1] * f;
			j->cb->k->axpy_f32(o, p + 2, f, j->hdv);
		}
		float inv = l > 0 ? 1.0f / l : 0.0f;
		for (int64_t i = 0; i < j->hdv; i++) o[i] *= inv;
	}
}

/* The tiled path (many tokens, every kv range starting at 0). A work item is a tile: tq
 * consecutive tokens x the G query heads of one kv head. The tile walks the kv positions in
 * blocks of ATT_KB from 0, and each of its queries whose range reaches a block runs that block
 * (truncated at its own end) through attn_block: the same blocks, the same calls with the same
 * nk as attn_item, so every output is bit for bit the per-item one, whatever shares its tile. What
 * changes is the memory traffic: a block's K and V rows come from memory once per tile and from
 * the cache for its other queries. Tiles are taken from a shared counter, the latest tokens
 * (longest ranges) first; which thread runs a tile does not change its result. */
static void attn_tile_task(void *ctx, int ith, int nth)
{
	(void)nth;
	attn_job *j = ctx;
	int64_t G = j->H / j->Hkv, tq = j->tq, ntt = (j->n + tq - 1) / tq, tiles = ntt * j->Hkv;
	float *ms = j->tbuf + ith * j->tfloats, *ls = ms + tq * G, *krows = ls + tq * G;
	float *vrows = krows + (j->kf16 ? ATT_KB * j->hd : 0);
	for (int64_t it; (it = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < tiles;) {
		int64_t r = tiles - 1 - it, t0 = (r / j->Hkv) * tq, kh = r % j->Hkv;
		int64_t t1 = t0 + tq < j->n ? t0 + tq : j->n, top = -1;
		int64_t his[MAX_TILE_TOKENS];
		for (int64_t t = t0; t < t1; t++) {
			int64_t lo, hi;
			kv_range(j, t, &lo, &hi);
			SG_ASSERT(lo == 0);
			his[t - t0] = hi;
			top = hi > top ? hi : top;
			for (int64_t g = 0; g < G; g++) {
				ms[(t - t0) * G + g] = -INFINITY;
				ls[(t - t0) * G + g] = 0;
				if (hi >= 0) memset(j->out + (t * j->H + kh * G + g) * j->hdv, 0, sizeof(float) * (size_t)j->hdv);
			}
		}
		for (int64_t p0 = 0; p0 <= top; p0 += ATT_KB) {
			int64_t nb = top - p0 + 1 < ATT_KB ? top - p0 + 1 : ATT_KB;
			/* f16 rows: converted once per tile, the values kv_row gives each query */
			for (int64_t i = 0; i < nb && j->kf16; i++) kv_row(j->kc, 1, p0 + i, j->Hkv, kh, j->hd, krows + i * j->hd);
			for (int64_t i = 0; i < nb && j->vf16; i++) kv_row(j->vc, 1, p0 + i, j->Hkv, kh, j->hdv, vrows + i * j->hdv);
			for (int64_t t = t0; t < t1; t++) {
				int64_t hi = his[t - t0];
				if (hi < p0) continue;
				int64_t nk = hi - p0 + 1 < ATT_KB ? hi - p0 + 1 : ATT_KB;
				for (int64_t g = 0; g < G; g++) {
					int64_t qi = t * j->H + kh * G + g;
					attn_block(j, j->q + qi * j->hd, kh, p0, nk, j->kf16 ? krows : NULL, j->vf16 ? vrows : NULL, NULL,
						   &ms[(t - t0) * G + g], &ls[(t - t0) * G + g], j->out + qi * j->hdv);
				}
			}
		}
		for (int64_t t = t0; t < t1; t++)
			for (int64_t g = 0; g < G; g++) {
				float l = ls[(t - t0) * G + g], *o = j->out + (t * j->H + kh * G + g) * j->hdv;
				float inv = l > 0 ? 1.0f / l : 0.0f;
				for (int64_t i = 0; i < j->hdv; i++) o[i] = l > 0 ? o[i] * inv : 0.0f;
			}
	}
}

/* Token t's slice of an F32 (or I32) tensor holding n tokens' values back to back, as one row. */
static sg_btensor token_slice(const sg_btensor *x, int64_t n, int64_t t)
{
	sg_btensor v = *x;
	int64_t per = x->ne[0] * sg_btensor_rows(x) / n;
	v.ne[0] = per;
	v.ne[1] = v.ne[2] = v.ne[3] = 1;
	v.row_bytes = (size_t)per * 4;
	v.data = (char *)x->data + (size_t)(t * per) * 4;
	v.owned = 0;
	return v;
}

sg_status sg_cpu_attention(sg_backend *be, const sg_btensor *q, const sg_btensor *kc, const sg_btensor *vc, const sg_btensor *pos, const sg_attn_params *p, sg_btensor *out)
{
	sg_cpu_backend *cb = (sg_cpu_backend *)be;
	sg_status st;
	if ((st = sg_cpu_check_f32("attention", "q", q)) || (st = sg_cpu_check_f32("attention", "out", out)) ||
	    (st = need_i32("attention", "pos", pos)))
		return st;
	int64_t ntok = pos->ne[0] * sg_btensor_rows(pos);
	if (cb->exact && ntok > 1) {
		/* match_decode: each token as a one-token step (whether the kv length is split across
		 * threads depends on the number of tokens, and a split sums in another order) */
		int64_t qv = q->ne[0] * sg_btensor_rows(q), ov = out->ne[0] * sg_btensor_rows(out);
		if (qv % ntok || ov % ntok)
			return SG_FAIL(SG_ERR_INVALID_ARG, "q (%lld values) or out (%lld) is not %lld tokens", (long long)qv, (long long)ov,
				       (long long)ntok);
		for (int64_t t = 0; t < ntok; t++) {
			sg_btensor qt = token_slice(q, ntok, t), pt = token_slice(pos, ntok, t), ot = token_slice(out, ntok, t);
			if ((st = sg_cpu_attention(be, &qt, kc, vc, &pt, p, &ot))) return st;
		}
		return SG_OK;
	}
	if ((kc->type != SG_TYPE_F32 && kc->type != SG_TYPE_F16) || (vc->type != SG_TYPE_F32 && vc->type != SG_TYPE_F16))
		return SG_FAIL(SG_ERR_INVALID_ARG, "caches must be F32 or F16");
	attn_job j = {0};
	j.cb = cb;
	j.n = pos->ne[0] * sg_btensor_rows(pos);
	j.hd = kc->ne[0];
	j.Hkv = kc->ne[1];
	j.ctx = kc->ne[2] * kc->ne[3];
	j.hdv = vc->ne[0];
	if (vc->ne[1] != j.Hkv || vc->ne[2] * vc->ne[3] != j.ctx || j.hd > MAX_HEAD_DIM || j.hdv > MAX_HEAD_DIM)
		return SG_FAIL(SG_ERR_INVALID_ARG, "k cache [%lld][%lld][%lld] and v cache [%lld][%lld][%lld] disagree (or head dim > %d)",
			       (long long)j.ctx, (long long)j.Hkv, (long long)j.hd, (long long)(vc->ne[2] * vc->ne[3]),
			       (long long)vc->ne[1], (long long)j.hdv, MAX_HEAD_DIM);
	int64_t qv = q->ne[0] * sg_btensor_rows(q);
	if (qv % (j.n * j.hd)) return SG_FAIL(SG_ERR_INVALID_ARG, "q has %lld values, not n=%lld x heads x %lld", (long long)qv, (long long)j.n, (long long)j.hd);
	j.H = qv / (j.n * j.hd);
	if (j.H % j.Hkv) return SG_FAIL(SG_ERR_INVALID_ARG, "%lld query heads are not a multiple of %lld kv heads", (long long)j.H, (long long)j.Hkv);
	if (out->ne[0] * sg_btensor_rows(out) != j.n * j.H * j.hdv) return SG_FAIL(SG_ERR_INVALID_ARG, "out must hold [%lld][%lld][%lld]", (long long)j.n, (long long)j.H, (long long)j.hdv);
	j.q = q->data;
	j.kc = kc->data;
	j.vc = vc->data;
	j.kf16 = kc->type == SG_TYPE_F16;
	j.vf16 = vc->type == SG_TYPE_F16;
	j.pos = pos->data;
	j.scale = p->scale > 0 ? p->scale : 1.0f / sqrtf((float)j.hd);
	j.cap = p->softcap;
	j.window = p->window;
	j.causal = p->causal;
	j.ring = p->causal && p->window > 0 && p->window < j.ctx;
	if (p->bias) {
		const sg_btensor *bt = p->bias;
		if (bt->type != SG_TYPE_F32 || bt->ne[0] * sg_btensor_rows(bt) != j.n * j.H * j.ctx || j.ring)
			return SG_FAIL(SG_ERR_INVALID_ARG, "attention bias must be F32 [%lld][%lld][%lld] (and no ring)", (long long)j.n,
				       (long long)j.H, (long long)j.ctx);
		j.bias = bt->data;
	}
	j.out = out->data;
	j.pmax = 0;
	for (int64_t t = 0; t < j.n; t++) j.pmax = j.pos[t] > j.pmax ? j.pos[t] : j.pmax;
	/* split the kv length only when there are too few (token, head) pairs to share out; the
	 * decision depends on the shapes alone, never on the thread count */
	j.nchunk = 1;
	if (j.n * j.H < FEW_ITEMS && cb->attn_split_kv) {
		int64_t maxlen = 0;
		for (int64_t t = 0; t < j.n; t++) {
			int64_t lo, hi;
			kv_range(&j, t, &lo, &hi);
			if (hi - lo + 1 > maxlen) maxlen = hi - lo + 1;
		}
		j.nchunk = maxlen > KV_CHUNK ? (maxlen + KV_CHUNK - 1) / KV_CHUNK : 1;
	}
	if (j.nchunk > 1) {
		size_t need = sizeof(float) * (size_t)(j.n * j.H * j.nchunk * (j.hdv + 2));
		j.part = sg_cpu_scratch(cb, need);
		if (!j.part) return SG_FAIL(SG_ERR_NOMEM, "%zu bytes of scratch", need);
	}
	/* the tiled path where every query's blocks start at kv position 0 (causal, no ring, no
	 * window that cuts a range short) and the kv length is not split: there the tiles share
	 * their blocks exactly. Which path runs never changes a bit of the result (see
	 * attn_tile_task), so the choice may look at the thread count. */
	int tile = j.causal && !j.ring && !j.bias && j.nchunk == 1 && j.n >= 2 && sg_flag_bool("SARAGOSSA_CPU_ATTN_TILE");
	for (int64_t t = 0; tile && t < j.n; t++) {
		int64_t lo, hi;
		kv_range(&j, t, &lo, &hi);
		tile = lo == 0;
	}
	if (tile) {
		int64_t G = j.H / j.Hkv, nth = cb->nth > 0 ? cb->nth : 1;
		j.tq = TILE_QUERIES / G > 1 ? TILE_QUERIES / G : 1;
		if (j.tq > MAX_TILE_TOKENS) j.tq = MAX_TILE_TOKENS;
		/* enough tiles to keep every thread busy */
		while (j.tq > 1 && j.Hkv * ((j.n + j.tq - 1) / j.tq) < 2 * nth) j.tq /= 2;
		j.tfloats = 2 * j.tq * G + (j.kf16 ? ATT_KB * j.hd : 0) + (j.vf16 ? ATT_KB * j.hdv : 0);
		j.tfloats = (j.tfloats + 15) / 16 * 16; /* a cache line apart */
		size_t need = sizeof(float) * (size_t)(j.tfloats * nth);
		j.tbuf = sg_cpu_scratch(cb, need);
		if (!j.tbuf) return SG_FAIL(SG_ERR_NOMEM, "%zu bytes of scratch", need);
		atomic_init(&j.next, 0);
		sg_threadpool_run_any(cb->pool, attn_tile_task, &j);
		return SG_OK;
	}
	/* one kv chunk: no barrier (the merge), so a late worker's items may go to the caller */
	if (j.nchunk == 1) sg_threadpool_run_any(cb->pool, attn_task, &j);
	else sg_threadpool_run(cb->pool, attn_task, &j);
	return SG_OK;
}

/* --- elementwise --- */

typedef struct {
	const float *a, *b;
	float *out;
	float s;
	int kind;
	const sg_cpu_kernels *k;
} ew_job;

enum { EW_SILU, EW_GELU, EW_GELU_ERF, EW_ADD, EW_SCALE, EW_SOFTCAP };

void sg_cpu_glu_rows(const sg_cpu_kernels *k, sg_act act, const float *g, const float *u, float *out, int64_t n)
{
	if (act != SG_ACT_GELU) {
		k->glu(act, g, u, out, n);
		return;
	}
	if (k->gelu_erf && sg_flag_bool("SARAGOSSA_CPU_GELU_SIMD")) {
		k->gelu_erf(g, u, out, n);
		return;
	}
	for (int64_t i = 0; i < n; i++) out[i] = 0.5f * g[i] * (1.0f + erff(g[i] * 0.70710678f)) * u[i];
}

static void ew_range(void *ctx, int64_t i0, int64_t i1, int ith)
{
	ew_job *j = ctx;
	switch (j->kind) {
	case EW_SILU:
		sg_cpu_glu_rows(j->k, SG_ACT_SILU, j->a + i0, j->b + i0, j->out + i0, i1 - i0);
		break;
	case EW_GELU:
		sg_cpu_glu_rows(j->k, SG_ACT_GELU_TANH, j->a + i0, j->b + i0, j->out + i0, i1 - i0);
		break;
	case EW_GELU_ERF:
		sg_cpu_glu_rows(j->k, SG_ACT_GELU, j->a + i0, j->b + i0, j->out + i0, i1 - i0);
		break;
	case EW_ADD:
		for (int64_t i = i0; i < i1; i++) j->out[i] = j->a[i] + j->b[i];
		break;
	case EW_SCALE:
		for (int64_t i = i0; i < i1; i++) j->out[i] = j->a[i] * j->s;
		break;
	case EW_SOFTCAP:
		j->k->softcap(j->a + i0, j->s, j->out + i0, i1 - i0);
		break;
	}
}

static sg_status ew_run(sg_backend *be, const char *op, int kind, const sg_btensor *a, const sg_btensor *b, float s, sg_btensor *out)
{
	sg_cpu_backend *cb = (sg_cpu_backend *)be;
	sg_status st;
	if ((st = sg_cpu_check_f32(op, "input", a)) || (st = sg_cpu_check_f32(op, "out", out)) || (st = sg_cpu_check_same(op, a, out)))
		return st;
	if (b && ((st = sg_cpu_check_f32(op, "input", b)) || (st = sg_cpu_check_same(op, a, b)))) return st;
	ew_job j = {a->data, b ? b->data : NULL, out->data, s, kind, cb->k};
	/* grain of 16 floats: no two threads write one cache line */
	sg_parallel_for(cb->pool, a->ne[0] * sg_btensor_rows(a), 16, ew_range, &j);
	return SG_OK;
}

sg_status sg_cpu_glu(sg_backend *be, const sg_btensor *gate, const sg_btensor *up, sg_act act, sg_btensor *out)
{
	if (!up) return SG_FAIL(SG_ERR_INVALID_ARG, "up is missing");
	int kind = act == SG_ACT_SILU ? EW_SILU : act == SG_ACT_GELU_TANH ? EW_GELU : act == SG_ACT_GELU ? EW_GELU_ERF : -1;
	if (kind < 0) return SG_FAIL(SG_ERR_UNSUPPORTED, "activation %d has no gated kernel", (int)act);
	return ew_run(be, "glu", kind, gate, up, 0, out);
}

sg_status sg_cpu_add(sg_backend *be, const sg_btensor *a, const sg_btensor *b, sg_btensor *out)
{
	if (!b) return SG_FAIL(SG_ERR_INVALID_ARG, "b is missing");
	return ew_run(be, "add", EW_ADD, a, b, 0, out);
}

sg_status sg_cpu_scale(sg_backend *be, const sg_btensor *x, float s, sg_btensor *out)
{
	return ew_run(be, "scale", EW_SCALE, x, NULL, s, out);
}

sg_status sg_cpu_softcap(sg_backend *be, const sg_btensor *x, float cap, sg_btensor *out)
{
	if (!(cap > 0)) return SG_FAIL(SG_ERR_INVALID_ARG, "cap %g must be > 0", (double)cap);
	return ew_run(be, "softcap", EW_SOFTCAP, x, NULL, cap, out);
}

/* --- softmax, routing, argmax --- */

typedef struct {
	const float *x;
	float *out;
	int64_t D;
	/* routing */
	int k, norm, sigmoid;
	int32_t *ids;
	float *w;
} row_job;

static void softmax_row(const float *x, float *o, int64_t D)
{
	float m = -INFINITY;
	for (int64_t i = 0; i < D; i++) m = fmaxf(m, x[i]);
	double s = 0;
	for (int64_t i = 0; i < D; i++) s += o[i] = expf(x[i] - m);
	float inv = (float)(1.0 / s);
	for (int64_t i = 0; i < D; i++) o[i] *= inv;
}

typedef struct {
	const sg_cpu_kernels *k;
	const float *x;
	float *out;
	int64_t D;
	int simd; /* the set's softmax_row (SARAGOSSA_CPU_SOFTMAX_SIMD) */
} softmax_job;

/* The op's rows through the kernel set's exp-and-sum (the attention's): Whisper's encoder
 * normalises 1500-wide score rows here, where a libm expf per value cost a fifth of the encoder. */
static void softmax_range(void *ctx, int64_t r0, int64_t r1, int ith)
{
	softmax_job *j = ctx;
	(void)ith;
	for (int64_t r = r0; r < r1; r++) {
		const float *x = j->x + r * j->D;
		float *o = j->out + r * j->D, m = -INFINITY;
		if (j->simd) {
			j->k->softmax_row(x, o, j->D);
			continue;
		}
		for (int64_t i = 0; i < j->D; i++) m = x[i] > m ? x[i] : m;
		float inv = 1.0f / j->k->expsum(x, m, o, j->D);
		for (int64_t i = 0; i < j->D; i++) o[i] *= inv;
	}
}

sg_status sg_cpu_softmax(sg_backend *be, const sg_btensor *x, sg_btensor *out)
{
	sg_cpu_backend *cb = (sg_cpu_backend *)be;
	sg_status st;
	if ((st = sg_cpu_check_f32("softmax", "x", x)) || (st = sg_cpu_check_f32("softmax", "out", out)) || (st = sg_cpu_check_same("softmax", x, out)))
		return st;
	softmax_job j = {cb->k, x->data, out->data, x->ne[0], cb->k->softmax_row && cb->softmax_simd};
	sg_parallel_for(cb->pool, sg_btensor_rows(x), 1, softmax_range, &j);
	return SG_OK;
}

#define MAX_EXPERTS 1024

static void route_range(void *ctx, int64_t r0, int64_t r1, int ith)
{
	row_job *j = ctx;
	float p[MAX_EXPERTS];
	for (int64_t r = r0; r < r1; r++) {
		const float *x = j->x + r * j->D;
		if (j->sigmoid)
			for (int64_t i = 0; i < j->D; i++) p[i] = 1.0f / (1.0f + expf(-x[i]));
		else
			softmax_row(x, p, j->D);
		int32_t *ids = j->ids + r * j->k;
		float *w = j->w + r * j->k, sum = 0;
		for (int s = 0; s < j->k; s++) { /* k passes: the largest remaining, lowest id on ties */
			int64_t best = -1;
			for (int64_t i = 0; i < j->D; i++)
				if (p[i] == p[i] && (best < 0 || p[i] > p[best])) best = i;
			if (best < 0) best = 0;
			ids[s] = (int32_t)best;
			w[s] = p[best];
			sum += p[best];
			p[best] = NAN; /* taken */
		}
		if (j->norm && sum > 0)
			for (int s = 0; s < j->k; s++) w[s] /= sum;
	}
}

sg_status sg_cpu_moe_route(sg_backend *be, const sg_btensor *logits, sg_router router, int k, int norm_topk, sg_btensor *ids, sg_btensor *weights)
{
	sg_cpu_backend *cb = (sg_cpu_backend *)be;
	sg_status st;
	if ((st = sg_cpu_check_f32("moe_route", "logits", logits)) || (st = need_i32("moe_route", "ids", ids)) ||
	    (st = sg_cpu_check_f32("moe_route", "weights", weights)))
		return st;
	int64_t n = sg_btensor_rows(logits), E = logits->ne[0];
	if (E > MAX_EXPERTS || k < 1 || k > E) return SG_FAIL(SG_ERR_INVALID_ARG, "k %d of %lld experts (at most %d)", k, (long long)E, MAX_EXPERTS);
	if (ids->ne[0] != k || sg_btensor_rows(ids) != n || weights->ne[0] != k || sg_btensor_rows(weights) != n)
		return SG_FAIL(SG_ERR_INVALID_ARG, "ids and weights must be [%lld][%d]", (long long)n, k);
	row_job j = {logits->data, NULL, E, k, norm_topk, router == SG_ROUTER_SIGMOID, ids->data, weights->data};
	sg_parallel_for(cb->pool, n, 1, route_range, &j);
	return SG_OK;
}

sg_status sg_cpu_moe_combine(sg_backend *be, const sg_btensor *y, const sg_btensor *weights, sg_btensor *out)
{
	sg_cpu_backend *cb = (sg_cpu_backend *)be;
	sg_status st;
	if ((st = sg_cpu_check_f32("moe_combine", "y", y)) || (st = sg_cpu_check_f32("moe_combine", "weights", weights)) ||
	    (st = sg_cpu_check_f32("moe_combine", "out", out)))
		return st;
	int64_t n = sg_btensor_rows(out), D = out->ne[0], k = weights->ne[0];
	if (y->ne[0] != D || sg_btensor_rows(y) != n * k || sg_btensor_rows(weights) != n)
		return SG_FAIL(SG_ERR_INVALID_ARG, "y [%lld][%lld], weights [%lld][%lld], out [%lld][%lld] disagree",
			       (long long)sg_btensor_rows(y), (long long)y->ne[0], (long long)sg_btensor_rows(weights), (long long)k,
			       (long long)n, (long long)D);
	const float *yy = y->data, *w = weights->data;
	float *o = out->data;
	for (int64_t t = 0; t < n; t++) {
		memset(o + t * D, 0, sizeof(float) * (size_t)D);
		for (int64_t s = 0; s < k; s++) cb->k->axpy_f32(o + t * D, yy + (t * k + s) * D, w[t * k + s], D);
	}
	return SG_OK;
}

static void argmax_range(void *ctx, int64_t r0, int64_t r1, int ith)
{
	row_job *j = ctx;
	for (int64_t r = r0; r < r1; r++) {
		const float *x = j->x + r * j->D;
		int64_t best = 0;
		float bv = -INFINITY;
		for (int64_t i = 0; i < j->D; i++)
			if (x[i] > bv) bv = x[i], best = i;
		j->ids[r] = (int32_t)best;
	}
}

sg_status sg_cpu_argmax(sg_backend *be, const sg_btensor *x, sg_btensor *ids)
{
	sg_cpu_backend *cb = (sg_cpu_backend *)be;
	sg_status st;
	if ((st = sg_cpu_check_f32("argmax", "x", x)) || (st = need_i32("argmax", "ids", ids))) return st;
	if (ids->ne[0] * sg_btensor_rows(ids) != sg_btensor_rows(x))
		return SG_FAIL(SG_ERR_INVALID_ARG, "ids has %lld values for %lld rows", (long long)(ids->ne[0] * sg_btensor_rows(ids)), (long long)sg_btensor_rows(x));
	row_job j = {x->data, NULL, x->ne[0], 0, 0, 0, ids->data, NULL};
	sg_parallel_for(cb->pool, sg_btensor_rows(x), 1, argmax_range, &j);
	return SG_OK;
}
