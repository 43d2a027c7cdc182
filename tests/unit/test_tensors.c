/* The unified weights view: folder opening, name index, GGUF<->HF names, binder messages, MLX
 * companions. Files are written to a temporary folder. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "formats/weights.h"

static char dir[256];

static void write_file(const char *name, const void *p, size_t n)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(p, 1, n, f), n);
	fclose(f);
}

/* safetensors file from a header and `data` bytes of value 0x3c (f16 1.0 pairs) */
static void write_st(const char *name, const char *json, size_t data)
{
	static uint8_t b[65536];
	size_t h = strlen(json);
	for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)h >> (8 * i));
	memcpy(b + 8, json, h);
	memset(b + 8 + h, 0, data);
	write_file(name, b, 8 + h + data);
}

static void setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/sg_tensors_XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	cr_expect_eq(system(cmd), 0);
}

Test(tensors, name_mapping_both_ways)
{
	char b[256];
	cr_assert(sg_names_gguf_to_hf(sg_names_default, "blk.12.attn_q.weight", b, sizeof(b)));
	cr_expect_str_eq(b, "model.layers.12.self_attn.q_proj.weight");
	cr_assert(sg_names_hf_to_gguf(sg_names_default, "model.layers.3.mlp.down_proj.bias", b, sizeof(b)));
	cr_expect_str_eq(b, "blk.3.ffn_down.bias");
	cr_assert(sg_names_gguf_to_hf(sg_names_default, "token_embd.weight", b, sizeof(b)));
	cr_expect_str_eq(b, "model.embed_tokens.weight");
	cr_assert(sg_names_gguf_to_hf(sg_names_default, "output.weight", b, sizeof(b)));
	cr_expect_str_eq(b, "lm_head.weight");
	cr_assert(sg_names_gguf_to_hf(sg_names_default, "output_norm.weight", b, sizeof(b)));
	cr_expect_str_eq(b, "model.norm.weight");
	/* "attn_q" must not match the prefix of "attn_q_norm" */
	cr_assert(sg_names_gguf_to_hf(sg_names_default, "blk.0.attn_q_norm.weight", b, sizeof(b)));
	cr_expect_str_eq(b, "model.layers.0.self_attn.q_norm.weight");
	cr_assert(sg_names_gguf_to_hf(sg_names_default, "blk.1.ffn_gate_inp_shexp.weight", b, sizeof(b)));
	cr_expect_str_eq(b, "model.layers.1.mlp.shared_expert_gate.weight");
	/* the expert module: what follows it (an expert's index, a stacked parameter) carries over */
	cr_assert(sg_names_gguf_to_hf(sg_names_default, "blk.2.ffn_experts.5.up_proj.weight", b, sizeof(b)));
	cr_expect_str_eq(b, "model.layers.2.mlp.experts.5.up_proj.weight");
	cr_assert(sg_names_gguf_to_hf(sg_names_default, "blk.2.ffn_experts.gate_up_proj", b, sizeof(b)));
	cr_expect_str_eq(b, "model.layers.2.mlp.experts.gate_up_proj");
	cr_assert(sg_names_hf_to_gguf(sg_names_default, "model.layers.7.mlp.experts.down_proj", b, sizeof(b)));
	cr_expect_str_eq(b, "blk.7.ffn_experts.down_proj");
	cr_expect_not(sg_names_gguf_to_hf(sg_names_default, "blk.x.attn_q.weight", b, sizeof(b)));
	cr_expect_not(sg_names_gguf_to_hf(sg_names_default, "rope_freqs.weight", b, sizeof(b)));
	/* the same HF name maps to different GGUF names by family */
	cr_assert(sg_names_hf_to_gguf(sg_names_default, "model.layers.4.post_attention_layernorm.weight", b, sizeof(b)));
	cr_expect_str_eq(b, "blk.4.ffn_norm.weight");
	cr_assert(sg_names_hf_to_gguf(sg_names_gemma, "model.layers.4.post_attention_layernorm.weight", b, sizeof(b)));
	cr_expect_str_eq(b, "blk.4.post_attention_norm.weight");
	cr_assert(sg_names_gguf_to_hf(sg_names_gemma, "blk.2.ffn_norm.weight", b, sizeof(b)));
	cr_expect_str_eq(b, "model.layers.2.pre_feedforward_layernorm.weight");
	cr_assert(sg_names_gguf_to_hf(sg_names_gemma, "blk.2.attn_k.weight", b, sizeof(b)));
	cr_expect_str_eq(b, "model.layers.2.self_attn.k_proj.weight");
}

Test(tensors, binder_reports_expected_and_found, .init = setup, .fini = teardown)
{
	/* HF names in a multimodal layout: model.language_model.layers... */
	write_st("model.safetensors",
		 "{\"model.language_model.layers.3.self_attn.q_proj.weight\":{\"dtype\":\"F16\",\"shape\":[2048,2048],"
		 "\"data_offsets\":[0,8388608]},"
		 "\"model.language_model.norm.weight\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8388608,8388624]}}",
		 0);
	/* the data is sparse-extended: write past the end with truncate */
	char path[512];
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	FILE *f = fopen(path, "r+b");
	fseek(f, 0, SEEK_END);
	long hdr = ftell(f);
	cr_assert_eq(ftruncate(fileno(f), hdr + 8388624), 0);
	fclose(f);
	sg_weights *w;
	cr_assert_eq(sg_weights_open(dir, &w), SG_OK, "%s", sg_last_error());
	cr_expect_eq(w->format, SG_WEIGHTS_SAFETENSORS);
	const sg_tensor *q = NULL, *n = NULL, *o = NULL;
	sg_bind ok[] = {
		{"blk.{L}.attn_q.weight", SG_WANT_MATMUL, 2, {2048, 2048}, 0, &q},
		{"output_norm.weight", SG_WANT_FLOAT, 1, {-1}, 0, &n},
		{"output.weight", SG_WANT_MATMUL, 0, {0}, 1, &o},
	};
	cr_assert_eq(sg_weights_bind(w, NULL, ok, 3, 3), SG_OK, "%s", sg_last_error());
	cr_expect(q && n && !o);
	cr_expect_eq(q->ne[0], 2048);
	sg_bind bad[] = {{"blk.{L}.attn_q.weight", SG_TYPE_Q4_K, 2, {2048, 4096}, 0, &q}};
	cr_expect_eq(sg_weights_bind(w, NULL, bad, 1, 3), SG_ERR_FORMAT);
	cr_expect_str_eq(sg_last_error(), "blk.3.attn_q.weight: expected Q4_K [2048, 4096], found F16 [2048, 2048]");
	sg_bind missing[] = {{"blk.{L}.attn_k.weight", SG_WANT_MATMUL, 0, {0}, 0, &q}};
	cr_expect_eq(sg_weights_bind(w, NULL, missing, 1, 3), SG_ERR_NOT_FOUND);
	cr_expect_str_eq(sg_last_error(), "blk.3.attn_k.weight: missing");
	sg_weights_close(w);
}

Test(tensors, mlx_weights_fold_scales_and_biases, .init = setup, .fini = teardown)
{
	const char *cfg = "{\"model_type\":\"llama\",\"quantization\":{\"group_size\":32,\"bits\":4}}";
	write_file("config.json", cfg, strlen(cfg));
	/* [rows=2][cols=64]: packed 2x8 u32 = 64 B, scales/biases 2x2 bf16 = 8 B each */
	write_st("model.safetensors",
		 "{\"model.layers.0.mlp.up_proj.weight\":{\"dtype\":\"U32\",\"shape\":[2,8],\"data_offsets\":[0,64]},"
		 "\"model.layers.0.mlp.up_proj.scales\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[64,72]},"
		 "\"model.layers.0.mlp.up_proj.biases\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[72,80]}}",
		 80);
	sg_weights *w;
	cr_assert_eq(sg_weights_open(dir, &w), SG_OK, "%s", sg_last_error());
	const sg_tensor *t = sg_weights_lookup(w, NULL, "blk.0.ffn_up.weight");
	cr_assert_not_null(t);
	cr_expect_eq(t->type, SG_TYPE_MLX_AFFINE);
	cr_expect(t->ne[0] == 64 && t->ne[1] == 2 && t->mlx.bits == 4 && t->mlx.group == 32);
	cr_expect(t->scales && t->biases && t->scales->companion && t->mlx.sb_type == SG_TYPE_BF16);
	char ts[64];
	cr_expect_str_eq(sg_tensor_type_str(t, ts, sizeof(ts)), "MLX_AFFINE u4 g32 (bf16)");
	sg_weights_close(w);
	/* scales whose shape does not match the packed weight */
	write_st("model.safetensors",
		 "{\"model.layers.0.mlp.up_proj.weight\":{\"dtype\":\"U32\",\"shape\":[2,8],\"data_offsets\":[0,64]},"
		 "\"model.layers.0.mlp.up_proj.scales\":{\"dtype\":\"BF16\",\"shape\":[2,4],\"data_offsets\":[64,80]},"
		 "\"model.layers.0.mlp.up_proj.biases\":{\"dtype\":\"BF16\",\"shape\":[2,4],\"data_offsets\":[80,96]}}",
		 96);
	cr_expect_eq(sg_weights_open(dir, &w), SG_ERR_FORMAT);
	cr_expect(strstr(sg_last_error(), "do not describe one matrix") != NULL, "%s", sg_last_error());
}

Test(tensors, duplicate_names_across_shards_are_refused, .init = setup, .fini = teardown)
{
	write_st("a.safetensors", "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
	write_st("b.safetensors", "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
	sg_weights *w;
	cr_expect_eq(sg_weights_open(dir, &w), SG_ERR_FORMAT);
	cr_expect(strstr(sg_last_error(), "'x' appears twice") != NULL, "%s", sg_last_error());
}

Test(tensors, empty_or_missing_paths_are_errors, .init = setup, .fini = teardown)
{
	sg_weights *w;
	cr_expect_eq(sg_weights_open(dir, &w), SG_ERR_NOT_FOUND);
	cr_expect(strstr(sg_last_error(), "no weights") != NULL);
	cr_expect_eq(sg_weights_open("/nonexistent/saragossa/model", &w), SG_ERR_NOT_FOUND);
	cr_expect_eq(sg_weights_open("", &w), SG_ERR_INVALID_ARG);
}
