#!/usr/bin/env python3
"""A Qwen3-TTS folder at a published shape (0.6B or 1.7B CustomVoice, 12 Hz speech tokenizer) with
RANDOM bf16 weights, for timing only (never committed): config.json, generation_config.json,
model.safetensors ("talker.*"), the tiny byte-level tokenizer of the test fixture (its special
tokens where the config puts them; any ids below the text vocabulary serve for timing) and
speech_tokenizer/ (config.json, model.safetensors "decoder.*").

    python3 tools/make_qwen_tts_bench_model.py --shape 0.6b --out /tmp/qwen3-tts-0.6b-random

Needs torch and safetensors (the tensor names and shapes follow the qwen-tts package's classes).
"""
import argparse
import json
import os
import shutil

import torch
from safetensors.torch import save_file

SHAPES = {
    "0.6b": dict(hidden=1024, inter=3072, layers=28, heads=16, kv=8, cp_hidden=1024),
    "1.7b": dict(hidden=2048, inter=6144, layers=28, heads=16, kv=8, cp_hidden=1024),
}
G, CODEBOOK, V, TEXT_V, TEXT_D, HD = 16, 2048, 3072, 151936, 2048, 128
SPECIAL = dict(codec_pad_id=2148, codec_bos_id=2149, codec_eos_token_id=2150, codec_think_id=2154, codec_nothink_id=2155,
               codec_think_bos_id=2156, codec_think_eos_id=2157)
DEC = dict(codebook_size=2048, codebook_dim=512, hidden_size=512, head_dim=64, latent_dim=1024, num_attention_heads=16,
           num_key_value_heads=16, intermediate_size=1024, num_hidden_layers=8, sliding_window=72, rms_norm_eps=1e-5,
           rope_theta=10000, max_position_embeddings=8000, num_quantizers=16, upsample_rates=[8, 5, 4, 3],
           upsampling_ratios=[2, 2], decoder_dim=1536, layer_scale_initial_scale=0.01, hidden_act="silu")


def rnd(shape, std, g):
    return (torch.randn(shape, generator=g) * std).to(torch.bfloat16)


def decoder_layers(prefix, d, nl, heads, kv, hd, inter, qk_norm, out, g):
    for i in range(nl):
        p = "%slayers.%d." % (prefix, i)
        out[p + "input_layernorm.weight"] = torch.ones(d, dtype=torch.bfloat16)
        out[p + "post_attention_layernorm.weight"] = torch.ones(d, dtype=torch.bfloat16)
        out[p + "self_attn.q_proj.weight"] = rnd((heads * hd, d), d ** -0.5, g)
        out[p + "self_attn.k_proj.weight"] = rnd((kv * hd, d), d ** -0.5, g)
        out[p + "self_attn.v_proj.weight"] = rnd((kv * hd, d), d ** -0.5, g)
        out[p + "self_attn.o_proj.weight"] = rnd((d, heads * hd), (heads * hd) ** -0.5, g)
        if qk_norm:
            out[p + "self_attn.q_norm.weight"] = torch.ones(hd, dtype=torch.bfloat16)
            out[p + "self_attn.k_norm.weight"] = torch.ones(hd, dtype=torch.bfloat16)
        out[p + "mlp.gate_proj.weight"] = rnd((inter, d), d ** -0.5, g)
        out[p + "mlp.up_proj.weight"] = rnd((inter, d), d ** -0.5, g)
        out[p + "mlp.down_proj.weight"] = rnd((d, inter), inter ** -0.5, g)
    out[prefix + "norm.weight"] = torch.ones(d, dtype=torch.bfloat16)


def conv(name, cout, cin, k, out, g, transposed=False, bias=True):
    out[name + ".weight"] = rnd((cin, cout, k) if transposed else (cout, cin, k), (cin * k) ** -0.5, g)
    if bias:
        out[name + ".bias"] = rnd((cout,), 0.01, g)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=sorted(SHAPES), default="0.6b")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    s = SHAPES[a.shape]
    g = torch.Generator().manual_seed(0)
    os.makedirs(os.path.join(a.out, "speech_tokenizer"), exist_ok=True)
    D, Dc = s["hidden"], s["cp_hidden"]
    talker = dict(vocab_size=V, hidden_size=D, intermediate_size=s["inter"], num_hidden_layers=s["layers"],
                  num_attention_heads=s["heads"], num_key_value_heads=s["kv"], head_dim=HD, rms_norm_eps=1e-6,
                  rope_theta=1000000.0, rope_scaling={"mrope_section": [24, 20, 20], "interleaved": True, "rope_type": "default"},
                  num_code_groups=G, text_hidden_size=TEXT_D, text_vocab_size=TEXT_V, hidden_act="silu",
                  max_position_embeddings=32768, spk_id={"vivian": 3066, "ryan": 3061, "aiden": 2861},
                  spk_is_dialect={"vivian": False, "ryan": False, "aiden": False},
                  codec_language_id={"english": 2050, "chinese": 2055},
                  code_predictor_config=dict(vocab_size=CODEBOOK, hidden_size=Dc, intermediate_size=3072, num_hidden_layers=5,
                                             num_attention_heads=16, num_key_value_heads=8, head_dim=HD, rms_norm_eps=1e-6,
                                             rope_theta=1000000.0, num_code_groups=G, hidden_act="silu",
                                             max_position_embeddings=65536),
                  **SPECIAL)
    cfg = dict(architectures=["Qwen3TTSForConditionalGeneration"], model_type="qwen3_tts", talker_config=talker,
               tokenizer_type="qwen3_tts_tokenizer_12hz", tts_model_size=a.shape.replace(".", "b").replace("bb", "b"),
               tts_model_type="custom_voice", im_start_token_id=390, im_end_token_id=391, tts_pad_token_id=151671,
               tts_bos_token_id=151672, tts_eos_token_id=151673, dtype="bfloat16")
    w = {}
    w["talker.model.codec_embedding.weight"] = rnd((V, D), 1.0, g)
    w["talker.model.text_embedding.weight"] = rnd((TEXT_V, TEXT_D), 1.0, g)
    w["talker.text_projection.linear_fc1.weight"] = rnd((TEXT_D, TEXT_D), TEXT_D ** -0.5, g)
    w["talker.text_projection.linear_fc1.bias"] = rnd((TEXT_D,), 0.01, g)
    w["talker.text_projection.linear_fc2.weight"] = rnd((D, TEXT_D), TEXT_D ** -0.5, g)
    w["talker.text_projection.linear_fc2.bias"] = rnd((D,), 0.01, g)
    w["talker.codec_head.weight"] = rnd((V, D), 3 * D ** -0.5, g)
    # End-of-speech's row is zero: its logit is 0 while the other codes' spread ~3 around it, so greedy
    # decoding never ends and sampling almost never does (random weights at the 1.7B shape ended after
    # 4 frames otherwise); both engines read the same row, so the timing stays a like-for-like one.
    w["talker.codec_head.weight"][SPECIAL["codec_eos_token_id"]] = 0
    decoder_layers("talker.model.", D, s["layers"], s["heads"], s["kv"], HD, s["inter"], True, w, g)
    for i in range(G - 1):
        w["talker.code_predictor.model.codec_embedding.%d.weight" % i] = rnd((CODEBOOK, D), 1.0, g)
        w["talker.code_predictor.lm_head.%d.weight" % i] = rnd((CODEBOOK, Dc), 3 * Dc ** -0.5, g)
    if Dc != D:
        w["talker.code_predictor.small_to_mtp_projection.weight"] = rnd((Dc, D), D ** -0.5, g)
        w["talker.code_predictor.small_to_mtp_projection.bias"] = rnd((Dc,), 0.01, g)
    decoder_layers("talker.code_predictor.model.", Dc, 5, 16, 8, HD, 3072, True, w, g)
    save_file(w, os.path.join(a.out, "model.safetensors"))
    del w
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        json.dump(dict(do_sample=True, repetition_penalty=1.05, temperature=0.9, top_p=1.0, top_k=50, subtalker_dosample=True,
                       subtalker_temperature=0.9, subtalker_top_p=1.0, subtalker_top_k=50, max_new_tokens=8192), f, indent=1)
    fix = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "qwen3_tts", "tiny")
    for f in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copy(os.path.join(fix, f), os.path.join(a.out, f))

    d = DEC
    w = {}
    q = d["codebook_dim"] // 2
    for name, n in (("first", 1), ("rest", G - 1)):
        for i in range(n):
            p = "decoder.quantizer.rvq_%s.vq.layers.%d._codebook." % (name, i)
            w[p + "embedding_sum"] = rnd((d["codebook_size"], q), 1.0, g)
            w[p + "cluster_usage"] = torch.ones(d["codebook_size"], dtype=torch.bfloat16)
        w["decoder.quantizer.rvq_%s.output_proj.weight" % name] = rnd((d["codebook_dim"], q, 1), q ** -0.5, g)
        w["decoder.quantizer.rvq_%s.input_proj.weight" % name] = rnd((q, d["codebook_dim"], 1), d["codebook_dim"] ** -0.5, g)
    L, H = d["latent_dim"], d["hidden_size"]
    conv("decoder.pre_conv.conv", L, d["codebook_dim"], 3, w, g)
    w["decoder.pre_transformer.input_proj.weight"] = rnd((H, L), L ** -0.5, g)
    w["decoder.pre_transformer.input_proj.bias"] = rnd((H,), 0.01, g)
    w["decoder.pre_transformer.output_proj.weight"] = rnd((L, H), H ** -0.5, g)
    w["decoder.pre_transformer.output_proj.bias"] = rnd((L,), 0.01, g)
    decoder_layers("decoder.pre_transformer.", H, d["num_hidden_layers"], 16, 16, 64, d["intermediate_size"], False, w, g)
    for i in range(d["num_hidden_layers"]):
        for k in ("self_attn_layer_scale", "mlp_layer_scale"):
            w["decoder.pre_transformer.layers.%d.%s.scale" % (i, k)] = torch.full((H,), 0.01, dtype=torch.bfloat16)
    for i, r in enumerate(d["upsampling_ratios"]):
        p = "decoder.upsample.%d." % i
        conv(p + "0.conv", L, L, r, w, g, transposed=True)
        conv(p + "1.dwconv.conv", L, 1, 7, w, g)
        w[p + "1.norm.weight"] = torch.ones(L, dtype=torch.bfloat16)
        w[p + "1.norm.bias"] = torch.zeros(L, dtype=torch.bfloat16)
        w[p + "1.pwconv1.weight"] = rnd((4 * L, L), L ** -0.5, g)
        w[p + "1.pwconv1.bias"] = rnd((4 * L,), 0.01, g)
        w[p + "1.pwconv2.weight"] = rnd((L, 4 * L), (4 * L) ** -0.5, g)
        w[p + "1.pwconv2.bias"] = rnd((L,), 0.01, g)
        w[p + "1.gamma"] = torch.full((L,), 1e-6, dtype=torch.bfloat16)
    dd = d["decoder_dim"]
    conv("decoder.decoder.0.conv", dd, L, 7, w, g)
    for i, r in enumerate(d["upsample_rates"]):
        cin, cout = dd >> i, dd >> (i + 1)
        p = "decoder.decoder.%d.block." % (i + 1)
        w[p + "0.alpha"] = torch.zeros(cin, dtype=torch.bfloat16)
        w[p + "0.beta"] = torch.zeros(cin, dtype=torch.bfloat16)
        conv(p + "1.conv", cout, cin, 2 * r, w, g, transposed=True)
        for k in range(3):
            u = p + "%d." % (k + 2)
            for a_ in ("act1", "act2"):
                w[u + a_ + ".alpha"] = torch.zeros(cout, dtype=torch.bfloat16)
                w[u + a_ + ".beta"] = torch.zeros(cout, dtype=torch.bfloat16)
            conv(u + "conv1.conv", cout, cout, 7, w, g)
            conv(u + "conv2.conv", cout, cout, 1, w, g)
    od = dd >> len(d["upsample_rates"])
    n = len(d["upsample_rates"])
    w["decoder.decoder.%d.alpha" % (n + 1)] = torch.zeros(od, dtype=torch.bfloat16)
    w["decoder.decoder.%d.beta" % (n + 1)] = torch.zeros(od, dtype=torch.bfloat16)
    conv("decoder.decoder.%d.conv" % (n + 2), 1, od, 7, w, g)
    save_file(w, os.path.join(a.out, "speech_tokenizer", "model.safetensors"))
    with open(os.path.join(a.out, "speech_tokenizer", "config.json"), "w") as f:
        json.dump(dict(model_type="qwen3_tts_tokenizer_12hz", architectures=["Qwen3TTSTokenizerV2Model"], decoder_config=d,
                       encoder_valid_num_quantizers=16, input_sample_rate=24000, output_sample_rate=24000,
                       decode_upsample_rate=1920, encode_downsample_rate=1920), f, indent=1)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
