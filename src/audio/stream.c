/* Audio as a stream of 16 kHz mono samples (see stream.h). */
#include "audio/stream.h"

#include <errno.h>
#include <sndfile.h>
#include <soxr.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "audio/decode.h"
#include "audio/vio.h"
#include "base/alloc.h"
#include "base/error.h"

#define BLOCK_FRAMES 4096 /* source frames per read, as decode.c reads them */
#define MAX_CHANNELS 64
#define MIN_RATE 1000
#define MAX_RATE 768000

/* Where the bytes come from: a path, or libsndfile's virtual I/O over memory or a file
 * descriptor (read with pread, so the descriptor's own offset is never used). */
enum { SRC_PATH, SRC_MEM, SRC_FD };

struct sg_audio_stream {
	int kind;          /* SRC_* */
	char *path;        /* SRC_PATH: the file; else the name used in messages */
	sg_audio_bytes src; /* SRC_MEM, SRC_FD: the bytes (vio.h) */
	int pcm_rate, pcm_channels; /* raw s16le PCM when pcm_rate > 0 */
	SNDFILE *f;
	SF_INFO info;
	soxr_t soxr;       /* NULL at 16 kHz */
	float *block;      /* [BLOCK_FRAMES * channels] */
	float *mono;       /* [BLOCK_FRAMES] */
	float *fifo;       /* [fifo_cap] resampled samples not handed out yet, from fifo_off */
	size_t fifo_off, fifo_n, fifo_cap;
	size_t n_in, n_out; /* source frames fed to the resampler, samples it gave (after the length fix) */
	int eof;           /* the file is read and the resampler flushed */
};

static void close_file(sg_audio_stream *s)
{
	if (s->f) sf_close(s->f);
	if (s->soxr) soxr_delete(s->soxr);
	s->f = NULL;
	s->soxr = NULL;
}

static sg_status refill(sg_audio_stream *s);

static sg_status open_file(sg_audio_stream *s)
{
	memset(&s->info, 0, sizeof s->info);
	if (s->pcm_rate) {
		s->info.format = SF_FORMAT_RAW | SF_FORMAT_PCM_16 | SF_ENDIAN_LITTLE;
		s->info.samplerate = s->pcm_rate;
		s->info.channels = s->pcm_channels;
	}
	if (s->kind == SRC_PATH) {
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
	} else {
		s->f = sg_audio_bytes_open(&s->src, &s->info);
		if (!s->f)
			return SG_FAIL(SG_ERR_FORMAT, "%s is not audio this build reads (%lld bytes): %s", s->path, (long long)s->src.size,
				       sf_strerror(NULL));
	}
	int rate = s->info.samplerate, ch = s->info.channels;
	if (rate < MIN_RATE || rate > MAX_RATE)
		return SG_FAIL(SG_ERR_UNSUPPORTED, "sample rate %d Hz is outside [%d, %d]", rate, MIN_RATE, MAX_RATE);
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
	s->n_in = s->n_out = 0;
	s->eof = 0;
	/* the first samples (a resampler may give none for a first short block): audio with none at
	 * all is an error here, where the caller can still say the input is not audio */
	while (!s->fifo_n && !s->eof) {
		sg_status st = refill(s);
		if (st) return st;
	}
	if (s->eof) return SG_FAIL(SG_ERR_FORMAT, "%s holds no audio samples", s->path);
	return SG_OK;
}

/* Takes s (freed on failure) and opens it. */
static sg_status start(sg_audio_stream *s, sg_audio_stream **out)
{
	sg_status st = open_file(s);
	if (st) {
		sg_audio_stream_close(s);
		return st;
	}
	*out = s;
	return SG_OK;
}

static sg_audio_stream *stream_new(int kind, const char *name)
{
	sg_audio_stream *s = sg_calloc(1, sizeof *s);
	if (!s) return NULL;
	s->kind = kind;
	s->src.fd = -1;
	if (!(s->path = sg_strdup(name))) {
		sg_free(s);
		return NULL;
	}
	return s;
}

sg_status sg_audio_stream_open(const char *path, sg_audio_stream **out)
{
	*out = NULL;
	if (!path) return SG_FAIL(SG_ERR_INVALID_ARG, "NULL path");
	sg_audio_stream *s = stream_new(SRC_PATH, path);
	if (!s) return SG_FAIL(SG_ERR_NOMEM, "out of memory");
	return start(s, out);
}

sg_status sg_audio_stream_open_memory(const void *data, size_t size, sg_audio_stream **out)
{
	*out = NULL;
	if (size == 0) return SG_FAIL(SG_ERR_FORMAT, "the input is empty (0 bytes)");
	if (!data) return SG_FAIL(SG_ERR_INVALID_ARG, "NULL data");
	sg_audio_stream *s = stream_new(SRC_MEM, "the input");
	if (!s) return SG_FAIL(SG_ERR_NOMEM, "out of memory");
	s->src.data = data;
	s->src.size = (sf_count_t)size;
	return start(s, out);
}

sg_status sg_audio_stream_open_fd(int fd, const char *name, int pcm_rate, int pcm_channels, sg_audio_stream **out)
{
	*out = NULL;
	if (!name) name = "the input";
	struct stat sb;
	if (fd < 0 || fstat(fd, &sb)) return SG_FAIL(SG_ERR_IO, "cannot read %s: %s", name, strerror(fd < 0 ? EBADF : errno));
	if (!S_ISREG(sb.st_mode)) return SG_FAIL(SG_ERR_INVALID_ARG, "%s is not a regular file (it is read twice)", name);
	size_t n = (size_t)sb.st_size;
	if (pcm_rate) {
		if (pcm_rate < MIN_RATE || pcm_rate > MAX_RATE)
			return SG_FAIL(SG_ERR_INVALID_ARG, "PCM rate %d Hz is outside [%d, %d]", pcm_rate, MIN_RATE, MAX_RATE);
		if (pcm_channels < 1 || pcm_channels > MAX_CHANNELS)
			return SG_FAIL(SG_ERR_INVALID_ARG, "PCM channels %d is outside [1, %d]", pcm_channels, MAX_CHANNELS);
		size_t frame = 2 * (size_t)pcm_channels;
		if (!n) return SG_FAIL(SG_ERR_FORMAT, "the PCM audio on %s is empty (0 bytes)", name);
		/* libsndfile would drop a partial last frame without a word */
		if (n % frame)
			return SG_FAIL(SG_ERR_FORMAT,
				       "PCM audio of %zu bytes on %s is truncated: not a whole number of %zu-byte frames (%d channels of 16 bits)",
				       n, name, frame, pcm_channels);
	} else if (!n) {
		return SG_FAIL(SG_ERR_FORMAT, "%s is empty (0 bytes)", name);
	}
	sg_audio_stream *s = stream_new(SRC_FD, name);
	if (!s) return SG_FAIL(SG_ERR_NOMEM, "out of memory");
	s->src.fd = fd;
	s->src.size = (sf_count_t)n;
	s->pcm_rate = pcm_rate;
	s->pcm_channels = pcm_channels;
	return start(s, out);
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
		s->n_out += odone;
		done_in += idone;
		if (got ? done_in >= (size_t)got && odone < room : odone == 0) break;
	}
	s->n_in += (size_t)got;
	if (!got) {
		/* flushed: to the length decode.c gives (sg_audio_resampled_len), zeros added or the
		 * excess cut (only the flush can overshoot, and its samples are all still here) */
		size_t want = sg_audio_resampled_len(s->n_in, s->info.samplerate, SG_AUDIO_RATE);
		size_t cut = s->n_out > want ? s->n_out - want : 0;
		if (cut > s->fifo_n) cut = s->fifo_n;
		s->fifo_n -= cut, s->n_out -= cut;
		if (s->n_out < want) {
			size_t pad = want - s->n_out;
			if (s->fifo_cap - s->fifo_n < pad) {
				float *p = sg_realloc(s->fifo, sizeof(float) * (s->fifo_n + pad));
				if (!p) return SG_FAIL(SG_ERR_NOMEM, "no memory for the resampler's output");
				s->fifo = p;
				s->fifo_cap = s->fifo_n + pad;
			}
			memset(s->fifo + s->fifo_n, 0, sizeof(float) * pad);
			s->fifo_n += pad, s->n_out += pad;
		}
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
