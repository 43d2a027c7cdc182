/*
 * The CUDA kernels' policy: which kernel each stage takes, as named fields read once from the
 * SARAGOSSA_CUDA_* flags (their defaults are stated in src/base/flags.c alone). The launchers of
 * every kernel file read it through sg_cu_policy_now(); the choice itself is made by one function
 * per stage (gemv_choose in cuda_gemv.cu, dec_choose in cuda_attn.cu, moes_launch's test in
 * cuda_moe.cu). Plain C: shared by the host glue and the kernel files.
 */
#ifndef SG_BACKEND_CUDA_POLICY_H
#define SG_BACKEND_CUDA_POLICY_H

#ifdef __cplusplus
extern "C" {
#endif

/* Where the one-token GEMVs of Q4_K, Q6_K and MLX 4-bit run in a persistent grid (mvp_kernel) instead
 * of a block per task (mvs_kernel); the same bits either way. */
typedef enum sg_cu_persist {
	SG_CU_PERSIST_OFF,       /* SARAGOSSA_CUDA_GEMV_PERSIST=0: a block per task */
	SG_CU_PERSIST_ONE_ROUND, /* =1: launches of more tasks than SMs and at most 3 an SM (one round) */
	SG_CU_PERSIST_ALWAYS     /* every launch the kernel takes (the tests and the kernel bench; no flag) */
} sg_cu_persist;

/* The one-token attention's kernel family (SARAGOSSA_CUDA_ATTN_DECODE). */
typedef enum sg_cu_decode {
	SG_CU_DECODE_PER_HEAD,   /* 0: the many-token kernel, a block per query head */
	SG_CU_DECODE_FIXED,      /* 1: query heads of a KV head per block, slices of the live length; f16 caches of
	                          * head dim 64/128/256 take the compile-time-shape kernel (with its K copy, tensor
	                          * cores, fused prep where the fields below allow) */
	SG_CU_DECODE_GROUPED     /* 2: the same grouping with the runtime-shape kernel for every shape */
} sg_cu_decode;

typedef struct sg_cu_policy {
	struct {
		int block_per_lane;    /* SARAGOSSA_CUDA_GEMV_SB: a 256-element block a lane (Q4_K, Q6_K, MLX 4-bit) */
		int xstage;            /* SARAGOSSA_CUDA_GEMV_XSTAGE: its activations staged by cp.async, scales too */
		int mixed;             /* SARAGOSSA_CUDA_GEMV_MIXED: Q4_K and Q6_K matrices of a store stage in one launch */
		int pre;               /* SARAGOSSA_CUDA_GEMV_PRE: small F32/F16/BF16 launches load before their wait */
		sg_cu_persist persist; /* SARAGOSSA_CUDA_GEMV_PERSIST */
		int persist_grid;      /* at most this many persistent blocks (the tests' way to many tasks a block; 0 = by occupancy) */
		int verify_mt;         /* SARAGOSSA_CUDA_VERIFY_MT: an exact step's tokens a group a block (mvt_kernel); 2: the
		                        * largest groups whatever the grid's size (the tests) */
	} gemv;
	struct {
		sg_cu_decode decode; /* SARAGOSSA_CUDA_ATTN_DECODE */
		int merge1;          /* SARAGOSSA_CUDA_ATTN_MERGE: the slices merged in one round trip of loads */
		int kpre;            /* SARAGOSSA_CUDA_ATTN_KPRE: the first tiles' K rows copied before the wait */
		int vfirst;          /* SARAGOSSA_CUDA_ATTN_VFIRST: and their V rows (tensor-core kernel) */
		int kpipe;           /* SARAGOSSA_CUDA_ATTN_KPIPE: later tiles' K rows copied during the V reads */
		int mma;             /* SARAGOSSA_CUDA_ATTN_MMA: scores and values on tensor cores */
		int prep;            /* SARAGOSSA_CUDA_ATTN_PREP: the attention prep fused into the kernel */
	} attn;
	struct {
		int decode;     /* SARAGOSSA_CUDA_MOE_DECODE: one token's experts straight from the routing ids */
		int route_warp; /* SARAGOSSA_CUDA_ROUTE_WARP: routing of up to 256 experts by one warp */
		int ids_early;  /* SARAGOSSA_CUDA_MOE_IDS_EARLY: the down experts read their ids before the wait */
	} moe;
	int pdl; /* SARAGOSSA_CUDA_PDL: programmatic dependent launch of the decode chain */
} sg_cu_policy;

/* The policy in force: read from the flags on the first call (and by sg_cu_policy_load). */
const sg_cu_policy *sg_cu_policy_now(void);
/* Reads the flags again (the backend at creation: flags are re-read by tests). */
void sg_cu_policy_load(void);
/* Replaces the policy (the tests and the kernel bench, to compare kernels on one process). */
void sg_cu_policy_set(const sg_cu_policy *p);

#ifdef __cplusplus
}
#endif
#endif
