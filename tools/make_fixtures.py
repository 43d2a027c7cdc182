#!/usr/bin/env python3
"""Build the reference fixtures: tiny random models and their float32 reference outputs.

For every architecture family the engine reads, this script builds a tiny model with Hugging Face
transformers, fills it with seeded random weights rounded to bf16, runs the reference forward in
float32 on the CPU (eager attention, eager experts) and writes one directory per fixture:

    tests/fixtures/<name>/config.json        the config as save_pretrained writes it, "dtype": "bfloat16";
                                             MLX variants add "quantization" and "quantization_config"
                                             ({"group_size": G, "bits": B})
    tests/fixtures/<name>/model.safetensors  the weights, bf16, under the names save_pretrained writes
                                             by default (tied weights appear once; experts as below)
    tests/fixtures/<name>/ref.safetensors    the reference, computed in float32 on exactly the stored values

ref.safetensors holds, by kind (metadata: seed, library versions, margins):
    causal LMs  input_ids int32 [T]; logits float32 [T, vocab] (every position); greedy int32 [12] (greedy
                continuation of input_ids, full recompute at every step, no stop at EOS); greedy_margins
                float32 [12] (top-1 minus top-2 logit at each greedy step)
    whisper     input_features float32 [n_mels, frames]; encoder_output float32 [frames/2, d_model];
                decoder_input_ids int32 [Td]; logits float32 [Td, vocab]; greedy int32 [12]; greedy_margins
    bert        input_ids int32 [T]; attention_mask int32 [T]; last_hidden_state float32 [T, hidden];
                pooled float32 [hidden] (mean of last_hidden_state over positions whose mask is 1);
                pooler_output float32 [hidden] (BERT's tanh pooler on the first token)

MLX variants (<base>_mlx_q<bits>_g<group>) store every Linear and Embedding weight whose input dimension
is a multiple of the group size in the MLX affine layout: per group of G consecutive inputs of a row,
w = scale * q + bias with q in [0, 2^bits); W.weight is uint32 [out, in*bits/32], element j of a row
at bit j*bits of the row's little-endian bit stream; W.scales and W.biases are bf16 [out, in/G]. Norms
and biases stay bf16. The reference of a variant runs on the DEQUANTIZED weights, computed in float32 as
float32(scale) * q + float32(bias) (product rounded, then sum rounded), so it is exact for the file.

MoE experts. transformers 5 holds a layer's experts as two stacked parameters, mlp.experts.gate_up_proj
[E, 2F, D] (each expert's F gate rows, then its F up rows) and mlp.experts.down_proj [E, D, F]. Its
save_pretrained writes by default (save_original_format=True) the layout a family's checkpoints were first
published in, so the fixtures hold:
    qwen3_moe, qwen3_5_moe_text, qwen3_next   one tensor per expert (mlp.experts.N.{gate,up,down}_proj.weight)
    gemma4_text_moe                           stacked (experts.gate_up_proj, experts.down_proj: no other layout)
    <base>_stacked (the three Qwen ones)      stacked as transformers 5 holds them: the base's files with the
                                              experts rewritten by tools/restack_experts.py (same values, same
                                              config.json and ref.safetensors), checked here against what
                                              save_pretrained(save_original_format=False) writes and reloaded
                                              with transformers
tools/restack_experts.py makes the _stacked copies without torch.

Every weight is drawn with numpy (PCG64) from the fixture's seed, rounded to bf16 (round to nearest
even), and the model runs in float32 on those values. The spread (std 1/sqrt(fan_in), 3/sqrt(hidden)
for untied embeddings and output heads; tied families a small embedding and a larger final norm, see
TIED_SMALL) gives logits several units wide. A seed is kept only if the greedy
continuation has a top-1 margin of at least MIN_GREEDY_MARGIN at every step, at least
MIN_DISTINCT_GREEDY distinct tokens, every MoE router separates its k-th and (k+1)-th expert by at least
MIN_ROUTER_GAP, and the logits are not near-uniform; otherwise the next seed is tried.

Regenerate (needs torch and transformers 5.17; a CPU is enough, a few seconds per fixture):

    python3 tools/make_fixtures.py --out tests/fixtures            # all fixtures
    python3 tools/make_fixtures.py --out tests/fixtures --only qwen3 llama_mlx_q4_g32
    python3 tools/make_fixtures.py --list

The output is deterministic: the same script and library versions give the same bytes (one CPU thread,
deterministic algorithms, safetensors written with sorted keys and no timestamps). Check it by running
twice into two directories and comparing `sha256sum` of every file. An architecture the installed
transformers does not support is skipped with the reason printed. tests/e2e/test_fixtures.py checks the
fixtures without torch; tests/fixtures/MANIFEST.json lists the sha256 of every fixture file.
"""

import argparse
import hashlib
import json
import math
import os
import shutil
import struct
import sys
import tempfile
import traceback
import zlib

import numpy as np

PROMPT_LEN = 13
BERT_LEN = 12
WHISPER_PROMPT = 4
GREEDY_LEN = 12
MAX_SEED_TRIES = 200
MIN_GREEDY_MARGIN = 0.05
MIN_DISTINCT_GREEDY = 3
MIN_ROUTER_GAP = 1e-3
MIN_LOGIT_STD = 1.0

# ---------------------------------------------------------------------------------------------------
# Fixture specs: tiny configs, one per family (plus MLX-quantized variants of two dense ones).


def _lm(**kw):
    base = dict(
        vocab_size=320,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    base.update(kw)
    return base


LLAMA = _lm(
    max_position_embeddings=131072,  # llama3 rope scaling wants it above original_max_position_embeddings
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
    rope_parameters=dict(
        rope_type="llama3",
        rope_theta=500000.0,
        factor=8.0,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
        original_max_position_embeddings=8192,
    ),
)
QWEN3 = _lm(
    vocab_size=384,
    num_hidden_layers=3,
    head_dim=32,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
)
LINEAR_ATTN = dict(
    linear_conv_kernel_dim=4,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
)
# Tied embeddings: the output head is the token embedding, so a token's own embedding left in the residual
# stream votes for that token again (its self dot product sums over all hidden dims); with a large
# embedding the greedy continuation only repeats the last token. These families get a small embedding
# (about an eighth of the residual's scale, less where the family multiplies it by sqrt(hidden)) and a
# final norm scaled up so the logits still span several units (logit std ~ 8 * embed_std * final_norm).
TIED_SMALL = dict(embed_std=0.1, final_norm=3.75)
TIED_SCALED = dict(embed_std=0.03, final_norm=12.5)  # Gemma: embeddings multiplied by sqrt(hidden) = 8
HYBRID_LAYERS = ["linear_attention", "linear_attention", "linear_attention", "full_attention"]

SPECS = [
    dict(name="llama", kind="causal", config="LlamaConfig", args=LLAMA),
    dict(
        name="mistral",
        kind="causal",
        config="MistralConfig",
        args=_lm(
            sliding_window=None,
            tie_word_embeddings=False,
            rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
        ),
    ),
    dict(
        name="qwen2",
        kind="causal",
        config="Qwen2Config",
        args=_lm(tie_word_embeddings=True, rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
        **TIED_SMALL,
    ),
    dict(name="qwen3", kind="causal", config="Qwen3Config", args=QWEN3, **TIED_SMALL),
    dict(
        name="qwen3_moe",
        kind="causal",
        config="Qwen3MoeConfig",
        args=_lm(
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=64,
            norm_topk_prob=True,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            tie_word_embeddings=False,
            rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
        ),
    ),
    dict(
        name="gemma3_text",
        kind="causal",
        config="Gemma3TextConfig",
        args=_lm(
            num_hidden_layers=4,
            pad_token_id=0,
            eos_token_id=1,
            bos_token_id=2,
            query_pre_attn_scalar=16,
            sliding_window=8,
            layer_types=["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
            rope_parameters={
                "full_attention": dict(rope_type="default", rope_theta=1000000.0),
                "sliding_attention": dict(rope_type="default", rope_theta=10000.0),
            },
            tie_word_embeddings=True,
        ),
        **TIED_SCALED,
    ),
    dict(
        name="gemma4_text",
        kind="causal",
        config="Gemma4TextConfig",
        args=_lm(
            num_hidden_layers=4,
            pad_token_id=0,
            eos_token_id=1,
            bos_token_id=2,
            global_head_dim=32,
            sliding_window=8,
            layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            hidden_size_per_layer_input=16,
            vocab_size_per_layer_input=320,
            num_kv_shared_layers=2,
            use_double_wide_mlp=True,
            attention_k_eq_v=False,
            final_logit_softcapping=30.0,
            tie_word_embeddings=True,
        ),
        **TIED_SCALED,
    ),
    dict(
        name="gemma4_text_moe",
        kind="causal",
        config="Gemma4TextConfig",
        args=_lm(
            num_hidden_layers=3,
            pad_token_id=0,
            eos_token_id=1,
            bos_token_id=2,
            global_head_dim=32,
            num_global_key_value_heads=1,
            attention_k_eq_v=True,
            sliding_window=8,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"],
            hidden_size_per_layer_input=0,
            enable_moe_block=True,
            num_experts=4,
            top_k_experts=2,
            moe_intermediate_size=32,
            final_logit_softcapping=30.0,
            tie_word_embeddings=True,
        ),
        **TIED_SCALED,
    ),
    dict(
        name="qwen3_5_moe_text",
        kind="causal",
        config="Qwen3_5MoeTextConfig",
        args=_lm(
            num_hidden_layers=4,
            head_dim=32,
            layer_types=HYBRID_LAYERS,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=64,
            num_experts=8,
            num_experts_per_tok=2,
            tie_word_embeddings=False,
            rope_parameters=dict(
                rope_type="default",
                rope_theta=10000000.0,
                partial_rotary_factor=0.25,
                mrope_section=[2, 1, 1],
                mrope_interleaved=True,
            ),
            **LINEAR_ATTN,
        ),
        drop=("intermediate_size",),
    ),
    dict(
        name="qwen3_next",
        kind="causal",
        config="Qwen3NextConfig",
        args=_lm(
            num_hidden_layers=4,
            head_dim=32,
            layer_types=HYBRID_LAYERS,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=64,
            num_experts=8,
            num_experts_per_tok=2,
            norm_topk_prob=True,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            tie_word_embeddings=False,
            rope_parameters=dict(rope_type="default", rope_theta=10000000.0, partial_rotary_factor=0.25),
            **LINEAR_ATTN,
        ),
    ),
    dict(
        name="whisper",
        kind="whisper",
        config="WhisperConfig",
        args=dict(
            vocab_size=320,
            num_mel_bins=80,
            d_model=64,
            encoder_layers=2,
            encoder_attention_heads=4,
            encoder_ffn_dim=128,
            decoder_layers=2,
            decoder_attention_heads=4,
            decoder_ffn_dim=128,
            max_source_positions=16,
            max_target_positions=64,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            decoder_start_token_id=3,
            suppress_tokens=None,
            begin_suppress_tokens=None,
        ),
        **TIED_SMALL,
    ),
    dict(
        name="bert",
        kind="bert",
        config="BertConfig",
        args=dict(
            vocab_size=320,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            max_position_embeddings=64,
            type_vocab_size=2,
            pad_token_id=0,
        ),
    ),
    # RoBERTa-style positions (from pad_token_id + 1) and one token type
    dict(
        name="xlm_roberta",
        kind="bert",
        config="XLMRobertaConfig",
        model="XLMRobertaModel",
        cls_id=0,
        args=dict(
            vocab_size=320,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            max_position_embeddings=66,
            type_vocab_size=1,
            layer_norm_eps=1e-5,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
        ),
    ),
    # MPNet: relative position bias buckets shared by the layers; 40 tokens reach the log-spaced buckets
    dict(
        name="mpnet",
        kind="bert",
        config="MPNetConfig",
        model="MPNetModel",
        cls_id=0,
        seq_len=40,
        args=dict(
            vocab_size=320,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            max_position_embeddings=66,
            relative_attention_num_buckets=32,
            layer_norm_eps=1e-5,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
        ),
    ),
]

for _base, _args, _cfg, _opts in (("llama", LLAMA, "LlamaConfig", {}), ("qwen3", QWEN3, "Qwen3Config", TIED_SMALL)):
    for _bits, _group in ((4, 32), (8, 64)):
        SPECS.append(
            dict(
                name=f"{_base}_mlx_q{_bits}_g{_group}",
                kind="causal",
                config=_cfg,
                args=_args,
                quant=(_bits, _group),
                **_opts,
            )
        )


# Fixtures whose experts save_pretrained writes one tensor per expert: each gets a <name>_stacked copy.
STACKED_FROM = ("qwen3_moe", "qwen3_5_moe_text", "qwen3_next")


def spec_args(spec):
    args = json.loads(json.dumps(spec["args"]))  # a deep copy: configs may edit lists in place
    for key in spec.get("drop", ()):
        args.pop(key, None)
    return args


# ---------------------------------------------------------------------------------------------------
# bf16 and MLX affine quantization in numpy (the bit layout the engine reads).


def bf16_bits(x):
    """float32 array -> uint16 bf16 bit patterns, round to nearest even (finite inputs)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def bf16_round(x):
    return bf16_to_f32(bf16_bits(x))


def pack_bits(q, bits):
    """uint32 codes [rows, n] (each < 2^bits) -> uint32 [rows, n*bits/32]; code j at bit j*bits."""
    rows, n = q.shape
    if (n * bits) % 32:
        raise ValueError(f"row of {n} codes of {bits} bits is not a whole number of uint32 words")
    stream = ((q[:, :, None] >> np.arange(bits, dtype=np.uint32)) & 1).reshape(rows, n * bits // 32, 32)
    words = (stream.astype(np.uint64) << np.arange(32, dtype=np.uint64)).sum(axis=-1)
    return words.astype(np.uint32)


def unpack_bits(words, bits, n):
    rows = words.shape[0]
    stream = (words[:, :, None] >> np.arange(32, dtype=np.uint32)) & 1
    stream = stream.reshape(rows, -1)[:, : n * bits].reshape(rows, n, bits)
    return (stream << np.arange(bits, dtype=np.uint32)).sum(axis=-1).astype(np.uint32)


def mlx_quantize(w, bits, group):
    """w float32 [out, in] -> (packed uint32, scales bf16 bits, biases bf16 bits, dequantized float32).

    Min/max affine per group: bias = min, scale = (max - min) / (2^bits - 1), both rounded to bf16 first,
    codes rounded against the rounded pair so the dequantized weight is what a reader of the file gets."""
    out, n = w.shape
    if n % group:
        raise ValueError(f"input dimension {n} is not a multiple of group size {group}")
    top = (1 << bits) - 1
    g = w.reshape(out, n // group, group).astype(np.float32)
    lo, hi = g.min(axis=-1), g.max(axis=-1)
    scale_bits = bf16_bits(np.maximum((hi - lo) / np.float32(top), np.float32(1e-6)))
    bias_bits = bf16_bits(lo)
    scale, bias = bf16_to_f32(scale_bits)[..., None], bf16_to_f32(bias_bits)[..., None]
    q = np.clip(np.rint((g - bias) / scale), 0, top).astype(np.uint32)
    deq = (scale * q.astype(np.float32)).astype(np.float32) + bias
    return pack_bits(q.reshape(out, n), bits), scale_bits, bias_bits, deq.reshape(out, n).astype(np.float32)


# ---------------------------------------------------------------------------------------------------
# safetensors writer: sorted keys, aligned data, no timestamps (byte-identical across runs).

_DTYPES = {  # numpy storage dtype -> safetensors dtype tag (bf16 travels as uint16 bit patterns)
    "F32": np.float32,
    "F16": np.float16,
    "I32": np.int32,
    "U32": np.uint32,
    "BF16": np.uint16,
    "I64": np.int64,
}


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: (tag, numpy array)}. Data ordered by element size (largest first) then name, so
    every tensor starts aligned to its element size once the header is padded to 8 bytes."""
    order = sorted(tensors, key=lambda k: (-np.dtype(_DTYPES[tensors[k][0]]).itemsize, k))
    header, blobs, offset = {}, [], 0
    for name in order:
        tag, arr = tensors[name]
        data = np.ascontiguousarray(arr, dtype=_DTYPES[tag]).astype(np.dtype(_DTYPES[tag]).newbyteorder("<"))
        raw = data.tobytes()
        header[name] = {"dtype": tag, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


# ---------------------------------------------------------------------------------------------------
# Model construction, random weights, reference forward.


def seed_for(name):
    return (zlib.crc32(name.encode()) % 100000) * 100


def fan_in_gain(name, shape):
    """std of a weight of rank >= 2: gain / sqrt(fan_in). Heads and embeddings get gain 3 so logits span
    several units; routers a larger gain so top-k choices are clear-cut."""
    fan_in = int(np.prod(shape[1:])) if "conv" in name else int(shape[-1])
    gain = 1.0
    if "lm_head" in name or "proj_out" in name or name.endswith("embed_tokens.weight"):
        gain = 3.0
    elif name.endswith("router.proj.weight"):
        gain = 8.0  # Gemma 4 scales the router input by hidden^-0.5 before the projection
    elif name.endswith("mlp.gate.weight"):
        gain = 2.0
    return gain / math.sqrt(fan_in)


FINAL_NORMS = ("model.norm.weight", "model.decoder.layer_norm.weight")


def fill_weights(model, rng, spec):
    import torch

    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            shape = tuple(p.shape)
            if "encoder.embed_positions" in name:
                continue  # Whisper's encoder positions are sinusoids fixed by the architecture
            if p.ndim <= 1:
                default = p.detach().cpu().numpy().astype(np.float64)
                if name in FINAL_NORMS and "final_norm" in spec:
                    # scale x * w, or x * (1 + w) where the family's norm weights start at 0
                    centre = spec["final_norm"] - (1.0 if abs(default.mean()) < 0.5 else 0.0)
                    vals = centre + rng.normal(0.0, 0.1, shape)
                elif name.endswith("A_log"):
                    vals = np.log(rng.uniform(0.1, 1.5, shape))
                elif name.endswith("bias") and not name.endswith("dt_bias"):
                    vals = rng.normal(0.0, 0.1, shape)
                else:  # norm scales, dt_bias, router scales: keep the family's centre (0 or 1), perturb it
                    vals = default + rng.normal(0.0, 0.1, shape)
            elif name.endswith("embed_tokens.weight") and "embed_std" in spec:
                vals = rng.normal(0.0, spec["embed_std"], shape)
            else:
                vals = rng.normal(0.0, fan_in_gain(name, shape), shape)
            p.copy_(torch.from_numpy(np.asarray(vals, dtype=np.float32)))
        for name, b in sorted(model.named_buffers()):
            if name.endswith("layer_scalar"):  # Gemma 4 per-layer output scale (saved with the weights)
                b.copy_(torch.from_numpy(rng.uniform(0.5, 1.0, tuple(b.shape)).astype(np.float32)))
        for name, t in model.state_dict().items():
            if t.is_floating_point():
                t.copy_(torch.from_numpy(bf16_round(t.detach().cpu().numpy())))


def build_model(spec, seed):
    import torch
    import transformers

    cfg_cls = getattr(transformers, spec["config"], None)
    if cfg_cls is None:
        raise RuntimeError(f"transformers {transformers.__version__} has no {spec['config']}")
    config = cfg_cls(**spec_args(spec))
    kw = dict(attn_implementation="eager", dtype=torch.float32)
    if spec["kind"] == "causal":
        model = transformers.AutoModelForCausalLM.from_config(config, experts_implementation="eager", **kw)
    elif spec["kind"] == "whisper":
        model = transformers.WhisperForConditionalGeneration._from_config(config, **kw)
    else:
        model = getattr(transformers, spec.get("model", "BertModel"))._from_config(config, **kw)
    model.eval()
    fill_weights(model, np.random.default_rng(seed), spec)
    return model


def saved_state(model, original_format=True):
    """What save_pretrained writes: ({name: float32 numpy}, config dict). original_format=False: the model's
    own parameter layout (transformers 5's stacked experts) instead of the published one."""
    import safetensors.torch

    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, save_original_format=original_format)
        names = sorted(f for f in os.listdir(tmp) if f.endswith(".safetensors"))
        if not names:
            raise RuntimeError("save_pretrained wrote no safetensors file")
        state = {}
        for f in names:
            for k, v in safetensors.torch.load_file(os.path.join(tmp, f)).items():
                state[k] = v.float().numpy() if v.is_floating_point() else v.numpy()
        with open(os.path.join(tmp, "config.json")) as f:
            config = json.load(f)
    return state, config


class RouterProbe:
    """Records the smallest gap between the k-th and (k+1)-th router score over every routed token."""

    def __init__(self, model):
        self.min_gap = math.inf
        self.handles = []
        for m in model.modules():
            if type(m).__name__.endswith("Router"):
                self.handles.append(m.register_forward_hook(self.hook))

    def hook(self, module, inputs, output):
        import torch

        scores = output[0] if isinstance(output, tuple) else output
        k = getattr(module, "top_k", None) or module.config.top_k_experts
        s = torch.sort(scores.detach().float().reshape(-1, scores.shape[-1]), dim=-1, descending=True).values
        if s.shape[-1] > k:
            self.min_gap = min(self.min_gap, float((s[:, k - 1] - s[:, k]).min()))

    def close(self):
        for h in self.handles:
            h.remove()


def lm_logits(model, ids):
    import torch

    with torch.no_grad():
        return model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False).logits[0].float()


def whisper_logits(model, feats, ids):
    import torch

    with torch.no_grad():
        out = model(input_features=feats, decoder_input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False)
        return out.logits[0].float()


def greedy(step, ids):
    """Greedy continuation by full recompute: step(seq) -> logits [len(seq), vocab]."""
    seq, toks, margins = list(ids), [], []
    for _ in range(GREEDY_LEN):
        last = step(seq)[-1]
        top = last.topk(2)
        toks.append(int(top.indices[0]))
        margins.append(float(top.values[0] - top.values[1]))
        seq.append(toks[-1])
    return np.array(toks, dtype=np.int32), np.array(margins, dtype=np.float32)


def reference(spec, model, seed, vocab):
    """-> ({name: (tag, array)}, quality dict)."""
    import torch

    rng = np.random.default_rng([seed, 7])
    probe = RouterProbe(model)
    q = {}
    try:
        if spec["kind"] == "causal":
            ids = rng.integers(3, vocab, PROMPT_LEN).astype(np.int32)
            logits = lm_logits(model, ids.tolist())
            toks, margins = greedy(lambda s: lm_logits(model, s), ids.tolist())
            ref = {"input_ids": ("I32", ids), "logits": ("F32", logits.numpy()), "greedy": ("I32", toks),
                   "greedy_margins": ("F32", margins)}
        elif spec["kind"] == "whisper":
            cfg = model.config
            frames = 2 * cfg.max_source_positions
            feats = np.clip(rng.normal(0.0, 0.5, (cfg.num_mel_bins, frames)), -1.5, 1.5).astype(np.float32)
            ft = torch.from_numpy(feats)[None]
            ids = np.concatenate([[cfg.decoder_start_token_id], rng.integers(3, vocab, WHISPER_PROMPT - 1)])
            ids = ids.astype(np.int32)
            with torch.no_grad():
                enc = model.model.encoder(ft).last_hidden_state[0].float()
            logits = whisper_logits(model, ft, ids.tolist())
            toks, margins = greedy(lambda s: whisper_logits(model, ft, s), ids.tolist())
            ref = {"input_features": ("F32", feats), "encoder_output": ("F32", enc.numpy()),
                   "decoder_input_ids": ("I32", ids), "logits": ("F32", logits.numpy()),
                   "greedy": ("I32", toks), "greedy_margins": ("F32", margins)}
        else:
            n = spec.get("seq_len", BERT_LEN)
            ids = rng.integers(3, vocab, n).astype(np.int32)
            ids[0] = spec.get("cls_id", 1)  # a CLS-like first token
            mask = np.ones(n, dtype=np.int32)
            mask[-3:] = 0  # padded tail: the pooled vector must ignore it
            if "cls_id" in spec:
                ids[-3:] = spec["args"]["pad_token_id"]  # RoBERTa-style: positions follow the pad ids
            with torch.no_grad():
                out = model(input_ids=torch.from_numpy(ids.astype(np.int64))[None],
                            attention_mask=torch.from_numpy(mask.astype(np.int64))[None])
            hidden = out.last_hidden_state[0].float()
            m = torch.from_numpy(mask.astype(np.float32))[:, None]
            pooled = (hidden * m).sum(0) / m.sum()
            ref = {"input_ids": ("I32", ids), "attention_mask": ("I32", mask),
                   "last_hidden_state": ("F32", hidden.numpy()), "pooled": ("F32", pooled.numpy()),
                   "pooler_output": ("F32", out.pooler_output[0].float().numpy())}
            q["min_hidden_std"] = float(hidden.std(dim=-1).min())
            return ref, q
    finally:
        probe.close()
    q["min_greedy_margin"] = float(margins.min())
    q["distinct_greedy"] = int(len(set(toks.tolist())))
    q["min_logit_std"] = float(logits.std(dim=-1).min())
    q["min_router_gap"] = probe.min_gap
    return ref, q


def quality_ok(q):
    if "min_hidden_std" in q:
        return q["min_hidden_std"] > 0.1
    return (q["min_greedy_margin"] >= MIN_GREEDY_MARGIN and q["distinct_greedy"] >= MIN_DISTINCT_GREEDY
            and q["min_logit_std"] >= MIN_LOGIT_STD and q["min_router_gap"] >= MIN_ROUTER_GAP)


def quantize_into(model, state, bits, group):
    """Quantize every Linear/Embedding weight of `state` whose input dim is a multiple of `group`; load
    the dequantized weights into `model`. -> {name: (tag, array)} for model.safetensors."""
    import torch

    out = {}
    with torch.no_grad():
        for name, w in sorted(state.items()):
            module = None
            if name.endswith(".weight") and w.ndim == 2 and w.shape[1] % group == 0:
                try:
                    module = model.get_submodule(name[: -len(".weight")])
                except AttributeError:
                    module = None
            if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
                packed, scales, biases, deq = mlx_quantize(w, bits, group)
                stem = name[: -len(".weight")]
                out[name] = ("U32", packed)
                out[stem + ".scales"] = ("BF16", scales)
                out[stem + ".biases"] = ("BF16", biases)
                module.weight.copy_(torch.from_numpy(deq))
            else:
                out[name] = bf16_tensor(name, w)
    return out


def bf16_tensor(name, w):
    if w.dtype == np.int64:
        return ("I64", w)  # an integer buffer save_pretrained keeps: stored as written
    if w.dtype != np.float32:
        raise RuntimeError(f"{name}: unexpected tensor type {w.dtype}")
    bits = bf16_bits(w)
    if not np.array_equal(bf16_to_f32(bits), w):
        raise RuntimeError(f"{name}: saved value is not exactly bf16 (a weight escaped rounding)")
    return ("BF16", bits)


def check_reload(spec, model, outdir, ref):
    """Load the written directory back with transformers and compare with the reference."""
    import torch

    kw = dict(attn_implementation="eager", dtype=torch.float32)
    if spec["kind"] == "causal":
        kw["experts_implementation"] = "eager"
    again = type(model).from_pretrained(outdir, **kw).eval()
    if spec["kind"] == "causal":
        got = lm_logits(again, ref["input_ids"][1].tolist()).numpy()
        want = ref["logits"][1]
    elif spec["kind"] == "whisper":
        ft = torch.from_numpy(ref["input_features"][1])[None]
        got = whisper_logits(again, ft, ref["decoder_input_ids"][1].tolist()).numpy()
        want = ref["logits"][1]
    else:
        with torch.no_grad():
            got = again(input_ids=torch.from_numpy(ref["input_ids"][1].astype(np.int64))[None],
                        attention_mask=torch.from_numpy(ref["attention_mask"][1].astype(np.int64))[None]
                        ).last_hidden_state[0].numpy()
        want = ref["last_hidden_state"][1]
    diff = float(np.abs(got - want).max())
    if diff > 1e-4:
        raise RuntimeError(f"reloading the written files gives outputs {diff:g} away from the reference")
    return diff


def make_fixture(spec, out_root, versions):
    import torch

    name = spec["name"]
    quant = spec.get("quant")
    base_seed = seed_for(name)
    vocab = spec["args"]["vocab_size"]
    for attempt in range(MAX_SEED_TRIES):
        seed = base_seed + attempt
        torch.manual_seed(seed)
        model = build_model(spec, seed)
        state, config = saved_state(model)
        if quant:
            weights = quantize_into(model, state, *quant)
        else:
            weights = {k: bf16_tensor(k, v) for k, v in state.items()}
        ref, q = reference(spec, model, seed, vocab)
        if quality_ok(q):
            break
        print(f"  {name}: seed {seed} rejected {json.dumps(q)}", flush=True)
    else:
        raise RuntimeError(f"no seed in {MAX_SEED_TRIES} tries met the quality bar")

    config["dtype"] = "bfloat16"
    if quant:
        config["quantization"] = {"group_size": quant[1], "bits": quant[0]}
        config["quantization_config"] = dict(config["quantization"])
    meta = dict(versions, seed=seed, seed_tries=attempt + 1, fixture=name,
                **{k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in q.items()})
    if quant:
        meta["dequantization"] = "float32(scale) * q + float32(bias), float32 product then float32 sum"

    outdir = os.path.join(out_root, name)
    if os.path.isdir(outdir):
        shutil.rmtree(outdir)
    os.makedirs(outdir)
    with open(os.path.join(outdir, "config.json"), "w") as f:
        f.write(json.dumps(config, indent=2, sort_keys=True) + "\n")
    write_safetensors(os.path.join(outdir, "model.safetensors"), weights, {"format": "pt"})
    write_safetensors(os.path.join(outdir, "ref.safetensors"), ref, meta)
    verify_written(outdir, weights, ref)
    meta["reload_max_diff"] = "n/a (MLX layout)" if quant else f"{check_reload(spec, model, outdir, ref):.3g}"
    size = sum(os.path.getsize(os.path.join(outdir, f)) for f in os.listdir(outdir))
    info = dict(name=name, size=size, **{k: meta[k] for k in sorted(meta) if k not in versions})
    if name in STACKED_FROM:
        return [info, make_stacked(spec, model, out_root, ref, info)]
    return [info]


def make_stacked(spec, model, out_root, ref, info):
    """<name>_stacked: the written fixture with its experts restacked by tools/restack_experts.py, which must
    hold exactly what save_pretrained(save_original_format=False) writes, and reload to the reference."""
    import restack_experts

    name = spec["name"] + "_stacked"
    src, outdir = os.path.join(out_root, spec["name"]), os.path.join(out_root, name)
    restack_experts.restack_folder(src, outdir)
    got, _ = restack_experts.read_safetensors(os.path.join(outdir, "model.safetensors"))
    state, _ = saved_state(model, original_format=False)
    want = {k: bf16_tensor(k, v) for k, v in state.items()}
    if sorted(got) != sorted(want):
        raise RuntimeError(f"{name}: restacked names differ from transformers' own layout: "
                           f"{sorted(set(got) ^ set(want))[:6]}")
    for k, (tag, arr) in want.items():
        if got[k][0] != tag or got[k][1].shape != arr.shape or got[k][1].tobytes() != arr.tobytes():
            raise RuntimeError(f"{name}: {k} differs from what transformers writes in its own layout")
    diff = check_reload(spec, model, outdir, ref)
    size = sum(os.path.getsize(os.path.join(outdir, f)) for f in os.listdir(outdir))
    return dict(info, name=name, size=size, reload_max_diff=f"{diff:.3g}")


def verify_written(outdir, weights, ref):
    """Check the written files: the safetensors library must list the same names, dtypes and shapes, and
    each tensor's bytes (found through the header) must be the intended ones."""
    from safetensors import safe_open

    for fname, tensors in (("model.safetensors", weights), ("ref.safetensors", ref)):
        path = os.path.join(outdir, fname)
        with safe_open(path, framework="pt") as f:
            if sorted(f.keys()) != sorted(tensors):
                raise RuntimeError(f"{fname}: names read back differ")
            for k in f.keys():
                sl = f.get_slice(k)
                if sl.get_dtype() != tensors[k][0] or list(sl.get_shape()) != list(tensors[k][1].shape):
                    raise RuntimeError(f"{fname}: {k} reads back as {sl.get_dtype()} {sl.get_shape()}")
        with open(path, "rb") as fh:
            raw = fh.read()
        (hlen,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8 : 8 + hlen])
        for k, (tag, arr) in tensors.items():
            b, e = header[k]["data_offsets"]
            if raw[8 + hlen + b : 8 + hlen + e] != np.ascontiguousarray(arr, dtype=_DTYPES[tag]).tobytes():
                raise RuntimeError(f"{fname}: bytes of {k} differ")


def write_manifest(out_root):
    manifest = {}
    for d in sorted(os.listdir(out_root)):
        p = os.path.join(out_root, d)
        if not os.path.isfile(os.path.join(p, "ref.safetensors")):
            continue
        files = {}
        for f in sorted(os.listdir(p)):
            with open(os.path.join(p, f), "rb") as fh:
                files[f] = hashlib.sha256(fh.read()).hexdigest()
        manifest[d] = files
    with open(os.path.join(out_root, "MANIFEST.json"), "w") as f:
        f.write(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def self_test():
    """Checks of the numpy helpers that need neither torch nor transformers."""
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, 1000).astype(np.float32)
    r = bf16_round(x)
    assert np.all(np.abs(r - x) <= np.abs(x) * 2.0**-8), "bf16 rounding error too large"
    assert np.array_equal(bf16_round(r), r), "bf16 rounding is not idempotent"
    for bits in (2, 3, 4, 5, 6, 8):
        q = rng.integers(0, 1 << bits, (3, 64)).astype(np.uint32)
        assert np.array_equal(unpack_bits(pack_bits(q, bits), bits, 64), q), f"pack/unpack {bits}"
    q = np.arange(8, dtype=np.uint32)[None]
    assert pack_bits(q, 4)[0, 0] == 0x76543210, "4-bit codes must fill a word from its low bits"
    w = rng.normal(0, 0.1, (4, 64)).astype(np.float32)
    for bits, group in ((4, 32), (8, 64)):
        packed, s, b, deq = mlx_quantize(w, bits, group)
        assert packed.shape == (4, 64 * bits // 32) and s.shape == (4, 64 // group)
        err = np.abs(deq - w).max()
        assert err <= bf16_to_f32(s).max() * 0.51 + 1e-3, f"dequantization error {err}"
    print("self-test ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="fixtures root (e.g. tests/fixtures)")
    ap.add_argument("--only", nargs="*", help="build only these fixtures")
    ap.add_argument("--list", action="store_true", help="list fixture names and exit")
    ap.add_argument("--self-test", action="store_true", help="check the numpy helpers and exit")
    ap.add_argument("--configs-only", action="store_true", help="construct every config (no torch) and exit")
    args = ap.parse_args()
    if args.list:
        for s in SPECS:
            print(s["name"])
            if s["name"] in STACKED_FROM:
                print(s["name"] + "_stacked")
        return 0
    if args.self_test:
        self_test()
        return 0
    if args.configs_only:
        import transformers

        bad = 0
        for s in SPECS:
            try:
                cfg = getattr(transformers, s["config"])(**spec_args(s))
                print(f"{s['name']}: ok {cfg.model_type}")
            except Exception as e:  # noqa: BLE001 - report every failing config, then fail
                bad += 1
                print(f"{s['name']}: FAILED {type(e).__name__}: {e}")
        return 1 if bad else 0
    if not args.out:
        ap.error("--out is required")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the reference runs on the CPU in float32
    import torch
    import transformers

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True, warn_only=True)
    versions = {"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0],
                "generator": "tools/make_fixtures.py"}
    print(f"transformers {transformers.__version__}, torch {torch.__version__}", flush=True)
    self_test()
    os.makedirs(args.out, exist_ok=True)
    # <name>_stacked is made with <name>
    only = {n.removesuffix("_stacked") for n in args.only} if args.only else None
    specs = [s for s in SPECS if not only or s["name"] in only]
    done, skipped = [], []
    for spec in specs:
        try:
            for info in make_fixture(spec, args.out, versions):
                done.append(info)
                print(f"OK   {json.dumps(info)}", flush=True)
        except Exception as e:  # noqa: BLE001 - an unsupported family is skipped with its reason
            reason = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            skipped.append((spec["name"], reason))
            traceback.print_exc()
            print(f"SKIP {spec['name']}: {reason}", flush=True)
    write_manifest(args.out)
    total = sum(i["size"] for i in done)
    print("\nfixture                  bytes  seed     tries  min_margin")
    for i in done:
        print(f"{i['name']:<22} {i['size']:>7}  {i['seed']:<8} {i['seed_tries']:>5}  {i.get('min_greedy_margin', '-')}")
    print(f"total {total} bytes in {len(done)} fixtures")
    for n, r in skipped:
        print(f"skipped {n}: {r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
