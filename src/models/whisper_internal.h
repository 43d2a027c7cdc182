/*
 * Whisper's insides, shared by the loader (whisper_load.c: the four sources, the binding) and
 * the forward (whisper.c). Nothing outside src/models/whisper*.c includes this.
 */
#ifndef SG_MODELS_WHISPER_INTERNAL_H
#define SG_MODELS_WHISPER_INTERNAL_H

#include "backend/backend.h"
#include "models/whisper.h"

/* One attention block's weights. D = d_model. */
typedef struct wh_attn {
	sg_btensor wq, wk, wv, wo; /* [D][D] each, any matmul type */
	sg_btensor bq, bk, bv, bo; /* [D] F32; bk.data NULL when the checkpoint has no k bias (HF) */
	/* MLX affine only: Wv and Wo as stored, which the encoder's GEMM path copies as F32 (the
	 * bound tensors may be repacked by the backend, so they are not read back) */
	const struct sg_tensor *wv_mlx, *wo_mlx;
} wh_attn;

/* A pre-norm block: LayerNorm then attention (self, and cross in the decoder), LayerNorm then
 * the GELU MLP. F = ffn width. */
typedef struct wh_layer {
	sg_btensor ln1_w, ln1_b;   /* [D] F32: before self-attention */
	wh_attn self;
	sg_btensor lnx_w, lnx_b;   /* [D] F32: before cross-attention (decoder only) */
	wh_attn cross;             /* decoder only */
	sg_btensor ln2_w, ln2_b;   /* [D] F32: before the MLP */
	sg_btensor fc1, fc1_b;     /* [F][D], [F] F32 */
	sg_btensor fc2, fc2_b;     /* [D][F], [D] F32 */
	/* encoder, the GEMM attention path (see whisper.c); data NULL when it is off */
	sg_btensor wv32;           /* [D][D] F32: Wv, the x operand of V^T = Wv h^T */
	sg_btensor wo_h;           /* [H][D][hd] F32: Wo's columns of each head */
	sg_btensor bo2;            /* [D] F32: bo + Wo bv (v's bias moved past the softmax) */
	/* decoder state */
	sg_btensor ck, cv;         /* [n_audio_ctx][H][hd] F32: cross K/V of the current window */
	sg_btensor *kc, *vc;       /* [n_seq] of [n_text_ctx][H][hd] F32: self-attention KV caches */
} wh_layer;

/* Decoder activations for up to cap tokens (grown on demand). */
typedef struct wh_dec_acts {
	int cap;
	sg_btensor x, h, q, k, v, a, t; /* [cap][D] */
	sg_btensor f, ones;             /* [cap][F] */
	sg_btensor ids, pos, xpos;      /* I32 [cap]; xpos: every entry n_audio_ctx - 1 */
	sg_btensor logits;              /* [cap][V] */
} wh_dec_acts;

/* The encoder's activations, allocated once per model (one window at a time). */
typedef struct wh_enc_acts {
	sg_btensor col;              /* [T][3M]: conv1's im2col rows */
	sg_btensor xp;               /* [T + 2][D]: conv1's output between two zero rows */
	sg_btensor x, h, q, k, v, a; /* [N][D] */
	sg_btensor f;                /* [N][F] */
	sg_btensor qpos;             /* I32 [N]: every entry N - 1 (no mask) */
	sg_btensor qh, kh, oh;       /* [N][hd]: one head's q, k and output (GEMM attention) */
	sg_btensor vt;               /* [hd][N]: one head's V transposed */
	sg_btensor s;                /* [N][N]: one head's scores, then probabilities */
} wh_enc_acts;

struct sg_whisper {
	sg_whisper_info info;
	int n_seq;
	sg_backend *be;
	char *path;
	char *tokenizer;           /* tokenizer.json beside the weights, or NULL */
	int (*align)[2];           /* [info.n_align_heads] */
	char dtype[32];
	/* encoder */
	sg_btensor conv1;          /* [D][n_mels * 3]: conv1's [D][n_mels][3] read as rows */
	sg_btensor conv1_b;        /* [D] F32 */
	sg_btensor conv2a;         /* [D][2D] F32: taps 0 and 1 of conv2, [o][tap * D + i] */
	sg_btensor conv2b;         /* [D][D] F32: tap 2 */
	sg_btensor conv2_b;        /* [D] F32 */
	sg_btensor enc_pos;        /* [n_audio_ctx][D] F32 */
	sg_btensor enc_ln_w, enc_ln_b; /* [D] F32 */
	wh_layer *enc;             /* [n_audio_layer] */
	/* decoder */
	sg_btensor tok;            /* [V][D] any type: the embedding and (tied) the output matrix */
	sg_btensor proj;           /* [V][D]: the output matrix (tok's bytes when tied) */
	sg_btensor dec_pos;        /* [n_text_ctx][D] any type (embed) */
	sg_btensor dec_ln_w, dec_ln_b; /* [D] F32 */
	wh_layer *dec;             /* [n_text_layer] */
	/* state */
	sg_btensor enc_out;        /* [n_audio_ctx][D] F32 */
	int encoded;               /* 1 once an encode has run */
	int gemm_attn;             /* 1: the encoder's attention runs as matmuls (SARAGOSSA_WHISPER_GEMM_ATTN) */
	sg_btensor ones;           /* F32 ones, glu's up operand (plain GELU), max(2 n_ctx D, n_ctx F) */
	sg_btensor gidx;           /* I32 [D]: 0..D-1, conv2's third tap (first half of a row pair) */
	wh_dec_acts da;
	wh_enc_acts ea;
	/* ownership: every tensor bound or allocated, and host copies the CPU binds in place */
	struct wh_src *src;        /* the open weight source (whisper_load.c), kept for the maps */
	sg_btensor *owned;         /* growable list of tensors to free (copies; views stay out) */
	int n_owned, cap_owned;
	void **host;               /* host buffers freed after the backend */
	int n_host, cap_host;
	/* ggml: embedded vocabulary */
	char **vocab;
	uint32_t *vocab_len; /* [n_vocab_str] byte lengths (a token may hold a 0 byte) */
	int n_vocab_str;
};

/* whisper_load.c: opens the source at path and binds every weight into w (info filled). */
sg_status sg_whisper_load_weights(sg_whisper *w, const char *path);
/* Closes what sg_whisper_load_weights opened (after the backend's tensors are freed). */
void sg_whisper_close_weights(sg_whisper *w);
/* The MLX affine tensor t (as its source stores it) dequantized to F32 [rows][cols] in a new
 * buffer the caller frees (sg_free). */
sg_status sg_whisper_stored_f32(const struct sg_tensor *t, float **out);
/* Registers t (a copy) to be freed with the model; on failure frees it and returns NOMEM. */
sg_status sg_whisper_own(sg_whisper *w, const sg_btensor *t);
/* Allocates a zeroed F32/I32 tensor of shape ne owned by the model. */
sg_status sg_whisper_alloc(sg_whisper *w, sg_type type, int64_t ne0, int64_t ne1, int64_t ne2, sg_btensor *out);

#endif
