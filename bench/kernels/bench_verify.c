/*
 * Kernel bench bed for the verify step's matvec: T tokens through the one-token path of a Q4_K or
 * Q6_K weight, as cpu_backend.c's mm_task runs it (tiles of 16 rows, every token of the step
 * passing a tile while it is hot), one thread, weights from a pool larger than the last-level
 * cache so each call reads them from DRAM, as a decode step does.
 *
 * Variants: v0 = mv one token a call, tg = mvt in groups of g tokens (the last group smaller).
 * Prints ms per step (best of the rounds) and the cost of a step in one-token steps (the mv time of
 * one token), and checks every variant's outputs against mv's bits. Software prefetch is off
 * (sg_cpu_pf_dist 0) for every variant alike.
 *
 * usage: bench_verify [--rounds N] [--hot]
 * build: as bench/run.sh builds bench_matvec, with this file: after `make`,
 *   cc -std=c17 -D_GNU_SOURCE -O2 -Iinclude -Isrc -pthread bench/kernels/bench_verify.c \
 *      -o build/bench/bench_verify build/libsaragossa.a $(the LIBS line of bench/run.sh)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "base/timer.h"

#define TEST_RNG_SEED 0x9e3779b97f4a7c15ull
#include "../../tests/unit/test_rng.h" /* rnd(), frand(): the unit tests' xorshift, same seed as before */

#define POOL_BYTES (96u << 20)
#define TILE 16

typedef struct {
	const sg_cpu_kernels *k;
	sg_wview w;
	int64_t N;
	const void *x[32];
	float *y[32];
} ctx;

/* One step of T tokens over all rows: variant 0 (mv), else mvt in groups of v. */
static void step(const ctx *c, int T, int v)
{
	for (int64_t rb = 0; rb < c->N; rb += TILE) {
		int64_t re = rb + TILE < c->N ? rb + TILE : c->N;
		int t = 0;
		if (v > 0)
			for (; t < T;) {
				int n = T - t < v ? T - t : v;
				float *ys[SG_MVT_MAX];
				for (int u = 0; u < n; u++) ys[u] = c->y[t + u] + rb;
				c->k->mvt[c->w.kt](&c->w, rb, re, n, c->x + t, ys);
				t += n;
			}
		for (; t < T; t++) c->k->mv[c->w.kt](&c->w, rb, re, c->x[t], c->y[t] + rb);
	}
}

int main(int argc, char **argv)
{
	int rounds = 5, hot = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
		if (!strcmp(argv[i], "--hot")) hot = 1; /* 128 rows, one copy: in L2, the compute ceiling */
	}
	const char *why = NULL;
	const sg_cpu_kernels *k = sg_cpu_kernels_pick("auto", &why);
	if (!k || !k->mvt[SG_KT_Q4_K]) {
		fprintf(stderr, "no multi-token kernels in this kernel set\n");
		return 1;
	}
	sg_cpu_pf_dist = 0;
	static const struct { sg_kt kt; int bb; int64_t N, K; } shapes[] = {
		{SG_KT_Q4_K, 144, 8960, 1536}, {SG_KT_Q4_K, 144, 1536, 8960}, {SG_KT_Q6_K, 210, 1536, 8960}, {SG_KT_Q6_K, 210, 8960, 1536},
	};
	static const int Ts[] = {1, 4, 8, 16};
	static const int vs[] = {0, 2, 3, 4, 6, 8};
	printf("kernel set %s, 1 thread, ms per step (best of %d), in one-token mv steps\n", k->name, rounds);
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		int64_t N = hot ? 128 : shapes[s].N;
		size_t rb = (size_t)(shapes[s].K / 256) * (size_t)shapes[s].bb, mb = rb * (size_t)N;
		int ncopy = hot ? 1 : (int)(POOL_BYTES / mb) + 1;
		uint8_t *pool = aligned_alloc(64, (mb * (size_t)ncopy + 63) / 64 * 64);
		for (size_t i = 0; i < mb * (size_t)ncopy; i++) pool[i] = (uint8_t)rnd();
		/* sane f16 scales: 1/64 and 1/128 */
		for (size_t o = 0; o < mb * (size_t)ncopy; o += (size_t)shapes[s].bb) {
			if (shapes[s].kt == SG_KT_Q4_K) {
				pool[o] = 0x00, pool[o + 1] = 0x24, pool[o + 2] = 0x00, pool[o + 3] = 0x20;
			} else {
				pool[o + 208] = 0x00, pool[o + 209] = 0x24;
			}
		}
		ctx c = {.k = k, .N = N};
		c.w = (sg_wview){.kt = shapes[s].kt, .K = shapes[s].K, .row_bytes = rb};
		size_t xb = sg_xq_bytes(shapes[s].K);
		uint8_t *xm = aligned_alloc(64, xb * 16);
		float *xf = malloc(sizeof(float) * (size_t)shapes[s].K);
		sg_xq xq[16];
		float *yref[16];
		for (int t = 0; t < 16; t++) {
			for (int64_t i = 0; i < shapes[s].K; i++) xf[i] = (float)rnd() / 4294967296.0f * 2.0f - 1.0f;
			sg_xq_init(&xq[t], shapes[s].K, xm + xb * (size_t)t);
			const sg_kt_info *in = sg_cpu_kt_info(shapes[s].kt);
			k->quantize_x(xf, shapes[s].K, in->xl, in->xoff, &xq[t]);
			c.x[t] = &xq[t];
			c.y[t] = malloc(sizeof(float) * (size_t)N);
			yref[t] = malloc(sizeof(float) * (size_t)N);
		}
		double one = 0;
		for (size_t ti = 0; ti < sizeof(Ts) / sizeof(Ts[0]); ti++) {
			int T = Ts[ti];
			printf("%s %lldx%lld T=%2d:", sg_cpu_kt_info(shapes[s].kt)->name, (long long)N, (long long)shapes[s].K, T);
			for (size_t vi = 0; vi < sizeof(vs) / sizeof(vs[0]); vi++) {
				int v = vs[vi];
				double best = 1e30;
				for (int r = 0; r < rounds * (hot ? 20 : 1); r++) {
					c.w.data = pool + mb * (size_t)(r % ncopy);
					double t0 = sg_time_s();
					step(&c, T, v);
					double dt = sg_time_s() - t0;
					if (dt < best) best = dt;
					if (v == 0 && r == rounds * (hot ? 20 : 1) - 1)
						for (int t = 0; t < T; t++) memcpy(yref[t], c.y[t], sizeof(float) * (size_t)c.N);
					if (r == rounds * (hot ? 20 : 1) - 1 && v)
						for (int t = 0; t < T; t++)
							if (memcmp(yref[t], c.y[t], sizeof(float) * (size_t)c.N)) printf(" [BITS DIFFER t%d]", t);
				}
				if (ti == 0 && vi == 0) one = best / T;
				printf("  %s%d %.3fms (%.2f)", v == 0 ? "v" : "t", v, best * 1e3, best / one);
			}
			printf("\n");
		}
		for (int t = 0; t < 16; t++) free(c.y[t]), free(yref[t]);
		free(xm), free(xf), free(pool);
	}
	return 0;
}
