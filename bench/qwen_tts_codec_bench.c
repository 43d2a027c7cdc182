/*
 * Qwen3-TTS codec decoder alone on the CPU: random codes of F frames decoded as the engine streams
 * them (2 frames, then 12, each with up to 25 frames of left context), best and median of RUNS,
 * as seconds per second of audio (the decoder's real-time factor). Run it twice to compare the
 * packed convolution with im2col: SARAGOSSA_CPU_CONV_PACKED=1 / =0.
 *
 *   cc -std=c17 -D_GNU_SOURCE -O2 -Iinclude -Isrc -pthread bench/qwen_tts_codec_bench.c -o build/bench/qwen_tts_codec_bench \
 *      build/libsaragossa.a $(pkg-config --libs jansson libmicrohttpd libcurl libcrypto libpcre2-8 libutf8proc fftw3f sndfile \
 *      soxr libedit liburing zlib espeak-ng libprotobuf-c opus libopusenc) -lm -lpthread -ldl
 *   build/bench/qwen_tts_codec_bench FOLDER/speech_tokenizer [FRAMES] [THREADS] [RUNS]
 */
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "base/timer.h"
#include "models/qwen3_tts_codec.h"

static int sink(const float *pcm, size_t n, void *user)
{
	(void)pcm;
	*(size_t *)user += n;
	return 0;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s SPEECH_TOKENIZER_DIR [FRAMES] [THREADS] [RUNS]\n", argv[0]);
		return 2;
	}
	int F = argc > 2 ? atoi(argv[2]) : 151, th = argc > 3 ? atoi(argv[3]) : 2, runs = argc > 4 ? atoi(argv[4]) : 3;
	if (F < 1 || th < 1 || runs < 1 || runs > 64) return 2;
	sg_backend *be = NULL;
	sg_cpu_params p = {th, NULL};
	sg_qwen3_tts_codec *c = NULL;
	if (sg_cpu_backend_create(&p, &be) || sg_qwen3_tts_codec_load(argv[1], be, &c)) {
		fprintf(stderr, "%s\n", sg_last_error());
		return 1;
	}
	int G = sg_qwen3_tts_codec_groups(c);
	int32_t *codes = malloc(sizeof(int32_t) * (size_t)F * (size_t)G);
	srand(1);
	for (int i = 0; i < F * G; i++) codes[i] = rand() % 2048;
	double t[64];
	size_t n = 0;
	for (int r = 0; r < runs; r++) {
		sg_qwen3_tts_stream *s = NULL;
		n = 0;
		double t0 = sg_time_s();
		if (sg_qwen3_tts_stream_open(c, 12, 25, sink, &n, &s)) return 1;
		sg_qwen3_tts_stream_first_chunk(s, 2);
		for (int f = 0; f < F; f++)
			if (sg_qwen3_tts_stream_push(s, codes + (size_t)f * G)) return 1;
		if (sg_qwen3_tts_stream_finish(s)) return 1;
		t[r] = sg_time_s() - t0;
		sg_qwen3_tts_stream_free(s);
	}
	qsort(t, (size_t)runs, sizeof(double), cmp);
	double audio = (double)n / sg_qwen3_tts_codec_sample_rate(c);
	printf("{\"frames\": %d, \"threads\": %d, \"runs\": %d, \"audio_s\": %.3f, \"best_s\": %.3f, \"median_s\": %.3f, "
	       "\"rtf_best\": %.4f, \"rtf_median\": %.4f}\n",
	       F, th, runs, audio, t[0], t[runs / 2], t[0] / audio, t[runs / 2] / audio);
	free(codes);
	sg_qwen3_tts_codec_free(c);
	sg_backend_free(be);
	return 0;
}
