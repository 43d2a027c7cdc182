/* Whisper's log-mel spectrogram (see mel.h for the steps and the reference it matches). */
#include "audio/mel.h"

#include <fftw3.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"

#define N_BINS (SG_MEL_N_FFT / 2 + 1) /* one-sided spectrum: 201 bins */
#define PAD (SG_MEL_N_FFT / 2)       /* reflect padding at each end */

/* One plan for the process: FFTW's planner is not thread-safe, its execute with new arrays is
 * (fftwf_execute_dft_r2c on buffers from fftwf_malloc, aligned as the planning ones were). */
static pthread_once_t plan_once = PTHREAD_ONCE_INIT;
static fftwf_plan plan;

static void make_plan(void)
{
	float *in = fftwf_malloc(sizeof(float) * SG_MEL_N_FFT);
	fftwf_complex *out = fftwf_malloc(sizeof(fftwf_complex) * N_BINS);
	if (in && out) plan = fftwf_plan_dft_r2c_1d(SG_MEL_N_FFT, in, out, FFTW_ESTIMATE);
	fftwf_free(in);
	fftwf_free(out);
}

/* Slaney's mel scale: linear below 1 kHz (3 mels per 200 Hz), logarithmic above. */
static double hz_to_mel(double hz)
{
	if (hz < 1000.0) return 3.0 * hz / 200.0;
	return 15.0 + log(hz / 1000.0) * (27.0 / log(6.4));
}

static double mel_to_hz(double mel)
{
	if (mel < 15.0) return 200.0 * mel / 3.0;
	return 1000.0 * exp(log(6.4) / 27.0 * (mel - 15.0));
}

sg_status sg_audio_mel_filters(int n_mels, double *fb)
{
	if (n_mels < 1 || n_mels > SG_MEL_MAX_BINS)
		return SG_FAIL(SG_ERR_INVALID_ARG, "n_mels = %d is outside [1, %d]", n_mels, SG_MEL_MAX_BINS);
	/* n_mels + 2 edges evenly spaced in mel from 0 to 8 kHz (numpy linspace: lo + i * step) */
	double edge[SG_MEL_MAX_BINS + 2];
	double lo = hz_to_mel(0.0), hi = hz_to_mel(8000.0), step = (hi - lo) / (n_mels + 1);
	for (int i = 0; i < n_mels + 2; i++) edge[i] = mel_to_hz(i == n_mels + 1 ? hi : lo + i * step);
	for (int k = 0; k < N_BINS; k++) {
		/* bin k's frequency: linspace(0, 8000, 201) */
		double f = k == N_BINS - 1 ? 8000.0 : k * (8000.0 / (N_BINS - 1));
		for (int m = 0; m < n_mels; m++) {
			double down = (f - edge[m]) / (edge[m + 1] - edge[m]);
			double up = (edge[m + 2] - f) / (edge[m + 2] - edge[m + 1]);
			double w = fmin(down, up);
			if (!(w > 0.0)) w = 0.0;
			fb[k * n_mels + m] = w * (2.0 / (edge[m + 2] - edge[m])); /* equal area per filter */
		}
	}
	return SG_OK;
}

/* Sample i of the window (0 <= i < SG_MEL_N_SAMPLES): the signal, then silence. */
static float sample(const float *pcm, size_t n, long i)
{
	return (size_t)i < n ? pcm[i] : 0.0f;
}

sg_status sg_audio_log_mel(const float *pcm, size_t n, int n_mels, float *out)
{
	if (n_mels < 1 || n_mels > SG_MEL_MAX_BINS)
		return SG_FAIL(SG_ERR_INVALID_ARG, "n_mels = %d is outside [1, %d]", n_mels, SG_MEL_MAX_BINS);
	if (!out || (n && !pcm)) return SG_FAIL(SG_ERR_INVALID_ARG, "NULL %s", out ? "pcm" : "out");
	if (n > SG_MEL_N_SAMPLES) n = SG_MEL_N_SAMPLES;
	pthread_once(&plan_once, make_plan);
	if (!plan) return SG_FAIL(SG_ERR_INTERNAL, "FFTW could not plan a %d-point real FFT", SG_MEL_N_FFT);

	double *fb = sg_malloc(sizeof(double) * N_BINS * (size_t)n_mels);
	float *in = fftwf_malloc(sizeof(float) * SG_MEL_N_FFT);
	fftwf_complex *spec = fftwf_malloc(sizeof(fftwf_complex) * N_BINS);
	if (!fb || !in || !spec) {
		sg_free(fb);
		fftwf_free(in);
		fftwf_free(spec);
		return SG_FAIL(SG_ERR_NOMEM, "no memory for the %d-bin filterbank", n_mels);
	}
	sg_audio_mel_filters(n_mels, fb);
	/* each filter is a triangle: only bins [first[m], last[m]] are non-zero */
	int first[SG_MEL_MAX_BINS], last[SG_MEL_MAX_BINS];
	for (int m = 0; m < n_mels; m++) {
		first[m] = N_BINS;
		last[m] = -1;
		for (int k = 0; k < N_BINS; k++)
			if (fb[k * n_mels + m] != 0.0) {
				if (first[m] == N_BINS) first[m] = k;
				last[m] = k;
			}
	}
	double window[SG_MEL_N_FFT]; /* periodic Hann: numpy hanning(401)[:-1] */
	for (int i = 0; i < SG_MEL_N_FFT; i++) window[i] = 0.5 - 0.5 * cos(2.0 * M_PI * i / SG_MEL_N_FFT);

	const long N = SG_MEL_N_SAMPLES;
	float mx = -INFINITY;
	double power[N_BINS];
	for (int t = 0; t < SG_MEL_N_FRAMES; t++) {
		for (int i = 0; i < SG_MEL_N_FFT; i++) {
			long j = (long)t * SG_MEL_HOP + i - PAD; /* index into the unpadded window */
			if (j < 0) j = -j;                        /* reflect: x[-j] = x[j] */
			else if (j >= N) j = 2 * N - 2 - j;       /* x[N - 1 + d] = x[N - 1 - d] */
			in[i] = (float)(sample(pcm, n, j) * window[i]);
		}
		fftwf_execute_dft_r2c(plan, in, spec);
		for (int k = 0; k < N_BINS; k++) {
			double re = spec[k][0], im = spec[k][1];
			power[k] = re * re + im * im;
		}
		for (int m = 0; m < n_mels; m++) {
			double s = 0.0;
			for (int k = first[m]; k <= last[m]; k++) s += fb[k * n_mels + m] * power[k];
			float v = (float)log10(s > 1e-10 ? s : 1e-10); /* the reference casts to float32 here */
			out[(size_t)m * SG_MEL_N_FRAMES + t] = v;
			if (v > mx) mx = v;
		}
	}
	/* then float32 arithmetic, as the reference's numpy does on its float32 array */
	float floor_v = mx - 8.0f;
	for (size_t i = 0; i < (size_t)n_mels * SG_MEL_N_FRAMES; i++) {
		float v = out[i] > floor_v ? out[i] : floor_v;
		out[i] = (v + 4.0f) / 4.0f;
	}
	sg_free(fb);
	fftwf_free(in);
	fftwf_free(spec);
	return SG_OK;
}

/* ---- the magnitude log-mel of Qwen3-TTS's speaker encoder (see mel.h) ---- */

static pthread_mutex_t planner_lock = PTHREAD_MUTEX_INITIALIZER;

sg_status sg_audio_log_mel_mag(const sg_mel_mag_params *p, const float *pcm, size_t n, float **out, int *n_frames)
{
	*out = NULL;
	*n_frames = 0;
	int nfft = p->n_fft, hop = p->hop, nm = p->n_mels, nb = nfft / 2 + 1;
	if (nfft < 16 || nfft > 1 << 16 || p->win != nfft || hop < 1 || hop > nfft || nm < 1 || nm > SG_MEL_MAX_BINS || p->rate < 1 ||
	    !(p->fmin >= 0) || !(p->fmax > p->fmin))
		return SG_FAIL(SG_ERR_INVALID_ARG, "mel: n_fft %d, window %d, hop %d, %d mels, %d Hz, %g..%g Hz", nfft, p->win, hop, nm, p->rate,
			       p->fmin, p->fmax);
	long pad = (nfft - hop) / 2;
	if (!pcm || (long)n <= pad || n > (size_t)1 << 31)
		return SG_FAIL(SG_ERR_INVALID_ARG, "mel: %zu samples (more than %ld needed for the reflect padding)", n, pad);
	long N = (long)n, padded = N + 2 * pad;
	if (padded < nfft) return SG_FAIL(SG_ERR_INVALID_ARG, "mel: %zu samples is shorter than one %d-sample frame", n, nfft);
	int T = (int)((padded - nfft) / hop + 1);
	/* the filterbank as librosa builds it (float64 ramps, Slaney scale and area norm, stored float32) */
	float *fb = sg_calloc((size_t)nm * (size_t)nb, sizeof(float));
	double *mf = sg_malloc(sizeof(double) * (size_t)(nm + 2));
	float *in = fftwf_malloc(sizeof(float) * (size_t)nfft), *win = sg_malloc(sizeof(float) * (size_t)nfft);
	float *mag = sg_malloc(sizeof(float) * (size_t)nb), *o = sg_malloc(sizeof(float) * (size_t)T * (size_t)nm);
	fftwf_complex *spec = fftwf_malloc(sizeof(fftwf_complex) * (size_t)nb);
	fftwf_plan plan_m = NULL;
	sg_status st = SG_OK;
	if (!fb || !mf || !in || !win || !mag || !o || !spec) st = SG_FAIL(SG_ERR_NOMEM, "mel: %d frames", T);
	if (!st) {
		pthread_mutex_lock(&planner_lock);
		plan_m = fftwf_plan_dft_r2c_1d(nfft, in, spec, FFTW_ESTIMATE);
		pthread_mutex_unlock(&planner_lock);
		if (!plan_m) st = SG_FAIL(SG_ERR_INTERNAL, "FFTW could not plan a %d-point real FFT", nfft);
	}
	if (!st) {
		double lo = hz_to_mel(p->fmin), hi = hz_to_mel(p->fmax);
		for (int i = 0; i < nm + 2; i++) mf[i] = mel_to_hz(lo + (hi - lo) * i / (nm + 1));
		for (int m = 0; m < nm; m++) {
			double enorm = 2.0 / (mf[m + 2] - mf[m]);
			for (int k = 0; k < nb; k++) {
				double f = (double)k * p->rate / nfft;
				double lower = (f - mf[m]) / (mf[m + 1] - mf[m]), upper = (mf[m + 2] - f) / (mf[m + 2] - mf[m + 1]);
				double w = lower < upper ? lower : upper;
				fb[(size_t)m * nb + k] = (float)((w > 0 ? w : 0) * enorm);
			}
		}
		/* torch.hann_window (periodic), in float32 */
		for (int i = 0; i < nfft; i++) win[i] = (float)(0.5 - 0.5 * cos(2.0 * M_PI * i / nfft));
		for (int t = 0; t < T; t++) {
			for (int i = 0; i < nfft; i++) {
				long j = (long)t * hop + i - pad;
				if (j < 0) j = -j;
				else if (j >= N) j = 2 * N - 2 - j;
				in[i] = pcm[j] * win[i];
			}
			fftwf_execute_dft_r2c(plan_m, in, spec);
			for (int k = 0; k < nb; k++) mag[k] = sqrtf(spec[k][0] * spec[k][0] + spec[k][1] * spec[k][1] + 1e-9f);
			for (int m = 0; m < nm; m++) {
				float s = 0;
				const float *w = fb + (size_t)m * nb;
				for (int k = 0; k < nb; k++) s += w[k] * mag[k];
				o[(size_t)t * nm + m] = logf(s > 1e-5f ? s : 1e-5f);
			}
		}
	}
	if (plan_m) {
		pthread_mutex_lock(&planner_lock);
		fftwf_destroy_plan(plan_m);
		pthread_mutex_unlock(&planner_lock);
	}
	sg_free(fb), sg_free(mf), sg_free(win), sg_free(mag);
	fftwf_free(in);
	fftwf_free(spec);
	if (st) {
		sg_free(o);
		return st;
	}
	*out = o;
	*n_frames = T;
	return SG_OK;
}
