/* saragossa list: the models on this machine, in the Hugging Face cache and in saragossa's own
 * models folder: name, format, quantization, size on disk. */
#include "base/alloc.h"
#include "base/progress.h"
#include "cli/cli.h"
#include "hub/cache.h"
#include "hub/repo.h"
#include "saragossa.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static int print_json(const sg_hub_entry *v, int n)
{
	json_t *arr = json_array();
	for (int i = 0; arr && i < n; i++) {
		json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:s, s:s}", "name", v[i].name, "format", v[i].format,
				      "quantization", v[i].quant, "size", (json_int_t)v[i].size, "source",
				      v[i].hf_cache ? "huggingface" : "saragossa", "path", v[i].path);
		if (!o || json_array_append_new(arr, o)) {
			json_decref(arr);
			arr = NULL;
		}
	}
	char *s = arr ? json_dumps(arr, JSON_INDENT(2)) : NULL;
	json_decref(arr);
	if (!s) {
		fprintf(stderr, "saragossa: out of memory\n");
		return 1;
	}
	printf("%s\n", s);
	free(s);
	return 0;
}

int sg_cli_list(int argc, char **argv)
{
	int json = 0;
	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			printf("usage: saragossa list [--json]\n"
			       "  list the models in the Hugging Face cache and in saragossa's models folder\n");
			return 0;
		}
		if (!strcmp(argv[i], "--json")) json = 1;
		else return sg_cli_usage_error("list", "unknown argument '%s'", argv[i]);
	}
	sg_hub_entry *v;
	int n;
	if (sg_hub_list(&v, &n)) {
		fprintf(stderr, "saragossa: %s\n", sg_last_error());
		return 1;
	}
	int rc = 0;
	if (json) {
		rc = print_json(v, n);
	} else {
		int w = 4;
		for (int i = 0; i < n; i++)
			if ((int)strlen(v[i].name) > w) w = (int)strlen(v[i].name);
		printf("%-*s  %-11s  %-12s  %10s\n", w, "NAME", "FORMAT", "QUANT", "SIZE");
		for (int i = 0; i < n; i++) {
			char size[32];
			sg_format_bytes(v[i].size, size, sizeof(size));
			printf("%-*s  %-11s  %-12s  %10s\n", w, v[i].name, v[i].format, v[i].quant[0] ? v[i].quant : "-",
			       size);
		}
		if (!n) {
			char cache[SG_HUB_PATH_MAX] = "", models[SG_HUB_PATH_MAX] = "";
			sg_hub_cache_dir(cache, sizeof(cache));
			sg_hub_models_dir(models, sizeof(models));
			fprintf(stderr, "no models in %s nor %s; `saragossa pull org/name` downloads one\n", cache, models);
		}
	}
	sg_free(v);
	return rc;
}
