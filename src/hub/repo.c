#include "hub/repo.h"
#include "base/error.h"
#include "base/flags.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int name_char(int c) { return isalnum(c) || c == '-' || c == '_' || c == '.'; }

/* One of org or name. The cache folder is models--org--name, so "--" inside a part would make
 * two ids share a folder; ".." could walk out of it. */
static sg_status check_part(const char *whole, const char *part, size_t len, const char *what)
{
	if (len == 0) return sg_error(SG_ERR_INVALID_ARG, "invalid model name '%s': the %s is empty", whole, what);
	if (len > SG_HUB_NAME_MAX)
		return sg_error(SG_ERR_INVALID_ARG, "invalid model name '%s': the %s is longer than %d characters",
				whole, what, SG_HUB_NAME_MAX);
	for (size_t i = 0; i < len; i++)
		if (!name_char((unsigned char)part[i]))
			return sg_error(SG_ERR_INVALID_ARG,
					"invalid model name '%s': '%c' in the %s (a Hugging Face repo id is org/name "
					"made of letters, digits, '-', '_' and '.')",
					whole, isprint((unsigned char)part[i]) ? part[i] : '?', what);
	if (memmem(part, len, "..", 2) || memmem(part, len, "--", 2) || part[0] == '.' || part[0] == '-' ||
	    part[len - 1] == '.' || part[len - 1] == '-')
		return sg_error(SG_ERR_INVALID_ARG,
				"invalid model name '%s': the %s may not start or end with '.' or '-', nor contain '..' "
				"or '--'", whole, what);
	return SG_OK;
}

sg_status sg_hub_check_filename(const char *name)
{
	size_t len = strlen(name);
	if (len == 0) return sg_error(SG_ERR_INVALID_ARG, "empty file name");
	if (len > SG_HUB_FILE_MAX) return sg_error(SG_ERR_INVALID_ARG, "file name longer than %d bytes", SG_HUB_FILE_MAX);
	if (name[0] == '/') return sg_error(SG_ERR_INVALID_ARG, "unsafe file name '%s': absolute path", name);
	for (const char *p = name; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f || *p == '\\')
			return sg_error(SG_ERR_INVALID_ARG, "unsafe file name '%s': control character or backslash", name);
	const char *c = name;
	for (;;) {
		const char *e = strchr(c, '/');
		size_t n = e ? (size_t)(e - c) : strlen(c);
		if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return sg_error(SG_ERR_INVALID_ARG,
					"unsafe file name '%s': empty, '.' or '..' path component", name);
		if (n > 255) return sg_error(SG_ERR_INVALID_ARG, "file name '%s': a component exceeds 255 bytes", name);
		if (!e) break;
		c = e + 1;
	}
	return SG_OK;
}

sg_status sg_hub_check_revision(const char *rev)
{
	size_t len = strlen(rev);
	if (len == 0 || len >= 256) return sg_error(SG_ERR_INVALID_ARG, "invalid revision '%s': length must be 1..255", rev);
	for (const char *p = rev; *p; p++)
		if (!name_char((unsigned char)*p) && *p != '/')
			return sg_error(SG_ERR_INVALID_ARG,
					"invalid revision '%s': only letters, digits, '-', '_', '.' and '/' are allowed", rev);
	if (strstr(rev, "..") || strstr(rev, "//") || rev[0] == '/' || rev[len - 1] == '/' || rev[0] == '.')
		return sg_error(SG_ERR_INVALID_ARG, "invalid revision '%s': '..', '//', or a leading '/' or '.'", rev);
	return SG_OK;
}

sg_status sg_hub_check_etag(const char *etag)
{
	size_t len = strlen(etag);
	if (len == 0 || len > 128) return sg_error(SG_ERR_FORMAT, "the hub sent an ETag of %zu bytes", len);
	for (const char *p = etag; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.')
			return sg_error(SG_ERR_FORMAT, "the hub sent an ETag with unsafe characters: '%.128s'", etag);
	if (!strcmp(etag, ".") || !strcmp(etag, "..") || strstr(etag, ".."))
		return sg_error(SG_ERR_FORMAT, "the hub sent an unsafe ETag '%s'", etag);
	return SG_OK;
}

static int lower_hex(const char *s, size_t n)
{
	if (strlen(s) != n) return 0;
	for (size_t i = 0; i < n; i++)
		if (!isdigit((unsigned char)s[i]) && !(s[i] >= 'a' && s[i] <= 'f')) return 0;
	return 1;
}

int sg_hub_is_commit(const char *s) { return lower_hex(s, 40); }
int sg_hub_is_sha256(const char *s) { return lower_hex(s, 64); }

void sg_hub_normalize_etag(char *etag)
{
	char *s = etag;
	if (s[0] == 'W' && s[1] == '/') s += 2;
	size_t n = strlen(s);
	if (n >= 2 && s[0] == '"' && s[n - 1] == '"') s++, n -= 2;
	memmove(etag, s, n);
	etag[n] = 0;
}

int sg_hub_looks_like_repo(const char *s)
{
	if (!s[0] || s[0] == '/' || s[0] == '.' || s[0] == '~') return 0;
	size_t end = strcspn(s, ":@");
	return memchr(s, '/', end) != NULL;
}

sg_status sg_hub_parse_ref(const char *s, sg_hub_ref *out)
{
	memset(out, 0, sizeof(*out));
	strcpy(out->revision, "main");
	size_t len = strlen(s);
	if (len == 0) return sg_error(SG_ERR_INVALID_ARG, "empty model name");
	if (len > 2048) return sg_error(SG_ERR_INVALID_ARG, "model name longer than 2048 bytes");
	size_t id_end = strcspn(s, ":@");
	const char *slash = memchr(s, '/', id_end);
	if (!slash)
		return sg_error(SG_ERR_INVALID_ARG, "invalid model name '%s': a Hugging Face repo id is org/name", s);
	if (memchr(slash + 1, '/', id_end - (size_t)(slash + 1 - s)))
		return sg_error(SG_ERR_INVALID_ARG,
				"invalid model name '%s': a Hugging Face repo id has exactly one '/' (org/name)", s);
	sg_status st = check_part(s, s, (size_t)(slash - s), "organisation");
	if (!st) st = check_part(s, slash + 1, id_end - (size_t)(slash + 1 - s), "repository name");
	if (st) return st;
	memcpy(out->org, s, (size_t)(slash - s));
	memcpy(out->name, slash + 1, id_end - (size_t)(slash + 1 - s));
	snprintf(out->repo, sizeof(out->repo), "%s/%s", out->org, out->name);

	const char *p = s + id_end;
	if (*p == '@') {
		size_t n = strcspn(p + 1, ":");
		if (n >= sizeof(out->revision))
			return sg_error(SG_ERR_INVALID_ARG, "invalid model name '%s': revision too long", s);
		memcpy(out->revision, p + 1, n);
		out->revision[n] = 0;
		out->has_revision = 1;
		if ((st = sg_hub_check_revision(out->revision)))
			return sg_error_wrap(st, "invalid model name '%s'", s);
		p += 1 + n;
	}
	if (*p == ':') {
		const char *f = p + 1;
		if (!*f) return sg_error(SG_ERR_INVALID_ARG, "invalid model name '%s': nothing after ':'", s);
		if (sg_hub_is_gguf_name(f) || strchr(f, '/')) {
			if ((st = sg_hub_check_filename(f))) return sg_error_wrap(st, "invalid model name '%s'", s);
			snprintf(out->file, sizeof(out->file), "%s", f);
		} else {
			size_t n = strlen(f);
			if (n >= sizeof(out->quant))
				return sg_error(SG_ERR_INVALID_ARG, "invalid model name '%s': quantization tag too long", s);
			for (size_t i = 0; i < n; i++)
				if (!isalnum((unsigned char)f[i]) && f[i] != '_')
					return sg_error(SG_ERR_INVALID_ARG,
							"invalid model name '%s': after ':' comes a .gguf file name or a "
							"quantization such as Q4_K_M", s);
			for (size_t i = 0; i < n; i++) out->quant[i] = (char)toupper((unsigned char)f[i]);
		}
	} else if (*p) {
		return sg_error(SG_ERR_INVALID_ARG, "invalid model name '%s': unexpected '%c'", s, *p);
	}
	return SG_OK;
}

static sg_status home_based(char *buf, size_t n, const char *xdg_sub, const char *home_sub)
{
	const char *xdg = getenv("XDG_CACHE_HOME");
	int w;
	if (xdg && xdg[0] == '/') {
		w = snprintf(buf, n, "%s/%s", xdg, xdg_sub);
	} else {
		const char *home = getenv("HOME");
		if (!home || !home[0])
			return sg_error(SG_ERR_NOT_FOUND, "no cache directory: HOME is not set (set HF_HUB_CACHE)");
		w = snprintf(buf, n, "%s/%s", home, home_sub);
	}
	if (w < 0 || (size_t)w >= n) return sg_error(SG_ERR_RANGE, "cache directory path too long");
	return SG_OK;
}

static sg_status put(char *buf, size_t n, const char *a, const char *b)
{
	int w = snprintf(buf, n, "%s%s", a, b);
	if (w < 0 || (size_t)w >= n) return sg_error(SG_ERR_RANGE, "path too long: %s%s", a, b);
	return SG_OK;
}

sg_status sg_hub_cache_dir(char *buf, size_t n)
{
	const char *v = getenv("HF_HUB_CACHE");
	if (!v || !v[0]) v = getenv("HUGGINGFACE_HUB_CACHE");
	if (v && v[0]) return put(buf, n, v, "");
	v = getenv("HF_HOME");
	if (v && v[0]) return put(buf, n, v, "/hub");
	return home_based(buf, n, "huggingface/hub", ".cache/huggingface/hub");
}

sg_status sg_hub_models_dir(char *buf, size_t n)
{
	const char *v = sg_flag_str("SARAGOSSA_CACHE_DIR");
	if (v && v[0]) return put(buf, n, v, "/models");
	return home_based(buf, n, "saragossa/models", ".cache/saragossa/models");
}

sg_status sg_hub_repo_dir(const char *cache, const sg_hub_ref *r, char *buf, size_t n)
{
	int w = snprintf(buf, n, "%s/models--%s--%s", cache, r->org, r->name);
	if (w < 0 || (size_t)w >= n) return sg_error(SG_ERR_RANGE, "cache path too long for %s", r->repo);
	return SG_OK;
}

sg_status sg_hub_pointer_target(const char *file, const char *etag, char *buf, size_t n)
{
	size_t used = 0;
	buf[0] = 0;
	for (const char *p = file; *p; p++) {
		if (*p != '/') continue;
		if (used + 3 >= n) return sg_error(SG_ERR_RANGE, "link target too long for '%s'", file);
		memcpy(buf + used, "../", 4);
		used += 3;
	}
	int w = snprintf(buf + used, n - used, "../../blobs/%s", etag);
	if (w < 0 || (size_t)w >= n - used) return sg_error(SG_ERR_RANGE, "link target too long for '%s'", file);
	return SG_OK;
}

int sg_hub_is_gguf_name(const char *name)
{
	size_t n = strlen(name);
	return n > 5 && !strcasecmp(name + n - 5, ".gguf");
}

/* Longest first so that Q4_K_M wins over Q4_K and IQ4_XS over IQ4. */
static const char *const quant_names[] = {
	"IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_XS", "IQ3_S", "IQ3_M",
	"IQ4_XS", "IQ4_NL", "Q2_K_S", "Q2_K_L", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q3_K_XL", "Q4_K_S", "Q4_K_M",
	"Q4_K_L", "Q4_K_XL", "Q5_K_S", "Q5_K_M", "Q5_K_L", "Q6_K_L", "Q6_K_XL", "Q8_K_XL", "TQ1_0", "TQ2_0",
	"MXFP4", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "BF16",
	"F16", "F32",
};
#define N_QUANT ((int)(sizeof(quant_names) / sizeof(quant_names[0])))

static int boundary(char c) { return c == 0 || c == '-' || c == '.' || c == '_' || c == '/'; }

const char *sg_hub_quant_from_name(const char *name, char *buf, size_t n)
{
	size_t len = strlen(name);
	const char *best = NULL;
	size_t best_len = 0, best_pos = 0;
	/* The last match in the name wins ties of position; the longest name at a position wins. */
	for (int q = 0; q < N_QUANT; q++) {
		size_t ql = strlen(quant_names[q]);
		for (size_t i = 0; i + ql <= len; i++) {
			if (strncasecmp(name + i, quant_names[q], ql)) continue;
			if ((i > 0 && !boundary(name[i - 1])) || !boundary(name[i + ql])) continue;
			if (!best || i > best_pos || (i == best_pos && ql > best_len))
				best = quant_names[q], best_len = ql, best_pos = i;
		}
	}
	if (!best) return NULL;
	snprintf(buf, n, "%s", best);
	return buf;
}

int sg_hub_pick_gguf(const char *const *names, int n, const char *quant)
{
	static const char *const pref[] = {"Q4_K_M", "Q4_K_S", "Q5_K_M", "Q8_0", "Q6_K", "Q4_0", "Q5_K_S",
					   "Q4_K_L", "Q4_K_XL", "IQ4_XS", "Q3_K_M", "Q5_0", "Q4_1", "Q5_1",
					   "F16", "BF16", "F32"};
	int first = -1;
	int best = -1, best_rank = 1 << 30;
	for (int i = 0; i < n; i++) {
		if (!sg_hub_is_gguf_name(names[i]) || strcasestr(names[i], "mmproj")) continue;
		char q[32];
		const char *got = sg_hub_quant_from_name(names[i], q, sizeof(q));
		if (quant && quant[0]) {
			if (got && !strcasecmp(got, quant)) return i;
			continue;
		}
		if (first < 0) first = i;
		if (!got) continue;
		for (int r = 0; r < (int)(sizeof(pref) / sizeof(pref[0])); r++)
			if (!strcmp(got, pref[r]) && r < best_rank) best = i, best_rank = r;
	}
	if (quant && quant[0]) return -1;
	return best >= 0 ? best : first;
}

int sg_hub_file_needed(const char *name)
{
	static const char *const exact[] = {
		"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
		"special_tokens_map.json", "chat_template.jinja", "chat_template.json", "tokenizer.model",
		"vocab.json", "merges.txt", "vocab.txt", "added_tokens.json", "preprocessor_config.json",
		"model.safetensors.index.json",
		"weights.npz", /* MLX folders written by np.savez (mlx-community's Whisper ones) */
	};
	if (strchr(name, '/')) return 0; /* sub-folders hold other variants (onnx/, original/, ...) */
	for (size_t i = 0; i < sizeof(exact) / sizeof(exact[0]); i++)
		if (!strcmp(name, exact[i])) return 1;
	size_t n = strlen(name);
	if (n > 12 && !strcmp(name + n - 12, ".safetensors")) return 1;
	if (n > 23 && !strcmp(name + n - 23, ".safetensors.index.json")) return 1;
	return 0;
}
