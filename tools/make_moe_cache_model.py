#!/usr/bin/env python3
"""Small random-weight Qwen3-MoE models for the expert slot cache's tests, in both formats the
cache reads, with the routed experts stored after everything else (so cutting the file short
cuts experts only, as a shard of experts would be):

  gguf         DIR/moe-q4k.gguf: arch qwen3moe, Q4_K weights (Q6_K down experts in a few layers
               and the head, as llama-quantize's Q4_K_M mix), F32 norms and routers, and a
               byte-level vocabulary (256 bytes + <|endoftext|>, <|im_start|>, <|im_end|>) with a
               ChatML template, so `serve` can chat with it.
  safetensors  DIR/moe-bf16/: config.json (qwen3_moe) and two shards, the trunk in the first, the
               stacked experts (mlp.switch_mlp.{gate,up,down}_proj.weight, BF16) in the second,
               with model.safetensors.index.json.

Shape: 10 layers, 4 heads / 2 KV heads, 32 experts with top 4; GGUF: hidden 256, head dim 64,
experts of width 256 (K-quant rows are 256 long); safetensors: hidden 128, head dim 32, experts
of width 128; so 10% of the experts (32 slots) is exactly one layer's. Weights are random normals
(std 0.02 GGUF codes, bf16 rounded values for safetensors); routers have std 0.5 so routing is
decided, not a near tie.

Usage: make_moe_cache_model.py DIR [--seed N]   (numpy only)
"""
import argparse
import json
import struct
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_random_model as mrm  # noqa: E402  (the GGUF writer and K-quant pool)

D, H, HKV, HD, L, E, K, F = 256, 4, 2, 64, 10, 32, 4, 256
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def byte_tokens():
    """GPT-2's printable stand-ins for the 256 bytes (byte-level BPE vocabularies store these)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + list(range(ord("\xae"), ord("\xff") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, map(chr, cs)))
    return [table[b] for b in range(256)]


def gguf_tensors(V):
    """(name, ggml shape, type, kind) in llama.cpp's naming, experts last."""
    Q4, Q6, F32 = mrm.GGML_Q4_K, mrm.GGML_Q6_K, mrm.GGML_F32
    trunk, experts = [("token_embd.weight", (D, V), Q4, "w")], []
    for i in range(L):
        p = f"blk.{i}."
        trunk += [(p + "attn_norm.weight", (D,), F32, "1"), (p + "attn_q.weight", (D, H * HD), Q4, "w"),
                  (p + "attn_k.weight", (D, HKV * HD), Q4, "w"), (p + "attn_v.weight", (D, HKV * HD), Q4, "w"),
                  (p + "attn_output.weight", (H * HD, D), Q4, "w"), (p + "attn_q_norm.weight", (HD,), F32, "1"),
                  (p + "attn_k_norm.weight", (HD,), F32, "1"), (p + "ffn_norm.weight", (D,), F32, "1"),
                  (p + "ffn_gate_inp.weight", (D, E), F32, "r")]
        down = Q6 if i in (0, 3, 6, 9) else Q4
        experts += [(p + "ffn_gate_exps.weight", (D, F, E), Q4, "w"), (p + "ffn_up_exps.weight", (D, F, E), Q4, "w"),
                    (p + "ffn_down_exps.weight", (F, D, E), down, "w")]
    trunk += [("output_norm.weight", (D,), F32, "1"), ("output.weight", (D, V), Q6, "w")]
    return trunk + experts


def write_gguf(path, seed):
    toks = byte_tokens() + SPECIAL
    V = len(toks) + (-len(toks) % 64)
    toks += [f"[PAD{i}]" for i in range(len(toks), V)]
    types = [1] * 256 + [3] * 3 + [5] * (V - 259)
    a = "qwen3moe"
    kvs = {
        "general.architecture": (mrm.KV_STR, a, None), "general.name": (mrm.KV_STR, "moe-cache-test", None),
        "general.file_type": (mrm.KV_U32, 15, None), "general.quantization_version": (mrm.KV_U32, 2, None),
        f"{a}.context_length": (mrm.KV_U32, 4096, None), f"{a}.embedding_length": (mrm.KV_U32, D, None),
        f"{a}.block_count": (mrm.KV_U32, L, None), f"{a}.feed_forward_length": (mrm.KV_U32, 512, None),
        f"{a}.attention.head_count": (mrm.KV_U32, H, None), f"{a}.attention.head_count_kv": (mrm.KV_U32, HKV, None),
        f"{a}.attention.key_length": (mrm.KV_U32, HD, None), f"{a}.attention.value_length": (mrm.KV_U32, HD, None),
        f"{a}.rope.freq_base": (mrm.KV_F32, 1000000.0, None),
        f"{a}.attention.layer_norm_rms_epsilon": (mrm.KV_F32, 1e-6, None),
        f"{a}.expert_count": (mrm.KV_U32, E, None), f"{a}.expert_used_count": (mrm.KV_U32, K, None),
        f"{a}.expert_feed_forward_length": (mrm.KV_U32, F, None),
        "tokenizer.ggml.model": (mrm.KV_STR, "gpt2", None), "tokenizer.ggml.pre": (mrm.KV_STR, "qwen2", None),
        "tokenizer.ggml.tokens": (mrm.KV_ARR, [t.encode() for t in toks], mrm.KV_STR),
        "tokenizer.ggml.token_type": (mrm.KV_ARR, np.array(types, dtype=np.int32), mrm.KV_I32),
        "tokenizer.ggml.merges": (mrm.KV_ARR, [], mrm.KV_STR),
        "tokenizer.ggml.bos_token_id": (mrm.KV_U32, 256, None), "tokenizer.ggml.eos_token_id": (mrm.KV_U32, 258, None),
        "tokenizer.ggml.padding_token_id": (mrm.KV_U32, 256, None), "tokenizer.ggml.add_bos_token": (mrm.KV_BOOL, False, None),
        "tokenizer.chat_template": (mrm.KV_STR, CHATML, None),
    }
    tensors = gguf_tensors(V)
    # routers of std 0.5 (the pool's 0.02 makes every expert a near tie): written by hand below
    return write_gguf_file(path, kvs, tensors, seed)


def write_gguf_file(path, kvs, tensors, seed):
    """mrm.write_gguf with F32 routers ("r") drawn at std 0.5 instead of the pool's 0.02."""
    rng = np.random.default_rng(seed + 7)
    infos, off = [], 0
    for name, shape, gtype, _ in tensors:
        per, nb = mrm.GGML_BYTES[gtype]
        off += -off % mrm.GGUF_ALIGN
        infos.append(struct.pack("<Q", len(name)) + name.encode() + struct.pack("<I", len(shape))
                     + struct.pack("<%dQ" % len(shape), *shape) + struct.pack("<IQ", gtype, off))
        off += int(np.prod(shape)) // per * nb
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    head += b"".join(mrm.kv_bytes(k, *v) for k, v in kvs.items()) + b"".join(infos)
    head += b"\0" * (-len(head) % mrm.GGUF_ALIGN)
    pool = mrm.RandomPool(np.random.default_rng(seed), n=1 << 22)
    with open(path, "wb") as f:
        f.write(head)
        pos = 0
        for name, shape, gtype, kind in tensors:
            f.write(b"\0" * (-pos % mrm.GGUF_ALIGN))
            pos += -pos % mrm.GGUF_ALIGN
            per, nb = mrm.GGML_BYTES[gtype]
            n = int(np.prod(shape))
            if kind == "1":
                f.write(np.ones(n, dtype=np.float32).tobytes())
            elif kind == "r":
                f.write((rng.standard_normal(n) * 0.5).astype(np.float32).tobytes())
            else:
                pool.write(f, gtype, n)
            pos += n // per * nb
    return path


def bf16_bits(x):
    return mrm.bf16(x)


def write_st(path, tensors):
    """tensors: [(name, BF16 uint16 array or F32 array)] in this order."""
    header, off = {}, 0
    for name, arr in tensors:
        tag = "BF16" if arr.dtype == np.uint16 else "F32"
        header[name] = {"dtype": tag, "shape": list(arr.shape), "data_offsets": [off, off + arr.nbytes]}
        off += arr.nbytes
    header["__metadata__"] = {"format": "pt"}
    hb = json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb)
        for _, arr in tensors:
            f.write(np.ascontiguousarray(arr).tobytes())


def write_safetensors(d, seed):
    D, HD, F = 128, 32, 128  # no block sizes to respect: smaller than the GGUF's
    rng = np.random.default_rng(seed)
    d.mkdir(parents=True, exist_ok=True)
    V = 320
    w = lambda *s: bf16_bits(rng.standard_normal(s).astype(np.float32) * 0.05)  # noqa: E731
    ones = lambda n: bf16_bits(np.ones(n, dtype=np.float32))  # noqa: E731
    trunk, experts = [("model.embed_tokens.weight", w(V, D))], []
    for i in range(L):
        p = f"model.layers.{i}"
        trunk += [(f"{p}.input_layernorm.weight", ones(D)), (f"{p}.post_attention_layernorm.weight", ones(D)),
                  (f"{p}.self_attn.q_proj.weight", w(H * HD, D)), (f"{p}.self_attn.k_proj.weight", w(HKV * HD, D)),
                  (f"{p}.self_attn.v_proj.weight", w(HKV * HD, D)), (f"{p}.self_attn.o_proj.weight", w(D, H * HD)),
                  (f"{p}.self_attn.q_norm.weight", ones(HD)), (f"{p}.self_attn.k_norm.weight", ones(HD)),
                  (f"{p}.mlp.gate.weight", bf16_bits(rng.standard_normal((E, D)).astype(np.float32) * 0.5))]
        experts += [(f"{p}.mlp.switch_mlp.gate_proj.weight", w(E, F, D)), (f"{p}.mlp.switch_mlp.up_proj.weight", w(E, F, D)),
                    (f"{p}.mlp.switch_mlp.down_proj.weight", w(E, D, F))]
    trunk += [("model.norm.weight", ones(D)), ("lm_head.weight", w(V, D))]
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    write_st(d / names[0], trunk)
    write_st(d / names[1], experts)
    index = {"metadata": {}, "weight_map": {n: names[0] for n, _ in trunk} | {n: names[1] for n, _ in experts}}
    (d / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))
    cfg = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": D, "vocab_size": V,
           "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": HKV, "head_dim": HD,
           "hidden_act": "silu", "rms_norm_eps": 1e-6, "max_position_embeddings": 4096, "rope_theta": 1000000.0,
           "tie_word_embeddings": False, "attention_bias": False, "torch_dtype": "bfloat16", "intermediate_size": 512,
           "moe_intermediate_size": F, "num_experts": E, "num_experts_per_tok": K, "norm_topk_prob": True,
           "decoder_sparse_step": 1, "mlp_only_layers": []}
    (d / "config.json").write_text(json.dumps(cfg, indent=1))
    return d


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--seed", type=int, default=3)
    a = ap.parse_args()
    out = Path(a.dir)
    out.mkdir(parents=True, exist_ok=True)
    print(write_gguf(out / "moe-q4k.gguf", a.seed))
    print(write_safetensors(out / "moe-bf16", a.seed))


if __name__ == "__main__":
    main()
