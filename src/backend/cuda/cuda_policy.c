/*
 * The CUDA kernels' policy read from the flags (cuda_policy.h): the one place where the
 * SARAGOSSA_CUDA_* switches of the kernel files become named fields. Their defaults live in
 * src/base/flags.c; nothing here restates them.
 */
#include "backend/cuda/cuda_policy.h"

#include "base/flags.h"

static sg_cu_policy current;
static int loaded;

void sg_cu_policy_load(void)
{
	sg_cu_policy p;
	p.gemv.block_per_lane = sg_flag_bool("SARAGOSSA_CUDA_GEMV_SB");
	p.gemv.xstage = sg_flag_bool("SARAGOSSA_CUDA_GEMV_XSTAGE");
	p.gemv.mixed = sg_flag_bool("SARAGOSSA_CUDA_GEMV_MIXED");
	p.gemv.pre = sg_flag_bool("SARAGOSSA_CUDA_GEMV_PRE");
	p.gemv.persist = sg_flag_bool("SARAGOSSA_CUDA_GEMV_PERSIST") ? SG_CU_PERSIST_ONE_ROUND : SG_CU_PERSIST_OFF;
	p.gemv.persist_grid = 0;
	p.gemv.verify_mt = sg_flag_bool("SARAGOSSA_CUDA_VERIFY_MT");
	int64_t dec = sg_flag_int("SARAGOSSA_CUDA_ATTN_DECODE");
	p.attn.decode = dec == 0 ? SG_CU_DECODE_PER_HEAD : dec == 2 ? SG_CU_DECODE_GROUPED : SG_CU_DECODE_FIXED;
	p.attn.merge1 = sg_flag_bool("SARAGOSSA_CUDA_ATTN_MERGE");
	p.attn.kpre = sg_flag_bool("SARAGOSSA_CUDA_ATTN_KPRE");
	p.attn.vfirst = sg_flag_bool("SARAGOSSA_CUDA_ATTN_VFIRST");
	p.attn.kpipe = sg_flag_bool("SARAGOSSA_CUDA_ATTN_KPIPE");
	p.attn.mma = sg_flag_bool("SARAGOSSA_CUDA_ATTN_MMA");
	p.attn.prep = sg_flag_bool("SARAGOSSA_CUDA_ATTN_PREP");
	p.moe.decode = sg_flag_bool("SARAGOSSA_CUDA_MOE_DECODE");
	p.moe.route_warp = sg_flag_bool("SARAGOSSA_CUDA_ROUTE_WARP");
	p.moe.ids_early = sg_flag_bool("SARAGOSSA_CUDA_MOE_IDS_EARLY");
	p.pdl = sg_flag_bool("SARAGOSSA_CUDA_PDL");
	sg_cu_policy_set(&p);
}

const sg_cu_policy *sg_cu_policy_now(void)
{
	if (!loaded) sg_cu_policy_load();
	return &current;
}

void sg_cu_policy_set(const sg_cu_policy *p)
{
	current = *p;
	loaded = 1;
}
