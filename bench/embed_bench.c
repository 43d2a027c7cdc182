/* Sentence-embedding throughput through the public API: the sentences of a file (one per line)
 * embedded one call per sentence (batch 1: latency) and in calls of B sentences (throughput), best
 * of R rounds each, after one warm-up; prints sentences per second and the first sentences'
 * vectors (so a peer's output can be compared).
 *
 *   build/bench/embed_bench MODEL SENTENCES.txt [BACKEND] [B] [R] [OUT.f32]
 *
 * OUT.f32 gets every sentence's vector (float32, row-major) for a cosine check against a peer.
 * A negative B runs only the calls of |B| sentences (a profiler's run: no one-sentence calls).
 * bench/embed_gpu.py builds and runs it beside sentence-transformers on a GPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "saragossa.h"

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: embed_bench MODEL SENTENCES.txt [BACKEND] [B] [R] [OUT.f32]\n");
		return 2;
	}
	const char *backend = argc > 3 ? argv[3] : "auto";
	int B = argc > 4 ? atoi(argv[4]) : 64, R = argc > 5 ? atoi(argv[5]) : 3, only_batches = B < 0;
	if (B < 0) B = -B;
	FILE *f = fopen(argv[2], "rb");
	if (!f || B < 1 || R < 1) {
		fprintf(stderr, "embed_bench: bad arguments\n");
		return 2;
	}
	static char buf[1 << 22];
	size_t len = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[len] = 0;
	const char *texts[8192];
	size_t n = 0;
	for (char *s = strtok(buf, "\n"); s && n < 8192; s = strtok(NULL, "\n"))
		if (*s) texts[n++] = s;
	sg_embed_params p = sg_embed_default_params();
	p.backend = backend;
	sg_embed_model *m = NULL;
	double t0 = now_s();
	if (sg_embed_load(argv[1], &p, &m)) {
		fprintf(stderr, "embed_bench: %s\n", sg_last_error());
		return 1;
	}
	double load = now_s() - t0;
	int d = sg_embed_dim(m);
	float *v = malloc(sizeof(float) * (size_t)d * n);
	if (!v) return 1;
	double best1 = 1e30, bestB = 1e30;
	for (int r = 0; r <= R; r++) {
		double a = now_s();
		for (size_t i = 0; i < n && !only_batches; i++)
			if (sg_embed_texts(m, &texts[i], NULL, 1, 1, 0, v + i * (size_t)d, NULL)) {
				fprintf(stderr, "embed_bench: %s\n", sg_last_error());
				return 1;
			}
		double b = now_s();
		for (size_t i = 0; i < n; i += (size_t)B) {
			size_t k = n - i < (size_t)B ? n - i : (size_t)B;
			if (sg_embed_texts(m, &texts[i], NULL, k, 1, 0, v + i * (size_t)d, NULL)) {
				fprintf(stderr, "embed_bench: %s\n", sg_last_error());
				return 1;
			}
		}
		double c = now_s();
		if (r == 0) continue; /* warm-up */
		if (b - a < best1) best1 = b - a;
		if (c - b < bestB) bestB = c - b;
	}
	printf("load_s %.3f\nsentences %zu\ndim %d\nbatch1_sent_per_s %.1f\nbatch%d_sent_per_s %.1f\n", load, n, d, (double)n / best1, B,
	       (double)n / bestB);
	if (argc > 6) {
		FILE *o = fopen(argv[6], "wb");
		if (!o || fwrite(v, sizeof(float) * (size_t)d, n, o) != n) return 1;
		fclose(o);
	}
	free(v);
	sg_embed_free(m);
	return 0;
}
