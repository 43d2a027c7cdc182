/* saragossa doctor: what this machine and build are, and the value of every runtime flag. */
#include "base/flags.h"
#include "base/progress.h"
#include "base/sysinfo.h"
#include "base/threadpool.h"
#include "cli/cli.h"
#include "saragossa.h"
#if SG_CUDA
#include "backend/cuda/cuda_info.h"
#endif

#include <stdio.h>
#include <string.h>

int sg_cli_doctor(int argc, char **argv)
{
	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			printf("usage: saragossa doctor\n  report the machine, the build and every runtime flag\n");
			return 0;
		}
		return sg_cli_usage_error("doctor", "unknown option '%s'", argv[i]);
	}
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
#if SG_CUDA
	char gpus[2048];
	int n = sg_cuda_describe(gpus, sizeof(gpus));
	printf("cuda:      built in; %d device%s\n", n, n == 1 ? "" : "s");
	if (gpus[0]) printf("           %s\n", gpus);
#else
	printf("cuda:      not built (make CUDA=1)\n");
#endif
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
