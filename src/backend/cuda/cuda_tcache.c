/*
 * Device blocks that tensor_alloc handed out, kept when freed (SARAGOSSA_CUDA_TENSOR_CACHE) and handed
 * out again: an encoder allocates its batch's activations on every call, and each cudaMalloc and
 * cudaFree of megabytes costs tens to hundreds of microseconds (cudaFree also waits for the device).
 * A kept block is reused only for a size it fits within 2x, the kept bytes are capped, and every
 * tensor keeps its zeroed-at-allocation contract (the caller clears it on the backend's stream, so
 * the clear follows whatever the stream still runs on the block's last owner).
 */
#include <cuda_runtime.h>
#include <pthread.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "base/alloc.h"
#include "base/flags.h"

#define TC_SLOTS 64
#define TC_MIN (256u << 10)     /* smaller blocks go straight to cudaMalloc / cudaFree */
#define TC_CAP ((size_t)256 << 20) /* at most this many bytes kept idle */

typedef struct {
	void *p;
	size_t bytes;
} tc_block;

struct sg_cuda_tcache {
	pthread_mutex_t mu;
	tc_block live[TC_SLOTS], idle[TC_SLOTS];
	size_t idle_bytes;
};

static sg_cuda_tcache *tc_get(sg_cuda_backend *cb)
{
	if (!cb->tcache && sg_flag_bool("SARAGOSSA_CUDA_TENSOR_CACHE")) {
		sg_cuda_tcache *c = sg_calloc(1, sizeof(*c));
		if (c && pthread_mutex_init(&c->mu, NULL)) {
			sg_free(c);
			c = NULL;
		}
		cb->tcache = c;
	}
	return cb->tcache;
}

/* Records p (bytes) as handed out, replacing a stale entry of the same address; untracked when full. */
static void tc_track(sg_cuda_tcache *c, void *p, size_t bytes)
{
	int slot = -1;
	for (int i = 0; i < TC_SLOTS; i++) {
		if (c->live[i].p == p) c->live[i].p = NULL;
		if (!c->live[i].p && slot < 0) slot = i;
	}
	if (slot >= 0) c->live[slot] = (tc_block){p, bytes};
}

int sg_cuda_dev_alloc(sg_cuda_backend *cb, size_t bytes, void **out)
{
	sg_cuda_tcache *c = bytes >= TC_MIN ? tc_get(cb) : NULL;
	*out = NULL;
	if (c) {
		pthread_mutex_lock(&c->mu);
		int best = -1;
		for (int i = 0; i < TC_SLOTS; i++)
			if (c->idle[i].p && c->idle[i].bytes >= bytes && c->idle[i].bytes / 2 <= bytes &&
			    (best < 0 || c->idle[i].bytes < c->idle[best].bytes))
				best = i;
		if (best >= 0) {
			*out = c->idle[best].p;
			c->idle_bytes -= c->idle[best].bytes;
			tc_track(c, *out, c->idle[best].bytes);
			c->idle[best].p = NULL;
		}
		pthread_mutex_unlock(&c->mu);
		if (*out) return 0;
	}
	int e = (int)cudaMalloc(out, bytes);
	if (e && c) { /* out of memory: give the kept blocks back and try once more */
		(void)cudaGetLastError();
		sg_cuda_tcache_flush(cb);
		e = (int)cudaMalloc(out, bytes);
	}
	if (e) return e;
	if (c) {
		pthread_mutex_lock(&c->mu);
		tc_track(c, *out, bytes);
		pthread_mutex_unlock(&c->mu);
	}
	return 0;
}

void sg_cuda_dev_free(sg_cuda_backend *cb, void *p)
{
	sg_cuda_tcache *c = cb->tcache;
	if (!p) return;
	if (c) {
		pthread_mutex_lock(&c->mu);
		for (int i = 0; i < TC_SLOTS; i++) {
			if (c->live[i].p != p) continue;
			size_t bytes = c->live[i].bytes;
			c->live[i].p = NULL;
			for (int j = 0; j < TC_SLOTS && c->idle_bytes + bytes <= TC_CAP; j++)
				if (!c->idle[j].p) {
					c->idle[j] = (tc_block){p, bytes};
					c->idle_bytes += bytes;
					p = NULL;
					break;
				}
			break;
		}
		pthread_mutex_unlock(&c->mu);
	}
	if (p) cudaFree(p);
}

void sg_cuda_tcache_flush(sg_cuda_backend *cb)
{
	sg_cuda_tcache *c = cb->tcache;
	if (!c) return;
	pthread_mutex_lock(&c->mu);
	for (int i = 0; i < TC_SLOTS; i++)
		if (c->idle[i].p) {
			cudaFree(c->idle[i].p);
			c->idle[i].p = NULL;
		}
	c->idle_bytes = 0;
	pthread_mutex_unlock(&c->mu);
}

void sg_cuda_tcache_destroy(sg_cuda_backend *cb)
{
	if (!cb->tcache) return;
	sg_cuda_tcache_flush(cb);
	pthread_mutex_destroy(&cb->tcache->mu);
	sg_free(cb->tcache);
	cb->tcache = NULL;
}

size_t sg_cuda_tcache_idle_bytes(const sg_cuda_backend *cb) { return cb->tcache ? cb->tcache->idle_bytes : 0; }
