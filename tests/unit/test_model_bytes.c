/*
 * The bytes a decode step reads (sg_model.weight_bytes, what `bench` divides by for its bandwidth
 * figures): a MoE layer reads k of its E experts, so raising num_experts_per_tok from 2 to 4 must
 * add exactly 2/E of every stacked expert tensor, once, whatever binding the family uses (Qwen3-MoE
 * per-expert tensors; Qwen3-Next through Qwen3-MoE's binding).
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "models/model.h"

/* The fixture's folder with num_experts_per_tok replaced, in a fresh temporary folder. */
static void fixture_with_k(const char *name, int k, char *dir, size_t n)
{
	snprintf(dir, n, "/tmp/sg_bytes_XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	char src[512], dst[512], abs[4096];
	snprintf(src, sizeof src, "tests/fixtures/%s/config.json", name);
	json_t *cfg = json_load_file(src, 0, NULL);
	cr_assert_not_null(cfg);
	json_object_set_new(cfg, "num_experts_per_tok", json_integer(k));
	snprintf(dst, sizeof dst, "%s/config.json", dir);
	cr_assert_eq(json_dump_file(cfg, dst, 0), 0);
	json_decref(cfg);
	snprintf(src, sizeof src, "tests/fixtures/%s/model.safetensors", name);
	cr_assert_not_null(realpath(src, abs));
	snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
	cr_assert_eq(symlink(abs, dst), 0);
}

static void remove_fixture(const char *dir)
{
	char p[512];
	snprintf(p, sizeof p, "%s/config.json", dir);
	unlink(p);
	snprintf(p, sizeof p, "%s/model.safetensors", dir);
	unlink(p);
	rmdir(dir);
}

static sg_model *load_k(const char *name, int k)
{
	char dir[64];
	fixture_with_k(name, k, dir, sizeof dir);
	sg_model_params mp = sg_model_default_params();
	mp.backend = "cpu";
	mp.n_threads = 1;
	sg_model *m = NULL;
	sg_status st = sg_model_load(dir, &mp, &m);
	remove_fixture(dir);
	cr_assert_eq(st, SG_OK, "%s", sg_last_error());
	return m;
}

static size_t tensor_bytes(const sg_btensor *t) { return t->data ? (size_t)sg_btensor_rows(t) * t->row_bytes : 0; }

static void check(const char *name)
{
	sg_model *m2 = load_k(name, 2), *m4 = load_k(name, 4);
	size_t E = (size_t)m2->desc.n_expert, per_k = 0;
	cr_assert_gt(E, 4);
	for (int l = 0; l < m2->desc.n_layer; l++) {
		const sg_layer_weights *lw = &m2->layers[l];
		per_k += tensor_bytes(&lw->gate_exps) / E + tensor_bytes(&lw->up_exps) / E + tensor_bytes(&lw->down_exps) / E;
	}
	cr_assert_gt(per_k, 0, "%s: no expert tensors", name);
	cr_expect_eq(m4->weight_bytes - m2->weight_bytes, 2 * per_k, "%s: k 2 -> 4 adds %zu bytes, expected %zu", name,
		     m4->weight_bytes - m2->weight_bytes, 2 * per_k);
	sg_model_free(m2);
	sg_model_free(m4);
}

Test(model_bytes, a_decode_step_counts_k_experts_per_moe_layer_qwen3_moe) { check("qwen3_moe"); }
Test(model_bytes, a_decode_step_counts_k_experts_per_moe_layer_qwen3_next) { check("qwen3_next"); }
