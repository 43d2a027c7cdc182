/* The memory guard (see memguard.h). */
#include "server/memguard.h"

#include <malloc.h>
#include <string.h>
#include <strings.h>

#include "base/error.h"
#include "base/flags.h"
#include "base/sysinfo.h"

sg_status sg_memguard_init(sg_memguard *g)
{
	memset(g, 0, sizeof *g);
	g->on = sg_flag_bool("RETI_SERVE_OOM_GUARD");
	int64_t h = sg_flag_int("RETI_SERVE_MEMORY_HEADROOM_BYTES");
	g->headroom = h > 0 ? (uint64_t)h : 0;
	const char *cap = sg_flag_str("RETI_SERVE_MEMORY_CAP_BYTES");
	int64_t c = 0;
	if (cap && *cap && strcasecmp(cap, "auto") != 0) {
		if (sg_parse_int(cap, &c) || c < 0)
			return sg_error(SG_ERR_INVALID_ARG,
					"RETI_SERVE_MEMORY_CAP_BYTES='%s' is not a byte count (digits with an optional k/m/g, or auto)", cap);
	}
	g->cap = (uint64_t)c;
	return SG_OK;
}

static void probe_self(sg_mem_probe *p)
{
	memset(p, 0, sizeof *p);
	p->rss = sg_mem_rss();
	p->host_avail = sg_mem_available();
}

void sg_memguard_measure(const sg_memguard *g, sg_mem_probe *p)
{
	if (g->probe) {
		memset(p, 0, sizeof *p);
		g->probe(g->probe_user, p);
	} else probe_self(p);
}

uint64_t sg_memguard_ceiling(const sg_memguard *g, const sg_mem_probe *p, const char **which)
{
	uint64_t best = UINT64_MAX;
	const char *w = "none";
	if (g->cap) {
		best = g->cap;
		w = "RETI_SERVE_MEMORY_CAP_BYTES";
	}
	if (p->host_avail) {
		uint64_t room = p->host_avail > g->headroom ? p->host_avail - g->headroom : 0;
		uint64_t host = p->rss + room;
		if (host < best) best = host, w = "host memory less RETI_SERVE_MEMORY_HEADROOM_BYTES";
	}
	if (p->have_accel) {
		/* device allocations do not show in the RSS: the device's own free bytes bound them */
		uint64_t room = p->accel_free > g->headroom ? p->accel_free - g->headroom : 0;
		uint64_t dev = p->rss + room;
		if (dev < best) best = dev, w = "accelerator memory less RETI_SERVE_MEMORY_HEADROOM_BYTES";
	}
	if (which) *which = w;
	return best;
}

sg_status sg_memguard_reserve(sg_memguard *g, const char *what, uint64_t need, const sg_mem_evictor *ev, int n_ev)
{
	if (!g || !g->on) return SG_OK;
	sg_mem_probe p;
	const char *which = "none";
	for (int i = 0;;) {
		sg_memguard_measure(g, &p);
		uint64_t ceil = sg_memguard_ceiling(g, &p, &which);
		if (ceil != UINT64_MAX && p.rss <= ceil && need <= ceil - p.rss) return SG_OK;
		if (ceil == UINT64_MAX) return SG_OK;
		while (i < n_ev && !ev[i].evict(ev[i].user)) i++;
		if (i >= n_ev) {
			g->refusals++;
			uint64_t avail = ceil > p.rss ? ceil - p.rss : 0;
			return sg_error(SG_ERR_NOMEM,
					"not enough memory: %s needs %llu bytes, %llu are available (footprint %llu, ceiling %llu from %s)",
					what, (unsigned long long)need, (unsigned long long)avail, (unsigned long long)p.rss,
					(unsigned long long)ceil, which);
		}
		if (ev[i].counter) (*ev[i].counter)++;
		/* hand freed heap pages back so the next RSS reading sees them gone */
		if (!g->probe) malloc_trim(0);
	}
}
