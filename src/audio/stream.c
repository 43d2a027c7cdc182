/* Audio as a stream of 16 kHz mono samples (see stream.h). */
#include "audio/stream.h"

#include <sndfile.h>
#include <soxr.h>
#include <stdio.h>
#include <string.h>

#include "audio/decode.h"
#include "base/alloc.h"
#include "base/error.h"

#define BLOCK_FRAMES 4096 /* source frames per read, as decode.c reads them */
#define MAX_CHANNELS 64

struct sg_audio_stream {
	char *path;
	SNDFILE *f;
	SF_INFO info;
	soxr_t soxr;       /* NULL at 16 kHz */
	float *block;      /* [BLOCK_FRAMES * channels] */
	float *mono;       /* [BLOCK_FRAMES] */
	float *fifo;       /* [fifo_cap] resampled samples not handed out yet, from fifo_off */
	size_t fifo_off, fifo_n, fifo_cap;
	int eof;           /* the file is read and the resampler flushed */
	size_t total;      /* samples handed out so far */
};

static void close_file(sg_audio_stream *s)
{
	if (s->f) sf_close(s->f);
	if (s->soxr) soxr_delete(s->soxr);
	s->f = NULL;
	s->soxr = NULL;
}

static sg_status open_file(sg_audio_stream *s)
{
	memset(&s->info, 0, sizeof s->info);
	s->f = sf_open(s->path, SFM_READ, &s->info);
	if (!s->f) {
		const char *why = sf_strerror(NULL);
		FILE *probe = fopen(s->path, "rb");
		if (!probe) return SG_FAIL(SG_ERR_IO, "cannot open %s", s->path);
		int empty = fgetc(probe) == EOF;
		fclose(probe);
		if (empty) return SG_FAIL(SG_ERR_FORMAT, "%s is empty", s->path);
		return SG_FAIL(SG_ERR_FORMAT, "%s is not audio this build reads: %s", s->path, why);
	}
	int rate = s->info.samplerate, ch = s->info.channels;
	if (rate < 1000 || rate > 768000)
		return SG_FAIL(SG_ERR_UNSUPPORTED, "sample rate %d Hz is outside [1000, 768000]", rate);
	if (ch < 1 || ch > MAX_CHANNELS) return SG_FAIL(SG_ERR_UNSUPPORTED, "%d channels is outside [1, %d]", ch, MAX_CHANNELS);
	if (!s->block) {
		s->block = sg_malloc(sizeof(float) * BLOCK_FRAMES * (size_t)ch);
		s->mono = sg_malloc(sizeof(float) * BLOCK_FRAMES);
		s->fifo_cap = (size_t)BLOCK_FRAMES * SG_AUDIO_RATE / (size_t)rate + 4096;
		s->fifo = sg_malloc(sizeof(float) * s->fifo_cap);
		if (!s->block || !s->mono || !s->fifo) return SG_FAIL(SG_ERR_NOMEM, "no memory for a decode block");
	}
	if (rate != SG_AUDIO_RATE) {
		soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
		soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
		soxr_error_t err = NULL;
		s->soxr = soxr_create(rate, SG_AUDIO_RATE, 1, &err, &io, &q, NULL);
		if (!s->soxr || err) return SG_FAIL(SG_ERR_INTERNAL, "soxr_create(%d -> %d Hz): %s", rate, SG_AUDIO_RATE, err ? err : "failed");
	}
	s->fifo_off = s->fifo_n = 0;
	s->eof = 0;
	s->total = 0;
	return SG_OK;
}

sg_status sg_audio_stream_open(const char *path, sg_audio_stream **out)
{
	*out = NULL;
	if (!path) return SG_FAIL(SG_ERR_INVALID_ARG, "NULL path");
	sg_audio_stream *s = sg_calloc(1, sizeof *s);
	if (!s || !(s->path = sg_strdup(path))) {
		sg_free(s);
		return SG_FAIL(SG_ERR_NOMEM, "out of memory");
	}
	sg_status st = open_file(s);
	if (st) {
		sg_audio_stream_close(s);
		return st;
	}
	*out = s;
	return SG_OK;
}

/* Refills the FIFO with the next block's samples (or the resampler's flush at the end). */
static sg_status refill(sg_audio_stream *s)
{
	s->fifo_off = s->fifo_n = 0;
	sf_count_t got = sf_readf_float(s->f, s->block, BLOCK_FRAMES);
	if (got < 0 || (got == 0 && sf_error(s->f))) return SG_FAIL(SG_ERR_FORMAT, "%s: %s", s->path, sf_strerror(s->f));
	const int ch = s->info.channels;
	for (sf_count_t i = 0; i < got; i++) {
		float sum = 0.0f;
		for (int c = 0; c < ch; c++) sum += s->block[i * ch + c];
		s->mono[i] = sum / (float)ch;
	}
	if (!s->soxr) {
		memcpy(s->fifo, s->mono, sizeof(float) * (size_t)got);
		s->fifo_n = (size_t)got;
		if (!got) s->eof = 1;
		return SG_OK;
	}
	/* as decode.c feeds it: until the block is consumed and an output did not fill the buffer
	 * (at the end, until the flush gives nothing more) */
	size_t done_in = 0;
	for (;;) {
		if (s->fifo_cap - s->fifo_n < 1024) {
			size_t cap = s->fifo_cap * 2;
			float *p = sg_realloc(s->fifo, sizeof(float) * cap);
			if (!p) return SG_FAIL(SG_ERR_NOMEM, "no memory for the resampler's output");
			s->fifo = p;
			s->fifo_cap = cap;
		}
		size_t idone = 0, odone = 0, room = s->fifo_cap - s->fifo_n;
		soxr_error_t err = soxr_process(s->soxr, got ? s->mono + done_in : NULL, got ? (size_t)got - done_in : 0, &idone,
						s->fifo + s->fifo_n, room, &odone);
		if (err) return SG_FAIL(SG_ERR_INTERNAL, "soxr_process: %s", err);
		s->fifo_n += odone;
		done_in += idone;
		if (got ? done_in >= (size_t)got && odone < room : odone == 0) break;
	}
	if (!got && !s->fifo_n) s->eof = 1;
	return SG_OK;
}

sg_status sg_audio_stream_read(sg_audio_stream *s, float *out, size_t max, size_t *got)
{
	*got = 0;
	while (*got < max && !s->eof) {
		if (s->fifo_off == s->fifo_n) {
			sg_status st = refill(s);
			if (st) return st;
			continue;
		}
		size_t k = s->fifo_n - s->fifo_off;
		if (k > max - *got) k = max - *got;
		memcpy(out + *got, s->fifo + s->fifo_off, sizeof(float) * k);
		s->fifo_off += k;
		*got += k;
	}
	s->total += *got;
	if (s->eof && !s->total) return SG_FAIL(SG_ERR_FORMAT, "%s holds no audio samples", s->path);
	return SG_OK;
}

sg_status sg_audio_stream_rewind(sg_audio_stream *s)
{
	close_file(s);
	return open_file(s);
}

void sg_audio_stream_close(sg_audio_stream *s)
{
	if (!s) return;
	close_file(s);
	sg_free(s->block);
	sg_free(s->mono);
	sg_free(s->fifo);
	sg_free(s->path);
	sg_free(s);
}
