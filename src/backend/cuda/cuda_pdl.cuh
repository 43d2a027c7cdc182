/* Programmatic dependent launch (Hopper): the decode chain's kernels are launched so that the next
 * one's blocks may start while the previous one drains, instead of after it. Such a kernel calls
 * pdl_wait() before it touches anything an earlier kernel writes or reads (only weights, which no
 * kernel writes, may be read before: the GEMVs pull their rows into L2 there), and pdl_trigger()
 * early so that its own successor may be scheduled. On a kernel launched without the attribute
 * both are no-ops. SARAGOSSA_CUDA_PDL: 0 = plain launches, 1 = PDL, 2 = PDL with the GEMVs'
 * weight prefetch before the wait. */
#ifndef SG_BACKEND_CUDA_PDL_CUH
#define SG_BACKEND_CUDA_PDL_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <utility>

extern int sg_cu_pdl; /* the flag's value, set once by the backend (sg_cu_set_pdl) */

static __device__ __forceinline__ void pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
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

/* bytes [p, p + n) into L2, one 128-byte line per thread of the group (lane of nt threads) */
static __device__ __forceinline__ void l2_prefetch(const uint8_t *p, size_t n, int lane, int nt)
{
	for (size_t o = (size_t)lane * 128; o < n; o += (size_t)nt * 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(p + o));
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
	at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
	at[0].val.programmaticStreamSerializationAllowed = 1;
	cfg.gridDim = grid;
	cfg.blockDim = block;
	cfg.dynamicSmemBytes = smem;
	cfg.stream = st;
	cfg.attrs = at;
	cfg.numAttrs = sg_cu_pdl ? 1 : 0;
	return cudaLaunchKernelEx(&cfg, k, std::forward<A>(args)...);
}

#endif
