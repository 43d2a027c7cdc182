/*
 * The memory planner (see planner.h).
 */
#include "engine/planner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/flags.h"
#include "base/sysinfo.h"

#define GIB (1024.0 * 1024.0 * 1024.0)
#define DEFAULT_CTX 4096 /* the session's default context (session.c) */

/* A limit read from a cgroup file: a byte count, or 0 for "max" / none / past 2^60 (v1's
 * unlimited is a huge page-rounded number). */
static uint64_t read_limit(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f) return 0;
	char v[64] = "";
	uint64_t lim = 0;
	if (fgets(v, sizeof v, f) && v[0] >= '0' && v[0] <= '9') lim = strtoull(v, NULL, 10);
	fclose(f);
	return lim >= (1ull << 60) ? 0 : lim;
}

/* The memory limit of this process's cgroup: v2 memory.max, else v1 memory.limit_in_bytes (at
 * the process's path, else at the mount's root, which a container sees as its own); 0 = none. */
static uint64_t cgroup_limit(void)
{
	FILE *f = fopen("/proc/self/cgroup", "r");
	if (!f) return 0;
	char line[512], v2[600] = "", v1[600] = "";
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = 0;
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2) continue;
		*c2 = 0;
		if (!strcmp(c1 + 1, "")) snprintf(v2, sizeof v2, "/sys/fs/cgroup%s/memory.max", c2 + 1);
		else if (strstr(c1 + 1, "memory")) snprintf(v1, sizeof v1, "/sys/fs/cgroup/memory%s/memory.limit_in_bytes", c2 + 1);
	}
	fclose(f);
	uint64_t lim = v2[0] ? read_limit(v2) : 0;
	if (!lim && v1[0]) lim = read_limit(v1);
	if (!lim && v1[0]) lim = read_limit("/sys/fs/cgroup/memory/memory.limit_in_bytes");
	return lim;
}

void sg_plan_machine_detect(sg_plan_machine *out)
{
	memset(out, 0, sizeof *out);
	out->ram_total = sg_mem_total();
	out->ram_available = sg_mem_available();
	out->cgroup_limit = cgroup_limit();
	int64_t t = 0;
	const char *s = sg_flag_str("SARAGOSSA_PLAN_TARGET");
	if (s && *s && strcmp(s, "auto") && !sg_parse_int(s, &t) && t > 0) out->target = (uint64_t)t;
}

void sg_plan_machine_sim(uint64_t ram, uint64_t vram, sg_plan_machine *out)
{
	memset(out, 0, sizeof *out);
	out->ram_total = out->ram_available = ram;
	out->vram = vram;
	out->simulated = 1;
	int64_t t = 0;
	const char *s = sg_flag_str("SARAGOSSA_PLAN_TARGET");
	if (s && *s && strcmp(s, "auto") && !sg_parse_int(s, &t) && t > 0) out->target = (uint64_t)t;
}

void sg_plan_input_from_model(const sg_model *m, int n_ctx, sg_plan_input *out)
{
	memset(out, 0, sizeof *out);
	const sg_model_desc *d = &m->desc;
	if (n_ctx <= 0) n_ctx = d->max_ctx > 0 && d->max_ctx < DEFAULT_CTX ? d->max_ctx : DEFAULT_CTX;
	out->n_ctx = n_ctx;
	out->hit_rate = -1;
	uint64_t files = 0;
	for (int i = 0; i < m->w->n_files; i++) files += m->w->files[i].size;
	sg_backend_caps caps;
	m->be->ops->caps(m->be, &caps);
	int kvb = caps.kv_f16 ? 2 : 4;
	for (int li = 0; li < d->n_layer; li++) {
		const sg_layer_desc *l = &d->layers[li];
		if (l->kind != SG_LAYER_LINEAR_ATTN && l->kv_source == li) {
			int ctx = l->sliding_window > 0 && l->sliding_window < n_ctx ? l->sliding_window : n_ctx;
			out->kv_bytes += 2ull * (uint64_t)ctx * (uint64_t)l->n_kv_head * (uint64_t)l->head_dim * (uint64_t)kvb;
		}
		if (!l->moe) continue;
		out->n_moe_layers++;
		const sg_layer_weights *lw = &m->layers[li];
		const sg_btensor *t[3] = {&lw->gate_exps, &lw->up_exps, &lw->down_exps};
		for (int p = 0; p < 3; p++)
			if (t[p]->row_bytes) out->expert_bytes += (uint64_t)sg_btensor_rows(t[p]) * t[p]->row_bytes;
		if (m->hy.layers && m->hy.layers[li].gate_up_exps.data)
			out->expert_bytes += (uint64_t)sg_btensor_rows(&m->hy.layers[li].gate_up_exps) * m->hy.layers[li].gate_up_exps.row_bytes;
	}
	out->trunk_bytes = files > out->expert_bytes ? files - out->expert_bytes : 0;
	out->n_expert = d->n_expert;
	out->n_used = d->n_expert_used;
	out->experts = (int64_t)d->n_expert * out->n_moe_layers;
}

sg_status sg_plan_make(const sg_plan_input *in, const sg_plan_machine *mc, sg_plan *p)
{
	memset(p, 0, sizeof *p);
	p->limit_target = mc->target;
	p->limit_available = (uint64_t)((double)mc->ram_available * SG_PLAN_AVAILABLE_SHARE);
	if (mc->cgroup_limit && (uint64_t)((double)mc->cgroup_limit * SG_PLAN_AVAILABLE_SHARE) < p->limit_available)
		p->limit_available = (uint64_t)((double)mc->cgroup_limit * SG_PLAN_AVAILABLE_SHARE);
	uint64_t dev = mc->vram ? mc->vram : mc->ram_total;
	if (mc->cgroup_limit && mc->cgroup_limit < dev && !mc->vram) dev = mc->cgroup_limit;
	p->limit_device = dev > SG_PLAN_DEVICE_MARGIN ? dev - SG_PLAN_DEVICE_MARGIN : 0;
	uint64_t lim = UINT64_MAX;
	if (p->limit_target) lim = p->limit_target;
	if (mc->ram_available && !mc->vram && p->limit_available < lim) lim = p->limit_available;
	if (dev && p->limit_device < lim) lim = p->limit_device;
	p->resident_bytes = in->trunk_bytes + in->kv_bytes + SG_PLAN_OVERHEAD;
	p->model_bytes = p->resident_bytes + in->expert_bytes;
	if (lim == UINT64_MAX) return sg_error(SG_ERR_UNSUPPORTED, "planner: the machine's memory is unknown");
	p->limit_bytes = lim;
	if (p->resident_bytes > lim)
		return sg_error(SG_ERR_NOMEM,
				"planner: the model's trunk (%.2f GiB) + KV at %d tokens (%.2f GiB) + %.2f GiB of working memory = %.2f GiB "
				"does not fit the limit of %.2f GiB",
				in->trunk_bytes / GIB, in->n_ctx, in->kv_bytes / GIB, SG_PLAN_OVERHEAD / GIB, p->resident_bytes / GIB, lim / GIB);
	if (p->model_bytes <= lim || !in->expert_bytes) {
		p->slots = in->experts;
		p->headroom = (int64_t)lim - (int64_t)p->model_bytes;
		p->hit_rate = 1;
		p->ok = 1;
		return SG_OK;
	}
	if (!in->slot_bytes)
		return sg_error(SG_ERR_NOMEM,
				"planner: the model (%.2f GiB) does not fit the limit of %.2f GiB, and its experts cannot go through the slot cache",
				p->model_bytes / GIB, lim / GIB);
	p->use_cache = 1;
	p->slots = (int64_t)((lim - p->resident_bytes) / in->slot_bytes);
	if (p->slots > in->experts) p->slots = in->experts;
	if (p->slots < in->n_expert)
		return sg_error(SG_ERR_NOMEM,
				"planner: after the trunk, KV and working memory (%.2f GiB) the limit of %.2f GiB leaves %.2f GiB: %lld slots of %.2f MiB, "
				"fewer than one layer's %d experts (%.2f GiB)",
				p->resident_bytes / GIB, lim / GIB, (lim - p->resident_bytes) / GIB, (long long)p->slots, in->slot_bytes / 1048576.0,
				in->n_expert, (double)in->n_expert * in->slot_bytes / GIB);
	p->pool_bytes = (uint64_t)p->slots * in->slot_bytes;
	p->headroom = (int64_t)lim - (int64_t)(p->resident_bytes + p->pool_bytes);
	p->hit_assumed = in->hit_rate < 0;
	p->hit_rate = p->hit_assumed ? (double)p->slots / (double)in->experts : in->hit_rate;
	double expert_file_bytes = in->experts ? (double)in->expert_bytes / (double)in->experts : 0;
	p->read_bytes_per_token = (1.0 - p->hit_rate) * in->n_used * in->n_moe_layers * expert_file_bytes;
	p->ok = 1;
	return SG_OK;
}

void sg_plan_print(const sg_plan_input *in, const sg_plan_machine *mc, const sg_plan *p, void *fp)
{
	FILE *f = fp;
	fprintf(f, "  machine: %s%.2f GiB RAM (%.2f GiB available)", mc->simulated ? "simulated, " : "", mc->ram_total / GIB,
		mc->ram_available / GIB);
	if (mc->cgroup_limit) fprintf(f, ", cgroup memory.max %.2f GiB", mc->cgroup_limit / GIB);
	if (mc->vram) fprintf(f, ", GPU %.2f GiB", mc->vram / GIB);
	fprintf(f, "\n  limits: target %s", p->limit_target ? "" : "none");
	if (p->limit_target) fprintf(f, "%.2f GiB", p->limit_target / GIB);
	fprintf(f, ", 70%% of available %.2f GiB%s, device working set - 2 GiB %.2f GiB -> %.2f GiB\n", p->limit_available / GIB,
		mc->vram ? " (host; the plan is for the GPU)" : "", p->limit_device / GIB, p->limit_bytes / GIB);
	if (!in->trunk_bytes && !in->expert_bytes) return; /* no model */
	fprintf(f, "  trunk: %.2f GiB; routed experts: %.2f GiB (%lld experts, %d of %d per layer per token, %d MoE layers)\n",
		in->trunk_bytes / GIB, in->expert_bytes / GIB, (long long)in->experts, in->n_used, in->n_expert, in->n_moe_layers);
	fprintf(f, "  KV at %d tokens: %.2f GiB; working memory (assumed): %.2f GiB\n", in->n_ctx, in->kv_bytes / GIB,
		SG_PLAN_OVERHEAD / GIB);
	if (!p->ok) {
		fprintf(f, "  plan: none (the model does not fit: see the error)\n");
		return;
	}
	if (!p->use_cache) {
		fprintf(f, "  plan: everything resident (%.2f GiB), headroom %.2f GiB; --expert-cache auto stays off\n", p->model_bytes / GIB,
			(double)p->headroom / GIB);
		return;
	}
	fprintf(f, "  plan: expert slot cache of %lld slots x %.2f MiB = %.2f GiB (%.1f%% of the experts), headroom %.2f GiB\n",
		(long long)p->slots, in->slot_bytes / 1048576.0, p->pool_bytes / GIB, 100.0 * (double)p->slots / (double)in->experts,
		(double)p->headroom / GIB);
	fprintf(f, "  expected disk reads: %.1f MB per token at a %.1f%% hit rate (%s)\n", p->read_bytes_per_token / 1e6,
		100.0 * p->hit_rate, p->hit_assumed ? "assumed: the cached share of the experts, as under uniform routing" : "measured");
}
