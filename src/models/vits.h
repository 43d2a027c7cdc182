/*
 * VITS, as Piper's voices export it to ONNX: phoneme ids -> waveform.
 *
 *   text encoder   embedding * sqrt(H), n transformer layers (relative-position multi-head
 *                  attention with a window, post-LayerNorm, conv FFN with ReLU), projection
 *                  to the prior's mean and log-scale (m, logs)
 *   durations      the stochastic duration predictor run in reverse (noise * noise_w through its
 *                  spline flows), w = ceil(exp(logw) * length_scale)
 *   prior          m, logs repeated by the durations; z_p = m + noise * exp(logs) * noise_scale
 *   flow           residual coupling layers (WaveNet, mean only) in reverse, with channel flips
 *   decoder        HiFi-GAN: conv, transposed-conv upsampling, multi-receptive-field residual
 *                  blocks, leaky ReLU, conv, tanh
 *
 * Weights come from the .onnx's initializers by name; the ones the exporter renamed (the
 * embedding, the flow's weight-normed convolutions, folded constants) are found through the
 * graph's nodes that use them; dilations, strides and pads come from the nodes' attributes.
 * Activations are time-major ([T][C]); convolutions run as matrix products through the backend
 * op table (im2col; transposed convolutions as a product then an overlap-add).
 */
#ifndef SG_MODELS_VITS_H
#define SG_MODELS_VITS_H

#include <stddef.h>
#include <stdint.h>

#include "saragossa.h"

typedef struct sg_vits sg_vits;

/* Loads the VITS weights of the ONNX model at path onto the CPU backend (n_threads 0: the
 * default). A graph that is not a Piper VITS export is SG_ERR_FORMAT naming the first missing
 * or misshapen weight ("enc_p.proj.weight: expected [384, 192, 1], found ..."); a multi-speaker
 * voice is SG_ERR_UNSUPPORTED. */
sg_status sg_vits_load(const char *path, const char *backend, int n_threads, sg_vits **out);
void sg_vits_free(sg_vits *v);
int sg_vits_n_symbols(const sg_vits *v);

typedef struct sg_vits_params {
	float noise_scale, length_scale, noise_w;
	uint64_t seed;
	/* Chunks of the decoder's output, as each is ready (NULL: none); non-zero stops (the call
	 * returns SG_ERR_CANCELLED). frames_per_chunk: decoder frames (hop samples each) per chunk,
	 * 0 = the whole sentence at once. */
	int (*on_audio)(const float *pcm, size_t n, void *user);
	void *user;
	int frames_per_chunk;
} sg_vits_params;

/* Samples per decoder frame (the product of the upsampling strides: 256 for Piper's voices). */
int sg_vits_hop(const sg_vits *v);

/* Synthesizes ids[0..n) (BOS/pad/EOS already in place). The waveform goes to p->on_audio in
 * chunks and, with pcm non-NULL, into *pcm (*n_pcm samples; caller frees with sg_free). An id
 * outside the vocabulary is SG_ERR_RANGE. */
sg_status sg_vits_synth(sg_vits *v, const int64_t *ids, size_t n, const sg_vits_params *p, float **pcm, size_t *n_pcm);

#endif
