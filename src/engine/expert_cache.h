/*
 * The expert slot cache: a model's routed experts read from its files on demand into one pool of
 * equal slots shared by all layers, instead of being paged in through the file's mapping.
 *
 * The dense trunk (embeddings, attention, norms, routers, head) stays bound in place. Each slot
 * holds one expert of one layer (its gate, up and down rows, exactly the file's bytes); after a
 * layer's routing the forward asks for the experts its tokens chose (sg_model_fetch_experts), the
 * cache reads the missing ones with pread through io_uring (several reads in flight, O_DIRECT
 * where the file system takes it), evicting the least valuable resident ones of any layer (hot
 * layers borrow slots from cold ones), and points the layer's expert tables at the slots. The
 * expert matmul then reads each expert through the table: the same bytes and kernels as the
 * stacked tensor, so the output is bit-identical to the fully resident model.
 *
 * The pages of the expert tensors in the mapping are never touched (the ranges are advised
 * MADV_DONTNEED + MADV_RANDOM), so a process under a memory cap does not page-thrash.
 *
 * Prefetch (SARAGOSSA_EXPERT_PREFETCH, off by default: measured slower on a loaded 2-core machine):
 * after a one-token layer's experts are resident, the next MoE layer's router is applied to this
 * layer's expert input and its top-k experts are read in the background (router), or the experts
 * the next layer took last time (last).
 *
 * Devices: on a backend of device memory (CUDA) the trunk is on the device, the experts stay in
 * the files (the stacks deferred at load), the pool is the device's memory, and each read lands
 * in a host staging slot and is uploaded into its device slot in the backend's row layout; the
 * expert kernels read through a device array of slot numbers per layer. The decode step then
 * runs op by op (each MoE layer's choices are read back), not as a recorded graph.
 *
 * Layouts: the separate stacks (GGUF, and safetensors stacks of F32/F16/BF16), experts stored one
 * tensor per expert and transformers 5's fused gate_up stacks (split at load) are read; Gemma 4's
 * kept gate_up stacks and MLX-quantized experts are refused with a message saying so. The backend
 * must read expert tables (the CPU's host pointers, the CUDA backend's device slots).
 */
#ifndef SG_ENGINE_EXPERT_CACHE_H
#define SG_ENGINE_EXPERT_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "models/model.h"
#include "saragossa.h"

/* What --expert-cache / SARAGOSSA_EXPERT_CACHE asks for. */
typedef enum sg_xc_mode {
	SG_XC_OFF = 0,  /* every expert bound in place (the default) */
	SG_XC_AUTO,     /* the planner's choice: a cache only when the model does not fit */
	SG_XC_BYTES,    /* a pool of this many bytes */
	SG_XC_PERCENT,  /* slots for this percentage of all the model's routed experts */
} sg_xc_mode;

typedef struct sg_xc_spec {
	sg_xc_mode mode;
	uint64_t bytes;  /* SG_XC_BYTES */
	double percent;  /* SG_XC_PERCENT, (0, 100] */
} sg_xc_spec;

/* "off", "auto", "25%", or a size ("6g", "512m", bytes). 0 on success, -1 (err filled) if not. */
int sg_xc_parse(const char *s, sg_xc_spec *out, char *err, size_t errn);

typedef struct sg_xc_stats {
	int64_t slots, slots_max;   /* slots in use now (after a resize) and allocated */
	uint64_t slot_bytes;        /* bytes of one slot (the largest expert of any layer, aligned) */
	int64_t experts;            /* routed experts of the model (layers x E) */
	uint64_t lookups, hits;     /* experts a layer asked for, and how many were resident */
	uint64_t prefetched, prefetch_used; /* experts read ahead, and those a later lookup hit */
	uint64_t reads, bytes_read; /* expert reads and their bytes (demand and prefetch) */
	uint64_t tokens;            /* tokens through the first MoE layer (for per-token figures) */
	int direct;                 /* 1: O_DIRECT reads; 0: through the page cache */
	int uring;                  /* 1: io_uring; 0: synchronous pread */
	int device;                 /* 1: the slots are the device's memory (a GPU), 0: host memory */
	const char *policy;         /* "lru" or "freq" */
	const char *prefetch;       /* "router", "last" or "off" */
} sg_xc_stats;

/* Bytes of one slot of m's experts (what the planner sizes the pool with), and the count of
 * routed experts (layers x E); 0 when m has no expert stacks the cache can read (*why says). */
uint64_t sg_xc_slot_bytes(const sg_model *m, int64_t *experts, const char **why);

/* Installs a slot cache of `slots` slots on m (m->xsrc): at least one layer's experts, at most
 * all of them. SG_ERR_UNSUPPORTED (naming the reason) for a layout or backend it cannot serve;
 * SG_ERR_NOMEM when the pool cannot be allocated; SG_ERR_IO when a file cannot be opened. The
 * model owns the cache afterwards (sg_model_free releases it). */
sg_status sg_xc_attach(sg_model *m, int64_t slots);

/* Applies spec to a loaded model: off does nothing; a size or percentage installs a cache of that
 * many slots (rounded down, at least one layer's); auto asks the planner (sg_plan_*) for the
 * memory this process may use at n_ctx tokens of context and installs a cache only when the
 * whole model would not fit. *slots_out (may be NULL): the slots installed, 0 for none. */
sg_status sg_xc_apply(sg_model *m, const sg_xc_spec *spec, int n_ctx, int64_t *slots_out);

/* 1 and *out filled when m has a slot cache, else 0. */
int sg_xc_stats_get(const sg_model *m, sg_xc_stats *out);

/* Zeroes the counters (lookups, hits, reads...) of m's cache: a bench measures one phase. */
void sg_xc_stats_reset(sg_model *m);

/* Resizes the cache of m to `slots` (between one layer's experts and the allocated count): the
 * slots past the count are emptied and their memory handed back to the system. Output is
 * unchanged (evicted experts are read again when asked for). Returns the slots in use after. */
int64_t sg_xc_resize(sg_model *m, int64_t slots);

/* One line for --metrics: "experts: 83.1% hit, 12.4 MB read/token, 1536 slots of 2.6 MiB". */
void sg_xc_stats_line(const sg_xc_stats *s, char *buf, size_t n);

#endif
