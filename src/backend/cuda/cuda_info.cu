#include "backend/cuda/cuda_info.h"

#include <cuda_runtime.h>
#include <stdio.h>

extern "C" int sg_cuda_describe(char *buf, size_t n)
{
	int count = 0;
	buf[0] = 0;
	cudaError_t err = cudaGetDeviceCount(&count);
	if (err != cudaSuccess) {
		snprintf(buf, n, "no usable GPU (%s)", cudaGetErrorString(err));
		cudaGetLastError(); /* clear the sticky-free error so later calls start clean */
		return 0;
	}
	int driver = 0, runtime = 0;
	cudaDriverGetVersion(&driver);
	cudaRuntimeGetVersion(&runtime);
	size_t off = 0;
	for (int i = 0; i < count; i++) {
		cudaDeviceProp p;
		if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
		int w = snprintf(buf + off, n - off, "%sGPU %d: %s, %.1f GiB, sm_%d%d, driver %d.%d, runtime %d.%d",
				 off ? "\n" : "", i, p.name, (double)p.totalGlobalMem / (1 << 30), p.major, p.minor,
				 driver / 1000, (driver % 1000) / 10, runtime / 1000, (runtime % 1000) / 10);
		if (w < 0 || (size_t)w >= n - off) break;
		off += (size_t)w;
	}
	return count;
}

extern "C" int sg_cuda_device_memory(int device, uint64_t *free_bytes, uint64_t *total_bytes, char *why, size_t n)
{
	size_t f = 0, t = 0;
	cudaError_t err = cudaSetDevice(device);
	if (err == cudaSuccess) err = cudaMemGetInfo(&f, &t);
	if (err != cudaSuccess) {
		snprintf(why, n, "%s", cudaGetErrorString(err));
		cudaGetLastError();
		return -1;
	}
	*free_bytes = f;
	*total_bytes = t;
	return 0;
}
