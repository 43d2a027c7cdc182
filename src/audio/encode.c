/* Streaming audio encoders (encode.h): WAV, raw s16le and raw float, resampled with soxr. */
#include "audio/encode.h"

#include <math.h>
#include <soxr.h>
#include <string.h>
#include <strings.h>

#include "base/alloc.h"
#include "base/error.h"

typedef enum { FMT_WAV, FMT_PCM, FMT_F32 } fmt;

struct audio_encoder {
	fmt f;
	int in_rate, out_rate;
	audio_write_fn w;
	void *user;
	soxr_t soxr;
	float *tmp; /* resampled block */
	size_t tmp_cap;
	uint8_t *bytes; /* encoded block */
	size_t bytes_cap;
	int header_done, finished;
};

static const char *FORMATS = "wav, pcm, f32";

const char *audio_format_mime(const char *format)
{
	if (!format) return NULL;
	if (!strcasecmp(format, "wav")) return "audio/wav";
	if (!strcasecmp(format, "pcm")) return "audio/pcm";
	if (!strcasecmp(format, "f32")) return "application/octet-stream";
	if (!strcasecmp(format, "flac")) return "audio/flac";
	if (!strcasecmp(format, "mp3")) return "audio/mpeg";
	if (!strcasecmp(format, "opus")) return "audio/ogg";
	if (!strcasecmp(format, "aac")) return "audio/aac";
	return NULL;
}

static void put32(uint8_t *p, uint32_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24); }
static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }

void audio_wav_patch_sizes(uint8_t hdr[44], uint64_t data_bytes)
{
	uint32_t d = data_bytes > 0xFFFFFFFFull - 36 ? 0xFFFFFFFFu - 36 : (uint32_t)data_bytes;
	put32(hdr + 4, 36 + d);
	put32(hdr + 40, d);
}

sg_status audio_encoder_open(const char *format, int in_rate, int out_rate, audio_write_fn w, void *user, audio_encoder **out)
{
	if (!out) return SG_FAIL(SG_ERR_INVALID_ARG, "out is NULL");
	*out = NULL;
	if (!format || !w) return SG_FAIL(SG_ERR_INVALID_ARG, "a NULL argument");
	fmt f;
	if (!strcasecmp(format, "wav")) f = FMT_WAV;
	else if (!strcasecmp(format, "pcm")) f = FMT_PCM;
	else if (!strcasecmp(format, "f32")) f = FMT_F32;
	else return sg_error(SG_ERR_UNSUPPORTED, "audio: format '%s' is not written by this build (it writes: %s)", format, FORMATS);
	if (in_rate < 1000 || in_rate > 384000) return sg_error(SG_ERR_INVALID_ARG, "audio: input rate %d Hz", in_rate);
	if (!out_rate) out_rate = f == FMT_PCM ? 24000 : in_rate;
	if (out_rate < 1000 || out_rate > 384000) return sg_error(SG_ERR_INVALID_ARG, "audio: output rate %d Hz", out_rate);
	audio_encoder *e = sg_calloc(1, sizeof *e);
	if (!e) return SG_FAIL(SG_ERR_NOMEM, "encoder");
	*e = (audio_encoder){.f = f, .in_rate = in_rate, .out_rate = out_rate, .w = w, .user = user};
	if (in_rate != out_rate) {
		soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
		soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
		soxr_error_t err = NULL;
		e->soxr = soxr_create(in_rate, out_rate, 1, &err, &io, &q, NULL);
		if (!e->soxr || err) {
			sg_free(e);
			return sg_error(SG_ERR_INTERNAL, "audio: soxr_create(%d -> %d Hz): %s", in_rate, out_rate, err ? err : "failed");
		}
	}
	*out = e;
	return SG_OK;
}

static sg_status emit(audio_encoder *e, const void *b, size_t n)
{
	if (n && e->w(b, n, e->user)) return sg_error(SG_ERR_CANCELLED, "audio: the writer stopped");
	return SG_OK;
}

static sg_status header(audio_encoder *e)
{
	if (e->header_done) return SG_OK;
	e->header_done = 1;
	if (e->f != FMT_WAV) return SG_OK;
	uint8_t h[44];
	memcpy(h, "RIFF", 4);
	memcpy(h + 8, "WAVEfmt ", 8);
	put32(h + 16, 16);
	put16(h + 20, 1); /* PCM */
	put16(h + 22, 1); /* mono */
	put32(h + 24, (uint32_t)e->out_rate);
	put32(h + 28, (uint32_t)e->out_rate * 2);
	put16(h + 32, 2);
	put16(h + 34, 16);
	memcpy(h + 36, "data", 4);
	audio_wav_patch_sizes(h, 0xFFFFFFFFull); /* streaming: the length is not known yet */
	return emit(e, h, sizeof h);
}

/* Encodes n samples at the output rate. */
static sg_status encode(audio_encoder *e, const float *x, size_t n)
{
	size_t es = e->f == FMT_F32 ? 4 : 2;
	if (n * es > e->bytes_cap) {
		uint8_t *b = sg_realloc(e->bytes, n * es);
		if (!b) return SG_FAIL(SG_ERR_NOMEM, "%zu samples", n);
		e->bytes = b;
		e->bytes_cap = n * es;
	}
	uint8_t *o = e->bytes;
	for (size_t i = 0; i < n; i++) {
		float v = x[i];
		if (e->f == FMT_F32) {
			memcpy(o + 4 * i, &v, 4); /* little-endian hosts (x86-64, arm64) */
		} else {
			v = v != v ? 0 : v > 1 ? 1 : v < -1 ? -1 : v;
			int16_t s = (int16_t)lrintf(v * 32767.0f);
			put16(o + 2 * i, (uint16_t)s);
		}
	}
	return emit(e, o, n * es);
}

static sg_status resample(audio_encoder *e, const float *x, size_t n)
{
	size_t done_in = 0;
	for (;;) {
		size_t want = (x ? (n - done_in) : 0) * (size_t)e->out_rate / (size_t)e->in_rate + 4096;
		if (want > e->tmp_cap) {
			float *t = sg_realloc(e->tmp, want * sizeof(float));
			if (!t) return SG_FAIL(SG_ERR_NOMEM, "%zu samples", want);
			e->tmp = t;
			e->tmp_cap = want;
		}
		size_t idone = 0, odone = 0;
		soxr_error_t err = soxr_process(e->soxr, x ? x + done_in : NULL, x ? n - done_in : 0, &idone, e->tmp, e->tmp_cap, &odone);
		if (err) return sg_error(SG_ERR_INTERNAL, "audio: soxr: %s", err);
		done_in += idone;
		sg_status st = encode(e, e->tmp, odone);
		if (st) return st;
		if (x ? done_in >= n && odone < e->tmp_cap : odone == 0) return SG_OK;
	}
}

sg_status audio_encoder_push(audio_encoder *e, const float *pcm, size_t n)
{
	if (!e || (!pcm && n)) return SG_FAIL(SG_ERR_INVALID_ARG, "a NULL argument");
	if (e->finished) return SG_FAIL(SG_ERR_INVALID_ARG, "the encoder is finished");
	sg_status st = header(e);
	if (st || !n) return st;
	return e->soxr ? resample(e, pcm, n) : encode(e, pcm, n);
}

sg_status audio_encoder_finish(audio_encoder *e)
{
	if (!e) return SG_FAIL(SG_ERR_INVALID_ARG, "e is NULL");
	if (e->finished) return SG_OK;
	sg_status st = header(e);
	if (!st && e->soxr) st = resample(e, NULL, 0);
	e->finished = 1;
	return st;
}

void audio_encoder_free(audio_encoder *e)
{
	if (!e) return;
	if (e->soxr) soxr_delete(e->soxr);
	sg_free(e->tmp);
	sg_free(e->bytes);
	sg_free(e);
}
