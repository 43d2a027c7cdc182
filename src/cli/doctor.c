/* saragossa doctor: what this machine and build are, where models come from (the default model,
 * saragossa's models folder, the Hugging Face cache, whether the hub answers) and the value of
 * every runtime flag. */
#include "backend/backend.h"
#include "base/flags.h"
#include "base/progress.h"
#include "base/sysinfo.h"
#include "base/threadpool.h"
#include "cli/cli.h"
#include "cli/lm_cli.h"
#include "engine/draft.h"
#include "engine/expert_cache.h"
#include "engine/planner.h"
#include "hub/download.h"
#include "hub/repo.h"
#include "saragossa.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Whether the hub answers: one HEAD of the endpoint, 2 s at most (a machine without network
 * must not make doctor hang). Any HTTP status counts as reachable. */
static void print_hub(void)
{
	char endpoint[1024];
	sg_hub_endpoint(endpoint, sizeof endpoint);
	const char *off = getenv("HF_HUB_OFFLINE");
	int b = 0;
	if (off && !sg_parse_bool(off, &b) && b) {
		printf("hub:       %s (not checked: HF_HUB_OFFLINE is set)\n", endpoint);
		return;
	}
	CURL *c = curl_easy_init();
	if (!c) {
		printf("hub:       %s unreachable (curl could not start)\n", endpoint);
		return;
	}
	char err[CURL_ERROR_SIZE] = "";
	curl_easy_setopt(c, CURLOPT_URL, endpoint);
	curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 2000L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	CURLcode rc = curl_easy_perform(c);
	long status = 0;
	if (rc == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(c);
	if (rc == CURLE_OK) printf("hub:       %s reachable (HTTP %ld)\n", endpoint, status);
	else printf("hub:       %s unreachable (%s)\n", endpoint, err[0] ? err : curl_easy_strerror(rc));
}

static void print_models(void)
{
	char def[SG_HUB_PATH_MAX], dir[SG_HUB_PATH_MAX], cache[SG_HUB_PATH_MAX];
	int from_env = sg_cli_default_model(def, sizeof def);
	struct stat st;
	if (from_env) printf("default model: %s (SARAGOSSA_DEFAULT_MODEL)\n", def);
	else
		printf("default model: %s (%s)\n", def,
		       stat(def, &st) ? "missing: `make run` or `tools/fetch_models.py " SG_CLI_DEFAULT_MODEL_FETCH "` fetches it" : "present");
	if (sg_hub_models_dir(dir, sizeof dir)) snprintf(dir, sizeof dir, "(unknown: %s)", sg_last_error());
	printf("models:    %s%s\n", dir, stat(dir, &st) ? " (not created yet)" : "");
	if (sg_hub_cache_dir(cache, sizeof cache)) snprintf(cache, sizeof cache, "(unknown: %s)", sg_last_error());
	printf("hf cache:  %s%s\n", cache, stat(cache, &st) ? " (not created yet)" : "");
	print_hub();
}

/* doctor --sim-ram / --sim-vram / -m: the memory planner's layout of MODEL on a machine of that
 * size (this one when no size is given). Returns the exit status. */
static int print_plan(const char *model, uint64_t ram, uint64_t vram, int n_ctx, double hit)
{
	sg_plan_machine mc;
	if (ram || vram) sg_plan_machine_sim(ram ? ram : sg_mem_total(), vram, &mc);
	else sg_plan_machine_detect(&mc);
	printf("memory plan%s:\n", model ? "" : " (no model: -m MODEL gives its layout)");
	if (!model) {
		sg_plan_input in = {.n_ctx = n_ctx, .hit_rate = -1};
		sg_plan p;
		(void)sg_plan_make(&in, &mc, &p);
		sg_plan_print(&in, &mc, &p, stdout);
		return 0;
	}
	char path[SG_HUB_PATH_MAX];
	if (sg_cli_model_path("doctor", model, path, sizeof path)) return 1;
	/* the CPU maps the weights and reads none of the experts: cheap for any model size */
	sg_model_params mp = sg_model_default_params();
	mp.backend = "cpu";
	sg_model *m = NULL;
	if (sg_model_load(path, &mp, &m)) {
		fprintf(stderr, "saragossa doctor: %s\n", sg_last_error());
		return 1;
	}
	sg_plan_input in;
	sg_plan_input_from_model(m, n_ctx, &in);
	in.slot_bytes = sg_xc_slot_bytes(m, NULL, NULL);
	if (hit >= 0) in.hit_rate = hit;
	sg_plan p;
	sg_status st = sg_plan_make(&in, &mc, &p);
	printf("  model: %s\n", path);
	sg_plan_print(&in, &mc, &p, stdout);
	sg_model_free(m);
	if (st) {
		fprintf(stderr, "saragossa doctor: %s\n", sg_last_error());
		return 1;
	}
	return 0;
}

int sg_cli_doctor(int argc, char **argv)
{
	const char *model = NULL;
	int64_t ram = 0, vram = 0;
	long n_ctx = 0;
	double hit = -1;
	int plan = 0;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			printf("usage: saragossa doctor [--sim-ram N] [--sim-vram N] [-m MODEL] [--ctx N] [--hit-rate P]\n"
			       "  report the machine, the build, where models come from (default model, models\n"
			       "  folder, Hugging Face cache, whether the hub answers) and every runtime flag;\n"
			       "  with --sim-ram / --sim-vram / -m, the memory plan instead: trunk, KV at the context,\n"
			       "  expert slot cache (slots, bytes), headroom and disk reads per token, under the lowest\n"
			       "  of a target cap (SARAGOSSA_PLAN_TARGET), 70%% of available memory and the device's\n"
			       "  working set minus 2 GiB, for a machine of N bytes of RAM (and a GPU of N bytes)\n"
			       "  --hit-rate P      a measured expert hit rate in [0, 1] (default: assume the cached share)\n");
			return 0;
		}
		if (!v) return sg_cli_usage_error("doctor", "unknown option '%s'", a);
		if (!strcmp(a, "--sim-ram") || !strcmp(a, "--sim-vram")) {
			int64_t x;
			if (sg_parse_int(v, &x) || x <= 0) return sg_cli_usage_error("doctor", "%s wants a size (48g, 16384m), got '%s'", a, v);
			*(a[6] == 'r' ? &ram : &vram) = x;
		} else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
			model = v;
		} else if (!strcmp(a, "--ctx")) {
			if (sg_cli_parse_int(v, 1, 1 << 24, &n_ctx)) return sg_cli_usage_error("doctor", "--ctx wants an integer >= 1, got '%s'", v);
		} else if (!strcmp(a, "--hit-rate")) {
			if (sg_cli_parse_float(v, 0, 1, &hit)) return sg_cli_usage_error("doctor", "--hit-rate wants a number in [0, 1], got '%s'", v);
		} else {
			return sg_cli_usage_error("doctor", "unknown option '%s'", a);
		}
		plan = 1;
		i++;
	}
	if (plan) return print_plan(model, (uint64_t)ram, (uint64_t)vram, (int)n_ctx, hit);
	char feat[256], total[32], avail[32];
	sg_cpu_features_str(feat, sizeof(feat));
	sg_format_bytes(sg_mem_total(), total, sizeof(total));
	sg_format_bytes(sg_mem_available(), avail, sizeof(avail));
	printf("saragossa %s\n", sg_version());
	printf("build:     %s\n", SG_BUILD_FLAGS);
	printf("cpu:       %s\n", sg_cpu_model_name());
	printf("cores:     %d\n", sg_cpu_count());
	printf("simd:      %s\n", feat);
	printf("memory:    %s total, %s available\n", total, avail);
	for (int i = 0; sg_backend_accel_name(i); i++) {
		const char *be = sg_backend_accel_name(i);
		char devs[2048];
		int n = sg_backend_devices(be, devs, sizeof(devs));
		printf("%s:%*s", be, (int)(10 - strlen(be)), "");
		if (n < 0) {
			printf("%s\n", devs);
			continue;
		}
		printf("built in; %d device%s\n", n, n == 1 ? "" : "s");
		if (devs[0]) printf("           %s\n", devs);
	}
	/* which drafters the flags leave on; verify steps need a backend's match_decode op, which
	 * the CPU and CUDA backends have (a backend without one verifies a decode step per guess) */
	printf("speculative: n-gram drafter %s, draft-model drafter %s, MTP drafter %s; sampled draft-model guesses %s; batched "
	       "exact verify steps on the cpu and cuda backends (cuda: %s), %s elsewhere\n",
	       sg_drafter_enabled("ngram") ? "on" : "off", sg_drafter_enabled("model") ? "on" : "off", sg_drafter_enabled("mtp") ? "on" : "off",
	       sg_flag_bool("SARAGOSSA_SPEC_REJECTION") ? "kept by rejection sampling" : "checked against the target's draw",
	       sg_flag_bool("SARAGOSSA_CUDA_VERIFY_BATCH") ? "the step's tokens in one launch" : "token by token",
	       sg_flag_bool("SARAGOSSA_SPEC_STEPWISE") ? "one decode step per guess" : "none");
	print_models();
	printf("flags:\n");
	for (int i = 0; i < sg_flags_count(); i++) {
		const char *val;
		int from_env;
		const sg_flag *f = sg_flag_at(i, &val, &from_env);
		if (sg_flag_is_secret(f->name) && val[0]) val = "(set, hidden)";
		printf("  %-36s = %-10s %s  %s\n", f->name, val[0] ? val : "\"\"", from_env ? "(env)    " : "(default)",
		       f->desc);
	}
	return 0;
}
