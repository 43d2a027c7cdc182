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

typedef struct sg_family sg_family;

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
};

/*
 * A family: what a group of architectures has that the description does not say.
 *   archs   the sg_arch values it runs, ended by 0
 *   names   GGUF <-> Hugging Face tensor names (NULL: sg_names_default)
 *   adjust  description tweaks after the description is read (may be NULL)
 *   experts binds one MoE layer's stacked experts (may be NULL: the generic stacked names)
 */
struct sg_family {
	const char *name;
	const sg_arch *archs;
	const sg_name_pair *names;
	sg_status (*adjust)(sg_model *m);
	sg_status (*experts)(sg_model *m, int layer, sg_layer_weights *lw);
};

extern const sg_family sg_family_llama, sg_family_qwen3, sg_family_qwen3_moe, sg_family_gemma3;

/* Binds a weight tensor of the file in place as a backend tensor (MLX companions too). */
sg_status sg_model_bind_tensor(sg_model *m, const sg_tensor *t, sg_btensor *out);

/* Binds the stacked experts blk.L.ffn_{gate,up,down}_exps (GGUF, MLX switch_mlp). */
sg_status sg_model_bind_stacked_experts(sg_model *m, int layer, sg_layer_weights *lw);

#endif
