/* The memory guard of `saragossa serve`: before an allocation that matters (a model load, a
 * prefix-cache block, the KV rows a long prompt will touch) it projects the process footprint
 * plus the allocation against a ceiling, the lowest of
 *   - RETI_SERVE_MEMORY_CAP_BYTES, when set (a static cap on the footprint);
 *   - the host: footprint + MemAvailable - RETI_SERVE_MEMORY_HEADROOM_BYTES (what the process
 *     can grow to while leaving the headroom free for everything else);
 * for an allocation in host memory (a model's weights on the CPU, KV rows of a CPU model, every
 * prefix-cache block: block snapshots live in host memory whatever the backend), and
 *   - the accelerator: its used + free - headroom, for an allocation in device memory (a
 *     model's weights uploaded to a GPU), when a GPU backend is in use.
 * The static cap bounds the host footprint only: device memory does not show in the RSS, so
 * an accelerator allocation is projected against the device's own numbers (bytes in use by
 * everyone on the device + the allocation <= total - headroom).
 * Over the ceiling it calls the evictors in order (prefix-cache blocks first, then idle
 * models), skipping those that free nothing in the memory concerned (blocks never free device
 * memory), until the projection fits; when nothing is left to evict it refuses, with a message
 * that states the bytes needed and available. So the server answers 503 instead of being
 * killed by the kernel (or failing a device allocation half-way through a load).
 *
 * The host footprint is the resident set (RSS from /proc/self), re-read after each eviction
 * (freed memory is handed back to the system first, so the number moves); the device's is
 * read from its backend (the mem_info op). RETI_SERVE_OOM_GUARD=0 turns every check into a
 * yes. */
#ifndef SG_SERVER_MEMGUARD_H
#define SG_SERVER_MEMGUARD_H

#include <stddef.h>
#include <stdint.h>

#include "saragossa.h"

/* What the guard measures; a probe fills it (tests inject their own numbers). */
typedef struct sg_mem_probe {
	uint64_t rss;        /* process footprint */
	uint64_t host_avail; /* MemAvailable; 0 = unknown (no host ceiling) */
	int have_accel;      /* a GPU backend is in use and answered */
	uint64_t accel_free; /* its free bytes */
	uint64_t accel_total; /* its total bytes; 0 = unknown (then used counts as 0) */
} sg_mem_probe;

/* Which memory an allocation (or an eviction) concerns. */
typedef enum sg_mem_where {
	SG_MEM_HOST = 0,  /* the process's own memory (RSS) */
	SG_MEM_ACCEL = 1, /* the accelerator's device memory */
} sg_mem_where;
#define SG_MEM_FREES_HOST (1u << SG_MEM_HOST)
#define SG_MEM_FREES_ACCEL (1u << SG_MEM_ACCEL)

typedef struct sg_memguard {
	int on;               /* RETI_SERVE_OOM_GUARD */
	uint64_t cap;         /* RETI_SERVE_MEMORY_CAP_BYTES, 0 = none */
	uint64_t headroom;    /* RETI_SERVE_MEMORY_HEADROOM_BYTES */
	/* measures now; NULL = this process from /proc (sg_mem_rss, sg_mem_available), then the
	 * accelerator through accel_probe */
	void (*probe)(void *user, sg_mem_probe *out);
	void *probe_user;
	/* with the default probe: fills have_accel, accel_free and accel_total when a GPU backend
	 * is in use (the pool asks its models' backends); NULL = no accelerator */
	void (*accel_probe)(void *user, sg_mem_probe *out);
	void *accel_user;
	/* counters, for /health and the tests */
	uint64_t evicted_blocks, evicted_models, refusals;
} sg_memguard;

/* An evictor frees one unit (a cache block, a model) and returns 1, or 0 when it has nothing
 * left to free. */
typedef struct sg_mem_evictor {
	int (*evict)(void *user);
	void *user;
	uint64_t *counter; /* incremented per unit freed; may be NULL */
	unsigned frees;    /* SG_MEM_FREES_* of the memories a unit frees; 0 = host only */
} sg_mem_evictor;

/* From the flags registry. An unparsable cap is SG_ERR_INVALID_ARG naming it. */
sg_status sg_memguard_init(sg_memguard *g);

/* Measures now (through g->probe when set). */
void sg_memguard_measure(const sg_memguard *g, sg_mem_probe *p);

/* The footprint an allocation in `where` adds to: the RSS for the host, the device's bytes in
 * use (total - free) for the accelerator. */
uint64_t sg_memguard_used(const sg_mem_probe *p, sg_mem_where where);

/* The ceiling on that footprint for a probe, and which bound sets it: for the host the lower of
 * "RETI_SERVE_MEMORY_CAP_BYTES" and "host memory less ...", for the accelerator "accelerator
 * memory less ..."; UINT64_MAX and "none" when no ceiling applies (no accelerator answered, or
 * nothing known of the host and no cap). */
uint64_t sg_memguard_ceiling(const sg_memguard *g, const sg_mem_probe *p, sg_mem_where where, const char **which);

/* Makes room for `need` more bytes in `where` for `what` ("model 'x'", "prefix-cache block"):
 * SG_OK when the projection fits (after evicting as needed, evictors that free that memory
 * tried in order), else SG_ERR_NOMEM with "not enough <host|accelerator> memory: <what> needs N
 * bytes, A are available (footprint F, ceiling C from which)" in the last error. */
sg_status sg_memguard_reserve(sg_memguard *g, const char *what, uint64_t need, sg_mem_where where, const sg_mem_evictor *ev,
			      int n_ev);

/* Whether `need` bytes in `where` could fit even once `reclaim` bytes of that memory (every
 * idle model and cache block) were freed: SG_OK, else SG_ERR_NOMEM with the numbers (counted
 * as a refusal). Evicts nothing: a load that cannot fit is refused before anything is lost. */
sg_status sg_memguard_could_fit(sg_memguard *g, const char *what, uint64_t need, sg_mem_where where, uint64_t reclaim);

#endif
