/*
 * Kernel bench bed for the CPU backend's weight kernels.
 *
 * For each weight type: decode matvec (one token) at 4096x4096 and 4096x14336 (rows x columns),
 * reporting GB/s of weights read and the percentage of this machine's read bandwidth, measured
 * in the same run by a streaming read of a buffer far larger than the last-level cache; and the
 * prefill GEMM (128 tokens) in GFLOP/s per CPU time, with the GEMM kernels and with them switched
 * off (the one-token kernel per token, SARAGOSSA_CPU_GEMM=0), so the two compare under one load.
 *
 * Cold vs hot: the matvec is timed over many copies of the matrix laid out in a pool larger than
 * the last-level cache and used in turn, so every call reads its weights from DRAM, as a decode
 * step does for a model larger than the cache. "hot" repeats one copy (cache-resident): the
 * kernel's compute ceiling. Other processes may share the cores: each figure is the best of
 * several rounds, and a run should be repeated before a number is trusted.
 *
 * usage: bench_matvec [--threads N] [--quick] [--only TYPE-SUBSTRING] [--markdown FILE]
 *        bench_matvec --read-bw [--threads N]   only the streaming read: one line, "read_bw WALL CPU" (GB/s)
 */
#include <math.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_internal.h"
#include "base/sysinfo.h"
#include "base/threadpool.h"
#include "base/timer.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define READ_TARGET __attribute__((target("avx2")))
#else
#define READ_TARGET
#endif

#define TEST_RNG_SEED 0x9e3779b97f4a7c15ull
#include "../../tests/unit/test_rng.h" /* rnd(), frand(): the unit tests' xorshift, same seed as before */

/* Process CPU time (user + system, all threads), seconds. On a machine whose cores are shared
 * with other work, wall time over-counts; CPU time divided by the thread count is the time the
 * bench's threads actually ran, which gives a second, contention-corrected rate. */
static double cpu_now(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

static int g_nth = 2;
static sg_backend *g_be;

/* Best rate of the rounds, by wall time (*wall) and by CPU time per thread (*cpu). */
typedef struct {
	double wall, cpu;
} rate;

/* --- read bandwidth --- */

typedef struct {
	const uint8_t *buf;
	size_t bytes;
	uint64_t sink[64];
} bw_job;

READ_TARGET static uint64_t read_range(const uint8_t *p, size_t n)
{
#if defined(__x86_64__)
	__m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
	for (size_t i = 0; i + 128 <= n; i += 128) {
		a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(p + i)));
		a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
		a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
		a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
	}
	a0 = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
	return (uint64_t)_mm256_extract_epi64(a0, 0) ^ (uint64_t)_mm256_extract_epi64(a0, 3);
#else
	uint64_t s = 0;
	for (size_t i = 0; i + 8 <= n; i += 8) s ^= *(const uint64_t *)(p + i);
	return s;
#endif
}

static void bw_task(void *ctx, int ith, int nth)
{
	bw_job *j = ctx;
	size_t per = j->bytes / (size_t)nth / 4096 * 4096;
	j->sink[ith] = read_range(j->buf + per * (size_t)ith, per);
}

static rate measure_bw(sg_threadpool *pool, size_t bytes)
{
	uint8_t *buf = aligned_alloc(4096, bytes);
	for (size_t i = 0; i < bytes; i += 8) *(uint64_t *)(buf + i) = i * 0x9e3779b97f4a7c15ull;
	bw_job j = {buf, bytes, {0}};
	rate best = {0, 0};
	for (int r = 0; r < 7; r++) {
		uint64_t t0 = sg_time_ns();
		double c0 = cpu_now();
		sg_threadpool_run(pool, bw_task, &j);
		double w = (double)(sg_time_ns() - t0) * 1e-9, c = (cpu_now() - c0) / g_nth;
		if (bytes / w / 1e9 > best.wall) best.wall = bytes / w / 1e9;
		if (c > 0 && bytes / c / 1e9 > best.cpu) best.cpu = bytes / c / 1e9;
	}
	free(buf);
	return best;
}

/* --- weights --- */

typedef struct {
	const char *name;
	sg_type type;
	int bits, group;
} wtype;

static const wtype types[] = {
	{"F32", SG_TYPE_F32, 0, 0},       {"F16", SG_TYPE_F16, 0, 0},       {"BF16", SG_TYPE_BF16, 0, 0},
	{"Q8_0", SG_TYPE_Q8_0, 0, 0},     {"Q6_K", SG_TYPE_Q6_K, 0, 0},     {"Q5_K", SG_TYPE_Q5_K, 0, 0},
	{"Q5_0", SG_TYPE_Q5_0, 0, 0},     {"Q5_1", SG_TYPE_Q5_1, 0, 0},     {"Q4_K", SG_TYPE_Q4_K, 0, 0},
	{"Q4_0", SG_TYPE_Q4_0, 0, 0},     {"Q4_1", SG_TYPE_Q4_1, 0, 0},     {"IQ4_NL", SG_TYPE_IQ4_NL, 0, 0},
	{"IQ4_XS", SG_TYPE_IQ4_XS, 0, 0}, {"Q3_K", SG_TYPE_Q3_K, 0, 0},     {"Q2_K", SG_TYPE_Q2_K, 0, 0},
	{"MLX8 g64", SG_TYPE_MLX_AFFINE, 8, 64}, {"MLX6 g64", SG_TYPE_MLX_AFFINE, 6, 64},
	{"MLX5 g64", SG_TYPE_MLX_AFFINE, 5, 64}, {"MLX4 g32", SG_TYPE_MLX_AFFINE, 4, 32},
	{"MLX4 g64", SG_TYPE_MLX_AFFINE, 4, 64}, {"MLX4 g128", SG_TYPE_MLX_AFFINE, 4, 128},
	{"MLX3 g64", SG_TYPE_MLX_AFFINE, 3, 64}, {"MLX2 g64", SG_TYPE_MLX_AFFINE, 2, 64},
};
#define N_TYPES ((int)(sizeof(types) / sizeof(types[0])))

/* f16 scale fields per block (GGUF layouts), set to small sane values */
static void fix_scales(sg_type t, uint8_t *m, size_t bytes, size_t bb)
{
	int off[2] = {0, 2}, nf = 1;
	switch (t) {
	case SG_TYPE_Q4_1: case SG_TYPE_Q5_1: case SG_TYPE_Q4_K: case SG_TYPE_Q5_K: nf = 2; break;
	case SG_TYPE_Q2_K: nf = 2; off[0] = 80; off[1] = 82; break;
	case SG_TYPE_Q3_K: off[0] = 108; break;
	case SG_TYPE_Q6_K: off[0] = 208; break;
	default: break;
	}
	for (size_t b = 0; b + bb <= bytes; b += bb)
		for (int f = 0; f < nf; f++) {
			uint16_t h = sg_cpu_f32_to_f16(0.01f * (1 + 0.5f * frand()));
			memcpy(m + b + off[f], &h, 2);
		}
}

typedef struct {
	sg_btensor t;      /* copy 0 */
	uint8_t *pool;     /* copies of data, then scales, then biases, one after another */
	size_t w_bytes, sb_bytes, copy_bytes;
	int copies;
	int packed; /* the backend repacked the weights at bind (MLX 4-bit): one buffer per copy */
} wset;

static size_t block_bytes_of(sg_type t)
{
	sg_btensor x = {.type = t, .ne = {256, 1, 1, 1}, .data = (void *)1};
	sg_wview v;
	sg_kt kt = sg_cpu_wview(&x, &v);
	return sg_cpu_row_bytes(&x) / (size_t)(256 / sg_cpu_kt_info(kt)->block);
}

static int make_wset(const wtype *wt, int64_t N, int64_t K, size_t pool_bytes, wset *ws)
{
	memset(ws, 0, sizeof(*ws));
	sg_btensor *t = &ws->t;
	t->type = wt->type;
	t->ne[0] = K;
	t->ne[1] = N;
	t->ne[2] = t->ne[3] = 1;
	t->data = (void *)1;
	if (wt->type == SG_TYPE_MLX_AFFINE) {
		t->mlx = (sg_mlx_q){wt->bits, wt->group, SG_TYPE_BF16};
		t->scales = t->biases = (void *)1;
		ws->sb_bytes = (size_t)(N * K / wt->group) * 2;
	}
	size_t rb = sg_cpu_row_bytes(t);
	if (!rb) return -1;
	t->row_bytes = rb;
	ws->w_bytes = rb * (size_t)N;
	ws->copy_bytes = (ws->w_bytes + 2 * ws->sb_bytes + 4095) / 4096 * 4096;
	ws->copies = (int)(pool_bytes / ws->copy_bytes);
	if (ws->copies < 2) ws->copies = 2;
	ws->pool = aligned_alloc(4096, ws->copy_bytes * (size_t)ws->copies);
	if (!ws->pool) return -1;
	uint8_t *m = ws->pool;
	if (wt->type == SG_TYPE_F32) {
		for (size_t i = 0; i < ws->w_bytes / 4; i++) ((float *)m)[i] = frand();
	} else if (wt->type == SG_TYPE_F16 || wt->type == SG_TYPE_BF16) {
		for (size_t i = 0; i < ws->w_bytes / 2; i++) ((uint16_t *)m)[i] = wt->type == SG_TYPE_F16 ? sg_cpu_f32_to_f16(frand()) : 0x3c00 + (rnd() & 0x7f);
	} else {
		for (size_t i = 0; i < ws->w_bytes; i += 4) {
			uint32_t r = rnd();
			memcpy(m + i, &r, ws->w_bytes - i < 4 ? ws->w_bytes - i : 4);
		}
		if (wt->type != SG_TYPE_MLX_AFFINE) fix_scales(wt->type, m, ws->w_bytes, block_bytes_of(wt->type));
	}
	if (ws->sb_bytes) {
		uint16_t *s = (uint16_t *)(m + ws->w_bytes), *b = (uint16_t *)(m + ws->w_bytes + ws->sb_bytes);
		for (size_t i = 0; i < ws->sb_bytes / 2; i++) {
			s[i] = 0x3c23; /* bf16 0.01 */
			b[i] = 0xbc23;
		}
	}
	if (ws->sb_bytes) {
		/* bind as a model load does: the backend may repack (SARAGOSSA_CPU_MLX_REPACK); the
		 * repacked rows hold the same bytes in all, so they take the place of copy 0 */
		sg_btensor b = *t;
		b.data = m;
		b.scales = m + ws->w_bytes;
		b.biases = m + ws->w_bytes + ws->sb_bytes;
		b.row_bytes = 0;
		if (g_be->ops->tensor_bind(g_be, &b) == SG_OK && b.owned) {
			memcpy(m, b.data, b.row_bytes * (size_t)N);
			t->row_bytes = b.row_bytes;
			ws->packed = 1;
			g_be->ops->tensor_free(g_be, &b);
		}
	}
	for (int c = 1; c < ws->copies; c++) memcpy(ws->pool + (size_t)c * ws->copy_bytes, ws->pool, ws->copy_bytes);
	return 0;
}

static sg_btensor copy_at(const wset *ws, int c)
{
	sg_btensor t = ws->t;
	uint8_t *base = ws->pool + (size_t)c * ws->copy_bytes;
	t.data = base;
	if (ws->packed) {
		t.scales = t.biases = base; /* inline in the rows */
	} else if (ws->sb_bytes) {
		t.scales = base + ws->w_bytes;
		t.biases = base + ws->w_bytes + ws->sb_bytes;
	}
	return t;
}

/* Seconds per call: best round by wall time and by CPU time per thread. */
static rate time_matvec(sg_backend *be, const wset *ws, sg_btensor *x, sg_btensor *y, int cold, int rounds)
{
	rate best = {1e30, 1e30};
	int reps = cold ? ws->copies : 8;
	if (reps < 4) reps = 4;
	for (int r = 0; r < rounds; r++) {
		uint64_t t0 = sg_time_ns();
		double c0 = cpu_now();
		for (int i = 0; i < reps; i++) {
			sg_btensor w = copy_at(ws, cold ? i % ws->copies : 0);
			be->ops->matmul(be, &w, x, NULL, y);
		}
		double s = (double)(sg_time_ns() - t0) * 1e-9 / reps, c = (cpu_now() - c0) / g_nth / reps;
		if (s < best.wall) best.wall = s;
		if (c > 0 && c < best.cpu) best.cpu = c;
	}
	return best;
}

int main(int argc, char **argv)
{
	int nth = 2, quick = 0, bw_only = 0;
	const char *md = NULL, *only = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--threads") && i + 1 < argc) nth = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--quick")) quick = 1;
		else if (!strcmp(argv[i], "--markdown") && i + 1 < argc) md = argv[++i];
		else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
		else if (!strcmp(argv[i], "--read-bw")) bw_only = 1;
	}
	sg_backend *be;
	sg_cpu_params p = {nth, NULL};
	if (sg_cpu_backend_create(&p, &be) != SG_OK) {
		fprintf(stderr, "bench: cannot create the CPU backend\n");
		return 1;
	}
	g_nth = nth;
	g_be = be;
	sg_threadpool *pool;
	sg_threadpool_create(nth, &pool);
	char feat[256];
	sg_cpu_features_str(feat, sizeof(feat));
	size_t big = (size_t)(quick ? 512 : 1024) << 20;
	rate bwr = measure_bw(pool, big);
	double bw = bwr.wall;
	if (bw_only) {
		printf("read_bw %.2f %.2f\n", bwr.wall, bwr.cpu);
		sg_threadpool_free(pool);
		sg_backend_free(be);
		return 0;
	}
	size_t wpool = (size_t)(quick ? 384 : 768) << 20;

	/* per-call cost of a tiny matvec (64 x 4096 Q4_0, cache-resident): the threadpool hand-off,
	 * the activation quantization and the barrier, which every decode op pays */
	double call_us = 0;
	{
		wset ws;
		wtype q4 = {"Q4_0", SG_TYPE_Q4_0, 0, 0};
		make_wset(&q4, 64, 4096, 0, &ws);
		sg_btensor x, y;
		int64_t nx[4] = {4096, 1, 1, 1}, ny[4] = {64, 1, 1, 1};
		be->ops->tensor_alloc(be, SG_TYPE_F32, nx, &x);
		be->ops->tensor_alloc(be, SG_TYPE_F32, ny, &y);
		sg_btensor w0 = copy_at(&ws, 0);
		double best = 1e30;
		for (int r = 0; r < 5; r++) {
			uint64_t t0 = sg_time_ns();
			for (int i = 0; i < 2000; i++) be->ops->matmul(be, &w0, &x, NULL, &y);
			double us = (double)(sg_time_ns() - t0) / 2000 / 1e3;
			if (us < best) best = us;
		}
		call_us = best;
		be->ops->tensor_free(be, &x);
		be->ops->tensor_free(be, &y);
		free(ws.pool);
	}

	FILE *out = md ? fopen(md, "w") : NULL;
	char head[1024];
	snprintf(head, sizeof(head),
		 "CPU: %s (%s), %d threads, kernels: %s\n"
		 "Read bandwidth (streaming read of %zu MiB, best of 7): %.1f GB/s by wall time, %.1f GB/s by CPU time\n"
		 "(the cores are shared with other work when the two differ; the *cpu* columns divide by the time the\n"
		 "bench's threads actually ran, and compare with the CPU-time bandwidth)\n"
		 "Per-call cost of a tiny matvec (64x4096 Q4_0, cache-resident): %.1f us\n",
		 sg_cpu_model_name(), feat, nth, sg_cpu_backend_simd(be), big >> 20, bw, bwr.cpu, call_us);
	printf("%s\n", head);
	const char *cols = "| type | matvec shape | weights MB | cold GB/s | % of read bw | cold GB/s (cpu) | % of read bw (cpu) | hot GB/s (cpu) | GEMM 4096x4096x128 GFLOP/s (cpu) | per-token loop GFLOP/s (cpu) |\n"
			   "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
	printf("%s", cols);
	if (out) fprintf(out, "%s\n%s", head, cols);

	static const int64_t shapes[2][2] = {{4096, 4096}, {4096, 14336}};
	for (int ti = 0; ti < N_TYPES; ti++) {
		if (only && !strstr(types[ti].name, only)) continue;
		for (int s = 0; s < 2; s++) {
			int64_t N = shapes[s][0], K = shapes[s][1];
			wset ws;
			if (make_wset(&types[ti], N, K, wpool, &ws)) {
				printf("| %s | %lldx%lld | skipped |\n", types[ti].name, (long long)N, (long long)K);
				continue;
			}
			sg_btensor x, y;
			int64_t nx[4] = {K, 1, 1, 1}, ny[4] = {N, 1, 1, 1};
			be->ops->tensor_alloc(be, SG_TYPE_F32, nx, &x);
			be->ops->tensor_alloc(be, SG_TYPE_F32, ny, &y);
			for (int64_t i = 0; i < K; i++) ((float *)x.data)[i] = frand();
			double mb = (double)(ws.w_bytes + 2 * ws.sb_bytes) / 1e6;
			rate tc = time_matvec(be, &ws, &x, &y, 1, quick ? 2 : 3);
			rate th = time_matvec(be, &ws, &x, &y, 0, quick ? 2 : 3);
			double gc = mb / 1e3 / tc.wall, gcc = mb / 1e3 / tc.cpu, ghc = mb / 1e3 / th.cpu;
			char gemm[32] = "", loop[32] = "";
			if (s == 0) {
				int64_t nt = 128;
				sg_btensor xg, yg;
				int64_t nxg[4] = {K, nt, 1, 1}, nyg[4] = {N, nt, 1, 1};
				be->ops->tensor_alloc(be, SG_TYPE_F32, nxg, &xg);
				be->ops->tensor_alloc(be, SG_TYPE_F32, nyg, &yg);
				for (int64_t i = 0; i < K * nt; i++) ((float *)xg.data)[i] = frand();
				sg_btensor w0 = copy_at(&ws, 0);
				sg_cpu_backend *cb = (sg_cpu_backend *)be;
				for (int g = 1; g >= 0; g--) {
					cb->gemm = g;
					double best = 1e30;
					for (int r = 0; r < (quick ? 1 : 2); r++) {
						double c0 = cpu_now();
						be->ops->matmul(be, &w0, &xg, NULL, &yg);
						double sec = (cpu_now() - c0) / g_nth;
						if (sec > 0 && sec < best) best = sec;
					}
					snprintf(g ? gemm : loop, sizeof(gemm), "%.1f", 2.0 * (double)N * (double)K * (double)nt / best / 1e9);
				}
				cb->gemm = 1;
				be->ops->tensor_free(be, &xg);
				be->ops->tensor_free(be, &yg);
			}
			char line[512];
			snprintf(line, sizeof(line), "| %s | %lldx%lld | %.1f | %.1f | %.0f%% | %.1f | %.0f%% | %.1f | %s | %s |\n", types[ti].name,
				 (long long)N, (long long)K, mb, gc, 100 * gc / bw, gcc, 100 * gcc / bwr.cpu, ghc, gemm, loop);
			printf("%s", line);
			fflush(stdout);
			if (out) fputs(line, out);
			be->ops->tensor_free(be, &x);
			be->ops->tensor_free(be, &y);
			free(ws.pool);
		}
	}
	if (out) fclose(out);
	sg_threadpool_free(pool);
	sg_backend_free(be);
	return 0;
}
