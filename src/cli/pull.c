/* saragossa pull MODEL: make MODEL available locally (downloading what is missing from the
 * Hugging Face hub) and print the path it resolves to. */
#include "base/progress.h"
#include "cli/cli.h"
#include "hub/resolve.h"
#include "saragossa.h"

#include <stdio.h>
#include <string.h>

int sg_cli_pull(int argc, char **argv)
{
	const char *model = NULL;
	sg_hub_opts opts = {.update = 1};
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			printf("usage: saragossa pull [-q] MODEL\n"
			       "  download MODEL (org/name, org/name:file.gguf, org/name:Q4_K_M, org/name@revision)\n"
			       "  into the Hugging Face cache if it is missing or out of date; print its local path\n"
			       "  -q, --quiet   no progress bars\n");
			return 0;
		}
		if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) opts.quiet = 1;
		else if (a[0] == '-') return sg_cli_usage_error("pull", "unknown option '%s'", a);
		else if (model) return sg_cli_usage_error("pull", "pull takes one MODEL");
		else model = a;
	}
	if (!model) return sg_cli_usage_error("pull", "which model? (e.g. saragossa pull Qwen/Qwen3-0.6B)");
	sg_hub_model m;
	if (sg_hub_resolve(model, &opts, &m)) {
		fprintf(stderr, "saragossa: %s\n", sg_last_error());
		return 1;
	}
	if (m.source == SG_HUB_SRC_HF_CACHE) {
		char bytes[32];
		sg_format_bytes(m.bytes_downloaded, bytes, sizeof(bytes));
		if (m.files_downloaded)
			fprintf(stderr, "pulled %s (commit %.12s): %d file%s, %s downloaded\n", m.repo, m.commit,
				m.files_downloaded, m.files_downloaded == 1 ? "" : "s", bytes);
		else fprintf(stderr, "%s is up to date (commit %.12s)\n", m.repo, m.commit);
	}
	printf("%s\n", m.path);
	return 0;
}
