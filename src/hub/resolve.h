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

#include "hub/cache.h"
#include "hub/download.h"
#include "saragossa.h"

/* Resolves `model` into *out. Without opts->update, a complete cached copy is used without any
 * network access; with it (pull), the hub is asked for the current commit and only missing files
 * are fetched (an unreachable hub then falls back to the cached copy, with a warning). Errors a
 * user can act on: an unknown name (suggests `saragossa list`), an invalid repo id, a repo not in
 * the cache while the hub is unreachable, a gated repo. */
sg_status sg_hub_resolve(const char *model, const sg_hub_opts *opts, sg_hub_model *out);

#endif
