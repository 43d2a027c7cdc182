/* Unit tests of src/audio/encode: the streaming WAV header and samples, raw s16le and float, a
 * rate change through soxr, the size patch, and unknown formats. */
#include <criterion/criterion.h>

#include <math.h>
#include <string.h>

#include "audio/encode.h"
#include "base/alloc.h"
#include "base/error.h"

typedef struct sink {
	uint8_t buf[1 << 18];
	size_t n;
	int calls;
} sink;

static int put(const void *b, size_t n, void *user)
{
	sink *s = user;
	cr_assert_leq(s->n + n, sizeof s->buf);
	memcpy(s->buf + s->n, b, n);
	s->n += n;
	s->calls++;
	return 0;
}

static uint32_t le32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

Test(encode, wav_streams_a_header_then_s16_samples)
{
	static sink s;
	memset(&s, 0, sizeof s);
	audio_encoder *e;
	cr_assert_eq(audio_encoder_open("wav", 22050, 0, put, &s, &e), SG_OK, "%s", sg_last_error());
	float a[3] = {0.5f, -1.5f, 0.0f}, b[1] = {1.0f};
	cr_assert_eq(audio_encoder_push(e, a, 3), SG_OK);
	cr_assert_eq(s.n, 44 + 6, "the header and the first chunk leave at once");
	cr_assert_eq(audio_encoder_push(e, b, 1), SG_OK);
	cr_assert_eq(audio_encoder_finish(e), SG_OK);
	audio_encoder_free(e);
	cr_assert(!memcmp(s.buf, "RIFF", 4) && !memcmp(s.buf + 8, "WAVEfmt ", 8) && !memcmp(s.buf + 36, "data", 4));
	cr_assert_eq(le32(s.buf + 24), 22050);
	cr_assert_eq(le32(s.buf + 40), 0xFFFFFFFFu - 36, "streaming: the length is the maximum");
	int16_t v[4];
	memcpy(v, s.buf + 44, 8);
	cr_assert(v[0] == 16384 && v[1] == -32767 && v[2] == 0 && v[3] == 32767, "%d %d %d %d", v[0], v[1], v[2], v[3]);
	audio_wav_patch_sizes(s.buf, 8);
	cr_assert_eq(le32(s.buf + 4), 44);
	cr_assert_eq(le32(s.buf + 40), 8);
}

Test(encode, f32_and_pcm_raw)
{
	static sink s;
	memset(&s, 0, sizeof s);
	audio_encoder *e;
	cr_assert_eq(audio_encoder_open("f32", 16000, 0, put, &s, &e), SG_OK);
	float a[2] = {0.25f, -0.75f};
	cr_assert_eq(audio_encoder_push(e, a, 2), SG_OK);
	cr_assert_eq(audio_encoder_finish(e), SG_OK);
	audio_encoder_free(e);
	cr_assert_eq(s.n, 8);
	cr_assert(!memcmp(s.buf, a, 8));
	cr_assert_str_eq(audio_format_mime("wav"), "audio/wav");
	cr_assert_str_eq(audio_format_mime("pcm"), "audio/pcm");
}

Test(encode, pcm_resamples_to_24k_by_default)
{
	static sink s;
	memset(&s, 0, sizeof s);
	audio_encoder *e;
	cr_assert_eq(audio_encoder_open("pcm", 22050, 0, put, &s, &e), SG_OK);
	float *x = sg_malloc(22050 * sizeof(float));
	for (int i = 0; i < 22050; i++) x[i] = 0.5f * sinf(2 * (float)M_PI * 440 * (float)i / 22050);
	for (int i = 0; i < 22050; i += 1000) cr_assert_eq(audio_encoder_push(e, x + i, i + 1000 <= 22050 ? 1000 : 22050 - i), SG_OK);
	cr_assert_eq(audio_encoder_finish(e), SG_OK);
	audio_encoder_free(e);
	sg_free(x);
	cr_assert(s.n / 2 >= 23990 && s.n / 2 <= 24010, "%zu samples at 24 kHz for one second", s.n / 2);
	/* the sine survives: its peak is 0.5 */
	int16_t peak = 0;
	for (size_t i = 2000; i < s.n / 2 - 2000; i++) {
		int16_t v;
		memcpy(&v, s.buf + 2 * i, 2);
		peak = v > peak ? v : peak;
	}
	cr_assert(peak > 16000 && peak < 16800, "peak %d", peak);
}

Test(encode, unknown_format_names_the_ones_there_are)
{
	audio_encoder *e;
	sink s;
	cr_assert_eq(audio_encoder_open("mp3", 22050, 0, put, &s, &e), SG_ERR_UNSUPPORTED);
	cr_assert(strstr(sg_last_error(), "wav, pcm, f32"), "%s", sg_last_error());
	cr_assert_null(e);
	cr_assert_eq(audio_encoder_open("wav", 0, 0, put, &s, &e), SG_ERR_INVALID_ARG);
}
