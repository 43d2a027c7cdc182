/* Audio in: any file libsndfile reads, or raw 16-bit PCM, as 16 kHz mono float (Whisper's input).
 *
 * Every entry point downmixes to mono (the mean of the channels) and resamples to SG_AUDIO_RATE
 * with soxr (high quality), reading the source in blocks so that only the 16 kHz result is held
 * whole. The mix before the resampler and the output's length (sg_audio_resampled_len) are those
 * of librosa.resample on the channel mean, what Qwen3-TTS's reference does with a reference clip
 * (tests/unit/test_audio_resample.c: the same samples). Bad input (not audio, empty, a truncated
 * header, an odd PCM byte count) is an error status with a message naming what was wrong; nothing
 * here exits or aborts. */
#ifndef SG_AUDIO_DECODE_H
#define SG_AUDIO_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "saragossa.h"

#define SG_AUDIO_RATE 16000 /* Hz: the rate every decoder here produces */

/* Decoded audio: n samples at SG_AUDIO_RATE (or the rate asked of the _at calls), mono, nominally in [-1, 1]. */
typedef struct {
	float *samples; /* [n], owned: free with sg_audio_free */
	size_t n;
	int src_rate;     /* the source's sample rate (Hz) */
	int src_channels; /* the source's channel count */
} sg_audio;

/* Decodes the file at path (WAV, FLAC, OGG/Vorbis, ... whatever this libsndfile reads). On
 * success *out holds the samples (the caller frees them with sg_audio_free); on failure *out is
 * zeroed and the status is SG_ERR_IO (cannot open), SG_ERR_FORMAT (not audio, truncated, no
 * samples) or SG_ERR_NOMEM. */
sg_status sg_audio_decode_file(const char *path, sg_audio *out);

/* The same from size bytes in memory (an upload): data is only read, and not kept. */
sg_status sg_audio_decode_memory(const void *data, size_t size, sg_audio *out);

/* The same at `rate` Hz instead of SG_AUDIO_RATE (soxr, high quality; none when the source is
 * already at that rate), for models that read another rate (Qwen3-TTS's reference clips: 24 kHz).
 * rate outside [1000, 768000]: SG_ERR_INVALID_ARG. */
sg_status sg_audio_decode_file_at(const char *path, int rate, sg_audio *out);
sg_status sg_audio_decode_memory_at(const void *data, size_t size, int rate, sg_audio *out);
/* Raw little-endian signed 16-bit PCM, channels interleaved: nbytes bytes at rate Hz. nbytes
 * must be a positive multiple of 2 * channels (else SG_ERR_FORMAT: truncated or empty); rate in
 * [1000, 768000] and channels in [1, 64] (else SG_ERR_INVALID_ARG). */
sg_status sg_audio_from_pcm16(const void *data, size_t nbytes, int rate, int channels, sg_audio *out);

/* The number of samples n source frames at rate `from` become at rate `to` (from != to), the
 * length librosa.resample gives and so the one Qwen3-TTS's reference reads: ceil(n * (to / from))
 * in double precision, as numpy computes it (26460 frames at 22050 Hz to 24 kHz: 28800.000000000004,
 * so 28801). soxr by itself gives about round(n * to / from); every decoder here pads its output
 * with zeros (or cuts it) to this length. */
size_t sg_audio_resampled_len(size_t n, int from, int to);

/* Frees a's samples and zeroes it; a zeroed or NULL a is fine. */
void sg_audio_free(sg_audio *a);

#endif
