/*
 * The backends this build has, by name: the one place above the op table that knows CUDA exists.
 * Everything else (model loading, sessions, the server's memory guard, doctor, bench) opens a
 * backend by name and asks it what it can do (sg_backend_caps).
 */
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "base/error.h"
#if SG_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_info.h"
#endif

sg_backend_params sg_backend_default_params(void)
{
	sg_backend_params p = {0, 0};
	return p;
}

const char *sg_backend_names(void) { return SG_CUDA ? "cpu, cuda" : "cpu"; }

int sg_backend_known(const char *name)
{
	/* every backend saragossa has, built in or not: opening one this build lacks says how to get it */
	return name && (!strcmp(name, "cpu") || !strcmp(name, "cuda"));
}

sg_status sg_backend_open(const char *name, const sg_backend_params *p, sg_backend **out)
{
	*out = NULL;
	sg_backend_params d = sg_backend_default_params();
	if (!p) p = &d;
	if (name && !strcmp(name, "cpu")) {
		sg_cpu_params cp = sg_cpu_default_params();
		cp.n_threads = p->n_threads;
		return sg_cpu_backend_create(&cp, out);
	}
#if SG_CUDA
	if (name && !strcmp(name, "cuda")) {
		sg_cuda_params gp = sg_cuda_default_params();
		gp.device = p->device;
		return sg_cuda_backend_create(&gp, out);
	}
#endif
	if (name && !strcmp(name, "cuda"))
		return sg_error(SG_ERR_UNSUPPORTED, "backend 'cuda': this build has no CUDA backend (rebuild with make CUDA=1)");
	return sg_error(SG_ERR_UNSUPPORTED, "backend '%s' (this build runs: %s)", name ? name : "", sg_backend_names());
}

const char *sg_backend_accel_name(int i) { return i == 0 ? "cuda" : NULL; }

int sg_backend_devices(const char *name, char *buf, size_t n)
{
	if (n) buf[0] = 0;
#if SG_CUDA
	if (name && !strcmp(name, "cuda")) return sg_cuda_describe(buf, n);
#endif
	if (name && !strcmp(name, "cuda")) {
		if (n) snprintf(buf, n, "not built (make CUDA=1)");
		return -1;
	}
	if (n) snprintf(buf, n, "no backend '%s'", name ? name : "");
	return -1;
}

const char *sg_backend_auto_accel(void)
{
#if SG_CUDA
	char why[512];
	if (sg_cuda_describe(why, sizeof why) > 0) return "cuda";
#endif
	return NULL;
}

sg_status sg_backend_device_memory(const char *name, int device, uint64_t *free_bytes, uint64_t *total_bytes)
{
	*free_bytes = *total_bytes = 0;
#if SG_CUDA
	if (name && !strcmp(name, "cuda")) {
		char why[256];
		if (sg_cuda_device_memory(device, free_bytes, total_bytes, why, sizeof why))
			return sg_error(SG_ERR_UNSUPPORTED, "cuda: the memory of device %d (%s)", device, why);
		return SG_OK;
	}
#endif
	(void)device;
	return sg_error(SG_ERR_UNSUPPORTED, "backend '%s' has no device memory of its own", name ? name : "");
}
