/* Audio out (src/audio/encode.c): every format decodes back (libsndfile reads WAV, FLAC, MP3 and
 * Ogg Opus) to what went in — exactly for the lossless ones, within an SNR bound for the lossy
 * ones, at the same loudness; the bytes do not depend on how the samples were cut into pushes;
 * the header of a stream of unknown length, and the patched header; bad formats and a writer
 * that stops. */
#include <criterion/criterion.h>
#include <math.h>
#include <sndfile.h>
#include <stdlib.h>
#include <string.h>

#include "audio/encode.h"

#define RATE 22050 /* a Piper voice's rate */
#define N RATE     /* 1 s */

/* ---- helpers ---- */

typedef struct {
	unsigned char *b;
	size_t n, cap;
	size_t calls;
	size_t stop_after; /* 0: never stop */
} sink;

static int sink_write(const void *bytes, size_t n, void *user)
{
	sink *s = user;
	if (s->stop_after && s->calls >= s->stop_after) return 1;
	s->calls++;
	if (s->n + n > s->cap) {
		s->cap = (s->n + n) * 2 + 1024;
		s->b = realloc(s->b, s->cap);
		cr_assert_not_null(s->b);
	}
	memcpy(s->b + s->n, bytes, n);
	s->n += n;
	return 0;
}

/* Two tones, the second louder at the end; amplitude up to 0.6. */
static float tone(double t)
{
	return (float)(0.35 * sin(2 * M_PI * 440.0 * t) + 0.25 * sin(2 * M_PI * 1234.5 * t) * (0.5 + 0.5 * t));
}

static float *signal(int rate, size_t n)
{
	float *x = malloc(n * sizeof *x);
	for (size_t i = 0; i < n; i++) x[i] = tone((double)i / rate);
	return x;
}

/* Encodes x in pushes of `chunk` samples (0: one push). */
static sink encode(const char *fmt, int in_rate, int out_rate, const float *x, size_t n, size_t chunk, int fix)
{
	sink s = {0};
	audio_encoder *e = NULL;
	sg_status st = audio_encoder_open(fmt, in_rate, out_rate, sink_write, &s, &e);
	cr_assert_eq(st, SG_OK, "open %s: %s", fmt, sg_last_error());
	if (!chunk) chunk = n ? n : 1;
	for (size_t o = 0; o < n; o += chunk) {
		size_t m = n - o < chunk ? n - o : chunk;
		cr_assert_eq(audio_encoder_push(e, x + o, m), SG_OK, "push %s: %s", fmt, sg_last_error());
	}
	cr_assert_eq(audio_encoder_finish(e), SG_OK, "finish %s: %s", fmt, sg_last_error());
	cr_assert_eq(audio_encoder_bytes(e), s.n);
	if (fix) cr_assert_eq(audio_encoder_fix_header(e, s.b, s.n), SG_OK, "%s", sg_last_error());
	audio_encoder_free(e);
	return s;
}

/* libsndfile reading from memory */
typedef struct {
	const unsigned char *b;
	sf_count_t n, pos;
} mem;

static sf_count_t m_len(void *u) { return ((mem *)u)->n; }
static sf_count_t m_seek(sf_count_t off, int whence, void *u)
{
	mem *m = u;
	sf_count_t p = whence == SEEK_CUR ? m->pos + off : whence == SEEK_END ? m->n + off : off;
	if (p < 0 || p > m->n) return -1;
	return m->pos = p;
}
static sf_count_t m_read(void *ptr, sf_count_t n, void *u)
{
	mem *m = u;
	if (n > m->n - m->pos) n = m->n - m->pos;
	memcpy(ptr, m->b + m->pos, (size_t)n);
	m->pos += n;
	return n;
}
static sf_count_t m_write(const void *ptr, sf_count_t n, void *u) { (void)ptr, (void)n, (void)u; return 0; }
static sf_count_t m_tell(void *u) { return ((mem *)u)->pos; }

/* Decodes bytes with libsndfile: the samples (malloc), their count and rate. */
static float *decode(const sink *s, size_t *n, int *rate)
{
	SF_VIRTUAL_IO io = {m_len, m_seek, m_read, m_write, m_tell};
	mem m = {s->b, (sf_count_t)s->n, 0};
	SF_INFO si = {0};
	SNDFILE *f = sf_open_virtual(&io, SFM_READ, &si, &m);
	cr_assert_not_null(f, "libsndfile cannot read it back: %s", sf_strerror(NULL));
	cr_assert_eq(si.channels, 1);
	*rate = si.samplerate;
	size_t cap = 1 << 16, got = 0;
	float *x = malloc(cap * sizeof *x);
	for (;;) {
		if (got + 4096 > cap) x = realloc(x, (cap *= 2) * sizeof *x);
		sf_count_t r = sf_readf_float(f, x + got, 4096);
		if (r <= 0) break;
		got += (size_t)r;
	}
	sf_close(f);
	*n = got;
	return x;
}

static double rms(const float *x, size_t n)
{
	double s = 0;
	for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
	return sqrt(s / (n ? n : 1));
}

/* The SNR (dB) of y against the reference r over [from, to) of r, at the lag in [-maxlag, maxlag]
 * that is best (lossy coders delay the signal). */
static double snr_aligned(const float *r, size_t nr, const float *y, size_t ny, size_t from, size_t to, int maxlag, int *lag_out)
{
	double best = -1e9;
	for (int lag = -maxlag; lag <= maxlag; lag++) {
		double sig = 0, err = 0;
		int ok = 1;
		for (size_t i = from; i < to; i++) {
			long j = (long)i + lag;
			if (j < 0 || (size_t)j >= ny) {
				ok = 0;
				break;
			}
			double d = (double)y[j] - r[i];
			sig += (double)r[i] * r[i];
			err += d * d;
		}
		if (!ok) continue;
		double snr = 10 * log10(sig / (err > 1e-20 ? err : 1e-20));
		if (snr > best) {
			best = snr;
			if (lag_out) *lag_out = lag;
		}
	}
	(void)nr;
	return best;
}

/* ---- per format ---- */

Test(encode, wav_decodes_back_exactly_at_16_bits)
{
	float *x = signal(RATE, N);
	sink s = encode("wav", RATE, 0, x, N, 0, 1);
	cr_assert_eq(s.n, 44 + 2 * (size_t)N);
	size_t n;
	int rate;
	float *y = decode(&s, &n, &rate);
	cr_assert_eq(rate, RATE);
	cr_assert_eq(n, (size_t)N);
	/* written as x * 32767, read back as s / 32768: within two steps */
	for (size_t i = 0; i < n; i++) cr_assert_leq(fabsf(y[i] - x[i]), 2.0f / 32767, "sample %zu: %g vs %g", i, y[i], x[i]);
	/* loudness kept: no normalisation */
	cr_assert_float_eq(rms(y, n), rms(x, N), 1e-4);
	free(x), free(y), free(s.b);
}

Test(encode, wav_stream_header_has_unknown_sizes_and_fix_writes_them)
{
	float *x = signal(RATE, 1000);
	sink s = encode("wav", RATE, 0, x, 1000, 0, 0);
	static const unsigned char ff[4] = {0xFF, 0xFF, 0xFF, 0xFF};
	cr_assert(!memcmp(s.b, "RIFF", 4) && !memcmp(s.b + 4, ff, 4) && !memcmp(s.b + 36, "data", 4) && !memcmp(s.b + 40, ff, 4));
	sink f = encode("wav", RATE, 0, x, 1000, 0, 1);
	uint32_t riff = f.b[4] | f.b[5] << 8 | f.b[6] << 16 | (uint32_t)f.b[7] << 24;
	uint32_t data = f.b[40] | f.b[41] << 8 | f.b[42] << 16 | (uint32_t)f.b[43] << 24;
	cr_assert_eq(riff, 36 + 2000);
	cr_assert_eq(data, 2000);
	cr_assert(!memcmp(s.b + 44, f.b + 44, 2000), "only the header differs");
	free(x), free(s.b), free(f.b);
}

Test(encode, pcm_is_s16le_at_24khz_by_default)
{
	float *x = signal(RATE, N);
	sink s = encode("pcm", RATE, 0, x, N, 0, 0);
	size_t n = s.n / 2;
	cr_assert_eq(s.n % 2, 0);
	cr_assert(labs((long)n - 24000) <= 2, "%zu samples for 1 s at 24 kHz", n);
	float *y = malloc(n * sizeof *y);
	for (size_t i = 0; i < n; i++) y[i] = (int16_t)(s.b[2 * i] | s.b[2 * i + 1] << 8) / 32767.0f;
	float *r = signal(24000, n);
	/* the resampled tones against the tones sampled at 24 kHz (edges left out) */
	double snr = snr_aligned(r, n, y, n, 500, n - 500, 0, NULL);
	cr_assert_gt(snr, 60.0, "SNR %.1f dB", snr);
	free(x), free(y), free(r), free(s.b);
}

Test(encode, pcm_at_the_input_rate_is_exact)
{
	float x[] = {0.0f, 0.5f, -0.5f, 1.0f, -1.0f, 2.0f, -3.0f, 1e-6f};
	sink s = encode("pcm", RATE, RATE, x, 8, 0, 0);
	static const int16_t want[] = {0, 16384, -16384, 32767, -32767, 32767, -32767, 0};
	cr_assert_eq(s.n, 16);
	for (int i = 0; i < 8; i++) cr_assert_eq((int16_t)(s.b[2 * i] | s.b[2 * i + 1] << 8), want[i], "sample %d", i);
	free(s.b);
}

Test(encode, f32_is_the_clipped_input)
{
	float x[] = {0.25f, -0.75f, 1.5f, -1.5f};
	sink s = encode("f32", 16000, 0, x, 4, 0, 0);
	cr_assert_eq(s.n, 16);
	float y[4];
	memcpy(y, s.b, 16);
	cr_assert(y[0] == 0.25f && y[1] == -0.75f && y[2] == 1.0f && y[3] == -1.0f);
	free(s.b);
}

Test(encode, flac_decodes_back_losslessly)
{
	float *x = signal(RATE, N);
	sink s = encode("flac", RATE, 0, x, N, 0, 1);
	cr_assert(!memcmp(s.b, "fLaC", 4));
	cr_assert_lt(s.n, 2 * (size_t)N, "FLAC compresses: %zu bytes", s.n);
	size_t n;
	int rate;
	float *y = decode(&s, &n, &rate);
	cr_assert_eq(rate, RATE);
	cr_assert_eq(n, (size_t)N);
	for (size_t i = 0; i < n; i++) cr_assert_leq(fabsf(y[i] - x[i]), 2.0f / 32767, "sample %zu", i);
	free(x), free(y), free(s.b);
}

Test(encode, flac_stream_header_says_unknown_length_and_fix_sets_it)
{
	float *x = signal(RATE, 5000);
	sink s = encode("flac", RATE, 0, x, 5000, 0, 0);
	/* total samples: the low 4 bits of byte 21 and bytes 22..25 */
	uint64_t t = (uint64_t)(s.b[21] & 15) << 32 | (uint64_t)s.b[22] << 24 | s.b[23] << 16 | s.b[24] << 8 | s.b[25];
	cr_assert_eq(t, 0);
	sink f = encode("flac", RATE, 0, x, 5000, 0, 1);
	t = (uint64_t)(f.b[21] & 15) << 32 | (uint64_t)f.b[22] << 24 | f.b[23] << 16 | f.b[24] << 8 | f.b[25];
	cr_assert_eq(t, 5000);
	free(x), free(s.b), free(f.b);
}

Test(encode, mp3_decodes_back_within_an_snr_bound)
{
	if (!audio_format_available("mp3")) {
		audio_encoder *e;
		sink s = {0};
		cr_assert_eq(audio_encoder_open("mp3", RATE, 0, sink_write, &s, &e), SG_ERR_UNSUPPORTED);
		cr_assert(strstr(sg_last_error(), "mp3"));
		cr_skip_test("this libsndfile writes no MP3");
	}
	float *x = signal(RATE, N);
	sink s = encode("mp3", RATE, 0, x, N, 0, 0);
	size_t n;
	int rate;
	float *y = decode(&s, &n, &rate);
	cr_assert_eq(rate, RATE);
	cr_assert_geq(n, (size_t)N - 1152, "%zu samples back", n);
	int lag = 0;
	double snr = snr_aligned(x, N, y, n, 3000, N - 3000, 2400, &lag);
	cr_assert_gt(snr, 15.0, "SNR %.1f dB at lag %d", snr, lag);
	double ratio = rms(y + 3000 + lag, N - 6000) / rms(x + 3000, N - 6000);
	cr_assert(ratio > 0.9 && ratio < 1.1, "loudness ratio %.3f", ratio);
	free(x), free(y), free(s.b);
}

Test(encode, opus_is_ogg_at_48khz_and_decodes_back_within_an_snr_bound)
{
	float *x = signal(RATE, N);
	sink s = encode("opus", RATE, 0, x, N, 0, 0);
	cr_assert(!memcmp(s.b, "OggS", 4));
	cr_assert(memmem(s.b, s.n, "OpusHead", 8));
	size_t n;
	int rate;
	float *y = decode(&s, &n, &rate);
	cr_assert_eq(rate, 48000);
	cr_assert(labs((long)n - 48000) < 2000, "%zu samples back for 1 s", n);
	float *r = signal(48000, 48000);
	int lag = 0;
	double snr = snr_aligned(r, 48000, y, n, 5000, 40000, 1000, &lag);
	cr_assert_gt(snr, 10.0, "SNR %.1f dB at lag %d", snr, lag);
	double ratio = rms(y + 5000 + lag, 35000) / rms(r + 5000, 35000);
	cr_assert(ratio > 0.85 && ratio < 1.15, "loudness ratio %.3f", ratio);
	free(x), free(y), free(r), free(s.b);
}

/* ---- streaming ---- */

Test(encode, streamed_bytes_equal_one_shot_bytes_for_every_chunk_size)
{
	static const char *fmts[] = {"wav", "pcm", "f32", "flac", "mp3", "opus"};
	static const size_t chunks[] = {1, 7, 441, 4096, RATE};
	size_t n = RATE / 2;
	float *x = signal(RATE, n);
	for (size_t f = 0; f < sizeof fmts / sizeof *fmts; f++) {
		if (!audio_format_available(fmts[f])) continue;
		sink whole = encode(fmts[f], RATE, 0, x, n, 0, 0);
		for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
			sink part = encode(fmts[f], RATE, 0, x, n, chunks[c], 0);
			cr_assert_eq(part.n, whole.n, "%s in chunks of %zu: %zu bytes, one push: %zu", fmts[f], chunks[c], part.n, whole.n);
			cr_assert(!memcmp(part.b, whole.b, whole.n), "%s in chunks of %zu: other bytes", fmts[f], chunks[c]);
			free(part.b);
		}
		free(whole.b);
	}
	free(x);
}

Test(encode, bytes_leave_before_the_end)
{
	/* a stream: the writer sees bytes after a push, before finish */
	static const char *fmts[] = {"wav", "pcm", "flac", "mp3", "opus"};
	float *x = signal(RATE, N);
	for (size_t f = 0; f < sizeof fmts / sizeof *fmts; f++) {
		if (!audio_format_available(fmts[f])) continue;
		sink s = {0};
		audio_encoder *e;
		cr_assert_eq(audio_encoder_open(fmts[f], RATE, 0, sink_write, &s, &e), SG_OK);
		cr_assert_eq(audio_encoder_push(e, x, N / 2), SG_OK);
		size_t mid = s.n;
		cr_assert_gt(mid, 2048, "%s: only %zu bytes out after 0.5 s of audio", fmts[f], mid);
		cr_assert_eq(audio_encoder_finish(e), SG_OK);
		cr_assert_geq(s.n, mid);
		audio_encoder_free(e);
		free(s.b);
	}
	free(x);
}

/* ---- errors ---- */

Test(encode, aac_and_unknown_formats_are_unsupported_with_the_list)
{
	sink s = {0};
	audio_encoder *e = (audio_encoder *)1;
	cr_assert_eq(audio_encoder_open("aac", RATE, 0, sink_write, &s, &e), SG_ERR_UNSUPPORTED);
	cr_assert_null(e);
	cr_assert(strstr(sg_last_error(), "aac") && strstr(sg_last_error(), "AAC encoder"), "%s", sg_last_error());
	cr_assert_eq(audio_encoder_open("ogg-vorbis", RATE, 0, sink_write, &s, &e), SG_ERR_UNSUPPORTED);
	cr_assert(strstr(sg_last_error(), "ogg-vorbis") && strstr(sg_last_error(), "flac"), "%s", sg_last_error());
	cr_assert_eq(audio_encoder_open(NULL, RATE, 0, sink_write, &s, &e), SG_ERR_UNSUPPORTED);
	cr_assert_eq(s.n, 0);
	cr_assert_str_eq(audio_format_mime("mp3"), "audio/mpeg");
	cr_assert_str_eq(audio_format_mime("wav"), "audio/wav");
	cr_assert_str_eq(audio_format_mime("opus"), "audio/ogg");
	cr_assert_str_eq(audio_format_mime("flac"), "audio/flac");
	cr_assert_str_eq(audio_format_mime("aac"), "application/octet-stream");
}

Test(encode, bad_rates_are_refused)
{
	sink s = {0};
	audio_encoder *e;
	cr_assert_eq(audio_encoder_open("wav", 0, 0, sink_write, &s, &e), SG_ERR_INVALID_ARG);
	cr_assert_eq(audio_encoder_open("wav", 22050, 5000000, sink_write, &s, &e), SG_ERR_INVALID_ARG);
	cr_assert_eq(audio_encoder_open("opus", 22050, 44100, sink_write, &s, &e), SG_ERR_INVALID_ARG);
	cr_assert(strstr(sg_last_error(), "opus"));
	cr_assert_eq(audio_encoder_open("pcm", 22050, 0, NULL, NULL, &e), SG_ERR_INVALID_ARG);
}

Test(encode, a_writer_that_stops_cancels_and_stays_stopped)
{
	static const char *fmts[] = {"wav", "flac", "opus"};
	float *x = signal(RATE, N);
	for (size_t f = 0; f < 3; f++) {
		sink s = {.stop_after = 2};
		audio_encoder *e;
		sg_status st = audio_encoder_open(fmts[f], RATE, 0, sink_write, &s, &e);
		for (int i = 0; i < 20 && st == SG_OK; i++) st = audio_encoder_push(e, x, N / 20);
		cr_assert_eq(st, SG_ERR_CANCELLED, "%s: %d", fmts[f], st);
		cr_assert_eq(audio_encoder_push(e, x, 10), SG_ERR_CANCELLED);
		cr_assert_eq(audio_encoder_finish(e), SG_ERR_CANCELLED);
		audio_encoder_free(e);
		free(s.b);
	}
	free(x);
}

Test(encode, push_after_finish_is_an_error_and_empty_streams_are_valid)
{
	sink s = {0};
	audio_encoder *e;
	cr_assert_eq(audio_encoder_open("wav", RATE, 0, sink_write, &s, &e), SG_OK);
	cr_assert_eq(audio_encoder_finish(e), SG_OK);
	cr_assert_eq(audio_encoder_push(e, (float[]){0}, 1), SG_ERR_INVALID_ARG);
	cr_assert_eq(audio_encoder_fix_header(e, s.b, s.n), SG_OK);
	cr_assert_eq(s.n, 44);
	cr_assert_eq(s.b[40] | s.b[41] | s.b[42] | s.b[43], 0);
	audio_encoder_free(e);
	free(s.b);
}
