/* Audio in as a stream: a file read block by block and handed out as 16 kHz mono float samples
 * in order, so that a long recording is never held whole (the transcription loop keeps one 30 s
 * window). The samples are those sg_audio_decode_file gives for the same file: the same blocks,
 * downmix and soxr resampler. */
#ifndef SG_AUDIO_STREAM_H
#define SG_AUDIO_STREAM_H

#include <stddef.h>

#include "saragossa.h"

typedef struct sg_audio_stream sg_audio_stream;

/* Opens path (what libsndfile reads). Errors as sg_audio_decode_file's: SG_ERR_IO (cannot open),
 * SG_ERR_FORMAT (empty, not audio), SG_ERR_UNSUPPORTED (a rate or channel count out of range). */
sg_status sg_audio_stream_open(const char *path, sg_audio_stream **out);
/* Up to max next samples into out; *got 0 means the end. A file with no samples at all is
 * SG_ERR_FORMAT at the first read; a read error mid-file is SG_ERR_FORMAT naming it. */
sg_status sg_audio_stream_read(sg_audio_stream *s, float *out, size_t max, size_t *got);
/* Back to the first sample (the file is opened again). */
sg_status sg_audio_stream_rewind(sg_audio_stream *s);
void sg_audio_stream_close(sg_audio_stream *s);

#endif
