/* Audio out (see encode.h): clip, resample (soxr), then one writer per format. WAV, raw PCM and
 * raw float are written here; FLAC and MP3 by libsndfile through a virtual file that forwards
 * every byte to the writer; Opus by libopusenc through its callbacks. */
#include "audio/encode.h"

#include <math.h>
#include <opus/opusenc.h>
#include <sndfile.h>
#include <soxr.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"

#define MIN_RATE 1000
#define MAX_RATE 768000
#define BLOCK 4096            /* samples converted / resampled per step */
#define WAV_HEADER 44
#define OPUS_SERIAL 0x53415241 /* fixed, so that the same samples give the same bytes */
#define MP3_LEVEL 0.65       /* libsndfile's compression level: the CBR bit rate (open_sndfile) */
#define OPUS_PAGE_DELAY 4800   /* 100 ms at 48 kHz: an Ogg page leaves at least this often */

enum { K_WAV, K_PCM, K_F32, K_FLAC, K_MP3, K_OPUS };

static const struct {
	const char *name;
	int kind;
	const char *mime;
} formats[] = {
	{"wav", K_WAV, "audio/wav"},     {"pcm", K_PCM, "audio/pcm"},   {"f32", K_F32, "audio/x-f32"},
	{"flac", K_FLAC, "audio/flac"},  {"mp3", K_MP3, "audio/mpeg"},  {"opus", K_OPUS, "audio/ogg"},
};
#define N_FORMATS (sizeof formats / sizeof *formats)

struct audio_encoder {
	int kind;
	int in_rate, out_rate;
	audio_write_fn w;
	void *user;
	sg_status failed;  /* sticky: the first error, or SG_ERR_CANCELLED when w asked to stop */
	int finished;
	uint64_t n_out;    /* samples written at out_rate */
	uint64_t n_bytes;  /* bytes handed to w */
	soxr_t soxr;       /* NULL when in_rate == out_rate */
	float *clip;       /* [BLOCK] clipped input */
	float *rs;         /* [rs_cap] resampler output */
	size_t rs_cap;
	unsigned char *conv; /* [BLOCK * 4] raw sample bytes */
	/* libsndfile's virtual file: vend bytes have left; a write below vend (a header rewritten
	 * at close) cannot reach a stream and is dropped */
	SNDFILE *sf;
	sf_count_t vpos, vend;
	/* libopusenc */
	OggOpusEnc *ope;
	OggOpusComments *com;
	float *frame;      /* [frame_len] samples waiting for a whole 20 ms frame */
	size_t frame_len, frame_n;
};

static int find_format(const char *name)
{
	for (size_t i = 0; name && i < N_FORMATS; i++)
		if (!strcmp(name, formats[i].name)) return formats[i].kind;
	return -1;
}

const char *audio_format_mime(const char *format)
{
	for (size_t i = 0; format && i < N_FORMATS; i++)
		if (!strcmp(format, formats[i].name)) return formats[i].mime;
	return "application/octet-stream";
}

static int mp3_writable(void)
{
	SF_INFO si = {.samplerate = 24000, .channels = 1, .format = SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III};
	return sf_format_check(&si);
}

int audio_format_available(const char *format)
{
	int k = find_format(format);
	return k == K_MP3 ? mp3_writable() : k >= 0;
}

static sg_status fail_sticky(audio_encoder *e, sg_status st)
{
	if (!e->failed) e->failed = st;
	return st;
}

/* Every encoded byte leaves here. */
static void emit(audio_encoder *e, const void *bytes, size_t n)
{
	if (e->failed || !n) return;
	if (e->w(bytes, n, e->user)) {
		e->failed = sg_error(SG_ERR_CANCELLED, "audio encoder: the writer stopped the stream after %llu bytes",
				     (unsigned long long)e->n_bytes);
		return;
	}
	e->n_bytes += n;
}

static void put_le16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
}

static void put_le32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* RIFF/WAVE, one fmt chunk (PCM, mono, 16-bit), then data: 44 bytes. */
static void wav_header(unsigned char h[WAV_HEADER], int rate, uint32_t riff_size, uint32_t data_size)
{
	memcpy(h, "RIFF", 4);
	put_le32(h + 4, riff_size);
	memcpy(h + 8, "WAVEfmt ", 8);
	put_le32(h + 16, 16);
	put_le16(h + 20, 1);                      /* PCM */
	put_le16(h + 22, 1);                      /* channels */
	put_le32(h + 24, (uint32_t)rate);
	put_le32(h + 28, (uint32_t)rate * 2);     /* bytes per second */
	put_le16(h + 32, 2);                      /* block align */
	put_le16(h + 34, 16);                     /* bits per sample */
	memcpy(h + 36, "data", 4);
	put_le32(h + 40, data_size);
}

static int16_t to_s16(float x)
{
	float v = x * 32767.0f;
	if (!(v > -32768.0f)) return v != v ? 0 : -32768; /* NaN: silence */
	if (v >= 32767.0f) return 32767;
	return (int16_t)lrintf(v);
}

/* The samples waiting in e->frame to libopusenc. */
static void opus_frame(audio_encoder *e)
{
	if (!e->frame_n) return;
	int r = ope_encoder_write_float(e->ope, e->frame, (int)e->frame_n);
	e->frame_n = 0;
	if (r != OPE_OK && !e->failed) fail_sticky(e, sg_error(SG_ERR_INTERNAL, "audio encoder: libopusenc: %s", ope_strerror(r)));
}

/* n samples at out_rate (already clipped) to the format. */
static void write_out(audio_encoder *e, const float *x, size_t n)
{
	if (e->failed || !n) return;
	e->n_out += n;
	switch (e->kind) {
	case K_WAV:
	case K_PCM:
		for (size_t o = 0; o < n && !e->failed; o += BLOCK) {
			size_t m = n - o < BLOCK ? n - o : BLOCK;
			for (size_t i = 0; i < m; i++) put_le16(e->conv + 2 * i, (uint16_t)to_s16(x[o + i]));
			emit(e, e->conv, 2 * m);
		}
		break;
	case K_F32:
		for (size_t o = 0; o < n && !e->failed; o += BLOCK) {
			size_t m = n - o < BLOCK ? n - o : BLOCK;
			for (size_t i = 0; i < m; i++) {
				uint32_t u;
				memcpy(&u, &x[o + i], 4);
				put_le32(e->conv + 4 * i, u);
			}
			emit(e, e->conv, 4 * m);
		}
		break;
	case K_FLAC:
	case K_MP3: {
		sf_count_t got = sf_writef_float(e->sf, x, (sf_count_t)n);
		if (!e->failed && got != (sf_count_t)n)
			fail_sticky(e, sg_error(SG_ERR_INTERNAL, "audio encoder: libsndfile wrote %lld of %zu samples: %s",
						(long long)got, n, sf_strerror(e->sf)));
		break;
	}
	case K_OPUS:
		/* libopusenc is fed whole 20 ms frames only: how it cuts pages depends on the sizes
		 * it is given, and the bytes must not depend on how the samples arrived */
		for (size_t o = 0; o < n && !e->failed;) {
			size_t m = e->frame_len - e->frame_n;
			if (m > n - o) m = n - o;
			memcpy(e->frame + e->frame_n, x + o, m * sizeof *x);
			e->frame_n += m;
			o += m;
			if (e->frame_n == e->frame_len) opus_frame(e);
		}
		break;
	}
}

/* In-rate samples through the resampler (x NULL: flush it). */
static void resample(audio_encoder *e, const float *x, size_t n)
{
	size_t done = 0;
	for (;;) {
		size_t idone = 0, odone = 0;
		soxr_error_t err = soxr_process(e->soxr, x ? x + done : NULL, x ? n - done : 0, &idone, e->rs, e->rs_cap, &odone);
		if (err) {
			fail_sticky(e, sg_error(SG_ERR_INTERNAL, "audio encoder: soxr_process: %s", err));
			return;
		}
		for (size_t i = 0; i < odone; i++) e->rs[i] = e->rs[i] > 1.0f ? 1.0f : e->rs[i] < -1.0f ? -1.0f : e->rs[i];
		write_out(e, e->rs, odone);
		if (e->failed) return;
		done += idone;
		if (x ? done >= n && odone < e->rs_cap : odone == 0) return;
	}
}

/* ---- libsndfile's virtual file: bytes go to the writer as they come ---- */

static sf_count_t vio_len(void *u)
{
	return ((audio_encoder *)u)->vend;
}

static sf_count_t vio_seek(sf_count_t off, int whence, void *u)
{
	audio_encoder *e = u;
	sf_count_t base = whence == SEEK_CUR ? e->vpos : whence == SEEK_END ? e->vend : 0;
	sf_count_t p = base + off;
	if (p < 0 || p > e->vend) return -1;
	e->vpos = p;
	return p;
}

static sf_count_t vio_read(void *ptr, sf_count_t n, void *u)
{
	(void)ptr;
	(void)n;
	(void)u;
	return 0; /* nothing written can be read back: the bytes have left */
}

static sf_count_t vio_write(const void *ptr, sf_count_t n, void *u)
{
	audio_encoder *e = u;
	sf_count_t skip = e->vend - e->vpos; /* bytes of this write that were already sent */
	if (skip < 0) skip = 0;
	if (skip < n) emit(e, (const char *)ptr + skip, (size_t)(n - skip));
	e->vpos += n;
	if (e->vpos > e->vend) e->vend = e->vpos;
	return n;
}

static sf_count_t vio_tell(void *u)
{
	return ((audio_encoder *)u)->vpos;
}

static SF_VIRTUAL_IO vio = {vio_len, vio_seek, vio_read, vio_write, vio_tell};

static sg_status open_sndfile(audio_encoder *e)
{
	SF_INFO si = {.samplerate = e->out_rate, .channels = 1};
	si.format = e->kind == K_FLAC ? SF_FORMAT_FLAC | SF_FORMAT_PCM_16 : SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III;
	if (e->kind == K_MP3 && !mp3_writable())
		return sg_error(SG_ERR_UNSUPPORTED, "audio encoder: this libsndfile (%s) has no MPEG Layer III writer: mp3 "
						    "is not available; use wav, flac, opus or pcm",
				sf_version_string());
	if (!sf_format_check(&si))
		return sg_error(SG_ERR_INVALID_ARG, "audio encoder: %s cannot be written at %d Hz", e->kind == K_FLAC ? "flac" : "mp3",
				e->out_rate);
	e->sf = sf_open_virtual(&vio, SFM_WRITE, &si, e);
	if (!e->sf) return sg_error(SG_ERR_INTERNAL, "audio encoder: libsndfile cannot open a %s writer: %s",
				    e->kind == K_FLAC ? "flac" : "mp3", sf_strerror(NULL));
	/* input is clipped already; floats in [-1, 1] map to the full 16-bit range */
	sf_command(e->sf, SFC_SET_CLIPPING, NULL, SF_TRUE);
	if (e->kind == K_MP3) {
		/* Constant bit rate: a stream's header cannot be rewritten at the end (the VBR tag
		 * LAME leaves at the front stays blank), and without it a decoder measures the length
		 * from the first frame's rate, which only CBR makes right. Level 0.65 is about 64
		 * kbit/s at 22-24 kHz and 112 at 44-48 kHz: clear speech. */
		int mode = SF_BITRATE_MODE_CONSTANT;
		double level = MP3_LEVEL;
		/* (the two commands do not agree on what they return: libsndfile's error state says) */
		sf_command(e->sf, SFC_SET_BITRATE_MODE, &mode, sizeof mode);
		if (!sf_error(e->sf)) sf_command(e->sf, SFC_SET_COMPRESSION_LEVEL, &level, sizeof level);
		if (sf_error(e->sf))
			return sg_error(SG_ERR_INTERNAL, "audio encoder: libsndfile refuses the mp3 bit rate: %s", sf_strerror(e->sf));
	}
	return e->failed;
}

/* ---- libopusenc ---- */

static int ope_write(void *u, const unsigned char *ptr, opus_int32 len)
{
	audio_encoder *e = u;
	emit(e, ptr, (size_t)len);
	return e->failed ? 1 : 0;
}

static int ope_close(void *u)
{
	(void)u;
	return 0;
}

static sg_status open_opus(audio_encoder *e)
{
	static const OpusEncCallbacks cb = {ope_write, ope_close};
	int err = 0;
	e->frame_len = (size_t)e->out_rate / 50;
	e->frame = sg_malloc(e->frame_len * sizeof *e->frame);
	if (!e->frame) return SG_FAIL(SG_ERR_NOMEM, "Opus frame");
	e->com = ope_comments_create();
	if (!e->com) return SG_FAIL(SG_ERR_NOMEM, "Ogg Opus comments");
	e->ope = ope_encoder_create_callbacks(&cb, e, e->com, e->out_rate, 1, 0, &err);
	if (!e->ope) return sg_error(SG_ERR_INTERNAL, "audio encoder: libopusenc: %s", ope_strerror(err));
	/* a fixed serial number (the same samples give the same bytes); pages every 100 ms and no
	 * look-ahead beyond a frame, so the audio leaves as it is made (the default waits 1 s + 2 s) */
	if ((err = ope_encoder_ctl(e->ope, OPE_SET_SERIALNO(OPUS_SERIAL))) ||
	    (err = ope_encoder_ctl(e->ope, OPE_SET_MUXING_DELAY(OPUS_PAGE_DELAY))) ||
	    (err = ope_encoder_ctl(e->ope, OPE_SET_DECISION_DELAY(0))) || (err = ope_encoder_flush_header(e->ope)))
		return sg_error(SG_ERR_INTERNAL, "audio encoder: libopusenc: %s", ope_strerror(err));
	return e->failed;
}

/* ---- the encoder ---- */

static int mp3_rate(int r)
{
	static const int rates[] = {8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000};
	for (size_t i = 0; i < sizeof rates / sizeof *rates; i++)
		if (r <= rates[i]) return rates[i];
	return 48000;
}

static int is_mp3_rate(int r)
{
	return mp3_rate(r) == r;
}

static int is_opus_rate(int r)
{
	return r == 8000 || r == 12000 || r == 16000 || r == 24000 || r == 48000;
}

sg_status audio_encoder_open(const char *format, int in_rate, int out_rate, audio_write_fn w, void *user, audio_encoder **out)
{
	*out = NULL;
	int kind = find_format(format);
	if (kind < 0) {
		if (format && !strcmp(format, "aac"))
			return sg_error(SG_ERR_UNSUPPORTED, "audio format 'aac' is not available: this build has no AAC encoder; the "
							    "formats are wav, mp3, opus, flac, pcm and f32");
		return sg_error(SG_ERR_UNSUPPORTED, "unknown audio format '%.40s'; the formats are wav, mp3, opus, flac, pcm and f32",
				format ? format : "(null)");
	}
	if (!w) return sg_error(SG_ERR_INVALID_ARG, "audio encoder: no writer");
	if (in_rate < MIN_RATE || in_rate > MAX_RATE)
		return sg_error(SG_ERR_INVALID_ARG, "audio encoder: input rate %d Hz is outside [%d, %d]", in_rate, MIN_RATE, MAX_RATE);
	if (out_rate == 0)
		out_rate = kind == K_OPUS ? 48000 : kind == K_PCM ? 24000 : kind == K_MP3 ? mp3_rate(in_rate) : in_rate;
	if (out_rate < MIN_RATE || out_rate > MAX_RATE)
		return sg_error(SG_ERR_INVALID_ARG, "audio encoder: output rate %d Hz is outside [%d, %d]", out_rate, MIN_RATE, MAX_RATE);
	if (kind == K_OPUS && !is_opus_rate(out_rate))
		return sg_error(SG_ERR_INVALID_ARG, "audio encoder: opus is coded at 8000, 12000, 16000, 24000 or 48000 Hz, not %d",
				out_rate);
	if (kind == K_MP3 && !is_mp3_rate(out_rate))
		return sg_error(SG_ERR_INVALID_ARG, "audio encoder: mp3 carries the MPEG rates (8000 to 48000 Hz), not %d", out_rate);
	audio_encoder *e = sg_calloc(1, sizeof *e);
	if (!e) return SG_FAIL(SG_ERR_NOMEM, "audio encoder");
	e->kind = kind;
	e->in_rate = in_rate;
	e->out_rate = out_rate;
	e->w = w;
	e->user = user;
	e->clip = sg_malloc(BLOCK * sizeof *e->clip);
	e->conv = sg_malloc(BLOCK * 4);
	sg_status st = e->clip && e->conv ? SG_OK : SG_FAIL(SG_ERR_NOMEM, "audio encoder buffers");
	if (!st && in_rate != out_rate) {
		soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
		soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
		soxr_error_t err = NULL;
		e->soxr = soxr_create(in_rate, out_rate, 1, &err, &io, &q, NULL);
		if (!e->soxr || err)
			st = sg_error(SG_ERR_INTERNAL, "audio encoder: soxr_create(%d -> %d Hz): %s", in_rate, out_rate,
				      err ? err : "failed");
		/* a block's output, plus room for what the filter holds back */
		e->rs_cap = (size_t)((double)BLOCK * out_rate / in_rate) + 4096;
		if (!st && !(e->rs = sg_malloc(e->rs_cap * sizeof *e->rs))) st = SG_FAIL(SG_ERR_NOMEM, "resampler output");
	}
	if (!st) {
		if (kind == K_WAV) {
			/* the length is not known yet: the sizes a stream of unknown length carries */
			unsigned char h[WAV_HEADER];
			wav_header(h, out_rate, 0xFFFFFFFFu, 0xFFFFFFFFu);
			emit(e, h, sizeof h);
			st = e->failed;
		} else if (kind == K_FLAC || kind == K_MP3) {
			st = open_sndfile(e);
		} else if (kind == K_OPUS) {
			st = open_opus(e);
		}
	}
	if (st) {
		audio_encoder_free(e);
		return st;
	}
	*out = e;
	return SG_OK;
}

sg_status audio_encoder_push(audio_encoder *e, const float *pcm, size_t n)
{
	if (!e) return sg_error(SG_ERR_INVALID_ARG, "audio_encoder_push: no encoder");
	if (e->failed) return e->failed;
	if (e->finished) return sg_error(SG_ERR_INVALID_ARG, "audio_encoder_push: the encoder is finished");
	if (n && !pcm) return sg_error(SG_ERR_INVALID_ARG, "audio_encoder_push: %zu samples at NULL", n);
	for (size_t o = 0; o < n && !e->failed; o += BLOCK) {
		size_t m = n - o < BLOCK ? n - o : BLOCK;
		for (size_t i = 0; i < m; i++) {
			float x = pcm[o + i];
			e->clip[i] = x > 1.0f ? 1.0f : x < -1.0f ? -1.0f : x != x ? 0.0f : x;
		}
		if (e->soxr) resample(e, e->clip, m);
		else write_out(e, e->clip, m);
	}
	return e->failed;
}

sg_status audio_encoder_finish(audio_encoder *e)
{
	if (!e) return sg_error(SG_ERR_INVALID_ARG, "audio_encoder_finish: no encoder");
	if (e->failed) return e->failed;
	if (e->finished) return sg_error(SG_ERR_INVALID_ARG, "audio_encoder_finish: called twice");
	e->finished = 1;
	if (e->soxr) resample(e, NULL, 0);
	if (e->sf) {
		/* libFLAC / LAME flush their last frames as the file closes */
		int r = sf_close(e->sf);
		e->sf = NULL;
		if (r && !e->failed) fail_sticky(e, sg_error(SG_ERR_INTERNAL, "audio encoder: libsndfile close: %s", sf_error_number(r)));
	}
	if (e->ope) {
		opus_frame(e);
		int r = e->failed ? OPE_OK : ope_encoder_drain(e->ope);
		if (r != OPE_OK && !e->failed) fail_sticky(e, sg_error(SG_ERR_INTERNAL, "audio encoder: libopusenc: %s", ope_strerror(r)));
	}
	return e->failed;
}

void audio_encoder_free(audio_encoder *e)
{
	if (!e) return;
	if (e->sf) sf_close(e->sf);
	if (e->ope) ope_encoder_destroy(e->ope);
	if (e->com) ope_comments_destroy(e->com);
	if (e->soxr) soxr_delete(e->soxr);
	sg_free(e->clip);
	sg_free(e->rs);
	sg_free(e->conv);
	sg_free(e->frame);
	sg_free(e);
}

int audio_encoder_out_rate(const audio_encoder *e)
{
	return e->out_rate;
}

uint64_t audio_encoder_samples(const audio_encoder *e)
{
	return e->n_out;
}

uint64_t audio_encoder_bytes(const audio_encoder *e)
{
	return e->n_bytes;
}

sg_status audio_encoder_fix_header(const audio_encoder *e, void *head, size_t len)
{
	unsigned char *h = head;
	if (!e->finished || e->failed) return sg_error(SG_ERR_INVALID_ARG, "audio_encoder_fix_header: the encoder did not finish");
	if (e->kind == K_WAV) {
		if (len < WAV_HEADER || memcmp(h, "RIFF", 4))
			return sg_error(SG_ERR_INVALID_ARG, "audio_encoder_fix_header: %zu bytes do not hold the WAV header", len);
		uint64_t data = e->n_bytes - WAV_HEADER;
		/* past 4 GiB the sizes cannot be said: they stay "unknown" */
		if (data + WAV_HEADER - 8 > 0xFFFFFFFFu) return SG_OK;
		put_le32(h + 4, (uint32_t)(data + WAV_HEADER - 8));
		put_le32(h + 40, (uint32_t)data);
	} else if (e->kind == K_FLAC) {
		/* "fLaC", the STREAMINFO block header (4), then at byte 8 + 10: rate (20 bits), channels - 1
		 * (3), bits - 1 (5), total samples (36) */
		if (len < 42 || memcmp(h, "fLaC", 4) || (h[4] & 0x7F) != 0)
			return sg_error(SG_ERR_INVALID_ARG, "audio_encoder_fix_header: %zu bytes do not hold the FLAC header", len);
		uint64_t t = e->n_out;
		if (t >> 36) return SG_OK;
		unsigned char *p = h + 8 + 13; /* the byte whose low 4 bits start the total */
		p[0] = (unsigned char)((p[0] & 0xF0) | (unsigned)(t >> 32));
		p[1] = (unsigned char)(t >> 24);
		p[2] = (unsigned char)(t >> 16);
		p[3] = (unsigned char)(t >> 8);
		p[4] = (unsigned char)t;
	}
	return SG_OK;
}

sg_status audio_encoder_fix_file(const audio_encoder *e, FILE *f)
{
	if (e->kind != K_WAV && e->kind != K_FLAC) return SG_OK;
	unsigned char h[64];
	long end;
	if (fflush(f) || (end = ftell(f)) < 0 || fseek(f, 0, SEEK_SET))
		return sg_error(SG_ERR_IO, "audio_encoder_fix_file: the file cannot seek: its header keeps the unknown length");
	size_t got = fread(h, 1, sizeof h, f);
	sg_status st = audio_encoder_fix_header(e, h, got);
	if (!st && (fseek(f, 0, SEEK_SET) || fwrite(h, 1, got, f) != got))
		st = sg_error(SG_ERR_IO, "audio_encoder_fix_file: cannot rewrite the header");
	if (fseek(f, end, SEEK_SET) && !st) st = sg_error(SG_ERR_IO, "audio_encoder_fix_file: cannot seek back to the end");
	return st;
}
