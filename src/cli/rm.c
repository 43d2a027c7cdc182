/* saragossa rm MODEL...: remove models from the Hugging Face cache or saragossa's models folder.
 * Asks nothing; prints what it removed. */
#include "base/progress.h"
#include "cli/cli.h"
#include "hub/cache.h"
#include "saragossa.h"

#include <stdio.h>
#include <string.h>

int sg_cli_rm(int argc, char **argv)
{
	int n = 0, rc = 0;
	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			printf("usage: saragossa rm MODEL...\n"
			       "  remove org/name (the whole repo), org/name:file.gguf (one file) from the Hugging Face\n"
			       "  cache, or a name from saragossa's models folder\n");
			return 0;
		}
		if (argv[i][0] == '-') return sg_cli_usage_error("rm", "unknown option '%s'", argv[i]);
	}
	for (int i = 0; i < argc; i++) {
		char what[8192], size[32];
		uint64_t freed;
		n++;
		if (sg_hub_remove(argv[i], what, sizeof(what), &freed)) {
			fprintf(stderr, "saragossa: %s\n", sg_last_error());
			rc = 1;
			continue;
		}
		sg_format_bytes(freed, size, sizeof(size));
		printf("removed %s, %s freed\n", what, size);
	}
	if (!n) return sg_cli_usage_error("rm", "which model? (`saragossa list` shows them)");
	return rc;
}
