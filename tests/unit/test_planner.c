/*
 * The memory planner against plans computed by hand: a Qwen3-30B-A3B-like model (1 GiB trunk,
 * 16 GiB of routed experts in 6144 experts of 128 per layer, 8 per token, 48 layers, KV 0.5
 * GiB, slots of 3 MiB) on machines of several sizes; the limit is the lowest of the target cap,
 * 70% of the memory available (or of the cgroup's limit) and the device minus 2 GiB.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "base/error.h"
#include "engine/planner.h"

#define GIB (1ull << 30)
#define MIB (1ull << 20)

static sg_plan_input model(void)
{
	sg_plan_input in = {
		.trunk_bytes = GIB, .expert_bytes = 16 * GIB, .kv_bytes = GIB / 2, .slot_bytes = 3 * MIB,
		.experts = 6144, .n_expert = 128, .n_used = 8, .n_moe_layers = 48, .n_ctx = 4096, .hit_rate = -1,
	};
	return in;
}

Test(planner, eight_gib_machine_gets_the_hand_computed_pool)
{
	sg_plan_input in = model();
	sg_plan_machine mc;
	sg_plan_machine_sim(8 * GIB, 0, &mc);
	sg_plan p;
	cr_assert_eq(sg_plan_make(&in, &mc, &p), SG_OK, "%s", sg_last_error());
	/* 70% of 8 GiB = 6012954214 < 8 - 2 GiB; resident = 1 + 0.5 GiB + 256 MiB = 1879048192;
	 * (6012954214 - 1879048192) / 3 MiB = 1314 slots, 419430 bytes over */
	cr_assert_eq(p.limit_available, 6012954214ull);
	cr_assert_eq(p.limit_device, 6 * GIB);
	cr_assert_eq(p.limit_target, 0);
	cr_assert_eq(p.limit_bytes, 6012954214ull);
	cr_assert_eq(p.resident_bytes, 1879048192ull);
	cr_assert(p.use_cache);
	cr_assert_eq(p.slots, 1314);
	cr_assert_eq(p.pool_bytes, 4133486592ull);
	cr_assert_eq(p.headroom, 419430);
	cr_assert(p.hit_assumed);
	cr_assert_float_eq(p.hit_rate, 1314.0 / 6144.0, 1e-12);
	/* (1 - 1314/6144) x 8 x 48 x 16 GiB / 6144 */
	cr_assert_float_eq(p.read_bytes_per_token, 844103680.0, 1.0);
}

Test(planner, a_measured_hit_rate_sets_the_reads)
{
	sg_plan_input in = model();
	in.hit_rate = 0.75;
	sg_plan_machine mc;
	sg_plan_machine_sim(8 * GIB, 0, &mc);
	sg_plan p;
	cr_assert_eq(sg_plan_make(&in, &mc, &p), SG_OK);
	cr_assert(!p.hit_assumed);
	cr_assert_float_eq(p.read_bytes_per_token, 0.25 * 8 * 48 * (16.0 * GIB / 6144), 1.0);
}

Test(planner, a_large_machine_keeps_everything_resident)
{
	sg_plan_input in = model();
	sg_plan_machine mc;
	sg_plan_machine_sim(48 * GIB, 0, &mc);
	sg_plan p;
	cr_assert_eq(sg_plan_make(&in, &mc, &p), SG_OK);
	cr_assert(!p.use_cache);
	cr_assert_eq(p.slots, 6144);
	cr_assert_eq(p.model_bytes, 16 * GIB + 1879048192ull);
	/* 70% of 48 GiB - 17.75 GiB */
	cr_assert_eq(p.headroom, 17018807910ll);
	cr_assert_float_eq(p.read_bytes_per_token, 0.0, 1e-9);
}

Test(planner, the_target_cap_wins_when_lowest)
{
	sg_plan_input in = model();
	sg_plan_machine mc;
	sg_plan_machine_sim(48 * GIB, 0, &mc);
	mc.target = 4 * GIB;
	sg_plan p;
	cr_assert_eq(sg_plan_make(&in, &mc, &p), SG_OK);
	cr_assert_eq(p.limit_bytes, 4 * GIB);
	cr_assert_eq(p.slots, 768); /* (4 - 1.75) GiB / 3 MiB */
	cr_assert_eq(p.headroom, 0);
}

Test(planner, a_cgroup_limit_caps_the_available_share_and_the_device)
{
	sg_plan_input in = model();
	sg_plan_machine mc = {.ram_total = 64 * GIB, .ram_available = 60 * GIB, .cgroup_limit = 8 * GIB};
	sg_plan p;
	cr_assert_eq(sg_plan_make(&in, &mc, &p), SG_OK);
	cr_assert_eq(p.limit_available, 6012954214ull);
	cr_assert_eq(p.limit_device, 6 * GIB);
	cr_assert_eq(p.slots, 1314);
}

Test(planner, a_gpu_plan_uses_its_memory_minus_two_gib)
{
	sg_plan_input in = model();
	sg_plan_machine mc;
	sg_plan_machine_sim(16 * GIB, 8 * GIB, &mc);
	sg_plan p;
	cr_assert_eq(sg_plan_make(&in, &mc, &p), SG_OK);
	cr_assert_eq(p.limit_bytes, 6 * GIB);
	cr_assert_eq(p.slots, (int64_t)((6 * GIB - 1879048192ull) / (3 * MIB)));
}

Test(planner, a_trunk_that_cannot_fit_is_an_error_naming_the_numbers)
{
	sg_plan_input in = model();
	sg_plan_machine mc;
	sg_plan_machine_sim(3 * GIB, 0, &mc); /* min(2.1 GiB, 1 GiB) */
	sg_plan p;
	cr_assert_eq(sg_plan_make(&in, &mc, &p), SG_ERR_NOMEM);
	cr_assert(!p.ok);
	const char *e = sg_last_error();
	cr_assert(strstr(e, "trunk (1.00 GiB)") && strstr(e, "KV at 4096 tokens (0.50 GiB)") && strstr(e, "= 1.75 GiB") &&
		  strstr(e, "limit of 1.00 GiB"), "%s", e);
}

Test(planner, a_pool_smaller_than_one_layer_is_an_error)
{
	sg_plan_input in = model();
	sg_plan_machine mc;
	sg_plan_machine_sim(4 * GIB, 0, &mc); /* 2 GiB limit: 0.25 GiB left = 85 slots < 128 */
	sg_plan p;
	cr_assert_eq(sg_plan_make(&in, &mc, &p), SG_ERR_NOMEM);
	const char *e = sg_last_error();
	cr_assert(strstr(e, "85 slots") && strstr(e, "one layer's 128 experts"), "%s", e);
}

Test(planner, experts_that_the_cache_cannot_read_give_a_clear_error)
{
	sg_plan_input in = model();
	in.slot_bytes = 0;
	sg_plan_machine mc;
	sg_plan_machine_sim(8 * GIB, 0, &mc);
	sg_plan p;
	cr_assert_eq(sg_plan_make(&in, &mc, &p), SG_ERR_NOMEM);
	cr_assert(strstr(sg_last_error(), "cannot go through the slot cache"), "%s", sg_last_error());
}
