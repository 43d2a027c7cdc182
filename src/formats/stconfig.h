/*
 * sentence-transformers' description of a model folder: which modules run after the encoder
 * (modules.json), how token states become one vector (1_Pooling/config.json) and whether it is
 * L2-normalised (a Normalize module), and how many tokens an input may have (sentence_bert_config.json). A folder without modules.json pools by the mean over the
 * mask, unnormalised (what most embedding model cards do by hand).
 */
#ifndef SG_FORMATS_STCONFIG_H
#define SG_FORMATS_STCONFIG_H

#include <jansson.h>
#include <stddef.h>

#include "saragossa.h"

typedef enum sg_pool_mode {
	SG_POOL_MEAN = 0, /* mean of the real tokens' states */
	SG_POOL_CLS,      /* the first token's state */
	SG_POOL_MAX,      /* per dimension, the largest state among the real tokens */
	SG_POOL_LAST,     /* the last real token's state */
} sg_pool_mode;

#define SG_ST_MAX_DENSE 4   /* Dense modules after the pooling */
#define SG_ST_PATH_BYTES 128 /* a module's folder name inside the model folder */

typedef struct sg_st_config {
	sg_pool_mode mode;
	int normalize;   /* 1: L2-normalise the pooled vector */
	int from_folder; /* 1: read from modules.json, 0: the default */
	int dim;         /* the Pooling module's word_embedding_dimension, 0 when not said */
	int max_seq_length; /* sentence_bert_config.json's limit on tokens per input, 0 when not said */
	int include_prompt; /* the Pooling module's include_prompt (default 1): 0 leaves a prompt's
	                     * tokens out of mean and max pooling */
	char logit_score[SG_ST_PATH_BYTES]; /* a CrossEncoder's LogitScore module's folder (an LLM
	                                     * reranker's yes/no logits), "" when there is none */
	int n_dense;        /* Dense modules between the Pooling and the Normalize, in order */
	char dense[SG_ST_MAX_DENSE][SG_ST_PATH_BYTES]; /* their folders */
} sg_st_config;

/* config_sentence_transformers.json's named prompts ("prompts": {"query": "query: ", ...}) and
 * default_prompt_name: the text sentence-transformers puts before an input it encodes. */
typedef struct sg_st_prompts {
	int n;
	char **names, **texts; /* [n] each, owned */
	int dflt;              /* the default prompt's index, -1 for none */
} sg_st_prompts;

/* The default: mean pooling, no normalisation, not from a folder. */
sg_st_config sg_st_config_default(void);

/* Reads modules.json (a JSON array of {"type", "path", ...}) into out, starting from the default:
 * a Transformer module is the encoder itself, Normalize sets out->normalize, and the Pooling
 * module's folder (relative to the model folder, no ".." and not absolute) goes to pool_path
 * (cap bytes; "" when there is none); Dense modules after the Pooling (and before a Normalize) go
 * to out->dense, at most SG_ST_MAX_DENSE; a LogitScore module (an LLM reranker's head) to
 * out->logit_score. Any other module (LayerNorm, a Dense on token states...)
 * is SG_ERR_UNSUPPORTED naming it; a malformed file is SG_ERR_FORMAT naming the entry. */
sg_status sg_st_config_modules(const json_t *modules, sg_st_config *out, char *pool_path, size_t cap);

/* Reads a Pooling module's config.json into out->mode and out->dim: the pooling_mode_* booleans
 * (or a "pooling_mode" string) must select exactly one of cls, mean, max, lasttoken; other modes
 * (weighted mean, mean over sqrt(length), several at once) are SG_ERR_UNSUPPORTED naming them. */
sg_status sg_st_config_pooling(const json_t *pooling, sg_st_config *out);

/* Reads the prompts and default_prompt_name of a parsed config_sentence_transformers.json into
 * out (empty when it has none). A prompt that is not a string, or a default_prompt_name that names
 * no prompt, is SG_ERR_FORMAT naming it. Free with sg_st_prompts_free. */
sg_status sg_st_prompts_parse(const json_t *cfg, sg_st_prompts *out);
/* The same from folder dir; no file: no prompts. */
sg_status sg_st_prompts_load(const char *dir, sg_st_prompts *out);
void sg_st_prompts_free(sg_st_prompts *p);

/* Reads sentence_bert_config.json's max_seq_length (a positive integer when present) into out. */
sg_status sg_st_config_sbert(const json_t *sbert, sg_st_config *out);

/* The configuration of model folder dir: modules.json and its Pooling config when present, else
 * the default; sentence_bert_config.json's max_seq_length when present. A file that exists but cannot be read or parsed is an error naming it. */
sg_status sg_st_config_load(const char *dir, sg_st_config *out);

#endif
