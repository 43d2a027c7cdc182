/* Audio out: mono float PCM encoded as a byte stream, chunk by chunk, so that a server can send
 * the first bytes while the rest is still being synthesised.
 *
 * Formats: "wav" (RIFF, 16-bit PCM), "pcm" (raw s16le), "f32" (raw float32 little-endian), "flac"
 * (libsndfile through its virtual I/O), "mp3" (libsndfile's MPEG Layer III writer, LAME), "opus"
 * (Ogg Opus through libopusenc). Samples are clipped to [-1, 1] and never normalised: the
 * loudness is the model's. A rate other than the input's goes through a streaming soxr
 * resampler (high quality) before the format's writer.
 *
 * Length fields: the stream is written front to back through the writer, which cannot seek, so
 * a header that holds the length is written with what a stream of unknown length carries: WAV's
 * RIFF and data sizes are 0xFFFFFFFF (as OpenAI's streamed WAV has them), FLAC's STREAMINFO has 0
 * total samples (unknown, which the FLAC format allows). Where the whole output ends up in one
 * place (a buffer, a seekable file), audio_encoder_fix_header patches the true values in.
 *
 * The bytes depend only on the samples pushed, not on how they were cut into pushes: one push
 * of everything and a push per sample give the same bytes (Ogg Opus too: its stream serial
 * number is fixed, not random). */
#ifndef SG_AUDIO_ENCODE_H
#define SG_AUDIO_ENCODE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "saragossa.h"

/* Receives the encoded bytes in order; non-zero: stop (the encoder's calls then return
 * SG_ERR_CANCELLED). */
typedef int (*audio_write_fn)(const void *bytes, size_t n, void *user);
typedef struct audio_encoder audio_encoder;

/* Opens an encoder of format (see above; "aac" and any other name: SG_ERR_UNSUPPORTED naming the
 * formats there are) for mono PCM at in_rate Hz, written at out_rate Hz (0: the format's natural
 * rate: opus 48000, pcm 24000 as OpenAI sends it, else in_rate; mp3 takes the nearest MPEG rate
 * at or above in_rate when in_rate is not one). Rates outside [1000, 768000]: SG_ERR_INVALID_ARG;
 * an out_rate the format cannot carry (Opus: 8/12/16/24/48 kHz; MP3: the MPEG rates): the same.
 * The format's header may be written to w before this returns. *out: free with
 * audio_encoder_free. */
sg_status audio_encoder_open(const char *format, int in_rate, int out_rate, audio_write_fn w, void *user,
			     audio_encoder **out);
/* Encodes n samples (float, nominally in [-1, 1]; clipped). Bytes reach w as the format makes
 * them (whole FLAC / MP3 frames, Ogg pages at least every 100 ms of audio). Errors are sticky:
 * once a call failed (or w asked to stop), every later call returns the same status. */
sg_status audio_encoder_push(audio_encoder *e, const float *pcm, size_t n);
/* Flushes the resampler and the format, writes trailers. Once only; pushes after it: an error. */
sg_status audio_encoder_finish(audio_encoder *e);
void audio_encoder_free(audio_encoder *e);

/* The MIME type of a format's bytes ("audio/wav", "audio/mpeg", ...); "application/octet-stream"
 * for an unknown name. */
const char *audio_format_mime(const char *format);

/* 1 when this build can write format (mp3 depends on libsndfile's build), else 0. */
int audio_format_available(const char *format);

/* The rate the encoded stream carries (out_rate as resolved at open). */
int audio_encoder_out_rate(const audio_encoder *e);
/* Samples written so far at the output rate, and bytes handed to the writer. */
uint64_t audio_encoder_samples(const audio_encoder *e);
uint64_t audio_encoder_bytes(const audio_encoder *e);

/* After audio_encoder_finish: rewrites the length fields of the first len bytes the encoder wrote
 * (head: the start of the whole output, in a buffer) with the true values: WAV's RIFF and data
 * sizes, FLAC's total sample count. Other formats need nothing. len must cover the header (at
 * least 44 bytes for WAV, 42 for FLAC): else SG_ERR_INVALID_ARG. */
sg_status audio_encoder_fix_header(const audio_encoder *e, void *head, size_t len);
/* The same on a seekable file that holds the whole output from its start (its position is left
 * at the end). A file that cannot seek: SG_ERR_IO. */
sg_status audio_encoder_fix_file(const audio_encoder *e, FILE *f);

#endif
