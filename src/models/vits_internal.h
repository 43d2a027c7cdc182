/* VITS internals shared by the loader (vits.c) and the forward (vits_forward.c). */
#ifndef SG_MODELS_VITS_INTERNAL_H
#define SG_MODELS_VITS_INTERNAL_H

#include "backend/backend.h"
#include "formats/onnx.h"
#include "models/vits.h"

#define VITS_MAX_LAYERS 16
#define VITS_DDS_LAYERS 3
#define VITS_DP_FLOWS 3
#define VITS_MAX_FLOWS 8
#define VITS_MAX_WN 16
#define VITS_MAX_UPS 6
#define VITS_MAX_KERNELS 6
#define VITS_MAX_RB_CONVS 4
#define VITS_SCRATCH 12

/* A 1-D convolution (stride 1, length kept) or, in the decoder's ups, a transposed one. */
typedef struct vconv {
	const float *w;  /* [cout][cin][k] as the file has it (depthwise: [cout][1][k]) */
	const float *b;  /* [cout] or NULL */
	int cin, cout, k, dil, pad, stride, depthwise; /* stride: transposed convs only (0 otherwise) */
	sg_btensor mat;  /* the conv1d op's weight {cin, k, cout} (bound as SG_LAYOUT_CONV1D), a
	                  * transposed conv's product {cin, 1, k * cout}; none for depthwise */
	sg_btensor bias; /* b as the op's [cout] (none for a transposed conv: added after) */
	float *owned;    /* the repacked weight, when mat is one */
} vconv;

typedef struct vnorm {
	sg_btensor g, b; /* [C] LayerNorm over channels */
} vnorm;

typedef struct venc_layer {
	vconv qkvo[4];              /* 1x1 [H][H] */
	const float *rel_k, *rel_v; /* [2 * window + 1][head_dim], shared by the heads */
	vnorm n1, n2;
	vconv ffn1, ffn2; /* [F][H][k], [H][F][k] */
} venc_layer;

/* Dilated depthwise-separable convolutions of the duration predictor: per layer i, dilation
 * 3^i, depthwise conv, LayerNorm, GELU, 1x1, LayerNorm, GELU, residual. */
typedef struct vdds {
	vconv sep[VITS_DDS_LAYERS], pw[VITS_DDS_LAYERS];
	vnorm n1[VITS_DDS_LAYERS], n2[VITS_DDS_LAYERS];
} vdds;

/* A rational-quadratic spline flow of the duration predictor. */
typedef struct vconvflow {
	vconv pre; /* [F][1][1] */
	vdds convs;
	vconv proj; /* [3 * bins - 1][F][1] */
	int bins;
} vconvflow;

/* A residual coupling layer (mean only) with its WaveNet. */
typedef struct vcoupling {
	vconv pre; /* [W][C/2][1] */
	vconv in[VITS_MAX_WN], rs[VITS_MAX_WN];
	int n_layers, hidden;
	vconv post; /* [C/2][W][1] */
} vcoupling;

typedef struct vresblock {
	vconv c[VITS_MAX_RB_CONVS * 2]; /* applied in order, each x += conv(lrelu(x)) (ResBlock2);
	                                  * ResBlock1 pairs: x += c2(lrelu(c1(lrelu(x)))) */
	int n;
	int pairs; /* 1: ResBlock1 */
} vresblock;

typedef struct vscratch {
	float *p;
	size_t cap;
} vscratch;

struct sg_vits {
	sg_onnx *onnx; /* owns the weights' bytes */
	sg_backend *be;
	int n_symbols, hidden, inter, n_heads, head_dim, window, n_layers;
	const float *emb; /* [n_symbols][hidden] */
	venc_layer enc[VITS_MAX_LAYERS];
	vconv proj; /* [2 * inter][hidden][1] */
	int dp_ch;
	vconv dp_pre, dp_proj;
	vdds dp_convs;
	vconvflow dp_flow[VITS_DP_FLOWS]; /* in the order they run in reverse */
	const float *ea_m;                /* [2] */
	float ea_scale[2];                /* exp(-logs) */
	vcoupling flow[VITS_MAX_FLOWS];   /* flows 0, 2, 4, ... */
	int n_flows;
	vconv dec_pre, dec_post;
	vconv ups[VITS_MAX_UPS];
	vresblock rb[VITS_MAX_UPS * VITS_MAX_KERNELS];
	int n_ups, n_kernels, hop;
	float lrelu, lrelu_final;
	int ctx_frames; /* decoder frames either side that reach a frame's samples */
	int crop;                 /* SARAGOSSA_PIPER_CROP: the stages run on the rows of margin only */
	int flow_split;           /* SARAGOSSA_PIPER_FLOW_SPLIT: the flow in two parts around the first chunk */
	int flow_ctx;             /* frames either side that reach a frame through the whole flow */
	int margin[VITS_MAX_UPS]; /* rows either side of stage u's input (at its rate) that reach a
	                           * frame's samples through that stage and the ones after it */
	int margin_out[VITS_MAX_UPS]; /* the same at stage u's upsampled rows, through its residual
	                               * blocks and the stages after it */
	vscratch scratch[VITS_SCRATCH];
};

/* Sets v->ctx_frames, v->margin and v->margin_out from the decoder's kernels, strides and
 * dilations, v->flow_ctx from the flow's. */
void vits_receptive(sg_vits *v);

#endif
