/*
 * The memory guard with injected measurements: a host allocation's ceiling is the lower of the
 * static cap and the host (footprint + available - headroom), an accelerator allocation's is the
 * device's (used + free - headroom); over it, evictors that free that memory run in order (cache
 * blocks before models) until the projection fits, and a refusal names the numbers.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "server/memguard.h"

typedef struct fake {
	sg_mem_probe p;
	int blocks, models;   /* units left to evict */
	uint64_t block_bytes, model_bytes;
	uint64_t model_accel_bytes; /* device memory a model's eviction frees */
	char order[16];       /* 'b' / 'm' per eviction, in order */
	int n_order;
} fake;

static void probe(void *u, sg_mem_probe *out) { *out = ((fake *)u)->p; }

static int evict_block(void *u)
{
	fake *f = u;
	if (!f->blocks) return 0;
	f->blocks--;
	f->p.rss -= f->block_bytes;
	f->order[f->n_order++] = 'b';
	return 1;
}

static int evict_model(void *u)
{
	fake *f = u;
	if (!f->models) return 0;
	f->models--;
	f->p.rss -= f->model_bytes;
	f->p.accel_free += f->model_accel_bytes;
	f->order[f->n_order++] = 'm';
	return 1;
}

static sg_memguard guard(fake *f, uint64_t cap, uint64_t headroom)
{
	sg_memguard g;
	memset(&g, 0, sizeof g);
	g.on = 1;
	g.cap = cap;
	g.headroom = headroom;
	g.probe = probe;
	g.probe_user = f;
	return g;
}

Test(memguard, host_ceiling_is_the_lower_of_cap_and_host_and_ignores_the_accelerator)
{
	fake f = {.p = {.rss = 1000, .host_avail = 5000}};
	sg_memguard g = guard(&f, 0, 2000);
	const char *w;
	cr_assert_eq(sg_memguard_ceiling(&g, &f.p, SG_MEM_HOST, &w), 4000); /* 1000 + 5000 - 2000 */
	cr_assert_neq(strstr(w, "host"), NULL);
	g.cap = 3000;
	cr_assert_eq(sg_memguard_ceiling(&g, &f.p, SG_MEM_HOST, &w), 3000);
	cr_assert_str_eq(w, "RETI_SERVE_MEMORY_CAP_BYTES");
	/* a nearly full GPU bounds device allocations, not host ones */
	f.p.have_accel = 1;
	f.p.accel_free = 2500;
	f.p.accel_total = 10000;
	cr_assert_eq(sg_memguard_ceiling(&g, &f.p, SG_MEM_HOST, &w), 3000);
	cr_assert_eq(sg_memguard_ceiling(&g, &f.p, SG_MEM_ACCEL, &w), 7500 + 500); /* used + free - headroom */
	cr_assert_neq(strstr(w, "accelerator"), NULL);
	cr_assert_eq(sg_memguard_used(&f.p, SG_MEM_ACCEL), 7500);
	f.p.host_avail = 100; /* less than the headroom: no room at all */
	cr_assert_eq(sg_memguard_ceiling(&g, &f.p, SG_MEM_HOST, &w), 1000);
	f.p.have_accel = 0; /* no accelerator answered: nothing bounds device allocations */
	cr_assert_eq(sg_memguard_ceiling(&g, &f.p, SG_MEM_ACCEL, &w), UINT64_MAX);
	cr_assert_str_eq(w, "none");
}

Test(memguard, evicts_cache_blocks_before_models_and_only_as_needed)
{
	fake f = {.p = {.rss = 1000}, .blocks = 5, .models = 2, .block_bytes = 100, .model_bytes = 400};
	sg_memguard g = guard(&f, 1500, 0);
	sg_mem_evictor ev[2] = {{evict_block, &f, &g.evicted_blocks, SG_MEM_FREES_HOST},
				{evict_model, &f, &g.evicted_models, SG_MEM_FREES_HOST}};
	cr_assert_eq(sg_memguard_reserve(&g, "a block", 400, SG_MEM_HOST, ev, 2), SG_OK, "fits: nothing evicted");
	cr_assert_eq(f.n_order, 0);
	cr_assert_eq(sg_memguard_reserve(&g, "a block", 700, SG_MEM_HOST, ev, 2), SG_OK, "%s", sg_last_error());
	cr_assert_str_eq(f.order, "bb");
	cr_assert_eq(g.evicted_blocks, 2);
	/* 800 + 1100 > 1500: the three blocks left go, then one model */
	cr_assert_eq(sg_memguard_reserve(&g, "model 'x'", 1100, SG_MEM_HOST, ev, 2), SG_OK, "%s", sg_last_error());
	cr_assert_str_eq(f.order, "bbbbbm");
	cr_assert_eq(g.evicted_models, 1);
}

Test(memguard, refuses_with_needed_and_available_when_nothing_is_left)
{
	fake f = {.p = {.rss = 1000}, .blocks = 1, .block_bytes = 100};
	sg_memguard g = guard(&f, 1500, 0);
	sg_mem_evictor ev[1] = {{evict_block, &f, NULL, SG_MEM_FREES_HOST}};
	cr_assert_eq(sg_memguard_reserve(&g, "model 'big'", 5000, SG_MEM_HOST, ev, 1), SG_ERR_NOMEM);
	const char *e = sg_last_error();
	cr_assert_neq(strstr(e, "not enough host memory: model 'big' needs 5000 bytes, 600 are available"), NULL, "%s", e);
	cr_assert_neq(strstr(e, "RETI_SERVE_MEMORY_CAP_BYTES"), NULL, "%s", e);
	cr_assert_eq(g.refusals, 1);
	g.on = 0; /* RETI_SERVE_OOM_GUARD=0 */
	cr_assert_eq(sg_memguard_reserve(&g, "model 'big'", 5000, SG_MEM_HOST, ev, 1), SG_OK);
}

/* A device-resident model (weights uploaded to the GPU) whose load exceeds the accelerator's
 * free memory less the headroom is refused, with the device's numbers, although the host has
 * plenty; the cache blocks (host memory) are not thrown away for it, an idle GPU model is. */
Test(memguard, gpu_model_load_is_refused_by_the_accelerator_while_the_host_has_room)
{
	const uint64_t G = 1ull << 30;
	fake f = {.p = {.rss = 2 * G, .host_avail = 100 * G, .have_accel = 1, .accel_free = 6 * G, .accel_total = 80 * G},
		  .blocks = 3, .block_bytes = 100};
	sg_memguard g = guard(&f, 0, 2 * G);
	sg_mem_evictor ev[2] = {{evict_block, &f, &g.evicted_blocks, SG_MEM_FREES_HOST},
				{evict_model, &f, &g.evicted_models, SG_MEM_FREES_HOST | SG_MEM_FREES_ACCEL}};
	/* the same 5 GiB fit in host memory */
	cr_assert_eq(sg_memguard_reserve(&g, "model 'cpu'", 5 * G, SG_MEM_HOST, ev, 2), SG_OK, "%s", sg_last_error());
	cr_assert_eq(sg_memguard_could_fit(&g, "model 'gpu'", 5 * G, SG_MEM_ACCEL, 0), SG_ERR_NOMEM);
	const char *e = sg_last_error();
	cr_assert_neq(strstr(e, "not enough accelerator memory: model 'gpu' needs 5368709120 bytes, 4294967296 are available"),
		      NULL, "%s", e);
	cr_assert_neq(strstr(e, "footprint 79456894976"), NULL, "device bytes in use: %s", e);
	cr_assert_neq(strstr(e, "accelerator memory less RETI_SERVE_MEMORY_HEADROOM_BYTES"), NULL, "%s", e);
	cr_assert_eq(sg_memguard_reserve(&g, "model 'gpu'", 5 * G, SG_MEM_ACCEL, ev, 2), SG_ERR_NOMEM);
	e = sg_last_error();
	cr_assert_neq(strstr(e, "not enough accelerator memory: model 'gpu' needs 5368709120 bytes, 4294967296 are available"),
		      NULL, "%s", e);
	cr_assert_eq(f.blocks, 3, "host-memory cache blocks were kept: dropping them frees no device memory");
	cr_assert_eq(g.refusals, 2);
	/* an idle GPU model of 2 GiB would make room: it is evicted, the blocks still are not */
	f.models = 1;
	f.model_accel_bytes = 2 * G;
	cr_assert_eq(sg_memguard_reserve(&g, "model 'gpu'", 5 * G, SG_MEM_ACCEL, ev, 2), SG_OK, "%s", sg_last_error());
	cr_assert_eq(f.models, 0);
	cr_assert_eq(g.evicted_models, 1);
	cr_assert_eq(f.blocks, 3);
}
