/* Unit tests of src/hub: cache locations from the environment, repo id parsing and the checks
 * that keep names inside the cache, GGUF quant picking, the symlink layout, cache lookups. */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/flags.h"
#include "hub/cache.h"
#include "hub/fs.h"
#include "hub/http.h"
#include "hub/repo.h"
#include "hub/resolve.h"
#include "saragossa.h"

/* ---- cache locations ---- */

static void clear_env(void)
{
	const char *vars[] = {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "SARAGOSSA_CACHE_DIR"};
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) unsetenv(vars[i]);
	sg_flags_reload();
}

Test(hub, cache_dir_prefers_hf_hub_cache_then_hf_home_then_home)
{
	char buf[SG_HUB_PATH_MAX];
	clear_env();
	setenv("HOME", "/home/u", 1);
	cr_assert_eq(sg_hub_cache_dir(buf, sizeof(buf)), SG_OK);
	cr_assert_str_eq(buf, "/home/u/.cache/huggingface/hub");
	setenv("XDG_CACHE_HOME", "/xdg", 1);
	cr_assert_eq(sg_hub_cache_dir(buf, sizeof(buf)), SG_OK);
	cr_assert_str_eq(buf, "/xdg/huggingface/hub");
	setenv("HF_HOME", "/hfhome", 1);
	cr_assert_eq(sg_hub_cache_dir(buf, sizeof(buf)), SG_OK);
	cr_assert_str_eq(buf, "/hfhome/hub");
	setenv("HF_HUB_CACHE", "/hubcache", 1);
	cr_assert_eq(sg_hub_cache_dir(buf, sizeof(buf)), SG_OK);
	cr_assert_str_eq(buf, "/hubcache");
}

Test(hub, cache_dir_without_home_is_a_clear_error)
{
	char buf[SG_HUB_PATH_MAX];
	clear_env();
	unsetenv("HOME");
	cr_assert_eq(sg_hub_cache_dir(buf, sizeof(buf)), SG_ERR_NOT_FOUND);
	cr_assert(strstr(sg_last_error(), "HF_HUB_CACHE"));
}

Test(hub, models_dir_follows_saragossa_cache_dir)
{
	char buf[SG_HUB_PATH_MAX];
	clear_env();
	setenv("HOME", "/home/u", 1);
	cr_assert_eq(sg_hub_models_dir(buf, sizeof(buf)), SG_OK);
	cr_assert_str_eq(buf, "/home/u/.cache/saragossa/models");
	setenv("SARAGOSSA_CACHE_DIR", "/sg", 1);
	sg_flags_reload();
	cr_assert_eq(sg_hub_models_dir(buf, sizeof(buf)), SG_OK);
	cr_assert_str_eq(buf, "/sg/models");
}

Test(hub, repo_dir_is_models_org_name)
{
	sg_hub_ref r;
	char buf[SG_HUB_PATH_MAX];
	cr_assert_eq(sg_hub_parse_ref("Qwen/Qwen3-0.6B", &r), SG_OK);
	cr_assert_eq(sg_hub_repo_dir("/c", &r, buf, sizeof(buf)), SG_OK);
	cr_assert_str_eq(buf, "/c/models--Qwen--Qwen3-0.6B");
}

/* ---- repo ids ---- */

Test(hub, parses_plain_revision_file_and_quant_forms)
{
	sg_hub_ref r;
	cr_assert_eq(sg_hub_parse_ref("google/gemma-3-270m", &r), SG_OK);
	cr_assert_str_eq(r.org, "google");
	cr_assert_str_eq(r.name, "gemma-3-270m");
	cr_assert_str_eq(r.repo, "google/gemma-3-270m");
	cr_assert_str_eq(r.revision, "main");
	cr_assert_eq(r.has_revision, 0);
	cr_assert_str_eq(r.file, "");

	cr_assert_eq(sg_hub_parse_ref("org/name@v1.0", &r), SG_OK);
	cr_assert_str_eq(r.revision, "v1.0");
	cr_assert_eq(r.has_revision, 1);

	cr_assert_eq(sg_hub_parse_ref("org/name:model-Q4_K_M.gguf", &r), SG_OK);
	cr_assert_str_eq(r.file, "model-Q4_K_M.gguf");
	cr_assert_str_eq(r.quant, "");

	cr_assert_eq(sg_hub_parse_ref("org/name@refs/pr/1:sub/m.gguf", &r), SG_OK);
	cr_assert_str_eq(r.revision, "refs/pr/1");
	cr_assert_str_eq(r.file, "sub/m.gguf");

	cr_assert_eq(sg_hub_parse_ref("org/name:q8_0", &r), SG_OK);
	cr_assert_str_eq(r.quant, "Q8_0");
	cr_assert_str_eq(r.file, "");
}

Test(hub, rejects_invalid_repo_ids_with_a_reason)
{
	static const struct {
		const char *id, *why;
	} bad[] = {
		{"../x", "'.'"},
		{"a/b/c", "exactly one '/'"},
		{"noslash", "org/name"},
		{"org/", "empty"},
		{"/name", "empty"},
		{"org/..", "'.'"},
		{"org/a..b", "'..'"},
		{"org/na--me", "'--'"},
		{"org/na me", "' '"},
		{"org/x@../y", "invalid revision"},
		{"org/x@a//b", "invalid revision"},
		{"org/x:../../y.gguf", "unsafe file name"},
		{"org/x:/etc/passwd", "absolute"},
		{"org/x:", "nothing after ':'"},
		{"org/x:Q4 K", "quantization"},
		{"", "empty"},
	};
	sg_hub_ref r;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_assert_neq(sg_hub_parse_ref(bad[i].id, &r), SG_OK, "accepted '%s'", bad[i].id);
		cr_assert(strstr(sg_last_error(), bad[i].why), "'%s': %s", bad[i].id, sg_last_error());
	}
	char longname[300];
	memset(longname, 'a', sizeof(longname));
	memcpy(longname, "org/", 4);
	longname[sizeof(longname) - 1] = 0;
	cr_assert_neq(sg_hub_parse_ref(longname, &r), SG_OK);
	cr_assert(strstr(sg_last_error(), "longer than 96"));
}

Test(hub, looks_like_repo_only_for_org_slash_name)
{
	cr_assert(sg_hub_looks_like_repo("org/name"));
	cr_assert(sg_hub_looks_like_repo("org/name:file.gguf"));
	cr_assert(!sg_hub_looks_like_repo("./org/name"));
	cr_assert(!sg_hub_looks_like_repo("/abs/path"));
	cr_assert(!sg_hub_looks_like_repo("~/x/y"));
	cr_assert(!sg_hub_looks_like_repo("gemma-3-270m-q4_k_m.gguf"));
	cr_assert(!sg_hub_looks_like_repo("name:sub/x.gguf"));
}

Test(hub, filename_checks_keep_paths_inside_the_cache)
{
	cr_assert_eq(sg_hub_check_filename("config.json"), SG_OK);
	cr_assert_eq(sg_hub_check_filename("Q4_K_M/model-00001-of-00002.gguf"), SG_OK);
	const char *bad[] = {"", "../x", "a/../../x", "/etc/passwd", "a//b", "a/./b", "a/", "a\\b", "a\nb", "..", "."};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_neq(sg_hub_check_filename(bad[i]), SG_OK, "accepted '%s'", bad[i]);
}

Test(hub, etags_are_normalized_and_checked)
{
	char e[160] = "W/\"abc123\"";
	sg_hub_normalize_etag(e);
	cr_assert_str_eq(e, "abc123");
	strcpy(e, "\"deadbeef\"");
	sg_hub_normalize_etag(e);
	cr_assert_str_eq(e, "deadbeef");
	cr_assert_eq(sg_hub_check_etag("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"), SG_OK);
	cr_assert_neq(sg_hub_check_etag("../../x"), SG_OK);
	cr_assert_neq(sg_hub_check_etag("a/b"), SG_OK);
	cr_assert_neq(sg_hub_check_etag(".."), SG_OK);
	cr_assert_neq(sg_hub_check_etag(""), SG_OK);
	cr_assert(sg_hub_is_sha256("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"));
	cr_assert(!sg_hub_is_sha256("0123456789abcdef0123456789abcdef01234567"));
	cr_assert(sg_hub_is_commit("0123456789abcdef0123456789abcdef01234567"));
	cr_assert(!sg_hub_is_commit("0123456789ABCDEF0123456789abcdef01234567"));
}

/* ---- GGUF names ---- */

Test(hub, quant_is_read_from_gguf_file_names)
{
	char q[32];
	cr_assert_str_eq(sg_hub_quant_from_name("tiny-Q4_K_M.gguf", q, sizeof(q)), "Q4_K_M");
	cr_assert_str_eq(sg_hub_quant_from_name("gemma-3-270m-q4_k_m.gguf", q, sizeof(q)), "Q4_K_M");
	cr_assert_str_eq(sg_hub_quant_from_name("Qwen3-0.6B-BF16.gguf", q, sizeof(q)), "BF16");
	cr_assert_str_eq(sg_hub_quant_from_name("model.Q8_0.gguf", q, sizeof(q)), "Q8_0");
	cr_assert_str_eq(sg_hub_quant_from_name("x-IQ4_XS.gguf", q, sizeof(q)), "IQ4_XS");
	cr_assert_str_eq(sg_hub_quant_from_name("Q5_K_M/x-00001-of-00002.gguf", q, sizeof(q)), "Q5_K_M");
	cr_assert_null(sg_hub_quant_from_name("model.gguf", q, sizeof(q)));
	cr_assert_null(sg_hub_quant_from_name("xQ4_0y.gguf", q, sizeof(q)));
}

Test(hub, default_gguf_prefers_q4_k_m_then_q8_0_and_skips_projectors)
{
	const char *a[] = {"README.md", "m-F16.gguf", "m-Q8_0.gguf", "mmproj-m-Q4_K_M.gguf", "m-Q4_K_M.gguf"};
	cr_assert_eq(sg_hub_pick_gguf(a, 5, NULL), 4);
	const char *b[] = {"m-F16.gguf", "m-Q8_0.gguf", "m-Q2_K.gguf"};
	cr_assert_eq(sg_hub_pick_gguf(b, 3, NULL), 1);
	const char *c[] = {"config.json", "weird.gguf"};
	cr_assert_eq(sg_hub_pick_gguf(c, 2, NULL), 1);
	cr_assert_eq(sg_hub_pick_gguf(a, 5, "q8_0"), 2);
	cr_assert_eq(sg_hub_pick_gguf(a, 5, "Q6_K"), -1);
	const char *d[] = {"mmproj-F16.gguf"};
	cr_assert_eq(sg_hub_pick_gguf(d, 1, NULL), -1);
}

Test(hub, needed_files_are_config_tokenizer_and_safetensors)
{
	const char *yes[] = {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
			     "special_tokens_map.json", "chat_template.jinja", "tokenizer.model", "model.safetensors",
			     "model-00001-of-00002.safetensors", "model.safetensors.index.json", "weights.npz"};
	const char *no[] = {"README.md", "pytorch_model.bin", "onnx/model.onnx", "original/params.json",
			    "flax_model.msgpack", ".gitattributes", "model-Q4_K_M.gguf", "other.npz"};
	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) cr_assert(sg_hub_file_needed(yes[i]), "%s", yes[i]);
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) cr_assert(!sg_hub_file_needed(no[i]), "%s", no[i]);
}

/* ---- layout ---- */

Test(hub, pointer_target_climbs_one_level_per_folder)
{
	char t[256];
	cr_assert_eq(sg_hub_pointer_target("config.json", "abc", t, sizeof(t)), SG_OK);
	cr_assert_str_eq(t, "../../blobs/abc");
	cr_assert_eq(sg_hub_pointer_target("a/b/m.gguf", "abc", t, sizeof(t)), SG_OK);
	cr_assert_str_eq(t, "../../../../blobs/abc");
	char small[8];
	cr_assert_eq(sg_hub_pointer_target("config.json", "abc", small, sizeof(small)), SG_ERR_RANGE);
}

static void write_file(const char *path, const char *text)
{
	cr_assert_eq(sg_hub_mkdirs_parent(path), SG_OK);
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
}

static void make_tmp(char *dir, size_t n)
{
	snprintf(dir, n, "/tmp/sg_hub_test_XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
}

/* Builds models--org--m/{blobs,snapshots/<commit>,refs/main} by hand, as huggingface_hub would. */
static void add_file(const char *repo, const char *commit, const char *file, const char *etag, const char *text)
{
	char blob[SG_HUB_PATH_MAX], link[SG_HUB_PATH_MAX], target[256];
	snprintf(blob, sizeof(blob), "%s/blobs/%s", repo, etag);
	write_file(blob, text);
	snprintf(link, sizeof(link), "%s/snapshots/%s/%s", repo, commit, file);
	cr_assert_eq(sg_hub_pointer_target(file, etag, target, sizeof(target)), SG_OK);
	cr_assert_eq(sg_hub_mkdirs_parent(link), SG_OK);
	cr_assert_eq(sg_hub_symlink(target, link), SG_OK);
}

#define COMMIT "0123456789abcdef0123456789abcdef01234567"

Test(hub, symlinks_resolve_to_their_blobs_and_find_cached_uses_refs)
{
	char tmp[64], repo[256], path[SG_HUB_PATH_MAX];
	make_tmp(tmp, sizeof(tmp));
	snprintf(repo, sizeof(repo), "%s/models--org--m", tmp);
	add_file(repo, COMMIT, "config.json", "e1", "{}");
	add_file(repo, COMMIT, "sub/dir/x.gguf", "e2", "GGUF");
	snprintf(path, sizeof(path), "%s/snapshots/%s/sub/dir/x.gguf", repo, COMMIT);
	char target[256];
	ssize_t k = readlink(path, target, sizeof(target) - 1);
	cr_assert_gt(k, 0);
	target[k] = 0;
	cr_assert_str_eq(target, "../../../../blobs/e2");
	cr_assert(sg_hub_is_file(path));

	sg_hub_ref r;
	sg_hub_model m;
	cr_assert_eq(sg_hub_parse_ref("org/m", &r), SG_OK);
	cr_assert_eq(sg_hub_find_cached(&r, tmp, &m), SG_ERR_NOT_FOUND); /* no refs/main yet */
	snprintf(path, sizeof(path), "%s/refs/main", repo);
	write_file(path, COMMIT);
	/* config.json without weights is not a complete folder: the GGUF is what is there */
	cr_assert_eq(sg_hub_find_cached(&r, tmp, &m), SG_OK);
	cr_assert_eq(m.kind, SG_HUB_KIND_GGUF);
	cr_assert(strstr(m.path, "/sub/dir/x.gguf"));
	cr_assert_str_eq(m.commit, COMMIT);

	add_file(repo, COMMIT, "model.safetensors.index.json", "e3",
		 "{\"weight_map\": {\"a\": \"model-1.safetensors\", \"b\": \"model-2.safetensors\"}}");
	add_file(repo, COMMIT, "model-1.safetensors", "e4", "x");
	cr_assert_eq(sg_hub_find_cached(&r, tmp, &m), SG_OK);
	cr_assert_eq(m.kind, SG_HUB_KIND_GGUF, "a shard is missing, so the folder is incomplete");
	add_file(repo, COMMIT, "model-2.safetensors", "e5", "y");
	cr_assert_eq(sg_hub_find_cached(&r, tmp, &m), SG_OK);
	cr_assert_eq(m.kind, SG_HUB_KIND_FOLDER);
	snprintf(path, sizeof(path), "%s/snapshots/%s", repo, COMMIT);
	cr_assert_str_eq(m.path, path);

	cr_assert_eq(sg_hub_parse_ref("org/m@" COMMIT ":sub/dir/x.gguf", &r), SG_OK);
	cr_assert_eq(sg_hub_find_cached(&r, tmp, &m), SG_OK);
	cr_assert_eq(m.kind, SG_HUB_KIND_GGUF);
	cr_assert_eq(sg_hub_rm_tree(tmp), SG_OK);
}

Test(hub, rm_tree_removes_links_not_what_they_point_to)
{
	char tmp[64], outside[64], path[SG_HUB_PATH_MAX], victim[SG_HUB_PATH_MAX];
	make_tmp(tmp, sizeof(tmp));
	make_tmp(outside, sizeof(outside));
	snprintf(victim, sizeof(victim), "%s/keep.txt", outside);
	write_file(victim, "keep");
	snprintf(path, sizeof(path), "%s/a/b/link", tmp);
	cr_assert_eq(sg_hub_mkdirs_parent(path), SG_OK);
	cr_assert_eq(symlink(victim, path), 0);
	snprintf(path, sizeof(path), "%s/a/dirlink", tmp);
	cr_assert_eq(symlink(outside, path), 0);
	cr_assert_eq(sg_hub_rm_tree(tmp), SG_OK);
	struct stat sb;
	cr_assert_neq(lstat(tmp, &sb), 0);
	cr_assert(sg_hub_is_file(victim));
	cr_assert_eq(sg_hub_rm_tree(outside), SG_OK);
	cr_assert_eq(sg_hub_rm_tree(outside), SG_OK, "missing is not an error");
}

Test(hub, describe_folder_reads_mlx_quantization_and_dtype)
{
	char tmp[64], path[SG_HUB_PATH_MAX], format[16], quant[48];
	make_tmp(tmp, sizeof(tmp));
	snprintf(path, sizeof(path), "%s/model.safetensors", tmp);
	write_file(path, "x");
	snprintf(path, sizeof(path), "%s/config.json", tmp);
	write_file(path, "{\"quantization\": {\"group_size\": 64, \"bits\": 4}, \"torch_dtype\": \"bfloat16\"}");
	sg_hub_describe_folder(tmp, format, sizeof(format), quant, sizeof(quant));
	cr_assert_str_eq(format, "mlx");
	cr_assert_str_eq(quant, "4-bit g64");
	write_file(path, "{\"torch_dtype\": \"bfloat16\"}");
	sg_hub_describe_folder(tmp, format, sizeof(format), quant, sizeof(quant));
	cr_assert_str_eq(format, "safetensors");
	cr_assert_str_eq(quant, "bf16");
	write_file(path, "{\"quantization_config\": {\"quant_method\": \"awq\", \"bits\": 4}}");
	sg_hub_describe_folder(tmp, format, sizeof(format), quant, sizeof(quant));
	cr_assert_str_eq(quant, "awq 4-bit");
	cr_assert_eq(sg_hub_rm_tree(tmp), SG_OK);
}

/* ---- resolution without the network ---- */

Test(hub, resolve_local_paths_and_unknown_names)
{
	char tmp[64], path[SG_HUB_PATH_MAX];
	make_tmp(tmp, sizeof(tmp));
	clear_env();
	setenv("SARAGOSSA_CACHE_DIR", tmp, 1);
	setenv("HF_HUB_CACHE", tmp, 1);
	sg_flags_reload();
	snprintf(path, sizeof(path), "%s/models/own-Q8_0.gguf", tmp);
	write_file(path, "GGUF....");
	sg_hub_model m;
	cr_assert_eq(sg_hub_resolve("own-Q8_0.gguf", NULL, &m), SG_OK);
	cr_assert_eq(m.kind, SG_HUB_KIND_GGUF);
	cr_assert_eq(m.source, SG_HUB_SRC_MODELS_DIR);
	cr_assert_eq(sg_hub_resolve(path, NULL, &m), SG_OK);
	cr_assert_eq(m.source, SG_HUB_SRC_PATH);
	snprintf(path, sizeof(path), "%s/models", tmp);
	cr_assert_eq(sg_hub_resolve(path, NULL, &m), SG_OK);
	cr_assert_eq(m.kind, SG_HUB_KIND_FOLDER);
	cr_assert_eq(sg_hub_resolve("nothing-here", NULL, &m), SG_ERR_NOT_FOUND);
	cr_assert(strstr(sg_last_error(), "saragossa list"));
	cr_assert_eq(sg_hub_resolve("./missing", NULL, &m), SG_ERR_NOT_FOUND);
	cr_assert(strstr(sg_last_error(), "no such file or folder"));
	sg_hub_opts off = {.offline = 1};
	cr_assert_eq(sg_hub_resolve("org/absent", &off, &m), SG_ERR_NOT_FOUND);
	cr_assert(strstr(sg_last_error(), "not in the local cache"));
	cr_assert_eq(sg_hub_rm_tree(tmp), SG_OK);
}

Test(hub, url_escaping_and_origins)
{
	char buf[128] = "x/";
	cr_assert_eq(sg_http_escape(buf, sizeof(buf), "a b/c?.gguf", 1), 0);
	cr_assert_str_eq(buf, "x/a%20b/c%3F.gguf");
	buf[0] = 0;
	cr_assert_eq(sg_http_escape(buf, sizeof(buf), "refs/pr/1", 0), 0);
	cr_assert_str_eq(buf, "refs%2Fpr%2F1");
	char small[4] = "";
	cr_assert_eq(sg_http_escape(small, sizeof(small), "abcdef", 0), -1);
	sg_http_origin("https://huggingface.co/api/models/x", buf, sizeof(buf));
	cr_assert_str_eq(buf, "https://huggingface.co");
	sg_http_origin("http://127.0.0.1:8080", buf, sizeof(buf));
	cr_assert_str_eq(buf, "http://127.0.0.1:8080");
}

Test(hub, random_ids_never_yield_a_name_that_leaves_the_cache)
{
	static const char alphabet[] = "ab./-_:@\\~%Q4";
	unsigned seed = 12345;
	int accepted = 0;
	for (int i = 0; i < 50000; i++) {
		char id[24];
		int n = 1 + (int)(rand_r(&seed) % (sizeof(id) - 1));
		for (int k = 0; k < n; k++) id[k] = alphabet[rand_r(&seed) % (sizeof(alphabet) - 1)];
		id[n] = 0;
		sg_hub_ref r;
		if (sg_hub_parse_ref(id, &r)) continue;
		accepted++;
		cr_assert(!strstr(r.org, "..") && !strstr(r.name, "..") && !strchr(r.org, '/') && !strchr(r.name, '/'),
			  "'%s'", id);
		cr_assert(!strstr(r.org, "--") && !strstr(r.name, "--") && r.org[0] != '.' && r.name[0] != '.', "'%s'", id);
		cr_assert(!strstr(r.revision, ".."), "'%s'", id);
		cr_assert(!r.file[0] || (sg_hub_check_filename(r.file) == SG_OK && r.file[0] != '/'), "'%s'", id);
	}
	cr_assert_gt(accepted, 100, "the generator should produce some valid ids");
}
