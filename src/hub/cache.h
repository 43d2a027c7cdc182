/* What is on this machine: the models of the Hugging Face cache and of saragossa's own models
 * folder (for `saragossa list`), a complete cached copy of a repo (for resolution, without the
 * network), and their removal (`saragossa rm`). */
#ifndef SG_HUB_CACHE_H
#define SG_HUB_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "hub/repo.h"
#include "saragossa.h"

/* FILE: one local file of another model format (a whisper.cpp ggml file) */
typedef enum { SG_HUB_KIND_FOLDER = 1, SG_HUB_KIND_GGUF, SG_HUB_KIND_FILE } sg_hub_kind;
typedef enum { SG_HUB_SRC_PATH = 1, SG_HUB_SRC_MODELS_DIR, SG_HUB_SRC_HF_CACHE } sg_hub_source;

typedef struct sg_hub_model {
	sg_hub_kind kind;
	sg_hub_source source;
	char path[SG_HUB_PATH_MAX]; /* the folder, or the .gguf file (a snapshot link for the cache) */
	char repo[2 * SG_HUB_NAME_MAX + 2]; /* "org/name" when from the hub, else "" */
	char commit[41];                    /* the snapshot's commit when from the hub, else "" */
	int files_downloaded;               /* files fetched by this call */
	uint64_t bytes_downloaded;          /* bytes received by this call */
} sg_hub_model;

typedef struct sg_hub_entry {
	char name[2 * SG_HUB_NAME_MAX + SG_HUB_FILE_MAX + 4]; /* org/name, org/name:file.gguf, or a folder entry */
	char format[16];  /* "safetensors", "gguf", "mlx", or "other" */
	char quant[48];   /* "Q4_K_M", "bf16", "4-bit g64", "fp8", or "" when not visible */
	uint64_t size;    /* bytes on disk */
	int hf_cache;     /* 1: from the Hugging Face cache; 0: from saragossa's models folder */
	char path[SG_HUB_PATH_MAX];
} sg_hub_entry;

/* Lists the models of the Hugging Face cache (models--* with a snapshot: the one refs/main
 * names, else the newest) and of saragossa's models folder, sorted by name. A GGUF file in a
 * snapshot is its own entry `org/name:file.gguf`. *out is owned by the caller (sg_free). */
sg_status sg_hub_list(sg_hub_entry **out, int *n);

/* Format and quantization of a model folder, from its files and config.json: MLX when config.json
 * has "quantization" {bits, group_size}; a "quantization_config" names its method; else the dtype. */
void sg_hub_describe_folder(const char *dir, char *format, size_t fn, char *quant, size_t qn);

/* Removes `model` from the caches: `org/name` removes the repo from the Hugging Face cache,
 * `org/name:file.gguf` (or `:QUANT`) that file's links and its blob when nothing else uses it, a
 * plain name an entry of saragossa's models folder. Paths outside the caches are refused. On
 * success `what` says what was removed and *freed the bytes freed. */
sg_status sg_hub_remove(const char *model, char *what, size_t wn, uint64_t *freed);

/* Collects the GGUF files under dir (and up to two folders down) as names relative to dir; returns the
 * count (at most cap). */
int sg_hub_list_gguf(const char *dir, char (*names)[SG_HUB_FILE_MAX + 1], int cap);

/* Finds a complete copy of `ref` in the Hugging Face cache `cache` without the network: the
 * snapshot of ref->revision (a commit, or refs/<revision>), holding config.json and every
 * safetensors shard its index lists, or the GGUF file asked for (else the preferred one).
 * SG_ERR_NOT_FOUND when there is none. */
sg_status sg_hub_find_cached(const sg_hub_ref *ref, const char *cache, sg_hub_model *out);

/* "folder" or "gguf". */
const char *sg_hub_kind_name(sg_hub_kind kind);

#endif
