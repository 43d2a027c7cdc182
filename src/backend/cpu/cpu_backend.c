/*
 * The CPU backend: the op table over host memory, the kernel set chosen at start-up, and the
 * matmul / expert-matmul / embedding ops that drive the weight kernels across the threadpool.
 * Ops are synchronous: when one returns, its output is written.
 */
#include "backend/cpu/cpu_internal.h"

#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/flags.h"
#include "base/sysinfo.h"
#include "base/threadpool.h"

/* --- kernel set --- */

size_t sg_cpu_pf_dist = 4096;

/* Once per process, before any kernel of any backend runs: the kernels read it unsynchronised. */
static pthread_once_t pf_once = PTHREAD_ONCE_INIT;
static void pf_init(void)
{
	int64_t d = sg_flag_int("SARAGOSSA_CPU_PREFETCH");
	sg_cpu_pf_dist = d > 0 && d <= (1 << 20) ? (size_t)d / 64 * 64 : 0;
}

const sg_cpu_kernels *sg_cpu_kernels_pick(const char *simd, const char **why)
{
	const sg_cpu_features *f = sg_cpu_get_features();
	int has512 = f->avx512f && f->avx512bw && f->avx512vl && f->avx512vnni && f->avx2 && f->fma && f->f16c;
	int has2 = f->avx2 && f->fma && f->f16c;
	*why = NULL;
	if (!simd || !*simd || !strcmp(simd, "auto")) {
		if (has512 && sg_cpu_kernels_avx512()) return sg_cpu_kernels_avx512();
		if (has2 && sg_cpu_kernels_avx2()) return sg_cpu_kernels_avx2();
		if (f->neon && sg_cpu_kernels_neon()) return sg_cpu_kernels_neon();
		return &sg_cpu_kernels_ref;
	}
	if (!strcmp(simd, "scalar")) return &sg_cpu_kernels_ref;
	if (!strcmp(simd, "avx512")) {
		if (has512 && sg_cpu_kernels_avx512()) return sg_cpu_kernels_avx512();
		*why = "needs x86-64 AVX-512 F/BW/VL/VNNI with AVX2, FMA and F16C";
		return NULL;
	}
	if (!strcmp(simd, "avx2")) {
		if (has2 && sg_cpu_kernels_avx2()) return sg_cpu_kernels_avx2();
		*why = "needs x86-64 AVX2, FMA and F16C";
		return NULL;
	}
	if (!strcmp(simd, "neon")) {
		if (f->neon && sg_cpu_kernels_neon()) return sg_cpu_kernels_neon();
		*why = "needs arm64 NEON";
		return NULL;
	}
	*why = "unknown SIMD level (expected auto, avx512, avx2, neon or scalar)";
	return NULL;
}

void *sg_cpu_scratch(sg_cpu_backend *cb, size_t n)
{
	if (n <= cb->scratch_cap) return cb->scratch;
	size_t cap = n + n / 4 + 4096;
	void *raw = sg_malloc(cap + 64);
	if (!raw) return NULL;
	sg_free(cb->scratch_raw);
	cb->scratch_raw = raw;
	cb->scratch = (uint8_t *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
	cb->scratch_cap = cap;
	return cb->scratch;
}

sg_status sg_cpu_check_f32(const char *op, const char *what, const sg_btensor *t)
{
	if (!t || !t->data) return sg_error(SG_ERR_INVALID_ARG, "cpu %s: %s is missing", op, what);
	if (t->type != SG_TYPE_F32)
		return sg_error(SG_ERR_INVALID_ARG, "cpu %s: %s must be F32, found %s", op, what,
				sg_type_name_cpu(t->type));
	return SG_OK;
}

sg_status sg_cpu_check_same(const char *op, const sg_btensor *a, const sg_btensor *b)
{
	if (a->ne[0] != b->ne[0] || sg_btensor_rows(a) != sg_btensor_rows(b))
		return sg_error(SG_ERR_INVALID_ARG, "cpu %s: shapes differ: [%lld][%lld] vs [%lld][%lld]", op,
				(long long)sg_btensor_rows(a), (long long)a->ne[0], (long long)sg_btensor_rows(b),
				(long long)b->ne[0]);
	return SG_OK;
}

/* --- memory --- */

static size_t plain_size(sg_type t)
{
	switch (t) {
	case SG_TYPE_F32: case SG_TYPE_I32: return 4;
	case SG_TYPE_F16: case SG_TYPE_BF16: return 2;
	default: return 0;
	}
}

/* An idle block of at least `bytes` and at most twice that (the smallest), or NULL; *bytes
 * becomes its size. */
static void *cache_take(sg_cpu_backend *cb, size_t *bytes_io)
{
	size_t bytes = *bytes_io;
	if (!cb->tensor_cache || bytes < SG_CPU_CACHE_MIN) return NULL;
	void *p = NULL;
	pthread_mutex_lock(&cb->cache_mu);
	int best = -1;
	for (int i = 0; i < SG_CPU_CACHE_SLOTS; i++)
		if (cb->idle[i].p && cb->idle[i].bytes >= bytes && cb->idle[i].bytes / 2 <= bytes &&
		    (best < 0 || cb->idle[i].bytes < cb->idle[best].bytes))
			best = i;
	if (best >= 0) {
		p = cb->idle[best].p;
		*bytes_io = cb->idle[best].bytes;
		cb->idle_bytes -= cb->idle[best].bytes;
		cb->idle[best].p = NULL;
	}
	pthread_mutex_unlock(&cb->cache_mu);
	return p;
}

/* Records a large block handed out, so that its free may keep it (untracked when the table is full).
 * An entry left for the same address (a block freed some other way, then handed out again by
 * malloc) is replaced, so a tracked size is always the block's. */
static void cache_track(sg_cpu_backend *cb, void *p, size_t bytes)
{
	if (!cb->tensor_cache || bytes < SG_CPU_CACHE_MIN) return;
	pthread_mutex_lock(&cb->cache_mu);
	int slot = -1;
	for (int i = 0; i < SG_CPU_CACHE_SLOTS; i++) {
		if (cb->live[i].p == p) cb->live[i].p = NULL;
		if (!cb->live[i].p && slot < 0) slot = i;
	}
	if (slot >= 0) {
		cb->live[slot].p = p;
		cb->live[slot].bytes = bytes;
	}
	pthread_mutex_unlock(&cb->cache_mu);
}

/* Frees the data of t (owned), or keeps it idle when tensor_alloc handed it out (tracked, a plain
 * type in its own layout: packed weights are never tracked) and the idle blocks stay under the cap. */
static void cache_free(sg_cpu_backend *cb, const sg_btensor *t)
{
	void *p = t->data;
	if (cb->tensor_cache && t->layout == 0 && plain_size(t->type)) {
		pthread_mutex_lock(&cb->cache_mu);
		for (int i = 0; i < SG_CPU_CACHE_SLOTS; i++) {
			if (cb->live[i].p != p) continue;
			size_t bytes = cb->live[i].bytes;
			cb->live[i].p = NULL;
			for (int j = 0; j < SG_CPU_CACHE_SLOTS && cb->idle_bytes + bytes <= SG_CPU_CACHE_BYTES; j++)
				if (!cb->idle[j].p) {
					cb->idle[j].p = p;
					cb->idle[j].bytes = bytes;
					cb->idle_bytes += bytes;
					p = NULL;
					break;
				}
			break;
		}
		pthread_mutex_unlock(&cb->cache_mu);
	}
	free(p);
}

static sg_status cpu_tensor_alloc(sg_backend *be, sg_type type, const int64_t ne[4], sg_btensor *out)
{
	memset(out, 0, sizeof(*out));
	size_t es = plain_size(type);
	if (!es) return SG_FAIL(SG_ERR_UNSUPPORTED, "type %s cannot be allocated (F32, F16, BF16, I32 only)", sg_type_name_cpu(type));
	size_t n = 1;
	for (int i = 0; i < 4; i++) {
		if (ne[i] < 1) return SG_FAIL(SG_ERR_INVALID_ARG, "ne[%d] = %lld < 1", i, (long long)ne[i]);
		if (n > SIZE_MAX / 64 / (size_t)ne[i]) return SG_FAIL(SG_ERR_NOMEM, "tensor too large");
		n *= (size_t)ne[i];
		out->ne[i] = ne[i];
	}
	/* 64-byte aligned, rounded up so SIMD tails may read a full line */
	size_t bytes = (n * es + 63) & ~(size_t)63, block = bytes;
	void *p = cache_take((sg_cpu_backend *)be, &block);
	if (!p && posix_memalign(&p, 64, bytes)) return SG_FAIL(SG_ERR_NOMEM, "%zu bytes", n * es);
	memset(p, 0, bytes);
	cache_track((sg_cpu_backend *)be, p, block);
	out->type = type;
	out->row_bytes = (size_t)ne[0] * es;
	out->data = p;
	out->owned = 1;
	return SG_OK;
}

/* --- MLX 4-bit repack --- */

typedef struct {
	const uint8_t *codes, *sc, *bi;
	uint8_t *out;
	int64_t K;
	int group;
	size_t cb, sb, rb; /* row bytes: codes, scales (= biases), repacked */
} repack_job;

static void repack_range(void *ctx, int64_t r0, int64_t r1, int ith)
{
	const repack_job *j = ctx;
	for (int64_t r = r0; r < r1; r++)
		sg_cpu_mlx4g_pack_row(j->codes + (size_t)r * j->cb, j->sc + (size_t)r * j->sb, j->bi + (size_t)r * j->sb, j->K,
				      j->group, j->out + (size_t)r * j->rb);
}

/* Hands the pages wholly inside [p, p + n) back to the kernel: the repacked copy replaces the
 * mmap'd original in the resident set instead of adding to it. MADV_PAGEOUT keeps the contents
 * (a file page is re-read, an anonymous one swapped), so this is safe whatever the memory is;
 * errors (an older kernel) only leave the pages resident. */
static void release_pages(const void *p, size_t n)
{
#if defined(MADV_PAGEOUT) || defined(MADV_COLD)
	long ps = sysconf(_SC_PAGESIZE);
	uintptr_t pg = ps > 0 ? (uintptr_t)ps : 4096, a = ((uintptr_t)p + pg - 1) & ~(pg - 1), e = ((uintptr_t)p + n) & ~(pg - 1);
	if (e <= a) return;
#if defined(MADV_PAGEOUT)
	if (!madvise((void *)a, e - a, MADV_PAGEOUT)) return;
#endif
#if defined(MADV_COLD)
	(void)madvise((void *)a, e - a, MADV_COLD);
#endif
#else
	(void)p;
	(void)n;
#endif
}

/* MLX 4-bit weights into SG_KT_MLX4G (one stream per row; see cpu_internal.h), in a buffer the
 * tensor then owns. On allocation failure the split layout is kept (it works, only slower). */
static void repack_mlx4(sg_cpu_backend *cb, sg_btensor *t)
{
	int64_t rows = sg_btensor_rows(t), K = t->ne[0];
	repack_job j = {t->data, t->scales, t->biases, NULL, K, t->mlx.group, t->row_bytes, sg_btensor_mlx_sb_row_bytes(t), 0};
	j.rb = j.cb + 2 * j.sb;
	size_t bytes = j.rb * (size_t)rows;
	void *mem = NULL;
	if (posix_memalign(&mem, 64, (bytes + 63) & ~(size_t)63)) return;
	j.out = mem;
	sg_parallel_for(cb->pool, rows, 64, repack_range, &j);
	release_pages(j.codes, j.cb * (size_t)rows);
	release_pages(j.sc, j.sb * (size_t)rows);
	release_pages(j.bi, j.sb * (size_t)rows);
	t->data = mem;
	t->row_bytes = j.rb;
	t->owned = 1;
}

static sg_status cpu_tensor_bind(sg_backend *be, sg_btensor *t)
{
	sg_wview v;
	if (!t->data) return SG_FAIL(SG_ERR_INVALID_ARG, "no data");
	if (t->type == SG_TYPE_I32) {
		t->row_bytes = (size_t)t->ne[0] * 4;
	} else {
		if (sg_cpu_wview(t, &v) == SG_KT_NONE) {
			if (t->type == SG_TYPE_MLX_AFFINE)
				return SG_FAIL(SG_ERR_UNSUPPORTED, "MLX affine bits %d group %d with %s scales, %lld columns",
					       t->mlx.bits, t->mlx.group, sg_type_name_cpu(t->mlx.sb_type), (long long)t->ne[0]);
			return SG_FAIL(SG_ERR_UNSUPPORTED, "type %s with %lld columns", sg_type_name_cpu(t->type),
				       (long long)t->ne[0]);
		}
		t->row_bytes = sg_cpu_row_bytes(t);
	}
	for (int i = 1; i < 4; i++)
		if (t->ne[i] < 1) t->ne[i] = 1;
	t->owned = 0;
	/* groups of 32: one block per group, so the repacked kernel's per-group work (scale and bias
	 * unpacked, one more FMA) costs as much as the single stream saves: measured even, kept split */
	int rp = ((sg_cpu_backend *)be)->mlx_repack;
	if (t->type == SG_TYPE_MLX_AFFINE && v.kt == SG_KT_MLX4 && (rp == 2 || (rp == 1 && v.group >= 64)))
		repack_mlx4((sg_cpu_backend *)be, t);
	if (t->layout == SG_LAYOUT_MATMUL_ONLY && t->type != SG_TYPE_I32) {
		sg_cpu_backend *cb = (sg_cpu_backend *)be;
		const void *file = t->data;
		t->layout = 0;
		if (cb->gemm_panel && cb->k->mm_panel && (v.kt == SG_KT_F32 || v.kt == SG_KT_F16 || v.kt == SG_KT_BF16)) {
			sg_cpu_mm_panel_pack(t);
			/* the file's bytes are not read again: their pages may go */
			if (t->layout == SG_CPU_LAYOUT_PANEL) release_pages(file, (size_t)sg_btensor_rows(t) * t->row_bytes);
		}
	}
	if (t->layout == SG_LAYOUT_CONV1D) {
		t->layout = 0;
		if (((sg_cpu_backend *)be)->conv_packed && ((sg_cpu_backend *)be)->k->conv_tile) sg_cpu_conv_pack(t);
	}
	return SG_OK;
}

static void cpu_tensor_free(sg_backend *be, sg_btensor *t)
{
	if (t && t->owned) cache_free((sg_cpu_backend *)be, t);
	if (t) memset(t, 0, sizeof(*t));
}

static size_t tensor_bytes(const sg_btensor *t) { return (size_t)sg_btensor_rows(t) * t->row_bytes; }

static sg_status cpu_write(sg_backend *be, sg_btensor *t, size_t off, const void *src, size_t n)
{
	if (off > tensor_bytes(t) || n > tensor_bytes(t) - off)
		return SG_FAIL(SG_ERR_RANGE, "write of %zu bytes at %zu past %zu", n, off, tensor_bytes(t));
	memcpy((char *)t->data + off, src, n);
	return SG_OK;
}

static sg_status cpu_read(sg_backend *be, const sg_btensor *t, size_t off, void *dst, size_t n)
{
	if (off > tensor_bytes(t) || n > tensor_bytes(t) - off)
		return SG_FAIL(SG_ERR_RANGE, "read of %zu bytes at %zu past %zu", n, off, tensor_bytes(t));
	memcpy(dst, (const char *)t->data + off, n);
	return SG_OK;
}

static sg_status cpu_copy(sg_backend *be, const sg_btensor *src, size_t src_off, sg_btensor *dst, size_t dst_off, size_t n)
{
	(void)be;
	if (src_off > tensor_bytes(src) || n > tensor_bytes(src) - src_off || dst_off > tensor_bytes(dst) || n > tensor_bytes(dst) - dst_off)
		return SG_FAIL(SG_ERR_RANGE, "copy of %zu bytes from %zu of %zu to %zu of %zu", n, src_off, tensor_bytes(src), dst_off,
			       tensor_bytes(dst));
	memmove((char *)dst->data + dst_off, (const char *)src->data + src_off, n);
	return SG_OK;
}

static sg_status cpu_sync(sg_backend *be) { return SG_OK; }

/* --- matmul --- */

typedef struct mm_job {
	sg_cpu_backend *cb;
	sg_wview w;
	sg_mv_fn mv;
	/* many tokens without the GEMM: up to SG_MVT_MAX tokens a call with mv's bits (NULL: none) */
	void (*mvt)(const sg_wview *w, int64_t r0, int64_t r1, int nt, const void *const *x, float *const *y);
	sg_mm_fn mm; /* many tokens: the GEMM kernel, or NULL to loop mv over tokens */
	_Atomic int64_t next; /* GEMM: the next chunk of rows to hand out */
	int q8, xoff;
	sg_xlayout xl;
	const float *x; /* [nx][K] */
	int64_t nx, K, N;
	uint8_t *xq_mem; /* [nx] quantized activations, xq_stride bytes each */
	size_t xq_stride;
	/* plain matmul */
	float *y; /* [nx][N] */
	const float *bias;
	/* expert matmul */
	const int32_t *ids; /* [n][k] */
	int64_t n, k, E;
	int shared_x;
	int32_t *order, *start; /* slots sorted by expert: start[E+1] offsets into order[n*k] */
	size_t w_expert_bytes, sb_expert_bytes;
	const uint8_t *const *table; /* [E] the experts' rows when the weight has an expert table */
} mm_job;

static void xq_at(const mm_job *j, int64_t t, sg_xq *xq) { sg_xq_init(xq, j->K, j->xq_mem + (size_t)t * j->xq_stride); }

/* Quantizes the activations: the blocks of each row split evenly over the threads. */
static void mm_quantize(mm_job *j, int ith, int nth)
{
	int64_t nb = j->K / 32;
	for (int64_t t = 0; t < j->nx; t++) {
		int64_t b0 = nb * ith / nth, b1 = nb * (ith + 1) / nth;
		if (b0 >= b1) continue;
		sg_xq xq;
		xq_at(j, t, &xq);
		sg_xq part = {b1 - b0, xq.b + b0, xq.d + b0, xq.s + b0, xq.sh + 2 * b0};
		j->cb->k->quantize_x(j->x + t * j->K + 32 * b0, 32 * (b1 - b0), j->xl, j->xoff, &part);
	}
}

static const void *x_arg(const mm_job *j, int64_t t, sg_xq *tmp)
{
	if (!j->q8) return j->x + t * j->K;
	xq_at(j, t, tmp);
	return tmp;
}

/* Rows [r0, r1) of this thread: contiguous, multiples of 16 so no two threads write one line. */
static void row_range(int64_t N, int ith, int nth, int64_t *r0, int64_t *r1)
{
	int64_t per = (N + nth - 1) / nth;
	per = (per + 15) / 16 * 16;
	*r0 = per * ith < N ? per * ith : N;
	*r1 = *r0 + per < N ? *r0 + per : N;
}

#define ROW_TILE 16 /* weight rows kept hot (L1/L2) while every token of a tile passes */
#define TOK_TILE 32 /* tokens per pass: their activations stay in L2 */
/* GEMM blocking: a chunk of K (a multiple of every block size) times a chunk of tokens keeps the
 * activations the kernel sweeps for every row tile in L2 (64 tokens x 1024 elements of 8-bit
 * blocks = 128 KiB), while a row tile's weights of that chunk stay in L1 across the tokens. */
#define GEMM_KC 1024
#define GEMM_TC 64
#define GEMM_TCF 96 /* float weights on mm_packed[]: a multiple of its 6-token tile */
/* GEMM rows are handed out in chunks from a shared counter instead of fixed halves: on cores
 * shared with other work a thread the scheduler holds back takes fewer chunks, instead of the
 * other waiting for it. Each row is still computed whole by one thread, in one order, so the
 * result does not depend on the thread count. A multiple of 16: no two threads write one line. */
#define GEMM_RCH 64
/* Token chunks, where the rows alone are too few to share: a multiple of every token tile (the
 * kernels' 3, 4, 6 and 8) and of GEMM_TCF, so no chunk adds a partial tile. Each token's sums
 * are the same in any chunk. */
#define GEMM_TSPLIT 96

static void mm_gemm(mm_job *j, int64_t r0, int64_t r1, int64_t ta, int64_t tz)
{
	const uint8_t *xb = j->q8 ? j->xq_mem : (const uint8_t *)j->x;
	size_t xs = j->q8 ? j->xq_stride : (size_t)j->K * sizeof(float);
	/* float weights: the whole row in one pass, so each token's sum is the matvec's, bit for bit
	 * (their activations are 4 bytes per element and a few tokens' rows still fit in L2) */
	int64_t kc = j->q8 ? GEMM_KC : j->K;
	for (int64_t k0 = 0; k0 < j->K; k0 += kc) {
		int64_t k1 = k0 + kc < j->K ? k0 + kc : j->K;
		int64_t tc = j->q8 || j->mm == j->cb->k->mm[j->w.kt] ? GEMM_TC : GEMM_TCF;
		for (int64_t t0 = ta; t0 < tz; t0 += tc) {
			int64_t t1 = t0 + tc < tz ? t0 + tc : tz;
			j->mm(&j->w, r0, r1, xb, xs, t0, t1, j->y, j->N, k0, k1);
		}
	}
}

/* Tokens [t0, t1) over rows [rb, re) through mvt, in groups of at most SG_MVT_MAX of near-equal
 * size (9 = 4 + 5, not 8 + 1: the kernel's cost per token falls with the group's size); a group
 * of one takes mv, which is faster alone. Every token gets mv's bits in any group. */
static void mm_mvt(const mm_job *j, int64_t rb, int64_t re, int64_t t0, int64_t t1)
{
	sg_xq xq[SG_MVT_MAX];
	const void *xs[SG_MVT_MAX];
	float *ys[SG_MVT_MAX];
	int64_t ng = (t1 - t0 + SG_MVT_MAX - 1) / SG_MVT_MAX;
	for (int64_t t = t0; ng > 0; ng--) {
		int nt = (int)((t1 - t) / ng);
		if (nt == 1) {
			j->mv(&j->w, rb, re, x_arg(j, t, &xq[0]), j->y + t * j->N + rb);
		} else {
			for (int u = 0; u < nt; u++) {
				xs[u] = x_arg(j, t + u, &xq[u]);
				ys[u] = j->y + (t + u) * j->N + rb;
			}
			j->mvt(&j->w, rb, re, nt, xs, ys);
		}
		t += nt;
	}
}

static void mm_task(void *ctx, int ith, int nth)
{
	mm_job *j = ctx;
	/* one token: every thread quantizes the whole vector into its own slot (a microsecond of
	 * redundant work) rather than sharing halves across a barrier, which costs more, and a
	 * whole time slice when the cores are shared. Many tokens: split, then one barrier. */
	if (j->q8 && j->nx > 1) {
		mm_quantize(j, ith, nth);
		sg_threadpool_barrier(j->cb->pool);
	}
	int64_t r0, r1;
	row_range(j->N, ith, nth, &r0, &r1);
	sg_xq tmp;
	if (j->nx == 1) {
		if (r0 >= r1) return;
		const void *xa = j->x;
		if (j->q8) {
			sg_xq_init(&tmp, j->K, j->xq_mem + (size_t)ith * j->xq_stride);
			j->cb->k->quantize_x(j->x, j->K, j->xl, j->xoff, &tmp);
			xa = &tmp;
		}
		j->mv(&j->w, r0, r1, xa, j->y + r0);
	} else if (j->mm) {
		/* fewer row chunks than two a thread (Whisper's scores times V: 64 rows): the tokens are
		 * cut too, or one thread would do the whole product (SARAGOSSA_CPU_GEMM_SPLIT_TOKENS) */
		int64_t nrch = (j->N + GEMM_RCH - 1) / GEMM_RCH, tch = j->nx, ntch = 1;
		if (j->cb->gemm_split_tokens && nrch < 2 * nth && j->nx >= 2 * GEMM_TSPLIT) {
			ntch = (2 * nth + nrch - 1) / nrch * 2;
			tch = (j->nx + ntch - 1) / ntch;
			tch = tch < GEMM_TSPLIT ? GEMM_TSPLIT : (tch + GEMM_TSPLIT - 1) / GEMM_TSPLIT * GEMM_TSPLIT;
			ntch = (j->nx + tch - 1) / tch;
		}
		for (int64_t c; (c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < nrch * ntch;) {
			int64_t rc = c / ntch, tc = c % ntch;
			int64_t a = rc * GEMM_RCH, b = a + GEMM_RCH < j->N ? a + GEMM_RCH : j->N;
			int64_t ta = tc * tch, tz = ta + tch < j->nx ? ta + tch : j->nx;
			mm_gemm(j, a, b, ta, tz);
			if (j->bias) /* the kernel set's axpy with a = 1: y + bias rounded once, as a scalar add */
				for (int64_t t = ta; t < tz; t++) j->cb->k->axpy_f32(j->y + t * j->N + a, j->bias + a, 1.0f, b - a);
		}
		return;
	} else {
		for (int64_t t0 = 0; t0 < j->nx; t0 += TOK_TILE) {
			int64_t t1 = t0 + TOK_TILE < j->nx ? t0 + TOK_TILE : j->nx;
			for (int64_t rb = r0; rb < r1; rb += ROW_TILE) {
				int64_t re = rb + ROW_TILE < r1 ? rb + ROW_TILE : r1;
				/* several tokens a call where the set has it: each weight block unpacked once */
				if (j->mvt) mm_mvt(j, rb, re, t0, t1);
				else
					for (int64_t t = t0; t < t1; t++) j->mv(&j->w, rb, re, x_arg(j, t, &tmp), j->y + t * j->N + rb);
			}
		}
	}
	if (j->bias && r0 < r1)
		for (int64_t t = 0; t < j->nx; t++) j->cb->k->axpy_f32(j->y + t * j->N + r0, j->bias + r0, 1.0f, r1 - r0);
}

/* Fills the kernel part of a job; SG_OK or an error naming the type. */
static sg_status mm_setup(sg_cpu_backend *cb, const char *op, const sg_btensor *w, const sg_btensor *x, mm_job *j)
{
	memset(j, 0, sizeof(*j));
	j->cb = cb;
	if (w->layout == SG_CPU_LAYOUT_PANEL) /* packed for matmul alone (SG_LAYOUT_MATMUL_ONLY) */
		return sg_error(SG_ERR_UNSUPPORTED, "cpu %s: a weight bound for matmul only", op);
	sg_kt kt = sg_cpu_wview(w, &j->w);
	if (kt == SG_KT_NONE)
		return sg_error(SG_ERR_UNSUPPORTED, "cpu %s: weights of type %s [%lld] have no kernel", op,
				sg_type_name_cpu(w->type), (long long)w->ne[0]);
	sg_status st = sg_cpu_check_f32(op, "x", x);
	if (st) return st;
	if (x->ne[0] != w->ne[0])
		return sg_error(SG_ERR_INVALID_ARG, "cpu %s: x has %lld columns, weights %lld", op,
				(long long)x->ne[0], (long long)w->ne[0]);
	j->mv = cb->k->mv[kt];
	j->q8 = (cb->k->q8_mask >> kt) & 1;
	j->mvt = cb->verify_mt ? cb->k->mvt[kt] : NULL;
	if (j->q8 && !cb->int8_dot) { /* kill-switch: the f32 reference path */
		j->mv = sg_cpu_mv_ref;
		j->mvt = NULL;
		j->q8 = 0;
	}
	j->xl = sg_cpu_kt_info(kt)->xl;
	j->xoff = sg_cpu_kt_info(kt)->xoff;
	j->x = x->data;
	j->K = w->ne[0];
	j->nx = sg_btensor_rows(x);
	return SG_OK;
}

static sg_status mm_scratch(mm_job *j, size_t extra)
{
	j->xq_stride = j->q8 ? sg_xq_bytes(j->K) : 0;
	/* one token: a slot per thread (see mm_task) */
	int64_t slots = j->nx == 1 && !extra ? j->cb->nth : j->nx;
	size_t need = j->xq_stride * (size_t)slots + extra;
	uint8_t *mem = need ? sg_cpu_scratch(j->cb, need) : NULL;
	if (need && !mem) return sg_error(SG_ERR_NOMEM, "cpu matmul: %zu bytes of scratch", need);
	j->xq_mem = mem;
	if (extra) j->order = (int32_t *)(mem + j->xq_stride * (size_t)slots);
	return SG_OK;
}

static sg_status cpu_matmul(sg_backend *be, const sg_btensor *w, const sg_btensor *x, const sg_btensor *bias, sg_btensor *y)
{
	sg_cpu_backend *cb = (sg_cpu_backend *)be;
	if (w->layout == SG_CPU_LAYOUT_PANEL) return sg_cpu_matmul_panel(be, w, x, bias, y);
	mm_job j;
	sg_status st = mm_setup(cb, "matmul", w, x, &j);
	if (st) return st;
	if ((st = sg_cpu_check_f32("matmul", "y", y))) return st;
	j.N = sg_btensor_rows(w);
	if (y->ne[0] != j.N || sg_btensor_rows(y) != j.nx)
		return sg_error(SG_ERR_INVALID_ARG, "cpu matmul: y is [%lld][%lld], expected [%lld][%lld]",
				(long long)sg_btensor_rows(y), (long long)y->ne[0], (long long)j.nx, (long long)j.N);
	if (bias) {
		if ((st = sg_cpu_check_f32("matmul", "bias", bias))) return st;
		if (bias->ne[0] != j.N) return sg_error(SG_ERR_INVALID_ARG, "cpu matmul: bias has %lld values, expected %lld", (long long)bias->ne[0], (long long)j.N);
		j.bias = bias->data;
	}
	j.y = y->data;
	/* many tokens: the GEMM kernel when the set has one (8-bit types only with 8-bit activations) */
	sg_kt kt = j.w.kt;
	if (j.nx > 1 && cb->gemm && !cb->exact && cb->k->mm[kt] && (j.q8 || kt == SG_KT_F32 || kt == SG_KT_F16 || kt == SG_KT_BF16)) {
		j.mm = cb->gemm_packed && cb->k->mm_packed[kt] ? cb->k->mm_packed[kt] : cb->k->mm[kt];
		j.xoff = cb->k->mm_xoff[kt];
		atomic_init(&j.next, 0);
	}
	if ((st = mm_scratch(&j, 0))) return st;
	/* mm_task waits at a barrier only to share the quantization of many tokens */
	if (j.q8 && j.nx > 1) sg_threadpool_run(cb->pool, mm_task, &j);
	else sg_threadpool_run_any(cb->pool, mm_task, &j);
	return SG_OK;
}

/* --- grouped expert matmul --- */

static void moe_task(void *ctx, int ith, int nth)
{
	mm_job *j = ctx;
	int64_t slots = j->n * j->k;
	if (j->q8) mm_quantize(j, ith, nth);
	if (ith == 0) {
		/* counting sort of the slots by expert; invalid ids get zero rows */
		int32_t *cnt = j->start;
		memset(cnt, 0, sizeof(int32_t) * (size_t)(j->E + 1));
		for (int64_t s = 0; s < slots; s++) {
			int32_t e = j->ids[s];
			if (e >= 0 && e < j->E) cnt[e + 1]++;
			else memset(j->y + s * j->N, 0, sizeof(float) * (size_t)j->N);
		}
		for (int64_t e = 0; e < j->E; e++) cnt[e + 1] += cnt[e];
		int32_t *next = j->start + j->E + 1;
		memcpy(next, cnt, sizeof(int32_t) * (size_t)j->E);
		for (int64_t s = 0; s < slots; s++) { /* stable: a token's slots in increasing order */
			int32_t e = j->ids[s];
			if (e >= 0 && e < j->E) j->order[next[e]++] = (int32_t)s;
		}
	}
	sg_threadpool_barrier(j->cb->pool);
	int64_t r0, r1;
	row_range(j->N, ith, nth, &r0, &r1);
	sg_xq tmp;
	for (int64_t e = 0; e < j->E; e++) {
		int32_t b = j->start[e], en = j->start[e + 1];
		if (b == en) continue;
		sg_wview w = j->w;
		if (j->table) {
			/* the slot cache's copy of the expert: the same bytes as the stack's rows */
			w.data = j->table[e];
			if (!w.data) {
				for (int32_t i = b; i < en; i++)
					if (r1 > r0) memset(j->y + (int64_t)j->order[i] * j->N + r0, 0, sizeof(float) * (size_t)(r1 - r0));
				continue;
			}
		} else {
			w.data += (size_t)e * j->w_expert_bytes;
		}
		if (w.scales) {
			w.scales += (size_t)e * j->sb_expert_bytes;
			w.biases += (size_t)e * j->sb_expert_bytes;
		}
		for (int64_t rb = r0; rb < r1; rb += ROW_TILE) {
			int64_t re = rb + ROW_TILE < r1 ? rb + ROW_TILE : r1;
			for (int32_t i = b; i < en; i++) {
				int64_t s = j->order[i], xt = j->shared_x ? s / j->k : s;
				j->mv(&w, rb, re, x_arg(j, xt, &tmp), j->y + s * j->N + rb);
			}
		}
	}
}

static sg_status cpu_moe_matmul(sg_backend *be, const sg_btensor *w, const sg_btensor *x, const sg_btensor *ids, sg_btensor *y)
{
	sg_cpu_backend *cb = (sg_cpu_backend *)be;
	mm_job j;
	sg_status st = mm_setup(cb, "moe_matmul", w, x, &j);
	if (st) return st;
	if (!ids || ids->type != SG_TYPE_I32) return SG_FAIL(SG_ERR_INVALID_ARG, "ids must be I32");
	if ((st = sg_cpu_check_f32("moe_matmul", "y", y))) return st;
	j.k = ids->ne[0];
	j.n = sg_btensor_rows(ids);
	j.E = w->ne[2];
	j.N = w->ne[1];
	if (j.nx == j.n) j.shared_x = 1;
	else if (j.nx != j.n * j.k)
		return SG_FAIL(SG_ERR_INVALID_ARG, "x has %lld rows; expected n = %lld or n*k = %lld", (long long)j.nx, (long long)j.n, (long long)(j.n * j.k));
	if (y->ne[0] != j.N || sg_btensor_rows(y) != j.n * j.k)
		return SG_FAIL(SG_ERR_INVALID_ARG, "y is [%lld][%lld], expected [%lld][%lld]", (long long)sg_btensor_rows(y), (long long)y->ne[0], (long long)(j.n * j.k), (long long)j.N);
	if (w->experts) {
		if (!w->experts->data)
			return SG_FAIL(SG_ERR_UNSUPPORTED, "an expert table of device slots (this backend reads host memory)");
		if (w->experts->n_expert != j.E || w->type == SG_TYPE_MLX_AFFINE)
			return SG_FAIL(SG_ERR_INVALID_ARG, "expert table of %lld experts for a %s stack of %lld",
				       (long long)w->experts->n_expert, sg_type_name_cpu(w->type), (long long)j.E);
		j.table = (const uint8_t *const *)w->experts->data;
	}
	j.ids = ids->data;
	j.y = y->data;
	j.w_expert_bytes = (size_t)j.N * w->row_bytes;
	j.sb_expert_bytes = (size_t)j.N * j.w.sb_row_bytes;
	size_t extra = sizeof(int32_t) * (size_t)(j.n * j.k + 2 * (j.E + 1));
	if ((st = mm_scratch(&j, extra))) return st;
	j.start = j.order + j.n * j.k;
	sg_threadpool_run(cb->pool, moe_task, &j);
	return SG_OK;
}

/* --- embedding --- */

typedef struct {
	sg_wview w;
	const int32_t *ids;
	int64_t n, V, D;
	float *out;
	int bad;
} embed_job;

static void embed_range(void *ctx, int64_t b, int64_t e, int ith)
{
	embed_job *j = ctx;
	for (int64_t t = b; t < e; t++) {
		int32_t id = j->ids[t];
		if (id < 0 || id >= j->V) {
			memset(j->out + t * j->D, 0, sizeof(float) * (size_t)j->D);
			j->bad = 1;
			continue;
		}
		sg_cpu_dequant_row_ref(&j->w, id, 0, j->D, j->out + t * j->D);
	}
}

static sg_status cpu_embed(sg_backend *be, const sg_btensor *w, const sg_btensor *ids, sg_btensor *out)
{
	sg_cpu_backend *cb = (sg_cpu_backend *)be;
	embed_job j = {0};
	if (sg_cpu_wview(w, &j.w) == SG_KT_NONE) return SG_FAIL(SG_ERR_UNSUPPORTED, "type %s", sg_type_name_cpu(w->type));
	if (!ids || ids->type != SG_TYPE_I32) return SG_FAIL(SG_ERR_INVALID_ARG, "ids must be I32");
	sg_status st = sg_cpu_check_f32("embed", "out", out);
	if (st) return st;
	j.n = sg_btensor_rows(ids) * ids->ne[0];
	j.V = sg_btensor_rows(w);
	j.D = w->ne[0];
	if (out->ne[0] != j.D || sg_btensor_rows(out) != j.n)
		return SG_FAIL(SG_ERR_INVALID_ARG, "out is [%lld][%lld], expected [%lld][%lld]", (long long)sg_btensor_rows(out), (long long)out->ne[0], (long long)j.n, (long long)j.D);
	j.ids = ids->data;
	j.out = out->data;
	sg_parallel_for(cb->pool, j.n, 1, embed_range, &j);
	if (j.bad) return SG_FAIL(SG_ERR_RANGE, "a token id is outside [0, %lld)", (long long)j.V);
	return SG_OK;
}

/* --- table --- */

static int cpu_supports(sg_backend *be, sg_stage stage, sg_type type)
{
	switch (stage) {
	case SG_STAGE_EMBED:
	case SG_STAGE_MATMUL:
	case SG_STAGE_MOE_MATMUL: {
		sg_btensor t = {.type = type, .ne = {256, 1, 1, 1}, .data = (void *)1,
				.mlx = {4, 64, SG_TYPE_BF16}, .scales = (void *)1, .biases = (void *)1};
		sg_wview v;
		return sg_cpu_wview(&t, &v) != SG_KT_NONE;
	}
	case SG_STAGE_KV_STORE:
	case SG_STAGE_ATTENTION: return type == SG_TYPE_F32 || type == SG_TYPE_F16;
	case SG_STAGE_ATTN_PREP: return type == SG_TYPE_F32 || type == SG_TYPE_F16;
	case SG_STAGE_LINEAR_ATTN: return type == SG_TYPE_F32;
	case SG_STAGE_COUNT: return 0;
	default: return type == SG_TYPE_F32;
	}
}

static void cpu_destroy(sg_backend *be)
{
	sg_cpu_backend *cb = (sg_cpu_backend *)be;
	sg_threadpool_free(cb->pool);
	for (int i = 0; i < SG_CPU_CACHE_SLOTS; i++) free(cb->idle[i].p);
	pthread_mutex_destroy(&cb->cache_mu);
	sg_free(cb->scratch_raw);
	sg_free(cb);
}

/* The CPU's tensors are host memory (the process footprint covers them), its KV cache F32, a
 * prefill chunk 256 tokens (its GEMM tiles need no more to reach their speed), and nothing to record. */
static void cpu_caps(sg_backend *be, sg_backend_caps *out)
{
	const sg_cpu_backend *cb = (const sg_cpu_backend *)be;
	memset(out, 0, sizeof *out);
	out->prefill_chunk = 256;
	out->expert_table = 1;
	snprintf(out->device, sizeof out->device, "CPU, %d thread%s, %s kernels", cb->nth, cb->nth == 1 ? "" : "s",
		 cb->k->name);
}

/* match_decode: many tokens take the one-token kernels (see cpu_matmul, sg_cpu_attention and
 * sg_cpu_gated_delta), the weights still read once per tile of tokens. */
static void cpu_match_decode(sg_backend *be, int on) { ((sg_cpu_backend *)be)->exact = on != 0; }

static const sg_backend_ops cpu_ops = {
	.name = "cpu",
	.destroy = cpu_destroy,
	.supports = cpu_supports,
	.tensor_alloc = cpu_tensor_alloc,
	.tensor_bind = cpu_tensor_bind,
	.tensor_free = cpu_tensor_free,
	.write = cpu_write,
	.read = cpu_read,
	.copy = cpu_copy,
	.sync = cpu_sync,
	.embed = cpu_embed,
	.matmul = cpu_matmul,
	.rmsnorm = sg_cpu_rmsnorm,
	.layernorm = sg_cpu_layernorm,
	.rope = sg_cpu_rope,
	.kv_store = sg_cpu_kv_store,
	.attn_prep = NULL, /* the composition is as fast on the CPU */
	.attention = sg_cpu_attention,
	.glu = sg_cpu_glu,
	.add = sg_cpu_add,
	.scale = sg_cpu_scale,
	.softcap = sg_cpu_softcap,
	.softmax = sg_cpu_softmax,
	.moe_route = sg_cpu_moe_route,
	.moe_matmul = cpu_moe_matmul,
	.moe_combine = sg_cpu_moe_combine,
	.argmax = sg_cpu_argmax,
	.short_conv = sg_cpu_short_conv,
	.gated_delta = sg_cpu_gated_delta,
	.gated_rmsnorm = sg_cpu_gated_rmsnorm,
	.sigmoid_mul = sg_cpu_sigmoid_mul,
	.gather_cols = sg_cpu_gather_cols,
	.glu_split = sg_cpu_glu_split,
	.moe_weight_scale = sg_cpu_moe_weight_scale,
	.conv1d = sg_cpu_conv1d,
	.conv_transpose1d = sg_cpu_conv_transpose1d,
	.snake = sg_cpu_snake,
	.gelu = sg_cpu_gelu,
	.tanh_gate = sg_cpu_tanh_gate,
	.match_decode = cpu_match_decode,
	.caps = cpu_caps,
};

sg_cpu_params sg_cpu_default_params(void)
{
	sg_cpu_params p = {0, NULL};
	return p;
}

sg_status sg_cpu_backend_create(const sg_cpu_params *p, sg_backend **out)
{
	*out = NULL;
	sg_cpu_params d = sg_cpu_default_params();
	if (!p) p = &d;
	const char *simd = p->simd ? p->simd : sg_flag_str("SARAGOSSA_SIMD");
	const char *why;
	const sg_cpu_kernels *k = sg_cpu_kernels_pick(simd, &why);
	if (!k) return SG_FAIL(SG_ERR_UNSUPPORTED, "SIMD level '%s' %s on this CPU (%s)", simd, why, sg_cpu_model_name());
	sg_cpu_backend *cb = sg_calloc(1, sizeof(*cb));
	if (!cb) return SG_FAIL(SG_ERR_NOMEM, "backend");
	cb->base.ops = &cpu_ops;
	cb->k = k;
	cb->int8_dot = sg_flag_bool("SARAGOSSA_CPU_INT8_DOT");
	cb->attn_split_kv = sg_flag_bool("SARAGOSSA_CPU_ATTN_SPLIT_KV");
	cb->gemm = sg_flag_bool("SARAGOSSA_CPU_GEMM");
	cb->gemm_packed = sg_flag_bool("SARAGOSSA_CPU_GEMM_PACKED");
	cb->gemm_panel = sg_flag_bool("SARAGOSSA_CPU_GEMM_PANEL");
	cb->tensor_cache = sg_flag_bool("SARAGOSSA_CPU_TENSOR_CACHE");
	pthread_mutex_init(&cb->cache_mu, NULL);
	cb->gemm_split_tokens = sg_flag_bool("SARAGOSSA_CPU_GEMM_SPLIT_TOKENS");
	cb->verify_mt = sg_flag_bool("SARAGOSSA_CPU_VERIFY_MT");
	cb->mlx_repack = (int)sg_flag_int("SARAGOSSA_CPU_MLX_REPACK");
	cb->conv_packed = sg_flag_bool("SARAGOSSA_CPU_CONV_PACKED");
	cb->gate_simd = sg_flag_bool("SARAGOSSA_CPU_GATE_SIMD");
	cb->softmax_simd = sg_flag_bool("SARAGOSSA_CPU_SOFTMAX_SIMD");
	pthread_once(&pf_once, pf_init);
	sg_status st = sg_threadpool_create(p->n_threads, &cb->pool);
	if (st) {
		pthread_mutex_destroy(&cb->cache_mu);
		sg_free(cb);
		return st;
	}
	cb->nth = sg_threadpool_size(cb->pool);
	*out = &cb->base;
	return SG_OK;
}

const char *sg_cpu_backend_simd(const sg_backend *be) { return ((const sg_cpu_backend *)be)->k->name; }
int sg_pf_hint = 0;
