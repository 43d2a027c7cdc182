/*
 * A voice-cloning reference clip decoded to 24 kHz mono as the Qwen3-TTS reference (qwen-tts 0.1.1)
 * decodes it: soundfile as float32, the mean of the channels, then librosa.resample (python-soxr's
 * soxr.resample at HQ on the whole clip, then librosa's fix_length to ceil(n * (24000 / rate)) with
 * zeros). Fixtures: tests/fixtures/resample, made by tools/make_resample_fixtures.py; the clips go
 * through sg_audio_decode_memory_at, the call the Qwen3-TTS engine makes on the request's bytes.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audio/decode.h"
#include "audio/stream.h"
#include "saragossa.h"

#define FIX "tests/fixtures/resample"
#define RATE 24000

/* The largest |ours - reference| allowed. Measured on an x86-64 AVX2 host with Debian's libsoxr
 * 0.1.3: 0 in every case (the same samples, bit for bit); with libsoxr's SIMD engine turned off
 * (SOXR_USE_SIMD=0, its scalar float engine, as on a host or build without SIMD) up to 7.2e-7. A
 * one-sample delay, another filter or a gain off by 0.1% is off by far more on these signals. */
#define MAX_ABS_DIFF 4e-6

static void *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	cr_assert(f, "cannot open %s", path);
	cr_assert_eq(fseek(f, 0, SEEK_END), 0);
	long len = ftell(f);
	cr_assert_gt(len, 0, "%s is empty", path);
	rewind(f);
	void *p = malloc((size_t)len);
	cr_assert(p);
	cr_assert_eq(fread(p, 1, (size_t)len, f), (size_t)len, "%s: short read", path);
	fclose(f);
	*n = (size_t)len;
	return p;
}

/* name: the case; rate, channels: what the clip's header says */
static void expect_reference(const char *name, int rate, int channels)
{
	char path[256];
	size_t wav_n, ref_bytes;
	snprintf(path, sizeof(path), FIX "/%s.wav", name);
	void *wav = slurp(path, &wav_n);
	snprintf(path, sizeof(path), FIX "/%s.ref.f32", name);
	float *ref = slurp(path, &ref_bytes); /* little-endian float32, as this host's */
	size_t ref_n = ref_bytes / sizeof(float);

	sg_audio a;
	cr_assert_eq(sg_audio_decode_memory_at(wav, wav_n, RATE, &a), SG_OK, "%s: %s", name, sg_last_error());
	cr_expect_eq(a.src_rate, rate, "%s: source rate %d", name, a.src_rate);
	cr_expect_eq(a.src_channels, channels, "%s: %d channels", name, a.src_channels);
	cr_expect_eq(a.n, ref_n, "%s: %zu samples at %d Hz, the reference %zu", name, a.n, RATE, ref_n);
	double worst = 0;
	size_t at = 0;
	for (size_t i = 0; i < a.n && i < ref_n; i++) {
		double d = fabs((double)a.samples[i] - (double)ref[i]);
		if (d > worst) worst = d, at = i;
	}
	cr_log_info("%s: %zu samples, max |diff| %.3g at %zu", name, a.n, worst, at);
	cr_expect_leq(worst, MAX_ABS_DIFF, "%s: sample %zu is %.9g, the reference %.9g (|diff| %.3g)", name, at,
	              (double)a.samples[at], (double)ref[at], worst);
	sg_audio_free(&a);
	free(ref);
	free(wav);
}

Test(audio_resample, pcm16_16k_chirp_matches_librosa_soxr_hq) { expect_reference("chirp_16000", 16000, 1); }
Test(audio_resample, float_16k_noise_bursts_match_librosa_soxr_hq) { expect_reference("bursts_16000", 16000, 1); }
Test(audio_resample, pcm16_22050_sines_match_librosa_soxr_hq) { expect_reference("sines_22050", 22050, 1); }
Test(audio_resample, pcm16_22050_chirp_matches_librosa_soxr_hq) { expect_reference("chirp_22050", 22050, 1); }
Test(audio_resample, pcm16_44100_noise_bursts_match_librosa_soxr_hq) { expect_reference("bursts_44100", 44100, 1); }
Test(audio_resample, pcm16_48k_chirp_matches_librosa_soxr_hq) { expect_reference("chirp_48000", 48000, 1); }
Test(audio_resample, pcm16_48k_noise_bursts_match_librosa_soxr_hq) { expect_reference("bursts_48000", 48000, 1); }
/* left a chirp, right sines: the reference averages the channels, then resamples */
Test(audio_resample, pcm16_44100_stereo_is_averaged_then_matches_librosa_soxr_hq) { expect_reference("stereo_44100", 44100, 2); }

/* A mono PCM-16 WAV of n frames at rate (a quiet 440 Hz sine), built here; free() it. */
static unsigned char *wav16(int rate, uint32_t n, size_t *size)
{
	*size = 44 + 2 * (size_t)n;
	unsigned char *w = malloc(*size);
	cr_assert(w);
	uint32_t data = 2 * n;
	uint32_t hdr[11];
	memcpy(&hdr[0], "RIFF", 4), hdr[1] = 36 + data, memcpy(&hdr[2], "WAVE", 4), memcpy(&hdr[3], "fmt ", 4);
	hdr[4] = 16, hdr[5] = 1u | 1u << 16 /* PCM, 1 channel */, hdr[6] = (uint32_t)rate, hdr[7] = 2 * (uint32_t)rate;
	hdr[8] = 2u | 16u << 16 /* block align 2, 16 bits */, memcpy(&hdr[9], "data", 4), hdr[10] = data;
	memcpy(w, hdr, 44); /* little-endian host, as the fixtures' reader above assumes */
	for (uint32_t i = 0; i < n; i++) {
		int16_t v = (int16_t)lrint(3000.0 * sin(2 * M_PI * 440.0 * i / rate));
		memcpy(w + 44 + 2 * (size_t)i, &v, 2);
	}
	return w;
}

/* librosa's ceil(n * (24000 / rate)) in double: 26460 frames at 22050 Hz make 28800.000000000004,
 * so 28801 samples (the reference pads a zero); 8820 frames make exactly 9600. */
Test(audio_resample, length_is_librosas_double_ceil_even_a_hair_past_a_whole_number)
{
	cr_expect_eq(sg_audio_resampled_len(26460, 22050, 24000), 28801);
	cr_expect_eq(sg_audio_resampled_len(8820, 22050, 24000), 9600);
	cr_expect_eq(sg_audio_resampled_len(8821, 22050, 24000), 9602); /* soxr alone: 9601 */
	const uint32_t frames[] = {26460, 8820, 8821};
	const size_t want[] = {28801, 9600, 9602}; /* padded with a zero but for 8820 */
	for (int k = 0; k < 3; k++) {
		size_t size;
		unsigned char *w = wav16(22050, frames[k], &size);
		sg_audio a;
		cr_assert_eq(sg_audio_decode_memory_at(w, size, RATE, &a), SG_OK, "%s", sg_last_error());
		cr_expect_eq(a.n, want[k], "%u frames: %zu samples, librosa gives %zu", frames[k], a.n, want[k]);
		if (k != 1) cr_expect_eq(a.samples[a.n - 1], 0.0f, "%u frames: the padded end is not zero", frames[k]);
		sg_audio_free(&a);
		free(w);
	}
}

/* The stream (transcription's reader, 16 kHz) pads as the decoder does: the same samples, and
 * the length rule's (20161 frames at 48 kHz: soxr gives 6720, the rule 6721). */
Test(audio_resample, stream_gives_the_decoders_samples_and_length)
{
	const char *names[] = {"chirp_48000", "stereo_44100", "chirp_22050", "bursts_16000"};
	const size_t frames[] = {20161, 17647, 8821, 6421}; /* as tools/make_resample_fixtures.py writes them */
	for (int k = 0; k < 4; k++) {
		char path[256];
		size_t wav_n;
		snprintf(path, sizeof(path), FIX "/%s.wav", names[k]);
		void *wav = slurp(path, &wav_n);
		sg_audio a;
		cr_assert_eq(sg_audio_decode_memory(wav, wav_n, &a), SG_OK, "%s: %s", names[k], sg_last_error());
		sg_audio_stream *st = NULL;
		cr_assert_eq(sg_audio_stream_open_memory(wav, wav_n, &st), SG_OK, "%s: %s", names[k], sg_last_error());
		float *got = malloc(sizeof(float) * (a.n + 64));
		size_t n = 0, k_got;
		do {
			cr_assert_eq(sg_audio_stream_read(st, got + n, a.n + 64 - n < 1000 ? a.n + 64 - n : 1000, &k_got), SG_OK);
			n += k_got;
		} while (k_got && n < a.n + 64);
		cr_expect_eq(n, a.n, "%s: the stream gives %zu samples, the decoder %zu", names[k], n, a.n);
		size_t want = a.src_rate == SG_AUDIO_RATE ? frames[k] : sg_audio_resampled_len(frames[k], a.src_rate, SG_AUDIO_RATE);
		cr_expect_eq(a.n, want, "%s: the decoder gives %zu samples at 16 kHz, the rule %zu", names[k], a.n, want);
		cr_expect(n == a.n && !memcmp(got, a.samples, sizeof(float) * n), "%s: the stream's samples differ", names[k]);
		sg_audio_stream_close(st);
		free(got);
		sg_audio_free(&a);
		free(wav);
	}
}
