/* Whisper's log-mel spectrogram, computed as the reference feature extractor computes it
 * (transformers' WhisperFeatureExtractor, numpy path):
 *
 *   - the 16 kHz mono signal is cut or zero-padded at its end to SG_MEL_N_SAMPLES (30 s);
 *   - reflect padding of n_fft/2 samples at both ends (the sample at the edge is not repeated);
 *   - frames of SG_MEL_N_FFT samples every SG_MEL_HOP samples, times a periodic Hann window;
 *     power spectrum |rfft|^2 (201 bins); 3001 frames, the last one dropped: SG_MEL_N_FRAMES;
 *   - Slaney-style mel filterbank (Slaney mel scale and area normalisation, 0 to 8 kHz);
 *   - log10(max(mel, 1e-10)), clamped from below at (its maximum over the window - 8), then
 *     (x + 4) / 4.
 *
 * The FFT runs in single precision (FFTW, planned once per process); power, filterbank and
 * logarithm in double, as the reference does, so the result stays within 1e-4 of it. */
#ifndef SG_AUDIO_MEL_H
#define SG_AUDIO_MEL_H

#include <stddef.h>

#include "saragossa.h"

#define SG_MEL_N_FFT 400        /* samples per frame (25 ms) */
#define SG_MEL_HOP 160          /* samples between frames (10 ms) */
#define SG_MEL_N_SAMPLES 480000 /* one window: 30 s at 16 kHz */
#define SG_MEL_N_FRAMES 3000    /* frames per window */
#define SG_MEL_MAX_BINS 256     /* the most mel bins asked for (Whisper uses 80 or 128) */

/* Computes the log-mel spectrogram of one 30 s window of pcm (n samples at 16 kHz; more than
 * SG_MEL_N_SAMPLES are ignored, fewer are padded with silence; pcm may be NULL when n is 0) into
 * out, [n_mels][SG_MEL_N_FRAMES] row-major, which the caller owns. n_mels in [1, SG_MEL_MAX_BINS]
 * (else SG_ERR_INVALID_ARG). Thread-safe: callers on several threads may run it at once. */
sg_status sg_audio_log_mel(const float *pcm, size_t n, int n_mels, float *out);

/* The Slaney mel filterbank the spectrogram uses: fb[k * n_mels + m] is the weight of FFT bin k
 * (of SG_MEL_N_FFT / 2 + 1) in mel bin m. fb is [SG_MEL_N_FFT / 2 + 1][n_mels], caller-owned. */
sg_status sg_audio_mel_filters(int n_mels, double *fb);


/* The magnitude log-mel spectrogram Qwen3-TTS's speaker encoder reads (the qwen-tts package's
 * mel_spectrogram): reflect padding of (n_fft - hop) / 2 samples at both ends, frames of n_fft
 * samples every hop (no centring), periodic Hann window, |rfft| as sqrt(re^2 + im^2 + 1e-9),
 * librosa's Slaney mel filterbank from fmin to fmax (area-normalised), then
 * log(max(mel, 1e-5)), all in float32 as torch computes it. */
typedef struct sg_mel_mag_params {
	int rate, n_fft, win, hop, n_mels; /* win must equal n_fft */
	double fmin, fmax;
} sg_mel_mag_params;
/* pcm [n] (more than the padding); *out [n_frames][n_mels] (sg_free), frame-major. */
sg_status sg_audio_log_mel_mag(const sg_mel_mag_params *p, const float *pcm, size_t n, float **out, int *n_frames);

#endif
