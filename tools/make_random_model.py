#!/usr/bin/env python3
"""Random-weight models with the layer shapes of real checkpoints, for speed runs: MLX-quantized
folders, or (qwen3, qwen3moe) one GGUF file that llama.cpp loads too (see GGUF below).

The weights are random (uniform codes, scales sized so activations stay of order one), so the
output is meaningless, but every tensor has the shape, type and name of the real model's, so a
decode step reads the same bytes as the real model per layer. Only a few layers are written, so
the model fits a small machine.

  qwen36  Qwen3.6-35B-A3B (qwen3_5_moe_text): hidden 2048, vocab 248320, gated delta net layers
          (16 key heads / 32 value heads of dim 128, conv kernel 4) and gated full attention
          (16 heads, 2 KV heads of dim 256, rotary 0.25), 256 experts of width 512 with top 8
          and a shared expert of width 512. Default: 4 layers, 3 linear + 1 full.
  gemma4  Gemma 4 26B-A4B text (gemma4_text): hidden 2816, vocab 262144 (tied), sliding layers
          of 16 heads / 8 KV heads of dim 256 (window 1024), full layers of 16 heads / 2 KV heads
          of dim 512 with k = v and proportional rope 0.25, dense MLP 2112 beside 128 experts
          of width 704 with top 8. Default: 6 layers, 5 sliding + 1 full.

  qwen3   Qwen3-8B (qwen3): hidden 4096, 36 layers, 32 heads / 8 KV heads of dim 128, MLP 12288,
          vocab 151936 (untied). Default: all 36 layers. --bits 16 writes plain BF16 weights
          (an unquantized Hugging Face checkpoint) instead of MLX affine codes.

  qwen3moe Qwen3-30B-A3B (qwen3_moe): hidden 2048, 48 layers, 32 heads / 4 KV heads of dim 128,
          128 experts of width 768 with top 8 (MLX switch_mlp stacks), vocab 151936 (untied).

Usage: make_random_model.py qwen36|gemma4|qwen3|qwen3moe [--layers N] [--bits 4] [--group 64] [--out DIR]
The folder (config.json + model.safetensors) goes to DIR, by default
$SARAGOSSA_CACHE_DIR or ~/.cache/saragossa, under random/<name>. Never commit it.

GGUF (qwen3 and qwen3moe only), for side-by-side runs with llama.cpp on the same file:
  make_random_model.py qwen3|qwen3moe --gguf VOCAB_GGUF [--gguf-type f16|q8_0|q4_k_m] [--layers N]
                       [--tiny] [--shape 8b|1.5b] [--out DIR]
writes ONE file, DIR/<name>-f16.gguf (-q8_0.gguf, -Q4_K_M.gguf), in llama.cpp's layout for the arches
`qwen3` / `qwen3moe`: token_embd, blk.L.{attn_norm, attn_q, attn_k, attn_v, attn_output,
attn_q_norm, attn_k_norm, ffn_norm}, then ffn_{gate,up,down} (dense) or ffn_gate_inp (F32 router)
and the stacked experts ffn_{gate,up}_exps [E][F][D] / ffn_down_exps [E][D][F], output_norm,
output (untied). Weights are normals of std 0.02 (one pool of 64M values, read at random offsets,
so gigabytes stream to disk at the disk's speed), norm weights 1.0 (F32). Q8_0 halves the file
(Qwen3-30B-A3B: 32 GB instead of 61 GB); llama-quantize takes it with --allow-requantize.
q4_k_m writes the quantized file itself: Q4_K and Q6_K superblocks of random codes under fixed
scales (values of std 0.02 again), each tensor of the type llama-quantize's Q4_K_M mix gives it
(q4_k_m_type), so the file has the bytes a quantized checkpoint has, in seconds and without the
F16 file on disk.
Neither reading nor writing needs the `gguf` package: the format is written here with struct and
numpy (GGUF v3, alignment 32). The tokenizer comes from VOCAB_GGUF, any GGUF holding a Qwen
vocabulary (tokenizer.ggml.* keys; a vocabulary-only file of a few MB will do): every
tokenizer.* key is copied, the token list padded with [PAD<i>] (type unused) to the model's
151936 rows as llama.cpp's converter does, and bos/eos/padding set to Qwen3's ids.
--tiny writes the same tensors at small widths (hidden 256, 4 heads / 2 KV heads of dim 64,
MLP 512 or 16 experts of width 256 with top 2) over the vocabulary's own size, for tests.
"""
import argparse
import json
import os
import struct
import time
from pathlib import Path

import numpy as np

BF16 = "BF16"


class Writer:
    """Streams a safetensors file: tensors are described first, their bytes produced on write."""

    def __init__(self):
        self.items = []  # (name, dtype, shape, nbytes, make)

    def add(self, name, dtype, shape, make):
        size = {"BF16": 2, "U32": 4, "F32": 4}[dtype]
        self.items.append((name, dtype, list(shape), int(np.prod(shape)) * size, make))

    def write(self, path):
        header, off = {}, 0
        for name, dtype, shape, nbytes, _ in self.items:
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + nbytes]}
            off += nbytes
        header["__metadata__"] = {"format": "mlx", "generator": "tools/make_random_model.py"}
        hb = json.dumps(header).encode()
        hb += b" " * (-len(hb) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(hb)))
            f.write(hb)
            for name, _, _, nbytes, make in self.items:
                data = make()
                assert data.nbytes == nbytes, name
                f.write(data.tobytes())
        return off


def bf16(x):
    """float32 array -> bf16 bits (round to nearest even) as uint16."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


class Model:
    def __init__(self, bits, group, seed):
        self.w = Writer()
        self.bits, self.group = bits, group
        self.rng = np.random.default_rng(seed)

    def quant(self, name, *shape):
        """An MLX affine weight [..., N, K]: packed codes, bf16 scales and biases (bits 16: BF16)."""
        *outer, k = shape
        if self.bits == 16:
            self.fast_bf16(f"{name}.weight", shape, 1.0 / np.sqrt(k))
            return
        assert k % self.group == 0 and (k * self.bits) % 32 == 0, (name, shape)
        rng, bits, group = self.rng, self.bits, self.group
        words = k * bits // 32
        self.w.add(f"{name}.weight", "U32", (*outer, words),
                   lambda: np.frombuffer(rng.bytes(int(np.prod(outer)) * words * 4), dtype=np.uint32).reshape(*outer, words))
        # codes uniform in [0, 2^bits): w = s * (c - mid) has std ~ s * 2^bits / sqrt(12);
        # s makes a row's dot with a unit-variance input of order one
        levels = 2 ** bits
        s = 1.0 / (levels / np.sqrt(12.0) * np.sqrt(k))
        ng = k // group
        self.w.add(f"{name}.scales", BF16, (*outer, ng), lambda: np.full((*outer, ng), bf16(s), dtype=np.uint16))
        self.w.add(f"{name}.biases", BF16, (*outer, ng),
                   lambda: np.full((*outer, ng), bf16(-s * (levels - 1) / 2), dtype=np.uint16))

    def vec(self, name, n, value=None, scale=0.1):
        rng = self.rng
        if value is None:
            self.w.add(name, BF16, (n,), lambda: bf16(rng.standard_normal(n).astype(np.float32) * scale))
        else:
            self.w.add(name, BF16, (n,), lambda: np.full(n, bf16(value), dtype=np.uint16))

    def fast_bf16(self, name, shape, scale):
        """Random BF16 of magnitude ~scale from random bits (random sign and mantissa, exponent of
        scale or half of it): gigabytes in seconds, where normal samples take minutes."""
        rng, n = self.rng, int(np.prod(shape))
        e = int(np.floor(np.log2(scale))) + 127

        def make():
            b = np.frombuffer(rng.bytes(2 * n), dtype=np.uint16)
            exp = (e - (b >> 14 & 1)).astype(np.uint16) << 7  # bit 14 picks one of two exponents
            return ((b & 0x807F) | exp).reshape(shape)

        self.w.add(name, BF16, shape, make)

    def raw(self, name, shape, scale):
        rng = self.rng
        self.w.add(name, BF16, shape, lambda: bf16(rng.standard_normal(shape).astype(np.float32) * scale))


def qwen36(layers, bits, group, seed):
    D, V, E, F, Fs, k = 2048, 248320, 256, 512, 512, 8
    Hk, Hv, dk, dv, K = 16, 32, 128, 128, 4
    H, Hkv, hd = 16, 2, 256
    kinds = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)]
    if "full_attention" not in kinds:
        kinds[-1] = "full_attention"
    cfg = {
        "architectures": ["Qwen3_5MoeForCausalLM"], "model_type": "qwen3_5_moe_text",
        "hidden_size": D, "vocab_size": V, "num_hidden_layers": layers, "layer_types": kinds,
        "num_attention_heads": H, "num_key_value_heads": Hkv, "head_dim": hd, "attn_output_gate": True,
        "linear_num_key_heads": Hk, "linear_num_value_heads": Hv, "linear_key_head_dim": dk,
        "linear_value_head_dim": dv, "linear_conv_kernel_dim": K,
        "num_experts": E, "num_experts_per_tok": k, "moe_intermediate_size": F,
        "shared_expert_intermediate_size": Fs, "norm_topk_prob": True, "hidden_act": "silu",
        "rms_norm_eps": 1e-6, "max_position_embeddings": 262144, "tie_word_embeddings": False,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
        "bos_token_id": None, "eos_token_id": 248046,
        "quantization": {"group_size": group, "bits": bits},
    }
    m = Model(bits, group, seed)
    m.quant("model.embed_tokens", V, D)
    C, Vd = 2 * Hk * dk + Hv * dv, Hv * dv
    for i, kind in enumerate(kinds):
        p = f"model.layers.{i}"
        m.vec(f"{p}.input_layernorm.weight", D, 0.0)
        m.vec(f"{p}.post_attention_layernorm.weight", D, 0.0)
        if kind == "linear_attention":
            a = f"{p}.linear_attn"
            m.quant(f"{a}.in_proj_qkv", C, D)
            m.quant(f"{a}.in_proj_z", Vd, D)
            m.quant(f"{a}.in_proj_b", Hv, D)
            m.quant(f"{a}.in_proj_a", Hv, D)
            m.raw(f"{a}.conv1d.weight", (C, K, 1), 0.5)
            m.vec(f"{a}.A_log", Hv, np.log(4.0))
            m.vec(f"{a}.dt_bias", Hv, 1.0)
            m.vec(f"{a}.norm.weight", dv, 1.0)
            m.quant(f"{a}.out_proj", D, Vd)
        else:
            a = f"{p}.self_attn"
            m.quant(f"{a}.q_proj", 2 * H * hd, D)
            m.quant(f"{a}.k_proj", Hkv * hd, D)
            m.quant(f"{a}.v_proj", Hkv * hd, D)
            m.quant(f"{a}.o_proj", D, H * hd)
            m.vec(f"{a}.q_norm.weight", hd, 0.0)
            m.vec(f"{a}.k_norm.weight", hd, 0.0)
        mlp = f"{p}.mlp"
        m.quant(f"{mlp}.gate", E, D)
        m.quant(f"{mlp}.switch_mlp.gate_proj", E, F, D)
        m.quant(f"{mlp}.switch_mlp.up_proj", E, F, D)
        m.quant(f"{mlp}.switch_mlp.down_proj", E, D, F)
        m.quant(f"{mlp}.shared_expert.gate_proj", Fs, D)
        m.quant(f"{mlp}.shared_expert.up_proj", Fs, D)
        m.quant(f"{mlp}.shared_expert.down_proj", D, Fs)
        m.quant(f"{mlp}.shared_expert_gate", 1, D)
    m.vec("model.norm.weight", D, 0.0)
    m.quant("lm_head", V, D)
    return "qwen36-35b-a3b-random-%dl-u%dg%d" % (layers, bits, group), cfg, m


def gemma4(layers, bits, group, seed):
    D, V, Fd, E, F, k = 2816, 262144, 2112, 128, 704, 8
    H, Hkv, hd, Hg, hdg = 16, 8, 256, 2, 512
    kinds = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(layers)]
    kinds[-1] = "full_attention"
    cfg = {
        "architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text",
        "hidden_size": D, "vocab_size": V, "num_hidden_layers": layers, "layer_types": kinds,
        "intermediate_size": Fd, "num_attention_heads": H, "num_key_value_heads": Hkv, "head_dim": hd,
        "global_head_dim": hdg, "num_global_key_value_heads": Hg, "attention_k_eq_v": True,
        "enable_moe_block": True, "num_experts": E, "top_k_experts": k, "moe_intermediate_size": F,
        "hidden_size_per_layer_input": 0, "num_kv_shared_layers": 0, "use_double_wide_mlp": False,
        "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6, "sliding_window": 1024,
        "max_position_embeddings": 262144, "final_logit_softcapping": 30.0, "tie_word_embeddings": True,
        "rope_parameters": {
            "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0, "rope_type": "proportional"},
            "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
        },
        "bos_token_id": 2, "eos_token_id": 1,
        "quantization": {"group_size": group, "bits": bits},
    }
    m = Model(bits, group, seed)
    m.quant("model.embed_tokens", V, D)
    for i, kind in enumerate(kinds):
        p = f"model.layers.{i}"
        full = kind == "full_attention"
        h, kv = (hdg, Hg) if full else (hd, Hkv)
        for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                  "post_feedforward_layernorm", "pre_feedforward_layernorm_2", "post_feedforward_layernorm_1",
                  "post_feedforward_layernorm_2"):
            m.vec(f"{p}.{n}.weight", D, 1.0)
        a = f"{p}.self_attn"
        m.quant(f"{a}.q_proj", H * h, D)
        m.quant(f"{a}.k_proj", kv * h, D)
        if not full:
            m.quant(f"{a}.v_proj", kv * h, D)
        m.quant(f"{a}.o_proj", D, H * h)
        m.vec(f"{a}.q_norm.weight", h, 1.0)
        m.vec(f"{a}.k_norm.weight", h, 1.0)
        m.quant(f"{p}.mlp.gate_proj", Fd, D)
        m.quant(f"{p}.mlp.up_proj", Fd, D)
        m.quant(f"{p}.mlp.down_proj", D, Fd)
        m.quant(f"{p}.router.proj", E, D)
        m.vec(f"{p}.router.scale", D, 1.0)
        m.vec(f"{p}.router.per_expert_scale", E, 1.0)
        m.quant(f"{p}.experts.gate_up_proj", E, 2 * F, D)
        m.quant(f"{p}.experts.down_proj", E, D, F)
        m.vec(f"{p}.layer_scalar", 1, 1.0)
    m.vec("model.norm.weight", D, 1.0)
    return "gemma4-26b-a4b-random-%dl-u%dg%d" % (layers, bits, group), cfg, m


def qwen3_attention(m, p, D, H, Hkv, hd):
    """A Qwen3 layer's norms and attention (qk-norm, no biases) under prefix p."""
    m.vec(f"{p}.input_layernorm.weight", D, 1.0)
    m.vec(f"{p}.post_attention_layernorm.weight", D, 1.0)
    a = f"{p}.self_attn"
    m.quant(f"{a}.q_proj", H * hd, D)
    m.quant(f"{a}.k_proj", Hkv * hd, D)
    m.quant(f"{a}.v_proj", Hkv * hd, D)
    m.quant(f"{a}.o_proj", D, H * hd)
    m.vec(f"{a}.q_norm.weight", hd, 1.0)
    m.vec(f"{a}.k_norm.weight", hd, 1.0)


def qwen3_config(arch, model_type, layers, bits, group, D, V, H, Hkv, hd, **extra):
    """config.json of a Qwen3-family checkpoint (untied head, qk-norm, no biases)."""
    cfg = {
        "architectures": [arch], "model_type": model_type,
        "hidden_size": D, "vocab_size": V, "num_hidden_layers": layers,
        "num_attention_heads": H, "num_key_value_heads": Hkv, "head_dim": hd, "hidden_act": "silu",
        "rms_norm_eps": 1e-6, "max_position_embeddings": 40960, "rope_theta": 1000000.0,
        "tie_word_embeddings": False, "attention_bias": False, "torch_dtype": "bfloat16",
        "bos_token_id": 151643, "eos_token_id": 151645, **extra,
    }
    if bits != 16:
        cfg["quantization"] = {"group_size": group, "bits": bits}
    return cfg


def qwen3_model(cfg, bits, group, seed, mlp):
    """Embedding, every layer's attention plus mlp(m, prefix), final norm and head."""
    D, V = cfg["hidden_size"], cfg["vocab_size"]
    m = Model(bits, group, seed)
    m.quant("model.embed_tokens", V, D)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        qwen3_attention(m, p, D, cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"])
        mlp(m, p)
    m.vec("model.norm.weight", D, 1.0)
    m.quant("lm_head", V, D)
    return m


def qwen3(layers, bits, group, seed):
    D, F = 4096, 12288
    cfg = qwen3_config("Qwen3ForCausalLM", "qwen3", layers, bits, group, D, 151936, 32, 8, 128, intermediate_size=F)

    def mlp(m, p):
        m.quant(f"{p}.mlp.gate_proj", F, D)
        m.quant(f"{p}.mlp.up_proj", F, D)
        m.quant(f"{p}.mlp.down_proj", D, F)
    m = qwen3_model(cfg, bits, group, seed, mlp)
    kind = "bf16" if bits == 16 else "u%dg%d" % (bits, group)
    return "qwen3-8b-random-%dl-%s" % (layers, kind), cfg, m


def qwen3moe(layers, bits, group, seed):
    D, E, k, F = 2048, 128, 8, 768
    cfg = qwen3_config("Qwen3MoeForCausalLM", "qwen3_moe", layers, bits, group, D, 151936, 32, 4, 128,
                       intermediate_size=6144, moe_intermediate_size=F, num_experts=E, num_experts_per_tok=k,
                       norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[])

    def mlp(m, p):
        m.quant(f"{p}.mlp.gate", E, D)
        m.quant(f"{p}.mlp.switch_mlp.gate_proj", E, F, D)
        m.quant(f"{p}.mlp.switch_mlp.up_proj", E, F, D)
        m.quant(f"{p}.mlp.switch_mlp.down_proj", E, D, F)
    m = qwen3_model(cfg, bits, group, seed, mlp)
    kind = "bf16" if bits == 16 else "u%dg%d" % (bits, group)
    return "qwen3-30b-a3b-random-%dl-%s" % (layers, kind), cfg, m


# ---- GGUF files in llama.cpp's layout (no gguf package needed) ----

GGUF_ALIGN = 32
# metadata value types: numeric ones by struct code, then string (8) and array (9)
KV_STRUCT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
KV_NUMPY = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<u1", 10: "<u8", 11: "<i8", 12: "<f8"}
KV_U32, KV_I32, KV_F32, KV_BOOL, KV_STR, KV_ARR = 4, 5, 6, 7, 8, 9
GGML_F32, GGML_F16, GGML_Q8_0, GGML_Q4_K, GGML_Q6_K = 0, 1, 8, 12, 14
GGML_BYTES = {GGML_F32: (1, 4), GGML_F16: (1, 2), GGML_Q8_0: (32, 34),  # (elements, bytes) per block
              GGML_Q4_K: (256, 144), GGML_Q6_K: (256, 210)}
Q4_K_M = -1  # not a tensor type: llama-quantize's Q4_K_M mix of Q4_K and Q6_K (q4_k_m_type)
FILE_TYPE = {GGML_F16: 1, GGML_Q8_0: 7, Q4_K_M: 15}  # general.file_type (llama_ftype)
TOKEN_UNUSED = 5


def read_gguf_kvs(path):
    """The metadata of a GGUF file (v2 or v3) as {key: (type, value, element type or None)};
    strings stay bytes, numeric arrays become numpy arrays. Tensors are not read."""
    import mmap
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as b:
        if b[:4] != b"GGUF":
            raise SystemExit(f"{path}: not a GGUF file")
        version, = struct.unpack_from("<I", b, 4)
        if version not in (2, 3):
            raise SystemExit(f"{path}: GGUF version {version} (2 or 3 expected)")
        _, n_kv = struct.unpack_from("<QQ", b, 8)
        pos = 24

        def string():
            nonlocal pos
            n, = struct.unpack_from("<Q", b, pos)
            pos += 8 + n
            return bytes(b[pos - n:pos])

        def scalar(t):
            nonlocal pos
            if t == KV_STR:
                return string()
            if t not in KV_STRUCT:
                raise SystemExit(f"{path}: metadata value type {t} at byte {pos}")
            v, = struct.unpack_from(KV_STRUCT[t], b, pos)
            pos += struct.calcsize(KV_STRUCT[t])
            return v

        kvs = {}
        for _ in range(n_kv):
            key = string().decode()
            t, = struct.unpack_from("<I", b, pos)
            pos += 4
            if t != KV_ARR:
                kvs[key] = (t, scalar(t), None)
                continue
            et, n = struct.unpack_from("<IQ", b, pos)
            pos += 12
            if et in KV_NUMPY:
                a = np.frombuffer(b, dtype=KV_NUMPY[et], count=n, offset=pos).copy()
                pos += a.nbytes
                kvs[key] = (t, a, et)
            else:
                kvs[key] = (t, [scalar(et) for _ in range(n)], et)
        return kvs


def kv_bytes(key, t, v, et=None):
    """One metadata entry serialized: key, type, value."""
    def s(x):
        x = x.encode() if isinstance(x, str) else x
        return struct.pack("<Q", len(x)) + x

    def one(t, x):
        return s(x) if t == KV_STR else struct.pack(KV_STRUCT[t], x)

    out = s(key) + struct.pack("<I", t)
    if t != KV_ARR:
        return out + one(t, v)
    out += struct.pack("<IQ", et, len(v))
    if et in KV_NUMPY:
        return out + np.asarray(v, dtype=KV_NUMPY[et]).tobytes()
    return out + b"".join(one(et, x) for x in v)


class RandomPool:
    """Random weights from a fixed pool read at random offsets: normal samples cost ~20 ns each,
    so an 8B model drawn afresh would take minutes; the pool is drawn once (a second or two)."""

    def __init__(self, rng, n=1 << 26, std=0.02):
        self.rng = rng
        self.f16 = np.empty(n, dtype=np.float16)
        step = 1 << 22
        for i in range(0, n, step):
            self.f16[i:i + step] = rng.standard_normal(min(step, n - i), dtype=np.float32) * std
        self.std, self._q8 = std, None

    @property
    def q8(self):
        """Q8_0 blocks [f16 scale, 32 int8 codes] of the f16 pool's values (codes of std 40, scale
        std/40), made on first use."""
        if self._q8 is None:
            nb = len(self.f16) // 32
            blocks = np.empty((nb, 34), dtype=np.uint8)
            blocks[:, :2] = np.frombuffer(np.float16(self.std / 40).tobytes() * nb, dtype=np.uint8).reshape(nb, 2)
            codes = np.clip(np.rint(self.f16[:nb * 32].astype(np.float32) * (40 / self.std)), -127, 127)
            blocks[:, 2:] = codes.astype(np.int8).view(np.uint8).reshape(nb, 32)
            self._q8 = blocks.reshape(-1)
        return self._q8

    def kquant(self, gtype):
        """K-quant superblocks of 256 random codes, each with the same scales, chosen so the
        values have mean ~0 and std ~self.std like the f16 pool's. Q4_K: w = d*sc*q - dmin*m
        with q uniform in 0..15 (std 4.61), sc = m = 32 and dmin = 7.5 d; Q6_K: w = d*sc*(q - 32)
        with q uniform in 0..63 (std 18.47) and sc = 16."""
        key = "_k%d" % gtype
        if getattr(self, key, None) is None:
            nb = max(1, len(self.f16) // 256)
            per, size = GGML_BYTES[gtype]
            blocks = np.frombuffer(self.rng.bytes(nb * size), dtype=np.uint8).reshape(nb, size).copy()
            if gtype == GGML_Q4_K:
                d = self.std / (32 * 4.61)
                # scales[0:4] and [4:8]: sub-block scales / mins 0-3 in the low 6 bits, bits 4-5 of
                # those of sub-blocks 4-7 in the top 2; scales[8:12]: their low 4 bits (all 0 here)
                head = np.array([d, 7.5 * d], dtype=np.float16).tobytes() + bytes([0xA0] * 8 + [0] * 4)
                blocks[:, :16] = np.frombuffer(head, dtype=np.uint8)
            else:
                d = self.std / (16 * 18.47)
                blocks[:, 192:208] = 16
                blocks[:, 208:210] = np.frombuffer(np.float16(d).tobytes(), dtype=np.uint8)
            setattr(self, key, blocks.reshape(-1))
        return getattr(self, key)

    def write(self, f, gtype, n):
        """n random elements of type gtype (F16, Q8_0, Q4_K, Q6_K or F32) appended to f."""
        if gtype == GGML_F32:
            for i in range(0, n, 1 << 24):
                m = min(1 << 24, n - i)
                off = int(self.rng.integers(0, len(self.f16) - m + 1))
                f.write(self.f16[off:off + m].astype(np.float32).tobytes())
            return
        per, unit = GGML_BYTES[gtype]  # unit: pool items a block takes (bytes; the f16 pool: 1)
        if gtype == GGML_F16:
            pool, unit = self.f16, 1
        else:
            pool = self.q8 if gtype == GGML_Q8_0 else self.kquant(gtype)
        count = n // per  # elements or blocks
        units = len(pool) // unit
        while count:
            m = min(count, max(1, units // 2))
            off = int(self.rng.integers(0, units - m + 1)) * unit
            f.write(memoryview(pool[off:off + m * unit]))
            count -= m


def q4_k_m_type(name, layers):
    """The type llama-quantize's Q4_K_M gives a weight of these arches: Q6_K for output.weight,
    and for attn_v and ffn_down(_exps) of the first and last eighth of the layers and every
    third one between; Q4_K for the rest (token_embd included)."""
    if name == "output.weight":
        return GGML_Q6_K
    if name.startswith("blk."):
        i, n = int(name.split(".")[1]), layers
        more = i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2
        if more and (".attn_v." in name or ".ffn_down." in name or ".ffn_down_exps." in name):
            return GGML_Q6_K
    return GGML_Q4_K


def gguf_tensors(arch, layers, D, V, H, Hkv, hd, F=0, E=0, Fe=0, wtype=GGML_F16):
    """(name, ggml shape (fastest first), type, kind) of every tensor, in llama.cpp's naming.
    kind: "w" a random weight, "r" a random F32 router, "1" a norm weight of ones (F32)."""
    if wtype == Q4_K_M:
        t = gguf_tensors(arch, layers, D, V, H, Hkv, hd, F, E, Fe, GGML_F16)
        return [(n, s, q4_k_m_type(n, layers) if k == "w" else g, k) for n, s, g, k in t]
    t = [("token_embd.weight", (D, V), wtype, "w")]
    for i in range(layers):
        p = f"blk.{i}."
        t += [(p + "attn_norm.weight", (D,), GGML_F32, "1"),
              (p + "attn_q.weight", (D, H * hd), wtype, "w"),
              (p + "attn_k.weight", (D, Hkv * hd), wtype, "w"),
              (p + "attn_v.weight", (D, Hkv * hd), wtype, "w"),
              (p + "attn_output.weight", (H * hd, D), wtype, "w"),
              (p + "attn_q_norm.weight", (hd,), GGML_F32, "1"),
              (p + "attn_k_norm.weight", (hd,), GGML_F32, "1"),
              (p + "ffn_norm.weight", (D,), GGML_F32, "1")]
        if arch == "qwen3":
            t += [(p + "ffn_gate.weight", (D, F), wtype, "w"),
                  (p + "ffn_up.weight", (D, F), wtype, "w"),
                  (p + "ffn_down.weight", (F, D), wtype, "w")]
        else:
            t += [(p + "ffn_gate_inp.weight", (D, E), GGML_F32, "r"),
                  (p + "ffn_gate_exps.weight", (D, Fe, E), wtype, "w"),
                  (p + "ffn_up_exps.weight", (D, Fe, E), wtype, "w"),
                  (p + "ffn_down_exps.weight", (Fe, D, E), wtype, "w")]
    t += [("output_norm.weight", (D,), GGML_F32, "1"), ("output.weight", (D, V), wtype, "w")]
    return t


def tokenizer_kvs(vocab_path, V, bos, eos):
    """The tokenizer.* metadata of vocab_path, the token list padded to V entries (V None: to
    a multiple of 64). bos / eos / padding ids set where given (None: the vocabulary's own)."""
    kvs = {k: v for k, v in read_gguf_kvs(vocab_path).items() if k.startswith("tokenizer.")}
    if "tokenizer.ggml.tokens" not in kvs:
        raise SystemExit(f"{vocab_path}: no tokenizer.ggml.tokens")
    t, toks, et = kvs["tokenizer.ggml.tokens"]
    n = len(toks)
    V = V or n + 1 + (-(n + 1) % 64)
    if n > V:
        raise SystemExit(f"{vocab_path}: {n} tokens, more than the model's {V} embedding rows")
    kvs["tokenizer.ggml.tokens"] = (t, list(toks) + [b"[PAD%d]" % i for i in range(n, V)], et)
    if "tokenizer.ggml.token_type" in kvs:
        t, tt, et = kvs["tokenizer.ggml.token_type"]
        kvs["tokenizer.ggml.token_type"] = (t, np.concatenate([tt, np.full(V - n, TOKEN_UNUSED, dtype=tt.dtype)]), et)
    if "tokenizer.ggml.scores" in kvs:
        t, sc, et = kvs["tokenizer.ggml.scores"]
        kvs["tokenizer.ggml.scores"] = (t, np.concatenate([sc, np.zeros(V - n, dtype=sc.dtype)]), et)
    if bos is not None:
        kvs["tokenizer.ggml.bos_token_id"] = (KV_U32, bos, None)
        kvs["tokenizer.ggml.padding_token_id"] = (KV_U32, bos, None)
    if eos is not None:
        kvs["tokenizer.ggml.eos_token_id"] = (KV_U32, eos, None)
    kvs["tokenizer.ggml.add_bos_token"] = (KV_BOOL, False, None)
    return kvs, V


def write_gguf(path, kvs, tensors, seed):
    """Header, metadata, tensor infos, then each tensor's bytes streamed from a RandomPool."""
    infos, off = [], 0
    for name, shape, gtype, _ in tensors:
        per, nb = GGML_BYTES[gtype]
        n = int(np.prod(shape))
        assert shape[0] % per == 0, (name, shape)
        off += -off % GGUF_ALIGN
        infos.append(struct.pack("<Q", len(name)) + name.encode() + struct.pack("<I", len(shape))
                     + struct.pack("<%dQ" % len(shape), *shape) + struct.pack("<IQ", gtype, off))
        off += n // per * nb
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    head += b"".join(kv_bytes(k, *v) for k, v in kvs.items()) + b"".join(infos)
    head += b"\0" * (-len(head) % GGUF_ALIGN)
    total = sum(int(np.prod(shape)) for _, shape, _, _ in tensors)
    pool = RandomPool(np.random.default_rng(seed), n=min(1 << 26, max(1 << 20, total)))
    with open(path, "wb") as f:
        f.write(head)
        pos = 0
        for name, shape, gtype, kind in tensors:
            f.write(b"\0" * (-pos % GGUF_ALIGN))
            pos += -pos % GGUF_ALIGN
            per, nb = GGML_BYTES[gtype]
            n = int(np.prod(shape))
            if kind == "1":
                f.write(np.ones(n, dtype=np.float32).tobytes())
            else:
                pool.write(f, gtype, n)
            pos += n // per * nb
        assert f.tell() == len(head) + off, (f.tell(), len(head), off)
    return len(head) + off


def gguf_model(arch, layers, vocab, wtype, seed, out_root, tiny=False, shape="8b"):
    """Writes the random qwen3 / qwen3moe GGUF; returns its path and size in bytes. tiny: the
    same tensors at small widths and the vocabulary's own size (padded to a multiple of 64) and
    special ids, for tests."""
    V, hd, eps, ctx = 151936, 128, 1e-6, 40960
    if arch == "qwen3" and shape == "1.5b":
        D, H, Hkv, F, E, k, Fe = 1536, 12, 2, 8960, 0, 0, 0
        name = "qwen3-1.5b-shape-random-%dl" % layers
    elif arch == "qwen3":
        D, H, Hkv, F, E, k, Fe = 4096, 32, 8, 12288, 0, 0, 0
        name = "qwen3-8b-random-%dl" % layers
    else:
        D, H, Hkv, F, E, k, Fe = 2048, 32, 4, 6144, 128, 8, 768
        name = "qwen3-30b-a3b-random-%dl" % layers
    if tiny:
        V, hd, ctx, D, H, Hkv, F = None, 64, 4096, 256, 4, 2, 512
        E, k, Fe = (16, 2, 256) if E else (0, 0, 0)
        name = "%s-random-tiny-%dl" % (arch, layers)
    toks, V = tokenizer_kvs(vocab, V, None if tiny else 151643, None if tiny else 151645)
    tname = {GGML_F16: "f16", GGML_Q8_0: "q8_0", Q4_K_M: "Q4_K_M"}[wtype]
    a = arch
    kvs = {  # the keys llama.cpp's converter writes for these arches
        "general.architecture": (KV_STR, a, None),
        "general.name": (KV_STR, name, None),
        "general.file_type": (KV_U32, FILE_TYPE[wtype], None),
        "general.quantization_version": (KV_U32, 2, None),
        f"{a}.context_length": (KV_U32, ctx, None),
        f"{a}.embedding_length": (KV_U32, D, None),
        f"{a}.block_count": (KV_U32, layers, None),
        f"{a}.feed_forward_length": (KV_U32, F, None),
        f"{a}.attention.head_count": (KV_U32, H, None),
        f"{a}.attention.head_count_kv": (KV_U32, Hkv, None),
        f"{a}.attention.key_length": (KV_U32, hd, None),
        f"{a}.attention.value_length": (KV_U32, hd, None),
        f"{a}.rope.freq_base": (KV_F32, 1000000.0, None),
        f"{a}.attention.layer_norm_rms_epsilon": (KV_F32, eps, None),
    }
    if E:
        kvs[f"{a}.expert_count"] = (KV_U32, E, None)
        kvs[f"{a}.expert_used_count"] = (KV_U32, k, None)
        kvs[f"{a}.expert_feed_forward_length"] = (KV_U32, Fe, None)
    kvs.update(toks)
    tensors = gguf_tensors(arch, layers, D, V, H, Hkv, hd, F, E, Fe, wtype)
    out_root.mkdir(parents=True, exist_ok=True)
    path = out_root / f"{name}-{tname}.gguf"
    return path, write_gguf(path, kvs, tensors, seed)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("arch", choices=["qwen36", "gemma4", "qwen3", "qwen3moe"])
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--bits", type=int, default=4)
    ap.add_argument("--group", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=None)
    ap.add_argument("--gguf", metavar="VOCAB_GGUF", default=None,
                    help="qwen3 / qwen3moe: write one GGUF file, its tokenizer from VOCAB_GGUF")
    ap.add_argument("--gguf-type", choices=["f16", "q8_0", "q4_k_m"], default="f16")
    ap.add_argument("--tiny", action="store_true", help="--gguf: small widths, for tests")
    ap.add_argument("--shape", choices=["8b", "1.5b"], default="8b",
                    help="qwen3 --gguf: Qwen3-8B's widths, or Qwen2.5-1.5B's (hidden 1536, 12 / 2 heads, MLP 8960, 28 layers)")
    a = ap.parse_args()
    layers = a.layers or {"qwen36": 4, "gemma4": 6, "qwen3": 28 if a.shape == "1.5b" else 36, "qwen3moe": 48}[a.arch]
    root = Path(a.out) if a.out else Path(os.environ.get("SARAGOSSA_CACHE_DIR") or Path.home() / ".cache" / "saragossa") / "random"
    if a.gguf:
        if a.arch not in ("qwen3", "qwen3moe"):
            raise SystemExit("--gguf: only qwen3 and qwen3moe")
        t0 = time.time()
        wtype = {"f16": GGML_F16, "q8_0": GGML_Q8_0, "q4_k_m": Q4_K_M}[a.gguf_type]
        path, n = gguf_model(a.arch, layers, a.gguf, wtype, a.seed, root, a.tiny, a.shape)
        dt = time.time() - t0
        print(f"{path}  ({n / 1e9:.2f} GB in {dt:.1f} s, {n / 1e9 / dt:.2f} GB/s)")
        return
    builders = {"qwen36": qwen36, "gemma4": gemma4, "qwen3": qwen3, "qwen3moe": qwen3moe}
    name, cfg, m = builders[a.arch](layers, a.bits, a.group, a.seed)
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg, indent=1))
    n = m.w.write(d / "model.safetensors")
    print(f"{d}  ({n / 1e9:.2f} GB of tensors)")


if __name__ == "__main__":
    main()
