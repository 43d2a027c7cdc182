/* What the CUDA runtime sees (built only with CUDA=1). */
#ifndef SG_CUDA_INFO_H
#define SG_CUDA_INFO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of CUDA devices usable now (0 if none or no driver), and one line per device into buf:
 * "GPU 0: NVIDIA H200, 139.8 GiB, sm_90, driver 13.0" or the runtime's reason for none. */
int sg_cuda_describe(char *buf, size_t n);
/* Free and total memory of device `device` now (cudaMemGetInfo; makes the device's context
 * current on this thread): 0, or -1 with the runtime's reason in why[n]. */
int sg_cuda_device_memory(int device, uint64_t *free_bytes, uint64_t *total_bytes, char *why, size_t n);

#ifdef __cplusplus
}
#endif
#endif
