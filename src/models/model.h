/*
 * A loaded model: the description, the mapped weights and their backend tensors, and the family
 * that bound them. Immutable once loaded; sessions (src/engine) hold the per-conversation state.
 *
 * The forward pass (forward.c) is written once against the backend op table and reads only the
 * description and the layer structs below; a family file (llama.c, qwen3.c, qwen3_moe.c,
 * gemma3.c) adds only what is its own: tensor names, the rope layout of its GGUF files, how its
 * experts are stored.
 */
#ifndef SG_MODELS_MODEL_H
#define SG_MODELS_MODEL_H

#include "backend/backend.h"
#include "formats/model_desc.h"
#include "formats/weights.h"
#include "saragossa.h"

/* One layer's weights as backend tensors; a tensor whose data is NULL is absent. Shapes are
 * written outermost first; D = dim, H/Hkv/hd the layer's heads, F its MLP width, E experts. */
typedef struct sg_layer_weights {
	sg_btensor attn_norm;              /* [D] F32 */
	sg_btensor wq, wk, wv, wo;         /* [H*hd][D], [Hkv*hd][D], [Hkv*hd][D], [D][H*hd] */
	sg_btensor bq, bk, bv;             /* [H*hd], [Hkv*hd], [Hkv*hd] F32 (attn_bias) */
	sg_btensor q_norm, k_norm;         /* [hd] F32 (qk_norm) */
	sg_btensor post_attn_norm;         /* [D] F32 (sandwich_norm) */
	sg_btensor ffn_norm;               /* [D] F32: the norm before the MLP */
	sg_btensor post_ffn_norm;          /* [D] F32 (sandwich_norm) */
	sg_btensor gate, up, down;         /* dense: [F][D], [F][D], [D][F] */
	sg_btensor router;                 /* MoE: [E][D] */
	sg_btensor gate_exps, up_exps, down_exps; /* MoE: [E][F][D], [E][F][D], [E][D][F] */
} sg_layer_weights;

/* What a hybrid (gated delta net) or Gemma 4 layer has beyond sg_layer_weights; a tensor whose
 * data is NULL is absent. C = 2*Hk*dk + Hv*dv (the conv channels), Vd = Hv*dv, K the conv
 * kernel, Fs the shared expert's width, P the per-layer input width. */
typedef struct sg_hybrid_layer {
	sg_btensor lin_qkv, lin_z, lin_b, lin_a; /* [C][D], [Vd][D], [Hv][D], [Hv][D] (Qwen3.5) */
	sg_btensor lin_qkvz, lin_ba;             /* fused per key head (Qwen3-Next): split by gather_cols */
	sg_btensor conv_w;                       /* [C][K] F32 */
	sg_btensor a_log, dt_bias;               /* [Hv] F32 */
	sg_btensor lin_norm;                     /* [dv] F32: the gated RMSNorm */
	sg_btensor lin_out;                      /* [D][Vd] */
	sg_btensor sh_gate, sh_up, sh_down;      /* shared expert [Fs][D], [Fs][D], [D][Fs] */
	sg_btensor sh_gate_inp;                  /* [1][D]: sigmoid gate of the shared expert */
	sg_btensor router_scale, expert_scale;   /* Gemma 4 MoE [D] (times D^-1/2), [E] F32 */
	sg_btensor pre_ffn_norm2, post_ffn_norm1, post_ffn_norm2; /* Gemma 4 MoE [D] F32 */
	sg_btensor gate_up_exps;                 /* Gemma 4 MoE [E][2F][D] */
	sg_btensor pl_gate, pl_proj, pl_norm;    /* per-layer input [P][D], [D][P], [D] F32 */
} sg_hybrid_layer;

/* Model-wide hybrid / Gemma 4 tensors. */
typedef struct sg_hybrid_model {
	sg_hybrid_layer *layers;    /* [n_layer] */
	float *layer_scalar;        /* [n_layer] Gemma 4 output multiplier of each layer (1 = none) */
	sg_btensor pl_embd;         /* [V_pl * n_layer][P] view of embed_tokens_per_layer [V_pl][n_layer*P] */
	sg_btensor pl_embd_full;    /* the bound tensor behind pl_embd */
	sg_btensor pl_model_proj;   /* [n_layer*P][D] */
	sg_btensor pl_proj_norm;    /* [P] F32 */
	int64_t pl_vocab;           /* V_pl */
	sg_btensor idx_q, idx_gate; /* I32 [H*hd]: columns of q and of its gate in q_proj's output */
	sg_btensor idx_qkv, idx_z, idx_b, idx_a; /* I32: columns of the fused qkvz / ba outputs */
} sg_hybrid_model;

typedef struct sg_family sg_family;

/* Where one expert's rows of one projection are: a file of the weights and a byte offset. */
typedef struct sg_expert_loc {
	int32_t file;
	uint64_t offset;
} sg_expert_loc;

/*
 * Routed experts kept outside the file's mapping: the engine's expert slot cache
 * (src/engine/expert_cache.h) installs itself here, and the layers' gate/up/down_exps then carry
 * its sg_expert_table. The forward calls fetch after each MoE layer's routing, before the expert
 * matmuls:
 *   fetch   makes the experts named in ids (host memory, n values, ids outside [0, E) ignored)
 *           of `layer` resident and points the layer's tables at them. h [rows][D] is the
 *           layer's expert input (the cache may use its last row to guess the next layer's
 *           experts). An error (a file cut short or changed since the load) names the file; the
 *           step then fails, the model stays usable.
 *   free    releases ctx (sg_model_free calls it before anything else).
 * All NULL: the experts are the stacks bound in place.
 */
typedef struct sg_expert_source {
	sg_status (*fetch)(void *ctx, int layer, const int32_t *ids, int64_t n, const sg_btensor *h);
	void (*free)(void *ctx);
	void *ctx;
} sg_expert_source;

struct sg_model {
	sg_model_desc desc;
	sg_weights *w;
	sg_backend *be;
	const sg_family *fam;
	int rope_neox;            /* 1: rotate pairs (i, i + n_rot/2) (HF); 0: (2i, 2i+1) */
	sg_btensor tok_embd;      /* [V][D] any type */
	sg_btensor out_norm;      /* [D] F32 */
	sg_btensor output;        /* [V][D]: tok_embd's bytes when the embeddings are tied */
	sg_layer_weights *layers; /* [n_layer] */
	size_t weight_bytes;      /* bytes of weights one decode step reads (bench) */
	sg_hybrid_model hy;       /* hybrid and Gemma 4 extras (hy.layers NULL for other families) */
	sg_expert_source xsrc;    /* routed experts from a slot cache (fetch NULL: bound in place) */
	/* Loaded with defer_experts (sg_model_load_ex): the experts stored one tensor per expert or
	 * as a fused gate_up stack are not copied into stacks; their layers' {gate,up,down}_exps
	 * carry type, shape and row bytes with no data, and xloc says where each expert's rows are
	 * in the files, for the slot cache to read (the forward refuses to run them without one). */
	int defer_experts;
	sg_expert_loc *xloc;      /* [n_layer][3][n_expert] (gate, up, down) */
	uint8_t *xloc_set;        /* [n_layer]: 1 where the layer's xloc entries are filled */
	/* multi-token prediction (Qwen3-Next / Qwen3.5 mtp.* tensors, forward_mtp.c): one extra
	 * full-attention layer at index desc.n_layer of desc.layers, layers and hy.layers (the main
	 * stack never runs it), and the projection of [norm(embedding) | norm(hidden)] into it */
	int has_mtp;
	sg_btensor mtp_fc;                  /* [D][2D] */
	sg_btensor mtp_norm_emb, mtp_norm_hid, mtp_norm; /* [D] F32 */
	int inner;                /* a stack inside a larger model: w and be belong to that model */
};

/*
 * A family: what a group of architectures has that the description does not say.
 *   archs   the sg_arch values it runs, ended by 0
 *   names   GGUF <-> Hugging Face tensor names (NULL: sg_names_default)
 *   adjust  description tweaks after the description is read (may be NULL)
 *   experts binds one MoE layer's experts (may be NULL: sg_model_bind_experts with no fused gate_up)
 */
struct sg_family {
	const char *name;
	const sg_arch *archs;
	const sg_name_pair *names;
	sg_status (*adjust)(sg_model *m);
	sg_status (*experts)(sg_model *m, int layer, sg_layer_weights *lw);
	/* binds what the family has beyond the generic layer (m->hy), after every layer (may be NULL) */
	sg_status (*bind_extra)(sg_model *m);
};

extern const sg_family sg_family_llama, sg_family_qwen3, sg_family_qwen3_moe, sg_family_gemma3;
extern const sg_family sg_family_qwen3_next, sg_family_gemma4;

/* A decoder stack inside a larger model (a speech model's talker or code predictor): takes over
 * *desc (zeroed), binds output_norm, every layer and, where the family's names have it, "output"
 * (optional: [D][V]) from w on be, both owned by the caller and kept alive longer than the stack;
 * there is no token embedding (the caller feeds embeddings, sg_forward_embd). Free with
 * sg_model_free, which leaves w and be alone. */
sg_status sg_model_build_inner(sg_weights *w, sg_backend *be, const sg_family *fam, sg_model_desc *desc,
			       sg_model **out);

/* One weight a family binds: GGUF-style name (may hold {L}), expected type (sg_type or
 * SG_WANT_*), shape innermost first (-1 = any), optional, vector (1: a norm or bias, widened to
 * F32; SG_WANT_ROWS_SPLIT: a matmul weight whose rows the family views as shorter rows, bound in
 * the file's row order: sg_btensor.layout -1; SG_WANT_MATMUL_ONLY: an encoder's weight that only
 * the matmul op reads and whose products need not be the matvec's bits, bound as
 * SG_LAYOUT_MATMUL_ONLY, which a backend may repack). */
#define SG_WANT_ROWS_SPLIT 2
#define SG_WANT_MATMUL_ONLY 3
typedef struct sg_want {
	const char *name;
	int type;
	int n_dims;
	int64_t ne[3];
	int optional;
	int vector;
	sg_btensor *out;
} sg_want;

/* The parsed GGUF file the weights came from (its path, metadata and tensors, pointing into the
 * map the weights hold), or NULL when they came from safetensors. Borrowed: valid while the model
 * lives. A model load hands it to the vocabulary and chat template readers
 * (sg_tokenizer_load_with, sg_chat_template_load_with) so the file is mapped and parsed once. */
const sg_gguf *sg_model_gguf(const sg_model *m);

/* Binds n wants of `layer` (-1: none) through the family's name map; counts matmul weights in
 * m->weight_bytes. Error: "<name>: expected <type> <shape>, found ..." or "<name>: missing". */
sg_status sg_model_bind_wants(sg_model *m, const sg_want *ws, int n, int layer);
/* Opens backend `name` for a model of its own kind (encoders, Whisper); "auto" takes the
 * accelerator when one is usable, else the CPU (logged under `who` when the accelerator refused). */
sg_status sg_model_open_backend(const char *who, const char *name, int n_threads, sg_backend **out);

/* An I32 backend tensor of n values (gather indices). */
sg_status sg_model_index_tensor(sg_model *m, const int32_t *v, int64_t n, sg_btensor *out);

/* Binds a weight tensor of the file in place as a backend tensor (MLX companions too). */
sg_status sg_model_bind_tensor(sg_model *m, const sg_tensor *t, sg_btensor *out);

/* Binds one MoE layer's routed experts into lw->{gate,up,down}_exps, whatever the layout of the
 * file (experts.c: separate stacks as GGUF and MLX write them, the fused gate_up_proj / down_proj
 * stack of transformers 5, one tensor per expert). gate_up: where the family's forward takes a
 * fused [E][2F][D] gate_up (Gemma 4), a fused stack is bound there in place; NULL: it is split
 * into gate_exps and up_exps once. Errors name the file's tensor, the expected and the found
 * type and shape. */
sg_status sg_model_bind_experts(sg_model *m, int layer, sg_layer_weights *lw, sg_btensor *gate_up);
/* sg_model_load, with defer_experts = 1 for a model whose routed experts will be read by a slot
 * cache (engine/expert_cache.h): layouts that a load would copy into stacks are located instead
 * (see sg_model.defer_experts). */
sg_status sg_model_load_ex(const char *path, const sg_model_params *params, int defer_experts, sg_model **out);

/* With a slot cache installed (m->xsrc.fetch): reads the layer's routed ids back from the
 * backend and fetches those experts (see sg_expert_source). SG_OK at once without one. */
sg_status sg_model_fetch_experts(const sg_model *m, int layer, const sg_btensor *ids, const sg_btensor *h);
/* Binds the separate stacks blk.L.ffn_{gate,up,down}_exps.weight (GGUF, MLX) in place. */
sg_status sg_model_bind_stacked_experts(sg_model *m, int layer, sg_layer_weights *lw);
/* The experts a deferred load left in the files (m->xloc) bound as resident stacks, as a load
 * without deferral binds them (the expert cache's auto, when the whole model fits after all);
 * the model is then an ordinary one (xloc freed). On failure the deferred state is unchanged. */
sg_status sg_model_bind_deferred_experts(sg_model *m);
/* Binds the generic weights of layer i (the attention, the norms, the MLP or the experts) through
 * the family's names; for a layer bound after the others (an MTP layer). */
sg_status sg_model_bind_layer(sg_model *m, int i);
/* The hybrid / Gemma 4 families' common start (their adjust step): refuses GGUF files (their
 * converters rename and transform the tensors) and allocates m->hy.layers. */
sg_status sg_model_hybrid_prepare(sg_model *m);

#endif
