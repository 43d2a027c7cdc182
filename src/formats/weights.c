/*
 * Weights: open a folder / safetensors / GGUF, index tensors by name, fold MLX companions, bind.
 */
#include "formats/weights.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/json.h"

#define MAX_CONFIG_BYTES (16u << 20)
#define MAX_INDEX_BYTES (64u << 20)
#define MAX_SHARDS 4096

/* ---- name index ---- */

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return h;
}

static sg_status build_index(sg_weights *w)
{
	int cap = 16;
	while (cap < 2 * w->n_tensors + 2) cap *= 2;
	w->index = sg_malloc((size_t)cap * sizeof(int));
	if (!w->index) return sg_error(SG_ERR_NOMEM, "weights: name index of %d tensors", w->n_tensors);
	w->index_cap = cap;
	for (int i = 0; i < cap; i++) w->index[i] = -1;
	for (int i = 0; i < w->n_tensors; i++) {
		const sg_tensor *t = w->tensors[i];
		for (uint64_t h = fnv1a(t->name) & (uint64_t)(cap - 1);; h = (h + 1) & (uint64_t)(cap - 1)) {
			if (w->index[h] < 0) {
				w->index[h] = i;
				break;
			}
			const sg_tensor *o = w->tensors[w->index[h]];
			if (!strcmp(o->name, t->name))
				return sg_error(SG_ERR_FORMAT, "weights: tensor '%s' appears twice (in %s and %s)", t->name,
						w->files[o->file].path, w->files[t->file].path);
		}
	}
	return SG_OK;
}

const sg_tensor *sg_weights_find(const sg_weights *w, const char *name)
{
	if (!w || !w->index || !name) return NULL;
	int cap = w->index_cap;
	for (uint64_t h = fnv1a(name) & (uint64_t)(cap - 1);; h = (h + 1) & (uint64_t)(cap - 1)) {
		int i = w->index[h];
		if (i < 0) return NULL;
		if (!strcmp(w->tensors[i]->name, name)) return w->tensors[i];
	}
}

/* ---- files ---- */

static int has_suffix(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && !strcmp(s + a - b, suf);
}

static char *join(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *p = sg_malloc(n);
	if (p) snprintf(p, n, "%s/%s", dir, name);
	return p;
}

static int is_file(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static sg_status add_file(sg_weights *w, const char *path)
{
	sg_mapped_file *nf = sg_realloc(w->files, (size_t)(w->n_files + 1) * sizeof(*nf));
	if (!nf) return sg_error(SG_ERR_NOMEM, "weights: file table");
	w->files = nf;
	sg_status st = sg_mmap_open(path, &w->files[w->n_files]);
	if (st) return st;
	w->n_files++;
	return SG_OK;
}

static sg_status collect_tensors(sg_weights *w)
{
	int n = 0;
	if (w->format == SG_WEIGHTS_GGUF) n = w->gguf.n_tensors;
	else if (w->format == SG_WEIGHTS_NPZ) n = w->npz.n_tensors;
	else
		for (int f = 0; f < w->n_files; f++) n += w->st[f].n_tensors;
	w->tensors = sg_calloc(n ? (size_t)n : 1, sizeof(sg_tensor *));
	if (!w->tensors) return sg_error(SG_ERR_NOMEM, "weights: %d tensors", n);
	if (w->format == SG_WEIGHTS_GGUF)
		for (int i = 0; i < n; i++) w->tensors[w->n_tensors++] = &w->gguf.tensors[i];
	else if (w->format == SG_WEIGHTS_NPZ)
		for (int i = 0; i < n; i++) w->tensors[w->n_tensors++] = &w->npz.tensors[i];
	else
		for (int f = 0; f < w->n_files; f++)
			for (int i = 0; i < w->st[f].n_tensors; i++) w->tensors[w->n_tensors++] = &w->st[f].tensors[i];
	return build_index(w);
}

static sg_status parse_safetensors_files(sg_weights *w)
{
	w->st = sg_calloc((size_t)w->n_files, sizeof(sg_safetensors));
	if (!w->st) return sg_error(SG_ERR_NOMEM, "weights: shard table");
	for (int f = 0; f < w->n_files; f++) {
		sg_status st = sg_safetensors_parse(w->files[f].data, w->files[f].size, w->files[f].path, f, &w->st[f]);
		if (st) return st;
	}
	return SG_OK;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Shard names come from a JSON file: they must be plain names inside the folder. */
static int safe_shard_name(const char *s)
{
	return s[0] && s[0] != '.' && !strchr(s, '/') && !strchr(s, '\\') && strlen(s) < 1024;
}

static sg_status open_index(sg_weights *w, const char *dir, const char *index_path)
{
	json_t *root;
	sg_status st = sg_json_load_file(index_path, MAX_INDEX_BYTES, &root);
	if (st) return st;
	json_t *map = json_object_get(root, "weight_map");
	char **names = NULL;
	size_t n_names = 0;
	if (!json_is_object(map)) {
		st = sg_error(SG_ERR_FORMAT, "weights: %s: no \"weight_map\" object", index_path);
		goto done;
	}
	names = sg_calloc(json_object_size(map) + 1, sizeof(char *));
	if (!names) {
		st = sg_error(SG_ERR_NOMEM, "weights: %s", index_path);
		goto done;
	}
	const char *key;
	json_t *v;
	json_object_foreach(map, key, v)
	{
		if (!json_is_string(v) || !safe_shard_name(json_string_value(v))) {
			st = sg_error(SG_ERR_FORMAT, "weights: %s: tensor '%s' maps to %s, not a file name in the folder",
				      index_path, key, json_is_string(v) ? json_string_value(v) : sg_json_type_name(v));
			goto done;
		}
		names[n_names++] = (char *)json_string_value(v);
	}
	qsort(names, n_names, sizeof(char *), cmp_str);
	for (size_t i = 0; i < n_names; i++) {
		if (i && !strcmp(names[i], names[i - 1])) continue;
		if (w->n_files >= MAX_SHARDS) {
			st = sg_error(SG_ERR_FORMAT, "weights: %s names more than %d shards", index_path, MAX_SHARDS);
			goto done;
		}
		char *p = join(dir, names[i]);
		if (!p) {
			st = sg_error(SG_ERR_NOMEM, "weights: shard path");
			goto done;
		}
		st = add_file(w, p);
		sg_free(p);
		if (st) {
			sg_error_wrap(st, "weights: shard listed in %s", index_path);
			goto done;
		}
	}
	if (!w->n_files) {
		st = sg_error(SG_ERR_FORMAT, "weights: %s: weight_map is empty", index_path);
		goto done;
	}
	if ((st = parse_safetensors_files(w)) || (st = collect_tensors(w))) goto done;
	json_object_foreach(map, key, v)
	{
		const sg_tensor *t = sg_weights_find(w, key);
		const char *want = json_string_value(v);
		if (!t || strcmp(strrchr(w->files[t->file].path, '/') + 1, want)) {
			st = sg_error(SG_ERR_FORMAT, "weights: %s says tensor '%s' is in %s, but %s", index_path, key, want,
				      t ? "it is in another shard" : "no shard holds it");
			goto done;
		}
	}
done:
	sg_free(names);
	json_decref(root);
	return st;
}

/* One npz archive as the model's only file. */
static sg_status open_npz(sg_weights *w, const char *path)
{
	w->format = SG_WEIGHTS_NPZ;
	sg_status st = add_file(w, path);
	if (!st) st = sg_npz_parse(w->files[0].data, w->files[0].size, w->files[0].path, 0, &w->npz);
	return st ? st : collect_tensors(w);
}

static sg_status open_folder(sg_weights *w, const char *dir)
{
	sg_status st;
	char *p = join(dir, "model.safetensors.index.json");
	if (!p) return sg_error(SG_ERR_NOMEM, "weights: path");
	if (is_file(p)) {
		w->format = SG_WEIGHTS_SAFETENSORS;
		st = open_index(w, dir, p);
		sg_free(p);
		return st;
	}
	sg_free(p);
	/* model.safetensors alone is the model: other safetensors beside it (reference outputs,
	 * adapters, optimizer state) are not weights of this model */
	p = join(dir, "model.safetensors");
	if (!p) return sg_error(SG_ERR_NOMEM, "weights: path");
	if (is_file(p)) {
		w->format = SG_WEIGHTS_SAFETENSORS;
		st = add_file(w, p);
		sg_free(p);
		if (!st) st = parse_safetensors_files(w);
		if (!st) st = collect_tensors(w);
		return st;
	}
	sg_free(p);
	p = NULL;
	DIR *d = opendir(dir);
	if (!d) return sg_error(SG_ERR_IO, "weights: cannot list '%s': %s", dir, strerror(errno));
	char **st_names = NULL, *gguf_name = NULL;
	int n_st = 0, n_gguf = 0;
	st = SG_OK;
	for (struct dirent *e; (e = readdir(d));) {
		if (e->d_name[0] == '.') continue;
		if (has_suffix(e->d_name, ".safetensors")) {
			char **nn = sg_realloc(st_names, (size_t)(n_st + 1) * sizeof(char *));
			if (!nn || !(nn[n_st] = sg_strdup(e->d_name))) {
				if (nn) st_names = nn;
				st = sg_error(SG_ERR_NOMEM, "weights: listing '%s'", dir);
				break;
			}
			st_names = nn;
			n_st++;
		} else if (has_suffix(e->d_name, ".gguf")) {
			n_gguf++;
			sg_free(gguf_name);
			gguf_name = sg_strdup(e->d_name);
		}
	}
	closedir(d);
	if (!st && n_st) {
		qsort(st_names, (size_t)n_st, sizeof(char *), cmp_str);
		w->format = SG_WEIGHTS_SAFETENSORS;
		for (int i = 0; i < n_st && !st; i++) {
			char *fp = join(dir, st_names[i]);
			st = fp ? add_file(w, fp) : sg_error(SG_ERR_NOMEM, "weights: path");
			sg_free(fp);
		}
		if (!st) st = parse_safetensors_files(w);
		if (!st) st = collect_tensors(w);
	} else if (!st && (p = join(dir, "weights.npz")) && is_file(p)) {
		/* MLX's older converters (mlx-examples' whisper among them) save np.savez archives */
		st = open_npz(w, p);
	} else if (!st && n_gguf == 1) {
		char *fp = join(dir, gguf_name);
		w->format = SG_WEIGHTS_GGUF;
		st = fp ? add_file(w, fp) : sg_error(SG_ERR_NOMEM, "weights: path");
		sg_free(fp);
		if (!st) st = sg_gguf_parse(w->files[0].data, w->files[0].size, w->files[0].path, 0, &w->gguf);
		if (!st) st = collect_tensors(w);
	} else if (!st) {
		st = sg_error(SG_ERR_NOT_FOUND,
			      n_gguf > 1 ? "weights: '%s' holds several .gguf files and no safetensors: name one file"
					 : "weights: no weights in '%s' (expected model.safetensors.index.json, "
					   "*.safetensors, weights.npz or one .gguf)",
			      dir);
	}
	for (int i = 0; i < n_st; i++) sg_free(st_names[i]);
	sg_free(st_names);
	sg_free(gguf_name);
	sg_free(p);
	return st;
}

/* ---- MLX folding ---- */

/* The quantization that applies to module `mod` ("model.layers.0.mlp.gate_proj"): a per-module
 * override object, false (not quantized), or the top-level bits/group_size. */
static sg_status mlx_params(const json_t *q, const char *mod, int *bits, int *group, int *quantized)
{
	const json_t *src = q, *ov = json_object_get(q, mod);
	*quantized = 1;
	if (ov && json_is_false(ov)) return *quantized = 0, SG_OK;
	if (ov && json_is_object(ov)) src = ov;
	int64_t b = 0, g = 0;
	const char *mode = NULL;
	if (!sg_json_get_str(src, "mode", &mode) && strcmp(mode, "affine"))
		return sg_error(SG_ERR_UNSUPPORTED, "weights: quantization mode '%s' of '%s' (supported: affine)", mode, mod);
	if (sg_json_get_int(src, "bits", &b) || sg_json_get_int(src, "group_size", &g))
		return sg_error(SG_ERR_FORMAT, "weights: config.json quantization for '%s' needs integer bits and group_size",
				mod);
	if (!(b == 2 || b == 3 || b == 4 || b == 5 || b == 6 || b == 8) || !(g == 32 || g == 64 || g == 128))
		return sg_error(SG_ERR_UNSUPPORTED,
				"weights: MLX quantization of '%s': bits %lld, group_size %lld (supported: bits "
				"2,3,4,5,6,8; group 32,64,128)",
				mod, (long long)b, (long long)g);
	*bits = (int)b;
	*group = (int)g;
	return SG_OK;
}

static sg_status fold_one(sg_weights *w, const json_t *q, sg_tensor *t)
{
	size_t n = strlen(t->name);
	char mod[1024], name[1040];
	if (n - 7 >= sizeof(mod)) return SG_OK;
	memcpy(mod, t->name, n - 7); /* strip ".weight" */
	mod[n - 7] = 0;
	snprintf(name, sizeof(name), "%s.scales", mod);
	sg_tensor *sc = (sg_tensor *)sg_weights_find(w, name);
	snprintf(name, sizeof(name), "%s.biases", mod);
	sg_tensor *bi = (sg_tensor *)sg_weights_find(w, name);
	if (!sc && !bi) return SG_OK; /* a plain uint32 tensor */
	if (!sc || !bi)
		return sg_error(SG_ERR_FORMAT, "weights: MLX weight '%s' has %s but no %s", t->name,
				sc ? "scales" : "biases", sc ? "biases" : "scales");
	int bits = 0, group = 0, quantized = 0;
	sg_status st = mlx_params(q, mod, &bits, &group, &quantized);
	if (st) return st;
	if (!quantized) return SG_OK;
	char a[160], b[160], c[160];
	if ((sc->type != SG_TYPE_BF16 && sc->type != SG_TYPE_F16 && sc->type != SG_TYPE_F32) || bi->type != sc->type)
		return sg_error(SG_ERR_FORMAT, "weights: MLX weight '%s': scales are %s and biases %s (want both BF16 or F16)",
				t->name, sg_type_name(sc->type), sg_type_name(bi->type));
	int ok = t->n_dims >= 2 && sc->n_dims == t->n_dims && bi->n_dims == t->n_dims;
	for (int i = 1; ok && i < t->n_dims; i++) ok = sc->ne[i] == t->ne[i] && bi->ne[i] == t->ne[i];
	int64_t cols = ok ? sc->ne[0] * group : 0;
	ok = ok && bi->ne[0] == sc->ne[0] && sg_mlx_packed_words(bits, cols) == t->ne[0];
	if (!ok)
		return sg_error(SG_ERR_FORMAT,
				"weights: MLX weight '%s' (u%d, group %d): packed %s, scales %s and biases %s do not "
				"describe one matrix",
				t->name, bits, group, sg_tensor_shape_str(t, a, sizeof(a)), sg_tensor_shape_str(sc, b, sizeof(b)),
				sg_tensor_shape_str(bi, c, sizeof(c)));
	if (sc->type == SG_TYPE_F32)
		return sg_error(SG_ERR_UNSUPPORTED, "weights: MLX weight '%s' has F32 scales (supported: BF16, F16)", t->name);
	t->type = SG_TYPE_MLX_AFFINE;
	t->ne[0] = cols;
	t->mlx = (sg_mlx_q){bits, group, sc->type};
	t->scales = sc;
	t->biases = bi;
	sc->companion = bi->companion = 1;
	return SG_OK;
}

static sg_status fold_mlx(sg_weights *w)
{
	if (!w->config || w->format == SG_WEIGHTS_GGUF) return SG_OK;
	const json_t *q = json_object_get(w->config, "quantization");
	if (!q) q = json_object_get(w->config, "quantization_config");
	if (!json_is_object(q) || !json_object_get(q, "bits")) return SG_OK; /* not MLX */
	for (int i = 0; i < w->n_tensors; i++) {
		sg_tensor *t = w->tensors[i];
		if (t->type != SG_TYPE_U32 || !has_suffix(t->name, ".weight")) continue;
		sg_status st = fold_one(w, q, t);
		if (st) return st;
	}
	return SG_OK;
}

/* ---- open / close ---- */

static sg_status load_config(sg_weights *w, const char *dir)
{
	char *p = join(dir, "config.json");
	if (!p) return sg_error(SG_ERR_NOMEM, "weights: path");
	sg_status st = SG_OK;
	if (is_file(p)) {
		st = sg_json_load_file(p, MAX_CONFIG_BYTES, &w->config);
		if (!st && !json_is_object(w->config)) st = sg_error(SG_ERR_FORMAT, "%s: not a JSON object", p);
	}
	sg_free(p);
	return st;
}

sg_status sg_weights_open(const char *path, sg_weights **out)
{
	*out = NULL;
	if (!path || !*path) return sg_error(SG_ERR_INVALID_ARG, "weights: empty path");
	struct stat sb;
	if (stat(path, &sb) != 0)
		return sg_error(errno == ENOENT ? SG_ERR_NOT_FOUND : SG_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
	sg_weights *w = sg_calloc(1, sizeof(*w));
	if (!w || !(w->path = sg_strdup(path))) {
		sg_free(w);
		return sg_error(SG_ERR_NOMEM, "weights: opening '%s'", path);
	}
	sg_status st;
	if (S_ISDIR(sb.st_mode)) {
		st = load_config(w, path);
		if (!st) st = open_folder(w, path);
	} else {
		st = add_file(w, path);
		if (!st) {
			const sg_mapped_file *f = &w->files[0];
			if (f->size >= 4 && !memcmp(f->data, "GGUF", 4)) {
				w->format = SG_WEIGHTS_GGUF;
				st = sg_gguf_parse(f->data, f->size, f->path, 0, &w->gguf);
			} else if (has_suffix(path, ".gguf")) {
				st = sg_gguf_parse(f->data, f->size, f->path, 0, &w->gguf); /* reports the bad magic */
			} else {
				int npz = has_suffix(path, ".npz");
				w->format = npz ? SG_WEIGHTS_NPZ : SG_WEIGHTS_SAFETENSORS;
				char *dir = sg_strdup(path), *slash = dir ? strrchr(dir, '/') : NULL;
				if (!dir) st = sg_error(SG_ERR_NOMEM, "weights: path");
				else {
					if (slash) *slash = 0;
					st = load_config(w, slash ? dir : ".");
					sg_free(dir);
				}
				if (!st && npz) st = sg_npz_parse(f->data, f->size, f->path, 0, &w->npz);
				else if (!st) st = parse_safetensors_files(w);
			}
			if (!st) st = collect_tensors(w);
		}
	}
	if (!st) st = fold_mlx(w);
	if (st) {
		sg_weights_close(w);
		return st;
	}
	*out = w;
	return SG_OK;
}

void sg_weights_close(sg_weights *w)
{
	if (!w) return;
	if (w->st)
		for (int f = 0; f < w->n_files; f++) sg_safetensors_free(&w->st[f]);
	sg_free(w->st);
	sg_gguf_free(&w->gguf);
	sg_npz_free(&w->npz);
	for (int f = 0; f < w->n_files; f++) sg_mmap_close(&w->files[f]);
	sg_free(w->files);
	sg_free(w->tensors);
	sg_free(w->index);
	if (w->config) json_decref(w->config);
	sg_free(w->path);
	sg_free(w);
}

/* ---- names ---- */

#define COMMON_NAMES \
	{"token_embd", "model.embed_tokens"}, \
	{"output_norm", "model.norm"}, \
	{"output", "lm_head"}, \
	{"blk.{L}.attn_norm", "model.layers.{L}.input_layernorm"}, \
	{"blk.{L}.attn_q", "model.layers.{L}.self_attn.q_proj"}, \
	{"blk.{L}.attn_k", "model.layers.{L}.self_attn.k_proj"}, \
	{"blk.{L}.attn_v", "model.layers.{L}.self_attn.v_proj"}, \
	{"blk.{L}.attn_output", "model.layers.{L}.self_attn.o_proj"}, \
	{"blk.{L}.attn_q_norm", "model.layers.{L}.self_attn.q_norm"}, \
	{"blk.{L}.attn_k_norm", "model.layers.{L}.self_attn.k_norm"}, \
	{"blk.{L}.ffn_gate", "model.layers.{L}.mlp.gate_proj"}, \
	{"blk.{L}.ffn_up", "model.layers.{L}.mlp.up_proj"}, \
	{"blk.{L}.ffn_down", "model.layers.{L}.mlp.down_proj"}, \
	{"blk.{L}.ffn_gate_inp", "model.layers.{L}.mlp.gate"}, \
	{"blk.{L}.ffn_gate_exps", "model.layers.{L}.mlp.switch_mlp.gate_proj"}, \
	{"blk.{L}.ffn_up_exps", "model.layers.{L}.mlp.switch_mlp.up_proj"}, \
	{"blk.{L}.ffn_down_exps", "model.layers.{L}.mlp.switch_mlp.down_proj"}, \
	{"blk.{L}.ffn_experts", "model.layers.{L}.mlp.experts"}, \
	{"blk.{L}.ffn_gate_shexp", "model.layers.{L}.mlp.shared_expert.gate_proj"}, \
	{"blk.{L}.ffn_up_shexp", "model.layers.{L}.mlp.shared_expert.up_proj"}, \
	{"blk.{L}.ffn_down_shexp", "model.layers.{L}.mlp.shared_expert.down_proj"}, \
	{"blk.{L}.ffn_gate_inp_shexp", "model.layers.{L}.mlp.shared_expert_gate"},

const sg_name_pair sg_names_default[] = {
	{"blk.{L}.ffn_norm", "model.layers.{L}.post_attention_layernorm"},
	COMMON_NAMES{0, 0},
};

/* Gemma's sandwich norms: four per layer, named differently from Llama's two. */
const sg_name_pair sg_names_gemma[] = {
	{"blk.{L}.post_attention_norm", "model.layers.{L}.post_attention_layernorm"},
	{"blk.{L}.ffn_norm", "model.layers.{L}.pre_feedforward_layernorm"},
	{"blk.{L}.post_ffw_norm", "model.layers.{L}.post_feedforward_layernorm"},
	COMMON_NAMES{0, 0},
};

/* Matches `name` against pattern (one optional {L} matching a decimal); on success writes the
 * layer digits into num and returns the length of name consumed. */
static size_t match(const char *pat, const char *name, char *num, size_t numcap)
{
	const char *l = strstr(pat, "{L}");
	num[0] = 0;
	if (!l) {
		size_t n = strlen(pat);
		return strncmp(pat, name, n) ? 0 : n;
	}
	size_t pre = (size_t)(l - pat);
	if (strncmp(pat, name, pre)) return 0;
	size_t d = 0;
	while (name[pre + d] >= '0' && name[pre + d] <= '9' && d + 1 < numcap) num[d] = name[pre + d], d++;
	if (!d) return 0;
	num[d] = 0;
	const char *post = l + 3;
	size_t pn = strlen(post);
	if (strncmp(post, name + pre + d, pn)) return 0;
	return pre + d + pn;
}

static int translate(const sg_name_pair *map, int to_hf, const char *name, char *buf, size_t cap)
{
	for (const sg_name_pair *p = map; p && p->gguf; p++) {
		const char *from = to_hf ? p->gguf : p->hf, *to = to_hf ? p->hf : p->gguf;
		char num[24];
		size_t used = match(from, name, num, sizeof(num));
		/* the stem must end the name or be followed by a suffix such as ".weight" */
		if (!used || (name[used] && name[used] != '.')) continue;
		const char *l = strstr(to, "{L}");
		int n = l ? snprintf(buf, cap, "%.*s%s%s%s", (int)(l - to), to, num, l + 3, name + used)
			  : snprintf(buf, cap, "%s%s", to, name + used);
		if (n < 0 || (size_t)n >= cap) return 0;
		return 1;
	}
	return 0;
}

int sg_names_gguf_to_hf(const sg_name_pair *map, const char *name, char *buf, size_t cap)
{
	return translate(map, 1, name, buf, cap);
}

int sg_names_hf_to_gguf(const sg_name_pair *map, const char *name, char *buf, size_t cap)
{
	return translate(map, 0, name, buf, cap);
}

const sg_tensor *sg_weights_lookup(const sg_weights *w, const sg_name_pair *map, const char *gguf_name)
{
	const sg_tensor *t = sg_weights_find(w, gguf_name);
	if (t || w->format != SG_WEIGHTS_SAFETENSORS) return t;
	char hf[1024], alt[1100];
	if (!sg_names_gguf_to_hf(map ? map : sg_names_default, gguf_name, hf, sizeof(hf))) return NULL;
	if ((t = sg_weights_find(w, hf))) return t;
	/* multimodal checkpoints nest the text model; a base model saved alone (Gemma3TextModel,
	 * Qwen3Model: sentence-transformers' embedders) has no "model." before its names */
	if (!strncmp(hf, "model.", 6)) {
		snprintf(alt, sizeof(alt), "model.language_model.%s", hf + 6);
		if ((t = sg_weights_find(w, alt))) return t;
		if ((t = sg_weights_find(w, hf + 6))) return t;
	}
	snprintf(alt, sizeof(alt), "language_model.%s", hf);
	return sg_weights_find(w, alt);
}

/* ---- binder ---- */

char *sg_tensor_type_str(const sg_tensor *t, char *buf, size_t cap)
{
	if (t->type == SG_TYPE_MLX_AFFINE)
		snprintf(buf, cap, "MLX_AFFINE u%d g%d (%s)", t->mlx.bits, t->mlx.group,
			 t->mlx.sb_type == SG_TYPE_BF16 ? "bf16" : "f16");
	else snprintf(buf, cap, "%s", sg_type_name(t->type));
	return buf;
}

static int want_ok(int want, sg_type t)
{
	switch (want) {
	case SG_WANT_ANY: return 1;
	case SG_WANT_FLOAT: return t == SG_TYPE_F32 || t == SG_TYPE_F16 || t == SG_TYPE_BF16;
	case SG_WANT_MATMUL: return sg_type_is_float_or_quant(t) && t != SG_TYPE_F64;
	default: return (int)t == want;
	}
}

static const char *want_name(int want)
{
	switch (want) {
	case SG_WANT_ANY: return "any type";
	case SG_WANT_FLOAT: return "F32/F16/BF16";
	case SG_WANT_MATMUL: return "float or quantized";
	default: return sg_type_name(want);
	}
}

static void subst_layer(const char *pat, int layer, char *buf, size_t cap)
{
	const char *l = strstr(pat, "{L}");
	if (l && layer >= 0) snprintf(buf, cap, "%.*s%d%s", (int)(l - pat), pat, layer, l + 3);
	else snprintf(buf, cap, "%s", pat);
}

sg_status sg_weights_bind(const sg_weights *w, const sg_name_pair *map, const sg_bind *specs, int n, int layer)
{
	for (int i = 0; i < n; i++) {
		const sg_bind *b = &specs[i];
		char name[512];
		subst_layer(b->name, layer, name, sizeof(name));
		const sg_tensor *t = sg_weights_lookup(w, map, name);
		if (b->out) *b->out = t;
		if (!t) {
			if (b->optional) continue;
			return sg_error(SG_ERR_NOT_FOUND, "%s: missing", name);
		}
		int ok = want_ok(b->want, t->type);
		if (b->n_dims) {
			ok = ok && t->n_dims == b->n_dims;
			for (int d = 0; ok && d < b->n_dims; d++) ok = b->ne[d] < 0 || b->ne[d] == t->ne[d];
		}
		if (!ok) {
			char es[128] = "", fs[128], ft[64];
			int k = 0;
			if (b->n_dims) {
				k += snprintf(es + k, sizeof(es) - (size_t)k, " [");
				for (int d = 0; d < b->n_dims && k < (int)sizeof(es); d++) {
					if (b->ne[d] < 0) k += snprintf(es + k, sizeof(es) - (size_t)k, "%s*", d ? ", " : "");
					else k += snprintf(es + k, sizeof(es) - (size_t)k, "%s%lld", d ? ", " : "", (long long)b->ne[d]);
				}
				if (k < (int)sizeof(es)) snprintf(es + k, sizeof(es) - (size_t)k, "]");
			}
			return sg_error(SG_ERR_FORMAT, "%s: expected %s%s, found %s %s", name, want_name(b->want), es,
					sg_tensor_type_str(t, ft, sizeof(ft)), sg_tensor_shape_str(t, fs, sizeof(fs)));
		}
	}
	return SG_OK;
}
