/* Hugging Face repo ids, the cache layout huggingface_hub writes, and the checks that keep every
 * name that comes from a user or a server inside the cache directory. Pure functions over
 * strings and the environment: no network. */
#ifndef SG_HUB_REPO_H
#define SG_HUB_REPO_H

#include <stddef.h>

#include "saragossa.h"

#define SG_HUB_PATH_MAX 4096
#define SG_HUB_NAME_MAX 96   /* an org or a repo name, as the hub limits them */
#define SG_HUB_FILE_MAX 1024 /* a file name inside a repo, folders included */

/* A parsed model reference: `org/name[@revision][:file.gguf | :QUANT]`. */
typedef struct sg_hub_ref {
	char org[SG_HUB_NAME_MAX + 1];
	char name[SG_HUB_NAME_MAX + 1];
	char repo[2 * SG_HUB_NAME_MAX + 2]; /* "org/name" */
	char revision[256];                 /* "main" unless given */
	char file[SG_HUB_FILE_MAX + 1];     /* ":x.gguf": that exact file; "" otherwise */
	char quant[32];                     /* ":Q4_K_M": the GGUF file with that quantization */
	int has_revision;                   /* 1 when @revision was given */
} sg_hub_ref;

/* Parses `s` into *out. Accepted: org/name, org/name@rev, org/name:file.gguf, org/name:Q8_0 and
 * org/name@rev:file. Org and name are 1..96 of [A-Za-z0-9._-], not "." or "..", without "--" or
 * ".." (the cache folder name joins them with "--"); exactly one '/'. The file must pass
 * sg_hub_check_filename and the revision sg_hub_check_revision. Errors say what was wrong. */
sg_status sg_hub_parse_ref(const char *s, sg_hub_ref *out);

/* 1 if `s` has the shape of a repo reference (one '/', not starting with '/', '.' or '~'), so
 * that resolution tries the hub for it; says nothing about validity. */
int sg_hub_looks_like_repo(const char *s);

/* A file name inside a repo, from a user or from the server: relative, '/'-separated, no empty,
 * "." or ".." component, no backslash or control character, at most SG_HUB_FILE_MAX bytes. */
sg_status sg_hub_check_filename(const char *name);
/* A branch, tag or commit: [A-Za-z0-9._/-], no "..", no leading or trailing '/', no "//". */
sg_status sg_hub_check_revision(const char *rev);
/* An ETag used as a blob file name: 1..128 of [A-Za-z0-9_.-] and not "." or "..". */
sg_status sg_hub_check_etag(const char *etag);
/* 1 if s is a 40-digit lowercase hex commit id. */
int sg_hub_is_commit(const char *s);
/* 1 if s is 64 lowercase hex digits (the SHA-256 ETag of an LFS file). */
int sg_hub_is_sha256(const char *s);
/* Strips a weak prefix `W/` and surrounding quotes from an ETag header value, in place. */
void sg_hub_normalize_etag(char *etag);

/* The Hugging Face cache: $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, else
 * $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub. */
sg_status sg_hub_cache_dir(char *buf, size_t n);
/* saragossa's own models folder: $SARAGOSSA_CACHE_DIR/models, else $XDG_CACHE_HOME/saragossa/models,
 * else ~/.cache/saragossa/models. */
sg_status sg_hub_models_dir(char *buf, size_t n);
/* <cache>/models--org--name. */
sg_status sg_hub_repo_dir(const char *cache, const sg_hub_ref *r, char *buf, size_t n);
/* The symlink target huggingface_hub writes for snapshots/<commit>/<file>: "../../blobs/<etag>"
 * with one more "../" per folder in `file`. */
sg_status sg_hub_pointer_target(const char *file, const char *etag, char *buf, size_t n);

/* The quantization named in a GGUF file name ("Q4_K_M", "IQ4_XS", "BF16"...), upper-cased into
 * buf; returns buf, or NULL when the name carries none. */
const char *sg_hub_quant_from_name(const char *name, char *buf, size_t n);
/* Among `names`, the GGUF file to fetch: with `quant` the first whose quantization equals it
 * (case-insensitive); without, the first in the preference order Q4_K_M, Q4_K_S, Q5_K_M, Q8_0,
 * Q6_K, ..., F16, BF16, F32, else the first GGUF. Vision projectors (mmproj) are never picked.
 * Returns the index, or -1 when none fits. */
int sg_hub_pick_gguf(const char *const *names, int n, const char *quant);
/* 1 if a file of a safetensors repo is needed to run it: config.json, generation_config.json,
 * tokenizer files, *.safetensors and their index. */
int sg_hub_file_needed(const char *name);
/* 1 if name ends with ".gguf" (any case). */
int sg_hub_is_gguf_name(const char *name);

#endif
