#include "base/sysinfo.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static sg_cpu_features features;
static char model_name[128] = "unknown";
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void detect(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_cpu_init();
	features.avx2 = __builtin_cpu_supports("avx2");
	features.fma = __builtin_cpu_supports("fma");
	features.avx512f = __builtin_cpu_supports("avx512f");
	features.avx512bw = __builtin_cpu_supports("avx512bw");
	features.avx512vl = __builtin_cpu_supports("avx512vl");
	features.avx512vnni = __builtin_cpu_supports("avx512vnni");
#endif
	FILE *f = fopen("/proc/cpuinfo", "r");
	if (f) {
		char line[4096];
		while (fgets(line, sizeof(line), f)) {
			char *colon = strchr(line, ':');
			if (!colon) continue;
			char *v = colon + 1;
			while (*v == ' ' || *v == '\t') v++;
			v[strcspn(v, "\n")] = 0;
			if (!strncmp(line, "model name", 10) && !strcmp(model_name, "unknown"))
				snprintf(model_name, sizeof(model_name), "%s", v);
			if (!strncmp(line, "flags", 5) || !strncmp(line, "Features", 8)) {
				/* flags the compiler builtins do not know everywhere */
				char padded[4100];
				snprintf(padded, sizeof(padded), " %s ", v);
				features.f16c |= strstr(padded, " f16c ") != NULL;
				features.avx512bf16 |= strstr(padded, " avx512_bf16 ") != NULL;
				features.avxvnni |= strstr(padded, " avx_vnni ") != NULL;
				features.dotprod |= strstr(padded, " asimddp ") != NULL;
				features.i8mm |= strstr(padded, " i8mm ") != NULL;
			}
		}
		fclose(f);
	}
#if defined(__aarch64__)
	features.neon = 1;
#endif
}

const sg_cpu_features *sg_cpu_get_features(void)
{
	pthread_once(&once, detect);
	return &features;
}

const char *sg_cpu_model_name(void)
{
	pthread_once(&once, detect);
	return model_name;
}

void sg_cpu_features_str(char *buf, size_t n)
{
	const sg_cpu_features *f = sg_cpu_get_features();
	struct {
		int on;
		const char *name;
	} list[] = {
		{f->avx2, "avx2"},       {f->fma, "fma"},           {f->f16c, "f16c"},
		{f->avx512f, "avx512f"}, {f->avx512bw, "avx512bw"}, {f->avx512vl, "avx512vl"},
		{f->avx512vnni, "avx512vnni"}, {f->avx512bf16, "avx512bf16"}, {f->avxvnni, "avxvnni"},
		{f->neon, "neon"},       {f->dotprod, "dotprod"},   {f->i8mm, "i8mm"},
	};
	size_t off = 0;
	buf[0] = 0;
	for (size_t i = 0; i < sizeof(list) / sizeof(list[0]); i++) {
		if (!list[i].on) continue;
		int w = snprintf(buf + off, n - off, "%s%s", off ? " " : "", list[i].name);
		if (w < 0 || (size_t)w >= n - off) break;
		off += (size_t)w;
	}
	if (!off) snprintf(buf, n, "none");
}

/* Reads "<key>: <n> kB" from a /proc file. */
static uint64_t proc_kb(const char *path, const char *key)
{
	FILE *f = fopen(path, "r");
	if (!f) return 0;
	char line[256];
	size_t kl = strlen(key);
	uint64_t v = 0;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, key, kl) && line[kl] == ':') {
			unsigned long long kb = 0;
			if (sscanf(line + kl + 1, "%llu", &kb) == 1) v = (uint64_t)kb * 1024;
			break;
		}
	}
	fclose(f);
	return v;
}

uint64_t sg_mem_total(void) { return proc_kb("/proc/meminfo", "MemTotal"); }
uint64_t sg_mem_available(void) { return proc_kb("/proc/meminfo", "MemAvailable"); }
uint64_t sg_mem_rss(void) { return proc_kb("/proc/self/status", "VmRSS"); }
uint64_t sg_mem_peak_rss(void) { return proc_kb("/proc/self/status", "VmHWM"); }
