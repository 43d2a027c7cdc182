/* Model resolution: what a MODEL argument names, as a local path.
 *
 * MODEL may be
 *   - a folder (config.json + safetensors) or a .gguf file on disk;
 *   - a name in saragossa's own models folder (~/.cache/saragossa/models/<name>);
 *   - a Hugging Face repo id `org/name`, optionally `org/name@revision`, `org/name:file.gguf` or
 *     `org/name:Q4_K_M`, found in the Hugging Face cache (the layout huggingface_hub writes, so
 *     models fetched by other tools are used as they are) and downloaded when missing. */
#ifndef SG_HUB_RESOLVE_H
#define SG_HUB_RESOLVE_H

#include <stdint.h>

#include "hub/repo.h"
#include "saragossa.h"

typedef enum { SG_HUB_KIND_FOLDER = 1, SG_HUB_KIND_GGUF } sg_hub_kind;
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

typedef struct sg_hub_opts {
	int offline; /* never use the network (HF_HUB_OFFLINE=1 sets it too) */
	int update;  /* ask the hub for the revision's current commit even when a copy is cached */
	int quiet;   /* no progress bars */
} sg_hub_opts;

/* Resolves `model` into *out. Without opts->update, a complete cached copy is used without any
 * network access; with it (pull), the hub is asked for the current commit and only missing files
 * are fetched (an unreachable hub then falls back to the cached copy, with a warning). Errors a
 * user can act on: an unknown name (suggests `saragossa list`), an invalid repo id, a repo not in
 * the cache while the hub is unreachable, a gated repo. */
sg_status sg_hub_resolve(const char *model, const sg_hub_opts *opts, sg_hub_model *out);

/* Finds a complete copy of `ref` in the Hugging Face cache `cache` without the network: the
 * snapshot of ref->revision (a commit, or refs/<revision>), holding config.json and every
 * safetensors shard its index lists, or the GGUF file asked for (else the preferred one).
 * SG_ERR_NOT_FOUND when there is none. */
sg_status sg_hub_find_cached(const sg_hub_ref *ref, const char *cache, sg_hub_model *out);

/* "folder" or "gguf". */
const char *sg_hub_kind_name(sg_hub_kind kind);

#endif
