/* What the CUDA runtime sees (built only with CUDA=1). */
#ifndef SG_CUDA_INFO_H
#define SG_CUDA_INFO_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of CUDA devices usable now (0 if none or no driver), and one line per device into buf:
 * "GPU 0: NVIDIA H200, 139.8 GiB, sm_90, driver 13.0" or the runtime's reason for none. */
int sg_cuda_describe(char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
