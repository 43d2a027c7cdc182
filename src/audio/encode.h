/* Audio encoding, streaming: PCM pushed in chunks comes out as encoded bytes through a write
 * callback as soon as they exist, so a server can send a response while the audio is made.
 * This build writes "wav" (16-bit PCM; the header's sizes are the streaming maximum, a file
 * writer may patch them with audio_wav_patch_sizes), "pcm" (raw s16le) and "f32" (raw float
 * little-endian); a rate change goes through soxr. */
#ifndef SG_AUDIO_ENCODE_H
#define SG_AUDIO_ENCODE_H

#include <stddef.h>
#include <stdint.h>

#include "saragossa.h"

typedef int (*audio_write_fn)(const void *bytes, size_t n, void *user); /* non-zero: stop */
typedef struct audio_encoder audio_encoder;

/* format: "wav", "flac", "mp3", "opus", "pcm" (s16le), "f32" (raw float); in_rate: the PCM's
 * rate; out_rate 0 = the format's natural rate (opus 48000, pcm 24000 like OpenAI, else in_rate).
 * An unknown or unavailable format: SG_ERR_UNSUPPORTED naming the formats there are. */
sg_status audio_encoder_open(const char *format, int in_rate, int out_rate, audio_write_fn w, void *user, audio_encoder **out);
sg_status audio_encoder_push(audio_encoder *e, const float *pcm, size_t n);
sg_status audio_encoder_finish(audio_encoder *e); /* flushes, writes trailers */
void audio_encoder_free(audio_encoder *e);
const char *audio_format_mime(const char *format);

/* The RIFF and data sizes of a 44-byte WAV header for data_bytes of samples, into hdr (for a
 * writer that can seek back to the start of what "wav" wrote). */
void audio_wav_patch_sizes(uint8_t hdr[44], uint64_t data_bytes);

#endif
