/* Audio in as a stream: a source read block by block and handed out as 16 kHz mono float samples
 * in order, so that a long recording is never held whole (the transcription loop keeps one 30 s
 * window). The samples are those sg_audio_decode_file (or sg_audio_from_pcm16) gives for the same
 * bytes: the same blocks, downmix and soxr resampler. A source is a file by path, a seekable file
 * descriptor (stdin spooled to a temporary file), or bytes in memory (an upload); each is read
 * twice by a transcription (once for the log-mel floor, once for the windows), hence the rewind. */
#ifndef SG_AUDIO_STREAM_H
#define SG_AUDIO_STREAM_H

#include <stddef.h>

#include "saragossa.h"

typedef struct sg_audio_stream sg_audio_stream;

/* Opens path (what libsndfile reads). Errors as sg_audio_decode_file's: SG_ERR_IO (cannot open),
 * SG_ERR_FORMAT (empty, not audio, no samples), SG_ERR_UNSUPPORTED (a rate or channel count out
 * of range). The first block is read here, so that audio without a single sample is an error of
 * the open, not of a read half-way through a transcription. */
sg_status sg_audio_stream_open(const char *path, sg_audio_stream **out);
/* The same over size bytes at data (an upload), read in place through libsndfile's virtual I/O:
 * data is not copied and must stay valid and unchanged until sg_audio_stream_close. Errors as
 * sg_audio_decode_memory's. */
sg_status sg_audio_stream_open_memory(const void *data, size_t size, sg_audio_stream **out);
/* The same over the seekable file fd from its first byte (a spool of stdin); fd stays the
 * caller's (not closed here) and must not be used by it until sg_audio_stream_close. name names
 * the source in messages ("stdin"). pcm_rate 0: fd holds an audio file; pcm_rate > 0: it holds
 * raw little-endian signed 16-bit PCM at pcm_rate Hz with pcm_channels channels interleaved,
 * checked as sg_audio_from_pcm16 checks it (SG_ERR_INVALID_ARG for a rate or channel count out
 * of range, SG_ERR_FORMAT for no bytes or not a whole number of frames). */
sg_status sg_audio_stream_open_fd(int fd, const char *name, int pcm_rate, int pcm_channels, sg_audio_stream **out);
/* Up to max next samples into out; *got 0 means the end. A read error mid-way is SG_ERR_FORMAT
 * naming it. */
sg_status sg_audio_stream_read(sg_audio_stream *s, float *out, size_t max, size_t *got);
/* Back to the first sample (the source is opened again). */
sg_status sg_audio_stream_rewind(sg_audio_stream *s);
/* Frees s (NULL is fine); the file is closed, a memory or fd source is left as it was given. */
void sg_audio_stream_close(sg_audio_stream *s);

#endif
