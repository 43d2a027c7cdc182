#include "hub/resolve.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/flags.h"
#include "base/json.h"
#include "base/log.h"
#include "hub/cache.h"
#include "hub/download.h"
#include "hub/fs.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *sg_hub_kind_name(sg_hub_kind kind) { return kind == SG_HUB_KIND_GGUF ? "gguf" : "folder"; }

static int has_gguf_magic(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) return 0;
	char m[4];
	int ok = fread(m, 1, 4, f) == 4 && !memcmp(m, "GGUF", 4);
	fclose(f);
	return ok;
}

/* 1 if the snapshot holds the weights its index lists (or, without an index, a safetensors file). */
static int weights_complete(const char *snap)
{
	char path[SG_HUB_PATH_MAX];
	if (snprintf(path, sizeof(path), "%s/model.safetensors.index.json", snap) >= (int)sizeof(path)) return 0;
	if (sg_hub_is_file(path)) {
		json_t *idx = NULL;
		if (sg_json_load_file(path, 64u << 20, &idx)) return 0;
		json_t *map = json_object_get(idx, "weight_map");
		int ok = json_is_object(map) && json_object_size(map) > 0;
		const char *key;
		json_t *v;
		json_object_foreach(map, key, v)
		{
			const char *shard = json_string_value(v);
			if (!ok || !shard || sg_hub_check_filename(shard) ||
			    snprintf(path, sizeof(path), "%s/%s", snap, shard) >= (int)sizeof(path) || !sg_hub_is_file(path)) {
				ok = 0;
				break;
			}
		}
		json_decref(idx);
		return ok;
	}
	DIR *d = opendir(snap);
	if (!d) return 0;
	int found = 0;
	struct dirent *e;
	while (!found && (e = readdir(d))) {
		size_t n = strlen(e->d_name);
		if (n > 12 && !strcmp(e->d_name + n - 12, ".safetensors") &&
		    snprintf(path, sizeof(path), "%s/%s", snap, e->d_name) < (int)sizeof(path))
			found = sg_hub_is_file(path);
	}
	closedir(d);
	return found;
}

sg_status sg_hub_find_cached(const sg_hub_ref *ref, const char *cache, sg_hub_model *out)
{
	memset(out, 0, sizeof(*out));
	char repo_dir[SG_HUB_PATH_MAX], snap[SG_HUB_PATH_MAX], path[SG_HUB_PATH_MAX], commit[64] = "";
	sg_status st = sg_hub_repo_dir(cache, ref, repo_dir, sizeof(repo_dir));
	if (st) return st;
	if (sg_hub_is_commit(ref->revision)) {
		memcpy(commit, ref->revision, 41);
	} else {
		FILE *f = NULL;
		if (snprintf(path, sizeof(path), "%s/refs/%s", repo_dir, ref->revision) < (int)sizeof(path))
			f = fopen(path, "r");
		if (!f) return sg_error(SG_ERR_NOT_FOUND, "%s@%s is not in the cache %s", ref->repo, ref->revision, cache);
		if (!fgets(commit, sizeof(commit), f)) commit[0] = 0;
		fclose(f);
		commit[strcspn(commit, " \r\n")] = 0;
		if (!sg_hub_is_commit(commit))
			return sg_error(SG_ERR_NOT_FOUND, "%s: %s holds no commit id", ref->repo, path);
	}
	if (snprintf(snap, sizeof(snap), "%s/snapshots/%s", repo_dir, commit) >= (int)sizeof(snap) || !sg_hub_is_dir(snap))
		return sg_error(SG_ERR_NOT_FOUND, "%s: snapshot %s is not in the cache", ref->repo, commit);

	out->source = SG_HUB_SRC_HF_CACHE;
	snprintf(out->repo, sizeof(out->repo), "%s", ref->repo);
	snprintf(out->commit, sizeof(out->commit), "%s", commit);
	if (ref->file[0]) {
		if ((st = sg_hub_join(out->path, sizeof(out->path), snap, ref->file))) return st;
		if (!sg_hub_is_file(out->path))
			return sg_error(SG_ERR_NOT_FOUND, "%s: %s is not in the cached snapshot", ref->repo, ref->file);
		out->kind = SG_HUB_KIND_GGUF;
		return SG_OK;
	}
	if ((st = sg_hub_join(path, sizeof(path), snap, "config.json"))) return st;
	if (!ref->quant[0] && sg_hub_is_file(path) && weights_complete(snap)) {
		out->kind = SG_HUB_KIND_FOLDER;
		snprintf(out->path, sizeof(out->path), "%s", snap);
		return SG_OK;
	}
	enum { CAP = 256 };
	char(*names)[SG_HUB_FILE_MAX + 1] = sg_calloc(CAP, SG_HUB_FILE_MAX + 1);
	const char **ptrs = sg_calloc(CAP, sizeof(*ptrs));
	if (!names || !ptrs) {
		sg_free(names);
		sg_free(ptrs);
		return sg_error(SG_ERR_NOMEM, "no memory to list %s", snap);
	}
	int n = sg_hub_list_gguf(snap, names, CAP);
	for (int i = 0; i < n; i++) ptrs[i] = names[i];
	int pick = sg_hub_pick_gguf(ptrs, n, ref->quant[0] ? ref->quant : NULL);
	if (pick >= 0) st = sg_hub_join(out->path, sizeof(out->path), snap, names[pick]);
	else st = sg_error(SG_ERR_NOT_FOUND, "%s: no complete copy in the cache %s", ref->repo, cache);
	sg_free(ptrs);
	sg_free(names);
	if (!st) out->kind = SG_HUB_KIND_GGUF;
	return st;
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
	return sg_error(SG_ERR_UNSUPPORTED,
			"%s is not a model: a model is a folder (config.json + safetensors), a .gguf file or a Hugging "
			"Face repo id (org/name)", path);
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
