/* Programmatic dependent launch (Hopper): the decode chain's kernels are launched so that the next
 * one's blocks may start while the previous one drains, instead of after it. Such a kernel calls
 * pdl_wait() before it touches anything an earlier kernel writes or reads (only weights, which no
 * kernel writes, may be read before: the GEMVs pull their rows into L2 there), and pdl_trigger()
 * early so that its own successor may be scheduled. On a kernel launched without the attribute
 * both are no-ops. SARAGOSSA_CUDA_PDL: 1 = PDL, 0 = plain launches (the policy's pdl field). */
#ifndef SG_BACKEND_CUDA_PDL_CUH
#define SG_BACKEND_CUDA_PDL_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <utility>

#include "backend/cuda/cuda_policy.h"

#if defined(SG_CU_TRACE) && SG_CU_TRACE
/* the host's list of PDL launches, in order (cuda_norm.cu): the kernel's name, its grid and block */
void sg_cu_trace_launch(const void *k, unsigned grid, unsigned block, cudaStream_t st);
struct sg_cu_trec;
/* each kernel file's device table pointers onto the one table (SG_CU_TRACE_FILE below) */
int sg_cu_trace_bind_gemv(sg_cu_trec *buf, unsigned *n);
int sg_cu_trace_bind_moe(sg_cu_trec *buf, unsigned *n);
int sg_cu_trace_bind_attn(sg_cu_trec *buf, unsigned *n);
int sg_cu_trace_bind_norm(sg_cu_trec *buf, unsigned *n);
#endif

/* A timeline build (make CUDA_TRACE=1, SARAGOSSA_CUDA_TRACE=file): every pdl_wait of thread 0 of
 * some of a kernel's blocks (the first two, the last, every 64th) appends when the block reached its
 * wait and when the wait returned (%globaltimer, ns) to a device table, in the order the waits
 * return. A kernel's wait returns when the one before has finished, so the returns of successive
 * kernels are the chain's critical path (tools/cuda_trace.py cuts it into kernels). Off in normal
 * builds, which compile none of it. */
#if defined(SG_CU_TRACE) && SG_CU_TRACE
struct sg_cu_trec {
	unsigned long long t0, t1; /* the block at its wait; the wait returned */
	unsigned grid, block, bid, smid;
};
#define SG_CU_TRACE_CAP (1u << 22)
/* one table and count for every file's kernels (one order of the waits), bound by sg_cu_set_pdl */
static __device__ sg_cu_trec *sg_trace_buf;
static __device__ unsigned *sg_trace_n;
static __device__ __forceinline__ unsigned long long sg_gtime()
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}
static inline int sg_cu_trace_bind(sg_cu_trec *buf, unsigned *n)
{
	return cudaMemcpyToSymbol(sg_trace_buf, &buf, sizeof buf) == cudaSuccess && cudaMemcpyToSymbol(sg_trace_n, &n, sizeof n) == cudaSuccess
		       ? 0
		       : -1;
}
/* a kernel file's binder of its copy of the table pointers (each .cu file has its own) */
#define SG_CU_TRACE_FILE(name) \
	int sg_cu_trace_bind_##name(sg_cu_trec *buf, unsigned *n) { return sg_cu_trace_bind(buf, n); }
#else
#define SG_CU_TRACE_FILE(name)
#endif

static __device__ __forceinline__ void pdl_wait()
{
#if defined(SG_CU_TRACE) && SG_CU_TRACE
	const unsigned long long t0 = sg_gtime();
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
#if defined(SG_CU_TRACE) && SG_CU_TRACE
	const unsigned bid = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z), nb = gridDim.x * gridDim.y * gridDim.z;
	if (sg_trace_buf && threadIdx.x + threadIdx.y + threadIdx.z == 0 && (bid < 2 || bid == nb - 1 || bid % 64 == 0)) {
		sg_cu_trec r;
		r.t0 = t0;
		r.t1 = sg_gtime();
		r.grid = nb;
		r.block = blockDim.x * blockDim.y * blockDim.z;
		r.bid = bid;
		asm volatile("mov.u32 %0, %%smid;" : "=r"(r.smid));
		const unsigned i = atomicAdd(sg_trace_n, 1u);
		if (i < SG_CU_TRACE_CAP) sg_trace_buf[i] = r;
	}
#endif
}

/* A load of what an earlier kernel of the chain wrote (activations, expert ids), after pdl_wait.
 * Never through the non-coherent path (__ldg, or a const __restrict__ pointer the compiler turns
 * into ld.global.nc): ptxas takes such a load for one of invariant data and may move it above the
 * wait. It did: moes_kernel read its expert id before griddepcontrol.wait, while the routing
 * kernel was still writing it, and computed another expert's rows when the GPU was busy enough
 * for the two to overlap. ld.global.ca is an ordinary (coherent) load, cached in L1 like the
 * other, and stays behind the wait. tools/pdl_audit.py checks the built kernels for loads moved
 * above it. */
template <typename T> static __device__ __forceinline__ T ldd(const T *p) { return __ldca(p); }

static __device__ __forceinline__ void pdl_trigger()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

/* 16 bytes global -> shared without registers (sm_80+), and the wait for the thread's copies */
static __device__ __forceinline__ void cp_async16(void *dst, const void *src)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((uint32_t)__cvta_generic_to_shared(dst)), "l"(src) : "memory");
}
static __device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
static __device__ __forceinline__ void cp_async_wait_all()
{
	asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
}

/* kernel<<<grid, block, smem, st>>>(args...) with the programmatic-serialization attribute when
 * the flag is on */
template <typename... P, typename... A>
static cudaError_t pdl_launch(void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, A &&...args)
{
	cudaLaunchConfig_t cfg = {};
	cudaLaunchAttribute at[1];
	unsigned n = 0;
	if (sg_cu_policy_now()->pdl) {
		at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
		at[n++].val.programmaticStreamSerializationAllowed = 1;
	}
	cfg.gridDim = grid;
	cfg.blockDim = block;
	cfg.dynamicSmemBytes = smem;
	cfg.stream = st;
	cfg.attrs = at;
	cfg.numAttrs = n;
#if defined(SG_CU_TRACE) && SG_CU_TRACE
	sg_cu_trace_launch((const void *)k, grid.x * grid.y * grid.z, block.x * block.y * block.z, st);
#endif
	return cudaLaunchKernelEx(&cfg, k, std::forward<A>(args)...);
}

/* The launch status of the kernels enqueued last (0 = cudaSuccess). */
static inline int ok(void) { return (int)cudaGetLastError(); }
/* Blocks of `threads` for n elements, 1 .. 65535 (grid-stride kernels take the rest). */
static inline unsigned grid_for(int64_t n, int threads)
{
	int64_t b = (n + threads - 1) / threads;
	return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

#endif
