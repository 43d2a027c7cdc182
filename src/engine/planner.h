/*
 * The memory planner: how a model is laid out on a machine of a given size. The dense trunk
 * (everything but the routed experts) and the KV cache must be resident; the routed experts are
 * resident too when everything fits, else they go through the expert slot cache
 * (expert_cache.h), whose pool takes what is left under the limit.
 *
 * The limit is the lowest of three (the reference planner's): a target cap
 * (SARAGOSSA_PLAN_TARGET, none by default), 70% of the memory available, and the device's
 * working-set limit minus 2 GiB (the CPU: its memory, or the cgroup's memory.max; a GPU: its
 * memory). `saragossa doctor --sim-ram N [--sim-vram N]` prints the plan for a machine of that
 * size; `--expert-cache auto` applies it to this one.
 */
#ifndef SG_ENGINE_PLANNER_H
#define SG_ENGINE_PLANNER_H

#include <stddef.h>
#include <stdint.h>

#include "models/model.h"
#include "saragossa.h"

#define SG_PLAN_DEVICE_MARGIN (2ull << 30) /* under the device's working-set limit */
#define SG_PLAN_AVAILABLE_SHARE 0.70        /* of the memory available */
#define SG_PLAN_OVERHEAD (256ull << 20)     /* activations, scratch, tables: assumed */

/* What a model needs. */
typedef struct sg_plan_input {
	uint64_t trunk_bytes;   /* weights outside the routed experts */
	uint64_t expert_bytes;  /* the routed experts, all layers (0: a dense model) */
	uint64_t kv_bytes;      /* KV cache at the context */
	uint64_t slot_bytes;    /* one slot of the expert cache (0: the cache cannot serve the model) */
	int64_t experts;        /* routed experts, all layers */
	int n_expert, n_used;   /* per layer, and routed per token */
	int n_moe_layers;
	int n_ctx;
	double hit_rate;        /* measured or assumed hit rate in [0, 1]; < 0: assume slots / experts */
} sg_plan_input;

/* What the machine has (bytes; 0 = unknown / none). */
typedef struct sg_plan_machine {
	uint64_t ram_total, ram_available;
	uint64_t cgroup_limit;  /* memory.max of this process's cgroup (v2), 0 = none */
	uint64_t vram;          /* a GPU's memory: the plan is then for it */
	uint64_t target;        /* the target cap, 0 = none */
	int simulated;          /* 1: --sim-ram / --sim-vram */
} sg_plan_machine;

typedef struct sg_plan {
	uint64_t limit_bytes;           /* the lowest of the limits below that apply */
	uint64_t limit_target, limit_available, limit_device; /* 0 = does not apply */
	uint64_t model_bytes;           /* trunk + experts + KV + overhead: the whole model resident */
	uint64_t resident_bytes;        /* trunk + KV + overhead */
	int use_cache;                  /* 1: the experts go through the slot cache */
	int64_t slots;                  /* slots of the pool (use_cache), else the experts */
	uint64_t pool_bytes;            /* slots x slot_bytes */
	int64_t headroom;               /* limit - (resident + pool), bytes */
	double hit_rate;                /* the rate the read figure assumes */
	int hit_assumed;                /* 1: slots / experts (uniform routing), not measured */
	double read_bytes_per_token;    /* expected disk reads per token */
	int ok;                         /* 1 when sg_plan_make succeeded */
} sg_plan;

/* Reads this machine (memory, cgroup limit, SARAGOSSA_PLAN_TARGET). */
void sg_plan_machine_detect(sg_plan_machine *out);
/* A machine of ram bytes (and a GPU of vram bytes, 0 = none), all of it available. */
void sg_plan_machine_sim(uint64_t ram, uint64_t vram, sg_plan_machine *out);

/* Fills in from a loaded model at n_ctx tokens (0: the session default) with f32 KV (f16 when
 * the model runs on a device with its own memory). slot_bytes stays 0: the caller sets it from
 * the expert cache (sg_xc_slot_bytes), which sits above the planner. */
void sg_plan_input_from_model(const sg_model *m, int n_ctx, sg_plan_input *out);

/* The plan; SG_ERR_NOMEM when even the trunk, KV and overhead exceed the limit, or the pool
 * cannot hold one layer's experts (the message names the numbers). */
sg_status sg_plan_make(const sg_plan_input *in, const sg_plan_machine *mc, sg_plan *out);

/* Prints the plan (several lines, "  " indented) to f. */
void sg_plan_print(const sg_plan_input *in, const sg_plan_machine *mc, const sg_plan *p, void *f);

#endif
