/* Whisper model timings on one clip: load, mel, encoder (one 30 s window), and the decoder as a
 * transcription runs it (a 2-token prompt, then greedy one token a step until <|endoftext|> or
 * MAX_STEPS), best of R runs each. Prints the greedy ids so a peer's output can be compared.
 *
 *   build/bench/whisper_bench MODEL AUDIO [THREADS] [RUNS]
 *   bench/whisper_vs_cpp.sh builds it and runs it beside whisper.cpp.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "audio/decode.h"
#include "audio/mel.h"
#include "base/timer.h"
#include "models/whisper.h"

#define MAX_STEPS 224

/* Process CPU time: on a shared machine, with one thread, the work a stage took whatever else
 * ran (wall time counts the other processes' turns too). */
static double cpu_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int fail(const char *what)
{
	fprintf(stderr, "whisper_bench: %s: %s\n", what, sg_last_error());
	return 1;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: whisper_bench MODEL AUDIO [THREADS] [RUNS]\n");
		return 2;
	}
	int threads = argc > 3 ? atoi(argv[3]) : 0, runs = argc > 4 ? atoi(argv[4]) : 3;
	if (runs < 1) runs = 1;
	sg_whisper_params p = sg_whisper_default_params();
	p.n_threads = threads;
	double t0 = sg_time_s();
	sg_whisper *w = NULL;
	if (sg_whisper_load(argv[1], &p, &w)) return fail("load");
	double t_load = sg_time_s() - t0;
	const sg_whisper_info *i = sg_whisper_get_info(w);
	sg_audio a;
	if (sg_audio_decode_file(argv[2], &a)) return fail("audio");
	int T = 2 * i->n_audio_ctx, V = i->n_vocab;
	float *mel = malloc(sizeof(float) * (size_t)i->n_mels * (size_t)T), *lg = malloc(sizeof(float) * (size_t)V);
	double best_mel = 1e9, best_enc = 1e9, best_dec = 1e9, cpu_enc = 1e9, cpu_dec = 1e9;
	int n_tok = 0;
	int32_t ids[MAX_STEPS];
	for (int r = 0; r < runs; r++) {
		t0 = sg_time_s();
		if (sg_audio_log_mel(a.samples, a.n, i->n_mels, mel)) return fail("mel");
		double t1 = sg_time_s(), c1 = cpu_s();
		if (sg_whisper_encode(w, mel, T)) return fail("encode");
		double t2 = sg_time_s(), c2 = cpu_s();
		int32_t prompt[2] = {i->multilingual ? 50258 : 50257, i->multilingual ? 50363 : 50362};
		if (sg_whisper_decode(w, 0, prompt, 2, 0, 0, lg)) return fail("decode");
		n_tok = 0;
		for (int k = 0; k < MAX_STEPS - 2; k++) {
			int32_t b = 0;
			for (int v = 1; v < V; v++)
				if (lg[v] > lg[b]) b = v;
			if (b == (i->multilingual ? 50257 : 50256)) break;
			ids[n_tok++] = b;
			if (sg_whisper_decode(w, 0, &b, 1, 2 + k, 0, lg)) return fail("decode");
		}
		double t3 = sg_time_s(), c3 = cpu_s();
		if (c2 - c1 < cpu_enc) cpu_enc = c2 - c1;
		if (c3 - c2 < cpu_dec) cpu_dec = c3 - c2;
		if (t1 - t0 < best_mel) best_mel = t1 - t0;
		if (t2 - t1 < best_enc) best_enc = t2 - t1;
		if (t3 - t2 < best_dec) best_dec = t3 - t2;
	}
	printf("model: %s (%s, %s), %d threads\n", argv[1], i->source, i->dtype, threads);
	printf("load_ms: %.1f\nmel_ms: %.1f\nencode_ms: %.1f\n", 1e3 * t_load, 1e3 * best_mel, 1e3 * best_enc);
	printf("decode_ms: %.1f (%d tokens + prompt, %.2f ms/token)\n", 1e3 * best_dec, n_tok, 1e3 * best_dec / (n_tok + 1));
	printf("encode_cpu_ms: %.1f\ndecode_cpu_ms: %.1f (process CPU time, all threads)\n", 1e3 * cpu_enc, 1e3 * cpu_dec);
	printf("ids:");
	for (int k = 0; k < n_tok; k++) printf(" %d", ids[k]);
	printf("\n");
	free(mel);
	free(lg);
	sg_audio_free(&a);
	sg_whisper_free(w);
	return 0;
}
