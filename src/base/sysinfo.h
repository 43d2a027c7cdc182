/* What the machine is: CPU model and SIMD features, cores, memory, this process's footprint. */
#ifndef SG_BASE_SYSINFO_H
#define SG_BASE_SYSINFO_H

#include <stddef.h>
#include <stdint.h>

typedef struct sg_cpu_features {
	int avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512vnni, avx512bf16, avxvnni; /* x86-64 */
	int neon, dotprod, i8mm;                                                              /* arm64 */
} sg_cpu_features;

/* Detected once; cheap to call. */
const sg_cpu_features *sg_cpu_get_features(void);
/* "AMD EPYC 7B13" or "unknown"; static storage. */
const char *sg_cpu_model_name(void);
/* Space-separated list of the features present ("avx2 fma f16c"). */
void sg_cpu_features_str(char *buf, size_t n);

/* Bytes; 0 when unknown. Available = MemAvailable from /proc/meminfo. */
uint64_t sg_mem_total(void);
uint64_t sg_mem_available(void);
/* Resident set size and its peak (VmHWM) of this process. */
uint64_t sg_mem_rss(void);
uint64_t sg_mem_peak_rss(void);

#endif
