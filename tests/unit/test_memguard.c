/*
 * The memory guard with injected measurements: the ceiling is the lowest of the static cap, the
 * host (footprint + available - headroom) and the accelerator; over it, evictors run in order
 * (cache blocks before models) until the projection fits, and a refusal names the numbers.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "server/memguard.h"

typedef struct fake {
	sg_mem_probe p;
	int blocks, models;   /* units left to evict */
	uint64_t block_bytes, model_bytes;
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

Test(memguard, ceiling_is_the_lowest_of_cap_host_and_accelerator)
{
	fake f = {.p = {.rss = 1000, .host_avail = 5000}};
	sg_memguard g = guard(&f, 0, 2000);
	const char *w;
	cr_assert_eq(sg_memguard_ceiling(&g, &f.p, &w), 4000); /* 1000 + 5000 - 2000 */
	cr_assert_neq(strstr(w, "host"), NULL);
	g.cap = 3000;
	cr_assert_eq(sg_memguard_ceiling(&g, &f.p, &w), 3000);
	cr_assert_str_eq(w, "RETI_SERVE_MEMORY_CAP_BYTES");
	f.p.have_accel = 1;
	f.p.accel_free = 2500;
	cr_assert_eq(sg_memguard_ceiling(&g, &f.p, &w), 1500); /* 1000 + 2500 - 2000 */
	cr_assert_neq(strstr(w, "accelerator"), NULL);
	f.p.host_avail = 100; /* less than the headroom: no room at all */
	f.p.have_accel = 0;
	cr_assert_eq(sg_memguard_ceiling(&g, &f.p, &w), 1000);
}

Test(memguard, evicts_cache_blocks_before_models_and_only_as_needed)
{
	fake f = {.p = {.rss = 1000}, .blocks = 5, .models = 2, .block_bytes = 100, .model_bytes = 400};
	sg_memguard g = guard(&f, 1500, 0);
	sg_mem_evictor ev[2] = {{evict_block, &f, &g.evicted_blocks}, {evict_model, &f, &g.evicted_models}};
	cr_assert_eq(sg_memguard_reserve(&g, "a block", 400, ev, 2), SG_OK, "fits: nothing evicted");
	cr_assert_eq(f.n_order, 0);
	cr_assert_eq(sg_memguard_reserve(&g, "a block", 700, ev, 2), SG_OK, "%s", sg_last_error());
	cr_assert_str_eq(f.order, "bb");
	cr_assert_eq(g.evicted_blocks, 2);
	/* 800 + 1100 > 1500: the three blocks left go, then one model */
	cr_assert_eq(sg_memguard_reserve(&g, "model 'x'", 1100, ev, 2), SG_OK, "%s", sg_last_error());
	cr_assert_str_eq(f.order, "bbbbbm");
	cr_assert_eq(g.evicted_models, 1);
}

Test(memguard, refuses_with_needed_and_available_when_nothing_is_left)
{
	fake f = {.p = {.rss = 1000}, .blocks = 1, .block_bytes = 100};
	sg_memguard g = guard(&f, 1500, 0);
	sg_mem_evictor ev[1] = {{evict_block, &f, NULL}};
	cr_assert_eq(sg_memguard_reserve(&g, "model 'big'", 5000, ev, 1), SG_ERR_NOMEM);
	const char *e = sg_last_error();
	cr_assert_neq(strstr(e, "model 'big' needs 5000 bytes, 600 are available"), NULL, "%s", e);
	cr_assert_neq(strstr(e, "RETI_SERVE_MEMORY_CAP_BYTES"), NULL, "%s", e);
	cr_assert_eq(g.refusals, 1);
	g.on = 0; /* RETI_SERVE_OOM_GUARD=0 */
	cr_assert_eq(sg_memguard_reserve(&g, "model 'big'", 5000, ev, 1), SG_OK);
}
