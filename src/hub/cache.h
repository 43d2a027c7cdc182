/* What is on this machine: the models of the Hugging Face cache and of saragossa's own models
 * folder (for `saragossa list`), and their removal (`saragossa rm`). */
#ifndef SG_HUB_CACHE_H
#define SG_HUB_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "hub/repo.h"
#include "saragossa.h"

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

#endif
