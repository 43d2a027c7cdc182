/* Audio decode: libsndfile reads the source in blocks, each block is downmixed to mono and fed
 * to a streaming soxr resampler, so only the 16 kHz result is held whole. */
#include "audio/decode.h"

#include <errno.h>
#include <math.h>
#include <sndfile.h>
#include <soxr.h>
#include <string.h>
#include <unistd.h>

#include "audio/vio.h"
#include "base/alloc.h"
#include "base/error.h"

#define BLOCK_FRAMES 4096 /* source frames read per block */
#define MAX_CHANNELS 64   /* more is not a recording anyone transcribes; bounds the block buffer */
#define MIN_RATE 1000
#define MAX_RATE 768000

/* The 16 kHz output under construction, and the resampler feeding it (NULL at 16 kHz). */
typedef struct {
	sg_audio *a;
	size_t cap;
	int rate;   /* the output's rate */
	soxr_t soxr;
	float *tmp; /* soxr's output for one block */
	size_t tmp_cap;
	size_t n_in; /* source frames fed so far */
} sink;

static sg_status append(sink *s, const float *x, size_t n)
{
	if (s->a->n + n > s->cap) {
		size_t cap = s->cap ? s->cap : 16384;
		while (cap < s->a->n + n) {
			if (cap > SIZE_MAX / 2 / sizeof(float)) return SG_FAIL(SG_ERR_NOMEM, "audio too long");
			cap *= 2;
		}
		float *p = sg_realloc(s->a->samples, cap * sizeof(float));
		if (!p) return SG_FAIL(SG_ERR_NOMEM, "no memory for %zu samples", cap);
		s->a->samples = p;
		s->cap = cap;
	}
	memcpy(s->a->samples + s->a->n, x, n * sizeof(float));
	s->a->n += n;
	return SG_OK;
}

static sg_status sink_open(sink *s, sg_audio *a, int rate, int channels, int to)
{
	memset(s, 0, sizeof(*s));
	memset(a, 0, sizeof(*a));
	s->a = a;
	s->rate = to;
	a->src_rate = rate;
	a->src_channels = channels;
	if (rate < MIN_RATE || rate > MAX_RATE)
		return SG_FAIL(SG_ERR_UNSUPPORTED, "sample rate %d Hz is outside [%d, %d]", rate, MIN_RATE, MAX_RATE);
	if (channels < 1 || channels > MAX_CHANNELS)
		return SG_FAIL(SG_ERR_UNSUPPORTED, "%d channels is outside [1, %d]", channels, MAX_CHANNELS);
	if (rate == to) return SG_OK;
	soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
	soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
	soxr_error_t err = NULL;
	s->soxr = soxr_create(rate, to, 1, &err, &io, &q, NULL);
	if (!s->soxr || err) return SG_FAIL(SG_ERR_INTERNAL, "soxr_create(%d -> %d Hz): %s", rate, to, err ? err : "failed");
	/* a block's output: BLOCK_FRAMES * 16000 / rate, plus room for the filter's delay */
	s->tmp_cap = (size_t)BLOCK_FRAMES * (size_t)to / (size_t)rate + 1024;
	s->tmp = sg_malloc(s->tmp_cap * sizeof(float));
	if (!s->tmp) return SG_FAIL(SG_ERR_NOMEM, "no memory for the resampler's output");
	return SG_OK;
}

/* Feeds n mono samples (n = 0 with x = NULL: the end, flush what the resampler holds). */
static sg_status sink_push(sink *s, const float *x, size_t n)
{
	if (!s->soxr) return x ? append(s, x, n) : SG_OK;
	s->n_in += x ? n : 0;
	size_t done_in = 0;
	for (;;) {
		size_t idone = 0, odone = 0;
		soxr_error_t err = soxr_process(s->soxr, x ? x + done_in : NULL, x ? n - done_in : 0, &idone,
		                                s->tmp, s->tmp_cap, &odone);
		if (err) return SG_FAIL(SG_ERR_INTERNAL, "soxr_process: %s", err);
		sg_status st = append(s, s->tmp, odone);
		if (st) return st;
		done_in += idone;
		if (x ? done_in >= n && odone < s->tmp_cap : odone == 0) return SG_OK;
	}
}

static void sink_close(sink *s)
{
	if (s->soxr) soxr_delete(s->soxr);
	sg_free(s->tmp);
}

size_t sg_audio_resampled_len(size_t n, int from, int to)
{
	/* librosa: ratio = float(target_sr) / orig_sr; n_samples = int(np.ceil(n * ratio)) */
	double ratio = (double)to / (double)from;
	return (size_t)ceil((double)n * ratio);
}

/* Pads the flushed output with zeros (or cuts it) to sg_audio_resampled_len. */
static sg_status fix_length(sink *s)
{
	static const float zeros[64];
	size_t want = sg_audio_resampled_len(s->n_in, s->a->src_rate, s->rate);
	if (s->a->n > want) s->a->n = want;
	while (s->a->n < want) {
		size_t k = want - s->a->n < 64 ? want - s->a->n : 64;
		sg_status st = append(s, zeros, k);
		if (st) return st;
	}
	return SG_OK;
}

static sg_status finish(sink *s, sg_status st, const char *what)
{
	if (!st) st = sink_push(s, NULL, 0);
	if (!st && s->soxr) st = fix_length(s);
	if (!st && s->a->n == 0) st = SG_FAIL(SG_ERR_FORMAT, "%s holds no audio samples", what);
	sink_close(s);
	if (st) sg_audio_free(s->a);
	return st;
}

/* Reads an opened sndfile to the end into *out. */
static sg_status read_sndfile(SNDFILE *f, const SF_INFO *info, const char *what, int to, sg_audio *out)
{
	sink s;
	sg_status st = sink_open(&s, out, info->samplerate, info->channels, to);
	float *block = NULL, *mono = NULL;
	if (!st) {
		block = sg_malloc(sizeof(float) * BLOCK_FRAMES * (size_t)info->channels);
		mono = sg_malloc(sizeof(float) * BLOCK_FRAMES);
		if (!block || !mono) st = SG_FAIL(SG_ERR_NOMEM, "no memory for a decode block");
	}
	while (!st) {
		sf_count_t got = sf_readf_float(f, block, BLOCK_FRAMES);
		if (got <= 0) {
			if (sf_error(f)) st = SG_FAIL(SG_ERR_FORMAT, "%s: %s", what, sf_strerror(f));
			break;
		}
		const int ch = info->channels;
		for (sf_count_t i = 0; i < got; i++) {
			float sum = 0.0f;
			for (int c = 0; c < ch; c++) sum += block[i * ch + c];
			mono[i] = sum / (float)ch;
		}
		st = sink_push(&s, mono, (size_t)got);
	}
	sg_free(block);
	sg_free(mono);
	return finish(&s, st, what);
}

sg_status sg_audio_decode_file(const char *path, sg_audio *out) { return sg_audio_decode_file_at(path, SG_AUDIO_RATE, out); }

sg_status sg_audio_decode_file_at(const char *path, int rate, sg_audio *out)
{
	memset(out, 0, sizeof(*out));
	if (rate < MIN_RATE || rate > MAX_RATE) return SG_FAIL(SG_ERR_INVALID_ARG, "output rate %d Hz is outside [%d, %d]", rate, MIN_RATE, MAX_RATE);
	if (!path) return SG_FAIL(SG_ERR_INVALID_ARG, "NULL path");
	SF_INFO info;
	memset(&info, 0, sizeof(info));
	SNDFILE *f = sf_open(path, SFM_READ, &info);
	if (!f) {
		const char *why = sf_strerror(NULL);
		FILE *probe = fopen(path, "rb");
		if (!probe) return SG_FAIL(SG_ERR_IO, "cannot open %s", path);
		int empty = fgetc(probe) == EOF;
		fclose(probe);
		if (empty) return SG_FAIL(SG_ERR_FORMAT, "%s is empty", path);
		return SG_FAIL(SG_ERR_FORMAT, "%s is not audio this build reads: %s", path, why);
	}
	sg_status st = read_sndfile(f, &info, path, rate, out);
	sf_close(f);
	return st;
}

/* libsndfile's virtual I/O (vio.h) */
static sf_count_t bytes_len(void *user)
{
	return ((sg_audio_bytes *)user)->size;
}

static sf_count_t bytes_seek(sf_count_t off, int whence, void *user)
{
	sg_audio_bytes *m = user;
	sf_count_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? m->pos : m->size;
	sf_count_t to = base + off;
	if (to < 0 || to > m->size) return -1;
	m->pos = to;
	return to;
}

static sf_count_t bytes_read(void *ptr, sf_count_t count, void *user)
{
	sg_audio_bytes *m = user;
	if (count <= 0) return 0;
	if (count > m->size - m->pos) count = m->size - m->pos;
	if (m->data) {
		memcpy(ptr, m->data + m->pos, (size_t)count);
		m->pos += count;
		return count;
	}
	sf_count_t done = 0;
	while (done < count) {
		ssize_t k = pread(m->fd, (char *)ptr + done, (size_t)(count - done), (off_t)(m->pos + done));
		if (k < 0 && errno == EINTR) continue;
		if (k <= 0) break; /* an I/O error reads as the end: libsndfile reports the short read */
		done += k;
	}
	m->pos += done;
	return done;
}

static sf_count_t bytes_write(const void *ptr, sf_count_t count, void *user)
{
	(void)ptr, (void)count, (void)user;
	return 0;
}

static sf_count_t bytes_tell(void *user)
{
	return ((sg_audio_bytes *)user)->pos;
}

SNDFILE *sg_audio_bytes_open(sg_audio_bytes *b, SF_INFO *info)
{
	SF_VIRTUAL_IO io = {bytes_len, bytes_seek, bytes_read, bytes_write, bytes_tell};
	b->pos = 0;
	return sf_open_virtual(&io, SFM_READ, info, b);
}

sg_status sg_audio_decode_memory(const void *data, size_t size, sg_audio *out)
{
	return sg_audio_decode_memory_at(data, size, SG_AUDIO_RATE, out);
}

sg_status sg_audio_decode_memory_at(const void *data, size_t size, int rate, sg_audio *out)
{
	memset(out, 0, sizeof(*out));
	if (rate < MIN_RATE || rate > MAX_RATE) return SG_FAIL(SG_ERR_INVALID_ARG, "output rate %d Hz is outside [%d, %d]", rate, MIN_RATE, MAX_RATE);
	if (size == 0) return SG_FAIL(SG_ERR_FORMAT, "the audio is empty (0 bytes)");
	if (!data) return SG_FAIL(SG_ERR_INVALID_ARG, "NULL data");
	sg_audio_bytes m = {data, -1, (sf_count_t)size, 0};
	SF_INFO info;
	memset(&info, 0, sizeof(info));
	SNDFILE *f = sg_audio_bytes_open(&m, &info);
	if (!f) return SG_FAIL(SG_ERR_FORMAT, "not audio this build reads (%zu bytes): %s", size, sf_strerror(NULL));
	sg_status st = read_sndfile(f, &info, "the audio", rate, out);
	sf_close(f);
	return st;
}

sg_status sg_audio_from_pcm16(const void *data, size_t nbytes, int rate, int channels, sg_audio *out)
{
	memset(out, 0, sizeof(*out));
	if (rate < MIN_RATE || rate > MAX_RATE)
		return SG_FAIL(SG_ERR_INVALID_ARG, "PCM rate %d Hz is outside [%d, %d]", rate, MIN_RATE, MAX_RATE);
	if (channels < 1 || channels > MAX_CHANNELS)
		return SG_FAIL(SG_ERR_INVALID_ARG, "PCM channels %d is outside [1, %d]", channels, MAX_CHANNELS);
	size_t frame = 2 * (size_t)channels;
	if (nbytes == 0) return SG_FAIL(SG_ERR_FORMAT, "the PCM audio is empty (0 bytes)");
	if (!data) return SG_FAIL(SG_ERR_INVALID_ARG, "NULL data");
	if (nbytes % frame)
		return SG_FAIL(SG_ERR_FORMAT, "PCM audio of %zu bytes is truncated: not a whole number of %zu-byte frames (%d channels of 16 bits)",
		               nbytes, frame, channels);
	sink s;
	sg_status st = sink_open(&s, out, rate, channels, SG_AUDIO_RATE);
	float mono[BLOCK_FRAMES];
	const unsigned char *p = data;
	size_t frames = nbytes / frame;
	for (size_t at = 0; !st && at < frames;) {
		size_t k = frames - at < BLOCK_FRAMES ? frames - at : BLOCK_FRAMES;
		for (size_t i = 0; i < k; i++, at++) {
			float sum = 0.0f;
			for (int c = 0; c < channels; c++) {
				const unsigned char *b = p + at * frame + 2 * (size_t)c;
				sum += (float)(int16_t)(uint16_t)(b[0] | b[1] << 8) / 32768.0f;
			}
			mono[i] = sum / (float)channels;
		}
		st = sink_push(&s, mono, k);
	}
	return finish(&s, st, "the PCM audio");
}

void sg_audio_free(sg_audio *a)
{
	if (!a) return;
	sg_free(a->samples);
	memset(a, 0, sizeof(*a));
}
