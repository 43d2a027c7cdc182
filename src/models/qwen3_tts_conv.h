/*
 * Convolutions of the Qwen3-TTS encoders (the speaker encoder, the speech tokenizer's encoder):
 * a Conv1d's weight bound once on a backend (SG_LAYOUT_CONV1D: the CPU backend packs it for its
 * tile kernel), run on host activations [T][C] that the caller has already padded as the layer
 * pads (reflect, replicate or zeros), so one helper serves every padding mode. These encoders run
 * once per reference clip, so the host round trip of the activations costs little against the
 * convolution itself.
 */
#ifndef SG_MODELS_QWEN3_TTS_CONV_H
#define SG_MODELS_QWEN3_TTS_CONV_H

#include "backend/backend.h"
#include "formats/weights.h"

typedef struct sg_qtts_conv {
	sg_backend *be;
	sg_btensor w, b; /* w {cin, K, cout} (conv1d's layout), b [cout] or unset */
	float *host;     /* the weight's bytes while the backend reads them in place, else NULL */
	int cin, cout, K, dil, stride;
} sg_qtts_conv;

/* Binds "<pfx>.weight" (PyTorch's [cout][cin][K], or a Linear's [cout][cin] for K 1; any float type) and
 * "<pfx>.bias" (required when need_bias, else optional). A missing tensor or another shape: an error naming
 * both shapes. */
sg_status sg_qtts_conv_load(sg_backend *be, const sg_weights *w, const char *pfx, int cin, int cout, int K,
                            int dil, int stride, int need_bias, sg_qtts_conv *c);
void sg_qtts_conv_free(sg_qtts_conv *c);
/* y [Tout][cout] = conv(x [Tp][cin]) with no further padding: Tout = (Tp - dil*(K-1) - 1)/stride + 1
 * must be at least 1 (else SG_ERR_INVALID_ARG). y is caller-owned. */
sg_status sg_qtts_conv_run(sg_qtts_conv *c, const float *x, int Tp, float *y, int *Tout);
/* Rows that conv_run gives for Tp input rows (0 when too few). */
int sg_qtts_conv_out_rows(const sg_qtts_conv *c, int Tp);

/* The named tensor as a new host F32 array of exactly n values (sg_free). */
sg_status sg_qtts_host_f32(const sg_weights *w, const char *name, int64_t n, float **out);

#endif
