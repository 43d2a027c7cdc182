/* config.json -> sg_model_desc for every family, with the fields that make each one its own. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "base/error.h"
#include "base/json.h"
#include "formats/model_desc.h"

static sg_status desc(const char *json, sg_model_desc *d)
{
	json_t *j;
	cr_assert_eq(sg_json_parse(json, strlen(json), "test", &j), SG_OK, "%s", sg_last_error());
	sg_status st = sg_model_desc_from_config(j, d);
	json_decref(j);
	return st;
}

#define BASE "\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":128,\"num_attention_heads\":4,"

Test(hfconfig, llama_defaults)
{
	sg_model_desc d;
	cr_assert_eq(desc("{\"model_type\":\"llama\"," BASE "\"num_hidden_layers\":2,\"rope_theta\":500000,"
			  "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,\"low_freq_factor\":1,"
			  "\"high_freq_factor\":4,\"original_max_position_embeddings\":8192},\"eos_token_id\":[7,8]}",
			  &d),
		     SG_OK, "%s", sg_last_error());
	cr_expect_eq(d.arch, SG_ARCH_LLAMA);
	cr_expect(d.head_dim == 16 && d.n_kv_head == 4 && d.mlp == SG_MLP_GATED && d.act == SG_ACT_SILU);
	cr_expect(!d.qk_norm && !d.tied_embeddings && d.norm_offset == 0.0f && d.eos_token == 7);
	cr_expect_eq(d.layers[1].rope.theta, 500000.0f);
	cr_expect_eq(d.layers[1].rope.scaling, SG_ROPE_SCALING_LLAMA3);
	cr_expect(d.layers[1].rope.factor == 8.0f && d.layers[1].rope.orig_ctx == 8192 && d.layers[1].n_rot == 16);
	sg_model_desc_free(&d);
}

Test(hfconfig, mistral_sliding_and_qwen2_bias)
{
	sg_model_desc d;
	cr_assert_eq(desc("{\"model_type\":\"mistral\"," BASE "\"num_hidden_layers\":2,\"sliding_window\":4096}", &d), SG_OK);
	cr_expect(d.layers[0].kind == SG_LAYER_SLIDING_ATTN && d.layers[0].sliding_window == 4096);
	sg_model_desc_free(&d);
	cr_assert_eq(desc("{\"model_type\":\"qwen2\"," BASE "\"num_hidden_layers\":2,\"num_key_value_heads\":2,"
			  "\"sliding_window\":4096,\"use_sliding_window\":false,\"tie_word_embeddings\":true}",
			  &d),
		     SG_OK);
	cr_expect(d.attn_bias && d.tied_embeddings && d.layers[1].kind == SG_LAYER_FULL_ATTN && d.n_kv_head == 2);
	sg_model_desc_free(&d);
}

Test(hfconfig, qwen3_moe_sparse_layers)
{
	sg_model_desc d;
	cr_assert_eq(desc("{\"model_type\":\"qwen3_moe\"," BASE "\"num_hidden_layers\":4,\"head_dim\":32,"
			  "\"num_experts\":8,\"num_experts_per_tok\":2,\"moe_intermediate_size\":48,"
			  "\"norm_topk_prob\":true,\"decoder_sparse_step\":1,\"mlp_only_layers\":[0]}",
			  &d),
		     SG_OK, "%s", sg_last_error());
	cr_expect(d.qk_norm && d.head_dim == 32 && d.n_expert == 8 && d.n_expert_used == 2 && d.moe_ffn_dim == 48);
	cr_expect(!d.layers[0].moe && d.layers[1].moe && d.layers[3].moe && d.norm_topk_prob);
	sg_model_desc_free(&d);
	cr_expect_eq(desc("{\"model_type\":\"qwen3_moe\"," BASE "\"num_hidden_layers\":1,\"num_experts\":8,"
			  "\"num_experts_per_tok\":9}",
			  &d),
		     SG_ERR_FORMAT);
}

Test(hfconfig, qwen3_5_moe_hybrid_from_text_config)
{
	sg_model_desc d;
	cr_assert_eq(desc("{\"model_type\":\"qwen3_5_moe\",\"vision_config\":{\"hidden_size\":32},"
			  "\"text_config\":{\"model_type\":\"qwen3_5_moe_text\"," BASE
			  "\"num_hidden_layers\":4,\"num_key_value_heads\":2,\"head_dim\":64,"
			  "\"layer_types\":[\"linear_attention\",\"linear_attention\",\"linear_attention\",\"full_attention\"],"
			  "\"linear_num_key_heads\":2,\"linear_num_value_heads\":4,\"linear_key_head_dim\":16,"
			  "\"linear_value_head_dim\":16,\"linear_conv_kernel_dim\":4,\"num_experts\":8,"
			  "\"num_experts_per_tok\":2,\"moe_intermediate_size\":32,\"shared_expert_intermediate_size\":64,"
			  "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000000,\"partial_rotary_factor\":0.25}}}",
			  &d),
		     SG_OK, "%s", sg_last_error());
	cr_expect_str_eq(d.model_type, "qwen3_5_moe_text");
	cr_expect_eq(d.arch, SG_ARCH_QWEN3_NEXT);
	cr_expect(d.layers[0].kind == SG_LAYER_LINEAR_ATTN && d.layers[3].kind == SG_LAYER_FULL_ATTN);
	cr_expect(d.layers[3].n_rot == 16 && d.layers[3].rope.theta == 1e7f);
	cr_expect(d.norm_offset == 1.0f && d.attn_output_gate && d.qk_norm);
	cr_expect(d.lin_n_k_head == 2 && d.lin_n_v_head == 4 && d.lin_conv_kernel == 4);
	cr_expect(d.shared_expert_ffn_dim == 64 && d.shared_expert_gate && d.layers[2].moe);
	sg_model_desc_free(&d);
	/* qwen3_next without layer_types: every 4th layer is full attention */
	cr_assert_eq(desc("{\"model_type\":\"qwen3_next\"," BASE "\"num_hidden_layers\":8,"
			  "\"linear_num_key_heads\":2,\"linear_num_value_heads\":4,\"linear_key_head_dim\":16,"
			  "\"linear_value_head_dim\":16,\"linear_conv_kernel_dim\":4}",
			  &d),
		     SG_OK, "%s", sg_last_error());
	cr_expect(d.layers[3].kind == SG_LAYER_FULL_ATTN && d.layers[7].kind == SG_LAYER_FULL_ATTN);
	cr_expect(d.layers[4].kind == SG_LAYER_LINEAR_ATTN);
	sg_model_desc_free(&d);
	cr_expect_eq(desc("{\"model_type\":\"qwen3_next\"," BASE "\"num_hidden_layers\":4}", &d), SG_ERR_FORMAT);
	cr_expect(strstr(sg_last_error(), "linear_num_key_heads") != NULL);
}

Test(hfconfig, gemma3_text_in_multimodal_wrapper)
{
	sg_model_desc d;
	cr_assert_eq(desc("{\"model_type\":\"gemma3\",\"vision_config\":{},\"text_config\":{\"model_type\":\"gemma3_text\","
			  "\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":128,\"num_attention_heads\":2,"
			  "\"num_key_value_heads\":1,\"head_dim\":32,\"num_hidden_layers\":12,\"query_pre_attn_scalar\":64,"
			  "\"sliding_window\":512,\"rope_local_base_freq\":10000,\"rope_theta\":1000000,"
			  "\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":8},\"final_logit_softcapping\":30}}",
			  &d),
		     SG_OK, "%s", sg_last_error());
	cr_expect_eq(d.arch, SG_ARCH_GEMMA3);
	cr_expect(d.norm_offset == 1.0f && d.qk_norm && d.sandwich_norm && d.act == SG_ACT_GELU_TANH && d.tied_embeddings);
	cr_expect(fabsf(d.embed_scale - 8.0f) < 1e-6f && fabsf(d.query_scale - 0.125f) < 1e-7f);
	cr_expect(d.final_softcap == 30.0f && d.attn_softcap == 0.0f);
	cr_expect(d.layers[0].kind == SG_LAYER_SLIDING_ATTN && d.layers[5].kind == SG_LAYER_FULL_ATTN);
	cr_expect(d.layers[0].sliding_window == 512 && d.layers[5].sliding_window == 0);
	cr_expect(d.layers[0].rope.theta == 10000.0f && d.layers[0].rope.scaling == SG_ROPE_SCALING_NONE);
	cr_expect(d.layers[5].rope.theta == 1e6f && d.layers[5].rope.scaling == SG_ROPE_SCALING_LINEAR);
	sg_model_desc_free(&d);
}

/* EmbeddingGemma: transformers turns the file's window w into w / 2 + 1 (exclusive, both sides) */
Test(hfconfig, gemma3_bidirectional_attention_halves_the_window_as_transformers_does)
{
	sg_model_desc d;
	static const char *cfg = "{\"model_type\":\"gemma3_text\",\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":128,"
				 "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":32,\"num_hidden_layers\":6,"
				 "\"sliding_window\":%d,\"use_bidirectional_attention\":%s}";
	char buf[512];
	int cases[][3] = {{512, 1, 257}, {7, 1, 4}, {512, 0, 512}};
	for (int c = 0; c < 3; c++) {
		snprintf(buf, sizeof(buf), cfg, cases[c][0], cases[c][1] ? "true" : "false");
		cr_assert_eq(desc(buf, &d), SG_OK, "%s", sg_last_error());
		cr_expect_eq(d.bidirectional, cases[c][1]);
		cr_expect_eq(d.layers[0].sliding_window, cases[c][2], "window %d: %d", cases[c][0], d.layers[0].sliding_window);
		cr_expect(d.layers[5].kind == SG_LAYER_FULL_ATTN && d.layers[5].sliding_window == 0);
		sg_model_desc_free(&d);
	}
}

Test(hfconfig, gemma4_per_layer_head_dims_kv_sharing_and_moe)
{
	sg_model_desc d;
	cr_assert_eq(desc("{\"model_type\":\"gemma4_text\"," BASE "\"num_hidden_layers\":6,\"num_key_value_heads\":2,"
			  "\"head_dim\":16,\"global_head_dim\":32,\"num_global_key_value_heads\":1,\"attention_k_eq_v\":true,"
			  "\"layer_types\":[\"sliding_attention\",\"sliding_attention\",\"full_attention\","
			  "\"sliding_attention\",\"sliding_attention\",\"full_attention\"],\"sliding_window\":512,"
			  "\"hidden_size_per_layer_input\":8,\"num_kv_shared_layers\":2,\"use_double_wide_mlp\":true,"
			  "\"enable_moe_block\":true,\"num_experts\":4,\"top_k_experts\":2,\"moe_intermediate_size\":16,"
			  "\"rope_parameters\":{\"full_attention\":{\"rope_type\":\"proportional\",\"rope_theta\":1000000,"
			  "\"partial_rotary_factor\":0.25},\"sliding_attention\":{\"rope_type\":\"default\",\"rope_theta\":10000}}}",
			  &d),
		     SG_OK, "%s", sg_last_error());
	cr_expect_eq(d.arch, SG_ARCH_GEMMA4);
	cr_expect(d.layers[0].head_dim == 16 && d.layers[2].head_dim == 32);
	cr_expect(d.layers[2].k_eq_v && d.layers[2].n_kv_head == 1 && d.layers[0].n_kv_head == 2);
	cr_expect(d.layers[2].rope.scaling == SG_ROPE_SCALING_PROPORTIONAL && d.layers[2].n_rot == 8);
	cr_expect(d.layers[0].rope.theta == 10000.0f && d.layers[0].n_rot == 16);
	cr_expect(d.query_scale == 1.0f && d.v_norm && d.per_layer_input_dim == 8);
	/* layers 4 and 5 share K/V with the last unshared layer of their kind (3 sliding, 2 full) */
	cr_expect(d.layers[4].kv_source == 3 && d.layers[5].kv_source == 2 && d.layers[3].kv_source == 3);
	cr_expect(d.layers[5].ffn_dim == 256 && d.layers[0].ffn_dim == 128);
	cr_expect(d.n_expert == 4 && d.n_expert_used == 2 && d.layers[0].moe);
	sg_model_desc_free(&d);
}

Test(hfconfig, whisper_and_bert_key_sizes)
{
	sg_model_desc d;
	cr_assert_eq(desc("{\"model_type\":\"whisper\",\"vocab_size\":51866,\"d_model\":1280,\"encoder_layers\":32,"
			  "\"decoder_layers\":4,\"encoder_attention_heads\":20,\"decoder_attention_heads\":20,"
			  "\"decoder_ffn_dim\":5120,\"num_mel_bins\":128}",
			  &d),
		     SG_OK, "%s", sg_last_error());
	cr_expect(d.arch == SG_ARCH_WHISPER && d.n_layer == 4 && d.n_enc_layer == 32 && d.n_mels == 128);
	cr_expect(d.head_dim == 64 && d.norm == SG_NORM_LAYER && d.mlp == SG_MLP_PLAIN && d.n_audio_ctx == 1500);
	sg_model_desc_free(&d);
	cr_assert_eq(desc("{\"model_type\":\"bert\",\"vocab_size\":30522,\"hidden_size\":384,\"num_hidden_layers\":6,"
			  "\"num_attention_heads\":12,\"intermediate_size\":1536,\"layer_norm_eps\":1e-12}",
			  &d),
		     SG_OK, "%s", sg_last_error());
	cr_expect(d.arch == SG_ARCH_BERT && d.head_dim == 32 && d.type_vocab_size == 2 && d.attn_bias);
	sg_model_desc_free(&d);
}

Test(hfconfig, bert_refuses_activations_and_positions_it_cannot_run)
{
	sg_model_desc d;
#define BERT "{\"model_type\":\"bert\",\"vocab_size\":64,\"hidden_size\":16,\"num_hidden_layers\":1," \
	     "\"num_attention_heads\":2,\"intermediate_size\":32,"
	cr_expect_eq(desc(BERT "\"hidden_act\":\"relu\"}", &d), SG_ERR_UNSUPPORTED);
	cr_expect(strstr(sg_last_error(), "hidden_act 'relu'") != NULL, "%s", sg_last_error());
	cr_expect_eq(desc(BERT "\"position_embedding_type\":\"relative_key\"}", &d), SG_ERR_UNSUPPORTED);
	cr_expect(strstr(sg_last_error(), "'relative_key'") != NULL, "%s", sg_last_error());
	cr_assert_eq(desc(BERT "\"hidden_act\":\"gelu_new\",\"position_embedding_type\":\"absolute\"}", &d), SG_OK, "%s",
		     sg_last_error());
	cr_expect(d.act == SG_ACT_GELU_TANH);
	sg_model_desc_free(&d);
	cr_assert_eq(desc(BERT "\"hidden_act\":\"gelu\",\"layer_norm_eps\":1e-5}", &d), SG_OK, "%s", sg_last_error());
	cr_expect(d.act == SG_ACT_GELU && d.norm_eps == 1e-5f && d.norm == SG_NORM_LAYER);
	sg_model_desc_free(&d);
#undef BERT
}

Test(hfconfig, refuses_unknown_vision_only_and_malformed)
{
	sg_model_desc d;
	cr_expect_eq(desc("{\"model_type\":\"falcon\"," BASE "\"num_hidden_layers\":2}", &d), SG_ERR_UNSUPPORTED);
	cr_expect(strstr(sg_last_error(), "'falcon'") && strstr(sg_last_error(), "qwen3_5_moe"), "%s", sg_last_error());
	cr_expect_eq(desc("{\"model_type\":\"siglip_vision_model\",\"hidden_size\":8}", &d), SG_ERR_UNSUPPORTED);
	cr_expect(strstr(sg_last_error(), "vision/audio tower") != NULL, "%s", sg_last_error());
	cr_expect_eq(desc("{\"hidden_size\":8}", &d), SG_ERR_FORMAT);
	cr_expect_eq(desc("{\"model_type\":\"llama\"," BASE "\"num_hidden_layers\":\"two\"}", &d), SG_ERR_FORMAT);
	cr_expect(strstr(sg_last_error(), "num_hidden_layers") != NULL, "%s", sg_last_error());
	cr_expect_eq(desc("{\"model_type\":\"llama\"," BASE "\"num_hidden_layers\":0}", &d), SG_ERR_FORMAT);
	cr_expect_eq(desc("{\"model_type\":\"llama\"," BASE "\"num_hidden_layers\":2,\"num_key_value_heads\":3}", &d),
		     SG_ERR_FORMAT);
	cr_expect_eq(desc("{\"model_type\":\"gemma3_text\"," BASE "\"num_hidden_layers\":2,\"layer_types\":[\"full_attention\"]}", &d),
		     SG_ERR_FORMAT);
	cr_expect_eq(desc("{\"model_type\":\"llama\"," BASE "\"num_hidden_layers\":2,\"rope_scaling\":{\"rope_type\":\"su\"}}", &d),
		     SG_ERR_UNSUPPORTED);
	cr_expect_eq(desc("{\"model_type\":\"llama\"," BASE "\"num_hidden_layers\":2,\"quantization_config\":{\"quant_method\":\"gptq\"}}", &d),
		     SG_ERR_UNSUPPORTED);
}

Test(hfconfig, mlx_quantization_recorded)
{
	sg_model_desc d;
	cr_assert_eq(desc("{\"model_type\":\"qwen3\"," BASE "\"num_hidden_layers\":2,\"quantization\":{\"group_size\":64,\"bits\":4}}", &d),
		     SG_OK);
	cr_expect(d.quant.kind == SG_QUANT_MLX && d.quant.bits == 4 && d.quant.group == 64);
	sg_model_desc_free(&d);
}
