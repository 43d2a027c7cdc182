#include "hub/resolve.h"
#include "base/error.h"
#include "base/flags.h"
#include "base/log.h"
#include "hub/cache.h"
#include "hub/download.h"
#include "hub/fs.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int has_gguf_magic(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) return 0;
	char m[4];
	int ok = fread(m, 1, 4, f) == 4 && !memcmp(m, "GGUF", 4);
	fclose(f);
	return ok;
}

/* whisper.cpp's ggml files start with the uint32 0x67676d6c, little-endian */
static int has_ggml_magic(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) return 0;
	unsigned char m[4];
	int ok = fread(m, 1, 4, f) == 4 && m[0] == 0x6c && m[1] == 0x6d && m[2] == 0x67 && m[3] == 0x67;
	fclose(f);
	return ok;
}

static sg_status local_path(const char *path, sg_hub_source src, sg_hub_model *out)
{
	struct stat sb;
	if (stat(path, &sb)) return sg_error(SG_ERR_NOT_FOUND, "%s: %s", path, strerror(errno));
	char real[PATH_MAX];
	if (!realpath(path, real)) snprintf(real, sizeof(real), "%s", path);
	out->source = src;
	snprintf(out->path, sizeof(out->path), "%s", real);
	if (S_ISDIR(sb.st_mode)) {
		out->kind = SG_HUB_KIND_FOLDER;
		return SG_OK;
	}
	if (S_ISREG(sb.st_mode) && (has_gguf_magic(path) || sg_hub_is_gguf_name(path))) {
		out->kind = SG_HUB_KIND_GGUF;
		return SG_OK;
	}
	if (S_ISREG(sb.st_mode) && has_ggml_magic(path)) {
		out->kind = SG_HUB_KIND_FILE;
		return SG_OK;
	}
	return sg_error(SG_ERR_UNSUPPORTED,
			"%s is not a model: a model is a folder (config.json + safetensors), a .gguf file, a whisper.cpp "
			"ggml file or a Hugging Face repo id (org/name)", path);
}

static int offline_env(void)
{
	const char *v = getenv("HF_HUB_OFFLINE");
	int b = 0;
	return v && !sg_parse_bool(v, &b) && b;
}

sg_status sg_hub_resolve(const char *model, const sg_hub_opts *opts, sg_hub_model *out)
{
	static const sg_hub_opts none = {0};
	if (!opts) opts = &none;
	memset(out, 0, sizeof(*out));
	if (!model || !model[0]) return sg_error(SG_ERR_INVALID_ARG, "no model given");
	char expanded[SG_HUB_PATH_MAX];
	const char *home = getenv("HOME");
	if (model[0] == '~' && model[1] == '/' && home) {
		snprintf(expanded, sizeof(expanded), "%s%s", home, model + 1);
		model = expanded;
	}
	struct stat sb;
	if (!stat(model, &sb)) return local_path(model, SG_HUB_SRC_PATH, out);
	if (model[0] == '/' || model[0] == '.' || model[0] == '~')
		return sg_error(SG_ERR_NOT_FOUND, "no such file or folder: %s", model);

	sg_status st;
	if (!sg_hub_looks_like_repo(model)) {
		char dir[SG_HUB_PATH_MAX], path[SG_HUB_PATH_MAX];
		if ((st = sg_hub_models_dir(dir, sizeof(dir)))) return st;
		if (!strchr(model, '/') && !sg_hub_join(path, sizeof(path), dir, model) && !lstat(path, &sb))
			return local_path(path, SG_HUB_SRC_MODELS_DIR, out);
		return sg_error(SG_ERR_NOT_FOUND,
				"unknown model '%s': not a file or folder here, not in %s, and not a Hugging Face repo id "
				"(org/name); `saragossa list` shows the models on this machine", model, dir);
	}

	sg_hub_ref ref;
	if ((st = sg_hub_parse_ref(model, &ref))) return st;
	char cache[SG_HUB_PATH_MAX];
	if ((st = sg_hub_cache_dir(cache, sizeof(cache)))) return st;
	if (!opts->update && !sg_hub_find_cached(&ref, cache, out)) return SG_OK;
	if (opts->offline || offline_env()) {
		if (!sg_hub_find_cached(&ref, cache, out)) return SG_OK;
		return sg_error(SG_ERR_NOT_FOUND, "%s is not in the local cache (%s) and downloads are off (offline mode)",
				ref.repo, cache);
	}
	int unreachable = 0;
	st = sg_hub_download(&ref, cache, opts, out, &unreachable);
	if (!st || !unreachable) return st;
	char why[1024];
	snprintf(why, sizeof(why), "%s", sg_last_error());
	if (!sg_hub_find_cached(&ref, cache, out)) {
		SG_WARN("%s; using the cached copy of %s", why, ref.repo);
		return SG_OK;
	}
	return sg_error(SG_ERR_IO, "%s is not in the local cache and %s", ref.repo, why);
}
