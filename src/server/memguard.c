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

static void probe_self(const sg_memguard *g, sg_mem_probe *p)
{
	memset(p, 0, sizeof *p);
	p->rss = sg_mem_rss();
	p->host_avail = sg_mem_available();
	if (g->accel_probe) g->accel_probe(g->accel_user, p);
}

void sg_memguard_measure(const sg_memguard *g, sg_mem_probe *p)
{
	if (g->probe) {
		memset(p, 0, sizeof *p);
		g->probe(g->probe_user, p);
	} else probe_self(g, p);
}

uint64_t sg_memguard_used(const sg_mem_probe *p, sg_mem_where where)
{
	if (where == SG_MEM_HOST) return p->rss;
	return p->accel_total > p->accel_free ? p->accel_total - p->accel_free : 0;
}

uint64_t sg_memguard_ceiling(const sg_memguard *g, const sg_mem_probe *p, sg_mem_where where, const char **which)
{
	uint64_t best = UINT64_MAX;
	const char *w = "none";
	if (where == SG_MEM_ACCEL) {
		if (p->have_accel) {
			/* device allocations do not show in the RSS: the device's own numbers bound them */
			uint64_t room = p->accel_free > g->headroom ? p->accel_free - g->headroom : 0;
			best = sg_memguard_used(p, SG_MEM_ACCEL) + room;
			w = "accelerator memory less RETI_SERVE_MEMORY_HEADROOM_BYTES";
		}
	} else {
		if (g->cap) {
			best = g->cap;
			w = "RETI_SERVE_MEMORY_CAP_BYTES";
		}
		if (p->host_avail) {
			uint64_t room = p->host_avail > g->headroom ? p->host_avail - g->headroom : 0;
			uint64_t host = p->rss + room;
			if (host < best) best = host, w = "host memory less RETI_SERVE_MEMORY_HEADROOM_BYTES";
		}
	}
	if (which) *which = w;
	return best;
}

static const char *mem_name(sg_mem_where where) { return where == SG_MEM_ACCEL ? "accelerator" : "host"; }

sg_status sg_memguard_reserve(sg_memguard *g, const char *what, uint64_t need, sg_mem_where where, const sg_mem_evictor *ev,
			      int n_ev)
{
	if (!g || !g->on) return SG_OK;
	sg_mem_probe p;
	const char *which = "none";
	unsigned bit = 1u << where;
	for (int i = 0;;) {
		sg_memguard_measure(g, &p);
		uint64_t ceil = sg_memguard_ceiling(g, &p, where, &which), used = sg_memguard_used(&p, where);
		if (ceil == UINT64_MAX) return SG_OK;
		if (used <= ceil && need <= ceil - used) return SG_OK;
		/* an evictor that frees nothing in this memory would only lose work */
		while (i < n_ev && (!((ev[i].frees ? ev[i].frees : SG_MEM_FREES_HOST) & bit) || !ev[i].evict(ev[i].user))) i++;
		if (i >= n_ev) {
			g->refusals++;
			uint64_t avail = ceil > used ? ceil - used : 0;
			return sg_error(SG_ERR_NOMEM,
					"not enough %s memory: %s needs %llu bytes, %llu are available (footprint %llu, ceiling %llu from %s)",
					mem_name(where), what, (unsigned long long)need, (unsigned long long)avail,
					(unsigned long long)used, (unsigned long long)ceil, which);
		}
		if (ev[i].counter) (*ev[i].counter)++;
		/* hand freed heap pages back so the next RSS reading sees them gone */
		if (!g->probe) malloc_trim(0);
	}
}

sg_status sg_memguard_could_fit(sg_memguard *g, const char *what, uint64_t need, sg_mem_where where, uint64_t reclaim)
{
	if (!g || !g->on) return SG_OK;
	sg_mem_probe p;
	const char *which;
	sg_memguard_measure(g, &p);
	uint64_t ceil = sg_memguard_ceiling(g, &p, where, &which), used = sg_memguard_used(&p, where);
	uint64_t floor = used > reclaim ? used - reclaim : 0;
	if (ceil == UINT64_MAX || (floor <= ceil && need <= ceil - floor)) return SG_OK;
	g->refusals++;
	return sg_error(SG_ERR_NOMEM,
			"not enough %s memory: %s needs %llu bytes, %llu are available (footprint %llu bytes, ceiling %llu "
			"from %s; evicting every idle model and cache block would free at most %llu)",
			mem_name(where), what, (unsigned long long)need, (unsigned long long)(ceil > used ? ceil - used : 0),
			(unsigned long long)used, (unsigned long long)ceil, which, (unsigned long long)reclaim);
}
