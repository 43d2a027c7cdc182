#include "hub/cache.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/json.h"
#include "hub/fs.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

static int list_gguf_in(const char *dir, const char *prefix, char (*names)[SG_HUB_FILE_MAX + 1], int n, int cap,
			int depth)
{
	DIR *d = opendir(dir);
	if (!d) return n;
	struct dirent *e;
	while ((e = readdir(d)) && n < cap) {
		if (e->d_name[0] == '.') continue;
		char full[SG_HUB_PATH_MAX], rel[SG_HUB_FILE_MAX + 1];
		if (snprintf(full, sizeof(full), "%s/%s", dir, e->d_name) >= (int)sizeof(full)) continue;
		if (snprintf(rel, sizeof(rel), "%s%s", prefix, e->d_name) >= (int)sizeof(rel)) continue;
		if (depth < 2 && sg_hub_is_dir(full)) {
			char sub[SG_HUB_FILE_MAX + 1];
			if (snprintf(sub, sizeof(sub), "%s/", rel) >= (int)sizeof(sub)) continue;
			n = list_gguf_in(full, sub, names, n, cap, depth + 1);
		} else if (sg_hub_is_gguf_name(e->d_name) && sg_hub_is_file(full)) {
			memcpy(names[n++], rel, strlen(rel) + 1);
		}
	}
	closedir(d);
	return n;
}

int sg_hub_list_gguf(const char *dir, char (*names)[SG_HUB_FILE_MAX + 1], int cap)
{
	return list_gguf_in(dir, "", names, 0, cap, 0);
}

const char *sg_hub_kind_name(sg_hub_kind kind)
{
	return kind == SG_HUB_KIND_GGUF ? "gguf" : kind == SG_HUB_KIND_FILE ? "file" : "folder";
}

/* ---- a complete copy in the Hugging Face cache ---- */

/* 1 if the snapshot holds the weights its index lists (or, without an index, a safetensors file
 * or an MLX weights.npz). */
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
	if (snprintf(path, sizeof(path), "%s/weights.npz", snap) < (int)sizeof(path) && sg_hub_is_file(path)) return 1;
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

static void dtype_name(const char *dt, char *quant, size_t qn)
{
	static const char *const map[][2] = {{"bfloat16", "bf16"}, {"float16", "f16"}, {"float32", "f32"},
					     {"half", "f16"},      {"float", "f32"},   {"float8_e4m3fn", "fp8"}};
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (!strcmp(dt, map[i][0])) {
			snprintf(quant, qn, "%s", map[i][1]);
			return;
		}
	snprintf(quant, qn, "%s", dt);
}

static int has_suffix_file(const char *dir, const char *suffix)
{
	DIR *d = opendir(dir);
	if (!d) return 0;
	size_t sl = strlen(suffix);
	int found = 0;
	struct dirent *e;
	while (!found && (e = readdir(d))) {
		size_t n = strlen(e->d_name);
		found = n > sl && !strcasecmp(e->d_name + n - sl, suffix);
	}
	closedir(d);
	return found;
}

void sg_hub_describe_folder(const char *dir, char *format, size_t fn, char *quant, size_t qn)
{
	quant[0] = 0;
	char path[SG_HUB_PATH_MAX];
	int st = has_suffix_file(dir, ".safetensors");
	int npz = !st && !sg_hub_join(path, sizeof(path), dir, "weights.npz") && sg_hub_is_file(path); /* MLX, np.savez */
	snprintf(format, fn, "%s", st ? "safetensors" : npz ? "npz" : has_suffix_file(dir, ".gguf") ? "gguf" : "other");
	json_t *cfg = NULL;
	if (sg_hub_join(path, sizeof(path), dir, "config.json") || sg_json_load_file(path, 16u << 20, &cfg)) return;
	json_t *q = json_object_get(cfg, "quantization");
	json_t *qc = json_object_get(cfg, "quantization_config");
	int64_t bits = 0, group = 0;
	const char *s = NULL;
	if (json_is_object(q) && !sg_json_get_int(q, "bits", &bits)) {
		/* MLX writes "quantization": {"group_size": 64, "bits": 4} beside the safetensors. */
		if (st || npz) snprintf(format, fn, "mlx");
		if (!sg_json_get_int(q, "group_size", &group)) snprintf(quant, qn, "%lld-bit g%lld", (long long)bits, (long long)group);
		else snprintf(quant, qn, "%lld-bit", (long long)bits);
	} else if (json_is_object(qc) && !sg_json_get_str(qc, "quant_method", &s)) {
		if (!sg_json_get_int(qc, "bits", &bits)) snprintf(quant, qn, "%s %lld-bit", s, (long long)bits);
		else snprintf(quant, qn, "%s", s);
	} else if (!sg_json_get_str(cfg, "torch_dtype", &s) || !sg_json_get_str(cfg, "dtype", &s)) {
		dtype_name(s, quant, qn);
	} else {
		json_t *tc = json_object_get(cfg, "text_config");
		if (json_is_object(tc) && (!sg_json_get_str(tc, "torch_dtype", &s) || !sg_json_get_str(tc, "dtype", &s)))
			dtype_name(s, quant, qn);
	}
	json_decref(cfg);
}

/* ---- listing ---- */

typedef struct entries {
	sg_hub_entry *v;
	int n, cap;
} entries;

static sg_hub_entry *push(entries *es)
{
	if (es->n == es->cap) {
		int cap = es->cap ? es->cap * 2 : 16;
		sg_hub_entry *nv = sg_realloc(es->v, (size_t)cap * sizeof(*nv));
		if (!nv) return NULL;
		es->v = nv;
		es->cap = cap;
	}
	sg_hub_entry *e = &es->v[es->n++];
	memset(e, 0, sizeof(*e));
	return e;
}

/* The snapshot a listing shows: refs/main's commit, else the most recently modified. */
static int pick_snapshot(const char *repo_dir, char *snap, size_t n)
{
	char path[SG_HUB_PATH_MAX], commit[64] = "";
	if (snprintf(path, sizeof(path), "%s/refs/main", repo_dir) < (int)sizeof(path)) {
		FILE *f = fopen(path, "r");
		if (f) {
			if (!fgets(commit, sizeof(commit), f)) commit[0] = 0;
			fclose(f);
			commit[strcspn(commit, " \r\n")] = 0;
		}
	}
	if (sg_hub_is_commit(commit) && snprintf(snap, n, "%s/snapshots/%s", repo_dir, commit) < (int)n &&
	    sg_hub_is_dir(snap))
		return 1;
	if (snprintf(path, sizeof(path), "%s/snapshots", repo_dir) >= (int)sizeof(path)) return 0;
	DIR *d = opendir(path);
	if (!d) return 0;
	double best = -1;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.') continue;
		char full[SG_HUB_PATH_MAX];
		struct stat sb;
		if (snprintf(full, sizeof(full), "%s/%s", path, e->d_name) >= (int)sizeof(full) || stat(full, &sb) ||
		    !S_ISDIR(sb.st_mode))
			continue;
		double t = (double)sb.st_mtim.tv_sec + 1e-9 * (double)sb.st_mtim.tv_nsec;
		if (t > best && snprintf(snap, n, "%s", full) < (int)n) best = t;
	}
	closedir(d);
	return best >= 0;
}

static int snapshot_has_files(const char *snap)
{
	DIR *d = opendir(snap);
	if (!d) return 0;
	int any = 0;
	struct dirent *e;
	while (!any && (e = readdir(d))) any = e->d_name[0] != '.';
	closedir(d);
	return any;
}

static sg_status list_hf(const char *cache, entries *es)
{
	DIR *d = opendir(cache);
	if (!d) return SG_OK;
	enum { CAP = 128 };
	char(*gg)[SG_HUB_FILE_MAX + 1] = sg_calloc(CAP, SG_HUB_FILE_MAX + 1);
	if (!gg) {
		closedir(d);
		return sg_error(SG_ERR_NOMEM, "no memory to list %s", cache);
	}
	sg_status st = SG_OK;
	struct dirent *de;
	while (!st && (de = readdir(d))) {
		if (strncmp(de->d_name, "models--", 8) || !de->d_name[8]) continue;
		char repo_dir[SG_HUB_PATH_MAX], snap[SG_HUB_PATH_MAX], id[sizeof(((sg_hub_entry *)0)->name)];
		if (snprintf(repo_dir, sizeof(repo_dir), "%s/%s", cache, de->d_name) >= (int)sizeof(repo_dir)) continue;
		if (!pick_snapshot(repo_dir, snap, sizeof(snap)) || !snapshot_has_files(snap)) continue;
		snprintf(id, sizeof(id), "%s", de->d_name + 8);
		char *sep = strstr(id, "--");
		if (sep) {
			*sep = '/';
			memmove(sep + 1, sep + 2, strlen(sep + 2) + 1);
		}
		char blobs[SG_HUB_PATH_MAX];
		uint64_t total = sg_hub_join(blobs, sizeof(blobs), repo_dir, "blobs") ? 0 : sg_hub_tree_size(blobs);
		int ng = sg_hub_list_gguf(snap, gg, CAP);
		uint64_t gguf_bytes = 0;
		for (int i = 0; i < ng; i++) {
			sg_hub_entry *e = push(es);
			if (!e) {
				st = sg_error(SG_ERR_NOMEM, "no memory for the model list");
				break;
			}
			if (snprintf(e->name, sizeof(e->name), "%s:%s", id, gg[i]) >= (int)sizeof(e->name) ||
			    sg_hub_join(e->path, sizeof(e->path), snap, gg[i])) {
				es->n--;
				continue;
			}
			snprintf(e->format, sizeof(e->format), "gguf");
			sg_hub_quant_from_name(gg[i], e->quant, sizeof(e->quant));
			int64_t sz = sg_hub_file_size(e->path);
			e->size = sz > 0 ? (uint64_t)sz : 0;
			gguf_bytes += e->size;
			e->hf_cache = 1;
		}
		char format[16], quant[48];
		sg_hub_describe_folder(snap, format, sizeof(format), quant, sizeof(quant));
		if (st || (ng > 0 && strcmp(format, "safetensors") && strcmp(format, "mlx"))) continue;
		sg_hub_entry *e = push(es);
		if (!e) {
			st = sg_error(SG_ERR_NOMEM, "no memory for the model list");
			break;
		}
		snprintf(e->name, sizeof(e->name), "%s", id);
		snprintf(e->format, sizeof(e->format), "%s", format);
		snprintf(e->quant, sizeof(e->quant), "%s", quant);
		snprintf(e->path, sizeof(e->path), "%s", snap);
		e->size = total > gguf_bytes ? total - gguf_bytes : 0;
		e->hf_cache = 1;
	}
	sg_free(gg);
	closedir(d);
	return st;
}

static sg_status list_models_dir(const char *dir, entries *es)
{
	DIR *d = opendir(dir);
	if (!d) return SG_OK;
	struct dirent *de;
	sg_status st = SG_OK;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.') continue;
		char path[SG_HUB_PATH_MAX];
		if (sg_hub_join(path, sizeof(path), dir, de->d_name)) continue;
		int is_dir = sg_hub_is_dir(path);
		if (!is_dir && !sg_hub_is_gguf_name(de->d_name)) continue;
		sg_hub_entry *e = push(es);
		if (!e) {
			st = sg_error(SG_ERR_NOMEM, "no memory for the model list");
			break;
		}
		snprintf(e->name, sizeof(e->name), "%s", de->d_name);
		snprintf(e->path, sizeof(e->path), "%s", path);
		if (is_dir) {
			sg_hub_describe_folder(path, e->format, sizeof(e->format), e->quant, sizeof(e->quant));
			e->size = sg_hub_tree_size(path);
		} else {
			snprintf(e->format, sizeof(e->format), "gguf");
			sg_hub_quant_from_name(de->d_name, e->quant, sizeof(e->quant));
			int64_t sz = sg_hub_file_size(path);
			e->size = sz > 0 ? (uint64_t)sz : 0;
		}
	}
	closedir(d);
	return st;
}

static int by_name(const void *a, const void *b)
{
	const sg_hub_entry *x = a, *y = b;
	if (x->hf_cache != y->hf_cache) return y->hf_cache - x->hf_cache;
	return strcasecmp(x->name, y->name);
}

sg_status sg_hub_list(sg_hub_entry **out, int *n)
{
	*out = NULL;
	*n = 0;
	char cache[SG_HUB_PATH_MAX], models[SG_HUB_PATH_MAX];
	entries es = {0};
	sg_status st = sg_hub_cache_dir(cache, sizeof(cache));
	if (!st) st = list_hf(cache, &es);
	if (!st && !sg_hub_models_dir(models, sizeof(models))) st = list_models_dir(models, &es);
	if (st) {
		sg_free(es.v);
		return st;
	}
	if (es.n) qsort(es.v, (size_t)es.n, sizeof(*es.v), by_name);
	*out = es.v;
	*n = es.n;
	return SG_OK;
}

/* ---- removal ---- */

/* 1 if some link under dir (recursively) ends in blobs/<etag>. */
static int blob_in_use(const char *dir, const char *etag, int depth)
{
	DIR *d = opendir(dir);
	if (!d) return 0;
	int used = 0;
	struct dirent *e;
	while (!used && (e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
		char full[SG_HUB_PATH_MAX], target[SG_HUB_PATH_MAX];
		struct stat sb;
		if (sg_hub_join(full, sizeof(full), dir, e->d_name) || lstat(full, &sb)) continue;
		if (S_ISDIR(sb.st_mode) && depth < 16) used = blob_in_use(full, etag, depth + 1);
		else if (S_ISLNK(sb.st_mode)) {
			ssize_t k = readlink(full, target, sizeof(target) - 1);
			if (k <= 0) continue;
			target[k] = 0;
			const char *base = strrchr(target, '/');
			used = !strcmp(base ? base + 1 : target, etag);
		}
	}
	closedir(d);
	return used;
}

/* Removes `file` from every snapshot of the repo, then its blob if no link uses it any more. */
static sg_status remove_repo_file(const char *repo_dir, const char *file, uint64_t *freed, int *removed)
{
	char snaps[SG_HUB_PATH_MAX];
	if (sg_hub_join(snaps, sizeof(snaps), repo_dir, "snapshots")) return sg_error(SG_ERR_RANGE, "path too long");
	DIR *d = opendir(snaps);
	if (!d) return SG_OK;
	char etags[16][161];
	int ne = 0;
	struct dirent *e;
	sg_status st = SG_OK;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.') continue;
		char link[SG_HUB_PATH_MAX], target[SG_HUB_PATH_MAX];
		if (snprintf(link, sizeof(link), "%s/%s/%s", snaps, e->d_name, file) >= (int)sizeof(link)) continue;
		struct stat sb;
		if (lstat(link, &sb)) continue;
		if (S_ISLNK(sb.st_mode)) {
			ssize_t k = readlink(link, target, sizeof(target) - 1);
			if (k > 0 && ne < 16) {
				target[k] = 0;
				const char *base = strrchr(target, '/');
				if (snprintf(etags[ne], sizeof(etags[0]), "%s", base ? base + 1 : target) < (int)sizeof(etags[0]))
					ne++;
			}
		} else if (S_ISREG(sb.st_mode)) {
			*freed += (uint64_t)sb.st_size;
		}
		if (unlink(link)) {
			st = sg_error(SG_ERR_IO, "cannot remove %s: %s", link, strerror(errno));
			break;
		}
		(*removed)++;
	}
	closedir(d);
	for (int i = 0; !st && i < ne; i++) {
		char blob[SG_HUB_PATH_MAX];
		if (sg_hub_check_etag(etags[i]) || blob_in_use(snaps, etags[i], 0)) continue;
		if (snprintf(blob, sizeof(blob), "%s/blobs/%s", repo_dir, etags[i]) >= (int)sizeof(blob)) continue;
		int64_t sz = sg_hub_file_size(blob);
		if (sz >= 0 && !unlink(blob)) *freed += (uint64_t)sz;
	}
	return st;
}

sg_status sg_hub_remove(const char *model, char *what, size_t wn, uint64_t *freed)
{
	*freed = 0;
	what[0] = 0;
	if (!model || !model[0]) return sg_error(SG_ERR_INVALID_ARG, "no model given");
	if (model[0] == '/' || model[0] == '.' || model[0] == '~')
		return sg_error(SG_ERR_INVALID_ARG,
				"rm removes models from the caches only (a repo id or a name from `saragossa list`), not "
				"the path '%s'", model);
	sg_status st;
	if (!sg_hub_looks_like_repo(model)) {
		char dir[SG_HUB_PATH_MAX], path[SG_HUB_PATH_MAX];
		struct stat sb;
		if ((st = sg_hub_models_dir(dir, sizeof(dir)))) return st;
		if (strchr(model, '/') || sg_hub_join(path, sizeof(path), dir, model) || lstat(path, &sb))
			return sg_error(SG_ERR_NOT_FOUND, "'%s' is not in %s nor a Hugging Face repo id; `saragossa list` "
							  "shows what can be removed", model, dir);
		*freed = sg_hub_tree_size(path);
		if ((st = sg_hub_rm_tree(path))) return st;
		snprintf(what, wn, "%s", path);
		return SG_OK;
	}
	sg_hub_ref ref;
	if ((st = sg_hub_parse_ref(model, &ref))) return st;
	char cache[SG_HUB_PATH_MAX], repo_dir[SG_HUB_PATH_MAX];
	if ((st = sg_hub_cache_dir(cache, sizeof(cache))) || (st = sg_hub_repo_dir(cache, &ref, repo_dir, sizeof(repo_dir))))
		return st;
	struct stat sb;
	if (lstat(repo_dir, &sb) || !S_ISDIR(sb.st_mode))
		return sg_error(SG_ERR_NOT_FOUND, "%s is not in the Hugging Face cache (%s)", ref.repo, cache);
	if (!ref.file[0] && !ref.quant[0]) {
		*freed = sg_hub_tree_size(repo_dir);
		if ((st = sg_hub_rm_tree(repo_dir))) return st;
		char locks[SG_HUB_PATH_MAX];
		if (snprintf(locks, sizeof(locks), "%s/.locks/models--%s--%s", cache, ref.org, ref.name) < (int)sizeof(locks))
			sg_hub_rm_tree(locks);
		snprintf(what, wn, "%s (%s)", ref.repo, repo_dir);
		return SG_OK;
	}
	char file[SG_HUB_FILE_MAX + 1];
	if (ref.file[0]) {
		snprintf(file, sizeof(file), "%s", ref.file);
	} else {
		sg_hub_model m;
		if ((st = sg_hub_find_cached(&ref, cache, &m)) || m.kind != SG_HUB_KIND_GGUF)
			return sg_error(SG_ERR_NOT_FOUND, "%s has no %s GGUF file in the cache", ref.repo, ref.quant);
		const char *rel = strstr(m.path, "/snapshots/");
		rel = rel ? strchr(rel + 11, '/') : NULL;
		if (!rel) return sg_error(SG_ERR_INTERNAL, "unexpected cache path %s", m.path);
		snprintf(file, sizeof(file), "%s", rel + 1);
	}
	int removed = 0;
	if ((st = remove_repo_file(repo_dir, file, freed, &removed))) return st;
	if (!removed) return sg_error(SG_ERR_NOT_FOUND, "%s: %s is not in the Hugging Face cache", ref.repo, file);
	snprintf(what, wn, "%s:%s", ref.repo, file);
	return SG_OK;
}
