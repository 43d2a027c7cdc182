/*
 * The architecture-neutral model description (DESIGN.md section 5): everything one generic
 * forward needs to run any supported family, filled from config.json (hfconfig.c) or from GGUF
 * metadata (gguf_desc.c). Switches live here (norm_offset, qk_norm, act, softcaps...), so the
 * forward never asks which architecture it runs. Per-layer arrays carry what varies by layer.
 */
#ifndef SG_FORMATS_MODEL_DESC_H
#define SG_FORMATS_MODEL_DESC_H

#include <jansson.h>
#include <stdint.h>

#include "formats/gguf.h"
#include "formats/qtypes.h"
#include "saragossa.h"

#define SG_MAX_LAYERS 1024

typedef enum sg_arch {
	SG_ARCH_LLAMA = 1,
	SG_ARCH_MISTRAL,
	SG_ARCH_QWEN2,
	SG_ARCH_QWEN3,
	SG_ARCH_QWEN3_MOE,
	SG_ARCH_QWEN3_NEXT, /* qwen3_next, qwen3_5_moe(_text): hybrid linear/full attention + MoE */
	SG_ARCH_GEMMA3,
	SG_ARCH_GEMMA4,
	SG_ARCH_WHISPER,
	SG_ARCH_BERT,
} sg_arch;

typedef enum sg_layer_kind {
	SG_LAYER_FULL_ATTN = 0,
	SG_LAYER_SLIDING_ATTN,
	SG_LAYER_LINEAR_ATTN, /* gated delta rule with a short causal conv */
} sg_layer_kind;

typedef enum sg_norm_kind { SG_NORM_RMS = 0, SG_NORM_LAYER } sg_norm_kind;
typedef enum sg_act { SG_ACT_SILU = 0, SG_ACT_GELU_TANH, SG_ACT_GELU } sg_act;
typedef enum sg_mlp_kind {
	SG_MLP_GATED = 0, /* act(gate(x)) * up(x) -> down: SwiGLU / GeGLU */
	SG_MLP_PLAIN,     /* down(act(up(x))): BERT, Whisper */
} sg_mlp_kind;

typedef enum sg_rope_scaling {
	SG_ROPE_SCALING_NONE = 0,
	SG_ROPE_SCALING_LINEAR,
	SG_ROPE_SCALING_YARN,
	SG_ROPE_SCALING_LLAMA3,
	SG_ROPE_SCALING_PROPORTIONAL, /* Gemma 4 full attention: exponent over the full head dim */
	SG_ROPE_SCALING_DYNAMIC,
} sg_rope_scaling;

typedef struct sg_rope {
	float theta;
	float partial;  /* fraction of head_dim rotated (1.0 = all) */
	sg_rope_scaling scaling;
	float factor;   /* scaling factor (linear, yarn, llama3) */
	int orig_ctx;   /* original_max_position_embeddings (yarn, llama3) */
	float low_freq_factor, high_freq_factor; /* llama3 */
	float beta_fast, beta_slow, attn_factor; /* yarn */
} sg_rope;

typedef struct sg_layer_desc {
	sg_layer_kind kind;
	int n_head, n_kv_head, head_dim; /* attention layers */
	int sliding_window;              /* tokens; 0 = none */
	sg_rope rope;                    /* this layer's rope (theta differs by layer kind) */
	int n_rot;                       /* dims rotated: head_dim * rope.partial */
	int kv_source;                   /* layer whose K/V this layer reuses (Gemma 4), else itself */
	int k_eq_v;                      /* V is the K projection (Gemma 4 full layers) */
	int moe;                         /* this layer's MLP is a mixture of experts */
	int ffn_dim;                     /* dense MLP width of this layer */
} sg_layer_desc;

typedef enum sg_quant_kind { SG_QUANT_NONE = 0, SG_QUANT_MLX, SG_QUANT_GGUF } sg_quant_kind;

typedef struct sg_quant_info {
	sg_quant_kind kind;
	int bits, group;  /* MLX affine defaults (overrides may exist per module) */
	int file_type;    /* GGUF general.file_type (llama_ftype), -1 unknown */
} sg_quant_info;

typedef struct sg_model_desc {
	sg_arch arch;
	char model_type[48]; /* as the source spelt it: "qwen3_moe", "gemma3_text", "llama" (GGUF) */
	int n_vocab, dim, n_layer, ffn_dim, max_ctx;
	int n_head, n_kv_head, head_dim; /* defaults; per-layer values in layers[] */
	sg_layer_desc *layers;           /* [n_layer], owned */

	/* norms */
	sg_norm_kind norm;
	float norm_eps;
	float norm_offset;    /* 1.0: weights stored as w, applied as (1 + w) (Gemma, Qwen3-Next) */
	int qk_norm;          /* RMS norm on q and k per head */
	int v_norm;           /* scale-free RMS norm on v (Gemma 4) */
	int sandwich_norm;    /* post-attention and post-FFN norms too (Gemma) */

	/* attention */
	float attn_softcap;   /* tanh cap on attention logits; 0 = none */
	float final_softcap;  /* tanh cap on output logits; 0 = none */
	float query_scale;    /* multiplies q.k; 0 = 1/sqrt(head_dim) of the layer */
	int attn_bias;        /* q/k/v projections have biases (Qwen2, BERT) */
	int attn_output_gate; /* sigmoid gate on attention output (Qwen3-Next) */
	int bidirectional;    /* no causal mask: every token sees every other, a sliding layer's token
			       * those less than its sliding_window away on either side (EmbeddingGemma:
			       * an embedder, run as one chunk from position 0; it does not generate) */

	/* embeddings */
	float embed_scale;    /* multiplies token embeddings; 1 = none (Gemma: sqrt(dim)) */
	int tied_embeddings;  /* output projection is the embedding matrix */
	int per_layer_input_dim; /* Gemma 4 per-layer input embeddings width; 0 = none */
	int n_kv_shared_layers;  /* Gemma 4: last layers reusing earlier K/V */

	/* MLP */
	sg_mlp_kind mlp;
	sg_act act;
	int n_expert, n_expert_used, norm_topk_prob, moe_ffn_dim;
	int shared_expert_ffn_dim; /* 0 = no shared expert */
	int shared_expert_gate;    /* the shared expert's output is gated by sigmoid(w.x) */
	int moe_beside_dense;      /* Gemma 4: the experts run beside the dense MLP, from the residual */

	/* linear attention (gated delta net) */
	int lin_n_k_head, lin_n_v_head, lin_k_head_dim, lin_v_head_dim, lin_conv_kernel;

	/* encoders and speech */
	int n_enc_layer, n_mels, n_audio_ctx; /* Whisper encoder */
	int type_vocab_size;                  /* BERT token types (0: none, MPNet) */
	int pos_pad_id;   /* RoBERTa/XLM-R/MPNet: positions count real tokens from pad_token_id + 1 (a
			   * pad token sits at pad_token_id); -1: positions 0..n-1 (BERT) */
	int rel_buckets;  /* MPNet: relative attention bias buckets (32); 0: none */

	int bos_token, eos_token; /* -1 when unknown */
	sg_quant_info quant;
} sg_model_desc;

/* Fills d from a config.json object: uses "text_config" for multimodal configs, refuses configs
 * that hold only a vision/audio tower, and lists the supported model types for an unknown one.
 * The caller frees with sg_model_desc_free. */
sg_status sg_model_desc_from_config(const json_t *config, sg_model_desc *d);

/* Fills d from GGUF metadata (general.architecture, <arch>.block_count, ...). */
sg_status sg_model_desc_from_gguf(const sg_gguf *g, sg_model_desc *d);

void sg_model_desc_free(sg_model_desc *d);

const char *sg_arch_name(sg_arch a);
const char *sg_layer_kind_name(sg_layer_kind k);
/* llama.cpp's name of a GGUF general.file_type (llama_ftype): "Q4_K_M", "Q8_0", "F16"...;
 * NULL for an unknown or unlisted value. */
const char *sg_gguf_ftype_name(int file_type);

/* "llama, mistral, qwen2, ..." for error messages. */
const char *sg_model_desc_supported(void);

#endif
