/* The memory guard of `saragossa serve`: before an allocation that matters (a model load, a
 * prefix-cache block, the KV rows a long prompt will touch) it projects the process footprint
 * plus the allocation against a ceiling, the lowest of
 *   - RETI_SERVE_MEMORY_CAP_BYTES, when set (a static cap on the footprint);
 *   - the host: footprint + MemAvailable - RETI_SERVE_MEMORY_HEADROOM_BYTES (what the process
 *     can grow to while leaving the headroom free for everything else);
 *   - the accelerator, when a GPU backend holds the model: its used + free - headroom.
 * Over the ceiling it calls the evictors in order (prefix-cache blocks first, then idle
 * models) until the projection fits; when nothing is left to evict it refuses, with a message
 * that states the bytes needed and available. So the server answers 503 instead of being
 * killed by the kernel.
 *
 * The footprint is the resident set (RSS from /proc/self), re-read after each eviction (freed
 * memory is handed back to the system first, so the number moves). RETI_SERVE_OOM_GUARD=0
 * turns every check into a yes. */
#ifndef SG_SERVER_MEMGUARD_H
#define SG_SERVER_MEMGUARD_H

#include <stddef.h>
#include <stdint.h>

#include "saragossa.h"

/* What the guard measures; a probe fills it (tests inject their own numbers). */
typedef struct sg_mem_probe {
	uint64_t rss;        /* process footprint */
	uint64_t host_avail; /* MemAvailable; 0 = unknown (no host ceiling) */
	int have_accel;      /* a GPU backend is in use */
	uint64_t accel_free; /* its free bytes */
} sg_mem_probe;

typedef struct sg_memguard {
	int on;               /* RETI_SERVE_OOM_GUARD */
	uint64_t cap;         /* RETI_SERVE_MEMORY_CAP_BYTES, 0 = none */
	uint64_t headroom;    /* RETI_SERVE_MEMORY_HEADROOM_BYTES */
	/* measures now; NULL = this process from /proc (sg_mem_rss, sg_mem_available) */
	void (*probe)(void *user, sg_mem_probe *out);
	void *probe_user;
	/* counters, for /health and the tests */
	uint64_t evicted_blocks, evicted_models, refusals;
} sg_memguard;

/* An evictor frees one unit (a cache block, a model) and returns 1, or 0 when it has nothing
 * left to free. */
typedef struct sg_mem_evictor {
	int (*evict)(void *user);
	void *user;
	uint64_t *counter; /* incremented per unit freed; may be NULL */
} sg_mem_evictor;

/* From the flags registry. An unparsable cap is SG_ERR_INVALID_ARG naming it. */
sg_status sg_memguard_init(sg_memguard *g);

/* Measures now (through g->probe when set). */
void sg_memguard_measure(const sg_memguard *g, sg_mem_probe *p);

/* The ceiling for a probe: the lowest of the three, and which one it is ("RETI_SERVE_MEMORY_CAP_BYTES",
 * "host memory", "accelerator memory"); UINT64_MAX and "none" when no ceiling applies. */
uint64_t sg_memguard_ceiling(const sg_memguard *g, const sg_mem_probe *p, const char **which);

/* Makes room for `need` more bytes for `what` ("model 'x'", "prefix-cache block"): SG_OK when
 * the projection fits (after evicting as needed, evictors tried in order), else SG_ERR_NOMEM
 * with "<what> needs N bytes on top of a footprint of F; the ceiling is C (which): A available"
 * in the last error. */
sg_status sg_memguard_reserve(sg_memguard *g, const char *what, uint64_t need, const sg_mem_evictor *ev, int n_ev);

#endif
